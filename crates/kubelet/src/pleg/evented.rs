//! Evented PLEG (upstream's `pleg/evented.go`, the EventedPLEG gate): read
//! the runtime's container event stream (CRI `GetContainerEvents`) and, when
//! a container stops, have PLEG relist its pod at once rather than at the
//! next periodic relist. The periodic relist goes on at its period, as in
//! upstream 1.37: it stays the source of truth, and checks the stream (a
//! death it finds that the stream never reports is counted as drift).
//!
//! A stream that fails or ends is opened again; after
//! [`MAX_STREAM_RETRIES`] such ends (upstream's eventedPlegMaxStreamRetries)
//! the fast path is given up, with upstream's log line, and the periodic
//! relist alone remains. A runtime without the stream (containerd 1.6
//! answers Unimplemented) reaches that at once.

use std::time::Duration;

use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::types::PodUid;
use kubelet_cri::client::{CriClient, CriError};
use kubelet_cri::v1 as cri;
use tokio_util::sync::CancellationToken;

use super::Pleg;
use crate::clock::Clock;

/// Stream ends after which the fast path is given up.
pub const MAX_STREAM_RETRIES: u32 = 5;

/// Why an event stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamEnd {
    #[error(transparent)]
    Open(#[from] CriError),
    #[error("CRI container event stream: {0}")]
    Broken(#[from] tonic::Status),
    #[error("CRI container event stream closed without an error")]
    Closed,
}

/// The event stream's reader.
pub struct EventedPleg {
    pub cri: CriClient,
    pub pleg: Pleg,
    pub metrics: KubeletMetrics,
    pub clock: Clock,
}

impl EventedPleg {
    /// Read the stream until cancelled or given up.
    pub async fn run(self, cancel: CancellationToken) {
        let mut ends = 0;
        loop {
            let end = tokio::select! {
                _ = cancel.cancelled() => return,
                end = self.watch() => end,
            };
            self.pleg.set_stream_open(false);
            self.metrics.evented_pleg_connection_errors.inc(&[]);
            ends += 1;
            if ends >= MAX_STREAM_RETRIES {
                tracing::error!(error = %end, retries = ends, "Evented PLEG: disabling container-termination fast path after exhausting event stream retries");
                return;
            }
            tracing::debug!(error = %end, "Evented PLEG: failed to get container events, retrying");
        }
    }

    /// Open the stream and handle its events until it ends.
    async fn watch(&self) -> StreamEnd {
        let mut stream = match self.cri.container_events().await {
            Ok(stream) => stream,
            Err(e) => return e.into(),
        };
        self.metrics.evented_pleg_connections.inc(&[]);
        self.pleg.set_stream_open(true);
        loop {
            match stream.message().await {
                Ok(Some(event)) => self.handle(&event),
                Ok(None) => return StreamEnd::Closed,
                Err(status) => return status.into(),
            }
        }
    }

    fn handle(&self, event: &cri::ContainerEventResponse) {
        let Some(uid) = event
            .pod_sandbox_status
            .as_ref()
            .and_then(|s| s.metadata.as_ref())
            .map(|m| PodUid(m.uid.clone()))
        else {
            tracing::error!(
                container_id = event.container_id,
                "Evented PLEG: received ContainerEventResponse with nil PodSandboxStatus or PodSandboxStatus.Metadata"
            );
            return;
        };
        let age = self.clock.now_nanos() - event.created_at;
        self.metrics
            .evented_pleg_connection_latency
            .observe_duration(&[], Duration::from_nanos(u64::try_from(age).unwrap_or(0)));
        let kind = cri::ContainerEventType::try_from(event.container_event_type);
        if matches!(
            kind,
            Ok(cri::ContainerEventType::ContainerStoppedEvent
                | cri::ContainerEventType::ContainerDeletedEvent)
        ) {
            self.pleg.stream_reported(&event.container_id);
        }
        if kind == Ok(cri::ContainerEventType::ContainerStoppedEvent) {
            self.pleg.requests.request(&uid);
            tracing::debug!(pod_uid = %uid, container_id = event.container_id, "Evented PLEG: requested pod relist after container termination");
        }
    }
}
