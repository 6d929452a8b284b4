//! The status manager's API side (upstream's status_manager syncBatch and
//! mirror_client): send each changed pod status as a `pods/status` patch
//! with a UID precondition, skip what changes nothing, retry with backoff
//! while the API server is away without losing the latest status, delete a
//! deleted pod once the kubelet has finished with it, and keep one mirror
//! pod per static pod.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kubelet_api::ApiClient;
use kubelet_api::pods::{create_mirror, delete_finished, patch_status};
use kubelet_core::backoff::Backoff;
use kubelet_core::status::kubelet_owned;
use kubelet_core::types::{PodUid, SOURCE_FILE, keys, pod_full_name};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kubelet::Kubelet;

/// How often pending work (a missing mirror pod, a retry) is looked at even
/// when no status changed.
const SYNC_PERIOD: Duration = Duration::from_secs(1);
/// A mirror pod just created is not created again before the watch shows it.
const MIRROR_PENDING: Duration = Duration::from_secs(10);

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

pub fn is_static_pod(pod: &Pod) -> bool {
    annotation(pod, keys::CONFIG_SOURCE) == Some(SOURCE_FILE)
}

/// The mirror pod of a static pod: same name, spec and labels, the
/// `kubernetes.io/config.mirror` annotation holding the static pod's
/// config hash, and the Node as controlling owner (what NodeRestriction
/// requires).
pub fn mirror_pod(pod: &Pod, node: &str, node_uid: &str) -> Pod {
    let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let hash = annotations
        .get(keys::CONFIG_HASH)
        .cloned()
        .unwrap_or_default();
    annotations.insert(keys::CONFIG_MIRROR.into(), hash);
    Pod {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            labels: pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.into(),
                uid: node_uid.into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: pod.spec.clone(),
        status: None,
    }
}

#[derive(Default)]
struct SyncState {
    /// What the API server last accepted, per pod.
    /// Keyed by the kubelet's pod UID; holds the UID of the API object
    /// patched (a static pod's mirror changes UID when it is recreated).
    sent: HashMap<PodUid, (String, Arc<PodStatus>)>,
    /// Pods already deleted, so the delete is asked once.
    deleted: HashSet<PodUid>,
    /// Mirror pods created and not yet seen in the watch: full name → (hash, when).
    mirrors_pending: HashMap<String, (String, Instant)>,
}

