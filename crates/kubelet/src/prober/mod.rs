//! The prober (upstream's pkg/kubelet/prober/prober_manager.go): one worker
//! task per (pod, container, probe kind) for the liveness, readiness and
//! startup probes of regular containers and sidecars; results are cached by
//! container id and a change notifies the sync loop with the pod's UID.
//!
//! Unlike upstream's, a restart of the kubelet does not make ready pods
//! unready: the readiness and startup results a container had before are
//! restored ([`ProbeManager::restore`]: from the API pod's status, or for
//! static pods from `pods/<uid>/probe-results.json`, which the prober keeps)
//! for the container that is still the same (same id), until its first
//! probe decides, or one probe period (and timeout) passes without one
//! (`restore` module).

pub mod handlers;
mod metrics;
pub mod restore;
pub mod results;
mod worker;

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use kubelet_core::probe::ProbeKind;
use kubelet_core::types::PodUid;
use kubelet_cri::client::CriClient;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use restore::Kept;
pub use results::ProbeResults;

use crate::clock::Clock;
use crate::events::Recorder;
use crate::status_manager::StatusManager;
use kubelet_tasks::Tasks;

/// Which worker: a pod's container's probe of one kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct WorkerKey {
    uid: PodUid,
    container: String,
    kind: ProbeKind,
}

struct WorkerEntry {
    /// Tells a worker's exit apart from its replacement's.
    id: u64,
    spec: Probe,
    token: CancellationToken,
    /// The worker ended by itself (terminal pod, container done for good);
    /// kept so the next `add_pod` does not start it again.
    done: bool,
}

/// What the manager and its workers share.
pub(crate) struct Shared {
    /// The wall clock container start times are compared with.
    clock: Clock,
    cri: CriClient,
    status: StatusManager,
    events: Recorder,
    tasks: Tasks,
    changed: UnboundedSender<PodUid>,
    results: ProbeResults,
    metrics: metrics::ProbeMetrics,
    /// When the manager started: workers created soon after spread their first probe.
    start: Instant,
    workers: Mutex<HashMap<WorkerKey, WorkerEntry>>,
    next_id: AtomicU64,
    /// What each pod's containers had before a restart, until their
    /// workers take it.
    restored: Mutex<HashMap<PodUid, HashMap<String, Kept>>>,
    /// `<root-dir>/pods`, where static pods' results are kept (None: not kept).
    pods_dir: Option<std::path::PathBuf>,
    /// Each static pod's kept results, as its file has them.
    kept_static: Mutex<HashMap<PodUid, HashMap<String, Kept>>>,
}

impl Shared {
    fn workers(&self) -> MutexGuard<'_, HashMap<WorkerKey, WorkerEntry>> {
        self.workers.lock()
    }

    fn restored(&self) -> MutexGuard<'_, HashMap<PodUid, HashMap<String, Kept>>> {
        self.restored.lock()
    }

    /// A static pod's container's readiness or startup result changed:
    /// what its file keeps for the next restart follows.
    fn keep_static(&self, uid: &PodUid, container: &str, id: &str, kind: ProbeKind, success: bool) {
        let Some(dir) = &self.pods_dir else {
            return;
        };
        if kind == ProbeKind::Liveness {
            return;
        }
        let mut all = self.kept_static.lock();
        let pod = all.entry(uid.clone()).or_default();
        let fresh = Kept {
            id: id.to_owned(),
            ready: false,
            started: false,
        };
        let entry = pod
            .entry(container.to_owned())
            .or_insert_with(|| fresh.clone());
        let mut next = if entry.id == id { entry.clone() } else { fresh };
        match kind {
            ProbeKind::Readiness => next.ready = success,
            _ => next.started = success,
        }
        if *entry == next {
            return;
        }
        *entry = next;
        // A small file, rarely written: inline.
        if let Err(e) = restore::write_kept(dir, uid, pod) {
            tracing::warn!(pod = %uid, error = %e, "keeping a static pod's probe results");
        }
    }

    /// A worker ended: mark it done. False when another worker replaced it
    /// (the replacement owns the container's result now).
    fn worker_ended(&self, key: &WorkerKey, id: u64) -> bool {
        match self.workers().get_mut(key) {
            Some(entry) if entry.id == id => {
                entry.done = true;
                true
            }
            Some(_) => false,
            None => true,
        }
    }
}

/// A cheap handle on the prober.
#[derive(Clone)]
pub struct ProbeManager {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ProbeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeManager")
            .field("workers", &self.worker_count())
            .finish_non_exhaustive()
    }
}

/// The containers that are probed: regular containers and sidecars
/// (init containers with restartPolicy Always).
pub(super) fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let sidecars = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.into_iter()
        .flat_map(|s| s.containers.iter())
        .chain(sidecars)
}

