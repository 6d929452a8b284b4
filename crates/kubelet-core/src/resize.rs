//! In-place pod resize (InPlacePodVerticalScaling and
//! InPlacePodLevelResourcesVerticalScaling, upstream's allocation manager
//! and computePodResizeAction). Three records of a pod's container and
//! pod-level resources: the spec's (desired, changed through the `resize`
//! subresource), the allocation (what the kubelet admitted; a resize that
//! does not fit next to the other pods waits, `PodResizePending`), and the
//! actuated (what the runtime and the pod cgroup were last given; while it
//! differs from the allocation, `PodResizeInProgress`). Running containers
//! are brought to their allocation through UpdateContainerResources, or
//! restarted when their `resizePolicy` says `RestartContainer` for a
//! resource that changed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus as ApiContainerStatus, Pod, PodCondition, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::actions::{ContainerUpdate, PodActions};
use crate::cgroups::{
    MIN_SHARES, PodCgroupPolicy, pod_resource_config, quota_to_milli_cpu, shares_to_milli_cpu,
};
use crate::podspec::{ContainerKind, init_containers, is_sidecar, regular_containers};
use crate::quantity::{format_binary_si, format_milli, parse_bytes, parse_cpu_millis};
use crate::resources::{pod_quantities, pod_requests};
use crate::runtime::{ContainerState, PodStatus};

/// The pod condition while a resize waits to be admitted.
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
/// The pod condition while an admitted resize is not yet applied.
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";
/// PodResizePending's reason when the resize may fit later.
pub const REASON_DEFERRED: &str = "Deferred";
/// PodResizePending's reason when the node can never apply it.
pub const REASON_INFEASIBLE: &str = "Infeasible";
/// PodResizeInProgress's reason when applying it failed.
pub const REASON_ERROR: &str = "Error";

/// A pod's resources as a resize sees them (upstream's PodResourceInfo,
/// serialized as upstream's checkpoints write it).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Allocation {
    /// Each container's resources by name: init and regular containers
    /// (upstream writes `null` for a pod it has only pod-level resources of).
    #[serde(
        rename = "ContainerResources",
        default,
        deserialize_with = "null_as_empty"
    )]
    pub containers: BTreeMap<String, ResourceRequirements>,
    /// The pod-level resources (`spec.resources`).
    #[serde(rename = "PodLevelResources", default)]
    pub pod: Option<ResourceRequirements>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, ResourceRequirements>, D::Error> {
    let map: Option<BTreeMap<String, ResourceRequirements>> = serde::Deserialize::deserialize(d)?;
    Ok(map.unwrap_or_default())
}

/// The allocated or actuated resources of every pod by UID, as upstream's
/// `allocated_pods_state` and `actuated_pods_state` checkpoints hold them
/// (PodResourceCheckpointInfo).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AllocationCheckpoint {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub entries: BTreeMap<String, Allocation>,
}

/// The file upstream's allocation manager checkpoints allocations in,
/// under the root directory.
pub const ALLOCATED_PODS_STATE: &str = "allocated_pods_state";
/// The file upstream's runtime manager checkpoints what it actuated in.
pub const ACTUATED_PODS_STATE: &str = "actuated_pods_state";

impl Allocation {
    /// The named container's resources.
    pub fn container(&self, name: &str) -> Option<&ResourceRequirements> {
        self.containers.get(name)
    }
}

/// The pod's resources as its spec gives them.
pub fn allocation_of(pod: &Pod) -> Allocation {
    Allocation {
        containers: init_containers(pod)
            .iter()
            .chain(regular_containers(pod))
            .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
            .collect(),
        pod: pod.spec.as_ref().and_then(|s| s.resources.clone()),
    }
}

/// The pod with its containers' and pod-level resources replaced by
/// `allocation`'s (UpdatePodFromAllocation); None when they are the same
/// already.
pub fn with_allocation(pod: &Pod, allocation: &Allocation) -> Option<Pod> {
    if allocation_of(pod) == *allocation {
        return None;
    }
    let mut out = pod.clone();
    let spec = out.spec.as_mut()?;
    spec.resources.clone_from(&allocation.pod);
    let lists = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    for c in lists {
        if let Some(r) = allocation.container(&c.name) {
            c.resources = Some(r.clone()).filter(|r| *r != ResourceRequirements::default());
        }
    }
    Some(out)
}

