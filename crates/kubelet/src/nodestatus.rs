//! The node's life in the API (upstream's kubelet_node_status.go and
//! nodelease): register the Node (or reconcile an existing one), compute its
//! status every nodeStatusUpdateFrequency and send it when it changed or
//! every nodeStatusReportFrequency, and renew the Lease every 10 s.

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_api::ApiClient;
use kubelet_api::node::{LeaseHeartbeat, patch_status, register};
use kubelet_core::backoff::Backoff;
use kubelet_core::downward::Allocatable;
use kubelet_core::eviction::Threshold;
use kubelet_core::nodestatus::{
    NodeFacts, Readiness, RuntimeImage, architecture, condition_events, initial_node, node_images,
    node_status, status_changed,
};
use kubelet_core::quantity::{QuantityError, parse_bytes, parse_cpu_millis};
use kubelet_core::resources::Amounts;
use kubelet_cri::client::CriClient;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::events::{Involved, NORMAL, Recorder};
use crate::eviction::EvictionManager;
use crate::nodeshutdown::ShutdownManager;
use crate::runtime_state::RuntimeState;

/// The version rkubelet reports as kubeletVersion: the Kubernetes API it
/// implements, with rkubelet's own version as build metadata.
pub const KUBELET_VERSION: &str = concat!("v1.37.2+rkubelet-", env!("CARGO_PKG_VERSION"));

/// How this node presents itself to the API server.
#[derive(Clone, Debug)]
pub struct NodeRegistration {
    pub node_name: String,
    pub node_ips: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub register: bool,
    pub update_every: Duration,
    pub report_every: Duration,
    /// Capacity `pods`: maxPods, or podsPerCore per core if fewer.
    pub max_pods: u32,
    pub kubelet_port: i32,
    /// `spec.providerID` at registration.
    pub provider_id: Option<String>,
    /// The Lease's duration; renewed every quarter of it, as upstream.
    pub lease_duration_seconds: i32,
    /// The most images node status lists (`None`: all).
    pub max_images: Option<usize>,
}

pub struct NodeStatusController {
    pub api: ApiClient,
    pub cri: CriClient,
    pub runtime_state: RuntimeState,
    /// `<runtime>://<version>`, from Version().
    pub runtime_version: Arc<RwLock<String>>,
    pub root_dir: PathBuf,
    pub node_memory: i64,
    /// SwapTotal, for `nodeInfo.swap`.
    pub node_swap: i64,
    /// The pre-allocated hugepages by resource name, in bytes.
    pub hugepages: Amounts,
    pub node_cpu_cores: i64,
    /// systemReserved plus kubeReserved.
    pub reserved: Amounts,
    /// The hard eviction thresholds.
    pub eviction_hard: Vec<Threshold>,
    pub reg: NodeRegistration,
    /// Set once the node is registered (mirror pods name it as owner).
    pub node_uid: Arc<RwLock<Option<String>>>,
    pub events: Recorder,
    /// The wall clock of heartbeats and lease renewals.
    pub clock: Clock,
    /// The eviction manager: the node's pressure conditions.
    pub eviction: Arc<EvictionManager>,
    /// The shutdown manager: NotReady while the node shuts down.
    pub shutdown: Arc<ShutdownManager>,
    /// Woken when the status must be sent now rather than at the next
    /// tick.
    pub status_now: Arc<Notify>,
    /// The attachable volumes pods use (the volume manager's unique names,
    /// sorted).
    pub volumes_in_use: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
    /// The device plugins: their resources in capacity and allocatable.
    pub devices: crate::devicemanager::DeviceManager,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn os_image() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "Linux".into())
}

/// The node's allocatable resources as the downward API reads them (what
/// a limit not set reads as): the live Node's, else what the kubelet
/// found at start.
#[derive(Clone)]
pub struct NodeAllocatable {
    fallback: Allocatable,
    node: watch::Receiver<Option<Arc<Node>>>,
}

impl NodeAllocatable {
    pub fn new(fallback: Allocatable, node: watch::Receiver<Option<Arc<Node>>>) -> Self {
        NodeAllocatable { fallback, node }
    }

