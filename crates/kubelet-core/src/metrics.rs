//! The kubelet's Prometheus metrics (upstream's pkg/kubelet/metrics on
//! component-base's registry): counters, gauges and histograms with labels,
//! rendered in the text exposition format 0.0.4 the way client_golang
//! writes it (families sorted by name, label pairs sorted by name, series
//! sorted by label values, `le` last, floats as Go's `%g`), and
//! [`KubeletMetrics`], the families the kubelet records under upstream's
//! names, help texts, labels and buckets.
//!
//! rkubelet's own families (not in upstream) keep the `kubelet_` prefix:
//! `kubelet_sync_loop_iteration_duration_seconds`,
//! `kubelet_housekeeping_duration_seconds`, `kubelet_pod_worker_queue_length`,
//! `kubelet_runtime_ready`, `kubelet_network_ready`,
//! `kubelet_server_open_connections` and `kubelet_server_accept_errors_total`.
//!
//! Why not `prometheus-client`: it writes OpenMetrics, not the 0.0.4 text
//! upstream serves, and the difference reaches scrapers. Registering
//! upstream's `kubelet_runtime_operations_total` with prometheus-client
//! 0.24.1 and rendering it (2026-12-01) gave samples named
//! `kubelet_runtime_operations_total_total` (it appends `_total`; registering
//! `kubelet_runtime_operations` instead types a family whose name no 0.0.4
//! parser such as client_golang's expfmt matches to its `_total` samples), a
//! `.` appended to every HELP text, a histogram's `_sum` and `_count` before
//! its buckets, and a closing `# EOF`. Keeping upstream's bytes takes this
//! module's renderer; the registry under it is a map per family.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

/// client_golang's `DefBuckets`.
pub const DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `podStartupDurationBuckets` of pkg/kubelet/metrics.
const POD_STARTUP_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// `kubelet_pod_status_sync_duration_seconds` buckets.
const POD_STATUS_SYNC_BUCKETS: [f64; 11] = [
    0.010, 0.050, 0.100, 0.500, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0,
];

/// client_golang's `ExponentialBuckets(start, factor, count)`: each bound
/// the previous one times `factor` (computed by repeated multiplication, so
/// the rendered bounds match upstream's digit for digit).
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut next = start;
    for _ in 0..count {
        out.push(next);
        next *= factor;
    }
    out
}

/// `count` buckets from `min` to `max`, each a constant factor above the
/// last (Go's ExponentialBucketsRange: min times the factor to the i-th
/// power, so that each bound is Go's to the last bit).
pub fn exponential_buckets_range(min: f64, max: f64, count: usize) -> Vec<f64> {
    let factor = (max / min).powf(1.0 / (count - 1) as f64);
    (0..count).map(|i| min * factor.powf(i as f64)).collect()
}

/// Name, help and label names of a family, and the order its labels render in.
#[derive(Debug)]
struct Desc {
    name: &'static str,
    help: &'static str,
    /// Label names sorted (the order they render in and key the series).
    sorted_labels: Vec<&'static str>,
    /// `order[i]`: the position in the declared label list of `sorted_labels[i]`.
    order: Vec<usize>,
}

impl Desc {
    fn new(name: &'static str, help: &'static str, labels: &[&'static str]) -> Self {
        let mut order: Vec<usize> = (0..labels.len()).collect();
        order.sort_by_key(|i| labels[*i]);
        Desc {
            name,
            help,
            sorted_labels: order.iter().map(|i| labels[*i]).collect(),
            order,
        }
    }

    /// The series key of label values given in declaration order; None (and
    /// a debug assertion) when their number is wrong.
    fn key(&self, values: &[&str]) -> Option<Vec<String>> {
        debug_assert_eq!(
            values.len(),
            self.order.len(),
            "metric {}: wrong number of label values",
            self.name
        );
        (values.len() == self.order.len())
            .then(|| self.order.iter().map(|i| values[*i].to_owned()).collect())
    }

    fn header(&self, out: &mut String, kind: &str) {
        let _ = writeln!(out, "# HELP {} {}", self.name, escape_help(self.help));
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
    }

    /// `name{a="x",b="y"}` (with an extra trailing pair for `le`).
    fn series_name(
        &self,
        out: &mut String,
        suffix: &str,
        key: &[String],
        extra: Option<(&str, &str)>,
    ) {
        out.push_str(self.name);
        out.push_str(suffix);
        let pairs = self
            .sorted_labels
            .iter()
            .copied()
            .zip(key.iter().map(String::as_str))
            .chain(extra);
        let mut first = true;
        for (name, value) in pairs {
            out.push(if first { '{' } else { ',' });
            first = false;
            let _ = write!(out, "{name}=\"{}\"", escape_label_value(value));
        }
        if !first {
            out.push('}');
        }
    }
}

/// A monotonically increasing value per label set.
#[derive(Debug)]
pub struct Counter {
    desc: Desc,
    series: Mutex<BTreeMap<Vec<String>, f64>>,
}

/// A value that goes up and down, per label set.
#[derive(Debug)]
pub struct Gauge {
    desc: Desc,
    series: Mutex<BTreeMap<Vec<String>, f64>>,
}

/// Unlabeled families show from the start (at zero); labeled ones once a series is touched.
fn initial_series<T: Default>(labels: &[&str]) -> BTreeMap<Vec<String>, T> {
    let mut series = BTreeMap::new();
    if labels.is_empty() {
        series.insert(Vec::new(), T::default());
    }
    series
}

impl Counter {
    pub fn new(name: &'static str, help: &'static str, labels: &[&'static str]) -> Self {
        Counter {
            desc: Desc::new(name, help, labels),
            series: Mutex::new(initial_series(labels)),
        }
    }

    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1.0);
    }

