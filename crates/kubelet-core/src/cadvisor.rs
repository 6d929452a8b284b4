//! `/metrics/cadvisor` as the upstream kubelet's embedded cAdvisor (v0.60.5)
//! writes it: the families kube-prometheus' dashboards and recording
//! rules, the Prometheus Adapter and autoscalers read — CPU, memory, CFS
//! throttling, specs, start times, network, disk I/O and usage, OOM events,
//! and the machine's CPUs and memory — with cAdvisor's names, help texts,
//! types, labels (`id`, `name`, `image`, `container`, `pod`, `namespace`,
//! and `cpu`, `interface`, `device`, `failure_type`, `scope` where they
//! belong) and timestamps. Pure: the readings come from the cgroup files
//! and `/proc` (`CgroupReading::from_v1`/`from_v2` parse them as
//! cAdvisor's libcontainer handler reads them); the collector gathers them.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::expfmt::{Family, render};
use crate::stats::{ParseError, parse_flat_keyed, parse_single_int, ticks_to_nanos};

/// The labels of one cgroup's series (cAdvisor's containerPrometheusLabelsFunc
/// in the kubelet): `id` is the cgroup's path, `name` the runtime's id of
/// a container, `image` its image, and the pod's identity where known.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Labels {
    pub container: String,
    pub id: String,
    pub image: String,
    pub name: String,
    pub namespace: String,
    pub pod: String,
}

impl Labels {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("container", self.container.clone()),
            ("id", self.id.clone()),
            ("image", self.image.clone()),
            ("name", self.name.clone()),
            ("namespace", self.namespace.clone()),
            ("pod", self.pod.clone()),
        ]
    }
}

/// One device's bytes read and written (blkio's or io.stat's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceIo {
    /// `major:minor`, named by the collector (`/dev/vda`).
    pub device: String,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// One network interface's counters, as cAdvisor reads /proc/net/dev.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetCounters {
    pub interface: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// A file system's usage (the root cgroup's series only, as cAdvisor's
/// raw handler gives it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsUsage {
    pub device: String,
    pub usage_bytes: u64,
    pub limit_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// What a cgroup's files say: its spec (limits) and its stats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupReading {
    pub cpu_total_ns: u64,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub cfs_periods: u64,
    pub cfs_throttled_periods: u64,
    pub cfs_throttled_ns: u64,
    pub memory_usage: u64,
    pub memory_max_usage: u64,
    pub memory_failcnt: u64,
    pub memory_cache: u64,
    pub memory_rss: u64,
    pub memory_swap: u64,
    pub memory_mapped_file: u64,
    pub memory_working_set: u64,
    pub pgfault: u64,
    pub pgmajfault: u64,
    pub oom_kills: u64,
    /// cpu.shares (v2: from cpu.weight).
    pub cpu_shares: u64,
    pub cpu_period: u64,
    /// The CFS quota in microseconds; 0 for none.
    pub cpu_quota: i64,
    pub memory_limit: u64,
    pub memory_reservation: u64,
    pub memory_swap_limit: u64,
    pub io: Vec<DeviceIo>,
}

/// A file's content, by name, as the collector read it (absent files are
/// not in the map).
pub type Files = HashMap<&'static str, String>;

fn get_u64(files: &Files, name: &'static str) -> Result<Option<u64>, ParseError> {
    match files.get(name) {
        None => Ok(None),
        Some(text) if text.trim() == "max" => Ok(Some(u64::MAX)),
        Some(text) => Ok(Some(
            u64::try_from(parse_single_int(name, text)?).unwrap_or(0),
        )),
    }
}

fn keyed<'a>(files: &'a Files, name: &'static str) -> Result<HashMap<&'a str, u64>, ParseError> {
    match files.get(name) {
        Some(text) => parse_flat_keyed(name, text),
        None => Ok(HashMap::new()),
    }
}

