//! The CPU manager's static policy (upstream's cm/cpumanager), pure: which
//! CPUs the node keeps for itself, which a container gets for its own, and
//! the shared pool the others run on. The kubelet's `cm::cpumanager` reads
//! the topology and the state file and applies the result through the CRI.
//!
//! A container gets exclusive CPUs when its pod is Guaranteed and its CPU
//! request is an integer; they leave the shared pool (`defaultCpuSet`) and
//! return to it once the pod is no longer active. An init container's CPUs
//! are reused by the containers after it (not a sidecar's, which runs beside
//! them). The reserved CPUs are never given exclusively.

pub mod state;
pub mod topology;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cpuset;
use crate::podspec::{init_and_regular_containers, is_sidecar};
use crate::qos::qos_class;
use crate::resources::container_requests;
use crate::strconv::parse_bool;
use crate::topologymanager::{BitMask, Hint, ProviderHints, hints_over};
pub use state::{CpuState, StateError};
pub use topology::Topology;

/// The static policy's name, in the config and the state file.
pub const STATIC: &str = "static";
/// The none policy's name.
pub const NONE: &str = "none";

/// The static policy's options (cpuManagerPolicyOptions) rkubelet honours.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `full-pcpus-only`: whole physical cores only (SMTAlignmentError
    /// otherwise).
    pub full_pcpus_only: bool,
    /// `strict-cpu-reservation`: the reserved CPUs leave the shared pool too.
    pub strict_cpu_reservation: bool,
    /// `distribute-cpus-across-numa`: a container's CPUs spread evenly over
    /// the NUMA nodes it needs.
    pub distribute_cpus_across_numa: bool,
    /// `prefer-align-cpus-by-uncorecache`: a container's CPUs share an
    /// uncore (L3) cache where they can.
    pub prefer_align_by_uncore_cache: bool,
}

const UNCORE: &str = "prefer-align-cpus-by-uncorecache";
const DISTRIBUTE_NUMA: &str = "distribute-cpus-across-numa";

/// Upstream's alpha options: refused as upstream refuses them while
/// CPUManagerPolicyAlphaOptions is off (rkubelet keeps that gate off).
const ALPHA: [&str; 2] = ["align-by-socket", "distribute-cpus-across-cores"];

impl Options {
    /// Parse cpuManagerPolicyOptions with upstream's messages.
    pub fn parse<'a>(
        options: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Options, String> {
        let mut out = Options::default();
        for (name, value) in options {
            let flag = match name.as_str() {
                "full-pcpus-only" => &mut out.full_pcpus_only,
                "strict-cpu-reservation" => &mut out.strict_cpu_reservation,
                DISTRIBUTE_NUMA => &mut out.distribute_cpus_across_numa,
                UNCORE => &mut out.prefer_align_by_uncore_cache,
                n if ALPHA.contains(&n) => {
                    return Err(format!(
                        "CPU Manager Policy Alpha-level Options not enabled, but option {n:?} provided"
                    ));
                }
                other => return Err(format!("unknown CPU Manager Policy option: {other:?}")),
            };
            *flag = parse_bool(value).map_err(|e| format!("bad value for option {name:?}: {e}"))?;
        }
        if out.prefer_align_by_uncore_cache && out.distribute_cpus_across_numa {
            return Err(format!(
                "static policy options {UNCORE} and {DISTRIBUTE_NUMA} can not be used at the same time"
            ));
        }
        Ok(out)
    }
}

/// Why a container cannot have its CPUs; `reason()` is the pod's rejection
/// reason, as upstream's admission gives it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error(
        "not enough cpus available to satisfy request: requested={requested}, available={available}"
    )]
    NotEnough { requested: usize, available: usize },
    #[error(
        "SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}"
    )]
    NotCoreMultiple { requested: usize, per_core: usize },
    #[error(
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {available}, requested CPUs = {requested}, CPUs per core = {per_core}"
    )]
    NotEnoughCores {
        available: usize,
        requested: usize,
        per_core: usize,
    },
}

impl AllocError {
    /// The pod's rejection reason and message (upstream's topology manager
    /// admit handler: a typed error's type, else UnexpectedAdmissionError).
    pub fn rejection(&self) -> (&'static str, String) {
        match self {
            AllocError::NotEnough { .. } => (
                "UnexpectedAdmissionError",
                format!("Allocate failed due to {self}, which is unexpected"),
            ),
            _ => ("SMTAlignmentError", self.to_string()),
        }
    }
}

