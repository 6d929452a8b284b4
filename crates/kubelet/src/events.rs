//! Events for what users look for in `kubectl describe` (upstream's
//! record.EventRecorder): Pulling/Pulled, Created, Started, Killing,
//! BackOff, Failed, rejected pods, node readiness. Recording never blocks a
//! lifecycle step: events go through a bounded queue (dropped when it is
//! full, as upstream's broadcaster does) to one task that writes them at
//! eventRecordQPS/eventBurst, through upstream's event correlator
//! ([`kubelet_core::events`]): a repeat patches the existing Event's count.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_api::ApiClient;
use kubelet_core::events::{Correlated, EventCorrelator};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;

pub const NORMAL: &str = "Normal";
pub const WARNING: &str = "Warning";
const QUEUE: usize = 1000;

/// The object an event is about.
#[derive(Clone, Debug)]
pub struct Involved(ObjectReference);

impl Involved {
    /// A pod, or one of its containers (`spec.containers{name}`).
    pub fn pod(pod: &Pod, container: Option<&str>) -> Self {
        Self::pod_ref(
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.uid.as_deref().unwrap_or(""),
            container,
        )
    }

    /// A pod known by namespace, name and UID (one the runtime holds).
    pub fn pod_ref(namespace: &str, name: &str, uid: &str, container: Option<&str>) -> Self {
        Involved(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some(uid.into()),
            field_path: container.map(|c| format!("spec.containers{{{c}}}")),
            ..Default::default()
        })
    }

    /// A PersistentVolumeClaim.
    pub fn claim(namespace: &str, name: &str, uid: &str) -> Self {
        Involved(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some(uid.into()),
            ..Default::default()
        })
    }

    pub fn node(name: &str, uid: Option<String>) -> Self {
        Involved(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.into()),
            uid,
            ..Default::default()
        })
    }
}

/// A cheap handle the lifecycle code records events through.
#[derive(Clone, Debug)]
pub struct Recorder {
    tx: Option<mpsc::Sender<Event>>,
    node: String,
    clock: Clock,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Recorder {
    /// A recorder that only logs (standalone mode).
    pub fn log_only(node: String) -> Self {
        Recorder {
            tx: None,
            node,
            clock: Clock::System,
        }
    }

    /// A recorder whose events `run_event_writer` sends to the API server.
    pub fn with_queue(node: String, clock: Clock) -> (Self, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (
            Recorder {
                tx: Some(tx),
                node,
                clock,
            },
            rx,
        )
    }

    /// The node the events come from.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    pub fn event(&self, about: &Involved, kind: &str, reason: &str, message: impl Into<String>) {
        self.annotated_event(about, BTreeMap::new(), kind, reason, message);
    }

    /// An event with annotations on it (upstream's AnnotatedEventf).
    pub fn annotated_event(
        &self,
        about: &Involved,
        annotations: BTreeMap<String, String>,
        kind: &str,
        reason: &str,
        message: impl Into<String>,
    ) {
        let message = message.into();
        tracing::debug!(object = ?about.0.name, %reason, %message, "event");
        let Some(tx) = &self.tx else {
            return;
        };
        let now = self.clock.now_time();
        let name = about.0.name.clone().unwrap_or_default();
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let nanos = self.clock.now_nanos() as u64;
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", nanos + seq)),
                annotations: (!annotations.is_empty()).then_some(annotations),
                namespace: Some(
                    about
                        .0
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                ),
                ..Default::default()
            },
            involved_object: about.0.clone(),
            reason: Some(reason.into()),
            message: Some(message),
            type_: Some(kind.into()),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some(self.node.clone()),
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        };
        if tx.try_send(event).is_err() {
            tracing::debug!(%reason, "event queue full: event dropped");
        }
    }
}

