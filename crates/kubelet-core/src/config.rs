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

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde_json::{Map, Value};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::duration::{format_go_duration, parse_go_duration};
use crate::pullrecords::VerificationPolicy;
use crate::quantity::{parse_bytes, parse_cpu_millis_nearest};

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
    "port",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "authentication",
    "authorization",
    "enableDebuggingHandlers",
    "streamingConnectionIdleTimeout",
    "clusterDNS",
    "clusterDomain",
    "resolvConf",
    "seccompDefault",
    "allowedUnsafeSysctls",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "cgroupRoot",
    "cgroupsPerQOS",
    "podPidsLimit",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "systemReserved",
    "kubeReserved",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "enforceNodeAllocatable",
    "evictionHard",
    "mergeDefaultEvictionSettings",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "localStorageCapacityIsolation",
    "kernelMemcgNotification",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
];

/// Every other field of upstream's v1beta1 KubeletConfiguration: accepted,
/// not implemented, reported by [`parse_kubelet_config_reporting`].
pub const IGNORED_UPSTREAM_FIELDS: &[&str] = &[
    "enableServer",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "rotateCertificates",
    "serverTLSBootstrap",
    "registryPullQPS",
    "registryBurst",
    "enableContentionProfiling",
    "oomScoreAdj",
    "nodeLeaseDurationSeconds",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
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
    "runOnce",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "featureGates",
    "failSwapOn",
    "memorySwap",
    "configMapAndSecretChangeDetectionStrategy",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "volumePluginDir",
    "providerID",
    "logging",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "memoryThrottlingFactor",
    "registerWithTaints",
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

/// `authentication`: how the kubelet API identifies callers.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletAuthentication {
    /// `x509.clientCAFile`: CA bundle verifying client certificates; none by default.
    pub client_ca_file: Option<PathBuf>,
    /// `webhook.enabled`: bearer tokens checked with TokenReviews. Default true.
    pub webhook_enabled: bool,
    /// `webhook.cacheTTL`: how long TokenReview answers are cached. Default 2m.
    pub webhook_cache_ttl: Duration,
    /// `anonymous.enabled`: requests without credentials run as
    /// system:anonymous. Default false (v1beta1).
    pub anonymous_enabled: bool,
}

impl Default for KubeletAuthentication {
    fn default() -> Self {
        KubeletAuthentication {
            client_ca_file: None,
            webhook_enabled: true,
            webhook_cache_ttl: Duration::from_secs(120),
            anonymous_enabled: false,
        }
    }
}

/// `authorization`: how the kubelet API authorizes requests.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletAuthorization {
    /// `mode`: Webhook (default) or AlwaysAllow.
    pub mode: AuthorizationMode,
    /// `webhook.cacheAuthorizedTTL`: how long allowed decisions are cached. Default 5m.
    pub cache_authorized_ttl: Duration,
    /// `webhook.cacheUnauthorizedTTL`: how long denied decisions are cached. Default 30s.
    pub cache_unauthorized_ttl: Duration,
}

impl Default for KubeletAuthorization {
    fn default() -> Self {
        KubeletAuthorization {
            mode: AuthorizationMode::Webhook,
            cache_authorized_ttl: Duration::from_secs(300),
            cache_unauthorized_ttl: Duration::from_secs(30),
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
    /// `port`: the port of the kubelet API (HTTPS). Default 10250.
    pub port: u16,
    /// `tlsCertFile`: the serving certificate; none: a self-signed one is made.
    pub tls_cert_file: Option<PathBuf>,
    /// `tlsPrivateKeyFile`: the key of `tlsCertFile`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `tlsCipherSuites`: TLS 1.2 suites allowed (names from
    /// [`TLS_CIPHER_SUITES`]); empty: all of them.
    pub tls_cipher_suites: Vec<String>,
    /// `tlsMinVersion`: default VersionTLS12.
    pub tls_min_version: TlsMinVersion,
    /// `authentication`.
    pub authentication: KubeletAuthentication,
    /// `authorization`.
    pub authorization: KubeletAuthorization,
    /// `enableDebuggingHandlers`: serve exec/attach/portForward/containerLogs/
    /// runningpods (off: 405 "Debug endpoints are disabled."). Default true.
    pub enable_debugging_handlers: bool,
    /// `streamingConnectionIdleTimeout`: a streaming connection (exec, attach,
    /// port-forward) with no traffic for this long is closed. Default 4h.
    pub streaming_connection_idle_timeout: Duration,
    /// `tracing`: where spans go over OTLP; none: not exported.
    pub tracing: Option<TracingConfiguration>,
    /// `clusterDNS`: the nameservers of ClusterFirst pods (IP addresses).
    /// None: such pods fall back to the Default policy, with an event.
    pub cluster_dns: Vec<String>,
    /// `clusterDomain`: the cluster's DNS domain, searched by ClusterFirst
    /// pods and in their FQDNs. None by default.
    pub cluster_domain: String,
    /// `resolvConf`: the node's resolver file, the base of pods' resolv.conf.
    /// Default /etc/resolv.conf; empty: none (pods of the Default policy
    /// get the node's loopback).
    pub resolv_conf: String,
    /// `seccompDefault`: containers that name no seccomp profile run with
    /// the runtime's default one (else Unconfined). Default false.
    pub seccomp_default: bool,
    /// `allowedUnsafeSysctls`: sysctls (or `prefix*` patterns) pods may set
    /// besides the safe ones; each must be known to be namespaced.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// `serializeImagePulls`: one image pull at a time. Unset in a file:
    /// true unless maxParallelImagePulls allows more than one (upstream's
    /// defaulting).
    pub serialize_image_pulls: bool,
    /// `maxParallelImagePulls`: at most this many pulls at once when they
    /// are not serialized (unset: no limit).
    pub max_parallel_image_pulls: Option<i64>,
    /// `imageGCHighThresholdPercent`: image GC runs once the image file
    /// system is this full (100: never for space). Default 85.
    pub image_gc_high_threshold_percent: i64,
    /// `imageGCLowThresholdPercent`: ... and frees down to this. Default 80.
    pub image_gc_low_threshold_percent: i64,
    /// `imageMinimumGCAge`: an image seen for less is never removed.
    /// Default 2m.
    pub image_minimum_gc_age: Duration,
    /// `imageMaximumGCAge`: an image unused for longer is removed whatever
    /// the space (0: never). Default 0.
    pub image_maximum_gc_age: Duration,
    /// `imagePullCredentialsVerificationPolicy`: which images on the node a
    /// pod may use without its credentials being checked. Default
    /// NeverVerifyPreloadedImages (those the kubelet did not pull).
    pub image_pull_credentials_verification_policy: String,
    /// `preloadedImagesVerificationAllowlist`: the images (or `host/path/*`
    /// prefixes) NeverVerifyAllowlistedImages lets any pod use.
    pub preloaded_images_verification_allowlist: Vec<String>,
    /// `cgroupsPerQOS`: pods get QoS and pod cgroups under `kubepods`.
    /// Default true.
    pub cgroups_per_qos: bool,
    /// `cgroupRoot`: the cgroup `kubepods` is made under (it must exist).
    /// Default the root.
    pub cgroup_root: String,
    /// `podPidsLimit`: the most processes a pod's cgroup holds (-1: no
    /// limit). Default -1.
    pub pod_pids_limit: i64,
    /// `cpuCFSQuota`: cpu limits are enforced with a CFS quota. Default true.
    pub cpu_cfs_quota: bool,
    /// `cpuCFSQuotaPeriod`: the CFS period of cpu limits. Default 100ms.
    pub cpu_cfs_quota_period: Duration,
    /// `systemReserved`: what the node keeps for the system (cpu in
    /// milli-CPUs, memory and ephemeral-storage in bytes, pid).
    pub system_reserved: BTreeMap<String, i64>,
    /// `kubeReserved`: what the node keeps for Kubernetes' daemons.
    pub kube_reserved: BTreeMap<String, i64>,
    /// `systemReservedCgroup`: the cgroup systemReserved is enforced on.
    pub system_reserved_cgroup: String,
    /// `kubeReservedCgroup`: the cgroup kubeReserved is enforced on.
    pub kube_reserved_cgroup: String,
    /// `enforceNodeAllocatable`: `pods` (the kubepods cgroup limited to
    /// allocatable), `system-reserved`, `kube-reserved` (and their
    /// `-compressible` forms), or `none`. Default [pods].
    pub enforce_node_allocatable: Vec<String>,
    /// `evictionHard`: hard eviction thresholds by signal; upstream's
    /// defaults when absent (see [`crate::eviction::DEFAULT_EVICTION_HARD`]).
    pub eviction_hard: BTreeMap<String, String>,
    /// `mergeDefaultEvictionSettings`: the defaults fill the signals a
    /// given evictionHard leaves out. Default false.
    pub merge_default_eviction_settings: bool,
    /// `evictionSoft`: soft eviction thresholds by signal; each needs its
    /// grace period in `evictionSoftGracePeriod`.
    pub eviction_soft: BTreeMap<String, String>,
    /// `evictionSoftGracePeriod`: how long each soft threshold must hold
    /// before a pod is evicted for it (Go durations).
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// `evictionPressureTransitionPeriod`: how long a pressure condition
    /// stays after its threshold stopped being met. Default 5m.
    pub eviction_pressure_transition_period: Duration,
    /// `evictionMaxPodGracePeriod`: the most grace (seconds) a pod evicted
    /// for a soft threshold gets. Default 0.
    pub eviction_max_pod_grace_period: i64,
    /// `evictionMinimumReclaim`: how far past its threshold a signal must
    /// be brought once eviction starts for it.
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// `localStorageCapacityIsolation`: pods over their emptyDir
    /// `sizeLimit` or `ephemeral-storage` limits are evicted. Default true.
    pub local_storage_capacity_isolation: bool,
    /// `containerLogMaxSize`: a running container's log file is rotated
    /// once it reaches this size (a quantity, see
    /// [`KubeletConfiguration::container_log_max_bytes`]; negative: never).
    /// Default 10Mi.
    pub container_log_max_size: String,
    /// `containerLogMaxFiles`: the most log files a container keeps, the
    /// one written included (at least 2). Default 5.
    pub container_log_max_files: i64,
    /// `containerLogMaxWorkers`: containers whose logs are rotated at once.
    /// Default 1.
    pub container_log_max_workers: i64,
    /// `containerLogMonitorInterval`: how often log sizes are checked (at
    /// least 3s). Default 10s.
    pub container_log_monitor_interval: Duration,
    /// `enableSystemLogHandler`: serve `/logs/` (the node's /var/log).
    /// Default true.
    pub enable_system_log_handler: bool,
    /// `enableSystemLogQuery`: the node log query on `/logs/?query=`.
    /// Default false.
    pub enable_system_log_query: bool,
    /// `kernelMemcgNotification`: the eviction manager also wakes when the
    /// kernel says memory crossed a threshold (cgroup v1). Default false.
    pub kernel_memcg_notification: bool,
}

/// Upstream's `TracingConfiguration`: an OTLP/gRPC collector and the share of
/// traces sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracingConfiguration {
    /// `endpoint`: the collector, `host:port` (upstream's default
    /// `localhost:4317` when the section is present without one).
    pub endpoint: String,
    /// `samplingRatePerMillion`: traces sampled per million (upstream's
    /// default 0: none, unless a parent span was sampled).
    pub sampling_rate_per_million: u32,
}

impl Default for TracingConfiguration {
    fn default() -> Self {
        TracingConfiguration {
            endpoint: "localhost:4317".into(),
            sampling_rate_per_million: 0,
        }
    }
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
            port: 10250,
            tls_cert_file: None,
            tls_private_key_file: None,
            tls_cipher_suites: Vec::new(),
            tls_min_version: TlsMinVersion::Tls12,
            authentication: KubeletAuthentication::default(),
            authorization: KubeletAuthorization::default(),
            enable_debugging_handlers: true,
            streaming_connection_idle_timeout: Duration::from_secs(4 * 3600),
            tracing: None,
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: "/etc/resolv.conf".to_owned(),
            seccomp_default: false,
            allowed_unsafe_sysctls: Vec::new(),
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            image_maximum_gc_age: Duration::ZERO,
            image_pull_credentials_verification_policy: "NeverVerifyPreloadedImages".into(),
            preloaded_images_verification_allowlist: Vec::new(),
            cgroups_per_qos: true,
            cgroup_root: String::new(),
            pod_pids_limit: -1,
            cpu_cfs_quota: true,
            cpu_cfs_quota_period: Duration::from_millis(100),
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            system_reserved_cgroup: String::new(),
            kube_reserved_cgroup: String::new(),
            enforce_node_allocatable: vec![ENFORCE_PODS.to_owned()],
            eviction_hard: crate::eviction::default_eviction_hard(),
            merge_default_eviction_settings: false,
            eviction_soft: BTreeMap::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_pressure_transition_period: Duration::from_secs(300),
            eviction_max_pod_grace_period: 0,
            eviction_minimum_reclaim: BTreeMap::new(),
            local_storage_capacity_isolation: true,
            kernel_memcg_notification: false,
            container_log_max_size: "10Mi".into(),
            container_log_max_files: 5,
            container_log_max_workers: 1,
            container_log_monitor_interval: Duration::from_secs(10),
            enable_system_log_handler: true,
            enable_system_log_query: false,
        }
    }
}

