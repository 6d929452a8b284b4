//! The container manager (upstream's pkg/kubelet/cm), for `cgroupsPerQOS`:
//! the node-allocatable cgroup (`kubepods` under cgroupRoot) with the
//! node's allocatable limits, the QoS cgroups (`burstable`, `besteffort`)
//! whose shares follow the pods, and one `pod<uid>` cgroup per pod, made
//! before its sandbox (the sandbox's cgroup parent) and removed after its
//! processes are gone. The values are `kubelet_core::cgroups`'; the files
//! `cgroupfs`'.

mod cgroupfs;
mod system;

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::cgroups::{
    CgroupLayout, CgroupName, PodCgroupPolicy, PodCgroups, QosCgroups, ResourceConfig,
    hugepage_size_of_dir, less_reserved, limits_config, pod_resource_config, pod_uid_of,
    qos_resource_configs, resize_stages,
};
use kubelet_core::config::{
    CgroupDriver, ENFORCE_KUBE_RESERVED, ENFORCE_KUBE_RESERVED_COMPRESSIBLE, ENFORCE_PODS,
    ENFORCE_SYSTEM_RESERVED, ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE, KubeletConfiguration,
};
use kubelet_core::resources::Amounts;

use kubelet_core::types::PodUid;

pub use cgroupfs::Cgroupfs;
pub use system::SystemContainers;

use crate::events::{Involved, NORMAL, Recorder, WARNING};
use kubelet_tasks::blocking;

/// The values a pod cgroup narrows to once a resize's containers have
/// theirs.
#[derive(Debug)]
pub struct PodNarrowing {
    cgroup: CgroupName,
    config: ResourceConfig,
}

/// What the host's cgroups are, read once at start.
#[derive(Clone, Debug, Default)]
pub struct HostCgroups {
    /// None: no cgroup file system is mounted.
    pub layout: Option<CgroupLayout>,
    /// Hugepage sizes the kernel offers, in bytes.
    pub hugepage_sizes: Vec<u64>,
}

impl HostCgroups {
    /// This host's: /proc/self/mountinfo, the v2 root's controllers,
    /// /sys/kernel/mm/hugepages.
    pub fn detect() -> HostCgroups {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let controllers = std::fs::read_to_string(
            std::path::Path::new(kubelet_core::cgroups::UNIFIED_MOUNTPOINT)
                .join("cgroup.controllers"),
        )
        .unwrap_or_default();
        let mut hugepage_sizes: Vec<u64> = std::fs::read_dir("/sys/kernel/mm/hugepages")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| hugepage_size_of_dir(&e.file_name().to_string_lossy()))
            .collect();
        hugepage_sizes.sort_unstable();
        HostCgroups {
            layout: CgroupLayout::from_mountinfo(&mountinfo, &controllers),
            hugepage_sizes,
        }
    }
}

/// Where this host limits containers' swap (upstream's
/// checkSwapControllerAvailability): v1, the memory hierarchy's
/// `memory.memsw.limit_in_bytes` (swap accounting on); v2, the
/// `memory.swap.max` of the kubelet's own cgroup (the root has none).
pub fn swap_controller(layout: Option<&CgroupLayout>) -> kubelet_core::swap::SwapController {
    use kubelet_core::swap::SwapController;
    match layout {
        Some(CgroupLayout::V1 { mounts }) => mounts
            .get("memory")
            .filter(|m| m.join("memory.memsw.limit_in_bytes").exists())
            .map_or(SwapController::Unavailable, |_| SwapController::V1),
        Some(CgroupLayout::V2 { root, .. }) => {
            let own = std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|t| kubelet_core::cgroups::process_cgroup(&t, true).ok());
            own.map(|c| root.join(c.trim_start_matches('/')).join("memory.swap.max"))
                .filter(|p| p.exists())
                .map_or(SwapController::Unavailable, |_| SwapController::V2)
        }
        None => SwapController::Unavailable,
    }
}

/// Why the container manager could not do its part.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// The configuration asks for what this host cannot give.
    #[error("{0}")]
    Config(String),
    /// A cgroup could not be made, set, emptied or removed.
    #[error("{what} {name}: {source}")]
    Cgroup {
        what: &'static str,
        name: String,
        #[source]
        source: io::Error,
    },
}