    pub fn get(&self) -> Allocatable {
        let node = self.node.borrow();
        let live = node
            .as_ref()
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.allocatable.as_ref());
        let Some(live) = live else {
            return self.fallback;
        };
        let read = |k: &str, parse: fn(&Quantity) -> Result<i64, QuantityError>, or: i64| {
            live.get(k).and_then(|q| parse(q).ok()).unwrap_or(or)
        };
        Allocatable {
            cpu_millis: read("cpu", parse_cpu_millis, self.fallback.cpu_millis),
            memory_bytes: read("memory", parse_bytes, self.fallback.memory_bytes),
            ephemeral_storage_bytes: read(
                "ephemeral-storage",
                parse_bytes,
                self.fallback.ephemeral_storage_bytes,
            ),
        }
    }
}

/// The node's IP when none is given: the source address the kernel would
/// use for a remote destination (a UDP connect sends no packet), else the
/// loopback address.
pub fn detect_node_ip() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

/// What the node says of itself that does not change while the kubelet
/// runs: read once, on the blocking pool.
#[derive(Clone, Debug, Default)]
struct HostInfo {
    machine_id: String,
    system_uuid: String,
    boot_id: String,
    kernel_version: String,
    os_image: String,
}

impl HostInfo {
    fn read() -> HostInfo {
        HostInfo {
            machine_id: read_trimmed("/etc/machine-id"),
            system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
            os_image: os_image(),
        }
    }
}

/// The host's pre-allocated hugepages by resource name, in bytes: every
/// page size under /sys/kernel/mm/hugepages and its `nr_hugepages`, as
/// cAdvisor's machine info lists them.
pub fn host_hugepages() -> Amounts {
    std::fs::read_dir("/sys/kernel/mm/hugepages")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let size = kubelet_core::cgroups::hugepage_size_of_dir(e.file_name().to_str()?)?;
            let pages: u64 = std::fs::read_to_string(e.path().join("nr_hugepages"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let bytes = i64::try_from(pages.checked_mul(size)?).ok()?;
            Some((kubelet_core::resources::hugepage_resource(size), bytes))
        })
        .collect()
}

impl NodeStatusController {
    async fn facts(&self, host: &HostInfo) -> NodeFacts {
        let images = match self.cri.list_images().await {
            Ok(images) => node_images(
                self.reg.max_images,
                images
                    .into_iter()
                    .map(|i| RuntimeImage {
                        repo_tags: i.repo_tags,
                        repo_digests: i.repo_digests,
                        size: i64::try_from(i.size).unwrap_or(i64::MAX),
                    })
                    .collect(),
            ),
            Err(e) => {
                tracing::debug!(error = %e, "listing images for node status");
                Vec::new()
            }
        };
        let root = self.root_dir.clone();
        let ephemeral = kubelet_tasks::blocking(move || Ok(rustix::fs::statvfs(&root)?))
            .await
            .map(|s| (s.f_blocks * s.f_frsize) as i64)
            .unwrap_or(0);
        NodeFacts {
            node_name: self.reg.node_name.clone(),
            hostname: self.reg.node_name.clone(),
            node_ips: self.reg.node_ips.clone(),
            machine_id: host.machine_id.clone(),
            system_uuid: host.system_uuid.clone(),
            boot_id: host.boot_id.clone(),
            kernel_version: host.kernel_version.clone(),
            os_image: host.os_image.clone(),
            architecture: architecture().into(),
            cpu_cores: self.node_cpu_cores,
            memory_bytes: self.node_memory,
            swap_bytes: self.node_swap,
            ephemeral_storage_bytes: ephemeral,
            hugepages: self.hugepages.clone(),
            max_pods: self.reg.max_pods,
            kubelet_version: KUBELET_VERSION.into(),
            container_runtime_version: self.runtime_version.read().clone(),
            kubelet_port: self.reg.kubelet_port,
            images,
            volumes_in_use: (self.volumes_in_use)(),
            reserved: self.reserved.clone(),
            eviction_hard: self.eviction_hard.clone(),
            runtime_handlers: self.runtime_state.handlers(),
            runtime_features: self.runtime_state.features(),
            extended: self.devices.capacity(),
        }
    }

    fn readiness(&self) -> Readiness {
        let mut errors = self.runtime_state.runtime_errors();
        errors.extend(self.runtime_state.network_error());
        errors.extend(self.shutdown.status().map(str::to_owned));
        Readiness { errors }
    }

