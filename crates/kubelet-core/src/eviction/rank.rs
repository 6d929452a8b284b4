//! Which pod eviction takes first and what it is told (upstream's ranking
//! functions, IsCriticalPod and evictionMessage, pkg/kubelet/eviction).
//!
//! - memory: pods using more than they request first, then lower priority,
//!   then the most above their request;
//! - disk (nodefs, imagefs, bytes or inodes): the same with the disk use
//!   the signal counts: writable layers, logs and local volumes on one file
//!   system; logs and local volumes for nodefs and writable layers for
//!   imagefs when the runtime's image file system is a dedicated one;
//! - pids: lower priority first, then the most processes.
//!
//! A pod without stats goes before one with them, as upstream ranks it.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::decide::Observations;
use super::{Resource, Signal, Threshold, ThresholdValue, Written};
use crate::quantity::{format_binary_si, format_decimal_si, parse_bytes};
use crate::resources::{pod_level_resources_set, pod_requests};
use crate::stats::{FsStats, PodStats};
use crate::types::{is_mirror_pod, is_static_pod};

/// The Evicted reason, of the pod's status, its event and admission's
/// refusals under pressure.
pub const REASON: &str = "Evicted";

/// The event annotations upstream writes on an eviction.
pub const OFFENDING_CONTAINERS_KEY: &str = "offending_containers";
pub const OFFENDING_CONTAINERS_USAGE_KEY: &str = "offending_containers_usage";
pub const OFFENDING_POD_KEY: &str = "offending_pod";
pub const OFFENDING_POD_USAGE_KEY: &str = "offending_pod_usage";
pub const STARVED_RESOURCE_KEY: &str = "starved_resource";

/// scheduling.SystemCriticalPriority.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// IsCriticalPod: static and mirror pods, and pods of system-critical
/// priority. They are never evicted, and admitted under pressure.
pub fn is_critical(pod: &Pod) -> bool {
    is_static_pod(pod)
        || is_mirror_pod(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn request(pod: &Pod, resource: &str) -> i64 {
    pod_requests(pod).get(resource).copied().unwrap_or(0)
}

fn working_set(stats: &PodStats) -> i64 {
    stats
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// Which of a pod's file system figures a disk signal counts (fsStatsType).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DiskParts {
    root: bool,
    logs: bool,
    local_volumes: bool,
}

fn disk_parts(signal: Signal, dedicated_image_fs: bool) -> DiskParts {
    let all = DiskParts {
        root: true,
        logs: true,
        local_volumes: true,
    };
    match (dedicated_image_fs, signal) {
        (false, _) => all,
        (true, Signal::NodeFsAvailable | Signal::NodeFsInodesFree) => {
            DiskParts { root: false, ..all }
        }
        (true, _) => DiskParts {
            root: true,
            logs: false,
            local_volumes: false,
        },
    }
}

/// podDiskUsage in bytes (or inodes): the parts counted of every
/// container, and the pod's local ephemeral volumes (emptyDirs on disk,
/// configMaps) when the signal counts them.
fn disk_usage(stats: &PodStats, parts: DiskParts, inodes: bool) -> i64 {
    let used = |fs: Option<&FsStats>| {
        let v = fs.and_then(|f| if inodes { f.inodes_used } else { f.used_bytes });
        v.map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX))
    };
    let containers = stats
        .containers
        .iter()
        .map(|c| {
            let root = if parts.root {
                used(c.rootfs.as_ref())
            } else {
                0
            };
            let logs = if parts.logs { used(c.logs.as_ref()) } else { 0 };
            root.saturating_add(logs)
        })
        .fold(0i64, i64::saturating_add);
    let volumes = stats
        .volume_stats
        .iter()
        .filter(|v| parts.local_volumes && v.local_ephemeral)
        .map(|v| used(Some(&v.fs)))
        .fold(0i64, i64::saturating_add);
    containers.saturating_add(volumes)
}

/// processUsage: the pod's process count, 0 when unknown.
fn processes(stats: &PodStats) -> u64 {
    stats
        .process_stats
        .as_ref()
        .and_then(|p| p.process_count)
        .unwrap_or(0)
}