/// `maj:min Read N` lines (blkio v1); `maj:min rbytes=N wbytes=N ...` (io.stat).
fn parse_io(text: &str, v2: bool) -> Vec<DeviceIo> {
    let mut by_device: Vec<DeviceIo> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(device) = fields.next().filter(|d| d.contains(':')) else {
            continue;
        };
        let idx = match by_device.iter().position(|d| d.device == device) {
            Some(i) => i,
            None => {
                by_device.push(DeviceIo {
                    device: device.to_owned(),
                    ..Default::default()
                });
                by_device.len() - 1
            }
        };
        let entry = &mut by_device[idx];
        if v2 {
            for kv in fields {
                match kv.split_once('=') {
                    Some(("rbytes", v)) => entry.read_bytes = v.parse().unwrap_or(0),
                    Some(("wbytes", v)) => entry.write_bytes = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
        } else {
            match (fields.next(), fields.next().and_then(|v| v.parse().ok())) {
                (Some("Read"), Some(v)) => entry.read_bytes = v,
                (Some("Write"), Some(v)) => entry.write_bytes = v,
                _ => {}
            }
        }
    }
    by_device
}

/// Working set: usage less the inactive file pages (cAdvisor's).
fn working_set(usage: u64, inactive_file: Option<u64>) -> u64 {
    usage.saturating_sub(inactive_file.unwrap_or(0))
}

impl CgroupReading {
    /// A cgroup v1 cgroup: `cpuacct.usage`, `cpuacct.stat` (in ticks of
    /// `ticks_per_second`), `cpu.stat`, `cpu.shares`, `cpu.cfs_period_us`,
    /// `cpu.cfs_quota_us`, the `memory.*` files and
    /// `blkio.throttle.io_service_bytes_recursive`.
    pub fn from_v1(files: &Files, ticks_per_second: u64) -> Result<CgroupReading, ParseError> {
        let acct = keyed(files, "cpuacct.stat")?;
        let cpu = keyed(files, "cpu.stat")?;
        let mem = keyed(files, "memory.stat")?;
        let hierarchy = get_u64(files, "memory.use_hierarchy")?.unwrap_or(1) == 1;
        let stat = |plain: &str| {
            let key = if hierarchy {
                format!("total_{plain}")
            } else {
                plain.to_owned()
            };
            mem.get(key.as_str()).copied().unwrap_or(0)
        };
        let usage = get_u64(files, "memory.usage_in_bytes")?.unwrap_or(0);
        let quota = files
            .get("cpu.cfs_quota_us")
            .map(|q| q.trim())
            .filter(|q| !q.is_empty() && *q != "-1")
            .and_then(|q| q.parse::<i64>().ok())
            .unwrap_or(0);
        let oom = keyed(files, "memory.oom_control")?;
        Ok(CgroupReading {
            cpu_total_ns: get_u64(files, "cpuacct.usage")?.unwrap_or(0),
            cpu_user_ns: ticks_to_nanos(acct.get("user").copied().unwrap_or(0), ticks_per_second),
            cpu_system_ns: ticks_to_nanos(
                acct.get("system").copied().unwrap_or(0),
                ticks_per_second,
            ),
            cfs_periods: cpu.get("nr_periods").copied().unwrap_or(0),
            cfs_throttled_periods: cpu.get("nr_throttled").copied().unwrap_or(0),
            cfs_throttled_ns: cpu.get("throttled_time").copied().unwrap_or(0),
            memory_usage: usage,
            memory_max_usage: get_u64(files, "memory.max_usage_in_bytes")?.unwrap_or(0),
            memory_failcnt: get_u64(files, "memory.failcnt")?.unwrap_or(0),
            memory_cache: stat("cache"),
            memory_rss: stat("rss"),
            memory_swap: stat("swap"),
            memory_mapped_file: stat("mapped_file"),
            memory_working_set: working_set(usage, mem.get("total_inactive_file").copied()),
            pgfault: mem.get("pgfault").copied().unwrap_or(0),
            pgmajfault: mem.get("pgmajfault").copied().unwrap_or(0),
            oom_kills: oom.get("oom_kill").copied().unwrap_or(0),
            cpu_shares: get_u64(files, "cpu.shares")?.unwrap_or(0),
            cpu_period: get_u64(files, "cpu.cfs_period_us")?.unwrap_or(0),
            cpu_quota: quota,
            memory_limit: get_u64(files, "memory.limit_in_bytes")?.unwrap_or(0),
            memory_reservation: get_u64(files, "memory.soft_limit_in_bytes")?.unwrap_or(0),
            memory_swap_limit: get_u64(files, "memory.memsw.limit_in_bytes")?.unwrap_or(0),
            io: files
                .get("blkio.throttle.io_service_bytes_recursive")
                .map(|t| parse_io(t, false))
                .unwrap_or_default(),
        })
    }

    /// A cgroup v2 cgroup: `cpu.stat`, `cpu.max`, `cpu.weight`,
    /// `memory.current`, `memory.peak`, `memory.stat`, `memory.max`,
    /// `memory.low`, `memory.swap.current`, `memory.swap.max`,
    /// `memory.events` and `io.stat`.
    pub fn from_v2(files: &Files) -> Result<CgroupReading, ParseError> {
        let cpu = keyed(files, "cpu.stat")?;
        let mem = keyed(files, "memory.stat")?;
        let events = keyed(files, "memory.events")?;
        let usec = |k: &str| cpu.get(k).copied().unwrap_or(0).saturating_mul(1000);
        let usage = get_u64(files, "memory.current")?.unwrap_or(0);
        let (quota, period) = match files
            .get("cpu.max")
            .map(|m| m.split_whitespace().collect::<Vec<_>>())
        {
            Some(parts) if parts.len() == 2 => (
                parts[0].parse::<i64>().unwrap_or(0),
                parts[1].parse::<u64>().unwrap_or(0),
            ),
            _ => (0, 0),
        };
        // runc's ConvertCPUSharesToCgroupV2Value, inverted (cAdvisor's).
        let shares = get_u64(files, "cpu.weight")?
            .filter(|w| *w > 0)
            .map_or(0, |w| 2 + ((w - 1) * 262_142) / 9999);
        let swap = get_u64(files, "memory.swap.current")?.unwrap_or(0);
        Ok(CgroupReading {
            cpu_total_ns: usec("usage_usec"),
            cpu_user_ns: usec("user_usec"),
            cpu_system_ns: usec("system_usec"),
            cfs_periods: cpu.get("nr_periods").copied().unwrap_or(0),
            cfs_throttled_periods: cpu.get("nr_throttled").copied().unwrap_or(0),
            cfs_throttled_ns: usec("throttled_usec"),
            memory_usage: usage,
            memory_max_usage: get_u64(files, "memory.peak")?.unwrap_or(0),
            memory_failcnt: events.get("max").copied().unwrap_or(0),
            memory_cache: mem.get("file").copied().unwrap_or(0),
            memory_rss: mem.get("anon").copied().unwrap_or(0),
            memory_swap: swap,
            memory_mapped_file: mem.get("file_mapped").copied().unwrap_or(0),
            memory_working_set: working_set(usage, mem.get("inactive_file").copied()),
            pgfault: mem.get("pgfault").copied().unwrap_or(0),
            pgmajfault: mem.get("pgmajfault").copied().unwrap_or(0),
            oom_kills: events.get("oom_kill").copied().unwrap_or(0),
            cpu_shares: shares,
            cpu_period: period,
            cpu_quota: quota,
            memory_limit: get_u64(files, "memory.max")?.unwrap_or(0),
            memory_reservation: get_u64(files, "memory.low")?.unwrap_or(0),
            memory_swap_limit: get_u64(files, "memory.swap.max")?.unwrap_or(0),
            io: files
                .get("io.stat")
                .map(|t| parse_io(t, true))
                .unwrap_or_default(),
        })
    }
}

/// /proc/net/dev's counters of every interface cAdvisor reports (not
/// loopback nor the container-side devices).
pub fn parse_net_dev_counters(text: &str) -> Vec<NetCounters> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let name = name.trim();
            let lower = name.to_ascii_lowercase();
            if crate::stats::IGNORED_INTERFACE_PREFIXES
                .iter()
                .any(|p| lower.starts_with(p))
            {
                return None;
            }
            let v: Vec<u64> = counters
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            (v.len() == 16).then(|| NetCounters {
                interface: name.to_owned(),
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_errors: v[2],
                rx_dropped: v[3],
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_errors: v[10],
                tx_dropped: v[11],
            })
        })
        .collect()
}

