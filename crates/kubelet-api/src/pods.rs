//! Pods in the API server, as the kubelet touches them: the watch of this
//! node's pods (the API pod source), status patches with a UID
//! precondition, the final delete, and mirror pods for static pods.

use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;

use kubelet_core::status::is_kubelet_condition;
use kubelet_core::types::{SOURCE_API, SourceSnapshot, keys};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::client::{ApiClient, ApiError};
use crate::watch::watch_set;

fn pods_in(client: &kube::Client, namespace: &str) -> Api<Pod> {
    Api::namespaced(client.clone(), namespace)
}

fn what(namespace: &str, name: &str) -> String {
    format!("pods/{namespace}/{name}")
}

/// Watch every pod bound to `node` (fieldSelector spec.nodeName) and send
/// the whole set after each change (SET semantics), mirror pods included
/// (the pod manager tells them apart). Resumes from the last
/// resource version and relists on 410 Gone (kube's watcher), backing off
/// while the API server is away. Ends when `cancel` fires or `tx` closes.
pub async fn watch_node_pods(
    api: ApiClient,
    node: String,
    tx: mpsc::Sender<SourceSnapshot>,
    cancel: CancellationToken,
) {
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let pods = Api::<Pod>::all(api.client().clone());
    let key = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    let publish = |pods| {
        let tx = tx.clone();
        async move {
            let snapshot = SourceSnapshot {
                source: SOURCE_API,
                pods,
            };
            tx.send(snapshot).await.is_ok()
        }
    };
    watch_set(pods, config, "this node's pods", key, publish, &cancel).await;
}

/// The pod as the API server has it now.
pub async fn get_pod(api: &ApiClient, namespace: &str, name: &str) -> Result<Pod, ApiError> {
    pods_in(api.client(), namespace)
        .get(name)
        .await
        .map_err(|e| ApiError::from_kube("get", what(namespace, name), e))
}

/// Patch `pods/status` with the kubelet's status. The UID in the patch is a
/// precondition: a pod recreated under the same name is never overwritten.
/// Conditions and container statuses merge by key (strategic merge), so
/// conditions others own (PodScheduled) are kept.
pub async fn patch_status(api: &ApiClient, pod: &Pod, status: &PodStatus) -> Result<Pod, ApiError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let patch = serde_json::json!({
        "metadata": { "uid": pod.metadata.uid },
        "status": status_patch(pod, status),
    });
    pods_in(api.client(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(|e| ApiError::from_kube("patch", format!("{}/status", what(ns, name)), e))
}

/// The status as a strategic merge patch over `pod`'s, as upstream's two-way
/// patch from the API's status: conditions merge by type, so a condition the
/// kubelet owns and no longer reports (a resize's PodResizePending or
/// PodResizeInProgress once over) is deleted explicitly; `podIPs` and
/// `hostIPs` merge by IP, so the IPs the status no longer has (those of a
/// sandbox that was replaced) are deleted and the list's order set, or the
/// API server would keep the old IPs beside the new ones (and refuse two of
/// one family); a status with no pod IP (no ready sandbox) removes them.
fn status_patch(pod: &Pod, status: &PodStatus) -> serde_json::Value {
    let mut patch = serde_json::to_value(status).unwrap_or_default();
    let Some(object) = patch.as_object_mut() else {
        return patch;
    };
    let old = pod.status.as_ref();
    clear_dropped_condition_fields(object, old);
    let reported = |kind: &str| status.conditions.iter().flatten().any(|c| c.type_ == kind);
    let gone: Vec<serde_json::Value> = old
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| is_kubelet_condition(&c.type_) && !reported(&c.type_))
        .map(|c| serde_json::json!({"type": c.type_, "$patch": "delete"}))
        .collect();
    if !gone.is_empty()
        && let serde_json::Value::Array(list) = object
            .entry("conditions")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()))
    {
        list.extend(gone);
    }
    let pod_ips = |s: &PodStatus| -> Option<Vec<String>> {
        Some(s.pod_ips.as_ref()?.iter().map(|i| i.ip.clone()).collect())
    };
    let host_ips = |s: &PodStatus| -> Option<Vec<String>> {
        Some(s.host_ips.as_ref()?.iter().map(|i| i.ip.clone()).collect())
    };
    let old_pod_ips = old.and_then(pod_ips);
    if status.pod_ips.is_none() && old_pod_ips.as_ref().is_some_and(|ips| !ips.is_empty()) {
        // No ready sandbox: the pod has no IP any more (upstream's patch
        // from the API's status removes them too).
        object.insert("podIP".into(), serde_json::Value::Null);
        object.insert("podIPs".into(), serde_json::Value::Null);
    }
    merge_by_ip(object, "podIPs", old_pod_ips, pod_ips(status));
    merge_by_ip(object, "hostIPs", old.and_then(host_ips), host_ips(status));
    patch
}

