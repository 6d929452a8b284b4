//! Status synthesis (upstream's `generateAPIPodStatus` and `getPhase`): turn
//! the runtime's view of a pod into the v1 PodStatus the status manager
//! owns. Pure: wall-clock time is passed in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus,
    ContainerUser as ApiContainerUser, HostIP, LinuxContainerUser as ApiLinuxContainerUser, Pod,
    PodCondition, PodIP, PodStatus as ApiPodStatus, VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::actions::is_initialized;
use crate::phase::{
    PHASE_FAILED, PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED, is_terminal, is_terminal_status,
};
use crate::podspec::{
    container_should_restart, ephemeral_containers, init_containers, is_sidecar, regular_containers,
};
use crate::qos::qos_class;
use crate::runtime::{ContainerState, ContainerStatus, PodStatus, ProbeView, SandboxState};

/// Why a container is not running yet, as the last SyncPod saw it
/// (upstream's reason cache): `ErrImagePull`, `ErrImageNeverPull`,
/// `CreateContainerError`, ...
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// Waiting reasons by container name.
pub type WaitingReasons = BTreeMap<String, Waiting>;

/// Nanoseconds since the epoch to a v1 Time (seconds, as the API stores it).
pub fn time_from_nanos(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    Timestamp::from_second(ns / 1_000_000_000).ok().map(Time)
}

/// Whether a container status shows a finished run: terminated, or
/// waiting to restart after one.
fn last_exit(s: &ApiContainerStatus) -> Option<i32> {
    let state = s.state.as_ref()?;
    if let Some(t) = &state.terminated {
        return Some(t.exit_code);
    }
    state.waiting.as_ref()?;
    s.last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .map(|t| t.exit_code)
}

fn is_running(s: &ApiContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

/// The pod phase from its containers' states (upstream's `getPhase`):
/// init containers first (sidecars apart), then the regular containers.
pub fn pod_phase(
    pod: &Pod,
    init_statuses: &[ApiContainerStatus],
    statuses: &[ApiContainerStatus],
    pod_is_terminal: bool,
) -> &'static str {
    let find =
        |list: &'_ [ApiContainerStatus], name: &str| list.iter().find(|s| s.name == name).cloned();
    // Failures and stops count as final only for containers that will not
    // run again (upstream's getPhase with ContainerRestartRules).
    let (mut pending_init, mut failed_init_final) = (0, 0);
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    let mut stopped_final = 0;
    for c in init_containers(pod) {
        let Some(s) = find(init_statuses, &c.name) else {
            pending_init += 1;
            unknown += usize::from(is_sidecar(c));
            continue;
        };
        if is_sidecar(c) {
            if is_running(&s) {
                running += 1;
                pending_init += usize::from(s.started != Some(true));
            } else if last_exit(&s).is_none() {
                pending_init += 1;
                waiting += 1;
            }
            continue;
        }
        match last_exit(&s) {
            _ if is_running(&s) => pending_init += 1,
            Some(code) => {
                failed_init_final +=
                    usize::from(code != 0 && !container_should_restart(c, pod, code));
            }
            None => pending_init += 1,
        }
    }
    let mut regular_started = false;
    for c in regular_containers(pod) {
        let Some(s) = find(statuses, &c.name) else {
            unknown += 1;
            continue;
        };
        if is_running(&s) {
            running += 1;
            regular_started = true;
        } else if let Some(code) = last_exit(&s) {
            stopped += 1;
            succeeded += usize::from(code == 0);
            stopped_final += usize::from(!container_should_restart(c, pod, code));
            regular_started = true;
        } else {
            waiting += 1;
        }
    }
    if failed_init_final > 0 {
        return PHASE_FAILED;
    }
    if (pending_init > 0 && !regular_started) || (waiting > 0 && !pod_is_terminal) {
        return if pod_is_terminal {
            PHASE_FAILED
        } else {
            PHASE_PENDING
        };
    }
    if running > 0 && unknown == 0 && !pod_is_terminal {
        return PHASE_RUNNING;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if pod_is_terminal {
            return if stopped == succeeded && waiting == 0 {
                PHASE_SUCCEEDED
            } else {
                PHASE_FAILED
            };
        }
        if stopped != stopped_final {
            // Some are restarting.
            return PHASE_RUNNING;
        }
        return if stopped == succeeded {
            PHASE_SUCCEEDED
        } else {
            PHASE_FAILED
        };
    }
    if pod_is_terminal {
        return PHASE_FAILED;
    }
    PHASE_PENDING
}

fn terminated(c: &ContainerStatus, runtime_name: &str) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: Some(if c.reason.is_empty() {
            if c.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .to_owned()
        } else {
            c.reason.clone()
        }),
        message: (!c.message.is_empty()).then(|| c.message.clone()),
        started_at: time_from_nanos(c.started_at),
        finished_at: time_from_nanos(c.finished_at),
        container_id: Some(format!("{runtime_name}://{}", c.id)),
        signal: None,
    }
}

/// How a container's status is built: its defaults differ for init
/// containers and for pods that still initialize.
struct StatusContext<'a> {
    rt: &'a PodStatus,
    waiting: &'a WaitingReasons,
    runtime_name: &'a str,
    probes: &'a dyn ProbeView,
    /// The default waiting reason: PodInitializing for pods with init
    /// containers, else ContainerCreating.
    default_reason: &'static str,
}

fn container_status(spec: &Container, init: bool, cx: &StatusContext<'_>) -> ApiContainerStatus {
    let StatusContext {
        rt,
        waiting,
        runtime_name,
        ..
    } = *cx;
    let mut instances = rt.containers.iter().filter(|c| c.name == spec.name);
    let newest = instances.next();
    let previous = instances.find(|c| c.state == ContainerState::Exited);
    let creating = || ContainerStateWaiting {
        reason: Some(cx.default_reason.into()),
        message: None,
    };
    let cached = waiting.get(&spec.name).map(|w| ContainerStateWaiting {
        reason: Some(w.reason.clone()),
        message: (!w.message.is_empty()).then(|| w.message.clone()),
    });
    let (state, last) = match newest {
        None => (
            ApiState {
                waiting: Some(cached.unwrap_or_else(creating)),
                ..Default::default()
            },
            None,
        ),
        Some(c) => {
            let state = match c.state {
                ContainerState::Running => ApiState {
                    running: Some(ContainerStateRunning {
                        started_at: time_from_nanos(c.started_at),
                    }),
                    ..Default::default()
                },
                ContainerState::Exited => match cached {
                    // It ran and a restart is being attempted: waiting, and
                    // the run it had becomes the last state below.
                    Some(w) => ApiState {
                        waiting: Some(w),
                        ..Default::default()
                    },
                    None => ApiState {
                        terminated: Some(terminated(c, runtime_name)),
                        ..Default::default()
                    },
                },
                ContainerState::Created | ContainerState::Unknown => ApiState {
                    waiting: Some(cached.unwrap_or_else(creating)),
                    ..Default::default()
                },
            };
            let last_run = if state.waiting.is_some() && c.state == ContainerState::Exited {
                Some(c)
            } else {
                previous
            };
            (state, last_run)
        }
    };
    // Started: running and past its startup probe; ready: started and past
    // its readiness probe (a regular init container: when it succeeded).
    let running_id = newest
        .filter(|c| c.state == ContainerState::Running)
        .map(|c| c.id.as_str());
    let started =
        running_id.is_some_and(|id| spec.startup_probe.is_none() || cx.probes.started(id));
    let ready = if init && !is_sidecar(spec) {
        state.terminated.as_ref().is_some_and(|t| t.exit_code == 0)
    } else {
        started
            && running_id.is_some_and(|id| spec.readiness_probe.is_none() || cx.probes.ready(id))
    };
    ApiContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        image_id: newest.map(|c| c.image_ref.clone()).unwrap_or_default(),
        container_id: newest.map(|c| format!("{runtime_name}://{}", c.id)),
        ready,
        started: Some(started),
        restart_count: newest.map(|c| c.restart_count).unwrap_or(0),
        last_state: last.map(|c| ApiState {
            terminated: Some(terminated(c, runtime_name)),
            ..Default::default()
        }),
        state: Some(state),
        stop_signal: newest.and_then(|c| c.stop_signal.clone()),
        user: newest
            .and_then(|c| c.user.as_ref())
            .map(|u| ApiContainerUser {
                linux: u.linux.as_ref().map(|l| ApiLinuxContainerUser {
                    uid: l.uid,
                    gid: l.gid,
                    supplemental_groups: Some(l.supplemental_groups.clone()),
                }),
            }),
        ..Default::default()
    }
}

