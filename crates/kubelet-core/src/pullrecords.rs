//! Which credentials pulled which image (upstream's image pull manager,
//! feature KubeletEnsureSecretPulledImages, beta and on since 1.35): a pod
//! may use an image already on the node only if it could have pulled it
//! itself, so a private image one pod pulled with its secret is not run by
//! another pod that has no such secret. Here: the ImagePullIntent and
//! ImagePulledRecord objects exactly as upstream writes them under
//! `<root-dir>/image_manager/{pulling,pulled}`, the four credential
//! verification policies, and the decision whether a pod must pull. Pure.
//!
//! rkubelet has no credential provider plugins, so it never records
//! service-account credentials; records upstream wrote with them are kept
//! as they are.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::credentials::{Credential, CredentialSource};
use crate::reference;

/// The version records are written in; v1alpha1 ones are read and
/// rewritten, as upstream migrates them.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
const READABLE_VERSIONS: [&str; 2] = [API_VERSION, "kubelet.config.k8s.io/v1alpha1"];

/// Upstream's writeRecordWhileMatchingLimit: past this many secrets on an
/// image, a matching pod's secret is no longer added to the record.
const REMEMBER_LIMIT: usize = 100;

/// The pod's image being pulled: its existence marks the image as
/// kubelet-pulled even if the kubelet dies before the pull ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullIntent {
    kind: String,
    api_version: String,
    pub image: String,
}

impl ImagePullIntent {
    pub fn new(image: &str) -> Self {
        ImagePullIntent {
            kind: "ImagePullIntent".into(),
            api_version: API_VERSION.into(),
            image: image.into(),
        }
    }
}

/// An image the kubelet pulled, and per image name (without tag or
/// digest) the credentials that may use it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePulledRecord {
    kind: String,
    api_version: String,
    pub last_updated_time: Time,
    pub image_ref: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credential_mapping: BTreeMap<String, ImagePullCredentials>,
}

impl ImagePulledRecord {
    /// A record of `image_ref` with no credentials: any later use must
    /// verify (upstream writes these for pulls whose credentials it does
    /// not know, such as a pull intent left by a kubelet that died).
    pub fn new(image_ref: &str, now: Time) -> Self {
        ImagePulledRecord {
            kind: "ImagePulledRecord".into(),
            api_version: API_VERSION.into(),
            last_updated_time: now,
            image_ref: image_ref.into(),
            credential_mapping: BTreeMap::new(),
        }
    }
}

/// Who may use an image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullCredentials {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_secrets: Vec<ImagePullSecret>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_service_accounts: Vec<ImagePullServiceAccount>,
    /// Pulled without credentials: every pod on the node may use it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_pods_accessible: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullSecret {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// [`Credential::hash`] of the credential the secret held.
    pub credential_hash: String,
}

impl ImagePullSecret {
    /// The pull secret a credential came from, with its hash (none for a
    /// credential from elsewhere).
    pub fn of(cred: &Credential) -> Option<Self> {
        let CredentialSource::Secret(secret) = &cred.source else {
            return None;
        };
        Some(ImagePullSecret {
            uid: secret.uid.clone(),
            namespace: secret.namespace.clone(),
            name: secret.name.clone(),
            credential_hash: cred.hash(),
        })
    }

