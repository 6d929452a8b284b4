//! Graceful node shutdown's decisions (upstream's pkg/kubelet/nodeshutdown):
//! which grace periods apply, how pods are grouped by priority and in what
//! order they stop, the words of the statuses, events and refusals, the
//! logind override file and the state file, as upstream writes them. The
//! manager that acts on them is `kubelet::nodeshutdown`.

use std::time::{Duration, SystemTime};

use crate::config::{KubeletConfiguration, ShutdownGracePeriodByPodPriority};

/// Admission's reason while the node shuts down.
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// Admission's message while the node shuts down.
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// The reason of a pod stopped for the shutdown.
pub const POD_REASON: &str = "Terminated";
/// The message of a pod stopped for the shutdown (and of its
/// DisruptionTarget condition).
pub const POD_MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// Why the node is not Ready while it shuts down (upstream's
/// ShutdownStatus error, in the Ready condition's message).
pub const NODE_NOT_READY: &str = "node is shutting down";
/// The node event's reason, for a shutdown and for its cancellation.
pub const EVENT_REASON: &str = "NodeShutdown";
pub const EVENT_DETECTED: &str = "Shutdown manager detected shutdown event";
pub const EVENT_CANCELLED: &str = "Shutdown manager detected shutdown cancellation";
/// The state file, under the root directory.
pub const STATE_FILE: &str = "graceful_node_shutdown_state";
/// Where the override of logind's InhibitDelayMaxSec goes.
pub const LOGIND_CONF_DIR: &str = "/etc/systemd/logind.conf.d";
pub const LOGIND_CONF_FILE: &str = "99-kubelet.conf";

/// The priority of pods with none when no default class exists.
const DEFAULT_PRIORITY: i32 = 0;
/// system-cluster-critical's and system-node-critical's floor.
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// The grace periods by priority, lowest priority first: the
/// configuration's shutdownGracePeriodByPodPriority, or, when it is empty
/// (or its gate is off), shutdownGracePeriod split into the critical
/// pods' part and the rest. Empty: graceful shutdown is off.
pub fn periods(cfg: &KubeletConfiguration) -> Vec<ShutdownGracePeriodByPodPriority> {
    let mut periods = if cfg.feature_enabled("GracefulNodeShutdownBasedOnPodPriority")
        && !cfg.shutdown_grace_period_by_pod_priority.is_empty()
    {
        cfg.shutdown_grace_period_by_pod_priority.clone()
    } else {
        migrate(
            cfg.shutdown_grace_period,
            cfg.shutdown_grace_period_critical_pods,
        )
    };
    periods.sort_by_key(|p| p.priority);
    periods
}

/// Upstream's migrateConfig: the two durations as two priority groups.
fn migrate(period: Duration, critical: Duration) -> Vec<ShutdownGracePeriodByPodPriority> {
    let Some(rest) = period.checked_sub(critical).filter(|_| !period.is_zero()) else {
        return Vec::new();
    };
    let seconds = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    vec![
        ShutdownGracePeriodByPodPriority {
            priority: DEFAULT_PRIORITY,
            shutdown_grace_period_seconds: seconds(rest),
        },
        ShutdownGracePeriodByPodPriority {
            priority: SYSTEM_CRITICAL_PRIORITY,
            shutdown_grace_period_seconds: seconds(period - rest),
        },
    ]
}

