//! The eviction manager's pure half (upstream's pkg/kubelet/eviction):
//! here the signals and thresholds as the configuration gives them
//! (`evictionHard`'s statements such as `memory.available: 100Mi` and
//! `nodefs.available: 10%`, their defaults, `evictionSoft` with its grace
//! periods, `evictionMinimumReclaim`) and the amount a threshold keeps back
//! from a capacity; in [`decide`] what one pass of the manager concludes
//! from the node's figures; in [`rank`] which pod goes first and what it
//! is told; in [`local`] the pod's own local storage limits.

pub mod decide;
pub mod local;
pub mod rank;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::parse_bytes;

/// An eviction signal (evictionapi.Signal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    MemoryAvailable,
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    ContainerFsAvailable,
    ContainerFsInodesFree,
    PidAvailable,
}

impl Signal {
    const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|sig| sig.as_str() == s)
    }

    /// The resource eviction reclaims for this signal (signalToResource);
    /// None for the containerfs signals, which need a split image file
    /// system rkubelet does not report.
    pub fn resource(self) -> Option<Resource> {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Some(Resource::Memory),
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => Some(Resource::EphemeralStorage),
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => Some(Resource::Inodes),
            Signal::PidAvailable => Some(Resource::Pids),
            Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree => None,
        }
    }

    /// The node condition a met threshold of this signal raises
    /// (signalToNodeCondition).
    pub fn pressure(self) -> Pressure {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Pressure::Memory,
            Signal::PidAvailable => Pressure::Pid,
            _ => Pressure::Disk,
        }
    }

    /// Whether this signal counts bytes (else inodes or processes): how its
    /// amounts print.
    pub fn counts_bytes(self) -> bool {
        matches!(
            self.resource(),
            Some(Resource::Memory | Resource::EphemeralStorage)
        )
    }
}

/// What eviction reclaims (upstream's v1.ResourceName for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Memory,
    EphemeralStorage,
    Inodes,
    Pids,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

/// A node pressure condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pressure {
    Memory,
    Disk,
    Pid,
}

impl Pressure {
    /// The node condition's type.
    pub fn condition_type(self) -> &'static str {
        match self {
            Pressure::Memory => "MemoryPressure",
            Pressure::Disk => "DiskPressure",
            Pressure::Pid => "PIDPressure",
        }
    }
}

/// Upstream's DefaultEvictionHard (Linux), used when `evictionHard` is not
/// given (or merged into it with mergeDefaultEvictionSettings).
pub const DEFAULT_EVICTION_HARD: [(&str, &str); 5] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// The default `evictionHard` as a map.
pub fn default_eviction_hard() -> BTreeMap<String, String> {
    DEFAULT_EVICTION_HARD
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A threshold's value: an amount, or a share of the capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThresholdValue {
    /// An amount, and the format it was written in (upstream prints a
    /// threshold back as written: `500M` stays `500M`).
    Quantity(i64, Written),
    /// 0 to 1 (float32 upstream).
    Percentage(f32),
}

/// A quantity's format as the API's Quantity keeps it: binary suffixes
/// (`Ki`, `Mi`, ...) are BinarySI, the rest DecimalSI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    BinarySI,
    DecimalSI,
}

impl Written {
    pub fn of(text: &str) -> Written {
        if text.ends_with('i') {
            Written::BinarySI
        } else {
            Written::DecimalSI
        }
    }

    /// `v` as a Quantity in this format prints (canonical).
    pub fn format(self, v: i64) -> String {
        match self {
            Written::BinarySI => crate::quantity::format_binary_si(v),
            Written::DecimalSI => crate::quantity::format_decimal_si(v),
        }
    }
}

impl ThresholdValue {
    /// GetThresholdQuantity: the amount this value is of `capacity`.
    pub fn amount_of(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity(q, _) => q,
            ThresholdValue::Percentage(p) => (capacity as f64 * f64::from(p)) as i64,
        }
    }
}

/// An eviction threshold: `signal` below `value` (every signal's operator
/// is LessThan). A hard one acts at once; a soft one once it has held for
/// its grace period. Once met, it stays met until the signal is back
/// `min_reclaim` above it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
    /// Zero for a hard threshold.
    pub grace_period: Duration,
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// isHardEvictionThreshold.
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

