//! The topology manager's policies (upstream's cm/topologymanager), pure:
//! each hint provider (the device manager, the CPU manager) says on which
//! sets of NUMA nodes it could place what a container (or pod) asks; the
//! policy merges their hints into the one affinity the providers then
//! allocate within, and says whether the pod is admitted.
//!
//! `best-effort` admits every pod, `restricted` only one whose merged hint
//! is preferred, `single-numa-node` only one whose resources fit on one
//! NUMA node. The kubelet's `topologymanager` runs the providers at
//! admission, in the configured scope.

mod numa;

use std::collections::BTreeMap;

pub use numa::{NumaInfo, hints_over};

use crate::strconv::{atoi, parse_bool};

/// The policies' names, in the config.
pub const NONE: &str = "none";
pub const BEST_EFFORT: &str = "best-effort";
pub const RESTRICTED: &str = "restricted";
pub const SINGLE_NUMA_NODE: &str = "single-numa-node";

/// The scopes' names.
pub const SCOPE_CONTAINER: &str = "container";
pub const SCOPE_POD: &str = "pod";

/// The rejection's reason and message (upstream's TopologyAffinityError).
pub const AFFINITY_ERROR: &str = "TopologyAffinityError";
pub const AFFINITY_ERROR_MESSAGE: &str = "Resources cannot be allocated with Topology locality";

/// Upstream's default and minimum of max-allowable-numa-nodes.
pub const DEFAULT_MAX_NUMA_NODES: usize = 8;

const PREFER_CLOSEST: &str = "prefer-closest-numa-nodes";
const MAX_ALLOWABLE: &str = "max-allowable-numa-nodes";

/// A set of NUMA nodes (upstream's 64-bit bitmask).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BitMask(pub u64);

impl BitMask {
    /// The mask of `nodes`; a node past 63 is left out (upstream refuses it).
    pub fn of(nodes: impl IntoIterator<Item = u32>) -> BitMask {
        BitMask(
            nodes
                .into_iter()
                .filter(|n| *n < 64)
                .fold(0, |m, n| m | 1 << n),
        )
    }

    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    pub fn is_set(self, node: u32) -> bool {
        node < 64 && self.0 & (1 << node) != 0
    }

    pub fn any_set(self, nodes: impl IntoIterator<Item = u32>) -> bool {
        nodes.into_iter().any(|n| self.is_set(n))
    }

    /// The nodes, lowest first.
    pub fn nodes(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |n| self.is_set(*n))
    }

    /// Fewer nodes, or as many with a lower value (upstream's
    /// IsNarrowerThan).
    pub fn narrower_than(self, other: BitMask) -> bool {
        if self.count() == other.count() {
            self.0 < other.0
        } else {
            self.count() < other.count()
        }
    }

    /// Every non-empty subset of `nodes`, smallest first, each size in
    /// lexicographic order (upstream's IterateBitMasks).
    pub fn subsets(nodes: &[u32]) -> Vec<BitMask> {
        fn walk(rest: &[u32], acc: &mut Vec<u32>, size: usize, out: &mut Vec<BitMask>) {
            if acc.len() == size {
                out.push(BitMask::of(acc.iter().copied()));
                return;
            }
            for (i, n) in rest.iter().enumerate() {
                acc.push(*n);
                walk(&rest[i + 1..], acc, size, out);
                acc.pop();
            }
        }
        let mut out = Vec::new();
        for size in 1..=nodes.len() {
            walk(nodes, &mut Vec::new(), size, &mut out);
        }
        out
    }
}

impl std::fmt::Display for BitMask {
    /// As upstream prints a mask: binary, padded to the pair of digits
    /// past the highest even power it exceeds.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = (1..32)
            .rev()
            .map(|k| 2 * k)
            .find(|shift| self.0 > 1 << shift)
            .map_or(2, |shift| shift + 2);
        write!(f, "{:0width$b}", self.0)
    }
}

/// Where a provider could place a resource: a set of NUMA nodes (None:
/// anywhere, no preference), and whether that set is among the narrowest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hint {
    pub affinity: Option<BitMask>,
    pub preferred: bool,
}

impl Hint {
    pub const ANYWHERE: Hint = Hint {
        affinity: None,
        preferred: true,
    };
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.affinity {
            Some(m) => write!(f, "{{{m} {}}}", self.preferred),
            None => write!(f, "{{<nil> {}}}", self.preferred),
        }
    }
}

/// One provider's hints by resource: None for a resource it has no
/// preference for, an empty list for one it cannot place at all. An
/// empty map: no preference for anything.
pub type ProviderHints = BTreeMap<String, Option<Vec<Hint>>>;

