//! Typed failures of the pod lifecycle steps. Each keeps its source, says
//! which waiting reason a container shows for it, and says whether a retry
//! helps and when (`Retry`); the pod worker's one retry policy
//! (`pod_workers::retry_delay`) turns that into a delay, as kube-runtime's
//! controllers do with their error policy.

use std::time::Duration;

use kubelet_core::status::{Waiting, WaitingReasons};
use kubelet_cri::client::CriError;

use crate::cm::CmError;
use crate::volumes::VolumeError;
use kubelet_core::dns::{HostnameError, ResolvConfError};
use kubelet_core::env::EnvError;
use kubelet_core::failure::Cause;

use crate::runtimeclass::RuntimeClassError;

/// Why a container's config could not be built; the name of the field.
#[derive(Debug, thiserror::Error)]
#[error("container {container:?}: {field}: {message}")]
pub struct ConfigError {
    pub container: String,
    pub field: String,
    pub message: String,
}

/// When a failed step is worth trying again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Retry {
    /// Something outside may clear soon (the runtime, the network, a
    /// registry): again after the pod's growing back-off.
    Backoff,
    /// Not before this much time has passed (a crash-loop back-off), and then
    /// at once.
    After(Duration),
    /// Only a change helps (of the spec, or of what the kubelet is told):
    /// the update syncs the pod; until then, the periodic resync.
    Resync,
}

/// A missing object is waited for by its watch and an unsupported spec
/// by its change, both through the pod's resync; the rest backs off.
impl From<Cause> for Retry {
    fn from(cause: Cause) -> Retry {
        match cause {
            Cause::MissingObject | Cause::Unsupported => Retry::Resync,
            Cause::Transient => Retry::Backoff,
        }
    }
}

impl Retry {
    /// Of two failures of one sync, the retry that rules: a back-off over a
    /// known wait, the shorter of two waits, a wait over waiting for a
    /// change.
    pub fn sooner(self, other: Retry) -> Retry {
        self.min(other)
    }
}

