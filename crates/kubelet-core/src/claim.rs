//! A pod's PersistentVolumeClaim resolved to the PersistentVolume bound to
//! it, checked as upstream's desired state of world populator checks it
//! (getPVCExtractPV, getPVSpec), in its words; and the PV's source as far as
//! rkubelet has a plugin for it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::admission::node_selector_matches;

/// The plugin directory of a `local` PV's bind mount under the pod's
/// `volumes/` (upstream's `kubernetes.io/local-volume`, escaped).
pub const LOCAL_VOLUME: &str = "kubernetes.io~local-volume";
/// The annotation of a PV whose group the pod's containers are given
/// (upstream's VolumeGidAnnotationKey).
pub const VOLUME_GID_ANNOTATION: &str = "pv.beta.kubernetes.io/gid";
/// The finalizer that keeps a claim in use from going.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";

/// How a claim's volume is measured for the pod's volume stats (upstream's
/// volume plugins' metrics): a local PV by statfs of its mount, a local raw
/// block volume by its device's size (MetricsBlock: capacity only), a CSI
/// volume by its driver's NodeGetVolumeStats; a hostPath PV is not (as
/// upstream's MetricsNil).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Measure {
    Statfs(PathBuf),
    Device(PathBuf),
    Csi {
        driver: String,
        handle: String,
        target: PathBuf,
    },
}

/// A pod's claim volume, for stats: the pod's volume name, its claim, how
/// it is measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimVolume {
    pub name: String,
    pub namespace: String,
    pub claim: String,
    pub measure: Measure,
}

/// The resize statuses of a claim's `allocatedResourceStatuses.storage`
/// that ask the node to expand the file system.
pub const NODE_RESIZE_PENDING: &str = "NodeResizePending";
pub const NODE_RESIZE_IN_PROGRESS: &str = "NodeResizeInProgress";
pub const NODE_RESIZE_INFEASIBLE: &str = "NodeResizeInfeasible";
/// The condition a failed node expansion leaves on the claim.
pub const NODE_RESIZE_ERROR: &str = "NodeResizeError";
/// The resize conditions (upstream's knownResizeConditions): the node clears
/// them all once it has expanded the volume.
pub const RESIZE_CONDITIONS: &[&str] = &[
    "Resizing",
    "FileSystemResizePending",
    "ControllerResizeError",
    NODE_RESIZE_ERROR,
];

/// What a failed NodeExpandVolume does to the claim (upstream's
/// NodeExpander with its csi expander), by the driver's gRPC code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpansionFailure {
    /// FailedPrecondition: the driver cannot expand the volume as it is
    /// used now; the claim is left alone and the expansion tried again.
    InUse,
    /// InvalidArgument, OutOfRange or NotFound, or any failure of a size
    /// other than the claim asks after an earlier final failure (a user
    /// recovering): the claim's resize status becomes NodeResizeInfeasible
    /// with a NodeResizeError condition, and the node waits for the resize
    /// to change.
    Infeasible,
    /// Anything else: a NodeResizeError condition; tried again.
    Failed,
}

impl ExpansionFailure {
    /// The failure for gRPC `code` (tonic's numbering: 9 FailedPrecondition,
    /// 3 InvalidArgument, 11 OutOfRange, 5 NotFound); `recovering` when the
    /// volume failed finally before and the claim now asks another size.
    pub fn of(code: i32, recovering: bool) -> ExpansionFailure {
        match code {
            9 => ExpansionFailure::InUse,
            3 | 5 | 11 => ExpansionFailure::Infeasible,
            _ if recovering => ExpansionFailure::Infeasible,
            _ => ExpansionFailure::Failed,
        }
    }

    /// The text of the error, as upstream's expander wraps the driver's.
    pub fn error(self, rpc_error: &str) -> String {
        match self {
            ExpansionFailure::Infeasible => {
                format!("Expander.NodeExpand failed to expand the volume {rpc_error}")
            }
            _ => format!("Expander.NodeExpand failed to expand the volume : {rpc_error}"),
        }
    }

