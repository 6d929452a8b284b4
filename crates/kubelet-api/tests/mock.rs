//! kubelet-api against a mocked API server: each operation's requests
//! (verb, path, query, patch type, body) as the API server sees them, what
//! each answer turns into, and the timing of retries and the rate limit
//! (paused tokio time, so the waits cost nothing).
//!
//! The API server is a `tower_test` mock under the real kube client and the
//! real rate limit layer (`ApiClient::new`); the operation under test runs
//! in a task while the test takes its requests one by one (`ApiServer`).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use http::{Method, Request, Response};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Node, NodeCondition, NodeStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kubelet_api::node::{self, LEASE_NAMESPACE, LeaseHeartbeat};
use kubelet_api::pods;
use kubelet_api::{ApiClient, ApiError};
use kubelet_core::testing::PodBuilder;
use kubelet_core::types::{SOURCE_API, SourceSnapshot, keys};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_test::mock::{Handle, SendResponse};

/// How long a test waits for a request, or for an operation to end, before
/// it fails (instant under paused time).
const WAIT: Duration = Duration::from_secs(10);

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const MERGE: &str = "application/merge-patch+json";

// ---------------------------------------------------------------------------
// The mocked API server
// ---------------------------------------------------------------------------

/// An `ApiClient` with `qps`/`burst` over a mocked connection, and the API
/// server end of it.
fn mock_api(qps: u32, burst: u32) -> (ApiClient, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let api = ApiClient::new(kube::Client::new(service, "default"), qps, burst);
    (api, ApiServer(handle))
}

struct ApiServer(Handle<Request<Body>, Response<Body>>);

impl ApiServer {
    /// The next request, read whole; fails the test if none comes within
    /// `WAIT`.
    async fn next(&mut self) -> Exchange {
        self.next_before(Instant::now() + WAIT)
            .await
            .expect("a request in time")
    }

    /// The next request if one comes before `deadline`.
    async fn next_before(&mut self, deadline: Instant) -> Option<Exchange> {
        let (request, respond) = tokio::time::timeout_at(deadline, self.0.next_request())
            .await
            .ok()?
            .expect("the client is there");
        Some(Exchange::read(request, respond).await)
    }

    /// The next request, which must be `method` on `path`.
    async fn expect(&mut self, method: Method, path: &str) -> Exchange {
        let exchange = self.next().await;
        assert_eq!(
            (&exchange.method, exchange.path.as_str()),
            (&method, path),
            "expected {method} {path}, got {exchange:?}"
        );
        exchange
    }

    /// No request comes within `window`.
    async fn expect_none(&mut self, window: Duration) {
        if let Some(exchange) = self.next_before(Instant::now() + window).await {
            panic!("no request expected, got {exchange:?}");
        }
    }
}

/// One request the API server took, and the way to answer it.
struct Exchange {
    method: Method,
    path: String,
    /// The query, decoded.
    query: BTreeMap<String, String>,
    content_type: Option<String>,
    /// The JSON body (`Null` when there is none).
    body: Value,
    respond: SendResponse<Response<Body>>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {:?} {}",
            self.method, self.path, self.query, self.body
        )
    }
}

impl Exchange {
    async fn read(request: Request<Body>, respond: SendResponse<Response<Body>>) -> Exchange {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("the request body");
        Exchange {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(decode_query).unwrap_or_default(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_owned()),
            body: if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("a JSON body")
            },
            respond,
        }
    }

    /// Answer `code` with `body` as JSON.
    fn answer(self, code: u16, body: &Value) {
        self.answer_bytes(code, serde_json::to_vec(body).unwrap());
    }

    /// Answer with a `Status` of `code` and `reason`, as the API server
    /// refuses a request.
    fn fail(self, code: u16, reason: &str) {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "reason": reason, "code": code, "message": format!("{reason} (mocked)"),
        });
        self.answer(code, &status);
    }

    /// Answer a watch with `events` (`{"type", "object"}` each), then end it.
    fn stream(self, events: &[Value]) {
        let mut lines = Vec::new();
        for event in events {
            serde_json::to_writer(&mut lines, event).unwrap();
            lines.push(b'\n');
        }
        self.answer_bytes(200, lines);
    }

    fn answer_bytes(self, code: u16, body: Vec<u8>) {
        let response = Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap();
        self.respond.send_response(response);
    }
}

/// `a=1&b=x%3Dy` as a map, percent-decoded.
fn decode_query(query: &str) -> BTreeMap<String, String> {
    fn decode(s: &str) -> String {
        let mut out = Vec::new();
        let mut bytes = s.bytes();
        while let Some(b) = bytes.next() {
            match b {
                b'%' => {
                    let hex: String = bytes.by_ref().take(2).map(char::from).collect();
                    out.push(u8::from_str_radix(&hex, 16).expect("percent-encoded"));
                }
                b'+' => out.push(b' '),
                b => out.push(b),
            }
        }
        String::from_utf8(out).unwrap()
    }
    query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Run `operation` while the test plays the API server.
fn start<T: Send + 'static>(operation: impl Future<Output = T> + Send + 'static) -> JoinHandle<T> {
    tokio::spawn(operation)
}

