//! The kubelet as its other parts read it: the kubelet API (NodeView),
//! the stats provider, the eviction manager, the status sync (static
//! pods) and /healthz.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::status::{KubeletTermination, TerminationKind};
use kubelet_core::types::PodUid;
use kubelet_cri::client::CriClient;
use kubelet_server::NodeView;

use super::Kubelet;
use crate::events::{Involved, NORMAL, WARNING};
use crate::eviction::{Eviction, EvictionHost};
use crate::nodeshutdown::ShutdownHost;
use crate::pod_workers::PodTarget;
use crate::podresources::PodsProvider;
use crate::server::Health;
use crate::stats::{StatsError, StatsView};
use crate::status_sync::StaticPodView;

/// The kubelet as the eviction manager sees it.
pub(super) struct EvictionView(pub(super) Arc<Kubelet>);

impl EvictionHost for EvictionView {
    async fn summary(&self) -> Result<kubelet_core::stats::Summary, StatsError> {
        let view: &dyn StatsView = self.0.as_ref();
        self.0.stats.get(view).await
    }

    /// HasDedicatedImageFs: the runtime's image file system is on another
    /// device than the root directory (None while that cannot be told).
    async fn dedicated_image_fs(&self) -> Option<bool> {
        use std::os::unix::fs::MetadataExt as _;
        let mountpoint = match self.0.syncer.runtime.cri().image_fs_mountpoint().await {
            Ok(Some(m)) => m,
            Ok(None) => return Some(false),
            Err(error) => {
                tracing::warn!(%error, "Eviction manager: failed to get HasDedicatedImageFs");
                return None;
            }
        };
        let (image, root) = tokio::join!(
            tokio::fs::metadata(mountpoint),
            tokio::fs::metadata(&self.0.opts.root_dir)
        );
        match (image, root) {
            (Ok(i), Ok(r)) => Some(i.dev() != r.dev()),
            _ => None,
        }
    }

    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.0.active_pods()
    }

    async fn reclaim_disk(&self) {
        // DeleteAllUnusedContainers: the pods that ran to their end keep
        // nothing in the runtime either.
        let done = self.0.workers.finished();
        if let Err(error) = self.0.syncer.runtime.garbage_collect(&done).await {
            tracing::warn!(%error, "Eviction manager: removing dead containers");
        }
        if let Err(error) = self.0.image_gc.delete_unused().await {
            tracing::warn!(%error, "Eviction manager: removing unused images");
        }
    }

    fn evict(&self, pod: &Arc<Pod>, eviction: Eviction) {
        self.0.syncer.record_termination(
            pod,
            KubeletTermination {
                kind: TerminationKind::Evicted,
                message: eviction.message.clone(),
                disruption: eviction.disruption,
            },
        );
        self.0.events.annotated_event(
            &Involved::pod(pod, None),
            eviction.annotations,
            WARNING,
            kubelet_core::eviction::rank::REASON,
            eviction.message,
        );
        self.0
            .workers
            .evict_pod(PodTarget::from_pod(pod.clone()), Some(eviction.grace));
    }

    fn cleaned_up(&self, pod: &Pod) -> bool {
        self.0.cleaned_up(pod)
    }

    fn node_event(&self, reason: &str, message: String) {
        self.0.node_event(WARNING, reason, message);
    }
}

impl Kubelet {
    /// Upstream's podResourcesAreReclaimed, as the pod worker knows it: its
    /// SyncTerminatedPod is done.
    fn cleaned_up(&self, pod: &Pod) -> bool {
        self.workers
            .state(&PodUid::of(pod))
            .is_none_or(|s| s.is_finished())
    }

    /// Whether the pod's containers are stopped: its status is terminal,
    /// or it is cleaned up.
    fn stopped(&self, pod: &Pod) -> bool {
        self.status
            .get_pod_status(&PodUid::of(pod))
            .is_some_and(|s| kubelet_core::phase::is_terminal_status(&s))
            || self.cleaned_up(pod)
    }

    /// An event about this node.
    fn node_event(&self, kind: &str, reason: &str, message: impl Into<String>) {
        let node = self.opts.node_name.clone();
        self.events.event(
            &Involved::node(&node, self.node_uid()),
            kind,
            reason,
            message,
        );
    }
}

/// The kubelet as the shutdown manager sees it.
pub(super) struct ShutdownView(pub(super) Arc<Kubelet>);

