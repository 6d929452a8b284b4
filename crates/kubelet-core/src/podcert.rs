//! podCertificate projections (upstream's pkg/kubelet/podcertificate): per
//! projected source, a private key made on the node and a
//! PodCertificateRequest carrying a stub PKCS#10 request signed with it;
//! once a signer issues the chain, the key and the chain are the volume's
//! files, and a new key and request go out from `beginRefreshAt` on.
//!
//! This module is the pure part: the credential state machine (one enum,
//! one [`step`]), what a PodCertificateRequest says, the request object,
//! the chain cleaning and the files. The kubelet's manager does the I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{PodCertificateRequest, PodCertificateRequestSpec};
use k8s_openapi::api::core::v1::PodCertificateProjection;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::volume::{FileProjection, Payload};

/// A PodCertificateRequest not seen this long after its creation is taken
/// as deleted, and made again (upstream's assumeDeletedThreshold).
pub const ASSUME_DELETED_SECS: i64 = 10 * 60;
/// A refresh this late is told in an event (upstream's refreshOverdueDuration).
pub const REFRESH_OVERDUE_SECS: i64 = 10 * 60;
/// Upstream's jitter: uniform in [0, 5 min), added to the abandon and
/// refresh times so that projections do not move in step.
pub const MAX_JITTER_SECS: i64 = 5 * 60;

/// A projection's key type (the API's strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    Rsa3072,
    Rsa4096,
    EcdsaP256,
    EcdsaP384,
    EcdsaP521,
    Ed25519,
}

impl FromStr for KeyType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "RSA3072" => KeyType::Rsa3072,
            "RSA4096" => KeyType::Rsa4096,
            "ECDSAP256" => KeyType::EcdsaP256,
            "ECDSAP384" => KeyType::EcdsaP384,
            "ECDSAP521" => KeyType::EcdsaP521,
            "ED25519" => KeyType::Ed25519,
            other => return Err(format!("unknown key type {other:?}")),
        })
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyType::Rsa3072 => "RSA3072",
            KeyType::Rsa4096 => "RSA4096",
            KeyType::EcdsaP256 => "ECDSAP256",
            KeyType::EcdsaP384 => "ECDSAP384",
            KeyType::EcdsaP521 => "ECDSAP521",
            KeyType::Ed25519 => "ED25519",
        })
    }
}

/// A private key in PKCS#8 PEM; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKeyPem(pub String);

impl fmt::Debug for PrivateKeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKeyPem(..)")
    }
}

/// An issued credential: the key, the cleaned chain (leaf first) and its
/// times (Unix seconds), with the events already told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub key: PrivateKeyPem,
    pub chain: String,
    /// `status.beginRefreshAt` plus the jitter.
    pub begin_refresh_at: i64,
    pub not_after: i64,
    pub overdue_told: bool,
    pub expired_told: bool,
}

/// A request made and not answered yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub key: PrivateKeyPem,
    /// The PodCertificateRequest's name (in the pod's namespace).
    pub pcr: String,
    /// When an unseen request is taken as deleted.
    pub abandon_at: i64,
}

/// One projection's credential (upstream's credState*).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum State {
    /// Nothing requested yet.
    #[default]
    Initial,
    /// The first request is out.
    Wait(Waiting),
    /// The signer denied a request: permanent for this pod.
    Denied { reason: String, message: String },
    /// The signer failed a request: permanent for this pod.
    Failed { reason: String, message: String },
    /// A credential, served until its refresh is issued.
    Fresh(Issued),
    /// A credential served while a refresh request is out.
    WaitRefresh { current: Issued, refresh: Waiting },
}

/// What the request of a waiting state says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen<'a> {
    /// Not among the node's requests.
    Absent,
    /// Not answered.
    Pending,
    Issued {
        chain: &'a str,
        begin_refresh_at: i64,
        not_after: i64,
    },
    Denied {
        reason: &'a str,
        message: &'a str,
    },
    Failed {
        reason: &'a str,
        message: &'a str,
    },
}

