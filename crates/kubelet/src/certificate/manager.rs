//! The certificate manager (client-go's `util/certificate` manager): keeps
//! one of the node's certificates current by asking the control plane for
//! a new one, through a CertificateSigningRequest, when there is none, when
//! it no longer names what the node is, and at 70–90 % of its life.

use std::sync::Arc;
use std::time::Duration;

use kubelet_api::ApiClient;
use kubelet_api::csr::{CsrError, CsrRequest, request_certificate, wait_for_certificate};
use kubelet_core::certificate::{
    Kind, Template, ec_private_key_pem, next_rotation, pkcs8_from_pem, retry_delay_ms,
};
use kubelet_core::metrics::{Expiry, KubeletMetrics};
use kubelet_server::tls::{ServingCertificate, TlsError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::store::{FileStore, Pair, StoreError, serving_cert};
use crate::clock::{Clock, Jitter};

/// How long one request is waited on before a new one (upstream's
/// certificateWaitTimeout).
pub const CERTIFICATE_WAIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// How long the kubelet runs on without a valid client certificate while
/// the API server answers, before it exits so that whatever restarts it
/// can lay down new credentials (upstream's exitAfter).
pub const CLIENT_EXIT_AFTER: Duration = Duration::from_secs(5 * 60);

/// Why one rotation produced no certificate.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("unable to generate a certificate signing request: {0}")]
    Generate(String),
    #[error("failed while requesting a signed certificate from the control plane: {0}")]
    Create(#[source] CsrError),
    #[error("certificate request was not signed: {0}")]
    Csr(#[source] CsrError),
    #[error("certificate request was not signed: timed out waiting for {0:?}")]
    Timeout(String),
    #[error("unable to store the new cert/key pair: {0}")]
    Store(#[from] StoreError),
    #[error("unable to use the new client certificate: {0}")]
    ApplyClient(#[from] kubelet_api::ApiError),
    #[error("unable to serve the new certificate: {0}")]
    ApplyServer(#[from] TlsError),
}

/// Why the manager stopped the kubelet.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(
        "No valid client certificate is found and the server is responsive, exiting (no valid certificate for {0:?})"
    )]
    NoValidCertificate(Duration),
}

/// A key and the PKCS#10 request for it.
pub struct Request {
    /// The key, upstream's `EC PRIVATE KEY` PEM.
    pub key_pem: String,
    pub csr_pem: String,
    /// The public key's SubjectPublicKeyInfo, DER.
    pub spki_der: Vec<u8>,
}

/// A request for `template` signed with `key_pem` (`EC PRIVATE KEY` or
/// `PRIVATE KEY`), or with a new ECDSA P-256 key when None (upstream makes
/// a new key for every rotation).
pub fn make_request(template: &Template, key_pem: Option<&str>) -> Result<Request, RotateError> {
    let err = |e: rcgen::Error| RotateError::Generate(e.to_string());
    let key = match key_pem {
        Some(pem) => {
            let der = pkcs8_from_pem(pem)
                .ok_or_else(|| RotateError::Generate("the key is not an ECDSA P-256 key".into()))?;
            rcgen::KeyPair::try_from(der.as_slice()).map_err(err)?
        }
        None => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(err)?,
    };
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    // Go writes the organization before the common name.
    for o in &template.organizations {
        dn.push(rcgen::DnType::OrganizationName, o.as_str());
    }
    dn.push(rcgen::DnType::CommonName, template.common_name.as_str());
    params.distinguished_name = dn;
    for name in &template.dns_names {
        let name = rcgen::string::Ia5String::try_from(name.as_str()).map_err(err)?;
        params.subject_alt_names.push(rcgen::SanType::DnsName(name));
    }
    for ip in &template.ips {
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(*ip));
    }
    let csr = params.serialize_request(&key).map_err(err)?;
    let key_pem = ec_private_key_pem(&key.serialize_der())
        .ok_or_else(|| RotateError::Generate("the key is not an ECDSA P-256 key".into()))?;
    Ok(Request {
        key_pem,
        csr_pem: csr.pem().map_err(err)?,
        spki_der: rcgen::PublicKeyData::subject_public_key_info(&key),
    })
}

/// The API clients a manager asks with.
#[derive(Clone)]
pub struct Clients {
    /// The kubelet's client.
    pub main: ApiClient,
    /// What asks while there is no valid certificate (the bootstrap
    /// kubeconfig's token); None: `main`.
    pub bootstrap: Option<ApiClient>,
}

/// What each new certificate is put to use in.
#[derive(Clone)]
pub enum Target {
    /// Nothing (the blocking bootstrap writes the kubeconfig after).
    Nothing,
    /// The kubelet's API client authenticates with it.
    ApiClient(ApiClient),
    /// The kubelet API serves it.
    Server(Arc<ServingCertificate>),
}

/// One certificate kept current.
pub struct CertificateManager {
    pub kind: Kind,
    pub store: FileStore,
    /// What the certificate must name; None: nothing to ask for yet (a
    /// serving certificate before the node has an IP address).
    pub template: watch::Receiver<Option<Template>>,
    pub clients: Clients,
    pub target: Target,
    /// Each new pair.
    pub current: watch::Sender<Option<Arc<Pair>>>,
    pub clock: Clock,
    pub metrics: KubeletMetrics,
    pub jitter: Jitter,
}

impl CertificateManager {
    /// The pair in the store, published (and, for the client certificate,
    /// given to the main client); a pair that does not parse is logged
    /// and treated as none, as upstream.
    pub fn load(&self) -> Option<Arc<Pair>> {
        let pair = match self.store.current() {
            Ok(pair) => pair.map(Arc::new),
            Err(e) => {
                tracing::warn!(kind = ?self.kind, error = %e, "could not load the current certificate");
                None
            }
        };
        if let Some(pair) = &pair
            && let Err(e) = self.apply(pair)
        {
            tracing::warn!(kind = ?self.kind, error = %e, "could not use the current certificate");
        }
        self.current.send_replace(pair.clone());
        self.report();
        pair
    }

    fn apply(&self, pair: &Pair) -> Result<(), RotateError> {
        match &self.target {
            Target::Nothing => {}
            Target::ApiClient(api) => api.set_client_certificate(&pair.chain_pem, &pair.key_pem)?,
            Target::Server(serving) => serving.set(serving_cert(pair)?)?,
        }
        Ok(())
    }

    /// The TTL gauge of this kind of certificate.
    fn ttl(&self) -> &Expiry {
        match self.kind {
            Kind::Client => &self.metrics.client_certificate_ttl,
            Kind::Serving => &self.metrics.server_certificate_ttl,
        }
    }

    fn now_secs(&self) -> i64 {
        self.clock.now_nanos() / 1_000_000_000
    }

    /// The current pair while it has not expired (upstream's Current()).
    fn valid(&self) -> Option<Arc<Pair>> {
        let pair = self.current.borrow().clone()?;
        (self.now_secs() < pair.leaf.not_after).then_some(pair)
    }

    fn report(&self) {
        let until = self.current.borrow().as_ref().map(|p| p.leaf.not_after);
        self.ttl().set(until);
    }

    /// Ask once: a key and request, the CSR created with whichever client
    /// may, its certificate waited on, stored and published.
    pub async fn rotate(&self, cancel: &CancellationToken) -> Result<Arc<Pair>, RotateError> {
        let template = self.template.borrow().clone().ok_or_else(|| {
            RotateError::Generate("unable to create a csr, no template available".into())
        })?;
        let request = make_request(&template, None)?;
        self.request(&template, &request, None, CERTIFICATE_WAIT_TIMEOUT, cancel)
            .await
    }

    /// Create the CSR for `request` (named `name`, or generated), wait up
    /// to `timeout` for it, store and publish the certificate.
    pub async fn request(
        &self,
        template: &Template,
        request: &Request,
        name: Option<&str>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Arc<Pair>, RotateError> {
        let client = match (&self.clients.bootstrap, self.valid()) {
            (Some(bootstrap), None) => bootstrap,
            _ => &self.clients.main,
        };
        let usages = self.kind.usages();
        let csr = CsrRequest {
            name,
            request_pem: &request.csr_pem,
            signer: self.kind.signer(),
            usages: &usages,
        };
        let (name, uid) = request_certificate(client, &csr)
            .await
            .map_err(RotateError::Create)?;
        tracing::info!(kind = ?self.kind, csr = %name, cn = %template.common_name, "requested a certificate");
        let chain =
            tokio::time::timeout(timeout, wait_for_certificate(client, &name, &uid, cancel))
                .await
                .map_err(|_| RotateError::Timeout(name.clone()))?
                .map_err(RotateError::Csr)?;
        let pair = Arc::new(
            self.store
                .update(&chain, &request.key_pem, self.now_secs())?,
        );
        self.apply(&pair)?;
        let old = self.current.send_replace(Some(pair.clone()));
        self.report();
        if let (Kind::Serving, Some(old)) = (self.kind, &old) {
            let lived = self.now_secs() - old.leaf.not_before;
            self.metrics
                .server_certificate_rotation
                .observe(&[], lived as f64);
        }
        tracing::info!(
            kind = ?self.kind,
            csr = %name,
            not_after = pair.leaf.not_after,
            rotated = old.is_some(),
            "certificate issued and in use"
        );
        Ok(pair)
    }

    /// Keep the certificate current until cancelled: sleep until it is
    /// due (or the template changes), rotate, retry with upstream's
    /// back-off. For the client certificate, end with an error once there
    /// has been no valid one for [`CLIENT_EXIT_AFTER`] while the API server
    /// answers. The pair in the store is the one [`CertificateManager::load`]
    /// published when the manager was made.
    pub async fn run(mut self, cancel: CancellationToken) -> Result<(), ManagerError> {
        self.ttl().register();
        let mut last_valid = tokio::time::Instant::now();
        let mut server_healthy = false;
        let mut failures: u32 = 0;
        let mut template_open = true;
        loop {
            let now = self.clock.now_nanos();
            let template = self.template.borrow_and_update().clone();
            let wait = match (&template, failures) {
                (None, _) => None,
                (Some(template), 0) => {
                    let leaf = self.valid().map(|p| p.leaf.clone());
                    let due = next_rotation(now, leaf.as_ref(), template, self.jitter.fraction());
                    Some(Duration::from_nanos(due.saturating_sub(now).max(0) as u64))
                }
                (Some(_), n) => Some(Duration::from_millis(retry_delay_ms(
                    n - 1,
                    self.jitter.fraction(),
                ))),
            };
            if let Some(wait) = wait
                && !wait.is_zero()
            {
                tracing::debug!(kind = ?self.kind, ?wait, "next certificate rotation");
            }
            let changed = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                _ = sleep_or_forever(wait) => false,
                // A template no one changes any more stays as it is.
                r = self.template.changed(), if template_open => {
                    template_open = r.is_ok();
                    true
                }
            };
            if changed {
                continue;
            }
            match self.rotate(&cancel).await {
                Ok(_) => {
                    failures = 0;
                    server_healthy = true;
                }
                Err(e) => {
                    if cancel.is_cancelled() {
                        return Ok(());
                    }
                    failures = failures.saturating_add(1);
                    match self.kind {
                        Kind::Client => &self.metrics.client_certificate_renew_errors,
                        Kind::Serving => &self.metrics.server_certificate_renew_errors,
                    }
                    .inc(&[]);
                    if let RotateError::Create(csr) = &e {
                        server_healthy = csr.server_answered();
                    }
                    tracing::warn!(kind = ?self.kind, error = %e, failures, "certificate rotation failed");
                }
            }
            if self.kind == Kind::Client {
                if self.valid().is_some() {
                    last_valid = tokio::time::Instant::now();
                } else if last_valid.elapsed() > CLIENT_EXIT_AFTER && server_healthy {
                    return Err(ManagerError::NoValidCertificate(last_valid.elapsed()));
                }
            }
        }
    }
}

async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
