//! KubeletConfiguration (`kubelet.config.k8s.io/v1beta1`): the file given to
//! `--config`, decoded the way the upstream kubelet decodes it.
//!
//! Parsing is strict about what it does not know: a key that is not a field of
//! upstream's v1beta1 KubeletConfiguration stops parsing with
//! `unknown field "<name>"`. Upstream fields that rkubelet does not implement
//! yet are accepted and reported back so that the caller can warn about them.
//!
//! As upstream's defaulting does, a field set to its zero value (`0s`, `""`,
//! `0` for maxPods/kubeAPIBurst) takes the default, so files written by
//! kubeadm (which spells out `syncFrequency: 0s` and friends) load unchanged.
//! Fields upstream stores as pointers (healthzPort, kubeAPIQPS, registerNode)
//! keep an explicit zero/false.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::duration::{format_go_duration, parse_go_duration};

/// The only `apiVersion` accepted in a KubeletConfiguration file.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The only `kind` accepted in a KubeletConfiguration file.
pub const KIND: &str = "KubeletConfiguration";

/// The default CRI endpoint (containerd's socket).
pub const DEFAULT_CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// Fields of the file that rkubelet decodes into [`KubeletConfiguration`]
/// (besides `kind` and `apiVersion`).
pub const DECODED_FIELDS: &[&str] = &[
    "staticPodPath",
    "syncFrequency",
    "fileCheckFrequency",
    "containerRuntimeEndpoint",
    "runtimeRequestTimeout",
    "podLogsDir",
    "healthzBindAddress",
    "healthzPort",
    "readOnlyPort",
    "address",
    "maxPods",
    "cgroupDriver",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "eventRecordQPS",
    "eventBurst",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "registerNode",
];

/// Every other field of upstream's v1beta1 KubeletConfiguration: accepted,
/// not implemented, reported by [`parse_kubelet_config_reporting`].
pub const IGNORED_UPSTREAM_FIELDS: &[&str] = &[
    "enableServer",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "port",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "cgroupRoot",
    "cgroupsPerQOS",
    "cpuManagerPolicy",
    "singleProcessOOMKill",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "qosReserved",
    "hairpinMode",
    "podCIDR",
    "podPidsLimit",
    "resolvConf",
    "runOnce",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "mergeDefaultEvictionSettings",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "featureGates",
    "failSwapOn",
    "memorySwap",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "enforceNodeAllocatable",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "providerID",
    "kernelMemcgNotification",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "memoryThrottlingFactor",
    "registerWithTaints",
    "tracing",
    "localStorageCapacityIsolation",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
];

/// The cgroup driver the runtime and the kubelet agree on (`cgroupDriver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CgroupDriver {
    #[default]
    Cgroupfs,
    Systemd,
}

impl CgroupDriver {
    /// The spelling used in the file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cgroup driver other than "cgroupfs" or "systemd".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown cgroup driver {0:?} (expected \"cgroupfs\" or \"systemd\")")]
pub struct ParseCgroupDriverError(pub String);

impl FromStr for CgroupDriver {
    type Err = ParseCgroupDriverError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
            "systemd" => Ok(CgroupDriver::Systemd),
            other => Err(ParseCgroupDriverError(other.to_owned())),
        }
    }
}

