//! One pass of the eviction manager, pure (upstream's synchronize up to the
//! choice of what to reclaim): the signals a stats summary shows
//! (makeSignalObservations), the thresholds they cross (with the minimum
//! reclaim of those crossed before), their grace periods, the pressure
//! conditions with their transition period, and the thresholds whose
//! figures are new enough to act on, in upstream's eviction priority.
//! Times are nanoseconds since the epoch, passed in.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Pressure, Resource, Signal, Threshold};
use crate::stats::{FsStats, MemoryStats, Summary, nanos_since_epoch};

/// A signal's figure: what is left of what there is, and when it was read
/// (0: not known).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
    pub time: i64,
}

pub type Observations = BTreeMap<Signal, Observation>;

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A file system's bytes and inodes as two signals' observations.
fn observe_fs(out: &mut Observations, fs: &FsStats, bytes: Signal, inodes: Signal) {
    let time = nanos_since_epoch(fs.time);
    if let (Some(a), Some(c)) = (fs.available_bytes, fs.capacity_bytes) {
        out.insert(
            bytes,
            Observation {
                available: clamp(a),
                capacity: clamp(c),
                time,
            },
        );
    }
    if let (Some(a), Some(c)) = (fs.inodes_free, fs.inodes) {
        out.insert(
            inodes,
            Observation {
                available: clamp(a),
                capacity: clamp(c),
                time,
            },
        );
    }
}

/// makeSignalObservations: memory.available from the node's memory (its
/// capacity is available plus working set), allocatableMemory.available
/// likewise from the `pods` system container, nodefs from the root
/// directory's file system, imagefs from the runtime's image file system,
/// pid.available from the node's process limit. A figure the summary lacks
/// is no observation (its thresholds cannot be met).
pub fn observe(summary: &Summary) -> Observations {
    let mut out = Observations::new();
    let node = &summary.node;
    if let Some(o) = node.memory.as_ref().and_then(memory_observation) {
        out.insert(Signal::MemoryAvailable, o);
    }
    if let Some(o) = node.pods_memory().and_then(memory_observation) {
        out.insert(Signal::AllocatableMemoryAvailable, o);
    }
    if let Some(fs) = &node.fs {
        observe_fs(
            &mut out,
            fs,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        );
    }
    if let Some(fs) = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()) {
        observe_fs(
            &mut out,
            fs,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        );
    }
    if let Some(r) = &node.rlimit
        && let (Some(max), Some(running)) = (r.max_pid, r.num_of_running_processes)
    {
        out.insert(
            Signal::PidAvailable,
            Observation {
                available: max - running,
                capacity: max,
                time: nanos_since_epoch(r.time),
            },
        );
    }
    out
}

/// A memory figure's observation: what is available, of a capacity of
/// available plus working set.
fn memory_observation(m: &MemoryStats) -> Option<Observation> {
    let (a, ws) = (m.available_bytes?, m.working_set_bytes?);
    Some(Observation {
        available: clamp(a),
        capacity: clamp(a.saturating_add(ws)),
        time: nanos_since_epoch(m.time),
    })
}

/// thresholdsMet: the thresholds whose signal is below them (each with its
/// minimum reclaim added when `enforce_min_reclaim`).
pub fn thresholds_met(
    thresholds: &[Threshold],
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = observations.get(&t.signal) else {
                return false;
            };
            let mut quantity = t.value.amount_of(o.capacity);
            if enforce_min_reclaim && let Some(m) = t.min_reclaim {
                quantity = quantity.saturating_add(m.amount_of(o.capacity));
            }
            quantity > o.available
        })
        .copied()
        .collect()
}

/// What the manager remembers from one pass to the next.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// The thresholds met at the last pass, grace periods served: they stay
    /// met until their minimum reclaim is done too.
    met: Vec<Threshold>,
    /// When each threshold crossed now was first seen crossed.
    first_observed: Vec<(Threshold, i64)>,
    /// When each pressure was last seen.
    pressure_last_observed: BTreeMap<Pressure, i64>,
    /// The last pass's observations: only newer figures are acted on.
    last: Observations,
}

/// What one pass concludes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pass {
    /// The node's pressure conditions: each seen within the transition
    /// period (evictionPressureTransitionPeriod).
    pub pressure: Vec<Pressure>,
    /// The thresholds to act on (crossed, grace period served, observed
    /// anew since the last pass), memory first, then those with a resource
    /// to reclaim (byEvictionPriority).
    pub act_on: Vec<Threshold>,
}

