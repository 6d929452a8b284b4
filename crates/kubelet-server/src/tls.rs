//! The kubelet API's TLS setup (upstream: `InitializeTLS` in
//! cmd/kubelet/app/server.go): the serving certificate from
//! tlsCertFile/tlsPrivateKeyFile, or a self-signed one kept in
//! `<cert-dir>/kubelet.{crt,key}`; TLS 1.2+ with ECDHE AES-GCM /
//! ChaCha20 suites only; client certificates requested and, when
//! `authentication.x509.clientCAFile` is set, verified against it (optional at
//! the TLS level so that bearer tokens still work).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kubelet_core::certificate::Leaf;
use kubelet_core::config::{KubeletConfiguration, TlsMinVersion};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::UnixTime;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, RootCertStore, ServerConfig, SupportedCipherSuite};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// How long a generated self-signed serving certificate is valid (upstream: one year).
const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Why the TLS configuration could not be built; each names the file or setting.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Pem { path: PathBuf, message: String },
    #[error("generating the self-signed serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("tlsCipherSuites: cipher suite {0:?} not supported or doesn't exist")]
    UnknownCipherSuite(String),
    #[error("authentication.x509.clientCAFile {path}: {message}")]
    ClientCa { path: PathBuf, message: String },
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The serving certificate chain and key.
#[derive(Debug)]
pub struct ServingCert {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// What the self-signed certificate names (upstream uses the host name; the
/// node's addresses and localhost are added so that `kubectl` through
/// 127.0.0.1 and the API server through the node IP both match).
#[derive(Clone, Debug)]
pub struct SelfSignedIdentity {
    pub node_name: String,
    pub node_ips: Vec<IpAddr>,
}

/// The kubelet API's certificate, read at each handshake, so a new one
/// (rotated, or reloaded from its files) is served from the next handshake
/// on while sessions already open keep theirs. While there is none
/// (serverTLSBootstrap before its request is issued) every handshake
/// fails, as upstream's `no serving certificate available for the kubelet`.
#[derive(Debug, Default)]
pub struct ServingCertificate(parking_lot::RwLock<Option<Arc<CertifiedKey>>>);

impl ServingCertificate {
    /// Serve `cert` from the next handshake on; refused (the old one kept)
    /// when its key is not the certificate's.
    pub fn set(&self, cert: ServingCert) -> Result<(), TlsError> {
        let key = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(cert.key)?;
        let certified = CertifiedKey::new(cert.chain, key);
        certified.keys_match()?;
        *self.0.write() = Some(Arc::new(certified));
        Ok(())
    }

    /// Whether there is a certificate to serve.
    pub fn is_set(&self) -> bool {
        self.0.read().is_some()
    }

    /// The certificate served now.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.0.read().clone()
    }
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let cert = self.current();
        if cert.is_none() {
            tracing::warn!("no serving certificate available for the kubelet");
        }
        cert
    }
}

/// The client certificates the kubelet API trusts: `clientCAFile`'s
/// bundle, replaced when the file changes (upstream's
/// ReloadKubeletClientCAFile, on by default since v1.36); a handshake under
/// way keeps the bundle it started with. A certificate that does not chain
/// to it fails the handshake; a connection without one goes on to token
/// authentication. No CA names are hinted to clients (they would change
/// with the file; upstream's server sends none either).
#[derive(Debug)]
pub struct ClientCa(parking_lot::RwLock<Arc<dyn ClientCertVerifier>>);

impl ClientCa {
    /// Trust `roots`.
    pub fn new(roots: RootCertStore) -> Result<Self, TlsError> {
        Ok(ClientCa(parking_lot::RwLock::new(verifier(roots)?)))
    }

    /// `authentication.x509.clientCAFile`'s bundle; None without one.
    pub fn from_config(cfg: &KubeletConfiguration) -> Result<Option<Arc<ClientCa>>, TlsError> {
        cfg.authentication
            .x509
            .client_ca_file
            .as_deref()
            .map(|path| Ok(Arc::new(ClientCa::new(load_client_ca(path)?)?)))
            .transpose()
    }

