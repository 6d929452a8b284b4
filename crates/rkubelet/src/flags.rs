//! The rkubelet command line: upstream kubelet flag names, the
//! `--config` KubeletConfiguration file, and the merge of the two (a flag
//! given explicitly overrides the file, as upstream).
//!
//! Numeric and duration flags take the next argument as their value even when
//! it starts with '-' (as Go's pflag does), so `--healthz-port -1` is reported
//! as a bad value rather than as an unknown flag.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use k8s_openapi::api::core::v1::Taint;
use kubelet_core::config::{
    AuthorizationMode, CgroupDriver, DropinError, FlushFrequency, KubeletConfiguration,
    LoggingConfiguration, MemoryReservation, TLS_CIPHER_SUITES, TlsMinVersion, VModuleItem,
    parse_kubelet_config_layers, parse_reservation,
};
use kubelet_core::duration::parse_go_duration;

/// Where the machine's hostname is read from when --hostname-override is absent.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// rkubelet: a Kubernetes node agent running static pods against a CRI runtime.
#[derive(Parser, Debug)]
#[command(name = "rkubelet", version)]
pub struct Flags {
    /// KubeletConfiguration file (kubelet.config.k8s.io/v1beta1). Flags given on the command line
    /// override its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Directory of drop-in configuration files (`*.conf`, in lexical order,
    /// subdirectories included) merged over --config, as upstream's.
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,

    /// URL of static pod manifests (staticPodURL).
    #[arg(long, value_name = "URL")]
    pub manifest_url: Option<String>,

    /// Headers of the requests to --manifest-url, `Name:value` separated by commas (repeat to add
    /// values; staticPodURLHeader).
    #[arg(long, value_name = "NAME:VALUE,...", value_parser = parse_header, value_delimiter = ',')]
    pub manifest_url_header: Vec<(String, String)>,

    /// How often --manifest-url is read (httpCheckFrequency, a Go duration).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub http_check_frequency: Option<Duration>,

    /// Directory of static pod manifests (upstream's deprecated spelling of staticPodPath).
    #[arg(long, value_name = "DIR")]
    pub pod_manifest_path: Option<PathBuf>,

    /// The CRI endpoint, e.g. unix:///run/containerd/containerd.sock.
    #[arg(long, value_name = "ENDPOINT")]
    pub container_runtime_endpoint: Option<String>,

    /// The CRI ImageService's endpoint when not the container runtime's.
    #[arg(long, value_name = "ENDPOINT")]
    pub image_service_endpoint: Option<String>,

    /// Directory for the kubelet's state (pods, plugins, checkpoints).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,

    /// Node name to use instead of the machine's hostname.
    #[arg(long, value_name = "NAME")]
    pub hostname_override: Option<String>,

    /// kubeconfig of the API server to join (client certificate or bearer token). Without it
    /// rkubelet runs standalone on static pods.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// kubeconfig with a bootstrap token: while --kubeconfig holds no valid client certificate,
    /// one is requested with it (a CertificateSigningRequest) and --kubeconfig is written to
    /// point at <cert-dir>/kubelet-client-current.pem.
    #[arg(long, value_name = "FILE")]
    pub bootstrap_kubeconfig: Option<PathBuf>,

    /// Directory of the node's certificates: the client certificate's pairs and the self-signed
    /// serving pair (kubelet.crt, kubelet.key).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/kubelet/pki")]
    pub cert_dir: PathBuf,

    /// Rotate the client certificate before it expires (rotateCertificates).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub rotate_certificates: Option<bool>,

    /// Request the kubelet API's serving certificate with a CSR and rotate it (upstream's
    /// deprecated spelling of serverTLSBootstrap).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub rotate_server_certificates: Option<bool>,

    /// Image credential provider plugins' config: a CredentialProviderConfig file (JSON/YAML),
    /// or a directory of such files merged in lexical order (not its subdirectories).
    #[arg(long, value_name = "PATH")]
    pub image_credential_provider_config: Option<PathBuf>,

    /// The directory of the credential provider plugins' executables.
    #[arg(long, value_name = "DIR")]
    pub image_credential_provider_bin_dir: Option<PathBuf>,

    /// Refuse to start on a cgroup v1 host (failCgroupV1; default true, as upstream).
    #[arg(long = "fail-cgroupv1", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub fail_cgroupv1: Option<bool>,

    /// rkubelet's own: SIGTERM is a node shutdown (for nodes without systemd-logind): the pods
    /// stop as the shutdown grace periods say, then rkubelet exits. Needs shutdownGracePeriod
    /// or shutdownGracePeriodByPodPriority.
    #[arg(long)]
    pub shutdown_on_sigterm: bool,

    /// Feature gates, `Name=true|false` separated by commas; each wins over the same gate in
    /// featureGates.
    #[arg(long, value_name = "NAME=BOOL,...", value_parser = parse_gate, value_delimiter = ',')]
    pub feature_gates: Vec<(String, bool)>,

    /// IP address(es) of the node, comma-separated; detected when absent.
    #[arg(long, value_name = "IP[,IP]", value_delimiter = ',')]
    pub node_ip: Vec<std::net::IpAddr>,

    /// Labels to add when registering the node, `key=value` pairs separated by commas.
    #[arg(long, value_name = "KEY=VALUE,...", value_parser = parse_label, value_delimiter = ',')]
    pub node_labels: Vec<(String, String)>,

    /// Let the attach/detach controller attach the node's volumes
    /// (enableControllerAttachDetach; false is refused).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub enable_controller_attach_detach: Option<bool>,

    /// Upstream's run-once mode (runOnce): refused when true, as upstream.
    #[arg(long = "runonce", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub run_once: Option<bool>,

    /// Register the node with the API server (registerNode).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub register_node: Option<bool>,

    /// Taints to register the node with, `key=value:Effect` separated by commas.
    #[arg(long, value_name = "TAINTS", value_parser = parse_taint, value_delimiter = ',')]
    pub register_with_taints: Vec<TaintSpec>,

    /// Log verbosity (klog level; logging.verbosity): 0-2 info, 3-4 debug, 5+ trace.
    #[arg(short = 'v', long = "v", value_name = "LEVEL")]
    pub v: Option<u32>,

    /// Log format (logging.format): "text" or "json" (klog's JSON lines).
    #[arg(long, value_name = "FORMAT")]
    pub logging_format: Option<String>,

    /// logging.flushFrequency (every line is written as it comes).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration)]
    pub log_flush_frequency: Option<Duration>,

    /// logging.vmodule, `pattern=N,...` (refused: rkubelet's lines come from Rust modules).
    #[arg(long, value_name = "PATTERN=N", value_parser = parse_vmodule, value_delimiter = ',')]
    pub vmodule: Vec<VModuleItem>,

    /// logging.options.json.splitStream: info to stdout, errors to stderr (LoggingAlphaOptions).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub log_json_split_stream: Option<bool>,

    /// logging.options.text.splitStream (LoggingAlphaOptions).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub log_text_split_stream: Option<bool>,

    /// Maximum period between pod syncs (Go duration, e.g. 1m0s).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub sync_frequency: Option<Duration>,

    /// How often the static pod path is rescanned (Go duration, e.g. 20s).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub file_check_frequency: Option<Duration>,

    /// Timeout of CRI requests other than long-running ones (Go duration, e.g. 2m0s).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub runtime_request_timeout: Option<Duration>,

    /// Address the healthz endpoint listens on.
    #[arg(long, value_name = "ADDRESS")]
    pub healthz_bind_address: Option<String>,

    /// Port of the healthz endpoint; 0 disables it.
    #[arg(long, value_name = "PORT", allow_hyphen_values = true)]
    pub healthz_port: Option<u16>,

    /// Port of the unauthenticated read-only server; 0 disables it.
    #[arg(long, value_name = "PORT", allow_hyphen_values = true)]
    pub read_only_port: Option<u16>,

