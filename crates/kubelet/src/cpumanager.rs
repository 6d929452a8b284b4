//! The CPU manager (upstream's cm/cpumanager): under the `static` policy a
//! Guaranteed pod's containers with integer CPU requests get CPUs of their
//! own, given at admission, set as the container's cpuset at creation, and
//! the others' cpusets (the shared pool) follow by a reconcile every
//! cpuManagerReconcilePeriod (CRI UpdateContainerResources), as upstream's.
//! The choice is `kubelet_core::cpumanager`'s; the state is kept in
//! `<root-dir>/cpu_manager_state` in upstream's format, also under `none`
//! (the policy that wrote it must be the one configured, or the kubelet
//! does not start: upstream's rule, since the containers' cpusets came
//! from it).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::cpumanager::{
    AllocError, CpuState, NONE, Options, STATIC, StaticPolicy, Topology, reserved_cpus, state::FILE,
};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::topologymanager::{BitMask, ProviderHints};
use kubelet_core::types::PodUid;
use kubelet_core::types::keys::{CONTAINER_NAME, POD_UID};
use kubelet_cri::client::CriClient;
use kubelet_cri::v1 as cri;
use parking_lot::Mutex;

use crate::config::SourcesReady;

/// The alignment metrics' labels for what the CPU manager aligns.
const ALIGN_SCOPE: &str = "container";
const ALIGN_PHYSICAL_CPU: &str = "physical_cpu";
const ALIGN_UNCORE_CACHE: &str = "uncore_cache";

/// What the configuration says of the CPU manager.
#[derive(Clone, Debug, Default)]
pub struct CpuSettings {
    pub policy: String,
    pub options: std::collections::BTreeMap<String, String>,
    /// reservedSystemCPUs.
    pub reserved_system_cpus: BTreeSet<u32>,
    /// systemReserved's plus kubeReserved's cpu, in millis.
    pub reserve_millis: i64,
}

/// The CPU manager; cheap to clone.
#[derive(Clone, Debug)]
pub struct CpuManager(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    settings: CpuSettings,
    topology: Topology,
    file: PathBuf,
    metrics: KubeletMetrics,
    /// Set by [`CpuManager::start`] under the static policy.
    policy: OnceLock<StaticPolicy>,
    state: Mutex<CpuState>,
    /// The cpuset each container was last given (by container ID).
    applied: Mutex<HashMap<String, String>>,
    /// Until every pod source has spoken, a pod not seen yet may hold
    /// CPUs: nothing is released before (upstream's sourcesReady check).
    sources: OnceLock<SourcesReady>,
    /// Pods holding CPUs that the last reconcile found inactive.
    suspects: Mutex<HashSet<String>>,
}

/// Where sysfs describes CPUs and NUMA nodes.
const SYS: &str = "/sys/devices/system";

/// A file under [`SYS`], if it can be read.
pub fn read_sys(path: &str) -> Option<String> {
    std::fs::read_to_string(Path::new(SYS).join(path)).ok()
}

