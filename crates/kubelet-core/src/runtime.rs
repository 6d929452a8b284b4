//! The kubelet's view of what the container runtime holds for one pod
//! (upstream's `kubecontainer.PodStatus`), built from CRI answers by the
//! runtime manager and consumed by the pure parts: actions, PLEG, status.

use std::collections::BTreeMap;

use crate::types::PodUid;

/// A runtime handler and what it supports, as the runtime's CRI Status
/// reports it (upstream's kubecontainer.RuntimeHandler); the node reports
/// them in `status.runtimeHandlers`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeHandler {
    /// The handler's name; the default handler's is empty.
    pub name: String,
    pub recursive_read_only_mounts: bool,
    pub user_namespaces: bool,
}

/// What the runtime supports whatever the handler (upstream's
/// kubecontainer.RuntimeFeatures); the node reports it in
/// `status.features`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeFeatures {
    pub supplemental_groups_policy: bool,
}

/// Whether the handler `name` supports recursive read-only mounts
/// (upstream's runtimeHandlerSupportsRecursiveReadOnlyMounts): a runtime
/// that lists no handler, or does not list this one, does not.
pub fn supports_recursive_read_only(handlers: &[RuntimeHandler], name: &str) -> bool {
    handlers
        .iter()
        .find(|h| h.name == name)
        .is_some_and(|h| h.recursive_read_only_mounts)
}

/// State of a sandbox as CRI reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// State of a container as CRI reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    #[default]
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxStatus {
    pub id: String,
    pub state: SandboxState,
    /// Attempt number from the sandbox metadata; a new sandbox takes the next.
    pub attempt: u32,
    /// Creation time, nanoseconds since the epoch.
    pub created_at: i64,
    /// The pod IPs the runtime gave this sandbox, primary first.
    pub ips: Vec<String>,
    /// Whether the sandbox runs in the node's network namespace.
    pub host_network: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerStatus {
    pub id: String,
    pub name: String,
    pub state: ContainerState,
    /// The container-spec hash recorded when the container was created.
    pub hash: String,
    pub restart_count: i32,
    pub image: String,
    pub image_ref: String,
    /// Nanoseconds since the epoch; 0 when unknown.
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    /// The pod's termination grace period recorded on the container, so a pod
    /// no source knows any more can still be stopped gently.
    pub grace_period: Option<i64>,
    /// The signal the runtime stops it with, as the API names it
    /// (`SIGUSR1`), when the runtime says (ContainerStopSignals).
    pub stop_signal: Option<String>,
    /// The identity its process runs with, when the runtime says
    /// (upstream's SupplementalGroupsPolicy status: `user.linux`).
    pub user: Option<ContainerUser>,
}

/// The identity a container's process runs with, as the runtime reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerUser {
    /// Its Linux identity; None when the runtime gives none.
    pub linux: Option<LinuxContainerUser>,
}

/// A Linux process identity: user, primary group and every group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinuxContainerUser {
    pub uid: i64,
    pub gid: i64,
    pub supplemental_groups: Vec<i64>,
}

/// Everything the runtime knows about one pod, newest sandbox first and
/// newest container (per name) first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodStatus {
    pub uid: PodUid,
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<SandboxStatus>,
    pub containers: Vec<ContainerStatus>,
}

impl PodStatus {
    /// The newest status of the container with this name.
    pub fn container(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers.iter().find(|c| c.name == name)
    }

    pub fn running_containers(&self) -> impl Iterator<Item = &ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }

    /// Pod IPs of the newest sandbox while it is ready (upstream's
    /// GetPodStatus): a pod whose sandbox stopped has none.
    pub fn ips(&self) -> &[String] {
        self.sandboxes
            .first()
            .filter(|s| s.state == SandboxState::Ready)
            .map(|s| s.ips.as_slice())
            .unwrap_or(&[])
    }

    /// The grace period to use when no pod spec is known: the largest one
    /// recorded on the pod's containers.
    pub fn recorded_grace_period(&self) -> Option<i64> {
        self.containers.iter().filter_map(|c| c.grace_period).max()
    }
}

/// What the prober says about running containers, by container ID
/// (upstream's liveness, readiness and startup result managers).
pub trait ProbeView {
    /// The liveness probe failed: the container must be restarted.
    fn liveness_failed(&self, id: &str) -> bool;
    /// The startup probe failed: the container must be restarted.
    fn startup_failed(&self, id: &str) -> bool;
    /// The startup probe succeeded.
    fn started(&self, id: &str) -> bool;
    /// The readiness probe succeeded.
    fn ready(&self, id: &str) -> bool;
}

/// No prober results at all (pods without probes, and tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProbes;

impl ProbeView for NoProbes {
    fn liveness_failed(&self, _: &str) -> bool {
        false
    }
    fn startup_failed(&self, _: &str) -> bool {
        false
    }
    fn started(&self, _: &str) -> bool {
        false
    }
    fn ready(&self, _: &str) -> bool {
        false
    }
}

/// A lightweight listing of every pod in the runtime, as PLEG relists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimePod {
    pub uid: PodUid,
    pub name: String,
    pub namespace: String,
    pub sandboxes: BTreeMap<String, SandboxState>,
    /// Container id → (container name, state).
    pub containers: BTreeMap<String, (String, ContainerState)>,
}

impl RuntimePod {
    /// True when the runtime still runs something of this pod.
    pub fn is_running(&self) -> bool {
        self.sandboxes.values().any(|s| *s == SandboxState::Ready)
            || self
                .containers
                .values()
                .any(|(_, s)| *s == ContainerState::Running)
    }
}

/// One PLEG relist: every pod the runtime holds, by UID.
pub type RuntimePods = BTreeMap<PodUid, RuntimePod>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recursive_read_only_support_is_the_named_handlers() {
        let handler = |name: &str, rro| RuntimeHandler {
            name: name.into(),
            recursive_read_only_mounts: rro,
            user_namespaces: false,
        };
        let listed = [
            handler("", true),
            handler("runc", true),
            handler("kata", false),
        ];
        for (handlers, name, want) in [
            (&listed[..], "", true),
            (&listed[..], "runc", true),
            (&listed[..], "kata", false),
            (&listed[..], "gvisor", false),
            (&[][..], "", false),
        ] {
            assert_eq!(
                supports_recursive_read_only(handlers, name),
                want,
                "{name:?}"
            );
        }
    }
}
