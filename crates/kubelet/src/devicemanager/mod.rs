//! The device plugin manager (upstream's pkg/kubelet/cm/devicemanager):
//! device plugins (NVIDIA's, AMD's, SR-IOV's...) register on
//! `<root-dir>/device-plugins/kubelet.sock` ([`registration`]), or through
//! the plugin watcher (`plugins_registry`, type DevicePlugin); the kubelet
//! dials each back on its own socket there and keeps its `ListAndWatch`
//! stream, whose devices become the node's extended resources (capacity
//! all of them, allocatable the healthy ones). Admission allocates a pod's
//! devices container by container (`GetPreferredAllocation` where the
//! plugin offers it, then `Allocate`); each container is started with what
//! its plugins answered (devices, mounts, environment, annotations, CDI
//! devices), after `PreStartContainer` where a plugin asks for it.
//! Allocations and the registered devices are kept in upstream's
//! `kubelet_internal_checkpoint`, so either kubelet restarting finds them.
//!
//! A plugin whose stream ends is not dialled again: its devices turn
//! unhealthy at once and its resource goes after five minutes unless a
//! plugin registers for it again (upstream's endpointStopGracePeriod); a
//! gone resource stays in the node's capacity at 0, as upstream leaves it.
//! Devices are taken in ID order where upstream takes them in its sets'
//! order; there is one NUMA node to align to until the topology manager
//! comes (#36).

mod registration;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceHealth, ResourceStatus};
use kubelet_core::devices::checkpoint::{self, Data, NO_TOPOLOGY, PodDevicesEntry};
use kubelet_core::devices::{extended_limits, take_from};
use kubelet_core::dra::is_dra_extended_resource;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::nodestatus::ExtendedResources;
use kubelet_core::podspec::{init_and_regular_containers, init_containers, is_sidecar};
use kubelet_core::resources::pod_limits_without_overhead;
use kubelet_core::topologymanager::{BitMask, Hint, ProviderHints, hints_over};
use kubelet_core::types::PodUid;
use kubelet_cri::v1 as cri;
use kubelet_plugin_api::deviceplugin as api;
use kubelet_plugin_api::deviceplugin::device_plugin_client::DevicePluginClient;
use kubelet_plugin_api::status_text;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

pub use registration::{listen, serve};

/// The directory under the root directory, and the kubelet's socket in it.
pub const DIR: &str = "device-plugins";
pub const SOCKET: &str = "kubelet.sock";
/// How long a resource whose plugins are gone stays (upstream's
/// endpointStopGracePeriod).
const GRACE: Duration = Duration::from_secs(5 * 60);
/// Upstream's PreStartContainer deadline.
const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an Allocate or GetPreferredAllocation call may take. Upstream
/// sets none, and a plugin that hangs holds its sync loop; rkubelet's
/// admission waits this long, then refuses the pod.
const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why devices could not be allocated or given to a container, in
/// upstream's words. Admission refuses the pod with it
/// (`UnexpectedAdmissionError`); a container start fails with it.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("cannot allocate unregistered device {0}")]
    Unregistered(String),
    #[error("no healthy devices present; cannot allocate unhealthy devices {0}")]
    NoHealthy(String),
    #[error(
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {0}"
    )]
    NoLongerHealthy(String),
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}"
    )]
    Unavailable {
        resource: String,
        requested: usize,
        available: usize,
    },
    #[error(
        "pod {pod:?} container {container:?} changed request for resource {resource:?} from {from} to {to}"
    )]
    Changed {
        pod: String,
        container: String,
        resource: String,
        from: usize,
        to: usize,
    },
    #[error(
        "unexpectedly allocated less resources than required. Requested: {requested}, Got: {got}"
    )]
    Short { requested: usize, got: usize },
    #[error("unknown Device Plugin {0}")]
    UnknownPlugin(String),
    #[error("endpoint not found in cache for a registered resource: {0}")]
    NoEndpoint(String),
    /// PreStartContainer for a resource whose plugins are gone.
    #[error("device plugin PreStartContainer rpc failed with err: endpoint {0} has been stopped")]
    Stopped(String),
    #[error("{}", status_text(.0))]
    Allocate(tonic::Status),
    #[error("no containers return in allocation response {0}")]
    EmptyResponse(String),
    #[error("device plugin GetPreferredAllocation rpc failed with err: {}", status_text(.0))]
    Preferred(tonic::Status),
    #[error(
        "no devices found allocated in local cache for pod {pod}, container {container}, resource {resource}"
    )]
    NotAllocated {
        pod: String,
        container: String,
        resource: String,
    },
    #[error("device plugin PreStartContainer rpc failed with err: {}", status_text(.0))]
    PreStart(tonic::Status),
}

/// A plugin serving a resource: its socket and client, and the options it
/// gave at registration.
#[derive(Clone)]
struct Plugin {
    socket: PathBuf,
    client: DevicePluginClient<Channel>,
    options: api::DevicePluginOptions,
    /// Cancelled when the plugin watcher deregisters it.
    stop: CancellationToken,
}

/// A registered resource.
#[derive(Default)]
struct Resource {
    /// The plugins connected for it, the one registered last answering.
    plugins: Vec<Plugin>,
    /// Once none is: since when, and the last one's options (none when the
    /// resource was read from the checkpoint).
    stopped: Option<(Instant, Option<api::DevicePluginOptions>)>,
    /// Its devices as the plugin's stream last listed them, by ID.
    devices: BTreeMap<String, api::Device>,
    healthy: BTreeSet<String>,
    unhealthy: BTreeSet<String>,
}

