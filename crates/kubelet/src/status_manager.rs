//! The status manager: REPORTED state, and its only writer. SyncPod and
//! friends compose a status; this module keeps the start time and condition
//! transition times, refuses to move a pod out of a terminal phase, and
//! serves the result (to `/pods` now, to the API server later).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kubelet_core::status::{PHASE_FAILED, PHASE_SUCCEEDED, carry_over};
use kubelet_core::types::PodUid;

#[derive(Clone, Default)]
pub struct StatusManager {
    statuses: Arc<Mutex<HashMap<PodUid, Arc<PodStatus>>>>,
}

/// The wall-clock time statuses record (seconds, as the API stores them).
fn wall_clock_now() -> Time {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn terminal(s: &PodStatus) -> bool {
    matches!(s.phase.as_deref(), Some(PHASE_SUCCEEDED | PHASE_FAILED))
}

impl StatusManager {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PodUid, Arc<PodStatus>>> {
        self.statuses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record the status the kubelet computed for `pod`.
    pub fn set_pod_status(&self, pod: &Pod, mut status: PodStatus) {
        let uid = PodUid::of(pod);
        let now = wall_clock_now();
        let mut map = self.lock();
        let old = map.get(&uid).cloned();
        if let Some(old) = &old
            && terminal(old)
            && !terminal(&status)
        {
            tracing::debug!(pod = %uid, "ignoring a non-terminal status for a terminal pod");
            return;
        }
        carry_over(&mut status, old.as_deref(), &now);
        if old.as_deref() != Some(&status) {
            map.insert(uid, Arc::new(status));
        }
    }

    pub fn get_pod_status(&self, uid: &PodUid) -> Option<Arc<PodStatus>> {
        self.lock().get(uid).cloned()
    }

    /// Forget statuses of pods `keep` rejects (pods the kubelet has forgotten).
    pub fn remove_orphans(&self, keep: impl Fn(&PodUid) -> bool) {
        self.lock().retain(|uid, _| keep(uid));
    }
}
