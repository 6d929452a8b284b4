//! The PodResources API v1 (upstream's pkg/kubelet/apis/podresources), on
//! `<root-dir>/pod-resources/kubelet.sock`: what monitoring agents (DCGM
//! exporter, node feature discovery) ask the kubelet about the node's
//! resources and the pods holding them. `List` gives every active pod with
//! its restartable init containers and its containers, `Get` one pod by
//! name, `GetAllocatableResources` what the node can allocate: the device
//! plugins' devices each container holds, and the healthy ones; the
//! exclusive CPUs of the static CPU manager (`cpu_ids`) and the CPUs it
//! gives from; the Static memory manager's blocks (`memory`: each kind's
//! size and NUMA nodes) and each node's allocatable memory; the DRA claims
//! each container uses (`dynamic_resources`: per claim, each prepared
//! device with its driver, pool and CDI devices; each device with its own
//! CDI devices, where upstream's lists those of the driver's devices before
//! it too). One token bucket for every call,
//! 100 a second and 10 at once, as upstream's; a call beyond it is refused with
//! ResourceExhausted `rejected by rate limit`. v1alpha1, deprecated, is not
//! served.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_api::ratelimit::{Bucket, token_bucket};
use kubelet_core::dra::state::ClaimInfoState;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::podspec::is_sidecar;
use kubelet_core::types::PodUid;
use kubelet_plugin_api::podresources as api;
use kubelet_plugin_api::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::cpumanager::CpuManager;
use crate::devicemanager::{DeviceInstance, DeviceManager};
use crate::dra::DraManager;
use crate::memorymanager::MemoryManager;

/// The directory under the root directory, and the socket in it.
pub const DIR: &str = "pod-resources";
pub const SOCKET: &str = "kubelet.sock";
/// Upstream's DefaultQPS and DefaultBurstTokens.
const QPS: NonZeroU32 = NonZeroU32::new(100).unwrap();
const BURST: u32 = 10;
/// The `server_api_version` label.
const V1: &str = "v1";

/// The kubelet's pods, as the server reads them.
pub trait PodsProvider: Send + Sync + 'static {
    /// The pods admitted and not done (upstream's GetActivePods).
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// The pod `namespace/name` the kubelet knows.
    fn pod_by_name(&self, namespace: &str, name: &str) -> Option<Arc<Pod>>;
}

/// The v1 service.
pub struct PodResourcesServer {
    pods: Arc<dyn PodsProvider>,
    managers: Managers,
    bucket: Bucket,
    metrics: KubeletMetrics,
}

impl PodResourcesServer {
    pub fn new(pods: Arc<dyn PodsProvider>, managers: Managers, metrics: KubeletMetrics) -> Self {
        PodResourcesServer {
            pods,
            managers,
            bucket: token_bucket(QPS, BURST),
            metrics,
        }
    }

    /// A token, or upstream's refusal.
    fn admit(&self) -> Result<(), Status> {
        self.bucket
            .check()
            .map_err(|_| Status::resource_exhausted("rejected by rate limit"))
    }
}

/// The devices as the API lists them.
fn api_devices(devices: Vec<DeviceInstance>) -> Vec<api::ContainerDevices> {
    devices
        .into_iter()
        .map(|d| api::ContainerDevices {
            resource_name: d.resource,
            device_ids: vec![d.id],
            topology: d.numa_node.map(|id| api::TopologyInfo {
                nodes: vec![api::NumaNode { id }],
            }),
        })
        .collect()
}

/// The memory blocks as the API lists them.
fn api_memory(blocks: Vec<kubelet_core::memorymanager::Block>) -> Vec<api::ContainerMemory> {
    blocks
        .into_iter()
        .map(|b| api::ContainerMemory {
            memory_type: b.kind,
            size: b.size,
            topology: Some(api::TopologyInfo {
                nodes: b
                    .numa_affinity
                    .into_iter()
                    .map(|id| api::NumaNode { id: i64::from(id) })
                    .collect(),
            }),
        })
        .collect()
}

/// The resource managers whose allocations the API lists.
pub struct Managers {
    pub devices: DeviceManager,
    pub cpus: CpuManager,
    pub memory: MemoryManager,
    pub dra: DraManager,
}

/// A pod's resources: its restartable init containers then its containers,
/// each with the devices, exclusive CPUs and memory blocks it holds
/// (upstream's order and fields).
pub fn pod_resources(pod: &Pod, managers: &Managers) -> api::PodResources {
    let Managers {
        devices,
        cpus,
        memory,
        dra,
    } = managers;
    let uid = PodUid::of(pod);
    let spec = pod.spec.as_ref();
    let sidecars = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| is_sidecar(c));
    let containers = spec.into_iter().flat_map(|s| s.containers.iter());
    api::PodResources {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        containers: sidecars
            .chain(containers)
            .map(|c| api::ContainerResources {
                name: c.name.clone(),
                devices: api_devices(devices.container_devices(&uid, &c.name)),
                cpu_ids: cpus.exclusive(uid.as_str(), &c.name),
                memory: api_memory(memory.memory(uid.as_str(), &c.name)),
                dynamic_resources: api_claims(dra.container_claims(pod, c)),
            })
            .collect(),
        cpu_ids: Vec::new(),
        memory: Vec::new(),
    }
}