    /// Trust the bundle in `path` from the next handshake on; on an error
    /// the bundle trusted stays.
    pub fn reload(&self, path: &Path) -> Result<(), TlsError> {
        let verifier = verifier(load_client_ca(path)?)?;
        *self.0.write() = verifier;
        Ok(())
    }

    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        self.0.read().clone()
    }
}

fn verifier(roots: RootCertStore) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))
}

impl ClientCertVerifier for ClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

/// The certificate the kubelet API starts with, as upstream chooses it:
/// tlsCertFile/tlsPrivateKeyFile when given, else none with
/// serverTLSBootstrap (its request is not issued yet), else the
/// self-signed pair in `cert_dir`.
pub fn initial_certificate(
    cfg: &KubeletConfiguration,
    cert_dir: &Path,
    identity: &SelfSignedIdentity,
) -> Result<Option<ServingCert>, TlsError> {
    Ok(match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
        (Some(cert), Some(key)) => Some(load_cert_and_key(cert, key)?),
        _ if cfg.server_tls_bootstrap => None,
        _ => Some(self_signed(cert_dir, identity, SystemTime::now())?),
    })
}

/// The rustls server configuration of the kubelet API: `serving`'s
/// certificate, client certificates verified against `client_ca`, TLS
/// versions and cipher suites from `cfg`.
pub fn server_config(
    cfg: &KubeletConfiguration,
    serving: Arc<ServingCertificate>,
    client_ca: Option<Arc<ClientCa>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    build(serving, client_ca, cfg)
}

/// The ring provider restricted to the TLS 1.3 suites (always on, as in Go)
/// and the TLS 1.2 suites named (upstream names); all ECDHE AES-GCM /
/// ChaCha20 suites when `names` is empty; and to the key exchange groups
/// `curves` names (Go's CurveIDs, checked by the configuration's
/// validation), in that order; all of them when empty.
pub fn crypto_provider(names: &[String], curves: &[i32]) -> Result<CryptoProvider, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !curves.is_empty() {
        let all = std::mem::take(&mut provider.kx_groups);
        provider.kx_groups = curves
            .iter()
            .filter_map(|&id| {
                all.iter()
                    .find(|g| i32::from(u16::from(g.name())) == id)
                    .copied()
            })
            .collect();
    }
    let all = std::mem::take(&mut provider.cipher_suites);
    let (tls13, tls12): (Vec<SupportedCipherSuite>, Vec<SupportedCipherSuite>) = all
        .into_iter()
        .partition(|s| matches!(s, SupportedCipherSuite::Tls13(_)));
    let mut chosen = tls13;
    if names.is_empty() {
        chosen.extend(tls12);
    } else {
        for name in names {
            let Some(suite) = cipher_suite(name) else {
                return Err(TlsError::UnknownCipherSuite(name.clone()));
            };
            // TLS 1.3 names are accepted and ignored: those are always on.
            if let Some(s) = tls12.iter().find(|s| s.suite() == suite)
                && !chosen.iter().any(|c| c.suite() == suite)
            {
                chosen.push(*s);
            }
        }
    }
    provider.cipher_suites = chosen;
    Ok(provider)
}

/// The rustls suite of an upstream (Go) cipher suite name.
fn cipher_suite(name: &str) -> Option<CipherSuite> {
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => {
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        }
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => {
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        }
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => {
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => {
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_AES_128_GCM_SHA256" => CipherSuite::TLS13_AES_128_GCM_SHA256,
        "TLS_AES_256_GCM_SHA384" => CipherSuite::TLS13_AES_256_GCM_SHA384,
        "TLS_CHACHA20_POLY1305_SHA256" => CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        _ => return None,
    })
}

