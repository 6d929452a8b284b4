//! The container manager's decisions (upstream's pkg/kubelet/cm), pure:
//! cgroup names (the `cgroupfs` driver's `/kubepods/burstable/pod<uid>`),
//! the values a pod's cgroup gets (ResourceConfigForPod), the QoS cgroups'
//! shares, the node-allocatable cgroup's limits, the host's cgroup mounts
//! (from /proc/self/mountinfo), and the files each cgroup version is
//! written through (what runc's fs and fs2 managers write).

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;

use crate::qos::qos_class;
use crate::resources::{self, Amounts};

/// Lowest cpu.shares the kernel takes; what BestEffort gets.
pub const MIN_SHARES: u64 = 2;
/// Highest cpu.shares the kernel takes.
pub const MAX_SHARES: u64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
const MILLI_CPU_TO_CPU: i64 = 1000;
/// The default CFS period, 100 ms in microseconds.
pub const QUOTA_PERIOD: u64 = 100_000;
const MIN_QUOTA_PERIOD: i64 = 1000;
/// The node-allocatable cgroup under cgroupRoot.
pub const NODE_ALLOCATABLE_CGROUP: &str = "kubepods";
/// Pod cgroups are `pod<uid>`.
pub const POD_CGROUP_PREFIX: &str = "pod";
/// What the QoS cgroups' hugetlb limits are set to: unbounded.
pub const HUGEPAGES_UNBOUNDED: i64 = 1 << 62;

/// MilliCPUToShares: cpu.shares of a cpu request.
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu == 0 {
        return MIN_SHARES;
    }
    let shares = milli_cpu.saturating_mul(SHARES_PER_CPU) / MILLI_CPU_TO_CPU;
    (shares.max(0) as u64).clamp(MIN_SHARES, MAX_SHARES)
}

/// MilliCPUToQuota: cpu.cfs_quota_us of a cpu limit over `period` µs
/// (0: no limit).
pub fn milli_cpu_to_quota(milli_cpu: i64, period: u64) -> i64 {
    if milli_cpu == 0 {
        return 0;
    }
    let quota = milli_cpu.saturating_mul(period as i64) / MILLI_CPU_TO_CPU;
    quota.max(MIN_QUOTA_PERIOD)
}

/// SharesToMilliCPU: the cpu request cpu.shares stands for.
pub fn shares_to_milli_cpu(shares: u64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    (shares * MILLI_CPU_TO_CPU as u64).div_ceil(SHARES_PER_CPU as u64) as i64
}

/// QuotaToMilliCPU: the cpu limit a quota over `period` µs stands for
/// (0: no limit).
pub fn quota_to_milli_cpu(quota: i64, period: u64) -> i64 {
    if quota <= 0 || period == 0 {
        return 0;
    }
    quota.saturating_mul(MILLI_CPU_TO_CPU) / period as i64
}

/// getCPUWeight: cgroup v2's cpu.weight for cpu.shares.
pub fn cpu_weight(shares: u64) -> u64 {
    if shares >= MAX_SHARES {
        return 10_000;
    }
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// A cgroup's name as components (upstream's CgroupName), driver-neutral.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CgroupName(pub Vec<String>);

impl CgroupName {
    /// ParseCgroupfsToCgroupName: `/a/b` → [a, b]; `/` or empty → the root.
    pub fn parse_cgroupfs(name: &str) -> CgroupName {
        CgroupName(
            name.split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    /// This name with one more component.
    pub fn child(&self, component: &str) -> CgroupName {
        let mut parts = self.0.clone();
        parts.push(component.to_owned());
        CgroupName(parts)
    }

    /// The `cgroupfs` driver's form: `/kubepods/burstable`.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The path under a hierarchy's mount point (no leading `/`).
    pub fn relative(&self) -> PathBuf {
        self.0.iter().collect()
    }
}

/// What a cgroup is set to (upstream's ResourceConfig); None leaves a
/// value as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    pub cpu_shares: Option<u64>,
    /// cpu.cfs_quota_us; -1 is no limit.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    /// Bytes; -1 is no limit.
    pub memory: Option<i64>,
    /// -1 is no limit.
    pub pids_limit: Option<i64>,
    /// Page size in bytes → limit in bytes.
    pub hugepage_limits: BTreeMap<u64, i64>,
    pub cpuset_cpus: Option<String>,
    /// cgroup v2 files written as they are (memory.min, memory.low).
    pub unified: BTreeMap<String, String>,
}

/// How pod cgroups are configured (cpuCFSQuota, cpuCFSQuotaPeriod,
/// podPidsLimit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodCgroupPolicy {
    pub enforce_cpu_limits: bool,
    /// µs.
    pub cpu_period: u64,
    /// Applied when positive.
    pub pod_pids_limit: i64,
}

impl Default for PodCgroupPolicy {
    fn default() -> Self {
        PodCgroupPolicy {
            enforce_cpu_limits: true,
            cpu_period: QUOTA_PERIOD,
            pod_pids_limit: -1,
        }
    }
}

/// The pod's QoS class as upstream names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    pub fn of(pod: &Pod) -> Qos {
        match qos_class(pod) {
            "Guaranteed" => Qos::Guaranteed,
            "Burstable" => Qos::Burstable,
            _ => Qos::BestEffort,
        }
    }
}

