//! Node object and status synthesis (upstream's nodestatus setters and
//! kubelet_node_status.go): labels, addresses, capacity and allocatable,
//! nodeInfo, conditions. Pure: the host's facts and the time come in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeFeatures, NodeRuntimeHandler, NodeRuntimeHandlerFeatures, NodeSpec, NodeStatus,
    NodeSwapStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::admission::{LABEL_OS, NODE_OS};
use crate::cgroups::node_allocatable;
use crate::eviction::{Pressure, Threshold, hard_eviction_reservation};
use crate::resources::{Amounts, to_quantities};
use crate::status::transition_time;

/// What the kubelet knows about its host, gathered once (and the images, on
/// each update).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFacts {
    pub node_name: String,
    pub hostname: String,
    pub node_ips: Vec<String>,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    pub architecture: String,
    pub cpu_cores: i64,
    pub memory_bytes: i64,
    /// SwapTotal: `nodeInfo.swap.capacity` when not 0 (NodeSwap).
    pub swap_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    /// The pre-allocated hugepages by resource name (`hugepages-2Mi`), in
    /// bytes: every page size the kernel offers, 0 where none are
    /// allocated (cAdvisor's machine info, /sys/kernel/mm/hugepages).
    pub hugepages: Amounts,
    pub max_pods: u32,
    pub kubelet_version: String,
    pub container_runtime_version: String,
    pub kubelet_port: i32,
    pub images: Vec<ContainerImage>,
    /// The attachable volumes pods use (unique names, sorted).
    pub volumes_in_use: Vec<String>,
    /// What allocatable keeps back: systemReserved plus kubeReserved
    /// (milli-CPUs, bytes).
    pub reserved: Amounts,
    /// The hard eviction thresholds (their memory and nodefs amounts are
    /// kept back too).
    pub eviction_hard: Vec<Threshold>,
    /// The runtime's handlers and features, as its CRI Status lists them.
    pub runtime_handlers: Vec<crate::runtime::RuntimeHandler>,
    pub runtime_features: Option<crate::runtime::RuntimeFeatures>,
    /// The device plugins' resources.
    pub extended: ExtendedResources,
}

/// The extended resources device plugins serve (upstream's GetCapacity):
/// each one's devices and its healthy ones, and those gone (reported at 0,
/// as upstream leaves them, so the scheduler still knows them for device
/// plugins' and stops placing pods needing them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExtendedResources {
    pub capacity: BTreeMap<String, i64>,
    pub allocatable: BTreeMap<String, i64>,
    pub removed: Vec<String>,
}

/// Why the node is not ready, if it is not (runtime, network, PLEG).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    pub errors: Vec<String>,
}

/// The labels upstream's kubelet sets on its Node, plus `--node-labels`.
/// The node's architecture in Kubernetes' spelling.
pub fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub fn node_labels(
    facts: &NodeFacts,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), facts.hostname.clone()),
        (LABEL_OS.to_owned(), NODE_OS.to_owned()),
        ("kubernetes.io/arch".to_owned(), facts.architecture.clone()),
        ("beta.kubernetes.io/os".to_owned(), NODE_OS.to_owned()),
        (
            "beta.kubernetes.io/arch".to_owned(),
            facts.architecture.clone(),
        ),
    ]);
    labels.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels
}

