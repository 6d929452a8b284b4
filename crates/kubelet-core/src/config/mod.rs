//! KubeletConfiguration (`kubelet.config.k8s.io/v1beta1`): the file given to
//! `--config`, decoded the way the upstream kubelet decodes it.
//!
//! Each field is declared once, in [`config_section!`] blocks below (its
//! name in the file, type, upstream's default, doc): the struct, its
//! defaults, its decoder and its `/configz` rendering derive from that
//! line. Validation, which runs after command-line overrides, is apart
//! ([`validate`]).
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

pub mod gates;
#[cfg(test)]
mod tests;
mod validate;
mod value;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Map, Value};

use crate::pullrecords::VerificationPolicy;
use crate::quantity::parse_bytes;
pub use value::{RESERVABLE, ReservationError, reserved_amount};
use value::{Section as _, config_section, describe};

/// The only `apiVersion` accepted in a KubeletConfiguration file.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The only `kind` accepted in a KubeletConfiguration file.
pub const KIND: &str = "KubeletConfiguration";

/// enforceNodeAllocatable: the kubepods cgroup is limited to allocatable.
pub const ENFORCE_PODS: &str = "pods";
/// enforceNodeAllocatable: systemReserved is enforced on systemReservedCgroup.
pub const ENFORCE_SYSTEM_RESERVED: &str = "system-reserved";
/// ... its cpu only.
pub const ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE: &str = "system-reserved-compressible";
/// enforceNodeAllocatable: kubeReserved is enforced on kubeReservedCgroup.
pub const ENFORCE_KUBE_RESERVED: &str = "kube-reserved";
/// ... its cpu only.
pub const ENFORCE_KUBE_RESERVED_COMPRESSIBLE: &str = "kube-reserved-compressible";
/// enforceNodeAllocatable: nothing.
pub const ENFORCE_NONE: &str = "none";

/// The default CRI endpoint (containerd's socket).
pub const DEFAULT_CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// Every field of upstream's v1beta1 KubeletConfiguration (besides `kind`
/// and `apiVersion`), in upstream's order: those [`KubeletConfiguration`]
/// does not declare are accepted, not implemented, and reported by
/// [`parse_kubelet_config_reporting`].
pub const UPSTREAM_FIELDS: &[&str] = &[
    "enableServer",
    "staticPodPath",
    "podLogsDir",
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "address",
    "port",
    "readOnlyPort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsCurvePreferences",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "healthzPort",
    "healthzBindAddress",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
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
    "cgroupDriver",
    "cpuManagerPolicy",
    "singleProcessOOMKill",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "qosReserved",
    "runtimeRequestTimeout",
    "hairpinMode",
    "maxPods",
    "podCIDR",
    "podPidsLimit",
    "resolvConf",
    "runOnce",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
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
    "defaultPodSysctls",
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
    "memoryReservationPolicy",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "localStorageCapacityIsolation",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
];

/// The upstream fields [`KubeletConfiguration`] does not declare, each with
/// why: accepted, ignored with a warning that says this, and listed in the
/// README. A test keeps it equal to [`UPSTREAM_FIELDS`] less the declared
/// fields.
pub const NOT_IMPLEMENTED: &[(&str, &str)] = &[
    (
        "enableContentionProfiling",
        "no effect: rkubelet has no Go profiler (upstream's block profiling under /debug/pprof)",
    ),
    (
        "qosReserved",
        "no effect: upstream honours it only with the alpha QOSReserved gate, off by default",
    ),
    (
        "hairpinMode",
        "no effect: hairpin traffic is the CNI plugin's (upstream's kubenet, which used it, is gone)",
    ),
    (
        "contentType",
        "no effect: rkubelet's API client speaks JSON (kube-rs has no protobuf encoding)",
    ),
    (
        "makeIPTablesUtilChains",
        "no effect: rkubelet makes no iptables chains (kube-proxy and the CNI plugin do)",
    ),
    (
        "iptablesMasqueradeBit",
        "no effect: rkubelet makes no iptables chains",
    ),
    (
        "iptablesDropBit",
        "no effect: rkubelet makes no iptables chains",
    ),
    (
        "showHiddenMetricsForVersion",
        "no effect: rkubelet has no hidden (deprecated) metrics",
    ),
    (
        "volumePluginDir",
        "no effect: rkubelet has no FlexVolume plugins",
    ),
    (
        "enableProfilingHandler",
        "no effect: rkubelet has no /debug/pprof",
    ),
    (
        "enableDebugFlagsHandler",
        "no effect: rkubelet has no /debug/flags/v",
    ),
];

/// Why rkubelet does not implement upstream field `field`, if it does not.
pub fn not_implemented(field: &str) -> Option<&'static str> {
    NOT_IMPLEMENTED
        .iter()
        .find(|(f, _)| *f == field)
        .map(|(_, why)| *why)
}

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

/// The lowest TLS version the kubelet API server accepts (`tlsMinVersion`).
/// Upstream also accepts VersionTLS10 and VersionTLS11; rkubelet refuses
/// them (its TLS stack speaks TLS 1.2 and 1.3 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TlsMinVersion {
    #[default]
    Tls12,
    Tls13,
}

impl TlsMinVersion {
    /// Upstream's spelling (Go's crypto/tls constant names).
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMinVersion::Tls12 => "VersionTLS12",
            TlsMinVersion::Tls13 => "VersionTLS13",
        }
    }
}

/// A `tlsMinVersion` (`--tls-min-version`) rkubelet cannot serve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseTlsMinVersionError {
    #[error("{0} is not supported: the kubelet API serves TLS 1.2 and 1.3 only")]
    Unsupported(String),
    #[error("unknown TLS version {0:?} (expected \"VersionTLS12\" or \"VersionTLS13\")")]
    Unknown(String),
}

impl FromStr for TlsMinVersion {
    type Err = ParseTlsMinVersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "VersionTLS12" => Ok(TlsMinVersion::Tls12),
            "VersionTLS13" => Ok(TlsMinVersion::Tls13),
            "VersionTLS10" | "VersionTLS11" => {
                Err(ParseTlsMinVersionError::Unsupported(s.to_owned()))
            }
            other => Err(ParseTlsMinVersionError::Unknown(other.to_owned())),
        }
    }
}