/// What `pcr` says: its first Denied, Failed or Issued condition, as
/// upstream reads it (an Issued one without its times is still pending).
pub fn seen(pcr: Option<&PodCertificateRequest>) -> Seen<'_> {
    let Some(pcr) = pcr else {
        return Seen::Absent;
    };
    let Some(status) = pcr.status.as_ref() else {
        return Seen::Pending;
    };
    for c in status.conditions.iter().flatten() {
        match c.type_.as_str() {
            "Denied" => {
                return Seen::Denied {
                    reason: &c.reason,
                    message: &c.message,
                };
            }
            "Failed" => {
                return Seen::Failed {
                    reason: &c.reason,
                    message: &c.message,
                };
            }
            "Issued" => {
                let (Some(chain), Some(refresh), Some(after)) = (
                    status.certificate_chain.as_deref(),
                    status.begin_refresh_at.as_ref(),
                    status.not_after.as_ref(),
                ) else {
                    return Seen::Pending;
                };
                return Seen::Issued {
                    chain,
                    begin_refresh_at: refresh.0.as_second(),
                    not_after: after.0.as_second(),
                };
            }
            _ => {}
        }
    }
    Seen::Pending
}

/// What happened to a projection.
#[derive(Debug, Clone)]
pub enum Input<'a> {
    /// A sync at `now` (Unix seconds); `pcr` is what the request of a
    /// waiting state says (Absent otherwise).
    Sync {
        now: i64,
        pcr: Seen<'a>,
        jitter: i64,
    },
    /// The request of the last [`Action::CreateRequest`] was made with `key`.
    Created {
        name: &'a str,
        created_at: i64,
        jitter: i64,
        key: PrivateKeyPem,
    },
}

/// What the manager must do after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Make a key and a request, then step [`Input::Created`].
    CreateRequest,
    /// A Warning event on the pod.
    Event {
        reason: &'static str,
        message: String,
    },
}

/// One transition of a projection's credential (upstream's
/// handleProjection). `namespace` names requests in events.
pub fn step(state: State, input: Input<'_>, namespace: &str) -> (State, Vec<Action>) {
    let mut actions = Vec::new();
    let next = match (state, input) {
        (State::Initial, Input::Sync { .. }) => {
            actions.push(Action::CreateRequest);
            State::Initial
        }
        (State::Wait(w), Input::Sync { now, pcr, jitter }) => match pcr {
            Seen::Absent if now > w.abandon_at => {
                actions.push(Action::CreateRequest);
                State::Initial
            }
            Seen::Absent | Seen::Pending => State::Wait(w),
            Seen::Issued { .. } | Seen::Denied { .. } | Seen::Failed { .. } => {
                answered(w, pcr, jitter, namespace, &mut actions)
            }
        },
        (State::Fresh(mut current), Input::Sync { now, .. }) => {
            if now < current.begin_refresh_at {
                State::Fresh(current)
            } else {
                tell_late(&mut current, now, &mut actions);
                actions.push(Action::CreateRequest);
                State::Fresh(current)
            }
        }
        (
            State::WaitRefresh {
                mut current,
                refresh,
            },
            Input::Sync { now, pcr, jitter },
        ) => match pcr {
            Seen::Absent if now > refresh.abandon_at => State::Fresh(current),
            Seen::Absent | Seen::Pending => {
                tell_late(&mut current, now, &mut actions);
                State::WaitRefresh { current, refresh }
            }
            // The credential still valid goes with a denied or failed refresh.
            _ => answered(refresh, pcr, jitter, namespace, &mut actions),
        },
        (s @ (State::Denied { .. } | State::Failed { .. }), _) => s,
        (
            State::Initial,
            Input::Created {
                name,
                created_at,
                jitter,
                key,
            },
        ) => State::Wait(Waiting {
            key,
            pcr: name.to_owned(),
            abandon_at: created_at + ASSUME_DELETED_SECS + jitter,
        }),
        (
            State::Fresh(current),
            Input::Created {
                name,
                created_at,
                jitter,
                key,
            },
        ) => State::WaitRefresh {
            current,
            refresh: Waiting {
                key,
                pcr: name.to_owned(),
                abandon_at: created_at + ASSUME_DELETED_SECS + jitter,
            },
        },
        // A request made for a state that has moved on is not waited for.
        (s, Input::Created { .. }) => s,
    };
    (next, actions)
}