/// The Node to register (upstream's initialNode).
pub fn initial_node(
    facts: &NodeFacts,
    extra_labels: &BTreeMap<String, String>,
    taints: &[Taint],
    provider_id: Option<&str>,
) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(facts.node_name.clone()),
            labels: Some(node_labels(facts, extra_labels)),
            annotations: Some(BTreeMap::from([(
                "volumes.kubernetes.io/controller-managed-attach-detach".to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then(|| taints.to_vec()),
            provider_id: provider_id.map(str::to_owned),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The node's allocatable amounts (milli-CPUs, bytes, pods): capacity less
/// the reservations and the hard eviction thresholds.
pub fn allocatable(facts: &NodeFacts) -> Amounts {
    let mut capacity = Amounts::from([
        ("cpu".to_owned(), facts.cpu_cores * 1000),
        ("memory".to_owned(), facts.memory_bytes),
        ("pods".to_owned(), i64::from(facts.max_pods)),
        (
            "ephemeral-storage".to_owned(),
            facts.ephemeral_storage_bytes,
        ),
    ]);
    capacity.extend(facts.hugepages.clone());
    let eviction = hard_eviction_reservation(
        &facts.eviction_hard,
        facts.memory_bytes,
        facts.ephemeral_storage_bytes,
    );
    node_allocatable(&capacity, &[&facts.reserved, &eviction])
}

fn q(s: String) -> Quantity {
    Quantity(s)
}

fn condition(kind: &str, ok_status: &str, reason: &str, message: String) -> NodeCondition {
    NodeCondition {
        type_: kind.into(),
        status: ok_status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        ..Default::default()
    }
}

/// The node's addresses as it reports them: each IP as InternalIP, then
/// its host name as Hostname.
pub fn node_addresses(node_ips: &[String], hostname: &str) -> Vec<NodeAddress> {
    let mut addresses: Vec<NodeAddress> = node_ips
        .iter()
        .map(|ip| NodeAddress {
            type_: "InternalIP".into(),
            address: ip.clone(),
        })
        .collect();
    addresses.push(NodeAddress {
        type_: "Hostname".into(),
        address: hostname.to_owned(),
    });
    addresses
}

/// The node's status now. `previous` keeps condition transition times that
/// did not flip; every condition's heartbeat is `now`.
pub fn node_status(
    facts: &NodeFacts,
    readiness: &Readiness,
    pressure: &[Pressure],
    previous: Option<&NodeStatus>,
    now: &Time,
) -> NodeStatus {
    let mut capacity = BTreeMap::from([
        ("cpu".to_owned(), q(facts.cpu_cores.to_string())),
        (
            "memory".to_owned(),
            q(format!("{}Ki", facts.memory_bytes / 1024)),
        ),
        ("pods".to_owned(), q(facts.max_pods.to_string())),
        (
            "ephemeral-storage".to_owned(),
            q(format!("{}Ki", facts.ephemeral_storage_bytes / 1024)),
        ),
    ]);
    for (name, bytes) in &facts.hugepages {
        capacity.insert(name.clone(), q(crate::quantity::format_binary_si(*bytes)));
    }
    let mut allocatable = to_quantities(&allocatable(facts));
    let extended = &facts.extended;
    for (name, n) in &extended.capacity {
        capacity.insert(name.clone(), q(n.to_string()));
        let healthy = extended.allocatable.get(name).copied().unwrap_or(0);
        allocatable.insert(name.clone(), q(healthy.to_string()));
    }
    for name in &extended.removed {
        capacity.insert(name.clone(), q("0".into()));
        allocatable.insert(name.clone(), q("0".into()));
    }
    let addresses = node_addresses(&facts.node_ips, &facts.hostname);
    let ready = if readiness.errors.is_empty() {
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status".into(),
        )
    } else {
        condition(
            "Ready",
            "False",
            "KubeletNotReady",
            readiness.errors.join(", "),
        )
    };
    let mut conditions: Vec<NodeCondition> = [Pressure::Memory, Pressure::Disk, Pressure::Pid]
        .into_iter()
        .map(|p| {
            let c = pressure_condition(p, pressure.contains(&p));
            condition(c.kind, c.status, c.reason, c.message.into())
        })
        .collect();
    conditions.push(ready);
    for c in &mut conditions {
        c.last_heartbeat_time = Some(now.clone());
        let prev = previous
            .and_then(|p| p.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|p| p.type_ == c.type_));
        c.last_transition_time = Some(transition_time(
            prev.map(|p| (p.status.as_str(), p.last_transition_time.as_ref())),
            &c.status,
            now,
        ));
    }
    let mut images = facts.images.clone();
    images.sort_by_key(|i| std::cmp::Reverse(i.size_bytes.unwrap_or(0)));
    NodeStatus {
        addresses: Some(addresses),
        allocatable: Some(allocatable),
        capacity: Some(capacity),
        conditions: Some(conditions),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: facts.kubelet_port,
            }),
        }),
        images: Some(images),
        volumes_in_use: Some(facts.volumes_in_use.clone()),
        declared_features: Some(DECLARED_FEATURES.iter().map(|f| f.to_string()).collect()),
        // Upstream's RuntimeHandlers and NodeFeatures setters.
        runtime_handlers: (!facts.runtime_handlers.is_empty()).then(|| {
            facts
                .runtime_handlers
                .iter()
                .map(|h| NodeRuntimeHandler {
                    name: Some(h.name.clone()),
                    features: Some(NodeRuntimeHandlerFeatures {
                        recursive_read_only_mounts: Some(h.recursive_read_only_mounts),
                        user_namespaces: Some(h.user_namespaces),
                    }),
                })
                .collect()
        }),
        features: facts.runtime_features.map(|f| NodeFeatures {
            supplemental_groups_policy: Some(f.supplemental_groups_policy),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: facts.architecture.clone(),
            boot_id: facts.boot_id.clone(),
            container_runtime_version: facts.container_runtime_version.clone(),
            kernel_version: facts.kernel_version.clone(),
            kubelet_version: facts.kubelet_version.clone(),
            machine_id: facts.machine_id.clone(),
            operating_system: NODE_OS.into(),
            os_image: facts.os_image.clone(),
            system_uuid: facts.system_uuid.clone(),
            swap: (facts.swap_bytes != 0).then_some(NodeSwapStatus {
                capacity: Some(facts.swap_bytes),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The node features rkubelet declares (`status.declaredFeatures`, from
/// upstream's nodedeclaredfeatures registry): the API server refuses a pod
/// update, and the scheduler a pod, that needs a feature its node does
/// not declare. rkubelet resizes pod-level resources; it does not resize
/// non-sidecar init containers or memory-backed volumes, nor run the other
/// features of the registry, so it does not declare them.
pub const DECLARED_FEATURES: &[&str] = &["InPlacePodLevelResourcesVerticalScaling"];

/// Whether two statuses differ in anything but heartbeat times: an unchanged
/// status is only re-sent every nodeStatusReportFrequency.
pub fn status_changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(old) != strip(new)
}

/// The Ready condition's status ("True"/"False"), if any.
pub fn ready_status(status: &NodeStatus) -> Option<&str> {
    condition_status(status, "Ready")
}

fn condition_status<'a>(status: &'a NodeStatus, kind: &str) -> Option<&'a str> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.as_str())
}

/// A node condition's text: its status, reason and message, and the event
/// upstream's setters record when it turns so.
struct ConditionText {
    kind: &'static str,
    status: &'static str,
    reason: &'static str,
    message: &'static str,
    event: &'static str,
}

/// The Memory/Disk/PIDPressure condition as upstream's setters write it.
fn pressure_condition(p: Pressure, under: bool) -> ConditionText {
    let (reason, message, event) = match (p, under) {
        (Pressure::Memory, false) => (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "NodeHasSufficientMemory",
        ),
        (Pressure::Memory, true) => (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
        ),
        (Pressure::Disk, false) => (
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            "NodeHasNoDiskPressure",
        ),
        (Pressure::Disk, true) => (
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
            "NodeHasDiskPressure",
        ),
        (Pressure::Pid, false) => (
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            "NodeHasSufficientPID",
        ),
        (Pressure::Pid, true) => (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
        ),
    };
    ConditionText {
        kind: p.condition_type(),
        status: if under { "True" } else { "False" },
        reason,
        message,
        event,
    }
}

/// The events upstream's status setters record for what `new` reports
/// differently from `old` (None: the first status sent): NodeReady or
/// NodeNotReady, and NodeHas(In)SufficientMemory, NodeHas(No)DiskPressure,
/// NodeHas(In)SufficientPID. Each is told as "Node <name> status is now:
/// <event>".
pub fn condition_events(old: Option<&NodeStatus>, new: &NodeStatus) -> Vec<&'static str> {
    let changed = |kind: &str| {
        let is = condition_status(new, kind);
        is.is_some() && old.and_then(|o| condition_status(o, kind)) != is
    };
    let mut events: Vec<&'static str> = [Pressure::Memory, Pressure::Disk, Pressure::Pid]
        .into_iter()
        .filter(|p| changed(p.condition_type()))
        .map(|p| {
            pressure_condition(p, condition_status(new, p.condition_type()) == Some("True")).event
        })
        .collect();
    if changed("Ready") {
        events.push(if ready_status(new) == Some("True") {
            "NodeReady"
        } else {
            "NodeNotReady"
        });
    }
    events
}

/// Upstream's MaxNamesPerImageInNodeStatus.
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// An image the runtime holds, as the node status reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeImage {
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub size: i64,
}

