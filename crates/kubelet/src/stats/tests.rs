use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kubelet_core::metrics::format_float;
use kubelet_core::testing::PodBuilder;
use kubelet_cri::client::CriClient;
use kubelet_cri::fake::{FakeContainerStats, FakeRuntime};
use serde_json::{Value, json};

use super::fs::MAX_WALK_DEPTH;
use super::*;

const SEC: i64 = 1_000_000_000;
/// Sample time of the runtime's container stats.
const T0: i64 = 1_700_000_050 * SEC + 123_456_789;

struct TestView {
    cri: CriClient,
    pods: Vec<Pod>,
    logs_root: PathBuf,
    root_dir: PathBuf,
    cgroups: Option<PodCgroups>,
    /// Claim volumes by pod UID; CSI ones report `csi_stats`.
    claims: HashMap<String, Vec<ClaimVolume>>,
    csi_stats: Option<FsStats>,
}

impl StatsView for TestView {
    fn node_name(&self) -> String {
        "node-1".into()
    }
    fn pods(&self) -> Vec<Pod> {
        self.pods.clone()
    }
    fn cri(&self) -> CriClient {
        self.cri.clone()
    }
    fn logs_root(&self) -> PathBuf {
        self.logs_root.clone()
    }
    fn root_dir(&self) -> PathBuf {
        self.root_dir.clone()
    }
    fn pod_cgroups(&self) -> Option<PodCgroups> {
        self.cgroups.clone()
    }
    fn claim_volumes(&self, uid: &str) -> Vec<ClaimVolume> {
        self.claims.get(uid).cloned().unwrap_or_default()
    }
    fn csi_volume_stats<'a>(
        &'a self,
        _driver: &'a str,
        _handle: &'a str,
        _target: &'a Path,
        _at: SystemTime,
    ) -> BoxFuture<'a, Option<FsStats>> {
        Box::pin(async { self.csi_stats.clone() })
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// /proc/stat with this many busy ticks (user + system).
fn proc_stat(busy_ticks: u64) -> String {
    format!(
        "cpu  {} 0 {} 9000 50 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\nbtime 1700000000\n",
        busy_ticks - 766,
        766
    )
}

/// A fake host: procfs and a cgroup v1 memory root under `dir`.
fn fake_host(dir: &Path, with_memory_cgroup: bool) -> HostPaths {
    let proc = dir.join("proc");
    write(&proc.join("stat"), &proc_stat(2000));
    write(
        &proc.join("meminfo"),
        "MemTotal: 1000000 kB\nMemFree: 400000 kB\nMemAvailable: 500000 kB\n\
         AnonPages: 100000 kB\nInactive(file): 200000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
    );
    write(&proc.join("vmstat"), "pgfault 70\npgmajfault 7\n");
    write(
        &proc.join("net/dev"),
        "Inter-| Receive | Transmit\n face |bytes packets|bytes packets\n\
         lo: 9 9 0 0 0 0 0 0 9 9 0 0 0 0 0 0\n\
         eth0: 1000 10 1 0 0 0 0 0 2000 20 2 0 0 0 0 0\n\
         ens5: 5000 50 0 0 0 0 0 0 6000 60 0 0 0 0 0 0\n",
    );
    write(
        &proc.join("net/route"),
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n\
         ens5\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
    );
    write(&proc.join("loadavg"), "0.10 0.20 0.30 2/321 4567\n");
    write(&proc.join("sys/kernel/pid_max"), "4194304\n");
    write(&proc.join("sys/kernel/threads-max"), "190000\n");
    let memory_cgroup = dir.join("cgroup/memory");
    if with_memory_cgroup {
        write(&memory_cgroup.join("memory.usage_in_bytes"), "600000000\n");
        write(
            &memory_cgroup.join("memory.stat"),
            "cache 1\ntotal_inactive_file 100000000\ntotal_rss 50000000\n\
             total_pgfault 10\ntotal_pgmajfault 1\n",
        );
    }
    HostPaths {
        proc,
        memory_cgroup,
    }
}

/// A settable clock starting at `start`.
fn clock(start: SystemTime) -> (Clock, Arc<Mutex<SystemTime>>) {
    let now = Arc::new(Mutex::new(start));
    let reader = now.clone();
    (Arc::new(move || *reader.lock()), now)
}

struct Fixture {
    fake: FakeRuntime,
    view: TestView,
    provider: StatsProvider,
    now: Arc<Mutex<SystemTime>>,
    /// The running container "app" of pod default/web.
    app: String,
    dir: tempfile::TempDir,
}

fn sandbox_config() -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "web".into(),
            uid: "uid-web".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        log_directory: "/var/log/pods/default_web_uid-web".into(),
        ..Default::default()
    }
}

