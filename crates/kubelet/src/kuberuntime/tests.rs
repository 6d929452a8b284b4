use std::collections::HashSet;

use k8s_openapi::api::core::v1::Container;
use kubelet_core::testing::{self, PodBuilder};

use super::image::pull_policy_default;
use super::status::{join_messages, log_tail};
use super::*;

fn test_host(dir: &std::path::Path) -> Host {
    Host {
        logs_root: dir.join("logs"),
        legacy_logs_dir: dir.join("containers"),
        pods_dir: dir.join("pods"),
        dns: DnsSettings::default(),
        resolv_conf: String::new(),
        resources: NodeResources {
            memory: 1 << 30,
            cfs_period: Some(100_000),
            swap: kubelet_core::swap::SwapPolicy {
                limited: false,
                controller: kubelet_core::swap::SwapController::Unavailable,
                node_memory: 1 << 30,
                node_swap: 0,
            },
        },
        security: SecurityDefaults::default(),
        runtime_classes: RuntimeClasses::default(),
        runtime_state: crate::runtime_state::RuntimeState::default(),
        userns: crate::userns::UsernsManager::new("/nonexistent".into(), 65536, 110),
        image_pull_limit: None,
        max_container_restart_period: kubelet_core::flowcontrol::MAX,
        pull_qps: None,
        cgroups: ContainerManager::default(),
        stop_signals: true,
        devices: crate::devicemanager::DeviceManager::new(
            dir,
            KubeletMetrics::new("n"),
            Arc::default(),
            None,
        ),
        cpus: crate::cpumanager::CpuManager::new(
            Default::default(),
            Default::default(),
            dir,
            KubeletMetrics::new("n"),
        ),
        memory: crate::memorymanager::MemoryManager::new(
            Default::default(),
            Vec::new(),
            dir,
            KubeletMetrics::new("n"),
        ),
        dra: crate::dra::DraManager::new(dir, None, "n", KubeletMetrics::new("n"), None),
    }
}

fn test_pulls(dir: &std::path::Path) -> Arc<PullManager> {
    Arc::new(PullManager::open(
        dir,
        Default::default(),
        KubeletMetrics::new("n"),
        Clock::System,
    ))
}

fn test_env() -> PodEnv {
    let allocatable = crate::nodestatus::NodeAllocatable::new(
        Default::default(),
        tokio::sync::watch::channel(None).1,
    );
    PodEnv::new(None, None, allocatable, vec!["192.0.2.10".into()])
}

/// Pod p (UID u1) of namespace default: container c of img:1, pulled if not
/// present.
fn pod_p() -> Pod {
    PodBuilder::new("p")
        .namespace("default")
        .uid("u1")
        .container(Container {
            image: Some("img:1".into()),
            image_pull_policy: Some("IfNotPresent".into()),
            ..testing::container("c")
        })
        .build()
}

#[test]
fn default_pull_policy() {
    for (image, want) in [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("busybox:1", "IfNotPresent"),
        ("localhost:5000/busybox", "Always"),
        ("localhost:5000/busybox:1", "IfNotPresent"),
        ("busybox@sha256:abcd", "IfNotPresent"),
    ] {
        assert_eq!(pull_policy_default(image), want, "{image}");
    }
}

#[test]
fn grace_periods() {
    let empty = PodStatus::default();
    assert_eq!(grace_period(None, &empty, None), 30);
    assert_eq!(grace_period(None, &empty, Some(0)), MIN_GRACE_PERIOD);
    assert_eq!(grace_period(None, &empty, Some(10)), 10);
}