/// ResourceConfigForPod, plus podPidsLimit (EnsureExists): Guaranteed pods
/// get shares, quota and a memory limit; Burstable ones shares, and quota or
/// a memory limit only when every container (or the pod level) declares
/// that limit; BestEffort ones the minimum shares. Hugepage limits are the
/// pod's hugepage requests.
pub fn pod_resource_config(pod: &Pod, policy: &PodCgroupPolicy) -> ResourceConfig {
    let reqs = resources::pod_requests(pod);
    let limits = resources::pod_limits(pod);
    let get = |l: &Amounts, k: &str| l.get(k).copied().unwrap_or(0);
    let every_declares = |res: &str| {
        let spec = pod.spec.as_ref();
        let containers = spec.into_iter().flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        });
        let mut all = true;
        for c in containers {
            all &= get(&resources::container_limits(c), res) != 0;
        }
        let pod_level = spec
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(res))
            .is_some_and(|q| q.0 != "0");
        all || (resources::pod_level_resources_set(pod) && pod_level)
    };
    let shares = milli_cpu_to_shares(get(&reqs, "cpu"));
    let quota = if policy.enforce_cpu_limits {
        milli_cpu_to_quota(get(&limits, "cpu"), policy.cpu_period)
    } else {
        -1
    };
    let memory = get(&limits, "memory");
    let mut out = ResourceConfig {
        hugepage_limits: resources::hugepages(&reqs),
        pids_limit: (policy.pod_pids_limit > 0).then_some(policy.pod_pids_limit),
        ..ResourceConfig::default()
    };
    match Qos::of(pod) {
        Qos::Guaranteed => {
            out.cpu_shares = Some(shares);
            out.cpu_quota = Some(quota);
            out.cpu_period = Some(policy.cpu_period);
            out.memory = Some(memory);
        }
        Qos::Burstable => {
            out.cpu_shares = Some(shares);
            if every_declares("cpu") {
                out.cpu_quota = Some(quota);
                out.cpu_period = Some(policy.cpu_period);
            }
            if every_declares("memory") {
                out.memory = Some(memory);
            }
        }
        Qos::BestEffort => out.cpu_shares = Some(MIN_SHARES),
    }
    out
}

/// A pod cgroup's writes for a resize from `current` to `target`
/// (doPodResizeAction): first, before the containers are updated, each
/// cpu and memory value is the larger of the two, so the containers' new
/// values fit under it (cgroup v1 refuses a child cpu quota above its
/// parent's); then, after them, `target` itself, when it differs. A
/// limit only `current` has is lifted (-1) rather than left as it was.
pub fn resize_stages(
    current: &ResourceConfig,
    target: &ResourceConfig,
) -> (ResourceConfig, Option<ResourceConfig>) {
    let mut last = target.clone();
    if current.cpu_quota.is_some() {
        last.cpu_quota.get_or_insert(-1);
    }
    if current.memory.is_some() {
        last.memory.get_or_insert(-1);
    }
    // -1 (or unset: a new cgroup's value) is no limit, the largest.
    let larger = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (None, None) => None,
        (a, b) => {
            let (a, b) = (a.unwrap_or(-1), b.unwrap_or(-1));
            Some(if a < 0 || b < 0 { -1 } else { a.max(b) })
        }
    };
    let mut first = last.clone();
    first.cpu_shares = current.cpu_shares.max(last.cpu_shares);
    first.cpu_quota = larger(current.cpu_quota, last.cpu_quota);
    first.memory = larger(current.memory, last.memory);
    if first == last {
        (last, None)
    } else {
        (first, Some(last))
    }
}

/// The QoS cgroups under cgroupRoot: Guaranteed pods sit directly in
/// `kubepods`, the others in `kubepods/burstable` and `kubepods/besteffort`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QosCgroups {
    pub root: CgroupName,
    pub burstable: CgroupName,
    pub besteffort: CgroupName,
}

impl QosCgroups {
    /// Under `cgroup_root` (cgroupRoot, `/` by default).
    pub fn new(cgroup_root: &str) -> QosCgroups {
        let root = CgroupName::parse_cgroupfs(cgroup_root).child(NODE_ALLOCATABLE_CGROUP);
        QosCgroups {
            burstable: root.child("burstable"),
            besteffort: root.child("besteffort"),
            root,
        }
    }

    /// The parent of pods of this class.
    pub fn of(&self, qos: Qos) -> &CgroupName {
        match qos {
            Qos::Guaranteed => &self.root,
            Qos::Burstable => &self.burstable,
            Qos::BestEffort => &self.besteffort,
        }
    }

    /// The pod's cgroup (GetPodContainerName).
    /// None for a UID that cannot name one directory (a static pod's
    /// `metadata.uid` with a `/` would climb out of the QoS cgroup).
    pub fn pod(&self, pod: &Pod, uid: &str) -> Option<CgroupName> {
        Some(self.of(Qos::of(pod)).child(&pod_cgroup_dir(uid)?))
    }

