//! Tests of the fake CRI runtime, driven through real tonic clients over its unix socket.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kubelet_cri::fake::{FakeRuntime, image_id, normalize_image};
use kubelet_cri::v1 as cri;
use kubelet_cri::v1::image_service_client::ImageServiceClient;
use kubelet_cri::v1::runtime_service_client::RuntimeServiceClient;
use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

const BUSYBOX: &str = "docker.io/library/busybox:latest";
const LOG_DIR: &str = "/var/log/pods/default_web_uid-web";

/// A fake runtime in a temp dir plus clients connected to it.
struct Harness {
    fake: FakeRuntime,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    _dir: tempfile::TempDir,
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
        .await
        .unwrap();
    let channel = connect(fake.socket().to_path_buf()).await;
    Harness {
        fake,
        runtime: RuntimeServiceClient::new(channel.clone()),
        images: ImageServiceClient::new(channel),
        _dir: dir,
    }
}

async fn connect(socket: PathBuf) -> Channel {
    Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
        }))
        .await
        .unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn sandbox_config(
    name: &str,
    pod_labels: &[(&str, &str)],
    host_network: bool,
) -> cri::PodSandboxConfig {
    let network = if host_network {
        cri::NamespaceMode::Node
    } else {
        cri::NamespaceMode::Pod
    };
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.to_owned(),
            uid: format!("uid-{name}"),
            namespace: "default".to_owned(),
            attempt: 0,
        }),
        log_directory: format!("/var/log/pods/default_{name}_uid-{name}"),
        labels: labels(pod_labels),
        annotations: labels(&[("note", name)]),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: network as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(
    name: &str,
    image: &str,
    container_labels: &[(&str, &str)],
) -> cri::ContainerConfig {
    cri::ContainerConfig {
        labels: labels(container_labels),
        log_path: format!("{name}/0.log"),
        ..kubelet_cri::fake::container_config(name, image)
    }
}

fn image_spec(image: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: image.to_owned(),
        ..Default::default()
    })
}

impl Harness {
    async fn run_sandbox(
        &mut self,
        config: cri::PodSandboxConfig,
    ) -> Result<String, tonic::Status> {
        let request = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        Ok(self
            .runtime
            .run_pod_sandbox(request)
            .await?
            .into_inner()
            .pod_sandbox_id)
    }

    async fn create(
        &mut self,
        sandbox_id: &str,
        sandbox: &cri::PodSandboxConfig,
        config: cri::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        let request = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            config: Some(config),
            sandbox_config: Some(sandbox.clone()),
        };
        Ok(self
            .runtime
            .create_container(request)
            .await?
            .into_inner()
            .container_id)
    }

    async fn start(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = cri::StartContainerRequest {
            container_id: id.to_owned(),
        };
        self.runtime.start_container(request).await.map(drop)
    }

    async fn container_status(&mut self, id: &str) -> Result<cri::ContainerStatus, tonic::Status> {
        let request = cri::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        };
        Ok(self
            .runtime
            .container_status(request)
            .await?
            .into_inner()
            .status
            .unwrap())
    }

    async fn sandbox_status(&mut self, id: &str) -> Result<cri::PodSandboxStatus, tonic::Status> {
        let request = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: false,
        };
        Ok(self
            .runtime
            .pod_sandbox_status(request)
            .await?
            .into_inner()
            .status
            .unwrap())
    }

    async fn list_sandboxes(&mut self, filter: cri::PodSandboxFilter) -> Vec<String> {
        let request = cri::ListPodSandboxRequest {
            filter: Some(filter),
        };
        let items = self
            .runtime
            .list_pod_sandbox(request)
            .await
            .unwrap()
            .into_inner()
            .items;
        items.into_iter().map(|s| s.id).collect()
    }

    async fn list_containers(&mut self, filter: cri::ContainerFilter) -> Vec<String> {
        let request = cri::ListContainersRequest {
            filter: Some(filter),
        };
        let items = self
            .runtime
            .list_containers(request)
            .await
            .unwrap()
            .into_inner()
            .containers;
        items.into_iter().map(|c| c.id).collect()
    }

    async fn stop_sandbox(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        self.runtime.stop_pod_sandbox(request).await.map(drop)
    }

    async fn remove_sandbox(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        self.runtime.remove_pod_sandbox(request).await.map(drop)
    }

    async fn stop_container(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = cri::StopContainerRequest {
            container_id: id.to_owned(),
            timeout: 30,
        };
        self.runtime.stop_container(request).await.map(drop)
    }

    async fn version(&mut self) -> Result<cri::VersionResponse, tonic::Status> {
        let request = cri::VersionRequest {
            version: "v1".to_owned(),
        };
        Ok(self.runtime.version(request).await?.into_inner())
    }

    async fn image_status(&mut self, image: &str) -> Result<Option<cri::Image>, tonic::Status> {
        let request = cri::ImageStatusRequest {
            image: image_spec(image),
            verbose: false,
        };
        Ok(self.images.image_status(request).await?.into_inner().image)
    }

    async fn pull(&mut self, image: &str) -> Result<String, tonic::Status> {
        let request = cri::PullImageRequest {
            image: image_spec(image),
            ..Default::default()
        };
        Ok(self
            .images
            .pull_image(request)
            .await?
            .into_inner()
            .image_ref)
    }

    /// A ready sandbox "web" with a running container "app"; returns (sandbox, container) ids.
    async fn running_container(&mut self) -> (String, String) {
        self.fake.add_image("busybox");
        let sandbox = sandbox_config("web", &[("app", "web")], false);
        let sandbox_id = self.run_sandbox(sandbox.clone()).await.unwrap();
        let container_id = self
            .create(
                &sandbox_id,
                &sandbox,
                container_config("app", "busybox", &[]),
            )
            .await
            .unwrap();
        self.start(&container_id).await.unwrap();
        (sandbox_id, container_id)
    }
}

