//! The Kubelet: wiring, phased boot, and the sync loop that dispatches
//! config updates, PLEG events, periodic syncs and housekeeping to the pod
//! workers (upstream's kubelet.go Run / syncLoop / syncLoopIteration /
//! HandlePodCleanups).

use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::node::v1::RuntimeClass;
use kubelet_api::ApiClient;
use kubelet_api::node::watch_node;
use kubelet_api::objects::{Latest, watch_all};
use kubelet_core::admission::{NodeInfo, admit, admit_under_pressure};
use kubelet_core::backoff::Backoff;
use kubelet_core::config::KubeletConfiguration;
use kubelet_core::dns::DnsSettings;
use kubelet_core::eviction::{Threshold, parse_thresholds};
use kubelet_core::imagegc::Policy;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::nodestatus::{NodeFacts, node_labels};
use kubelet_core::phase::{PHASE_FAILED, PHASE_SUCCEEDED};
use kubelet_core::pleg::PodLifecycleEvent;
use kubelet_core::qos::qos_class;
use kubelet_core::resources::Amounts;
use kubelet_core::security::{apparmor_admission, thermal_throttle_paths};
use kubelet_core::status::needs_readiness_reconcile;
use kubelet_core::sysctl::Allowlist;
use kubelet_core::types::Rejection;
use kubelet_core::types::{PodOperation, PodUid, PodUpdate, SOURCE_API, SOURCE_FILE};
use kubelet_cri::client::CriClient;
use kubelet_server::listener::{self, Listener};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::allocation::{AllocationManager, ResizeOutcome};
use crate::clock::Clock;
use crate::cm::{CmError, ContainerManager, HostCgroups, node_capacity};
use crate::config::file::FileSource;
use crate::config::mux::new_mux;
use crate::config::{SourceSnapshot, SourcesReady};
use crate::events::{Involved, Recorder, WARNING};
use crate::eviction::{Eviction, EvictionHost, EvictionManager, Settings as EvictionSettings};
use crate::imagegc::{IMAGE_GC_PERIOD, ImageGcManager};
use crate::kuberuntime::config::{NodeResources, SecurityDefaults};
use crate::kuberuntime::{Host, PodRef, RuntimeManager};
use crate::logs::{ContainerLogManager, LogPolicy};
use crate::nodestatus::{NodeAllocatable, NodeRegistration, NodeStatusController, detect_node_ip};
use crate::oomwatcher;
use crate::pleg::Pleg;
use crate::pod_workers::{Desire, PodTarget, PodWorkers};
use crate::podenv::PodEnv;
use crate::podmanager::PodManager;
use crate::prober::ProbeManager;
use crate::pullmanager::PullManager;
use crate::runtime_state::RuntimeState;
use crate::runtimeclass::RuntimeClasses;
use crate::server::{self, Health};
use crate::stats::{StatsProvider, StatsView};
use crate::status_manager::StatusManager;
use crate::status_sync::{StaticPodView, StatusSync};
use crate::sync::Syncer;
use crate::volumes::objects::ObjectStore;
use crate::volumes::token::TokenManager;
use crate::volumes::trust::TrustBundles;
use crate::volumes::{ApiObjects, VolumeManager};
use kubelet_core::downward::Allocatable;
use kubelet_server::NodeView;
use kubelet_tasks::Tasks;

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

/// List the pod directories and the pod cgroups every POD_DIRS_PERIOD, off
/// the sync loop, and hand the UIDs to it.
async fn list_pod_dirs(
    volumes: VolumeManager,
    cm: ContainerManager,
    tx: mpsc::Sender<Vec<PodUid>>,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(POD_DIRS_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut uids = match volumes.pod_dirs().await {
            Ok(dirs) => dirs,
            Err(e) => {
                tracing::warn!(error = %e, "listing the pod directories");
                Vec::new()
            }
        };
        match cm.pod_uids().await {
            Ok(cgroups) => uids.extend(cgroups),
            Err(e) => tracing::warn!(error = %e, "listing the pod cgroups"),
        }
        uids.sort_unstable();
        uids.dedup();
        if !uids.is_empty() && tx.send(uids).await.is_err() {
            return;
        }
    }
}

/// What woke the sync loop.
enum Wake {
    Update(PodUpdate),
    Pleg(Vec<PodLifecycleEvent>),
    /// A probe result of this pod changed, or an object its volumes project.
    Resync(PodUid),
    /// The pods with a directory on disk or a cgroup (orphans are removed
    /// by their workers).
    PodDirs(Vec<PodUid>),
    SyncTick,
    Housekeeping,
}

/// Everything the kubelet needs to know at start, from flags and config.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    pub config: KubeletConfiguration,
    pub root_dir: PathBuf,
    pub node_name: String,
    /// The node's memory in bytes (for oom_score_adj of Burstable pods).
    pub node_memory: i64,
    /// The node's CPUs (capacity in node status, admission until the Node
    /// is seen).
    pub node_cpu_cores: i64,
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
}

impl KubeletOptions {
    /// Options with the host's facts read from /proc and /etc.
    pub fn from_host(config: KubeletConfiguration, root_dir: PathBuf, node_name: String) -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let node_memory = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(1 << 30);
        let node_cpu_cores = std::thread::available_parallelism()
            .map(|n| n.get() as i64)
            .unwrap_or(1);
        KubeletOptions {
            metrics: KubeletMetrics::new(&node_name),
            config,
            root_dir,
            node_name,
            node_memory,
            node_cpu_cores,
            registration: None,
            clock: Clock::System,
            cgroups: HostCgroups::detect(),
            legacy_logs_dir: PathBuf::from(
                crate::kuberuntime::legacylogs::LEGACY_CONTAINER_LOGS_DIR,
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("kubelet API serving certificate: {0}")]
    Tls(String),
    /// The container manager could not set up the node's cgroups
    /// (upstream exits: "Failed to start ContainerManager").
    #[error("Failed to start ContainerManager: {0}")]
    ContainerManager(#[source] CmError),
    #[error("listening on {addr} ({what}): {source}")]
    Listen {
        what: &'static str,
        addr: String,
        source: std::io::Error,
    },
}

/// Upstream's (runc's) apparmor.IsEnabled: the kernel's security file
/// system has it and its module says it is enabled.
fn apparmor_on_host() -> Result<(), &'static str> {
    let enabled = Path::new("/sys/kernel/security/apparmor").exists()
        && std::fs::read("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|b| b.starts_with(b"Y"));
    if enabled {
        Ok(())
    } else {
        Err("AppArmor is not enabled on the host")
    }
}

/// The per-CPU thermal_throttle directories of this host, masked in
/// containers as upstream does.
fn host_masked_paths() -> Vec<String> {
    // Upstream falls back to the CPUs it runs on when `possible` cannot be read.
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            format!("0-{}", n - 1)
        });
    thermal_throttle_paths(&possible)
        .into_iter()
        .filter(|p| Path::new(p).exists())
        .collect()
}