    /// Every place a pod cgroup of this UID may be.
    pub fn pod_candidates(&self, uid: &str) -> Option<[CgroupName; 3]> {
        let name = pod_cgroup_dir(uid)?;
        Some([
            self.root.child(&name),
            self.burstable.child(&name),
            self.besteffort.child(&name),
        ])
    }
}

/// Where the pods' cgroups are: the host's cgroup file system and the QoS
/// parents (what the stats provider reads usage from).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCgroups {
    pub layout: CgroupLayout,
    pub qos: QosCgroups,
}

/// `pod<uid>`, when the UID is one path component.
fn pod_cgroup_dir(uid: &str) -> Option<String> {
    (!uid.is_empty() && !uid.contains(['/', '\0'])).then(|| format!("{POD_CGROUP_PREFIX}{uid}"))
}

/// The pod UID of a child of a QoS cgroup named `pod<uid>`.
pub fn pod_uid_of(dir_name: &str) -> Option<&str> {
    dir_name
        .strip_prefix(POD_CGROUP_PREFIX)
        .filter(|uid| !uid.is_empty() && !uid.contains(POD_CGROUP_PREFIX))
}

/// setCPUCgroupConfig: the burstable cgroup's shares are the sum of its
/// pods' cpu requests.
pub fn burstable_shares<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> u64 {
    let milli: i64 = pods
        .into_iter()
        .filter(|p| Qos::of(p) == Qos::Burstable)
        .map(|p| resources::pod_requests(p).get("cpu").copied().unwrap_or(0))
        .sum();
    milli_cpu_to_shares(milli)
}

/// The QoS cgroups' values for the pods now active (UpdateCgroups without
/// the alpha QOSReserved): besteffort the minimum shares, burstable the sum
/// of its requests, hugetlb unbounded in all three.
pub fn qos_resource_configs<'a>(
    qos: &QosCgroups,
    pods: impl IntoIterator<Item = &'a Pod>,
    hugepage_sizes: &[u64],
) -> Vec<(CgroupName, ResourceConfig)> {
    let unbounded: BTreeMap<u64, i64> = hugepage_sizes
        .iter()
        .map(|s| (*s, HUGEPAGES_UNBOUNDED))
        .collect();
    let with = |shares: Option<u64>| ResourceConfig {
        cpu_shares: shares,
        hugepage_limits: unbounded.clone(),
        ..ResourceConfig::default()
    };
    vec![
        (qos.root.clone(), with(None)),
        (qos.burstable.clone(), with(Some(burstable_shares(pods)))),
        (qos.besteffort.clone(), with(Some(MIN_SHARES))),
    ]
}

/// getCgroupConfigInternal: a cgroup limited to `list` — memory, cpu
/// shares, pids and hugepages, or only the cpu shares when
/// `compressible_only` (the `-compressible` enforcements).
pub fn limits_config(list: &Amounts, compressible_only: bool) -> ResourceConfig {
    let shares = list.get("cpu").map(|m| milli_cpu_to_shares(*m));
    if compressible_only {
        return ResourceConfig {
            cpu_shares: shares,
            ..ResourceConfig::default()
        };
    }
    ResourceConfig {
        memory: list.get("memory").copied(),
        cpu_shares: shares,
        pids_limit: list.get("pid").copied(),
        hugepage_limits: resources::hugepages(list),
        ..ResourceConfig::default()
    }
}

/// getNodeAllocatableAbsoluteImpl: each resource of `capacity` less what
/// is reserved for the system and for Kubernetes, never below zero.
pub fn less_reserved(capacity: &Amounts, reserved: &[&Amounts]) -> Amounts {
    capacity
        .iter()
        .map(|(k, v)| {
            let kept = reserved
                .iter()
                .filter_map(|r| r.get(k))
                .fold(0i64, |sum, r| sum.saturating_add(*r));
            (k.clone(), v.saturating_sub(kept).max(0))
        })
        .collect()
}

/// Node allocatable as node status reports it (the setter with
/// GetNodeAllocatableReservation): each capacity less what is reserved
/// (systemReserved, kubeReserved, the hard eviction thresholds), never below
/// zero, and the hugepages' capacity off memory.
pub fn node_allocatable(capacity: &Amounts, reserved: &[&Amounts]) -> Amounts {
    let mut out = less_reserved(capacity, reserved);
    let hugepages = capacity
        .iter()
        .filter(|(k, _)| k.starts_with(resources::HUGEPAGES_PREFIX))
        .fold(0i64, |sum, (_, v)| sum.saturating_add(*v));
    if let Some(m) = out.get_mut("memory") {
        *m = m.saturating_sub(hugepages).max(0);
    }
    out
}

/// Reservations over their capacity (upstream's validateNodeAllocatable
/// words, one per resource).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid Node Allocatable configuration. {}", .0.join(" "))]
pub struct AllocatableError(pub Vec<String>);

