//! In-process tests: the whole kubelet (file source, mux, sync loop, pod
//! workers, runtime manager, PLEG, status manager) against the fake CRI
//! runtime serving the real gRPC API on a temp unix socket.

#![allow(
    clippy::too_many_lines,
    reason = "each test is a scenario, read top to bottom"
)]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubelet::clock::Clock;
use kubelet::cm::HostCgroups;
use kubelet::nodeshutdown::LogindAccess;
use kubelet::{Kubelet, KubeletOptions};
use kubelet_core::cgroups::CgroupLayout;
use kubelet_core::config::KubeletConfiguration;
use kubelet_core::types::{PodUid, keys};
use kubelet_cri::client::CriClient;
use kubelet_cri::fake::FakeRuntime;
use kubelet_cri::v1 as cri;
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "rkubelet.test/busybox:1";
const WAIT: Duration = Duration::from_secs(20);

struct Node {
    dir: tempfile::TempDir,
    fake: FakeRuntime,
    /// The wall clock of the kubelet and the fake.
    clock: Clock,
}

struct Running {
    kubelet: Arc<Kubelet>,
    cancel: CancellationToken,
    done: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn new() -> Node {
        Node::with_clock(Clock::System).await
    }

    /// A node whose kubelet and runtime read `clock` (one that follows
    /// tokio's, for a test on paused time).
    async fn with_clock(clock: Clock) -> Node {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
        let fake = FakeRuntime::start_with_clock(
            &dir.path().join("cri.sock"),
            Arc::new(move || clock.now_nanos()),
        )
        .await
        .unwrap();
        fake.add_image(IMAGE);
        std::fs::write(
            dir.path().join("resolv.conf"),
            "nameserver 10.0.0.2\nsearch corp.example\noptions timeout:2\n",
        )
        .unwrap();
        Node { dir, fake, clock }
    }

    fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    /// Where the kubelet's cgroup v1 hierarchies are (plain directories).
    fn cgroups(&self) -> PathBuf {
        self.dir.path().join("cgroup")
    }

    fn write(&self, file: &str, body: &str) {
        // Write then rename, as editors and config tools do.
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, self.manifests().join(file)).unwrap();
    }

    fn remove(&self, file: &str) {
        std::fs::remove_file(self.manifests().join(file)).unwrap();
    }

    fn start(&self) -> Running {
        self.start_with(|_| {})
    }

    /// Start the kubelet with the test configuration, changed by `edit`.
    fn start_with(&self, edit: impl FnOnce(&mut KubeletConfiguration)) -> Running {
        let mut config = KubeletConfiguration {
            static_pod_path: Some(self.manifests()),
            pod_logs_dir: self.dir.path().join("logs"),
            container_runtime_endpoint: self.fake.endpoint(),
            // The host's own figures feed the eviction manager: thresholds
            // it does not reach on a nearly full disk.
            eviction_hard: [("memory.available", "1Mi"), ("nodefs.available", "1%")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
            runtime_request_timeout: Duration::from_secs(5),
            healthz_port: 0,
            port: 0,
            cluster_dns: vec!["10.96.0.10".into()],
            cluster_domain: "cluster.local".into(),
            resolv_conf: self.dir.path().join("resolv.conf").display().to_string(),
            ..Default::default()
        };
        edit(&mut config);
        let mut opts =
            KubeletOptions::from_host(config, self.dir.path().join("root"), "node1".into());
        opts.clock = self.clock;
        opts.cgroups = fake_cgroups(&self.cgroups());
        opts.legacy_logs_dir = self.dir.path().join("containers");
        // Two CPUs, each its own core (the static CPU manager's topology),
        // whatever the host has.
        opts.cpu_topology =
            kubelet_core::cpumanager::Topology::from_sysfs(&[0, 1].into(), &[], |_| None);
        // One NUMA node of 4Gi (the memory manager's), whatever the host has.
        opts.numa_memory = vec![kubelet_core::memorymanager::NodeMemory {
            id: 0,
            memory: 4 << 30,
            hugepages: Vec::new(),
        }];
        // No logind: never the host's.
        opts.logind = LogindAccess {
            bus_address: Some(format!(
                "unix:path={}",
                self.dir.path().join("no-bus").display()
            )),
            conf_dir: self.dir.path().join("logind.conf.d"),
        };
        let cri = CriClient::connect_lazy(&self.fake.endpoint(), Duration::from_secs(5)).unwrap();
        let cancel = CancellationToken::new();
        let boot = Kubelet::build(opts, cri, None, cancel.clone());
        let kubelet = boot.kubelet.clone();
        let done = tokio::spawn(async move { boot.run().await.unwrap() });
        Running {
            kubelet,
            cancel,
            done,
        }
    }

    fn running(&self, name: &str) -> Vec<cri::Container> {
        self.fake
            .containers()
            .into_iter()
            .filter(|c| {
                c.state == cri::ContainerState::ContainerRunning as i32
                    && c.metadata.as_ref().is_some_and(|m| m.name == name)
            })
            .collect()
    }

    fn ready_sandboxes(&self) -> usize {
        self.fake
            .sandboxes()
            .iter()
            .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
            .count()
    }
}

impl Running {
    async fn stop(self) {
        self.cancel.cancel();
        self.done.await.unwrap();
    }

    fn phase(&self, name: &str) -> Option<String> {
        self.kubelet
            .pods_with_status()
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.status)
            .and_then(|s| s.phase)
    }

    /// The waiting reason and message of the named container, if it waits.
    fn waiting(&self, container: &str) -> Option<(String, String)> {
        self.kubelet.pods_with_status().into_iter().find_map(|p| {
            let s = p.status?.container_statuses?;
            let w = s
                .iter()
                .find(|c| c.name == container)?
                .state
                .clone()?
                .waiting?;
            Some((w.reason?, w.message.unwrap_or_default()))
        })
    }

    async fn wait_phase(&self, name: &str, want: &str) {
        eventually(&format!("pod {name} reaches {want}"), || {
            self.phase(name).as_deref() == Some(want)
        })
        .await;
    }
}

/// Await a condition on kubelet state (which has no change feed), checking
/// every 50 ms; fails the test after WAIT.
/// A cgroup v1 file system of plain directories under `dir`: the
/// hierarchies these machines mount.
fn fake_cgroups(dir: &std::path::Path) -> HostCgroups {
    let mounts = ["cpu", "cpuacct", "cpuset", "memory", "pids", "blkio"]
        .iter()
        .map(|c| (c.to_string(), dir.join(c)))
        .collect();
    HostCgroups {
        layout: Some(CgroupLayout::V1 { mounts }),
        hugepage_sizes: vec![2 << 20],
    }
}

async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tick.tick().await;
    }
}

fn pod(name: &str, containers: &[(&str, &str)], extra_spec: &str) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\nspec:\n{extra_spec}  containers:\n"
    );
    for (c, arg) in containers {
        s.push_str(&format!(
            "  - name: {c}\n    image: {IMAGE}\n    command: [\"sh\", \"-c\", \"{arg}\"]\n"
        ));
    }
    s
}