/// One cgroup cAdvisor would report.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: Labels,
    /// When the runtime made the container (the cgroup's time for others).
    pub created: SystemTime,
    /// When the cgroup appeared.
    pub started: SystemTime,
    /// When the reading was taken.
    pub at: SystemTime,
    pub reading: CgroupReading,
    /// Only a pod's sandbox (it owns the pod's network namespace) and the
    /// root cgroup have these.
    pub network: Vec<NetCounters>,
    /// Only the root cgroup has these.
    pub filesystems: Vec<FsUsage>,
}

/// The machine, for the `machine_*` families.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub cpu_cores: u64,
    pub cpu_physical_cores: u64,
    pub cpu_sockets: u64,
    pub memory_bytes: u64,
    pub swap_bytes: u64,
}

/// cAdvisor's specMemoryValue: above 2^62 is "unlimited", shown as 0.
fn spec_memory(v: u64) -> f64 {
    if v > 1 << 62 { 0.0 } else { v as f64 }
}

fn seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs() as f64)
}

/// A series' values in one family: each with the labels it adds.
type Values = Vec<(Vec<(&'static str, String)>, f64)>;
/// How a family's values are read from a series.
type Getter = fn(&Series) -> Values;
/// How a spec family's value is read from a series (None: no sample).
type SpecGetter = fn(&Series) -> Option<f64>;

/// Each container family: (name, kind, help, values of a series), in
/// cAdvisor's order.
const CONTAINER_FAMILIES: &[(&str, &str, &str, Getter)] = &[
    (
        "container_cpu_cfs_periods_total",
        "counter",
        "Number of elapsed enforcement period intervals.",
        |s| cfs(s, s.reading.cfs_periods as f64),
    ),
    (
        "container_cpu_cfs_throttled_periods_total",
        "counter",
        "Number of throttled period intervals.",
        |s| cfs(s, s.reading.cfs_throttled_periods as f64),
    ),
    (
        "container_cpu_cfs_throttled_seconds_total",
        "counter",
        "Total time duration the container has been throttled.",
        |s| cfs(s, s.reading.cfs_throttled_ns as f64 / 1e9),
    ),
    (
        "container_cpu_system_seconds_total",
        "counter",
        "Cumulative system cpu time consumed in seconds.",
        |s| vec![(Vec::new(), s.reading.cpu_system_ns as f64 / 1e9)],
    ),
    (
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed in seconds.",
        |s| {
            if s.reading.cpu_total_ns == 0 {
                return Vec::new();
            }
            vec![(
                vec![("cpu", "total".to_owned())],
                s.reading.cpu_total_ns as f64 / 1e9,
            )]
        },
    ),
    (
        "container_cpu_user_seconds_total",
        "counter",
        "Cumulative user cpu time consumed in seconds.",
        |s| vec![(Vec::new(), s.reading.cpu_user_ns as f64 / 1e9)],
    ),
    (
        "container_fs_inodes_free",
        "gauge",
        "Number of available Inodes",
        |s| {
            s.filesystems
                .iter()
                .map(|fs| (vec![("device", fs.device.clone())], fs.inodes_free as f64))
                .collect()
        },
    ),
    (
        "container_fs_inodes_total",
        "gauge",
        "Number of Inodes",
        |s| {
            s.filesystems
                .iter()
                .map(|fs| (vec![("device", fs.device.clone())], fs.inodes as f64))
                .collect()
        },
    ),
    (
        "container_fs_limit_bytes",
        "gauge",
        "Number of bytes that can be consumed by the container on this filesystem.",
        |s| {
            s.filesystems
                .iter()
                .map(|fs| (vec![("device", fs.device.clone())], fs.limit_bytes as f64))
                .collect()
        },
    ),
    (
        "container_fs_reads_bytes_total",
        "counter",
        "Cumulative count of bytes read",
        |s| {
            s.reading
                .io
                .iter()
                .map(|d| (vec![("device", d.device.clone())], d.read_bytes as f64))
                .collect()
        },
    ),
    (
        "container_fs_usage_bytes",
        "gauge",
        "Number of bytes that are consumed by the container on this filesystem.",
        |s| {
            s.filesystems
                .iter()
                .map(|fs| (vec![("device", fs.device.clone())], fs.usage_bytes as f64))
                .collect()
        },
    ),
    (
        "container_fs_writes_bytes_total",
        "counter",
        "Cumulative count of bytes written",
        |s| {
            s.reading
                .io
                .iter()
                .map(|d| (vec![("device", d.device.clone())], d.write_bytes as f64))
                .collect()
        },
    ),
    (
        "container_memory_cache",
        "gauge",
        "Number of bytes of page cache memory.",
        |s| vec![(Vec::new(), s.reading.memory_cache as f64)],
    ),
    (
        "container_memory_failcnt",
        "counter",
        "Number of memory usage hits limits",
        |s| vec![(Vec::new(), s.reading.memory_failcnt as f64)],
    ),
    (
        "container_memory_failures_total",
        "counter",
        "Cumulative count of memory allocation failures.",
        |s| {
            let r = &s.reading;
            let l = |kind: &str, scope: &str| {
                vec![
                    ("failure_type", kind.to_owned()),
                    ("scope", scope.to_owned()),
                ]
            };
            vec![
                (l("pgfault", "container"), r.pgfault as f64),
                (l("pgmajfault", "container"), r.pgmajfault as f64),
                (l("pgfault", "hierarchy"), r.pgfault as f64),
                (l("pgmajfault", "hierarchy"), r.pgmajfault as f64),
            ]
        },
    ),
    (
        "container_memory_mapped_file",
        "gauge",
        "Size of memory mapped files in bytes.",
        |s| vec![(Vec::new(), s.reading.memory_mapped_file as f64)],
    ),
    (
        "container_memory_max_usage_bytes",
        "gauge",
        "Maximum memory usage recorded in bytes",
        |s| vec![(Vec::new(), s.reading.memory_max_usage as f64)],
    ),
    (
        "container_memory_rss",
        "gauge",
        "Size of RSS in bytes.",
        |s| vec![(Vec::new(), s.reading.memory_rss as f64)],
    ),
    (
        "container_memory_swap",
        "gauge",
        "Container swap usage in bytes.",
        |s| vec![(Vec::new(), s.reading.memory_swap as f64)],
    ),
    (
        "container_memory_usage_bytes",
        "gauge",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        |s| vec![(Vec::new(), s.reading.memory_usage as f64)],
    ),
    (
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set in bytes.",
        |s| vec![(Vec::new(), s.reading.memory_working_set as f64)],
    ),
    (
        "container_network_receive_bytes_total",
        "counter",
        "Cumulative count of bytes received",
        |s| net(s, |n| n.rx_bytes),
    ),
    (
        "container_network_receive_errors_total",
        "counter",
        "Cumulative count of errors encountered while receiving",
        |s| net(s, |n| n.rx_errors),
    ),
    (
        "container_network_receive_packets_dropped_total",
        "counter",
        "Cumulative count of packets dropped while receiving",
        |s| net(s, |n| n.rx_dropped),
    ),
    (
        "container_network_receive_packets_total",
        "counter",
        "Cumulative count of packets received",
        |s| net(s, |n| n.rx_packets),
    ),
    (
        "container_network_transmit_bytes_total",
        "counter",
        "Cumulative count of bytes transmitted",
        |s| net(s, |n| n.tx_bytes),
    ),
    (
        "container_network_transmit_errors_total",
        "counter",
        "Cumulative count of errors encountered while transmitting",
        |s| net(s, |n| n.tx_errors),
    ),
    (
        "container_network_transmit_packets_dropped_total",
        "counter",
        "Cumulative count of packets dropped while transmitting",
        |s| net(s, |n| n.tx_dropped),
    ),
    (
        "container_network_transmit_packets_total",
        "counter",
        "Cumulative count of packets transmitted",
        |s| net(s, |n| n.tx_packets),
    ),
    (
        "container_oom_events_total",
        "counter",
        "Count of out of memory events observed for the container",
        |s| vec![(Vec::new(), s.reading.oom_kills as f64)],
    ),
];

/// The spec families and the times (const metrics: no timestamps).
const SPEC_FAMILIES: &[(&str, &str, SpecGetter)] = &[
    (
        "container_creation_time_seconds",
        "Container creation time since unix epoch in seconds.",
        |s| Some(seconds(s.created)),
    ),
    (
        "container_spec_cpu_period",
        "CPU period of the container.",
        |s| Some(s.reading.cpu_period as f64),
    ),
    (
        "container_spec_cpu_quota",
        "CPU quota of the container.",
        |s| (s.reading.cpu_quota != 0).then_some(s.reading.cpu_quota as f64),
    ),
    (
        "container_spec_cpu_shares",
        "CPU share of the container.",
        |s| Some(s.reading.cpu_shares as f64),
    ),
    (
        "container_spec_memory_limit_bytes",
        "Memory limit for the container.",
        |s| Some(spec_memory(s.reading.memory_limit)),
    ),
    (
        "container_spec_memory_reservation_limit_bytes",
        "Memory reservation limit for the container.",
        |s| Some(spec_memory(s.reading.memory_reservation)),
    ),
    (
        "container_spec_memory_swap_limit_bytes",
        "Memory swap limit for the container.",
        |s| Some(spec_memory(s.reading.memory_swap_limit)),
    ),
    (
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds.",
        |s| Some(seconds(s.started)),
    ),
];

/// The `machine_*` gauges: (name, help, value).
fn machine_values(machine: &Machine) -> [(&'static str, &'static str, u64); 5] {
    [
        (
            "machine_cpu_cores",
            "Number of logical CPU cores.",
            machine.cpu_cores,
        ),
        (
            "machine_cpu_physical_cores",
            "Number of physical CPU cores.",
            machine.cpu_physical_cores,
        ),
        (
            "machine_cpu_sockets",
            "Number of CPU sockets.",
            machine.cpu_sockets,
        ),
        (
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            machine.memory_bytes,
        ),
        (
            "machine_swap_bytes",
            "Amount of swap memory available on the machine.",
            machine.swap_bytes,
        ),
    ]
}

/// The machine's families (cAdvisor's machine collector), which
/// `/metrics/cadvisor` has whichever way its container figures are read.
pub fn machine_families(machine: &Machine) -> Vec<Family> {
    let machine_labels = || {
        vec![
            ("boot_id", machine.boot_id.clone()),
            ("machine_id", machine.machine_id.clone()),
            ("system_uuid", machine.system_uuid.clone()),
        ]
    };
    machine_values(machine)
        .into_iter()
        .map(|(name, help, value)| {
            let mut fam = Family::new(name, "gauge", help);
            fam.push(machine_labels(), value as f64, None);
            fam
        })
        .collect()
}

/// The Prometheus text of `/metrics/cadvisor` for these cgroups and this
/// machine, `now` being the scrape's time (container_last_seen).
pub fn render_metrics(series: &[Series], machine: &Machine, now: SystemTime) -> String {
    let f = |name, kind, help| Family::new(name, kind, help);
    let mut fams = machine_families(machine);
    let mut scrape_error = f(
        "container_scrape_error",
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    );
    scrape_error.push(Vec::new(), 0.0, None);
    fams.push(scrape_error);

    for (name, kind, help, get) in CONTAINER_FAMILIES {
        let mut fam = f(name, kind, help);
        for s in series {
            for (extra, value) in get(s) {
                let mut labels = s.labels.pairs();
                labels.extend(extra);
                labels.sort_by_key(|(k, _)| *k);
                fam.push(labels, value, Some(s.at));
            }
        }
        fams.push(fam);
    }
    // The spec families and the times, without timestamps (const metrics).
    for (name, help, get) in SPEC_FAMILIES {
        let mut fam = f(name, "gauge", help);
        for s in series {
            if let Some(v) = get(s) {
                fam.push(s.labels.pairs(), v, None);
            }
        }
        fams.push(fam);
    }
    let mut last_seen = f(
        "container_last_seen",
        "gauge",
        "Last time a container was seen by the exporter",
    );
    for s in series {
        last_seen.push(s.labels.pairs(), seconds(now), Some(now));
    }
    fams.push(last_seen);
    render(fams)
}

/// CFS figures only where the cgroup has a quota (cAdvisor's condition).
fn cfs(s: &Series, v: f64) -> Vec<(Vec<(&'static str, String)>, f64)> {
    if s.reading.cpu_quota == 0 {
        return Vec::new();
    }
    vec![(Vec::new(), v)]
}

fn net(s: &Series, get: fn(&NetCounters) -> u64) -> Vec<(Vec<(&'static str, String)>, f64)> {
    s.network
        .iter()
        .map(|n| (vec![("interface", n.interface.clone())], get(n) as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn files(pairs: &[(&'static str, &str)]) -> Files {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    }

    #[test]
    fn v1_readings_as_cadvisor_reads_them() {
        let r = CgroupReading::from_v1(
            &files(&[
                ("cpuacct.usage", "2500000000\n"),
                ("cpuacct.stat", "user 150\nsystem 50\n"),
                ("cpu.stat", "nr_periods 10\nnr_throttled 3\nthrottled_time 4000000\n"),
                ("cpu.shares", "256\n"),
                ("cpu.cfs_period_us", "100000\n"),
                ("cpu.cfs_quota_us", "50000\n"),
                ("memory.usage_in_bytes", "10000\n"),
                ("memory.max_usage_in_bytes", "12000\n"),
                ("memory.failcnt", "2\n"),
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.soft_limit_in_bytes", "9223372036854771712\n"),
                ("memory.use_hierarchy", "1\n"),
                (
                    "memory.stat",
                    "cache 1\nrss 2\npgfault 7\npgmajfault 1\ntotal_cache 3000\ntotal_rss 5000\ntotal_swap 0\ntotal_mapped_file 40\ntotal_inactive_file 2500\n",
                ),
                ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"),
                (
                    "blkio.throttle.io_service_bytes_recursive",
                    "254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 0\n254:0 Total 12288\nTotal 12288\n",
                ),
            ]),
            100,
        )
        .unwrap();
        assert_eq!(r.cpu_total_ns, 2_500_000_000);
        assert_eq!(
            (r.cpu_user_ns, r.cpu_system_ns),
            (1_500_000_000, 500_000_000)
        );
        assert_eq!(
            (r.cfs_periods, r.cfs_throttled_periods, r.cfs_throttled_ns),
            (10, 3, 4_000_000)
        );
        assert_eq!(
            (r.cpu_shares, r.cpu_period, r.cpu_quota),
            (256, 100_000, 50_000)
        );
        assert_eq!(
            (r.memory_cache, r.memory_rss, r.memory_mapped_file),
            (3000, 5000, 40)
        );
        assert_eq!(r.memory_working_set, 7500);
        assert_eq!((r.pgfault, r.pgmajfault, r.oom_kills), (7, 1, 1));
        assert_eq!(spec_memory(r.memory_limit), 0.0, "unlimited shows as 0");
        assert_eq!(
            r.io,
            [DeviceIo {
                device: "254:0".into(),
                read_bytes: 4096,
                write_bytes: 8192
            }]
        );
        let none = CgroupReading::from_v1(&files(&[("cpu.cfs_quota_us", "-1\n")]), 100).unwrap();
        assert_eq!(none.cpu_quota, 0);
    }

    #[test]
    fn v2_readings_as_cadvisor_reads_them() {
        let r = CgroupReading::from_v2(&files(&[
            (
                "cpu.stat",
                "usage_usec 2000\nuser_usec 1500\nsystem_usec 500\nnr_periods 4\nnr_throttled 1\nthrottled_usec 30\n",
            ),
            ("cpu.max", "25000 100000\n"),
            ("cpu.weight", "10\n"),
            ("memory.current", "9000\n"),
            ("memory.max", "max\n"),
            ("memory.stat", "anon 4000\nfile 3000\nfile_mapped 10\ninactive_file 1000\npgfault 5\npgmajfault 0\n"),
            ("memory.events", "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n"),
            ("io.stat", "8:0 rbytes=100 wbytes=200 rios=1 wios=2 dbytes=0 dios=0\n"),
        ]))
        .unwrap();
        assert_eq!(
            (r.cpu_total_ns, r.cpu_user_ns, r.cfs_throttled_ns),
            (2_000_000, 1_500_000, 30_000)
        );
        assert_eq!((r.cpu_quota, r.cpu_period), (25_000, 100_000));
        assert_eq!(r.cpu_shares, 2 + (9 * 262_142) / 9999);
        assert_eq!(
            (r.memory_rss, r.memory_cache, r.memory_working_set),
            (4000, 3000, 8000)
        );
        assert_eq!((r.memory_failcnt, r.oom_kills), (2, 1));
        assert_eq!(spec_memory(r.memory_limit), 0.0);
        assert_eq!(r.io[0].read_bytes, 100);
    }

    #[test]
    fn renders_cadvisor_families_with_its_labels_and_timestamps() {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let series = vec![Series {
            labels: Labels {
                container: "web".into(),
                id: "/kubepods/burstable/podu1/abc".into(),
                image: "nginx:1".into(),
                name: "abc".into(),
                namespace: "default".into(),
                pod: "web-0".into(),
            },
            created: at,
            started: at,
            at,
            reading: CgroupReading {
                cpu_total_ns: 1_500_000_000,
                cpu_quota: 50_000,
                cpu_period: 100_000,
                cfs_periods: 9,
                memory_working_set: 4096,
                memory_limit: 1 << 63,
                ..Default::default()
            },
            network: vec![NetCounters {
                interface: "eth0".into(),
                rx_bytes: 10,
                ..Default::default()
            }],
            filesystems: Vec::new(),
        }];
        let machine = Machine {
            machine_id: "m".into(),
            system_uuid: "u".into(),
            boot_id: "b".into(),
            cpu_cores: 2,
            memory_bytes: 1 << 30,
            ..Default::default()
        };
        let text = render_metrics(&series, &machine, at + Duration::from_secs(5));
        let base = r#"container="web",id="/kubepods/burstable/podu1/abc",image="nginx:1",name="abc",namespace="default",pod="web-0""#;
        for want in [
            "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.\n# TYPE container_cpu_usage_seconds_total counter\n".to_owned(),
            format!("container_cpu_usage_seconds_total{{{},cpu=\"total\",{}}} 1.5 1800000000000\n", &base[..15], &base[16..]),
            format!("container_memory_working_set_bytes{{{base}}} 4096 1800000000000\n"),
            format!("container_cpu_cfs_periods_total{{{base}}} 9 1800000000000\n"),
            format!("container_spec_cpu_quota{{{base}}} 50000\n"),
            format!("container_spec_memory_limit_bytes{{{base}}} 0\n"),
            "container_network_receive_bytes_total{container=\"web\",id=\"/kubepods/burstable/podu1/abc\",image=\"nginx:1\",interface=\"eth0\",name=\"abc\",namespace=\"default\",pod=\"web-0\"} 10 1800000000000\n".to_owned(),
            format!("container_start_time_seconds{{{base}}} 1.8e+09\n"),
            format!("container_last_seen{{{base}}} 1.800000005e+09 1800000005000\n"),
            "machine_cpu_cores{boot_id=\"b\",machine_id=\"m\",system_uuid=\"u\"} 2\n".to_owned(),
            "machine_memory_bytes{boot_id=\"b\",machine_id=\"m\",system_uuid=\"u\"} 1.073741824e+09\n".to_owned(),
            "container_scrape_error 0\n".to_owned(),
        ] {
            assert!(text.contains(&want), "missing {want:?} in:\n{text}");
        }
        // No quota, no CFS series; a family with no sample is not written.
        let mut plain = series.clone();
        plain[0].reading.cpu_quota = 0;
        let text = render_metrics(&plain, &machine, at);
        assert!(!text.contains("container_cpu_cfs_periods_total"), "{text}");
        assert!(!text.contains("container_spec_cpu_quota"), "{text}");
    }

    #[test]
    fn net_dev_counters() {
        let text = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n  eth0: 100 2 0 1 0 0 0 0 200 3 0 0 0 0 0 0\n    lo: 5 5 0 0 0 0 0 0 5 5 0 0 0 0 0 0\n";
        assert_eq!(
            parse_net_dev_counters(text),
            [NetCounters {
                interface: "eth0".into(),
                rx_bytes: 100,
                rx_packets: 2,
                rx_dropped: 1,
                tx_bytes: 200,
                tx_packets: 3,
                ..Default::default()
            }]
        );
    }
}
