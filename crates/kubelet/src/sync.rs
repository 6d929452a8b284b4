//! The three reentrant transaction scripts the pod workers run: SyncPod,
//! SyncTerminatingPod, SyncTerminatedPod. Each recomputes from the runtime's
//! truth on every call and treats "already done" as success, so a retry, a
//! crash or a restart simply runs it again.

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::actions::PodActions;
use kubelet_core::cgroups::pod_resource_config;
use kubelet_core::lifecycle::Why;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::phase::{PHASE_FAILED, PHASE_RUNNING, PHASE_SUCCEEDED};
use kubelet_core::resize::{Allocation, MemoryDecreases, allocation_of, with_allocation};
use kubelet_core::runtime::PodStatus;
use kubelet_core::status::{
    KubeletTermination, TerminationKind, WaitingReasons, fail_for_deadline, fail_for_termination,
    generate_api_pod_status, keep_api_terminal_phase, past_active_deadline, set_host_ips,
    set_volume_mount_statuses,
};
use kubelet_core::types::PodUid;
use kubelet_cri::v1 as cri;
use tokio::time::Instant;
use tracing::Instrument;

use crate::allocation::AllocationManager;
use crate::clock::Clock;
use crate::cm::{CmError, ContainerManager, PodNarrowing};
use crate::error::{ResizeError, SyncError, waiting_reasons};
use crate::events::{Involved, WARNING};
use crate::kuberuntime::config::host_network;
use crate::kuberuntime::{RuntimeManager, grace_period};
use crate::pleg::RelistRequests;
use crate::pod_workers::{PodSyncer, PodTarget};
use crate::podmanager::PodManager;
use crate::prober::ProbeManager;
use crate::runtime_state::RuntimeState;
use crate::status_manager::StatusManager;
use crate::volumes::VolumeManager;

/// How long SyncPod waits for an admitted resize's allocation to reach the
/// checkpoint files before it applies the resize (else it reports an
/// error and tries again at the next sync).
const CHECKPOINT_WAIT: Duration = Duration::from_secs(5);

/// What the transaction scripts work with.
#[derive(Clone)]
pub struct Syncer {
    pub runtime: RuntimeManager,
    pub runtime_state: RuntimeState,
    pub status: StatusManager,
    /// Why containers last failed to start, per pod (the reason cache).
    pub reasons: Arc<Mutex<HashMap<PodUid, WaitingReasons>>>,
    /// The runtime's name from Version(), used in container IDs.
    pub runtime_name: Arc<RwLock<String>>,
    /// The pods' volumes (and their directories under `<root-dir>/pods`).
    pub volumes: VolumeManager,
    /// The node's addresses, reported as each pod's hostIPs.
    pub host_ips: Vec<String>,
    /// The prober: a worker per probe, results read by status and SyncPod.
    pub prober: ProbeManager,
    pub metrics: KubeletMetrics,
    /// When each pod not yet running was first synced
    /// (kubelet_pod_start_duration_seconds).
    pub first_seen: Arc<Mutex<HashMap<PodUid, Instant>>>,
    /// The wall clock active deadlines are counted on.
    pub clock: Clock,
    /// The pods' cgroups (cgroupsPerQOS).
    pub cm: ContainerManager,
    /// The desired pods, whose active ones the QoS cgroups follow.
    pub pods: PodManager,
    /// Pods the kubelet ended itself (the eviction and shutdown managers),
    /// with why: once stopped they are reported so (Failed, Evicted or
    /// Terminated).
    pub terminations: Arc<Mutex<HashMap<PodUid, KubeletTermination>>>,
    /// The pods' allocated and actuated resources (in-place resize).
    pub allocation: AllocationManager,
    /// PLEG's on-demand relists: a sync that acted asks for its pod's.
    pub relist: RelistRequests,
}