    fn coordinates(&self) -> (&str, &str, &str) {
        (&self.namespace, &self.name, &self.uid)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullServiceAccount {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl ImagePullServiceAccount {
    /// The service account a plugin's credential was given for, if any.
    pub fn of(cred: &Credential) -> Option<Self> {
        let CredentialSource::ServiceAccount(sa) = &cred.source else {
            return None;
        };
        Some(ImagePullServiceAccount {
            uid: sa.uid.clone(),
            namespace: sa.namespace.clone(),
            name: sa.name.clone(),
        })
    }
}

impl ImagePullCredentials {
    /// What a successful pull with `cred` (None: without credentials)
    /// grants (upstream's trackedToImagePullCreds).
    pub fn pulled_with(cred: Option<&Credential>) -> Self {
        match cred.map(|c| (c, &c.source)) {
            None | Some((_, CredentialSource::Node)) => ImagePullCredentials {
                node_pods_accessible: true,
                ..Default::default()
            },
            Some((c, CredentialSource::Secret(_))) => ImagePullCredentials {
                kubernetes_secrets: ImagePullSecret::of(c).into_iter().collect(),
                ..Default::default()
            },
            Some((c, CredentialSource::ServiceAccount(_))) => ImagePullCredentials {
                kubernetes_service_accounts: ImagePullServiceAccount::of(c).into_iter().collect(),
                ..Default::default()
            },
        }
    }
}

/// The name of a record's file: `sha256-` and the hex SHA-256 of the image
/// (intents) or image reference (pulled records).
pub fn file_name(key: &str) -> String {
    format!("sha256-{}", hex::encode(Sha256::digest(key.as_bytes())))
}

/// A record's file contents, as upstream's JSON encoder ends them.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(record).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// A record file that cannot be read (upstream drops such a record).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("not a {want}: kind {kind:?}, apiVersion {version:?}")]
    Type {
        want: &'static str,
        kind: String,
        version: String,
    },
}

/// Read an intent: Ok also says whether it is in the current version.
pub fn decode_intent(bytes: &[u8]) -> Result<(ImagePullIntent, bool), RecordError> {
    let intent: ImagePullIntent = serde_json::from_slice(bytes)?;
    let current = check_type(&intent.kind, &intent.api_version, "ImagePullIntent")?;
    Ok((ImagePullIntent::new(&intent.image), current))
}

/// Read a pulled record: Ok also says whether it is in the current version.
pub fn decode_record(bytes: &[u8]) -> Result<(ImagePulledRecord, bool), RecordError> {
    let mut record: ImagePulledRecord = serde_json::from_slice(bytes)?;
    let current = check_type(&record.kind, &record.api_version, "ImagePulledRecord")?;
    record.api_version = API_VERSION.into();
    Ok((record, current))
}

fn check_type(kind: &str, version: &str, want: &'static str) -> Result<bool, RecordError> {
    if kind != want || !READABLE_VERSIONS.contains(&version) {
        return Err(RecordError::Type {
            want,
            kind: kind.to_owned(),
            version: version.to_owned(),
        });
    }
    Ok(version == API_VERSION)
}

/// `image` without its tag and digest (upstream's trimImageTagDigest).
pub fn image_without_tag(image: &str) -> Result<String, reference::ReferenceError> {
    reference::parse(image).map(|r| r.name)
}

/// imagePullCredentialsVerificationPolicy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum VerificationPolicy {
    /// Any pod may use any image on the node.
    NeverVerify,
    /// Images the kubelet did not pull (preloaded) need no verification.
    #[default]
    NeverVerifyPreloadedImages,
    /// Images of the allowlist need no verification.
    NeverVerifyAllowlistedImages {
        exact: HashSet<String>,
        prefixes: Vec<String>,
    },
    AlwaysVerify,
}

pub const POLICY_NAMES: [&str; 4] = [
    "NeverVerify",
    "NeverVerifyPreloadedImages",
    "NeverVerifyAllowlistedImages",
    "AlwaysVerify",
];

impl VerificationPolicy {
    /// The policy named `name` with `allowlist`
    /// (preloadedImagesVerificationAllowlist), with upstream's messages.
    pub fn new(name: &str, allowlist: &[String]) -> Result<Self, PolicyError> {
        let [never, preloaded, allowlisted, always] = POLICY_NAMES;
        if !allowlist.is_empty() && name != allowlisted {
            return Err(PolicyError::AllowlistWithout);
        }
        Ok(match name {
            n if n == never => VerificationPolicy::NeverVerify,
            n if n == preloaded => VerificationPolicy::NeverVerifyPreloadedImages,
            n if n == always => VerificationPolicy::AlwaysVerify,
            n if n == allowlisted => {
                let (mut exact, mut prefixes) = (HashSet::new(), Vec::new());
                for p in allowlist {
                    match allowlist_pattern(p)? {
                        (prefix, true) => prefixes.push(prefix),
                        (name, false) => {
                            exact.insert(name);
                        }
                    }
                }
                VerificationPolicy::NeverVerifyAllowlistedImages { exact, prefixes }
            }
            other => return Err(PolicyError::Unknown(other.to_owned())),
        })
    }

