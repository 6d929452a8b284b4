//! Pod admission (upstream's lifecycle/predicate.go): before a pod from the
//! API server starts, check it fits this node — pod count, cpu and memory
//! requests against allocatable, extended resources (device plugins')
//! against the node's, node name, node selector and required node
//! affinity, host ports already taken, NoExecute taints, and first of all
//! the pod's OS. A pod that does not fit is rejected with upstream's reason
//! (PodOSNotSupported, OutOfpods, OutOfcpu, OutOfmemory, OutOf<resource>,
//! NodeAffinity, NodePorts, ...) and never started.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerPort, Node, NodeSelector, NodeSelectorRequirement, Pod, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::devices::is_extended_resource_name;
use crate::eviction::Pressure;
use crate::eviction::rank::is_critical;
use crate::qos::qos_class;
use crate::quantity::{parse_bytes, parse_cpu_millis};
use crate::resources;
use crate::types::Rejection;

/// What admission needs to know about the node.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable_cpu_millis: i64,
    pub allocatable_memory_bytes: i64,
    pub max_pods: u32,
    /// The runtime supports supplementalGroupsPolicy (the Node's
    /// `status.features`; containerd 1.6 does not say so).
    pub supplemental_groups_policy: bool,
    /// The node's allocatable extended resources (device plugins', and
    /// those others advertise on the Node).
    pub extended_allocatable: BTreeMap<String, i64>,
}

impl NodeInfo {
    /// The node as the API server has it now (its labels, taints and
    /// allocatable, whoever set them), over `known` (what the kubelet
    /// registered) for what the object does not say.
    pub fn from_node(node: &Node, known: &NodeInfo) -> NodeInfo {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let quantity = |name: &str| allocatable.and_then(|a| a.get(name));
        NodeInfo {
            name: node
                .metadata
                .name
                .clone()
                .unwrap_or_else(|| known.name.clone()),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default(),
            allocatable_cpu_millis: quantity("cpu")
                .and_then(|q| parse_cpu_millis(q).ok())
                .unwrap_or(known.allocatable_cpu_millis),
            allocatable_memory_bytes: quantity("memory")
                .and_then(|q| parse_bytes(q).ok())
                .unwrap_or(known.allocatable_memory_bytes),
            max_pods: quantity("pods")
                .and_then(|q| q.0.parse().ok())
                .unwrap_or(known.max_pods),
            supplemental_groups_policy: node
                .status
                .as_ref()
                .and_then(|s| s.features.as_ref())
                .and_then(|f| f.supplemental_groups_policy)
                .unwrap_or(known.supplemental_groups_policy),
            extended_allocatable: match allocatable {
                Some(a) => a
                    .iter()
                    .filter(|(name, _)| is_extended_resource_name(name))
                    .filter_map(|(name, q)| Some((name.clone(), parse_bytes(q).ok()?)))
                    .collect(),
                None => known.extended_allocatable.clone(),
            },
        }
    }
}

fn reject(reason: &str, message: String) -> Result<(), Rejection> {
    Err(Rejection {
        reason: reason.into(),
        message,
    })
}

/// The pod's cpu (millicores) and memory (bytes) requests, as the scheduler
/// counts them (component-helpers' PodRequests, see [`crate::resources`]).
pub fn pod_requests(pod: &Pod) -> (i64, i64) {
    let reqs = resources::pod_requests(pod);
    let get = |k: &str| reqs.get(k).copied().unwrap_or(0);
    (get("cpu"), get("memory"))
}

fn requirement_matches(req: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    operator_matches(&req.key, &req.operator, req.values.as_deref(), labels)
}

/// Whether `labels` match a label selector (upstream's
/// LabelSelectorAsSelector): None matches nothing, an empty one everything.
pub fn label_selector_matches(
    sel: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(sel) = sel else {
        return false;
    };
    sel.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && sel
            .match_expressions
            .iter()
            .flatten()
            .all(|r| operator_matches(&r.key, &r.operator, r.values.as_deref(), labels))
}