    /// Register (with backoff until the API server takes it), then keep the
    /// status and the lease fresh until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let host = kubelet_tasks::off_thread(HostInfo::read)
            .await
            .unwrap_or_default();
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(7));
        let mut reset = Vec::new();
        let node_uid = if self.reg.register {
            loop {
                let facts = self.facts(&host).await;
                let node = initial_node(
                    &facts,
                    &self.reg.labels,
                    &self.reg.taints,
                    self.reg.provider_id.as_deref(),
                );
                match register(&self.api, &node).await {
                    Ok(n) => {
                        reset = self.extended_to_reset(&n);
                        tracing::info!(node = %self.reg.node_name, "node registered");
                        self.events.event(
                            &Involved::node(&self.reg.node_name, n.metadata.uid.clone()),
                            NORMAL,
                            "Starting",
                            "Starting kubelet.",
                        );
                        *self.node_uid.write() = n.metadata.uid.clone();
                        break n.metadata.uid;
                    }
                    Err(e) => tracing::warn!(error = %e, "registering the node"),
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                }
            }
        } else {
            None
        };
        tokio::join!(
            self.status_loop(&host, reset, &cancel),
            self.lease_loop(node_uid, &cancel)
        );
    }

    /// The extended resources of a Node found registered that are zeroed
    /// in its first status (upstream's reconcileExtendedResource): all of
    /// them when the device manager started without a checkpoint, as on a
    /// node made again; the plugins' own come back as they register.
    fn extended_to_reset(&self, node: &Node) -> Vec<String> {
        if !self.devices.fresh() {
            return Vec::new();
        }
        node.status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .into_iter()
            .flatten()
            .map(|(name, _)| name)
            .filter(|name| kubelet_core::devices::is_extended_resource_name(name))
            .inspect(|name| tracing::info!(resource = %name, node = %self.reg.node_name, "Zero out resource capacity in existing node"))
            .cloned()
            .collect()
    }

    /// `reset`: extended resources the first status zeroes.
    async fn status_loop(
        &self,
        host: &HostInfo,
        mut reset: Vec<String>,
        cancel: &CancellationToken,
    ) {
        let mut sent: Option<(NodeStatus, Instant)> = None;
        let mut tick = tokio::time::interval(self.reg.update_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
                () = self.status_now.notified() => {}
            }
            let mut facts = self.facts(host).await;
            for name in &reset {
                if !facts.extended.capacity.contains_key(name) {
                    facts.extended.removed.push(name.clone());
                }
            }
            let now = self.clock.now_time();
            let status = node_status(
                &facts,
                &self.readiness(),
                &self.eviction.pressure(),
                sent.as_ref().map(|s| &s.0),
                &now,
            );
            let due = match &sent {
                None => true,
                Some((old, at)) => {
                    status_changed(old, &status) || at.elapsed() >= self.reg.report_every
                }
            };
            if !due {
                continue;
            }
            match patch_status(&self.api, &self.reg.node_name, &status).await {
                Ok(_) => {
                    reset.clear();
                    let events = condition_events(sent.as_ref().map(|s| &s.0), &status);
                    if !events.is_empty() {
                        tracing::info!(?events, "node conditions reported");
                        let node_uid = self.node_uid.read().clone();
                        let about = Involved::node(&self.reg.node_name, node_uid);
                        for event in events {
                            self.events.event(
                                &about,
                                NORMAL,
                                event,
                                format!("Node {} status is now: {event}", self.reg.node_name),
                            );
                        }
                    }
                    sent = Some((status, Instant::now()));
                }
                Err(e) => tracing::warn!(error = %e, "updating node status"),
            }
        }
    }

    async fn lease_loop(&self, node_uid: Option<String>, cancel: &CancellationToken) {
        let duration = self.reg.lease_duration_seconds;
        let renew_every = Duration::from_millis(u64::try_from(duration).unwrap_or(40) * 250);
        let mut lease = LeaseHeartbeat::new(self.reg.node_name.clone(), node_uid, duration);
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(7));
        loop {
            let delay = match lease.renew(&self.api, self.clock.now_micro()).await {
                Ok(()) => {
                    backoff.reset();
                    renew_every
                }
                Err(e) => {
                    tracing::warn!(error = %e, "renewing the node lease");
                    backoff.next_delay()
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}
