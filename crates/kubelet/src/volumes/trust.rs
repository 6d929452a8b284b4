//! ClusterTrustBundles for projected volumes (upstream's lazy informer
//! manager, pkg/kubelet/clustertrustbundle): every bundle is watched from
//! the first pod that projects one on, and a projection reads them by name
//! or by signer and label selector, deduplicated and re-encoded. A pod
//! whose projection found no bundle is woken when the bundles change, as
//! upstream's reconciler retries its mount within seconds.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::ClusterTrustBundle;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kubelet_api::ApiClient;
use kubelet_api::objects::{Latest, watch_all};
use kubelet_core::admission::label_selector_matches;
use kubelet_core::failure::Cause;
use kubelet_core::types::PodUid;
use kubelet_core::volume::{PayloadError, normalize_trust_anchors};
use tokio::sync::{mpsc, watch};

use kubelet_tasks::Tasks;

/// How long a read waits for the first list.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

type Bundles = Latest<Vec<ClusterTrustBundle>>;

#[derive(Clone)]
pub struct TrustBundles {
    api: ApiClient,
    tasks: Tasks,
    /// The watch, once started.
    latest: Arc<Mutex<Option<watch::Receiver<Bundles>>>>,
    /// The order of the anchors, fixed for this kubelet's life.
    order: Arc<RandomState>,
    /// Pods whose projection found no bundle, woken by the next change.
    waiting: Arc<Mutex<HashSet<PodUid>>>,
    resync: mpsc::UnboundedSender<PodUid>,
}

impl TrustBundles {
    pub fn new(api: ApiClient, tasks: Tasks, resync: mpsc::UnboundedSender<PodUid>) -> Self {
        TrustBundles {
            api,
            tasks,
            latest: Arc::default(),
            order: Arc::new(RandomState::new()),
            waiting: Arc::default(),
            resync,
        }
    }

    async fn all(&self) -> Result<Arc<Vec<ClusterTrustBundle>>, TrustError> {
        let mut rx = {
            let mut latest = self.latest.lock();
            latest
                .get_or_insert_with(|| {
                    let (tx, rx) = watch::channel(Latest::Pending);
                    let api = self.api.clone();
                    let (mut changes, waiting, resync) =
                        (rx.clone(), self.waiting.clone(), self.resync.clone());
                    self.tasks.spawn(
                        tracing::info_span!("trust_bundle_watch"),
                        move |token| async move {
                            let wake = async move {
                                while changes.changed().await.is_ok() {
                                    let pods = std::mem::take(&mut *waiting.lock());
                                    for uid in pods {
                                        let _ = resync.send(uid);
                                    }
                                }
                            };
                            tokio::select! {
                                _ = watch_all::<ClusterTrustBundle>(
                                    &api, "ClusterTrustBundles", None, tx, token,
                                ) => {}
                                _ = wake => {}
                            }
                        },
                    );
                    rx
                })
                .clone()
        };
        let synced =
            tokio::time::timeout(SYNC_TIMEOUT, rx.wait_for(|l| !matches!(l, Latest::Pending)))
                .await;
        match synced {
            Ok(Ok(l)) => match &*l {
                Latest::Present(all) => Ok(all.clone()),
                _ => Ok(Arc::default()),
            },
            _ => Err(TrustError::NotSynced),
        }
    }

    fn normalize(&self, bundles: &[&ClusterTrustBundle]) -> Result<Vec<u8>, TrustError> {
        let pems: Vec<&str> = bundles
            .iter()
            .map(|b| b.spec.trust_bundle.as_str())
            .collect();
        normalize_trust_anchors(&pems, &*self.order).map_err(TrustError::Normalize)
    }

    /// The anchors of the bundles a projection of pod `uid` names
    /// (upstream's GetTrustAnchorsByName and GetTrustAnchorsBySigner).
    pub async fn anchors(
        &self,
        uid: &PodUid,
        by: By<'_>,
        allow_missing: bool,
    ) -> Result<Vec<u8>, TrustError> {
        let all = self.all().await?;
        let picked = pick(&all, by, allow_missing).inspect_err(|_| {
            self.waiting.lock().insert(uid.clone());
        })?;
        if picked.is_empty() {
            return Ok(Vec::new());
        }
        self.normalize(&picked)
    }
}

