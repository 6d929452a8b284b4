//! The memory manager's `Static` policy (upstream's cm/memorymanager),
//! pure: a Guaranteed pod's containers get their memory and hugepages from
//! a set of NUMA nodes, chosen with the topology manager (this is its third
//! hint provider, after the device and CPU managers), kept in
//! `memory_manager_state`, and set as the container's `cpuset.mems`.
//!
//! Each NUMA node's memory of each kind (regular memory, each hugepage
//! size) is its capacity less what the node keeps for the system
//! (`reservedMemory`, which must add up to systemReserved, kubeReserved and
//! the hard eviction threshold together). A block spanning several nodes
//! makes them a group: a node of a group is never used alone, nor one used
//! alone in a group (upstream's rule). A regular init container's memory is
//! reused by the containers after it. Pod-level resources are left alone,
//! as upstream leaves them with the PodLevelResourceManagers gate off.

pub mod state;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::podspec::{init_and_regular_containers, init_containers, is_sidecar};
use crate::qos::qos_class;
use crate::quantity::format_binary_si;
use crate::resources::{
    container_requests, hugepage_resource, is_memory_resource, pod_level_resources_set,
};
use crate::topologymanager::{BitMask, Hint, ProviderHints};

pub use state::{Block, MachineState, MemoryState, MemoryTable, NodeState, StateError};

/// The policies' names, in the config.
pub const STATIC: &str = "Static";
pub const NONE: &str = "None";

/// Regular memory's resource name.
const MEMORY: &str = "memory";

/// A NUMA node's memory as cAdvisor reports it: its total, and its
/// hugepages by page size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeMemory {
    pub id: u32,
    pub memory: u64,
    /// (page size in KiB, pages).
    pub hugepages: Vec<(u64, u64)>,
}

impl NodeMemory {
    /// The NUMA nodes' memory from sysfs, read through `read` (a path under
    /// `/sys/devices/system` → its contents) and `list` (a directory there
    /// → its entries): `node/nodeN/meminfo`'s MemTotal and the
    /// `node/nodeN/hugepages/hugepages-<size>kB/nr_hugepages` counts. A host
    /// without NUMA nodes has one, 0, with `machine_memory` and no
    /// hugepages.
    pub fn from_sysfs(
        numa_nodes: &[u32],
        read: impl Fn(&str) -> Option<String>,
        list: impl Fn(&str) -> Vec<String>,
        machine_memory: u64,
    ) -> Vec<NodeMemory> {
        if numa_nodes.is_empty() {
            return vec![NodeMemory {
                id: 0,
                memory: machine_memory,
                hugepages: Vec::new(),
            }];
        }
        let mut ids = numa_nodes.to_vec();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .map(|id| {
                let memory = read(&format!("node/node{id}/meminfo"))
                    .and_then(|text| {
                        text.lines().find_map(|l| {
                            let rest = l.split_once("MemTotal:")?.1;
                            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
                        })
                    })
                    .unwrap_or(0)
                    * 1024;
                let dir = format!("node/node{id}/hugepages");
                let mut hugepages: Vec<(u64, u64)> = list(&dir)
                    .iter()
                    .filter_map(|name| {
                        let kib = name
                            .strip_prefix("hugepages-")?
                            .strip_suffix("kB")?
                            .parse()
                            .ok()?;
                        let pages = read(&format!("{dir}/{name}/nr_hugepages"))?
                            .trim()
                            .parse()
                            .ok()?;
                        Some((kib, pages))
                    })
                    .collect();
                hugepages.sort_unstable();
                NodeMemory {
                    id,
                    memory,
                    hugepages,
                }
            })
            .collect()
    }
}

/// What each NUMA node keeps for the system, by node then resource.
pub type Reserved = BTreeMap<u32, BTreeMap<String, u64>>;

/// One `reservedMemory` entry: a node and its amounts, as written (the
/// messages print them as upstream's Quantity does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub numa_node: i32,
    /// Resource → (bytes, written in a binary unit).
    pub limits: BTreeMap<String, (i64, bool)>,
}

