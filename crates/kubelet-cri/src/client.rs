//! The kubelet's CRI v1 client: runtime and image services over a unix
//! socket, one deadline per call (runtimeRequestTimeout), typed errors that
//! say whether a retry can help.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::v1 as cri;
use crate::v1::image_service_client::ImageServiceClient;
use crate::v1::runtime_service_client::RuntimeServiceClient;
use kubelet_core::runtime::{RuntimeFeatures, RuntimeHandler};
use tonic::transport::Channel;
use tracing::Instrument;

/// The CRI API version this client speaks.
pub const CRI_API_VERSION: &str = "v1";

/// A failed CRI call: which operation, the gRPC code and the runtime's message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("CRI {op}: {code:?}: {message}")]
pub struct CriError {
    pub op: &'static str,
    pub code: tonic::Code,
    pub message: String,
}

impl CriError {
    fn new(op: &'static str, code: tonic::Code, message: impl Into<String>) -> Self {
        CriError {
            op,
            code,
            message: message.into(),
        }
    }

    /// The runtime does not have the call (an older CRI).
    pub fn is_unimplemented(&self) -> bool {
        self.code == tonic::Code::Unimplemented
    }

    /// The object is gone: for stop and remove this counts as done.
    pub fn is_not_found(&self) -> bool {
        self.code == tonic::Code::NotFound
    }

    /// The error as upstream's Go CRI client renders it (`rpc error: code = Unknown desc =
    /// ...`), which upstream's events quote.
    pub fn grpc_text(&self) -> String {
        let code = match self.code {
            tonic::Code::Ok => "OK".to_owned(),
            tonic::Code::Cancelled => "Canceled".to_owned(),
            other => format!("{other:?}"),
        };
        format!("rpc error: code = {code} desc = {}", self.message)
    }

    /// A later attempt may succeed (runtime down, slow or busy, or not in
    /// the state the call needs yet: containerd 2 refuses to remove a
    /// container whose exit it is still handling with FailedPrecondition,
    /// `cannot delete running task`).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.code,
            tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::ResourceExhausted
                | tonic::Code::Aborted
                | tonic::Code::Unknown
                | tonic::Code::FailedPrecondition
        )
    }
}

/// What the runtime's `Status()` says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConditions {
    pub runtime_ready: bool,
    pub network_ready: bool,
    /// `reason: message` of each condition that is not true.
    pub problems: Vec<String>,
    /// The handlers it lists (none from a runtime older than CRI v1.30's
    /// field, such as containerd 1.6).
    pub handlers: Vec<RuntimeHandler>,
    /// Its features, when it says.
    pub features: Option<RuntimeFeatures>,
}

/// The runtime's name and version, from `Version()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeVersion {
    pub runtime_name: String,
    pub runtime_version: String,
    pub runtime_api_version: String,
}

/// Sees every CRI call the client makes (upstream's instrumentedRuntimeService
/// and instrumentedImageManagerService): the RPC name (`"ListPodSandbox"`), how
/// long it took and its error, if any. Used for `kubelet_runtime_operations_*`.
pub trait CallObserver: Send + Sync + std::fmt::Debug {
    fn observe(&self, op: &'static str, elapsed: Duration, error: Option<&CriError>);
}

/// Typed CRI client. Cheap to clone: clones share one HTTP/2 connection.
#[derive(Clone, Debug)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    timeout: Duration,
    observer: Option<Arc<dyn CallObserver>>,
}

/// Turn `unix:///run/x.sock` (or a bare absolute path) into a socket path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(CriError::new(
            "connect",
            tonic::Code::InvalidArgument,
            format!("container runtime endpoint {endpoint:?} is not a unix socket (unix:///path)"),
        ))
    }
}

/// A channel to the unix socket of `endpoint`, connected on first use and
/// again after the peer restarts.
fn lazy_channel(endpoint: &str, timeout: Duration) -> Result<Channel, CriError> {
    Ok(kubelet_plugin_api::unix_channel(
        socket_path(endpoint)?,
        timeout,
    ))
}

