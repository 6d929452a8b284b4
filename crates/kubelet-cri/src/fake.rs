//! An in-memory fake container runtime serving the real CRI v1 gRPC API
//! (RuntimeService and ImageService) on a unix socket, for the kubelet's tests.
//!
//! The fake follows containerd's CRI semantics where the kubelet can observe
//! them (ids, states, exit codes, idempotent stop/remove, NotFound errors,
//! name reservation, image-reference normalization) and keeps all state in
//! memory. A [`FakeRuntime`] handle controls it from a test: readiness,
//! images, injected errors and latency, container exits, and snapshots of the
//! state to assert on.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::v1 as cri;
use crate::v1::image_service_server::{ImageService, ImageServiceServer};
use crate::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Code, Request, Response, Status};

const RUNTIME_NAME: &str = "fake";
const RUNTIME_VERSION: &str = "0.1.0";
const RUNTIME_API_VERSION: &str = "v1";
/// Reason of a runtime condition that was set to false through the handle.
const NOT_READY_REASON: &str = "FakeNotReady";
/// Exit code of a process killed by SIGKILL (128 + 9).
const EXIT_CODE_KILLED: i32 = 137;
/// Exit code of a process terminated by SIGTERM (128 + 15).
const EXIT_CODE_TERMINATED: i32 = 143;
/// Size reported for every image.
const IMAGE_SIZE: u64 = 4 << 20;
const IMAGE_FS_MOUNTPOINT: &str = "/var/lib/fake-cri/images";
/// Events a GetContainerEvents stream holds for a slow reader before the
/// fake drops it (containerd's subscriber buffer is 1000 too).
const EVENT_BUFFER: usize = 1000;
/// How long [`FakeRuntime::shutdown`] waits for connections to drain.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

type RpcResult<T> = Result<Response<T>, Status>;
type EventSender = mpsc::Sender<Result<cri::ContainerEventResponse, Status>>;

/// Usage numbers the fake reports for one container (see
/// [`FakeRuntime::set_container_stats`]); CPU, memory and the writable layer
/// share one sample time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeContainerStats {
    /// When the numbers were sampled, nanoseconds since the epoch (0: at each call).
    pub timestamp: i64,
    /// Cumulative CPU time, core-nanoseconds.
    pub usage_core_nano_seconds: u64,
    pub working_set_bytes: u64,
    pub usage_bytes: u64,
    pub rss_bytes: u64,
    /// Writable layer usage.
    pub writable_layer_bytes: u64,
    pub writable_layer_inodes: u64,
}

/// Handle to a running fake CRI runtime. Dropping it stops the server too;
/// [`FakeRuntime::shutdown`] additionally waits for it to finish.
pub struct FakeRuntime {
    backend: Arc<Backend>,
    socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl FakeRuntime {
    /// Serve on this unix socket path (the file must not exist yet). Returns once listening.
    pub async fn start(socket: &Path) -> io::Result<FakeRuntime> {
        FakeRuntime::start_with_clock(socket, Arc::new(system_nanos)).await
    }

    /// The fake with its timestamps (created, started, finished, stats) read
    /// from `clock` (nanoseconds since the epoch): a test that pauses time
    /// gives it the clock it gives the kubelet.
    pub async fn start_with_clock(socket: &Path, clock: FakeClock) -> io::Result<FakeRuntime> {
        let listener = UnixListener::bind(socket)?;
        let backend = Arc::new(Backend::new(clock));
        let (stop, stopped) = oneshot::channel::<()>();
        let serve = tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::from_arc(backend.clone()))
            .add_service(ImageServiceServer::from_arc(backend.clone()))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                // A dropped sender (handle dropped) also means "stop".
                let _ = stopped.await;
            });
        let path = socket.to_path_buf();
        let server = tokio::spawn(async move {
            if let Err(err) = serve.await {
                tracing::warn!(socket = %path.display(), %err, "fake CRI server failed");
            }
        });
        Ok(FakeRuntime {
            backend,
            socket: socket.to_path_buf(),
            stop: Some(stop),
            server: Some(server),
        })
    }

    /// The unix socket the fake listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// "unix://<socket>" for the kubelet's containerRuntimeEndpoint.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Set the RuntimeReady condition reported by Status.
    pub fn set_runtime_ready(&self, ready: bool) {
        self.backend.update(|s| s.runtime_ready = ready);
    }

    /// Set the NetworkReady condition reported by Status.
    pub fn set_network_ready(&self, ready: bool) {
        self.backend.update(|s| s.network_ready = ready);
    }

    /// The pod CIDR the kubelet last gave with UpdateRuntimeConfig.
    pub fn pod_cidr(&self) -> String {
        self.backend.state.lock().pod_cidr.clone()
    }

    /// While true every RPC fails with Unavailable (as when containerd is stopped).
    pub fn set_unavailable(&self, down: bool) {
        self.backend.update(|s| s.unavailable = down);
    }

    /// Make the image present locally. Names are normalized like containerd
    /// does ("busybox" is "docker.io/library/busybox:latest").
    pub fn add_image(&self, name: &str) {
        self.backend
            .update(|s| s.images.insert(normalize_image(name)));
    }

    /// Make PullImage succeed for this image (name normalized as in [`FakeRuntime::add_image`]).
    pub fn make_pullable(&self, name: &str) {
        self.backend
            .update(|s| s.pullable.insert(normalize_image(name)));
    }

    /// The next `times` calls of `method` (the RPC name, e.g. "CreateContainer") fail with `code`.
    pub fn inject_error(&self, method: &str, code: Code, times: u32) {
        self.backend.update(|s| {
            if times == 0 {
                s.injected.remove(method);
            } else {
                s.injected.insert(method.to_owned(), (code, times));
            }
        });
    }

    /// Every call of `method` sleeps this long first (tokio::time::sleep, so paused clocks apply).
    /// A zero delay removes the latency.
    pub fn set_latency(&self, method: &str, delay: Duration) {
        self.backend.update(|s| {
            if delay.is_zero() {
                s.latency.remove(method);
            } else {
                s.latency.insert(method.to_owned(), delay);
            }
        });
    }

    /// What ExecSync returns for every running container (default: exit code 0, no output).
    pub fn set_exec_result(&self, exit_code: i32, stdout: &[u8], stderr: &[u8]) {
        let result = cri::ExecSyncResponse {
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
            exit_code,
        };
        self.backend.update(|s| s.exec_result = result);
    }

    /// What ExecSync returns for containers named `container` (the CRI
    /// metadata name, i.e. the pod spec's container name), overriding
    /// [`FakeRuntime::set_exec_result`] for them.
    pub fn set_exec_result_for(
        &self,
        container: &str,
        exit_code: i32,
        stdout: &[u8],
        stderr: &[u8],
    ) {
        let result = cri::ExecSyncResponse {
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
            exit_code,
        };
        self.backend.update(|s| {
            s.exec_results.insert(container.to_owned(), result);
        });
    }

    /// ExecSync in containers named `container` takes this long (paused
    /// clocks apply); beyond the request's timeout it fails with
    /// DeadlineExceeded, as a runtime does. A zero delay removes it.
    pub fn set_exec_latency_for(&self, container: &str, delay: Duration) {
        self.backend.update(|s| {
            if delay.is_zero() {
                s.exec_latency.remove(container);
            } else {
                s.exec_latency.insert(container.to_owned(), delay);
            }
        });
    }

    /// The commands ExecSync ran, in order, with the container's name.
    pub fn exec_commands(&self) -> Vec<(String, Vec<String>)> {
        self.backend.state.lock().exec_log.clone()
    }

    /// Make a running container exit now with this code (as if its process ended). Returns false if not running.
    pub fn exit_container(&self, container_id: &str, exit_code: i32) -> bool {
        self.backend.update(|s| {
            let now = (s.clock)();
            let exited = s
                .containers
                .get_mut(container_id)
                .is_some_and(|c| c.exit(exit_code, now));
            if exited {
                s.emit(container_id, cri::ContainerEventType::ContainerStoppedEvent);
            }
            exited
        })
    }

    /// While true, container events are lost instead of sent on the
    /// GetContainerEvents streams (a runtime whose event stream drops some).
    pub fn pause_container_events(&self, paused: bool) {
        self.backend.update(|s| s.events_paused = paused);
    }

    /// What ListContainerStats reports for this container
    /// from now on (a container without any reports zeros sampled at the call).
    pub fn set_container_stats(&self, container_id: &str, stats: FakeContainerStats) {
        self.backend.update(|s| {
            s.container_stats.insert(container_id.to_owned(), stats);
        });
    }

    /// Snapshot of the sandboxes, in creation order.
    pub fn sandboxes(&self) -> Vec<cri::PodSandbox> {
        let state = self.backend.state.lock();
        select(&state.sandboxes, &Selector::default())
            .map(SandboxRecord::summary)
            .collect()
    }

    /// Snapshot of the containers, in creation order.
    pub fn containers(&self) -> Vec<cri::Container> {
        let state = self.backend.state.lock();
        select(&state.containers, &Selector::default())
            .map(ContainerRecord::summary)
            .collect()
    }

    /// The config a container was created with (None for an unknown ID).
    pub fn container_config(&self, container_id: &str) -> Option<cri::ContainerConfig> {
        let state = self.backend.state.lock();
        state.containers.get(container_id).map(|c| c.config.clone())
    }

    /// The config a sandbox was created with (None for an unknown ID).
    pub fn sandbox_config(&self, sandbox_id: &str) -> Option<cri::PodSandboxConfig> {
        let state = self.backend.state.lock();
        state.sandboxes.get(sandbox_id).map(|s| s.config.clone())
    }

    /// How many times `method` (the RPC name) was called, failed calls included.
    pub fn calls(&self, method: &str) -> u64 {
        self.backend
            .state
            .lock()
            .calls
            .get(method)
            .copied()
            .unwrap_or(0)
    }

    /// A receiver bumped on every state change (sandbox/container created, started, stopped,
    /// removed, exit_container, images, settings) and on every RPC call.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.backend.changes.subscribe()
    }

    /// Await until `pred(self)` is true, re-checking on every change; panics with `what` after
    /// `timeout` (real or paused time).
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&FakeRuntime) -> bool,
    ) {
        // Subscribe before the first check so no change can slip in between.
        let mut changes = self.changes();
        let condition = async {
            while !pred(self) {
                // The sender lives in `self`, so this cannot fail while we borrow it.
                let _ = changes.changed().await;
            }
        };
        if tokio::time::timeout(timeout, condition).await.is_err() {
            panic!("fake CRI runtime: timed out after {timeout:?} waiting for {what}");
        }
    }

    /// Stop serving and remove the socket file.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut server) = self.server.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
                .await
                .is_err()
        {
            server.abort();
        }
        // Drop removes the socket file.
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Normalize an image reference like containerd (docker reference rules):
/// default the registry to docker.io, official images to `library/`, and the
/// tag to `latest` unless a tag or digest is given.
/// A sandbox config with only its metadata (pod `name`, `uid`, namespace
/// `default`): what a test needs to run a sandbox.
pub fn sandbox_config(name: &str, uid: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    }
}

