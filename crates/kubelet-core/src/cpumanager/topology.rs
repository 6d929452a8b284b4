//! The node's CPU topology as the CPU manager sees it (upstream reads it
//! from cAdvisor's machine info, which reads sysfs): each online CPU's
//! socket, core and NUMA node; and upstream's packed takeByTopology.

use std::collections::{BTreeMap, BTreeSet};

use super::AllocError;
use crate::topologymanager::BitMask;

/// Where one CPU sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    pub socket: u32,
    /// The core's ID within its socket (sysfs `core_id`).
    pub core: u32,
    pub numa: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    pub cpus: BTreeMap<u32, Cpu>,
}

impl Topology {
    /// The topology of `online` CPUs from sysfs, read through `read`
    /// (a path under `/sys/devices/system` → its contents): each CPU's
    /// `cpu/cpuN/topology/{physical_package_id,core_id}`, and the NUMA
    /// nodes' `node/nodeM/cpulist` (`numa_nodes` lists the M). A CPU whose
    /// files are missing counts as its own core on socket and node 0.
    pub fn from_sysfs(
        online: &BTreeSet<u32>,
        numa_nodes: &[u32],
        read: impl Fn(&str) -> Option<String>,
    ) -> Topology {
        let number = |path: String| {
            read(&path)
                .and_then(|s| s.trim().parse::<i64>().ok())
                .and_then(|n| u32::try_from(n).ok())
        };
        let mut numa_of = BTreeMap::new();
        for &node in numa_nodes {
            let list = read(&format!("node/node{node}/cpulist")).unwrap_or_default();
            for cpu in crate::cpuset::parse(list.trim()).unwrap_or_default() {
                numa_of.insert(cpu, node);
            }
        }
        let cpus = online
            .iter()
            .map(|&id| {
                let cpu = Cpu {
                    socket: number(format!("cpu/cpu{id}/topology/physical_package_id"))
                        .unwrap_or(0),
                    core: number(format!("cpu/cpu{id}/topology/core_id")).unwrap_or(id),
                    numa: numa_of.get(&id).copied().unwrap_or(0),
                };
                (id, cpu)
            })
            .collect();
        Topology { cpus }
    }

    /// Every CPU.
    pub fn all(&self) -> BTreeSet<u32> {
        self.cpus.keys().copied().collect()
    }

    /// The NUMA nodes that have CPUs, lowest first.
    pub fn numa_nodes(&self) -> Vec<u32> {
        let nodes: BTreeSet<u32> = self.cpus.values().map(|c| c.numa).collect();
        nodes.into_iter().collect()
    }

    /// The CPUs of `set` on the NUMA nodes of `mask`.
    pub fn within(&self, set: &BTreeSet<u32>, mask: BitMask) -> BTreeSet<u32> {
        set.iter()
            .copied()
            .filter(|cpu| self.cpus.get(cpu).is_some_and(|c| mask.is_set(c.numa)))
            .collect()
    }

    /// How many of `set` each NUMA node has (every node, 0 included).
    pub fn count_per_numa(&self, set: &BTreeSet<u32>) -> BTreeMap<u32, usize> {
        let mut out: BTreeMap<u32, usize> = self.cpus.values().map(|c| (c.numa, 0)).collect();
        for cpu in set {
            if let Some(c) = self.cpus.get(cpu) {
                *out.entry(c.numa).or_default() += 1;
            }
        }
        out
    }

    /// Hardware threads per core (1 without SMT).
    pub fn cpus_per_core(&self) -> usize {
        let cores = self.cores_of(&self.all()).len().max(1);
        (self.cpus.len() / cores).max(1)
    }

    /// `set`'s CPUs grouped by core ((socket, core) → CPUs).
    fn cores_of(&self, set: &BTreeSet<u32>) -> BTreeMap<(u32, u32), BTreeSet<u32>> {
        let mut out: BTreeMap<(u32, u32), BTreeSet<u32>> = BTreeMap::new();
        for cpu in set {
            if let Some(c) = self.cpus.get(cpu) {
                out.entry((c.socket, c.core)).or_default().insert(*cpu);
            }
        }
        out
    }

    /// Every CPU on a core that one of `set` is on.
    pub fn siblings_of(&self, set: &BTreeSet<u32>) -> BTreeSet<u32> {
        let cores: BTreeSet<(u32, u32)> = self.cores_of(set).into_keys().collect();
        self.cpus
            .iter()
            .filter(|(_, c)| cores.contains(&(c.socket, c.core)))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Take `n` of `available` packed as upstream's takeByTopology: whole
    /// free sockets first, then whole free cores, then single CPUs, each
    /// time from the socket and core with the fewest free CPUs (ties: the
    /// lowest ID), so that what stays free stays whole.
    pub fn take(&self, available: &BTreeSet<u32>, n: usize) -> Result<BTreeSet<u32>, AllocError> {
        if n > available.len() {
            return Err(AllocError::NotEnough {
                requested: n,
                available: available.len(),
            });
        }
        let mut free: BTreeSet<u32> = available.clone();
        let mut taken = BTreeSet::new();
        let all = self.all();
        let group = |key: &dyn Fn(&Cpu) -> (u32, u32), within: &BTreeSet<u32>| {
            let mut out: BTreeMap<(u32, u32), BTreeSet<u32>> = BTreeMap::new();
            for cpu in within {
                if let Some(c) = self.cpus.get(cpu) {
                    out.entry(key(c)).or_default().insert(*cpu);
                }
            }
            out
        };
        let socket = |c: &Cpu| (c.socket, 0);
        let core = |c: &Cpu| (c.socket, c.core);
        // Whole sockets, then whole cores: a unit is taken when all of its
        // CPUs are free and it fits in what is still asked.
        for key in [&socket as &dyn Fn(&Cpu) -> (u32, u32), &core] {
            let whole = group(key, &all);
            let free_in_socket = group(&socket, &free);
            let mut units: Vec<_> = group(key, &free).into_iter().collect();
            // Fullest socket first (a stable sort: then by ID).
            units.sort_by_key(|((s, _), _)| free_in_socket.get(&(*s, 0)).map_or(0, BTreeSet::len));
            for (unit, cpus) in units {
                let remaining = n - taken.len();
                if cpus.len() <= remaining && whole.get(&unit) == Some(&cpus) {
                    free.retain(|c| !cpus.contains(c));
                    taken.extend(cpus);
                }
            }
        }
        // Single CPUs: from the fullest socket, then the fullest core.
        while taken.len() < n {
            let sockets = group(&socket, &free);
            let cores = group(&core, &free);
            let next = free
                .iter()
                .copied()
                .min_by_key(|cpu| {
                    let c = self.cpus.get(cpu).copied().unwrap_or(Cpu {
                        socket: 0,
                        core: *cpu,
                        numa: 0,
                    });
                    (
                        sockets.get(&(c.socket, 0)).map_or(0, BTreeSet::len),
                        cores.get(&(c.socket, c.core)).map_or(0, BTreeSet::len),
                        *cpu,
                    )
                })
                .expect("n <= available");
            free.remove(&next);
            taken.insert(next);
        }
        Ok(taken)
    }
}
