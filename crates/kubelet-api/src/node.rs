//! The Node object and its Lease: registration (create, or reconcile the
//! existing object of the same name), status patches, and the heartbeat.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::{ApiClient, ApiError};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Register `node`: create it, or, when a Node of that name exists,
/// reconcile the labels the kubelet owns and return the existing object.
pub async fn register(api: &ApiClient, node: &Node) -> Result<Node, ApiError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let nodes: Api<Node> = Api::all(api.client().clone());
    match nodes.create(&PostParams::default(), node).await {
        Ok(n) => return Ok(n),
        Err(e) => {
            let e = ApiError::from_kube("create", format!("nodes/{name}"), e);
            if !e.is_conflict() {
                return Err(e);
            }
        }
    }
    let existing = nodes
        .get(&name)
        .await
        .map_err(|e| ApiError::from_kube("get", format!("nodes/{name}"), e))?;
    let have = existing.metadata.labels.clone().unwrap_or_default();
    let want: BTreeMap<String, String> = node
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, v)| have.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if want.is_empty() {
        return Ok(existing);
    }
    let patch = serde_json::json!({ "metadata": { "labels": want } });
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| ApiError::from_kube("patch", format!("nodes/{name}"), e))
}

/// Watch the Node named `name` (fieldSelector metadata.name) and keep its
/// latest version in `tx`, None while there is none: the labels, taints and
/// allocatable others change after registration reach the kubelet (what
/// upstream's node informer does). Backs off as the pod watch does; ends
/// when `cancel` fires.
pub async fn watch_node(
    api: ApiClient,
    name: String,
    tx: watch::Sender<Option<Arc<Node>>>,
    cancel: CancellationToken,
) {
    let nodes = Api::<Node>::all(api.client().clone());
    let publish = |node| {
        tx.send_replace(node);
        true
    };
    crate::objects::watch_named(nodes, &name, publish, cancel).await;
}

/// Patch `nodes/<name>/status` (strategic merge: conditions and addresses
/// merge by type).
pub async fn patch_status(
    api: &ApiClient,
    name: &str,
    status: &NodeStatus,
) -> Result<Node, ApiError> {
    let nodes: Api<Node> = Api::all(api.client().clone());
    let patch = serde_json::json!({ "status": status });
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(|e| ApiError::from_kube("patch", format!("nodes/{name}/status"), e))
}

/// The node's Lease heartbeat: one request per renewal while the cached
/// object is current; a conflict or a missing lease costs a get or create.
pub struct LeaseHeartbeat {
    node: String,
    node_uid: Option<String>,
    duration_seconds: i32,
    cached: Option<Lease>,
}

impl LeaseHeartbeat {
    pub fn new(node: String, node_uid: Option<String>, duration_seconds: i32) -> Self {
        LeaseHeartbeat {
            node,
            node_uid,
            duration_seconds,
            cached: None,
        }
    }

    fn desired(&self, base: Option<Lease>, now: MicroTime) -> Lease {
        let mut lease = base.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.node.clone()),
                namespace: Some(LEASE_NAMESPACE.into()),
                owner_references: self.node_uid.as_ref().map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: self.node.clone(),
                        uid: uid.clone(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        });
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.node.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.renew_time = Some(now);
        lease
    }

    /// Renew (or create) the lease with renewTime `now`.
    pub async fn renew(&mut self, api: &ApiClient, now: MicroTime) -> Result<(), ApiError> {
        let what = format!("leases/{LEASE_NAMESPACE}/{}", self.node);
        let leases: Api<Lease> = Api::namespaced(api.client().clone(), LEASE_NAMESPACE);
        let base = match self.cached.take() {
            Some(l) => Some(l),
            None => leases
                .get_opt(&self.node)
                .await
                .map_err(|e| ApiError::from_kube("get", what.clone(), e))?,
        };
        let lease = self.desired(base, now);
        let result = if lease.metadata.resource_version.is_some() {
            leases
                .replace(&self.node, &PostParams::default(), &lease)
                .await
                .map_err(|e| ApiError::from_kube("update", what, e))
        } else {
            leases
                .create(&PostParams::default(), &lease)
                .await
                .map_err(|e| ApiError::from_kube("create", what, e))
        };
        self.cached = result.as_ref().ok().cloned();
        result.map(drop)
    }
}
