//! `rkubelet-bench cluster`: rkubelet and the upstream kubelet side by side,
//! one at a time, as the same node of the same control plane, on the same
//! containerd. Pods are created through the API server with `spec.nodeName`
//! set (the scheduler is bypassed, so its latency is not measured), and a
//! watch of the API server says when each pod is Running.
//!
//!     rkubelet-bench cluster --rkubelet PATH --upstream PATH --cluster-dir DIR
//!                            --node NAME --endpoint unix://SOCK
//!                            [--serial N] [--bursts 20,100] [--steady SECS]
//!                            [--rest SECS] [--settle SECS] [--timeout SECS]
//!                            [--probes N] [--log-flood N]
//!                            [--csi N --csi-mock PATH --csi-provisioner PATH]
//!                            [--deaths N] [--evented[=false]]
//!                            [--scrape[=false] | --no-scrape]
//!                            [--view[=false] | --no-view]
//!                            [--evict[=false] | --no-evict]
//!                            [--only rkubelet|upstream] [--work DIR]
//!
//! `DIR` is what `hack/cluster.sh up NODE` made: admin.conf,
//! kubelet-NODE.conf, pki/ca.crt, pki/apiserver-kubelet-client.{crt,key}
//! (the scrape's client certificate) and, with RKUBELET_AUDIT=1, audit.log
//! (the API requests per minute need it). Per kubelet:
//!
//!   0. the runtime's floor, with no kubelet running: N pods made one at a
//!      time straight through the CRI (RunPodSandbox, CreateContainer,
//!      StartContainer), so the table shows each kubelet's overhead above it;
//!   1. start it, time until the Node is Ready;
//!   2. settle, then a window with 0 pods: RSS, CPU and the node's API
//!      requests (audit log);
//!   3. a warm-up pod, then N pods one at a time: create → watch sees Running;
//!   4. per burst size M: create M pods at once, time to all Running and CPU
//!      meanwhile; settle; a steady window (RSS, CPU, API requests); with
//!      the largest M (and `--scrape`, the default), a second steady window
//!      while GET /metrics and GET /stats/summary are scraped every second
//!      from the kubelet's HTTPS port as the API server's kubelet client
//!      (one keep-alive connection per path, as Prometheus and
//!      metrics-server keep theirs): their latency p50/p99, body sizes,
//!      the kubelet's RSS and CPU; delete them and wait until they are gone;
//!   5. with `--view` (the default), the pod view: one pod that uses every
//!      kind of env reference, hostAliases, a hostname and a dnsConfig
//!      prints its env, /etc/hosts, resolv.conf and hostname; the table's
//!      end lists what differs between the kubelets (the pod's IP aside);
//!   6. with `--probes N`, N pods with exec and httpGet probes every second:
//!      a steady window (RSS, CPU, API requests; RSS per probe against the
//!      steady window of as many pods unprobed; the probes run and failed,
//!      from the kubelet's /metrics/probes, and the window's event writes
//!      per failed probe), and the API requests of the whole phase from the
//!      burst on (the window alone hides the burst's failures, and events
//!      that the spam filter, having spent a pod's tokens then, drops later);
//!   7. with `--csi N` (10 by default) and the CSI mock driver's and
//!      external-provisioner's binaries (`--csi-mock`, `--csi-provisioner`),
//!      N pods one at a time each with a CSI claim provisioned and bound
//!      before its clock starts (crate::csi): create → Running;
//!   8. with `--deaths N`, N pods one at a time whose container ends 2 s
//!      after it starts (restartPolicy Never): from its end (the CRI's
//!      finishedAt) to the watch seeing it terminated. `--evented` runs
//!      both kubelets with the EventedPLEG gate, so that the figure is the
//!      event stream's rather than the periodic relist's;
//!   9. with `--log-flood N` (10 by default), N pods each writing 1 MB/s
//!      of log lines: a steady window (RSS, CPU, API requests) with both
//!      kubelets on the default rotation settings (containerLogMaxSize
//!      10Mi, containerLogMaxFiles 5, every 10 s), the most log bytes one
//!      container kept meanwhile, then the startup of 5 more pods one at a
//!      time under the flood (p50, beside the serial p50 without it);
//!   10. once every burst's and probed pod is gone, a window at rest again:
//!       the RSS the kubelet gave back;
//!   11. with `--evict` (the default), the eviction phase: restart it with
//!       `kernelMemcgNotification: true` and a memory.available threshold
//!       400 MiB below what the node has, then run a BestEffort pod that
//!       fills 800 MiB of a memory-backed emptyDir; the time from the
//!       threshold crossed (the bench reads the root memory cgroup as the
//!       kubelets do, every 10 ms) to the pod's SIGTERM (its trap writes a
//!       file, whose mtime says when);
//!   12. delete its pods, stop it, delete the Node and its Lease, and remove
//!       from the runtime whatever of the bench's pods it left.
//!
//! Every window's API requests are listed by verb and resource after the
//! table. Only prints figures; exits 1 if a kubelet failed its run (the other one's
//! column is still printed).

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kubelet_cri::client::CriClient;
use kubelet_cri::v1 as cri;

use crate::csi;
use crate::kubelet::Kubelet;
use crate::podview;
use crate::procfs::{self, mib};
use crate::scrape::{self, Endpoint};

const NAMESPACE: &str = "default";
/// Every bench pod has this label (value "1") and a name starting with
/// [`POD_PREFIX`].
const LABEL: &str = "rkubelet-bench";
const POD_PREFIX: &str = "rkb-";
const IMAGE: &str = "rkubelet.test/busybox:1";
const POLL: Duration = Duration::from_millis(5);
const CRI_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the end of a kubelet's run waits for its pods to go away.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a burst's delete may take until all its pods are gone.
const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(90);
/// The eviction phase: its threshold this far below the node's available
/// memory, and its pod filling twice as much.
const EVICT_MARGIN_MIB: u64 = 400;
const EVICT_FILL_MIB: u64 = 800;
/// How long after a restart the eviction phase waits before its pod: more
/// than one eviction monitoring period (10 s), so that both kubelets' managers
/// have run a pass and registered their memcg notifiers.
const EVICT_WARMUP: Duration = Duration::from_secs(12);
/// How long the eviction phase waits for the SIGTERM.
const EVICT_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the eviction phase reads the node's memory and looks for the
/// pod's SIGTERM file.
const EVICT_SAMPLE: Duration = Duration::from_millis(10);
/// The group of the eviction phase's pod.
const EVICT_GROUP: &str = "evict";
/// rkubelet's HTTPS port: the default `port`, which its config leaves unset.
const RKUBELET_PORT: u16 = 10250;

const USAGE: &str = "usage: rkubelet-bench cluster --rkubelet PATH --upstream PATH \
    --cluster-dir DIR --node NAME --endpoint unix://SOCK [--serial N] [--bursts 20,100] \
    [--steady SECS] [--rest SECS] [--settle SECS] [--timeout SECS] [--probes N] [--log-flood N] \
    [--csi N --csi-mock PATH --csi-provisioner PATH] [--deaths N] [--evented[=false]] \
    [--scrape[=false] | --no-scrape] [--view[=false] | --no-view] \
    [--evict[=false] | --no-evict] [--only rkubelet|upstream] \
    [--work DIR]";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Rkubelet,
    Upstream,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Rkubelet => "rkubelet",
            Which::Upstream => "upstream kubelet",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Which::Rkubelet => "rkubelet",
            Which::Upstream => "upstream",
        }
    }
}

#[derive(Debug)]
struct Args {
    rkubelet: PathBuf,
    upstream: PathBuf,
    cluster_dir: PathBuf,
    node: String,
    endpoint: String,
    serial: usize,
    bursts: Vec<usize>,
    steady: Duration,
    rest: Duration,
    settle: Duration,
    timeout: Duration,
    /// Pods of the probe phase, each with an exec and an httpGet probe
    /// every second (0: no probe phase).
    probes: usize,
    /// Pods of the log flood phase, each writing 1 MB/s (0: none).
    log_flood: usize,
    /// Pods of the CSI phase, one at a time (0: none), and the binaries
    /// it runs (without them, no CSI phase).
    csi: usize,
    csi_mock: Option<PathBuf>,
    csi_provisioner: Option<PathBuf>,
    /// Pods of the death phase, one at a time (0: none).
    deaths: usize,
    /// Both kubelets run with the EventedPLEG gate.
    evented: bool,
    /// Scrape /metrics and /stats/summary every second with the largest
    /// burst's pods running.
    scrape: bool,
    /// The pod view (what a pod sees of itself under each kubelet).
    view: bool,
    /// The eviction phase: threshold crossed → SIGTERM.
    evict: bool,
    only: Option<Which>,
    work: Option<PathBuf>,
}

impl Args {
    /// Bursts or a probe phase run, so a window at rest follows once their
    /// pods are deleted.
    fn rests_after_deletes(&self) -> bool {
        !self.bursts.is_empty() || self.probes > 0 || self.log_flood > 0
    }
}

/// The value of a boolean flag: `--flag` alone is true, `--flag=VALUE`
/// is VALUE (true or false).
fn bool_flag(name: &str, inline: Option<&str>) -> anyhow::Result<bool> {
    match inline {
        None | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(v) => bail!("{name}={v:?}: true or false"),
    }
}

