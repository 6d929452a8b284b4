//! podCertificate projections (upstream's pkg/kubelet/podcertificate
//! IssuingManager): per projected source, a key made here and a
//! PodCertificateRequest (certificates.k8s.io/v1) with a stub PKCS#10
//! request signed by it; the signer's chain and the key are the files.
//!
//! - The transitions are `kubelet_core::podcert::step`'s; this manager does
//!   what they ask (make a key, create the request, tell events) when the
//!   pod's volumes are set up, i.e. on every sync of the pod, which plays
//!   upstream's refresh pass: from `beginRefreshAt` on, a new key and
//!   request go out and the current credential is served meanwhile.
//! - The node's requests are watched (fieldSelector `spec.nodeName`, the
//!   only list the Node authorizer allows); a request whose status changes
//!   wakes its pod, so an issued credential is written at once.
//! - State is in memory, as upstream's: after a restart every projection
//!   asks again. Keys are never logged.

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::certificates::v1::PodCertificateRequest;
use k8s_openapi::api::core::v1::{Pod, PodCertificateProjection};
use kubelet_api::objects::{
    Latest, create_pod_certificate_request, get_service_account, watch_all,
};
use kubelet_api::{ApiClient, ApiError};
use kubelet_core::failure::Cause;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::podcert::{
    self, Action, Input, Issued, KeyType, MAX_JITTER_SECS, NotIssued, PrivateKeyPem, Requester,
    State,
};
use kubelet_core::types::PodUid;
use tokio::sync::{mpsc, watch};

use crate::clock::{Clock, Jitter};
use crate::events::{Involved, Recorder, WARNING};
use kubelet_tasks::{Tasks, blocking};

/// One projected source: the pod, its volume and the source's index in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pod: PodUid,
    volume: String,
    index: usize,
}

struct Record {
    signer: String,
    state: State,
}

type Requests = Latest<Vec<PodCertificateRequest>>;

#[derive(Clone)]
pub struct PodCertificates {
    api: ApiClient,
    tasks: Tasks,
    clock: Clock,
    metrics: KubeletMetrics,
    node_name: String,
    node_uid: Arc<RwLock<Option<String>>>,
    /// Pods to sync again (a request of theirs changed).
    resync: mpsc::UnboundedSender<PodUid>,
    records: Arc<Mutex<HashMap<Key, Record>>>,
    /// The node's requests, once watched.
    requests: Arc<Mutex<Option<watch::Receiver<Requests>>>>,
    jitter: Jitter,
}

impl PodCertificates {
    pub fn new(
        api: ApiClient,
        tasks: Tasks,
        clock: Clock,
        metrics: KubeletMetrics,
        node_name: String,
        node_uid: Arc<RwLock<Option<String>>>,
        resync: mpsc::UnboundedSender<PodUid>,
    ) -> Self {
        PodCertificates {
            api,
            tasks,
            clock,
            metrics,
            node_name,
            node_uid,
            resync,
            records: Arc::default(),
            requests: Arc::default(),
            jitter: Jitter::default(),
        }
    }