/// The pod conditions the kubelet owns (upstream's PodConditionsByKubelet,
/// with PodReadyToStartContainers): it computes them on every sync. Any
/// other condition (a readiness gate's, DisruptionTarget) is written by
/// others through the API and only read here.
pub const KUBELET_CONDITIONS: [&str; 7] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodResizeInProgress",
    "PodResizePending",
    "PodReadyToStartContainers",
];

pub fn is_kubelet_condition(kind: &str) -> bool {
    KUBELET_CONDITIONS.contains(&kind)
}

/// The condition the kubelet shares with others (PodConditionSharedByKubelet):
/// it writes it on an eviction, and sends it only with the terminal phase.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// The part of a status the kubelet writes to the API: the conditions it
/// does not own are left out, so a patch never overwrites what others set
/// (upstream's mergePodStatus keeps the API server's copies of those), but
/// for DisruptionTarget in a terminal status.
pub fn kubelet_owned(status: &ApiPodStatus) -> ApiPodStatus {
    let mut owned = status.clone();
    let terminal = is_terminal_status(status);
    if let Some(conditions) = owned.conditions.as_mut() {
        conditions.retain(|c| {
            is_kubelet_condition(&c.type_) || (terminal && c.type_ == DISRUPTION_TARGET)
        });
    }
    owned
}

/// Why the kubelet itself ended a pod its source still wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminationKind {
    /// The eviction manager's: Failed with reason Evicted.
    Evicted,
    /// Graceful node shutdown's: Failed (unless it Succeeded) with reason
    /// Terminated.
    NodeShutdown,
}

impl TerminationKind {
    /// The final status's reason.
    pub fn reason(self) -> &'static str {
        match self {
            TerminationKind::Evicted => crate::eviction::rank::REASON,
            TerminationKind::NodeShutdown => crate::nodeshutdown::POD_REASON,
        }
    }
}

/// A pod the kubelet ended (an eviction, a node shutdown): what its final
/// status says, and whether it carries the DisruptionTarget condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletTermination {
    pub kind: TerminationKind,
    pub message: String,
    pub disruption: bool,
}

