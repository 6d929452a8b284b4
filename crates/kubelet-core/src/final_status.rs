//! What a new pod status may not undo (upstream's status manager and
//! generateAPIPodStatus rules, and the API server's own validation): a
//! terminal phase stays, and a container that terminated stays terminated
//! unless its restart policy lets it run again. The status manager applies
//! them against the status it holds, and the API sync against the pod the
//! API server has, so no status the API server forbids is ever sent.

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodCondition, PodStatus as ApiPodStatus,
};

use crate::phase::{PHASE_FAILED, is_terminal, is_terminal_status};
use crate::podspec::{container_should_restart, init_containers, is_sidecar, regular_containers};

fn exit_code(s: &ContainerStatus) -> Option<i32> {
    s.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

/// Keep every terminated container of `old` that may not run again
/// terminated in `new`; true when one was kept.
fn keep_terminated(
    pod: &Pod,
    specs: &[Container],
    old: Option<&Vec<ContainerStatus>>,
    new: Option<&mut Vec<ContainerStatus>>,
) -> bool {
    let (Some(old), Some(new)) = (old, new) else {
        return false;
    };
    let mut kept = false;
    for n in new.iter_mut() {
        let Some(spec) = specs.iter().find(|c| c.name == n.name) else {
            continue;
        };
        let Some(o) = old.iter().find(|o| o.name == n.name) else {
            continue;
        };
        if let Some(code) = exit_code(o)
            && exit_code(n).is_none()
            && !is_sidecar(spec)
            && !container_should_restart(spec, pod, code)
        {
            *n = o.clone();
            kept = true;
        }
    }
    kept
}

/// A false Ready/ContainersReady for a pod in a terminal phase.
fn not_ready(c: &mut PodCondition, phase: &str) {
    if c.status == "True" {
        c.status = "False".into();
        c.reason = Some(
            if phase == PHASE_FAILED {
                "PodFailed"
            } else {
                "PodCompleted"
            }
            .into(),
        );
        c.message = None;
    }
}

/// Make `new` a status that may follow `old`: a terminal phase (with its
/// reason and message) is kept, terminated containers that may not restart
/// stay as they ended, and a terminal pod is not ready. Returns true when
/// `new` had to be changed (a regression the caller may log).
pub fn keep_final(pod: &Pod, old: &ApiPodStatus, new: &mut ApiPodStatus) -> bool {
    let mut changed = keep_terminated(
        pod,
        regular_containers(pod),
        old.container_statuses.as_ref(),
        new.container_statuses.as_mut(),
    );
    changed |= keep_terminated(
        pod,
        init_containers(pod),
        old.init_container_statuses.as_ref(),
        new.init_container_statuses.as_mut(),
    );
    if is_terminal_status(old) && new.phase != old.phase {
        new.phase = old.phase.clone();
        new.reason = old.reason.clone();
        new.message = old.message.clone();
        changed = true;
    }
    if let Some(phase) = new.phase.clone().filter(|p| is_terminal(p)) {
        for c in new.conditions.iter_mut().flatten() {
            if c.type_ == "Ready" || c.type_ == "ContainersReady" {
                not_ready(c, &phase);
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phase::PHASE_SUCCEEDED;
    use crate::testing::{PodBuilder, container};
    use k8s_openapi::api::core::v1::{
        ContainerRestartRule, ContainerRestartRuleOnExitCodes, ContainerState,
        ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    };

    fn pod(policy: &str, container_policy: Option<&str>) -> Pod {
        PodBuilder::default()
            .restart_policy(policy)
            .container(Container {
                restart_policy: container_policy.map(Into::into),
                ..container("a")
            })
            .build()
    }

    fn exited(code: i32) -> ContainerStatus {
        ContainerStatus {
            name: "a".into(),
            container_id: Some("containerd://1".into()),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn waiting() -> ContainerStatus {
        ContainerStatus {
            name: "a".into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running() -> ContainerStatus {
        ContainerStatus {
            name: "a".into(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn status(phase: &str, c: ContainerStatus) -> ApiPodStatus {
        ApiPodStatus {
            phase: Some(phase.into()),
            container_statuses: Some(vec![c]),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn terminated_containers_stay_terminated_unless_they_may_restart() {
        // (pod policy, container policy, old exit code, new state, new kept as old)
        let cases = [
            ("Never", None, 0, waiting(), true),
            ("Never", None, 1, running(), true),
            ("OnFailure", None, 0, waiting(), true),
            ("OnFailure", None, 1, running(), false),
            ("Always", None, 0, waiting(), false),
            ("Never", Some("Always"), 0, running(), false),
            ("Always", Some("Never"), 1, waiting(), true),
            ("Never", None, 0, exited(2), false),
        ];
        for (policy, cpolicy, code, new_state, kept) in cases {
            let p = pod(policy, cpolicy);
            let old = status("Running", exited(code));
            let mut new = status("Running", new_state.clone());
            let changed = keep_final(&p, &old, &mut new);
            let got = &new.container_statuses.as_ref().unwrap()[0];
            let what = format!("{policy} {cpolicy:?} exit {code} → {new_state:?}");
            assert_eq!(changed, kept, "{what}");
            assert_eq!(got == &exited(code), kept, "{what}");
        }
    }

    #[test]
    fn a_restart_rule_lets_a_container_run_again() {
        let mut p = pod("Never", Some("Never"));
        p.spec.as_mut().unwrap().containers[0].restart_policy_rules =
            Some(vec![ContainerRestartRule {
                action: "Restart".into(),
                exit_codes: Some(ContainerRestartRuleOnExitCodes {
                    operator: "In".into(),
                    values: Some(vec![42]),
                }),
            }]);
        let mut new = status("Running", running());
        assert!(!keep_final(&p, &status("Running", exited(42)), &mut new));
        let mut new = status("Running", running());
        assert!(keep_final(&p, &status("Running", exited(1)), &mut new));
    }

    #[test]
    fn a_terminal_phase_stays_and_is_not_ready() {
        let p = pod("Always", None);
        let mut old = status(PHASE_SUCCEEDED, exited(0));
        old.reason = Some("r".into());
        let mut new = status("Running", running());
        assert!(keep_final(&p, &old, &mut new));
        assert_eq!(new.phase.as_deref(), Some(PHASE_SUCCEEDED));
        assert_eq!(new.reason.as_deref(), Some("r"));
        let ready = &new.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodCompleted"))
        );
        // Failed does not become Succeeded either.
        let mut new = status(PHASE_SUCCEEDED, exited(0));
        assert!(keep_final(&p, &status(PHASE_FAILED, exited(1)), &mut new));
        assert_eq!(new.phase.as_deref(), Some(PHASE_FAILED));
        // Running to Running changes nothing.
        let mut new = status("Running", running());
        assert!(!keep_final(&p, &status("Running", running()), &mut new));
        assert_eq!(new, status("Running", running()));
    }
}