/// reservedMemory's items, their quantities parsed (the configuration's
/// validation refused those that do not parse).
pub fn reservations(config: &[crate::config::MemoryReservation]) -> Vec<Reservation> {
    config
        .iter()
        .map(|r| Reservation {
            numa_node: r.numa_node,
            limits: r
                .limits
                .iter()
                .map(|(name, q)| {
                    let bytes = crate::quantity::parse_bytes(
                        &k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.clone()),
                    )
                    .unwrap_or(0);
                    (name.clone(), (bytes, q.trim_end().ends_with('i')))
                })
                .collect(),
        })
        .collect()
}

/// An amount as upstream's Quantity prints a sum: in the first addend's
/// format.
fn shown(n: i64, binary: bool) -> String {
    if n == 0 {
        "0".into()
    } else if binary {
        format_binary_si(n)
    } else {
        crate::quantity::format_decimal_si(n)
    }
}

/// The per-node reservations of `reservedMemory`, checked as upstream's
/// getSystemReservedMemory checks them: every node exists, and for each
/// kind of memory they add up to what node allocatable keeps back
/// (`allocatable_reservation`: systemReserved, kubeReserved and the hard
/// eviction thresholds together).
pub fn system_reserved(
    nodes: &[NodeMemory],
    allocatable_reservation: &BTreeMap<String, i64>,
    reservations: &[Reservation],
) -> Result<Reserved, String> {
    let mut total: BTreeMap<&str, (i64, bool)> = BTreeMap::new();
    for r in reservations {
        if !nodes
            .iter()
            .any(|n| i64::from(n.id) == i64::from(r.numa_node))
        {
            return Err(format!(
                "the reserved memory configuration references a NUMA node {} that does not exist on this machine",
                r.numa_node
            ));
        }
        for (name, (bytes, binary)) in &r.limits {
            // Go's sum takes the format of the entry added last.
            let e = total.entry(name).or_insert((0, *binary));
            *e = (e.0.saturating_add(*bytes), *binary);
        }
    }
    let kinds: BTreeSet<&str> = total
        .keys()
        .copied()
        .chain(
            allocatable_reservation
                .keys()
                .map(String::as_str)
                .filter(|k| is_memory_resource(k)),
        )
        .collect();
    for kind in kinds {
        let want = allocatable_reservation.get(kind).copied().unwrap_or(0);
        let (got, binary) = total.get(kind).copied().unwrap_or((0, false));
        if want != got {
            return Err(format!(
                "the total amount {:?} of type {kind:?} is not equal to the value {:?} determined by Node Allocatable feature",
                shown(got, binary),
                shown(want, want % 1024 == 0),
            ));
        }
    }
    let mut out: Reserved = nodes.iter().map(|n| (n.id, BTreeMap::new())).collect();
    for r in reservations {
        let node = out
            .entry(u32::try_from(r.numa_node).unwrap_or(0))
            .or_default();
        for (name, (bytes, _)) in &r.limits {
            node.insert(name.clone(), u64::try_from(*bytes).unwrap_or(0));
        }
    }
    Ok(out)
}

/// Memory an init container held that the containers after it reuse, by
/// pod UID, then NUMA nodes, then resource (upstream keeps it in memory
/// only, as this is).
pub type Reusable = BTreeMap<String, BTreeMap<BitMask, BTreeMap<String, u64>>>;

/// What an allocation did, for the pinning metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pinning {
    /// The container asks for no exclusive memory.
    NotAsked,
    /// It holds its blocks already.
    Held,
    /// It was given its blocks now.
    Pinned,
}

/// The memory (and hugepages) container `c` asks for, by resource.
pub fn container_memory(c: &Container) -> BTreeMap<String, u64> {
    container_requests(c)
        .into_iter()
        .filter(|(k, _)| is_memory_resource(k))
        .filter_map(|(k, v)| Some((k, u64::try_from(v).ok()?)))
        .collect()
}

/// The memory the whole pod asks for (upstream's getPodRequestedResources):
/// its regular containers' and sidecars' together, or the most one init
/// container needs beside the sidecars started before it.
pub fn pod_memory(pod: &Pod) -> BTreeMap<String, u64> {
    let (mut inits, mut sidecars) = (
        BTreeMap::<String, u64>::new(),
        BTreeMap::<String, u64>::new(),
    );
    for c in init_containers(pod) {
        for (name, n) in container_memory(c) {
            let side = sidecars.entry(name.clone()).or_default();
            if is_sidecar(c) {
                *side += n;
            } else {
                let with = *side + n;
                let e = inits.entry(name).or_default();
                *e = (*e).max(with);
            }
        }
    }
    let mut apps = BTreeMap::<String, u64>::new();
    for c in pod.spec.iter().flat_map(|s| &s.containers) {
        for (name, n) in container_memory(c) {
            *apps.entry(name).or_default() += n;
        }
    }
    apps.into_iter()
        .map(|(name, n)| {
            let long_running = n + sidecars.get(&name).copied().unwrap_or(0);
            let init = inits.get(&name).copied().unwrap_or(0);
            (name, long_running.max(init))
        })
        .collect()
}