    /// Whether a pod's credentials must be checked before it may use
    /// `image` (upstream's RequireCredentialVerificationForImage).
    pub fn requires_verification(&self, image: &str, pulled_by_kubelet: bool) -> bool {
        match self {
            VerificationPolicy::NeverVerify => false,
            VerificationPolicy::NeverVerifyPreloadedImages => pulled_by_kubelet,
            VerificationPolicy::AlwaysVerify => true,
            VerificationPolicy::NeverVerifyAllowlistedImages { exact, prefixes } => {
                // As upstream, an unparsable name is matched as given.
                let name = image_without_tag(image).unwrap_or_else(|_| image.to_owned());
                !(exact.contains(&name) || prefixes.iter().any(|p| name.starts_with(p)))
            }
        }
    }
}

/// imagePullCredentialsVerificationPolicy and its allowlist refused, in
/// upstream's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVertificationPolicy` is not \"NeverVerifyAllowlistedImages\""
    )]
    AllowlistWithout,
    #[error(
        "option {0:?} specified for imagePullCredentialsVerificationPolicy. Valid options are \"NeverVerify\", \"NeverVerifyPreloadedImages\", \"NeverVerifyAllowlistedImages\" or \"AlwaysVerify\""
    )]
    Unknown(String),
    #[error("invalid image pattern in `preloadedImagesVerificationAllowlist`: {0}")]
    Pattern(#[from] PatternError),
}

/// An allowlist entry upstream's getAllowlistImagePattern refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("leading/trailing spaces are not allowed: {0}")]
    Spaces(String),
    #[error("the supplied pattern is too short: {0}")]
    TooShort(String),
    #[error("not a valid wildcard pattern, only patterns ending with '/*' are allowed: {0}")]
    Wildcard(String),
    #[error("at least registry hostname is required")]
    NoHost,
    #[error("failed to parse as an image name: {0}")]
    Name(#[from] reference::ReferenceError),
    #[error("neither tag nor digest is accepted in an image reference: {0}")]
    TagOrDigest(String),
}

/// An allowlist entry (upstream's getAllowlistImagePattern): an image name
/// without tag or digest, or a prefix ending in `/*`; Ok is the name or
/// the prefix (with its `/`) and whether it is a prefix.
fn allowlist_pattern(pattern: &str) -> Result<(String, bool), PatternError> {
    if pattern != pattern.trim() {
        return Err(PatternError::Spaces(pattern.to_owned()));
    }
    let wildcard = pattern.ends_with("/*");
    let trimmed = if wildcard {
        &pattern[..pattern.len() - 1]
    } else {
        pattern
    };
    if trimmed.is_empty() {
        return Err(PatternError::TooShort(pattern.to_owned()));
    }
    if trimmed.contains('*') {
        return Err(PatternError::Wildcard(pattern.to_owned()));
    }
    if wildcard {
        if trimmed.len() == 1 {
            return Err(PatternError::NoHost);
        }
        return Ok((trimmed.to_owned(), true));
    }
    let name = image_without_tag(trimmed)?;
    if name != trimmed {
        return Err(PatternError::TagOrDigest(pattern.to_owned()));
    }
    Ok((name, false))
}

/// The outcome of a check whether a pod must pull an image it finds on the
/// node; the label of upstream's `kubelet_imagemanager_image_mustpull_checks_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The policy needs no verification: use the image.
    CredentialPolicyAllowed,
    /// The pod's credentials, or none being needed, are on record: use it.
    CredentialRecordFound,
    /// Pull, with the pod's own credentials.
    MustAuthenticate,
    /// The records could not be read: pull, to be safe.
    Error,
}

