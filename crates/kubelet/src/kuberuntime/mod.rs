//! The runtime manager (upstream's kuberuntime): reads what the CRI runtime
//! holds for a pod, and carries out compute-pod-actions' decisions: sandbox,
//! image pulls, container create/start, kill with SIGTERM→SIGKILL, removal.
//! Every operation is idempotent: NotFound on stop or remove counts as done.

pub mod config;
pub mod hooks;
pub mod legacylogs;
pub mod mounts;

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::actions::{PodActions, StartContainer, compute_pod_actions, container_hash};
use kubelet_core::credentials::{Credential, Keyring};
use kubelet_core::dns::{
    DnsSettings, ResolvConf, hostname_and_domain, kernel_hostname, managed_hosts, node_hosts,
    parse_resolv_conf, pod_dns,
};
use kubelet_core::duration::format_go_duration;
use kubelet_core::flowcontrol::{self, KeyedBackoff, PullBackoff};
use kubelet_core::gc::{GcCandidate, SandboxCandidate, evictable, evictable_sandboxes};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::podspec::{
    ContainerKind, ephemeral_containers, init_containers, is_sidecar, regular_containers,
};
use kubelet_core::pullrecords::{Check, ImagePullSecret};
use kubelet_core::reference::parse_normalized;
use kubelet_core::resize::Allocation;
use kubelet_core::runtime::{
    ContainerState, ContainerStatus, PodStatus, ProbeView, RuntimePod, RuntimePods, SandboxState,
    SandboxStatus,
};
use kubelet_core::security::{verify_run_as_non_root, wants_non_root};
use kubelet_core::types::{PodUid, keys};
use kubelet_cri::client::{CriClient, CriError};

use self::config::{
    ContainerInputs, NodeResources, SecurityDefaults, container_config, host_network, pod_log_dir,
    sandbox_config,
};
use self::hooks::{Hook, run_hook};
use self::mounts::{ETC_HOSTS, container_mounts, mounts_etc_hosts};
use crate::clock::Clock;
use crate::cm::ContainerManager;
use crate::error::{ConfigError, StartError, StartFailure, SyncError};
use crate::events::{Involved, NORMAL, Recorder, WARNING};
use crate::files::is_under;
use crate::podenv::PodEnv;
use crate::pullmanager::PullManager;
use crate::runtimeclass::RuntimeClasses;
use crate::volumes::{PodVolumes, pod_dir};
use kubelet_tasks::blocking;

/// Upstream never kills with less than this grace period (seconds).
pub const MIN_GRACE_PERIOD: i64 = 2;

/// A pod as the runtime manager needs to know it to stop or clean it: its
/// identity and, when a source still knows it, its spec.
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
    /// Why updating a container's resources failed.
    pub resize_error: Option<String>,
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
    /// How many image pulls may run at once (serializeImagePulls: one;
    /// maxParallelImagePulls); None: no limit.
    pub image_pull_limit: Option<usize>,
    /// The pods' cgroups: each sandbox's cgroup parent.
    pub cgroups: ContainerManager,
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
    /// Which pull secrets may use the images the kubelet pulled.
    pulls: Arc<PullManager>,
    events: Recorder,
    metrics: KubeletMetrics,
    /// The wall clock crash-loop back-offs are counted on (against the
    /// runtime's finish times).
    clock: Clock,
}

fn uid_filter(uid: &PodUid) -> HashMap<String, String> {
    HashMap::from([(keys::POD_UID.to_owned(), uid.to_string())])
}

fn container_state(s: i32) -> ContainerState {
    match cri::ContainerState::try_from(s) {
        Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

fn sandbox_state(s: i32) -> SandboxState {
    if s == cri::PodSandboxState::SandboxReady as i32 {
        SandboxState::Ready
    } else {
        SandboxState::NotReady
    }
}

/// The relist entry of the pod a labelled sandbox or container belongs to;
/// None for objects the kubelet did not create.
fn runtime_pod<'a>(
    pods: &'a mut RuntimePods,
    labels: &HashMap<String, String>,
) -> Option<&'a mut RuntimePod> {
    let uid = PodUid(labels.get(keys::POD_UID)?.clone());
    Some(pods.entry(uid.clone()).or_insert_with(|| RuntimePod {
        uid,
        name: labels.get(keys::POD_NAME).cloned().unwrap_or_default(),
        namespace: labels.get(keys::POD_NAMESPACE).cloned().unwrap_or_default(),
        ..Default::default()
    }))
}

fn ok_if_not_found(r: Result<(), CriError>) -> Result<(), CriError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        r => r,
    }
}

