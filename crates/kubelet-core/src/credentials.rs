//! Registry credentials from a pod's `imagePullSecrets` (upstream's
//! credentialprovider keyring and its secrets package): the
//! `kubernetes.io/dockerconfigjson` and legacy `kubernetes.io/dockercfg`
//! Secrets read into a keyring, and the credentials for an image looked up
//! as upstream matches them (hosts with `*` globs per dot-separated part,
//! the port exactly, the path as a prefix; the more specific key first;
//! docker.io images also take the `index.docker.io` credentials). Pure.

use std::collections::{BTreeMap, HashMap};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::reference::parse_normalized;

/// A Secret's type and the key it keeps its config under.
const DOCKER_CONFIG_JSON: (&str, &str) = ("kubernetes.io/dockerconfigjson", ".dockerconfigjson");
const DOCKERCFG: (&str, &str) = ("kubernetes.io/dockercfg", ".dockercfg");

/// The host docker.io images' credentials are also kept under.
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// One set of credentials for a registry (CRI's AuthConfig carries them),
/// and where it came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
    pub email: String,
    pub source: CredentialSource,
}

/// Where a credential came from (what a pull with it grants, in the image
/// pull records).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CredentialSource {
    /// A pod's pull secret.
    Secret(ObjectCoordinates),
    /// A credential provider plugin given the pod's service account token
    /// (tokenAttributes): pods of that service account may use the image.
    ServiceAccount(ObjectCoordinates),
    /// A credential provider plugin of the node: every pod on the node may
    /// use the image.
    #[default]
    Node,
}

/// The API object (Secret, ServiceAccount) a credential came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectCoordinates {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

/// upstream's AuthConfig as its hash reads it: Go's json.Marshal of the
/// fields a docker config sets, empty ones left out.
#[derive(Serialize)]
struct HashedAuth<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    password: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    email: &'a str,
}

impl Credential {
    /// upstream's hashAuthConfig: the hex SHA-256 of the credential's JSON
    /// as Go encodes it (`<`, `>`, `&`, U+2028 and U+2029 escaped), so
    /// that pull records match those the upstream kubelet wrote.
    pub fn hash(&self) -> String {
        let auth = HashedAuth {
            username: &self.username,
            password: &self.password,
            email: &self.email,
        };
        let json = serde_json::to_string(&auth).unwrap_or_default();
        let mut go = String::with_capacity(json.len());
        for c in json.chars() {
            match c {
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                    go.push_str(&format!("\\u{:04x}", c as u32));
                }
                c => go.push(c),
            }
        }
        hex::encode(Sha256::digest(go.as_bytes()))
    }
}

/// A docker config's entry for one registry: `auth` (base64 of
/// `user:password`) wins over `username` and `password`, as upstream's.
#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    auth: String,
}

#[derive(Deserialize)]
struct ConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// An `auth` field that is not base64(username:password).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(transparent)]
    Base64(#[from] base64::DecodeError),
    #[error("must be formatted as base64(username:password)")]
    Format,
}

/// A pull secret whose docker config does not parse.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    #[error("image pull secret {secret:?}: {source}")]
    Config {
        secret: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("image pull secret {secret:?}: {location}: auth {source}")]
    Auth {
        secret: String,
        location: String,
        #[source]
        source: AuthError,
    },
}

/// `auth`'s user and password.
fn decode_auth(field: &str) -> Result<(String, String), AuthError> {
    let engine = if field.trim().ends_with('=') {
        &base64::engine::general_purpose::STANDARD
    } else {
        &base64::engine::general_purpose::STANDARD_NO_PAD
    };
    let decoded = engine.decode(field)?;
    let text = String::from_utf8_lossy(&decoded);
    let (username, password) = text.split_once(':').ok_or(AuthError::Format)?;
    Ok((username.to_owned(), password.to_owned()))
}

/// The registries' credentials of a pod's pull secrets.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    /// Keys (`host[:port][/path]`), reverse-sorted so that the more
    /// specific path of a host is tried first.
    index: Vec<String>,
    creds: HashMap<String, Vec<Credential>>,
}