impl Syncer {
    fn api_status(
        &self,
        pod: &Pod,
        rt: &PodStatus,
        terminal: bool,
    ) -> k8s_openapi::api::core::v1::PodStatus {
        let waiting = self
            .reasons
            .lock()
            .get(&PodUid::of(pod))
            .cloned()
            .unwrap_or_default();
        let runtime_name = self.runtime_name.read().clone();
        let mut status = generate_api_pod_status(
            pod,
            rt,
            &waiting,
            &runtime_name,
            &self.prober.results(),
            terminal,
        );
        set_host_ips(&mut status, pod, &self.host_ips);
        set_volume_mount_statuses(
            &mut status,
            pod,
            self.runtime.recursive_read_only_supported(pod),
        );
        if self.past_deadline(pod) {
            fail_for_deadline(&mut status);
        }
        keep_api_terminal_phase(&mut status, pod);
        // A pod the kubelet ended is reported so once its containers
        // stopped (upstream's status manager holds a terminal phase back
        // until then).
        if terminal && let Some(termination) = self.terminations.lock().get(&PodUid::of(pod)) {
            let now = self.clock.now_time();
            fail_for_termination(&mut status, pod, termination, &now);
        }
        self.allocation.set_status(pod, &mut status);
        self.set_allocated_resources_status(pod, &mut status);
        status
    }

    /// With ResourceHealthStatus, each container's devices (its device
    /// plugins', then its claims') with their health (upstream's
    /// UpdateAllocatedResourcesStatus).
    fn set_allocated_resources_status(
        &self,
        pod: &Pod,
        status: &mut k8s_openapi::api::core::v1::PodStatus,
    ) {
        let (devices, dra) = (self.runtime.devices(), self.runtime.dra());
        if !devices.reports_health() && !dra.reports_health() {
            return;
        }
        let uid = PodUid::of(pod);
        let specs: Vec<&k8s_openapi::api::core::v1::Container> =
            pod.spec.iter().flat_map(|s| s.containers.iter()).collect();
        for c in status.container_statuses.iter_mut().flatten() {
            let mut health = if devices.reports_health() {
                devices.allocated_resources_status(&uid, &c.name)
            } else {
                Vec::new()
            };
            if let Some(spec) = specs.iter().find(|s| s.name == c.name) {
                health.extend(dra.allocated_resources_status(pod, spec));
            }
            if health.is_empty() {
                continue;
            }
            let list = c.allocated_resources_status.get_or_insert_default();
            for r in health {
                match list.iter_mut().find(|s| s.name == r.name) {
                    Some(s) => *s = r,
                    None => list.push(r),
                }
            }
        }
    }

    /// Record that the kubelet ends `pod` as `termination` says: its final
    /// status says so.
    pub fn record_termination(&self, pod: &Pod, termination: KubeletTermination) {
        self.terminations
            .lock()
            .insert(PodUid::of(pod), termination);
    }

    /// Whether the pod has outlived its activeDeadlineSeconds, counted from
    /// the start time the status manager holds.
    pub fn past_deadline(&self, pod: &Pod) -> bool {
        let start = self
            .status
            .get_pod_status(&PodUid::of(pod))
            .and_then(|s| s.start_time.clone())
            .map(|t| t.0.as_second());
        past_active_deadline(pod, start, self.clock.now_nanos() / 1_000_000_000)
    }