fn operator_matches(
    key: &str,
    operator: &str,
    values: Option<&[String]>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let value = labels.get(key);
    let values = values.unwrap_or(&[]);
    match operator {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

fn matches_node_affinity(pod: &Pod, node: &NodeInfo) -> bool {
    let Some(spec) = &pod.spec else {
        return true;
    };
    if let Some(selector) = &spec.node_selector
        && !selector.iter().all(|(k, v)| node.labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    required.is_none_or(|sel| node_selector_matches(sel, &node.name, &node.labels))
}

/// Whether the node `name` with `labels` is one `selector` selects (a pod's
/// required node affinity, a PersistentVolume's): its terms are ORed, the
/// expressions of a term ANDed.
pub fn node_selector_matches(
    selector: &NodeSelector,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
        let fields = term.match_fields.as_deref().unwrap_or(&[]);
        (!exprs.is_empty() || !fields.is_empty())
            && exprs.iter().all(|r| requirement_matches(r, labels))
            && fields.iter().all(|r| {
                let name = BTreeMap::from([("metadata.name".to_owned(), name.to_owned())]);
                requirement_matches(r, &name)
            })
    })
}

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key_ok = t
            .key
            .as_deref()
            .is_none_or(|k| k.is_empty() || k == taint.key);
        let value_ok = match t.operator.as_deref() {
            Some("Exists") => true,
            _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        };
        effect_ok
            && key_ok
            && value_ok
            && (t.key.is_some() || t.operator.as_deref() == Some("Exists"))
    })
}

/// The operating system this kubelet runs pods for (upstream's runtime.GOOS).
pub const NODE_OS: &str = "linux";
/// The well-known OS label (v1.LabelOSStable).
pub const LABEL_OS: &str = "kubernetes.io/os";

/// Upstream's OS checks, made before any other because no preemption can
/// help them: the pod's `kubernetes.io/os` label (a pod label, as upstream
/// reads it) and its `spec.os.name` must name this node's OS.
fn admit_os(pod: &Pod) -> Result<(), Rejection> {
    let label = pod.metadata.labels.as_ref().and_then(|l| l.get(LABEL_OS));
    if label.is_some_and(|os| os != NODE_OS) {
        return reject(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label".into(),
        );
    }
    let os = pod.spec.as_ref().and_then(|s| s.os.as_ref());
    if os.is_some_and(|os| os.name != NODE_OS) {
        return reject(
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS".into(),
        );
    }
    Ok(())
}

