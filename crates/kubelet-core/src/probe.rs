//! Container probes, the pure part (upstream's pkg/kubelet/prober/worker.go
//! `doProbe` decisions, pkg/kubelet/prober/results, and pkg/probe's
//! request building): the probe kinds and results, a probe's timing with
//! upstream's defaults, the per-worker state machine (initial values,
//! consecutive-result thresholds, on-hold after a liveness/startup failure,
//! initial delay, the startup gate), and the choice of handler with its
//! target (port by number or name, host, scheme, path, headers).
//!
//! Time is passed in, so everything here is table-testable.

use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Which probe of a container (upstream's `probeType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Liveness,
        ProbeKind::Readiness,
        ProbeKind::Startup,
    ];

    /// "Liveness", "Readiness" or "Startup": events and the `probe_type` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// This kind's probe of `container`, if it has one.
    pub fn spec(self, container: &Container) -> Option<&Probe> {
        match self {
            ProbeKind::Liveness => container.liveness_probe.as_ref(),
            ProbeKind::Readiness => container.readiness_probe.as_ref(),
            ProbeKind::Startup => container.startup_probe.as_ref(),
        }
    }

    /// The result a container has before its first probe (upstream's
    /// `initialValue`): not ready, alive, startup unknown.
    pub fn initial_result(self) -> ProbeResult {
        match self {
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cached probe result (upstream's results.Result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

impl ProbeResult {
    /// The `result` label of `prober_probe_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            ProbeResult::Success => "successful",
            ProbeResult::Failure => "failed",
            ProbeResult::Unknown => "unknown",
        }
    }
}

const DEFAULT_PERIOD_SECONDS: i32 = 10;
const DEFAULT_TIMEOUT_SECONDS: i32 = 1;
const DEFAULT_SUCCESS_THRESHOLD: i32 = 1;
const DEFAULT_FAILURE_THRESHOLD: i32 = 3;

/// A probe's timing and thresholds with upstream's defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeTiming {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

/// A set positive value, else the default (API validation rejects the rest).
fn positive_or(value: Option<i32>, default: i32) -> u32 {
    match value {
        Some(v) if v > 0 => v.unsigned_abs(),
        _ => default.unsigned_abs(),
    }
}

impl ProbeTiming {
    /// Defaults: period 10s, timeout 1s, success 1, failure 3, no initial
    /// delay. Liveness and startup probes always need one success.
    pub fn of(kind: ProbeKind, probe: &Probe) -> Self {
        let success_threshold = match kind {
            ProbeKind::Readiness => positive_or(probe.success_threshold, DEFAULT_SUCCESS_THRESHOLD),
            ProbeKind::Liveness | ProbeKind::Startup => 1,
        };
        ProbeTiming {
            initial_delay: Duration::from_secs(
                probe
                    .initial_delay_seconds
                    .unwrap_or(0)
                    .max(0)
                    .unsigned_abs()
                    .into(),
            ),
            period: Duration::from_secs(
                positive_or(probe.period_seconds, DEFAULT_PERIOD_SECONDS).into(),
            ),
            timeout: Duration::from_secs(
                positive_or(probe.timeout_seconds, DEFAULT_TIMEOUT_SECONDS).into(),
            ),
            success_threshold,
            failure_threshold: positive_or(probe.failure_threshold, DEFAULT_FAILURE_THRESHOLD),
        }
    }
}

/// What a worker sees of its container in the pod status, at one tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerView {
    /// The raw runtime id (no `<runtime>://` prefix).
    pub id: String,
    /// How long it has been running; None when it is not running.
    pub running_for: Option<Duration>,
    /// The container has terminated (not just waiting).
    pub terminated: bool,
    /// The status says the container has started (its startup probe passed).
    pub started: bool,
    /// The container will run again after it ended (its restartPolicy and
    /// rules, else the pod's: `podspec::container_should_restart`).
    pub restartable: bool,
}

/// What a worker must do with the cached results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResultUpdate {
    Set(String, ProbeResult),
    Remove(String),
}

/// The outcome of one tick, before probing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    pub updates: Vec<ResultUpdate>,
    pub next: Next,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run the probe now, then report with [`ProbeState::record`].
    Probe,
    /// Nothing to probe this period.
    Wait,
    /// The worker ends (the pod is terminal, or the container ended for good).
    Stop,
}

