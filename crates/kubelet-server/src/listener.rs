//! Where every kubelet server meets the network (the kubelet API, healthz,
//! the read-only port): a cap on the connections a listener serves at once,
//! back-off after a failed accept (logged once per burst), and each
//! connection's limits (TLS handshake, the first request's header, idle
//! keep-alive, header size). So a client without credentials that opens
//! connections and leaves them idle ties up at most a listener's cap, for
//! at most a timeout, and never spins the accept loop.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body as HttpBody, Incoming};
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use kubelet_core::metrics::KubeletMetrics;
use rustix::process::{Resource, getrlimit, setrlimit};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use kubelet_tasks::Tasks;

/// The largest request header read: upstream's `MaxHeaderBytes: 1 << 20`
/// (pkg/kubelet/server/server.go, the kubelet API and the read-only port).
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// How long a connection that has served a request may wait for the next
/// one (and take to send its header): upstream's `IdleTimeout: 90 *
/// time.Second` (pkg/kubelet/server/server.go).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How long a new connection has to send the whole header of its first
/// request. rkubelet's own: upstream sets no ReadHeaderTimeout, so Go falls
/// back to its `ReadTimeout` of 4 h (and the healthz server has none).
pub const READ_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to finish the TLS handshake. rkubelet's own:
/// upstream's is bounded only by that 4 h `ReadTimeout`; 10 s is Go's
/// `http.DefaultTransport` TLSHandshakeTimeout, the kubelet clients' side.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most connections one listener serves at once (rkubelet's own;
/// upstream has no cap). With a low file-handle limit the cap is an eighth
/// of it (see [`connection_cap`]), so three listeners full of idle
/// connections leave most handles to the runtime, the manifest directory
/// and the pods.
pub const MAX_CONNECTIONS: usize = 512;

/// The listen backlog, where connections beyond the cap wait: Go listens
/// with the kernel's `net.core.somaxconn` (4096 since Linux 5.4), which also
/// caps a larger value; tokio's `TcpListener::bind` would take 128.
const LISTEN_BACKLOG: u32 = 4096;

/// The smallest cap, however low the file-handle limit.
const MIN_CONNECTIONS: usize = 16;

/// Back-off after a failed accept, doubling per failure in a row: Go's
/// `http.Server.Serve` (5 ms up to 1 s).
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A listener's cap for a soft file-handle limit (`None`: unlimited).
pub fn connection_cap(nofile: Option<u64>) -> usize {
    nofile
        .map_or(MAX_CONNECTIONS, |n| {
            usize::try_from(n / 8).unwrap_or(MAX_CONNECTIONS)
        })
        .clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
}

/// The cap for this process's current soft RLIMIT_NOFILE.
pub fn default_connection_cap() -> usize {
    connection_cap(getrlimit(Resource::Nofile).current)
}

/// Set RLIMIT_NOFILE, soft and hard, to `max_open_files` (upstream's
/// maxOpenFiles, applied at start). When that is refused (raising the hard
/// limit needs CAP_SYS_RESOURCE), the soft limit is raised to the hard one,
/// as every Go program does at start since Go 1.19, and the refusal is
/// returned beside the limit in force. Returns the soft limit now in force
/// (`None`: unlimited).
pub fn set_nofile_limit(max_open_files: u64) -> (Option<u64>, Option<std::io::Error>) {
    let wanted = rustix::process::Rlimit {
        current: Some(max_open_files),
        maximum: Some(max_open_files),
    };
    let refused = match setrlimit(Resource::Nofile, wanted) {
        Ok(()) => return (Some(max_open_files), None),
        Err(e) => std::io::Error::from(e),
    };
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    (getrlimit(Resource::Nofile).current, Some(refused))
}

/// The pause before the next accept after `failures` failed accepts in a row.
fn accept_backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    ACCEPT_BACKOFF_MIN
        .saturating_mul(1 << doublings)
        .min(ACCEPT_BACKOFF_MAX)
}

/// A bound TCP listener of the server `server` (`kubelet-api`, `healthz`,
/// `readonly`: the label of `kubelet_server_open_connections`), serving at
/// most `cap` connections at once.
pub struct Listener {
    tcp: TcpListener,
    server: &'static str,
    slots: Arc<Semaphore>,
    metrics: KubeletMetrics,
}

/// One open connection: its slot under the cap, counted in the gauge.
struct Open {
    _slot: OwnedSemaphorePermit,
    server: &'static str,
    metrics: KubeletMetrics,
}