    /// Add `v` (negative values are ignored: counters only go up).
    pub fn add(&self, labels: &[&str], v: f64) {
        if let Some(key) = self.desc.key(labels)
            && v >= 0.0
        {
            *self.series.lock().entry(key).or_default() += v;
        }
    }

    /// The current value (0 for a series never touched).
    pub fn get(&self, labels: &[&str]) -> f64 {
        get(&self.desc, &self.series, labels)
    }

    /// Append this family's text (nothing for a labeled family with no series).
    pub fn render(&self, out: &mut String) {
        render_values(&self.desc, &self.series, "counter", out);
    }
}

impl Gauge {
    pub fn new(name: &'static str, help: &'static str, labels: &[&'static str]) -> Self {
        Gauge {
            desc: Desc::new(name, help, labels),
            series: Mutex::new(initial_series(labels)),
        }
    }

    pub fn set(&self, labels: &[&str], v: f64) {
        if let Some(key) = self.desc.key(labels) {
            self.series.lock().insert(key, v);
        }
    }

    pub fn add(&self, labels: &[&str], v: f64) {
        if let Some(key) = self.desc.key(labels) {
            *self.series.lock().entry(key).or_default() += v;
        }
    }

    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1.0);
    }

    /// Replace every series (a collector's view: a series not given is gone).
    pub fn set_all<'a>(&self, series: impl IntoIterator<Item = (Vec<&'a str>, f64)>) {
        let fresh = series
            .into_iter()
            .filter_map(|(labels, v)| Some((self.desc.key(&labels)?, v)))
            .collect();
        *self.series.lock() = fresh;
    }

    pub fn dec(&self, labels: &[&str]) {
        self.add(labels, -1.0);
    }

    /// The current value (0 for a series never set).
    pub fn get(&self, labels: &[&str]) -> f64 {
        get(&self.desc, &self.series, labels)
    }

    /// Append this family's text (nothing for a labeled family with no series).
    pub fn render(&self, out: &mut String) {
        render_values(&self.desc, &self.series, "gauge", out);
    }
}

/// The seconds left until an instant, computed when rendered (upstream's
/// GaugeFunc over a certificate's NotAfter, truncated; negative once past):
/// absent until [`Expiry::register`], then `+Inf` while there is no instant.
#[derive(Debug)]
pub struct Expiry {
    desc: Desc,
    /// None: not registered; Some(None): no instant; Some(Some(t)): unix
    /// seconds.
    until: Mutex<Option<Option<i64>>>,
}

impl Expiry {
    pub fn new(name: &'static str, help: &'static str) -> Self {
        Expiry {
            desc: Desc::new(name, help, &[]),
            until: Mutex::new(None),
        }
    }

    /// Show the family (at `+Inf` until [`Expiry::set`]).
    pub fn register(&self) {
        self.until.lock().get_or_insert(None);
    }

    /// The instant counted down to, in unix seconds (None: `+Inf`).
    pub fn set(&self, until: Option<i64>) {
        *self.until.lock() = Some(until);
    }

    /// The value rendered at `now` (unix seconds); None while unregistered.
    pub fn value_at(&self, now: i64) -> Option<f64> {
        let until = (*self.until.lock())?;
        Some(until.map_or(f64::INFINITY, |t| (t - now) as f64))
    }

    pub fn render(&self, out: &mut String) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if let Some(v) = self.value_at(now) {
            self.desc.header(out, "gauge");
            self.desc.series_name(out, "", &[], None);
            let _ = writeln!(out, " {}", format_float(v));
        }
    }
}

fn get(desc: &Desc, series: &Mutex<BTreeMap<Vec<String>, f64>>, labels: &[&str]) -> f64 {
    desc.key(labels)
        .and_then(|key| series.lock().get(&key).copied())
        .unwrap_or(0.0)
}

fn render_values(
    desc: &Desc,
    series: &Mutex<BTreeMap<Vec<String>, f64>>,
    kind: &str,
    out: &mut String,
) {
    let series = series.lock();
    if series.is_empty() {
        return;
    }
    desc.header(out, kind);
    for (key, value) in series.iter() {
        desc.series_name(out, "", key, None);
        let _ = writeln!(out, " {}", format_float(*value));
    }
}