/// The subset of upstream's KubeletConfiguration that rkubelet implements.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletConfiguration {
    /// `staticPodPath`: directory (or file) of static pod manifests; none by default.
    pub static_pod_path: Option<PathBuf>,
    /// `syncFrequency`: maximum period between pod syncs. Default 1m.
    pub sync_frequency: Duration,
    /// `fileCheckFrequency`: how often the static pod path is rescanned. Default 20s.
    pub file_check_frequency: Duration,
    /// `containerRuntimeEndpoint`: the CRI socket. Default containerd's.
    pub container_runtime_endpoint: String,
    /// `runtimeRequestTimeout`: timeout of every CRI call but long-running ones. Default 2m.
    pub runtime_request_timeout: Duration,
    /// `podLogsDir`: where container logs are written. Default /var/log/pods.
    pub pod_logs_dir: PathBuf,
    /// `healthzBindAddress`: address of the healthz endpoint. Default 127.0.0.1.
    pub healthz_bind_address: String,
    /// `healthzPort`: port of the healthz endpoint; 0 disables it. Default 10248.
    pub healthz_port: u16,
    /// `readOnlyPort`: the unauthenticated read-only port; 0 (default) disables it.
    pub read_only_port: u16,
    /// `address`: the IP the kubelet's servers (read-only port) bind to. Default 0.0.0.0.
    pub address: String,
    /// `maxPods`: the most pods this kubelet runs. Default 110.
    pub max_pods: u32,
    /// `cgroupDriver`: default cgroupfs.
    pub cgroup_driver: CgroupDriver,
    /// `kubeAPIQPS`: queries per second to the API server. Default 50.
    pub kube_api_qps: u32,
    /// `kubeAPIBurst`: burst of queries to the API server. Default 100.
    pub kube_api_burst: u32,
    /// `eventRecordQPS`: events created per second (0: unlimited). Default 50.
    pub event_record_qps: u32,
    /// `eventBurst`: burst of event creations. Default 100.
    pub event_burst: u32,
    /// `nodeStatusUpdateFrequency`: how often node status is computed. Default 10s.
    pub node_status_update_frequency: Duration,
    /// `nodeStatusReportFrequency`: how often an unchanged node status is posted. Default 5m.
    pub node_status_report_frequency: Duration,
    /// `registerNode`: register the node with the API server. Default true.
    pub register_node: bool,
}

impl Default for KubeletConfiguration {
    fn default() -> Self {
        KubeletConfiguration {
            static_pod_path: None,
            sync_frequency: Duration::from_secs(60),
            file_check_frequency: Duration::from_secs(20),
            container_runtime_endpoint: DEFAULT_CONTAINER_RUNTIME_ENDPOINT.to_owned(),
            runtime_request_timeout: Duration::from_secs(120),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            healthz_bind_address: "127.0.0.1".to_owned(),
            healthz_port: 10248,
            read_only_port: 0,
            address: "0.0.0.0".to_owned(),
            max_pods: 110,
            cgroup_driver: CgroupDriver::Cgroupfs,
            kube_api_qps: 50,
            kube_api_burst: 100,
            event_record_qps: 50,
            event_burst: 100,
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            register_node: true,
        }
    }
}

/// Why a KubeletConfiguration could not be loaded or is not valid. Every
/// message names the offending field as spelled in the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The content is neither YAML nor JSON.
    #[error("KubeletConfiguration is not valid YAML or JSON: {0}")]
    Syntax(String),
    /// The document is not a mapping of fields.
    #[error(
        "KubeletConfiguration must be a mapping with kind: {KIND} and apiVersion: {API_VERSION}, got {0}"
    )]
    NotAMapping(String),
    /// `kind` is missing or not KubeletConfiguration.
    #[error("kind must be {KIND:?}, got {0}")]
    WrongKind(String),
    /// `apiVersion` is missing or not kubelet.config.k8s.io/v1beta1.
    #[error("apiVersion must be {API_VERSION:?}, got {0}")]
    WrongApiVersion(String),
    /// A key that is not a field of upstream's v1beta1 KubeletConfiguration.
    #[error("unknown field {0:?}")]
    UnknownField(String),
    /// A field of the wrong type.
    #[error("{field}: expected {expected}, got {found}")]
    WrongType {
        field: String,
        expected: &'static str,
        found: String,
    },
    /// A field of the right type but with a value that cannot be used.
    #[error("{field}: {message}")]
    InvalidValue { field: String, message: String },
    /// A configuration that loads but fails validation.
    #[error("invalid configuration: {field} {message}")]
    Invalid { field: String, message: String },
}

/// A short, human description of a JSON value for error messages.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