/// The upstream cipher suite names (`tlsCipherSuites`) rkubelet accepts: the
/// ECDHE AES-GCM and ChaCha20-Poly1305 suites of TLS 1.2, and the TLS 1.3
/// suites (which, as in Go, are always enabled whatever the list says).
pub const TLS_CIPHER_SUITES: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// The curves (Go's tls.CurveID) rkubelet's TLS stack (rustls with ring)
/// offers: tlsCurvePreferences may name these.
pub const TLS_CURVES: &[(i32, &str)] = &[(23, "CurveP256"), (24, "CurveP384"), (29, "X25519")];

/// The curves Go knows that ring does not (tlsCurvePreferences refuses
/// them by name).
const GO_ONLY_CURVES: &[(i32, &str)] = &[(25, "CurveP521"), (4588, "X25519MLKEM768")];

/// Why a tlsCurvePreferences list cannot be used: upstream's checks
/// (component-base's TLSCurvePreferences), then what rkubelet's stack lacks.
pub fn check_curve_preferences(ids: &[i32]) -> Result<(), String> {
    let mut seen = Vec::new();
    for &id in ids {
        if id <= 0 || id > i32::from(u16::MAX) {
            return Err(format!(
                "curve preference {id} is out of range (must be 1-65535)"
            ));
        }
        if seen.contains(&id) {
            return Err(format!("duplicate curve preference {id}"));
        }
        seen.push(id);
        if TLS_CURVES.iter().any(|(c, _)| *c == id) {
            continue;
        }
        return Err(match GO_ONLY_CURVES.iter().find(|(c, _)| *c == id) {
            Some((_, name)) => format!(
                "curve preference {id} ({name}) is not supported by rkubelet's TLS stack (rustls with ring: 23, 24 and 29)"
            ),
            None => format!("curve preference {id} is not supported"),
        });
    }
    Ok(())
}

/// `authorization.mode`: how the kubelet API authorizes requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AuthorizationMode {
    /// SubjectAccessReviews against the API server (the v1beta1 default).
    #[default]
    Webhook,
    /// Every authenticated request is allowed.
    AlwaysAllow,
}

impl AuthorizationMode {
    /// The spelling used in the file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthorizationMode::Webhook => "Webhook",
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
        }
    }
}

/// An `authorization.mode` (`--authorization-mode`) other than Webhook or AlwaysAllow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown authorization mode {0:?} (expected \"Webhook\" or \"AlwaysAllow\")")]
pub struct ParseAuthorizationModeError(pub String);

impl FromStr for AuthorizationMode {
    type Err = ParseAuthorizationModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Webhook" => Ok(AuthorizationMode::Webhook),
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            other => Err(ParseAuthorizationModeError(other.to_owned())),
        }
    }
}

config_section! {
    /// `authentication.x509`.
    pub struct KubeletX509Authentication {
        /// `clientCAFile`: CA bundle verifying client certificates; none by default.
        "clientCAFile" client_ca_file: Option<PathBuf> = None;
    }
}

config_section! {
    /// `authentication.webhook`.
    pub struct KubeletWebhookAuthentication {
        /// `enabled`: bearer tokens checked with TokenReviews. Default true.
        "enabled" enabled: bool = true;
        /// `cacheTTL`: how long TokenReview answers are cached. Default 2m.
        "cacheTTL" cache_ttl: Duration = Duration::from_secs(120), zero_is_unset;
    }
}

config_section! {
    /// `authentication.anonymous`.
    pub struct KubeletAnonymousAuthentication {
        /// `enabled`: requests without credentials run as
        /// system:anonymous. Default false (v1beta1).
        "enabled" enabled: bool = false;
    }
}

config_section! {
    /// `authentication`: how the kubelet API identifies callers.
    pub struct KubeletAuthentication {
        /// `x509`.
        "x509" x509: KubeletX509Authentication = KubeletX509Authentication::default();
        /// `webhook`.
        "webhook" webhook: KubeletWebhookAuthentication = KubeletWebhookAuthentication::default();
        /// `anonymous`.
        "anonymous" anonymous: KubeletAnonymousAuthentication = KubeletAnonymousAuthentication::default();
    }
}

config_section! {
    /// `authorization.webhook`.
    pub struct KubeletWebhookAuthorization {
        /// `cacheAuthorizedTTL`: how long allowed decisions are cached. Default 5m.
        "cacheAuthorizedTTL" cache_authorized_ttl: Duration = Duration::from_secs(300), zero_is_unset;
        /// `cacheUnauthorizedTTL`: how long denied decisions are cached. Default 30s.
        "cacheUnauthorizedTTL" cache_unauthorized_ttl: Duration = Duration::from_secs(30), zero_is_unset;
    }
}

config_section! {
    /// `authorization`: how the kubelet API authorizes requests.
    pub struct KubeletAuthorization {
        /// `mode`: Webhook (default) or AlwaysAllow.
        "mode" mode: AuthorizationMode = AuthorizationMode::Webhook;
        /// `webhook`.
        "webhook" webhook: KubeletWebhookAuthorization = KubeletWebhookAuthorization::default();
    }
}

config_section! {
    /// Upstream's `TracingConfiguration`: an OTLP/gRPC collector and the
    /// share of traces sampled.
    pub struct TracingConfiguration {
        /// `endpoint`: the collector, `host:port`. Default localhost:4317.
        "endpoint" endpoint: String = "localhost:4317".into(), zero_is_unset;
        /// `samplingRatePerMillion`: traces sampled per million (default 0:
        /// none, unless a parent span was sampled).
        "samplingRatePerMillion" sampling_rate_per_million: u32 = 0;
    }
}

config_section! {
    /// `crashLoopBackOff` (KubeletCrashLoopBackOffMax, on by default).
    pub struct CrashLoopBackOffConfig {
        /// `maxContainerRestartPeriod`: the longest a crash-looping
        /// container waits before its restart, 1s to 300s. Default 300s.
        "maxContainerRestartPeriod" max_container_restart_period: Duration = Duration::from_secs(300);
    }
}

config_section! {
    /// `userNamespaces` (UserNamespacesSupport, GA): pods with
    /// `hostUsers: false`.
    pub struct UserNamespaces {
        /// `idsPerPod`: the host user and group IDs each such pod is given,
        /// a multiple of 65536. Default 65536.
        "idsPerPod" ids_per_pod: i64 = 65536;
    }
}

