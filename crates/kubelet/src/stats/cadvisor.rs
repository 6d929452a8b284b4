//! The collector of `/metrics/cadvisor`: what cAdvisor reads for the
//! kubelet, read here from the same places — the root cgroup and every
//! cgroup under the pods' cgroup (`kubepods`: QoS classes, pods, their
//! containers and sandboxes), each controller's files; a sandbox's network
//! counters from /proc/<pid>/net/dev of a process in it (the pod's network
//! namespace), the host's for the root; the root's file system from
//! statvfs; the machine from /proc and /etc. Containers and sandboxes are
//! named by the runtime (CRI), pods by their sandboxes. Families and their
//! text: `kubelet_core::cadvisor`. Cgroups outside the pods' (system
//! services) are not reported, where cAdvisor reports every cgroup.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kubelet_core::cadvisor::{
    CgroupReading, Files, FsUsage, Labels, Machine, Series, machine_families,
    parse_net_dev_counters, render_metrics,
};
use kubelet_core::cgroups::{CgroupLayout, pod_uid_of};
use kubelet_core::expfmt::{Family, render};
use kubelet_core::stats::time_from_nanos;
use kubelet_core::types::keys;
use kubelet_cri::client::CriClient;
use kubelet_cri::v1 as cri;

use super::StatsView;

/// The cgroup v1 files cAdvisor's libcontainer handler reads, by controller.
const V1_FILES: &[(&str, &[&str])] = &[
    ("cpuacct", &["cpuacct.usage", "cpuacct.stat"]),
    (
        "cpu",
        &[
            "cpu.stat",
            "cpu.shares",
            "cpu.cfs_period_us",
            "cpu.cfs_quota_us",
        ],
    ),
    (
        "memory",
        &[
            "memory.usage_in_bytes",
            "memory.max_usage_in_bytes",
            "memory.failcnt",
            "memory.stat",
            "memory.limit_in_bytes",
            "memory.soft_limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "memory.use_hierarchy",
            "memory.oom_control",
        ],
    ),
    ("blkio", &["blkio.throttle.io_service_bytes_recursive"]),
];

/// ... and the cgroup v2 ones.
const V2_FILES: &[&str] = &[
    "cpu.stat",
    "cpu.max",
    "cpu.weight",
    "memory.current",
    "memory.peak",
    "memory.stat",
    "memory.max",
    "memory.low",
    "memory.swap.current",
    "memory.swap.max",
    "memory.events",
    "io.stat",
];

/// What the runtime says of a container or sandbox, by id.
#[derive(Clone, Debug, Default)]
struct Known {
    pod: String,
    namespace: String,
    container: String,
    image: String,
    created: i64,
    sandbox: bool,
}

/// `/metrics/cadvisor`'s text for the node `view` shows.
pub async fn metrics(view: &dyn StatsView) -> String {
    let cri = view.cri();
    let containers = cri.list_containers(None).await.unwrap_or_default();
    let sandboxes = cri.list_pod_sandbox(None).await.unwrap_or_default();
    let sandbox_image = sandbox_image(&cri).await;
    let mut known: HashMap<String, Known> = HashMap::new();
    let mut pods: HashMap<String, (String, String)> = HashMap::new();
    for s in &sandboxes {
        let meta = s.metadata.clone().unwrap_or_default();
        pods.insert(
            meta.uid.clone(),
            (meta.name.clone(), meta.namespace.clone()),
        );
        known.insert(
            s.id.clone(),
            Known {
                pod: meta.name,
                namespace: meta.namespace,
                image: sandbox_image.clone(),
                created: s.created_at,
                sandbox: true,
                ..Known::default()
            },
        );
    }
    for c in &containers {
        let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
        let image = c
            .image
            .as_ref()
            .map(|i| {
                if i.user_specified_image.is_empty() {
                    i.image.clone()
                } else {
                    i.user_specified_image.clone()
                }
            })
            .unwrap_or_default();
        known.insert(
            c.id.clone(),
            Known {
                pod: label(keys::POD_NAME),
                namespace: label(keys::POD_NAMESPACE),
                container: label(keys::CONTAINER_NAME),
                image,
                created: c.created_at,
                sandbox: false,
            },
        );
    }
    let cgroups = view.pod_cgroups();
    let root_dir = view.root_dir();
    let gathered = kubelet_tasks::off_thread(move || {
        let now = SystemTime::now();
        let mut series = Vec::new();
        if let Some(c) = &cgroups {
            let mut rels = vec![PathBuf::new()];
            walk(&c.layout, &c.qos.root.relative(), &mut rels);
            let devices = BlockDevices::default();
            for rel in rels {
                if let Some(s) = read_series(&c.layout, &rel, &known, &pods, &devices, &root_dir) {
                    series.push(s);
                }
            }
        }
        (series, machine(), now)
    })
    .await;
    match gathered {
        Ok((series, machine, now)) => render_metrics(&series, &machine, now),
        Err(e) => {
            tracing::warn!(error = %e, "gathering cAdvisor metrics");
            String::new()
        }
    }
}

