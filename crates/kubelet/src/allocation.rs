//! The allocation manager (upstream's pkg/kubelet/allocation, with the
//! actuated state the runtime manager keeps): for each pod, the resources
//! (its containers' and pod-level) the kubelet admitted (allocated) and
//! those its running containers and pod cgroup were last given
//! (actuated), and the resize conditions. A resize (the pod's spec
//! resources changed through the `resize` subresource) is admitted against
//! the node and the other pods' allocations, else it waits
//! (`PodResizePending`, Deferred); once admitted, SyncPod works with the
//! allocated pod and brings the pod cgroup and the running containers to
//! it (`PodResizeInProgress` until it has). Both records are kept in
//! upstream's checkpoint files under the root directory
//! (`allocated_pods_state`, `actuated_pods_state`), written by one task
//! after each change: after a restart a pod keeps what it was allocated (a
//! resize not yet admitted is admitted again) and what it runs with. An
//! admitted resize is applied only once the files hold its allocation
//! ([`AllocationManager::persisted`]), so a crash never leaves containers
//! with resources no record holds; a lost actuation is applied again.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kubelet_core::cgroups::PodCgroupPolicy;
use kubelet_core::checkpoint;
use kubelet_core::resize::{
    ACTUATED_PODS_STATE, ALLOCATED_PODS_STATE, Allocation, AllocationCheckpoint, EVENT_COMPLETED,
    EVENT_DEFERRED, EVENT_ERROR, EVENT_INFEASIBLE, EVENT_STARTED, POD_RESIZE_IN_PROGRESS,
    POD_RESIZE_PENDING, REASON_DEFERRED, REASON_ERROR, REASON_INFEASIBLE, ResizeConditions,
    allocation_of, pod_resources_status, resize_condition, resize_message, set_container_resources,
    with_allocation,
};
use kubelet_core::types::PodUid;
use kubelet_core::types::Rejection;

use crate::clock::Clock;
use crate::events::{Involved, NORMAL, Recorder, WARNING};
use crate::files::write_file;
use kubelet_tasks::blocking;

#[derive(Debug, Default)]
struct State {
    allocated: HashMap<PodUid, Allocation>,
    actuated: HashMap<PodUid, Allocation>,
    conditions: HashMap<PodUid, ResizeConditions>,
    /// Pods whose resize waits for every source to be heard from.
    after_sources: HashSet<PodUid>,
}

/// What a resize came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeOutcome {
    /// The spec's resources are the allocated ones: nothing to do.
    None,
    /// Admitted: the pod is to be synced to apply it.
    Allocated,
    /// It does not fit now: PodResizePending, Deferred.
    Deferred,
    /// It cannot be done at all: PodResizePending, Infeasible (not retried
    /// until the spec changes).
    Infeasible,
}

/// Why a resize is not allocated.
#[derive(Debug)]
pub enum Refused {
    /// Not now (admission's reason): retried.
    Deferred(Rejection),
    /// Never, as the node is set up (the message).
    Infeasible(String),
}

/// The allocation manager; clones share the records.
#[derive(Clone)]
pub struct AllocationManager {
    state: Arc<Mutex<State>>,
    events: Recorder,
    clock: Clock,
    /// How pod cgroups are set (None: pods have none), for the pod-level
    /// resources reported.
    pod_cgroups: Option<PodCgroupPolicy>,
    /// The directory of the checkpoint files.
    dir: PathBuf,
    /// The records changed since the checkpoints were written.
    changed: Arc<Notify>,
    /// How many changes were made, and how many of them the checkpoint
    /// files hold.
    version: Arc<AtomicU64>,
    persisted: watch::Sender<u64>,
}

