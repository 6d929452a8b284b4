//! The httpGet handler (upstream's pkg/probe/http): a small HTTP/1.1
//! client on hyper's connection API, https without certificate
//! verification, same-host redirects followed up to ten times.

use std::fmt;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use kubelet_core::probe::{HttpGet, Scheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::{HandlerResult, MAX_OUTPUT, Outcome, connect};

/// Redirects followed to the same host before giving up.
const MAX_REDIRECTS: usize = 10;

/// httpGet: 200-399 is success (a redirect not followed is a warning),
/// anything else a failure; the whole exchange must end within `timeout`.
pub async fn run_http(get: &HttpGet, timeout: Duration) -> HandlerResult {
    let url = get.url();
    match tokio::time::timeout(timeout, http_probe(get)).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => HandlerResult::new(Outcome::Failure, format!("Get {url:?}: {e}")),
        Err(_) => HandlerResult::new(
            Outcome::Failure,
            format!(
                "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            ),
        ),
    }
}

/// Why an HTTP exchange failed (the text after `Get "<url>": `).
#[derive(Debug)]
pub(crate) struct HttpError(String);

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<hyper::Error> for HttpError {
    fn from(e: hyper::Error) -> Self {
        HttpError(e.to_string())
    }
}

/// One hop's target.
#[derive(Clone, Debug)]
struct Target {
    scheme: Scheme,
    host: String,
    port: u16,
    path: String,
    /// The Host header value.
    host_header: String,
}

pub(crate) struct Response {
    pub(crate) status: StatusCode,
    location: Option<String>,
    pub(crate) body: Vec<u8>,
}

async fn http_probe(get: &HttpGet) -> Result<HandlerResult, HttpError> {
    let first_host = get.host.clone();
    let mut target = Target {
        scheme: get.scheme,
        host: get.host.clone(),
        port: get.port,
        path: get.path.clone(),
        host_header: get.host_header(),
    };
    let mut redirects = 0;
    loop {
        let resp = http_get(&target, &get.headers).await?;
        let next = match (&resp.location, resp.status.as_u16()) {
            (Some(location), 301 | 302 | 303 | 307 | 308) => redirect(&target, location),
            _ => None,
        };
        match next {
            Some(next) if next.host == first_host => {
                if redirects >= MAX_REDIRECTS {
                    return Err(HttpError(format!(
                        "stopped after {MAX_REDIRECTS} redirects"
                    )));
                }
                redirects += 1;
                target = next;
            }
            // A redirect elsewhere is not followed: the 3xx is the answer.
            _ => return Ok(verdict(&resp)),
        }
    }
}

fn verdict(resp: &Response) -> HandlerResult {
    let body = String::from_utf8_lossy(&resp.body);
    match resp.status.as_u16() {
        200..=299 => HandlerResult::new(Outcome::Success, body),
        300..=399 => HandlerResult::new(
            Outcome::Warning,
            format!("Probe terminated redirects, Response body: {body}"),
        ),
        code => HandlerResult::new(
            Outcome::Failure,
            format!("HTTP probe failed with statuscode: {code}"),
        ),
    }
}

/// Where a Location header points, relative to `from`.
fn redirect(from: &Target, location: &str) -> Option<Target> {
    if location.starts_with("http://") || location.starts_with("https://") {
        let uri: Uri = location.parse().ok()?;
        let scheme = if uri.scheme_str() == Some("https") {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let default_port = match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        };
        let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(default_port);
        return Some(Target {
            scheme,
            host: host.to_owned(),
            port,
            path: uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            host_header: uri.authority()?.as_str().to_owned(),
        });
    }
    // A relative location keeps the host and a custom Host header.
    let path = if location.starts_with('/') {
        location.to_owned()
    } else {
        let path = from.path.split('?').next().unwrap_or("/");
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        remove_dot_segments(&format!("{dir}{location}"))
    };
    Some(Target {
        path,
        ..from.clone()
    })
}

/// Resolve "." and ".." in a merged relative reference (RFC 3986 5.2.4).
fn remove_dot_segments(reference: &str) -> String {
    let (path, query) = match reference.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (reference, None),
    };
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." | ".." => {
                if *segment == ".." {
                    out.pop();
                }
                // A trailing dot segment leaves a directory ("/a/.." is "/").
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut resolved = format!("/{}", out.join("/"));
    if let Some(q) = query {
        resolved.push('?');
        resolved.push_str(q);
    }
    resolved
}

