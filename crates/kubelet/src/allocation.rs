//! The allocation manager (upstream's pkg/kubelet/allocation, with the
//! actuated state the runtime manager keeps): for each pod, the resources
//! (its containers' and pod-level) the kubelet admitted (allocated) and
//! those its running containers and pod cgroup were last given
//! (actuated), and the resize conditions. A resize (the pod's spec
//! resources changed through the `resize` subresource) is admitted against
//! the node and the other pods' allocations, else it waits
//! (`PodResizePending`, Deferred); once admitted, SyncPod works with the
//! allocated pod and brings the pod cgroup and the running containers to
//! it (`PodResizeInProgress` until it has). The records live in memory: after
//! a restart every pod is admitted again with its spec's resources (upstream
//! keeps them in checkpoint files).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kubelet_core::admission::Rejection;
use kubelet_core::cgroups::PodCgroupPolicy;
use kubelet_core::resize::{
    Allocation, EVENT_COMPLETED, EVENT_DEFERRED, EVENT_ERROR, EVENT_STARTED,
    POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING, REASON_DEFERRED, REASON_ERROR, ResizeConditions,
    allocation_of, pod_resources_status, resize_condition, resize_message, set_container_resources,
    with_allocation,
};
use kubelet_core::types::PodUid;

use crate::clock::Clock;
use crate::events::{Involved, NORMAL, Recorder, WARNING};

#[derive(Debug, Default)]
struct State {
    allocated: HashMap<PodUid, Allocation>,
    actuated: HashMap<PodUid, Allocation>,
    conditions: HashMap<PodUid, ResizeConditions>,
}

/// What a resize came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeOutcome {
    /// The spec's resources are the allocated ones: nothing to do.
    None,
    /// Admitted: the pod is to be synced to apply it.
    Allocated,
    /// It does not fit now: PodResizePending, Deferred.
    Deferred,
}

/// The allocation manager; clones share the records.
#[derive(Clone)]
pub struct AllocationManager {
    state: Arc<Mutex<State>>,
    events: Recorder,
    clock: Clock,
    /// How pod cgroups are set (None: pods have none), for the pod-level
    /// resources reported.
    pod_cgroups: Option<PodCgroupPolicy>,
}

