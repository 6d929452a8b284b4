//! The probe manager against the fake CRI runtime and a hand-filled status
//! manager, on tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, Event, ExecAction, Pod,
    PodSpec, PodStatus, Probe,
};
use kubelet_core::probe::ProbeResult;
use kubelet_core::testing::PodBuilder;
use kubelet_core::types::PodUid;
use kubelet_cri::client::CriClient;
use kubelet_cri::fake::FakeRuntime;
use kubelet_cri::v1 as cri;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ProbeManager;
use crate::clock::Clock;
use crate::events::Recorder;
use crate::status_manager::StatusManager;
use kubelet_tasks::Tasks;

const IMAGE: &str = "rkubelet.test/busybox:1";
const UID: &str = "uid-web";
/// Long enough for any number of probe periods on the paused clock.
const WAIT: Duration = Duration::from_secs(600);

struct Harness {
    _dir: tempfile::TempDir,
    fake: FakeRuntime,
    cri: CriClient,
    status: StatusManager,
    manager: ProbeManager,
    changed: mpsc::UnboundedReceiver<PodUid>,
    events: mpsc::Receiver<Event>,
    tasks: Tasks,
}

impl Harness {
    async fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        fake.add_image(IMAGE);
        let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5)).unwrap();
        let status = StatusManager::default();
        let (recorder, events) = Recorder::with_queue("node1".into(), Clock::System);
        let tasks = Tasks::new(CancellationToken::new());
        let (tx, changed) = mpsc::unbounded_channel();
        let manager = ProbeManager::new(
            cri.clone(),
            status.clone(),
            recorder,
            tasks.clone(),
            tx,
            Clock::System,
            Some(dir.path().join("pods")),
        );
        Harness {
            _dir: dir,
            fake,
            cri,
            status,
            manager,
            changed,
            events,
            tasks,
        }
    }

    /// Run a container named `name` in the fake; its raw id.
    async fn run_container(&self, name: &str) -> String {
        let sandbox = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                // One sandbox per container, fresh each time.
                name: format!("web-{name}-{}", self.fake.sandboxes().len()),
                uid: UID.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let sandbox_id = self
            .cri
            .run_pod_sandbox(sandbox.clone(), String::new())
            .await
            .unwrap();
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: IMAGE.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let id = self
            .cri
            .create_container(&sandbox_id, config, sandbox)
            .await
            .unwrap();
        self.cri.start_container(&id).await.unwrap();
        id
    }

    /// The status the kubelet would have computed: these containers running.
    fn set_running(&self, pod: &Pod, containers: &[(&str, &str)]) {
        let statuses = containers
            .iter()
            .map(|(name, id)| ContainerStatus {
                name: (*name).into(),
                container_id: Some(format!("fake://{id}")),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Clock::System.now_time()),
                    }),
                    ..Default::default()
                }),
                started: Some(true),
                ..Default::default()
            })
            .collect();
        self.status.set_pod_status(
            pod,
            PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some("10.88.0.2".into()),
                container_statuses: Some(statuses),
                ..Default::default()
            },
        );
    }

    async fn next_change(&mut self) -> PodUid {
        tokio::time::timeout(WAIT, self.changed.recv())
            .await
            .expect("a probe result change")
            .unwrap()
    }

    fn execs(&self, container: &str) -> Vec<Vec<String>> {
        self.fake
            .exec_commands()
            .into_iter()
            .filter(|(name, _)| name == container)
            .map(|(_, cmd)| cmd)
            .collect()
    }
}

fn exec_probe(cmd: &str, success_threshold: Option<i32>) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["sh".into(), "-c".into(), cmd.into()]),
        }),
        period_seconds: Some(10),
        success_threshold,
        ..Default::default()
    }
}

fn pod(containers: Vec<Container>) -> Arc<Pod> {
    PodBuilder::new("web")
        .namespace("default")
        .uid(UID)
        .containers(containers)
        .arc()
}