/// cmpBool: true goes first.
fn true_first(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

/// Rank `pods` for eviction on `signal`, the first to go first. `stats`
/// holds the pods' figures by UID.
pub fn rank<P: Borrow<Pod>>(
    pods: &mut [P],
    signal: Signal,
    stats: &HashMap<String, PodStats>,
    dedicated_image_fs: bool,
) {
    let stats_of = |p: &Pod| stats.get(p.metadata.uid.as_deref().unwrap_or(""));
    // Per pod: (usage, the request it is measured against, the request
    // taken off for the ordering by usage) — upstream's disk() takes the
    // ephemeral-storage request off inodes too.
    let measure = |p: &Pod, s: &PodStats| -> (i64, i64, i64) {
        match signal.resource() {
            Some(Resource::Memory) => {
                let req = request(p, "memory");
                (working_set(s), req, req)
            }
            Some(r @ (Resource::EphemeralStorage | Resource::Inodes)) => {
                let inodes = r == Resource::Inodes;
                let usage = disk_usage(s, disk_parts(signal, dedicated_image_fs), inodes);
                let storage = request(p, "ephemeral-storage");
                (usage, if inodes { 0 } else { storage }, storage)
            }
            _ => (0, 0, 0),
        }
    };
    pods.sort_by(|a, b| {
        let (a, b) = (a.borrow(), b.borrow());
        let by_priority = priority(a).cmp(&priority(b));
        // rankPIDPressure: priority, then pods without stats first, then
        // the most processes.
        if signal.resource() == Some(Resource::Pids) {
            return by_priority.then_with(|| match (stats_of(a), stats_of(b)) {
                (Some(sa), Some(sb)) => processes(sb).cmp(&processes(sa)),
                (sa, sb) => true_first(sa.is_none(), sb.is_none()),
            });
        }
        let (sa, sb) = match (stats_of(a), stats_of(b)) {
            (Some(sa), Some(sb)) => (sa, sb),
            (sa, sb) => return true_first(sa.is_none(), sb.is_none()),
        };
        let (ua, ra, oa) = measure(a, sa);
        let (ub, rb, ob) = measure(b, sb);
        true_first(ua > ra, ub > rb)
            .then(by_priority)
            .then_with(|| (ub.saturating_sub(ob)).cmp(&ua.saturating_sub(oa)))
    });
}

/// A Quantity as upstream prints it (canonical, in its own format): binary
/// suffixes stay binary, the rest is decimal.
pub(super) fn canonical(q: &Quantity) -> String {
    match parse_bytes(q) {
        Ok(v) => Written::of(&q.0).format(v),
        Err(_) => q.0.clone(),
    }
}

/// An observation's amount as upstream prints it: bytes as BinarySI,
/// counts as DecimalSI.
fn amount(signal: Signal, v: i64) -> String {
    if signal.counts_bytes() {
        format_binary_si(v)
    } else {
        format_decimal_si(v)
    }
}

/// evictionMessage: why the pod is evicted, and the event's annotations.
pub fn eviction_message(
    resource: Resource,
    pod: &Pod,
    stats: Option<&PodStats>,
    act_on: &[Threshold],
    observations: &Observations,
) -> (String, BTreeMap<String, String>) {
    let mut annotations = BTreeMap::new();
    let mut message = format!("The node was low on resource: {}. ", resource.as_str());
    // getThresholdMetInfo: the first threshold of this resource observed.
    if let Some((t, o)) = act_on
        .iter()
        .filter(|t| t.signal.resource() == Some(resource))
        .find_map(|t| Some((t, observations.get(&t.signal)?)))
    {
        // GetThresholdQuantity: a quantity as it was written, a
        // percentage of the capacity as BinarySI.
        let threshold = match t.value {
            ThresholdValue::Quantity(v, written) => written.format(v),
            ThresholdValue::Percentage(_) => format_binary_si(t.value.amount_of(o.capacity)),
        };
        message.push_str(&format!(
            "Threshold quantity: {threshold}, available: {}. ",
            amount(t.signal, o.available),
        ));
    }
    let Some(stats) = stats else {
        return (message, annotations);
    };
    let Some(spec) = pod.spec.as_ref() else {
        return (message, annotations);
    };
    let name = resource.as_str();
    if resource == Resource::Memory
        && pod_level_resources_set(pod)
        && let Some(req) = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(name))
        && stats.memory.is_some()
    {
        let usage = format_binary_si(working_set(stats));
        message.push_str(&format!(
            "Pod {} was using {usage}, request is {}, has larger consumption of {name}. ",
            pod.metadata.name.as_deref().unwrap_or(""),
            canonical(req),
        ));
        annotations.insert(
            OFFENDING_POD_KEY.to_owned(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        annotations.insert(OFFENDING_POD_USAGE_KEY.to_owned(), usage);
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let containers: Vec<_> = containers.collect();
    let (mut offending, mut usages) = (Vec::new(), Vec::new());
    for cs in &stats.containers {
        let Some(c) = containers.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let req = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(name));
        let req_value = req.and_then(|q| parse_bytes(q).ok()).unwrap_or(0);
        let usage = match resource {
            Resource::EphemeralStorage => {
                let used = |f: Option<&FsStats>| f.and_then(|f| f.used_bytes);
                used(cs.rootfs.as_ref())
                    .zip(used(cs.logs.as_ref()))
                    .map(|(r, l)| r.saturating_add(l))
            }
            Resource::Memory => cs.memory.as_ref().and_then(|m| m.working_set_bytes),
            _ => None,
        };
        let Some(usage) = usage.map(|u| i64::try_from(u).unwrap_or(i64::MAX)) else {
            continue;
        };
        if usage > req_value {
            let usage = format_binary_si(usage);
            message.push_str(&format!(
                "Container {} was using {usage}, request is {}, has larger consumption of {name}. ",
                c.name,
                req.map_or_else(|| "0".to_owned(), canonical),
            ));
            offending.push(c.name.clone());
            usages.push(usage);
        }
    }
    annotations.insert(OFFENDING_CONTAINERS_KEY.to_owned(), offending.join(","));
    annotations.insert(OFFENDING_CONTAINERS_USAGE_KEY.to_owned(), usages.join(","));
    annotations.insert(STARVED_RESOURCE_KEY.to_owned(), name.to_owned());
    (message, annotations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::decide::Observation;
    use crate::stats::{ContainerStats, MemoryStats, PodReference, ProcessStats};
    use crate::testing::{PodBuilder, container, resources};
    use k8s_openapi::api::core::v1::Container;
    use std::time::{Duration, UNIX_EPOCH};

    const MI: u64 = 1 << 20;

    fn pod(name: &str, memory_request: Option<&str>, prio: Option<i32>) -> Pod {
        PodBuilder::new(name)
            .uid(&format!("uid-{name}"))
            .with_spec(|s| s.priority = prio)
            .container(Container {
                resources: memory_request.map(|r| resources(&[("memory", r)], &[])),
                ..container("c")
            })
            .build()
    }

    fn mem(ws: u64) -> Option<MemoryStats> {
        Some(MemoryStats {
            time: UNIX_EPOCH,
            available_bytes: None,
            usage_bytes: None,
            working_set_bytes: Some(ws),
            rss_bytes: None,
            page_faults: None,
            major_page_faults: None,
        })
    }

    fn stats(name: &str, ws: u64) -> PodStats {
        PodStats {
            pod_ref: PodReference {
                name: name.into(),
                namespace: "default".into(),
                uid: format!("uid-{name}"),
            },
            containers: vec![ContainerStats {
                name: "c".into(),
                memory: mem(ws),
                ..Default::default()
            }],
            memory: mem(ws),
            ..Default::default()
        }
    }

    fn fs(used: u64, inodes_used: u64) -> Option<FsStats> {
        Some(FsStats {
            time: UNIX_EPOCH,
            available_bytes: None,
            capacity_bytes: None,
            used_bytes: Some(used),
            inodes_free: None,
            inodes: None,
            inodes_used: Some(inodes_used),
        })
    }

    fn names(pods: &[Pod]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or(""))
            .collect()
    }

    #[test]
    fn memory_ranking_as_upstream() {
        let mut pods = vec![
            pod("within-request", Some("500Mi"), None),
            pod("over-small", Some("10Mi"), None),
            pod("over-big", Some("10Mi"), None),
            pod("over-high-priority", Some("10Mi"), Some(1000)),
            pod("no-stats", Some("1Gi"), Some(5000)),
            pod("besteffort", None, None),
        ];
        let s: HashMap<String, PodStats> = [
            stats("within-request", 400 * MI),
            stats("over-small", 20 * MI),
            stats("over-big", 300 * MI),
            stats("over-high-priority", 900 * MI),
            stats("besteffort", 50 * MI),
        ]
        .into_iter()
        .map(|s| (s.pod_ref.uid.clone(), s))
        .collect();
        rank(&mut pods, Signal::MemoryAvailable, &s, false);
        assert_eq!(
            names(&pods),
            [
                "no-stats",
                // Over their requests, priority 0, most above first.
                "over-big",
                "besteffort",
                "over-small",
                "over-high-priority",
                "within-request",
            ]
        );
        // PID pressure: priority first (the pod without stats, of priority
        // 5000, goes last), then pods without stats, then the most processes.
        let mut s = s;
        for (uid, count) in [("over-small", 40), ("within-request", 7), ("over-big", 3)] {
            s.get_mut(&format!("uid-{uid}")).unwrap().process_stats = Some(ProcessStats {
                process_count: Some(count),
            });
        }
        rank(&mut pods, Signal::PidAvailable, &s, false);
        assert_eq!(
            names(&pods),
            [
                "over-small",
                "within-request",
                "over-big",
                "besteffort",
                "over-high-priority",
                "no-stats",
            ]
        );
    }

    #[test]
    fn disk_ranking_counts_the_parts_of_the_signal() {
        let mut a = stats("layer-heavy", 0);
        a.containers[0].rootfs = fs(900, 5);
        a.containers[0].logs = fs(10, 1);
        let mut b = stats("log-heavy", 0);
        b.containers[0].rootfs = fs(10, 1);
        b.containers[0].logs = fs(500, 50);
        let s: HashMap<String, PodStats> = [a, b]
            .into_iter()
            .map(|s| (s.pod_ref.uid.clone(), s))
            .collect();
        let mut pods = vec![pod("log-heavy", None, None), pod("layer-heavy", None, None)];
        rank(&mut pods, Signal::NodeFsAvailable, &s, false);
        assert_eq!(names(&pods), ["layer-heavy", "log-heavy"]);
        // A dedicated image file system: nodefs counts logs only.
        rank(&mut pods, Signal::NodeFsAvailable, &s, true);
        assert_eq!(names(&pods), ["log-heavy", "layer-heavy"]);
        rank(&mut pods, Signal::ImageFsAvailable, &s, true);
        assert_eq!(names(&pods), ["layer-heavy", "log-heavy"]);
        // Inodes.
        rank(&mut pods, Signal::NodeFsInodesFree, &s, false);
        assert_eq!(names(&pods), ["log-heavy", "layer-heavy"]);
        // A local ephemeral volume counts for nodefs; a memory emptyDir not.
        let mut c = stats("volume-heavy", 0);
        c.volume_stats = vec![crate::stats::VolumeStats {
            fs: fs(2000, 9).unwrap(),
            name: "scratch".into(),
            pvc_ref: None,
            local_ephemeral: true,
        }];
        let mut d = stats("tmpfs-heavy", 0);
        d.volume_stats = vec![crate::stats::VolumeStats {
            fs: fs(5000, 9).unwrap(),
            name: "mem".into(),
            pvc_ref: None,
            local_ephemeral: false,
        }];
        let mut s = s;
        s.extend([c, d].map(|p| (p.pod_ref.uid.clone(), p)));
        pods.push(pod("tmpfs-heavy", None, None));
        pods.push(pod("volume-heavy", None, None));
        rank(&mut pods, Signal::NodeFsAvailable, &s, true);
        assert_eq!(names(&pods)[0], "volume-heavy");
        rank(&mut pods, Signal::ImageFsAvailable, &s, true);
        assert_eq!(names(&pods)[0], "layer-heavy");
    }

    #[test]
    fn critical_pods() {
        let mut p = pod("p", None, None);
        assert!(!is_critical(&p));
        p.spec.as_mut().unwrap().priority = Some(SYSTEM_CRITICAL_PRIORITY);
        assert!(is_critical(&p));
        let mut s = pod("s", None, None);
        s.metadata.annotations = Some(BTreeMap::from([(
            "kubernetes.io/config.source".into(),
            "file".into(),
        )]));
        assert!(is_critical(&s));
    }

    #[test]
    fn the_eviction_message_as_upstream_writes_it() {
        let t = Threshold {
            signal: Signal::MemoryAvailable,
            value: ThresholdValue::Quantity(100 * MI as i64, Written::BinarySI),
            grace_period: Duration::ZERO,
            min_reclaim: None,
        };
        let obs = Observations::from([(
            Signal::MemoryAvailable,
            Observation {
                available: 80 * MI as i64,
                capacity: 4096 * MI as i64,
                time: 0,
            },
        )]);
        let p = pod("hog", Some("64Mi"), None);
        let s = stats("hog", 300 * MI);
        let (message, annotations) = eviction_message(Resource::Memory, &p, Some(&s), &[t], &obs);
        assert_eq!(
            message,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. \
             Container c was using 300Mi, request is 64Mi, has larger consumption of memory. "
        );
        assert_eq!(annotations[OFFENDING_CONTAINERS_KEY], "c");
        assert_eq!(annotations[OFFENDING_CONTAINERS_USAGE_KEY], "300Mi");
        assert_eq!(annotations[STARVED_RESOURCE_KEY], "memory");
        // Within its request: named nowhere; a BestEffort one's request is 0.
        let (message, annotations) = eviction_message(
            Resource::Memory,
            &pod("ok", Some("1Gi"), None),
            Some(&stats("ok", MI)),
            &[t],
            &obs,
        );
        assert!(!message.contains("Container"), "{message}");
        assert_eq!(annotations[OFFENDING_CONTAINERS_KEY], "");
        let (message, _) = eviction_message(
            Resource::Memory,
            &pod("be", None, None),
            Some(&stats("be", 1000)),
            &[t],
            &obs,
        );
        assert!(
            message.ends_with(
                "Container c was using 1000, request is 0, has larger consumption of memory. "
            ),
            "{message}"
        );
        // No stats: the node part only, no annotations.
        let (message, annotations) = eviction_message(Resource::Memory, &p, None, &[t], &obs);
        assert_eq!(
            message,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. "
        );
        assert!(annotations.is_empty());
        // A quantity prints as it was written: 500M stays 500M.
        let decimal = Threshold {
            value: ThresholdValue::Quantity(500_000_000, Written::of("500M")),
            ..t
        };
        let (message, _) = eviction_message(Resource::Memory, &p, None, &[decimal], &obs);
        assert_eq!(
            message,
            "The node was low on resource: memory. Threshold quantity: 500M, available: 80Mi. "
        );
        // Percentages print as BinarySI; inode counts as DecimalSI.
        let inodes = Threshold {
            signal: Signal::NodeFsInodesFree,
            value: ThresholdValue::Percentage(0.05),
            ..t
        };
        let obs = Observations::from([(
            Signal::NodeFsInodesFree,
            Observation {
                available: 3000,
                capacity: 1_000_000,
                time: 0,
            },
        )]);
        let (message, _) = eviction_message(Resource::Inodes, &p, None, &[inodes], &obs);
        assert_eq!(
            message,
            "The node was low on resource: inodes. Threshold quantity: 50000, available: 3k. "
        );
    }
}
