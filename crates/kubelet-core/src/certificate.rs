//! The node's own certificates, as upstream's certificate manager
//! (client-go `util/certificate`) and the kubelet's bootstrap
//! (`pkg/kubelet/certificate`) decide them: what a request asks for, when a
//! certificate is due for rotation, the CSR's name, the files and the
//! kubeconfig written. Pure: the store, the API calls and the clock are the
//! caller's.

use std::collections::BTreeSet;
use std::net::IpAddr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::NodeAddress;
use sha2::Digest as _;

/// The organization of every node certificate.
pub const NODES_GROUP: &str = "system:nodes";

/// Which of the node's two certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The client certificate the kubelet authenticates to the API server
    /// with.
    Client,
    /// The serving certificate of the kubelet API (`:10250`).
    Serving,
}

impl Kind {
    /// The signer a request of this kind names.
    pub fn signer(self) -> &'static str {
        match self {
            Kind::Client => "kubernetes.io/kube-apiserver-client-kubelet",
            Kind::Serving => "kubernetes.io/kubelet-serving",
        }
    }

    /// The file store's prefix: `<prefix>-current.pem` in the cert dir.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Client => "kubelet-client",
            Kind::Serving => "kubelet-server",
        }
    }

    /// `spec.usages` for an ECDSA key (upstream adds `key encipherment`
    /// only for RSA keys, which rkubelet never makes).
    pub fn usages(self) -> [&'static str; 2] {
        match self {
            Kind::Client => ["digital signature", "client auth"],
            Kind::Serving => ["digital signature", "server auth"],
        }
    }
}

/// What a certificate request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

/// `O=system:nodes, CN=system:node:<node>`, no SANs: the client request.
pub fn client_template(node: &str) -> Template {
    Template {
        common_name: format!("system:node:{node}"),
        organizations: vec![NODES_GROUP.to_owned()],
        dns_names: Vec::new(),
        ips: Vec::new(),
    }
}

/// The serving request for the node's addresses: Hostname and the DNS
/// addresses as DNS names, the IP addresses (and a Hostname that is an IP)
/// as IPs, deduplicated and sorted as upstream. None while the node has no
/// IP address (upstream asks for none then; AllowDNSOnlyNodeCSR is off).
pub fn serving_template(node: &str, addresses: &[NodeAddress]) -> Option<Template> {
    let mut dns = BTreeSet::new();
    let mut ips = BTreeSet::new();
    for a in addresses.iter().filter(|a| !a.address.is_empty()) {
        let is_ip = a.address.parse::<IpAddr>().is_ok();
        match (a.type_.as_str(), is_ip) {
            ("Hostname" | "InternalIP" | "ExternalIP", true) => {
                ips.insert(a.address.clone());
            }
            ("Hostname" | "InternalDNS" | "ExternalDNS", false)
            | ("InternalDNS" | "ExternalDNS", true) => {
                dns.insert(a.address.clone());
            }
            _ => {}
        }
    }
    if ips.is_empty() {
        return None;
    }
    // Upstream sorts the IPs by their string form.
    let ips = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
    Some(Template {
        dns_names: dns.into_iter().collect(),
        ips,
        ..client_template(node)
    })
}

/// What the manager needs of a certificate it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// Unix seconds.
    pub not_before: i64,
    /// Unix seconds.
    pub not_after: i64,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

/// Whether `leaf` still answers `template`: the same CN and none of the
/// template's DNS names, IPs or organizations missing (extra ones are fine),
/// as upstream's certSatisfiesTemplate.
pub fn satisfies(leaf: &Leaf, template: &Template) -> bool {
    leaf.common_name == template.common_name
        && template
            .dns_names
            .iter()
            .all(|d| leaf.dns_names.contains(d))
        && template.ips.iter().all(|ip| leaf.ips.contains(ip))
        && template
            .organizations
            .iter()
            .all(|o| leaf.organizations.contains(o))
}

/// When `leaf` is due for rotation, in unix nanoseconds:
/// `NotBefore + life·(0.7 + 0.2·r)` for `r` in `[0, 1)` (upstream's
/// jitteryDuration: 70 to 90 % of its life).
pub fn rotation_deadline(leaf: &Leaf, r: f64) -> i64 {
    let life = (leaf.not_after - leaf.not_before)
        .max(0)
        .saturating_mul(1_000_000_000);
    let jitter = (life as f64 * 0.2 * r.clamp(0.0, 1.0)) as i64;
    leaf.not_before.saturating_mul(1_000_000_000) + life / 10 * 7 + jitter
}