/// topologyManagerPolicyOptions, as upstream parses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyOptions {
    pub prefer_closest_numa: bool,
    pub max_allowable_numa_nodes: usize,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            prefer_closest_numa: false,
            max_allowable_numa_nodes: DEFAULT_MAX_NUMA_NODES,
        }
    }
}

impl PolicyOptions {
    /// Parse the options with upstream's messages (both are GA options).
    pub fn parse<'a>(
        options: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<PolicyOptions, String> {
        let mut out = PolicyOptions::default();
        for (name, value) in options {
            match name.as_str() {
                PREFER_CLOSEST => {
                    out.prefer_closest_numa = parse_bool(value)
                        .map_err(|e| format!("bad value for option {name:?}: {e}"))?;
                }
                MAX_ALLOWABLE => {
                    let n = atoi(value).map_err(|e| {
                        format!("unable to convert policy option to integer {name:?}: {e}")
                    })?;
                    if n < DEFAULT_MAX_NUMA_NODES as i64 {
                        return Err(format!(
                            "the minimum value of {name:?} should not be less than {DEFAULT_MAX_NUMA_NODES}"
                        ));
                    }
                    out.max_allowable_numa_nodes = usize::try_from(n).unwrap_or(usize::MAX);
                }
                other => return Err(format!("unknown Topology Manager Policy option: {other:?}")),
            }
        }
        Ok(out)
    }
}

/// The three policies that align.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    BestEffort,
    Restricted,
    SingleNumaNode,
}

impl PolicyKind {
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::BestEffort => BEST_EFFORT,
            PolicyKind::Restricted => RESTRICTED,
            PolicyKind::SingleNumaNode => SINGLE_NUMA_NODE,
        }
    }
}

/// A policy over this node's NUMA nodes.
#[derive(Clone, Debug)]
pub struct Policy {
    pub kind: PolicyKind,
    pub numa: NumaInfo,
    pub options: PolicyOptions,
}

impl Policy {
    /// Upstream's NewManager for a policy other than `none` (Ok(None) for
    /// `none`): the options parsed, the node's NUMA nodes checked against
    /// max-allowable-numa-nodes. Errors in upstream's words.
    pub fn new(
        name: &str,
        options: &BTreeMap<String, String>,
        numa: NumaInfo,
    ) -> Result<Option<Policy>, String> {
        if name == NONE {
            return Ok(None);
        }
        let options = PolicyOptions::parse(options)?;
        if options.prefer_closest_numa && !numa.has_distances() {
            return Err(
                "cannot discover NUMA topology: error getting NUMA distances from cadvisor".into(),
            );
        }
        if numa.nodes.len() > options.max_allowable_numa_nodes {
            return Err(format!(
                "unsupported on machines with more than {} NUMA Nodes",
                options.max_allowable_numa_nodes
            ));
        }
        let kind = match name {
            BEST_EFFORT => PolicyKind::BestEffort,
            RESTRICTED => PolicyKind::Restricted,
            SINGLE_NUMA_NODE => PolicyKind::SingleNumaNode,
            other => return Err(format!("unknown policy: \"{other}\"")),
        };
        Ok(Some(Policy {
            kind,
            numa,
            options,
        }))
    }

    /// Whether an admitted pod's resources are on one NUMA node for sure
    /// (upstream's IsAlignmentGuaranteed).
    pub fn guarantees_alignment(&self) -> bool {
        self.kind == PolicyKind::SingleNumaNode
    }

