//! Events for what users look for in `kubectl describe` (upstream's
//! record.EventRecorder): Pulling/Pulled, Created, Started, Killing,
//! BackOff, Failed, rejected pods, node readiness. Recording never blocks a
//! lifecycle step: events go through a bounded queue (dropped when it is
//! full, as upstream's broadcaster does) to one task that writes them at
//! eventRecordQPS/eventBurst.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_api::ApiClient;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Recorder {
    /// A recorder that only logs (standalone mode).
    pub fn log_only(node: String) -> Self {
        Recorder { tx: None, node }
    }

    /// A recorder whose events `run_event_writer` sends to the API server.
    pub fn with_queue(node: String) -> (Self, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Recorder { tx: Some(tx), node }, rx)
    }

    pub fn event(&self, about: &Involved, kind: &str, reason: &str, message: impl Into<String>) {
        let message = message.into();
        tracing::debug!(object = ?about.0.name, %reason, %message, "event");
        let Some(tx) = &self.tx else {
            return;
        };
        let now = crate::clock::now_time();
        let name = about.0.name.clone().unwrap_or_default();
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let nanos = crate::clock::now_nanos() as u64;
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", nanos + seq)),
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

/// Write queued events to the API server until cancelled.
pub async fn run_event_writer(
    api: ApiClient,
    mut rx: mpsc::Receiver<Event>,
    cancel: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => return,
            e = rx.recv() => match e {
                Some(e) => e,
                None => return,
            },
        };
        if let Err(e) = kubelet_api::pods::create_event(&api, &event).await {
            tracing::debug!(error = %e, "recording an event");
        }
    }
}