/// An eviction statement that cannot be read, in upstream's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    #[error("unsupported eviction signal {0}")]
    Signal(String),
    #[error("strconv.ParseFloat: parsing {0:?}: invalid syntax")]
    Percentage(String),
    #[error("eviction percentage threshold {signal} must be >= 0%: {value}")]
    BelowZero { signal: String, value: String },
    #[error("eviction percentage threshold {signal} must be <= 100%: {value}")]
    AboveHundred { signal: String, value: String },
    #[error("eviction threshold {signal} must be positive: {value}")]
    NotPositive { signal: String, value: String },
    #[error(transparent)]
    Quantity(#[from] crate::quantity::QuantityError),
    #[error("invalid eviction grace period specified: {0}, must be a positive value")]
    NegativeGracePeriod(String),
    #[error(transparent)]
    GracePeriod(#[from] crate::duration::DurationError),
    #[error("grace period must be specified for the soft eviction threshold {0}")]
    NoGracePeriod(&'static str),
    #[error("eviction percentage minimum reclaim {signal} must be positive: {value}")]
    ReclaimNotPositive { signal: String, value: String },
    #[error("negative eviction minimum reclaim specified for {0}")]
    NegativeReclaim(String),
}

/// parseThresholdStatements: each `signal: value`, in upstream's words
/// when it cannot be; `0%` and `100%` are ignored, as upstream ignores them.
pub fn parse_thresholds(
    statements: &BTreeMap<String, String>,
) -> Result<Vec<Threshold>, ThresholdError> {
    let mut out = Vec::new();
    for (signal, val) in statements {
        let sig = parse_signal(signal)?;
        if let Some(pct) = val.strip_suffix('%') {
            if val == "0%" || val == "100%" {
                continue;
            }
            let p = parse_percentage(pct)?;
            let stated = || (signal.clone(), val.clone());
            if p < 0.0 {
                let (signal, value) = stated();
                return Err(ThresholdError::BelowZero { signal, value });
            }
            if p > 1.0 {
                let (signal, value) = stated();
                return Err(ThresholdError::AboveHundred { signal, value });
            }
            out.push(Threshold {
                signal: sig,
                value: ThresholdValue::Percentage(p),
                grace_period: Duration::ZERO,
                min_reclaim: None,
            });
            continue;
        }
        let q = parse_bytes(&Quantity(val.clone()))?;
        if q <= 0 {
            return Err(ThresholdError::NotPositive {
                signal: signal.clone(),
                value: val.clone(),
            });
        }
        out.push(Threshold {
            signal: sig,
            value: ThresholdValue::Quantity(q, Written::of(val)),
            grace_period: Duration::ZERO,
            min_reclaim: None,
        });
    }
    Ok(out)
}

/// The eviction settings of a KubeletConfiguration, as text.
#[derive(Clone, Copy, Debug)]
pub struct Statements<'a> {
    pub hard: &'a BTreeMap<String, String>,
    pub soft: &'a BTreeMap<String, String>,
    pub soft_grace_period: &'a BTreeMap<String, String>,
    pub minimum_reclaim: &'a BTreeMap<String, String>,
    /// Whether enforceNodeAllocatable names `pods`: then each hard
    /// memory.available threshold has an allocatableMemory.available copy.
    pub enforce_pods: bool,
}

/// ParseThresholdConfig: the hard thresholds, then the soft ones with
/// their grace periods, each with its minimum reclaim; upstream's words
/// when a statement cannot be read; then, when `pods` is enforced, an
/// allocatableMemory.available copy of each hard memory.available threshold
/// (addAllocatableThresholds).
pub fn parse_threshold_config(s: Statements<'_>) -> Result<Vec<Threshold>, ThresholdError> {
    let mut out = parse_thresholds(s.hard)?;
    let soft = parse_thresholds(s.soft)?;
    let mut grace = BTreeMap::new();
    for (signal, val) in s.soft_grace_period {
        let sig = parse_signal(signal)?;
        if val.starts_with('-') && crate::duration::parse_go_duration(&val[1..]).is_ok() {
            return Err(ThresholdError::NegativeGracePeriod(val.clone()));
        }
        let period = crate::duration::parse_go_duration(val)?;
        grace.insert(sig, period);
    }
    for mut t in soft {
        let Some(period) = grace.get(&t.signal) else {
            return Err(ThresholdError::NoGracePeriod(t.signal.as_str()));
        };
        t.grace_period = *period;
        out.push(t);
    }
    for (signal, val) in s.minimum_reclaim {
        let sig = parse_signal(signal)?;
        let value = parse_minimum_reclaim(signal, val)?;
        for t in out.iter_mut().filter(|t| t.signal == sig) {
            t.min_reclaim = Some(value);
        }
    }
    if s.enforce_pods {
        let copies: Vec<Threshold> = out
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..*t
            })
            .collect();
        out.extend(copies);
    }
    Ok(out)
}

