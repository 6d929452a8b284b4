//! Memory cgroup threshold notifications (cgroup v1; upstream's
//! CgroupNotifier on Linux, for kernelMemcgNotification): an eventfd
//! registered through the cgroup's `cgroup.event_control` for
//! `memory.usage_in_bytes` crossing a threshold. The kernel signals it on
//! each crossing, either way; dropping the notifier closes the eventfd,
//! which unregisters it.
//!
//! The eventfds are waited on with poll(2) on the blocking pool, in slices
//! of [`POLL_SLICE`]: tokio's reactor would take them only through an
//! `unsafe` registration (AsyncFd::new is deprecated as unsound), and the
//! workspace forbids unsafe code. A slice bounds how long a shutdown waits
//! for the thread.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec, eventfd, poll};

const USAGE: &str = "memory.usage_in_bytes";
const EVENT_CONTROL: &str = "cgroup.event_control";
/// The longest one blocking wait lasts.
pub const POLL_SLICE: Duration = Duration::from_secs(1);

pub struct MemcgNotifier {
    efd: Arc<OwnedFd>,
    /// Open while the threshold is registered on it.
    _usage: File,
}

impl MemcgNotifier {
    /// Register `threshold` (bytes of usage) on the v1 memory cgroup at
    /// `cgroup`. Blocking (cgroup file writes): call off the async workers.
    pub fn register(cgroup: &Path, threshold: i64) -> io::Result<MemcgNotifier> {
        let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        let usage = File::open(cgroup.join(USAGE))?;
        OpenOptions::new()
            .write(true)
            .open(cgroup.join(EVENT_CONTROL))?
            .write_all(
                format!("{} {} {threshold}", efd.as_raw_fd(), usage.as_raw_fd()).as_bytes(),
            )?;
        Ok(MemcgNotifier {
            efd: Arc::new(efd),
            _usage: usage,
        })
    }
}

/// Which of `notifiers` fired within [`POLL_SLICE`] (its count read), if
/// any. Blocking: run on the blocking pool.
fn poll_slice(efds: &[Arc<OwnedFd>]) -> io::Result<Option<usize>> {
    let mut fds: Vec<PollFd<'_>> = efds
        .iter()
        .map(|fd| PollFd::new(fd.as_ref(), PollFlags::IN))
        .collect();
    let slice = Timespec {
        tv_sec: POLL_SLICE.as_secs() as i64,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&slice)) {
        Ok(0) | Err(rustix::io::Errno::INTR) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(e.into()),
    }
    let Some(i) = fds.iter().position(|f| f.revents().contains(PollFlags::IN)) else {
        return Ok(None);
    };
    let mut count = [0u8; 8];
    match rustix::io::read(efds[i].as_ref(), &mut count) {
        Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(Some(i)),
        Err(e) => Err(e.into()),
    }
}

/// Wait up to `timeout` for one of `notifiers` to fire: which one, or
/// None when the time is up (or the wait failed, which is logged).
pub async fn wait_any(notifiers: &[(String, MemcgNotifier)], timeout: Duration) -> Option<&str> {
    let efds: Vec<Arc<OwnedFd>> = notifiers.iter().map(|(_, n)| n.efd.clone()).collect();
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        let fds = efds.clone();
        match kubelet_tasks::blocking(move || poll_slice(&fds)).await {
            Ok(Some(i)) => return Some(notifiers[i].0.as_str()),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "Eviction manager: waiting on the memcg notifiers");
                tokio::time::sleep_until(deadline).await;
                return None;
            }
        }
    }
    None
}