fn parse_args(argv: Vec<String>) -> anyhow::Result<Args> {
    let mut rkubelet = None;
    let mut upstream = None;
    let mut cluster_dir = None;
    let mut node = None;
    let mut endpoint = None;
    let mut serial = 30;
    let mut bursts = vec![20, 100];
    let mut steady = Duration::from_secs(60);
    let mut rest = Duration::from_secs(60);
    let mut settle = Duration::from_secs(10);
    let mut timeout = Duration::from_secs(180);
    let mut probes = 100;
    let mut log_flood = 10;
    let mut csi = 10;
    let mut csi_mock = None;
    let mut csi_provisioner = None;
    let mut deaths = 0;
    let mut evented = false;
    let mut scrape = true;
    let mut view = true;
    let mut evict = true;
    let mut only = None;
    let mut work = None;
    let secs = |v: String, name: &str| -> anyhow::Result<Duration> {
        let s: u64 = v.parse().with_context(|| format!("{name}: {v:?}"))?;
        Ok(Duration::from_secs(s))
    };
    let mut args = argv.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> anyhow::Result<String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => args
                    .next()
                    .with_context(|| format!("{name} needs a value\n{USAGE}")),
            }
        };
        match flag.as_str() {
            "--rkubelet" => rkubelet = Some(PathBuf::from(value("--rkubelet")?)),
            "--upstream" => upstream = Some(PathBuf::from(value("--upstream")?)),
            "--cluster-dir" => cluster_dir = Some(PathBuf::from(value("--cluster-dir")?)),
            "--node" => node = Some(value("--node")?),
            "--endpoint" => endpoint = Some(value("--endpoint")?),
            "--serial" => serial = value("--serial")?.parse().context("--serial")?,
            "--bursts" => {
                let v = value("--bursts")?;
                bursts = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        s.parse::<usize>()
                            .with_context(|| format!("--bursts {v:?}"))
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            "--steady" => steady = secs(value("--steady")?, "--steady")?,
            "--rest" => rest = secs(value("--rest")?, "--rest")?,
            "--settle" => settle = secs(value("--settle")?, "--settle")?,
            "--timeout" => {
                timeout = secs(value("--timeout")?, "--timeout")?.max(Duration::from_secs(1))
            }
            "--probes" => probes = value("--probes")?.parse().context("--probes")?,
            "--log-flood" => log_flood = value("--log-flood")?.parse().context("--log-flood")?,
            "--csi" => csi = value("--csi")?.parse().context("--csi")?,
            "--csi-mock" => csi_mock = Some(PathBuf::from(value("--csi-mock")?)),
            "--csi-provisioner" => {
                csi_provisioner = Some(PathBuf::from(value("--csi-provisioner")?))
            }
            "--deaths" => deaths = value("--deaths")?.parse().context("--deaths")?,
            "--evented" => evented = bool_flag("--evented", inline.as_deref())?,
            "--scrape" => scrape = bool_flag("--scrape", inline.as_deref())?,
            "--no-scrape" => scrape = !bool_flag("--no-scrape", inline.as_deref())?,
            "--view" => view = bool_flag("--view", inline.as_deref())?,
            "--no-view" => view = !bool_flag("--no-view", inline.as_deref())?,
            "--evict" => evict = bool_flag("--evict", inline.as_deref())?,
            "--no-evict" => evict = !bool_flag("--no-evict", inline.as_deref())?,
            "--only" => {
                only = Some(match value("--only")?.as_str() {
                    "rkubelet" => Which::Rkubelet,
                    "upstream" => Which::Upstream,
                    other => bail!("--only {other:?}: rkubelet or upstream"),
                })
            }
            "--work" => work = Some(PathBuf::from(value("--work")?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let need = |v: Option<PathBuf>, name: &str| -> anyhow::Result<PathBuf> {
        let p = v.with_context(|| format!("{name} is required\n{USAGE}"))?;
        std::fs::canonicalize(&p).with_context(|| format!("{name} {}", p.display()))
    };
    Ok(Args {
        rkubelet: need(rkubelet, "--rkubelet")?,
        upstream: need(upstream, "--upstream")?,
        cluster_dir: need(cluster_dir, "--cluster-dir")?,
        node: node.with_context(|| format!("--node is required\n{USAGE}"))?,
        endpoint: endpoint.with_context(|| format!("--endpoint is required\n{USAGE}"))?,
        serial,
        bursts,
        steady,
        rest,
        settle,
        timeout,
        probes,
        log_flood,
        csi: if csi_mock.is_some() && csi_provisioner.is_some() {
            csi
        } else {
            0
        },
        csi_mock,
        csi_provisioner,
        deaths,
        evented,
        scrape,
        view,
        evict,
        only,
        work,
    })
}

/// One steady-state window.
#[derive(Clone, Debug)]
struct Window {
    pods: usize,
    /// The pods carry probes (the probe phase).
    probed: bool,
    /// The pods flood their logs (the log flood phase).
    logging: bool,
    secs: f64,
    /// Mean of VmRSS samples taken every second, KiB.
    rss_mean_kib: f64,
    cpu_s: f64,
    /// The node's API requests in the window, by "verb resource".
    api: Option<BTreeMap<String, usize>>,
    /// The scrapes every second during the window, one per path (the
    /// scrape phase); None for a window without.
    scrape: Option<Vec<scrape::Stats>>,
}

impl Window {
    /// Which window it is, in words.
    fn label(&self) -> String {
        match (self.pods, self.probed, self.scrape.is_some()) {
            (0, _, _) => "at rest".into(),
            (n, _, _) if self.logging => format!("with {n} pods flooding their logs"),
            (n, true, _) => format!("with {n} probed pods"),
            (n, _, true) => format!("with {n} pods scraped"),
            (n, _, _) => format!("with {n} pods"),
        }
    }

    fn api_per_min(&self) -> Option<f64> {
        self.api
            .as_ref()
            .map(|m| m.values().sum::<usize>() as f64 * 60.0 / self.secs)
    }
}

#[derive(Clone, Debug)]
struct Burst {
    pods: usize,
    to_running: Duration,
    cpu_s: f64,
    teardown: Option<Duration>,
}

#[derive(Default)]
struct KResults {
    ready: Option<Duration>,
    warmup: Option<Duration>,
    serial: Vec<Duration>,
    /// The runtime floor measured just before this kubelet ran.
    floor: Vec<Duration>,
    /// Probes run in the probed window, by (probe_type, result).
    probes: Option<BTreeMap<(String, String), f64>>,
    /// The node's API requests of the whole probe phase (the probed pods'
    /// burst, the settle and the window), by kind: what the window alone
    /// hides (failures of the burst, events the spam filter drops later).
    probe_phase: Option<BTreeMap<String, usize>>,
    bursts: Vec<Burst>,
    windows: Vec<Window>,
    /// A window at rest once every burst's and the probe phase's pods are
    /// deleted: what the kubelet gave back.
    after: Option<Window>,
    /// The log flood phase: the most log bytes one container kept during
    /// its window, and pod startups under the flood.
    flood_max_log_bytes: Option<u64>,
    flood_startups: Vec<Duration>,
    /// The CSI phase: each pod's create → Running.
    csi: Vec<Duration>,
    /// The death phase: each container's end → the watch sees it.
    deaths: Vec<Duration>,
    /// The view pod's log, its IP put as `<pod-ip>` (with `--view`).
    view: Option<String>,
    /// From a memory.available threshold crossed to the pod's SIGTERM
    /// (with `--evict`).
    eviction: Option<Duration>,
    hwm_kib: Option<u64>,
    failed: Option<String>,
    notes: Vec<String>,
}

impl KResults {
    /// The plain steady window with `pods` pods (not probed, not scraped).
    fn steady(&self, pods: usize) -> Option<&Window> {
        self.windows
            .iter()
            .find(|w| w.pods == pods && !w.probed && !w.logging && w.scrape.is_none())
    }
}

/// What the pod watch has seen: when each bench pod was first seen
/// Running, and which exist.
#[derive(Default)]
struct Seen {
    running: HashMap<String, Instant>,
    /// When the watch first saw the pod's container terminated, and its id.
    ended: HashMap<String, (SystemTime, String)>,
    present: HashSet<String>,
    synced: bool,
}

struct Ctx {
    args: Args,
    client: kube::Client,
    cri: CriClient,
    seen: Arc<Mutex<Seen>>,
    audit_log: PathBuf,
    ticks_per_sec: u64,
    /// The scrape's TLS client (with `--scrape`).
    scrape_tls: Option<tokio_rustls::TlsConnector>,
    /// Observations of the current kubelet's run that are not failures.
    notes: Mutex<Vec<String>>,
}

pub async fn main(argv: Vec<String>) -> anyhow::Result<bool> {
    let args = parse_args(argv)?;
    let client = admin_client(&args.cluster_dir.join("admin.conf")).await?;
    let cri = CriClient::connect_lazy(&args.endpoint, CRI_TIMEOUT).context("CRI endpoint")?;
    let version = cri
        .version()
        .await
        .with_context(|| format!("the CRI runtime at {} does not answer", args.endpoint))?;
    let api_version = client
        .apiserver_version()
        .await
        .context("asking the API server its version")?;
    let work_tmp;
    let work = match &args.work {
        Some(w) => {
            std::fs::create_dir_all(w).with_context(|| format!("creating {}", w.display()))?;
            w.clone()
        }
        None => {
            work_tmp = tempfile::Builder::new()
                .prefix("rkubelet-bench-cluster.")
                .tempdir()
                .context("creating a temporary directory")?;
            work_tmp.path().to_owned()
        }
    };
    println!(
        "rkubelet-bench cluster: node {}, API server {} ({}), runtime {} {} at {}",
        args.node,
        api_version.git_version,
        args.cluster_dir.display(),
        version.runtime_name,
        version.runtime_version,
        args.endpoint
    );
    println!(
        "pods: created through the API with spec.nodeName={} (no scheduler); latency = \
         create call → the bench's pod watch sees phase Running",
        args.node
    );

    // The API server's kubelet client: the scrape, and the probe counts of
    // the probe phase.
    let pki = args.cluster_dir.join("pki");
    let kubelet_client = scrape::connector(
        &pki.join("apiserver-kubelet-client.crt"),
        &pki.join("apiserver-kubelet-client.key"),
    );
    let scrape_tls = match kubelet_client {
        Ok(tls) => Some(tls),
        Err(e) if args.scrape => {
            return Err(e.context("the scrape's client certificate (--no-scrape to do without)"));
        }
        Err(_) => None,
    };
    if args.scrape {
        println!(
            "scrape: GET {} every 1 s with the largest burst's pods running, one keep-alive \
             HTTPS connection per path, as apiserver-kubelet-client (system:masters); latency = \
             request sent → body read",
            scrape::PATHS.join(" and ")
        );
    }

    let seen: Arc<Mutex<Seen>> = Arc::default();
    let watch_task = tokio::spawn(watch_pods(client.clone(), seen.clone()));
    let ctx = Ctx {
        audit_log: args.cluster_dir.join("audit.log"),
        args,
        client,
        cri,
        seen,
        ticks_per_sec: procfs::clock_ticks_per_sec(),
        scrape_tls,
        notes: Mutex::default(),
    };
    if !ctx.audit_log.exists() {
        println!(
            "note: no {} (cluster not started with RKUBELET_AUDIT=1): no API request counts",
            ctx.audit_log.display()
        );
    }
    wait_until("the pod watch to list", Duration::from_secs(30), || {
        ctx.seen.lock().synced
    })
    .await?;
    // Start fresh: no bench pods, no Node, nothing in the runtime.
    ctx.reset(None).await?;
    if ctx.args.view {
        ctx.view_objects(true).await?;
    }
    if ctx.args.csi > 0 {
        csi::objects(&ctx.client, LABEL, true).await?;
    }
    ctx.notes.lock().clear();

    let order: Vec<Which> = [Which::Rkubelet, Which::Upstream]
        .into_iter()
        .filter(|w| ctx.args.only.is_none_or(|o| o == *w))
        .collect();
    let mut all: Vec<(Which, KResults)> = Vec::new();
    for which in order {
        println!("\n==> {} ({})", which.name(), ctx.binary(which).display());
        let dir = work.join(which.short());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let r = ctx.bench(which, &dir).await;
        let interrupted = r.failed.as_deref() == Some("interrupted");
        all.push((which, r));
        if interrupted {
            break;
        }
    }
    watch_task.abort();
    if ctx.args.csi > 0
        && let Err(e) = csi::objects(&ctx.client, LABEL, false).await
    {
        eprintln!("rkubelet-bench: deleting the CSI phase's objects: {e:#}");
    }
    if ctx.args.view
        && let Err(e) = ctx.view_objects(false).await
    {
        eprintln!("rkubelet-bench: deleting the view's objects: {e:#}");
    }
    print_table(&ctx.args, &all);
    Ok(all.iter().all(|(_, r)| r.failed.is_none()))
}

/// A delete's result, an object already gone counting as done.
fn ok_if_gone<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

async fn admin_client(path: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("kubeconfig {}", path.display()))?;
    kube::Client::try_from(config).context("building the API client")
}

/// Keep `seen` up to date from a watch of the bench's pods.
async fn watch_pods(client: kube::Client, seen: Arc<Mutex<Seen>>) {
    let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let config = watcher::Config::default().labels(&format!("{LABEL}=1"));
    let stream = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut listing: Option<Vec<Pod>> = None;
    while let Some(event) = stream.next().await {
        let now = Instant::now();
        let wall = SystemTime::now();
        let apply = |s: &mut Seen, p: &Pod| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let running = p
                .status
                .as_ref()
                .and_then(|st| st.phase.as_deref())
                .is_some_and(|ph| ph == "Running");
            if running {
                s.running.entry(name.clone()).or_insert(now);
            }
            let ended = p
                .status
                .as_ref()
                .and_then(|st| st.container_statuses.as_ref()?.first())
                .filter(|c| c.state.as_ref().is_some_and(|st| st.terminated.is_some()))
                .and_then(|c| c.container_id.clone());
            if let Some(id) = ended {
                s.ended.entry(name.clone()).or_insert((wall, id));
            }
            s.present.insert(name);
        };
        let mut s = seen.lock();
        match event {
            Ok(Event::Init) => listing = Some(Vec::new()),
            Ok(Event::InitApply(p)) => listing.get_or_insert_default().push(p),
            Ok(Event::InitDone) => {
                s.present.clear();
                for p in listing.take().unwrap_or_default() {
                    apply(&mut s, &p);
                }
                s.synced = true;
            }
            Ok(Event::Apply(p)) => apply(&mut s, &p),
            Ok(Event::Delete(p)) => {
                let name = p.metadata.name.unwrap_or_default();
                s.present.remove(&name);
                s.running.remove(&name);
                s.ended.remove(&name);
            }
            Err(e) => eprintln!("rkubelet-bench: pod watch: {e}"),
        }
    }
}

async fn wait_until(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The group of the probe phase's pods.
const PROBE_GROUP: &str = "probe";
/// The group of the log flood phase's pods.
const LOG_GROUP: &str = "logs";
/// The group of the CSI phase's pods (each named as its claim).
const CSI_GROUP: &str = "csi";
/// The group of the death phase's pods.
const DEATH_GROUP: &str = "death";
/// Pods started one at a time under the log flood.
const FLOOD_STARTUPS: usize = 5;
/// The group of the view pod.
const VIEW_GROUP: &str = "view";

fn pod(name: &str, node: &str, group: &str) -> anyhow::Result<Pod> {
    // The shell traps SIGTERM so a delete does not wait out the grace period.
    // No service account token and no service links: nothing but the
    // container itself.
    let v = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": { LABEL: "1", "rkubelet-bench/group": group },
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "containers": [{
                "name": "main",
                "image": IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
            }],
        },
    });
    let mut v = v;
    if group == LOG_GROUP {
        // 10,000 lines of 101 bytes every second: 1 MB/s.
        v["spec"]["containers"][0]["command"] = serde_json::json!([
            "sh",
            "-c",
            "trap 'exit 0' TERM; pad=$(printf '%0100d' 0); \
             while :; do yes $pad | head -n 10000; sleep 1; done & wait"
        ]);
    }
    if group == DEATH_GROUP {
        v["spec"]["restartPolicy"] = serde_json::json!("Never");
        v["spec"]["containers"][0]["command"] = serde_json::json!(["sh", "-c", "sleep 2; exit 3"]);
    }
    if group == CSI_GROUP {
        // The claim of its name, mounted.
        v["spec"]["volumes"] =
            serde_json::json!([{"name": "data", "persistentVolumeClaim": {"claimName": name}}]);
        v["spec"]["containers"][0]["volumeMounts"] =
            serde_json::json!([{"name": "data", "mountPath": "/data"}]);
    }
    if group == PROBE_GROUP {
        // An exec liveness probe and an httpGet readiness probe, every second.
        let c = &mut v["spec"]["containers"][0];
        c["command"] = serde_json::json!([
            "sh",
            "-c",
            "mkdir -p /www && touch /www/ready && exec httpd -f -p 8080 -h /www"
        ]);
        c["livenessProbe"] = serde_json::json!({"exec": {"command": ["true"]}, "periodSeconds": 1});
        c["readinessProbe"] = serde_json::json!({
            "httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1,
        });
    }
    serde_json::from_value(v).context("building a pod")
}