impl Open {
    fn new(slot: OwnedSemaphorePermit, server: &'static str, metrics: KubeletMetrics) -> Self {
        metrics.server_open_connections.inc(&[server]);
        Open {
            _slot: slot,
            server,
            metrics,
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.metrics.server_open_connections.dec(&[self.server]);
    }
}

impl Listener {
    /// Listen on `addr` (`host:port`) with [`LISTEN_BACKLOG`].
    pub async fn bind(
        addr: &str,
        server: &'static str,
        cap: usize,
        metrics: KubeletMetrics,
    ) -> std::io::Result<Self> {
        let mut last = None;
        for addr in tokio::net::lookup_host(addr).await? {
            match listen(addr) {
                Ok(tcp) => {
                    return Ok(Listener {
                        tcp,
                        server,
                        slots: Arc::new(Semaphore::new(cap)),
                        metrics,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to listen on")
        }))
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Accept until `cancel`, handing each connection to `handle` in a task
    /// of its own (through `spawn`). At the cap, nothing is accepted until a
    /// connection ends (new ones wait in the kernel's backlog); after a
    /// failed accept (out of file handles, ...) the loop backs off.
    pub async fn serve<F, Fut>(self, tasks: Tasks, cancel: CancellationToken, handle: F)
    where
        F: Fn(TcpStream, SocketAddr) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let server = self.server;
        let mut failures: u32 = 0;
        loop {
            let slot = tokio::select! {
                slot = self.slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_closed) => return,
                },
                () = cancel.cancelled() => return,
            };
            let accepted = tokio::select! {
                accepted = self.tcp.accept() => accepted,
                () = cancel.cancelled() => return,
            };
            match accepted {
                Ok((tcp, peer)) => {
                    if failures > 0 {
                        tracing::info!(server, failures, "accepting connections again");
                        failures = 0;
                    }
                    let open = Open::new(slot, server, self.metrics.clone());
                    let conn = handle(tcp, peer);
                    tasks.spawn_with(
                        tracing::debug_span!("connection", server, %peer),
                        Box::pin(async move {
                            conn.await;
                            drop(open);
                        }),
                    );
                }
                Err(e) => {
                    drop(slot);
                    self.metrics.server_accept_errors.inc(&[server]);
                    if failures == 0 {
                        tracing::warn!(
                            server,
                            error = %e,
                            "accept failed; backing off (not logged again until an accept succeeds)"
                        );
                    }
                    failures = failures.saturating_add(1);
                    tokio::select! {
                        () = tokio::time::sleep(accept_backoff(failures)) => {}
                        () = cancel.cancelled() => return,
                    }
                }
            }
        }
    }
}

/// A socket listening on `addr`, as tokio's `TcpListener::bind` (with
/// SO_REUSEADDR) but with [`LISTEN_BACKLOG`].
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The server side of a TLS handshake, within [`TLS_HANDSHAKE_TIMEOUT`].
pub async fn tls_handshake(acceptor: &TlsAcceptor, tcp: TcpStream) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

/// Serve HTTP/1.1 (with upgrades) on `io` until the client leaves, breaks a
/// limit, or `cancel` (then the request in flight is finished): the first
/// request's header within [`READ_HEADER_TIMEOUT`], each later one within
/// [`IDLE_TIMEOUT`], headers of at most [`MAX_HEADER_BYTES`].
pub async fn serve_http1<I, S, B>(io: I, service: S, cancel: CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<B>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: HttpBody + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let first = Arc::new(Notify::new());
    let service = FirstRequest {
        inner: service,
        seen: first.clone(),
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // hyper's header timer also runs while a kept-alive connection
        // waits for its next request: the idle timeout.
        .header_read_timeout(IDLE_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES)
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let first_request = async {
        tokio::select! {
            () = first.notified() => std::future::pending().await,
            () = tokio::time::sleep(READ_HEADER_TIMEOUT) => {}
        }
    };
    tokio::select! {
        res = conn.as_mut() => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        () = first_request => tracing::debug!("no request header in time: connection closed"),
        () = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
    }
}

/// A service that tells `seen` a request (its whole header) has arrived.
struct FirstRequest<S> {
    inner: S,
    seen: Arc<Notify>,
}

impl<S, R> Service<R> for FirstRequest<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, req: R) -> S::Future {
        self.seen.notify_one();
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Full;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn caps_follow_the_file_handle_limit() {
        for (nofile, want) in [
            (None, MAX_CONNECTIONS),
            (Some(1_048_576), MAX_CONNECTIONS),
            (Some(4096), MAX_CONNECTIONS),
            (Some(1024), 128),
            (Some(512), 64),
            (Some(64), MIN_CONNECTIONS),
            (Some(0), MIN_CONNECTIONS),
        ] {
            assert_eq!(connection_cap(nofile), want, "{nofile:?}");
        }
    }

