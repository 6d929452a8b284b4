//! The sync loop (upstream's syncLoop / syncLoopIteration): one select
//! over config updates, PLEG events, probe results, the sync tick and
//! housekeeping, dispatching to the pod workers.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::backoff::Backoff;
use kubelet_core::pleg::PodLifecycleEvent;
use kubelet_core::status::needs_readiness_reconcile;
use kubelet_core::types::{PodOperation, PodUid, PodUpdate, SOURCE_API};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{HOUSEKEEPING_PERIOD, Kubelet, POD_DIRS_PERIOD, SYNC_PERIOD};
use crate::cm::ContainerManager;
use crate::config::SourcesReady;
use crate::pod_workers::PodTarget;
use crate::volumes::VolumeManager;

impl Kubelet {
    pub(super) async fn sync_loop(
        &self,
        mut updates: mpsc::Receiver<PodUpdate>,
        mut pleg: mpsc::Receiver<Vec<PodLifecycleEvent>>,
        mut probes: mpsc::UnboundedReceiver<PodUid>,
        sources_ready: SourcesReady,
        cancel: CancellationToken,
    ) {
        tracing::info!("starting the sync loop");
        let (dirs_tx, mut pod_dirs) = mpsc::channel(1);
        let (volumes, cm) = (self.syncer.volumes.clone(), self.syncer.cm.clone());
        self.tasks
            .spawn(tracing::info_span!("pod_dirs"), move |token| {
                list_pod_dirs(volumes, cm, dirs_tx, token)
            });
        let mut sync_tick = tokio::time::interval(SYNC_PERIOD);
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        for t in [&mut sync_tick, &mut housekeeping] {
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut last_error = String::new();
        // Updates received while the runtime was unhealthy.
        let mut deferred: Vec<PodUpdate> = Vec::new();
        loop {
            let errors = self.runtime_state.runtime_errors();
            if !errors.is_empty() {
                let msg = errors.join("; ");
                if msg != last_error {
                    tracing::warn!(error = %msg, "skipping pod synchronization");
                    last_error = msg;
                }
                // Pods are not dispatched meanwhile, but what the sources
                // want is recorded (for /pods) and dispatched once the
                // runtime is back.
                let pause = tokio::time::sleep(backoff.next_delay());
                tokio::pin!(pause);
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = &mut pause => break,
                        Some(update) = updates.recv() => {
                            self.record_desired(&update);
                            deferred.push(update);
                        }
                    }
                }
                continue;
            }
            if !last_error.is_empty() {
                tracing::info!("container runtime healthy again: resuming pod synchronization");
                last_error.clear();
            }
            for update in std::mem::take(&mut deferred) {
                self.handle_update(update, &sources_ready).await;
            }
            backoff.reset();
            *self.sync_loop_seen.lock() = Instant::now();
            let wake = tokio::select! {
                _ = cancel.cancelled() => return,
                Some(update) = updates.recv() => Wake::Update(update),
                Some(events) = pleg.recv() => Wake::Pleg(events),
                Some(uid) = probes.recv() => Wake::Resync(uid),
                Some(dirs) = pod_dirs.recv() => Wake::PodDirs(dirs),
                _ = sync_tick.tick() => Wake::SyncTick,
                _ = housekeeping.tick() => Wake::Housekeeping,
            };
            let iteration = Instant::now();
            match wake {
                Wake::Update(update) => self.handle_update(update, &sources_ready).await,
                Wake::Pleg(events) => self.handle_pleg(events),
                Wake::Resync(uid) => {
                    if let Some(pod) = self.pod_manager.get(&uid) {
                        self.workers.update_pod(pod);
                    }
                }
                Wake::PodDirs(dirs) => self.remove_orphaned_pod_dirs(&sources_ready, dirs),
                Wake::SyncTick => self.handle_due(),
                Wake::Housekeeping => {
                    // Sources mark themselves ready after sending: take what
                    // they sent first, so no wanted pod looks like an orphan.
                    while let Ok(update) = updates.try_recv() {
                        self.handle_update(update, &sources_ready).await;
                    }
                    let start = Instant::now();
                    self.housekeeping(&sources_ready);
                    self.opts
                        .metrics
                        .housekeeping_duration
                        .observe_duration(&[], start.elapsed());
                }
            }
            let m = &self.opts.metrics;
            m.sync_loop_iteration_duration
                .observe_duration(&[], iteration.elapsed());
            m.pod_worker_queue_length
                .set(&[], self.workers.queue_len() as f64);
        }
    }

    /// Record in the pod manager the pods an update adds or changes, without
    /// acting on them (while the runtime is unhealthy). Removals wait for
    /// `handle_update`, which stops what it removes.
    fn record_desired(&self, update: &PodUpdate) {
        if update.op != PodOperation::Remove {
            for pod in &update.pods {
                self.pod_manager.add_or_update(pod.clone());
            }
        }
    }

    async fn handle_update(&self, update: PodUpdate, sources_ready: &SourcesReady) {
        for pod in update.pods {
            let uid = PodUid::of(&pod);
            let name = kubelet_core::types::pod_full_name(&pod);
            match update.op {
                PodOperation::Add | PodOperation::Update => {
                    if !self.pod_manager.add_or_update(pod.clone()) {
                        continue; // a mirror pod: bookkeeping only
                    }
                    if self.rejected.lock().contains(&uid) {
                        continue;
                    }
                    tracing::info!(op = ?update.op, pod = %name, %uid, source = update.source, "pod update");
                    // Admitted with what it is allocated (kept across a
                    // restart), a resize since then handled after.
                    if update.op == PodOperation::Add
                        && update.source == SOURCE_API
                        && pod.metadata.deletion_timestamp.is_none()
                        && let Err(r) = self
                            .admit(&self.syncer.allocation.allocated_if_any(&pod))
                            .await
                    {
                        self.reject(&pod, r);
                        continue;
                    }
                    if update.op == PodOperation::Add {
                        self.syncer.allocation.admit(&pod);
                        self.restore_probe_results(&pod, update.source);
                    }
                    // A resize is admitted against every pod the sources
                    // want: one found as a pod is added (after a restart)
                    // waits for housekeeping, when every pod sent with it
                    // has been admitted; so does one before the sources
                    // have all been heard from.
                    if pod.metadata.deletion_timestamp.is_none() {
                        if update.op == PodOperation::Update && sources_ready.all_ready() {
                            self.handle_resize(&pod);
                        } else {
                            self.syncer.allocation.resize_after_sources(&pod);
                        }
                    }
                    if pod.metadata.deletion_timestamp.is_some() {
                        let grace = pod.metadata.deletion_grace_period_seconds;
                        tracing::info!(pod = %name, %uid, ?grace, "pod is being deleted");
                        self.workers.kill_pod(PodTarget::from_pod(pod), grace);
                    } else {
                        self.workers.update_pod(pod);
                    }
                }
                PodOperation::Remove => {
                    self.rejected.lock().remove(&uid);
                    if self.pod_manager.remove(&pod).is_some() {
                        tracing::info!(pod = %name, %uid, "pod removed by its source");
                        self.workers.kill_pod(PodTarget::from_pod(pod), None);
                    }
                }
                PodOperation::Reconcile => {
                    // Only the status changed: when a readiness gate's
                    // condition did, sync the pod now so Ready follows.
                    let resync = needs_readiness_reconcile(&pod)
                        && pod.metadata.deletion_timestamp.is_none();
                    if self.pod_manager.add_or_update(pod.clone())
                        && resync
                        && !self.rejected.lock().contains(&uid)
                    {
                        tracing::debug!(pod = %name, %uid, "readiness gate changed");
                        self.workers.update_pod(pod);
                    }
                }
            }
        }
    }

    /// A pod the sources give for the first time since the kubelet
    /// started: what its probes said before the restart, from its API
    /// status (API pods) or what the prober kept on disk (static pods).
    fn restore_probe_results(&self, pod: &Pod, source: &str) {
        let uid = PodUid::of(pod);
        if self.workers.state(&uid).is_some() {
            return;
        }
        let kept = if source != SOURCE_API {
            self.syncer.prober.kept_on_disk(&uid)
        } else {
            pod.status
                .as_ref()
                .map(crate::prober::restore::from_status)
                .unwrap_or_default()
        };
        if !kept.is_empty() {
            self.syncer.prober.restore(pod, kept);
        }
    }

    fn handle_pleg(&self, events: Vec<PodLifecycleEvent>) {
        let uids: BTreeSet<PodUid> = events.into_iter().map(|e| e.uid).collect();
        for uid in uids {
            if let Some(pod) = self.pod_manager.get(&uid) {
                self.workers.update_pod(pod);
            }
        }
    }

    fn handle_due(&self) {
        for uid in self.workers.take_due() {
            match self.pod_manager.get(&uid) {
                Some(pod) => self.workers.update_pod(pod),
                None => self.workers.poke(&uid),
            }
        }
        // Pods past their activeDeadlineSeconds are synced now, which fails
        // and stops them (upstream's activeDeadlineHandler as a sync handler).
        let with_deadline = self.pod_manager.pods_where(|p| {
            p.spec
                .as_ref()
                .is_some_and(|s| s.active_deadline_seconds.is_some())
        });
        for pod in with_deadline {
            if self.workers.state(&PodUid::of(&pod))
                == Some(kubelet_core::lifecycle::State::Syncing)
                && self.syncer.past_deadline(&pod)
            {
                self.workers.update_pod(pod);
            }
        }
    }
}

/// List the pod directories and the pod cgroups every POD_DIRS_PERIOD, off
/// the sync loop, and hand the UIDs to it.
async fn list_pod_dirs(
    volumes: VolumeManager,
    cm: ContainerManager,
    tx: mpsc::Sender<Vec<PodUid>>,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(POD_DIRS_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut uids = match volumes.pod_dirs().await {
            Ok(dirs) => dirs,
            Err(e) => {
                tracing::warn!(error = %e, "listing the pod directories");
                Vec::new()
            }
        };
        match cm.pod_uids().await {
            Ok(cgroups) => uids.extend(cgroups),
            Err(e) => tracing::warn!(error = %e, "listing the pod cgroups"),
        }
        uids.sort_unstable();
        uids.dedup();
        if !uids.is_empty() && tx.send(uids).await.is_err() {
            return;
        }
    }
}

/// What woke the sync loop.
enum Wake {
    Update(PodUpdate),
    Pleg(Vec<PodLifecycleEvent>),
    /// A probe result of this pod changed, or an object its volumes project.
    Resync(PodUid),
    /// The pods with a directory on disk or a cgroup (orphans are removed
    /// by their workers).
    PodDirs(Vec<PodUid>),
    SyncTick,
    Housekeeping,
}
