//! The node's client certificate from first boot on, as upstream's
//! `buildKubeletClientConfig` and `pkg/kubelet/certificate/bootstrap`:
//!
//! - `rotateCertificates`: the certificate manager runs beside the kubelet.
//!   With `--bootstrap-kubeconfig` and no valid `--kubeconfig`, the
//!   kubeconfig is written at once to point at
//!   `<cert-dir>/kubelet-client-current.pem`, the kubelet starts
//!   unauthenticated, and the manager asks for a certificate with the
//!   bootstrap token (a `csr-` request the controller manager approves and
//!   signs), then rotates it with the node's own.
//! - Without rotation, `--bootstrap-kubeconfig` blocks start-up on one
//!   request under the stable name `node-csr-<digest>`, its key kept in
//!   `kubelet-client.key.tmp` until it is issued, then writes the
//!   kubeconfig.

pub mod manager;
pub mod serving;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubelet_api::client::load_kubeconfig;
use kubelet_api::{ApiClient, ApiError};
use kubelet_core::certificate::{
    Kind, ServerTrust, client_template, digested_csr_name, kubeconfig_yaml,
};
use kubelet_core::metrics::KubeletMetrics;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, Jitter};
use manager::{CertificateManager, Clients, RotateError, Target, make_request};
use store::{FileStore, StoreError};

/// How long the blocking bootstrap waits for its request (upstream: 3600 s).
pub const BOOTSTRAP_WAIT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The key of the blocking bootstrap's request until it is issued.
pub const TMP_PRIVATE_KEY_FILE: &str = "kubelet-client.key.tmp";

/// How the kubelet authenticates to the API server.
#[derive(Clone, Debug)]
pub struct ClientCertificates {
    /// `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// `--bootstrap-kubeconfig`.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
    /// `rotateCertificates`.
    pub rotate: bool,
    pub node_name: String,
    pub qps: u32,
    pub burst: u32,
}

/// Why the kubelet could not get a client to the API server.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("unable to load bootstrap kubeconfig: {0}")]
    BootstrapKubeconfig(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("writing {path:?}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Rotate(#[from] RotateError),
}

/// The kubelet's API client, and the manager that keeps its certificate
/// current when it rotates.
pub struct ClientSetup {
    pub api: ApiClient,
    pub manager: Option<CertificateManager>,
}

impl ClientCertificates {
    /// The client the kubelet runs with, as upstream decides it (see the
    /// module's doc); blocks on the bootstrap without rotation.
    pub async fn setup(
        &self,
        clock: Clock,
        metrics: KubeletMetrics,
        cancel: &CancellationToken,
    ) -> Result<ClientSetup, BootstrapError> {
        let bootstrap = match &self.bootstrap_kubeconfig {
            Some(path) if !client_config_still_valid(&self.kubeconfig, clock) => Some(path),
            Some(_) => {
                tracing::info!(kubeconfig = %self.kubeconfig.display(), "kubeconfig exists and is valid, skipping bootstrap");
                None
            }
            None => None,
        };
        if !self.rotate {
            if let Some(bootstrap) = bootstrap {
                self.bootstrap_once(bootstrap, clock, &metrics, cancel)
                    .await?;
            }
            let api = self.client(&self.kubeconfig, &metrics).await?;
            return Ok(ClientSetup { api, manager: None });
        }
        let (api, bootstrap_api, fallback) = match bootstrap {
            Some(path) => {
                // Start unauthenticated, with the bootstrap's server and
                // trust, and the kubeconfig pointing at the pair to come.
                let store_current = self.cert_dir.join("kubelet-client-current.pem");
                write_kubeconfig_from(path, &self.kubeconfig, &store_current).await?;
                let mut config = load_kubeconfig(path)
                    .await
                    .map_err(|e| BootstrapError::BootstrapKubeconfig(e.to_string()))?;
                config.auth_info = kube::config::AuthInfo::default();
                let api = ApiClient::from_config(config, self.qps, self.burst, metrics.clone())
                    .map_err(BootstrapError::BootstrapKubeconfig)?;
                let bootstrap_api = self.client(path, &metrics).await?;
                (api, Some(bootstrap_api), None)
            }
            None => {
                let api = self.client(&self.kubeconfig, &metrics).await?;
                (api, None, kubeconfig_client_files(&self.kubeconfig))
            }
        };
        let store = FileStore::open(Kind::Client.prefix(), &self.cert_dir, fallback)?;
        let (_, template) = watch::channel(Some(client_template(&self.node_name)));
        let (current, _) = watch::channel(None);
        let manager = CertificateManager {
            kind: Kind::Client,
            store,
            template,
            clients: Clients {
                main: api.clone(),
                bootstrap: bootstrap_api,
            },
            target: Target::ApiClient(api.clone()),
            current,
            clock,
            metrics,
            jitter: Jitter::default(),
        };
        manager.load();
        Ok(ClientSetup {
            api,
            manager: Some(manager),
        })
    }

    async fn client(&self, path: &Path, metrics: &KubeletMetrics) -> Result<ApiClient, ApiError> {
        ApiClient::from_kubeconfig(path, self.qps, self.burst, metrics.clone()).await
    }

    /// Upstream's LoadClientCert: one request under the digested name,
    /// with the store's current key or the one kept in the tmp file, waited
    /// on up to an hour; then the pair stored and the kubeconfig written.
    async fn bootstrap_once(
        &self,
        bootstrap: &Path,
        clock: Clock,
        metrics: &KubeletMetrics,
        cancel: &CancellationToken,
    ) -> Result<(), BootstrapError> {
        tracing::info!(bootstrap = %bootstrap.display(), "using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file");
        let store = FileStore::open(Kind::Client.prefix(), &self.cert_dir, None)?;
        let tmp_key = self.cert_dir.join(TMP_PRIVATE_KEY_FILE);
        let template = client_template(&self.node_name);
        let existing = store.current().ok().flatten().map(|p| p.key_pem);
        let kept = std::fs::read_to_string(&tmp_key).ok();
        let request = match existing
            .or(kept)
            .and_then(|k| make_request(&template, Some(&k)).ok())
        {
            Some(request) => request,
            None => {
                let request = make_request(&template, None)?;
                kubelet_server::tls::write_file(&tmp_key, request.key_pem.as_bytes(), 0o600)
                    .map_err(StoreError::from)?;
                request
            }
        };
        let bootstrap_api = self.client(bootstrap, metrics).await?;
        let name = digested_csr_name(&request.spki_der, &template, &Kind::Client.usages());
        let (_, template_rx) = watch::channel(Some(template.clone()));
        let (current, _) = watch::channel(None);
        let manager = CertificateManager {
            kind: Kind::Client,
            store,
            template: template_rx,
            clients: Clients {
                main: bootstrap_api,
                bootstrap: None,
            },
            target: Target::Nothing,
            current,
            clock,
            metrics: metrics.clone(),
            jitter: Jitter::default(),
        };
        let pair: Arc<_> = manager
            .request(
                &template,
                &request,
                Some(&name),
                BOOTSTRAP_WAIT_TIMEOUT,
                cancel,
            )
            .await?;
        tracing::info!(
            not_after = pair.leaf.not_after,
            "bootstrap client certificate issued"
        );
        if let Err(e) = std::fs::remove_file(&tmp_key)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::info!(path = %tmp_key.display(), error = %e, "failed cleaning up private key file");
        }
        write_kubeconfig_from(bootstrap, &self.kubeconfig, &manager.store.current_path()).await
    }
}