impl CriClient {
    /// A client that connects on first use and reconnects after the runtime
    /// restarts; `timeout` bounds every call (runtimeRequestTimeout).
    pub fn connect_lazy(endpoint: &str, timeout: Duration) -> Result<Self, CriError> {
        CriClient::connect_lazy_split(endpoint, endpoint, timeout)
    }

    /// As [`CriClient::connect_lazy`], with the ImageService on an endpoint
    /// of its own (upstream's imageServiceEndpoint): image calls go to
    /// `image_endpoint`, the RuntimeService's to `runtime_endpoint`. The same
    /// endpoint twice shares one connection.
    pub fn connect_lazy_split(
        runtime_endpoint: &str,
        image_endpoint: &str,
        timeout: Duration,
    ) -> Result<Self, CriError> {
        let runtime = lazy_channel(runtime_endpoint, timeout)?;
        let images = if image_endpoint == runtime_endpoint {
            runtime.clone()
        } else {
            lazy_channel(image_endpoint, timeout)?
        };
        Ok(CriClient {
            runtime: RuntimeServiceClient::new(runtime),
            images: ImageServiceClient::new(images),
            timeout,
            observer: None,
        })
    }

    /// This client (and its clones) reports every call to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The one way every RPC goes out: deadline, typed error, observer.
    async fn call<T>(
        &self,
        op: &'static str,
        deadline: Duration,
        fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CriError> {
        let started = Instant::now();
        // One span per CRI call (free unless a subscriber wants debug spans).
        let call = tokio::time::timeout(deadline, fut).instrument(tracing::debug_span!("cri", op));
        let result = match call.await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(CriError::new(op, status.code(), status.message())),
            Err(_) => Err(CriError::new(
                op,
                tonic::Code::DeadlineExceeded,
                format!("no answer within {deadline:?}"),
            )),
        };
        if let Some(observer) = &self.observer {
            observer.observe(op, started.elapsed(), result.as_ref().err());
        }
        result
    }