async fn start_container(cri: &CriClient, sandbox: &str, name: &str) -> String {
    let config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        log_path: format!("{name}/0.log"),
        ..Default::default()
    };
    let id = cri
        .create_container(sandbox, config, sandbox_config())
        .await
        .unwrap();
    cri.start_container(&id).await.unwrap();
    id
}

/// Pod default/web with a running "app" (stats set at T0) and an exited
/// "init"; pod default/idle known to the kubelet only.
async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
        .await
        .unwrap();
    fake.add_image("busybox");
    let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5)).unwrap();
    let sandbox = cri
        .run_pod_sandbox(sandbox_config(), String::new())
        .await
        .unwrap();
    let app = start_container(&cri, &sandbox, "app").await;
    let init = start_container(&cri, &sandbox, "init").await;
    assert!(fake.exit_container(&init, 0));
    fake.set_container_stats(
        &app,
        FakeContainerStats {
            timestamp: T0,
            usage_core_nano_seconds: 1_500_000_000,
            working_set_bytes: 2_000_000,
            usage_bytes: 3_000_000,
            rss_bytes: 1_000_000,
            writable_layer_bytes: 4096,
            writable_layer_inodes: 3,
        },
    );
    let logs_root = dir.path().join("pods");
    write(
        &logs_root.join("default_web_uid-web/app/0.log"),
        "2024-01-01T00:00:00Z stdout F hello\n",
    );
    let idle = PodBuilder::new("idle")
        .namespace("default")
        .uid("uid-idle")
        .status(PodStatus {
            start_time: Some(Time(Timestamp::from_second(1_700_000_010).unwrap())),
            ..Default::default()
        })
        .build();
    let view = TestView {
        cri,
        pods: vec![idle],
        logs_root,
        root_dir: dir.path().to_path_buf(),
        cgroups: None,
        claims: HashMap::new(),
        csi_stats: None,
    };
    let (clock, now) = clock(UNIX_EPOCH + Duration::from_millis(1_700_000_100_500));
    let provider = StatsProvider::with_host(fake_host(dir.path(), true), clock, 100);
    Fixture {
        fake,
        view,
        provider,
        now,
        app,
        dir,
    }
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