/// Run `collect` every `period` while the runtime is healthy (upstream's
/// first run also waits a period): the container and image collectors;
/// `what` names what they remove.
async fn collect_every<F, Fut, E>(
    what: &'static str,
    period: Duration,
    state: RuntimeState,
    cancel: CancellationToken,
    mut collect: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize, E>>,
    E: std::fmt::Display,
{
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !state.runtime_errors().is_empty() {
            continue;
        }
        match collect().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "garbage collected {what}"),
            Err(e) => tracing::warn!(error = %e, "garbage collection of {what}"),
        }
    }
}

/// Upstream's periodicQOSCgroupUpdateInterval.
const QOS_UPDATE_PERIOD: Duration = Duration::from_secs(60);

/// Keep the QoS cgroups' values in step with the active pods, every
/// QOS_UPDATE_PERIOD (besides each new pod's own update).
async fn update_qos_every(syncer: Syncer, cancel: CancellationToken) {
    let mut tick = tokio::time::interval_at(Instant::now() + QOS_UPDATE_PERIOD, QOS_UPDATE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = syncer.cm.update_qos(syncer.active_pods()).await {
            tracing::info!(error = %e, "Failed to reserve QoS requests");
        }
    }
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
    /// systemReserved plus kubeReserved, and the hard eviction thresholds:
    /// what node allocatable keeps back.
    reserved: Amounts,
    eviction_hard: Vec<Threshold>,
    /// Node allocatable from this host's capacity, for admission until the
    /// Node is seen.
    local_allocatable: Amounts,
    events: Recorder,
    /// Taken by the event writer task when the API server is configured.
    events_rx: Mutex<Option<mpsc::Receiver<k8s_openapi::api::core::v1::Event>>>,
    /// Pods whose probe results changed; taken by the sync loop.
    probe_rx: Mutex<Option<mpsc::UnboundedReceiver<PodUid>>>,
}