    /// The credential of source `index` of `pod`'s volume `volume`: the one
    /// issued, or why there is none; asks for one (or a refresh) when the
    /// state says so.
    pub async fn bundle(
        &self,
        pod: &Pod,
        volume: &str,
        index: usize,
        src: &PodCertificateProjection,
        events: &Recorder,
    ) -> Result<Issued, PodCertError> {
        let key_type: KeyType = src.key_type.parse().map_err(PodCertError::KeyType)?;
        if src.user.is_some() {
            return Err(PodCertError::User);
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let key = Key {
            pod: PodUid::of(pod),
            volume: volume.to_owned(),
            index,
        };
        let state = self
            .records
            .lock()
            .get(&key)
            .map(|r| r.state.clone())
            .unwrap_or_default();
        let pcr = state
            .waiting_on()
            .and_then(|name| self.request(namespace, name));
        let seen = match (&pcr, self.listed()) {
            (None, false) => podcert::Seen::Pending,
            (p, _) => podcert::seen(p.as_ref()),
        };
        let now = self.now();
        let jitter = self.jitter();
        let input = Input::Sync {
            now,
            pcr: seen,
            jitter,
        };
        let (mut state, actions) = podcert::step(state, input, namespace);
        let mut failed = None;
        for action in actions {
            match action {
                Action::Event { reason, message } => {
                    events.event(&Involved::pod(pod, None), WARNING, reason, message);
                }
                Action::CreateRequest => match self.create(pod, src, key_type).await {
                    Ok((name, created_at, pem)) => {
                        let input = Input::Created {
                            name: &name,
                            created_at,
                            jitter,
                            key: pem,
                        };
                        state = podcert::step(state, input, namespace).0;
                    }
                    Err(e) => failed = Some(e),
                },
            }
        }
        let issued = state.bundle().cloned();
        self.records.lock().insert(
            key,
            Record {
                signer: src.signer_name.clone(),
                state,
            },
        );
        self.report(now);
        match (issued, failed) {
            // A refresh that could not be asked for: the current credential
            // is served meanwhile, and the next sync asks again.
            (Ok(issued), Some(e)) => {
                tracing::warn!(error = %e, pod = ?pod.metadata.name, namespace, "refreshing a pod certificate failed: keeping the current one");
                Ok(issued)
            }
            (Ok(issued), None) => Ok(issued),
            (Err(_), Some(e)) => Err(e),
            (Err(not_issued), None) => Err(not_issued.into()),
        }
    }

    /// Forget the projections of a pod that is gone (its requests are left
    /// to their owner reference, as upstream's are).
    pub fn forget_pod(&self, uid: &PodUid) {
        self.records.lock().retain(|k, _| &k.pod != uid);
        self.report(self.now());
    }

    fn now(&self) -> i64 {
        self.clock.now_nanos() / 1_000_000_000
    }

    /// Upstream's jitter: uniform enough in [0, 5 min).
    fn jitter(&self) -> i64 {
        (self.jitter.fraction() * MAX_JITTER_SECS as f64) as i64
    }

    fn report(&self, now: i64) {
        let counts = {
            let records = self.records.lock();
            podcert::count_states(records.values().map(|r| (r.signer.as_str(), &r.state)), now)
        };
        self.metrics.podcertificate_states.set_all(
            counts
                .iter()
                .map(|((signer, state), n)| (vec![signer.as_str(), *state], *n as f64)),
        );
    }

    /// A key, and a request carrying its stub CSR: (the request's name, its
    /// creation time, the key).
    async fn create(
        &self,
        pod: &Pod,
        src: &PodCertificateProjection,
        key_type: KeyType,
    ) -> Result<(String, i64, PrivateKeyPem), PodCertError> {
        let node_uid = self
            .node_uid
            .read()
            .clone()
            .ok_or(PodCertError::NodeNotRegistered)?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref())
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        let sa = get_service_account(&self.api, namespace, account)
            .await
            .map_err(PodCertError::ServiceAccount)?;
        let (pem, csr) = blocking(move || Ok(generate(key_type))).await??;
        let who = Requester {
            namespace,
            pod_name: pod.metadata.name.as_deref().unwrap_or_default(),
            pod_uid: pod.metadata.uid.as_deref().unwrap_or_default(),
            service_account: account,
            service_account_uid: sa.metadata.uid.as_deref().unwrap_or_default(),
            node_name: &self.node_name,
            node_uid: &node_uid,
        };
        let made =
            create_pod_certificate_request(&self.api, &podcert::request_object(&who, src, csr))
                .await
                .map_err(PodCertError::Create)?;
        let name = made.metadata.name.unwrap_or_default();
        let created_at = made
            .metadata
            .creation_timestamp
            .map_or_else(|| self.now(), |t| t.0.as_second());
        tracing::info!(pod = ?who.pod_name, namespace, request = %name, signer = %src.signer_name, "PodCertificateRequest created");
        Ok((name, created_at, pem))
    }

    /// Whether the node's requests have been listed.
    fn listed(&self) -> bool {
        self.watched()
            .is_some_and(|rx| !matches!(*rx.borrow(), Latest::Pending))
    }

