//! compute-pod-actions (upstream's `kuberuntime.computePodActions` and
//! `computeInitContainerActions`): from a pod's spec, what the runtime holds
//! for it and what the prober says, decide what SyncPod must do. Pure: the
//! runtime manager carries the decision out.
//!
//! Init containers run one at a time, in order, each to success before the
//! next; sidecars (init containers with `restartPolicy: Always`) start in
//! order, keep running, and gate later init containers on their startup
//! probe. Regular containers start once initialization is done.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::podspec::{
    ContainerKind, container_should_restart, init_containers, is_sidecar, regular_containers,
    restart_policy,
};
use crate::runtime::{ContainerState, ContainerStatus, PodStatus, ProbeView, SandboxState};

/// What SyncPod has to do to converge one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and sandbox first (the sandbox is gone or changed,
    /// or nothing is left to run).
    pub kill_pod: bool,
    /// Create a new sandbox with this attempt number.
    pub create_sandbox: Option<u32>,
    /// The ready sandbox to start containers in, when no new one is needed.
    pub sandbox_id: Option<String>,
    /// Running containers to stop, each with the reason.
    pub containers_to_kill: Vec<KillContainer>,
    /// Containers to create and start, in this order (init containers first).
    pub containers_to_start: Vec<StartContainer>,
    /// Containers created but never started (a crash between create and
    /// start): removed before their replacement is created, so no duplicate
    /// survives.
    pub containers_to_remove: Vec<String>,
    /// Running containers whose resources are updated in place (an
    /// admitted resize), shrinking ones first.
    pub containers_to_update: Vec<ContainerUpdate>,
}