impl Kubelet {
    /// Phase 0: wire the kubelet's parts. Starts nothing.
    pub fn new(
        opts: KubeletOptions,
        cri: CriClient,
        api: Option<ApiClient>,
        cancel: CancellationToken,
    ) -> Arc<Kubelet> {
        let (events, events_rx) = match &api {
            Some(_) => {
                let (r, rx) = Recorder::with_queue(opts.node_name.clone(), opts.clock);
                (r, Some(rx))
            }
            None => (Recorder::log_only(opts.node_name.clone()), None),
        };
        // Every CRI call is counted and timed (kubelet_runtime_operations_*).
        let cri = cri.with_observer(Arc::new(kubelet_cri::instrumented::CriMetrics(
            opts.metrics.clone(),
        )));
        let tasks = Tasks::new(cancel);
        let (probe_tx, probe_rx) = mpsc::unbounded_channel();
        let node = watch::Sender::new(None);
        let services = watch::Sender::new(Latest::Pending);
        let runtime_classes = watch::Sender::new(Latest::Pending);
        let api_objects = api.as_ref().map(|api| ApiObjects {
            config_maps: ObjectStore::new(
                api.clone(),
                tasks.clone(),
                "configmap",
                probe_tx.clone(),
            ),
            secrets: ObjectStore::new(api.clone(), tasks.clone(), "secret", probe_tx.clone()),
            tokens: TokenManager::new(api.clone(), opts.clock),
            trust: TrustBundles::new(api.clone(), tasks.clone()),
        });
        let mut reserved = opts.config.system_reserved.clone();
        for (k, v) in &opts.config.kube_reserved {
            let e = reserved.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
        // The configuration's validation refuses bad thresholds first.
        let eviction_hard = parse_thresholds(&opts.config.eviction_hard).unwrap_or_default();
        let local_allocatable = kubelet_core::nodestatus::allocatable(&NodeFacts {
            cpu_cores: opts.node_cpu_cores,
            memory_bytes: opts.node_memory,
            max_pods: opts.config.max_pods,
            reserved: reserved.clone(),
            eviction_hard: eviction_hard.clone(),
            ..Default::default()
        });
        let amount = |k: &str| local_allocatable.get(k).copied().unwrap_or(0);
        let allocatable = NodeAllocatable::new(
            Allocatable {
                cpu_millis: amount("cpu"),
                memory_bytes: amount("memory"),
                ephemeral_storage_bytes: 0,
            },
            node.subscribe(),
        );
        let host_ips = match &opts.registration {
            Some(r) => r.node_ips.clone(),
            None => vec![detect_node_ip()],
        };
        let env = PodEnv::new(
            api_objects
                .as_ref()
                .map(|a| (a.config_maps.clone(), a.secrets.clone())),
            api.as_ref().map(|_| services.subscribe()),
            allocatable.clone(),
            host_ips.clone(),
        );
        let cfg = &opts.config;
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let sysctls = Allowlist::new(&release, &cfg.allowed_unsafe_sysctls).unwrap_or_else(|e| {
            // The configuration's validation refuses this before we get here.
            tracing::error!(error = %e, "allowedUnsafeSysctls; only the safe sysctls are allowed");
            Allowlist::new(&release, &[]).unwrap_or_default()
        });
        let pulls = Arc::new(PullManager::open(
            &opts.root_dir,
            // The configuration's validation refuses a bad policy first.
            cfg.image_pull_verification().unwrap_or_default(),
            opts.metrics.clone(),
            opts.clock,
        ));
        let cm = ContainerManager::new(
            cfg,
            &opts.cgroups,
            &node_capacity(opts.node_cpu_cores, opts.node_memory),
            events.clone(),
        );
        let runtime = RuntimeManager::new(
            cri,
            Host {
                logs_root: cfg.pod_logs_dir.clone(),
                legacy_logs_dir: opts.legacy_logs_dir.clone(),
                pods_dir: opts.root_dir.join("pods"),
                dns: DnsSettings {
                    cluster_dns: cfg.cluster_dns.clone(),
                    cluster_domain: cfg.cluster_domain.clone(),
                    has_resolv_conf: !cfg.resolv_conf.is_empty(),
                    node_ips: host_ips.clone(),
                },
                resolv_conf: cfg.resolv_conf.clone(),
                resources: NodeResources {
                    memory: opts.node_memory,
                    cfs_period: cfg
                        .cpu_cfs_quota
                        .then_some(cfg.cpu_cfs_quota_period.as_micros() as u64),
                },
                security: SecurityDefaults {
                    seccomp_root: opts.root_dir.join("seccomp"),
                    seccomp_default: cfg.seccomp_default,
                    extra_masked_paths: host_masked_paths(),
                },
                image_pull_limit: cfg.image_pull_limit(),
                cgroups: cm.clone(),
                runtime_classes: match &api {
                    Some(_) => RuntimeClasses::watched(runtime_classes.subscribe()),
                    None => RuntimeClasses::default(),
                },
            },
            env,
            pulls.clone(),
            events.clone(),
            opts.metrics.clone(),
            opts.clock,
        );
        let image_gc_periodic =
            cfg.image_gc_high_threshold_percent < 100 || !cfg.image_maximum_gc_age.is_zero();
        let image_gc = {
            let policy = Policy {
                high_threshold_percent: cfg.image_gc_high_threshold_percent as u8,
                low_threshold_percent: cfg.image_gc_low_threshold_percent as u8,
                min_age: cfg.image_minimum_gc_age,
                max_age: cfg.image_maximum_gc_age,
            };
            Arc::new(ImageGcManager::new(
                runtime.cri().clone(),
                policy,
                pulls.clone(),
                events.clone(),
                opts.clock,
            ))
        };
        let memcg = memcg_root(cfg, &opts.cgroups);
        let eviction = Arc::new(EvictionManager::new(
            EvictionSettings {
                // The configuration's validation refuses bad thresholds first.
                thresholds: cfg.eviction_thresholds().unwrap_or_default(),
                transition_period: cfg.eviction_pressure_transition_period,
                max_pod_grace_period: cfg.eviction_max_pod_grace_period,
                local_storage_capacity_isolation: cfg.local_storage_capacity_isolation,
                memcg_pods: memcg.as_ref().filter(|_| cfg.cgroups_per_qos).map(|root| {
                    root.join(
                        kubelet_core::cgroups::QosCgroups::new(&cfg.cgroup_root)
                            .root
                            .relative(),
                    )
                }),
                memcg_root: memcg,
            },
            opts.metrics.clone(),
            opts.clock,
        ));
        let status = StatusManager::new(opts.clock);
        let prober = ProbeManager::new(
            runtime.cri().clone(),
            status.clone(),
            events.clone(),
            tasks.clone(),
            probe_tx.clone(),
            opts.clock,
            Some(opts.root_dir.join("pods")),
        );
        let volumes = VolumeManager::new(
            opts.root_dir.join("pods"),
            allocatable,
            api_objects,
            events.clone(),
        );
        let syncer = Syncer {
            runtime: runtime.clone(),
            runtime_state: RuntimeState::default(),
            status,
            reasons: Arc::default(),
            runtime_name: Arc::new(RwLock::new("containerd".into())),
            volumes,
            host_ips: opts
                .registration
                .as_ref()
                .map(|r| r.node_ips.clone())
                .unwrap_or_default(),
            prober,
            metrics: opts.metrics.clone(),
            first_seen: Arc::default(),
            clock: opts.clock,
            allocation: AllocationManager::new(
                events.clone(),
                opts.clock,
                cm.pod_cgroup_policy(),
                &opts.root_dir,
            ),
            cm,
            pods: PodManager::default(),
            evictions: Arc::default(),
        };
        let workers = PodWorkers::new(
            Arc::new(syncer.clone()),
            tasks.clone(),
            opts.config.sync_frequency,
        );
        Arc::new(Kubelet {
            pod_manager: syncer.pods.clone(),
            status: syncer.status.clone(),
            runtime_state: syncer.runtime_state.clone(),
            pleg: Pleg::new(runtime, opts.metrics.clone(), opts.clock),
            workers,
            syncer,
            tasks,
            started: Instant::now(),
            sync_loop_seen: Arc::new(Mutex::new(Instant::now())),
            bound: Mutex::default(),
            api,
            node_uid: Arc::default(),
            node,
            services,
            runtime_classes,
            runtime_version: Arc::default(),
            rejected: Mutex::default(),
            sysctls,
            apparmor: apparmor_on_host(),
            image_gc,
            image_gc_periodic,
            stats: Arc::default(),
            eviction,
            reserved,
            eviction_hard,
            local_allocatable,
            events,
            events_rx: Mutex::new(events_rx),
            probe_rx: Mutex::new(Some(probe_rx)),
            opts,
        })
    }

    /// validateNodeAllocatable: systemReserved, kubeReserved and the hard
    /// eviction thresholds together within the node's capacity.
    fn check_reservation(&self) -> Result<(), CmError> {
        let capacity = Amounts::from([
            ("cpu".to_owned(), self.opts.node_cpu_cores * 1000),
            ("memory".to_owned(), self.opts.node_memory),
        ]);
        let eviction = kubelet_core::eviction::hard_eviction_reservation(
            &self.eviction_hard,
            self.opts.node_memory,
            0,
        );
        kubelet_core::cgroups::check_reservation(&capacity, &[&self.reserved, &eviction])
            .map_err(CmError::Config)
    }

    /// The registered Node's UID, once registration succeeded.
    pub fn node_uid(&self) -> Option<String> {
        self.node_uid.read().clone()
    }

    /// Boot in phases, then run the sync loop until cancelled. Pods keep
    /// running after the kubelet stops, as upstream's do.
    pub async fn run(self: Arc<Self>) -> Result<(), KubeletError> {
        let cancel = self.tasks.token().clone();
        // Phase 1: what needs no runtime: local servers, pod sources, mux.
        if let Err(e) = self.start_servers().await {
            self.tasks.shutdown().await;
            return Err(e);
        }
        if let Err(e) = self.check_reservation() {
            self.tasks.shutdown().await;
            return Err(KubeletError::ContainerManager(e));
        }
        if let Err(e) = self.syncer.cm.start(Vec::new()).await {
            self.tasks.shutdown().await;
            return Err(KubeletError::ContainerManager(e));
        }
        if self.syncer.cm.enabled() {
            let syncer = self.syncer.clone();
            self.tasks
                .spawn(tracing::info_span!("qos_cgroups"), move |token| {
                    update_qos_every(syncer, token)
                });
        }
        let (updates_tx, updates_rx) = mpsc::channel::<PodUpdate>(64);
        let sources_ready = self.start_sources(updates_tx);
        self.start_api_modules();
        let events = self.events.clone();
        self.tasks
            .spawn(tracing::info_span!("oom_watcher"), move |token| {
                oomwatcher::watch(events, token)
            });
        // Phase 2: runtime-dependent modules start once the runtime answers.
        let (pleg_tx, pleg_rx) = mpsc::channel(64);
        let me = self.clone();
        self.tasks
            .spawn(tracing::info_span!("runtime_up"), move |token| {
                me.runtime_up(pleg_tx, token)
            });

        self.sync_loop(updates_rx, pleg_rx, sources_ready, cancel)
            .await;
        tracing::info!("stopping: pods keep running");
        self.tasks.shutdown().await;
        Ok(())
    }

    async fn start_servers(self: &Arc<Self>) -> Result<(), KubeletError> {
        let cfg = &self.opts.config;
        if cfg.healthz_port != 0 {
            let addr = format!("{}:{}", cfg.healthz_bind_address, cfg.healthz_port);
            let listener = self.listen("healthz", addr).await?;
            let health: Arc<dyn Health> = self.clone();
            let tasks = self.tasks.clone();
            self.tasks.spawn(
                tracing::info_span!("server", what = "healthz"),
                move |token| server::serve(listener, health, tasks, token),
            );
        }
        if cfg.read_only_port != 0 {
            let addr = format!("{}:{}", cfg.address, cfg.read_only_port);
            let listener = self.listen("readonly", addr).await?;
            let tasks = self.tasks.clone();
            let token = self.tasks.child_token();
            let router = Arc::new(
                self.router(tasks.clone(), token.clone())
                    .with_scope(kubelet_server::routes::Scope::ReadOnly),
            );
            self.tasks.spawn_with(
                tracing::info_span!("server", what = "readonly"),
                kubelet_server::server::serve_read_only(listener, router, tasks, token),
            );
        }
        if cfg.port != 0 {
            self.start_kubelet_api().await?;
        }
        Ok(())
    }

    /// The kubelet API's handlers over this kubelet.
    fn router(
        self: &Arc<Self>,
        tasks: Tasks,
        token: CancellationToken,
    ) -> kubelet_server::routes::Router {
        let view: Arc<dyn NodeView> = self.clone();
        kubelet_server::routes::Router::new(
            view,
            kubelet_server::routes::Settings::from_config(&self.opts.config),
            tasks,
            token,
        )
    }

    /// Bind `addr` for the server `what`, and record where it listens. Every
    /// server listens through this: the cap on connections (for the file-handle
    /// limit now in force), the timeouts and limits are those of
    /// [`kubelet_server::listener`].
    async fn listen(&self, what: &'static str, addr: String) -> Result<Listener, KubeletError> {
        let cap = listener::default_connection_cap();
        let listener = Listener::bind(&addr, what, cap, self.opts.metrics.clone())
            .await
            .map_err(|source| KubeletError::Listen { what, addr, source })?;
        if let Ok(local) = listener.local_addr() {
            self.bound.lock().insert(what, local);
            tracing::info!(%local, what, max_connections = cap, "listening");
        }
        Ok(listener)
    }

    /// The kubelet API on address:port (HTTPS, authenticated and authorized).
    async fn start_kubelet_api(self: &Arc<Self>) -> Result<(), KubeletError> {
        use kubelet_server::{auth, server, tls};
        let cfg = &self.opts.config;
        let addr = format!("{}:{}", cfg.address, cfg.port);
        let identity = tls::SelfSignedIdentity {
            node_name: self.opts.node_name.clone(),
            node_ips: self
                .opts
                .registration
                .as_ref()
                .map(|r| r.node_ips.iter().filter_map(|ip| ip.parse().ok()).collect())
                .unwrap_or_default(),
        };
        let tls = tls::server_config(cfg, &self.opts.root_dir, &identity)
            .map_err(|e| KubeletError::Tls(e.to_string()))?;
        let reviewer: Arc<dyn auth::Reviewer> = match &self.api {
            Some(api) => Arc::new(auth::KubeReviewer::new(api.clone())),
            None => Arc::new(auth::NoApiServer),
        };
        let auth = Arc::new(auth::Auth::new(&self.opts.node_name, cfg, reviewer));
        let listener = self.listen("kubelet-api", addr).await?;
        let tasks = self.tasks.clone();
        let token = self.tasks.child_token();
        let router = Arc::new(self.router(tasks.clone(), token.clone()));
        self.tasks.spawn_with(
            tracing::info_span!("kubelet_api"),
            server::serve(listener, tls, router, auth, tasks, token),
        );
        Ok(())
    }

    fn start_sources(self: &Arc<Self>, updates_tx: mpsc::Sender<PodUpdate>) -> SourcesReady {
        let cfg = &self.opts.config;
        let mut sources: Vec<&'static str> = Vec::new();
        if cfg.static_pod_path.is_some() {
            sources.push(SOURCE_FILE);
        }
        if self.api.is_some() {
            sources.push(SOURCE_API);
        }
        let (mux, ready) = new_mux(&sources, self.opts.clock);
        let (snap_tx, snap_rx) = mpsc::channel::<SourceSnapshot>(16);
        if let Some(api) = &self.api {
            let (api, node, tx) = (api.clone(), self.opts.node_name.clone(), snap_tx.clone());
            self.tasks
                .spawn(tracing::info_span!("source", kind = "api"), move |token| {
                    kubelet_api::pods::watch_node_pods(api, node, tx, token)
                });
        }
        if let Some(dir) = &cfg.static_pod_path {
            let source = FileSource {
                dir: dir.clone(),
                node_name: self.opts.node_name.clone(),
                check_every: cfg.file_check_frequency,
                clock: self.opts.clock,
            };
            self.tasks
                .spawn(tracing::info_span!("source", kind = "file"), move |token| {
                    source.run(snap_tx, token)
                });
        }
        self.tasks
            .spawn(tracing::info_span!("config_mux"), move |token| {
                mux.run(snap_rx, updates_tx, token)
            });
        ready
    }

    /// With an API server: node registration, status and lease, and the
    /// status manager's API sync. None of them needs the runtime to start.
    fn start_api_modules(self: &Arc<Self>) {
        let (Some(api), Some(reg)) = (&self.api, &self.opts.registration) else {
            return;
        };
        let controller = NodeStatusController {
            api: api.clone(),
            cri: self.syncer.runtime.cri().clone(),
            runtime_state: self.runtime_state.clone(),
            runtime_version: self.runtime_version.clone(),
            root_dir: self.opts.root_dir.clone(),
            node_memory: self.opts.node_memory,
            node_cpu_cores: self.opts.node_cpu_cores,
            reserved: self.reserved.clone(),
            eviction_hard: self.eviction_hard.clone(),
            reg: reg.clone(),
            clock: self.opts.clock,
            node_uid: self.node_uid.clone(),
            events: self.events.clone(),
            eviction: self.eviction.clone(),
        };
        self.tasks
            .spawn(tracing::info_span!("node_status"), move |token| {
                controller.run(token)
            });
        let (api_node, name, tx) = (api.clone(), reg.node_name.clone(), self.node.clone());
        self.tasks
            .spawn(tracing::info_span!("node_watch"), move |token| {
                watch_node(api_node, name, tx, token)
            });
        let (api_services, tx) = (api.clone(), self.services.clone());
        self.tasks
            .spawn(tracing::info_span!("service_watch"), move |token| async move {
                watch_all::<Service>(&api_services, "Services", tx, token).await
            });
        let (api_classes, tx) = (api.clone(), self.runtime_classes.clone());
        self.tasks.spawn(
            tracing::info_span!("runtime_class_watch"),
            move |token| async move {
                watch_all::<RuntimeClass>(&api_classes, "RuntimeClasses", tx, token).await
            },
        );
        let status_sync = StatusSync {
            api: api.clone(),
            pod_manager: self.pod_manager.clone(),
            status: self.status.clone(),
            node_name: self.opts.node_name.clone(),
            node_uid: self.node_uid.clone(),
            metrics: self.opts.metrics.clone(),
            events: self.events.clone(),
            statics: self.clone(),
        };
        self.tasks
            .spawn(tracing::info_span!("status_sync"), move |token| {
                status_sync.run(token)
            });
        if let Some(rx) = self.events_rx.lock().take() {
            let cfg = &self.opts.config;
            let api = api.with_limits(cfg.event_record_qps, cfg.event_burst);
            let clock = self.opts.clock;
            self.tasks
                .spawn(tracing::info_span!("events"), move |token| {
                    crate::events::run_event_writer(api, rx, clock, token)
                });
        }
    }

    /// Read the runtime's Version and Status until it answers healthy, then
    /// start what depends on it (PLEG); keep reading Status afterwards.
    async fn runtime_up(
        self: Arc<Self>,
        pleg_tx: mpsc::Sender<Vec<PodLifecycleEvent>>,
        cancel: CancellationToken,
    ) {
        let cri = self.syncer.runtime.cri().clone();
        let mut backoff = Backoff::new(Duration::from_millis(200), RUNTIME_STATUS_PERIOD);
        let mut pleg_tx = Some(pleg_tx);
        loop {
            let checked = async {
                if pleg_tx.is_some() {
                    let v = cri.version().await?;
                    tracing::info!(runtime = %v.runtime_name, version = %v.runtime_version, "container runtime answers");
                    *self.runtime_version.write() =
                        format!("{}://{}", v.runtime_name, v.runtime_version);
                    *self.syncer.runtime_name.write() = v.runtime_name;
                }
                cri.status().await
            }
            .await;
            let delay = match checked {
                Ok(s) => {
                    let problems = s.problems.join("; ");
                    let runtime_err = (!s.runtime_ready)
                        .then(|| format!("container runtime not ready: {problems}"));
                    let network_err = (!s.network_ready)
                        .then(|| format!("container runtime network not ready: {problems}"));
                    let m = &self.opts.metrics;
                    m.runtime_ready
                        .set(&[], f64::from(u8::from(runtime_err.is_none())));
                    m.network_ready
                        .set(&[], f64::from(u8::from(network_err.is_none())));
                    self.runtime_state
                        .set_status(runtime_err.clone(), network_err);
                    if runtime_err.is_none() {
                        if let Some(tx) = pleg_tx.take() {
                            self.initialize_runtime_dependent_modules(tx);
                        }
                        backoff.reset();
                        RUNTIME_STATUS_PERIOD
                    } else {
                        backoff.next_delay()
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "container runtime check failed");
                    self.opts.metrics.runtime_ready.set(&[], 0.0);
                    self.runtime_state.set_unreachable(e.to_string());
                    backoff.next_delay()
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    fn initialize_runtime_dependent_modules(
        self: &Arc<Self>,
        pleg_tx: mpsc::Sender<Vec<PodLifecycleEvent>>,
    ) {
        tracing::info!("runtime is healthy: starting PLEG");
        let pleg = self.pleg.clone();
        let started = self.started;
        self.runtime_state
            .add_health_check("pleg", Arc::new(move || pleg.healthy(started)));
        let pleg = self.pleg.clone();
        self.tasks.spawn(tracing::info_span!("pleg"), move |token| {
            pleg.run(pleg_tx, token)
        });
        let allocation = self.syncer.allocation.clone();
        self.tasks.spawn(
            tracing::info_span!("allocation_checkpoints"),
            move |token| allocation.write_checkpoints(token),
        );
        let (runtime, state) = (self.syncer.runtime.clone(), self.runtime_state.clone());
        self.tasks
            .spawn(tracing::info_span!("container_gc"), move |token| {
                collect_every(
                    "dead containers",
                    CONTAINER_GC_PERIOD,
                    state,
                    token,
                    move || {
                        let runtime = runtime.clone();
                        async move { runtime.garbage_collect(&HashSet::new()).await }
                    },
                )
            });
        if self.image_gc_periodic {
            let gc = self.image_gc.clone();
            let state = self.runtime_state.clone();
            self.tasks
                .spawn(tracing::info_span!("image_gc"), move |token| {
                    collect_every("images", IMAGE_GC_PERIOD, state, token, move || {
                        let gc = gc.clone();
                        async move { gc.collect().await }
                    })
                });
        }
        let cfg = &self.opts.config;
        // The configuration's validation refuses a size that does not parse
        // first; a negative one turns rotation off, as upstream's.
        if let Ok(Some(max_size)) = cfg.container_log_max_bytes() {
            let logs = ContainerLogManager::new(
                self.syncer.runtime.cri().clone(),
                LogPolicy {
                    max_size,
                    max_files: usize::try_from(cfg.container_log_max_files).unwrap_or(5),
                    workers: usize::try_from(cfg.container_log_max_workers).unwrap_or(1),
                    interval: cfg.container_log_monitor_interval,
                },
                cfg.pod_logs_dir.clone(),
                self.events.clone(),
                self.opts.clock,
            );
            self.tasks
                .spawn(tracing::info_span!("container_log_manager"), move |token| {
                    logs.run(token)
                });
        }
        let (eviction, host) = (self.eviction.clone(), EvictionView(self.clone()));
        self.tasks
            .spawn(tracing::info_span!("eviction_manager"), move |token| {
                eviction.run(host, token)
            });
        let runtime = self.syncer.runtime.clone();
        self.tasks.spawn(
            tracing::info_span!("image_pull_records"),
            move |token| async move {
                tokio::select! {
                    _ = token.cancelled() => {}
                    () = runtime.adopt_left_pulls() => {}
                }
            },
        );
    }

    async fn sync_loop(
        &self,
        mut updates: mpsc::Receiver<PodUpdate>,
        mut pleg: mpsc::Receiver<Vec<PodLifecycleEvent>>,
        sources_ready: SourcesReady,
        cancel: CancellationToken,
    ) {
        tracing::info!("starting the sync loop");
        let mut probes = self.probe_rx.lock().take();
        let (dirs_tx, mut pod_dirs) = mpsc::channel(1);
        let (volumes, cm) = (self.syncer.volumes.clone(), self.syncer.cm.clone());
        self.tasks
            .spawn(tracing::info_span!("pod_dirs"), move |token| {
                list_pod_dirs(volumes, cm, dirs_tx, token)
            });
        let mut sync_tick = tokio::time::interval(SYNC_PERIOD);
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        for t in [&mut sync_tick, &mut housekeeping] {
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut last_error = String::new();
        // Updates received while the runtime was unhealthy.
        let mut deferred: Vec<PodUpdate> = Vec::new();
        loop {
            let errors = self.runtime_state.runtime_errors();
            if !errors.is_empty() {
                let msg = errors.join("; ");
                if msg != last_error {
                    tracing::warn!(error = %msg, "skipping pod synchronization");
                    last_error = msg;
                }
                // Pods are not dispatched meanwhile, but what the sources
                // want is recorded (for /pods) and dispatched once the
                // runtime is back.
                let pause = tokio::time::sleep(backoff.next_delay());
                tokio::pin!(pause);
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = &mut pause => break,
                        Some(update) = updates.recv() => {
                            self.record_desired(&update);
                            deferred.push(update);
                        }
                    }
                }
                continue;
            }
            if !last_error.is_empty() {
                tracing::info!("container runtime healthy again: resuming pod synchronization");
                last_error.clear();
            }
            for update in std::mem::take(&mut deferred) {
                self.handle_update(update, &sources_ready);
            }
            backoff.reset();
            *self.sync_loop_seen.lock() = Instant::now();
            let wake = tokio::select! {
                _ = cancel.cancelled() => return,
                Some(update) = updates.recv() => Wake::Update(update),
                Some(events) = pleg.recv() => Wake::Pleg(events),
                Some(uid) = async { probes.as_mut()?.recv().await } => Wake::Resync(uid),
                Some(dirs) = pod_dirs.recv() => Wake::PodDirs(dirs),
                _ = sync_tick.tick() => Wake::SyncTick,
                _ = housekeeping.tick() => Wake::Housekeeping,
            };
            let iteration = Instant::now();
            match wake {
                Wake::Update(update) => self.handle_update(update, &sources_ready),
                Wake::Pleg(events) => self.handle_pleg(events),
                Wake::Resync(uid) => {
                    if let Some(pod) = self.pod_manager.get(&uid) {
                        self.workers.update_pod(pod);
                    }
                }
                Wake::PodDirs(dirs) => self.remove_orphaned_pod_dirs(&sources_ready, dirs),
                Wake::SyncTick => self.handle_due(),
                Wake::Housekeeping => {
                    // Sources mark themselves ready after sending: take what
                    // they sent first, so no wanted pod looks like an orphan.
                    while let Ok(update) = updates.try_recv() {
                        self.handle_update(update, &sources_ready);
                    }
                    let start = Instant::now();
                    self.housekeeping(&sources_ready);
                    self.opts
                        .metrics
                        .housekeeping_duration
                        .observe_duration(&[], start.elapsed());
                }
            }
            let m = &self.opts.metrics;
            m.sync_loop_iteration_duration
                .observe_duration(&[], iteration.elapsed());
            m.pod_worker_queue_length
                .set(&[], self.workers.queue_len() as f64);
        }
    }

    /// Record in the pod manager the pods an update adds or changes, without
    /// acting on them (while the runtime is unhealthy). Removals wait for
    /// `handle_update`, which stops what it removes.
    fn record_desired(&self, update: &PodUpdate) {
        if update.op != PodOperation::Remove {
            for pod in &update.pods {
                self.pod_manager.add_or_update(pod.clone());
            }
        }
    }

    fn handle_update(&self, update: PodUpdate, sources_ready: &SourcesReady) {
        for pod in update.pods {
            let uid = PodUid::of(&pod);
            let name = kubelet_core::types::pod_full_name(&pod);
            match update.op {
                PodOperation::Add | PodOperation::Update => {
                    if !self.pod_manager.add_or_update(pod.clone()) {
                        continue; // a mirror pod: bookkeeping only
                    }
                    if self.rejected.lock().contains(&uid) {
                        continue;
                    }
                    tracing::info!(op = ?update.op, pod = %name, %uid, source = update.source, "pod update");
                    // Admitted with what it is allocated (kept across a
                    // restart), a resize since then handled after.
                    if update.op == PodOperation::Add
                        && update.source == SOURCE_API
                        && pod.metadata.deletion_timestamp.is_none()
                        && let Err(r) = self.admit(&self.syncer.allocation.allocated_if_any(&pod))
                    {
                        self.reject(&pod, r);
                        continue;
                    }
                    if update.op == PodOperation::Add {
                        self.syncer.allocation.admit(&pod);
                        self.restore_probe_results(&pod, update.source);
                    }
                    // A resize is admitted against every pod the sources
                    // want: one found as a pod is added (after a restart)
                    // waits for housekeeping, when every pod sent with it
                    // has been admitted; so does one before the sources
                    // have all been heard from.
                    if pod.metadata.deletion_timestamp.is_none() {
                        if update.op == PodOperation::Update && sources_ready.all_ready() {
                            self.handle_resize(&pod);
                        } else {
                            self.syncer.allocation.resize_after_sources(&pod);
                        }
                    }
                    if pod.metadata.deletion_timestamp.is_some() {
                        let grace = pod.metadata.deletion_grace_period_seconds;
                        tracing::info!(pod = %name, %uid, ?grace, "pod is being deleted");
                        self.workers.kill_pod(PodTarget::from_pod(pod), grace);
                    } else {
                        self.workers.update_pod(pod);
                    }
                }
                PodOperation::Remove => {
                    self.rejected.lock().remove(&uid);
                    if self.pod_manager.remove(&pod).is_some() {
                        tracing::info!(pod = %name, %uid, "pod removed by its source");
                        self.workers.kill_pod(PodTarget::from_pod(pod), None);
                    }
                }
                PodOperation::Reconcile => {
                    // Only the status changed: when a readiness gate's
                    // condition did, sync the pod now so Ready follows.
                    let resync = needs_readiness_reconcile(&pod)
                        && pod.metadata.deletion_timestamp.is_none();
                    if self.pod_manager.add_or_update(pod.clone())
                        && resync
                        && !self.rejected.lock().contains(&uid)
                    {
                        tracing::debug!(pod = %name, %uid, "readiness gate changed");
                        self.workers.update_pod(pod);
                    }
                }
            }
        }
    }

    /// A pod the sources give for the first time since the kubelet
    /// started: what its probes said before the restart, from its API
    /// status (API pods) or what the prober kept on disk (static pods).
    fn restore_probe_results(&self, pod: &Pod, source: &str) {
        let uid = PodUid::of(pod);
        if self.workers.state(&uid).is_some() {
            return;
        }
        let kept = if source == SOURCE_FILE {
            self.syncer.prober.kept_on_disk(&uid)
        } else {
            pod.status
                .as_ref()
                .map(crate::prober::restore::from_status)
                .unwrap_or_default()
        };
        if !kept.is_empty() {
            self.syncer.prober.restore(pod, kept);
        }
    }

    /// Admission of an API pod, in upstream's order: the eviction manager's
    /// (no pod but critical ones under pressure), its sysctls, then against
    /// this node and the pods active on it, then AppArmor.
    fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        admit_under_pressure(pod, &self.eviction.pressure())?;
        self.sysctls.admit(pod)?;
        self.admit_to_node(pod)?;
        apparmor_admission(pod, self.apparmor).map_err(|message| Rejection {
            reason: "AppArmor".into(),
            message,
        })
    }

    /// A pod whose spec resources may have changed (a resize): admitted
    /// as upstream admits a resize, against this node and the other pods'
    /// allocations; a resize that does not fit waits (PodResizePending).
    fn handle_resize(&self, pod: &Pod) -> ResizeOutcome {
        self.syncer
            .allocation
            .handle_resize(pod, || self.admit_to_node(pod))
    }

    /// Try the resizes that wait again (upstream's periodic retry): each
    /// one admitted now is synced.
    fn retry_deferred_resizes(&self) {
        for uid in self.syncer.allocation.deferred() {
            let Some(pod) = self.pod_manager.get(&uid) else {
                continue;
            };
            if self.handle_resize(&pod) == ResizeOutcome::Allocated {
                tracing::info!(%uid, "deferred resize admitted");
                self.workers.update_pod(pod);
            }
        }
    }

    /// Admission against this node and the other active pods, with the
    /// resources each is allocated.
    fn admit_to_node(&self, pod: &Pod) -> Result<(), Rejection> {
        let Some(reg) = &self.opts.registration else {
            return Ok(());
        };
        let facts = NodeFacts {
            hostname: reg.node_name.clone(),
            architecture: kubelet_core::nodestatus::architecture().into(),
            ..Default::default()
        };
        let registered = NodeInfo {
            name: reg.node_name.clone(),
            labels: node_labels(&facts, &reg.labels),
            taints: reg.taints.clone(),
            allocatable_cpu_millis: self.local_allocatable.get("cpu").copied().unwrap_or(0),
            allocatable_memory_bytes: self.local_allocatable.get("memory").copied().unwrap_or(0),
            max_pods: self.opts.config.max_pods,
            supplemental_groups_policy: false,
        };
        // The Node as the API has it, with what others added since.
        let node = match self.node.borrow().as_deref() {
            Some(live) => NodeInfo::from_node(live, &registered),
            None => registered,
        };
        let uid = PodUid::of(pod);
        let pods: Vec<Arc<Pod>> = self
            .active_pods()
            .into_iter()
            .filter(|p| PodUid::of(p) != uid)
            .map(|p| self.syncer.allocation.allocated_pod(&p))
            .collect();
        let active: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        admit(pod, &node, &active)
    }

    /// The pods admitted and not done (upstream's GetActivePods): pods only
    /// recorded while the runtime was down have no worker yet. The pods are
    /// copied out first: housekeeping takes the workers' lock before the
    /// pod manager's, so this never holds them the other way round.
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        let rejected = self.rejected.lock().clone();
        let mut pods = self.pod_manager.pods();
        pods.retain(|p| {
            let u = PodUid::of(p);
            !rejected.contains(&u)
                && self.workers.state(&u).is_some_and(|s| !s.is_finished())
                && !self.status.get_pod_status(&u).is_some_and(|s| {
                    matches!(s.phase.as_deref(), Some(PHASE_SUCCEEDED | PHASE_FAILED))
                })
        });
        pods
    }

    /// Refuse a pod: Failed with admission's reason, never started.
    fn reject(&self, pod: &Pod, r: Rejection) {
        let uid = PodUid::of(pod);
        tracing::warn!(pod = %kubelet_core::types::pod_full_name(pod), reason = %r.reason, message = %r.message, "pod rejected");
        self.rejected.lock().insert(uid);
        self.events.event(
            &Involved::pod(pod, None),
            WARNING,
            &r.reason,
            r.message.clone(),
        );
        let message = r.status_message();
        self.status.set_pod_status(
            pod,
            k8s_openapi::api::core::v1::PodStatus {
                phase: Some(PHASE_FAILED.into()),
                reason: Some(r.reason),
                message: Some(message),
                qos_class: Some(qos_class(pod).into()),
                ..Default::default()
            },
        );
    }

    fn handle_pleg(&self, events: Vec<PodLifecycleEvent>) {
        let uids: BTreeSet<PodUid> = events.into_iter().map(|e| e.uid).collect();
        for uid in uids {
            if let Some(pod) = self.pod_manager.get(&uid) {
                self.workers.update_pod(pod);
            }
        }
    }

    fn handle_due(&self) {
        for uid in self.workers.take_due() {
            match self.pod_manager.get(&uid) {
                Some(pod) => self.workers.update_pod(pod),
                None => self.workers.poke(&uid),
            }
        }
        // Pods past their activeDeadlineSeconds are synced now, which fails
        // and stops them (upstream's activeDeadlineHandler as a sync handler).
        let with_deadline = self.pod_manager.pods_where(|p| {
            p.spec
                .as_ref()
                .is_some_and(|s| s.active_deadline_seconds.is_some())
        });
        for pod in with_deadline {
            if self.workers.state(&PodUid::of(&pod))
                == Some(kubelet_core::lifecycle::State::Syncing)
                && self.syncer.past_deadline(&pod)
            {
                self.workers.update_pod(pod);
            }
        }
    }

    /// HandlePodCleanups: forget finished workers, restart pods that came
    /// back, drop stale statuses, and stop whatever the runtime runs that no
    /// source wants (after a restart, or a manifest removed while down).
    fn housekeeping(&self, sources_ready: &SourcesReady) {
        if !sources_ready.all_ready() {
            return;
        }
        for uid in self
            .workers
            .sync_known_pods(|uid| self.pod_manager.desire(uid))
        {
            if let Some(pod) = self.pod_manager.get(&uid) {
                tracing::info!(%uid, "pod wanted again after termination: starting it afresh");
                // Its last life's terminal status must not hold the new one.
                self.status.forget(&uid);
                self.workers.update_pod(pod);
            }
        }
        let known = self.workers.known();
        // Anything a source knows (even while it is being deleted) or a
        // worker holds is not an orphan.
        let keep =
            |uid: &PodUid| self.pod_manager.desire(uid) != Desire::Gone || known.contains(uid);
        self.status.remove_orphans(keep);
        self.syncer.prober.cleanup(|uid| {
            self.pod_manager.desire(uid) == Desire::Run
                && self.workers.state(uid) == Some(kubelet_core::lifecycle::State::Syncing)
        });
        self.syncer.reasons.lock().retain(|uid, _| keep(uid));
        self.syncer.allocation.retain(keep);
        self.retry_deferred_resizes();
        self.syncer.evictions.lock().retain(|uid, _| keep(uid));
        if !self.pleg.has_relisted() {
            return;
        }
        for (uid, rp) in self.pleg.pods().iter() {
            if keep(uid) {
                continue;
            }
            tracing::info!(%uid, pod = %format!("{}/{}", rp.namespace, rp.name), "stopping a pod no source wants");
            let target = PodTarget {
                pod_ref: PodRef {
                    uid: uid.clone(),
                    name: rp.name.clone(),
                    namespace: rp.namespace.clone(),
                },
                pod: None,
            };
            self.workers.kill_pod(target, None);
        }
    }

    /// Pod directories and pod cgroups of pods no source wants, no worker
    /// holds and the runtime does not run (left by a crash, or by a pod
    /// deleted while the kubelet was down) go through a worker of their
    /// own: it tears down their volumes, then removes the cgroup and the
    /// directory, serialised with anything else done for that UID.
    fn remove_orphaned_pod_dirs(&self, sources_ready: &SourcesReady, dirs: Vec<PodUid>) {
        if !sources_ready.all_ready() || !self.pleg.has_relisted() {
            return;
        }
        let known = self.workers.known();
        let running = self.pleg.pods();
        for uid in dirs {
            if self.pod_manager.desire(&uid) != Desire::Gone
                || known.contains(&uid)
                || running.contains_key(&uid)
            {
                continue;
            }
            tracing::info!(%uid, "orphaned pod found: removing its directory and cgroup");
            self.workers.kill_pod(
                PodTarget {
                    pod_ref: PodRef {
                        uid,
                        name: String::new(),
                        namespace: String::new(),
                    },
                    pod: None,
                },
                None,
            );
        }
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

/// Where kernelMemcgNotification registers memory thresholds: the v1
/// memory hierarchy's root (upstream's notifier needs cgroup v1 too).
fn memcg_root(cfg: &KubeletConfiguration, host: &HostCgroups) -> Option<PathBuf> {
    if !cfg.kernel_memcg_notification {
        return None;
    }
    match &host.layout {
        Some(kubelet_core::cgroups::CgroupLayout::V1 { mounts })
            if mounts.contains_key("memory") =>
        {
            mounts.get("memory").cloned()
        }
        _ => {
            tracing::info!(
                "Eviction manager: failed to create memory threshold notifier: memory cgroup mount point not found"
            );
            None
        }
    }
}

/// The kubelet as the eviction manager sees it.
struct EvictionView(Arc<Kubelet>);

impl EvictionHost for EvictionView {
    async fn summary(&self) -> Result<kubelet_core::stats::Summary, String> {
        let view: &dyn StatsView = self.0.as_ref();
        self.0.stats.get(view).await.map_err(|e| e.to_string())
    }

    /// HasDedicatedImageFs: the runtime's image file system is on another
    /// device than the root directory (None while that cannot be told).
    async fn dedicated_image_fs(&self) -> Option<bool> {
        use std::os::unix::fs::MetadataExt as _;
        let mountpoint = match self.0.syncer.runtime.cri().image_fs_mountpoint().await {
            Ok(Some(m)) => m,
            Ok(None) => return Some(false),
            Err(error) => {
                tracing::warn!(%error, "Eviction manager: failed to get HasDedicatedImageFs");
                return None;
            }
        };
        let (image, root) = tokio::join!(
            tokio::fs::metadata(mountpoint),
            tokio::fs::metadata(&self.0.opts.root_dir)
        );
        match (image, root) {
            (Ok(i), Ok(r)) => Some(i.dev() != r.dev()),
            _ => None,
        }
    }

    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.0.active_pods()
    }

    async fn reclaim_disk(&self) {
        // DeleteAllUnusedContainers: the pods that ran to their end keep
        // nothing in the runtime either.
        let done = self.0.workers.finished();
        if let Err(error) = self.0.syncer.runtime.garbage_collect(&done).await {
            tracing::warn!(%error, "Eviction manager: removing dead containers");
        }
        if let Err(error) = self.0.image_gc.delete_unused().await {
            tracing::warn!(%error, "Eviction manager: removing unused images");
        }
    }

    fn evict(&self, pod: &Arc<Pod>, eviction: Eviction) {
        self.0
            .syncer
            .record_eviction(pod, eviction.message.clone(), eviction.disruption);
        self.0.events.annotated_event(
            &Involved::pod(pod, None),
            eviction.annotations,
            WARNING,
            kubelet_core::eviction::rank::REASON,
            eviction.message,
        );
        self.0
            .workers
            .evict_pod(PodTarget::from_pod(pod.clone()), Some(eviction.grace));
    }

    /// Upstream's podResourcesAreReclaimed, as the pod worker knows it: its
    /// SyncTerminatedPod is done.
    fn cleaned_up(&self, pod: &Pod) -> bool {
        self.0
            .workers
            .state(&PodUid::of(pod))
            .is_none_or(|s| s.is_finished())
    }

    fn node_event(&self, reason: &str, message: String) {
        let node = self.0.opts.node_name.clone();
        self.0.events.event(
            &Involved::node(&node, self.0.node_uid()),
            WARNING,
            reason,
            message,
        );
    }
}

impl NodeView for Kubelet {
    fn node_name(&self) -> String {
        self.opts.node_name.clone()
    }
    fn problems(&self) -> Vec<(&'static str, String)> {
        Health::problems(self)
    }
    fn pods(&self) -> Vec<Pod> {
        self.pods_with_status()
    }
    fn cri(&self) -> CriClient {
        self.syncer.runtime.cri().clone()
    }
    fn logs_root(&self) -> PathBuf {
        self.opts.config.pod_logs_dir.clone()
    }
    fn configz(&self) -> serde_json::Value {
        self.opts.config.to_v1beta1_json()
    }
    fn metrics_text(&self) -> String {
        self.opts.metrics.render() + &crate::stats::process::render_process_metrics()
    }
    fn probe_metrics_text(&self) -> String {
        self.syncer.prober.probe_metrics_text()
    }
    fn summary(
        &self,
        only_cpu_and_memory: bool,
    ) -> BoxFuture<'_, Result<serde_json::Value, kubelet_server::BoxError>> {
        Box::pin(async move {
            let summary = self.stats.summary(self, only_cpu_and_memory).await?;
            Ok(summary)
        })
    }
    fn resource_metrics_text(&self) -> BoxFuture<'_, String> {
        Box::pin(self.stats.resource_metrics(self))
    }
    fn cadvisor_metrics_text(&self) -> BoxFuture<'_, String> {
        Box::pin(crate::stats::cadvisor::metrics(self))
    }
}