/// validateNodeAllocatable: no reservation may exceed its capacity, in
/// upstream's words.
pub fn check_reservation(
    capacity: &Amounts,
    reserved: &[&Amounts],
) -> Result<(), AllocatableError> {
    let mut errors = Vec::new();
    for (k, cap) in capacity {
        let kept = reserved
            .iter()
            .filter_map(|r| r.get(k))
            .fold(0i64, |sum, r| sum.saturating_add(*r));
        if kept > *cap {
            let show = |v: i64| match k.as_str() {
                "cpu" => crate::quantity::format_milli(v),
                "pid" => v.to_string(),
                _ => crate::quantity::format_binary_si(v),
            };
            errors.push(format!(
                "Resource {k:?} has a reservation of {} but capacity of {}. Expected capacity >= reservation.",
                show(kept),
                show(*cap)
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(AllocatableError(errors))
    }
}

/// Which cgroup file system the host runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupLayout {
    /// cgroup v1: each controller (or named hierarchy, `name=systemd`)
    /// mounted somewhere.
    V1 { mounts: BTreeMap<String, PathBuf> },
    /// cgroup v2 (unified) at this mount point, with the controllers its
    /// root offers.
    V2 {
        root: PathBuf,
        controllers: Vec<String>,
    },
}

/// Where cgroup v2 must be mounted for the host to count as unified
/// (IsCgroup2UnifiedMode).
pub const UNIFIED_MOUNTPOINT: &str = "/sys/fs/cgroup";

impl CgroupLayout {
    /// The layout /proc/self/mountinfo describes: v2 when cgroup2 is
    /// mounted at /sys/fs/cgroup, else the v1 hierarchies (each controller
    /// at its shortest mount point, as upstream picks). `v2_controllers`
    /// is the content of the v2 root's cgroup.controllers. None: no
    /// cgroup file system at all.
    pub fn from_mountinfo(mountinfo: &str, v2_controllers: &str) -> Option<CgroupLayout> {
        let mut mounts: BTreeMap<String, PathBuf> = BTreeMap::new();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let Some(mountpoint) = left.split(' ').nth(4) else {
                continue;
            };
            let mut right = right.split(' ');
            let (fstype, _source, options) = (right.next(), right.next(), right.next());
            match fstype {
                Some("cgroup2") if mountpoint == UNIFIED_MOUNTPOINT => {
                    return Some(CgroupLayout::V2 {
                        root: PathBuf::from(mountpoint),
                        controllers: v2_controllers
                            .split_whitespace()
                            .map(str::to_owned)
                            .collect(),
                    });
                }
                Some("cgroup") => {
                    for opt in options.unwrap_or("").split(',') {
                        if !is_controller_option(opt) {
                            continue;
                        }
                        let shorter = mounts
                            .get(opt)
                            .is_none_or(|m| mountpoint.len() < m.as_os_str().len());
                        if shorter {
                            mounts.insert(opt.to_owned(), PathBuf::from(mountpoint));
                        }
                    }
                }
                _ => {}
            }
        }
        (!mounts.is_empty()).then_some(CgroupLayout::V1 { mounts })
    }

    pub fn version(&self) -> u8 {
        match self {
            CgroupLayout::V1 { .. } => 1,
            CgroupLayout::V2 { .. } => 2,
        }
    }
}

/// The cgroup a process is in, from its `/proc/<pid>/cgroup`, as
/// upstream's getContainer reads it: v2, the unified entry; v1, the cpu
/// hierarchy's, which must be the memory one's (accounting needs both),
/// and `name=systemd`'s where mounted.
pub fn process_cgroup(proc_cgroup: &str, unified: bool) -> Result<String, String> {
    let mut by_controller: BTreeMap<&str, &str> = BTreeMap::new();
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            by_controller.insert("", path);
        }
        for c in controllers.split(',').filter(|c| !c.is_empty()) {
            by_controller.insert(c, path);
        }
    }
    let find = |c: &str| {
        by_controller.get(c).copied().ok_or_else(|| {
            format!(
                "mountpoint for {} not found",
                if c.is_empty() { "unified" } else { c }
            )
        })
    };
    if unified {
        return find("").map(str::to_owned);
    }
    let (cpu, memory) = (find("cpu")?, find("memory")?);
    if cpu != memory {
        return Err(format!(
            "cpu and memory cgroup hierarchy not unified.  cpu: {cpu}, memory: {memory}"
        ));
    }
    Ok(by_controller
        .get("name=systemd")
        .copied()
        .unwrap_or(cpu)
        .to_owned())
}

/// A v1 super option naming a hierarchy (a controller or `name=...`),
/// not a mount flag.
fn is_controller_option(opt: &str) -> bool {
    const FLAGS: &[&str] = &[
        "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec",
    ];
    !opt.is_empty()
        && !FLAGS.contains(&opt)
        && !opt.starts_with("release_agent=")
        && opt != "clone_children"
        && opt != "noprefix"
        && opt != "xattr"
        && opt != "cpuset_v2_mode"
}

/// The controllers a v1 pod cgroup must have (cgroupV1impl.Validate).
pub const V1_REQUIRED: &[&str] = &["cpu", "cpuacct", "cpuset", "memory", "pids"];
/// The v2 controllers upstream enables and requires, where the root has them.
pub const V2_SUPPORTED: &[&str] = &["cpu", "cpuset", "memory", "hugetlb", "pids"];

/// One write into a cgroup: `controller` is the v1 hierarchy it goes to
/// (v2: the controller that must be enabled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub controller: &'static str,
    pub file: String,
    pub value: String,
}