fn wrong_type(field: &str, expected: &'static str, v: &Value) -> ConfigError {
    ConfigError::WrongType {
        field: field.to_owned(),
        expected,
        found: describe(v),
    }
}

/// A string field; `None` when null.
fn decode_string(field: &str, v: &Value) -> Result<Option<String>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(wrong_type(field, "a string", other)),
    }
}

/// A string field whose empty value means "the default".
fn decode_nonempty_string(field: &str, v: &Value) -> Result<Option<String>, ConfigError> {
    Ok(decode_string(field, v)?.filter(|s| !s.is_empty()))
}

/// A duration field; `None` when null or zero (zero means "the default" upstream).
fn decode_duration(field: &str, v: &Value) -> Result<Option<Duration>, ConfigError> {
    let Some(s) = decode_string(field, v)
        .map_err(|_| wrong_type(field, "a duration string such as \"1m0s\"", v))?
    else {
        return Ok(None);
    };
    let d = parse_go_duration(&s).map_err(|e| ConfigError::InvalidValue {
        field: field.to_owned(),
        message: e.to_string(),
    })?;
    Ok((!d.is_zero()).then_some(d))
}

fn decode_bool(field: &str, v: &Value) -> Result<Option<bool>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        other => Err(wrong_type(field, "a boolean", other)),
    }
}

/// A non-negative integer field that must fit `T`; `None` when null.
fn decode_uint<T: TryFrom<u64>>(
    field: &str,
    v: &Value,
    expected: &'static str,
) -> Result<Option<T>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| T::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| wrong_type(field, expected, v)),
        other => Err(wrong_type(field, expected, other)),
    }
}

const PORT: &str = "an integer port between 0 and 65535";
const COUNT: &str = "a non-negative 32-bit integer";

fn set_nonzero_duration(target: &mut Duration, field: &str, v: &Value) -> Result<(), ConfigError> {
    if let Some(d) = decode_duration(field, v)? {
        *target = d;
    }
    Ok(())
}

fn set_nonempty_string(target: &mut String, field: &str, v: &Value) -> Result<(), ConfigError> {
    if let Some(s) = decode_nonempty_string(field, v)? {
        *target = s;
    }
    Ok(())
}

fn check_header(map: &Map<String, Value>) -> Result<(), ConfigError> {
    let shown = |v: Option<&Value>| v.map_or_else(|| "nothing".to_owned(), describe);
    if map.get("kind").and_then(Value::as_str) != Some(KIND) {
        return Err(ConfigError::WrongKind(shown(map.get("kind"))));
    }
    if map.get("apiVersion").and_then(Value::as_str) != Some(API_VERSION) {
        return Err(ConfigError::WrongApiVersion(shown(map.get("apiVersion"))));
    }
    Ok(())
}