/// Conditions merge by type, and within one field by field: a field the
/// API's condition has and the status's no longer does (the reason and
/// message of a Ready condition that turned True) is set to null, as a
/// two-way strategic merge patch spells it, or the API server would keep it.
fn clear_dropped_condition_fields(
    patch: &mut serde_json::Map<String, serde_json::Value>,
    old: Option<&PodStatus>,
) {
    let Some(serde_json::Value::Array(conditions)) = patch.get_mut("conditions") else {
        return;
    };
    for condition in conditions.iter_mut() {
        let Some(new) = condition.as_object_mut() else {
            continue;
        };
        let Some(was) = old
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| Some(c.type_.as_str()) == new["type"].as_str())
            })
            .and_then(|c| serde_json::to_value(c).ok())
        else {
            continue;
        };
        for key in was.as_object().into_iter().flat_map(|o| o.keys()) {
            if !new.contains_key(key) {
                new.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
}

/// A list merged by `ip` in the patch: when the status reports it and it
/// differs from the API's, the IPs gone are deleted and the order is set
/// (`$setElementOrder`), as a two-way strategic merge patch spells it. A list
/// the status does not report is left as the API has it.
fn merge_by_ip(
    patch: &mut serde_json::Map<String, serde_json::Value>,
    field: &str,
    old: Option<Vec<String>>,
    new: Option<Vec<String>>,
) {
    let (Some(new), old) = (new, old.unwrap_or_default()) else {
        return;
    };
    if old == new {
        return;
    }
    let mut list: Vec<serde_json::Value> =
        new.iter().map(|ip| serde_json::json!({"ip": ip})).collect();
    patch.insert(
        format!("$setElementOrder/{field}"),
        serde_json::Value::Array(list.clone()),
    );
    list.extend(
        old.iter()
            .filter(|ip| !new.contains(ip))
            .map(|ip| serde_json::json!({"ip": ip, "$patch": "delete"})),
    );
    patch.insert(field.to_owned(), serde_json::Value::Array(list));
}

/// Delete a pod the kubelet has finished with: grace period 0 and a UID
/// precondition, as upstream's status manager does. Gone already is done.
pub async fn delete_finished(
    api: &ApiClient,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<(), ApiError> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match pods_in(api.client(), namespace).delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = ApiError::from_kube("delete", what(namespace, name), e);
            if e.is_not_found() { Ok(()) } else { Err(e) }
        }
    }
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

/// Create a mirror pod (a static pod's reflection in the API).
pub async fn create_mirror(api: &ApiClient, mirror: &Pod) -> Result<Pod, ApiError> {
    let ns = mirror.metadata.namespace.as_deref().unwrap_or("default");
    let name = mirror.metadata.name.as_deref().unwrap_or("");
    pods_in(api.client(), ns)
        .create(&PostParams::default(), mirror)
        .await
        .map_err(|e| ApiError::from_kube("create", what(ns, name), e))
}

fn events_in(client: &kube::Client, namespace: &str) -> Api<CoreEvent> {
    Api::namespaced(client.clone(), namespace)
}

/// Record a core/v1 Event (what `kubectl describe` shows); returns the API server's copy.
pub async fn create_event(api: &ApiClient, event: &CoreEvent) -> Result<CoreEvent, ApiError> {
    let ns = event.metadata.namespace.as_deref().unwrap_or("default");
    events_in(api.client(), ns)
        .create(&PostParams::default(), event)
        .await
        .map_err(|e| ApiError::from_kube("create", format!("events/{ns}"), e))
}

