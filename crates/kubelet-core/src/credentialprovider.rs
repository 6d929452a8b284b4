//! Image credential provider plugins' decisions (upstream's
//! pkg/credentialprovider/plugin): the `CredentialProviderConfig` file (or
//! directory) with upstream's strict decoding and validation messages,
//! which provider an image asks, the exec protocol's request and response
//! (`credentialprovider.kubelet.k8s.io/v1`), and the keys and lifetimes of
//! the cached answers. Running the plugins is `kubelet::credentialprovider`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::credentials::urls_match;
use crate::duration::{format_go_duration, parse_go_duration};
use crate::manifest::is_qualified_name;

/// The config file's group (its versions are v1alpha1, v1beta1 and v1).
const CONFIG_GROUP: &str = "kubelet.config.k8s.io";
const CONFIG_VERSIONS: &[&str] = &["v1alpha1", "v1beta1", "v1"];
const CONFIG_KIND: &str = "CredentialProviderConfig";
/// The exec protocol's versions a provider may speak.
pub const API_V1: &str = "credentialprovider.kubelet.k8s.io/v1";
const API_VERSIONS: &[&str] = &[
    API_V1,
    "credentialprovider.kubelet.k8s.io/v1alpha1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
];
/// The cache key of a `Global` answer.
pub const GLOBAL_CACHE_KEY: &str = "<global>";
/// How long a plugin may run.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// How often expired answers are dropped (on a lookup).
pub const CACHE_PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// `env` of a provider.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExecEnvVar {
    pub name: String,
    pub value: String,
}

/// How a service-account-token plugin's answers are cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum CacheType {
    /// Per token (so per pod).
    Token,
    /// Per service account (and its annotations).
    ServiceAccount,
}

/// `tokenAttributes`: the pod's service account token is passed to the
/// plugin (KEP-4412).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenAttributes {
    #[serde(default)]
    pub service_account_token_audience: String,
    #[serde(default)]
    pub cache_type: Option<String>,
    #[serde(default)]
    pub require_service_account: Option<bool>,
    #[serde(default)]
    pub required_service_account_annotation_keys: Vec<String>,
    #[serde(default)]
    pub optional_service_account_annotation_keys: Vec<String>,
}

impl TokenAttributes {
    /// The validated cache type (Token when not yet validated).
    pub fn cache_type(&self) -> CacheType {
        match self.cache_type.as_deref() {
            Some("ServiceAccount") => CacheType::ServiceAccount,
            _ => CacheType::Token,
        }
    }
}

/// One provider of the config.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialProvider {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub match_images: Vec<String>,
    /// A Go duration, checked as such when decoded; a negative one is
    /// refused by [`validate`].
    #[serde(default, deserialize_with = "go_duration")]
    pub default_cache_duration: Option<String>,
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<ExecEnvVar>,
    #[serde(default)]
    pub token_attributes: Option<TokenAttributes>,
}

/// A Go duration string (`-` allowed, as Go's).
fn go_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    if let Some(s) = &s {
        parse_go_duration(s.strip_prefix('-').unwrap_or(s)).map_err(serde::de::Error::custom)?;
    }
    Ok(s)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigBody {
    #[serde(default)]
    providers: Vec<CredentialProvider>,
    #[serde(rename = "kind")]
    _kind: serde::de::IgnoredAny,
    #[serde(rename = "apiVersion")]
    _api_version: serde::de::IgnoredAny,
}

/// Why the config cannot be used (start-up stops: upstream's kubelet exits
/// with "Failed to register CRI auth plugins").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("error decoding config {path:?}: {message}")]
    Decode { path: String, message: String },
    #[error("duplicate provider name {0:?} found in configuration file(s)")]
    Duplicate(String),
    #[error("failed to validate credential provider config: {0}")]
    Invalid(String),
}