/// Parses a KubeletConfiguration file (YAML or JSON) and returns it with the
/// upstream fields present in the file that rkubelet ignores (sorted).
///
/// Requires `kind: KubeletConfiguration` and
/// `apiVersion: kubelet.config.k8s.io/v1beta1`. Absent fields keep their
/// defaults. The result is not validated: call
/// [`KubeletConfiguration::validate`] once command-line overrides are applied.
pub fn parse_kubelet_config_reporting(
    content: &str,
) -> Result<(KubeletConfiguration, Vec<String>), ConfigError> {
    let doc: Value =
        serde_saphyr::from_str(content).map_err(|e| ConfigError::Syntax(e.to_string()))?;
    let map = match doc {
        Value::Object(map) => map,
        Value::Null => return Err(ConfigError::NotAMapping("an empty document".to_owned())),
        other => return Err(ConfigError::NotAMapping(describe(&other))),
    };
    check_header(&map)?;

    let mut cfg = KubeletConfiguration::default();
    let mut ignored = Vec::new();
    for (key, v) in &map {
        let field = key.as_str();
        match field {
            "kind" | "apiVersion" => {}
            "staticPodPath" => {
                if let Some(s) = decode_string(field, v)? {
                    cfg.static_pod_path = (!s.is_empty()).then(|| PathBuf::from(s));
                }
            }
            "syncFrequency" => set_nonzero_duration(&mut cfg.sync_frequency, field, v)?,
            "fileCheckFrequency" => set_nonzero_duration(&mut cfg.file_check_frequency, field, v)?,
            "runtimeRequestTimeout" => {
                set_nonzero_duration(&mut cfg.runtime_request_timeout, field, v)?
            }
            "nodeStatusUpdateFrequency" => {
                set_nonzero_duration(&mut cfg.node_status_update_frequency, field, v)?
            }
            "nodeStatusReportFrequency" => {
                set_nonzero_duration(&mut cfg.node_status_report_frequency, field, v)?
            }
            "containerRuntimeEndpoint" => {
                set_nonempty_string(&mut cfg.container_runtime_endpoint, field, v)?
            }
            "podLogsDir" => {
                if let Some(s) = decode_nonempty_string(field, v)? {
                    cfg.pod_logs_dir = PathBuf::from(s);
                }
            }
            "healthzBindAddress" => set_nonempty_string(&mut cfg.healthz_bind_address, field, v)?,
            "address" => set_nonempty_string(&mut cfg.address, field, v)?,
            "healthzPort" => {
                if let Some(p) = decode_uint(field, v, PORT)? {
                    cfg.healthz_port = p;
                }
            }
            "readOnlyPort" => {
                if let Some(p) = decode_uint(field, v, PORT)? {
                    cfg.read_only_port = p;
                }
            }
            "maxPods" => {
                if let Some(n) = decode_uint::<u32>(field, v, COUNT)?.filter(|n| *n != 0) {
                    cfg.max_pods = n;
                }
            }
            "kubeAPIQPS" => {
                if let Some(n) = decode_uint(field, v, COUNT)? {
                    cfg.kube_api_qps = n;
                }
            }
            "kubeAPIBurst" => {
                if let Some(n) = decode_uint::<u32>(field, v, COUNT)?.filter(|n| *n != 0) {
                    cfg.kube_api_burst = n;
                }
            }
            "eventRecordQPS" => {
                if let Some(n) = decode_uint(field, v, COUNT)? {
                    cfg.event_record_qps = n;
                }
            }
            "eventBurst" => {
                if let Some(n) = decode_uint::<u32>(field, v, COUNT)?.filter(|n| *n != 0) {
                    cfg.event_burst = n;
                }
            }
            "cgroupDriver" => {
                if let Some(s) = decode_nonempty_string(field, v)? {
                    cfg.cgroup_driver = s.parse().map_err(|e: ParseCgroupDriverError| {
                        ConfigError::InvalidValue {
                            field: field.to_owned(),
                            message: e.to_string(),
                        }
                    })?;
                }
            }
            "registerNode" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.register_node = b;
                }
            }
            other if IGNORED_UPSTREAM_FIELDS.contains(&other) => ignored.push(other.to_owned()),
            other => return Err(ConfigError::UnknownField(other.to_owned())),
        }
    }
    ignored.sort();
    Ok((cfg, ignored))
}

/// Parses a KubeletConfiguration file (YAML or JSON). Requires
/// `kind: KubeletConfiguration` and `apiVersion: kubelet.config.k8s.io/v1beta1`.
/// Fields absent keep their defaults. See [`parse_kubelet_config_reporting`].
pub fn parse_kubelet_config(content: &str) -> Result<KubeletConfiguration, ConfigError> {
    parse_kubelet_config_reporting(content).map(|(cfg, _)| cfg)
}

/// The upstream v1beta1 fields present in `content` that rkubelet accepts but
/// does not implement (sorted); empty when `content` does not parse.
pub fn ignored_fields_present(content: &str) -> Vec<String> {
    parse_kubelet_config_reporting(content)
        .map(|(_, ignored)| ignored)
        .unwrap_or_default()
}

