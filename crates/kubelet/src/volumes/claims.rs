//! persistentVolumeClaim volumes: the claim read from the API server, the
//! PV bound to it, both checked as upstream's desired state of world
//! populator checks them (`kubelet_core::claim`), on every sync (a claim
//! being bound is waited for, retried with the pod's backoff).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaimVolumeSource};
use kubelet_api::ApiClient;
use kubelet_api::objects::{get_claim, get_persistent_volume};
use kubelet_core::claim::{BoundVolume, bound_volume, bound_volume_name};
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
#[error("error processing PVC {namespace}/{claim}: {message}")]
pub struct ClaimError {
    pub namespace: String,
    pub claim: String,
    pub message: String,
}

impl ClaimError {
    /// A claim not bound yet, a PV being made or bound: they change on
    /// their own.
    pub fn cause(&self) -> Cause {
        Cause::Transient
    }
}

impl Claims {
    /// The PV bound to the claim `source` of a pod in `namespace`.
    pub async fn resolve(
        &self,
        namespace: &str,
        source: &PersistentVolumeClaimVolumeSource,
    ) -> Result<BoundVolume, ClaimError> {
        let fail = |message: String| ClaimError {
            namespace: namespace.to_owned(),
            claim: source.claim_name.clone(),
            message,
        };
        let pvc = get_claim(&self.api, namespace, &source.claim_name)
            .await
            .map_err(|e| fail(format!("failed to fetch PVC from API server: {e}")))?
            .ok_or_else(|| {
                fail(format!(
                    "failed to fetch PVC from API server: persistentvolumeclaims {:?} not found",
                    source.claim_name
                ))
            })?;
        let pv_name = bound_volume_name(&pvc).map_err(fail)?;
        let pv = get_persistent_volume(&self.api, pv_name)
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
        let claim_uid = pvc.metadata.uid.as_deref().unwrap_or("");
        bound_volume(
            &pv,
            claim_uid,
            source.read_only.unwrap_or(false),
            &self.node_name,
            &labels,
        )
        .map_err(fail)
    }
}