impl Keyring {
    /// The keyring of `secrets`: those of another type, or without their
    /// key, are skipped as upstream's; Err names a secret whose config does
    /// not parse.
    pub fn from_secrets<'a>(
        secrets: impl IntoIterator<Item = &'a Secret>,
    ) -> Result<Keyring, KeyringError> {
        let mut found = Vec::new();
        for secret in secrets {
            let meta = &secret.metadata;
            let name = meta.name.as_deref().unwrap_or("");
            let source = ObjectCoordinates {
                uid: meta.uid.clone().unwrap_or_default(),
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: name.to_owned(),
            };
            let kind = secret.type_.as_deref().unwrap_or("");
            let config = |key: &str| {
                secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|b| b.0.as_slice())
                    .filter(|b| !b.is_empty())
            };
            let bad = |source| KeyringError::Config {
                secret: name.to_owned(),
                source,
            };
            let entries: BTreeMap<String, Entry> = if kind == DOCKER_CONFIG_JSON.0 {
                let Some(b) = config(DOCKER_CONFIG_JSON.1) else {
                    continue;
                };
                serde_json::from_slice::<ConfigJson>(b).map_err(bad)?.auths
            } else if kind == DOCKERCFG.0 {
                let Some(b) = config(DOCKERCFG.1) else {
                    continue;
                };
                serde_json::from_slice(b).map_err(bad)?
            } else {
                continue;
            };
            for (location, entry) in entries {
                let (username, password) = if entry.auth.is_empty() {
                    (entry.username, entry.password)
                } else {
                    decode_auth(&entry.auth).map_err(|source| KeyringError::Auth {
                        secret: name.to_owned(),
                        location: location.clone(),
                        source,
                    })?
                };
                let cred = Credential {
                    username,
                    password,
                    email: entry.email,
                    source: CredentialSource::Secret(source.clone()),
                };
                found.push((location, cred));
            }
        }
        Ok(Keyring::from_entries(found))
    }

    /// The keyring of credentials given by registry (`location`, as a
    /// docker config's keys): a credential provider plugin's answers.
    pub fn from_entries(entries: impl IntoIterator<Item = (String, Credential)>) -> Keyring {
        let mut ring = Keyring::default();
        for (location, cred) in entries {
            ring.add(&location, cred);
        }
        ring.index.sort_unstable_by(|a, b| b.cmp(a));
        ring.index.dedup();
        ring
    }

    /// Keep `cred` under `location` as upstream's BasicDockerKeyring.Add
    /// keys it: no scheme, `/v1/` and `/v2/` meaning the host itself.
    fn add(&mut self, location: &str, cred: Credential) {
        let rest = location
            .strip_prefix("https://")
            .or_else(|| location.strip_prefix("http://"))
            .unwrap_or(location);
        let (host, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let path = path
            .strip_prefix("/v2")
            .or_else(|| path.strip_prefix("/v1"))
            .filter(|p| p.starts_with('/'))
            .unwrap_or(path);
        let key = if path.is_empty() || path == "/" {
            host.to_owned()
        } else {
            format!("{host}{path}")
        };
        self.index.push(key.clone());
        self.creds.entry(key).or_default().push(cred);
    }

    /// The credentials to try, in order, for pulling `image` (none: pull
    /// without).
    pub fn lookup(&self, image: &str) -> Vec<Credential> {
        let repo = repository(image);
        let found: Vec<Credential> = self
            .index
            .iter()
            .filter(|k| urls_match(k, &repo))
            .flat_map(|k| self.creds[k.as_str()].iter().cloned())
            .collect();
        if found.is_empty() && is_default_registry(&repo) {
            return self
                .creds
                .get(DEFAULT_REGISTRY_HOST)
                .cloned()
                .unwrap_or_default();
        }
        found
    }
}

/// The repository an image reference pulls from (upstream's
/// ParseImageName): no tag or digest, `docker.io` (and `library/`) when no
/// registry is named; an unparsable reference as given.
pub fn repository(image: &str) -> String {
    parse_normalized(image).map_or_else(|_| image.to_owned(), |r| r.name)
}

/// Whether `repo` is on the default registry (upstream's
/// isDefaultRegistryMatch).
fn is_default_registry(repo: &str) -> bool {
    let first = repo.split('/').next().unwrap_or("");
    !first.is_empty()
        && (!repo.contains('/')
            || first == "docker.io"
            || first == DEFAULT_REGISTRY_HOST
            || !first.contains(['.', ':']))
}

/// `host` split into its dot-separated parts and its port.
fn host_parts(host: &str) -> (Vec<&str>, &str) {
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (n, p),
        _ => (host, ""),
    };
    (name.split('.').collect(), port)
}

