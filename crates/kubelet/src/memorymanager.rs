//! The memory manager (upstream's cm/memorymanager): under the `Static`
//! policy a Guaranteed pod's containers get their memory and hugepages from
//! NUMA nodes chosen at admission with the topology manager (its third
//! hint provider), and are created with those nodes as their `cpuset.mems`.
//! The choice is `kubelet_core::memorymanager`'s; the state is kept in
//! `<root-dir>/memory_manager_state` in upstream's format, also under
//! `None` (the policy that wrote it must be the one configured, and under
//! Static it must fit this machine's memory and reservations, or the
//! kubelet does not start: upstream's rule, since the running containers'
//! memory came from it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::memorymanager::{
    Block, MemoryState, NONE, NodeMemory, Pinning, Reservation, Reusable, STATIC, StaticPolicy,
    cpuset_mems, state::FILE, system_reserved,
};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::topologymanager::{Hint, ProviderHints};
use kubelet_core::types::PodUid;
use parking_lot::Mutex;

use crate::config::SourcesReady;
use crate::cpumanager::{active_containers, host_numa_nodes, read_sys};

/// What the configuration says of the memory manager.
#[derive(Clone, Debug, Default)]
pub struct MemorySettings {
    pub policy: String,
    /// reservedMemory, its quantities parsed.
    pub reservations: Vec<Reservation>,
    /// What node allocatable keeps back of each resource (systemReserved,
    /// kubeReserved and the hard eviction thresholds together).
    pub allocatable_reservation: BTreeMap<String, i64>,
}

/// The memory manager; cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryManager(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    settings: MemorySettings,
    nodes: Vec<NodeMemory>,
    file: PathBuf,
    metrics: KubeletMetrics,
    /// Set by [`MemoryManager::start`] under the Static policy.
    policy: OnceLock<StaticPolicy>,
    state: Mutex<(MemoryState, Reusable)>,
    /// Until every pod source has spoken, a pod not seen yet may hold
    /// memory: nothing is released before (upstream's sourcesReady check).
    sources: OnceLock<SourcesReady>,
}

/// This host's NUMA nodes' memory and hugepages, from sysfs (one node with
/// `machine_memory` where sysfs has none).
pub fn host_memory(machine_memory: i64) -> Vec<NodeMemory> {
    let list = |dir: &str| -> Vec<String> {
        std::fs::read_dir(Path::new("/sys/devices/system").join(dir))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    };
    NodeMemory::from_sysfs(
        &host_numa_nodes(),
        read_sys,
        list,
        u64::try_from(machine_memory).unwrap_or(0),
    )
}

impl MemoryManager {
    pub fn new(
        settings: MemorySettings,
        nodes: Vec<NodeMemory>,
        root_dir: &Path,
        metrics: KubeletMetrics,
    ) -> Self {
        MemoryManager(Arc::new(Inner {
            state: Mutex::new((MemoryState::new(&settings.policy), Reusable::new())),
            settings,
            nodes,
            file: root_dir.join(FILE),
            metrics,
            policy: OnceLock::new(),
            sources: OnceLock::new(),
        }))
    }

    /// The pod sources' readiness: memory of inactive pods is released
    /// once every source has given its pods.
    pub fn watch_sources(&self, ready: SourcesReady) {
        let _ = self.0.sources.set(ready);
    }

    /// Whether the Static policy runs.
    pub fn is_static(&self) -> bool {
        self.0.policy.get().is_some()
    }