/// The exclusive CPUs `c` of `pod` asks for: its integer CPU request when
/// the pod is Guaranteed, else 0 (it runs on the shared pool).
pub fn guaranteed_cpus(pod: &Pod, c: &Container) -> usize {
    if qos_class(pod) != "Guaranteed" {
        return 0;
    }
    match container_requests(c).get("cpu") {
        Some(&m) if m > 0 && m % 1000 == 0 => usize::try_from(m / 1000).unwrap_or(0),
        _ => 0,
    }
}

/// The exclusive CPUs the whole pod asks for (upstream's
/// podGuaranteedCPUs): its regular containers' and sidecars' together, or
/// the most one init container needs beside the sidecars started before it.
pub fn pod_guaranteed_cpus(pod: &Pod) -> usize {
    let (mut inits, mut sidecars) = (0, 0);
    for c in crate::podspec::init_containers(pod) {
        let n = guaranteed_cpus(pod, c);
        if is_sidecar(c) {
            sidecars += n;
        } else {
            inits = inits.max(sidecars + n);
        }
    }
    let regular: usize = crate::podspec::regular_containers(pod)
        .iter()
        .map(|c| guaranteed_cpus(pod, c))
        .sum();
    inits.max(regular + sidecars)
}

/// The reserved CPUs: `reserved_system_cpus` when set, else the first
/// `ceil(reserve_millis / 1000)` by topology. Upstream's errors.
pub fn reserved_cpus(
    topology: &Topology,
    options: Options,
    reserved_system_cpus: &BTreeSet<u32>,
    reserve_millis: i64,
) -> Result<BTreeSet<u32>, String> {
    let count = usize::try_from((reserve_millis + 999) / 1000).unwrap_or(0);
    if count == 0 {
        return Err(
            "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
                .into(),
        );
    }
    let reserved = if reserved_system_cpus.is_empty() {
        take_by_topology(topology, options, &topology.all(), count).unwrap_or_default()
    } else {
        reserved_system_cpus.clone()
    };
    if reserved.len() != count {
        return Err(format!(
            "new static policy error: [cpumanager] unable to reserve the required amount of CPUs (size of {} did not equal {count})",
            cpuset::format(&reserved)
        ));
    }
    Ok(reserved)
}

/// Take `n` of `available` as the options say (upstream's
/// takeByTopology): spread over NUMA nodes in groups of whole cores (of
/// single CPUs without full-pcpus-only) under distribute-cpus-across-numa,
/// else packed (by uncore cache too under prefer-align-cpus-by-uncorecache).
pub fn take_by_topology(
    topology: &Topology,
    options: Options,
    available: &BTreeSet<u32>,
    n: usize,
) -> Result<BTreeSet<u32>, AllocError> {
    if options.distribute_cpus_across_numa {
        let group = if options.full_pcpus_only {
            topology.cpus_per_core()
        } else {
            1
        };
        topology.take_distributed(available, n, group)
    } else {
        topology.take_packed(available, n, options.prefer_align_by_uncore_cache)
    }
}

/// The static policy over a topology, with its reserved CPUs.
#[derive(Clone, Debug)]
pub struct StaticPolicy {
    pub topology: Topology,
    pub reserved: BTreeSet<u32>,
    pub options: Options,
}

impl StaticPolicy {
    /// The CPUs of the shared pool when nothing is assigned.
    pub fn initial_pool(&self) -> BTreeSet<u32> {
        let all = self.topology.all();
        if self.options.strict_cpu_reservation {
            all.difference(&self.reserved).copied().collect()
        } else {
            all
        }
    }