impl Resource {
    fn gone(&self, now: Instant) -> bool {
        self.plugins.is_empty()
            && self
                .stopped
                .as_ref()
                .is_none_or(|(at, _)| now.duration_since(*at) > GRACE)
    }

    fn options(&self) -> Option<&api::DevicePluginOptions> {
        match self.plugins.last() {
            Some(p) => Some(&p.options),
            None => self.stopped.as_ref().and_then(|(_, o)| o.as_ref()),
        }
    }
}

/// One container's devices of one resource: their IDs by NUMA node and
/// the plugin's answer to Allocate. `restored` when read from the
/// checkpoint at start and not yet admitted again.
#[derive(Clone, Debug)]
struct Allocation {
    ids: BTreeMap<i64, Vec<String>>,
    response: api::ContainerAllocateResponse,
    restored: bool,
}

impl Allocation {
    fn devices(&self) -> BTreeSet<String> {
        self.ids.values().flatten().cloned().collect()
    }
}

/// Pod UID → container → resource → its allocation (upstream's podDevices).
type PodDevices = BTreeMap<String, BTreeMap<String, BTreeMap<String, Allocation>>>;

#[derive(Default)]
struct State {
    resources: BTreeMap<String, Resource>,
    pods: PodDevices,
    /// The devices the non-restartable init containers of the pod being
    /// admitted hold, which its later containers may take again
    /// (upstream's devicesToReuse).
    reuse: Option<(String, BTreeMap<String, BTreeSet<String>>)>,
}

impl State {
    /// Every device some container holds, by resource.
    fn allocated(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for containers in self.pods.values() {
            for resources in containers.values() {
                for (resource, a) in resources {
                    out.entry(resource.clone()).or_default().extend(a.devices());
                }
            }
        }
        out
    }

    fn is_device_plugin_resource(&self, resource: &str) -> bool {
        self.resources.contains_key(resource)
            || self
                .pods
                .values()
                .flat_map(|c| c.values())
                .any(|r| r.contains_key(resource))
    }

    /// The hints for `requested` devices of `resource` (upstream's
    /// GetTopologyHints for one resource): None when its devices say no
    /// NUMA node; none possible when `held` (devices held already) is
    /// another count, or too few are free.
    fn resource_hints(
        &self,
        resource: &str,
        requested: usize,
        held: BTreeSet<String>,
        reusable: BTreeSet<String>,
        numa: &[u32],
    ) -> Option<Vec<Hint>> {
        let devices = &self.resources.get(resource)?.devices;
        if !has_topology(devices) {
            return None;
        }
        let (available, reusable) = if held.is_empty() {
            let in_use = self.allocated().remove(resource).unwrap_or_default();
            let healthy = &self.resources.get(resource)?.healthy;
            let available: BTreeSet<String> = healthy.difference(&in_use).cloned().collect();
            if available.union(&reusable).count() < requested {
                return Some(Vec::new());
            }
            (available, reusable)
        } else if held.len() != requested {
            return Some(Vec::new());
        } else {
            (held, BTreeSet::new())
        };
        // Each device's NUMA nodes, read once.
        let masks: BTreeMap<&String, BitMask> = devices
            .iter()
            .map(|(id, d)| (id, node_mask(Some(d))))
            .collect();
        let mask_of = |id: &String| masks.get(id).copied().unwrap_or_default();
        // The NUMA nodes with devices, those the node knows of (upstream's
        // deviceNUMANodes); all of them when none.
        let known = BitMask::of(numa.iter().copied());
        let with_devices = masks.values().fold(0, |all, m| all | m.0) & known.0;
        let nodes: Vec<u32> = if with_devices == 0 {
            numa.to_vec()
        } else {
            BitMask(with_devices).nodes().collect()
        };
        let count_in = |mask: BitMask, ids: &mut dyn Iterator<Item = &String>| {
            ids.filter(|id| mask_of(id).0 & mask.0 != 0).count()
        };
        // Reusable devices on no NUMA node neither count nor constrain.
        let placed: Vec<BitMask> = reusable.iter().map(mask_of).filter(|m| m.0 != 0).collect();
        Some(hints_over(
            &nodes,
            requested,
            |mask| count_in(mask, &mut devices.keys()),
            |mask| {
                let outside = placed.iter().any(|m| m.0 & mask.0 == 0);
                (!outside).then(|| placed.len() + count_in(mask, &mut available.iter()))
            },
        ))
    }

    fn checkpoint(&self) -> Data {
        let entries = self
            .pods
            .iter()
            .flat_map(|(uid, containers)| {
                containers.iter().flat_map(move |(name, resources)| {
                    resources.iter().map(move |(resource, a)| PodDevicesEntry {
                        pod_uid: uid.clone(),
                        container_name: name.clone(),
                        resource_name: resource.clone(),
                        device_ids: Some(
                            a.ids
                                .iter()
                                .map(|(numa, ids)| (*numa, Some(ids.clone())))
                                .collect(),
                        ),
                        alloc_resp: Some(a.response.encode_to_vec()),
                    })
                })
            })
            .collect();
        let registered = self
            .resources
            .iter()
            .map(|(name, r)| (name.clone(), Some(r.healthy.iter().cloned().collect())))
            .collect();
        Data {
            pod_device_entries: Some(entries),
            registered_devices: Some(registered),
        }
    }
}