    /// IP address the kubelet's servers bind to.
    #[arg(long, value_name = "IP")]
    pub address: Option<String>,

    /// Most pods this kubelet runs.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub max_pods: Option<u32>,

    /// Cgroup driver shared with the runtime.
    #[arg(long, value_name = "DRIVER", value_parser = CgroupDriver::from_str)]
    pub cgroup_driver: Option<CgroupDriver>,

    /// Port of the kubelet API (HTTPS).
    #[arg(long, value_name = "PORT", allow_hyphen_values = true)]
    pub port: Option<u16>,

    /// Serving certificate of the kubelet API; without it a self-signed one is kept in
    /// <root-dir>/pki.
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// Private key of --tls-cert-file.
    #[arg(long, value_name = "FILE")]
    pub tls_private_key_file: Option<PathBuf>,

    /// Lowest TLS version served: VersionTLS12 or VersionTLS13.
    #[arg(long, value_name = "VERSION", value_parser = TlsMinVersion::from_str)]
    pub tls_min_version: Option<TlsMinVersion>,

    /// TLS 1.2 cipher suites allowed, comma-separated upstream names.
    #[arg(long, value_name = "SUITES", value_delimiter = ',', value_parser = parse_cipher_suite)]
    pub tls_cipher_suites: Vec<String>,

    /// CA bundle verifying client certificates of kubelet API callers.
    #[arg(long, value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// Check bearer tokens of kubelet API callers with TokenReviews.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub authentication_token_webhook: Option<bool>,

    /// How long TokenReview answers are cached (Go duration).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub authentication_token_webhook_cache_ttl: Option<Duration>,

    /// Let kubelet API requests without credentials through as system:anonymous.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub anonymous_auth: Option<bool>,

    /// Authorization of kubelet API requests: Webhook or AlwaysAllow.
    #[arg(long, value_name = "MODE", value_parser = AuthorizationMode::from_str)]
    pub authorization_mode: Option<AuthorizationMode>,

    /// How long allowed SubjectAccessReview answers are cached (Go duration).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub authorization_webhook_cache_authorized_ttl: Option<Duration>,

    /// How long denied SubjectAccessReview answers are cached (Go duration).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub authorization_webhook_cache_unauthorized_ttl: Option<Duration>,

    /// Idle time after which a streaming connection (exec, attach, port-forward) is closed.
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub streaming_connection_idle_timeout: Option<Duration>,

    /// Serve exec, attach, port-forward, container logs and running pods on the kubelet API.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub enable_debugging_handlers: Option<bool>,

    /// Nameservers of ClusterFirst pods, comma-separated IP addresses.
    #[arg(long, value_name = "IP[,IP]", value_delimiter = ',', value_parser = parse_ip)]
    pub cluster_dns: Vec<String>,

    /// The cluster's DNS domain, searched by ClusterFirst pods.
    #[arg(long, value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,

    /// The node's resolver file, the base of pods' resolv.conf ("" for none).
    #[arg(long, value_name = "FILE")]
    pub resolv_conf: Option<String>,

    /// Run containers that name no seccomp profile with the runtime's default one.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub seccomp_default: Option<bool>,

    /// Unsafe sysctls (or prefix* patterns) pods may set, comma-separated.
    #[arg(long, value_name = "SYSCTL[,SYSCTL]", value_delimiter = ',')]
    pub allowed_unsafe_sysctls: Vec<String>,

    /// Pull images one at a time.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub serialize_image_pulls: Option<bool>,

    /// Give pods QoS and pod cgroups under <cgroup-root>/kubepods.
    #[arg(long = "cgroups-per-qos", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub cgroups_per_qos: Option<bool>,

    /// The cgroup the kubepods cgroup is made under (it must exist).
    #[arg(long, value_name = "CGROUP")]
    pub cgroup_root: Option<String>,

    /// The cgroup rkubelet moves itself into (kubeletCgroups).
    #[arg(long, value_name = "CGROUP")]
    pub kubelet_cgroups: Option<String>,

    /// The cgroup the root cgroup's processes are moved into (systemCgroups).
    #[arg(long, value_name = "CGROUP")]
    pub system_cgroups: Option<String>,

    /// The most processes a pod's cgroup holds (-1: no limit).
    #[arg(long = "pod-max-pids", value_name = "N", allow_hyphen_values = true)]
    pub pod_max_pids: Option<i64>,

    /// Enforce cpu limits with a CFS quota.
    #[arg(long = "cpu-cfs-quota", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub cpu_cfs_quota: Option<bool>,

    /// The CFS period of cpu limits (Go duration, 1ms to 1s).
    #[arg(long = "cpu-cfs-quota-period", value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub cpu_cfs_quota_period: Option<Duration>,

    /// What to enforce: pods, system-reserved, kube-reserved (or their -compressible forms), none.
    #[arg(long, value_name = "LEVEL[,LEVEL]", value_delimiter = ',')]
    pub enforce_node_allocatable: Option<Vec<String>>,

    /// CPU manager policy: none or static.
    #[arg(long, value_name = "POLICY")]
    pub cpu_manager_policy: Option<String>,

    /// The static CPU manager policy's options, `key=value` pairs separated by commas.
    #[arg(long, value_name = "KEY=VALUE,...", value_parser = parse_option, value_delimiter = ',')]
    pub cpu_manager_policy_options: Vec<(String, String)>,

    /// The CPU manager's reconcile period (Go duration).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub cpu_manager_reconcile_period: Option<Duration>,

    /// Memory manager policy: None or Static.
    #[arg(long, value_name = "POLICY")]
    pub memory_manager_policy: Option<String>,

    /// Memory reserved for the system per NUMA node (Static memory manager):
    /// `0:memory=1Gi,hugepages-1M=2Gi`, nodes separated by `;` or repeated
    /// flags; each kind must add up to kube-reserved, system-reserved and
    /// the hard eviction threshold.
    #[arg(long, value_name = "NODE:TYPE=QUANTITY,...", value_parser = parse_reserved_memory)]
    pub reserved_memory: Vec<ReservedMemory>,

    /// Topology manager policy: none, best-effort, restricted or single-numa-node.
    #[arg(long, value_name = "POLICY")]
    pub topology_manager_policy: Option<String>,

    /// The topology manager policy's options, `key=value` pairs separated by commas.
    #[arg(long, value_name = "KEY=VALUE,...", value_parser = parse_option, value_delimiter = ',')]
    pub topology_manager_policy_options: Vec<(String, String)>,

    /// Topology manager scope: container or pod.
    #[arg(long, value_name = "SCOPE")]
    pub topology_manager_scope: Option<String>,

    /// CPUs kept for the system, e.g. 0-1,4: their count replaces the cpu of
    /// --system-reserved and --kube-reserved.
    #[arg(long = "reserved-cpus", value_name = "CPUS")]
    pub reserved_cpus: Option<String>,

    /// Resources kept for the system, e.g. cpu=200m,memory=500Mi,pid=1000.
    #[arg(long, value_name = "RESOURCE=QUANTITY[,...]", value_parser = parse_reservation)]
    pub system_reserved: Option<BTreeMap<String, i64>>,

    /// Resources kept for Kubernetes' daemons, e.g. cpu=200m,memory=500Mi.
    #[arg(long, value_name = "RESOURCE=QUANTITY[,...]", value_parser = parse_reservation)]
    pub kube_reserved: Option<BTreeMap<String, i64>>,

    /// The cgroup --system-reserved is enforced on.
    #[arg(long, value_name = "CGROUP")]
    pub system_reserved_cgroup: Option<String>,

    /// The cgroup --kube-reserved is enforced on.
    #[arg(long, value_name = "CGROUP")]
    pub kube_reserved_cgroup: Option<String>,

