//! The status manager's API side (upstream's status_manager syncPod and
//! mirror_client). Each pod is synced on its own, never waiting for
//! another: read the pod the API server has, keep in the kubelet's latest
//! status what the API's may not lose (a terminal phase, terminated
//! containers: `final_status`), patch `pods/status` with a UID precondition,
//! and delete a deleted pod once the kubelet has finished with it and the
//! API has it terminal. A failed request backs off for that pod alone; a
//! status the API server refuses (422) or a pod gone or recreated is not
//! sent again. Alongside, one mirror pod is kept per static pod.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kubelet_api::ApiClient;
use kubelet_api::pods::{create_mirror, delete_finished, get_pod, mirror_pod, patch_status};
use kubelet_core::backoff::Backoff;
use kubelet_core::final_status::keep_final;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::phase::is_terminal_status;
use kubelet_core::status::kubelet_owned;
use kubelet_core::types::{PodUid, is_static_pod, keys, pod_full_name};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::events::{Involved, Recorder, WARNING};
use crate::podmanager::PodManager;
use crate::status_manager::StatusManager;

/// How often pending work (a missing mirror pod, a retry) is looked at even
/// when no status changed.
const SYNC_PERIOD: Duration = Duration::from_secs(1);
/// Retry delays of one pod's sync after a failed request.
const RETRY_BASE: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(10);
/// A mirror pod just created is not created again before the watch shows it.
const MIRROR_PENDING: Duration = Duration::from_secs(10);

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// What the mirror pods follow of the pod workers: which static pod of a
/// full name may run, and whether it is stopping.
pub trait StaticPodView: Send + Sync {
    /// The static pod of `full` (`namespace/name`) allowed to run.
    fn started(&self, full: &str) -> Option<PodUid>;
    /// Whether that pod is stopping its containers.
    fn terminating(&self, full: &str) -> bool;
}

/// The API status sync: what it reads (the pod manager's pods and mirror
/// pods, the status manager's statuses and finished pods) and the API
/// server it writes to.
pub struct StatusSync {
    pub api: ApiClient,
    pub pod_manager: PodManager,
    pub status: StatusManager,
    pub node_name: String,
    /// The registered Node's UID (mirror pods' owner), once known.
    pub node_uid: Arc<RwLock<Option<String>>>,
    pub metrics: KubeletMetrics,
    /// Where a refused status is reported.
    pub events: Recorder,
    /// Which static pods run: a mirror pod is made for a static pod once
    /// it may run, and kept while its predecessor stops.
    pub statics: Arc<dyn StaticPodView>,
}

/// The reason of the Warning event a status the API server refuses gets.
pub const STATUS_REFUSED: &str = "StatusRefused";

/// One pod's sync state.
struct PodSync {
    /// The UID of the API object the status manager's settled status (the
    /// one the API server took, or refused for good) went to (a static
    /// pod's mirror changes UID when it is recreated): not sent again.
    settled_to: Option<String>,
    /// When the status first changed since the API server last took one
    /// (kubelet_pod_status_sync_duration_seconds).
    since: Option<Instant>,
    /// A request for this pod is out.
    in_flight: bool,
    /// After a failed request, not tried again before then.
    retry_at: Option<Instant>,
    backoff: Backoff,
    /// Deleted from the API for good.
    deleted: bool,
}

impl Default for PodSync {
    fn default() -> Self {
        PodSync {
            settled_to: None,
            since: None,
            in_flight: false,
            retry_at: None,
            backoff: Backoff::new(RETRY_BASE, RETRY_MAX),
            deleted: false,
        }
    }
}

/// One pod's sync as it goes out: everything it needs, owned.
struct Job {
    uid: PodUid,
    /// The kubelet's pod: its spec says which terminated containers may run
    /// again.
    pod: Arc<Pod>,
    /// The API object the status goes to: the pod, or a static pod's mirror.
    target: Arc<Pod>,
    /// The latest status, when the API server has not taken it yet.
    status: Option<Arc<PodStatus>>,
    /// Deleted and finished on the node: delete it once the API has it
    /// terminal.
    delete: bool,
}

