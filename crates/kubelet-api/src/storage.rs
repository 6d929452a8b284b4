//! The node's storage objects the kubelet writes: its CSINode (the CSI
//! drivers registered here, upstream's nodeinfomanager) and the Node
//! metadata a driver's registration adds (its node ID annotation and
//! topology labels), and the status of a claim whose volume it expanded.
//! Each is one NodeRestriction lets a node write.

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::{ApiClient, ApiError};

/// Create the CSINode `csinode` (named after the node).
pub async fn create_csinode(api: &ApiClient, csinode: &CSINode) -> Result<CSINode, ApiError> {
    let name = csinode.metadata.name.clone().unwrap_or_default();
    Api::<CSINode>::all(api.client().clone())
        .create(&PostParams::default(), csinode)
        .await
        .map_err(|e| ApiError::from_kube("create", format!("CSINode {name}"), e))
}

/// Replace the CSINode (its resourceVersion guards the update: a conflict
/// is the caller's to retry).
pub async fn replace_csinode(api: &ApiClient, csinode: &CSINode) -> Result<CSINode, ApiError> {
    let name = csinode.metadata.name.clone().unwrap_or_default();
    Api::<CSINode>::all(api.client().clone())
        .replace(&name, &PostParams::default(), csinode)
        .await
        .map_err(|e| ApiError::from_kube("update", format!("CSINode {name}"), e))
}

/// Merge-patch the Node's metadata (`{"metadata": {...}}`; a null value
/// removes a key).
pub async fn patch_node_metadata(
    api: &ApiClient,
    node: &str,
    metadata: serde_json::Value,
) -> Result<Node, ApiError> {
    Api::<Node>::all(api.client().clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "metadata": metadata })),
        )
        .await
        .map_err(|e| ApiError::from_kube("patch", format!("nodes/{node}"), e))
}

/// Merge-patch a claim's status (`{"capacity": ..., ...}`): what the node
/// may change of it, its capacity, conditions and resize status, after
/// expanding its volume.
pub async fn patch_claim_status(
    api: &ApiClient,
    namespace: &str,
    name: &str,
    status: serde_json::Value,
) -> Result<PersistentVolumeClaim, ApiError> {
    Api::<PersistentVolumeClaim>::namespaced(api.client().clone(), namespace)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await
        .map_err(|e| {
            ApiError::from_kube(
                "patch",
                format!("persistentvolumeclaims/{name}/status in {namespace}"),
                e,
            )
        })
}