fn set(names: &[&'static str]) -> BTreeSet<&'static str> {
    names.iter().copied().collect()
}

#[tokio::test]
async fn full_summary_has_upstream_fields() {
    let f = fixture().await;
    let s = f.provider.summary(&f.view, false).await.unwrap();

    let node = &s["node"];
    assert_eq!(
        keys(node),
        set(&[
            "nodeName",
            "startTime",
            "cpu",
            "memory",
            "network",
            "fs",
            "runtime",
            "rlimit",
            "swap"
        ])
    );
    assert_eq!(node["nodeName"], "node-1");
    assert_eq!(node["startTime"], "2023-11-14T22:13:20Z");
    // 2000 ticks at 100 Hz; no rate on the first sample.
    assert_eq!(
        node["cpu"],
        json!({"time": "2023-11-14T22:15:00Z", "usageCoreNanoSeconds": 20_000_000_000_u64})
    );
    assert_eq!(
        node["memory"],
        json!({
            "time": "2023-11-14T22:15:00Z",
            "availableBytes": 1_024_000_000 - 500_000_000,
            "usageBytes": 600_000_000,
            "workingSetBytes": 500_000_000,
            "rssBytes": 50_000_000,
            "pageFaults": 10,
            "majorPageFaults": 1,
        })
    );
    assert_eq!(
        node["network"],
        json!({
            "time": "2023-11-14T22:15:00Z",
            "name": "ens5", "rxBytes": 5000, "rxErrors": 0, "txBytes": 6000, "txErrors": 0,
            "interfaces": [
                {"name": "eth0", "rxBytes": 1000, "rxErrors": 1, "txBytes": 2000, "txErrors": 2},
                {"name": "ens5", "rxBytes": 5000, "rxErrors": 0, "txBytes": 6000, "txErrors": 0},
            ],
        })
    );
    let fs_keys = set(&[
        "time",
        "availableBytes",
        "capacityBytes",
        "usedBytes",
        "inodesFree",
        "inodes",
        "inodesUsed",
    ]);
    assert_eq!(keys(&node["fs"]), fs_keys);
    assert!(node["fs"]["capacityBytes"].as_u64().unwrap() > 0);
    assert_eq!(keys(&node["runtime"]), set(&["imageFs", "containerFs"]));
    assert_eq!(node["runtime"]["imageFs"]["usedBytes"], 0);
    assert_eq!(node["runtime"]["imageFs"], node["runtime"]["containerFs"]);
    assert_eq!(
        node["rlimit"],
        json!({"time": "2023-11-14T22:15:00Z", "maxpid": 190000, "curproc": 321})
    );
    assert_eq!(
        node["swap"],
        json!({"time": "2023-11-14T22:15:00Z", "swapUsageBytes": 0})
    );

    let pods = s["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 2, "{s}");
    // The kubelet's pod without anything running: reference and start time only.
    assert_eq!(
        pods[0],
        json!({
            "podRef": {"name": "idle", "namespace": "default", "uid": "uid-idle"},
            "startTime": "2023-11-14T22:13:30Z",
            "containers": [],
        })
    );
    let web = &pods[1];
    assert_eq!(
        keys(web),
        set(&[
            "podRef",
            "startTime",
            "containers",
            "cpu",
            "memory",
            "ephemeral-storage",
            "swap"
        ])
    );
    assert_eq!(
        web["podRef"],
        json!({"name": "web", "namespace": "default", "uid": "uid-web"})
    );
    // Only the running container.
    let containers = web["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "{web}");
    let app = &containers[0];
    assert_eq!(
        keys(app),
        set(&[
            "name",
            "startTime",
            "cpu",
            "memory",
            "rootfs",
            "logs",
            "swap"
        ])
    );
    assert_eq!(app["name"], "app");
    assert_eq!(
        app["cpu"],
        json!({"time": "2023-11-14T22:14:10Z", "usageCoreNanoSeconds": 1_500_000_000})
    );
    assert_eq!(
        app["memory"],
        json!({
            "time": "2023-11-14T22:14:10Z",
            "usageBytes": 3_000_000,
            "workingSetBytes": 2_000_000,
            "rssBytes": 1_000_000,
            "pageFaults": 0,
            "majorPageFaults": 0,
        })
    );
    assert_eq!(app["rootfs"]["usedBytes"], 4096);
    assert_eq!(app["rootfs"]["inodesUsed"], 3);
    assert_eq!(keys(&app["logs"]), fs_keys);
    assert_eq!(app["logs"]["inodesUsed"], 2);
    let log_bytes = app["logs"]["usedBytes"].as_u64().unwrap();
    assert!(log_bytes > 0, "{app}");
    // Pod figures: the sums of its containers'.
    assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 1_500_000_000);
    assert_eq!(web["cpu"]["usageNanoCores"], 0);
    assert_eq!(web["memory"]["workingSetBytes"], 2_000_000);
    assert_eq!(web["ephemeral-storage"]["usedBytes"], 4096 + log_bytes);
    assert_eq!(web["ephemeral-storage"]["inodesUsed"], 5);
    assert_eq!(
        web["swap"],
        json!({"time": "2023-11-14T22:15:00Z", "swapAvailableBytes": 0, "swapUsageBytes": 0})
    );
    drop(f.dir);
}

/// A cgroup v1 directory `rel` under the cpuacct and memory
/// hierarchies in `root`, with this CPU time, memory usage (of which
/// 1 MB inactive file pages), limit and processes.
fn fake_cgroup(root: &Path, rel: &str, cpu_ns: u64, usage: u64, limit: u64, procs: &str) {
    let cpu = root.join("cpuacct").join(rel);
    let memory = root.join("memory").join(rel);
    write(&cpu.join("cpuacct.usage"), &format!("{cpu_ns}\n"));
    write(&cpu.join("cgroup.procs"), procs);
    write(&memory.join("memory.usage_in_bytes"), &format!("{usage}\n"));
    write(&memory.join("memory.limit_in_bytes"), &format!("{limit}\n"));
    write(
        &memory.join("memory.stat"),
        "total_inactive_file 1000000\ntotal_rss 500000\ntotal_pgfault 40\n\
         total_pgmajfault 4\n",
    );
}

#[tokio::test]
async fn pod_and_container_usage_come_from_their_cgroups() {
    let mut f = fixture().await;
    let root = f.dir.path().join("cgroup");
    let pod = "kubepods/burstable/poduid-web";
    // The pod cgroup holds the sandbox too: more than its one container.
    fake_cgroup(
        &root,
        pod,
        5_000_000_000,
        10_000_000,
        9_223_372_036_854_771_712,
        "",
    );
    let app = format!("{pod}/{}", f.app);
    fake_cgroup(&root, &app, 3_000_000_000, 8_000_000, 64 << 20, "12\n13\n");
    // The node-allocatable cgroup, limited to allocatable memory.
    fake_cgroup(&root, "kubepods", 7_000_000_000, 21_000_000, 1 << 30, "");
    f.view.cgroups = Some(PodCgroups {
        layout: CgroupLayout::V1 {
            mounts: [
                ("cpuacct".to_owned(), root.join("cpuacct")),
                ("memory".to_owned(), root.join("memory")),
            ]
            .into(),
        },
        qos: kubelet_core::cgroups::QosCgroups::new("/"),
    });

    let s = f.provider.summary(&f.view, false).await.unwrap();
    // kubepods as the `pods` system container (allocatableMemory.available).
    let system = &s["node"]["systemContainers"];
    assert_eq!(system.as_array().map(Vec::len), Some(1), "{system}");
    assert_eq!(system[0]["name"], "pods");
    assert_eq!(system[0]["cpu"]["usageCoreNanoSeconds"], 7_000_000_000u64);
    assert_eq!(system[0]["memory"]["workingSetBytes"], 20_000_000);
    assert_eq!(
        system[0]["memory"]["availableBytes"],
        (1 << 30) - 20_000_000
    );
    let web = &s["pods"][1];
    assert_eq!(web["podRef"]["name"], "web");
    assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 5_000_000_000u64);
    assert_eq!(web["memory"]["usageBytes"], 10_000_000);
    assert_eq!(web["memory"]["workingSetBytes"], 9_000_000);
    assert_eq!(web["memory"]["rssBytes"], 500_000);
    // No limit on the pod cgroup: nothing available to report.
    assert!(web["memory"].get("availableBytes").is_none(), "{web}");
    assert_eq!(web["process_stats"]["process_count"], 2);
    let c = &web["containers"][0];
    assert_eq!(c["name"], "app");
    // The cgroup's figures, not the runtime's (1.5 s, 2 MB).
    assert_eq!(c["cpu"]["usageCoreNanoSeconds"], 3_000_000_000u64);
    assert_eq!(c["memory"]["workingSetBytes"], 7_000_000);
    assert_eq!(c["memory"]["availableBytes"], (64 << 20) - 7_000_000);
    assert_eq!(c["memory"]["pageFaults"], 40);
    // The writable layer is still the runtime's.
    assert_eq!(c["rootfs"]["usedBytes"], 4096);
    assert_eq!(f.fake.calls("ListContainerStats"), 1);

    // Ten seconds and two CPU-seconds later the readings are kept
    // (younger than SUMMARY_MAX_AGE): nothing is read again.
    *f.now.lock() += Duration::from_secs(10);
    fake_cgroup(
        &root,
        pod,
        7_000_000_000,
        10_000_000,
        9_223_372_036_854_771_712,
        "",
    );
    fake_cgroup(&root, &app, 4_000_000_000, 8_000_000, 64 << 20, "12\n");
    let s = f.provider.summary(&f.view, false).await.unwrap();
    assert_eq!(
        s["pods"][1]["cpu"]["usageCoreNanoSeconds"],
        5_000_000_000u64
    );
    assert_eq!(f.fake.calls("ListContainerStats"), 1);
    // Twenty seconds after the first reading: read again; 0.1 cores for
    // the pod, 0.05 for its container.
    *f.now.lock() += Duration::from_secs(10);
    let s = f.provider.summary(&f.view, true).await.unwrap();
    let web = &s["pods"][1];
    assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 7_000_000_000u64);
    assert_eq!(web["cpu"]["usageNanoCores"], 100_000_000);
    assert_eq!(web["containers"][0]["cpu"]["usageNanoCores"], 50_000_000);
    assert_eq!(web["process_stats"]["process_count"], 1);
    // CPU and memory alone need nothing of the runtime but its lists.
    assert_eq!(f.fake.calls("ListContainerStats"), 1);
    let text = f.provider.resource_metrics(&f.view).await;
    assert!(
        text.contains("pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 7 "),
        "{text}"
    );
    assert_eq!(f.fake.calls("ListContainerStats"), 1);

    // A container whose cgroup is gone (it just stopped) keeps the
    // runtime's figures, asked again as they are SUMMARY_MAX_AGE old;
    // the pod's own cgroup still counts.
    std::fs::remove_dir_all(root.join("cpuacct").join(&app)).unwrap();
    *f.now.lock() += SUMMARY_MAX_AGE;
    let s = f.provider.summary(&f.view, false).await.unwrap();
    let web = &s["pods"][1];
    assert_eq!(
        web["containers"][0]["cpu"]["usageCoreNanoSeconds"],
        1_500_000_000u64
    );
    assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 7_000_000_000u64);
    assert!(web.get("process_stats").is_none(), "{web}");
    assert_eq!(f.fake.calls("ListContainerStats"), 2);
    // The eviction manager's reading always asks.
    f.provider.get(&f.view).await.unwrap();
    assert_eq!(f.fake.calls("ListContainerStats"), 3);
}

