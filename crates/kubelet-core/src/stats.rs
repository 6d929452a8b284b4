//! Resource statistics, the pure parts: the Summary API types
//! (upstream's k8s.io/kubelet/pkg/apis/stats/v1alpha1), parsers of the host
//! files the node stats come from (/proc/stat, /proc/meminfo, /proc/net/dev,
//! /proc/net/route, /proc/loadavg, cgroup memory.stat — what cAdvisor reads
//! upstream), the CPU rate and pod aggregation rules of upstream's
//! pkg/kubelet/stats/cri_stats_provider.go, and the Prometheus text of
//! `/metrics/resource` (pkg/kubelet/metrics/collectors/resource_metrics.go).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

use crate::expfmt::{Family, render};
use crate::timefmt::rfc3339_nanos;

// ---- Summary API types (stats/v1alpha1) ----

/// `Summary`: the node and its pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

/// `NodeStats`. Of the system containers only `pods` (the node-allocatable
/// cgroup, when pods have cgroups) is reported: rkubelet does not account
/// its own and the runtime's cgroups apart.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    /// Boot time of the node.
    #[serde(serialize_with = "opt_time")]
    pub start_time: Option<SystemTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
}

/// The system container of the pods' cgroup (SystemContainerPods).
pub const SYSTEM_CONTAINER_PODS: &str = "pods";

impl NodeStats {
    /// The pods' cgroup's memory (the `pods` system container's), if reported.
    pub fn pods_memory(&self) -> Option<&MemoryStats> {
        self.system_containers
            .iter()
            .find(|c| c.name == SYSTEM_CONTAINER_PODS)
            .and_then(|c| c.memory.as_ref())
    }
}

/// `PodStats` (pod network stats are not reported).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    #[serde(serialize_with = "opt_time")]
    pub start_time: Option<SystemTime>,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The pod's network namespace, where the runtime reports it
    /// (PodAndContainerStatsFromCRI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// `volume`: the pod's emptyDir and configMap volumes.
    #[serde(rename = "volume", skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
    /// The processes of the pod's containers.
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
}

/// `ProcessStats`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcessStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

/// `VolumeStats`: a volume's usage by its name in the pod's spec.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    pub name: String,
    /// The claim of a persistentVolumeClaim or ephemeral volume.
    #[serde(rename = "pvcRef", skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
    /// Whether it counts as the pod's local ephemeral storage
    /// (IsLocalEphemeralVolume: an emptyDir on disk, a configMap).
    #[serde(skip)]
    pub local_ephemeral: bool,
}

/// `PVCReference`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PvcReference {
    pub name: String,
    pub namespace: String,
}

/// `PodReference`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

/// `ContainerStats`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    /// The container's creation time.
    #[serde(serialize_with = "opt_time")]
    pub start_time: Option<SystemTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// `CPUStats`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    #[serde(serialize_with = "time")]
    pub time: SystemTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// `MemoryStats`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    #[serde(serialize_with = "time")]
    pub time: SystemTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// `SwapStats`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwapStats {
    #[serde(serialize_with = "time")]
    pub time: SystemTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_usage_bytes: Option<u64>,
}

/// `NetworkStats`: the default interface inline, then every interface.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetworkStats {
    #[serde(serialize_with = "time")]
    pub time: SystemTime,
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// `InterfaceStats`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// `FsStats`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    #[serde(serialize_with = "time")]
    pub time: SystemTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

impl FsStats {
    /// A raw block device's: its size as capacity, nothing else (upstream's
    /// MetricsBlock).
    pub fn of_device(time: SystemTime, size: u64) -> FsStats {
        FsStats {
            time,
            available_bytes: None,
            capacity_bytes: Some(size),
            used_bytes: None,
            inodes_free: None,
            inodes: None,
            inodes_used: None,
        }
    }

    /// A file system's own numbers (statvfs): used is capacity minus free blocks.
    pub fn from_usage(time: SystemTime, usage: &FsUsage) -> FsStats {
        FsStats {
            time,
            available_bytes: Some(usage.available_bytes),
            capacity_bytes: Some(usage.capacity_bytes),
            used_bytes: Some(usage.used_bytes),
            inodes_free: Some(usage.inodes_free),
            inodes: Some(usage.inodes),
            inodes_used: Some(usage.inodes.saturating_sub(usage.inodes_free)),
        }
    }

    /// Usage of a part of a file system (a writable layer, a log directory):
    /// the part's own bytes and inodes, the file system's capacity and free space.
    pub fn part_of(
        time: SystemTime,
        fs: Option<&FsUsage>,
        used_bytes: Option<u64>,
        inodes_used: Option<u64>,
    ) -> FsStats {
        FsStats {
            time,
            available_bytes: fs.map(|f| f.available_bytes),
            capacity_bytes: fs.map(|f| f.capacity_bytes),
            used_bytes,
            inodes_free: fs.map(|f| f.inodes_free),
            inodes: fs.map(|f| f.inodes),
            inodes_used,
        }
    }
}

/// A file system's size and free space, as statvfs reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsUsage {
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    /// Capacity minus free blocks (free includes the root-reserved ones).
    pub used_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// `RuntimeStats`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

/// `RlimitStats`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RlimitStats {
    #[serde(serialize_with = "time")]
    pub time: SystemTime,
    #[serde(rename = "maxpid", skip_serializing_if = "Option::is_none")]
    pub max_pid: Option<i64>,
    #[serde(rename = "curproc", skip_serializing_if = "Option::is_none")]
    pub num_of_running_processes: Option<i64>,
}

/// metav1.Time's JSON: RFC 3339 in UTC, whole seconds.
fn time<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339_seconds(*t))
}

/// An unset metav1.Time is `null`.
fn opt_time<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => time(t, s),
        None => s.serialize_none(),
    }
}

/// RFC 3339 with the fraction of a second dropped (floored), as metav1.Time marshals.
pub fn rfc3339_seconds(t: SystemTime) -> String {
    let floored = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => UNIX_EPOCH + Duration::from_secs(d.as_secs()),
        Err(e) => {
            let d = e.duration();
            let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
            UNIX_EPOCH - Duration::from_secs(secs)
        }
    };
    rfc3339_nanos(floored)
}