    /// Merge the providers' hints into the best one, and whether the pod
    /// is admitted with it (upstream's Policy.Merge).
    pub fn merge(&self, providers: &[ProviderHints]) -> (Hint, bool) {
        let mut filtered = filter_providers_hints(providers);
        if self.kind == PolicyKind::SingleNumaNode {
            for hints in &mut filtered {
                hints.retain(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1));
            }
        }
        let mut best = self.merge_filtered(&filtered);
        if self.kind == PolicyKind::SingleNumaNode && best.affinity == Some(self.numa.all()) {
            best.affinity = None;
        }
        let admit = match self.kind {
            PolicyKind::BestEffort => true,
            PolicyKind::Restricted | PolicyKind::SingleNumaNode => best.preferred,
        };
        (best, admit)
    }

    /// Upstream's HintMerger.Merge: every combination of one hint per
    /// resource merged (the nodes they share), the best kept.
    fn merge_filtered(&self, hints: &[Vec<Hint>]) -> Hint {
        let all = self.numa.all();
        let best_non_preferred = max_of_min_affinity_counts(hints);
        let mut best: Option<(BitMask, bool)> = None;
        let mut combination = Vec::with_capacity(hints.len());
        for_each_combination(hints, &mut combination, &mut |permutation| {
            let candidate = merge_permutation(all, permutation);
            best = Some(match best {
                None if candidate.0.count() == 0 => return,
                None => candidate,
                Some(current) => self.compare(current, candidate, best_non_preferred),
            });
        });
        let (mask, preferred) = best.unwrap_or((all, false));
        Hint {
            affinity: Some(mask),
            preferred,
        }
    }

    /// Upstream's HintMerger.compare: the better of the current best and a
    /// candidate.
    fn compare(
        &self,
        current: (BitMask, bool),
        candidate: (BitMask, bool),
        best_non_preferred: u32,
    ) -> (BitMask, bool) {
        let ((cur, cur_pref), (cand, cand_pref)) = (current, candidate);
        if cand.count() == 0 {
            return current;
        }
        match (cur_pref, cand_pref) {
            (false, true) => return candidate,
            (true, false) => return current,
            (true, true) => return self.better_mask(current, candidate),
            (false, false) => {}
        }
        // Neither is preferred: the one closest to the narrowest affinity
        // some resource could have at best.
        let (n_cur, n_cand) = (cur.count(), cand.count());
        if n_cur > best_non_preferred {
            return self.better_mask(current, candidate);
        }
        if n_cur == best_non_preferred {
            if n_cand != best_non_preferred {
                return current;
            }
            return self.better_mask(current, candidate);
        }
        if n_cand > best_non_preferred {
            return current;
        }
        if n_cand == best_non_preferred {
            return candidate;
        }
        if n_cand > n_cur {
            return candidate;
        }
        if n_cand < n_cur {
            return current;
        }
        self.better_mask(current, candidate)
    }

    /// Upstream's CompareNUMAAffinityMasks: the narrower (or, under
    /// prefer-closest-numa-nodes, the closer) of two masks; current on a tie.
    fn better_mask(&self, current: (BitMask, bool), candidate: (BitMask, bool)) -> (BitMask, bool) {
        if candidate.0 == current.0 {
            return current;
        }
        let best = if self.kind != PolicyKind::SingleNumaNode && self.options.prefer_closest_numa {
            self.numa.closest(current.0, candidate.0)
        } else {
            NumaInfo::narrowest(current.0, candidate.0)
        };
        if best == current.0 {
            current
        } else {
            candidate
        }
    }
}

/// Upstream's filterProvidersHints: one list of hints per resource; a
/// provider or resource without preference counts as `{nil, true}`, one
/// that cannot be placed as `{nil, false}`.
fn filter_providers_hints(providers: &[ProviderHints]) -> Vec<Vec<Hint>> {
    let mut out = Vec::new();
    for hints in providers {
        if hints.is_empty() {
            out.push(vec![Hint::ANYWHERE]);
            continue;
        }
        for resource in hints.values() {
            out.push(match resource {
                None => vec![Hint::ANYWHERE],
                Some(list) if list.is_empty() => vec![Hint {
                    affinity: None,
                    preferred: false,
                }],
                Some(list) => list.clone(),
            });
        }
    }
    out
}

/// The merged hint of one combination: the nodes every hint with an
/// affinity shares; preferred when all are and their affinities agree.
fn merge_permutation(all: BitMask, permutation: &[Hint]) -> (BitMask, bool) {
    let mut preferred = true;
    let mut first = None;
    let mut merged = all;
    for hint in permutation {
        if let Some(m) = hint.affinity {
            if *first.get_or_insert(m) != m {
                preferred = false;
            }
            merged.0 &= m.0;
        }
        if !hint.preferred {
            preferred = false;
        }
    }
    (merged, preferred)
}

fn for_each_combination(hints: &[Vec<Hint>], acc: &mut Vec<Hint>, f: &mut dyn FnMut(&[Hint])) {
    let Some((first, rest)) = hints.split_first() else {
        f(acc);
        return;
    };
    for h in first {
        acc.push(*h);
        for_each_combination(rest, acc, f);
        acc.pop();
    }
}

/// The largest, over resources, of the node count of the narrowest
/// affinity each has (upstream's maxOfMinAffinityCounts).
fn max_of_min_affinity_counts(hints: &[Vec<Hint>]) -> u32 {
    hints
        .iter()
        .filter_map(|resource| {
            resource
                .iter()
                .filter_map(|h| h.affinity)
                .reduce(|a, b| if b.narrower_than(a) { b } else { a })
        })
        .map(BitMask::count)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
