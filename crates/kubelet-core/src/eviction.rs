//! Eviction thresholds as upstream's eviction manager reads them
//! (pkg/kubelet/eviction/helpers.go): the signals, `evictionHard`'s
//! statements (`memory.available: 100Mi`, `nodefs.available: 10%`) and
//! their defaults, and the amount a threshold keeps back from a capacity.

use std::collections::BTreeMap;

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
    Quantity(i64),
    /// 0 to 1 (float32 upstream).
    Percentage(f32),
}

impl ThresholdValue {
    /// GetThresholdQuantity: the amount this value is of `capacity`.
    pub fn amount_of(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::Percentage(p) => (capacity as f64 * f64::from(p)) as i64,
        }
    }
}

/// A hard eviction threshold: `signal` below `value` (every signal's
/// operator is LessThan).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
}

/// parseThresholdStatements: each `signal: value`, in upstream's words
/// when it cannot be; `0%` and `100%` are ignored, as upstream ignores them.
pub fn parse_thresholds(statements: &BTreeMap<String, String>) -> Result<Vec<Threshold>, String> {
    let mut out = Vec::new();
    for (signal, val) in statements {
        let Some(sig) = Signal::parse(signal) else {
            return Err(format!("unsupported eviction signal {signal}"));
        };
        if let Some(pct) = val.strip_suffix('%') {
            if val == "0%" || val == "100%" {
                continue;
            }
            let p: f32 = pct
                .parse::<f32>()
                .map_err(|_| format!("strconv.ParseFloat: parsing {pct:?}: invalid syntax"))?
                / 100.0;
            if p < 0.0 {
                return Err(format!(
                    "eviction percentage threshold {signal} must be >= 0%: {val}"
                ));
            }
            if p > 1.0 {
                return Err(format!(
                    "eviction percentage threshold {signal} must be <= 100%: {val}"
                ));
            }
            out.push(Threshold {
                signal: sig,
                value: ThresholdValue::Percentage(p),
            });
            continue;
        }
        let q = parse_bytes(&Quantity(val.clone())).map_err(|e| e.to_string())?;
        if q <= 0 {
            return Err(format!(
                "eviction threshold {signal} must be positive: {val}"
            ));
        }
        out.push(Threshold {
            signal: sig,
            value: ThresholdValue::Quantity(q),
        });
    }
    Ok(out)
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
            let err = parse_thresholds(&statements).unwrap_err();
            assert!(err.contains(message), "{err:?} lacks {message:?}");
        }
    }
}