fn cgroup_err(what: &'static str, name: &CgroupName) -> impl FnOnce(io::Error) -> CmError {
    let name = name.to_cgroupfs();
    move |source| CmError::Cgroup { what, name, source }
}

#[derive(Debug)]
struct Inner {
    fs: Cgroupfs,
    cgroup_root: CgroupName,
    qos: QosCgroups,
    policy: PodCgroupPolicy,
    /// The node-allocatable cgroup's values.
    node: ResourceConfig,
    /// The reserved cgroups enforced (system-reserved, kube-reserved): what
    /// each is called in events (lower case, and title case), its cgroup,
    /// its values.
    reserved: Vec<(&'static str, &'static str, CgroupName, ResourceConfig)>,
    /// Why start must fail (a configuration this host cannot run).
    refused: Option<String>,
    /// The node-allocatable limits did not hold yet: retried.
    node_pending: AtomicBool,
    /// One QoS update at a time (upstream's UpdateCgroups lock); held only
    /// inside blocking closures.
    qos_lock: Mutex<()>,
    events: Recorder,
}

/// The container manager; a no-op when cgroupsPerQOS is off.
#[derive(Clone, Debug, Default)]
pub struct ContainerManager(Option<Arc<Inner>>);

/// Whether /proc/swaps lists a swap area (more than its header line), as
/// upstream reads it.
pub fn swap_on(proc_swaps: &str) -> bool {
    proc_swaps.trim().lines().count() > 1
}

/// failSwapOn (upstream's container manager): a node with swap on stops
/// start-up unless the configuration allows it; allowed, with no
/// swapBehavior, containers get NoSwap (said once, as upstream).
pub fn check_swap(fail_swap_on: bool, swap_behavior: &str) -> Result<(), String> {
    let swaps = std::fs::read_to_string("/proc/swaps")
        .map_err(|e| format!("failed to determine if swap is on: {e}"))?;
    if swap_on(&swaps) && fail_swap_on {
        return Err(
            "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false"
                .to_owned(),
        );
    }
    if !fail_swap_on && swap_behavior.is_empty() {
        tracing::info!(
            memory_swap_behavior = swap_behavior,
            fail_swap_on,
            "NoSwap is set due to memorySwapBehavior not specified"
        );
    }
    Ok(())
}

/// Check, or set, the kernel tunables the kubelet needs (upstream's
/// setupKernelTunables at the container manager's start): a differing one
/// is set, or with `protect` (protectKernelDefaults) stops start-up; the
/// errors of all six together, as upstream aggregates them.
pub fn setup_kernel_tunables(protect: bool) -> Result<(), String> {
    use kubelet_core::sysctl::{KERNEL_TUNABLES, Tunable, kernel_tunable};
    let mut errors = Vec::new();
    for (flag, expected) in KERNEL_TUNABLES {
        let path = format!("/proc/sys/{flag}");
        let actual = match std::fs::read_to_string(&path).map(|v| v.trim().parse::<i64>()) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                errors.push(format!("{path}: {e}"));
                continue;
            }
            Err(e) => {
                errors.push(format!("open {path}: {e}"));
                continue;
            }
        };
        match kernel_tunable(flag, expected, actual, protect) {
            Tunable::Fine => {}
            Tunable::Refuse(e) => errors.push(e),
            Tunable::Modify => {
                tracing::info!(flag, expected, actual, "Updating kernel flag");
                if let Err(e) = std::fs::write(&path, expected.to_string()) {
                    errors.push(format!("write {path}: {e}"));
                }
            }
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// The node's capacity as the kubepods cgroup limits it: cpu (milli-CPUs),
/// memory (bytes), pid (the kernel's pid_max or threads-max, the smaller).
pub fn node_capacity(cpu_cores: i64, memory_bytes: i64) -> Amounts {
    // pidlimit's Stats: the smaller of pid_max and threads-max.
    let read = |f: &str| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
    };
    let pid_max = match (
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ) {
        (Some(p), Some(t)) => Some(p.min(t)),
        (p, t) => p.or(t),
    };
    let mut capacity = Amounts::from([
        ("cpu".to_owned(), cpu_cores * 1000),
        ("memory".to_owned(), memory_bytes),
    ]);
    capacity.extend(pid_max.map(|p| ("pid".to_owned(), p)));
    capacity
}

