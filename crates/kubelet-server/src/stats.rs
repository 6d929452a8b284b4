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
//! previous sample this provider kept. The eviction manager reads the same
//! provider.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::cgroups::{CgroupLayout, CgroupName, PodCgroups};
use kubelet_core::stats::{
    CgroupUsage, ContainerStats, CpuSample, CpuStats, FsStats, FsUsage, MemoryReading, MemoryStats,
    NetworkStats, NodeStats, ParseError, PodReference, PodStats, RlimitStats, RuntimeStats,
    SYSTEM_CONTAINER_PODS, Summary, SwapStats, VolumeStats, count_procs, default_route_interface,
    ephemeral_storage, nanos_since_epoch, node_available_memory, parse_cpu_stat_usage,
    parse_flat_keyed, parse_loadavg_tasks, parse_meminfo, parse_memory_limit, parse_net_dev,
    parse_proc_stat, parse_single_int, resource_metrics_text, sum_cpu_memory, sum_swap,
    ticks_to_nanos, time_from_nanos, usage_nano_cores,
};
use kubelet_core::volume;
use kubelet_cri::client::{CriClient, CriError};

use crate::NodeView;

/// How long a container's CPU sample is kept without a newer one (upstream's defaultCachePeriod).
const CPU_CACHE_PERIOD: Duration = Duration::from_secs(10 * 60);
/// How long a volume's measured usage is kept (upstream's
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

/// Whose CPU samples.
#[derive(Clone, Copy, Debug)]
enum Sampled {
    Container,
    Pod,
    /// A system container, by name.
    System,
}