fn restart_count(c: &cri::Container) -> String {
    c.annotations
        .get(keys::CONTAINER_RESTART_COUNT)
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn static_pod_runs_with_upstream_labels_and_status() {
    let node = Node::new().await;
    node.write(
        "web.yaml",
        &pod("web", &[("a", "sleep 1000"), ("b", "sleep 1000")], ""),
    );
    let k = node.start();
    node.fake
        .wait_for("two running containers", WAIT, |f| {
            f.containers()
                .iter()
                .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
                .count()
                == 2
        })
        .await;
    k.wait_phase("web-node1", "Running").await;
    let sb = &node.fake.sandboxes()[0];
    assert_eq!(
        sb.labels.get(keys::POD_NAME).map(String::as_str),
        Some("web-node1")
    );
    assert_eq!(
        sb.labels.get(keys::POD_NAMESPACE).map(String::as_str),
        Some("default")
    );
    assert_eq!(sb.labels.get("app").map(String::as_str), Some("web"));
    let uid = sb.labels.get(keys::POD_UID).cloned().unwrap();
    for c in node.fake.containers() {
        assert_eq!(c.labels.get(keys::POD_UID), Some(&uid));
        assert!(c.annotations.contains_key(keys::CONTAINER_HASH));
        assert_eq!(restart_count(&c), "0");
    }
    let status = k.kubelet.status.get_pod_status(&PodUid(uid)).unwrap();
    let cs = status.container_statuses.as_ref().unwrap();
    assert!(cs.iter().all(|c| c.ready), "{cs:?}");
    assert!(
        status
            .pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.88."))
    );
    assert!(
        node.dir
            .path()
            .join("logs")
            .read_dir()
            .unwrap()
            .next()
            .is_some(),
        "pod log dir created"
    );
    k.stop().await;
}

#[tokio::test]
async fn a_manifest_edit_is_a_new_pod_unless_it_names_its_uid() {
    let node = Node::new().await;
    node.fake.add_image("rkubelet.test/busybox:2");
    node.write(
        "p.yaml",
        &pod("p", &[("a", "sleep 1000"), ("b", "sleep 1000")], ""),
    );
    // A manifest that names its UID stays one pod across edits.
    let named = |image: &str| {
        pod("q", &[("a", "sleep 1000"), ("b", "sleep 1000")], "")
            .replace("  name: q\n", "  name: q\n  uid: q-uid\n")
            .replacen(
                &format!("- name: b\n    image: {IMAGE}"),
                &format!("- name: b\n    image: {image}"),
                1,
            )
    };
    node.write("q.yaml", &named(IMAGE));
    let k = node.start();
    node.fake
        .wait_for("a and b run in both pods", WAIT, |_| {
            node.running("a").len() == 2 && node.running("b").len() == 2
        })
        .await;
    let uid_of = |name: &str| {
        node.fake
            .sandboxes()
            .into_iter()
            .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
            .filter(|s| s.metadata.as_ref().is_some_and(|m| m.name == name))
            .map(|s| s.labels[keys::POD_UID].clone())
            .collect::<Vec<_>>()
    };
    let p_before = uid_of("p-node1");
    let q_a = node
        .running("a")
        .into_iter()
        .find(|c| c.labels[keys::POD_UID] == "q-uid")
        .unwrap()
        .id;

    // p edited: a new pod (a new UID, as upstream's); the old one goes.
    node.write(
        "p.yaml",
        &pod("p", &[("a", "sleep 1000"), ("b", "sleep 2000")], ""),
    );
    node.fake
        .wait_for("p runs anew", WAIT, |_| {
            let now = uid_of("p-node1");
            now.len() == 1 && now != p_before && node.running("b").len() == 2
        })
        .await;
    let p_after = uid_of("p-node1");
    let in_p = |c: &cri::Container| c.labels[keys::POD_UID] == p_after[0];
    assert!(node.running("a").iter().any(in_p) && node.running("b").iter().any(in_p));
    assert!(
        !node
            .fake
            .containers()
            .iter()
            .any(|c| c.labels[keys::POD_UID] == p_before[0]),
        "nothing of the old p is left"
    );

    // q's b gets another image: only b restarts, in the same sandbox.
    node.write("q.yaml", &named("rkubelet.test/busybox:2"));
    node.fake
        .wait_for("q's b restarted", WAIT, |_| {
            node.running("b")
                .iter()
                .any(|b| b.labels[keys::POD_UID] == "q-uid" && restart_count(b) == "1")
        })
        .await;
    assert!(
        node.running("a").iter().any(|c| c.id == q_a),
        "q's a untouched"
    );
    assert_eq!(uid_of("q-node1"), ["q-uid"], "same sandbox");
    k.stop().await;
}

#[tokio::test]
async fn manifest_removal_kills_and_removes_everything() {
    let node = Node::new().await;
    node.write(
        "p.yaml",
        &pod(
            "p",
            &[("a", "sleep 1000")],
            "  terminationGracePeriodSeconds: 3\n",
        ),
    );
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    node.remove("p.yaml");
    node.fake
        .wait_for("nothing left", WAIT, |f| {
            f.containers().is_empty() && f.sandboxes().is_empty()
        })
        .await;
    assert!(node.fake.calls("StopContainer") >= 1);
    k.stop().await;
}

#[tokio::test]
async fn a_broken_manifest_costs_nothing_else() {
    let node = Node::new().await;
    node.write(
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_Name\nspec:\n  containers: []\n",
    );
    node.write("good.yaml", &pod("good", &[("a", "sleep 1000")], ""));
    let k = node.start();
    k.wait_phase("good-node1", "Running").await;
    assert_eq!(node.fake.sandboxes().len(), 1);
    k.stop().await;
}

#[tokio::test]
async fn restart_adopts_running_containers() {
    let node = Node::new().await;
    node.write(
        "p.yaml",
        &pod("p", &[("a", "sleep 1000"), ("b", "sleep 1000")], ""),
    );
    let k = node.start();
    k.wait_phase("p-node1", "Running").await;
    k.stop().await;
    let created = node.fake.calls("CreateContainer");
    let sandboxes = node.fake.calls("RunPodSandbox");

    let k = node.start();
    k.wait_phase("p-node1", "Running").await;
    // Let PLEG relist and housekeeping run a few times before judging.
    let relists = node.fake.calls("ListContainers");
    node.fake
        .wait_for("three more relists", WAIT, |f| {
            f.calls("ListContainers") >= relists + 3
        })
        .await;
    assert_eq!(
        node.fake.calls("CreateContainer"),
        created,
        "no duplicate container"
    );
    assert_eq!(
        node.fake.calls("RunPodSandbox"),
        sandboxes,
        "no duplicate sandbox"
    );
    assert!(
        node.fake
            .containers()
            .iter()
            .all(|c| restart_count(c) == "0")
    );
    k.stop().await;
}

#[tokio::test]
async fn pods_removed_while_down_are_cleaned_up_at_start() {
    let node = Node::new().await;
    node.write("keep.yaml", &pod("keep", &[("a", "sleep 1000")], ""));
    node.write("gone.yaml", &pod("gone", &[("g", "sleep 1000")], ""));
    let k = node.start();
    node.fake
        .wait_for("both run", WAIT, |_| {
            node.running("a").len() == 1 && node.running("g").len() == 1
        })
        .await;
    k.stop().await;
    node.remove("gone.yaml");
    let k = node.start();
    node.fake
        .wait_for("gone's containers removed", WAIT, |f| {
            f.containers()
                .iter()
                .all(|c| c.metadata.as_ref().is_some_and(|m| m.name != "g"))
                && f.sandboxes().len() == 1
        })
        .await;
    assert_eq!(node.running("a").len(), 1, "the wanted pod keeps running");
    k.stop().await;
}

#[tokio::test]
async fn restart_policy_never_ends_the_pod() {
    let node = Node::new().await;
    node.write(
        "job.yaml",
        &pod("job", &[("a", "exit 1")], "  restartPolicy: Never\n"),
    );
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    let id = node.running("a")[0].id.clone();
    assert!(node.fake.exit_container(&id, 1));
    k.wait_phase("job-node1", "Failed").await;
    node.fake
        .wait_for("sandbox stopped", WAIT, |n| {
            n.sandboxes()
                .iter()
                .all(|s| s.state == cri::PodSandboxState::SandboxNotready as i32)
        })
        .await;
    assert_eq!(node.fake.calls("CreateContainer"), 1, "never restarted");
    k.stop().await;
}

#[tokio::test]
async fn fallback_to_logs_on_error_reports_the_unfinished_last_line() {
    let node = Node::new().await;
    let body = pod(
        "msg",
        &[("a", "echo -n DONE; exit 1")],
        "  restartPolicy: Never\n",
    ) + "    terminationMessagePolicy: FallbackToLogsOnError\n";
    node.write("msg.yaml", &body);
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    let c = node.running("a").remove(0);
    // What containerd writes for output without a trailing newline: one
    // partial entry, never completed.
    let uid = &c.labels[keys::POD_UID];
    let log_dir = node
        .dir
        .path()
        .join(format!("logs/default_msg-node1_{uid}/a"));
    std::fs::create_dir_all(&log_dir).unwrap();
    std::fs::write(
        log_dir.join("0.log"),
        "2026-12-01T09:00:00.000000001Z stdout P DONE\n",
    )
    .unwrap();
    assert!(node.fake.exit_container(&c.id, 1));
    k.wait_phase("msg-node1", "Failed").await;
    let pod = k
        .kubelet
        .pods_with_status()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("msg-node1"))
        .unwrap();
    let status = &pod.status.unwrap().container_statuses.unwrap()[0];
    let terminated = status.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(terminated.exit_code, 1);
    assert_eq!(terminated.message.as_deref(), Some("DONE"));
    k.stop().await;
}

#[tokio::test]
async fn fallback_to_logs_on_error_reads_the_file_first_and_no_log_on_success() {
    let node = Node::new().await;
    let fallback = "    terminationMessagePolicy: FallbackToLogsOnError\n";
    let mut body = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: msgs\nspec:\n  restartPolicy: Never\n  containers:\n".to_owned();
    for c in ["file", "quiet"] {
        body += &format!("  - name: {c}\n    image: {IMAGE}\n{fallback}");
    }
    node.write("msgs.yaml", &body);
    let k = node.start();
    node.fake
        .wait_for("both run", WAIT, |_| {
            node.running("file").len() == 1 && node.running("quiet").len() == 1
        })
        .await;
    let file = node.running("file").remove(0);
    let quiet = node.running("quiet").remove(0);
    let uid = &file.labels[keys::POD_UID];
    // `echo -n OK > /dev/termination-log; echo DONE`: the file the
    // container's terminationMessagePath is mounted from, and its log.
    let dir = node
        .dir
        .path()
        .join(format!("root/pods/{uid}/containers/file"));
    let host_file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(host_file, "OK").unwrap();
    let logs = node
        .dir
        .path()
        .join(format!("logs/default_msgs-node1_{uid}"));
    for c in ["file", "quiet"] {
        std::fs::create_dir_all(logs.join(c)).unwrap();
        std::fs::write(
            logs.join(format!("{c}/0.log")),
            "2026-12-01T09:00:00.000000001Z stdout F DONE\n",
        )
        .unwrap();
    }
    assert!(node.fake.exit_container(&file.id, 0));
    assert!(node.fake.exit_container(&quiet.id, 0));
    k.wait_phase("msgs-node1", "Succeeded").await;
    let pod = k
        .kubelet
        .pods_with_status()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("msgs-node1"))
        .unwrap();
    let messages: Vec<(String, Option<String>)> = pod
        .status
        .unwrap()
        .container_statuses
        .unwrap()
        .into_iter()
        .map(|s| {
            let t = s.state.unwrap().terminated.unwrap();
            (s.name, t.message)
        })
        .collect();
    assert_eq!(
        messages,
        [
            ("file".to_owned(), Some("OK".to_owned())),
            ("quiet".to_owned(), None)
        ],
        "the file wins; a success never falls back to the log"
    );
    k.stop().await;
}