/// One file's providers: YAML or JSON, `kind: CredentialProviderConfig`
/// of `kubelet.config.k8s.io/{v1alpha1,v1beta1,v1}`, strict (an unknown
/// field is refused; `tokenAttributes` is v1's only).
pub fn decode_config(path: &str, text: &str) -> Result<Vec<CredentialProvider>, ConfigError> {
    let fail = |message: String| ConfigError::Decode {
        path: path.to_owned(),
        message,
    };
    let doc: Value = serde_saphyr::from_str(text).map_err(|e| fail(e.to_string()))?;
    let kind = doc["kind"].as_str().unwrap_or_default();
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if group != CONFIG_GROUP || !CONFIG_VERSIONS.contains(&version) {
        return Err(fail(format!(
            "failed to decode CredentialProviderConfig, unexpected Group: {group}"
        )));
    }
    if kind != CONFIG_KIND {
        return Err(fail(format!(
            "no kind {kind:?} is registered for version {api_version:?}"
        )));
    }
    let body: ConfigBody = serde_path_to_error::deserialize(&doc).map_err(|e| {
        fail(format!(
            "strict decoding error: {} at {}",
            e.inner(),
            e.path()
        ))
    })?;
    if version != "v1"
        && let Some(i) = body
            .providers
            .iter()
            .position(|p| p.token_attributes.is_some())
    {
        return Err(fail(format!(
            "strict decoding error: unknown field \"providers[{i}].tokenAttributes\""
        )));
    }
    Ok(body.providers)
}

/// The providers of every file, in order, with no name twice.
pub fn merge_providers(
    files: Vec<Vec<CredentialProvider>>,
) -> Result<Vec<CredentialProvider>, ConfigError> {
    let mut all: Vec<CredentialProvider> = Vec::new();
    for provider in files.into_iter().flatten() {
        if all.iter().any(|p| p.name == provider.name) {
            return Err(ConfigError::Duplicate(provider.name));
        }
        all.push(provider);
    }
    Ok(all)
}

/// The config's hash (the `kubelet_credential_provider_config_info`
/// label): SHA-256 over each file's length (8 bytes, big-endian) and
/// content, as upstream.
pub fn config_hash(files: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for f in files {
        hasher.update((f.len() as u64).to_be_bytes());
        hasher.update(f);
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// Upstream's validateCredentialProviderConfig, its field errors (paths
/// not indexed, as upstream's) aggregated as Go prints them.
pub fn validate(providers: &[CredentialProvider], token_gate: bool) -> Result<(), ConfigError> {
    let mut errs: Vec<String> = Vec::new();
    if providers.is_empty() {
        errs.push("providers: Required value: at least 1 item in plugins is required".into());
    }
    let mut names: Vec<&str> = Vec::new();
    for p in providers {
        let name = p.name.as_str();
        let bad_name = |why: &str| format!("providers.name: Invalid value: {name:?}: {why}");
        if name.contains('/') {
            errs.push(bad_name("provider name cannot contain '/'"));
        }
        if name.contains(' ') {
            errs.push(bad_name("provider name cannot contain spaces"));
        }
        if name == "." {
            errs.push(bad_name("provider name cannot be '.'"));
        }
        if name == ".." {
            errs.push(bad_name("provider name cannot be '..'"));
        }
        if names.contains(&name) {
            errs.push(format!("providers.name: Duplicate value: {name:?}"));
        }
        names.push(name);
        if p.api_version.is_empty() {
            errs.push("providers.apiVersion: Required value".into());
        } else if !API_VERSIONS.contains(&p.api_version.as_str()) {
            errs.push(format!(
                "providers.apiVersion: Unsupported value: {:?}: supported values: \"{}\", \"{}\", \"{}\"",
                p.api_version, API_VERSIONS[0], API_VERSIONS[1], API_VERSIONS[2]
            ));
        }
        if p.match_images.is_empty() {
            errs.push(
                "providers.matchImages: Required value: at least 1 item in matchImages is required"
                    .into(),
            );
        }
        for m in &p.match_images {
            if let Err(why) = check_match_image(m) {
                errs.push(format!(
                    "providers.matchImages: Invalid value: {m:?}: match image is invalid: {why}"
                ));
            }
        }
        match p.default_cache_duration.as_deref() {
            None => errs.push("providers.defaultCacheDuration: Required value".into()),
            Some(d) => {
                if let Some(abs) = d.strip_prefix('-').and_then(|a| parse_go_duration(a).ok())
                    && !abs.is_zero()
                {
                    errs.push(format!(
                        "providers.defaultCacheDuration: Invalid value: \"-{}\": must be greater than or equal to 0",
                        format_go_duration(abs)
                    ));
                }
            }
        }
        if let Some(t) = &p.token_attributes {
            validate_token_attributes(t, &p.api_version, token_gate, &mut errs);
        }
    }
    match errs.len() {
        0 => Ok(()),
        1 => Err(ConfigError::Invalid(errs.remove(0))),
        _ => Err(ConfigError::Invalid(format!("[{}]", errs.join(", ")))),
    }
}

fn validate_token_attributes(
    t: &TokenAttributes,
    api_version: &str,
    token_gate: bool,
    errs: &mut Vec<String>,
) {
    const PATH: &str = "providers.tokenAttributes";
    if !token_gate {
        errs.push(format!(
            "{PATH}: Forbidden: tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"
        ));
        return;
    }
    if t.service_account_token_audience.is_empty() {
        errs.push(format!(
            "{PATH}.serviceAccountTokenAudience: Required value"
        ));
    }
    if t.require_service_account.is_none() {
        errs.push(format!("{PATH}.requireServiceAccount: Required value"));
    }
    if api_version != API_V1 {
        errs.push(format!(
            "{PATH}: Forbidden: tokenAttributes is only supported for {API_V1} API version"
        ));
    }
    if t.require_service_account == Some(false)
        && !t.required_service_account_annotation_keys.is_empty()
    {
        errs.push(format!(
            "{PATH}.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"
        ));
    }
    for (field, keys) in [
        (
            "requiredServiceAccountAnnotationKeys",
            &t.required_service_account_annotation_keys,
        ),
        (
            "optionalServiceAccountAnnotationKeys",
            &t.optional_service_account_annotation_keys,
        ),
    ] {
        let mut seen: Vec<&str> = Vec::new();
        for k in keys {
            for why in is_qualified_name(&k.to_lowercase()) {
                errs.push(format!("{PATH}.{field}: Invalid value: {k:?}: {why}"));
            }
            if seen.contains(&k.as_str()) {
                errs.push(format!("{PATH}.{field}: Duplicate value: {k:?}"));
            }
            seen.push(k);
        }
    }
    let both: Vec<&String> = t
        .required_service_account_annotation_keys
        .iter()
        .filter(|k| t.optional_service_account_annotation_keys.contains(k))
        .collect();
    if !both.is_empty() {
        errs.push(format!(
            "{PATH}: Invalid value: {both:?}: annotation keys cannot be both required and optional"
        ));
    }
    match t.cache_type.as_deref() {
        None | Some("") => errs.push(format!(
            "{PATH}.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token"
        )),
        Some("ServiceAccount" | "Token") => {}
        Some(other) => errs.push(format!(
            "{PATH}.cacheType: Unsupported value: {other:?}: supported values: \"ServiceAccount\", \"Token\""
        )),
    }
}

/// Upstream parses a match image as the URL `https://<it>`: what makes it
/// invalid there (an escape that is not one, a space, a bad port).
fn check_match_image(m: &str) -> Result<(), String> {
    let url = format!("https://{m}");
    if let Some(i) = m.find('%') {
        let esc = m.get(i..i + 3).unwrap_or(&m[i..]);
        if esc.len() < 3 || !esc[1..].bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("parse {url:?}: invalid URL escape {esc:?}"));
        }
    }
    if m.contains([' ', '\t', '\n']) {
        return Err(format!(
            "parse {url:?}: invalid character \" \" in host name"
        ));
    }
    let host = m.split('/').next().unwrap_or_default();
    if let Some((_, port)) = host.rsplit_once(':')
        && !port.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!(
            "parse {url:?}: invalid port \":{port}\" after host"
        ));
    }
    Ok(())
}