    /// Hard eviction thresholds, e.g. memory.available<1Gi,nodefs.available<10%.
    #[arg(long, value_name = "SIGNAL<VALUE[,...]", value_parser = parse_langle_map)]
    pub eviction_hard: Option<BTreeMap<String, String>>,

    /// Soft eviction thresholds, e.g. memory.available<1.5Gi.
    #[arg(long, value_name = "SIGNAL<VALUE[,...]", value_parser = parse_langle_map)]
    pub eviction_soft: Option<BTreeMap<String, String>>,

    /// How long each soft threshold must hold, e.g. memory.available=1m30s.
    #[arg(long, value_name = "SIGNAL=DURATION[,...]", value_parser = parse_equals_map)]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,

    /// How far past its threshold eviction brings a signal, e.g. imagefs.available=2Gi.
    #[arg(long, value_name = "SIGNAL=VALUE[,...]", value_parser = parse_equals_map)]
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,

    /// How long a pressure condition stays after its threshold was last met.
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration, allow_hyphen_values = true)]
    pub eviction_pressure_transition_period: Option<Duration>,

    /// The most grace (seconds) a pod evicted for a soft threshold gets.
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
    pub eviction_max_pod_grace_period: Option<i32>,

    /// Wake the eviction manager on the kernel's memcg notifications (cgroup v1).
    #[arg(long = "kernel-memcg-notification", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub kernel_memcg_notification: Option<bool>,

    /// Rotate a container's log file once it reaches this size, e.g. 10Mi.
    #[arg(long, value_name = "QUANTITY")]
    pub container_log_max_size: Option<String>,

    /// The most log files a container keeps, the one written included.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub container_log_max_files: Option<i32>,
}

/// `k<v,...` (upstream's LangleSeparatedMapStringString).
fn parse_langle_map(s: &str) -> Result<BTreeMap<String, String>, String> {
    parse_pairs(s, '<', "string<string")
}

/// `k=v,...` (upstream's MapStringString).
fn parse_equals_map(s: &str) -> Result<BTreeMap<String, String>, String> {
    parse_pairs(s, '=', "string=string")
}

fn parse_pairs(s: &str, sep: char, shape: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once(sep)
            .ok_or_else(|| format!("malformed pair, expect {shape}"))?;
        out.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(out)
}

/// One address of --cluster-dns.
fn parse_ip(s: &str) -> Result<String, String> {
    s.parse::<std::net::IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| format!("{s:?} is not an IP address"))
}

/// One `pattern=N` of --vmodule.
fn parse_vmodule(s: &str) -> Result<VModuleItem, String> {
    let (pattern, level) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("expect comma-separated list of pattern=N: {s:?}"))?;
    let verbosity = level
        .parse()
        .map_err(|_| format!("parsing verbosity in {s:?}: {level:?} is not a number"))?;
    Ok(VModuleItem {
        file_pattern: pattern.to_owned(),
        verbosity,
    })
}

/// One name of --tls-cipher-suites.
fn parse_cipher_suite(s: &str) -> Result<String, String> {
    if TLS_CIPHER_SUITES.contains(&s) {
        Ok(s.to_owned())
    } else {
        Err(format!("cipher suite {s:?} not supported or doesn't exist"))
    }
}

/// Everything start-up needs, once flags and the config file are merged and validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub config: KubeletConfiguration,
    pub root_dir: PathBuf,
    /// --hostname-override, else the machine's hostname; trimmed and lowercased.
    pub node_name: String,
    /// logging.verbosity (with `-v`), as a tracing level's klog number.
    pub verbosity: u8,
    /// Upstream KubeletConfiguration fields in the file that rkubelet ignores (to warn about).
    pub ignored_fields: Vec<String>,
    pub kubeconfig: Option<PathBuf>,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub cert_dir: PathBuf,
    pub node_ips: Vec<String>,
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// --shutdown-on-sigterm.
    pub shutdown_on_sigterm: bool,
    /// --image-credential-provider-config and --image-credential-provider-bin-dir.
    pub credential_provider: Option<(PathBuf, PathBuf)>,
}

/// A taint from --register-with-taints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintSpec {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// `key=value` of --node-labels.
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("invalid label {s:?}: want key=value"))?;
    let k = k.trim();
    if k.is_empty() || k.len() > 317 || k.contains(char::is_whitespace) {
        return Err(format!("invalid label key {k:?}"));
    }
    if v.len() > 63 || v.contains(char::is_whitespace) {
        return Err(format!("invalid label value {v:?} for key {k:?}"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// One `key=value` of a map flag (upstream's mapStringString).
fn parse_option(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("malformed pair, expect string=string: {s:?}"))?;
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

/// One --reserved-memory: NUMA nodes' reservations separated by `;`
/// (upstream's ReservedMemoryVar: an empty value adds nothing).
#[derive(Clone, Debug)]
pub struct ReservedMemory(Vec<MemoryReservation>);

fn parse_reserved_memory(s: &str) -> Result<ReservedMemory, String> {
    if s.is_empty() {
        return Ok(ReservedMemory(Vec::new()));
    }
    s.split(';')
        .map(parse_node_reservation)
        .collect::<Result<_, _>>()
        .map(ReservedMemory)
}

/// One NUMA node's `id:type=quantity[,type=quantity...]` of
/// --reserved-memory, with upstream's messages.
fn parse_node_reservation(s: &str) -> Result<MemoryReservation, String> {
    let format = || {
        format!(
            "the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...], got {s}"
        )
    };
    let parts: Vec<&str> = s.split(':').collect();
    let [node, limits] = parts[..] else {
        return Err(format());
    };
    let numa_node = kubelet_core::strconv::atoi(node)
        .ok()
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| {
            format!("failed to convert the NUMA node ID, expected integer, got {node}")
        })?;
    let mut out = MemoryReservation {
        numa_node,
        limits: BTreeMap::new(),
    };
    for limit in limits.split(',') {
        let pair: Vec<&str> = limit.split('=').collect();
        let [name, quantity] = pair[..] else {
            return Err(format!(
                "the reserved limit has incorrect value, expected type=quantity, got {limit}"
            ));
        };
        if !kubelet_core::resources::is_memory_resource(name) {
            return Err(format!(
                "memory type conversion error, unknown type: {name:?}"
            ));
        }
        let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(quantity.to_owned());
        kubelet_core::quantity::parse_bytes(&q)
            .map_err(|_| format!("failed to parse the quantity: {quantity}"))?;
        out.limits.insert(name.to_owned(), quantity.to_owned());
    }
    Ok(out)
}

/// `Name:value` of --manifest-url-header.
fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once(':')
        .ok_or_else(|| format!("malformed header {s:?}: want Name:value"))?;
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

/// `Name=true|false` of --feature-gates, with upstream's messages.
fn parse_gate(s: &str) -> Result<(String, bool), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("missing bool value for {}", s.trim()))?;
    let (k, v) = (k.trim(), v.trim());
    let value = match v.to_ascii_lowercase().as_str() {
        "1" | "t" | "true" => true,
        "0" | "f" | "false" => false,
        _ => {
            return Err(format!(
                "invalid value of {k}={v}, err: strconv.ParseBool: parsing {v:?}: invalid syntax"
            ));
        }
    };
    Ok((k.to_owned(), value))
}

/// `key[=value]:Effect` of --register-with-taints.
fn parse_taint(s: &str) -> Result<TaintSpec, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("invalid taint {s:?}: want key=value:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "invalid taint effect {effect:?} in {s:?}: want NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_owned())),
        None => (kv, None),
    };
    if key.is_empty() {
        return Err(format!("invalid taint {s:?}: empty key"));
    }
    Ok(TaintSpec {
        key: key.to_owned(),
        value,
        effect: effect.to_owned(),
    })
}

