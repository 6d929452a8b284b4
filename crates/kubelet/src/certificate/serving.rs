//! The kubelet API's certificate kept current, as upstream's kubelet
//! chooses (pkg/kubelet/kubelet.go): with serverTLSBootstrap, a
//! `kubernetes.io/kubelet-serving` CSR for the node's addresses, rotated as
//! the client certificate (`<cert-dir>/kubelet-server-current.pem`); with
//! tlsCertFile/tlsPrivateKeyFile, those files read again when they change
//! (ReloadKubeletServerCertificateFile, on by default), a pair whose key
//! does not match kept out; else the self-signed pair, as it is. The client
//! CA file is read again the same way (ReloadKubeletClientCAFile).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubelet_api::ApiClient;
use kubelet_core::certificate::{Kind, serving_template};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::nodestatus::node_addresses;
use kubelet_server::tls::{ClientCa, ServingCertificate, load_cert_and_key};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::manager::{CertificateManager, Clients, Target};
use super::store::{FileStore, StoreError};
use crate::clock::{Clock, Jitter};
use crate::dirwatch::on_files_change;

/// How often the certificate files are read again without an inotify event
/// (upstream re-establishes its watch every minute).
pub const RELOAD_PERIOD: Duration = Duration::from_secs(60);

/// The serving certificate's manager: the node's addresses as the
/// template, the store in `cert_dir` (tlsCertFile/tlsPrivateKeyFile as its
/// fallback), each issued pair served at once. Its current pair, if any, is
/// served already when this returns.
#[allow(clippy::too_many_arguments, reason = "the manager's parts, named")]
pub fn serving_manager(
    api: ApiClient,
    node_name: &str,
    node_ips: &[String],
    cert_dir: &Path,
    files: Option<(PathBuf, PathBuf)>,
    serving: Arc<ServingCertificate>,
    clock: Clock,
    metrics: KubeletMetrics,
) -> Result<CertificateManager, StoreError> {
    let store = FileStore::open(Kind::Serving.prefix(), cert_dir, files)?;
    let addresses = node_addresses(node_ips, node_name);
    let (_, template) = watch::channel(serving_template(node_name, &addresses));
    if template.borrow().is_none() {
        tracing::warn!(
            node = node_name,
            "no serving certificate is requested while the node has no IP address"
        );
    }
    let (current, _) = watch::channel(None);
    let manager = CertificateManager {
        kind: Kind::Serving,
        store,
        template,
        clients: Clients {
            main: api,
            bootstrap: None,
        },
        target: Target::Server(serving),
        current,
        clock,
        metrics,
        jitter: Jitter::default(),
    };
    manager.load();
    Ok(manager)
}

/// Serve what `cert` and `key` hold whenever they change; a pair that
/// does not load, or whose key is not the certificate's, is logged and the
/// one served stays.
pub async fn reload_files(
    cert: PathBuf,
    key: PathBuf,
    serving: Arc<ServingCertificate>,
    cancel: CancellationToken,
) {
    let files = vec![cert.clone(), key.clone()];
    on_files_change(files, "serving certificate files", RELOAD_PERIOD, cancel, || {
        match load_cert_and_key(&cert, &key).and_then(|c| serving.set(c)) {
            Ok(()) => tracing::info!(cert = %cert.display(), "loaded a new serving certificate"),
            Err(e) => tracing::warn!(cert = %cert.display(), error = %e, "the new serving certificate files are not usable; serving the previous one"),
        }
    })
    .await;
}

/// Trust the client CA bundle in `path` whenever it changes; a bundle that
/// does not load is logged and the one trusted stays.
pub async fn reload_client_ca(path: PathBuf, ca: Arc<ClientCa>, cancel: CancellationToken) {
    on_files_change(vec![path.clone()], "client CA file", RELOAD_PERIOD, cancel, || {
        match ca.reload(&path) {
            Ok(()) => tracing::info!(file = %path.display(), "loaded a new client CA bundle"),
            Err(e) => tracing::warn!(file = %path.display(), error = %e, "the new client CA file is not usable; trusting the previous bundle"),
        }
    })
    .await;
}

#[cfg(test)]
mod tests {

    use kubelet_core::certificate::ec_private_key_pem;

    use super::*;
    use crate::testutil::until;

    /// A self-signed pair for `cn`: (chain PEM, key PEM, leaf DER).
    fn pair(cn: &str) -> (String, String, Vec<u8>) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec![cn.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = cert.der().to_vec();
        (
            cert.pem(),
            ec_private_key_pem(&key.serialize_der()).unwrap(),
            der,
        )
    }

    fn served(serving: &ServingCertificate) -> Vec<u8> {
        serving.current().unwrap().cert[0].to_vec()
    }

    #[tokio::test]
    async fn changed_files_are_served_at_once_and_a_mismatched_pair_is_kept_out() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let (a_chain, a_key, a_der) = pair("a");
        std::fs::write(&cert, &a_chain).unwrap();
        std::fs::write(&key, &a_key).unwrap();
        let serving = Arc::new(ServingCertificate::default());
        serving
            .set(load_cert_and_key(&cert, &key).unwrap())
            .unwrap();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(reload_files(
            cert.clone(),
            key.clone(),
            serving.clone(),
            cancel.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(served(&serving), a_der);

        // As cert-manager writes them: the key, then the certificate.
        let (b_chain, b_key, b_der) = pair("b");
        std::fs::write(&key, &b_key).unwrap();
        std::fs::write(&cert, &b_chain).unwrap();
        until("the new pair is served", || served(&serving) == b_der).await;

        // A key that is not the certificate's: the last good pair stays.
        let (_, c_key, _) = pair("c");
        std::fs::write(&key, &c_key).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(served(&serving), b_der);
        cancel.cancel();
        task.await.unwrap();
    }
}
