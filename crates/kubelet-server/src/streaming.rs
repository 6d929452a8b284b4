//! `/exec`, `/attach` and `/portForward` (upstream: getExec/getAttach/
//! getPortForward in pkg/kubelet/server/server.go, the remotecommand and
//! portforward option parsing, and the UpgradeAwareHandler of
//! apimachinery's proxy): find the container (or sandbox), ask the CRI for a
//! streaming URL, then proxy the caller's upgrade request (SPDY/3.1 or
//! WebSocket, headers untouched) to that URL and splice the two connections.
//!
//! A spliced session ends when either side closes (closing the other: the
//! CRI session ends with the client), when no byte moved either way for
//! streamingConnectionIdleTimeout, or at shutdown.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kubelet_cri::v1 as cri;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::response::text_response;
use crate::{Body, NodeView};
use kubelet_tasks::Tasks;

/// Which streaming endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Exec,
    Attach,
    PortForward,
}

impl StreamKind {
    fn as_str(self) -> &'static str {
        match self {
            StreamKind::Exec => "exec",
            StreamKind::Attach => "attach",
            StreamKind::PortForward => "portForward",
        }
    }
}

/// What a streaming request asks for, from its path and query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRequest {
    pub kind: StreamKind,
    pub namespace: String,
    pub pod: String,
    /// The pod UID when the path carries one ("" otherwise).
    pub uid: String,
    /// The container (exec and attach).
    pub container: String,
    /// `command` query parameters, in order (exec).
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
    /// `port` query parameters (port-forward over WebSocket; SPDY clients
    /// name ports in stream headers instead).
    pub ports: Vec<i32>,
}

/// A streaming request the kubelet answers with an error.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreams,
    #[error("unable to parse {0:?} as a port")]
    BadPort(String),
    #[error("port {0:?} must be > 0")]
    ZeroPort(String),
    #[error("pod does not exist")]
    PodNotFound,
    #[error("container not found ({0:?})")]
    ContainerNotFound(String),
    #[error("pod not found ({0:?})")]
    SandboxNotFound(String),
    #[error("{0}")]
    Runtime(String),
    #[error("runtime streaming URL {0:?} is not a plain http:// URL")]
    BadUrl(String),
    /// A 500, as upstream's: UpgradeAwareHandler's BadRequest goes through
    /// the kubelet's `responder.Error`, which always writes
    /// StatusInternalServerError (pkg/kubelet/server/server.go; the 400 a
    /// client sees through the API server is the API server's own).
    #[error("Upgrade request required")]
    UpgradeRequired,
    #[error("error dialing backend: {0}")]
    Backend(String),
}

impl StreamError {
    fn status(&self) -> StatusCode {
        match self {
            StreamError::NoStreams | StreamError::BadPort(_) | StreamError::ZeroPort(_) => {
                StatusCode::BAD_REQUEST
            }
            StreamError::PodNotFound => StatusCode::NOT_FOUND,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Whether a query flag is on (the API server sends "1"; "true" is taken too).
fn flag(query: &HashMap<String, Vec<String>>, name: &str) -> bool {
    query
        .get(name)
        .and_then(|v| v.first())
        .is_some_and(|v| v == "1" || v == "true")
}

/// Parses a streaming request: `segments` are the path segments after the
/// endpoint (`{ns}/{pod}/{container}` or `{ns}/{pod}/{uid}/{container}`;
/// port-forward: `{ns}/{pod}` or `{ns}/{pod}/{uid}`). `None` when the path
/// has the wrong shape (a 404). `websocket`: port-forward ports come from
/// the query only for WebSocket requests (upstream's NewV4Options).
pub fn parse_request(
    kind: StreamKind,
    segments: &[&str],
    query: Option<&str>,
    websocket: bool,
) -> Option<Result<StreamRequest, StreamError>> {
    if segments.iter().any(|s| s.is_empty()) {
        return None;
    }
    let (namespace, pod, uid, container) = match (kind, segments) {
        (StreamKind::PortForward, [ns, pod]) => (*ns, *pod, "", ""),
        (StreamKind::PortForward, [ns, pod, uid]) => (*ns, *pod, *uid, ""),
        (StreamKind::PortForward, _) => return None,
        (_, [ns, pod, container]) => (*ns, *pod, "", *container),
        (_, [ns, pod, uid, container]) => (*ns, *pod, *uid, *container),
        _ => return None,
    };
    let mut params: HashMap<String, Vec<String>> = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        params
            .entry(k.into_owned())
            .or_default()
            .push(v.into_owned());
    }
    let mut req = StreamRequest {
        kind,
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        uid: uid.to_owned(),
        container: container.to_owned(),
        command: params.get("command").cloned().unwrap_or_default(),
        // The API server's names (api.ExecStdinParam and friends).
        stdin: flag(&params, "input"),
        stdout: flag(&params, "output"),
        stderr: flag(&params, "error"),
        tty: flag(&params, "tty"),
        ports: Vec::new(),
    };
    Some(match kind {
        StreamKind::PortForward => {
            if websocket {
                for p in params.get("port").into_iter().flatten() {
                    match p.parse::<u16>() {
                        Ok(0) => return Some(Err(StreamError::ZeroPort(p.clone()))),
                        Ok(port) => req.ports.push(i32::from(port)),
                        Err(_) => return Some(Err(StreamError::BadPort(p.clone()))),
                    }
                }
            }
            Ok(req)
        }
        _ => {
            if req.tty && req.stderr {
                // Upstream: "exec with tty and stderr is not supported, bypassing stderr".
                req.stderr = false;
            }
            if !req.stdin && !req.stdout && !req.stderr {
                Err(StreamError::NoStreams)
            } else {
                Ok(req)
            }
        }
    })
}

/// The pod `namespace/name` (with `uid` when not empty) among the kubelet's pods.
fn find_pod(pods: Vec<Pod>, req: &StreamRequest) -> Option<Pod> {
    pods.into_iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(req.namespace.as_str())
            && p.metadata.name.as_deref() == Some(req.pod.as_str())
            && (req.uid.is_empty() || p.metadata.uid.as_deref() == Some(req.uid.as_str()))
    })
}

