//! Pod workers: ACTUAL state. One task per pod UID, the only place a pod's
//! lifecycle moves (syncing → terminating → terminated → finished, decided by
//! `kubelet_core::lifecycle::step`). Each worker has a latest-wins inbox, so
//! updates coalesce and two operations on one pod never overlap; a kill
//! interrupts a running SyncPod (or a slower termination) at once.
//!
//! Static pods of one full name run one at a time, as upstream's
//! allowStaticPodStart has it: a manifest edited is a new pod (a new UID),
//! which starts only once the one before it has finished, so the old
//! containers get their grace period while its mirror pod still shows them.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::backoff::Backoff;
use kubelet_core::lifecycle::{self, Event, State, Step, Why};
use kubelet_core::types::{PodUid, is_static_pod};
use kubelet_core::workqueue::WorkQueue;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Retry, SyncError};
use crate::kuberuntime::PodRef;
use kubelet_tasks::Tasks;

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
}

struct Worker {
    inbox: Mutex<Inbox>,
    notify: Notify,
    cancel: CancellationToken,
}

impl Worker {}

/// Which static pod of each full name may run (upstream's
/// startedStaticPodsByFullname and waitingToStartStaticPodsByFullname).
#[derive(Debug, Default)]
struct StaticPods {
    /// The one started per full name, until its worker finishes.
    started: HashMap<String, PodUid>,
    /// Those waiting to start, in the order they asked.
    waiting: HashMap<String, Vec<PodUid>>,
}

impl StaticPods {
    /// Whether `uid` may run SyncPod: it started already, or no other has
    /// and it is first in line.
    fn try_start(&mut self, full: &str, uid: &PodUid) -> bool {
        let started = self.started.get(full);
        if started == Some(uid) {
            return true;
        }
        let waiting = self.waiting.entry(full.to_owned()).or_default();
        if !waiting.contains(uid) {
            waiting.push(uid.clone());
        }
        if started.is_some() || waiting.first() != Some(uid) {
            return false;
        }
        waiting.retain(|u| u != uid);
        if waiting.is_empty() {
            self.waiting.remove(full);
        }
        self.started.insert(full.to_owned(), uid.clone());
        true
    }

    /// `uid` will not start (it is being terminated): out of the line.
    fn withdraw(&mut self, full: &str, uid: &PodUid) {
        if let Some(waiting) = self.waiting.get_mut(full) {
            waiting.retain(|u| u != uid);
            if waiting.is_empty() {
                self.waiting.remove(full);
            }
        }
    }

    /// `uid` finished: the next of its full name may start.
    fn release(&mut self, full: &str, uid: &PodUid) {
        self.withdraw(full, uid);
        if self.started.get(full) == Some(uid) {
            self.started.remove(full);
        }
    }
}

/// The full name (`namespace/name`) a static pod target is gated by; None
/// for other pods.
fn static_full_name(target: &PodTarget) -> Option<String> {
    let pod = target.pod.as_ref().filter(|p| is_static_pod(p))?;
    Some(kubelet_core::types::pod_full_name(pod))
}

