//! Graceful node shutdown (upstream's pkg/kubelet/nodeshutdown): with
//! shutdownGracePeriod (or shutdownGracePeriodByPodPriority) set, the
//! kubelet holds a delay inhibitor lock from systemd-logind, raising
//! logind's InhibitDelayMaxSec first when it is shorter than the grace
//! asked (a drop-in in /etc/systemd/logind.conf.d, then a reload). When
//! logind says PrepareForShutdown(true), the node turns NotReady, new pods
//! are refused, and the pods stop by priority group, lowest first, each
//! within its group's grace (or its own, if shorter), reported Failed with
//! reason Terminated; then the lock is released and the shutdown goes on.
//! PrepareForShutdown(false) (a cancelled shutdown) admits pods again and
//! takes a new lock.
//!
//! rkubelet's additions: where no logind runs, `--shutdown-on-sigterm`
//! makes SIGTERM to rkubelet the same event (see
//! [`ShutdownManager::shut_down`]); and a lost bus, or one not there at
//! start, is tried again with backoff (upstream gives up when its first
//! start fails).

#[cfg(any(test, feature = "fake-logind"))]
pub mod fake;
mod logind;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::backoff::Backoff;
use kubelet_core::config::{KubeletConfiguration, ShutdownGracePeriodByPodPriority};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::nodeshutdown::{
    EVENT_CANCELLED, EVENT_DETECTED, LOGIND_CONF_FILE, NODE_NOT_READY, NOT_ADMITTED_MESSAGE,
    NOT_ADMITTED_REASON, STATE_FILE, State, group_by_priority, logind_override, period_requested,
    periods, pod_grace,
};
use kubelet_core::types::Rejection;
use tokio_util::sync::CancellationToken;

pub use logind::{InhibitLock, Logind};

/// How often a stopping group is looked at for pods still there.
const GROUP_POLL: Duration = Duration::from_millis(100);
/// Reading InhibitDelayMaxUSec again after a reload: 5 times, 100 ms
/// apart, doubling (upstream's backoff).
const RELOAD_FIRST_WAIT: Duration = Duration::from_millis(100);
const RELOAD_STEPS: u32 = 5;

/// Why watching logind failed. Every one is tried again (the bus, or
/// logind, may come back).
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error("connecting to the system bus: {0}")]
    Bus(#[source] zbus::Error),
    #[error("failed to monitor shutdown: {0}")]
    Monitor(#[source] zbus::Error),
    #[error("failed reading InhibitDelayMaxUSec property from logind: {0}")]
    ReadDelay(#[source] zbus::Error),
    #[error(
        "unable to override inhibit delay by shutdown manager: failed writing logind shutdown inhibit override file {path}: {source}"
    )]
    Override {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("unable to reload logind conf: {0}")]
    Reload(#[source] zbus::Error),
    #[error(
        "node shutdown manager was timed out after {attempts} attempts waiting for logind InhibitDelayMaxSec to update to {requested:?} (ShutdownGracePeriod), current value is {current:?}"
    )]
    DelayNotRaised {
        attempts: u32,
        requested: Duration,
        current: Duration,
    },
    #[error("failed creating systemd inhibitor: {0}")]
    Inhibit(#[source] zbus::Error),
    #[error("Ended to watching the node for shutdown events")]
    Ended,
}

/// What the manager acts through (the kubelet).
pub trait ShutdownHost: Send + Sync + 'static {
    /// The pods admitted and not yet terminal.
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Stop `pod` for good within `grace` seconds, to be reported as
    /// stopped by the shutdown.
    fn terminate(&self, pod: &Arc<Pod>, grace: i64);
    /// Whether `pod` is stopped and its volumes are gone.
    fn cleaned_up(&self, pod: &Pod) -> bool;
    /// A Normal event about the node.
    fn node_event(&self, reason: &str, message: &str);
    /// Send node status now (its Ready condition changed).
    fn sync_node_status(&self);
}

/// The manager's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The grace periods by priority, lowest first (empty: off).
    pub periods: Vec<ShutdownGracePeriodByPodPriority>,
    /// Whether the start and end of a shutdown are kept (the state file
    /// and the gauges: GracefulNodeShutdownBasedOnPodPriority).
    pub record_times: bool,
    /// `<root-dir>/graceful_node_shutdown_state`.
    pub state_file: PathBuf,
    pub logind: LogindAccess,
}

/// Where logind is: the bus it is on, and the directory of its drop-ins.
#[derive(Clone, Debug)]
pub struct LogindAccess {
    /// None: the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the
    /// well-known socket).
    pub bus_address: Option<String>,
    /// `/etc/systemd/logind.conf.d`.
    pub conf_dir: PathBuf,
}

