//! The ConfigMaps and Secrets the pods' volumes and env reference, kept as
//! configMapAndSecretChangeDetectionStrategy says:
//!
//! - `Watch` (upstream's default): each pod registers the objects it
//!   references; an object is watched by name while some pod references it
//!   and forgotten when none does; an immutable one is watched no more once
//!   seen. A change wakes the pods that reference it, so their volumes
//!   follow within a sync.
//! - `Cache`: each read GETs the object once its last fetch is older than
//!   the TTL (the Node's `node.alpha.kubernetes.io/ttl` annotation, else
//!   1 minute), or when a pod newly references it; a pod sees changes at its
//!   next sync after that.
//! - `Get`: each read GETs the object.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kubelet_api::objects::{Latest, Watched, get_object, watch_object};
use kubelet_api::{ApiClient, ApiError};
use kubelet_core::failure::Cause;
use kubelet_core::types::PodUid;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use kubelet_tasks::Tasks;

/// How long a read waits for an object's first list.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// The Cache strategy's TTL without the Node's annotation (upstream's).
const DEFAULT_TTL: Duration = Duration::from_secs(60);
/// The Node annotation that sets the Cache strategy's TTL, in seconds.
pub const TTL_ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// namespace, name.
type Key = (String, String);

/// configMapAndSecretChangeDetectionStrategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Watch,
    Cache,
    Get,
}

impl std::str::FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "Watch" => Ok(Strategy::Watch),
            "Cache" => Ok(Strategy::Cache),
            "Get" => Ok(Strategy::Get),
            other => Err(format!(
                "unknown configmap and secret manager mode: {other}"
            )),
        }
    }
}

struct Entry<K> {
    pods: HashSet<PodUid>,
    source: Source<K>,
}

enum Source<K> {
    /// The object's watch.
    Watch {
        latest: watch::Receiver<Latest<K>>,
        stop: CancellationToken,
    },
    /// The last fetch (Cache): when, and the object (None: not found).
    Fetched(Option<(tokio::time::Instant, Option<Arc<K>>)>),
}

impl<K> Entry<K> {
    fn stop(&self) {
        if let Source::Watch { stop, .. } = &self.source {
            stop.cancel();
        }
    }
}

/// One kind's objects (ConfigMap or Secret).
pub struct ObjectStore<K> {
    api: ApiClient,
    tasks: Tasks,
    /// The API's lower-case singular, for messages ("configmap").
    kind: &'static str,
    /// Pods to sync again when an object they reference changes.
    resync: mpsc::UnboundedSender<PodUid>,
    entries: Arc<Mutex<HashMap<Key, Entry<K>>>>,
    strategy: Strategy,
    /// The Node, for the Cache strategy's TTL annotation.
    node: watch::Receiver<Option<Arc<Node>>>,
}

impl<K> Clone for ObjectStore<K> {
    fn clone(&self) -> Self {
        ObjectStore {
            api: self.api.clone(),
            tasks: self.tasks.clone(),
            kind: self.kind,
            resync: self.resync.clone(),
            entries: self.entries.clone(),
            strategy: self.strategy,
            node: self.node.clone(),
        }
    }
}

impl<K: Watched> ObjectStore<K> {
    pub fn new(
        api: ApiClient,
        tasks: Tasks,
        kind: &'static str,
        resync: mpsc::UnboundedSender<PodUid>,
        strategy: Strategy,
        node: watch::Receiver<Option<Arc<Node>>>,
    ) -> Self {
        ObjectStore {
            api,
            tasks,
            kind,
            resync,
            entries: Arc::default(),
            strategy,
            node,
        }
    }

    /// The objects `uid` references now are `wanted` (in its namespace):
    /// watches start for new ones, and stop for those no pod references.
    pub fn register(&self, uid: &PodUid, namespace: &str, wanted: &HashSet<String>) {
        let mut entries = self.entries.lock();
        entries.retain(|(ns, name), e| {
            if ns != namespace || !wanted.contains(name) {
                e.pods.remove(uid);
            }
            let keep = !e.pods.is_empty();
            if !keep {
                e.stop();
            }
            keep
        });
        for name in wanted {
            let key = (namespace.to_owned(), name.clone());
            if let Some(e) = entries.get_mut(&key) {
                // A pod newly referencing a cached object reads it afresh
                // (upstream's AddReference).
                if e.pods.insert(uid.clone()) && matches!(e.source, Source::Fetched(_)) {
                    e.source = Source::Fetched(None);
                }
                continue;
            }
            let entry = match self.strategy {
                Strategy::Watch => self.start(&key, uid),
                Strategy::Cache | Strategy::Get => Entry {
                    pods: HashSet::from([uid.clone()]),
                    source: Source::Fetched(None),
                },
            };
            entries.insert(key, entry);
        }
    }

    /// `uid` references nothing any more.
    pub fn unregister(&self, uid: &PodUid) {
        self.register(uid, "", &HashSet::new());
    }