fn parse_signal(signal: &str) -> Result<Signal, ThresholdError> {
    Signal::parse(signal).ok_or_else(|| ThresholdError::Signal(signal.to_owned()))
}

/// parsePercentage: the number before `%`, as a share (float32).
fn parse_percentage(pct: &str) -> Result<f32, ThresholdError> {
    pct.parse::<f32>()
        .map(|p| p / 100.0)
        .map_err(|_| ThresholdError::Percentage(pct.to_owned()))
}

/// parseMinimumReclaims' value: a positive percentage or a quantity not
/// below zero.
fn parse_minimum_reclaim(signal: &str, val: &str) -> Result<ThresholdValue, ThresholdError> {
    if let Some(pct) = val.strip_suffix('%') {
        let p = parse_percentage(pct)?;
        if p <= 0.0 {
            return Err(ThresholdError::ReclaimNotPositive {
                signal: signal.to_owned(),
                value: val.to_owned(),
            });
        }
        return Ok(ThresholdValue::Percentage(p));
    }
    let q = parse_bytes(&Quantity(val.to_owned()))?;
    if q < 0 {
        return Err(ThresholdError::NegativeReclaim(signal.to_owned()));
    }
    Ok(ThresholdValue::Quantity(q, Written::of(val)))
}

/// hardEvictionReservation: what the hard thresholds keep back, as node
/// resources (memory from memory.available, ephemeral-storage from
/// nodefs.available).
pub fn hard_eviction_reservation(
    thresholds: &[Threshold],
    memory_capacity: i64,
    storage_capacity: i64,
) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for t in thresholds {
        match t.signal {
            Signal::MemoryAvailable => {
                out.insert("memory".to_owned(), t.value.amount_of(memory_capacity));
            }
            Signal::NodeFsAvailable => {
                out.insert(
                    "ephemeral-storage".to_owned(),
                    t.value.amount_of(storage_capacity),
                );
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn enforcing_pods_adds_an_allocatable_copy_of_each_hard_memory_threshold() {
        let hard = map(&[("memory.available", "100Mi"), ("nodefs.available", "10%")]);
        let soft = map(&[("memory.available", "300Mi")]);
        let grace = map(&[("memory.available", "30s")]);
        let none = BTreeMap::new();
        let enforce = |keys: &[&str]| -> Vec<Threshold> {
            parse_threshold_config(Statements {
                hard: &hard,
                soft: &soft,
                soft_grace_period: &grace,
                minimum_reclaim: &none,
                enforce_pods: keys.contains(&"pods"),
            })
            .unwrap()
        };
        let with_pods = enforce(&["pods"]);
        let copies: Vec<&Threshold> = with_pods
            .iter()
            .filter(|t| t.signal == Signal::AllocatableMemoryAvailable)
            .collect();
        assert_eq!(copies.len(), 1, "{with_pods:?}");
        assert!(copies[0].is_hard());
        assert_eq!(copies[0].value.amount_of(0), 100 << 20);
        assert_eq!(with_pods.len(), 4);
        assert_eq!(enforce(&["system-reserved"]).len(), 3);
    }

    #[test]
    fn threshold_statements_as_upstream_parses_them() {
        let t = parse_thresholds(&default_eviction_hard()).unwrap();
        assert_eq!(t.len(), 5);
        let reserved = hard_eviction_reservation(&t, 4 << 30, 1000);
        assert_eq!(reserved["memory"], 100 << 20);
        assert_eq!(reserved["ephemeral-storage"], 100);
        // 0% and 100% are ignored.
        assert!(
            parse_thresholds(&map(&[("nodefs.available", "0%")]))
                .unwrap()
                .is_empty()
        );
        let pct = parse_thresholds(&map(&[("memory.available", "12.5%")])).unwrap();
        assert_eq!(hard_eviction_reservation(&pct, 800, 0)["memory"], 100);
        for (statements, message) in [
            (
                map(&[("memory.free", "1Gi")]),
                "unsupported eviction signal memory.free",
            ),
            (
                map(&[("memory.available", "0")]),
                "eviction threshold memory.available must be positive: 0",
            ),
            (
                map(&[("nodefs.available", "120%")]),
                "eviction percentage threshold nodefs.available must be <= 100%: 120%",
            ),
            (map(&[("nodefs.available", "-5%")]), "must be >= 0%: -5%"),
            (map(&[("memory.available", "lots")]), "lots"),
        ] {
            let err = parse_thresholds(&statements).unwrap_err().to_string();
            assert!(err.contains(message), "{err:?} lacks {message:?}");
        }
    }
}