/// What a container is started with from its devices (upstream's
/// DeviceRunContainerOptions), merged over its resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<cri::Mount>,
    pub devices: Vec<cri::Device>,
    pub annotations: Vec<(String, String)>,
    pub cdi_devices: Vec<String>,
}

/// A device on a NUMA node (none: the plugin gave no topology), for the
/// PodResources API.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInstance {
    pub resource: String,
    pub id: String,
    pub numa_node: Option<i64>,
}

struct Inner {
    dir: PathBuf,
    /// No checkpoint was found at start: the node may be new, and the
    /// extended resources an old Node object shows are zeroed until
    /// plugins register (upstream's ShouldResetExtendedResourceCapacity).
    fresh: bool,
    state: Mutex<State>,
    metrics: KubeletMetrics,
    /// Woken when the extended resources change (node status is sent).
    capacity_changed: Arc<Notify>,
    /// Pods whose devices' health changed (ResourceHealthStatus): their
    /// status is synced.
    health_changed: Option<mpsc::UnboundedSender<PodUid>>,
}

/// The device plugin manager; clones share it.
#[derive(Clone)]
pub struct DeviceManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DeviceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceManager")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl DeviceManager {
    /// The manager of `<root_dir>/device-plugins`, its checkpoint read
    /// (none or a corrupt one is logged and the manager starts empty, as
    /// upstream's does).
    pub fn new(
        root_dir: &Path,
        metrics: KubeletMetrics,
        capacity_changed: Arc<Notify>,
        health_changed: Option<mpsc::UnboundedSender<PodUid>>,
    ) -> Self {
        let dir = root_dir.join(DIR);
        let fresh = !dir.join(checkpoint::FILE).exists();
        let state = read_checkpoint(&dir.join(checkpoint::FILE));
        DeviceManager {
            inner: Arc::new(Inner {
                dir,
                fresh,
                state: Mutex::new(state),
                metrics,
                capacity_changed,
                health_changed,
            }),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Whether the extended resources of an existing Node are to be reset
    /// at registration (no checkpoint at start).
    pub fn fresh(&self) -> bool {
        self.inner.fresh
    }

    /// Whether containers' statuses show their devices' health
    /// (ResourceHealthStatus).
    pub fn reports_health(&self) -> bool {
        self.inner.health_changed.is_some()
    }

    fn write_checkpoint(&self) {
        let data = self.inner.state.lock().checkpoint();
        let path = self.inner.dir.join(checkpoint::FILE);
        let written = data
            .encode()
            .map_err(std::io::Error::other)
            .and_then(|bytes| crate::files::write_file(&path, &bytes));
        if let Err(e) = written {
            tracing::error!(error = %e, checkpoint = checkpoint::FILE, "Failed to write checkpoint file");
        }
    }

    /// A plugin connected for `resource` (upstream's PluginConnected).
    fn connected(&self, resource: &str, plugin: Plugin) -> Result<(), String> {
        let mut state = self.inner.state.lock();
        let r = state.resources.entry(resource.to_owned()).or_default();
        if r.plugins.iter().any(|p| p.socket == plugin.socket) {
            return Err(format!(
                "device plugin already connected: {}",
                plugin.socket.display()
            ));
        }
        r.plugins.push(plugin);
        r.stopped = None;
        Ok(())
    }

    /// The plugin watcher saw the plugin's registration socket go
    /// (upstream's DeRegisterPlugin): its stream is ended, and it is
    /// disconnected as if the stream had ended on its own.
    pub fn deregister(&self, resource: &str, socket: &Path) {
        let state = self.inner.state.lock();
        if let Some(p) = state
            .resources
            .get(resource)
            .and_then(|r| r.plugins.iter().find(|p| p.socket == socket))
        {
            p.stop.cancel();
        }
    }

    /// A plugin's stream ended (upstream's PluginDisconnected): the last
    /// one of its resource takes the devices' health with it.
    fn disconnected(&self, resource: &str, socket: &Path) {
        let mut state = self.inner.state.lock();
        let Some(r) = state.resources.get_mut(resource) else {
            return;
        };
        let Some(i) = r.plugins.iter().position(|p| p.socket == socket) else {
            return;
        };
        let plugin = r.plugins.remove(i);
        if r.plugins.is_empty() {
            r.stopped = Some((Instant::now(), Some(plugin.options)));
            let healthy = std::mem::take(&mut r.healthy);
            r.unhealthy.extend(healthy);
            tracing::info!(
                resource,
                "Last device plugin for this resource disconnected"
            );
        }
        drop(state);
        self.inner.capacity_changed.notify_one();
    }

    /// A plugin's stream listed its devices (upstream's
    /// genericDeviceUpdateCallback): they replace the resource's.
    fn update_devices(&self, resource: &str, devices: Vec<api::Device>) {
        let mut changed_pods = BTreeSet::new();
        let healthy_count;
        {
            let mut state = self.inner.state.lock();
            let holders: BTreeMap<String, String> = state
                .pods
                .iter()
                .flat_map(|(uid, containers)| {
                    containers
                        .values()
                        .filter_map(|res| res.get(resource))
                        .flat_map(|a| a.devices())
                        .map(move |id| (id, uid.clone()))
                })
                .collect();
            let r = state.resources.entry(resource.to_owned()).or_default();
            let old = std::mem::take(&mut r.devices);
            r.healthy.clear();
            r.unhealthy.clear();
            for d in devices {
                if old.get(&d.id).is_none_or(|o| o.health != d.health)
                    && let Some(uid) = holders.get(&d.id)
                {
                    changed_pods.insert(uid.clone());
                }
                if d.health == api::HEALTHY {
                    r.healthy.insert(d.id.clone());
                } else {
                    r.unhealthy.insert(d.id.clone());
                }
                r.devices.insert(d.id.clone(), d);
            }
            healthy_count = r.healthy.len();
            tracing::info!(
                resource,
                total = r.devices.len(),
                healthy = healthy_count,
                "Processed device updates for resource"
            );
        }
        if let Some(tx) = &self.inner.health_changed {
            for uid in changed_pods {
                let _ = tx.send(PodUid::from(uid.as_str()));
            }
        }
        self.write_checkpoint();
        self.inner.capacity_changed.notify_one();
    }

    /// The extended resources for node status (upstream's GetCapacity):
    /// resources gone past their grace are dropped, and reported removed.
    pub fn capacity(&self) -> ExtendedResources {
        let now = Instant::now();
        let mut out = ExtendedResources::default();
        let removed = {
            let mut state = self.inner.state.lock();
            let gone: Vec<String> = state
                .resources
                .iter()
                .filter(|(_, r)| r.gone(now))
                .map(|(name, _)| name.clone())
                .collect();
            for name in &gone {
                state.resources.remove(name);
            }
            for (name, r) in &state.resources {
                let healthy = r.healthy.len() as i64;
                out.capacity
                    .insert(name.clone(), healthy + r.unhealthy.len() as i64);
                out.allocatable.insert(name.clone(), healthy);
            }
            gone
        };
        if !removed.is_empty() {
            self.write_checkpoint();
        }
        out.removed = removed;
        out
    }

    /// The healthy devices of each registered resource (admission's
    /// figures until the Node is seen).
    pub fn allocatable(&self) -> BTreeMap<String, i64> {
        let state = self.inner.state.lock();
        state
            .resources
            .iter()
            .map(|(name, r)| (name.clone(), r.healthy.len() as i64))
            .collect()
    }

    /// Whether the pod holds devices, and how many of each resource every
    /// pod holds then (upstream's sanitizeNodeAllocatable raises the node's
    /// allocatable to them, for a Node not yet showing the devices).
    pub fn allocated_counts_if_holding(&self, uid: &PodUid) -> Option<BTreeMap<String, i64>> {
        let state = self.inner.state.lock();
        state.pods.contains_key(uid.as_str()).then(|| {
            state
                .allocated()
                .into_iter()
                .map(|(r, ids)| (r, ids.len() as i64))
                .collect()
        })
    }

    /// Whether any container of `pod` asks for a resource a device plugin
    /// serves (admission only waits on plugins for those pods).
    pub fn wants_devices(&self, pod: &Pod) -> bool {
        let state = self.inner.state.lock();
        init_and_regular_containers(pod).any(|c| {
            extended_limits(c)
                .keys()
                .any(|r| state.is_device_plugin_resource(r))
        })
    }

    /// Admission's allocation for container `c` of `pod` (upstream's
    /// Allocate, called by the topology manager's admission for each init
    /// container then each container, in order), the devices on the NUMA
    /// nodes of `affinity` first. The devices of an init container that
    /// runs to completion may be taken again by those after it. `active`
    /// are the pods admitted and not done: devices of any other pod are
    /// freed first.
    pub async fn allocate(
        &self,
        pod: &Pod,
        c: &Container,
        active: &[Arc<Pod>],
        affinity: Option<BitMask>,
    ) -> Result<(), DeviceError> {
        let uid = PodUid::of(pod).to_string();
        {
            let mut state = self.inner.state.lock();
            if state.reuse.as_ref().is_none_or(|(u, _)| *u != uid) {
                state.reuse = Some((uid.clone(), BTreeMap::new()));
            }
        }
        self.allocate_container(pod, c, Some(active), affinity)
            .await?;
        let init = init_containers(pod).iter().any(|i| i.name == c.name);
        let mut state = self.inner.state.lock();
        let held: BTreeMap<String, BTreeSet<String>> = state
            .pods
            .get(&uid)
            .and_then(|cs| cs.get(&c.name))
            .map(|res| res.iter().map(|(r, a)| (r.clone(), a.devices())).collect())
            .unwrap_or_default();
        if let Some((_, reuse)) = state.reuse.as_mut() {
            for (resource, ids) in held {
                let set = reuse.entry(resource).or_default();
                if init && !is_sidecar(c) {
                    set.extend(ids);
                } else {
                    set.retain(|id| !ids.contains(id));
                }
            }
        }
        Ok(())
    }

    /// Where container `c` of `pod` could have its devices, over the
    /// node's NUMA nodes `numa` (upstream's GetTopologyHints): for each
    /// plugin resource it asks, none for one whose devices say no NUMA
    /// node; for devices it holds already (a restart), the hints of those.
    pub fn hints(&self, pod: &Pod, c: &Container, numa: &[u32]) -> ProviderHints {
        let uid = PodUid::of(pod).to_string();
        let state = self.inner.state.lock();
        let mut out = ProviderHints::new();
        for (resource, requested) in extended_limits(c) {
            if !state.is_device_plugin_resource(&resource) {
                continue;
            }
            let held = state
                .pods
                .get(&uid)
                .and_then(|cs| cs.get(&c.name))
                .and_then(|rs| rs.get(&resource))
                .map(Allocation::devices)
                .unwrap_or_default();
            let reusable = state
                .reuse
                .as_ref()
                .filter(|(u, _)| *u == uid)
                .and_then(|(_, m)| m.get(&resource))
                .cloned()
                .unwrap_or_default();
            let hints = state.resource_hints(&resource, requested, held, reusable, numa);
            out.insert(resource, hints);
        }
        out
    }

    /// Where the whole pod could have its devices (upstream's
    /// GetPodTopologyHints, the pod scope): each resource as the pod's
    /// limits count it.
    pub fn pod_hints(&self, pod: &Pod, numa: &[u32]) -> ProviderHints {
        let uid = PodUid::of(pod).to_string();
        let state = self.inner.state.lock();
        let mut out = ProviderHints::new();
        for (resource, requested) in pod_limits_without_overhead(pod) {
            if !state.is_device_plugin_resource(&resource) {
                continue;
            }
            let held: BTreeSet<String> = state
                .pods
                .get(&uid)
                .into_iter()
                .flat_map(|cs| cs.values())
                .filter_map(|rs| rs.get(&resource))
                .flat_map(Allocation::devices)
                .collect();
            let requested = usize::try_from(requested).unwrap_or(0);
            let hints = state.resource_hints(&resource, requested, held, BTreeSet::new(), numa);
            out.insert(resource, hints);
        }
        out
    }

    /// Whether any container holds devices.
    pub fn holds_any(&self) -> bool {
        !self.inner.state.lock().pods.is_empty()
    }

    /// Free the devices of pods no longer active (upstream's
    /// UpdateAllocatedDevices, at each allocation; housekeeping calls it
    /// too, for pods that are never admitted: static pods).
    pub fn free_inactive(&self, active: &[Arc<Pod>]) {
        let keep: HashSet<String> = active.iter().map(|p| PodUid::of(p).to_string()).collect();
        let freed = {
            let mut state = self.inner.state.lock();
            let before = state.pods.len();
            state.pods.retain(|uid, _| keep.contains(uid));
            before - state.pods.len()
        };
        if freed > 0 {
            tracing::info!(pods = freed, "freed the devices of pods no longer active");
            self.write_checkpoint();
        }
    }

    /// One container's allocation (upstream's allocateContainerResources).
    /// `active`, when known, are the pods whose devices are kept.
    async fn allocate_container(
        &self,
        pod: &Pod,
        c: &Container,
        active: Option<&[Arc<Pod>]>,
        affinity: Option<BitMask>,
    ) -> Result<(), DeviceError> {
        let uid = PodUid::of(pod).to_string();
        let mut freed = false;
        let mut wrote = false;
        for (resource, needed) in extended_limits(c) {
            // An extended resource DRA gives the pod (its scheduler-made
            // claim maps it) is not a device plugin's.
            if is_dra_extended_resource(pod, &c.name, &resource)
                || !self.inner.state.lock().is_device_plugin_resource(&resource)
            {
                continue;
            }
            if !freed && let Some(active) = active {
                self.free_inactive(active);
                freed = true;
            }
            let Some(ids) = self
                .devices_to_allocate(&uid, &c.name, &resource, needed, affinity)
                .await?
            else {
                continue;
            };
            let plugin = {
                let state = self.inner.state.lock();
                state
                    .resources
                    .get(&resource)
                    .and_then(|r| r.plugins.last().cloned())
            };
            // An allocation is recorded once its plugin answers, and the
            // devices in use are read from those recorded: a failure here
            // leaves nothing to undo.
            let Some(mut plugin) = plugin else {
                return Err(DeviceError::UnknownPlugin(resource));
            };
            let started = std::time::Instant::now();
            let request = api::AllocateRequest {
                container_requests: vec![api::ContainerAllocateRequest {
                    devices_ids: ids.iter().cloned().collect(),
                }],
            };
            let answer = within(ALLOCATE_TIMEOUT, plugin.client.allocate(request)).await;
            self.inner
                .metrics
                .device_plugin_alloc_duration
                .observe_duration(&[&resource], started.elapsed());
            let response = answer.map_err(DeviceError::Allocate)?.into_inner();
            let Some(first) = response.container_responses.first().cloned() else {
                return Err(DeviceError::EmptyResponse(format!("{response:?}")));
            };
            let mut state = self.inner.state.lock();
            let numa = state
                .resources
                .get(&resource)
                .map(|r| numa_of(&r.devices, &ids))
                .unwrap_or_default();
            state
                .pods
                .entry(uid.clone())
                .or_default()
                .entry(c.name.clone())
                .or_default()
                .insert(
                    resource.clone(),
                    Allocation {
                        ids: numa,
                        response: first,
                        restored: false,
                    },
                );
            wrote = true;
        }
        if wrote {
            self.write_checkpoint();
        }
        Ok(())
    }

    /// Which devices the container takes of `resource` (upstream's
    /// devicesToAllocate), those on the NUMA nodes of `affinity` first;
    /// None when it needs none now.
    async fn devices_to_allocate(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
        required: usize,
        affinity: Option<BitMask>,
    ) -> Result<Option<BTreeSet<String>>, DeviceError> {
        let (available, mut taken, preferred_from, split) = {
            let mut state = self.inner.state.lock();
            let pre = state
                .pods
                .get_mut(uid)
                .and_then(|cs| cs.get_mut(container))
                .and_then(|rs| rs.get_mut(resource));
            if let Some(a) = pre {
                let held = a.devices();
                if held.len() != required {
                    return Err(DeviceError::Changed {
                        pod: uid.into(),
                        container: container.into(),
                        resource: resource.into(),
                        from: held.len(),
                        to: required,
                    });
                }
                // Restored from the checkpoint: the container was given
                // these devices by the kubelet before this one started, and
                // keeps them whether or not its plugin is back yet
                // (upstream keeps them for a container still running).
                if std::mem::replace(&mut a.restored, false) {
                    return Ok(None);
                }
                let r = state
                    .resources
                    .get(resource)
                    .ok_or_else(|| DeviceError::Unregistered(resource.into()))?;
                if r.healthy.is_empty() {
                    return Err(DeviceError::NoHealthy(resource.into()));
                }
                if !held.is_subset(&r.healthy) {
                    return Err(DeviceError::NoLongerHealthy(resource.into()));
                }
                return Ok(None);
            }
            let Some(r) = state.resources.get(resource) else {
                return Err(DeviceError::Unregistered(resource.into()));
            };
            if r.healthy.is_empty() {
                return Err(DeviceError::NoHealthy(resource.into()));
            }
            if required == 0 {
                return Ok(None);
            }
            let healthy = r.healthy.clone();
            let preferred_from = r
                .options()
                .is_some_and(|o| o.get_preferred_allocation_available)
                .then(|| r.plugins.last().cloned())
                .flatten();
            let reusable = state
                .reuse
                .as_ref()
                .filter(|(u, _)| u == uid)
                .and_then(|(_, m)| m.get(resource))
                .cloned()
                .unwrap_or_default();
            let mut taken = BTreeSet::new();
            if take_from(required, &mut taken, &reusable) {
                return Ok(Some(taken));
            }
            let in_use = state.allocated().remove(resource).unwrap_or_default();
            let available: BTreeSet<String> = healthy.difference(&in_use).cloned().collect();
            let needed = required - taken.len();
            if available.len() < needed {
                return Err(DeviceError::Unavailable {
                    resource: resource.into(),
                    requested: needed,
                    available: available.len(),
                });
            }
            let split = split_by_affinity(&r.devices, &available, affinity);
            (available, taken, preferred_from, split)
        };
        let (aligned, unaligned, loose) = split;
        // Upstream's order: the affinity's devices (the plugin's preferred
        // first when they are more than needed), then the plugin's
        // preferred, then the other nodes', then those on no node.
        if required - taken.len() < aligned.len() {
            let from: BTreeSet<String> = aligned.union(&taken).cloned().collect();
            let preferred = preferred_allocation(preferred_from, from, &taken, required).await?;
            let preferred = preferred.intersection(&aligned).cloned().collect();
            if take_from(required, &mut taken, &preferred)
                || take_from(required, &mut taken, &aligned)
            {
                return Ok(Some(taken));
            }
        } else {
            if take_from(required, &mut taken, &aligned) {
                return Ok(Some(taken));
            }
            let from: BTreeSet<String> = available.union(&taken).cloned().collect();
            let preferred = preferred_allocation(preferred_from, from, &taken, required).await?;
            let preferred = preferred.intersection(&available).cloned().collect();
            if [&preferred, &unaligned, &loose]
                .into_iter()
                .any(|from| take_from(required, &mut taken, from))
            {
                return Ok(Some(taken));
            }
        }
        Err(DeviceError::Short {
            requested: required,
            got: taken.len(),
        })
    }

    /// What a container starts with from its devices (upstream's
    /// GetDeviceRunContainerOptions): PreStartContainer first where a
    /// plugin asks for it; a container without its allocation (the kubelet
    /// restarted without a checkpoint) allocated again. Only a pod being
    /// started asks, and it is active.
    pub async fn run_options(&self, pod: &Pod, c: &Container) -> Result<RunOptions, DeviceError> {
        let uid = PodUid::of(pod).to_string();
        let mut reallocate = false;
        for (resource, count) in extended_limits(c) {
            if count == 0 || !self.inner.state.lock().is_device_plugin_resource(&resource) {
                continue;
            }
            self.pre_start(&uid, &c.name, &resource).await?;
            let state = self.inner.state.lock();
            if state
                .pods
                .get(&uid)
                .and_then(|cs| cs.get(&c.name))
                .and_then(|rs| rs.get(&resource))
                .is_none()
            {
                reallocate = true;
            }
        }
        if reallocate {
            tracing::info!(pod = %kubelet_core::types::pod_full_name(pod), container = %c.name, "Needs to re-allocate device plugin resources for pod");
            self.allocate_container(pod, c, None, None).await?;
        }
        let state = self.inner.state.lock();
        Ok(state
            .pods
            .get(&uid)
            .and_then(|cs| cs.get(&c.name))
            .map(|rs| merge_responses(rs.values().map(|a| &a.response)))
            .unwrap_or_default())
    }

    /// Upstream's callPreStartContainerIfNeeded.
    async fn pre_start(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
    ) -> Result<(), DeviceError> {
        let (plugin, ids) = {
            let state = self.inner.state.lock();
            let Some(r) = state.resources.get(resource) else {
                return Err(DeviceError::NoEndpoint(resource.into()));
            };
            if !r.options().is_some_and(|o| o.pre_start_required) {
                return Ok(());
            }
            let ids = state
                .pods
                .get(uid)
                .and_then(|cs| cs.get(container))
                .and_then(|rs| rs.get(resource))
                .map(Allocation::devices)
                .ok_or_else(|| DeviceError::NotAllocated {
                    pod: uid.into(),
                    container: container.into(),
                    resource: resource.into(),
                })?;
            (r.plugins.last().cloned(), ids)
        };
        let Some(mut plugin) = plugin else {
            return Err(DeviceError::Stopped(resource.into()));
        };
        let request = api::PreStartContainerRequest {
            devices_ids: ids.into_iter().collect(),
        };
        within(
            PRE_START_TIMEOUT,
            plugin.client.pre_start_container(request),
        )
        .await
        .map_err(DeviceError::PreStart)?;
        Ok(())
    }

    /// A container's devices (PodResources' List and Get): one entry per
    /// device and NUMA node, as upstream lists them.
    pub fn container_devices(&self, uid: &PodUid, container: &str) -> Vec<DeviceInstance> {
        let state = self.inner.state.lock();
        state
            .pods
            .get(uid.as_str())
            .and_then(|cs| cs.get(container))
            .into_iter()
            .flatten()
            .flat_map(|(resource, a)| {
                a.ids.iter().flat_map(move |(numa, ids)| {
                    ids.iter().map(move |id| DeviceInstance {
                        resource: resource.clone(),
                        id: id.clone(),
                        numa_node: (*numa != NO_TOPOLOGY).then_some(*numa),
                    })
                })
            })
            .collect()
    }

    /// Every healthy device of every resource (PodResources'
    /// GetAllocatableResources), one entry per device and NUMA node.
    pub fn allocatable_devices(&self) -> Vec<DeviceInstance> {
        let state = self.inner.state.lock();
        let mut out = Vec::new();
        for (resource, r) in &state.resources {
            for id in &r.healthy {
                let nodes = numa_nodes(r.devices.get(id));
                let nodes: Vec<Option<i64>> = if nodes.is_empty() {
                    vec![None]
                } else {
                    nodes.into_iter().map(Some).collect()
                };
                out.extend(nodes.into_iter().map(|numa_node| DeviceInstance {
                    resource: resource.clone(),
                    id: id.clone(),
                    numa_node,
                }));
            }
        }
        out
    }

    /// The health of a container's devices (ResourceHealthStatus: its
    /// status' `allocatedResourcesStatus`), by resource; a device its
    /// plugin no longer lists counts as healthy, as upstream counts it.
    pub fn allocated_resources_status(&self, uid: &PodUid, container: &str) -> Vec<ResourceStatus> {
        let state = self.inner.state.lock();
        let Some(resources) = state
            .pods
            .get(uid.as_str())
            .and_then(|cs| cs.get(container))
        else {
            return Vec::new();
        };
        resources
            .iter()
            .filter(|(_, a)| !a.ids.is_empty())
            .map(|(resource, a)| {
                let known = state.resources.get(resource);
                ResourceStatus {
                    name: resource.clone(),
                    resources: Some(
                        a.devices()
                            .into_iter()
                            .map(|id| {
                                let healthy = known
                                    .and_then(|r| r.devices.get(&id))
                                    .is_none_or(|d| d.health == api::HEALTHY);
                                ResourceHealth {
                                    health: Some(
                                        if healthy { "Healthy" } else { "Unhealthy" }.into(),
                                    ),
                                    resource_id: id,
                                    message: None,
                                }
                            })
                            .collect(),
                    ),
                }
            })
            .collect()
    }
}

/// A call to a plugin, ended at `limit` as upstream's context deadline
/// ends it.
async fn within<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(tonic::Status::deadline_exceeded(
            "context deadline exceeded",
        ))
    })
}