impl ContainerManager {
    /// The manager `config` asks for on `host`, for a node of `capacity`
    /// (see [`node_capacity`]): the kubepods cgroup gets the capacity less
    /// systemReserved and kubeReserved when `pods` is enforced, else the
    /// capacity.
    pub fn new(
        config: &KubeletConfiguration,
        host: &HostCgroups,
        capacity: &Amounts,
        events: Recorder,
    ) -> ContainerManager {
        if !config.cgroups_per_qos {
            return ContainerManager(None);
        }
        let refused = match (&host.layout, config.cgroup_driver) {
            (None, _) => Some(
                "cgroupsPerQOS: no cgroup file system is mounted (/proc/self/mountinfo lists \
                 none); set cgroupsPerQOS: false to run pods without pod cgroups"
                    .to_owned(),
            ),
            (Some(_), CgroupDriver::Systemd) => Some(
                "cgroupDriver: systemd: rkubelet creates pod cgroups with the cgroupfs driver \
                 only (systemd's slices are made through its D-Bus API); set cgroupDriver: \
                 cgroupfs, with the runtime's cgroup driver to match, or cgroupsPerQOS: false"
                    .to_owned(),
            ),
            _ => None,
        };
        let (system_reserved, kube_reserved) = config.reservations();
        let allocatable = if config.enforces(ENFORCE_PODS) {
            less_reserved(capacity, &[&system_reserved, &kube_reserved])
        } else {
            capacity.clone()
        };
        let mut reserved = Vec::new();
        for (full, compressible, what, title, cgroup, list) in [
            (
                ENFORCE_SYSTEM_RESERVED,
                ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
                "system reserved",
                "System Reserved",
                &config.system_reserved_cgroup,
                &system_reserved,
            ),
            (
                ENFORCE_KUBE_RESERVED,
                ENFORCE_KUBE_RESERVED_COMPRESSIBLE,
                "kube reserved",
                "Kube Reserved",
                &config.kube_reserved_cgroup,
                &kube_reserved,
            ),
        ] {
            let name = CgroupName::parse_cgroupfs(cgroup);
            if config.enforces(full) {
                reserved.push((what, title, name, limits_config(list, false)));
            } else if config.enforces(compressible) {
                let title = if what == "system reserved" {
                    "System Reserved Compressible"
                } else {
                    "Kube Reserved Compressible"
                };
                reserved.push((what, title, name, limits_config(list, true)));
            }
        }
        let layout = host.layout.clone().unwrap_or(CgroupLayout::V1 {
            mounts: Default::default(),
        });
        ContainerManager(Some(Arc::new(Inner {
            fs: Cgroupfs::new(layout, host.hugepage_sizes.clone()),
            cgroup_root: CgroupName::parse_cgroupfs(&config.cgroup_root),
            qos: QosCgroups::new(&config.cgroup_root),
            policy: PodCgroupPolicy {
                enforce_cpu_limits: config.cpu_cfs_quota,
                cpu_period: config.cpu_cfs_quota_period.as_micros() as u64,
                pod_pids_limit: config.pod_pids_limit,
            },
            node: limits_config(&allocatable, false),
            reserved,
            refused,
            node_pending: AtomicBool::new(false),
            qos_lock: Mutex::default(),
            events,
        })))
    }

    /// Whether pods get cgroups of their own.
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// How pod cgroups are set, when pods get them.
    pub fn pod_cgroup_policy(&self) -> Option<PodCgroupPolicy> {
        self.0.as_ref().map(|i| i.policy)
    }