/// The eviction manager's admission (its Admit): under pressure no pod
/// starts but a critical one, except that under memory pressure alone a
/// pod that is not BestEffort, or one tolerating the memory-pressure
/// taint, still does. `pressure` is the node's, in condition order.
pub fn admit_under_pressure(pod: &Pod, pressure: &[Pressure]) -> Result<(), Rejection> {
    if pressure.is_empty() || is_critical(pod) {
        return Ok(());
    }
    if pressure == [Pressure::Memory] {
        let memory_pressure = Taint {
            key: "node.kubernetes.io/memory-pressure".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default();
        if qos_class(pod) != "BestEffort" || tolerates(tolerations, &memory_pressure) {
            return Ok(());
        }
    }
    let conditions: Vec<&str> = pressure.iter().map(|p| p.condition_type()).collect();
    reject(
        crate::eviction::rank::REASON,
        format!("The node had condition: [{}]. ", conditions.join(" ")),
    )
}

/// Whether `pod` may start next to `active` (the pods admitted and not yet
/// terminal on this node).
pub fn admit(pod: &Pod, node: &NodeInfo, active: &[&Pod]) -> Result<(), Rejection> {
    admit_os(pod)?;
    let strict = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.supplemental_groups_policy.as_deref())
        == Some("Strict");
    if strict && !node.supplemental_groups_policy {
        return reject(
            "SupplementalGroupsPolicyNotSupported",
            "SupplementalGroupsPolicy=Strict is not supported in this node".into(),
        );
    }
    let spec_node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    if !spec_node.is_empty() && spec_node != node.name {
        return reject(
            "NodeName",
            format!(
                "Predicate NodeName failed: node {spec_node:?} is not {:?}",
                node.name
            ),
        );
    }
    let used = active.len() as i64;
    if used + 1 > i64::from(node.max_pods) {
        return reject(
            "OutOfpods",
            format!(
                "Node didn't have enough resource: pods, requested: 1, used: {used}, capacity: {}",
                node.max_pods
            ),
        );
    }
    let (cpu, mem) = pod_requests(pod);
    let (used_cpu, used_mem) = active
        .iter()
        .map(|p| pod_requests(p))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    for (name, requested, used, capacity) in [
        ("cpu", cpu, used_cpu, node.allocatable_cpu_millis),
        ("memory", mem, used_mem, node.allocatable_memory_bytes),
    ] {
        if requested > 0 && requested + used > capacity {
            return reject(
                &format!("OutOf{name}"),
                format!(
                    "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            );
        }
    }
    // Extended resources the node does not have are left to whoever
    // advertises them elsewhere (upstream's removeMissingExtendedResources).
    let requests = resources::pod_requests(pod);
    for (name, &requested) in &requests {
        let Some(&capacity) = node.extended_allocatable.get(name) else {
            continue;
        };
        if requested == 0 || !is_extended_resource_name(name) {
            continue;
        }
        let used: i64 = active
            .iter()
            .map(|p| resources::pod_requests(p).get(name).copied().unwrap_or(0))
            .sum();
        if requested + used > capacity {
            return reject(
                &format!("OutOf{name}"),
                format!(
                    "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            );
        }
    }
    if !matches_node_affinity(pod, node) {
        return reject(
            "NodeAffinity",
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
                .into(),
        );
    }
    let in_use: Vec<HostPort> = active.iter().flat_map(|p| host_ports(p)).collect();
    if host_ports(pod).iter().any(|want| want.conflicts(&in_use)) {
        return reject(
            "NodePorts",
            "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
                .into(),
        );
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[]);
    if let Some(t) = node
        .taints
        .iter()
        .find(|t| t.effect == "NoExecute" && !tolerates(tolerations, t))
    {
        return reject(
            "TaintToleration",
            format!(
                "Predicate TaintToleration failed: node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or("")
            ),
        );
    }
    Ok(())
}

/// A host port a pod takes (upstream's HostPortInfo entry): an empty host
/// IP is every address, an empty protocol TCP.
#[derive(Clone, Debug, PartialEq)]
struct HostPort {
    ip: String,
    protocol: String,
    port: i32,
}

const ALL_ADDRESSES: &str = "0.0.0.0";

impl HostPort {
    fn of(p: &ContainerPort) -> Option<HostPort> {
        let port = p.host_port.filter(|&port| port > 0)?;
        let ip = p.host_ip.as_deref().filter(|ip| !ip.is_empty());
        let protocol = p.protocol.as_deref().filter(|p| !p.is_empty());
        Some(HostPort {
            ip: ip.unwrap_or(ALL_ADDRESSES).to_owned(),
            protocol: protocol.unwrap_or("TCP").to_owned(),
            port,
        })
    }

    /// Upstream's CheckConflict: every address conflicts with any address
    /// on the same protocol and port; another address only with itself and
    /// every address.
    fn conflicts(&self, in_use: &[HostPort]) -> bool {
        in_use.iter().any(|u| {
            u.protocol == self.protocol
                && u.port == self.port
                && (self.ip == ALL_ADDRESSES || u.ip == ALL_ADDRESSES || u.ip == self.ip)
        })
    }
}

/// The host ports a pod holds while it runs (upstream's GetHostPorts): its
/// containers' and its sidecars' (restartable init containers), not those of
/// the init containers that end before the others start.
fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    sidecars
        .chain(&spec.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(HostPort::of)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{PodBuilder, container, resources};
    use k8s_openapi::api::core::v1::{
        Affinity, Container, NodeAffinity, NodeSelector, NodeSelectorTerm, PodOS, PodSpec,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node() -> NodeInfo {
        NodeInfo {
            name: "node1".into(),
            labels: BTreeMap::from([("zone".into(), "a".into()), ("rank".into(), "5".into())]),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: Some("infra".into()),
                effect: "NoExecute".into(),
                time_added: None,
            }],
            allocatable_cpu_millis: 2000,
            allocatable_memory_bytes: 1 << 30,
            max_pods: 3,
            supplemental_groups_policy: false,
            extended_allocatable: BTreeMap::from([("example.com/gpu".into(), 2)]),
        }
    }

    /// `p` with its first container's limit of `n` of `resource`.
    fn extended(p: Pod, resource: &str, n: &str) -> Pod {
        with(p, |s| {
            let r = s.containers[0].resources.get_or_insert_default();
            r.limits
                .get_or_insert_default()
                .insert(resource.into(), Quantity(n.into()));
        })
    }

    #[test]
    fn pod_requests_count_sidecars_init_containers_and_overhead() {
        let c = |name: &str, cpu: &str, sidecar: bool| Container {
            name: name.into(),
            restart_policy: sidecar.then(|| "Always".into()),
            ..pod(cpu, "").spec.unwrap().containers.remove(0)
        };
        let spec = |containers, inits, overhead: Option<&str>| {
            PodBuilder::default()
                .containers(containers)
                .init_containers(inits)
                .with_spec(|s| {
                    s.overhead =
                        overhead.map(|o| BTreeMap::from([("cpu".into(), Quantity(o.into()))]));
                })
                .build()
        };
        let cases = [
            (
                "containers sum",
                spec(
                    vec![c("a", "100m", false), c("b", "200m", false)],
                    vec![],
                    None,
                ),
                300,
            ),
            (
                "a bigger init container wins",
                spec(
                    vec![c("a", "100m", false)],
                    vec![c("i", "500m", false)],
                    None,
                ),
                500,
            ),
            (
                "sidecars add to the containers",
                spec(vec![c("a", "100m", false)], vec![c("s", "50m", true)], None),
                150,
            ),
            (
                "an init container after a sidecar runs beside it",
                spec(
                    vec![c("a", "100m", false)],
                    vec![c("s", "50m", true), c("i", "400m", false)],
                    None,
                ),
                450,
            ),
            (
                "an init container before the sidecar runs alone",
                spec(
                    vec![c("a", "100m", false)],
                    vec![c("i", "400m", false), c("s", "50m", true)],
                    None,
                ),
                400,
            ),
            (
                "overhead is added",
                spec(vec![c("a", "100m", false)], vec![], Some("250m")),
                350,
            ),
        ];
        for (what, p, cpu) in cases {
            assert_eq!(pod_requests(&p).0, cpu, "{what}");
        }
    }

    #[test]
    fn the_live_node_wins_over_what_was_registered() {
        use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
        let live = Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("node1".into()),
                labels: Some(BTreeMap::from([("added".into(), "later".into())])),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: "maintenance".into(),
                    effect: "NoExecute".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".into(), Quantity("1500m".into())),
                    ("memory".into(), Quantity("512Mi".into())),
                    ("pods".into(), Quantity("7".into())),
                ])),
                ..Default::default()
            }),
        };
        let n = NodeInfo::from_node(&live, &node());
        assert_eq!(n.labels, BTreeMap::from([("added".into(), "later".into())]));
        assert_eq!(n.taints.len(), 1);
        assert_eq!(n.taints[0].key, "maintenance");
        assert_eq!(
            (
                n.allocatable_cpu_millis,
                n.allocatable_memory_bytes,
                n.max_pods
            ),
            (1500, 512 << 20, 7)
        );
        // A taint added through the API refuses a pod that does not tolerate it.
        let r = admit(&pod("", ""), &n, &[]).unwrap_err();
        assert_eq!(r.reason, "TaintToleration", "{r:?}");

        // What the object does not say comes from what was registered.
        let bare = Node {
            metadata: live.metadata.clone(),
            ..Default::default()
        };
        let n = NodeInfo::from_node(&bare, &node());
        assert!(n.taints.is_empty());
        assert_eq!(
            (
                n.allocatable_cpu_millis,
                n.allocatable_memory_bytes,
                n.max_pods
            ),
            (2000, 1 << 30, 3)
        );
    }

    fn pod(cpu: &str, mem: &str) -> Pod {
        let requests: Vec<_> = [("cpu", cpu), ("memory", mem)]
            .into_iter()
            .filter(|(_, q)| !q.is_empty())
            .collect();
        PodBuilder::default()
            .node_name("node1")
            .container(Container {
                resources: Some(resources(&requests, &[])),
                ..container("c")
            })
            .with_spec(|s| {
                s.tolerations = Some(vec![Toleration {
                    key: Some("dedicated".into()),
                    operator: Some("Equal".into()),
                    value: Some("infra".into()),
                    effect: Some("NoExecute".into()),
                    ..Default::default()
                }]);
            })
            .build()
    }

    /// A container's ports: one taking a host port (0: a container port
    /// only).
    fn ports(ip: &str, protocol: &str, port: i32) -> Option<Vec<ContainerPort>> {
        Some(vec![ContainerPort {
            container_port: 80,
            host_port: Some(port).filter(|&p| p > 0),
            host_ip: Some(ip.to_owned()).filter(|ip| !ip.is_empty()),
            protocol: Some(protocol.to_owned()).filter(|p| !p.is_empty()),
            ..Default::default()
        }])
    }

    /// `p` with its first container taking a host port.
    fn host_port(p: Pod, ip: &str, protocol: &str, port: i32) -> Pod {
        with(p, |s| s.containers[0].ports = ports(ip, protocol, port))
    }

    fn with(mut p: Pod, f: impl FnOnce(&mut PodSpec)) -> Pod {
        f(p.spec.as_mut().unwrap());
        p
    }

    fn os(name: &str) -> Option<PodOS> {
        Some(PodOS { name: name.into() })
    }

    fn os_label(mut p: Pod, os: &str) -> Pod {
        p.metadata.labels = Some(BTreeMap::from([(LABEL_OS.to_owned(), os.to_owned())]));
        p
    }

    fn affinity(op: &str, key: &str, values: &[&str]) -> Option<Affinity> {
        Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: key.into(),
                            operator: op.into(),
                            values: Some(values.iter().map(|v| v.to_string()).collect()),
                        }]),
                        match_fields: None,
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn table() {
        let small = pod("500m", "100Mi");
        let cases: Vec<(&str, Pod, Vec<Pod>, Option<&str>)> = vec![
            ("fits", small.clone(), vec![], None),
            (
                "cpu over allocatable",
                pod("2500m", ""),
                vec![],
                Some("OutOfcpu"),
            ),
            (
                "cpu over with others",
                pod("1", ""),
                vec![pod("1500m", "")],
                Some("OutOfcpu"),
            ),
            ("memory", pod("", "2Gi"), vec![], Some("OutOfmemory")),
            (
                "a device plugin's resource within allocatable",
                extended(small.clone(), "example.com/gpu", "1"),
                vec![extended(small.clone(), "example.com/gpu", "1")],
                None,
            ),
            (
                "a device plugin's resource over allocatable",
                extended(small.clone(), "example.com/gpu", "2"),
                vec![extended(small.clone(), "example.com/gpu", "1")],
                Some("OutOfexample.com/gpu"),
            ),
            (
                "an extended resource the node does not have is left alone",
                extended(small.clone(), "example.com/fpga", "5"),
                vec![],
                None,
            ),
            (
                "strict supplemental groups on a runtime without them",
                with(small.clone(), |s| {
                    s.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
                        supplemental_groups_policy: Some("Strict".into()),
                        ..Default::default()
                    })
                }),
                vec![],
                Some("SupplementalGroupsPolicyNotSupported"),
            ),
            (
                "merged supplemental groups",
                with(small.clone(), |s| {
                    s.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
                        supplemental_groups_policy: Some("Merge".into()),
                        ..Default::default()
                    })
                }),
                vec![],
                None,
            ),
            (
                "pods",
                small.clone(),
                vec![small.clone(), small.clone(), small.clone()],
                Some("OutOfpods"),
            ),
            (
                "other node",
                with(small.clone(), |s| s.node_name = Some("node2".into())),
                vec![],
                Some("NodeName"),
            ),
            (
                "selector matches",
                with(small.clone(), |s| {
                    s.node_selector = Some(BTreeMap::from([("zone".into(), "a".into())]))
                }),
                vec![],
                None,
            ),
            (
                "selector does not match",
                with(small.clone(), |s| {
                    s.node_selector = Some(BTreeMap::from([("zone".into(), "b".into())]))
                }),
                vec![],
                Some("NodeAffinity"),
            ),
            (
                "affinity In",
                with(small.clone(), |s| {
                    s.affinity = affinity("In", "zone", &["a", "b"])
                }),
                vec![],
                None,
            ),
            (
                "affinity NotIn",
                with(small.clone(), |s| {
                    s.affinity = affinity("NotIn", "zone", &["a"])
                }),
                vec![],
                Some("NodeAffinity"),
            ),
            (
                "affinity Gt",
                with(small.clone(), |s| {
                    s.affinity = affinity("Gt", "rank", &["3"])
                }),
                vec![],
                None,
            ),
            (
                "host port taken on every address",
                host_port(small.clone(), "", "", 8080),
                vec![host_port(small.clone(), "", "", 8080)],
                Some("NodePorts"),
            ),
            (
                "host port taken on one address, asked on every one",
                host_port(small.clone(), "", "TCP", 8080),
                vec![host_port(small.clone(), "10.0.0.5", "TCP", 8080)],
                Some("NodePorts"),
            ),
            (
                "host port taken on every address, asked on one",
                host_port(small.clone(), "10.0.0.5", "TCP", 8080),
                vec![host_port(small.clone(), "0.0.0.0", "", 8080)],
                Some("NodePorts"),
            ),
            (
                "host port on another address",
                host_port(small.clone(), "10.0.0.5", "TCP", 8080),
                vec![host_port(small.clone(), "10.0.0.6", "TCP", 8080)],
                None,
            ),
            (
                "host port on another protocol",
                host_port(small.clone(), "", "UDP", 8080),
                vec![host_port(small.clone(), "", "TCP", 8080)],
                None,
            ),
            (
                "host port taken by a sidecar",
                host_port(small.clone(), "", "", 8080),
                vec![with(small.clone(), |s| {
                    s.init_containers = Some(vec![Container {
                        restart_policy: Some("Always".into()),
                        ports: ports("", "", 8080),
                        ..Default::default()
                    }])
                })],
                Some("NodePorts"),
            ),
            (
                "the port of an init container that has ended is free",
                host_port(small.clone(), "", "", 8080),
                vec![with(small.clone(), |s| {
                    s.init_containers = Some(vec![Container {
                        ports: ports("", "", 8080),
                        ..Default::default()
                    }])
                })],
                None,
            ),
            (
                "a container port without a host port",
                host_port(small.clone(), "", "", 0),
                vec![host_port(small.clone(), "", "", 0)],
                None,
            ),
            (
                "untolerated NoExecute taint",
                with(small.clone(), |s| s.tolerations = None),
                vec![],
                Some("TaintToleration"),
            ),
            (
                "spec.os linux",
                with(small.clone(), |s| s.os = os("linux")),
                vec![],
                None,
            ),
            (
                "spec.os windows",
                with(small.clone(), |s| s.os = os("windows")),
                vec![],
                Some("PodOSNotSupported"),
            ),
            (
                "the OS comes before every other check",
                with(pod("2500m", ""), |s| {
                    s.os = os("windows");
                    s.node_name = Some("node2".into());
                }),
                vec![],
                Some("PodOSNotSupported"),
            ),
            (
                "os label linux",
                os_label(small.clone(), "linux"),
                vec![],
                None,
            ),
            (
                "os label windows",
                os_label(with(small.clone(), |s| s.os = os("windows")), "windows"),
                vec![],
                Some("PodOSSelectorNodeLabelDoesNotMatch"),
            ),
        ];
        let n = node();
        for (name, p, active, want) in cases {
            let active: Vec<&Pod> = active.iter().collect();
            let got = admit(&p, &n, &active).err().map(|r| r.reason);
            assert_eq!(got.as_deref(), want, "{name}");
        }
        let msg = admit(&with(small.clone(), |s| s.os = os("windows")), &n, &[])
            .unwrap_err()
            .message;
        assert_eq!(
            msg,
            "Failed to admit pod as the OS field doesn't match node OS"
        );
        let taken = host_port(small.clone(), "", "", 21017);
        assert_eq!(
            admit(&taken, &n, &[&taken]).unwrap_err().message,
            "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
        );
        let rejection = admit(&pod("2500m", ""), &n, &[]).unwrap_err();
        assert_eq!(
            rejection.message,
            "Node didn't have enough resource: cpu, requested: 2500, used: 0, capacity: 2000"
        );
        assert_eq!(
            rejection.status_message(),
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 2500, used: 0, capacity: 2000"
        );
    }

    #[test]
    fn label_selectors_match_as_upstream_reads_them() {
        let labels = BTreeMap::from([("a".to_owned(), "1".to_owned())]);
        let expr = |op: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "a".into(),
                    operator: op.into(),
                    values: Some(values.iter().map(|v| v.to_string()).collect()),
                },
            ]),
            ..Default::default()
        };
        let by_label = |k: &str, v: &str| LabelSelector {
            match_labels: Some(BTreeMap::from([(k.to_owned(), v.to_owned())])),
            ..Default::default()
        };
        let cases = [
            (None, false),
            (Some(LabelSelector::default()), true),
            (Some(by_label("a", "1")), true),
            (Some(by_label("a", "2")), false),
            (Some(expr("In", &["1", "2"])), true),
            (Some(expr("NotIn", &["1"])), false),
            (Some(expr("Exists", &[])), true),
            (Some(expr("DoesNotExist", &[])), false),
        ];
        for (i, (sel, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                label_selector_matches(sel.as_ref(), &labels),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn pressure_refuses_as_the_eviction_manager_admits() {
        let mk = |requests: bool, tolerations: Vec<Toleration>, priority: Option<i32>| {
            PodBuilder::default()
                .with_spec(|s| {
                    s.priority = priority;
                    s.tolerations = Some(tolerations);
                })
                .container(Container {
                    resources: requests.then(|| resources(&[("memory", "64Mi")], &[])),
                    ..container("c")
                })
                .build()
        };
        let besteffort = mk(false, vec![], None);
        let burstable = mk(true, vec![], None);
        let tolerating = mk(
            false,
            vec![Toleration {
                key: Some("node.kubernetes.io/memory-pressure".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }],
            None,
        );
        let critical = mk(false, vec![], Some(2_000_000_000));
        let memory = [Pressure::Memory];
        let both = [Pressure::Memory, Pressure::Disk];
        for (pod, pressure, admitted) in [
            (&besteffort, &[][..], true),
            (&besteffort, &memory[..], false),
            (&burstable, &memory[..], true),
            (&tolerating, &memory[..], true),
            (&critical, &memory[..], true),
            (&burstable, &both[..], false),
            (&tolerating, &both[..], false),
            (&critical, &both[..], true),
        ] {
            assert_eq!(
                admit_under_pressure(pod, pressure).is_ok(),
                admitted,
                "{pressure:?}"
            );
        }
        let r = admit_under_pressure(&burstable, &both).unwrap_err();
        assert_eq!(r.reason, "Evicted");
        assert_eq!(
            r.message,
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
        let r = admit_under_pressure(&besteffort, &memory).unwrap_err();
        assert_eq!(r.message, "The node had condition: [MemoryPressure]. ");
    }
}