/// The runtime ID of container `name` in the pod's status (`<runtime>://<id>`).
fn container_id(pod: &Pod, name: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .and_then(|c| c.container_id.as_deref())
        .and_then(|id| id.split_once("://").map(|(_, id)| id.to_owned()))
        .filter(|id| !id.is_empty())
}

/// The ready sandbox of the pod with `uid` (the newest when several).
async fn sandbox_id(view: &dyn NodeView, uid: &str) -> Result<String, StreamError> {
    let filter = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue {
            state: cri::PodSandboxState::SandboxReady as i32,
        }),
        label_selector: HashMap::from([("io.kubernetes.pod.uid".to_owned(), uid.to_owned())]),
        ..Default::default()
    };
    let sandboxes = view
        .cri()
        .list_pod_sandbox(Some(filter))
        .await
        .map_err(|e| StreamError::Runtime(e.to_string()))?;
    sandboxes
        .into_iter()
        .max_by_key(|s| s.created_at)
        .map(|s| s.id)
        .ok_or_else(|| StreamError::SandboxNotFound(uid.to_owned()))
}

/// The runtime's streaming URL for `req`.
async fn streaming_url(view: &dyn NodeView, req: &StreamRequest) -> Result<String, StreamError> {
    let pod = find_pod(view.pods(), req).ok_or(StreamError::PodNotFound)?;
    let cri = view.cri();
    let runtime = |e: kubelet_cri::client::CriError| StreamError::Runtime(e.to_string());
    match req.kind {
        StreamKind::PortForward => {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let pod_sandbox_id = sandbox_id(view, &uid).await?;
            cri.port_forward(cri::PortForwardRequest {
                pod_sandbox_id,
                port: req.ports.clone(),
            })
            .await
            .map_err(runtime)
        }
        StreamKind::Exec | StreamKind::Attach => {
            let container_id = container_id(&pod, &req.container)
                .ok_or_else(|| StreamError::ContainerNotFound(req.container.clone()))?;
            if req.kind == StreamKind::Exec {
                cri.exec(cri::ExecRequest {
                    container_id,
                    cmd: req.command.clone(),
                    tty: req.tty,
                    stdin: req.stdin,
                    stdout: req.stdout,
                    stderr: req.stderr,
                })
                .await
                .map_err(runtime)
            } else {
                cri.attach(cri::AttachRequest {
                    container_id,
                    stdin: req.stdin,
                    tty: req.tty,
                    stdout: req.stdout,
                    stderr: req.stderr,
                })
                .await
                .map_err(runtime)
            }
        }
    }
}