/// Nanoseconds since the epoch (CRI timestamps) as a time; 0 and negatives are the epoch.
pub fn time_from_nanos(nanos: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

/// Nanoseconds since the epoch of `t` (0 before the epoch, saturating far after).
pub fn nanos_since_epoch(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

// ---- CPU rate and aggregation (cri_stats_provider.go) ----

/// One cumulative CPU reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    /// When it was taken, nanoseconds since the epoch.
    pub timestamp_ns: i64,
    /// Cumulative core-nanoseconds.
    pub usage_core_nano_seconds: u64,
}

/// Average cores used between two readings, in nanocores. None when the
/// counter went backwards (a restarted container) or no time passed.
pub fn usage_nano_cores(prev: CpuSample, cur: CpuSample) -> Option<u64> {
    let elapsed = cur.timestamp_ns.checked_sub(prev.timestamp_ns)?;
    if elapsed <= 0 || cur.usage_core_nano_seconds < prev.usage_core_nano_seconds {
        return None;
    }
    let used = cur.usage_core_nano_seconds - prev.usage_core_nano_seconds;
    // Same float arithmetic as upstream, truncated.
    Some((used as f64 / elapsed as f64 * 1e9) as u64)
}

/// Pod CPU and memory as the sum of its containers' (upstream's
/// addPodCPUMemoryStats without a pod cgroup): every field is summed, an
/// absent one counting as 0; the time is the last container's.
pub fn sum_cpu_memory(containers: &[ContainerStats]) -> (Option<CpuStats>, Option<MemoryStats>) {
    let mut cpu: Option<CpuStats> = None;
    let mut memory: Option<MemoryStats> = None;
    let add = |a: Option<u64>, b: Option<u64>| Some(a.unwrap_or(0) + b.unwrap_or(0));
    for c in containers {
        if let Some(cs) = &c.cpu {
            let prev = cpu.take();
            cpu = Some(CpuStats {
                time: cs.time,
                usage_nano_cores: add(
                    prev.as_ref().and_then(|p| p.usage_nano_cores),
                    cs.usage_nano_cores,
                ),
                usage_core_nano_seconds: add(
                    prev.as_ref().and_then(|p| p.usage_core_nano_seconds),
                    cs.usage_core_nano_seconds,
                ),
            });
        }
        if let Some(ms) = &c.memory {
            let p = memory.take();
            let p = p.as_ref();
            memory = Some(MemoryStats {
                time: ms.time,
                available_bytes: add(p.and_then(|p| p.available_bytes), ms.available_bytes),
                usage_bytes: add(p.and_then(|p| p.usage_bytes), ms.usage_bytes),
                working_set_bytes: add(p.and_then(|p| p.working_set_bytes), ms.working_set_bytes),
                rss_bytes: add(p.and_then(|p| p.rss_bytes), ms.rss_bytes),
                page_faults: add(p.and_then(|p| p.page_faults), ms.page_faults),
                major_page_faults: add(p.and_then(|p| p.major_page_faults), ms.major_page_faults),
            });
        }
    }
    (cpu, memory)
}

/// Pod swap as the sum of its containers' (upstream's addSwapStats); the time is the first container's.
pub fn sum_swap(containers: &[ContainerStats]) -> Option<SwapStats> {
    let mut out: Option<SwapStats> = None;
    for swap in containers.iter().filter_map(|c| c.swap.as_ref()) {
        let acc = out.get_or_insert(SwapStats {
            time: swap.time,
            swap_available_bytes: Some(0),
            swap_usage_bytes: Some(0),
        });
        acc.swap_available_bytes =
            Some(acc.swap_available_bytes.unwrap_or(0) + swap.swap_available_bytes.unwrap_or(0));
        acc.swap_usage_bytes =
            Some(acc.swap_usage_bytes.unwrap_or(0) + swap.swap_usage_bytes.unwrap_or(0));
    }
    out
}

/// A pod's ephemeral storage (upstream's calcEphemeralStorage for the CRI
/// provider): the root file system's size and free space, the sum of the
/// containers' writable layers and logs and of the local ephemeral
/// volumes, the latest time.
pub fn ephemeral_storage(
    containers: &[ContainerStats],
    volumes: &[VolumeStats],
    root: &FsStats,
) -> FsStats {
    let mut out = FsStats {
        used_bytes: None,
        inodes_used: None,
        ..root.clone()
    };
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, b) => b,
        (a, None) => a,
        (Some(a), Some(b)) => Some(a + b),
    };
    for rootfs in containers
        .iter()
        .filter_map(|c| c.rootfs.as_ref().map(|r| (r, c)))
    {
        let (rootfs, container) = rootfs;
        out.time = out.time.max(rootfs.time);
        out.inodes_used = add(out.inodes_used, rootfs.inodes_used);
        out.used_bytes = add(out.used_bytes, rootfs.used_bytes);
        if let Some(logs) = &container.logs {
            out.used_bytes = add(out.used_bytes, logs.used_bytes);
            out.inodes_used = add(out.inodes_used, logs.inodes_used);
            out.time = out.time.max(logs.time);
        }
    }
    for v in volumes.iter().filter(|v| v.local_ephemeral) {
        out.used_bytes = add(out.used_bytes, v.fs.used_bytes);
        out.inodes_used = add(out.inodes_used, v.fs.inodes_used);
        out.time = out.time.max(v.fs.time);
    }
    out
}

// ---- Host file parsers ----

/// A host file that could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {detail}")]
pub struct ParseError {
    pub file: &'static str,
    pub detail: String,
}

fn parse_err(file: &'static str, detail: impl Into<String>) -> ParseError {
    ParseError {
        file,
        detail: detail.into(),
    }
}

fn parse_u64(file: &'static str, what: &str, s: &str) -> Result<u64, ParseError> {
    s.parse()
        .map_err(|_| parse_err(file, format!("{what}: {s:?} is not a number")))
}

