//! `/stats/summary` and `/metrics/resource`: the kubelet's resource
//! statistics (upstream's pkg/kubelet/server/stats summary provider,
//! pkg/kubelet/stats/cri_stats_provider.go and
//! pkg/kubelet/metrics/collectors/resource_metrics.go). Node figures come
//! from the host (/proc, the root memory cgroup, statvfs of the root
//! directory); pod and container CPU, memory and process counts from the
//! pod cgroups the container manager made and the container cgroups under
//! them (what upstream reads through cAdvisor), or from the CRI's
//! ListContainerStats where pods have no cgroups of their own; writable
//! layers from ListContainerStats; the pods' emptyDir and configMap
//! volumes measured on disk (at most every [`VOLUME_STATS_PERIOD`], as
//! upstream's volume stats); the CPU rates (usageNanoCores) from the
//! previous sample this provider kept. With PodAndContainerStatsFromCRI
//! ([`StatsProvider::with_cri_pod_stats`]) pods and containers are read from
//! the runtime's ListPodSandboxStats instead of cgroups, network and
//! process counts included, and `/metrics/cadvisor` is the runtime's
//! ListPodSandboxMetrics (as upstream's criStatsProvider and CRI metrics
//! collector); a runtime without the call gets the cgroup readings, as
//! upstream's PodSandboxStatsUnimplemented. The eviction manager reads the
//! same provider.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::cgroups::{CgroupLayout, CgroupName, PodCgroups};
use kubelet_core::stats::{
    CgroupUsage, ContainerStats, CpuSample, CpuStats, FsStats, FsUsage, InterfaceStats,
    MemoryReading, MemoryStats, NetworkStats, NodeStats, ParseError, PodReference, PodStats,
    ProcessStats, PvcReference, RlimitStats, RuntimeStats, SYSTEM_CONTAINER_PODS, Summary,
    SwapStats, VolumeStats, count_procs, default_route_interface, ephemeral_storage,
    nanos_since_epoch, node_available_memory, parse_cpu_stat_usage, parse_flat_keyed,
    parse_loadavg_tasks, parse_meminfo, parse_memory_limit, parse_net_dev, parse_proc_stat,
    parse_single_int, resource_metrics_text, sum_cpu_memory, sum_swap, ticks_to_nanos,
    time_from_nanos, usage_nano_cores,
};
use kubelet_core::volume;
use kubelet_cri::v1 as cri;

use kubelet_core::claim::{ClaimVolume, Measure};
use kubelet_cri::client::{CriClient, CriError};

pub mod cadvisor;
mod fs;
pub mod process;

use self::fs::{container_log_stats, device_size, statvfs, tree_usage};

/// What the stats are gathered for: the node, its pods and where their
/// files and cgroups are (the kubelet; a fixture in tests).
pub trait StatsView: Send + Sync {
    /// The node's name (`node.nodeName`).
    fn node_name(&self) -> String;
    /// Desired pods with the status the status manager holds for them.
    fn pods(&self) -> Vec<Pod>;
    /// The CRI client: containers, sandboxes and their stats.
    fn cri(&self) -> CriClient;
    /// podLogsDir: the containers' logs (their `logs` usage).
    fn logs_root(&self) -> PathBuf;
    /// The root directory: the node's file system, the pods' volumes.
    fn root_dir(&self) -> PathBuf;
    /// Where the pods' cgroups are, for their usage; None: pods have no
    /// cgroups of their own and their usage is the runtime's.
    fn pod_cgroups(&self) -> Option<PodCgroups>;
    /// The other system containers (`kubelet`, `misc`) by name, with the
    /// cgroup file system they are on; none by default.
    fn system_cgroups(&self) -> Option<(CgroupLayout, Vec<(&'static str, CgroupName)>)> {
        None
    }
    /// The claim volumes the pod `uid` has set up; none by default.
    fn claim_volumes(&self, _uid: &str) -> Vec<ClaimVolume> {
        Vec::new()
    }
    /// A CSI volume's usage from its driver, at `at`; None when it gives
    /// none.
    fn csi_volume_stats<'a>(
        &'a self,
        _driver: &'a str,
        _handle: &'a str,
        _target: &'a Path,
        _at: SystemTime,
    ) -> BoxFuture<'a, Option<FsStats>> {
        Box::pin(async { None })
    }
}

/// How long a driver's NodeGetVolumeStats may take before a summary goes
/// on without it (the summary feeds the eviction manager).
const CSI_STATS_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a container's CPU sample is kept without a newer one (upstream's defaultCachePeriod).
const CPU_CACHE_PERIOD: Duration = Duration::from_secs(10 * 60);
/// How long a volume's measured usage is kept by default (upstream's
/// volumeStatsAggPeriod default): a large emptyDir is walked once a minute,
/// not at every summary.
pub const VOLUME_STATS_PERIOD: Duration = Duration::from_secs(60);
/// How old the pod and container cgroup readings, and the runtime's
/// container stats where pods have cgroups of their own (only their
/// writable layers are read then), may be when the kubelet API asks for a
/// summary: the eviction manager reads them afresh every 10 s, cAdvisor
/// keeps its readings about as long, and containerd measures its snapshots
/// every 10 s; so a scrape every second rarely reads every pod's cgroup
/// files or waits for ListContainerStats, which costs containerd a call to
/// every container's shim.
pub const SUMMARY_MAX_AGE: Duration = Duration::from_secs(15);
/// The node's default interface when no IPv4 default route exists (upstream's choice).
const DEFAULT_INTERFACE: &str = "eth0";