/// How a job ended.
enum End {
    Done,
    /// The API object is gone or another one took its name.
    Gone,
    /// Failed for now: again after the pod's backoff.
    Retry,
}

struct Outcome {
    /// The API server accepted the status.
    accepted: bool,
    /// The status is settled: accepted, refused for good, or moot.
    settled: bool,
    deleted: bool,
    end: End,
}

impl Job {
    fn target_uid(&self) -> String {
        self.target.metadata.uid.clone().unwrap_or_default()
    }

    async fn run(&self, api: &ApiClient, events: &Recorder) -> Outcome {
        let mut out = Outcome {
            accepted: false,
            settled: false,
            deleted: false,
            end: End::Done,
        };
        let target = pod_full_name(&self.target);
        let meta = &self.target.metadata;
        let ns = meta.namespace.as_deref().unwrap_or("default");
        let name = meta.name.as_deref().unwrap_or("");
        let current = match get_pod(api, ns, name).await {
            Ok(p) => p,
            Err(e) if e.is_not_found() => {
                tracing::debug!(pod = %target, "pod not found in the API server: status dropped");
                out.settled = true;
                out.end = End::Gone;
                return out;
            }
            Err(e) => {
                tracing::warn!(pod = %target, error = %e, "reading a pod for its status; will retry");
                out.end = End::Retry;
                return out;
            }
        };
        if current.metadata.uid != meta.uid {
            tracing::info!(pod = %target, "pod was deleted and then recreated: status dropped");
            out.settled = true;
            out.end = End::Gone;
            return out;
        }
        let mut api_status = current.status.clone().unwrap_or_default();
        if let Some(status) = &self.status {
            let mut merged = (**status).clone();
            if keep_final(&self.pod, &api_status, &mut merged) {
                tracing::info!(pod = %target, "the API server has this pod further along: its terminal phase and terminated containers are kept");
            }
            // Conditions others own (readiness gates) are not the kubelet's to write.
            match patch_status(api, &current, &kubelet_owned(&merged)).await {
                Ok(p) => {
                    api_status = p.status.unwrap_or_default();
                    out.accepted = true;
                    out.settled = true;
                }
                Err(e) if e.is_invalid() => {
                    tracing::warn!(pod = %target, error = %e, "status refused by the API server: not sent again");
                    events.event(
                        &Involved::pod(&self.pod, None),
                        WARNING,
                        STATUS_REFUSED,
                        format!("The API server refused the pod's status (it is sent again when it changes): {e}"),
                    );
                    out.settled = true;
                }
                Err(e) if e.is_not_found() || e.is_conflict() => {
                    tracing::debug!(pod = %target, error = %e, "pod gone or replaced: status dropped");
                    out.settled = true;
                    out.end = End::Gone;
                    return out;
                }
                Err(e) => {
                    tracing::warn!(pod = %target, error = %e, "status patch failed; will retry");
                    out.end = End::Retry;
                    return out;
                }
            }
        }
        // Upstream's canBeDeleted: finished on the node, terminal in the API.
        if self.delete && is_terminal_status(&api_status) {
            match delete_finished(api, ns, name, &self.target_uid()).await {
                Ok(()) => {
                    tracing::info!(pod = %target, "pod terminated and deleted");
                    out.deleted = true;
                }
                Err(e) => {
                    tracing::warn!(pod = %target, error = %e, "deleting a terminated pod; will retry");
                    out.end = End::Retry;
                }
            }
        }
        out
    }
}

impl StatusSync {
    fn node_uid(&self) -> Option<String> {
        self.node_uid.read().clone()
    }