/// A container config with only its name and image.
pub fn container_config(name: &str, image: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn normalize_image(name: &str) -> String {
    let (domain, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => (first, rest),
        _ => ("docker.io", name),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let library = if domain == "docker.io" && !path.contains('/') {
        "library/"
    } else {
        ""
    };
    let last = path.rsplit('/').next().unwrap_or(path);
    let tag = if last.contains([':', '@']) {
        ""
    } else {
        ":latest"
    };
    format!("{domain}/{library}{path}{tag}")
}

/// The image id the fake assigns to an image: "sha256:" and 64 hex digits, a
/// deterministic digest of the normalized name.
pub fn image_id(name: &str) -> String {
    let name = normalize_image(name);
    let mut id = String::from("sha256:");
    for lane in 0..4u64 {
        // FNV-1a with a per-lane offset, then a splitmix64 finalizer to spread bits.
        let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ lane.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for byte in name.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        hash ^= hash >> 31;
        let _ = write!(id, "{hash:016x}");
    }
    id
}

/// The wall clock the fake stamps times with, in nanoseconds since the epoch.
pub type FakeClock = Arc<dyn Fn() -> i64 + Send + Sync>;

fn system_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn not_found(kind: &str, id: &str) -> Status {
    Status::not_found(format!(
        "an error occurred when try to find {kind} {id:?}: not found"
    ))
}

fn is_host_network(config: &cri::PodSandboxConfig) -> bool {
    namespace_options(config).is_some_and(|ns| ns.network == cri::NamespaceMode::Node as i32)
}

fn namespace_options(config: &cri::PodSandboxConfig) -> Option<&cri::NamespaceOption> {
    config
        .linux
        .as_ref()?
        .security_context
        .as_ref()?
        .namespace_options
        .as_ref()
}

/// A runtime condition for Status.
fn condition(kind: &str, ready: bool) -> cri::RuntimeCondition {
    let (reason, message) = if ready {
        (String::new(), String::new())
    } else {
        (
            NOT_READY_REASON.to_owned(),
            format!("{kind} is set to false by the test"),
        )
    };
    cri::RuntimeCondition {
        r#type: kind.to_owned(),
        status: ready,
        reason,
        message,
    }
}

/// The CRI image message for a (normalized) image name.
fn image_message(name: &str) -> cri::Image {
    cri::Image {
        id: image_id(name),
        repo_tags: vec![name.to_owned()],
        size: IMAGE_SIZE,
        ..Default::default()
    }
}

/// The shared core: state behind a std mutex (never held across an await)
/// and the change counter. Serves both CRI services.
struct Backend {
    state: Mutex<State>,
    changes: watch::Sender<u64>,
}

impl Backend {
    fn new(clock: FakeClock) -> Self {
        Backend {
            state: Mutex::new(State::new(clock)),
            changes: watch::Sender::new(0),
        }
    }

    fn notify(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Mutate the state, then tell the watchers.
    fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let result = f(&mut self.state.lock());
        self.notify();
        result
    }

    /// Per-call prologue: count the call, fail if the runtime is down, apply
    /// the latency, then consume an injected error if one is pending.
    async fn admit(&self, method: &str) -> Result<(), Status> {
        let delay = self.update(|s| {
            *s.calls.entry(method.to_owned()).or_default() += 1;
            if s.unavailable {
                return Err(Status::unavailable("fake CRI runtime is unavailable"));
            }
            Ok(s.latency.get(method).copied())
        })?;
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        match self.state.lock().take_injected_error(method) {
            Some(status) => Err(status),
            None => Ok(()),
        }
    }

    /// Run one RPC: the prologue, then `op` on the locked state.
    async fn call<T>(
        &self,
        method: &str,
        op: impl FnOnce(&mut State) -> Result<T, Status> + Send,
    ) -> RpcResult<T> {
        self.admit(method).await?;
        self.update(op).map(Response::new)
    }

    /// An RPC the fake does not implement (after the prologue, so faults still apply).
    async fn unimplemented<T>(&self, method: &str) -> RpcResult<T> {
        self.call(method, |_| {
            Err(Status::unimplemented(format!(
                "{method} is not implemented by the fake CRI runtime"
            )))
        })
        .await
    }
}

/// Everything the fake runtime knows.
struct State {
    runtime_ready: bool,
    network_ready: bool,
    unavailable: bool,
    sandboxes: HashMap<String, SandboxRecord>,
    containers: HashMap<String, ContainerRecord>,
    /// Normalized names of the images present locally.
    images: BTreeSet<String>,
    /// Normalized names PullImage succeeds for.
    pullable: BTreeSet<String>,
    exec_result: cri::ExecSyncResponse,
    /// ExecSync results and latencies by container name.
    exec_results: HashMap<String, cri::ExecSyncResponse>,
    exec_latency: HashMap<String, Duration>,
    /// (container name, command) of every ExecSync run.
    exec_log: Vec<(String, Vec<String>)>,
    /// Per RPC: the code to fail with and how many more times.
    injected: HashMap<String, (Code, u32)>,
    latency: HashMap<String, Duration>,
    calls: HashMap<String, u64>,
    /// The pod CIDR UpdateRuntimeConfig last gave.
    pod_cidr: String,
    /// Usage numbers by container id (ListContainerStats).
    container_stats: HashMap<String, FakeContainerStats>,
    /// Creation sequence number, also the input of the id generator.
    seq: u64,
    id_keys: RandomState,
    /// Host number of the next pod IP in 10.88.0.0/16.
    next_ip: u32,
    /// The open GetContainerEvents streams.
    event_streams: Vec<EventSender>,
    events_paused: bool,
    clock: FakeClock,
}

impl State {
    fn new(clock: FakeClock) -> Self {
        State {
            clock,
            runtime_ready: true,
            network_ready: true,
            unavailable: false,
            sandboxes: HashMap::new(),
            containers: HashMap::new(),
            images: BTreeSet::new(),
            pullable: BTreeSet::new(),
            exec_result: cri::ExecSyncResponse::default(),
            exec_results: HashMap::new(),
            exec_latency: HashMap::new(),
            exec_log: Vec::new(),
            injected: HashMap::new(),
            latency: HashMap::new(),
            calls: HashMap::new(),
            pod_cidr: String::new(),
            container_stats: HashMap::new(),
            seq: 0,
            id_keys: RandomState::new(),
            // .1 is the bridge gateway, as with containerd's default CNI config.
            next_ip: 2,
            event_streams: Vec::new(),
            events_paused: false,
        }
    }

    /// Send a container event on every open stream, as containerd's CRI
    /// sends one: about a container or a sandbox (whose id it then
    /// carries), with the sandbox's status and its containers' (the one
    /// deleted left out), dropping the streams that are closed or full.
    fn emit(&mut self, id: &str, kind: cri::ContainerEventType) {
        if self.event_streams.is_empty() || self.events_paused {
            return;
        }
        let sandbox_id = match self.containers.get(id) {
            Some(c) => c.sandbox_id.clone(),
            None if self.sandboxes.contains_key(id) => id.to_owned(),
            None => return,
        };
        let deleted = kind == cri::ContainerEventType::ContainerDeletedEvent;
        let event = cri::ContainerEventResponse {
            container_id: id.to_owned(),
            container_event_type: kind as i32,
            created_at: (self.clock)(),
            pod_sandbox_status: self.sandboxes.get(&sandbox_id).map(SandboxRecord::status),
            containers_statuses: self
                .containers
                .values()
                .filter(|c| c.sandbox_id == sandbox_id && !(deleted && c.id == id))
                .map(ContainerRecord::status)
                .collect(),
        };
        self.event_streams
            .retain(|tx| tx.try_send(Ok(event.clone())).is_ok());
    }

    fn take_injected_error(&mut self, method: &str) -> Option<Status> {
        let (code, remaining) = self.injected.get_mut(method)?;
        let status = Status::new(*code, format!("injected error for {method}"));
        *remaining -= 1;
        if *remaining == 0 {
            self.injected.remove(method);
        }
        Some(status)
    }

    /// The next creation sequence number and a fresh 64-hex-digit id.
    fn next_id(&mut self) -> (u64, String) {
        self.seq += 1;
        let mut id = String::with_capacity(64);
        for lane in 0..4u64 {
            let _ = write!(id, "{:016x}", self.id_keys.hash_one((self.seq, lane)));
        }
        (self.seq, id)
    }

    fn allocate_ip(&mut self) -> String {
        let n = self.next_ip;
        self.next_ip += 1;
        format!("10.88.{}.{}", (n >> 8) & 0xff, n & 0xff)
    }

    /// The normalized name of the local image `reference` names (by name or id).
    fn resolve_image(&self, reference: &str) -> Option<&str> {
        let normalized = normalize_image(reference);
        self.images.iter().map(String::as_str).find(|name| {
            let id = image_id(name);
            *name == normalized || id == reference || id.strip_prefix("sha256:") == Some(reference)
        })
    }

    // ---- RuntimeService ----

    fn status(&self) -> cri::StatusResponse {
        cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![
                    condition("RuntimeReady", self.runtime_ready),
                    condition("NetworkReady", self.network_ready),
                ],
            }),
            runtime_handlers: vec![cri::RuntimeHandler {
                name: String::new(),
                features: Some(cri::RuntimeHandlerFeatures::default()),
            }],
            ..Default::default()
        }
    }

    fn run_pod_sandbox(
        &mut self,
        req: cri::RunPodSandboxRequest,
    ) -> Result<cri::RunPodSandboxResponse, Status> {
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("sandbox config is required"))?;
        let metadata = config
            .metadata
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("sandbox config must include metadata"))?;
        let name = format!(
            "{}_{}_{}_{}",
            metadata.name, metadata.namespace, metadata.uid, metadata.attempt
        );
        reserve_name(
            "sandbox",
            &name,
            self.sandboxes.values().map(|s| (&s.name, &s.id)),
        )?;
        let ip = (!is_host_network(&config)).then(|| self.allocate_ip());
        let (seq, id) = self.next_id();
        self.sandboxes.insert(
            id.clone(),
            SandboxRecord {
                seq,
                id: id.clone(),
                name,
                config,
                runtime_handler: req.runtime_handler,
                state: cri::PodSandboxState::SandboxReady,
                created_at: (self.clock)(),
                ip,
            },
        );
        Ok(cri::RunPodSandboxResponse { pod_sandbox_id: id })
    }

    fn stop_pod_sandbox(&mut self, id: &str) -> Result<cri::StopPodSandboxResponse, Status> {
        let sandbox = self
            .sandboxes
            .get_mut(id)
            .ok_or_else(|| not_found("sandbox", id))?;
        let was_ready = sandbox.state == cri::PodSandboxState::SandboxReady;
        sandbox.state = cri::PodSandboxState::SandboxNotready;
        let now = (self.clock)();
        let exited: Vec<String> = self
            .containers
            .values_mut()
            .filter(|c| c.sandbox_id == id)
            .filter_map(|c| c.exit(EXIT_CODE_KILLED, now).then(|| c.id.clone()))
            .collect();
        for container in exited {
            self.emit(&container, cri::ContainerEventType::ContainerStoppedEvent);
        }
        if was_ready {
            self.emit(id, cri::ContainerEventType::ContainerStoppedEvent);
        }
        Ok(cri::StopPodSandboxResponse {})
    }

    fn remove_pod_sandbox(&mut self, id: &str) -> cri::RemovePodSandboxResponse {
        let removed: Vec<String> = self
            .containers
            .values()
            .filter(|c| c.sandbox_id == id)
            .map(|c| c.id.clone())
            .collect();
        for container in &removed {
            self.emit(container, cri::ContainerEventType::ContainerDeletedEvent);
            self.containers.remove(container);
        }
        self.emit(id, cri::ContainerEventType::ContainerDeletedEvent);
        self.sandboxes.remove(id);
        cri::RemovePodSandboxResponse {}
    }

    fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatusResponse, Status> {
        let sandbox = self
            .sandboxes
            .get(id)
            .ok_or_else(|| not_found("sandbox", id))?;
        Ok(cri::PodSandboxStatusResponse {
            status: Some(sandbox.status()),
            timestamp: (self.clock)(),
            ..Default::default()
        })
    }

    fn create_container(
        &mut self,
        req: cri::CreateContainerRequest,
    ) -> Result<cri::CreateContainerResponse, Status> {
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("container config is required"))?;
        let metadata = config
            .metadata
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("container config must include metadata"))?;
        let sandbox = self
            .sandboxes
            .get(&req.pod_sandbox_id)
            .ok_or_else(|| not_found("sandbox", &req.pod_sandbox_id))?;
        let sandbox_metadata = sandbox.config.metadata.clone().unwrap_or_default();
        let name = format!(
            "{}_{}_{}_{}_{}",
            metadata.name,
            sandbox_metadata.name,
            sandbox_metadata.namespace,
            sandbox_metadata.uid,
            metadata.attempt
        );
        reserve_name(
            "container",
            &name,
            self.containers.values().map(|c| (&c.name, &c.id)),
        )?;
        let image = config.image.as_ref().map_or("", |spec| spec.image.as_str());
        let image_ref = self.resolve_image(image).map(image_id).ok_or_else(|| {
            Status::not_found(format!("failed to get image {image:?}: not found"))
        })?;
        // containerd joins the log path onto the directory of the request's sandbox config.
        let log_directory = req
            .sandbox_config
            .as_ref()
            .map_or(sandbox.config.log_directory.as_str(), |c| {
                c.log_directory.as_str()
            });
        let log_path = if config.log_path.is_empty() {
            String::new()
        } else {
            Path::new(log_directory)
                .join(&config.log_path)
                .to_string_lossy()
                .into_owned()
        };
        let (seq, id) = self.next_id();
        let created = id.clone();
        self.containers.insert(
            id.clone(),
            ContainerRecord {
                seq,
                id: id.clone(),
                name,
                sandbox_id: req.pod_sandbox_id,
                config,
                image_ref,
                log_path,
                state: cri::ContainerState::ContainerCreated,
                created_at: (self.clock)(),
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
            },
        );
        self.emit(&created, cri::ContainerEventType::ContainerCreatedEvent);
        Ok(cri::CreateContainerResponse { container_id: id })
    }

    fn start_container(&mut self, id: &str) -> Result<cri::StartContainerResponse, Status> {
        let now = (self.clock)();
        let container = self
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("container", id))?;
        if container.state != cri::ContainerState::ContainerCreated {
            return Err(Status::failed_precondition(format!(
                "container {id:?} is in {} state",
                container.state.as_str_name()
            )));
        }
        let sandbox_ready = self
            .sandboxes
            .get(&container.sandbox_id)
            .is_some_and(|s| s.state == cri::PodSandboxState::SandboxReady);
        if !sandbox_ready {
            return Err(Status::failed_precondition(format!(
                "sandbox container {:?} is not running",
                container.sandbox_id
            )));
        }
        container.state = cri::ContainerState::ContainerRunning;
        container.started_at = now;
        self.emit(id, cri::ContainerEventType::ContainerStartedEvent);
        Ok(cri::StartContainerResponse {})
    }

    fn stop_container(&mut self, id: &str) -> Result<cri::StopContainerResponse, Status> {
        let now = (self.clock)();
        if self.container_mut(id)?.exit(EXIT_CODE_TERMINATED, now) {
            self.emit(id, cri::ContainerEventType::ContainerStoppedEvent);
        }
        Ok(cri::StopContainerResponse {})
    }

    fn container_status(&self, id: &str) -> Result<cri::ContainerStatusResponse, Status> {
        let container = self
            .containers
            .get(id)
            .ok_or_else(|| not_found("container", id))?;
        Ok(cri::ContainerStatusResponse {
            status: Some(container.status()),
            ..Default::default()
        })
    }

    /// Record the command; the result and the latency for the container.
    fn exec_sync(
        &mut self,
        id: &str,
        cmd: &[String],
    ) -> Result<(cri::ExecSyncResponse, Option<Duration>), Status> {
        let container = self.container_mut(id)?;
        if container.state != cri::ContainerState::ContainerRunning {
            return Err(Status::failed_precondition(format!(
                "container {id:?} is in {} state",
                container.state.as_str_name()
            )));
        }
        let name = container
            .config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let result = self
            .exec_results
            .get(&name)
            .unwrap_or(&self.exec_result)
            .clone();
        let delay = self.exec_latency.get(&name).copied();
        self.exec_log.push((name, cmd.to_vec()));
        Ok((result, delay))
    }

    fn container_mut(&mut self, id: &str) -> Result<&mut ContainerRecord, Status> {
        self.containers
            .get_mut(id)
            .ok_or_else(|| not_found("container", id))
    }

    /// The CRI stats of a container: the numbers set through the handle,
    /// zeros sampled now for a container without any.
    fn stats_of(&self, container: &ContainerRecord) -> cri::ContainerStats {
        let set = self
            .container_stats
            .get(&container.id)
            .cloned()
            .unwrap_or_default();
        let timestamp = if set.timestamp == 0 {
            (self.clock)()
        } else {
            set.timestamp
        };
        let value = |value| Some(cri::UInt64Value { value });
        cri::ContainerStats {
            attributes: Some(cri::ContainerAttributes {
                id: container.id.clone(),
                metadata: container.config.metadata.clone(),
                labels: container.config.labels.clone(),
                annotations: container.config.annotations.clone(),
            }),
            cpu: Some(cri::CpuUsage {
                timestamp,
                usage_core_nano_seconds: value(set.usage_core_nano_seconds),
                ..Default::default()
            }),
            memory: Some(cri::MemoryUsage {
                timestamp,
                working_set_bytes: value(set.working_set_bytes),
                usage_bytes: value(set.usage_bytes),
                rss_bytes: value(set.rss_bytes),
                page_faults: value(0),
                major_page_faults: value(0),
                ..Default::default()
            }),
            writable_layer: Some(cri::FilesystemUsage {
                timestamp,
                fs_id: Some(cri::FilesystemIdentifier {
                    mountpoint: IMAGE_FS_MOUNTPOINT.to_owned(),
                }),
                used_bytes: value(set.writable_layer_bytes),
                inodes_used: value(set.writable_layer_inodes),
            }),
            ..Default::default()
        }
    }

    /// A ready sandbox's stats as containerd reports them: its containers'
    /// stats, its CPU and memory their sums, one process per running
    /// container, and its `eth0` with no traffic.
    fn sandbox_stats_of(&self, sandbox: &SandboxRecord) -> cri::PodSandboxStats {
        let timestamp = (self.clock)();
        let containers: Vec<cri::ContainerStats> = select(&self.containers, &Selector::default())
            .filter(|c| c.sandbox_id == sandbox.id)
            .map(|c| self.stats_of(c))
            .collect();
        let running = self
            .containers
            .values()
            .filter(|c| {
                c.sandbox_id == sandbox.id && c.state == cri::ContainerState::ContainerRunning
            })
            .count();
        let sum = |get: fn(&cri::ContainerStats) -> Option<u64>| {
            Some(cri::UInt64Value {
                value: containers.iter().filter_map(get).sum(),
            })
        };
        let value = |value| Some(cri::UInt64Value { value });
        let eth0 = cri::NetworkInterfaceUsage {
            name: "eth0".to_owned(),
            rx_bytes: value(0),
            rx_errors: value(0),
            tx_bytes: value(0),
            tx_errors: value(0),
        };
        cri::PodSandboxStats {
            attributes: Some(cri::PodSandboxAttributes {
                id: sandbox.id.clone(),
                metadata: sandbox.config.metadata.clone(),
                labels: sandbox.config.labels.clone(),
                annotations: sandbox.config.annotations.clone(),
            }),
            linux: Some(cri::LinuxPodSandboxStats {
                cpu: Some(cri::CpuUsage {
                    timestamp,
                    usage_core_nano_seconds: sum(|c| {
                        Some(c.cpu.as_ref()?.usage_core_nano_seconds.as_ref()?.value)
                    }),
                    ..Default::default()
                }),
                memory: Some(cri::MemoryUsage {
                    timestamp,
                    working_set_bytes: sum(|c| {
                        Some(c.memory.as_ref()?.working_set_bytes.as_ref()?.value)
                    }),
                    usage_bytes: sum(|c| Some(c.memory.as_ref()?.usage_bytes.as_ref()?.value)),
                    rss_bytes: sum(|c| Some(c.memory.as_ref()?.rss_bytes.as_ref()?.value)),
                    page_faults: value(0),
                    major_page_faults: value(0),
                    ..Default::default()
                }),
                network: Some(cri::NetworkUsage {
                    timestamp,
                    default_interface: Some(eth0.clone()),
                    interfaces: vec![eth0],
                }),
                process: Some(cri::ProcessUsage {
                    timestamp,
                    process_count: value(running as u64),
                }),
                containers,
                ..Default::default()
            }),
            windows: None,
        }
    }

    /// A ready sandbox's metrics as containerd reports them (two of its
    /// families, [`METRIC_DESCRIPTORS`]), for each of its running containers.
    fn sandbox_metrics_of(&self, sandbox: &SandboxRecord) -> cri::PodSandboxMetrics {
        let timestamp = (self.clock)();
        let meta = sandbox.config.metadata.clone().unwrap_or_default();
        let container_metrics = select(&self.containers, &Selector::default())
            .filter(|c| {
                c.sandbox_id == sandbox.id && c.state == cri::ContainerState::ContainerRunning
            })
            .map(|c| {
                let stats = self.stats_of(c);
                let labels = vec![
                    meta.name.clone(),
                    meta.namespace.clone(),
                    c.config
                        .metadata
                        .as_ref()
                        .map(|m| m.name.clone())
                        .unwrap_or_default(),
                    c.id.clone(),
                    c.config
                        .image
                        .as_ref()
                        .map(|i| i.image.clone())
                        .unwrap_or_default(),
                ];
                let metric = |name: &str, metric_type: cri::MetricType, value| cri::Metric {
                    name: name.to_owned(),
                    timestamp,
                    metric_type: metric_type as i32,
                    label_values: labels.clone(),
                    value: Some(cri::UInt64Value { value }),
                };
                let cpu = stats
                    .cpu
                    .and_then(|c| c.usage_core_nano_seconds)
                    .map_or(0, |v| v.value);
                let memory = stats
                    .memory
                    .and_then(|m| m.working_set_bytes)
                    .map_or(0, |v| v.value);
                cri::ContainerMetrics {
                    container_id: c.id.clone(),
                    metrics: vec![
                        metric(
                            METRIC_DESCRIPTORS[0].0,
                            cri::MetricType::Counter,
                            cpu / 1_000_000_000,
                        ),
                        metric(METRIC_DESCRIPTORS[1].0, cri::MetricType::Gauge, memory),
                    ],
                }
            })
            .collect();
        cri::PodSandboxMetrics {
            pod_sandbox_id: sandbox.id.clone(),
            metrics: Vec::new(),
            container_metrics,
        }
    }

    // ---- ImageService ----

    fn image_status(&self, spec: Option<&cri::ImageSpec>) -> cri::ImageStatusResponse {
        let reference = spec.map_or("", |s| s.image.as_str());
        cri::ImageStatusResponse {
            image: self.resolve_image(reference).map(image_message),
            ..Default::default()
        }
    }

    fn list_images(&self, filter: Option<&cri::ImageFilter>) -> cri::ListImagesResponse {
        let wanted = filter
            .and_then(|f| f.image.as_ref())
            .map(|spec| spec.image.as_str())
            .filter(|reference| !reference.is_empty());
        let images = match wanted {
            Some(reference) => self
                .resolve_image(reference)
                .map(image_message)
                .into_iter()
                .collect(),
            None => self.images.iter().map(|name| image_message(name)).collect(),
        };
        cri::ListImagesResponse { images }
    }

    fn pull_image(
        &mut self,
        spec: Option<&cri::ImageSpec>,
    ) -> Result<cri::PullImageResponse, Status> {
        let reference = spec.map_or("", |s| s.image.as_str());
        let name = normalize_image(reference);
        if !self.pullable.contains(&name) {
            return Err(Status::not_found(format!(
                "failed to pull and unpack image {name:?}: failed to resolve reference {name:?}: {name}: not found"
            )));
        }
        let image_ref = image_id(&name);
        self.images.insert(name);
        Ok(cri::PullImageResponse { image_ref })
    }

    fn remove_image(&mut self, spec: Option<&cri::ImageSpec>) -> cri::RemoveImageResponse {
        let reference = spec.map_or("", |s| s.image.as_str());
        if let Some(name) = self.resolve_image(reference).map(str::to_owned) {
            self.images.remove(&name);
        }
        cri::RemoveImageResponse {}
    }
}