/// Why stats could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("failed to read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("failed to parse {0}")]
    Parse(#[from] ParseError),
    #[error("failed to get file system stats of {}: {source}", path.display())]
    Statvfs { path: PathBuf, source: io::Error },
    #[error("failed to get {what} from the container runtime: {source}")]
    Cri {
        what: &'static str,
        source: CriError,
    },
    #[error("no {0} cgroup hierarchy is mounted")]
    NoController(&'static str),
    #[error("failed to get imageFs stats: imageFs information is unavailable")]
    NoImageFs,
    #[error("failed to encode the summary: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The wall clock, injectable for tests.
type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Where the host's files are (a fake tree in tests).
#[derive(Clone, Debug)]
struct HostPaths {
    /// procfs, "/proc".
    proc: PathBuf,
    /// The cgroup v1 memory controller's root, "/sys/fs/cgroup/memory".
    memory_cgroup: PathBuf,
}

/// A cumulative CPU sample and the rate computed when it was taken.
#[derive(Clone, Copy, Debug)]
struct CpuRecord {
    sample: CpuSample,
    nano_cores: Option<u64>,
}

/// The previous CPU samples: the node's, each container's (by id) and each
/// pod cgroup's (by pod UID).
#[derive(Debug, Default)]
struct CpuCache {
    node: Option<CpuRecord>,
    containers: HashMap<String, CpuRecord>,
    pods: HashMap<String, CpuRecord>,
    system: HashMap<String, CpuRecord>,
}

/// The runtime's running containers, its sandboxes and the container
/// stats read with them.
type RuntimeListing = (
    Vec<cri::Container>,
    Vec<cri::PodSandbox>,
    Arc<Vec<cri::ContainerStats>>,
);

/// The runtime's stats of each sandbox (PodAndContainerStatsFromCRI), by id.
type SandboxStats = HashMap<String, cri::PodSandboxStats>;

/// Whose CPU samples.
#[derive(Clone, Copy, Debug)]
enum Sampled {
    Container,
    Pod,
    /// A system container, by name.
    System,
}

/// A pod's stats as they are gathered, with its cgroup and that cgroup's
/// usage when it has one, or the runtime's stats of its sandbox.
struct PodEntry {
    stats: PodStats,
    cgroup: Option<(CgroupName, SystemTime, CgroupUsage)>,
    sandbox: Option<cri::LinuxPodSandboxStats>,
}

impl PodEntry {
    fn new(
        sandbox: &cri::PodSandbox,
        meta: &cri::PodSandboxMetadata,
        cgroup: Option<(CgroupName, SystemTime, CgroupUsage)>,
    ) -> Self {
        PodEntry {
            stats: PodStats {
                pod_ref: PodReference {
                    name: meta.name.clone(),
                    namespace: meta.namespace.clone(),
                    uid: meta.uid.clone(),
                },
                // The summary API's pod start time is the sandbox's creation.
                start_time: Some(time_from_nanos(sandbox.created_at)),
                ..Default::default()
            },
            cgroup,
            sandbox: None,
        }
    }
}

/// The record to keep after reading `cur`: the rate since `prev`, if it can be computed.
fn next_record(prev: Option<CpuRecord>, cur: CpuSample) -> CpuRecord {
    CpuRecord {
        sample: cur,
        nano_cores: prev.and_then(|p| usage_nano_cores(p.sample, cur)),
    }
}

/// Which summary to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// Everything `/stats/summary` reports.
    Full,
    /// `?only_cpu_and_memory=true` and `/metrics/resource`.
    CpuAndMemory,
}

/// Gathers the Summary. Holds the previous CPU samples the rates are computed
/// from, so the server keeps one for its lifetime.
pub struct StatsProvider {
    host: HostPaths,
    clock: Clock,
    /// USER_HZ, the unit of /proc/stat.
    ticks_per_second: u64,
    cpu: Mutex<CpuCache>,
    /// Each volume directory's last measure, and when it was taken.
    volumes: Mutex<HashMap<PathBuf, (SystemTime, VolumeUsage)>>,
    /// Each claim volume's last measure (None: it gives none), by where
    /// it is.
    claims: Mutex<HashMap<Measure, (SystemTime, Option<FsStats>)>>,
    /// The claim volumes' stats of the last summary, for
    /// `kubelet_volume_stats_*`.
    claim_stats: Mutex<Vec<VolumeStats>>,
    /// How long a volume's measure is used again (volumeStatsAggPeriod).
    volume_period: Duration,
    /// The runtime's last container stats, and when they were asked, for
    /// writable layers (kept only where pods have cgroups of their own).
    runtime: Mutex<Option<(SystemTime, Arc<Vec<cri::ContainerStats>>)>>,
    /// Each pod and container cgroup's last reading: when it was read, the
    /// usage, and the last summary that asked for it.
    cgroups: Mutex<HashMap<CgroupName, (SystemTime, CgroupUsage, SystemTime)>>,
    /// PodAndContainerStatsFromCRI.
    from_cri: bool,
    /// The runtime answered ListPodSandboxStats with Unimplemented: the
    /// cgroups are read instead.
    sandbox_stats_unimplemented: AtomicBool,
    /// The runtime's metric descriptors, asked once they are needed and
    /// kept once given.
    descriptors: tokio::sync::OnceCell<Vec<cri::MetricDescriptor>>,
}

/// A volume directory's usage and its file system's.
#[derive(Clone, Copy, Debug, Default)]
struct VolumeUsage {
    bytes: u64,
    inodes: u64,
    fs: Option<FsUsage>,
}

impl Default for StatsProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl StatsProvider {
    /// A provider reading this host's /proc and cgroups, on the system clock.
    pub fn new() -> Self {
        Self::with_host(
            HostPaths {
                proc: PathBuf::from("/proc"),
                memory_cgroup: PathBuf::from("/sys/fs/cgroup/memory"),
            },
            Arc::new(SystemTime::now),
            rustix::param::clock_ticks_per_second(),
        )
    }

    fn with_host(host: HostPaths, clock: Clock, ticks_per_second: u64) -> Self {
        StatsProvider {
            host,
            clock,
            ticks_per_second,
            cpu: Mutex::new(CpuCache::default()),
            volumes: Mutex::default(),
            claims: Mutex::default(),
            claim_stats: Mutex::default(),
            volume_period: VOLUME_STATS_PERIOD,
            runtime: Mutex::default(),
            cgroups: Mutex::default(),
            from_cri: false,
            sandbox_stats_unimplemented: AtomicBool::new(false),
            descriptors: tokio::sync::OnceCell::new(),
        }
    }

    /// The same, reading pods and containers from the runtime's
    /// ListPodSandboxStats and ListPodSandboxMetrics when `from_cri`
    /// (PodAndContainerStatsFromCRI).
    pub fn with_cri_pod_stats(self, from_cri: bool) -> Self {
        StatsProvider { from_cri, ..self }
    }

    /// `/metrics/cadvisor`: the runtime's metrics with
    /// PodAndContainerStatsFromCRI, else the cgroups' as cAdvisor reads them.
    pub async fn cadvisor_metrics(&self, view: &dyn StatsView) -> String {
        if !self.from_cri {
            return cadvisor::metrics(view).await;
        }
        let cri = view.cri();
        let descriptors = self
            .descriptors
            .get_or_try_init(|| cri.list_metric_descriptors())
            .await
            .inspect_err(|error| tracing::error!(%error, "Error reading MetricDescriptors"))
            .map(Vec::as_slice)
            .unwrap_or_default();
        cadvisor::cri_metrics(&cri, descriptors).await
    }

    /// The runtime's stats of every sandbox, with PodAndContainerStatsFromCRI
    /// and a runtime that has the call; None otherwise.
    async fn sandbox_stats(&self, cri: &CriClient) -> Result<Option<SandboxStats>, StatsError> {
        if !self.from_cri || self.sandbox_stats_unimplemented.load(Ordering::Relaxed) {
            return Ok(None);
        }
        match cri.list_pod_sandbox_stats().await {
            Ok(stats) => Ok(Some(
                stats
                    .into_iter()
                    .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
                    .collect(),
            )),
            Err(e) if e.is_unimplemented() => {
                tracing::warn!(error = %e, "The container runtime does not implement ListPodSandboxStats: pod and container stats are read from their cgroups");
                self.sandbox_stats_unimplemented
                    .store(true, Ordering::Relaxed);
                Ok(None)
            }
            Err(source) => Err(StatsError::Cri {
                what: "pod sandbox stats",
                source,
            }),
        }
    }

    /// The same, measuring each volume at most once per `period`
    /// (volumeStatsAggPeriod).
    pub fn with_volume_period(self, period: Duration) -> Self {
        StatsProvider {
            volume_period: period,
            ..self
        }
    }

    /// `/stats/summary` as upstream's JSON (stats/v1alpha1 Summary); with
    /// `only_cpu_and_memory` just the node's and pods' CPU, memory and swap.
    /// Each call takes new CPU samples: usageNanoCores is the average since
    /// the previous call (or the runtime's own figure when it reports one).
    pub async fn summary(
        &self,
        view: &dyn StatsView,
        only_cpu_and_memory: bool,
    ) -> Result<serde_json::Value, StatsError> {
        let scope = if only_cpu_and_memory {
            Scope::CpuAndMemory
        } else {
            Scope::Full
        };
        let summary = self.build(view, scope, true, SUMMARY_MAX_AGE).await?;
        Ok(serde_json::to_value(&summary)?)
    }

    /// The whole summary with new CPU samples and the runtime's latest
    /// figures (what the eviction manager reads each pass, as upstream's
    /// summary provider Get(updateStats)).
    pub async fn get(&self, view: &dyn StatsView) -> Result<Summary, StatsError> {
        self.build(view, Scope::Full, true, Duration::ZERO).await
    }

    /// `/metrics/resource` as upstream's Prometheus text. A failure to gather
    /// the stats is not an error of the endpoint: it is logged and reported
    /// as `resource_scrape_error 1`, as upstream does.
    pub async fn resource_metrics(&self, view: &dyn StatsView) -> String {
        match self
            .build(view, Scope::CpuAndMemory, false, SUMMARY_MAX_AGE)
            .await
        {
            Ok(summary) => resource_metrics_text(Some(&summary)),
            Err(err) => {
                tracing::error!(%err, "Error getting summary for resourceMetric prometheus endpoint");
                resource_metrics_text(None)
            }
        }
    }

    /// Gather a summary; `update` takes new CPU samples (else rates come
    /// from the kept ones); the runtime's writable-layer figures may be
    /// `max_age` old.
    async fn build(
        &self,
        view: &dyn StatsView,
        scope: Scope,
        update: bool,
        max_age: Duration,
    ) -> Result<Summary, StatsError> {
        let now = (self.clock)();
        let mut node = self.node_stats(now, update).await?;
        node.node_name = view.node_name();
        let root_fs = match scope {
            Scope::Full => {
                let root_dir = view.root_dir();
                let usage = statvfs(&root_dir)?;
                node.fs = Some(FsStats::from_usage(now, &usage));
                node.network = Some(self.network_stats(now).await?);
                node.runtime = Some(runtime_stats(view).await?);
                node.rlimit = Some(self.rlimit_stats(now).await);
                Some(usage)
            }
            Scope::CpuAndMemory => None,
        };
        // The pods' cgroup (kubepods) as the `pods` system container: its
        // memory available is what allocatableMemory.available observes.
        if let Some(cgroups) = view.pod_cgroups()
            && let Ok((at, usage)) =
                self.cgroup_reading(&cgroups.layout, &cgroups.qos.root, now, max_age)
        {
            node.system_containers.push(ContainerStats {
                name: SYSTEM_CONTAINER_PODS.to_owned(),
                start_time: None,
                cpu: Some(self.cgroup_cpu(
                    Sampled::System,
                    SYSTEM_CONTAINER_PODS,
                    at,
                    &usage,
                    update,
                )),
                memory: Some(usage.memory_stats(at)),
                ..ContainerStats::default()
            });
        }
        // kubeletCgroups (or the kubelet's own) and systemCgroups, as
        // upstream's GetSystemContainersStats; one that cannot be read is
        // left out.
        if let Some((layout, named)) = view.system_cgroups() {
            for (name, cgroup) in named {
                match self.cgroup_reading(&layout, &cgroup, now, max_age) {
                    Ok((at, usage)) => node.system_containers.push(ContainerStats {
                        name: name.to_owned(),
                        start_time: None,
                        cpu: Some(self.cgroup_cpu(Sampled::System, name, at, &usage, update)),
                        memory: Some(usage.memory_stats(at)),
                        ..ContainerStats::default()
                    }),
                    Err(e) => {
                        tracing::debug!(error = %e, container = name, cgroup = %cgroup.to_cgroupfs(), "Failed to get system container stats")
                    }
                }
            }
        }
        let pods = self.pod_stats(view, now, root_fs, update, max_age).await?;
        Ok(Summary { node, pods })
    }

    /// Read a /proc or /sys file. Inline, not through tokio's blocking pool:
    /// these reads never block, and a thread hand-off per file cost more
    /// CPU than the reads themselves (measured with perf).
    fn read(&self, path: PathBuf) -> Result<String, StatsError> {
        std::fs::read_to_string(&path).map_err(|source| StatsError::Read { path, source })
    }

    /// Node CPU, memory, swap and boot time.
    async fn node_stats(&self, now: SystemTime, update: bool) -> Result<NodeStats, StatsError> {
        let stat = parse_proc_stat(&self.read(self.host.proc.join("stat"))?)?;
        let sample = CpuSample {
            timestamp_ns: nanos_since_epoch(now),
            usage_core_nano_seconds: ticks_to_nanos(stat.cpu.busy(), self.ticks_per_second),
        };
        let nano_cores = {
            let mut cache = self.cpu.lock();
            if update {
                let record = next_record(cache.node, sample);
                cache.node = Some(record);
                record.nano_cores
            } else {
                cache.node.and_then(|r| r.nano_cores)
            }
        };

        let meminfo = parse_meminfo(&self.read(self.host.proc.join("meminfo"))?)?;
        let memory =
            match std::fs::read_to_string(self.host.memory_cgroup.join("memory.usage_in_bytes")) {
                Ok(usage) => {
                    let usage = parse_single_int("memory.usage_in_bytes", &usage)?;
                    let stat = self.read(self.host.memory_cgroup.join("memory.stat"))?;
                    MemoryReading::from_cgroup_v1(
                        u64::try_from(usage).unwrap_or(0),
                        &parse_flat_keyed("memory.stat", &stat)?,
                    )?
                }
                // No cgroup v1 memory controller (cgroup v2): /proc/meminfo and /proc/vmstat.
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    let vmstat = self.read(self.host.proc.join("vmstat"))?;
                    MemoryReading::from_meminfo(
                        &meminfo,
                        &parse_flat_keyed("/proc/vmstat", &vmstat)?,
                    )?
                }
                Err(source) => {
                    return Err(StatsError::Read {
                        path: self.host.memory_cgroup.join("memory.usage_in_bytes"),
                        source,
                    });
                }
            };

        Ok(NodeStats {
            node_name: String::new(),
            start_time: Some(UNIX_EPOCH + Duration::from_secs(stat.boot_time_secs)),
            cpu: Some(CpuStats {
                time: now,
                usage_nano_cores: nano_cores,
                usage_core_nano_seconds: Some(sample.usage_core_nano_seconds),
            }),
            memory: Some(MemoryStats {
                time: now,
                // Capacity minus working set, as for a cgroup with a limit,
                // minus huge pages.
                available_bytes: Some(node_available_memory(&meminfo, memory.working_set_bytes)),
                usage_bytes: Some(memory.usage_bytes),
                working_set_bytes: Some(memory.working_set_bytes),
                rss_bytes: Some(memory.rss_bytes),
                page_faults: Some(memory.page_faults),
                major_page_faults: Some(memory.major_page_faults),
            }),
            swap: Some(SwapStats {
                time: now,
                // The root cgroup has no swap limit: no available figure.
                swap_available_bytes: None,
                swap_usage_bytes: Some(meminfo.swap_total.saturating_sub(meminfo.swap_free)),
            }),
            ..Default::default()
        })
    }

    /// The node's interfaces; the default-route one (else eth0) inline.
    async fn network_stats(&self, now: SystemTime) -> Result<NetworkStats, StatsError> {
        let interfaces = parse_net_dev(&self.read(self.host.proc.join("net/dev"))?)?;
        let route = self.read(self.host.proc.join("net/route"))?;
        let default_name =
            default_route_interface(&route).unwrap_or_else(|| DEFAULT_INTERFACE.to_owned());
        let default = interfaces
            .iter()
            .find(|i| i.name == default_name)
            .cloned()
            .unwrap_or_default();
        Ok(NetworkStats {
            time: now,
            default,
            interfaces,
        })
    }

    /// The task limit (the lower of pid_max and threads-max) and the task count.
    async fn rlimit_stats(&self, now: SystemTime) -> RlimitStats {
        let mut max_pid: Option<i64> = None;
        for (file, name) in [
            ("sys/kernel/pid_max", "/proc/sys/kernel/pid_max"),
            ("sys/kernel/threads-max", "/proc/sys/kernel/threads-max"),
        ] {
            let limit = match self.read(self.host.proc.join(file)) {
                Ok(text) => parse_single_int(name, &text).map_err(StatsError::from),
                Err(err) => Err(err),
            };
            match limit {
                Ok(limit) => max_pid = Some(max_pid.map_or(limit, |m| m.min(limit))),
                Err(err) => tracing::debug!(%err, "task limit unknown"),
            }
        }
        let tasks = match self.read(self.host.proc.join("loadavg")) {
            Ok(text) => parse_loadavg_tasks(&text).map_err(StatsError::from),
            Err(err) => Err(err),
        };
        RlimitStats {
            time: now,
            max_pid,
            num_of_running_processes: tasks
                .inspect_err(|err| tracing::debug!(%err, "task count unknown"))
                .ok(),
        }
    }

    /// Pods with running containers (from the CRI), then the kubelet's other
    /// pods bare. Where pods have cgroups of their own, CPU, memory and
    /// process counts are read from the pod's and its containers' cgroups
    /// (as upstream reads them through cAdvisor), and the runtime's
    /// ListContainerStats is asked only for the full summary's writable
    /// layers; else the runtime's figures are all there is.
    async fn pod_stats(
        &self,
        view: &dyn StatsView,
        now: SystemTime,
        root_fs: Option<FsUsage>,
        update: bool,
        max_age: Duration,
    ) -> Result<Vec<PodStats>, StatsError> {
        let cri = view.cri();
        let sandbox_stats = self.sandbox_stats(&cri).await?;
        let cgroups = match sandbox_stats {
            Some(_) => None,
            None => view.pod_cgroups(),
        };
        let (containers, sandboxes, stats) = self
            .runtime_listing(
                &cri,
                sandbox_stats.as_ref(),
                cgroups.is_some(),
                root_fs.is_some(),
                now,
                max_age,
            )
            .await?;
        let specs = view.pods();
        let by_uid: HashMap<&str, &Pod> = specs
            .iter()
            .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
            .collect();

        let stats: HashMap<&str, &cri::ContainerStats> = stats
            .iter()
            .filter_map(|s| Some((s.attributes.as_ref()?.id.as_str(), s)))
            .collect();
        let sandboxes: HashMap<&str, &cri::PodSandbox> =
            sandboxes.iter().map(|s| (s.id.as_str(), s)).collect();
        let root_fs_stats = root_fs.map(|usage| FsStats::from_usage(now, &usage));
        let mut mountpoints: HashMap<String, Option<FsUsage>> = HashMap::new();

        let mut by_sandbox: HashMap<&str, PodEntry> = HashMap::new();
        for container in &containers {
            let stat = stats.get(container.id.as_str()).copied();
            // Without cgroups of its own a container is reported only with the runtime's figures.
            if cgroups.is_none() && stat.is_none() {
                continue;
            }
            let Some(sandbox) = sandboxes.get(container.pod_sandbox_id.as_str()) else {
                continue;
            };
            let Some(meta) = &sandbox.metadata else {
                continue;
            };
            let entry = by_sandbox.entry(sandbox.id.as_str()).or_insert_with(|| {
                let cgroup = cgroups.as_ref().and_then(|c| {
                    let spec = by_uid.get(meta.uid.as_str()).copied();
                    self.pod_cgroup(c, spec, &meta.uid, now, max_age)
                });
                let mut entry = PodEntry::new(sandbox, meta, cgroup);
                entry.sandbox = sandbox_stats
                    .as_ref()
                    .and_then(|by_id| by_id.get(&sandbox.id)?.linux.clone());
                entry
            });
            let name = container
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default();
            // A container's cgroup is named by its id under the pod's
            // (containerd's cgroupfs path: parent/id).
            let usage = match (&cgroups, &entry.cgroup) {
                (Some(c), Some((pod, ..))) => self
                    .cgroup_reading(&c.layout, &pod.child(&container.id), now, max_age)
                    .inspect_err(|err| tracing::debug!(%err, id = %container.id, "no cgroup stats"))
                    .ok(),
                _ => None,
            };
            let (cpu, memory) = match (usage, stat) {
                (Some((at, u)), _) => (
                    self.cgroup_cpu(Sampled::Container, &container.id, at, &u, update),
                    u.memory_stats(at),
                ),
                (None, stat) => self.runtime_container_usage(&container.id, stat, now, update),
            };
            if let Some((_, u)) = usage {
                let count = entry.stats.process_stats.get_or_insert_default();
                count.process_count = Some(count.process_count.unwrap_or(0) + u.processes);
            }
            let pod = &mut entry.stats;
            let mut cs = ContainerStats {
                start_time: Some(time_from_nanos(container.created_at)),
                cpu: Some(cpu),
                memory: Some(memory),
                ..Default::default()
            };
            if let Some(root) = &root_fs_stats {
                cs.swap = Some(container_swap(stat.and_then(|s| s.swap.as_ref()), now));
                cs.rootfs = stat
                    .and_then(|s| s.writable_layer.as_ref())
                    .map(|layer| writable_layer(layer, &mut mountpoints));
                cs.logs =
                    container_log_stats(&view.logs_root(), &pod.pod_ref, &name, root, root_fs)
                        .await;
            }
            cs.name = name;
            pod.containers.push(cs);
        }

        let mut pods: Vec<PodStats> = by_sandbox
            .into_values()
            .map(|entry| self.pod_of(entry, update))
            .collect();
        if update {
            self.forget_old_samples(now);
        }
        // Readings of cgroups this summary did not ask for (gone pods and
        // containers) are dropped.
        self.cgroups.lock().retain(|_, (.., seen)| *seen == now);
        if root_fs_stats.is_some() {
            self.volume_stats(view, &view.root_dir(), &by_uid, &mut pods, now)
                .await;
        }
        if let Some(root) = &root_fs_stats {
            for pod in &mut pods {
                pod.swap = sum_swap(&pod.containers);
                pod.ephemeral_storage =
                    Some(ephemeral_storage(&pod.containers, &pod.volume_stats, root));
            }
        }
        add_pods_without_containers(&specs, &mut pods);
        pods.sort_by(|a, b| {
            (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name))
        });
        Ok(pods)
    }

    /// What the runtime runs: its running containers, its sandboxes, and
    /// the container stats a summary needs (those in the sandboxes' stats
    /// when it has them; all of them, the latest, where pods have no
    /// cgroups of their own; with cgroups, only the full summary's writable
    /// layers, kept up to `max_age`).
    async fn runtime_listing(
        &self,
        cri: &CriClient,
        sandbox_stats: Option<&SandboxStats>,
        pod_cgroups: bool,
        full: bool,
        now: SystemTime,
        max_age: Duration,
    ) -> Result<RuntimeListing, StatsError> {
        let cri_err = |what| move |source| StatsError::Cri { what, source };
        let running = cri::ContainerFilter {
            state: Some(cri::ContainerStateValue {
                state: cri::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        };
        let containers = cri
            .list_containers(Some(running))
            .await
            .map_err(cri_err("containers"))?;
        let sandboxes = cri
            .list_pod_sandbox(None)
            .await
            .map_err(cri_err("pod sandboxes"))?;
        let stats = match (sandbox_stats, pod_cgroups, full) {
            (Some(by_id), ..) => Arc::new(
                by_id
                    .values()
                    .filter_map(|s| s.linux.as_ref())
                    .flat_map(|l| l.containers.iter().cloned())
                    .collect(),
            ),
            (None, false, _) => Arc::new(
                cri.list_container_stats(None)
                    .await
                    .map_err(cri_err("container stats"))?,
            ),
            (None, true, true) => self.runtime_stats(cri, now, max_age).await?,
            (None, true, false) => Arc::default(),
        };
        Ok((containers, sandboxes, stats))
    }

    /// A pod's stats once its containers are in: sorted, and its CPU and
    /// memory from its cgroup, which holds the sandbox and the pod overhead
    /// too (addPodCPUMemoryStats reads it first), or from the runtime's
    /// stats of its sandbox, with its network and process count (upstream's
    /// addCRIPod*Stats); with neither, the sum of the containers'.
    fn pod_of(&self, entry: PodEntry, update: bool) -> PodStats {
        let mut pod = entry.stats;
        pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
        let uid = pod.pod_ref.uid.clone();
        (pod.cpu, pod.memory) = match (entry.cgroup, &entry.sandbox) {
            (Some((_, at, u)), _) => (
                Some(self.cgroup_cpu(Sampled::Pod, &uid, at, &u, update)),
                Some(u.memory_stats(at)),
            ),
            (None, Some(linux)) => (
                linux
                    .cpu
                    .as_ref()
                    .map(|cpu| self.runtime_cpu(Sampled::Pod, &uid, cpu, update)),
                linux.memory.as_ref().map(runtime_memory),
            ),
            (None, None) => sum_cpu_memory(&pod.containers),
        };
        if let Some(linux) = entry.sandbox {
            pod.network = linux.network.map(sandbox_network);
            if let Some(process) = linux.process {
                pod.process_stats = Some(ProcessStats {
                    process_count: process.process_count.map(|v| v.value),
                });
            }
        }
        pod
    }

    /// The runtime's container stats, asked again when the kept ones are
    /// older than `max_age`.
    async fn runtime_stats(
        &self,
        cri: &CriClient,
        now: SystemTime,
        max_age: Duration,
    ) -> Result<Arc<Vec<cri::ContainerStats>>, StatsError> {
        let kept = self.runtime.lock().clone();
        if let Some((at, stats)) = kept
            && now.duration_since(at).unwrap_or(Duration::MAX) < max_age
        {
            return Ok(stats);
        }
        let stats =
            Arc::new(
                cri.list_container_stats(None)
                    .await
                    .map_err(|source| StatsError::Cri {
                        what: "container stats",
                        source,
                    })?,
            );
        *self.runtime.lock() = Some((now, stats.clone()));
        Ok(stats)
    }

    /// The pod's cgroup and its usage: where its QoS class puts it when the
    /// kubelet knows the pod, else the first of the three places a pod
    /// cgroup may be that can be read.
    fn pod_cgroup(
        &self,
        cgroups: &PodCgroups,
        spec: Option<&Pod>,
        uid: &str,
        now: SystemTime,
        max_age: Duration,
    ) -> Option<(CgroupName, SystemTime, CgroupUsage)> {
        let candidates: Vec<CgroupName> = match spec {
            Some(pod) => cgroups.qos.pod(pod, uid).into_iter().collect(),
            None => cgroups
                .qos
                .pod_candidates(uid)
                .into_iter()
                .flatten()
                .collect(),
        };
        candidates.into_iter().find_map(|name| {
            let (at, usage) = self
                .cgroup_reading(&cgroups.layout, &name, now, max_age)
                .ok()?;
            Some((name, at, usage))
        })
    }

    /// A cgroup's usage and when it was read: read again when the kept
    /// reading is `max_age` old (cAdvisor's housekeeping keeps its readings
    /// about as long), so a scrape every second does not read every pod's
    /// cgroup files each time.
    fn cgroup_reading(
        &self,
        layout: &CgroupLayout,
        name: &CgroupName,
        now: SystemTime,
        max_age: Duration,
    ) -> Result<(SystemTime, CgroupUsage), StatsError> {
        let mut cache = self.cgroups.lock();
        if let Some((at, usage, seen)) = cache.get_mut(name)
            && now.duration_since(*at).unwrap_or(Duration::MAX) < max_age
        {
            *seen = now;
            return Ok((*at, *usage));
        }
        drop(cache);
        let usage = self.cgroup_usage(layout, name)?;
        self.cgroups.lock().insert(name.clone(), (now, usage, now));
        Ok((now, usage))
    }

    /// One cgroup's CPU time, memory and processes: cpuacct and memory
    /// (v1) or the unified directory (v2).
    fn cgroup_usage(
        &self,
        layout: &CgroupLayout,
        name: &CgroupName,
    ) -> Result<CgroupUsage, StatsError> {
        let rel = name.relative();
        let int = |file: &'static str, text: String| -> Result<u64, StatsError> {
            Ok(u64::try_from(parse_single_int(file, &text)?).unwrap_or(0))
        };
        match layout {
            CgroupLayout::V1 { mounts } => {
                let dir = |controller: &'static str| {
                    mounts
                        .get(controller)
                        .map(|m| m.join(&rel))
                        .ok_or(StatsError::NoController(controller))
                };
                let (cpu, memory) = (dir("cpuacct")?, dir("memory")?);
                let cpu_usage_ns = int("cpuacct.usage", self.read(cpu.join("cpuacct.usage"))?)?;
                let usage = int(
                    "memory.usage_in_bytes",
                    self.read(memory.join("memory.usage_in_bytes"))?,
                )?;
                let stat = self.read(memory.join("memory.stat"))?;
                let limit = self.read(memory.join("memory.limit_in_bytes"))?;
                Ok(CgroupUsage {
                    cpu_usage_ns,
                    memory: MemoryReading::from_cgroup_v1(
                        usage,
                        &parse_flat_keyed("memory.stat", &stat)?,
                    )?,
                    memory_limit: parse_memory_limit("memory.limit_in_bytes", &limit)?,
                    processes: count_procs(&self.read(cpu.join("cgroup.procs"))?),
                })
            }
            CgroupLayout::V2 { root, .. } => {
                let dir = root.join(&rel);
                let cpu_usage_ns = parse_cpu_stat_usage(&self.read(dir.join("cpu.stat"))?)?;
                let current = int("memory.current", self.read(dir.join("memory.current"))?)?;
                let stat = self.read(dir.join("memory.stat"))?;
                let limit = self.read(dir.join("memory.max"))?;
                Ok(CgroupUsage {
                    cpu_usage_ns,
                    memory: MemoryReading::from_cgroup_v2(
                        current,
                        &parse_flat_keyed("memory.stat", &stat)?,
                    )?,
                    memory_limit: parse_memory_limit("memory.max", &limit)?,
                    processes: count_procs(&self.read(dir.join("cgroup.procs"))?),
                })
            }
        }
    }

    /// CPU stats from a cgroup's reading taken `at`, the rate from the
    /// kept sample (taking this one when `update`).
    fn cgroup_cpu(
        &self,
        which: Sampled,
        id: &str,
        at: SystemTime,
        usage: &CgroupUsage,
        update: bool,
    ) -> CpuStats {
        let sample = CpuSample {
            timestamp_ns: nanos_since_epoch(at),
            usage_core_nano_seconds: usage.cpu_usage_ns,
        };
        CpuStats {
            time: at,
            usage_nano_cores: self.cpu_rate(which, id, sample, update),
            usage_core_nano_seconds: Some(sample.usage_core_nano_seconds),
        }
    }

    /// The rate since the kept sample of `id`; with `update`, `sample` is kept instead.
    fn cpu_rate(&self, which: Sampled, id: &str, sample: CpuSample, update: bool) -> Option<u64> {
        let mut cache = self.cpu.lock();
        let kept = match which {
            Sampled::Container => &mut cache.containers,
            Sampled::Pod => &mut cache.pods,
            Sampled::System => &mut cache.system,
        };
        let prev = kept.get(id).copied();
        // A reading taken again from the cache is not a new sample.
        let newer = prev.is_none_or(|p| p.sample.timestamp_ns < sample.timestamp_ns);
        if update && newer {
            let record = next_record(prev, sample);
            kept.insert(id.to_owned(), record);
            record.nano_cores
        } else {
            prev.and_then(|r| r.nano_cores)
        }
    }

    /// The emptyDir and configMap volumes of the pods with stats, from
    /// their directories under `<root-dir>/pods/<uid>/volumes`; a measure
    /// younger than volumeStatsAggPeriod is used again. The walks run on
    /// the blocking pool.
    async fn volume_stats(
        &self,
        view: &dyn StatsView,
        root_dir: &Path,
        by_uid: &HashMap<&str, &Pod>,
        pods: &mut [PodStats],
        now: SystemTime,
    ) {
        // (pod index, volume name, local ephemeral, its directory)
        let mut wanted = Vec::new();
        for (i, stats) in pods.iter().enumerate() {
            let Some(spec) = by_uid
                .get(stats.pod_ref.uid.as_str())
                .and_then(|p| p.spec.as_ref())
            else {
                continue;
            };
            let pod_dir = root_dir.join("pods").join(&stats.pod_ref.uid);
            for v in spec.volumes.iter().flatten() {
                let (plugin, local_ephemeral) = match (&v.empty_dir, &v.config_map) {
                    (Some(e), _) => (volume::EMPTY_DIR, e.medium.as_deref() != Some("Memory")),
                    (None, Some(_)) => (volume::CONFIG_MAP, true),
                    _ => continue,
                };
                let dir = volume::volume_dir(&pod_dir, plugin, &v.name);
                wanted.push((i, v.name.clone(), local_ephemeral, dir));
            }
        }
        let stale: Vec<PathBuf> = {
            let cache = self.volumes.lock();
            wanted
                .iter()
                .filter(|(.., dir)| {
                    cache.get(dir).is_none_or(|(at, _)| {
                        now.duration_since(*at).unwrap_or_default() >= self.volume_period
                    })
                })
                .map(|(.., dir)| dir.clone())
                .collect()
        };
        let measured = kubelet_tasks::off_thread(move || {
            stale
                .into_iter()
                .filter_map(|dir| {
                    let (bytes, inodes) = tree_usage(&dir).ok()?;
                    let fs = statvfs(&dir).ok();
                    Some((dir, VolumeUsage { bytes, inodes, fs }))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        {
            let mut cache = self.volumes.lock();
            for (dir, usage) in measured {
                cache.insert(dir, (now, usage));
            }
            // Volumes of pods gone are forgotten.
            cache.retain(|dir, _| wanted.iter().any(|(.., d)| d == dir));
            for (i, name, local_ephemeral, dir) in wanted {
                let Some((at, u)) = cache.get(&dir) else {
                    continue;
                };
                pods[i].volume_stats.push(VolumeStats {
                    fs: FsStats::part_of(*at, u.fs.as_ref(), Some(u.bytes), Some(u.inodes)),
                    name,
                    pvc_ref: None,
                    local_ephemeral,
                });
            }
        }
        self.claim_volume_stats(view, pods, now).await;
    }

    /// The pods' claim volumes (local PVs by statfs, CSI volumes by their
    /// drivers, each at most once per volumeStatsAggPeriod), with their
    /// `pvcRef`; kept for `kubelet_volume_stats_*`.
    async fn claim_volume_stats(
        &self,
        view: &dyn StatsView,
        pods: &mut [PodStats],
        now: SystemTime,
    ) {
        let wanted: Vec<(usize, ClaimVolume)> = pods
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                view.claim_volumes(&p.pod_ref.uid)
                    .into_iter()
                    .map(move |c| (i, c))
            })
            .collect();
        let stale: Vec<Measure> = {
            let cache = self.claims.lock();
            wanted
                .iter()
                .map(|(_, c)| &c.measure)
                .filter(|m| {
                    cache.get(*m).is_none_or(|(at, _)| {
                        now.duration_since(*at).unwrap_or_default() >= self.volume_period
                    })
                })
                .cloned()
                .collect()
        };
        let measured = futures::future::join_all(stale.into_iter().map(|m| async move {
            let fs = match &m {
                Measure::Statfs(dir) => {
                    let dir = dir.clone();
                    kubelet_tasks::off_thread(move || statvfs(&dir).ok())
                        .await
                        .ok()
                        .flatten()
                        .map(|u| FsStats::from_usage(now, &u))
                }
                Measure::Device(path) => {
                    let path = path.clone();
                    kubelet_tasks::off_thread(move || device_size(&path).ok())
                        .await
                        .ok()
                        .flatten()
                        .map(|size| FsStats::of_device(now, size))
                }
                Measure::Csi {
                    driver,
                    handle,
                    target,
                } => tokio::time::timeout(
                    CSI_STATS_TIMEOUT,
                    view.csi_volume_stats(driver, handle, target, now),
                )
                .await
                .ok()
                .flatten(),
            };
            (m, fs)
        }))
        .await;
        let mut cache = self.claims.lock();
        for (m, fs) in measured {
            cache.insert(m, (now, fs));
        }
        cache.retain(|m, _| wanted.iter().any(|(_, c)| &c.measure == m));
        let mut kept = Vec::new();
        for (i, c) in wanted {
            let Some((_, Some(fs))) = cache.get(&c.measure) else {
                continue;
            };
            let stats = VolumeStats {
                fs: fs.clone(),
                name: c.name,
                pvc_ref: Some(PvcReference {
                    name: c.claim,
                    namespace: c.namespace,
                }),
                local_ephemeral: false,
            };
            kept.push(stats.clone());
            pods[i].volume_stats.push(stats);
        }
        *self.claim_stats.lock() = kept;
    }

    /// `kubelet_volume_stats_*`, from the last summary's claim volumes.
    pub fn volume_metrics_text(&self) -> String {
        kubelet_core::stats::volume_stats_text(&self.claim_stats.lock())
    }

    /// A container's CPU and memory from the runtime's stats; zeros now
    /// when it has none yet, as upstream.
    fn runtime_container_usage(
        &self,
        id: &str,
        stat: Option<&cri::ContainerStats>,
        now: SystemTime,
        update: bool,
    ) -> (CpuStats, MemoryStats) {
        let cpu = match stat.and_then(|s| s.cpu.as_ref()) {
            Some(cpu) => self.runtime_cpu(Sampled::Container, id, cpu, update),
            None => CpuStats {
                time: now,
                usage_nano_cores: Some(0),
                usage_core_nano_seconds: Some(0),
            },
        };
        (
            cpu,
            container_memory(stat.and_then(|s| s.memory.as_ref()), now),
        )
    }

    /// CPU stats from the runtime's figures for a container or sandbox
    /// `id`: its usageNanoCores when it reports one, else the rate since
    /// the kept sample.
    fn runtime_cpu(&self, which: Sampled, id: &str, cpu: &cri::CpuUsage, update: bool) -> CpuStats {
        let usage = cpu.usage_core_nano_seconds.as_ref().map(|v| v.value);
        let nano_cores = match (&cpu.usage_nano_cores, usage) {
            (Some(reported), _) => Some(reported.value),
            (None, Some(usage)) => {
                let sample = CpuSample {
                    timestamp_ns: cpu.timestamp,
                    usage_core_nano_seconds: usage,
                };
                self.cpu_rate(which, id, sample, update)
            }
            (None, None) => {
                let sample = CpuSample {
                    timestamp_ns: cpu.timestamp,
                    usage_core_nano_seconds: 0,
                };
                self.cpu_rate(which, id, sample, false)
            }
        };
        CpuStats {
            time: time_from_nanos(cpu.timestamp),
            usage_nano_cores: nano_cores,
            usage_core_nano_seconds: usage,
        }
    }

    /// Drop container samples not refreshed within the cache period (gone containers).
    fn forget_old_samples(&self, now: SystemTime) {
        let horizon = nanos_since_epoch(now).saturating_sub(CPU_CACHE_PERIOD.as_nanos() as i64);
        let mut cache = self.cpu.lock();
        let fresh = |_: &String, r: &mut CpuRecord| r.sample.timestamp_ns >= horizon;
        cache.containers.retain(fresh);
        cache.pods.retain(fresh);
        cache.system.retain(fresh);
    }
}

/// A container's memory stats as the runtime reports them.
/// A container's writable layer as the runtime measured it, on the file
/// system of its mountpoint (each mountpoint's statvfs read once a summary).
fn writable_layer(
    layer: &cri::FilesystemUsage,
    mountpoints: &mut HashMap<String, Option<FsUsage>>,
) -> FsStats {
    let fs = match &layer.fs_id {
        Some(id) => *mountpoints
            .entry(id.mountpoint.clone())
            .or_insert_with(|| statvfs(Path::new(&id.mountpoint)).ok()),
        None => None,
    };
    FsStats::part_of(
        time_from_nanos(layer.timestamp),
        fs.as_ref(),
        layer.used_bytes.as_ref().map(|v| v.value),
        layer.inodes_used.as_ref().map(|v| v.value),
    )
}

/// The kubelet's pods the runtime has nothing running for: their
/// reference and start time only.
fn add_pods_without_containers(specs: &[Pod], pods: &mut Vec<PodStats>) {
    for pod in specs {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if pods.iter().any(|p| p.pod_ref.uid == uid) {
            continue;
        }
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| time_from_nanos(i64::try_from(t.0.as_nanosecond()).unwrap_or(0)));
        pods.push(PodStats {
            pod_ref: PodReference {
                name: pod.metadata.name.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                uid,
            },
            start_time,
            ..Default::default()
        });
    }
}