/// The node's `status.images` (upstream's Images setter over the image
/// manager's list): the largest images first, at most `max` of them
/// (nodeStatusMaxImages; `None`: all), each named by its digests then its
/// tags, at most [`MAX_NAMES_PER_IMAGE`] names.
pub fn node_images(max: Option<usize>, mut images: Vec<RuntimeImage>) -> Vec<ContainerImage> {
    images.sort_by(|a, b| {
        b.size
            .cmp(&a.size)
            .then_with(|| a.repo_digests.cmp(&b.repo_digests))
    });
    images
        .into_iter()
        .take(max.unwrap_or(usize::MAX))
        .map(|i| ContainerImage {
            names: Some(
                i.repo_digests
                    .into_iter()
                    .chain(i.repo_tags)
                    .take(MAX_NAMES_PER_IMAGE)
                    .collect(),
            ),
            size_bytes: Some(i.size),
        })
        .collect()
}

/// The runtime's version as the node reports it (`containerRuntimeVersion`
/// after `<name>://`), read as upstream's kubelet reads it (kuberuntime's
/// newRuntimeVersion): a semantic version (three numbers, then an optional
/// `-pre.release` and `+build`) as written; else a generic one, its leading
/// dot-separated numbers (two or more) and nothing after them (Debian's
/// `1.6.20~ds1` is `1.6.20`); else `Unknown`.
pub fn runtime_version(raw: &str) -> String {
    let s = raw.trim_start();
    let s = s.strip_prefix('v').unwrap_or(s);
    // upstream's `^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)$`: numbers joined by
    // single dots, then anything.
    let b = s.as_bytes();
    let mut end = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if end == 0 {
        return "Unknown".into();
    }
    while b.get(end) == Some(&b'.') && b.get(end + 1).is_some_and(u8::is_ascii_digit) {
        end += 1 + b[end + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
    }
    let (numbers, extra) = s.split_at(end);
    let components: Vec<&str> = numbers.split('.').collect();
    if components.iter().any(|c| c.parse::<u64>().is_err()) {
        return "Unknown".into();
    }
    let leading_zero = |c: &str| c.len() > 1 && c.starts_with('0');
    let canonical: Vec<String> = components
        .iter()
        .map(|c| c.parse::<u64>().unwrap_or_default().to_string())
        .collect();
    let extra = extra.trim_end();
    if components.len() == 3
        && !components.iter().any(|c| leading_zero(c))
        && let Some((pre, build)) = semver_extra(extra)
    {
        let mut out = canonical.join(".");
        if !pre.is_empty() {
            out.push('-');
            out.push_str(pre);
        }
        if !build.is_empty() {
            out.push('+');
            out.push_str(build);
        }
        return out;
    }
    if components.len() < 2 || leading_zero(components[0]) {
        return "Unknown".into();
    }
    canonical.join(".")
}

/// A semantic version's `-pre.release+build` (either may be absent), or None.
fn semver_extra(extra: &str) -> Option<(&str, &str)> {
    let identifiers = |s: &str| {
        !s.is_empty()
            && s.split('.').all(|id| {
                !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            })
    };
    let (rest, build) = match extra.split_once('+') {
        Some((rest, build)) if identifiers(build) => (rest, build),
        Some(_) => return None,
        None => (extra, ""),
    };
    let pre = match rest.strip_prefix('-') {
        Some(pre) if identifiers(pre) => pre,
        Some(_) => return None,
        None if rest.is_empty() => "",
        None => return None,
    };
    let numeric_leading_zero = pre
        .split('.')
        .any(|id| id.len() > 1 && id.starts_with('0') && id.chars().all(|c| c.is_ascii_digit()));
    (!numeric_leading_zero).then_some((pre, build))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn facts() -> NodeFacts {
        NodeFacts {
            node_name: "node1".into(),
            hostname: "node1".into(),
            node_ips: vec!["192.0.2.10".into()],
            architecture: "amd64".into(),
            cpu_cores: 2,
            memory_bytes: 4 << 30,
            ephemeral_storage_bytes: 100 << 30,
            max_pods: 110,
            kubelet_version: "v1.37.2".into(),
            container_runtime_version: "containerd://1.6.20".into(),
            kubelet_port: 10250,
            eviction_hard: crate::eviction::parse_thresholds(
                &crate::eviction::default_eviction_hard(),
            )
            .unwrap(),
            ..Default::default()
        }
    }

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn images_largest_first_digests_then_tags_capped() {
        let img = |n: usize, size: i64| RuntimeImage {
            repo_tags: (0..n).map(|t| format!("r.test/i{size}:{t}")).collect(),
            repo_digests: vec![format!("r.test/i{size}@sha256:{size}")],
            size,
        };
        let got = node_images(
            Some(50),
            (1..=60).map(|s| img(2, s)).chain([img(9, 1000)]).collect(),
        );
        assert_eq!(got.len(), 50);
        assert_eq!(got[0].size_bytes, Some(1000));
        let names = got[0].names.as_ref().unwrap();
        assert_eq!(names.len(), MAX_NAMES_PER_IMAGE);
        assert_eq!(names[0], "r.test/i1000@sha256:1000", "digests first");
        assert_eq!(names[1], "r.test/i1000:0");
        assert_eq!(got[1].size_bytes, Some(60));
        assert_eq!(
            got.last().unwrap().size_bytes,
            Some(12),
            "the smallest left out"
        );
        // nodeStatusMaxImages: -1 (None) lists them all, 0 none
        let all: Vec<RuntimeImage> = (1..=60).map(|s| img(1, s)).collect();
        assert_eq!(node_images(None, all.clone()).len(), 60);
        assert!(node_images(Some(0), all).is_empty());
    }

    #[test]
    fn initial_node_carries_taints_and_provider_id() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let node = initial_node(
            &facts(),
            &BTreeMap::new(),
            std::slice::from_ref(&taint),
            Some("aws:///eu-west-1a/i-1"),
        );
        let spec = node.spec.unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("aws:///eu-west-1a/i-1"));
        assert_eq!(spec.taints, Some(vec![taint]));
        let bare = initial_node(&facts(), &BTreeMap::new(), &[], None)
            .spec
            .unwrap();
        assert_eq!((bare.provider_id, bare.taints), (None, None));
    }

    /// A device plugin's resource: all its devices in capacity, the
    /// healthy ones allocatable; a resource gone at 0 in both.
    #[test]
    fn device_plugins_resources_are_in_capacity_and_allocatable() {
        let with_devices = NodeFacts {
            extended: ExtendedResources {
                capacity: [("example.com/gpu".to_owned(), 4)].into(),
                allocatable: [("example.com/gpu".to_owned(), 3)].into(),
                removed: vec!["example.com/fpga".into()],
            },
            ..facts()
        };
        let s = node_status(&with_devices, &Readiness::default(), &[], None, &at(1));
        let (cap, alloc) = (s.capacity.unwrap(), s.allocatable.unwrap());
        assert_eq!(cap["example.com/gpu"].0, "4");
        assert_eq!(alloc["example.com/gpu"].0, "3");
        assert_eq!(cap["example.com/fpga"].0, "0");
        assert_eq!(alloc["example.com/fpga"].0, "0");
    }

    #[test]
    fn capacity_allocatable_and_labels() {
        let s = node_status(&facts(), &Readiness::default(), &[], None, &at(1));
        let cap = s.capacity.clone().unwrap();
        let alloc = s.allocatable.clone().unwrap();
        assert_eq!(cap["pods"].0, "110");
        assert_eq!(cap["memory"].0, format!("{}Ki", 4 * 1024 * 1024));
        assert_eq!(alloc["memory"].0, "3996Mi");
        // 10% is a float32 upstream: 100Gi less 10737418400, not 10Gi.
        assert_eq!(alloc["ephemeral-storage"].0, "96636764000");
        assert_eq!(alloc["cpu"].0, "2");
        // No swap, no nodeInfo.swap; with swap, its capacity (NodeSwap).
        assert_eq!(s.node_info.as_ref().unwrap().swap, None);
        let swapped = NodeFacts {
            swap_bytes: 2 << 30,
            ..facts()
        };
        let info = node_status(&swapped, &Readiness::default(), &[], None, &at(1)).node_info;
        assert_eq!(info.unwrap().swap.unwrap().capacity, Some(2 << 30));
        // With reservations: systemReserved and kubeReserved come off too.
        let reserved = NodeFacts {
            reserved: [("cpu".to_owned(), 500), ("memory".to_owned(), 1 << 30)].into(),
            ..facts()
        };
        let alloc = node_status(&reserved, &Readiness::default(), &[], None, &at(1))
            .allocatable
            .unwrap();
        assert_eq!(alloc["cpu"].0, "1500m");
        assert_eq!(alloc["memory"].0, "2972Mi");
        assert_eq!(alloc["pods"].0, "110");
        // Pre-allocated hugepages: in capacity and allocatable, kept out of
        // allocatable memory (upstream's MachineInfo setter).
        let huge = NodeFacts {
            hugepages: [
                ("hugepages-2Mi".to_owned(), 16 << 20),
                ("hugepages-1Gi".to_owned(), 0),
            ]
            .into(),
            ..facts()
        };
        let h = node_status(&huge, &Readiness::default(), &[], None, &at(1));
        let (cap, alloc) = (h.capacity.unwrap(), h.allocatable.unwrap());
        assert_eq!(
            (
                cap["hugepages-2Mi"].0.as_str(),
                cap["hugepages-1Gi"].0.as_str()
            ),
            ("16Mi", "0")
        );
        assert_eq!(alloc["hugepages-2Mi"].0, "16Mi");
        assert_eq!(alloc["memory"].0, "3980Mi");
        assert_eq!(
            s.declared_features.as_deref(),
            Some(&["InPlacePodLevelResourcesVerticalScaling".to_string()][..])
        );
        assert_eq!(ready_status(&s), Some("True"));
        let labels = node_labels(&facts(), &BTreeMap::from([("role".into(), "edge".into())]));
        assert_eq!(labels["kubernetes.io/hostname"], "node1");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["role"], "edge");
    }

    #[test]
    fn not_ready_names_the_reason_and_transitions_are_kept() {
        let not_ready = Readiness {
            errors: vec!["container runtime network not ready: NetworkReady=false".into()],
        };
        let s1 = node_status(&facts(), &not_ready, &[], None, &at(1));
        let ready = s1
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
        assert!(
            ready
                .message
                .as_deref()
                .unwrap()
                .contains("NetworkReady=false")
        );

        let s2 = node_status(&facts(), &not_ready, &[], Some(&s1), &at(10));
        assert!(!status_changed(&s1, &s2), "only heartbeats moved");
        let s3 = node_status(&facts(), &Readiness::default(), &[], Some(&s2), &at(20));
        assert!(status_changed(&s2, &s3));
        let get = |s: &NodeStatus, t: &str| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(get(&s3, "Ready"), Some(at(20)));
        assert_eq!(get(&s3, "MemoryPressure"), Some(at(1)));
    }

    #[test]
    fn pressure_conditions_and_their_events_as_upstream_sets_them() {
        let calm = node_status(&facts(), &Readiness::default(), &[], None, &at(1));
        assert_eq!(
            condition_events(None, &calm),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID",
                "NodeReady"
            ]
        );
        let pressed = node_status(
            &facts(),
            &Readiness::default(),
            &[Pressure::Memory, Pressure::Disk],
            Some(&calm),
            &at(5),
        );
        let cond = |s: &NodeStatus, t: &str| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .cloned()
                .unwrap()
        };
        let m = cond(&pressed, "MemoryPressure");
        assert_eq!(m.status, "True");
        assert_eq!(m.reason.as_deref(), Some("KubeletHasInsufficientMemory"));
        assert_eq!(
            m.message.as_deref(),
            Some("kubelet has insufficient memory available")
        );
        assert_eq!(m.last_transition_time, Some(at(5)));
        let d = cond(&pressed, "DiskPressure");
        assert_eq!(
            (d.status.as_str(), d.reason.as_deref()),
            ("True", Some("KubeletHasDiskPressure"))
        );
        assert_eq!(cond(&pressed, "PIDPressure").status, "False");
        assert!(status_changed(&calm, &pressed));
        assert_eq!(
            condition_events(Some(&calm), &pressed),
            ["NodeHasInsufficientMemory", "NodeHasDiskPressure"]
        );
        let back = node_status(&facts(), &Readiness::default(), &[], Some(&pressed), &at(9));
        assert_eq!(
            condition_events(Some(&pressed), &back),
            ["NodeHasSufficientMemory", "NodeHasNoDiskPressure"]
        );
        assert!(condition_events(Some(&back), &back).is_empty());
    }

    #[test]
    fn runtime_versions_read_as_upstream_reads_them() {
        for (raw, want) in [
            ("1.6.20", "1.6.20"),
            ("1.6.20~ds1", "1.6.20"),
            ("v2.1.4", "2.1.4"),
            ("2.0.0-rc.1+git.abc", "2.0.0-rc.1+git.abc"),
            ("1.7.0-beta.01", "1.7.0"),
            ("1.28", "1.28"),
            ("1.02.3", "1.2.3"),
            ("1.2.3.4-x", "1.2.3.4"),
            ("1.2..3", "1.2"),
            ("3", "Unknown"),
            ("01.2", "Unknown"),
            ("", "Unknown"),
            ("dev", "Unknown"),
        ] {
            assert_eq!(runtime_version(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn the_runtimes_handlers_and_features_are_reported_as_upstream() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let status = |facts: &NodeFacts| node_status(facts, &Readiness::default(), &[], None, &now);
        // containerd 1.6 lists neither: neither is reported.
        let old = status(&facts());
        assert_eq!((old.runtime_handlers, old.features), (None, None));
        let mut f = facts();
        f.runtime_handlers = vec![
            crate::runtime::RuntimeHandler {
                name: String::new(),
                recursive_read_only_mounts: true,
                user_namespaces: true,
            },
            crate::runtime::RuntimeHandler {
                name: "test-handler".into(),
                recursive_read_only_mounts: false,
                user_namespaces: false,
            },
        ];
        f.runtime_features = Some(crate::runtime::RuntimeFeatures {
            supplemental_groups_policy: true,
        });
        let new = serde_json::to_value(status(&f)).unwrap();
        assert_eq!(
            new["runtimeHandlers"],
            serde_json::json!([
                {"name": "", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": true}},
                {"name": "test-handler", "features": {"recursiveReadOnlyMounts": false, "userNamespaces": false}},
            ])
        );
        assert_eq!(
            new["features"],
            serde_json::json!({"supplementalGroupsPolicy": true})
        );
    }
}
