//! CSI volumes as upstream's csi plugin lays them out and decides about
//! them (pkg/volume/csi), without I/O: the on-disk layout either kubelet
//! can clean up after the other, the VolumeAttachment's name, the
//! attributes a driver is given, and what a CSIDriver object asks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, Pod, Volume};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINodeDriver, VolumeNodeResources};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The plugin's name (CSIPluginName), and its directory under `volumes/`.
pub const CSI_PLUGIN: &str = "kubernetes.io/csi";
pub const CSI_VOLUME_DIR: &str = "kubernetes.io~csi";
/// The file beside a publish target or staging path that says what it is.
pub const VOL_DATA_FILE: &str = "vol_data.json";
/// A pod volume's publish target, under its directory.
pub const PUBLISH_TARGET: &str = "mount";
/// The Node annotation of each driver's node ID (nodeinfomanager's
/// annotationKeyNodeID).
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
/// The CSINode annotation of the in-tree plugins migrated to CSI, and
/// upstream's list (all of them, sorted).
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";
pub const MIGRATED_PLUGINS: &str = "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume";
/// The volume lifecycle modes.
pub const PERSISTENT: &str = "Persistent";
pub const EPHEMERAL: &str = "Ephemeral";
/// The CSI versions this kubelet speaks (csi's supportedVersions).
pub const SUPPORTED_MAJOR: u64 = 1;
/// The volume context key of the service account tokens.
pub const TOKENS_ATTRIBUTE: &str = "csi.storage.k8s.io/serviceAccount.tokens";

/// A pod's CSI volume: a PV's `csi` source or an inline `csi` volume
/// (upstream's volume.Spec, as far as the csi plugin reads it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsiVolume {
    /// The PV's name, or the pod volume's (specVolID).
    pub spec_name: String,
    pub driver: String,
    pub handle: String,
    pub fs_type: String,
    pub attributes: BTreeMap<String, String>,
    pub read_only: bool,
    /// The PV's access modes; None for an inline (Ephemeral) volume.
    pub access_modes: Option<Vec<String>>,
    pub mount_options: Vec<String>,
    /// (namespace, name) of nodeStageSecretRef, nodePublishSecretRef and
    /// nodeExpandSecretRef.
    pub stage_secret: Option<(String, String)>,
    pub publish_secret: Option<(String, String)>,
    pub expand_secret: Option<(String, String)>,
    /// A PV of `volumeMode: Block`: staged and published as a raw device.
    pub block: bool,
}

impl CsiVolume {
    /// An inline `csi` volume of `pod` (its handle is upstream's
    /// makeVolumeHandle of the pod's UID and the volume's name).
    pub fn inline(pod: &Pod, v: &Volume) -> Option<CsiVolume> {
        let c = v.csi.as_ref()?;
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        Some(CsiVolume {
            spec_name: v.name.clone(),
            driver: c.driver.clone(),
            handle: format!(
                "csi-{}",
                hex::encode(Sha256::digest(format!("{uid}{}", v.name)))
            ),
            fs_type: c.fs_type.clone().unwrap_or_default(),
            attributes: c.volume_attributes.clone().unwrap_or_default(),
            read_only: c.read_only.unwrap_or(false),
            access_modes: None,
            mount_options: Vec::new(),
            stage_secret: None,
            publish_secret: c
                .node_publish_secret_ref
                .as_ref()
                .map(|r| (namespace, r.name.clone())),
            expand_secret: None,
            block: false,
        })
    }