impl ShutdownHost for ShutdownView {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.0.active_pods()
    }

    fn terminate(&self, pod: &Arc<Pod>, grace: i64) {
        self.0.syncer.record_termination(
            pod,
            KubeletTermination {
                kind: TerminationKind::NodeShutdown,
                message: kubelet_core::nodeshutdown::POD_MESSAGE.into(),
                disruption: true,
            },
        );
        self.0
            .workers
            .evict_pod(PodTarget::from_pod(pod.clone()), Some(grace));
        // As upstream's killPodNow: a Warning when the pod is not stopped
        // within its grace and half again (10 s at least).
        let wait = kubelet_core::nodeshutdown::kill_timeout(grace);
        let (kubelet, pod) = (self.0.clone(), pod.clone());
        self.0.tasks.spawn(
            tracing::info_span!("shutdown_kill_deadline", pod = %kubelet_core::types::pod_full_name(&pod)),
            move |token| async move {
                tokio::select! {
                    _ = token.cancelled() => {}
                    _ = tokio::time::sleep(wait) => {
                        if !kubelet.stopped(&pod) {
                            kubelet.events.event(
                                &Involved::pod(&pod, None),
                                WARNING,
                                kubelet_core::nodeshutdown::EXCEEDED_GRACE_REASON,
                                kubelet_core::nodeshutdown::EXCEEDED_GRACE_MESSAGE,
                            );
                        }
                    }
                }
            },
        );
    }

    fn cleaned_up(&self, pod: &Pod) -> bool {
        self.0.cleaned_up(pod)
    }

    fn node_event(&self, reason: &str, message: &str) {
        self.0.node_event(NORMAL, reason, message);
    }

    fn sync_node_status(&self) {
        self.0.node_status_now.notify_one();
    }
}

impl NodeView for Kubelet {
    fn node_name(&self) -> String {
        self.opts.node_name.clone()
    }
    fn problems(&self) -> Vec<(&'static str, String)> {
        Health::problems(self)
    }
    fn pods(&self) -> Vec<Pod> {
        self.pods_with_status()
    }
    fn cri(&self) -> CriClient {
        self.syncer.runtime.cri().clone()
    }
    fn logs_root(&self) -> PathBuf {
        self.opts.config.pod_logs_dir.clone()
    }
    fn configz(&self) -> serde_json::Value {
        self.opts.config.to_v1beta1_json()
    }
    fn metrics_text(&self) -> String {
        self.opts.metrics.render()
            + &crate::stats::process::render_process_metrics()
            + &self.stats.volume_metrics_text()
    }
    fn probe_metrics_text(&self) -> String {
        self.syncer.prober.probe_metrics_text()
    }
    fn summary(
        &self,
        only_cpu_and_memory: bool,
    ) -> BoxFuture<'_, Result<serde_json::Value, kubelet_server::BoxError>> {
        Box::pin(async move {
            let summary = self.stats.summary(self, only_cpu_and_memory).await?;
            Ok(summary)
        })
    }
    fn resource_metrics_text(&self) -> BoxFuture<'_, String> {
        Box::pin(self.stats.resource_metrics(self))
    }
    fn cadvisor_metrics_text(&self) -> BoxFuture<'_, String> {
        Box::pin(self.stats.cadvisor_metrics(self))
    }
}

impl StatsView for Kubelet {
    fn node_name(&self) -> String {
        self.opts.node_name.clone()
    }
    fn claim_volumes(&self, uid: &str) -> Vec<kubelet_core::claim::ClaimVolume> {
        self.syncer.volumes.claim_volumes(&PodUid::from(uid))
    }
    fn csi_volume_stats<'a>(
        &'a self,
        driver: &'a str,
        handle: &'a str,
        target: &'a std::path::Path,
        at: std::time::SystemTime,
    ) -> BoxFuture<'a, Option<kubelet_core::stats::FsStats>> {
        Box::pin(async move {
            let csi = self.syncer.volumes.csi_volumes()?;
            match csi.volume_stats(driver, handle, target, at).await {
                Ok(stats) => stats,
                Err(e) => {
                    tracing::debug!(driver, handle, error = %e, "NodeGetVolumeStats failed");
                    None
                }
            }
        })
    }
    fn pods(&self) -> Vec<Pod> {
        self.pods_with_status()
    }
    fn cri(&self) -> CriClient {
        self.syncer.runtime.cri().clone()
    }
    fn logs_root(&self) -> PathBuf {
        self.opts.config.pod_logs_dir.clone()
    }
    fn root_dir(&self) -> PathBuf {
        self.opts.root_dir.clone()
    }
    fn pod_cgroups(&self) -> Option<kubelet_core::cgroups::PodCgroups> {
        self.syncer.cm.pod_cgroups()
    }
    fn system_cgroups(
        &self,
    ) -> Option<(
        kubelet_core::cgroups::CgroupLayout,
        Vec<(&'static str, kubelet_core::cgroups::CgroupName)>,
    )> {
        let layout = self.system_containers.layout()?.clone();
        Some((layout, self.system_containers.stats_cgroups()))
    }
}

impl PodsProvider for Kubelet {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        Kubelet::active_pods(self)
    }
    fn pod_by_name(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pod_manager.pods().into_iter().find(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.metadata.name.as_deref() == Some(name)
        })
    }
}

impl StaticPodView for Kubelet {
    fn started(&self, full: &str) -> Option<PodUid> {
        self.workers.static_pod_started(full)
    }
    fn terminating(&self, full: &str) -> bool {
        self.workers.static_pod_terminating(full)
    }
}

impl Health for Kubelet {
    fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let since = self.sync_loop_seen.lock().elapsed();
        let limit = (self.opts.config.sync_frequency * 2).max(Duration::from_secs(5 * 60));
        if since > limit {
            out.push((
                "syncloop",
                format!("sync loop last ran {since:?} ago; threshold is {limit:?}"),
            ));
        }
        if let Some(e) = self.pleg.healthy(self.started) {
            out.push(("pleg", e));
        }
        out
    }
}