/// Whether `pod`'s memory is the Static policy's to place: Guaranteed,
/// without pod-level resources.
fn placed(pod: &Pod) -> bool {
    qos_class(pod) == "Guaranteed" && !pod_level_resources_set(pod)
}

fn mask_of(nodes: &[u32]) -> BitMask {
    BitMask::of(nodes.iter().copied())
}

fn sorted(mut nodes: Vec<u32>) -> Vec<u32> {
    nodes.sort_unstable();
    nodes
}

/// The preferred hint with the fewest nodes (upstream's findBestHint).
fn best_hint(hints: &[Hint]) -> Option<Hint> {
    let mut best: Option<Hint> = None;
    for h in hints {
        best = match best {
            None => Some(*h),
            Some(b) if h.preferred && !b.preferred => Some(*h),
            Some(b)
                if h.preferred == b.preferred
                    && h.affinity
                        .unwrap_or_default()
                        .narrower_than(b.affinity.unwrap_or_default()) =>
            {
                Some(*h)
            }
            keep => keep,
        };
    }
    best
}

/// The Static policy: this machine's NUMA nodes and what each keeps for
/// the system.
#[derive(Clone, Debug)]
pub struct StaticPolicy {
    pub nodes: Vec<NodeMemory>,
    pub reserved: Reserved,
}

impl StaticPolicy {
    /// Upstream's NewPolicyStatic: some memory must be kept for the system.
    pub fn new(nodes: Vec<NodeMemory>, reserved: Reserved) -> Result<Self, String> {
        let total: u64 = reserved.values().filter_map(|r| r.get(MEMORY)).sum();
        if total == 0 {
            return Err("[memorymanager] you should specify the system reserved memory".into());
        }
        Ok(StaticPolicy { nodes, reserved })
    }

    fn reserved_of(&self, node: u32, kind: &str) -> u64 {
        self.reserved
            .get(&node)
            .and_then(|r| r.get(kind))
            .copied()
            .unwrap_or(0)
    }

    /// Every node's memory with nothing given (upstream's
    /// getDefaultMachineState): hugepages first, regular memory less them.
    pub fn default_machine_state(&self) -> MachineState {
        let mut out = MachineState::new();
        for node in &self.nodes {
            let mut memory = BTreeMap::new();
            let mut in_hugepages = 0u64;
            for (kib, pages) in &node.hugepages {
                let name = hugepage_resource(kib.saturating_mul(1024));
                let total = pages * kib * 1024;
                let reserved = self.reserved_of(node.id, &name);
                let allocatable = total.saturating_sub(reserved);
                memory.insert(
                    name,
                    MemoryTable {
                        total,
                        system_reserved: reserved,
                        allocatable,
                        reserved: 0,
                        free: allocatable,
                    },
                );
                in_hugepages += total;
            }
            let reserved = self.reserved_of(node.id, MEMORY);
            let allocatable = node
                .memory
                .saturating_sub(reserved)
                .saturating_sub(in_hugepages);
            memory.insert(
                MEMORY.to_owned(),
                MemoryTable {
                    total: node.memory,
                    system_reserved: reserved,
                    allocatable,
                    reserved: 0,
                    free: allocatable,
                },
            );
            out.insert(
                node.id,
                NodeState {
                    assignments: 0,
                    memory,
                    cells: vec![node.id],
                },
            );
        }
        out
    }

