//! `rest_client_requests_total{code,method,host}` as upstream's client-go
//! records it: a tower layer under the kube client that counts every
//! response by status code (or `<error>` when none came), HTTP method and
//! API server host.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use kubelet_core::metrics::KubeletMetrics;
use tower::{Layer, Service};

/// The layer: wraps the kube client's service stack.
#[derive(Clone, Debug)]
pub struct RequestMetricsLayer {
    pub metrics: KubeletMetrics,
    /// The API server's host:port, the `host` label.
    pub host: String,
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RequestMetrics<S> {
    inner: S,
    layer: RequestMetricsLayer,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RequestMetrics<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let method = req.method().as_str().to_owned();
        let layer = self.layer.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            let code = match &res {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "<error>".to_owned(),
            };
            layer
                .metrics
                .rest_client_requests
                .inc(&[&code, &method, &layer.host]);
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_responses_by_code_method_and_host() {
        let metrics = KubeletMetrics::new("n");
        let layer = RequestMetricsLayer {
            metrics: metrics.clone(),
            host: "127.0.0.1:6443".into(),
        };
        let inner = tower::service_fn(|req: Request<()>| async move {
            let code = if req.uri().path() == "/missing" {
                404
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(Response::builder().status(code).body(()).unwrap())
        });
        let mut svc = layer.layer(inner);
        for path in ["/a", "/b", "/missing"] {
            let req = Request::get(path).body(()).unwrap();
            svc.call(req).await.unwrap();
        }
        let text = metrics.render();
        assert!(
            text.contains(
                r#"rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"rest_client_requests_total{code="404",host="127.0.0.1:6443",method="GET"} 1"#
            ),
            "{text}"
        );
    }
}
