//! The CPU manager's state file, `<root-dir>/cpu_manager_state`, as upstream
//! writes it (its "v4" checkpoint), so that either kubelet reads the other's:
//!
//! ```json
//! {"policyName":"static","defaultCpuSet":"0,2-3","entries":{"<pod uid>":{"<container>":"1"}},
//!  "checksum":N,"data":"{\"policyName\":…}","dataChecksum":M}
//! ```
//!
//! `data` (with `dataChecksum`, the checkpoint manager's checksum of a string)
//! is what upstream reads; the fields before it are the older "v2" layout kept
//! for older kubelets, `checksum` being FNV-1a over go-spew's dump of that v2
//! struct under its old type name. Files of the older layouts (v2, v3) are read
//! too, as upstream reads them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{checksum, fnv1a32};
use crate::cpuset;

/// The state file's name under the root directory.
pub const FILE: &str = "cpu_manager_state";

/// Each pod's containers' exclusive CPUs, by pod UID then container name.
pub type Assignments = BTreeMap<String, BTreeMap<String, BTreeSet<u32>>>;

/// What the CPU manager keeps across restarts: the policy that wrote it, the
/// shared pool (`defaultCpuSet`) and the exclusive assignments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    pub policy: String,
    pub default: BTreeSet<u32>,
    pub entries: Assignments,
}

/// Why a state file cannot be used: upstream refuses to start then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("{0}")]
    Unreadable(String),
    #[error("configured policy {configured:?} differs from state checkpoint policy {found:?}")]
    OtherPolicy { configured: String, found: String },
}

type Entries = BTreeMap<String, BTreeMap<String, String>>;

/// The authoritative payload (`data`), and the v2 fields beside it.
#[derive(Serialize, Deserialize)]
struct Data {
    #[serde(rename = "policyName", default)]
    policy_name: String,
    #[serde(rename = "defaultCpuSet", default)]
    default_cpu_set: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: Entries,
}

/// The whole file, every layout's fields.
#[derive(Serialize, Deserialize)]
struct File {
    #[serde(flatten)]
    v2: Data,
    /// v3's pod-level entries (written only under an alpha gate): read for
    /// the checksum, never used.
    #[serde(rename = "podEntries", default, skip_serializing)]
    pod_entries: BTreeMap<String, PodEntry>,
    #[serde(default)]
    checksum: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<String>,
    #[serde(
        rename = "dataChecksum",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    data_checksum: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct PodEntry {
    #[serde(rename = "cpuSet", default)]
    cpu_set: String,
}

/// go-spew's `%#v` of a `map[string]map[string]string` value.
fn spew_entries(out: &mut String, entries: &Entries) {
    out.push_str("map[");
    for (i, (pod, containers)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{pod}:map[");
        for (j, (name, cpus)) in containers.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{name}:{cpus}");
        }
        out.push(']');
    }
    out.push(']');
}

/// Upstream's `checksum` field: over the v2 struct (v3's with its pod
/// entries) as go-spew dumps it, under the type name `type_name`.
fn layout_checksum(file: &File, type_name: &str, with_pod_entries: bool) -> u64 {
    let mut out = format!(
        "(*state.{type_name}){{PolicyName:(string){} DefaultCPUSet:(string){} Entries:(map[string]map[string]string)",
        file.v2.policy_name, file.v2.default_cpu_set
    );
    spew_entries(&mut out, &file.v2.entries);
    if with_pod_entries {
        out.push_str(" PodEntries:(state.PodCPUAssignments)map[");
        for (i, (pod, entry)) in file.pod_entries.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{pod}:{{CPUSet:(cpuset.CPUSet){}}}", entry.cpu_set);
        }
        out.push(']');
    }
    out.push_str(" Checksum:(checksum.Checksum)0}");
    u64::from(fnv1a32(out.as_bytes()))
}

fn entries_text(entries: &Assignments) -> Entries {
    entries
        .iter()
        .map(|(pod, cs)| {
            let cs = cs
                .iter()
                .map(|(c, cpus)| (c.clone(), cpuset::format(cpus)))
                .collect();
            (pod.clone(), cs)
        })
        .collect()
}

impl CpuState {
    /// A fresh state of `policy`: every CPU shared.
    pub fn new(policy: &str, default: BTreeSet<u32>) -> Self {
        CpuState {
            policy: policy.to_owned(),
            default,
            entries: Assignments::new(),
        }
    }

    /// The file's bytes, as upstream's MarshalCheckpoint writes them.
    pub fn encode(&self) -> Vec<u8> {
        let data = Data {
            policy_name: self.policy.clone(),
            default_cpu_set: cpuset::format(&self.default),
            entries: entries_text(&self.entries),
        };
        let data_text = serde_json::to_string(&data).expect("strings and maps serialize");
        let mut file = File {
            v2: data,
            pod_entries: BTreeMap::new(),
            checksum: 0,
            data_checksum: Some(checksum(&data_text)),
            data: Some(data_text),
        };
        file.checksum = layout_checksum(&file, "CPUManagerCheckpoint", false);
        serde_json::to_vec(&file).expect("strings and maps serialize")
    }

