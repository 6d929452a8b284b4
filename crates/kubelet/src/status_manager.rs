//! The status manager: REPORTED state, and its only writer. SyncPod and
//! friends compose a status; this module keeps the start time and condition
//! transition times, never lets a pod leave a terminal phase or a container
//! that may not restart leave its terminated state (`final_status`), records
//! when a pod's termination finished, and marks what changed so the API sync
//! (`status_sync`) sends it.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kubelet_core::final_status::keep_final;
use kubelet_core::status::carry_over;
use kubelet_core::types::PodUid;

use crate::clock::Clock;

#[derive(Default)]
struct Inner {
    statuses: HashMap<PodUid, Arc<PodStatus>>,
    /// Statuses changed since the API sync last took them, with when each
    /// first changed (kubelet_pod_status_sync_duration_seconds).
    dirty: BTreeMap<PodUid, Instant>,
    /// Pods whose SyncTerminatedPod completed (upstream's podIsFinished):
    /// a deleted one may now be deleted from the API.
    finished: HashSet<PodUid>,
    /// The status the API sync last settled for each pod (accepted, or
    /// refused for good).
    settled: HashMap<PodUid, Arc<PodStatus>>,
}

#[derive(Clone, Default)]
pub struct StatusManager {
    inner: Arc<Mutex<Inner>>,
    changed: Arc<Notify>,
    clock: Clock,
}

impl StatusManager {
    /// A status manager whose transition and start times come from `clock`.
    pub fn new(clock: Clock) -> Self {
        StatusManager {
            clock,
            ..StatusManager::default()
        }
    }

    /// Record the status the kubelet computed for `pod`. The first status of
    /// a pod carries over from the status it came with (the scheduler's
    /// PodScheduled, a start time from before a restart, a terminal phase).
    pub fn set_pod_status(&self, pod: &Pod, mut status: PodStatus) {
        let uid = PodUid::of(pod);
        let now = self.clock.now_time();
        let mut inner = self.inner.lock();
        let old = inner
            .statuses
            .get(&uid)
            .cloned()
            .or_else(|| pod.status.clone().map(Arc::new));
        if let Some(old) = &old
            && keep_final(pod, old, &mut status)
        {
            tracing::debug!(pod = %uid, "status kept its terminal phase or terminated containers");
        }
        carry_over(&mut status, old.as_deref(), &now);
        if inner.statuses.get(&uid).map(|s| s.as_ref()) != Some(&status) {
            inner.statuses.insert(uid.clone(), Arc::new(status));
            inner.dirty.entry(uid).or_insert_with(Instant::now);
            self.changed.notify_one();
        }
    }

    pub fn get_pod_status(&self, uid: &PodUid) -> Option<Arc<PodStatus>> {
        self.inner.lock().statuses.get(uid).cloned()
    }

    /// Forget statuses of pods `keep` rejects (pods the kubelet has forgotten).
    pub fn remove_orphans(&self, keep: impl Fn(&PodUid) -> bool) {
        let mut inner = self.inner.lock();
        inner.statuses.retain(|uid, _| keep(uid));
        inner.dirty.retain(|uid, _| keep(uid));
        inner.finished.retain(|uid| keep(uid));
        inner.settled.retain(|uid, _| keep(uid));
    }

    /// Forget one pod's status: it starts a new life under the same UID (a
    /// static pod edited or restored after it stopped), whose status owes
    /// nothing to the last one's.
    pub fn forget(&self, uid: &PodUid) {
        let mut inner = self.inner.lock();
        inner.statuses.remove(uid);
        inner.dirty.remove(uid);
        inner.finished.remove(uid);
        inner.settled.remove(uid);
    }

    /// The pod's SyncTerminatedPod completed: nothing of it runs or is left
    /// to clean up.
    pub fn set_finished(&self, uid: &PodUid) {
        if self.inner.lock().finished.insert(uid.clone()) {
            self.changed.notify_one();
        }
    }

    pub fn is_finished(&self, uid: &PodUid) -> bool {
        self.inner.lock().finished.contains(uid)
    }

    /// The statuses changed since the last call, for the API sync, with
    /// when each first changed.
    pub fn take_dirty(&self) -> Vec<(PodUid, Arc<PodStatus>, Instant)> {
        let mut inner = self.inner.lock();
        let dirty = std::mem::take(&mut inner.dirty);
        dirty
            .into_iter()
            .filter_map(|(uid, since)| {
                let status = inner.statuses.get(&uid).cloned()?;
                Some((uid, status, since))
            })
            .collect()
    }

    /// Send this pod's status again (a failed patch, a mirror pod that
    /// appeared).
    pub fn mark_dirty(&self, uid: &PodUid) {
        self.inner
            .lock()
            .dirty
            .entry(uid.clone())
            .or_insert_with(Instant::now);
    }

    /// The API sync settled `status` for the pod.
    pub fn set_settled(&self, uid: &PodUid, status: Arc<PodStatus>) {
        self.inner.lock().settled.insert(uid.clone(), status);
    }

    /// Whether the pod's latest status is the one the API sync settled.
    pub fn is_settled(&self, uid: &PodUid) -> bool {
        let inner = self.inner.lock();
        match (inner.statuses.get(uid), inner.settled.get(uid)) {
            (Some(latest), Some(settled)) => Arc::ptr_eq(latest, settled),
            _ => false,
        }
    }

    /// Woken when a status changes.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    };
    use kubelet_core::testing::{PodBuilder, container};

    fn state(terminated: bool) -> Option<Vec<ContainerStatus>> {
        Some(vec![ContainerStatus {
            name: "a".into(),
            state: Some(if terminated {
                ContainerState {
                    terminated: Some(ContainerStateTerminated::default()),
                    ..Default::default()
                }
            } else {
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("ContainerCreating".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            }),
            ..Default::default()
        }])
    }

    /// What led the API server to answer 422: after a restart (nothing
    /// cached) a pod the API has Succeeded, whose containers the kubelet
    /// had already removed, is stopped again; its status is computed from a
    /// runtime without containers (waiting, Failed). The status kept is the
    /// one the API server allows: Succeeded, the container terminated.
    #[test]
    fn a_status_never_undoes_a_terminal_phase_or_a_terminated_container() {
        let pod = PodBuilder::default()
            .uid("u1")
            .restart_policy("Never")
            .container(container("a"))
            .status(PodStatus {
                phase: Some("Succeeded".into()),
                container_statuses: state(true),
                ..Default::default()
            })
            .build();
        let sm = StatusManager::default();
        let uid = PodUid::of(&pod);
        for phase in ["Failed", "Running"] {
            sm.set_pod_status(
                &pod,
                PodStatus {
                    phase: Some(phase.into()),
                    container_statuses: state(false),
                    ..Default::default()
                },
            );
            let got = sm.get_pod_status(&uid).unwrap();
            assert_eq!(got.phase.as_deref(), Some("Succeeded"), "after {phase}");
            assert_eq!(got.container_statuses, state(true), "after {phase}");
        }
        // A new life under the same UID owes nothing to the last one.
        sm.set_finished(&uid);
        sm.forget(&uid);
        assert!(sm.get_pod_status(&uid).is_none() && !sm.is_finished(&uid));
    }
}