    /// Set up the node-allocatable and QoS cgroups (upstream's setupNode
    /// and QOS manager Start, then the node-allocatable enforcement).
    pub async fn start(&self, active: Vec<Arc<Pod>>) -> Result<(), CmError> {
        let Some(inner) = self.0.clone() else {
            return Ok(());
        };
        if let Some(why) = &inner.refused {
            return Err(CmError::Config(why.clone()));
        }
        let me = inner.clone();
        let result = blocking(move || Ok(me.start(&active))).await;
        result.unwrap_or_else(|e| Err(cgroup_err("starting", &inner.qos.root)(e)))?;
        let node = inner.events.node_name().to_owned();
        let about = Involved::node(&node, Some(node.clone()));
        for (what, title, name, cfg) in &inner.reserved {
            let me = inner.clone();
            let (name2, cfg) = (name.clone(), cfg.clone());
            let set = blocking(move || {
                if !me.fs.exists(&name2) {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("cgroup {:?} has some missing paths", name2.to_cgroupfs()),
                    ));
                }
                me.fs.set(&name2, &cfg)
            })
            .await;
            match set {
                Ok(()) => inner.events.event(
                    &about,
                    NORMAL,
                    "SuccessfulNodeAllocatableEnforcement",
                    format!("Updated limits on {what} cgroup {}", name.to_cgroupfs()),
                ),
                Err(e) => {
                    let message = format!(
                        "Failed to enforce {title} Cgroup Limits on {:?}: {e}",
                        name.to_cgroupfs()
                    );
                    inner.events.event(
                        &about,
                        WARNING,
                        "FailedNodeAllocatableEnforcement",
                        message.clone(),
                    );
                    return Err(CmError::Config(message));
                }
            }
        }
        Ok(())
    }

    /// The sandbox's cgroup parent (GetPodContainerName in the cgroupfs
    /// form); empty when pods have no cgroups of their own.
    pub fn cgroup_parent(&self, pod: &Pod) -> String {
        self.0
            .as_ref()
            .and_then(|i| i.qos.pod(pod, &PodUid::of(pod).0))
            .map(|n| n.to_cgroupfs())
            .unwrap_or_default()
    }

    /// Where pod cgroups are; None when pods have none of their own.
    pub fn pod_cgroups(&self) -> Option<PodCgroups> {
        self.0.as_ref().map(|i| PodCgroups {
            layout: i.fs.layout().clone(),
            qos: i.qos.clone(),
        })
    }

    /// `f` on the manager, off the async workers; `disabled` when
    /// cgroupsPerQOS is off.
    async fn off_workers<T: Send + 'static>(
        &self,
        disabled: T,
        f: impl FnOnce(&Inner) -> Result<T, CmError> + Send + 'static,
    ) -> Result<T, CmError> {
        let Some(inner) = self.0.clone() else {
            return Ok(disabled);
        };
        let root = inner.qos.root.clone();
        blocking(move || Ok(f(&inner)))
            .await
            .unwrap_or_else(|e| Err(cgroup_err("working on", &root)(e)))
    }

    /// Whether the pod's cgroup is there (always, when disabled).
    pub async fn pod_exists(&self, pod: Arc<Pod>) -> Result<bool, CmError> {
        self.off_workers(true, move |i| Ok(i.fs.exists(&i.pod_cgroup(&pod)?)))
            .await
    }

    /// EnsureExists: the pod's cgroup made (after the QoS cgroups are
    /// updated for the `active` pods, read only then) or, when it `exists`,
    /// its values set again for the allocated `pod`: a static pod keeps its
    /// UID across an edit of its resources, and a set cut short by a crash
    /// is finished. A resize from the `actuated` pod's values that lowers
    /// one is widened first ([`resize_stages`]): the narrowing this returns
    /// is for [`ContainerManager::narrow_pod`] once the containers have
    /// theirs.
    pub async fn ensure_pod(
        &self,
        pod: Arc<Pod>,
        actuated: Arc<Pod>,
        exists: bool,
        active: impl FnOnce() -> Vec<Arc<Pod>>,
    ) -> Result<Option<PodNarrowing>, CmError> {
        let active = if exists || !self.enabled() {
            Vec::new()
        } else {
            active()
        };
        self.off_workers(None, move |i| {
            i.ensure_pod(&pod, &actuated, exists, &active)
        })
        .await
    }

    /// The memory the pod's cgroup uses now; None where it cannot be
    /// read, or when pods have no cgroups.
    pub async fn pod_memory_usage(&self, pod: Arc<Pod>) -> Option<u64> {
        self.off_workers(None, move |i| {
            let name = i.pod_cgroup(&pod)?;
            Ok(i.fs.memory_usage(&name).ok())
        })
        .await
        .ok()
        .flatten()
    }

    /// A resize's second write to a pod cgroup (see
    /// [`ContainerManager::ensure_pod`]).
    pub async fn narrow_pod(&self, narrowing: PodNarrowing) -> Result<(), CmError> {
        self.off_workers((), move |i| {
            i.fs.set(&narrowing.cgroup, &narrowing.config)
                .map_err(cgroup_err(
                    "failed to update container for",
                    &narrowing.cgroup,
                ))
        })
        .await
    }

    /// UpdateCgroups: the QoS cgroups' values for the pods now active.
    pub async fn update_qos(&self, active: Vec<Arc<Pod>>) -> Result<(), CmError> {
        self.off_workers((), move |i| i.update_qos(&active)).await
    }

    /// Destroy: kill what still runs in the pod's cgroup, then remove it,
    /// wherever its QoS class put it. Nothing there is fine.
    pub async fn destroy_pod(&self, uid: &PodUid) -> Result<(), CmError> {
        let uid = uid.0.clone();
        self.off_workers((), move |i| i.destroy_pod(&uid)).await
    }

    /// The UIDs of the pod cgroups under the QoS cgroups
    /// (GetAllPodsFromCgroups).
    pub async fn pod_uids(&self) -> io::Result<Vec<PodUid>> {
        let Some(inner) = self.0.clone() else {
            return Ok(Vec::new());
        };
        blocking(move || {
            let mut uids = BTreeSet::new();
            for parent in [&inner.qos.root, &inner.qos.burstable, &inner.qos.besteffort] {
                for child in inner.fs.children(parent)? {
                    if let Some(uid) = pod_uid_of(&child) {
                        uids.insert(PodUid(uid.to_owned()));
                    }
                }
            }
            Ok(uids.into_iter().collect())
        })
        .await
    }
}