impl AllocationManager {
    /// The manager, with the records the checkpoint files in `dir` hold (a
    /// file missing or corrupt holds none).
    pub fn new(
        events: Recorder,
        clock: Clock,
        pod_cgroups: Option<PodCgroupPolicy>,
        dir: &Path,
    ) -> AllocationManager {
        let state = State {
            allocated: read_checkpoint(&dir.join(ALLOCATED_PODS_STATE)),
            actuated: read_checkpoint(&dir.join(ACTUATED_PODS_STATE)),
            conditions: HashMap::new(),
            after_sources: HashSet::new(),
        };
        AllocationManager {
            state: Arc::new(Mutex::new(state)),
            events,
            clock,
            pod_cgroups,
            dir: dir.to_owned(),
            changed: Arc::default(),
            version: Arc::default(),
            persisted: watch::Sender::new(0),
        }
    }

    /// The records changed: the checkpoint task writes them.
    fn changed(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
    }

    /// Whether the checkpoint files hold every change made so far, waiting
    /// up to `within` for the writer: an admitted resize is applied only
    /// once its allocation is on disk (upstream writes it before), so a
    /// crash never leaves containers running with resources no record
    /// holds.
    pub async fn persisted(&self, within: Duration) -> bool {
        let target = self.version.load(Ordering::Acquire);
        let mut rx = self.persisted.subscribe();
        tokio::time::timeout(within, rx.wait_for(|v| *v >= target))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Write the checkpoint files after each change until `token` is
    /// cancelled, then once more; an unchanged file is not written again.
    pub async fn write_checkpoints(self, token: CancellationToken) {
        let mut written: [Vec<u8>; 2] = Default::default();
        loop {
            let stop = tokio::select! {
                _ = token.cancelled() => true,
                _ = self.changed.notified() => false,
            };
            // The snapshot holds at least the changes counted so far.
            let version = self.version.load(Ordering::Acquire);
            let files = {
                let state = self.state.lock();
                [
                    (ALLOCATED_PODS_STATE, checkpoint_of(&state.allocated)),
                    (ACTUATED_PODS_STATE, checkpoint_of(&state.actuated)),
                ]
            };
            let mut all = true;
            for (i, (name, bytes)) in files.into_iter().enumerate() {
                if bytes == written[i] {
                    continue;
                }
                let path = self.dir.join(name);
                let data = bytes.clone();
                match blocking(move || write_file(&path, &data)).await {
                    Ok(()) => written[i] = bytes,
                    Err(e) => {
                        all = false;
                        tracing::warn!(file = name, error = %e, "writing a checkpoint");
                    }
                }
            }
            if all {
                self.persisted.send_replace(version);
            }
            if stop {
                return;
            }
        }
    }

    /// The pod was admitted: it is allocated its spec's resources, unless
    /// it has an allocation already (upstream's AddPod).
    pub fn admit(&self, pod: &Pod) {
        self.state
            .lock()
            .allocated
            .entry(PodUid::of(pod))
            .or_insert_with(|| allocation_of(pod));
        self.changed();
    }

    /// The pod with the resources it is allocated, if it has an
    /// allocation (one kept across a restart): what it is admitted with.
    /// Whether a resizable container's (a container's or a sidecar's)
    /// request of `resource` (`cpu`, `memory`) in the spec differs from
    /// what it is allocated (upstream's guaranteedPodResourceResizeRequired).
    pub fn resize_requested(&self, pod: &Pod, resource: &str) -> bool {
        let state = self.state.lock();
        let Some(allocated) = state.allocated.get(&PodUid::of(pod)) else {
            return false;
        };
        let amount = |r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| {
            let q = r.and_then(|r| r.requests.as_ref())?.get(resource)?;
            if resource == "cpu" {
                kubelet_core::quantity::parse_cpu_millis(q).ok()
            } else {
                kubelet_core::quantity::parse_bytes(q).ok()
            }
        };
        let spec = pod.spec.as_ref();
        let sidecars = spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|c| kubelet_core::podspec::is_sidecar(c));
        let containers = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
        sidecars
            .chain(containers)
            .any(|c| amount(c.resources.as_ref()) != amount(allocated.containers.get(&c.name)))
    }