    /// Upstream's validateState: a state from the file that does not fit
    /// this node and these settings is refused; an empty one is filled.
    pub fn validate(&self, state: &mut CpuState) -> Result<(), String> {
        let all = self.initial_pool();
        let fmt = cpuset::format;
        if state.default.is_empty() {
            if !state.entries.is_empty() {
                return Err("default cpuset cannot be empty".into());
            }
            state.default = all;
            return Ok(());
        }
        let held: BTreeSet<u32> = self
            .reserved
            .intersection(&state.default)
            .copied()
            .collect();
        if self.options.strict_cpu_reservation {
            if !held.is_empty() {
                return Err(format!(
                    "some of strictly reserved cpus: {:?} are present in defaultCpuSet: {:?}",
                    fmt(&held),
                    fmt(&state.default)
                ));
            }
        } else if held != self.reserved {
            return Err(format!(
                "not all reserved cpus: {:?} are present in defaultCpuSet: {:?}",
                fmt(&self.reserved),
                fmt(&state.default)
            ));
        }
        for (pod, containers) in &state.entries {
            for (container, cpus) in containers {
                if !cpus.is_disjoint(&state.default) {
                    return Err(format!(
                        "pod: {pod}, container: {container} cpuset: {:?} overlaps with default cpuset {:?}",
                        fmt(cpus),
                        fmt(&state.default)
                    ));
                }
            }
        }
        let known: BTreeSet<u32> = state.default.union(&state.assigned()).copied().collect();
        if known != all {
            return Err(format!(
                "current set of available CPUs {:?} doesn't match with CPUs in state {:?}",
                fmt(&all),
                fmt(&known)
            ));
        }
        Ok(())
    }

    /// The CPUs not given to any container and not reserved (upstream's
    /// GetAvailableCPUs).
    fn available(&self, state: &CpuState) -> BTreeSet<u32> {
        state.default.difference(&self.reserved).copied().collect()
    }

    /// Where container `c` of `pod` could have its CPUs (upstream's
    /// GetTopologyHints): nothing for a container that asks none; for one
    /// that holds CPUs already (a restart), the hints of those, or none
    /// possible when it asks another count now.
    pub fn hints(
        &self,
        state: &CpuState,
        pod_uid: &str,
        pod: &Pod,
        c: &Container,
    ) -> ProviderHints {
        let n = guaranteed_cpus(pod, c);
        if n == 0 {
            return ProviderHints::new();
        }
        let hints = match state.entries.get(pod_uid).and_then(|cs| cs.get(&c.name)) {
            Some(held) if held.len() != n => Vec::new(),
            Some(held) => self.cpu_hints(held, &BTreeSet::new(), n),
            None => self.cpu_hints(
                &self.available(state),
                &reusable_cpus(state, pod_uid, pod),
                n,
            ),
        };
        ProviderHints::from([("cpu".to_owned(), Some(hints))])
    }

    /// Where the whole pod could have its CPUs (upstream's
    /// GetPodTopologyHints, the pod scope).
    pub fn pod_hints(&self, state: &CpuState, pod_uid: &str, pod: &Pod) -> ProviderHints {
        let n = pod_guaranteed_cpus(pod);
        if n == 0 {
            return ProviderHints::new();
        }
        let held = state.entries.get(pod_uid);
        let mut assigned = BTreeSet::new();
        for c in init_and_regular_containers(pod) {
            if let Some(cpus) = held.and_then(|cs| cs.get(&c.name)) {
                if cpus.len() != guaranteed_cpus(pod, c) {
                    return ProviderHints::from([("cpu".to_owned(), Some(Vec::new()))]);
                }
                assigned.extend(cpus.iter().copied());
            }
        }
        let hints = if assigned.len() == n {
            self.cpu_hints(&assigned, &BTreeSet::new(), n)
        } else {
            let mut reusable = reusable_cpus(state, pod_uid, pod);
            reusable.extend(assigned);
            self.cpu_hints(&self.available(state), &reusable, n)
        };
        ProviderHints::from([("cpu".to_owned(), Some(hints))])
    }

    /// Upstream's generateCPUTopologyHints over the NUMA nodes with CPUs.
    fn cpu_hints(
        &self,
        available: &BTreeSet<u32>,
        reusable: &BTreeSet<u32>,
        n: usize,
    ) -> Vec<Hint> {
        let all = self.topology.all();
        hints_over(
            &self.topology.numa_nodes(),
            n,
            |mask| self.topology.within(&all, mask).len(),
            |mask| {
                (self.topology.within(reusable, mask).len() == reusable.len())
                    .then(|| reusable.len() + self.topology.within(available, mask).len())
            },
        )
    }

