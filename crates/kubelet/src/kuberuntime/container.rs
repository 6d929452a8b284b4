//! Containers (upstream's kuberuntime_container.go): start one with its
//! checks, hosts file, log link and postStart hook; stop them with
//! SIGTERM→SIGKILL within their grace; resize them in place.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::actions::{PodActions, StartContainer, container_hash};
use kubelet_core::dns::{managed_hosts, node_hosts};
use kubelet_core::duration::format_go_duration;
use kubelet_core::flowcontrol;
use kubelet_core::podspec::{ContainerKind, init_containers, is_sidecar, regular_containers};
use kubelet_core::runtime::{ContainerState, ContainerStatus, PodStatus, SandboxState};
use kubelet_core::security::{verify_run_as_non_root, wants_non_root};
use kubelet_core::types::PodUid;
use kubelet_cri::client::CriError;

use super::config::{ContainerInputs, container_config, host_network, pod_log_dir};
use super::hooks::{Hook, run_hook};
use super::mounts::{
    ETC_HOSTS, RuntimeMounts, container_devices, container_mounts, mounts_etc_hosts,
};
use super::status::pod_ip;
use super::{MIN_GRACE_PERIOD, RuntimeManager, Sandbox, SyncResult, ok_if_not_found};
use crate::devicemanager::RunOptions;
use crate::error::{ConfigError, ContainerResizeError, ResizeError, StartError};
use crate::events::{Involved, NORMAL, WARNING};
use crate::volumes::pod_dir;

