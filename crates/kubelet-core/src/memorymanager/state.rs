//! The memory manager's state file, `<root-dir>/memory_manager_state`, as
//! upstream writes it (its "v3" checkpoint), so that either kubelet reads
//! the other's:
//!
//! ```json
//! {"policyName":"Static","machineState":{"0":{"numberOfAssignments":1,"memoryMap":{"memory":{…}},"cells":[0]}},
//!  "entries":{"<pod uid>":{"<container>":[{"numaAffinity":[0],"type":"memory","size":N}]}},
//!  "checksum":N,"data":"{\"policyName\":…}","dataChecksum":M}
//! ```
//!
//! `data` (with `dataChecksum`, the checkpoint manager's checksum of a
//! string) is what upstream reads; the fields before it are the older "v1"
//! layout kept for older kubelets, `checksum` being FNV-1a over go-spew's
//! dump of that struct under its old type name. Files of the older layouts
//! (v1, v2) are read too, as upstream reads them.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{checksum, fnv1a32};

/// The state file's name under the root directory.
pub const FILE: &str = "memory_manager_state";

/// One kind of memory of one NUMA node (upstream's MemoryTable), in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTable {
    #[serde(rename = "total", default)]
    pub total: u64,
    #[serde(rename = "systemReserved", default)]
    pub system_reserved: u64,
    #[serde(default)]
    pub allocatable: u64,
    #[serde(default)]
    pub reserved: u64,
    #[serde(default)]
    pub free: u64,
}

/// One NUMA node's memory (upstream's NUMANodeState): its kinds of memory
/// by resource name, how many blocks use it, and the group of nodes it is
/// allocated with (itself alone until a block spans several).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    #[serde(rename = "numberOfAssignments", default)]
    pub assignments: i64,
    #[serde(rename = "memoryMap", default)]
    pub memory: BTreeMap<String, MemoryTable>,
    #[serde(default)]
    pub cells: Vec<u32>,
}

/// Every NUMA node's memory, by node ID.
pub type MachineState = BTreeMap<u32, NodeState>;

/// Memory of one kind given to a container from a set of NUMA nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    #[serde(rename = "numaAffinity", default)]
    pub numa_affinity: Vec<u32>,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub size: u64,
}

/// Each pod's containers' blocks, by pod UID then container name.
pub type Assignments = BTreeMap<String, BTreeMap<String, Vec<Block>>>;

/// What the memory manager keeps across restarts: the policy that wrote
/// it, the machine's memory and the containers' blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryState {
    pub policy: String,
    pub machine: MachineState,
    pub entries: Assignments,
}

/// Why a state file cannot be used: upstream refuses to start then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("{0}")]
    Unreadable(String),
    #[error(
        "[memorymanager] configured policy {configured:?} differs from state checkpoint policy {found:?}"
    )]
    OtherPolicy { configured: String, found: String },
}

/// A pod-level entry (v2's, and v3's under an alpha gate): read for the
/// checksum, never used.
#[derive(Serialize, Deserialize)]
struct PodEntry {
    #[serde(rename = "memoryBlocks", default)]
    blocks: Vec<Block>,
}

/// The authoritative payload (`data`). Go writes a map with int keys
/// sorted as text: so are these.
#[derive(Serialize, Deserialize)]
struct Data {
    #[serde(rename = "policyName", default)]
    policy_name: String,
    #[serde(rename = "machineState", default)]
    machine_state: BTreeMap<String, NodeState>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: Assignments,
}

/// The whole file, every layout's fields.
#[derive(Serialize, Deserialize)]
struct File {
    #[serde(flatten)]
    v1: Data,
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

/// go-spew's dump of a `[]int`.
fn spew_ints(out: &mut String, ints: &[u32]) {
    out.push('[');
    for (i, n) in ints.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{n}");
    }
    out.push(']');
}

/// go-spew's dump of a `[]state.Block` (inside a map: no type before it).
fn spew_blocks(out: &mut String, blocks: &[Block]) {
    out.push('[');
    for (i, b) in blocks.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str("{NUMAAffinity:([]int)");
        spew_ints(out, &b.numa_affinity);
        let _ = write!(
            out,
            " Type:(v1.ResourceName){} Size:(uint64){}}}",
            b.kind, b.size
        );
    }
    out.push(']');
}

/// go-spew's dump of the machine state (int keys in numeric order).
fn spew_machine(out: &mut String, machine: &BTreeMap<u32, &NodeState>) {
    out.push_str("(state.NUMANodeMap)map[");
    for (i, (id, node)) in machine.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(
            out,
            "{id}:<*>{{NumberOfAssignments:(int){} MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[",
            node.assignments
        );
        for (j, (kind, t)) in node.memory.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            let _ = write!(
                out,
                "{kind}:<*>{{TotalMemSize:(uint64){} SystemReserved:(uint64){} Allocatable:(uint64){} Reserved:(uint64){} Free:(uint64){}}}",
                t.total, t.system_reserved, t.allocatable, t.reserved, t.free
            );
        }
        out.push_str("] Cells:([]int)");
        spew_ints(out, &node.cells);
        out.push('}');
    }
    out.push(']');
}