/// Observations counted into buckets, per label set.
#[derive(Debug)]
pub struct Histogram {
    desc: Desc,
    /// Upper bounds, increasing; `+Inf` is implicit.
    buckets: Vec<f64>,
    series: Mutex<BTreeMap<Vec<String>, HistogramSeries>>,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct HistogramSeries {
    /// Observations per bucket (not cumulative); one more for `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(
        name: &'static str,
        help: &'static str,
        labels: &[&'static str],
        buckets: &[f64],
    ) -> Self {
        let buckets: Vec<f64> = buckets.iter().copied().filter(|b| b.is_finite()).collect();
        debug_assert!(
            buckets.windows(2).all(|w| w[0] < w[1]),
            "histogram {name}: buckets must increase"
        );
        let mut series = initial_series::<HistogramSeries>(labels);
        for s in series.values_mut() {
            s.counts = vec![0; buckets.len() + 1];
        }
        Histogram {
            desc: Desc::new(name, help, labels),
            buckets,
            series: Mutex::new(series),
        }
    }

    pub fn observe(&self, labels: &[&str], v: f64) {
        let Some(key) = self.desc.key(labels) else {
            return;
        };
        let bucket = self.buckets.partition_point(|b| *b < v);
        let mut series = self.series.lock();
        let s = series.entry(key).or_insert_with(|| HistogramSeries {
            counts: vec![0; self.buckets.len() + 1],
            ..Default::default()
        });
        s.counts[bucket] += 1;
        s.sum += v;
        s.count += 1;
    }

    /// Observe a duration in seconds.
    pub fn observe_duration(&self, labels: &[&str], d: Duration) {
        self.observe(labels, d.as_secs_f64());
    }

    /// Observations so far of a series (0 for one never touched).
    pub fn count(&self, labels: &[&str]) -> u64 {
        self.desc
            .key(labels)
            .and_then(|key| self.series.lock().get(&key).map(|s| s.count))
            .unwrap_or(0)
    }

    /// Append this family's text (nothing for a labeled family with no series).
    pub fn render(&self, out: &mut String) {
        let series = self.series.lock();
        if series.is_empty() {
            return;
        }
        self.desc.header(out, "histogram");
        for (key, s) in series.iter() {
            let mut cumulative = 0;
            let bounds = self.buckets.iter().map(|b| format_float(*b));
            for (le, n) in bounds.chain(["+Inf".to_owned()]).zip(&s.counts) {
                cumulative += n;
                self.desc
                    .series_name(out, "_bucket", key, Some(("le", le.as_str())));
                let _ = writeln!(out, " {cumulative}");
            }
            self.desc.series_name(out, "_sum", key, None);
            let _ = writeln!(out, " {}", format_float(s.sum));
            self.desc.series_name(out, "_count", key, None);
            let _ = writeln!(out, " {}", s.count);
        }
    }
}

/// A float as client_golang writes it: Go's `strconv.FormatFloat(v, 'g', -1, 64)`
/// (shortest digits; exponent form below 1e-4 and from 1e6 up), `+Inf`, `-Inf`, `NaN`.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        format!("{v}")
    }
}

pub(crate) fn escape_help(s: &str) -> String {
    s.replace('\\', r"\\").replace('\n', r"\n")
}

fn escape_label_value(s: &str) -> String {
    s.replace('\\', r"\\")
        .replace('\n', r"\n")
        .replace('"', "\\\"")
}