config_section! {
    /// `memorySwap` (NodeSwap, GA).
    pub struct MemorySwapConfiguration {
        /// `swapBehavior`: NoSwap (the default, also when empty) or
        /// LimitedSwap (cgroup v2 only).
        "swapBehavior" swap_behavior: String = String::new();
    }
}

/// An item of `logging.vmodule` (per-file verbosity).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VModuleItem {
    #[serde(default)]
    pub file_pattern: String,
    #[serde(default)]
    pub verbosity: u32,
}

/// `logging.flushFrequency`: a duration string, or (as upstream also
/// accepts) an integer of nanoseconds; shown back in the form given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushFrequency {
    pub duration: Duration,
    pub as_string: bool,
}

impl Default for FlushFrequency {
    fn default() -> Self {
        FlushFrequency {
            duration: Duration::from_secs(5),
            as_string: true,
        }
    }
}

config_section! {
    /// `logging.options.text` and `.json` (upstream's OutputRoutingOptions,
    /// behind the alpha LoggingAlphaOptions gate).
    pub struct LogOutputRouting {
        /// `splitStream`: info to stdout, errors to stderr.
        "splitStream" split_stream: bool = false;
        /// `infoBufferSize`: a quantity; 0 (the default) is unbuffered.
        "infoBufferSize" info_buffer_size: String = "0".into(), zero_is_unset;
    }
}

config_section! {
    /// `logging.options`.
    pub struct LogFormatOptions {
        "text" text: LogOutputRouting = LogOutputRouting::default();
        "json" json: LogOutputRouting = LogOutputRouting::default();
    }
}

config_section! {
    /// `logging` (component-base's LoggingConfiguration).
    pub struct LoggingConfiguration {
        /// `format`: `text` (default) or `json` (klog's JSON lines).
        "format" format: String = "text".into(), zero_is_unset;
        /// `flushFrequency`: default 5s (rkubelet writes each line as it
        /// comes: there is nothing to flush).
        "flushFrequency" flush_frequency: FlushFrequency = FlushFrequency::default(), zero_is_unset;
        /// `verbosity`: klog's level (`-v` wins): 0-2 info, 3-4 debug, 5+
        /// trace.
        "verbosity" verbosity: u32 = 0;
        /// `vmodule`: refused (rkubelet's log lines come from Rust
        /// modules, not Go files: RUST_LOG selects them).
        "vmodule" vmodule: Vec<VModuleItem> = Vec::new();
        /// `options`.
        "options" options: LogFormatOptions = LogFormatOptions::default();
    }
}

/// An item of `shutdownGracePeriodByPodPriority`: pods of at least
/// `priority` (and below the next item's) get `shutdownGracePeriodSeconds`
/// to stop when the node shuts down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShutdownGracePeriodByPodPriority {
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub shutdown_grace_period_seconds: i64,
}

/// An item of `reservedMemory`: the memory (and hugepages) NUMA node
/// `numaNode` keeps for the system, for the memory manager's Static policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryReservation {
    pub numa_node: i32,
    /// Resource → quantity, as written.
    pub limits: BTreeMap<String, String>,
}