    /// [`call`](Self::call) for a request that creates runtime state (a
    /// sandbox, a container, a container's task): it runs to the runtime's
    /// answer even when the caller stops waiting, as a pod worker's step does
    /// when its pod is deleted. containerd leaks a task whose creation was
    /// cancelled half-way: the container reads Exited (StartError) and
    /// RemoveContainer fails with `cannot delete running task` for as long as
    /// containerd runs (containerd/containerd#11037).
    async fn call_to_end<T: Send + 'static>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>> + Send + 'static,
    ) -> Result<T, CriError> {
        let this = self.clone();
        kubelet_tasks::run_to_end(Box::pin(
            async move { this.call(op, this.timeout, fut).await },
        ))
        .await
        .unwrap_or_else(|e| {
            Err(CriError::new(
                op,
                tonic::Code::Aborted,
                format!("the call did not run to its end: {e}"),
            ))
        })
    }

    /// `Version()`, refusing a runtime that does not speak CRI v1.
    pub async fn version(&self) -> Result<RuntimeVersion, CriError> {
        let mut c = self.runtime.clone();
        let v = self
            .call(
                "Version",
                self.timeout,
                c.version(cri::VersionRequest {
                    version: CRI_API_VERSION.into(),
                }),
            )
            .await?;
        if v.runtime_api_version != CRI_API_VERSION {
            return Err(CriError::new(
                "Version",
                tonic::Code::FailedPrecondition,
                format!(
                    "runtime {} speaks CRI {:?}, rkubelet needs {CRI_API_VERSION}",
                    v.runtime_name, v.runtime_api_version
                ),
            ));
        }
        Ok(RuntimeVersion {
            runtime_name: v.runtime_name,
            runtime_version: v.runtime_version,
            runtime_api_version: v.runtime_api_version,
        })
    }

    /// `Status()`: runtime and network readiness.
    /// The runtime's verbose status information (containerd: `config`,
    /// `golang`, ... as JSON texts).
    pub async fn status_info(&self) -> Result<std::collections::HashMap<String, String>, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "Status",
                self.timeout,
                c.status(cri::StatusRequest { verbose: true }),
            )
            .await?;
        Ok(resp.info)
    }

    /// UpdateRuntimeConfig with the node's pod CIDR(s) (comma-separated),
    /// for the runtime's network configuration.
    pub async fn update_pod_cidr(&self, pod_cidr: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let request = cri::UpdateRuntimeConfigRequest {
            runtime_config: Some(cri::RuntimeConfig {
                network_config: Some(cri::NetworkConfig {
                    pod_cidr: pod_cidr.to_owned(),
                }),
            }),
        };
        self.call(
            "UpdateRuntimeConfig",
            self.timeout,
            c.update_runtime_config(request),
        )
        .await?;
        Ok(())
    }

    pub async fn status(&self) -> Result<RuntimeConditions, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "Status",
                self.timeout,
                c.status(cri::StatusRequest { verbose: false }),
            )
            .await?;
        let conditions = resp.status.map(|s| s.conditions).unwrap_or_default();
        let mut out = RuntimeConditions {
            runtime_ready: false,
            network_ready: false,
            problems: Vec::new(),
            handlers: resp
                .runtime_handlers
                .into_iter()
                .map(|h| {
                    let f = h.features.unwrap_or_default();
                    RuntimeHandler {
                        name: h.name,
                        recursive_read_only_mounts: f.recursive_read_only_mounts,
                        user_namespaces: f.user_namespaces,
                    }
                })
                .collect(),
            features: resp.features.map(|f| RuntimeFeatures {
                supplemental_groups_policy: f.supplemental_groups_policy,
            }),
        };
        for cond in &conditions {
            match cond.r#type.as_str() {
                "RuntimeReady" => out.runtime_ready = cond.status,
                "NetworkReady" => out.network_ready = cond.status,
                _ => continue,
            }
            if !cond.status {
                out.problems.push(format!(
                    "{}=false reason:{} message:{}",
                    cond.r#type, cond.reason, cond.message
                ));
            }
        }
        for (ty, seen) in [
            ("RuntimeReady", out.runtime_ready),
            ("NetworkReady", out.network_ready),
        ] {
            if !seen && !conditions.iter().any(|c| c.r#type == ty) {
                out.problems.push(format!("{ty} condition missing"));
            }
        }
        Ok(out)
    }

    /// The sandbox image the runtime is configured with (containerd's
    /// verbose Status gives its config), which image garbage collection
    /// never removes; None when the runtime does not say.
    pub async fn sandbox_image(&self) -> Result<Option<String>, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "Status",
                self.timeout,
                c.status(cri::StatusRequest { verbose: true }),
            )
            .await?;
        let config = resp.info.get("config").map(String::as_str).unwrap_or("");
        Ok(serde_json::from_str::<serde_json::Value>(config)
            .ok()
            .and_then(|v| v["sandboxImage"].as_str().map(str::to_owned)))
    }

    /// Run a sandbox with the runtime handler of the pod's RuntimeClass
    /// (empty: the runtime's default).
    pub async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: String,
    ) -> Result<String, CriError> {
        let mut c = self.runtime.clone();
        let request = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler,
        };
        let resp = self
            .call_to_end(
                "RunPodSandbox",
                async move { c.run_pod_sandbox(request).await },
            )
            .await?;
        Ok(resp.pod_sandbox_id)
    }

    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "StopPodSandbox",
            self.timeout,
            c.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            }),
        )
        .await
        .map(drop)
    }

    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "RemovePodSandbox",
            self.timeout,
            c.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            }),
        )
        .await
        .map(drop)
    }

    pub async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "PodSandboxStatus",
                self.timeout,
                c.pod_sandbox_status(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: id.into(),
                    verbose: false,
                }),
            )
            .await?;
        resp.status
            .ok_or_else(|| CriError::new("PodSandboxStatus", tonic::Code::Internal, "empty status"))
    }

    pub async fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "ListPodSandbox",
                self.timeout,
                c.list_pod_sandbox(cri::ListPodSandboxRequest { filter }),
            )
            .await?;
        Ok(resp.items)
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let mut c = self.runtime.clone();
        let request = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let resp = self
            .call_to_end("CreateContainer", async move {
                c.create_container(request).await
            })
            .await?;
        Ok(resp.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let request = cri::StartContainerRequest {
            container_id: id.into(),
        };
        self.call_to_end(
            "StartContainer",
            async move { c.start_container(request).await },
        )
        .await
        .map(drop)
    }

    /// Stop with `grace_secs` before SIGKILL; the call may take that long,
    /// so its deadline is the grace period plus runtimeRequestTimeout.
    pub async fn stop_container(&self, id: &str, grace_secs: i64) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let grace = Duration::from_secs(grace_secs.max(0) as u64);
        self.call(
            "StopContainer",
            self.timeout + grace,
            c.stop_container(cri::StopContainerRequest {
                container_id: id.into(),
                timeout: grace_secs.max(0),
            }),
        )
        .await
        .map(drop)
    }

    /// UpdateContainerResources: a running container's Linux resources
    /// (an in-place resize).
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: cri::LinuxContainerResources,
    ) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "UpdateContainerResources",
            self.timeout,
            c.update_container_resources(cri::UpdateContainerResourcesRequest {
                container_id: id.into(),
                linux: Some(linux),
                ..Default::default()
            }),
        )
        .await
        .map(drop)
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "RemoveContainer",
            self.timeout,
            c.remove_container(cri::RemoveContainerRequest {
                container_id: id.into(),
            }),
        )
        .await
        .map(drop)
    }

    /// Ask the runtime to open the container's log file anew (after the
    /// kubelet renamed it away to rotate it).
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "ReopenContainerLog",
            self.timeout,
            c.reopen_container_log(cri::ReopenContainerLogRequest {
                container_id: id.into(),
            }),
        )
        .await
        .map(drop)
    }

    pub async fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "ListContainers",
                self.timeout,
                c.list_containers(cri::ListContainersRequest { filter }),
            )
            .await?;
        Ok(resp.containers)
    }

    pub async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "ContainerStatus",
                self.timeout,
                c.container_status(cri::ContainerStatusRequest {
                    container_id: id.into(),
                    verbose: false,
                }),
            )
            .await?;
        resp.status
            .ok_or_else(|| CriError::new("ContainerStatus", tonic::Code::Internal, "empty status"))
    }

    /// The image if the runtime has it locally.
    pub async fn image_status(&self, image: &str) -> Result<Option<cri::Image>, CriError> {
        let mut c = self.images.clone();
        let resp = self
            .call(
                "ImageStatus",
                self.timeout,
                c.image_status(cri::ImageStatusRequest {
                    image: Some(image_spec(image)),
                    verbose: false,
                }),
            )
            .await?;
        Ok(resp.image)
    }

    /// Every image the runtime holds (for node status).
    pub async fn list_images(&self) -> Result<Vec<cri::Image>, CriError> {
        let mut c = self.images.clone();
        let resp = self
            .call(
                "ListImages",
                self.timeout,
                c.list_images(cri::ListImagesRequest { filter: None }),
            )
            .await?;
        Ok(resp.images)
    }

    /// Pull an image, returning its reference. Pulls are slow by nature:
    /// the deadline is ten times runtimeRequestTimeout.
    /// Remove the image with this ID (NotFound: already gone).
    pub async fn remove_image(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.images.clone();
        self.call(
            "RemoveImage",
            self.timeout,
            c.remove_image(cri::RemoveImageRequest {
                image: Some(image_spec(id)),
            }),
        )
        .await?;
        Ok(())
    }

    /// Pull `image`, with the registry's credentials when given.
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<cri::AuthConfig>,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        let mut c = self.images.clone();
        let resp = self
            .call(
                "PullImage",
                self.timeout * 10,
                c.pull_image(cri::PullImageRequest {
                    image: Some(image_spec(image)),
                    auth,
                    sandbox_config,
                }),
            )
            .await?;
        Ok(resp.image_ref)
    }
}