/// The aggregate `cpu` line of /proc/stat, in clock ticks (USER_HZ).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTicks {
    /// Ticks spent doing work: user, nice, system, irq, softirq and steal
    /// (guest time is already counted in user).
    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq + self.steal
    }
}

/// What the node stats need from /proc/stat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcStat {
    pub cpu: CpuTicks,
    /// Boot time, seconds since the epoch (`btime`).
    pub boot_time_secs: u64,
}

/// Parse /proc/stat: the aggregate `cpu` line and `btime`.
pub fn parse_proc_stat(text: &str) -> Result<ProcStat, ParseError> {
    const FILE: &str = "/proc/stat";
    let mut cpu = None;
    let mut btime = None;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("cpu") => {
                let values = fields
                    .map(|f| parse_u64(FILE, "cpu", f))
                    .collect::<Result<Vec<_>, _>>()?;
                if values.len() < 8 {
                    return Err(parse_err(
                        FILE,
                        format!("cpu line has {} fields, want at least 8", values.len()),
                    ));
                }
                cpu = Some(CpuTicks {
                    user: values[0],
                    nice: values[1],
                    system: values[2],
                    idle: values[3],
                    iowait: values[4],
                    irq: values[5],
                    softirq: values[6],
                    steal: values[7],
                });
            }
            Some("btime") => {
                let value = fields.next().unwrap_or_default();
                btime = Some(parse_u64(FILE, "btime", value)?);
            }
            _ => {}
        }
    }
    Ok(ProcStat {
        cpu: cpu.ok_or_else(|| parse_err(FILE, "no cpu line"))?,
        boot_time_secs: btime.ok_or_else(|| parse_err(FILE, "no btime line"))?,
    })
}

/// Clock ticks to nanoseconds.
pub fn ticks_to_nanos(ticks: u64, ticks_per_second: u64) -> u64 {
    let per_second = ticks_per_second.max(1);
    // u128 so a long uptime at a high tick rate cannot overflow the product.
    (u128::from(ticks) * 1_000_000_000 / u128::from(per_second)) as u64
}

/// What the node stats need from /proc/meminfo, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub free: u64,
    pub inactive_file: u64,
    pub anon_pages: u64,
    pub swap_total: u64,
    pub swap_free: u64,
    /// `Hugetlb`: the memory held as huge pages, of every size (0 where
    /// the kernel does not say).
    pub hugetlb: u64,
}

/// Parse /proc/meminfo (`Name:   123 kB` lines).
pub fn parse_meminfo(text: &str) -> Result<MemInfo, ParseError> {
    const FILE: &str = "/proc/meminfo";
    let mut values: HashMap<&str, u64> = HashMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let Some(number) = parts.next() else {
            continue;
        };
        let n = parse_u64(FILE, name, number)?;
        let bytes = if parts.next() == Some("kB") {
            n * 1024
        } else {
            n
        };
        values.insert(name, bytes);
    }
    let get = |name: &str| {
        values
            .get(name)
            .copied()
            .ok_or_else(|| parse_err(FILE, format!("no {name} line")))
    };
    Ok(MemInfo {
        total: get("MemTotal")?,
        free: get("MemFree")?,
        inactive_file: get("Inactive(file)")?,
        anon_pages: get("AnonPages")?,
        swap_total: get("SwapTotal")?,
        swap_free: get("SwapFree")?,
        hugetlb: values.get("Hugetlb").copied().unwrap_or(0),
    })
}

/// The node's available memory as upstream's summary gives it with
/// HugepageAwareEviction (beta, on in 1.37): capacity less the working
/// set, less the memory held as huge pages (not usable as regular memory),
/// never below 0.
pub fn node_available_memory(meminfo: &MemInfo, working_set: u64) -> u64 {
    meminfo
        .total
        .saturating_sub(working_set)
        .saturating_sub(meminfo.hugetlb)
}

/// Parse a flat `name value` file (cgroup memory.stat, /proc/vmstat).
pub fn parse_flat_keyed<'a>(
    file: &'static str,
    text: &'a str,
) -> Result<HashMap<&'a str, u64>, ParseError> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        out.insert(name, parse_u64(file, name, value)?);
    }
    Ok(out)
}

/// A cgroup's memory figures as cAdvisor reads them (the root cgroup's
/// for the node).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryReading {
    pub usage_bytes: u64,
    pub working_set_bytes: u64,
    pub rss_bytes: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
}

impl MemoryReading {
    /// From a cgroup v1 directory (the root's for the node):
    /// memory.usage_in_bytes and memory.stat's hierarchical totals; the
    /// working set is usage minus inactive file pages, as cAdvisor computes it.
    pub fn from_cgroup_v1(
        usage_in_bytes: u64,
        memory_stat: &HashMap<&str, u64>,
    ) -> Result<MemoryReading, ParseError> {
        Self::from_memory_stat(
            usage_in_bytes,
            memory_stat,
            [
                "total_inactive_file",
                "total_rss",
                "total_pgfault",
                "total_pgmajfault",
            ],
        )
    }

    /// From a cgroup v2 directory: memory.current and memory.stat; the
    /// working set drops inactive file pages, rss is the anonymous memory
    /// (cAdvisor's v2 reading).
    pub fn from_cgroup_v2(
        current: u64,
        memory_stat: &HashMap<&str, u64>,
    ) -> Result<MemoryReading, ParseError> {
        Self::from_memory_stat(
            current,
            memory_stat,
            ["inactive_file", "anon", "pgfault", "pgmajfault"],
        )
    }

    /// `usage` with memory.stat's lines named `[inactive file, rss, page
    /// faults, major page faults]`.
    fn from_memory_stat(
        usage: u64,
        memory_stat: &HashMap<&str, u64>,
        [inactive, rss, faults, major]: [&str; 4],
    ) -> Result<MemoryReading, ParseError> {
        const FILE: &str = "memory.stat";
        let get = |name: &str| {
            memory_stat
                .get(name)
                .copied()
                .ok_or_else(|| parse_err(FILE, format!("no {name} line")))
        };
        Ok(MemoryReading {
            usage_bytes: usage,
            working_set_bytes: usage.saturating_sub(get(inactive)?),
            rss_bytes: get(rss)?,
            page_faults: get(faults)?,
            major_page_faults: get(major)?,
        })
    }