/// End a status as `termination` says (the status function of upstream's
/// eviction and shutdown managers): Failed (a shutdown leaves Succeeded as
/// it is) with its reason and message, and, when it disrupts, the
/// DisruptionTarget condition (TerminationByKubelet) saying the same, set
/// at `now` the first time.
pub fn fail_for_termination(
    status: &mut ApiPodStatus,
    pod: &Pod,
    termination: &KubeletTermination,
    now: &Time,
) {
    let keep_success = termination.kind == TerminationKind::NodeShutdown
        && status.phase.as_deref() == Some(PHASE_SUCCEEDED);
    if !keep_success {
        status.phase = Some(PHASE_FAILED.into());
    }
    status.reason = Some(termination.kind.reason().into());
    status.message = Some(termination.message.clone());
    if !termination.disruption {
        return;
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let condition = PodCondition {
        type_: DISRUPTION_TARGET.into(),
        status: "True".into(),
        reason: Some("TerminationByKubelet".into()),
        message: Some(termination.message.clone()),
        observed_generation: pod.metadata.generation,
        last_transition_time: Some(now.clone()),
        ..Default::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == DISRUPTION_TARGET) {
        Some(c) if c.status == "True" => {}
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}

/// Upstream's rule that a pod never leaves a terminal phase the API
/// server has: a status computed otherwise takes the API's phase back
/// (with its reason and message when it has none of its own).
pub fn keep_api_terminal_phase(status: &mut ApiPodStatus, pod: &Pod) {
    let Some(api) = pod.status.as_ref().filter(|s| is_terminal_status(s)) else {
        return;
    };
    if status.phase != api.phase {
        status.phase = api.phase.clone();
        if status.reason.is_none() {
            status.reason = api.reason.clone();
            status.message = api.message.clone();
        }
    }
}

/// Upstream's ReadinessGatesNotReady reason.
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// Why the pod's readiness gates hold it back (upstream's
/// GeneratePodReadyCondition messages), None when each gate's condition is
/// True in `conditions`.
fn readiness_gates_unready(pod: &Pod, conditions: &[PodCondition]) -> Option<String> {
    let gates = pod.spec.as_ref()?.readiness_gates.as_deref()?;
    let unready: Vec<String> = gates
        .iter()
        .filter_map(|g| {
            let kind = &g.condition_type;
            match conditions.iter().find(|c| &c.type_ == kind) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {kind:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {kind:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    (!unready.is_empty()).then(|| unready.join(", "))
}

/// Whether an API pod's Ready condition disagrees with its readiness gates
/// (upstream's NeedToReconcilePodReadiness): someone changed a gate's
/// condition, and the pod must be synced for Ready to follow.
pub fn needs_readiness_reconcile(pod: &Pod) -> bool {
    let has_gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    let find = |kind: &str| conditions.iter().find(|c| c.type_ == kind);
    let (Some(ready), true) = (find("Ready"), has_gates) else {
        return false;
    };
    let want = match find("ContainersReady") {
        Some(c) if c.status == "True" => match readiness_gates_unready(pod, conditions) {
            Some(message) => ("False", Some(message)),
            None => ("True", None),
        },
        Some(c) => (c.status.as_str(), c.message.clone()),
        None => ("False", None),
    };
    (ready.status.as_str(), ready.message.clone()) != want
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: if ok { None } else { reason.map(str::to_owned) },
        message: if ok { None } else { message },
        ..Default::default()
    }
}

/// The conditions the kubelet owns (PodReadyToStartContainers,
/// Initialized, Ready, ContainersReady, PodScheduled), after those others
/// own as the API pod has them; each says which generation it is about.
fn pod_conditions(
    pod: &Pod,
    rt: &PodStatus,
    probes: &dyn ProbeView,
    init_statuses: &[ApiContainerStatus],
    statuses: &[ApiContainerStatus],
    phase: &str,
) -> Vec<PodCondition> {
    let inits = init_containers(pod);
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let sandbox_ready = rt
        .sandboxes
        .first()
        .is_some_and(|s| s.state == SandboxState::Ready && (host_network || !s.ips.is_empty()));
    // Sidecars count toward readiness like regular containers.
    let unready: Vec<&str> = statuses
        .iter()
        .chain(
            init_statuses
                .iter()
                .zip(inits)
                .filter(|(_, c)| is_sidecar(c))
                .map(|(s, _)| s),
        )
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let containers_ready = unready.is_empty() && !is_terminal(phase);
    let unready_msg = (!unready.is_empty())
        .then(|| format!("containers with unready status: [{}]", unready.join(" ")));
    let reason = if is_terminal(phase) {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let initialized = is_initialized(pod, rt, probes);
    let incomplete: Vec<&str> = init_statuses
        .iter()
        .zip(inits)
        .filter(|(s, c)| {
            if is_sidecar(c) {
                s.started != Some(true)
            } else {
                !s.ready
            }
        })
        .map(|(s, _)| s.name.as_str())
        .collect();
    // Conditions others own are kept as the API pod has them; readiness
    // gates are read from them.
    let mut conditions: Vec<PodCondition> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|c| !is_kubelet_condition(&c.type_))
        .cloned()
        .collect();
    let ready = match readiness_gates_unready(pod, &conditions) {
        Some(message) if containers_ready => condition(
            "Ready",
            false,
            Some(READINESS_GATES_NOT_READY),
            Some(message),
        ),
        _ => condition("Ready", containers_ready, Some(reason), unready_msg.clone()),
    };
    conditions.extend([
        condition(
            "PodReadyToStartContainers",
            sandbox_ready && !is_terminal(phase),
            None,
            None,
        ),
        condition(
            "Initialized",
            initialized,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
        ),
        ready,
        condition(
            "ContainersReady",
            containers_ready,
            Some(reason),
            unready_msg,
        ),
        condition("PodScheduled", true, None, None),
    ]);
    // PodObservedGenerationTracking (GA): the kubelet's conditions and the
    // status say which generation of the spec they are about.
    let generation = pod.metadata.generation;
    for c in conditions
        .iter_mut()
        .filter(|c| is_kubelet_condition(&c.type_))
    {
        c.observed_generation = generation;
    }
    conditions
}

/// The API status of a pod from the runtime's view (upstream's
/// `generateAPIPodStatus`). `pod_is_terminal` once the kubelet has stopped
/// the pod for good: running/pending phases then become final ones.
pub fn generate_api_pod_status(
    pod: &Pod,
    rt: &PodStatus,
    waiting: &WaitingReasons,
    runtime_name: &str,
    probes: &dyn ProbeView,
    pod_is_terminal: bool,
) -> ApiPodStatus {
    let inits = init_containers(pod);
    let cx = StatusContext {
        rt,
        waiting,
        runtime_name,
        probes,
        default_reason: if inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        },
    };
    let statuses: Vec<ApiContainerStatus> = regular_containers(pod)
        .iter()
        .map(|c| container_status(c, false, &cx))
        .collect();
    let init_statuses: Vec<ApiContainerStatus> = inits
        .iter()
        .map(|c| container_status(c, true, &cx))
        .collect();
    // Ephemeral containers are reported as regular ones, but no prober
    // reads them: never ready, started unset (as upstream's).
    let ephemeral_statuses: Vec<ApiContainerStatus> = ephemeral_containers(pod)
        .iter()
        .map(|(c, _)| ApiContainerStatus {
            ready: false,
            started: None,
            ..container_status(c, false, &cx)
        })
        .collect();
    let phase = pod_phase(pod, &init_statuses, &statuses, pod_is_terminal);

    let conditions = pod_conditions(pod, rt, probes, &init_statuses, &statuses, phase);
    let generation = pod.metadata.generation;
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let ips: Vec<PodIP> = if host_network {
        Vec::new()
    } else {
        rt.ips().iter().map(|ip| PodIP { ip: ip.clone() }).collect()
    };
    ApiPodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        pod_ip: ips.first().map(|i| i.ip.clone()),
        pod_ips: (!ips.is_empty()).then_some(ips),
        qos_class: Some(qos_class(pod).into()),
        container_statuses: Some(statuses),
        init_container_statuses: (!inits.is_empty()).then_some(init_statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty())
            .then_some(ephemeral_statuses),
        observed_generation: generation,
        ..Default::default()
    }
}

/// The reason and message of a pod ended by activeDeadlineSeconds.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const DEADLINE_EXCEEDED_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

/// Whether the pod has been active on the node longer than its
/// activeDeadlineSeconds (upstream's activeDeadlineHandler), counting from
/// its startTime; `now` and `start` are seconds since the epoch.
pub fn past_active_deadline(pod: &Pod, start: Option<i64>, now: i64) -> bool {
    let deadline = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds);
    match (deadline, start) {
        (Some(d), Some(start)) => now - start >= d,
        _ => false,
    }
}

/// End a status as Failed with reason DeadlineExceeded, as upstream's
/// generateAPIPodStatus does for a pod past its deadline.
pub fn fail_for_deadline(status: &mut ApiPodStatus) {
    status.phase = Some(PHASE_FAILED.into());
    status.reason = Some(DEADLINE_EXCEEDED.into());
    status.message = Some(DEADLINE_EXCEEDED_MESSAGE.into());
}

/// Upstream's sortPodIPs: of the IPs a sandbox reports (any number, any
/// order), the first of the node's family (IPv4 when the node has no IP),
/// then the first of the other family: at most one per family, which is
/// all the API server takes.
pub fn sort_pod_ips(ips: &[String], node_ips: &[String]) -> Vec<String> {
    let v4 = |ip: &String| ip.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_ipv4());
    let v6 = |ip: &String| ip.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_ipv6());
    let node_v6 = node_ips.first().is_some_and(v6);
    let families: [&dyn Fn(&String) -> bool; 2] = if node_v6 { [&v6, &v4] } else { [&v4, &v6] };
    families
        .iter()
        .filter_map(|family| ips.iter().find(|ip| family(ip)).cloned())
        .collect()
}

/// Each container's `volumeMounts` in its status, as upstream reports
/// them (RecursiveReadOnlyMounts, GA): name, path, readOnly, and for a
/// read-only mount whether it is recursively so (`Enabled` where the pod's
/// runtime handler supports it and the mount asks, else `Disabled`).
pub fn set_volume_mount_statuses(
    status: &mut ApiPodStatus,
    pod: &Pod,
    recursive_read_only_supported: bool,
) {
    let spec = pod.spec.as_ref();
    let containers = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| (c.name.as_str(), c.volume_mounts.as_deref()))
        .chain(
            spec.into_iter()
                .flat_map(|s| s.ephemeral_containers.iter().flatten())
                .map(|c| (c.name.as_str(), c.volume_mounts.as_deref())),
        )
        .collect::<Vec<_>>();
    let lists = [
        status.container_statuses.as_mut(),
        status.init_container_statuses.as_mut(),
        status.ephemeral_container_statuses.as_mut(),
    ];
    for cs in lists.into_iter().flatten().flatten() {
        let Some((_, Some(mounts))) = containers.iter().find(|(n, _)| *n == cs.name) else {
            continue;
        };
        cs.volume_mounts = Some(
            mounts
                .iter()
                .map(|m| {
                    let read_only = m.read_only.unwrap_or(false);
                    let rro = crate::volume::recursive_read_only(m, recursive_read_only_supported)
                        .unwrap_or(false);
                    VolumeMountStatus {
                        name: m.name.clone(),
                        mount_path: m.mount_path.clone(),
                        read_only: read_only.then_some(true),
                        recursive_read_only: read_only
                            .then(|| if rro { "Enabled" } else { "Disabled" }.to_owned()),
                        ..Default::default()
                    }
                })
                .collect(),
        );
    }
}

