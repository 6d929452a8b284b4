//! Image credential provider plugins (upstream's
//! pkg/credentialprovider/plugin): `--image-credential-provider-config`
//! names providers, executables in `--image-credential-provider-bin-dir`;
//! for an image one of them matches, the kubelet runs it (one minute at
//! most) with a `CredentialProviderRequest` on stdin and reads the
//! registries' credentials from its `CredentialProviderResponse`, cached
//! as the answer says. With `tokenAttributes` the plugin also gets the
//! pod's service account token (bound to the pod, for the configured
//! audience) and annotations. A plugin that fails gives no credentials;
//! the pull goes on with the others (pod pull secrets first, as upstream).
//! The decisions are `kubelet_core::credentialprovider`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_api::ApiClient;
use kubelet_api::objects::get_service_account;
use kubelet_core::config::KubeletConfiguration;
use kubelet_core::credentialprovider::{
    AuthConfig, CACHE_PURGE_INTERVAL, CacheType, ConfigError, CredentialProvider, EXEC_TIMEOUT,
    ResponseError, cache_key, cache_ttl, check_token_echo, config_hash, decode_config,
    decode_response, lookup_keys, merge_providers, request_json, service_account_key, validate,
};
use kubelet_core::credentials::{
    Credential, CredentialSource, Keyring, ObjectCoordinates, repository,
};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::types::PodUid;
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::volumes::token::{TokenManager, TokenSpec};

/// Why the plugins cannot be registered: start-up stops, as upstream's
/// ("Failed to register CRI auth plugins").
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("plugin binary directory {0} did not exist")]
    NoBinDir(String),
    #[error("error inspecting binary directory {path}: {source}")]
    BinDir {
        path: String,
        source: std::io::Error,
    },
    #[error("credential provider config path is empty")]
    NoConfig,
    #[error("unable to access path {path:?}: {source}")]
    Access {
        path: String,
        source: std::io::Error,
    },
    #[error("no configuration files found in directory {0:?}")]
    EmptyDir(String),
    #[error("unable to read file {path:?}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("plugin binary executable {0} did not exist")]
    NoBinary(String),
    #[error("error inspecting binary executable {0}: not an executable file")]
    NotExecutable(String),
}

/// Why one plugin gave nothing (logged; the pull goes on without it).
#[derive(Debug, thiserror::Error)]
pub enum ProvideError {
    #[error("error execing credential provider plugin {plugin} for image {image}: {message}")]
    Exec {
        plugin: String,
        image: String,
        message: String,
    },
    #[error(transparent)]
    Response(#[from] ResponseError),
    #[error("failed to get service account: {0}")]
    ServiceAccount(#[source] kubelet_api::ApiError),
    #[error("failed to get service account token: {0}")]
    Token(#[source] crate::volumes::token::TokenError),
}

/// A cached answer: its registries' credentials, until when.
struct Cached {
    auth: Vec<(String, AuthConfig)>,
    expires: Instant,
}

struct Plugin {
    config: CredentialProvider,
    path: PathBuf,
    cache: Mutex<HashMap<String, Cached>>,
    last_purge: Mutex<Instant>,
    /// One exec per request key at a time: the others wait, then read the
    /// cache (upstream's singleflight).
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// One request to a plugin: the image, the pod's token and annotations
/// (service-account-token plugins), and the service account's part of the
/// cache key.
#[derive(Clone, Copy)]
struct Ask<'a> {
    image: &'a str,
    token: &'a str,
    sa_key: &'a str,
    annotations: &'a BTreeMap<String, String>,
    cache_type: Option<CacheType>,
}

/// The pod an image is pulled for.
#[derive(Clone, Debug)]
pub struct PodIdentity {
    pub namespace: String,
    pub name: String,
    pub uid: PodUid,
    pub service_account: Option<String>,
}

impl PodIdentity {
    pub fn of(pod: &Pod) -> PodIdentity {
        PodIdentity {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: PodUid::of(pod),
            service_account: pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone()),
        }
    }
}

/// The plugins as an image pull uses them: with the API server for
/// service-account-token plugins, when there is one.
#[derive(Clone, Debug)]
pub struct PluginCredentials {
    pub providers: Arc<CredentialProviders>,
    pub accounts: Option<ServiceAccounts>,
}

impl PluginCredentials {
    /// The plugins' credentials for pulling `image` for `pod`, in the order
    /// upstream's keyring tries them.
    pub async fn lookup(&self, image: &str, pod: &Pod) -> Vec<Credential> {
        let repository = repository(image);
        let found = self
            .providers
            .credentials(&repository, &PodIdentity::of(pod), self.accounts.as_ref())
            .await;
        Keyring::from_entries(found).lookup(image)
    }
}

/// What service-account-token plugins need: the API server (the service
/// account's UID and annotations) and the token manager.
#[derive(Clone)]
pub struct ServiceAccounts {
    pub api: ApiClient,
    pub tokens: TokenManager,
}

impl std::fmt::Debug for ServiceAccounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceAccounts")
    }
}