/// The plugin's preferred devices among `available` (upstream's
/// callGetPreferredAllocationIfAvailable): none when it offers no choice.
async fn preferred_allocation(
    plugin: Option<Plugin>,
    available: BTreeSet<String>,
    must_include: &BTreeSet<String>,
    size: usize,
) -> Result<BTreeSet<String>, DeviceError> {
    let Some(mut plugin) = plugin else {
        return Ok(BTreeSet::new());
    };
    let request = api::PreferredAllocationRequest {
        container_requests: vec![api::ContainerPreferredAllocationRequest {
            available_device_i_ds: available.into_iter().collect(),
            must_include_device_i_ds: must_include.iter().cloned().collect(),
            allocation_size: i32::try_from(size).unwrap_or(i32::MAX),
        }],
    };
    let answer = within(
        ALLOCATE_TIMEOUT,
        plugin.client.get_preferred_allocation(request),
    )
    .await
    .map_err(DeviceError::Preferred)?
    .into_inner();
    Ok(answer
        .container_responses
        .first()
        .map(|r| r.device_i_ds.iter().cloned().collect())
        .unwrap_or_default())
}

/// `available` split as upstream's filterByAffinity: the devices on a
/// NUMA node of the affinity, those on other nodes only, those on none.
/// Without an affinity or devices with a topology, all are in the last.
fn split_by_affinity(
    devices: &BTreeMap<String, api::Device>,
    available: &BTreeSet<String>,
    affinity: Option<BitMask>,
) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let (mut aligned, mut unaligned, mut loose) = Default::default();
    let Some(mask) = affinity.filter(|_| has_topology(devices)) else {
        return (aligned, unaligned, available.clone());
    };
    for id in available {
        let nodes = node_mask(devices.get(id));
        let set: &mut BTreeSet<String> = if nodes.0 == 0 {
            &mut loose
        } else if nodes.0 & mask.0 != 0 {
            &mut aligned
        } else {
            &mut unaligned
        };
        set.insert(id.clone());
    }
    (aligned, unaligned, loose)
}

