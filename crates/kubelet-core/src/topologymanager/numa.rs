//! The node's NUMA nodes as the topology manager sees them (upstream's
//! NUMAInfo, from cAdvisor, which reads sysfs), and the hints a provider
//! builds over them.

use std::collections::BTreeMap;

use super::{BitMask, Hint};

/// The NUMA nodes, and the distance from each to each (sysfs
/// `node/nodeN/distance`, indexed by node ID).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaInfo {
    pub nodes: Vec<u32>,
    pub distances: BTreeMap<u32, Vec<u64>>,
}

impl NumaInfo {
    /// From sysfs, read through `read` (a path under
    /// `/sys/devices/system` → its contents): `numa_nodes` lists the
    /// `node/nodeM` directories. A host without them has one node, 0, as
    /// cAdvisor reports it.
    pub fn from_sysfs(numa_nodes: &[u32], read: impl Fn(&str) -> Option<String>) -> NumaInfo {
        let mut nodes = numa_nodes.to_vec();
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.is_empty() {
            return NumaInfo {
                nodes: vec![0],
                distances: BTreeMap::new(),
            };
        }
        let distances = nodes
            .iter()
            .filter_map(|&n| {
                let text = read(&format!("node/node{n}/distance"))?;
                let row: Option<Vec<u64>> =
                    text.split_whitespace().map(|d| d.parse().ok()).collect();
                Some((n, row?))
            })
            .collect();
        NumaInfo { nodes, distances }
    }

    /// Every node (upstream's DefaultAffinityMask).
    pub fn all(&self) -> BitMask {
        BitMask::of(self.nodes.iter().copied())
    }

    /// Whether every node's distances are known (prefer-closest-numa-nodes
    /// needs them).
    pub fn has_distances(&self) -> bool {
        self.nodes.iter().all(|n| self.distances.contains_key(n))
    }

    /// The narrower of two masks (upstream's Narrowest).
    pub fn narrowest(a: BitMask, b: BitMask) -> BitMask {
        if a.narrower_than(b) { a } else { b }
    }

    /// Of two masks the narrower, or with as many nodes the one whose nodes
    /// are closer to each other on average; the lower on a tie (upstream's
    /// Closest).
    pub fn closest(&self, a: BitMask, b: BitMask) -> BitMask {
        if a.count() != b.count() {
            return Self::narrowest(a, b);
        }
        let (da, db) = (self.average_distance(a), self.average_distance(b));
        if da == db {
            if a.0 < b.0 { a } else { b }
        } else if da < db {
            a
        } else {
            b
        }
    }

    /// The mean distance over every ordered pair of the mask's nodes
    /// (upstream's CalculateAverageFor).
    fn average_distance(&self, mask: BitMask) -> f64 {
        let nodes: Vec<u32> = mask.nodes().collect();
        if nodes.is_empty() {
            return 0.0;
        }
        let mut sum = 0.0;
        for a in &nodes {
            for b in &nodes {
                let d = self
                    .distances
                    .get(a)
                    .and_then(|row| row.get(*b as usize))
                    .copied()
                    .unwrap_or(0);
                sum += d as f64;
            }
        }
        sum / (nodes.len() * nodes.len()) as f64
    }
}

/// A provider's hints for `request` items over `nodes` (upstream's
/// generateCPUTopologyHints and generateDeviceTopologyHints): every set of
/// nodes where enough items are free, preferred when no smaller set of
/// nodes has enough items at all. `total(mask)` counts the node's items
/// in the mask; `free(mask)` those the request may take there, None when
/// an item the container must keep lies outside it.
pub fn hints_over(
    nodes: &[u32],
    request: usize,
    total: impl Fn(BitMask) -> usize,
    free: impl Fn(BitMask) -> Option<usize>,
) -> Vec<Hint> {
    let mut min_size = nodes.len() as u32;
    let mut hints = Vec::new();
    for mask in BitMask::subsets(nodes) {
        if total(mask) >= request && mask.count() < min_size {
            min_size = mask.count();
        }
        if free(mask).is_some_and(|n| n >= request) {
            hints.push(Hint {
                affinity: Some(mask),
                preferred: false,
            });
        }
    }
    for h in &mut hints {
        h.preferred = h.affinity.is_some_and(|m| m.count() == min_size);
    }
    hints
}