    /// A PV's `csi` source, read-only when the claim's volume or the source
    /// says so.
    pub fn persistent(pv: &PersistentVolume, claim_read_only: bool) -> Option<CsiVolume> {
        let spec = pv.spec.as_ref()?;
        let c = spec.csi.as_ref()?;
        let secret = |r: Option<&k8s_openapi::api::core::v1::SecretReference>| {
            r.and_then(|r| Some((r.namespace.clone().unwrap_or_default(), r.name.clone()?)))
        };
        Some(CsiVolume {
            spec_name: pv.metadata.name.clone().unwrap_or_default(),
            driver: c.driver.clone(),
            handle: c.volume_handle.clone(),
            fs_type: c.fs_type.clone().unwrap_or_default(),
            attributes: c.volume_attributes.clone().unwrap_or_default(),
            read_only: claim_read_only || c.read_only.unwrap_or(false),
            access_modes: Some(spec.access_modes.clone().unwrap_or_default()),
            mount_options: spec.mount_options.clone().unwrap_or_default(),
            stage_secret: secret(c.node_stage_secret_ref.as_ref()),
            publish_secret: secret(c.node_publish_secret_ref.as_ref()),
            expand_secret: secret(c.node_expand_secret_ref.as_ref()),
            block: spec.volume_mode.as_deref() == Some("Block"),
        })
    }

    /// Persistent or Ephemeral.
    pub fn lifecycle_mode(&self) -> &'static str {
        if self.access_modes.is_some() {
            PERSISTENT
        } else {
            EPHEMERAL
        }
    }
}

/// `vol_data.json`, upstream's keys (volDataKey): a publish target's has
/// them all, a staging path's the handle and driver only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolData {
    #[serde(
        rename = "specVolID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub spec_vol_id: String,
    #[serde(rename = "volumeHandle")]
    pub volume_handle: String,
    #[serde(rename = "driverName")]
    pub driver_name: String,
    #[serde(rename = "nodeName", default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    #[serde(
        rename = "attachmentID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub attachment_id: String,
    #[serde(
        rename = "volumeLifecycleMode",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub volume_lifecycle_mode: String,
}

/// The VolumeAttachment of `handle` of `driver` on `node`
/// (getAttachmentName): `csi-` and the sha256 of the three.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!(
        "csi-{}",
        hex::encode(Sha256::digest(format!("{handle}{driver}{node}")))
    )
}

/// The unique volume name the node reports in `volumesInUse` and the
/// attach/detach controller in `volumesAttached`.
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("{CSI_PLUGIN}/{driver}^{handle}")
}

/// A driver's directory under `<root>/plugins/kubernetes.io/csi`.
pub fn driver_dir(root: &Path, driver: &str) -> PathBuf {
    root.join("plugins").join(CSI_PLUGIN).join(driver)
}

/// The global mount a volume is staged at (makeDeviceMountPath):
/// `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`;
/// its `vol_data.json` is in the parent.
pub fn staging_path(root: &Path, driver: &str, handle: &str) -> PathBuf {
    driver_dir(root, driver)
        .join(hex::encode(Sha256::digest(handle)))
        .join("globalmount")
}

/// Where the csi plugin keeps raw block volumes (upstream's csiBlockMapper):
/// `<root>/plugins/kubernetes.io/csi/volumeDevices`.
pub fn block_dir(root: &Path) -> PathBuf {
    root.join("plugins").join(CSI_PLUGIN).join("volumeDevices")
}

/// A block volume's staging path: `<block dir>/staging/<spec name>`.
pub fn block_staging_path(root: &Path, spec_name: &str) -> PathBuf {
    block_dir(root).join("staging").join(spec_name)
}

/// Where a block volume is published for the pod `uid`:
/// `<block dir>/publish/<spec name>/<uid>`.
pub fn block_publish_path(root: &Path, spec_name: &str, uid: &str) -> PathBuf {
    block_dir(root).join("publish").join(spec_name).join(uid)
}

/// A block volume's own directory, `<block dir>/<escaped spec name>`: its
/// global map path `dev` (each pod's bind of the device, by UID) and
/// `data/vol_data.json`.
pub fn block_volume_dir(root: &Path, spec_name: &str) -> PathBuf {
    block_dir(root).join(spec_name.replace('/', "~"))
}

