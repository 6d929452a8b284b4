//! The healthz endpoint, as upstream's: `/healthz` on
//! healthzBindAddress:healthzPort, failing while the sync loop or PLEG is
//! unhealthy. (The read-only port is the kubelet API's router in its
//! read-only scope, `kubelet_server::server::serve_read_only`.)

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use kubelet_server::listener::{Listener, serve_http1};
use kubelet_tasks::Tasks;
use tokio_util::sync::CancellationToken;

/// What the endpoint reads from the kubelet.
pub trait Health: Send + Sync + 'static {
    /// Failing checks: (name, reason).
    fn problems(&self) -> Vec<(&'static str, String)>;
}

fn reply(code: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    if let Ok(v) = content_type.parse() {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

/// The healthz body upstream writes: "ok", or each check with [+]/[-].
fn healthz(problems: &[(&'static str, String)]) -> (StatusCode, String) {
    if problems.is_empty() {
        return (StatusCode::OK, "ok".into());
    }
    let mut body = String::from("[+]ping ok\n[+]log ok\n");
    for (name, why) in problems {
        body.push_str(&format!("[-]{name} failed: {why}\n"));
    }
    body.push_str("healthz check failed\n");
    (StatusCode::INTERNAL_SERVER_ERROR, body)
}

fn route(req: &Request<Incoming>, health: &dyn Health) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".into(),
        );
    }
    match req.uri().path() {
        "/healthz" => {
            let (code, body) = healthz(&health.problems());
            reply(code, "text/plain; charset=utf-8", body)
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "404 page not found\n".into(),
        ),
    }
}

/// Serve HTTP/1 on `listener` until cancelled; one task per connection,
/// spawned through `tasks`, under the listener's cap, timeouts and limits.
pub async fn serve(
    listener: Listener,
    health: Arc<dyn Health>,
    tasks: Tasks,
    cancel: CancellationToken,
) {
    let conn_cancel = cancel.clone();
    listener
        .serve(tasks, cancel, move |tcp, _peer| {
            let health = health.clone();
            let svc = hyper::service::service_fn(move |req| {
                let resp = route(&req, &*health);
                async move { Ok::<_, Infallible>(resp) }
            });
            serve_http1(tcp, svc, conn_cancel.clone())
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_bodies() {
        assert_eq!(healthz(&[]), (StatusCode::OK, "ok".to_string()));
        let (code, body) = healthz(&[("pleg", "stuck".into())]);
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("[-]pleg failed: stuck"), "{body}");
    }
}