#[tokio::test]
async fn a_container_restart_policy_overrides_the_pod_one() {
    let node = Node::new().await;
    // Pod Always, container `once` Never: it runs once and the pod ends;
    // with a rule restarting exit code 42, `rule` runs again.
    node.write(
        "own.yaml",
        &(pod("own", &[("once", "exit 1")], "") + "    restartPolicy: Never\n"),
    );
    node.write(
        "rule.yaml",
        &(pod("rule", &[("r", "exit 42")], "  restartPolicy: Never\n")
            + "    restartPolicy: Never\n    restartPolicyRules:\n    - action: Restart\n      exitCodes: {operator: In, values: [42]}\n"),
    );
    let k = node.start();
    node.fake
        .wait_for("both run", WAIT, |_| {
            node.running("once").len() == 1 && node.running("r").len() == 1
        })
        .await;
    let once = node.running("once").remove(0).id;
    let r = node.running("r").remove(0).id;
    assert!(node.fake.exit_container(&once, 1));
    assert!(node.fake.exit_container(&r, 42));
    node.fake
        .wait_for("r restarted", WAIT, |_| {
            node.running("r")
                .first()
                .is_some_and(|c| restart_count(c) == "1")
        })
        .await;
    k.wait_phase("own-node1", "Failed").await;
    let created_once = node
        .fake
        .containers()
        .iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == "once"))
        .count();
    assert_eq!(created_once, 1, "restartPolicy Never: not restarted");
    assert_eq!(k.phase("rule-node1").as_deref(), Some("Running"));
    k.stop().await;
}

#[tokio::test]
async fn missing_image_under_never_waits_with_err_image_never_pull() {
    let node = Node::new().await;
    let body = pod("np", &[("a", "sleep 1")], "").replace(
        &format!("image: {IMAGE}"),
        "image: rkubelet.test/absent:1\n    imagePullPolicy: Never",
    );
    node.write("np.yaml", &body);
    let k = node.start();
    let reason = || {
        k.kubelet.pods_with_status().into_iter().find_map(|p| {
            p.status?
                .container_statuses?
                .first()?
                .state
                .clone()?
                .waiting?
                .reason
        })
    };
    eventually("waiting reason ErrImageNeverPull", || {
        reason().as_deref() == Some("ErrImageNeverPull")
    })
    .await;
    assert_eq!(node.fake.calls("PullImage"), 0);
    k.stop().await;
}

#[tokio::test]
async fn network_not_ready_holds_pod_networked_pods_only() {
    let node = Node::new().await;
    node.fake.set_network_ready(false);
    node.write(
        "host.yaml",
        &pod("host", &[("hostc", "sleep 1000")], "  hostNetwork: true\n"),
    );
    node.write("net.yaml", &pod("net", &[("netc", "sleep 1000")], ""));
    let k = node.start();
    node.fake
        .wait_for("host-network pod runs", WAIT, |_| {
            node.running("hostc").len() == 1
        })
        .await;
    assert!(
        node.running("netc").is_empty(),
        "pod network pod waits for the network"
    );
    node.fake.set_network_ready(true);
    node.fake
        .wait_for("network pod runs once CNI is ready", WAIT, |_| {
            node.running("netc").len() == 1
        })
        .await;
    k.stop().await;
}

#[tokio::test]
async fn runtime_outage_pauses_sync_and_recovers() {
    let node = Node::new().await;
    node.write("a.yaml", &pod("a", &[("a", "sleep 1000")], ""));
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    node.fake.set_unavailable(true);
    node.write("b.yaml", &pod("b", &[("b", "sleep 1000")], ""));
    eventually("the outage is noticed", || {
        !k.kubelet.runtime_state.runtime_errors().is_empty()
    })
    .await;
    assert!(node.running("b").is_empty());
    node.fake.set_unavailable(false);
    node.fake
        .wait_for("b runs after the outage", WAIT, |_| {
            node.running("b").len() == 1
        })
        .await;
    assert_eq!(node.running("a").len(), 1, "a kept running, not restarted");
    assert_eq!(restart_count(&node.running("a")[0]), "0");
    k.stop().await;
}

#[tokio::test]
async fn crash_between_create_and_start_leaves_no_duplicate() {
    let node = Node::new().await;
    node.fake
        .inject_error("StartContainer", tonic::Code::Unavailable, 1);
    node.write("p.yaml", &pod("p", &[("a", "sleep 1000")], ""));
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    node.fake
        .wait_for("stale created container removed", WAIT, |f| {
            f.containers().len() == 1
        })
        .await;
    k.stop().await;
}

#[tokio::test]
async fn a_crashing_container_backs_off() {
    let node = Node::new().await;
    node.write("crash.yaml", &pod("crash", &[("c", "exit 1")], ""));
    let k = node.start();
    node.fake
        .wait_for("c runs", WAIT, |_| node.running("c").len() == 1)
        .await;
    // The first exit restarts at once…
    assert!(node.fake.exit_container(&node.running("c")[0].id, 1));
    node.fake
        .wait_for("first restart", WAIT, |_| {
            node.running("c")
                .first()
                .is_some_and(|c| restart_count(c) == "1")
        })
        .await;
    // …the second waits out a 10 s back-off, reported as CrashLoopBackOff.
    assert!(node.fake.exit_container(&node.running("c")[0].id, 1));
    let waiting = || {
        k.kubelet.pods_with_status().into_iter().find_map(|p| {
            let w = p
                .status?
                .container_statuses?
                .first()?
                .state
                .clone()?
                .waiting?;
            Some((w.reason?, w.message.unwrap_or_default()))
        })
    };
    eventually("CrashLoopBackOff", || {
        waiting().is_some_and(|(r, _)| r == "CrashLoopBackOff")
    })
    .await;
    let (_, message) = waiting().unwrap();
    assert!(
        message.starts_with("back-off 10s restarting failed container=c pod=crash-node1_default("),
        "{message}"
    );
    assert_eq!(
        node.fake.calls("CreateContainer"),
        2,
        "no restart during the back-off"
    );
    k.stop().await;
}

/// On paused time (the kubelet's and the runtime's wall clocks follow
/// tokio's): a restart in CrashLoopBackOff comes when its back-off ends, 10 s
/// after the second exit, and not before.
#[tokio::test(start_paused = true)]
async fn a_crash_loop_restart_comes_when_its_back_off_ends() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    node.write("crash.yaml", &pod("crash", &[("c", "exit 1")], ""));
    let k = node.start();
    let restarted = |n: &str| {
        node.running("c")
            .first()
            .is_some_and(|c| restart_count(c) == n)
    };
    node.fake
        .wait_for("c runs", WAIT, |_| node.running("c").len() == 1)
        .await;
    assert!(node.fake.exit_container(&node.running("c")[0].id, 1));
    node.fake
        .wait_for("first restart", WAIT, |_| restarted("1"))
        .await;
    assert!(node.fake.exit_container(&node.running("c")[0].id, 1));
    let exited = tokio::time::Instant::now();
    node.fake
        .wait_for("second restart", Duration::from_secs(60), |_| {
            restarted("2")
        })
        .await;
    let waited = exited.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(12),
        "restarted {waited:?} after the exit, for a 10 s back-off"
    );
    k.stop().await;
}

/// On paused time: a pull that fails is not tried again for that pod
/// before its back-off (10 s, then 20 s) has passed; the container waits in
/// ImagePullBackOff with the failed pull's error, and starts once the image
/// can be pulled.
#[tokio::test(start_paused = true)]
async fn a_failed_pull_backs_off_10s_then_20s() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    let missing = "registry.test/missing:1";
    node.write(
        "pull.yaml",
        &pod("pull", &[("c", "sleep 1000")], "").replace(IMAGE, missing),
    );
    let k = node.start();
    let pulls = || node.fake.calls("PullImage");
    node.fake
        .wait_for("the first pull", WAIT, |_| pulls() == 1)
        .await;
    let first = tokio::time::Instant::now();
    eventually("ImagePullBackOff", || {
        k.waiting("c").is_some_and(|(r, _)| r == "ImagePullBackOff")
    })
    .await;
    let (_, message) = k.waiting("c").unwrap();
    assert!(
        message.starts_with(&format!(
            "Back-off pulling image {missing:?}: ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image"
        )),
        "{message}"
    );
    node.fake
        .wait_for("the second pull", Duration::from_secs(60), |_| pulls() == 2)
        .await;
    let second = tokio::time::Instant::now();
    let waited = second - first;
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(12),
        "pulled again {waited:?} after the first failure, for a 10 s back-off"
    );
    node.fake.make_pullable(missing);
    node.fake
        .wait_for(
            "the third pull, which succeeds",
            Duration::from_secs(60),
            |_| node.running("c").len() == 1,
        )
        .await;
    let waited = second.elapsed();
    assert!(
        waited >= Duration::from_secs(20) && waited < Duration::from_secs(22),
        "pulled again {waited:?} after the second failure, for a 20 s back-off"
    );
    assert_eq!(pulls(), 3);
    k.stop().await;
}

/// When the fake runtime finished the named container (its newest instance).
async fn finished_at(node: &Node, name: &str) -> i64 {
    let cri = CriClient::connect_lazy(&node.fake.endpoint(), Duration::from_secs(5)).unwrap();
    let c = node
        .fake
        .containers()
        .into_iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
        .max_by_key(|c| c.created_at)
        .unwrap();
    cri.container_status(&c.id).await.unwrap().finished_at
}

