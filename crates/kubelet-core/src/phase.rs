//! A pod's phase: the API's four values and which of them are final.

use k8s_openapi::api::core::v1::PodStatus;

pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_SUCCEEDED: &str = "Succeeded";
pub const PHASE_FAILED: &str = "Failed";

/// Whether a phase is terminal (Succeeded or Failed): a pod never leaves it.
pub fn is_terminal(phase: &str) -> bool {
    phase == PHASE_SUCCEEDED || phase == PHASE_FAILED
}

/// Whether a status is in a terminal phase (Succeeded or Failed).
pub fn is_terminal_status(s: &PodStatus) -> bool {
    s.phase.as_deref().is_some_and(is_terminal)
}
