//! The manager against Debian's dbus-daemon on a private bus, with the
//! stand-in logind of [`super::fake`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::testing::PodBuilder;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::fake::{FakeLogind, PrivateBus};
use super::*;
use crate::testutil::until;

/// The kubelet as the manager sees it: pods that stop some time after
/// they are told to (or never).
struct FakeHost {
    pods: Vec<Arc<Pod>>,
    /// How long each pod takes to stop (none: it never does).
    stops_after: HashMap<String, Option<Duration>>,
    /// Each pod told to stop: its name, its grace, when.
    terminated: Mutex<Vec<(String, i64, Instant)>>,
    events: Mutex<Vec<(String, String)>>,
    status_syncs: AtomicUsize,
}

impl FakeHost {
    fn told(&self, name: &str) -> Option<(i64, Instant)> {
        self.terminated
            .lock()
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, grace, at)| (*grace, *at))
    }
}

impl ShutdownHost for FakeHost {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods.clone()
    }

    fn terminate(&self, pod: &Arc<Pod>, grace: i64) {
        let name = pod.metadata.name.clone().unwrap();
        self.terminated.lock().push((name, grace, Instant::now()));
    }

    fn cleaned_up(&self, pod: &Pod) -> bool {
        let name = pod.metadata.name.as_deref().unwrap();
        match (self.told(name), self.stops_after[name]) {
            (Some((_, at)), Some(after)) => at.elapsed() >= after,
            _ => false,
        }
    }

    fn node_event(&self, reason: &str, message: &str) {
        self.events.lock().push((reason.into(), message.into()));
    }

    fn sync_node_status(&self) {
        self.status_syncs.fetch_add(1, Ordering::Relaxed);
    }
}

/// Wait (10 s at most) until logind's `index`th lock is released.
async fn released(logind: &FakeLogind, index: usize) {
    tokio::time::timeout(Duration::from_secs(10), logind.released(index))
        .await
        .unwrap_or_else(|_| panic!("lock {index} still held after 10 s"))
        .unwrap();
}