/// The IDs of this host's NUMA nodes (the `node/nodeN` directories).
pub fn host_numa_nodes() -> Vec<u32> {
    std::fs::read_dir(Path::new(SYS).join("node"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .collect()
}

/// The CPU topology of this host, from sysfs.
pub fn host_topology() -> Topology {
    let online = read_sys("cpu/online")
        .and_then(|s| kubelet_core::cpuset::parse(s.trim()).ok())
        .unwrap_or_default();
    Topology::from_sysfs(&online, &host_numa_nodes(), read_sys)
}

impl CpuManager {
    pub fn new(
        settings: CpuSettings,
        topology: Topology,
        root_dir: &Path,
        metrics: KubeletMetrics,
    ) -> Self {
        CpuManager(Arc::new(Inner {
            state: Mutex::new(CpuState::new(&settings.policy, BTreeSet::new())),
            settings,
            topology,
            file: root_dir.join(FILE),
            metrics,
            policy: OnceLock::new(),
            applied: Mutex::new(HashMap::new()),
            sources: OnceLock::new(),
            suspects: Mutex::new(HashSet::new()),
        }))
    }

    /// The pod sources' readiness: CPUs of inactive pods are released
    /// once every source has given its pods.
    pub fn watch_sources(&self, ready: SourcesReady) {
        let _ = self.0.sources.set(ready);
    }

    /// Return the CPUs of containers no active pod has, once the sources
    /// are ready; true when the state changed.
    fn release_inactive(
        &self,
        policy: &StaticPolicy,
        state: &mut CpuState,
        active: &[Arc<Pod>],
    ) -> bool {
        self.sources_ready() && policy.release_inactive(state, &active_containers(active))
    }

    /// Whether every pod source has given its pods.
    fn sources_ready(&self) -> bool {
        self.0.sources.get().is_some_and(SourcesReady::all_ready)
    }

    /// Whether the static policy runs (exclusive CPUs, a reconcile loop).
    pub fn is_static(&self) -> bool {
        self.0.policy.get().is_some()
    }

    /// Start (upstream's NewManager then Start): the static policy's
    /// options and reserved CPUs, then the state file restored (or made)
    /// and checked. An error stops the kubelet, in upstream's words.
    pub fn start(&self) -> Result<(), String> {
        let s = &self.0.settings;
        let policy = match s.policy.as_str() {
            STATIC => {
                let options = Options::parse(&s.options)
                    .map_err(|e| format!("new static policy error: {e}"))?;
                let reserved = reserved_cpus(
                    &self.0.topology,
                    options,
                    &s.reserved_system_cpus,
                    s.reserve_millis,
                )?;
                tracing::info!(reserved = %kubelet_core::cpuset::format(&reserved), ?options, "Reserved CPUs not available for exclusive assignment");
                Some(StaticPolicy {
                    topology: self.0.topology.clone(),
                    reserved,
                    options,
                })
            }
            _ => None,
        };
        let name = if policy.is_some() { STATIC } else { NONE };
        let restore_err = |e: String| {
            format!(
                "start cpu manager error: could not restore state from checkpoint: {e}, please drain this node and delete the CPU manager checkpoint file {:?} before restarting Kubelet",
                self.0.file.display().to_string()
            )
        };
        let mut state = match std::fs::read(&self.0.file) {
            Ok(bytes) => CpuState::restore(&bytes, name).map_err(|e| restore_err(e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                CpuState::new(name, BTreeSet::new())
            }
            Err(e) => return Err(restore_err(e.to_string())),
        };
        if let Some(p) = &policy {
            p.validate(&mut state)
                .map_err(|e| format!("start cpu manager error: {e}"))?;
        }
        crate::files::write_file(&self.0.file, &state.encode())
            .map_err(|e| restore_err(e.to_string()))?;
        if let Some(p) = &policy {
            // The alignment series exist from the start (upstream's
            // initializeMetrics).
            let m = &self.0.metrics;
            m.container_aligned_compute_resources_failures
                .add(&[ALIGN_SCOPE, ALIGN_PHYSICAL_CPU], 0.0);
            for boundary in [ALIGN_PHYSICAL_CPU, ALIGN_UNCORE_CACHE] {
                m.container_aligned_compute_resources
                    .add(&[ALIGN_SCOPE, boundary], 0.0);
            }
            self.publish(p, &state);
        }
        *self.0.state.lock() = state;
        if let Some(p) = policy {
            let _ = self.0.policy.set(p);
        }
        Ok(())
    }

    /// Return the CPUs of pods no longer active, once the pod sources are
    /// ready (upstream's removeStaleState, before each admission's hints
    /// and allocation).
    pub fn release_stale(&self, active: &[Arc<Pod>]) {
        let Some(policy) = self.0.policy.get() else {
            return;
        };
        let mut state = self.0.state.lock();
        if self.release_inactive(policy, &mut state, active) {
            self.save(&state);
        }
    }

    /// Where container `c` of `pod` could have its CPUs (upstream's
    /// GetTopologyHints): no preference under `none`.
    pub fn hints(&self, pod: &Pod, c: &Container) -> ProviderHints {
        let Some(policy) = self.0.policy.get() else {
            return ProviderHints::new();
        };
        policy.hints(&self.0.state.lock(), PodUid::of(pod).as_str(), pod, c)
    }

    /// Where the whole pod could have its CPUs (the pod scope).
    pub fn pod_hints(&self, pod: &Pod) -> ProviderHints {
        let Some(policy) = self.0.policy.get() else {
            return ProviderHints::new();
        };
        policy.pod_hints(&self.0.state.lock(), PodUid::of(pod).as_str(), pod)
    }

    /// Give container `c` of `pod` its exclusive CPUs (upstream's Allocate,
    /// from the topology manager's admission), on the NUMA nodes of
    /// `affinity` first.
    pub fn allocate(
        &self,
        pod: &Pod,
        c: &Container,
        affinity: Option<BitMask>,
    ) -> Result<(), AllocError> {
        let Some(policy) = self.0.policy.get() else {
            return Ok(());
        };
        if kubelet_core::cpumanager::guaranteed_cpus(pod, c) == 0 {
            return Ok(());
        }
        let mut state = self.0.state.lock();
        let before = state.clone();
        let allocated = policy.allocate(&mut state, PodUid::of(pod).as_str(), pod, c, affinity);
        self.count(policy, allocated.is_ok());
        if let Err(e) = &allocated {
            tracing::error!(pod = ?pod.metadata.name, container = %c.name, error = %e, "Unable to allocate CPUs");
        }
        if *state != before {
            self.count_uncore(policy, allocated.as_ref());
            self.save(&state);
        }
        allocated.map(|_| ())
    }

    /// The cpuset container `c` of `pod` is created with (upstream's
    /// PreCreateContainer): its exclusive CPUs, given now if admission did
    /// not give them (a static pod, which only API pods' admission skips),
    /// or the shared pool; None under `none` (the runtime's default).
    pub fn cpuset_for(&self, pod: &Pod, c: &Container) -> Result<Option<String>, AllocError> {
        let Some(policy) = self.0.policy.get() else {
            return Ok(None);
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let held = self
            .0
            .state
            .lock()
            .entries
            .get(uid)
            .is_some_and(|cs| cs.contains_key(&c.name));
        if !held && kubelet_core::cpumanager::guaranteed_cpus(pod, c) > 0 {
            let mut state = self.0.state.lock();
            let allocated = policy.allocate(&mut state, uid, pod, c, None);
            self.count(policy, allocated.is_ok());
            self.count_uncore(policy, allocated.as_ref());
            allocated?;
            self.save(&state);
        }
        Ok(self.cpuset(uid, &c.name))
    }

    /// The cpuset container `name` of pod `uid` runs on: its own CPUs, or
    /// the shared pool; None under `none` (the runtime's default).
    fn cpuset(&self, uid: &str, name: &str) -> Option<String> {
        self.0.policy.get()?;
        let state = self.0.state.lock();
        let cpus = state
            .entries
            .get(uid)
            .and_then(|cs| cs.get(name))
            .unwrap_or(&state.default);
        Some(kubelet_core::cpuset::format(cpus))
    }

    /// Remember what a new container was given (it needs no update then).
    pub fn created(&self, id: &str, cpuset: Option<&str>) {
        if let Some(c) = cpuset {
            self.0.applied.lock().insert(id.to_owned(), c.to_owned());
        }
    }

    /// Container `name` of pod `uid`'s exclusive CPUs (PodResources).
    pub fn exclusive(&self, uid: &str, name: &str) -> Vec<i64> {
        let state = self.0.state.lock();
        state
            .entries
            .get(uid)
            .and_then(|cs| cs.get(name))
            .map(|cpus| cpus.iter().map(|c| i64::from(*c)).collect())
            .unwrap_or_default()
    }

    /// The CPUs exclusive CPUs are given from (PodResources'
    /// GetAllocatableResources): all but the reserved ones.
    pub fn allocatable(&self) -> Vec<i64> {
        match self.0.policy.get() {
            Some(p) => p
                .topology
                .all()
                .difference(&p.reserved)
                .map(|c| i64::from(*c))
                .collect(),
            None => Vec::new(),
        }
    }

    /// Reconcile every `period` until cancelled (static policy only).
    pub async fn run(
        self,
        cri: CriClient,
        active: impl Fn() -> Vec<Arc<Pod>>,
        period: std::time::Duration,
        token: tokio_util::sync::CancellationToken,
    ) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tick.tick() => {}
            }
            if self.sources_ready() {
                self.reconcile(&cri, &active()).await;
            }
        }
    }

    /// One reconcile (upstream's reconcileState): CPUs of inactive pods
    /// returned, then every running container of an active pod given the
    /// cpuset it should have, where it has another.
    pub async fn reconcile(&self, cri: &CriClient, active: &[Arc<Pod>]) {
        let Some(policy) = self.0.policy.get() else {
            return;
        };
        {
            // A pod is given back its CPUs' worth only once it is inactive
            // at two reconciles in a row: one admitted a moment ago may not
            // be a worker's yet, and so not among the active pods.
            let mut state = self.0.state.lock();
            let is_active = active_containers(active);
            let inactive: HashSet<String> = state
                .entries
                .iter()
                .filter(|(uid, cs)| cs.keys().all(|name| !is_active(uid, name)))
                .map(|(uid, _)| uid.clone())
                .collect();
            let before = std::mem::replace(&mut *self.0.suspects.lock(), inactive);
            let released = self.sources_ready()
                && policy.release_inactive(&mut state, &|uid: &str, name: &str| {
                    is_active(uid, name) || !before.contains(uid)
                });
            if released {
                self.save(&state);
            }
        }
        let running = cri::ContainerFilter {
            state: Some(cri::ContainerStateValue {
                state: cri::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        };
        let containers = match cri.list_containers(Some(running)).await {
            Ok(cs) => cs,
            Err(e) => {
                tracing::error!(error = %e, "cpu manager: listing the running containers");
                return;
            }
        };
        let active_uids: HashSet<&str> = active
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        let mut seen = HashSet::new();
        for c in containers {
            let (Some(uid), Some(name)) = (c.labels.get(POD_UID), c.labels.get(CONTAINER_NAME))
            else {
                continue;
            };
            seen.insert(c.id.clone());
            if !active_uids.contains(uid.as_str()) {
                continue;
            }
            let Some(want) = self.cpuset(uid, name) else {
                continue;
            };
            if self.0.applied.lock().get(&c.id) == Some(&want) {
                continue;
            }
            let update = cri::LinuxContainerResources {
                cpuset_cpus: want.clone(),
                ..Default::default()
            };
            match cri.update_container_resources(&c.id, update).await {
                Ok(()) => {
                    tracing::info!(pod_uid = %uid, container = %name, cpuset = %want, "cpu manager: updated the container's cpuset");
                    self.0.applied.lock().insert(c.id.clone(), want);
                }
                Err(e) => {
                    tracing::error!(pod_uid = %uid, container = %name, error = %e, "ReconcileState: failed to update container");
                }
            }
        }
        self.0.applied.lock().retain(|id, _| seen.contains(id));
    }

    fn save(&self, state: &CpuState) {
        if let Err(e) = crate::files::write_file(&self.0.file, &state.encode()) {
            tracing::error!(file = %self.0.file.display(), error = %e, "Failed to save checkpoint");
        }
        if let Some(p) = self.0.policy.get() {
            self.publish(p, state);
        }
    }

    /// One container's allocation, as upstream counts it: a pinning
    /// request, an error if it failed, and under full-pcpus-only whether
    /// it got whole physical cores.
    fn count(&self, policy: &StaticPolicy, ok: bool) {
        let m = &self.0.metrics;
        m.cpu_manager_pinning_requests.inc(&[]);
        if !ok {
            m.cpu_manager_pinning_errors.inc(&[]);
        }
        if policy.options.full_pcpus_only {
            let counter = if ok {
                &m.container_aligned_compute_resources
            } else {
                &m.container_aligned_compute_resources_failures
            };
            counter.inc(&[ALIGN_SCOPE, ALIGN_PHYSICAL_CPU]);
        }
    }

    /// A new allocation whose CPUs share one uncore cache counts as aligned
    /// there (upstream's updateMetricsOnAllocate, whatever the options).
    fn count_uncore(
        &self,
        policy: &StaticPolicy,
        allocated: Result<&Option<BTreeSet<u32>>, &AllocError>,
    ) {
        if let Ok(Some(cpus)) = allocated
            && policy.topology.aligned_at_uncore(cpus)
        {
            self.0
                .metrics
                .container_aligned_compute_resources
                .inc(&[ALIGN_SCOPE, ALIGN_UNCORE_CACHE]);
        }
    }

    /// The static policy's gauges (upstream's): the CPUs exclusive ones
    /// are still given from, those given, and those given per NUMA node
    /// (every node of the topology, 0 where none: upstream leaves a node's
    /// last count once its CPUs are all returned).
    fn publish(&self, policy: &StaticPolicy, state: &CpuState) {
        let m = &self.0.metrics;
        let available = state.default.difference(&policy.reserved).count();
        m.cpu_manager_shared_pool_size
            .set(&[], available as f64 * 1000.0);
        let assigned = state.assigned();
        m.cpu_manager_exclusive_cpus.set(&[], assigned.len() as f64);
        for (node, count) in policy.topology.count_per_numa(&assigned) {
            m.cpu_manager_allocation_per_numa
                .set(&[&node.to_string()], count as f64);
        }
    }
}

/// Whether a (pod UID, container name) belongs to an active pod's spec.
pub(crate) fn active_containers(active: &[Arc<Pod>]) -> impl Fn(&str, &str) -> bool + use<> {
    let names: HashSet<(String, String)> = active
        .iter()
        .flat_map(|p| {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            p.spec
                .iter()
                .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
                .map(move |c| (uid.clone(), c.name.clone()))
        })
        .collect();
    move |uid: &str, name: &str| names.contains(&(uid.to_owned(), name.to_owned()))
}

#[cfg(test)]
mod tests;
