//! kubelet-server: the kubelet API on :10250 (upstream's pkg/kubelet/server).
//! HTTPS only, every request authenticated (x509 client certificates,
//! bearer tokens through TokenReview) and authorized (SubjectAccessReview)
//! before a handler runs. Handlers read the kubelet through [`NodeView`].
//!
//! Wiring (the kubelet): [`tls::server_config`] from the configuration,
//! [`auth::Auth::new`] with an [`auth::KubeReviewer`] over the kubelet's API
//! client, [`routes::Router::new`] with the [`NodeView`], then
//! [`server::serve`] on a [`listener::Listener`] bound to `address:port`, all sharing a
//! [`streaming::Spawner`] (e.g. `Tasks::spawn_with`) and a cancellation token.

#![cfg_attr(test, allow(clippy::too_many_lines, reason = "table-driven tests"))]
pub mod auth;
pub mod listener;
pub mod logs;
pub mod nodelogs;
pub mod response;
pub mod routes;
pub mod server;
pub mod streaming;
pub mod tls;

use std::path::PathBuf;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::Pod;
use kubelet_cri::client::CriClient;

/// The response body of every handler: boxed so that handlers can stream
/// (logs with `follow`) or answer a fixed text alike.
pub type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// A whole-in-memory [`Body`] (a text, JSON, ...).
pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed()
}

/// What the server's handlers read from the running kubelet (implemented by
/// the `kubelet` crate). Cheap calls: no handler holds a kubelet lock.
pub trait NodeView: Send + Sync + 'static {
    /// The node's name (`kubelet_node_name`, stats' `node.nodeName`).
    fn node_name(&self) -> String;
    /// Failing health checks (name, reason), for `/healthz`.
    fn problems(&self) -> Vec<(&'static str, String)>;
    /// Desired pods with the status the status manager holds for them.
    fn pods(&self) -> Vec<Pod>;
    /// The CRI client (logs' container lookup, exec/attach/port-forward, stats).
    fn cri(&self) -> CriClient;
    /// podLogsDir: the only directory container logs are served from.
    fn logs_root(&self) -> PathBuf;
    /// The effective KubeletConfiguration as JSON, for `/configz`.
    fn configz(&self) -> serde_json::Value;
    /// The Prometheus text of `/metrics` (kubelet families + process).
    fn metrics_text(&self) -> String;
    /// The Prometheus text of `/metrics/probes`.
    fn probe_metrics_text(&self) -> String;
    /// `/stats/summary` (stats/v1alpha1 Summary as JSON); with
    /// `only_cpu_and_memory` the node's and pods' CPU, memory and swap only.
    fn summary(
        &self,
        only_cpu_and_memory: bool,
    ) -> BoxFuture<'_, Result<serde_json::Value, BoxError>>;
    /// The Prometheus text of `/metrics/resource`.
    fn resource_metrics_text(&self) -> BoxFuture<'_, String>;
    /// The Prometheus text of `/metrics/cadvisor`.
    fn cadvisor_metrics_text(&self) -> BoxFuture<'_, String>;
}

/// Why the kubelet could not give a handler what it asked for (shown to
/// the client as the answer's text).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