    /// A state file's contents, its checksum verified, restored for the
    /// `configured` policy: upstream's errors for a file it would refuse.
    pub fn restore(bytes: &[u8], configured: &str) -> Result<CpuState, StateError> {
        let unreadable = |m: String| StateError::Unreadable(m);
        let file: File = serde_json::from_slice(bytes).map_err(|e| {
            unreadable(format!("failed to deserialize cpu manager checkpoint: {e}"))
        })?;
        let (policy, default, entries) = match (&file.data, file.data_checksum) {
            (Some(data), sum) if !data.is_empty() || sum.is_some_and(|s| s != 0) => {
                if checksum(data) != sum.unwrap_or(0) {
                    return Err(unreadable(
                        "could not load v4 checkpoint: checkpoint is corrupted".into(),
                    ));
                }
                let d: Data = serde_json::from_str(data).map_err(|e| {
                    unreadable(format!(
                        "could not load v4 checkpoint: failed to deserialize cpu manager checkpoint data: {e}"
                    ))
                })?;
                (d.policy_name, d.default_cpu_set, d.entries)
            }
            _ => {
                // v3, or v2 (whose zero checksum is accepted, as upstream).
                let ok = file.checksum == 0
                    || [
                        ("CPUManagerCheckpoint", false),
                        ("CPUManagerCheckpointV2", false),
                        ("CPUManagerCheckpoint", true),
                        ("CPUManagerCheckpointV3", true),
                    ]
                    .into_iter()
                    .any(|(name, pods)| layout_checksum(&file, name, pods) == file.checksum);
                if !ok {
                    return Err(unreadable("checkpoint is corrupted".into()));
                }
                (
                    file.v2.policy_name,
                    file.v2.default_cpu_set,
                    file.v2.entries,
                )
            }
        };
        if policy != configured {
            return Err(StateError::OtherPolicy {
                configured: configured.to_owned(),
                found: policy,
            });
        }
        let default = cpuset::parse(&default)
            .map_err(|e| unreadable(format!("could not parse default CPU set {default:?}: {e}")))?;
        let mut assignments = Assignments::new();
        for (pod, containers) in entries {
            let mut parsed = BTreeMap::new();
            for (container, cpus) in containers {
                let set = cpuset::parse(&cpus).map_err(|e| {
                    unreadable(format!(
                        "could not parse cpuset {cpus:?} for container {container:?} in pod {pod:?}: {e}"
                    ))
                })?;
                parsed.insert(container, set);
            }
            assignments.insert(pod, parsed);
        }
        Ok(CpuState {
            policy,
            default,
            entries: assignments,
        })
    }

    /// Every CPU some container holds exclusively.
    pub fn assigned(&self) -> BTreeSet<u32> {
        self.entries
            .values()
            .flat_map(|cs| cs.values())
            .flatten()
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(list: &str) -> BTreeSet<u32> {
        cpuset::parse(list).unwrap()
    }

    /// Files printed by upstream's state package (v1.37.2's
    /// NewCheckpointState, SetDefaultCPUSet and SetCPUSet).
    const GOLDEN: [&str; 3] = [
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690,"data":"{\"policyName\":\"none\",\"defaultCpuSet\":\"\"}","dataChecksum":3028111495}"#,
        r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":1636926438,"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"0-1\"}","dataChecksum":989860433}"#,
        r#"{"policyName":"static","defaultCpuSet":"0,5-7","entries":{"pod-a":{"c1":"1"},"pod-b":{"c1":"2-3","c2":"4"}},"checksum":38572848,"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"0,5-7\",\"entries\":{\"pod-a\":{\"c1\":\"1\"},\"pod-b\":{\"c1\":\"2-3\",\"c2\":\"4\"}}}","dataChecksum":32927217}"#,
    ];

    fn golden_states() -> [CpuState; 3] {
        let mut third = CpuState::new("static", set("0,5-7"));
        third
            .entries
            .entry("pod-a".into())
            .or_default()
            .insert("c1".into(), set("1"));
        let b = third.entries.entry("pod-b".into()).or_default();
        b.insert("c1".into(), set("2-3"));
        b.insert("c2".into(), set("4"));
        [
            CpuState::new("none", BTreeSet::new()),
            CpuState::new("static", set("0-1")),
            third,
        ]
    }

    #[test]
    fn files_are_upstreams_byte_for_byte_and_read_back() {
        for (state, golden) in golden_states().into_iter().zip(GOLDEN) {
            assert_eq!(String::from_utf8(state.encode()).unwrap(), golden);
            assert_eq!(
                CpuState::restore(golden.as_bytes(), &state.policy),
                Ok(state)
            );
        }
    }

    #[test]
    fn older_layouts_are_read_and_bad_files_refused_in_upstreams_words() {
        let v2 = |sum: u64| {
            format!(
                r#"{{"policyName":"static","defaultCpuSet":"0-1","entries":{{"p":{{"c":"2"}}}},"checksum":{sum}}}"#
            )
        };
        // A v2 file's checksum (the v4 writer's over the same fields).
        let file: File = serde_json::from_str(&v2(0)).unwrap();
        let sum = layout_checksum(&file, "CPUManagerCheckpoint", false);
        let restored = CpuState::restore(v2(sum).as_bytes(), "static").unwrap();
        assert_eq!(restored.assigned(), set("2"));
        assert!(CpuState::restore(v2(0).as_bytes(), "static").is_ok());
        let cases = [
            (v2(sum + 1), "static", "checkpoint is corrupted"),
            (
                GOLDEN[1].replace("\"0-1\\\"", "\"0-3\\\""),
                "static",
                "could not load v4 checkpoint: checkpoint is corrupted",
            ),
            (
                GOLDEN[1].to_owned(),
                "none",
                r#"configured policy "none" differs from state checkpoint policy "static""#,
            ),
            (
                "{".to_owned(),
                "static",
                "failed to deserialize cpu manager checkpoint: EOF while parsing an object at line 1 column 1",
            ),
        ];
        for (bytes, policy, want) in cases {
            let err = CpuState::restore(bytes.as_bytes(), policy).unwrap_err();
            assert_eq!(err.to_string(), want, "{bytes}");
        }
    }
}