impl Kubelet {
    /// Run the API status sync until cancelled.
    pub(crate) async fn status_sync(self: Arc<Self>, api: ApiClient, cancel: CancellationToken) {
        let mut state = SyncState::default();
        let mut tick = tokio::time::interval(SYNC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.status.changed() => {}
                _ = tick.tick() => {}
            }
            self.reconcile_mirror_pods(&api, &mut state).await;
            let ok = self.send_statuses(&api, &mut state).await;
            self.delete_finished_pods(&api, &mut state).await;
            if ok {
                backoff.reset();
            } else {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                }
            }
        }
    }

    /// Patch every changed status; false when the API server refused or was
    /// unreachable (those stay dirty and are retried).
    async fn send_statuses(&self, api: &ApiClient, state: &mut SyncState) -> bool {
        let mut ok = true;
        for (uid, status, since) in self.status.take_dirty() {
            let Some(pod) = self.pod_manager.get(&uid) else {
                continue;
            };
            let target = if is_static_pod(&pod) {
                match self.pod_manager.mirror_of(&pod) {
                    Some(m) => m,
                    None => {
                        self.status.mark_dirty(&uid);
                        continue;
                    }
                }
            } else {
                pod
            };
            let target_uid = target.metadata.uid.clone().unwrap_or_default();
            if state.sent.get(&uid) == Some(&(target_uid.clone(), status.clone())) {
                continue;
            }
            // Conditions others own (readiness gates) are not the kubelet's to write.
            match patch_status(api, &target, &kubelet_owned(&status)).await {
                Ok(_) => {
                    self.opts
                        .metrics
                        .pod_status_sync_duration
                        .observe_duration(&[], since.elapsed());
                    state.sent.insert(uid, (target_uid, status));
                }
                Err(e) if e.is_not_found() || e.is_conflict() => {
                    tracing::debug!(pod = %pod_full_name(&target), error = %e, "pod gone or replaced: status dropped");
                }
                Err(e) => {
                    tracing::warn!(pod = %pod_full_name(&target), error = %e, "status patch failed; will retry");
                    self.status.mark_dirty(&uid);
                    ok = false;
                }
            }
        }
        state
            .sent
            .retain(|uid, _| self.pod_manager.get(uid).is_some());
        ok
    }

    /// A pod being deleted is deleted for good (grace 0, UID precondition)
    /// once its worker finished and its final status reached the API.
    async fn delete_finished_pods(&self, api: &ApiClient, state: &mut SyncState) {
        for pod in self.pod_manager.pods() {
            let uid = PodUid::of(&pod);
            if pod.metadata.deletion_timestamp.is_none()
                || is_static_pod(&pod)
                || state.deleted.contains(&uid)
            {
                continue;
            }
            let finished = self.workers.state(&uid).is_some_and(|s| s.is_finished());
            let reported = self
                .status
                .get_pod_status(&uid)
                .is_some_and(|s| state.sent.get(&uid).is_some_and(|(_, sent)| *sent == s));
            if !(finished && reported) {
                continue;
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap_or("");
            match delete_finished(api, ns, name, uid.as_str()).await {
                Ok(()) => {
                    tracing::info!(pod = %pod_full_name(&pod), "pod terminated and deleted");
                    state.deleted.insert(uid);
                }
                Err(e) => {
                    tracing::warn!(pod = %pod_full_name(&pod), error = %e, "deleting a terminated pod")
                }
            }
        }
        state
            .deleted
            .retain(|uid| self.pod_manager.get(uid).is_some());
    }

    /// One mirror pod per static pod, replaced when the manifest changes and
    /// recreated when deleted; mirrors of static pods that are gone are
    /// deleted.
    async fn reconcile_mirror_pods(&self, api: &ApiClient, state: &mut SyncState) {
        let Some(node_uid) = self.node_uid() else {
            return;
        };
        let node = &self.opts.node_name;
        let statics: Vec<Arc<Pod>> = self
            .pod_manager
            .pods()
            .into_iter()
            .filter(|p| is_static_pod(p))
            .collect();
        for pod in &statics {
            let name = pod_full_name(pod);
            let hash = annotation(pod, keys::CONFIG_HASH)
                .unwrap_or_default()
                .to_owned();
            let mirror = self.pod_manager.mirror_of(pod);
            if let Some(m) = &mirror
                && annotation(m, keys::CONFIG_MIRROR) == Some(hash.as_str())
                && m.metadata.deletion_timestamp.is_none()
            {
                state.mirrors_pending.remove(&name);
                continue;
            }
            if state
                .mirrors_pending
                .get(&name)
                .is_some_and(|(h, at)| *h == hash && at.elapsed() < MIRROR_PENDING)
            {
                continue;
            }
            if let Some(m) = mirror {
                let uid = m.metadata.uid.clone().unwrap_or_default();
                let ns = m.metadata.namespace.as_deref().unwrap_or("default");
                let mname = m.metadata.name.as_deref().unwrap_or("");
                if let Err(e) = delete_finished(api, ns, mname, &uid).await {
                    tracing::warn!(pod = %name, error = %e, "deleting an outdated mirror pod");
                    continue;
                }
            }
            match create_mirror(api, &mirror_pod(pod, node, &node_uid)).await {
                Ok(_) => {
                    tracing::info!(pod = %name, "mirror pod created");
                    state.mirrors_pending.insert(name, (hash, Instant::now()));
                    self.status.mark_dirty(&PodUid::of(pod));
                }
                Err(e) => {
                    // Exists already (the watch will show it) or refused:
                    // either way, not again before MIRROR_PENDING.
                    if !e.is_conflict() {
                        tracing::warn!(pod = %name, error = %e, "creating a mirror pod");
                    }
                    state.mirrors_pending.insert(name, (hash, Instant::now()));
                }
            }
        }
        for m in self.pod_manager.mirrors() {
            let name = pod_full_name(&m);
            if statics.iter().any(|p| pod_full_name(p) == name) {
                continue;
            }
            let uid = m.metadata.uid.clone().unwrap_or_default();
            let ns = m.metadata.namespace.as_deref().unwrap_or("default");
            let mname = m.metadata.name.as_deref().unwrap_or("");
            match delete_finished(api, ns, mname, &uid).await {
                Ok(()) => tracing::info!(pod = %name, "orphaned mirror pod deleted"),
                Err(e) => {
                    tracing::warn!(pod = %name, error = %e, "deleting an orphaned mirror pod")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn mirror_pods_carry_the_hash_and_the_node_owner() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web-node1".into()),
                namespace: Some("default".into()),
                uid: Some("static-uid".into()),
                annotations: Some(BTreeMap::from([
                    (keys::CONFIG_SOURCE.to_string(), "file".to_string()),
                    (keys::CONFIG_HASH.to_string(), "abc".to_string()),
                ])),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(is_static_pod(&pod));
        let m = mirror_pod(&pod, "node1", "node-uid");
        assert_eq!(annotation(&m, keys::CONFIG_MIRROR), Some("abc"));
        assert_eq!(
            m.metadata.uid, None,
            "the API server assigns the mirror's UID"
        );
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "node1", "node-uid")
        );
    }
}