/// When to ask for a certificate next, in unix nanoseconds: at once when
/// there is none or it no longer answers the template, else at its
/// rotation deadline.
pub fn next_rotation(now: i64, leaf: Option<&Leaf>, template: &Template, r: f64) -> i64 {
    match leaf {
        Some(leaf) if satisfies(leaf, template) => rotation_deadline(leaf, r),
        _ => now,
    }
}

/// The wait before attempt `attempt + 1` after `attempt` failures in a
/// row, in milliseconds: upstream's back-off of 2 s doubling over five
/// steps, then a poll every 32 s; `r` in `[0, 1)` adds up to 10 %.
pub fn retry_delay_ms(attempt: u32, r: f64) -> u64 {
    let base: u64 = 2_000 << attempt.min(4);
    base + (base as f64 * 0.1 * r.clamp(0.0, 1.0)) as u64
}

/// The CSR name of the blocking bootstrap (no rotation):
/// `node-csr-<base64url(SHA-512/256)>` over the public key, the CN, the
/// organizations and the usages, each base64url-encoded and followed by
/// `|`, so a restart asks again under the same name with the same key.
pub fn digested_csr_name(spki_der: &[u8], template: &Template, usages: &[&str]) -> String {
    let mut hash = sha2::Sha512_256::new();
    let mut write = |data: &[u8]| {
        hash.update(URL_SAFE_NO_PAD.encode(data));
        hash.update(b"|");
    };
    write(spki_der);
    write(template.common_name.as_bytes());
    for o in &template.organizations {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", URL_SAFE_NO_PAD.encode(hash.finalize()))
}

/// `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem`, the pair file the store writes
/// (`stamp` in upstream's `2006-01-02-15-04-05` form).
pub fn pair_file_name(prefix: &str, stamp: &str) -> String {
    format!("{prefix}-{stamp}.pem")
}

/// `<prefix>-current.pem`: the symlink to the pair in use.
pub fn current_file_name(prefix: &str) -> String {
    format!("{prefix}-current.pem")
}

/// `<prefix>-updated.pem`: the symlink made before it replaces the current
/// one.
pub fn updated_file_name(prefix: &str) -> String {
    format!("{prefix}-updated.pem")
}

/// How a kubeconfig trusts the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerTrust {
    /// `certificate-authority: <file>`.
    CaFile(String),
    /// `certificate-authority-data: <base64 PEM>`.
    CaData(String),
    /// `insecure-skip-tls-verify: true`.
    Insecure,
}

/// The kubeconfig the bootstrap writes (upstream's
/// writeKubeconfigFromBootstrapping): cluster `default-cluster` from the
/// bootstrap kubeconfig, user `default-auth` with the client certificate
/// and key both at `pem_path`, context `default-context` in namespace
/// `default`. Values are JSON-quoted, which YAML reads as they are.
pub fn kubeconfig_yaml(server: &str, trust: &ServerTrust, pem_path: &str) -> String {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let trust = match trust {
        ServerTrust::CaFile(f) => format!("certificate-authority: {}", q(f)),
        ServerTrust::CaData(d) => format!("certificate-authority-data: {}", q(d)),
        ServerTrust::Insecure => "insecure-skip-tls-verify: true".to_owned(),
    };
    format!(
        "apiVersion: v1\n\
         clusters:\n\
         - cluster:\n    {trust}\n    server: {server}\n  name: default-cluster\n\
         contexts:\n\
         - context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\n\
         current-context: default-context\n\
         kind: Config\n\
         preferences: {{}}\n\
         users:\n\
         - name: default-auth\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\n",
        server = q(server),
        pem = q(pem_path),
    )
}

/// A pair file's text split into its certificate chain and its key, as
/// PEM (LF line endings): (the CERTIFICATE blocks, every other block).
pub fn split_pair(text: &str) -> (String, String) {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    let (chain, key): (Vec<_>, Vec<_>) = pem::parse_many(text.as_bytes())
        .unwrap_or_default()
        .into_iter()
        .partition(|b| b.tag() == "CERTIFICATE");
    let encode = |blocks: Vec<pem::Pem>| {
        blocks
            .iter()
            .map(|b| pem::encode_config(b, config))
            .collect::<String>()
    };
    (encode(chain), encode(key))
}

/// Where a certificate signing request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CsrOutcome {
    /// Neither decided nor issued yet.
    Pending,
    /// Approved and issued: the PEM chain.
    Issued(String),
    /// `certificate signing request is denied, reason: .., message: ..`.
    Denied(String),
    /// `certificate signing request failed, reason: .., message: ..`.
    Failed(String),
}