impl CredentialProvider {
    /// Whether this provider is asked for `image` (a repository without
    /// tag or digest): one of its matchImages matches it.
    pub fn matches(&self, image: &str) -> bool {
        self.match_images.iter().any(|m| urls_match(m, image))
    }

    /// defaultCacheDuration (validated: not negative).
    pub fn default_cache_duration(&self) -> Duration {
        self.default_cache_duration
            .as_deref()
            .filter(|d| !d.starts_with('-'))
            .and_then(|d| parse_go_duration(d).ok())
            .unwrap_or_default()
    }
}

/// The request written on the plugin's stdin.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    kind: &'static str,
    api_version: &'a str,
    image: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    service_account_token: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    service_account_annotations: &'a BTreeMap<String, String>,
}

/// The request for `image` in `api_version`, as upstream encodes it (one
/// line of JSON).
pub fn request_json(
    api_version: &str,
    image: &str,
    token: &str,
    annotations: &BTreeMap<String, String>,
) -> String {
    let mut line = serde_json::to_string(&Request {
        kind: "CredentialProviderRequest",
        api_version,
        image,
        service_account_token: token,
        service_account_annotations: annotations,
    })
    .unwrap_or_default();
    line.push('\n');
    line
}

/// What a response's credentials are cached under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum CacheKeyType {
    Image,
    Registry,
    Global,
}

/// A registry's credentials in a response.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    pub username: String,
    pub password: String,
}

