//! The ConfigMaps and Secrets the pods' volumes project
//! (configMapAndSecretChangeDetectionStrategy `Watch`, upstream's default):
//! each pod registers the objects it references; an object is watched by
//! name while some pod references it and forgotten when none does; an
//! immutable one is watched no more once seen. A change wakes the pods that
//! reference it, so their volumes follow within a sync.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kubelet_api::ApiClient;
use kubelet_api::objects::{Latest, Watched, watch_object};
use kubelet_core::failure::Cause;
use kubelet_core::types::PodUid;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use kubelet_tasks::Tasks;

/// How long a read waits for an object's first list.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// namespace, name.
type Key = (String, String);

struct Entry<K> {
    pods: HashSet<PodUid>,
    latest: watch::Receiver<Latest<K>>,
    stop: CancellationToken,
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
}

impl<K> Clone for ObjectStore<K> {
    fn clone(&self) -> Self {
        ObjectStore {
            api: self.api.clone(),
            tasks: self.tasks.clone(),
            kind: self.kind,
            resync: self.resync.clone(),
            entries: self.entries.clone(),
        }
    }
}

impl<K: Watched> ObjectStore<K> {
    pub fn new(
        api: ApiClient,
        tasks: Tasks,
        kind: &'static str,
        resync: mpsc::UnboundedSender<PodUid>,
    ) -> Self {
        ObjectStore {
            api,
            tasks,
            kind,
            resync,
            entries: Arc::default(),
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
                e.stop.cancel();
            }
            keep
        });
        for name in wanted {
            let key = (namespace.to_owned(), name.clone());
            if let Some(e) = entries.get_mut(&key) {
                e.pods.insert(uid.clone());
                continue;
            }
            let entry = self.start(&key, uid);
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
            latest: rx,
            stop,
        }
    }

    /// The object `namespace/name` (registered before), once listed: an
    /// error naming it when there is none, as upstream words it.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Arc<K>, GetError> {
        let rx = self
            .entries
            .lock()
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|e| e.latest.clone());
        let Some(mut rx) = rx else {
            return Err(GetError::NotRegistered {
                kind: self.kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
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
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
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
}

impl GetError {
    /// What would clear it.
    pub fn cause(&self) -> Cause {
        match self {
            GetError::NotFound { .. } => Cause::MissingObject,
            GetError::NotSynced { .. } | GetError::NotRegistered { .. } => Cause::Transient,
        }
    }
}