#[test]
fn termination_message_from_the_log_tail() {
    let ts = "2026-12-01T09:00:00.000000001Z";
    let lines =
        |n: usize| -> String { (0..n).map(|i| format!("{ts} stdout F line{i}\n")).collect() };
    let long = "x".repeat(3000);
    let cases: Vec<(&str, String, String)> = vec![
        (
            "`echo -n DONE`: one partial entry at the end",
            format!("{ts} stdout P DONE\n"),
            "DONE".into(),
        ),
        (
            "whole lines keep their newline",
            format!("{ts} stdout F a\n{ts} stderr F b\n"),
            "a\nb\n".into(),
        ),
        (
            "partials joined, the unfinished last line kept",
            format!("{ts} stdout P DO\n{ts} stdout F NE\n{ts} stdout P ba\n{ts} stdout P d\n"),
            "DONE\nbad".into(),
        ),
        (
            "the last 80 lines",
            lines(100),
            (20..100).map(|i| format!("line{i}\n")).collect(),
        ),
        (
            "at most 2048 bytes, from the end",
            format!("{ts} stdout F {long}\n{ts} stdout P end\n"),
            format!("{}\nend", &long[..2048 - 4]),
        ),
        ("an empty log", String::new(), String::new()),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, log, want) in cases {
        let path = dir.path().join("0.log");
        std::fs::write(&path, log).unwrap();
        let got = log_tail(path.to_str().unwrap()).unwrap();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn runtime_and_termination_messages_join() {
    for (runtime, termination, want) in [
        ("", "", ""),
        ("", "DONE", "DONE"),
        ("OOM", "", "OOM"),
        ("OOM", "DONE", "OOM: DONE"),
    ] {
        assert_eq!(join_messages(runtime, termination), want);
    }
}

#[tokio::test]
async fn garbage_collection_keeps_the_last_dead_instance_and_its_log() {
    use kubelet_cri::fake::FakeRuntime;
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
        .await
        .unwrap();
    fake.add_image("img:1");
    let cri = CriClient::connect_lazy(&fake.endpoint(), std::time::Duration::from_secs(5)).unwrap();
    let logs = dir.path().join("logs");
    let rm = RuntimeManager::new(
        cri.clone(),
        test_host(dir.path()),
        test_env(),
        test_pulls(dir.path()),
        Recorder::log_only("n".into()),
        KubeletMetrics::new("n"),
        Clock::System,
    );
    let labels = uid_filter(&PodUid::from("u1"));
    let sandbox = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "p".into(),
            uid: "u1".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        log_directory: logs.display().to_string(),
        labels: labels.clone(),
        ..Default::default()
    };
    let sb = cri
        .run_pod_sandbox(sandbox.clone(), String::new())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for attempt in 0..3 {
        let cfg = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "a".into(),
                attempt,
            }),
            image: Some(cri::ImageSpec {
                image: "img:1".into(),
                ..Default::default()
            }),
            labels: labels.clone(),
            log_path: format!("a/{attempt}.log"),
            ..Default::default()
        };
        let id = cri
            .create_container(&sb, cfg, sandbox.clone())
            .await
            .unwrap();
        cri.start_container(&id).await.unwrap();
        assert!(fake.exit_container(&id, 1));
        std::fs::create_dir_all(logs.join("a")).unwrap();
        std::fs::write(logs.join(format!("a/{attempt}.log")), "x").unwrap();
        ids.push(id);
    }
    let live = HashSet::new();
    assert_eq!(rm.garbage_collect(&live).await.unwrap(), 2);
    let left: Vec<String> = fake.containers().into_iter().map(|c| c.id).collect();
    assert_eq!(left, [ids[2].clone()]);
    assert!(!logs.join("a/0.log").exists() && !logs.join("a/1.log").exists());
    assert!(
        logs.join("a/2.log").exists(),
        "the kept instance keeps its log"
    );
    assert_eq!(
        rm.garbage_collect(&live).await.unwrap(),
        0,
        "nothing more to collect"
    );
    // Under disk pressure the pod, done, loses its last container; its
    // sandbox goes once it is not ready.
    let done = HashSet::from([PodUid::from("u1")]);
    assert_eq!(rm.garbage_collect(&done).await.unwrap(), 1);
    assert!(fake.containers().is_empty() && !logs.join("a/2.log").exists());
    assert_eq!(fake.sandboxes().len(), 1, "a ready sandbox stays");
    cri.stop_pod_sandbox(&sb).await.unwrap();
    assert_eq!(rm.garbage_collect(&done).await.unwrap(), 0);
    assert!(fake.sandboxes().is_empty());
}

