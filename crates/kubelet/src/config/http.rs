//! The manifest URL (upstream's `pkg/kubelet/config/http.go`): static pods
//! read from `staticPodURL` every `httpCheckFrequency`, with the headers of
//! `staticPodURLHeader`, each response a Pod or a PodList (YAML or JSON),
//! at most 10 MiB, within 10 s. An answer unchanged since the last is not
//! parsed again; an empty one marks the source seen with no pods; a
//! failure keeps the last pods (logged three times, then at debug level).
//! An `https://` URL's server is verified against the host's CAs, as Go's
//! default client does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::Request;
use hyper::header::{HeaderName, HeaderValue};
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::manifest::{Origin, parse_static_pods};
use kubelet_core::types::SOURCE_HTTP;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::SourceSnapshot;
use super::file::MAX_MANIFEST_BYTES;
use crate::prober::handlers::connect;
use crate::prober::handlers::http::{HttpError, exchange, tls_connect_with};

/// How long one read of the URL may take (upstream's client timeout).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The manifest URL as a pod source.
#[derive(Clone, Debug)]
pub struct HttpSource {
    /// `http://` or `https://host[:port]/path`.
    pub url: String,
    pub header: BTreeMap<String, Vec<String>>,
    pub node_name: String,
    pub check_every: Duration,
    /// The CAs an `https://` URL's server is verified against: the
    /// host's (tests give their own).
    pub roots: Arc<rustls::RootCertStore>,
}

/// The host's CA certificates (rustls-native-certs: the system's store,
/// as Go's default client uses); those that cannot be read are logged.
pub fn system_roots() -> Arc<rustls::RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(error = %e, "reading the host's CA certificates");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_, bad) = roots.add_parsable_certificates(found.certs);
    if bad > 0 {
        tracing::debug!(bad, "host CA certificates that do not parse");
    }
    Arc::new(roots)
}

/// What one read gave.
enum Read {
    /// The same body as last time.
    Unchanged,
    Pods(Vec<Pod>),
}

impl HttpSource {
    /// Read the URL now and every `check_every`, sending a snapshot of
    /// source `http` when its pods change; until `cancel` fires.
    pub async fn run(self, tx: mpsc::Sender<SourceSnapshot>, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(self.check_every.max(Duration::from_millis(1)));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last: Option<Vec<u8>> = None;
        let mut failures = 0u32;
        tracing::info!(url = %self.url, every = ?self.check_every, "watching the manifest URL");
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let read = tokio::time::timeout(READ_TIMEOUT, self.read(&mut last))
                .await
                .unwrap_or_else(|_| Err(format!("Get {:?}: context deadline exceeded", self.url)));
            let pods = match read {
                Ok(Read::Unchanged) => None,
                Ok(Read::Pods(pods)) => Some(pods),
                Err(e) => {
                    if e.starts_with("zero-length data") {
                        // Upstream marks the source seen, with no pods.
                        let _ = tx.send(snapshot(Vec::new())).await;
                    }
                    match failures {
                        0..3 => tracing::info!(error = %e, "Failed to read pods from URL"),
                        3 => {
                            tracing::info!(error = %e, "Failed to read pods from URL. Dropping verbosity of this message to debug")
                        }
                        _ => tracing::debug!(error = %e, "Failed to read pods from URL"),
                    }
                    failures = failures.saturating_add(1);
                    continue;
                }
            };
            if failures > 0 {
                tracing::info!("Successfully read pods from URL");
                failures = 0;
            }
            if let Some(pods) = pods {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    sent = tx.send(snapshot(pods)) => if sent.is_err() { return },
                }
            }
        }
    }

    /// One GET of the URL, parsed unless it is what `last` holds.
    async fn read(&self, last: &mut Option<Vec<u8>>) -> Result<Read, String> {
        let body = self.get().await?;
        if body.is_empty() {
            return Err(format!("zero-length data received from {}", self.url));
        }
        if last.as_deref() == Some(&body[..]) {
            return Ok(Read::Unchanged);
        }
        *last = Some(body.clone());
        let text = String::from_utf8_lossy(&body);
        parse_static_pods(Origin::Url(&self.url), &text, &self.node_name)
            .map(Read::Pods)
            .map_err(|e| format!("{}: {e}", self.url))
    }

    async fn get(&self) -> Result<Vec<u8>, String> {
        let uri: hyper::Uri = self
            .url
            .parse()
            .map_err(|e| format!("parse {:?}: {e}", self.url))?;
        let host = uri
            .host()
            .ok_or_else(|| format!("{:?}: no host", self.url))?;
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut req = Request::get(path)
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let headers = req.headers_mut();
        let authority = uri.authority().map_or(host, |a| a.as_str());
        headers.insert(
            hyper::header::HOST,
            HeaderValue::from_str(authority).map_err(|e| e.to_string())?,
        );
        for (name, values) in &self.header {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("invalid header field name {name:?}"))?;
            for v in values {
                let v =
                    HeaderValue::from_str(v).map_err(|_| format!("invalid header value {v:?}"))?;
                headers.append(name.clone(), v);
            }
        }
        headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        let tcp = connect(host.trim_matches(['[', ']']), port)
            .await
            .map_err(|e| format!("Get {:?}: {e}", self.url))?;
        let limit = MAX_MANIFEST_BYTES as usize + 1;
        let fail = |e: HttpError| format!("Get {:?}: {e}", self.url);
        let resp = if https {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(self.roots.clone())
                .with_no_client_auth();
            let tls = tls_connect_with(tcp, host.trim_matches(['[', ']']), Arc::new(config))
                .await
                .map_err(fail)?;
            exchange(tls, req, limit).await.map_err(fail)?
        } else {
            exchange(tcp, req, limit).await.map_err(fail)?
        };
        if resp.body.len() >= limit {
            return Err(format!(
                "{}: the response is longer than {MAX_MANIFEST_BYTES} bytes",
                self.url
            ));
        }
        if resp.status != hyper::StatusCode::OK {
            return Err(format!("{}: {}", self.url, resp.status));
        }
        Ok(resp.body)
    }
}

