//! `GET /containerLogs/{namespace}/{pod}/{container}`: `kubectl logs`
//! (upstream's server.go `getContainerLogs`, kubelet_pods.go
//! `GetKubeletContainerLogs` and kuberuntime/logs `ReadLogs`).
//!
//! The names in the path are only lookup keys: the pod comes from
//! [`NodeView::pods`], the container instance from its status, and the file
//! from the runtime's `ContainerStatus.log_path`. That file is served only if
//! it is a regular file under [`NodeView::logs_root`] reached without a
//! symbolic link at its last component (opened with `O_NOFOLLOW`, then
//! checked by the path the kernel reports for the open descriptor).
//! `follow=true` streams lines as they are written, survives the runtime
//! rotating or truncating the file, and ends when the container stops or the
//! client goes away.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use inotify::{EventStream, Inotify, WatchMask};
use kubelet_core::crilog::{
    self, Assembler, LineWriter, LogLine, LogOptions, OptionsError, SelectError,
};
use kubelet_cri::client::{CriClient, CriError};
use kubelet_cri::v1::ContainerState;
use rustix::fs::{Mode, OFlags};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::response::plain_response;
use crate::{Body, NodeView, full};
use kubelet_tasks::Tasks;

/// How often a follower asks the runtime whether the container still runs
/// (upstream's logForceCheckPeriod).
const CONTAINER_CHECK_PERIOD: Duration = Duration::from_secs(1);
/// How often a follower looks at the file when inotify is unavailable.
const POLL_PERIOD: Duration = Duration::from_millis(250);
/// Read size of the log file.
const READ_CHUNK: usize = 64 * 1024;
/// A raw line longer than this (no runtime writes one) is dropped.
const MAX_RAW_LINE: usize = 2 * crilog::MAX_JOINED_LINE;
/// Output chunks in flight to a slow client.
const CHANNEL_DEPTH: usize = 8;