    /// Run the API status sync and the mirror pods until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        tokio::join!(self.sync_statuses(&cancel), self.sync_mirror_pods(&cancel));
    }

    async fn sync_statuses(&self, cancel: &CancellationToken) {
        let mut pods: HashMap<PodUid, PodSync> = HashMap::new();
        let mut in_flight = FuturesUnordered::new();
        let mut tick = tokio::time::interval(SYNC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.status.changed() => {}
                _ = tick.tick() => {}
                Some((job, out)) = in_flight.next() => self.settle(&mut pods, job, out),
            }
            for (uid, _, since) in self.status.take_dirty() {
                pods.entry(uid).or_default().since.get_or_insert(since);
            }
            for pod in self
                .pod_manager
                .pods_where(|p| p.metadata.deletion_timestamp.is_some())
            {
                let uid = PodUid::of(&pod);
                if self.status.is_finished(&uid) {
                    pods.entry(uid).or_default();
                }
            }
            pods.retain(|uid, p| p.in_flight || self.pod_manager.get(uid).is_some());
            let now = Instant::now();
            for (uid, p) in pods.iter_mut() {
                if let Some(job) = self.job(uid, p, now) {
                    p.in_flight = true;
                    let (api, events) = (self.api.clone(), self.events.clone());
                    in_flight.push(async move {
                        let out = job.run(&api, &events).await;
                        (job, out)
                    });
                }
            }
        }
    }

    /// The sync a pod needs now, if any: its latest status when the API
    /// server has not taken it, its final delete when due.
    fn job(&self, uid: &PodUid, p: &PodSync, now: Instant) -> Option<Job> {
        if p.in_flight || p.deleted || p.retry_at.is_some_and(|at| at > now) {
            return None;
        }
        let pod = self.pod_manager.get(uid)?;
        let is_static = is_static_pod(&pod);
        // A static pod's status goes to its mirror, once there is one of it
        // (upstream's IsMirrorPodOf: the mirror of this version of the
        // manifest, not of the one before).
        let target = if is_static {
            let mirror = self.pod_manager.mirror_of(&pod)?;
            let hash = annotation(&pod, keys::CONFIG_HASH);
            (annotation(&mirror, keys::CONFIG_MIRROR) == hash).then_some(mirror)?
        } else {
            pod.clone()
        };
        let target_uid = target.metadata.uid.as_deref().unwrap_or_default();
        let settled = p.settled_to.as_deref() == Some(target_uid) && self.status.is_settled(uid);
        let status = self.status.get_pod_status(uid).filter(|_| !settled);
        let delete =
            !is_static && pod.metadata.deletion_timestamp.is_some() && self.status.is_finished(uid);
        (status.is_some() || delete).then(|| Job {
            uid: uid.clone(),
            pod,
            target,
            status,
            delete,
        })
    }

    fn settle(&self, pods: &mut HashMap<PodUid, PodSync>, job: Job, out: Outcome) {
        let Some(p) = pods.get_mut(&job.uid) else {
            return;
        };
        p.in_flight = false;
        if out.accepted
            && let Some(since) = p.since.take()
        {
            self.metrics
                .pod_status_sync_duration
                .observe_duration(&[], since.elapsed());
        }
        if out.settled
            && let Some(status) = &job.status
        {
            p.settled_to = Some(job.target_uid());
            self.status.set_settled(&job.uid, status.clone());
        }
        p.deleted |= out.deleted;
        match out.end {
            End::Retry => p.retry_at = Some(Instant::now() + p.backoff.next_delay()),
            End::Done | End::Gone => {
                p.backoff.reset();
                p.retry_at = None;
            }
        }
    }

    /// Mirror pods, looked at every SYNC_PERIOD.
    async fn sync_mirror_pods(&self, cancel: &CancellationToken) {
        let mut pending = HashMap::new();
        let mut tick = tokio::time::interval(SYNC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.reconcile_mirror_pods(&mut pending).await;
        }
    }

    /// One mirror pod per static pod, replaced when the manifest changes and
    /// recreated when deleted; mirrors of static pods that are gone are
    /// deleted.
    async fn reconcile_mirror_pods(&self, pending: &mut HashMap<String, (String, Instant)>) {
        let api = &self.api;
        let Some(node_uid) = self.node_uid() else {
            return;
        };
        let node = &self.node_name;
        let statics: Vec<Arc<Pod>> = self
            .pod_manager
            .pods()
            .into_iter()
            .filter(|p| is_static_pod(p))
            .collect();
        for pod in &statics {
            let name = pod_full_name(pod);
            // As upstream makes the mirror in the static pod's SyncPod: not
            // before it may run (an edited manifest's pod waits for the one
            // before it, whose mirror stays meanwhile).
            if self.statics.started(&name) != Some(PodUid::of(pod)) {
                continue;
            }
            let hash = annotation(pod, keys::CONFIG_HASH)
                .unwrap_or_default()
                .to_owned();
            let mirror = self.pod_manager.mirror_of(pod);
            if let Some(m) = &mirror
                && annotation(m, keys::CONFIG_MIRROR) == Some(hash.as_str())
                && m.metadata.deletion_timestamp.is_none()
            {
                pending.remove(&name);
                continue;
            }
            if pending
                .get(&name)
                .is_some_and(|(h, at)| *h == hash && at.elapsed() < MIRROR_PENDING)
            {
                continue;
            }
            if let Some(m) = mirror {
                let uid = m.metadata.uid.clone().unwrap_or_default();
                let ns = m.metadata.namespace.as_deref().unwrap_or("default");
                let mname = m.metadata.name.as_deref().unwrap_or("");
                if let Err(e) = delete_finished(api, ns, mname, &uid).await {
                    tracing::warn!(pod = %name, error = %e, "deleting an outdated mirror pod");
                    continue;
                }
            }
            match create_mirror(api, &mirror_pod(pod, node, &node_uid)).await {
                Ok(_) => {
                    tracing::info!(pod = %name, "mirror pod created");
                    pending.insert(name, (hash, Instant::now()));
                    self.status.mark_dirty(&PodUid::of(pod));
                }
                Err(e) => {
                    // Exists already (the watch will show it) or refused:
                    // either way, not again before MIRROR_PENDING.
                    if !e.is_conflict() {
                        tracing::warn!(pod = %name, error = %e, "creating a mirror pod");
                    }
                    pending.insert(name, (hash, Instant::now()));
                }
            }
        }
        for m in self.pod_manager.mirrors() {
            let name = pod_full_name(&m);
            // Upstream's deleteOrphanedMirrorPods: a mirror whose static pod
            // is gone stays while that pod's containers stop.
            if statics.iter().any(|p| pod_full_name(p) == name) || self.statics.terminating(&name) {
                continue;
            }
            let uid = m.metadata.uid.clone().unwrap_or_default();
            let ns = m.metadata.namespace.as_deref().unwrap_or("default");
            let mname = m.metadata.name.as_deref().unwrap_or("");
            match delete_finished(api, ns, mname, &uid).await {
                Ok(()) => tracing::info!(pod = %name, "orphaned mirror pod deleted"),
                Err(e) => {
                    tracing::warn!(pod = %name, error = %e, "deleting an orphaned mirror pod")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    use http::{Method, Request, Response, StatusCode};
    use http_body_util::BodyExt;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::client::Body;
    use kubelet_core::testing::PodBuilder;
    use tokio::sync::mpsc;

    use crate::clock::Clock;

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    /// No static pod runs.
    struct NoStatics;

    impl StaticPodView for NoStatics {
        fn started(&self, _: &str) -> Option<PodUid> {
            None
        }
        fn terminating(&self, _: &str) -> bool {
            false
        }
    }

    /// A request the fake API server answered: verb, pod name, when.
    type Seen = (Method, String, Instant);

    fn api_pod(name: &str, deleting: bool, status: PodStatus) -> Pod {
        let mut pod = PodBuilder::new(name)
            .namespace("default")
            .uid(&format!("uid-{name}"))
            .restart_policy("Never")
            .container(Container::default())
            .status(status)
            .build();
        pod.metadata.deletion_timestamp = deleting.then(|| Time(Default::default()));
        pod
    }

    fn container(state: ContainerState) -> Option<Vec<ContainerStatus>> {
        Some(vec![ContainerStatus {
            state: Some(state),
            ..Default::default()
        }])
    }

    fn reply(code: StatusCode, body: serde_json::Value) -> Response<Body> {
        let mut resp = Response::new(Body::from(serde_json::to_vec(&body).unwrap()));
        *resp.status_mut() = code;
        resp
    }

    /// A fake API server over `pods`: GET, PATCH of pods/status (the
    /// patch's status replaces the pod's; failed with the code `refuse`
    /// gives for a pod) and DELETE, each reported on `seen`.
    async fn api_server(
        mut handle: Handle,
        pods: Arc<Mutex<HashMap<String, Pod>>>,
        refuse: HashMap<String, StatusCode>,
        seen: mpsc::UnboundedSender<Seen>,
        log: Arc<Mutex<Vec<(Method, String)>>>,
    ) {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().clone();
            let path = req.uri().path().to_owned();
            let rest = path
                .strip_prefix("/api/v1/namespaces/default/pods/")
                .unwrap_or_else(|| panic!("unexpected request {method} {path}"));
            let name = rest.trim_end_matches("/status").to_owned();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let _ = seen.send((method.clone(), name.clone(), Instant::now()));
            log.lock().push((method.clone(), name.clone()));
            let mut pods = pods.lock();
            let resp = match (method, pods.get_mut(&name)) {
                (_, None) => reply(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": 404, "message": format!("pods \"{name}\" not found")}),
                ),
                // The Node authorizer's answer to a read of a pod no longer
                // bound to the node.
                (Method::GET, Some(_)) if refuse.get(&name) == Some(&StatusCode::FORBIDDEN) => {
                    reply(
                        StatusCode::FORBIDDEN,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Forbidden", "code": 403,
                        "message": format!("pods \"{name}\" is forbidden: User \"system:node:node1\" cannot get resource \"pods\"")}),
                    )
                }
                (Method::PATCH, Some(_))
                    if refuse.get(&name) == Some(&StatusCode::UNPROCESSABLE_ENTITY) =>
                {
                    reply(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Invalid", "code": 422,
                        "message": format!("Pod \"{name}\" is invalid: status.containerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state")}),
                    )
                }
                (Method::PATCH, Some(_)) if let Some(code) = refuse.get(&name) => reply(
                    *code,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "InternalError", "code": code.as_u16(), "message": "etcd is away"}),
                ),
                (Method::PATCH, Some(pod)) => {
                    let patch: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    pod.status = serde_json::from_value(patch["status"].clone()).unwrap();
                    reply(StatusCode::OK, serde_json::to_value(&*pod).unwrap())
                }
                (Method::DELETE, Some(_)) => {
                    let pod = pods.remove(&name).unwrap();
                    reply(StatusCode::OK, serde_json::to_value(&pod).unwrap())
                }
                (_, Some(pod)) => reply(StatusCode::OK, serde_json::to_value(&*pod).unwrap()),
            };
            send.send_response(resp);
        }
    }

    async fn next_seen(
        rx: &mut mpsc::UnboundedReceiver<Seen>,
        verb: Method,
        name: &str,
    ) -> Instant {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let (m, n, at) = rx.recv().await.expect("the API server runs");
                if m == verb && n == name {
                    return at;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{verb} {name} within 30 s"))
    }

    /// A pod the API server refuses a status of (422, as for a forbidden
    /// container state transition) delays no other pod's status, is not
    /// sent the refused status again, and, deleted and finished, is still
    /// deleted from the API. A pod whose patches keep failing (500) is
    /// retried on its own and delays no other pod either. A pod the node
    /// may not read (403: the Node authorizer refuses pods it does not know
    /// bound to the node, also for a while after an API server restart) is
    /// retried with back-off, its status not dropped.
    #[tokio::test(start_paused = true)]
    async fn a_refused_status_holds_back_no_pod_and_the_pod_is_still_deleted() {
        let terminated = ContainerState {
            terminated: Some(ContainerStateTerminated::default()),
            ..Default::default()
        };
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..Default::default()
        };
        // In the API, pod a is Succeeded and being deleted; b and c run.
        let a = api_pod(
            "a",
            true,
            PodStatus {
                phase: Some("Succeeded".into()),
                container_statuses: container(terminated.clone()),
                ..Default::default()
            },
        );
        let b = api_pod("b", false, PodStatus::default());
        let c = api_pod("c", false, PodStatus::default());
        let d = api_pod("d", false, PodStatus::default());
        let pods = Arc::new(Mutex::new(HashMap::from([
            ("a".to_string(), a.clone()),
            ("b".to_string(), b.clone()),
            ("c".to_string(), c.clone()),
            ("d".to_string(), d.clone()),
        ])));
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let (seen_tx, mut seen) = mpsc::unbounded_channel();
        let log = Arc::default();
        tokio::spawn(api_server(
            handle,
            pods.clone(),
            HashMap::from([
                ("a".to_string(), StatusCode::UNPROCESSABLE_ENTITY),
                ("c".to_string(), StatusCode::INTERNAL_SERVER_ERROR),
                ("d".to_string(), StatusCode::FORBIDDEN),
            ]),
            seen_tx,
            Arc::clone(&log),
        ));

        let pod_manager = PodManager::default();
        let status = StatusManager::default();
        pod_manager.add_or_update(Arc::new(a.clone()));
        pod_manager.add_or_update(Arc::new(b.clone()));
        pod_manager.add_or_update(Arc::new(c.clone()));
        pod_manager.add_or_update(Arc::new(d.clone()));
        let sync = StatusSync {
            api: ApiClient::new(kube::Client::new(service, "default"), 0, 1),
            pod_manager,
            status: status.clone(),
            node_name: "node1".into(),
            node_uid: Arc::default(),
            metrics: KubeletMetrics::new("node1"),
            events: Recorder::log_only("node1".into()),
            statics: Arc::new(NoStatics),
        };
        let cancel = CancellationToken::new();
        let run = tokio::spawn(sync.run(cancel.clone()));

        let running = || PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        status.set_pod_status(&c, running());
        status.set_pod_status(&d, running());
        // Pod a terminated and its containers were removed: the kubelet's
        // last status for it has the container waiting.
        status.set_pod_status(
            &a,
            PodStatus {
                phase: Some("Failed".into()),
                container_statuses: container(waiting),
                ..Default::default()
            },
        );
        status.set_finished(&PodUid::of(&a));
        next_seen(&mut seen, Method::PATCH, "a").await;
        next_seen(&mut seen, Method::DELETE, "a").await;
        assert!(pods.lock().get("a").is_none(), "pod a deleted");

        // Long after, b's status still goes out at once.
        tokio::time::sleep(Duration::from_secs(30)).await;
        let set = Instant::now();
        status.set_pod_status(&b, running());
        let patched = next_seen(&mut seen, Method::PATCH, "b").await;
        assert!(
            patched - set < Duration::from_millis(100),
            "b's status waited {:?}",
            patched - set
        );
        let phase = pods.lock()["b"].status.as_ref().unwrap().phase.clone();
        assert_eq!(phase.as_deref(), Some("Running"));
        cancel.cancel();
        run.await.unwrap();
        let count = |verb: Method, pod: &str| {
            log.lock()
                .iter()
                .filter(|(m, n)| *m == verb && n == pod)
                .count()
        };
        let patches = |pod: &str| count(Method::PATCH, pod);
        let reads = count(Method::GET, "d");
        assert!(
            (3..=10).contains(&reads) && patches("d") == 0,
            "a pod the node may not read is retried with back-off: {reads} reads in 30 s"
        );
        assert_eq!(patches("a"), 1, "the refused status is not sent again");
        let retries = patches("c");
        assert!(
            (3..=10).contains(&retries),
            "c retried with backoff, not in a hot loop: {retries} patches in 30 s"
        );
    }

    /// A refused status is a Warning event on the pod, and is final for
    /// that content only: the pod's next, different status is sent, the
    /// same one again is not.
    #[tokio::test(start_paused = true)]
    async fn a_refused_status_is_an_event_and_the_next_status_is_sent() {
        let e = api_pod("e", false, PodStatus::default());
        let pods = Arc::new(Mutex::new(HashMap::from([("e".to_string(), e.clone())])));
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let (seen_tx, mut seen) = mpsc::unbounded_channel();
        let log = Arc::default();
        tokio::spawn(api_server(
            handle,
            pods.clone(),
            HashMap::from([("e".to_string(), StatusCode::UNPROCESSABLE_ENTITY)]),
            seen_tx,
            Arc::clone(&log),
        ));
        let pod_manager = PodManager::default();
        pod_manager.add_or_update(Arc::new(e.clone()));
        let status = StatusManager::default();
        let (events, mut events_rx) = Recorder::with_queue("node1".into(), Clock::System);
        let sync = StatusSync {
            api: ApiClient::new(kube::Client::new(service, "default"), 0, 1),
            pod_manager,
            status: status.clone(),
            node_name: "node1".into(),
            node_uid: Arc::default(),
            metrics: KubeletMetrics::new("node1"),
            events,
            statics: Arc::new(NoStatics),
        };
        let cancel = CancellationToken::new();
        let run = tokio::spawn(sync.run(cancel.clone()));
        let phase = |p: &str| PodStatus {
            phase: Some(p.into()),
            ..Default::default()
        };
        status.set_pod_status(&e, phase("Pending"));
        next_seen(&mut seen, Method::PATCH, "e").await;
        let event = tokio::time::timeout(Duration::from_secs(5), events_rx.recv())
            .await
            .expect("an event within 5 s")
            .expect("the recorder is open");
        assert_eq!(event.reason.as_deref(), Some(STATUS_REFUSED));
        assert_eq!(event.type_.as_deref(), Some(WARNING));
        assert_eq!(event.involved_object.name.as_deref(), Some("e"));
        assert!(
            event
                .message
                .as_deref()
                .unwrap_or("")
                .contains("is invalid"),
            "{:?}",
            event.message
        );
        // The same status again: not sent; a new one: sent.
        status.set_pod_status(&e, phase("Pending"));
        tokio::time::sleep(Duration::from_secs(5)).await;
        status.set_pod_status(&e, phase("Running"));
        next_seen(&mut seen, Method::PATCH, "e").await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        cancel.cancel();
        run.await.unwrap();
        let patches = log
            .lock()
            .iter()
            .filter(|(m, _)| *m == Method::PATCH)
            .count();
        assert_eq!(patches, 2, "one patch per distinct status");
    }

    #[test]
    fn mirror_pods_carry_the_hash_and_the_node_owner() {
        let pod = PodBuilder::new("web-node1")
            .namespace("default")
            .uid("static-uid")
            .annotation(keys::CONFIG_SOURCE, "file")
            .annotation(keys::CONFIG_HASH, "abc")
            .build();
        assert!(is_static_pod(&pod));
        let m = mirror_pod(&pod, "node1", "node-uid");
        assert_eq!(annotation(&m, keys::CONFIG_MIRROR), Some("abc"));
        assert_eq!(
            m.metadata.uid, None,
            "the API server assigns the mirror's UID"
        );
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "node1", "node-uid")
        );
    }
}
