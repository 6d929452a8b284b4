//! What a container's environment is made from, read at each start
//! (upstream's makeEnvironmentVariables): the ConfigMaps and Secrets its
//! env names (the volume manager's stores, where SyncPod's volume step
//! registered the pod's references), the Services (one watch of them all,
//! as upstream's informer), the node's allocatable and IPs. The
//! composition itself is `kubelet_core::env`'s. The image step reads the
//! pod's imagePullSecrets from the same Secret store.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use kubelet_api::objects::{Latest, Watched};
use kubelet_core::env::{self, EnvError, EnvFileValue, EnvSources, Fetched, FileKey};
use tokio::sync::watch;

use crate::nodestatus::NodeAllocatable;
use crate::volumes::objects::{GetError, ObjectStore};
use crate::volumes::{PodVolumes, subpath};
use kubelet_core::failure::Cause;
use kubelet_core::types::is_static_pod;

/// The Services, from their watch (cluster mode).
pub type Services = watch::Receiver<Latest<Vec<Service>>>;

#[derive(Clone)]
pub struct PodEnv {
    /// The ConfigMap and Secret stores (cluster mode).
    objects: Option<(ObjectStore<ConfigMap>, ObjectStore<Secret>)>,
    services: Option<Services>,
    allocatable: NodeAllocatable,
    /// The node's IPs (status.hostIP(s), and a hostNetwork pod's IPs).
    host_ips: Vec<String>,
}

async fn fetch<K: Watched>(
    store: Option<&ObjectStore<K>>,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Fetched<K> {
    let Some(store) = store else {
        return Fetched::NotFound(format!(
            "couldn't get {kind} {namespace}/{name}, no kubeClient defined"
        ));
    };
    match store.get(namespace, name).await {
        Ok(o) => Fetched::Found(o),
        Err(e @ GetError::NotFound { .. }) => Fetched::NotFound(e.to_string()),
        Err(e) => Fetched::Failed(e.to_string()),
    }
}

impl PodEnv {
    pub fn new(
        objects: Option<(ObjectStore<ConfigMap>, ObjectStore<Secret>)>,
        services: Option<Services>,
        allocatable: NodeAllocatable,
        host_ips: Vec<String>,
    ) -> Self {
        PodEnv {
            objects,
            services,
            allocatable,
            host_ips,
        }
    }

    /// The node's IPs.
    pub fn host_ips(&self) -> &[String] {
        &self.host_ips
    }

    /// The service variables the pod sees. A pod from the API waits for
    /// the first list of Services (upstream's serviceHasSynced), so that
    /// KUBERNETES_SERVICE_HOST is never missed after a restart.
    fn service_env(&self, pod: &Pod) -> Result<BTreeMap<String, String>, EnvError> {
        let Some(services) = &self.services else {
            return Ok(BTreeMap::new());
        };
        let all = match &*services.borrow() {
            Latest::Present(all) => all.clone(),
            _ if !is_static_pod(pod) => {
                return Err(EnvError {
                    message:
                        "services have not yet been read at least once, cannot construct envvars"
                            .into(),
                    cause: Cause::Transient,
                });
            }
            _ => Arc::default(),
        };
        let links = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        Ok(env::service_env(all.iter(), ns, links))
    }

    /// The pod's imagePullSecrets that can be read, and the names of those
    /// that cannot (upstream's getPullSecretsForPod; empty names skipped).
    pub async fn pull_secrets(&self, pod: &Pod) -> (Vec<Arc<Secret>>, Vec<String>) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let names = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_deref())
            .unwrap_or(&[])
            .iter()
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty());
        let store = self.objects.as_ref().map(|(_, s)| s);
        let (mut found, mut missing) = (Vec::new(), Vec::new());
        for name in names {
            match fetch(store, "secret", ns, name).await {
                Fetched::Found(s) => found.push(s),
                Fetched::NotFound(why) | Fetched::Failed(why) => {
                    tracing::info!(secret = %name, %why, "unable to retrieve pull secret, the image pull may not succeed");
                    missing.push(name.to_owned());
                }
            }
        }
        (found, missing)
    }

    /// Container `c`'s environment, `pod_ips` being the pod's, its
    /// fileKeyRefs read from the pod's `volumes`.
    pub async fn container_env(
        &self,
        pod: &Pod,
        c: &Container,
        pod_ips: &[String],
        volumes: &PodVolumes,
    ) -> Result<Vec<(String, String)>, EnvError> {
        let services = self.service_env(pod)?;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let (cm_names, secret_names) = env::references(c);
        let (cm_store, secret_store) = match &self.objects {
            Some((c, s)) => (Some(c), Some(s)),
            None => (None, None),
        };
        let mut config_maps = HashMap::new();
        for name in cm_names {
            let got = fetch(cm_store, "configMap", ns, &name).await;
            config_maps.insert(name, got);
        }
        let mut secrets = HashMap::new();
        for name in secret_names {
            let got = fetch(secret_store, "secret", ns, &name).await;
            secrets.insert(name, got);
        }
        let mut env_files = HashMap::new();
        for key in env::file_key_refs(c) {
            let read = read_env_file(pod, &key, volumes).await;
            env_files.insert(key, read);
        }
        env::container_env(
            pod,
            c,
            &EnvSources {
                pod_ips,
                host_ips: &self.host_ips,
                services: &services,
                allocatable: self.allocatable.get(),
                config_maps: &config_maps,
                secrets: &secrets,
                env_files: &env_files,
            },
        )
    }
}

/// One fileKeyRef, as upstream reads it: the volume must be one of the
/// pod's, the file is opened inside it (never outside, whatever its path
/// or symlinks say) and parsed strictly (`kubelet_core::envfile`); why a
/// file could not be read or parsed is logged, the container is told
/// "couldn't parse env file".
async fn read_env_file(pod: &Pod, key: &FileKey, volumes: &PodVolumes) -> EnvFileValue {
    let Some(volume) = volumes.get(&key.volume) else {
        return Err(EnvError {
            message: format!(
                "cannot find the volume {:?} referenced by FileKeyRef",
                key.volume
            ),
            cause: Cause::Unsupported,
        });
    };
    let (root, rel, name) = (volume.host_path.clone(), key.path.clone(), key.key.clone());
    let shown = root.join(&key.path).display().to_string();
    let read = kubelet_tasks::blocking(move || {
        let file = subpath::open_in_volume(&root, &rel).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "failed to open environment variable file {:?}: {e}",
                    root.join(&rel)
                ),
            )
        })?;
        kubelet_core::envfile::parse_env(std::io::BufReader::new(file), &name)
            .map_err(std::io::Error::other)
    })
    .await;
    match read {
        Ok(value) => Ok((value, shown)),
        Err(e) => {
            tracing::error!(pod = %kubelet_core::types::pod_full_name(pod), error = %e, "Failed to parse env file");
            Err(EnvError {
                message: "couldn't parse env file".into(),
                cause: Cause::Transient,
            })
        }
    }
}