/// Update a recorded Event with a strategic merge `patch` (a repeat of it: its count,
/// lastTimestamp and message), as upstream's event recorder does; returns the API server's
/// copy.
pub async fn patch_event(
    api: &ApiClient,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<CoreEvent, ApiError> {
    events_in(api.client(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(|e| ApiError::from_kube("patch", format!("events/{namespace}/{name}"), e))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodIP};
    use kubelet_core::testing::PodBuilder;

    use super::*;

    fn condition(kind: &str) -> PodCondition {
        PodCondition {
            type_: kind.into(),
            status: "True".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_kubelet_condition_no_longer_reported_is_deleted() {
        let pod = PodBuilder::default()
            .status(PodStatus {
                conditions: Some(vec![
                    condition("Ready"),
                    condition("PodResizeInProgress"),
                    // A readiness gate's: someone else's to remove.
                    condition("example.com/gate"),
                ]),
                ..Default::default()
            })
            .build();
        let status = PodStatus {
            conditions: Some(vec![condition("Ready")]),
            ..Default::default()
        };
        let patch = status_patch(&pod, &status);
        assert_eq!(
            patch["conditions"],
            serde_json::json!([
                {"type": "Ready", "status": "True"},
                {"type": "PodResizeInProgress", "$patch": "delete"},
            ])
        );
        // Nothing to delete: the status as it is.
        let same = status_patch(&Pod::default(), &status);
        assert_eq!(same, serde_json::to_value(&status).unwrap());
    }

    /// Ready turned True: the reason and message it had while False are
    /// removed, not kept beside the new status.
    #[test]
    fn a_conditions_dropped_fields_are_removed() {
        let not_ready = PodCondition {
            reason: Some("ContainersNotReady".into()),
            message: Some("containers with unready status: [c]".into()),
            status: "False".into(),
            ..condition("Ready")
        };
        let pod = PodBuilder::default()
            .status(PodStatus {
                conditions: Some(vec![not_ready, condition("Initialized")]),
                ..Default::default()
            })
            .build();
        let status = PodStatus {
            conditions: Some(vec![condition("Ready"), condition("Initialized")]),
            ..Default::default()
        };
        assert_eq!(
            status_patch(&pod, &status)["conditions"],
            serde_json::json!([
                {"type": "Ready", "status": "True", "reason": null, "message": null},
                {"type": "Initialized", "status": "True"},
            ])
        );
    }

    fn ips(list: &[&str]) -> Option<Vec<PodIP>> {
        Some(list.iter().map(|ip| PodIP { ip: (*ip).into() }).collect())
    }

    /// A sandbox recreated with a new IP: the API's old IP is deleted, not
    /// kept beside the new one (which the API server refuses with 422 "may
    /// specify no more than one IP for each IP family").
    #[test]
    fn ips_no_longer_reported_are_deleted_and_the_order_set() {
        /// (the API's IPs, the status's, the patch)
        type Case = (
            &'static [&'static str],
            Option<&'static [&'static str]>,
            serde_json::Value,
        );
        let cases: &[Case] = &[
            (
                &["10.88.0.82"],
                Some(&["10.88.0.87"]),
                serde_json::json!({
                    "$setElementOrder/podIPs": [{"ip": "10.88.0.87"}],
                    "podIPs": [{"ip": "10.88.0.87"}, {"ip": "10.88.0.82", "$patch": "delete"}],
                    "podIP": "10.88.0.87",
                }),
            ),
            // Dual stack, the order upstream's sortPodIPs gives kept.
            (
                &["10.88.0.82"],
                Some(&["fd00::5", "10.88.0.82"]),
                serde_json::json!({
                    "$setElementOrder/podIPs": [{"ip": "fd00::5"}, {"ip": "10.88.0.82"}],
                    "podIPs": [{"ip": "fd00::5"}, {"ip": "10.88.0.82"}],
                    "podIP": "fd00::5",
                }),
            ),
            // The same IPs: the list as it is, no directive.
            (
                &["10.88.0.82"],
                Some(&["10.88.0.82"]),
                serde_json::json!({"podIPs": [{"ip": "10.88.0.82"}], "podIP": "10.88.0.82"}),
            ),
            // No ready sandbox: the IPs go, as upstream's patch removes them.
            (
                &["10.88.0.82"],
                None,
                serde_json::json!({"podIP": null, "podIPs": null}),
            ),
        ];
        for (old, new, want) in cases {
            let pod = PodBuilder::default()
                .status(PodStatus {
                    pod_ip: Some(old[0].into()),
                    pod_ips: ips(old),
                    ..Default::default()
                })
                .build();
            let status = PodStatus {
                pod_ip: new.map(|n| n[0].to_owned()),
                pod_ips: new.and_then(ips),
                ..Default::default()
            };
            assert_eq!(&status_patch(&pod, &status), want, "{old:?} -> {new:?}");
        }
    }
}