impl Default for LogindAccess {
    fn default() -> Self {
        LogindAccess {
            bus_address: None,
            conf_dir: PathBuf::from(kubelet_core::nodeshutdown::LOGIND_CONF_DIR),
        }
    }
}

impl Settings {
    pub fn from_config(
        cfg: &KubeletConfiguration,
        root_dir: &std::path::Path,
        logind: LogindAccess,
    ) -> Settings {
        Settings {
            periods: if cfg.feature_enabled("GracefulNodeShutdown") {
                periods(cfg)
            } else {
                Vec::new()
            },
            record_times: cfg.feature_enabled("GracefulNodeShutdownBasedOnPodPriority"),
            state_file: root_dir.join(STATE_FILE),
            logind,
        }
    }
}

pub struct ShutdownManager {
    settings: Settings,
    shutting_down: AtomicBool,
    metrics: KubeletMetrics,
}

impl ShutdownManager {
    /// The manager; the gauges show the last shutdown the state file
    /// recorded.
    pub fn new(settings: Settings, metrics: KubeletMetrics) -> ShutdownManager {
        let manager = ShutdownManager {
            settings,
            shutting_down: AtomicBool::new(false),
            metrics,
        };
        if manager.settings.record_times {
            let state = manager.load_state();
            manager.show(state);
        }
        manager
    }

    /// Whether graceful shutdown is configured.
    pub fn enabled(&self) -> bool {
        !self.settings.periods.is_empty()
    }

