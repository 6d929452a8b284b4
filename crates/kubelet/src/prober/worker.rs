//! One probe worker (upstream's prober/worker.go): a task that probes one
//! container's liveness, readiness or startup every period, following the
//! container through the status manager, and caches the result.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus, Probe};
use kubelet_core::phase::{PHASE_FAILED, PHASE_SUCCEEDED};
use kubelet_core::podspec::container_should_restart;
use kubelet_core::probe::{
    ContainerView, Next, ProbeKind, ProbeResult, ProbeState, ProbeTiming, ResultUpdate,
    probe_action,
};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::handlers::{HandlerError, Outcome, run_action};
use super::metrics::ProbeLabels;
use super::results::raw_container_id;
use super::{Shared, WorkerKey};
use crate::events::{Involved, WARNING};

/// Tries of a probe whose handler errors (upstream's maxProbeRetries).
const MAX_PROBE_RETRIES: usize = 3;

pub(crate) struct Worker {
    pub id: u64,
    pub key: WorkerKey,
    /// The pod as the worker was started for it; the container and its
    /// probe are read from it (a changed probe gets a new worker).
    pub pod: Arc<Pod>,
    pub shared: Arc<Shared>,
    /// The container whose success (of this worker's kind) was kept from
    /// before a restart.
    pub resumed: Option<String>,
}

/// The container a worker probes, and its probe, in the worker's pod.
#[derive(Clone, Copy)]
struct Target<'a> {
    container: &'a Container,
    spec: &'a Probe,
}