/// Upstream's `checksum` field: over the v1 struct (v2's with its pod
/// entries) as go-spew dumps it, under the type name
/// `MemoryManagerCheckpoint`.
fn layout_checksum(file: &File, with_pod_entries: bool) -> u64 {
    let mut out = format!(
        "(*state.MemoryManagerCheckpoint){{PolicyName:(string){} MachineState:",
        file.v1.policy_name
    );
    let machine: BTreeMap<u32, &NodeState> = file
        .v1
        .machine_state
        .iter()
        .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
        .collect();
    spew_machine(&mut out, &machine);
    out.push_str(" Entries:(state.ContainerMemoryAssignments)map[");
    for (i, (pod, containers)) in file.v1.entries.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{pod}:map[");
        for (j, (name, blocks)) in containers.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{name}:");
            spew_blocks(&mut out, blocks);
        }
        out.push(']');
    }
    out.push(']');
    if with_pod_entries {
        out.push_str(" PodEntries:(state.PodMemoryAssignments)map[");
        for (i, (pod, entry)) in file.pod_entries.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{pod}:{{MemoryBlocks:([]state.Block)");
            spew_blocks(&mut out, &entry.blocks);
            out.push('}');
        }
        out.push(']');
    }
    out.push_str(" Checksum:(checksum.Checksum)0}");
    u64::from(fnv1a32(out.as_bytes()))
}

impl MemoryState {
    /// A fresh state of `policy`: no machine state yet, nothing given.
    pub fn new(policy: &str) -> Self {
        MemoryState {
            policy: policy.to_owned(),
            ..Default::default()
        }
    }

    /// The file's bytes, as upstream's MarshalCheckpoint writes them.
    pub fn encode(&self) -> Vec<u8> {
        let data = Data {
            policy_name: self.policy.clone(),
            machine_state: self
                .machine
                .iter()
                .map(|(id, n)| (id.to_string(), n.clone()))
                .collect(),
            entries: self.entries.clone(),
        };
        let data_text = serde_json::to_string(&data).expect("strings and maps serialize");
        let mut file = File {
            v1: data,
            pod_entries: BTreeMap::new(),
            checksum: 0,
            data_checksum: Some(checksum(&data_text)),
            data: Some(data_text),
        };
        file.checksum = layout_checksum(&file, false);
        serde_json::to_vec(&file).expect("strings and maps serialize")
    }

    /// A state file's contents, its checksum verified, restored for the
    /// `configured` policy: upstream's errors for a file it would refuse.
    pub fn restore(bytes: &[u8], configured: &str) -> Result<MemoryState, StateError> {
        let unreadable = |m: String| StateError::Unreadable(m);
        let file: File = serde_json::from_slice(bytes).map_err(|e| {
            unreadable(format!(
                "failed to deserialize memory manager checkpoint: {e}"
            ))
        })?;
        let data = match (&file.data, file.data_checksum) {
            (Some(data), sum) if !data.is_empty() || sum.is_some_and(|s| s != 0) => {
                if checksum(data) != sum.unwrap_or(0) {
                    return Err(unreadable(
                        "could not load v3 checkpoint: checkpoint is corrupted".into(),
                    ));
                }
                serde_json::from_str(data).map_err(|e| {
                    unreadable(format!(
                        "could not load v3 checkpoint: failed to deserialize memory manager checkpoint data: {e}"
                    ))
                })?
            }
            _ => {
                // v2 (its checksum over the pod entries too), else v1
                // (whose zero checksum is accepted, as upstream).
                let ok = layout_checksum(&file, true) == file.checksum
                    || file.checksum == 0
                    || layout_checksum(&file, false) == file.checksum;
                if !ok {
                    return Err(unreadable("checkpoint is corrupted".into()));
                }
                file.v1
            }
        };
        if data.policy_name != configured {
            return Err(StateError::OtherPolicy {
                configured: configured.to_owned(),
                found: data.policy_name,
            });
        }
        let mut machine = MachineState::new();
        for (id, node) in data.machine_state {
            let n = id.parse().map_err(|_| {
                unreadable(format!(
                    "could not load v3 checkpoint: failed to deserialize memory manager checkpoint data: NUMA node ID {id:?} is not a number"
                ))
            })?;
            machine.insert(n, node);
        }
        Ok(MemoryState {
            policy: data.policy_name,
            machine,
            entries: data.entries,
        })
    }

    /// Container `name` of pod `uid`'s blocks.
    pub fn blocks(&self, uid: &str, name: &str) -> Option<&Vec<Block>> {
        self.entries.get(uid)?.get(name)
    }

    /// Remove container `name` of pod `uid`'s blocks (and the pod once it
    /// has none), returning them.
    pub fn delete(&mut self, uid: &str, name: &str) -> Option<Vec<Block>> {
        let containers = self.entries.get_mut(uid)?;
        let blocks = containers.remove(name);
        if containers.is_empty() {
            self.entries.remove(uid);
        }
        blocks
    }
}
