//! In-place pod resize (InPlacePodVerticalScaling, upstream's allocation
//! manager and computePodResizeAction). Three records of a pod's container
//! resources: the spec's (desired, changed through the `resize`
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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::actions::{ContainerKind, PodActions, init_containers, is_sidecar, regular_containers};
use crate::quantity::{parse_bytes, parse_cpu_millis};
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

/// Each container's resources by name (upstream's PodResourceInfo): init
/// and regular containers.
pub type Allocation = BTreeMap<String, ResourceRequirements>;

/// The pod's containers' resources as its spec gives them.
pub fn allocation_of(pod: &Pod) -> Allocation {
    init_containers(pod)
        .iter()
        .chain(regular_containers(pod))
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// The pod with its containers' resources replaced by `allocation`'s
/// (UpdatePodFromAllocation); None when they are the same already.
pub fn with_allocation(pod: &Pod, allocation: &Allocation) -> Option<Pod> {
    if allocation_of(pod) == *allocation {
        return None;
    }
    let mut out = pod.clone();
    let spec = out.spec.as_mut()?;
    let lists = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    for c in lists {
        if let Some(r) = allocation.get(&c.name) {
            c.resources = Some(r.clone()).filter(|r| *r != ResourceRequirements::default());
        }
    }
    Some(out)
}

/// A container's four resize-relevant values (containerResourcesFromRequirements):
/// milli-CPUs and bytes, 0 when not given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceValues {
    pub cpu_request: i64,
    pub cpu_limit: i64,
    pub memory_request: i64,
    pub memory_limit: i64,
}

impl ResourceValues {
    pub fn of(r: Option<&ResourceRequirements>) -> ResourceValues {
        let get = |list: Option<&BTreeMap<String, _>>, name: &str, cpu: bool| {
            list.and_then(|l| l.get(name))
                .and_then(|q| {
                    if cpu {
                        parse_cpu_millis(q).ok()
                    } else {
                        parse_bytes(q).ok()
                    }
                })
                .unwrap_or(0)
        };
        let requests = r.and_then(|r| r.requests.as_ref());
        let limits = r.and_then(|r| r.limits.as_ref());
        ResourceValues {
            cpu_request: get(requests, "cpu", true),
            cpu_limit: get(limits, "cpu", true),
            memory_request: get(requests, "memory", false),
            memory_limit: get(limits, "memory", false),
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

/// determineContainerResize over the container's resources: `actuated`
/// is what it runs with.
pub fn container_resize(c: &Container, actuated: Option<&ResourceRequirements>) -> Resize {
    let desired = ResourceValues::of(c.resources.as_ref());
    let current = ResourceValues::of(actuated);
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

/// A running container whose resources are to be updated in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerUpdate {
    pub id: String,
    pub name: String,
    pub kind: ContainerKind,
    /// Index into the spec's list of this kind.
    pub index: usize,
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
            match container_resize(spec, actuated.get(&spec.name)) {
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
            .get(&s.name)
            .and_then(|r| r.requests.clone())
            .filter(|r| !r.is_empty())
        {
            s.allocated_resources = Some(requests);
        }
        let running = s.state.as_ref().is_some_and(|st| st.running.is_some());
        if running && let Some(r) = actuated.get(&s.name).or_else(|| allocated.get(&s.name)) {
            s.resources = Some(r.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerResizePolicy, PodSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::runtime::ContainerStatus;

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
            assert_eq!(container_resize(&c, Some(&actuated)), want, "{name}");
        }
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            ..Default::default()
        }
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
        let actuated: Allocation = ["grow", "shrink", "restart", "stopped", "same"]
            .iter()
            .map(|n| (n.to_string(), requirements("500m", "128Mi")))
            .collect();
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

    #[test]
    fn allocation_round_trip() {
        let spec = pod(vec![container("a", "1", "1Gi", &[])]);
        let allocated = allocation_of(&pod(vec![container("a", "500m", "512Mi", &[])]));
        let back = with_allocation(&spec, &allocated).expect("differs");
        assert_eq!(allocation_of(&back), allocated);
        assert!(with_allocation(&back, &allocated).is_none());
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
        let allocated: Allocation = [
            ("a".to_string(), requirements("1", "1Gi")),
            ("b".to_string(), requirements("2", "")),
        ]
        .into();
        let actuated: Allocation = [("a".to_string(), requirements("500m", "1Gi"))].into();
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
