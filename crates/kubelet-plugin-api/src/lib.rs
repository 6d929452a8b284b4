//! The gRPC APIs the kubelet speaks on the node's unix sockets, generated
//! from `proto/`: plugin registration v1 (what a plugin in
//! `<root-dir>/plugins_registry` serves), the CSI Node service (what a CSI
//! driver serves), PodResources v1 (what the kubelet serves monitoring
//! agents on `<root-dir>/pod-resources/kubelet.sock`) and the device plugin
//! API v1beta1 (the kubelet's registration service on
//! `<root-dir>/device-plugins/kubelet.sock`, and what each device plugin
//! serves); a channel to a unix socket, shared with the CRI client; and
//! the connections of the kubelet's own unix-socket servers, made to take
//! the `:authority` grpc-go clients send there ([`uds`]).

#[cfg(feature = "fake")]
pub mod fake;
pub mod uds;

use std::path::PathBuf;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// k8s.io/kubelet pkg/apis/pluginregistration/v1.
#[allow(clippy::all, clippy::pedantic)]
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");

    /// The plugin types (its constants.go).
    pub const CSI_PLUGIN: &str = "CSIPlugin";
    pub const DEVICE_PLUGIN: &str = "DevicePlugin";
    pub const DRA_PLUGIN: &str = "DRAPlugin";
}

/// csi.v1, the Node service.
#[allow(clippy::all, clippy::pedantic)]
pub mod csi {
    tonic::include_proto!("csi.v1");
}

/// k8s.io/kubelet pkg/apis/podresources/v1.
#[allow(clippy::all, clippy::pedantic)]
pub mod podresources {
    tonic::include_proto!("v1");
}

/// k8s.io/kubelet pkg/apis/deviceplugin/v1beta1.
#[allow(clippy::all, clippy::pedantic)]
pub mod deviceplugin {
    tonic::include_proto!("v1beta1");

    /// The API version the kubelet speaks (its constants.go).
    pub const VERSION: &str = "v1beta1";
    /// A device's health as a plugin reports it.
    pub const HEALTHY: &str = "Healthy";
    pub const UNHEALTHY: &str = "Unhealthy";
}

/// A gRPC status as Go's client prints it (`rpc error: code = X desc = Y`):
/// how upstream's messages quote a plugin's errors.
pub fn status_text(s: &tonic::Status) -> String {
    format!("rpc error: code = {:?} desc = {}", s.code(), s.message())
}

/// A channel to the unix socket `path`, connected on first use (and again
/// after the peer restarts); `connect_timeout` bounds each connection.
pub fn unix_channel(path: PathBuf, connect_timeout: Duration) -> Channel {
    // The authority is never used: the connector ignores the URI.
    Endpoint::from_static("http://[::]:50051")
        .connect_timeout(connect_timeout)
        .connect_with_connector_lazy(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
}