/// The eviction phase's pod: BestEffort, it fills [`EVICT_FILL_MIB`] of a
/// memory-backed emptyDir (charged to its memory cgroup) in the background,
/// so that its SIGTERM trap runs at once, writing `term` into the emptyDir.
fn hog_pod(name: &str, node: &str) -> anyhow::Result<Pod> {
    let mut v = serde_json::to_value(pod(name, node, EVICT_GROUP)?)?;
    let c = &mut v["spec"]["containers"][0];
    c["command"] = serde_json::json!([
        "sh",
        "-c",
        format!(
            "trap ': > /fill/term; exit 0' TERM; \
             dd if=/dev/zero of=/fill/f bs=1M count={EVICT_FILL_MIB} 2>/dev/null & wait; \
             sleep 3600 & wait"
        )
    ]);
    c["volumeMounts"] = serde_json::json!([{"name": "fill", "mountPath": "/fill"}]);
    v["spec"]["volumes"] = serde_json::json!([{"name": "fill", "emptyDir": {"medium": "Memory"}}]);
    serde_json::from_value(v).context("building the eviction pod")
}

/// Every [`EVICT_SAMPLE`] until `term` appears or [`EVICT_TIMEOUT`] after
/// the threshold was crossed: when the node's available memory first fell
/// below `threshold` bytes, and the mtime of `term` (the pod's SIGTERM).
fn watch_eviction(
    threshold: u64,
    term: &Path,
) -> anyhow::Result<(std::time::SystemTime, Option<std::time::SystemTime>)> {
    let start = Instant::now();
    let mut crossed = None;
    loop {
        if crossed.is_none() && procfs::node_available_memory()? < threshold {
            crossed = Some((std::time::SystemTime::now(), Instant::now()));
        }
        if let Ok(meta) = std::fs::metadata(term) {
            let at = meta.modified().context("the SIGTERM file's mtime")?;
            let (crossed, _) = crossed.context("SIGTERM before the threshold was seen crossed")?;
            return Ok((crossed, Some(at)));
        }
        match crossed {
            Some((at, seen)) if seen.elapsed() > EVICT_TIMEOUT => return Ok((at, None)),
            // The pod's start and its fill get as long again.
            None if start.elapsed() > 2 * EVICT_TIMEOUT => {
                bail!("the node's available memory never fell below {threshold} bytes")
            }
            _ => std::thread::sleep(EVICT_SAMPLE),
        }
    }
}

impl Ctx {
    /// Create (or delete) the ConfigMap, Secret and Service the view pod reads.
    async fn view_objects(&self, create: bool) -> anyhow::Result<()> {
        let c = self.client.clone();
        let cms: Api<ConfigMap> = Api::namespaced(c.clone(), NAMESPACE);
        let secrets: Api<Secret> = Api::namespaced(c.clone(), NAMESPACE);
        let services: Api<Service> = Api::namespaced(c, NAMESPACE);
        let dp = DeleteParams::default();
        // Whatever a run before left, then (when creating) anew.
        ok_if_gone(cms.delete(podview::CONFIG_MAP, &dp).await)?;
        ok_if_gone(secrets.delete(podview::SECRET, &dp).await)?;
        ok_if_gone(services.delete(podview::SERVICE, &dp).await)?;
        if create {
            let pp = PostParams::default();
            cms.create(&pp, &podview::config_map(LABEL)?).await?;
            secrets.create(&pp, &podview::secret(LABEL)?).await?;
            services.create(&pp, &podview::service(LABEL)?).await?;
        }
        Ok(())
    }

    fn binary(&self, which: Which) -> &Path {
        match which {
            Which::Rkubelet => &self.args.rkubelet,
            Which::Upstream => &self.args.upstream,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    fn with_seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.seen.lock())
    }

    fn note(&self, n: String) {
        self.notes.lock().push(n);
    }

    fn cpu_s(&self, pid: u32) -> anyhow::Result<f64> {
        Ok(procfs::cpu_ticks(pid)? as f64 / self.ticks_per_sec as f64)
    }

    fn audit_len(&self) -> Option<u64> {
        std::fs::metadata(&self.audit_log).ok().map(|m| m.len())
    }

