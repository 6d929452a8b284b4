//! The runtime manager (upstream's kuberuntime): reads what the CRI runtime
//! holds for a pod, and carries out compute-pod-actions' decisions: sandbox,
//! image pulls, container create/start, kill with SIGTERM→SIGKILL, removal.
//! Every operation is idempotent: NotFound on stop or remove counts as done.

pub mod config;
pub mod hooks;
pub mod legacylogs;
pub mod mounts;

mod container;
mod gc;
mod image;
mod sandbox;
mod status;

pub use self::container::grace_period;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::actions::{PodActions, compute_pod_actions};
use kubelet_core::dns::DnsSettings;
use kubelet_core::flowcontrol::{KeyedBackoff, PullBackoff, TokenBucket};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::podspec::{
    ContainerKind, ephemeral_containers, init_containers, regular_containers,
};
use kubelet_core::resize::Allocation;
use kubelet_core::runtime::{PodStatus, ProbeView};
use kubelet_core::types::{PodUid, keys};
use kubelet_cri::client::{CriClient, CriError};
use kubelet_cri::v1 as cri;
use parking_lot::Mutex;

use self::config::{NodeResources, SecurityDefaults};
use crate::clock::Clock;
use crate::cm::ContainerManager;
use crate::credentialprovider::PluginCredentials;
use crate::error::{ResizeError, StartFailure, SyncError};
use crate::events::{Involved, Recorder};
use crate::podenv::PodEnv;
use crate::pullmanager::PullManager;
use crate::runtimeclass::RuntimeClasses;
use crate::volumes::PodVolumes;

/// Upstream never kills with less than this grace period (seconds).
pub const MIN_GRACE_PERIOD: i64 = 2;

/// A pod as the runtime manager needs to know it to read its status, stop
/// or clean it when no spec may be left: its identity.
#[derive(Clone, Debug)]
pub struct PodRef {
    pub uid: PodUid,
    pub name: String,
    pub namespace: String,
}

/// What SyncPod did: the containers it started, and those it could not
/// start, each with why (the waiting reason it shows, whether a retry
/// helps).
#[derive(Debug, Default)]
pub struct SyncResult {
    pub failures: Vec<StartFailure>,
    /// Containers started by this sync.
    pub started: Vec<String>,
    /// Running containers whose resources were updated in place.
    pub resized: Vec<String>,
    /// Why the resize could not be carried out.
    pub resize_error: Option<ResizeError>,
    /// The sync changed something in the runtime (stopped, created,
    /// started or updated).
    pub acted: bool,
}

/// The sandbox a pod's containers start in: its config, the pod's IPs and
/// name in it, and the pod's volumes they mount.
struct Sandbox<'a> {
    id: String,
    config: cri::PodSandboxConfig,
    ips: Vec<String>,
    name: PodName,
    volumes: &'a PodVolumes,
}

/// The pod's hostname and domain (upstream's GeneratePodHostNameAndDomain).
struct PodName {
    hostname: String,
    domain: String,
}