/// The state of one probe worker (upstream's worker fields).
///
/// After a kubelet restart a worker may resume a container's result from
/// before it ([`ProbeState::resume`]): the container that is still the same
/// (same id) keeps being ready, or started, instead of starting over from
/// the initial result (upstream does start over, so each restart flips
/// every ready pod unready for a probe period). A kept readiness is
/// provisional: the first probe result decides (a failure makes the
/// container unready at once, whatever the failure threshold), and
/// without one it expires ([`ProbeState::expire`]) back to the initial
/// result. A kept startup success is final, as a startup probe that passed
/// is never run again.
#[derive(Clone, Debug)]
pub struct ProbeState {
    kind: ProbeKind,
    timing: ProbeTiming,
    container_id: Option<String>,
    last_result: Option<ProbeResult>,
    result_run: u32,
    on_hold: bool,
    /// A result kept from before a restart, not yet confirmed by a probe.
    provisional: bool,
}

impl ProbeState {
    pub fn new(kind: ProbeKind, timing: ProbeTiming) -> Self {
        ProbeState {
            kind,
            timing,
            container_id: None,
            last_result: None,
            result_run: 0,
            on_hold: false,
            provisional: false,
        }
    }

    /// A worker resuming `result` of the container `container_id` from
    /// before a restart (the cached results already hold it): a readiness
    /// success is provisional, a startup success final; anything else is
    /// the initial state anyway.
    pub fn resume(
        kind: ProbeKind,
        timing: ProbeTiming,
        container_id: String,
        result: ProbeResult,
    ) -> Self {
        let kept = result == ProbeResult::Success && kind != ProbeKind::Liveness;
        ProbeState {
            container_id: kept.then_some(container_id),
            provisional: kept && kind == ProbeKind::Readiness,
            ..ProbeState::new(kind, timing)
        }
    }

    /// Whether a kept result waits for its first probe.
    pub fn provisional(&self) -> bool {
        self.provisional
    }

    /// The kept result's time is over with no probe to confirm it (the
    /// runtime did not answer): back to the initial result.
    pub fn expire(&mut self) -> Option<ResultUpdate> {
        if !std::mem::take(&mut self.provisional) {
            return None;
        }
        let id = self.container_id.clone()?;
        Some(ResultUpdate::Set(id, self.kind.initial_result()))
    }

    /// The container id whose result this worker owns (removed when it ends).
    pub fn container_id(&self) -> Option<&str> {
        self.container_id.as_deref()
    }

    /// Decide one tick. `pod_terminal` is a Succeeded/Failed phase; `container`
    /// is None while the container has no id yet.
    pub fn tick(&mut self, pod_terminal: bool, container: Option<&ContainerView>) -> Tick {
        let mut updates = Vec::new();
        if pod_terminal {
            return Tick {
                updates,
                next: Next::Stop,
            };
        }
        let Some(c) = container.filter(|c| !c.id.is_empty()) else {
            return Tick {
                updates,
                next: Next::Wait,
            };
        };
        if self.container_id.as_deref() != Some(c.id.as_str()) {
            if let Some(old) = self.container_id.take() {
                updates.push(ResultUpdate::Remove(old));
            }
            // Another container than the kept one: nothing is kept.
            self.provisional = false;
            updates.push(ResultUpdate::Set(c.id.clone(), self.kind.initial_result()));
            self.container_id = Some(c.id.clone());
            // A new container: resume probing, count afresh.
            self.on_hold = false;
            self.last_result = None;
            self.result_run = 0;
        }
        if self.on_hold {
            return Tick {
                updates,
                next: Next::Wait,
            };
        }
        let Some(running_for) = c.running_for else {
            updates.push(ResultUpdate::Set(c.id.clone(), ProbeResult::Failure));
            let next = if !c.terminated || c.restartable {
                Next::Wait
            } else {
                Next::Stop
            };
            return Tick { updates, next };
        };
        // Upstream compares whole seconds.
        if running_for.as_secs() < self.timing.initial_delay.as_secs() {
            return Tick {
                updates,
                next: Next::Wait,
            };
        }
        // Startup probes stop once the container started; the others wait for it.
        let gated = match self.kind {
            ProbeKind::Startup => c.started,
            ProbeKind::Liveness | ProbeKind::Readiness => !c.started,
        };
        Tick {
            updates,
            next: if gated { Next::Wait } else { Next::Probe },
        }
    }

