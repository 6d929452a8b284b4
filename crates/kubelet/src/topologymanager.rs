//! The topology manager (upstream's cm/topologymanager): the admission
//! step that gives a pod's containers their devices, exclusive CPUs and
//! NUMA-pinned memory. Under `none` each container's devices, CPUs then
//! memory are allocated, as they come. Under an aligning policy the hint
//! providers (the device manager, the CPU manager, then the memory
//! manager) first say on which NUMA nodes they could place
//! what a container asks (or the whole pod, under the pod scope); the
//! policy merges the hints, refuses the pod when they cannot be aligned
//! (`TopologyAffinityError`), and each provider allocates within the
//! merged affinity. The choice is `kubelet_core::topologymanager`'s.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::podspec::init_and_regular_containers;
use kubelet_core::topologymanager::{
    AFFINITY_ERROR, AFFINITY_ERROR_MESSAGE, Hint, NONE, NumaInfo, Policy, ProviderHints,
    SCOPE_CONTAINER, SCOPE_POD,
};
use kubelet_core::types::Rejection;

use crate::cpumanager::{CpuManager, host_numa_nodes, read_sys};
use crate::devicemanager::DeviceManager;
use crate::memorymanager::MemoryManager;

/// The alignment metrics' boundary for NUMA alignment.
const ALIGN_NUMA_NODE: &str = "numa_node";

/// What the configuration says of the topology manager.
#[derive(Clone, Debug, Default)]
pub struct TopologySettings {
    pub policy: String,
    pub scope: String,
    pub options: BTreeMap<String, String>,
}

/// The topology manager; cheap to clone.
#[derive(Clone, Debug)]
pub struct TopologyManager(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    settings: TopologySettings,
    numa: NumaInfo,
    devices: DeviceManager,
    cpus: CpuManager,
    memory: MemoryManager,
    metrics: KubeletMetrics,
    /// Set by [`TopologyManager::start`] under an aligning policy.
    policy: OnceLock<Policy>,
}

/// The NUMA nodes of this host and their distances, from sysfs.
pub fn host_numa() -> NumaInfo {
    NumaInfo::from_sysfs(&host_numa_nodes(), read_sys)
}

impl TopologyManager {
    pub fn new(
        settings: TopologySettings,
        numa: NumaInfo,
        (devices, cpus, memory): (DeviceManager, CpuManager, MemoryManager),
        metrics: KubeletMetrics,
    ) -> Self {
        TopologyManager(Arc::new(Inner {
            settings,
            numa,
            devices,
            cpus,
            memory,
            metrics,
            policy: OnceLock::new(),
        }))
    }

    /// Start (upstream's NewManager): the policy and its options checked
    /// against this node's NUMA nodes. An error stops the kubelet, in
    /// upstream's words.
    pub fn start(&self) -> Result<(), String> {
        let s = &self.0.settings;
        if s.policy == NONE {
            if !s.options.is_empty() {
                tracing::warn!(options = ?s.options, "topologyManagerPolicyOptions have no effect under the none topology manager policy (as upstream)");
            }
            return Ok(());
        }
        let Some(policy) = Policy::new(&s.policy, &s.options, self.0.numa.clone())? else {
            return Ok(());
        };
        tracing::info!(policy = %s.policy, scope = %s.scope, options = ?policy.options, nodes = ?self.0.numa.nodes, "Creating topology manager with policy per scope");
        // The alignment series exist from the start (upstream's
        // initializeMetrics).
        let m = &self.0.metrics;
        for scope in [SCOPE_CONTAINER, SCOPE_POD] {
            m.container_aligned_compute_resources
                .add(&[scope, ALIGN_NUMA_NODE], 0.0);
            m.container_aligned_compute_resources_failures
                .add(&[scope, ALIGN_NUMA_NODE], 0.0);
        }
        let _ = self.0.policy.set(policy);
        Ok(())
    }