impl Check {
    pub fn label(self) -> &'static str {
        match self {
            Check::CredentialPolicyAllowed => "credentialPolicyAllowed",
            Check::CredentialRecordFound => "credentialRecordFound",
            Check::MustAuthenticate => "mustAuthenticate",
            Check::Error => "error",
        }
    }

    pub fn must_pull(self) -> bool {
        matches!(self, Check::MustAuthenticate | Check::Error)
    }
}

/// The first half of upstream's MustAttemptImagePull, before the pod's
/// credentials are read: Ok is the decision, Err the credentials on record
/// that the pod's must be matched against ([`match_pod_secrets`]).
pub fn precheck<'a>(
    policy: &VerificationPolicy,
    image: &str,
    record: Option<&'a ImagePulledRecord>,
    pulled_by_kubelet: bool,
) -> Result<Check, &'a ImagePullCredentials> {
    if !policy.requires_verification(image, pulled_by_kubelet) {
        return Ok(Check::CredentialPolicyAllowed);
    }
    let Some(record) = record else {
        return Ok(Check::MustAuthenticate);
    };
    let Ok(name) = image_without_tag(image) else {
        return Ok(Check::Error);
    };
    let Some(cached) = record.credential_mapping.get(&name) else {
        return Ok(Check::MustAuthenticate);
    };
    if cached.node_pods_accessible {
        return Ok(Check::CredentialRecordFound);
    }
    if cached.kubernetes_secrets.is_empty() && cached.kubernetes_service_accounts.is_empty() {
        return Ok(Check::MustAuthenticate);
    }
    Err(cached)
}

/// The second half: whether one of the pod's pull secrets for the image is
/// on record, the same credential (by hash) or the same Secret (by
/// namespace, name and UID: a rotated secret); Some is the pod's secret to
/// add to the record, as upstream does while the record is small.
pub fn match_pod_secrets(
    cached: &ImagePullCredentials,
    pod: &[ImagePullSecret],
) -> (Check, Option<ImagePullSecret>) {
    let room = cached.kubernetes_secrets.len() < REMEMBER_LIMIT;
    for mine in pod {
        for theirs in &cached.kubernetes_secrets {
            let same_hash = !theirs.credential_hash.is_empty()
                && mine.credential_hash == theirs.credential_hash;
            let same_secret = mine.coordinates() == theirs.coordinates();
            if same_hash {
                let remember = (!same_secret && room).then(|| mine.clone());
                return (Check::CredentialRecordFound, remember);
            }
            if same_secret && room {
                return (Check::CredentialRecordFound, Some(mine.clone()));
            }
        }
    }
    (Check::MustAuthenticate, None)
}

/// Whether the pod's service account (its credential provider plugin's
/// credential) is on record for the image (upstream's check of
/// kubernetesServiceAccounts).
pub fn match_service_account(
    cached: &ImagePullCredentials,
    account: &ImagePullServiceAccount,
) -> bool {
    cached.kubernetes_service_accounts.contains(account)
}

/// `record` with `new` granted for `name` (an image without tag or digest;
/// upstream's pulledRecordMergeNewCreds); None when nothing changes.
pub fn merge(
    record: &ImagePulledRecord,
    name: &str,
    new: &ImagePullCredentials,
    now: Time,
) -> Option<ImagePulledRecord> {
    if !new.node_pods_accessible
        && new.kubernetes_secrets.is_empty()
        && new.kubernetes_service_accounts.is_empty()
    {
        return None;
    }
    let mut creds = match record.credential_mapping.get(name) {
        None => new.clone(),
        Some(old) if old.node_pods_accessible => return None,
        Some(_) if new.node_pods_accessible => ImagePullCredentials {
            node_pods_accessible: true,
            ..Default::default()
        },
        Some(old) if !new.kubernetes_secrets.is_empty() => ImagePullCredentials {
            kubernetes_secrets: merge_secrets(&old.kubernetes_secrets, &new.kubernetes_secrets)?,
            ..old.clone()
        },
        Some(old) => {
            let mut accounts = old.kubernetes_service_accounts.clone();
            let before = accounts.len();
            for a in &new.kubernetes_service_accounts {
                if !accounts.contains(a) {
                    accounts.push(a.clone());
                }
            }
            if accounts.len() == before {
                return None;
            }
            accounts.sort_by(|a, b| {
                (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid))
            });
            ImagePullCredentials {
                kubernetes_service_accounts: accounts,
                ..old.clone()
            }
        }
    };
    if creds.node_pods_accessible {
        creds.kubernetes_secrets.clear();
        creds.kubernetes_service_accounts.clear();
    }
    let mut merged = record.clone();
    merged.credential_mapping.insert(name.to_owned(), creds);
    merged.last_updated_time = now;
    Some(merged)
}