/// Fill hostIP and hostIPs with the node's addresses, and order the pod's
/// IPs as upstream does (`sort_pod_ips`); a hostNetwork pod's IPs are the
/// node's, as upstream reports them.
pub fn set_host_ips(status: &mut ApiPodStatus, pod: &Pod, host_ips: &[String]) {
    if let Some(ips) = status.pod_ips.take() {
        let ips: Vec<String> = ips.into_iter().map(|i| i.ip).collect();
        let sorted = sort_pod_ips(&ips, host_ips);
        status.pod_ip = sorted.first().cloned();
        status.pod_ips =
            (!sorted.is_empty()).then(|| sorted.into_iter().map(|ip| PodIP { ip }).collect());
    }
    if host_ips.is_empty() {
        return;
    }
    let ips: Vec<HostIP> = host_ips
        .iter()
        .map(|ip| HostIP { ip: ip.clone() })
        .collect();
    status.host_ip = Some(host_ips[0].clone());
    status.host_ips = Some(ips);
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
    {
        status.pod_ip = Some(host_ips[0].clone());
        status.pod_ips = Some(host_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect());
    }
}

/// A condition's lastTransitionTime: kept from its previous version while
/// its status stays the same, `now` when it flips (or is new).
pub fn transition_time(previous: Option<(&str, Option<&Time>)>, status: &str, now: &Time) -> Time {
    match previous {
        Some((old, Some(at))) if old == status => at.clone(),
        _ => now.clone(),
    }
}