/// Whether the request asks for a protocol upgrade (`Connection: Upgrade`
/// and an `Upgrade` header), as SPDY and WebSocket clients do.
pub fn is_upgrade_request<B>(req: &Request<B>) -> bool {
    let connection_upgrade = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade && req.headers().contains_key(header::UPGRADE)
}

fn is_websocket<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Serves `/exec|/attach|/portForward/<segments>`: 404 for a malformed path,
/// an error answer (as upstream's) or the proxied upgrade.
pub async fn handle<B>(
    view: &dyn NodeView,
    kind: StreamKind,
    segments: &[&str],
    req: Request<B>,
    idle_timeout: Duration,
    tasks: &Tasks,
    cancel: &CancellationToken,
) -> Option<Response<Body>>
where
    B: hyper::body::Body + Send + 'static,
{
    let parsed = parse_request(kind, segments, req.uri().query(), is_websocket(&req))?;
    let answer = match parsed {
        Ok(stream) => match streaming_url(view, &stream).await {
            Ok(url) => proxy(req, &url, idle_timeout, tasks, cancel).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    Some(answer.unwrap_or_else(|e| {
        tracing::debug!(endpoint = kind.as_str(), error = %e, "streaming request refused");
        text_response(e.status(), format!("{e}\n"))
    }))
}

/// Proxies the upgrade request `req` to the runtime's `url` (upstream's
/// UpgradeAwareHandler with upgradeRequired): the backend's 101 is relayed
/// and the connections spliced; any other answer is relayed as it is.
pub async fn proxy<B>(
    mut req: Request<B>,
    url: &str,
    idle_timeout: Duration,
    tasks: &Tasks,
    cancel: &CancellationToken,
) -> Result<Response<Body>, StreamError>
where
    B: hyper::body::Body + Send + 'static,
{
    if !is_upgrade_request(&req) {
        return Err(StreamError::UpgradeRequired);
    }
    let bad_url = || StreamError::BadUrl(url.to_owned());
    let uri: Uri = url.parse().map_err(|_| bad_url())?;
    if uri.scheme_str() != Some("http") {
        return Err(bad_url());
    }
    let authority = uri.authority().ok_or_else(bad_url)?.clone();
    let port = authority.port_u16().unwrap_or(80);
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| StreamError::Backend(e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| StreamError::Backend(e.to_string()))?;
    tasks.spawn_with(
        tracing::debug_span!("stream-backend"),
        Box::pin(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "streaming backend connection ended");
            }
        }),
    );

    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut backend_req = Request::builder()
        .method(req.method().clone())
        .uri(path_and_query)
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| StreamError::Backend(e.to_string()))?;
    for (name, value) in req.headers() {
        if name != header::HOST && name != header::AUTHORIZATION {
            backend_req.headers_mut().append(name, value.clone());
        }
    }
    let host_value = HeaderValue::from_str(authority.as_str()).map_err(|_| bad_url())?;
    backend_req.headers_mut().insert(header::HOST, host_value);

    let mut backend_resp = sender
        .send_request(backend_req)
        .await
        .map_err(|e| StreamError::Backend(e.to_string()))?;

    let mut answer = Response::builder().status(backend_resp.status());
    for (name, value) in backend_resp.headers() {
        answer = answer.header(name, value);
    }
    if backend_resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let body = backend_resp
            .into_body()
            .map_err(std::io::Error::other)
            .boxed();
        return answer
            .body(body)
            .map_err(|e| StreamError::Backend(e.to_string()));
    }
    // SPDY clients (the API server) ping every few seconds: only other
    // frames count as activity.
    let spdy = backend_resp
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("spdy/"));
    let client_upgrade = hyper::upgrade::on(&mut req);
    let backend_upgrade = hyper::upgrade::on(&mut backend_resp);
    let cancel = cancel.clone();
    tasks.spawn_with(
        tracing::debug_span!("stream"),
        Box::pin(async move {
            let (client, backend) = match tokio::try_join!(client_upgrade, backend_upgrade) {
                Ok(both) => both,
                Err(e) => {
                    tracing::debug!(error = %e, "streaming upgrade failed");
                    return;
                }
            };
            match splice(
                TokioIo::new(client),
                TokioIo::new(backend),
                idle_timeout,
                spdy,
                &cancel,
            )
            .await
            {
                SpliceEnd::Idle => {
                    tracing::debug!(?idle_timeout, "streaming connection idle, closed")
                }
                end => tracing::debug!(?end, "streaming session ended"),
            }
        }),
    );
    answer
        .body(crate::full(Bytes::new()))
        .map_err(|e| StreamError::Backend(e.to_string()))
}

