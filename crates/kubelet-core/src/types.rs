//! Shared kubelet vocabulary: pod identity, update operations, and the label and
//! annotation keys that upstream tools (crictl, the upstream kubelet) understand.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// A pod's UID, the key every kubelet subsystem indexes pods by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PodUid(pub String);

impl PodUid {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The UID of an API pod (empty when the object carries none).
    pub fn of(pod: &Pod) -> PodUid {
        PodUid(pod.metadata.uid.clone().unwrap_or_default())
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for PodUid {
    fn from(s: &str) -> Self {
        PodUid(s.to_owned())
    }
}

/// `namespace/name` of a pod, for logs and error messages.
pub fn pod_full_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// Whether `pod` is a mirror pod (a static pod's reflection in the API):
/// bookkeeping, never run.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(keys::CONFIG_MIRROR))
}

/// Whether `pod` is a static pod: it came from a manifest file or the
/// manifest URL, not the API server (upstream's IsStaticPod).
pub fn is_static_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::CONFIG_SOURCE))
        .is_some_and(|s| s != SOURCE_API)
}

/// Why a pod was refused: the reason and message of upstream's Warning
/// event; the pod's status says [`Rejection::status_message`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

impl Rejection {
    /// The rejected pod's status message (upstream's rejectPod).
    pub fn status_message(&self) -> String {
        format!("Pod was rejected: {}", self.message)
    }
}

/// The source a pod came from (`kubernetes.io/config.source`).
pub const SOURCE_FILE: &str = "file";
pub const SOURCE_API: &str = "api";
pub const SOURCE_HTTP: &str = "http";

/// What changed in the desired set of pods, as upstream's `kubetypes.PodOperation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOperation {
    /// Pods new to the kubelet.
    Add,
    /// Pods whose spec, labels or annotations changed.
    Update,
    /// Pods no source wants any more: terminate them.
    Remove,
    /// Pods whose status alone changed: refresh the desired copy, no sync.
    Reconcile,
}

/// The full set of pods one source wants now (SET semantics): what each pod
/// source sends the config mux.
#[derive(Clone, Debug)]
pub struct SourceSnapshot {
    pub source: &'static str,
    pub pods: Vec<Pod>,
}

/// One batch of changes from the config mux to the sync loop.
#[derive(Clone, Debug)]
pub struct PodUpdate {
    pub op: PodOperation,
    pub source: &'static str,
    pub pods: Vec<Arc<Pod>>,
}

/// Annotation and label keys, spelled exactly as upstream writes them.
pub mod keys {
    pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
    pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
    pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";
    pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";

    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
    pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
    pub const CONTAINER_TERMINATION_MESSAGE_PATH: &str =
        "io.kubernetes.container.terminationMessagePath";
    pub const CONTAINER_TERMINATION_MESSAGE_POLICY: &str =
        "io.kubernetes.container.terminationMessagePolicy";
    pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
    pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
}