    /// Start (upstream's NewManager then Start): the Static policy's
    /// reservations checked against this node, then the state file
    /// restored (or made) and checked. An error stops the kubelet, in
    /// upstream's words.
    pub fn start(&self) -> Result<(), String> {
        let s = &self.0.settings;
        let policy = match s.policy.as_str() {
            STATIC => {
                let reserved =
                    system_reserved(&self.0.nodes, &s.allocatable_reservation, &s.reservations)?;
                let policy = StaticPolicy::new(self.0.nodes.clone(), reserved)?;
                tracing::info!(policy = STATIC, reserved = ?policy.reserved, "Starting memorymanager");
                Some(policy)
            }
            _ => None,
        };
        let name = if policy.is_some() { STATIC } else { NONE };
        let restore_err = |e: String| {
            format!(
                "start memory manager error: could not restore state from checkpoint: {e}, please drain this node and delete the memory manager checkpoint file {:?} before restarting Kubelet",
                self.0.file.display().to_string()
            )
        };
        let (mut state, found) = match std::fs::read(&self.0.file) {
            Ok(bytes) => (
                MemoryState::restore(&bytes, name).map_err(|e| restore_err(e.to_string()))?,
                true,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (MemoryState::new(name), false),
            Err(e) => return Err(restore_err(e.to_string())),
        };
        let restored = state.clone();
        if let Some(p) = &policy {
            p.validate(&mut state)
                .map_err(|e| format!("start memory manager error: {e}"))?;
        }
        // Written when new or changed, as upstream (an older layout stays
        // until the state changes).
        if !found || state != restored {
            crate::files::write_file(&self.0.file, &state.encode())
                .map_err(|e| restore_err(e.to_string()))?;
        }
        self.0.state.lock().0 = state;
        if let Some(p) = policy {
            let _ = self.0.policy.set(p);
        }
        Ok(())
    }

    /// Return the memory of pods no longer active, once the pod sources
    /// are ready (upstream's removeStaleState, before each admission's
    /// hints and allocation).
    pub fn release_stale(&self, active: &[Arc<Pod>]) {
        let Some(policy) = self.0.policy.get() else {
            return;
        };
        if !self.0.sources.get().is_some_and(SourcesReady::all_ready) {
            return;
        }
        let mut guard = self.0.state.lock();
        if policy.release_inactive(&mut guard.0, &active_containers(active)) {
            self.save(&guard.0);
        }
    }

    /// Where container `c` of `pod` could have its memory (upstream's
    /// GetTopologyHints): no preference under `None`.
    pub fn hints(&self, pod: &Pod, c: &Container) -> ProviderHints {
        let Some(policy) = self.0.policy.get() else {
            return ProviderHints::new();
        };
        let guard = self.0.state.lock();
        policy.hints(&guard.0, &guard.1, PodUid::of(pod).as_str(), pod, c)
    }

    /// Where the whole pod could have its memory (the pod scope).
    pub fn pod_hints(&self, pod: &Pod) -> ProviderHints {
        let Some(policy) = self.0.policy.get() else {
            return ProviderHints::new();
        };
        let guard = self.0.state.lock();
        policy.pod_hints(&guard.0, &guard.1, PodUid::of(pod).as_str(), pod)
    }

    /// Give container `c` of `pod` its memory (upstream's Allocate, from
    /// the topology manager's admission) within the merged `hint`.
    pub fn allocate(&self, pod: &Pod, c: &Container, hint: Hint) -> Result<(), String> {
        let Some(policy) = self.0.policy.get() else {
            return Ok(());
        };
        let mut guard = self.0.state.lock();
        let (state, reusable) = &mut *guard;
        let uid = PodUid::of(pod);
        let m = &self.0.metrics;
        match policy.allocate(state, reusable, (uid.as_str(), pod, c), hint) {
            Ok(Pinning::NotAsked) => Ok(()),
            Ok(Pinning::Held) => {
                m.memory_manager_pinning_requests.inc(&[]);
                Ok(())
            }
            Ok(Pinning::Pinned) => {
                m.memory_manager_pinning_requests.inc(&[]);
                tracing::info!(pod = ?pod.metadata.name, container = %c.name, mems = ?cpuset_mems(state, uid.as_str(), &c.name), "Allocated exclusive memory");
                self.save(state);
                Ok(())
            }
            Err(e) => {
                m.memory_manager_pinning_requests.inc(&[]);
                m.memory_manager_pinning_errors.inc(&[]);
                tracing::error!(pod = ?pod.metadata.name, container = %c.name, error = %e, "Allocate error");
                Err(e)
            }
        }
    }

    /// The `cpuset.mems` container `c` of `pod` is created with (upstream's
    /// PreCreateContainer): the NUMA nodes of its memory, given now if
    /// admission did not give it (a static pod, which only API pods'
    /// admission skips); None when it has none of its own (the runtime's
    /// default).
    pub fn cpuset_mems_for(&self, pod: &Pod, c: &Container) -> Result<Option<String>, String> {
        if self.0.policy.get().is_none() {
            return Ok(None);
        }
        let uid = PodUid::of(pod);
        let held = self
            .0
            .state
            .lock()
            .0
            .blocks(uid.as_str(), &c.name)
            .is_some();
        if !held {
            self.allocate(pod, c, Hint::default())?;
        }
        Ok(self.cpuset_mems(pod, c))
    }

    /// The NUMA nodes of container `c` of `pod`'s memory blocks, as
    /// `cpuset.mems` lists them; None when it has none.
    pub fn cpuset_mems(&self, pod: &Pod, c: &Container) -> Option<String> {
        self.0.policy.get()?;
        cpuset_mems(&self.0.state.lock().0, PodUid::of(pod).as_str(), &c.name)
    }

    /// Container `c` of `pod` was created (upstream's AddContainer): the
    /// regular init containers before it are done, their memory returns.
    pub fn created(&self, pod: &Pod, c: &Container) {
        let Some(policy) = self.0.policy.get() else {
            return;
        };
        let mut guard = self.0.state.lock();
        if policy.container_added(&mut guard.0, PodUid::of(pod).as_str(), pod, c) {
            self.save(&guard.0);
        }
    }

    /// Container `name` of pod `uid`'s memory blocks (PodResources).
    pub fn memory(&self, uid: &str, name: &str) -> Vec<Block> {
        self.0
            .state
            .lock()
            .0
            .blocks(uid, name)
            .cloned()
            .unwrap_or_default()
    }

    /// Each NUMA node's allocatable memory of each kind (PodResources'
    /// GetAllocatableResources); none under `None`.
    pub fn allocatable(&self) -> Vec<Block> {
        match self.0.policy.get() {
            Some(p) => p.allocatable(&self.0.state.lock().0),
            None => Vec::new(),
        }
    }

    fn save(&self, state: &MemoryState) {
        if let Err(e) = crate::files::write_file(&self.0.file, &state.encode()) {
            tracing::error!(file = %self.0.file.display(), error = %e, "Could not save checkpoint");
        }
    }
}

#[cfg(test)]
mod tests;