fn pull_policy_default(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || (last.contains(':') && !last.ends_with(":latest")) {
        "IfNotPresent"
    } else {
        "Always"
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
        let pull_slots = host
            .image_pull_limit
            .map(|n| Arc::new(tokio::sync::Semaphore::new(n)));
        RuntimeManager {
            cri,
            host,
            env,
            crashloop: Arc::default(),
            pull_backoff: Arc::default(),
            pull_slots,
            pulls,
            events,
            metrics,
            clock,
        }
    }

    pub fn cri(&self) -> &CriClient {
        &self.cri
    }

    /// Where the pod lifecycle's events go.
    pub fn events(&self) -> &Recorder {
        &self.events
    }

    /// Everything the runtime holds for one pod (upstream's GetPodStatus).
    pub async fn get_pod_status(&self, pod: &PodRef) -> Result<PodStatus, CriError> {
        let sandboxes = self
            .cri
            .list_pod_sandbox(Some(cri::PodSandboxFilter {
                label_selector: uid_filter(&pod.uid),
                ..Default::default()
            }))
            .await?;
        let mut out = PodStatus {
            uid: pod.uid.clone(),
            name: pod.name.clone(),
            namespace: pod.namespace.clone(),
            ..Default::default()
        };
        for sb in sandboxes {
            let st = match self.cri.pod_sandbox_status(&sb.id).await {
                Ok(st) => st,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            let ips = sandbox_ips(&st);
            let host_network = st
                .linux
                .as_ref()
                .and_then(|l| l.namespaces.as_ref())
                .and_then(|n| n.options.as_ref())
                .is_some_and(|o| o.network == cri::NamespaceMode::Node as i32);
            out.sandboxes.push(SandboxStatus {
                id: st.id,
                state: sandbox_state(st.state),
                attempt: st.metadata.map(|m| m.attempt).unwrap_or(0),
                created_at: st.created_at,
                ips,
                host_network,
            });
        }
        out.sandboxes
            .sort_by_key(|s| std::cmp::Reverse(s.created_at));

        let containers = self
            .cri
            .list_containers(Some(cri::ContainerFilter {
                label_selector: uid_filter(&pod.uid),
                ..Default::default()
            }))
            .await?;
        for c in containers {
            let st = match self.cri.container_status(&c.id).await {
                Ok(st) => st,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            let ann = |k: &str| st.annotations.get(k).cloned().unwrap_or_default();
            let exited = container_state(st.state) == ContainerState::Exited;
            let message = if exited {
                join_messages(&st.message, &self.termination_message(&st).await)
            } else {
                st.message.clone()
            };
            out.containers.push(ContainerStatus {
                id: st.id.clone(),
                name: st
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default(),
                state: container_state(st.state),
                hash: ann(keys::CONTAINER_HASH),
                restart_count: ann(keys::CONTAINER_RESTART_COUNT).parse().unwrap_or(0),
                image: st
                    .image
                    .as_ref()
                    .map(|i| i.image.clone())
                    .unwrap_or_default(),
                image_ref: st.image_ref.clone(),
                created_at: st.created_at,
                started_at: st.started_at,
                finished_at: st.finished_at,
                exit_code: st.exit_code,
                reason: st.reason.clone(),
                message,
                grace_period: ann(keys::POD_TERMINATION_GRACE_PERIOD).parse().ok(),
            });
        }
        out.containers
            .sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(out)
    }

    /// What an exited container left as its termination message (upstream's
    /// ContainerStatus.Message): the file mounted at terminationMessagePath
    /// (at most 4 KiB; only a file under the pods directory), else with
    /// FallbackToLogsOnError and a failure the last 80 lines of its log (at
    /// most 2 KiB). The files are read on the blocking pool, off the
    /// runtime the kubelet's servers share.
    async fn termination_message(&self, st: &cri::ContainerStatus) -> String {
        let ann = |k: &str| st.annotations.get(k).map(String::as_str).unwrap_or("");
        let target = match ann(keys::CONTAINER_TERMINATION_MESSAGE_PATH) {
            "" => "/dev/termination-log",
            p => p,
        };
        let file = st
            .mounts
            .iter()
            .find(|m| m.container_path == target)
            .map(|m| PathBuf::from(&m.host_path))
            .filter(|p| is_under(p, &self.host.pods_dir));
        // A container that could not even start has no log to fall back to.
        let log = (ann(keys::CONTAINER_TERMINATION_MESSAGE_POLICY) == "FallbackToLogsOnError"
            && st.exit_code != 0
            && st.reason != "ContainerCannotRun"
            && is_under(std::path::Path::new(&st.log_path), &self.host.logs_root))
        .then(|| st.log_path.clone());
        if file.is_none() && log.is_none() {
            return String::new();
        }
        let read = move || {
            let from_file = file
                .and_then(|p| read_at_most(&p, MAX_TERMINATION_MESSAGE))
                .unwrap_or_default();
            match log {
                Some(log) if from_file.is_empty() => log_tail(&log).unwrap_or_default(),
                _ => from_file,
            }
        };
        kubelet_tasks::off_thread(read).await.unwrap_or_default()
    }

    /// One relist for PLEG: every kubelet-managed sandbox and container.
    pub async fn relist(&self) -> Result<RuntimePods, CriError> {
        let sandboxes = self.cri.list_pod_sandbox(None).await?;
        let containers = self.cri.list_containers(None).await?;
        let mut pods = RuntimePods::new();
        for sb in sandboxes {
            if let Some(pod) = runtime_pod(&mut pods, &sb.labels) {
                pod.sandboxes.insert(sb.id, sandbox_state(sb.state));
            }
        }
        for c in containers {
            if let Some(pod) = runtime_pod(&mut pods, &c.labels) {
                let name = c.metadata.map(|m| m.name).unwrap_or_default();
                pod.containers
                    .insert(c.id, (name, container_state(c.state)));
            }
        }
        Ok(pods)
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
        let grace = grace_period(Some(pod), status, None);
        self.stop_step(pod, status, &actions, grace).await?;
        let mut result = SyncResult::default();
        self.resize_step(pod, &actions, &mut result).await;
        let Some(sandbox) = self.sandbox_step(pod, status, &actions, volumes).await? else {
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

    /// SyncPod's resize step (doPodResizeAction, after the pod cgroup took
    /// the allocation): each running container to update is given the
    /// Linux resources of its allocation, shrinking ones first. The first
    /// failure stops the step and is kept; the pod is synced again.
    async fn resize_step(&self, pod: &Pod, actions: &PodActions, result: &mut SyncResult) {
        for update in &actions.containers_to_update {
            let spec = match update.kind {
                ContainerKind::Init => init_containers(pod).get(update.index),
                _ => regular_containers(pod).get(update.index),
            };
            let Some(c) = spec else {
                continue;
            };
            let applied = match config::linux_resources(pod, c, self.host.resources) {
                Ok(linux) => self
                    .cri
                    .update_container_resources(&update.id, linux)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match applied {
                Ok(()) => {
                    tracing::info!(container = %c.name, "container resources updated in place");
                    result.resized.push(c.name.clone());
                }
                Err(e) => {
                    let message = format!("failed to resize container {}: {e}", c.name);
                    tracing::warn!(%message);
                    result.resize_error = Some(message);
                    return;
                }
            }
        }
    }

    /// SyncPod's first step: stop the pod or the containers compute-pod-actions
    /// names, and remove those created but never started.
    async fn stop_step(
        &self,
        pod: &Pod,
        status: &PodStatus,
        actions: &PodActions,
        grace: i64,
    ) -> Result<(), CriError> {
        if actions.kill_pod {
            self.kill_pod(Some(pod), status, grace).await?;
        }
        let kills: Vec<Kill> = actions
            .containers_to_kill
            .iter()
            .filter_map(|k| {
                tracing::info!(container = %k.name, reason = %k.reason, "killing container");
                let c = status.containers.iter().find(|c| c.id == k.id)?;
                Some(Kill {
                    container: c,
                    grace: k.grace.unwrap_or(grace).max(MIN_GRACE_PERIOD),
                    message: k.reason.clone(),
                    after: Vec::new(),
                })
            })
            .collect();
        self.kill_containers(Some(pod), status, kills).await?;
        for id in &actions.containers_to_remove {
            ok_if_not_found(self.cri.remove_container(id).await)?;
        }
        Ok(())
    }

    /// SyncPod's sandbox step: a new sandbox when compute-pod-actions asks
    /// for one, else the ready one (its dead predecessors removed); None when
    /// there is none, or no container to start in it. The pod's IPs are the
    /// new sandbox's (read after its creation, as upstream), else those of
    /// the runtime's status; on the host network, the node's.
    async fn sandbox_step<'a>(
        &self,
        pod: &Pod,
        status: &PodStatus,
        actions: &PodActions,
        volumes: &'a PodVolumes,
    ) -> Result<Option<Sandbox<'a>>, SyncError> {
        let (id, config, name, mut ips) = match (actions.create_sandbox, &actions.sandbox_id) {
            (Some(attempt), _) => {
                let runtime_class = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.runtime_class_name.as_deref());
                let made = match self.host.runtime_classes.handler(runtime_class) {
                    Ok(handler) => self
                        .sandbox_config(pod, attempt)
                        .await
                        .map(|(config, name)| (handler, config, name)),
                    Err(e) => Err(SyncError::SandboxConfig(e)),
                };
                let (handler, config, name) = made.inspect_err(|e| {
                    self.events.event(
                        &Involved::pod(pod, None),
                        WARNING,
                        "FailedCreatePodSandBox",
                        format!("Failed to create pod sandbox: {e}"),
                    );
                })?;
                let id = self.create_sandbox(pod, &config, handler).await?;
                let ips = match self.cri.pod_sandbox_status(&id).await {
                    Ok(st) => sandbox_ips(&st),
                    Err(e) => {
                        self.events.event(
                            &Involved::pod(pod, None),
                            WARNING,
                            "FailedPodSandBoxStatus",
                            format!("Unable to get pod sandbox status: {}", e.grpc_text()),
                        );
                        return Err(e.into());
                    }
                };
                (id, config, name, ips)
            }
            (None, Some(id)) => {
                self.remove_dead_sandboxes(status, id).await?;
                if actions.containers_to_start.is_empty() {
                    return Ok(None);
                }
                let (config, name) = self.sandbox_config(pod, 0).await?;
                (id.clone(), config, name, status.ips().to_vec())
            }
            (None, None) => return Ok(None),
        };
        if actions.containers_to_start.is_empty() {
            return Ok(None);
        }
        if host_network(pod) {
            ips = self.env.host_ips().to_vec();
        }
        Ok(Some(Sandbox {
            id,
            config,
            ips,
            name,
            volumes,
        }))
    }

    /// The sandbox's config (upstream's generatePodSandboxConfig): the
    /// pod's resolver from the node's resolvConf, read now (the events it
    /// asks for sent), and its kernel hostname.
    async fn sandbox_config(
        &self,
        pod: &Pod,
        attempt: u32,
    ) -> Result<(cri::PodSandboxConfig, PodName), SyncError> {
        let fail = |m: String| SyncError::SandboxConfig(m);
        // containerd 1.6 has no user namespaces: refused as upstream's
        // userns manager refuses them on such a runtime.
        if pod.spec.as_ref().and_then(|s| s.host_users) == Some(false) {
            return Err(fail(
                "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
                    .into(),
            ));
        }
        let (hostname, domain) =
            hostname_and_domain(pod, &self.host.dns.cluster_domain).map_err(fail)?;
        let kernel_name = if host_network(pod) {
            String::new()
        } else {
            let fqdn = pod
                .spec
                .as_ref()
                .and_then(|s| s.set_hostname_as_fqdn)
                .unwrap_or(false);
            kernel_hostname(&hostname, &domain, fqdn).map_err(fail)?
        };
        let host = if self.host.resolv_conf.is_empty() {
            ResolvConf::default()
        } else {
            let text = read_resolv_conf(&self.host.resolv_conf)
                .await
                .map_err(|e| fail(format!("open {}: {e}", self.host.resolv_conf)))?;
            parse_resolv_conf(&text).map_err(|e| {
                fail(format!(
                    "Encountered error while parsing resolv conf file. Error: {e}"
                ))
            })?
        };
        let (dns, events) = pod_dns(pod, &host, &self.host.dns);
        for e in events {
            let about = if e.node {
                let node = self.events.node_name().to_owned();
                Involved::node(&node, Some(node.clone()))
            } else {
                Involved::pod(pod, None)
            };
            self.events.event(&about, WARNING, e.reason, e.message);
        }
        let config = sandbox_config(
            pod,
            attempt,
            &self.host.logs_root,
            dns,
            kernel_name,
            self.host.cgroups.cgroup_parent(pod),
            self.host.resources,
        );
        Ok((config, PodName { hostname, domain }))
    }

    async fn create_sandbox(
        &self,
        pod: &Pod,
        cfg: &cri::PodSandboxConfig,
        runtime_handler: String,
    ) -> Result<String, CriError> {
        if !cfg.log_directory.is_empty()
            && let Err(e) = tokio::fs::create_dir_all(&cfg.log_directory).await
        {
            // The runtime says so too, when it cannot write the logs.
            tracing::warn!(dir = %cfg.log_directory, error = %e, "creating the pod's log directory");
        }
        let attempt = cfg.metadata.as_ref().map_or(0, |m| m.attempt);
        tracing::info!(attempt, %runtime_handler, "creating pod sandbox");
        self.metrics.started_pods.inc(&[]);
        self.cri
            .run_pod_sandbox(cfg.clone(), runtime_handler)
            .await
            .inspect_err(|e| {
                self.metrics.started_pods_errors.inc(&[]);
                self.events.event(
                    &Involved::pod(pod, None),
                    WARNING,
                    "FailedCreatePodSandBox",
                    format!("Failed to create pod sandbox: {}", e.grpc_text()),
                );
            })
    }

    /// runAsNonRoot against the user the image runs as (ImageStatus, read
    /// only when the container asks to run as non-root).
    async fn verify_non_root(
        &self,
        pod: &Pod,
        c: &Container,
        image: &str,
    ) -> Result<(), StartError> {
        if !wants_non_root(pod, c) {
            return Ok(());
        }
        let img = self
            .cri
            .image_status(image)
            .await
            .map_err(|e| StartError::Image {
                reason: "ErrImageInspect",
                message: e.message.clone(),
                source: Some(e),
            })?;
        let uid = img.as_ref().and_then(|i| i.uid.as_ref()).map(|u| u.value);
        let user = img.as_ref().map(|i| i.username.as_str()).unwrap_or("");
        verify_run_as_non_root(pod, c, uid, user).map_err(|message| {
            StartError::Config(ConfigError {
                container: c.name.clone(),
                field: "securityContext.runAsNonRoot".into(),
                message,
            })
        })
    }

    /// The pod's managed /etc/hosts (upstream's ensureHostsFile), written
    /// for each container start as upstream does: None when it is not
    /// mounted (a pod on the pod network without an IP yet).
    async fn hosts_file(
        &self,
        pod: &Pod,
        c: &Container,
        sandbox: &Sandbox<'_>,
    ) -> Result<Option<PathBuf>, String> {
        let host_net = host_network(pod);
        if (sandbox.ips.is_empty() && !host_net) || mounts_etc_hosts(c) {
            return Ok(None);
        }
        let Some(dir) = pod_dir(&self.host.pods_dir, &PodUid::of(pod)) else {
            return Ok(None);
        };
        let aliases = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_aliases.clone())
            .unwrap_or_default();
        let content = if host_net {
            let node = tokio::fs::read_to_string(ETC_HOSTS)
                .await
                .map_err(|e| format!("open {ETC_HOSTS}: {e}"))?;
            node_hosts(&node, &aliases)
        } else {
            let n = &sandbox.name;
            managed_hosts(&sandbox.ips, &n.hostname, &n.domain, &aliases)
        };
        let path = dir.join("etc-hosts");
        let write = async {
            tokio::fs::write(&path, content).await?;
            tokio::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).await
        };
        write
            .await
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(Some(path))
    }

    /// SyncPod's steps for one container: its crash-loop back-off, its
    /// image, its config (with its volumes' mounts, the termination message
    /// file and the log directory), then create and start. Ok is the new
    /// container's ID.
    #[allow(clippy::too_many_arguments)]
    async fn start_step(
        &self,
        pod: &Pod,
        c: &Container,
        target: Option<&str>,
        start: &StartContainer,
        status: &PodStatus,
        sandbox: &Sandbox<'_>,
        about: &Involved,
    ) -> Result<String, StartError> {
        if let Some(left) = self.crash_backoff(pod, c, status) {
            let message = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                format_go_duration(left),
                c.name,
                pod.metadata.name.as_deref().unwrap_or(""),
                pod.metadata.namespace.as_deref().unwrap_or("default"),
                pod.metadata.uid.as_deref().unwrap_or(""),
            );
            return Err(StartError::CrashLoopBackOff { left, message });
        }
        // An ephemeral container joins its target's process namespace
        // (upstream's getTargetID): the target must be running.
        let target_id = match target.filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => Some(
                status
                    .container(t)
                    .filter(|s| s.state == ContainerState::Running)
                    .map(|s| s.id.as_str())
                    .ok_or_else(|| {
                        StartError::Config(ConfigError {
                            container: c.name.clone(),
                            field: "targetContainerName".into(),
                            message: format!("unable to find target container {t}"),
                        })
                    })?,
            ),
        };
        let image_ref = self.ensure_image(pod, c, about, &sandbox.config).await?;
        self.verify_non_root(pod, c, &image_ref).await?;
        let termination_log = self.termination_log_file(pod, c).await?;
        let env = self
            .env
            .container_env(pod, c, &sandbox.ips, sandbox.volumes)
            .await
            .map_err(StartError::Env)?;
        let hosts = self.hosts_file(pod, c, sandbox).await.map_err(|message| {
            StartError::Config(ConfigError {
                container: c.name.clone(),
                field: "hostAliases".into(),
                message,
            })
        })?;
        let pod_dir = pod_dir(&self.host.pods_dir, &PodUid::of(pod)).unwrap_or_default();
        let mounts = container_mounts(pod, c, sandbox.volumes, &pod_dir, &env, hosts.as_deref())
            .await
            .map_err(StartError::Config)?;
        let inputs = ContainerInputs {
            restart_count: start.restart_count,
            target_id,
            image_ref: &image_ref,
            termination_log: termination_log.as_deref(),
            mounts,
            env,
        };
        let cfg = container_config(pod, c, inputs, &self.host.security, self.host.resources)
            .map_err(StartError::Config)?;
        if let Some(dir) = pod_log_dir(
            &self.host.logs_root,
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.uid.as_deref().unwrap_or(""),
        ) && let Err(e) = tokio::fs::create_dir_all(dir.join(&c.name)).await
        {
            // The runtime refuses the container if it cannot log, and says why.
            tracing::warn!(container = %c.name, error = %e, "creating the container's log directory");
        }
        let kind = match start.kind {
            ContainerKind::Init => "init_container",
            ContainerKind::Regular => "container",
            ContainerKind::Ephemeral => "ephemeral_container",
        };
        self.metrics.started_containers.inc(&[kind]);
        let counted = |e: CriError| {
            let code = format!("{:?}", e.code);
            self.metrics.started_containers_errors.inc(&[kind, &code]);
            e
        };
        let id = self
            .cri
            .create_container(&sandbox.id, cfg, sandbox.config.clone())
            .await
            .map_err(|e| StartError::Create(counted(e)))?;
        self.events
            .event(about, NORMAL, "Created", "Container created");
        self.cri
            .start_container(&id)
            .await
            .map_err(|e| StartError::Run(counted(e)))?;
        self.events
            .event(about, NORMAL, "Started", "Container started");
        tracing::info!(container = %c.name, id = %id, restart_count = start.restart_count, "started container");
        self.link_log(pod, c, &id, start.restart_count).await;
        Ok(id)
    }

    /// The container's `/var/log/containers` link, as upstream makes it
    /// once the container started; a failure is logged, as upstream's.
    async fn link_log(&self, pod: &Pod, c: &Container, id: &str, restart_count: i32) {
        let (namespace, name, uid) = (
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.uid.as_deref().unwrap_or(""),
        );
        let Some(log) = pod_log_dir(&self.host.logs_root, namespace, name, uid)
            .map(|d| d.join(&c.name).join(format!("{restart_count}.log")))
        else {
            return;
        };
        let Some(link) =
            legacylogs::link_path(&self.host.legacy_logs_dir, name, namespace, &c.name, id)
        else {
            return;
        };
        let made = link.clone();
        if let Err(e) = kubelet_tasks::blocking(move || legacylogs::create(&made, &log)).await {
            tracing::error!(path = %link.display(), container = %c.name, error = %e, "Failed to create legacy symbolic link");
        }
    }

    /// Remove a container's `/var/log/containers` link (upstream's
    /// removeContainerLog).
    async fn unlink_log(&self, pod: &str, namespace: &str, container: &str, id: &str) {
        let Some(link) =
            legacylogs::link_path(&self.host.legacy_logs_dir, pod, namespace, container, id)
        else {
            return;
        };
        let gone = link.clone();
        if let Err(e) = kubelet_tasks::blocking(move || legacylogs::remove(&gone)).await {
            tracing::warn!(path = %link.display(), error = %e, "removing a container's log link");
        }
    }

    /// Links to containers that are gone (a crash between a removal and
    /// its unlink, or containers removed while rkubelet was down): removed
    /// unless the container still runs (its log may be mid-rotation), as
    /// upstream's container garbage collection does.
    async fn remove_dangling_log_links(&self) {
        let dir = self.host.legacy_logs_dir.clone();
        let found = match kubelet_tasks::blocking(move || legacylogs::dangling(&dir)).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "listing the container log links");
                return;
            }
        };
        for (link, id) in found {
            if let Some(id) = &id
                && let Ok(st) = self.cri.container_status(id).await
                && st.state != cri::ContainerState::ContainerExited as i32
            {
                continue;
            }
            let gone = link.clone();
            if let Err(e) = kubelet_tasks::blocking(move || legacylogs::remove(&gone)).await {
                tracing::warn!(path = %link.display(), error = %e, "removing a dangling container log link");
            }
        }
    }

    /// SyncPod's hook step: the container's postStart hook, bounded by
    /// runtimeRequestTimeout as upstream's runtime client bounds it. A failed
    /// hook kills the container it ran in (Err from the kill is the runtime's
    /// failure; Ok(Err) the hook's).
    async fn post_start_step(
        &self,
        pod: &Pod,
        c: &Container,
        id: &str,
        status: &PodStatus,
        grace: i64,
        about: &Involved,
    ) -> Result<Result<(), StartError>, CriError> {
        let Some(handler) = Hook::PostStart.handler(c) else {
            return Ok(Ok(()));
        };
        let ip = pod_ip(status);
        let timeout = self.cri.timeout();
        let Err(message) = run_hook(&self.cri, id, pod, c, &ip, handler, timeout).await else {
            return Ok(Ok(()));
        };
        self.events.event(
            about,
            WARNING,
            Hook::PostStart.failed_reason(),
            message.clone(),
        );
        let kill = Kill {
            container: &ContainerStatus {
                id: id.to_owned(),
                name: c.name.clone(),
                ..Default::default()
            },
            grace,
            message: format!("FailedPostStartHook: {message}"),
            after: Vec::new(),
        };
        self.kill_containers(None, status, vec![kill]).await?;
        Ok(Err(StartError::PostStartHook(message)))
    }

    /// The event and log line of a container that did not start, as
    /// upstream's.
    fn report_start_failure(&self, pod: &Pod, c: &Container, about: &Involved, error: &StartError) {
        tracing::warn!(container = %c.name, reason = error.reason(), message = %error, "container not started");
        let message = match error {
            StartError::CrashLoopBackOff { .. } => {
                let message = format!(
                    "Back-off restarting failed container {} in pod {}",
                    c.name,
                    kubelet_core::types::pod_full_name(pod)
                );
                self.events.event(about, WARNING, "BackOff", message);
                return;
            }
            // Its own event (FailedPostStartHook) said why.
            StartError::PostStartHook(_) => return,
            // Upstream's startContainer: `Error: <why>`; an image failure's
            // why is its reason (the image's own event says more).
            StartError::Image { reason, .. } => format!("Error: {reason}"),
            StartError::ImagePullBackOff { .. } => format!("Error: {}", error.reason()),
            other => format!("Error: {other}"),
        };
        self.events.event(about, WARNING, "Failed", message);
    }

    /// Create the host file a container's terminationMessagePath is mounted
    /// from: `<pods>/<uid>/containers/<name>/<suffix>`, writable by any user
    /// in the container (0666), as upstream. None when the pod's UID is not a
    /// safe path component.
    async fn termination_log_file(
        &self,
        pod: &Pod,
        c: &Container,
    ) -> Result<Option<PathBuf>, StartError> {
        let Some(pod_dir) = pod_dir(&self.host.pods_dir, &PodUid::of(pod)) else {
            return Ok(None);
        };
        let dir = pod_dir.join("containers").join(&c.name);
        let path = dir.join(format!("{:08x}", self.clock.now_nanos() as u32));
        let made = async {
            tokio::fs::create_dir_all(&dir).await?;
            tokio::fs::write(&path, b"").await?;
            use std::os::unix::fs::PermissionsExt;
            tokio::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).await
        };
        match made.await {
            Ok(()) => Ok(Some(path)),
            Err(source) => Err(StartError::TerminationLog {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// The back-off still to wait before restarting `c`, whose last run
    /// exited; None when it may start now (which counts as a restart).
    fn crash_backoff(&self, pod: &Pod, c: &Container, status: &PodStatus) -> Option<Duration> {
        let last = status
            .container(&c.name)
            .filter(|l| l.state == ContainerState::Exited)?;
        let key = flowcontrol::key(
            pod.metadata.uid.as_deref().unwrap_or(""),
            &c.name,
            &container_hash(c),
        );
        let now = self.clock.now_nanos();
        let mut backoff = self.crashloop.lock();
        backoff.gc(now);
        backoff
            .try_restart(&key, last.finished_at, now)
            .err()
            .map(|(b, _)| b)
    }

    /// SyncPod's image step (upstream's EnsureImageExists): pull as
    /// imagePullPolicy says, not while the image's last pull for this pod
    /// is in back-off; Ok is the image reference to create the container
    /// from.
    async fn ensure_image(
        &self,
        pod: &Pod,
        c: &Container,
        about: &Involved,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<String, StartError> {
        let image = c.image.as_deref().unwrap_or("");
        let failed = |reason, message, source| StartError::Image {
            reason,
            message,
            source,
        };
        if let Err(e) = parse_normalized(image) {
            // Upstream's applyDefaultImageTag failing.
            let message = format!("Failed to apply default image tag {image:?}: {e}");
            self.events
                .event(about, WARNING, "InspectFailed", message.clone());
            return Err(failed("InvalidImageName", message, None));
        }
        let policy = c
            .image_pull_policy
            .as_deref()
            .unwrap_or_else(|| pull_policy_default(image));
        let present = match self.cri.image_status(image).await {
            Ok(img) => img.map(|i| i.id),
            Err(e) => return Err(failed("ErrImageInspect", e.message.clone(), Some(e))),
        };
        if let Some(id) = present.filter(|_| policy != "Always")
            && !self.may_use(pod, image, &id).await?.must_pull()
        {
            self.events.event(
                about,
                NORMAL,
                "Pulled",
                format!(
                    "Container image {image:?} already present on machine and can be accessed by the pod"
                ),
            );
            return Ok(id);
        }
        if policy == "Never" {
            let message =
                format!("Container image {image:?} is not present with pull policy of Never");
            self.events
                .event(about, WARNING, "ErrImageNeverPull", message.clone());
            return Err(failed("ErrImageNeverPull", message, None));
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let in_backoff = self
            .pull_backoff
            .lock()
            .check(uid, image, self.clock.now_nanos());
        if let Err((left, message)) = in_backoff {
            self.events.event(
                about,
                NORMAL,
                "BackOff",
                format!("Back-off pulling image {image:?}"),
            );
            return Err(StartError::ImagePullBackOff { left, message });
        }
        self.pull(pod, image, about, sandbox_config)
            .await
            .inspect_err(|e| {
                let (reason, message) = (e.reason(), e.to_string());
                let mut backoff = self.pull_backoff.lock();
                backoff.failed(uid, image, self.clock.now_nanos(), reason, &message);
            })
    }

    /// Turn the pulls a previous run left unfinished into records of the
    /// images the runtime has (once the runtime is up).
    pub async fn adopt_left_pulls(&self) {
        match self.cri.list_images().await {
            Ok(images) => {
                let pulls = self.pulls.clone();
                let _ = blocking(move || {
                    pulls.adopt_left_intents(&images);
                    Ok(())
                })
                .await;
            }
            Err(e) => tracing::warn!(error = %e, "listing images for the image pull records"),
        }
    }

    /// Whether `pod` may use `image`, present as `image_ref`, without
    /// pulling it (upstream's MustAttemptImagePull): its pull secrets are
    /// read only when the records need them.
    async fn may_use(&self, pod: &Pod, image: &str, image_ref: &str) -> Result<Check, StartError> {
        let cached = match self.pulls.precheck(image, image_ref) {
            Ok(check) => return Ok(check),
            Err(cached) => cached,
        };
        let (keyring, _) = self.keyring(pod).await?;
        let mine: Vec<ImagePullSecret> = keyring
            .lookup(image)
            .iter()
            .map(ImagePullSecret::of)
            .collect();
        let (pulls, image, image_ref) =
            (self.pulls.clone(), image.to_owned(), image_ref.to_owned());
        Ok(
            blocking(move || Ok(pulls.check_pod(&image, &image_ref, &cached, &mine)))
                .await
                .unwrap_or(Check::Error),
        )
    }

    /// The keyring of the pod's imagePullSecrets, and the names of those
    /// that could not be read.
    async fn keyring(&self, pod: &Pod) -> Result<(Keyring, Vec<String>), StartError> {
        let (secrets, missing) = self.env.pull_secrets(pod).await;
        let keyring =
            Keyring::from_secrets(secrets.iter().map(|s| s.as_ref())).map_err(|message| {
                StartError::Image {
                    reason: "ErrImagePull",
                    message,
                    source: None,
                }
            })?;
        Ok((keyring, missing))
    }

    /// Pull `image` for a container (upstream's pullImage), with the
    /// credentials the pod's imagePullSecrets hold for its registry, each
    /// tried in turn (none: without), and its events: Pulling, then Pulled
    /// with the time it took and the image's size, or Failed with the
    /// runtime's error (and FailedToRetrieveImagePullSecret when some
    /// secrets could not be read). The pull is on record from its start,
    /// and its end records the credential that pulled the image.
    async fn pull(
        &self,
        pod: &Pod,
        image: &str,
        about: &Involved,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<String, StartError> {
        let (keyring, missing) = self.keyring(pod).await?;
        let creds: Vec<Option<Credential>> = match keyring.lookup(image) {
            creds if creds.is_empty() => vec![None],
            creds => creds.into_iter().map(Some).collect(),
        };
        tracing::info!(%image, credentials = creds.iter().flatten().count(), "pulling image");
        let (pulls, owned) = (self.pulls.clone(), image.to_owned());
        blocking(move || pulls.pull_started(&owned))
            .await
            .map_err(|e| StartError::Image {
                reason: "ErrImagePull",
                message: format!(
                    "Failed to record image pull intent for container image {image:?}: {e}"
                ),
                source: None,
            })?;
        let result = self.pull_with(image, &creds, about, sandbox_config).await;
        let (pulls, owned) = (self.pulls.clone(), image.to_owned());
        let pulled = result
            .as_ref()
            .ok()
            .map(|(r, used)| (r.clone(), used.cloned()));
        let _ = blocking(move || {
            match pulled {
                Some((image_ref, used)) => pulls.pulled(&owned, &image_ref, used.as_ref()),
                None => pulls.pull_failed(&owned),
            }
            Ok(())
        })
        .await;
        if result.is_err() && !missing.is_empty() {
            self.events.event(
                &Involved::pod(pod, None),
                WARNING,
                "FailedToRetrieveImagePullSecret",
                format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    missing.join(", ")
                ),
            );
        }
        result.map(|(image_ref, _)| image_ref)
    }

    /// The pull itself, with each of `creds` in turn: Ok is the image
    /// reference and the credential that pulled it.
    async fn pull_with<'c>(
        &self,
        image: &str,
        creds: &'c [Option<Credential>],
        about: &Involved,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<(String, Option<&'c Credential>), StartError> {
        self.events
            .event(about, NORMAL, "Pulling", format!("Pulling image {image:?}"));
        let asked = tokio::time::Instant::now();
        // The semaphore is never closed; a pull without a permit is not
        // possible, so waiting is the only outcome.
        let _permit = match &self.pull_slots {
            Some(slots) => slots.acquire().await.ok(),
            None => None,
        };
        let started = tokio::time::Instant::now();
        let mut errors = Vec::new();
        let mut pulled = None;
        for cred in creds {
            let auth = cred.as_ref().map(|c| cri::AuthConfig {
                username: c.username.clone(),
                password: c.password.clone(),
                ..Default::default()
            });
            match self
                .cri
                .pull_image(image, auth, Some(sandbox_config.clone()))
                .await
            {
                Ok(image_ref) => {
                    pulled = Some((image_ref, cred.as_ref()));
                    break;
                }
                Err(e) => errors.push(e),
            }
        }
        let Some((image_ref, used)) = pulled else {
            // Upstream's aggregate: one error as is, several in brackets.
            let texts: Vec<String> = errors.iter().map(CriError::grpc_text).collect();
            let message = match texts.as_slice() {
                [one] => one.clone(),
                many => format!("[{}]", many.join(", ")),
            };
            self.events.event(
                about,
                WARNING,
                "Failed",
                format!("Failed to pull image {image:?}: {message}"),
            );
            return Err(StartError::Image {
                reason: "ErrImagePull",
                message,
                source: errors.pop(),
            });
        };
        let ms = |d: Duration| format_go_duration(Duration::from_millis(d.as_millis() as u64));
        let (took, waited) = (ms(started.elapsed()), ms(asked.elapsed()));
        // The size as the runtime has it now (upstream reads it the same way).
        let size = match self.cri.image_status(&image_ref).await {
            Ok(Some(img)) => img.size,
            _ => 0,
        };
        self.events.event(
            about,
            NORMAL,
            "Pulled",
            format!(
                "Successfully pulled image {image:?} in {took} ({waited} including waiting). Image size: {size} bytes."
            ),
        );
        Ok((image_ref, used))
    }

    /// Stop containers of a pod (upstream's killContainersWithSyncResult):
    /// each runs its preStop hook (when the spec is known) and is stopped
    /// with what is left of its grace period, never less than the minimum;
    /// a container waits for those listed in its `after` first (sidecars
    /// stop after the main containers, in reverse order).
    async fn kill_containers(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        kills: Vec<Kill<'_>>,
    ) -> Result<(), CriError> {
        let done: HashMap<String, tokio::sync::watch::Sender<bool>> = kills
            .iter()
            .map(|k| {
                (
                    k.container.name.clone(),
                    tokio::sync::watch::channel(false).0,
                )
            })
            .collect();
        let stops = kills.iter().map(|k| {
            let waits: Vec<_> = k
                .after
                .iter()
                .filter_map(|n| done.get(n).map(|tx| tx.subscribe()))
                .collect();
            let finished = done.get(&k.container.name);
            async move {
                let stopped = self.kill_container(pod, status, k, waits).await;
                if let Some(tx) = finished {
                    tx.send_replace(true);
                }
                stopped
            }
        });
        join_all(stops).await.into_iter().collect()
    }

    async fn kill_container(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        kill: &Kill<'_>,
        mut waits: Vec<tokio::sync::watch::Receiver<bool>>,
    ) -> Result<(), CriError> {
        let c = kill.container;
        let started = tokio::time::Instant::now();
        let grace = Duration::from_secs(kill.grace.max(0) as u64);
        let about = Involved::pod_ref(
            &status.namespace,
            &status.name,
            status.uid.as_str(),
            Some(&c.name),
        );
        self.events
            .event(&about, NORMAL, "Killing", kill.message.clone());
        if let Some(pod) = pod
            && let Some(spec) = container_spec(pod, &c.name)
            && let Some(handler) = Hook::PreStop.handler(spec)
        {
            let ip = pod_ip(status);
            if let Err(message) = run_hook(&self.cri, &c.id, pod, spec, &ip, handler, grace).await {
                tracing::warn!(container = %c.name, %message, "preStop hook failed");
                self.events
                    .event(&about, WARNING, Hook::PreStop.failed_reason(), message);
            }
        }
        let turn = join_all(waits.iter_mut().map(|rx| async move {
            // The guard the wait returns is dropped at once.
            let _ = rx.wait_for(|done| *done).await;
        }));
        let left = grace.saturating_sub(started.elapsed());
        if tokio::time::timeout(left, turn).await.is_err() {
            tracing::info!(container = %c.name, "grace period over before the containers to stop first had stopped");
        }
        // What is left of the grace period in whole seconds, rounded up: the
        // few milliseconds spent getting here must not cost a second.
        let left = grace
            .saturating_sub(started.elapsed())
            .as_millis()
            .div_ceil(1000) as i64;
        ok_if_not_found(
            self.cri
                .stop_container(&c.id, left.max(MIN_GRACE_PERIOD))
                .await,
        )
    }

    /// Stop every running container (preStop hooks first, main containers in
    /// parallel, then sidecars in reverse order, all within `grace` seconds),
    /// then every ready sandbox.
    pub async fn kill_pod(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        grace: i64,
    ) -> Result<(), CriError> {
        let inits = pod.map(init_containers).unwrap_or(&[]);
        let sidecar_index = |name: &str| inits.iter().position(|c| c.name == name && is_sidecar(c));
        let running: Vec<&ContainerStatus> = status.running_containers().collect();
        let kills = running
            .iter()
            .map(|c| {
                // A sidecar waits for every non-sidecar and for later sidecars.
                let after = match sidecar_index(&c.name) {
                    None => Vec::new(),
                    Some(i) => running
                        .iter()
                        .filter(|o| sidecar_index(&o.name).is_none_or(|j| j > i))
                        .map(|o| o.name.clone())
                        .collect(),
                };
                Kill {
                    container: c,
                    grace,
                    message: format!("Stopping container {}", c.name),
                    after,
                }
            })
            .collect();
        self.kill_containers(pod, status, kills).await?;
        for sb in status
            .sandboxes
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
        {
            ok_if_not_found(self.cri.stop_pod_sandbox(&sb.id).await)?;
        }
        Ok(())
    }

    /// Container garbage collection: remove exited containers beyond the
    /// newest one per container of each pod, with their log files (only
    /// files under podLogsDir). The pods in `unused` (pods that ran to their
    /// end, under disk pressure) lose every container that is not running,
    /// and then their sandboxes. Returns how many containers were removed.
    pub async fn garbage_collect(&self, unused: &HashSet<PodUid>) -> Result<usize, CriError> {
        let containers = self.cri.list_containers(None).await?;
        let candidates: Vec<GcCandidate> = containers
            .iter()
            .filter_map(|c| {
                Some(GcCandidate {
                    id: c.id.clone(),
                    pod_uid: c.labels.get(keys::POD_UID)?.clone(),
                    name: c.metadata.as_ref()?.name.clone(),
                    state: container_state(c.state),
                    created_at: c.created_at,
                })
            })
            .collect();
        let is_unused = |uid: &str| unused.contains(&PodUid::from(uid));
        let mut removed = HashSet::new();
        for id in evictable(&candidates, 1, is_unused) {
            let status = self.cri.container_status(&id).await.ok();
            if let Err(e) = ok_if_not_found(self.cri.remove_container(&id).await) {
                tracing::warn!(container = %id, error = %e, "garbage collection: removing a dead container");
                continue;
            }
            if let Some(st) = status {
                if self.owns_log(&st.log_path) {
                    let path = std::path::PathBuf::from(&st.log_path);
                    if let Err(e) =
                        kubelet_tasks::blocking(move || crate::logs::remove_log_files(&path)).await
                    {
                        tracing::warn!(path = %st.log_path, error = %e, "garbage collection: removing a log file");
                    }
                }
                let label = |k: &str| st.labels.get(k).map(String::as_str).unwrap_or("");
                self.unlink_log(
                    label(keys::POD_NAME),
                    label(keys::POD_NAMESPACE),
                    label(keys::CONTAINER_NAME),
                    &id,
                )
                .await;
            }
            removed.insert(id);
        }
        self.remove_dangling_log_links().await;
        if !unused.is_empty() {
            let held: Vec<&str> = containers
                .iter()
                .filter(|c| !removed.contains(&c.id))
                .map(|c| c.pod_sandbox_id.as_str())
                .collect();
            let sandboxes: Vec<SandboxCandidate> = self
                .cri
                .list_pod_sandbox(None)
                .await?
                .into_iter()
                .filter_map(|sb| {
                    Some(SandboxCandidate {
                        pod_uid: sb.metadata?.uid,
                        ready: sb.state == cri::PodSandboxState::SandboxReady as i32,
                        id: sb.id,
                    })
                })
                .collect();
            for id in evictable_sandboxes(&sandboxes, &held, is_unused) {
                if let Err(e) = ok_if_not_found(self.cri.remove_pod_sandbox(&id).await) {
                    tracing::warn!(sandbox = %id, error = %e, "garbage collection: removing a sandbox");
                }
            }
        }
        Ok(removed.len())
    }

    /// Whether `path` is a log file the kubelet placed: absolute, under
    /// podLogsDir, no `..` (a log path from the runtime never escapes).
    fn owns_log(&self, path: &str) -> bool {
        is_under(std::path::Path::new(path), &self.host.logs_root)
    }

    /// With the pod's ready sandbox in use, remove its other sandboxes that
    /// are not ready and hold no container (what an interrupted
    /// RunPodSandbox leaves), as upstream's sandbox garbage collection does
    /// for a live pod. Sandboxes that still hold dead containers stay: those
    /// carry the last states and restart counts, and go with the container
    /// garbage collection.
    async fn remove_dead_sandboxes(&self, status: &PodStatus, ready: &str) -> Result<(), CriError> {
        for sb in status
            .sandboxes
            .iter()
            .filter(|sb| sb.id != ready && sb.state != SandboxState::Ready)
        {
            let held = self
                .cri
                .list_containers(Some(cri::ContainerFilter {
                    pod_sandbox_id: sb.id.clone(),
                    ..Default::default()
                }))
                .await?;
            if held.is_empty() {
                tracing::info!(sandbox = %sb.id, "removing a dead sandbox");
                ok_if_not_found(self.cri.remove_pod_sandbox(&sb.id).await)?;
            }
        }
        Ok(())
    }

    /// Remove every container and sandbox of a stopped pod, and its log
    /// directory. Safe to repeat.
    pub async fn remove_pod(&self, pod: &PodRef, status: &PodStatus) -> Result<(), CriError> {
        for c in &status.containers {
            ok_if_not_found(self.cri.remove_container(&c.id).await)?;
            self.unlink_log(&pod.name, &pod.namespace, &c.name, &c.id)
                .await;
        }
        for sb in &status.sandboxes {
            ok_if_not_found(self.cri.stop_pod_sandbox(&sb.id).await)?;
            ok_if_not_found(self.cri.remove_pod_sandbox(&sb.id).await)?;
        }
        if let Some(dir) = pod_log_dir(
            &self.host.logs_root,
            &pod.namespace,
            &pod.name,
            pod.uid.as_str(),
        ) {
            match tokio::fs::remove_dir_all(&dir).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "removing pod log directory")
                }
            }
        }
        Ok(())
    }
}

/// One container to stop, with its grace period (seconds), the Killing
/// event's message, and the names of containers that must stop first.
struct Kill<'a> {
    container: &'a ContainerStatus,
    grace: i64,
    message: String,
    after: Vec<String>,
}