/// Assembles the server configuration (also used by tests with in-memory certificates).
pub fn build(
    serving: Arc<ServingCertificate>,
    client_ca: Option<Arc<ClientCa>>,
    cfg: &KubeletConfiguration,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(crypto_provider(
        &cfg.tls_cipher_suites,
        &cfg.tls_curve_preferences,
    )?);
    let min_version = cfg.tls_min_version;
    let versions: &[&'static rustls::SupportedProtocolVersion] = match min_version {
        TlsMinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsMinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(versions)?;
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(ca),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(serving);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn pem_error(path: &Path, message: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// The PEM certificate chain and private key of tlsCertFile/tlsPrivateKeyFile.
pub fn load_cert_and_key(cert_path: &Path, key_path: &Path) -> Result<ServingCert, TlsError> {
    let chain = CertificateDer::pem_slice_iter(&read(cert_path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert_path, e.to_string()))?;
    if chain.is_empty() {
        return Err(pem_error(cert_path, "no CERTIFICATE block"));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(key_path)?)
        .map_err(|e| pem_error(key_path, format!("no usable private key: {e}")))?;
    Ok(ServingCert { chain, key })
}

/// The CA bundle of `authentication.x509.clientCAFile`.
pub fn load_client_ca(path: &Path) -> Result<RootCertStore, TlsError> {
    let err = |message: String| TlsError::ClientCa {
        path: path.to_owned(),
        message,
    };
    let certs = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| err(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(err("no CA certificate".to_owned()));
    }
    Ok(roots)
}

/// The self-signed serving certificate in `pki_dir` (kubelet.crt and
/// kubelet.key, the key 0600): reused when both parse, match and the
/// certificate has not expired at `now`, otherwise generated anew (CN
/// `<node>@<unix-time>`, SANs node name, node IPs and localhost).
pub fn self_signed(
    pki_dir: &Path,
    identity: &SelfSignedIdentity,
    now: SystemTime,
) -> Result<ServingCert, TlsError> {
    let cert_path = pki_dir.join("kubelet.crt");
    let key_path = pki_dir.join("kubelet.key");
    if let Ok(existing) = load_cert_and_key(&cert_path, &key_path)
        && still_valid(&existing, now)
    {
        return Ok(existing);
    }
    let (cert_pem, key_pem) = generate_self_signed(identity, now)?;
    std::fs::create_dir_all(pki_dir).map_err(|source| TlsError::Write {
        path: pki_dir.to_owned(),
        source,
    })?;
    write_file(&key_path, key_pem.as_bytes(), 0o600)?;
    write_file(&cert_path, cert_pem.as_bytes(), 0o644)?;
    tracing::info!(cert = %cert_path.display(), "generated a self-signed serving certificate");
    load_cert_and_key(&cert_path, &key_path)
}

/// Write `data` to `path` with `mode` (created or truncated), synced to disk.
pub fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(err)?;
    f.write_all(data).map_err(err)?;
    f.sync_all().map_err(err)?;
    // An existing file keeps its mode on open: set it.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).map_err(err)
}

/// Whether a stored certificate can be served at `now`: it parses, its key
/// matches and it has not expired.
fn still_valid(cert: &ServingCert, now: SystemTime) -> bool {
    let Some(leaf) = leaf(cert) else {
        return false;
    };
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    (leaf.not_before..leaf.not_after).contains(&now) && keys_match(cert)
}

/// Whether the key is the one the first certificate of the chain certifies.
pub fn keys_match(cert: &ServingCert) -> bool {
    let provider = rustls::crypto::ring::default_provider();
    let Ok(key) = provider.key_provider.load_private_key(cert.key.clone_key()) else {
        return false;
    };
    rustls::sign::CertifiedKey::new(cert.chain.clone(), key)
        .keys_match()
        .is_ok()
}

/// The earliest NotAfter (unix seconds) of the PEM certificates in `pem`;
/// None when there is none or one does not parse.
pub fn chain_not_after(pem: &[u8]) -> Option<i64> {
    let ders = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    ders.iter()
        .map(|der| {
            x509_parser::parse_x509_certificate(der)
                .ok()
                .map(|(_, c)| c.validity().not_after.timestamp())
        })
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .min()
}

/// What the certificate manager reads of the chain's first certificate;
/// None when there is none or it does not parse.
pub fn leaf(cert: &ServingCert) -> Option<Leaf> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.chain.first()?).ok()?;
    let subject = parsed.subject();
    let strings = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue<'_>>| {
        it.filter_map(|a| a.as_str().ok().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let mut dns_names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(d) => dns_names.push((*d).to_owned()),
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                        ips.push(IpAddr::from(v4));
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                        ips.push(IpAddr::from(v6));
                    }
                }
                _ => {}
            }
        }
    }
    Some(Leaf {
        not_before: parsed.validity().not_before.timestamp(),
        not_after: parsed.validity().not_after.timestamp(),
        common_name: strings(&mut subject.iter_common_name()).join(""),
        organizations: strings(&mut subject.iter_organization()),
        dns_names,
        ips,
    })
}