impl StatsView for Kubelet {
    fn node_name(&self) -> String {
        self.opts.node_name.clone()
    }
    fn pods(&self) -> Vec<Pod> {
        self.pods_with_status()
    }
    fn cri(&self) -> CriClient {
        self.syncer.runtime.cri().clone()
    }
    fn logs_root(&self) -> PathBuf {
        self.opts.config.pod_logs_dir.clone()
    }
    fn root_dir(&self) -> PathBuf {
        self.opts.root_dir.clone()
    }
    fn pod_cgroups(&self) -> Option<kubelet_core::cgroups::PodCgroups> {
        self.syncer.cm.pod_cgroups()
    }
}

impl StaticPodView for Kubelet {
    fn started(&self, full: &str) -> Option<PodUid> {
        self.workers.static_pod_started(full)
    }
    fn terminating(&self, full: &str) -> bool {
        self.workers.static_pod_terminating(full)
    }
}

impl Health for Kubelet {
    fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let since = self.sync_loop_seen.lock().elapsed();
        let limit = (self.opts.config.sync_frequency * 2).max(Duration::from_secs(5 * 60));
        if since > limit {
            out.push((
                "syncloop",
                format!("sync loop last ran {since:?} ago; threshold is {limit:?}"),
            ));
        }
        if let Some(e) = self.pleg.healthy(self.started) {
            out.push(("pleg", e));
        }
        out
    }
}