    /// The pods the QoS cgroups are sized for (upstream's active pods):
    /// the desired ones not reported terminal.
    pub fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods.pods_where(|p| {
            !self
                .status
                .get_pod_status(&PodUid::of(p))
                .is_some_and(|s| matches!(s.phase.as_deref(), Some(PHASE_SUCCEEDED | PHASE_FAILED)))
        })
    }

    /// validateMemoryResizeAction: why the resize from `actuated` to the
    /// `allocated` pod cannot lower a memory limit now (the pod cgroup's,
    /// or a running container's to be updated in place, at or below what
    /// it uses), if it cannot.
    async fn memory_decrease_blocked(
        &self,
        allocated: &Arc<Pod>,
        actuated_pod: &Pod,
        actuated: &Allocation,
        rt: &PodStatus,
    ) -> Option<String> {
        let mut actions = PodActions::default();
        actions.add_resizes(allocated, rt, actuated);
        let policy = self.cm.pod_cgroup_policy();
        let memory = |p: &Pod| {
            policy
                .as_ref()
                .and_then(|policy| pod_resource_config(p, policy).memory)
        };
        let decreases = MemoryDecreases::of(
            allocated,
            actuated,
            memory(allocated),
            memory(actuated_pod),
            &actions.containers_to_update,
        );
        if decreases.is_empty() {
            return None;
        }
        // The pod's usage from its cgroup (a pod-level decrease needs one),
        // each container's from the runtime's stats, as upstream reads them.
        let pod_usage = match decreases.pod {
            Some(_) => self.cm.pod_memory_usage(allocated.clone()).await,
            None => None,
        };
        let mut usage = Vec::new();
        for u in actions
            .containers_to_update
            .iter()
            .filter(|u| decreases.containers.iter().any(|(n, _)| *n == u.name))
        {
            let filter = cri::ContainerStatsFilter {
                id: u.id.clone(),
                ..Default::default()
            };
            let bytes = match self.runtime.cri().list_container_stats(Some(filter)).await {
                Ok(stats) => stats
                    .first()
                    .and_then(|s| s.memory.as_ref())
                    .and_then(|m| m.usage_bytes.as_ref())
                    .map(|v| v.value),
                Err(e) => {
                    tracing::warn!(container = %u.name, error = %e, "reading memory usage for a resize");
                    None
                }
            };
            usage.push((u.name.clone(), bytes));
        }
        decreases.check(pod_usage, &usage)
    }

    /// The pod's cgroup, before its sandbox (upstream's SyncPod step), its
    /// values set again when it exists. A pod that runs without one (started
    /// before cgroupsPerQOS) is killed first, to come back under its QoS
    /// cgroup; a RestartPolicy Never pod so killed gets none.
    async fn ensure_pod_cgroup(
        &self,
        pod: &Arc<Pod>,
        actuated: Arc<Pod>,
        rt: &PodStatus,
    ) -> Result<Option<PodNarrowing>, SyncError> {
        let fail = |source: CmError| {
            self.runtime.events().event(
                &Involved::pod(pod, None),
                WARNING,
                "FailedToCreatePodContainer",
                format!("unable to ensure pod container exists: {source}"),
            );
            SyncError::PodCgroup {
                uid: PodUid::of(pod).0,
                source,
            }
        };
        let exists = self.cm.pod_exists(pod.clone()).await.map_err(fail)?;
        if !exists && rt.running_containers().next().is_some() {
            tracing::info!("pod runs without its pod cgroup: killing it to restart it in one");
            let grace = grace_period(Some(pod), rt, None);
            match self.runtime.kill_pod(Some(pod), rt, grace).await {
                Ok(()) => {
                    let never = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref())
                        == Some("Never");
                    if never {
                        return Ok(None);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "killing a pod without its cgroup"),
            }
        }
        self.cm
            .ensure_pod(pod.clone(), actuated, exists, || self.active_pods())
            .await
            .map_err(fail)
    }
}

impl PodSyncer for Syncer {
    async fn sync_pod(&self, pod: Arc<Pod>) -> Result<bool, SyncError> {
        let uid = PodUid::of(&pod);
        let op = if self.status.get_pod_status(&uid).is_none() {
            self.first_seen
                .lock()
                .entry(uid)
                .or_insert_with(Instant::now);
            "create"
        } else {
            "sync"
        };
        let start = Instant::now();
        let result = self
            .sync_pod_steps(pod)
            .instrument(tracing::debug_span!("SyncPod", op))
            .await;
        self.metrics
            .pod_worker_duration
            .observe_duration(&[op], start.elapsed());
        result
    }

    async fn sync_terminating_pod(
        &self,
        target: &PodTarget,
        grace: Option<i64>,
    ) -> Result<(), SyncError> {
        let start = Instant::now();
        let result = self
            .sync_terminating_pod_steps(target, grace)
            .instrument(tracing::debug_span!("SyncTerminatingPod", ?grace))
            .await;
        self.metrics
            .pod_worker_duration
            .observe_duration(&["kill"], start.elapsed());
        result
    }