    pub fn allocated_if_any(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        pod_with(pod, self.state.lock().allocated.get(&PodUid::of(pod)))
    }

    /// The pod with the resources it is allocated: what SyncPod creates
    /// containers and the pod cgroup with. A pod without an allocation
    /// (not admitted through the API: a static or file pod) gets its spec's.
    pub fn allocated_pod(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        let mut state = self.state.lock();
        let uid = PodUid::of(pod);
        if !state.allocated.contains_key(&uid) {
            state.allocated.insert(uid.clone(), allocation_of(pod));
            self.changed();
        }
        pod_with(pod, state.allocated.get(&uid))
    }

    /// A pod whose spec resources may have changed (handlePodResourcesResize):
    /// `fit` admits the spec's resources next to the other pods' allocations
    /// (see [`AllocationManager::allocated_pod`]).
    pub fn handle_resize(
        &self,
        pod: &Pod,
        fit: impl FnOnce() -> Result<(), Refused>,
    ) -> ResizeOutcome {
        let uid = PodUid::of(pod);
        let desired = allocation_of(pod);
        let unchanged = self
            .state
            .lock()
            .allocated
            .get(&uid)
            .is_none_or(|a| *a == desired);
        let generation = pod.metadata.generation.unwrap_or(0);
        if unchanged {
            if let Some(c) = self.state.lock().conditions.get_mut(&uid) {
                c.pending = None;
            }
            return ResizeOutcome::None;
        }
        let now = self.clock.now_time();
        match fit() {
            Ok(()) => {
                let mut state = self.state.lock();
                state.allocated.insert(uid.clone(), desired);
                self.changed();
                let conditions = state.conditions.entry(uid).or_default();
                conditions.pending = None;
                conditions.in_progress = Some(resize_condition(
                    POD_RESIZE_IN_PROGRESS,
                    None,
                    "",
                    "",
                    Some(generation),
                    &now,
                ));
                drop(state);
                self.events.event(
                    &Involved::pod(pod, None),
                    NORMAL,
                    EVENT_STARTED,
                    resize_message("Pod resize started", pod, generation, ""),
                );
                ResizeOutcome::Allocated
            }
            Err(Refused::Infeasible(message)) => {
                self.pending(
                    pod,
                    uid,
                    (REASON_INFEASIBLE, EVENT_INFEASIBLE),
                    &message,
                    &now,
                );
                ResizeOutcome::Infeasible
            }
            // Every reason admission gives is one that may pass later
            // (SetPodResizePendingCondition: all but Infeasible are Deferred).
            Err(Refused::Deferred(r)) => {
                self.pending(
                    pod,
                    uid,
                    (REASON_DEFERRED, EVENT_DEFERRED),
                    &r.message,
                    &now,
                );
                ResizeOutcome::Deferred
            }
        }
    }

    /// PodResizePending with `reason` and `message`; the event `event`
    /// when the generation, reason or message is new.
    fn pending(
        &self,
        pod: &Pod,
        uid: PodUid,
        (reason, event): (&str, &str),
        message: &str,
        now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) {
        let generation = pod.metadata.generation.unwrap_or(0);
        let mut state = self.state.lock();
        let conditions = state.conditions.entry(uid).or_default();
        let changed = conditions.pending.as_ref().is_none_or(|c| {
            c.observed_generation != Some(generation)
                || c.reason.as_deref() != Some(reason)
                || c.message.as_deref() != Some(message)
        });
        conditions.pending = Some(resize_condition(
            POD_RESIZE_PENDING,
            conditions.pending.as_ref(),
            reason,
            message,
            Some(generation),
            now,
        ));
        drop(state);
        if changed {
            self.events.event(
                &Involved::pod(pod, None),
                WARNING,
                event,
                resize_message(&format!("Pod resize {reason}"), pod, generation, message),
            );
        }
    }