/// A container's four resize-relevant values (containerResourcesFromRequirements):
/// milli-CPUs and bytes, 0 when not given. A limit the container does not
/// set is the pod-level one (GetLimits), as the container is given it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceValues {
    pub cpu_request: i64,
    pub cpu_limit: i64,
    pub memory_request: i64,
    pub memory_limit: i64,
}

impl ResourceValues {
    pub fn of(
        r: Option<&ResourceRequirements>,
        pod_level: Option<&ResourceRequirements>,
    ) -> ResourceValues {
        let get = |r: Option<&ResourceRequirements>, limits: bool, name: &str| {
            let list = r.and_then(|r| {
                if limits {
                    r.limits.as_ref()
                } else {
                    r.requests.as_ref()
                }
            });
            list.and_then(|l| l.get(name))
                .and_then(|q| {
                    if name == "cpu" {
                        parse_cpu_millis(q).ok()
                    } else {
                        parse_bytes(q).ok()
                    }
                })
                .unwrap_or(0)
        };
        let limit = |name: &str| match get(r, true, name) {
            0 => get(pod_level, true, name),
            own => own,
        };
        ResourceValues {
            cpu_request: get(r, false, "cpu"),
            cpu_limit: limit("cpu"),
            memory_request: get(r, false, "memory"),
            memory_limit: limit("memory"),
        }
    }
}

/// What a running container needs to reach its allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resize {
    /// Nothing: it runs with its allocation.
    Keep,
    /// UpdateContainerResources; `shrinks` when a limit or request goes
    /// down (those go first, so the pod's room is freed before it is
    /// taken).
    Update { shrinks: bool },
    /// Its resizePolicy asks for a restart for a resource that changed.
    Restart,
}

/// determineContainerResize over the container's resources within the
/// pod-level ones `pod`: `actuated` and `actuated_pod` are what it runs
/// with.
pub fn container_resize(
    c: &Container,
    pod: Option<&ResourceRequirements>,
    actuated: Option<&ResourceRequirements>,
    actuated_pod: Option<&ResourceRequirements>,
) -> Resize {
    let desired = ResourceValues::of(c.resources.as_ref(), pod);
    let current = ResourceValues::of(actuated, actuated_pod);
    if desired == current {
        return Resize::Keep;
    }
    let restarts = |resource: &str| {
        c.resize_policy
            .iter()
            .flatten()
            .find(|p| p.resource_name == resource)
            .is_some_and(|p| p.restart_policy == "RestartContainer")
    };
    let changed = |d: i64, c: i64| d != c;
    let cpu = changed(desired.cpu_request, current.cpu_request)
        || changed(desired.cpu_limit, current.cpu_limit);
    let memory = changed(desired.memory_request, current.memory_request)
        || changed(desired.memory_limit, current.memory_limit);
    if (cpu && restarts("cpu")) || (memory && restarts("memory")) {
        return Resize::Restart;
    }
    let shrinks = desired.cpu_request < current.cpu_request
        || desired.cpu_limit < current.cpu_limit
        || desired.memory_request < current.memory_request
        || desired.memory_limit < current.memory_limit;
    Resize::Update { shrinks }
}

