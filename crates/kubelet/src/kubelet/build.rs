//! The composition root: the kubelet's parts wired from its options,
//! nothing started (phase 0 of the boot).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kubelet_api::ApiClient;
use kubelet_api::objects::Latest;
use kubelet_core::config::KubeletConfiguration;
use kubelet_core::dns::DnsSettings;
use kubelet_core::downward::Allocatable;
use kubelet_core::eviction::{Threshold, parse_thresholds};
use kubelet_core::imagegc::Policy;
use kubelet_core::nodestatus::NodeFacts;
use kubelet_core::resources::Amounts;
use kubelet_core::security::thermal_throttle_paths;
use kubelet_core::sysctl::Allowlist;
use kubelet_cri::client::CriClient;
use kubelet_tasks::Tasks;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Boot, Kubelet, KubeletOptions, Receivers};
use crate::allocation::AllocationManager;
use crate::cm::{CmError, ContainerManager, HostCgroups, SystemContainers, node_capacity};
use crate::credentialprovider::{PluginCredentials, ServiceAccounts};
use crate::devicemanager::DeviceManager;
use crate::events::Recorder;
use crate::eviction::{EvictionManager, Settings as EvictionSettings};
use crate::imagegc::ImageGcManager;
use crate::kuberuntime::config::{NodeResources, SecurityDefaults};
use crate::kuberuntime::{Host, RuntimeManager};
use crate::nodeshutdown::{Settings as ShutdownSettings, ShutdownManager};
use crate::nodestatus::{NodeAllocatable, detect_node_ip};
use crate::pleg::Pleg;
use crate::pod_workers::PodWorkers;
use crate::podenv::PodEnv;
use crate::podmanager::PodManager;
use crate::prober::ProbeManager;
use crate::pullmanager::PullManager;
use crate::runtime_state::RuntimeState;
use crate::runtimeclass::RuntimeClasses;
use crate::stats::StatsProvider;
use crate::status_manager::StatusManager;
use crate::sync::Syncer;
use crate::userns::UsernsManager;
use crate::volumes::csi::{CsiDrivers, CsiVolumes, VolumesInUse};
use crate::volumes::objects::{ObjectStore, Strategy};
use crate::volumes::podcert::PodCertificates;
use crate::volumes::token::TokenManager;
use crate::volumes::trust::TrustBundles;
use crate::volumes::{ApiObjects, VolumeManager};