    /// Count a probe's result; returns the update once the threshold of
    /// consecutive equal results is reached. A liveness/startup failure puts
    /// the worker on hold until the container id changes.
    pub fn record(&mut self, result: ProbeResult) -> Option<ResultUpdate> {
        if std::mem::take(&mut self.provisional) {
            // The first probe after a restart decides the kept readiness.
            self.last_result = Some(result);
            self.result_run = 1;
            return match result {
                ProbeResult::Failure | ProbeResult::Success => {
                    Some(ResultUpdate::Set(self.container_id.clone()?, result))
                }
                ProbeResult::Unknown => None,
            };
        }
        if self.last_result == Some(result) {
            self.result_run = self.result_run.saturating_add(1);
        } else {
            self.last_result = Some(result);
            self.result_run = 1;
        }
        let below = match result {
            ProbeResult::Failure => self.result_run < self.timing.failure_threshold,
            ProbeResult::Success => self.result_run < self.timing.success_threshold,
            ProbeResult::Unknown => false,
        };
        if below {
            return None;
        }
        let id = self.container_id.clone()?;
        if result == ProbeResult::Failure && self.kind != ProbeKind::Readiness {
            self.on_hold = true;
            self.result_run = 0;
        }
        Some(ResultUpdate::Set(id, result))
    }
}

/// Why a probe or hook action cannot be built from the spec.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ActionError {
    #[error("container {container:?}: the probe has no handler (exec, httpGet, tcpSocket or grpc)")]
    NoHandler { container: String },
    #[error("container {container:?}: port {port:?} not found in the container's ports")]
    PortNotFound { container: String, port: String },
    #[error("container {container:?}: invalid port number: {port}")]
    InvalidPort { container: String, port: i64 },
    #[error("container {container:?}: unsupported httpGet scheme {scheme:?} (HTTP or HTTPS)")]
    InvalidScheme { container: String, scheme: String },
}

/// A handler with its target resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeAction {
    Exec {
        command: Vec<String>,
    },
    Http(HttpGet),
    Tcp {
        host: String,
        port: u16,
    },
    Grpc {
        host: String,
        port: u16,
        service: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// A resolved httpGet action (upstream's NewRequestForHTTPGetAction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpGet {
    pub scheme: Scheme,
    /// Where to connect: the action's host, else the pod IP.
    pub host: String,
    pub port: u16,
    /// The request target: the path (and query), always starting with "/".
    pub path: String,
    /// Request headers, in order; User-Agent and Accept defaulted as upstream.
    pub headers: Vec<(String, String)>,
}

/// The User-Agent of probes (upstream's "kube-probe/<major>.<minor>").
pub const PROBE_USER_AGENT: &str = "kube-probe/1.37";

impl HttpGet {
    /// The value of the Host header: a "Host" header of the action, else host:port.
    pub fn host_header(&self) -> String {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| join_host_port(&self.host, self.port))
    }

    /// The full URL, for messages.
    pub fn url(&self) -> String {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        format!(
            "{scheme}://{}{}",
            join_host_port(&self.host, self.port),
            self.path
        )
    }
}

/// "host:port", bracketing IPv6 addresses (Go's net.JoinHostPort).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Pick the probe's handler and resolve its target against `container` and `pod_ip`.
pub fn probe_action(
    probe: &Probe,
    container: &Container,
    pod_ip: &str,
) -> Result<ProbeAction, ActionError> {
    if let Some(exec) = &probe.exec {
        return Ok(ProbeAction::Exec {
            command: exec.command.clone().unwrap_or_default(),
        });
    }
    if let Some(http) = &probe.http_get {
        return http_get_action(http, container, pod_ip).map(ProbeAction::Http);
    }
    if let Some(tcp) = &probe.tcp_socket {
        return tcp_action(tcp, container, pod_ip);
    }
    if let Some(grpc) = &probe.grpc {
        return Ok(ProbeAction::Grpc {
            host: pod_ip.to_owned(),
            port: valid_port(container, grpc.port.into())?,
            service: grpc.service.clone().unwrap_or_default(),
        });
    }
    Err(ActionError::NoHandler {
        container: container.name.clone(),
    })
}

