//! The Kubelet (upstream's kubelet.go), built then run: [`Kubelet::build`]
//! wires its parts and starts nothing (`build`); [`Boot::run`] consumes
//! what only the run owns and boots in phases (`boot`), then runs the sync
//! loop (`sync_loop`) that dispatches config updates, PLEG events, periodic
//! syncs and housekeeping (`housekeeping`) to the pod workers, admitting
//! pods and resizes on the way (`admission`). `views` is how the kubelet's
//! servers and managers read it.

mod admission;
mod boot;
mod build;
mod housekeeping;
mod sync_loop;
mod views;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::node::v1::RuntimeClass;
use kubelet_api::ApiClient;
use kubelet_api::objects::Latest;
use kubelet_core::config::KubeletConfiguration;
use kubelet_core::eviction::Threshold;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::resources::Amounts;
use kubelet_core::status::TerminationKind;
use kubelet_core::sysctl::Allowlist;
use kubelet_core::types::PodUid;
use kubelet_tasks::Tasks;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::cm::{CmError, HostCgroups};
use crate::credentialprovider::CredentialProviders;
use crate::events::Recorder;
use crate::eviction::EvictionManager;
use crate::imagegc::ImageGcManager;
use crate::nodeshutdown::{LogindAccess, ShutdownManager};
use crate::nodestatus::NodeRegistration;
use crate::pleg::Pleg;
use crate::pod_workers::PodWorkers;
use crate::podmanager::PodManager;
use crate::runtime_state::RuntimeState;
use crate::stats::StatsProvider;
use crate::status_manager::StatusManager;
use crate::sync::Syncer;
use crate::systemd::Systemd;
use views::ShutdownView;

pub const SYNC_PERIOD: Duration = Duration::from_secs(1);
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// How often dead containers are garbage collected (upstream's
/// ContainerGCPeriod).
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);
/// How often the runtime's Status() is read once it is up.
pub const RUNTIME_STATUS_PERIOD: Duration = Duration::from_secs(5);
/// How often the pod directories are listed for orphans (upstream looks in
/// every housekeeping).
pub const POD_DIRS_PERIOD: Duration = HOUSEKEEPING_PERIOD;

/// How long a shutdown on SIGTERM waits for the stopped pods' statuses to
/// reach the API server.
pub const SHUTDOWN_REPORT: Duration = Duration::from_secs(10);

/// Everything the kubelet needs to know at start, from flags and config.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    pub config: KubeletConfiguration,
    pub root_dir: PathBuf,
    /// `--cert-dir`: the node's certificates (the self-signed serving pair
    /// `kubelet.{crt,key}`); `<root_dir>/pki` unless set.
    pub cert_dir: PathBuf,
    pub node_name: String,
    /// The node's memory in bytes (for oom_score_adj of Burstable pods).
    pub node_memory: i64,
    /// The node's swap in bytes (SwapTotal; node status, LimitedSwap).
    pub node_swap: i64,
    /// The pre-allocated hugepages by resource name, in bytes (node
    /// capacity; kept out of allocatable memory).
    pub hugepages: kubelet_core::resources::Amounts,
    /// Where this host limits containers' swap, if it does.
    pub swap_controller: kubelet_core::swap::SwapController,
    /// The node's CPUs (capacity in node status, admission until the Node
    /// is seen).
    pub node_cpu_cores: i64,
    /// The CPUs' sockets, cores and NUMA nodes (the static CPU manager's
    /// choice), from sysfs.
    pub cpu_topology: kubelet_core::cpumanager::Topology,
    /// The NUMA nodes and their distances (the topology manager's), from
    /// sysfs.
    pub numa: kubelet_core::topologymanager::NumaInfo,
    /// The NUMA nodes' memory and hugepages (the memory manager's), from
    /// sysfs.
    pub numa_memory: Vec<kubelet_core::memorymanager::NodeMemory>,
    /// How the node registers, when an API server is configured.
    pub registration: Option<NodeRegistration>,
    /// The metrics registry every part records into (`/metrics`).
    pub metrics: KubeletMetrics,
    /// The wall clock every part reads.
    pub clock: Clock,
    /// The host's cgroup file system (pod cgroups are made in it).
    pub cgroups: HostCgroups,
    /// Where containers' log links go for log agents: upstream's fixed
    /// `/var/log/containers` (tests give their own).
    pub legacy_logs_dir: PathBuf,
    /// systemd's notification socket and watchdog, when it runs the
    /// kubelet.
    pub systemd: Systemd,
    /// Where systemd-logind is, for graceful node shutdown (tests give
    /// their own).
    pub logind: LogindAccess,
    /// Image credential provider plugins (`--image-credential-provider-*`).
    pub credential_providers: Option<Arc<CredentialProviders>>,
}