impl PodActions {
    /// Add what the running containers need to reach their allocation
    /// (`pod` carries it), given what each was `actuated` with: a restart
    /// (killed with "Container <name> resize requires restart" and started
    /// again) or an update, the shrinking ones first. Nothing when the pod
    /// is being recreated (its containers start with their allocation) or
    /// when a container is already to be replaced. Regular containers and
    /// sidecars are resizable (IsResizableContainer).
    pub fn add_resizes(&mut self, pod: &Pod, status: &PodStatus, actuated: &Allocation) {
        if self.kill_pod || self.create_sandbox.is_some() {
            return;
        }
        let resizable = init_containers(pod)
            .iter()
            .enumerate()
            .filter(|(_, c)| is_sidecar(c))
            .map(|(i, c)| (ContainerKind::Init, i, c))
            .chain(
                regular_containers(pod)
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (ContainerKind::Regular, i, c)),
            );
        let mut updates: Vec<(bool, ContainerUpdate)> = Vec::new();
        for (kind, index, spec) in resizable {
            let Some(running) = status
                .container(&spec.name)
                .filter(|c| c.state == ContainerState::Running)
            else {
                continue;
            };
            if self.containers_to_kill.iter().any(|k| k.id == running.id) {
                continue;
            }
            let pod_level = pod.spec.as_ref().and_then(|s| s.resources.as_ref());
            match container_resize(
                spec,
                pod_level,
                actuated.container(&spec.name),
                actuated.pod.as_ref(),
            ) {
                Resize::Keep => {}
                Resize::Restart => {
                    self.kill(
                        running,
                        format!("Container {} resize requires restart", spec.name),
                        None,
                    );
                    self.containers_to_start
                        .push(crate::actions::StartContainer {
                            index,
                            kind,
                            restart_count: running.restart_count + 1,
                        });
                }
                Resize::Update { shrinks } => updates.push((
                    shrinks,
                    ContainerUpdate {
                        id: running.id.clone(),
                        name: spec.name.clone(),
                        kind,
                        index,
                    },
                )),
            }
        }
        // Shrinks first (stable: in spec order within each group).
        updates.sort_by_key(|(shrinks, _)| !shrinks);
        self.containers_to_update = updates.into_iter().map(|(_, u)| u).collect();
    }
}

/// The memory limits a resize lowers or adds (validateMemoryResizeAction):
/// the pod cgroup's, and each running container's to be updated in place,
/// in bytes. Each is checked against what it uses before the resize goes
/// on: the kernel cannot take a limit below the usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryDecreases {
    pub pod: Option<i64>,
    /// (container name, new limit).
    pub containers: Vec<(String, i64)>,
}

impl MemoryDecreases {
    /// Which of `pod`'s (the allocated pod's) memory limits are lower
    /// than, or absent from, its `actuated` ones; `pod_cgroup` and
    /// `actuated_cgroup` are its pod cgroup's values (None: no pod
    /// cgroups); `updates` the containers to update in place.
    pub fn of(
        pod: &Pod,
        actuated: &Allocation,
        pod_cgroup: Option<i64>,
        actuated_cgroup: Option<i64>,
        updates: &[ContainerUpdate],
    ) -> MemoryDecreases {
        let pod_level = pod.spec.as_ref().and_then(|s| s.resources.as_ref());
        let decreasing =
            |desired: i64, current: i64| desired > 0 && (current <= 0 || desired < current);
        let containers = init_containers(pod)
            .iter()
            .chain(regular_containers(pod))
            .filter(|c| updates.iter().any(|u| u.name == c.name))
            .filter_map(|c| {
                let desired = ResourceValues::of(c.resources.as_ref(), pod_level).memory_limit;
                let current =
                    ResourceValues::of(actuated.container(&c.name), actuated.pod.as_ref())
                        .memory_limit;
                decreasing(desired, current).then(|| (c.name.clone(), desired))
            })
            .collect();
        MemoryDecreases {
            pod: pod_cgroup.filter(|d| decreasing(*d, actuated_cgroup.unwrap_or(-1))),
            containers,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pod.is_none() && self.containers.is_empty()
    }

    /// Why the resize cannot go on, given the pod's usage and each
    /// container's (by name), as upstream words it; None when every new
    /// limit is above what is used. A usage not known is an error too.
    pub fn check(
        &self,
        pod_usage: Option<u64>,
        container_usage: &[(String, Option<u64>)],
    ) -> Option<String> {
        let mut errs = Vec::new();
        if let Some(limit) = self.pod {
            match pod_usage {
                None => errs.push("missing pod memory usage".to_owned()),
                Some(u) if u >= limit as u64 => errs.push(format!(
                    "attempting to set pod memory limit ({limit}) below current usage ({u})"
                )),
                Some(_) => {}
            }
        }
        for (name, limit) in &self.containers {
            let usage = container_usage
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, u)| *u);
            match usage {
                None => errs.push(format!("missing container {name:?} memory usage")),
                Some(u) if u >= *limit as u64 => errs.push(format!(
                    "attempting to set container {name:?} memory limit ({limit}) below current usage ({u})"
                )),
                Some(_) => {}
            }
        }
        match errs.len() {
            0 => None,
            1 => Some(format!("cannot decrease memory limits: {}", errs[0])),
            _ => Some(format!(
                "cannot decrease memory limits: [{}]",
                errs.join(", ")
            )),
        }
    }
}