impl Inner {
    /// SuccessfulNodeAllocatableEnforcement, or its failure, on the Node.
    fn node_event(&self, result: Result<(), &CmError>) {
        let node = self.events.node_name().to_owned();
        let about = Involved::node(&node, Some(node.clone()));
        match result {
            Ok(()) => self.events.event(
                &about,
                NORMAL,
                "SuccessfulNodeAllocatableEnforcement",
                "Updated Node Allocatable limit across pods",
            ),
            Err(e) => self.events.event(
                &about,
                WARNING,
                "FailedNodeAllocatableEnforcement",
                format!(
                    "Failed to update Node Allocatable Limits {:?}: {e}",
                    self.qos.root.to_cgroupfs()
                ),
            ),
        }
    }

    fn start(&self, active: &[Arc<Pod>]) -> Result<(), CmError> {
        if !self.cgroup_root.0.is_empty() && !self.fs.exists(&self.cgroup_root) {
            return Err(CmError::Config(format!(
                "invalid configuration: cgroup-root {:?} doesn't exist",
                self.cgroup_root.to_cgroupfs()
            )));
        }
        let root = &self.qos.root;
        if self.fs.exists(root) {
            // What it holds may be over new limits (v1 refuses a memory
            // limit below usage): warned, and retried with the QoS updates.
            if let Err(e) = self.fs.set(root, &self.node) {
                self.node_pending.store(true, Ordering::Relaxed);
                self.node_event(Err(&cgroup_err("node allocatable cgroup", root)(e)));
            } else {
                self.node_event(Ok(()));
            }
        } else {
            self.fs
                .create(root, &self.node)
                .map_err(cgroup_err("node allocatable cgroup", root))?;
            self.node_event(Ok(()));
        }
        for (name, cfg) in self.qos_configs(active) {
            if name == *root {
                continue;
            }
            if self.fs.exists(&name) {
                self.fs.set(&name, &cfg)
            } else {
                self.fs.create(&name, &cfg)
            }
            .map_err(cgroup_err("failed to create top level QOS cgroup", &name))?;
        }
        tracing::info!(
            root = %root.to_cgroupfs(),
            cgroup_version = self.fs.version(),
            "node allocatable and QoS cgroups set up"
        );
        Ok(())
    }