    /// Why the node is not Ready, while it shuts down.
    pub fn status(&self) -> Option<&'static str> {
        self.shutting_down
            .load(Ordering::Relaxed)
            .then_some(NODE_NOT_READY)
    }

    /// Admission: no pod while the node shuts down.
    pub fn admit(&self) -> Result<(), Rejection> {
        match self.status() {
            Some(_) => Err(Rejection {
                reason: NOT_ADMITTED_REASON.into(),
                message: NOT_ADMITTED_MESSAGE.into(),
            }),
            None => Ok(()),
        }
    }

    /// Watch logind until cancelled, connecting again (with backoff) when
    /// the bus is lost or not there.
    pub async fn run(self: Arc<Self>, host: Arc<dyn ShutdownHost>, cancel: CancellationToken) {
        if !self.enabled() {
            return;
        }
        tracing::info!(
            periods = ?self.settings.periods,
            "Creating node shutdown manager"
        );
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let mut started = false;
        loop {
            let ended = tokio::select! {
                _ = cancel.cancelled() => return,
                e = self.watch(host.as_ref(), &mut backoff, &mut started) => e,
            };
            match ended {
                ShutdownError::Ended => {
                    tracing::error!("Ended to watching the node for shutdown events");
                }
                e if !started => {
                    tracing::error!(error = %e, "Failed to start node shutdown manager")
                }
                e => tracing::error!(error = %e, "Unable to watch the node for shutdown events"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff.next_delay()) => {}
            }
            tracing::info!("Restarting watch for node shutdown events");
        }
    }

    /// One connection's life: the delay checked (and raised), the lock
    /// taken, then shutdown events until the bus ends.
    /// Returns why it ended (`started` set once a lock was first held).
    async fn watch(
        &self,
        host: &dyn ShutdownHost,
        backoff: &mut Backoff,
        started: &mut bool,
    ) -> ShutdownError {
        match self.hold_lock(host, backoff, started).await {
            Ok(never) => match never {},
            Err(e) => e,
        }
    }

    async fn hold_lock(
        &self,
        host: &dyn ShutdownHost,
        backoff: &mut Backoff,
        started: &mut bool,
    ) -> Result<std::convert::Infallible, ShutdownError> {
        let bus = Logind::connect(self.settings.logind.bus_address.as_deref()).await?;
        self.ensure_delay(&bus).await?;
        // Subscribed before the lock is taken: no event falls between.
        let mut events = bus.shutdown_events().await?;
        let mut lock = Some(bus.inhibit().await?);
        backoff.reset();
        *started = true;
        tracing::info!("node shutdown manager holds a delay inhibitor lock");
        while let Some(start) = events.next().await {
            if start {
                self.shut_down(host).await;
                // Released: the shutdown goes on.
                drop(lock.take());
            } else {
                tracing::info!("Shutdown manager detected shutdown cancellation");
                host.node_event(kubelet_core::nodeshutdown::EVENT_REASON, EVENT_CANCELLED);
                self.shutting_down.store(false, Ordering::Relaxed);
                lock = Some(bus.inhibit().await?);
            }
        }
        drop(lock);
        Err(ShutdownError::Ended)
    }

    /// Raise logind's InhibitDelayMaxSec to the grace asked when it is
    /// shorter, as upstream: its drop-in, a reload, and reads until the
    /// new value shows.
    async fn ensure_delay(&self, bus: &Logind) -> Result<(), ShutdownError> {
        let requested = period_requested(&self.settings.periods);
        let current = bus.inhibit_delay().await?;
        if requested <= current {
            return Ok(());
        }
        let dir = self.settings.logind.conf_dir.clone();
        let path = dir.join(LOGIND_CONF_FILE);
        let written = {
            let path = path.clone();
            kubelet_tasks::blocking(move || {
                std::fs::create_dir_all(&dir)?;
                crate::files::write_file_mode(&path, logind_override(requested).as_bytes(), 0o644)
            })
            .await
        };
        written.map_err(|source| ShutdownError::Override { path, source })?;
        bus.reload().await?;
        // The reload is asynchronous: read, then wait 100 ms, doubling,
        // between reads (upstream's exponential backoff of 5 steps).
        let mut wait = RELOAD_FIRST_WAIT;
        let mut current = current;
        for step in 1..=RELOAD_STEPS {
            current = bus.inhibit_delay().await?;
            if requested <= current {
                return Ok(());
            }
            if step < RELOAD_STEPS {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
        Err(ShutdownError::DelayNotRaised {
            attempts: RELOAD_STEPS,
            requested,
            current,
        })
    }

    /// The shutdown itself (logind's PrepareForShutdown(true), or SIGTERM
    /// with `--shutdown-on-sigterm`): NotReady at once, no new pod, the
    /// pods stopped group by group, the times kept.
    /// A shutdown already under way (logind's, then systemd's SIGTERM)
    /// is not done again.
    pub async fn shut_down(&self, host: &dyn ShutdownHost) {
        if self.shutting_down.swap(true, Ordering::Relaxed) {
            tracing::info!("the node is already shutting down");
            return;
        }
        tracing::info!("Shutdown manager detected new shutdown event");
        host.node_event(kubelet_core::nodeshutdown::EVENT_REASON, EVENT_DETECTED);
        host.sync_node_status();
        let pods = host.active_pods();
        let start = SystemTime::now();
        self.record(State {
            start: Some(start),
            end: None,
        })
        .await;
        self.stop_pods(host, pods).await;
        self.record(State {
            start: Some(start),
            end: Some(SystemTime::now()),
        })
        .await;
        tracing::info!(
            "Shutdown manager completed processing shutdown event, node will shutdown shortly"
        );
    }

    /// Upstream's killPods: group by group, lowest priority first, every
    /// pod of a group told to stop at once, the next group begun when all
    /// of them are cleaned up or the group's grace has passed.
    async fn stop_pods(&self, host: &dyn ShutdownHost, pods: Vec<Arc<Pod>>) {
        let groups = group_by_priority(&self.settings.periods, pods, |p| {
            p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
        });
        for group in groups {
            if group.pods.is_empty() {
                continue;
            }
            let seconds = group.period.shutdown_grace_period_seconds;
            for pod in &group.pods {
                let own = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds);
                let grace = pod_grace(seconds, own);
                tracing::info!(
                    pod = %kubelet_core::types::pod_full_name(pod),
                    grace,
                    "Shutdown manager killing pod with gracePeriod"
                );
                host.terminate(pod, grace);
            }
            let deadline = tokio::time::Instant::now()
                + Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
            let stopped = async {
                while !group.pods.iter().all(|p| host.cleaned_up(p)) {
                    tokio::time::sleep(GROUP_POLL).await;
                }
            };
            match tokio::time::timeout_at(deadline, stopped).await {
                Ok(()) => tracing::info!(
                    priority = group.period.priority,
                    grace = seconds,
                    "Done waiting for all pods in group to terminate"
                ),
                Err(_) => tracing::info!(
                    priority = group.period.priority,
                    grace = seconds,
                    "Shutdown manager pod killing time out"
                ),
            }
        }
    }

    fn load_state(&self) -> State {
        match std::fs::read_to_string(&self.settings.state_file) {
            Ok(text) => State::from_json(&text).unwrap_or_else(|e| {
                tracing::error!(error = %e, "Failed to load graceful shutdown state");
                State::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => {
                tracing::error!(error = %e, "Failed to load graceful shutdown state");
                State::default()
            }
        }
    }

    /// Keep `state` in the state file and the gauges.
    async fn record(&self, state: State) {
        if !self.settings.record_times {
            return;
        }
        self.show(state);
        let path = self.settings.state_file.clone();
        let json = state.to_json();
        let stored = kubelet_tasks::blocking(move || {
            crate::files::write_file_mode(&path, json.as_bytes(), 0o644)
        })
        .await;
        if let Err(e) = stored {
            tracing::error!(error = %e, "Failed to store graceful shutdown state");
        }
    }

    fn show(&self, state: State) {
        self.metrics
            .graceful_shutdown_start_time
            .set(&[], State::seconds(state.start));
        self.metrics
            .graceful_shutdown_end_time
            .set(&[], State::seconds(state.end));
    }
}