fn w(controller: &'static str, file: impl Into<String>, value: impl ToString) -> Write {
    Write {
        controller,
        file: file.into(),
        value: value.to_string(),
    }
}

/// HugePageUnitSizeFromByteSize: 2097152 → `2MB`, 1073741824 → `1GB`.
pub fn hugepage_unit(size: u64) -> Option<String> {
    let units = ["B", "KB", "MB", "GB", "TB", "PB"];
    let (mut size, mut i) = (size, 0);
    while size >= 1024 && size % 1024 == 0 && i + 1 < units.len() {
        size /= 1024;
        i += 1;
    }
    (i > 0).then(|| format!("{size}{}", units[i]))
}

/// The page sizes the host offers, from /sys/kernel/mm/hugepages entries
/// (`hugepages-2048kB`), in bytes.
pub fn hugepage_size_of_dir(name: &str) -> Option<u64> {
    let kb = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
    kb.parse::<u64>().ok()?.checked_mul(1024)
}

/// What runc's v1 (fs) manager writes for `cfg`, in order. Hugetlb limits
/// are written for every page size the host has: those `cfg` names with
/// their limit, the others 0 (maybeSetHugetlb), when `with_hugetlb`.
pub fn v1_writes(cfg: &ResourceConfig, hugepage_sizes: &[u64], with_hugetlb: bool) -> Vec<Write> {
    let mut out = Vec::new();
    if let Some(cpus) = &cfg.cpuset_cpus {
        out.push(w("cpuset", "cpuset.cpus", cpus));
    }
    if let Some(s) = cfg.cpu_shares.filter(|s| *s != 0) {
        out.push(w("cpu", "cpu.shares", s));
    }
    if let Some(p) = cfg.cpu_period.filter(|p| *p != 0) {
        out.push(w("cpu", "cpu.cfs_period_us", p));
    }
    if let Some(q) = cfg.cpu_quota.filter(|q| *q != 0) {
        out.push(w("cpu", "cpu.cfs_quota_us", q));
    }
    if let Some(m) = cfg.memory.filter(|m| *m != 0) {
        out.push(w("memory", "memory.limit_in_bytes", m));
    }
    if let Some(p) = cfg.pids_limit.filter(|p| *p != 0) {
        out.push(w("pids", "pids.max", pids_value(p)));
    }
    if with_hugetlb {
        for (size, limit) in hugetlb_limits(cfg, hugepage_sizes) {
            out.push(w(
                "hugetlb",
                format!("hugetlb.{size}.limit_in_bytes"),
                limit,
            ));
        }
    }
    out
}

/// What runc's v2 (fs2) manager writes for `cfg`, in order, given the
/// controllers the cgroup has.
pub fn v2_writes(
    cfg: &ResourceConfig,
    hugepage_sizes: &[u64],
    controllers: &[String],
) -> Vec<Write> {
    let has = |c: &str| controllers.iter().any(|x| x == c);
    let mut out = Vec::new();
    if let Some(cpus) = &cfg.cpuset_cpus {
        out.push(w("cpuset", "cpuset.cpus", cpus));
    }
    if let Some(s) = cfg.cpu_shares.filter(|s| *s != 0) {
        out.push(w("cpu", "cpu.weight", cpu_weight(s)));
    }
    let (quota, period) = (cfg.cpu_quota.unwrap_or(0), cfg.cpu_period.unwrap_or(0));
    if quota != 0 || period != 0 {
        let mut v = if quota > 0 {
            quota.to_string()
        } else {
            "max".to_owned()
        };
        if period != 0 {
            v = format!("{v} {period}");
        }
        out.push(w("cpu", "cpu.max", v));
    }
    if let Some(m) = cfg.memory.filter(|m| *m != 0) {
        let v = if m < 0 {
            "max".to_owned()
        } else {
            m.to_string()
        };
        out.push(w("memory", "memory.max", v));
    }
    if let Some(p) = cfg.pids_limit.filter(|p| *p != 0) {
        out.push(w("pids", "pids.max", pids_value(p)));
    }
    if has("hugetlb") {
        for (size, limit) in hugetlb_limits(cfg, hugepage_sizes) {
            out.push(w("hugetlb", format!("hugetlb.{size}.max"), limit));
        }
    }
    for (file, value) in &cfg.unified {
        let controller = match file.split('.').next() {
            Some("memory") => "memory",
            Some("cpu") => "cpu",
            Some("pids") => "pids",
            _ => "",
        };
        out.push(w(controller, file.clone(), value));
    }
    out.retain(|x| x.controller.is_empty() || has(x.controller));
    out
}

fn pids_value(limit: i64) -> String {
    if limit > 0 {
        limit.to_string()
    } else {
        "max".to_owned()
    }
}