/// The current context's user of a kubeconfig, with its file paths made
/// absolute.
fn kubeconfig_user(kubeconfig: &Path) -> Option<kube::config::AuthInfo> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).ok()?;
    let context = kc.current_context.as_deref()?;
    let user = kc
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .user
        .clone()?;
    kc.auth_infos
        .into_iter()
        .find(|a| a.name == user)?
        .auth_info
}

/// The kubeconfig's client certificate and key files, the store's
/// fallback when it rotates without bootstrap.
fn kubeconfig_client_files(kubeconfig: &Path) -> Option<(PathBuf, PathBuf)> {
    let user = kubeconfig_user(kubeconfig)?;
    Some((user.client_certificate?.into(), user.client_key?.into()))
}

/// Upstream's isClientConfigStillValid: the kubeconfig exists and every
/// certificate of its client certificate is unexpired.
fn client_config_still_valid(kubeconfig: &Path, clock: Clock) -> bool {
    if !kubeconfig.exists() {
        return false;
    }
    let Some(user) = kubeconfig_user(kubeconfig) else {
        tracing::warn!(kubeconfig = %kubeconfig.display(), "unable to read existing bootstrap client config");
        return false;
    };
    use base64::Engine as _;
    let pem = match (&user.client_certificate_data, &user.client_certificate) {
        (Some(data), _) => base64::engine::general_purpose::STANDARD.decode(data).ok(),
        (None, Some(file)) => std::fs::read(file).ok(),
        (None, None) => None,
    };
    let now = clock.now_nanos() / 1_000_000_000;
    match pem.as_deref().map(kubelet_server::tls::chain_not_after) {
        Some(Some(not_after)) if now <= not_after => true,
        Some(Some(not_after)) => {
            tracing::warn!(kubeconfig = %kubeconfig.display(), not_after, "part of the existing bootstrap client certificate is expired");
            false
        }
        _ => {
            tracing::warn!(kubeconfig = %kubeconfig.display(), "unable to load TLS certificates from existing bootstrap client config");
            false
        }
    }
}

/// Write `kubeconfig` (0600, its directory 0755) from the bootstrap
/// kubeconfig's server and trust, its user the pair at `pem_path`.
async fn write_kubeconfig_from(
    bootstrap: &Path,
    kubeconfig: &Path,
    pem_path: &Path,
) -> Result<(), BootstrapError> {
    let bad =
        |e: String| BootstrapError::BootstrapKubeconfig(format!("{}: {e}", bootstrap.display()));
    let kc = kube::config::Kubeconfig::read_from(bootstrap).map_err(|e| bad(e.to_string()))?;
    let context = kc
        .current_context
        .as_deref()
        .and_then(|name| kc.contexts.iter().find(|c| c.name == name))
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| bad("no current context".into()))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| bad(format!("no cluster {:?}", context.cluster)))?;
    let server = cluster
        .server
        .as_deref()
        .ok_or_else(|| bad("the cluster has no server".into()))?;
    let trust = match (
        &cluster.certificate_authority,
        &cluster.certificate_authority_data,
    ) {
        (Some(file), _) => ServerTrust::CaFile(file.clone()),
        (None, Some(data)) => ServerTrust::CaData(data.clone()),
        (None, None) if cluster.insecure_skip_tls_verify == Some(true) => ServerTrust::Insecure,
        (None, None) => return Err(bad("the cluster has no certificate authority".into())),
    };
    let yaml = kubeconfig_yaml(server, &trust, &pem_path.display().to_string());
    let write_err = |source| BootstrapError::Write {
        path: kubeconfig.to_owned(),
        source,
    };
    if let Some(dir) = kubeconfig.parent() {
        std::fs::create_dir_all(dir).map_err(write_err)?;
    }
    kubelet_server::tls::write_file(kubeconfig, yaml.as_bytes(), 0o600)
        .map_err(StoreError::from)?;
    Ok(())
}