    /// The claim's status patch, given its conditions now (upstream's
    /// MarkNodeExpansionInfeasible and MarkNodeExpansionFailedCondition:
    /// the NodeResizeError condition merged in, an unchanged one kept as it
    /// was); None for InUse.
    pub fn claim_status(
        self,
        conditions: &[PersistentVolumeClaimCondition],
        error: &str,
        now: Time,
    ) -> Option<serde_json::Value> {
        if self == ExpansionFailure::InUse {
            return None;
        }
        let mut merged = conditions.to_vec();
        match merged.iter_mut().find(|c| c.type_ == NODE_RESIZE_ERROR) {
            Some(c) if c.status == "True" => {}
            Some(c) => {
                *c = node_resize_error(error, now);
            }
            None => merged.push(node_resize_error(error, now)),
        }
        let mut patch = serde_json::json!({ "conditions": merged });
        if self == ExpansionFailure::Infeasible {
            patch["allocatedResourceStatuses"] =
                serde_json::json!({ "storage": NODE_RESIZE_INFEASIBLE });
        }
        Some(patch)
    }
}

fn node_resize_error(error: &str, now: Time) -> PersistentVolumeClaimCondition {
    PersistentVolumeClaimCondition {
        type_: NODE_RESIZE_ERROR.into(),
        status: "True".into(),
        last_transition_time: Some(now),
        message: Some(format!("failed to expand pvc with {error}")),
        ..Default::default()
    }
}

/// A volume the node must expand: its PV grew past the claim's reported
/// capacity and the resizer handed the claim to the node (upstream's
/// NodeExpander pre-check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeExpansion {
    /// The PV's capacity, as written (the claim's new `status.capacity`).
    pub new_size: String,
    pub new_bytes: i64,
    /// The claim asks another size than the PV's (a user lowering a failed
    /// resize to recover).
    pub request_differs: bool,
}

/// Whether `pvc`, bound to `pv`, waits for the node to expand its file
/// system: the PV's capacity above the claim's status capacity, and the
/// claim's storage resize status NodeResizePending or NodeResizeInProgress.
pub fn node_expansion(pvc: &PersistentVolumeClaim, pv: &PersistentVolume) -> Option<NodeExpansion> {
    use crate::quantity::parse_bytes;
    let pv_size = pv.spec.as_ref()?.capacity.as_ref()?.get("storage")?;
    let status = pvc.status.as_ref()?;
    let claim_size = status.capacity.as_ref()?.get("storage")?;
    let new_bytes = parse_bytes(pv_size).ok()?;
    if new_bytes <= parse_bytes(claim_size).ok()? {
        return None;
    }
    let resize = status
        .allocated_resource_statuses
        .as_ref()
        .and_then(|s| s.get("storage"))?;
    let requested = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| parse_bytes(q).ok());
    [NODE_RESIZE_PENDING, NODE_RESIZE_IN_PROGRESS]
        .contains(&resize.as_str())
        .then(|| NodeExpansion {
            new_size: pv_size.0.clone(),
            new_bytes,
            request_differs: requested != Some(new_bytes),
        })
}

/// The name of the PV bound to `pvc`, or why the pod must wait.
pub fn bound_volume_name(pvc: &PersistentVolumeClaim) -> Result<&str, String> {
    let finalizers = pvc.metadata.finalizers.as_deref().unwrap_or(&[]);
    if pvc.metadata.deletion_timestamp.is_some()
        && !finalizers.iter().any(|f| f == PVC_PROTECTION_FINALIZER)
    {
        return Err("PVC is being deleted".into());
    }
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Bound") {
        return Err("PVC is not bound".into());
    }
    match pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
        Some(name) if !name.is_empty() => Ok(name),
        _ => Err("PVC has empty pvc.Spec.VolumeName".into()),
    }
}

/// The claim of a generic ephemeral volume: `<pod>-<volume>`, made by the
/// ephemeral volume controller (upstream's VolumeClaimName).
pub fn ephemeral_claim_name(pod: &Pod, volume: &str) -> String {
    format!("{}-{volume}", pod.metadata.name.as_deref().unwrap_or(""))
}

/// An ephemeral volume's claim must be the pod's own: in its namespace and
/// controlled by it (upstream's VolumeIsForPod, its message).
pub fn volume_is_for_pod(pod: &Pod, pvc: &PersistentVolumeClaim) -> Result<(), String> {
    let (pod_ns, pvc_ns) = (
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pvc.metadata.namespace.as_deref().unwrap_or(""),
    );
    if pod_ns == pvc_ns && is_controlled_by(&pvc.metadata, pod) {
        return Ok(());
    }
    Err(format!(
        "PVC {pvc_ns}/{} was not created for pod {pod_ns}/{} (pod is not owner)",
        pvc.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    ))
}

/// Whether `pod` is the controller among `object`'s owners (upstream's
/// metav1.IsControlledBy): what makes a claim generated for it its own.
pub fn is_controlled_by(object: &ObjectMeta, pod: &Pod) -> bool {
    object
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == pod.metadata.uid.as_deref())
}