/// A waiting request answered: Issued → Fresh with its key; Denied or
/// Failed → permanent, told in an event.
fn answered(
    w: Waiting,
    pcr: Seen<'_>,
    jitter: i64,
    namespace: &str,
    actions: &mut Vec<Action>,
) -> State {
    match pcr {
        Seen::Issued {
            chain,
            begin_refresh_at,
            not_after,
        } => State::Fresh(Issued {
            key: w.key,
            chain: clean_chain(chain),
            begin_refresh_at: begin_refresh_at + jitter,
            not_after,
            overdue_told: false,
            expired_told: false,
        }),
        Seen::Denied { reason, message } => {
            actions.push(Action::Event {
                reason: "Denied",
                message: format!(
                    "PodCertificateRequest {namespace}/{} was denied, reason={reason:?}, message={message:?}",
                    w.pcr
                ),
            });
            State::Denied {
                reason: reason.to_owned(),
                message: message.to_owned(),
            }
        }
        Seen::Failed { reason, message } => {
            actions.push(Action::Event {
                reason: "Failed",
                message: format!(
                    "PodCertificateRequest {namespace}/{} failed, reason={reason:?}, message={message:?}",
                    w.pcr
                ),
            });
            State::Failed {
                reason: reason.to_owned(),
                message: message.to_owned(),
            }
        }
        Seen::Absent | Seen::Pending => State::Wait(w),
    }
}

/// The overdue and expired events, once each.
fn tell_late(current: &mut Issued, now: i64, actions: &mut Vec<Action>) {
    if now > current.begin_refresh_at + REFRESH_OVERDUE_SECS && !current.overdue_told {
        current.overdue_told = true;
        actions.push(Action::Event {
            reason: "CertificateOverdueForRefresh",
            message: "PodCertificate refresh overdue".into(),
        });
    }
    if now > current.not_after && !current.expired_told {
        current.expired_told = true;
        actions.push(Action::Event {
            reason: "CertificateExpired",
            message: "PodCertificate expired".into(),
        });
    }
}

impl State {
    /// The request this state waits on.
    pub fn waiting_on(&self) -> Option<&str> {
        match self {
            State::Wait(w) | State::WaitRefresh { refresh: w, .. } => Some(&w.pcr),
            _ => None,
        }
    }

    /// The credential to project, in upstream's words when there is none.
    pub fn bundle(&self) -> Result<&Issued, NotIssued> {
        match self {
            State::Initial | State::Wait(_) => Err(NotIssued::Pending),
            State::Denied { reason, message } => Err(NotIssued::Denied {
                reason: reason.clone(),
                message: message.clone(),
            }),
            State::Failed { reason, message } => Err(NotIssued::Failed {
                reason: reason.clone(),
                message: message.clone(),
            }),
            State::Fresh(i) | State::WaitRefresh { current: i, .. } => Ok(i),
        }
    }

    /// Upstream's `kubelet_podcertificate_states` state name.
    pub fn metrics_state(&self, now: i64) -> &'static str {
        match self {
            State::Initial | State::Wait(_) => "not_yet_issued",
            State::Denied { .. } => "denied",
            State::Failed { .. } => "failed",
            State::Fresh(i) | State::WaitRefresh { current: i, .. } => {
                if now > i.not_after {
                    "expired"
                } else if now > i.begin_refresh_at + REFRESH_OVERDUE_SECS {
                    "overdue_for_refresh"
                } else {
                    "fresh"
                }
            }
        }
    }
}