/// Refuse a name another live object already holds, like containerd's name index.
fn reserve_name<'a>(
    kind: &str,
    name: &str,
    mut existing: impl Iterator<Item = (&'a String, &'a String)>,
) -> Result<(), Status> {
    match existing.find(|(taken, _)| *taken == name) {
        Some((_, owner)) => Err(Status::already_exists(format!(
            "failed to reserve {kind} name {name:?}: name {name:?} is reserved for {owner:?}"
        ))),
        None => Ok(()),
    }
}

/// A pod sandbox and the config it was created with.
/// The metrics the fake describes (name, help), of containerd's.
const METRIC_DESCRIPTORS: [(&str, &str); 2] = [
    (
        "container_cpu_usage_seconds_total",
        "Cumulative CPU time consumed in seconds.",
    ),
    (
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
    ),
];

/// Their label keys, containerd's base ones in its order.
const METRIC_LABEL_KEYS: [&str; 5] = ["pod", "namespace", "container", "id", "image"];

struct SandboxRecord {
    seq: u64,
    id: String,
    /// The reserved name, derived from the metadata.
    name: String,
    config: cri::PodSandboxConfig,
    runtime_handler: String,
    state: cri::PodSandboxState,
    created_at: i64,
    /// The pod IP; None for host-network sandboxes.
    ip: Option<String>,
}