/// Where a PV's data is, as far as rkubelet has a plugin for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PvSource {
    /// The host's path, used as it is (with the hostPath type check).
    HostPath { path: String, type_: String },
    /// The host's path, bind-mounted under the pod (`LOCAL_VOLUME`).
    Local { path: String },
    /// A CSI driver's volume.
    Csi(Box<crate::csi::CsiVolume>),
    /// A source without a plugin here: the API field's name.
    Unsupported(&'static str),
}

/// A PV checked for this claim and node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundVolume {
    pub pv_name: String,
    pub source: PvSource,
    /// The claim's volume source asks for it read-only.
    pub read_only: bool,
    /// `volumeMode: Block`.
    pub block: bool,
    /// The group of its [`VOLUME_GID_ANNOTATION`] (one that is not a
    /// number is ignored, as upstream's).
    pub gid: Option<i64>,
}

/// `pv` as the volume of the claim `claim_uid` on the node `node` (with
/// `labels`): bound to that claim (upstream's checks), and, for rkubelet,
/// on this node when it says where it is (its node affinity).
pub fn bound_volume(
    pv: &PersistentVolume,
    claim_uid: &str,
    claim_read_only: bool,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> Result<BoundVolume, String> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(claim_ref) = &spec.claim_ref else {
        return Err(format!(
            "found PV object {name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    let bound_uid = claim_ref.uid.as_deref().unwrap_or("");
    if bound_uid != claim_uid {
        return Err(format!(
            "found PV object {name} but its pv.Spec.ClaimRef.UID {bound_uid} does not point to claim.UID {claim_uid}"
        ));
    }
    if let Some(required) = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        && !node_selector_matches(required, node, labels)
    {
        return Err(format!(
            "PV {name}'s node affinity does not select node {node}: its data is on another node"
        ));
    }
    let source = if let Some(h) = &spec.host_path {
        PvSource::HostPath {
            path: h.path.clone(),
            type_: h.type_.clone().unwrap_or_default(),
        }
    } else if let Some(l) = &spec.local {
        PvSource::Local {
            path: l.path.clone(),
        }
    } else if let Some(csi) = crate::csi::CsiVolume::persistent(pv, claim_read_only) {
        PvSource::Csi(Box::new(csi))
    } else {
        PvSource::Unsupported(unsupported_source(&spec))
    };
    let gid = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(VOLUME_GID_ANNOTATION))
        .and_then(|g| g.parse().ok());
    Ok(BoundVolume {
        pv_name: name,
        source,
        read_only: claim_read_only,
        block: spec.volume_mode.as_deref() == Some("Block"),
        gid,
    })
}

/// The API field of a PV source rkubelet has no plugin for.
fn unsupported_source(spec: &k8s_openapi::api::core::v1::PersistentVolumeSpec) -> &'static str {
    [
        (spec.nfs.is_some(), "nfs"),
        (spec.iscsi.is_some(), "iscsi"),
        (spec.fc.is_some(), "fc"),
        (spec.rbd.is_some(), "rbd"),
        (spec.cephfs.is_some(), "cephfs"),
        (spec.glusterfs.is_some(), "glusterfs"),
        (spec.flex_volume.is_some(), "flexVolume"),
        (
            spec.aws_elastic_block_store.is_some(),
            "awsElasticBlockStore",
        ),
        (spec.gce_persistent_disk.is_some(), "gcePersistentDisk"),
        (spec.azure_disk.is_some(), "azureDisk"),
        (spec.azure_file.is_some(), "azureFile"),
        (spec.cinder.is_some(), "cinder"),
        (spec.vsphere_volume.is_some(), "vsphereVolume"),
        (spec.portworx_volume.is_some(), "portworxVolume"),
        (
            spec.photon_persistent_disk.is_some(),
            "photonPersistentDisk",
        ),
        (spec.quobyte.is_some(), "quobyte"),
        (spec.scale_io.is_some(), "scaleIO"),
        (spec.storageos.is_some(), "storageos"),
        (spec.flocker.is_some(), "flocker"),
    ]
    .into_iter()
    .find_map(|(set, name)| set.then_some(name))
    .unwrap_or("unknown")
}

/// A local PV's path must be absolute and without `..` (upstream's
/// ValidatePathNoBacksteps), in upstream's words.
pub fn check_local_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("LocalVolume path is empty".into());
    }
    if !path.starts_with('/') {
        return Err(format!("invalid path: {path} must be an absolute path"));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(format!("invalid path: {path} must not contain '..'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