/// Whether any device of a resource says which NUMA nodes it is on
/// (upstream's deviceHasTopologyAlignment).
fn has_topology(devices: &BTreeMap<String, api::Device>) -> bool {
    devices.values().any(|d| !numa_nodes(Some(d)).is_empty())
}

/// The NUMA nodes a device says it is on, as a mask (empty: none).
fn node_mask(d: Option<&api::Device>) -> BitMask {
    BitMask::of(
        numa_nodes(d)
            .into_iter()
            .filter_map(|n| u32::try_from(n).ok()),
    )
}

fn numa_nodes(d: Option<&api::Device>) -> Vec<i64> {
    d.and_then(|d| d.topology.as_ref())
        .map(|t| t.nodes.iter().map(|n| n.id).collect())
        .unwrap_or_default()
}

/// The devices `ids` by NUMA node (a device on none under
/// [`NO_TOPOLOGY`]), as upstream checkpoints them.
fn numa_of(
    devices: &BTreeMap<String, api::Device>,
    ids: &BTreeSet<String>,
) -> BTreeMap<i64, Vec<String>> {
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for id in ids {
        let nodes = numa_nodes(devices.get(id));
        if nodes.is_empty() {
            out.entry(NO_TOPOLOGY).or_default().push(id.clone());
        }
        for n in nodes {
            out.entry(n).or_default().push(id.clone());
        }
    }
    out
}