impl Flags {
    /// Loads --config (if given; a missing or unreadable file is an error naming the path),
    /// applies the flags given explicitly on top, and validates the result.
    pub fn into_settings(self) -> anyhow::Result<Settings> {
        self.into_settings_with(|| {
            std::fs::read_to_string(HOSTNAME_FILE)
                .with_context(|| format!("failed to read the hostname from {HOSTNAME_FILE}"))
        })
    }

    fn into_settings_with(
        self,
        machine_hostname: impl FnOnce() -> anyhow::Result<String>,
    ) -> anyhow::Result<Settings> {
        let (mut config, ignored_fields) =
            load_config(self.config.as_deref(), self.config_dir.as_deref())?;
        self.apply_overrides(&mut config);
        config.validate()?;

        let raw_name = match self.hostname_override.as_deref() {
            Some(name) if !name.trim().is_empty() => name.to_owned(),
            _ => machine_hostname()?,
        };
        let node_name = raw_name.trim().to_lowercase();
        if node_name.is_empty() {
            bail!("empty hostname is invalid");
        }

        if self.bootstrap_kubeconfig.is_some() && self.kubeconfig.is_none() {
            bail!(
                "--bootstrap-kubeconfig needs --kubeconfig: the path the kubeconfig is written to"
            );
        }

        if self.shutdown_on_sigterm && kubelet_core::nodeshutdown::periods(&config).is_empty() {
            bail!(
                "--shutdown-on-sigterm needs a graceful shutdown: set shutdownGracePeriod or \
                 shutdownGracePeriodByPodPriority"
            );
        }

        let verbosity = u8::try_from(config.logging.verbosity).unwrap_or(u8::MAX);
        Ok(Settings {
            config,
            root_dir: self.root_dir,
            node_name,
            verbosity,
            ignored_fields,
            kubeconfig: self.kubeconfig,
            bootstrap_kubeconfig: self.bootstrap_kubeconfig,
            cert_dir: self.cert_dir,
            node_ips: self.node_ip.iter().map(ToString::to_string).collect(),
            node_labels: self.node_labels.into_iter().collect(),
            shutdown_on_sigterm: self.shutdown_on_sigterm,
            // Either one set: both are used (an empty one refused by the
            // plugins' registration, as upstream).
            credential_provider: (self.image_credential_provider_config.is_some()
                || self.image_credential_provider_bin_dir.is_some())
            .then(|| {
                (
                    self.image_credential_provider_config.unwrap_or_default(),
                    self.image_credential_provider_bin_dir.unwrap_or_default(),
                )
            }),
        })
    }

    /// The logging flags over `logging`, as upstream's (which bind into
    /// the same configuration).
    fn apply_logging(&self, logging: &mut LoggingConfiguration) {
        if let Some(v) = self.v {
            logging.verbosity = v;
        }
        if let Some(format) = &self.logging_format {
            logging.format = format.clone();
        }
        if let Some(d) = self.log_flush_frequency {
            logging.flush_frequency = FlushFrequency {
                duration: d,
                as_string: true,
            };
        }
        if !self.vmodule.is_empty() {
            logging.vmodule = self.vmodule.clone();
        }
        if let Some(split) = self.log_json_split_stream {
            logging.options.json.split_stream = split;
        }
        if let Some(split) = self.log_text_split_stream {
            logging.options.text.split_stream = split;
        }
    }

