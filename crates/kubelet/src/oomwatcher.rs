//! The OOM watcher (upstream's oom.Watcher, started with the modules that
//! need no runtime): the kernel log read from `/dev/kmsg` as it grows (from
//! the start of its ring buffer, as upstream's reads it), every OOM kill
//! logged with the memory cgroups involved, and a kill of a node out of
//! memory a `SystemOOM` node event (`kubelet_core::oom` parses). The file
//! is opened non-blocking and read until it has nothing more, then again
//! after [`POLL_PERIOD`]: tokio's AsyncFd would need unsafe code to
//! register it, and a thread blocked in read(2) or poll(2) could neither be
//! stopped by the task's token nor let paused-time tests advance. Where
//! `/dev/kmsg` cannot be opened (upstream refuses to start outside a user
//! namespace) the watcher logs why and stops.

use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use kubelet_core::oom::{OomParser, parse_kmsg};
use tokio_util::sync::CancellationToken;

use crate::events::{Involved, Recorder, WARNING};

const KMSG: &str = "/dev/kmsg";

/// How often the kernel log is read once it has nothing more.
const POLL_PERIOD: Duration = Duration::from_millis(500);

/// Records read before the task yields to others.
const BATCH: usize = 256;

/// Watch the kernel log until `cancel`.
pub async fn watch(events: Recorder, cancel: CancellationToken) {
    let kmsg = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(KMSG)
    {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(file = KMSG, error = %e, "no OOM watcher: SystemOOM events will not be reported");
            return;
        }
    };
    let node = events.node_name().to_owned();
    let mut parser = OomParser::Idle;
    // A record is at most 8 KiB (go-kmsg-parser's buffer; the kernel's
    // limit for one record is 1 KiB of text plus its dictionary).
    let mut buf = vec![0u8; 8192];
    let mut batch = 0;
    loop {
        batch += 1;
        if batch == BATCH {
            batch = 0;
            tokio::task::yield_now().await;
            if cancel.is_cancelled() {
                return;
            }
        }
        let n = match (&kmsg).read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(POLL_PERIOD) => {}
                }
                continue;
            }
            // Records overwritten before they were read: go on.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PIPE.raw_os_error()) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "OOM watcher stopped reading {KMSG}");
                return;
            }
        };
        let record = match parse_kmsg(&String::from_utf8_lossy(&buf[..n])) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "skipping a kernel log record");
                continue;
            }
        };
        let (next, oom) = std::mem::take(&mut parser).step(&record);
        parser = next;
        let Some(oom) = oom else { continue };
        tracing::info!(
            pid = oom.pid,
            process = %oom.process_name,
            cgroup = %oom.container_name,
            limit_of = %oom.victim_container_name,
            constraint = %oom.constraint,
            "OOM kill"
        );
        if let Some(message) = oom.system_oom_message() {
            events.event(
                &Involved::node(&node, Some(node.clone())),
                WARNING,
                "SystemOOM",
                message,
            );
        }
    }
}