impl CriClient {
    /// Run `cmd` in a container and wait for it (probes and hooks). The
    /// runtime enforces `timeout`; the call's own deadline adds
    /// runtimeRequestTimeout so a slow runtime still answers.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<cri::ExecSyncResponse, CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "ExecSync",
            self.timeout + timeout,
            c.exec_sync(cri::ExecSyncRequest {
                container_id: id.into(),
                cmd,
                timeout: timeout.as_secs().max(1) as i64,
            }),
        )
        .await
    }

    /// The runtime's streaming URL for an exec session.
    pub async fn exec(&self, req: cri::ExecRequest) -> Result<String, CriError> {
        let mut c = self.runtime.clone();
        Ok(self.call("Exec", self.timeout, c.exec(req)).await?.url)
    }

    /// The runtime's streaming URL for an attach session.
    pub async fn attach(&self, req: cri::AttachRequest) -> Result<String, CriError> {
        let mut c = self.runtime.clone();
        Ok(self.call("Attach", self.timeout, c.attach(req)).await?.url)
    }

    /// The runtime's streaming URL for port forwarding into a sandbox.
    pub async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String, CriError> {
        let mut c = self.runtime.clone();
        Ok(self
            .call("PortForward", self.timeout, c.port_forward(req))
            .await?
            .url)
    }

    /// CPU, memory and writable-layer usage of every container matching `filter`.
    pub async fn list_container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> Result<Vec<cri::ContainerStats>, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "ListContainerStats",
                self.timeout,
                c.list_container_stats(cri::ListContainerStatsRequest { filter }),
            )
            .await?;
        Ok(resp.stats)
    }

    /// CPU, memory, network and process usage of every pod sandbox, with its
    /// containers' stats (what upstream's PodAndContainerStatsFromCRI reads).
    pub async fn list_pod_sandbox_stats(&self) -> Result<Vec<cri::PodSandboxStats>, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "ListPodSandboxStats",
                self.timeout,
                c.list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest { filter: None }),
            )
            .await?;
        Ok(resp.stats)
    }

    /// The metrics the runtime reports for pods and containers: names, help
    /// and label keys.
    pub async fn list_metric_descriptors(&self) -> Result<Vec<cri::MetricDescriptor>, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "ListMetricDescriptors",
                self.timeout,
                c.list_metric_descriptors(cri::ListMetricDescriptorsRequest {}),
            )
            .await?;
        Ok(resp.descriptors)
    }

    /// Every pod sandbox's metrics and its containers', as
    /// [`CriClient::list_metric_descriptors`] describes them.
    pub async fn list_pod_sandbox_metrics(&self) -> Result<Vec<cri::PodSandboxMetrics>, CriError> {
        let mut c = self.runtime.clone();
        let resp = self
            .call(
                "ListPodSandboxMetrics",
                self.timeout,
                c.list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {}),
            )
            .await?;
        Ok(resp.pod_metrics)
    }

    /// `GetContainerEvents()`: the runtime's stream of container events
    /// (created, started, stopped, deleted). Open until the runtime ends it:
    /// no deadline, as a watch has none; gRPC sends the stream's headers
    /// with its first event, so this returns once one comes.
    pub async fn container_events(
        &self,
    ) -> Result<tonic::Streaming<cri::ContainerEventResponse>, CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "GetContainerEvents",
            Duration::MAX,
            c.get_container_events(cri::GetEventsRequest {}),
        )
        .await
    }

    /// Usage of the image file system(s).
    pub async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse, CriError> {
        let mut c = self.images.clone();
        self.call(
            "ImageFsInfo",
            self.timeout,
            c.image_fs_info(cri::ImageFsInfoRequest {}),
        )
        .await
    }

    /// Where the runtime's (first) image file system is mounted, if it
    /// says.
    pub async fn image_fs_mountpoint(&self) -> Result<Option<String>, CriError> {
        Ok(self
            .image_fs_info()
            .await?
            .image_filesystems
            .into_iter()
            .next()
            .and_then(|f| f.fs_id)
            .map(|id| id.mountpoint))
    }
}