impl Kubelet {
    /// Phase 0: wire the kubelet's parts. Starts nothing.
    #[expect(
        clippy::too_many_lines,
        reason = "the composition root: every part is wired here, in one place"
    )]
    pub fn build(
        opts: KubeletOptions,
        cri: CriClient,
        api: Option<ApiClient>,
        cancel: CancellationToken,
    ) -> Boot {
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
        let node_uid: Arc<RwLock<Option<String>>> = Arc::default();
        // Validated with the configuration.
        let strategy = opts
            .config
            .config_map_and_secret_change_detection_strategy
            .parse()
            .unwrap_or(Strategy::Watch);
        let csi_drivers = CsiDrivers::default();
        // Woken for node status to be sent at once (a volume newly in use).
        let node_status_now = Arc::new(Notify::new());
        let api_objects = api.as_ref().map(|api| {
            // One token cache: projected volumes and CSI drivers ask the
            // same, and unmount_pod forgets a pod's tokens there.
            let tokens = TokenManager::new(api.clone(), opts.clock);
            ApiObjects {
                config_maps: ObjectStore::new(
                    api.clone(),
                    tasks.clone(),
                    "configmap",
                    probe_tx.clone(),
                    strategy,
                    node.subscribe(),
                ),
                secrets: ObjectStore::new(
                    api.clone(),
                    tasks.clone(),
                    "secret",
                    probe_tx.clone(),
                    strategy,
                    node.subscribe(),
                ),
                tokens: tokens.clone(),
                csi: CsiVolumes::new(
                    csi_drivers.clone(),
                    api.clone(),
                    opts.node_name.clone(),
                    node.subscribe(),
                    opts.root_dir.clone(),
                    tokens,
                    VolumesInUse::new(node_status_now.clone()),
                ),
                trust: TrustBundles::new(api.clone(), tasks.clone(), probe_tx.clone()),
                pod_certificates: PodCertificates::new(
                    api.clone(),
                    tasks.clone(),
                    opts.clock,
                    opts.metrics.clone(),
                    opts.node_name.clone(),
                    node_uid.clone(),
                    probe_tx.clone(),
                ),
                claims: crate::volumes::claims::Claims {
                    api: api.clone(),
                    node_name: opts.node_name.clone(),
                    node: node.subscribe(),
                },
            }
        });
        let (reserved, eviction_hard, local_allocatable) = node_allocatable(&opts);
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
        let classes = match &api {
            Some(_) => RuntimeClasses::watched(runtime_classes.subscribe()),
            None => RuntimeClasses::default(),
        };
        let plugins = opts
            .credential_providers
            .clone()
            .map(|providers| PluginCredentials {
                providers,
                accounts: api
                    .as_ref()
                    .zip(api_objects.as_ref())
                    .map(|(api, objects)| ServiceAccounts {
                        api: api.clone(),
                        tokens: objects.tokens.clone(),
                    }),
            });
        let runtime_state = RuntimeState::default();
        // ResourceHealthStatus: the pods whose devices' health changed are
        // synced (their containers' allocatedResourcesStatus).
        let devices = DeviceManager::new(
            &opts.root_dir,
            opts.metrics.clone(),
            node_status_now.clone(),
            cfg.feature_enabled("ResourceHealthStatus")
                .then(|| probe_tx.clone()),
        );
        let cpus = crate::cpumanager::CpuManager::new(
            cpu_settings(&opts),
            opts.cpu_topology.clone(),
            &opts.root_dir,
            opts.metrics.clone(),
        );
        let memory = crate::memorymanager::MemoryManager::new(
            memory_settings(&opts, &reserved, &eviction_hard),
            opts.numa_memory.clone(),
            &opts.root_dir,
            opts.metrics.clone(),
        );
        let dra = crate::dra::DraManager::new(
            &opts.root_dir,
            api.clone(),
            &opts.node_name,
            opts.metrics.clone(),
            cfg.feature_enabled("ResourceHealthStatus")
                .then(|| crate::dra::HealthReports {
                    changed: probe_tx.clone(),
                    messages: cfg.feature_enabled("ResourceHealthStatusMessage"),
                }),
        );
        let topology = crate::topologymanager::TopologyManager::new(
            crate::topologymanager::TopologySettings {
                policy: cfg.topology_manager_policy.clone(),
                scope: cfg.topology_manager_scope.clone(),
                options: cfg.topology_manager_policy_options.clone(),
            },
            opts.numa.clone(),
            (devices.clone(), cpus.clone(), memory.clone()),
            opts.metrics.clone(),
        );
        let runtime = RuntimeManager::new(
            cri,
            runtime_host(
                &opts,
                host_ips,
                cm.clone(),
                classes,
                runtime_state.clone(),
                (devices, cpus, memory, dra),
            ),
            env,
            pulls.clone(),
            events.clone(),
            opts.metrics.clone(),
            opts.clock,
        )
        .with_credential_plugins(plugins);
        let image_gc_periodic =
            cfg.image_gc_high_threshold_percent < 100 || !cfg.image_maximum_gc_age.is_zero();
        let image_gc = Arc::new(ImageGcManager::new(
            runtime.cri().clone(),
            image_gc_policy(cfg),
            pulls.clone(),
            events.clone(),
            opts.clock,
        ));
        let eviction = Arc::new(EvictionManager::new(
            eviction_settings(cfg, &opts.cgroups),
            opts.metrics.clone(),
            opts.clock,
        ));
        let shutdown = Arc::new(ShutdownManager::new(
            ShutdownSettings::from_config(cfg, &opts.root_dir, opts.logind.clone()),
            opts.metrics.clone(),
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
        let pleg = Pleg::new(runtime.clone(), opts.metrics.clone(), opts.clock);
        let syncer = Syncer {
            relist: pleg.requests(),
            runtime: runtime.clone(),
            runtime_state,
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
            terminations: Arc::default(),
        };
        let workers = PodWorkers::new(
            Arc::new(syncer.clone()),
            tasks.clone(),
            opts.config.sync_frequency,
        );
        let kubelet = Arc::new(Kubelet {
            pod_manager: syncer.pods.clone(),
            status: syncer.status.clone(),
            runtime_state: syncer.runtime_state.clone(),
            pleg,
            workers,
            syncer,
            tasks,
            started: Instant::now(),
            sync_loop_seen: Arc::new(Mutex::new(Instant::now())),
            bound: Mutex::default(),
            api,
            node_uid,
            node,
            services,
            runtime_classes,
            runtime_version: Arc::default(),
            rejected: Mutex::default(),
            sysctls,
            topology,
            apparmor: apparmor_on_host(),
            image_gc,
            image_gc_periodic,
            stats: Arc::new(
                StatsProvider::new()
                    .with_volume_period(opts.config.volume_stats_agg_period)
                    .with_cri_pod_stats(opts.config.feature_enabled("PodAndContainerStatsFromCRI")),
            ),
            eviction,
            shutdown,
            node_status_now,
            system_containers: SystemContainers::new(&opts.config, &opts.cgroups),
            reserved,
            eviction_hard,
            local_allocatable,
            csi_drivers,
            events,
            opts,
        });
        Boot {
            kubelet,
            receivers: Receivers {
                events: events_rx,
                probes: probe_rx,
            },
        }
    }

    /// validateNodeAllocatable: systemReserved, kubeReserved and the hard
    /// eviction thresholds together within the node's capacity.
    pub(super) fn check_reservation(&self) -> Result<(), CmError> {
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
            .map_err(|e| CmError::Config(e.to_string()))
    }
}

/// What node allocatable keeps back (systemReserved plus kubeReserved,
/// and the hard eviction thresholds), and the allocatable this host's
/// capacity leaves: admission's figures until the Node is seen.
fn node_allocatable(opts: &KubeletOptions) -> (Amounts, Vec<Threshold>, Amounts) {
    let (mut reserved, kube_reserved) = opts.config.reservations();
    for (k, v) in &kube_reserved {
        let e = reserved.entry(k.clone()).or_default();
        *e = e.saturating_add(*v);
    }
    // The configuration's validation refuses bad thresholds first.
    let eviction_hard = parse_thresholds(&opts.config.eviction_hard).unwrap_or_default();
    let local_allocatable = kubelet_core::nodestatus::allocatable(&NodeFacts {
        cpu_cores: opts.node_cpu_cores,
        memory_bytes: opts.node_memory,
        hugepages: opts.hugepages.clone(),
        max_pods: opts.config.pod_capacity(opts.node_cpu_cores),
        reserved: reserved.clone(),
        eviction_hard: eviction_hard.clone(),
        ..Default::default()
    });
    (reserved, eviction_hard, local_allocatable)
}

/// What the CPU manager is configured with: its policy and options, and
/// the CPUs the node keeps (reservedSystemCPUs, or the cpu of
/// systemReserved and kubeReserved).
fn cpu_settings(opts: &KubeletOptions) -> crate::cpumanager::CpuSettings {
    let cfg = &opts.config;
    let (system, kube) = cfg.reservations();
    crate::cpumanager::CpuSettings {
        policy: cfg.cpu_manager_policy.clone(),
        options: cfg.cpu_manager_policy_options.clone(),
        reserved_system_cpus: kubelet_core::cpuset::parse(&cfg.reserved_system_cpus)
            .unwrap_or_default(),
        reserve_millis: system.get("cpu").copied().unwrap_or(0)
            + kube.get("cpu").copied().unwrap_or(0),
    }
}

/// What the memory manager is configured with: its policy, reservedMemory,
/// and what node allocatable keeps back (upstream's
/// GetNodeAllocatableReservation: systemReserved, kubeReserved and the hard
/// eviction thresholds, for the node's memory).
fn memory_settings(
    opts: &KubeletOptions,
    reserved: &Amounts,
    eviction_hard: &[Threshold],
) -> crate::memorymanager::MemorySettings {
    let cfg = &opts.config;
    let mut allocatable_reservation = reserved.clone();
    let eviction =
        kubelet_core::eviction::hard_eviction_reservation(eviction_hard, opts.node_memory, 0);
    for (k, v) in eviction {
        let e = allocatable_reservation.entry(k).or_default();
        *e = e.saturating_add(v);
    }
    allocatable_reservation.retain(|_, v| *v != 0);
    let reservations = kubelet_core::memorymanager::reservations(&cfg.reserved_memory);
    crate::memorymanager::MemorySettings {
        policy: cfg.memory_manager_policy.clone(),
        reservations,
        allocatable_reservation,
    }
}

/// What the runtime manager needs to know of this host and its
/// configuration.
fn runtime_host(
    opts: &KubeletOptions,
    node_ips: Vec<String>,
    cgroups: ContainerManager,
    runtime_classes: RuntimeClasses,
    runtime_state: RuntimeState,
    (devices, cpus, memory, dra): (
        DeviceManager,
        crate::cpumanager::CpuManager,
        crate::memorymanager::MemoryManager,
        crate::dra::DraManager,
    ),
) -> Host {
    let cfg = &opts.config;
    Host {
        devices,
        cpus,
        memory,
        dra,
        logs_root: cfg.pod_logs_dir.clone(),
        legacy_logs_dir: opts.legacy_logs_dir.clone(),
        pods_dir: opts.root_dir.join("pods"),
        dns: DnsSettings {
            cluster_dns: cfg.cluster_dns.clone(),
            cluster_domain: cfg.cluster_domain.clone(),
            has_resolv_conf: !cfg.resolv_conf.is_empty(),
            node_ips,
        },
        resolv_conf: cfg.resolv_conf.clone(),
        resources: NodeResources {
            memory: opts.node_memory,
            cfs_period: cfg
                .cpu_cfs_quota
                .then_some(cfg.cpu_cfs_quota_period.as_micros() as u64),
            swap: kubelet_core::swap::SwapPolicy {
                limited: cfg.memory_swap.swap_behavior == kubelet_core::swap::LIMITED_SWAP,
                controller: opts.swap_controller,
                node_memory: opts.node_memory,
                node_swap: opts.node_swap,
            },
        },
        security: SecurityDefaults {
            seccomp_root: opts.root_dir.join("seccomp"),
            seccomp_default: cfg.seccomp_default,
            extra_masked_paths: host_masked_paths(),
        },
        image_pull_limit: cfg.image_pull_limit(),
        max_container_restart_period: cfg.crash_loop_back_off.max_container_restart_period,
        pull_qps: (cfg.registry_pull_qps > 0).then(|| {
            (
                f64::from(cfg.registry_pull_qps),
                f64::from(cfg.registry_burst),
            )
        }),
        cgroups,
        runtime_classes,
        runtime_state,
        stop_signals: cfg.feature_enabled("ContainerStopSignals"),
        userns: UsernsManager::new(
            opts.root_dir.join("pods"),
            u32::try_from(cfg.user_namespaces.ids_per_pod).unwrap_or(u32::MAX),
            cfg.max_pods,
        ),
    }
}

/// The image garbage collector's policy from imageGC*.
fn image_gc_policy(cfg: &KubeletConfiguration) -> Policy {
    Policy {
        high_threshold_percent: cfg.image_gc_high_threshold_percent as u8,
        low_threshold_percent: cfg.image_gc_low_threshold_percent as u8,
        min_age: cfg.image_minimum_gc_age,
        max_age: cfg.image_maximum_gc_age,
    }
}

/// The eviction manager's settings from eviction* and, with
/// kernelMemcgNotification, where it registers memory thresholds.
fn eviction_settings(cfg: &KubeletConfiguration, cgroups: &HostCgroups) -> EvictionSettings {
    let memcg = memcg_root(cfg, cgroups);
    EvictionSettings {
        // The configuration's validation refuses bad thresholds first.
        thresholds: cfg.eviction_thresholds().unwrap_or_default(),
        transition_period: cfg.eviction_pressure_transition_period,
        max_pod_grace_period: i64::from(cfg.eviction_max_pod_grace_period),
        local_storage_capacity_isolation: cfg.local_storage_capacity_isolation,
        memcg_pods: memcg.as_ref().filter(|_| cfg.cgroups_per_qos).map(|root| {
            root.join(
                kubelet_core::cgroups::QosCgroups::new(&cfg.cgroup_root)
                    .root
                    .relative(),
            )
        }),
        memcg_root: memcg,
    }
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