    async fn sync_terminated_pod(&self, target: &PodTarget, why: Why) -> Result<(), SyncError> {
        self.first_seen.lock().remove(&target.pod_ref.uid);
        self.sync_terminated_pod_steps(target, why)
            .instrument(tracing::debug_span!("SyncTerminatedPod", ?why))
            .await?;
        self.status.set_finished(&target.pod_ref.uid);
        Ok(())
    }
}

impl Syncer {
    /// Record the status and, the first time the pod is seen running, how
    /// long it took since the kubelet first saw it.
    fn report(&self, pod: &Pod, status: k8s_openapi::api::core::v1::PodStatus) {
        if status.phase.as_deref() == Some(PHASE_RUNNING)
            && let Some(first) = self.first_seen.lock().remove(&PodUid::of(pod))
        {
            self.metrics
                .pod_start_duration
                .observe_duration(&[], first.elapsed());
        }
        self.status.set_pod_status(pod, status);
    }

    async fn sync_pod_steps(&self, pod: Arc<Pod>) -> Result<bool, SyncError> {
        let target = PodTarget::from_pod(pod.clone());
        let rt = self.runtime.get_pod_status(&target.pod_ref).await?;
        let status = self.api_status(&pod, &rt, false);
        let terminal = matches!(
            status.phase.as_deref(),
            Some(PHASE_SUCCEEDED | PHASE_FAILED)
        );
        self.report(&pod, status);
        if terminal {
            return Ok(true);
        }
        self.prober.add_pod(&pod);
        if !host_network(&pod)
            && let Some(e) = self.runtime_state.network_error()
        {
            return Err(SyncError::NetworkNotReady(e));
        }
        // Containers and the pod cgroup get the resources the pod is
        // allocated (a resize not admitted yet waits).
        let allocated = self.allocation.allocated_pod(&pod);
        let actuated = self.allocation.actuated(&allocated);
        let actuated_pod = with_allocation(&allocated, &actuated)
            .map(Arc::new)
            .unwrap_or_else(|| allocated.clone());
        // A resize that would set a memory limit below what is used waits
        // (with PodResizeInProgress, Error): the pod cgroup and the running
        // containers keep what they have.
        let resizing = actuated != allocation_of(&allocated);
        let blocked = if resizing && !self.allocation.persisted(CHECKPOINT_WAIT).await {
            Some(ResizeError::Checkpoint)
        } else if resizing {
            self.memory_decrease_blocked(&allocated, &actuated_pod, &actuated, &rt)
                .await
                .map(ResizeError::MemoryDecrease)
        } else {
            None
        };
        let cgroup_pod = if blocked.is_some() {
            &actuated_pod
        } else {
            &allocated
        };
        let narrowing = self
            .ensure_pod_cgroup(cgroup_pod, actuated_pod.clone(), &rt)
            .await?;
        // The pod's directories and volumes, before any container.
        let volumes = self.volumes.mount_pod(&pod).await?;
        let resize_from = blocked.is_none().then_some(&actuated);
        let mut result = self
            .runtime
            .sync_pod(
                &allocated,
                &rt,
                &self.prober.results(),
                &volumes,
                resize_from,
            )
            .await?;
        if blocked.is_some() {
            result.resize_error = blocked;
        }
        // A resize's pod cgroup narrows once its containers have theirs.
        if let Some(narrowing) = narrowing.filter(|_| result.resize_error.is_none())
            && let Err(e) = self.cm.narrow_pod(narrowing).await
        {
            result.resize_error = Some(ResizeError::PodCgroup(e));
        }
        let running: Vec<&str> = rt.running_containers().map(|c| c.name.as_str()).collect();
        let changed: Vec<String> = result
            .started
            .iter()
            .chain(&result.resized)
            .cloned()
            .collect();
        self.allocation.record_actuated(
            &allocated,
            &changed,
            &running,
            result.resize_error.is_none(),
        );
        if let Some(e) = &result.resize_error {
            self.allocation.resize_failed(&allocated, &e.to_string());
        }
        self.reasons.lock().insert(
            target.pod_ref.uid.clone(),
            waiting_reasons(&result.failures),
        );
        if !result.started.is_empty() || !result.resized.is_empty() {
            // Report what just started now, not at the next relist.
            let now = self.runtime.get_pod_status(&target.pod_ref).await?;
            self.report(&pod, self.api_status(&pod, &now, false));
        } else if !result.failures.is_empty() {
            // And why a container waits, now: the retry may be far off (a
            // crash-loop back-off).
            self.report(&pod, self.api_status(&pod, &rt, false));
        }
        if let Some(e) = result.resize_error {
            Err(SyncError::Resize(e))
        } else if result.failures.is_empty() {
            if result.acted {
                // PLEG learns what this sync did now (upstream's postSync).
                self.relist.request(&target.pod_ref.uid);
            }
            Ok(false)
        } else {
            Err(SyncError::StartFailed(result.failures))
        }
    }