/// One family of any kind, for rendering.
#[derive(Clone, Copy)]
enum Family<'a> {
    Counter(&'a Counter),
    Gauge(&'a Gauge),
    Histogram(&'a Histogram),
    Expiry(&'a Expiry),
}

impl Family<'_> {
    fn name(&self) -> &'static str {
        match self {
            Family::Counter(c) => c.desc.name,
            Family::Gauge(g) => g.desc.name,
            Family::Histogram(h) => h.desc.name,
            Family::Expiry(e) => e.desc.name,
        }
    }

    fn render(&self, out: &mut String) {
        match self {
            Family::Counter(c) => c.render(out),
            Family::Gauge(g) => g.render(out),
            Family::Histogram(h) => h.render(out),
            Family::Expiry(e) => e.render(out),
        }
    }
}

/// Declares [`Families`] once: each family's field with its doc, the
/// constructor that names it, and its place in [`Families::all`].
macro_rules! families {
    ($( $(#[$doc:meta])* $field:ident: $kind:ident($($arg:expr),+ $(,)?), )*) => {
        /// The kubelet's metric families; reach them through [`KubeletMetrics`].
        /// Field docs give the name, labels and what upstream records there.
        #[derive(Debug)]
        pub struct Families {
            $( $(#[$doc])* pub $field: $kind, )*
        }

        impl Families {
            fn new() -> Self {
                Families { $( $field: $kind::new($($arg),+), )* }
            }

            fn all(&self) -> Vec<Family<'_>> {
                vec![$( Family::$kind(&self.$field), )*]
            }
        }
    };
}

families! {
    /// `kubelet_certificate_manager_client_ttl_seconds`: seconds until the
    /// client certificate expires; shown only while rotating it.
    client_certificate_ttl: Expiry(
        "kubelet_certificate_manager_client_ttl_seconds",
        "[ALPHA] Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF.",
    ),
    /// `kubelet_certificate_manager_client_expiration_renew_errors`: failed
    /// client certificate rotations.
    client_certificate_renew_errors: Counter(
        "kubelet_certificate_manager_client_expiration_renew_errors",
        "[ALPHA] Counter of certificate renewal errors.",
        &[],
    ),
    /// `kubelet_certificate_manager_server_ttl_seconds`: seconds until the
    /// serving certificate expires; shown only with serverTLSBootstrap.
    server_certificate_ttl: Expiry(
        "kubelet_certificate_manager_server_ttl_seconds",
        "[ALPHA] Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF.",
    ),
    /// `kubelet_server_expiration_renew_errors`: failed serving
    /// certificate rotations.
    server_certificate_renew_errors: Counter(
        "kubelet_server_expiration_renew_errors",
        "[ALPHA] Counter of certificate renewal errors.",
        &[],
    ),
    /// `kubelet_certificate_manager_server_rotation_seconds`: the life the
    /// serving certificate had when it was replaced.
    server_certificate_rotation: Histogram(
        "kubelet_certificate_manager_server_rotation_seconds",
        "[ALPHA] Histogram of the number of seconds the previous certificate lived before being rotated.",
        &[],
        &[60.0, 3600.0, 14400.0, 86400.0, 604800.0, 2592000.0, 7776000.0, 15552000.0, 31104000.0, 124416000.0],
    ),
    /// `kubernetes_feature_enabled{name,stage}`: 1 for each feature gate on,
    /// 0 for each off (component-base's, set at start).
    feature_enabled: Gauge(
        "kubernetes_feature_enabled",
        "[BETA] This metric records the data about the stage and enablement of a k8s feature.",
        &["name", "stage"],
    ),
    /// `kubelet_node_name{node}`: always 1.
    node_name: Gauge(
        "kubelet_node_name",
        "[ALPHA] The node's name. The count is always 1.",
        &["node"],
    ),
    /// `kubelet_pod_start_duration_seconds`: first seen to running.
    pod_start_duration: Histogram(
        "kubelet_pod_start_duration_seconds",
        "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
        &[],
        &POD_STARTUP_BUCKETS,
    ),
    /// `kubelet_pod_worker_duration_seconds{operation_type}`: one SyncPod
    /// (operation_type is upstream's SyncPodType: `create`, `update`, `sync`, `kill`).
    pod_worker_duration: Histogram(
        "kubelet_pod_worker_duration_seconds",
        "[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
        &["operation_type"],
        &DEF_BUCKETS,
    ),
    /// `kubelet_pod_status_sync_duration_seconds`: status change to API update.
    pod_status_sync_duration: Histogram(
        "kubelet_pod_status_sync_duration_seconds",
        "[ALPHA] Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
        &[],
        &POD_STATUS_SYNC_BUCKETS,
    ),
    /// `kubelet_pleg_relist_duration_seconds`.
    pleg_relist_duration: Histogram(
        "kubelet_pleg_relist_duration_seconds",
        "[ALPHA] Duration in seconds for relisting pods in PLEG.",
        &[],
        &DEF_BUCKETS,
    ),
    /// `kubelet_pleg_relist_interval_seconds`: between relist starts.
    pleg_relist_interval: Histogram(
        "kubelet_pleg_relist_interval_seconds",
        "[ALPHA] Interval in seconds between relisting in PLEG.",
        &[],
        &DEF_BUCKETS,
    ),
    /// `kubelet_pleg_last_seen_seconds`: unix time of the last relist.
    pleg_last_seen: Gauge(
        "kubelet_pleg_last_seen_seconds",
        "[ALPHA] Timestamp in seconds when PLEG was last seen active.",
        &[],
    ),
    /// `kubelet_pleg_pod_relist_duration_seconds`: one pod's relist, on
    /// demand (after a sync that acted, or a container event).
    pleg_pod_relist_duration: Histogram(
        "kubelet_pleg_pod_relist_duration_seconds",
        "[ALPHA] Duration in seconds for relisting a single pod in PLEG.",
        &[],
        &DEF_BUCKETS,
    ),
    /// `kubelet_evented_pleg_connection_error_count`: CRI event streams
    /// that failed or ended.
    evented_pleg_connection_errors: Counter(
        "kubelet_evented_pleg_connection_error_count",
        "[ALPHA] The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
        &[],
    ),
    /// `kubelet_evented_pleg_connection_success_count`: CRI event streams
    /// opened.
    evented_pleg_connections: Counter(
        "kubelet_evented_pleg_connection_success_count",
        "[ALPHA] The number of times a streaming client was obtained to receive CRI Events.",
        &[],
    ),
    /// `kubelet_evented_pleg_connection_latency_seconds`: from a CRI
    /// event's creation to its receipt.
    evented_pleg_connection_latency: Histogram(
        "kubelet_evented_pleg_connection_latency_seconds",
        "[ALPHA] The latency of streaming connection with the CRI runtime, measured in seconds.",
        &[],
        &DEF_BUCKETS,
    ),
    /// `rkubelet_evented_pleg_drift_total` (rkubelet's own): container
    /// deaths the relist found that the CRI event stream had still not
    /// reported by the next relist.
    evented_pleg_drift: Counter(
        "rkubelet_evented_pleg_drift_total",
        "[ALPHA] Container deaths the PLEG relist found that the CRI event stream had not reported a relist period later (evented PLEG's drift).",
        &[],
    ),
    /// `kubelet_podcertificate_states{signer_name,state}`: podCertificate
    /// projections by signer and credential state.
    podcertificate_states: Gauge(
        "kubelet_podcertificate_states",
        "[ALPHA] Gauge vector reporting the number of pod certificate projected volume sources, faceted by signer_name and state.",
        &["signer_name", "state"],
    ),
    /// `kubelet_running_pods`: pods with a running sandbox.
    running_pods: Gauge(
        "kubelet_running_pods",
        "[ALPHA] Number of pods that have a running pod sandbox",
        &[],
    ),
    /// `kubelet_running_containers{container_state}`: containers by CRI state
    /// (`created`, `running`, `exited`, `unknown`).
    running_containers: Gauge(
        "kubelet_running_containers",
        "[ALPHA] Number of containers currently running",
        &["container_state"],
    ),
    /// `kubelet_runtime_operations_total{operation_type}`.
    runtime_operations: Counter(
        "kubelet_runtime_operations_total",
        "[ALPHA] Cumulative number of runtime operations by operation type.",
        &["operation_type"],
    ),
    /// `kubelet_runtime_operations_duration_seconds{operation_type}`.
    runtime_operations_duration: Histogram(
        "kubelet_runtime_operations_duration_seconds",
        "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
        &["operation_type"],
        &exponential_buckets(0.005, 2.5, 14),
    ),
    /// `kubelet_runtime_operations_errors_total{operation_type}`.
    runtime_operations_errors: Counter(
        "kubelet_runtime_operations_errors_total",
        "[ALPHA] Cumulative number of runtime operation errors by operation type.",
        &["operation_type"],
    ),
    /// `kubelet_run_podsandbox_duration_seconds{runtime_handler}`.
    run_podsandbox_duration: Histogram(
        "kubelet_run_podsandbox_duration_seconds",
        "[ALPHA] Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
        &["runtime_handler"],
        &DEF_BUCKETS,
    ),
    /// `kubelet_run_podsandbox_errors_total{runtime_handler}`.
    run_podsandbox_errors: Counter(
        "kubelet_run_podsandbox_errors_total",
        "[ALPHA] Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
        &["runtime_handler"],
    ),
    /// `kubelet_started_pods_total`: RunPodSandbox calls.
    started_pods: Counter(
        "kubelet_started_pods_total",
        "[ALPHA] Cumulative number of pods started",
        &[],
    ),
    /// `kubelet_started_pods_errors_total`.
    started_pods_errors: Counter(
        "kubelet_started_pods_errors_total",
        "[ALPHA] Cumulative number of errors when starting pods",
        &[],
    ),
    /// `kubelet_started_user_namespaced_pods_total`: sandboxes created for
    /// pods with `hostUsers: false`.
    started_user_namespaced_pods: Counter(
        "kubelet_started_user_namespaced_pods_total",
        "[ALPHA] Cumulative number of pods with user namespaces started. This metric will only be collected on Linux.",
        &[],
    ),
    /// `kubelet_started_user_namespaced_pods_errors_total`: those whose
    /// first SyncPod failed somewhere.
    started_user_namespaced_pods_errors: Counter(
        "kubelet_started_user_namespaced_pods_errors_total",
        "[ALPHA] Cumulative number of errors when starting pods with user namespaces. This metric will only be collected on Linux.",
        &[],
    ),
    /// `kubelet_device_plugin_registration_total{resource_name}`.
    device_plugin_registrations: Counter(
        "kubelet_device_plugin_registration_total",
        "[ALPHA] Cumulative number of device plugin registrations. Broken down by resource name.",
        &["resource_name"],
    ),
    /// `kubelet_device_plugin_alloc_duration_seconds{resource_name}`: one
    /// Allocate call to a device plugin.
    device_plugin_alloc_duration: Histogram(
        "kubelet_device_plugin_alloc_duration_seconds",
        "[ALPHA] Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
        &["resource_name"],
        &DEF_BUCKETS,
    ),
    /// `kubelet_cpu_manager_pinning_requests_total`: containers the static
    /// CPU manager was asked exclusive CPUs for.
    cpu_manager_pinning_requests: Counter(
        "kubelet_cpu_manager_pinning_requests_total",
        "[ALPHA] The number of cpu core allocations which required pinning.",
        &[],
    ),
    /// `kubelet_cpu_manager_pinning_errors_total`: those it could not give.
    cpu_manager_pinning_errors: Counter(
        "kubelet_cpu_manager_pinning_errors_total",
        "[ALPHA] The number of cpu core allocations which required pinning failed.",
        &[],
    ),
    /// `kubelet_memory_manager_pinning_requests_total`: containers the
    /// Static memory manager was asked NUMA-pinned memory for.
    memory_manager_pinning_requests: Counter(
        "kubelet_memory_manager_pinning_requests_total",
        "[ALPHA] The number of memory pages allocations which required pinning.",
        &[],
    ),
    /// `kubelet_memory_manager_pinning_errors_total`: those it could not give.
    memory_manager_pinning_errors: Counter(
        "kubelet_memory_manager_pinning_errors_total",
        "[ALPHA] The number of memory pages allocations which required pinning that failed.",
        &[],
    ),
    /// `kubelet_cpu_manager_shared_pool_size_millicores`.
    cpu_manager_shared_pool_size: Gauge(
        "kubelet_cpu_manager_shared_pool_size_millicores",
        "[ALPHA] The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
        &[],
    ),
    /// `kubelet_cpu_manager_exclusive_cpu_allocation_count`.
    cpu_manager_exclusive_cpus: Gauge(
        "kubelet_cpu_manager_exclusive_cpu_allocation_count",
        "[ALPHA] The total number of CPUs exclusively allocated to containers running on this node",
        &[],
    ),
    /// `kubelet_container_aligned_compute_resources_count{scope,boundary}`:
    /// containers given whole physical cores (full-pcpus-only).
    container_aligned_compute_resources: Counter(
        "kubelet_container_aligned_compute_resources_count",
        "[ALPHA] Cumulative number of aligned compute resources allocated to containers by alignment type.",
        &["scope", "boundary"],
    ),
    /// `kubelet_container_aligned_compute_resources_failure_count{scope,boundary}`.
    container_aligned_compute_resources_failures: Counter(
        "kubelet_container_aligned_compute_resources_failure_count",
        "[ALPHA] Cumulative number of failures to allocate aligned compute resources to containers by alignment type.",
        &["scope", "boundary"],
    ),
    /// `kubelet_cpu_manager_allocation_per_numa{numa_node}`.
    cpu_manager_allocation_per_numa: Gauge(
        "kubelet_cpu_manager_allocation_per_numa",
        "[ALPHA] Number of CPUs allocated per NUMA node",
        &["numa_node"],
    ),
    /// `kubelet_topology_manager_admission_requests_total`: pods the
    /// topology manager's admission saw (every pod, as upstream's).
    topology_manager_admission_requests: Counter(
        "kubelet_topology_manager_admission_requests_total",
        "[ALPHA] The number of admission requests where resources have to be aligned.",
        &[],
    ),
    /// `kubelet_topology_manager_admission_errors_total`: those refused.
    topology_manager_admission_errors: Counter(
        "kubelet_topology_manager_admission_errors_total",
        "[ALPHA] The number of admission request failures where resources could not be aligned.",
        &[],
    ),
    /// `kubelet_topology_manager_admission_duration_ms`.
    topology_manager_admission_duration: Histogram(
        "kubelet_topology_manager_admission_duration_ms",
        "[ALPHA] Duration in milliseconds to serve a pod admission request.",
        &[],
        &exponential_buckets(0.05, 2.0, 15),
    ),
    /// `kubelet_pod_resources_endpoint_requests_total{server_api_version}`.
    pod_resources_requests_total: Counter(
        "kubelet_pod_resources_endpoint_requests_total",
        "[ALPHA] Cumulative number of requests to the PodResource endpoint. Broken down by server api version.",
        &["server_api_version"],
    ),
    /// `kubelet_pod_resources_endpoint_requests_list{server_api_version}`.
    pod_resources_requests_list: Counter(
        "kubelet_pod_resources_endpoint_requests_list",
        "[ALPHA] Number of requests to the PodResource List endpoint. Broken down by server api version.",
        &["server_api_version"],
    ),
    /// `kubelet_pod_resources_endpoint_requests_get_allocatable{server_api_version}`.
    pod_resources_requests_get_allocatable: Counter(
        "kubelet_pod_resources_endpoint_requests_get_allocatable",
        "[ALPHA] Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version.",
        &["server_api_version"],
    ),
    /// `kubelet_pod_resources_endpoint_errors_list{server_api_version}`.
    pod_resources_errors_list: Counter(
        "kubelet_pod_resources_endpoint_errors_list",
        "[ALPHA] Number of requests to the PodResource List endpoint which returned error. Broken down by server api version.",
        &["server_api_version"],
    ),
    /// `kubelet_pod_resources_endpoint_errors_get_allocatable{server_api_version}`.
    pod_resources_errors_get_allocatable: Counter(
        "kubelet_pod_resources_endpoint_errors_get_allocatable",
        "[ALPHA] Number of requests to the PodResource GetAllocatableResources endpoint which returned error. Broken down by server api version.",
        &["server_api_version"],
    ),
    /// `kubelet_pod_resources_endpoint_requests_get{server_api_version}`.
    pod_resources_requests_get: Counter(
        "kubelet_pod_resources_endpoint_requests_get",
        "[ALPHA] Number of requests to the PodResource Get endpoint. Broken down by server api version.",
        &["server_api_version"],
    ),
    /// `kubelet_pod_resources_endpoint_errors_get{server_api_version}`.
    pod_resources_errors_get: Counter(
        "kubelet_pod_resources_endpoint_errors_get",
        "[ALPHA] Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version.",
        &["server_api_version"],
    ),
    /// `kubelet_started_containers_total{container_type}`
    /// (`container`, `init_container`, `ephemeral_container`).
    started_containers: Counter(
        "kubelet_started_containers_total",
        "[ALPHA] Cumulative number of containers started",
        &["container_type"],
    ),
    /// `kubelet_started_containers_errors_total{container_type,code}`
    /// (code: the CRI error's gRPC code name).
    started_containers_errors: Counter(
        "kubelet_started_containers_errors_total",
        "[ALPHA] Cumulative number of errors when starting containers",
        &["container_type", "code"],
    ),
    /// `rest_client_requests_total{code,method,host}`: API server requests.
    rest_client_requests: Counter(
        "rest_client_requests_total",
        "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
        &["code", "method", "host"],
    ),
    /// rkubelet: `kubelet_sync_loop_iteration_duration_seconds`.
    sync_loop_iteration_duration: Histogram(
        "kubelet_sync_loop_iteration_duration_seconds",
        "Duration in seconds of one iteration of the kubelet sync loop (rkubelet).",
        &[],
        &DEF_BUCKETS,
    ),
    /// rkubelet: `kubelet_housekeeping_duration_seconds`.
    housekeeping_duration: Histogram(
        "kubelet_housekeeping_duration_seconds",
        "Duration in seconds of one pass of pod housekeeping (rkubelet).",
        &[],
        &DEF_BUCKETS,
    ),
    /// rkubelet: `kubelet_pod_worker_queue_length`: pods waiting for their worker.
    pod_worker_queue_length: Gauge(
        "kubelet_pod_worker_queue_length",
        "Number of pods waiting for their pod worker (rkubelet).",
        &[],
    ),
    /// rkubelet: `kubelet_runtime_ready`: 1 while the runtime is ready.
    runtime_ready: Gauge(
        "kubelet_runtime_ready",
        "Whether the container runtime is ready: 1 or 0 (rkubelet).",
        &[],
    ),
    /// rkubelet: `kubelet_network_ready`: 1 while the runtime reports the network ready.
    network_ready: Gauge(
        "kubelet_network_ready",
        "Whether the container runtime reports the pod network ready: 1 or 0 (rkubelet).",
        &[],
    ),
    /// rkubelet: `kubelet_server_open_connections{server}`: connections a
    /// listener (`kubelet-api`, `healthz`, `readonly`) is serving, at most
    /// its connection cap.
    server_open_connections: Gauge(
        "kubelet_server_open_connections",
        "Number of connections a kubelet server is serving, at most its connection cap (rkubelet).",
        &["server"],
    ),
    /// rkubelet: `kubelet_server_accept_errors_total{server}`: failed accepts
    /// (each followed by a back-off).
    server_accept_errors: Counter(
        "kubelet_server_accept_errors_total",
        "Cumulative number of failed accepts of a kubelet server (rkubelet).",
        &["server"],
    ),
    /// `kubelet_imagemanager_ondisk_pullintents`: image pulls on record as
    /// begun and not ended.
    pull_intents: Gauge(
        "kubelet_imagemanager_ondisk_pullintents",
        "[ALPHA] Number of ImagePullIntents stored on disk.",
        &[],
    ),
    /// `kubelet_imagemanager_ondisk_pulledrecords`: images on record as
    /// pulled, with the credentials that may use them.
    pulled_records: Gauge(
        "kubelet_imagemanager_ondisk_pulledrecords",
        "[ALPHA] Number of ImagePulledRecords stored on disk.",
        &[],
    ),
    /// `kubelet_imagemanager_image_mustpull_checks_total{result}`: checks
    /// whether a pod may use an image on the node without pulling
    /// (`credentialPolicyAllowed`, `credentialRecordFound`,
    /// `mustAuthenticate`, `error`).
    mustpull_checks: Counter(
        "kubelet_imagemanager_image_mustpull_checks_total",
        "[ALPHA] Counter for how many times kubelet checked whether credentials need to be re-verified to access an image",
        &["result"],
    ),
    /// `kubelet_evictions{eviction_signal}`: pods the eviction manager
    /// evicted, by the signal it acted on.
    evictions: Counter(
        "kubelet_evictions",
        "[ALPHA] Cumulative number of pod evictions by eviction signal",
        &["eviction_signal"],
    ),
    /// `kubelet_credential_provider_plugin_errors_total{plugin_name}`:
    /// plugin runs that failed or timed out.
    credential_provider_plugin_errors: Counter(
        "kubelet_credential_provider_plugin_errors_total",
        "[ALPHA] Number of errors from credential provider plugin",
        &["plugin_name"],
    ),
    /// `dra_operations_duration_seconds{operation_name,is_error}`: the
    /// preparation of all of a pod's claims when it starts
    /// (PrepareResources), and their unpreparation when it stops
    /// (UnprepareResources).
    dra_operations_duration: Histogram(
        "dra_operations_duration_seconds",
        "[ALPHA] Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops. Identified by the name of the operation (PrepareResources or UnprepareResources) and separated by the success of the operation. The number of failed operations is provided through the histogram's overall count.",
        &["operation_name", "is_error"],
        &exponential_buckets_range(0.1, 40.0, 15),
    ),
    /// `dra_grpc_operations_duration_seconds{driver_name,method_name,grpc_status_code}`:
    /// each call to a DRA driver.
    dra_grpc_operations_duration: Histogram(
        "dra_grpc_operations_duration_seconds",
        "[ALPHA] Duration in seconds of the DRA gRPC operations",
        &["driver_name", "method_name", "grpc_status_code"],
        &exponential_buckets_range(0.1, 40.0, 15),
    ),
    /// `dra_resource_claims_in_use{driver_name}`: prepared claims per
    /// driver, and in all under `<any>`.
    dra_resource_claims_in_use: Gauge(
        "dra_resource_claims_in_use",
        "[ALPHA] The number of ResourceClaims that are currently in use on the node, by driver name (driver_name label value) and across all drivers (special value <any> for driver_name). Note that the sum of all by-driver counts is not the total number of in-use ResourceClaims because the same ResourceClaim might use devices from different drivers. Instead, use the count for the <any> driver_name.",
        &["driver_name"],
    ),
    /// `kubelet_credential_provider_plugin_duration{plugin_name}`: each
    /// plugin run, in seconds.
    credential_provider_plugin_duration: Histogram(
        "kubelet_credential_provider_plugin_duration",
        "[ALPHA] Duration of execution in seconds for credential provider plugin",
        &["plugin_name"],
        &DEF_BUCKETS,
    ),
    /// `kubelet_credential_provider_config_info{hash}`: 1 for the config
    /// in force.
    credential_provider_config_info: Gauge(
        "kubelet_credential_provider_config_info",
        "[ALPHA] Information about the last applied credential provider configuration with hash as label",
        &["hash"],
    ),
    /// `kubelet_graceful_shutdown_start_time_seconds`: when the last
    /// graceful node shutdown began.
    graceful_shutdown_start_time: Gauge(
        "kubelet_graceful_shutdown_start_time_seconds",
        "[ALPHA] Last graceful shutdown start time since unix epoch in seconds",
        &[],
    ),
    /// `kubelet_graceful_shutdown_end_time_seconds`: when it ended.
    graceful_shutdown_end_time: Gauge(
        "kubelet_graceful_shutdown_end_time_seconds",
        "[ALPHA] Last graceful shutdown end time since unix epoch in seconds",
        &[],
    ),
}

/// The kubelet's metrics registry: a cheap `Clone` handle (all clones record
/// into the same families), rendered for `/metrics` by [`KubeletMetrics::render`].
#[derive(Clone, Debug)]
pub struct KubeletMetrics(Arc<Families>);

impl Deref for KubeletMetrics {
    type Target = Families;

    fn deref(&self) -> &Families {
        &self.0
    }
}

impl KubeletMetrics {
    /// All families, with `kubelet_node_name{node=node_name}` set to 1.
    pub fn new(node_name: &str) -> Self {
        let f = Families::new();
        f.node_name.set(&[node_name], 1.0);
        KubeletMetrics(Arc::new(f))
    }

    /// The Prometheus text (format 0.0.4) of every family, sorted by name.
    pub fn render(&self) -> String {
        let mut families = self.0.all();
        families.sort_by_key(|f| f.name());
        let mut out = String::new();
        for family in families {
            family.render(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_shows_once_registered_and_counts_down() {
        let e = Expiry::new("t_ttl_seconds", "[ALPHA] T.");
        let mut out = String::new();
        e.render(&mut out);
        assert_eq!(
            out, "",
            "not registered: absent, as upstream before rotation starts"
        );
        assert_eq!(e.value_at(100), None);
        e.register();
        assert_eq!(e.value_at(100), Some(f64::INFINITY));
        e.render(&mut out);
        assert_eq!(
            out,
            "# HELP t_ttl_seconds [ALPHA] T.\n# TYPE t_ttl_seconds gauge\nt_ttl_seconds +Inf\n"
        );
        e.set(Some(160));
        assert_eq!(e.value_at(100), Some(60.0));
        assert_eq!(e.value_at(200), Some(-40.0));
        e.register();
        assert_eq!(
            e.value_at(100),
            Some(60.0),
            "registering again keeps the instant"
        );
        e.set(None);
        assert_eq!(e.value_at(100), Some(f64::INFINITY));
    }

    #[test]
    fn renders_counter_gauge_histogram_exactly() {
        let c = Counter::new(
            "t_requests_total",
            "Requests.\nBy \\ code.",
            &["method", "code"],
        );
        c.inc(&["GET", "200"]);
        c.add(&["GET", "200"], 2.0);
        c.add(&["GET", "200"], -5.0);
        c.inc(&["PO\"ST\n", "a\\b"]);
        let g = Gauge::new("t_temperature", "A gauge.", &[]);
        g.set(&[], 1.5);
        g.dec(&[]);
        let h = Histogram::new("t_latency_seconds", "A histogram.", &["op"], &[0.1, 1.0]);
        h.observe(&["x"], 0.05);
        h.observe(&["x"], 0.1);
        h.observe(&["x"], 0.5);
        h.observe(&["x"], 7.0);
        let mut out = String::new();
        c.render(&mut out);
        g.render(&mut out);
        h.render(&mut out);
        let want = r#"# HELP t_requests_total Requests.\nBy \\ code.
# TYPE t_requests_total counter
t_requests_total{code="200",method="GET"} 3
t_requests_total{code="a\\b",method="PO\"ST\n"} 1
# HELP t_temperature A gauge.
# TYPE t_temperature gauge
t_temperature 0.5
# HELP t_latency_seconds A histogram.
# TYPE t_latency_seconds histogram
t_latency_seconds_bucket{op="x",le="0.1"} 2
t_latency_seconds_bucket{op="x",le="1"} 3
t_latency_seconds_bucket{op="x",le="+Inf"} 4
t_latency_seconds_sum{op="x"} 7.65
t_latency_seconds_count{op="x"} 4
"#;
        assert_eq!(out, want);
        assert_eq!(c.get(&["GET", "200"]), 3.0);
        assert_eq!(h.count(&["x"]), 4);
        assert_eq!(h.count(&["y"]), 0);
    }

    #[test]
    fn untouched_labeled_families_are_omitted() {
        let c = Counter::new("t_total", "T.", &["a"]);
        let h = Histogram::new("t_seconds", "T.", &[], &[1.0]);
        let mut out = String::new();
        c.render(&mut out);
        h.render(&mut out);
        assert_eq!(
            out,
            "# HELP t_seconds T.\n# TYPE t_seconds histogram\n\
             t_seconds_bucket{le=\"1\"} 0\nt_seconds_bucket{le=\"+Inf\"} 0\n\
             t_seconds_sum 0\nt_seconds_count 0\n"
        );
    }

    #[test]
    fn floats_like_go() {
        let cases = [
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (0.005, "0.005"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (1e6, "1e+06"),
            (45056000.0, "4.5056e+07"),
            (1.7e9, "1.7e+09"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
            (7.65, "7.65"),
            (17_391_616.0, "1.7391616e+07"),
            (40.384910049, "40.384910049"),
            (1_750_607_841.829_759_1, "1.7506078418297591e+09"),
            (-2.5, "-2.5"),
        ];
        for (v, want) in cases {
            assert_eq!(format_float(v), want, "{v}");
        }
        // The upstream resource collector test's start time:
        // 1624396278302091597ns - 30s.
        let start = 1_624_396_248_302_091_597_u64 as f64 / 1e9;
        assert_eq!(format_float(start), "1.6243962483020916e+09");
    }

    #[test]
    fn upstream_runtime_buckets() {
        let got: Vec<String> = exponential_buckets(0.005, 2.5, 14)
            .into_iter()
            .map(format_float)
            .collect();
        assert_eq!(
            got,
            [
                "0.005",
                "0.0125",
                "0.03125",
                "0.078125",
                "0.1953125",
                "0.48828125",
                "1.220703125",
                "3.0517578125",
                "7.62939453125",
                "19.073486328125",
                "47.6837158203125",
                "119.20928955078125",
                "298.0232238769531",
                "745.0580596923828",
            ]
        );
    }

    #[test]
    fn kubelet_families() {
        let m = KubeletMetrics::new("node-1");
        let handle = m.clone();
        handle
            .runtime_operations_duration
            .observe_duration(&["list_podsandbox"], Duration::from_millis(3));
        handle.runtime_operations.inc(&["list_podsandbox"]);
        handle
            .rest_client_requests
            .inc(&["200", "GET", "10.0.0.1:6443"]);
        let text = m.render();
        for want in [
            "# HELP kubelet_node_name [ALPHA] The node's name. The count is always 1.\n",
            "kubelet_node_name{node=\"node-1\"} 1\n",
            "kubelet_runtime_operations_total{operation_type=\"list_podsandbox\"} 1\n",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_podsandbox\",le=\"0.005\"} 1\n",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_podsandbox\",le=\"745.0580596923828\"} 1\n",
            "rest_client_requests_total{code=\"200\",host=\"10.0.0.1:6443\",method=\"GET\"} 1\n",
            "# TYPE kubelet_running_pods gauge\nkubelet_running_pods 0\n",
            "kubelet_pod_start_duration_seconds_bucket{le=\"3600\"} 0\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        // Families come sorted by name; labeled families without series are left out.
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap_or_default())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert!(!names.contains(&"kubelet_running_containers"));
        assert!(names.contains(&"kubelet_sync_loop_iteration_duration_seconds"));
    }
}