    /// Upstream's validateState: a fresh state gets the default machine
    /// state; a restored one must be what its assignments make of this
    /// machine's memory (else the memory or the reservations changed).
    pub fn validate(&self, state: &mut MemoryState) -> Result<(), String> {
        if state.machine.is_empty() {
            if !state.entries.is_empty() {
                return Err(
                    "[memorymanager] machine state can not be empty when it has memory assignments"
                        .into(),
                );
            }
            state.machine = self.default_machine_state();
            return Ok(());
        }
        let mut expected = self.default_machine_state();
        for (pod, containers) in &state.entries {
            for (name, blocks) in containers {
                for b in blocks {
                    let mut size = b.size;
                    for node in &b.numa_affinity {
                        let Some(n) = expected.get_mut(node) else {
                            return Err(format!(
                                "[memorymanager] (pod: {pod}, container: {name}) the memory assignment uses the NUMA that does not exist"
                            ));
                        };
                        n.assignments += 1;
                        n.cells = b.numa_affinity.clone();
                        let Some(t) = n.memory.get_mut(&b.kind) else {
                            return Err(format!(
                                "[memorymanager] (pod: {pod}, container: {name}) the memory assignment uses memory resource that does not exist"
                            ));
                        };
                        take(t, &mut size);
                    }
                }
            }
        }
        if !machine_states_equal(&state.machine, &expected) {
            return Err(
                "[memorymanager] the expected machine state is different from the real one".into(),
            );
        }
        Ok(())
    }

    /// Where container `c` of `pod` could have its memory (upstream's
    /// GetTopologyHints): nothing for a container that asks none; for one
    /// that holds blocks already (a restart), their nodes.
    pub fn hints(
        &self,
        state: &MemoryState,
        reusable: &Reusable,
        pod_uid: &str,
        pod: &Pod,
        c: &Container,
    ) -> ProviderHints {
        if !placed(pod) {
            return ProviderHints::new();
        }
        let asked = container_memory(c);
        if asked.is_empty() {
            return ProviderHints::new();
        }
        match state.blocks(pod_uid, &c.name) {
            Some(blocks) => regenerate_hints(blocks, &asked),
            None => calculate_hints(&state.machine, reusable, pod_uid, &asked),
        }
    }

    /// Where the whole pod could have its memory (the pod scope).
    pub fn pod_hints(
        &self,
        state: &MemoryState,
        reusable: &Reusable,
        pod_uid: &str,
        pod: &Pod,
    ) -> ProviderHints {
        if !placed(pod) {
            return ProviderHints::new();
        }
        let asked = pod_memory(pod);
        if asked.is_empty() {
            return ProviderHints::new();
        }
        for c in init_and_regular_containers(pod) {
            if let Some(blocks) = state.blocks(pod_uid, &c.name) {
                return regenerate_hints(blocks, &asked);
            }
        }
        calculate_hints(&state.machine, reusable, pod_uid, &asked)
    }

    /// Give container `c` of `pod` its memory (upstream's Allocate) within
    /// the topology manager's `hint`, widened to nodes with enough free
    /// memory when it has too little; idempotent.
    pub fn allocate(
        &self,
        state: &mut MemoryState,
        reusable: &mut Reusable,
        (pod_uid, pod, c): (&str, &Pod, &Container),
        hint: Hint,
    ) -> Result<Pinning, String> {
        if !placed(pod) {
            return Ok(Pinning::NotAsked);
        }
        let asked = container_memory(c);
        if asked.is_empty() {
            return Ok(Pinning::NotAsked);
        }
        if let Some(blocks) = state.blocks(pod_uid, &c.name) {
            update_reusable(reusable, pod_uid, pod, c, blocks);
            return Ok(Pinning::Held);
        }
        let mut best = hint;
        if hint.affinity.is_none() {
            let hints = calculate_hints(&state.machine, reusable, pod_uid, &asked);
            let default = hints
                .get(MEMORY)
                .and_then(|h| best_hint(h.as_deref().unwrap_or_default()))
                .ok_or("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")?;
            if !default.preferred && best.preferred {
                return Err("[memorymanager] failed to find the default preferred hint".into());
            }
            best = default;
        }
        let mask = best.affinity.unwrap_or_default();
        if !satisfies(&state.machine, mask, &asked) {
            let hints = calculate_hints(&state.machine, reusable, pod_uid, &asked);
            let wider: Vec<Hint> = hints
                .get(MEMORY)
                .and_then(Option::as_deref)
                .unwrap_or_default()
                .iter()
                .filter(|h| h.affinity.is_some_and(|a| a.0 & mask.0 == mask.0))
                .copied()
                .collect();
            let extended = best_hint(&wider).ok_or(
                "[memorymanager] failed to find NUMA nodes to extend the current topology hint",
            )?;
            if !extended.preferred && best.preferred {
                return Err("[memorymanager] failed to find the extended preferred hint".into());
            }
            best = extended;
        }
        let mask = best.affinity.unwrap_or_default();
        if violates_groups(&state.machine, mask) {
            return Err("[memorymanager] preferred hint violates NUMA node allocation".into());
        }
        let nodes: Vec<u32> = mask.nodes().collect();
        let mut blocks = Vec::new();
        let mut reused = BTreeMap::new();
        for (kind, size) in &asked {
            blocks.push(Block {
                numa_affinity: nodes.clone(),
                kind: kind.clone(),
                size: *size,
            });
            let taken = reusable_memory(reusable, pod_uid, mask, kind).min(*size);
            reused.insert(kind.clone(), taken);
            reserve(&mut state.machine, &nodes, kind, size - taken);
        }
        update_reusable(reusable, pod_uid, pod, c, &blocks);
        state
            .entries
            .entry(pod_uid.to_owned())
            .or_default()
            .insert(c.name.clone(), blocks.clone());
        shrink_init_blocks(state, pod_uid, pod, c, &blocks, &reused);
        Ok(Pinning::Pinned)
    }