    /// A pod seen before every source was (after a restart): if its spec
    /// differs from its allocation, the resize is handled with the
    /// deferred ones, once every pod is known (upstream's sourcesReady).
    pub fn resize_after_sources(&self, pod: &Pod) {
        let uid = PodUid::of(pod);
        let mut state = self.state.lock();
        if state
            .allocated
            .get(&uid)
            .is_some_and(|a| *a != allocation_of(pod))
        {
            state.after_sources.insert(uid);
        }
    }

    /// The pods whose resize waits (to be tried again): those deferred,
    /// and those that waited for the sources (taken).
    pub fn deferred(&self) -> Vec<PodUid> {
        let mut state = self.state.lock();
        let mut uids: HashSet<PodUid> = std::mem::take(&mut state.after_sources);
        uids.extend(
            state
                .conditions
                .iter()
                .filter(|(_, c)| {
                    c.pending
                        .as_ref()
                        .is_some_and(|p| p.reason.as_deref() == Some(REASON_DEFERRED))
                })
                .map(|(uid, _)| uid.clone()),
        );
        uids.into_iter().collect()
    }

    /// What the pod's containers were last given; a pod seen for the first
    /// time (started before this kubelet) counts as running with its
    /// allocation (InitializeActuatedPod).
    pub fn actuated(&self, pod: &Pod) -> Allocation {
        let mut state = self.state.lock();
        let uid = PodUid::of(pod);
        if let Some(a) = state.actuated.get(&uid) {
            return a.clone();
        }
        let initial = state
            .allocated
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| allocation_of(pod));
        state.actuated.insert(uid, initial.clone());
        self.changed();
        initial
    }

    /// After SyncPod: `changed` containers of the allocated `pod` now run
    /// with its resources (started, or updated in place), those not in
    /// `running` will start with them, and the pod cgroup has its
    /// pod-level resources when `pod_cgroup` says so. When neither any
    /// running container nor the pod cgroup differs from the allocation
    /// any more, the resize is complete.
    pub fn record_actuated(
        &self,
        pod: &Pod,
        changed: &[String],
        running: &[&str],
        pod_cgroup: bool,
    ) {
        let uid = PodUid::of(pod);
        let allocation = allocation_of(pod);
        let mut guard = self.state.lock();
        let State {
            allocated,
            actuated,
            conditions,
            ..
        } = &mut *guard;
        let actuated = actuated.entry(uid.clone()).or_default();
        for (name, r) in &allocation.containers {
            if changed.contains(name) || !running.contains(&name.as_str()) {
                actuated.containers.insert(name.clone(), r.clone());
            }
        }
        if pod_cgroup {
            actuated.pod = allocation.pod.clone();
        }
        self.changed();
        // Against the allocation now: a resize admitted during this sync
        // is not done.
        let target = allocated.get(&uid).unwrap_or(&allocation);
        let done = target.pod == actuated.pod
            && target
                .containers
                .iter()
                .all(|(name, r)| actuated.container(name).is_none_or(|a| a == r));
        let finished = done
            && conditions
                .get_mut(&uid)
                .is_some_and(|c| c.in_progress.take().is_some());
        drop(guard);
        if finished {
            let generation = pod.metadata.generation.unwrap_or(0);
            self.events.event(
                &Involved::pod(pod, None),
                NORMAL,
                EVENT_COMPLETED,
                resize_message("Pod resize completed", pod, generation, ""),
            );
        }
    }

    /// Applying the resize failed: PodResizeInProgress says why.
    pub fn resize_failed(&self, pod: &Pod, message: &str) {
        let now = self.clock.now_time();
        let generation = pod.metadata.generation.unwrap_or(0);
        let mut state = self.state.lock();
        let conditions = state.conditions.entry(PodUid::of(pod)).or_default();
        conditions.in_progress = Some(resize_condition(
            POD_RESIZE_IN_PROGRESS,
            conditions.in_progress.as_ref(),
            REASON_ERROR,
            message,
            Some(generation),
            &now,
        ));
        drop(state);
        self.events.event(
            &Involved::pod(pod, None),
            WARNING,
            EVENT_ERROR,
            resize_message("Pod resize error", pod, generation, message),
        );
    }

    /// The resize parts of the pod's status: the pod's and its
    /// containers' allocatedResources and resources, the resize
    /// conditions.
    pub fn set_status(&self, pod: &Pod, status: &mut ApiPodStatus) {
        let uid = PodUid::of(pod);
        let state = self.state.lock();
        let Some(allocated) = state.allocated.get(&uid) else {
            return;
        };
        let actuated = state.actuated.get(&uid).unwrap_or(allocated);
        let running = status.phase.as_deref() == Some("Running");
        let allocated_pod = with_allocation(pod, allocated);
        let allocated_pod = allocated_pod.as_ref().unwrap_or(pod);
        let actuated_pod = with_allocation(allocated_pod, actuated);
        (status.allocated_resources, status.resources) = pod_resources_status(
            allocated_pod,
            actuated_pod.as_ref().unwrap_or(allocated_pod),
            running,
            self.pod_cgroups.as_ref(),
        );
        for list in [
            status.container_statuses.as_mut(),
            status.init_container_statuses.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            set_container_resources(list, allocated, actuated);
        }
        let Some(conditions) = state.conditions.get(&uid) else {
            return;
        };
        let list = status.conditions.get_or_insert_default();
        list.retain(|c| c.type_ != POD_RESIZE_PENDING && c.type_ != POD_RESIZE_IN_PROGRESS);
        list.extend(conditions.pending.iter().cloned());
        list.extend(conditions.in_progress.iter().cloned());
    }

    /// Forget the pods `keep` does not name (housekeeping).
    pub fn retain(&self, keep: impl Fn(&PodUid) -> bool) {
        let mut state = self.state.lock();
        let before = state.allocated.len() + state.actuated.len();
        state.allocated.retain(|uid, _| keep(uid));
        state.actuated.retain(|uid, _| keep(uid));
        state.conditions.retain(|uid, _| keep(uid));
        state.after_sources.retain(|uid| keep(uid));
        if state.allocated.len() + state.actuated.len() != before {
            self.changed();
        }
    }
}