/// What a started operation returned; fails the test if it has not ended
/// within `WAIT` (it is waiting for a request nobody answers).
async fn finished<T>(task: JoinHandle<T>) -> T {
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the operation ends in time")
        .expect("the operation does not panic")
}

// ---------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------

fn pod(namespace: &str, name: &str) -> Pod {
    PodBuilder::new(name)
        .namespace(namespace)
        .uid(&format!("uid-{name}"))
        .node_name("node1")
        .container(Container::default())
        .build()
}

/// `pod` as the API server has it at `resource_version`.
fn at_version(mut pod: Pod, resource_version: &str) -> Pod {
    pod.metadata.resource_version = Some(resource_version.into());
    pod
}

fn running() -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    }
}

/// A static pod as the file source has it.
fn static_pod() -> Pod {
    let mut pod = pod("kube-system", "etcd-node1");
    pod.metadata.annotations = Some(BTreeMap::from([
        (keys::CONFIG_SOURCE.to_owned(), "file".to_owned()),
        (keys::CONFIG_HASH.to_owned(), "hash-1".to_owned()),
    ]));
    pod.metadata.labels = Some(BTreeMap::from([(
        "component".to_owned(),
        "etcd".to_owned(),
    )]));
    pod
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn node_object(name: &str, label_pairs: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: labels(label_pairs),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The Node as the API server has it: with a UID and a resource version.
fn stored(mut node: Node, resource_version: &str) -> Value {
    node.metadata.uid = Some("node-uid".into());
    node.metadata.resource_version = Some(resource_version.into());
    serde_json::to_value(node).unwrap()
}

fn micro_time(second: i64) -> MicroTime {
    MicroTime(Timestamp::from_second(second).unwrap())
}

/// The API server's copy of a request's object: `body` with a resource
/// version (and a UID when it had none).
fn accepted(body: &Value, resource_version: &str) -> Value {
    let mut object = body.clone();
    object["metadata"]["resourceVersion"] = json!(resource_version);
    if object["metadata"]["uid"].is_null() {
        object["metadata"]["uid"] = json!("assigned-uid");
    }
    object
}

fn is_code(result: Result<impl std::fmt::Debug, ApiError>, code: u16) -> ApiError {
    let e = result.expect_err("an error");
    assert_eq!(e.code(), Some(code), "{e}");
    e
}

// ---------------------------------------------------------------------------
// Pod status
// ---------------------------------------------------------------------------

/// The status goes to the status subresource as a strategic merge patch,
/// with the pod's UID as a precondition beside it.
#[tokio::test]
async fn pod_status_is_a_strategic_patch_of_the_status_subresource_with_the_uid() {
    let (api, mut server) = mock_api(0, 1);
    let pod = pod("ns1", "web");
    let task = start({
        let pod = pod.clone();
        async move { pods::patch_status(&api, &pod, &running()).await }
    });

    let patch = server
        .expect(Method::PATCH, "/api/v1/namespaces/ns1/pods/web/status")
        .await;
    assert_eq!(patch.content_type.as_deref(), Some(STRATEGIC));
    assert_eq!(
        patch.body,
        json!({ "metadata": { "uid": "uid-web" }, "status": { "phase": "Running" } })
    );
    let mut updated = pod.clone();
    updated.status = Some(running());
    patch.answer(
        200,
        &serde_json::to_value(at_version(updated, "7")).unwrap(),
    );

    let got = finished(task).await.expect("patched");
    assert_eq!(got.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(got.status.unwrap().phase.as_deref(), Some("Running"));
}

/// A refused status patch keeps the API server's code: 409 (the UID
/// precondition failed: a new pod under the name), 422 (validation), 404.
#[tokio::test]
async fn a_refused_pod_status_patch_says_why() {
    let (api, mut server) = mock_api(0, 1);
    type Is = fn(&ApiError) -> bool;
    let checks: [(u16, &str, Is); 3] = [
        (409, "Conflict", ApiError::is_conflict),
        (422, "Invalid", ApiError::is_invalid),
        (404, "NotFound", ApiError::is_not_found),
    ];
    for (code, reason, is) in checks {
        let task = start({
            let api = api.clone();
            async move { pods::patch_status(&api, &pod("ns1", "web"), &running()).await }
        });
        server
            .expect(Method::PATCH, "/api/v1/namespaces/ns1/pods/web/status")
            .await
            .fail(code, reason);
        let e = is_code(finished(task).await, code);
        assert!(is(&e), "{code}: {e}");
        let all = [e.is_conflict(), e.is_invalid(), e.is_not_found()];
        assert_eq!(all.iter().filter(|b| **b).count(), 1, "{code}: {all:?}");
    }
}

// ---------------------------------------------------------------------------
// The final delete
// ---------------------------------------------------------------------------

/// A finished pod is deleted at once (grace period 0) and only if it is
/// still the same pod (UID precondition), as upstream's status manager
/// deletes.
#[tokio::test]
async fn a_finished_pod_is_deleted_with_grace_0_and_its_uid() {
    let (api, mut server) = mock_api(0, 1);
    let task = start(async move { pods::delete_finished(&api, "ns1", "web", "uid-web").await });

    let delete = server
        .expect(Method::DELETE, "/api/v1/namespaces/ns1/pods/web")
        .await;
    assert_eq!(delete.body["gracePeriodSeconds"], json!(0), "{delete:?}");
    assert_eq!(
        delete.body["preconditions"],
        json!({ "uid": "uid-web" }),
        "a UID precondition only: {delete:?}"
    );
    delete.answer(200, &serde_json::to_value(pod("ns1", "web")).unwrap());
    finished(task).await.expect("deleted");
}

/// A pod that is gone already is done (Ok); another refusal (409: the name
/// is a new pod's now) is an error.
#[tokio::test]
async fn deleting_a_gone_pod_is_done_and_a_refused_delete_is_an_error() {
    let (api, mut server) = mock_api(0, 1);
    for (code, reason) in [(404, "NotFound"), (409, "Conflict"), (500, "InternalError")] {
        let task = start({
            let api = api.clone();
            async move { pods::delete_finished(&api, "ns1", "web", "uid-web").await }
        });
        server
            .expect(Method::DELETE, "/api/v1/namespaces/ns1/pods/web")
            .await
            .fail(code, reason);
        let result = finished(task).await;
        if code == 404 {
            assert!(result.is_ok(), "gone already is done: {result:?}");
        } else {
            is_code(result, code);
        }
    }
}

// ---------------------------------------------------------------------------
// Mirror pods
// ---------------------------------------------------------------------------

/// A mirror pod is created in its static pod's namespace as the kubelet
/// built it: the config.mirror annotation, the Node as controlling owner,
/// no UID; the API server's copy (with its UID) comes back. AlreadyExists
/// is a conflict (the status sync waits for the watch then).
#[tokio::test]
async fn a_mirror_pod_is_created_with_its_annotation_and_node_owner() {
    let (api, mut server) = mock_api(0, 1);
    let mirror = pods::mirror_pod(&static_pod(), "node1", "node-uid");
    let task = start({
        let api = api.clone();
        let mirror = mirror.clone();
        async move { pods::create_mirror(&api, &mirror).await }
    });

    let create = server
        .expect(Method::POST, "/api/v1/namespaces/kube-system/pods")
        .await;
    let meta = &create.body["metadata"];
    assert_eq!(meta["name"], "etcd-node1");
    assert_eq!(meta["annotations"][keys::CONFIG_MIRROR], "hash-1");
    assert_eq!(meta["annotations"][keys::CONFIG_SOURCE], "file");
    assert_eq!(meta["labels"], json!({ "component": "etcd" }));
    assert_eq!(
        meta["ownerReferences"],
        json!([{ "apiVersion": "v1", "kind": "Node", "name": "node1", "uid": "node-uid",
                 "controller": true }])
    );
    assert!(meta["uid"].is_null(), "the API server assigns the UID");
    assert!(create.body["status"].is_null(), "{create:?}");
    assert_eq!(
        create.body["spec"],
        serde_json::to_value(mirror.spec.as_ref()).unwrap()
    );
    let answer = accepted(&create.body, "3");
    create.answer(201, &answer);
    let created = finished(task).await.expect("created");
    assert_eq!(created.metadata.uid.as_deref(), Some("assigned-uid"));

    let task = start(async move { pods::create_mirror(&api, &mirror).await });
    server
        .expect(Method::POST, "/api/v1/namespaces/kube-system/pods")
        .await
        .fail(409, "AlreadyExists");
    assert!(is_code(finished(task).await, 409).is_conflict());
}

/// Reading a mirror pod back (the status sync's get before a patch) and
/// replacing an outdated one: delete by its UID, then create the new one.
#[tokio::test]
async fn a_mirror_pod_is_read_and_an_outdated_one_replaced_by_uid() {
    let (api, mut server) = mock_api(0, 1);
    let path = "/api/v1/namespaces/kube-system/pods/etcd-node1";
    let mut outdated = pods::mirror_pod(&static_pod(), "node1", "node-uid");
    outdated.metadata.uid = Some("mirror-uid-1".into());

    let task = start({
        let api = api.clone();
        async move { pods::get_pod(&api, "kube-system", "etcd-node1").await }
    });
    server
        .expect(Method::GET, path)
        .await
        .answer(200, &serde_json::to_value(&outdated).unwrap());
    let got = finished(task).await.expect("read");
    assert_eq!(got.metadata.uid.as_deref(), Some("mirror-uid-1"));

    let task = start({
        let api = api.clone();
        async move { pods::get_pod(&api, "kube-system", "etcd-node1").await }
    });
    server.expect(Method::GET, path).await.fail(404, "NotFound");
    assert!(is_code(finished(task).await, 404).is_not_found());

    // The static pod's config changed: the old mirror goes, by its UID, and
    // the new one is created.
    let mut changed = static_pod();
    changed
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(keys::CONFIG_HASH.into(), "hash-2".into());
    let task = start(async move {
        pods::delete_finished(&api, "kube-system", "etcd-node1", "mirror-uid-1").await?;
        pods::create_mirror(&api, &pods::mirror_pod(&changed, "node1", "node-uid")).await
    });
    let delete = server.expect(Method::DELETE, path).await;
    assert_eq!(delete.body["preconditions"]["uid"], "mirror-uid-1");
    assert_eq!(delete.body["gracePeriodSeconds"], 0);
    delete.answer(200, &serde_json::to_value(&outdated).unwrap());
    let create = server
        .expect(Method::POST, "/api/v1/namespaces/kube-system/pods")
        .await;
    assert_eq!(
        create.body["metadata"]["annotations"][keys::CONFIG_MIRROR],
        "hash-2"
    );
    let answer = accepted(&create.body, "9");
    create.answer(201, &answer);
    finished(task).await.expect("replaced");
}

// ---------------------------------------------------------------------------
// The pod watch
// ---------------------------------------------------------------------------

fn pod_list(resource_version: &str, items: &[Pod]) -> Value {
    json!({
        "kind": "PodList", "apiVersion": "v1",
        "metadata": { "resourceVersion": resource_version },
        "items": items,
    })
}

fn watch_event(kind: &str, pod: &Pod) -> Value {
    json!({ "type": kind, "object": pod })
}

fn start_watch(
    api: ApiClient,
) -> (
    mpsc::Receiver<SourceSnapshot>,
    CancellationToken,
    JoinHandle<()>,
) {
    let (tx, rx) = mpsc::channel(8);
    let cancel = CancellationToken::new();
    let task = start(pods::watch_node_pods(
        api,
        "node1".into(),
        tx,
        cancel.clone(),
    ));
    (rx, cancel, task)
}

/// The next snapshot's pod names, in the order sent.
async fn snapshot(rx: &mut mpsc::Receiver<SourceSnapshot>) -> Vec<String> {
    let snapshot = tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a snapshot in time")
        .expect("the watch runs");
    assert_eq!(snapshot.source, SOURCE_API);
    snapshot
        .pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

/// The list request of this node's pods.
fn assert_list(request: &Exchange) {
    assert_eq!(
        (&request.method, request.path.as_str()),
        (&Method::GET, "/api/v1/pods")
    );
    assert_eq!(
        request.query.get("fieldSelector").map(String::as_str),
        Some("spec.nodeName=node1"),
        "{request:?}"
    );
    assert!(!request.query.contains_key("watch"), "{request:?}");
}

/// A watch of this node's pods from `resource_version`.
fn assert_watch(request: &Exchange, resource_version: &str) {
    assert_eq!(
        (&request.method, request.path.as_str()),
        (&Method::GET, "/api/v1/pods")
    );
    let q = |k: &str| request.query.get(k).map(String::as_str);
    assert_eq!(
        q("fieldSelector"),
        Some("spec.nodeName=node1"),
        "{request:?}"
    );
    assert_eq!(q("watch"), Some("true"), "{request:?}");
    assert_eq!(q("resourceVersion"), Some(resource_version), "{request:?}");
}

/// Lists and watches only this node's pods (fieldSelector), sends the
/// listed set once the list is complete and the whole set again after each
/// change, resumes the watch from the last resource version, and ends when
/// cancelled.
#[tokio::test(start_paused = true)]
async fn the_pod_watch_sends_this_nodes_pods_as_a_whole_set() {
    let (api, mut server) = mock_api(0, 1);
    let (mut rx, cancel, task) = start_watch(api);
    let (a, b, c) = (pod("ns1", "a"), pod("ns1", "b"), pod("ns2", "c"));

    let list = server.next().await;
    assert_list(&list);
    list.answer(200, &pod_list("10", &[a.clone(), b.clone()]));
    assert_eq!(snapshot(&mut rx).await, ["a", "b"]);

    let watch = server.next().await;
    assert_watch(&watch, "10");
    watch.stream(&[
        watch_event("ADDED", &at_version(c, "11")),
        watch_event("DELETED", &at_version(a, "12")),
    ]);
    assert_eq!(snapshot(&mut rx).await, ["a", "b", "c"]);
    assert_eq!(snapshot(&mut rx).await, ["b", "c"]);

    // The watch ended: the next one resumes where it stopped.
    let watch = server.next().await;
    assert_watch(&watch, "12");
    cancel.cancel();
    finished(task).await;
    drop(watch);
}

/// Without a receiver the watch ends.
#[tokio::test(start_paused = true)]
async fn the_pod_watch_ends_when_its_receiver_is_gone() {
    let (api, mut server) = mock_api(0, 1);
    let (rx, _cancel, task) = start_watch(api);
    drop(rx);
    let list = server.next().await;
    assert_list(&list);
    list.answer(200, &pod_list("10", &[pod("ns1", "a")]));
    finished(task).await;
}

/// Fails every list of this node's pods for `window`; when each came,
/// counted from the first.
async fn fail_lists_for(server: &mut ApiServer, window: Duration) -> Vec<Duration> {
    let t0 = Instant::now();
    let mut failed = Vec::new();
    while let Some(list) = server.next_before(t0 + window).await {
        assert_list(&list);
        failed.push(t0.elapsed());
        list.fail(500, "InternalError");
        assert!(failed.len() <= 100, "a hot loop: {failed:?}");
    }
    failed
}

fn gaps(at: &[Duration]) -> Vec<Duration> {
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

/// `at` are `gaps` apart, each within a few ms (tokio's timer rounds up to
/// the millisecond).
fn assert_gaps(at: &[Duration], gaps_ms: &[u64]) {
    let got = gaps(at);
    let close = got.len() == gaps_ms.len()
        && got.iter().zip(gaps_ms).all(|(gap, want)| {
            let want = Duration::from_millis(*want);
            *gap >= want && *gap < want + Duration::from_millis(10)
        });
    assert!(
        close,
        "requests at {at:?}: gaps {got:?}, want {gaps_ms:?} ms"
    );
}

/// While the API server fails the list, the watch retries it after a delay
/// (200 ms at least: at most 51 lists in 10 s, not a hot loop) and sends
/// nothing; once a list succeeds the set is sent.
#[tokio::test(start_paused = true)]
async fn the_pod_watch_retries_a_failing_list_after_a_delay() {
    let (api, mut server) = mock_api(0, 1);
    let (mut rx, cancel, task) = start_watch(api);

    let failed = fail_lists_for(&mut server, Duration::from_secs(10)).await;
    assert!(
        (5..=51).contains(&failed.len()),
        "{} lists in 10 s: {failed:?}",
        failed.len()
    );
    assert!(
        gaps(&failed)
            .iter()
            .all(|gap| *gap >= Duration::from_millis(200)),
        "retried at {failed:?}"
    );
    assert_eq!(
        rx.try_recv().err(),
        Some(mpsc::error::TryRecvError::Empty),
        "no snapshot while the list fails"
    );

    let list = server.next().await;
    assert_list(&list);
    list.answer(200, &pod_list("20", &[pod("ns1", "a")]));
    assert_eq!(snapshot(&mut rx).await, ["a"]);
    cancel.cancel();
    finished(task).await;
}

/// A failing watch is retried from the listed resource version (no
/// relist) after 200 ms doubling; an event resets the back-off.
#[tokio::test(start_paused = true)]
async fn the_pod_watch_backs_off_a_failing_watch_and_resumes_it() {
    let (api, mut server) = mock_api(0, 1);
    let (mut rx, cancel, task) = start_watch(api);
    let list = server.next().await;
    list.answer(200, &pod_list("20", &[pod("ns1", "a")]));
    assert_eq!(snapshot(&mut rx).await, ["a"]);

    let t0 = Instant::now();
    let mut failed = Vec::new();
    for _ in 0..4 {
        let watch = server.next().await;
        assert_watch(&watch, "20");
        failed.push(t0.elapsed());
        watch.fail(500, "InternalError");
    }
    assert_gaps(&failed, &[200, 400, 800]);

    // Back: an event, then the watch ends and the next one fails.
    let watch = server.next().await;
    assert_watch(&watch, "20");
    watch.stream(&[watch_event("ADDED", &at_version(pod("ns1", "b"), "21"))]);
    assert_eq!(snapshot(&mut rx).await, ["a", "b"]);
    let watch = server.next().await;
    assert_watch(&watch, "21");
    let failed_at = Instant::now();
    watch.fail(500, "InternalError");
    let watch = server.next().await;
    assert_watch(&watch, "21");
    assert_gaps(&[Duration::ZERO, failed_at.elapsed()], &[200]);
    cancel.cancel();
    finished(task).await;
}

/// The watches' back-off holds for a failing *list* too: kube's watcher
/// yields `Event::Init` before every relist, which must not reset it (kube's
/// `StreamBackoff` does, and kept a failing list at 200 ms).
#[tokio::test(start_paused = true)]
async fn the_pod_watch_backs_off_a_failing_list_doubling() {
    let (api, mut server) = mock_api(0, 1);
    let (_rx, cancel, task) = start_watch(api);
    let failed = fail_lists_for(&mut server, Duration::from_secs(10)).await;
    assert_gaps(&failed, &[200, 400, 800, 1600, 3200]);
    cancel.cancel();
    finished(task).await;
}

// ---------------------------------------------------------------------------
// Node registration and status
// ---------------------------------------------------------------------------

/// A new Node is created as given and the API server's copy returned.
#[tokio::test]
async fn registration_creates_the_node() {
    let (api, mut server) = mock_api(0, 1);
    let node = node_object("node1", &[("kubernetes.io/hostname", "node1")]);
    let task = start({
        let node = node.clone();
        async move { node::register(&api, &node).await }
    });
    let create = server.expect(Method::POST, "/api/v1/nodes").await;
    assert_eq!(create.body["metadata"]["name"], "node1");
    assert_eq!(
        create.body["metadata"]["labels"],
        json!({ "kubernetes.io/hostname": "node1" })
    );
    create.answer(201, &stored(node, "1"));
    let got = finished(task).await.expect("registered");
    assert_eq!(got.metadata.uid.as_deref(), Some("node-uid"));
}

/// A Node of the name exists: it is read, and only the kubelet's labels it
/// lacks or has otherwise are patched (a merge patch); labels others set
/// stay untouched.
#[tokio::test(start_paused = true)]
async fn registration_over_an_existing_node_patches_only_the_labels_that_differ() {
    let (api, mut server) = mock_api(0, 1);
    let want = node_object(
        "node1",
        &[("same", "1"), ("changed", "new"), ("added", "3")],
    );
    let task = start(async move { node::register(&api, &want).await });

    server
        .expect(Method::POST, "/api/v1/nodes")
        .await
        .fail(409, "AlreadyExists");
    let existing = node_object(
        "node1",
        &[("same", "1"), ("changed", "old"), ("other", "x")],
    );
    server
        .expect(Method::GET, "/api/v1/nodes/node1")
        .await
        .answer(200, &stored(existing, "5"));
    let patch = server.expect(Method::PATCH, "/api/v1/nodes/node1").await;
    assert_eq!(patch.content_type.as_deref(), Some(MERGE));
    assert_eq!(
        patch.body,
        json!({ "metadata": { "labels": { "changed": "new", "added": "3" } } })
    );
    let patched = node_object(
        "node1",
        &[
            ("same", "1"),
            ("changed", "new"),
            ("added", "3"),
            ("other", "x"),
        ],
    );
    patch.answer(200, &stored(patched, "6"));
    let got = finished(task).await.expect("registered");
    assert_eq!(got.metadata.resource_version.as_deref(), Some("6"));
}

/// An existing Node with every label the kubelet wants is returned as it
/// is: no patch.
#[tokio::test(start_paused = true)]
async fn registration_over_an_up_to_date_node_patches_nothing() {
    let (api, mut server) = mock_api(0, 1);
    let want = node_object("node1", &[("a", "1"), ("b", "2")]);
    let task = start({
        let api = api.clone();
        async move { node::register(&api, &want).await }
    });

    server
        .expect(Method::POST, "/api/v1/nodes")
        .await
        .fail(409, "AlreadyExists");
    let existing = node_object("node1", &[("a", "1"), ("b", "2"), ("other", "x")]);
    server
        .expect(Method::GET, "/api/v1/nodes/node1")
        .await
        .answer(200, &stored(existing, "5"));
    let got = finished(task).await.expect("registered without a patch");
    assert_eq!(got.metadata.resource_version.as_deref(), Some("5"));
    server.expect_none(Duration::from_secs(5)).await;
}

/// A refused create other than AlreadyExists is the error, with no read.
#[tokio::test(start_paused = true)]
async fn registration_refused_otherwise_is_an_error_without_a_read() {
    let (api, mut server) = mock_api(0, 1);
    let task = start({
        let api = api.clone();
        async move { node::register(&api, &node_object("node1", &[])).await }
    });
    server
        .expect(Method::POST, "/api/v1/nodes")
        .await
        .fail(403, "Forbidden");
    is_code(finished(task).await, 403);
    server.expect_none(Duration::from_secs(5)).await;
}

/// The node status goes to the status subresource as a strategic merge
/// patch (conditions merge by type) holding the status only.
#[tokio::test]
async fn node_status_is_a_strategic_patch_of_the_status_subresource() {
    let (api, mut server) = mock_api(0, 1);
    let status = NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let task = start({
        let api = api.clone();
        let status = status.clone();
        async move { node::patch_status(&api, "node1", &status).await }
    });
    let patch = server
        .expect(Method::PATCH, "/api/v1/nodes/node1/status")
        .await;
    assert_eq!(patch.content_type.as_deref(), Some(STRATEGIC));
    assert_eq!(
        patch.body,
        json!({ "status": { "conditions": [
            { "type": "Ready", "status": "True", "reason": "KubeletReady" }
        ] } })
    );
    let mut node = node_object("node1", &[]);
    node.status = Some(status.clone());
    patch.answer(200, &stored(node, "8"));
    let got = finished(task).await.expect("patched");
    assert_eq!(got.status, Some(status.clone()));

    let task = start(async move { node::patch_status(&api, "node1", &status).await });
    server
        .expect(Method::PATCH, "/api/v1/nodes/node1/status")
        .await
        .fail(500, "InternalError");
    is_code(finished(task).await, 500);
}

// ---------------------------------------------------------------------------
// The lease
// ---------------------------------------------------------------------------

/// Renew `lease` at `second` in a task; the heartbeat comes back with the
/// result.
fn renew(
    api: &ApiClient,
    mut lease: LeaseHeartbeat,
    second: i64,
) -> JoinHandle<(LeaseHeartbeat, Result<(), ApiError>)> {
    let api = api.clone();
    start(async move {
        let result = lease.renew(&api, micro_time(second)).await;
        (lease, result)
    })
}

/// The first renewal looks for the lease and, missing, creates it in
/// kube-node-lease (holder, duration, renew time, the Node as owner); the
/// next renewal updates the cached copy: one PUT, no read.
#[tokio::test]
async fn the_lease_is_created_then_renewed_from_the_cached_copy() {
    let (api, mut server) = mock_api(0, 1);
    let path = format!("{LEASES}/node1");
    let lease = LeaseHeartbeat::new("node1".into(), Some("node-uid".into()), 40);

    let task = renew(&api, lease, 1000);
    server
        .expect(Method::GET, &path)
        .await
        .fail(404, "NotFound");
    let create = server.expect(Method::POST, LEASES).await;
    assert_eq!(
        create.body["metadata"],
        json!({
            "name": "node1", "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{ "apiVersion": "v1", "kind": "Node", "name": "node1",
                                  "uid": "node-uid" }],
        })
    );
    assert_eq!(
        create.body["spec"],
        json!({
            "holderIdentity": "node1", "leaseDurationSeconds": 40,
            "renewTime": serde_json::to_value(micro_time(1000)).unwrap(),
        })
    );
    let answer = accepted(&create.body, "1");
    create.answer(201, &answer);
    let (lease, result) = finished(task).await;
    result.expect("created");

    let task = renew(&api, lease, 1010);
    let update = server.expect(Method::PUT, &path).await;
    assert_eq!(
        update.body["metadata"]["resourceVersion"], "1",
        "the cached copy"
    );
    assert_eq!(
        update.body["spec"]["renewTime"],
        serde_json::to_value(micro_time(1010)).unwrap()
    );
    assert_eq!(update.body["spec"]["holderIdentity"], "node1");
    let answer = accepted(&update.body, "2");
    update.answer(200, &answer);
    let (lease, result) = finished(task).await;
    result.expect("renewed");

    // And the next one updates the API server's answer to that.
    let task = renew(&api, lease, 1020);
    let update = server.expect(Method::PUT, &path).await;
    assert_eq!(update.body["metadata"]["resourceVersion"], "2");
    let answer = accepted(&update.body, "3");
    update.answer(200, &answer);
    finished(task).await.1.expect("renewed");
}

/// A renewal that reads the lease, finding it at `resource_version`, and
/// updates that copy; the API server's answer (`resource_version + 1`) is
/// what the heartbeat holds after.
async fn renew_by_reading(
    api: &ApiClient,
    server: &mut ApiServer,
    lease: LeaseHeartbeat,
    resource_version: u32,
) -> LeaseHeartbeat {
    let path = format!("{LEASES}/node1");
    let task = renew(api, lease, 1000 + i64::from(resource_version));
    let found = Lease {
        metadata: ObjectMeta {
            name: Some("node1".into()),
            namespace: Some(LEASE_NAMESPACE.into()),
            resource_version: Some(resource_version.to_string()),
            ..Default::default()
        },
        spec: Some(Default::default()),
    };
    server
        .expect(Method::GET, &path)
        .await
        .answer(200, &serde_json::to_value(&found).unwrap());
    let update = server.expect(Method::PUT, &path).await;
    assert_eq!(
        update.body["metadata"]["resourceVersion"],
        resource_version.to_string(),
        "the copy read is updated"
    );
    assert_eq!(update.body["spec"]["holderIdentity"], "node1");
    let answer = accepted(&update.body, &(resource_version + 1).to_string());
    update.answer(200, &answer);
    let (lease, result) = finished(task).await;
    result.expect("renewed");
    lease
}

/// A failed update (409: someone else wrote the lease; 500) drops the
/// cached copy: the next renewal reads the lease again.
#[tokio::test]
async fn a_failed_lease_update_makes_the_next_renewal_read_again() {
    let (api, mut server) = mock_api(0, 1);
    let mut lease = LeaseHeartbeat::new("node1".into(), Some("node-uid".into()), 40);
    for (code, reason, read_at) in [(409, "Conflict", 10), (500, "InternalError", 20)] {
        // Read (found at `read_at`) and updated: the answer is cached...
        lease = renew_by_reading(&api, &mut server, lease, read_at).await;
        // ... and updated, no read, and refused.
        let task = renew(&api, lease, 2000);
        let update = server.expect(Method::PUT, &format!("{LEASES}/node1")).await;
        assert_eq!(
            update.body["metadata"]["resourceVersion"],
            (read_at + 1).to_string()
        );
        update.fail(code, reason);
        let result;
        (lease, result) = finished(task).await;
        is_code(result, code);
    }
    // The last refusal dropped the cache too.
    renew_by_reading(&api, &mut server, lease, 30).await;
}

/// Before the Node's UID is known the lease has no owner.
#[tokio::test]
async fn a_lease_without_the_node_uid_has_no_owner() {
    let (api, mut server) = mock_api(0, 1);
    let task = renew(&api, LeaseHeartbeat::new("node1".into(), None, 40), 1000);
    server
        .expect(Method::GET, &format!("{LEASES}/node1"))
        .await
        .fail(404, "NotFound");
    let create = server.expect(Method::POST, LEASES).await;
    assert!(
        create.body["metadata"]["ownerReferences"].is_null(),
        "{create:?}"
    );
    assert_eq!(create.body["spec"]["holderIdentity"], "node1");
    let answer = accepted(&create.body, "1");
    create.answer(201, &answer);
    finished(task).await.1.expect("created");
}

// ---------------------------------------------------------------------------
// The rate limit
// ---------------------------------------------------------------------------

/// When each of `count` requests reached the API server, counted from
/// `t0`; each is answered at once.
async fn arrivals(server: &mut ApiServer, t0: Instant, count: usize) -> Vec<(String, Duration)> {
    let mut seen = Vec::new();
    for _ in 0..count {
        let request = server.next().await;
        seen.push((request.path.clone(), t0.elapsed()));
        let name = request.path.rsplit('/').next().unwrap().to_owned();
        request.answer(200, &serde_json::to_value(pod("default", &name)).unwrap());
    }
    seen
}

fn near(at: Duration, want: Duration) -> bool {
    at >= want && at < want + Duration::from_millis(10)
}

/// qps 1, burst 1: the first request goes at once, the second reaches the
/// API server a second later.
#[tokio::test(start_paused = true)]
async fn requests_wait_for_the_rate_limit() {
    let (api, mut server) = mock_api(1, 1);
    let t0 = Instant::now();
    let task = start(async move {
        pods::get_pod(&api, "default", "a").await?;
        pods::get_pod(&api, "default", "b").await
    });
    let seen = arrivals(&mut server, t0, 2).await;
    finished(task).await.expect("both answered");
    assert!(near(seen[0].1, Duration::ZERO), "{seen:?}");
    assert!(near(seen[1].1, Duration::from_secs(1)), "{seen:?}");
}

/// `with_limits` gives a client on the same connection with a bucket of its
/// own: its requests do not wait for the other's tokens, and its own limit
/// holds.
#[tokio::test(start_paused = true)]
async fn with_limits_has_a_budget_of_its_own() {
    let (api, mut server) = mock_api(1, 1);
    let events = api.with_limits(1, 1);
    let t0 = Instant::now();
    let task = start(async move {
        pods::get_pod(&api, "default", "api-1").await?;
        pods::get_pod(&events, "default", "events-1").await?;
        pods::get_pod(&api, "default", "api-2").await?;
        pods::get_pod(&events, "default", "events-2").await
    });
    let seen = arrivals(&mut server, t0, 4).await;
    finished(task).await.expect("all answered");
    let at = |i: usize| seen[i].1;
    assert!(near(at(0), Duration::ZERO), "{seen:?}");
    assert!(
        near(at(1), Duration::ZERO),
        "the sibling has tokens of its own: {seen:?}"
    );
    assert!(near(at(2), Duration::from_secs(1)), "{seen:?}");
    assert!(
        near(at(3), Duration::from_secs(1)),
        "the sibling's own qps holds: {seen:?}"
    );
}
