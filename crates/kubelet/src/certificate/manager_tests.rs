//! The manager against a fake API server that approves and signs (or
//! denies) every request, on a paused clock.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::client::Body;
use kubelet_core::certificate::client_template;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::*;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn reply(code: StatusCode, body: serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(serde_json::to_vec(&body).unwrap()));
    *resp.status_mut() = code;
    resp
}

/// What the fake signer does with each request, in turn (then: sign).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    Sign,
    Deny,
    /// The create is refused (403), as the authorizer refuses a node's.
    Forbid,
}

struct Signer {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    clock: Clock,
    /// Certificates' lives, as the controller manager's signer: backdated
    /// 5 min, this long after signing.
    ttl_secs: i64,
}

impl Signer {
    fn new(clock: Clock, ttl_secs: i64) -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        Signer {
            issuer: rcgen::Issuer::new(params, ca_key),
            clock,
            ttl_secs,
        }
    }

    fn sign(&self, csr_pem: &str) -> String {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem).unwrap();
        let now = self.clock.now_nanos() / 1_000_000_000;
        let at = |s: i64| time::OffsetDateTime::from_unix_timestamp(s).unwrap();
        csr.params.not_before = at(now - 300);
        csr.params.not_after = at(now + self.ttl_secs);
        csr.signed_by(&self.issuer).unwrap().pem()
    }
}

/// The fake API server: creates each CSR as `csr-<n>` with the verdict
/// next in `verdicts` (Sign when none is left) and lists it decided;
/// every created request goes out on `created` with its time.
async fn api_server(
    mut handle: Handle,
    signer: Signer,
    verdicts: Arc<Mutex<Vec<Verdict>>>,
    created: mpsc::UnboundedSender<(CertificateSigningRequest, tokio::time::Instant)>,
) {
    let mut csrs: Vec<CertificateSigningRequest> = Vec::new();
    while let Some((req, send)) = handle.next_request().await {
        let (method, uri) = (req.method().clone(), req.uri().clone());
        assert_eq!(
            uri.path(),
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            "{method} {uri}"
        );
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let resp = match method {
            Method::POST if verdicts.lock().first() == Some(&Verdict::Forbid) => {
                verdicts.lock().remove(0);
                let _ = created.send((
                    serde_json::from_slice(&body).unwrap(),
                    tokio::time::Instant::now(),
                ));
                reply(
                    StatusCode::FORBIDDEN,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Forbidden", "code": 403, "message": "certificatesigningrequests is forbidden"}),
                )
            }
            Method::POST => {
                let mut csr: CertificateSigningRequest = serde_json::from_slice(&body).unwrap();
                let n = csrs.len() + 1;
                csr.metadata.name = Some(format!("csr-{n}"));
                csr.metadata.uid = Some(format!("uid-{n}"));
                let _ = created.send((csr.clone(), tokio::time::Instant::now()));
                let verdict = {
                    let mut v = verdicts.lock();
                    if v.is_empty() {
                        Verdict::Sign
                    } else {
                        v.remove(0)
                    }
                };
                let pem = String::from_utf8(csr.spec.request.0.clone()).unwrap();
                let status = match verdict {
                    Verdict::Sign => serde_json::json!({
                        "conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved",
                            "message": "Auto approving self kubelet client certificate after SubjectAccessReview."}],
                        "certificate": k8s_openapi::ByteString(signer.sign(&pem).into_bytes()),
                    }),
                    Verdict::Deny | Verdict::Forbid => serde_json::json!({
                        "conditions": [{"type": "Denied", "status": "True", "reason": "NoWay", "message": "not you"}],
                    }),
                };
                let mut decided = csr.clone();
                decided.status = Some(serde_json::from_value(status).unwrap());
                csrs.push(decided);
                reply(StatusCode::CREATED, serde_json::to_value(&csr).unwrap())
            }
            Method::GET if uri.query().unwrap_or_default().contains("watch=true") => {
                // Nothing changes after the list: an empty watch that the
                // wait never needs (the list has the decision).
                std::future::pending::<()>().await;
                unreachable!()
            }
            Method::GET => {
                let query = uri.query().unwrap_or_default().to_owned();
                let items: Vec<_> = csrs
                    .iter()
                    .filter(|c| {
                        query.contains(&format!(
                            "metadata.name%3D{}",
                            c.metadata.name.as_deref().unwrap()
                        ))
                    })
                    .cloned()
                    .collect();
                reply(
                    StatusCode::OK,
                    serde_json::json!({"kind": "CertificateSigningRequestList", "apiVersion": "certificates.k8s.io/v1",
                        "metadata": {"resourceVersion": "1"}, "items": items}),
                )
            }
            other => panic!("unexpected {other} {uri}"),
        };
        send.send_response(resp);
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    manager: CertificateManager,
    created: mpsc::UnboundedReceiver<(CertificateSigningRequest, tokio::time::Instant)>,
    current: watch::Receiver<Option<Arc<Pair>>>,
    metrics: KubeletMetrics,
    clock: Clock,
}