impl ProbeManager {
    /// `pods_dir`: `<root-dir>/pods`, where static pods' results are kept
    /// across restarts (None: they are not).
    pub fn new(
        cri: CriClient,
        status: StatusManager,
        events: Recorder,
        tasks: Tasks,
        changed: UnboundedSender<PodUid>,
        clock: Clock,
        pods_dir: Option<std::path::PathBuf>,
    ) -> Self {
        ProbeManager {
            shared: Arc::new(Shared {
                clock,
                cri,
                status,
                events,
                tasks,
                changed,
                results: ProbeResults::default(),
                metrics: metrics::ProbeMetrics::default(),
                start: Instant::now(),
                workers: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
                restored: Mutex::default(),
                pods_dir,
                kept_static: Mutex::default(),
            }),
        }
    }

    /// Restore what `pod`'s containers had before the kubelet restarted
    /// (`kept`, by container name): each readiness and startup success is
    /// in the cached results at once, so the pod's first status after the
    /// restart already has it, and the container's workers start from it.
    /// A container that is not the same any more (another id) has nothing
    /// kept: its workers find it gone and start over.
    pub fn restore(&self, pod: &Pod, kept: HashMap<String, Kept>) {
        let uid = PodUid::of(pod);
        let mut taken = HashMap::new();
        for container in probed_containers(pod) {
            let Some(k) = kept.get(&container.name) else {
                continue;
            };
            let mut any = false;
            for (kind, yes) in [
                (ProbeKind::Readiness, k.ready),
                (ProbeKind::Startup, k.started),
            ] {
                if yes && kind.spec(container).is_some() {
                    self.shared.results.seed(kind, &k.id);
                    any = true;
                }
            }
            if any {
                taken.insert(container.name.clone(), k.clone());
            }
        }
        if !taken.is_empty() {
            tracing::info!(pod = %uid, containers = taken.len(), "probe results kept from before the restart");
            self.shared.restored().insert(uid, taken);
        }
    }

    /// What this kubelet kept on disk of a static pod's results.
    pub fn kept_on_disk(&self, uid: &PodUid) -> HashMap<String, Kept> {
        match &self.shared.pods_dir {
            Some(dir) => restore::read_kept(dir, uid),
            None => HashMap::new(),
        }
    }

    /// Start a worker for each probe of the pod's containers and sidecars
    /// that has none; a probe whose spec changed gets a new worker.
    /// Idempotent: call it at every SyncPod.
    pub fn add_pod(&self, pod: &Arc<Pod>) {
        let uid = PodUid::of(pod);
        let restored = self.shared.restored().remove(&uid).unwrap_or_default();
        for container in probed_containers(pod) {
            let kept = restored.get(&container.name);
            for kind in ProbeKind::ALL {
                let Some(spec) = kind.spec(container) else {
                    continue;
                };
                let key = WorkerKey {
                    uid: uid.clone(),
                    container: container.name.clone(),
                    kind,
                };
                let resumed = kept.and_then(|k| {
                    let yes = match kind {
                        ProbeKind::Readiness => k.ready,
                        ProbeKind::Startup => k.started,
                        ProbeKind::Liveness => false,
                    };
                    yes.then(|| k.id.clone())
                });
                self.start_worker(key, pod, spec, resumed);
            }
        }
    }

    fn start_worker(&self, key: WorkerKey, pod: &Arc<Pod>, spec: &Probe, resumed: Option<String>) {
        let shared = &self.shared;
        let mut workers = shared.workers();
        if let Some(old) = workers.get(&key) {
            if &old.spec == spec {
                return;
            }
            old.token.cancel();
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let span = tracing::debug_span!(
            "probe",
            pod = %key.uid,
            container = %key.container,
            kind = %key.kind,
        );
        let worker = worker::Worker {
            id,
            key: key.clone(),
            pod: pod.clone(),
            shared: shared.clone(),
            resumed,
        };
        let token = shared.tasks.spawn(span, |token| worker.run(token));
        workers.insert(
            key,
            WorkerEntry {
                id,
                spec: spec.clone(),
                token,
                done: false,
            },
        );
    }

    /// Stop every worker of the pod (it is terminating or gone).
    pub fn remove_pod(&self, uid: &PodUid) {
        self.cleanup(|u| u != uid);
    }

    /// Stop the workers of pods `keep` rejects (housekeeping), and forget
    /// what was restored of them and no worker took.
    pub fn cleanup(&self, keep: impl Fn(&PodUid) -> bool) {
        self.shared.workers().retain(|key, entry| {
            let kept = keep(&key.uid);
            if !kept {
                entry.token.cancel();
            }
            kept
        });
        self.shared.restored().retain(|uid, containers| {
            let kept = keep(uid);
            if !kept {
                for k in containers.values() {
                    for kind in [ProbeKind::Readiness, ProbeKind::Startup] {
                        self.shared.results.remove(kind, &k.id);
                    }
                }
            }
            kept
        });
        self.shared.kept_static.lock().retain(|uid, _| keep(uid));
    }

    /// Workers running (tests assert none leak).
    pub fn worker_count(&self) -> usize {
        self.shared.workers().values().filter(|e| !e.done).count()
    }

    /// The cached results.
    pub fn results(&self) -> ProbeResults {
        self.shared.results.clone()
    }

    /// `prober_probe_total` and `prober_probe_duration_seconds` in
    /// Prometheus text format (for /metrics/probes).
    pub fn probe_metrics_text(&self) -> String {
        self.shared.metrics.render()
    }
}

#[cfg(test)]
mod tests;
