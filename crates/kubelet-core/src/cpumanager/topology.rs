//! The node's CPU topology as the CPU manager sees it (upstream reads it
//! from cAdvisor's machine info, which reads sysfs): each online CPU's
//! socket, core, NUMA node and uncore cache; and upstream's packed
//! takeByTopology.

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
    /// Its uncore (split L3) cache's ID, as cAdvisor finds it; its socket
    /// where no cache above L2 is shared by only part of its NUMA node
    /// (upstream's getUncoreCacheID).
    pub uncore: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    pub cpus: BTreeMap<u32, Cpu>,
}

impl Topology {
    /// The topology of `online` CPUs from sysfs, read through `read`
    /// (a path under `/sys/devices/system` → its contents): each CPU's
    /// `cpu/cpuN/topology/{physical_package_id,core_id}`, its caches'
    /// `cpu/cpuN/cache/indexK/{level,id,shared_cpu_list}`, and the NUMA
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
        let mut per_node: BTreeMap<u32, usize> = BTreeMap::new();
        for id in online {
            *per_node
                .entry(numa_of.get(id).copied().unwrap_or(0))
                .or_default() += 1;
        }
        // cAdvisor's uncore cache: the first cache above L2 shared by fewer
        // CPUs than the NUMA node has (one shared by all of them is the
        // node's own).
        let uncore_of = |id: u32, numa: u32| {
            (0..16)
                .map_while(|k| {
                    let dir = format!("cpu/cpu{id}/cache/index{k}");
                    let level = number(format!("{dir}/level"))?;
                    Some((dir, level))
                })
                .filter(|(_, level)| *level > 2)
                .find_map(|(dir, _)| {
                    let shared = read(&format!("{dir}/shared_cpu_list"))
                        .and_then(|l| crate::cpuset::parse(l.trim()).ok())?
                        .len();
                    (shared != per_node.get(&numa).copied().unwrap_or(0))
                        .then(|| number(format!("{dir}/id")))?
                })
        };
        let cpus = online
            .iter()
            .map(|&id| {
                let socket =
                    number(format!("cpu/cpu{id}/topology/physical_package_id")).unwrap_or(0);
                let numa = numa_of.get(&id).copied().unwrap_or(0);
                let cpu = Cpu {
                    socket,
                    core: number(format!("cpu/cpu{id}/topology/core_id")).unwrap_or(id),
                    numa,
                    uncore: uncore_of(id, numa).unwrap_or(socket),
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

    /// Whether every CPU of `set` shares one uncore cache (upstream's
    /// isAlignedAtUncoreCache: one CPU or none is).
    pub fn aligned_at_uncore(&self, set: &BTreeSet<u32>) -> bool {
        let caches: BTreeSet<Option<u32>> = set
            .iter()
            .map(|cpu| self.cpus.get(cpu).map(|c| c.uncore))
            .collect();
        set.len() <= 1 || (caches.len() == 1 && !caches.contains(&None))
    }

    /// [`Topology::take_packed`] without uncore caches.
    pub fn take(&self, available: &BTreeSet<u32>, n: usize) -> Result<BTreeSet<u32>, AllocError> {
        self.take_packed(available, n, false)
    }

    /// Take `n` of `available` packed as upstream's takeByTopology
    /// (takeByTopologyNUMAPacked): whole free NUMA nodes then whole free
    /// sockets (sockets first when a socket holds several NUMA nodes), then
    /// under `prefer_uncore` whole free uncore caches or a part of one that
    /// holds the rest (upstream's takeUncoreCache), then whole free cores,
    /// then single CPUs core by core; at each level the units with the
    /// fewest free CPUs first (ties: the lowest ID), so that what stays
    /// free stays whole.
    pub fn take_packed(
        &self,
        available: &BTreeSet<u32>,
        n: usize,
        prefer_uncore: bool,
    ) -> Result<BTreeSet<u32>, AllocError> {
        if n > available.len() {
            return Err(AllocError::NotEnough {
                requested: n,
                available: available.len(),
            });
        }
        let mut acc = self.accumulator(available, n);
        let (first, second) = if acc.numa_first {
            (Level::Numa, Level::Socket)
        } else {
            (Level::Socket, Level::Numa)
        };
        for level in [first, second, Level::Uncore, Level::Core] {
            if acc.needed == 0 {
                return Ok(acc.taken);
            }
            match level {
                Level::Uncore if prefer_uncore => acc.take_uncore_caches(),
                Level::Uncore => {}
                _ => acc.take_whole(level),
            }
        }
        // Single CPUs, core by core in the cores' order.
        let order: Vec<u32> = acc
            .sorted(Level::Core)
            .into_iter()
            .flat_map(|core| acc.cpus_of(Level::Core, core, &acc.free))
            .collect();
        for cpu in order.into_iter().take(acc.needed) {
            acc.free.remove(&cpu);
            acc.taken.insert(cpu);
        }
        Ok(acc.taken)
    }

    /// Take `n` of `available` spread evenly over as few NUMA nodes as
    /// needed, in groups of `group` CPUs (upstream's
    /// takeByTopologyNUMADistributed, the `distribute-cpus-across-numa`
    /// option): of the combinations of that many nodes able to hold the
    /// request, the one leaving the free CPUs most balanced (the smallest
    /// standard deviation), each node's share taken packed. A request not
    /// a multiple of `group`, or one no combination holds, is taken packed.
    pub fn take_distributed(
        &self,
        available: &BTreeSet<u32>,
        n: usize,
        group: usize,
    ) -> Result<BTreeSet<u32>, AllocError> {
        let group = group.max(1);
        if !n.is_multiple_of(group) || n == 0 || n > available.len() {
            return self.take(available, n);
        }
        let acc = self.accumulator(available, n);
        let numas = acc.sorted(Level::Numa);
        let free_in = |numa: u32| acc.cpus_of(Level::Numa, numa, available).len();
        // Upstream's rangeNUMANodesNeededToSatisfy.
        let groups = (self.cpus.len().max(1) - 1) / group + 1;
        let groups_per_numa = (groups - 1) / self.count(|c| c.numa).max(1) + 1;
        let needed_groups = (n - 1) / group + 1;
        let min = (needed_groups - 1) / groups_per_numa + 1;
        let max = needed_groups.min(numas.len());
        for k in min..=max {
            let mut best: Option<(f64, Vec<u32>, Vec<u32>)> = None;
            for combo in combinations(&numas, k) {
                if best.as_ref().is_some_and(|(balance, _, _)| *balance == 0.0) {
                    break;
                }
                let free: Vec<usize> = combo.iter().map(|numa| free_in(*numa)).collect();
                if free.iter().sum::<usize>() < n
                    || free.iter().map(|f| f / group).sum::<usize>() * group < n
                {
                    continue;
                }
                let share = n / k / group * group;
                if free.iter().any(|f| *f < share) {
                    continue;
                }
                let mut after: BTreeMap<u32, usize> =
                    numas.iter().map(|numa| (*numa, free_in(*numa))).collect();
                for numa in &combo {
                    *after.get_mut(numa).expect("a node of the combination") -= share;
                }
                let remainder = n - share * k;
                let spare: Vec<u32> = combo
                    .iter()
                    .copied()
                    .filter(|numa| after[numa] >= group)
                    .collect();
                let mut local: Option<(f64, Vec<u32>)> =
                    (remainder == 0).then(|| (standard_deviation(after.values()), Vec::new()));
                for size in (1..=spare.len()).rev().take_while(|_| remainder > 0) {
                    for subset in combinations(&spare, size) {
                        let Some(left) = spread_remainder(&after, &subset, remainder, group) else {
                            continue;
                        };
                        let balance = standard_deviation(left.values());
                        if local.as_ref().is_none_or(|(b, _)| balance < *b) {
                            local = Some((balance, subset));
                        }
                    }
                }
                if let Some((balance, subset)) = local
                    && best.as_ref().is_none_or(|(b, _, _)| balance < *b)
                {
                    best = Some((balance, combo, subset));
                }
            }
            let Some((_, combo, spare)) = best else {
                continue;
            };
            let share = combo
                .iter()
                .map(|numa| free_in(*numa) / group * group)
                .fold(n / combo.len() / group * group, usize::min);
            let mut taken = BTreeSet::new();
            let mut free = available.clone();
            let mut take_from = |numa: u32, count: usize, free: &mut BTreeSet<u32>| {
                let within: BTreeSet<u32> =
                    acc.cpus_of(Level::Numa, numa, free).into_iter().collect();
                let cpus = self.take(&within, count)?;
                free.retain(|c| !cpus.contains(c));
                taken.extend(cpus);
                Ok::<(), AllocError>(())
            };
            for numa in &combo {
                take_from(*numa, share, &mut free)?;
            }
            let mut remainder = n - share * combo.len();
            while remainder > 0 {
                let before = remainder;
                for numa in &spare {
                    if remainder == 0 {
                        break;
                    }
                    if acc.cpus_of(Level::Numa, *numa, &free).len() >= group {
                        take_from(*numa, group, &mut free)?;
                        remainder -= group;
                    }
                }
                if remainder == before {
                    break;
                }
            }
            if remainder == 0 {
                return Ok(taken);
            }
        }
        self.take(available, n)
    }

    /// An accumulator to take `n` of `available`.
    fn accumulator(&self, available: &BTreeSet<u32>, n: usize) -> Accumulator<'_> {
        Accumulator {
            topo: self,
            cores: self.core_ids(),
            numa_first: self.count(|c| c.socket) >= self.count(|c| c.numa),
            free: available.clone(),
            taken: BTreeSet::new(),
            needed: n,
        }
    }

    /// How many distinct values `key` takes over the CPUs (sockets, NUMA
    /// nodes).
    fn count(&self, key: impl Fn(&Cpu) -> u32) -> usize {
        self.cpus.values().map(key).collect::<BTreeSet<u32>>().len()
    }

    /// Each CPU's core, named by its lowest CPU (upstream's unique core ID).
    fn core_ids(&self) -> BTreeMap<u32, u32> {
        let mut lowest: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        for (id, c) in &self.cpus {
            lowest.entry((c.socket, c.core)).or_insert(*id);
        }
        self.cpus
            .iter()
            .map(|(id, c)| (*id, lowest[&(c.socket, c.core)]))
            .collect()
    }
}

/// The units CPUs are taken by.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Numa,
    Socket,
    Uncore,
    Core,
}

/// Upstream's cpuAccumulator: what is still free, taken and needed.
struct Accumulator<'a> {
    topo: &'a Topology,
    cores: BTreeMap<u32, u32>,
    /// Upstream's "numaFirst" order: NUMA nodes, then sockets in them,
    /// then cores in those (a node holds whole sockets); else sockets,
    /// NUMA nodes in them, cores in those.
    numa_first: bool,
    free: BTreeSet<u32>,
    taken: BTreeSet<u32>,
    needed: usize,
}