config_section! {
    /// The fields of upstream's KubeletConfiguration that rkubelet implements.
    pub struct KubeletConfiguration {
        /// `staticPodPath`: directory (or file) of static pod manifests; none by default.
        "staticPodPath" static_pod_path: Option<PathBuf> = None;
        /// `syncFrequency`: maximum period between pod syncs. Default 1m.
        "syncFrequency" sync_frequency: Duration = Duration::from_secs(60), zero_is_unset;
        /// `fileCheckFrequency`: how often the static pod path is rescanned. Default 20s.
        "fileCheckFrequency" file_check_frequency: Duration = Duration::from_secs(20), zero_is_unset;
        /// `staticPodURL`: static pods also read from this URL (http) every
        /// httpCheckFrequency; none by default.
        "staticPodURL" static_pod_url: String = String::new();
        /// `staticPodURLHeader`: headers of each request to staticPodURL.
        "staticPodURLHeader" static_pod_url_header: BTreeMap<String, Vec<String>> = BTreeMap::new();
        /// `httpCheckFrequency`: how often staticPodURL is read. Default 20s.
        "httpCheckFrequency" http_check_frequency: Duration = Duration::from_secs(20), zero_is_unset;
        /// `containerRuntimeEndpoint`: the CRI socket. Default containerd's.
        "containerRuntimeEndpoint" container_runtime_endpoint: String = DEFAULT_CONTAINER_RUNTIME_ENDPOINT.to_owned(), zero_is_unset;
        /// `imageServiceEndpoint`: the CRI ImageService's socket when not
        /// containerRuntimeEndpoint's (the default, empty).
        "imageServiceEndpoint" image_service_endpoint: String = String::new();
        /// `runtimeRequestTimeout`: timeout of every CRI call but long-running ones. Default 2m.
        "runtimeRequestTimeout" runtime_request_timeout: Duration = Duration::from_secs(120), zero_is_unset;
        /// `podLogsDir`: where container logs are written. Default /var/log/pods.
        "podLogsDir" pod_logs_dir: PathBuf = PathBuf::from("/var/log/pods"), zero_is_unset;
        /// `healthzBindAddress`: address of the healthz endpoint. Default 127.0.0.1.
        "healthzBindAddress" healthz_bind_address: String = "127.0.0.1".to_owned(), zero_is_unset;
        /// `healthzPort`: port of the healthz endpoint; 0 disables it. Default 10248.
        "healthzPort" healthz_port: u16 = 10248;
        /// `readOnlyPort`: the unauthenticated read-only port; 0 (default) disables it.
        "readOnlyPort" read_only_port: u16 = 0;
        /// `address`: the IP the kubelet's servers (read-only port) bind to. Default 0.0.0.0.
        "address" address: String = "0.0.0.0".to_owned(), zero_is_unset;
        /// `maxPods`: the most pods this kubelet runs. Default 110.
        "maxPods" max_pods: u32 = 110, zero_is_unset;
        /// `cgroupDriver`: default cgroupfs.
        "cgroupDriver" cgroup_driver: CgroupDriver = CgroupDriver::Cgroupfs;
        /// `kubeAPIQPS`: queries per second to the API server. Default 50.
        "kubeAPIQPS" kube_api_qps: u32 = 50;
        /// `kubeAPIBurst`: burst of queries to the API server. Default 100.
        "kubeAPIBurst" kube_api_burst: u32 = 100, zero_is_unset;
        /// `eventRecordQPS`: events created per second (0: unlimited). Default 50.
        "eventRecordQPS" event_record_qps: u32 = 50;
        /// `eventBurst`: burst of event creations. Default 100.
        "eventBurst" event_burst: u32 = 100, zero_is_unset;
        /// `nodeStatusUpdateFrequency`: how often node status is computed. Default 10s.
        "nodeStatusUpdateFrequency" node_status_update_frequency: Duration = Duration::from_secs(10), zero_is_unset;
        /// `nodeStatusReportFrequency`: how often an unchanged node status is posted. Default 5m.
        "nodeStatusReportFrequency" node_status_report_frequency: Duration = Duration::from_secs(300), zero_is_unset;
        /// `registerNode`: register the node with the API server. Default true.
        "registerNode" register_node: bool = true;
        /// `port`: the port of the kubelet API (HTTPS). Default 10250.
        "port" port: u16 = 10250, zero_is_unset;
        /// `tlsCertFile`: the serving certificate; none: a self-signed one is made.
        "tlsCertFile" tls_cert_file: Option<PathBuf> = None;
        /// `tlsPrivateKeyFile`: the key of `tlsCertFile`.
        "tlsPrivateKeyFile" tls_private_key_file: Option<PathBuf> = None;
        /// `tlsCipherSuites`: TLS 1.2 suites allowed (names from
        /// [`TLS_CIPHER_SUITES`]); empty: all of them.
        "tlsCipherSuites" tls_cipher_suites: Vec<String> = Vec::new();
        /// `tlsCurvePreferences`: the key exchange groups the kubelet API
        /// offers, by Go's CurveID (23 P-256, 24 P-384, 29 X25519; see
        /// [`TLS_CURVES`]); empty: all of them.
        "tlsCurvePreferences" tls_curve_preferences: Vec<i32> = Vec::new();
        /// `tlsMinVersion`: default VersionTLS12.
        "tlsMinVersion" tls_min_version: TlsMinVersion = TlsMinVersion::Tls12;
        /// `authentication`.
        "authentication" authentication: KubeletAuthentication = KubeletAuthentication::default();
        /// `authorization`.
        "authorization" authorization: KubeletAuthorization = KubeletAuthorization::default();
        /// `enableDebuggingHandlers`: serve exec/attach/portForward/containerLogs/
        /// runningpods (off: 405 "Debug endpoints are disabled."). Default true.
        "enableDebuggingHandlers" enable_debugging_handlers: bool = true;
        /// `streamingConnectionIdleTimeout`: a streaming connection (exec, attach,
        /// port-forward) with no traffic for this long is closed. Default 4h.
        "streamingConnectionIdleTimeout" streaming_connection_idle_timeout: Duration = Duration::from_secs(4 * 3600), zero_is_unset;
        /// `tracing`: where spans go over OTLP; none: not exported.
        "tracing" tracing: Option<TracingConfiguration> = None;
        /// `clusterDNS`: the nameservers of ClusterFirst pods (IP addresses).
        /// None: such pods fall back to the Default policy, with an event.
        "clusterDNS" cluster_dns: Vec<String> = Vec::new();
        /// `clusterDomain`: the cluster's DNS domain, searched by ClusterFirst
        /// pods and in their FQDNs. None by default.
        "clusterDomain" cluster_domain: String = String::new();
        /// `resolvConf`: the node's resolver file, the base of pods' resolv.conf.
        /// Default /etc/resolv.conf; empty: none (pods of the Default policy
        /// get the node's loopback).
        "resolvConf" resolv_conf: String = "/etc/resolv.conf".to_owned();
        /// `seccompDefault`: containers that name no seccomp profile run with
        /// the runtime's default one (else Unconfined). Default false.
        "seccompDefault" seccomp_default: bool = false;
        /// `allowedUnsafeSysctls`: sysctls (or `prefix*` patterns) pods may set
        /// besides the safe ones; each must be known to be namespaced.
        "allowedUnsafeSysctls" allowed_unsafe_sysctls: Vec<String> = Vec::new();
        /// `serializeImagePulls`: one image pull at a time. Default true;
        /// unset in a file, true unless maxParallelImagePulls allows more
        /// than one (upstream's defaulting, see [`KubeletConfiguration::complete`]).
        "serializeImagePulls" serialize_image_pulls: bool = true;
        /// `maxParallelImagePulls`: at most this many pulls at once when they
        /// are not serialized (unset: no limit).
        "maxParallelImagePulls" max_parallel_image_pulls: Option<i32> = None;
        /// `imageGCHighThresholdPercent`: image GC runs once the image file
        /// system is this full (100: never for space). Default 85.
        "imageGCHighThresholdPercent" image_gc_high_threshold_percent: i32 = 85;
        /// `imageGCLowThresholdPercent`: ... and frees down to this. Default 80.
        "imageGCLowThresholdPercent" image_gc_low_threshold_percent: i32 = 80;
        /// `imageMinimumGCAge`: an image seen for less is never removed.
        /// Default 2m.
        "imageMinimumGCAge" image_minimum_gc_age: Duration = Duration::from_secs(120), zero_is_unset;
        /// `imageMaximumGCAge`: an image unused for longer is removed whatever
        /// the space (0: never). Default 0.
        "imageMaximumGCAge" image_maximum_gc_age: Duration = Duration::ZERO, zero_is_unset;
        /// `imagePullCredentialsVerificationPolicy`: which images on the node a
        /// pod may use without its credentials being checked. Default
        /// NeverVerifyPreloadedImages (those the kubelet did not pull).
        "imagePullCredentialsVerificationPolicy" image_pull_credentials_verification_policy: String = "NeverVerifyPreloadedImages".into();
        /// `preloadedImagesVerificationAllowlist`: the images (or `host/path/*`
        /// prefixes) NeverVerifyAllowlistedImages lets any pod use.
        "preloadedImagesVerificationAllowlist" preloaded_images_verification_allowlist: Vec<String> = Vec::new();
        /// `cgroupsPerQOS`: pods get QoS and pod cgroups under `kubepods`.
        /// Default true.
        "cgroupsPerQOS" cgroups_per_qos: bool = true;
        /// `cgroupRoot`: the cgroup `kubepods` is made under (it must exist).
        /// Default the root.
        "cgroupRoot" cgroup_root: String = String::new();
        /// `kubeletCgroups`: the cgroup the kubelet moves itself into (made
        /// when missing, checked every minute); none by default.
        "kubeletCgroups" kubelet_cgroups: String = String::new();
        /// `systemCgroups`: the cgroup every non-kernel process of the root
        /// cgroup but PID 1 is moved into, every minute; none by default.
        "systemCgroups" system_cgroups: String = String::new();
        /// `podPidsLimit`: the most processes a pod's cgroup holds (-1: no
        /// limit). Default -1.
        "podPidsLimit" pod_pids_limit: i64 = -1;
        /// `cpuCFSQuota`: cpu limits are enforced with a CFS quota. Default true.
        "cpuCFSQuota" cpu_cfs_quota: bool = true;
        /// `cpuCFSQuotaPeriod`: the CFS period of cpu limits. Default 100ms.
        "cpuCFSQuotaPeriod" cpu_cfs_quota_period: Duration = Duration::from_millis(100), zero_is_unset;
        /// `systemReserved`: what the node keeps for the system (cpu in
        /// milli-CPUs, memory and ephemeral-storage in bytes, pid).
        "systemReserved" system_reserved: BTreeMap<String, i64> = BTreeMap::new();
        /// `kubeReserved`: what the node keeps for Kubernetes' daemons.
        "kubeReserved" kube_reserved: BTreeMap<String, i64> = BTreeMap::new();
        /// `systemReservedCgroup`: the cgroup systemReserved is enforced on.
        "systemReservedCgroup" system_reserved_cgroup: String = String::new();
        /// `kubeReservedCgroup`: the cgroup kubeReserved is enforced on.
        "kubeReservedCgroup" kube_reserved_cgroup: String = String::new();
        /// `enforceNodeAllocatable`: `pods` (the kubepods cgroup limited to
        /// allocatable), `system-reserved`, `kube-reserved` (and their
        /// `-compressible` forms), or `none`. Default [pods].
        "enforceNodeAllocatable" enforce_node_allocatable: Vec<String> = vec![ENFORCE_PODS.to_owned()];
        /// `evictionHard`: hard eviction thresholds by signal; upstream's
        /// defaults when absent (see [`crate::eviction::DEFAULT_EVICTION_HARD`]).
        "evictionHard" eviction_hard: BTreeMap<String, String> = crate::eviction::default_eviction_hard();
        /// `mergeDefaultEvictionSettings`: the defaults fill the signals a
        /// given evictionHard leaves out. Default false.
        "mergeDefaultEvictionSettings" merge_default_eviction_settings: bool = false;
        /// `evictionSoft`: soft eviction thresholds by signal; each needs its
        /// grace period in `evictionSoftGracePeriod`.
        "evictionSoft" eviction_soft: BTreeMap<String, String> = BTreeMap::new();
        /// `evictionSoftGracePeriod`: how long each soft threshold must hold
        /// before a pod is evicted for it (Go durations).
        "evictionSoftGracePeriod" eviction_soft_grace_period: BTreeMap<String, String> = BTreeMap::new();
        /// `evictionPressureTransitionPeriod`: how long a pressure condition
        /// stays after its threshold stopped being met. Default 5m.
        "evictionPressureTransitionPeriod" eviction_pressure_transition_period: Duration = Duration::from_secs(300), zero_is_unset;
        /// `evictionMaxPodGracePeriod`: the most grace (seconds) a pod evicted
        /// for a soft threshold gets. Default 0.
        "evictionMaxPodGracePeriod" eviction_max_pod_grace_period: i32 = 0;
        /// `evictionMinimumReclaim`: how far past its threshold a signal must
        /// be brought once eviction starts for it.
        "evictionMinimumReclaim" eviction_minimum_reclaim: BTreeMap<String, String> = BTreeMap::new();
        /// `localStorageCapacityIsolation`: pods over their emptyDir
        /// `sizeLimit` or `ephemeral-storage` limits are evicted. Default true.
        "localStorageCapacityIsolation" local_storage_capacity_isolation: bool = true;
        /// `containerLogMaxSize`: a running container's log file is rotated
        /// once it reaches this size (a quantity, see
        /// [`KubeletConfiguration::container_log_max_bytes`]; negative: never).
        /// Default 10Mi.
        "containerLogMaxSize" container_log_max_size: String = "10Mi".into(), zero_is_unset;
        /// `containerLogMaxFiles`: the most log files a container keeps, the
        /// one written included (at least 2). Default 5.
        "containerLogMaxFiles" container_log_max_files: i32 = 5;
        /// `containerLogMaxWorkers`: containers whose logs are rotated at once.
        /// Default 1.
        "containerLogMaxWorkers" container_log_max_workers: i32 = 1;
        /// `containerLogMonitorInterval`: how often log sizes are checked (at
        /// least 3s). Default 10s.
        "containerLogMonitorInterval" container_log_monitor_interval: Duration = Duration::from_secs(10), zero_is_unset;
        /// `enableSystemLogHandler`: serve `/logs/` (the node's /var/log).
        /// Default true.
        "enableSystemLogHandler" enable_system_log_handler: bool = true;
        /// `enableSystemLogQuery`: the node log query on `/logs/?query=`.
        /// Default false.
        "enableSystemLogQuery" enable_system_log_query: bool = false;
        /// `kernelMemcgNotification`: the eviction manager also wakes when the
        /// kernel says memory crossed a threshold (cgroup v1). Default false.
        "kernelMemcgNotification" kernel_memcg_notification: bool = false;
        /// `enableServer`: serve the kubelet API on `port` (the read-only
        /// port and healthz are apart). Default true.
        "enableServer" enable_server: bool = true;
        /// `oomScoreAdj`: the kubelet's own oom_score_adj, in [-1000, 1000].
        /// Default -999.
        "oomScoreAdj" oom_score_adj: i32 = -999;
        /// `nodeLeaseDurationSeconds`: the node Lease's duration, renewed
        /// every quarter of it. Default 40.
        "nodeLeaseDurationSeconds" node_lease_duration_seconds: i32 = 40, zero_is_unset;
        /// `nodeStatusMaxImages`: the most images node status lists, the
        /// largest first (-1: all). Default 50.
        "nodeStatusMaxImages" node_status_max_images: i32 = 50;
        /// `maxOpenFiles`: the kubelet's RLIMIT_NOFILE (soft and hard).
        /// Default 1000000.
        "maxOpenFiles" max_open_files: i64 = 1_000_000, zero_is_unset;
        /// `podsPerCore`: at most this many pods per core (capacity `pods`
        /// is the smaller of it and maxPods); 0 (default): maxPods alone.
        "podsPerCore" pods_per_core: i32 = 0;
        /// `volumeStatsAggPeriod`: how long a volume's measured usage is
        /// used again before its directory is walked anew. Default 1m.
        "volumeStatsAggPeriod" volume_stats_agg_period: Duration = Duration::from_secs(60), zero_is_unset;
        /// `registryPullQPS`: image pulls started a second (0: no limit); a
        /// pull over the budget fails with `pull QPS exceeded`. Default 5.
        "registryPullQPS" registry_pull_qps: i32 = 5;
        /// `registryBurst`: pulls allowed at once over the budget. Default 10.
        "registryBurst" registry_burst: i32 = 10, zero_is_unset;
        /// `crashLoopBackOff`.
        "crashLoopBackOff" crash_loop_back_off: CrashLoopBackOffConfig = CrashLoopBackOffConfig::default();
        /// `userNamespaces`.
        "userNamespaces" user_namespaces: UserNamespaces = UserNamespaces::default();
        /// `memorySwap`: containers' swap, where the host has a swap
        /// controller.
        "memorySwap" memory_swap: MemorySwapConfiguration = MemorySwapConfiguration::default();
        /// `configMapAndSecretChangeDetectionStrategy`: `Watch` (default),
        /// `Cache` or `Get`.
        "configMapAndSecretChangeDetectionStrategy" config_map_and_secret_change_detection_strategy: String = "Watch".into(), zero_is_unset;
        /// `defaultPodSysctls`: needs the alpha DefaultPodSysctls gate, off
        /// in v1.37 (as upstream, a non-empty map stops start-up).
        "defaultPodSysctls" default_pod_sysctls: BTreeMap<String, String> = BTreeMap::new();
        /// `memoryThrottlingFactor`: needs the alpha MemoryQoS gate, off in
        /// v1.37 (as upstream, a value other than 0.9 stops start-up).
        "memoryThrottlingFactor" memory_throttling_factor: Option<f64> = None;
        /// `memoryReservationPolicy`: `None` (default); `TieredReservation`
        /// needs the alpha MemoryQoS gate, off in v1.37.
        "memoryReservationPolicy" memory_reservation_policy: String = "None".into(), zero_is_unset;
        /// `singleProcessOOMKill`: unset or true, an OOM kill takes one
        /// process (cgroup v1's only behaviour); false (a container's whole
        /// group, memory.oom.group) is refused: on cgroup v1 as upstream
        /// refuses it, on cgroup v2 as not built yet.
        "singleProcessOOMKill" single_process_oom_kill: Option<bool> = None;
        /// `failSwapOn`: start-up stops on a node with swap on. Default true.
        "failSwapOn" fail_swap_on: bool = true;
        /// `protectKernelDefaults`: start-up stops when a kernel tunable the
        /// kubelet needs differs (default false: rkubelet sets them, as
        /// upstream; see [`crate::sysctl::KERNEL_TUNABLES`]).
        "protectKernelDefaults" protect_kernel_defaults: bool = false;
        /// `rotateCertificates`: the client certificate is renewed at 70–90 %
        /// of its life through CertificateSigningRequests.
        "rotateCertificates" rotate_certificates: bool = false;
        /// `serverTLSBootstrap`: the kubelet API's certificate comes from a
        /// `kubernetes.io/kubelet-serving` CSR for the node's addresses
        /// (approved by the cluster's operator or an approver), and is
        /// rotated as the client one; no handshake succeeds before it is
        /// issued.
        "serverTLSBootstrap" server_tls_bootstrap: bool = false;
        /// `runOnce`: refused when true, as upstream's validation refuses it
        /// (its run-once mode is gone).
        "runOnce" run_once: bool = false;
        /// `enableControllerAttachDetach`: the attach/detach controller
        /// attaches the node's volumes (the Node is annotated
        /// `volumes.kubernetes.io/controller-managed-attach-detach`, and a
        /// CSI volume waits for its VolumeAttachment); false, the kubelet
        /// attaching volumes itself, is refused.
        "enableControllerAttachDetach" enable_controller_attach_detach: bool = true;
        /// `featureGates`: upstream's gates by name (see [`gates`]); flags
        /// (`--feature-gates`) win per gate.
        "featureGates" feature_gates: BTreeMap<String, bool> = BTreeMap::new();
        /// `providerID`: the Node's `spec.providerID` at registration.
        "providerID" provider_id: String = String::new();
        /// `registerWithTaints`: the Node's taints at registration
        /// (`--register-with-taints` replaces them).
        "registerWithTaints" register_with_taints: Vec<k8s_openapi::api::core::v1::Taint> = Vec::new();
        /// `podCIDR`: the pods' CIDR given to the runtime (UpdateRuntimeConfig)
        /// until the Node's `spec.podCIDRs` say otherwise (cluster mode).
        "podCIDR" pod_cidr: String = String::new();
        /// `cpuManagerPolicy`: `none` (every container shares the CPUs
        /// allocatable leaves) or `static` (Guaranteed pods' integer CPU
        /// requests get CPUs of their own; see [`crate::cpumanager`]).
        "cpuManagerPolicy" cpu_manager_policy: String = "none".into(), zero_is_unset;
        /// `cpuManagerPolicyOptions`: the static policy's
        /// `full-pcpus-only` and `strict-cpu-reservation`; none with the
        /// `none` policy (upstream refuses them there too).
        "cpuManagerPolicyOptions" cpu_manager_policy_options: BTreeMap<String, String> = BTreeMap::new();
        /// `cpuManagerReconcilePeriod`: how often the static CPU manager
        /// sets the running containers' cpusets; no loop runs under the
        /// `none` policy, as upstream's. Default 10s.
        "cpuManagerReconcilePeriod" cpu_manager_reconcile_period: Duration = Duration::from_secs(10), zero_is_unset;
        /// `memoryManagerPolicy`: `None`, or `Static`: a Guaranteed pod's
        /// containers get their memory and hugepages from NUMA nodes chosen
        /// with the topology manager (their `cpuset.mems`).
        "memoryManagerPolicy" memory_manager_policy: String = "None".into(), zero_is_unset;
        /// `reservedMemory`: what each NUMA node keeps for the system under
        /// the Static memory manager; per kind of memory they must add up
        /// to systemReserved, kubeReserved and the hard eviction threshold.
        "reservedMemory" reserved_memory: Vec<MemoryReservation> = Vec::new();
        /// `topologyManagerPolicy`: `none` (no NUMA alignment),
        /// `best-effort`, `restricted` or `single-numa-node`: how the
        /// devices' and exclusive CPUs' NUMA nodes are aligned at admission.
        "topologyManagerPolicy" topology_manager_policy: String = "none".into(), zero_is_unset;
        /// `topologyManagerScope`: `container` or `pod`; either aligns
        /// nothing under the `none` policy, as upstream's.
        "topologyManagerScope" topology_manager_scope: String = "container".into(), zero_is_unset;
        /// `topologyManagerPolicyOptions`: `prefer-closest-numa-nodes`,
        /// `max-allowable-numa-nodes` (checked as the manager starts; no
        /// effect under `none`, as upstream's).
        "topologyManagerPolicyOptions" topology_manager_policy_options: BTreeMap<String, String> = BTreeMap::new();
        /// `reservedSystemCPUs`: CPUs kept for the system (`0-1,4`): their
        /// count replaces systemReserved's and kubeReserved's cpu, as
        /// upstream's; which CPUs matters only to the static CPU manager.
        "reservedSystemCPUs" reserved_system_cpus: String = String::new();
        /// `failCgroupV1`: start-up stops on a cgroup v1 host (upstream's
        /// default true; set false to run on one).
        "failCgroupV1" fail_cgroup_v1: bool = true;
        /// `logging`: the log format and verbosity.
        "logging" logging: LoggingConfiguration = LoggingConfiguration::default();
        /// `shutdownGracePeriod`: with systemd-logind, how long the node's
        /// shutdown is delayed for its pods to stop (0, the default: not
        /// at all); see [`crate::nodeshutdown`].
        "shutdownGracePeriod" shutdown_grace_period: Duration = Duration::ZERO;
        /// `shutdownGracePeriodCriticalPods`: the part of it kept for
        /// critical pods, stopped last. Default 0.
        "shutdownGracePeriodCriticalPods" shutdown_grace_period_critical_pods: Duration = Duration::ZERO;
        /// `shutdownGracePeriodByPodPriority`: instead of the two above, the
        /// grace of each priority class (pods stopped from the lowest).
        "shutdownGracePeriodByPodPriority" shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority> = Vec::new();
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
    /// A configuration that fails validation, in upstream's own words.
    #[error("invalid configuration: {0}")]
    Rejected(String),
    /// failCgroupV1 on a cgroup v1 host.
    #[error(
        "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release"
    )]
    CgroupV1,
}