impl KubeletOptions {
    /// Options with the host's facts read from /proc and /etc.
    pub fn from_host(config: KubeletConfiguration, root_dir: PathBuf, node_name: String) -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let meminfo_bytes = |key: &str| {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
                .map(|kb| kb * 1024)
        };
        let node_memory = meminfo_bytes("MemTotal:").unwrap_or(1 << 30);
        let node_swap = meminfo_bytes("SwapTotal:").unwrap_or(0);
        let cgroups = HostCgroups::detect();
        let node_cpu_cores = std::thread::available_parallelism()
            .map(|n| n.get() as i64)
            .unwrap_or(1);
        let metrics = KubeletMetrics::new(&node_name);
        metrics
            .feature_enabled
            .set_all(kubelet_core::config::gates::all().iter().map(|g| {
                (
                    vec![g.name, g.stage.label()],
                    f64::from(u8::from(config.feature_enabled(g.name))),
                )
            }));
        KubeletOptions {
            metrics,
            config,
            cert_dir: root_dir.join("pki"),
            root_dir,
            node_name,
            node_memory,
            node_swap,
            hugepages: crate::nodestatus::host_hugepages(),
            swap_controller: crate::cm::swap_controller(cgroups.layout.as_ref()),
            node_cpu_cores,
            cpu_topology: crate::cpumanager::host_topology(),
            numa: crate::topologymanager::host_numa(),
            numa_memory: crate::memorymanager::host_memory(node_memory),
            registration: None,
            clock: Clock::System,
            cgroups,
            legacy_logs_dir: PathBuf::from(
                crate::kuberuntime::legacylogs::LEGACY_CONTAINER_LOGS_DIR,
            ),
            systemd: Systemd::default(),
            logind: LogindAccess::default(),
            credential_providers: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("kubelet API serving certificate: {0}")]
    Tls(#[source] kubelet_server::tls::TlsError),
    #[error("kubelet API serving certificate store: {0}")]
    ServingCertificate(#[source] crate::certificate::store::StoreError),
    /// The container manager could not set up the node's cgroups
    /// (upstream exits: "Failed to start ContainerManager").
    #[error("Failed to start ContainerManager: {0}")]
    ContainerManager(#[source] CmError),
    /// The user namespaces' range or a pod's file cannot be used
    /// (upstream's "create user namespace manager").
    #[error("create user namespace manager: {0}")]
    UserNamespaces(String),
    #[error("listening on {addr} ({what}): {source}")]
    Listen {
        what: &'static str,
        addr: String,
        source: std::io::Error,
    },
}

/// The running kubelet. Cheap handles to its three owners of state are
/// public so tests and the local server can read them.
pub struct Kubelet {
    pub opts: KubeletOptions,
    pub pod_manager: PodManager,
    pub status: StatusManager,
    pub runtime_state: RuntimeState,
    pub pleg: Pleg,
    pub workers: PodWorkers<Syncer>,
    syncer: Syncer,
    tasks: Tasks,
    started: Instant,
    /// When the sync loop last began an iteration (its health).
    sync_loop_seen: Arc<Mutex<Instant>>,
    /// Addresses the local servers listen on, once bound.
    pub bound: Mutex<HashMap<&'static str, SocketAddr>>,
    /// The API server, when the kubelet is part of a cluster.
    api: Option<ApiClient>,
    node_uid: Arc<RwLock<Option<String>>>,
    /// The Node as the API server has it (a watch), once seen: admission
    /// checks against it.
    node: watch::Sender<Option<Arc<Node>>>,
    /// Every Service (a watch, in cluster mode): containers' service
    /// variables.
    services: watch::Sender<Latest<Vec<Service>>>,
    /// Every RuntimeClass (a watch, in cluster mode): pods' sandbox
    /// runtime handlers.
    runtime_classes: watch::Sender<Latest<Vec<RuntimeClass>>>,
    /// `<runtime>://<version>` for node status.
    runtime_version: Arc<RwLock<String>>,
    /// Pods admission refused: never started, reported Failed.
    rejected: Mutex<std::collections::HashSet<PodUid>>,
    /// The sysctls pods may set (the safe ones and allowedUnsafeSysctls).
    sysctls: Allowlist,
    /// The topology manager: admission's allocation of devices and CPUs.
    topology: crate::topologymanager::TopologyManager,
    /// Whether this host can enforce AppArmor profiles, and if not why.
    apparmor: Result<(), &'static str>,
    /// Image garbage collection: periodic unless the configuration turns
    /// it off (imageGCHighThresholdPercent 100 and no imageMaximumGCAge);
    /// the eviction manager's disk reclaim in any case.
    image_gc: Arc<ImageGcManager>,
    image_gc_periodic: bool,
    /// The node's stats, for the kubelet API and the eviction manager.
    stats: Arc<StatsProvider>,
    eviction: Arc<EvictionManager>,
    /// Graceful node shutdown: whether the node shuts down (admission,
    /// node status), and the pods' stopping.
    shutdown: Arc<ShutdownManager>,
    /// Woken for node status to be sent at once.
    node_status_now: Arc<Notify>,
    /// kubeletCgroups and systemCgroups.
    system_containers: crate::cm::SystemContainers,
    /// systemReserved plus kubeReserved, and the hard eviction thresholds:
    /// what node allocatable keeps back.
    reserved: Amounts,
    eviction_hard: Vec<Threshold>,
    /// Node allocatable from this host's capacity, for admission until the
    /// Node is seen.
    local_allocatable: Amounts,
    /// The CSI drivers the plugin manager registers, for the volume manager.
    csi_drivers: crate::volumes::csi::CsiDrivers,
    events: Recorder,
}

/// A kubelet wired and not started ([`Kubelet::build`]): its shared
/// handles, and what only its run owns. [`Boot::run`] consumes it.
pub struct Boot {
    pub kubelet: Arc<Kubelet>,
    receivers: Receivers,
}

/// The receiving ends of the kubelet's queues, each moved into the one
/// task that drains it.
struct Receivers {
    /// Events for the event writer, when an API server is configured.
    events: Option<mpsc::Receiver<k8s_openapi::api::core::v1::Event>>,
    /// Pods whose probe results, or projected objects, changed: the sync
    /// loop syncs them.
    probes: mpsc::UnboundedReceiver<PodUid>,
}

impl Boot {
    /// Boot in phases, then run the sync loop until cancelled. Pods keep
    /// running after the kubelet stops, as upstream's do.
    pub async fn run(self) -> Result<(), KubeletError> {
        self.kubelet.run(self.receivers).await
    }
}

impl Kubelet {
    /// The registered Node's UID, once registration succeeded.
    pub fn node_uid(&self) -> Option<String> {
        self.node_uid.read().clone()
    }

    /// Shut the node down now, as on logind's PrepareForShutdown (SIGTERM
    /// with `--shutdown-on-sigterm`): NotReady, no new pod, the pods
    /// stopped by priority within their grace periods. Nothing when
    /// graceful shutdown is not configured.
    /// With an API server, it then waits (at most [`SHUTDOWN_REPORT`]) for
    /// the API server to have the stopped pods' final statuses: the
    /// kubelet is about to stop.
    pub async fn shut_down_node(self: &Arc<Self>) {
        if !self.shutdown.enabled() {
            return;
        }
        self.shutdown.shut_down(&ShutdownView(self.clone())).await;
        if self.api.is_none() {
            return;
        }
        let reported = async {
            while !self.shutdown_reported() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_REPORT, reported)
            .await
            .is_err()
        {
            tracing::warn!("the API server does not have every stopped pod's final status");
        }
    }

    /// Whether every pod the shutdown stopped has its final status settled
    /// with the API server.
    fn shutdown_reported(&self) -> bool {
        let stopped: Vec<PodUid> = self
            .syncer
            .terminations
            .lock()
            .iter()
            .filter(|(_, t)| t.kind == TerminationKind::NodeShutdown)
            .map(|(uid, _)| uid.clone())
            .collect();
        stopped.iter().all(|uid| {
            // A static pod with no mirror pod has nowhere to be reported.
            let unreported = self.pod_manager.get(uid).is_some_and(|p| {
                kubelet_core::types::is_static_pod(&p) && self.pod_manager.mirror_of(&p).is_none()
            });
            unreported
                || self.status.is_settled(uid)
                    && self
                        .status
                        .get_pod_status(uid)
                        .is_some_and(|s| kubelet_core::phase::is_terminal_status(&s))
        })
    }

    /// Probe workers running (one per probe of each running pod).
    pub fn probe_workers(&self) -> usize {
        self.syncer.prober.worker_count()
    }

    /// Every desired pod with the status the status manager holds for it.
    pub fn pods_with_status(&self) -> Vec<Pod> {
        self.pod_manager
            .pods()
            .into_iter()
            .map(|p| {
                let mut pod = (*p).clone();
                if let Some(s) = self.status.get_pod_status(&PodUid::of(&pod)) {
                    pod.status = Some((*s).clone());
                }
                pod
            })
            .collect()
    }
}