    /// Return container `name` of pod `uid`'s memory (upstream's
    /// RemoveContainer); idempotent.
    pub fn remove(&self, state: &mut MemoryState, uid: &str, name: &str) -> bool {
        let Some(blocks) = state.delete(uid, name) else {
            return false;
        };
        for b in &blocks {
            let mut released = b.size;
            for node in &b.numa_affinity {
                let Some(n) = state.machine.get_mut(node) else {
                    continue;
                };
                n.assignments -= 1;
                if n.assignments == 0 {
                    n.cells = vec![*node];
                }
                if released == 0 {
                    continue;
                }
                let Some(t) = n.memory.get_mut(&b.kind) else {
                    continue;
                };
                let back = t.reserved.min(released);
                t.reserved -= back;
                t.free += back;
                released -= back;
            }
        }
        true
    }

    /// Upstream's AddContainer: once container `c` of `pod` starts, the
    /// regular init containers before it are done; their memory returns.
    pub fn container_added(
        &self,
        state: &mut MemoryState,
        uid: &str,
        pod: &Pod,
        c: &Container,
    ) -> bool {
        let mut changed = false;
        for init in init_containers(pod) {
            if init.name == c.name {
                break;
            }
            if !is_sidecar(init) {
                changed |= self.remove(state, uid, &init.name);
            }
        }
        changed
    }

    /// Return the memory of containers `is_active` does not know
    /// (upstream's removeStaleState); true when the state changed.
    pub fn release_inactive(
        &self,
        state: &mut MemoryState,
        is_active: &dyn Fn(&str, &str) -> bool,
    ) -> bool {
        let stale: Vec<(String, String)> = state
            .entries
            .iter()
            .flat_map(|(uid, cs)| cs.keys().map(move |name| (uid.clone(), name.clone())))
            .filter(|(uid, name)| !is_active(uid, name))
            .collect();
        let mut changed = false;
        for (uid, name) in stale {
            changed |= self.remove(state, &uid, &name);
        }
        changed
    }

    /// Each node's allocatable memory of each kind (PodResources'
    /// GetAllocatableResources), kinds with none left out.
    pub fn allocatable(&self, state: &MemoryState) -> Vec<Block> {
        state
            .machine
            .iter()
            .flat_map(|(id, n)| {
                n.memory
                    .iter()
                    .filter(|(_, t)| t.allocatable > 0)
                    .map(|(kind, t)| Block {
                        numa_affinity: vec![*id],
                        kind: kind.clone(),
                        size: t.allocatable,
                    })
            })
            .collect()
    }
}