/// Why a spliced session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum SpliceEnd {
    /// The client closed (or failed).
    Client,
    /// The backend closed (or failed).
    Backend,
    /// No byte either way for the idle timeout.
    Idle,
    /// The server is shutting down.
    Cancelled,
}

/// Follows SPDY/3 framing in one direction of a spliced stream and says
/// whether bytes carried anything but PING frames (which keep a connection
/// open without using it).
#[derive(Debug, Default)]
pub struct SpdyActivity {
    header: Vec<u8>,
    /// Payload bytes of the current frame still to come.
    left: usize,
    ping: bool,
}

/// SPDY/3 control frame type PING.
const SPDY_PING: u16 = 6;

impl SpdyActivity {
    /// Feed bytes as they pass; true when any belonged to a frame other
    /// than a PING.
    pub fn feed(&mut self, mut bytes: &[u8]) -> bool {
        let mut active = false;
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = self.left.min(bytes.len());
                active |= !self.ping;
                self.left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (8 - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() < 8 {
                continue;
            }
            let h = std::mem::take(&mut self.header);
            let control = h[0] & 0x80 != 0;
            self.ping = control && u16::from_be_bytes([h[2], h[3]]) == SPDY_PING;
            self.left = usize::from(h[5]) << 16 | usize::from(h[6]) << 8 | usize::from(h[7]);
            active |= !self.ping;
        }
        active
    }
}

/// Copies bytes both ways between `client` and `backend` until one side
/// closes, nothing is said for `idle` (with `spdy`, PING frames do not
/// count), or `cancel`; both are then dropped (closed), as upstream's proxy
/// does once either half ends.
pub async fn splice<C, S>(
    client: C,
    backend: S,
    idle: Duration,
    spdy: bool,
    cancel: &CancellationToken,
) -> SpliceEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_rx, mut client_tx) = tokio::io::split(client);
    let (mut backend_rx, mut backend_tx) = tokio::io::split(backend);
    let mut up = vec![0u8; 32 * 1024];
    let mut down = vec![0u8; 32 * 1024];
    let (mut from_client, mut from_backend) = (SpdyActivity::default(), SpdyActivity::default());
    let deadline = tokio::time::sleep(idle);
    tokio::pin!(deadline);
    loop {
        let active = tokio::select! {
            n = client_rx.read(&mut up) => match n {
                Ok(n) if n > 0 => {
                    if backend_tx.write_all(&up[..n]).await.is_err() {
                        return SpliceEnd::Backend;
                    }
                    !spdy || from_client.feed(&up[..n])
                }
                _ => {
                    let _ = backend_tx.shutdown().await;
                    return SpliceEnd::Client;
                }
            },
            n = backend_rx.read(&mut down) => match n {
                Ok(n) if n > 0 => {
                    if client_tx.write_all(&down[..n]).await.is_err() {
                        return SpliceEnd::Client;
                    }
                    !spdy || from_backend.feed(&down[..n])
                }
                _ => {
                    let _ = client_tx.shutdown().await;
                    return SpliceEnd::Backend;
                }
            },
            () = &mut deadline => return SpliceEnd::Idle,
            () = cancel.cancelled() => return SpliceEnd::Cancelled,
        };
        if active {
            deadline.as_mut().reset(tokio::time::Instant::now() + idle);
        }
    }
}

#[cfg(test)]
mod tests {

    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use kubelet_core::testing::PodBuilder;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    fn spawner() -> Tasks {
        Tasks::new(CancellationToken::new())
    }