/// Why a projection has no credential (upstream's getCredBundle errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotIssued {
    #[error("credential bundle is not issued yet")]
    Pending,
    #[error("PodCertificateRequest was permanently denied: reason={reason:?} message={message:?}")]
    Denied { reason: String, message: String },
    #[error("PodCertificateRequest was permanently failed: reason={reason:?} message={message:?}")]
    Failed { reason: String, message: String },
}

/// Every PEM block of `chain` as a CERTIFICATE block, in order, without
/// headers or text between blocks (upstream's cleanCertificateChain).
pub fn clean_chain(chain: &str) -> String {
    let blocks = pem::parse_many(chain.as_bytes()).unwrap_or_default();
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    blocks
        .into_iter()
        .map(|b| pem::encode_config(&pem::Pem::new("CERTIFICATE", b.into_contents()), config))
        .collect()
}

/// The files of a projection: the key then the chain at
/// `credentialBundlePath`, the key at `keyPath`, the chain at
/// `certificateChainPath`, all with `mode`.
pub fn payload(src: &PodCertificateProjection, issued: &Issued, mode: i32) -> Payload {
    let file = |data: String| FileProjection {
        data: data.into_bytes(),
        mode,
    };
    let mut out = Payload::new();
    let key = &issued.key.0;
    if let Some(p) = src
        .credential_bundle_path
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        out.insert(p.to_owned(), file(format!("{key}{}", issued.chain)));
    }
    if let Some(p) = src.key_path.as_deref().filter(|p| !p.is_empty()) {
        out.insert(p.to_owned(), file(key.clone()));
    }
    if let Some(p) = src
        .certificate_chain_path
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        out.insert(p.to_owned(), file(issued.chain.clone()));
    }
    out
}

/// Who a request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester<'a> {
    pub namespace: &'a str,
    pub pod_name: &'a str,
    pub pod_uid: &'a str,
    pub service_account: &'a str,
    pub service_account_uid: &'a str,
    pub node_name: &'a str,
    pub node_uid: &'a str,
}

/// The PodCertificateRequest of a projection (upstream's
/// createPodCertificateRequest): `req-` names, owned by the pod, the
/// projection's signer, lifetime and annotations, the stub request.
pub fn request_object(
    who: &Requester<'_>,
    src: &PodCertificateProjection,
    stub_pkcs10: Vec<u8>,
) -> PodCertificateRequest {
    PodCertificateRequest {
        metadata: ObjectMeta {
            namespace: Some(who.namespace.to_owned()),
            generate_name: Some("req-".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: who.pod_name.to_owned(),
                uid: who.pod_uid.to_owned(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: PodCertificateRequestSpec {
            signer_name: src.signer_name.clone(),
            pod_name: who.pod_name.to_owned(),
            pod_uid: who.pod_uid.to_owned(),
            service_account_name: who.service_account.to_owned(),
            service_account_uid: who.service_account_uid.to_owned(),
            node_name: who.node_name.to_owned(),
            node_uid: who.node_uid.to_owned(),
            max_expiration_seconds: src.max_expiration_seconds,
            stub_pkc_s10_request: ByteString(stub_pkcs10),
            unverified_user_annotations: src.user_annotations.clone().filter(|a| !a.is_empty()),
        },
        status: None,
    }
}

/// The states of every projection, counted by signer (the
/// `kubelet_podcertificate_states` gauge).
pub fn count_states<'a>(
    states: impl IntoIterator<Item = (&'a str, &'a State)>,
    now: i64,
) -> BTreeMap<(String, &'static str), u64> {
    let mut out = BTreeMap::new();
    for (signer, s) in states {
        *out.entry((signer.to_owned(), s.metrics_state(now)))
            .or_default() += 1;
    }
    out
}

#[cfg(test)]
#[path = "podcert_tests.rs"]
mod tests;