/// `/metrics/cadvisor` under PodAndContainerStatsFromCRI, as upstream's CRI
/// metrics collector: the machine's families, and every metric the runtime
/// reports for its sandboxes and containers (ListPodSandboxMetrics) under
/// the `descriptors` it gave (ListMetricDescriptors). A failed call leaves
/// the runtime's metrics out, with upstream's log line.
pub async fn cri_metrics(cri: &CriClient, descriptors: &[cri::MetricDescriptor]) -> String {
    let pods = cri
        .list_pod_sandbox_metrics()
        .await
        .inspect_err(|error| tracing::error!(%error, "Failed to get pod metrics"))
        .unwrap_or_default();
    let mut families = match kubelet_tasks::off_thread(machine).await {
        Ok(machine) => machine_families(&machine),
        Err(e) => {
            tracing::warn!(error = %e, "gathering the machine's metrics");
            Vec::new()
        }
    };
    families.extend(cri_families(descriptors, &pods));
    render(families)
}

/// The runtime's metrics as families, as upstream's criMetricToProm turns
/// them: a metric whose name no descriptor has, or whose label values do
/// not match its descriptor's keys, is left out; a timestamp (the runtime
/// cached the value) is kept, none when it read the value live.
fn cri_families(
    descriptors: &[cri::MetricDescriptor],
    pods: &[cri::PodSandboxMetrics],
) -> Vec<Family> {
    let described: HashMap<&str, &cri::MetricDescriptor> =
        descriptors.iter().map(|d| (d.name.as_str(), d)).collect();
    let metrics = pods.iter().flat_map(|p| {
        p.metrics
            .iter()
            .chain(p.container_metrics.iter().flat_map(|c| c.metrics.iter()))
    });
    let mut families: BTreeMap<&str, Family> = BTreeMap::new();
    for m in metrics {
        let Some(d) = described.get(m.name.as_str()) else {
            tracing::debug!(name = %m.name, "Descriptor not present in pre-populated list of descriptors");
            continue;
        };
        if m.label_values.len() != d.label_keys.len() {
            tracing::error!(
                name = %m.name,
                keys = ?d.label_keys,
                values = ?m.label_values,
                "Error getting CRI prometheus metric"
            );
            continue;
        }
        let family = families.entry(d.name.as_str()).or_insert_with(|| {
            let kind = if m.metric_type == cri::MetricType::Gauge as i32 {
                "gauge"
            } else {
                "counter"
            };
            Family::new(d.name.clone(), kind, d.help.clone())
        });
        let mut labels: Vec<(String, String)> = d
            .label_keys
            .iter()
            .cloned()
            .zip(m.label_values.iter().cloned())
            .collect();
        labels.sort();
        let value = m.value.as_ref().map_or(0, |v| v.value) as f64;
        let at = (m.timestamp != 0).then(|| time_from_nanos(m.timestamp));
        family.push_named(labels, value, at);
    }
    families.into_values().collect()
}