impl PodActions {
    /// Whether carrying these out changes anything in the runtime.
    pub fn acts(&self) -> bool {
        self.kill_pod
            || self.create_sandbox.is_some()
            || !self.containers_to_kill.is_empty()
            || !self.containers_to_start.is_empty()
            || !self.containers_to_remove.is_empty()
            || !self.containers_to_update.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillContainer {
    pub id: String,
    pub name: String,
    /// The Killing event's message.
    pub reason: String,
    /// A grace period that overrides the pod's (a probe's
    /// terminationGracePeriodSeconds).
    pub grace: Option<i64>,
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartContainer {
    /// Index into the spec's list of this kind: `initContainers`,
    /// `containers` or `ephemeralContainers`.
    pub index: usize,
    pub kind: ContainerKind,
    /// The restart count the new container carries.
    pub restart_count: i32,
}

/// The hash recorded on a container (`io.kubernetes.container.hash`): a
/// change of it restarts the container. Upstream's HashContainer, byte for
/// byte, so either kubelet recognises the other's containers: the JSON of
/// the container's name and image (as Go's encoding/json writes a map:
/// keys sorted, `<`, `>`, `&` escaped), dumped as go-spew dumps a byte
/// slice (`([]uint8)[123 34 ...]`), FNV-1a 32 bits, in hex. The rest of an
/// API pod's container is immutable; resources change in place, through a
/// resize.
pub fn container_hash(container: &Container) -> String {
    let fields = std::collections::BTreeMap::from([
        ("image", container.image.as_deref().unwrap_or("")),
        ("name", container.name.as_str()),
    ]);
    let json = serde_json::to_string(&fields)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    let bytes: Vec<String> = json.bytes().map(|b| b.to_string()).collect();
    let dumped = format!("([]uint8)[{}]", bytes.join(" "));
    format!("{:x}", crate::checkpoint::fnv1a32(dumped.as_bytes()))
}

/// Whether a container is restarted after a failure with no exit code to
/// match rules against (a failed probe of a running container, an init
/// container in an unknown state): its own restartPolicy unless Never,
/// else the pod's unless Never.
fn restarts_on_failure(c: &Container, pod: &Pod) -> bool {
    c.restart_policy.as_deref().unwrap_or(restart_policy(pod)) != "Never"
}

/// Whether a container that is not running should be started (again).
fn should_start(spec: &Container, pod: &Pod, last: Option<&ContainerStatus>) -> bool {
    match last {
        None => true,
        Some(c) => match c.state {
            ContainerState::Created => true,
            ContainerState::Running => false,
            ContainerState::Exited | ContainerState::Unknown => {
                container_should_restart(spec, pod, c.exit_code)
            }
        },
    }
}

/// The restart count a new instance of a container takes: one more than the
/// last instance that actually ran.
fn next_restart_count(last: Option<&ContainerStatus>) -> i32 {
    match last {
        None => 0,
        Some(c) if c.state == ContainerState::Created => c.restart_count,
        Some(c) => c.restart_count + 1,
    }
}

/// Decide whether the pod needs a new sandbox, and which attempt it takes.
fn sandbox_change(pod: &Pod, status: &PodStatus) -> (bool, u32, Option<String>) {
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let Some(newest) = status.sandboxes.first() else {
        return (true, 0, None);
    };
    let ready = status
        .sandboxes
        .iter()
        .filter(|s| s.state == SandboxState::Ready)
        .count();
    let changed = newest.state != SandboxState::Ready
        || ready > 1
        || newest.host_network != host_network
        || (!host_network && newest.ips.is_empty());
    if changed {
        (true, newest.attempt + 1, None)
    } else {
        (false, newest.attempt, Some(newest.id.clone()))
    }
}

/// Why a running container must be replaced, if it must: its spec changed,
/// or its liveness or startup probe failed. Returns (message, grace).
fn replace_reason(
    spec: &Container,
    running: &ContainerStatus,
    probes: &dyn ProbeView,
    init: bool,
) -> Option<(String, Option<i64>)> {
    let what = if init { "Init container" } else { "Container" };
    if running.hash != container_hash(spec) {
        return Some((format!("{what} {} definition changed", spec.name), None));
    }
    let probe_grace = |p: Option<&k8s_openapi::api::core::v1::Probe>| {
        p.and_then(|p| p.termination_grace_period_seconds)
    };
    if probes.liveness_failed(&running.id) {
        return Some((
            format!("{what} {} failed liveness probe", spec.name),
            probe_grace(spec.liveness_probe.as_ref()),
        ));
    }
    if probes.startup_failed(&running.id) {
        return Some((
            format!("{what} {} failed startup probe", spec.name),
            probe_grace(spec.startup_probe.as_ref()),
        ));
    }
    None
}

/// Whether a running sidecar counts as started: it has no startup probe,
/// or the probe succeeded.
fn sidecar_started(spec: &Container, running: &ContainerStatus, probes: &dyn ProbeView) -> bool {
    spec.startup_probe.is_none() || probes.started(&running.id)
}

/// Whether initialization is over (the pod's Initialized condition): a
/// regular container was created, or every init container succeeded
/// (sidecars: started). The same decision SyncPod acts on.
pub fn is_initialized(pod: &Pod, status: &PodStatus, probes: &dyn ProbeView) -> bool {
    PodActions::default().init_actions(pod, status, probes)
}

impl PodActions {
    fn start(&mut self, index: usize, kind: ContainerKind, last: Option<&ContainerStatus>) {
        if let Some(c) = last.filter(|c| c.state == ContainerState::Created) {
            self.containers_to_remove.push(c.id.clone());
        }
        self.containers_to_start.push(StartContainer {
            index,
            kind,
            restart_count: next_restart_count(last),
        });
    }

    pub(crate) fn kill(&mut self, c: &ContainerStatus, reason: String, grace: Option<i64>) {
        self.containers_to_kill.push(KillContainer {
            id: c.id.clone(),
            name: c.name.clone(),
            reason,
            grace,
        });
    }

    /// Keep a sidecar running: start it when it is not, replace it when its
    /// spec changed or a probe failed. True when it is running and started.
    fn keep_sidecar(
        &mut self,
        index: usize,
        spec: &Container,
        last: Option<&ContainerStatus>,
        probes: &dyn ProbeView,
    ) -> bool {
        match last {
            Some(c) if c.state == ContainerState::Running => {
                if let Some((why, grace)) = replace_reason(spec, c, probes, true) {
                    self.kill(c, format!("{why}, will be restarted"), grace);
                    self.containers_to_start.push(StartContainer {
                        index,
                        kind: ContainerKind::Init,
                        restart_count: c.restart_count + 1,
                    });
                    return false;
                }
                sidecar_started(spec, c, probes)
            }
            _ => {
                self.start(index, ContainerKind::Init, last);
                false
            }
        }
    }

    /// The init containers' part (upstream's computeInitContainerActions):
    /// true when initialization is over and regular containers may run.
    fn init_actions(&mut self, pod: &Pod, status: &PodStatus, probes: &dyn ProbeView) -> bool {
        let inits = init_containers(pod);
        let initialized_before = regular_containers(pod)
            .iter()
            .any(|c| status.container(&c.name).is_some());
        // Init containers before the last one the runtime has seen are done:
        // their records may have been garbage collected since.
        let frontier = inits
            .iter()
            .rposition(|c| status.container(&c.name).is_some())
            .unwrap_or(0);
        for (index, spec) in inits.iter().enumerate() {
            let last = status.container(&spec.name);
            if initialized_before || index < frontier {
                if is_sidecar(spec) {
                    self.keep_sidecar(index, spec, last, probes);
                }
                continue;
            }
            if is_sidecar(spec) {
                if self.keep_sidecar(index, spec, last, probes) {
                    continue;
                }
                return false;
            }
            match last {
                None
                | Some(ContainerStatus {
                    state: ContainerState::Created,
                    ..
                }) => {
                    self.start(index, ContainerKind::Init, last);
                    return false;
                }
                Some(c) if c.state == ContainerState::Running => {
                    if let Some((why, grace)) = replace_reason(spec, c, probes, true) {
                        self.kill(c, why, grace);
                    }
                    return false;
                }
                Some(c) if c.state == ContainerState::Exited && c.exit_code == 0 => {}
                Some(c) => {
                    let restart = if c.state == ContainerState::Exited {
                        container_should_restart(spec, pod, c.exit_code)
                    } else {
                        restarts_on_failure(spec, pod)
                    };
                    if !restart {
                        // A failed init container that is not to run
                        // again: the pod has failed.
                        self.kill_pod = true;
                        self.containers_to_start.clear();
                        self.containers_to_remove.clear();
                        return false;
                    }
                    self.start(index, ContainerKind::Init, last);
                    return false;
                }
            }
        }
        true
    }
}

/// The actions when the pod needs a new sandbox (attempt `attempt`):
/// initialization from the first init container, else the regular
/// containers that may run again; nothing for a finished pod that must not
/// restart.
fn new_sandbox_actions(pod: &Pod, status: &PodStatus, attempt: u32) -> PodActions {
    let containers = regular_containers(pod);
    let inits = init_containers(pod);
    let policy = restart_policy(pod);
    // A pod that must not restart and has already run does not get a
    // new sandbox: it is done.
    if policy == "Never" && attempt != 0 && !status.containers.is_empty() {
        return PodActions {
            kill_pod: status
                .sandboxes
                .iter()
                .any(|s| s.state == SandboxState::Ready),
            ..Default::default()
        };
    }
    let mut actions = PodActions {
        kill_pod: !status.sandboxes.is_empty(),
        create_sandbox: Some(attempt),
        ..Default::default()
    };
    if !inits.is_empty() {
        // A new sandbox runs initialization again, from the first.
        actions.containers_to_start.push(StartContainer {
            index: 0,
            kind: ContainerKind::Init,
            restart_count: next_restart_count(status.container(&inits[0].name)),
        });
        return actions;
    }
    actions.containers_to_start = containers
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            let last = status.container(&c.name);
            // OnFailure (the container's, else the pod's): a container
            // that already succeeded is not rerun.
            let run_once = c.restart_policy.as_deref().unwrap_or(policy) == "OnFailure";
            !(run_once
                && last.is_some_and(|l| l.state == ContainerState::Exited && l.exit_code == 0))
        })
        .map(|(index, c)| StartContainer {
            index,
            kind: ContainerKind::Regular,
            restart_count: next_restart_count(status.container(&c.name)),
        })
        .collect();
    actions
}

/// compute-pod-actions: the whole decision, as a table of cases in tests.
pub fn compute_pod_actions(pod: &Pod, status: &PodStatus, probes: &dyn ProbeView) -> PodActions {
    let containers = regular_containers(pod);
    let inits = init_containers(pod);
    let (create, attempt, sandbox_id) = sandbox_change(pod, status);

    if create {
        return new_sandbox_actions(pod, status, attempt);
    }

    let mut actions = PodActions {
        sandbox_id,
        ..Default::default()
    };
    let initialized = actions.init_actions(pod, status, probes);
    if actions.kill_pod {
        actions.sandbox_id = None;
        return actions;
    }
    // Ephemeral containers start once, even while the pod initializes, and
    // ahead of the init containers (so a failing init container can be
    // debugged); never again once the runtime has a record of them.
    // Only their names are needed here: no conversion.
    let ephemeral_names: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .map(|e| e.name.as_str())
        .collect();
    let ephemeral: Vec<StartContainer> = ephemeral_names
        .iter()
        .enumerate()
        .filter(|(_, name)| status.container(name).is_none())
        .map(|(index, _)| StartContainer {
            index,
            kind: ContainerKind::Ephemeral,
            restart_count: 0,
        })
        .collect();
    actions.containers_to_start.splice(0..0, ephemeral);
    if !initialized {
        return actions;
    }
    let mut keep = 0;
    for (index, container) in containers.iter().enumerate() {
        let last = status.container(&container.name);
        match last {
            Some(c) if c.state == ContainerState::Running => {
                let Some((why, grace)) = replace_reason(container, c, probes, false) else {
                    keep += 1;
                    continue;
                };
                // A changed spec always restarts; a failed probe only when
                // the restart policy (the container's, else the pod's) allows.
                let restart =
                    restarts_on_failure(container, pod) || why.ends_with("definition changed");
                if restart {
                    actions.kill(c, format!("{why}, will be restarted"), grace);
                    actions.containers_to_start.push(StartContainer {
                        index,
                        kind: ContainerKind::Regular,
                        restart_count: c.restart_count + 1,
                    });
                } else {
                    actions.kill(c, why, grace);
                }
            }
            _ if should_start(container, pod, last) => {
                actions.start(index, ContainerKind::Regular, last)
            }
            _ => {}
        }
    }
    // Containers the spec no longer names are stopped too.
    for c in status.running_containers() {
        let named = |s: &Container| s.name == c.name;
        if !containers.iter().any(named)
            && !inits.iter().any(named)
            && !ephemeral_names.contains(&c.name.as_str())
        {
            actions.kill(
                c,
                format!("Container {} is not in the pod spec", c.name),
                None,
            );
        }
    }
    if keep == 0
        && !actions
            .containers_to_start
            .iter()
            .any(|s| s.kind == ContainerKind::Regular)
    {
        // No regular container runs or will: stop the pod, sidecars too.
        actions.kill_pod = true;
        actions.sandbox_id = None;
        actions.containers_to_kill.clear();
        actions.containers_to_start.clear();
        actions.containers_to_remove.clear();
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_act_when_they_change_the_runtime() {
        let kill = KillContainer {
            id: "c1".into(),
            name: "a".into(),
            reason: String::new(),
            grace: None,
        };
        let cases: Vec<(&str, PodActions, bool)> = vec![
            ("nothing", PodActions::default(), false),
            (
                "a ready sandbox alone",
                PodActions {
                    sandbox_id: Some("s1".into()),
                    ..Default::default()
                },
                false,
            ),
            (
                "kill the pod",
                PodActions {
                    kill_pod: true,
                    ..Default::default()
                },
                true,
            ),
            (
                "a new sandbox",
                PodActions {
                    create_sandbox: Some(0),
                    ..Default::default()
                },
                true,
            ),
            (
                "a container to kill",
                PodActions {
                    containers_to_kill: vec![kill],
                    ..Default::default()
                },
                true,
            ),
            (
                "a created container to remove",
                PodActions {
                    containers_to_remove: vec!["c2".into()],
                    ..Default::default()
                },
                true,
            ),
        ];
        for (what, actions, acts) in cases {
            assert_eq!(actions.acts(), acts, "{what}");
        }
    }
    use crate::podspec::ephemeral_containers;
    use crate::runtime::{NoProbes, SandboxStatus};
    use crate::testing::{PodBuilder, container};
    use k8s_openapi::api::core::v1::ContainerRestartRule;

    fn pod(policy: &str, names: &[&str]) -> Pod {
        PodBuilder::default()
            .restart_policy(policy)
            .containers(names.iter().map(|n| Container {
                image: Some("busybox:1".into()),
                ..container(n)
            }))
            .build()
    }

    fn sandbox(state: SandboxState, attempt: u32) -> SandboxStatus {
        SandboxStatus {
            id: format!("sb{attempt}"),
            state,
            attempt,
            created_at: 1,
            ips: vec!["10.88.0.2".into()],
            host_network: false,
        }
    }

    fn ctr(
        pod: &Pod,
        name: &str,
        state: ContainerState,
        exit: i32,
        restarts: i32,
    ) -> ContainerStatus {
        let spec = &pod.spec.as_ref().unwrap().containers;
        let hash = spec
            .iter()
            .find(|c| c.name == name)
            .map(container_hash)
            .unwrap_or_default();
        ContainerStatus {
            id: format!("{name}-{restarts}"),
            name: name.into(),
            state,
            hash,
            restart_count: restarts,
            image: "busybox:1".into(),
            image_ref: String::new(),
            created_at: 1,
            started_at: 1,
            finished_at: 0,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            grace_period: Some(30),
            stop_signal: None,
            user: None,
        }
    }

    fn status(sandboxes: Vec<SandboxStatus>, containers: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            sandboxes,
            containers,
            ..Default::default()
        }
    }

    fn start(index: usize, restart_count: i32) -> StartContainer {
        StartContainer {
            index,
            kind: ContainerKind::Regular,
            restart_count,
        }
    }

    #[test]
    fn ephemeral_containers_start_once_and_are_never_restarted() {
        use ContainerState::*;
        use SandboxState::*;
        use k8s_openapi::api::core::v1::EphemeralContainer;
        let mut debugged = pod("Always", &["a"]);
        debugged.spec.as_mut().unwrap().ephemeral_containers = Some(vec![EphemeralContainer {
            name: "debugger".into(),
            image: Some("busybox:1".into()),
            target_container_name: Some("a".into()),
            ..Default::default()
        }]);
        let (as_container, target) = ephemeral_containers(&debugged).remove(0);
        assert_eq!(
            (as_container.name.as_str(), target.as_deref()),
            ("debugger", Some("a"))
        );
        let eph = StartContainer {
            index: 0,
            kind: ContainerKind::Ephemeral,
            restart_count: 0,
        };
        let running_a = ctr(&debugged, "a", Running, 0, 0);
        let cases = [
            (
                "a new pod: the sandbox and its containers first",
                status(vec![], vec![]),
                vec![start(0, 0)],
                false,
            ),
            (
                "added to a running pod: started",
                status(vec![sandbox(Ready, 0)], vec![running_a.clone()]),
                vec![eph.clone()],
                false,
            ),
            (
                "running: kept, not stopped as a container the spec does not name",
                status(
                    vec![sandbox(Ready, 0)],
                    vec![running_a.clone(), ctr(&debugged, "debugger", Running, 0, 0)],
                ),
                vec![],
                false,
            ),
            (
                "exited: never restarted",
                status(
                    vec![sandbox(Ready, 0)],
                    vec![running_a.clone(), ctr(&debugged, "debugger", Exited, 1, 0)],
                ),
                vec![],
                false,
            ),
        ];
        for (what, st, want, kill_pod) in cases {
            let got = compute_pod_actions(&debugged, &st, &NoProbes);
            assert_eq!(got.containers_to_start, want, "{what}");
            assert!(got.containers_to_kill.is_empty(), "{what}: {got:?}");
            assert_eq!(got.kill_pod, kill_pod, "{what}");
        }

        // While an init container still runs, ahead of the next one.
        let mut initializing = debugged.clone();
        initializing.spec.as_mut().unwrap().init_containers = Some(vec![Container {
            name: "i0".into(),
            image: Some("busybox:1".into()),
            ..Default::default()
        }]);
        let got = compute_pod_actions(
            &initializing,
            &status(vec![sandbox(Ready, 0)], vec![]),
            &NoProbes,
        );
        assert_eq!(
            got.containers_to_start,
            vec![
                eph,
                StartContainer {
                    index: 0,
                    kind: ContainerKind::Init,
                    restart_count: 0,
                }
            ]
        );
    }

    #[test]
    fn table() {
        use ContainerState::*;
        use SandboxState::*;
        let always = pod("Always", &["a", "b"]);
        let never = pod("Never", &["a"]);
        let on_failure = pod("OnFailure", &["a", "b"]);
        let mut changed = always.clone();
        changed.spec.as_mut().unwrap().containers[1].image = Some("busybox:2".into());

        struct Case {
            name: &'static str,
            pod: Pod,
            status: PodStatus,
            want: PodActions,
        }
        let cases = vec![
            Case {
                name: "new pod: sandbox attempt 0 and every container",
                pod: always.clone(),
                status: status(vec![], vec![]),
                want: PodActions {
                    create_sandbox: Some(0),
                    containers_to_start: vec![start(0, 0), start(1, 0)],
                    ..Default::default()
                },
            },
            Case {
                name: "all running and unchanged: nothing to do",
                pod: always.clone(),
                status: status(
                    vec![sandbox(Ready, 0)],
                    vec![
                        ctr(&always, "a", Running, 0, 0),
                        ctr(&always, "b", Running, 0, 0),
                    ],
                ),
                want: PodActions {
                    sandbox_id: Some("sb0".into()),
                    ..Default::default()
                },
            },
            Case {
                name: "spec change restarts only the changed container",
                pod: changed.clone(),
                status: status(
                    vec![sandbox(Ready, 0)],
                    vec![
                        ctr(&always, "a", Running, 0, 0),
                        ctr(&always, "b", Running, 0, 2),
                    ],
                ),
                want: PodActions {
                    sandbox_id: Some("sb0".into()),
                    containers_to_kill: vec![KillContainer {
                        id: "b-2".into(),
                        name: "b".into(),
                        reason: "Container b definition changed, will be restarted".into(),
                        grace: None,
                    }],
                    containers_to_start: vec![start(1, 3)],
                    ..Default::default()
                },
            },
            Case {
                name: "dead sandbox: kill, new sandbox with next attempt, restart counts kept",
                pod: always.clone(),
                status: status(
                    vec![sandbox(NotReady, 1)],
                    vec![
                        ctr(&always, "a", Exited, 137, 4),
                        ctr(&always, "b", Running, 0, 0),
                    ],
                ),
                want: PodActions {
                    kill_pod: true,
                    create_sandbox: Some(2),
                    containers_to_start: vec![start(0, 5), start(1, 1)],
                    ..Default::default()
                },
            },
            Case {
                name: "Always restarts an exited container",
                pod: always.clone(),
                status: status(
                    vec![sandbox(Ready, 0)],
                    vec![
                        ctr(&always, "a", Exited, 0, 0),
                        ctr(&always, "b", Running, 0, 0),
                    ],
                ),
                want: PodActions {
                    sandbox_id: Some("sb0".into()),
                    containers_to_start: vec![start(0, 1)],
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure restarts a failed container, not a succeeded one",
                pod: on_failure.clone(),
                status: status(
                    vec![sandbox(Ready, 0)],
                    vec![
                        ctr(&on_failure, "a", Exited, 0, 0),
                        ctr(&on_failure, "b", Exited, 1, 0),
                    ],
                ),
                want: PodActions {
                    sandbox_id: Some("sb0".into()),
                    containers_to_start: vec![start(1, 1)],
                    ..Default::default()
                },
            },
            Case {
                name: "Never with everything exited: stop the sandbox",
                pod: never.clone(),
                status: status(
                    vec![sandbox(Ready, 0)],
                    vec![ctr(&never, "a", Exited, 1, 0)],
                ),
                want: PodActions {
                    kill_pod: true,
                    ..Default::default()
                },
            },
            Case {
                name: "Never with a dead sandbox after running: no new sandbox",
                pod: never.clone(),
                status: status(
                    vec![sandbox(NotReady, 0)],
                    vec![ctr(&never, "a", Exited, 0, 0)],
                ),
                want: PodActions::default(),
            },
            Case {
                name: "created but never started (crash between create and start): replace it",
                pod: never.clone(),
                status: status(
                    vec![sandbox(Ready, 0)],
                    vec![ctr(&never, "a", Created, 0, 0)],
                ),
                want: PodActions {
                    sandbox_id: Some("sb0".into()),
                    containers_to_remove: vec!["a-0".into()],
                    containers_to_start: vec![start(0, 0)],
                    ..Default::default()
                },
            },
            Case {
                name: "a running container the spec dropped is stopped",
                pod: pod("Always", &["a"]),
                status: status(
                    vec![sandbox(Ready, 0)],
                    vec![ctr(&pod("Always", &["a"]), "a", Running, 0, 0), {
                        let mut c = ctr(&always, "b", Running, 0, 0);
                        c.hash = "x".into();
                        c
                    }],
                ),
                want: PodActions {
                    sandbox_id: Some("sb0".into()),
                    containers_to_kill: vec![KillContainer {
                        id: "b-0".into(),
                        name: "b".into(),
                        reason: "Container b is not in the pod spec".into(),
                        grace: None,
                    }],
                    ..Default::default()
                },
            },
            Case {
                name: "ready sandbox without an IP is replaced",
                pod: always.clone(),
                status: status(
                    vec![SandboxStatus {
                        ips: vec![],
                        ..sandbox(Ready, 0)
                    }],
                    vec![],
                ),
                want: PodActions {
                    kill_pod: true,
                    create_sandbox: Some(1),
                    containers_to_start: vec![start(0, 0), start(1, 0)],
                    ..Default::default()
                },
            },
        ];
        for case in cases {
            assert_eq!(
                compute_pod_actions(&case.pod, &case.status, &NoProbes),
                case.want,
                "{}",
                case.name
            );
        }
    }

    /// Probe results for tests: container IDs with a failed liveness probe,
    /// and those whose startup probe succeeded.
    #[derive(Default)]
    struct Probes {
        liveness_failed: Vec<&'static str>,
        started: Vec<&'static str>,
    }

    impl ProbeView for Probes {
        fn liveness_failed(&self, id: &str) -> bool {
            self.liveness_failed.contains(&id)
        }
        fn startup_failed(&self, _: &str) -> bool {
            false
        }
        fn started(&self, id: &str) -> bool {
            self.started.contains(&id)
        }
        fn ready(&self, _: &str) -> bool {
            false
        }
    }

    /// A pod with init containers: `inits` are (name, sidecar, startup probe).
    fn with_inits(policy: &str, inits: &[(&str, bool, bool)], names: &[&str]) -> Pod {
        let mut p = pod(policy, names);
        p.spec.as_mut().unwrap().init_containers = Some(
            inits
                .iter()
                .map(|(n, sidecar, startup)| Container {
                    name: (*n).into(),
                    image: Some("busybox:1".into()),
                    restart_policy: sidecar.then(|| "Always".into()),
                    startup_probe: startup.then(Default::default),
                    ..Default::default()
                })
                .collect(),
        );
        p
    }

    fn init_ctr(pod: &Pod, name: &str, state: ContainerState, exit: i32) -> ContainerStatus {
        let spec = pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap();
        ContainerStatus {
            hash: container_hash(spec.iter().find(|c| c.name == name).unwrap()),
            ..ctr(pod, "a", state, exit, 0)
        }
        .renamed(name)
    }

    impl ContainerStatus {
        fn renamed(mut self, name: &str) -> Self {
            self.id = format!("{name}-{}", self.restart_count);
            self.name = name.into();
            self
        }
    }

    fn init_start(index: usize, restart_count: i32) -> StartContainer {
        StartContainer {
            index,
            kind: ContainerKind::Init,
            restart_count,
        }
    }

    #[test]
    fn init_containers_and_sidecars() {
        use ContainerState::*;
        use SandboxState::*;
        let two_inits = with_inits(
            "Always",
            &[("i0", false, false), ("i1", false, false)],
            &["a"],
        );
        let never = with_inits("Never", &[("i0", false, false)], &["a"]);
        let sidecar = with_inits(
            "Always",
            &[("s", true, false), ("i1", false, false)],
            &["a"],
        );
        let gated = with_inits("Always", &[("s", true, true), ("i1", false, false)], &["a"]);
        let job = with_inits("OnFailure", &[("s", true, false)], &["a"]);
        let ready = || vec![sandbox(Ready, 0)];
        let sb0 = || Some("sb0".to_string());
        let cases: Vec<(&str, &Pod, PodStatus, Probes, PodActions)> = vec![
            (
                "new pod: sandbox and the first init container only",
                &two_inits,
                status(vec![], vec![]),
                Probes::default(),
                PodActions {
                    create_sandbox: Some(0),
                    containers_to_start: vec![init_start(0, 0)],
                    ..Default::default()
                },
            ),
            (
                "first init container running: wait",
                &two_inits,
                status(ready(), vec![init_ctr(&two_inits, "i0", Running, 0)]),
                Probes::default(),
                PodActions {
                    sandbox_id: sb0(),
                    ..Default::default()
                },
            ),
            (
                "first init container succeeded: start the second",
                &two_inits,
                status(ready(), vec![init_ctr(&two_inits, "i0", Exited, 0)]),
                Probes::default(),
                PodActions {
                    sandbox_id: sb0(),
                    containers_to_start: vec![init_start(1, 0)],
                    ..Default::default()
                },
            ),
            (
                "init container failed under Always: run it again",
                &two_inits,
                status(ready(), vec![init_ctr(&two_inits, "i0", Exited, 1)]),
                Probes::default(),
                PodActions {
                    sandbox_id: sb0(),
                    containers_to_start: vec![init_start(0, 1)],
                    ..Default::default()
                },
            ),
            (
                "all init containers succeeded: start the regular containers",
                &two_inits,
                status(
                    ready(),
                    vec![
                        init_ctr(&two_inits, "i1", Exited, 0),
                        init_ctr(&two_inits, "i0", Exited, 0),
                    ],
                ),
                Probes::default(),
                PodActions {
                    sandbox_id: sb0(),
                    containers_to_start: vec![start(0, 0)],
                    ..Default::default()
                },
            ),
            (
                "an earlier init container's record was collected: still done",
                &two_inits,
                status(ready(), vec![init_ctr(&two_inits, "i1", Exited, 0)]),
                Probes::default(),
                PodActions {
                    sandbox_id: sb0(),
                    containers_to_start: vec![start(0, 0)],
                    ..Default::default()
                },
            ),
            (
                "init container failed under Never: the pod is done",
                &never,
                status(ready(), vec![init_ctr(&never, "i0", Exited, 2)]),
                Probes::default(),
                PodActions {
                    kill_pod: true,
                    ..Default::default()
                },
            ),
            (
                "running sidecar without a startup probe: the next init container starts",
                &sidecar,
                status(ready(), vec![init_ctr(&sidecar, "s", Running, 0)]),
                Probes::default(),
                PodActions {
                    sandbox_id: sb0(),
                    containers_to_start: vec![init_start(1, 0)],
                    ..Default::default()
                },
            ),
            (
                "sidecar with a startup probe not yet passed gates the next",
                &gated,
                status(ready(), vec![init_ctr(&gated, "s", Running, 0)]),
                Probes::default(),
                PodActions {
                    sandbox_id: sb0(),
                    ..Default::default()
                },
            ),
            (
                "sidecar whose startup probe passed lets the next start",
                &gated,
                status(ready(), vec![init_ctr(&gated, "s", Running, 0)]),
                Probes {
                    started: vec!["s-0"],
                    ..Default::default()
                },
                PodActions {
                    sandbox_id: sb0(),
                    containers_to_start: vec![init_start(1, 0)],
                    ..Default::default()
                },
            ),
            (
                "a sidecar that exited after initialization is restarted beside the main container",
                &sidecar,
                status(
                    ready(),
                    vec![
                        ctr(&sidecar, "a", Running, 0, 0),
                        init_ctr(&sidecar, "i1", Exited, 0),
                        init_ctr(&sidecar, "s", Exited, 1),
                    ],
                ),
                Probes::default(),
                PodActions {
                    sandbox_id: sb0(),
                    containers_to_start: vec![init_start(0, 1)],
                    ..Default::default()
                },
            ),
            (
                "main containers done under OnFailure: the sidecar is stopped with the pod",
                &job,
                status(
                    ready(),
                    vec![
                        ctr(&job, "a", Exited, 0, 0),
                        init_ctr(&job, "s", Running, 0),
                    ],
                ),
                Probes::default(),
                PodActions {
                    kill_pod: true,
                    ..Default::default()
                },
            ),
        ];
        for (name, pod, status, probes, want) in cases {
            assert_eq!(compute_pod_actions(pod, &status, &probes), want, "{name}");
        }
    }

    #[test]
    fn failed_liveness_probe_restarts_that_container_only() {
        use ContainerState::*;
        let mut p = pod("Always", &["a", "b"]);
        p.spec.as_mut().unwrap().containers[0].liveness_probe =
            Some(k8s_openapi::api::core::v1::Probe {
                termination_grace_period_seconds: Some(5),
                ..Default::default()
            });
        let st = status(
            vec![sandbox(SandboxState::Ready, 0)],
            vec![ctr(&p, "a", Running, 0, 3), ctr(&p, "b", Running, 0, 0)],
        );
        let probes = Probes {
            liveness_failed: vec!["a-3"],
            ..Default::default()
        };
        let want = PodActions {
            sandbox_id: Some("sb0".into()),
            containers_to_kill: vec![KillContainer {
                id: "a-3".into(),
                name: "a".into(),
                reason: "Container a failed liveness probe, will be restarted".into(),
                grace: Some(5),
            }],
            containers_to_start: vec![start(0, 4)],
            ..Default::default()
        };
        assert_eq!(compute_pod_actions(&p, &st, &probes), want);
        p.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        let never = compute_pod_actions(&p, &st, &probes);
        assert_eq!(never.containers_to_kill.len(), 1, "{never:?}");
        assert!(never.containers_to_start.is_empty(), "Never: not restarted");
    }

    /// A container with its own restartPolicy and restartPolicyRules
    /// (`Restart` on the exit codes of `op` `values`).
    fn with_policy(mut p: Pod, own: Option<&str>, rule: Option<(&str, &[i32])>) -> Pod {
        use k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes;
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.restart_policy = own.map(Into::into);
        c.restart_policy_rules = rule.map(|(op, values)| {
            vec![ContainerRestartRule {
                action: "Restart".into(),
                exit_codes: Some(ContainerRestartRuleOnExitCodes {
                    operator: op.into(),
                    values: Some(values.to_vec()),
                }),
            }]
        });
        p
    }

    #[test]
    fn container_restart_policy_and_rules() {
        /// (case, pod policy, container policy, rule, exit code, restarts)
        type Case<'a> = (
            &'a str,
            &'a str,
            Option<&'a str>,
            Option<(&'a str, &'a [i32])>,
            i32,
            bool,
        );
        let cases: Vec<Case> = vec![
            ("pod Always", "Always", None, None, 1, true),
            ("pod OnFailure, failed", "OnFailure", None, None, 1, true),
            (
                "pod OnFailure, succeeded",
                "OnFailure",
                None,
                None,
                0,
                false,
            ),
            ("pod Never", "Never", None, None, 1, false),
            (
                "container Never in an Always pod",
                "Always",
                Some("Never"),
                None,
                1,
                false,
            ),
            (
                "container Always in a Never pod",
                "Never",
                Some("Always"),
                None,
                0,
                true,
            ),
            (
                "container OnFailure, succeeded",
                "Always",
                Some("OnFailure"),
                None,
                0,
                false,
            ),
            (
                "container OnFailure, failed",
                "Never",
                Some("OnFailure"),
                None,
                2,
                true,
            ),
            (
                "rule In matches",
                "Never",
                Some("Never"),
                Some(("In", &[42])),
                42,
                true,
            ),
            (
                "rule In does not match",
                "Never",
                Some("Never"),
                Some(("In", &[42])),
                1,
                false,
            ),
            (
                "rule NotIn matches",
                "Never",
                Some("Never"),
                Some(("NotIn", &[0])),
                3,
                true,
            ),
            (
                "rule NotIn does not match",
                "Never",
                Some("Never"),
                Some(("NotIn", &[0])),
                0,
                false,
            ),
            (
                "unknown operator: no match",
                "Never",
                Some("Never"),
                Some(("Gt", &[0])),
                3,
                false,
            ),
        ];
        for (name, pod_policy, own, rule, exit, want) in cases {
            let p = with_policy(pod(pod_policy, &["a"]), own, rule);
            let c = &p.spec.as_ref().unwrap().containers[0];
            assert_eq!(container_should_restart(c, &p, exit), want, "{name}");
        }
        // Rules are read only with a container-level policy, and a matching
        // rule of another action falls back to that policy.
        let mut p = with_policy(pod("Never", &["a"]), None, Some(("In", &[42])));
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        assert!(
            !container_should_restart(&c, &p, 42),
            "rules without a policy"
        );
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.restart_policy = Some("Never".into());
        c.restart_policy_rules.as_mut().unwrap()[0].action = "RestartAllContainers".into();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        assert!(
            !container_should_restart(&c, &p, 42),
            "RestartAllContainers is off"
        );
    }

    #[test]
    fn container_level_policies_drive_the_actions() {
        use ContainerState::*;
        let ready = || vec![sandbox(SandboxState::Ready, 0)];
        // The upstream e2e case: restartPolicy Never in an Always pod is not
        // restarted, and the pod stops.
        let never_in_always = with_policy(pod("Always", &["a"]), Some("Never"), None);
        let st = status(ready(), vec![ctr(&never_in_always, "a", Exited, 1, 0)]);
        let got = compute_pod_actions(&never_in_always, &st, &NoProbes);
        assert_eq!(
            got,
            PodActions {
                kill_pod: true,
                ..Default::default()
            }
        );
        // A rule matching the exit code restarts it in a Never pod.
        let rule = with_policy(pod("Never", &["a"]), Some("Never"), Some(("In", &[42])));
        let st = status(ready(), vec![ctr(&rule, "a", Exited, 42, 0)]);
        let got = compute_pod_actions(&rule, &st, &NoProbes);
        assert_eq!(got.containers_to_start, vec![start(0, 1)], "{got:?}");
        let st = status(ready(), vec![ctr(&rule, "a", Exited, 1, 0)]);
        assert!(compute_pod_actions(&rule, &st, &NoProbes).kill_pod);
        // A failed liveness probe restarts by the container's policy only.
        let mut always_in_never = with_policy(pod("Never", &["a"]), Some("Always"), None);
        always_in_never.spec.as_mut().unwrap().containers[0].liveness_probe =
            Some(Default::default());
        let st = status(ready(), vec![ctr(&always_in_never, "a", Running, 0, 0)]);
        let probes = Probes {
            liveness_failed: vec!["a-0"],
            ..Default::default()
        };
        let got = compute_pod_actions(&always_in_never, &st, &probes);
        assert_eq!(got.containers_to_start, vec![start(0, 1)], "{got:?}");
        // A new sandbox skips a container that succeeded under its own OnFailure.
        let on_failure = with_policy(pod("Always", &["a", "b"]), Some("OnFailure"), None);
        let st = status(
            vec![sandbox(SandboxState::NotReady, 0)],
            vec![
                ctr(&on_failure, "a", Exited, 0, 0),
                ctr(&on_failure, "b", Exited, 0, 0),
            ],
        );
        let got = compute_pod_actions(&on_failure, &st, &NoProbes);
        assert_eq!(got.containers_to_start, vec![start(1, 1)], "{got:?}");
        // An init container's own policy decides whether its failure fails the pod.
        let mut init = with_inits("Always", &[("i0", false, false)], &["a"]);
        init.spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[0]
            .restart_policy = Some("Never".into());
        let st = status(ready(), vec![init_ctr(&init, "i0", Exited, 1)]);
        let got = compute_pod_actions(&init, &st, &NoProbes);
        assert!(
            got.kill_pod && got.containers_to_start.is_empty(),
            "{got:?}"
        );
    }

    /// Upstream's HashContainer of the same containers, printed by a Go
    /// program against k8s.io/kubernetes v1.37.2.
    #[test]
    fn hash_is_upstreams() {
        let cases = [
            ("web", "nginx:1.25", "3899ff6c"),
            ("c", "rkubelet.test/busybox:1", "a2c05149"),
            (
                "a-b",
                "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
                "7b7331d1",
            ),
        ];
        for (name, image, want) in cases {
            let mut c = Container {
                name: name.into(),
                image: Some(image.into()),
                ..Default::default()
            };
            assert_eq!(container_hash(&c), want, "{name} {image}");
            // Only the name and image count: the rest is immutable, or
            // resized in place.
            c.args = Some(vec!["x".into()]);
            c.resources = Some(Default::default());
            assert_eq!(container_hash(&c), want);
        }
    }
}