impl Accumulator<'_> {
    fn unit(&self, level: Level, cpu: u32) -> Option<u32> {
        let c = self.topo.cpus.get(&cpu)?;
        Some(match level {
            Level::Numa => c.numa,
            Level::Socket => c.socket,
            Level::Uncore => c.uncore,
            Level::Core => self.cores[&cpu],
        })
    }

    /// The CPUs of `within` in unit `id` of `level`.
    fn cpus_of(&self, level: Level, id: u32, within: &BTreeSet<u32>) -> Vec<u32> {
        within
            .iter()
            .copied()
            .filter(|cpu| self.unit(level, *cpu) == Some(id))
            .collect()
    }

    /// The units of `level` with free CPUs among `within`, fewest free CPUs
    /// first, then by ID.
    fn sort_units(&self, level: Level, within: &BTreeSet<u32>) -> Vec<u32> {
        let mut units: Vec<u32> = within
            .iter()
            .filter_map(|cpu| self.unit(level, *cpu))
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect();
        units.sort_by_key(|id| (self.cpus_of(level, *id, &self.free).len(), *id));
        units
    }

    /// The units of `level` in upstream's order for this topology.
    fn sorted(&self, level: Level) -> Vec<u32> {
        let (outer, inner) = if self.numa_first {
            (Level::Numa, Level::Socket)
        } else {
            (Level::Socket, Level::Numa)
        };
        let mut out = Vec::new();
        let mut add = |ids: Vec<u32>| {
            for id in ids {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        };
        // Each level's units within the one above, in its order.
        let within = |parent: Level, id: u32| -> BTreeSet<u32> {
            self.cpus_of(parent, id, &self.free).into_iter().collect()
        };
        if level == Level::Uncore {
            // Each NUMA node's, in the nodes' order (upstream's
            // sortAvailableUncoreCaches, a cache across nodes listed under
            // each).
            return self
                .sorted(Level::Numa)
                .into_iter()
                .flat_map(|numa| self.sort_units(level, &within(Level::Numa, numa)))
                .collect();
        }
        if level == outer {
            add(self.sort_units(level, &self.free));
        } else if level == inner {
            for parent in self.sort_units(outer, &self.free) {
                add(self.sort_units(level, &within(outer, parent)));
            }
        } else {
            for parent in self.sorted(inner) {
                add(self.sort_units(level, &within(inner, parent)));
            }
        }
        out
    }

    /// Whether every CPU of unit `id` of `level` is free (upstream compares
    /// a socket with CPUs per socket, a core with CPUs per core).
    fn is_whole(&self, level: Level, id: u32) -> bool {
        let free = self.cpus_of(level, id, &self.free).len();
        let all = self.topo.cpus.len();
        free == match level {
            Level::Numa | Level::Uncore => self.cpus_of(level, id, &self.topo.all()).len(),
            Level::Socket => all / self.topo.count(|c| c.socket).max(1),
            Level::Core => self.topo.cpus_per_core(),
        }
    }

    /// Upstream's takeUncoreCache: for each uncore cache in order, every
    /// whole free one that fits while the request needs a cache's worth,
    /// then this one's free cores if they hold exactly what is left.
    fn take_uncore_caches(&mut self) {
        let per_cache = self.topo.cpus.len() / self.topo.count(|c| c.uncore).max(1);
        for cache in self.sorted(Level::Uncore) {
            if self.needed >= per_cache {
                self.take_whole(Level::Uncore);
            }
            if self.needed == 0 {
                return;
            }
            self.take_part_of_uncore(cache);
            if self.needed == 0 {
                return;
            }
        }
    }

    /// Upstream's takePartialUncore: the free CPUs of the lowest free cores
    /// of `cache` as many as the request needs (one CPU fewer for an odd
    /// request under SMT), taken only if that is exactly what is left.
    fn take_part_of_uncore(&mut self, cache: u32) {
        let per_core = self.topo.cpus_per_core();
        let cores_needed = self.needed.div_ceil(per_core);
        let free = self.cpus_of(Level::Uncore, cache, &self.free);
        let cores: BTreeSet<u32> = free
            .iter()
            .map(|cpu| self.cores[cpu])
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .take(cores_needed)
            .collect();
        let mut cpus: Vec<u32> = self
            .free
            .iter()
            .copied()
            .filter(|cpu| cores.contains(&self.cores[cpu]))
            .collect();
        if !self.needed.is_multiple_of(2) && per_core > 1 && cpus.len() > self.needed {
            cpus.pop();
        }
        if cpus.len() == self.needed {
            self.needed = 0;
            for cpu in cpus {
                self.free.remove(&cpu);
                self.taken.insert(cpu);
            }
        }
    }

    /// Take every whole free unit of `level` that still fits.
    fn take_whole(&mut self, level: Level) {
        let whole: Vec<u32> = self
            .sorted(level)
            .into_iter()
            .filter(|id| self.is_whole(level, *id))
            .collect();
        for id in whole {
            let cpus = self.cpus_of(level, id, &self.topo.all());
            if cpus.len() <= self.needed {
                self.needed -= cpus.len();
                for cpu in cpus {
                    self.free.remove(&cpu);
                    self.taken.insert(cpu);
                }
            }
        }
    }
}