impl AllocationManager {
    pub fn new(
        events: Recorder,
        clock: Clock,
        pod_cgroups: Option<PodCgroupPolicy>,
    ) -> AllocationManager {
        AllocationManager {
            state: Arc::default(),
            events,
            clock,
            pod_cgroups,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pod was admitted: it is allocated its spec's resources, unless
    /// it has an allocation already (upstream's AddPod).
    pub fn admit(&self, pod: &Pod) {
        self.lock()
            .allocated
            .entry(PodUid::of(pod))
            .or_insert_with(|| allocation_of(pod));
    }

    /// The pod with the resources it is allocated: what SyncPod creates
    /// containers and the pod cgroup with. A pod without an allocation
    /// (not admitted through the API: a static or file pod) gets its spec's.
    pub fn allocated_pod(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        let mut state = self.lock();
        let allocated = state
            .allocated
            .entry(PodUid::of(pod))
            .or_insert_with(|| allocation_of(pod));
        match with_allocation(pod, allocated) {
            Some(p) => Arc::new(p),
            None => pod.clone(),
        }
    }

    /// A pod whose spec resources may have changed (handlePodResourcesResize):
    /// `fit` admits the spec's resources next to the other pods' allocations
    /// (see [`AllocationManager::allocated_pod`]).
    pub fn handle_resize(
        &self,
        pod: &Pod,
        fit: impl FnOnce() -> Result<(), Rejection>,
    ) -> ResizeOutcome {
        let uid = PodUid::of(pod);
        let desired = allocation_of(pod);
        let unchanged = self
            .lock()
            .allocated
            .get(&uid)
            .is_none_or(|a| *a == desired);
        let generation = pod.metadata.generation.unwrap_or(0);
        if unchanged {
            if let Some(c) = self.lock().conditions.get_mut(&uid) {
                c.pending = None;
            }
            return ResizeOutcome::None;
        }
        let now = self.clock.now_time();
        match fit() {
            Ok(()) => {
                let mut state = self.lock();
                state.allocated.insert(uid.clone(), desired);
                let conditions = state.conditions.entry(uid).or_default();
                conditions.pending = None;
                conditions.in_progress = Some(resize_condition(
                    POD_RESIZE_IN_PROGRESS,
                    None,
                    "",
                    "",
                    Some(generation),
                    &now,
                ));
                drop(state);
                self.events.event(
                    &Involved::pod(pod, None),
                    NORMAL,
                    EVENT_STARTED,
                    resize_message("Pod resize started", pod, generation, ""),
                );
                ResizeOutcome::Allocated
            }
            Err(r) => {
                // Every reason admission gives is one that may pass later
                // (SetPodResizePendingCondition: all but Infeasible are Deferred).
                let mut state = self.lock();
                let conditions = state.conditions.entry(uid).or_default();
                let changed = conditions.pending.as_ref().is_none_or(|c| {
                    c.observed_generation != Some(generation)
                        || c.message.as_deref() != Some(r.message.as_str())
                });
                conditions.pending = Some(resize_condition(
                    POD_RESIZE_PENDING,
                    conditions.pending.as_ref(),
                    REASON_DEFERRED,
                    &r.message,
                    Some(generation),
                    &now,
                ));
                drop(state);
                if changed {
                    self.events.event(
                        &Involved::pod(pod, None),
                        WARNING,
                        EVENT_DEFERRED,
                        resize_message(
                            &format!("Pod resize {REASON_DEFERRED}"),
                            pod,
                            generation,
                            &r.message,
                        ),
                    );
                }
                ResizeOutcome::Deferred
            }
        }
    }

    /// The pods whose resize waits (to be tried again).
    pub fn deferred(&self) -> Vec<PodUid> {
        self.lock()
            .conditions
            .iter()
            .filter(|(_, c)| c.pending.is_some())
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    /// What the pod's containers were last given; a pod seen for the first
    /// time (started before this kubelet) counts as running with its
    /// allocation (InitializeActuatedPod).
    pub fn actuated(&self, pod: &Pod) -> Allocation {
        let mut state = self.lock();
        let uid = PodUid::of(pod);
        if let Some(a) = state.actuated.get(&uid) {
            return a.clone();
        }
        let initial = state
            .allocated
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| allocation_of(pod));
        state.actuated.insert(uid, initial.clone());
        initial
    }

    /// After SyncPod: `changed` containers of the allocated `pod` now run
    /// with its resources (started, or updated in place), those not in
    /// `running` will start with them, and the pod cgroup has its
    /// pod-level resources when `pod_cgroup` says so. When neither any
    /// running container nor the pod cgroup differs from the allocation
    /// any more, the resize is complete.
    pub fn record_actuated(
        &self,
        pod: &Pod,
        changed: &[String],
        running: &[&str],
        pod_cgroup: bool,
    ) {
        let uid = PodUid::of(pod);
        let allocation = allocation_of(pod);
        let mut guard = self.lock();
        let State {
            allocated,
            actuated,
            conditions,
        } = &mut *guard;
        let actuated = actuated.entry(uid.clone()).or_default();
        for (name, r) in &allocation.containers {
            if changed.contains(name) || !running.contains(&name.as_str()) {
                actuated.containers.insert(name.clone(), r.clone());
            }
        }
        if pod_cgroup {
            actuated.pod = allocation.pod.clone();
        }
        // Against the allocation now: a resize admitted during this sync
        // is not done.
        let target = allocated.get(&uid).unwrap_or(&allocation);
        let done = target.pod == actuated.pod
            && target
                .containers
                .iter()
                .all(|(name, r)| actuated.container(name).is_none_or(|a| a == r));
        let finished = done
            && conditions
                .get_mut(&uid)
                .is_some_and(|c| c.in_progress.take().is_some());
        drop(guard);
        if finished {
            let generation = pod.metadata.generation.unwrap_or(0);
            self.events.event(
                &Involved::pod(pod, None),
                NORMAL,
                EVENT_COMPLETED,
                resize_message("Pod resize completed", pod, generation, ""),
            );
        }
    }

    /// Applying the resize failed: PodResizeInProgress says why.
    pub fn resize_failed(&self, pod: &Pod, message: &str) {
        let now = self.clock.now_time();
        let generation = pod.metadata.generation.unwrap_or(0);
        let mut state = self.lock();
        let conditions = state.conditions.entry(PodUid::of(pod)).or_default();
        conditions.in_progress = Some(resize_condition(
            POD_RESIZE_IN_PROGRESS,
            conditions.in_progress.as_ref(),
            REASON_ERROR,
            message,
            Some(generation),
            &now,
        ));
        drop(state);
        self.events.event(
            &Involved::pod(pod, None),
            WARNING,
            EVENT_ERROR,
            resize_message("Pod resize error", pod, generation, message),
        );
    }

    /// The resize parts of the pod's status: the pod's and its
    /// containers' allocatedResources and resources, the resize
    /// conditions.
    pub fn set_status(&self, pod: &Pod, status: &mut ApiPodStatus) {
        let uid = PodUid::of(pod);
        let state = self.lock();
        let Some(allocated) = state.allocated.get(&uid) else {
            return;
        };
        let actuated = state.actuated.get(&uid).unwrap_or(allocated);
        let running = status.phase.as_deref() == Some("Running");
        let allocated_pod = with_allocation(pod, allocated);
        let allocated_pod = allocated_pod.as_ref().unwrap_or(pod);
        let actuated_pod = with_allocation(allocated_pod, actuated);
        (status.allocated_resources, status.resources) = pod_resources_status(
            allocated_pod,
            actuated_pod.as_ref().unwrap_or(allocated_pod),
            running,
            self.pod_cgroups.as_ref(),
        );
        for list in [
            status.container_statuses.as_mut(),
            status.init_container_statuses.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            set_container_resources(list, allocated, actuated);
        }
        let Some(conditions) = state.conditions.get(&uid) else {
            return;
        };
        let list = status.conditions.get_or_insert_default();
        list.retain(|c| c.type_ != POD_RESIZE_PENDING && c.type_ != POD_RESIZE_IN_PROGRESS);
        list.extend(conditions.pending.iter().cloned());
        list.extend(conditions.in_progress.iter().cloned());
    }

    /// Forget the pods `keep` does not name (housekeeping).
    pub fn retain(&self, keep: impl Fn(&PodUid) -> bool) {
        let mut state = self.lock();
        state.allocated.retain(|uid, _| keep(uid));
        state.actuated.retain(|uid, _| keep(uid));
        state.conditions.retain(|uid, _| keep(uid));
    }
}