fn runtime_condition(status: &cri::StatusResponse, kind: &str) -> cri::RuntimeCondition {
    let conditions = &status.status.as_ref().unwrap().conditions;
    conditions
        .iter()
        .find(|c| c.r#type == kind)
        .unwrap()
        .clone()
}

#[tokio::test]
async fn version_and_status_follow_the_handle() {
    let mut h = harness().await;
    let version = h.version().await.unwrap();
    assert_eq!(version.runtime_name, "fake");
    assert_eq!(version.runtime_api_version, "v1");
    assert_eq!(version.version, "0.1.0");

    let status = h
        .runtime
        .status(cri::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(runtime_condition(&status, "RuntimeReady").status);
    assert!(runtime_condition(&status, "NetworkReady").status);

    h.fake.set_network_ready(false);
    let status = h
        .runtime
        .status(cri::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let network = runtime_condition(&status, "NetworkReady");
    assert!(!network.status);
    assert_eq!(network.reason, "FakeNotReady");
    assert!(runtime_condition(&status, "RuntimeReady").status);

    h.fake.set_runtime_ready(false);
    h.fake.set_network_ready(true);
    let status = h
        .runtime
        .status(cri::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(!runtime_condition(&status, "RuntimeReady").status);
    assert!(runtime_condition(&status, "NetworkReady").status);
    assert_eq!(h.fake.calls("Status"), 3);
}

#[tokio::test]
async fn sandboxes_get_ids_ips_and_filtered_lists() {
    let mut h = harness().await;
    let web = h
        .run_sandbox(sandbox_config("web", &[("app", "web")], false))
        .await
        .unwrap();
    let db = h
        .run_sandbox(sandbox_config("db", &[("app", "db")], false))
        .await
        .unwrap();
    let host = h
        .run_sandbox(sandbox_config(
            "host",
            &[("app", "web"), ("tier", "node")],
            true,
        ))
        .await
        .unwrap();

    for id in [&web, &db, &host] {
        assert_eq!(id.len(), 64, "{id}");
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
    assert!(web != db && db != host && web != host);

    let web_status = h.sandbox_status(&web).await.unwrap();
    assert_eq!(web_status.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(web_status.network.as_ref().unwrap().ip, "10.88.0.2");
    assert_eq!(web_status.metadata.as_ref().unwrap().name, "web");
    assert_eq!(
        web_status.annotations.get("note").map(String::as_str),
        Some("web")
    );
    assert!(web_status.created_at > 0);
    assert_eq!(
        h.sandbox_status(&db).await.unwrap().network.unwrap().ip,
        "10.88.0.3"
    );

    let host_status = h.sandbox_status(&host).await.unwrap();
    assert_eq!(host_status.network.unwrap().ip, "");
    let options = host_status
        .linux
        .unwrap()
        .namespaces
        .unwrap()
        .options
        .unwrap();
    assert_eq!(options.network, cri::NamespaceMode::Node as i32);

    let by_label = |pairs: &[(&str, &str)]| cri::PodSandboxFilter {
        label_selector: labels(pairs),
        ..Default::default()
    };
    assert_eq!(
        h.list_sandboxes(by_label(&[("app", "web")])).await,
        vec![web.clone(), host.clone()]
    );
    assert_eq!(
        h.list_sandboxes(by_label(&[("app", "web"), ("tier", "node")]))
            .await,
        vec![host.clone()]
    );
    assert_eq!(
        h.list_sandboxes(by_label(&[("app", "nope")])).await,
        Vec::<String>::new()
    );
    let by_id = cri::PodSandboxFilter {
        id: db.clone(),
        ..Default::default()
    };
    assert_eq!(h.list_sandboxes(by_id).await, vec![db.clone()]);

    // The same pod name and attempt is reserved while the sandbox exists.
    let err = h
        .run_sandbox(sandbox_config("web", &[], false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    let err = h.sandbox_status("missing").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn container_lifecycle_mirrors_containerd() {
    let mut h = harness().await;
    h.fake.add_image("busybox");
    let sandbox = sandbox_config("web", &[("app", "web")], false);
    let sandbox_id = h.run_sandbox(sandbox.clone()).await.unwrap();

    let err = h
        .create(&sandbox_id, &sandbox, container_config("app", "nginx", &[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(
        err.message().contains("failed to get image"),
        "{}",
        err.message()
    );
    let err = h
        .create("missing", &sandbox, container_config("app", "busybox", &[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    let app = h
        .create(
            &sandbox_id,
            &sandbox,
            container_config("app", "busybox", &[("role", "main")]),
        )
        .await
        .unwrap();
    // Referencing the image by id works too (the kubelet passes the image ref).
    let sidecar = h
        .create(
            &sandbox_id,
            &sandbox,
            container_config("sidecar", &image_id("busybox"), &[("role", "sidecar")]),
        )
        .await
        .unwrap();
    let err = h
        .create(
            &sandbox_id,
            &sandbox,
            container_config("app", "busybox", &[]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);

    let created = h.container_status(&app).await.unwrap();
    assert_eq!(created.state, cri::ContainerState::ContainerCreated as i32);
    assert_eq!(created.log_path, format!("{LOG_DIR}/app/0.log"));
    assert_eq!(created.image_ref, image_id(BUSYBOX));
    assert_eq!(created.image.as_ref().unwrap().image, "busybox");
    assert_eq!(created.reason, "");
    assert_eq!(created.started_at, 0);

    h.start(&app).await.unwrap();
    h.start(&sidecar).await.unwrap();
    let err = h.start(&app).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);

    let running = h.container_status(&app).await.unwrap();
    assert_eq!(running.state, cri::ContainerState::ContainerRunning as i32);
    assert!(running.started_at >= running.created_at);

    let filter = cri::ContainerFilter {
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        pod_sandbox_id: sandbox_id.clone(),
        label_selector: labels(&[("role", "sidecar")]),
        ..Default::default()
    };
    assert_eq!(h.list_containers(filter).await, vec![sidecar.clone()]);
    let in_other_sandbox = cri::ContainerFilter {
        pod_sandbox_id: "other".to_owned(),
        ..Default::default()
    };
    assert!(h.list_containers(in_other_sandbox).await.is_empty());

    h.stop_container(&app).await.unwrap();
    let stopped = h.container_status(&app).await.unwrap();
    assert_eq!(stopped.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(stopped.exit_code, 143);
    assert_eq!(stopped.reason, "Error");
    assert!(stopped.finished_at >= stopped.started_at);
    h.stop_container(&app).await.unwrap();
    assert_eq!(
        h.stop_container("missing").await.unwrap_err().code(),
        Code::NotFound
    );

    // Stopping the sandbox kills what still runs in it.
    h.stop_sandbox(&sandbox_id).await.unwrap();
    let killed = h.container_status(&sidecar).await.unwrap();
    assert_eq!(killed.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(killed.exit_code, 137);
    assert_eq!(h.container_status(&app).await.unwrap().exit_code, 143);
    let status = h.sandbox_status(&sandbox_id).await.unwrap();
    assert_eq!(status.state, cri::PodSandboxState::SandboxNotready as i32);
    assert_eq!(status.network.unwrap().ip, "");
    h.stop_sandbox(&sandbox_id).await.unwrap();
    assert_eq!(
        h.stop_sandbox("missing").await.unwrap_err().code(),
        Code::NotFound
    );
    let not_ready = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue {
            state: cri::PodSandboxState::SandboxNotready as i32,
        }),
        ..Default::default()
    };
    assert_eq!(h.list_sandboxes(not_ready).await, vec![sandbox_id.clone()]);

    // Removal takes the containers along and is idempotent.
    h.remove_sandbox(&sandbox_id).await.unwrap();
    assert!(h.fake.sandboxes().is_empty());
    assert!(h.fake.containers().is_empty());
    h.remove_sandbox(&sandbox_id).await.unwrap();
    assert_eq!(
        h.sandbox_status(&sandbox_id).await.unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        h.container_status(&app).await.unwrap_err().code(),
        Code::NotFound
    );
    let remove = cri::RemoveContainerRequest {
        container_id: app.clone(),
    };
    h.runtime.remove_container(remove).await.unwrap();
}

#[tokio::test]
async fn containers_cannot_start_in_a_stopped_sandbox() {
    let mut h = harness().await;
    h.fake.add_image("busybox");
    let sandbox = sandbox_config("web", &[], false);
    let sandbox_id = h.run_sandbox(sandbox.clone()).await.unwrap();
    let id = h
        .create(
            &sandbox_id,
            &sandbox,
            container_config("app", "busybox", &[]),
        )
        .await
        .unwrap();
    h.stop_sandbox(&sandbox_id).await.unwrap();
    // A created container is left alone by the stop, but cannot start any more.
    assert_eq!(
        h.container_status(&id).await.unwrap().state,
        cri::ContainerState::ContainerCreated as i32
    );
    assert_eq!(
        h.start(&id).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
}

#[tokio::test]
async fn snapshots_reflect_the_state() {
    let mut h = harness().await;
    let (sandbox_id, container_id) = h.running_container().await;
    let sandboxes = h.fake.sandboxes();
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].id, sandbox_id);
    assert_eq!(
        sandboxes[0].labels.get("app").map(String::as_str),
        Some("web")
    );
    let containers = h.fake.containers();
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].id, container_id);
    assert_eq!(containers[0].pod_sandbox_id, sandbox_id);
    assert_eq!(
        containers[0].state,
        cri::ContainerState::ContainerRunning as i32
    );
    assert_eq!(h.fake.calls("RunPodSandbox"), 1);
    assert_eq!(h.fake.calls("CreateContainer"), 1);
    assert_eq!(h.fake.calls("RemovePodSandbox"), 0);
}

#[tokio::test]
async fn injected_errors_fail_only_the_next_calls() {
    let mut h = harness().await;
    h.fake
        .inject_error("RunPodSandbox", Code::ResourceExhausted, 2);
    for _ in 0..2 {
        let err = h
            .run_sandbox(sandbox_config("web", &[], false))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted);
    }
    assert!(h.fake.sandboxes().is_empty());
    h.run_sandbox(sandbox_config("web", &[], false))
        .await
        .unwrap();
    assert_eq!(h.fake.calls("RunPodSandbox"), 3);
    assert_eq!(h.fake.sandboxes().len(), 1);
    // Other methods are unaffected.
    h.version().await.unwrap();

    h.fake.inject_error("Version", Code::Internal, 5);
    h.fake.inject_error("Version", Code::Internal, 0);
    h.version().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn latency_delays_calls_on_the_tokio_clock() {
    let mut h = harness().await;
    h.fake.set_latency("Version", Duration::from_secs(30));

    let started = Instant::now();
    h.version().await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    let timed_out = tokio::time::timeout(Duration::from_secs(1), h.version()).await;
    assert!(timed_out.is_err(), "a 30s call must not finish within 1s");

    // Unaffected methods, and the method once the latency is cleared, answer at once.
    let started = Instant::now();
    h.runtime
        .status(cri::StatusRequest::default())
        .await
        .unwrap();
    h.fake.set_latency("Version", Duration::ZERO);
    h.version().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn exit_container_ends_a_running_container() {
    let mut h = harness().await;
    let (_, id) = h.running_container().await;
    let mut changes = h.fake.changes();

    let exited = |f: &FakeRuntime| {
        f.containers()
            .iter()
            .any(|c| c.id == id && c.state == cri::ContainerState::ContainerExited as i32)
    };
    let fake = &h.fake;
    tokio::join!(
        fake.wait_for("the container to exit", Duration::from_secs(10), exited),
        async {
            tokio::task::yield_now().await;
            assert!(fake.exit_container(&id, 0));
        }
    );
    assert!(changes.has_changed().unwrap());
    changes.mark_unchanged();

    let status = h.container_status(&id).await.unwrap();
    assert_eq!(status.exit_code, 0);
    assert_eq!(status.reason, "Completed");
    assert!(status.finished_at > 0);
    assert!(
        !h.fake.exit_container(&id, 1),
        "an exited container cannot exit again"
    );
    assert!(!h.fake.exit_container("missing", 1));
}

#[tokio::test]
async fn exit_code_other_than_zero_is_an_error() {
    let mut h = harness().await;
    let (_, id) = h.running_container().await;
    assert!(h.fake.exit_container(&id, 3));
    let status = h.container_status(&id).await.unwrap();
    assert_eq!(status.exit_code, 3);
    assert_eq!(status.reason, "Error");
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "waiting for a change that never comes")]
async fn wait_for_panics_after_the_timeout() {
    let h = harness().await;
    h.fake
        .wait_for("a change that never comes", Duration::from_secs(5), |f| {
            !f.sandboxes().is_empty()
        })
        .await;
}

#[tokio::test]
async fn unavailable_runtime_fails_every_rpc() {
    let mut h = harness().await;
    h.fake.add_image("busybox");
    h.fake.set_unavailable(true);
    assert_eq!(h.version().await.unwrap_err().code(), Code::Unavailable);
    assert_eq!(
        h.image_status("busybox").await.unwrap_err().code(),
        Code::Unavailable
    );
    let err = h
        .run_sandbox(sandbox_config("web", &[], false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(h.fake.sandboxes().is_empty());
    assert_eq!(h.fake.calls("Version"), 1);

    h.fake.set_unavailable(false);
    h.version().await.unwrap();
    assert!(h.image_status("busybox").await.unwrap().is_some());
}

#[tokio::test]
async fn images_can_be_inspected_pulled_listed_and_removed() {
    let mut h = harness().await;
    assert_eq!(h.image_status("busybox").await.unwrap(), None);

    h.fake.add_image("busybox");
    let image = h
        .image_status(BUSYBOX)
        .await
        .unwrap()
        .expect("busybox is present");
    assert_eq!(image.id, image_id("busybox"));
    assert_eq!(image.repo_tags, vec![BUSYBOX.to_owned()]);
    assert!(image.size > 0);
    assert_eq!(
        h.image_status(&image.id).await.unwrap(),
        Some(image.clone())
    );

    let err = h.pull("nginx:1.27").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(
        err.message().contains("failed to pull and unpack image"),
        "{}",
        err.message()
    );
    assert_eq!(h.image_status("nginx:1.27").await.unwrap(), None);

    h.fake.make_pullable("nginx:1.27");
    let image_ref = h.pull("docker.io/library/nginx:1.27").await.unwrap();
    assert_eq!(image_ref, image_id("nginx:1.27"));
    assert_eq!(
        h.image_status("nginx:1.27").await.unwrap().unwrap().id,
        image_ref
    );

    let listed = h
        .images
        .list_images(cri::ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut tags: Vec<_> = listed
        .images
        .iter()
        .flat_map(|i| i.repo_tags.clone())
        .collect();
    tags.sort();
    assert_eq!(
        tags,
        vec![
            BUSYBOX.to_owned(),
            "docker.io/library/nginx:1.27".to_owned()
        ]
    );
    let filtered = cri::ListImagesRequest {
        filter: Some(cri::ImageFilter {
            image: image_spec("nginx:1.27"),
        }),
    };
    let listed = h.images.list_images(filtered).await.unwrap().into_inner();
    assert_eq!(listed.images.len(), 1);
    assert_eq!(listed.images[0].id, image_ref);

    for _ in 0..2 {
        let remove = cri::RemoveImageRequest {
            image: image_spec(&image_ref),
        };
        h.images.remove_image(remove).await.unwrap();
    }
    assert_eq!(h.image_status("nginx:1.27").await.unwrap(), None);

    let fs = h
        .images
        .image_fs_info(cri::ImageFsInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fs.image_filesystems.len(), 1);
}

#[tokio::test]
async fn exec_sync_returns_the_configured_result() {
    let mut h = harness().await;
    let (_, id) = h.running_container().await;
    let exec = |id: &str| cri::ExecSyncRequest {
        container_id: id.to_owned(),
        cmd: vec!["true".to_owned()],
        timeout: 1,
    };
    let default = h.runtime.exec_sync(exec(&id)).await.unwrap().into_inner();
    assert_eq!(default, cri::ExecSyncResponse::default());

    h.fake.set_exec_result(1, b"out", b"err");
    let configured = h.runtime.exec_sync(exec(&id)).await.unwrap().into_inner();
    assert_eq!(configured.exit_code, 1);
    assert_eq!(configured.stdout, b"out");
    assert_eq!(configured.stderr, b"err");

    h.fake.exit_container(&id, 0);
    let err = h.runtime.exec_sync(exec(&id)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(
        h.runtime
            .exec_sync(exec("missing"))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
}

#[tokio::test]
async fn unimplemented_rpcs_say_so() {
    let mut h = harness().await;
    let request = cri::ContainerStatsRequest {
        container_id: "x".to_owned(),
    };
    let err = h.runtime.container_stats(request).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    assert_eq!(h.fake.calls("ContainerStats"), 1);
}

#[tokio::test]
async fn socket_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cri.sock");
    let fake = FakeRuntime::start(&socket).await.unwrap();
    assert_eq!(fake.endpoint(), format!("unix://{}", socket.display()));
    assert!(socket.exists());
    let taken = FakeRuntime::start(&socket).await.err();
    assert_eq!(
        taken.map(|e| e.kind()),
        Some(std::io::ErrorKind::AddrInUse),
        "the path is taken"
    );

    let mut client = RuntimeServiceClient::new(connect(socket.clone()).await);
    client
        .version(cri::VersionRequest::default())
        .await
        .unwrap();

    fake.shutdown().await;
    assert!(!socket.exists());
    assert!(
        client
            .version(cri::VersionRequest::default())
            .await
            .is_err()
    );

    // The path can be served again, with fresh state.
    let again = FakeRuntime::start(&socket).await.unwrap();
    assert_eq!(again.calls("Version"), 0);
    drop(again);
    assert!(!socket.exists());
}

#[test]
fn image_names_are_normalized_like_containerd() {
    assert_eq!(normalize_image("busybox"), BUSYBOX);
    assert_eq!(
        normalize_image("busybox:1.36"),
        "docker.io/library/busybox:1.36"
    );
    assert_eq!(normalize_image("library/busybox"), BUSYBOX);
    assert_eq!(normalize_image("index.docker.io/library/busybox"), BUSYBOX);
    assert_eq!(normalize_image("myorg/app"), "docker.io/myorg/app:latest");
    assert_eq!(
        normalize_image("quay.io/coreos/etcd"),
        "quay.io/coreos/etcd:latest"
    );
    assert_eq!(
        normalize_image("localhost:5000/app:v2"),
        "localhost:5000/app:v2"
    );
    assert_eq!(normalize_image("localhost/app"), "localhost/app:latest");
    assert_eq!(
        normalize_image("nginx@sha256:abcd"),
        "docker.io/library/nginx@sha256:abcd"
    );
    assert_eq!(normalize_image(BUSYBOX), BUSYBOX);

    let id = image_id("busybox");
    assert_eq!(id, image_id(BUSYBOX));
    assert_ne!(id, image_id("busybox:1.36"));
    let hex = id.strip_prefix("sha256:").unwrap();
    assert_eq!(hex.len(), 64);
    assert!(
        hex.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
}