/// `pod` with `allocation`'s resources (itself when they are the same).
fn pod_with(pod: &Arc<Pod>, allocation: Option<&Allocation>) -> Arc<Pod> {
    match allocation.and_then(|a| with_allocation(pod, a)) {
        Some(p) => Arc::new(p),
        None => pod.clone(),
    }
}

/// The records a checkpoint file holds: none when it is missing, or
/// corrupt (said in the log; upstream refuses to start on a corrupt one,
/// rkubelet admits those pods again from their specs).
fn read_checkpoint(path: &Path) -> HashMap<PodUid, Allocation> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "reading a checkpoint");
            return HashMap::new();
        }
    };
    match checkpoint::decode::<AllocationCheckpoint>(&bytes) {
        Ok(cp) => cp
            .entries
            .into_iter()
            .map(|(uid, a)| (PodUid(uid), a))
            .collect(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "a checkpoint not used");
            HashMap::new()
        }
    }
}

/// `records` as a checkpoint file's bytes.
fn checkpoint_of(records: &HashMap<PodUid, Allocation>) -> Vec<u8> {
    let cp = AllocationCheckpoint {
        entries: records
            .iter()
            .map(|(uid, a)| (uid.0.clone(), a.clone()))
            .collect(),
    };
    checkpoint::encode(&cp).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;
    use kubelet_core::testing::{PodBuilder, container, resources};

    fn pod(cpu: &str) -> Arc<Pod> {
        PodBuilder::new("p")
            .namespace("default")
            .uid("u1")
            .container(Container {
                resources: Some(resources(&[("cpu", cpu)], &[])),
                ..container("c")
            })
            .arc()
    }

    fn cpu_of(p: &Pod) -> String {
        p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["cpu"]
            .0
            .clone()
    }

    fn manager(dir: &Path) -> AllocationManager {
        AllocationManager::new(
            Recorder::log_only("n".into()),
            Clock::following_tokio(),
            None,
            dir,
        )
    }

    /// Run the checkpoint writer until what is pending is written.
    async fn checkpoint(m: &AllocationManager) {
        let token = CancellationToken::new();
        token.cancel();
        m.clone().write_checkpoints(token).await;
    }

    #[tokio::test]
    async fn allocations_and_actuations_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        m.admit(&pod("500m"));
        m.actuated(&pod("500m"));
        checkpoint(&m).await;
        let file = std::fs::read(dir.path().join(ALLOCATED_PODS_STATE)).unwrap();
        let cp: AllocationCheckpoint = checkpoint::decode(&file).unwrap();
        assert_eq!(
            cpu_of(&with_allocation(&pod("1"), &cp.entries["u1"]).unwrap()),
            "500m"
        );

        // After a restart the spec asks for more: the pod is allocated
        // what it was, and runs with what it was given, until the resize
        // is admitted.
        let again = manager(dir.path());
        let spec = pod("1");
        assert_eq!(cpu_of(&again.allocated_if_any(&spec)), "500m");
        assert_eq!(cpu_of(&again.allocated_pod(&spec)), "500m");
        assert_eq!(
            again
                .actuated(&spec)
                .container("c")
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "500m"
        );
        assert_eq!(
            again.handle_resize(&spec, || Ok(())),
            ResizeOutcome::Allocated
        );
        assert_eq!(cpu_of(&again.allocated_pod(&spec)), "1");
    }

    /// A resize refused as infeasible waits with that reason and is not
    /// retried; one refused for now is retried; the CPU requests compared
    /// are the resizable containers'.
    #[tokio::test]
    async fn infeasible_resizes_are_not_retried_but_deferred_ones_are() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        m.admit(&pod("1"));
        assert!(!m.resize_requested(&pod("1"), "cpu"));
        assert!(m.resize_requested(&pod("2"), "cpu"));
        let infeasible = || Err(Refused::Infeasible("never".into()));
        assert_eq!(
            m.handle_resize(&pod("2"), infeasible),
            ResizeOutcome::Infeasible
        );
        assert!(m.deferred().is_empty());
        let pending = m.state.lock().conditions[&PodUid::from("u1")]
            .pending
            .clone();
        assert_eq!(
            pending.and_then(|c| c.reason).as_deref(),
            Some(REASON_INFEASIBLE)
        );
        let later = || {
            Err(Refused::Deferred(Rejection {
                reason: "OutOfcpu".into(),
                message: "not now".into(),
            }))
        };
        assert_eq!(m.handle_resize(&pod("2"), later), ResizeOutcome::Deferred);
        assert_eq!(m.deferred(), [PodUid::from("u1")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_is_persisted_once_the_writer_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        assert!(
            m.persisted(Duration::from_secs(1)).await,
            "nothing to write"
        );
        m.admit(&pod("500m"));
        assert!(!m.persisted(Duration::from_secs(1)).await);
        checkpoint(&m).await;
        assert!(m.persisted(Duration::ZERO).await);
        // A write that fails leaves it unpersisted.
        let mut other = (*pod("1")).clone();
        other.metadata.uid = Some("u2".into());
        m.admit(&other);
        std::fs::remove_dir_all(dir.path()).unwrap();
        checkpoint(&m).await;
        assert!(!m.persisted(Duration::from_secs(1)).await);
    }

    #[tokio::test]
    async fn a_corrupt_checkpoint_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        m.admit(&pod("500m"));
        checkpoint(&m).await;
        let path = dir.path().join(ALLOCATED_PODS_STATE);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("500m", "900m");
        std::fs::write(&path, text).unwrap();
        let again = manager(dir.path());
        assert_eq!(cpu_of(&again.allocated_if_any(&pod("1"))), "1");
    }
}