impl Pass {
    /// getReclaimableThreshold: the first threshold to act on that has a
    /// resource to reclaim.
    pub fn reclaim(&self) -> Option<(Threshold, Resource)> {
        self.act_on
            .iter()
            .find_map(|t| Some((*t, t.signal.resource()?)))
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// byEvictionPriority as a key: memory signals, then signals with a
/// resource to reclaim, then the rest.
fn eviction_priority(t: &Threshold) -> u8 {
    match t.signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => 0,
        s if s.resource().is_some() => 1,
        _ => 2,
    }
}

/// One pass: `thresholds` (the configuration's) against `observations`
/// at `now`.
pub fn step(
    state: &State,
    thresholds: &[Threshold],
    observations: Observations,
    now: i64,
    transition_period: Duration,
) -> (State, Pass) {
    let mut met = thresholds_met(thresholds, &observations, false);
    // Thresholds met before stay met until their minimum reclaim is done.
    for t in thresholds_met(&state.met, &observations, true) {
        if !met.contains(&t) {
            met.push(t);
        }
    }
    let first_observed: Vec<(Threshold, i64)> = met
        .iter()
        .map(|t| {
            let at = state
                .first_observed
                .iter()
                .find(|(seen, _)| seen == t)
                .map_or(now, |(_, at)| *at);
            (*t, at)
        })
        .collect();
    let mut pressure_last_observed = state.pressure_last_observed.clone();
    for t in &met {
        pressure_last_observed.insert(t.signal.pressure(), now);
    }
    let pressure = pressure_last_observed
        .iter()
        .filter(|(_, at)| now.saturating_sub(**at) < nanos(transition_period))
        .map(|(p, _)| *p)
        .collect();
    let served: Vec<Threshold> = first_observed
        .iter()
        .filter(|(t, at)| now.saturating_sub(*at) >= nanos(t.grace_period))
        .map(|(t, _)| *t)
        .collect();
    // thresholdsUpdatedStats: a figure not newer than the last pass's was
    // already acted on.
    let mut act_on: Vec<Threshold> = served
        .iter()
        .filter(|t| {
            let Some(o) = observations.get(&t.signal) else {
                return false;
            };
            state
                .last
                .get(&t.signal)
                .is_none_or(|last| o.time == 0 || o.time > last.time)
        })
        .copied()
        .collect();
    act_on.sort_by_key(eviction_priority);
    let next = State {
        met: served,
        first_observed,
        pressure_last_observed,
        last: observations,
    };
    (next, Pass { pressure, act_on })
}

/// The memcg usage threshold upstream's memory threshold notifier sets
/// for `threshold` (kernelMemcgNotification): the usage at which the
/// node's available memory reaches the threshold, given the summary's node
/// memory (usage, working set, available) — capacity less the threshold
/// plus the inactive file pages the working set leaves out.
pub fn memcg_threshold(threshold: &Threshold, usage: u64, working_set: u64, available: u64) -> i64 {
    let inactive_file = clamp(usage.saturating_sub(working_set));
    let capacity = clamp(available.saturating_add(working_set));
    capacity
        .saturating_sub(threshold.value.amount_of(capacity))
        .saturating_add(inactive_file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::{ThresholdValue, Written};
    use crate::stats::{MemoryStats, NodeStats, RlimitStats, RuntimeStats};
    use std::time::UNIX_EPOCH;

    const MI: i64 = 1 << 20;
    const SEC: i64 = 1_000_000_000;

    fn threshold(signal: Signal, value: ThresholdValue, grace: u64) -> Threshold {
        Threshold {
            signal,
            value,
            grace_period: Duration::from_secs(grace),
            min_reclaim: None,
        }
    }

    fn memory(available: i64, time: i64) -> Observations {
        Observations::from([(
            Signal::MemoryAvailable,
            Observation {
                available,
                capacity: 1000 * MI,
                time,
            },
        )])
    }

    #[test]
    fn observations_from_a_summary_as_upstream_makes_them() {
        let t = UNIX_EPOCH + Duration::from_secs(100);
        let fs = |avail: u64, cap: u64| FsStats {
            time: t,
            available_bytes: Some(avail),
            capacity_bytes: Some(cap),
            used_bytes: None,
            inodes_free: Some(7),
            inodes: Some(10),
            inodes_used: None,
        };
        let summary = Summary {
            node: NodeStats {
                memory: Some(MemoryStats {
                    time: t,
                    available_bytes: Some(300),
                    usage_bytes: Some(900),
                    working_set_bytes: Some(700),
                    rss_bytes: None,
                    page_faults: None,
                    major_page_faults: None,
                }),
                fs: Some(fs(40, 100)),
                runtime: Some(RuntimeStats {
                    image_fs: Some(fs(5, 50)),
                    container_fs: None,
                }),
                rlimit: Some(RlimitStats {
                    time: t,
                    max_pid: Some(4096),
                    num_of_running_processes: Some(96),
                }),
                system_containers: vec![crate::stats::ContainerStats {
                    name: crate::stats::SYSTEM_CONTAINER_PODS.into(),
                    memory: Some(MemoryStats {
                        time: t,
                        available_bytes: Some(200),
                        usage_bytes: Some(650),
                        working_set_bytes: Some(600),
                        rss_bytes: None,
                        page_faults: None,
                        major_page_faults: None,
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            },
            pods: Vec::new(),
        };
        let o = observe(&summary);
        let at = 100 * SEC;
        let obs = |available, capacity| Observation {
            available,
            capacity,
            time: at,
        };
        assert_eq!(o[&Signal::MemoryAvailable], obs(300, 1000));
        assert_eq!(o[&Signal::AllocatableMemoryAvailable], obs(200, 800));
        assert_eq!(o[&Signal::NodeFsAvailable], obs(40, 100));
        assert_eq!(o[&Signal::NodeFsInodesFree], obs(7, 10));
        assert_eq!(o[&Signal::ImageFsAvailable], obs(5, 50));
        assert_eq!(o[&Signal::PidAvailable], obs(4000, 4096));
        // Missing figures are no observations.
        let empty = observe(&Summary::default());
        assert!(empty.is_empty(), "{empty:?}");
    }

    #[test]
    fn the_memcg_threshold_as_upstream_sets_it() {
        let t = threshold(
            Signal::MemoryAvailable,
            ThresholdValue::Quantity(100 * MI, Written::BinarySI),
            0,
        );
        // 1000Mi capacity (600 available + 400 working set), 50Mi inactive
        // file: usage may reach 1000 - 100 + 50.
        assert_eq!(
            memcg_threshold(&t, 450 * MI as u64, 400 * MI as u64, 600 * MI as u64),
            950 * MI
        );
        let pct = threshold(Signal::MemoryAvailable, ThresholdValue::Percentage(0.1), 0);
        assert_eq!(
            memcg_threshold(&pct, 400 * MI as u64, 400 * MI as u64, 600 * MI as u64),
            1000 * MI - 104_857_601
        );
    }

    #[test]
    fn thresholds_met_with_and_without_minimum_reclaim() {
        let mut t = threshold(
            Signal::MemoryAvailable,
            ThresholdValue::Quantity(100 * MI, Written::BinarySI),
            0,
        );
        t.min_reclaim = Some(ThresholdValue::Percentage(0.05));
        let pct = threshold(Signal::MemoryAvailable, ThresholdValue::Percentage(0.2), 0);
        for (available, enforce, want_quantity, want_pct) in [
            (99 * MI, false, true, true),
            // Equal is not below.
            (100 * MI, false, false, true),
            (120 * MI, false, false, true),
            // Minimum reclaim: 100Mi + 5% of 1000Mi.
            (120 * MI, true, true, true),
            (150 * MI, true, false, true),
            // 20% of 1000Mi as float32 (as upstream) is a little over 200Mi.
            (200 * MI, false, false, true),
            (210 * MI, false, false, false),
        ] {
            let met = thresholds_met(&[t, pct], &memory(available, 0), enforce);
            assert_eq!(met.contains(&t), want_quantity, "{available} {enforce}");
            assert_eq!(met.contains(&pct), want_pct, "{available} {enforce}");
        }
        // No observation: never met.
        assert!(thresholds_met(&[t], &Observations::new(), false).is_empty());
    }

    #[test]
    fn a_hard_threshold_acts_at_once_and_pressure_outlasts_it() {
        let hard = threshold(
            Signal::MemoryAvailable,
            ThresholdValue::Quantity(100 * MI, Written::BinarySI),
            0,
        );
        let period = Duration::from_secs(300);
        let (s, pass) = step(
            &State::default(),
            &[hard],
            memory(50 * MI, SEC),
            SEC,
            period,
        );
        assert_eq!(pass.pressure, vec![Pressure::Memory]);
        assert_eq!(pass.act_on, vec![hard]);
        assert_eq!(pass.reclaim(), Some((hard, Resource::Memory)));
        // The same figure again (no newer stats): pressure, nothing to act on.
        let (s, pass) = step(&s, &[hard], memory(50 * MI, SEC), 2 * SEC, period);
        assert_eq!(pass.pressure, vec![Pressure::Memory]);
        assert!(pass.act_on.is_empty());
        // Recovered: the condition stays for the transition period.
        let (s, pass) = step(&s, &[hard], memory(500 * MI, 3 * SEC), 3 * SEC, period);
        assert_eq!(pass.pressure, vec![Pressure::Memory]);
        assert!(pass.act_on.is_empty());
        let (_, pass) = step(
            &s,
            &[hard],
            memory(500 * MI, 4 * SEC),
            3 * SEC + 300 * SEC,
            period,
        );
        assert!(pass.pressure.is_empty());
    }

    #[test]
    fn a_soft_threshold_waits_for_its_grace_period() {
        let soft = threshold(
            Signal::MemoryAvailable,
            ThresholdValue::Quantity(100 * MI, Written::BinarySI),
            30,
        );
        let period = Duration::from_secs(1);
        let mut s = State::default();
        for (at, crossed, act) in [
            (0, true, false),
            (10, true, false),
            (29, true, false),
            (30, true, true),
            (40, true, true),
            // No longer crossed: the clock starts again.
            (50, false, false),
            (60, true, false),
            (89, true, false),
            (90, true, true),
        ] {
            let available = if crossed { 50 * MI } else { 500 * MI };
            let (next, pass) = step(&s, &[soft], memory(available, at * SEC), at * SEC, period);
            assert_eq!(!pass.act_on.is_empty(), act, "at {at}s");
            // Pressure is raised at once, grace period or not.
            assert_eq!(pass.pressure.is_empty(), !crossed, "at {at}s");
            s = next;
        }
    }

    #[test]
    fn a_met_threshold_holds_until_its_minimum_reclaim_is_done() {
        let mut hard = threshold(
            Signal::MemoryAvailable,
            ThresholdValue::Quantity(100 * MI, Written::BinarySI),
            0,
        );
        hard.min_reclaim = Some(ThresholdValue::Quantity(50 * MI, Written::BinarySI));
        let period = Duration::ZERO;
        let (s, pass) = step(&State::default(), &[hard], memory(90 * MI, 1), 1, period);
        assert_eq!(pass.act_on, vec![hard]);
        // Above the threshold, below threshold + reclaim: still acted on.
        let (s, pass) = step(&s, &[hard], memory(120 * MI, 2), 2, period);
        assert_eq!(pass.act_on, vec![hard]);
        // Past it: done.
        let (_, pass) = step(&s, &[hard], memory(160 * MI, 3), 3, period);
        assert!(pass.act_on.is_empty());
    }

    #[test]
    fn memory_goes_first_then_signals_with_a_resource() {
        let disk = threshold(Signal::NodeFsAvailable, ThresholdValue::Percentage(0.1), 0);
        let containerfs = threshold(
            Signal::ContainerFsAvailable,
            ThresholdValue::Percentage(0.1),
            0,
        );
        let mem = threshold(
            Signal::MemoryAvailable,
            ThresholdValue::Quantity(100 * MI, Written::BinarySI),
            0,
        );
        let low = |signal| {
            (
                signal,
                Observation {
                    available: 1,
                    capacity: 1000 * MI,
                    time: 5,
                },
            )
        };
        let obs = Observations::from([
            low(Signal::NodeFsAvailable),
            low(Signal::ContainerFsAvailable),
            low(Signal::MemoryAvailable),
        ]);
        let (_, pass) = step(
            &State::default(),
            &[containerfs, disk, mem],
            obs,
            5,
            Duration::from_secs(300),
        );
        assert_eq!(pass.act_on, vec![mem, disk, containerfs]);
        assert_eq!(pass.pressure, vec![Pressure::Memory, Pressure::Disk]);
        let only_containerfs = Pass {
            pressure: Vec::new(),
            act_on: vec![containerfs],
        };
        assert_eq!(only_containerfs.reclaim(), None);
    }
}