/// The resize events' reasons.
pub const EVENT_STARTED: &str = "ResizeStarted";
pub const EVENT_COMPLETED: &str = "ResizeCompleted";
pub const EVENT_DEFERRED: &str = "ResizeDeferred";
pub const EVENT_INFEASIBLE: &str = "ResizeInfeasible";
pub const EVENT_ERROR: &str = "ResizeError";

/// A resize event's message (podResizeMessage): `<prefix>: ` and the
/// pod's containers' resources with the generation (and the error) as JSON.
pub fn resize_message(prefix: &str, pod: &Pod, generation: i64, error: &str) -> String {
    #[derive(serde::Serialize)]
    struct Allocation<'a> {
        name: &'a str,
        resources: ResourceRequirements,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Summary<'a> {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        init_containers: Vec<Allocation<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        containers: Vec<Allocation<'a>>,
        generation: i64,
        #[serde(skip_serializing_if = "str::is_empty")]
        error: &'a str,
    }
    fn list(cs: &[Container]) -> Vec<Allocation<'_>> {
        cs.iter()
            .map(|c| Allocation {
                name: &c.name,
                resources: c.resources.clone().unwrap_or_default(),
            })
            .collect()
    }
    let summary = Summary {
        init_containers: list(init_containers(pod)),
        containers: list(regular_containers(pod)),
        generation,
        error,
    };
    match serde_json::to_string(&summary) {
        Ok(json) => format!("{prefix}: {json}"),
        Err(_) => prefix.to_owned(),
    }
}

/// The conditions a pod's resize is in, as the status manager keeps them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResizeConditions {
    pub pending: Option<PodCondition>,
    pub in_progress: Option<PodCondition>,
}

/// A resize condition (True) with its reason, message and the pod
/// generation it is about; the transition time is kept while the reason
/// stays (updatedPodResizeCondition).
pub fn resize_condition(
    kind: &str,
    previous: Option<&PodCondition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> PodCondition {
    let kept = previous.filter(|p| p.reason.as_deref().unwrap_or("") == reason);
    PodCondition {
        type_: kind.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()).filter(|r| !r.is_empty()),
        message: Some(message.to_owned()).filter(|m| !m.is_empty()),
        observed_generation: generation,
        last_probe_time: None,
        last_transition_time: Some(
            kept.and_then(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| now.clone()),
        ),
    }
}

/// Fill the container statuses' `allocatedResources` (the allocated
/// requests) and, for running containers, `resources` (what they were
/// actuated with), as upstream reports them.
pub fn set_container_resources(
    statuses: &mut [ApiContainerStatus],
    allocated: &Allocation,
    actuated: &Allocation,
) {
    for s in statuses {
        if let Some(requests) = allocated
            .container(&s.name)
            .and_then(|r| r.requests.clone())
            .filter(|r| !r.is_empty())
        {
            s.allocated_resources = Some(requests);
        }
        let running = s.state.as_ref().is_some_and(|st| st.running.is_some());
        if running
            && let Some(r) = actuated
                .container(&s.name)
                .or_else(|| allocated.container(&s.name))
        {
            s.resources = Some(r.clone());
        }
    }
}

/// The least cpu limit a pod cgroup's quota is read back as (MinMilliCPULimit).
const MIN_MILLI_CPU_LIMIT: i64 = 10;