/// Which bundles a clusterTrustBundle projection reads.
#[derive(Debug, Clone, Copy)]
pub enum By<'a> {
    Name(&'a str),
    /// A signer's bundles whose labels match (no selector matches none).
    Signer(&'a str, Option<&'a LabelSelector>),
}

/// The bundles `by` names; none (allowed missing) or an error in
/// upstream's words when there are none.
fn pick<'a>(
    all: &'a [ClusterTrustBundle],
    by: By<'_>,
    allow_missing: bool,
) -> Result<Vec<&'a ClusterTrustBundle>, TrustError> {
    let no_labels = Default::default();
    let picked: Vec<&ClusterTrustBundle> = all
        .iter()
        .filter(|b| match by {
            By::Name(name) => b.metadata.name.as_deref() == Some(name),
            By::Signer(signer, selector) => {
                b.spec.signer_name.as_deref() == Some(signer)
                    && label_selector_matches(
                        selector,
                        b.metadata.labels.as_ref().unwrap_or(&no_labels),
                    )
            }
        })
        .collect();
    if !picked.is_empty() || allow_missing {
        return Ok(picked);
    }
    Err(match by {
        By::Name(name) => TrustError::NotFound(name.to_owned()),
        By::Signer(..) => TrustError::NoneMatched,
    })
}

/// Why a clusterTrustBundle projection could not be filled, in upstream's
/// words.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("ClusterTrustBundle informer has not yet synced")]
    NotSynced,
    #[error(
        "while getting ClusterTrustBundle: clustertrustbundles.certificates.k8s.io {0:?} not found"
    )]
    NotFound(String),
    #[error("combination of signerName and labelSelector matched zero ClusterTrustBundles")]
    NoneMatched,
    #[error(transparent)]
    Normalize(PayloadError),
}

impl TrustError {
    /// What would clear it: the informer's sync, or the bundle's watch.
    pub fn cause(&self) -> Cause {
        match self {
            TrustError::NotSynced => Cause::Transient,
            TrustError::NotFound(_) | TrustError::NoneMatched => Cause::MissingObject,
            TrustError::Normalize(e) => e.cause(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::ClusterTrustBundleSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn bundle(name: &str, signer: Option<&str>, team: &str) -> ClusterTrustBundle {
        ClusterTrustBundle {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("team".to_owned(), team.to_owned())])),
                ..Default::default()
            },
            spec: ClusterTrustBundleSpec {
                signer_name: signer.map(Into::into),
                trust_bundle: String::new(),
            },
        }
    }

    #[test]
    fn projections_pick_bundles_as_upstream_does() {
        let all = [
            bundle("plain", None, "a"),
            bundle("ex:a", Some("example.com/ex"), "a"),
            bundle("ex:b", Some("example.com/ex"), "b"),
        ];
        let team_a = LabelSelector {
            match_labels: Some(BTreeMap::from([("team".to_owned(), "a".to_owned())])),
            ..Default::default()
        };
        let everything = LabelSelector::default();
        let names = |r: Result<Vec<&ClusterTrustBundle>, TrustError>| {
            r.map(|v| {
                v.iter()
                    .map(|b| b.metadata.name.clone().unwrap())
                    .collect::<Vec<_>>()
            })
        };
        type Want = Result<Vec<&'static str>, &'static str>;
        let cases: [(By, bool, Want); 6] = [
            (By::Name("plain"), false, Ok(vec!["plain"])),
            (By::Name("nope"), true, Ok(vec![])),
            (By::Name("nope"), false, Err("\"nope\" not found")),
            (
                By::Signer("example.com/ex", Some(&team_a)),
                false,
                Ok(vec!["ex:a"]),
            ),
            (
                By::Signer("example.com/ex", Some(&everything)),
                false,
                Ok(vec!["ex:a", "ex:b"]),
            ),
            (
                By::Signer("example.com/ex", None),
                false,
                Err("matched zero"),
            ),
        ];
        for (i, (by, missing_ok, want)) in cases.into_iter().enumerate() {
            match (names(pick(&all, by, missing_ok)), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, w, "case {i}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "case {i}: {e}"),
                (got, want) => panic!("case {i}: {got:?}, want {want:?}"),
            }
        }
    }
}