/// How long a static pod waiting for its predecessor waits before it asks
/// again (upstream's backOffPeriod).
const STATIC_POD_WAIT: Duration = Duration::from_secs(1);

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
    statics: Arc<Mutex<StaticPods>>,
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
            statics: Arc::default(),
        }
    }

    fn map(&self) -> parking_lot::MutexGuard<'_, HashMap<PodUid, Arc<Worker>>> {
        self.workers.lock()
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
            w.inbox.lock().dirty = true;
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
            let mut inbox = worker.inbox.lock();
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
                self.statics.clone(),
                self.epoch,
                self.resync,
            ),
        );
        worker
    }

    /// Pods due for a periodic sync or a retry (the sync tick takes them).
    pub fn take_due(&self) -> Vec<PodUid> {
        let now = Instant::now() - self.epoch;
        self.queue.lock().take_due(now)
    }

    /// Pods waiting in the work queue for a resync or a retry.
    pub fn queue_len(&self) -> usize {
        self.queue.lock().len()
    }

    pub fn state(&self, uid: &PodUid) -> Option<State> {
        self.map().get(uid).map(|w| w.inbox.lock().state)
    }

    /// The pods whose worker is done: stopped and cleaned up (upstream's
    /// ShouldPodRuntimeBeRemoved).
    pub fn finished(&self) -> HashSet<PodUid> {
        self.map()
            .iter()
            .filter(|(_, w)| w.inbox.lock().state.is_finished())
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
    /// caller can start them afresh.
    pub fn sync_known_pods(&self, desire: impl Fn(&PodUid) -> Desire) -> Vec<PodUid> {
        let (mut restartable, mut forgotten) = (Vec::new(), Vec::new());
        let mut map = self.map();
        map.retain(|uid, w| {
            let inbox = w.inbox.lock();
            let State::Finished { why } = inbox.state else {
                return true;
            };
            match (desire(uid), why) {
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
        let mut q = self.queue.lock();
        for uid in &forgotten {
            q.forget(uid);
        }
        restartable
    }

    /// The static pod of `full` (`namespace/name`) that runs or ran last
    /// and has not finished, if any (upstream's startedStaticPodsByFullname).
    pub fn static_pod_started(&self, full: &str) -> Option<PodUid> {
        self.statics.lock().started.get(full).cloned()
    }

    /// Whether the static pod of `full` is stopping its containers
    /// (upstream's IsPodForMirrorPodTerminatingByFullName): its mirror pod
    /// stays until they have stopped.
    pub fn static_pod_terminating(&self, full: &str) -> bool {
        self.static_pod_started(full)
            .and_then(|uid| self.state(&uid))
            .is_some_and(|s| matches!(s, State::Terminating { .. }))
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
    statics: Arc<Mutex<StaticPods>>,
    epoch: Instant,
    resync: Duration,
) {
    let statics = || statics.lock();
    let requeue = |uid: &PodUid, after: Duration| {
        let at = Instant::now() + after - epoch;
        queue.lock().enqueue(uid.clone(), at);
    };
    let mut backoff = Backoff::new(RETRY_BASE, RETRY_MAX);
    loop {
        tokio::select! {
            _ = worker.cancel.cancelled() => return,
            _ = worker.notify.notified() => {}
        }
        loop {
            let (event, target, from) = {
                let mut inbox = worker.inbox.lock();
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
            worker.inbox.lock().state = state;
            let uid = &target.pod_ref.uid;
            let full = static_full_name(&target);
            if let Some(full) = &full {
                if step == Step::SyncPod && !statics().try_start(full, uid) {
                    tracing::debug!(pod = %full, "another static pod of this name has not finished: waiting to start");
                    requeue(uid, STATIC_POD_WAIT);
                    continue;
                }
                if !matches!(state, State::Syncing) {
                    statics().withdraw(full, uid);
                }
            }
            while step != Step::Idle {
                let token = worker.cancel.child_token();
                worker.inbox.lock().running = Some((step, token.clone()));
                let started = Instant::now();
                let outcome = tokio::select! {
                    // On the heap while it runs: a step's future (SyncPod's
                    // every await) is tens of kilobytes, which each pod's
                    // idle worker would otherwise hold for the pod's life.
                    r = Box::pin(run_step(&*syncer, step, state, &target)) => r,
                    _ = token.cancelled() => Err(SyncError::Interrupted),
                };
                worker.inbox.lock().running = None;
                tracing::debug!(?step, elapsed = ?started.elapsed(), ok = outcome.is_ok(), "step done");
                match outcome {
                    Ok(event) => {
                        backoff.reset();
                        (state, step) = lifecycle::step(state, event);
                        worker.inbox.lock().state = state;
                        if state.is_finished()
                            && let Some(full) = &full
                        {
                            statics().release(full, uid);
                        }
                        if state == State::Syncing && step == Step::Idle {
                            requeue(uid, resync);
                        }
                    }
                    Err(e) => {
                        let Some(retry) = e.retry() else { break };
                        let delay = retry_delay(retry, &mut backoff, resync);
                        tracing::warn!(?step, error = %e, ?retry, retry_in = ?delay, "pod step failed");
                        requeue(uid, delay);
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
    use kubelet_core::testing::PodBuilder;
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

    /// Records every step; SyncPod blocks until released when `gate` is
    /// set, SyncTerminatingPod when `stop_gate` is.
    struct Recorder {
        tx: mpsc::UnboundedSender<String>,
        gate: Option<Arc<Notify>>,
        terminal: bool,
        stop_gate: Option<Arc<Notify>>,
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
            if let Some(g) = &self.stop_gate {
                g.notified().await;
            }
            Ok(())
        }
        async fn sync_terminated_pod(&self, _: &PodTarget, why: Why) -> Result<(), SyncError> {
            let _ = self.tx.send(format!("terminated {why:?}"));
            Ok(())
        }
    }

    /// Pod p of namespace default at `version` of its object.
    fn at_version(uid: &str, version: &str) -> PodBuilder {
        PodBuilder::new("p")
            .namespace("default")
            .uid(uid)
            .resource_version(version)
    }

    fn pod(version: &str) -> Arc<Pod> {
        at_version("u1", version).arc()
    }

    /// A static pod as one version of its manifest makes it: its UID (the
    /// hash of the content), the pod's full name.
    fn static_pod(uid: &str, version: &str) -> Arc<Pod> {
        at_version(uid, version)
            .annotation(kubelet_core::types::keys::CONFIG_SOURCE, "file")
            .arc()
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
        w.map()
            .get(uid)
            .is_some_and(|worker| !worker.inbox.lock().dirty)
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
            stop_gate: None,
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
        assert_eq!(
            rx.try_recv(),
            Err(mpsc::error::TryRecvError::Empty),
            "no step after finishing"
        );
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
            stop_gate: None,
        });
        w.update_pod(pod("1"));
        assert_eq!(next(&mut rx).await, "sync 1");
        assert_eq!(next(&mut rx).await, "terminating None");
        assert_eq!(next(&mut rx).await, "terminated Completed");
        // Still desired and completed: kept, not restarted.
        assert_eq!(w.sync_known_pods(|_| Desire::Run), Vec::<PodUid>::new());
        assert_eq!(w.len(), 1);
    }

    /// A manifest edited: the new pod (a new UID) starts once the old one
    /// of the same full name has stopped and been cleaned up; while the
    /// old one stops, its name counts as terminating (its mirror pod stays).
    #[tokio::test]
    async fn a_static_pod_waits_for_the_one_before_it_to_finish() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let stop_gate = Arc::new(Notify::new());
        let w = workers(Recorder {
            tx,
            gate: None,
            terminal: false,
            stop_gate: Some(stop_gate.clone()),
        });
        let (old, new) = (static_pod("u-old", "1"), static_pod("u-new", "2"));
        let (old_uid, new_uid) = (PodUid::of(&old), PodUid::of(&new));
        w.update_pod(old.clone());
        assert_eq!(next(&mut rx).await, "sync 1");
        // The edit: the source removes the old pod and adds the new one.
        w.kill_pod(PodTarget::from_pod(old), None);
        w.update_pod(new.clone());
        assert_eq!(next(&mut rx).await, "terminating None");
        until(|| taken(&w, &new_uid)).await;
        assert_eq!(w.static_pod_started("default/p"), Some(old_uid.clone()));
        assert!(w.static_pod_terminating("default/p"));
        assert_eq!(
            rx.try_recv(),
            Err(mpsc::error::TryRecvError::Empty),
            "the new pod waits"
        );
        stop_gate.notify_one();
        assert_eq!(next(&mut rx).await, "terminated Removed");
        until(|| w.state(&old_uid).is_some_and(State::is_finished)).await;
        assert!(!w.static_pod_terminating("default/p"));
        // Asked again when its wait is over (the sync loop's due pods).
        until(|| w.take_due().contains(&new_uid)).await;
        w.update_pod(new);
        assert_eq!(next(&mut rx).await, "sync 2");
        assert_eq!(w.static_pod_started("default/p"), Some(new_uid));
    }

    #[test]
    fn static_pods_start_one_at_a_time_in_order() {
        let mut s = StaticPods::default();
        let (a, b, c) = (PodUid::from("a"), PodUid::from("b"), PodUid::from("c"));
        assert!(s.try_start("ns/p", &a));
        assert!(s.try_start("ns/p", &a), "started already");
        assert!(!s.try_start("ns/p", &b));
        assert!(!s.try_start("ns/p", &c));
        assert!(s.try_start("ns/q", &c), "another name");
        s.release("ns/p", &a);
        assert!(!s.try_start("ns/p", &c), "b asked first");
        assert!(s.try_start("ns/p", &b));
        // c is killed before it starts: out of the line.
        s.withdraw("ns/p", &c);
        s.release("ns/p", &b);
        assert!(s.waiting.is_empty());
        assert!(s.try_start("ns/p", &a));
    }

    #[tokio::test]
    async fn removed_then_desired_again_is_restartable() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let w = workers(Recorder {
            tx,
            gate: None,
            terminal: false,
            stop_gate: None,
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