impl SandboxRecord {
    fn summary(&self) -> cri::PodSandbox {
        cri::PodSandbox {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }

    fn status(&self) -> cri::PodSandboxStatus {
        // Like containerd, a stopped sandbox (closed netns) reports no IP.
        let ip = match (&self.ip, self.state) {
            (Some(ip), cri::PodSandboxState::SandboxReady) => ip.clone(),
            _ => String::new(),
        };
        cri::PodSandboxStatus {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            network: Some(cri::PodSandboxNetworkStatus {
                ip,
                additional_ips: Vec::new(),
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: namespace_options(&self.config).cloned(),
                }),
            }),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }
}

/// A container and the config it was created with.
struct ContainerRecord {
    seq: u64,
    id: String,
    /// The reserved name, derived from its and its sandbox's metadata.
    name: String,
    sandbox_id: String,
    config: cri::ContainerConfig,
    /// Id of the image it was created from.
    image_ref: String,
    /// Absolute log path (sandbox log directory joined with the config's log path).
    log_path: String,
    state: cri::ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
}

impl ContainerRecord {
    /// End the container's process with `code` at `now`; false (and no change) unless it is running.
    fn exit(&mut self, code: i32, now: i64) -> bool {
        if self.state != cri::ContainerState::ContainerRunning {
            return false;
        }
        self.state = cri::ContainerState::ContainerExited;
        self.finished_at = now;
        self.exit_code = code;
        true
    }