#[tokio::test(start_paused = true)]
async fn a_node_shutdown_stops_the_lower_priority_first() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    // Static pods carry their priority in the manifest; the low one's
    // preStop hook takes its whole grace (2 s, its group's).
    node.write(
        "low.yaml",
        &(pod("low", &[("low", "sleep 3600")], "  priority: 10\n")
            + "    lifecycle:\n      preStop:\n        sleep:\n          seconds: 1000\n"),
    );
    node.write(
        "critical.yaml",
        &pod(
            "critical",
            &[("critical", "sleep 3600")],
            "  priority: 2000000000\n",
        ),
    );
    let k = node.start_with(|cfg| {
        cfg.shutdown_grace_period = Duration::from_secs(4);
        cfg.shutdown_grace_period_critical_pods = Duration::from_secs(2);
    });
    k.wait_phase("low-node1", "Running").await;
    k.wait_phase("critical-node1", "Running").await;
    // What SIGTERM with --shutdown-on-sigterm does (no logind here).
    let began = node.clock.now_nanos();
    k.kubelet.shut_down_node().await;
    for name in ["low-node1", "critical-node1"] {
        let status = k
            .kubelet
            .pods_with_status()
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.status)
            .unwrap();
        assert_eq!(status.phase.as_deref(), Some("Failed"), "{name}");
        assert_eq!(status.reason.as_deref(), Some("Terminated"), "{name}");
    }
    // The critical pod was told to stop only once the low group's 2 s
    // had passed (told at once, it would have stopped at once).
    let (low, critical) = (
        finished_at(&node, "low").await,
        finished_at(&node, "critical").await,
    );
    assert!(low <= critical);
    assert!(
        critical - began >= 2_000_000_000,
        "the critical pod stopped {} ns after the shutdown began",
        critical - began
    );
    k.stop().await;
}

/// podCIDR goes to the runtime (UpdateRuntimeConfig), again after the
/// runtime refused it.
#[tokio::test(start_paused = true)]
async fn the_pod_cidr_reaches_the_runtime_even_after_a_refusal() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    node.fake
        .inject_error("UpdateRuntimeConfig", tonic::Code::Unavailable, 1);
    let k = node.start_with(|cfg| cfg.pod_cidr = "10.244.3.0/24".into());
    node.fake
        .wait_for("the pod CIDR given", WAIT, |f| {
            f.pod_cidr() == "10.244.3.0/24"
        })
        .await;
    assert!(
        node.fake.calls("UpdateRuntimeConfig") >= 2,
        "tried again after the refusal"
    );
    k.stop().await;
}

#[tokio::test]
async fn init_containers_and_sidecars_start_and_stop_in_order() {
    let node = Node::new().await;
    let spec = format!(
        "  initContainers:\n  - name: side\n    image: {IMAGE}\n    restartPolicy: Always\n  - name: init\n    image: {IMAGE}\n"
    );
    node.write("seq.yaml", &pod("seq", &[("main", "sleep 1000")], &spec));
    let k = node.start();
    node.fake
        .wait_for("the sidecar, then the init container", WAIT, |_| {
            node.running("side").len() == 1 && node.running("init").len() == 1
        })
        .await;
    assert!(node.running("main").is_empty(), "main waits for init");
    k.wait_phase("seq-node1", "Pending").await;
    assert!(node.fake.exit_container(&node.running("init")[0].id, 0));
    node.fake
        .wait_for("main starts after init succeeded", WAIT, |_| {
            node.running("main").len() == 1
        })
        .await;
    k.wait_phase("seq-node1", "Running").await;
    let pod = k
        .kubelet
        .pods_with_status()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("seq-node1"))
        .unwrap();
    let status = pod.status.unwrap();
    let init = status.init_container_statuses.unwrap();
    assert_eq!(
        init.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["side", "init"]
    );
    assert!(init[0].started == Some(true) && init[1].ready, "{init:?}");
    // A sidecar that exits is restarted beside the main container.
    assert!(node.fake.exit_container(&node.running("side")[0].id, 1));
    node.fake
        .wait_for("the sidecar restarts", WAIT, |_| {
            node.running("side")
                .first()
                .is_some_and(|c| restart_count(c) == "1")
        })
        .await;
    assert_eq!(node.running("main").len(), 1);
    assert_eq!(
        node.fake.calls("StartContainer"),
        4,
        "side, init, main, side again: init never reran"
    );
    // On removal the main container stops before the sidecar.
    node.remove("seq.yaml");
    node.fake
        .wait_for("everything stopped", WAIT, |f| {
            f.containers()
                .iter()
                .all(|c| c.state != cri::ContainerState::ContainerRunning as i32)
        })
        .await;
    let (main, side) = (
        finished_at(&node, "main").await,
        finished_at(&node, "side").await,
    );
    assert!(main > 0 && side > main, "main {main} then side {side}");
    k.stop().await;
}

/// On paused time: the hook is cut when the 2 s grace period ends, not before
/// and not much later.
#[tokio::test(start_paused = true)]
async fn a_slow_pre_stop_hook_is_cut_at_the_grace_period() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    let body = pod(
        "slow",
        &[("a", "sleep 1000")],
        "  terminationGracePeriodSeconds: 2\n",
    ) + "    lifecycle:\n      preStop:\n        sleep:\n          seconds: 1000\n";
    node.write("slow.yaml", &body);
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    let removed = tokio::time::Instant::now();
    node.remove("slow.yaml");
    node.fake
        .wait_for("a stopped", WAIT, |_| node.running("a").is_empty())
        .await;
    let took = removed.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(3),
        "the preStop hook ran for the 2 s grace period, then the stop ({took:?})"
    );
    k.stop().await;
}

/// On paused time: with `periodSeconds: 1` and `failureThreshold: 2`, the
/// restart comes about two periods after the probe starts failing.
#[tokio::test(start_paused = true)]
async fn a_failing_liveness_probe_restarts_exactly_that_container() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    let body = pod("live", &[("a", "sleep 1000")], "")
        + "    livenessProbe:\n      exec:\n        command: [\"cat\", \"/healthy\"]\n      periodSeconds: 1\n      failureThreshold: 2\n"
        + &format!("  - name: b\n    image: {IMAGE}\n");
    node.write("live.yaml", &body);
    let k = node.start();
    node.fake
        .wait_for("a and b run", WAIT, |_| {
            node.running("a").len() == 1 && node.running("b").len() == 1
        })
        .await;
    let b_id = node.running("b")[0].id.clone();
    // Healthy (the default exec result is exit 0): probed, not restarted.
    node.fake
        .wait_for("a probed", WAIT, |f| {
            f.exec_commands()
                .iter()
                .any(|(c, cmd)| c == "a" && cmd == &["cat", "/healthy"])
        })
        .await;
    node.fake
        .set_exec_result_for("a", 1, b"", b"cat: /healthy: No such file");
    let failing = tokio::time::Instant::now();
    node.fake
        .wait_for("a restarted after its liveness probe failed", WAIT, |_| {
            node.running("a")
                .first()
                .is_some_and(|c| restart_count(c) == "1")
        })
        .await;
    let took = failing.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(4),
        "two failures 1 s apart, then the restart ({took:?})"
    );
    assert_eq!(
        node.running("b").first().map(|c| c.id.clone()),
        Some(b_id),
        "b keeps running"
    );
    assert!(
        node.fake.exec_commands().iter().all(|(c, _)| c == "a"),
        "only a has a probe"
    );
    // Removing the pod stops its probe workers.
    node.remove("live.yaml");
    eventually("no probe worker left", || k.kubelet.probe_workers() == 0).await;
    k.stop().await;
}

#[tokio::test]
async fn a_completed_static_pod_runs_again_after_its_manifest_is_edited() {
    let node = Node::new().await;
    node.write(
        "job.yaml",
        &pod("job", &[("a", "exit 0")], "  restartPolicy: Never\n"),
    );
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    let id = node.running("a")[0].id.clone();
    assert!(node.fake.exit_container(&id, 0));
    k.wait_phase("job-node1", "Succeeded").await;
    let uid = PodUid::from(node.fake.containers()[0].labels[keys::POD_UID].as_str());
    eventually("the pod's worker finished", || {
        k.kubelet
            .workers
            .state(&uid)
            .is_some_and(|s| s.is_finished())
    })
    .await;
    node.write(
        "job.yaml",
        &pod("job", &[("a", "exit 0; v2")], "  restartPolicy: Never\n"),
    );
    node.fake
        .wait_for("a runs again", WAIT, |_| node.running("a").len() == 1)
        .await;
    k.wait_phase("job-node1", "Running").await;
    assert_eq!(node.fake.calls("CreateContainer"), 2, "one new container");
    assert_eq!(node.ready_sandboxes(), 1, "one ready sandbox");
    k.stop().await;
}

#[tokio::test]
async fn pods_are_listed_while_the_runtime_is_down() {
    let node = Node::new().await;
    node.write("p.yaml", &pod("p", &[("a", "sleep 1000")], ""));
    // As after a restart with containerd away: the sources report, the
    // runtime does not answer.
    node.fake.set_unavailable(true);
    let k = node.start();
    eventually("/pods lists the pod its source wants", || {
        k.kubelet
            .pods_with_status()
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("p-node1"))
    })
    .await;
    assert!(
        node.fake.containers().is_empty(),
        "nothing started meanwhile"
    );
    node.fake.set_unavailable(false);
    node.fake
        .wait_for("a runs once the runtime is back", WAIT, |_| {
            node.running("a").len() == 1
        })
        .await;
    k.stop().await;
}

#[tokio::test]
async fn a_dead_sandbox_is_removed_once_a_ready_one_runs() {
    let node = Node::new().await;
    node.write("p.yaml", &pod("p", &[("a", "sleep 1000")], ""));
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    // What an interrupted RunPodSandbox leaves: the pod's newest sandbox,
    // not ready, holding no container.
    let first = node.fake.sandboxes()[0].clone();
    let mut metadata = first.metadata.clone().unwrap();
    metadata.attempt += 1;
    let cri = CriClient::connect_lazy(&node.fake.endpoint(), Duration::from_secs(5)).unwrap();
    let dead = cri
        .run_pod_sandbox(
            cri::PodSandboxConfig {
                metadata: Some(metadata),
                labels: first.labels.clone(),
                annotations: first.annotations.clone(),
                ..Default::default()
            },
            String::new(),
        )
        .await
        .unwrap();
    cri.stop_pod_sandbox(&dead).await.unwrap();
    node.fake
        .wait_for(
            "a ready sandbox again and the dead one removed",
            WAIT,
            |f| {
                f.sandboxes().iter().all(|s| s.id != dead)
                    && f.sandboxes()
                        .iter()
                        .any(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
            },
        )
        .await;
    node.fake
        .wait_for("a runs in the ready sandbox", WAIT, |_| {
            node.running("a").len() == 1
        })
        .await;
    k.stop().await;
}

/// Mounts at or under `dir` in this mount namespace.
fn mounts_under(dir: &std::path::Path) -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| std::path::Path::new(m).starts_with(dir))
        .count()
}