impl RuntimeManager {
    /// Whether the pod's runtime handler (its RuntimeClass's) supports
    /// recursive read-only mounts, as the runtime's Status lists it
    /// (upstream's runtimeClassSupportsRecursiveReadOnlyMounts: a class that
    /// cannot be looked up does not).
    pub fn recursive_read_only_supported(&self, pod: &Pod) -> bool {
        let class = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref());
        self.host
            .runtime_classes
            .handler(class)
            .is_ok_and(|handler| {
                kubelet_core::runtime::supports_recursive_read_only(
                    &self.host.runtime_state.handlers(),
                    &handler,
                )
            })
    }

    /// The user namespace of `pod`'s sandbox and containers (the userns
    /// manager's, for its RuntimeClass's handler; its file read or
    /// written off the runtime's threads).
    pub(super) async fn user_namespace(
        &self,
        pod: &Pod,
    ) -> Result<kubelet_cri::v1::UserNamespace, crate::userns::UsernsSetupError> {
        let class = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref());
        // A class that cannot be looked up stops the sandbox before this.
        let handler = self.host.runtime_classes.handler(class).unwrap_or_default();
        let (userns, handlers, pod) = (
            self.host.userns.clone(),
            self.host.runtime_state.handlers(),
            pod.clone(),
        );
        kubelet_tasks::off_thread(move || userns.mappings(&pod, &handler, &handlers))
            .await
            .unwrap_or(Err(crate::userns::UsernsSetupError::NotStarted))
    }

    /// SyncPod's resize step (doPodResizeAction, after the pod cgroup took
    /// the allocation): each running container to update is given the
    /// Linux resources of its allocation, shrinking ones first. The first
    /// failure stops the step and is kept; the pod is synced again.
    pub(super) async fn resize_step(
        &self,
        pod: &Pod,
        actions: &PodActions,
        result: &mut SyncResult,
    ) {
        for update in &actions.containers_to_update {
            let spec = match update.kind {
                ContainerKind::Init => init_containers(pod).get(update.index),
                _ => regular_containers(pod).get(update.index),
            };
            let Some(c) = spec else {
                continue;
            };
            let applied = match super::config::linux_resources(pod, c, self.host.resources) {
                Ok(linux) => self
                    .cri
                    .update_container_resources(&update.id, linux)
                    .await
                    .map_err(ContainerResizeError::Runtime),
                Err(e) => Err(ContainerResizeError::Config(e)),
            };
            match applied {
                Ok(()) => {
                    tracing::info!(container = %c.name, "container resources updated in place");
                    result.resized.push(c.name.clone());
                }
                Err(source) => {
                    let e = ResizeError::Container {
                        container: c.name.clone(),
                        source,
                    };
                    tracing::warn!(error = %e, "resize");
                    result.resize_error = Some(e);
                    return;
                }
            }
        }
    }

    /// SyncPod's first step: stop the pod or the containers compute-pod-actions
    /// names, and remove those created but never started.
    pub(super) async fn stop_step(
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

    /// What the container's device plugins give it.
    /// What the container gets of its devices: the CDI devices of its
    /// ResourceClaims first, then its device plugins' options (upstream's
    /// GetResources).
    async fn device_options(&self, pod: &Pod, c: &Container) -> Result<RunOptions, StartError> {
        let claimed = self.host.dra.cdi_devices(pod, c).map_err(|message| {
            StartError::Config(ConfigError {
                container: c.name.clone(),
                field: "resources.claims".into(),
                message,
            })
        })?;
        let mut options = self
            .host
            .devices
            .run_options(pod, c)
            .await
            .map_err(StartError::Devices)?;
        options.cdi_devices.splice(0..0, claimed);
        Ok(options)
    }

    /// SyncPod's steps for one container: its crash-loop back-off, its
    /// image, its config (with its volumes' mounts, the termination message
    /// file and the log directory), then create and start. Ok is the new
    /// container's ID.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_step(
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
        let target_id = target_id(c, target, status)?;
        let image_ref = self
            .ensure_image(
                pod,
                c.image.as_deref().unwrap_or(""),
                c.image_pull_policy.as_deref(),
                about,
                &sandbox.config,
            )
            .await?;
        // The image volumes it mounts, pulled before it is made (upstream
        // pulls them before any container starts and fails each container
        // that mounts one it could not pull).
        let images = self
            .image_volumes(pod, c, sandbox.volumes, &sandbox.config)
            .await?;
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
        let runtime = RuntimeMounts {
            recursive_read_only: self.recursive_read_only_supported(pod),
            images,
        };
        let mounts = container_mounts(
            pod,
            c,
            sandbox.volumes,
            &pod_dir,
            &env,
            hosts.as_deref(),
            &runtime,
        )
        .await
        .map_err(StartError::Config)?;
        let devices = container_devices(c, sandbox.volumes).map_err(StartError::Config)?;
        let userns = self.user_namespace(pod).await.map_err(|e| {
            StartError::Config(ConfigError {
                container: c.name.clone(),
                field: "spec.hostUsers".into(),
                message: e.to_string(),
            })
        })?;
        let inputs = ContainerInputs {
            restart_count: start.restart_count,
            target_id,
            image_ref: &image_ref,
            termination_log: termination_log.as_deref(),
            mounts,
            devices,
            userns,
            env,
            volume_groups: volume_groups(sandbox.volumes),
            stop_signals: self.host.stop_signals,
            plugin: self.device_options(pod, c).await?,
            cpuset: self.cpuset(pod, c)?,
            cpuset_mems: self.cpuset_mems(pod, c)?,
        };
        let cpuset = inputs.cpuset.clone();
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
        self.host.cpus.created(&id, cpuset.as_deref());
        self.host.memory.created(pod, c);
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

    /// The cpuset the CPU manager gives `c`; CPUs it cannot give fail the
    /// start (CreateContainerConfigError, the pod's other containers go on).
    fn cpuset(&self, pod: &Pod, c: &Container) -> Result<Option<String>, StartError> {
        self.host.cpus.cpuset_for(pod, c).map_err(|e| {
            StartError::Config(ConfigError {
                container: c.name.clone(),
                field: "resources.requests.cpu".into(),
                message: e.to_string(),
            })
        })
    }

    /// The NUMA nodes the memory manager puts `c`'s memory on; memory it
    /// cannot give fails the start (CreateContainerConfigError, the pod's
    /// other containers go on).
    fn cpuset_mems(&self, pod: &Pod, c: &Container) -> Result<Option<String>, StartError> {
        self.host.memory.cpuset_mems_for(pod, c).map_err(|message| {
            StartError::Config(ConfigError {
                container: c.name.clone(),
                field: "resources.requests.memory".into(),
                message,
            })
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
                message: message.to_string(),
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
            super::legacylogs::link_path(&self.host.legacy_logs_dir, name, namespace, &c.name, id)
        else {
            return;
        };
        let made = link.clone();
        if let Err(e) =
            kubelet_tasks::blocking(move || super::legacylogs::create(&made, &log)).await
        {
            tracing::error!(path = %link.display(), container = %c.name, error = %e, "Failed to create legacy symbolic link");
        }
    }

    /// Remove a container's `/var/log/containers` link (upstream's
    /// removeContainerLog).
    pub(super) async fn unlink_log(&self, pod: &str, namespace: &str, container: &str, id: &str) {
        let Some(link) =
            super::legacylogs::link_path(&self.host.legacy_logs_dir, pod, namespace, container, id)
        else {
            return;
        };
        let gone = link.clone();
        if let Err(e) = kubelet_tasks::blocking(move || super::legacylogs::remove(&gone)).await {
            tracing::warn!(path = %link.display(), error = %e, "removing a container's log link");
        }
    }

    /// SyncPod's hook step: the container's postStart hook, bounded by
    /// runtimeRequestTimeout as upstream's runtime client bounds it. A failed
    /// hook kills the container it ran in (Err from the kill is the runtime's
    /// failure; Ok(Err) the hook's).
    pub(super) async fn post_start_step(
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
    pub(super) fn report_start_failure(
        &self,
        pod: &Pod,
        c: &Container,
        about: &Involved,
        error: &StartError,
    ) {
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
}

/// One container to stop, with its grace period (seconds), the Killing
/// event's message, and the names of containers that must stop first.
struct Kill<'a> {
    container: &'a ContainerStatus,
    grace: i64,
    message: String,
    after: Vec<String>,
}

fn container_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    regular_containers(pod)
        .iter()
        .chain(init_containers(pod))
        .find(|c| c.name == name)
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

/// The running container an ephemeral container joins the process
/// namespace of (upstream's getTargetID): its `target` must be running.
fn target_id<'s>(
    c: &Container,
    target: Option<&str>,
    status: &'s PodStatus,
) -> Result<Option<&'s str>, StartError> {
    let Some(t) = target.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    status
        .container(t)
        .filter(|s| s.state == ContainerState::Running)
        .map(|s| Some(s.id.as_str()))
        .ok_or_else(|| {
            StartError::Config(ConfigError {
                container: c.name.clone(),
                field: "targetContainerName".into(),
                message: format!("unable to find target container {t}"),
            })
        })
}

/// The groups the pod's volumes ask its containers to be in (PVs' gid
/// annotation), once each.
fn volume_groups(volumes: &crate::volumes::PodVolumes) -> Vec<i64> {
    let mut groups: Vec<i64> = volumes.values().filter_map(|v| v.gid).collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}
