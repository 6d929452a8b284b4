//! The system containers (upstream's `systemContainers` of the container
//! manager): `kubeletCgroups`, the cgroup the kubelet moves itself into,
//! and `systemCgroups`, the one every non-kernel process left in the root
//! cgroup is moved into; both made when missing and checked again every
//! minute. Without `kubeletCgroups`, the cgroup the kubelet was started in
//! is read every 5 minutes instead. Both are the `kubelet` and `misc`
//! system containers of `/stats/summary`.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::cgroups::{CgroupLayout, CgroupName, process_cgroup};
use kubelet_core::config::KubeletConfiguration;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::{Cgroupfs, HostCgroups};
use kubelet_tasks::blocking;

/// How often configured system containers are checked (upstream's
/// ensureState period).
const ENSURE_PERIOD: Duration = Duration::from_secs(60);
/// How often the kubelet's own cgroup is read when none is configured
/// (upstream's periodicTasks).
const DETECT_PERIOD: Duration = Duration::from_secs(5 * 60);
/// Passes over the root cgroup's processes before giving up for this round
/// (processes fork while they are moved).
const SYSTEM_PASSES: usize = 11;

/// The system containers; inert without a cgroup file system.
#[derive(Clone, Debug, Default)]
pub struct SystemContainers(Option<Arc<Inner>>);

#[derive(Debug)]
struct Inner {
    fs: Cgroupfs,
    /// kubeletCgroups.
    kubelet: Option<CgroupName>,
    /// systemCgroups.
    system: Option<CgroupName>,
    /// The cgroup whose processes go to `system`: the root.
    root: CgroupName,
    /// The kubelet's cgroup as last read, when not configured.
    detected: Mutex<Option<CgroupName>>,
}

impl SystemContainers {
    /// The system containers `config` asks for on `host` (its validation
    /// refused systemCgroups "/").
    pub fn new(config: &KubeletConfiguration, host: &HostCgroups) -> Self {
        SystemContainers::with_root(config, host, CgroupName::default())
    }

    /// As [`SystemContainers::new`], the processes of `root` going to
    /// systemCgroups (tests use a cgroup of their own).
    pub fn with_root(config: &KubeletConfiguration, host: &HostCgroups, root: CgroupName) -> Self {
        let named = |s: &str| (!s.is_empty()).then(|| CgroupName::parse_cgroupfs(s));
        let Some(layout) = host.layout.clone() else {
            return SystemContainers(None);
        };
        SystemContainers(Some(Arc::new(Inner {
            fs: Cgroupfs::new(layout, host.hugepage_sizes.clone()),
            kubelet: named(&config.kubelet_cgroups),
            system: named(&config.system_cgroups),
            root,
            detected: Mutex::new(None),
        })))
    }