async fn http_get(target: &Target, headers: &[(String, String)]) -> Result<Response, HttpError> {
    let tcp = connect(&target.host, target.port)
        .await
        .map_err(HttpError)?;
    let mut req = Request::get(target.path.as_str())
        .body(Empty::<Bytes>::new())
        .map_err(|e| HttpError(format!("invalid request path {:?}: {e}", target.path)))?;
    let h = req.headers_mut();
    let value = |v: &str| {
        HeaderValue::from_str(v).map_err(|_| HttpError(format!("invalid header value {v:?}")))
    };
    h.insert(hyper::header::HOST, value(&target.host_header)?);
    for (name, v) in headers {
        if name.eq_ignore_ascii_case("host") {
            continue;
        }
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| HttpError(format!("invalid header field name {name:?}")))?;
        h.append(name, value(v)?);
    }
    h.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    match target.scheme {
        Scheme::Http => exchange(tcp, req, MAX_OUTPUT).await,
        Scheme::Https => {
            let tls = tls_connect(tcp, &target.host).await?;
            exchange(tls, req, MAX_OUTPUT).await
        }
    }
}

/// One request over a fresh HTTP/1.1 connection; the body is read up to
/// `limit` bytes.
pub(crate) async fn exchange<S>(
    io: S,
    req: Request<Empty<Bytes>>,
    limit: usize,
) -> Result<Response, HttpError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    let mut conn = pin!(conn);
    let mut request = pin!(async move {
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let location = resp
            .headers()
            .get(hyper::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut incoming = resp.into_body();
        while body.len() < limit {
            let Some(frame) = incoming.frame().await else {
                break;
            };
            if let Ok(data) = frame?.into_data() {
                body.extend_from_slice(&data);
            }
        }
        body.truncate(limit);
        Ok::<_, HttpError>(Response {
            status,
            location,
            body,
        })
    });
    // Drive the connection while the request runs on it.
    tokio::select! {
        resp = &mut request => resp,
        ended = &mut conn => {
            ended?;
            request.await
        }
    }
}

/// TLS without certificate verification, as upstream's probes do.
async fn tls_connect(
    tcp: TcpStream,
    host: &str,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HttpError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpError(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
        .with_no_client_auth();
    tls_connect_with(tcp, host, Arc::new(config)).await
}

/// TLS to `host` over `tcp` as `config` says.
pub(crate) async fn tls_connect_with(
    tcp: TcpStream,
    host: &str,
    config: Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HttpError> {
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| HttpError(format!("invalid TLS server name {host:?}: {e}")))?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| HttpError(e.to_string()))
}