/// Why a log request is refused, each with its HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error(transparent)]
    Options(#[from] OptionsError),
    #[error("pod {0:?} does not exist")]
    PodNotFound(String),
    #[error(transparent)]
    Select(#[from] SelectError),
    #[error("failed to get container status {id:?}: {source}")]
    Status { id: String, source: CriError },
    #[error("container {0:?} has no log path")]
    NoLogPath(String),
    #[error(transparent)]
    File(#[from] LogFileError),
}

impl LogsError {
    pub fn status(&self) -> StatusCode {
        match self {
            LogsError::Options(OptionsError::Decode { .. }) => StatusCode::BAD_REQUEST,
            LogsError::Options(OptionsError::Invalid(_)) => StatusCode::UNPROCESSABLE_ENTITY,
            LogsError::PodNotFound(_) | LogsError::Select(SelectError::NotInSpec { .. }) => {
                StatusCode::NOT_FOUND
            }
            LogsError::Select(SelectError::Unavailable(_))
            | LogsError::Status { .. }
            | LogsError::NoLogPath(_) => StatusCode::BAD_REQUEST,
            LogsError::File(LogFileError::Refused { .. }) => StatusCode::FORBIDDEN,
            LogsError::File(LogFileError::Open { source, .. })
                if source.kind() == io::ErrorKind::NotFound =>
            {
                StatusCode::NOT_FOUND
            }
            LogsError::File(LogFileError::Open { .. }) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// A container log file that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum LogFileError {
    /// Not a file the kubelet serves: outside the logs root, a symbolic
    /// link, not a regular file, not an absolute path.
    #[error("refusing to serve log file {path:?}: {reason}")]
    Refused { path: PathBuf, reason: &'static str },
    #[error("failed to open log file {path:?}: {source}")]
    Open { path: PathBuf, source: io::Error },
}

/// Serve `/containerLogs/{namespace}/{pod}/{container}?{query}`: the file
/// is pumped by a task handed to `spawn`, which ends with the client, the
/// container (when following) or `cancel`.
pub async fn container_logs(
    view: &dyn NodeView,
    namespace: &str,
    pod: &str,
    container: &str,
    query: Option<&str>,
    tasks: &Tasks,
    cancel: &CancellationToken,
) -> Response<Body> {
    match start(view, namespace, pod, container, query, tasks, cancel).await {
        Ok(body) => plain_response(StatusCode::OK, body),
        Err(e) => {
            tracing::debug!(namespace, pod, container, error = %e, "container logs refused");
            plain_response(e.status(), full(e.to_string()))
        }
    }
}

/// Everything that can fail before the first byte: options, lookups, opening
/// the file and finding the tail. Then the file is pumped by a task.
async fn start(
    view: &dyn NodeView,
    namespace: &str,
    pod_name: &str,
    container: &str,
    query: Option<&str>,
    tasks: &Tasks,
    cancel: &CancellationToken,
) -> Result<Body, LogsError> {
    let params: Vec<(Cow<'_, str>, Cow<'_, str>)> =
        form_urlencoded::parse(query.unwrap_or_default().as_bytes()).collect();
    let opts = LogOptions::from_query(
        params.iter().map(|(k, v)| (k.as_ref(), v.as_ref())),
        SystemTime::now(),
    )?;
    let pod = view
        .pods()
        .into_iter()
        .find(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.metadata.name.as_deref() == Some(pod_name)
        })
        .ok_or_else(|| LogsError::PodNotFound(pod_name.to_owned()))?;
    let id = crilog::log_container_id(&pod, container, opts.previous)?;
    let cri = view.cri();
    let status = cri
        .container_status(&id)
        .await
        .map_err(|source| LogsError::Status {
            id: id.clone(),
            source,
        })?;
    if status.log_path.is_empty() {
        return Err(LogsError::NoLogPath(id));
    }
    let path = PathBuf::from(status.log_path);
    let root = view.logs_root();
    let tail = opts.tail_lines;
    let opened = {
        let (file_path, logs_root) = (path.clone(), root.clone());
        kubelet_tasks::off_thread(move || open_at_tail(&file_path, &logs_root, tail))
            .await
            .map_err(|join| LogFileError::Open {
                path: path.clone(),
                source: io::Error::other(join),
            })??
    };
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    let follow = opts
        .follow
        .then(|| Follow::new(cri, id, path, root, &opened.real_path));
    let pump = Pump::new(opened, &opts, tx);
    let cancel = cancel.clone();
    tasks.spawn_with(
        tracing::debug_span!("container-logs", namespace, pod = pod_name, container),
        Box::pin(async move {
            tokio::select! {
                () = pump.run(follow) => {}
                // Dropping the pump ends the body.
                () = cancel.cancelled() => {}
            }
        }),
    );
    Ok(ChannelBody(rx).boxed())
}

/// An open log file positioned where output starts.
struct Opened {
    file: File,
    /// The file's path as the kernel resolved it.
    real_path: PathBuf,
    /// (device, inode): tells a rotated file from this one.
    identity: (u64, u64),
    position: u64,
}

fn open_at_tail(path: &Path, root: &Path, tail: Option<u64>) -> Result<Opened, LogFileError> {
    let mut opened = open_log(path, root)?;
    if let Some(n) = tail {
        let io_err = |source| LogFileError::Open {
            path: path.to_owned(),
            source,
        };
        let start = crilog::tail_start(&mut opened.file, n).map_err(io_err)?;
        opened.file.seek(SeekFrom::Start(start)).map_err(io_err)?;
        opened.position = start;
    }
    Ok(opened)
}

/// Open a container log file the runtime named, if it is one the kubelet
/// may serve: an absolute path, no `..`, not a symbolic link itself, a
/// regular file, and really under `root` once every link is resolved.
fn open_log(path: &Path, root: &Path) -> Result<Opened, LogFileError> {
    let refused = |reason| LogFileError::Refused {
        path: path.to_owned(),
        reason,
    };
    let io_err = |source| LogFileError::Open {
        path: path.to_owned(),
        source,
    };
    if !path.is_absolute() {
        return Err(refused("not an absolute path"));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(refused("the path contains \"..\""));
    }
    let root = std::fs::canonicalize(root).map_err(io_err)?;
    // O_NONBLOCK: a FIFO planted in place of the file must not hang the open.
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) => return Err(refused("it is a symbolic link")),
        Err(e) => return Err(io_err(e.into())),
    };
    let file = File::from(fd);
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(refused("not a regular file"));
    }
    let real_path =
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(io_err)?;
    if !real_path.starts_with(&root) {
        return Err(refused("outside of the pod logs directory"));
    }
    Ok(Opened {
        file,
        real_path,
        identity: (meta.dev(), meta.ino()),
        position: 0,
    })
}

/// The response body: chunks sent by the pump; the pump sees the client
/// leave when this is dropped.
struct ChannelBody(mpsc::Receiver<io::Result<Bytes>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|r| r.map(Frame::data)))
    }
}

