//! What the real runtime holds of a test's pods: the labels the kubelet
//! puts on its sandboxes and containers, and the removal of what a failed
//! test left behind.

use std::collections::HashMap;
use std::time::Duration;

use kubelet_cri::client::CriClient;
use kubelet_cri::v1 as cri;

/// A sandbox's or container's labels.
pub type Labels = HashMap<String, String>;

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";

pub const CRI_TIMEOUT: Duration = Duration::from_secs(10);

/// The value of `key`, empty when absent.
pub fn label<'a>(labels: &'a Labels, key: &str) -> &'a str {
    labels.get(key).map(String::as_str).unwrap_or("")
}

/// The container's name in its pod.
pub fn cname(c: &cri::Container) -> &str {
    c.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("")
}

pub fn restart_count(c: &cri::Container) -> &str {
    label(&c.annotations, RESTART_COUNT)
}

/// Best effort: print, then stop and remove the containers, then the
/// sandboxes, that `select` picks of what the runtime at `endpoint` holds
/// (all sandboxes, all containers). Runs on a thread of its own so it can be
/// called from `Drop` inside the test's runtime.
pub fn cleanup_runtime<F>(endpoint: String, select: F)
where
    F: FnOnce(
            Vec<cri::PodSandbox>,
            Vec<cri::Container>,
        ) -> (Vec<cri::PodSandbox>, Vec<cri::Container>)
        + Send
        + 'static,
{
    let work = move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let Ok(cri) = CriClient::connect_lazy(&endpoint, CRI_TIMEOUT) else {
                return;
            };
            let sandboxes = cri.list_pod_sandbox(None).await.unwrap_or_default();
            let containers = cri.list_containers(None).await.unwrap_or_default();
            let (sandboxes, containers) = select(sandboxes, containers);
            for c in &containers {
                eprintln!(
                    "left behind: container {} {} of {} {:?} restartCount {}",
                    &c.id[..12.min(c.id.len())],
                    cname(c),
                    label(&c.labels, POD_NAME),
                    cri::ContainerState::try_from(c.state),
                    restart_count(c)
                );
                let _ = cri.stop_container(&c.id, 0).await;
                let _ = cri.remove_container(&c.id).await;
            }
            for s in &sandboxes {
                eprintln!(
                    "left behind: sandbox {} of {} {:?}",
                    &s.id[..12.min(s.id.len())],
                    label(&s.labels, POD_NAME),
                    cri::PodSandboxState::try_from(s.state)
                );
                let _ = cri.stop_pod_sandbox(&s.id).await;
                let _ = cri.remove_pod_sandbox(&s.id).await;
            }
        });
    };
    let _ = std::thread::spawn(work).join();
}