/// The claims a container uses, as the API lists them.
fn api_claims(claims: Vec<ClaimInfoState>) -> Vec<api::DynamicResource> {
    claims
        .into_iter()
        .map(|claim| api::DynamicResource {
            claim_resources: claim
                .driver_state
                .iter()
                .flat_map(|(driver, state)| {
                    state.devices.iter().map(|d| api::ClaimResource {
                        cdi_devices: d
                            .cdi_device_ids
                            .iter()
                            .map(|name| api::CdiDevice { name: name.clone() })
                            .collect(),
                        driver_name: driver.clone(),
                        pool_name: d.pool_name.clone(),
                        device_name: d.device_name.clone(),
                        share_id: d.share_id.clone(),
                    })
                })
                .collect(),
            claim_name: claim.claim_name,
            claim_namespace: claim.namespace,
        })
        .collect()
}

#[tonic::async_trait]
impl PodResourcesLister for PodResourcesServer {
    async fn list(
        &self,
        _: Request<api::ListPodResourcesRequest>,
    ) -> Result<Response<api::ListPodResourcesResponse>, Status> {
        self.admit()?;
        self.metrics.pod_resources_requests_total.inc(&[V1]);
        self.metrics.pod_resources_requests_list.inc(&[V1]);
        let pod_resources = self
            .pods
            .active_pods()
            .iter()
            .map(|p| pod_resources(p, &self.managers))
            .collect();
        Ok(Response::new(api::ListPodResourcesResponse {
            pod_resources,
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<api::AllocatableResourcesRequest>,
    ) -> Result<Response<api::AllocatableResourcesResponse>, Status> {
        self.admit()?;
        self.metrics.pod_resources_requests_total.inc(&[V1]);
        self.metrics
            .pod_resources_requests_get_allocatable
            .inc(&[V1]);
        Ok(Response::new(api::AllocatableResourcesResponse {
            devices: api_devices(self.managers.devices.allocatable_devices()),
            cpu_ids: self.managers.cpus.allocatable(),
            memory: api_memory(self.managers.memory.allocatable()),
        }))
    }

    async fn get(
        &self,
        request: Request<api::GetPodResourcesRequest>,
    ) -> Result<Response<api::GetPodResourcesResponse>, Status> {
        self.admit()?;
        self.metrics.pod_resources_requests_total.inc(&[V1]);
        self.metrics.pod_resources_requests_get.inc(&[V1]);
        let req = request.into_inner();
        let Some(pod) = self.pods.pod_by_name(&req.pod_namespace, &req.pod_name) else {
            self.metrics.pod_resources_errors_get.inc(&[V1]);
            // A Go error from the handler: gRPC's Unknown with its text.
            return Err(Status::unknown(format!(
                "pod {} in namespace {} not found",
                req.pod_name, req.pod_namespace
            )));
        };
        Ok(Response::new(api::GetPodResourcesResponse {
            pod_resources: Some(pod_resources(&pod, &self.managers)),
        }))
    }
}

/// Listen on `<root_dir>/pod-resources/kubelet.sock` (the directory made
/// 0750 and a stale socket removed, as upstream's CreateListener).
pub fn listen(root_dir: &Path) -> std::io::Result<(PathBuf, UnixListener)> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = root_dir.join(DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(&dir)?;
    let socket = dir.join(SOCKET);
    match std::fs::remove_file(&socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok((socket.clone(), UnixListener::bind(&socket)?))
}

/// Serve the API on `listener` until `token` is cancelled.
pub async fn serve(listener: UnixListener, server: PodResourcesServer, token: CancellationToken) {
    let served = tonic::transport::Server::builder()
        .add_service(PodResourcesListerServer::new(server))
        .serve_with_incoming_shutdown(
            kubelet_plugin_api::uds::incoming(listener),
            token.cancelled(),
        )
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "Failed to serve");
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    use super::*;

    fn container(name: &str, restart: Option<&str>) -> Container {
        Container {
            name: name.into(),
            restart_policy: restart.map(Into::into),
            ..Default::default()
        }
    }

    /// Restartable init containers then containers; an init container that
    /// runs to completion is not listed; nothing is allocated.
    #[test]
    fn a_pods_resources_list_its_sidecars_then_its_containers() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![
                    container("setup", None),
                    container("proxy", Some("Always")),
                ]),
                containers: vec![container("app", None), container("log", None)],
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("default".into());
        let root = tempfile::tempdir().unwrap();
        let devices =
            DeviceManager::new(root.path(), KubeletMetrics::new("n"), Arc::default(), None);
        let cpus = CpuManager::new(
            Default::default(),
            Default::default(),
            root.path(),
            KubeletMetrics::new("n"),
        );
        let memory = MemoryManager::new(
            Default::default(),
            Vec::new(),
            root.path(),
            KubeletMetrics::new("n"),
        );
        let r = pod_resources(
            &pod,
            &Managers {
                devices,
                cpus,
                memory,
                dra: DraManager::new(root.path(), None, "n", KubeletMetrics::new("n"), None),
            },
        );
        assert_eq!((r.name.as_str(), r.namespace.as_str()), ("web", "default"));
        let names: Vec<&str> = r.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["proxy", "app", "log"]);
        assert!(r.containers.iter().all(|c| c.devices.is_empty()
            && c.cpu_ids.is_empty()
            && c.memory.is_empty()
            && c.dynamic_resources.is_empty()));
    }
}