/// Every `k`-element combination of `items`, in order (upstream's
/// iterateCombinations).
fn combinations(items: &[u32], k: usize) -> Vec<Vec<u32>> {
    fn walk(items: &[u32], k: usize, acc: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
        if k == 0 {
            out.push(acc.clone());
            return;
        }
        for (i, item) in items.iter().enumerate() {
            if items.len() - i < k {
                break;
            }
            acc.push(*item);
            walk(&items[i + 1..], k - 1, acc, out);
            acc.pop();
        }
    }
    let mut out = Vec::new();
    if k > 0 {
        walk(items, k, &mut Vec::new(), &mut out);
    }
    out
}

/// The free CPUs per node left once `remainder` more CPUs are taken from
/// the nodes of `subset` a group at a time, round robin; None when they
/// cannot hold it.
fn spread_remainder(
    after: &BTreeMap<u32, usize>,
    subset: &[u32],
    mut remainder: usize,
    group: usize,
) -> Option<BTreeMap<u32, usize>> {
    if subset.iter().map(|n| after[n]).sum::<usize>() < remainder {
        return None;
    }
    let mut left = after.clone();
    while remainder > 0 {
        let before = remainder;
        for numa in subset {
            if remainder == 0 {
                break;
            }
            let free = left.get_mut(numa)?;
            if *free >= group {
                *free -= group;
                remainder -= group;
            }
        }
        if remainder == before {
            return None;
        }
    }
    Some(left)
}

/// Upstream's standardDeviation: over the mean rounded to three decimals,
/// the result rounded to three decimals.
fn standard_deviation<'a>(values: impl Iterator<Item = &'a usize> + Clone) -> f64 {
    let count = values.clone().count().max(1) as f64;
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    let mean = round(values.clone().map(|v| *v as f64).sum::<f64>() / count);
    let sum: f64 = values.map(|v| (*v as f64 - mean).powi(2)).sum();
    round((sum / count).sqrt())
}
