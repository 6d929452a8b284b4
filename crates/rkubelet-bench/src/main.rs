//! rkubelet-bench: start rkubelet as a child process against a CRI runtime
//! (a real one, or an in-process fake), drop static pod manifests into its
//! manifest directory, and measure, through the CRI, how long the pods take
//! to run and to go away, plus rkubelet's memory and CPU.
//!
//!     rkubelet-bench --rkubelet PATH [--endpoint unix://SOCK | --fake]
//!                    [--serial N] [--batch M] [--timeout SECS]
//!
//! `rkubelet-bench cluster ...` is the side-by-side bench of rkubelet and the
//! upstream kubelet on a real control plane (see `cluster.rs`).
//!
//! It only prints figures; it never judges them. It fails (exit 1) on real
//! errors: rkubelet dying, the runtime failing, pods not running or not going
//! away within the timeout, leftovers after cleanup.

#![allow(
    clippy::too_many_lines,
    reason = "the bench's phases are scripts, read top to bottom"
)]
mod cluster;
mod csi;
mod kubelet;
mod podview;
mod procfs;
mod scrape;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use kubelet_cri::client::CriClient;
use kubelet_cri::fake::FakeRuntime;
use kubelet_cri::v1 as cri;

use crate::kubelet::Kubelet;
use crate::procfs::{Memory, mib};