fn container_memory(memory: Option<&cri::MemoryUsage>, now: SystemTime) -> MemoryStats {
    let Some(m) = memory else {
        return MemoryStats {
            time: now,
            available_bytes: None,
            usage_bytes: None,
            working_set_bytes: Some(0),
            rss_bytes: None,
            page_faults: None,
            major_page_faults: None,
        };
    };
    runtime_memory(m)
}

/// Memory stats from the runtime's figures for a container or sandbox.
fn runtime_memory(m: &cri::MemoryUsage) -> MemoryStats {
    let value = |v: &Option<cri::UInt64Value>| v.as_ref().map(|v| v.value);
    MemoryStats {
        time: time_from_nanos(m.timestamp),
        available_bytes: value(&m.available_bytes),
        usage_bytes: value(&m.usage_bytes),
        working_set_bytes: value(&m.working_set_bytes),
        rss_bytes: value(&m.rss_bytes),
        page_faults: value(&m.page_faults),
        major_page_faults: value(&m.major_page_faults),
    }
}

/// A sandbox's network as the runtime reports it (upstream's
/// addCRIPodNetworkStats): the default interface inline, and every one.
fn sandbox_network(n: cri::NetworkUsage) -> NetworkStats {
    let interface = |i: &cri::NetworkInterfaceUsage| {
        let value = |v: &Option<cri::UInt64Value>| v.as_ref().map(|v| v.value);
        InterfaceStats {
            name: i.name.clone(),
            rx_bytes: value(&i.rx_bytes),
            rx_errors: value(&i.rx_errors),
            tx_bytes: value(&i.tx_bytes),
            tx_errors: value(&i.tx_errors),
        }
    };
    NetworkStats {
        time: time_from_nanos(n.timestamp),
        default: n
            .default_interface
            .as_ref()
            .map(interface)
            .unwrap_or_default(),
        interfaces: n.interfaces.iter().map(interface).collect(),
    }
}