impl KubeletConfiguration {
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
    pub fn eviction_thresholds(&self) -> Result<Vec<crate::eviction::Threshold>, String> {
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
    pub fn to_v1beta1_json(&self) -> serde_json::Value {
        use crate::duration::format_go_duration as d;
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        serde_json::json!({
            "kind": KIND,
            "apiVersion": API_VERSION,
            "staticPodPath": path(&self.static_pod_path),
            "syncFrequency": d(self.sync_frequency),
            "fileCheckFrequency": d(self.file_check_frequency),
            "containerRuntimeEndpoint": self.container_runtime_endpoint,
            "runtimeRequestTimeout": d(self.runtime_request_timeout),
            "podLogsDir": self.pod_logs_dir.display().to_string(),
            "healthzBindAddress": self.healthz_bind_address,
            "healthzPort": self.healthz_port,
            "readOnlyPort": self.read_only_port,
            "address": self.address,
            "port": self.port,
            "maxPods": self.max_pods,
            "cgroupDriver": self.cgroup_driver.as_str(),
            "kubeAPIQPS": self.kube_api_qps,
            "kubeAPIBurst": self.kube_api_burst,
            "eventRecordQPS": self.event_record_qps,
            "eventBurst": self.event_burst,
            "nodeStatusUpdateFrequency": d(self.node_status_update_frequency),
            "nodeStatusReportFrequency": d(self.node_status_report_frequency),
            "registerNode": self.register_node,
            "tlsCertFile": path(&self.tls_cert_file),
            "tlsPrivateKeyFile": path(&self.tls_private_key_file),
            "tlsCipherSuites": self.tls_cipher_suites,
            "tlsMinVersion": self.tls_min_version.as_str(),
            "authentication": {
                "x509": {"clientCAFile": path(&self.authentication.client_ca_file)},
                "webhook": {
                    "enabled": self.authentication.webhook_enabled,
                    "cacheTTL": d(self.authentication.webhook_cache_ttl),
                },
                "anonymous": {"enabled": self.authentication.anonymous_enabled},
            },
            "authorization": {
                "mode": self.authorization.mode.as_str(),
                "webhook": {
                    "cacheAuthorizedTTL": d(self.authorization.cache_authorized_ttl),
                    "cacheUnauthorizedTTL": d(self.authorization.cache_unauthorized_ttl),
                },
            },
            "enableDebuggingHandlers": self.enable_debugging_handlers,
            "streamingConnectionIdleTimeout": d(self.streaming_connection_idle_timeout),
            "seccompDefault": self.seccomp_default,
            "allowedUnsafeSysctls": self.allowed_unsafe_sysctls,
            "serializeImagePulls": self.serialize_image_pulls,
            "maxParallelImagePulls": self.max_parallel_image_pulls,
            "imageGCHighThresholdPercent": self.image_gc_high_threshold_percent,
            "imageGCLowThresholdPercent": self.image_gc_low_threshold_percent,
            "imageMinimumGCAge": d(self.image_minimum_gc_age),
            "imageMaximumGCAge": d(self.image_maximum_gc_age),
            "imagePullCredentialsVerificationPolicy": self.image_pull_credentials_verification_policy,
            "preloadedImagesVerificationAllowlist": self.preloaded_images_verification_allowlist,
            "cgroupsPerQOS": self.cgroups_per_qos,
            "cgroupRoot": self.cgroup_root,
            "podPidsLimit": self.pod_pids_limit,
            "cpuCFSQuota": self.cpu_cfs_quota,
            "cpuCFSQuotaPeriod": d(self.cpu_cfs_quota_period),
            "systemReserved": reserved_json(&self.system_reserved),
            "kubeReserved": reserved_json(&self.kube_reserved),
            "systemReservedCgroup": self.system_reserved_cgroup,
            "kubeReservedCgroup": self.kube_reserved_cgroup,
            "enforceNodeAllocatable": self.enforce_node_allocatable,
            "evictionHard": self.eviction_hard,
            "mergeDefaultEvictionSettings": self.merge_default_eviction_settings,
            "evictionSoft": self.eviction_soft,
            "evictionSoftGracePeriod": self.eviction_soft_grace_period,
            "evictionPressureTransitionPeriod": d(self.eviction_pressure_transition_period),
            "evictionMaxPodGracePeriod": self.eviction_max_pod_grace_period,
            "evictionMinimumReclaim": self.eviction_minimum_reclaim,
            "localStorageCapacityIsolation": self.local_storage_capacity_isolation,
            "kernelMemcgNotification": self.kernel_memcg_notification,
            "containerLogMaxSize": self.container_log_max_size,
            "containerLogMaxFiles": self.container_log_max_files,
            "containerLogMaxWorkers": self.container_log_max_workers,
            "containerLogMonitorInterval": d(self.container_log_monitor_interval),
            "enableSystemLogHandler": self.enable_system_log_handler,
            "enableSystemLogQuery": self.enable_system_log_query,
            "tracing": self.tracing.as_ref().map(|t| serde_json::json!({
                "endpoint": t.endpoint,
                "samplingRatePerMillion": t.sampling_rate_per_million,
            })),
        })
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

/// A 64-bit integer field; `None` when null.
fn decode_int64(field: &str, v: &Value) -> Result<Option<i64>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| wrong_type(field, "a 64-bit integer", v)),
        other => Err(wrong_type(field, "a 64-bit integer", other)),
    }
}