fn fixture(ttl_secs: i64, verdicts: Vec<Verdict>) -> Fixture {
    let clock = Clock::following_tokio();
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let (created_tx, created) = mpsc::unbounded_channel();
    tokio::spawn(api_server(
        handle,
        Signer::new(clock, ttl_secs),
        Arc::new(Mutex::new(verdicts)),
        created_tx,
    ));
    let dir = tempfile::tempdir().unwrap();
    let metrics = KubeletMetrics::new("n1");
    let (_, template) = watch::channel(Some(client_template("n1")));
    let (current_tx, current) = watch::channel(None);
    let manager = CertificateManager {
        kind: Kind::Client,
        store: FileStore::open("kubelet-client", dir.path(), None).unwrap(),
        template,
        clients: Clients {
            main: ApiClient::new(kube::Client::new(service, "default"), 0, 1),
            bootstrap: None,
        },
        target: Target::Nothing,
        current: current_tx,
        clock,
        metrics: metrics.clone(),
        jitter: Jitter::default(),
    };
    Fixture {
        dir,
        manager,
        created,
        current,
        metrics,
        clock,
    }
}

#[test]
fn a_request_names_the_node_with_a_new_p256_key() {
    let template = client_template("n1");
    let a = make_request(&template, None).unwrap();
    let b = make_request(&template, None).unwrap();
    assert_ne!(a.key_pem, b.key_pem, "a new key for every request");
    assert!(a.key_pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"));
    let csr = rcgen::CertificateSigningRequestParams::from_pem(&a.csr_pem).unwrap();
    let dn: Vec<_> = csr
        .params
        .distinguished_name
        .iter()
        .map(|(t, v)| (format!("{t:?}"), format!("{v:?}")))
        .collect();
    assert_eq!(dn.len(), 2);
    assert!(
        dn[0].0.contains("OrganizationName") && dn[0].1.contains("system:nodes"),
        "{dn:?}"
    );
    assert!(
        dn[1].0.contains("CommonName") && dn[1].1.contains("system:node:n1"),
        "{dn:?}"
    );
    // The same key again gives the same public key (the bootstrap's stable
    // CSR name).
    let again = make_request(&template, Some(&a.key_pem)).unwrap();
    assert_eq!(again.spki_der, a.spki_der);
}

#[tokio::test(start_paused = true)]
async fn the_certificate_is_requested_at_once_then_rotated_at_70_to_90_percent_of_its_life() {
    let mut f = fixture(1_000, Vec::new());
    let cancel = CancellationToken::new();
    let start = tokio::time::Instant::now();
    let run = tokio::spawn(f.manager.run(cancel.clone()));

    let (first, at) = f.created.recv().await.unwrap();
    assert_eq!(at, start, "no certificate: requested at once");
    assert_eq!(first.metadata.generate_name.as_deref(), Some("csr-"));
    assert_eq!(
        first.spec.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        first.spec.usages.as_deref(),
        Some(&["digital signature".to_owned(), "client auth".to_owned()][..])
    );
    f.current.wait_for(Option::is_some).await.unwrap();
    let issued = f.current.borrow().clone().unwrap();
    assert_eq!(issued.leaf.common_name, "system:node:n1");
    let now = f.clock.now_nanos() / 1_000_000_000;
    assert_eq!(
        f.metrics.client_certificate_ttl.value_at(now),
        Some(1_000.0)
    );

    // Its life is 1300 s from the backdated NotBefore: rotation 610 to
    // 870 s after issue.
    let (second, at) = f.created.recv().await.unwrap();
    let after = (at - start).as_secs();
    assert!(
        (610..=870).contains(&after),
        "rotated {after} s after issue"
    );
    assert_eq!(second.metadata.generate_name.as_deref(), Some("csr-"));
    f.current
        .wait_for(|c| c.as_ref().is_some_and(|p| p.chain_pem != issued.chain_pem))
        .await
        .unwrap();

    // Upstream's layout: two pair files (0600), the current one an
    // absolute symlink to the newest.
    let current = f.dir.path().join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).unwrap();
    assert!(target.is_absolute(), "{target:?}");
    let pairs: Vec<_> = std::fs::read_dir(f.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != &current)
        .collect();
    assert_eq!(pairs.len(), 2, "{pairs:?}");
    for p in &pairs {
        let name = p.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("kubelet-client-20") && name.ends_with(".pem"),
            "{name}"
        );
        assert_eq!(
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let text = std::fs::read_to_string(&current).unwrap();
    assert!(text.contains("-----BEGIN CERTIFICATE-----"));
    assert!(text.trim_end().ends_with("-----END EC PRIVATE KEY-----"));
    let reread = stored_chain(&current);
    assert_eq!(reread, f.current.borrow().as_ref().unwrap().chain_pem);
    cancel.cancel();
    run.await.unwrap().unwrap();
}

/// The chain a store reads back from `current`.
fn stored_chain(current: &Path) -> String {
    FileStore::open("kubelet-client", current.parent().unwrap(), None)
        .unwrap()
        .current()
        .unwrap()
        .unwrap()
        .chain_pem
}

#[tokio::test(start_paused = true)]
async fn a_denied_request_is_counted_and_asked_again_after_2_s() {
    let mut f = fixture(1_000, vec![Verdict::Deny, Verdict::Deny]);
    let cancel = CancellationToken::new();
    let run = tokio::spawn(f.manager.run(cancel.clone()));
    let (_, first) = f.created.recv().await.unwrap();
    let (_, second) = f.created.recv().await.unwrap();
    let (_, third) = f.created.recv().await.unwrap();
    let gaps = [(second - first).as_millis(), (third - second).as_millis()];
    assert!((2_000..=2_200).contains(&gaps[0]), "{gaps:?}");
    assert!((4_000..=4_400).contains(&gaps[1]), "{gaps:?}");
    f.current.wait_for(Option::is_some).await.unwrap();
    assert_eq!(f.metrics.client_certificate_renew_errors.get(&[]), 2.0);
    cancel.cancel();
    run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_a_certificate_for_5_min_while_the_server_answers_the_kubelet_exits() {
    // Denials say nothing of the server (upstream): no exit on them alone.
    let mut f = fixture(1_000, vec![Verdict::Deny; 100]);
    let cancel = CancellationToken::new();
    let run = tokio::spawn(f.manager.run(cancel.clone()));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(!run.is_finished());
    cancel.cancel();
    run.await.unwrap().unwrap();
    assert!(f.created.recv().await.is_some());
    // A server that answers 403 to every request: the kubelet exits.
    let mut f = fixture(1_000, vec![Verdict::Forbid; 100]);
    let run = tokio::spawn(f.manager.run(CancellationToken::new()));
    let started = tokio::time::Instant::now();
    let err = run.await.unwrap().unwrap_err();
    assert!(matches!(err, ManagerError::NoValidCertificate(_)), "{err}");
    let after = started.elapsed().as_secs();
    assert!((300..=340).contains(&after), "exited after {after} s");
    assert!(f.created.recv().await.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_serving_certificate_names_the_nodes_addresses_and_is_served() {
    let mut f = fixture(1_000, Vec::new());
    let serving = Arc::new(ServingCertificate::default());
    let addresses = [
        k8s_openapi::api::core::v1::NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.2".into(),
        },
        k8s_openapi::api::core::v1::NodeAddress {
            type_: "Hostname".into(),
            address: "n1".into(),
        },
    ];
    let (_, template) = watch::channel(kubelet_core::certificate::serving_template(
        "n1", &addresses,
    ));
    f.manager.kind = Kind::Serving;
    f.manager.template = template;
    f.manager.target = Target::Server(serving.clone());
    f.manager.store = FileStore::open("kubelet-server", f.dir.path(), None).unwrap();
    let cancel = CancellationToken::new();
    let run = tokio::spawn(f.manager.run(cancel.clone()));
    let (csr, _) = f.created.recv().await.unwrap();
    assert_eq!(csr.spec.signer_name, "kubernetes.io/kubelet-serving");
    assert_eq!(
        csr.spec.usages.as_deref(),
        Some(&["digital signature".to_owned(), "server auth".to_owned()][..])
    );
    let pem = String::from_utf8(csr.spec.request.0.clone()).unwrap();
    let params = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
    let sans: Vec<String> = params
        .params
        .subject_alt_names
        .iter()
        .map(|s| format!("{s:?}"))
        .collect();
    assert_eq!(sans.len(), 2, "{sans:?}");
    assert!(
        sans[0].contains("n1") && sans[1].contains("10.0.0.2"),
        "{sans:?}"
    );
    f.current.wait_for(Option::is_some).await.unwrap();
    assert!(serving.is_set(), "the issued certificate is served");
    assert!(f.dir.path().join("kubelet-server-current.pem").exists());
    let now = f.clock.now_nanos() / 1_000_000_000;
    assert_eq!(
        f.metrics.server_certificate_ttl.value_at(now),
        Some(1_000.0)
    );
    assert_eq!(f.metrics.client_certificate_ttl.value_at(now), None);
    cancel.cancel();
    run.await.unwrap().unwrap();
}