    fn reason(&self) -> &'static str {
        match (self.state, self.exit_code) {
            (cri::ContainerState::ContainerExited, 0) => "Completed",
            (cri::ContainerState::ContainerExited, _) => "Error",
            _ => "",
        }
    }

    fn summary(&self) -> cri::Container {
        cri::Container {
            id: self.id.clone(),
            pod_sandbox_id: self.sandbox_id.clone(),
            metadata: self.config.metadata.clone(),
            image: self.config.image.clone(),
            image_ref: self.image_ref.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            image_id: self.image_ref.clone(),
        }
    }

    fn status(&self) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            exit_code: self.exit_code,
            image: self.config.image.clone(),
            image_ref: self.image_ref.clone(),
            reason: self.reason().to_owned(),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            mounts: self.config.mounts.clone(),
            log_path: self.log_path.clone(),
            image_id: self.image_ref.clone(),
            ..Default::default()
        }
    }
}

/// What list filters select on, common to sandboxes and containers.
trait Listed {
    fn seq(&self) -> u64;
    fn id(&self) -> &str;
    fn state(&self) -> i32;
    /// The sandbox a container belongs to; a sandbox's own id.
    fn sandbox_id(&self) -> &str;
    fn labels(&self) -> &HashMap<String, String>;
}

impl Listed for SandboxRecord {
    fn seq(&self) -> u64 {
        self.seq
    }
    fn id(&self) -> &str {
        &self.id
    }
    fn state(&self) -> i32 {
        self.state as i32
    }
    fn sandbox_id(&self) -> &str {
        &self.id
    }
    fn labels(&self) -> &HashMap<String, String> {
        &self.config.labels
    }
}