#[tokio::test(start_paused = true)]
async fn failing_liveness_probe_flips_after_the_threshold_and_holds() {
    let mut h = Harness::new().await;
    let id = h.run_container("app").await;
    let pod = pod(vec![Container {
        name: "app".into(),
        liveness_probe: Some(exec_probe("test -f /healthy", None)),
        ..Default::default()
    }]);
    h.set_running(&pod, &[("app", &id)]);
    h.fake.set_exec_result_for("app", 1, b"no such file", b"");
    h.manager.add_pod(&pod);
    let results = h.manager.results();

    assert_eq!(h.next_change().await, PodUid::from(UID));
    assert_eq!(results.liveness(&id), Some(ProbeResult::Success));
    assert_eq!(h.next_change().await, PodUid::from(UID));
    assert_eq!(results.liveness(&id), Some(ProbeResult::Failure));
    let cmd = vec!["sh".to_owned(), "-c".into(), "test -f /healthy".into()];
    assert_eq!(h.execs("app"), vec![cmd.clone(); 3]);
    for _ in 0..3 {
        let event = h.events.try_recv().unwrap();
        assert_eq!(event.reason.as_deref(), Some("Unhealthy"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(
            event.message.as_deref(),
            Some("Liveness probe failed: no such file")
        );
        assert_eq!(
            event.involved_object.field_path.as_deref(),
            Some("spec.containers{app}")
        );
    }
    let metrics = h.manager.probe_metrics_text();
    assert!(
        metrics.contains("prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"uid-web\",probe_type=\"Liveness\",result=\"failed\"} 3"),
        "{metrics}"
    );

    // On hold until the container changes.
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_eq!(h.execs("app").len(), 3);

    // A restarted container is probed afresh and starts alive.
    let restarted = h.run_container("app").await;
    h.set_running(&pod, &[("app", &restarted)]);
    assert_eq!(h.next_change().await, PodUid::from(UID));
    assert_eq!(results.liveness(&restarted), Some(ProbeResult::Success));
    assert_eq!(results.liveness(&id), None);
    h.tasks.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn readiness_needs_consecutive_successes_and_exec_timeouts_fail() {
    let mut h = Harness::new().await;
    let app = h.run_container("app").await;
    let slow = h.run_container("slow").await;
    let pod = pod(vec![
        Container {
            name: "app".into(),
            readiness_probe: Some(exec_probe("true", Some(2))),
            ..Default::default()
        },
        Container {
            name: "slow".into(),
            readiness_probe: Some(exec_probe("sleep 5", None)),
            ..Default::default()
        },
    ]);
    h.set_running(&pod, &[("app", &app), ("slow", &slow)]);
    h.fake.set_exec_latency_for("slow", Duration::from_secs(5));
    h.manager.add_pod(&pod);
    let results = h.manager.results();

    while results.readiness(&app) != Some(ProbeResult::Success) {
        h.next_change().await;
    }
    assert_eq!(h.execs("app").len(), 2, "ready after exactly two successes");
    assert_eq!(results.readiness(&slow), Some(ProbeResult::Failure));
    // The slow container's probe timed out (timeoutSeconds 1).
    let timed_out = loop {
        let event = tokio::time::timeout(WAIT, h.events.recv())
            .await
            .unwrap()
            .unwrap();
        if event.involved_object.field_path.as_deref() == Some("spec.containers{slow}") {
            break event;
        }
    };
    assert_eq!(
        timed_out.message.as_deref(),
        Some("Readiness probe failed: command \"sh -c sleep 5\" timed out")
    );
    h.tasks.shutdown().await;
}

/// A probe slower than its period runs again as soon as it ends, as
/// upstream's worker on a Go ticker does (one tick kept for a slow reader),
/// rather than waiting for the next tick: probes that overrun drift apart
/// instead of meeting on the same tick.
#[tokio::test(start_paused = true)]
async fn a_probe_slower_than_its_period_runs_again_when_it_ends() {
    let h = Harness::new().await;
    // Past the first period: no start-up jitter.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let slow = h.run_container("slow").await;
    let pod = pod(vec![Container {
        name: "slow".into(),
        readiness_probe: Some(Probe {
            period_seconds: Some(1),
            timeout_seconds: Some(2),
            ..exec_probe("sleep 1.5", None)
        }),
        ..Default::default()
    }]);
    h.set_running(&pod, &[("slow", &slow)]);
    h.fake
        .set_exec_latency_for("slow", Duration::from_millis(1500));
    h.manager.add_pod(&pod);
    // Started at 0, 1.5, 3 and 4.5 s (tokio's missed tick fires at once, as
    // Go's kept one does); waiting for the next tick each, only at 0, 2 and 4 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.execs("slow").len(), 4);
    h.tasks.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn startup_gates_liveness_and_remove_pod_stops_workers() {
    let mut h = Harness::new().await;
    let id = h.run_container("app").await;
    let app = Container {
        name: "app".into(),
        startup_probe: Some(Probe {
            failure_threshold: Some(100),
            ..exec_probe("startup", None)
        }),
        liveness_probe: Some(exec_probe("live", None)),
        readiness_probe: Some(exec_probe("ready", None)),
        ..Default::default()
    };
    let first = pod(vec![app.clone()]);
    h.set_running(&first, &[("app", &id)]);
    h.fake.set_exec_result_for("app", 1, b"", b"starting");
    h.manager.add_pod(&first);
    h.manager.add_pod(&first);
    assert_eq!(h.manager.worker_count(), 3);
    let ran =
        |h: &Harness| -> Vec<String> { h.execs("app").into_iter().map(|c| c[2].clone()).collect() };
    tokio::time::sleep(Duration::from_secs(50)).await;
    let before = ran(&h);
    assert!(
        before.len() >= 4 && before.iter().all(|c| c == "startup"),
        "only the startup probe runs before the container started: {before:?}"
    );
    let results = h.manager.results();
    assert_eq!(results.startup(&id), Some(ProbeResult::Unknown));
    assert_eq!(results.readiness(&id), Some(ProbeResult::Failure));

    h.fake.set_exec_result_for("app", 0, b"", b"");
    while results.startup(&id) != Some(ProbeResult::Success) {
        h.next_change().await;
    }

    // Started: liveness and readiness run now, startup no more.
    while results.readiness(&id) != Some(ProbeResult::Success) {
        h.next_change().await;
    }
    let startups = ran(&h).iter().filter(|c| *c == "startup").count();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after = ran(&h);
    assert!(after.iter().any(|c| c == "live"), "{after:?}");
    assert_eq!(after.iter().filter(|c| *c == "startup").count(), startups);

    // A changed probe replaces its worker only.
    let mut changed = app.clone();
    changed.readiness_probe = Some(exec_probe("ready-v2", None));
    h.manager.add_pod(&pod(vec![changed]));
    assert_eq!(h.manager.worker_count(), 3);
    h.fake
        .wait_for("the changed probe to run", WAIT, |f| {
            f.exec_commands().iter().any(|(_, c)| c[2] == "ready-v2")
        })
        .await;

    h.manager.remove_pod(&PodUid::from(UID));
    assert_eq!(h.manager.worker_count(), 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopped = h.fake.exec_commands().len();
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_eq!(
        h.fake.exec_commands().len(),
        stopped,
        "no probe after remove_pod"
    );
    assert_eq!(results.readiness(&id), None);
    assert_eq!(results.liveness(&id), None);
    assert_eq!(h.manager.probe_metrics_text(), "");
    h.tasks.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn errored_probes_are_retried_then_thrown_away() {
    use k8s_openapi::api::core::v1::HTTPGetAction;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let mut h = Harness::new().await;
    let app = h.run_container("app").await;
    let web = h.run_container("web").await;
    let pod = pod(vec![
        Container {
            name: "app".into(),
            readiness_probe: Some(exec_probe("true", None)),
            ..Default::default()
        },
        Container {
            name: "web".into(),
            readiness_probe: Some(Probe {
                http_get: Some(HTTPGetAction {
                    port: IntOrString::String("metrics".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    ]);
    h.set_running(&pod, &[("app", &app), ("web", &web)]);
    // Every try of the first tick fails: the runtime errors three times.
    h.fake.inject_error("ExecSync", tonic::Code::Unknown, 3);
    h.manager.add_pod(&pod);

    let mut messages = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(WAIT, h.events.recv())
            .await
            .unwrap()
            .unwrap();
        messages.push(event.message.unwrap_or_default());
    }
    messages.sort();
    assert_eq!(
        messages,
        [
            "Readiness probe errored and resulted in unknown state: container \"web\": port \"metrics\" not found in the container's ports",
            "Readiness probe errored and resulted in unknown state: rpc error: code = Unknown desc = injected error for ExecSync",
        ]
    );
    assert_eq!(h.fake.calls("ExecSync"), 3, "three tries in one tick");
    let results = h.manager.results();
    assert_eq!(results.readiness(&app), Some(ProbeResult::Failure));
    // The next tick's probe works again.
    while results.readiness(&app) != Some(ProbeResult::Success) {
        h.next_change().await;
    }
    assert_eq!(results.readiness(&web), Some(ProbeResult::Failure));
    let metrics = h.manager.probe_metrics_text();
    assert!(!metrics.contains("container=\"web\""), "{metrics}");
    h.tasks.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn sidecars_are_probed_and_plain_init_containers_are_not() {
    let mut h = Harness::new().await;
    let side = h.run_container("side").await;
    let ready = Some(exec_probe("ready", None));
    let mut pod = pod(vec![]);
    Arc::make_mut(&mut pod).spec = Some(PodSpec {
        init_containers: Some(vec![
            Container {
                name: "init".into(),
                readiness_probe: ready.clone(),
                ..Default::default()
            },
            Container {
                name: "side".into(),
                restart_policy: Some("Always".into()),
                readiness_probe: ready,
                ..Default::default()
            },
        ]),
        ..Default::default()
    });
    let names: Vec<&str> = super::probed_containers(&pod)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["side"]);

    // The sidecar's status is among the init container statuses.
    h.set_running(&pod, &[("side", &side)]);
    let mut status = (*h.status.get_pod_status(&PodUid::from(UID)).unwrap()).clone();
    status.init_container_statuses = status.container_statuses.take();
    h.status.set_pod_status(&pod, status);
    h.manager.add_pod(&pod);
    assert_eq!(h.manager.worker_count(), 1);
    let results = h.manager.results();
    while results.readiness(&side) != Some(ProbeResult::Success) {
        h.next_change().await;
    }
    h.tasks.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn workers_of_a_terminal_pod_end_and_are_not_restarted() {
    let mut h = Harness::new().await;
    let id = h.run_container("app").await;
    let pod = pod(vec![Container {
        name: "app".into(),
        liveness_probe: Some(exec_probe("live", None)),
        readiness_probe: Some(exec_probe("ready", None)),
        ..Default::default()
    }]);
    h.set_running(&pod, &[("app", &id)]);
    h.manager.add_pod(&pod);
    let results = h.manager.results();
    while results.readiness(&id) != Some(ProbeResult::Success) {
        h.next_change().await;
    }
    let mut status = (*h.status.get_pod_status(&PodUid::from(UID)).unwrap()).clone();
    status.phase = Some("Succeeded".into());
    h.status.set_pod_status(&pod, status);
    // Within a period every worker sees the terminal phase and ends.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(h.manager.worker_count(), 0);
    assert_eq!(results.readiness(&id), None);
    h.manager.add_pod(&pod);
    assert_eq!(
        h.manager.worker_count(),
        0,
        "a SyncPod does not restart them"
    );
    h.tasks.shutdown().await;
}

/// What an idle worker holds for its whole life is its task's future: the
/// handlers' futures (kilobytes for a gRPC call) are on the heap only while
/// a probe runs, and the container is read from the pod, not copied.
#[tokio::test]
async fn an_idle_worker_holds_little() {
    let h = Harness::new().await;
    let pod = pod(vec![Container {
        name: "app".into(),
        readiness_probe: Some(exec_probe("true", None)),
        ..Default::default()
    }]);
    let worker = super::worker::Worker {
        id: 0,
        key: super::WorkerKey {
            uid: PodUid::from(UID),
            container: "app".into(),
            kind: kubelet_core::probe::ProbeKind::Readiness,
        },
        pod,
        shared: h.manager.shared.clone(),
        resumed: None,
    };
    let task = worker.run(CancellationToken::new());
    // 1 KiB today; 13 KiB with the handlers inline and the container copied.
    assert!(size_of_val(&task) <= 2048, "{} bytes", size_of_val(&task));
}

/// What a container had before a restart, as `restore` takes it.
fn kept(id: &str) -> std::collections::HashMap<String, super::Kept> {
    [(
        "app".to_owned(),
        super::Kept {
            id: id.to_owned(),
            ready: true,
            started: true,
        },
    )]
    .into()
}

/// After a restart, the container that is still the same is ready from
/// the first status on, and no change is told while its probe passes; a
/// probe that fails now makes it unready at its first run, whatever the
/// failure threshold.
#[tokio::test(start_paused = true)]
async fn a_restart_keeps_readiness_until_a_probe_decides() {
    let mut h = Harness::new().await;
    let id = h.run_container("app").await;
    let pod = pod(vec![Container {
        name: "app".into(),
        readiness_probe: Some(exec_probe("true", None)),
        ..Default::default()
    }]);
    h.set_running(&pod, &[("app", &id)]);
    h.manager.restore(&pod, kept(&id));
    let results = h.manager.results();
    assert_eq!(
        results.readiness(&id),
        Some(ProbeResult::Success),
        "before any worker ran"
    );
    h.manager.add_pod(&pod);
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert!(h.execs("app").len() >= 3, "the probe ran");
    assert_eq!(
        h.changed.try_recv(),
        Err(mpsc::error::TryRecvError::Empty),
        "no change was told"
    );
    assert_eq!(results.readiness(&id), Some(ProbeResult::Success));

    // Restarted again, the probe failing meanwhile (threshold 3).
    h.manager.remove_pod(&PodUid::from(UID));
    tokio::time::sleep(Duration::from_secs(1)).await;
    while h.changed.try_recv().is_ok() {}
    h.fake.set_exec_result_for("app", 1, b"", b"");
    h.manager.restore(&pod, kept(&id));
    let restarted = tokio::time::Instant::now();
    h.manager.add_pod(&pod);
    assert_eq!(h.next_change().await, PodUid::from(UID));
    assert_eq!(results.readiness(&id), Some(ProbeResult::Failure));
    assert!(
        restarted.elapsed() <= Duration::from_secs(10),
        "unready within one period: {:?}",
        restarted.elapsed()
    );
}

/// Kept readiness with no probe able to run (the runtime does not answer)
/// ends after a period and a timeout, as the initial result would have it;
/// a container that changed while the kubelet was down keeps nothing.
#[tokio::test(start_paused = true)]
async fn kept_readiness_expires_and_a_new_container_keeps_nothing() {
    let mut h = Harness::new().await;
    let id = h.run_container("app").await;
    let pod = pod(vec![Container {
        name: "app".into(),
        readiness_probe: Some(exec_probe("true", None)),
        ..Default::default()
    }]);
    h.set_running(&pod, &[("app", &id)]);
    h.fake.set_unavailable(true);
    h.manager.restore(&pod, kept(&id));
    let results = h.manager.results();
    let restarted = tokio::time::Instant::now();
    h.manager.add_pod(&pod);
    assert_eq!(h.next_change().await, PodUid::from(UID));
    assert_eq!(results.readiness(&id), Some(ProbeResult::Failure));
    let took = restarted.elapsed();
    assert!(
        (Duration::from_secs(11)..=Duration::from_secs(12)).contains(&took),
        "period 10 s + timeout 1 s: {took:?}"
    );
    h.fake.set_unavailable(false);

    // The status shows another container than the one kept.
    h.manager.remove_pod(&PodUid::from(UID));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let new_id = h.run_container("app").await;
    h.set_running(&pod, &[("app", &new_id)]);
    h.fake.set_exec_result_for("app", 1, b"", b"");
    h.manager.restore(&pod, kept(&id));
    h.manager.add_pod(&pod);
    assert_eq!(h.next_change().await, PodUid::from(UID));
    assert_eq!(results.readiness(&id), None, "the kept one is dropped");
    assert_eq!(results.readiness(&new_id), Some(ProbeResult::Failure));
}