/// `kind` and `apiVersion` must be upstream's.
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
    decode_map(read_document(content)?)
}

/// A KubeletConfiguration document (YAML or JSON) as a mapping, its header
/// checked.
fn read_document(content: &str) -> Result<Map<String, Value>, ConfigError> {
    let doc: Value =
        serde_saphyr::from_str(content).map_err(|e| ConfigError::Syntax(e.to_string()))?;
    let map = match doc {
        Value::Object(map) => map,
        Value::Null => return Err(ConfigError::NotAMapping("an empty document".to_owned())),
        other => return Err(ConfigError::NotAMapping(describe(&other))),
    };
    check_header(&map)?;
    Ok(map)
}

/// The `--config` file (if any) with the `--config-dir` drop-ins merged
/// over it in the order given, as upstream's mergeKubeletConfigurations:
/// each drop-in is a JSON merge patch (RFC 7386: mappings merge key by key,
/// lists are replaced whole, `null` resets a field to its default) over the
/// defaulted configuration. Returns it with the ignored upstream fields
/// present in any layer.
pub fn parse_kubelet_config_layers(
    main: Option<&str>,
    dropins: &[(String, String)],
) -> Result<(KubeletConfiguration, Vec<String>), DropinError> {
    let (cfg, ignored, mut raw) = match main {
        Some(content) => {
            let map = read_document(content).map_err(DropinError::Main)?;
            let raw = map.clone();
            let (cfg, ignored) = decode_map(map).map_err(DropinError::Main)?;
            (cfg, ignored, raw)
        }
        None => (KubeletConfiguration::default(), Vec::new(), Map::new()),
    };
    if dropins.is_empty() {
        return Ok((cfg, ignored));
    }
    // The base: the defaulted configuration, and the upstream fields it does
    // not implement as the file gave them.
    raw.retain(|k, _| ignored.contains(k));
    let mut merged = cfg.to_v1beta1_json();
    if let Value::Object(m) = &mut merged {
        m.extend(raw);
    }
    for (path, content) in dropins {
        let map = read_document(content).map_err(|e| DropinError::File {
            path: path.clone(),
            source: e,
        })?;
        json_patch::merge(&mut merged, &Value::Object(map));
    }
    let Value::Object(map) = merged else {
        unreachable!("a merge patch of mappings is a mapping");
    };
    decode_map(map).map_err(DropinError::Merged)
}