impl Listed for ContainerRecord {
    fn seq(&self) -> u64 {
        self.seq
    }
    fn id(&self) -> &str {
        &self.id
    }
    fn state(&self) -> i32 {
        self.state as i32
    }
    fn sandbox_id(&self) -> &str {
        &self.sandbox_id
    }
    fn labels(&self) -> &HashMap<String, String> {
        &self.config.labels
    }
}

/// A CRI list filter; unset fields match everything, set ones are ANDed.
#[derive(Default)]
struct Selector<'a> {
    id: &'a str,
    state: Option<i32>,
    sandbox_id: &'a str,
    labels: Option<&'a HashMap<String, String>>,
}

impl Selector<'_> {
    fn matches(&self, item: &impl Listed) -> bool {
        (self.id.is_empty() || self.id == item.id())
            && self.state.is_none_or(|state| state == item.state())
            && (self.sandbox_id.is_empty() || self.sandbox_id == item.sandbox_id())
            && self.labels.is_none_or(|selector| {
                selector
                    .iter()
                    .all(|(key, value)| item.labels().get(key) == Some(value))
            })
    }
}

impl<'a> From<Option<&'a cri::PodSandboxFilter>> for Selector<'a> {
    fn from(filter: Option<&'a cri::PodSandboxFilter>) -> Self {
        filter.map_or_else(Selector::default, |f| Selector {
            id: &f.id,
            state: f.state.map(|s| s.state),
            sandbox_id: "",
            labels: Some(&f.label_selector),
        })
    }
}

impl<'a> From<Option<&'a cri::ContainerFilter>> for Selector<'a> {
    fn from(filter: Option<&'a cri::ContainerFilter>) -> Self {
        filter.map_or_else(Selector::default, |f| Selector {
            id: &f.id,
            state: f.state.map(|s| s.state),
            sandbox_id: &f.pod_sandbox_id,
            labels: Some(&f.label_selector),
        })
    }
}

impl<'a> From<Option<&'a cri::ContainerStatsFilter>> for Selector<'a> {
    fn from(filter: Option<&'a cri::ContainerStatsFilter>) -> Self {
        filter.map_or_else(Selector::default, |f| Selector {
            id: &f.id,
            state: None,
            sandbox_id: &f.pod_sandbox_id,
            labels: Some(&f.label_selector),
        })
    }
}

/// The records `selector` matches, in creation order.
fn select<'a, R: Listed>(
    records: &'a HashMap<String, R>,
    selector: &Selector<'_>,
) -> impl Iterator<Item = &'a R> {
    let mut matched: Vec<&R> = records.values().filter(|r| selector.matches(*r)).collect();
    matched.sort_by_key(|r| r.seq());
    matched.into_iter()
}

#[tonic::async_trait]
impl RuntimeService for Backend {
    async fn version(&self, _: Request<cri::VersionRequest>) -> RpcResult<cri::VersionResponse> {
        self.call("Version", |_| {
            Ok(cri::VersionResponse {
                version: RUNTIME_VERSION.to_owned(),
                runtime_name: RUNTIME_NAME.to_owned(),
                runtime_version: RUNTIME_VERSION.to_owned(),
                runtime_api_version: RUNTIME_API_VERSION.to_owned(),
            })
        })
        .await
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<cri::RunPodSandboxRequest>,
    ) -> RpcResult<cri::RunPodSandboxResponse> {
        let req = request.into_inner();
        self.call("RunPodSandbox", |s| s.run_pod_sandbox(req)).await
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<cri::StopPodSandboxRequest>,
    ) -> RpcResult<cri::StopPodSandboxResponse> {
        let id = request.into_inner().pod_sandbox_id;
        self.call("StopPodSandbox", |s| s.stop_pod_sandbox(&id))
            .await
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<cri::RemovePodSandboxRequest>,
    ) -> RpcResult<cri::RemovePodSandboxResponse> {
        let id = request.into_inner().pod_sandbox_id;
        self.call("RemovePodSandbox", |s| Ok(s.remove_pod_sandbox(&id)))
            .await
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<cri::PodSandboxStatusRequest>,
    ) -> RpcResult<cri::PodSandboxStatusResponse> {
        let id = request.into_inner().pod_sandbox_id;
        self.call("PodSandboxStatus", |s| s.pod_sandbox_status(&id))
            .await
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<cri::ListPodSandboxRequest>,
    ) -> RpcResult<cri::ListPodSandboxResponse> {
        let req = request.into_inner();
        self.call("ListPodSandbox", |s| {
            let selector = Selector::from(req.filter.as_ref());
            let items = select(&s.sandboxes, &selector)
                .map(SandboxRecord::summary)
                .collect();
            Ok(cri::ListPodSandboxResponse { items })
        })
        .await
    }

