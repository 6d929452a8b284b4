//! The kubelet's checkpoint files (upstream's checkpointmanager): a JSON
//! object `{"data": "<JSON text>", "checksum": N}` where N is the 32-bit
//! FNV-1a hash of the data as upstream's DeepHashObject prints a string
//! (`(string)` then the text), so that the upstream kubelet and rkubelet
//! read each other's files. A file whose checksum does not match is
//! corrupt and not used.
//!
//! FNV-1a is written here: the `fnv` crate offers only the 64-bit hash.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a checkpoint file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint is not JSON of its kind: {0}")]
    Format(#[from] serde_json::Error),
    #[error("checkpoint is corrupted: checksum {found} where its data gives {computed}")]
    Corrupt { found: u64, computed: u64 },
}

#[derive(serde::Deserialize, Serialize)]
struct File {
    data: String,
    checksum: u64,
}

/// FNV-1a, 32 bits (Go's hash/fnv New32a), over what upstream's
/// DeepHashObject prints.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h: u32, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The checksum upstream computes for `data` (checksum.New of a string).
pub fn checksum(data: &str) -> u64 {
    let printed = format!("(string){data}");
    u64::from(fnv1a32(printed.as_bytes()))
}

/// `value` as a checkpoint file's bytes.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let data = serde_json::to_string(value)?;
    let checksum = checksum(&data);
    serde_json::to_vec(&File { data, checksum })
}

/// A checkpoint file's value, its checksum verified.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CheckpointError> {
    let file: File = serde_json::from_slice(bytes)?;
    let computed = checksum(&file.data);
    if computed != file.checksum {
        return Err(CheckpointError::Corrupt {
            found: file.checksum,
            computed,
        });
    }
    Ok(serde_json::from_str(&file.data)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_as_upstream_computes_them() {
        // Printed by checksum.New of k8s.io/kubernetes v1.37.2.
        let cases = [
            ("", 441_364_273),
            ("abc", 2_241_406_447),
            (
                r#"{"entries":{"u1":{"ContainerResources":{"c":{"limits":{"cpu":"1"}}},"PodLevelResources":null,"EmptyDirVolumeLimits":null}}}"#,
                2_240_787_163,
            ),
        ];
        for (data, want) in cases {
            assert_eq!(checksum(data), want, "{data:?}");
        }
    }

    #[test]
    fn round_trip_and_corruption() {
        let value = serde_json::json!({"entries": {"u1": {"x": 1}}});
        let bytes = encode(&value).unwrap();
        let back: serde_json::Value = decode(&bytes).unwrap();
        assert_eq!(back, value);
        let tampered = String::from_utf8(bytes)
            .unwrap()
            .replace("\\\"x\\\":1", "\\\"x\\\":2");
        assert!(matches!(
            decode::<serde_json::Value>(tampered.as_bytes()),
            Err(CheckpointError::Corrupt { .. })
        ));
        assert!(matches!(
            decode::<serde_json::Value>(b"not json"),
            Err(CheckpointError::Format(_))
        ));
    }
}