/// Write queued events to the API server until cancelled, through upstream's event
/// correlator: a repeated event patches the first one's count, similar ones are combined,
/// and an object gets no more than its spam budget.
pub async fn run_event_writer(
    api: ApiClient,
    mut rx: mpsc::Receiver<Event>,
    clock: Clock,
    cancel: CancellationToken,
) {
    let mut correlator = EventCorrelator::default();
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => return,
            e = rx.recv() => match e {
                Some(e) => e,
                None => return,
            },
        };
        let written = match correlator.correlate(event, clock.now_nanos()) {
            Correlated::Skip => {
                tracing::debug!("event dropped by the spam filter");
                continue;
            }
            Correlated::Create(event) => kubelet_api::pods::create_event(&api, &event).await,
            Correlated::Patch { event, patch } => patch_or_create(&api, event, &patch).await,
        };
        match written {
            Ok(written) => correlator.update_state(&written),
            Err(e) => tracing::debug!(error = %e, "recording an event"),
        }
    }
}

/// Patches the event seen before; creates it when it is gone (upstream's recordEvent).
async fn patch_or_create(
    api: &ApiClient,
    mut event: Event,
    patch: &serde_json::Value,
) -> Result<Event, kubelet_api::ApiError> {
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    let name = event.metadata.name.as_deref().unwrap_or("");
    match kubelet_api::pods::patch_event(api, namespace, name, patch).await {
        Err(e) if e.is_not_found() => {
            event.metadata.resource_version = None;
            kubelet_api::pods::create_event(api, &event).await
        }
        patched => patched,
    }
}

#[cfg(test)]
mod tests {
    use http::{Method, Request, Response};
    use kube::client::Body;

    use super::*;

    /// The same failure recorded four times: one Event created, then patched with count 2,
    /// 3 (created again as it was deleted meanwhile), 4.
    #[tokio::test]
    async fn a_repeated_failure_is_one_event_with_a_count() {
        let (mock, mut api_server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api = ApiClient::new(kube::Client::new(mock, "default"), 0, 1);
        let (recorder, rx) = Recorder::with_queue("node1".into(), Clock::System);
        let cancel = CancellationToken::new();
        let writer = tokio::spawn(run_event_writer(api, rx, Clock::System, cancel.clone()));
        let about = Involved::pod_ref("default", "web", "uid-1", Some("c"));
        for _ in 0..4 {
            recorder.event(&about, WARNING, "Failed", "Error: no such key");
        }

        let mut name = String::new();
        // (method, count in the request, what the API server answers)
        let exchanges = [
            (Method::POST, 1, 201),
            (Method::PATCH, 2, 200),
            (Method::PATCH, 3, 404),
            // Deleted meanwhile: created again, under its name, with its count.
            (Method::POST, 3, 201),
            (Method::PATCH, 4, 200),
        ];
        for (i, (method, count, answer)) in exchanges.into_iter().enumerate() {
            let (request, respond) = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                api_server.next_request(),
            )
            .await
            .expect("a request in time")
            .expect("the client is there");
            assert_eq!(request.method(), method, "request {i}");
            let path = request.uri().path().to_owned();
            let body: serde_json::Value =
                serde_json::from_slice(&request.into_body().collect_bytes().await.unwrap())
                    .unwrap();
            assert_eq!(body["count"], count, "request {i}: {body}");
            if method == Method::POST {
                assert_eq!(path, "/api/v1/namespaces/default/events", "request {i}");
                assert_eq!(body["message"], "Error: no such key");
                assert_eq!(body["involvedObject"]["fieldPath"], "spec.containers{c}");
                if name.is_empty() {
                    name = body["metadata"]["name"].as_str().unwrap().to_owned();
                } else {
                    assert_eq!(
                        body["metadata"]["name"],
                        name.as_str(),
                        "recreated under its name"
                    );
                }
            } else {
                assert_eq!(path, format!("/api/v1/namespaces/default/events/{name}"));
                assert_eq!(body["message"], "Error: no such key");
                assert!(body["lastTimestamp"].is_string(), "{body}");
            }
            let response = if answer == 404 {
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": "not found"})
            } else {
                let mut event = body.clone();
                if method == Method::PATCH {
                    event = serde_json::json!({"metadata": {"name": name, "namespace": "default"},
                        "involvedObject": {"name": "web"}, "count": count});
                }
                event["metadata"]["resourceVersion"] = serde_json::json!(format!("{i}"));
                event
            };
            respond.send_response(
                Response::builder()
                    .status(answer)
                    .body(Body::from(serde_json::to_vec(&response).unwrap()))
                    .unwrap(),
            );
        }
        cancel.cancel();
        writer.await.unwrap();
    }
}