    /// Without a v1 memory cgroup: the same formula on /proc/meminfo (usage is
    /// total minus free, working set drops inactive file pages, rss is the
    /// anonymous pages) and page faults from /proc/vmstat.
    pub fn from_meminfo(
        meminfo: &MemInfo,
        vmstat: &HashMap<&str, u64>,
    ) -> Result<MemoryReading, ParseError> {
        const FILE: &str = "/proc/vmstat";
        let get = |name: &str| {
            vmstat
                .get(name)
                .copied()
                .ok_or_else(|| parse_err(FILE, format!("no {name} line")))
        };
        let usage = meminfo.total.saturating_sub(meminfo.free);
        Ok(MemoryReading {
            usage_bytes: usage,
            working_set_bytes: usage.saturating_sub(meminfo.inactive_file),
            rss_bytes: meminfo.anon_pages,
            page_faults: get("pgfault")?,
            major_page_faults: get("pgmajfault")?,
        })
    }
}

/// One cgroup's CPU, memory and process figures, read from its files (what
/// cAdvisor reads for a container or pod cgroup).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    /// Cumulative CPU time in nanoseconds.
    pub cpu_usage_ns: u64,
    pub memory: MemoryReading,
    /// The memory limit; None when unlimited.
    pub memory_limit: Option<u64>,
    /// The processes in the cgroup itself (its cgroup.procs).
    pub processes: u64,
}

impl CgroupUsage {
    /// The summary's memory stats: availableBytes is the limit less the
    /// working set when there is a limit (cadvisorInfoToCPUandMemoryStats).
    pub fn memory_stats(&self, time: SystemTime) -> MemoryStats {
        let m = &self.memory;
        MemoryStats {
            time,
            available_bytes: self
                .memory_limit
                .map(|limit| limit.saturating_sub(m.working_set_bytes)),
            usage_bytes: Some(m.usage_bytes),
            working_set_bytes: Some(m.working_set_bytes),
            rss_bytes: Some(m.rss_bytes),
            page_faults: Some(m.page_faults),
            major_page_faults: Some(m.major_page_faults),
        }
    }
}

/// Limits above this count as none (upstream's isMemoryUnlimited: cgroup
/// v1 writes its "no limit" as a page-rounded i64::MAX).
const UNLIMITED_MEMORY: u64 = 1 << 62;

/// memory.limit_in_bytes (v1) or memory.max (v2): None when unlimited.
pub fn parse_memory_limit(file: &'static str, text: &str) -> Result<Option<u64>, ParseError> {
    match text.trim() {
        "max" => Ok(None),
        value => {
            let limit = parse_u64(file, "limit", value)?;
            Ok((limit <= UNLIMITED_MEMORY).then_some(limit))
        }
    }
}

/// A v2 cpu.stat's usage_usec, in nanoseconds.
pub fn parse_cpu_stat_usage(text: &str) -> Result<u64, ParseError> {
    const FILE: &str = "cpu.stat";
    let usec = parse_flat_keyed(FILE, text)?
        .get("usage_usec")
        .copied()
        .ok_or_else(|| parse_err(FILE, "no usage_usec line"))?;
    Ok(usec.saturating_mul(1000))
}

/// The number of processes a cgroup.procs lists.
pub fn count_procs(text: &str) -> u64 {
    text.lines().filter(|l| !l.trim().is_empty()).count() as u64
}

/// Interfaces cAdvisor leaves out of the node's network stats.
pub(crate) const IGNORED_INTERFACE_PREFIXES: [&str; 4] = ["lo", "veth", "docker", "nerdctl"];

/// Parse /proc/net/dev into per-interface counters, leaving out loopback and
/// container-side devices as cAdvisor does.
pub fn parse_net_dev(text: &str) -> Result<Vec<InterfaceStats>, ParseError> {
    const FILE: &str = "/proc/net/dev";
    let mut out = Vec::new();
    // Two header lines, then `name: 16 counters`.
    for line in text.lines().skip(2) {
        let Some((name, counters)) = line.split_once(':') else {
            return Err(parse_err(FILE, format!("line without ':': {line:?}")));
        };
        let name = name.trim();
        let lower = name.to_ascii_lowercase();
        if IGNORED_INTERFACE_PREFIXES
            .iter()
            .any(|p| lower.starts_with(p))
        {
            continue;
        }
        let values = counters
            .split_whitespace()
            .map(|v| parse_u64(FILE, name, v))
            .collect::<Result<Vec<_>, _>>()?;
        if values.len() != 16 {
            return Err(parse_err(
                FILE,
                format!("{name} has {} counters, want 16", values.len()),
            ));
        }
        out.push(InterfaceStats {
            name: name.to_owned(),
            rx_bytes: Some(values[0]),
            rx_errors: Some(values[2]),
            tx_bytes: Some(values[8]),
            tx_errors: Some(values[10]),
        });
    }
    Ok(out)
}

/// The interface of the IPv4 default route in /proc/net/route, if any.
pub fn default_route_interface(text: &str) -> Option<String> {
    text.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace();
        let iface = fields.next()?;
        let destination = fields.next()?;
        let mask = fields.nth(5)?;
        (destination == "00000000" && mask == "00000000").then(|| iface.to_owned())
    })
}

/// The number of tasks (threads) from /proc/loadavg's fourth field (`running/total`).
pub fn parse_loadavg_tasks(text: &str) -> Result<i64, ParseError> {
    const FILE: &str = "/proc/loadavg";
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() < 5 {
        return Err(parse_err(FILE, "not enough fields"));
    }
    let (_, total) = fields[3]
        .split_once('/')
        .ok_or_else(|| parse_err(FILE, format!("fourth field {:?} is not n/m", fields[3])))?;
    total
        .parse()
        .map_err(|_| parse_err(FILE, format!("task count {total:?} is not a number")))
}

