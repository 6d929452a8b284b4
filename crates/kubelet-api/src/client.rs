//! The kubelet's API-server client: a kube client from a kubeconfig (client
//! certificates or bearer tokens), every request first taking a token from a
//! kubeAPIQPS/kubeAPIBurst bucket (`ratelimit`, a tower layer under the kube
//! client), and typed errors that keep the HTTP code.

use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine as _;

use futures::future::BoxFuture;
use http::{Request, Response};
use kube::client::Body;
use kubelet_core::metrics::KubeletMetrics;
use parking_lot::RwLock;
use tower::{Layer, Service};

use crate::metrics::RequestMetricsLayer;
use crate::ratelimit::RateLimitLayer;

/// A failed API request: the verb, what it was about, and why.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("{verb} {what}: HTTP {code} {reason}: {message}")]
    Status {
        verb: &'static str,
        what: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error("{verb} {what}: {message}")]
    Transport {
        verb: &'static str,
        what: String,
        message: String,
    },
}

impl ApiError {
    /// Wrap a kube error for `verb` on `what`; a 403 of a write is logged
    /// with what was asked, since under NodeRestriction it means the kubelet
    /// overstepped.
    pub fn from_kube(verb: &'static str, what: impl Into<String>, e: kube::Error) -> Self {
        let what = what.into();
        match e {
            kube::Error::Api(s) => {
                // A read the Node authorizer refuses is of an object it does
                // not (or not yet, after an API server restart) relate to
                // this node, a deleted pod: the caller says what it does.
                if s.code == 403 && verb != "get" {
                    tracing::error!(verb, %what, message = %s.message, "forbidden by the API server");
                }
                ApiError::Status {
                    verb,
                    what,
                    code: s.code,
                    reason: s.reason.clone(),
                    message: s.message.clone(),
                }
            }
            other => ApiError::Transport {
                verb,
                what,
                message: other.to_string(),
            },
        }
    }

    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 409: AlreadyExists on create, Conflict on update.
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// 422: the API server's validation refused the request; sending it
    /// again changes nothing.
    pub fn is_invalid(&self) -> bool {
        self.code() == Some(422)
    }
}

/// The API client every kubelet request goes through: the kube client of
/// one API server connection, under a rate limit of its own.
#[derive(Clone)]
pub struct ApiClient {
    /// Every request through it takes a token first.
    client: kube::Client,
    /// The connection under the limit, shared with siblings that have
    /// budgets of their own.
    connection: Arc<Connection>,
}

/// The kube client requests go out on. Its client certificate can be
/// replaced while requests are in flight (rotation): each request takes
/// the client current when it starts, so a watch opened before a swap
/// keeps its connection until it ends, and every request after a swap
/// opens connections of a new pool with the new certificate (the old
/// pool's keep-alive connections are never reused). Upstream instead closes
/// every connection on rotation.
struct Connection {
    current: RwLock<kube::Client>,
    /// What builds a client with another certificate; None for a client
    /// given whole (tests).
    rebuild: Option<Rebuild>,
}

struct Rebuild {
    config: kube::Config,
    layer: RequestMetricsLayer,
}

/// [`Connection`] as a tower service, for the rate limit layer to sit on.
#[derive(Clone)]
struct Current(Arc<Connection>);

impl Service<Request<Body>> for Current {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let client = self.0.current.read().clone();
        Box::pin(async move { client.send(req).await })
    }
}

/// The User-Agent of every request, in the shape of upstream's
/// `kubelet/v1.37.2 (linux/amd64) kubernetes/<commit>`, so audit logs and
/// API priority rules can tell the node agent apart.
pub fn user_agent() -> http::HeaderValue {
    let agent = format!(
        "rkubelet/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        kubelet_core::nodestatus::architecture()
    );
    http::HeaderValue::from_str(&agent).unwrap_or(http::HeaderValue::from_static("rkubelet"))
}