/// `old` with `new` added, one per Secret (namespace, name, UID), a new
/// hash replacing the old, sorted; None when nothing changes.
fn merge_secrets(old: &[ImagePullSecret], new: &[ImagePullSecret]) -> Option<Vec<ImagePullSecret>> {
    let mut by_secret: BTreeMap<(String, String, String), String> = old
        .iter()
        .map(|s| {
            let (ns, name, uid) = s.coordinates();
            (
                (ns.into(), name.into(), uid.into()),
                s.credential_hash.clone(),
            )
        })
        .collect();
    let mut changed = false;
    for s in new {
        let (ns, name, uid) = s.coordinates();
        let key = (ns.to_owned(), name.to_owned(), uid.to_owned());
        if by_secret.get(&key) != Some(&s.credential_hash) {
            by_secret.insert(key, s.credential_hash.clone());
            changed = true;
        }
    }
    changed.then(|| {
        by_secret
            .into_iter()
            .map(
                |((namespace, name, uid), credential_hash)| ImagePullSecret {
                    uid,
                    namespace,
                    name,
                    credential_hash,
                },
            )
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn secret(name: &str, hash: &str) -> ImagePullSecret {
        ImagePullSecret {
            uid: format!("{name}-uid"),
            namespace: "default".into(),
            name: name.into(),
            credential_hash: hash.into(),
        }
    }

    fn record_with(name: &str, creds: ImagePullCredentials) -> ImagePulledRecord {
        let mut r = ImagePulledRecord::new("sha256:ref", time("2024-10-21T12:26:40Z"));
        r.credential_mapping.insert(name.into(), creds);
        r
    }

    fn secrets(list: Vec<ImagePullSecret>) -> ImagePullCredentials {
        ImagePullCredentials {
            kubernetes_secrets: list,
            ..Default::default()
        }
    }

    /// Upstream's own test data (pkg/kubelet/images/pullmanager/testdata)
    /// reads, and writes back byte for byte.
    #[test]
    fn records_read_and_write_as_upstreams_files() {
        let beta = r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testimageref","credentialMapping":{"docker.io/testing/test":{"kubernetesSecrets":[{"uid":"testsecretuid","namespace":"default","name":"pull-secret","credentialHash":"testsecrethash"}]}}}"#;
        let (record, current) = decode_record(beta.as_bytes()).unwrap();
        assert!(current);
        assert_eq!(encode(&record), format!("{beta}\n").into_bytes());
        let anon = r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testimage-anonpull","credentialMapping":{"docker.io/testing/test":{"nodePodsAccessible":true}}}"#;
        let (record, _) = decode_record(anon.as_bytes()).unwrap();
        assert_eq!(encode(&record), format!("{anon}\n").into_bytes());
        let empty = r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testemptycredmapping"}"#;
        assert_eq!(
            encode(&ImagePulledRecord::new(
                "testemptycredmapping",
                time("2024-10-21T12:26:40Z")
            )),
            format!("{empty}\n").into_bytes()
        );
        let alpha = r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testimageref-sa","credentialMapping":{"docker.io/testing/test":{"kubernetesServiceAccounts":[{"uid":"test-sa-uid","namespace":"default","name":"test-sa"}]}}}"#;
        let (record, current) = decode_record(alpha.as_bytes()).unwrap();
        assert!(!current, "v1alpha1 is migrated");
        assert!(
            String::from_utf8(encode(&record))
                .unwrap()
                .contains(API_VERSION)
        );
        let intent = r#"{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"docker.io/testing/test:latest"}"#;
        let (read, current) = decode_intent(intent.as_bytes()).unwrap();
        assert!(current);
        assert_eq!(read, ImagePullIntent::new("docker.io/testing/test:latest"));
        assert_eq!(encode(&read), format!("{intent}\n").into_bytes());
        // Upstream's broken record, and one of another kind, are refused.
        let broken = r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testbrokenrecord":"credentialMapping":{}}"#;
        let err = decode_record(broken.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, RecordError::Json(e) if e.is_syntax()),
            "{err}"
        );
        let err = decode_record(intent.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, RecordError::Json(e) if e.to_string().starts_with("unknown field `image`")),
            "{err}"
        );
        assert_eq!(
            file_name("docker.io/testing/test:latest"),
            "sha256-aef2af226629a35d5f3ef0fdbb29fdbebf038d0acd8850590e8c48e1e283aa56",
            "the name of upstream's test intent file"
        );
    }

    #[test]
    fn policies_and_their_allowlist_as_upstreams() {
        let allow = |list: &[&str]| {
            let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            VerificationPolicy::new("NeverVerifyAllowlistedImages", &list)
        };
        let cases: &[(&str, &str)] = &[
            (
                " r.test/a",
                "leading/trailing spaces are not allowed:  r.test/a",
            ),
            ("", "the supplied pattern is too short: "),
            (
                "*",
                "not a valid wildcard pattern, only patterns ending with '/*' are allowed: *",
            ),
            ("/*", "at least registry hostname is required"),
            (
                "r.test/*/a",
                "not a valid wildcard pattern, only patterns ending with '/*' are allowed: r.test/*/a",
            ),
            (
                "r.test/a:v1",
                "neither tag nor digest is accepted in an image reference: r.test/a:v1",
            ),
            (
                "R.test/A",
                "failed to parse as an image name: invalid reference format: repository name must be lowercase",
            ),
        ];
        for (pattern, want) in cases {
            let err = allow(&[pattern]).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("invalid image pattern in `preloadedImagesVerificationAllowlist`: {want}"),
                "{pattern}"
            );
        }
        let policy = allow(&["r.test/exact", "mirror.test/team/*"]).unwrap();
        for (image, verify) in [
            ("r.test/exact:v1", false),
            ("r.test/exact/sub:v1", true),
            (
                "mirror.test/team/app@sha256:0123456789abcdef0123456789abcdef",
                false,
            ),
            ("mirror.test/other/app", true),
        ] {
            assert_eq!(
                policy.requires_verification(image, false),
                verify,
                "{image}"
            );
        }
        let preloaded = VerificationPolicy::new("NeverVerifyPreloadedImages", &[]).unwrap();
        assert!(!preloaded.requires_verification("a", false));
        assert!(preloaded.requires_verification("a", true));
        assert!(
            !VerificationPolicy::new("NeverVerify", &[])
                .unwrap()
                .requires_verification("a", true)
        );
        assert!(
            VerificationPolicy::new("AlwaysVerify", &[])
                .unwrap()
                .requires_verification("a", false)
        );
        assert!(
            VerificationPolicy::new("AlwaysVerify", &["r.test/a".into()]).unwrap_err()
                == PolicyError::AllowlistWithout
        );
        assert_eq!(
            VerificationPolicy::new("Sometimes", &[])
                .unwrap_err()
                .to_string(),
            "option \"Sometimes\" specified for imagePullCredentialsVerificationPolicy. Valid options are \"NeverVerify\", \"NeverVerifyPreloadedImages\", \"NeverVerifyAllowlistedImages\" or \"AlwaysVerify\""
        );
    }

    /// Upstream's MustAttemptImagePull cases, as the two halves decide them.
    #[test]
    fn whether_a_pod_must_pull_an_image_on_the_node() {
        let policy = VerificationPolicy::NeverVerifyPreloadedImages;
        let image = "docker.io/testing/test:latest";
        let name = "docker.io/testing/test";
        let mine = secret("pull-secret", "hash-a");
        let check = |record: Option<&ImagePulledRecord>, pulled: bool, pod: &[ImagePullSecret]| {
            match precheck(&policy, image, record, pulled) {
                Ok(c) => (c, None),
                Err(cached) => match_pod_secrets(cached, pod),
            }
        };
        use Check::*;
        assert_eq!(
            check(None, false, &[]),
            (CredentialPolicyAllowed, None),
            "preloaded"
        );
        assert_eq!(
            check(None, true, &[]),
            (MustAuthenticate, None),
            "an intent, no record"
        );
        let unknown = ImagePulledRecord::new("sha256:ref", time("2024-10-21T12:26:40Z"));
        assert_eq!(
            check(Some(&unknown), true, std::slice::from_ref(&mine)),
            (MustAuthenticate, None)
        );
        let anon = record_with(name, ImagePullCredentials::pulled_with(None));
        assert_eq!(check(Some(&anon), true, &[]), (CredentialRecordFound, None));
        let other_image = record_with("docker.io/testing/other", secrets(vec![mine.clone()]));
        assert_eq!(
            check(Some(&other_image), true, std::slice::from_ref(&mine)),
            (MustAuthenticate, None)
        );
        let by_secret = record_with(name, secrets(vec![mine.clone()]));
        assert_eq!(
            check(Some(&by_secret), true, std::slice::from_ref(&mine)),
            (CredentialRecordFound, None)
        );
        assert_eq!(check(Some(&by_secret), true, &[]), (MustAuthenticate, None));
        let stranger = secret("another", "hash-b");
        assert_eq!(
            check(Some(&by_secret), true, &[stranger]),
            (MustAuthenticate, None)
        );
        // The same credential in another Secret, and the same Secret
        // rotated: both may use it, and are added to the record.
        let copy = secret("copy", "hash-a");
        assert_eq!(
            check(Some(&by_secret), true, std::slice::from_ref(&copy)),
            (CredentialRecordFound, Some(copy))
        );
        let rotated = secret("pull-secret", "hash-c");
        assert_eq!(
            check(Some(&by_secret), true, std::slice::from_ref(&rotated)),
            (CredentialRecordFound, Some(rotated))
        );
        // An empty hash on record matches no credential by hash.
        let no_hash = record_with(name, secrets(vec![secret("pull-secret", "")]));
        assert_eq!(
            check(Some(&no_hash), true, &[secret("x", "")]),
            (MustAuthenticate, None)
        );
        assert!(check(Some(&by_secret), true, &[]).0.must_pull());
    }

    #[test]
    fn credentials_merge_into_records_as_upstreams() {
        let now = time("2025-01-01T00:00:00Z");
        let name = "r.test/a";
        let a = secret("a", "ha");
        let empty = ImagePulledRecord::new("sha256:ref", time("2024-10-21T12:26:40Z"));
        assert_eq!(
            merge(&empty, name, &ImagePullCredentials::default(), now.clone()),
            None
        );
        let first = merge(&empty, name, &secrets(vec![a.clone()]), now.clone()).unwrap();
        assert_eq!(first.credential_mapping[name], secrets(vec![a.clone()]));
        assert_eq!(first.last_updated_time, now);
        assert_eq!(
            merge(&first, name, &secrets(vec![a.clone()]), now.clone()),
            None,
            "no change"
        );
        let b = secret("0-b", "hb");
        let both = merge(&first, name, &secrets(vec![b.clone()]), now.clone()).unwrap();
        assert_eq!(both.credential_mapping[name], secrets(vec![b, a]), "sorted");
        let a2 = secret("a", "ha2");
        let rotated = merge(&first, name, &secrets(vec![a2.clone()]), now.clone()).unwrap();
        assert_eq!(
            rotated.credential_mapping[name],
            secrets(vec![a2]),
            "the new hash wins"
        );
        let anon = ImagePullCredentials::pulled_with(None);
        let open = merge(&both, name, &anon, now.clone()).unwrap();
        assert_eq!(
            open.credential_mapping[name], anon,
            "anyone's: the secrets go"
        );
        assert_eq!(
            merge(&open, name, &secrets(vec![secret("c", "hc")]), now),
            None
        );
    }
}