/// A plugin's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub cache_key_type: CacheKeyType,
    pub cache_duration: Option<Duration>,
    pub auth: BTreeMap<String, AuthConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResponseBody {
    kind: String,
    api_version: String,
    cache_key_type: String,
    #[serde(default)]
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, AuthConfig>,
}

/// Why a plugin's answer is not used, in upstream's words (a decoding
/// error never shows the answer: it may hold credentials).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("error reading GVK from response: {0}")]
    Gvk(String),
    #[error(
        "apiVersion from credential plugin response did not match expected apiVersion:{expected}, actual apiVersion:{actual}"
    )]
    ApiVersion { expected: String, actual: String },
    #[error("error decoding credential provider plugin response from stdout")]
    Decode,
    #[error("credential provider plugin did not return a valid cacheKeyType: {0}")]
    CacheKeyType(String),
    #[error(
        "credential provider plugin returned the service account token as the password which is not allowed when service account cache type is not set to 'Token'"
    )]
    TokenEchoed,
}

/// Decode a plugin's stdout as upstream: its apiVersion must be the
/// provider's, its kind CredentialProviderResponse, nothing unknown in it.
pub fn decode_response(api_version: &str, stdout: &[u8]) -> Result<Response, ResponseError> {
    let head: Value =
        serde_json::from_slice(stdout).map_err(|e| ResponseError::Gvk(e.to_string()))?;
    let actual = head["apiVersion"].as_str().unwrap_or_default();
    if actual != api_version {
        return Err(ResponseError::ApiVersion {
            expected: api_version.to_owned(),
            actual: actual.to_owned(),
        });
    }
    let body: ResponseBody = serde_json::from_value(head).map_err(|_| ResponseError::Decode)?;
    if body.kind != "CredentialProviderResponse" || body.api_version != api_version {
        return Err(ResponseError::Decode);
    }
    let cache_key_type = match body.cache_key_type.as_str() {
        "Image" => CacheKeyType::Image,
        "Registry" => CacheKeyType::Registry,
        "Global" => CacheKeyType::Global,
        other => return Err(ResponseError::CacheKeyType(other.to_owned())),
    };
    let cache_duration = body
        .cache_duration
        .map(|d| parse_go_duration(&d).map_err(|_| ResponseError::Decode))
        .transpose()?;
    Ok(Response {
        cache_key_type,
        cache_duration,
        auth: body.auth,
    })
}

/// A service-account-token plugin must not be handed back the token as a
/// password unless its answers are cached per token.
pub fn check_token_echo(
    response: &Response,
    token: &str,
    cache_type: Option<CacheType>,
) -> Result<(), ResponseError> {
    let echoed = !token.is_empty() && response.auth.values().any(|a| a.password == token);
    if echoed && cache_type != Some(CacheType::Token) {
        return Err(ResponseError::TokenEchoed);
    }
    Ok(())
}

/// The registry part of an image (before its first `/`, port included).
pub fn registry(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

/// The keys an answer for `image` may be cached under, looked up in this
/// order (each joined with the service account key).
pub fn lookup_keys(image: &str) -> [&str; 3] {
    [image, registry(image), GLOBAL_CACHE_KEY]
}

/// The key an answer is cached under.
pub fn cache_key(kind: CacheKeyType, image: &str) -> &str {
    match kind {
        CacheKeyType::Image => image,
        CacheKeyType::Registry => registry(image),
        CacheKeyType::Global => GLOBAL_CACHE_KEY,
    }
}

/// How long an answer is kept: its own cacheDuration, else the provider's
/// default; none (not cached) when that is 0.
pub fn cache_ttl(response: &Response, default: Duration) -> Option<Duration> {
    Some(response.cache_duration.unwrap_or(default)).filter(|d| !d.is_zero())
}

/// The part of a cache key that names the service account (its namespace,
/// name, UID and the annotations given to the plugin, and with the Token
/// cache type the token's hash); empty without one.
pub fn service_account_key(
    account: Option<(&str, &str, &str)>,
    annotations: &BTreeMap<String, String>,
    token: Option<&str>,
) -> String {
    let Some((namespace, name, uid)) = account else {
        return String::new();
    };
    let mut key = serde_json::json!([namespace, name, uid, annotations]).to_string();
    if let Some(token) = token {
        key.push_str("|token|sha256:");
        key.push_str(&hex::encode(Sha256::digest(token.as_bytes())));
    }
    key
}

#[cfg(test)]
#[path = "credentialprovider_tests.rs"]
mod tests;
