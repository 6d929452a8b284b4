//! Where the node's certificates live, in upstream's layout (client-go's
//! `util/certificate` fileStore), so that either kubelet reads what the
//! other wrote: each issued pair in `<dir>/<prefix>-<timestamp>.pem`
//! (certificates, then the key; 0600), and `<prefix>-current.pem`, an
//! absolute symlink to the pair in use, replaced through
//! `<prefix>-updated.pem` and a rename, so a crash at any point leaves a
//! usable current pair or one [`FileStore::open`] recovers.

use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;
use kubelet_core::certificate::{
    Leaf, current_file_name, pair_file_name, split_pair, updated_file_name,
};
use kubelet_server::tls::{self, ServingCert, TlsError};

/// A certificate and key in use: the PEM text given to TLS clients and
/// servers, and what the manager reads of the certificate.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The certificate chain, PEM.
    pub chain_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
    pub leaf: Leaf,
}

/// Why the store could not read or write a pair; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("could not create directory {0:?} to store certificates: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error("expected {0:?} to be a symlink but it is a file")]
    NotSymlink(PathBuf),
    #[error("unable to {what} {path:?}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not convert data from {0:?} into cert/key pair: {1}")]
    Pair(PathBuf, String),
    #[error("invalid certificate data: {0}")]
    Invalid(String),
    #[error(transparent)]
    Write(#[from] TlsError),
}

/// The files of one certificate (`kubelet-client` or `kubelet-server`).
#[derive(Clone, Debug)]
pub struct FileStore {
    dir: PathBuf,
    prefix: &'static str,
    /// Looked at when there is no current pair (the kubeconfig's client
    /// certificate and key, or tlsCertFile and tlsPrivateKeyFile).
    fallback: Option<(PathBuf, PathBuf)>,
}

impl FileStore {
    /// The store in `dir` (absolute; created 0755), after recovering a
    /// pair a crash left between the symlink and the rename.
    pub fn open(
        prefix: &'static str,
        dir: &Path,
        fallback: Option<(PathBuf, PathBuf)>,
    ) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Dir(dir.to_owned(), e))?;
        let store = FileStore {
            dir: dir.to_owned(),
            prefix,
            fallback,
        };
        store.recover()?;
        Ok(store)
    }

    /// `<dir>/<prefix>-current.pem`.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(current_file_name(self.prefix))
    }

    fn updated_path(&self) -> PathBuf {
        self.dir.join(updated_file_name(self.prefix))
    }

    fn recover(&self) -> Result<(), StoreError> {
        let (current, updated) = (self.current_path(), self.updated_path());
        if current.symlink_metadata().is_ok() {
            return Ok(());
        }
        match updated.symlink_metadata() {
            Ok(m) if m.file_type().is_symlink() => {
                std::fs::rename(&updated, &current).map_err(|source| StoreError::Io {
                    what: "rename",
                    path: updated,
                    source,
                })
            }
            Ok(_) => Err(StoreError::NotSymlink(updated)),
            Err(_) => Ok(()),
        }
    }

    /// The pair in use: the current symlink's, else the fallback files',
    /// else `<prefix>.crt` and `<prefix>.key`; None when there is none.
    pub fn current(&self) -> Result<Option<Pair>, StoreError> {
        let current = self.current_path();
        if current.exists() {
            return read_pair(&current, &current).map(Some);
        }
        let legacy = (
            self.dir.join(format!("{}.crt", self.prefix)),
            self.dir.join(format!("{}.key", self.prefix)),
        );
        for (cert, key) in self.fallback.iter().chain([&legacy]) {
            if cert.exists() && key.exists() {
                return read_pair(cert, key).map(Some);
            }
        }
        Ok(None)
    }

    /// Write a newly issued chain with its key as a new pair file named
    /// for `now` (unix seconds, in local time as upstream) and make it
    /// current.
    pub fn update(&self, chain_pem: &str, key_pem: &str, now: i64) -> Result<Pair, StoreError> {
        let pair = parse_pair(chain_pem, key_pem)?;
        let stamp = Timestamp::from_second(now)
            .unwrap_or(Timestamp::UNIX_EPOCH)
            .to_zoned(TimeZone::system())
            .strftime("%Y-%m-%d-%H-%M-%S")
            .to_string();
        let path = self.dir.join(pair_file_name(self.prefix, &stamp));
        let mut content = chain_pem.trim_end().to_owned();
        content.push('\n');
        content.push_str(key_pem);
        tls::write_file(&path, content.as_bytes(), 0o600)?;
        self.point_current_at(&path)?;
        Ok(pair)
    }

    /// `-updated.pem` → `path`, then renamed over `-current.pem`.
    fn point_current_at(&self, path: &Path) -> Result<(), StoreError> {
        let (current, updated) = (self.current_path(), self.updated_path());
        for link in [&current, &updated] {
            if let Ok(m) = link.symlink_metadata()
                && !m.file_type().is_symlink()
            {
                return Err(StoreError::NotSymlink(link.clone()));
            }
        }
        let io = |what, path: &Path| {
            let path = path.to_owned();
            move |source| StoreError::Io { what, path, source }
        };
        match std::fs::remove_file(&updated) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("remove", &updated)(e));
            }
            _ => {}
        }
        std::os::unix::fs::symlink(path, &updated).map_err(io("symlink", &updated))?;
        std::fs::rename(&updated, &current).map_err(io("rename", &updated))
    }
}