/// What the runtime manager needs to know of the node.
#[derive(Clone, Debug)]
pub struct Host {
    /// podLogsDir.
    pub logs_root: PathBuf,
    /// Where each container's log gets a link for log agents
    /// (`/var/log/containers`; tests give their own).
    pub legacy_logs_dir: PathBuf,
    /// `<root-dir>/pods`: per-pod files (termination message files).
    pub pods_dir: PathBuf,
    /// The node's DNS settings (clusterDNS, clusterDomain).
    pub dns: DnsSettings,
    /// resolvConf: the node's resolver file, read for each sandbox config
    /// as upstream does (empty: none).
    pub resolv_conf: String,
    /// The node's memory and cpuCFSQuota (containers' and sandboxes'
    /// Linux resources).
    pub resources: NodeResources,
    /// seccompDefault, the Localhost profiles' root, the host's masked paths.
    pub security: SecurityDefaults,
    /// The RuntimeClasses pods' sandboxes are run with.
    pub runtime_classes: RuntimeClasses,
    /// The runtime's handlers and features as its Status lists them
    /// (recursive read-only mounts are given where the pod's handler
    /// supports them).
    pub runtime_state: crate::runtime_state::RuntimeState,
    /// The pods' user namespaces (`hostUsers: false`).
    pub userns: crate::userns::UsernsManager,
    /// How many image pulls may run at once (serializeImagePulls: one;
    /// maxParallelImagePulls); None: no limit.
    pub image_pull_limit: Option<usize>,
    /// registryPullQPS and registryBurst (None: no limit).
    pub pull_qps: Option<(f64, f64)>,
    /// The longest crash-loop back-off (crashLoopBackOff's
    /// maxContainerRestartPeriod).
    pub max_container_restart_period: std::time::Duration,
    /// The pods' cgroups: each sandbox's cgroup parent.
    pub cgroups: ContainerManager,
    /// The ContainerStopSignals gate: a container's `lifecycle.stopSignal`
    /// goes to the runtime, and its status shows the runtime's.
    pub stop_signals: bool,
    /// The device plugins: what each container is given of its devices.
    pub devices: crate::devicemanager::DeviceManager,
    /// The CPU manager: the cpuset each container runs on.
    pub cpus: crate::cpumanager::CpuManager,
    /// The memory manager: the NUMA nodes each container's memory is on.
    pub memory: crate::memorymanager::MemoryManager,
    /// The DRA manager: each pod's claims prepared before its sandbox, and
    /// each container's CDI devices from them.
    pub dra: crate::dra::DraManager,
}

#[derive(Clone)]
pub struct RuntimeManager {
    cri: CriClient,
    host: Host,
    /// What containers' environments are made from.
    env: PodEnv,
    crashloop: Arc<Mutex<KeyedBackoff>>,
    /// ImagePullBackOff, per pod and image.
    pull_backoff: Arc<Mutex<PullBackoff>>,
    /// A permit per pull that may run now (none: no limit).
    pull_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// registryPullQPS's budget (none: no limit).
    pull_budget: Option<Arc<Mutex<TokenBucket>>>,
    /// Which pull secrets may use the images the kubelet pulled.
    pulls: Arc<PullManager>,
    /// Image credential provider plugins, if configured.
    plugins: Option<PluginCredentials>,
    events: Recorder,
    metrics: KubeletMetrics,
    /// The wall clock crash-loop back-offs are counted on (against the
    /// runtime's finish times).
    clock: Clock,
}

fn uid_filter(uid: &PodUid) -> HashMap<String, String> {
    HashMap::from([(keys::POD_UID.to_owned(), uid.to_string())])
}

fn ok_if_not_found(r: Result<(), CriError>) -> Result<(), CriError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        r => r,
    }
}

impl RuntimeManager {
    pub fn new(
        cri: CriClient,
        host: Host,
        env: PodEnv,
        pulls: Arc<PullManager>,
        events: Recorder,
        metrics: KubeletMetrics,
        clock: Clock,
    ) -> Self {
        let crashloop = KeyedBackoff::with_max(host.max_container_restart_period);
        let pull_budget = host.pull_qps.map(|(qps, burst)| {
            Arc::new(Mutex::new(TokenBucket::full(qps, burst, clock.now_nanos())))
        });
        let pull_slots = host
            .image_pull_limit
            .map(|n| Arc::new(tokio::sync::Semaphore::new(n)));
        RuntimeManager {
            cri,
            host,
            env,
            crashloop: Arc::new(Mutex::new(crashloop)),
            pull_backoff: Arc::default(),
            pull_slots,
            pull_budget,
            pulls,
            plugins: None,
            events,
            metrics,
            clock,
        }
    }

    /// Pull with the credentials of image credential provider plugins
    /// too (after the pod's pull secrets).
    pub fn with_credential_plugins(mut self, plugins: Option<PluginCredentials>) -> Self {
        self.plugins = plugins;
        self
    }

    pub fn cri(&self) -> &CriClient {
        &self.cri
    }