fn image_spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.into(),
        user_specified_image: image.into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let cases = [
            (
                "unix:///run/containerd/containerd.sock",
                Some("/run/containerd/containerd.sock"),
            ),
            ("/tmp/x.sock", Some("/tmp/x.sock")),
            ("tcp://127.0.0.1:1234", None),
            ("unix://relative.sock", None),
        ];
        for (endpoint, want) in cases {
            let got = socket_path(endpoint).ok();
            assert_eq!(got.as_deref(), want.map(std::path::Path::new), "{endpoint}");
        }
    }

    /// imageServiceEndpoint: image calls reach the image endpoint's
    /// runtime only, runtime calls the runtime endpoint's only.
    #[tokio::test]
    async fn split_endpoints() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = crate::fake::FakeRuntime::start(&dir.path().join("runtime.sock"))
            .await
            .unwrap();
        let images = crate::fake::FakeRuntime::start(&dir.path().join("images.sock"))
            .await
            .unwrap();
        images.make_pullable("example.com/app:1");
        let cri = CriClient::connect_lazy_split(
            &runtime.endpoint(),
            &images.endpoint(),
            Duration::from_secs(5),
        )
        .unwrap();
        cri.pull_image("example.com/app:1", None, None)
            .await
            .unwrap();
        cri.image_fs_info().await.unwrap();
        cri.list_pod_sandbox(None).await.unwrap();
        let calls = |fake: &crate::fake::FakeRuntime| {
            ["PullImage", "ImageFsInfo", "ListPodSandbox"].map(|m| fake.calls(m))
        };
        assert_eq!(calls(&images), [1, 1, 0]);
        assert_eq!(calls(&runtime), [0, 0, 1]);
        assert!(
            cri.image_status("example.com/app:1")
                .await
                .unwrap()
                .is_some()
        );
    }

    /// The calls that create runtime state reach the runtime's answer when
    /// their caller stops waiting: a pod deleted while its container starts
    /// leaves no task half-created (containerd/containerd#11037).
    #[tokio::test(start_paused = true)]
    async fn creating_calls_run_to_their_end_when_the_caller_stops_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fake = crate::fake::FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        fake.add_image("busybox");
        let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(60)).unwrap();
        let sandbox_config = crate::fake::sandbox_config("web", "uid-web");
        let container_config = crate::fake::container_config("app", "busybox");
        let slow = Duration::from_secs(5);
        let gives_up = Duration::from_secs(1);
        for method in ["RunPodSandbox", "CreateContainer", "StartContainer"] {
            fake.set_latency(method, slow);
        }
        let interrupted = tokio::time::timeout(
            gives_up,
            cri.run_pod_sandbox(sandbox_config.clone(), String::new()),
        )
        .await;
        assert!(interrupted.is_err());
        fake.wait_for("the sandbox", slow, |f| f.sandboxes().len() == 1)
            .await;
        let sandbox = fake.sandboxes()[0].id.clone();
        let interrupted = tokio::time::timeout(
            gives_up,
            cri.create_container(&sandbox, container_config, sandbox_config),
        )
        .await;
        assert!(interrupted.is_err());
        fake.wait_for("the container", slow, |f| f.containers().len() == 1)
            .await;
        let container = fake.containers()[0].id.clone();
        let interrupted = tokio::time::timeout(gives_up, cri.start_container(&container)).await;
        assert!(interrupted.is_err());
        fake.wait_for("the container running", slow, |f| {
            f.containers()[0].state == cri::ContainerState::ContainerRunning as i32
        })
        .await;
    }

    #[test]
    fn error_classes() {
        let nf = CriError::new("RemoveContainer", tonic::Code::NotFound, "gone");
        assert!(nf.is_not_found() && !nf.is_retryable());
        let down = CriError::new("Status", tonic::Code::Unavailable, "connection refused");
        assert!(down.is_retryable() && !down.is_not_found());
        assert_eq!(
            down.to_string(),
            "CRI Status: Unavailable: connection refused"
        );
    }
}