impl KubeletConfiguration {
    /// Checks the values that upstream's validation would reject (and that
    /// rkubelet cannot run with).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            field: field.to_owned(),
            message,
        };
        let positive = [
            ("syncFrequency (--sync-frequency)", self.sync_frequency),
            (
                "fileCheckFrequency (--file-check-frequency)",
                self.file_check_frequency,
            ),
            (
                "runtimeRequestTimeout (--runtime-request-timeout)",
                self.runtime_request_timeout,
            ),
            (
                "nodeStatusUpdateFrequency",
                self.node_status_update_frequency,
            ),
            (
                "nodeStatusReportFrequency",
                self.node_status_report_frequency,
            ),
        ];
        for (field, d) in positive {
            if d.is_zero() {
                return Err(invalid(
                    field,
                    format!("must be greater than 0, got {}", format_go_duration(d)),
                ));
            }
        }
        if self.max_pods == 0 {
            return Err(invalid(
                "maxPods (--max-pods)",
                "must be greater than 0".to_owned(),
            ));
        }
        let endpoint = &self.container_runtime_endpoint;
        match endpoint.strip_prefix("unix://") {
            Some(path) if !path.is_empty() => {}
            _ => {
                return Err(invalid(
                    "containerRuntimeEndpoint (--container-runtime-endpoint)",
                    format!(
                        "must be a unix socket such as \"unix:///run/containerd/containerd.sock\", got {endpoint:?}"
                    ),
                ));
            }
        }
        if !self.pod_logs_dir.is_absolute() {
            return Err(invalid(
                "podLogsDir",
                format!("must be an absolute path, got {:?}", self.pod_logs_dir),
            ));
        }
        if self.address.parse::<std::net::IpAddr>().is_err() {
            return Err(invalid(
                "address (--address)",
                format!("must be an IP address, got {:?}", self.address),
            ));
        }
        if self.healthz_bind_address.is_empty() {
            return Err(invalid(
                "healthzBindAddress (--healthz-bind-address)",
                "must not be empty".to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn parse_body(body: &str) -> Result<(KubeletConfiguration, Vec<String>), ConfigError> {
        parse_kubelet_config_reporting(&format!("{HEADER}{body}"))
    }

    #[test]
    fn defaults_match_upstream() {
        let d = KubeletConfiguration::default();
        assert_eq!(d.static_pod_path, None);
        assert_eq!(d.sync_frequency, Duration::from_secs(60));
        assert_eq!(d.file_check_frequency, Duration::from_secs(20));
        assert_eq!(
            d.container_runtime_endpoint,
            "unix:///run/containerd/containerd.sock"
        );
        assert_eq!(d.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(d.pod_logs_dir, PathBuf::from("/var/log/pods"));
        assert_eq!(d.healthz_bind_address, "127.0.0.1");
        assert_eq!(d.healthz_port, 10248);
        assert_eq!(d.read_only_port, 0);
        assert_eq!(d.address, "0.0.0.0");
        assert_eq!(d.max_pods, 110);
        assert_eq!(d.cgroup_driver, CgroupDriver::Cgroupfs);
        assert_eq!(d.kube_api_qps, 50);
        assert_eq!(d.kube_api_burst, 100);
        assert_eq!(d.node_status_update_frequency, Duration::from_secs(10));
        assert_eq!(d.node_status_report_frequency, Duration::from_secs(300));
        assert!(d.register_node);
        d.validate().unwrap();
    }

    #[test]
    fn header_only_gives_defaults() {
        let (cfg, ignored) = parse_body("").unwrap();
        assert_eq!(cfg, KubeletConfiguration::default());
        assert!(ignored.is_empty());
    }

    #[test]
    fn decodes_each_field() {
        type Check = fn(&KubeletConfiguration) -> bool;
        let cases: &[(&str, Check)] = &[
            ("staticPodPath: /etc/kubernetes/manifests", |c| {
                c.static_pod_path.as_deref() == Some("/etc/kubernetes/manifests".as_ref())
            }),
            ("staticPodPath: \"\"", |c| c.static_pod_path.is_none()),
            ("syncFrequency: 30s", |c| {
                c.sync_frequency == Duration::from_secs(30)
            }),
            ("syncFrequency: 0s", |c| {
                c.sync_frequency == Duration::from_secs(60)
            }),
            ("fileCheckFrequency: 1m0s", |c| {
                c.file_check_frequency == Duration::from_secs(60)
            }),
            (
                "containerRuntimeEndpoint: unix:///run/crio/crio.sock",
                |c| c.container_runtime_endpoint == "unix:///run/crio/crio.sock",
            ),
            ("containerRuntimeEndpoint: \"\"", |c| {
                c.container_runtime_endpoint == DEFAULT_CONTAINER_RUNTIME_ENDPOINT
            }),
            ("runtimeRequestTimeout: 15m", |c| {
                c.runtime_request_timeout == Duration::from_secs(900)
            }),
            ("podLogsDir: /data/pod-logs", |c| {
                c.pod_logs_dir == Path::new("/data/pod-logs")
            }),
            ("healthzBindAddress: 0.0.0.0", |c| {
                c.healthz_bind_address == "0.0.0.0"
            }),
            ("healthzPort: 12345", |c| c.healthz_port == 12345),
            ("healthzPort: 0", |c| c.healthz_port == 0),
            ("readOnlyPort: 10255", |c| c.read_only_port == 10255),
            ("address: 127.0.0.1", |c| c.address == "127.0.0.1"),
            ("address: \"::\"", |c| c.address == "::"),
            ("maxPods: 250", |c| c.max_pods == 250),
            ("maxPods: 0", |c| c.max_pods == 110),
            ("cgroupDriver: systemd", |c| {
                c.cgroup_driver == CgroupDriver::Systemd
            }),
            ("cgroupDriver: cgroupfs", |c| {
                c.cgroup_driver == CgroupDriver::Cgroupfs
            }),
            ("kubeAPIQPS: 5", |c| c.kube_api_qps == 5),
            ("kubeAPIBurst: 10", |c| c.kube_api_burst == 10),
            ("eventRecordQPS: 5", |c| c.event_record_qps == 5),
            ("eventBurst: 7", |c| c.event_burst == 7),
            ("kubeAPIBurst: 0", |c| c.kube_api_burst == 100),
            ("nodeStatusUpdateFrequency: 4s", |c| {
                c.node_status_update_frequency == Duration::from_secs(4)
            }),
            ("nodeStatusReportFrequency: 1m", |c| {
                c.node_status_report_frequency == Duration::from_secs(60)
            }),
            ("registerNode: false", |c| !c.register_node),
            ("maxPods: null", |c| c.max_pods == 110),
        ];
        for (body, check) in cases {
            let (cfg, ignored) = parse_body(body).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert!(check(&cfg), "{body}: {cfg:?}");
            assert!(ignored.is_empty(), "{body}: {ignored:?}");
        }
    }

    #[test]
    fn kubeadm_style_zero_values_take_defaults() {
        let body = "syncFrequency: 0s\nfileCheckFrequency: 0s\nruntimeRequestTimeout: 0s\n\
                    nodeStatusUpdateFrequency: 0s\nnodeStatusReportFrequency: 0s\n\
                    httpCheckFrequency: 0s\ncgroupDriver: systemd\n";
        let (cfg, ignored) = parse_body(body).unwrap();
        assert_eq!(
            cfg,
            KubeletConfiguration {
                cgroup_driver: CgroupDriver::Systemd,
                ..KubeletConfiguration::default()
            }
        );
        assert_eq!(ignored, vec!["httpCheckFrequency".to_owned()]);
        cfg.validate().unwrap();
    }

    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, &[&str])] = &[
            ("bogusField: 1", &["unknown field \"bogusField\""]),
            ("staticpodpath: /x", &["unknown field \"staticpodpath\""]),
            (
                "syncFrequency: \"10\"",
                &["syncFrequency", "missing unit", "\"10\""],
            ),
            (
                "syncFrequency: 10",
                &["syncFrequency", "duration string", "got 10"],
            ),
            ("syncFrequency: abc", &["syncFrequency", "\"abc\""]),
            (
                "fileCheckFrequency: -1s",
                &["fileCheckFrequency", "negative"],
            ),
            ("runtimeRequestTimeout: 30", &["runtimeRequestTimeout"]),
            (
                "nodeStatusUpdateFrequency: true",
                &["nodeStatusUpdateFrequency", "duration"],
            ),
            ("healthzPort: abc", &["healthzPort", "port", "\"abc\""]),
            ("healthzPort: 70000", &["healthzPort", "70000"]),
            ("readOnlyPort: -1", &["readOnlyPort", "-1"]),
            ("maxPods: 1.5", &["maxPods", "integer"]),
            ("maxPods: \"110\"", &["maxPods", "integer"]),
            ("kubeAPIQPS: [1]", &["kubeAPIQPS", "a list"]),
            ("kubeAPIBurst: {a: 1}", &["kubeAPIBurst", "a mapping"]),
            ("cgroupDriver: upstart", &["cgroupDriver", "upstart"]),
            ("cgroupDriver: 1", &["cgroupDriver", "string"]),
            ("registerNode: 1", &["registerNode", "boolean"]),
            ("address: 1", &["address", "string"]),
            ("staticPodPath: [a]", &["staticPodPath", "string"]),
        ];
        for (body, needles) in cases {
            let err = parse_body(body).expect_err(body).to_string();
            for needle in *needles {
                assert!(err.contains(needle), "{body}: {err:?} lacks {needle:?}");
            }
        }
    }

    #[test]
    fn header_is_required() {
        let cases: &[(&str, &str)] = &[
            ("kind: KubeletConfiguration\n", "apiVersion"),
            (
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n",
                "kind must be \"KubeletConfiguration\", got \"Pod\"",
            ),
            ("apiVersion: kubelet.config.k8s.io/v1beta1\n", "kind"),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
                "apiVersion must be \"kubelet.config.k8s.io/v1beta1\", got \"kubelet.config.k8s.io/v1\"",
            ),
            (
                "apiVersion: kubeletconfig/v1beta1\nkind: KubeletConfiguration\n",
                "apiVersion",
            ),
            ("", "empty document"),
            ("# only a comment\n", "empty document"),
            ("- a\n- b\n", "mapping"),
            ("just a string", "mapping"),
            ("kind: [unclosed\n", "KubeletConfiguration"),
        ];
        for (content, needle) in cases {
            let err = parse_kubelet_config(content)
                .expect_err(content)
                .to_string();
            assert!(
                err.contains(needle),
                "{content:?}: {err:?} lacks {needle:?}"
            );
        }
    }

    #[test]
    fn ignored_upstream_fields_are_accepted_and_listed() {
        let body = "clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n\
                    authentication:\n  anonymous:\n    enabled: false\n\
                    featureGates:\n  Foo: true\nmaxPods: 20\n";
        let (cfg, ignored) = parse_body(body).unwrap();
        assert_eq!(cfg.max_pods, 20);
        assert_eq!(
            ignored,
            vec![
                "authentication",
                "clusterDNS",
                "clusterDomain",
                "featureGates"
            ]
        );
        assert_eq!(ignored_fields_present(&format!("{HEADER}{body}")), ignored);
        assert!(ignored_fields_present("not: [a config").is_empty());
    }

    #[test]
    fn every_listed_field_is_accepted() {
        for field in IGNORED_UPSTREAM_FIELDS {
            assert!(
                !DECODED_FIELDS.contains(field),
                "{field} is both decoded and ignored"
            );
            let (_, ignored) = parse_body(&format!("{field}: null\n")).unwrap();
            assert_eq!(ignored, vec![field.to_string()]);
        }
        for field in DECODED_FIELDS {
            let (cfg, ignored) = parse_body(&format!("{field}: null\n")).unwrap();
            assert_eq!(cfg, KubeletConfiguration::default(), "{field}");
            assert!(ignored.is_empty(), "{field}");
        }
        let mut all: Vec<_> = IGNORED_UPSTREAM_FIELDS
            .iter()
            .chain(DECODED_FIELDS)
            .collect();
        all.sort();
        let before = all.len();
        all.dedup();
        assert_eq!(before, all.len(), "duplicate field names");
    }

    #[test]
    fn json_input() {
        let content = r#"{
            "kind": "KubeletConfiguration",
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "staticPodPath": "/etc/kubernetes/manifests",
            "syncFrequency": "1m30s",
            "healthzPort": 0,
            "cgroupDriver": "systemd",
            "registerNode": false,
            "tlsMinVersion": "VersionTLS12"
        }"#;
        let (cfg, ignored) = parse_kubelet_config_reporting(content).unwrap();
        assert_eq!(
            cfg,
            KubeletConfiguration {
                static_pod_path: Some(PathBuf::from("/etc/kubernetes/manifests")),
                sync_frequency: Duration::from_secs(90),
                healthz_port: 0,
                cgroup_driver: CgroupDriver::Systemd,
                register_node: false,
                ..KubeletConfiguration::default()
            }
        );
        assert_eq!(ignored, vec!["tlsMinVersion"]);
        let err = parse_kubelet_config(
            r#"{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1","nope":1}"#,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "unknown field \"nope\"");
    }

    #[test]
    fn validation() {
        type Mutate = fn(&mut KubeletConfiguration);
        let cases: &[(Mutate, &str)] = &[
            (|c| c.sync_frequency = Duration::ZERO, "syncFrequency"),
            (
                |c| c.file_check_frequency = Duration::ZERO,
                "fileCheckFrequency",
            ),
            (
                |c| c.runtime_request_timeout = Duration::ZERO,
                "runtimeRequestTimeout",
            ),
            (
                |c| c.node_status_update_frequency = Duration::ZERO,
                "nodeStatusUpdateFrequency",
            ),
            (
                |c| c.node_status_report_frequency = Duration::ZERO,
                "nodeStatusReportFrequency",
            ),
            (|c| c.max_pods = 0, "maxPods"),
            (
                |c| c.container_runtime_endpoint = "tcp://localhost:1234".into(),
                "containerRuntimeEndpoint",
            ),
            (
                |c| c.container_runtime_endpoint = "unix://".into(),
                "containerRuntimeEndpoint",
            ),
            (
                |c| c.container_runtime_endpoint = "/run/containerd/containerd.sock".into(),
                "containerRuntimeEndpoint",
            ),
            (|c| c.pod_logs_dir = "logs".into(), "podLogsDir"),
            (|c| c.address = "not-an-ip".into(), "address"),
            (
                |c| c.healthz_bind_address = String::new(),
                "healthzBindAddress",
            ),
        ];
        for (mutate, field) in cases {
            let mut cfg = KubeletConfiguration::default();
            mutate(&mut cfg);
            let err = cfg.validate().expect_err(field).to_string();
            assert!(err.contains(field), "{err:?} lacks {field:?}");
        }
        let ok = KubeletConfiguration {
            healthz_port: 0,
            read_only_port: 10255,
            address: "::".into(),
            ..KubeletConfiguration::default()
        };
        ok.validate().unwrap();
    }

    #[test]
    fn cgroup_driver_strings() {
        for d in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            assert_eq!(d.as_str().parse::<CgroupDriver>(), Ok(d));
            assert_eq!(d.to_string(), d.as_str());
        }
        let err = "Systemd".parse::<CgroupDriver>().unwrap_err();
        assert!(err.to_string().contains("\"Systemd\""), "{err}");
    }
}