    #[test]
    fn parses_paths_and_queries() {
        use StreamKind::*;
        let ok = |kind, segs: &[&str], q: &str, ws| {
            parse_request(kind, segs, Some(q), ws).unwrap().unwrap()
        };
        let r = ok(
            Exec,
            &["ns", "p", "c"],
            "command=sh&command=-c&command=echo%20hi&input=1&output=1&tty=1&error=1",
            false,
        );
        assert_eq!(
            (
                r.namespace.as_str(),
                r.pod.as_str(),
                r.uid.as_str(),
                r.container.as_str()
            ),
            ("ns", "p", "", "c")
        );
        assert_eq!(r.command, ["sh", "-c", "echo hi"]);
        assert!(r.stdin && r.stdout && r.tty);
        assert!(!r.stderr, "tty drops stderr");
        let r = ok(Attach, &["ns", "p", "uid-1", "c"], "output=true", false);
        assert_eq!((r.uid.as_str(), r.container.as_str()), ("uid-1", "c"));
        let r = ok(PortForward, &["ns", "p"], "port=80&port=8080", true);
        assert_eq!(r.ports, [80, 8080]);
        let r = ok(PortForward, &["ns", "p", "uid-1"], "port=80", false);
        assert!(
            r.ports.is_empty(),
            "SPDY port-forward names ports in streams"
        );
        assert_eq!(r.uid, "uid-1");

        let err = |kind, segs: &[&str], q: &str, ws| {
            parse_request(kind, segs, Some(q), ws).unwrap().unwrap_err()
        };
        assert_eq!(
            err(Exec, &["ns", "p", "c"], "command=ls", false),
            StreamError::NoStreams
        );
        assert_eq!(
            err(PortForward, &["ns", "p"], "port=http", true),
            StreamError::BadPort("http".into())
        );
        assert_eq!(
            err(PortForward, &["ns", "p"], "port=0", true),
            StreamError::ZeroPort("0".into())
        );
        for (kind, segs) in [
            (Exec, &["ns", "p"][..]),
            (Exec, &["ns", "p", "u", "c", "x"][..]),
            (Exec, &["ns", "", "c"][..]),
            (PortForward, &["ns"][..]),
            (PortForward, &["ns", "p", "u", "c"][..]),
        ] {
            assert!(
                parse_request(kind, segs, None, false).is_none(),
                "{kind:?} {segs:?}"
            );
        }
    }

