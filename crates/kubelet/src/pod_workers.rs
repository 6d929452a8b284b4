//! Pod workers: ACTUAL state. One task per pod UID, the only place a pod's
//! lifecycle moves (syncing → terminating → terminated → finished, decided by
//! `kubelet_core::lifecycle::step`). Each worker has a latest-wins inbox, so
//! updates coalesce and two operations on one pod never overlap; a kill
//! interrupts a running SyncPod (or a slower termination) at once.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::backoff::Backoff;
use kubelet_core::lifecycle::{self, Event, State, Step, Why};
use kubelet_core::types::{PodUid, keys};
use kubelet_core::workqueue::WorkQueue;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Retry, SyncError};
use crate::kuberuntime::PodRef;
use crate::tasks::Tasks;

/// The pod a worker acts on: its identity, and its spec while a source
/// knows it (orphans found in the runtime have none).
#[derive(Clone, Debug)]
pub struct PodTarget {
    pub pod_ref: PodRef,
    pub pod: Option<Arc<Pod>>,
}

impl PodTarget {
    pub fn from_pod(pod: Arc<Pod>) -> Self {
        PodTarget {
            pod_ref: PodRef {
                uid: PodUid::of(&pod),
                name: pod.metadata.name.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            },
            pod: Some(pod),
        }
    }
}

/// What the sources want of a pod, for housekeeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Desire {
    /// Known and wanted running.
    Run,
    /// Known, with a deletionTimestamp: stop it, then the API deletes it.
    Deleting,
    /// No source knows it any more.
    Gone,
}

/// The three transaction scripts the workers run (implemented by the Kubelet).
pub trait PodSyncer: Send + Sync + 'static {
    /// Converge a pod to running; Ok(true) when it reached a terminal phase.
    fn sync_pod(&self, pod: Arc<Pod>) -> impl Future<Output = Result<bool, SyncError>> + Send;
    /// Stop every container of the pod and verify none runs.
    fn sync_terminating_pod(
        &self,
        target: &PodTarget,
        grace: Option<i64>,
    ) -> impl Future<Output = Result<(), SyncError>> + Send;
    /// Clean up what a stopped pod leaves behind.
    fn sync_terminated_pod(
        &self,
        target: &PodTarget,
        why: Why,
    ) -> impl Future<Output = Result<(), SyncError>> + Send;
}

struct Inbox {
    state: State,
    target: PodTarget,
    /// A kill not yet seen by the worker, with its grace period and why.
    pending_kill: Option<(Option<i64>, Why)>,
    dirty: bool,
    /// The step running now and how to interrupt it.
    running: Option<(Step, CancellationToken)>,
    /// The config hash of the spec the pod finished with: a completed pod
    /// whose spec changed since lives again.
    finished_hash: Option<String>,
}

struct Worker {
    inbox: Mutex<Inbox>,
    notify: Notify,
    cancel: CancellationToken,
}

impl Worker {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The pod's `kubernetes.io/config.hash` (a static pod's changes with
/// every edit of its manifest, its UID does not).
fn config_hash(target: &PodTarget) -> Option<String> {
    target
        .pod
        .as_ref()?
        .metadata
        .annotations
        .as_ref()?
        .get(keys::CONFIG_HASH)
        .cloned()
}

/// Whether a kill with `grace` should cut the running step short.
fn interrupts(running: Step, grace: Option<i64>) -> bool {
    match running {
        Step::SyncPod => true,
        Step::SyncTerminatingPod { grace: current } => match (current, grace) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(c), Some(g)) => g < c,
        },
        _ => false,
    }
}

pub struct PodWorkers<S: PodSyncer> {
    syncer: Arc<S>,
    tasks: Tasks,
    queue: Arc<Mutex<WorkQueue>>,
    epoch: Instant,
    resync: Duration,
    workers: Mutex<HashMap<PodUid, Arc<Worker>>>,
}

/// Retry delays after a failed step.
const RETRY_BASE: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(10);
/// A known wait (a crash-loop back-off) is never retried sooner than this.
const RETRY_AFTER_MIN: Duration = Duration::from_millis(10);

