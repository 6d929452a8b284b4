//! Certificate signing requests for the node's own certificates
//! (certificates.k8s.io/v1), as client-go's `util/certificate/csr`: create
//! one (a generated `csr-` name, or a fixed one reused when it exists and
//! matches), then watch it by name until it is issued, denied or failed.

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, Event};
use kubelet_core::certificate::{CsrOutcome, csr_outcome};
use tokio_util::sync::CancellationToken;

use crate::client::{ApiClient, ApiError};
use crate::watch::Watch;

/// What a node asks to be signed.
#[derive(Clone, Debug)]
pub struct CsrRequest<'a> {
    /// A fixed name (the bootstrap's `node-csr-<digest>`), or None for a
    /// generated `csr-XXXXX`.
    pub name: Option<&'a str>,
    /// The PKCS#10 request, PEM.
    pub request_pem: &'a str,
    pub signer: &'a str,
    pub usages: &'a [&'a str],
}

/// Why no certificate came from a request.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    /// The API server refused or could not be reached; a later attempt may
    /// do better.
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("retrieved csr is not compatible: csr signerNames differ: new {new:?}, orig: {orig:?}")]
    Incompatible { new: String, orig: String },
    /// Denied or Failed: upstream's message with the condition's reason.
    #[error("{0}")]
    Refused(String),
    #[error("csr {0:?} was deleted")]
    Deleted(String),
    #[error("csr {0:?} changed UIDs")]
    ChangedUid(String),
    #[error("stopped while waiting for csr {0:?}")]
    Cancelled(String),
}

impl CsrError {
    /// What a failed create says of the API server (upstream's
    /// updateServerError): one that answers 401, 403 or 404 is healthy (the
    /// credentials are what fail); one that does not answer, or fails
    /// otherwise, is not.
    pub fn server_answered(&self) -> bool {
        match self {
            CsrError::Api(e) => matches!(e.code(), Some(401 | 403 | 404)),
            _ => false,
        }
    }
}

/// The request object, as client-go's RequestCertificate makes it.
pub fn csr_object(req: &CsrRequest<'_>) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: req.name.map(str::to_owned),
            generate_name: req.name.is_none().then(|| "csr-".to_owned()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(req.request_pem.as_bytes().to_vec()),
            signer_name: req.signer.to_owned(),
            usages: Some(req.usages.iter().map(|u| (*u).to_owned()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// Create the request; (its name, its UID). A fixed name that exists
/// already is reused when it names the same signer.
pub async fn request_certificate(
    api: &ApiClient,
    req: &CsrRequest<'_>,
) -> Result<(String, String), CsrError> {
    let csrs: Api<CertificateSigningRequest> = Api::all(api.client().clone());
    let id = |csr: &CertificateSigningRequest| {
        (
            csr.metadata.name.clone().unwrap_or_default(),
            csr.metadata.uid.clone().unwrap_or_default(),
        )
    };
    match csrs.create(&PostParams::default(), &csr_object(req)).await {
        Ok(created) => Ok(id(&created)),
        Err(kube::Error::Api(s)) if s.code == 409 && req.name.is_some() => {
            let name = req.name.unwrap_or_default();
            let existing = csrs.get(name).await.map_err(|e| {
                ApiError::from_kube("get", format!("certificatesigningrequest {name}"), e)
            })?;
            if existing.spec.signer_name != req.signer {
                return Err(CsrError::Incompatible {
                    new: req.signer.to_owned(),
                    orig: existing.spec.signer_name,
                });
            }
            Ok(id(&existing))
        }
        Err(e) => Err(ApiError::from_kube("create", "certificatesigningrequests", e).into()),
    }
}

/// Watch the request `name` (with `uid`) until it is issued (its PEM
/// chain), denied or failed; relists and re-watches after failures, as the
/// kubelet's other watches.
pub async fn wait_for_certificate(
    api: &ApiClient,
    name: &str,
    uid: &str,
    cancel: &CancellationToken,
) -> Result<String, CsrError> {
    let csrs: Api<CertificateSigningRequest> = Api::all(api.client().clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut watch = Watch::new(csrs, config);
    let mut listed = false;
    let check = |csr: &CertificateSigningRequest| -> Option<Result<String, CsrError>> {
        if csr.metadata.uid.as_deref() != Some(uid) {
            return Some(Err(CsrError::ChangedUid(name.to_owned())));
        }
        match csr_outcome(csr) {
            CsrOutcome::Pending => None,
            CsrOutcome::Issued(pem) => Some(Ok(pem)),
            CsrOutcome::Denied(m) | CsrOutcome::Failed(m) => Some(Err(CsrError::Refused(m))),
        }
    };
    while let Some(event) = watch.next(cancel).await {
        match event {
            Ok(Event::Init) => listed = false,
            Ok(Event::InitApply(csr) | Event::Apply(csr)) => {
                listed = true;
                if let Some(done) = check(&csr) {
                    return done;
                }
            }
            Ok(Event::InitDone) if !listed => return Err(CsrError::Deleted(name.to_owned())),
            Ok(Event::InitDone) => {}
            Ok(Event::Delete(_)) => return Err(CsrError::Deleted(name.to_owned())),
            Err(e) => {
                tracing::warn!(csr = name, error = %e, "watching a certificate signing request")
            }
        }
    }
    Err(CsrError::Cancelled(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_named_or_generated_as_client_go_makes_it() {
        let usages = ["digital signature", "client auth"];
        let req = |name| CsrRequest {
            name,
            request_pem: "-----BEGIN CERTIFICATE REQUEST-----\n",
            signer: "kubernetes.io/kube-apiserver-client-kubelet",
            usages: &usages,
        };
        let generated = serde_json::to_value(csr_object(&req(None))).unwrap();
        assert_eq!(
            generated["metadata"],
            serde_json::json!({"generateName": "csr-"})
        );
        assert_eq!(
            generated["spec"],
            serde_json::json!({
                "request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K",
                "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                "usages": ["digital signature", "client auth"],
            })
        );
        let named = serde_json::to_value(csr_object(&req(Some("node-csr-x")))).unwrap();
        assert_eq!(named["metadata"], serde_json::json!({"name": "node-csr-x"}));
    }

    #[test]
    fn the_server_counts_as_answering_unless_it_failed_otherwise() {
        let status = |code| {
            CsrError::Api(ApiError::Status {
                verb: "create",
                what: "certificatesigningrequests".into(),
                code,
                reason: String::new(),
                message: String::new(),
            })
        };
        for (err, answered) in [
            (status(401), true),
            (status(403), true),
            (status(404), true),
            (status(500), false),
            (
                CsrError::Api(ApiError::Transport {
                    verb: "create",
                    what: "certificatesigningrequests".into(),
                    message: "connection refused".into(),
                }),
                false,
            ),
            (
                CsrError::Incompatible {
                    new: "a".into(),
                    orig: "b".into(),
                },
                false,
            ),
        ] {
            assert_eq!(err.server_answered(), answered, "{err}");
        }
    }
}