fn is_root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("skipped: mounting needs root");
    }
    root
}

const VOLUMES: &str = "  volumes:
  - name: shared
    emptyDir: {}
  - name: info
    downwardAPI:
      items:
      - path: labels
        fieldRef: {fieldPath: metadata.labels}
";

fn with_mounts(p: &str, mounts: &[(&str, &str, &str)]) -> String {
    // Every container mounts `shared` at /shared and `info` at /info; the
    // named ones add theirs.
    let mut out = String::new();
    for line in p.lines() {
        out.push_str(line);
        out.push('\n');
        if let Some(name) = line.strip_prefix("  - name: ") {
            out.push_str("    volumeMounts:\n    - {name: shared, mountPath: /shared}\n    - {name: info, mountPath: /info}\n");
            for (c, path, sub) in mounts {
                if *c == name {
                    out.push_str(&format!(
                        "    - {{name: shared, mountPath: {path}, subPath: {sub}}}\n"
                    ));
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn volumes_are_mounted_before_the_containers_and_gone_after_the_pod() {
    if !is_root() {
        return;
    }
    let node = Node::new().await;
    let p = with_mounts(
        &pod("v", &[("a", "sleep 1000"), ("b", "sleep 1000")], VOLUMES),
        &[("b", "/logs", "logs/b")],
    );
    node.write("v.yaml", &p);
    let k = node.start();
    node.fake
        .wait_for("a and b run", WAIT, |_| {
            node.running("a").len() == 1 && node.running("b").len() == 1
        })
        .await;
    let pods = node.dir.path().join("root/pods");
    let uid = node.fake.sandboxes()[0].labels[keys::POD_UID].clone();
    let vols = pods.join(&uid).join("volumes");
    let mounts = |c: &str| {
        node.fake
            .container_config(&node.running(c)[0].id)
            .map(|cfg| cfg.mounts)
            .unwrap_or_default()
    };
    let host = |c: &str, path: &str| {
        mounts(c)
            .into_iter()
            .find(|m| m.container_path == path)
            .map(|m| (m.host_path, m.readonly))
    };
    // Both containers share one emptyDir; the downwardAPI volume is
    // read-only, its file written.
    let shared = vols.join("kubernetes.io~empty-dir/shared");
    assert_eq!(
        host("a", "/shared"),
        Some((shared.display().to_string(), false))
    );
    assert_eq!(host("b", "/shared"), host("a", "/shared"));
    let info = vols.join("kubernetes.io~downward-api/info");
    assert_eq!(host("a", "/info"), Some((info.display().to_string(), true)));
    assert_eq!(
        std::fs::read_to_string(info.join("labels")).unwrap(),
        "app=\"v\""
    );
    // b's subPath is a bind mount of a directory made inside the volume.
    let (sub, _) = host("b", "/logs").unwrap();
    assert!(
        sub.starts_with(
            &pods
                .join(&uid)
                .join("volume-subpaths/shared/b")
                .display()
                .to_string()
        )
    );
    assert!(shared.join("logs/b").is_dir());
    let before = mounts_under(&pods);
    assert_eq!(before, 2, "the downwardAPI tmpfs and b's subPath");

    // The kubelet stops (as a kill would leave it) and comes back: the same
    // mounts, no second one. The file removed meanwhile tells when the new
    // kubelet has set the volumes up again.
    k.stop().await;
    std::fs::remove_file(std::fs::canonicalize(info.join("labels")).unwrap()).unwrap();
    let k = node.start();
    eventually("the volumes set up again", || info.join("labels").exists()).await;
    assert_eq!(mounts_under(&pods), before);

    node.remove("v.yaml");
    node.fake
        .wait_for("nothing left", WAIT, |f| {
            f.containers().is_empty() && f.sandboxes().is_empty()
        })
        .await;
    eventually("the pod directory is gone", || !pods.join(&uid).exists()).await;
    assert_eq!(mounts_under(&pods), 0);
    k.stop().await;
}

#[tokio::test]
async fn an_orphaned_pod_directory_is_unmounted_and_removed() {
    if !is_root() {
        return;
    }
    let node = Node::new().await;
    node.write(
        "v.yaml",
        &with_mounts(&pod("v", &[("a", "sleep 1000")], VOLUMES), &[]),
    );
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    let pods = node.dir.path().join("root/pods");
    let uid = node.fake.sandboxes()[0].labels[keys::POD_UID].clone();
    k.stop().await;
    // Removed while the kubelet was down, and its containers gone too (a
    // runtime wiped): only the directory and its mounts are left.
    node.remove("v.yaml");
    let cri = CriClient::connect_lazy(&node.fake.endpoint(), Duration::from_secs(5)).unwrap();
    for s in node.fake.sandboxes() {
        cri.stop_pod_sandbox(&s.id).await.unwrap();
        cri.remove_pod_sandbox(&s.id).await.unwrap();
    }
    assert_eq!(mounts_under(&pods), 1);
    let k = node.start();
    eventually("the orphaned pod directory is gone", || {
        !pods.join(&uid).exists()
    })
    .await;
    assert_eq!(mounts_under(&pods), 0);
    k.stop().await;
}

#[tokio::test]
async fn a_volume_rkubelet_cannot_mount_keeps_its_pod_waiting_and_no_other() {
    let node = Node::new().await;
    node.write(
        "claim.yaml",
        &pod(
            "claim",
            &[("c", "sleep 1000")],
            "  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: data}\n",
        ),
    );
    node.write("ok.yaml", &pod("ok", &[("a", "sleep 1000")], ""));
    let k = node.start();
    k.wait_phase("ok-node1", "Running").await;
    k.wait_phase("claim-node1", "Pending").await;
    let waiting = k
        .kubelet
        .pods_with_status()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("claim-node1"))
        .and_then(|p| {
            p.status?
                .container_statuses?
                .first()?
                .state
                .clone()?
                .waiting
        })
        .and_then(|w| w.reason);
    assert_eq!(waiting.as_deref(), Some("ContainerCreating"));
    assert!(
        node.running("c").is_empty(),
        "no container without its volume"
    );
    k.stop().await;
}

/// What a container is given at start, as upstream's kubelet gives it: its
/// environment (downward API, resources, `$(VAR)` in env and command), the
/// managed /etc/hosts, and the resolver and hostname of its sandbox. A
/// container whose env names an object it cannot have waits with
/// CreateContainerConfigError; its sibling runs.
#[tokio::test]
async fn a_container_is_given_its_env_hosts_file_and_resolver() {
    let node = Node::new().await;
    let spec = "  hostname: h1\n  subdomain: sub\n  hostAliases:\n  - ip: 123.45.67.89\n    hostnames: [foo, bar]\n";
    let body = pod(
        "see",
        &[("a", "echo $(GREETING)"), ("b", "sleep 1000")],
        spec,
    );
    let body = body.replacen(
        "  - name: b\n",
        "    resources:\n      limits: {memory: 64Mi}\n    env:\n    - name: NAME\n      valueFrom: {fieldRef: {fieldPath: metadata.name}}\n    - name: POD_IP\n      valueFrom: {fieldRef: {fieldPath: status.podIP}}\n    - name: HOST_IP\n      valueFrom: {fieldRef: {fieldPath: status.hostIP}}\n    - name: MEM\n      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}\n    - name: GREETING\n      value: hi $(NAME)\n  - name: b\n",
        1,
    ) + "    env:\n    - name: K\n      valueFrom: {configMapKeyRef: {name: cm, key: k}}\n";
    node.write("see.yaml", &body);
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    let cfg = node
        .fake
        .container_config(&node.running("a")[0].id)
        .unwrap();
    let env: Vec<(&str, &str)> = cfg
        .envs
        .iter()
        .map(|kv| (kv.key.as_str(), std::str::from_utf8(&kv.value).unwrap()))
        .collect();
    let pod_ip = env.iter().find(|(k, _)| *k == "POD_IP").unwrap().1;
    let status_ip = || {
        k.kubelet
            .pods_with_status()
            .into_iter()
            .find_map(|p| p.status?.pod_ip)
    };
    eventually("the status has the pod's IP", || status_ip().is_some()).await;
    assert!(!pod_ip.is_empty() && Some(pod_ip) == status_ip().as_deref());
    let host_ip = kubelet::nodestatus::detect_node_ip();
    assert_eq!(
        env,
        [
            ("NAME", "see-node1"),
            ("POD_IP", pod_ip),
            ("HOST_IP", host_ip.as_str()),
            ("MEM", "64"),
            ("GREETING", "hi see-node1"),
        ]
    );
    assert_eq!(cfg.command, ["sh", "-c", "echo hi see-node1"]);
    let hosts = cfg
        .mounts
        .iter()
        .find(|m| m.container_path == "/etc/hosts")
        .expect("/etc/hosts mounted");
    let uid = node.fake.sandboxes()[0].labels[keys::POD_UID].clone();
    let file = node
        .dir
        .path()
        .join("root/pods")
        .join(&uid)
        .join("etc-hosts");
    assert_eq!(hosts.host_path, file.display().to_string());
    let content = std::fs::read_to_string(&file).unwrap();
    assert!(content.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
    assert!(
        content.ends_with(&format!(
            "{pod_ip}\th1.sub.default.svc.cluster.local\th1\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n"
        )),
        "{content}"
    );
    let sandbox = node.fake.sandboxes()[0].id.clone();
    let sb = node.fake.sandbox_config(&sandbox).unwrap();
    assert_eq!(sb.hostname, "h1");
    let dns = sb.dns_config.unwrap();
    assert_eq!(dns.servers, ["10.96.0.10"]);
    assert_eq!(
        dns.searches,
        [
            "default.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "corp.example"
        ]
    );
    assert_eq!(dns.options, ["ndots:5"]);
    // b names a ConfigMap a kubelet without an API server cannot read.
    eventually("b waits", || {
        k.waiting("b")
            .is_some_and(|(r, _)| r == "CreateContainerConfigError")
    })
    .await;
    assert_eq!(
        k.waiting("b").unwrap().1,
        "couldn't get configMap default/cm, no kubeClient defined"
    );
    assert!(node.running("b").is_empty());
    k.stop().await;
}

/// runAsNonRoot is verified against the image's user (the fake's images
/// name none: root), as upstream's kubelet does: the container that asks
/// for it without a runAsUser waits in CreateContainerConfigError, told
/// why; its sibling with a non-root runAsUser runs.
#[tokio::test]
async fn run_as_non_root_refuses_an_image_that_runs_as_root() {
    let node = Node::new().await;
    let body = pod("nr", &[("a", "sleep 1000"), ("b", "sleep 1000")], "").replacen(
        "  - name: b\n",
        "    securityContext: {runAsNonRoot: true}\n  - name: b\n",
        1,
    ) + "    securityContext: {runAsNonRoot: true, runAsUser: 1000}\n";
    node.write("nr.yaml", &body);
    let k = node.start();
    node.fake
        .wait_for("b runs", WAIT, |_| node.running("b").len() == 1)
        .await;
    eventually("a waits", || {
        k.waiting("a")
            .is_some_and(|(r, _)| r == "CreateContainerConfigError")
    })
    .await;
    let (_, message) = k.waiting("a").unwrap();
    assert!(
        message.contains(
            "container has runAsNonRoot and image will run as root (pod: \"nr-node1_default("
        ),
        "{message}"
    );
    assert!(node.running("a").is_empty());
    k.stop().await;
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn pods_run_in_their_qos_cgroups_which_follow_them_and_go_with_them() {
    let node = Node::new().await;
    let burstable = "  containers:\n  - name: b\n    image: rkubelet.test/busybox:1\n    \
                     resources: {requests: {cpu: 250m}, limits: {memory: 64Mi}}\n";
    node.write(
        "b.yaml",
        &format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\nspec:\n{burstable}"),
    );
    node.write(
        "g.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: g\nspec:\n  containers:\n  - name: g\n    \
         image: rkubelet.test/busybox:1\n    resources: {limits: {cpu: 500m, memory: 32Mi}}\n",
    );
    let k = node.start();
    node.fake
        .wait_for("both run", WAIT, |_| {
            node.running("b").len() == 1 && node.running("g").len() == 1
        })
        .await;
    let cg = node.cgroups();
    let kubepods = |c: &str| cg.join(c).join("kubepods");
    let mut parents = std::collections::BTreeMap::new();
    for s in node.fake.sandboxes() {
        let cfg = node.fake.sandbox_config(&s.id).unwrap();
        let parent = cfg.linux.unwrap().cgroup_parent;
        parents.insert(
            cfg.metadata.unwrap().name,
            (s.labels[keys::POD_UID].clone(), parent),
        );
    }
    let (b_uid, b_parent) = &parents["b-node1"];
    let (g_uid, g_parent) = &parents["g-node1"];
    assert_eq!(b_parent, &format!("/kubepods/burstable/pod{b_uid}"));
    assert_eq!(g_parent, &format!("/kubepods/pod{g_uid}"));
    // The pod cgroups' values, as upstream's ResourceConfigForPod.
    let b = |c: &str, f: &str| read(&kubepods(c).join(format!("burstable/pod{b_uid}/{f}")));
    let g = |c: &str, f: &str| read(&kubepods(c).join(format!("pod{g_uid}/{f}")));
    assert_eq!(b("cpu", "cpu.shares"), "256");
    assert_eq!(b("memory", "memory.limit_in_bytes"), "67108864");
    assert_eq!(b("cpu", "cpu.cfs_quota_us"), "", "no cpu limit: no quota");
    assert_eq!(g("cpu", "cpu.shares"), "512");
    assert_eq!(g("cpu", "cpu.cfs_quota_us"), "50000");
    assert_eq!(g("memory", "memory.limit_in_bytes"), "33554432");
    assert!(kubepods("blkio").join(format!("pod{g_uid}")).is_dir());
    // The QoS cgroups: burstable's shares are its pods' requests.
    assert_eq!(read(&kubepods("cpu").join("burstable/cpu.shares")), "256");
    assert_eq!(read(&kubepods("cpu").join("besteffort/cpu.shares")), "2");
    // The node-allocatable cgroup holds the node's capacity.
    assert!(!read(&kubepods("memory").join("memory.limit_in_bytes")).is_empty());
    // A static pod edited is a new pod (upstream's): the new one runs in a
    // cgroup of its own with the new values; the old one's goes, in every
    // hierarchy.
    node.write(
        "b.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\nspec:\n{}",
            burstable.replace("64Mi", "96Mi")
        ),
    );
    let gone = |uid: &str| {
        ["cpu", "memory", "pids", "blkio"]
            .iter()
            .all(|c| !kubepods(c).join(format!("burstable/pod{uid}")).exists())
    };
    eventually("the old b's cgroup is gone", || gone(b_uid)).await;
    let new_b = |s: &cri::PodSandbox| {
        s.state == cri::PodSandboxState::SandboxReady as i32
            && s.metadata.as_ref().is_some_and(|m| m.name == "b-node1")
    };
    node.fake
        .wait_for("the new b runs", WAIT, |_| {
            node.fake.sandboxes().iter().any(new_b)
        })
        .await;
    let new_uid = node
        .fake
        .sandboxes()
        .into_iter()
        .find(new_b)
        .map(|s| s.labels[keys::POD_UID].clone())
        .unwrap();
    assert_ne!(&new_uid, b_uid);
    eventually("the new b's cgroup has the new memory limit", || {
        read(&kubepods("memory").join(format!("burstable/pod{new_uid}/memory.limit_in_bytes")))
            == "100663296"
    })
    .await;
    node.remove("b.yaml");
    eventually("b's cgroup is gone", || gone(&new_uid)).await;
    assert!(kubepods("cpu").join(format!("pod{g_uid}")).is_dir());
    k.stop().await;
}

#[tokio::test]
async fn an_orphaned_pod_cgroup_is_removed_and_a_wanted_one_kept() {
    let node = Node::new().await;
    node.write("p.yaml", &pod("p", &[("a", "sleep 1000")], ""));
    // Left by a pod deleted while the kubelet was down.
    let orphan = node.cgroups().join("memory/kubepods/besteffort/pod0rphan");
    std::fs::create_dir_all(orphan.join("c1")).unwrap();
    let k = node.start();
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    let uid = node.fake.sandboxes()[0].labels[keys::POD_UID].clone();
    eventually("the orphaned pod cgroup is gone", || !orphan.exists()).await;
    assert!(
        node.cgroups()
            .join(format!("memory/kubepods/besteffort/pod{uid}"))
            .is_dir()
    );
    assert_eq!(node.running("a").len(), 1);
    k.stop().await;
}

/// A manifest whose containers `a` and `b` have these cpu and memory
/// requests and limits; `b` restarts on a memory resize.
fn sized(a_cpu: &str, b_memory: &str) -> String {
    // Its own UID: an edit is the same pod (without one it would be a new
    // pod, as upstream's), so resources change in place.
    pod("sized", &[("a", "sleep 1000")], "")
        .replace("  name: sized\n", "  name: sized\n  uid: sized-uid\n")
        + &format!(
            "    resources:\n      requests: {{cpu: {a_cpu}, memory: 64Mi}}\n      limits: {{cpu: {a_cpu}, memory: 64Mi}}\n"
        )
        + &format!(
            "  - name: b\n    image: {IMAGE}\n    command: [\"sh\", \"-c\", \"sleep 1000\"]\n"
        )
        + "    resizePolicy:\n    - {resourceName: memory, restartPolicy: RestartContainer}\n"
        + &format!(
            "    resources:\n      requests: {{cpu: 100m, memory: {b_memory}}}\n      limits: {{cpu: 100m, memory: {b_memory}}}\n"
        )
}

#[tokio::test]
async fn a_resources_edit_resizes_running_containers_in_place_or_restarts_them() {
    let node = Node::new().await;
    node.write("sized.yaml", &sized("500m", "32Mi"));
    let k = node.start();
    node.fake
        .wait_for("a and b run", WAIT, |_| {
            node.running("a").len() == 1 && node.running("b").len() == 1
        })
        .await;
    let (a, b) = (
        node.running("a")[0].id.clone(),
        node.running("b")[0].id.clone(),
    );
    let quota = |id: &str| {
        node.fake
            .container_config(id)
            .and_then(|c| c.linux?.resources)
            .map(|r| (r.cpu_quota, r.memory_limit_in_bytes))
    };
    assert_eq!(quota(&a), Some((50_000, 64 << 20)));

    // a's cpu grows: updated in place, not restarted.
    node.write("sized.yaml", &sized("1", "32Mi"));
    node.fake
        .wait_for("a's quota updated", WAIT, |_| {
            quota(&a) == Some((100_000, 64 << 20))
        })
        .await;
    assert_eq!(node.fake.calls("UpdateContainerResources"), 1);
    assert_eq!(node.running("a")[0].id, a, "a keeps running");
    assert_eq!(restart_count(&node.running("a")[0]), "0");
    assert_eq!(node.running("b")[0].id, b, "b untouched");
    let resources = |name: &str| {
        k.kubelet.pods_with_status().into_iter().find_map(|p| {
            let statuses = p.status?.container_statuses?;
            let s = statuses.into_iter().find(|s| s.name == name)?;
            Some((s.allocated_resources?, s.resources?))
        })
    };
    eventually("a's status shows the new cpu", || {
        resources("a").is_some_and(|(allocated, actual)| {
            allocated["cpu"].0 == "1" && actual.limits.unwrap_or_default()["cpu"].0 == "1"
        })
    })
    .await;
    let conditions = || {
        k.kubelet
            .pods_with_status()
            .into_iter()
            .flat_map(|p| p.status.and_then(|s| s.conditions).unwrap_or_default())
            .map(|c| c.type_)
            .collect::<Vec<_>>()
    };
    eventually("the resize is complete", || {
        !conditions().iter().any(|c| c.starts_with("PodResize"))
    })
    .await;

    // b's memory changes under RestartContainer: a new b with the new limit.
    node.write("sized.yaml", &sized("1", "48Mi"));
    node.fake
        .wait_for("b restarted", WAIT, |_| {
            node.running("b")
                .first()
                .is_some_and(|b| restart_count(b) == "1")
        })
        .await;
    let new_b = node.running("b")[0].id.clone();
    assert_ne!(new_b, b);
    assert_eq!(quota(&new_b), Some((10_000, 48 << 20)));
    assert_eq!(node.running("a")[0].id, a, "a keeps running");
    assert_eq!(node.ready_sandboxes(), 1, "same sandbox");
    k.stop().await;
}

/// The Ready condition the kubelet holds for the named pod, once it has a
/// status with one.
fn ready_condition(k: &Running, name: &str) -> Option<bool> {
    let pod = k
        .kubelet
        .pods_with_status()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))?;
    let conditions = pod.status?.conditions?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    Some(ready.status == "True")
}

/// A restart of the kubelet keeps a ready static pod ready: from its first
/// status after the restart on, Ready never goes False while its probe
/// passes (the prober kept its result on disk); a probe that started
/// failing while the kubelet was down makes it unready within a period.
#[tokio::test(start_paused = true)]
async fn a_restart_keeps_a_ready_static_pod_ready() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    let manifest = pod("r", &[("c", "sleep 1000")], "")
        + "    readinessProbe:\n      exec: {command: [\"true\"]}\n      periodSeconds: 10\n";
    node.write("r.yaml", &manifest);
    let k = node.start();
    eventually("Ready", || ready_condition(&k, "r-node1") == Some(true)).await;
    k.stop().await;

    let probes_before = node.fake.exec_commands().len();
    let k = node.start();
    let watched = tokio::time::Instant::now();
    let mut statuses = 0;
    while watched.elapsed() < Duration::from_secs(25) {
        if let Some(ready) = ready_condition(&k, "r-node1") {
            statuses += 1;
            assert!(
                ready,
                "Ready went False {:?} after the restart",
                watched.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(statuses > 0, "the pod had a status");
    assert!(
        node.fake.exec_commands().len() > probes_before,
        "its probe ran after the restart"
    );
    k.stop().await;

    node.fake.set_exec_result_for("c", 1, b"", b"");
    let k = node.start();
    let restarted = tokio::time::Instant::now();
    eventually("unready", || ready_condition(&k, "r-node1") == Some(false)).await;
    assert!(
        restarted.elapsed() <= Duration::from_secs(11),
        "unready within a period: {:?}",
        restarted.elapsed()
    );
    k.stop().await;
}

/// The exit code the pod's status reports for this container, once it
/// reports it terminated.
fn terminated_exit_code(k: &Running, pod: &str, container: &str) -> Option<i32> {
    k.kubelet
        .pods_with_status()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(pod))?
        .status?
        .container_statuses?
        .into_iter()
        .find(|c| c.name == container)?
        .state?
        .terminated
        .map(|t| t.exit_code)
}

/// On paused time, with the EventedPLEG gate: a container's death comes
/// through the runtime's event stream, and its pod is relisted and synced
/// at once, before the periodic relist (every second) could find it. A
/// death the stream never reports is found by the relist, and counted as
/// drift at the next one; the pod's end, with the stream's events back,
/// adds none.
#[tokio::test(start_paused = true)]
async fn with_evented_pleg_a_death_is_seen_at_once_and_a_missed_one_is_counted() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    node.write(
        "job.yaml",
        &pod(
            "job",
            &[
                ("a", "sleep 1000"),
                ("b", "sleep 1000"),
                ("c", "sleep 1000"),
            ],
            "  restartPolicy: Never\n",
        ),
    );
    let k = node.start_with(|c| {
        c.feature_gates.insert("EventedPLEG".into(), true);
    });
    let m = k.kubelet.opts.metrics.clone();
    node.fake
        .wait_for("a, b and c run", WAIT, |_| {
            ["a", "b", "c"].iter().all(|c| node.running(c).len() == 1)
        })
        .await;
    eventually("the event stream is open", || {
        m.evented_pleg_connections.get(&[]) == 1.0
    })
    .await;
    // Just after a periodic relist, the next is a second away.
    let relists = m.pleg_relist_duration.count(&[]);
    eventually("a periodic relist", || {
        m.pleg_relist_duration.count(&[]) > relists
    })
    .await;
    let pod_relists = m.pleg_pod_relist_duration.count(&[]);
    let died = tokio::time::Instant::now();
    assert!(node.fake.exit_container(&node.running("a")[0].id, 3));
    eventually("a is terminated in the pod's status", || {
        terminated_exit_code(&k, "job-node1", "a") == Some(3)
    })
    .await;
    let seen = died.elapsed();
    assert!(
        seen < kubelet::pleg::RELIST_PERIOD / 2,
        "the death was seen {seen:?} after it: by the periodic relist, not the event"
    );
    assert!(
        m.pleg_pod_relist_duration.count(&[]) > pod_relists,
        "the pod was relisted on its own"
    );
    assert!(m.evented_pleg_connection_latency.count(&[]) > 0);
    assert_eq!(m.evented_pleg_drift.get(&[]), 0.0);

    // A death the stream loses: the relist finds it, and the next one
    // counts it.
    node.fake.pause_container_events(true);
    assert!(node.fake.exit_container(&node.running("b")[0].id, 4));
    eventually("b is terminated in the pod's status", || {
        terminated_exit_code(&k, "job-node1", "b") == Some(4)
    })
    .await;
    eventually("the drift is counted", || {
        m.evented_pleg_drift.get(&[]) == 1.0
    })
    .await;

    // The pod ends with the stream's events back: no more drift, two
    // relists on.
    node.fake.pause_container_events(false);
    node.remove("job.yaml");
    node.fake
        .wait_for("the sandbox is stopped", WAIT, |_| {
            node.ready_sandboxes() == 0
        })
        .await;
    let relists = m.pleg_relist_duration.count(&[]);
    eventually("two more relists", || {
        m.pleg_relist_duration.count(&[]) >= relists + 2
    })
    .await;
    assert_eq!(m.evented_pleg_drift.get(&[]), 1.0);
    assert_eq!(m.evented_pleg_connection_errors.get(&[]), 0.0);
    k.stop().await;
}

/// A runtime whose event stream keeps failing: evented PLEG opens it
/// again, gives up after five ends (upstream's eventedPlegMaxStreamRetries)
/// and the periodic relist alone goes on finding deaths.
#[tokio::test(start_paused = true)]
async fn evented_pleg_gives_up_a_stream_that_keeps_failing() {
    let node = Node::with_clock(Clock::following_tokio()).await;
    node.fake
        .inject_error("GetContainerEvents", tonic::Code::Unimplemented, 100);
    node.write(
        "job.yaml",
        &pod("job", &[("a", "sleep 1000")], "  restartPolicy: Never\n"),
    );
    let k = node.start_with(|c| {
        c.feature_gates.insert("EventedPLEG".into(), true);
    });
    let m = k.kubelet.opts.metrics.clone();
    eventually("five failed streams", || {
        m.evented_pleg_connection_errors.get(&[]) == 5.0
    })
    .await;
    node.fake
        .wait_for("a runs", WAIT, |_| node.running("a").len() == 1)
        .await;
    assert!(node.fake.exit_container(&node.running("a")[0].id, 3));
    eventually("a is terminated in the pod's status", || {
        terminated_exit_code(&k, "job-node1", "a") == Some(3)
    })
    .await;
    assert_eq!(
        node.fake.calls("GetContainerEvents"),
        5,
        "given up after five"
    );
    assert_eq!(m.evented_pleg_connections.get(&[]), 0.0);
    k.stop().await;
}

/// The PodResources API on `<root-dir>/pod-resources/kubelet.sock`, as a
/// monitoring agent reads it: List gives the running pod with its
/// sidecar and containers (nothing allocated: no device plugin, no
/// exclusive CPU), Get one pod by name and upstream's error for another,
/// GetAllocatableResources nothing; 30 calls at once overflow the bucket
/// (10 at once, 100 a second), and those refused are refused as upstream's.
#[tokio::test]
async fn the_pod_resources_api_lists_the_pods_and_limits_its_callers() {
    use kubelet_plugin_api::podresources as api;
    use kubelet_plugin_api::podresources::pod_resources_lister_client::PodResourcesListerClient;

    let node = Node::new().await;
    let spec = format!(
        "  initContainers:\n  - name: proxy\n    image: {IMAGE}\n    restartPolicy: Always\n  - name: setup\n    image: {IMAGE}\n"
    );
    node.write("web.yaml", &pod("web", &[("app", "sleep 1000")], &spec));
    let k = node.start();
    node.fake
        .wait_for("the setup init container", WAIT, |_| {
            node.running("setup").len() == 1
        })
        .await;
    assert!(node.fake.exit_container(&node.running("setup")[0].id, 0));
    k.wait_phase("web-node1", "Running").await;
    let socket = node.dir.path().join("root/pod-resources/kubelet.sock");
    let channel = kubelet_plugin_api::unix_channel(socket, Duration::from_secs(5));
    let mut client = PodResourcesListerClient::new(channel);

    let list = client
        .list(api::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.pod_resources.len(), 1, "{list:?}");
    let web = &list.pod_resources[0];
    assert_eq!(
        (web.name.as_str(), web.namespace.as_str()),
        ("web-node1", "default")
    );
    let names: Vec<&str> = web.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["proxy", "app"]);

    let got = client
        .get(api::GetPodResourcesRequest {
            pod_name: "web-node1".into(),
            pod_namespace: "default".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pod_resources.as_ref(), Some(web));
    let missing = client
        .get(api::GetPodResourcesRequest {
            pod_name: "nope".into(),
            pod_namespace: "default".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::Unknown);
    assert_eq!(missing.message(), "pod nope in namespace default not found");
    let allocatable = client
        .get_allocatable_resources(api::AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(allocatable, api::AllocatableResourcesResponse::default());

    let calls = (0..30).map(|_| {
        let mut client = client.clone();
        async move { client.list(api::ListPodResourcesRequest {}).await }
    });
    let answers = futures::future::join_all(calls).await;
    let refused: Vec<&tonic::Status> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    let served = answers.len() - refused.len();
    assert!(!refused.is_empty() && served >= 1, "{served} served");
    for e in refused {
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert_eq!(e.message(), "rejected by rate limit");
    }
    // Counted once let through: the 4 calls above and those served.
    let m = &k.kubelet.opts.metrics;
    assert_eq!(
        m.pod_resources_requests_total.get(&["v1"]),
        4.0 + served as f64
    );
    assert_eq!(m.pod_resources_requests_get.get(&["v1"]), 2.0);
    assert_eq!(m.pod_resources_errors_get.get(&["v1"]), 1.0);
    k.stop().await;
}

/// A static pod asking for a device plugin's resource starts with what
/// the plugin's Allocate answered (its environment, mount, annotation and
/// CDI device); the kubelet restarted keeps the container and its devices;
/// a second pod takes the other device, and a third, for which none is
/// left, waits with upstream's message.
#[tokio::test]
async fn a_pod_starts_with_its_device_plugins_devices() {
    use kubelet_plugin_api::fake::{FakeDevicePlugin, healthy};
    let node = Node::new().await;
    let k = node.start();
    let dir = node.dir.path().join("root/device-plugins");
    eventually("the registration socket", || {
        dir.join("kubelet.sock").exists()
    })
    .await;
    let plugin = FakeDevicePlugin::new("example.com/gpu", healthy(&["g1", "g2"]));
    plugin.start(&dir, "gpu.sock").await.unwrap();
    let gpu_pod = |name: &str| {
        pod(name, &[("app", "sleep 1000")], "")
            + "    resources:\n      limits: {example.com/gpu: 1}\n"
    };
    node.write("gpu1.yaml", &gpu_pod("gpu1"));
    node.fake
        .wait_for("app runs", WAIT, |_| node.running("app").len() == 1)
        .await;
    let first = node.running("app")[0].clone();
    let cfg = node.fake.container_config(&first.id).unwrap();
    let env: Vec<(&str, &[u8])> = cfg
        .envs
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_slice()))
        .collect();
    assert_eq!(
        env[0],
        ("DEVICES", &b"g1"[..]),
        "the plugin's env first: {env:?}"
    );
    let mount = cfg
        .mounts
        .iter()
        .find(|m| m.container_path == "/dev/fake/g1")
        .expect("the plugin's mount");
    assert_eq!(
        (mount.host_path.as_str(), mount.readonly),
        ("/tmp/g1", true)
    );
    assert_eq!(
        cfg.annotations.get("fake/allocated").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        cfg.cdi_devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["example.com/gpu=CDI-g1"]
    );
    assert_eq!(*plugin.allocations.lock(), vec![vec!["g1"]]);
    // A restart: the same container, no new allocation. The kubelet
    // removes the plugin's socket; the plugin registers again on a new
    // one, as upstream's plugins do on seeing kubelet.sock made again.
    k.stop().await;
    let k = node.start();
    eventually("the old socket removed", || !dir.join("gpu.sock").exists()).await;
    plugin.start(&dir, "gpu-2.sock").await.unwrap();
    node.write("gpu2.yaml", &gpu_pod("gpu2"));
    node.fake
        .wait_for("a second app runs", WAIT, |_| {
            node.running("app").len() == 2
        })
        .await;
    assert!(node.running("app").iter().any(|c| c.id == first.id));
    assert_eq!(*plugin.allocations.lock(), vec![vec!["g1"], vec!["g2"]]);
    node.write("gpu3.yaml", &gpu_pod("gpu3"));
    eventually("the third pod waits for a device", || {
        k.waiting("app").is_some_and(|(reason, message)| {
            reason == "CreateContainerConfigError"
                && message
                    == "requested number of devices unavailable for example.com/gpu. Requested: 1, Available: 0"
        })
    })
    .await;
    // The first pod goes: its device is freed, and the third gets it.
    node.remove("gpu1.yaml");
    node.fake
        .wait_for("the third pod's app runs", WAIT, |_| {
            node.running("app").len() == 2 && !node.running("app").iter().any(|c| c.id == first.id)
        })
        .await;
    assert_eq!(
        *plugin.allocations.lock(),
        vec![vec!["g1"], vec!["g2"], vec!["g1"]]
    );
    k.stop().await;
}

/// The Static memory manager: a Guaranteed pod's container is created with
/// its memory's NUMA node as its cpuset.mems (a static pod's given at
/// creation), the others with the runtime's default; the state file holds
/// its block in upstream's format, and one too big for the node waits with
/// CreateContainerConfigError naming the field.
#[tokio::test]
async fn a_guaranteed_containers_memory_is_pinned_to_its_numa_node() {
    let node = Node::new().await;
    let k = node.start_with(|c| {
        c.memory_manager_policy = "Static".into();
        c.kube_reserved = [("memory".to_owned(), 127 << 20)].into();
        c.reserved_memory = vec![kubelet_core::config::MemoryReservation {
            numa_node: 0,
            limits: [("memory".to_owned(), "128Mi".to_owned())].into(),
        }];
    });
    let mems = |id: &str| {
        node.fake
            .container_config(id)
            .and_then(|c| c.linux?.resources)
            .map(|r| r.cpuset_mems)
            .unwrap_or_default()
    };
    node.write("shared.yaml", &pod("shared", &[("app", "sleep 1000")], ""));
    let guaranteed = |name: &str, memory: &str| {
        pod(name, &[(name, "sleep 1000")], "")
            + &format!("    resources:\n      limits: {{cpu: 1, memory: {memory}}}\n")
    };
    node.write("pinned.yaml", &guaranteed("pinned", "64Mi"));
    node.fake
        .wait_for("both run", WAIT, |_| {
            node.running("app").len() == 1 && node.running("pinned").len() == 1
        })
        .await;
    assert_eq!(mems(&node.running("pinned")[0].id), "0");
    assert_eq!(mems(&node.running("app")[0].id), "");
    let state = std::fs::read_to_string(node.dir.path().join("root/memory_manager_state")).unwrap();
    assert!(
        state.contains(r#"":{"pinned":[{"numaAffinity":[0],"type":"memory","size":67108864}]}"#),
        "{state}"
    );
    node.write("huge.yaml", &guaranteed("huge", "5Gi"));
    eventually("the huge container waits", || {
        k.waiting("huge").is_some_and(|(reason, message)| {
            reason == "CreateContainerConfigError"
                && message.contains("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")
        })
    })
    .await;
    k.stop().await;
}

/// The static CPU manager: a Guaranteed pod's container with one whole CPU
/// is created on CPU 1 alone, the other containers' cpuset shrinks to the
/// reserved CPU 0 at the next reconcile and grows back once the pod is
/// gone; the state file says so in upstream's format.
#[tokio::test]
async fn a_guaranteed_container_gets_a_cpu_of_its_own_and_the_others_shrink() {
    let node = Node::new().await;
    let k = node.start_with(|c| {
        c.cpu_manager_policy = "static".into();
        c.cpu_manager_reconcile_period = Duration::from_millis(100);
        c.kube_reserved = [("cpu".to_owned(), 500)].into();
    });
    let cpuset = |id: &str| {
        node.fake
            .container_config(id)
            .and_then(|c| c.linux?.resources)
            .map(|r| r.cpuset_cpus)
            .unwrap_or_default()
    };
    node.write("shared.yaml", &pod("shared", &[("app", "sleep 1000")], ""));
    node.fake
        .wait_for("app runs", WAIT, |_| node.running("app").len() == 1)
        .await;
    let shared = node.running("app")[0].id.clone();
    assert_eq!(cpuset(&shared), "0-1");
    node.write(
        "pinned.yaml",
        &(pod("pinned", &[("pinned", "sleep 1000")], "")
            + "    resources:\n      limits: {cpu: 1, memory: 64Mi}\n"),
    );
    node.fake
        .wait_for("pinned runs", WAIT, |_| node.running("pinned").len() == 1)
        .await;
    assert_eq!(cpuset(&node.running("pinned")[0].id), "1");
    node.fake
        .wait_for("the shared pool shrinks", WAIT, |_| cpuset(&shared) == "0")
        .await;
    let state = std::fs::read_to_string(node.dir.path().join("root/cpu_manager_state")).unwrap();
    assert!(
        state.starts_with(r#"{"policyName":"static","defaultCpuSet":"0","entries":{""#)
            && state.contains(r#"":{"pinned":"1"}}"#),
        "{state}"
    );
    node.remove("pinned.yaml");
    node.fake
        .wait_for("the shared pool grows back", WAIT, |_| {
            cpuset(&shared) == "0-1"
        })
        .await;
    k.stop().await;
}