/// The resources `systemReserved` and `kubeReserved` may name
/// (upstream's parseResourceList).
pub const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// A reservation (`cpu: 100m`, `memory: 1Gi`, `pid: "1000"`): each amount
/// parsed, cpu in milli-CPUs, none negative, only what may be reserved.
fn decode_reservation(field: &str, v: &Value) -> Result<BTreeMap<String, i64>, ConfigError> {
    let Some(map) = decode_object(field, v)? else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err(wrong_type(&format!("{field}.{k}"), "a quantity", other)),
        };
        let amount = reserved_amount(k, &text).map_err(|m| invalid_value(field, m))?;
        out.insert(k.clone(), amount);
    }
    Ok(out)
}

/// One reserved amount, checked as upstream's parseResourceList checks it.
fn reserved_amount(resource: &str, text: &str) -> Result<i64, String> {
    if !RESERVABLE.contains(&resource) {
        return Err(format!("cannot reserve {resource:?} resource"));
    }
    let q = Quantity(text.to_owned());
    let amount = if resource == "cpu" {
        parse_cpu_millis_nearest(&q)
    } else {
        parse_bytes(&q)
    }
    .map_err(|e| {
        format!(
            "failed to parse quantity {text:?} for {resource:?} resource: {}",
            e.message
        )
    })?;
    if amount < 0 {
        return Err(format!(
            "resource quantity for {resource:?} cannot be negative: {text}"
        ));
    }
    Ok(amount)
}

/// A reservation in the flags' form, `cpu=100m,memory=1Gi`
/// (--kube-reserved, --system-reserved).
pub fn parse_reservation(s: &str) -> Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    for pair in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not resource=quantity"))?;
        out.insert(k.trim().to_owned(), reserved_amount(k.trim(), v.trim())?);
    }
    Ok(out)
}

/// A reservation as /configz shows it (cpu back in milli-CPUs).
fn reserved_json(r: &BTreeMap<String, i64>) -> Value {
    r.iter()
        .map(|(k, v)| {
            let text = if k == "cpu" {
                format!("{v}m")
            } else {
                v.to_string()
            };
            (k.clone(), Value::String(text))
        })
        .collect::<Map<String, Value>>()
        .into()
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

/// A signed 32-bit integer field (its range is validated later, with
/// upstream's message); `None` when null.
fn decode_int32(field: &str, v: &Value) -> Result<Option<i64>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_i64()
            .filter(|n| i32::try_from(*n).is_ok())
            .map(Some)
            .ok_or_else(|| wrong_type(field, "a 32-bit integer", v)),
        other => Err(wrong_type(field, "a 32-bit integer", other)),
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

/// A mapping field; `None` when null.
fn decode_object<'a>(
    field: &str,
    v: &'a Value,
) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) => Ok(Some(m)),
        other => Err(wrong_type(field, "a mapping", other)),
    }
}

/// A map of strings (evictionHard and friends); numbers read as written.
fn decode_string_map(
    field: &str,
    v: &Value,
) -> Result<Option<BTreeMap<String, String>>, ConfigError> {
    let Some(map) = decode_object(field, v)? else {
        return Ok(None);
    };
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err(wrong_type(&format!("{field}.{k}"), "a string", other)),
        };
        out.insert(k.clone(), text);
    }
    Ok(Some(out))
}

/// A path field whose empty value means "none".
fn decode_path(field: &str, v: &Value) -> Result<Option<PathBuf>, ConfigError> {
    Ok(decode_nonempty_string(field, v)?.map(PathBuf::from))
}

fn invalid_value(field: &str, message: String) -> ConfigError {
    ConfigError::InvalidValue {
        field: field.to_owned(),
        message,
    }
}

/// `tlsMinVersion`; `None` when null or empty (the default).
fn decode_tls_min_version(field: &str, v: &Value) -> Result<Option<TlsMinVersion>, ConfigError> {
    decode_nonempty_string(field, v)?
        .map(|s| {
            s.parse()
                .map_err(|e: ParseTlsMinVersionError| invalid_value(field, e.to_string()))
        })
        .transpose()
}

/// `tlsCipherSuites`: upstream names, each one of [`TLS_CIPHER_SUITES`].
fn decode_cipher_suites(field: &str, v: &Value) -> Result<Vec<String>, ConfigError> {
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => return Err(wrong_type(field, "a list of cipher suite names", other)),
    };
    items
        .iter()
        .map(|item| {
            let name = item
                .as_str()
                .ok_or_else(|| wrong_type(field, "a list of cipher suite names", item))?;
            if TLS_CIPHER_SUITES.contains(&name) {
                Ok(name.to_owned())
            } else {
                Err(invalid_value(
                    field,
                    format!(
                        "cipher suite {name:?} not supported or doesn't exist (supported: {})",
                        TLS_CIPHER_SUITES.join(", ")
                    ),
                ))
            }
        })
        .collect()
}

/// A list of strings (`what` names them in errors), checked later by
/// [`KubeletConfiguration::validate`], flags included.
fn decode_strings(field: &str, v: &Value, what: &'static str) -> Result<Vec<String>, ConfigError> {
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => return Err(wrong_type(field, what, other)),
    };
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_owned)
                .ok_or_else(|| wrong_type(field, what, item))
        })
        .collect()
}

/// A list of IP addresses (`clusterDNS`); an entry that is not one is
/// refused (upstream logs and skips it).
fn decode_ips(field: &str, v: &Value) -> Result<Vec<String>, ConfigError> {
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => return Err(wrong_type(field, "a list of IP addresses", other)),
    };
    items
        .iter()
        .map(|item| {
            let ip = item
                .as_str()
                .ok_or_else(|| wrong_type(field, "a list of IP addresses", item))?;
            ip.parse::<std::net::IpAddr>()
                .map(|ip| ip.to_string())
                .map_err(|_| invalid_value(field, format!("{ip:?} is not an IP address")))
        })
        .collect()
}

/// Calls `each(qualified name, key, value)` for every key of the mapping
/// `field` (null: none); keys are reported as `field.key`.
fn for_each_key(
    field: &str,
    v: &Value,
    mut each: impl FnMut(&str, &str, &Value) -> Result<(), ConfigError>,
) -> Result<(), ConfigError> {
    if let Some(map) = decode_object(field, v)? {
        for (key, value) in map {
            each(&format!("{field}.{key}"), key, value)?;
        }
    }
    Ok(())
}

