//! The pod's status as the runtime holds it (upstream's GetPodStatus in
//! kuberuntime_manager.go and the container statuses of kuberuntime_container.go),
//! the relist PLEG diffs, and a terminated container's message.

use std::collections::HashMap;
use std::path::PathBuf;

use kubelet_core::runtime::{
    ContainerState, ContainerStatus, ContainerUser, LinuxContainerUser, PodStatus, RuntimePod,
    RuntimePods, SandboxState, SandboxStatus,
};
use kubelet_core::types::{PodUid, keys};
use kubelet_cri::client::CriError;
use kubelet_cri::v1 as cri;

use super::{PodRef, RuntimeManager, uid_filter};
use crate::files::is_under;

impl RuntimeManager {
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
        // Newest first; the attempt breaks a tie of a coarse clock.
        out.sandboxes
            .sort_by_key(|s| std::cmp::Reverse((s.created_at, s.attempt)));

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
                stop_signal: cri::Signal::try_from(st.stop_signal)
                    .ok()
                    .filter(|_| self.host.stop_signals)
                    .and_then(super::config::api_signal),
                user: st.user.as_ref().map(container_user),
            });
        }
        out.containers
            .sort_by_key(|c| std::cmp::Reverse((c.created_at, c.restart_count)));
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
        self.list_runtime_pods(None).await
    }

    /// One pod's relist for PLEG (upstream's GetPod): its sandboxes and
    /// containers, none when the runtime holds nothing of it.
    pub async fn relist_pod(&self, uid: &PodUid) -> Result<RuntimePods, CriError> {
        self.list_runtime_pods(Some(uid)).await
    }

    async fn list_runtime_pods(&self, only: Option<&PodUid>) -> Result<RuntimePods, CriError> {
        let sandboxes = self
            .cri
            .list_pod_sandbox(only.map(|uid| cri::PodSandboxFilter {
                label_selector: uid_filter(uid),
                ..Default::default()
            }))
            .await?;
        let containers = self
            .cri
            .list_containers(only.map(|uid| cri::ContainerFilter {
                label_selector: uid_filter(uid),
                ..Default::default()
            }))
            .await?;
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
}

pub(super) fn container_state(s: i32) -> ContainerState {
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

/// A sandbox's IPs, as its status gives them.
pub(super) fn sandbox_ips(st: &cri::PodSandboxStatus) -> Vec<String> {
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

/// Where httpGet hooks connect by default: the pod's IP, or loopback for a
/// pod in the node's network.
pub(super) fn pod_ip(status: &PodStatus) -> String {
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
pub(super) fn join_messages(runtime: &str, termination: &str) -> String {
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
pub(super) fn log_tail(path: &str) -> std::io::Result<String> {
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

/// The identity the runtime says the container runs with (upstream's
/// toKubeContainerUser).
fn container_user(user: &cri::ContainerUser) -> ContainerUser {
    ContainerUser {
        linux: user.linux.as_ref().map(|l| LinuxContainerUser {
            uid: l.uid,
            gid: l.gid,
            supplemental_groups: l.supplemental_groups.clone(),
        }),
    }
}