/// A container's swap stats; zeros now when the runtime reports none (as upstream).
fn container_swap(swap: Option<&cri::SwapUsage>, now: SystemTime) -> SwapStats {
    match swap {
        Some(s) => SwapStats {
            time: time_from_nanos(s.timestamp),
            swap_available_bytes: s.swap_available_bytes.as_ref().map(|v| v.value),
            swap_usage_bytes: s.swap_usage_bytes.as_ref().map(|v| v.value),
        },
        None => SwapStats {
            time: now,
            swap_available_bytes: Some(0),
            swap_usage_bytes: Some(0),
        },
    }
}

/// Image file system usage (the first one the runtime reports), with the
/// size of the file system it is on when that is mounted here. Upstream
/// reports the same figures as the container file system.
async fn runtime_stats(view: &dyn StatsView) -> Result<RuntimeStats, StatsError> {
    let info = view
        .cri()
        .image_fs_info()
        .await
        .map_err(|source| StatsError::Cri {
            what: "imageFs stats",
            source,
        })?;
    let fs = info
        .image_filesystems
        .first()
        .ok_or(StatsError::NoImageFs)?;
    let usage = fs
        .fs_id
        .as_ref()
        .and_then(|id| statvfs(Path::new(&id.mountpoint)).ok());
    let image_fs = FsStats::part_of(
        time_from_nanos(fs.timestamp),
        usage.as_ref(),
        fs.used_bytes.as_ref().map(|v| v.value),
        fs.inodes_used.as_ref().map(|v| v.value),
    );
    Ok(RuntimeStats {
        image_fs: Some(image_fs.clone()),
        container_fs: Some(image_fs),
    })
}

#[cfg(test)]
mod tests;