/// Whether the key `glob` matches `target` (both `host[:port][/path]`), as
/// upstream's URLsMatch: same port, as many host parts each matching its
/// glob, the key's path a prefix of the target's.
pub fn urls_match(glob: &str, target: &str) -> bool {
    let split = |s: &str| -> (String, String) {
        match s.find('/') {
            Some(i) => (s[..i].to_owned(), s[i..].to_owned()),
            None => (s.to_owned(), String::new()),
        }
    };
    let ((glob_host, glob_path), (target_host, target_path)) = (split(glob), split(target));
    let (glob_parts, glob_port) = host_parts(&glob_host);
    let (target_parts, target_port) = host_parts(&target_host);
    glob_port == target_port
        && glob_parts.len() == target_parts.len()
        && target_path.starts_with(&glob_path)
        && glob_parts
            .iter()
            .zip(&target_parts)
            .all(|(g, t)| glob::Pattern::new(g).is_ok_and(|p| p.matches(t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, kind: &str, key: &str, config: &[u8]) -> Secret {
        Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            type_: Some(kind.into()),
            data: Some(BTreeMap::from([(
                key.to_owned(),
                k8s_openapi::ByteString(config.to_vec()),
            )])),
            ..Default::default()
        }
    }

    fn json_secret(name: &str, auths: &str) -> Secret {
        let config = format!(r#"{{"auths": {auths}}}"#);
        secret(
            name,
            DOCKER_CONFIG_JSON.0,
            DOCKER_CONFIG_JSON.1,
            config.as_bytes(),
        )
    }

    #[test]
    fn credentials_match_as_upstreams_keyring() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let secrets = [
            json_secret(
                "specific",
                &format!(
                    r#"{{"https://quay.io/coreos": {{"auth": "{}"}}, "*.registry.test:5000": {{"username": "glob", "password": "glob-pw"}}}}"#,
                    b64("coreos:coreos-pw")
                ),
            ),
            json_secret(
                "broad",
                r#"{"quay.io": {"username": "quay", "password": "quay-pw"}, "https://index.docker.io/v1/": {"username": "hub", "password": "hub-pw"}}"#,
            ),
            secret(
                "legacy",
                DOCKERCFG.0,
                DOCKERCFG.1,
                br#"{"legacy.test": {"username": "old", "password": "old-pw"}}"#,
            ),
        ];
        let ring = Keyring::from_secrets(&secrets).unwrap();
        let cases: &[(&str, &[&str])] = &[
            ("quay.io/coreos/etcd:v3", &["coreos", "quay"]),
            ("quay.io/other/app", &["quay"]),
            ("a.registry.test:5000/app", &["glob"]),
            ("a.registry.test/app", &[]),
            ("a.b.registry.test:5000/app", &[]),
            ("busybox", &["hub"]),
            ("me/app", &["hub"]),
            ("legacy.test/app", &["old"]),
            ("elsewhere.test/app", &[]),
        ];
        for (image, users) in cases {
            let found = ring.lookup(image);
            let got: Vec<&str> = found.iter().map(|c| c.username.as_str()).collect();
            assert_eq!(&got, users, "{image}");
            for c in &found {
                assert_eq!(c.password, format!("{}-pw", c.username), "{image}");
            }
        }
        let CredentialSource::Secret(from) = &ring.lookup("quay.io/coreos/etcd")[0].source else {
            panic!("a secret's credential");
        };
        assert_eq!(from.name, "specific");
        assert_eq!(
            (from.namespace.as_str(), from.uid.as_str()),
            ("ns", "uid-specific")
        );
    }

    /// What upstream's hashAuthConfig gives for these cases (its AuthConfig
    /// through Go 1.26's json.Marshal and sha256, run once).
    const GO_HASH_U_P: &str = "edbd57ca9372e64eb1c9070ecf3a049ac553596b0529acf034c7a71d4e618e88";
    const GO_HASH_ESCAPED: &str =
        "bf17b32811acf8a5b035f7c2ac9afaf620b6d63a938e84e698aaff967f114485";

    #[test]
    fn credential_hashes_are_upstreams() {
        let cases = [
            ("u", "p", "", GO_HASH_U_P),
            ("rkubelet-puller", "a<b>&c", "me@x.test", GO_HASH_ESCAPED),
        ];
        for (username, password, email, want) in cases {
            let c = Credential {
                username: username.into(),
                password: password.into(),
                email: email.into(),
                source: CredentialSource::default(),
            };
            assert_eq!(c.hash(), want, "{username}");
        }
    }

    #[test]
    fn secrets_of_other_types_are_skipped_and_bad_ones_named() {
        let auths = r#"{"r.test": {"username": "u", "password": "p"}}"#;
        let mut opaque = json_secret("opaque", auths);
        opaque.type_ = Some("Opaque".into());
        assert!(
            Keyring::from_secrets([&opaque])
                .unwrap()
                .lookup("r.test/app")
                .is_empty()
        );
        let bad = secret(
            "bad",
            DOCKER_CONFIG_JSON.0,
            DOCKER_CONFIG_JSON.1,
            b"{not json",
        );
        let err = Keyring::from_secrets([&bad]).unwrap_err();
        assert!(matches!(err, KeyringError::Config { .. }), "{err}");
        let err = err.to_string();
        assert!(err.starts_with("image pull secret \"bad\": "), "{err}");
        let no_colon = json_secret("nc", r#"{"r.test": {"auth": "dXNlcg=="}}"#);
        let err = Keyring::from_secrets([&no_colon]).unwrap_err();
        assert!(
            matches!(
                err,
                KeyringError::Auth {
                    source: AuthError::Format,
                    ..
                }
            ),
            "{err}"
        );
        let err = err.to_string();
        assert!(
            err.ends_with("must be formatted as base64(username:password)"),
            "{err}"
        );
    }
}