/// The attributes `podInfoOnMount` adds (getPodInfoAttrs).
pub fn pod_info_attributes(pod: &Pod, ephemeral: bool) -> BTreeMap<String, String> {
    let spec = pod.spec.as_ref();
    BTreeMap::from([
        (
            "csi.storage.k8s.io/pod.name".into(),
            pod.metadata.name.clone().unwrap_or_default(),
        ),
        (
            "csi.storage.k8s.io/pod.namespace".into(),
            pod.metadata.namespace.clone().unwrap_or_default(),
        ),
        (
            "csi.storage.k8s.io/pod.uid".into(),
            pod.metadata.uid.clone().unwrap_or_default(),
        ),
        (
            "csi.storage.k8s.io/serviceAccount.name".into(),
            spec.and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
        ),
        ("csi.storage.k8s.io/ephemeral".into(), ephemeral.to_string()),
    ])
}

/// A CSI access mode (the csi.v1 enum's numbers), from the PV's first
/// access mode as upstream maps it (asCSIAccessModeV1), given whether the
/// driver has SINGLE_NODE_MULTI_WRITER.
pub fn access_mode(pv_modes: &[String], single_node_multi_writer: bool) -> i32 {
    const SINGLE_NODE_WRITER: i32 = 1;
    const MULTI_NODE_READER_ONLY: i32 = 3;
    const MULTI_NODE_MULTI_WRITER: i32 = 5;
    const SINGLE_NODE_SINGLE_WRITER: i32 = 6;
    const SINGLE_NODE_MULTI_WRITER: i32 = 7;
    match pv_modes.first().map_or("ReadWriteOnce", String::as_str) {
        "ReadOnlyMany" => MULTI_NODE_READER_ONLY,
        "ReadWriteMany" => MULTI_NODE_MULTI_WRITER,
        "ReadWriteOncePod" if single_node_multi_writer => SINGLE_NODE_SINGLE_WRITER,
        "ReadWriteOnce" if single_node_multi_writer => SINGLE_NODE_MULTI_WRITER,
        _ => SINGLE_NODE_WRITER,
    }
}

/// What a driver's CSIDriver object asks of the kubelet; its defaults
/// when there is none (as upstream reads a missing object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverPolicy {
    pub attach_required: bool,
    pub pod_info_on_mount: bool,
    /// ReadWriteOnceWithFSType, File or None.
    pub fs_group_policy: String,
    /// None: no CSIDriver object (Persistent only).
    pub lifecycle_modes: Option<Vec<String>>,
    pub requires_republish: bool,
    /// (audience, expirationSeconds) of each token request.
    pub token_requests: Vec<(String, Option<i64>)>,
    pub token_in_secrets: bool,
}

impl DriverPolicy {
    pub fn of(driver: Option<&CSIDriver>) -> DriverPolicy {
        let spec = driver.map(|d| &d.spec);
        DriverPolicy {
            attach_required: spec.and_then(|s| s.attach_required).unwrap_or(true),
            pod_info_on_mount: spec.and_then(|s| s.pod_info_on_mount).unwrap_or(false),
            fs_group_policy: spec
                .and_then(|s| s.fs_group_policy.clone())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "ReadWriteOnceWithFSType".into()),
            lifecycle_modes: driver.map(|d| {
                d.spec
                    .volume_lifecycle_modes
                    .clone()
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| vec![PERSISTENT.into()])
            }),
            requires_republish: spec.and_then(|s| s.requires_republish).unwrap_or(false),
            token_requests: spec
                .and_then(|s| s.token_requests.as_ref())
                .into_iter()
                .flatten()
                .map(|t| (t.audience.clone(), t.expiration_seconds))
                .collect(),
            token_in_secrets: spec
                .and_then(|s| s.service_account_token_in_secrets)
                .unwrap_or(false),
        }
    }

    /// Whether the driver serves volumes of `mode` (supportsVolumeLifecycleMode),
    /// in upstream's words when not.
    pub fn supports(&self, mode: &str, driver: &str) -> Result<(), String> {
        match &self.lifecycle_modes {
            None if mode == PERSISTENT => Ok(()),
            None => Err(format!(
                "volume mode {mode:?} not supported by driver {driver} (no CSIDriver object)"
            )),
            Some(modes) if modes.iter().any(|m| m == mode) => Ok(()),
            Some(modes) => Err(format!(
                "volume mode {mode:?} not supported by driver {driver} (only supports {modes:?})"
            )),
        }
    }

    /// Whether the kubelet applies the pod's fsGroup to the published
    /// volume (supportsFSGroup): `pv_modes` None for an inline volume.
    pub fn kubelet_applies_fs_group(
        &self,
        fs_type: &str,
        read_only: bool,
        pv_modes: Option<&[String]>,
    ) -> bool {
        match self.fs_group_policy.as_str() {
            "None" => false,
            _ if read_only => false,
            "File" => true,
            _ if fs_type.is_empty() => false,
            _ => pv_modes.is_none_or(|m| m.iter().any(|m| m == "ReadWriteOnce")),
        }
    }
}