    #[test]
    fn accept_backoff_doubles_from_5ms_to_1s() {
        for (failures, ms) in [
            (1, 5),
            (2, 10),
            (3, 20),
            (8, 640),
            (9, 1000),
            (40, 1000),
            (u32::MAX, 1000),
        ] {
            assert_eq!(
                accept_backoff(failures),
                Duration::from_millis(ms),
                "{failures}"
            );
        }
    }

    struct Plain {
        addr: SocketAddr,
        metrics: KubeletMetrics,
        cancel: CancellationToken,
    }

    fn tokio_spawner() -> Tasks {
        Tasks::new(CancellationToken::new())
    }

    /// A plain-HTTP server answering "ok", capped at `cap` connections.
    async fn plain(cap: usize) -> Plain {
        let metrics = KubeletMetrics::new("node-a");
        let listener = Listener::bind("127.0.0.1:0", "healthz", cap, metrics.clone())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        tokio::spawn(
            listener.serve(tokio_spawner(), cancel.clone(), move |tcp, _| {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                serve_http1(tcp, svc, token.clone())
            }),
        );
        Plain {
            addr,
            metrics,
            cancel,
        }
    }

    /// Read until the server closes the connection (failing the test if it
    /// has not after twice the longest timeout); what it sent.
    async fn until_closed(tcp: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let read = tokio::time::timeout(2 * IDLE_TIMEOUT, tcp.read_to_end(&mut out)).await;
        assert!(
            read.is_ok(),
            "still open: {}",
            String::from_utf8_lossy(&out)
        );
        String::from_utf8_lossy(&out).into_owned()
    }

    const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    const GET_CLOSE: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";

    #[tokio::test(start_paused = true)]
    async fn idle_and_slow_connections_are_closed_at_their_timeouts() {
        let srv = plain(MAX_CONNECTIONS).await;
        // Silent from the start: closed at READ_HEADER_TIMEOUT.
        let start = tokio::time::Instant::now();
        let mut silent = TcpStream::connect(srv.addr).await.unwrap();
        assert_eq!(until_closed(&mut silent).await, "");
        assert_eq!(start.elapsed(), READ_HEADER_TIMEOUT);

        // Half a header, never finished: the same.
        let start = tokio::time::Instant::now();
        let mut slow = TcpStream::connect(srv.addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nho")
            .await
            .unwrap();
        assert_eq!(until_closed(&mut slow).await, "");
        assert_eq!(start.elapsed(), READ_HEADER_TIMEOUT);

        // One request answered, then idle: closed at IDLE_TIMEOUT.
        let start = tokio::time::Instant::now();
        let mut kept = TcpStream::connect(srv.addr).await.unwrap();
        kept.write_all(GET).await.unwrap();
        let answer = until_closed(&mut kept).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
        assert_eq!(start.elapsed(), IDLE_TIMEOUT);
        srv.cancel.cancel();
    }

    #[tokio::test]
    async fn headers_up_to_upstreams_max_header_bytes_are_read() {
        // hyper's own limit is ~400 KiB; upstream reads 1 MiB.
        let srv = plain(MAX_CONNECTIONS).await;
        let mut tcp = TcpStream::connect(srv.addr).await.unwrap();
        let big = format!(
            "GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-big: {}\r\n\r\n",
            "a".repeat(MAX_HEADER_BYTES - 1024)
        );
        tcp.write_all(big.as_bytes()).await.unwrap();
        let answer = until_closed(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        srv.cancel.cancel();
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_for_a_slot() {
        let srv = plain(2).await;
        let mut first = TcpStream::connect(srv.addr).await.unwrap();
        let _second = TcpStream::connect(srv.addr).await.unwrap();
        // The third connects (the kernel's backlog) but is not served...
        let mut third = TcpStream::connect(srv.addr).await.unwrap();
        third.write_all(GET_CLOSE).await.unwrap();
        let mut byte = [0u8; 1];
        let waited = tokio::time::timeout(Duration::from_millis(200), third.read(&mut byte)).await;
        assert!(waited.is_err(), "served beyond the cap: {waited:?}");
        let open = || srv.metrics.server_open_connections.get(&["healthz"]);
        assert_eq!(open(), 2.0);
        // ...until one of the two leaves.
        first.write_all(GET_CLOSE).await.unwrap();
        until_closed(&mut first).await;
        let answer = until_closed(&mut third).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        srv.cancel.cancel();
    }
}
