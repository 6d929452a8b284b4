//! Status synthesis (upstream's `generateAPIPodStatus` and `getPhase`): turn
//! the runtime's view of a pod into the v1 PodStatus the status manager
//! owns. Pure: wall-clock time is passed in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus, HostIP, Pod, PodCondition, PodIP,
    PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::runtime::{ContainerState, ContainerStatus, PodStatus, SandboxState};

pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_SUCCEEDED: &str = "Succeeded";
pub const PHASE_FAILED: &str = "Failed";

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

fn is_terminal(phase: &str) -> bool {
    phase == PHASE_SUCCEEDED || phase == PHASE_FAILED
}

/// The pod phase from its containers' states (upstream's `getPhase`).
pub fn pod_phase(
    pod: &Pod,
    statuses: &[ApiContainerStatus],
    pod_is_terminal: bool,
) -> &'static str {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in statuses {
        let state = s.state.as_ref();
        if let Some(t) = state.and_then(|st| st.terminated.as_ref()) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.and_then(|st| st.running.as_ref()).is_some() {
            running += 1;
        } else if let Some(w) = state.and_then(|st| st.waiting.as_ref()) {
            // A container that ran before and waits to restart counts as stopped.
            if s.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
                && w.reason.as_deref() != Some("ContainerCreating")
            {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 && !pod_is_terminal {
        return PHASE_PENDING;
    }
    if running > 0 && !pod_is_terminal {
        return PHASE_RUNNING;
    }
    if stopped > 0 && running == 0 {
        if pod_is_terminal || policy == "Never" {
            return if stopped == succeeded && waiting == 0 {
                PHASE_SUCCEEDED
            } else {
                PHASE_FAILED
            };
        }
        if policy == "OnFailure" && stopped == succeeded {
            return PHASE_SUCCEEDED;
        }
        return PHASE_RUNNING;
    }
    if pod_is_terminal {
        return PHASE_FAILED;
    }
    PHASE_PENDING
}

/// The QoS class upstream derives from requests and limits.
pub fn qos_class(pod: &Pod) -> &'static str {
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[]);
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let r = c.resources.as_ref();
        let requests = r.and_then(|r| r.requests.as_ref());
        let limits = r.and_then(|r| r.limits.as_ref());
        for res in ["cpu", "memory"] {
            let req = requests.and_then(|m| m.get(res));
            let lim = limits.and_then(|m| m.get(res));
            any |= req.is_some() || lim.is_some();
            // A request defaults to the limit, so only a differing request breaks it.
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(q), Some(l)) if q != l => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
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

fn container_status(
    spec: &Container,
    rt: &PodStatus,
    waiting: &WaitingReasons,
    runtime_name: &str,
) -> ApiContainerStatus {
    let mut instances = rt.containers.iter().filter(|c| c.name == spec.name);
    let newest = instances.next();
    let previous = instances.find(|c| c.state == ContainerState::Exited);
    let creating = || ContainerStateWaiting {
        reason: Some("ContainerCreating".into()),
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
    let running = state.running.is_some();
    ApiContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        image_id: newest.map(|c| c.image_ref.clone()).unwrap_or_default(),
        container_id: newest.map(|c| format!("{runtime_name}://{}", c.id)),
        ready: running,
        started: Some(running),
        restart_count: newest.map(|c| c.restart_count).unwrap_or(0),
        last_state: last.map(|c| ApiState {
            terminated: Some(terminated(c, runtime_name)),
            ..Default::default()
        }),
        state: Some(state),
        ..Default::default()
    }
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

/// The API status of a pod from the runtime's view (upstream's
/// `generateAPIPodStatus`). `pod_is_terminal` once the kubelet has stopped
/// the pod for good: running/pending phases then become final ones.
pub fn generate_api_pod_status(
    pod: &Pod,
    rt: &PodStatus,
    waiting: &WaitingReasons,
    runtime_name: &str,
    pod_is_terminal: bool,
) -> ApiPodStatus {
    let spec_containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[]);
    let statuses: Vec<ApiContainerStatus> = spec_containers
        .iter()
        .map(|c| container_status(c, rt, waiting, runtime_name))
        .collect();
    let phase = pod_phase(pod, &statuses, pod_is_terminal);

    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let sandbox_ready = rt
        .sandboxes
        .first()
        .is_some_and(|s| s.state == SandboxState::Ready && (host_network || !s.ips.is_empty()));
    let unready: Vec<&str> = statuses
        .iter()
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
    let conditions = vec![
        condition(
            "PodReadyToStartContainers",
            sandbox_ready && !is_terminal(phase),
            None,
            None,
        ),
        condition("Initialized", true, None, None),
        condition("Ready", containers_ready, Some(reason), unready_msg.clone()),
        condition(
            "ContainersReady",
            containers_ready,
            Some(reason),
            unready_msg,
        ),
        condition("PodScheduled", true, None, None),
    ];

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
        ..Default::default()
    }
}

/// Fill hostIP and hostIPs with the node's addresses; a hostNetwork pod's
/// IPs are the node's too, as upstream reports them.
pub fn set_host_ips(status: &mut ApiPodStatus, pod: &Pod, host_ips: &[String]) {
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
/// time and, for conditions whose status did not flip, their transition
/// time (upstream's status manager does this on every SetPodStatus).
pub fn carry_over(new: &mut ApiPodStatus, old: Option<&ApiPodStatus>, now: &Time) {
    new.start_time = old
        .and_then(|o| o.start_time.clone())
        .or_else(|| Some(now.clone()));
    for c in new.conditions.iter_mut().flatten() {
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
    use crate::runtime::SandboxStatus;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(policy: &str, names: &[&str]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: names
                    .iter()
                    .map(|n| Container {
                        name: (*n).into(),
                        image: Some("busybox:1".into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
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
            grace_period: None,
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
        ];
        for (name, p, containers, terminal, want) in cases {
            let s = generate_api_pod_status(
                &p,
                &rt(containers),
                &WaitingReasons::new(),
                "containerd",
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
    }

    #[test]
    fn carry_over_keeps_times() {
        let p = pod("Always", &["a"]);
        let t0 = time_from_nanos(1_000_000_000).unwrap();
        let t1 = time_from_nanos(5_000_000_000).unwrap();
        let mut first =
            generate_api_pod_status(&p, &rt(vec![]), &WaitingReasons::new(), "containerd", false);
        carry_over(&mut first, None, &t0);
        let mut second = generate_api_pod_status(
            &p,
            &rt(vec![ctr("a", ContainerState::Running, 0, 0)]),
            &WaitingReasons::new(),
            "containerd",
            false,
        );
        carry_over(&mut second, Some(&first), &t1);
        assert_eq!(second.start_time, Some(t0.clone()));
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
    fn host_ips_and_host_network_pod_ips() {
        let node = ["192.0.2.10".to_string()];
        let p = pod("Always", &["a"]);
        let mut st =
            generate_api_pod_status(&p, &rt(vec![]), &WaitingReasons::new(), "containerd", false);
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
            false,
        );
        set_host_ips(&mut st, &hp, &node);
        assert_eq!(st.pod_ip.as_deref(), Some("192.0.2.10"));
        assert_eq!(st.pod_ips.unwrap().len(), 1);
    }
}