    fn apply_overrides(&self, config: &mut KubeletConfiguration) {
        if let Some(path) = &self.pod_manifest_path {
            config.static_pod_path = (!path.as_os_str().is_empty()).then(|| path.clone());
        }
        if let Some(endpoint) = &self.container_runtime_endpoint {
            config.container_runtime_endpoint = endpoint.clone();
        }
        if let Some(endpoint) = &self.image_service_endpoint {
            config.image_service_endpoint = endpoint.clone();
        }
        if let Some(d) = self.sync_frequency {
            config.sync_frequency = d;
        }
        if let Some(d) = self.file_check_frequency {
            config.file_check_frequency = d;
        }
        if let Some(d) = self.runtime_request_timeout {
            config.runtime_request_timeout = d;
        }
        if let Some(addr) = &self.healthz_bind_address {
            config.healthz_bind_address = addr.clone();
        }
        if let Some(port) = self.healthz_port {
            config.healthz_port = port;
        }
        if let Some(port) = self.read_only_port {
            config.read_only_port = port;
        }
        if let Some(addr) = &self.address {
            config.address = addr.clone();
        }
        if let Some(n) = self.max_pods {
            config.max_pods = n;
        }
        if let Some(driver) = self.cgroup_driver {
            config.cgroup_driver = driver;
        }
        if let Some(attach) = self.enable_controller_attach_detach {
            config.enable_controller_attach_detach = attach;
        }
        if let Some(once) = self.run_once {
            config.run_once = once;
        }
        if let Some(register) = self.register_node {
            config.register_node = register;
        }
        if let Some(rotate) = self.rotate_certificates {
            config.rotate_certificates = rotate;
        }
        if let Some(rotate) = self.rotate_server_certificates {
            config.server_tls_bootstrap = rotate;
        }
        if let Some(url) = &self.manifest_url {
            config.static_pod_url = url.clone();
        }
        if !self.manifest_url_header.is_empty() {
            config.static_pod_url_header.clear();
            for (k, v) in &self.manifest_url_header {
                config
                    .static_pod_url_header
                    .entry(k.clone())
                    .or_default()
                    .push(v.clone());
            }
        }
        if let Some(d) = self.http_check_frequency {
            config.http_check_frequency = d;
        }
        for (gate, value) in &self.feature_gates {
            config.feature_gates.insert(gate.clone(), *value);
        }
        self.apply_logging(&mut config.logging);
        if let Some(fail) = self.fail_cgroupv1 {
            config.fail_cgroup_v1 = fail;
        }
        if !self.register_with_taints.is_empty() {
            config.register_with_taints = self
                .register_with_taints
                .iter()
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    time_added: None,
                })
                .collect();
        }
        if !self.cluster_dns.is_empty() {
            config.cluster_dns = self.cluster_dns.clone();
        }
        if let Some(d) = &self.cluster_domain {
            config.cluster_domain = d.clone();
        }
        if let Some(f) = &self.resolv_conf {
            config.resolv_conf = f.clone();
        }
        if let Some(b) = self.seccomp_default {
            config.seccomp_default = b;
        }
        if !self.allowed_unsafe_sysctls.is_empty() {
            config.allowed_unsafe_sysctls = self.allowed_unsafe_sysctls.clone();
        }
        if let Some(b) = self.serialize_image_pulls {
            config.serialize_image_pulls = b;
        }
        if let Some(size) = &self.container_log_max_size {
            config.container_log_max_size = size.clone();
        }
        if let Some(n) = self.container_log_max_files {
            config.container_log_max_files = n;
        }
        self.apply_node_resource_overrides(config);
        self.apply_server_overrides(config);
    }

    /// The container manager's flags (cgroups, reservations).
    fn apply_node_resource_overrides(&self, config: &mut KubeletConfiguration) {
        if let Some(b) = self.cgroups_per_qos {
            config.cgroups_per_qos = b;
        }
        if let Some(r) = &self.cgroup_root {
            config.cgroup_root = r.clone();
        }
        if let Some(c) = &self.kubelet_cgroups {
            config.kubelet_cgroups = c.clone();
        }
        if let Some(c) = &self.system_cgroups {
            config.system_cgroups = c.clone();
        }
        if let Some(n) = self.pod_max_pids {
            config.pod_pids_limit = n;
        }
        if let Some(b) = self.cpu_cfs_quota {
            config.cpu_cfs_quota = b;
        }
        if let Some(d) = self.cpu_cfs_quota_period {
            config.cpu_cfs_quota_period = d;
        }
        if let Some(levels) = &self.enforce_node_allocatable {
            config.enforce_node_allocatable =
                levels.iter().filter(|l| !l.is_empty()).cloned().collect();
        }
        if let Some(p) = &self.cpu_manager_policy {
            config.cpu_manager_policy = p.clone();
        }
        if !self.cpu_manager_policy_options.is_empty() {
            config.cpu_manager_policy_options =
                self.cpu_manager_policy_options.iter().cloned().collect();
        }
        if let Some(d) = self.cpu_manager_reconcile_period {
            config.cpu_manager_reconcile_period = d;
        }
        if let Some(p) = &self.memory_manager_policy {
            config.memory_manager_policy = p.clone();
        }
        if !self.reserved_memory.is_empty() {
            config.reserved_memory = self
                .reserved_memory
                .iter()
                .flat_map(|r| r.0.iter().cloned())
                .collect();
        }
        if let Some(p) = &self.topology_manager_policy {
            config.topology_manager_policy = p.clone();
        }
        if let Some(scope) = &self.topology_manager_scope {
            config.topology_manager_scope = scope.clone();
        }
        if !self.topology_manager_policy_options.is_empty() {
            config.topology_manager_policy_options = self
                .topology_manager_policy_options
                .iter()
                .cloned()
                .collect();
        }
        if let Some(cpus) = &self.reserved_cpus {
            config.reserved_system_cpus = cpus.clone();
        }
        if let Some(r) = &self.system_reserved {
            config.system_reserved = r.clone();
        }
        if let Some(r) = &self.kube_reserved {
            config.kube_reserved = r.clone();
        }
        if let Some(c) = &self.system_reserved_cgroup {
            config.system_reserved_cgroup = c.clone();
        }
        if let Some(c) = &self.kube_reserved_cgroup {
            config.kube_reserved_cgroup = c.clone();
        }
        for (flag, field) in [
            (&self.eviction_hard, &mut config.eviction_hard),
            (&self.eviction_soft, &mut config.eviction_soft),
            (
                &self.eviction_soft_grace_period,
                &mut config.eviction_soft_grace_period,
            ),
            (
                &self.eviction_minimum_reclaim,
                &mut config.eviction_minimum_reclaim,
            ),
        ] {
            if let Some(m) = flag {
                *field = m.clone();
            }
        }
        if let Some(d) = self.eviction_pressure_transition_period {
            config.eviction_pressure_transition_period = d;
        }
        if let Some(n) = self.eviction_max_pod_grace_period {
            config.eviction_max_pod_grace_period = n;
        }
        if let Some(b) = self.kernel_memcg_notification {
            config.kernel_memcg_notification = b;
        }
    }

    /// The kubelet API's flags (port, TLS, authentication, authorization, streaming).
    fn apply_server_overrides(&self, config: &mut KubeletConfiguration) {
        if let Some(port) = self.port {
            config.port = port;
        }
        if let Some(path) = &self.tls_cert_file {
            config.tls_cert_file = (!path.as_os_str().is_empty()).then(|| path.clone());
        }
        if let Some(path) = &self.tls_private_key_file {
            config.tls_private_key_file = (!path.as_os_str().is_empty()).then(|| path.clone());
        }
        if let Some(version) = self.tls_min_version {
            config.tls_min_version = version;
        }
        if !self.tls_cipher_suites.is_empty() {
            config.tls_cipher_suites = self.tls_cipher_suites.clone();
        }
        let authn = &mut config.authentication;
        if let Some(path) = &self.client_ca_file {
            authn.x509.client_ca_file = (!path.as_os_str().is_empty()).then(|| path.clone());
        }
        if let Some(enabled) = self.authentication_token_webhook {
            authn.webhook.enabled = enabled;
        }
        if let Some(ttl) = self.authentication_token_webhook_cache_ttl {
            authn.webhook.cache_ttl = ttl;
        }
        if let Some(enabled) = self.anonymous_auth {
            authn.anonymous.enabled = enabled;
        }
        let authz = &mut config.authorization;
        if let Some(mode) = self.authorization_mode {
            authz.mode = mode;
        }
        if let Some(ttl) = self.authorization_webhook_cache_authorized_ttl {
            authz.webhook.cache_authorized_ttl = ttl;
        }
        if let Some(ttl) = self.authorization_webhook_cache_unauthorized_ttl {
            authz.webhook.cache_unauthorized_ttl = ttl;
        }
        if let Some(d) = self.streaming_connection_idle_timeout {
            config.streaming_connection_idle_timeout = d;
        }
        if let Some(enabled) = self.enable_debugging_handlers {
            config.enable_debugging_handlers = enabled;
        }
    }
}

/// --config, with the drop-ins of --config-dir merged over it.
fn load_config(
    file: Option<&Path>,
    dropin_dir: Option<&Path>,
) -> anyhow::Result<(KubeletConfiguration, Vec<String>)> {
    let main =
        match file {
            Some(path) => Some(std::fs::read_to_string(path).with_context(|| {
                format!("failed to read kubelet config file {}", path.display())
            })?),
            None => None,
        };
    let mut dropins = Vec::new();
    if let Some(dir) = dropin_dir {
        for path in dropin_files(dir).with_context(|| {
            format!(
                "failed to merge kubelet configs: failed to walk through kubelet dropin directory {:?}",
                dir.display().to_string()
            )
        })? {
            let content = std::fs::read_to_string(&path).with_context(|| {
                format!("failed to load kubelet dropin file, path: {}", path.display())
            })?;
            dropins.push((path.display().to_string(), content));
        }
    }
    parse_kubelet_config_layers(main.as_deref(), &dropins).map_err(|e| match (e, file) {
        (DropinError::Main(e), Some(path)) => anyhow::Error::new(e).context(format!(
            "failed to load kubelet config file {}",
            path.display()
        )),
        (e, _) => anyhow::Error::new(e),
    })
}

