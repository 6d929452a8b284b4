//! The HTTPS listener of the kubelet API (upstream: ListenAndServeKubeletServer
//! and the auth filter of pkg/kubelet/server/server.go): TLS, then HTTP/1.1
//! with upgrades, one task per connection; each request authenticated,
//! authorized, then routed, and logged at debug level.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::Body;
use hyper::header::{self, HeaderValue};

use crate::auth::{Auth, Credentials, Denied, UserInfo, websocket_token, x509_user};
use crate::listener::{Listener, serve_http1, tls_handshake};
use crate::response::text_response;
use crate::routes::Router;
use kubelet_tasks::Tasks;

/// Serves the kubelet API on `listener` until `cancel`: each accepted
/// connection is handed to `spawn` (the kubelet passes
/// `Tasks::spawn_with`), as are spliced streaming sessions. The listener's
/// cap, timeouts and limits are those of [`crate::listener`]. Connections
/// finish their current request on cancellation.
pub async fn serve(
    listener: Listener,
    tls: Arc<rustls::ServerConfig>,
    router: Arc<Router>,
    auth: Arc<Auth>,
    tasks: Tasks,
    cancel: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    let conn_cancel = cancel.clone();
    listener
        .serve(tasks, cancel, move |tcp, _peer| {
            let acceptor = acceptor.clone();
            let router = router.clone();
            let auth = auth.clone();
            let cancel = conn_cancel.clone();
            async move {
                let Some(tls) = tls_handshake(&acceptor, tcp).await else {
                    return;
                };
                let cert_user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(x509_user);
                let service = hyper::service::service_fn(move |req| {
                    let router = router.clone();
                    let auth = auth.clone();
                    let cert_user = cert_user.clone();
                    async move { Ok::<_, Infallible>(handle(&router, &auth, cert_user, req).await) }
                });
                serve_http1(tls, service, cancel).await;
            }
        })
        .await;
}

/// Serves the read-only port (readOnlyPort) on `listener` until `cancel`:
/// plain HTTP, no authentication, `router` in its read-only scope (upstream's
/// ListenAndServeKubeletReadOnlyServer).
pub async fn serve_read_only(
    listener: Listener,
    router: Arc<Router>,
    tasks: Tasks,
    cancel: CancellationToken,
) {
    let conn_cancel = cancel.clone();
    listener
        .serve(tasks, cancel, move |tcp, _peer| {
            let router = router.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let router = router.clone();
                async move { Ok::<_, Infallible>(router.route(req).await) }
            });
            serve_http1(tcp, service, conn_cancel.clone())
        })
        .await;
}