/// Why one container did not start in this sync.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Upstream's ErrCrashLoopBackOff: the last run exited and its restart
    /// back-off has `left` to run.
    #[error("{message}")]
    CrashLoopBackOff { left: Duration, message: String },
    /// Upstream's ErrImagePullBackOff: the image's last pull for this pod
    /// failed and its back-off has `left` to run; the message carries that
    /// pull's error.
    #[error("{message}")]
    ImagePullBackOff { left: Duration, message: String },
    /// The image could not be had; `reason` is upstream's (ErrImagePull,
    /// ErrImageNeverPull, InvalidImageName, ErrImageInspect).
    #[error("{message}")]
    Image {
        reason: &'static str,
        message: String,
        #[source]
        source: Option<CriError>,
    },
    /// Upstream's CreateContainerConfigError: the container's config could
    /// not be made from the pod (a spec the runtime cannot be given).
    #[error("{0}")]
    Config(#[source] ConfigError),
    /// Upstream's CreateContainerConfigError for the environment: a
    /// ConfigMap, Secret or key it names is missing, a field it reads is
    /// unknown, or the Services are not listed yet.
    #[error("{0}")]
    Env(#[source] EnvError),
    /// Upstream's CreateContainerConfigError from its device plugins: a
    /// PreStartContainer call failed, or devices could not be allocated
    /// again.
    #[error("{0}")]
    Devices(#[source] crate::devicemanager::DeviceError),
    /// The host file the termination message is mounted from.
    #[error("termination message file {path}: {source}")]
    TerminationLog {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Upstream's CreateContainerError.
    #[error("{}", .0.message)]
    Create(#[source] CriError),
    /// Upstream's RunContainerError.
    #[error("{}", .0.message)]
    Run(#[source] CriError),
    /// The postStart hook failed; the container was killed.
    #[error("{0}")]
    PostStartHook(String),
}

impl StartError {
    /// The waiting reason the container shows, as upstream's.
    pub fn reason(&self) -> &'static str {
        match self {
            StartError::CrashLoopBackOff { .. } => "CrashLoopBackOff",
            StartError::ImagePullBackOff { .. } => "ImagePullBackOff",
            StartError::Image { reason, .. } => reason,
            StartError::Config(_)
            | StartError::Env(_)
            | StartError::Devices(_)
            | StartError::TerminationLog { .. } => "CreateContainerConfigError",
            StartError::Create(_) => "CreateContainerError",
            StartError::Run(_) => "RunContainerError",
            StartError::PostStartHook(_) => "PostStartHookError",
        }
    }

    pub fn retry(&self) -> Retry {
        match self {
            StartError::CrashLoopBackOff { left, .. }
            | StartError::ImagePullBackOff { left, .. } => Retry::After(*left),
            StartError::Image {
                reason: "InvalidImageName",
                ..
            }
            | StartError::Config(_) => Retry::Resync,
            StartError::Env(e) => e.cause.into(),
            _ => Retry::Backoff,
        }
    }
}

/// A container that did not start, and why.
#[derive(Debug, thiserror::Error)]
#[error("{container}: {}: {error}", error.reason())]
pub struct StartFailure {
    pub container: String,
    #[source]
    pub error: StartError,
}

/// The waiting reasons of the containers that did not start.
pub fn waiting_reasons(failures: &[StartFailure]) -> WaitingReasons {
    failures
        .iter()
        .map(|f| {
            (
                f.container.clone(),
                Waiting {
                    reason: f.error.reason().into(),
                    message: f.error.to_string(),
                },
            )
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Runtime(#[from] CriError),
    /// Upstream's NetworkNotReady: non-hostNetwork pods wait for CNI.
    #[error("network is not ready: {0}")]
    NetworkNotReady(String),
    #[error("failed to start containers: {}", join(.0))]
    StartFailed(Vec<StartFailure>),
    /// The runtime said it stopped them, yet they run: a CRI contract
    /// violation, retried, never taken as success.
    #[error("containers still running after kill: {}", .0.join(", "))]
    StillRunning(Vec<String>),
    /// The pod's volumes could not all be set up (each told in a
    /// FailedMount event); the pod waits in ContainerCreating.
    #[error("unable to attach or mount volumes: {0}")]
    Volumes(#[from] VolumeError),
    /// Its volumes could not be torn down: the pod is not let go.
    #[error("tearing down volumes: {0}")]
    VolumesTeardown(#[source] std::io::Error),
    /// The sandbox's config could not be made (upstream's
    /// GeneratePodSandboxConfig failure: the pod's hostname, the node's
    /// resolvConf, a user namespace); upstream's FailedCreatePodSandBox
    /// event gives the message as is.
    #[error(transparent)]
    SandboxConfig(SandboxConfigError),
    /// The pod's cgroup could not be made (upstream's words; its
    /// FailedToCreatePodContainer event says it too).
    #[error(
        "failed to ensure that the pod: {uid} cgroups exist and are correctly applied: {source}"
    )]
    PodCgroup {
        uid: String,
        #[source]
        source: CmError,
    },
    /// Its cgroup could not be removed: the pod is not let go.
    #[error("{0}")]
    PodCgroupTeardown(#[source] CmError),
    /// A running container's resources could not be updated in place
    /// (PodResizeInProgress, with reason Error, says why); tried again.
    #[error(transparent)]
    Resize(ResizeError),
    /// The pod's ResourceClaims could not be prepared before its sandbox
    /// (its FailedPrepareDynamicResources event says why too).
    #[error("prepare dynamic resources: {0}")]
    PrepareResources(#[source] crate::dra::DraError),
    /// Its claims could not be unprepared once its containers stopped: the
    /// pod is not let go.
    #[error("unprepare dynamic resources: {0}")]
    UnprepareResources(#[source] crate::dra::DraError),
    /// A newer update (a kill) cut the step short; not a failure.
    #[error("interrupted by a newer update")]
    Interrupted,
}

/// Why a sandbox's config could not be made (upstream's
/// GeneratePodSandboxConfig failures), in upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum SandboxConfigError {
    #[error(transparent)]
    RuntimeClass(#[from] RuntimeClassError),
    /// The pod's user namespace (`hostUsers: false`) cannot be had.
    #[error("{0}")]
    UserNamespaces(#[source] crate::userns::UsernsSetupError),
    #[error(transparent)]
    Hostname(#[from] HostnameError),
    #[error("open {path}: {source}")]
    ReadResolvConf {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Encountered error while parsing resolv conf file. Error: {0}")]
    ParseResolvConf(#[source] ResolvConfError),
}

impl SandboxConfigError {
    /// What would clear it: the pod's own fields need a new spec; a
    /// RuntimeClass, or the node's resolv.conf, may come or be fixed
    /// (retried with back-off, as upstream retries a sandbox).
    pub fn cause(&self) -> Cause {
        match self {
            SandboxConfigError::UserNamespaces(crate::userns::UsernsSetupError::Unsupported(_))
            | SandboxConfigError::Hostname(_) => Cause::Unsupported,
            SandboxConfigError::UserNamespaces(_) => Cause::Transient,
            SandboxConfigError::RuntimeClass(_)
            | SandboxConfigError::ReadResolvConf { .. }
            | SandboxConfigError::ParseResolvConf(_) => Cause::Transient,
        }
    }
}

/// Why an in-place resize could not be carried out (PodResizeInProgress,
/// with reason Error, says it); each is tried again with back-off.
#[derive(Debug, thiserror::Error)]
pub enum ResizeError {
    #[error("failed to checkpoint the pod's allocation")]
    Checkpoint,
    /// A memory limit would go at or below what is used (upstream's
    /// validateMemoryResizeAction, in its words).
    #[error("{0}")]
    MemoryDecrease(String),
    #[error("failed to resize container {container}: {source}")]
    Container {
        container: String,
        #[source]
        source: ContainerResizeError,
    },
    #[error("failed to resize the pod cgroup: {0}")]
    PodCgroup(#[source] CmError),
}

/// Why one container's resources could not be updated.
#[derive(Debug, thiserror::Error)]
pub enum ContainerResizeError {
    #[error(transparent)]
    Config(ConfigError),
    #[error(transparent)]
    Runtime(CriError),
}

fn join(failures: &[StartFailure]) -> String {
    let text: Vec<String> = failures.iter().map(ToString::to_string).collect();
    text.join("; ")
}

impl SyncError {
    /// When trying the step again may help; None for an interruption, which
    /// is not a failure.
    pub fn retry(&self) -> Option<Retry> {
        match self {
            SyncError::Interrupted => None,
            // A CRI error the runtime will answer the same way (a spec it
            // refuses) waits for a change; the rest may clear.
            SyncError::Runtime(e) if !e.is_retryable() && !e.is_not_found() => Some(Retry::Resync),
            SyncError::StartFailed(failures) => failures
                .iter()
                .map(|f| f.error.retry())
                .reduce(Retry::sooner),
            SyncError::Volumes(e) => Some(e.cause().into()),
            SyncError::SandboxConfig(e) => Some(e.cause().into()),
            _ => Some(Retry::Backoff),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cri(code: tonic::Code) -> CriError {
        CriError {
            op: "CreateContainer",
            code,
            message: "boom".into(),
        }
    }

    fn bad() -> ConfigError {
        ConfigError {
            container: "c".into(),
            field: "resources".into(),
            message: "bad".into(),
        }
    }

    fn failed(errors: Vec<StartError>) -> SyncError {
        SyncError::StartFailed(
            errors
                .into_iter()
                .map(|error| StartFailure {
                    container: "c".into(),
                    error,
                })
                .collect(),
        )
    }

    #[test]
    fn each_failure_says_when_a_retry_helps() {
        let secs = Duration::from_secs;
        let loop_of = |s| StartError::CrashLoopBackOff {
            left: secs(s),
            message: String::new(),
        };
        let cases: Vec<(SyncError, Option<Retry>)> = vec![
            (SyncError::Interrupted, None),
            (
                SyncError::Runtime(cri(tonic::Code::Unavailable)),
                Some(Retry::Backoff),
            ),
            (
                SyncError::Runtime(cri(tonic::Code::NotFound)),
                Some(Retry::Backoff),
            ),
            (
                SyncError::Runtime(cri(tonic::Code::InvalidArgument)),
                Some(Retry::Resync),
            ),
            // containerd 2 removing a container whose exit it still handles.
            (
                SyncError::Runtime(cri(tonic::Code::FailedPrecondition)),
                Some(Retry::Backoff),
            ),
            (
                SyncError::NetworkNotReady("cni".into()),
                Some(Retry::Backoff),
            ),
            (
                SyncError::StillRunning(vec!["c".into()]),
                Some(Retry::Backoff),
            ),
            (failed(vec![loop_of(20)]), Some(Retry::After(secs(20)))),
            (
                failed(vec![StartError::ImagePullBackOff {
                    left: secs(7),
                    message: String::new(),
                }]),
                Some(Retry::After(secs(7))),
            ),
            (
                failed(vec![loop_of(20), loop_of(5)]),
                Some(Retry::After(secs(5))),
            ),
            (
                failed(vec![StartError::Config(bad()), loop_of(5)]),
                Some(Retry::After(secs(5))),
            ),
            (failed(vec![StartError::Config(bad())]), Some(Retry::Resync)),
            (
                failed(vec![loop_of(5), StartError::Run(cri(tonic::Code::Unknown))]),
                Some(Retry::Backoff),
            ),
            (
                failed(vec![StartError::Image {
                    reason: "InvalidImageName",
                    message: String::new(),
                    source: None,
                }]),
                Some(Retry::Resync),
            ),
            (
                failed(vec![StartError::Image {
                    reason: "ErrImagePull",
                    message: String::new(),
                    source: Some(cri(tonic::Code::Unknown)),
                }]),
                Some(Retry::Backoff),
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.retry(), want, "{err}");
        }
    }

    #[test]
    fn volume_and_sandbox_failures_retry_by_their_cause() {
        use crate::volumes::{SetUpError, VolumeError};
        let io = || SetUpError::Io(std::io::Error::other("disk"));
        let volumes = |failed: Vec<SetUpError>| {
            SyncError::Volumes(VolumeError {
                failed: failed.into_iter().map(|e| ("v".to_owned(), e)).collect(),
            })
        };
        let unsupported = || SetUpError::UnsupportedType("gcePersistentDisk".into());
        let missing_key =
            || SetUpError::Payload(kubelet_core::volume::PayloadError::ConfigMapKey("k".into()));
        let cases: Vec<(SyncError, Retry)> = vec![
            (volumes(vec![unsupported()]), Retry::Resync),
            (volumes(vec![missing_key()]), Retry::Resync),
            (volumes(vec![io()]), Retry::Backoff),
            (volumes(vec![unsupported(), io()]), Retry::Backoff),
            (
                volumes(vec![SetUpError::Several(vec![unsupported(), io()])]),
                Retry::Backoff,
            ),
            (
                SyncError::SandboxConfig(SandboxConfigError::UserNamespaces(
                    crate::userns::UsernsSetupError::Unsupported("no".into()),
                )),
                Retry::Resync,
            ),
            (
                SyncError::SandboxConfig(SandboxConfigError::ReadResolvConf {
                    path: "/etc/resolv.conf".into(),
                    source: std::io::Error::other("gone"),
                }),
                Retry::Backoff,
            ),
            (SyncError::Resize(ResizeError::Checkpoint), Retry::Backoff),
        ];
        for (err, want) in cases {
            assert_eq!(err.retry(), Some(want), "{err}");
        }
    }

    #[test]
    fn failures_keep_their_source_and_reason() {
        let f = StartFailure {
            container: "app".into(),
            error: StartError::Run(cri(tonic::Code::Unknown)),
        };
        assert_eq!(f.to_string(), "app: RunContainerError: boom");
        let source = std::error::Error::source(&f.error).expect("the CRI error is kept");
        assert!(source.to_string().contains("boom"), "{source}");
        let waiting = waiting_reasons(&[f]);
        assert_eq!(waiting["app"].reason, "RunContainerError");
        assert_eq!(waiting["app"].message, "boom");
    }
}