    fn qos_configs(&self, active: &[Arc<Pod>]) -> Vec<(CgroupName, ResourceConfig)> {
        let mut configs = qos_resource_configs(
            &self.qos,
            active.iter().map(|p| p.as_ref()),
            self.fs.hugepage_sizes(),
        );
        // Without MemoryQoS's tiered policy, cgroup v2 memory protection is
        // reset (upstream's default).
        for (name, cfg) in &mut configs {
            if *name == self.qos.burstable {
                cfg.unified.insert("memory.low".into(), "0".into());
            }
            if *name == self.qos.root {
                cfg.unified.insert("memory.min".into(), "0".into());
                cfg.unified.insert("memory.low".into(), "0".into());
            }
        }
        configs
    }

    /// The pod's cgroup name, refused for a UID that is not one path
    /// component.
    fn pod_cgroup(&self, pod: &Pod) -> Result<CgroupName, CmError> {
        let uid = PodUid::of(pod).0;
        self.qos.pod(pod, &uid).ok_or_else(|| {
            CmError::Config(format!(
                "pod UID {uid:?} cannot name a cgroup (it must be one path component)"
            ))
        })
    }

    fn update_qos(&self, active: &[Arc<Pod>]) -> Result<(), CmError> {
        let _one = self.qos_lock.lock();
        if self.node_pending.load(Ordering::Relaxed) {
            // Upstream retries the node-allocatable limits until they hold.
            let root = &self.qos.root;
            match self.fs.set(root, &self.node) {
                Ok(()) => {
                    self.node_pending.store(false, Ordering::Relaxed);
                    self.node_event(Ok(()));
                }
                Err(e) => self.node_event(Err(&cgroup_err("node allocatable cgroup", root)(e))),
            }
        }
        for (name, cfg) in self.qos_configs(active) {
            self.fs
                .set(&name, &cfg)
                .map_err(cgroup_err("updating QoS cgroup", &name))?;
        }
        Ok(())
    }

    fn ensure_pod(
        &self,
        pod: &Pod,
        actuated: &Pod,
        exists: bool,
        active: &[Arc<Pod>],
    ) -> Result<Option<PodNarrowing>, CmError> {
        let name = self.pod_cgroup(pod)?;
        let cfg = pod_resource_config(pod, &self.policy);
        if exists {
            let current = pod_resource_config(actuated, &self.policy);
            let (first, last) = resize_stages(&current, &cfg);
            self.fs
                .set(&name, &first)
                .map_err(cgroup_err("failed to update container for", &name))?;
            return Ok(last.map(|config| PodNarrowing {
                cgroup: name,
                config,
            }));
        }
        if let Err(e) = self.update_qos(active) {
            tracing::info!(error = %e, "Failed to update QoS cgroups while syncing pod");
        }
        self.fs
            .create(&name, &cfg)
            .map_err(cgroup_err("failed to create container for", &name))?;
        Ok(None)
    }

    fn destroy_pod(&self, uid: &str) -> Result<(), CmError> {
        // A UID that cannot name a cgroup never had one.
        for name in self.qos.pod_candidates(uid).into_iter().flatten() {
            for pid in self.fs.pids(&name) {
                kill(pid).map_err(cgroup_err(
                    "failed to kill all the processes attached to",
                    &name,
                ))?;
            }
            self.fs
                .destroy(&name)
                .map_err(cgroup_err("failed to delete cgroup paths for", &name))?;
        }
        Ok(())
    }
}

/// SIGKILL one process; one already gone is fine.
fn kill(pid: i32) -> io::Result<()> {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return Ok(());
    };
    match rustix::process::kill_process(pid, rustix::process::Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod swap_tests {
    use super::swap_on;

    #[test]
    fn swap_is_on_when_proc_swaps_lists_an_area() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert!(!swap_on(header));
        assert!(!swap_on(""));
        assert!(swap_on(&format!(
            "{header}/swapfile                               file\t\t1048572\t\t0\t\t-2\n"
        )));
    }
}