    /// The request `namespace/name`, as last listed.
    fn request(&self, namespace: &str, name: &str) -> Option<PodCertificateRequest> {
        let rx = self.watched()?;
        let latest = rx.borrow();
        let Latest::Present(all) = &*latest else {
            return None;
        };
        all.iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some(name)
                    && r.metadata.namespace.as_deref() == Some(namespace)
            })
            .cloned()
    }

    /// The watch of the node's requests, started on first use; a request
    /// whose status changes wakes its pod.
    fn watched(&self) -> Option<watch::Receiver<Requests>> {
        let mut requests = self.requests.lock();
        if let Some(rx) = requests.as_ref() {
            return Some(rx.clone());
        }
        let (tx, rx) = watch::channel(Requests::Pending);
        let (api, fields) = (
            self.api.clone(),
            format!("spec.nodeName={}", self.node_name),
        );
        let (mut changes, resync) = (rx.clone(), self.resync.clone());
        self.tasks.spawn(
            tracing::info_span!("pod_certificate_request_watch"),
            move |token| async move {
                let wake = async move {
                    let mut known: HashMap<String, String> = HashMap::new();
                    while changes.changed().await.is_ok() {
                        let Latest::Present(all) = changes.borrow_and_update().clone() else {
                            continue;
                        };
                        let mut now_known = HashMap::new();
                        for r in all.iter() {
                            let id = format!(
                                "{}/{}",
                                r.metadata.namespace.as_deref().unwrap_or_default(),
                                r.metadata.name.as_deref().unwrap_or_default()
                            );
                            let version = r.metadata.resource_version.clone().unwrap_or_default();
                            if known.get(&id) != Some(&version) {
                                let _ = resync.send(PodUid::from(r.spec.pod_uid.as_str()));
                            }
                            now_known.insert(id, version);
                        }
                        known = now_known;
                    }
                };
                tokio::select! {
                    _ = watch_all::<PodCertificateRequest>(
                        &api, "PodCertificateRequests", Some(&fields), tx, token,
                    ) => {}
                    _ = wake => {}
                }
            },
        );
        *requests = Some(rx.clone());
        Some(rx)
    }
}

/// A private key of `key_type` (PKCS#8 PEM) and the stub PKCS#10 request
/// upstream's kubelet sends with it: empty subject, no attributes, signed
/// with the key (Go's default algorithm for it).
pub fn generate(key_type: KeyType) -> Result<(PrivateKeyPem, Vec<u8>), PodCertError> {
    let alg = match key_type {
        KeyType::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        KeyType::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
        KeyType::Ed25519 => &rcgen::PKCS_ED25519,
        KeyType::Rsa3072 | KeyType::Rsa4096 | KeyType::EcdsaP521 => {
            return Err(PodCertError::UnsupportedKeyType(key_type));
        }
    };
    let key = rcgen::KeyPair::generate_for(alg).map_err(PodCertError::Key)?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).map_err(PodCertError::Key)?;
    Ok((PrivateKeyPem(key.serialize_pem()), csr.der().to_vec()))
}

/// Why a podCertificate projection has no files, in upstream's words where
/// it has them.
#[derive(Debug, thiserror::Error)]
pub enum PodCertError {
    #[error("invalid podCertificate keyType: {0}")]
    KeyType(String),
    #[error(
        "podCertificate keyType {0} is not supported by rkubelet yet (ECDSAP256, ECDSAP384 and ED25519 are)"
    )]
    UnsupportedKeyType(KeyType),
    #[error(
        "podCertificate user is not supported by rkubelet (feature gate AtomicWriteVolumeUserFields)"
    )]
    User,
    #[error("while generating the key: {0}")]
    Key(#[source] rcgen::Error),
    #[error("while getting node object from local cache: the node is not registered yet")]
    NodeNotRegistered,
    #[error("while fetching service account: {0}")]
    ServiceAccount(#[source] ApiError),
    #[error("while creating PodCertificateRequest: {0}")]
    Create(#[source] ApiError),
    #[error(transparent)]
    NotIssued(#[from] NotIssued),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl PodCertError {
    /// What would clear it: a new spec for what rkubelet refuses or the
    /// signer refused for good; the API server or the signer otherwise.
    pub fn cause(&self) -> Cause {
        match self {
            PodCertError::KeyType(_)
            | PodCertError::UnsupportedKeyType(_)
            | PodCertError::User
            | PodCertError::NotIssued(NotIssued::Denied { .. } | NotIssued::Failed { .. }) => {
                Cause::Unsupported
            }
            PodCertError::Key(_)
            | PodCertError::NodeNotRegistered
            | PodCertError::ServiceAccount(_)
            | PodCertError::Create(_)
            | PodCertError::NotIssued(NotIssued::Pending)
            | PodCertError::Io(_) => Cause::Transient,
        }
    }
}

#[cfg(test)]
#[path = "podcert_tests.rs"]
mod tests;