    fn start(&self, key: &Key, uid: &PodUid) -> Entry<K> {
        let (tx, rx) = watch::channel(Latest::Pending);
        let (api, (ns, name)) = (self.api.clone(), key.clone());
        let span = tracing::info_span!("object_watch", kind = self.kind, namespace = %ns, %name);
        // Changes after the first list wake the pods that reference it.
        let mut changes = rx.clone();
        let (entries, resync, key2) = (self.entries.clone(), self.resync.clone(), key.clone());
        let stop = self.tasks.spawn(span, move |token| async move {
            let wake = async move {
                let mut first = true;
                while changes.changed().await.is_ok() {
                    if std::mem::take(&mut first) {
                        continue;
                    }
                    let pods: Vec<PodUid> = entries
                        .lock()
                        .get(&key2)
                        .map(|e| e.pods.iter().cloned().collect())
                        .unwrap_or_default();
                    for uid in pods {
                        let _ = resync.send(uid);
                    }
                }
            };
            tokio::select! {
                _ = watch_object(&api, &ns, &name, tx, token.clone()) => {}
                _ = wake => {}
            }
            // An immutable object stays as last seen until the entry goes.
            token.cancelled().await;
        });
        Entry {
            pods: HashSet::from([uid.clone()]),
            source: Source::Watch { latest: rx, stop },
        }
    }

    /// The Cache strategy's TTL: the Node's annotation, else a minute.
    fn ttl(&self) -> Duration {
        self.node
            .borrow()
            .as_ref()
            .and_then(|n| {
                n.metadata
                    .annotations
                    .as_ref()?
                    .get(TTL_ANNOTATION)?
                    .parse()
                    .ok()
            })
            .map_or(DEFAULT_TTL, Duration::from_secs)
    }

    /// GET `namespace/name` for the Cache and Get strategies; a fresh
    /// enough fetch is used again (Cache).
    async fn fetch(&self, namespace: &str, name: &str) -> Result<Arc<K>, GetError> {
        let key = (namespace.to_owned(), name.to_owned());
        let cached = match self.entries.lock().get(&key).map(|e| &e.source) {
            None => return Err(self.not_registered(namespace, name)),
            Some(Source::Fetched(Some((at, object)))) if self.strategy == Strategy::Cache => {
                (at.elapsed() < self.ttl()).then(|| object.clone())
            }
            Some(_) => None,
        };
        let object = match cached {
            Some(object) => object,
            None => {
                let object = get_object::<K>(&self.api, self.kind, namespace, name)
                    .await
                    .map_err(GetError::Fetch)?
                    .map(Arc::new);
                if let Some(e) = self.entries.lock().get_mut(&key) {
                    e.source = Source::Fetched(Some((tokio::time::Instant::now(), object.clone())));
                }
                object
            }
        };
        object.ok_or_else(|| GetError::NotFound {
            kind: self.kind,
            name: name.to_owned(),
        })
    }

    fn not_registered(&self, namespace: &str, name: &str) -> GetError {
        GetError::NotRegistered {
            kind: self.kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The object `namespace/name` (registered before), once listed: an
    /// error naming it when there is none, as upstream words it.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Arc<K>, GetError> {
        if self.strategy != Strategy::Watch {
            return self.fetch(namespace, name).await;
        }
        let rx = self
            .entries
            .lock()
            .get(&(namespace.to_owned(), name.to_owned()))
            .and_then(|e| match &e.source {
                Source::Watch { latest, .. } => Some(latest.clone()),
                Source::Fetched(_) => None,
            });
        let Some(mut rx) = rx else {
            return Err(self.not_registered(namespace, name));
        };
        let ready =
            tokio::time::timeout(SYNC_TIMEOUT, rx.wait_for(|l| !matches!(l, Latest::Pending)))
                .await;
        match ready {
            Err(_) | Ok(Err(_)) => Err(GetError::NotSynced { kind: self.kind }),
            Ok(Ok(l)) => match &*l {
                Latest::Present(o) => Ok(o.clone()),
                _ => Err(GetError::NotFound {
                    kind: self.kind,
                    name: name.to_owned(),
                }),
            },
        }
    }

    /// Objects watched now.
    pub fn watched(&self) -> usize {
        self.entries.lock().len()
    }
}

/// Why an object could not be read, in upstream's words.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GetError {
    /// It does not exist: its watch wakes the pods that name it.
    #[error("{kind}s {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    /// Its watch has not listed it yet.
    #[error("failed to sync {kind} cache: timed out waiting for the condition")]
    NotSynced { kind: &'static str },
    /// No pod registered it (a kubelet bug, or a pod gone meanwhile).
    #[error("{kind} {namespace}/{name} is not registered")]
    NotRegistered {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The Cache or Get strategy's GET failed.
    #[error(transparent)]
    Fetch(ApiError),
}

impl GetError {
    /// What would clear it.
    pub fn cause(&self) -> Cause {
        match self {
            GetError::NotFound { .. } => Cause::MissingObject,
            GetError::NotSynced { .. } | GetError::NotRegistered { .. } | GetError::Fetch(_) => {
                Cause::Transient
            }
        }
    }
}