/// Carry over what must not change from one status to the next: the start
/// time, an observedGeneration that never goes back (a sync may work from
/// an older copy of the pod) and, for conditions whose status did not flip,
/// their transition time (upstream's status manager does this on every
/// SetPodStatus).
pub fn carry_over(new: &mut ApiPodStatus, old: Option<&ApiPodStatus>, now: &Time) {
    new.start_time = old
        .and_then(|o| o.start_time.clone())
        .or_else(|| Some(now.clone()));
    if let Some(kept) = old.and_then(|o| o.observed_generation)
        && new.observed_generation.is_none_or(|g| g < kept)
    {
        new.observed_generation = Some(kept);
    }
    // Conditions others own keep the times their writers gave them.
    for c in new
        .conditions
        .iter_mut()
        .flatten()
        .filter(|c| is_kubelet_condition(&c.type_) || c.type_ == DISRUPTION_TARGET)
    {
        let prev = old
            .and_then(|o| o.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|p| p.type_ == c.type_));
        c.last_transition_time = Some(transition_time(
            prev.map(|p| (p.status.as_str(), p.last_transition_time.as_ref())),
            &c.status,
            now,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{NoProbes, SandboxStatus};
    use crate::testing::{PodBuilder, container};
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(policy: &str, names: &[&str]) -> Pod {
        PodBuilder::default()
            .restart_policy(policy)
            .containers(names.iter().map(|n| Container {
                image: Some("busybox:1".into()),
                ..container(n)
            }))
            .build()
    }

    /// The first container with its own restartPolicy.
    fn own_policy(mut p: Pod, policy: &str) -> Pod {
        p.spec.as_mut().unwrap().containers[0].restart_policy = Some(policy.into());
        p
    }

    fn ctr(name: &str, state: ContainerState, exit: i32, restarts: i32) -> ContainerStatus {
        ContainerStatus {
            id: format!("{name}{restarts}"),
            name: name.into(),
            state,
            hash: String::new(),
            restart_count: restarts,
            image: "busybox:1".into(),
            image_ref: "sha256:abc".into(),
            created_at: 1_000_000_000,
            started_at: 2_000_000_000,
            finished_at: if state == ContainerState::Exited {
                3_000_000_000
            } else {
                0
            },
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            stop_signal: None,
            grace_period: None,
            user: None,
        }
    }

    fn rt(containers: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            sandboxes: vec![SandboxStatus {
                id: "sb".into(),
                state: SandboxState::Ready,
                attempt: 0,
                created_at: 1,
                ips: vec!["10.88.0.5".into()],
                host_network: false,
            }],
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn phases() {
        use ContainerState::*;
        let cases = [
            (
                "nothing created yet",
                pod("Always", &["a"]),
                vec![],
                false,
                PHASE_PENDING,
            ),
            (
                "running",
                pod("Always", &["a"]),
                vec![ctr("a", Running, 0, 0)],
                false,
                PHASE_RUNNING,
            ),
            (
                "one running one creating",
                pod("Always", &["a", "b"]),
                vec![ctr("a", Running, 0, 0)],
                false,
                PHASE_PENDING,
            ),
            (
                "Never, exit 0",
                pod("Never", &["a"]),
                vec![ctr("a", Exited, 0, 0)],
                false,
                PHASE_SUCCEEDED,
            ),
            (
                "Never, exit 1",
                pod("Never", &["a"]),
                vec![ctr("a", Exited, 1, 0)],
                false,
                PHASE_FAILED,
            ),
            (
                "OnFailure, exit 0",
                pod("OnFailure", &["a"]),
                vec![ctr("a", Exited, 0, 0)],
                false,
                PHASE_SUCCEEDED,
            ),
            (
                "OnFailure, exit 1 restarts",
                pod("OnFailure", &["a"]),
                vec![ctr("a", Exited, 1, 0)],
                false,
                PHASE_RUNNING,
            ),
            (
                "Always, exited: will restart",
                pod("Always", &["a"]),
                vec![ctr("a", Exited, 0, 0)],
                false,
                PHASE_RUNNING,
            ),
            (
                "killed on removal",
                pod("Always", &["a"]),
                vec![ctr("a", Exited, 137, 0)],
                true,
                PHASE_FAILED,
            ),
            (
                "terminal, all succeeded",
                pod("Always", &["a"]),
                vec![ctr("a", Exited, 0, 0)],
                true,
                PHASE_SUCCEEDED,
            ),
            (
                "container Never in an Always pod, exit 1: not restarted",
                own_policy(pod("Always", &["a"]), "Never"),
                vec![ctr("a", Exited, 1, 0)],
                false,
                PHASE_FAILED,
            ),
            (
                "container Never in an Always pod, exit 0",
                own_policy(pod("Always", &["a"]), "Never"),
                vec![ctr("a", Exited, 0, 0)],
                false,
                PHASE_SUCCEEDED,
            ),
            (
                "container Always in a Never pod: restarting",
                own_policy(pod("Never", &["a"]), "Always"),
                vec![ctr("a", Exited, 1, 0)],
                false,
                PHASE_RUNNING,
            ),
            (
                "container Never done, the pod's Always one restarting",
                own_policy(pod("Always", &["a", "b"]), "Never"),
                vec![ctr("a", Exited, 1, 0), ctr("b", Exited, 1, 0)],
                false,
                PHASE_RUNNING,
            ),
        ];
        for (name, p, containers, terminal, want) in cases {
            let s = generate_api_pod_status(
                &p,
                &rt(containers),
                &WaitingReasons::new(),
                "containerd",
                &NoProbes,
                terminal,
            );
            assert_eq!(s.phase.as_deref(), Some(want), "{name}");
        }
    }

    #[test]
    fn container_statuses() {
        use ContainerState::*;
        let p = pod("Always", &["a", "b"]);
        let mut waiting = WaitingReasons::new();
        waiting.insert(
            "b".into(),
            Waiting {
                reason: "ErrImageNeverPull".into(),
                message: "image \"x\" is not present".into(),
            },
        );
        let s = generate_api_pod_status(
            &p,
            &rt(vec![ctr("a", Running, 0, 2), ctr("a", Exited, 1, 1)]),
            &waiting,
            "containerd",
            &NoProbes,
            false,
        );
        let cs = s.container_statuses.unwrap();
        assert_eq!(cs[0].restart_count, 2);
        assert!(cs[0].ready);
        assert_eq!(cs[0].container_id.as_deref(), Some("containerd://a2"));
        let last = cs[0]
            .last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
        let w = cs[1].state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("ErrImageNeverPull"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.5"));
        let ready = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [b]")
        );
    }

    struct ReadyIds(Vec<&'static str>);

    impl ProbeView for ReadyIds {
        fn liveness_failed(&self, _: &str) -> bool {
            false
        }
        fn startup_failed(&self, _: &str) -> bool {
            false
        }
        fn started(&self, id: &str) -> bool {
            self.0.contains(&id)
        }
        fn ready(&self, id: &str) -> bool {
            self.0.contains(&id)
        }
    }

    fn cond<'a>(s: &'a ApiPodStatus, kind: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap()
    }

    #[test]
    fn readiness_probe_gates_ready() {
        use ContainerState::*;
        let mut p = pod("Always", &["a"]);
        p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Default::default());
        let runtime = rt(vec![ctr("a", Running, 0, 0)]);
        for (probes, want) in [(ReadyIds(vec![]), false), (ReadyIds(vec!["a0"]), true)] {
            let s = generate_api_pod_status(
                &p,
                &runtime,
                &WaitingReasons::new(),
                "containerd",
                &probes,
                false,
            );
            let c = &s.container_statuses.as_ref().unwrap()[0];
            assert_eq!(c.ready, want);
            assert_eq!(
                c.started,
                Some(true),
                "no startup probe: started once running"
            );
            assert_eq!(
                cond(&s, "Ready").status,
                if want { "True" } else { "False" }
            );
            assert_eq!(s.phase.as_deref(), Some(PHASE_RUNNING));
        }
    }

    fn api_condition(kind: &str, status: &str) -> PodCondition {
        PodCondition {
            type_: kind.into(),
            status: status.into(),
            last_transition_time: time_from_nanos(7_000_000_000),
            ..Default::default()
        }
    }

    /// A pod with readiness gates g1 and g2, its API status holding `conditions`.
    fn gated(conditions: Vec<PodCondition>) -> Pod {
        use k8s_openapi::api::core::v1::PodReadinessGate;
        let mut p = pod("Always", &["a"]);
        p.spec.as_mut().unwrap().readiness_gates = Some(
            ["g1", "g2"]
                .iter()
                .map(|g| PodReadinessGate {
                    condition_type: (*g).into(),
                })
                .collect(),
        );
        p.status = Some(ApiPodStatus {
            conditions: Some(conditions),
            ..Default::default()
        });
        p
    }

    #[test]
    fn readiness_gates_hold_ready() {
        use ContainerState::*;
        let missing = |g: &str| {
            format!("corresponding condition of pod readiness gate {g:?} does not exist.")
        };
        /// (case, the API pod's conditions, container state, Ready's
        /// status, reason and message)
        type Case = (
            &'static str,
            Vec<PodCondition>,
            ContainerState,
            &'static str,
            Option<&'static str>,
            Option<String>,
        );
        let cases: Vec<Case> = vec![
            (
                "no gate condition yet",
                vec![],
                Running,
                "False",
                Some(READINESS_GATES_NOT_READY),
                Some(format!("{}, {}", missing("g1"), missing("g2"))),
            ),
            (
                "one gate True",
                vec![api_condition("g1", "True")],
                Running,
                "False",
                Some(READINESS_GATES_NOT_READY),
                Some(missing("g2")),
            ),
            (
                "one gate False",
                vec![api_condition("g1", "False"), api_condition("g2", "True")],
                Running,
                "False",
                Some(READINESS_GATES_NOT_READY),
                Some(r#"the status of pod readiness gate "g1" is not "True", but False"#.into()),
            ),
            (
                "both gates True",
                vec![api_condition("g1", "True"), api_condition("g2", "True")],
                Running,
                "True",
                None,
                None,
            ),
            (
                "containers not ready come first",
                vec![],
                Created,
                "False",
                Some("ContainersNotReady"),
                Some("containers with unready status: [a]".into()),
            ),
        ];
        for (name, conditions, state, status, reason, message) in cases {
            let p = gated(conditions.clone());
            let s = generate_api_pod_status(
                &p,
                &rt(vec![ctr("a", state, 0, 0)]),
                &WaitingReasons::new(),
                "containerd",
                &NoProbes,
                false,
            );
            let ready = cond(&s, "Ready");
            assert_eq!(
                (
                    ready.status.as_str(),
                    ready.reason.as_deref(),
                    &ready.message
                ),
                (status, reason, &message),
                "{name}"
            );
            for c in &conditions {
                assert_eq!(cond(&s, &c.type_), c, "{name}: {} kept as is", c.type_);
            }
            // What the kubelet patches leaves the gates' conditions alone.
            let owned = kubelet_owned(&s);
            let kinds: Vec<&str> = owned
                .conditions
                .iter()
                .flatten()
                .map(|c| c.type_.as_str())
                .collect();
            assert_eq!(
                kinds,
                [
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled"
                ],
                "{name}"
            );
            // The status manager keeps the times others gave their conditions.
            let mut next = s.clone();
            carry_over(
                &mut next,
                Some(&s),
                &time_from_nanos(9_000_000_000).unwrap(),
            );
            for c in &conditions {
                assert_eq!(
                    cond(&next, &c.type_).last_transition_time,
                    c.last_transition_time
                );
            }
        }
    }

    #[test]
    fn readiness_reconcile_when_a_gate_changes() {
        let ready = |status: &str, message: Option<&str>| PodCondition {
            message: message.map(Into::into),
            ..api_condition("Ready", status)
        };
        let missing_g2 = r#"corresponding condition of pod readiness gate "g2" does not exist."#;
        let cases = vec![
            (
                "gate g1 set since Ready was written",
                vec![
                    api_condition("g1", "True"),
                    api_condition("ContainersReady", "True"),
                    ready("False", Some("stale")),
                ],
                true,
            ),
            (
                "Ready already says so",
                vec![
                    api_condition("g1", "True"),
                    api_condition("ContainersReady", "True"),
                    ready("False", Some(missing_g2)),
                ],
                false,
            ),
            (
                "both gates True, Ready still False",
                vec![
                    api_condition("g1", "True"),
                    api_condition("g2", "True"),
                    api_condition("ContainersReady", "True"),
                    ready("False", Some("x")),
                ],
                true,
            ),
            (
                "a gate went False under a True Ready",
                vec![
                    api_condition("g1", "False"),
                    api_condition("g2", "True"),
                    api_condition("ContainersReady", "True"),
                    ready("True", None),
                ],
                true,
            ),
            (
                "no Ready condition yet",
                vec![api_condition("g1", "True")],
                false,
            ),
        ];
        for (name, conditions, want) in cases {
            assert_eq!(
                needs_readiness_reconcile(&gated(conditions)),
                want,
                "{name}"
            );
        }
        let mut no_gates = gated(vec![
            api_condition("ContainersReady", "True"),
            ready("False", None),
        ]);
        no_gates.spec.as_mut().unwrap().readiness_gates = None;
        assert!(!needs_readiness_reconcile(&no_gates), "no gates");
    }

    /// The status of `p` with these containers in the runtime, nothing
    /// probed or waiting.
    fn api_status(p: &Pod, containers: Vec<ContainerStatus>) -> ApiPodStatus {
        generate_api_pod_status(
            p,
            &rt(containers),
            &WaitingReasons::new(),
            "containerd",
            &NoProbes,
            false,
        )
    }

    /// The stop signal the runtime reports is the container's status'
    /// stopSignal (none when it reports none).
    #[test]
    fn a_stop_signal_the_runtime_reports_is_in_the_status() {
        use ContainerState::*;
        let p = pod("Always", &["a", "b"]);
        let mut a = ctr("a", Running, 0, 0);
        a.stop_signal = Some("SIGUSR1".into());
        let s = api_status(&p, vec![a, ctr("b", Running, 0, 0)]);
        let signals: Vec<Option<&str>> = s
            .container_statuses
            .iter()
            .flatten()
            .map(|c| c.stop_signal.as_deref())
            .collect();
        assert_eq!(signals, [Some("SIGUSR1"), None]);
    }

    /// The identity the runtime reports is the container status' `user`
    /// (upstream's SupplementalGroupsPolicy status); none when it reports
    /// none.
    #[test]
    fn the_user_the_runtime_reports_is_in_the_status() {
        use crate::runtime::{ContainerUser, LinuxContainerUser};
        use ContainerState::*;
        let p = pod("Always", &["a", "b"]);
        let mut a = ctr("a", Running, 0, 0);
        a.user = Some(ContainerUser {
            linux: Some(LinuxContainerUser {
                uid: 1000,
                gid: 1000,
                supplemental_groups: vec![1000, 50000, 60000],
            }),
        });
        let s = api_status(&p, vec![a, ctr("b", Running, 0, 0)]);
        let users: Vec<serde_json::Value> = s
            .container_statuses
            .iter()
            .flatten()
            .map(|c| serde_json::to_value(&c.user).unwrap())
            .collect();
        assert_eq!(
            users,
            [
                serde_json::json!({"linux": {"uid": 1000, "gid": 1000, "supplementalGroups": [1000, 50000, 60000]}}),
                serde_json::Value::Null,
            ]
        );
    }

    #[test]
    fn the_status_and_the_kubelet_conditions_carry_the_observed_generation() {
        use ContainerState::*;
        let mut p = pod("Always", &["a"]);
        let s = api_status(&p, vec![ctr("a", Running, 0, 0)]);
        assert_eq!(s.observed_generation, None, "a pod without a generation");
        p.metadata.generation = Some(4);
        let s = api_status(&p, vec![ctr("a", Running, 0, 0)]);
        assert_eq!(s.observed_generation, Some(4));
        let conditions = s.conditions.unwrap();
        assert_eq!(conditions.len(), 5);
        for c in conditions {
            assert_eq!(c.observed_generation, Some(4), "{}", c.type_);
        }
    }

    #[test]
    fn ephemeral_container_statuses_leave_phase_and_readiness_alone() {
        use ContainerState::*;
        let mut p = pod("Always", &["a"]);
        p.spec.as_mut().unwrap().ephemeral_containers =
            Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                name: "debugger".into(),
                image: Some("busybox:1".into()),
                ..Default::default()
            }]);
        let status_of = |containers: Vec<ContainerStatus>| api_status(&p, containers);
        let s = status_of(vec![ctr("a", Running, 0, 0)]);
        let e = &s.ephemeral_container_statuses.as_ref().unwrap()[0];
        let w = e.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("ContainerCreating"));
        assert_eq!(
            cond(&s, "Ready").status,
            "True",
            "not counted for readiness"
        );

        let s = status_of(vec![
            ctr("a", Running, 0, 0),
            ctr("debugger", Running, 0, 0),
        ]);
        let e = &s.ephemeral_container_statuses.as_ref().unwrap()[0];
        assert!(e.state.as_ref().unwrap().running.is_some());
        assert_eq!((e.ready, e.started), (false, None), "no prober reads it");
        assert_eq!(s.phase.as_deref(), Some(PHASE_RUNNING));

        let s = status_of(vec![ctr("a", Running, 0, 0), ctr("debugger", Exited, 1, 0)]);
        let e = &s.ephemeral_container_statuses.as_ref().unwrap()[0];
        assert!(e.state.as_ref().unwrap().terminated.is_some());
        assert_eq!(
            s.phase.as_deref(),
            Some(PHASE_RUNNING),
            "its exit ends nothing"
        );
        let plain = api_status(&pod("Always", &["a"]), vec![]);
        assert_eq!(plain.ephemeral_container_statuses, None);
    }

    #[test]
    fn init_container_statuses_and_phases() {
        use ContainerState::*;
        let mut p = pod("Never", &["a"]);
        p.spec.as_mut().unwrap().init_containers = Some(vec![
            Container {
                name: "i0".into(),
                ..Default::default()
            },
            Container {
                name: "side".into(),
                restart_policy: Some("Always".into()),
                ..Default::default()
            },
        ]);
        let status_of = |containers: Vec<ContainerStatus>| api_status(&p, containers);
        let s = status_of(vec![ctr("i0", Running, 0, 0)]);
        assert_eq!(s.phase.as_deref(), Some(PHASE_PENDING));
        assert_eq!(cond(&s, "Initialized").status, "False");
        assert_eq!(
            cond(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [i0 side]")
        );
        let init = s.init_container_statuses.as_ref().unwrap();
        assert_eq!(init.len(), 2);
        let w = init[1].state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("PodInitializing"));
        let regular = &s.container_statuses.as_ref().unwrap()[0];
        let w = regular.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("PodInitializing"));

        let s = status_of(vec![ctr("i0", Exited, 1, 0)]);
        assert_eq!(
            s.phase.as_deref(),
            Some(PHASE_FAILED),
            "failed init under Never"
        );

        let s = status_of(vec![
            ctr("a", Running, 0, 0),
            ctr("side", Running, 0, 0),
            ctr("i0", Exited, 0, 0),
        ]);
        assert_eq!(s.phase.as_deref(), Some(PHASE_RUNNING));
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(cond(&s, "Ready").status, "True");
        let init = s.init_container_statuses.as_ref().unwrap();
        assert!(init[0].ready, "a succeeded init container is ready");
        assert!(init[1].ready && init[1].started == Some(true));

        let s = status_of(vec![
            ctr("a", Exited, 0, 0),
            ctr("side", Running, 0, 0),
            ctr("i0", Exited, 0, 0),
        ]);
        assert_eq!(
            s.phase.as_deref(),
            Some(PHASE_RUNNING),
            "running until the kubelet stops the sidecar"
        );
        let s = status_of(vec![
            ctr("a", Exited, 0, 0),
            ctr("side", Exited, 137, 0),
            ctr("i0", Exited, 0, 0),
        ]);
        assert_eq!(
            s.phase.as_deref(),
            Some(PHASE_SUCCEEDED),
            "a stopped sidecar's exit code does not count"
        );
    }

    #[test]
    fn an_init_container_own_policy_decides_its_failure() {
        use ContainerState::*;
        for (pod_policy, own, want) in [
            ("Never", None, PHASE_FAILED),
            ("Never", Some("OnFailure"), PHASE_PENDING),
            ("Always", None, PHASE_PENDING),
            ("Always", Some("Never"), PHASE_FAILED),
        ] {
            let mut p = pod(pod_policy, &["a"]);
            p.spec.as_mut().unwrap().init_containers = Some(vec![Container {
                name: "i0".into(),
                restart_policy: own.map(Into::into),
                ..Default::default()
            }]);
            let s = generate_api_pod_status(
                &p,
                &rt(vec![ctr("i0", Exited, 1, 0)]),
                &WaitingReasons::new(),
                "containerd",
                &NoProbes,
                false,
            );
            assert_eq!(s.phase.as_deref(), Some(want), "{pod_policy} {own:?}");
        }
    }

    #[test]
    fn active_deadline() {
        let mut p = pod("Always", &["a"]);
        assert!(!past_active_deadline(&p, Some(100), 1_000), "no deadline");
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(30);
        for (start, now, want) in [
            (None, 1_000, false),
            (Some(100), 129, false),
            (Some(100), 130, true),
            (Some(100), 500, true),
        ] {
            assert_eq!(
                past_active_deadline(&p, start, now),
                want,
                "{start:?} {now}"
            );
        }
        let mut st = ApiPodStatus::default();
        fail_for_deadline(&mut st);
        assert_eq!(
            (st.phase.as_deref(), st.reason.as_deref()),
            (Some(PHASE_FAILED), Some(DEADLINE_EXCEEDED))
        );
    }

    #[test]
    fn qos() {
        let q = |s: &str| Quantity(s.into());
        let with = |req: &[(&str, &str)], lim: &[(&str, &str)]| {
            let mut p = pod("Always", &["a"]);
            p.spec.as_mut().unwrap().containers[0].resources = Some(ResourceRequirements {
                requests: (!req.is_empty())
                    .then(|| req.iter().map(|(k, v)| ((*k).into(), q(v))).collect()),
                limits: (!lim.is_empty())
                    .then(|| lim.iter().map(|(k, v)| ((*k).into(), q(v))).collect()),
                ..Default::default()
            });
            p
        };
        assert_eq!(qos_class(&pod("Always", &["a"])), "BestEffort");
        assert_eq!(qos_class(&with(&[("cpu", "1")], &[])), "Burstable");
        assert_eq!(
            qos_class(&with(&[], &[("cpu", "1"), ("memory", "1Gi")])),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&with(
                &[("cpu", "500m")],
                &[("cpu", "1"), ("memory", "1Gi")]
            )),
            "Burstable"
        );
        // Equal amounts in different spellings are equal.
        assert_eq!(
            qos_class(&with(
                &[("cpu", "1000m"), ("memory", "1024Mi")],
                &[("cpu", "1"), ("memory", "1Gi")]
            )),
            "Guaranteed"
        );
        // Pod-level resources decide when set; a recorded class wins.
        let mut p = pod("Always", &["a"]);
        p.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
            limits: Some([("cpu".into(), q("1")), ("memory".into(), q("1Gi"))].into()),
            ..Default::default()
        });
        assert_eq!(qos_class(&p), "Guaranteed");
        p.status = Some(ApiPodStatus {
            qos_class: Some("Burstable".into()),
            ..Default::default()
        });
        assert_eq!(qos_class(&p), "Burstable");
    }

    #[test]
    fn carry_over_keeps_times() {
        let p = pod("Always", &["a"]);
        let t0 = time_from_nanos(1_000_000_000).unwrap();
        let t1 = time_from_nanos(5_000_000_000).unwrap();
        let mut first = generate_api_pod_status(
            &p,
            &rt(vec![]),
            &WaitingReasons::new(),
            "containerd",
            &NoProbes,
            false,
        );
        carry_over(&mut first, None, &t0);
        let mut second = generate_api_pod_status(
            &p,
            &rt(vec![ctr("a", ContainerState::Running, 0, 0)]),
            &WaitingReasons::new(),
            "containerd",
            &NoProbes,
            false,
        );
        carry_over(&mut second, Some(&first), &t1);
        assert_eq!(second.start_time, Some(t0.clone()));
        // The observed generation never goes back.
        let mut newer = second.clone();
        newer.observed_generation = Some(3);
        second.observed_generation = Some(2);
        carry_over(&mut second, Some(&newer), &t1);
        assert_eq!(second.observed_generation, Some(3));
        let get = |s: &ApiPodStatus, t: &str| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(get(&second, "PodScheduled"), Some(t0));
        assert_eq!(get(&second, "Ready"), Some(t1));
    }

    #[test]
    fn pod_ips_one_per_family_the_nodes_first() {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cases: &[(&[&str], &[&str], &[&str])] = &[
            (&["10.0.0.1"], &["192.0.2.1"], &["10.0.0.1"]),
            (
                &["fd00::1", "10.0.0.1"],
                &["192.0.2.1"],
                &["10.0.0.1", "fd00::1"],
            ),
            (
                &["10.0.0.1", "fd00::1"],
                &["2001:db8::1"],
                &["fd00::1", "10.0.0.1"],
            ),
            // Two of one family (what the API server refuses): the first.
            (&["10.0.0.2", "10.0.0.1"], &[], &["10.0.0.2"]),
            (&["fd00::1"], &[], &["fd00::1"]),
            (&["not-an-ip"], &[], &[]),
            (&[], &["192.0.2.1"], &[]),
        ];
        for (ips, node, want) in cases {
            assert_eq!(
                sort_pod_ips(&v(ips), &v(node)),
                v(want),
                "{ips:?} on {node:?}"
            );
        }
    }

    #[test]
    fn host_ips_and_host_network_pod_ips() {
        let node = ["192.0.2.10".to_string()];
        let p = pod("Always", &["a"]);
        let mut st = generate_api_pod_status(
            &p,
            &rt(vec![]),
            &WaitingReasons::new(),
            "containerd",
            &NoProbes,
            false,
        );
        set_host_ips(&mut st, &p, &node);
        assert_eq!(st.host_ip.as_deref(), Some("192.0.2.10"));
        assert_eq!(
            st.pod_ip.as_deref(),
            Some("10.88.0.5"),
            "pod network keeps its own IP"
        );
        let mut hp = p.clone();
        hp.spec.as_mut().unwrap().host_network = Some(true);
        let mut st = generate_api_pod_status(
            &hp,
            &rt(vec![]),
            &WaitingReasons::new(),
            "containerd",
            &NoProbes,
            false,
        );
        set_host_ips(&mut st, &hp, &node);
        assert_eq!(st.pod_ip.as_deref(), Some("192.0.2.10"));
        assert_eq!(st.pod_ips.unwrap().len(), 1);
    }

    #[test]
    fn an_evicted_status_its_condition_and_what_the_api_gets() {
        let t = |s| Time(Timestamp::from_second(s).unwrap());
        let mut pod = Pod::default();
        pod.metadata.generation = Some(3);
        let mut st = ApiPodStatus {
            phase: Some(PHASE_RUNNING.into()),
            conditions: Some(vec![condition("Ready", true, None, None)]),
            ..Default::default()
        };
        let memory = KubeletTermination {
            kind: TerminationKind::Evicted,
            message: "The node was low on resource: memory. ".into(),
            disruption: true,
        };
        fail_for_termination(&mut st, &pod, &memory, &t(10));
        assert_eq!(st.phase.as_deref(), Some(PHASE_FAILED));
        assert_eq!(st.reason.as_deref(), Some("Evicted"));
        let dt = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == DISRUPTION_TARGET)
            .unwrap()
            .clone();
        assert_eq!(dt.status, "True");
        assert_eq!(dt.reason.as_deref(), Some("TerminationByKubelet"));
        assert_eq!(dt.observed_generation, Some(3));
        assert_eq!(dt.last_transition_time, Some(t(10)));
        // Applied again: the condition keeps its time.
        fail_for_termination(&mut st, &pod, &memory, &t(20));
        let kept = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == DISRUPTION_TARGET);
        assert_eq!(kept.unwrap().last_transition_time, Some(t(10)));
        // The API gets DisruptionTarget with the terminal phase only.
        let owned = kubelet_owned(&st);
        assert!(
            owned
                .conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == DISRUPTION_TARGET)
        );
        st.phase = Some(PHASE_RUNNING.into());
        let owned = kubelet_owned(&st);
        assert!(
            !owned
                .conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == DISRUPTION_TARGET)
        );
        // A local storage eviction: no condition (as upstream).
        let mut st = ApiPodStatus::default();
        let local = KubeletTermination {
            kind: TerminationKind::Evicted,
            message: "Usage of EmptyDir volume ...".into(),
            disruption: false,
        };
        fail_for_termination(&mut st, &pod, &local, &t(10));
        assert_eq!(st.reason.as_deref(), Some("Evicted"));
        assert!(st.conditions.is_none());
    }

    #[test]
    fn a_node_shutdown_fails_a_pod_but_one_that_succeeded() {
        let pod = Pod::default();
        let shutdown = KubeletTermination {
            kind: TerminationKind::NodeShutdown,
            message: crate::nodeshutdown::POD_MESSAGE.into(),
            disruption: true,
        };
        let at = Time(Timestamp::from_second(10).unwrap());
        for (phase, want) in [
            (PHASE_RUNNING, PHASE_FAILED),
            (PHASE_FAILED, PHASE_FAILED),
            (PHASE_SUCCEEDED, PHASE_SUCCEEDED),
        ] {
            let mut st = ApiPodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            };
            fail_for_termination(&mut st, &pod, &shutdown, &at);
            assert_eq!(st.phase.as_deref(), Some(want), "from {phase}");
            assert_eq!(st.reason.as_deref(), Some("Terminated"));
            assert_eq!(
                st.message.as_deref(),
                Some("Pod was terminated in response to imminent node shutdown.")
            );
            let dt = &st.conditions.as_ref().unwrap()[0];
            assert_eq!(
                (dt.type_.as_str(), dt.reason.as_deref()),
                ("DisruptionTarget", Some("TerminationByKubelet"))
            );
        }
    }

    #[test]
    fn a_terminal_phase_the_api_has_is_never_left() {
        let pod = PodBuilder::default()
            .status(ApiPodStatus {
                phase: Some(PHASE_FAILED.into()),
                reason: Some("Evicted".into()),
                message: Some("gone".into()),
                ..Default::default()
            })
            .build();
        let mut st = ApiPodStatus {
            phase: Some(PHASE_RUNNING.into()),
            ..Default::default()
        };
        keep_api_terminal_phase(&mut st, &pod);
        assert_eq!(
            (
                st.phase.as_deref(),
                st.reason.as_deref(),
                st.message.as_deref()
            ),
            (Some(PHASE_FAILED), Some("Evicted"), Some("gone"))
        );
        // Not terminal in the API: nothing changes.
        let mut st = ApiPodStatus {
            phase: Some(PHASE_RUNNING.into()),
            ..Default::default()
        };
        keep_api_terminal_phase(&mut st, &Pod::default());
        assert_eq!(st.phase.as_deref(), Some(PHASE_RUNNING));
    }

    #[test]
    fn volume_mounts_are_reported_with_their_recursive_read_only_mode() {
        use k8s_openapi::api::core::v1::VolumeMount;
        let mount = |name: &str, ro: Option<bool>, rro: Option<&str>| VolumeMount {
            name: name.into(),
            mount_path: format!("/{name}"),
            read_only: ro,
            recursive_read_only: rro.map(Into::into),
            ..Default::default()
        };
        let pod = crate::testing::PodBuilder::default()
            .container(Container {
                volume_mounts: Some(vec![
                    mount("rw", None, None),
                    mount("ro", Some(true), None),
                    mount("rro", Some(true), Some("Enabled")),
                    mount("maybe", Some(true), Some("IfPossible")),
                ]),
                ..crate::testing::container("app")
            })
            .build();
        let report = |supported| {
            let mut status = ApiPodStatus {
                container_statuses: Some(vec![ApiContainerStatus {
                    name: "app".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            };
            set_volume_mount_statuses(&mut status, &pod, supported);
            status.container_statuses.unwrap()[0]
                .volume_mounts
                .clone()
                .unwrap()
                .into_iter()
                .map(|m| (m.name, m.read_only, m.recursive_read_only))
                .collect::<Vec<_>>()
        };
        let row = |n: &str, ro: Option<bool>, rro: Option<&str>| {
            (n.to_owned(), ro, rro.map(str::to_owned))
        };
        assert_eq!(
            report(true),
            [
                row("rw", None, None),
                row("ro", Some(true), Some("Disabled")),
                row("rro", Some(true), Some("Enabled")),
                row("maybe", Some(true), Some("Enabled")),
            ]
        );
        // Without the handler's support nothing is recursively read-only
        // (the container asking Enabled is refused at its creation).
        assert_eq!(
            report(false),
            [
                row("rw", None, None),
                row("ro", Some(true), Some("Disabled")),
                row("rro", Some(true), Some("Disabled")),
                row("maybe", Some(true), Some("Disabled")),
            ]
        );
    }
}