/// A chain and key as PEM text: both parse, the key is the chain's.
pub fn parse_pair(chain_pem: &str, key_pem: &str) -> Result<Pair, StoreError> {
    let cert = der_pair(chain_pem, key_pem)?;
    checked(cert, chain_pem, key_pem).map_err(StoreError::Invalid)
}

/// A pair as the TLS server takes it.
pub fn serving_cert(pair: &Pair) -> Result<ServingCert, StoreError> {
    der_pair(&pair.chain_pem, &pair.key_pem)
}

fn der_pair(chain_pem: &str, key_pem: &str) -> Result<ServingCert, StoreError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| StoreError::Invalid(format!("invalid key data: {e}")))?;
    Ok(ServingCert { chain, key })
}

/// The pair in `cert_path` and `key_path` (the same file for a pair
/// file), each read once.
fn read_pair(cert_path: &Path, key_path: &Path) -> Result<Pair, StoreError> {
    let bad = |e: String| StoreError::Pair(cert_path.to_owned(), e);
    let text = |p: &Path| std::fs::read_to_string(p).map_err(|e| bad(e.to_string()));
    let cert_text = text(cert_path)?;
    let (chain, key) = if cert_path == key_path {
        split_pair(&cert_text)
    } else {
        (split_pair(&cert_text).0, split_pair(&text(key_path)?).1)
    };
    if chain.is_empty() {
        return Err(bad("no CERTIFICATE block".into()));
    }
    parse_pair(&chain, &key).map_err(|e| bad(e.to_string()))
}

fn checked(cert: ServingCert, chain_pem: &str, key_pem: &str) -> Result<Pair, String> {
    if !tls::keys_match(&cert) {
        return Err("private key does not match public key".into());
    }
    let leaf = tls::leaf(&cert).ok_or("unable to parse certificate data")?;
    Ok(Pair {
        chain_pem: chain_pem.to_owned(),
        key_pem: key_pem.to_owned(),
        leaf,
    })
}

#[cfg(test)]
mod tests {
    use kubelet_core::certificate::ec_private_key_pem;

    use super::*;

    /// A self-signed pair for `cn`: (chain PEM, key PEM).
    fn pair(cn: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec![cn.to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.self_signed(&key).unwrap();
        (
            cert.pem(),
            ec_private_key_pem(&key.serialize_der()).unwrap(),
        )
    }

    #[test]
    fn an_update_becomes_current_and_survives_a_crash_before_the_rename() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open("kubelet-client", dir.path(), None).unwrap();
        assert!(store.current().unwrap().is_none());
        let (chain, key) = pair("system:node:a");
        let written = store.update(&chain, &key, 1_000_000).unwrap();
        assert_eq!(written.leaf.common_name, "system:node:a");
        let read = store.current().unwrap().unwrap();
        assert_eq!((read.chain_pem, read.key_pem), (chain, key));

        // A crash between the new symlink and the rename: -updated.pem is
        // there and -current.pem is not; opening the store recovers it.
        let current = store.current_path();
        std::fs::rename(&current, dir.path().join("kubelet-client-updated.pem")).unwrap();
        let store = FileStore::open("kubelet-client", dir.path(), None).unwrap();
        assert_eq!(
            store.current().unwrap().unwrap().leaf.common_name,
            "system:node:a"
        );
        assert!(
            std::fs::symlink_metadata(&current)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn a_current_file_that_is_not_a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open("kubelet-server", dir.path(), None).unwrap();
        let (chain, key) = pair("system:node:a");
        std::fs::write(store.current_path(), format!("{chain}{key}")).unwrap();
        let err = store.update(&chain, &key, 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "expected {:?} to be a symlink but it is a file",
                store.current_path()
            )
        );
    }

    #[test]
    fn without_a_current_pair_the_fallback_then_the_legacy_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let (chain, key) = pair("fallback");
        let (cert_file, key_file) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert_file, &chain).unwrap();
        std::fs::write(&key_file, &key).unwrap();
        let store = FileStore::open(
            "kubelet-server",
            dir.path(),
            Some((cert_file.clone(), key_file)),
        )
        .unwrap();
        assert_eq!(
            store.current().unwrap().unwrap().leaf.common_name,
            "fallback"
        );
        std::fs::remove_file(&cert_file).unwrap();
        let (chain, key) = pair("legacy");
        std::fs::write(dir.path().join("kubelet-server.crt"), &chain).unwrap();
        std::fs::write(dir.path().join("kubelet-server.key"), &key).unwrap();
        assert_eq!(store.current().unwrap().unwrap().leaf.common_name, "legacy");
        // A key that is not the certificate's is refused.
        let (_, other_key) = pair("other");
        let err = parse_pair(&chain, &other_key).unwrap_err();
        assert!(
            err.to_string().contains("private key does not match"),
            "{err}"
        );
    }
}