    async fn create_container(
        &self,
        request: Request<cri::CreateContainerRequest>,
    ) -> RpcResult<cri::CreateContainerResponse> {
        let req = request.into_inner();
        self.call("CreateContainer", |s| s.create_container(req))
            .await
    }

    async fn start_container(
        &self,
        request: Request<cri::StartContainerRequest>,
    ) -> RpcResult<cri::StartContainerResponse> {
        let id = request.into_inner().container_id;
        let started = self
            .call("StartContainer", |s| s.start_container(&id))
            .await?;
        // As containerd, the log file is opened as the container starts
        // (where its directory exists: tests that care make it).
        let path = self
            .state
            .lock()
            .containers
            .get(&id)
            .map(|c| c.log_path.clone());
        if let Some(path) = path.filter(|p| !p.is_empty()) {
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path);
        }
        Ok(started)
    }

    async fn stop_container(
        &self,
        request: Request<cri::StopContainerRequest>,
    ) -> RpcResult<cri::StopContainerResponse> {
        let id = request.into_inner().container_id;
        self.call("StopContainer", |s| s.stop_container(&id)).await
    }

    async fn remove_container(
        &self,
        request: Request<cri::RemoveContainerRequest>,
    ) -> RpcResult<cri::RemoveContainerResponse> {
        let id = request.into_inner().container_id;
        self.call("RemoveContainer", |s| {
            s.emit(&id, cri::ContainerEventType::ContainerDeletedEvent);
            s.containers.remove(&id);
            Ok(cri::RemoveContainerResponse {})
        })
        .await
    }

    async fn list_containers(
        &self,
        request: Request<cri::ListContainersRequest>,
    ) -> RpcResult<cri::ListContainersResponse> {
        let req = request.into_inner();
        self.call("ListContainers", |s| {
            let selector = Selector::from(req.filter.as_ref());
            let containers = select(&s.containers, &selector)
                .map(ContainerRecord::summary)
                .collect();
            Ok(cri::ListContainersResponse { containers })
        })
        .await
    }

    async fn container_status(
        &self,
        request: Request<cri::ContainerStatusRequest>,
    ) -> RpcResult<cri::ContainerStatusResponse> {
        let id = request.into_inner().container_id;
        self.call("ContainerStatus", |s| s.container_status(&id))
            .await
    }

    async fn update_container_resources(
        &self,
        request: Request<cri::UpdateContainerResourcesRequest>,
    ) -> RpcResult<cri::UpdateContainerResourcesResponse> {
        let request = request.into_inner();
        self.call("UpdateContainerResources", |s| {
            let c = s.container_mut(&request.container_id)?;
            // What a test reads back through container_config.
            if let Some(linux) = request.linux.clone() {
                c.config.linux.get_or_insert_default().resources = Some(linux);
            }
            Ok(cri::UpdateContainerResourcesResponse {})
        })
        .await
    }

    /// As containerd's: a running container's log file is opened anew at
    /// its path (created if a rotation renamed it away); a container that
    /// does not run cannot.
    async fn reopen_container_log(
        &self,
        request: Request<cri::ReopenContainerLogRequest>,
    ) -> RpcResult<cri::ReopenContainerLogResponse> {
        let id = request.into_inner().container_id;
        let path = self
            .call("ReopenContainerLog", |s| {
                let c = s.container_mut(&id)?;
                if c.state != cri::ContainerState::ContainerRunning {
                    return Err(Status::failed_precondition(format!(
                        "container {id} is not running"
                    )));
                }
                Ok(c.log_path.clone())
            })
            .await?
            .into_inner();
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| {
                Status::internal(format!("failed to create and open log file {path:?}: {e}"))
            })?;
        Ok(Response::new(cri::ReopenContainerLogResponse {}))
    }

    async fn exec_sync(
        &self,
        request: Request<cri::ExecSyncRequest>,
    ) -> RpcResult<cri::ExecSyncResponse> {
        let req = request.into_inner();
        let (result, delay) = self
            .call("ExecSync", |s| s.exec_sync(&req.container_id, &req.cmd))
            .await?
            .into_inner();
        if let Some(delay) = delay {
            let limit = u64::try_from(req.timeout)
                .ok()
                .filter(|t| *t > 0)
                .map(Duration::from_secs);
            if let Some(limit) = limit.filter(|limit| delay > *limit) {
                tokio::time::sleep(limit).await;
                return Err(Status::deadline_exceeded(format!(
                    "timeout {limit:?} exceeded: context deadline exceeded"
                )));
            }
            tokio::time::sleep(delay).await;
        }
        Ok(Response::new(result))
    }

    async fn exec(&self, _: Request<cri::ExecRequest>) -> RpcResult<cri::ExecResponse> {
        self.unimplemented("Exec").await
    }

    async fn attach(&self, _: Request<cri::AttachRequest>) -> RpcResult<cri::AttachResponse> {
        self.unimplemented("Attach").await
    }

    async fn port_forward(
        &self,
        _: Request<cri::PortForwardRequest>,
    ) -> RpcResult<cri::PortForwardResponse> {
        self.unimplemented("PortForward").await
    }

    async fn container_stats(
        &self,
        _: Request<cri::ContainerStatsRequest>,
    ) -> RpcResult<cri::ContainerStatsResponse> {
        self.unimplemented("ContainerStats").await
    }

    async fn list_container_stats(
        &self,
        request: Request<cri::ListContainerStatsRequest>,
    ) -> RpcResult<cri::ListContainerStatsResponse> {
        let req = request.into_inner();
        self.call("ListContainerStats", |s| {
            let selector = Selector::from(req.filter.as_ref());
            let stats = select(&s.containers, &selector)
                .map(|c| s.stats_of(c))
                .collect();
            Ok(cri::ListContainerStatsResponse { stats })
        })
        .await
    }

    async fn pod_sandbox_stats(
        &self,
        _: Request<cri::PodSandboxStatsRequest>,
    ) -> RpcResult<cri::PodSandboxStatsResponse> {
        self.unimplemented("PodSandboxStats").await
    }

    async fn list_pod_sandbox_stats(
        &self,
        _: Request<cri::ListPodSandboxStatsRequest>,
    ) -> RpcResult<cri::ListPodSandboxStatsResponse> {
        self.call("ListPodSandboxStats", |s| {
            let stats = select(&s.sandboxes, &Selector::default())
                .filter(|sb| sb.state == cri::PodSandboxState::SandboxReady)
                .map(|sb| s.sandbox_stats_of(sb))
                .collect();
            Ok(cri::ListPodSandboxStatsResponse { stats })
        })
        .await
    }

    async fn update_runtime_config(
        &self,
        req: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> RpcResult<cri::UpdateRuntimeConfigResponse> {
        let cidr = req
            .into_inner()
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr);
        self.call("UpdateRuntimeConfig", move |s| {
            if let Some(cidr) = cidr {
                s.pod_cidr = cidr;
            }
            Ok(cri::UpdateRuntimeConfigResponse {})
        })
        .await
    }

    async fn status(&self, _: Request<cri::StatusRequest>) -> RpcResult<cri::StatusResponse> {
        self.call("Status", |s| Ok(s.status())).await
    }

    async fn checkpoint_container(
        &self,
        _: Request<cri::CheckpointContainerRequest>,
    ) -> RpcResult<cri::CheckpointContainerResponse> {
        self.unimplemented("CheckpointContainer").await
    }

    type GetContainerEventsStream = ReceiverStream<Result<cri::ContainerEventResponse, Status>>;

    async fn get_container_events(
        &self,
        _: Request<cri::GetEventsRequest>,
    ) -> RpcResult<Self::GetContainerEventsStream> {
        self.call("GetContainerEvents", |s| {
            let (tx, rx) = mpsc::channel(EVENT_BUFFER);
            s.event_streams.push(tx);
            Ok(ReceiverStream::new(rx))
        })
        .await
    }

    type StreamPodSandboxesStream =
        tokio_stream::Empty<Result<cri::StreamPodSandboxesResponse, Status>>;

    async fn stream_pod_sandboxes(
        &self,
        _: Request<cri::StreamPodSandboxesRequest>,
    ) -> RpcResult<Self::StreamPodSandboxesStream> {
        self.unimplemented("StreamPodSandboxes").await
    }

    type StreamContainersStream =
        tokio_stream::Empty<Result<cri::StreamContainersResponse, Status>>;

    async fn stream_containers(
        &self,
        _: Request<cri::StreamContainersRequest>,
    ) -> RpcResult<Self::StreamContainersStream> {
        self.unimplemented("StreamContainers").await
    }

    type StreamContainerStatsStream =
        tokio_stream::Empty<Result<cri::StreamContainerStatsResponse, Status>>;

    async fn stream_container_stats(
        &self,
        _: Request<cri::StreamContainerStatsRequest>,
    ) -> RpcResult<Self::StreamContainerStatsStream> {
        self.unimplemented("StreamContainerStats").await
    }

    type StreamPodSandboxStatsStream =
        tokio_stream::Empty<Result<cri::StreamPodSandboxStatsResponse, Status>>;

    async fn stream_pod_sandbox_stats(
        &self,
        _: Request<cri::StreamPodSandboxStatsRequest>,
    ) -> RpcResult<Self::StreamPodSandboxStatsStream> {
        self.unimplemented("StreamPodSandboxStats").await
    }

    type StreamPodSandboxMetricsStream =
        tokio_stream::Empty<Result<cri::StreamPodSandboxMetricsResponse, Status>>;

    async fn stream_pod_sandbox_metrics(
        &self,
        _: Request<cri::StreamPodSandboxMetricsRequest>,
    ) -> RpcResult<Self::StreamPodSandboxMetricsStream> {
        self.unimplemented("StreamPodSandboxMetrics").await
    }

    async fn checkpoint_pod(
        &self,
        _: Request<cri::CheckpointPodRequest>,
    ) -> RpcResult<cri::CheckpointPodResponse> {
        self.unimplemented("CheckpointPod").await
    }

    async fn restore_pod(
        &self,
        _: Request<cri::RestorePodRequest>,
    ) -> RpcResult<cri::RestorePodResponse> {
        self.unimplemented("RestorePod").await
    }

    async fn update_pod_sandbox_resources(
        &self,
        _: Request<cri::UpdatePodSandboxResourcesRequest>,
    ) -> RpcResult<cri::UpdatePodSandboxResourcesResponse> {
        self.unimplemented("UpdatePodSandboxResources").await
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<cri::ListMetricDescriptorsRequest>,
    ) -> RpcResult<cri::ListMetricDescriptorsResponse> {
        self.call("ListMetricDescriptors", |_| {
            let descriptors = METRIC_DESCRIPTORS
                .iter()
                .map(|(name, help)| cri::MetricDescriptor {
                    name: (*name).to_owned(),
                    help: (*help).to_owned(),
                    label_keys: METRIC_LABEL_KEYS.iter().map(|k| (*k).to_owned()).collect(),
                })
                .collect();
            Ok(cri::ListMetricDescriptorsResponse { descriptors })
        })
        .await
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> RpcResult<cri::ListPodSandboxMetricsResponse> {
        self.call("ListPodSandboxMetrics", |s| {
            let pod_metrics = select(&s.sandboxes, &Selector::default())
                .filter(|sb| sb.state == cri::PodSandboxState::SandboxReady)
                .map(|sb| s.sandbox_metrics_of(sb))
                .collect();
            Ok(cri::ListPodSandboxMetricsResponse { pod_metrics })
        })
        .await
    }

    async fn runtime_config(
        &self,
        _: Request<cri::RuntimeConfigRequest>,
    ) -> RpcResult<cri::RuntimeConfigResponse> {
        self.unimplemented("RuntimeConfig").await
    }
}