/// The pod's `status.allocatedResources` (PodRequests of the allocated
/// pod) and `status.resources` (convertToAPIPodLevelResourcesStatus). A pod
/// not running reports its effective allocation: its pod-level resources
/// with PodRequests and PodLimits for requests and limits. A running pod
/// with a pod cgroup (`policy`) reports what its cgroup was set to for the
/// `actuated` pod, as upstream reads it back: the cpu request from
/// cpu.shares (above the minimum shares), the cpu limit from the quota
/// (above 10m), the memory limit; the memory request is the allocated one.
/// A limit the cgroup does not set is not reported (upstream's cgroup v2
/// reading; on v1 it reads an unlimited memory.limit_in_bytes back as a
/// limit of 2^63 − 4096 bytes).
pub fn pod_resources_status(
    allocated: &Pod,
    actuated: &Pod,
    running: bool,
    policy: Option<&PodCgroupPolicy>,
) -> (
    Option<BTreeMap<String, Quantity>>,
    Option<ResourceRequirements>,
) {
    let requests = pod_requests(allocated);
    let allocated_resources = Some(pod_quantities(allocated, false)).filter(|r| !r.is_empty());
    let mut out = allocated
        .spec
        .as_ref()
        .and_then(|s| s.resources.clone())
        .unwrap_or_default();
    match policy.filter(|_| running) {
        None => {
            out.requests = allocated_resources.clone();
            out.limits = Some(pod_quantities(allocated, true));
        }
        Some(policy) => {
            let cfg = pod_resource_config(actuated, policy);
            let spec_cpu = requests.get("cpu").copied().unwrap_or(0);
            let reqs = out.requests.get_or_insert_default();
            if let Some(shares) = cfg.cpu_shares {
                let milli = shares_to_milli_cpu(shares);
                if milli > MIN_SHARES as i64 || spec_cpu > MIN_SHARES as i64 {
                    reqs.insert("cpu".into(), Quantity(format_milli(milli)));
                }
            }
            if let Some(&memory) = requests.get("memory") {
                reqs.entry("memory".into())
                    .or_insert_with(|| Quantity(format_binary_si(memory)));
            }
            let limits = out.limits.get_or_insert_default();
            let cpu_limit =
                quota_to_milli_cpu(cfg.cpu_quota.unwrap_or(-1), cfg.cpu_period.unwrap_or(0));
            if cpu_limit > MIN_MILLI_CPU_LIMIT {
                limits.insert("cpu".into(), Quantity(format_milli(cpu_limit)));
            }
            if let Some(memory) = cfg.memory.filter(|m| *m > 0) {
                limits.insert("memory".into(), Quantity(format_binary_si(memory)));
            }
        }
    }
    out.requests = out.requests.filter(|r| !r.is_empty());
    out.limits = out.limits.filter(|l| !l.is_empty());
    (allocated_resources, Some(out))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerResizePolicy;

    use super::*;
    use crate::runtime::ContainerStatus;
    use crate::testing::PodBuilder;

    fn requirements(cpu: &str, memory: &str) -> ResourceRequirements {
        let list = |pairs: [(&str, &str); 2]| {
            pairs
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect::<BTreeMap<_, _>>()
        };
        ResourceRequirements {
            requests: Some(list([("cpu", cpu), ("memory", memory)])),
            limits: Some(list([("cpu", cpu), ("memory", memory)])),
            ..Default::default()
        }
    }

    fn container(name: &str, cpu: &str, memory: &str, policy: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(requirements(cpu, memory)),
            resize_policy: Some(
                policy
                    .iter()
                    .map(|(r, p)| ContainerResizePolicy {
                        resource_name: r.to_string(),
                        restart_policy: p.to_string(),
                    })
                    .collect(),
            )
            .filter(|p: &Vec<_>| !p.is_empty()),
            ..Default::default()
        }
    }

    #[test]
    fn what_a_container_needs() {
        let actuated = requirements("500m", "128Mi");
        let cases = [
            ("same", container("c", "500m", "128Mi", &[]), Resize::Keep),
            (
                "cpu up",
                container("c", "1", "128Mi", &[]),
                Resize::Update { shrinks: false },
            ),
            (
                "memory down",
                container("c", "500m", "64Mi", &[]),
                Resize::Update { shrinks: true },
            ),
            (
                "memory restart policy, memory changed",
                container("c", "500m", "256Mi", &[("memory", "RestartContainer")]),
                Resize::Restart,
            ),
            (
                "memory restart policy, cpu changed",
                container(
                    "c",
                    "1",
                    "128Mi",
                    &[("memory", "RestartContainer"), ("cpu", "NotRequired")],
                ),
                Resize::Update { shrinks: false },
            ),
            (
                "equal quantities written differently",
                container("c", "0.5", "134217728", &[("cpu", "RestartContainer")]),
                Resize::Keep,
            ),
        ];
        for (name, c, want) in cases {
            assert_eq!(
                container_resize(&c, None, Some(&actuated), None),
                want,
                "{name}"
            );
        }
        // A container without limits follows its pod's pod-level limits.
        let unlimited = Container {
            name: "c".into(),
            ..Default::default()
        };
        let (small, large) = (requirements("", "128Mi"), requirements("", "256Mi"));
        assert_eq!(
            container_resize(&unlimited, Some(&large), None, Some(&small)),
            Resize::Update { shrinks: false }
        );
        assert_eq!(
            container_resize(&unlimited, Some(&small), None, Some(&small)),
            Resize::Keep
        );
    }

    fn pod(containers: Vec<Container>) -> Pod {
        PodBuilder::default().containers(containers).build()
    }

    fn running(name: &str, id: &str) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            name: name.into(),
            state: ContainerState::Running,
            restart_count: 2,
            ..Default::default()
        }
    }

    #[test]
    fn resize_actions_restart_or_update_shrinks_first() {
        let p = pod(vec![
            container("grow", "1", "128Mi", &[]),
            container("shrink", "250m", "128Mi", &[]),
            container("restart", "500m", "64Mi", &[("memory", "RestartContainer")]),
            container("stopped", "2", "1Gi", &[]),
            container("same", "500m", "128Mi", &[]),
        ]);
        let status = PodStatus {
            containers: ["grow", "shrink", "restart", "same"]
                .iter()
                .map(|n| running(n, &format!("id-{n}")))
                .collect(),
            ..Default::default()
        };
        let actuated = Allocation {
            containers: ["grow", "shrink", "restart", "stopped", "same"]
                .iter()
                .map(|n| (n.to_string(), requirements("500m", "128Mi")))
                .collect(),
            pod: None,
        };
        let mut actions = PodActions::default();
        actions.add_resizes(&p, &status, &actuated);
        let names: Vec<&str> = actions
            .containers_to_update
            .iter()
            .map(|u| u.name.as_str())
            .collect();
        assert_eq!(names, ["shrink", "grow"]);
        assert_eq!(actions.containers_to_kill.len(), 1);
        assert_eq!(
            actions.containers_to_kill[0].reason,
            "Container restart resize requires restart"
        );
        assert_eq!(actions.containers_to_start.len(), 1);
        assert_eq!(actions.containers_to_start[0].index, 2);
        assert_eq!(actions.containers_to_start[0].restart_count, 3);

        // A pod being recreated starts its containers with the allocation.
        let mut actions = PodActions {
            create_sandbox: Some(1),
            ..Default::default()
        };
        actions.add_resizes(&p, &status, &actuated);
        assert!(actions.containers_to_update.is_empty());
        assert!(actions.containers_to_kill.is_empty());
    }

    #[test]
    fn memory_decreases_are_checked_against_usage() {
        let mib = 1 << 20;
        let p = pod(vec![
            container("down", "100m", "64Mi", &[]),
            container("up", "100m", "256Mi", &[]),
            container(
                "restarted",
                "100m",
                "32Mi",
                &[("memory", "RestartContainer")],
            ),
        ]);
        let actuated = Allocation {
            containers: ["down", "up", "restarted"]
                .iter()
                .map(|n| (n.to_string(), requirements("100m", "128Mi")))
                .collect(),
            pod: None,
        };
        let status = PodStatus {
            containers: ["down", "up", "restarted"]
                .iter()
                .map(|n| running(n, &format!("id-{n}")))
                .collect(),
            ..Default::default()
        };
        let mut actions = PodActions::default();
        actions.add_resizes(&p, &status, &actuated);
        let d = MemoryDecreases::of(
            &p,
            &actuated,
            Some(352 * mib),
            Some(384 * mib),
            &actions.containers_to_update,
        );
        // The restarted container starts afresh with its new limit.
        assert_eq!(
            d,
            MemoryDecreases {
                pod: Some(352 * mib),
                containers: vec![("down".into(), 64 * mib)],
            }
        );
        assert_eq!(
            d.check(Some(100 * mib as u64), &[("down".into(), Some(1 << 20))]),
            None
        );
        assert_eq!(
            d.check(
                Some(100 * mib as u64),
                &[("down".into(), Some(64 * mib as u64))]
            ),
            Some(format!(
                "cannot decrease memory limits: attempting to set container \"down\" memory limit ({}) below current usage ({})",
                64 * mib,
                64 * mib
            ))
        );
        assert_eq!(
            d.check(None, &[("down".into(), None)]),
            Some(
                "cannot decrease memory limits: [missing pod memory usage, missing container \"down\" memory usage]"
                    .into()
            )
        );
        // Growth only: nothing to check.
        let none = MemoryDecreases::of(&p, &actuated, Some(512 * mib), Some(384 * mib), &[]);
        assert!(none.is_empty());
    }

    #[test]
    fn event_messages_as_upstream() {
        let p = pod(vec![container("c", "1", "", &[])]);
        assert_eq!(
            resize_message("Pod resize started", &p, 2, ""),
            r#"Pod resize started: {"containers":[{"name":"c","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"1"}}}],"generation":2}"#
        );
        assert!(
            resize_message("Pod resize error", &p, 3, "boom")
                .ends_with(r#""generation":3,"error":"boom"}"#)
        );
    }

    fn with_pod_level(mut p: Pod, cpu: &str, memory: &str) -> Pod {
        p.spec.as_mut().unwrap().resources = Some(requirements(cpu, memory));
        p
    }

    #[test]
    fn allocation_round_trip() {
        let spec = with_pod_level(pod(vec![container("a", "1", "1Gi", &[])]), "2", "2Gi");
        let allocated = allocation_of(&with_pod_level(
            pod(vec![container("a", "500m", "512Mi", &[])]),
            "1",
            "1Gi",
        ));
        assert_eq!(allocated.pod, Some(requirements("1", "1Gi")));
        let back = with_allocation(&spec, &allocated).expect("differs");
        assert_eq!(allocation_of(&back), allocated);
        assert!(with_allocation(&back, &allocated).is_none());
        // A pod-level change alone is a change.
        let pod_only = with_pod_level(pod(vec![container("a", "500m", "512Mi", &[])]), "2", "1Gi");
        assert!(with_allocation(&pod_only, &allocated).is_some());
    }

    #[test]
    fn checkpoints_read_upstreams_entries() {
        // An entry as the upstream kubelet v1.37.2 writes it.
        let data = r#"{"entries":{"u1":{"ContainerResources":{"c":{"limits":{"cpu":"1"},"requests":{"cpu":"500m"}}},"PodLevelResources":{"limits":{"memory":"1Gi"}},"EmptyDirVolumeLimits":null},"u2":{"ContainerResources":null,"PodLevelResources":{"limits":{"cpu":"1"}},"EmptyDirVolumeLimits":null}}}"#;
        let cp: AllocationCheckpoint = serde_json::from_str(data).unwrap();
        let a = &cp.entries["u1"];
        assert_eq!(
            a.container("c").unwrap().requests.as_ref().unwrap()["cpu"].0,
            "500m"
        );
        assert_eq!(
            a.pod.as_ref().unwrap().limits.as_ref().unwrap()["memory"].0,
            "1Gi"
        );
        // Only pod-level resources recorded yet (SetPodLevelResources first).
        assert!(cp.entries["u2"].containers.is_empty());
        let again: AllocationCheckpoint =
            serde_json::from_str(&serde_json::to_string(&cp).unwrap()).unwrap();
        assert_eq!(again, cp);
        assert_eq!(
            serde_json::to_string(&AllocationCheckpoint::default()).unwrap(),
            "{}"
        );
    }

    #[test]
    fn pod_level_status_resources_as_upstream_reports_them() {
        let q = |s: &str| Quantity(s.into());
        let policy = PodCgroupPolicy::default();
        let mut burstable = container("a", "250m", "", &[]);
        burstable.resources = Some(ResourceRequirements {
            requests: Some([("cpu".to_string(), q("250m")), ("memory".into(), q("64Mi"))].into()),
            ..Default::default()
        });
        let cases = [
            (
                "pod-level, not running: the spec's, requests and limits aggregated",
                with_pod_level(pod(vec![container("a", "100m", "", &[])]), "200m", "128Mi"),
                false,
                Some(vec![("cpu", "200m"), ("memory", "128Mi")]),
                vec![("cpu", "200m"), ("memory", "128Mi")],
                vec![("cpu", "200m"), ("memory", "128Mi")],
            ),
            (
                "pod-level, running: read back from the cgroup values",
                with_pod_level(pod(vec![container("a", "100m", "", &[])]), "200m", "128Mi"),
                true,
                Some(vec![("cpu", "200m"), ("memory", "128Mi")]),
                vec![("cpu", "200m"), ("memory", "128Mi")],
                vec![("cpu", "200m"), ("memory", "128Mi")],
            ),
            (
                "containers only, running, Burstable: no limit the cgroup lacks",
                pod(vec![burstable]),
                true,
                Some(vec![("cpu", "250m"), ("memory", "64Mi")]),
                vec![("cpu", "250m"), ("memory", "64Mi")],
                vec![],
            ),
            (
                "BestEffort, running: nothing requested, nothing limited",
                pod(vec![Container {
                    name: "a".into(),
                    ..Default::default()
                }]),
                true,
                None,
                vec![],
                vec![],
            ),
        ];
        for (name, p, running, allocated, requests, limits) in cases {
            let (got_allocated, got) = pod_resources_status(&p, &p, running, Some(&policy));
            let list = |pairs: Vec<(&str, &str)>| -> BTreeMap<String, Quantity> {
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), q(v)))
                    .collect()
            };
            assert_eq!(
                got_allocated,
                allocated.map(list),
                "{name}: allocatedResources"
            );
            let got = got.expect("resources");
            let some = |l: BTreeMap<String, Quantity>| Some(l).filter(|l| !l.is_empty());
            assert_eq!(got.requests, some(list(requests)), "{name}: requests");
            assert_eq!(got.limits, some(list(limits)), "{name}: limits");
        }
        // Pod-level quantities as written, however odd (upstream keeps them).
        let odd = with_pod_level(pod(vec![container("a", "", "", &[])]), "4m", "10m");
        let (got_allocated, _) = pod_resources_status(&odd, &odd, false, Some(&policy));
        assert_eq!(got_allocated.unwrap()["memory"], q("10m"));
        // Running, the cgroup still at the old values: what it has.
        let allocated = with_pod_level(pod(vec![container("a", "100m", "", &[])]), "400m", "256Mi");
        let actuated = with_pod_level(pod(vec![container("a", "100m", "", &[])]), "200m", "128Mi");
        let (_, got) = pod_resources_status(&allocated, &actuated, true, Some(&policy));
        let got = got.unwrap();
        assert_eq!(got.limits.unwrap()["cpu"], q("200m"));
        assert_eq!(
            got.requests.unwrap()["memory"],
            q("256Mi"),
            "the allocated memory request"
        );
    }

    #[test]
    fn container_statuses_carry_allocated_and_actuated_resources() {
        use k8s_openapi::api::core::v1::{ContainerState as ApiState, ContainerStateRunning};
        let mut statuses = vec![
            ApiContainerStatus {
                name: "a".into(),
                state: Some(ApiState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ApiContainerStatus {
                name: "b".into(),
                ..Default::default()
            },
        ];
        let allocated = Allocation {
            containers: [
                ("a".to_string(), requirements("1", "1Gi")),
                ("b".to_string(), requirements("2", "")),
            ]
            .into(),
            pod: None,
        };
        let actuated = Allocation {
            containers: [("a".to_string(), requirements("500m", "1Gi"))].into(),
            pod: None,
        };
        set_container_resources(&mut statuses, &allocated, &actuated);
        assert_eq!(
            statuses[0].allocated_resources.as_ref().unwrap()["cpu"],
            Quantity("1".into())
        );
        assert_eq!(
            statuses[0]
                .resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()["cpu"],
            Quantity("500m".into())
        );
        // Not running: what it is allocated, no resources.
        assert!(statuses[1].allocated_resources.is_some());
        assert!(statuses[1].resources.is_none());
    }

    #[test]
    fn conditions_keep_their_transition_time_while_the_reason_stays() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(100).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(200).unwrap());
        let first = resize_condition(POD_RESIZE_PENDING, None, REASON_DEFERRED, "m", Some(2), &t0);
        assert_eq!(first.reason.as_deref(), Some("Deferred"));
        assert_eq!(first.observed_generation, Some(2));
        let again = resize_condition(
            POD_RESIZE_PENDING,
            Some(&first),
            REASON_DEFERRED,
            "m2",
            Some(3),
            &t1,
        );
        assert_eq!(again.last_transition_time, Some(t0.clone()));
        let other = resize_condition(
            POD_RESIZE_PENDING,
            Some(&first),
            REASON_INFEASIBLE,
            "m",
            Some(3),
            &t1,
        );
        assert_eq!(other.last_transition_time, Some(t1));
        let progress = resize_condition(POD_RESIZE_IN_PROGRESS, None, "", "", Some(3), &t0);
        assert_eq!(progress.reason, None);
    }
}
