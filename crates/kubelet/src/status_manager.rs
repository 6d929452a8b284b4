//! The status manager: REPORTED state, and its only writer. SyncPod and
//! friends compose a status; this module keeps the start time and condition
//! transition times, refuses to move a pod out of a terminal phase, and
//! marks what changed so the API sync (`status_sync`) sends it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kubelet_core::status::{PHASE_FAILED, PHASE_SUCCEEDED, carry_over};
use kubelet_core::types::PodUid;

#[derive(Default)]
struct Inner {
    statuses: HashMap<PodUid, Arc<PodStatus>>,
    /// Statuses changed since the API sync last took them, with when each
    /// first changed (kubelet_pod_status_sync_duration_seconds).
    dirty: BTreeMap<PodUid, Instant>,
}

#[derive(Clone, Default)]
pub struct StatusManager {
    inner: Arc<Mutex<Inner>>,
    changed: Arc<Notify>,
}

fn terminal(s: &PodStatus) -> bool {
    matches!(s.phase.as_deref(), Some(PHASE_SUCCEEDED | PHASE_FAILED))
}

impl StatusManager {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record the status the kubelet computed for `pod`. The first status of
    /// a pod carries over from the status it came with (the scheduler's
    /// PodScheduled, a start time from before a restart).
    pub fn set_pod_status(&self, pod: &Pod, mut status: PodStatus) {
        let uid = PodUid::of(pod);
        let now = crate::clock::now_time();
        let mut inner = self.lock();
        let old = inner
            .statuses
            .get(&uid)
            .cloned()
            .or_else(|| pod.status.clone().map(Arc::new));
        if let Some(old) = &old
            && terminal(old)
            && !terminal(&status)
        {
            tracing::debug!(pod = %uid, "ignoring a non-terminal status for a terminal pod");
            return;
        }
        carry_over(&mut status, old.as_deref(), &now);
        if inner.statuses.get(&uid).map(|s| s.as_ref()) != Some(&status) {
            inner.statuses.insert(uid.clone(), Arc::new(status));
            inner.dirty.entry(uid).or_insert_with(Instant::now);
            self.changed.notify_one();
        }
    }

    pub fn get_pod_status(&self, uid: &PodUid) -> Option<Arc<PodStatus>> {
        self.lock().statuses.get(uid).cloned()
    }

    /// Forget statuses of pods `keep` rejects (pods the kubelet has forgotten).
    pub fn remove_orphans(&self, keep: impl Fn(&PodUid) -> bool) {
        let mut inner = self.lock();
        inner.statuses.retain(|uid, _| keep(uid));
        inner.dirty.retain(|uid, _| keep(uid));
    }

    /// The statuses changed since the last call, for the API sync, with
    /// when each first changed.
    pub fn take_dirty(&self) -> Vec<(PodUid, Arc<PodStatus>, Instant)> {
        let mut inner = self.lock();
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
        self.lock()
            .dirty
            .entry(uid.clone())
            .or_insert_with(Instant::now);
    }

    /// Woken when a status changes.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}
