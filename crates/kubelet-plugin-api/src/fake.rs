//! A device plugin for tests (feature `fake`): it serves the v1beta1
//! DevicePlugin service on a unix socket and registers with a kubelet as a
//! real plugin does. Its stream lists the devices set now and each new
//! list; Allocate answers an environment variable, a read-only mount per
//! device, an annotation and a CDI device per device, and records what it
//! was asked. And a DRA driver's kubelet plugin ([`FakeDraDriver`]).

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::deviceplugin as api;
use crate::deviceplugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::deviceplugin::registration_client::RegistrationClient;

/// A device `id` with `health`, on no NUMA node.
pub fn device(id: &str, health: &str) -> api::Device {
    api::Device {
        id: id.into(),
        health: health.into(),
        topology: None,
    }
}

/// Healthy devices `ids`.
pub fn healthy(ids: &[&str]) -> Vec<api::Device> {
    ids.iter().map(|id| device(id, api::HEALTHY)).collect()
}

/// The fake plugin; clones share it.
#[derive(Clone)]
pub struct FakeDevicePlugin {
    /// The resource it serves (its CDI devices' kind).
    pub resource: String,
    /// The devices its stream lists: a new value is sent again.
    pub devices: watch::Sender<Vec<api::Device>>,
    pub options: api::DevicePluginOptions,
    /// The device IDs of each container Allocate was asked for.
    pub allocations: Arc<Mutex<Vec<Vec<String>>>>,
    /// The device IDs of each PreStartContainer call.
    pub pre_starts: Arc<Mutex<Vec<Vec<String>>>>,
    /// Allocate fails with this, when set.
    pub fail: Arc<Mutex<Option<Status>>>,
    /// What GetPreferredAllocation answers.
    pub preferred: Vec<String>,
    /// Cancelled when the plugin dies: its stream and server end.
    pub gone: CancellationToken,
}

type Stream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

/// A stream of `value` now, then of each new value, until `gone`.
fn watched<T, R>(
    value: &watch::Sender<T>,
    gone: &CancellationToken,
    answer: impl Fn(T) -> R + Send + 'static,
) -> Stream<R>
where
    T: Clone + Send + Sync + 'static,
    R: Send + 'static,
{
    let gone = gone.clone();
    let stream = futures::stream::unfold((value.subscribe(), true), move |(mut rx, first)| {
        let gone = gone.clone();
        async move {
            if !first {
                tokio::select! {
                    _ = gone.cancelled() => return None,
                    changed = rx.changed() => changed.ok()?,
                }
            }
            if gone.is_cancelled() {
                return None;
            }
            let value = rx.borrow_and_update().clone();
            Some((value, (rx, false)))
        }
    })
    .map(move |value| Ok(answer(value)));
    Box::pin(stream)
}

impl FakeDevicePlugin {
    pub fn new(resource: &str, devices: Vec<api::Device>) -> Self {
        FakeDevicePlugin {
            resource: resource.into(),
            devices: watch::Sender::new(devices),
            options: api::DevicePluginOptions::default(),
            allocations: Arc::default(),
            pre_starts: Arc::default(),
            fail: Arc::default(),
            preferred: Vec::new(),
            gone: CancellationToken::new(),
        }
    }

    /// Serve at `<dir>/<name>` until the plugin dies.
    pub fn serve(&self, dir: &Path, name: &str) -> std::io::Result<()> {
        let listener = tokio::net::UnixListener::bind(dir.join(name))?;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(self.clone()))
                .serve_with_incoming_shutdown(
                    UnixListenerStream::new(listener),
                    self.gone.clone().cancelled_owned(),
                ),
        );
        Ok(())
    }

    /// Serve at `<dir>/<name>` and register with the kubelet whose socket
    /// is `<dir>/kubelet.sock`.
    pub async fn start(&self, dir: &Path, name: &str) -> Result<(), Status> {
        self.serve(dir, name)
            .map_err(|e| Status::internal(e.to_string()))?;
        register(dir, api::VERSION, &self.resource, name).await
    }
}

/// Call the kubelet's Register on `<dir>/kubelet.sock`.
pub async fn register(
    dir: &Path,
    version: &str,
    resource: &str,
    endpoint: &str,
) -> Result<(), Status> {
    let channel = crate::unix_channel(dir.join("kubelet.sock"), Duration::from_secs(5));
    RegistrationClient::new(channel)
        .register(api::RegisterRequest {
            version: version.into(),
            endpoint: endpoint.into(),
            resource_name: resource.into(),
            options: None,
        })
        .await
        .map(|_| ())
}

