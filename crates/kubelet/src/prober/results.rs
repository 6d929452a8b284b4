//! Cached probe results by container id (upstream's prober/results
//! manager): what the workers last decided, read by the status and
//! runtime code. A change of a result notifies the sync loop.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use kubelet_core::probe::{ProbeKind, ProbeResult};
use kubelet_core::runtime::ProbeView;
use kubelet_core::types::PodUid;
use tokio::sync::mpsc::UnboundedSender;

/// A cheap read handle on the results; keys are raw runtime container ids
/// (a `<runtime>://` prefix given to a lookup is ignored).
#[derive(Clone, Debug, Default)]
pub struct ProbeResults {
    inner: Arc<Mutex<HashMap<(ProbeKind, String), ProbeResult>>>,
}

/// The raw id of "<runtime>://<id>" (or of a raw id).
pub fn raw_container_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, raw)| raw)
}

impl ProbeResults {
    /// The `kind` result of a container, if a worker has one.
    pub fn get(&self, kind: ProbeKind, container_id: &str) -> Option<ProbeResult> {
        self.inner
            .lock()
            .get(&(kind, raw_container_id(container_id).to_owned()))
            .copied()
    }

    pub fn readiness(&self, container_id: &str) -> Option<ProbeResult> {
        self.get(ProbeKind::Readiness, container_id)
    }

    pub fn liveness(&self, container_id: &str) -> Option<ProbeResult> {
        self.get(ProbeKind::Liveness, container_id)
    }

    pub fn startup(&self, container_id: &str) -> Option<ProbeResult> {
        self.get(ProbeKind::Startup, container_id)
    }

    /// Record a result; a change sends `uid` on `changed`.
    pub(crate) fn set(
        &self,
        kind: ProbeKind,
        container_id: &str,
        result: ProbeResult,
        uid: &PodUid,
        changed: &UnboundedSender<PodUid>,
    ) {
        let key = (kind, raw_container_id(container_id).to_owned());
        let previous = self.inner.lock().insert(key, result);
        if previous != Some(result) {
            // The receiver is gone only at shutdown.
            let _ = changed.send(uid.clone());
        }
    }

    /// A success kept from before a restart, without telling anyone (the
    /// pod's first status is still to be made).
    pub(crate) fn seed(&self, kind: ProbeKind, container_id: &str) {
        self.inner.lock().insert(
            (kind, raw_container_id(container_id).to_owned()),
            ProbeResult::Success,
        );
    }

    pub(crate) fn remove(&self, kind: ProbeKind, container_id: &str) {
        self.inner
            .lock()
            .remove(&(kind, raw_container_id(container_id).to_owned()));
    }
}

/// The results as the pure status and action code reads them.
impl ProbeView for ProbeResults {
    fn liveness_failed(&self, id: &str) -> bool {
        self.liveness(id) == Some(ProbeResult::Failure)
    }
    fn startup_failed(&self, id: &str) -> bool {
        self.startup(id) == Some(ProbeResult::Failure)
    }
    fn started(&self, id: &str) -> bool {
        self.startup(id) == Some(ProbeResult::Success)
    }
    fn ready(&self, id: &str) -> bool {
        self.readiness(id) == Some(ProbeResult::Success)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_notifies_on_change_only() {
        let results = ProbeResults::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let uid = PodUid::from("u1");
        let cases = [
            (ProbeKind::Readiness, ProbeResult::Failure, true),
            (ProbeKind::Readiness, ProbeResult::Failure, false),
            (ProbeKind::Readiness, ProbeResult::Success, true),
            (ProbeKind::Liveness, ProbeResult::Success, true),
        ];
        for (kind, result, notifies) in cases {
            results.set(kind, "containerd://abc", result, &uid, &tx);
            assert_eq!(
                rx.try_recv().ok(),
                notifies.then(|| uid.clone()),
                "{kind} {result:?}"
            );
        }
        assert_eq!(results.readiness("abc"), Some(ProbeResult::Success));
        assert!(results.ready("containerd://abc"));
        assert!(!results.liveness_failed("abc"));
        assert_eq!(results.startup("abc"), None);
        results.remove(ProbeKind::Readiness, "abc");
        assert_eq!(results.readiness("abc"), None);
        assert_eq!(results.liveness("abc"), Some(ProbeResult::Success));
    }
}
