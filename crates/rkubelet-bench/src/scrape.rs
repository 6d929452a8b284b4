//! HTTPS GETs of a kubelet's own API the way Prometheus and metrics-server
//! scrape it: one keep-alive HTTP/1.1 connection per endpoint (a new one
//! only when it dropped), a client certificate, every request timed from
//! sent to body read.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// What is scraped, each over its own connection.
pub const PATHS: [&str; 2] = ["/metrics", "/stats/summary"];
/// Longest a connect, or a request until its body is read, may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Distinct failure messages kept per endpoint.
const KEEP_ERRORS: usize = 3;

/// A TLS client presenting the PEM certificate `cert` and key `key`.
pub fn connector(cert: &Path, key: &Path) -> anyhow::Result<TlsConnector> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading {}", cert.display()))?;
    if chain.is_empty() {
        bail!("{}: no CERTIFICATE block", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the private key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
        .with_client_auth_cert(chain, key)
        .context("the client certificate and key")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Accepts any server certificate: the kubelets' serving certificates are
/// self-signed, and this is a benchmark talking to a kubelet it started
/// itself on the loopback interface, not a client to trust with anything.
/// Handshake signatures are still checked, with the provider's algorithms.
#[derive(Debug)]
struct AnyServerCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What the scrapes of one path saw.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub path: &'static str,
    /// Latency of each 200 response: request sent → body fully read.
    pub ok: Vec<Duration>,
    /// Body size of the last 200 response, bytes.
    pub body_bytes: usize,
    /// Requests without a 200 response (error, timeout or another status).
    pub failed: usize,
    /// The first distinct failures.
    pub errors: Vec<String>,
    /// Connections opened (1 if keep-alive held throughout).
    pub connections: usize,
}

impl Stats {
    /// Nearest-rank percentile `p` of the 200 responses' latencies.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        let mut sorted = self.ok.clone();
        sorted.sort();
        (!sorted.is_empty()).then(|| crate::percentile(&sorted, p))
    }
}

/// One path of a kubelet's HTTPS server on 127.0.0.1, over a kept connection.
pub struct Endpoint {
    tls: TlsConnector,
    port: u16,
    conn: Option<SendRequest<Empty<Bytes>>>,
    pub stats: Stats,
}

impl Endpoint {
    pub fn new(tls: TlsConnector, port: u16, path: &'static str) -> Endpoint {
        Endpoint {
            tls,
            port,
            conn: None,
            stats: Stats {
                path,
                ..Stats::default()
            },
        }
    }

    /// One GET, recorded in [`Endpoint::stats`].
    pub async fn scrape(&mut self) {
        let failure = match self.get().await {
            Ok((body, latency)) => {
                self.stats.ok.push(latency);
                self.stats.body_bytes = body.len();
                return;
            }
            Err(e) => format!("{e:#}"),
        };
        self.stats.failed += 1;
        if self.stats.errors.len() < KEEP_ERRORS && !self.stats.errors.contains(&failure) {
            self.stats.errors.push(failure);
        }
    }

    /// One GET on the kept connection (a new one when there is none or it
    /// closed): the body and the latency of a 200 response.
    pub async fn get(&mut self) -> anyhow::Result<(Bytes, Duration)> {
        let mut sender = match self.conn.take() {
            Some(s) if !s.is_closed() => s,
            _ => tokio::time::timeout(TIMEOUT, self.connect())
                .await
                .with_context(|| format!("connecting: timed out after {TIMEOUT:?}"))??,
        };
        let req = Request::get(self.stats.path)
            .header(header::HOST, format!("127.0.0.1:{}", self.port))
            .body(Empty::new())?;
        let exchange = async {
            sender.ready().await?;
            let start = Instant::now();
            let resp = sender.send_request(req).await?;
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body, start.elapsed()))
        };
        let (status, body, latency) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .with_context(|| format!("timed out after {TIMEOUT:?}"))??;
        // The body was read whole: the connection can carry the next request.
        self.conn = Some(sender);
        if status != StatusCode::OK {
            bail!("HTTP {status}");
        }
        Ok((body, latency))
    }

    async fn connect(&mut self) -> anyhow::Result<SendRequest<Empty<Bytes>>> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let tcp = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true)?;
        let name = ServerName::from(IpAddr::from(Ipv4Addr::LOCALHOST));
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .with_context(|| format!("TLS handshake with {addr}"))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        // Ends when the server closes the connection or the sender is dropped.
        tokio::spawn(conn);
        self.stats.connections += 1;
        Ok(sender)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::Full;
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use tokio::net::TcpListener;

    use super::*;

    /// A TLS HTTP/1.1 server on 127.0.0.1: /metrics answers 200 "ok" and
    /// keeps the connection, /close answers 200 and closes it, anything
    /// else 403. Returns its port and how many connections it accepted.
    async fn server() -> (u16, Arc<AtomicUsize>) {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.cert.der().clone()],
            PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap(),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let tls = acceptor.accept(tcp).await.unwrap();
                let service = service_fn(|req: Request<Incoming>| async move {
                    let mut resp = hyper::Response::new(Full::new(Bytes::from_static(b"ok")));
                    match req.uri().path() {
                        "/metrics" => {}
                        "/close" => {
                            resp.headers_mut()
                                .insert(header::CONNECTION, "close".parse().unwrap());
                        }
                        _ => *resp.status_mut() = StatusCode::FORBIDDEN,
                    }
                    Ok::<_, Infallible>(resp)
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service),
                );
            }
        });
        (port, accepted)
    }

    fn client() -> (tempfile::TempDir, TlsConnector) {
        let dir = tempfile::tempdir().unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["client".to_owned()]).unwrap();
        let (crt, key) = (dir.path().join("c.crt"), dir.path().join("c.key"));
        std::fs::write(&crt, cert.cert.pem()).unwrap();
        std::fs::write(&key, cert.signing_key.serialize_pem()).unwrap();
        let tls = connector(&crt, &key).unwrap();
        (dir, tls)
    }

    #[tokio::test]
    async fn keeps_the_connection_and_records_failures() {
        let (port, accepted) = server().await;
        let (_dir, tls) = client();

        let mut metrics = Endpoint::new(tls.clone(), port, "/metrics");
        for _ in 0..3 {
            metrics.scrape().await;
        }
        let s = &metrics.stats;
        assert_eq!((s.ok.len(), s.body_bytes, s.failed), (3, 2, 0), "{s:?}");
        assert_eq!(s.connections, 1);
        assert!(s.percentile(0.99).is_some());

        let mut denied = Endpoint::new(tls.clone(), port, "/stats/summary");
        denied.scrape().await;
        denied.scrape().await;
        let s = &denied.stats;
        assert_eq!((s.ok.len(), s.failed, s.connections), (0, 2, 1), "{s:?}");
        assert_eq!(s.errors, ["HTTP 403 Forbidden"]);
        assert_eq!(s.percentile(0.5), None);

        // A connection the server closes is replaced.
        let mut closing = Endpoint::new(tls, port, "/close");
        closing.scrape().await;
        let start = Instant::now();
        while closing.conn.as_ref().is_some_and(|c| !c.is_closed()) {
            assert!(start.elapsed() < TIMEOUT, "the connection stays open");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        closing.scrape().await;
        let s = &closing.stats;
        assert_eq!((s.ok.len(), s.failed, s.connections), (2, 0, 2), "{s:?}");
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    }
}