#[tonic::async_trait]
impl DevicePlugin for FakeDevicePlugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<api::DevicePluginOptions>, Status> {
        Ok(Response::new(self.options))
    }

    type ListAndWatchStream = Stream<api::ListAndWatchResponse>;

    async fn list_and_watch(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        // The devices now, then each new list, until the plugin dies.
        let stream = watched(&self.devices, &self.gone, |devices| {
            api::ListAndWatchResponse { devices }
        });
        Ok(Response::new(stream))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<api::PreferredAllocationRequest>,
    ) -> Result<Response<api::PreferredAllocationResponse>, Status> {
        Ok(Response::new(api::PreferredAllocationResponse {
            container_responses: vec![api::ContainerPreferredAllocationResponse {
                device_i_ds: self.preferred.clone(),
            }],
        }))
    }

    async fn allocate(
        &self,
        r: Request<api::AllocateRequest>,
    ) -> Result<Response<api::AllocateResponse>, Status> {
        if let Some(status) = self.fail.lock().clone() {
            return Err(status);
        }
        let mut responses = Vec::new();
        for req in r.into_inner().container_requests {
            self.allocations.lock().push(req.devices_ids.clone());
            responses.push(api::ContainerAllocateResponse {
                envs: HashMap::from([("DEVICES".into(), req.devices_ids.join(","))]),
                mounts: req
                    .devices_ids
                    .iter()
                    .map(|id| api::Mount {
                        container_path: format!("/dev/fake/{id}"),
                        host_path: format!("/tmp/{id}"),
                        read_only: true,
                    })
                    .collect(),
                devices: Vec::new(),
                annotations: HashMap::from([("fake/allocated".into(), "yes".into())]),
                cdi_devices: req
                    .devices_ids
                    .iter()
                    .map(|id| api::CdiDevice {
                        name: format!("{}=CDI-{id}", self.resource),
                    })
                    .collect(),
            });
        }
        Ok(Response::new(api::AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        r: Request<api::PreStartContainerRequest>,
    ) -> Result<Response<api::PreStartContainerResponse>, Status> {
        self.pre_starts.lock().push(r.into_inner().devices_ids);
        Ok(Response::new(api::PreStartContainerResponse {}))
    }
}

/// A DRA driver's kubelet plugin for tests: it serves the dra v1 service
/// on a unix socket and prepares each claim with one device of its pool,
/// for the claim's request `request`, with the CDI device
/// `<driver>/test=claim-<uid>`; it records the claims of each call.
#[derive(Clone)]
pub struct FakeDraDriver {
    pub driver: String,
    /// The claims (their names) of each NodePrepareResources call.
    pub prepared: Arc<Mutex<Vec<Vec<String>>>>,
    /// The claims (their names) of each NodeUnprepareResources call.
    pub unprepared: Arc<Mutex<Vec<Vec<String>>>>,
    /// Each claim's result is this error, when set.
    pub fail: Arc<Mutex<Option<String>>>,
    /// The device health its v1 DRAResourceHealth stream sends: each new
    /// value is sent again.
    pub health: watch::Sender<Vec<crate::dra_health::DeviceHealth>>,
    /// Cancelled when the plugin dies: its server ends.
    pub gone: CancellationToken,
}

impl FakeDraDriver {
    pub fn new(driver: &str) -> Self {
        FakeDraDriver {
            driver: driver.into(),
            prepared: Arc::default(),
            unprepared: Arc::default(),
            fail: Arc::default(),
            health: watch::Sender::new(Vec::new()),
            gone: CancellationToken::new(),
        }
    }

    /// The CDI device it gives the claim `uid`.
    pub fn cdi_device(&self, uid: &str) -> String {
        format!("{}/test=claim-{uid}", self.driver)
    }

    /// Serve at `socket` until the plugin dies.
    pub fn serve(&self, socket: &Path) -> std::io::Result<()> {
        use crate::dra::dra_plugin_server::DraPluginServer;
        use crate::dra_health::dra_resource_health_server::DraResourceHealthServer;
        let listener = tokio::net::UnixListener::bind(socket)?;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DraPluginServer::new(self.clone()))
                .add_service(DraResourceHealthServer::new(self.clone()))
                .serve_with_incoming_shutdown(
                    UnixListenerStream::new(listener),
                    self.gone.clone().cancelled_owned(),
                ),
        );
        Ok(())
    }
}

#[tonic::async_trait]
impl crate::dra::dra_plugin_server::DraPlugin for FakeDraDriver {
    async fn node_prepare_resources(
        &self,
        r: Request<crate::dra::NodePrepareResourcesRequest>,
    ) -> Result<Response<crate::dra::NodePrepareResourcesResponse>, Status> {
        use crate::dra::{Device, NodePrepareResourceResponse};
        let claims = r.into_inner().claims;
        self.prepared
            .lock()
            .push(claims.iter().map(|c| c.name.clone()).collect());
        let fail = self.fail.lock().clone();
        let answers = claims
            .into_iter()
            .map(|c| {
                let answer = match &fail {
                    Some(error) => NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error: error.clone(),
                    },
                    None => NodePrepareResourceResponse {
                        devices: vec![Device {
                            request_names: vec!["request".into()],
                            pool_name: "pool".into(),
                            device_name: "device-00".into(),
                            cdi_device_ids: vec![self.cdi_device(&c.uid)],
                            share_id: None,
                        }],
                        error: String::new(),
                    },
                };
                (c.uid, answer)
            })
            .collect();
        Ok(Response::new(crate::dra::NodePrepareResourcesResponse {
            claims: answers,
        }))
    }

    async fn node_unprepare_resources(
        &self,
        r: Request<crate::dra::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<crate::dra::NodeUnprepareResourcesResponse>, Status> {
        let claims = r.into_inner().claims;
        self.unprepared
            .lock()
            .push(claims.iter().map(|c| c.name.clone()).collect());
        let answers = claims
            .into_iter()
            .map(|c| (c.uid, crate::dra::NodeUnprepareResourceResponse::default()))
            .collect();
        Ok(Response::new(crate::dra::NodeUnprepareResourcesResponse {
            claims: answers,
        }))
    }
}

#[tonic::async_trait]
impl crate::dra_health::dra_resource_health_server::DraResourceHealth for FakeDraDriver {
    type NodeWatchResourcesStream = Stream<crate::dra_health::NodeWatchResourcesResponse>;

    async fn node_watch_resources(
        &self,
        _: Request<crate::dra_health::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let stream = watched(&self.health, &self.gone, |devices| {
            crate::dra_health::NodeWatchResourcesResponse { devices }
        });
        Ok(Response::new(stream))
    }
}