/// The spec of a pod's container (regular or init) by name.
/// Upstream's maxResolvConfLength: the most of resolvConf that is read.
const MAX_RESOLV_CONF: u64 = 10 << 20;

/// The node's resolvConf; a file of [`MAX_RESOLV_CONF`] or more is an
/// error, as upstream's ReadAtMost makes it.
async fn read_resolv_conf(path: &str) -> std::io::Result<String> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    tokio::fs::File::open(path)
        .await?
        .take(MAX_RESOLV_CONF)
        .read_to_end(&mut buf)
        .await?;
    if buf.len() as u64 >= MAX_RESOLV_CONF {
        return Err(std::io::Error::other("the read limit is reached"));
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// A sandbox's IPs, as its status gives them.
fn sandbox_ips(st: &cri::PodSandboxStatus) -> Vec<String> {
    st.network
        .as_ref()
        .map(|n| {
            std::iter::once(n.ip.clone())
                .chain(n.additional_ips.iter().map(|i| i.ip.clone()))
                .filter(|ip| !ip.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

fn container_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    regular_containers(pod)
        .iter()
        .chain(init_containers(pod))
        .find(|c| c.name == name)
}

/// Where httpGet hooks connect by default: the pod's IP, or loopback for a
/// pod in the node's network.
fn pod_ip(status: &PodStatus) -> String {
    status
        .ips()
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// Upstream's MaxContainerTerminationMessageLength.
const MAX_TERMINATION_MESSAGE: usize = 4096;
/// Upstream's MaxContainerTerminationMessageLogLength and ...LogLines.
const MAX_TERMINATION_LOG_BYTES: usize = 2048;
const MAX_TERMINATION_LOG_LINES: u64 = 80;

/// At most `max` bytes of a regular file (never through a symlink).
fn read_at_most(path: &std::path::Path, max: usize) -> Option<String> {
    use std::io::Read;
    if !std::fs::symlink_metadata(path).ok()?.is_file() {
        return None;
    }
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(max as u64)
        .read_to_end(&mut buf)
        .ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// An exited container's message: the runtime's, then what the container
/// left (its termination message), joined by `: ` as upstream does.
fn join_messages(runtime: &str, termination: &str) -> String {
    match (runtime, termination) {
        (r, "") => r.to_owned(),
        ("", t) => t.to_owned(),
        (r, t) => format!("{r}: {t}"),
    }
}

/// The last lines of a CRI log file, as FallbackToLogsOnError reports them
/// (upstream's readLastStringFromContainerLogs: the output `kubectl logs
/// --tail` would give, so a last line the container left without `\n`, a
/// `P` entry at the end of the log, is kept as written).
fn log_tail(path: &str) -> std::io::Result<String> {
    use kubelet_core::crilog::{Assembler, LineWriter, LogOptions, parse_line, tail_start};
    use std::io::{BufRead, Seek, SeekFrom};
    if !std::fs::symlink_metadata(path)?.is_file() {
        return Ok(String::new());
    }
    let mut f = std::fs::File::open(path)?;
    let start = tail_start(&mut f, MAX_TERMINATION_LOG_LINES)?;
    f.seek(SeekFrom::Start(start))?;
    let mut assembler = Assembler::default();
    let mut writer = LineWriter::new(&LogOptions::default());
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).split(b'\n') {
        if let Ok(entry) = parse_line(&line?)
            && let Some(l) = assembler.push(&entry)
        {
            writer.write(&l, &mut out);
        }
    }
    for l in assembler.flush() {
        writer.write(&l, &mut out);
    }
    let cut = out.len().saturating_sub(MAX_TERMINATION_LOG_BYTES);
    Ok(String::from_utf8_lossy(&out[cut..]).into_owned())
}

/// The grace period for a kill: an explicit one (shortened deletion), else
/// the pod's terminationGracePeriodSeconds, else the one recorded on its
/// containers; never below upstream's minimum of 2 s.
pub fn grace_period(pod: Option<&Pod>, status: &PodStatus, explicit: Option<i64>) -> i64 {
    explicit
        .or_else(|| {
            pod.and_then(|p| p.spec.as_ref())
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .or_else(|| status.recorded_grace_period())
        .unwrap_or(30)
        .max(MIN_GRACE_PERIOD)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_host(dir: &std::path::Path) -> Host {
        Host {
            logs_root: dir.join("logs"),
            legacy_logs_dir: dir.join("containers"),
            pods_dir: dir.join("pods"),
            dns: DnsSettings::default(),
            resolv_conf: String::new(),
            resources: NodeResources {
                memory: 1 << 30,
                cfs_period: Some(100_000),
            },
            security: SecurityDefaults::default(),
            runtime_classes: RuntimeClasses::default(),
            image_pull_limit: None,
            cgroups: ContainerManager::default(),
        }
    }

    fn test_pulls(dir: &std::path::Path) -> Arc<PullManager> {
        Arc::new(PullManager::open(
            dir,
            Default::default(),
            KubeletMetrics::new("n"),
            Clock::System,
        ))
    }

    fn test_env() -> PodEnv {
        let allocatable = crate::nodestatus::NodeAllocatable::new(
            Default::default(),
            tokio::sync::watch::channel(None).1,
        );
        PodEnv::new(None, None, allocatable, vec!["192.0.2.10".into()])
    }

    #[test]
    fn default_pull_policy() {
        for (image, want) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("busybox:1", "IfNotPresent"),
            ("localhost:5000/busybox", "Always"),
            ("localhost:5000/busybox:1", "IfNotPresent"),
            ("busybox@sha256:abcd", "IfNotPresent"),
        ] {
            assert_eq!(pull_policy_default(image), want, "{image}");
        }
    }

    #[test]
    fn grace_periods() {
        let empty = PodStatus::default();
        assert_eq!(grace_period(None, &empty, None), 30);
        assert_eq!(grace_period(None, &empty, Some(0)), MIN_GRACE_PERIOD);
        assert_eq!(grace_period(None, &empty, Some(10)), 10);
    }

    #[test]
    fn termination_message_from_the_log_tail() {
        let ts = "2026-12-01T09:00:00.000000001Z";
        let lines =
            |n: usize| -> String { (0..n).map(|i| format!("{ts} stdout F line{i}\n")).collect() };
        let long = "x".repeat(3000);
        let cases: Vec<(&str, String, String)> = vec![
            (
                "`echo -n DONE`: one partial entry at the end",
                format!("{ts} stdout P DONE\n"),
                "DONE".into(),
            ),
            (
                "whole lines keep their newline",
                format!("{ts} stdout F a\n{ts} stderr F b\n"),
                "a\nb\n".into(),
            ),
            (
                "partials joined, the unfinished last line kept",
                format!("{ts} stdout P DO\n{ts} stdout F NE\n{ts} stdout P ba\n{ts} stdout P d\n"),
                "DONE\nbad".into(),
            ),
            (
                "the last 80 lines",
                lines(100),
                (20..100).map(|i| format!("line{i}\n")).collect(),
            ),
            (
                "at most 2048 bytes, from the end",
                format!("{ts} stdout F {long}\n{ts} stdout P end\n"),
                format!("{}\nend", &long[..2048 - 4]),
            ),
            ("an empty log", String::new(), String::new()),
        ];
        let dir = tempfile::tempdir().unwrap();
        for (name, log, want) in cases {
            let path = dir.path().join("0.log");
            std::fs::write(&path, log).unwrap();
            let got = log_tail(path.to_str().unwrap()).unwrap();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn runtime_and_termination_messages_join() {
        for (runtime, termination, want) in [
            ("", "", ""),
            ("", "DONE", "DONE"),
            ("OOM", "", "OOM"),
            ("OOM", "DONE", "OOM: DONE"),
        ] {
            assert_eq!(join_messages(runtime, termination), want);
        }
    }

    #[tokio::test]
    async fn garbage_collection_keeps_the_last_dead_instance_and_its_log() {
        use kubelet_cri::fake::FakeRuntime;
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        fake.add_image("img:1");
        let cri =
            CriClient::connect_lazy(&fake.endpoint(), std::time::Duration::from_secs(5)).unwrap();
        let logs = dir.path().join("logs");
        let rm = RuntimeManager::new(
            cri.clone(),
            test_host(dir.path()),
            test_env(),
            test_pulls(dir.path()),
            Recorder::log_only("n".into()),
            KubeletMetrics::new("n"),
            Clock::System,
        );
        let labels = uid_filter(&PodUid::from("u1"));
        let sandbox = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: logs.display().to_string(),
            labels: labels.clone(),
            ..Default::default()
        };
        let sb = cri
            .run_pod_sandbox(sandbox.clone(), String::new())
            .await
            .unwrap();
        let mut ids = Vec::new();
        for attempt in 0..3 {
            let cfg = cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: "a".into(),
                    attempt,
                }),
                image: Some(cri::ImageSpec {
                    image: "img:1".into(),
                    ..Default::default()
                }),
                labels: labels.clone(),
                log_path: format!("a/{attempt}.log"),
                ..Default::default()
            };
            let id = cri
                .create_container(&sb, cfg, sandbox.clone())
                .await
                .unwrap();
            cri.start_container(&id).await.unwrap();
            assert!(fake.exit_container(&id, 1));
            std::fs::create_dir_all(logs.join("a")).unwrap();
            std::fs::write(logs.join(format!("a/{attempt}.log")), "x").unwrap();
            ids.push(id);
        }
        let live = HashSet::new();
        assert_eq!(rm.garbage_collect(&live).await.unwrap(), 2);
        let left: Vec<String> = fake.containers().into_iter().map(|c| c.id).collect();
        assert_eq!(left, [ids[2].clone()]);
        assert!(!logs.join("a/0.log").exists() && !logs.join("a/1.log").exists());
        assert!(
            logs.join("a/2.log").exists(),
            "the kept instance keeps its log"
        );
        assert_eq!(
            rm.garbage_collect(&live).await.unwrap(),
            0,
            "nothing more to collect"
        );
        // Under disk pressure the pod, done, loses its last container; its
        // sandbox goes once it is not ready.
        let done = HashSet::from([PodUid::from("u1")]);
        assert_eq!(rm.garbage_collect(&done).await.unwrap(), 1);
        assert!(fake.containers().is_empty() && !logs.join("a/2.log").exists());
        assert_eq!(fake.sandboxes().len(), 1, "a ready sandbox stays");
        cri.stop_pod_sandbox(&sb).await.unwrap();
        assert_eq!(rm.garbage_collect(&done).await.unwrap(), 0);
        assert!(fake.sandboxes().is_empty());
    }

    /// A started container gets its `/var/log/containers` link to its log
    /// file; the link goes with the container, and one left dangling by a
    /// container that is gone is removed by garbage collection.
    #[tokio::test]
    async fn log_links_come_and_go_with_their_containers() {
        use kubelet_cri::fake::FakeRuntime;
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        fake.add_image("img:1");
        let cri =
            CriClient::connect_lazy(&fake.endpoint(), std::time::Duration::from_secs(5)).unwrap();
        let rm = RuntimeManager::new(
            cri,
            test_host(dir.path()),
            test_env(),
            test_pulls(dir.path()),
            Recorder::log_only("n".into()),
            KubeletMetrics::new("n"),
            Clock::System,
        );
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "img:1", "imagePullPolicy": "IfNotPresent"}]}
        }))
        .unwrap();
        let synced = rm
            .sync_pod(
                &pod,
                &PodStatus::default(),
                &kubelet_core::runtime::NoProbes,
                &Default::default(),
                None,
            )
            .await
            .unwrap();
        assert_eq!(synced.started, ["c"]);
        let id = fake.containers()[0].id.clone();
        let links = dir.path().join("containers");
        let link = links.join(format!("p_default_c-{id}.log"));
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            dir.path().join("logs/default_p_u1/c/0.log")
        );
        let pod_ref = PodRef {
            uid: PodUid::from("u1"),
            name: "p".into(),
            namespace: "default".into(),
        };
        let status = rm.get_pod_status(&pod_ref).await.unwrap();
        rm.kill_pod(Some(&pod), &status, 0).await.unwrap();
        rm.remove_pod(&pod_ref, &status).await.unwrap();
        assert!(
            std::fs::symlink_metadata(&link).is_err(),
            "removed with the container"
        );

        // Left by a container removed while rkubelet was down.
        let stale = links.join("q_default_c-0123456789ab.log");
        std::os::unix::fs::symlink(dir.path().join("logs/gone/c/0.log"), &stale).unwrap();
        rm.garbage_collect(&HashSet::new()).await.unwrap();
        assert!(
            std::fs::symlink_metadata(&stale).is_err(),
            "a dangling link is collected"
        );
    }

    /// Failure events carry the runtime's reason, as upstream's (`Error: <message>`,
    /// `Failed to create pod sandbox: <error>`), not just a reason word.
    #[tokio::test]
    async fn failure_events_say_why() {
        use kubelet_cri::fake::FakeRuntime;
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        fake.add_image("img:1");
        let cri =
            CriClient::connect_lazy(&fake.endpoint(), std::time::Duration::from_secs(5)).unwrap();
        let (events, mut rx) = Recorder::with_queue("n".into(), Clock::System);
        let rm = RuntimeManager::new(
            cri,
            test_host(dir.path()),
            test_env(),
            test_pulls(dir.path()),
            events,
            KubeletMetrics::new("n"),
            Clock::System,
        );
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "img:1", "imagePullPolicy": "IfNotPresent"}]}
        }))
        .unwrap();
        // The messages of the events with this reason recorded so far.
        let mut messages = |reason: &str| {
            let mut seen = Vec::new();
            while let Ok(e) = rx.try_recv() {
                if e.reason.as_deref() == Some(reason) {
                    seen.push(e.message.unwrap_or_default());
                }
            }
            seen
        };

        fake.inject_error("RunPodSandbox", tonic::Code::Unknown, 1);
        let synced = rm
            .sync_pod(
                &pod,
                &PodStatus::default(),
                &kubelet_core::runtime::NoProbes,
                &Default::default(),
                None,
            )
            .await;
        assert!(synced.is_err());
        assert_eq!(
            messages("FailedCreatePodSandBox"),
            [
                "Failed to create pod sandbox: rpc error: code = Unknown desc = injected error for RunPodSandbox"
            ]
        );

        fake.inject_error("CreateContainer", tonic::Code::Unknown, 1);
        let synced = rm
            .sync_pod(
                &pod,
                &PodStatus::default(),
                &kubelet_core::runtime::NoProbes,
                &Default::default(),
                None,
            )
            .await
            .unwrap();
        assert!(synced.started.is_empty());
        assert_eq!(
            messages("Failed"),
            ["Error: injected error for CreateContainer"]
        );

        // A user namespace the runtime cannot give is refused by name.
        let mut userns = pod.clone();
        userns.metadata.uid = Some("u2".into());
        userns.spec.as_mut().unwrap().host_users = Some(false);
        let synced = rm
            .sync_pod(
                &userns,
                &PodStatus::default(),
                &kubelet_core::runtime::NoProbes,
                &Default::default(),
                None,
            )
            .await;
        assert!(synced.is_err());
        assert_eq!(
            messages("FailedCreatePodSandBox"),
            [
                "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
            ]
        );

        // An image name the reference grammar refuses is not pulled.
        let mut bad_image = pod.clone();
        bad_image.metadata.uid = Some("u3".into());
        bad_image.spec.as_mut().unwrap().containers[0].image = Some("Img:1".into());
        let synced = rm
            .sync_pod(
                &bad_image,
                &PodStatus::default(),
                &kubelet_core::runtime::NoProbes,
                &Default::default(),
                None,
            )
            .await
            .unwrap();
        assert_eq!(synced.failures[0].error.reason(), "InvalidImageName");
        assert_eq!(
            messages("InspectFailed"),
            [
                "Failed to apply default image tag \"Img:1\": invalid reference format: repository name (library/Img) must be lowercase"
            ]
        );
    }
}