impl ApiClient {
    /// `connection` with `qps` requests a second and `burst` at once (a qps
    /// of 0: unlimited).
    pub fn new(connection: kube::Client, qps: u32, burst: u32) -> Self {
        Self::limited(
            Arc::new(Connection {
                current: RwLock::new(connection),
                rebuild: None,
            }),
            qps,
            burst,
        )
    }

    fn limited(connection: Arc<Connection>, qps: u32, burst: u32) -> Self {
        let namespace = connection.current.read().default_namespace().to_owned();
        let limited = RateLimitLayer::new(qps, burst).layer(Current(connection.clone()));
        ApiClient {
            client: kube::Client::new(limited, namespace),
            connection,
        }
    }

    /// A client from a kubeconfig file (its current context); every
    /// response is counted in `metrics` (rest_client_requests_total).
    pub async fn from_kubeconfig(
        path: &Path,
        qps: u32,
        burst: u32,
        metrics: KubeletMetrics,
    ) -> Result<Self, ApiError> {
        let config = load_kubeconfig(path).await?;
        Self::from_config(config, qps, burst, metrics).map_err(|message| ApiError::Kubeconfig {
            path: path.display().to_string(),
            message,
        })
    }

    /// A client from a loaded kube config (see [`load_kubeconfig`]).
    pub fn from_config(
        mut config: kube::Config,
        qps: u32,
        burst: u32,
        metrics: KubeletMetrics,
    ) -> Result<Self, String> {
        config
            .headers
            .push((http::header::USER_AGENT, user_agent()));
        let layer = RequestMetricsLayer {
            metrics,
            host: config
                .cluster_url
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_default(),
        };
        let rebuild = Rebuild { config, layer };
        let client = rebuild.build(rebuild.config.clone())?;
        let connection = Connection {
            current: RwLock::new(client),
            rebuild: Some(rebuild),
        };
        Ok(Self::limited(Arc::new(connection), qps, burst))
    }

    /// Authenticate every request from now on with this client certificate
    /// (PEM chain) and key (PEM), for this client and its siblings; requests
    /// in flight finish on their connections.
    pub fn set_client_certificate(&self, chain_pem: &str, key_pem: &str) -> Result<(), ApiError> {
        let err = |message: String| ApiError::Transport {
            verb: "authenticate",
            what: "with the new client certificate".into(),
            message,
        };
        let rebuild = self
            .connection
            .rebuild
            .as_ref()
            .ok_or_else(|| err("this client cannot change its certificate".into()))?;
        let engine = base64::engine::general_purpose::STANDARD;
        let mut config = rebuild.config.clone();
        config.auth_info = kube::config::AuthInfo {
            client_certificate_data: Some(engine.encode(chain_pem)),
            client_key_data: Some(engine.encode(key_pem).into()),
            ..kube::config::AuthInfo::default()
        };
        let client = rebuild.build(config).map_err(err)?;
        *self.connection.current.write() = client;
        Ok(())
    }

    /// The same connection with a budget of its own (events use
    /// eventRecordQPS/eventBurst, apart from kubeAPIQPS).
    pub fn with_limits(&self, qps: u32, burst: u32) -> Self {
        Self::limited(self.connection.clone(), qps, burst)
    }

    /// The kube client; each of its requests waits for the rate limit.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }
}

impl Rebuild {
    fn build(&self, config: kube::Config) -> Result<kube::Client, String> {
        Ok(kube::client::ClientBuilder::try_from(config)
            .map_err(|e| e.to_string())?
            .with_layer(&self.layer)
            .build())
    }
}

/// A kubeconfig file's current context as a kube config.
pub async fn load_kubeconfig(path: &Path) -> Result<kube::Config, ApiError> {
    let err = |message: String| ApiError::Kubeconfig {
        path: path.display().to_string(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_agent_names_rkubelet_its_version_and_platform() {
        let agent = super::user_agent();
        let agent = agent.to_str().unwrap();
        assert_eq!(
            agent,
            format!(
                "rkubelet/{} ({}/{})",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                kubelet_core::nodestatus::architecture()
            )
        );
        assert!(
            !agent.contains("x86_64"),
            "Go's spelling of the arch: {agent}"
        );
    }
}