    #[test]
    fn finds_pods_and_container_ids() {
        let pod = PodBuilder::new("web")
            .namespace("default")
            .uid("uid-1")
            .status(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "nginx".into(),
                    container_id: Some("containerd://abc123".into()),
                    ..ContainerStatus::default()
                }]),
                init_container_statuses: Some(vec![ContainerStatus {
                    name: "init".into(),
                    container_id: Some("cri-o://def".into()),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            })
            .build();
        let req = |uid: &str| {
            parse_request(
                StreamKind::Exec,
                &["default", "web", "nginx"],
                Some("output=1"),
                false,
            )
            .unwrap()
            .map(|mut r| {
                r.uid = uid.to_owned();
                r
            })
            .unwrap()
        };
        assert!(find_pod(vec![pod.clone()], &req("")).is_some());
        assert!(find_pod(vec![pod.clone()], &req("uid-1")).is_some());
        assert!(find_pod(vec![pod.clone()], &req("uid-2")).is_none());
        assert_eq!(container_id(&pod, "nginx").as_deref(), Some("abc123"));
        assert_eq!(container_id(&pod, "init").as_deref(), Some("def"));
        assert_eq!(container_id(&pod, "other"), None);
    }

    /// A runtime streaming server: checks the request, answers `status`, then
    /// (for 101) echoes bytes until the client closes; reports the request head.
    async fn fake_backend(
        status_line: &'static str,
    ) -> (String, tokio::sync::oneshot::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/exec/tok3n?x=1", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = BufReader::new(stream);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                stream.read_line(&mut line).await.unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                head.push_str(&line);
            }
            let _ = tx.send(head);
            let mut stream = stream.into_inner();
            stream.write_all(status_line.as_bytes()).await.unwrap();
            let mut buf = [0u8; 1024];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => stream.write_all(&buf[..n]).await.unwrap(),
                }
            }
        });
        (url, rx)
    }

    /// A hyper server whose every request is proxied to `url`.
    async fn proxy_server(url: String, idle: Duration) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let url = url.clone();
                async move {
                    let cancel = CancellationToken::new();
                    let resp = proxy(req, &url, idle, &spawner(), &cancel)
                        .await
                        .unwrap_or_else(|e| text_response(e.status(), format!("{e}\n")));
                    Ok::<_, std::convert::Infallible>(resp)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
        addr
    }

    async fn read_head(stream: &mut TcpStream) -> String {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        String::from_utf8(head).unwrap()
    }

    #[tokio::test]
    async fn upgrade_is_proxied_and_bytes_spliced() {
        let (url, head) = fake_backend(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
        )
        .await;
        let addr = proxy_server(url.clone(), Duration::from_secs(60)).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(
                b"POST /exec/default/web/nginx?command=sh&input=1 HTTP/1.1\r\nHost: node-a:10250\r\n\
                  Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nAuthorization: Bearer secret\r\n\
                  X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: v3.channel.k8s.io\r\n\r\n",
            )
            .await
            .unwrap();
        let answer = read_head(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("x-stream-protocol-version: v4.channel.k8s.io"),
            "{answer}"
        );
        let head = head.await.unwrap();
        let host = url.trim_start_matches("http://").split('/').next().unwrap();
        assert!(
            head.starts_with("POST /exec/tok3n?x=1 HTTP/1.1\r\n"),
            "{head}"
        );
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains(&format!("host: {host}\r\n")), "{head}");
        assert!(lower.contains("upgrade: spdy/3.1"), "{head}");
        assert!(lower.contains("v3.channel.k8s.io"), "{head}");
        assert!(!lower.contains("authorization"), "{head}");

        client.write_all(b"hello spdy").await.unwrap();
        let mut echo = [0u8; 10];
        client.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"hello spdy");
    }

    #[tokio::test]
    async fn non_upgrade_answers_are_relayed_and_plain_requests_refused() {
        let (url, _head) =
            fake_backend("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nno stream").await;
        let addr = proxy_server(url, Duration::from_secs(60)).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /exec/a/b/c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            .await
            .unwrap();
        let head = read_head(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");
        let mut body = [0u8; 9];
        client.read_exact(&mut body).await.unwrap();
        assert_eq!(&body, b"no stream");

        let addr = proxy_server("http://127.0.0.1:1/".to_owned(), Duration::from_secs(60)).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /exec/a/b/c HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let head = read_head(&mut client).await;
        assert!(head.starts_with("HTTP/1.1 500"), "{head}");
        let mut body = [0u8; 25];
        client.read_exact(&mut body).await.unwrap();
        assert_eq!(&body, b"Upgrade request required\n");
    }

    #[tokio::test(start_paused = true)]
    async fn splice_ends_when_idle_or_a_side_closes() {
        let cancel = CancellationToken::new();
        // Traffic keeps the session open past the timeout; silence ends it.
        let (client, mut client_peer) = tokio::io::duplex(1024);
        let (backend, mut backend_peer) = tokio::io::duplex(1024);
        let idle = Duration::from_secs(10);
        let session = tokio::spawn(async move {
            splice(client, backend, idle, false, &CancellationToken::new()).await
        });
        let start = tokio::time::Instant::now();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(8)).await;
            client_peer.write_all(b"x").await.unwrap();
            let mut b = [0u8; 1];
            backend_peer.read_exact(&mut b).await.unwrap();
        }
        assert_eq!(session.await.unwrap(), SpliceEnd::Idle);
        assert_eq!(start.elapsed(), Duration::from_secs(34));
        // The backend's side closes when the client goes away.
        let mut b = [0u8; 1];
        assert_eq!(backend_peer.read(&mut b).await.unwrap(), 0);

        // The client closing ends it at once, closing the backend.
        let (client, client_peer) = tokio::io::duplex(1024);
        let (backend, mut backend_peer) = tokio::io::duplex(1024);
        let session = tokio::spawn(async move {
            splice(client, backend, idle, false, &CancellationToken::new()).await
        });
        drop(client_peer);
        assert_eq!(session.await.unwrap(), SpliceEnd::Client);
        assert_eq!(backend_peer.read(&mut b).await.unwrap(), 0);

        // Cancellation.
        let (client, _client_peer) = tokio::io::duplex(1024);
        let (backend, _backend_peer) = tokio::io::duplex(1024);
        cancel.cancel();
        assert_eq!(
            splice(client, backend, idle, false, &cancel).await,
            SpliceEnd::Cancelled
        );
    }

    #[test]
    fn spdy_pings_are_not_activity() {
        let ping = [0x80, 0x03, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 1];
        let data = [0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, b'h', b'i'];
        let syn_reply = [0x80, 0x03, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00];
        let mut a = SpdyActivity::default();
        assert!(!a.feed(&ping), "a ping");
        assert!(!a.feed(&[ping, ping].concat()), "two pings in one read");
        assert!(a.feed(&data), "a data frame");
        assert!(a.feed(&syn_reply), "another control frame");
        // Frames split across reads keep their meaning.
        assert!(!a.feed(&ping[..3]) && !a.feed(&ping[3..9]) && !a.feed(&ping[9..]));
        assert!(!a.feed(&data[..5]) && a.feed(&data[5..]));
    }
}