#[tokio::test]
async fn usage_nano_cores_from_two_samples() {
    let f = fixture().await;
    let first = f.provider.summary(&f.view, true).await.unwrap();
    assert!(first["node"]["cpu"].get("usageNanoCores").is_none());

    // Ten seconds later: the container used 5 more core-seconds, the node 7.5.
    f.fake.set_container_stats(
        &f.app,
        FakeContainerStats {
            timestamp: T0 + 10 * SEC,
            usage_core_nano_seconds: 6_500_000_000,
            working_set_bytes: 2_000_000,
            ..Default::default()
        },
    );
    *f.now.lock() += Duration::from_secs(10);
    write(&f.dir.path().join("proc/stat"), &proc_stat(2750));
    let second = f.provider.summary(&f.view, true).await.unwrap();
    assert_eq!(second["node"]["cpu"]["usageNanoCores"], 750_000_000);
    let web = &second["pods"][1];
    assert_eq!(web["containers"][0]["cpu"]["usageNanoCores"], 500_000_000);
    assert_eq!(web["cpu"]["usageNanoCores"], 500_000_000);

    // CPU and memory only: no file system, network, logs or swap.
    assert_eq!(
        keys(&second["node"]),
        set(&["nodeName", "startTime", "cpu", "memory", "swap"])
    );
    assert_eq!(
        keys(web),
        set(&["podRef", "startTime", "containers", "cpu", "memory"])
    );
    assert_eq!(
        keys(&web["containers"][0]),
        set(&["name", "startTime", "cpu", "memory"])
    );

    // /metrics/resource takes no samples: the next rate is still over the
    // ten seconds since the second summary (2.5 core-seconds: a quarter core).
    f.fake.set_container_stats(
        &f.app,
        FakeContainerStats {
            timestamp: T0 + 20 * SEC,
            usage_core_nano_seconds: 9_000_000_000,
            ..Default::default()
        },
    );
    f.provider.resource_metrics(&f.view).await;
    let third = f.provider.summary(&f.view, true).await.unwrap();
    assert_eq!(
        third["pods"][1]["containers"][0]["cpu"]["usageNanoCores"],
        250_000_000
    );
    // A counter that went backwards (restart) gives no rate.
    f.fake.set_container_stats(
        &f.app,
        FakeContainerStats {
            timestamp: T0 + 30 * SEC,
            usage_core_nano_seconds: 1,
            ..Default::default()
        },
    );
    let fourth = f.provider.summary(&f.view, true).await.unwrap();
    let cpu = &fourth["pods"][1]["containers"][0]["cpu"];
    assert!(cpu.get("usageNanoCores").is_none(), "{cpu}");
}