/// The whole delay asked of logind: every group's grace, added.
pub fn period_requested(periods: &[ShutdownGracePeriodByPodPriority]) -> Duration {
    let seconds: i64 = periods
        .iter()
        .map(|p| p.shutdown_grace_period_seconds)
        .sum();
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

/// A priority group and its pods, stopped together.
#[derive(Clone, Debug, PartialEq)]
pub struct Group<P> {
    pub period: ShutdownGracePeriodByPodPriority,
    pub pods: Vec<P>,
}

/// Upstream's groupByPriority: each pod goes to the group with the highest
/// priority at or below its own; pods below every group go to the lowest,
/// above every group to the highest. `periods` is sorted (see
/// [`periods`]); the groups keep its order, empty ones included.
pub fn group_by_priority<P>(
    periods: &[ShutdownGracePeriodByPodPriority],
    pods: impl IntoIterator<Item = P>,
    priority: impl Fn(&P) -> i32,
) -> Vec<Group<P>> {
    let mut groups: Vec<Group<P>> = periods
        .iter()
        .map(|&period| Group {
            period,
            pods: Vec::new(),
        })
        .collect();
    if groups.is_empty() {
        return groups;
    }
    for pod in pods {
        let p = priority(&pod);
        // The first group at or above p, as Go's sort.Search.
        let at = groups.partition_point(|g| g.period.priority < p);
        // Past the highest: the highest; between two: the lower one.
        let above = at == groups.len() || (at > 0 && groups[at].period.priority > p);
        let index = if above { at - 1 } else { at };
        groups[index].pods.push(pod);
    }
    groups
}

/// A pod's grace in its group: the group's, or the pod's own
/// terminationGracePeriodSeconds when that is no longer.
pub fn pod_grace(group_seconds: i64, own: Option<i64>) -> i64 {
    match own {
        Some(own) if own <= group_seconds => own,
        _ => group_seconds,
    }
}

/// The Warning event of a pod the runtime did not stop in time.
pub const EXCEEDED_GRACE_REASON: &str = "ExceededGracePeriod";
pub const EXCEEDED_GRACE_MESSAGE: &str =
    "Container runtime did not kill the pod within specified grace period.";

/// How long a pod told to stop with `grace` seconds may take before
/// [`EXCEEDED_GRACE_REASON`] (upstream's killPodNow: its grace and half
/// again, 10 s at least).
pub fn kill_timeout(grace: i64) -> Duration {
    let secs = grace.saturating_add(grace / 2).max(10);
    Duration::from_secs(u64::try_from(secs).unwrap_or(10))
}

/// The logind drop-in that raises InhibitDelayMaxSec to `delay`, as
/// upstream writes it.
pub fn logind_override(delay: Duration) -> String {
    format!(
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={:.0}\n",
        delay.as_secs_f64()
    )
}

/// When the last shutdown began and ended (the state file, and the
/// `kubelet_graceful_shutdown_*_time_seconds` gauges).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct State {
    pub start: Option<SystemTime>,
    pub end: Option<SystemTime>,
}

/// Go's zero time.Time, as its JSON spells it.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateJson {
    start_time: String,
    end_time: String,
}

impl State {
    /// The file's JSON, as Go encodes upstream's state (RFC 3339 with
    /// nanoseconds; the zero time for a moment not yet reached).
    pub fn to_json(&self) -> String {
        let time = |t: Option<SystemTime>| {
            t.map_or_else(|| GO_ZERO_TIME.to_owned(), crate::timefmt::rfc3339_nanos)
        };
        serde_json::to_string(&StateJson {
            start_time: time(self.start),
            end_time: time(self.end),
        })
        .unwrap_or_default()
    }

    /// The state the file holds (either kubelet's); a moment that does not
    /// parse, or Go's zero time, is none.
    pub fn from_json(text: &str) -> Result<State, serde_json::Error> {
        let raw: StateJson = serde_json::from_str(text)?;
        let time = |s: &str| {
            s.parse::<k8s_openapi::jiff::Timestamp>()
                .ok()
                .and_then(|t| {
                    let secs = u64::try_from(t.as_second()).ok().filter(|s| *s > 0)?;
                    let nanos = u32::try_from(t.subsec_nanosecond()).ok()?;
                    Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
                })
        };
        Ok(State {
            start: time(&raw.start_time),
            end: time(&raw.end_time),
        })
    }

    /// A gauge's value: seconds since the epoch, 0 for none.
    pub fn seconds(t: Option<SystemTime>) -> f64 {
        t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_kubelet_config_reporting;

    fn period(priority: i32, seconds: i64) -> ShutdownGracePeriodByPodPriority {
        ShutdownGracePeriodByPodPriority {
            priority,
            shutdown_grace_period_seconds: seconds,
        }
    }

    fn config(body: &str) -> KubeletConfiguration {
        let text = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"
        );
        let (cfg, _) = parse_kubelet_config_reporting(&text).unwrap();
        cfg.validate().unwrap();
        cfg
    }

