//! The pod sandbox (upstream's kuberuntime_sandbox.go): its config with the
//! resolver and hostname, made when missing or changed.

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::actions::PodActions;
use kubelet_core::dns::{
    HostnameError, ResolvConf, hostname_and_domain, kernel_hostname, parse_resolv_conf, pod_dns,
};
use kubelet_core::runtime::PodStatus;
use kubelet_cri::client::CriError;
use kubelet_cri::v1 as cri;

use super::config::{SandboxInputs, host_network, sandbox_config};
use super::status::sandbox_ips;
use super::{PodName, RuntimeManager, Sandbox};
use crate::error::{SandboxConfigError, SyncError};
use crate::events::{Involved, WARNING};
use crate::volumes::PodVolumes;

impl RuntimeManager {
    /// SyncPod's sandbox step: a new sandbox when compute-pod-actions asks
    /// for one, else the ready one (its dead predecessors removed); None when
    /// there is none, or no container to start in it. The pod's IPs are the
    /// new sandbox's (read after its creation, as upstream), else those of
    /// the runtime's status; on the host network, the node's.
    pub(super) async fn sandbox_step<'a>(
        &self,
        pod: &Pod,
        status: &PodStatus,
        actions: &PodActions,
        volumes: &'a PodVolumes,
    ) -> Result<Option<Sandbox<'a>>, SyncError> {
        let (id, config, name, mut ips) = match (actions.create_sandbox, &actions.sandbox_id) {
            (Some(attempt), _) => {
                // The pod's claims are prepared before its sandbox, as
                // upstream's SyncPod does.
                if let Err(e) = self.host.dra.prepare(pod).await {
                    let e = SyncError::PrepareResources(e);
                    self.events.event(
                        &Involved::pod(pod, None),
                        WARNING,
                        "FailedPrepareDynamicResources",
                        format!("Failed to prepare dynamic resources: {e}"),
                    );
                    return Err(e);
                }
                let runtime_class = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.runtime_class_name.as_deref());
                let made = match self.host.runtime_classes.handler(runtime_class) {
                    Ok(handler) => self
                        .sandbox_config(pod, attempt)
                        .await
                        .map(|(config, name)| (handler, config, name)),
                    Err(e) => Err(SyncError::SandboxConfig(e.into())),
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
    pub(super) async fn sandbox_config(
        &self,
        pod: &Pod,
        attempt: u32,
    ) -> Result<(cri::PodSandboxConfig, PodName), SyncError> {
        let fail = |e: HostnameError| SyncError::SandboxConfig(e.into());
        let userns = self
            .user_namespace(pod)
            .await
            .map_err(|e| SyncError::SandboxConfig(SandboxConfigError::UserNamespaces(e)))?;
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
                .map_err(|source| {
                    SyncError::SandboxConfig(SandboxConfigError::ReadResolvConf {
                        path: self.host.resolv_conf.clone(),
                        source,
                    })
                })?;
            parse_resolv_conf(&text)
                .map_err(|e| SyncError::SandboxConfig(SandboxConfigError::ParseResolvConf(e)))?
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
        let inputs = SandboxInputs {
            dns,
            hostname: kernel_name,
            cgroup_parent: self.host.cgroups.cgroup_parent(pod),
            userns,
        };
        let config = sandbox_config(
            pod,
            attempt,
            &self.host.logs_root,
            inputs,
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
