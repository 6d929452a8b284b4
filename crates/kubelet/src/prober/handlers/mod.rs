//! Handler runners shared by probes and lifecycle hooks (upstream's
//! pkg/probe/{exec,http,tcp,grpc}): run one resolved action against a
//! container and say Success, Warning (success, with something to report)
//! or Failure, with the output upstream puts in events. Exec and tcpSocket
//! live here; httpGet and grpc in their own modules.

mod grpc;
pub(crate) mod http;

use std::io;
use std::time::Duration;

use kubelet_core::probe::{ProbeAction, join_host_port};
use kubelet_cri::client::{CriClient, CriError};
use tokio::net::TcpStream;

pub use grpc::run_grpc;
pub use http::run_http;

/// How much of a response body or command output is kept for messages
/// (upstream's maxRespBodyLength / maxReadLength).
pub const MAX_OUTPUT: usize = 10 * 1024;

/// A handler's verdict (upstream's probe.Result without Unknown, which is an error here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Success, with a warning worth an event (an unfollowed redirect).
    Warning,
    Failure,
}

/// The verdict and the output for events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerResult {
    pub outcome: Outcome,
    pub output: String,
}

impl HandlerResult {
    fn new(outcome: Outcome, output: impl Into<String>) -> Self {
        HandlerResult {
            outcome,
            output: output.into(),
        }
    }
}

/// The handler could not run at all (the result is unknown).
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The runtime failed the exec; shown as Go's gRPC errors print, as
    /// upstream's events do.
    #[error("rpc error: code = {:?} desc = {}", .0.code, .0.message)]
    Exec(#[source] CriError),
}

/// Run any resolved action; `container_id` is the raw runtime id (exec only).
pub async fn run_action(
    cri: &CriClient,
    container_id: &str,
    action: &ProbeAction,
    timeout: Duration,
) -> Result<HandlerResult, HandlerError> {
    match action {
        ProbeAction::Exec { command } => {
            run_exec(cri, container_id, command.clone(), timeout).await
        }
        ProbeAction::Http(get) => Ok(run_http(get, timeout).await),
        ProbeAction::Tcp { host, port } => Ok(run_tcp(host, *port, timeout).await),
        ProbeAction::Grpc {
            host,
            port,
            service,
        } => Ok(run_grpc(host, *port, service, timeout).await),
    }
}

fn truncated(mut bytes: Vec<u8>) -> String {
    bytes.truncate(MAX_OUTPUT);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Exec through CRI ExecSync: exit 0 is success, anything else a failure
/// with the combined output; the runtime's deadline is a timed-out failure.
pub async fn run_exec(
    cri: &CriClient,
    container_id: &str,
    command: Vec<String>,
    timeout: Duration,
) -> Result<HandlerResult, HandlerError> {
    let joined = command.join(" ");
    match cri.exec_sync(container_id, command, timeout).await {
        Ok(resp) => {
            let mut output = resp.stdout;
            output.extend_from_slice(&resp.stderr);
            let outcome = if resp.exit_code == 0 {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            Ok(HandlerResult::new(outcome, truncated(output)))
        }
        Err(e) if e.code == tonic::Code::DeadlineExceeded => Ok(HandlerResult::new(
            Outcome::Failure,
            format!("command {joined:?} timed out"),
        )),
        Err(e) => Err(HandlerError::Exec(e)),
    }
}

/// Go's text for a failed dial ("dial tcp 10.0.0.1:80: connect: connection refused").
fn dial_error(addr: &str, e: &io::Error) -> String {
    let reason = match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        io::ErrorKind::TimedOut => return format!("dial tcp {addr}: i/o timeout"),
        _ => e.to_string(),
    };
    format!("dial tcp {addr}: connect: {reason}")
}

/// Connect; an error is the message for the failure.
pub(crate) async fn connect(host: &str, port: u16) -> Result<TcpStream, String> {
    TcpStream::connect((host, port))
        .await
        .map_err(|e| dial_error(&join_host_port(host, port), &e))
}

/// Connect within `timeout`.
async fn dial(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, String> {
    match tokio::time::timeout(timeout, connect(host, port)).await {
        Ok(connected) => connected,
        Err(_) => Err(format!(
            "dial tcp {}: i/o timeout",
            join_host_port(host, port)
        )),
    }
}

/// tcpSocket: success when a connection opens within the timeout.
pub async fn run_tcp(host: &str, port: u16, timeout: Duration) -> HandlerResult {
    match dial(host, port, timeout).await {
        Ok(_) => HandlerResult::new(Outcome::Success, ""),
        Err(msg) => HandlerResult::new(Outcome::Failure, msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::net::TcpListener;

    pub(super) const TIMEOUT: Duration = Duration::from_secs(1);

    /// A local address nothing listens on.
    pub(super) async fn closed_port() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    }

    #[tokio::test]
    async fn tcp_probe() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        let got = run_tcp("127.0.0.1", open.port(), TIMEOUT).await;
        assert_eq!(got.outcome, Outcome::Success);
        let closed = closed_port().await;
        assert_eq!(
            run_tcp("127.0.0.1", closed.port(), TIMEOUT).await,
            HandlerResult::new(
                Outcome::Failure,
                format!("dial tcp {closed}: connect: connection refused")
            )
        );
    }
}