    #[test]
    fn periods_from_either_form_of_the_configuration() {
        let cases: &[(&str, Vec<ShutdownGracePeriodByPodPriority>)] = &[
            ("", vec![]),
            (
                "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n",
                vec![period(0, 20), period(2_000_000_000, 10)],
            ),
            (
                "shutdownGracePeriod: 30s\n",
                vec![period(0, 30), period(2_000_000_000, 0)],
            ),
            (
                "shutdownGracePeriodByPodPriority:\n- {priority: 100000, shutdownGracePeriodSeconds: 5}\n- {priority: 10, shutdownGracePeriodSeconds: 20}\n",
                vec![period(10, 20), period(100_000, 5)],
            ),
            (
                // The gate off: the list is not read (and validation
                // refuses it, so it can only be empty here).
                "featureGates: {GracefulNodeShutdownBasedOnPodPriority: false}\nshutdownGracePeriod: 4s\n",
                vec![period(0, 4), period(2_000_000_000, 0)],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(&periods(&config(body)), want, "{body}");
        }
        assert_eq!(
            period_requested(&[period(0, 20), period(1, 10)]),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn pods_go_to_the_highest_group_at_or_below_their_priority() {
        let periods = [period(-100, 1), period(0, 2), period(1000, 3)];
        let groups = group_by_priority(&periods, [-200, -100, -1, 0, 999, 1000, 5000], |p| *p);
        let got: Vec<Vec<i32>> = groups.into_iter().map(|g| g.pods).collect();
        assert_eq!(
            got,
            vec![vec![-200, -100, -1], vec![0, 999], vec![1000, 5000]]
        );
        assert!(group_by_priority(&[], [1], |p| *p).is_empty());
        // One group takes every pod.
        let one = group_by_priority(&[period(50, 9)], [0, 50, 100], |p| *p);
        assert_eq!(one[0].pods, vec![0, 50, 100]);
    }

    #[test]
    fn a_pod_keeps_its_own_grace_when_shorter() {
        for (group, own, want) in [
            (30, None, 30),
            (30, Some(5), 5),
            (30, Some(30), 30),
            (30, Some(60), 30),
            (0, Some(0), 0),
        ] {
            assert_eq!(pod_grace(group, own), want, "{group} {own:?}");
        }
    }

    #[test]
    fn a_kill_may_take_its_grace_and_half_again() {
        for (grace, want) in [
            (0, 10),
            (2, 10),
            (6, 10),
            (7, 10),
            (8, 12),
            (30, 45),
            (-5, 10),
        ] {
            assert_eq!(kill_timeout(grace), Duration::from_secs(want), "{grace}");
        }
    }

    #[test]
    fn the_logind_override_as_upstream_writes_it() {
        assert_eq!(
            logind_override(Duration::from_secs(30)),
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
        );
    }

    #[test]
    fn the_state_file_round_trips_in_gos_encoding() {
        let start = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 120_000_000);
        let begun = State {
            start: Some(start),
            end: None,
        };
        let json = begun.to_json();
        assert_eq!(
            json,
            r#"{"startTime":"2023-11-14T22:13:20.12Z","endTime":"0001-01-01T00:00:00Z"}"#
        );
        assert_eq!(State::from_json(&json).unwrap(), begun);
        // Upstream's own, in local time with an offset.
        let go =
            r#"{"startTime":"2023-11-14T23:13:20.12+01:00","endTime":"2023-11-14T23:13:50+01:00"}"#;
        let read = State::from_json(go).unwrap();
        assert_eq!(read.start, Some(start));
        assert_eq!(State::seconds(read.end), 1_700_000_030.0);
        assert_eq!(State::seconds(None), 0.0);
        assert!(State::from_json("not json").is_err());
    }
}