#[tokio::test]
async fn resource_metrics_golden() {
    let f = fixture().await;
    let created = f
        .fake
        .containers()
        .into_iter()
        .find(|c| c.id == f.app)
        .unwrap()
        .created_at;
    let start = format_float(created as f64 / 1e9);
    let want = format!(
        "\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{{container=\"app\",namespace=\"default\",pod=\"web\"}} 1.5 1700000050123
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{{container=\"app\",namespace=\"default\",pod=\"web\"}} 2e+06 1700000050123
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{{container=\"app\",namespace=\"default\",pod=\"web\"}} {start}
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 20 1700000100500
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 5e+08 1700000100500
# HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
# TYPE node_swap_usage_bytes gauge
node_swap_usage_bytes 0 1700000100500
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{{namespace=\"default\",pod=\"web\"}} 1.5 1700000050123
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{{namespace=\"default\",pod=\"web\"}} 2e+06 1700000050123
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"
    );
    assert_eq!(f.provider.resource_metrics(&f.view).await, want);
}

#[tokio::test]
async fn runtime_failure() {
    let f = fixture().await;
    f.fake.set_unavailable(true);
    assert_eq!(
        f.provider.resource_metrics(&f.view).await,
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n\
         # TYPE resource_scrape_error gauge\n\
         resource_scrape_error 1\n"
    );
    let cases = [
        (
            true,
            "containers",
            "failed to get containers from the container runtime: CRI ListContainers: Unavailable",
        ),
        (
            false,
            "imageFs stats",
            "failed to get imageFs stats from the container runtime: CRI ImageFsInfo: Unavailable",
        ),
    ];
    for (only_cpu_and_memory, want_what, want_message) in cases {
        let err = f
            .provider
            .summary(&f.view, only_cpu_and_memory)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StatsError::Cri { what, .. } if what == want_what),
            "{err:?}"
        );
        assert!(err.to_string().starts_with(want_message), "{err}");
    }
}

/// The parsers understand this machine's own /proc and cgroup files.
#[tokio::test]
async fn reads_this_host() {
    let provider = StatsProvider::new();
    let now = SystemTime::now();
    let node = provider.node_stats(now, true).await.unwrap();
    let memory = node.memory.unwrap();
    assert!(memory.working_set_bytes.unwrap() > 0);
    assert!(node.cpu.unwrap().usage_core_nano_seconds.unwrap() > 0);
    assert!(node.start_time.unwrap() < now);
    provider.network_stats(now).await.unwrap();
    let rlimit = provider.rlimit_stats(now).await;
    assert!(rlimit.max_pid.unwrap() > 0);
    assert!(rlimit.num_of_running_processes.unwrap() > 0);
}

#[tokio::test]
async fn node_memory_sources_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (clock, _) = clock(UNIX_EPOCH + Duration::from_secs(1_700_000_100));
    // Without a cgroup v1 memory controller: /proc/meminfo and /proc/vmstat.
    let host = fake_host(dir.path(), false);
    let provider = StatsProvider::with_host(host.clone(), clock.clone(), 100);
    let node = provider.node_stats(UNIX_EPOCH, true).await.unwrap();
    let memory = node.memory.unwrap();
    let kib = 1024;
    assert_eq!(memory.usage_bytes, Some(600_000 * kib));
    assert_eq!(memory.working_set_bytes, Some(400_000 * kib));
    assert_eq!(memory.rss_bytes, Some(100_000 * kib));
    assert_eq!(memory.page_faults, Some(70));

    // A missing or garbled /proc file names itself.
    std::fs::write(host.proc.join("meminfo"), "MemTotal: x kB\n").unwrap();
    let err = provider.node_stats(UNIX_EPOCH, true).await.unwrap_err();
    assert!(err.to_string().contains("/proc/meminfo"), "{err}");
    std::fs::remove_file(host.proc.join("stat")).unwrap();
    let err = provider.node_stats(UNIX_EPOCH, true).await.unwrap_err();
    assert!(
        matches!(&err, StatsError::Read { path, .. } if path.ends_with("proc/stat")),
        "{err:?}"
    );
}

/// A pod's emptyDir and configMap volumes: measured on disk, counted in
/// its ephemeral storage (a memory emptyDir is not), reported under
/// `volume`, and walked again only after VOLUME_STATS_PERIOD.
#[tokio::test]
async fn volumes_are_measured_at_most_once_a_period() {
    use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, EmptyDirVolumeSource, Volume};
    let mut f = fixture().await;
    let volume = |name: &str, medium: Option<&str>| Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: medium.map(Into::into),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cfg = Volume {
        name: "cfg".into(),
        config_map: Some(ConfigMapVolumeSource::default()),
        ..Default::default()
    };
    f.view.pods.push(
        PodBuilder::new("web")
            .namespace("default")
            .uid("uid-web")
            .volumes([volume("scratch", None), volume("mem", Some("Memory")), cfg])
            .build(),
    );
    let vols = f.dir.path().join("pods/uid-web/volumes");
    let kib8 = "x".repeat(8192);
    write(&vols.join("kubernetes.io~empty-dir/scratch/a"), &kib8);
    write(&vols.join("kubernetes.io~empty-dir/mem/a"), &kib8);
    write(&vols.join("kubernetes.io~configmap/cfg/key"), "v");
    let web = |s: &Summary| {
        s.pods
            .iter()
            .find(|p| p.pod_ref.uid == "uid-web")
            .cloned()
            .unwrap()
    };
    let used = |p: &PodStats, name: &str| {
        p.volume_stats
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.fs.used_bytes)
            .unwrap()
    };
    let first = web(&f.provider.get(&f.view).await.unwrap());
    let names: Vec<&str> = first.volume_stats.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["scratch", "mem", "cfg"]);
    let scratch = used(&first, "scratch");
    assert!(scratch >= 8192, "{scratch}");
    assert_eq!(first.volume_stats[0].fs.inodes_used, Some(2));
    let containers: u64 = first
        .containers
        .iter()
        .filter(|c| c.rootfs.is_some())
        .map(|c| {
            c.rootfs.as_ref().and_then(|r| r.used_bytes).unwrap_or(0)
                + c.logs.as_ref().and_then(|l| l.used_bytes).unwrap_or(0)
        })
        .sum();
    assert_eq!(
        first.ephemeral_storage.as_ref().unwrap().used_bytes,
        Some(containers + scratch + used(&first, "cfg")),
        "the memory emptyDir is not ephemeral storage"
    );
    let json = serde_json::to_value(&first).unwrap();
    assert_eq!(json["volume"][0]["name"], "scratch");
    assert_eq!(json["volume"][0]["usedBytes"], scratch);

    write(&vols.join("kubernetes.io~empty-dir/scratch/b"), &kib8);
    let again = web(&f.provider.get(&f.view).await.unwrap());
    assert_eq!(used(&again, "scratch"), scratch, "not walked again yet");
    *f.now.lock() += VOLUME_STATS_PERIOD;
    let later = web(&f.provider.get(&f.view).await.unwrap());
    assert!(used(&later, "scratch") >= scratch + 8192, "walked again");

    // volumeStatsAggPeriod 5s: walked again 5 s later.
    f.provider = std::mem::take(&mut f.provider).with_volume_period(Duration::from_secs(5));
    let now = used(&web(&f.provider.get(&f.view).await.unwrap()), "scratch");
    write(&vols.join("kubernetes.io~empty-dir/scratch/c"), &kib8);
    *f.now.lock() += Duration::from_secs(5);
    let soon = web(&f.provider.get(&f.view).await.unwrap());
    assert!(
        used(&soon, "scratch") >= now + 8192,
        "walked again after 5 s"
    );
}

/// A pod's claim volumes: a local PV measured by statfs, a CSI volume by
/// its driver, each with its `pvcRef`, and each claim once in
/// `kubelet_volume_stats_*`; a driver that gives no stats leaves its
/// volume out, as upstream's.
#[tokio::test]
async fn claim_volumes_are_reported_with_their_claims_and_in_metrics() {
    let mut f = fixture().await;
    f.view.pods.push(
        PodBuilder::new("web")
            .namespace("default")
            .uid("uid-web")
            .build(),
    );
    let local = f
        .dir
        .path()
        .join("pods/uid-web/volumes/kubernetes.io~local-volume/pv-a");
    std::fs::create_dir_all(&local).unwrap();
    let claim = |name: &str, pvc: &str, measure: Measure| ClaimVolume {
        name: name.into(),
        namespace: "default".into(),
        claim: pvc.into(),
        measure,
    };
    let csi = |handle: &str| Measure::Csi {
        driver: "d".into(),
        handle: handle.into(),
        target: PathBuf::from(format!("/t/{handle}")),
    };
    f.view.claims.insert(
        "uid-web".into(),
        vec![
            claim("data", "data-db", Measure::Statfs(local.clone())),
            claim("logs", "logs-db", csi("h1")),
        ],
    );
    f.view.csi_stats = Some(FsStats {
        time: UNIX_EPOCH,
        available_bytes: Some(300),
        capacity_bytes: Some(1000),
        used_bytes: Some(700),
        inodes_free: Some(9),
        inodes: Some(10),
        inodes_used: Some(1),
    });
    let summary = f.provider.get(&f.view).await.unwrap();
    let db = summary
        .pods
        .iter()
        .find(|p| p.pod_ref.uid == "uid-web")
        .unwrap();
    let json = serde_json::to_value(db).unwrap();
    let volumes = json["volume"].as_array().unwrap();
    assert_eq!(volumes.len(), 2, "{volumes:?}");
    assert_eq!(volumes[0]["name"], "data");
    assert_eq!(
        volumes[0]["pvcRef"],
        json!({"name": "data-db", "namespace": "default"})
    );
    let fs = statvfs(&local).unwrap();
    assert_eq!(volumes[0]["capacityBytes"], fs.capacity_bytes);
    assert_eq!(volumes[1]["pvcRef"]["name"], "logs-db");
    assert_eq!(volumes[1]["usedBytes"], 700);
    assert_eq!(volumes[1]["inodesUsed"], 1);
    // Claim volumes are not the pod's ephemeral storage.
    assert!(db.volume_stats.iter().all(|v| !v.local_ephemeral));
    let text = f.provider.volume_metrics_text();
    assert!(text.contains(
        "# HELP kubelet_volume_stats_used_bytes [ALPHA] Number of used bytes in the volume\n# TYPE kubelet_volume_stats_used_bytes gauge\n"
    ), "{text}");
    assert!(
        text.contains(r#"kubelet_volume_stats_used_bytes{namespace="default",persistentvolumeclaim="logs-db"} 700"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kubelet_volume_stats_inodes_free{namespace="default",persistentvolumeclaim="logs-db"} 9"#),
        "{text}"
    );
    assert!(
        text.contains(r#"persistentvolumeclaim="data-db""#),
        "{text}"
    );
    // A driver without stats: its volume is left out.
    f.view.csi_stats = None;
    f.view
        .claims
        .insert("uid-web".into(), vec![claim("logs", "logs-db", csi("h2"))]);
    let summary = f.provider.get(&f.view).await.unwrap();
    let db = summary
        .pods
        .iter()
        .find(|p| p.pod_ref.uid == "uid-web")
        .unwrap();
    assert!(db.volume_stats.is_empty());
    assert_eq!(f.provider.volume_metrics_text(), "");
}

/// The volume walk counts what is in the tree and nothing a symlink
/// points at (here `/`).
#[test]
fn a_volume_walk_never_follows_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let kib8 = "x".repeat(8192);
    write(&dir.path().join("a"), &kib8);
    write(&dir.path().join("d/b"), &kib8);
    std::os::unix::fs::symlink("/", dir.path().join("d/escape")).unwrap();
    let (bytes, inodes) = tree_usage(dir.path()).unwrap();
    // The top, a, d, d/b and the link itself.
    assert_eq!(inodes, 5);
    assert!((16384..1 << 20).contains(&bytes), "{bytes}");
    // A chain deeper than MAX_WALK_DEPTH is counted down to it.
    let mut deep = dir.path().join("deep");
    for _ in 0..200 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    let (_, inodes) = tree_usage(&dir.path().join("deep")).unwrap();
    assert_eq!(inodes, 1 + MAX_WALK_DEPTH as u64);
    // A link given as the volume itself is counted as a link.
    let (_, inodes) = tree_usage(&dir.path().join("d/escape")).unwrap();
    assert_eq!(inodes, 1);
}

/// With PodAndContainerStatsFromCRI the pod is the runtime's sandbox stats:
/// its network and process count (which the cgroup path has no figure for
/// here), its CPU and memory at the sandbox's sample time; its container
/// still the runtime's. A runtime without ListPodSandboxStats is asked
/// once, then the cgroup path is taken.
#[tokio::test]
async fn with_stats_from_cri_the_pod_is_its_sandbox_stats() {
    let mut f = fixture().await;
    f.provider = std::mem::take(&mut f.provider).with_cri_pod_stats(true);
    let s = f.provider.summary(&f.view, false).await.unwrap();
    let web = &s["pods"][1];
    assert_eq!(web["podRef"]["name"], "web", "{s}");
    assert_eq!(
        web["network"]["interfaces"],
        json!([{"name": "eth0", "rxBytes": 0, "rxErrors": 0, "txBytes": 0, "txErrors": 0}]),
        "{web}"
    );
    assert_eq!(web["network"]["name"], "eth0");
    // The running app: the exited init has no process.
    assert_eq!(web["process_stats"], json!({"process_count": 1}));
    assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 1_500_000_000);
    assert_eq!(web["memory"]["workingSetBytes"], 2_000_000);
    assert_ne!(
        web["cpu"]["time"], web["containers"][0]["cpu"]["time"],
        "the sandbox's own sample, not the sum of its containers': {web}"
    );
    assert_eq!(web["containers"][0]["name"], "app");
    assert_eq!(web["containers"][0]["rootfs"]["usedBytes"], 4096);
    assert_eq!(f.fake.calls("ListContainerStats"), 0);

    let unimplemented = fixture().await;
    let provider = StatsProvider::with_host(
        fake_host(unimplemented.dir.path(), true),
        Arc::new(SystemTime::now),
        100,
    )
    .with_cri_pod_stats(true);
    unimplemented
        .fake
        .inject_error("ListPodSandboxStats", tonic::Code::Unimplemented, 1);
    for _ in 0..2 {
        let s = provider.summary(&unimplemented.view, false).await.unwrap();
        let web = &s["pods"][1];
        assert!(web.get("network").is_none(), "{web}");
        assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 1_500_000_000);
    }
    assert_eq!(unimplemented.fake.calls("ListPodSandboxStats"), 1);
}

/// `/metrics/cadvisor` with PodAndContainerStatsFromCRI: the machine's
/// families and the runtime's metrics under its descriptors, their labels
/// sorted and their timestamps kept.
#[tokio::test]
async fn with_stats_from_cri_cadvisor_metrics_are_the_runtimes() {
    let mut f = fixture().await;
    f.provider = std::mem::take(&mut f.provider).with_cri_pod_stats(true);
    let text = f.provider.cadvisor_metrics(&f.view).await;
    assert!(text.contains("# TYPE machine_cpu_cores gauge\n"), "{text}");
    assert!(
        text.contains("# HELP container_cpu_usage_seconds_total Cumulative CPU time consumed in seconds.\n# TYPE container_cpu_usage_seconds_total counter\n"),
        "{text}"
    );
    let line = |family: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{family}{{")))
            .unwrap_or_else(|| panic!("no {family} sample: {text}"))
            .to_owned()
    };
    let want = format!(
        "{{container=\"app\",id=\"{}\",image=\"busybox\",namespace=\"default\",pod=\"web\"}} 1 ",
        f.app
    );
    assert!(
        line("container_cpu_usage_seconds_total").contains(&want),
        "{text}"
    );
    assert!(
        line("container_memory_working_set_bytes").contains("pod=\"web\"} 2e+06 "),
        "{text}"
    );
    // The cgroup walk's families are not there.
    assert!(!text.contains("container_scrape_error"), "{text}");
    // Asked once.
    f.provider.cadvisor_metrics(&f.view).await;
    assert_eq!(f.fake.calls("ListMetricDescriptors"), 1);
}
