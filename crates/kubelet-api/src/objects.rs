//! Single objects the kubelet keeps current by a watch of their name (the
//! Node; each ConfigMap and Secret a pod's volumes project, as upstream's
//! watch-based manager does: a list and watch with the fieldSelector
//! `metadata.name`, which is all the Node authorizer lets a kubelet read),
//! the TokenRequest of a service account token bound to a pod, the
//! PodCertificateRequests of podCertificate projections, and the claims and
//! PersistentVolumes of persistentVolumeClaim volumes (read on each sync).

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::certificates::v1::PodCertificateRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::Resource;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::{ApiClient, ApiError};

/// What is known of a watched object.
#[derive(Debug)]
pub enum Latest<K> {
    /// Not listed yet.
    Pending,
    /// Listed, and there is none.
    Absent,
    Present(Arc<K>),
}

impl<K> Clone for Latest<K> {
    fn clone(&self) -> Self {
        match self {
            Latest::Pending => Latest::Pending,
            Latest::Absent => Latest::Absent,
            Latest::Present(k) => Latest::Present(k.clone()),
        }
    }
}

impl<K> From<Option<Arc<K>>> for Latest<K> {
    fn from(o: Option<Arc<K>>) -> Self {
        o.map_or(Latest::Absent, Latest::Present)
    }
}

/// Whether an object can no longer change (its watch may stop).
pub trait Immutable {
    fn immutable(&self) -> bool;
}

impl Immutable for ConfigMap {
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

impl Immutable for Secret {
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

/// Watch the object `name` of `api` (fieldSelector `metadata.name`) and
/// hand each state it reaches to `publish`: after every relist (None when
/// there is none), on every change and on deletion. Backs off as the pod
/// watch does; ends when `cancel` fires, or once `publish` returns false.
pub async fn watch_named<K>(
    api: Api<K>,
    name: &str,
    mut publish: impl FnMut(Option<Arc<K>>) -> bool,
    cancel: CancellationToken,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let key = |o: &K| o.meta().name.clone().unwrap_or_default();
    let one = |set: Vec<K>| std::future::ready(publish(set.into_iter().next().map(Arc::new)));
    crate::watch::watch_set(api, config, name, key, one, &cancel).await;
}

/// A namespaced kind whose single objects the kubelet watches (ConfigMap,
/// Secret).
pub trait Watched:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Immutable
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl Watched for ConfigMap {}
impl Watched for Secret {}

/// Keep `namespace/name` of a ConfigMap or Secret in `tx` until `cancel`
/// fires; an immutable object is watched no more once seen.
pub async fn watch_object<K: Watched>(
    api: &ApiClient,
    namespace: &str,
    name: &str,
    tx: tokio::sync::watch::Sender<Latest<K>>,
    cancel: CancellationToken,
) {
    let objects = Api::<K>::namespaced(api.client().clone(), namespace);
    let publish = |o: Option<Arc<K>>| {
        let done = o.as_ref().is_some_and(|o| o.immutable());
        tx.send_replace(o.into());
        !done
    };
    watch_named(objects, name, publish, cancel).await;
}

/// Keep every object of a kind in `tx` (all namespaces, as upstream's
/// informers list them: ClusterTrustBundles, Services; with `fields`, those
/// its field selector picks: the node's PodCertificateRequests) until
/// `cancel` fires; `what` names the kind in logs.
pub async fn watch_all<K>(
    api: &ApiClient,
    what: &'static str,
    fields: Option<&str>,
    tx: tokio::sync::watch::Sender<Latest<Vec<K>>>,
    cancel: CancellationToken,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let objects = Api::<K>::all(api.client().clone());
    let key = |o: &K| {
        let m = o.meta();
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or(""),
            m.name.as_deref().unwrap_or("")
        )
    };
    let publish = |all| {
        tx.send_replace(Latest::Present(Arc::new(all)));
        std::future::ready(true)
    };
    let mut config = watcher::Config::default();
    if let Some(fields) = fields {
        config = config.fields(fields);
    }
    crate::watch::watch_set(objects, config, what, key, publish, &cancel).await;
}

/// A token for service account `namespace/name` bound to the pod
/// `pod_name`/`pod_uid` (TokenRequest: POST
/// serviceaccounts/<name>/token). The token is in `status.token`; it is
/// never logged.
pub async fn request_token(
    api: &ApiClient,
    namespace: &str,
    name: &str,
    audiences: Vec<String>,
    expiration_seconds: i64,
    pod_name: &str,
    pod_uid: &str,
) -> Result<TokenRequest, ApiError> {
    let accounts = Api::<ServiceAccount>::namespaced(api.client().clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences),
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod_name.into()),
                uid: Some(pod_uid.into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(|e| {
            ApiError::from_kube(
                "create",
                format!("serviceaccounts/{name}/token in {namespace}"),
                e,
            )
        })
}

/// GET the namespaced object `namespace/name` (a ConfigMap, Secret or
/// PersistentVolumeClaim; `kind` names it in errors); None when there is
/// none.
pub async fn get_object<K>(
    api: &ApiClient,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<K>, ApiError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    Api::<K>::namespaced(api.client().clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| ApiError::from_kube("get", format!("{kind} {namespace}/{name}"), e))
}

/// GET the cluster-scoped object `name` (a PersistentVolume, CSIDriver,
/// VolumeAttachment or CSINode; `kind` names it in errors); None when there
/// is none.
pub async fn get_cluster_object<K>(
    api: &ApiClient,
    kind: &str,
    name: &str,
) -> Result<Option<K>, ApiError>
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    Api::<K>::all(api.client().clone())
        .get_opt(name)
        .await
        .map_err(|e| ApiError::from_kube("get", format!("{kind} {name}"), e))
}

/// The service account `namespace/name` (a podCertificate request names its
/// UID).
pub async fn get_service_account(
    api: &ApiClient,
    namespace: &str,
    name: &str,
) -> Result<ServiceAccount, ApiError> {
    Api::<ServiceAccount>::namespaced(api.client().clone(), namespace)
        .get(name)
        .await
        .map_err(|e| ApiError::from_kube("get", format!("serviceaccount {namespace}/{name}"), e))
}

/// Create a PodCertificateRequest (certificates.k8s.io/v1) in its namespace;
/// the API server's answer names it.
pub async fn create_pod_certificate_request(
    api: &ApiClient,
    request: &PodCertificateRequest,
) -> Result<PodCertificateRequest, ApiError> {
    let namespace = request.metadata.namespace.as_deref().unwrap_or("default");
    Api::<PodCertificateRequest>::namespaced(api.client().clone(), namespace)
        .create(&PostParams::default(), request)
        .await
        .map_err(|e| {
            ApiError::from_kube(
                "create",
                format!("podcertificaterequests in {namespace}"),
                e,
            )
        })
}
