//! Garbage collection (upstream's kuberuntime_gc.go): dead containers and
//! sandboxes past what is kept, their logs, dangling log links, and a
//! removed pod's last traces.

use std::collections::HashSet;

use kubelet_core::gc::{GcCandidate, SandboxCandidate, evictable, evictable_sandboxes};
use kubelet_core::runtime::{PodStatus, SandboxState};
use kubelet_core::types::{PodUid, keys};
use kubelet_cri::client::CriError;
use kubelet_cri::v1 as cri;

use super::config::pod_log_dir;
use super::status::container_state;
use super::{PodRef, RuntimeManager, ok_if_not_found};
use crate::files::is_under;

impl RuntimeManager {
    /// Container garbage collection: remove exited containers beyond the
    /// newest one per container of each pod, with their log files (only
    /// files under podLogsDir). The pods in `unused` (pods that ran to their
    /// end, under disk pressure) lose every container that is not running,
    /// and then their sandboxes. Returns how many containers were removed.
    pub async fn garbage_collect(&self, unused: &HashSet<PodUid>) -> Result<usize, CriError> {
        let containers = self.cri.list_containers(None).await?;
        let candidates: Vec<GcCandidate> = containers
            .iter()
            .filter_map(|c| {
                Some(GcCandidate {
                    id: c.id.clone(),
                    pod_uid: c.labels.get(keys::POD_UID)?.clone(),
                    name: c.metadata.as_ref()?.name.clone(),
                    state: container_state(c.state),
                    created_at: c.created_at,
                })
            })
            .collect();
        let is_unused = |uid: &str| unused.contains(&PodUid::from(uid));
        let mut removed = HashSet::new();
        for id in evictable(&candidates, 1, is_unused) {
            let status = self.cri.container_status(&id).await.ok();
            if let Err(e) = ok_if_not_found(self.cri.remove_container(&id).await) {
                tracing::warn!(container = %id, error = %e, "garbage collection: removing a dead container");
                continue;
            }
            if let Some(st) = status {
                if self.owns_log(&st.log_path) {
                    let path = std::path::PathBuf::from(&st.log_path);
                    if let Err(e) =
                        kubelet_tasks::blocking(move || crate::logs::remove_log_files(&path)).await
                    {
                        tracing::warn!(path = %st.log_path, error = %e, "garbage collection: removing a log file");
                    }
                }
                let label = |k: &str| st.labels.get(k).map(String::as_str).unwrap_or("");
                self.unlink_log(
                    label(keys::POD_NAME),
                    label(keys::POD_NAMESPACE),
                    label(keys::CONTAINER_NAME),
                    &id,
                )
                .await;
            }
            removed.insert(id);
        }
        self.remove_dangling_log_links().await;
        if !unused.is_empty() {
            let held: Vec<&str> = containers
                .iter()
                .filter(|c| !removed.contains(&c.id))
                .map(|c| c.pod_sandbox_id.as_str())
                .collect();
            let sandboxes: Vec<SandboxCandidate> = self
                .cri
                .list_pod_sandbox(None)
                .await?
                .into_iter()
                .filter_map(|sb| {
                    Some(SandboxCandidate {
                        pod_uid: sb.metadata?.uid,
                        ready: sb.state == cri::PodSandboxState::SandboxReady as i32,
                        id: sb.id,
                    })
                })
                .collect();
            for id in evictable_sandboxes(&sandboxes, &held, is_unused) {
                if let Err(e) = ok_if_not_found(self.cri.remove_pod_sandbox(&id).await) {
                    tracing::warn!(sandbox = %id, error = %e, "garbage collection: removing a sandbox");
                }
            }
        }
        Ok(removed.len())
    }

    /// Whether `path` is a log file the kubelet placed: absolute, under
    /// podLogsDir, no `..` (a log path from the runtime never escapes).
    fn owns_log(&self, path: &str) -> bool {
        is_under(std::path::Path::new(path), &self.host.logs_root)
    }

    /// With the pod's ready sandbox in use, remove its other sandboxes that
    /// are not ready and hold no container (what an interrupted
    /// RunPodSandbox leaves), as upstream's sandbox garbage collection does
    /// for a live pod. Sandboxes that still hold dead containers stay: those
    /// carry the last states and restart counts, and go with the container
    /// garbage collection.
    pub(super) async fn remove_dead_sandboxes(
        &self,
        status: &PodStatus,
        ready: &str,
    ) -> Result<(), CriError> {
        for sb in status
            .sandboxes
            .iter()
            .filter(|sb| sb.id != ready && sb.state != SandboxState::Ready)
        {
            let held = self
                .cri
                .list_containers(Some(cri::ContainerFilter {
                    pod_sandbox_id: sb.id.clone(),
                    ..Default::default()
                }))
                .await?;
            if held.is_empty() {
                tracing::info!(sandbox = %sb.id, "removing a dead sandbox");
                ok_if_not_found(self.cri.remove_pod_sandbox(&sb.id).await)?;
            }
        }
        Ok(())
    }

    /// Remove every container and sandbox of a stopped pod, and its log
    /// directory. Safe to repeat.
    pub async fn remove_pod(&self, pod: &PodRef, status: &PodStatus) -> Result<(), CriError> {
        for c in &status.containers {
            // Stopped first, though the pod's containers have all stopped: a
            // container whose exit the runtime is still handling answers
            // RemoveContainer with FailedPrecondition ("cannot delete running
            // task"); StopContainer waits for its task to be gone.
            ok_if_not_found(self.cri.stop_container(&c.id, 0).await)?;
            ok_if_not_found(self.cri.remove_container(&c.id).await)?;
            self.unlink_log(&pod.name, &pod.namespace, &c.name, &c.id)
                .await;
        }
        for sb in &status.sandboxes {
            ok_if_not_found(self.cri.stop_pod_sandbox(&sb.id).await)?;
            ok_if_not_found(self.cri.remove_pod_sandbox(&sb.id).await)?;
        }
        if let Some(dir) = pod_log_dir(
            &self.host.logs_root,
            &pod.namespace,
            &pod.name,
            pod.uid.as_str(),
        ) {
            match tokio::fs::remove_dir_all(&dir).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "removing pod log directory")
                }
            }
        }
        Ok(())
    }

    /// Links to containers that are gone (a crash between a removal and
    /// its unlink, or containers removed while rkubelet was down): removed
    /// unless the container still runs (its log may be mid-rotation), as
    /// upstream's container garbage collection does.
    async fn remove_dangling_log_links(&self) {
        let dir = self.host.legacy_logs_dir.clone();
        let found = match kubelet_tasks::blocking(move || super::legacylogs::dangling(&dir)).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "listing the container log links");
                return;
            }
        };
        for (link, id) in found {
            if let Some(id) = &id
                && let Ok(st) = self.cri.container_status(id).await
                && st.state != cri::ContainerState::ContainerExited as i32
            {
                continue;
            }
            let gone = link.clone();
            if let Err(e) = kubelet_tasks::blocking(move || super::legacylogs::remove(&gone)).await
            {
                tracing::warn!(path = %link.display(), error = %e, "removing a dangling container log link");
            }
        }
    }
}