fn snapshot(pods: Vec<Pod>) -> SourceSnapshot {
    SourceSnapshot {
        source: SOURCE_HTTP,
        pods,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A server answering every request with the status and body `answer`
    /// holds, keeping each request's head in `seen`.
    async fn server(
        answer: Arc<Mutex<(u16, String)>>,
        seen: Arc<Mutex<Vec<String>>>,
    ) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.ends_with(b"\r\n\r\n") {
                    let n = conn.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                seen.lock()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let (status, body) = answer.lock().clone();
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                conn.write_all(resp.as_bytes()).await.unwrap();
            }
        });
        addr
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    #[tokio::test]
    async fn the_url_gives_static_pods_with_its_headers_and_keeps_them_through_failures() {
        let answer = Arc::new(Mutex::new((200, POD.to_owned())));
        let seen = Arc::default();
        let addr = server(answer.clone(), Arc::clone(&seen)).await;
        let source = HttpSource {
            url: format!("http://{addr}/manifests"),
            header: BTreeMap::from([("X-Token".to_owned(), vec!["a".to_owned(), "b".to_owned()])]),
            node_name: "Node-1".into(),
            check_every: Duration::from_millis(50),
            roots: Arc::new(rustls::RootCertStore::empty()),
        };
        let (tx, mut rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(source.run(tx, cancel.clone()));
        let first = rx.recv().await.unwrap();
        assert_eq!(first.source, SOURCE_HTTP);
        assert_eq!(first.pods.len(), 1);
        assert_eq!(first.pods[0].metadata.name.as_deref(), Some("web-node-1"));
        let head = seen.lock()[0].clone();
        assert!(head.starts_with("GET /manifests HTTP/1.1\r\n"), "{head}");
        let lower = head.to_lowercase();
        assert!(
            lower.contains("x-token: a\r\n") && lower.contains("x-token: b\r\n"),
            "{head}"
        );

        // A failure and a body that does not parse keep the pods; a change
        // is sent; an empty body is the source seen with no pods.
        *answer.lock() = (500, "no".into());
        tokio::time::sleep(Duration::from_millis(200)).await;
        *answer.lock() = (200, "kind: Nope\n".into());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(rx.try_recv().is_err(), "nothing sent on failures");
        *answer.lock() = (200, POD.replace("web", "api"));
        let changed = rx.recv().await.unwrap();
        assert_eq!(changed.pods[0].metadata.name.as_deref(), Some("api-node-1"));
        *answer.lock() = (200, String::new());
        let empty = rx.recv().await.unwrap();
        assert!(empty.pods.is_empty());
        cancel.cancel();
        task.await.unwrap();
    }

    /// An https:// URL: its server is verified against the CAs given.
    #[tokio::test]
    async fn an_https_url_is_read_from_a_verified_server_only() {
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca =
            rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
                .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(mut conn) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{POD}",
                    POD.len()
                );
                let _ = conn.write_all(resp.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let mut source = HttpSource {
            url: format!("https://localhost:{port}/pods"),
            header: BTreeMap::new(),
            node_name: "n".into(),
            check_every: Duration::from_secs(20),
            roots: Arc::new(roots),
        };
        let mut last = None;
        let Ok(Read::Pods(pods)) = source.read(&mut last).await else {
            panic!("the pods of a verified server");
        };
        assert_eq!(pods[0].metadata.name.as_deref(), Some("web-n"));
        // The host's CAs do not know this one.
        source.roots = system_roots();
        let err = source.get().await.unwrap_err();
        assert!(err.contains("invalid peer certificate"), "{err}");
    }
}