#[tonic::async_trait]
impl ImageService for Backend {
    async fn list_images(
        &self,
        request: Request<cri::ListImagesRequest>,
    ) -> RpcResult<cri::ListImagesResponse> {
        let req = request.into_inner();
        self.call("ListImages", |s| Ok(s.list_images(req.filter.as_ref())))
            .await
    }

    async fn image_status(
        &self,
        request: Request<cri::ImageStatusRequest>,
    ) -> RpcResult<cri::ImageStatusResponse> {
        let req = request.into_inner();
        self.call("ImageStatus", |s| Ok(s.image_status(req.image.as_ref())))
            .await
    }

    async fn pull_image(
        &self,
        request: Request<cri::PullImageRequest>,
    ) -> RpcResult<cri::PullImageResponse> {
        let req = request.into_inner();
        self.call("PullImage", |s| s.pull_image(req.image.as_ref()))
            .await
    }

    async fn remove_image(
        &self,
        request: Request<cri::RemoveImageRequest>,
    ) -> RpcResult<cri::RemoveImageResponse> {
        let req = request.into_inner();
        self.call("RemoveImage", |s| Ok(s.remove_image(req.image.as_ref())))
            .await
    }

    type StreamImagesStream = tokio_stream::Empty<Result<cri::StreamImagesResponse, Status>>;

    async fn stream_images(
        &self,
        _: Request<cri::StreamImagesRequest>,
    ) -> RpcResult<Self::StreamImagesStream> {
        self.unimplemented("StreamImages").await
    }

    async fn image_fs_info(
        &self,
        _: Request<cri::ImageFsInfoRequest>,
    ) -> RpcResult<cri::ImageFsInfoResponse> {
        self.call("ImageFsInfo", |s| {
            let zero = Some(cri::UInt64Value { value: 0 });
            Ok(cri::ImageFsInfoResponse {
                image_filesystems: vec![cri::FilesystemUsage {
                    timestamp: (s.clock)(),
                    fs_id: Some(cri::FilesystemIdentifier {
                        mountpoint: IMAGE_FS_MOUNTPOINT.to_owned(),
                    }),
                    used_bytes: zero,
                    inodes_used: zero,
                }],
                container_filesystems: Vec::new(),
            })
        })
        .await
    }
}