fn hugetlb_limits(cfg: &ResourceConfig, sizes: &[u64]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = cfg
        .hugepage_limits
        .iter()
        .filter_map(|(size, limit)| Some((hugepage_unit(*size)?, (*limit).max(0) as u64)))
        .collect();
    for size in sizes {
        if !cfg.hugepage_limits.contains_key(size)
            && let Some(unit) = hugepage_unit(*size)
        {
            out.push((unit, 0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cgroups() {
        let v1 =
            "12:name=systemd:/system.slice/kubelet.service\n4:memory:/kube\n3:cpu,cpuacct:/kube\n";
        let cases: &[(&str, bool, Result<&str, &str>)] = &[
            (
                "0::/system.slice/kubelet.service\n",
                true,
                Ok("/system.slice/kubelet.service"),
            ),
            (v1, false, Ok("/system.slice/kubelet.service")),
            ("4:memory:/kube\n3:cpu,cpuacct:/kube\n", false, Ok("/kube")),
            (
                "4:memory:/a\n3:cpu,cpuacct:/b\n",
                false,
                Err("cpu and memory cgroup hierarchy not unified.  cpu: /b, memory: /a"),
            ),
            (
                "3:cpu,cpuacct:/b\n",
                false,
                Err("mountpoint for memory not found"),
            ),
            (v1, true, Err("mountpoint for unified not found")),
        ];
        for (text, unified, want) in cases {
            let got = process_cgroup(text, *unified);
            assert_eq!(got.as_deref().map_err(String::as_str), *want, "{text:?}");
        }
    }
    use crate::testing::PodBuilder;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        PodBuilder::new("p")
            .uid("u1")
            .spec(serde_json::from_value(spec).unwrap())
            .build()
    }

    fn container(requests: serde_json::Value, limits: serde_json::Value) -> serde_json::Value {
        json!({"name": "c", "resources": {"requests": requests, "limits": limits}})
    }

    #[test]
    fn cpu_conversions() {
        for (milli, shares) in [(0, 2), (1, 2), (100, 102), (1000, 1024), (500_000, 262_144)] {
            assert_eq!(milli_cpu_to_shares(milli), shares, "{milli}m");
        }
        for (milli, period, quota) in [
            (0, 100_000, 0),
            (5, 100_000, 1000),
            (250, 100_000, 25_000),
            (1500, 100_000, 150_000),
            (250, 50_000, 12_500),
        ] {
            assert_eq!(
                milli_cpu_to_quota(milli, period),
                quota,
                "{milli}m/{period}"
            );
        }
        for (shares, weight) in [(2, 1), (1024, 39), (262_144, 10_000), (102, 4)] {
            assert_eq!(cpu_weight(shares), weight, "{shares}");
        }
        // Read back as upstream reads a pod cgroup: a request's shares
        // round trip (ceil), a quota over its period.
        for (shares, milli) in [(0, 0), (2, 2), (102, 100), (1024, 1000), (256, 250)] {
            assert_eq!(shares_to_milli_cpu(shares), milli, "{shares} shares");
        }
        for (quota, period, milli) in [
            (-1, 100_000, 0),
            (20_000, 100_000, 200),
            (12_500, 50_000, 250),
        ] {
            assert_eq!(quota_to_milli_cpu(quota, period), milli, "{quota}/{period}");
        }
    }

    #[test]
    fn resize_widens_the_pod_cgroup_before_the_containers_and_narrows_it_after() {
        let cfg = |shares: u64, quota: Option<i64>, memory: Option<i64>| ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: quota,
            cpu_period: quota.map(|_| QUOTA_PERIOD),
            memory,
            ..ResourceConfig::default()
        };
        let cases = [
            (
                "no change: one write",
                cfg(512, Some(50_000), Some(1 << 30)),
                cfg(512, Some(50_000), Some(1 << 30)),
                cfg(512, Some(50_000), Some(1 << 30)),
                None,
            ),
            (
                "growth: the target first, nothing after",
                cfg(512, Some(50_000), Some(1 << 30)),
                cfg(1024, Some(100_000), Some(1 << 31)),
                cfg(1024, Some(100_000), Some(1 << 31)),
                None,
            ),
            (
                "shrink: the old values first, the target after",
                cfg(1024, Some(100_000), Some(1 << 31)),
                cfg(512, Some(50_000), Some(1 << 30)),
                cfg(1024, Some(100_000), Some(1 << 31)),
                Some(cfg(512, Some(50_000), Some(1 << 30))),
            ),
            (
                "cpu up, memory down: each the larger first",
                cfg(512, Some(50_000), Some(1 << 31)),
                cfg(1024, Some(100_000), Some(1 << 30)),
                cfg(1024, Some(100_000), Some(1 << 31)),
                Some(cfg(1024, Some(100_000), Some(1 << 30))),
            ),
            (
                "a limit gained: unlimited until the containers have theirs",
                cfg(512, None, None),
                cfg(512, Some(50_000), None),
                ResourceConfig {
                    cpu_quota: Some(-1),
                    ..cfg(512, Some(50_000), None)
                },
                Some(cfg(512, Some(50_000), None)),
            ),
            (
                "a limit lost: lifted, not left",
                cfg(512, Some(50_000), Some(1 << 30)),
                cfg(512, None, None),
                ResourceConfig {
                    cpu_quota: Some(-1),
                    memory: Some(-1),
                    ..cfg(512, None, None)
                },
                None,
            ),
        ];
        for (name, current, target, first, last) in cases {
            assert_eq!(resize_stages(&current, &target), (first, last), "{name}");
        }
    }

    #[test]
    fn pod_cgroup_values_by_qos() {
        let policy = PodCgroupPolicy::default();
        let guaranteed = pod(json!({"containers": [
            container(json!({"cpu": "500m", "memory": "64Mi"}), json!({"cpu": "500m", "memory": "64Mi"}))
        ], "overhead": {"cpu": "100m", "memory": "1Mi"}}));
        assert_eq!(
            pod_resource_config(&guaranteed, &policy),
            ResourceConfig {
                cpu_shares: Some(614),
                cpu_quota: Some(60_000),
                cpu_period: Some(100_000),
                memory: Some(65 << 20),
                ..Default::default()
            }
        );
        // Burstable: one container without a memory limit → no pod memory limit.
        let burstable = pod(json!({"containers": [
            container(json!({"cpu": "100m"}), json!({"cpu": "200m", "memory": "32Mi"})),
            {"name": "d", "resources": {"limits": {"cpu": "100m"}}},
        ]}));
        assert_eq!(
            pod_resource_config(&burstable, &policy),
            ResourceConfig {
                cpu_shares: Some(204),
                cpu_quota: Some(30_000),
                cpu_period: Some(100_000),
                ..Default::default()
            }
        );
        let besteffort = pod(json!({"containers": [{"name": "c"}]}));
        let pids = PodCgroupPolicy {
            pod_pids_limit: 1024,
            enforce_cpu_limits: false,
            ..policy
        };
        assert_eq!(
            pod_resource_config(&besteffort, &pids),
            ResourceConfig {
                cpu_shares: Some(2),
                pids_limit: Some(1024),
                ..Default::default()
            }
        );
        // cpuCFSQuota: false → quota -1 (no limit) on a Guaranteed pod; hugepages from requests.
        let huge = pod(json!({"containers": [container(
            json!({"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "4Mi"}),
            json!({"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "4Mi"}),
        )]}));
        let cfg = pod_resource_config(&huge, &pids);
        assert_eq!(cfg.cpu_quota, Some(-1));
        assert_eq!(cfg.hugepage_limits, BTreeMap::from([(2 << 20, 4 << 20)]));
        // Pod-level limits declare what containers do not.
        let pod_level = pod(json!({"containers": [{"name": "c"}],
            "resources": {"requests": {"memory": "10Mi"}, "limits": {"memory": "20Mi"}}}));
        let cfg = pod_resource_config(&pod_level, &policy);
        assert_eq!((cfg.memory, cfg.cpu_quota), (Some(20 << 20), None));
    }

    #[test]
    fn names_and_places() {
        let qos = QosCgroups::new("/");
        assert_eq!(qos.root.to_cgroupfs(), "/kubepods");
        assert_eq!(qos.burstable.to_cgroupfs(), "/kubepods/burstable");
        let q = QosCgroups::new("/rk-node1/");
        assert_eq!(q.besteffort.to_cgroupfs(), "/rk-node1/kubepods/besteffort");
        assert_eq!(
            q.besteffort.relative(),
            PathBuf::from("rk-node1/kubepods/besteffort")
        );
        let be = pod(json!({"containers": [{"name": "c"}]}));
        assert_eq!(
            qos.pod(&be, "a-b").unwrap().to_cgroupfs(),
            "/kubepods/besteffort/poda-b"
        );
        assert_eq!(qos.pod(&be, "x/../.."), None, "a UID never climbs out");
        assert_eq!(qos.pod_candidates(""), None);
        assert_eq!(pod_uid_of("pod1234-5"), Some("1234-5"));
        assert_eq!(pod_uid_of("burstable"), None);
        assert_eq!(pod_uid_of("pod"), None);
    }

    #[test]
    fn qos_shares_follow_the_burstable_pods() {
        let b1 = pod(json!({"containers": [container(json!({"cpu": "250m"}), json!({}))]}));
        let b2 = pod(json!({"containers": [container(json!({"cpu": "750m"}), json!({}))]}));
        let g = pod(
            json!({"containers": [container(json!({"cpu": "2", "memory": "1Gi"}), json!({"cpu": "2", "memory": "1Gi"}))]}),
        );
        let qos = QosCgroups::new("");
        let configs = qos_resource_configs(&qos, [&b1, &b2, &g], &[2 << 20]);
        assert_eq!(configs[1].1.cpu_shares, Some(1024));
        assert_eq!(configs[2].1.cpu_shares, Some(2));
        assert_eq!(configs[0].1.cpu_shares, None);
        assert_eq!(
            configs[0].1.hugepage_limits,
            BTreeMap::from([(2 << 20, HUGEPAGES_UNBOUNDED)])
        );
        assert_eq!(qos_resource_configs(&qos, [], &[])[1].1.cpu_shares, Some(2));
    }

    #[test]
    fn mountinfo_layouts() {
        let hybrid = "\
24 30 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
25 24 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
26 24 0:24 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd
27 24 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
28 24 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
29 90 0:26 / /var/lib/containers/storage/memory rw - cgroup cgroup rw,memory
";
        let CgroupLayout::V1 { mounts } = CgroupLayout::from_mountinfo(hybrid, "").unwrap() else {
            panic!("v1 expected")
        };
        assert_eq!(
            mounts,
            BTreeMap::from([
                ("cpu".into(), "/sys/fs/cgroup/cpu,cpuacct".into()),
                ("cpuacct".into(), "/sys/fs/cgroup/cpu,cpuacct".into()),
                ("memory".into(), "/sys/fs/cgroup/memory".into()),
                ("name=systemd".into(), "/sys/fs/cgroup/systemd".into()),
            ])
        );
        let unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            CgroupLayout::from_mountinfo(unified, "cpuset cpu io memory pids\n"),
            Some(CgroupLayout::V2 {
                root: "/sys/fs/cgroup".into(),
                controllers: ["cpuset", "cpu", "io", "memory", "pids"]
                    .map(String::from)
                    .into(),
            })
        );
        assert_eq!(
            CgroupLayout::from_mountinfo("1 2 3:4 / / rw - ext4 /dev/sda rw\n", ""),
            None
        );
    }

    #[test]
    fn files_written_per_version() {
        let cfg = ResourceConfig {
            cpu_shares: Some(1024),
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            memory: Some(64 << 20),
            pids_limit: Some(-1),
            hugepage_limits: BTreeMap::from([(2 << 20, 4 << 20)]),
            ..Default::default()
        };
        let files = |ws: Vec<Write>| -> Vec<(String, String)> {
            ws.into_iter().map(|w| (w.file, w.value)).collect()
        };
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            files(v1_writes(&cfg, &[2 << 20, 1 << 30], true)),
            vec![
                s("cpu.shares", "1024"),
                s("cpu.cfs_period_us", "100000"),
                s("cpu.cfs_quota_us", "-1"),
                s("memory.limit_in_bytes", "67108864"),
                s("pids.max", "max"),
                s("hugetlb.2MB.limit_in_bytes", "4194304"),
                s("hugetlb.1GB.limit_in_bytes", "0"),
            ]
        );
        assert_eq!(files(v1_writes(&cfg, &[2 << 20], false)).len(), 5);
        let all: Vec<String> = V2_SUPPORTED.iter().map(|c| c.to_string()).collect();
        let mut v2 = cfg.clone();
        v2.unified.insert("memory.low".into(), "0".into());
        assert_eq!(
            files(v2_writes(&v2, &[2 << 20], &all)),
            vec![
                s("cpu.weight", "39"),
                s("cpu.max", "max 100000"),
                s("memory.max", "67108864"),
                s("pids.max", "max"),
                s("hugetlb.2MB.max", "4194304"),
                s("memory.low", "0"),
            ]
        );
        // A controller the cgroup lacks is not written.
        let no_memory: Vec<String> = ["cpu", "pids"].map(String::from).into();
        let quota = ResourceConfig {
            cpu_quota: Some(25_000),
            cpu_period: Some(100_000),
            memory: Some(1),
            ..Default::default()
        };
        assert_eq!(
            files(v2_writes(&quota, &[], &no_memory)),
            vec![s("cpu.max", "25000 100000")]
        );
        assert_eq!(hugepage_unit(64 << 10).as_deref(), Some("64KB"));
        assert_eq!(hugepage_size_of_dir("hugepages-2048kB"), Some(2 << 20));
    }

    #[test]
    fn node_allocatable_cgroup() {
        let capacity: Amounts = [
            ("cpu".to_owned(), 2000),
            ("memory".to_owned(), 2 << 30),
            ("pid".to_owned(), 4096),
            ("hugepages-2Mi".to_owned(), 0),
        ]
        .into();
        let system: Amounts = [("cpu".to_owned(), 500), ("memory".to_owned(), 1 << 30)].into();
        let kube: Amounts = [("pid".to_owned(), 5000), ("storage".to_owned(), 1)].into();
        let alloc = less_reserved(&capacity, &[&system, &kube]);
        assert_eq!(
            alloc,
            [
                ("cpu".to_owned(), 1500),
                ("memory".to_owned(), 1 << 30),
                ("pid".to_owned(), 0),
                ("hugepages-2Mi".to_owned(), 0),
            ]
            .into()
        );
        let status = node_allocatable(
            &[
                ("memory".to_owned(), 2 << 30),
                ("hugepages-2Mi".to_owned(), 1 << 30),
            ]
            .into(),
            &[&[("memory".to_owned(), 512 << 20)].into()],
        );
        assert_eq!(status["memory"], 512 << 20);
        assert_eq!(
            check_reservation(&capacity, &[&system, &kube])
                .unwrap_err()
                .to_string(),
            "invalid Node Allocatable configuration. Resource \"pid\" has a reservation of 5000 but capacity of 4096. Expected capacity >= reservation."
        );
        check_reservation(&capacity, &[&system]).unwrap();
        let cfg = limits_config(&alloc, false);
        assert_eq!(cfg.cpu_shares, Some(1536));
        assert_eq!(cfg.memory, Some(1 << 30));
        assert_eq!(cfg.pids_limit, Some(0));
        assert_eq!(cfg.hugepage_limits, BTreeMap::from([(2 << 20, 0)]));
        assert_eq!(
            limits_config(&system, true),
            ResourceConfig {
                cpu_shares: Some(512),
                ..Default::default()
            }
        );
    }
}