/// Whether to keep reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// At the end of the file for now.
    Eof,
    /// limitBytes or tailLines reached, or the client left.
    Stop,
}

/// Reads the log file, turns raw lines into output and sends it.
struct Pump {
    file: tokio::fs::File,
    identity: (u64, u64),
    position: u64,
    /// The start of a raw line whose end has not been read yet.
    carry: Vec<u8>,
    assembler: Assembler,
    writer: LineWriter,
    /// tailLines without follow: no more lines than asked for, even if the
    /// file grows meanwhile (upstream's limitedMode).
    lines_left: Option<u64>,
    tx: mpsc::Sender<io::Result<Bytes>>,
}

impl Pump {
    fn new(opened: Opened, opts: &LogOptions, tx: mpsc::Sender<io::Result<Bytes>>) -> Self {
        Pump {
            file: tokio::fs::File::from_std(opened.file),
            identity: opened.identity,
            position: opened.position,
            carry: Vec::new(),
            assembler: Assembler::default(),
            writer: LineWriter::new(opts),
            lines_left: opts.tail_lines.filter(|_| !opts.follow),
            tx,
        }
    }

    async fn run(mut self, follow: Option<Follow>) {
        let result = match follow {
            None => self.read_to_end().await,
            Some(follow) => self.follow(follow).await,
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "reading a container log failed");
            let _ = self.tx.send(Err(e)).await;
        }
    }

    async fn read_to_end(&mut self) -> io::Result<()> {
        if self.read_available().await? == Flow::Eof {
            self.finish().await;
        }
        Ok(())
    }

    /// The rest of the file: a last unterminated line and partial lines that
    /// never got their end are written as they are.
    async fn finish(&mut self) {
        let mut out = Vec::new();
        let mut flow = Flow::Eof;
        if !self.carry.is_empty() {
            let carry = std::mem::take(&mut self.carry);
            flow = self.line(&carry, &mut out);
        }
        if flow == Flow::Eof {
            for line in self.assembler.flush() {
                if self.emit(&line, &mut out) == Flow::Stop {
                    break;
                }
            }
        }
        self.send(out).await;
    }

    /// Read and send until the end of the file (or a reason to stop).
    async fn read_available(&mut self) -> io::Result<Flow> {
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let n = self.file.read(&mut chunk).await?;
            if n == 0 {
                return Ok(Flow::Eof);
            }
            self.position += n as u64;
            let mut out = Vec::new();
            let flow = self.consume(&chunk[..n], &mut out);
            if self.send(out).await == Flow::Stop || flow == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
    }

    /// Split `bytes` (after what was carried over) into raw lines and render them.
    fn consume(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Flow {
        let mut carry = std::mem::take(&mut self.carry);
        carry.extend_from_slice(bytes);
        let mut start = 0;
        let mut flow = Flow::Eof;
        while let Some(i) = carry[start..].iter().position(|b| *b == b'\n') {
            let end = start + i + 1;
            flow = self.line(&carry[start..end], out);
            start = end;
            if flow == Flow::Stop {
                break;
            }
        }
        carry.drain(..start);
        if carry.len() > MAX_RAW_LINE {
            // No runtime writes such a line: drop it rather than buffer without bound.
            carry.clear();
        }
        self.carry = carry;
        flow
    }

    /// One raw line: malformed ones are skipped, as upstream does.
    fn line(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Flow {
        match crilog::parse_line(raw) {
            Ok(entry) => match self.assembler.push(&entry) {
                Some(line) => self.emit(&line, out),
                None => Flow::Eof,
            },
            Err(e) => {
                tracing::debug!(error = %e, "skipping a malformed container log line");
                Flow::Eof
            }
        }
    }

    fn emit(&mut self, line: &LogLine, out: &mut Vec<u8>) -> Flow {
        if self.lines_left == Some(0) {
            return Flow::Stop;
        }
        self.writer.write(line, out);
        if let Some(left) = self.lines_left.as_mut() {
            *left -= 1;
        }
        if self.writer.done() || self.lines_left == Some(0) {
            Flow::Stop
        } else {
            Flow::Eof
        }
    }

    async fn send(&self, out: Vec<u8>) -> Flow {
        if out.is_empty() {
            return Flow::Eof;
        }
        match self.tx.send(Ok(Bytes::from(out))).await {
            Ok(()) => Flow::Eof,
            Err(_) => Flow::Stop,
        }
    }

    /// follow=true: read what is there, then wait for more until the
    /// container stops or the client leaves.
    async fn follow(&mut self, mut follow: Follow) -> io::Result<()> {
        let mut check = tokio::time::interval(CONTAINER_CHECK_PERIOD);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.read_available().await? == Flow::Stop {
                return Ok(());
            }
            if self.reopen_if_replaced(&follow).await? == Flow::Stop {
                return Ok(());
            }
            tokio::select! {
                _ = self.tx.closed() => return Ok(()),
                _ = follow.changes.changed() => {}
                _ = check.tick() => {
                    if !follow.container_running().await {
                        // Whatever it wrote before it stopped, then the end.
                        if self.read_available().await? == Flow::Eof {
                            self.finish().await;
                        }
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The runtime rotated the file (a new file at the path) or truncated it:
    /// continue with the new file, or from the start.
    async fn reopen_if_replaced(&mut self, follow: &Follow) -> io::Result<Flow> {
        let meta = match tokio::fs::symlink_metadata(&follow.path).await {
            Ok(meta) => meta,
            // Between the rename and the new file: keep waiting.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Flow::Eof),
            Err(e) => return Err(e),
        };
        if (meta.dev(), meta.ino()) == self.identity {
            if meta.len() < self.position {
                self.file.seek(SeekFrom::Start(0)).await?;
                self.position = 0;
                self.carry.clear();
            }
            return Ok(Flow::Eof);
        }
        // Lines written to the old file just before the rotation come first.
        if self.read_available().await? == Flow::Stop {
            return Ok(Flow::Stop);
        }
        let (path, root) = (follow.path.clone(), follow.root.clone());
        let opened = kubelet_tasks::off_thread(move || open_log(&path, &root))
            .await
            .map_err(io::Error::other)?;
        match opened {
            Ok(opened) => {
                self.file = tokio::fs::File::from_std(opened.file);
                self.identity = opened.identity;
                self.position = 0;
                self.carry.clear();
                Ok(Flow::Eof)
            }
            Err(LogFileError::Open { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(Flow::Eof)
            }
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

/// What a follower needs besides the file.
struct Follow {
    cri: CriClient,
    container_id: String,
    /// The path the runtime gave (where a rotated file reappears).
    path: PathBuf,
    root: PathBuf,
    changes: Changes,
}

impl Follow {
    fn new(
        cri: CriClient,
        container_id: String,
        path: PathBuf,
        root: PathBuf,
        real_path: &Path,
    ) -> Self {
        let dir = real_path.parent().unwrap_or(Path::new("/"));
        Follow {
            cri,
            container_id,
            path,
            root,
            changes: Changes::watch(dir),
        }
    }

    /// Upstream stops following once the container is not running, or on
    /// any error asking.
    async fn container_running(&self) -> bool {
        match self.cri.container_status(&self.container_id).await {
            Ok(status) => status.state == ContainerState::ContainerRunning as i32,
            Err(e) => {
                tracing::debug!(container = %self.container_id, error = %e, "stop following logs");
                false
            }
        }
    }
}

/// Wakes a follower when the log directory changes (inotify), or every
/// POLL_PERIOD without inotify.
struct Changes {
    stream: Option<EventStream<[u8; 4096]>>,
}

impl Changes {
    fn watch(dir: &Path) -> Self {
        let mask = WatchMask::MODIFY
            | WatchMask::CREATE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::DELETE
            | WatchMask::ATTRIB
            | WatchMask::ONLYDIR;
        let stream = Inotify::init()
            .and_then(|inotify| inotify.into_event_stream([0u8; 4096]))
            .and_then(|stream| stream.watches().add(dir, mask).map(|_| stream));
        match stream {
            Ok(stream) => Changes {
                stream: Some(stream),
            },
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "no inotify for log following; polling");
                Changes { stream: None }
            }
        }
    }

    async fn changed(&mut self) {
        let Some(stream) = self.stream.as_mut() else {
            return tokio::time::sleep(POLL_PERIOD).await;
        };
        match stream.next().await {
            Some(Ok(_)) => {}
            other => {
                tracing::debug!(event = ?other.map(|r| r.err()), "inotify stream ended; polling");
                self.stream = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use std::io::Write as _;

    use k8s_openapi::api::core::v1::{
        ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStatus, Pod, PodStatus,
    };
    use kubelet_core::testing::{PodBuilder, container};
    use kubelet_cri::fake::FakeRuntime;
    use kubelet_cri::v1 as cri;

    use super::*;

    const IMAGE: &str = "docker.io/library/busybox:latest";
    const APP_LOG: &str = "\
2024-01-02T03:04:05.000000001Z stdout F line 1
2024-01-02T03:04:06Z stderr F line 2
not a CRI line
2024-01-02T03:04:07.5Z stdout P part
2024-01-02T03:04:08Z stdout F ial
";

    struct View {
        pods: Mutex<Vec<Pod>>,
        cri: CriClient,
        root: PathBuf,
    }

    impl NodeView for View {
        fn node_name(&self) -> String {
            "node".into()
        }
        fn problems(&self) -> Vec<(&'static str, String)> {
            Vec::new()
        }
        fn pods(&self) -> Vec<Pod> {
            self.pods.lock().clone()
        }
        fn cri(&self) -> CriClient {
            self.cri.clone()
        }
        fn logs_root(&self) -> PathBuf {
            self.root.clone()
        }
        fn configz(&self) -> serde_json::Value {
            serde_json::Value::Null
        }
        fn metrics_text(&self) -> String {
            String::new()
        }
        fn probe_metrics_text(&self) -> String {
            String::new()
        }
        fn summary(
            &self,
            _only_cpu_and_memory: bool,
        ) -> futures::future::BoxFuture<'_, Result<serde_json::Value, crate::BoxError>> {
            Box::pin(async { Ok(serde_json::json!({})) })
        }
        fn resource_metrics_text(&self) -> futures::future::BoxFuture<'_, String> {
            Box::pin(async { String::new() })
        }
        fn cadvisor_metrics_text(&self) -> futures::future::BoxFuture<'_, String> {
            Box::pin(async { String::new() })
        }
    }

    struct Harness {
        view: View,
        /// Where the pump is spawned.
        tasks: Tasks,
        cancel: CancellationToken,
        fake: FakeRuntime,
        /// The pod's log directory (the sandbox's log_directory).
        pod_dir: PathBuf,
        /// The running `app` (its previous instance has exited).
        app: String,
        dir: tempfile::TempDir,
    }

    fn running(name: &str, id: &str, last: Option<&str>) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: Some(format!("containerd://{id}")),
            state: Some(ApiState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            last_state: last.map(|old| ApiState {
                terminated: Some(ContainerStateTerminated {
                    container_id: Some(format!("containerd://{old}")),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A pod `default/web` with containers `app` (running, one previous
    /// instance), `evil` and `dirlink`, whose log paths the test plants.
    async fn harness() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("pods");
        let pod_dir = root.join("default_web_uid-web");
        std::fs::create_dir_all(&pod_dir).unwrap();
        let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        fake.add_image(IMAGE);
        let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5)).unwrap();
        let sandbox_config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "uid-web".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: pod_dir.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let sandbox = cri
            .run_pod_sandbox(sandbox_config.clone(), String::new())
            .await
            .unwrap();
        let create = async |name: &str, attempt: u32| {
            let config = cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: name.into(),
                    attempt,
                }),
                image: Some(cri::ImageSpec {
                    image: IMAGE.into(),
                    ..Default::default()
                }),
                log_path: format!("{name}/{attempt}.log"),
                ..Default::default()
            };
            let id = cri
                .create_container(&sandbox, config, sandbox_config.clone())
                .await
                .unwrap();
            cri.start_container(&id).await.unwrap();
            id
        };
        let old_app = create("app", 0).await;
        let app = create("app", 1).await;
        let evil = create("evil", 0).await;
        let dirlink = create("dirlink", 0).await;
        assert!(fake.exit_container(&old_app, 1));

        std::fs::create_dir_all(pod_dir.join("app")).unwrap();
        std::fs::write(
            pod_dir.join("app/0.log"),
            "2024-01-01T00:00:00Z stdout F before restart\n",
        )
        .unwrap();
        std::fs::write(pod_dir.join("app/1.log"), APP_LOG).unwrap();

        let pod = PodBuilder::new("web")
            .namespace("default")
            .containers(["app", "evil", "dirlink"].map(container))
            .status(PodStatus {
                container_statuses: Some(vec![
                    running("app", &app, Some(&old_app)),
                    running("evil", &evil, None),
                    running("dirlink", &dirlink, None),
                ]),
                ..Default::default()
            })
            .build();
        Harness {
            view: View {
                pods: Mutex::new(vec![pod]),
                cri,
                root,
            },
            tasks: Tasks::new(CancellationToken::new()),
            cancel: CancellationToken::new(),
            fake,
            pod_dir,
            app,
            dir,
        }
    }

    async fn get(h: &Harness, pod: &str, container: &str, query: &str) -> (StatusCode, String) {
        let resp = container_logs(
            &h.view,
            "default",
            pod,
            container,
            Some(query),
            &h.tasks,
            &h.cancel,
        )
        .await;
        let status = resp.status();
        assert_eq!(
            resp.headers().get(hyper::header::CONTENT_TYPE).unwrap(),
            "text/plain; charset=utf-8"
        );
        let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
            .await
            .expect("body ends")
            .unwrap()
            .to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn serves_selected_lines() {
        let h = harness().await;
        let cases = [
            ("", "line 1\nline 2\npartial\n"),
            (
                "tailLines=2&timestamps=true",
                "2024-01-02T03:04:06.000000000Z line 2\n2024-01-02T03:04:07.500000000Z partial\n",
            ),
            ("tail=1", "partial\n"),
            ("tail=all&tailLines=1", "line 1\nline 2\npartial\n"),
            ("limitBytes=9", "line 1\nli"),
            ("sinceTime=2024-01-02T03%3A04%3A06Z", "line 2\npartial\n"),
            ("sinceSeconds=60", ""),
            ("stream=Stderr", "line 2\n"),
            ("previous=true", "before restart\n"),
            ("previous=1&tailLines=0", ""),
        ];
        for (query, want) in cases {
            assert_eq!(
                get(&h, "web", "app", query).await,
                (StatusCode::OK, want.to_owned()),
                "{query}"
            );
        }
    }

    #[tokio::test]
    async fn refuses_bad_requests() {
        let h = harness().await;
        let cases = [
            (
                "web",
                "app",
                "tailLines=ten",
                StatusCode::BAD_REQUEST,
                "\"tailLines\"",
            ),
            (
                "web",
                "app",
                "follow=maybe",
                StatusCode::BAD_REQUEST,
                "\"follow\"",
            ),
            (
                "web",
                "app",
                "sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z",
                StatusCode::UNPROCESSABLE_ENTITY,
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            ),
            (
                "web",
                "app",
                "limitBytes=0",
                StatusCode::UNPROCESSABLE_ENTITY,
                "limitBytes",
            ),
            (
                "nope",
                "app",
                "",
                StatusCode::NOT_FOUND,
                "pod \"nope\" does not exist",
            ),
            ("..", "app", "", StatusCode::NOT_FOUND, "does not exist"),
            ("%2e%2e", "app", "", StatusCode::NOT_FOUND, "does not exist"),
            (
                "web",
                "../app",
                "",
                StatusCode::NOT_FOUND,
                "container \"../app\" not found in pod \"web\"",
            ),
        ];
        for (pod, container, query, status, message) in cases {
            let (got_status, body) = get(&h, pod, container, query).await;
            assert_eq!(got_status, status, "{pod}/{container}?{query}: {body}");
            assert!(body.contains(message), "{pod}/{container}?{query}: {body}");
        }
        // No previous instance of `evil`.
        let (status, body) = get(&h, "web", "evil", "previous=true").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body,
            "previous terminated container \"evil\" in pod \"web\" not found"
        );
    }

    #[tokio::test]
    async fn refuses_files_outside_the_logs_root() {
        let h = harness().await;
        // evil/0.log is a symlink to /etc/passwd, then to a file outside the root.
        std::fs::create_dir_all(h.pod_dir.join("evil")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", h.pod_dir.join("evil/0.log")).unwrap();
        let (status, body) = get(&h, "web", "evil", "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains("symbolic link"), "{body}");
        assert!(!body.contains("root:"), "{body}");

        let outside = h.dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(
            outside.join("0.log"),
            "2024-01-01T00:00:00Z stdout F secret\n",
        )
        .unwrap();
        // dirlink/ is a symlink to a directory outside the root.
        std::os::unix::fs::symlink(&outside, h.pod_dir.join("dirlink")).unwrap();
        let (status, body) = get(&h, "web", "dirlink", "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains("outside of the pod logs directory"), "{body}");
        assert!(!body.contains("secret"), "{body}");

        // A FIFO is not a log file (and must not hang the open).
        std::fs::remove_file(h.pod_dir.join("evil/0.log")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            h.pod_dir.join("evil/0.log"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let (status, body) = get(&h, "web", "evil", "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains("not a regular file"), "{body}");
    }

    /// Read frames until the collected text contains `want`.
    async fn read_until(body: &mut Body, seen: &mut String, want: &str) {
        let wait = async {
            while !seen.contains(want) {
                let frame = body.frame().await.expect("stream still open").unwrap();
                if let Ok(data) = frame.into_data() {
                    seen.push_str(std::str::from_utf8(&data).unwrap());
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {want:?}; got {seen:?}"));
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[tokio::test]
    async fn follows_until_the_container_stops() {
        let h = harness().await;
        let log = h.pod_dir.join("app/1.log");
        let resp = container_logs(
            &h.view,
            "default",
            "web",
            "app",
            Some("follow=true&tailLines=1"),
            &h.tasks,
            &h.cancel,
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        let mut seen = String::new();
        read_until(&mut body, &mut seen, "partial\n").await;
        assert_eq!(seen, "partial\n");

        append(
            &log,
            "2024-01-02T03:05:00Z stdout F line 3\n2024-01-02T03:05:01Z stderr P li",
        );
        read_until(&mut body, &mut seen, "line 3\n").await;
        append(&log, "ne 4\n2024-01-02T03:05:01Z stderr F !\n");
        read_until(&mut body, &mut seen, "line 4!\n").await;

        // The runtime rotates the file: the old one moves away, a new one starts.
        std::fs::rename(&log, h.pod_dir.join("app/1.log.20240102-030502")).unwrap();
        std::fs::write(&log, "2024-01-02T03:05:02Z stdout F after rotation\n").unwrap();
        read_until(&mut body, &mut seen, "after rotation\n").await;
        // ... or truncates it in place.
        std::fs::write(&log, "2024-01-02T03:05:03Z stdout F truncated\n").unwrap();
        read_until(&mut body, &mut seen, "truncated\n").await;
        assert_eq!(
            seen,
            "partial\nline 3\nline 4!\nafter rotation\ntruncated\n"
        );

        // The container stops: its last words, then the end of the stream.
        append(&log, "2024-01-02T03:05:04Z stdout F bye\n");
        assert!(h.fake.exit_container(&h.app, 0));
        let rest = tokio::time::timeout(Duration::from_secs(10), body.collect())
            .await
            .expect("the stream ends once the container stopped")
            .unwrap()
            .to_bytes();
        seen.push_str(std::str::from_utf8(&rest).unwrap());
        assert!(seen.ends_with("truncated\nbye\n"), "{seen:?}");
    }

    #[tokio::test]
    async fn follower_leaves_with_the_client() {
        let h = harness().await;
        let resp = container_logs(
            &h.view,
            "default",
            "web",
            "app",
            Some("follow=1"),
            &h.tasks,
            &h.cancel,
        )
        .await;
        let mut body = resp.into_body();
        let mut seen = String::new();
        read_until(&mut body, &mut seen, "partial\n").await;
        drop(body);
        // The pump notices at once: no container status checks after that.
        let calls = h.fake.calls("ContainerStatus");
        tokio::time::sleep(CONTAINER_CHECK_PERIOD * 3).await;
        assert!(h.fake.calls("ContainerStatus") <= calls + 1);
    }

    #[tokio::test]
    async fn follower_is_a_spawned_task_that_stops_with_the_server() {
        let h = harness().await;
        let resp = container_logs(
            &h.view,
            "default",
            "web",
            "app",
            Some("follow=1"),
            &h.tasks,
            &h.cancel,
        )
        .await;
        assert_eq!(h.tasks.running(), 1);
        let mut body = resp.into_body();
        let mut seen = String::new();
        read_until(&mut body, &mut seen, "partial\n").await;
        // The container keeps running: only the server's cancellation ends it.
        h.cancel.cancel();
        let rest = tokio::time::timeout(Duration::from_secs(10), body.collect())
            .await
            .expect("the body ends when the server stops")
            .unwrap();
        assert!(rest.to_bytes().is_empty());
    }
}