/// A tcpSocket action: connect to host (default the pod IP) and port.
pub fn tcp_action(
    tcp: &TCPSocketAction,
    container: &Container,
    pod_ip: &str,
) -> Result<ProbeAction, ActionError> {
    Ok(ProbeAction::Tcp {
        host: non_empty(tcp.host.as_deref()).unwrap_or(pod_ip).to_owned(),
        port: resolve_port(&tcp.port, container)?,
    })
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

/// An httpGet action (probes and lifecycle hooks).
pub fn http_get_action(
    http: &HTTPGetAction,
    container: &Container,
    pod_ip: &str,
) -> Result<HttpGet, ActionError> {
    let scheme = match http
        .scheme
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("" | "http") => Scheme::Http,
        Some("https") => Scheme::Https,
        Some(other) => {
            return Err(ActionError::InvalidScheme {
                container: container.name.clone(),
                scheme: other.to_owned(),
            });
        }
    };
    let path = http.path.as_deref().unwrap_or("");
    let path = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    let mut headers: Vec<(String, String)> = http
        .http_headers
        .iter()
        .flatten()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect();
    let has = |headers: &[(String, String)], name: &str| {
        headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    if !has(&headers, "user-agent") {
        headers.push(("User-Agent".into(), PROBE_USER_AGENT.into()));
    }
    // An Accept header overridden with an empty value removes it.
    let accept_empty = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("accept"))
        .map(|(_, v)| v.is_empty());
    match accept_empty {
        None => headers.push(("Accept".into(), "*/*".into())),
        Some(true) => headers.retain(|(k, _)| !k.eq_ignore_ascii_case("accept")),
        Some(false) => {}
    }
    Ok(HttpGet {
        scheme,
        host: non_empty(http.host.as_deref()).unwrap_or(pod_ip).to_owned(),
        port: resolve_port(&http.port, container)?,
        path,
        headers,
    })
}

/// A port by number, or by name against the container's ports (a name that
/// is a number is taken as one, as upstream's last-ditch effort).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, ActionError> {
    match port {
        IntOrString::Int(n) => valid_port(container, (*n).into()),
        IntOrString::String(name) => {
            let found = container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| i64::from(p.container_port));
            match found.or_else(|| name.parse::<i64>().ok()) {
                Some(n) => valid_port(container, n),
                None => Err(ActionError::PortNotFound {
                    container: container.name.clone(),
                    port: name.clone(),
                }),
            }
        }
    }
}