/// Why the configuration file and its drop-ins could not be loaded, in
/// upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum DropinError {
    #[error(transparent)]
    Main(ConfigError),
    #[error("failed to load kubelet dropin file, path: {path}, error: {source}")]
    File {
        path: String,
        #[source]
        source: ConfigError,
    },
    #[error("failed to merge kubelet configs: {0}")]
    Merged(#[source] ConfigError),
}

/// Decode a checked document's fields.
fn decode_map(
    mut map: Map<String, Value>,
) -> Result<(KubeletConfiguration, Vec<String>), ConfigError> {
    map.remove("kind");
    map.remove("apiVersion");
    let serialize_given = map.get("serializeImagePulls").is_some_and(|v| !v.is_null());
    let mut cfg = KubeletConfiguration::decode_from(&mut map, "")?;
    let mut ignored = Vec::new();
    for key in map.into_iter().map(|(k, _)| k) {
        if !UPSTREAM_FIELDS.contains(&key.as_str()) {
            return Err(ConfigError::UnknownField(key));
        }
        ignored.push(key);
    }
    cfg.complete(serialize_given);
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
    /// Whether feature gate `name` is on: its value in `featureGates`, else
    /// upstream's default (a valid configuration names only known gates).
    pub fn feature_enabled(&self, name: &str) -> bool {
        self.feature_gates
            .get(name)
            .copied()
            .or_else(|| gates::gate(name).map(|g| g.default))
            .unwrap_or(false)
    }

    /// The checks upstream makes of the host's cgroup version
    /// (validateKubeletOSConfiguration), on cgroup v`version`.
    pub fn validate_for_cgroups(&self, version: u8) -> Result<(), ConfigError> {
        if self.fail_cgroup_v1 && version == 1 {
            return Err(ConfigError::CgroupV1);
        }
        if version == 1 && self.memory_swap.swap_behavior == crate::swap::LIMITED_SWAP {
            return Err(ConfigError::Rejected(
                "swap feature is enabled and LimitedSwap but it is only supported with cgroupv2"
                    .to_owned(),
            ));
        }
        if self.single_process_oom_kill == Some(false) {
            return Err(ConfigError::Rejected(if version == 1 {
                "singleProcessOOMKill must not be explicitly set to false when using cgroup v1"
                    .to_owned()
            } else {
                "singleProcessOOMKill: false (memory.oom.group for each container) is not implemented by rkubelet yet"
                    .to_owned()
            }));
        }
        Ok(())
    }

    /// The node's pod capacity on `cores` CPUs: maxPods, or podsPerCore per
    /// core when that is smaller (upstream's MachineInfo setter).
    pub fn pod_capacity(&self, cores: i64) -> u32 {
        match u32::try_from(self.pods_per_core) {
            Ok(per_core) if per_core > 0 => {
                let by_cores = u32::try_from(cores.max(0).saturating_mul(i64::from(per_core)))
                    .unwrap_or(u32::MAX);
                by_cores.min(self.max_pods)
            }
            _ => self.max_pods,
        }
    }

    /// Where the CRI ImageService answers: imageServiceEndpoint, else
    /// containerRuntimeEndpoint (upstream's PreInitRuntimeService).
    pub fn image_endpoint(&self) -> &str {
        if self.image_service_endpoint.is_empty() {
            &self.container_runtime_endpoint
        } else {
            &self.image_service_endpoint
        }
    }

    /// How many images node status lists (`None`: all).
    pub fn node_status_max_images(&self) -> Option<usize> {
        usize::try_from(self.node_status_max_images).ok()
    }
}