/// The image the runtime runs sandboxes from (containerd's verbose status:
/// `config.sandboxImage`), empty when it does not say.
async fn sandbox_image(cri: &kubelet_cri::client::CriClient) -> String {
    cri.status_info()
        .await
        .ok()
        .and_then(|info| info.get("config").cloned())
        .and_then(|config| serde_json::from_str::<serde_json::Value>(&config).ok())
        .and_then(|v| v["sandboxImage"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The directory of cgroup `rel` in a hierarchy: v1's memory controller's
/// (every cgroup the kubelet and the runtime make has one), v2's unified.
fn tree_dir(layout: &CgroupLayout, rel: &Path) -> Option<PathBuf> {
    match layout {
        CgroupLayout::V1 { mounts } => mounts.get("memory").map(|m| m.join(rel)),
        CgroupLayout::V2 { root, .. } => Some(root.join(rel)),
    }
}

/// `start` and every cgroup under it, depth first.
fn walk(layout: &CgroupLayout, start: &Path, out: &mut Vec<PathBuf>) {
    let Some(dir) = tree_dir(layout, start) else {
        return;
    };
    if !dir.is_dir() {
        return;
    }
    out.push(start.to_owned());
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| start.join(e.file_name()))
        .collect();
    children.sort();
    for child in children {
        walk(layout, &child, out);
    }
}

fn read_files(layout: &CgroupLayout, rel: &Path) -> Files {
    let mut files = Files::new();
    match layout {
        CgroupLayout::V1 { mounts } => {
            for (controller, names) in V1_FILES {
                let Some(mount) = mounts.get(*controller) else {
                    continue;
                };
                for name in *names {
                    if let Ok(text) = std::fs::read_to_string(mount.join(rel).join(name)) {
                        files.insert(name, text);
                    }
                }
            }
        }
        CgroupLayout::V2 { root, .. } => {
            for name in V2_FILES {
                if let Ok(text) = std::fs::read_to_string(root.join(rel).join(name)) {
                    files.insert(name, text);
                }
            }
        }
    }
    files
}

/// `maj:min` to `/dev/<name>`, as /sys/dev/block names them (cAdvisor's
/// machine DiskMap); looked up once per scrape.
#[derive(Default)]
struct BlockDevices(std::cell::RefCell<HashMap<String, String>>);

impl BlockDevices {
    fn name(&self, dev: &str) -> String {
        if let Some(n) = self.0.borrow().get(dev) {
            return n.clone();
        }
        let name = std::fs::read_to_string(format!("/sys/dev/block/{dev}/uevent"))
            .ok()
            .and_then(|u| {
                u.lines()
                    .find_map(|l| l.strip_prefix("DEVNAME="))
                    .map(|n| format!("/dev/{n}"))
            })
            .unwrap_or_else(|| dev.to_owned());
        self.0.borrow_mut().insert(dev.to_owned(), name.clone());
        name
    }
}

fn read_series(
    layout: &CgroupLayout,
    rel: &Path,
    known: &HashMap<String, Known>,
    pods: &HashMap<String, (String, String)>,
    devices: &BlockDevices,
    root_dir: &Path,
) -> Option<Series> {
    let dir = tree_dir(layout, rel)?;
    let files = read_files(layout, rel);
    let at = SystemTime::now();
    let mut reading = match layout {
        CgroupLayout::V1 { .. } => {
            CgroupReading::from_v1(&files, rustix::param::clock_ticks_per_second())
        }
        CgroupLayout::V2 { .. } => CgroupReading::from_v2(&files),
    }
    .inspect_err(|e| tracing::debug!(cgroup = %rel.display(), error = %e, "cAdvisor metrics: unreadable cgroup"))
    .ok()?;
    for io in &mut reading.io {
        io.device = devices.name(&io.device);
    }
    let cgroup_time = std::fs::metadata(&dir)
        .and_then(|m| m.modified())
        .unwrap_or(at);
    let leaf = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut labels = Labels {
        id: format!("/{}", rel.display()),
        ..Labels::default()
    };
    let mut created = cgroup_time;
    let mut network = Vec::new();
    let mut filesystems = Vec::new();
    if rel.as_os_str().is_empty() {
        network = std::fs::read_to_string("/proc/net/dev")
            .map(|t| parse_net_dev_counters(&t))
            .unwrap_or_default();
        filesystems = root_filesystem(root_dir).into_iter().collect();
    } else if let Some(k) = known.get(&leaf) {
        labels.name = leaf.clone();
        labels.image = k.image.clone();
        labels.pod = k.pod.clone();
        labels.namespace = k.namespace.clone();
        labels.container = k.container.clone();
        created = time_from_nanos(k.created);
        if k.sandbox {
            network = sandbox_network(layout, rel);
        }
    } else if let Some((pod, namespace)) = pod_uid_of(&leaf).and_then(|uid| pods.get(uid)) {
        labels.pod = pod.clone();
        labels.namespace = namespace.clone();
    }
    Some(Series {
        labels,
        created,
        started: cgroup_time,
        at,
        reading,
        network,
        filesystems,
    })
}

/// The network counters of the namespace a sandbox's process lives in.
fn sandbox_network(layout: &CgroupLayout, rel: &Path) -> Vec<kubelet_core::cadvisor::NetCounters> {
    let procs = match layout {
        CgroupLayout::V1 { mounts } => mounts
            .get("memory")
            .map(|m| m.join(rel).join("cgroup.procs")),
        CgroupLayout::V2 { root, .. } => Some(root.join(rel).join("cgroup.procs")),
    };
    procs
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| t.lines().next().map(str::to_owned))
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok())
        .map(|t| parse_net_dev_counters(&t))
        .unwrap_or_default()
}