/// A container's plugins' answers merged as upstream's
/// deviceRunContainerOptions merges them: the first value of an
/// environment variable, device path, mount path or annotation wins; CDI
/// devices once each. Map entries are taken in key order (upstream's are
/// in Go's map order).
pub fn merge_responses<'a>(
    responses: impl Iterator<Item = &'a api::ContainerAllocateResponse>,
) -> RunOptions {
    let mut out = RunOptions::default();
    let mut seen: [HashSet<String>; 5] = Default::default();
    let [envs, devices, mounts, annotations, cdi] = &mut seen;
    for r in responses {
        let sorted_envs: BTreeMap<&String, &String> = r.envs.iter().collect();
        for (k, v) in sorted_envs {
            if envs.insert(k.clone()) {
                out.envs.push((k.clone(), v.clone()));
            }
        }
        for d in &r.devices {
            if devices.insert(d.container_path.clone()) {
                out.devices.push(cri::Device {
                    container_path: d.container_path.clone(),
                    host_path: d.host_path.clone(),
                    permissions: d.permissions.clone(),
                });
            }
        }
        for m in &r.mounts {
            if mounts.insert(m.container_path.clone()) {
                out.mounts.push(cri::Mount {
                    container_path: m.container_path.clone(),
                    host_path: m.host_path.clone(),
                    readonly: m.read_only,
                    ..Default::default()
                });
            }
        }
        let sorted_annotations: BTreeMap<&String, &String> = r.annotations.iter().collect();
        for (k, v) in sorted_annotations {
            if annotations.insert(k.clone()) {
                out.annotations.push((k.clone(), v.clone()));
            }
        }
        for d in &r.cdi_devices {
            if cdi.insert(d.name.clone()) {
                out.cdi_devices.push(d.name.clone());
            }
        }
    }
    out
}