    /// The node's API requests in the audit log between two byte offsets,
    /// by "verb resource[/subresource]". A request is a ResponseComplete
    /// event, a watch its ResponseStarted one (its end is not a request).
    fn audit_requests(&self, from: u64, to: u64) -> anyhow::Result<BTreeMap<String, usize>> {
        let mut f = std::fs::File::open(&self.audit_log)
            .with_context(|| format!("opening {}", self.audit_log.display()))?;
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        f.take(to.saturating_sub(from)).read_to_end(&mut buf)?;
        let user = format!("system:node:{}", self.args.node);
        let mut out = BTreeMap::new();
        for line in String::from_utf8_lossy(&buf).lines() {
            let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if ev["user"]["username"].as_str() != Some(&user) {
                continue;
            }
            let verb = ev["verb"].as_str().unwrap_or("?");
            let counted = match ev["stage"].as_str() {
                Some("ResponseStarted") => true,
                Some("ResponseComplete") => verb != "watch",
                _ => false,
            };
            if !counted {
                continue;
            }
            let obj = &ev["objectRef"];
            let mut resource = obj["resource"].as_str().unwrap_or("?").to_owned();
            if let Some(sub) = obj["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            *out.entry(format!("{verb} {resource}")).or_default() += 1;
        }
        Ok(out)
    }

    /// prober_probe_total from the kubelet's /metrics/probes, summed by
    /// (probe_type, result).
    async fn probe_counts(&self, port: u16) -> anyhow::Result<BTreeMap<(String, String), f64>> {
        let tls = self
            .scrape_tls
            .clone()
            .context("no kubelet client certificate")?;
        let mut endpoint = scrape::Endpoint::new(tls, port, "/metrics/probes");
        let (body, _) = endpoint.get().await?;
        Ok(probe_totals(&String::from_utf8_lossy(&body)))
    }

    /// The runtime's own floor, just before a kubelet starts: `--serial`
    /// pods made straight through the CRI (RunPodSandbox, with its network,
    /// then CreateContainer and StartContainer of the bench's container), no
    /// kubelet and no API server; each timed from the first call to the
    /// last answer, all removed once timed.
    async fn runtime_floor(&self, dir: &Path) -> anyhow::Result<Vec<Duration>> {
        let image = self
            .cri
            .image_status(IMAGE)
            .await?
            .with_context(|| format!("{IMAGE} is not in the runtime"))?
            .id;
        let mut times = Vec::new();
        // Kept running until all are timed, as the kubelets' serial pods
        // are: no teardown overlaps the next start.
        let mut made = Vec::new();
        let mut failed = None;
        for i in 0..self.args.serial {
            let name = format!("{POD_PREFIX}floor-{i}");
            let logs = dir.join("floor").join(&name);
            std::fs::create_dir_all(&logs)?;
            let sandbox = cri::PodSandboxConfig {
                metadata: Some(cri::PodSandboxMetadata {
                    name: name.clone(),
                    uid: format!("{name}-{}", std::process::id()),
                    namespace: "rkb-floor".into(),
                    attempt: 0,
                }),
                hostname: name.clone(),
                log_directory: logs.display().to_string(),
                linux: Some(cri::LinuxPodSandboxConfig::default()),
                ..Default::default()
            };
            let container = cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: "main".into(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
                    .map(String::from)
                    .to_vec(),
                log_path: "main.log".into(),
                linux: Some(cri::LinuxContainerConfig::default()),
                ..Default::default()
            };
            let start = Instant::now();
            let id = match self
                .cri
                .run_pod_sandbox(sandbox.clone(), String::new())
                .await
            {
                Ok(id) => id,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            made.push(id.clone());
            let started = async {
                let c = self.cri.create_container(&id, container, sandbox).await?;
                self.cri.start_container(&c).await
            }
            .await;
            if let Err(e) = started {
                failed = Some(e);
                break;
            }
            times.push(start.elapsed());
        }
        for id in made {
            self.cri.stop_pod_sandbox(&id).await?;
            self.cri.remove_pod_sandbox(&id).await?;
        }
        if let Some(e) = failed {
            return Err(e.into());
        }
        println!(
            "    runtime floor, serial {} (CRI straight, no kubelet): p50 {:.1} ms, p99 {:.1} ms",
            times.len(),
            percentile_ms(&times, 0.5).unwrap_or(f64::NAN),
            percentile_ms(&times, 0.99).unwrap_or(f64::NAN),
        );
        Ok(times)
    }

    /// A steady-state window of `secs` with `pods` pods running; every
    /// second, each of `scraped` (none: no scrape) is scraped once.
    async fn window(
        &self,
        k: &mut Kubelet,
        pods: usize,
        probed: bool,
        secs: Duration,
        scraped: &mut [Endpoint],
    ) -> anyhow::Result<Window> {
        self.window_of(k, pods, probed, false, secs, scraped).await
    }

    async fn window_of(
        &self,
        k: &mut Kubelet,
        pods: usize,
        probed: bool,
        logging: bool,
        secs: Duration,
        scraped: &mut [Endpoint],
    ) -> anyhow::Result<Window> {
        let pid = k.pid();
        let audit0 = self.audit_len();
        let cpu0 = self.cpu_s(pid)?;
        let start = Instant::now();
        let mut samples = Vec::new();
        while start.elapsed() < secs {
            k.check_alive()?;
            samples.push(procfs::memory(pid)?.rss_kib as f64);
            futures::future::join_all(scraped.iter_mut().map(Endpoint::scrape)).await;
            let next = Duration::from_secs(samples.len() as u64).min(secs);
            tokio::time::sleep(next.saturating_sub(start.elapsed())).await;
        }
        let cpu = self.cpu_s(pid)? - cpu0;
        let elapsed = start.elapsed().as_secs_f64();
        let api = match (audit0, self.audit_len()) {
            (Some(a), Some(b)) => Some(self.audit_requests(a, b)?),
            _ => None,
        };
        let w = Window {
            pods,
            probed,
            logging,
            secs: elapsed,
            rss_mean_kib: samples.iter().sum::<f64>() / samples.len().max(1) as f64,
            cpu_s: cpu,
            api,
            scrape: (!scraped.is_empty())
                .then(|| scraped.iter().map(|e| e.stats.clone()).collect()),
        };
        println!(
            "    steady {pods}{} pods{}, {elapsed:.0} s: VmRSS {:.1} MiB, {cpu:.2} CPU-s{}",
            if probed { " probed" } else { "" },
            if scraped.is_empty() { "" } else { " scraped" },
            mib(w.rss_mean_kib as u64),
            w.api_per_min()
                .map_or_else(String::new, |r| format!(", {r:.1} API requests/min"))
        );
        for s in w.scrape.iter().flatten() {
            let pct = |p| s.percentile(p).map_or(f64::NAN, ms);
            println!(
                "      GET {}: {} ok, p50 {:.1} ms, p99 {:.1} ms, body {:.1} KiB, {} failed, \
                 {} connection(s)",
                s.path,
                s.ok.len(),
                pct(0.5),
                pct(0.99),
                s.body_bytes as f64 / 1024.0,
                s.failed,
                s.connections
            );
            if s.failed > 0 {
                self.note(format!(
                    "scrape GET {}: {} of {} request(s) failed, e.g. {}",
                    s.path,
                    s.failed,
                    s.failed + s.ok.len(),
                    s.errors.join("; ")
                ));
            }
        }
        Ok(w)
    }

    async fn create(&self, name: &str, group: &str) -> anyhow::Result<()> {
        self.pods()
            .create(&PostParams::default(), &pod(name, &self.args.node, group)?)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        Ok(())
    }

    /// Create one pod, time it to Running, delete it and wait until it is gone.
    async fn one_pod(&self, k: &mut Kubelet, name: &str) -> anyhow::Result<Duration> {
        self.one_pod_of(k, name, "serial").await
    }

    /// [`Ctx::one_pod`] for a pod of `group`.
    async fn one_pod_of(
        &self,
        k: &mut Kubelet,
        name: &str,
        group: &str,
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        self.create(name, group).await?;
        loop {
            if let Some(t) = self.with_seen(|s| s.running.get(name).copied()) {
                let latency = t.saturating_duration_since(start);
                self.delete_group(group, k, self.args.timeout).await?;
                return Ok(latency);
            }
            if start.elapsed() > self.args.timeout {
                k.check_alive()?;
                bail!(
                    "pod {name} not Running {:?} after its creation",
                    self.args.timeout
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The CSI phase: the mock driver and its provisioner started for this
    /// kubelet, then `--csi` pods one at a time, each with a claim bound
    /// before its clock starts.
    async fn csi_phase(
        &self,
        which: Which,
        k: &mut Kubelet,
        dir: &Path,
    ) -> anyhow::Result<Vec<Duration>> {
        let (Some(plugin), Some(provisioner)) = (&self.args.csi_mock, &self.args.csi_provisioner)
        else {
            return Ok(Vec::new());
        };
        let mock = csi::Mock::start(
            plugin,
            provisioner,
            &self.args.cluster_dir.join("admin.conf"),
            &csi::registry(&dir.join("root")),
            dir,
        )?;
        let run = async {
            csi::registered(&self.client, &self.args.node).await?;
            let mut out = Vec::new();
            for i in 0..self.args.csi {
                let name = format!("{POD_PREFIX}{CSI_GROUP}-{}-{i}", which.short());
                csi::bound_claim(&self.client, NAMESPACE, &name, LABEL).await?;
                out.push(self.one_pod_of(k, &name, CSI_GROUP).await?);
                csi::delete_claim(&self.client, NAMESPACE, &name).await?;
            }
            Ok(out)
        }
        .await;
        mock.stop().await;
        run
    }

    /// The death phase: `--deaths` pods one at a time, each container's end
    /// (the CRI's finishedAt) to the watch seeing it terminated.
    async fn death_phase(&self, which: Which, k: &mut Kubelet) -> anyhow::Result<Vec<Duration>> {
        let mut out = Vec::new();
        for i in 0..self.args.deaths {
            let name = format!("{POD_PREFIX}{DEATH_GROUP}-{}-{i}", which.short());
            self.create(&name, DEATH_GROUP).await?;
            let timeout = self.args.timeout;
            let ended = wait_until(&format!("{name}'s container to end"), timeout, || {
                self.with_seen(|s| s.ended.contains_key(&name))
            })
            .await;
            if let Err(e) = ended {
                // A kubelet that died says so rather than the timeout.
                k.check_alive()?;
                return Err(e);
            }
            let (seen, id) = self
                .with_seen(|s| s.ended.get(&name).cloned())
                .context("the death seen")?;
            let id = id.rsplit("://").next().unwrap_or_default();
            let status = self.cri.container_status(id).await?;
            let finished =
                UNIX_EPOCH + Duration::from_nanos(u64::try_from(status.finished_at).unwrap_or(0));
            out.push(seen.duration_since(finished).unwrap_or_default());
            self.delete_group(DEATH_GROUP, k, timeout).await?;
        }
        Ok(out)
    }

    /// Delete the bench pods of `group` (all of them when None) with their
    /// grace period and wait until the API has none left (the kubelet
    /// confirmed them stopped). Returns how long that took.
    async fn delete_group(
        &self,
        group: &str,
        k: &mut Kubelet,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        let selector = format!("{LABEL}=1,rkubelet-bench/group={group}");
        self.pods()
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&selector),
            )
            .await
            .with_context(|| format!("deleting pods {selector}"))?;
        let prefix = format!("{POD_PREFIX}{group}-");
        loop {
            if self.with_seen(|s| !s.present.iter().any(|p| p.starts_with(&prefix))) {
                return Ok(start.elapsed());
            }
            if start.elapsed() > timeout {
                k.check_alive()?;
                let left =
                    self.with_seen(|s| s.present.iter().filter(|p| p.starts_with(&prefix)).count());
                bail!(
                    "{left} pod(s) of group {group} still exist {timeout:?} after their deletion"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn burst(&self, k: &mut Kubelet, m: usize, group: &str) -> anyhow::Result<Burst> {
        let names: Vec<String> = (0..m).map(|i| format!("{POD_PREFIX}{group}-{i}")).collect();
        let pid = k.pid();
        let cpu0 = self.cpu_s(pid)?;
        let start = Instant::now();
        let creates = names.iter().map(|n| self.create(n, group));
        for r in futures::future::join_all(creates).await {
            r?;
        }
        let created = start.elapsed();
        loop {
            let n = self.with_seen(|s| names.iter().filter(|p| s.running.contains_key(*p)).count());
            if n == m {
                break;
            }
            if start.elapsed() > self.args.timeout {
                k.check_alive()?;
                bail!(
                    "burst of {m}: {n} Running {:?} after the first create",
                    self.args.timeout
                );
            }
            tokio::time::sleep(POLL).await;
        }
        let last = self.with_seen(|s| names.iter().filter_map(|p| s.running.get(p).copied()).max());
        let to_running = last.map_or(start.elapsed(), |t| t.saturating_duration_since(start));
        let cpu_s = self.cpu_s(pid)? - cpu0;
        println!(
            "    burst {m}: all Running after {:.2} s (creates took {:.2} s), {cpu_s:.2} CPU-s",
            to_running.as_secs_f64(),
            created.as_secs_f64()
        );
        Ok(Burst {
            pods: m,
            to_running,
            cpu_s,
            teardown: None,
        })
    }

    /// A steady window of `pods` pods while the kubelet's HTTPS `port` is
    /// scraped every second, after one untimed GET of each path (connects
    /// and, for rkubelet, fills its authorization cache as a scraper's
    /// first scrape would).
    async fn scrape_window(
        &self,
        k: &mut Kubelet,
        pods: usize,
        port: u16,
    ) -> anyhow::Result<Window> {
        let tls = self.scrape_tls.as_ref().context("no scrape TLS client")?;
        let mut endpoints = scrape::PATHS.map(|path| Endpoint::new(tls.clone(), port, path));
        for e in &mut endpoints {
            if let Err(err) = e.get().await {
                self.note(format!("scrape warm-up GET {}: {err:#}", e.stats.path));
            }
        }
        self.window(k, pods, false, self.args.steady, &mut endpoints)
            .await
    }

    /// The phases of one kubelet's run; `port` is its HTTPS port.
    async fn phases(
        &self,
        which: Which,
        k: &mut Kubelet,
        dir: &Path,
        port: u16,
        r: &mut KResults,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let nodes: Api<Node> = Api::all(self.client.clone());
        loop {
            k.check_alive()?;
            let node = nodes
                .get_opt(&self.args.node)
                .await
                .context("getting the Node")?;
            let ready = node
                .and_then(|n| n.status)
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                break;
            }
            if start.elapsed() > self.args.timeout {
                bail!(
                    "node {} not Ready {:?} after {} started",
                    self.args.node,
                    self.args.timeout,
                    which.name()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        r.ready = Some(start.elapsed());
        println!(
            "    node Ready after {:.2} s",
            start.elapsed().as_secs_f64()
        );
        tokio::time::sleep(self.args.settle).await;
        r.windows
            .push(self.window(k, 0, false, self.args.rest, &mut []).await?);
        if self.args.view {
            r.view = Some(self.pod_view(k, dir).await?);
        }

        if self.args.serial > 0 {
            r.warmup = Some(
                self.one_pod(k, &format!("{POD_PREFIX}serial-warmup"))
                    .await?,
            );
            for i in 0..self.args.serial {
                let l = self.one_pod(k, &format!("{POD_PREFIX}serial-{i}")).await?;
                r.serial.push(l);
            }
            println!(
                "    serial {}: p50 {:.1} ms, p99 {:.1} ms (warm-up {:.1} ms)",
                r.serial.len(),
                percentile_ms(&r.serial, 0.5).unwrap_or(f64::NAN),
                percentile_ms(&r.serial, 0.99).unwrap_or(f64::NAN),
                r.warmup.map_or(0.0, ms)
            );
        }
        if self.args.csi > 0 {
            r.csi = self.csi_phase(which, k, dir).await?;
            println!(
                "    with a CSI volume, serial {}: p50 {:.1} ms, p99 {:.1} ms",
                r.csi.len(),
                percentile_ms(&r.csi, 0.5).unwrap_or(f64::NAN),
                percentile_ms(&r.csi, 0.99).unwrap_or(f64::NAN),
            );
        }
        if self.args.deaths > 0 {
            r.deaths = self.death_phase(which, k).await?;
            println!(
                "    container end → watch, serial {}: p50 {:.1} ms, p99 {:.1} ms",
                r.deaths.len(),
                percentile_ms(&r.deaths, 0.5).unwrap_or(f64::NAN),
                percentile_ms(&r.deaths, 0.99).unwrap_or(f64::NAN),
            );
        }
        let scrape_at = self
            .args
            .bursts
            .iter()
            .copied()
            .max()
            .filter(|_| self.args.scrape && self.scrape_tls.is_some());
        for &m in &self.args.bursts {
            r.bursts.push(self.burst(k, m, &format!("b{m}")).await?);
            tokio::time::sleep(self.args.settle).await;
            r.windows
                .push(self.window(k, m, false, self.args.steady, &mut []).await?);
            if Some(m) == scrape_at && r.windows.iter().all(|w| w.scrape.is_none()) {
                r.windows.push(self.scrape_window(k, m, port).await?);
            }
            let t = self
                .delete_group(&format!("b{m}"), k, TEARDOWN_TIMEOUT)
                .await?;
            println!(
                "    burst {m}: all gone {:.2} s after the delete",
                t.as_secs_f64()
            );
            if let Some(b) = r.bursts.last_mut() {
                b.teardown = Some(t);
            }
        }
        if self.args.probes > 0 {
            let m = self.args.probes;
            let phase0 = self.audit_len();
            self.burst(k, m, PROBE_GROUP).await?;
            tokio::time::sleep(self.args.settle).await;
            let before = self.probe_counts(port).await;
            r.windows
                .push(self.window(k, m, true, self.args.steady, &mut []).await?);
            match (before, self.probe_counts(port).await) {
                (Ok(a), Ok(b)) => {
                    let ran: BTreeMap<(String, String), f64> = b
                        .into_iter()
                        .map(|(key, n)| {
                            let was = a.get(&key).copied().unwrap_or(0.0);
                            (key, n - was)
                        })
                        .collect();
                    let list: Vec<String> = ran
                        .iter()
                        .map(|((kind, result), n)| format!("{kind} {result} {n}"))
                        .collect();
                    println!("    probes run in the window: {}", list.join(", "));
                    r.probes = Some(ran);
                }
                (Err(e), _) | (_, Err(e)) => {
                    r.notes.push(format!("probe counts not read: {e:#}"));
                }
            }
            if let (Some(a), Some(b)) = (phase0, self.audit_len()) {
                r.probe_phase = Some(self.audit_requests(a, b)?);
            }
            self.delete_group(PROBE_GROUP, k, TEARDOWN_TIMEOUT).await?;
        }
        if self.args.log_flood > 0 {
            let m = self.args.log_flood;
            self.burst(k, m, LOG_GROUP).await?;
            tokio::time::sleep(self.args.settle).await;
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (logs, done) = (dir.join("pod-logs"), stop.clone());
            let sampler = kubelet_tasks::off_thread(move || {
                let mut most = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    most = most.max(largest_container_logs(&logs));
                    std::thread::sleep(Duration::from_secs(1));
                }
                most
            });
            let window = self
                .window_of(k, m, false, true, self.args.steady, &mut [])
                .await;
            let mut startups = Vec::new();
            for i in 0..FLOOD_STARTUPS {
                startups.push(
                    self.one_pod(k, &format!("{POD_PREFIX}serial-flood-{i}"))
                        .await?,
                );
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            r.windows.push(window?);
            let most = sampler.await.context("the log size sampler")?;
            println!(
                "    log flood: one container's log files held at most {:.1} MiB; pod startup p50 \
                 under the flood {:.1} ms",
                most as f64 / (1 << 20) as f64,
                percentile_ms(&startups, 0.5).unwrap_or(f64::NAN)
            );
            r.flood_max_log_bytes = Some(most);
            r.flood_startups = startups;
            self.delete_group(LOG_GROUP, k, TEARDOWN_TIMEOUT).await?;
        }
        if self.args.rests_after_deletes() {
            println!("    every pod deleted:");
            r.after = Some(self.window(k, 0, false, self.args.rest, &mut []).await?);
        }
        if self.args.evict {
            // The peak of the run so far: the phase restarts the kubelet.
            r.hwm_kib = procfs::memory(k.pid()).ok().map(|m| m.hwm_kib);
            match self.eviction(which, k, dir).await {
                Ok(latency) => r.eviction = latency,
                Err(e) => r.notes.push(format!("eviction phase: {e:#}")),
            }
        }
        Ok(())
    }

    /// The eviction phase: restart the kubelet with a memory.available
    /// threshold [`EVICT_MARGIN_MIB`] below what the node has and memcg
    /// notifications on, run a pod that fills [`EVICT_FILL_MIB`] of memory,
    /// and time the threshold crossed to the pod's SIGTERM. None when no
    /// SIGTERM came within [`EVICT_TIMEOUT`] (noted).
    async fn eviction(
        &self,
        which: Which,
        k: &mut Kubelet,
        dir: &Path,
    ) -> anyhow::Result<Option<Duration>> {
        const MIB: u64 = 1 << 20;
        let available = procfs::node_available_memory()?;
        let threshold_mib = (available / MIB)
            .checked_sub(EVICT_MARGIN_MIB)
            .context("the node has less memory available than the phase's margin")?;
        println!("    stop for the eviction phase: {}", k.stop().await?);
        let (restarted, _) = self.spawn(which, dir, Some(threshold_mib))?;
        *k = restarted;
        if !k.wait_ready().await? {
            bail!(
                "{} did not start its sync loop after the restart",
                which.name()
            );
        }
        tokio::time::sleep(EVICT_WARMUP).await;
        let name = format!("{POD_PREFIX}{EVICT_GROUP}-0");
        let created = self
            .pods()
            .create(&PostParams::default(), &hog_pod(&name, &self.args.node)?)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        let uid = created.metadata.uid.context("the created pod has no UID")?;
        let term = dir
            .join("root/pods")
            .join(&uid)
            .join("volumes/kubernetes.io~empty-dir/fill/term");
        let threshold = threshold_mib * MIB;
        let watch = kubelet_tasks::off_thread(move || watch_eviction(threshold, &term));
        let outcome = watch.await.context("the eviction watch")?;
        self.delete_group(EVICT_GROUP, k, TEARDOWN_TIMEOUT).await?;
        let (crossed, term) = outcome?;
        let Some(term) = term else {
            self.note(format!(
                "eviction phase: no SIGTERM within {EVICT_TIMEOUT:?} of the threshold \
                 ({threshold_mib} MiB available) crossed"
            ));
            return Ok(None);
        };
        let latency = term.duration_since(crossed).unwrap_or_default();
        println!(
            "    eviction: memory.available < {threshold_mib}Mi, SIGTERM {:.0} ms after it was crossed",
            ms(latency)
        );
        Ok(Some(latency))
    }

    /// Run the view pod to its end; its log (read from the kubelet's
    /// podLogsDir under `dir`), the pod's IP put as `<pod-ip>`.
    async fn pod_view(&self, k: &mut Kubelet, dir: &Path) -> anyhow::Result<String> {
        let name = format!("{POD_PREFIX}{VIEW_GROUP}-0");
        let meta = serde_json::json!({
            "name": name,
            "namespace": NAMESPACE,
            "labels": { LABEL: "1", "rkubelet-bench/group": VIEW_GROUP },
        });
        let pod = podview::pod(meta, &self.args.node, IMAGE)?;
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .context("creating the view pod")?;
        let start = Instant::now();
        let (uid, ip) = loop {
            let p = self
                .pods()
                .get(&name)
                .await
                .context("getting the view pod")?;
            let status = p.status.unwrap_or_default();
            match status.phase.as_deref() {
                Some("Succeeded") => {
                    break (
                        p.metadata.uid.unwrap_or_default(),
                        status.pod_ip.unwrap_or_default(),
                    );
                }
                Some("Failed") => bail!("the view pod failed: {:?}", status.container_statuses),
                _ => {}
            }
            if start.elapsed() > self.args.timeout {
                k.check_alive()?;
                bail!("the view pod did not finish within {:?}", self.args.timeout);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let log = dir
            .join("pod-logs")
            .join(format!("{NAMESPACE}_{name}_{uid}"))
            .join("main/0.log");
        let log = podview::read_cri_log(&log)?;
        self.delete_group(VIEW_GROUP, k, self.args.timeout).await?;
        Ok(podview::normalize(&log, &ip))
    }

    async fn bench(&self, which: Which, dir: &Path) -> KResults {
        let mut r = KResults::default();
        if self.args.serial > 0 {
            match self.runtime_floor(dir).await {
                Ok(floor) => r.floor = floor,
                Err(e) => r.notes.push(format!("runtime floor not measured: {e:#}")),
            }
        }
        let (mut k, port) = match self.spawn(which, dir, None) {
            Ok(k) => k,
            Err(e) => {
                r.failed = Some(format!("{e:#}"));
                return r;
            }
        };
        println!("    pid {}, log {}", k.pid(), k.log_path.display());
        let outcome = tokio::select! {
            o = self.phases(which, &mut k, dir, port, &mut r) => o,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        };
        if let Err(e) = outcome {
            eprintln!("rkubelet-bench: {}: {e:#}", which.name());
            r.failed = Some(format!("{e:#}"));
        }
        // Peak RSS of the whole run, failed or not, while it still runs
        // (before a restart, the phases kept the peak until then).
        r.hwm_kib = r
            .hwm_kib
            .max(procfs::memory(k.pid()).ok().map(|m| m.hwm_kib));
        if let Err(e) = self.reset(Some(&mut k)).await {
            r.notes.push(format!("cleanup after it: {e:#}"));
        }
        r.notes.extend(std::mem::take(&mut *self.notes.lock()));
        let (warns, errors, msgs) = k.log_problems(6);
        if warns + errors > 0 {
            let mut s = format!("logged {warns} warning(s) and {errors} error(s), e.g.:");
            for m in msgs {
                s.push_str("\n      ");
                s.push_str(&m.chars().take(220).collect::<String>());
            }
            r.notes.push(s);
        }
        r
    }

    /// Start the kubelet; returns it and its HTTPS port.
    /// With `evict_below_mib`, a memory.available hard threshold there and
    /// memcg notifications on (the eviction phase).
    fn spawn(
        &self,
        which: Which,
        dir: &Path,
        evict_below_mib: Option<u64>,
    ) -> anyhow::Result<(Kubelet, u16)> {
        let root = dir.join("root");
        let logs = dir.join("pod-logs");
        for d in [&root, &logs] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let config = dir.join("kubelet-config.yaml");
        let kubeconfig = self
            .args
            .cluster_dir
            .join(format!("kubelet-{}.conf", self.args.node));
        let mut args: Vec<OsString> = vec![
            "--config".into(),
            config.clone().into(),
            "--kubeconfig".into(),
            kubeconfig.into(),
            "--hostname-override".into(),
            self.args.node.clone().into(),
            "--root-dir".into(),
            root.clone().into(),
            "--cert-dir".into(),
            root.join("pki").into(),
        ];
        let ca = self.args.cluster_dir.join("pki/ca.crt");
        let (text, port) = match which {
            Which::Rkubelet => {
                args.push("--container-runtime-endpoint".into());
                args.push(self.args.endpoint.clone().into());
                (rkubelet_config(&logs, &ca, evict_below_mib), RKUBELET_PORT)
            }
            Which::Upstream => {
                let port = free_port()?;
                let config =
                    upstream_config(&self.args.endpoint, &ca, &logs, port, evict_below_mib);
                (config, port)
            }
        };
        let text = if self.args.evented {
            text + "featureGates:\n  EventedPLEG: true\n"
        } else {
            text
        };
        std::fs::write(&config, text).with_context(|| format!("writing {}", config.display()))?;
        let log = dir.join("kubelet.log");
        let name = which.name();
        let k = Kubelet::start(name, self.binary(which), &args, log, dir.join("unused"))?;
        Ok((k, port))
    }

    /// Delete the bench's pods (through the kubelet when `k` runs, waiting
    /// for it), stop the kubelet, force-delete what is left, delete the Node
    /// and its Lease, and remove the bench's pods from the runtime.
    async fn reset(&self, k: Option<&mut Kubelet>) -> anyhow::Result<()> {
        let mut problems = Vec::new();
        let all = ListParams::default().labels(&format!("{LABEL}=1"));
        if let Some(k) = k {
            if k.check_alive().is_ok() && self.with_seen(|s| !s.present.is_empty()) {
                let start = Instant::now();
                if let Err(e) = self
                    .pods()
                    .delete_collection(&DeleteParams::default(), &all)
                    .await
                {
                    problems.push(format!("deleting pods: {e}"));
                }
                while self.with_seen(|s| !s.present.is_empty()) && start.elapsed() < DRAIN_TIMEOUT {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let left = self.with_seen(|s| s.present.len());
                if left > 0 {
                    problems.push(format!(
                        "{left} pod(s) still exist {DRAIN_TIMEOUT:?} after their deletion"
                    ));
                }
            }
            match k.stop().await {
                Ok(how) if how.contains("exit status: 0") || how.contains("signal: 15") => {
                    println!("    stopped: {how}");
                }
                Ok(how) => problems.push(format!("stop: {how}")),
                Err(e) => problems.push(format!("stop: {e:#}")),
            }
        }
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        self.pods()
            .delete_collection(&force, &all)
            .await
            .context("force-deleting the bench's pods")?;
        let nodes: Api<Node> = Api::all(self.client.clone());
        if nodes.get_opt(&self.args.node).await?.is_some() {
            nodes
                .delete(&self.args.node, &DeleteParams::default())
                .await
                .context("deleting the Node")?;
        }
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        if leases.get_opt(&self.args.node).await?.is_some() {
            // The garbage collector may take it first (its owner is the Node).
            ok_if_gone(
                leases
                    .delete(&self.args.node, &DeleteParams::default())
                    .await,
            )
            .context("deleting the node's Lease")?;
        }
        wait_until(
            "the bench's pods to be gone",
            Duration::from_secs(30),
            || self.with_seen(|s| s.present.is_empty()),
        )
        .await?;
        // The runtime: anything of the bench's pods a kubelet left behind.
        let ours = |labels: &HashMap<String, String>| {
            labels
                .get("io.kubernetes.pod.namespace")
                .map(String::as_str)
                == Some(NAMESPACE)
                && labels
                    .get("io.kubernetes.pod.name")
                    .is_some_and(|n| n.starts_with(POD_PREFIX))
        };
        // Exited containers and stopped sandboxes of deleted pods may remain
        // until the kubelet's garbage collection; anything still running is
        // a kubelet that did not stop a deleted pod.
        let (mut running, mut exited) = (0, 0);
        for c in self.cri.list_containers(None).await? {
            if ours(&c.labels) {
                if c.state == cri::ContainerState::ContainerRunning as i32 {
                    running += 1;
                } else {
                    exited += 1;
                }
                let _ = self.cri.stop_container(&c.id, 0).await;
                self.cri.remove_container(&c.id).await?;
            }
        }
        let mut sandboxes = 0;
        for sb in self.cri.list_pod_sandbox(None).await? {
            if ours(&sb.labels) {
                if sb.state == cri::PodSandboxState::SandboxReady as i32 {
                    running += 1;
                } else {
                    sandboxes += 1;
                }
                self.cri.stop_pod_sandbox(&sb.id).await?;
                self.cri.remove_pod_sandbox(&sb.id).await?;
            }
        }
        if running > 0 {
            problems.push(format!(
                "{running} running container(s)/ready sandbox(es) of deleted pods were left in \
                 the runtime (removed by the bench)"
            ));
        }
        if exited + sandboxes > 0 {
            self.note(format!(
                "left {exited} exited container(s) and {sandboxes} stopped sandbox(es) of \
                 deleted pods in the runtime at its stop (not yet garbage-collected; removed by \
                 the bench)"
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            bail!("{}", problems.join("; "))
        }
    }
}

/// rkubelet's configuration. The client CA makes the scrape's client
/// certificate a user (system:masters, which the default Webhook
/// authorization allows). Image GC is off and the eviction thresholds are
/// 1 %, as for the upstream kubelet below: the images are imported, the
/// disk possibly nearly full.
fn rkubelet_config(logs: &Path, ca: &Path, evict_below_mib: Option<u64>) -> String {
    format!(
        "kind: KubeletConfiguration\n\
         apiVersion: kubelet.config.k8s.io/v1beta1\n\
         failCgroupV1: false\n\
         imageGCHighThresholdPercent: 100\n\
         evictionHard:\n  memory.available: {}\n  nodefs.available: 1%\n  \
           imagefs.available: 1%\n  nodefs.inodesFree: 1%\n\
         kernelMemcgNotification: {}\n\
         podLogsDir: {}\n\
         healthzPort: 0\n\
         readOnlyPort: 0\n\
         authentication:\n  \
           x509:\n    \
             clientCAFile: {}\n",
        memory_available(evict_below_mib),
        evict_below_mib.is_some(),
        logs.display(),
        ca.display()
    )
}

/// The memory.available hard threshold: the eviction phase's, else 1Mi.
fn memory_available(evict_below_mib: Option<u64>) -> String {
    format!("{}Mi", evict_below_mib.unwrap_or(1))
}

/// The upstream kubelet's configuration for this environment (a container:
/// cgroup v1, no systemd, no CAP_SYS_RESOURCE, disk possibly nearly full).
fn upstream_config(
    endpoint: &str,
    ca: &Path,
    logs: &Path,
    port: u16,
    evict_below_mib: Option<u64>,
) -> String {
    format!(
        r#"kind: KubeletConfiguration
apiVersion: kubelet.config.k8s.io/v1beta1
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: {endpoint}
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: AlwaysAllow}}
staticPodPath: ""
podLogsDir: {logs}
address: 127.0.0.1
port: {port}
healthzPort: 0
readOnlyPort: 0
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "{memory}", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
kernelMemcgNotification: {memcg}
localStorageCapacityIsolation: false
"#,
        ca = ca.display(),
        logs = logs.display(),
        memory = memory_available(evict_below_mib),
        memcg = evict_below_mib.is_some(),
    )
}

/// The most bytes of log files one log flood container keeps in `logs`
/// (podLogsDir: `<namespace>_<pod>_<uid>/<container>/`).
fn largest_container_logs(logs: &Path) -> u64 {
    let prefix = format!("{NAMESPACE}_{POD_PREFIX}{LOG_GROUP}-");
    let dirs = |p: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(p)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    dirs(logs)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .flat_map(|pod| dirs(&pod))
        .map(|container| {
            dirs(&container)
                .iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// A loopback TCP port nobody listens on right now (the upstream kubelet's
/// :10250 server, moved out of other kubelets' way).
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// `prober_probe_total` samples of a Prometheus text body, summed by
/// (probe_type, result).
fn probe_totals(text: &str) -> BTreeMap<(String, String), f64> {
    let label = |labels: &str, name: &str| {
        let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
        let len = labels[start..].find('"')?;
        Some(labels[start..start + len].to_owned())
    };
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("prober_probe_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let (Some(kind), Some(result), Ok(n)) = (
            label(labels, "probe_type"),
            label(labels, "result"),
            value.trim().parse::<f64>(),
        ) else {
            continue;
        };
        *out.entry((kind, result)).or_default() += n;
    }
    out
}

/// The nearest-rank percentile `p` of `times` (in any order), in ms; None
/// when there are none.
fn percentile_ms(times: &[Duration], p: f64) -> Option<f64> {
    let mut sorted = times.to_vec();
    sorted.sort();
    (!sorted.is_empty()).then(|| ms(crate::percentile(&sorted, p)))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn print_table(args: &Args, all: &[(Which, KResults)]) {
    let get = |w: Which| all.iter().find(|(x, _)| *x == w).map(|(_, r)| r);
    let (rk, up) = (get(Which::Rkubelet), get(Which::Upstream));
    type Metric<'a> = Box<dyn Fn(&KResults) -> Option<f64> + 'a>;
    let mut rows: Vec<(String, Metric, usize)> = Vec::new();
    rows.push((
        "node Ready after start (s)".into(),
        Box::new(|r| r.ready.map(|d| d.as_secs_f64())),
        2,
    ));
    if args.serial > 0 {
        let pct = |p: f64| -> Metric { Box::new(move |r: &KResults| percentile_ms(&r.serial, p)) };
        rows.push((
            format!("pod startup p50 (ms, serial n={})", args.serial),
            pct(0.5),
            1,
        ));
        rows.push(("pod startup p99 (ms)".into(), pct(0.99), 1));
        let floor = |r: &KResults| percentile_ms(&r.floor, 0.5);
        rows.push((
            "  runtime floor p50 (ms, CRI straight, no kubelet)".into(),
            Box::new(floor),
            1,
        ));
        let p50 = pct(0.5);
        rows.push((
            "  pod startup p50 above the floor (ms)".into(),
            Box::new(move |r| Some(p50(r)? - floor(r)?)),
            1,
        ));
    }
    if args.deaths > 0 {
        let pct = |p: f64| -> Metric { Box::new(move |r: &KResults| percentile_ms(&r.deaths, p)) };
        let pleg = if args.evented {
            "EventedPLEG"
        } else {
            "relisting"
        };
        rows.push((
            format!(
                "container end → watch sees it p50 (ms, n={}, {pleg})",
                args.deaths
            ),
            pct(0.5),
            1,
        ));
        rows.push((
            "container end → watch sees it p99 (ms)".into(),
            pct(0.99),
            1,
        ));
    }
    if args.csi > 0 {
        let pct = |p: f64| -> Metric { Box::new(move |r: &KResults| percentile_ms(&r.csi, p)) };
        rows.push((
            format!(
                "pod startup with a CSI volume p50 (ms, serial n={})",
                args.csi
            ),
            pct(0.5),
            1,
        ));
        rows.push((
            "pod startup with a CSI volume p99 (ms)".into(),
            pct(0.99),
            1,
        ));
    }
    for &m in &args.bursts {
        let find = move |r: &KResults| r.bursts.iter().find(|b| b.pods == m).cloned();
        rows.push((
            format!("burst {m}: create → all Running (s)"),
            Box::new(move |r| find(r).map(|b| b.to_running.as_secs_f64())),
            2,
        ));
        rows.push((
            format!("burst {m}: kubelet CPU-s until all Running"),
            Box::new(move |r| find(r).map(|b| b.cpu_s)),
            2,
        ));
        rows.push((
            format!("burst {m}: delete → all gone (s)"),
            Box::new(move |r| find(r).and_then(|b| b.teardown).map(|d| d.as_secs_f64())),
            2,
        ));
    }
    let mut counts = vec![0];
    counts.extend(args.bursts.iter().copied());
    for &m in &counts {
        let find = move |r: &KResults| r.steady(m).cloned();
        let secs = if m == 0 { args.rest } else { args.steady }.as_secs();
        rows.push((
            format!("steady {m} pods: VmRSS (MiB, mean)"),
            Box::new(move |r| find(r).map(|w| mib(w.rss_mean_kib as u64))),
            1,
        ));
        rows.push((
            format!("steady {m} pods: CPU-s over {secs} s"),
            Box::new(move |r| find(r).map(|w| w.cpu_s)),
            2,
        ));
        rows.push((
            format!(
                "{}API requests/min{}",
                if m == 0 { "" } else { "  " },
                if m == 0 {
                    " at rest (0 pods)".to_owned()
                } else {
                    format!(" with {m} pods")
                }
            ),
            Box::new(move |r| find(r).and_then(|w| w.api_per_min())),
            1,
        ));
    }
    if args.probes > 0 {
        let m = args.probes;
        let find = move |r: &KResults| r.windows.iter().find(|w| w.probed).cloned();
        rows.push((
            format!("{m} pods, exec + httpGet probes every 1 s: VmRSS (MiB)"),
            Box::new(move |r| find(r).map(|w| mib(w.rss_mean_kib as u64))),
            1,
        ));
        rows.push((
            format!(
                "{m} pods, exec + httpGet probes every 1 s: CPU-s over {} s",
                args.steady.as_secs()
            ),
            Box::new(move |r| find(r).map(|w| w.cpu_s)),
            2,
        ));
        rows.push((
            format!("  API requests/min with {m} probed pods"),
            Box::new(move |r| find(r).and_then(|w| w.api_per_min())),
            1,
        ));
        rows.push((
            format!("  API requests, {m} probed pods' burst to the window's end"),
            Box::new(move |r| Some(r.probe_phase.as_ref()?.values().sum::<usize>() as f64)),
            0,
        ));
        // The window's event writes (create and patch) per failed probe: one,
        // unless the correlator patched or dropped some.
        rows.push((
            "  event writes per failed probe in the window".to_owned(),
            Box::new(move |r| {
                let api = find(r)?.api?;
                let writes: usize = api
                    .iter()
                    .filter(|(k, _)| k.ends_with(" events"))
                    .map(|(_, n)| n)
                    .sum();
                let failed: f64 = r
                    .probes
                    .as_ref()?
                    .iter()
                    .filter(|((_, result), _)| result != "successful")
                    .map(|(_, n)| n)
                    .sum();
                (failed > 0.0).then(|| writes as f64 / failed)
            }),
            2,
        ));
        for kind in ["Liveness", "Readiness"] {
            rows.push((
                format!("  {kind} probes failed in the window (%)"),
                Box::new(move |r| {
                    let counts = r.probes.as_ref()?;
                    let of = |result: Option<&str>| -> f64 {
                        counts
                            .iter()
                            .filter(|((k, res), _)| k == kind && result.is_none_or(|x| x == res))
                            .map(|(_, n)| n)
                            .sum()
                    };
                    let all = of(None);
                    (all > 0.0).then(|| 100.0 * (all - of(Some("successful"))) / all)
                }),
                2,
            ));
        }
        // What the probes add to the same pods unprobed, per probe (two a pod).
        rows.push((
            "  VmRSS per probe (KiB, probed minus unprobed)".to_owned(),
            Box::new(move |r| {
                let probed = find(r)?;
                let plain = r.steady(m)?;
                Some((probed.rss_mean_kib - plain.rss_mean_kib) / (2 * m) as f64)
            }),
            1,
        ));
    }
    if args.scrape
        && let Some(m) = args.bursts.iter().copied().max()
    {
        let secs = args.steady.as_secs();
        let find = |r: &KResults| r.windows.iter().find(|w| w.scrape.is_some()).cloned();
        let path = move |i: usize| move |r: &KResults| find(r)?.scrape?.get(i).cloned();
        for (i, p) in scrape::PATHS.into_iter().enumerate() {
            let stats = path(i);
            for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
                rows.push((
                    format!("scrape {m} pods: {p} {name} (ms)"),
                    Box::new(move |r| stats(r)?.percentile(q).map(ms)),
                    1,
                ));
            }
            rows.push((
                format!("scrape {m} pods: {p} body (KiB, last)"),
                Box::new(move |r| {
                    stats(r)
                        .filter(|s| !s.ok.is_empty())
                        .map(|s| s.body_bytes as f64 / 1024.0)
                }),
                1,
            ));
        }
        rows.push((
            format!("scrape {m} pods: VmRSS (MiB, mean)"),
            Box::new(move |r| find(r).map(|w| mib(w.rss_mean_kib as u64))),
            1,
        ));
        rows.push((
            format!("scrape {m} pods: kubelet CPU-s over {secs} s"),
            Box::new(move |r| find(r).map(|w| w.cpu_s)),
            2,
        ));
        rows.push((
            format!("  CPU-s more than steady {m} pods"),
            Box::new(move |r| Some(find(r)?.cpu_s - r.steady(m)?.cpu_s)),
            2,
        ));
    }
    if args.log_flood > 0 {
        let m = args.log_flood;
        let find = |r: &KResults| r.windows.iter().find(|w| w.logging).cloned();
        rows.push((
            format!(
                "{m} pods logging 1 MB/s each: CPU-s over {} s",
                args.steady.as_secs()
            ),
            Box::new(move |r| find(r).map(|w| w.cpu_s)),
            2,
        ));
        rows.push((
            format!("  VmRSS with {m} pods logging (MiB)"),
            Box::new(move |r| find(r).map(|w| mib(w.rss_mean_kib as u64))),
            1,
        ));
        rows.push((
            "  one container's log files at most (MiB; 10Mi × 5 + an interval's growth)".into(),
            Box::new(|r| r.flood_max_log_bytes.map(|b| b as f64 / (1 << 20) as f64)),
            1,
        ));
        rows.push((
            format!("  pod startup p50 under the flood (ms, n={FLOOD_STARTUPS})"),
            Box::new(|r| percentile_ms(&r.flood_startups, 0.5)),
            1,
        ));
    }
    if args.rests_after_deletes() {
        rows.push((
            "steady 0 pods after the deletes: VmRSS (MiB, mean)".into(),
            Box::new(|r| r.after.as_ref().map(|w| mib(w.rss_mean_kib as u64))),
            1,
        ));
    }
    if args.evict {
        rows.push((
            "eviction: memory.available crossed → SIGTERM (ms)".into(),
            Box::new(|r| r.eviction.map(ms)),
            0,
        ));
    }
    rows.push((
        "peak VmHWM over the run (MiB)".into(),
        Box::new(|r| r.hwm_kib.map(mib)),
        1,
    ));

    let cell = |r: Option<&KResults>, f: &Metric, prec: usize| -> String {
        r.and_then(f)
            .map_or("n/a".into(), |v| format!("{v:.prec$}"))
    };
    let width = rows
        .iter()
        .map(|(k, _, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    println!();
    println!(
        "{:<width$}  {:>10}  {:>10}  {:>17}",
        "metric", "rkubelet", "upstream", "rkubelet/upstream"
    );
    println!("{:-<width$}  {:->10}  {:->10}  {:->17}", "", "", "", "");
    for (name, f, prec) in &rows {
        let (a, b) = (rk.and_then(f), up.and_then(f));
        let ratio = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "n/a".into(),
        };
        let pad = width - name.chars().count();
        println!(
            "{name}{:pad$}  {:>10}  {:>10}  {:>17}",
            "",
            cell(rk, f, *prec),
            cell(up, f, *prec),
            ratio
        );
    }
    println!();
    if let (Some(a), Some(b)) = (
        rk.and_then(|r| r.view.as_deref()),
        up.and_then(|r| r.view.as_deref()),
    ) {
        let diff = podview::differences(b, a);
        if a == b {
            println!(
                "pod view (env | sort, /etc/hosts, /etc/resolv.conf, hostname): identical under \
                 both, {} lines:",
                a.lines().count()
            );
            for l in a.lines() {
                println!("  {l}");
            }
        } else if diff.is_empty() {
            println!("pod view: the same lines under both, in another order");
        } else {
            println!("pod view: - upstream only, + rkubelet only:");
            for l in diff {
                println!("  {l}");
            }
        }
        println!();
    }
    for (which, r) in all {
        println!("{}:", which.name());
        for w in &r.windows {
            let Some(api) = &w.api else { continue };
            let mut v: Vec<_> = api.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1));
            let mut list: Vec<String> = v.iter().map(|(k, n)| format!("{k} {n}")).collect();
            if list.is_empty() {
                list.push("none".into());
            }
            println!(
                "  API requests {} over {:.0} s: {}",
                w.label(),
                w.secs,
                list.join(", ")
            );
        }
        if let Some(api) = &r.probe_phase {
            let mut v: Vec<_> = api.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1));
            let list: Vec<String> = v.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!(
                "  API requests of the probe phase (burst to window end): {}",
                list.join(", ")
            );
        }
        if let Some(f) = &r.failed {
            println!("  FAILED: {f}");
        }
        for n in &r.notes {
            println!("  - {n}");
        }
    }
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> anyhow::Result<Args> {
        let mut argv: Vec<String> = [
            "--rkubelet",
            "/",
            "--upstream",
            "/",
            "--cluster-dir",
            "/",
            "--node",
            "n",
            "--endpoint",
            "unix:///run/cri.sock",
        ]
        .map(String::from)
        .to_vec();
        argv.extend(extra.iter().map(|s| s.to_string()));
        parse_args(argv)
    }

    #[test]
    fn probe_totals_sum_by_type_and_result() {
        let text = r#"# TYPE prober_probe_total counter
prober_probe_total{container="main",namespace="default",pod="a",pod_uid="1",probe_type="Liveness",result="successful"} 58
prober_probe_total{container="main",namespace="default",pod="b",pod_uid="2",probe_type="Liveness",result="successful"} 2
prober_probe_total{container="main",namespace="default",pod="b",pod_uid="2",probe_type="Liveness",result="failed"} 3
prober_probe_total{container="main",namespace="default",pod="a",pod_uid="1",probe_type="Readiness",result="successful"} 60
prober_probe_duration_seconds_count{probe_type="Liveness"} 9
"#;
        let got = probe_totals(text);
        let key = |k: &str, r: &str| (k.to_owned(), r.to_owned());
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[&key("Liveness", "successful")], 60.0);
        assert_eq!(got[&key("Liveness", "failed")], 3.0);
        assert_eq!(got[&key("Readiness", "successful")], 60.0);
    }

    #[test]
    fn scrape_flag() {
        assert!(parse(&[]).unwrap().scrape);
        assert!(parse(&["--scrape"]).unwrap().scrape);
        assert!(parse(&["--scrape=true"]).unwrap().scrape);
        assert!(!parse(&["--scrape=false"]).unwrap().scrape);
        assert!(!parse(&["--no-scrape"]).unwrap().scrape);
        assert!(parse(&["--no-scrape=false"]).unwrap().scrape);
        // A bare --scrape takes no value: the next argument is a flag.
        let a = parse(&["--scrape", "--probes", "0"]).unwrap();
        assert!(a.scrape && a.probes == 0);
        let err = parse(&["--scrape=no"]).unwrap_err();
        assert_eq!(err.to_string(), "--scrape=\"no\": true or false");
    }

    #[test]
    fn rkubelet_trusts_the_cluster_ca() {
        let text = rkubelet_config(Path::new("/w/logs"), Path::new("/c/pki/ca.crt"), None);
        assert!(
            text.ends_with("authentication:\n  x509:\n    clientCAFile: /c/pki/ca.crt\n"),
            "{text}"
        );
        assert!(text.contains("\npodLogsDir: /w/logs\n"), "{text}");
        assert!(text.contains("  memory.available: 1Mi\n"), "{text}");
        assert!(
            text.contains("\nkernelMemcgNotification: false\n"),
            "{text}"
        );
    }

    /// The death phase's pods end on their own, 2 s in, and stay ended.
    #[test]
    fn the_death_phase_pods_exit_and_are_not_restarted() {
        let args = parse(&["--deaths", "5", "--evented"]).unwrap();
        assert_eq!((args.deaths, args.evented), (5, true));
        let defaults = parse(&[]).unwrap();
        assert_eq!((defaults.deaths, defaults.evented), (0, false));
        let p = serde_json::to_value(pod("rkb-death-r-0", "n", DEATH_GROUP).unwrap()).unwrap();
        assert_eq!(p["spec"]["restartPolicy"], "Never");
        assert_eq!(p["spec"]["containers"][0]["command"][2], "sleep 2; exit 3");
    }

    /// The eviction phase restarts both kubelets with the same threshold
    /// and memcg notifications on; its pod fills memory in the background.
    #[test]
    fn the_eviction_phase_configures_both_kubelets_alike() {
        let (logs, ca) = (Path::new("/w/logs"), Path::new("/c/pki/ca.crt"));
        let rk = rkubelet_config(logs, ca, Some(3000));
        assert!(rk.contains("  memory.available: 3000Mi\n"), "{rk}");
        assert!(rk.contains("\nkernelMemcgNotification: true\n"), "{rk}");
        let up = upstream_config("unix:///c.sock", ca, logs, 1, Some(3000));
        assert!(up.contains("memory.available: \"3000Mi\""), "{up}");
        assert!(up.contains("\nkernelMemcgNotification: true\n"), "{up}");
        let hog = serde_json::to_value(hog_pod("rkb-evict-0", "n").unwrap()).unwrap();
        assert_eq!(hog["spec"]["volumes"][0]["emptyDir"]["medium"], "Memory");
        let script = hog["spec"]["containers"][0]["command"][2].as_str().unwrap();
        assert!(
            script.starts_with("trap ': > /fill/term; exit 0' TERM; "),
            "{script}"
        );
        assert!(script.contains("count=800 2>/dev/null & wait;"), "{script}");
        assert!(!parse(&["--no-evict"]).unwrap().evict);
        assert!(parse(&[]).unwrap().evict);
    }
}
