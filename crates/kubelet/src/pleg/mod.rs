//! PLEG, the pod lifecycle event generator (upstream's `pleg/generic.go`):
//! relist the runtime every second, diff against the last relist, and tell
//! the sync loop which pods changed. Between relists one pod can be
//! relisted on demand (upstream's PLEGOnDemandRelist, GA): after a sync that
//! acted on the runtime, and, with the EventedPLEG gate, when the runtime's
//! event stream says one of its containers stopped ([`evented`]). The last
//! relist is kept for housekeeping; its age is PLEG's health.

mod evented;

pub use evented::EventedPleg;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::pleg::{EventType, PodLifecycleEvent, diff};
use kubelet_core::runtime::{ContainerState, RuntimePods, SandboxState};
use kubelet_core::types::PodUid;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::kuberuntime::RuntimeManager;

pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// PLEG is unhealthy when no relist finished for this long.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(3 * 60);
/// On-demand relists that may wait (upstream's relistRequests channel).
const RELIST_REQUESTS: usize = 200;

#[derive(Default)]
struct Shared {
    pods: Arc<RuntimePods>,
    last_relist: Option<Instant>,
    /// When the last relist started (kubelet_pleg_relist_interval_seconds;
    /// on-demand requests older than this were served by it).
    last_start: Option<Instant>,
    /// Whether evented PLEG's stream is open: only then is a death the
    /// relist finds checked against it.
    stream_open: bool,
    /// Container deaths the last relist found that the event stream had not
    /// reported (container id → pod): drift if still unreported at the next.
    unreported: HashMap<String, PodUid>,
}

/// A pod to relist on its own, and when that was asked.
struct RelistRequest {
    uid: PodUid,
    at: Instant,
}

/// Where on-demand relists are asked for (upstream's RequestRelist).
#[derive(Clone)]
pub struct RelistRequests(mpsc::Sender<RelistRequest>);

impl RelistRequests {
    /// Relist this pod soon, on its own. Dropped, with upstream's log line,
    /// when RELIST_REQUESTS already wait: the next relist covers it.
    pub fn request(&self, uid: &PodUid) {
        let req = RelistRequest {
            uid: uid.clone(),
            at: Instant::now(),
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = self.0.try_send(req) {
            tracing::error!(pod_uid = %uid, "Relist request channel full; dropping relist request");
        }
    }
}

#[derive(Clone)]
pub struct Pleg {
    runtime: RuntimeManager,
    shared: Arc<Mutex<Shared>>,
    metrics: KubeletMetrics,
    clock: Clock,
    requests: RelistRequests,
    /// The requests' receiving end, taken by [`Pleg::run`].
    inbox: Arc<Mutex<Option<mpsc::Receiver<RelistRequest>>>>,
}

impl Pleg {
    pub fn new(runtime: RuntimeManager, metrics: KubeletMetrics, clock: Clock) -> Self {
        let (tx, rx) = mpsc::channel(RELIST_REQUESTS);
        Pleg {
            runtime,
            shared: Arc::default(),
            metrics,
            clock,
            requests: RelistRequests(tx),
            inbox: Arc::new(Mutex::new(Some(rx))),
        }
    }

    /// Where on-demand relists are asked for.
    pub fn requests(&self) -> RelistRequests {
        self.requests.clone()
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
        self.check_drift(&mut s, &events);
        Ok(events)
    }

    /// Relist one pod (upstream's relistPod): its entry in the last relist
    /// is replaced, and what changed in it returned.
    pub async fn relist_pod(
        &self,
        uid: &PodUid,
    ) -> Result<Vec<PodLifecycleEvent>, kubelet_cri::client::CriError> {
        let start = Instant::now();
        let fresh = self.runtime.relist_pod(uid).await?;
        self.metrics
            .pleg_pod_relist_duration
            .observe_duration(&[], start.elapsed());
        let mut s = self.shared.lock();
        let old: RuntimePods = s
            .pods
            .get(uid)
            .map(|p| RuntimePods::from([(uid.clone(), p.clone())]))
            .unwrap_or_default();
        let events = diff(&old, &fresh);
        if !events.is_empty() {
            let pods = Arc::make_mut(&mut s.pods);
            match fresh.into_values().next() {
                Some(pod) => pods.insert(uid.clone(), pod),
                None => pods.remove(uid),
            };
        }
        Ok(events)
    }

    /// Evented PLEG's stream opened or ended.
    fn set_stream_open(&self, open: bool) {
        let mut s = self.shared.lock();
        s.stream_open = open;
        if !open {
            s.unreported.clear();
        }
    }

    /// The event stream reported this container's end.
    fn stream_reported(&self, container_id: &str) {
        self.shared.lock().unreported.remove(container_id);
    }

    /// While the event stream is open, a death the relist found is one it
    /// has not reported yet; still unreported at the next relist, it is
    /// drift, counted and named.
    fn check_drift(&self, s: &mut Shared, events: &[PodLifecycleEvent]) {
        if !s.stream_open {
            return;
        }
        for (container_id, uid) in s.unreported.drain() {
            self.metrics.evented_pleg_drift.inc(&[]);
            tracing::warn!(pod_uid = %uid, container_id, "Evented PLEG: the relist found a container death the CRI event stream never reported");
        }
        s.unreported.extend(
            events
                .iter()
                .filter(|e| e.kind == EventType::ContainerDied)
                .map(|e| (e.container_id.clone(), e.uid.clone())),
        );
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

    /// Relist every RELIST_PERIOD until cancelled, and one pod whenever
    /// asked between (the periodic relist first, as upstream; a request it
    /// already covered is skipped), sending each batch of events.
    pub async fn run(self, tx: mpsc::Sender<Vec<PodLifecycleEvent>>, cancel: CancellationToken) {
        let Some(mut inbox) = self.inbox.lock().take() else {
            tracing::error!("PLEG is already running");
            return;
        };
        let mut tick = tokio::time::interval(RELIST_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let relisted = tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = tick.tick() => self.relist().await,
                Some(req) = inbox.recv() => {
                    if self.shared.lock().last_start.is_some_and(|t| req.at <= t) {
                        continue;
                    }
                    self.relist_pod(&req.uid).await
                }
            };
            match relisted {
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
