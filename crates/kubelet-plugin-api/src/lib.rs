//! The gRPC APIs the kubelet speaks on the node's unix sockets, generated
//! from `proto/`: plugin registration v1 (what a plugin in
//! `<root-dir>/plugins_registry` serves), the CSI Node service (what a CSI
//! driver serves), PodResources v1 (what the kubelet serves monitoring
//! agents on `<root-dir>/pod-resources/kubelet.sock`) and the device plugin
//! API v1beta1 (the kubelet's registration service on
//! `<root-dir>/device-plugins/kubelet.sock`, and what each device plugin
//! serves), and the DRA plugin API (v1, and v1beta1 on the same messages:
//! what a DRA driver registered in `plugins_registry` serves); a channel to a unix socket, shared with the CRI client; and
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

/// k8s.io/kubelet pkg/apis/dra/v1: what a DRA driver's kubelet plugin
/// serves, and a client of it in the version the driver offers.
#[allow(clippy::all, clippy::pedantic)]
pub mod dra {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// k8s.io/kubelet pkg/apis/dra-health/v1: the device health a DRA driver
/// may stream to the kubelet.
#[allow(clippy::all, clippy::pedantic)]
pub mod dra_health {
    include!(concat!(env!("OUT_DIR"), "/dra_health/v1.rs"));
}

/// The DRAResourceHealth services the kubelet speaks, the current first
/// (their types.go); v1alpha1's messages are v1's.
pub const DRA_HEALTH_SERVICES: [&str; 2] = ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"];

/// A driver's device health stream (NodeWatchResources) in `service`, one
/// of [`DRA_HEALTH_SERVICES`].
pub async fn watch_dra_health(
    channel: Channel,
    service: &str,
) -> Result<tonic::Streaming<dra_health::NodeWatchResourcesResponse>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
    let path = http::uri::PathAndQuery::try_from(format!("/{service}/NodeWatchResources"))
        .map_err(|e| tonic::Status::internal(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<
        dra_health::NodeWatchResourcesRequest,
        dra_health::NodeWatchResourcesResponse,
    >::default();
    let request = tonic::Request::new(dra_health::NodeWatchResourcesRequest {});
    Ok(grpc
        .server_streaming(request, path, codec)
        .await?
        .into_inner())
}

/// The DRA plugin services the kubelet speaks, the current first (their
/// types.go): a driver lists those it serves among its supported versions.
pub const DRA_SERVICES: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// A client of a driver's DRAPlugin service in one version. v1beta1's
/// messages are v1's without `Device.share_id` (field 5, which such a
/// driver never sends), so v1's types go on the chosen version's path:
/// upstream converts between two sets of types to the same effect.
#[derive(Clone, Debug)]
pub struct DraClient {
    grpc: tonic::client::Grpc<Channel>,
    /// The gRPC service's full name in that version.
    service: &'static str,
}

impl DraClient {
    /// A client for `service` (one of [`DRA_SERVICES`]); None for another.
    pub fn new(channel: Channel, service: &str) -> Option<DraClient> {
        let service = match service {
            "v1.DRAPlugin" => "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
            "v1beta1.DRAPlugin" => "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
            _ => return None,
        };
        Some(DraClient {
            grpc: tonic::client::Grpc::new(channel),
            service,
        })
    }

    /// A method's full gRPC name in the chosen version
    /// (`/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources`).
    pub fn path(&self, method: &str) -> String {
        format!("/{}/{method}", self.service)
    }

    async fn unary<Req, Resp>(
        &mut self,
        method: &'static str,
        request: tonic::Request<Req>,
    ) -> Result<tonic::Response<Resp>, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.grpc
            .ready()
            .await
            .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
        let path = http::uri::PathAndQuery::try_from(self.path(method))
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        self.grpc.unary(request, path, codec).await
    }

    pub async fn node_prepare_resources(
        &mut self,
        request: tonic::Request<dra::NodePrepareResourcesRequest>,
    ) -> Result<tonic::Response<dra::NodePrepareResourcesResponse>, tonic::Status> {
        self.unary("NodePrepareResources", request).await
    }

    pub async fn node_unprepare_resources(
        &mut self,
        request: tonic::Request<dra::NodeUnprepareResourcesRequest>,
    ) -> Result<tonic::Response<dra::NodeUnprepareResourcesResponse>, tonic::Status> {
        self.unary("NodeUnprepareResources", request).await
    }
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