/// Authenticates, authorizes and routes one request.
async fn handle(
    router: &Router,
    auth: &Auth,
    cert_user: Option<UserInfo>,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let protocols = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok());
    let websocket_token = match websocket_token(protocols) {
        Ok(Some((token, others))) => {
            // The token is a credential of this hop only: the runtime gets
            // the other subprotocols.
            if let Ok(value) = HeaderValue::from_str(&others) {
                req.headers_mut()
                    .insert(header::SEC_WEBSOCKET_PROTOCOL, value);
            }
            Some(token)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(error = %e, path, "Unable to authenticate the request due to an error");
            return text_response(
                Denied::Unauthorized.status(),
                Denied::Unauthorized.to_string(),
            );
        }
    };
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let creds = Credentials {
        client_cert_user: cert_user,
        authorization,
        websocket_token,
    };
    let (user, resp) = match auth.authenticate(creds).await {
        Err(denied) => (None, text_response(denied.status(), denied.to_string())),
        Ok(user) => match auth.authorize(&user, &method, &path).await {
            Err(denied) => (
                Some(user),
                text_response(denied.status(), denied.to_string()),
            ),
            Ok(()) => {
                let resp = router.route(req).await;
                (Some(user), resp)
            }
        },
    };
    tracing::debug!(
        user = user.as_ref().map_or("", |u| u.name.as_str()),
        verb = %method,
        path,
        status = resp.status().as_u16(),
        "kubelet API request"
    );
    resp
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::TokioIo;
    use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
    use kubelet_core::config::{KubeletConfiguration, TlsMinVersion};
    use kubelet_core::metrics::KubeletMetrics;
    use kubelet_core::testing::PodBuilder;
    use kubelet_cri::client::CriClient;
    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use rustls::{ClientConfig, RootCertStore};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsConnector;

    use super::*;
    use crate::NodeView;
    use crate::auth::tests::FakeReviewer;
    use crate::routes::Settings;
    use crate::tls::{ClientCa, ServingCert, ServingCertificate, build};

    struct FakeView {
        problems: Mutex<Vec<(&'static str, String)>>,
        root: PathBuf,
    }

    impl NodeView for FakeView {
        fn node_name(&self) -> String {
            "node-a".to_owned()
        }
        fn problems(&self) -> Vec<(&'static str, String)> {
            self.problems.lock().clone()
        }
        fn pods(&self) -> Vec<Pod> {
            vec![
                PodBuilder::new("web")
                    .namespace("default")
                    .uid("uid-1")
                    .status(PodStatus {
                        container_statuses: Some(vec![ContainerStatus {
                            name: "nginx".to_owned(),
                            container_id: Some("containerd://abc".to_owned()),
                            ..ContainerStatus::default()
                        }]),
                        ..PodStatus::default()
                    })
                    .build(),
            ]
        }
        fn cri(&self) -> CriClient {
            let socket = self.root.join("no-runtime.sock");
            CriClient::connect_lazy(
                &format!("unix://{}", socket.display()),
                Duration::from_secs(1),
            )
            .unwrap()
        }
        fn logs_root(&self) -> PathBuf {
            self.root.join("logs")
        }
        fn configz(&self) -> serde_json::Value {
            serde_json::json!({"port": 10250})
        }
        fn metrics_text(&self) -> String {
            "# TYPE kubelet_running_pods gauge\nkubelet_running_pods 1\n".to_owned()
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

    /// A CA, the server's certificate from it, and client identities.
    struct Pki {
        ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    }

    impl Pki {
        fn new() -> Self {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "test-ca");
            let key = rcgen::KeyPair::generate().unwrap();
            Pki {
                ca: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
            }
        }

        fn roots(&self) -> RootCertStore {
            let mut roots = RootCertStore::empty();
            roots.add(self.ca.der().clone()).unwrap();
            roots
        }

        /// A leaf (server when `sans` is not empty, else client `cn` in `orgs`).
        fn leaf(&self, cn: &str, orgs: &[&str], sans: Vec<String>) -> ServingCert {
            let mut params = rcgen::CertificateParams::new(sans).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            for o in orgs {
                params
                    .distinguished_name
                    .push(rcgen::DnType::OrganizationName, *o);
            }
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.ca).unwrap();
            ServingCert {
                chain: vec![cert.der().clone()],
                key: PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            }
        }
    }

    struct Running {
        addr: std::net::SocketAddr,
        pki: Pki,
        client_ca: Arc<ClientCa>,
        serving: Arc<ServingCertificate>,
        reviewer: Arc<FakeReviewer>,
        view: Arc<FakeView>,
        cancel: CancellationToken,
        _dir: tempfile::TempDir,
    }

    fn tokio_spawner() -> Tasks {
        Tasks::new(CancellationToken::new())
    }

    async fn start(
        min: TlsMinVersion,
        suites: &[String],
        edit: fn(&mut KubeletConfiguration),
    ) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new();
        let serving = pki.leaf("node-a", &[], vec!["localhost".to_owned()]);
        let mut cfg = KubeletConfiguration {
            tls_min_version: min,
            tls_cipher_suites: suites.to_vec(),
            ..KubeletConfiguration::default()
        };
        edit(&mut cfg);
        let certificate = Arc::new(ServingCertificate::default());
        certificate.set(serving).unwrap();
        let client_ca = Arc::new(ClientCa::new(pki.roots()).unwrap());
        let tls = build(certificate.clone(), Some(client_ca.clone()), &cfg).unwrap();
        let reviewer = Arc::new(FakeReviewer {
            tokens: HashMap::from([("good-token".to_owned(), UserInfo::new("bob", vec![]))]),
            allowed: vec![
                ("alice".to_owned(), "healthz"),
                ("alice".to_owned(), "pods"),
                ("alice".to_owned(), "proxy"),
                ("bob".to_owned(), "metrics"),
            ],
            ..FakeReviewer::default()
        });
        let auth = Arc::new(Auth::new("node-a", &cfg, reviewer.clone()));
        let view = Arc::new(FakeView {
            problems: Mutex::new(Vec::new()),
            root: dir.path().to_owned(),
        });
        let cancel = CancellationToken::new();
        let router = Arc::new(Router::new(
            view.clone(),
            Settings::from_config(&cfg),
            tokio_spawner(),
            cancel.clone(),
        ));
        let listener = Listener::bind(
            "127.0.0.1:0",
            "kubelet-api",
            crate::listener::MAX_CONNECTIONS,
            KubeletMetrics::new("node-a"),
        )
        .await
        .unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
            tls,
            router,
            auth,
            tokio_spawner(),
            cancel.clone(),
        ));
        Running {
            addr,
            pki,
            reviewer,
            view,
            cancel,
            client_ca,
            serving: certificate,
            _dir: dir,
        }
    }

    fn client_config(pki: &Pki, identity: Option<ServingCert>) -> ClientConfig {
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(pki.roots());
        match identity {
            Some(id) => builder.with_client_auth_cert(id.chain, id.key).unwrap(),
            None => builder.with_no_client_auth(),
        }
    }

    /// One request over a fresh TLS connection: (status, body).
    async fn request(
        addr: std::net::SocketAddr,
        config: ClientConfig,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> std::io::Result<(u16, String)> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let tls = TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = sender
            .send_request(req.body(Empty::<Bytes>::new()).unwrap())
            .await
            .map_err(std::io::Error::other)?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    #[tokio::test]
    async fn end_to_end_authn_authz_and_routes() {
        let srv = start(TlsMinVersion::Tls12, &[], |_| {}).await;
        let anon = || client_config(&srv.pki, None);
        let alice = || client_config(&srv.pki, Some(srv.pki.leaf("alice", &["dev"], vec![])));
        let carol = || client_config(&srv.pki, Some(srv.pki.leaf("carol", &[], vec![])));

        // No credentials: 401.
        let (status, body) = request(srv.addr, anon(), "GET", "/healthz", &[])
            .await
            .unwrap();
        assert_eq!((status, body.as_str()), (401, "Unauthorized"));

        // A certificate of a user the reviewer denies: 403 with upstream's body.
        let (status, body) = request(srv.addr, carol(), "GET", "/pods", &[])
            .await
            .unwrap();
        assert_eq!(status, 403);
        assert_eq!(
            body,
            "Forbidden (user=carol, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        );

        // Allowed: /healthz, /pods, /configz, unknown paths.
        let (status, body) = request(srv.addr, alice(), "GET", "/healthz", &[])
            .await
            .unwrap();
        assert_eq!((status, body.as_str()), (200, "ok"));
        let (status, body) = request(srv.addr, alice(), "GET", "/pods", &[])
            .await
            .unwrap();
        assert_eq!(status, 200);
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(list["kind"], "PodList");
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["items"][0]["metadata"]["name"], "web");
        let (status, _) = request(srv.addr, alice(), "POST", "/pods", &[])
            .await
            .unwrap();
        assert_eq!(status, 405);
        let (status, body) = request(srv.addr, alice(), "GET", "/configz", &[])
            .await
            .unwrap();
        assert_eq!(status, 200);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).unwrap(),
            serde_json::json!({"kubeletconfig": {"port": 10250}})
        );
        let (status, _) = request(srv.addr, alice(), "GET", "/nope", &[])
            .await
            .unwrap();
        assert_eq!(status, 404);

        // A failing health check.
        srv.view
            .problems
            .lock()
            .push(("syncloop", "sync loop stuck".to_owned()));
        let (status, body) = request(srv.addr, alice(), "GET", "/healthz", &[])
            .await
            .unwrap();
        assert_eq!(status, 500);
        assert_eq!(
            body,
            "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n"
        );

        // Streaming requests: a missing pod, no streams requested.
        let (status, body) = request(
            srv.addr,
            alice(),
            "POST",
            "/exec/default/nope/c?command=ls&output=1",
            &[],
        )
        .await
        .unwrap();
        assert_eq!((status, body.as_str()), (404, "pod does not exist\n"));
        let (status, body) = request(
            srv.addr,
            alice(),
            "POST",
            "/exec/default/web/nginx?command=ls",
            &[],
        )
        .await
        .unwrap();
        assert_eq!(status, 400);
        assert_eq!(
            body,
            "you must specify at least 1 of stdin, stdout, stderr\n"
        );
        let (status, body) = request(
            srv.addr,
            alice(),
            "POST",
            "/exec/default/web/other?command=ls&output=1",
            &[],
        )
        .await
        .unwrap();
        assert_eq!(status, 500);
        assert_eq!(body, "container not found (\"other\")\n");

        // A bearer token reviewed once, then cached; bob may read metrics only.
        let auth = [("authorization", "Bearer good-token")];
        let (status, body) = request(srv.addr, anon(), "GET", "/metrics", &auth)
            .await
            .unwrap();
        assert_eq!(status, 200);
        assert!(body.contains("kubelet_running_pods 1"), "{body}");
        let (status, _) = request(srv.addr, anon(), "GET", "/metrics/cadvisor", &auth)
            .await
            .unwrap();
        assert_eq!(status, 200);
        let (status, body) = request(srv.addr, anon(), "GET", "/pods", &auth)
            .await
            .unwrap();
        assert_eq!(status, 403);
        assert!(body.starts_with("Forbidden (user=bob, verb=get"), "{body}");
        assert_eq!(
            srv.reviewer
                .token_calls
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        // The same token as a WebSocket subprotocol (cached: no new review).
        let ws = [(
            "sec-websocket-protocol",
            "base64url.bearer.authorization.k8s.io.Z29vZC10b2tlbg, v5.channel.k8s.io",
        )];
        let (status, _) = request(srv.addr, anon(), "GET", "/metrics", &ws)
            .await
            .unwrap();
        assert_eq!(status, 200);
        assert_eq!(
            srv.reviewer
                .token_calls
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        let bad_ws = [(
            "sec-websocket-protocol",
            "base64url.bearer.authorization.k8s.io.Z29vZC10b2tlbg",
        )];
        let (status, _) = request(srv.addr, anon(), "GET", "/metrics", &bad_ws)
            .await
            .unwrap();
        assert_eq!(status, 401, "a token alone, without another subprotocol");
        let bad = [("authorization", "Bearer wrong")];
        let (status, _) = request(srv.addr, anon(), "GET", "/metrics", &bad)
            .await
            .unwrap();
        assert_eq!(status, 401);

        // A client certificate from another CA fails the handshake.
        let other = Pki::new();
        let stranger = client_config(&srv.pki, Some(other.leaf("mallory", &[], vec![])));
        assert!(
            request(srv.addr, stranger, "GET", "/healthz", &[])
                .await
                .is_err()
        );
        srv.cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn silent_clients_are_dropped_before_and_after_the_handshake() {
        use crate::listener::{READ_HEADER_TIMEOUT, TLS_HANDSHAKE_TIMEOUT};
        let srv = start(TlsMinVersion::Tls12, &[], |_| {}).await;
        let an_hour = Duration::from_secs(3600);
        // No ClientHello: closed at the handshake timeout.
        let begin = tokio::time::Instant::now();
        let mut tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(an_hour, tcp.read_to_end(&mut got)).await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?}");
        assert_eq!(begin.elapsed(), TLS_HANDSHAKE_TIMEOUT);

        // A handshake, then silence: closed at the header timeout.
        let tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
        let mut tls = TlsConnector::from(Arc::new(client_config(&srv.pki, None)))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let begin = tokio::time::Instant::now();
        let read = tokio::time::timeout(an_hour, tls.read_to_end(&mut got)).await;
        // Closed without close_notify: an unexpected EOF to rustls.
        assert!(read.is_ok(), "still open after an hour");
        assert_eq!(begin.elapsed(), READ_HEADER_TIMEOUT);
        srv.cancel.cancel();
    }

    #[tokio::test]
    async fn debugging_handlers_off_and_always_allow() {
        let srv = start(TlsMinVersion::Tls12, &[], |c| {
            c.enable_debugging_handlers = false;
            c.authorization.mode = kubelet_core::config::AuthorizationMode::AlwaysAllow;
        })
        .await;
        let carol = || client_config(&srv.pki, Some(srv.pki.leaf("carol", &[], vec![])));
        for path in [
            "/exec/default/web/nginx?command=ls&output=1",
            "/containerLogs/default/web/nginx",
            "/runningpods/",
        ] {
            let (status, body) = request(srv.addr, carol(), "GET", path, &[]).await.unwrap();
            assert_eq!(
                (status, body.as_str()),
                (405, "Debug endpoints are disabled.\n"),
                "{path}"
            );
        }
        let (status, _) = request(srv.addr, carol(), "GET", "/pods", &[])
            .await
            .unwrap();
        assert_eq!(status, 200);
        assert_eq!(
            srv.reviewer
                .access_calls
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );
        srv.cancel.cancel();
    }

    #[tokio::test]
    async fn a_new_client_ca_and_serving_certificate_apply_from_the_next_handshake() {
        let srv = start(TlsMinVersion::Tls12, &[], |_| {}).await;
        let healthz = async |server_ca: &Pki, client: ServingCert| {
            request(
                srv.addr,
                client_config(server_ca, Some(client)),
                "GET",
                "/healthz",
                &[],
            )
            .await
            .map(|(status, _)| status)
        };
        let alice = || srv.pki.leaf("alice", &[], vec![]);
        assert_eq!(healthz(&srv.pki, alice()).await.unwrap(), 200);

        // clientCAFile now holds another CA: alice's old certificate fails
        // the handshake, one of the new CA passes.
        let other = Pki::new();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, other.ca.pem()).unwrap();
        srv.client_ca.reload(&ca_file).unwrap();
        assert!(healthz(&srv.pki, alice()).await.is_err());
        let new_alice = || other.leaf("alice", &[], vec![]);
        assert_eq!(healthz(&srv.pki, new_alice()).await.unwrap(), 200);
        // A file that holds no CA leaves the bundle as it was.
        std::fs::write(&ca_file, "not a certificate").unwrap();
        assert!(srv.client_ca.reload(&ca_file).is_err());
        assert_eq!(healthz(&srv.pki, new_alice()).await.unwrap(), 200);

        // A new serving certificate, of the other CA: a client trusting
        // only the first CA no longer verifies the server.
        srv.serving
            .set(other.leaf("node-a", &[], vec!["localhost".to_owned()]))
            .unwrap();
        assert!(healthz(&srv.pki, new_alice()).await.is_err());
        assert_eq!(healthz(&other, new_alice()).await.unwrap(), 200);
        srv.cancel.cancel();
    }

    #[tokio::test]
    async fn old_tls_versions_and_excluded_suites_are_refused() {
        // A TLS 1.3-only server refuses a TLS 1.2 client.
        let srv = start(TlsMinVersion::Tls13, &[], |_| {}).await;
        let alice = srv.pki.leaf("alice", &[], vec![]);
        let tls12_only =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&[&rustls::version::TLS12])
                .unwrap()
                .with_root_certificates(srv.pki.roots())
                .with_client_auth_cert(alice.chain, alice.key)
                .unwrap();
        assert!(
            request(srv.addr, tls12_only, "GET", "/healthz", &[])
                .await
                .is_err()
        );
        srv.cancel.cancel();

        // A server limited to one TLS 1.2 suite refuses a client offering another.
        let srv = start(
            TlsMinVersion::Tls12,
            &["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".to_owned()],
            |_| {},
        )
        .await;
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites.retain(|s| {
            s.suite() == rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        });
        let alice = srv.pki.leaf("alice", &[], vec![]);
        let chacha_only = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(srv.pki.roots())
            .with_client_auth_cert(alice.chain.clone(), alice.key.clone_key())
            .unwrap();
        assert!(
            request(srv.addr, chacha_only, "GET", "/healthz", &[])
                .await
                .is_err()
        );
        // The allowed suite works over TLS 1.2.
        let tls12 =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&[&rustls::version::TLS12])
                .unwrap()
                .with_root_certificates(srv.pki.roots())
                .with_client_auth_cert(alice.chain, alice.key)
                .unwrap();
        let (status, _) = request(srv.addr, tls12, "GET", "/healthz", &[])
            .await
            .unwrap();
        assert_eq!(status, 200);

        // A TLS 1.1 ClientHello gets an alert.
        let mut hello = vec![0x03, 0x02]; // client_version TLS 1.1
        hello.extend([0x11; 32]); // random
        hello.push(0); // session id
        hello.extend([0x00, 0x02, 0xc0, 0x13]); // ECDHE_RSA_WITH_AES_128_CBC_SHA
        hello.extend([0x01, 0x00]); // null compression
        let mut handshake = vec![0x01, 0x00, 0x00, hello.len() as u8];
        handshake.extend(hello);
        let mut record = vec![0x16, 0x03, 0x01, 0x00, handshake.len() as u8];
        record.extend(handshake);
        let mut tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
        tcp.write_all(&record).await.unwrap();
        let mut answer = [0u8; 7];
        tcp.read_exact(&mut answer).await.unwrap();
        assert_eq!(answer[0], 0x15, "an alert record: {answer:?}");
        assert_eq!(answer[5], 2, "fatal: {answer:?}");
        srv.cancel.cancel();
    }
}