/// The state a checkpoint file holds: its allocations (restored, kept for
/// their containers) and its registered resources, each as stopped since
/// now (gone after the grace unless its plugin registers again). None or
/// a corrupt file leaves the manager empty, as upstream starts.
fn read_checkpoint(path: &Path) -> State {
    let mut state = State::default();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return state,
        Err(e) => {
            tracing::error!(error = %e, checkpoint = %path.display(), "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date");
            return state;
        }
    };
    let data = match Data::decode(&bytes) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, checkpoint = %path.display(), "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date");
            return state;
        }
    };
    for e in data.pod_device_entries.unwrap_or_default() {
        let response = match api::ContainerAllocateResponse::decode(
            e.alloc_resp.as_deref().unwrap_or_default(),
        ) {
            Ok(r) => r,
            Err(err) => {
                tracing::error!(error = %err, pod_uid = %e.pod_uid, container = %e.container_name, resource = %e.resource_name, "Can't unmarshal allocResp");
                continue;
            }
        };
        let ids = e
            .device_ids
            .unwrap_or_default()
            .into_iter()
            .map(|(numa, ids)| (numa, ids.unwrap_or_default()))
            .collect();
        state
            .pods
            .entry(e.pod_uid)
            .or_default()
            .entry(e.container_name)
            .or_default()
            .insert(
                e.resource_name,
                Allocation {
                    ids,
                    response,
                    restored: true,
                },
            );
    }
    let now = Instant::now();
    for resource in data.registered_devices.unwrap_or_default().into_keys() {
        state.resources.insert(
            resource,
            Resource {
                stopped: Some((now, None)),
                ..Default::default()
            },
        );
    }
    state
}