fn valid_port(container: &Container, port: i64) -> Result<u16, ActionError> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ActionError::InvalidPort {
            container: container.name.clone(),
            port,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, ExecAction, GRPCAction, HTTPHeader};

    const ID: &str = "abc";

    fn running(id: &str, secs: u64, started: bool) -> ContainerView {
        ContainerView {
            id: id.into(),
            running_for: Some(Duration::from_secs(secs)),
            terminated: false,
            started,
            restartable: true,
        }
    }

    fn state(kind: ProbeKind, probe: Probe) -> ProbeState {
        ProbeState::new(kind, ProbeTiming::of(kind, &probe))
    }

    #[test]
    fn a_kept_result_after_a_restart() {
        let timing = ProbeTiming {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 3,
        };
        let view = |id: &str| ContainerView {
            id: id.into(),
            running_for: Some(Duration::from_secs(600)),
            terminated: false,
            started: true,
            restartable: true,
        };
        let set = |r| Some(ResultUpdate::Set("c1".into(), r));
        use ProbeResult::{Failure, Success};
        // Readiness kept: no initial result set; the first probe decides at
        // once, whatever the thresholds.
        for (first, want) in [(Failure, set(Failure)), (Success, set(Success))] {
            let mut s = ProbeState::resume(ProbeKind::Readiness, timing, "c1".into(), Success);
            assert!(s.provisional());
            let tick = s.tick(false, Some(&view("c1")));
            assert_eq!((tick.updates, tick.next), (vec![], Next::Probe));
            assert_eq!(s.record(first), want, "{first:?}");
            assert!(!s.provisional());
            // Then the thresholds count as usual.
            assert_eq!(s.record(Failure), None, "one failure of three");
        }
        // No probe in time: back to the initial result.
        let mut s = ProbeState::resume(ProbeKind::Readiness, timing, "c1".into(), Success);
        assert_eq!(s.expire(), set(Failure));
        assert_eq!(s.expire(), None);
        // Another container than the kept one: the kept id goes, the new
        // one starts from the initial result.
        let mut s = ProbeState::resume(ProbeKind::Readiness, timing, "c1".into(), Success);
        let tick = s.tick(false, Some(&view("c2")));
        assert_eq!(
            tick.updates,
            [
                ResultUpdate::Remove("c1".into()),
                ResultUpdate::Set("c2".into(), Failure)
            ]
        );
        assert!(!s.provisional() && s.expire().is_none());
        // A startup success kept is final; a failure or a liveness result
        // is the initial state anyway.
        let s = ProbeState::resume(ProbeKind::Startup, timing, "c1".into(), Success);
        assert_eq!((s.provisional(), s.container_id()), (false, Some("c1")));
        for (kind, r) in [
            (ProbeKind::Readiness, Failure),
            (ProbeKind::Liveness, Success),
            (ProbeKind::Startup, Failure),
        ] {
            let s = ProbeState::resume(kind, timing, "c1".into(), r);
            assert_eq!(s.container_id(), None, "{kind} {r:?}");
        }
    }

    #[test]
    fn timing_defaults_and_forced_thresholds() {
        let given = Probe {
            period_seconds: Some(5),
            timeout_seconds: Some(0),
            success_threshold: Some(4),
            failure_threshold: Some(2),
            initial_delay_seconds: Some(7),
            ..Default::default()
        };
        let cases = [
            (ProbeKind::Readiness, Probe::default(), (0, 10, 1, 1, 3)),
            (ProbeKind::Liveness, Probe::default(), (0, 10, 1, 1, 3)),
            (ProbeKind::Readiness, given.clone(), (7, 5, 1, 4, 2)),
            (ProbeKind::Liveness, given.clone(), (7, 5, 1, 1, 2)),
            (ProbeKind::Startup, given, (7, 5, 1, 1, 2)),
        ];
        for (kind, probe, (delay, period, timeout, success, failure)) in cases {
            let t = ProbeTiming::of(kind, &probe);
            assert_eq!(
                (
                    t.initial_delay.as_secs(),
                    t.period.as_secs(),
                    t.timeout.as_secs(),
                    t.success_threshold,
                    t.failure_threshold
                ),
                (delay, period, timeout, success, failure),
                "{kind} {probe:?}"
            );
        }
    }

    #[test]
    fn first_tick_sets_the_initial_value() {
        for (kind, initial) in [
            (ProbeKind::Readiness, ProbeResult::Failure),
            (ProbeKind::Liveness, ProbeResult::Success),
            (ProbeKind::Startup, ProbeResult::Unknown),
        ] {
            let mut s = state(kind, Probe::default());
            let started = kind != ProbeKind::Startup;
            let tick = s.tick(false, Some(&running(ID, 0, started)));
            assert_eq!(tick.updates, vec![ResultUpdate::Set(ID.into(), initial)]);
            assert_eq!(tick.next, Next::Probe, "{kind}");
            // The second tick changes nothing.
            assert_eq!(
                s.tick(false, Some(&running(ID, 0, started))).updates,
                vec![]
            );
        }
    }

    #[test]
    fn results_flip_only_at_the_thresholds() {
        use ProbeResult::{Failure as F, Success as S};
        let set = |r| Some(ResultUpdate::Set(ID.into(), r));
        let readiness = Probe {
            success_threshold: Some(2),
            failure_threshold: Some(2),
            ..Default::default()
        };
        /// (kind, probe, results in order, the update after each)
        type Case = (
            ProbeKind,
            Probe,
            Vec<ProbeResult>,
            Vec<Option<ResultUpdate>>,
        );
        let cases: Vec<Case> = vec![
            (
                ProbeKind::Readiness,
                readiness.clone(),
                vec![S, S, S, F, S, F, F, F],
                vec![None, set(S), set(S), None, None, None, set(F), set(F)],
            ),
            (
                ProbeKind::Readiness,
                Probe::default(),
                vec![S, F, F, F, F],
                vec![set(S), None, None, set(F), set(F)],
            ),
            (
                ProbeKind::Liveness,
                Probe::default(),
                vec![F, F, S, F, F, F],
                vec![None, None, set(S), None, None, set(F)],
            ),
        ];
        for (kind, probe, results, want) in cases {
            let mut s = state(kind, probe);
            s.tick(false, Some(&running(ID, 0, true)));
            let got: Vec<_> = results.iter().map(|r| s.record(*r)).collect();
            assert_eq!(got, want, "{kind} {results:?}");
        }
    }

    #[test]
    fn liveness_failure_holds_until_a_new_container() {
        let mut s = state(ProbeKind::Liveness, Probe::default());
        assert_eq!(s.tick(false, Some(&running(ID, 0, true))).next, Next::Probe);
        for _ in 0..2 {
            assert_eq!(s.record(ProbeResult::Failure), None);
        }
        assert_eq!(
            s.record(ProbeResult::Failure),
            Some(ResultUpdate::Set(ID.into(), ProbeResult::Failure))
        );
        let held = s.tick(false, Some(&running(ID, 10, true)));
        assert_eq!((held.updates, held.next), (vec![], Next::Wait));
        let new = s.tick(false, Some(&running("def", 0, true)));
        assert_eq!(
            new.updates,
            vec![
                ResultUpdate::Remove(ID.into()),
                ResultUpdate::Set("def".into(), ProbeResult::Success)
            ]
        );
        assert_eq!(new.next, Next::Probe);
        assert_eq!(s.container_id(), Some("def"));
        // Counting restarted: two failures do not flip it.
        assert_eq!(s.record(ProbeResult::Failure), None);
        assert_eq!(s.record(ProbeResult::Failure), None);
    }

    #[test]
    fn readiness_failure_does_not_hold() {
        let mut s = state(ProbeKind::Readiness, Probe::default());
        s.tick(false, Some(&running(ID, 0, true)));
        for _ in 0..3 {
            s.record(ProbeResult::Failure);
        }
        assert_eq!(s.tick(false, Some(&running(ID, 0, true))).next, Next::Probe);
    }

    #[test]
    fn initial_delay_and_startup_gate() {
        let delayed = Probe {
            initial_delay_seconds: Some(5),
            ..Default::default()
        };
        // (kind, running for, started, want)
        let cases = [
            (ProbeKind::Readiness, 4, true, Next::Wait),
            (ProbeKind::Readiness, 5, true, Next::Probe),
            (ProbeKind::Liveness, 4, true, Next::Wait),
            (ProbeKind::Liveness, 9, false, Next::Wait),
            (ProbeKind::Readiness, 9, false, Next::Wait),
            (ProbeKind::Startup, 9, false, Next::Probe),
            (ProbeKind::Startup, 9, true, Next::Wait),
            (ProbeKind::Startup, 2, false, Next::Wait),
        ];
        for (kind, secs, started, want) in cases {
            let mut s = state(kind, delayed.clone());
            let tick = s.tick(false, Some(&running(ID, secs, started)));
            assert_eq!(tick.next, want, "{kind} running {secs}s started {started}");
            // Readiness keeps its initial value while it waits.
            assert_eq!(
                tick.updates,
                vec![ResultUpdate::Set(ID.into(), kind.initial_result())]
            );
        }
    }

    #[test]
    fn not_running_and_terminal() {
        let mut s = state(ProbeKind::Readiness, Probe::default());
        assert_eq!(s.tick(false, None).next, Next::Wait);
        let mut waiting = running(ID, 0, false);
        waiting.running_for = None;
        let tick = s.tick(false, Some(&waiting));
        assert_eq!(tick.next, Next::Wait);
        assert_eq!(
            tick.updates.last(),
            Some(&ResultUpdate::Set(ID.into(), ProbeResult::Failure))
        );
        let mut ended = waiting.clone();
        ended.terminated = true;
        assert_eq!(s.tick(false, Some(&ended)).next, Next::Wait);
        ended.restartable = false;
        assert_eq!(s.tick(false, Some(&ended)).next, Next::Stop);
        assert_eq!(s.tick(true, Some(&running(ID, 0, true))).next, Next::Stop);
    }

    fn container() -> Container {
        Container {
            name: "app".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn ports_by_number_and_name() {
        let c = container();
        let cases = [
            (IntOrString::Int(80), Ok(80)),
            (IntOrString::String("http".into()), Ok(8080)),
            (IntOrString::String("9090".into()), Ok(9090)),
            (
                IntOrString::String("metrics".into()),
                Err(ActionError::PortNotFound {
                    container: "app".into(),
                    port: "metrics".into(),
                }),
            ),
            (
                IntOrString::Int(0),
                Err(ActionError::InvalidPort {
                    container: "app".into(),
                    port: 0,
                }),
            ),
            (
                IntOrString::Int(70000),
                Err(ActionError::InvalidPort {
                    container: "app".into(),
                    port: 70000,
                }),
            ),
        ];
        for (port, want) in cases {
            assert_eq!(resolve_port(&port, &c), want, "{port:?}");
        }
        let err = resolve_port(&IntOrString::String("metrics".into()), &c).unwrap_err();
        assert!(err.to_string().contains("\"metrics\"") && err.to_string().contains("\"app\""));
    }

    #[test]
    fn http_get_requests() {
        let c = container();
        let header = |n: &str, v: &str| HTTPHeader {
            name: n.into(),
            value: v.into(),
        };
        let plain = HTTPGetAction {
            path: Some("healthz?x=1".into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        };
        let got = http_get_action(&plain, &c, "10.0.0.5").unwrap();
        assert_eq!(got.url(), "http://10.0.0.5:8080/healthz?x=1");
        assert_eq!(got.host_header(), "10.0.0.5:8080");
        assert_eq!(
            got.headers,
            vec![
                ("User-Agent".into(), PROBE_USER_AGENT.into()),
                ("Accept".into(), "*/*".into())
            ]
        );

        let custom = HTTPGetAction {
            host: Some("fd00::1".into()),
            scheme: Some("HTTPS".into()),
            port: IntOrString::Int(443),
            http_headers: Some(vec![
                header("Host", "example.com"),
                header("accept", ""),
                header("user-agent", "mine"),
            ]),
            ..Default::default()
        };
        let got = http_get_action(&custom, &c, "10.0.0.5").unwrap();
        assert_eq!(got.url(), "https://[fd00::1]:443/");
        assert_eq!(got.host_header(), "example.com");
        assert_eq!(
            got.headers,
            vec![
                ("Host".into(), "example.com".into()),
                ("user-agent".into(), "mine".into())
            ]
        );
        let bad = HTTPGetAction {
            scheme: Some("FTP".into()),
            port: IntOrString::Int(21),
            ..Default::default()
        };
        assert!(matches!(
            http_get_action(&bad, &c, "10.0.0.5"),
            Err(ActionError::InvalidScheme { .. })
        ));
    }

    #[test]
    fn handler_choice() {
        let c = container();
        let exec = Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        };
        let tcp = Probe {
            tcp_socket: Some(TCPSocketAction {
                host: None,
                port: IntOrString::String("http".into()),
            }),
            ..Default::default()
        };
        let grpc = Probe {
            grpc: Some(GRPCAction {
                port: 9000,
                service: Some("svc".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cases = [
            (
                exec,
                Ok(ProbeAction::Exec {
                    command: vec!["true".into()],
                }),
            ),
            (
                tcp,
                Ok(ProbeAction::Tcp {
                    host: "10.0.0.5".into(),
                    port: 8080,
                }),
            ),
            (
                grpc,
                Ok(ProbeAction::Grpc {
                    host: "10.0.0.5".into(),
                    port: 9000,
                    service: "svc".into(),
                }),
            ),
            (
                Probe::default(),
                Err(ActionError::NoHandler {
                    container: "app".into(),
                }),
            ),
        ];
        for (probe, want) in cases {
            assert_eq!(probe_action(&probe, &c, "10.0.0.5"), want);
        }
    }
}