    async fn sync_terminating_pod_steps(
        &self,
        target: &PodTarget,
        grace: Option<i64>,
    ) -> Result<(), SyncError> {
        // Probes stop when the pod starts terminating.
        self.prober.remove_pod(&target.pod_ref.uid);
        let rt = self.runtime.get_pod_status(&target.pod_ref).await?;
        if let Some(pod) = &target.pod {
            self.status
                .set_pod_status(pod, self.api_status(pod, &rt, false));
        }
        let grace = grace_period(target.pod.as_deref(), &rt, grace);
        tracing::info!(grace, "killing pod");
        self.runtime
            .kill_pod(target.pod.as_deref(), &rt, grace)
            .await?;
        let after = self.runtime.get_pod_status(&target.pod_ref).await?;
        let running: Vec<String> = after.running_containers().map(|c| c.name.clone()).collect();
        if !running.is_empty() {
            return Err(SyncError::StillRunning(running));
        }
        // Its claims are unprepared once its containers are gone, before
        // its final status (upstream's order: the claims' deallocation
        // waits for that status).
        self.runtime
            .dra()
            .unprepare(target.pod_ref.uid.as_str())
            .await
            .map_err(SyncError::UnprepareResources)?;
        if let Some(pod) = &target.pod {
            self.status
                .set_pod_status(pod, self.api_status(pod, &after, true));
        }
        Ok(())
    }

    async fn sync_terminated_pod_steps(
        &self,
        target: &PodTarget,
        why: Why,
    ) -> Result<(), SyncError> {
        let rt = self.runtime.get_pod_status(&target.pod_ref).await?;
        if let Some(pod) = &target.pod {
            self.status
                .set_pod_status(pod, self.api_status(pod, &rt, true));
        }
        // Its containers are gone: its volumes go now (what upstream's
        // SyncTerminatedPod waits for), and its objects are released.
        self.volumes
            .unmount_pod(&target.pod_ref.uid)
            .await
            .map_err(SyncError::VolumesTeardown)?;
        // Its processes are gone with its containers: its cgroup goes, and
        // its user namespace's IDs are free again.
        self.cm
            .destroy_pod(&target.pod_ref.uid)
            .await
            .map_err(SyncError::PodCgroupTeardown)?;
        let (userns, uid) = (self.runtime.userns().clone(), target.pod_ref.uid.clone());
        let _ = kubelet_tasks::off_thread(move || userns.release(&uid)).await;
        // An evicted pod's containers, writable layers and logs go too, as
        // upstream removes all of an evicted pod's containers: they are what
        // disk pressure wants back.
        let evicted = self
            .terminations
            .lock()
            .get(&target.pod_ref.uid)
            .is_some_and(|t| t.kind == TerminationKind::Evicted);
        if why == Why::Removed || evicted {
            self.runtime.remove_pod(&target.pod_ref, &rt).await?;
            tracing::info!(evicted, "pod removed from the runtime");
        }
        if why == Why::Removed {
            self.volumes
                .remove_pod_dir(&target.pod_ref.uid)
                .await
                .map_err(SyncError::VolumesTeardown)?;
        }
        Ok(())
    }
}
