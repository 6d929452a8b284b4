//! Runtime and network readiness as the kubelet last saw them (upstream's
//! `runtimeState`), plus health checks (PLEG). The sync loop skips work while
//! `runtime_errors` is non-empty; SyncPod refuses non-hostNetwork pods while
//! `network_errors` is.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::runtime::{RuntimeFeatures, RuntimeHandler};
use tokio::time::Instant;

/// A named health check; returns an error message while unhealthy.
pub type HealthCheck = Arc<dyn Fn() -> Option<String> + Send + Sync>;

#[derive(Default)]
struct Inner {
    last_sync: Option<Instant>,
    runtime_error: Option<String>,
    network_error: Option<String>,
    checks: Vec<(&'static str, HealthCheck)>,
    handlers: Vec<RuntimeHandler>,
    features: Option<RuntimeFeatures>,
}

#[derive(Clone, Default)]
pub struct RuntimeState {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for RuntimeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.lock();
        f.debug_struct("RuntimeState")
            .field("handlers", &s.handlers)
            .field("features", &s.features)
            .finish_non_exhaustive()
    }
}

/// The runtime counts as down when its status has not been read this long.
pub const RUNTIME_SYNC_THRESHOLD: Duration = Duration::from_secs(30);

impl RuntimeState {
    /// Record a successful Status() call and what it said.
    pub fn set_status(&self, runtime_error: Option<String>, network_error: Option<String>) {
        let mut s = self.inner.lock();
        s.last_sync = Some(Instant::now());
        s.runtime_error = runtime_error;
        s.network_error = network_error;
    }

    /// Record the handlers and features the runtime's Status listed.
    pub fn set_handlers(&self, handlers: Vec<RuntimeHandler>, features: Option<RuntimeFeatures>) {
        let mut s = self.inner.lock();
        s.handlers = handlers;
        s.features = features;
    }

    /// The runtime's handlers, as its last Status listed them.
    pub fn handlers(&self) -> Vec<RuntimeHandler> {
        self.inner.lock().handlers.clone()
    }

    /// The runtime's features, when its last Status said.
    pub fn features(&self) -> Option<RuntimeFeatures> {
        self.inner.lock().features
    }

    /// Record that the runtime could not be reached.
    pub fn set_unreachable(&self, error: String) {
        self.inner.lock().runtime_error = Some(format!("container runtime is down: {error}"));
    }

    pub fn add_health_check(&self, name: &'static str, check: HealthCheck) {
        self.inner.lock().checks.push((name, check));
    }

    /// Why pods cannot be synced now; empty when the runtime is healthy.
    pub fn runtime_errors(&self) -> Vec<String> {
        let s = self.inner.lock();
        let mut errs = Vec::new();
        match s.last_sync {
            None => errs.push("container runtime status check may not have completed yet".into()),
            Some(t) if t.elapsed() > RUNTIME_SYNC_THRESHOLD => errs.push(format!(
                "container runtime is down: no status for {:?}",
                t.elapsed()
            )),
            _ => {}
        }
        errs.extend(s.runtime_error.clone());
        for (name, check) in &s.checks {
            if let Some(e) = check() {
                errs.push(format!("{name} is not healthy: {e}"));
            }
        }
        errs
    }

    pub fn network_error(&self) -> Option<String> {
        self.inner.lock().network_error.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn errors_follow_status() {
        let s = RuntimeState::default();
        assert_eq!(s.runtime_errors().len(), 1, "no status yet");
        s.set_status(None, Some("cni not ready".into()));
        assert!(s.runtime_errors().is_empty());
        assert_eq!(s.network_error().as_deref(), Some("cni not ready"));
        tokio::time::advance(RUNTIME_SYNC_THRESHOLD + Duration::from_secs(1)).await;
        assert_eq!(s.runtime_errors().len(), 1, "stale status");
        s.set_status(None, None);
        s.set_unreachable("connection refused".into());
        assert_eq!(
            s.runtime_errors(),
            vec!["container runtime is down: connection refused".to_string()]
        );
        s.set_status(None, None);
        s.add_health_check("pleg", Arc::new(|| Some("relist stuck".into())));
        assert_eq!(
            s.runtime_errors(),
            vec!["pleg is not healthy: relist stuck".to_string()]
        );
    }
}