/// A new self-signed certificate and key (PEM) for `identity`, valid a year from `now`.
fn generate_self_signed(
    identity: &SelfSignedIdentity,
    now: SystemTime,
) -> Result<(String, String), TlsError> {
    let unix = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut sans = vec![identity.node_name.clone(), "localhost".to_owned()];
    sans.extend(identity.node_ips.iter().map(IpAddr::to_string));
    sans.push("127.0.0.1".to_owned());
    let mut seen = std::collections::HashSet::new();
    sans.retain(|s| seen.insert(s.clone()));
    let mut params = rcgen::CertificateParams::new(sans)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{}@{unix}", identity.node_name),
    );
    params.not_before = now.into();
    params.not_after = (now + SELF_SIGNED_VALIDITY).into();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn identity() -> SelfSignedIdentity {
        SelfSignedIdentity {
            node_name: "node-a".to_owned(),
            node_ips: vec!["10.0.0.7".parse().unwrap()],
        }
    }

    #[test]
    fn self_signed_is_written_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let first = self_signed(&pki, &identity(), now).unwrap();
        let mode = std::fs::metadata(pki.join("kubelet.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (_, parsed) = x509_parser::parse_x509_certificate(&first.chain[0]).unwrap();
        let cn = parsed
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(cn, "node-a@1800000000");
        let sans: Vec<String> = parsed
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|n| n.to_string())
            .collect();
        for want in [
            "DNSName(node-a)",
            "DNSName(localhost)",
            "IPAddress(0a:00:00:07)",
        ] {
            assert!(sans.iter().any(|s| s == want), "{sans:?} lacks {want}");
        }
        // A day later: the same certificate.
        let again = self_signed(&pki, &identity(), now + Duration::from_secs(86400)).unwrap();
        assert_eq!(again.chain, first.chain);
        // After it expired: a new one.
        let later = now + SELF_SIGNED_VALIDITY + Duration::from_secs(1);
        let renewed = self_signed(&pki, &identity(), later).unwrap();
        assert_ne!(renewed.chain, first.chain);
        // A corrupt file: a new one.
        std::fs::write(pki.join("kubelet.crt"), "garbage").unwrap();
        let regenerated = self_signed(&pki, &identity(), later).unwrap();
        assert_ne!(regenerated.chain, renewed.chain);
    }

    #[test]
    fn cipher_suites_are_restricted() {
        let all = crypto_provider(&[], &[]).unwrap();
        let names: Vec<String> = all
            .cipher_suites
            .iter()
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        for s in &names {
            assert!(
                s.starts_with("TLS13_") || s.starts_with("TLS_ECDHE_"),
                "unexpected suite {s}"
            );
            assert!(s.contains("GCM") || s.contains("CHACHA20"), "{s}");
        }
        let one =
            crypto_provider(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_owned()], &[]).unwrap();
        let tls12: Vec<CipherSuite> = one
            .cipher_suites
            .iter()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls12(_)))
            .map(|s| s.suite())
            .collect();
        assert_eq!(tls12, [CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]);
        assert_eq!(one.cipher_suites.len(), 4, "3 TLS 1.3 suites + 1");
        let err = crypto_provider(&["TLS_RSA_WITH_RC4_128_SHA".to_owned()], &[]).unwrap_err();
        assert!(
            err.to_string().contains("TLS_RSA_WITH_RC4_128_SHA"),
            "{err}"
        );
        // Every name the configuration accepts maps to a suite.
        for name in kubelet_core::config::TLS_CIPHER_SUITES {
            assert!(cipher_suite(name).is_some(), "{name}");
        }
    }

    #[test]
    fn curve_preferences_pick_and_order_the_key_exchange_groups() {
        let names = |p: &CryptoProvider| -> Vec<u16> {
            p.kx_groups.iter().map(|g| u16::from(g.name())).collect()
        };
        assert_eq!(
            names(&crypto_provider(&[], &[]).unwrap()),
            [29, 23, 24],
            "all by default"
        );
        assert_eq!(names(&crypto_provider(&[], &[24, 29]).unwrap()), [24, 29]);
    }

    #[test]
    fn server_config_from_configured_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_pem, key_pem) = generate_self_signed(&identity(), SystemTime::now()).unwrap();
        let cert = dir.path().join("serving.crt");
        let key = dir.path().join("serving.key");
        let ca = dir.path().join("ca.crt");
        std::fs::write(&cert, &cert_pem).unwrap();
        std::fs::write(&key, &key_pem).unwrap();
        std::fs::write(&ca, &cert_pem).unwrap();
        let mut cfg = KubeletConfiguration {
            tls_cert_file: Some(cert.clone()),
            tls_private_key_file: Some(key.clone()),
            ..KubeletConfiguration::default()
        };
        cfg.authentication.x509.client_ca_file = Some(ca.clone());
        let pki = dir.path().join("pki");
        let serving = Arc::new(ServingCertificate::default());
        let initial = initial_certificate(&cfg, &pki, &identity())
            .unwrap()
            .unwrap();
        serving.set(initial).unwrap();
        let ca_of = |cfg: &KubeletConfiguration| ClientCa::from_config(cfg);
        server_config(&cfg, serving.clone(), ca_of(&cfg).unwrap()).unwrap();
        assert!(
            !pki.exists(),
            "no self-signed certificate when files are given"
        );
        // Without files: the self-signed one in the cert dir.
        let defaults = KubeletConfiguration::default();
        assert!(
            initial_certificate(&defaults, &pki, &identity())
                .unwrap()
                .is_some()
        );
        assert!(pki.join("kubelet.crt").exists());
        assert!(ca_of(&defaults).unwrap().is_none());
        let config = server_config(&defaults, serving.clone(), None).unwrap();
        assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
        // With serverTLSBootstrap and no files: none until the request is
        // issued.
        let bootstrap = KubeletConfiguration {
            server_tls_bootstrap: true,
            ..KubeletConfiguration::default()
        };
        assert!(
            initial_certificate(&bootstrap, &pki, &identity())
                .unwrap()
                .is_none()
        );
        // A key that does not match the certificate is refused, and the
        // certificate served stays.
        let (_, other_key) = generate_self_signed(&identity(), SystemTime::now()).unwrap();
        std::fs::write(&key, other_key).unwrap();
        let mismatched = load_cert_and_key(&cert, &key).unwrap();
        let refused = serving.set(mismatched);
        assert!(
            matches!(
                refused,
                Err(TlsError::Rustls(rustls::Error::InconsistentKeys(
                    rustls::InconsistentKeys::KeyMismatch
                )))
            ),
            "{:?}",
            refused.err()
        );
        assert!(serving.is_set());
        // A client CA file that is not PEM names the setting.
        std::fs::write(&ca, "not a certificate").unwrap();
        let err = ca_of(&cfg).unwrap_err();
        assert!(err.to_string().contains("clientCAFile"), "{err}");
    }

    #[test]
    fn bad_files_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.crt");
        let err = load_cert_and_key(&missing, &missing).unwrap_err();
        assert!(err.to_string().contains("missing.crt"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let err = load_cert_and_key(&empty, &empty).unwrap_err();
        assert!(err.to_string().contains("no CERTIFICATE"), "{err}");
        let err = load_client_ca(&empty).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("authentication.x509.clientCAFile"),
            "{err}"
        );
    }
}