/// A reservation in the flags' form, `cpu=100m,memory=1Gi`
/// (--kube-reserved, --system-reserved).
pub fn parse_reservation(s: &str) -> Result<BTreeMap<String, i64>, ReservationError> {
    let mut out = BTreeMap::new();
    for pair in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| ReservationError::Pair(pair.to_owned()))?;
        out.insert(k.trim().to_owned(), reserved_amount(k.trim(), v.trim())?);
    }
    Ok(out)
}

impl KubeletConfiguration {
    /// Upstream's defaulting that reads several fields, after decoding:
    /// serializeImagePulls not given follows maxParallelImagePulls, and the
    /// default hard thresholds fill the signals a given evictionHard
    /// leaves out when mergeDefaultEvictionSettings asks. clusterDNS
    /// addresses are written as upstream's net.ParseIP prints them (what is
    /// not an address is left for [`KubeletConfiguration::validate`]).
    fn complete(&mut self, serialize_given: bool) {
        for ip in &mut self.cluster_dns {
            if let Ok(parsed) = ip.parse::<std::net::IpAddr>() {
                *ip = parsed.to_string();
            }
        }
        if !serialize_given {
            self.serialize_image_pulls = self.max_parallel_image_pulls.is_none_or(|n| n < 2);
        }
        if self.merge_default_eviction_settings {
            for (k, v) in crate::eviction::DEFAULT_EVICTION_HARD {
                self.eviction_hard
                    .entry((*k).to_owned())
                    .or_insert_with(|| (*v).to_owned());
            }
        }
    }

