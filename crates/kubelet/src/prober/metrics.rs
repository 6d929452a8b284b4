//! Probe metrics (upstream's pkg/kubelet/prober metrics on /metrics/probes):
//! the `prober_probe_duration_seconds` histogram and the `prober_probe_total`
//! counter, kept per worker and rendered in Prometheus text format.
//!
//! Kept here rather than as `kubelet_core::metrics` families because a
//! stopped worker's series are deleted, as upstream does (the `pod_uid`
//! label would otherwise grow without bound), which that registry does not
//! offer; its bucket bounds and float format are reused.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use kubelet_core::metrics::{DEF_BUCKETS as BUCKETS, format_float};
use kubelet_core::probe::{ProbeKind, ProbeResult};

/// The labels of one worker's series.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ProbeLabels {
    pub kind: ProbeKind,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
}

#[derive(Clone, Debug, Default)]
struct Histogram {
    /// Cumulative counts per bucket of [`BUCKETS`].
    buckets: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Debug, Default)]
struct Series {
    totals: BTreeMap<(ProbeLabels, &'static str), u64>,
    durations: BTreeMap<ProbeLabels, Histogram>,
}

#[derive(Debug, Default)]
pub(crate) struct ProbeMetrics {
    inner: Mutex<Series>,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl ProbeMetrics {
    /// Count one probe run and its duration.
    pub fn observe(&self, labels: &ProbeLabels, result: ProbeResult, took: Duration) {
        let mut series = self.inner.lock();
        *series
            .totals
            .entry((labels.clone(), result.metric_label()))
            .or_default() += 1;
        let h = series.durations.entry(labels.clone()).or_default();
        let secs = took.as_secs_f64();
        for (bucket, le) in h.buckets.iter_mut().zip(BUCKETS) {
            if secs <= le {
                *bucket += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// Drop a stopped worker's series.
    pub fn forget(&self, labels: &ProbeLabels) {
        let mut series = self.inner.lock();
        series.totals.retain(|(l, _), _| l != labels);
        series.durations.remove(labels);
    }

    /// Both families in Prometheus text exposition format, as client_golang
    /// writes them (families by name, labels sorted by name).
    pub fn render(&self) -> String {
        let series = self.inner.lock();
        let mut out = String::new();
        if !series.durations.is_empty() {
            out.push_str("# HELP prober_probe_duration_seconds [ALPHA] Duration in seconds for a probe response.\n");
            out.push_str("# TYPE prober_probe_duration_seconds histogram\n");
            for (l, h) in &series.durations {
                let labels = format!(
                    "container=\"{}\",namespace=\"{}\",pod=\"{}\",probe_type=\"{}\"",
                    escape(&l.container),
                    escape(&l.namespace),
                    escape(&l.pod),
                    l.kind,
                );
                let bounds = BUCKETS.iter().map(|b| format_float(*b));
                let counts = h.buckets.iter().chain([&h.count]);
                for (le, n) in bounds.chain(["+Inf".to_owned()]).zip(counts) {
                    let _ = writeln!(
                        out,
                        "prober_probe_duration_seconds_bucket{{{labels},le=\"{le}\"}} {n}"
                    );
                }
                let sum = format_float(h.sum);
                let _ = writeln!(out, "prober_probe_duration_seconds_sum{{{labels}}} {sum}");
                let _ = writeln!(
                    out,
                    "prober_probe_duration_seconds_count{{{labels}}} {}",
                    h.count
                );
            }
        }
        if !series.totals.is_empty() {
            out.push_str("# HELP prober_probe_total [BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.\n");
            out.push_str("# TYPE prober_probe_total counter\n");
            for ((l, result), n) in &series.totals {
                let _ = writeln!(
                    out,
                    "prober_probe_total{{container=\"{}\",namespace=\"{}\",pod=\"{}\",pod_uid=\"{}\",probe_type=\"{}\",result=\"{result}\"}} {n}",
                    escape(&l.container),
                    escape(&l.namespace),
                    escape(&l.pod),
                    escape(&l.pod_uid),
                    l.kind,
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kind: ProbeKind) -> ProbeLabels {
        ProbeLabels {
            kind,
            container: "app".into(),
            pod: "web".into(),
            namespace: "default".into(),
            pod_uid: "u\"1".into(),
        }
    }

    #[test]
    fn renders_counters_and_histograms() {
        let m = ProbeMetrics::default();
        let live = labels(ProbeKind::Liveness);
        m.observe(&live, ProbeResult::Success, Duration::from_millis(20));
        m.observe(&live, ProbeResult::Success, Duration::from_millis(2));
        m.observe(&live, ProbeResult::Failure, Duration::from_secs(20));
        m.observe(
            &labels(ProbeKind::Readiness),
            ProbeResult::Failure,
            Duration::ZERO,
        );
        let text = m.render();
        for line in [
            "# TYPE prober_probe_total counter",
            "prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"u\\\"1\",probe_type=\"Liveness\",result=\"successful\"} 2",
            "prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"u\\\"1\",probe_type=\"Liveness\",result=\"failed\"} 1",
            "prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"u\\\"1\",probe_type=\"Readiness\",result=\"failed\"} 1",
            "# TYPE prober_probe_duration_seconds histogram",
            "prober_probe_duration_seconds_bucket{container=\"app\",namespace=\"default\",pod=\"web\",probe_type=\"Liveness\",le=\"0.005\"} 1",
            "prober_probe_duration_seconds_bucket{container=\"app\",namespace=\"default\",pod=\"web\",probe_type=\"Liveness\",le=\"0.025\"} 2",
            "prober_probe_duration_seconds_bucket{container=\"app\",namespace=\"default\",pod=\"web\",probe_type=\"Liveness\",le=\"10\"} 2",
            "prober_probe_duration_seconds_bucket{container=\"app\",namespace=\"default\",pod=\"web\",probe_type=\"Liveness\",le=\"+Inf\"} 3",
            "prober_probe_duration_seconds_count{container=\"app\",namespace=\"default\",pod=\"web\",probe_type=\"Liveness\"} 3",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            text.contains("prober_probe_duration_seconds_sum{container=\"app\",namespace=\"default\",pod=\"web\",probe_type=\"Liveness\"} 20.022\n"),
            "{text}"
        );
        // Families in name order, as client_golang writes them.
        assert!(text.starts_with("# HELP prober_probe_duration_seconds [ALPHA] "));
        m.forget(&live);
        let text = m.render();
        assert!(!text.contains("Liveness"), "{text}");
        assert!(text.contains("Readiness"));
        m.forget(&labels(ProbeKind::Readiness));
        assert_eq!(m.render(), "");
    }
}