/// The file system the root directory is on: its device (the mount's
/// source, as cAdvisor names it) and statvfs' figures.
fn root_filesystem(root_dir: &Path) -> Option<FsUsage> {
    let st = rustix::fs::statvfs(root_dir).ok()?;
    let canonical = std::fs::canonicalize(root_dir).ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let device = mountinfo
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let point = fields.get(4)?;
            let dash = fields.iter().position(|f| *f == "-")?;
            let source = fields.get(dash + 2)?;
            canonical
                .starts_with(point)
                .then(|| (point.len(), (*source).to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, s)| s)?;
    let frsize = st.f_frsize;
    Some(FsUsage {
        device,
        usage_bytes: (st.f_blocks - st.f_bfree) * frsize,
        limit_bytes: st.f_blocks * frsize,
        inodes: st.f_files,
        inodes_free: st.f_ffree,
    })
}

/// The machine as cAdvisor's machine info has it.
fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let mut cores = 0;
    let mut physical: std::collections::BTreeSet<(String, String)> = Default::default();
    let mut sockets: std::collections::BTreeSet<String> = Default::default();
    let mut socket = String::new();
    for line in cpuinfo.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "processor" => cores += 1,
            "physical id" => {
                socket = v.trim().to_owned();
                sockets.insert(socket.clone());
            }
            "core id" => {
                physical.insert((socket.clone(), v.trim().to_owned()));
            }
            _ => {}
        }
    }
    let meminfo = read("/proc/meminfo");
    let kib = |key: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |k| k * 1024)
    };
    Machine {
        machine_id: read("/etc/machine-id").trim().to_owned(),
        system_uuid: read("/sys/class/dmi/id/product_uuid").trim().to_owned(),
        boot_id: read("/proc/sys/kernel/random/boot_id").trim().to_owned(),
        cpu_cores: cores,
        cpu_physical_cores: (physical.len() as u64).max(u64::from(cores > 0)),
        cpu_sockets: (sockets.len() as u64).max(u64::from(cores > 0)),
        memory_bytes: kib("MemTotal:"),
        swap_bytes: kib("SwapTotal:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As upstream's criMetricToProm: a metric without a descriptor, or
    /// whose values do not match its descriptor's keys, is left out; a
    /// family's type is its metric's; a timestamp of 0 (read live) is none.
    #[test]
    fn the_runtimes_metrics_under_their_descriptors() {
        let descriptor = |name: &str, keys: &[&str]| cri::MetricDescriptor {
            name: name.into(),
            help: format!("{name} help"),
            label_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        };
        let metric =
            |name: &str, kind: cri::MetricType, values: &[&str], value, timestamp| cri::Metric {
                name: name.into(),
                timestamp,
                metric_type: kind as i32,
                label_values: values.iter().map(|v| (*v).to_owned()).collect(),
                value: Some(cri::UInt64Value { value }),
            };
        let descriptors = [
            descriptor("c_total", &["pod", "container"]),
            descriptor("g_bytes", &["pod"]),
        ];
        let pods = [cri::PodSandboxMetrics {
            pod_sandbox_id: "s1".into(),
            metrics: vec![metric("g_bytes", cri::MetricType::Gauge, &["p"], 7, 0)],
            container_metrics: vec![cri::ContainerMetrics {
                container_id: "c1".into(),
                metrics: vec![
                    metric(
                        "c_total",
                        cri::MetricType::Counter,
                        &["p", "c"],
                        3,
                        1_700_000_000_000_000_000,
                    ),
                    metric("c_total", cri::MetricType::Counter, &["p"], 9, 0),
                    metric("unknown", cri::MetricType::Gauge, &[], 1, 0),
                ],
            }],
        }];
        assert_eq!(
            render(cri_families(&descriptors, &pods)),
            "# HELP c_total c_total help\n# TYPE c_total counter\n\
             c_total{container=\"c\",pod=\"p\"} 3 1700000000000\n\
             # HELP g_bytes g_bytes help\n# TYPE g_bytes gauge\ng_bytes{pod=\"p\"} 7\n"
        );
    }

    #[test]
    fn walks_the_pods_cgroups_and_names_them() {
        let tmp = tempfile::tempdir().unwrap();
        let memory = tmp.path().join("memory");
        let cpuacct = tmp.path().join("cpuacct");
        let write = |root: &Path, rel: &str, file: &str, text: &str| {
            std::fs::create_dir_all(root.join(rel)).unwrap();
            std::fs::write(root.join(rel).join(file), text).unwrap();
        };
        for rel in [
            "",
            "kubepods",
            "kubepods/burstable/podu1",
            "kubepods/burstable/podu1/c1",
        ] {
            write(&memory, rel, "memory.usage_in_bytes", "100\n");
            write(&memory, rel, "memory.stat", "total_inactive_file 40\n");
            write(&cpuacct, rel, "cpuacct.usage", "2000000000\n");
        }
        let layout = CgroupLayout::V1 {
            mounts: [("memory", &memory), ("cpuacct", &cpuacct)]
                .map(|(c, p)| (c.to_owned(), p.clone()))
                .into(),
        };
        let mut rels = vec![PathBuf::new()];
        walk(&layout, Path::new("kubepods"), &mut rels);
        assert_eq!(
            rels,
            [
                "",
                "kubepods",
                "kubepods/burstable",
                "kubepods/burstable/podu1",
                "kubepods/burstable/podu1/c1"
            ]
            .map(PathBuf::from)
        );
        let known = HashMap::from([(
            "c1".to_owned(),
            Known {
                pod: "web".into(),
                namespace: "default".into(),
                container: "app".into(),
                image: "img:1".into(),
                created: 1_000_000_000,
                sandbox: false,
            },
        )]);
        let pods = HashMap::from([("u1".to_owned(), ("web".to_owned(), "default".to_owned()))]);
        let devices = BlockDevices::default();
        let series = |rel: &str| {
            read_series(&layout, Path::new(rel), &known, &pods, &devices, tmp.path()).unwrap()
        };
        let c = series("kubepods/burstable/podu1/c1");
        assert_eq!(
            c.labels,
            Labels {
                container: "app".into(),
                id: "/kubepods/burstable/podu1/c1".into(),
                image: "img:1".into(),
                name: "c1".into(),
                namespace: "default".into(),
                pod: "web".into(),
            }
        );
        assert_eq!(c.reading.memory_working_set, 60);
        assert_eq!(c.reading.cpu_total_ns, 2_000_000_000);
        let p = series("kubepods/burstable/podu1");
        assert_eq!(
            (p.labels.pod.as_str(), p.labels.container.as_str()),
            ("web", "")
        );
        let root = series("");
        assert_eq!(root.labels.id, "/");
        assert!(!root.filesystems.is_empty(), "the root's file system");
    }
}