fn pod(name: &str, priority: Option<i32>, grace: Option<i64>) -> Arc<Pod> {
    PodBuilder::new(name)
        .with_spec(|s| {
            s.priority = priority;
            s.termination_grace_period_seconds = grace;
        })
        .arc()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_stops_pods_by_priority_then_releases_loginds_lock() {
    let dir = tempfile::tempdir().unwrap();
    let bus = PrivateBus::start(dir.path()).unwrap();
    let conf_dir = dir.path().join("logind.conf.d");
    // logind allows 1 s; the kubelet asks 2 s + 1 s.
    let logind = FakeLogind::serve(
        &bus.address,
        Duration::from_secs(1),
        Some(conf_dir.join("99-kubelet.conf")),
    )
    .await
    .unwrap();
    let metrics = KubeletMetrics::new("node-a");
    let manager = Arc::new(ShutdownManager::new(
        Settings {
            periods: vec![
                ShutdownGracePeriodByPodPriority {
                    priority: 0,
                    shutdown_grace_period_seconds: 2,
                },
                ShutdownGracePeriodByPodPriority {
                    priority: 1000,
                    shutdown_grace_period_seconds: 1,
                },
            ],
            record_times: true,
            state_file: dir.path().join(STATE_FILE),
            logind: LogindAccess {
                bus_address: Some(bus.address.clone()),
                conf_dir: conf_dir.clone(),
            },
        },
        metrics.clone(),
    ));
    let host = Arc::new(FakeHost {
        pods: vec![
            pod("quick", None, Some(1)),
            pod("stuck", Some(10), None),
            pod("critical", Some(5000), Some(30)),
        ],
        stops_after: HashMap::from([
            ("quick".to_owned(), Some(Duration::from_millis(100))),
            ("stuck".to_owned(), None),
            ("critical".to_owned(), Some(Duration::from_millis(100))),
        ]),
        terminated: Mutex::default(),
        events: Mutex::default(),
        status_syncs: AtomicUsize::new(0),
    });
    let cancel = CancellationToken::new();
    let run = tokio::spawn(manager.clone().run(host.clone(), cancel.clone()));

    // The delay raised through logind's drop-in and a reload, then the lock.
    until("an inhibitor lock", || logind.locks_taken() == 1).await;
    assert_eq!(logind.delay(), (Duration::from_secs(3), 1));
    assert_eq!(
        std::fs::read_to_string(conf_dir.join("99-kubelet.conf")).unwrap(),
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=3\n"
    );
    assert_eq!(
        logind.inhibitors()[0],
        (
            "shutdown".into(),
            "kubelet".into(),
            "Kubelet needs time to handle node shutdown".into(),
            "delay".into()
        )
    );
    assert_eq!(manager.status(), None);
    assert!(manager.admit().is_ok());

    logind.prepare_for_shutdown(true).await.unwrap();
    released(&logind, 0).await;

    // The low group first, told at once, each with the shorter grace; the
    // critical pod only once the stuck one's 2 s had passed.
    let (quick, quick_at) = host.told("quick").unwrap();
    let (stuck, stuck_at) = host.told("stuck").unwrap();
    let (critical, critical_at) = host.told("critical").unwrap();
    assert_eq!((quick, stuck, critical), (1, 2, 1));
    assert!(
        critical_at.duration_since(stuck_at.max(quick_at)) >= Duration::from_secs(2),
        "the critical group began {:?} after the other",
        critical_at.duration_since(stuck_at)
    );
    // NotReady at once, and no pod admitted.
    assert_eq!(manager.status(), Some("node is shutting down"));
    let refused = manager.admit().unwrap_err();
    assert_eq!(refused.reason, "NodeShutdown");
    assert_eq!(
        refused.message,
        "Pod was rejected as the node is shutting down."
    );
    assert!(host.status_syncs.load(Ordering::Relaxed) >= 1);
    assert_eq!(
        host.events.lock()[0],
        (
            "NodeShutdown".into(),
            "Shutdown manager detected shutdown event".into()
        )
    );
    // The times kept, in the state file and the gauges.
    let state =
        State::from_json(&std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap()).unwrap();
    let (start, end) = (state.start.unwrap(), state.end.unwrap());
    assert!(end.duration_since(start).unwrap() >= Duration::from_secs(2));
    assert_eq!(
        metrics.graceful_shutdown_end_time.get(&[]),
        State::seconds(Some(end))
    );

    // Cancelled: pods are admitted again under a new lock.
    logind.prepare_for_shutdown(false).await.unwrap();
    until("a second lock", || logind.locks_taken() == 2).await;
    until("admitting again", || manager.status().is_none()).await;
    assert_eq!(
        host.events.lock().last().unwrap().1,
        "Shutdown manager detected shutdown cancellation"
    );

    cancel.cancel();
    run.await.unwrap();
    // The lock goes with the manager's connection.
    released(&logind, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_show_the_last_shutdown_at_start_and_a_lost_bus_is_found_again() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(STATE_FILE),
        r#"{"startTime":"2026-12-05T10:00:00Z","endTime":"2026-12-05T10:00:30Z"}"#,
    )
    .unwrap();
    let metrics = KubeletMetrics::new("node-a");
    let bus = PrivateBus::start(dir.path()).unwrap();
    let manager = Arc::new(ShutdownManager::new(
        Settings {
            periods: kubelet_core::nodeshutdown::periods(&KubeletConfiguration {
                shutdown_grace_period: Duration::from_secs(30),
                ..KubeletConfiguration::default()
            }),
            record_times: true,
            state_file: dir.path().join(STATE_FILE),
            logind: LogindAccess {
                bus_address: Some(bus.address.clone()),
                conf_dir: dir.path().join("unused"),
            },
        },
        metrics.clone(),
    ));
    assert!(manager.enabled());
    assert_eq!(
        metrics.graceful_shutdown_start_time.get(&[]),
        1_796_464_800.0
    );
    assert_eq!(metrics.graceful_shutdown_end_time.get(&[]), 1_796_464_830.0);

    let host = Arc::new(FakeHost {
        pods: Vec::new(),
        stops_after: HashMap::new(),
        terminated: Mutex::default(),
        events: Mutex::default(),
        status_syncs: AtomicUsize::new(0),
    });
    let cancel = CancellationToken::new();
    let run = tokio::spawn(manager.clone().run(host, cancel.clone()));
    // logind's delay is long enough: nothing to override.
    let logind = FakeLogind::serve(&bus.address, Duration::from_secs(60), None)
        .await
        .unwrap();
    until("the first lock", || logind.locks_taken() == 1).await;
    assert_eq!(logind.delay(), (Duration::from_secs(60), 0), "no reload");

    // The bus goes (and logind with it), then comes back at its address:
    // the manager finds it and takes a lock again.
    drop(logind);
    drop(bus);
    let bus = PrivateBus::start(dir.path()).unwrap();
    let logind = FakeLogind::serve(&bus.address, Duration::from_secs(60), None)
        .await
        .unwrap();
    until("a lock on the new bus", || logind.locks_taken() == 1).await;
    assert_eq!(manager.status(), None);
    cancel.cancel();
    run.await.unwrap();
}