/// Upstream's reading of a CSR it waits on: Denied or Failed end the wait
/// with their reason and message; Approved with a certificate ends it with
/// the certificate.
pub fn csr_outcome(csr: &CertificateSigningRequest) -> CsrOutcome {
    let Some(status) = &csr.status else {
        return CsrOutcome::Pending;
    };
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let said = |c: &k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition| {
        format!(
            "reason: {}, message: {}",
            c.reason.as_deref().unwrap_or_default(),
            c.message.as_deref().unwrap_or_default()
        )
    };
    if let Some(c) = conditions.iter().find(|c| c.type_ == "Denied") {
        return CsrOutcome::Denied(format!(
            "certificate signing request is denied, {}",
            said(c)
        ));
    }
    if let Some(c) = conditions.iter().find(|c| c.type_ == "Failed") {
        return CsrOutcome::Failed(format!("certificate signing request failed, {}", said(c)));
    }
    match &status.certificate {
        Some(cert) if conditions.iter().any(|c| c.type_ == "Approved") && !cert.0.is_empty() => {
            CsrOutcome::Issued(String::from_utf8_lossy(&cert.0).into_owned())
        }
        _ => CsrOutcome::Pending,
    }
}

/// The DER prefix of a PKCS#8 P-256 key as ring and Go write it, up to the
/// inner ECPrivateKey's private scalar.
const PKCS8_P256_PREFIX: &[u8] = &[
    0x30, 0x81, 0x87, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02,
    0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x6d, 0x30, 0x6b, 0x02,
    0x01, 0x01, 0x04, 0x20,
];
/// Between the scalar and the public point in that PKCS#8 document.
const PKCS8_P256_MIDDLE: &[u8] = &[0xa1, 0x44, 0x03, 0x42, 0x00];
/// The DER prefix of a SEC 1 P-256 key as Go's MarshalECPrivateKey writes
/// it, up to the private scalar.
const SEC1_P256_PREFIX: &[u8] = &[0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20];
/// Between the scalar and the public point in SEC 1: the curve's OID
/// (prime256v1) and the public key's tag.
const SEC1_P256_MIDDLE: &[u8] = &[
    0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0xa1, 0x44, 0x03, 0x42,
    0x00,
];

/// Split a fixed-layout P-256 key into its scalar and public point.
fn split_p256<'a>(der: &'a [u8], prefix: &[u8], middle: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    let rest = der.strip_prefix(prefix)?;
    let (scalar, rest) = rest.split_at_checked(32)?;
    let point = rest.strip_prefix(middle)?;
    (point.len() == 65 && point[0] == 0x04).then_some((scalar, point))
}

/// A P-256 key in PKCS#8 (what ring and rcgen make) as the SEC 1
/// `EC PRIVATE KEY` upstream writes (with the curve and the public key);
/// None for any other key.
pub fn sec1_from_pkcs8_p256(pkcs8: &[u8]) -> Option<Vec<u8>> {
    let (scalar, point) = split_p256(pkcs8, PKCS8_P256_PREFIX, PKCS8_P256_MIDDLE)?;
    Some([SEC1_P256_PREFIX, scalar, SEC1_P256_MIDDLE, point].concat())
}

/// The reverse of [`sec1_from_pkcs8_p256`], to sign with a key read back.
pub fn pkcs8_from_sec1_p256(sec1: &[u8]) -> Option<Vec<u8>> {
    let (scalar, point) = split_p256(sec1, SEC1_P256_PREFIX, SEC1_P256_MIDDLE)?;
    Some([PKCS8_P256_PREFIX, scalar, PKCS8_P256_MIDDLE, point].concat())
}

/// A PKCS#8 P-256 key as upstream's `EC PRIVATE KEY` PEM; None for any
/// other key.
pub fn ec_private_key_pem(pkcs8: &[u8]) -> Option<String> {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    let sec1 = sec1_from_pkcs8_p256(pkcs8)?;
    Some(pem::encode_config(
        &pem::Pem::new("EC PRIVATE KEY", sec1),
        config,
    ))
}

/// The PKCS#8 DER of an `EC PRIVATE KEY` (P-256) or `PRIVATE KEY` PEM;
/// None for anything else.
pub fn pkcs8_from_pem(text: &str) -> Option<Vec<u8>> {
    let block = pem::parse(text.as_bytes()).ok()?;
    match block.tag() {
        "EC PRIVATE KEY" => pkcs8_from_sec1_p256(block.contents()),
        "PRIVATE KEY" => Some(block.into_contents()),
        _ => None,
    }
}

#[cfg(test)]
#[path = "certificate_tests.rs"]
mod tests;