    /// Give container `c` of `pod` its exclusive CPUs in `state` (nothing
    /// when it asks none or has them already), those on the NUMA nodes of
    /// `affinity` first (the topology manager's); CPUs of the pod's
    /// finished init containers may be taken again. Returns the CPUs it
    /// now holds.
    pub fn allocate(
        &self,
        state: &mut CpuState,
        pod_uid: &str,
        pod: &Pod,
        c: &Container,
        affinity: Option<BitMask>,
    ) -> Result<Option<BTreeSet<u32>>, AllocError> {
        let n = guaranteed_cpus(pod, c);
        if n == 0 {
            return Ok(None);
        }
        if let Some(cpus) = state.entries.get(pod_uid).and_then(|cs| cs.get(&c.name)) {
            return Ok(Some(cpus.clone()));
        }
        if self.options.full_pcpus_only {
            self.check_smt_alignment(state, n)?;
        }
        let mut available = self.available(state);
        available.extend(reusable_cpus(state, pod_uid, pod));
        if n > available.len() {
            return Err(AllocError::NotEnough {
                requested: n,
                available: available.len(),
            });
        }
        // Upstream's allocateCPUs: as many as fit from the affinity's
        // nodes, the rest from anywhere.
        let mut cpus = BTreeSet::new();
        if let Some(mask) = affinity {
            let aligned = self.topology.within(&available, mask);
            cpus = take_by_topology(&self.topology, self.options, &aligned, n.min(aligned.len()))?;
        }
        let rest: BTreeSet<u32> = available.difference(&cpus).copied().collect();
        cpus.extend(take_by_topology(
            &self.topology,
            self.options,
            &rest,
            n - cpus.len(),
        )?);
        state.default.retain(|cpu| !cpus.contains(cpu));
        state
            .entries
            .entry(pod_uid.to_owned())
            .or_default()
            .insert(c.name.clone(), cpus.clone());
        Ok(Some(cpus))
    }

    fn check_smt_alignment(&self, state: &CpuState, n: usize) -> Result<(), AllocError> {
        let per_core = self.topology.cpus_per_core();
        if !n.is_multiple_of(per_core) {
            return Err(AllocError::NotCoreMultiple {
                requested: n,
                per_core,
            });
        }
        let reserved_cores = self.topology.siblings_of(&self.reserved);
        let available = state.default.difference(&reserved_cores).count();
        if n > available {
            return Err(AllocError::NotEnoughCores {
                available,
                requested: n,
                per_core,
            });
        }
        Ok(())
    }

    /// Return the CPUs of every container whose pod `active` does not name
    /// to the shared pool (upstream's removeStaleState); true when the
    /// state changed.
    pub fn release_inactive(
        &self,
        state: &mut CpuState,
        active: &dyn Fn(&str, &str) -> bool,
    ) -> bool {
        let mut freed = BTreeSet::new();
        state.entries.retain(|pod, containers| {
            containers.retain(|name, cpus| {
                let keep = active(pod, name);
                if !keep {
                    freed.extend(cpus.iter().copied());
                }
                keep
            });
            !containers.is_empty()
        });
        // A CPU an init container shared with a later one stays held.
        let still = state.assigned();
        freed.retain(|cpu| !still.contains(cpu));
        state.default.extend(freed.iter().copied());
        !freed.is_empty()
    }
}

/// The CPUs of `pod`'s init containers (not sidecars) that no app container
/// of the pod holds: the containers after them may take those.
fn reusable_cpus(state: &CpuState, pod_uid: &str, pod: &Pod) -> BTreeSet<u32> {
    let Some(held) = state.entries.get(pod_uid) else {
        return BTreeSet::new();
    };
    let spec = pod.spec.as_ref();
    let inits = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let mut reusable: BTreeSet<u32> = inits
        .iter()
        .filter(|c| !is_sidecar(c))
        .filter_map(|c| held.get(&c.name))
        .flatten()
        .copied()
        .collect();
    let others: BTreeSet<u32> = held
        .iter()
        .filter(|(name, _)| !inits.iter().any(|c| !is_sidecar(c) && &c.name == *name))
        .flat_map(|(_, cpus)| cpus.iter().copied())
        .collect();
    reusable.retain(|cpu| !others.contains(cpu));
    reusable
}

#[cfg(test)]
mod tests;