    /// Keep the system containers as configured until cancelled: at once,
    /// then every minute (every 5 minutes when only the kubelet's cgroup
    /// is read). What fails is logged and tried again, as upstream.
    pub async fn run(self, cancel: CancellationToken) {
        let Some(inner) = self.0 else {
            return;
        };
        let period = if inner.kubelet.is_some() || inner.system.is_some() {
            ENSURE_PERIOD
        } else {
            DETECT_PERIOD
        };
        loop {
            let me = inner.clone();
            match blocking(move || Ok(me.ensure())).await {
                Ok(errors) => {
                    for e in errors {
                        tracing::info!(error = %e, "Failed to ensure state");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "system containers: check did not run"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
        }
    }

    /// One pass, blocking: see [`SystemContainers::run`].
    pub fn ensure_now(&self) -> Vec<String> {
        self.0.as_ref().map(|i| i.ensure()).unwrap_or_default()
    }

    /// The cgroup file system's layout, when there is one.
    pub fn layout(&self) -> Option<&CgroupLayout> {
        self.0.as_ref().map(|i| i.fs.layout())
    }

    /// The summary's system containers besides `pods`: `kubelet` (the
    /// configured cgroup, else the one last read) and `misc`
    /// (systemCgroups).
    pub fn stats_cgroups(&self) -> Vec<(&'static str, CgroupName)> {
        let Some(inner) = &self.0 else {
            return Vec::new();
        };
        let kubelet = inner
            .kubelet
            .clone()
            .or_else(|| inner.detected.lock().clone());
        [("kubelet", kubelet), ("misc", inner.system.clone())]
            .into_iter()
            .filter_map(|(name, cgroup)| cgroup.map(|c| (name, c)))
            .collect()
    }
}

impl Inner {
    fn ensure(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if let Some(system) = &self.system
            && let Err(e) = self.ensure_system(system)
        {
            errors.push(e);
        }
        let pid = std::process::id() as i32;
        match &self.kubelet {
            Some(kubelet) => {
                if let Err(e) = self.ensure_in(kubelet, pid) {
                    errors.push(e);
                }
            }
            None => match self.cgroup_of(pid) {
                Ok(name) => *self.detected.lock() = Some(name),
                Err(e) => errors.push(format!("Failed to find cgroups of kubelet: {e}")),
            },
        }
        errors
    }

    fn cgroup_of(&self, pid: i32) -> Result<CgroupName, String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .map_err(|e| format!("reading /proc/{pid}/cgroup: {e}"))?;
        process_cgroup(&text, self.fs.version() == 2).map(|p| CgroupName::parse_cgroupfs(&p))
    }

    /// `pid` in `cgroup`, made when missing; a process outside the host's
    /// PID namespace is left where it is (upstream's
    /// ensureProcessInContainerWithOOMScore: a cgroup of its that cannot be
    /// read is an error, and it is moved all the same).
    fn ensure_in(&self, cgroup: &CgroupName, pid: i32) -> Result<(), String> {
        if !in_host_pid_namespace(pid)? {
            tracing::debug!(pid, "PID is not running in the host namespace");
            return Ok(());
        }
        let mut errors = Vec::new();
        let current = match self.cgroup_of(pid) {
            Ok(c) if &c == cgroup => return Ok(()),
            Ok(c) => c.to_cgroupfs(),
            Err(e) => {
                errors.push(format!("failed to find container of PID {pid}: {e}"));
                String::new()
            }
        };
        if let Err(e) = self
            .make(cgroup)
            .and_then(|()| self.fs.add_process(cgroup, pid))
        {
            errors.push(format!(
                "failed to move PID {pid} (in {current:?}) to {:?}: {e}",
                cgroup.to_cgroupfs()
            ));
        }
        // As Go's aggregate prints them.
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(format!("[{}]", errors.join(", "))),
        }
    }

    /// Every non-kernel process of the root cgroup but PID 1 moved into
    /// `system` (upstream's ensureSystemCgroups): passes until none is left,
    /// the last pass's error kept.
    fn ensure_system(&self, system: &CgroupName) -> Result<(), String> {
        self.make(system).map_err(|e| {
            format!(
                "failed to create the system container {:?}: {e}",
                system.to_cgroupfs()
            )
        })?;
        let mut last = None;
        for _ in 0..SYSTEM_PASSES {
            let pids = match self.fs.own_pids(&self.root) {
                Ok(p) => p,
                Err(e) => {
                    last = Some(format!("failed to list PIDs for root: {e}"));
                    continue;
                }
            };
            let movable: Vec<i32> = pids
                .into_iter()
                .filter(|&p| p != 1 && !is_kernel_pid(p))
                .collect();
            if movable.is_empty() {
                return Ok(());
            }
            tracing::debug!(?movable, "Moving non-kernel processes");
            for pid in movable {
                if let Err(e) = self.fs.add_process(system, pid) {
                    last = Some(format!(
                        "failed to move PID {pid} into the system container {:?}: {e}",
                        system.to_cgroupfs()
                    ));
                }
            }
        }
        last.map_or(Ok(()), Err)
    }

    /// `cgroup` made when missing, with no limits set (upstream's
    /// createManager: SkipDevices, no resources): an existing one, a
    /// systemd slice, keeps its values.
    fn make(&self, cgroup: &CgroupName) -> io::Result<()> {
        self.fs.make(cgroup)
    }
}

/// Whether `pid` shares PID 1's PID namespace (upstream's
/// isProcessRunningInHost). Where PID 1's cannot be read (an init that
/// hides it, as these machines' VM init does), whether `pid` is in no PID
/// namespace nested in the one /proc shows (its `NSpid` has one PID).
fn in_host_pid_namespace(pid: i32) -> Result<bool, String> {
    let own = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .map_err(|_| format!("failed to find pid namespace of process {pid}"))?;
    match std::fs::read_link("/proc/1/ns/pid") {
        Ok(init) => Ok(init == own),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map_err(|_| "failed to find pid namespace of init process".to_owned())?;
            Ok(status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .is_some_and(|ids| ids.split_whitespace().count() == 1))
        }
        Err(_) => Err("failed to find pid namespace of init process".to_owned()),
    }
}

/// A kernel thread has no executable.
fn is_kernel_pid(pid: i32) -> bool {
    matches!(
        std::fs::read_link(format!("/proc/{pid}/exe")),
        Err(e) if e.kind() == io::ErrorKind::NotFound
    )
}
