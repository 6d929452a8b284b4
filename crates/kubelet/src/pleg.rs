//! PLEG, the pod lifecycle event generator (upstream's `pleg/generic.go`):
//! relist the runtime every second, diff against the last relist, and tell
//! the sync loop which pods changed. The last relist is kept for
//! housekeeping; its age is PLEG's health.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::pleg::{PodLifecycleEvent, diff};
use kubelet_core::runtime::{ContainerState, RuntimePods, SandboxState};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::kuberuntime::RuntimeManager;

pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// PLEG is unhealthy when no relist finished for this long.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(3 * 60);

#[derive(Default)]
struct Shared {
    pods: Arc<RuntimePods>,
    last_relist: Option<Instant>,
    /// When the last relist started (kubelet_pleg_relist_interval_seconds).
    last_start: Option<Instant>,
}

#[derive(Clone)]
pub struct Pleg {
    runtime: RuntimeManager,
    shared: Arc<Mutex<Shared>>,
    metrics: KubeletMetrics,
    clock: Clock,
}

impl Pleg {
    pub fn new(runtime: RuntimeManager, metrics: KubeletMetrics, clock: Clock) -> Self {
        Pleg {
            runtime,
            shared: Arc::default(),
            metrics,
            clock,
        }
    }

    /// The last relist: every pod the runtime held then.
    pub fn pods(&self) -> Arc<RuntimePods> {
        self.shared.lock().pods.clone()
    }

    /// Whether a relist has completed since PLEG started.
    pub fn has_relisted(&self) -> bool {
        self.shared.lock().last_relist.is_some()
    }

    /// None while healthy; the reason otherwise.
    pub fn healthy(&self, started: Instant) -> Option<String> {
        let since = self.shared.lock().last_relist.unwrap_or(started).elapsed();
        (since > RELIST_THRESHOLD).then(|| {
            format!("pleg was last seen active {since:?} ago; threshold is {RELIST_THRESHOLD:?}")
        })
    }

    /// Relist once and return what changed.
    pub async fn relist(&self) -> Result<Vec<PodLifecycleEvent>, kubelet_cri::client::CriError> {
        let start = Instant::now();
        if let Some(prev) = self.shared.lock().last_start.replace(start) {
            self.metrics
                .pleg_relist_interval
                .observe_duration(&[], start - prev);
        }
        let pods = Arc::new(self.runtime.relist().await?);
        self.record(&pods, start.elapsed());
        let mut s = self.shared.lock();
        let events = diff(&s.pods, &pods);
        s.pods = pods;
        s.last_relist = Some(Instant::now());
        Ok(events)
    }

    /// kubelet_pleg_relist_duration_seconds, kubelet_pleg_last_seen_seconds,
    /// kubelet_running_pods and kubelet_running_containers of one relist.
    fn record(&self, pods: &RuntimePods, took: Duration) {
        let m = &self.metrics;
        m.pleg_relist_duration.observe_duration(&[], took);
        m.pleg_last_seen
            .set(&[], self.clock.now_nanos() as f64 / 1e9);
        let running = pods
            .values()
            .filter(|p| p.sandboxes.values().any(|s| *s == SandboxState::Ready))
            .count();
        m.running_pods.set(&[], running as f64);
        // One pass over the containers: created, running, exited, unknown.
        let mut counts = [0usize; 4];
        for (_, state) in pods.values().flat_map(|p| p.containers.values()) {
            counts[match state {
                ContainerState::Created => 0,
                ContainerState::Running => 1,
                ContainerState::Exited => 2,
                ContainerState::Unknown => 3,
            }] += 1;
        }
        for (label, n) in ["created", "running", "exited", "unknown"]
            .iter()
            .zip(counts)
        {
            m.running_containers.set(&[label], n as f64);
        }
    }

    /// Relist every RELIST_PERIOD until cancelled, sending each batch of events.
    pub async fn run(self, tx: mpsc::Sender<Vec<PodLifecycleEvent>>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RELIST_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.relist().await {
                Ok(events) if events.is_empty() => {}
                Ok(events) => {
                    if tx.send(events).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "PLEG relist failed"),
            }
        }
    }
}
