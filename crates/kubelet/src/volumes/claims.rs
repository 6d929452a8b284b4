//! persistentVolumeClaim and generic ephemeral volumes: the claim read from
//! the API server (an ephemeral volume's is `<pod>-<volume>`, the pod's own), the
//! PV bound to it, both checked as upstream's desired state of world
//! populator checks them (`kubelet_core::claim`), on every sync (a claim
//! being bound is waited for, retried with the pod's backoff).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kubelet_api::ApiClient;
use kubelet_api::objects::{get_cluster_object, get_object};
use kubelet_core::claim::{
    BoundVolume, NodeExpansion, bound_volume, bound_volume_name, node_expansion, volume_is_for_pod,
};
use kubelet_core::failure::Cause;
use tokio::sync::watch;

/// Where claims and PVs are read, and the node they must be on.
#[derive(Clone)]
pub struct Claims {
    pub api: ApiClient,
    pub node_name: String,
    /// The Node as last seen (its labels, for a PV's node affinity).
    pub node: watch::Receiver<Option<Arc<Node>>>,
}

/// Why a claim's volume cannot be used yet, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("error processing PVC {namespace}/{claim}: {message}")]
    Processing {
        namespace: String,
        claim: String,
        message: String,
    },
    /// An ephemeral volume's claim made for another pod (or by hand).
    #[error("{0}")]
    NotOwner(String),
}

impl ClaimError {
    /// A claim not bound yet, a PV being made or bound: they change on
    /// their own; a claim of another pod's does not.
    pub fn cause(&self) -> Cause {
        match self {
            ClaimError::Processing { .. } => Cause::Transient,
            ClaimError::NotOwner(_) => Cause::Unsupported,
        }
    }
}

/// A claim resolved to its volume.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub volume: BoundVolume,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The node is to expand the volume's file system.
    pub expansion: Option<NodeExpansion>,
}

impl Claims {
    /// The PV bound to the claim `claim` of `pod`; `ephemeral`: the claim
    /// of a generic ephemeral volume, which must be the pod's own.
    pub async fn resolve(
        &self,
        pod: &Pod,
        claim: &str,
        read_only: bool,
        ephemeral: bool,
    ) -> Result<Resolved, ClaimError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let fail = |message: String| ClaimError::Processing {
            namespace: namespace.to_owned(),
            claim: claim.to_owned(),
            message,
        };
        let pvc = get_object::<PersistentVolumeClaim>(
            &self.api,
            "PersistentVolumeClaim",
            namespace,
            claim,
        )
        .await
        .map_err(|e| fail(format!("failed to fetch PVC from API server: {e}")))?
        .ok_or_else(|| {
            fail(format!(
                "failed to fetch PVC from API server: persistentvolumeclaims {claim:?} not found"
            ))
        })?;
        let pv_name = bound_volume_name(&pvc).map_err(fail)?;
        if ephemeral {
            volume_is_for_pod(pod, &pvc).map_err(ClaimError::NotOwner)?;
        }
        let pv = get_cluster_object::<PersistentVolume>(&self.api, "PersistentVolume", pv_name)
            .await
            .map_err(|e| fail(format!("failed to fetch PV {pv_name} from API server: {e}")))?
            .ok_or_else(|| {
                fail(format!(
                    "failed to fetch PV {pv_name} from API server: persistentvolumes {pv_name:?} not found"
                ))
            })?;
        let labels = self
            .node
            .borrow()
            .as_ref()
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let uid = pvc.metadata.uid.clone().unwrap_or_default();
        let volume = bound_volume(&pv, &uid, read_only, &self.node_name, &labels).map_err(fail)?;
        Ok(Resolved {
            volume,
            namespace: namespace.to_owned(),
            name: claim.to_owned(),
            uid,
            expansion: node_expansion(&pvc, &pv),
        })
    }
}