/// `authentication: {x509: {clientCAFile}, webhook: {enabled, cacheTTL}, anonymous: {enabled}}`.
fn decode_authentication(
    target: &mut KubeletAuthentication,
    field: &str,
    v: &Value,
) -> Result<(), ConfigError> {
    for_each_key(field, v, |name, key, v| match key {
        "x509" => for_each_key(name, v, |name, key, v| match key {
            "clientCAFile" => {
                target.client_ca_file = decode_path(name, v)?;
                Ok(())
            }
            _ => Err(ConfigError::UnknownField(name.to_owned())),
        }),
        "webhook" => for_each_key(name, v, |name, key, v| match key {
            "enabled" => {
                if let Some(b) = decode_bool(name, v)? {
                    target.webhook_enabled = b;
                }
                Ok(())
            }
            "cacheTTL" => set_nonzero_duration(&mut target.webhook_cache_ttl, name, v),
            _ => Err(ConfigError::UnknownField(name.to_owned())),
        }),
        "anonymous" => for_each_key(name, v, |name, key, v| match key {
            "enabled" => {
                if let Some(b) = decode_bool(name, v)? {
                    target.anonymous_enabled = b;
                }
                Ok(())
            }
            _ => Err(ConfigError::UnknownField(name.to_owned())),
        }),
        _ => Err(ConfigError::UnknownField(name.to_owned())),
    })
}

/// `authorization: {mode, webhook: {cacheAuthorizedTTL, cacheUnauthorizedTTL}}`.
fn decode_authorization(
    target: &mut KubeletAuthorization,
    field: &str,
    v: &Value,
) -> Result<(), ConfigError> {
    for_each_key(field, v, |name, key, v| match key {
        "mode" => {
            target.mode = match decode_nonempty_string(name, v)? {
                None => AuthorizationMode::default(),
                Some(s) => s
                    .parse()
                    .map_err(|e: ParseAuthorizationModeError| invalid_value(name, e.to_string()))?,
            };
            Ok(())
        }
        "webhook" => for_each_key(name, v, |name, key, v| match key {
            "cacheAuthorizedTTL" => set_nonzero_duration(&mut target.cache_authorized_ttl, name, v),
            "cacheUnauthorizedTTL" => {
                set_nonzero_duration(&mut target.cache_unauthorized_ttl, name, v)
            }
            _ => Err(ConfigError::UnknownField(name.to_owned())),
        }),
        _ => Err(ConfigError::UnknownField(name.to_owned())),
    })
}