/// The registered plugins.
pub struct CredentialProviders {
    plugins: Vec<Plugin>,
    metrics: KubeletMetrics,
}

impl std::fmt::Debug for CredentialProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.plugins.iter().map(|p| &p.config.name))
            .finish()
    }
}

/// The config files of `path`: the file, or a directory's `.json`,
/// `.yaml` and `.yml` files (not in subdirectories) in lexical order.
fn config_files(path: &Path) -> Result<Vec<(String, Vec<u8>)>, RegisterError> {
    let shown = path.display().to_string();
    if shown.is_empty() {
        return Err(RegisterError::NoConfig);
    }
    let meta = std::fs::metadata(path).map_err(|source| RegisterError::Access {
        path: shown.clone(),
        source,
    })?;
    let files: Vec<PathBuf> = if meta.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|source| RegisterError::Access {
            path: shown.clone(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("json" | "yaml" | "yml")
                )
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(RegisterError::EmptyDir(shown));
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    files
        .into_iter()
        .map(|f| {
            let shown = f.display().to_string();
            std::fs::read(&f)
                .map(|b| (shown.clone(), b))
                .map_err(|source| RegisterError::Read {
                    path: shown,
                    source,
                })
        })
        .collect()
}

impl CredentialProviders {
    /// Read and check the config and the plugins' executables, as
    /// upstream's RegisterCredentialProviderPlugins.
    pub fn register(
        config: &Path,
        bin_dir: &Path,
        cfg: &KubeletConfiguration,
        metrics: KubeletMetrics,
    ) -> Result<CredentialProviders, RegisterError> {
        let dir = bin_dir.display().to_string();
        match std::fs::metadata(bin_dir) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RegisterError::NoBinDir(dir));
            }
            Err(source) => return Err(RegisterError::BinDir { path: dir, source }),
        }
        let files = config_files(config)?;
        let decoded = files
            .iter()
            .map(|(path, bytes)| decode_config(path, &String::from_utf8_lossy(bytes)))
            .collect::<Result<Vec<_>, _>>()?;
        let providers = merge_providers(decoded)?;
        validate(
            &providers,
            cfg.feature_enabled("KubeletServiceAccountTokenForCredentialProviders"),
        )?;
        let hash = config_hash(&files.iter().map(|(_, b)| b.as_slice()).collect::<Vec<_>>());
        metrics
            .credential_provider_config_info
            .set_all([(vec![hash.as_str()], 1.0)]);
        let plugins = providers
            .into_iter()
            .map(|config| {
                let path = bin_dir.join(&config.name);
                let meta = std::fs::metadata(&path)
                    .map_err(|_| RegisterError::NoBinary(path.display().to_string()))?;
                use std::os::unix::fs::PermissionsExt as _;
                if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
                    return Err(RegisterError::NotExecutable(path.display().to_string()));
                }
                Ok(Plugin {
                    config,
                    path,
                    cache: Mutex::default(),
                    last_purge: Mutex::new(Instant::now()),
                    inflight: Mutex::default(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        tracing::info!(
            providers = ?plugins.iter().map(|p| p.config.name.as_str()).collect::<Vec<_>>(),
            "registered credential provider plugins"
        );
        Ok(CredentialProviders { plugins, metrics })
    }

    /// Every matching plugin's credentials for `image` (a repository,
    /// without tag or digest), in config order, each with the registry key
    /// the plugin gave it under; `accounts` (cluster mode) for
    /// service-account-token plugins.
    pub async fn credentials(
        &self,
        image: &str,
        pod: &PodIdentity,
        accounts: Option<&ServiceAccounts>,
    ) -> Vec<(String, Credential)> {
        let mut out = Vec::new();
        for plugin in self.plugins.iter().filter(|p| p.config.matches(image)) {
            match self.provide(plugin, image, pod, accounts).await {
                Ok(Some((auth, source))) => {
                    out.extend(auth.into_iter().map(|(location, a)| {
                        let cred = Credential {
                            username: a.username,
                            password: a.password,
                            email: String::new(),
                            source: source.clone(),
                        };
                        (location, cred)
                    }));
                }
                Ok(None) => {}
                Err(e) => tracing::error!(
                    plugin = %plugin.config.name, %image, error = %e,
                    "Failed to provide credentials for image"
                ),
            }
        }
        out
    }

    /// One plugin's answer for `image` (none: skipped for this pod), from
    /// its cache or a run.
    async fn provide(
        &self,
        plugin: &Plugin,
        image: &str,
        pod: &PodIdentity,
        accounts: Option<&ServiceAccounts>,
    ) -> Result<Option<(Vec<(String, AuthConfig)>, CredentialSource)>, ProvideError> {
        let token_attrs = plugin
            .config
            .token_attributes
            .as_ref()
            .filter(|t| !t.service_account_token_audience.is_empty());
        let mut token = String::new();
        let mut annotations = BTreeMap::new();
        let mut source = CredentialSource::Node;
        let mut account = None;
        if let Some(attrs) = token_attrs {
            let Some(sa_name) = pod.service_account.as_deref().filter(|s| !s.is_empty()) else {
                if attrs.require_service_account == Some(true) {
                    tracing::debug!(plugin = %plugin.config.name, "Service account name is empty");
                    return Ok(None);
                }
                let ask = Ask {
                    image,
                    token: "",
                    sa_key: "",
                    annotations: &annotations,
                    cache_type: None,
                };
                return self.cached_or_run(plugin, &ask, source).await;
            };
            let Some(accounts) = accounts else {
                tracing::debug!("cannot get ServiceAccounts when kubelet is in standalone mode");
                return Ok(None);
            };
            let sa = get_service_account(&accounts.api, &pod.namespace, sa_name)
                .await
                .map_err(ProvideError::ServiceAccount)?;
            let sa_annotations = sa.metadata.annotations.unwrap_or_default();
            for key in &attrs.required_service_account_annotation_keys {
                match sa_annotations.get(key) {
                    Some(v) => {
                        annotations.insert(key.clone(), v.clone());
                    }
                    None => {
                        tracing::debug!(annotation = %key, "Failed to get service account data: required annotation not found");
                        return Ok(None);
                    }
                }
            }
            for key in &attrs.optional_service_account_annotation_keys {
                if let Some(v) = sa_annotations.get(key) {
                    annotations.insert(key.clone(), v.clone());
                }
            }
            let sa_uid = sa.metadata.uid.unwrap_or_default();
            token = accounts
                .tokens
                .get(&TokenSpec {
                    namespace: pod.namespace.clone(),
                    service_account: sa_name.to_owned(),
                    audience: Some(attrs.service_account_token_audience.clone()),
                    // The API server's default lifetime, as upstream
                    // leaves it unset.
                    expiration_seconds: 3600,
                    pod_name: pod.name.clone(),
                    pod_uid: pod.uid.clone(),
                })
                .await
                .map_err(ProvideError::Token)?;
            let coordinates = ObjectCoordinates {
                uid: sa_uid,
                namespace: pod.namespace.clone(),
                name: sa_name.to_owned(),
            };
            account = Some(coordinates.clone());
            source = CredentialSource::ServiceAccount(coordinates);
        }
        let sa_key = service_account_key(
            account
                .as_ref()
                .map(|a| (a.namespace.as_str(), a.name.as_str(), a.uid.as_str())),
            &annotations,
            token_attrs
                .filter(|t| t.cache_type() == CacheType::Token)
                .map(|_| token.as_str()),
        );
        let ask = Ask {
            image,
            token: &token,
            sa_key: &sa_key,
            annotations: &annotations,
            cache_type: token_attrs.map(|t| t.cache_type()),
        };
        self.cached_or_run(plugin, &ask, source).await
    }

    async fn cached_or_run(
        &self,
        plugin: &Plugin,
        ask: &Ask<'_>,
        source: CredentialSource,
    ) -> Result<Option<(Vec<(String, AuthConfig)>, CredentialSource)>, ProvideError> {
        if let Some(auth) = plugin.cached(ask.image, ask.sa_key) {
            return Ok(Some((auth, source)));
        }
        let flight_key = format!("{}\u{0}{}", ask.image, ask.sa_key);
        let gate = plugin
            .inflight
            .lock()
            .entry(flight_key.clone())
            .or_default()
            .clone();
        let answer = {
            let _one = gate.lock().await;
            match plugin.cached(ask.image, ask.sa_key) {
                Some(auth) => Ok(auth),
                None => self.run(plugin, ask).await,
            }
        };
        {
            let mut inflight = plugin.inflight.lock();
            if Arc::strong_count(&gate) <= 2 {
                inflight.remove(&flight_key);
            }
        }
        answer.map(|auth| Some((auth, source)))
    }

    /// Run the plugin, cache its answer as it says.
    async fn run(
        &self,
        plugin: &Plugin,
        ask: &Ask<'_>,
    ) -> Result<Vec<(String, AuthConfig)>, ProvideError> {
        let Ask {
            image,
            token,
            sa_key,
            annotations,
            cache_type,
        } = *ask;
        let name = &plugin.config.name;
        let api_version = &plugin.config.api_version;
        let request = request_json(api_version, image, token, annotations);
        let started = Instant::now();
        let output = tokio::time::timeout(EXEC_TIMEOUT, exec(plugin, request.as_bytes())).await;
        self.metrics
            .credential_provider_plugin_duration
            .observe_duration(&[name], started.elapsed());
        let fail = |message: String| {
            self.metrics.credential_provider_plugin_errors.inc(&[name]);
            ProvideError::Exec {
                plugin: name.clone(),
                image: image.to_owned(),
                message,
            }
        };
        let output = match output {
            Err(_) => return Err(fail("context deadline exceeded".into())),
            Ok(Err(e)) => return Err(fail(e.to_string())),
            Ok(Ok(o)) => o,
        };
        if !output.status.success() {
            return Err(fail(format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let response = decode_response(api_version, &output.stdout)?;
        check_token_echo(&response, token, cache_type)?;
        let auth: Vec<(String, AuthConfig)> = response.auth.clone().into_iter().collect();
        if let Some(ttl) = cache_ttl(&response, plugin.config.default_cache_duration()) {
            let key = format!("{}\u{0}{sa_key}", cache_key(response.cache_key_type, image));
            plugin.cache.lock().insert(
                key,
                Cached {
                    auth: auth.clone(),
                    expires: Instant::now() + ttl,
                },
            );
        }
        Ok(auth)
    }
}

impl Plugin {
    /// A fresh cached answer for `image` (by image, then registry, then
    /// global); expired ones are dropped every 15 minutes.
    fn cached(&self, image: &str, sa_key: &str) -> Option<Vec<(String, AuthConfig)>> {
        let now = Instant::now();
        let mut cache = self.cache.lock();
        {
            let mut last = self.last_purge.lock();
            if now.duration_since(*last) >= CACHE_PURGE_INTERVAL {
                cache.retain(|_, c| c.expires > now);
                *last = now;
            }
        }
        for base in lookup_keys(image) {
            let key = format!("{base}\u{0}{sa_key}");
            match cache.get(&key) {
                Some(c) if c.expires > now => return Some(c.auth.clone()),
                Some(_) => {
                    cache.remove(&key);
                }
                None => {}
            }
        }
        None
    }
}

/// Run the plugin's executable with its args and env, `stdin` written to
/// it; killed if dropped (its minute is up).
async fn exec(plugin: &Plugin, stdin: &[u8]) -> std::io::Result<std::process::Output> {
    let mut child = tokio::process::Command::new(&plugin.path)
        .args(&plugin.config.args)
        .envs(plugin.config.env.iter().map(|e| (&e.name, &e.value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin).await?;
    }
    child.wait_with_output().await
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const PLUGIN: &str = r#"#!/bin/sh
# Counts its runs, checks its request, answers for registry.test:5000.
echo run >> "$RUNS"
read -r request
case "$request" in
  *'"kind":"CredentialProviderRequest"'*'"image":"registry.test:5000/'*) ;;
  *) echo "bad request: $request" >&2; exit 3 ;;
esac
[ -n "$SLOW" ] && sleep "$SLOW"
printf '{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry"%s,"auth":{"registry.test:5000":{"username":"%s","password":"pw"}}}' "$DURATION" "$1"
"#;

    struct Setup {
        dir: tempfile::TempDir,
    }

    impl Setup {
        fn new(extra: &str) -> Setup {
            let dir = tempfile::tempdir().unwrap();
            let bin = dir.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            for name in ["registry-login", "failing"] {
                let script = if name == "failing" {
                    "#!/bin/sh\necho run >> \"$RUNS\"\necho 'no credentials for you' >&2\nexit 1\n"
                } else {
                    PLUGIN
                };
                let path = bin.join(name);
                std::fs::write(&path, script).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            let runs = dir.path().join("runs");
            std::fs::write(
                dir.path().join("config.yaml"),
                format!(
                    "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
                     - name: registry-login\n  matchImages: [\"registry.test:5000\"]\n  defaultCacheDuration: 10m\n\
                     \x20 apiVersion: credentialprovider.kubelet.k8s.io/v1\n  args: [robot]\n\
                     \x20 env: [{{name: RUNS, value: {}}}{extra}]\n\
                     - name: failing\n  matchImages: [\"*.test:5000\"]\n  defaultCacheDuration: 10m\n\
                     \x20 apiVersion: credentialprovider.kubelet.k8s.io/v1\n  env: [{{name: RUNS, value: {}}}]\n",
                    runs.display(),
                    runs.display()
                ),
            )
            .unwrap();
            Setup { dir }
        }

        fn register(&self) -> Result<CredentialProviders, RegisterError> {
            CredentialProviders::register(
                &self.dir.path().join("config.yaml"),
                &self.dir.path().join("bin"),
                &KubeletConfiguration::default(),
                KubeletMetrics::new("n"),
            )
        }

        fn runs(&self) -> usize {
            std::fs::read_to_string(self.dir.path().join("runs"))
                .map(|s| s.lines().count())
                .unwrap_or(0)
        }
    }

    fn pod() -> PodIdentity {
        PodIdentity {
            namespace: "default".into(),
            name: "p".into(),
            uid: PodUid::from("uid-p"),
            service_account: Some("default".into()),
        }
    }

    #[tokio::test]
    async fn a_plugins_answer_is_used_and_cached_by_registry() {
        let setup = Setup::new("");
        let providers = setup.register().unwrap();
        let creds = providers
            .credentials("registry.test:5000/team/app", &pod(), None)
            .await;
        assert_eq!(creds.len(), 1, "the failing plugin gives nothing");
        let (location, cred) = &creds[0];
        assert_eq!(location, "registry.test:5000");
        assert_eq!(
            (cred.username.as_str(), cred.password.as_str()),
            ("robot", "pw")
        );
        assert_eq!(cred.source, CredentialSource::Node);
        assert_eq!(setup.runs(), 2, "both matching plugins ran");
        // Another image of the registry: from the cache (the failing
        // plugin runs again: it gave nothing to cache).
        let again = providers
            .credentials("registry.test:5000/other", &pod(), None)
            .await;
        assert_eq!(again.len(), 1);
        assert_eq!(setup.runs(), 3);
        // An image no plugin matches: none runs.
        assert!(
            providers
                .credentials("docker.io/library/busybox", &pod(), None)
                .await
                .is_empty()
        );
        assert_eq!(setup.runs(), 3);
        let metrics = providers.metrics.render();
        assert!(
            metrics.contains(
                "kubelet_credential_provider_plugin_errors_total{plugin_name=\"failing\"} 2"
            ),
            "{metrics}"
        );
        assert!(metrics.contains("kubelet_credential_provider_config_info{hash=\"sha256:"));
        assert!(metrics.contains(
            "kubelet_credential_provider_plugin_duration_count{plugin_name=\"registry-login\"} 1"
        ));
    }

    #[tokio::test]
    async fn an_answer_of_no_duration_is_not_cached_and_one_request_runs_once() {
        let setup = Setup::new(
            ", {name: DURATION, value: ',\"cacheDuration\":\"0s\"'}, {name: SLOW, value: '0.3'}",
        );
        let providers = setup.register().unwrap();
        let image = "registry.test:5000/team/app";
        let who = pod();
        let (a, b) = tokio::join!(
            providers.credentials(image, &who, None),
            providers.credentials(image, &who, None)
        );
        assert_eq!((a.len(), b.len()), (1, 1));
        // Not cached (0s), yet the two asked together ran it once
        // (and the failing one twice).
        let first = setup.runs();
        assert_eq!(first, 4, "registry-login once per request: {first}");
        providers.credentials(image, &pod(), None).await;
        assert_eq!(setup.runs(), first + 2);
    }

    #[test]
    fn registration_refuses_what_upstreams_refuses() {
        let setup = Setup::new("");
        let err = |config: &Path, bin: &Path| {
            CredentialProviders::register(
                config,
                bin,
                &KubeletConfiguration::default(),
                KubeletMetrics::new("n"),
            )
            .unwrap_err()
            .to_string()
        };
        let dir = setup.dir.path();
        assert_eq!(
            err(&dir.join("config.yaml"), &dir.join("nothing")),
            format!(
                "plugin binary directory {} did not exist",
                dir.join("nothing").display()
            )
        );
        std::fs::remove_file(dir.join("bin/failing")).unwrap();
        assert_eq!(
            err(&dir.join("config.yaml"), &dir.join("bin")),
            format!(
                "plugin binary executable {} did not exist",
                dir.join("bin/failing").display()
            )
        );
        let empty = dir.join("empty");
        std::fs::create_dir(&empty).unwrap();
        std::fs::write(empty.join("notes.txt"), "x").unwrap();
        assert_eq!(
            err(&empty, &dir.join("bin")),
            format!(
                "no configuration files found in directory {:?}",
                empty.display().to_string()
            )
        );
        assert!(
            err(&dir.join("missing.yaml"), &dir.join("bin")).starts_with("unable to access path")
        );
    }
}
