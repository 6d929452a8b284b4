//! Container lifecycle hooks (upstream's pkg/kubelet/lifecycle/handlers.go):
//! postStart and preStop with exec, httpGet and sleep handlers, run through
//! the same handler runners as probes. A hook's error is the message of the
//! FailedPostStartHook / FailedPreStopHook event.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use kubelet_core::probe::http_get_action;
use kubelet_core::types::pod_full_name;
use kubelet_cri::client::CriClient;

use crate::prober::handlers::{Outcome, run_exec, run_http};

/// The User-Agent of httpGet hooks (upstream's "kube-lifecycle/<major>.<minor>").
const HOOK_USER_AGENT: &str = "kube-lifecycle/1.37";

/// Which hook runs, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    PostStart,
    PreStop,
}

impl Hook {
    /// The container's handler for this hook, if it has one.
    pub fn handler(self, c: &Container) -> Option<&LifecycleHandler> {
        let l = c.lifecycle.as_ref()?;
        match self {
            Hook::PostStart => l.post_start.as_ref(),
            Hook::PreStop => l.pre_stop.as_ref(),
        }
    }

    /// The warning event's reason when the hook fails.
    pub fn failed_reason(self) -> &'static str {
        match self {
            Hook::PostStart => "FailedPostStartHook",
            Hook::PreStop => "FailedPreStopHook",
        }
    }
}

/// Run `handler` for `container` (running as `container_id`) within
/// `timeout`; Err is the message upstream puts in the hook's failure event.
pub async fn run_hook(
    cri: &CriClient,
    container_id: &str,
    pod: &Pod,
    container: &Container,
    pod_ip: &str,
    handler: &LifecycleHandler,
    timeout: Duration,
) -> Result<(), String> {
    let who = format!(
        "for Container {:?} in Pod {:?}",
        container.name,
        pod_full_name(pod)
    );
    let run = async {
        if let Some(exec) = &handler.exec {
            let command = exec.command.clone().unwrap_or_default();
            let shown = format!("{command:?}");
            return match run_exec(cri, container_id, command, timeout).await {
                Ok(r) if r.outcome != Outcome::Failure => Ok(()),
                Ok(r) => Err(format!(
                    "Exec lifecycle hook ({shown}) {who} failed - error: command {shown} exited with a non-zero code, message: {:?}",
                    r.output
                )),
                Err(e) => Err(format!(
                    "Exec lifecycle hook ({shown}) {who} failed - error: {e}, message: \"\""
                )),
            };
        }
        if let Some(http) = &handler.http_get {
            let mut get = http_get_action(http, container, pod_ip)
                .map_err(|e| format!("HTTP lifecycle hook {who} failed - error: {e}"))?;
            for (k, v) in &mut get.headers {
                if k.eq_ignore_ascii_case("user-agent") && v.starts_with("kube-probe/") {
                    *v = HOOK_USER_AGENT.into();
                }
            }
            let r = run_http(&get, timeout).await;
            return match r.outcome {
                Outcome::Failure => Err(format!(
                    "HTTP lifecycle hook ({}) {who} failed - error: {}",
                    get.path, r.output
                )),
                _ => Ok(()),
            };
        }
        if let Some(sleep) = &handler.sleep {
            tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64)).await;
            return Ok(());
        }
        Err(format!("lifecycle hook {who} has no handler"))
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "lifecycle hook {who} did not complete within {}s",
            timeout.as_secs()
        )),
    }
}