/// The highest CSI version of `versions` this kubelet speaks (major 1),
/// or upstream's error (validateVersions).
pub fn highest_supported_version(
    caller: &str,
    driver: &str,
    versions: &[String],
) -> Result<(u64, u64, u64), String> {
    if versions.is_empty() {
        return Err(format!(
            "kubernetes.io/csi: {caller} for CSI driver {driver:?} failed. Plugin returned an empty list for supported versions"
        ));
    }
    let parse = |v: &str| -> Option<(u64, u64, u64)> {
        let v = v.strip_prefix('v').unwrap_or(v);
        let v = v.split(['-', '+']).next()?;
        let mut parts = v.split('.').map(str::parse::<u64>);
        let major = parts.next()?.ok()?;
        let minor = parts.next().transpose().ok()?.unwrap_or(0);
        let patch = parts.next().transpose().ok()?.unwrap_or(0);
        Some((major, minor, patch))
    };
    versions
        .iter()
        .filter_map(|v| parse(v))
        .filter(|v| v.0 == SUPPORTED_MAJOR)
        .max()
        .ok_or_else(|| {
            format!(
                "kubernetes.io/csi: {caller} for CSI driver {driver:?} failed. None of the versions specified {versions:?} are supported. err=none of the versions are supported"
            )
        })
}

/// The CSINode's drivers with `driver` installed (installDriverToCSINode):
/// its node ID, topology keys (sorted) and volume limit; None when they
/// say so already.
pub fn install_driver(
    drivers: &[CSINodeDriver],
    driver: &str,
    node_id: &str,
    max_volumes: i64,
    topology: &BTreeMap<String, String>,
) -> Option<Vec<CSINodeDriver>> {
    let entry = CSINodeDriver {
        name: driver.to_owned(),
        node_id: node_id.to_owned(),
        topology_keys: Some(topology.keys().cloned().collect()),
        allocatable: (max_volumes > 0).then(|| VolumeNodeResources {
            count: Some(i32::try_from(max_volumes).unwrap_or(i32::MAX)),
        }),
    };
    let same = |d: &CSINodeDriver| {
        d.node_id == entry.node_id
            && d.topology_keys.clone().unwrap_or_default()
                == entry.topology_keys.clone().unwrap_or_default()
            && d.allocatable.as_ref().and_then(|a| a.count)
                == entry.allocatable.as_ref().and_then(|a| a.count)
    };
    if drivers.iter().any(|d| d.name == driver && same(d)) {
        return None;
    }
    let mut out: Vec<CSINodeDriver> = drivers
        .iter()
        .filter(|d| d.name != driver)
        .cloned()
        .collect();
    out.push(entry);
    Some(out)
}

/// The Node's node ID annotation with `driver`'s ID set (or removed: None),
/// upstream's JSON object; None when unchanged. `Some("")` removes the
/// annotation (no driver left).
pub fn node_id_annotation(
    current: Option<&str>,
    driver: &str,
    node_id: Option<&str>,
) -> Option<String> {
    let mut ids: BTreeMap<String, String> = current
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    let changed = match node_id {
        Some(id) => ids.insert(driver.to_owned(), id.to_owned()).as_deref() != Some(id),
        None => ids.remove(driver).is_some(),
    };
    if !changed {
        return None;
    }
    if ids.is_empty() {
        return Some(String::new());
    }
    serde_json::to_string(&ids).ok()
}

#[cfg(test)]
mod tests;