impl<S: PodSyncer> PodWorkers<S> {
    /// `resync`: how long after a successful SyncPod the pod is synced again
    /// (syncFrequency).
    pub fn new(syncer: Arc<S>, tasks: Tasks, resync: Duration) -> Self {
        PodWorkers {
            syncer,
            tasks,
            queue: Arc::default(),
            epoch: Instant::now(),
            resync,
            workers: Mutex::default(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<PodUid, Arc<Worker>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sync a pod (create, update, resync, PLEG event): the latest spec wins.
    pub fn update_pod(&self, pod: Arc<Pod>) {
        self.deliver(PodTarget::from_pod(pod), None);
    }

    /// Terminate a pod with a grace period (None: the pod's own).
    pub fn kill_pod(&self, target: PodTarget, grace: Option<i64>) {
        self.deliver(target, Some((grace, Why::Removed)));
    }

    /// Terminate a pod its source still wants, for good (an eviction): it
    /// ends as a completed pod, never started again.
    pub fn evict_pod(&self, target: PodTarget, grace: Option<i64>) {
        self.deliver(target, Some((grace, Why::Completed)));
    }

    /// Re-run whatever step the pod is in (a retry for a pod no source knows).
    pub fn poke(&self, uid: &PodUid) {
        if let Some(w) = self.map().get(uid).cloned() {
            w.lock().dirty = true;
            w.notify.notify_one();
        }
    }

    fn deliver(&self, target: PodTarget, kill: Option<(Option<i64>, Why)>) {
        let uid = target.pod_ref.uid.clone();
        let worker = {
            let mut map = self.map();
            match map.get(&uid) {
                Some(w) => w.clone(),
                None => {
                    let w = self.spawn(target.clone());
                    map.insert(uid, w.clone());
                    w
                }
            }
        };
        {
            let mut inbox = worker.lock();
            if target.pod.is_some() || inbox.target.pod.is_none() {
                inbox.target = target;
            }
            if let Some((grace, why)) = kill {
                let merged = match inbox.pending_kill {
                    Some((Some(old), w)) => (Some(grace.map_or(old, |g| g.min(old))), w),
                    Some((None, w)) => (grace, w),
                    None => (grace, why),
                };
                // A removal wins over an eviction.
                let why = if why == Why::Removed { why } else { merged.1 };
                inbox.pending_kill = Some((merged.0, why));
                if let Some((step, token)) = &inbox.running
                    && interrupts(*step, grace)
                {
                    token.cancel();
                }
            }
            inbox.dirty = true;
        }
        worker.notify.notify_one();
    }

    fn spawn(&self, target: PodTarget) -> Arc<Worker> {
        let span = tracing::info_span!(
            "pod_worker",
            pod = %format!("{}/{}", target.pod_ref.namespace, target.pod_ref.name),
            uid = %target.pod_ref.uid
        );
        let worker = Arc::new(Worker {
            inbox: Mutex::new(Inbox {
                state: State::Syncing,
                target,
                pending_kill: None,
                dirty: false,
                running: None,
                finished_hash: None,
            }),
            notify: Notify::new(),
            cancel: self.tasks.child_token(),
        });
        self.tasks.spawn_with(
            span,
            run_worker(
                worker.clone(),
                self.syncer.clone(),
                self.queue.clone(),
                self.epoch,
                self.resync,
            ),
        );
        worker
    }

    /// Pods due for a periodic sync or a retry (the sync tick takes them).
    pub fn take_due(&self) -> Vec<PodUid> {
        let now = Instant::now() - self.epoch;
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_due(now)
    }

    /// Pods waiting in the work queue for a resync or a retry.
    pub fn queue_len(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn state(&self, uid: &PodUid) -> Option<State> {
        self.map().get(uid).map(|w| w.lock().state)
    }

    /// The pods whose worker is done: stopped and cleaned up (upstream's
    /// ShouldPodRuntimeBeRemoved).
    pub fn finished(&self) -> HashSet<PodUid> {
        self.map()
            .iter()
            .filter(|(_, w)| w.lock().state.is_finished())
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    pub fn known(&self) -> HashSet<PodUid> {
        self.map().keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// Housekeeping: forget finished workers of pods no longer desired.
    /// Returns the UIDs of pods that were removed and then came back (a
    /// static pod's manifest restored): their worker is forgotten so the
    /// caller can start them afresh. A completed pod whose spec changed
    /// since (a static pod's manifest edited: same UID, new config hash) is
    /// killed, which cleans up what it left as a removed pod's, so a later
    /// call returns it to start afresh too.
    pub fn sync_known_pods(&self, desire: impl Fn(&PodUid) -> Desire) -> Vec<PodUid> {
        let (mut restartable, mut forgotten, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        let mut map = self.map();
        map.retain(|uid, w| {
            let inbox = w.lock();
            let State::Finished { why } = inbox.state else {
                return true;
            };
            let edited = inbox.finished_hash != config_hash(&inbox.target);
            match (desire(uid), why) {
                (Desire::Run, Why::Completed) if edited => {
                    changed.push(inbox.target.clone());
                    return true;
                }
                // Kept: a terminal pod stays Succeeded/Failed; a pod being
                // deleted waits for its final delete.
                (Desire::Run, Why::Completed) | (Desire::Deleting, _) => return true,
                (Desire::Run, Why::Removed) => restartable.push(uid.clone()),
                (Desire::Gone, _) => {}
            }
            forgotten.push(uid.clone());
            w.cancel.cancel();
            false
        });
        drop(map);
        {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            for uid in &forgotten {
                q.forget(uid);
            }
        }
        for target in changed {
            tracing::info!(pod = %format!("{}/{}", target.pod_ref.namespace, target.pod_ref.name), "completed pod changed: cleaning it up to start it afresh");
            self.kill_pod(target, None);
        }
        restartable
    }
}

async fn run_step<S: PodSyncer>(
    syncer: &S,
    step: Step,
    state: State,
    target: &PodTarget,
) -> Result<Event, SyncError> {
    match step {
        Step::SyncPod => match &target.pod {
            Some(pod) => Ok(Event::Synced {
                terminal: syncer.sync_pod(pod.clone()).await?,
            }),
            None => Ok(Event::Synced { terminal: false }),
        },
        Step::SyncTerminatingPod { grace } => {
            syncer.sync_terminating_pod(target, grace).await?;
            Ok(Event::TerminatingDone)
        }
        Step::SyncTerminatedPod => {
            let why = match state {
                State::Terminated { why } | State::Terminating { why, .. } => why,
                _ => Why::Removed,
            };
            syncer.sync_terminated_pod(target, why).await?;
            Ok(Event::TerminatedDone)
        }
        Step::Idle => Err(SyncError::Interrupted),
    }
}

/// The retry policy, one for every failure: how long after a failed step
/// the pod is synced again, from what the failure says of a retry.
fn retry_delay(retry: Retry, backoff: &mut Backoff, resync: Duration) -> Duration {
    match retry {
        Retry::Backoff => backoff.next_delay(),
        // At once when the wait is over, not at the back-off's pace.
        Retry::After(left) => left.max(RETRY_AFTER_MIN),
        Retry::Resync => resync,
    }
}

async fn run_worker<S: PodSyncer>(
    worker: Arc<Worker>,
    syncer: Arc<S>,
    queue: Arc<Mutex<WorkQueue>>,
    epoch: Instant,
    resync: Duration,
) {
    let requeue = |uid: &PodUid, after: Duration| {
        let at = Instant::now() + after - epoch;
        queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .enqueue(uid.clone(), at);
    };
    let mut backoff = Backoff::new(RETRY_BASE, RETRY_MAX);
    loop {
        tokio::select! {
            _ = worker.cancel.cancelled() => return,
            _ = worker.notify.notified() => {}
        }
        loop {
            let (event, target, from) = {
                let mut inbox = worker.lock();
                if !inbox.dirty {
                    break;
                }
                inbox.dirty = false;
                let event = match inbox.pending_kill.take() {
                    Some((grace, why)) => Event::Kill { grace, why },
                    None => Event::Update,
                };
                (event, inbox.target.clone(), inbox.state)
            };
            let (mut state, mut step) = lifecycle::step(from, event);
            worker.lock().state = state;
            while step != Step::Idle {
                let token = worker.cancel.child_token();
                worker.lock().running = Some((step, token.clone()));
                let started = Instant::now();
                let outcome = tokio::select! {
                    // On the heap while it runs: a step's future (SyncPod's
                    // every await) is tens of kilobytes, which each pod's
                    // idle worker would otherwise hold for the pod's life.
                    r = Box::pin(run_step(&*syncer, step, state, &target)) => r,
                    _ = token.cancelled() => Err(SyncError::Interrupted),
                };
                worker.lock().running = None;
                tracing::debug!(?step, elapsed = ?started.elapsed(), ok = outcome.is_ok(), "step done");
                match outcome {
                    Ok(event) => {
                        backoff.reset();
                        (state, step) = lifecycle::step(state, event);
                        let mut inbox = worker.lock();
                        inbox.state = state;
                        if state.is_finished() {
                            inbox.finished_hash = config_hash(&target);
                        }
                        drop(inbox);
                        if state == State::Syncing && step == Step::Idle {
                            requeue(&target.pod_ref.uid, resync);
                        }
                    }
                    Err(e) => {
                        let Some(retry) = e.retry() else { break };
                        let delay = retry_delay(retry, &mut backoff, resync);
                        tracing::warn!(?step, error = %e, ?retry, retry_in = ?delay, "pod step failed");
                        requeue(&target.pod_ref.uid, delay);
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use tokio::sync::mpsc;

    #[test]
    fn one_retry_policy_for_every_failure() {
        let resync = Duration::from_secs(60);
        let mut backoff = Backoff::new(RETRY_BASE, RETRY_MAX);
        let cases = [
            (Retry::Backoff, RETRY_BASE),
            (Retry::Backoff, RETRY_BASE * 2),
            (Retry::After(Duration::from_secs(7)), Duration::from_secs(7)),
            (Retry::After(Duration::ZERO), RETRY_AFTER_MIN),
            (Retry::Resync, resync),
            // A known wait or a resync leaves the back-off where it was.
            (Retry::Backoff, RETRY_BASE * 4),
        ];
        for (retry, want) in cases {
            assert_eq!(retry_delay(retry, &mut backoff, resync), want, "{retry:?}");
        }
    }

    /// Records every step; SyncPod blocks until released when `gate` is set.
    struct Recorder {
        tx: mpsc::UnboundedSender<String>,
        gate: Option<Arc<Notify>>,
        terminal: bool,
    }

    impl PodSyncer for Recorder {
        async fn sync_pod(&self, pod: Arc<Pod>) -> Result<bool, SyncError> {
            let _ = self.tx.send(format!(
                "sync {}",
                pod.metadata.resource_version.clone().unwrap_or_default()
            ));
            if let Some(g) = &self.gate {
                g.notified().await;
            }
            Ok(self.terminal)
        }
        async fn sync_terminating_pod(
            &self,
            _: &PodTarget,
            grace: Option<i64>,
        ) -> Result<(), SyncError> {
            let _ = self.tx.send(format!("terminating {grace:?}"));
            Ok(())
        }
        async fn sync_terminated_pod(&self, _: &PodTarget, why: Why) -> Result<(), SyncError> {
            let _ = self.tx.send(format!("terminated {why:?}"));
            Ok(())
        }
    }

    fn pod(version: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// A static pod as its manifest `version` makes it: same UID, the
    /// version's config hash.
    fn static_pod(version: &str) -> Arc<Pod> {
        let mut p = (*pod(version)).clone();
        p.metadata.annotations =
            Some([(keys::CONFIG_HASH.to_string(), format!("hash-{version}"))].into());
        Arc::new(p)
    }

    async fn next(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a step within 5 s")
            .expect("channel open")
    }

    /// Let the workers run until `cond` holds (at most 5 s).
    async fn until(cond: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !cond() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("condition within 5 s");
    }

    /// Whether the pod's worker has taken what was delivered to it. On the
    /// single-threaded test runtime a worker runs from taking its inbox to
    /// its next await without a break, so a step it started has reported
    /// itself by then.
    fn taken(w: &PodWorkers<Recorder>, uid: &PodUid) -> bool {
        w.map().get(uid).is_some_and(|worker| !worker.lock().dirty)
    }

    fn workers(syncer: Recorder) -> PodWorkers<Recorder> {
        PodWorkers::new(
            Arc::new(syncer),
            Tasks::new(CancellationToken::new()),
            Duration::from_secs(60),
        )
    }

    #[tokio::test]
    async fn kill_interrupts_sync_and_runs_termination_once() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let gate = Arc::new(Notify::new());
        let w = workers(Recorder {
            tx,
            gate: Some(gate.clone()),
            terminal: false,
        });
        w.update_pod(pod("1"));
        assert_eq!(next(&mut rx).await, "sync 1");
        // While SyncPod blocks, newer updates coalesce and a kill interrupts it.
        w.update_pod(pod("2"));
        w.update_pod(pod("3"));
        w.kill_pod(PodTarget::from_pod(pod("3")), Some(5));
        assert_eq!(next(&mut rx).await, "terminating Some(5)");
        assert_eq!(next(&mut rx).await, "terminated Removed");
        let uid = PodUid::from("u1");
        until(|| w.state(&uid).is_some_and(State::is_finished)).await;
        // Finished: an update is taken by the worker and runs no step.
        w.update_pod(pod("4"));
        until(|| taken(&w, &uid)).await;
        assert!(rx.try_recv().is_err(), "no step after finishing");
        // Housekeeping forgets it when undesired.
        assert_eq!(w.sync_known_pods(|_| Desire::Gone), Vec::<PodUid>::new());
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn terminal_pod_terminates_and_stays_finished() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let w = workers(Recorder {
            tx,
            gate: None,
            terminal: true,
        });
        w.update_pod(pod("1"));
        assert_eq!(next(&mut rx).await, "sync 1");
        assert_eq!(next(&mut rx).await, "terminating None");
        assert_eq!(next(&mut rx).await, "terminated Completed");
        // Still desired and completed: kept, not restarted.
        assert_eq!(w.sync_known_pods(|_| Desire::Run), Vec::<PodUid>::new());
        assert_eq!(w.len(), 1);
    }

    #[tokio::test]
    async fn completed_pod_edited_is_cleaned_up_and_restartable() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let w = workers(Recorder {
            tx,
            gate: None,
            terminal: true,
        });
        let uid = PodUid::from("u1");
        w.update_pod(static_pod("1"));
        assert_eq!(next(&mut rx).await, "sync 1");
        assert_eq!(next(&mut rx).await, "terminating None");
        assert_eq!(next(&mut rx).await, "terminated Completed");
        until(|| w.state(&uid).is_some_and(State::is_finished)).await;
        // The same manifest again: it stays completed.
        w.update_pod(static_pod("1"));
        until(|| taken(&w, &uid)).await;
        assert_eq!(w.sync_known_pods(|_| Desire::Run), Vec::<PodUid>::new());
        assert!(rx.try_recv().is_err(), "nothing to do for the same spec");
        // The manifest edited: what it left is removed, then it may start afresh.
        w.update_pod(static_pod("2"));
        until(|| taken(&w, &uid)).await;
        assert_eq!(w.sync_known_pods(|_| Desire::Run), Vec::<PodUid>::new());
        assert_eq!(next(&mut rx).await, "terminated Removed");
        until(|| w.state(&uid) == Some(State::Finished { why: Why::Removed })).await;
        assert_eq!(w.sync_known_pods(|_| Desire::Run), vec![uid]);
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn removed_then_desired_again_is_restartable() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let w = workers(Recorder {
            tx,
            gate: None,
            terminal: false,
        });
        w.update_pod(pod("1"));
        assert_eq!(next(&mut rx).await, "sync 1");
        w.kill_pod(PodTarget::from_pod(pod("1")), None);
        assert_eq!(next(&mut rx).await, "terminating None");
        assert_eq!(next(&mut rx).await, "terminated Removed");
        let uid = PodUid::from("u1");
        until(|| w.state(&uid).is_some_and(State::is_finished)).await;
        // Still being deleted in the API: kept until the API lets go.
        assert_eq!(
            w.sync_known_pods(|_| Desire::Deleting),
            Vec::<PodUid>::new()
        );
        assert_eq!(w.len(), 1);
        assert_eq!(w.sync_known_pods(|_| Desire::Run), vec![uid]);
        assert!(w.is_empty());
    }
}