/// The NUMA nodes container `name` of pod `uid` has its memory on, as
/// `cpuset.mems` lists them (`0,1`); None when it has no blocks.
pub fn cpuset_mems(state: &MemoryState, uid: &str, name: &str) -> Option<String> {
    let nodes: BTreeSet<u32> = state
        .blocks(uid, name)?
        .iter()
        .flat_map(|b| b.numa_affinity.iter().copied())
        .collect();
    if nodes.is_empty() {
        return None;
    }
    Some(
        nodes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Take `size` from a table's free memory as far as it goes.
fn take(t: &mut MemoryTable, size: &mut u64) {
    let n = t.free.min(*size);
    t.free -= n;
    t.reserved += n;
    *size -= n;
}

/// Upstream's updateMachineState: each node of the block counts it and
/// joins the group; its memory is taken from the nodes in turn.
fn reserve(machine: &mut MachineState, nodes: &[u32], kind: &str, mut size: u64) {
    for id in nodes {
        let Some(n) = machine.get_mut(id) else {
            continue;
        };
        n.assignments += 1;
        n.cells = nodes.to_vec();
        if size == 0 {
            continue;
        }
        if let Some(t) = n.memory.get_mut(kind) {
            take(t, &mut size);
        }
    }
}

/// The free memory of `kind` on `mask`'s nodes.
fn free_on(machine: &MachineState, mask: BitMask, kind: &str) -> u64 {
    mask.nodes()
        .filter_map(|id| machine.get(&id)?.memory.get(kind))
        .map(|t| t.free)
        .sum()
}

/// Whether `mask`'s nodes have the free memory of every kind asked
/// (upstream's isAffinitySatisfyRequest).
fn satisfies(machine: &MachineState, mask: BitMask, asked: &BTreeMap<String, u64>) -> bool {
    asked
        .iter()
        .all(|(kind, size)| free_on(machine, mask, kind) >= *size)
}

/// Whether `mask` would use a node alone that is in a group, or in another
/// group (upstream's isAffinityViolatingNUMAAllocations).
fn violates_groups(machine: &MachineState, mask: BitMask) -> bool {
    let bits: Vec<u32> = mask.nodes().collect();
    if bits.len() == 1 {
        return false;
    }
    bits.iter().any(|id| {
        machine.get(id).is_some_and(|n| {
            n.assignments > 0 && (n.cells.len() == 1 || sorted(n.cells.clone()) != bits)
        })
    })
}

/// Upstream's calculateHints: every set of nodes with the allocatable and
/// free memory (and reusable init memory) asked, where the groups allow;
/// preferred those with the fewest nodes that could hold it at all. No
/// resource at all when no set can.
fn calculate_hints(
    machine: &MachineState,
    reusable: &Reusable,
    pod_uid: &str,
    asked: &BTreeMap<String, u64>,
) -> ProviderHints {
    let nodes: Vec<u32> = machine.keys().copied().collect();
    let mut min_size = nodes.len() as u32;
    let mut masks = Vec::new();
    for mask in BitMask::subsets(&nodes) {
        let bits: Vec<u32> = mask.nodes().collect();
        let single = bits.len() == 1;
        let allocatable = |kind: &str| -> u64 {
            bits.iter()
                .filter_map(|id| machine.get(id)?.memory.get(kind))
                .map(|t| t.allocatable)
                .sum()
        };
        if asked.iter().any(|(kind, size)| allocatable(kind) < *size) {
            continue;
        }
        min_size = min_size.min(mask.count());
        if single && machine[&bits[0]].cells.len() > 1 {
            continue;
        }
        let grouped_elsewhere = !single
            && bits.iter().any(|id| {
                let n = &machine[id];
                n.assignments > 0 && (n.cells.len() == 1 || sorted(n.cells.clone()) != bits)
            });
        if grouped_elsewhere {
            continue;
        }
        let enough = asked.iter().all(|(kind, size)| {
            free_on(machine, mask, kind) + reusable_memory(reusable, pod_uid, mask, kind) >= *size
        });
        if enough {
            masks.push(mask);
        }
    }
    if masks.is_empty() {
        return ProviderHints::new();
    }
    let hints: Vec<Hint> = masks
        .into_iter()
        .map(|m| Hint {
            affinity: Some(m),
            preferred: m.count() == min_size,
        })
        .collect();
    asked
        .keys()
        .map(|kind| (kind.clone(), Some(hints.clone())))
        .collect()
}

/// Upstream's regenerateHints: the nodes of the blocks a container holds,
/// when they are what it asks; no preference when they are not.
fn regenerate_hints(blocks: &[Block], asked: &BTreeMap<String, u64>) -> ProviderHints {
    if blocks.len() != asked.len() {
        return ProviderHints::new();
    }
    let mut hints: ProviderHints = asked
        .keys()
        .map(|k| (k.clone(), Some(Vec::new())))
        .collect();
    for b in blocks {
        if asked.get(&b.kind) != Some(&b.size) {
            return ProviderHints::new();
        }
        if let Some(Some(list)) = hints.get_mut(&b.kind) {
            list.push(Hint {
                affinity: Some(mask_of(&b.numa_affinity)),
                preferred: true,
            });
        }
    }
    hints
}

fn reusable_memory(reusable: &Reusable, pod_uid: &str, mask: BitMask, kind: &str) -> u64 {
    reusable
        .get(pod_uid)
        .and_then(|m| m.get(&mask))
        .and_then(|k| k.get(kind))
        .copied()
        .unwrap_or(0)
}

/// Upstream's updatePodReusableMemory: a regular init container's blocks
/// become reusable by the pod's later containers; another container's
/// blocks use that up. Other pods' reusable memory is forgotten.
fn update_reusable(
    reusable: &mut Reusable,
    pod_uid: &str,
    pod: &Pod,
    c: &Container,
    blocks: &[Block],
) {
    reusable.retain(|uid, _| uid == pod_uid);
    let regular_init = init_containers(pod)
        .iter()
        .any(|i| i.name == c.name && !is_sidecar(i));
    if regular_init {
        let pod = reusable.entry(pod_uid.to_owned()).or_default();
        for b in blocks {
            let e = pod
                .entry(mask_of(&b.numa_affinity))
                .or_default()
                .entry(b.kind.clone())
                .or_default();
            *e = (*e).max(b.size);
        }
        return;
    }
    for b in blocks {
        let mask = mask_of(&b.numa_affinity);
        if let Some(r) = reusable
            .get_mut(pod_uid)
            .and_then(|m| m.get_mut(&mask))
            .and_then(|k| k.get_mut(&b.kind))
        {
            *r = r.saturating_sub(b.size);
        }
    }
}

/// Upstream's updateInitContainersMemoryBlocks: what container `c` reused
/// of the regular init containers before it (`reused`, by kind) is taken
/// off their blocks, so that the pod's blocks add up to what it holds.
/// Upstream takes the container's whole size off, which is what it reused
/// when the pod's containers are allocated one after the other at
/// admission; a static pod's containers get their memory as each is
/// created, another pod's allocation may come between (forgetting what was
/// reusable), and only what was reused may be taken off, else the state
/// would no longer add up at the next start.
fn shrink_init_blocks(
    state: &mut MemoryState,
    uid: &str,
    pod: &Pod,
    c: &Container,
    blocks: &[Block],
    reused: &BTreeMap<String, u64>,
) {
    for b in blocks {
        let mut size = reused.get(&b.kind).copied().unwrap_or(0);
        for init in init_containers(pod) {
            if init.name == c.name || size == 0 {
                break;
            }
            if is_sidecar(init) {
                continue;
            }
            let Some(held) = state
                .entries
                .get_mut(uid)
                .and_then(|cs| cs.get_mut(&init.name))
            else {
                continue;
            };
            for ib in held.iter_mut() {
                if ib.size == 0
                    || ib.kind != b.kind
                    || mask_of(&ib.numa_affinity) != mask_of(&b.numa_affinity)
                {
                    continue;
                }
                let n = ib.size.min(size);
                ib.size -= n;
                size -= n;
            }
        }
    }
}

/// Upstream's areMachineStatesEqual: the same nodes, counts, groups and
/// capacities, and within each group the same free and reserved memory.
fn machine_states_equal(a: &MachineState, b: &MachineState) -> bool {
    if a.len() != b.len() {
        return false;
    }
    for (id, n1) in a {
        let Some(n2) = b.get(id) else {
            return false;
        };
        if n1.assignments != n2.assignments
            || sorted(n1.cells.clone()) != sorted(n2.cells.clone())
            || n1.memory.len() != n2.memory.len()
        {
            return false;
        }
        for (kind, t1) in &n1.memory {
            let Some(t2) = n2.memory.get(kind) else {
                return false;
            };
            if (t1.total, t1.system_reserved, t1.allocatable)
                != (t2.total, t2.system_reserved, t2.allocatable)
            {
                return false;
            }
            let sum = |m: &MachineState| -> (u64, u64) {
                n1.cells
                    .iter()
                    .filter_map(|c| m.get(c)?.memory.get(kind))
                    .fold((0, 0), |(f, r), t| (f + t.free, r + t.reserved))
            };
            if sum(a) != sum(b) {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests;
