//! The grpc handler (upstream's pkg/probe/grpc): grpc.health.v1.Health/Check
//! over plaintext HTTP/2 with tonic; SERVING is success.

use std::time::Duration;

use kubelet_core::probe::join_host_port;

use super::{HandlerResult, Outcome};

/// grpc.health.v1 messages (hand-written; the service has one RPC).
mod health {
    /// grpc.health.v1.HealthCheckRequest
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HealthCheckRequest {
        #[prost(string, tag = "1")]
        pub service: String,
    }

    /// grpc.health.v1.HealthCheckResponse
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HealthCheckResponse {
        #[prost(enumeration = "ServingStatus", tag = "1")]
        pub status: i32,
    }

    /// grpc.health.v1.HealthCheckResponse.ServingStatus
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum ServingStatus {
        Unknown = 0,
        Serving = 1,
        NotServing = 2,
        ServiceUnknown = 3,
    }

    impl ServingStatus {
        /// The proto name, as Go's String() prints it.
        pub fn proto_name(self) -> &'static str {
            match self {
                ServingStatus::Unknown => "UNKNOWN",
                ServingStatus::Serving => "SERVING",
                ServingStatus::NotServing => "NOT_SERVING",
                ServingStatus::ServiceUnknown => "SERVICE_UNKNOWN",
            }
        }
    }

    pub const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";
}

/// grpc: grpc.health.v1.Health/Check over plaintext HTTP/2; SERVING is success.
pub async fn run_grpc(host: &str, port: u16, service: &str, timeout: Duration) -> HandlerResult {
    use health::{CHECK_PATH, HealthCheckRequest, HealthCheckResponse, ServingStatus};
    let addr = join_host_port(host, port);
    let secs = timeout.as_secs();
    let fail = |msg: String| HandlerResult::new(Outcome::Failure, msg);
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .and_then(|e| e.user_agent(kubelet_core::probe::PROBE_USER_AGENT))
    {
        Ok(e) => e.connect_timeout(timeout),
        Err(e) => return fail(format!("error: failed to connect service at {addr:?}: {e}")),
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let channel = match tokio::time::timeout_at(deadline, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(e)) => {
            return fail(format!(
                "error: failed to connect service at {addr:?}: {}",
                error_chain(&e)
            ));
        }
        Err(_) => {
            return fail(format!(
                "timeout: failed to connect service {addr:?} within {secs}s: context deadline exceeded"
            ));
        }
    };
    let mut grpc = tonic::client::Grpc::new(channel);
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    request.set_timeout(timeout);
    let call = async {
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(error_chain(&e)))?;
        grpc.unary::<_, HealthCheckResponse, _>(
            request,
            tonic::codegen::http::uri::PathAndQuery::from_static(CHECK_PATH),
            tonic_prost::ProstCodec::default(),
        )
        .await
    };
    let status = match tokio::time::timeout_at(deadline, call).await {
        Ok(Ok(resp)) => resp.into_inner().status(),
        Ok(Err(s)) => {
            return fail(match s.code() {
                tonic::Code::Unimplemented => format!(
                    "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    s.message()
                ),
                tonic::Code::DeadlineExceeded => {
                    format!("timeout: health rpc did not complete within {secs}s")
                }
                code => format!(
                    "error: health rpc probe failed: rpc error: code = {code:?} desc = {}",
                    s.message()
                ),
            });
        }
        Err(_) => {
            return fail(format!(
                "timeout: health rpc did not complete within {secs}s"
            ));
        }
    };
    if status == ServingStatus::Serving {
        HandlerResult::new(Outcome::Success, "service healthy")
    } else {
        fail(format!(
            "service unhealthy (responded with {:?})",
            status.proto_name()
        ))
    }
}

/// An error with its sources ("a: b: c"), as Go's wrapped errors print.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::super::tests::{TIMEOUT, closed_port};
    use super::health::{HealthCheckRequest, HealthCheckResponse, ServingStatus};
    use super::*;
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use tokio::net::TcpListener;

    #[test]
    fn health_messages_encode_as_grpc_health_v1() {
        use prost::Message;
        let req = HealthCheckRequest {
            service: "svc".into(),
        };
        // Field 1, length-delimited, "svc".
        assert_eq!(req.encode_to_vec(), b"\x0a\x03svc");
        let resp = HealthCheckResponse::decode(&b"\x08\x02"[..]).unwrap();
        assert_eq!(resp.status(), ServingStatus::NotServing);
    }

    /// grpc.health.v1.Health answering every Check with one status.
    #[derive(Clone)]
    struct Health(ServingStatus);

    impl tonic::server::NamedService for Health {
        const NAME: &'static str = "grpc.health.v1.Health";
    }

    impl tonic::server::UnaryService<HealthCheckRequest> for Health {
        type Response = HealthCheckResponse;
        type Future =
            std::future::Ready<Result<tonic::Response<HealthCheckResponse>, tonic::Status>>;
        fn call(&mut self, req: tonic::Request<HealthCheckRequest>) -> Self::Future {
            let status = if req.get_ref().service == "unknown" {
                ServingStatus::ServiceUnknown
            } else {
                self.0
            };
            std::future::ready(Ok(tonic::Response::new(HealthCheckResponse {
                status: status as i32,
            })))
        }
    }

    impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>> for Health {
        type Response = tonic::codegen::http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = tonic::codegen::BoxFuture<Self::Response, Infallible>;
        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Infallible>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
            let svc = self.clone();
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(svc, req).await)
            })
        }
    }

    async fn grpc_server(status: ServingStatus) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(Health(status))
                .serve_with_incoming(incoming),
        );
        addr
    }

    #[tokio::test]
    async fn grpc_probe() {
        let serving = grpc_server(ServingStatus::Serving).await;
        let not_serving = grpc_server(ServingStatus::NotServing).await;
        let closed = closed_port().await;
        let cases = [
            (serving, "", Outcome::Success, "service healthy".to_owned()),
            (
                serving,
                "unknown",
                Outcome::Failure,
                "service unhealthy (responded with \"SERVICE_UNKNOWN\")".to_owned(),
            ),
            (
                not_serving,
                "",
                Outcome::Failure,
                "service unhealthy (responded with \"NOT_SERVING\")".to_owned(),
            ),
        ];
        for (addr, service, outcome, output) in cases {
            let got = run_grpc("127.0.0.1", addr.port(), service, TIMEOUT).await;
            assert_eq!(got, HandlerResult::new(outcome, output), "{addr} {service}");
        }
        let refused = run_grpc("127.0.0.1", closed.port(), "", TIMEOUT).await;
        assert_eq!(refused.outcome, Outcome::Failure);
        assert!(
            refused.output.starts_with(&format!(
                "error: failed to connect service at \"{closed}\": "
            )),
            "{}",
            refused.output
        );
    }
}