/// `tracing: {endpoint, samplingRatePerMillion}`; null: no tracing.
fn decode_tracing(field: &str, v: &Value) -> Result<Option<TracingConfiguration>, ConfigError> {
    if decode_object(field, v)?.is_none() {
        return Ok(None);
    }
    let mut t = TracingConfiguration::default();
    for_each_key(field, v, |name, key, v| match key {
        "endpoint" => set_nonempty_string(&mut t.endpoint, name, v),
        "samplingRatePerMillion" => {
            if let Some(n) = decode_uint::<u32>(name, v, COUNT)? {
                if n > 1_000_000 {
                    return Err(invalid_value(name, format!("{n} is more than a million")));
                }
                t.sampling_rate_per_million = n;
            }
            Ok(())
        }
        _ => Err(ConfigError::UnknownField(name.to_owned())),
    })?;
    Ok(Some(t))
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
#[expect(
    clippy::too_many_lines,
    reason = "to go with the hand-written decoder (#31)"
)]
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
    let mut serialize = None;
    let mut eviction_hard = None;
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
            "port" => {
                if let Some(p) = decode_uint::<u16>(field, v, PORT)?.filter(|p| *p != 0) {
                    cfg.port = p;
                }
            }
            "tlsCertFile" => cfg.tls_cert_file = decode_path(field, v)?,
            "tlsPrivateKeyFile" => cfg.tls_private_key_file = decode_path(field, v)?,
            "tlsCipherSuites" => cfg.tls_cipher_suites = decode_cipher_suites(field, v)?,
            "tlsMinVersion" => {
                if let Some(version) = decode_tls_min_version(field, v)? {
                    cfg.tls_min_version = version;
                }
            }
            "authentication" => decode_authentication(&mut cfg.authentication, field, v)?,
            "authorization" => decode_authorization(&mut cfg.authorization, field, v)?,
            "enableDebuggingHandlers" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.enable_debugging_handlers = b;
                }
            }
            "tracing" => cfg.tracing = decode_tracing(field, v)?,
            "streamingConnectionIdleTimeout" => {
                set_nonzero_duration(&mut cfg.streaming_connection_idle_timeout, field, v)?
            }
            "clusterDNS" => cfg.cluster_dns = decode_ips(field, v)?,
            "clusterDomain" => {
                if let Some(s) = decode_string(field, v)? {
                    cfg.cluster_domain = s;
                }
            }
            "resolvConf" => {
                if let Some(s) = decode_string(field, v)? {
                    cfg.resolv_conf = s;
                }
            }
            "seccompDefault" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.seccomp_default = b;
                }
            }
            "allowedUnsafeSysctls" => {
                cfg.allowed_unsafe_sysctls =
                    decode_strings(field, v, "a list of sysctl names or patterns")?
            }
            "serializeImagePulls" => serialize = decode_bool(field, v)?,
            "imageGCHighThresholdPercent" => {
                if let Some(n) = decode_int32(field, v)? {
                    cfg.image_gc_high_threshold_percent = n;
                }
            }
            "imageGCLowThresholdPercent" => {
                if let Some(n) = decode_int32(field, v)? {
                    cfg.image_gc_low_threshold_percent = n;
                }
            }
            "imageMinimumGCAge" => {
                if let Some(d) = decode_duration(field, v)? {
                    cfg.image_minimum_gc_age = d;
                }
            }
            "imageMaximumGCAge" => {
                if let Some(d) = decode_duration(field, v)? {
                    cfg.image_maximum_gc_age = d;
                }
            }
            "maxParallelImagePulls" => cfg.max_parallel_image_pulls = decode_int32(field, v)?,
            "imagePullCredentialsVerificationPolicy" => {
                if let Some(s) = decode_string(field, v)? {
                    cfg.image_pull_credentials_verification_policy = s;
                }
            }
            "preloadedImagesVerificationAllowlist" => {
                cfg.preloaded_images_verification_allowlist =
                    decode_strings(field, v, "a list of image names or prefixes")?
            }
            "cgroupsPerQOS" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.cgroups_per_qos = b;
                }
            }
            "cgroupRoot" => {
                if let Some(s) = decode_string(field, v)? {
                    cfg.cgroup_root = s;
                }
            }
            "podPidsLimit" => {
                if let Some(n) = decode_int64(field, v)? {
                    cfg.pod_pids_limit = n;
                }
            }
            "cpuCFSQuota" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.cpu_cfs_quota = b;
                }
            }
            "cpuCFSQuotaPeriod" => {
                if let Some(d) = decode_duration(field, v)? {
                    cfg.cpu_cfs_quota_period = d;
                }
            }
            "systemReserved" => cfg.system_reserved = decode_reservation(field, v)?,
            "kubeReserved" => cfg.kube_reserved = decode_reservation(field, v)?,
            "systemReservedCgroup" => {
                if let Some(s) = decode_string(field, v)? {
                    cfg.system_reserved_cgroup = s;
                }
            }
            "kubeReservedCgroup" => {
                if let Some(s) = decode_string(field, v)? {
                    cfg.kube_reserved_cgroup = s;
                }
            }
            // Null keeps the default; an empty list enforces nothing.
            "enforceNodeAllocatable" if !v.is_null() => {
                cfg.enforce_node_allocatable =
                    decode_strings(field, v, "a list of enforcement names")?
            }
            "enforceNodeAllocatable" => {}
            "evictionHard" => eviction_hard = decode_string_map(field, v)?,
            "evictionSoft" => {
                cfg.eviction_soft = decode_string_map(field, v)?.unwrap_or_default();
            }
            "evictionSoftGracePeriod" => {
                cfg.eviction_soft_grace_period = decode_string_map(field, v)?.unwrap_or_default();
            }
            "evictionMinimumReclaim" => {
                cfg.eviction_minimum_reclaim = decode_string_map(field, v)?.unwrap_or_default();
            }
            "evictionPressureTransitionPeriod" => {
                if let Some(d) = decode_duration(field, v)? {
                    cfg.eviction_pressure_transition_period = d;
                }
            }
            "kernelMemcgNotification" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.kernel_memcg_notification = b;
                }
            }
            "localStorageCapacityIsolation" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.local_storage_capacity_isolation = b;
                }
            }
            "evictionMaxPodGracePeriod" => {
                if let Some(n) = decode_int32(field, v)? {
                    cfg.eviction_max_pod_grace_period = n;
                }
            }
            "mergeDefaultEvictionSettings" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.merge_default_eviction_settings = b;
                }
            }
            "containerLogMaxSize" => {
                set_nonempty_string(&mut cfg.container_log_max_size, field, v)?
            }
            "containerLogMaxFiles" => {
                if let Some(n) = decode_int32(field, v)? {
                    cfg.container_log_max_files = n;
                }
            }
            "containerLogMaxWorkers" => {
                if let Some(n) = decode_int32(field, v)? {
                    cfg.container_log_max_workers = n;
                }
            }
            "enableSystemLogHandler" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.enable_system_log_handler = b;
                }
            }
            "enableSystemLogQuery" => {
                if let Some(b) = decode_bool(field, v)? {
                    cfg.enable_system_log_query = b;
                }
            }
            "containerLogMonitorInterval" => {
                set_nonzero_duration(&mut cfg.container_log_monitor_interval, field, v)?
            }
            other if IGNORED_UPSTREAM_FIELDS.contains(&other) => ignored.push(other.to_owned()),
            other => return Err(ConfigError::UnknownField(other.to_owned())),
        }
    }
    cfg.serialize_image_pulls =
        serialize.unwrap_or(cfg.max_parallel_image_pulls.is_none_or(|n| n < 2));
    // As upstream's loadConfigFile: absent, the defaults; given, as given,
    // or with the defaults filling its gaps.
    if let Some(mut hard) = eviction_hard {
        if cfg.merge_default_eviction_settings {
            for (k, v) in crate::eviction::DEFAULT_EVICTION_HARD {
                hard.entry(k.to_owned()).or_insert_with(|| v.to_owned());
            }
        }
        cfg.eviction_hard = hard;
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
        .map_err(ConfigError::Rejected)
    }

    /// enforceNodeAllocatable as upstream validates it, in its words.
    fn validate_node_allocatable(&self) -> Result<(), ConfigError> {
        let flag = "enforceNodeAllocatable (--enforce-node-allocatable)";
        let list = &self.enforce_node_allocatable;
        let has = |k: &str| list.iter().any(|v| v == k);
        for (a, b) in [
            (
                ENFORCE_SYSTEM_RESERVED,
                ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
            ),
            (ENFORCE_KUBE_RESERVED, ENFORCE_KUBE_RESERVED_COMPRESSIBLE),
        ] {
            if has(a) && has(b) {
                return Err(ConfigError::Rejected(format!(
                    "both {a:?} and {b:?} cannot be specified together in {flag}"
                )));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for val in list {
            if !seen.insert(val.as_str()) {
                return Err(ConfigError::Rejected(format!(
                    "duplicated enforcements {val:?} in {flag}"
                )));
            }
            match val.as_str() {
                ENFORCE_PODS => {}
                ENFORCE_SYSTEM_RESERVED | ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE
                    if self.system_reserved_cgroup.is_empty() =>
                {
                    return Err(ConfigError::Rejected(format!(
                        "systemReservedCgroup (--system-reserved-cgroup) must be specified when \
                         {ENFORCE_SYSTEM_RESERVED:?} or {ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE:?} \
                         included in {flag}"
                    )));
                }
                ENFORCE_KUBE_RESERVED | ENFORCE_KUBE_RESERVED_COMPRESSIBLE
                    if self.kube_reserved_cgroup.is_empty() =>
                {
                    return Err(ConfigError::Rejected(format!(
                        "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \
                         {ENFORCE_KUBE_RESERVED:?} or {ENFORCE_KUBE_RESERVED_COMPRESSIBLE:?} \
                         included in {flag}"
                    )));
                }
                ENFORCE_SYSTEM_RESERVED
                | ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE
                | ENFORCE_KUBE_RESERVED
                | ENFORCE_KUBE_RESERVED_COMPRESSIBLE => {}
                ENFORCE_NONE => {
                    if list.len() > 1 {
                        return Err(ConfigError::Rejected(format!(
                            "{flag} may not contain additional enforcements when {ENFORCE_NONE:?} is specified"
                        )));
                    }
                    continue;
                }
                other => {
                    return Err(ConfigError::Rejected(format!(
                        "option {other:?} specified for {flag}. Valid options are {ENFORCE_PODS:?}, \
                         {ENFORCE_SYSTEM_RESERVED:?}, {ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE:?}, \
                         {ENFORCE_KUBE_RESERVED:?}, {ENFORCE_KUBE_RESERVED_COMPRESSIBLE:?} or {ENFORCE_NONE:?}"
                    )));
                }
            }
            if !self.cgroups_per_qos {
                return Err(ConfigError::Rejected(format!(
                    "cgroupsPerQOS (--cgroups-per-qos) must be set to true when {val:?} contained in {flag}"
                )));
            }
        }
        Ok(())
    }

    /// Whether `key` is in enforceNodeAllocatable.
    pub fn enforces(&self, key: &str) -> bool {
        self.enforce_node_allocatable.iter().any(|v| v == key)
    }

    /// Checks the values that upstream's validation would reject (and that
    /// rkubelet cannot run with).
    #[expect(
        clippy::too_many_lines,
        reason = "to go with the hand-written decoder (#31)"
    )]
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.image_pull_verification()?;
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            field: field.to_owned(),
            message,
        };
        let (high, low) = (
            self.image_gc_high_threshold_percent,
            self.image_gc_low_threshold_percent,
        );
        for (field, n) in [
            (
                "imageGCHighThresholdPercent (--image-gc-high-threshold)",
                high,
            ),
            ("imageGCLowThresholdPercent (--image-gc-low-threshold)", low),
        ] {
            if !(0..=100).contains(&n) {
                return Err(invalid(
                    field,
                    format!("{n} must be between 0 and 100, inclusive"),
                ));
            }
        }
        if low >= high {
            return Err(invalid(
                "imageGCLowThresholdPercent (--image-gc-low-threshold)",
                format!(
                    "{low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
                ),
            ));
        }
        let (min_age, max_age) = (self.image_minimum_gc_age, self.image_maximum_gc_age);
        if !max_age.is_zero() && max_age <= min_age {
            return Err(invalid(
                "imageMaximumGCAge",
                format!(
                    "{} must be greater than imageMinimumGCAge {}",
                    format_go_duration(max_age),
                    format_go_duration(min_age)
                ),
            ));
        }
        match self.max_parallel_image_pulls {
            Some(n) if n < 1 => {
                return Err(invalid(
                    "maxParallelImagePulls",
                    format!("{n} must be a positive number"),
                ));
            }
            Some(n) if n > 1 && self.serialize_image_pulls => {
                return Err(invalid(
                    "maxParallelImagePulls",
                    "cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false".into(),
                ));
            }
            _ => {}
        }
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
        self.container_log_max_bytes()?;
        if self.enable_system_log_query && !self.enable_system_log_handler {
            return Err(ConfigError::Rejected(
                "invalid configuration: enableSystemLogHandler is required for enableSystemLogQuery"
                    .into(),
            ));
        }
        if self.container_log_max_workers < 1 {
            return Err(invalid(
                "containerLogMaxWorkers",
                "must be greater than or equal to 1".into(),
            ));
        }
        if self.container_log_monitor_interval < Duration::from_secs(3) {
            return Err(invalid(
                "containerLogMonitorInterval",
                "must be a positive time duration greater than or equal to 3s".into(),
            ));
        }
        if self.container_log_max_files <= 1 {
            return Err(invalid(
                "containerLogMaxFiles",
                "must be greater than 1".into(),
            ));
        }
        if let Err(e) = crate::sysctl::Allowlist::new("", &self.allowed_unsafe_sysctls) {
            return Err(invalid(
                "allowedUnsafeSysctls (--allowed-unsafe-sysctls)",
                e,
            ));
        }
        self.validate_node_allocatable()?;
        crate::eviction::parse_thresholds(&self.eviction_hard)
            .map_err(|m| invalid("evictionHard", m))?;
        self.eviction_thresholds().map_err(|m| {
            invalid(
                "evictionSoft, evictionSoftGracePeriod, evictionMinimumReclaim",
                m,
            )
        })?;
        let period = self.cpu_cfs_quota_period;
        if period < Duration::from_millis(1) || period > Duration::from_secs(1) {
            return Err(ConfigError::Rejected(format!(
                "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {} must be between 1ms and 1sec, inclusive",
                format_go_duration(period)
            )));
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
        if self.port == 0 {
            return Err(invalid(
                "port (--port)",
                "0 must be between 1 and 65535, inclusive".to_owned(),
            ));
        }
        if self.tls_cert_file.is_some() != self.tls_private_key_file.is_some() {
            return Err(invalid(
                "tlsCertFile (--tls-cert-file)",
                "and tlsPrivateKeyFile (--tls-private-key-file) must be set together".to_owned(),
            ));
        }
        if self.streaming_connection_idle_timeout.is_zero() {
            return Err(invalid(
                "streamingConnectionIdleTimeout",
                "must be greater than 0, got 0s".to_owned(),
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
    fn tracing_section() {
        let doc =
            |body: &str| format!("kind: KubeletConfiguration\napiVersion: {API_VERSION}\n{body}");
        let cfg = parse_kubelet_config(&doc("tracing: {}")).unwrap();
        assert_eq!(cfg.tracing, Some(TracingConfiguration::default()));
        let cfg = parse_kubelet_config(&doc(
            "tracing:\n  endpoint: otel:4317\n  samplingRatePerMillion: 1000000",
        ))
        .unwrap();
        let t = cfg.tracing.unwrap();
        assert_eq!(
            (t.endpoint.as_str(), t.sampling_rate_per_million),
            ("otel:4317", 1_000_000)
        );
        assert!(parse_kubelet_config(&doc("")).unwrap().tracing.is_none());
        for (bad, names) in [
            (
                "tracing: {samplingRatePerMillion: 1000001}",
                "tracing.samplingRatePerMillion",
            ),
            ("tracing: {collector: x}", "tracing.collector"),
        ] {
            let err = parse_kubelet_config(&doc(bad)).unwrap_err().to_string();
            assert!(err.contains(names), "{bad}: {err}");
        }
    }

    #[test]
    fn configz_round_trips_through_the_decoder() {
        fn drop_nulls(v: &mut serde_json::Value) {
            if let serde_json::Value::Object(m) = v {
                m.retain(|_, x| !x.is_null());
                m.values_mut().for_each(drop_nulls);
            }
        }
        let mut cfg = KubeletConfiguration {
            static_pod_path: Some("/etc/kubernetes/manifests".into()),
            sync_frequency: Duration::from_secs(90),
            ..Default::default()
        };
        cfg.authorization.mode = AuthorizationMode::AlwaysAllow;
        let mut json = cfg.to_v1beta1_json();
        assert_eq!(json["syncFrequency"], "1m30s");
        drop_nulls(&mut json);
        let back = parse_kubelet_config(&json.to_string()).unwrap();
        assert_eq!(back, cfg);
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
            ("clusterDNS: [10.96.0.10, 'fd00::a']", |c| {
                c.cluster_dns == ["10.96.0.10", "fd00::a"]
            }),
            ("clusterDomain: cluster.local", |c| {
                c.cluster_domain == "cluster.local"
            }),
            ("resolvConf: ''", |c| c.resolv_conf.is_empty()),
            ("resolvConf: /run/resolv.conf", |c| {
                c.resolv_conf == "/run/resolv.conf"
            }),
            ("seccompDefault: true", |c| c.seccomp_default),
            (
                "allowedUnsafeSysctls: ['kernel.msg*', net.core.somaxconn]",
                |c| c.allowed_unsafe_sysctls == ["kernel.msg*", "net.core.somaxconn"],
            ),
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
        let body = "podCIDR: 10.1.0.0/24\nenableServer: true\n\
                    featureGates:\n  Foo: true\nmaxPods: 20\n";
        let (cfg, ignored) = parse_body(body).unwrap();
        assert_eq!(cfg.max_pods, 20);
        assert_eq!(ignored, vec!["enableServer", "featureGates", "podCIDR"]);
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
            "rotateCertificates": true
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
        assert_eq!(ignored, vec!["rotateCertificates"]);
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
            (
                |c| c.container_log_max_size = "10 Mi".into(),
                "container log max size",
            ),
            (|c| c.container_log_max_files = 1, "containerLogMaxFiles"),
            (
                |c| c.container_log_max_workers = 0,
                "containerLogMaxWorkers",
            ),
            (
                |c| c.container_log_monitor_interval = Duration::from_secs(2),
                "containerLogMonitorInterval",
            ),
            (|c| c.address = "not-an-ip".into(), "address"),
            (
                |c| c.allowed_unsafe_sysctls = vec!["vm.swappiness".into()],
                "allowedUnsafeSysctls",
            ),
            (
                |c| c.healthz_bind_address = String::new(),
                "healthzBindAddress",
            ),
            (
                |c| c.image_gc_high_threshold_percent = 101,
                "imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100",
            ),
            (
                |c| c.image_gc_low_threshold_percent = 85,
                "imageGCLowThresholdPercent (--image-gc-low-threshold) 85 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85",
            ),
            (
                |c| c.image_maximum_gc_age = Duration::from_secs(60),
                "imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
            ),
            (
                |c| c.max_parallel_image_pulls = Some(0),
                "maxParallelImagePulls 0 must be a positive number",
            ),
            (
                |c| c.max_parallel_image_pulls = Some(3),
                "maxParallelImagePulls cannot be larger than 1",
            ),
            (
                |c| c.cgroups_per_qos = false,
                "invalid configuration: cgroupsPerQOS (--cgroups-per-qos) must be set to true when \"pods\" contained in enforceNodeAllocatable (--enforce-node-allocatable)",
            ),
            (
                |c| c.enforce_node_allocatable = vec!["pods".into(), "pods".into()],
                "duplicated enforcements \"pods\" in enforceNodeAllocatable",
            ),
            (
                |c| c.enforce_node_allocatable = vec!["none".into(), "pods".into()],
                "may not contain additional enforcements when \"none\" is specified",
            ),
            (
                |c| c.enforce_node_allocatable = vec!["kube-reserved".into()],
                "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when",
            ),
            (
                |c| c.enforce_node_allocatable = vec!["pod".into()],
                "option \"pod\" specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\"",
            ),
            (
                |c| {
                    c.system_reserved_cgroup = "/system".into();
                    c.enforce_node_allocatable = vec![
                        "system-reserved".into(),
                        "system-reserved-compressible".into(),
                    ]
                },
                "both \"system-reserved\" and \"system-reserved-compressible\" cannot be specified together",
            ),
            (
                |c| c.cpu_cfs_quota_period = Duration::from_secs(2),
                "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) 2s must be between 1ms and 1sec, inclusive",
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
        let no_qos = KubeletConfiguration {
            cgroups_per_qos: false,
            enforce_node_allocatable: vec!["none".into()],
            ..KubeletConfiguration::default()
        };
        no_qos.validate().unwrap();
    }

    #[test]
    fn node_resources_fields() {
        let (cfg, _) = parse_body(
            "cgroupsPerQOS: false\ncgroupRoot: /rk\npodPidsLimit: 1024\ncpuCFSQuota: false\n\
             cpuCFSQuotaPeriod: 50ms\nenforceNodeAllocatable: []\n\
             systemReserved: {cpu: 500m, memory: 1Gi, pid: 100}\n\
             kubeReserved: {ephemeral-storage: 1G}\nkubeReservedCgroup: /kube\n",
        )
        .unwrap();
        assert!(!cfg.cgroups_per_qos && !cfg.cpu_cfs_quota);
        assert_eq!(
            (cfg.cgroup_root.as_str(), cfg.pod_pids_limit),
            ("/rk", 1024)
        );
        assert_eq!(cfg.cpu_cfs_quota_period, Duration::from_millis(50));
        assert!(cfg.enforce_node_allocatable.is_empty());
        assert_eq!(
            cfg.system_reserved,
            BTreeMap::from([
                ("cpu".to_owned(), 500),
                ("memory".to_owned(), 1 << 30),
                ("pid".to_owned(), 100)
            ])
        );
        assert_eq!(cfg.kube_reserved["ephemeral-storage"], 1_000_000_000);
        cfg.validate().unwrap();
        let json = cfg.to_v1beta1_json();
        assert_eq!(json["systemReserved"]["cpu"], "500m");
        assert_eq!(json["enforceNodeAllocatable"], serde_json::json!([]));
        assert_eq!(json["evictionHard"]["memory.available"], "100Mi");
        let (given, _) = parse_body("evictionHard: {memory.available: 1Gi}\n").unwrap();
        assert_eq!(given.eviction_hard.len(), 1);
        let (merged, _) = parse_body(
            "evictionHard: {memory.available: 1Gi}\nmergeDefaultEvictionSettings: true\n",
        )
        .unwrap();
        assert_eq!(merged.eviction_hard.len(), 5);
        assert_eq!(merged.eviction_hard["memory.available"], "1Gi");
        let bad = KubeletConfiguration {
            eviction_hard: BTreeMap::from([("memory.free".into(), "1".into())]),
            ..KubeletConfiguration::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "invalid configuration: evictionHard unsupported eviction signal memory.free"
        );
        let (soft, ignored) = parse_body(
            "evictionSoft: {memory.available: 1Gi}\n\
             evictionSoftGracePeriod: {memory.available: 1m30s}\n\
             evictionMinimumReclaim: {memory.available: 0.5Gi, nodefs.available: 5%}\n\
             evictionPressureTransitionPeriod: 30s\nevictionMaxPodGracePeriod: 20\n\
             localStorageCapacityIsolation: false\nkernelMemcgNotification: true\n",
        )
        .unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        soft.validate().unwrap();
        let t = soft.eviction_thresholds().unwrap();
        assert_eq!(
            t.len(),
            7,
            "five defaults, one soft, the allocatable copy of the hard memory one"
        );
        assert_eq!(
            t[6].signal,
            crate::eviction::Signal::AllocatableMemoryAvailable
        );
        let s = t.iter().find(|t| !t.is_hard()).unwrap();
        assert_eq!(s.grace_period, Duration::from_secs(90));
        assert_eq!(
            s.min_reclaim,
            Some(crate::eviction::ThresholdValue::Quantity(
                512 << 20,
                crate::eviction::Written::BinarySI
            ))
        );
        assert_eq!(
            soft.eviction_pressure_transition_period,
            Duration::from_secs(30)
        );
        let json = soft.to_v1beta1_json();
        assert_eq!(json["evictionPressureTransitionPeriod"], "30s");
        assert_eq!(json["evictionMaxPodGracePeriod"], 20);
        assert_eq!(json["localStorageCapacityIsolation"], false);
        assert_eq!(json["kernelMemcgNotification"], true);
        assert_eq!(json["evictionSoftGracePeriod"]["memory.available"], "1m30s");
        for (body, message) in [
            (
                "evictionSoft: {memory.available: 1Gi}\n",
                "grace period must be specified for the soft eviction threshold memory.available",
            ),
            (
                "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: -1s}\n",
                "invalid eviction grace period specified: -1s, must be a positive value",
            ),
            (
                "evictionMinimumReclaim: {nodefs.available: 0%}\n",
                "eviction percentage minimum reclaim nodefs.available must be positive: 0%",
            ),
            (
                "evictionMinimumReclaim: {nodefs.available: -1Gi}\n",
                "negative eviction minimum reclaim specified for nodefs.available",
            ),
        ] {
            let (cfg, _) = parse_body(body).unwrap();
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(message), "{body}: {err}");
        }
        for (body, message) in [
            (
                "kubeReserved: {gpu: 1}\n",
                "cannot reserve \"gpu\" resource",
            ),
            (
                "systemReserved: {memory: -1Gi}\n",
                "resource quantity for \"memory\" cannot be negative: -1Gi",
            ),
            (
                "systemReserved: {cpu: lots}\n",
                "failed to parse quantity \"lots\" for \"cpu\" resource",
            ),
        ] {
            let err = parse_body(body).unwrap_err().to_string();
            assert!(err.contains(message), "{err:?} lacks {message:?}");
        }
    }

    #[test]
    fn image_pulls_are_serialized_unless_parallel_pulls_are_asked_for() {
        let limit = |fields: &str| {
            let doc = format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{fields}"
            );
            let c = parse_kubelet_config(&doc).unwrap();
            c.validate().map(|()| c.image_pull_limit()).ok()
        };
        let cases = [
            ("", Some(Some(1))),
            ("maxParallelImagePulls: 1", Some(Some(1))),
            ("maxParallelImagePulls: 4", Some(Some(4))),
            ("serializeImagePulls: false", Some(None)),
            (
                "serializeImagePulls: false\nmaxParallelImagePulls: 2",
                Some(Some(2)),
            ),
            (
                "serializeImagePulls: true\nmaxParallelImagePulls: 1",
                Some(Some(1)),
            ),
            ("serializeImagePulls: true\nmaxParallelImagePulls: 2", None),
            ("maxParallelImagePulls: -1", None),
        ];
        for (fields, want) in cases {
            assert_eq!(limit(fields), want, "{fields}");
        }
    }

    #[test]
    fn server_defaults_match_upstream() {
        let d = KubeletConfiguration::default();
        assert_eq!(d.port, 10250);
        assert_eq!(d.tls_cert_file, None);
        assert_eq!(d.tls_private_key_file, None);
        assert!(d.tls_cipher_suites.is_empty());
        assert_eq!(d.tls_min_version, TlsMinVersion::Tls12);
        assert_eq!(d.authentication.client_ca_file, None);
        assert!(d.authentication.webhook_enabled);
        assert_eq!(d.authentication.webhook_cache_ttl, Duration::from_secs(120));
        assert!(!d.authentication.anonymous_enabled);
        assert_eq!(d.authorization.mode, AuthorizationMode::Webhook);
        assert_eq!(
            d.authorization.cache_authorized_ttl,
            Duration::from_secs(300)
        );
        assert_eq!(
            d.authorization.cache_unauthorized_ttl,
            Duration::from_secs(30)
        );
        assert!(d.enable_debugging_handlers);
        assert_eq!(
            d.streaming_connection_idle_timeout,
            Duration::from_secs(4 * 3600)
        );
    }

    #[test]
    fn decodes_server_fields() {
        type Check = fn(&KubeletConfiguration) -> bool;
        let cases: &[(&str, Check)] = &[
            ("port: 10350", |c| c.port == 10350),
            ("port: 0", |c| c.port == 10250),
            (
                "tlsCertFile: /pki/k.crt\ntlsPrivateKeyFile: /pki/k.key",
                |c| {
                    c.tls_cert_file.as_deref() == Some(Path::new("/pki/k.crt"))
                        && c.tls_private_key_file.as_deref() == Some(Path::new("/pki/k.key"))
                },
            ),
            ("tlsCertFile: \"\"", |c| c.tls_cert_file.is_none()),
            ("tlsMinVersion: VersionTLS13", |c| {
                c.tls_min_version == TlsMinVersion::Tls13
            }),
            ("tlsMinVersion: VersionTLS12", |c| {
                c.tls_min_version == TlsMinVersion::Tls12
            }),
            ("tlsMinVersion: \"\"", |c| {
                c.tls_min_version == TlsMinVersion::Tls12
            }),
            (
                "tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305]",
                |c| {
                    c.tls_cipher_suites
                        == [
                            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
                        ]
                },
            ),
            ("tlsCipherSuites: []", |c| c.tls_cipher_suites.is_empty()),
            (
                "authentication:\n  x509:\n    clientCAFile: /pki/ca.crt",
                |c| {
                    c.authentication.client_ca_file.as_deref() == Some(Path::new("/pki/ca.crt"))
                        && c.authentication.webhook_enabled
                },
            ),
            (
                "authentication:\n  webhook:\n    enabled: false\n    cacheTTL: 10s",
                |c| {
                    !c.authentication.webhook_enabled
                        && c.authentication.webhook_cache_ttl == Duration::from_secs(10)
                },
            ),
            ("authentication:\n  webhook:\n    cacheTTL: 0s", |c| {
                c.authentication.webhook_cache_ttl == Duration::from_secs(120)
            }),
            ("authentication:\n  anonymous:\n    enabled: true", |c| {
                c.authentication.anonymous_enabled
            }),
            ("authentication: null", |c| {
                c.authentication == KubeletAuthentication::default()
            }),
            ("authorization:\n  mode: AlwaysAllow", |c| {
                c.authorization.mode == AuthorizationMode::AlwaysAllow
            }),
            ("authorization:\n  mode: Webhook", |c| {
                c.authorization.mode == AuthorizationMode::Webhook
            }),
            (
                "authorization:\n  webhook:\n    cacheAuthorizedTTL: 1m\n    cacheUnauthorizedTTL: 5s",
                |c| {
                    c.authorization.cache_authorized_ttl == Duration::from_secs(60)
                        && c.authorization.cache_unauthorized_ttl == Duration::from_secs(5)
                },
            ),
            (
                "authorization:\n  webhook:\n    cacheAuthorizedTTL: 0s\n    cacheUnauthorizedTTL: 0s",
                |c| c.authorization == KubeletAuthorization::default(),
            ),
            ("enableDebuggingHandlers: false", |c| {
                !c.enable_debugging_handlers
            }),
            ("streamingConnectionIdleTimeout: 30m", |c| {
                c.streaming_connection_idle_timeout == Duration::from_secs(1800)
            }),
            ("streamingConnectionIdleTimeout: 0s", |c| {
                c.streaming_connection_idle_timeout == Duration::from_secs(4 * 3600)
            }),
        ];
        for (body, check) in cases {
            let (cfg, ignored) = parse_body(body).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert!(check(&cfg), "{body}: {cfg:?}");
            assert!(ignored.is_empty(), "{body}: {ignored:?}");
        }
        // kubeadm's file: every server field spelled out.
        let kubeadm = "authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    cacheTTL: 0s\n    enabled: true\n  x509:\n    clientCAFile: /etc/kubernetes/pki/ca.crt\n\
                       authorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: 0s\n    cacheUnauthorizedTTL: 0s\n\
                       streamingConnectionIdleTimeout: 0s\n";
        let (cfg, ignored) = parse_body(kubeadm).unwrap();
        assert!(ignored.is_empty());
        assert_eq!(
            cfg.authentication,
            KubeletAuthentication {
                client_ca_file: Some(PathBuf::from("/etc/kubernetes/pki/ca.crt")),
                ..KubeletAuthentication::default()
            }
        );
        assert_eq!(cfg.authorization, KubeletAuthorization::default());
        cfg.validate().unwrap();
    }

    #[test]
    fn server_field_errors_name_the_field() {
        let cases: &[(&str, &[&str])] = &[
            ("port: 70000", &["port", "70000"]),
            (
                "clusterDNS: [10.96.0.300]",
                &["clusterDNS", "\"10.96.0.300\" is not an IP address"],
            ),
            (
                "clusterDNS: 10.96.0.10",
                &["clusterDNS", "a list of IP addresses"],
            ),
            (
                "allowedUnsafeSysctls: vm.swappiness",
                &["allowedUnsafeSysctls", "a list of sysctl"],
            ),
            ("seccompDefault: 3", &["seccompDefault", "boolean"]),
            ("port: \"10250\"", &["port", "integer"]),
            ("tlsCertFile: [a]", &["tlsCertFile", "string"]),
            (
                "tlsMinVersion: VersionTLS10",
                &["tlsMinVersion", "VersionTLS10", "not supported"],
            ),
            (
                "tlsMinVersion: VersionTLS11",
                &["tlsMinVersion", "VersionTLS11"],
            ),
            ("tlsMinVersion: TLS12", &["tlsMinVersion", "\"TLS12\""]),
            (
                "tlsCipherSuites: [TLS_RSA_WITH_AES_128_CBC_SHA]",
                &[
                    "tlsCipherSuites",
                    "\"TLS_RSA_WITH_AES_128_CBC_SHA\"",
                    "not supported",
                ],
            ),
            (
                "tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, BOGUS]",
                &["tlsCipherSuites", "\"BOGUS\""],
            ),
            (
                "tlsCipherSuites: TLS_AES_128_GCM_SHA256",
                &["tlsCipherSuites", "list"],
            ),
            ("tlsCipherSuites: [1]", &["tlsCipherSuites", "got 1"]),
            ("authentication: true", &["authentication", "mapping"]),
            (
                "authentication:\n  oidc: {}",
                &["unknown field \"authentication.oidc\""],
            ),
            (
                "authentication:\n  webhook:\n    enabled: yes please",
                &["authentication.webhook.enabled", "boolean"],
            ),
            (
                "authentication:\n  webhook:\n    cacheTTL: 5",
                &["authentication.webhook.cacheTTL", "duration"],
            ),
            (
                "authentication:\n  x509:\n    clientCaFile: /x",
                &["unknown field \"authentication.x509.clientCaFile\""],
            ),
            (
                "authentication:\n  anonymous:\n    enabled: 1",
                &["authentication.anonymous.enabled", "boolean"],
            ),
            (
                "authorization:\n  mode: RBAC",
                &["authorization.mode", "\"RBAC\""],
            ),
            (
                "authorization:\n  webhook:\n    cacheAuthorizedTTL: soon",
                &["authorization.webhook.cacheAuthorizedTTL", "\"soon\""],
            ),
            (
                "authorization:\n  webhook:\n    cacheTTL: 1m",
                &["unknown field \"authorization.webhook.cacheTTL\""],
            ),
            (
                "enableDebuggingHandlers: 1",
                &["enableDebuggingHandlers", "boolean"],
            ),
            (
                "streamingConnectionIdleTimeout: 4",
                &["streamingConnectionIdleTimeout", "duration"],
            ),
        ];
        for (body, needles) in cases {
            let err = parse_body(body).expect_err(body).to_string();
            for needle in *needles {
                assert!(err.contains(needle), "{body}: {err:?} lacks {needle:?}");
            }
        }
    }

    #[test]
    fn server_validation() {
        type Mutate = fn(&mut KubeletConfiguration);
        let cases: &[(Mutate, &str)] = &[
            (
                |c| c.port = 0,
                "port (--port) 0 must be between 1 and 65535",
            ),
            (
                |c| c.tls_cert_file = Some("/pki/k.crt".into()),
                "tlsCertFile (--tls-cert-file) and tlsPrivateKeyFile",
            ),
            (
                |c| c.tls_private_key_file = Some("/pki/k.key".into()),
                "tlsCertFile (--tls-cert-file) and tlsPrivateKeyFile",
            ),
            (
                |c| c.streaming_connection_idle_timeout = Duration::ZERO,
                "streamingConnectionIdleTimeout",
            ),
        ];
        for (mutate, needle) in cases {
            let mut cfg = KubeletConfiguration::default();
            mutate(&mut cfg);
            let err = cfg.validate().expect_err(needle).to_string();
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        }
        KubeletConfiguration {
            tls_cert_file: Some("/pki/k.crt".into()),
            tls_private_key_file: Some("/pki/k.key".into()),
            ..KubeletConfiguration::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn server_enum_strings() {
        assert_eq!(TlsMinVersion::Tls12.as_str(), "VersionTLS12");
        assert_eq!(TlsMinVersion::Tls13.as_str(), "VersionTLS13");
        assert_eq!(AuthorizationMode::Webhook.as_str(), "Webhook");
        assert_eq!(AuthorizationMode::AlwaysAllow.as_str(), "AlwaysAllow");
        for mode in [AuthorizationMode::Webhook, AuthorizationMode::AlwaysAllow] {
            assert_eq!(mode.as_str().parse::<AuthorizationMode>(), Ok(mode));
        }
        for version in [TlsMinVersion::Tls12, TlsMinVersion::Tls13] {
            assert_eq!(version.as_str().parse::<TlsMinVersion>(), Ok(version));
        }
        assert_eq!(
            "RBAC".parse::<AuthorizationMode>(),
            Err(ParseAuthorizationModeError("RBAC".into()))
        );
        assert_eq!(
            "VersionTLS11".parse::<TlsMinVersion>(),
            Err(ParseTlsMinVersionError::Unsupported("VersionTLS11".into()))
        );
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