/// The `*.conf` files under `dir`, subdirectories included, in lexical
/// order per directory (Go's filepath.WalkDir, as upstream walks them);
/// others are skipped, as upstream does.
fn dropin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    let mut out = Vec::new();
    for e in entries {
        let path = e.path();
        if e.file_type()?.is_dir() {
            out.extend(dropin_files(&path)?);
        } else if path.extension().is_some_and(|x| x == "conf") {
            out.push(path);
        } else {
            tracing::debug!(file = %path.display(), "Skipped file in drop-in directory (does not have .conf extension)");
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "cis_tests.rs"]
mod cis_tests;

#[cfg(test)]
mod tests {
    use std::io::Write;

    use kubelet_core::config::DEFAULT_CONTAINER_RUNTIME_ENDPOINT;

    use super::*;

    const FILE: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
syncFrequency: 30s
fileCheckFrequency: 5s
runtimeRequestTimeout: 1m
containerRuntimeEndpoint: unix:///run/crio/crio.sock
healthzBindAddress: 0.0.0.0
healthzPort: 11000
readOnlyPort: 10255
address: 127.0.0.1
maxPods: 50
cgroupDriver: systemd
clusterDomain: cluster.local
hairpinMode: none
";

    fn config_file(content: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content.as_bytes()).unwrap();
        f
    }

    #[test]
    fn config_dir_dropins_in_lexical_order_then_flags() {
        const HEADER: &str =
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let dir = tempfile::tempdir().unwrap();
        let put = |rel: &str, body: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{HEADER}{body}")).unwrap();
        };
        // Walked as Go's WalkDir: 10.conf, a/05.conf, b.conf; the others
        // are not drop-ins.
        put("10.conf", "maxPods: 10\nsyncFrequency: 10s\n");
        put("a/05.conf", "maxPods: 20\n");
        put("b.conf", "fileCheckFrequency: 7s\n");
        put("c.yaml", "maxPods: 99\n");
        put("z.conf.bak", "maxPods: 98\n");
        let file = config_file(&format!("{HEADER}maxPods: 5\nsyncFrequency: 5s\n"));
        let dir_arg = format!("--config-dir={}", dir.path().display());
        let file_arg = format!("--config={}", file.path().display());
        let s = settings(&[&file_arg, &dir_arg]).unwrap();
        assert_eq!(s.config.max_pods, 20);
        assert_eq!(s.config.sync_frequency, Duration::from_secs(10));
        assert_eq!(s.config.file_check_frequency, Duration::from_secs(7));
        // The flags win over both.
        let s = settings(&[&file_arg, &dir_arg, "--max-pods=30"]).unwrap();
        assert_eq!(s.config.max_pods, 30);
        // A broken drop-in stops start-up, named.
        put("11.conf", "maxPods: [\n");
        let e = settings(&[&file_arg, &dir_arg]).unwrap_err();
        assert!(format!("{e:#}").contains("11.conf"), "{e:#}");
    }

    fn settings(args: &[&str]) -> anyhow::Result<Settings> {
        let flags = Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied()))?;
        flags.into_settings_with(|| Ok("  Node-A.example\n".to_owned()))
    }

    fn file_config() -> KubeletConfiguration {
        KubeletConfiguration {
            static_pod_path: Some("/etc/kubernetes/manifests".into()),
            sync_frequency: Duration::from_secs(30),
            file_check_frequency: Duration::from_secs(5),
            runtime_request_timeout: Duration::from_secs(60),
            container_runtime_endpoint: "unix:///run/crio/crio.sock".into(),
            healthz_bind_address: "0.0.0.0".into(),
            healthz_port: 11000,
            read_only_port: 10255,
            address: "127.0.0.1".into(),
            max_pods: 50,
            cgroup_driver: CgroupDriver::Systemd,
            cluster_domain: "cluster.local".into(),
            ..KubeletConfiguration::default()
        }
    }

    #[test]
    fn no_flags_gives_defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(
            s,
            Settings {
                config: KubeletConfiguration::default(),
                root_dir: "/var/lib/kubelet".into(),
                node_name: "node-a.example".into(),
                verbosity: 0,
                ignored_fields: vec![],
                kubeconfig: None,
                bootstrap_kubeconfig: None,
                cert_dir: "/var/lib/kubelet/pki".into(),
                node_ips: vec![],
                node_labels: Default::default(),
                shutdown_on_sigterm: false,
                credential_provider: None,
            }
        );
    }

    #[test]
    fn cluster_flags() {
        let s = settings(&[
            "--kubeconfig",
            "/etc/kubernetes/kubelet.conf",
            "--node-ip=192.0.2.7",
            "--node-labels=role=edge,zone=a",
            "--register-node=false",
            "--register-with-taints=dedicated=infra:NoSchedule,gpu:NoExecute",
        ])
        .unwrap();
        assert_eq!(
            s.kubeconfig.as_deref(),
            Some(Path::new("/etc/kubernetes/kubelet.conf"))
        );
        assert_eq!(s.node_ips, ["192.0.2.7"]);
        assert_eq!(s.node_labels.get("zone").map(String::as_str), Some("a"));
        assert!(!s.config.register_node);
        let taint = |key: &str, value: Option<&str>, effect: &str| Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        };
        assert_eq!(
            s.config.register_with_taints,
            [
                taint("dedicated", Some("infra"), "NoSchedule"),
                taint("gpu", None, "NoExecute"),
            ]
        );
        let s = settings(&[
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--cert-dir=/var/lib/rk/pki",
            "--rotate-certificates",
            "--rotate-server-certificates",
            "--feature-gates=ReloadKubeletClientCAFile=false,RotateKubeletServerCertificate=true",
            "--manifest-url=http://192.0.2.1/pods",
            "--manifest-url-header=a:hello,b:again",
            "--manifest-url-header=b:beautiful",
            "--http-check-frequency=5s",
        ])
        .unwrap();
        assert_eq!(s.config.static_pod_url, "http://192.0.2.1/pods");
        assert_eq!(s.config.static_pod_url_header["b"], ["again", "beautiful"]);
        assert_eq!(s.config.http_check_frequency, Duration::from_secs(5));
        assert_eq!(
            s.config.feature_gates,
            [
                ("ReloadKubeletClientCAFile".to_owned(), false),
                ("RotateKubeletServerCertificate".to_owned(), true)
            ]
            .into()
        );
        assert_eq!(
            s.bootstrap_kubeconfig.as_deref(),
            Some(Path::new("/etc/kubernetes/bootstrap-kubelet.conf"))
        );
        assert_eq!(s.cert_dir, Path::new("/var/lib/rk/pki"));
        assert!(s.config.rotate_certificates);
        assert!(s.config.server_tls_bootstrap);
        let err = settings(&["--bootstrap-kubeconfig=/b.conf"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--bootstrap-kubeconfig needs --kubeconfig: the path the kubeconfig is written to"
        );
        for (bad, want) in [
            (
                "--register-with-taints=a=b:Sometimes",
                "invalid taint effect \"Sometimes\" in \"a=b:Sometimes\"",
            ),
            ("--node-labels=novalue", "invalid label \"novalue\""),
            ("--node-ip=not-an-ip", "invalid IP address syntax"),
            ("--feature-gates=Foo", "missing bool value for Foo"),
            ("--feature-gates=Foo=maybe", "invalid value of Foo=maybe"),
            (
                "--feature-gates=Foo=true",
                "featureGates: unrecognized feature gate: Foo",
            ),
        ] {
            let err = settings(&[bad]).unwrap_err();
            assert!(err.to_string().contains(want), "{bad}: {err}");
        }
    }

    #[test]
    fn file_values_kept_when_flags_absent() {
        let f = config_file(FILE);
        let s = settings(&["--config", f.path().to_str().unwrap()]).unwrap();
        assert_eq!(s.config, file_config());
        assert_eq!(s.ignored_fields, vec!["hairpinMode"]);
    }

    #[test]
    fn flags_override_the_file() {
        let f = config_file(FILE);
        let config_arg = format!("--config={}", f.path().display());
        let s = settings(&[
            &config_arg,
            "--pod-manifest-path",
            "/srv/manifests",
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--image-service-endpoint=unix:///run/images.sock",
            "--root-dir",
            "/tmp/kubelet",
            "--hostname-override",
            " Worker-1 ",
            "--sync-frequency=2m",
            "--file-check-frequency",
            "1s",
            "--runtime-request-timeout=1h30m",
            "--healthz-bind-address=127.0.0.2",
            "--healthz-port=0",
            "--read-only-port",
            "0",
            "--address=::",
            "--max-pods=7",
            "--cgroup-driver=cgroupfs",
            "--cluster-dns=10.96.0.10,fd00::a",
            "--cluster-domain=k8s.test",
            "--resolv-conf=",
        ])
        .unwrap();
        assert_eq!(
            s.config,
            KubeletConfiguration {
                static_pod_path: Some("/srv/manifests".into()),
                sync_frequency: Duration::from_secs(120),
                file_check_frequency: Duration::from_secs(1),
                runtime_request_timeout: Duration::from_secs(5400),
                container_runtime_endpoint: DEFAULT_CONTAINER_RUNTIME_ENDPOINT.into(),
                image_service_endpoint: "unix:///run/images.sock".into(),
                healthz_bind_address: "127.0.0.2".into(),
                healthz_port: 0,
                read_only_port: 0,
                address: "::".into(),
                max_pods: 7,
                cgroup_driver: CgroupDriver::Cgroupfs,
                cluster_dns: vec!["10.96.0.10".into(), "fd00::a".into()],
                cluster_domain: "k8s.test".into(),
                resolv_conf: String::new(),
                ..KubeletConfiguration::default()
            }
        );
        assert_eq!(s.root_dir, PathBuf::from("/tmp/kubelet"));
        assert_eq!(s.node_name, "worker-1");
        assert_eq!(s.ignored_fields, vec!["hairpinMode"]);
    }

    #[test]
    fn some_flags_override_only_their_field() {
        let f = config_file(FILE);
        let s = settings(&["--config", f.path().to_str().unwrap(), "--max-pods", "9"]).unwrap();
        assert_eq!(
            s.config,
            KubeletConfiguration {
                max_pods: 9,
                ..file_config()
            }
        );
    }

    #[test]
    fn server_flags() {
        let s = settings(&[
            "--port=10350",
            "--tls-cert-file=/pki/kubelet.crt",
            "--tls-private-key-file",
            "/pki/kubelet.key",
            "--tls-min-version=VersionTLS13",
            "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "--client-ca-file=/pki/ca.crt",
            "--authentication-token-webhook",
            "--authentication-token-webhook-cache-ttl=10s",
            "--anonymous-auth=true",
            "--authorization-mode=AlwaysAllow",
            "--authorization-webhook-cache-authorized-ttl=1m",
            "--authorization-webhook-cache-unauthorized-ttl=5s",
            "--streaming-connection-idle-timeout=30m",
            "--enable-debugging-handlers=false",
        ])
        .unwrap();
        let c = &s.config;
        assert_eq!(c.port, 10350);
        assert_eq!(
            c.tls_cert_file.as_deref(),
            Some(Path::new("/pki/kubelet.crt"))
        );
        assert_eq!(
            c.tls_private_key_file.as_deref(),
            Some(Path::new("/pki/kubelet.key"))
        );
        assert_eq!(c.tls_min_version, TlsMinVersion::Tls13);
        assert_eq!(
            c.tls_cipher_suites,
            [
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
            ]
        );
        assert_eq!(
            c.authentication.x509.client_ca_file.as_deref(),
            Some(Path::new("/pki/ca.crt"))
        );
        assert!(c.authentication.webhook.enabled);
        assert_eq!(c.authentication.webhook.cache_ttl, Duration::from_secs(10));
        assert!(c.authentication.anonymous.enabled);
        assert_eq!(c.authorization.mode, AuthorizationMode::AlwaysAllow);
        assert_eq!(
            c.authorization.webhook.cache_authorized_ttl,
            Duration::from_secs(60)
        );
        assert_eq!(
            c.authorization.webhook.cache_unauthorized_ttl,
            Duration::from_secs(5)
        );
        assert_eq!(
            c.streaming_connection_idle_timeout,
            Duration::from_secs(1800)
        );
        assert!(!c.enable_debugging_handlers);

        // Flags override the file's authentication and authorization.
        let f = config_file(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             authentication:\n  anonymous:\n    enabled: true\n  webhook:\n    enabled: true\n\
             authorization:\n  mode: AlwaysAllow\n",
        );
        let config_arg = format!("--config={}", f.path().display());
        let s = settings(&[
            &config_arg,
            "--anonymous-auth=false",
            "--authentication-token-webhook=false",
            "--authorization-mode=Webhook",
        ])
        .unwrap();
        assert!(!s.config.authentication.anonymous.enabled);
        assert!(!s.config.authentication.webhook.enabled);
        assert_eq!(s.config.authorization.mode, AuthorizationMode::Webhook);

        for (args, needle) in [
            (&["--tls-min-version=VersionTLS11"][..], "--tls-min-version"),
            (
                &["--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA"],
                "TLS_RSA_WITH_RC4_128_SHA",
            ),
            (&["--authorization-mode=RBAC"], "RBAC"),
            (&["--port=70000"], "--port"),
            (&["--anonymous-auth=maybe"], "--anonymous-auth"),
        ] {
            let err = settings(args).unwrap_err().to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
        let err = settings(&["--port=0"]).unwrap_err().to_string();
        assert!(err.contains("port (--port)"), "{err}");
        let err = settings(&["--tls-cert-file=/pki/k.crt"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--tls-private-key-file"), "{err}");
    }

    #[test]
    fn verbosity_spellings() {
        for args in [
            &["--v=4"][..],
            &["--v", "4"],
            &["-v", "4"],
            &["-v=4"],
            &["-v4"],
        ] {
            let s = settings(args).unwrap_or_else(|e| panic!("{args:?}: {e:#}"));
            assert_eq!(s.verbosity, 4, "{args:?}");
        }
    }

    #[test]
    fn logging_flags_bind_into_the_logging_configuration() {
        let s = settings(&[
            "--logging-format=json",
            "-v",
            "3",
            "--log-flush-frequency=2s",
        ])
        .unwrap();
        assert_eq!(s.config.logging.format, "json");
        assert_eq!(s.config.logging.verbosity, 3);
        assert_eq!(s.verbosity, 3);
        assert_eq!(
            s.config.to_v1beta1_json()["logging"]["flushFrequency"],
            "2s"
        );
        let mut file = tempfile::NamedTempFile::new().unwrap();
        write!(
            file,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nlogging: {{verbosity: 5}}\n"
        )
        .unwrap();
        let path = file.path().to_str().unwrap();
        assert_eq!(settings(&["--config", path]).unwrap().verbosity, 5);
        assert_eq!(
            settings(&["--config", path, "--v=1"]).unwrap().verbosity,
            1,
            "-v wins"
        );
        for (args, want) in [
            (
                &["--logging-format=xml"][..],
                "logging.format: Invalid value: \"xml\": Unsupported log format",
            ),
            (
                &["--vmodule=prober=4"],
                "logging.vmodule: not supported by rkubelet",
            ),
            (
                &["--log-json-split-stream"],
                "logging.options.json.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled",
            ),
        ] {
            let e = format!("{:#}", settings(args).unwrap_err());
            assert!(e.contains(want), "{args:?}: {e}");
        }
        let split = settings(&[
            "--log-text-split-stream",
            "--feature-gates=LoggingAlphaOptions=true",
        ])
        .unwrap();
        assert!(split.config.logging.options.text.split_stream);
    }

    #[test]
    fn unknown_flag_is_rejected() {
        let err = Flags::try_parse_from(["rkubelet", "--bogus"]).unwrap_err();
        assert!(err.to_string().contains("--bogus"), "{err}");
    }

    #[test]
    fn bad_values_are_rejected_naming_the_flag() {
        let cases: &[&[&str]] = &[
            &["--healthz-port=abc"],
            &["--healthz-port=70000"],
            &["--read-only-port", "-1"],
            &["--max-pods=many"],
            &["--sync-frequency=10"],
            &["--file-check-frequency=-1s"],
            &["--runtime-request-timeout", "soon"],
            &["--sync-frequency", "-1s"],
            &["--max-pods", "-3"],
            &["--cgroup-driver=upstart"],
            &["--v=loud"],
            &["--kube-reserved=gpu=1"],
            &["--system-reserved=memory"],
        ];
        for args in cases {
            let err =
                Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied()))
                    .unwrap_err()
                    .to_string();
            let flag = args[0].split('=').next().unwrap();
            assert!(err.contains(flag), "{args:?}: {err}");
        }
        let err = Flags::try_parse_from(["rkubelet", "--healthz-port=abc"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("abc"), "{err}");
    }

    #[test]
    fn node_resource_flags() {
        let s = settings(&[
            "--cgroups-per-qos=false",
            "--enforce-node-allocatable=",
            "--cgroup-root=/rk",
            "--pod-max-pids=100",
            "--cpu-cfs-quota=false",
            "--cpu-cfs-quota-period=10ms",
            "--system-reserved=cpu=250m,memory=1Gi",
            "--kube-reserved=pid=500",
            "--kube-reserved-cgroup=/kube",
            "--system-reserved-cgroup=/system",
        ])
        .unwrap();
        let c = &s.config;
        assert!(!c.cgroups_per_qos && !c.cpu_cfs_quota);
        assert!(c.enforce_node_allocatable.is_empty());
        assert_eq!((c.cgroup_root.as_str(), c.pod_pids_limit), ("/rk", 100));
        assert_eq!(c.cpu_cfs_quota_period, Duration::from_millis(10));
        assert_eq!(
            c.system_reserved,
            BTreeMap::from([("cpu".to_owned(), 250), ("memory".to_owned(), 1 << 30)])
        );
        assert_eq!(c.kube_reserved, BTreeMap::from([("pid".to_owned(), 500)]));
        assert_eq!(
            (
                c.kube_reserved_cgroup.as_str(),
                c.system_reserved_cgroup.as_str()
            ),
            ("/kube", "/system")
        );
    }

    #[test]
    fn resource_manager_flags() {
        let s = settings(&[
            "--cpu-manager-policy=static",
            "--cpu-manager-reconcile-period=5s",
            "--memory-manager-policy=None",
            "--topology-manager-policy=none",
            "--topology-manager-scope=pod",
            "--topology-manager-policy-options=prefer-closest-numa-nodes=true,max-allowable-numa-nodes=8",
            "--cpu-manager-policy-options=full-pcpus-only=true",
            "--reserved-cpus=0",
        ])
        .unwrap();
        let c = &s.config;
        assert_eq!(c.cpu_manager_reconcile_period, Duration::from_secs(5));
        assert_eq!(c.topology_manager_scope, "pod");
        assert_eq!(
            c.topology_manager_policy_options["max-allowable-numa-nodes"],
            "8"
        );
        assert_eq!(c.topology_manager_policy_options.len(), 2);
        assert_eq!(c.cpu_manager_policy_options["full-pcpus-only"], "true");
        assert_eq!(c.reserved_system_cpus, "0");
        let s = settings(&["--cpu-manager-policy=static"]).unwrap();
        assert_eq!(s.config.cpu_manager_policy, "static");
    }

    #[test]
    fn reserved_memory_flags_append_as_upstreams() {
        let s = settings(&[
            "--memory-manager-policy=Static",
            "--reserved-memory=0:memory=1Gi,hugepages-2Mi=4Mi;1:memory=512Mi",
            "--reserved-memory",
            "2:memory=1G",
        ])
        .unwrap();
        let r = &s.config.reserved_memory;
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].numa_node, r[0].limits["hugepages-2Mi"].as_str()),
            (0, "4Mi")
        );
        assert_eq!((r[2].numa_node, r[2].limits["memory"].as_str()), (2, "1G"));
        // An empty value adds nothing (upstream's).
        let s = settings(&["--reserved-memory="]).unwrap();
        assert!(s.config.reserved_memory.is_empty());
        for (flag, want) in [
            (
                "0=memory=1Gi",
                "the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...], got 0=memory=1Gi",
            ),
            (
                "x:memory=1Gi",
                "failed to convert the NUMA node ID, expected integer, got x",
            ),
            (
                "0:memory",
                "the reserved limit has incorrect value, expected type=quantity, got memory",
            ),
            (
                "0:cpu=1",
                "memory type conversion error, unknown type: \"cpu\"",
            ),
            ("0:memory=lots", "failed to parse the quantity: lots"),
            (
                "0:memory=1Gi;",
                "the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...], got ",
            ),
        ] {
            let err = settings(&[&format!("--reserved-memory={flag}")]).unwrap_err();
            assert!(format!("{err:#}").contains(want), "{flag}: {err:#}");
        }
    }

    #[test]
    fn eviction_flags() {
        let s = settings(&[
            "--eviction-hard=memory.available<1Gi,nodefs.available<5%",
            "--eviction-soft=memory.available<2Gi",
            "--eviction-soft-grace-period=memory.available=1m30s",
            "--eviction-minimum-reclaim=memory.available=500Mi",
            "--eviction-pressure-transition-period=30s",
            "--eviction-max-pod-grace-period=20",
            "--kernel-memcg-notification",
        ])
        .unwrap();
        let c = &s.config;
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            c.eviction_hard,
            map(&[("memory.available", "1Gi"), ("nodefs.available", "5%")])
        );
        assert_eq!(c.eviction_soft, map(&[("memory.available", "2Gi")]));
        assert_eq!(
            c.eviction_soft_grace_period,
            map(&[("memory.available", "1m30s")])
        );
        assert_eq!(
            c.eviction_minimum_reclaim,
            map(&[("memory.available", "500Mi")])
        );
        assert_eq!(
            c.eviction_pressure_transition_period,
            Duration::from_secs(30)
        );
        assert_eq!(c.eviction_max_pod_grace_period, 20);
        assert!(c.kernel_memcg_notification);
        let t = c.eviction_thresholds().unwrap();
        // Two hard, one soft, and the hard memory one's allocatable copy.
        assert_eq!(t.len(), 4);
        assert_eq!(t[2].grace_period, Duration::from_secs(90));
        // A soft threshold needs its grace period.
        let err = settings(&["--eviction-soft=memory.available<2Gi"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "grace period must be specified for the soft eviction threshold memory.available"
            ),
            "{err}"
        );
        let err = settings(&["--eviction-hard=memory.available=1Gi"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("malformed pair, expect string<string"),
            "{err}"
        );
    }

    #[test]
    fn invalid_merged_settings_are_rejected() {
        let cases: &[(&[&str], &str)] = &[
            (&["--sync-frequency=0s"], "syncFrequency"),
            (&["--max-pods=0"], "maxPods"),
            (
                &["--container-runtime-endpoint=tcp://1.2.3.4:5"],
                "containerRuntimeEndpoint",
            ),
            (&["--address=somewhere"], "address"),
            (
                &["--image-service-endpoint=tcp://1.2.3.4:5"],
                "imageServiceEndpoint (--image-service-endpoint)",
            ),
            (
                &["--system-cgroups=/system"],
                "systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified",
            ),
            (
                &["--system-cgroups=/", "--cgroup-root=/"],
                "system container cannot be root",
            ),
            (
                &["--runonce"],
                "runOnce (--runOnce) true, Runonce mode has been deprecated",
            ),
            (
                &["--enable-controller-attach-detach=false"],
                "enableControllerAttachDetach (--enable-controller-attach-detach) false",
            ),
            (
                &["--cgroups-per-qos=false"],
                "cgroupsPerQOS (--cgroups-per-qos) must be set to true",
            ),
        ];
        for (args, needle) in cases {
            let err = format!("{:#}", settings(args).unwrap_err());
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn config_file_errors_name_the_path() {
        let missing = "/nonexistent/rkubelet/config.yaml";
        let err = format!("{:#}", settings(&["--config", missing]).unwrap_err());
        assert!(err.contains(missing), "{err}");

        let f = config_file(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfoo: 1\n",
        );
        let path = f.path().to_str().unwrap();
        let err = format!("{:#}", settings(&["--config", path]).unwrap_err());
        assert!(err.contains(path), "{err}");
        assert!(err.contains("unknown field \"foo\""), "{err}");
    }

    #[test]
    fn node_name_falls_back_to_the_machine_hostname() {
        let flags = Flags::try_parse_from(["rkubelet", "--hostname-override="]).unwrap();
        let s = flags.into_settings_with(|| Ok("Box\n".to_owned())).unwrap();
        assert_eq!(s.node_name, "box");

        let flags = Flags::try_parse_from(["rkubelet"]).unwrap();
        let err = flags
            .into_settings_with(|| Ok(" \n".to_owned()))
            .unwrap_err();
        assert!(err.to_string().contains("empty hostname"), "{err}");

        // The real lookup works on this machine.
        let s = Flags::try_parse_from(["rkubelet"])
            .unwrap()
            .into_settings()
            .unwrap();
        assert!(!s.node_name.is_empty());
        assert_eq!(s.node_name, s.node_name.trim().to_lowercase());
    }
}
