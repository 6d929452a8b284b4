//! The device manager's checkpoint, `<root-dir>/device-plugins/
//! kubelet_internal_checkpoint`, as upstream writes it, so that either
//! kubelet reads the other's: the JSON of
//! `{"Data":{"PodDeviceEntries":[..],"RegisteredDevices":{..}},"Checksum":N}`
//! where N is the FNV-1a 32-bit hash of go-spew's `%#v` dump of Data (the
//! checkpoint manager's checksum of a Go struct). Go's nil and empty print
//! differently there, so every list and map that JSON can give as `null`
//! is an Option here.

use std::collections::BTreeMap;
use std::fmt::Write;

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::checkpoint::{CheckpointError, fnv1a32};

/// The checkpoint's file name under the device plugin directory.
pub const FILE: &str = "kubelet_internal_checkpoint";
/// The NUMA node of a device without topology (upstream's
/// nodeWithoutTopology).
pub const NO_TOPOLOGY: i64 = -1;

/// One container's devices of one resource (upstream's PodDevicesEntry):
/// the device IDs by NUMA node and the plugin's Allocate response for the
/// container, protobuf-encoded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodDevicesEntry {
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    #[serde(rename = "ContainerName")]
    pub container_name: String,
    #[serde(rename = "ResourceName")]
    pub resource_name: String,
    #[serde(rename = "DeviceIDs")]
    pub device_ids: Option<BTreeMap<i64, Option<Vec<String>>>>,
    #[serde(rename = "AllocResp", with = "go_bytes")]
    pub alloc_resp: Option<Vec<u8>>,
}

/// The checkpointed state: every container's devices, and the healthy
/// devices of each registered resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Data {
    #[serde(rename = "PodDeviceEntries")]
    pub pod_device_entries: Option<Vec<PodDevicesEntry>>,
    #[serde(rename = "RegisteredDevices")]
    pub registered_devices: Option<BTreeMap<String, Option<Vec<String>>>>,
}

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: Data,
    #[serde(rename = "Checksum")]
    checksum: u64,
}

/// Go's encoding of a `[]byte`: base64, nil as null.
mod go_bytes {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref()
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| {
                base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(serde::de::Error::custom)
            })
            .transpose()
    }
}

/// go-spew's `%#v` of a list at depth (the outer value carries its type;
/// elements and map values do not).
fn spew_list<T>(out: &mut String, list: Option<&[T]>, each: impl Fn(&mut String, &T)) {
    match list {
        None => out.push_str("<nil>"),
        Some(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                each(out, item);
            }
            out.push(']');
        }
    }
}

fn spew_strings(out: &mut String, list: &Option<Vec<String>>) {
    spew_list(out, list.as_deref(), |o, s| o.push_str(s));
}

/// go-spew's `%#v` of a map whose keys are already in its sorted order.
fn spew_map<K: std::fmt::Display, V>(
    out: &mut String,
    map: Option<&BTreeMap<K, V>>,
    each: impl Fn(&mut String, &V),
) {
    match map {
        None => out.push_str("<nil>"),
        Some(m) => {
            out.push_str("map[");
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{k}:");
                each(out, v);
            }
            out.push(']');
        }
    }
}

impl Data {
    /// What upstream's checksum hashes: go-spew's dump of its
    /// `checkpoint.checkpointData`.
    fn spew(&self) -> String {
        let mut out = String::from(
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)",
        );
        spew_list(&mut out, self.pod_device_entries.as_deref(), |o, e| {
            let _ = write!(
                o,
                "{{PodUID:(string){} ContainerName:(string){} ResourceName:(string){} DeviceIDs:(checkpoint.DevicesPerNUMA)",
                e.pod_uid, e.container_name, e.resource_name
            );
            spew_map(o, e.device_ids.as_ref(), spew_strings);
            o.push_str(" AllocResp:([]uint8)");
            spew_list(o, e.alloc_resp.as_deref(), |o, b| {
                let _ = write!(o, "{b}");
            });
            o.push('}');
        });
        out.push_str(" RegisteredDevices:(map[string][]string)");
        spew_map(&mut out, self.registered_devices.as_ref(), spew_strings);
        out.push('}');
        out
    }

    /// Upstream's checksum of this data.
    pub fn checksum(&self) -> u64 {
        u64::from(fnv1a32(self.spew().as_bytes()))
    }

    /// The checkpoint file's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&File {
            data: self.clone(),
            checksum: self.checksum(),
        })
    }

    /// A checkpoint file's data, its checksum verified.
    pub fn decode(bytes: &[u8]) -> Result<Data, CheckpointError> {
        let file: File = serde_json::from_slice(bytes)?;
        let computed = file.data.checksum();
        if computed != file.checksum {
            return Err(CheckpointError::Corrupt {
                found: file.checksum,
                computed,
            });
        }
        Ok(file.data)
    }
}