/// A started container gets its `/var/log/containers` link to its log
/// file; the link goes with the container, and one left dangling by a
/// container that is gone is removed by garbage collection.
#[tokio::test]
async fn log_links_come_and_go_with_their_containers() {
    use kubelet_cri::fake::FakeRuntime;
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
        .await
        .unwrap();
    fake.add_image("img:1");
    let cri = CriClient::connect_lazy(&fake.endpoint(), std::time::Duration::from_secs(5)).unwrap();
    let rm = RuntimeManager::new(
        cri,
        test_host(dir.path()),
        test_env(),
        test_pulls(dir.path()),
        Recorder::log_only("n".into()),
        KubeletMetrics::new("n"),
        Clock::System,
    );
    let pod = pod_p();
    let synced = rm
        .sync_pod(
            &pod,
            &PodStatus::default(),
            &kubelet_core::runtime::NoProbes,
            &Default::default(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(synced.started, ["c"]);
    let id = fake.containers()[0].id.clone();
    let links = dir.path().join("containers");
    let link = links.join(format!("p_default_c-{id}.log"));
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        dir.path().join("logs/default_p_u1/c/0.log")
    );
    let pod_ref = PodRef {
        uid: PodUid::from("u1"),
        name: "p".into(),
        namespace: "default".into(),
    };
    let status = rm.get_pod_status(&pod_ref).await.unwrap();
    rm.kill_pod(Some(&pod), &status, 0).await.unwrap();
    rm.remove_pod(&pod_ref, &status).await.unwrap();
    assert_eq!(
        std::fs::symlink_metadata(&link).unwrap_err().kind(),
        std::io::ErrorKind::NotFound,
        "removed with the container"
    );

    // Left by a container removed while rkubelet was down.
    let stale = links.join("q_default_c-0123456789ab.log");
    std::os::unix::fs::symlink(dir.path().join("logs/gone/c/0.log"), &stale).unwrap();
    rm.garbage_collect(&HashSet::new()).await.unwrap();
    assert_eq!(
        std::fs::symlink_metadata(&stale).unwrap_err().kind(),
        std::io::ErrorKind::NotFound,
        "a dangling link is collected"
    );
}

/// Failure events carry the runtime's reason, as upstream's (`Error: <message>`,
/// `Failed to create pod sandbox: <error>`), not just a reason word.
#[tokio::test]
async fn failure_events_say_why() {
    use kubelet_cri::fake::FakeRuntime;
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
        .await
        .unwrap();
    fake.add_image("img:1");
    let cri = CriClient::connect_lazy(&fake.endpoint(), std::time::Duration::from_secs(5)).unwrap();
    let (events, mut rx) = Recorder::with_queue("n".into(), Clock::System);
    let metrics = KubeletMetrics::new("n");
    let rm = RuntimeManager::new(
        cri,
        test_host(dir.path()),
        test_env(),
        test_pulls(dir.path()),
        events,
        metrics.clone(),
        Clock::System,
    );
    let pod = pod_p();
    // The messages of the events with this reason recorded so far.
    let mut messages = |reason: &str| {
        let mut seen = Vec::new();
        while let Ok(e) = rx.try_recv() {
            if e.reason.as_deref() == Some(reason) {
                seen.push(e.message.unwrap_or_default());
            }
        }
        seen
    };

    fake.inject_error("RunPodSandbox", tonic::Code::Unknown, 1);
    let synced = rm
        .sync_pod(
            &pod,
            &PodStatus::default(),
            &kubelet_core::runtime::NoProbes,
            &Default::default(),
            None,
        )
        .await;
    assert!(
        matches!(
            &synced,
            Err(SyncError::Runtime(e)) if e.op == "RunPodSandbox" && e.code == tonic::Code::Unknown
        ),
        "{:?}",
        synced.err()
    );
    assert_eq!(
        messages("FailedCreatePodSandBox"),
        [
            "Failed to create pod sandbox: rpc error: code = Unknown desc = injected error for RunPodSandbox"
        ]
    );

    fake.inject_error("CreateContainer", tonic::Code::Unknown, 1);
    let synced = rm
        .sync_pod(
            &pod,
            &PodStatus::default(),
            &kubelet_core::runtime::NoProbes,
            &Default::default(),
            None,
        )
        .await
        .unwrap();
    assert!(synced.started.is_empty());
    assert_eq!(
        messages("Failed"),
        ["Error: injected error for CreateContainer"]
    );

    // A user namespace the runtime cannot give is refused by name.
    let mut userns = pod.clone();
    userns.metadata.uid = Some("u2".into());
    userns.spec.as_mut().unwrap().host_users = Some(false);
    let synced = rm
        .sync_pod(
            &userns,
            &PodStatus::default(),
            &kubelet_core::runtime::NoProbes,
            &Default::default(),
            None,
        )
        .await;
    assert!(
        matches!(
            synced,
            Err(SyncError::SandboxConfig(
                crate::error::SandboxConfigError::UserNamespaces(
                    crate::userns::UsernsSetupError::Unsupported(_)
                )
            ))
        ),
        "{:?}",
        synced.err()
    );
    assert_eq!(
        messages("FailedCreatePodSandBox"),
        [
            "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        ]
    );
    // Counted as a user-namespaced pod started, and as its failure.
    let text = metrics.render();
    for line in [
        "kubelet_started_user_namespaced_pods_total 1",
        "kubelet_started_user_namespaced_pods_errors_total 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}: {text}");
    }

    // An image name the reference grammar refuses is not pulled.
    let mut bad_image = pod.clone();
    bad_image.metadata.uid = Some("u3".into());
    bad_image.spec.as_mut().unwrap().containers[0].image = Some("Img:1".into());
    let synced = rm
        .sync_pod(
            &bad_image,
            &PodStatus::default(),
            &kubelet_core::runtime::NoProbes,
            &Default::default(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(synced.failures[0].error.reason(), "InvalidImageName");
    assert_eq!(
        messages("InspectFailed"),
        [
            "Failed to apply default image tag \"Img:1\": invalid reference format: repository name (library/Img) must be lowercase"
        ]
    );
}

/// registryPullQPS: a pull over the budget fails at once with upstream's
/// `pull QPS exceeded`, never reaching the runtime.
#[tokio::test]
async fn pulls_over_the_registry_budget_fail_without_reaching_the_runtime() {
    use kubelet_cri::fake::FakeRuntime;
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
        .await
        .unwrap();
    fake.make_pullable("img:1");
    let cri = CriClient::connect_lazy(&fake.endpoint(), std::time::Duration::from_secs(5)).unwrap();
    let (events, mut rx) = Recorder::with_queue("n".into(), Clock::System);
    // A budget of one pull, refilled once in 1000 s.
    let host = Host {
        pull_qps: Some((0.001, 1.0)),
        ..test_host(dir.path())
    };
    let rm = RuntimeManager::new(
        cri,
        host,
        test_env(),
        test_pulls(dir.path()),
        events,
        KubeletMetrics::new("n"),
        Clock::System,
    );
    let always = |uid: &str| {
        let mut pod = pod_p();
        pod.metadata.uid = Some(uid.into());
        pod.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("Always".into());
        pod
    };
    for (uid, want_started) in [("u1", true), ("u2", false)] {
        let synced = rm
            .sync_pod(
                &always(uid),
                &PodStatus::default(),
                &kubelet_core::runtime::NoProbes,
                &Default::default(),
                None,
            )
            .await
            .unwrap();
        assert_eq!(!synced.started.is_empty(), want_started, "{uid}");
    }
    assert_eq!(
        fake.calls("PullImage"),
        1,
        "the second pull never reached the runtime"
    );
    let mut failed = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if e.reason.as_deref() == Some("Failed") {
            failed.push(e.message.unwrap_or_default());
        }
    }
    assert!(
        failed.contains(&"Failed to pull image \"img:1\": pull QPS exceeded".to_owned()),
        "{failed:?}"
    );
}
