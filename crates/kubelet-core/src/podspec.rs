//! The pod spec's vocabulary that the deciding modules share: which list a
//! container is in (init, regular, ephemeral; sidecars among the init
//! containers), and whether a container that exited runs again (restart
//! policies and rules). Reads the spec only.

use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, EphemeralContainer, Pod};

/// Which of the pod spec's container lists a container is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerKind {
    Init,
    Regular,
    Ephemeral,
}

/// The pod's restartPolicy (Always when unset).
pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// A sidecar: an init container with `restartPolicy: Always`.
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

pub fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

/// The init containers then the regular ones, in the order they start.
pub fn init_and_regular_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    init_containers(pod).iter().chain(regular_containers(pod))
}

pub fn regular_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
}

/// The pod's ephemeral containers (`kubectl debug`), each as the
/// container it runs as (upstream converts EphemeralContainerCommon the
/// same way), with the container whose namespaces it targets. Every field
/// is named, so a field the API adds to one and not the other does not
/// compile rather than being dropped.
pub fn ephemeral_containers(pod: &Pod) -> Vec<(Container, Option<String>)> {
    let listed = pod
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or(&[]);
    listed
        .iter()
        .map(|e| {
            let EphemeralContainer {
                args,
                command,
                env,
                env_from,
                image,
                image_pull_policy,
                lifecycle,
                liveness_probe,
                name,
                ports,
                readiness_probe,
                resize_policy,
                resources,
                restart_policy,
                restart_policy_rules,
                security_context,
                startup_probe,
                stdin,
                stdin_once,
                target_container_name,
                termination_message_path,
                termination_message_policy,
                tty,
                volume_devices,
                volume_mounts,
                working_dir,
            } = e.clone();
            let c = Container {
                args,
                command,
                env,
                env_from,
                image,
                image_pull_policy,
                lifecycle,
                liveness_probe,
                name,
                ports,
                readiness_probe,
                resize_policy,
                resources,
                restart_policy,
                restart_policy_rules,
                security_context,
                startup_probe,
                stdin,
                stdin_once,
                termination_message_path,
                termination_message_policy,
                tty,
                volume_devices,
                volume_mounts,
                working_dir,
            };
            (c, target_container_name)
        })
        .collect()
}

/// Whether a restart policy (a container's or the pod's) runs a container
/// that exited with `exit_code` again; None for a policy it does not know.
fn policy_restarts(policy: &str, exit_code: i32) -> Option<bool> {
    match policy {
        "Always" => Some(true),
        "OnFailure" => Some(exit_code != 0),
        "Never" => Some(false),
        _ => None,
    }
}

/// The first of a container's restartPolicyRules that its exit code
/// matches (upstream's FindMatchingContainerRestartRule).
fn matching_restart_rule(c: &Container, exit_code: i32) -> Option<&ContainerRestartRule> {
    c.restart_policy_rules.iter().flatten().find(|rule| {
        let Some(on) = &rule.exit_codes else {
            return false;
        };
        let listed = on.values.iter().flatten().any(|v| *v == exit_code);
        match on.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        }
    })
}

/// Whether a container that exited with `exit_code` runs again (upstream's
/// podutil.ContainerShouldRestart with ContainerRestartRules, beta and on
/// in 1.37): with a container-level restartPolicy, the first matching
/// restartPolicyRule decides when its action is `Restart` (the alpha
/// `RestartAllContainers` is off, so it falls through), else the
/// container's restartPolicy; without one, the pod's (Always when unset).
pub fn container_should_restart(c: &Container, pod: &Pod, exit_code: i32) -> bool {
    if let Some(own) = c.restart_policy.as_deref() {
        if matching_restart_rule(c, exit_code).is_some_and(|r| r.action == "Restart") {
            return true;
        }
        if let Some(restart) = policy_restarts(own, exit_code) {
            return restart;
        }
    }
    policy_restarts(restart_policy(pod), exit_code).unwrap_or(true)
}