    pub fn devices(&self) -> &crate::devicemanager::DeviceManager {
        &self.host.devices
    }

    pub fn cpus(&self) -> &crate::cpumanager::CpuManager {
        &self.host.cpus
    }

    /// The memory manager.
    pub fn memory(&self) -> &crate::memorymanager::MemoryManager {
        &self.host.memory
    }

    /// The DRA manager.
    pub fn dra(&self) -> &crate::dra::DraManager {
        &self.host.dra
    }

    /// The pods' user namespaces.
    pub fn userns(&self) -> &crate::userns::UsernsManager {
        &self.host.userns
    }

    /// Where the pod lifecycle's events go.
    pub fn events(&self) -> &Recorder {
        &self.events
    }

    /// Converge `pod` toward its spec from `status` (upstream's
    /// kubeGenericRuntimeManager.SyncPod), in the seeds' steps: stop what
    /// must stop, the sandbox, then for each container to start its image,
    /// config, create and start, and postStart hook. A container that does
    /// not start is reported in the result, typed, not as an error: the
    /// others go on.
    pub async fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        probes: &(dyn ProbeView + Sync),
        volumes: &PodVolumes,
        resize_from: Option<&Allocation>,
    ) -> Result<SyncResult, SyncError> {
        let mut actions: PodActions = compute_pod_actions(pod, status, probes);
        if let Some(actuated) = resize_from {
            actions.add_resizes(pod, status, actuated);
        }
        // A new sandbox of a pod in a user namespace is counted, and so is
        // its SyncPod's failure anywhere, as upstream counts them.
        let user_namespaced = actions.create_sandbox.is_some()
            && pod.spec.as_ref().and_then(|s| s.host_users) == Some(false);
        if user_namespaced {
            self.metrics.started_user_namespaced_pods.inc(&[]);
        }
        let synced = self.sync_steps(pod, status, &actions, volumes).await;
        if user_namespaced && !synced.as_ref().is_ok_and(|r| r.failures.is_empty()) {
            self.metrics.started_user_namespaced_pods_errors.inc(&[]);
        }
        synced
    }

    /// SyncPod's steps once its actions are computed.
    async fn sync_steps(
        &self,
        pod: &Pod,
        status: &PodStatus,
        actions: &PodActions,
        volumes: &PodVolumes,
    ) -> Result<SyncResult, SyncError> {
        let grace = grace_period(Some(pod), status, None);
        self.stop_step(pod, status, actions, grace).await?;
        let mut result = SyncResult {
            acted: actions.acts(),
            ..SyncResult::default()
        };
        self.resize_step(pod, actions, &mut result).await;
        let Some(sandbox) = self.sandbox_step(pod, status, actions, volumes).await? else {
            return Ok(result);
        };
        // Converted only when one is to start.
        let ephemeral = if actions
            .containers_to_start
            .iter()
            .any(|s| s.kind == ContainerKind::Ephemeral)
        {
            ephemeral_containers(pod)
        } else {
            Vec::new()
        };
        for start in &actions.containers_to_start {
            let spec = match start.kind {
                ContainerKind::Init => init_containers(pod).get(start.index).map(|c| (c, None)),
                ContainerKind::Regular => {
                    regular_containers(pod).get(start.index).map(|c| (c, None))
                }
                ContainerKind::Ephemeral => ephemeral
                    .get(start.index)
                    .map(|(c, target)| (c, target.as_deref())),
            };
            let Some((c, target)) = spec else {
                continue;
            };
            let about = Involved::pod(pod, Some(&c.name));
            let started = match self
                .start_step(pod, c, target, start, status, &sandbox, &about)
                .await
            {
                Ok(id) => {
                    result.started.push(c.name.clone());
                    self.post_start_step(pod, c, &id, status, grace, &about)
                        .await?
                }
                Err(e) => Err(e),
            };
            if let Err(error) = started {
                self.report_start_failure(pod, c, &about, &error);
                result.failures.push(StartFailure {
                    container: c.name.clone(),
                    error,
                });
            }
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests;