/// Why a probe produced no result.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error(transparent)]
    Action(#[from] kubelet_core::probe::ActionError),
    #[error(transparent)]
    Handler(#[from] HandlerError),
}

impl Worker {
    fn kind(&self) -> ProbeKind {
        self.key.kind
    }

    fn labels(&self) -> ProbeLabels {
        ProbeLabels {
            kind: self.kind(),
            container: self.key.container.clone(),
            pod: self.pod.metadata.name.clone().unwrap_or_default(),
            namespace: self.pod.metadata.namespace.clone().unwrap_or_default(),
            pod_uid: self.key.uid.to_string(),
        }
    }

    /// Probe every period until cancelled or the container is done for.
    pub async fn run(self, token: CancellationToken) {
        let pod = self.pod.clone();
        let Some(target) = super::probed_containers(&pod)
            .find(|c| c.name == self.key.container)
            .and_then(|container| {
                Some(Target {
                    container,
                    spec: self.kind().spec(container)?,
                })
            })
        else {
            // Started only for a probe the pod has.
            return self.finish(None);
        };
        let timing = ProbeTiming::of(self.kind(), target.spec);
        let mut state = match &self.resumed {
            Some(id) => ProbeState::resume(self.kind(), timing, id.clone(), ProbeResult::Success),
            None => ProbeState::new(self.kind(), timing),
        };
        // A kept readiness lasts until the first probe, at most a period
        // and a timeout: the time the first probe has after a restart.
        let kept_until = Instant::now() + timing.period + timing.timeout;
        // Workers started together (a kubelet restart) spread out over a period.
        if self.shared.start.elapsed() < timing.period {
            let jitter = timing.period.mul_f64(fraction(&self.key));
            tokio::select! {
                _ = token.cancelled() => return self.finish(state.container_id()),
                _ = tokio::time::sleep(jitter) => {}
            }
        }
        let mut ticker = tokio::time::interval_at(Instant::now() + timing.period, timing.period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            let keep_going = tokio::select! {
                _ = token.cancelled() => false,
                keep = self.do_probe(target, &mut state, timing) => keep,
            };
            if !keep_going {
                break;
            }
            loop {
                tokio::select! {
                    _ = token.cancelled() => return self.finish(state.container_id()),
                    _ = ticker.tick() => break,
                    _ = tokio::time::sleep_until(kept_until), if state.provisional() => {
                        tracing::info!(pod = %self.key.uid, container = %self.key.container, "no probe since the restart: the kept readiness ends");
                        if let Some(update) = state.expire() {
                            self.apply(update);
                        }
                    }
                }
            }
        }
        self.finish(state.container_id());
    }

    /// Clean up: the container's result and metrics go, unless another
    /// worker replaced this one (it owns them now).
    fn finish(&self, container_id: Option<&str>) {
        if !self.shared.worker_ended(&self.key, self.id) {
            return;
        }
        if let Some(id) = container_id {
            self.shared.results.remove(self.kind(), id);
        }
        self.shared.metrics.forget(&self.labels());
    }

    fn apply(&self, update: ResultUpdate) {
        match update {
            ResultUpdate::Set(id, result) => {
                if kubelet_core::types::is_static_pod(&self.pod) {
                    self.shared.keep_static(
                        &self.key.uid,
                        &self.key.container,
                        &id,
                        self.kind(),
                        result == ProbeResult::Success,
                    );
                }
                self.shared.results.set(
                    self.kind(),
                    &id,
                    result,
                    &self.key.uid,
                    &self.shared.changed,
                )
            }
            ResultUpdate::Remove(id) => self.shared.results.remove(self.kind(), &id),
        }
    }

    /// One tick; false ends the worker.
    async fn do_probe(
        &self,
        target: Target<'_>,
        state: &mut ProbeState,
        timing: ProbeTiming,
    ) -> bool {
        let started = Instant::now();
        let Some(status) = self.shared.status.get_pod_status(&self.key.uid) else {
            // Not created yet, or already forgotten.
            return true;
        };
        let terminal = matches!(
            status.phase.as_deref(),
            Some(PHASE_SUCCEEDED | PHASE_FAILED)
        );
        let view = self.container_view(target.container, &status);
        let tick = state.tick(terminal, view.as_ref());
        for update in tick.updates {
            self.apply(update);
        }
        match tick.next {
            Next::Stop => return false,
            Next::Wait => return true,
            Next::Probe => {}
        }
        let Some(container_id) = state.container_id().map(str::to_owned) else {
            return true;
        };
        let pod_ip = status.pod_ip.as_deref().unwrap_or("");
        let mut outcome = self
            .probe(target, &container_id, pod_ip, timing.timeout)
            .await;
        for _ in 1..MAX_PROBE_RETRIES {
            if outcome.is_ok() {
                break;
            }
            outcome = self
                .probe(target, &container_id, pod_ip, timing.timeout)
                .await;
        }
        let kind = self.kind();
        let result = match outcome {
            Err(e) => {
                tracing::debug!(pod = %self.key.uid, container = %self.key.container, %kind, error = %e, "probe errored");
                self.event(
                    "Unhealthy",
                    format!("{kind} probe errored and resulted in unknown state: {e}"),
                );
                // The result is thrown away.
                return true;
            }
            Ok(r) => match r.outcome {
                Outcome::Success => ProbeResult::Success,
                Outcome::Warning => {
                    self.event(
                        "ProbeWarning",
                        format!("{kind} probe warning: {}", r.output),
                    );
                    ProbeResult::Success
                }
                Outcome::Failure => {
                    tracing::debug!(pod = %self.key.uid, container = %self.key.container, %kind, output = %r.output, "probe failed");
                    self.event("Unhealthy", format!("{kind} probe failed: {}", r.output));
                    ProbeResult::Failure
                }
            },
        };
        self.shared
            .metrics
            .observe(&self.labels(), result, started.elapsed());
        if let Some(update) = state.record(result) {
            self.apply(update);
        }
        true
    }

    async fn probe(
        &self,
        target: Target<'_>,
        container_id: &str,
        pod_ip: &str,
        timeout: Duration,
    ) -> Result<super::handlers::HandlerResult, ProbeError> {
        let action = probe_action(target.spec, target.container, pod_ip)?;
        // On the heap while it runs: the handlers' futures (a gRPC call, an
        // HTTP exchange) are kilobytes, which every idle worker would hold.
        Ok(Box::pin(run_action(&self.shared.cri, container_id, &action, timeout)).await?)
    }

    fn event(&self, reason: &str, message: String) {
        self.shared.events.event(
            &Involved::pod(&self.pod, Some(&self.key.container)),
            WARNING,
            reason,
            message,
        );
    }

    /// The container as the last computed status shows it: a regular
    /// container first, else an init container (sidecars), with an id.
    fn container_view(&self, container: &Container, status: &PodStatus) -> Option<ContainerView> {
        let name = &container.name;
        let c = status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .find(|c| &c.name == name && !c.container_id.as_deref().unwrap_or("").is_empty())?;
        let id = raw_container_id(c.container_id.as_deref().unwrap_or("")).to_owned();
        // Started once the startup probe passed (upstream reads this back
        // from the status it computed from the same result).
        let started = container.startup_probe.is_none()
            || self.shared.results.get(ProbeKind::Startup, &id) == Some(ProbeResult::Success);
        let state = c.state.as_ref();
        let running = state.and_then(|s| s.running.as_ref());
        let exit_code = state
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        let running_for = running.map(|r| {
            let since = r.started_at.as_ref().map_or(0, |t| t.0.as_nanosecond());
            let nanos = i128::from(self.shared.clock.now_nanos()) - since;
            Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX))
        });
        Some(ContainerView {
            id,
            running_for,
            terminated: exit_code.is_some(),
            started,
            restartable: exit_code
                .is_none_or(|code| container_should_restart(container, &self.pod, code)),
        })
    }
}

/// A fraction in [0, 1) that differs per worker and per kubelet run.
fn fraction(key: &WorkerKey) -> f64 {
    let h = RandomState::new().hash_one(key);
    (h % 1_000_000) as f64 / 1_000_000.0
}