    /// containerLogMaxSize in bytes, parsed as upstream's container log
    /// manager parses it; None when negative: rotation is off, as
    /// upstream's stub log manager leaves it.
    pub fn container_log_max_bytes(&self) -> Result<Option<u64>, ConfigError> {
        let text = &self.container_log_max_size;
        let bytes = parse_bytes(&Quantity(text.clone())).map_err(|e| {
            ConfigError::Rejected(format!(
                "failed to initialize container log manager: failed to parse container log max size {text:?}: {}",
                e.message
            ))
        })?;
        Ok(u64::try_from(bytes).ok())
    }

    /// Every eviction threshold the configuration asks for (hard, then
    /// soft), as upstream's ParseThresholdConfig reads them.
    pub fn eviction_thresholds(
        &self,
    ) -> Result<Vec<crate::eviction::Threshold>, crate::eviction::ThresholdError> {
        crate::eviction::parse_threshold_config(crate::eviction::Statements {
            hard: &self.eviction_hard,
            soft: &self.eviction_soft,
            soft_grace_period: &self.eviction_soft_grace_period,
            minimum_reclaim: &self.eviction_minimum_reclaim,
            enforce_pods: self
                .enforce_node_allocatable
                .iter()
                .any(|k| k == ENFORCE_PODS),
        })
    }

    /// The effective configuration as upstream's `/configz` shows it: the
    /// v1beta1 field names, durations as Go durations.
    pub fn to_v1beta1_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("kind".to_owned(), KIND.into());
        map.insert("apiVersion".to_owned(), API_VERSION.into());
        self.encode_into(&mut map);
        Value::Object(map)
    }

    /// How many image pulls may run at once; None for no limit.
    pub fn image_pull_limit(&self) -> Option<usize> {
        if self.serialize_image_pulls {
            return Some(1);
        }
        self.max_parallel_image_pulls
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n >= 1)
    }

    /// imagePullCredentialsVerificationPolicy with its allowlist.
    pub fn image_pull_verification(&self) -> Result<VerificationPolicy, ConfigError> {
        VerificationPolicy::new(
            &self.image_pull_credentials_verification_policy,
            &self.preloaded_images_verification_allowlist,
        )
        .map_err(|e| ConfigError::Rejected(e.to_string()))
    }

    /// Whether `key` is in enforceNodeAllocatable.
    pub fn enforces(&self, key: &str) -> bool {
        self.enforce_node_allocatable.iter().any(|v| v == key)
    }
}
