//! The prober (upstream's pkg/kubelet/prober/prober_manager.go): one worker
//! task per (pod, container, probe kind) for the liveness, readiness and
//! startup probes of regular containers and sidecars; results are cached by
//! container id and a change notifies the sync loop with the pod's UID.

pub mod handlers;
mod metrics;
pub mod results;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use kubelet_core::probe::ProbeKind;
use kubelet_core::types::PodUid;
use kubelet_cri::client::CriClient;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use results::ProbeResults;

use crate::clock::Clock;
use crate::events::Recorder;
use crate::status_manager::StatusManager;
use crate::tasks::Tasks;

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
}

impl Shared {
    fn workers(&self) -> MutexGuard<'_, HashMap<WorkerKey, WorkerEntry>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
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
    pub fn new(
        cri: CriClient,
        status: StatusManager,
        events: Recorder,
        tasks: Tasks,
        changed: UnboundedSender<PodUid>,
        clock: Clock,
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
            }),
        }
    }

    /// Start a worker for each probe of the pod's containers and sidecars
    /// that has none; a probe whose spec changed gets a new worker.
    /// Idempotent: call it at every SyncPod.
    pub fn add_pod(&self, pod: &Arc<Pod>) {
        let uid = PodUid::of(pod);
        for container in probed_containers(pod) {
            for kind in ProbeKind::ALL {
                let Some(spec) = kind.spec(container) else {
                    continue;
                };
                let key = WorkerKey {
                    uid: uid.clone(),
                    container: container.name.clone(),
                    kind,
                };
                self.start_worker(key, pod, spec);
            }
        }
    }

    fn start_worker(&self, key: WorkerKey, pod: &Arc<Pod>, spec: &Probe) {
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

    /// Stop the workers of pods `keep` rejects (housekeeping).
    pub fn cleanup(&self, keep: impl Fn(&PodUid) -> bool) {
        self.shared.workers().retain(|key, entry| {
            let kept = keep(&key.uid);
            if !kept {
                entry.token.cancel();
            }
            kept
        });
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