/// A pod's stats as they are gathered, with its cgroup and that cgroup's
/// usage when it has one.
struct PodEntry {
    stats: PodStats,
    cgroup: Option<(CgroupName, SystemTime, CgroupUsage)>,
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
    /// The runtime's last container stats, and when they were asked, for
    /// writable layers (kept only where pods have cgroups of their own).
    runtime: Mutex<Option<(SystemTime, Arc<Vec<cri::ContainerStats>>)>>,
    /// Each pod and container cgroup's last reading: when it was read, the
    /// usage, and the last summary that asked for it.
    cgroups: Mutex<HashMap<CgroupName, (SystemTime, CgroupUsage, SystemTime)>>,
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
            runtime: Mutex::default(),
            cgroups: Mutex::default(),
        }
    }

    /// `/stats/summary` as upstream's JSON (stats/v1alpha1 Summary); with
    /// `only_cpu_and_memory` just the node's and pods' CPU, memory and swap.
    /// Each call takes new CPU samples: usageNanoCores is the average since
    /// the previous call (or the runtime's own figure when it reports one).
    pub async fn summary(
        &self,
        view: &dyn NodeView,
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
    pub async fn get(&self, view: &dyn NodeView) -> Result<Summary, StatsError> {
        self.build(view, Scope::Full, true, Duration::ZERO).await
    }

    /// `/metrics/resource` as upstream's Prometheus text. A failure to gather
    /// the stats is not an error of the endpoint: it is logged and reported
    /// as `resource_scrape_error 1`, as upstream does.
    pub async fn resource_metrics(&self, view: &dyn NodeView) -> String {
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
        view: &dyn NodeView,
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
        view: &dyn NodeView,
        now: SystemTime,
        root_fs: Option<FsUsage>,
        update: bool,
        max_age: Duration,
    ) -> Result<Vec<PodStats>, StatsError> {
        let cri = view.cri();
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
        let cgroups = view.pod_cgroups();
        let stats = match (&cgroups, root_fs) {
            // Every figure is the runtime's: the latest.
            (None, _) => Arc::new(
                cri.list_container_stats(None)
                    .await
                    .map_err(cri_err("container stats"))?,
            ),
            (Some(_), Some(_)) => self.runtime_stats(&cri, now, max_age).await?,
            (Some(_), None) => Arc::default(),
        };
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
                }
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
                (None, stat) => (
                    self.container_cpu(
                        &container.id,
                        stat.and_then(|s| s.cpu.as_ref()),
                        now,
                        update,
                    ),
                    container_memory(stat.and_then(|s| s.memory.as_ref()), now),
                ),
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
                if let Some(layer) = stat.and_then(|s| s.writable_layer.as_ref()) {
                    let fs = match &layer.fs_id {
                        Some(id) => *mountpoints
                            .entry(id.mountpoint.clone())
                            .or_insert_with(|| statvfs(Path::new(&id.mountpoint)).ok()),
                        None => None,
                    };
                    cs.rootfs = Some(FsStats::part_of(
                        time_from_nanos(layer.timestamp),
                        fs.as_ref(),
                        layer.used_bytes.as_ref().map(|v| v.value),
                        layer.inodes_used.as_ref().map(|v| v.value),
                    ));
                }
                cs.logs =
                    container_log_stats(&view.logs_root(), &pod.pod_ref, &name, root, root_fs)
                        .await;
            }
            cs.name = name;
            pod.containers.push(cs);
        }

        let mut pods = Vec::with_capacity(by_sandbox.len());
        for entry in by_sandbox.into_values() {
            let mut pod = entry.stats;
            pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
            // The pod cgroup holds the sandbox and the pod overhead too
            // (addPodCPUMemoryStats reads it first); without one, the sum
            // of the containers'.
            (pod.cpu, pod.memory) = match entry.cgroup {
                Some((_, at, u)) => {
                    let uid = pod.pod_ref.uid.clone();
                    (
                        Some(self.cgroup_cpu(Sampled::Pod, &uid, at, &u, update)),
                        Some(u.memory_stats(at)),
                    )
                }
                None => sum_cpu_memory(&pod.containers),
            };
            pods.push(pod);
        }
        if update {
            self.forget_old_samples(now);
        }
        // Readings of cgroups this summary did not ask for (gone pods and
        // containers) are dropped.
        self.cgroups.lock().retain(|_, (.., seen)| *seen == now);
        if root_fs_stats.is_some() {
            self.volume_stats(&view.root_dir(), &by_uid, &mut pods, now)
                .await;
        }
        if let Some(root) = &root_fs_stats {
            for pod in &mut pods {
                pod.swap = sum_swap(&pod.containers);
                pod.ephemeral_storage =
                    Some(ephemeral_storage(&pod.containers, &pod.volume_stats, root));
            }
        }
        // The kubelet's pods the runtime has nothing running for.
        for pod in &specs {
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
        pods.sort_by(|a, b| {
            (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name))
        });
        Ok(pods)
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
    /// younger than [`VOLUME_STATS_PERIOD`] is used again. The walks run on
    /// the blocking pool.
    async fn volume_stats(
        &self,
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
                        now.duration_since(*at).unwrap_or_default() >= VOLUME_STATS_PERIOD
                    })
                })
                .map(|(.., dir)| dir.clone())
                .collect()
        };
        let measured = tokio::task::spawn_blocking(move || {
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
                local_ephemeral,
            });
        }
    }

    /// A container's CPU stats; the rate is the runtime's if it gives one,
    /// else computed from the kept sample (taking a new one when `update`).
    fn container_cpu(
        &self,
        id: &str,
        cpu: Option<&cri::CpuUsage>,
        now: SystemTime,
        update: bool,
    ) -> CpuStats {
        let Some(cpu) = cpu else {
            return CpuStats {
                time: now,
                usage_nano_cores: Some(0),
                usage_core_nano_seconds: Some(0),
            };
        };
        let usage = cpu.usage_core_nano_seconds.as_ref().map(|v| v.value);
        let nano_cores = match (&cpu.usage_nano_cores, usage) {
            (Some(reported), _) => Some(reported.value),
            (None, Some(usage)) => {
                let sample = CpuSample {
                    timestamp_ns: cpu.timestamp,
                    usage_core_nano_seconds: usage,
                };
                self.cpu_rate(Sampled::Container, id, sample, update)
            }
            (None, None) => {
                let cache = self.cpu.lock();
                cache.containers.get(id).and_then(|r| r.nano_cores)
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
async fn runtime_stats(view: &dyn NodeView) -> Result<RuntimeStats, StatsError> {
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

/// Size and free space of the file system holding `path`.
fn statvfs(path: &Path) -> Result<FsUsage, StatsError> {
    let st = rustix::fs::statvfs(path).map_err(|errno| StatsError::Statvfs {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    let block = st.f_frsize;
    Ok(FsUsage {
        capacity_bytes: st.f_blocks.saturating_mul(block),
        available_bytes: st.f_bavail.saturating_mul(block),
        used_bytes: st.f_blocks.saturating_sub(st.f_bfree).saturating_mul(block),
        inodes: st.f_files,
        inodes_free: st.f_ffree,
    })
}

/// Disk usage of a container's log directory,
/// `<logs root>/<namespace>_<name>_<uid>/<container>/` (upstream's
/// getPodContainerLogStats): bytes allocated and inodes, the directory
/// included. None when a name could leave the logs root or the directory
/// cannot be read.
async fn container_log_stats(
    logs_root: &Path,
    pod: &PodReference,
    container: &str,
    root: &FsStats,
    root_fs: Option<FsUsage>,
) -> Option<FsStats> {
    let safe = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains('/');
    if ![
        pod.namespace.as_str(),
        pod.name.as_str(),
        pod.uid.as_str(),
        container,
    ]
    .into_iter()
    .all(safe)
    {
        return None;
    }
    let dir = logs_root
        .join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid))
        .join(container);
    match dir_usage(&dir) {
        Ok((bytes, inodes)) => Some(FsStats::part_of(
            root.time,
            root_fs.as_ref(),
            Some(bytes),
            Some(inodes),
        )),
        Err(err) => {
            tracing::debug!(dir = %dir.display(), %err, "Unable to fetch container log stats");
            None
        }
    }
}

/// How deep a volume walk goes: a pod nesting directories without end
/// cannot exhaust the stack or the descriptors of the thread (or of the
/// kubelet) walking it; what lies deeper is not counted.
const MAX_WALK_DEPTH: usize = 128;

/// Allocated bytes and inode count of a directory tree, as upstream's du
/// of a volume. The walk goes through directory descriptors (`openat`
/// with O_NOFOLLOW and O_DIRECTORY, `fstatat` without following), so a
/// symlink a container puts in place of a directory, even mid-walk, never
/// leads it out; other file systems (mounts inside it) are not entered; an
/// entry gone meanwhile is not counted. One descriptor is open per level,
/// and no more than [`MAX_WALK_DEPTH`] levels are entered.
fn tree_usage(dir: &Path) -> io::Result<(u64, u64)> {
    use rustix::fs::{Mode, OFlags, open};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let top = std::fs::symlink_metadata(dir)?;
    let mut usage = (top.blocks() * 512, 1);
    if top.is_dir() {
        let fd = open(dir, flags, Mode::empty())?;
        walk(&fd, top.dev(), MAX_WALK_DEPTH, &mut usage);
    }
    Ok(usage)
}

/// Add what directory `dir` holds to `usage`, on device `dev` only,
/// entering at most `depth` more levels.
fn walk(dir: &rustix::fd::OwnedFd, dev: u64, depth: usize, usage: &mut (u64, u64)) {
    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, openat, statat};
    let Ok(entries) = Dir::read_from(dir) else {
        return;
    };
    let mut subdirs = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let Ok(st) = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        if st.st_dev != dev {
            continue;
        }
        usage.0 += u64::try_from(st.st_blocks).unwrap_or(0) * 512;
        usage.1 += 1;
        if depth > 1 && FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            subdirs.push(name.to_owned());
        }
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for name in subdirs {
        if let Ok(fd) = openat(dir, name.as_c_str(), flags, Mode::empty()) {
            walk(&fd, dev, depth - 1, usage);
        }
    }
}

/// Allocated bytes and inode count of a directory and the entries in it
/// (log directories hold files only; symlinks are not followed).
fn dir_usage(dir: &Path) -> io::Result<(u64, u64)> {
    // Plain std::fs: a log directory's metadata is a few local syscalls,
    // cheaper inline than hopping through tokio's blocking pool per entry.
    let meta = std::fs::symlink_metadata(dir)?;
    let mut bytes = meta.blocks() * 512;
    let mut inodes = 1;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        bytes += meta.blocks() * 512;
        inodes += 1;
    }
    Ok((bytes, inodes))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::api::core::v1::{Pod, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;
    use kubelet_core::metrics::format_float;
    use kubelet_cri::client::CriClient;
    use kubelet_cri::fake::{FakeContainerStats, FakeRuntime};
    use serde_json::{Value, json};

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
    }

    impl NodeView for TestView {
        fn node_name(&self) -> String {
            "node-1".into()
        }
        fn problems(&self) -> Vec<(&'static str, String)> {
            Vec::new()
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
        fn configz(&self) -> Value {
            Value::Null
        }
        fn metrics_text(&self) -> String {
            String::new()
        }
        fn probe_metrics_text(&self) -> String {
            String::new()
        }
        fn pod_cgroups(&self) -> Option<PodCgroups> {
            self.cgroups.clone()
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
        let idle = Pod {
            metadata: ObjectMeta {
                name: Some("idle".into()),
                namespace: Some("default".into()),
                uid: Some("uid-idle".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                start_time: Some(Time(Timestamp::from_second(1_700_000_010).unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        };
        let view = TestView {
            cri,
            pods: vec![idle],
            logs_root,
            root_dir: dir.path().to_path_buf(),
            cgroups: None,
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
        use k8s_openapi::api::core::v1::{
            ConfigMapVolumeSource, EmptyDirVolumeSource, PodSpec, Volume,
        };
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
        f.view.pods.push(Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("uid-web".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![
                    volume("scratch", None),
                    volume("mem", Some("Memory")),
                    cfg,
                ]),
                ..Default::default()
            }),
            ..Default::default()
        });
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
}
