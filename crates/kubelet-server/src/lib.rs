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

pub mod auth;
pub mod cadvisor;
pub mod cri_metrics;
pub mod listener;
pub mod logs;
pub mod nodelogs;
pub mod process;
pub mod response;
pub mod routes;
pub mod server;
pub mod stats;
pub mod streaming;
pub mod tls;

use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::cgroups::PodCgroups;
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
    /// The root directory (file-system stats of the node).
    fn root_dir(&self) -> PathBuf;
    /// The effective KubeletConfiguration as JSON, for `/configz`.
    fn configz(&self) -> serde_json::Value;
    /// The Prometheus text of `/metrics` (kubelet families + process).
    fn metrics_text(&self) -> String;
    /// The Prometheus text of `/metrics/probes`.
    fn probe_metrics_text(&self) -> String;
    /// Where the pods' cgroups are, for their usage; None (the default):
    /// pods have no cgroups of their own and their usage is the runtime's.
    fn pod_cgroups(&self) -> Option<PodCgroups> {
        None
    }
}