/// A one-number file such as /proc/sys/kernel/pid_max.
pub fn parse_single_int(file: &'static str, text: &str) -> Result<i64, ParseError> {
    let trimmed = text.trim();
    trimmed
        .parse()
        .map_err(|_| parse_err(file, format!("{trimmed:?} is not a number")))
}

// ---- /metrics/resource ----

fn seconds_of_nanos(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// The families of `/metrics/resource`, as upstream's resource metrics
/// collector fills them from a summary.
struct ResourceFamilies {
    node_cpu: Family,
    node_memory: Family,
    node_swap: Family,
    container_start: Family,
    container_cpu: Family,
    container_memory: Family,
    pod_cpu: Family,
    pod_memory: Family,
}

impl ResourceFamilies {
    fn new() -> Self {
        ResourceFamilies {
            node_cpu: Family::stable(
                "node_cpu_usage_seconds_total",
                "STABLE",
                "counter",
                "Cumulative cpu time consumed by the node in core-seconds",
            ),
            node_memory: Family::stable(
                "node_memory_working_set_bytes",
                "STABLE",
                "gauge",
                "Current working set of the node in bytes",
            ),
            node_swap: Family::stable(
                "node_swap_usage_bytes",
                "ALPHA",
                "gauge",
                "Current swap usage of the node in bytes. Reported only on non-windows systems",
            ),
            container_start: Family::stable(
                "container_start_time_seconds",
                "STABLE",
                "gauge",
                "Start time of the container since unix epoch in seconds",
            ),
            container_cpu: Family::stable(
                "container_cpu_usage_seconds_total",
                "STABLE",
                "counter",
                "Cumulative cpu time consumed by the container in core-seconds",
            ),
            container_memory: Family::stable(
                "container_memory_working_set_bytes",
                "STABLE",
                "gauge",
                "Current working set of the container in bytes",
            ),
            pod_cpu: Family::stable(
                "pod_cpu_usage_seconds_total",
                "STABLE",
                "counter",
                "Cumulative cpu time consumed by the pod in core-seconds",
            ),
            pod_memory: Family::stable(
                "pod_memory_working_set_bytes",
                "STABLE",
                "gauge",
                "Current working set of the pod in bytes",
            ),
        }
    }

    fn add_node(&mut self, node: &NodeStats) {
        if let Some(cpu) = &node.cpu
            && let Some(ns) = cpu.usage_core_nano_seconds
        {
            self.node_cpu
                .push(Vec::new(), seconds_of_nanos(ns), Some(cpu.time));
        }
        if let Some(memory) = &node.memory
            && let Some(ws) = memory.working_set_bytes
        {
            self.node_memory
                .push(Vec::new(), ws as f64, Some(memory.time));
        }
        if let Some(swap) = &node.swap
            && let Some(used) = swap.swap_usage_bytes
        {
            self.node_swap
                .push(Vec::new(), used as f64, Some(swap.time));
        }
    }

    fn add_pod(&mut self, pod: &PodStats) {
        let pod_labels = || {
            vec![
                ("namespace", pod.pod_ref.namespace.clone()),
                ("pod", pod.pod_ref.name.clone()),
            ]
        };
        for c in &pod.containers {
            let labels = || {
                vec![
                    ("container", c.name.clone()),
                    ("namespace", pod.pod_ref.namespace.clone()),
                    ("pod", pod.pod_ref.name.clone()),
                ]
            };
            if let Some(start) = c.start_time
                && let Ok(since) = start.duration_since(UNIX_EPOCH)
                && since.as_secs() > 0
            {
                let secs = since.as_nanos() as f64 / 1e9;
                self.container_start.push(labels(), secs, None);
            }
            if let Some(cpu) = &c.cpu
                && let Some(ns) = cpu.usage_core_nano_seconds
            {
                self.container_cpu
                    .push(labels(), seconds_of_nanos(ns), Some(cpu.time));
            }
            if let Some(memory) = &c.memory
                && let Some(ws) = memory.working_set_bytes
            {
                self.container_memory
                    .push(labels(), ws as f64, Some(memory.time));
            }
        }
        if let Some(cpu) = &pod.cpu
            && let Some(ns) = cpu.usage_core_nano_seconds
        {
            self.pod_cpu
                .push(pod_labels(), seconds_of_nanos(ns), Some(cpu.time));
        }
        if let Some(memory) = &pod.memory
            && let Some(ws) = memory.working_set_bytes
        {
            self.pod_memory
                .push(pod_labels(), ws as f64, Some(memory.time));
        }
    }
}

/// The Prometheus text of `/metrics/resource` for a CPU-and-memory summary,
/// or for a failed scrape (`None`: only `resource_scrape_error 1`).
///
/// Families and samples are sorted as client_golang's gatherer sorts them.
/// `scrape_error` is not written: upstream deprecated it in 1.29, so kubelets
/// from 1.30 on hide it.
pub fn resource_metrics_text(summary: Option<&Summary>) -> String {
    let mut f = ResourceFamilies::new();
    let mut scrape_error = Family::stable(
        "resource_scrape_error",
        "STABLE",
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    );
    scrape_error.push(Vec::new(), if summary.is_some() { 0.0 } else { 1.0 }, None);
    if let Some(summary) = summary {
        f.add_node(&summary.node);
        for pod in &summary.pods {
            f.add_pod(pod);
        }
    }
    render(vec![
        f.node_cpu,
        f.node_memory,
        f.node_swap,
        f.container_start,
        f.container_cpu,
        f.container_memory,
        f.pod_cpu,
        f.pod_memory,
        scrape_error,
    ])
}

/// The `kubelet_volume_stats_*` gauges of /metrics (upstream's volume
/// stats collector): each claim's volume once, from the pods' volume stats.
pub fn volume_stats_text(volumes: &[VolumeStats]) -> String {
    type Field = fn(&FsStats) -> Option<u64>;
    let gauges: [(&'static str, &'static str, Field); 6] = [
        (
            "kubelet_volume_stats_capacity_bytes",
            "Capacity in bytes of the volume",
            |f| f.capacity_bytes,
        ),
        (
            "kubelet_volume_stats_available_bytes",
            "Number of available bytes in the volume",
            |f| f.available_bytes,
        ),
        (
            "kubelet_volume_stats_used_bytes",
            "Number of used bytes in the volume",
            |f| f.used_bytes,
        ),
        (
            "kubelet_volume_stats_inodes",
            "Maximum number of inodes in the volume",
            |f| f.inodes,
        ),
        (
            "kubelet_volume_stats_inodes_free",
            "Number of free inodes in the volume",
            |f| f.inodes_free,
        ),
        (
            "kubelet_volume_stats_inodes_used",
            "Number of used inodes in the volume",
            |f| f.inodes_used,
        ),
    ];
    let mut seen = std::collections::HashSet::new();
    let claims: Vec<(&PvcReference, &FsStats)> = volumes
        .iter()
        .filter_map(|v| Some((v.pvc_ref.as_ref()?, &v.fs)))
        .filter(|(claim, _)| seen.insert(*claim))
        .collect();
    let families = gauges
        .into_iter()
        .map(|(name, help, field)| {
            let mut family = Family::stable(name, "ALPHA", "gauge", help);
            for (claim, fs) in &claims {
                if let Some(v) = field(fs) {
                    family.push(
                        vec![
                            ("namespace", claim.namespace.clone()),
                            ("persistentvolumeclaim", claim.name.clone()),
                        ],
                        v as f64,
                        None,
                    );
                }
            }
            family
        })
        .collect();
    render(families)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each claim once (two pods sharing one), only claims, six gauges.
    #[test]
    fn volume_stats_gauges_count_each_claim_once() {
        let fs = |used| FsStats {
            used_bytes: Some(used),
            ..FsStats::part_of(UNIX_EPOCH, None, None, None)
        };
        let volume = |claim: Option<&str>, used| VolumeStats {
            fs: fs(used),
            name: "v".into(),
            pvc_ref: claim.map(|c| PvcReference {
                name: c.into(),
                namespace: "ns".into(),
            }),
            local_ephemeral: false,
        };
        let text = volume_stats_text(&[
            volume(Some("shared"), 5),
            volume(Some("shared"), 6),
            volume(None, 7),
            volume(Some("other"), 8),
        ]);
        assert_eq!(
            text,
            "# HELP kubelet_volume_stats_used_bytes [ALPHA] Number of used bytes in the volume\n\
             # TYPE kubelet_volume_stats_used_bytes gauge\n\
             kubelet_volume_stats_used_bytes{namespace=\"ns\",persistentvolumeclaim=\"other\"} 8\n\
             kubelet_volume_stats_used_bytes{namespace=\"ns\",persistentvolumeclaim=\"shared\"} 5\n"
        );
    }

    #[test]
    fn proc_stat() {
        let text = "cpu  832129 168368 222094 866687 7258 10 4907 21835 0 0\n\
                    cpu0 415650 76485 109222 446080 2470 0 1064 10635 0 0\n\
                    intr 1 2 3\nbtime 1795946120\nprocesses 42\n";
        let got = parse_proc_stat(text).unwrap();
        assert_eq!(got.boot_time_secs, 1_795_946_120);
        assert_eq!(got.cpu.idle, 866_687);
        assert_eq!(got.cpu.iowait, 7258);
        assert_eq!(
            got.cpu.busy(),
            832_129 + 168_368 + 222_094 + 10 + 4907 + 21_835
        );
        assert_eq!(ticks_to_nanos(250, 100), 2_500_000_000);

        let bad = [
            ("btime 1\n", "no cpu line"),
            ("cpu 1 2 3\nbtime 1\n", "cpu line has 3 fields"),
            ("cpu 1 2 3 4 5 6 7 x\nbtime 1\n", "\"x\" is not a number"),
            ("cpu 1 2 3 4 5 6 7 8\n", "no btime line"),
        ];
        for (text, want) in bad {
            let err = parse_proc_stat(text).unwrap_err().to_string();
            assert!(
                err.starts_with("/proc/stat: ") && err.contains(want),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn meminfo() {
        let text = "MemTotal:       24684092 kB\nMemFree:        20033508 kB\n\
                    MemAvailable:   23681276 kB\nAnonPages:        233500 kB\n\
                    Inactive(file):  1616824 kB\nSwapTotal:        1024 kB\n\
                    SwapFree:            512 kB\nHugePages_Total:       0\n";
        let got = parse_meminfo(text).unwrap();
        assert_eq!(
            got,
            MemInfo {
                total: 24_684_092 * 1024,
                free: 20_033_508 * 1024,
                inactive_file: 1_616_824 * 1024,
                anon_pages: 233_500 * 1024,
                swap_total: 1024 * 1024,
                swap_free: 512 * 1024,
                hugetlb: 0,
            }
        );
        // Huge pages are not available as regular memory (upstream's
        // HugepageAwareEviction), and available never goes below 0.
        let huge = parse_meminfo(&format!("{text}Hugetlb:         2097152 kB\n")).unwrap();
        assert_eq!(huge.hugetlb, 2 << 30);
        assert_eq!(
            node_available_memory(&huge, 4 << 30),
            (24_684_092 * 1024) - (6 << 30)
        );
        assert_eq!(node_available_memory(&huge, 23 << 30), 0);
        assert_eq!(
            node_available_memory(&got, 4 << 30),
            (24_684_092 * 1024) - (4 << 30)
        );
        let vmstat = parse_flat_keyed("/proc/vmstat", "pgfault 100\npgmajfault 7\n").unwrap();
        let mem = MemoryReading::from_meminfo(&got, &vmstat).unwrap();
        assert_eq!(mem.usage_bytes, (24_684_092 - 20_033_508) * 1024);
        assert_eq!(
            mem.working_set_bytes,
            (24_684_092 - 20_033_508 - 1_616_824) * 1024
        );
        assert_eq!((mem.page_faults, mem.major_page_faults), (100, 7));

        let err = parse_meminfo("MemTotal: 1 kB\n").unwrap_err();
        assert_eq!(err.to_string(), "/proc/meminfo: no MemFree line");
        let err = parse_meminfo("MemTotal: lots kB\n").unwrap_err();
        assert!(
            err.to_string().contains("\"lots\" is not a number"),
            "{err}"
        );
    }

    #[test]
    fn cgroup_v2_files() {
        let stat = "anon 4096\nfile 8192\ninactive_file 6000\npgfault 12\npgmajfault 3\n";
        let parsed = parse_flat_keyed("memory.stat", stat).unwrap();
        let mem = MemoryReading::from_cgroup_v2(20_000, &parsed).unwrap();
        assert_eq!(
            mem,
            MemoryReading {
                usage_bytes: 20_000,
                working_set_bytes: 14_000,
                rss_bytes: 4096,
                page_faults: 12,
                major_page_faults: 3,
            }
        );
        let missing = parse_flat_keyed("memory.stat", "anon 1\n").unwrap();
        let err = MemoryReading::from_cgroup_v2(1, &missing).unwrap_err();
        assert_eq!(err.to_string(), "memory.stat: no inactive_file line");

        let cpu = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n";
        assert_eq!(parse_cpu_stat_usage(cpu).unwrap(), 1_500_000);
        assert_eq!(
            parse_cpu_stat_usage("user_usec 1\n")
                .unwrap_err()
                .to_string(),
            "cpu.stat: no usage_usec line"
        );

        for (text, want) in [
            ("max\n", None),
            ("268435456\n", Some(268_435_456)),
            // cgroup v1's "no limit".
            ("9223372036854771712\n", None),
            ("4611686018427387904", Some(1 << 62)),
        ] {
            assert_eq!(
                parse_memory_limit("memory.max", text).unwrap(),
                want,
                "{text}"
            );
        }
        assert_eq!(
            parse_memory_limit("memory.max", "lots")
                .unwrap_err()
                .to_string(),
            "memory.max: limit: \"lots\" is not a number"
        );

        assert_eq!(count_procs(""), 0);
        assert_eq!(count_procs("1\n27\n300\n"), 3);

        let usage = CgroupUsage {
            cpu_usage_ns: 1,
            memory: mem,
            memory_limit: Some(16_000),
            processes: 1,
        };
        let at = UNIX_EPOCH + Duration::from_secs(5);
        let stats = usage.memory_stats(at);
        assert_eq!(stats.available_bytes, Some(2_000));
        assert_eq!(stats.working_set_bytes, Some(14_000));
        let unlimited = CgroupUsage {
            memory_limit: None,
            ..usage
        };
        assert_eq!(unlimited.memory_stats(at).available_bytes, None);
    }

    #[test]
    fn cgroup_memory_stat() {
        let stat = "cache 1\nrss 2\ntotal_cache 3576799232\ntotal_rss 238714880\n\
                    total_pgfault 249737472\ntotal_pgmajfault 68513\n\
                    total_inactive_file 1655640064\n";
        let parsed = parse_flat_keyed("memory.stat", stat).unwrap();
        let mem = MemoryReading::from_cgroup_v1(3_815_206_912, &parsed).unwrap();
        assert_eq!(
            mem,
            MemoryReading {
                usage_bytes: 3_815_206_912,
                working_set_bytes: 3_815_206_912 - 1_655_640_064,
                rss_bytes: 238_714_880,
                page_faults: 249_737_472,
                major_page_faults: 68_513,
            }
        );
        // More inactive file pages than usage (racy reads) clamps at zero.
        let parsed = parse_flat_keyed(
            "memory.stat",
            "total_inactive_file 10\ntotal_rss 0\ntotal_pgfault 0\ntotal_pgmajfault 0\n",
        )
        .unwrap();
        assert_eq!(
            MemoryReading::from_cgroup_v1(5, &parsed)
                .unwrap()
                .working_set_bytes,
            0
        );
        let missing = parse_flat_keyed("memory.stat", "total_rss 1\n").unwrap();
        assert_eq!(
            MemoryReading::from_cgroup_v1(5, &missing)
                .unwrap_err()
                .to_string(),
            "memory.stat: no total_inactive_file line"
        );
        assert_eq!(
            parse_flat_keyed("memory.stat", "total_rss -1\n")
                .unwrap_err()
                .to_string(),
            "memory.stat: total_rss: \"-1\" is not a number"
        );
    }

    #[test]
    fn net_dev_and_route() {
        let dev = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n\
    lo: 452347710  867636    0    0    0     0          0         0 452347710  867636    0    0    0     0       0          0\n\
  eth0: 450563380   23305    3    0    0     0          0         0  1805181   15176    4    0    0     0       0          0\n\
vethab12: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n\
  cni0: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\n";
        let got = parse_net_dev(dev).unwrap();
        assert_eq!(
            got,
            vec![
                InterfaceStats {
                    name: "eth0".into(),
                    rx_bytes: Some(450_563_380),
                    rx_errors: Some(3),
                    tx_bytes: Some(1_805_181),
                    tx_errors: Some(4),
                },
                InterfaceStats {
                    name: "cni0".into(),
                    rx_bytes: Some(10),
                    rx_errors: Some(0),
                    tx_bytes: Some(20),
                    tx_errors: Some(0),
                },
            ]
        );
        assert_eq!(
            parse_net_dev("h\nh\neth0: 1 2 3\n")
                .unwrap_err()
                .to_string(),
            "/proc/net/dev: eth0 has 3 counters, want 16"
        );

        let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     ens5\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                     ens5\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert_eq!(default_route_interface(route).as_deref(), Some("ens5"));
        assert_eq!(default_route_interface("Iface\tDestination\n"), None);
    }

    #[test]
    fn loadavg_and_limits() {
        let cases = [
            ("1.01 0.73 2.39 3/105 24816\n", Ok(105)),
            ("1.01 0.73 2.39 3/105\n", Err("not enough fields")),
            ("1.01 0.73 2.39 3 24816\n", Err("is not n/m")),
            ("1.01 0.73 2.39 3/x 24816\n", Err("is not a number")),
        ];
        for (text, want) in cases {
            match (parse_loadavg_tasks(text), want) {
                (Ok(n), Ok(w)) => assert_eq!(n, w),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{e}"),
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(
            parse_single_int("/proc/sys/kernel/pid_max", "4194304\n"),
            Ok(4_194_304)
        );
        assert_eq!(
            parse_single_int("/proc/sys/kernel/pid_max", "")
                .unwrap_err()
                .to_string(),
            "/proc/sys/kernel/pid_max: \"\" is not a number"
        );
    }

    #[test]
    fn nano_cores() {
        let at = |s: i64, usage: u64| CpuSample {
            timestamp_ns: s * 1_000_000_000,
            usage_core_nano_seconds: usage,
        };
        let cases = [
            // Half a core over 10s.
            (
                at(100, 1_000_000_000),
                at(110, 6_000_000_000),
                Some(500_000_000),
            ),
            // Two cores.
            (at(0, 0), at(1, 2_000_000_000), Some(2_000_000_000)),
            // Counter reset.
            (at(0, 5), at(1, 4), None),
            // No time passed.
            (at(5, 0), at(5, 10), None),
        ];
        for (prev, cur, want) in cases {
            assert_eq!(usage_nano_cores(prev, cur), want, "{prev:?} -> {cur:?}");
        }
    }

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn pod_sums() {
        let container = |cpu: u64, nano: Option<u64>, ws: u64, at: u64| ContainerStats {
            name: "c".into(),
            cpu: Some(CpuStats {
                time: t(at),
                usage_nano_cores: nano,
                usage_core_nano_seconds: Some(cpu),
            }),
            memory: Some(MemoryStats {
                time: t(at),
                available_bytes: None,
                usage_bytes: Some(ws * 2),
                working_set_bytes: Some(ws),
                rss_bytes: None,
                page_faults: None,
                major_page_faults: None,
            }),
            swap: Some(SwapStats {
                time: t(at),
                swap_available_bytes: None,
                swap_usage_bytes: Some(1),
            }),
            ..Default::default()
        };
        let containers = [container(10, Some(5), 100, 1), container(20, None, 50, 2)];
        let (cpu, memory) = sum_cpu_memory(&containers);
        let cpu = cpu.unwrap();
        assert_eq!(cpu.time, t(2));
        assert_eq!(cpu.usage_core_nano_seconds, Some(30));
        assert_eq!(cpu.usage_nano_cores, Some(5));
        let memory = memory.unwrap();
        assert_eq!(memory.working_set_bytes, Some(150));
        assert_eq!(memory.usage_bytes, Some(300));
        assert_eq!(memory.rss_bytes, Some(0));
        let swap = sum_swap(&containers).unwrap();
        assert_eq!((swap.time, swap.swap_usage_bytes), (t(1), Some(2)));
        assert_eq!(sum_cpu_memory(&[]), (None, None));
        assert_eq!(sum_swap(&[]), None);
    }

    #[test]
    fn ephemeral_storage_sums_rootfs_and_logs() {
        let root = FsStats::from_usage(
            t(10),
            &FsUsage {
                capacity_bytes: 1000,
                available_bytes: 600,
                used_bytes: 400,
                inodes: 100,
                inodes_free: 40,
            },
        );
        assert_eq!(root.inodes_used, Some(60));
        let c = |rootfs: Option<FsStats>, logs: Option<FsStats>| ContainerStats {
            rootfs,
            logs,
            ..Default::default()
        };
        let part = |at, used, inodes| FsStats::part_of(t(at), None, Some(used), Some(inodes));
        let containers = [
            c(Some(part(20, 5, 1)), Some(part(30, 7, 2))),
            c(Some(part(5, 11, 3)), None),
            // Logs without a writable layer are not counted (as upstream).
            c(None, Some(part(40, 100, 100))),
        ];
        let got = ephemeral_storage(&containers, &[], &root);
        assert_eq!(got.time, t(30));
        assert_eq!(got.used_bytes, Some(23));
        assert_eq!(got.inodes_used, Some(6));
        assert_eq!(got.capacity_bytes, Some(1000));
        assert_eq!(got.available_bytes, Some(600));
        assert_eq!(ephemeral_storage(&[], &[], &root).used_bytes, None);
        // Local ephemeral volumes count; a memory emptyDir does not.
        let volume = |name: &str, used, local_ephemeral| VolumeStats {
            fs: part(50, used, 1),
            name: name.into(),
            pvc_ref: None,
            local_ephemeral,
        };
        let got = ephemeral_storage(
            &containers,
            &[volume("scratch", 1000, true), volume("tmpfs", 5000, false)],
            &root,
        );
        assert_eq!(
            (got.used_bytes, got.inodes_used, got.time),
            (Some(1023), Some(7), t(50))
        );
    }

    #[test]
    fn json_field_names_and_times() {
        let summary = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                start_time: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_900)),
                network: Some(NetworkStats {
                    time: t(1),
                    default: InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(1),
                        ..Default::default()
                    },
                    interfaces: Vec::new(),
                }),
                rlimit: Some(RlimitStats {
                    time: t(1),
                    max_pid: Some(10),
                    num_of_running_processes: Some(3),
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                ephemeral_storage: Some(FsStats::part_of(t(0), None, Some(1), None)),
                ..Default::default()
            }],
        };
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "node": {
                    "nodeName": "n1",
                    "startTime": "2023-11-14T22:13:20Z",
                    "network": {"time": "1970-01-01T00:00:01Z", "name": "eth0", "rxBytes": 1},
                    "rlimit": {"time": "1970-01-01T00:00:01Z", "maxpid": 10, "curproc": 3},
                },
                "pods": [{
                    "podRef": {"name": "", "namespace": "", "uid": ""},
                    "startTime": null,
                    "containers": [],
                    "ephemeral-storage": {"time": "1970-01-01T00:00:00Z", "usedBytes": 1},
                }],
            })
        );
        assert_eq!(
            rfc3339_seconds(UNIX_EPOCH - Duration::from_millis(500)),
            "1969-12-31T23:59:59Z"
        );
    }
}