/// Accepts any server certificate (InsecureSkipVerify); signatures are
/// still checked so the handshake is well-formed.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
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
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{TIMEOUT, closed_port};
    use super::*;
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use tokio::net::TcpListener;

    async fn route(req: Request<Incoming>) -> Result<hyper::Response<String>, Infallible> {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        let (status, location, body) = match req.uri().path() {
            "/ok" => (200, None, "fine".to_owned()),
            "/headers" => (
                200,
                None,
                format!(
                    "ua={} accept={} host={} x-probe={}",
                    header("user-agent"),
                    header("accept"),
                    header("host"),
                    header("x-probe")
                ),
            ),
            "/missing" => (404, None, "secret body".to_owned()),
            "/big" => (500, None, "x".repeat(100 * 1024)),
            "/redirect" => (302, Some("/ok".to_owned()), String::new()),
            "/relative/redirect" => (301, Some("../missing".to_owned()), String::new()),
            "/loop" => (307, Some("/loop".to_owned()), String::new()),
            "/away" => (
                302,
                Some("http://elsewhere.invalid/".to_owned()),
                "moved".to_owned(),
            ),
            "/slow" => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                (200, None, String::new())
            }
            _ => (400, None, String::new()),
        };
        let mut resp = hyper::Response::new(body);
        *resp.status_mut() = StatusCode::from_u16(status).unwrap();
        if let Some(l) = location {
            resp.headers_mut()
                .insert(hyper::header::LOCATION, l.parse().unwrap());
        }
        Ok(resp)
    }

    /// An HTTP (or, given an acceptor, HTTPS) server on a free local port.
    async fn http_server(tls: Option<tokio_rustls::TlsAcceptor>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let _ = conn
                                .serve_connection(TokioIo::new(stream), service_fn(route))
                                .await;
                        }
                        Some(acceptor) => {
                            let Ok(stream) = acceptor.accept(stream).await else {
                                return;
                            };
                            let _ = conn
                                .serve_connection(TokioIo::new(stream), service_fn(route))
                                .await;
                        }
                    }
                });
            }
        });
        addr
    }

    fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> HttpGet {
        let mut all: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        all.push((
            "User-Agent".into(),
            kubelet_core::probe::PROBE_USER_AGENT.into(),
        ));
        all.push(("Accept".into(), "*/*".into()));
        HttpGet {
            scheme: Scheme::Http,
            host: addr.ip().to_string(),
            port: addr.port(),
            path: path.into(),
            headers: all,
        }
    }

    #[tokio::test]
    async fn http_probe_outcomes() {
        let addr = http_server(None).await;
        let url = |p: &str| format!("http://{addr}{p}");
        let cases = [
            ("/ok", Outcome::Success, "fine".to_owned()),
            ("/redirect", Outcome::Success, "fine".to_owned()),
            (
                "/missing",
                Outcome::Failure,
                "HTTP probe failed with statuscode: 404".to_owned(),
            ),
            (
                "/relative/redirect",
                Outcome::Failure,
                "HTTP probe failed with statuscode: 404".to_owned(),
            ),
            (
                "/big",
                Outcome::Failure,
                "HTTP probe failed with statuscode: 500".to_owned(),
            ),
            (
                "/away",
                Outcome::Warning,
                "Probe terminated redirects, Response body: moved".to_owned(),
            ),
            (
                "/loop",
                Outcome::Failure,
                format!("Get {:?}: stopped after 10 redirects", url("/loop")),
            ),
        ];
        for (path, outcome, output) in cases {
            let got = run_http(&get(addr, path, &[]), TIMEOUT).await;
            assert_eq!(got, HandlerResult::new(outcome, output), "{path}");
        }
    }

    #[tokio::test]
    async fn http_probe_sends_upstream_headers() {
        let addr = http_server(None).await;
        let got = run_http(&get(addr, "/headers", &[("X-Probe", "yes")]), TIMEOUT).await;
        assert_eq!(
            got.output,
            format!("ua=kube-probe/1.37 accept=*/* host={addr} x-probe=yes")
        );
        let got = run_http(&get(addr, "/headers", &[("Host", "example.com")]), TIMEOUT).await;
        assert!(got.output.contains("host=example.com "), "{}", got.output);
    }

    #[tokio::test]
    async fn http_probe_times_out_and_reports_dial_errors() {
        let addr = http_server(None).await;
        let slow = run_http(&get(addr, "/slow", &[]), TIMEOUT).await;
        assert_eq!(slow.outcome, Outcome::Failure);
        assert_eq!(
            slow.output,
            format!(
                "Get \"http://{addr}/slow\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )
        );
        let closed = closed_port().await;
        let refused = run_http(&get(closed, "/", &[]), TIMEOUT).await;
        assert_eq!(
            refused,
            HandlerResult::new(
                Outcome::Failure,
                format!("Get \"http://{closed}/\": dial tcp {closed}: connect: connection refused")
            )
        );
    }

    #[tokio::test]
    async fn https_probe_skips_certificate_verification() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
        let addr = http_server(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await;
        let mut target = get(addr, "/ok", &[]);
        target.scheme = Scheme::Https;
        assert_eq!(
            run_http(&target, TIMEOUT).await,
            HandlerResult::new(Outcome::Success, "fine")
        );
    }

    #[test]
    fn relative_redirects_resolve_dot_segments() {
        let cases = [
            ("/a/b", "c", "/a/c"),
            ("/a/b", "../c?x=1", "/c?x=1"),
            ("/a/b/c", "./../d", "/a/d"),
            ("/a/b", "..", "/"),
            ("/a/b", "/abs", "/abs"),
            ("/", "../../x", "/x"),
        ];
        for (from, location, want) in cases {
            let target = Target {
                scheme: Scheme::Http,
                host: "h".into(),
                port: 80,
                path: from.into(),
                host_header: "custom".into(),
            };
            let next = redirect(&target, location).unwrap();
            assert_eq!(next.path, want, "{from} + {location}");
            assert_eq!(next.host_header, "custom");
        }
        let absolute = Target {
            scheme: Scheme::Http,
            host: "h".into(),
            port: 80,
            path: "/".into(),
            host_header: "custom".into(),
        };
        let next = redirect(&absolute, "https://[::1]:8443/x").unwrap();
        assert_eq!(
            (
                next.scheme,
                next.host.as_str(),
                next.port,
                next.path.as_str(),
                next.host_header.as_str()
            ),
            (Scheme::Https, "::1", 8443, "/x", "[::1]:8443")
        );
    }
}