const IMAGE: &str = "rkubelet.test/busybox:1";
const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
const CONTAINER_NAME: &str = "main";
/// Polling period while timing a pod start (serial phase).
const POLL_SERIAL: Duration = Duration::from_millis(3);
/// Polling period while timing the batch (start and teardown).
const POLL_BATCH: Duration = Duration::from_millis(5);
/// Polling period of untimed waits.
const POLL_UNTIMED: Duration = Duration::from_millis(20);
/// How long cleanup waits for the runtime to be clean of the node's pods.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline of each bench CRI call.
const CRI_TIMEOUT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: rkubelet-bench --rkubelet PATH [--endpoint unix://SOCK | --fake] \
                     [--serial N] [--batch M] [--timeout SECS]";

#[derive(Debug)]
struct Args {
    rkubelet: PathBuf,
    endpoint: Option<String>,
    fake: bool,
    serial: usize,
    batch: usize,
    timeout: Duration,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut rkubelet = None;
    let mut endpoint = None;
    let mut fake = false;
    let mut serial = 30;
    let mut batch = 100;
    let mut timeout = Duration::from_secs(120);
    let mut args = std::env::args().skip(1);
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
            "--endpoint" => endpoint = Some(value("--endpoint")?),
            "--fake" => fake = true,
            "--serial" => serial = value("--serial")?.parse().context("--serial")?,
            "--batch" => batch = value("--batch")?.parse().context("--batch")?,
            "--timeout" => {
                let secs: u64 = value("--timeout")?.parse().context("--timeout")?;
                timeout = Duration::from_secs(secs.max(1));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let rkubelet = rkubelet.with_context(|| format!("--rkubelet is required\n{USAGE}"))?;
    if fake == endpoint.is_some() {
        bail!("give exactly one of --endpoint and --fake\n{USAGE}");
    }
    if serial == 0 && batch == 0 {
        bail!("nothing to do: --serial and --batch are both 0");
    }
    let rkubelet = std::fs::canonicalize(&rkubelet)
        .with_context(|| format!("rkubelet binary {}", rkubelet.display()))?;
    Ok(Args {
        rkubelet,
        endpoint,
        fake,
        serial,
        batch,
        timeout,
    })
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("cluster") {
        return main_cluster();
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rkubelet-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rkubelet-bench: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rkubelet-bench: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn main_cluster() -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rkubelet-bench: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(cluster::main(std::env::args().skip(2).collect())) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rkubelet-bench cluster: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Everything measured; what a failed run did not reach stays `None`.
#[derive(Default)]
struct Results {
    warmup: Option<Duration>,
    serial: Vec<Duration>,
    batch_start: Option<Duration>,
    batch_teardown: Option<Duration>,
    idle: Option<Memory>,
    after_batch: Option<Memory>,
    batch_cpu_s: Option<f64>,
    teardown_cpu_s: Option<f64>,
    /// Things rkubelet did that look wrong.
    observations: Vec<String>,
}

struct Bench {
    cri: CriClient,
    kubelet: Kubelet,
    node: String,
    timeout: Duration,
    ticks_per_sec: u64,
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let work = tempfile::Builder::new()
        .prefix("rkubelet-bench.")
        .tempdir()
        .context("creating a temporary directory")?;
    let node = node_name();

    let fake = if args.fake {
        let socket = work.path().join("fake-cri.sock");
        let fake = FakeRuntime::start(&socket)
            .await
            .with_context(|| format!("serving the fake CRI runtime on {}", socket.display()))?;
        fake.add_image(IMAGE);
        Some(fake)
    } else {
        None
    };
    let endpoint = match (&fake, &args.endpoint) {
        (Some(f), _) => f.endpoint(),
        (None, Some(e)) => e.clone(),
        (None, None) => unreachable!("checked by parse_args"),
    };
    let cri = CriClient::connect_lazy(&endpoint, CRI_TIMEOUT).context("CRI endpoint")?;
    let version = cri
        .version()
        .await
        .with_context(|| format!("the CRI runtime at {endpoint} does not answer"))?;
    let kubelet = Kubelet::spawn(&args.rkubelet, &endpoint, &node, work.path())?;
    let mut bench = Bench {
        cri,
        kubelet,
        node,
        timeout: args.timeout,
        ticks_per_sec: procfs::clock_ticks_per_sec(),
    };

    println!(
        "rkubelet-bench: rkubelet {} (pid {}), node {}, runtime {} {} at {}",
        args.rkubelet.display(),
        bench.kubelet.pid(),
        bench.node,
        version.runtime_name,
        version.runtime_version,
        if fake.is_some() {
            "(in-process fake)".to_owned()
        } else {
            endpoint.clone()
        },
    );

    let mut results = Results::default();
    let outcome = tokio::select! {
        r = bench.phases(&args, &mut results) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };

    // Cleanup, whatever happened.
    let mut clean_ok = true;
    if let Err(e) = bench.cleanup().await {
        eprintln!("rkubelet-bench: cleanup: {e:#}");
        clean_ok = false;
    }
    match bench.kubelet.stop().await {
        Ok(how) => {
            if !how.contains("exit status: 0") {
                results.observations.push(format!("rkubelet {how}"));
            }
        }
        Err(e) => {
            eprintln!("rkubelet-bench: stopping rkubelet: {e:#}");
            clean_ok = false;
        }
    }
    let (warns, errors, msgs) = bench.kubelet.log_problems(8);
    if warns + errors > 0 {
        let mut s = format!("rkubelet logged {warns} warning(s) and {errors} error(s):");
        for m in msgs {
            s.push_str("\n      ");
            s.push_str(&m);
        }
        results.observations.push(s);
    }
    if let Some(f) = fake {
        f.shutdown().await;
    }

    print_table(&args, &results);
    if let Err(e) = &outcome {
        eprintln!("rkubelet-bench: error: {e:#}");
        eprintln!(
            "rkubelet-bench: last rkubelet log lines:\n{}",
            bench.kubelet.log_tail(15)
        );
    }
    // rkubelet bind-mounted its root directory onto itself (as upstream's
    // kubelet does, and leaves it).
    if let Err(e) = ::kubelet::volumes::mount::unmount_all_under(work.path()) {
        eprintln!(
            "rkubelet-bench: warning: releasing the mounts under {}: {e}",
            work.path().display()
        );
    }
    drop(work);
    Ok(outcome.is_ok() && clean_ok)
}

/// A node name no other run uses: lowercase, short (pod names append it).
fn node_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("rkb-{}-{:05x}", std::process::id(), nanos & 0xfffff)
}

fn manifest(name: &str) -> String {
    // The shell traps SIGTERM so a stop does not wait out the grace period
    // (a PID 1 without a handler ignores SIGTERM).
    format!(
        "apiVersion: v1\n\
         kind: Pod\n\
         metadata:\n  name: {name}\n  namespace: default\n\
         spec:\n  terminationGracePeriodSeconds: 5\n  containers:\n  \
         - name: {CONTAINER_NAME}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    \
         command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n"
    )
}

fn running_filter(labels: HashMap<String, String>) -> cri::ContainerFilter {
    cri::ContainerFilter {
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        label_selector: labels,
        ..Default::default()
    }
}

fn pod_label(labels: &HashMap<String, String>) -> Option<&str> {
    labels.get(LABEL_POD_NAME).map(String::as_str)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    // nearest rank
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Bench {
    fn pod_name(&self, short: &str) -> String {
        format!("{short}-{}", self.node)
    }

    fn is_ours(&self, labels: &HashMap<String, String>) -> bool {
        pod_label(labels).is_some_and(|p| p.ends_with(&format!("-{}", self.node)))
    }

    fn cpu_seconds(&self) -> anyhow::Result<f64> {
        Ok(procfs::cpu_ticks(self.kubelet.pid())? as f64 / self.ticks_per_sec as f64)
    }

    /// Write a manifest under a hidden temporary name (ignored by the file
    /// source), ready to be renamed into place.
    fn stage_manifest(&self, short: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let dir = &self.kubelet.manifest_dir;
        let tmp = dir.join(format!(".{short}.yaml.tmp"));
        let dst = dir.join(format!("{short}.yaml"));
        std::fs::write(&tmp, manifest(short))
            .with_context(|| format!("writing {}", tmp.display()))?;
        Ok((tmp, dst))
    }

    fn remove_manifest(&self, short: &str) -> anyhow::Result<()> {
        let path = self.kubelet.manifest_dir.join(format!("{short}.yaml"));
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
    }

    async fn phases(&mut self, args: &Args, res: &mut Results) -> anyhow::Result<()> {
        if !self.kubelet.wait_ready().await? {
            res.observations.push(
                "rkubelet did not log \"starting the sync loop\" within 30 s of its start".into(),
            );
        }
        // A warm-up pod, timed but kept out of the serial figures: the first
        // pod pays for connections and lazy initialization.
        if args.serial > 0 {
            res.warmup = Some(self.one_pod("warmup", res).await?);
        }
        // Idle: the warm-up pod is gone, nothing runs.
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.kubelet.check_alive()?;
        res.idle = Some(procfs::memory(self.kubelet.pid())?);

        for i in 0..args.serial {
            let latency = self.one_pod(&format!("s{i}"), res).await?;
            res.serial.push(latency);
        }
        if args.batch > 0 {
            self.batch(args.batch, res).await?;
        }
        Ok(())
    }

    /// Start one pod, time it until its container runs, then remove it and
    /// wait (untimed) until the runtime has nothing of it left.
    async fn one_pod(&mut self, short: &str, res: &mut Results) -> anyhow::Result<Duration> {
        let pod = self.pod_name(short);
        let (tmp, dst) = self.stage_manifest(short)?;
        let selector = HashMap::from([(LABEL_POD_NAME.to_owned(), pod.clone())]);
        let start = Instant::now();
        std::fs::rename(&tmp, &dst).with_context(|| format!("renaming {}", tmp.display()))?;
        let running = loop {
            let list = self
                .cri
                .list_containers(Some(running_filter(selector.clone())))
                .await?;
            if !list.is_empty() {
                break list;
            }
            if start.elapsed() > self.timeout {
                self.kubelet.check_alive()?;
                bail!(
                    "pod {pod}: no running container {:?} after its manifest was written",
                    self.timeout
                );
            }
            tokio::time::sleep(POLL_SERIAL).await;
        };
        let latency = start.elapsed();
        self.kubelet.check_alive()?;
        if running.len() > 1 {
            res.observations.push(format!(
                "pod {pod}: {} running containers for 1 container in the spec",
                running.len()
            ));
        }
        if let Some(c) = running.first()
            && c.labels.get(LABEL_CONTAINER_NAME).map(String::as_str) != Some(CONTAINER_NAME)
        {
            res.observations.push(format!(
                "pod {pod}: running container has {LABEL_CONTAINER_NAME}={:?}",
                c.labels.get(LABEL_CONTAINER_NAME)
            ));
        }

        self.remove_manifest(short)?;
        let gone_start = Instant::now();
        loop {
            let (containers, sandboxes) = self.leftovers(|p| p == pod).await?;
            if containers + sandboxes == 0 {
                break;
            }
            if gone_start.elapsed() > self.timeout {
                self.kubelet.check_alive()?;
                bail!(
                    "pod {pod}: {containers} container(s) and {sandboxes} sandbox(es) remain {:?} \
                     after its manifest was removed",
                    self.timeout
                );
            }
            tokio::time::sleep(POLL_UNTIMED).await;
        }
        Ok(latency)
    }

    /// Containers and sandboxes (any state) whose pod name satisfies `want`.
    async fn leftovers(&self, want: impl Fn(&str) -> bool) -> anyhow::Result<(usize, usize)> {
        let containers = self
            .cri
            .list_containers(None)
            .await?
            .iter()
            .filter(|c| self.is_ours(&c.labels) && pod_label(&c.labels).is_some_and(&want))
            .count();
        let sandboxes = self
            .cri
            .list_pod_sandbox(None)
            .await?
            .iter()
            .filter(|s| self.is_ours(&s.labels) && pod_label(&s.labels).is_some_and(&want))
            .count();
        Ok((containers, sandboxes))
    }

    async fn batch(&mut self, m: usize, res: &mut Results) -> anyhow::Result<()> {
        let shorts: Vec<String> = (0..m).map(|i| format!("b{i}")).collect();
        let pods: HashSet<String> = shorts.iter().map(|s| self.pod_name(s)).collect();
        let staged = shorts
            .iter()
            .map(|s| self.stage_manifest(s))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let cpu0 = self.cpu_seconds()?;
        let start = Instant::now();
        for (tmp, dst) in &staged {
            std::fs::rename(tmp, dst).with_context(|| format!("renaming {}", tmp.display()))?;
        }
        let mut per_pod: HashMap<String, usize> = HashMap::new();
        loop {
            per_pod.clear();
            for c in self
                .cri
                .list_containers(Some(running_filter(HashMap::new())))
                .await?
            {
                if let Some(p) = pod_label(&c.labels).filter(|p| pods.contains(*p)) {
                    *per_pod.entry(p.to_owned()).or_default() += 1;
                }
            }
            if per_pod.len() == m {
                break;
            }
            if start.elapsed() > self.timeout {
                self.kubelet.check_alive()?;
                bail!(
                    "batch: only {} of {m} pods have a running container after {:?}",
                    per_pod.len(),
                    self.timeout
                );
            }
            tokio::time::sleep(POLL_BATCH).await;
        }
        res.batch_start = Some(start.elapsed());
        res.batch_cpu_s = Some(self.cpu_seconds()? - cpu0);
        res.after_batch = Some(procfs::memory(self.kubelet.pid())?);
        self.kubelet.check_alive()?;
        let doubled: Vec<_> = per_pod.iter().filter(|(_, n)| **n > 1).collect();
        if !doubled.is_empty() {
            res.observations.push(format!(
                "batch: {} pod(s) have more than one running container, e.g. {:?}",
                doubled.len(),
                doubled[0]
            ));
        }
        let sandboxes: usize = self
            .cri
            .list_pod_sandbox(None)
            .await?
            .iter()
            .filter(|s| {
                pod_label(&s.labels).is_some_and(|p| pods.contains(p))
                    && s.state == cri::PodSandboxState::SandboxReady as i32
            })
            .count();
        if sandboxes != m {
            res.observations.push(format!(
                "batch: {sandboxes} ready sandboxes for {m} running pods"
            ));
        }

        let cpu1 = self.cpu_seconds()?;
        let start = Instant::now();
        for s in &shorts {
            self.remove_manifest(s)?;
        }
        loop {
            let (containers, sandboxes) = self.leftovers(|p| pods.contains(p)).await?;
            if containers + sandboxes == 0 {
                break;
            }
            if start.elapsed() > self.timeout {
                self.kubelet.check_alive()?;
                bail!(
                    "batch teardown: {containers} container(s) and {sandboxes} sandbox(es) remain \
                     {:?} after the manifests were removed",
                    self.timeout
                );
            }
            tokio::time::sleep(POLL_BATCH).await;
        }
        res.batch_teardown = Some(start.elapsed());
        res.teardown_cpu_s = Some(self.cpu_seconds()? - cpu1);
        Ok(())
    }

    /// Remove every manifest and wait (bounded) until the runtime holds
    /// nothing of this node's pods.
    async fn cleanup(&mut self) -> anyhow::Result<()> {
        let dir = &self.kubelet.manifest_dir;
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let path = e.path();
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
        }
        let alive = self.kubelet.check_alive().is_ok();
        let start = Instant::now();
        loop {
            let (containers, sandboxes) = self.leftovers(|_| true).await?;
            if containers + sandboxes == 0 {
                return Ok(());
            }
            if !alive || start.elapsed() > CLEANUP_TIMEOUT {
                bail!(
                    "the runtime still holds {containers} container(s) and {sandboxes} \
                     sandbox(es) of node {} ({}); remove them by hand",
                    self.node,
                    if alive {
                        format!("{CLEANUP_TIMEOUT:?} after removing the manifests")
                    } else {
                        "rkubelet is not running".to_owned()
                    }
                );
            }
            tokio::time::sleep(POLL_UNTIMED).await;
        }
    }
}

fn print_table(args: &Args, r: &Results) {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    let s = |d: Duration| format!("{:.2}", d.as_secs_f64());
    let na = || "n/a".to_owned();
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut sorted = r.serial.clone();
    sorted.sort();
    let n = sorted.len();
    if args.serial > 0 {
        rows.push((
            "warm-up pod startup (ms, not in serial)".into(),
            r.warmup.map_or_else(na, ms),
        ));
        let stat = |p: f64| {
            if n > 0 {
                ms(percentile(&sorted, p))
            } else {
                na()
            }
        };
        let label = if n == args.serial {
            format!("n={n}")
        } else {
            format!("n={n} of {}", args.serial)
        };
        rows.push((format!("serial startup p50 (ms, {label})"), stat(0.50)));
        rows.push(("serial startup p99 (ms)".into(), stat(0.99)));
        rows.push(("serial startup max (ms)".into(), stat(1.0)));
    }
    if args.batch > 0 {
        rows.push((
            format!("batch time to all running (s, M={})", args.batch),
            r.batch_start.map_or_else(na, s),
        ));
        rows.push((
            "batch teardown (s)".into(),
            r.batch_teardown.map_or_else(na, s),
        ));
    }
    rows.push((
        "RSS idle (MiB, VmRSS / VmHWM)".into(),
        r.idle.map_or_else(na, |m| {
            format!("{:.1} / {:.1}", mib(m.rss_kib), mib(m.hwm_kib))
        }),
    ));
    if args.batch > 0 {
        rows.push((
            "RSS peak after batch (MiB, VmHWM; VmRSS)".into(),
            r.after_batch.map_or_else(na, |m| {
                format!("{:.1}; {:.1}", mib(m.hwm_kib), mib(m.rss_kib))
            }),
        ));
        rows.push((
            "CPU-seconds during batch start".into(),
            r.batch_cpu_s.map_or_else(na, |c| format!("{c:.2}")),
        ));
        rows.push((
            "CPU-seconds during batch teardown".into(),
            r.teardown_cpu_s.map_or_else(na, |c| format!("{c:.2}")),
        ));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    println!();
    println!("{:<width$}  value", "metric");
    println!("{:-<width$}  {:-<12}", "", "");
    for (k, v) in &rows {
        println!("{k:<width$}  {v}");
    }
    if !r.observations.is_empty() {
        println!();
        println!("observations:");
        for o in &r.observations {
            println!("  - {o}");
        }
    }
    println!();
}
