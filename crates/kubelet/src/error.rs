//! Typed errors of the pod lifecycle steps; each says whether a retry helps.

use kubelet_cri::client::CriError;

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Runtime(#[from] CriError),
    /// Upstream's NetworkNotReady: non-hostNetwork pods wait for CNI.
    #[error("network is not ready: {0}")]
    NetworkNotReady(String),
    #[error("failed to start containers: {}", .0.join("; "))]
    StartFailed(Vec<String>),
    /// The runtime said it stopped them, yet they run: a CRI contract
    /// violation, retried, never taken as success.
    #[error("containers still running after kill: {}", .0.join(", "))]
    StillRunning(Vec<String>),
    /// A newer update (a kill) cut the step short; not a failure.
    #[error("interrupted by a newer update")]
    Interrupted,
}