    /// Admission (upstream's topology manager admit handler): the pod's
    /// devices and exclusive CPUs allocated, aligned as the policy wants;
    /// the pod refused when they cannot be. `active` are the pods admitted
    /// and not done, the one being admitted among them.
    pub async fn admit(&self, pod: &Pod, active: &[Arc<Pod>]) -> Result<(), Rejection> {
        let m = &self.0.metrics;
        m.topology_manager_admission_requests.inc(&[]);
        let started = Instant::now();
        // What inactive pods hold is free again (upstream's providers do it
        // as they give hints and allocate).
        self.0.cpus.release_stale(active);
        self.0.memory.release_stale(active);
        if self.0.devices.wants_devices(pod) {
            self.0.devices.free_inactive(active);
        }
        let result = match self.0.policy.get() {
            None => self.allocate_all(pod, active).await,
            Some(policy) if self.0.settings.scope == SCOPE_POD => {
                // The whole pod's hints merged once, every container
                // allocated within the one affinity.
                let hints = [
                    self.0.devices.pod_hints(pod, &self.0.numa.nodes),
                    self.0.cpus.pod_hints(pod),
                    self.0.memory.pod_hints(pod),
                ];
                let containers = init_and_regular_containers(pod);
                self.place(policy, SCOPE_POD, &hints, pod, active, containers)
                    .await
            }
            Some(policy) => self.admit_container_scope(policy, pod, active).await,
        };
        m.topology_manager_admission_duration
            .observe(&[], started.elapsed().as_secs_f64() * 1000.0);
        result
    }

    /// Under `none`: every container's devices, CPUs and memory, init
    /// containers first, without affinity.
    async fn allocate_all(&self, pod: &Pod, active: &[Arc<Pod>]) -> Result<(), Rejection> {
        for c in init_and_regular_containers(pod) {
            self.allocate(pod, c, active, Hint::default()).await?;
        }
        Ok(())
    }

    /// The container scope: each container's hints merged and allocated
    /// in turn, init containers first.
    async fn admit_container_scope(
        &self,
        policy: &Policy,
        pod: &Pod,
        active: &[Arc<Pod>],
    ) -> Result<(), Rejection> {
        for c in init_and_regular_containers(pod) {
            let hints = [
                self.0.devices.hints(pod, c, &self.0.numa.nodes),
                self.0.cpus.hints(pod, c),
                self.0.memory.hints(pod, c),
            ];
            self.place(policy, SCOPE_CONTAINER, &hints, pod, active, [c])
                .await?;
        }
        Ok(())
    }

    /// Merge the providers' `hints`; refuse the pod when the policy does
    /// not admit the best one, else allocate `containers` within its
    /// affinity. The alignment metrics count under `scope`.
    async fn place<'a>(
        &self,
        policy: &Policy,
        scope: &str,
        hints: &[ProviderHints],
        pod: &Pod,
        active: &[Arc<Pod>],
        containers: impl IntoIterator<Item = &'a Container>,
    ) -> Result<(), Rejection> {
        let m = &self.0.metrics;
        let labels = [scope, ALIGN_NUMA_NODE];
        let (best, admit) = policy.merge(hints);
        tracing::info!(pod = ?pod.metadata.name, scope, best = %best, admit, "Best TopologyHint");
        if !admit {
            if policy.guarantees_alignment() {
                m.container_aligned_compute_resources_failures.inc(&labels);
            }
            m.topology_manager_admission_errors.inc(&[]);
            return Err(affinity_error());
        }
        for c in containers {
            if let Err(e) = self.allocate(pod, c, active, best).await {
                m.topology_manager_admission_errors.inc(&[]);
                return Err(e);
            }
        }
        if policy.guarantees_alignment() {
            m.container_aligned_compute_resources.inc(&labels);
        }
        Ok(())
    }

    /// One container's allocation by each provider, in upstream's order
    /// (devices, CPUs, then memory), within the merged `hint`; a failure
    /// refuses the pod with upstream's reason.
    async fn allocate(
        &self,
        pod: &Pod,
        c: &Container,
        active: &[Arc<Pod>],
        hint: Hint,
    ) -> Result<(), Rejection> {
        self.0
            .devices
            .allocate(pod, c, active, hint.affinity)
            .await
            .map_err(unexpected)?;
        self.0.cpus.allocate(pod, c, hint.affinity).map_err(|e| {
            let (reason, message) = e.rejection();
            Rejection {
                reason: reason.into(),
                message,
            }
        })?;
        self.0.memory.allocate(pod, c, hint).map_err(unexpected)
    }
}

/// An untyped allocation error's rejection (upstream's
/// GetPodAdmitResult).
fn unexpected(e: impl std::fmt::Display) -> Rejection {
    Rejection {
        reason: "UnexpectedAdmissionError".into(),
        message: format!("Allocate failed due to {e}, which is unexpected"),
    }
}

fn affinity_error() -> Rejection {
    Rejection {
        reason: AFFINITY_ERROR.into(),
        message: AFFINITY_ERROR_MESSAGE.into(),
    }
}

#[cfg(test)]
mod tests;
