//! The DRA manager's checkpoint, `<root-dir>/dra_manager_state`, in
//! upstream's format (pkg/kubelet/cm/dra/state): `{"Data": "<JSON>",
//! "Checksum": N}` where N is the CRC-32 (IEEE) of the data, and the data a
//! `DRACheckpoint` of `checkpoint.dra.kubelet.k8s.io/v1` listing each
//! claim's state with Go's field names. Go writes a nil list or set as
//! `null`; so does this, so that the upstream kubelet and rkubelet read each
//! other's files.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const FILE: &str = "dra_manager_state";
const KIND: &str = "DRACheckpoint";
const API_VERSION: &str = "checkpoint.dra.kubelet.k8s.io/v1";

/// Why the checkpoint cannot be used (the upstream kubelet, and rkubelet,
/// then refuse to start: the claims prepared before are unknown).
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{0}")]
    Format(#[from] serde_json::Error),
    /// checkpointmanager's CorruptCheckpointError.
    #[error("checkpoint is corrupted")]
    Corrupt,
}

/// A device a driver prepared for a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    #[serde(rename = "PoolName")]
    pub pool_name: String,
    #[serde(rename = "DeviceName")]
    pub device_name: String,
    #[serde(rename = "ShareID")]
    pub share_id: Option<String>,
    #[serde(rename = "RequestNames", with = "nil_vec")]
    pub request_names: Vec<String>,
    #[serde(rename = "CDIDeviceIDs", with = "nil_vec")]
    pub cdi_device_ids: Vec<String>,
}

/// What one driver prepared of a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverState {
    #[serde(rename = "Devices", with = "nil_vec")]
    pub devices: Vec<Device>,
    #[serde(
        rename = "skipNodeOperations",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub skip_node_operations: Vec<String>,
}

/// A claim the kubelet prepared (upstream's ClaimInfoState).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimInfoState {
    #[serde(rename = "ClaimUID")]
    pub claim_uid: String,
    #[serde(rename = "ClaimName")]
    pub claim_name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    /// The pods using it (a Go set: `{"<uid>": {}}`).
    #[serde(rename = "PodUIDs", with = "uid_set")]
    pub pod_uids: BTreeSet<String>,
    #[serde(rename = "DriverState", deserialize_with = "nil_default")]
    pub driver_state: BTreeMap<String, DriverState>,
}

#[derive(Serialize, Deserialize)]
struct Data {
    #[serde(default)]
    kind: String,
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(rename = "ClaimInfoStateList")]
    list: Option<Vec<ClaimInfoState>>,
}

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: String,
    #[serde(rename = "Checksum")]
    checksum: u32,
}

/// The checkpoint file of `list` (None: the file upstream makes when
/// there is none, its list nil).
pub fn encode(list: Option<Vec<ClaimInfoState>>) -> Result<Vec<u8>, serde_json::Error> {
    let data = serde_json::to_string(&Data {
        kind: KIND.into(),
        api_version: API_VERSION.into(),
        list,
    })?;
    let checksum = crc32fast::hash(data.as_bytes());
    serde_json::to_vec(&File { data, checksum })
}

/// The claims a checkpoint file lists, its checksum verified.
pub fn decode(bytes: &[u8]) -> Result<Vec<ClaimInfoState>, StateError> {
    let file: File = serde_json::from_slice(bytes)?;
    if crc32fast::hash(file.data.as_bytes()) != file.checksum {
        return Err(StateError::Corrupt);
    }
    let data: Data = serde_json::from_str(&file.data)?;
    Ok(data.list.unwrap_or_default())
}

fn nil_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A Go slice: `null` when empty (nil), as Go writes the slices the
/// kubelet leaves unset.
mod nil_vec {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(v: &Vec<T>, s: S) -> Result<S::Ok, S::Error> {
        if v.is_empty() {
            s.serialize_none()
        } else {
            v.serialize(s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        super::nil_default(d)
    }
}

/// A Go `sets.Set[string]`: a map of each member to `{}`.
mod uid_set {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Empty {}

    pub fn serialize<S: Serializer>(set: &BTreeSet<String>, s: S) -> Result<S::Ok, S::Error> {
        let map: BTreeMap<&String, Empty> = set.iter().map(|u| (u, Empty {})).collect();
        map.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
        let map: Option<BTreeMap<String, Empty>> = Option::deserialize(d)?;
        Ok(map.into_iter().flatten().map(|(u, _)| u).collect())
    }
}
