//! compute-pod-actions (upstream's `kuberuntime.computePodActions`): from a
//! pod's spec and what the runtime holds for it, decide what SyncPod must do.
//! Pure: the runtime manager carries the decision out.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::runtime::{ContainerState, ContainerStatus, PodStatus, SandboxState};

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
    /// Containers of the spec to create and start, in spec order.
    pub containers_to_start: Vec<StartContainer>,
    /// Containers created but never started (a crash between create and
    /// start): removed before their replacement is created, so no duplicate
    /// survives.
    pub containers_to_remove: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillContainer {
    pub id: String,
    pub name: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartContainer {
    /// Index into `spec.containers`.
    pub index: usize,
    /// The restart count the new container carries.
    pub restart_count: i32,
}

/// The hash recorded on a container (`io.kubernetes.container.hash`): a
/// change of the container's spec changes it, which restarts the container.
/// FNV-1a over the container's canonical JSON, printed in hex as upstream.
pub fn container_hash(container: &Container) -> String {
    let json = serde_json::to_vec(container).unwrap_or_default();
    let mut h: u32 = 0x811c_9dc5;
    for b in json {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:x}")
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Whether a container that is not running should be started (again).
fn should_start(policy: &str, last: Option<&ContainerStatus>) -> bool {
    match last {
        None => true,
        Some(c) => match c.state {
            ContainerState::Created => true,
            ContainerState::Running => false,
            ContainerState::Exited | ContainerState::Unknown => match policy {
                "Never" => false,
                "OnFailure" => c.exit_code != 0,
                _ => true,
            },
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

/// compute-pod-actions: the whole decision, as a table of cases in tests.
pub fn compute_pod_actions(pod: &Pod, status: &PodStatus) -> PodActions {
    let containers: &[Container] = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[]);
    let policy = restart_policy(pod);
    let (create, attempt, sandbox_id) = sandbox_change(pod, status);

    if create {
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
        let containers_to_start = containers
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                let last = status.container(&c.name);
                // OnFailure: a container that already succeeded is not rerun.
                !(policy == "OnFailure"
                    && last.is_some_and(|l| l.state == ContainerState::Exited && l.exit_code == 0))
            })
            .map(|(index, c)| StartContainer {
                index,
                restart_count: next_restart_count(status.container(&c.name)),
            })
            .collect();
        return PodActions {
            kill_pod: !status.sandboxes.is_empty(),
            create_sandbox: Some(attempt),
            containers_to_start,
            ..Default::default()
        };
    }

    let mut actions = PodActions {
        sandbox_id,
        ..Default::default()
    };
    let mut keep = 0;
    for (index, container) in containers.iter().enumerate() {
        let last = status.container(&container.name);
        match last {
            Some(c) if c.state == ContainerState::Running => {
                if c.hash == container_hash(container) {
                    keep += 1;
                    continue;
                }
                actions.containers_to_kill.push(KillContainer {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    reason: format!("Container {} definition changed, will be restarted", c.name),
                });
                actions.containers_to_start.push(StartContainer {
                    index,
                    restart_count: c.restart_count + 1,
                });
            }
            _ if should_start(policy, last) => {
                if let Some(c) = last.filter(|c| c.state == ContainerState::Created) {
                    actions.containers_to_remove.push(c.id.clone());
                }
                actions.containers_to_start.push(StartContainer {
                    index,
                    restart_count: next_restart_count(last),
                });
            }
            _ => {}
        }
    }
    // Containers the spec no longer names are stopped too.
    for c in status.running_containers() {
        if !containers.iter().any(|s| s.name == c.name) {
            actions.containers_to_kill.push(KillContainer {
                id: c.id.clone(),
                name: c.name.clone(),
                reason: format!("Container {} is not in the pod spec", c.name),
            });
        }
    }
    if keep == 0 && actions.containers_to_start.is_empty() {
        // Nothing runs and nothing will: stop the sandbox too.
        actions.kill_pod = true;
        actions.sandbox_id = None;
        actions.containers_to_kill.clear();
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::SandboxStatus;
    use k8s_openapi::api::core::v1::PodSpec;

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
            restart_count,
        }
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
                compute_pod_actions(&case.pod, &case.status),
                case.want,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn hash_follows_spec() {
        let p = pod("Always", &["a"]);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let mut c2 = c.clone();
        assert_eq!(container_hash(c), container_hash(&c2));
        c2.args = Some(vec!["x".into()]);
        assert_ne!(container_hash(c), container_hash(&c2));
    }
}
