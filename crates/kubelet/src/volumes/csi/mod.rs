//! CSI volumes (upstream's csi plugin, kubelet side): the drivers the
//! plugin manager registered, and each pod volume staged and published
//! through its driver's Node service, in upstream's layout
//! (`kubelet_core::csi`), so either kubelet can clean up after the other.
//!
//! - **Set-up**: the CSIDriver object read (its lifecycle modes, attach,
//!   podInfoOnMount, fsGroupPolicy, token requests); an attachable volume
//!   waits until the attach/detach controller reports it attached and its
//!   VolumeAttachment gives the publish context; NodeStageVolume at the
//!   global mount (when the driver stages), then NodePublishVolume at
//!   `pods/<uid>/volumes/kubernetes.io~csi/<name>/mount` with
//!   `vol_data.json` beside it. Both calls are made once per kubelet
//!   process (again after a restart, as upstream's reconstruction makes
//!   them: the CSI spec makes them idempotent), and at every sync when the
//!   driver requires republish.
//! - **Tear-down** is read from disk (`vol_data.json`), so it works after a
//!   crash or for a pod set up by another kubelet: NodeUnpublishVolume, then
//!   NodeUnstageVolume once no other pod's volume names the same handle.
//! - Every call has a deadline (upstream's csiTimeout): a driver that hangs
//!   holds only the pods that use it.

pub mod nodeinfo;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequestStatus;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolumeClaim, PersistentVolumeClaimCondition, Pod, Secret,
};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubelet_api::objects::{get_cluster_object, get_object};
use kubelet_api::storage::patch_claim_status;
use kubelet_api::{ApiClient, ApiError};
use kubelet_core::claim::ExpansionFailure;
use kubelet_core::csi::{
    CSI_VOLUME_DIR, CsiVolume, DriverPolicy, PUBLISH_TARGET, TOKENS_ATTRIBUTE, VOL_DATA_FILE,
    VolData, access_mode, attachment_name, block_publish_path, block_staging_path,
    block_volume_dir, pod_info_attributes, staging_path, unique_volume_name,
};
use kubelet_core::failure::Cause;
use kubelet_core::types::PodUid;
use kubelet_plugin_api::csi::node_client::NodeClient;
use kubelet_plugin_api::csi::node_service_capability::{self, rpc};
use kubelet_plugin_api::csi::volume_capability::{
    AccessMode, AccessType, BlockVolume, MountVolume,
};
use kubelet_plugin_api::csi::{
    CapacityRange, NodeExpandVolumeRequest, NodeGetCapabilitiesRequest, NodeGetVolumeStatsRequest,
    NodePublishVolumeRequest, NodeStageVolumeRequest, NodeUnpublishVolumeRequest,
    NodeUnstageVolumeRequest, VolumeCapability,
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tonic::transport::Channel;

use super::block;
use super::mount;
use super::ownership;
use super::token::{TokenManager, TokenSpec};
use crate::events::{Involved, NORMAL, Recorder, WARNING};
use kubelet_tasks::blocking;

/// Upstream's events of a node expansion.
pub const FILE_SYSTEM_RESIZE_SUCCESSFUL: &str = "FileSystemResizeSuccessful";
pub const FILE_SYSTEM_RESIZE_FAILED: &str = "FileSystemResizeFailed";

/// Upstream's csiTimeout: the deadline of every call to a driver.
pub const CSI_TIMEOUT: Duration = Duration::from_secs(120);

/// A registered driver.
#[derive(Clone)]
struct Driver {
    endpoint: PathBuf,
    version: (u64, u64, u64),
    channel: Channel,
}

/// The CSI drivers registered on this node (upstream's csiDrivers store),
/// shared by the plugin manager (which fills it) and the volume manager.
#[derive(Clone, Default)]
pub struct CsiDrivers {
    drivers: Arc<RwLock<HashMap<String, Driver>>>,
}

impl CsiDrivers {
    /// Register `name` at `endpoint`; upstream's refusal when a driver of
    /// that name with the same or a higher version is registered already.
    pub fn insert(
        &self,
        name: &str,
        endpoint: &Path,
        version: (u64, u64, u64),
    ) -> Result<(), String> {
        let mut drivers = self.drivers.write();
        if let Some(d) = drivers.get(name)
            && d.version >= version
            && d.endpoint != endpoint
        {
            let (a, b, c) = d.version;
            return Err(format!(
                "kubernetes.io/csi: RegisterPlugin for CSI driver {name:?} failed. Another driver with the same name is already registered with a higher supported version: \"{a}.{b}.{c}\""
            ));
        }
        drivers.insert(
            name.to_owned(),
            Driver {
                endpoint: endpoint.to_owned(),
                version,
                channel: kubelet_plugin_api::unix_channel(endpoint.to_owned(), CSI_TIMEOUT),
            },
        );
        Ok(())
    }

    /// Forget `name` when it is still the driver at `endpoint`.
    pub fn remove(&self, name: &str, endpoint: &Path) {
        let mut drivers = self.drivers.write();
        if drivers.get(name).is_some_and(|d| d.endpoint == endpoint) {
            drivers.remove(name);
        }
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.drivers.read().keys().cloned().collect();
        names.sort();
        names
    }

    /// The Node service of `name`.
    pub fn node(&self, name: &str) -> Result<NodeClient<Channel>, CsiError> {
        self.drivers
            .read()
            .get(name)
            .map(|d| NodeClient::new(d.channel.clone()))
            .ok_or_else(|| CsiError::NotRegistered(name.to_owned()))
    }
}

/// Why a CSI volume could not be set up or torn down, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    #[error(
        "kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name {0} not found in the list of registered CSI drivers"
    )]
    NotRegistered(String),
    #[error("rpc error: code = {code:?} desc = {message}", code = .0.code(), message = .0.message())]
    Rpc(#[source] tonic::Status),
    #[error("kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: {0}")]
    LifecycleMode(String),
    #[error("Volume not attached according to node status for volume {0:?}")]
    NotAttached(String),
    #[error("kubernetes.io/csi: mounter.SetUpAt failed to fetch publishContext: {0}")]
    Attachment(String),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("fetching {what} {namespace}/{name} failed: {message}")]
    Secret {
        what: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    #[error(transparent)]
    Token(#[from] super::token::TokenError),
    #[error("kubernetes.io/csi: {0}")]
    Io(#[from] std::io::Error),
}

impl CsiError {
    /// Everything here may clear on its own (a driver registering, an
    /// attachment made, an object created): retried with the pod's backoff.
    pub fn cause(&self) -> Cause {
        Cause::Transient
    }
}

/// The attachable volumes pods on this node use (upstream's
/// `volumesInUse`): from a pod's set-up until the volume is unstaged, so the
/// attach/detach controller never detaches one under a pod. A change wakes
/// node status, which reports it at once.
#[derive(Clone, Default)]
pub struct VolumesInUse {
    volumes: Arc<Mutex<HashMap<String, HashSet<PathBuf>>>>,
    changed: Arc<tokio::sync::Notify>,
}

impl VolumesInUse {
    /// Tracked volumes; `changed` is notified when the set changes.
    pub fn new(changed: Arc<tokio::sync::Notify>) -> Self {
        VolumesInUse {
            volumes: Arc::default(),
            changed,
        }
    }

    /// The unique volume names, sorted, as node status reports them.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.volumes.lock().keys().cloned().collect();
        names.sort();
        names
    }

    fn add(&self, name: String, pod_dir: &Path) {
        let new = {
            let mut map = self.volumes.lock();
            let new = !map.contains_key(&name);
            map.entry(name).or_default().insert(pod_dir.to_owned());
            new
        };
        if new {
            self.changed.notify_one();
        }
    }

    /// `pod_dir` no longer uses `name`: the volume goes when no pod does.
    fn release(&self, name: &str, pod_dir: &Path) {
        let gone = {
            let mut map = self.volumes.lock();
            let last = map.get_mut(name).is_some_and(|pods| {
                pods.remove(pod_dir);
                pods.is_empty()
            });
            last && map.remove(name).is_some()
        };
        if gone {
            self.changed.notify_one();
        }
    }
}

/// What CSI volumes need beyond the drivers: the API server, the node, and
/// service account tokens for drivers that ask for them.
#[derive(Clone)]
pub struct CsiVolumes {
    pub drivers: CsiDrivers,
    pub api: ApiClient,
    pub node_name: String,
    pub node: watch::Receiver<Option<Arc<Node>>>,
    pub root_dir: PathBuf,
    pub tokens: TokenManager,
    pub in_use: VolumesInUse,
    /// Publish targets and staging paths done by this process, each with
    /// whether its driver wants it published again at every sync
    /// (requiresRepublish).
    done: Arc<Mutex<HashMap<PathBuf, bool>>>,
    /// Volumes (driver, handle) whose last NodeExpandVolume failed finally
    /// (upstream's volumes in failed expansion with final errors).
    expansion_failed: Arc<Mutex<HashSet<(String, String)>>>,
}

/// What publishing a volume needs (`CsiVolumes::prepare`).
struct Prepared {
    node: NodeClient<Channel>,
    policy: DriverPolicy,
    publish_context: HashMap<String, String>,
    caps: Vec<i32>,
}

/// A set-up CSI volume: where the pod's containers find it.
pub struct Published {
    pub target: PathBuf,
    pub read_only: bool,
}

impl CsiVolumes {
    pub fn new(
        drivers: CsiDrivers,
        api: ApiClient,
        node_name: String,
        node: watch::Receiver<Option<Arc<Node>>>,
        root_dir: PathBuf,
        tokens: TokenManager,
        in_use: VolumesInUse,
    ) -> Self {
        CsiVolumes {
            drivers,
            api,
            node_name,
            node,
            root_dir,
            tokens,
            in_use,
            expansion_failed: Arc::default(),
            done: Arc::default(),
        }
    }

    /// The attachable volumes pods published before this process started,
    /// read from their `vol_data.json` (upstream's reconstruction), so
    /// they are reported in use before their pods sync again or are torn
    /// down. A driver whose CSIDriver cannot be read counts as attachable
    /// (reporting a volume in use is the safe side).
    pub async fn reconstruct_in_use(&self) {
        let root = self.root_dir.clone();
        let pods = root.join("pods");
        let found = blocking(move || {
            let mut found = Vec::new();
            let entries = match std::fs::read_dir(&pods) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
                r => r?,
            };
            for entry in entries {
                let pod_dir = entry?.path();
                let volumes = read_volumes(&pod_dir.join("volumes").join(CSI_VOLUME_DIR))?;
                found.extend(
                    volumes
                        .into_iter()
                        .filter(|(_, d)| d.volume_lifecycle_mode != kubelet_core::csi::EPHEMERAL)
                        .map(|(_, d)| (pod_dir.clone(), d)),
                );
                let block = read_block_volumes(&root, &pod_dir)?;
                found.extend(
                    block
                        .into_iter()
                        .filter_map(|(_, _, d)| Some((pod_dir.clone(), d?))),
                );
            }
            Ok::<_, std::io::Error>(found)
        })
        .await;
        let found = match found {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "reading the published CSI volumes; none reported in use until their pods sync");
                return;
            }
        };
        let mut attachable: HashMap<String, bool> = HashMap::new();
        for (pod_dir, data) in found {
            let attach = match attachable.get(&data.driver_name) {
                Some(a) => *a,
                None => {
                    let driver: Result<Option<CSIDriver>, _> =
                        get_cluster_object(&self.api, "CSIDriver", &data.driver_name).await;
                    let a = driver.map_or(true, |d| DriverPolicy::of(d.as_ref()).attach_required);
                    attachable.insert(data.driver_name.clone(), a);
                    a
                }
            };
            if attach {
                self.in_use.add(
                    unique_volume_name(&data.driver_name, &data.volume_handle),
                    &pod_dir,
                );
            }
        }
    }

    /// Stage (when the driver stages) and publish `volume` for `pod`, its
    /// directory `pod_dir`, with the pod's `fs_group`; at
    /// `volumes/kubernetes.io~csi/<spec name>` (the PV's name, or the
    /// inline volume's), as upstream.
    pub async fn set_up(
        &self,
        pod: &Pod,
        pod_dir: &Path,
        volume: &CsiVolume,
        fs_group: Option<i64>,
        on_root_mismatch: bool,
    ) -> Result<Published, CsiError> {
        if volume.block {
            return self.set_up_block(pod, pod_dir, volume).await;
        }
        let dir = pod_dir
            .join("volumes")
            .join(CSI_VOLUME_DIR)
            .join(&volume.spec_name);
        let target = dir.join(PUBLISH_TARGET);
        let published = Published {
            target: target.clone(),
            read_only: volume.read_only,
        };
        // Published already, by this process: nothing to ask anyone.
        if self.done.lock().get(&target) == Some(&false) {
            return Ok(published);
        }
        let Prepared {
            mut node,
            policy,
            publish_context,
            caps,
        } = self.prepare(pod_dir, volume).await?;
        let persistent = volume.access_modes.is_some();
        let has = |t: rpc::Type| caps.contains(&(t as i32));
        let mount_group = has(rpc::Type::VolumeMountGroup);
        let capability = capability(volume, fs_group, &caps);
        // Persistent volumes are staged when the driver stages.
        let staging = if persistent && has(rpc::Type::StageUnstageVolume) {
            self.stage(&mut node, volume, &capability, &publish_context)
                .await?
        } else {
            String::new()
        };
        let (context, secrets) = self.publish_inputs(pod, volume, &policy).await?;
        let data = self.vol_data(volume);
        let parent = dir.clone();
        blocking(move || {
            mount::ensure_dir(&parent, 0o750)?;
            write_vol_data(&parent, &data)
        })
        .await?;
        let request = NodePublishVolumeRequest {
            volume_id: volume.handle.clone(),
            publish_context,
            staging_target_path: staging,
            target_path: target.to_string_lossy().into_owned(),
            volume_capability: Some(capability),
            readonly: volume.read_only,
            secrets,
            volume_context: context.into_iter().collect(),
        };
        if let Err(status) = node.node_publish_volume(deadline(request)).await {
            // A final answer: nothing was published, so nothing is left
            // for a tear-down to ask the driver about (upstream's
            // removeMountDir).
            if is_final(&status) {
                let gone = dir.clone();
                forget(blocking(move || forget_volume_dir(&gone)).await, &dir);
            }
            return Err(CsiError::Rpc(status));
        }
        let apply = !mount_group
            && fs_group.is_some()
            && policy.kubelet_applies_fs_group(
                &volume.fs_type,
                volume.read_only,
                volume.access_modes.as_deref(),
            );
        if let Some(gid) = fs_group.filter(|_| apply) {
            let owned = target.clone();
            blocking(move || ownership::apply(&owned, gid, false, on_root_mismatch)).await?;
        }
        self.done.lock().insert(target, policy.requires_republish);
        Ok(published)
    }

    /// What publishing `volume` needs from the driver and the API server:
    /// the driver's client, its CSIDriver's policy (the volume's lifecycle
    /// mode checked against it), the publish context of an attachable
    /// volume (attached first, as upstream's attach operations wait before
    /// any mount; reported in use from then on) and the Node service's
    /// capabilities.
    async fn prepare(&self, pod_dir: &Path, volume: &CsiVolume) -> Result<Prepared, CsiError> {
        let mut node = self.drivers.node(&volume.driver)?;
        let driver: Option<CSIDriver> =
            get_cluster_object(&self.api, "CSIDriver", &volume.driver).await?;
        let policy = DriverPolicy::of(driver.as_ref());
        policy
            .supports(volume.lifecycle_mode(), &volume.driver)
            .map_err(CsiError::LifecycleMode)?;
        let persistent = volume.access_modes.is_some();
        let publish_context = if persistent && policy.attach_required {
            self.in_use
                .add(unique_volume_name(&volume.driver, &volume.handle), pod_dir);
            self.attached(volume).await?
        } else {
            HashMap::new()
        };
        let caps = capabilities(&mut node).await?;
        Ok(Prepared {
            node,
            policy,
            publish_context,
            caps,
        })
    }

    /// Stage and publish the raw block volume `volume` (a PV of
    /// `volumeMode: Block`) for `pod`, as upstream's csiBlockMapper: its
    /// `vol_data.json` under `volumeDevices/<pv>/data`, NodeStageVolume at
    /// `volumeDevices/staging/<pv>` (when the driver stages),
    /// NodePublishVolume at `volumeDevices/publish/<pv>/<uid>`, then the
    /// device the driver made there mapped for the pod ([`block::map`]);
    /// the pod's link is what its containers are given.
    async fn set_up_block(
        &self,
        pod: &Pod,
        pod_dir: &Path,
        volume: &CsiVolume,
    ) -> Result<Published, CsiError> {
        let uid = PodUid::of(pod).to_string();
        let link = block::pod_link(pod_dir, CSI_VOLUME_DIR, &volume.spec_name);
        let published = Published {
            target: link.clone(),
            read_only: volume.read_only,
        };
        let target = block_publish_path(&self.root_dir, &volume.spec_name, &uid);
        if self.done.lock().get(&target) == Some(&false) {
            return Ok(published);
        }
        let Prepared {
            mut node,
            policy,
            publish_context,
            caps,
        } = self.prepare(pod_dir, volume).await?;
        let capability = capability(volume, None, &caps);
        let dir = block_volume_dir(&self.root_dir, &volume.spec_name);
        let data = self.vol_data(volume);
        let data_dir = dir.join("data");
        blocking(move || {
            mount::ensure_dir(&data_dir, 0o750)?;
            write_vol_data(&data_dir, &data)
        })
        .await?;
        let staging = block_staging_path(&self.root_dir, &volume.spec_name);
        if caps.contains(&(rpc::Type::StageUnstageVolume as i32))
            && !self.done.lock().contains_key(&staging)
        {
            let secrets = self
                .secrets("NodeStageSecretRef", volume.stage_secret.as_ref())
                .await?;
            let made = staging.clone();
            blocking(move || mount::ensure_dir(&made, 0o750)).await?;
            let request = stage_request(volume, &staging, &capability, &publish_context, secrets);
            node.node_stage_volume(deadline(request))
                .await
                .map_err(CsiError::Rpc)?;
            self.done.lock().insert(staging.clone(), false);
        }
        let (context, secrets) = self.publish_inputs(pod, volume, &policy).await?;
        // The pod's link first (to where the device will be): a tear-down
        // finds the volume by it, whatever this set-up got to.
        let (published_at, linked) = (target.clone(), link.clone());
        blocking(move || {
            if let Some(parent) = published_at.parent() {
                mount::ensure_dir(parent, 0o750)?;
            }
            block::relink(&published_at, &linked)
        })
        .await?;
        let request = NodePublishVolumeRequest {
            volume_id: volume.handle.clone(),
            publish_context,
            // Upstream gives the staging path whether the driver stages or not.
            staging_target_path: staging.to_string_lossy().into_owned(),
            target_path: target.to_string_lossy().into_owned(),
            volume_capability: Some(capability),
            readonly: volume.read_only,
            secrets,
            volume_context: context.into_iter().collect(),
        };
        node.node_publish_volume(deadline(request))
            .await
            .map_err(CsiError::Rpc)?;
        let (device, global) = (target.clone(), dir.join("dev"));
        blocking(move || block::map(&device, &global, &uid, &link)).await?;
        self.done.lock().insert(target, policy.requires_republish);
        Ok(published)
    }

    /// A publish target's `vol_data.json` (upstream's volDataKey).
    fn vol_data(&self, volume: &CsiVolume) -> VolData {
        VolData {
            spec_vol_id: volume.spec_name.clone(),
            volume_handle: volume.handle.clone(),
            driver_name: volume.driver.clone(),
            node_name: self.node_name.clone(),
            attachment_id: attachment_name(&volume.handle, &volume.driver, &self.node_name),
            volume_lifecycle_mode: volume.lifecycle_mode().to_owned(),
        }
    }

    /// NodeStageVolume at the volume's global mount (once per process),
    /// `vol_data.json` beside it; the staging path.
    async fn stage(
        &self,
        node: &mut NodeClient<Channel>,
        volume: &CsiVolume,
        capability: &VolumeCapability,
        publish_context: &HashMap<String, String>,
    ) -> Result<String, CsiError> {
        let path = staging_path(&self.root_dir, &volume.driver, &volume.handle);
        let staging = path.to_string_lossy().into_owned();
        if self.done.lock().contains_key(&path) {
            return Ok(staging);
        }
        let secrets = self
            .secrets("NodeStageSecretRef", volume.stage_secret.as_ref())
            .await?;
        let data = VolData {
            volume_handle: volume.handle.clone(),
            driver_name: volume.driver.clone(),
            ..Default::default()
        };
        let made = path.clone();
        blocking(move || {
            mount::ensure_dir(&made, 0o750)?;
            write_vol_data(made.parent().unwrap_or(&made), &data)
        })
        .await?;
        let request = stage_request(volume, &path, capability, publish_context, secrets);
        if let Err(status) = node.node_stage_volume(deadline(request)).await {
            if is_final(&status) {
                let gone = path.clone();
                let cleared = blocking(move || {
                    mount::unmount_and_rmdir(&gone)?;
                    forget_volume_dir(gone.parent().unwrap_or(&gone))
                })
                .await;
                forget(cleared, &path);
            }
            return Err(CsiError::Rpc(status));
        }
        self.done.lock().insert(path, false);
        Ok(staging)
    }

    /// NodePublishVolume's volume context and secrets: the volume's
    /// attributes, the pod's (podInfoOnMount), its service account tokens
    /// (tokenRequests; in the secrets when the driver asks) and the
    /// publish secret's data.
    async fn publish_inputs(
        &self,
        pod: &Pod,
        volume: &CsiVolume,
        policy: &DriverPolicy,
    ) -> Result<(BTreeMap<String, String>, HashMap<String, String>), CsiError> {
        let mut context: BTreeMap<String, String> = volume.attributes.clone();
        if policy.pod_info_on_mount {
            context.extend(pod_info_attributes(pod, volume.access_modes.is_none()));
        }
        let mut secrets = self
            .secrets("NodePublishSecretRef", volume.publish_secret.as_ref())
            .await?;
        if !policy.token_requests.is_empty() {
            let tokens = self.tokens(pod, policy).await?;
            if policy.token_in_secrets {
                secrets.insert(TOKENS_ATTRIBUTE.to_owned(), tokens);
            } else {
                context.insert(TOKENS_ATTRIBUTE.to_owned(), tokens);
            }
        }
        Ok((context, secrets))
    }

    /// Expand the file system of a published volume whose claim waits for
    /// the node (upstream's NodeExpander): the claim marked
    /// NodeResizeInProgress, NodeExpandVolume with the PV's
    /// nodeExpandSecretRef (a driver without EXPAND_VOLUME has nothing to
    /// do on the node), FileSystemResizeSuccessful events on the pod and
    /// the claim, then the claim's capacity set and its resize status and
    /// conditions cleared. A failure is a FileSystemResizeFailed event;
    /// the driver's refusal also marks the claim as upstream's does
    /// ([`ExpansionFailure`]). It never holds the pod's start; what is not
    /// infeasible is tried again at the next sync.
    pub async fn expand(
        &self,
        pod: &Pod,
        volume: &CsiVolume,
        claim: &super::claims::Resolved,
        expansion: &kubelet_core::claim::NodeExpansion,
        events: &Recorder,
    ) {
        let pod_ref = Involved::pod(pod, None);
        let what = format!("for volume {:?}", volume.spec_name);
        let key = (volume.driver.clone(), volume.handle.clone());
        let error = match self.expand_volume(pod, volume, claim, expansion).await {
            Ok(()) => {
                self.expansion_failed.lock().remove(&key);
                let message = format!(
                    "MountVolume.NodeExpandVolume succeeded {what} {}",
                    self.node_name
                );
                let claim_ref = Involved::claim(&claim.namespace, &claim.name, &claim.uid);
                events.event(
                    &pod_ref,
                    NORMAL,
                    FILE_SYSTEM_RESIZE_SUCCESSFUL,
                    message.clone(),
                );
                events.event(&claim_ref, NORMAL, FILE_SYSTEM_RESIZE_SUCCESSFUL, message);
                return;
            }
            Err(CsiError::Rpc(status)) => {
                let recovering =
                    expansion.request_differs && self.expansion_failed.lock().contains(&key);
                let failure = ExpansionFailure::of(status.code() as i32, recovering);
                let error = failure.error(&CsiError::Rpc(status).to_string());
                if failure == ExpansionFailure::InUse {
                    tracing::warn!(volume = %volume.spec_name, "MountVolume.NodeExpandVolume failed with {error}");
                    return;
                }
                self.expansion_failed.lock().insert(key);
                if let Err(e) = self.mark_expansion_failed(claim, failure, &error).await {
                    tracing::warn!(claim = %claim.name, "MountVolume.NodeExpandVolume failed to mark node expansion as failed: {e}");
                }
                error
            }
            Err(e) => e.to_string(),
        };
        events.event(
            &pod_ref,
            WARNING,
            FILE_SYSTEM_RESIZE_FAILED,
            format!("MountVolume.NodeExpandVolume failed {what} : {error}"),
        );
    }

    /// The claim's status after a refused expansion (upstream's
    /// MarkNodeExpansionInfeasible and MarkNodeExpansionFailedCondition).
    async fn mark_expansion_failed(
        &self,
        claim: &super::claims::Resolved,
        failure: ExpansionFailure,
        error: &str,
    ) -> Result<(), CsiError> {
        let conditions = self.claim_conditions(claim).await?;
        let now = self.tokens.clock().now_time();
        if let Some(status) = failure.claim_status(&conditions, error, now) {
            patch_claim_status(&self.api, &claim.namespace, &claim.name, status).await?;
        }
        Ok(())
    }

    async fn expand_volume(
        &self,
        pod: &Pod,
        volume: &CsiVolume,
        claim: &super::claims::Resolved,
        expansion: &kubelet_core::claim::NodeExpansion,
    ) -> Result<(), CsiError> {
        use kubelet_core::claim::{NODE_RESIZE_IN_PROGRESS, RESIZE_CONDITIONS};
        let patch = |status: serde_json::Value| {
            patch_claim_status(&self.api, &claim.namespace, &claim.name, status)
        };
        let mut node = self.drivers.node(&volume.driver)?;
        patch(
            serde_json::json!({"allocatedResourceStatuses": {"storage": NODE_RESIZE_IN_PROGRESS}}),
        )
        .await?;
        let caps = capabilities(&mut node).await?;
        if caps.contains(&(rpc::Type::ExpandVolume as i32)) {
            let secrets = self
                .secrets("NodeExpandSecretRef", volume.expand_secret.as_ref())
                .await?;
            let target = self.publish_target(pod, volume);
            let staging = if caps.contains(&(rpc::Type::StageUnstageVolume as i32)) {
                staging_path(&self.root_dir, &volume.driver, &volume.handle)
                    .to_string_lossy()
                    .into_owned()
            } else {
                String::new()
            };
            node.node_expand_volume(deadline(NodeExpandVolumeRequest {
                volume_id: volume.handle.clone(),
                volume_path: target.to_string_lossy().into_owned(),
                capacity_range: Some(CapacityRange {
                    required_bytes: expansion.new_bytes,
                    limit_bytes: 0,
                }),
                staging_target_path: staging,
                volume_capability: Some(capability(volume, None, &caps)),
                secrets,
            }))
            .await
            .map_err(CsiError::Rpc)?;
        }
        // The claim as the node leaves it: its new capacity, no resize
        // status, no resize condition.
        let conditions: Vec<_> = self
            .claim_conditions(claim)
            .await?
            .into_iter()
            .filter(|c| !RESIZE_CONDITIONS.contains(&c.type_.as_str()))
            .collect();
        patch(serde_json::json!({
            "capacity": {"storage": expansion.new_size},
            "allocatedResourceStatuses": {"storage": null},
            "conditions": conditions,
        }))
        .await?;
        Ok(())
    }

    /// The claim's conditions as the API server has them now.
    async fn claim_conditions(
        &self,
        claim: &super::claims::Resolved,
    ) -> Result<Vec<PersistentVolumeClaimCondition>, CsiError> {
        let current: Option<PersistentVolumeClaim> = get_object(
            &self.api,
            "PersistentVolumeClaim",
            &claim.namespace,
            &claim.name,
        )
        .await?;
        Ok(current
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .unwrap_or_default())
    }

    /// A published volume's usage from its driver (NodeGetVolumeStats, its
    /// BYTES and INODES figures, upstream's csi metrics); None when the
    /// driver does not report it (no GET_VOLUME_STATS).
    pub async fn volume_stats(
        &self,
        driver: &str,
        handle: &str,
        target: &Path,
        at: std::time::SystemTime,
    ) -> Result<Option<kubelet_core::stats::FsStats>, CsiError> {
        use kubelet_plugin_api::csi::volume_usage::Unit;
        let mut node = self.drivers.node(driver)?;
        let caps = capabilities(&mut node).await?;
        if !caps.contains(&(rpc::Type::GetVolumeStats as i32)) {
            return Ok(None);
        }
        let staging_target_path = if caps.contains(&(rpc::Type::StageUnstageVolume as i32)) {
            staging_path(&self.root_dir, driver, handle)
                .to_string_lossy()
                .into_owned()
        } else {
            String::new()
        };
        let reply = node
            .node_get_volume_stats(deadline(NodeGetVolumeStatsRequest {
                volume_id: handle.to_owned(),
                volume_path: target.to_string_lossy().into_owned(),
                staging_target_path,
            }))
            .await
            .map_err(CsiError::Rpc)?
            .into_inner();
        let mut fs = kubelet_core::stats::FsStats::part_of(at, None, None, None);
        let count = |v: i64| u64::try_from(v).ok();
        for usage in reply.usage {
            match Unit::try_from(usage.unit) {
                Ok(Unit::Bytes) => {
                    fs.available_bytes = count(usage.available);
                    fs.capacity_bytes = count(usage.total);
                    fs.used_bytes = count(usage.used);
                }
                Ok(Unit::Inodes) => {
                    fs.inodes_free = count(usage.available);
                    fs.inodes = count(usage.total);
                    fs.inodes_used = count(usage.used);
                }
                _ => {}
            }
        }
        Ok(Some(fs))
    }

    /// Where `volume` of `pod` is published.
    fn publish_target(&self, pod: &Pod, volume: &CsiVolume) -> PathBuf {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        self.root_dir
            .join("pods")
            .join(uid)
            .join("volumes")
            .join(CSI_VOLUME_DIR)
            .join(&volume.spec_name)
            .join(PUBLISH_TARGET)
    }

    /// The publish context of an attachable volume: it must be attached to
    /// this node as the node's status says (upstream's
    /// VerifyControllerAttachedVolume), and its VolumeAttachment attached.
    async fn attached(&self, volume: &CsiVolume) -> Result<HashMap<String, String>, CsiError> {
        let unique = unique_volume_name(&volume.driver, &volume.handle);
        let reported = self.node.borrow().as_ref().is_some_and(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.volumes_attached.as_ref())
                .is_some_and(|a| a.iter().any(|v| v.name == unique))
        });
        if !reported {
            return Err(CsiError::NotAttached(volume.spec_name.clone()));
        }
        let name = attachment_name(&volume.handle, &volume.driver, &self.node_name);
        let attachment: Option<VolumeAttachment> =
            get_cluster_object(&self.api, "VolumeAttachment", &name).await?;
        let Some(status) = attachment.and_then(|a| a.status) else {
            return Err(CsiError::Attachment(format!(
                "volumeattachments.storage.k8s.io {name:?} not found"
            )));
        };
        if !status.attached {
            return Err(CsiError::Attachment(format!(
                "volume {} is not attached yet (VolumeAttachment {name})",
                volume.handle
            )));
        }
        Ok(status
            .attachment_metadata
            .unwrap_or_default()
            .into_iter()
            .collect())
    }

    /// The data of a secret a volume names (stage or publish secrets).
    async fn secrets(
        &self,
        what: &'static str,
        reference: Option<&(String, String)>,
    ) -> Result<HashMap<String, String>, CsiError> {
        let Some((namespace, name)) = reference else {
            return Ok(HashMap::new());
        };
        let fail = |message: String| CsiError::Secret {
            what,
            namespace: namespace.clone(),
            name: name.clone(),
            message,
        };
        let secret: Secret = get_object(&self.api, "Secret", namespace, name)
            .await
            .map_err(|e| fail(e.to_string()))?
            .ok_or_else(|| fail(format!("secrets {name:?} not found")))?;
        Ok(secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect())
    }

    /// The service account tokens the driver asks for, upstream's JSON
    /// (audience → TokenRequestStatus).
    async fn tokens(&self, pod: &Pod, policy: &DriverPolicy) -> Result<String, CsiError> {
        let mut out = BTreeMap::new();
        for (audience, expiration) in &policy.token_requests {
            let spec = pod.spec.as_ref();
            let (token, expires) = self
                .tokens
                .get_expiring(&TokenSpec {
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    service_account: spec
                        .and_then(|s| s.service_account_name.clone())
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "default".into()),
                    audience: Some(audience.clone()).filter(|a| !a.is_empty()),
                    expiration_seconds: expiration.unwrap_or(3600),
                    pod_name: pod.metadata.name.clone().unwrap_or_default(),
                    pod_uid: PodUid::of(pod),
                })
                .await?;
            let expiration_timestamp = Time(
                k8s_openapi::jiff::Timestamp::from_second(expires)
                    .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            );
            out.insert(
                audience.clone(),
                TokenRequestStatus {
                    token: Some(token),
                    expiration_timestamp: Some(expiration_timestamp),
                },
            );
        }
        Ok(serde_json::to_string(&out).unwrap_or_default())
    }

    /// Tear down every CSI volume of the pod at `pod_dir`, from what is on
    /// disk: unpublish, then unstage what no other pod uses.
    pub async fn tear_down_pod(&self, pod_dir: &Path) -> Result<(), CsiError> {
        self.tear_down_block(pod_dir).await?;
        let dir = pod_dir.join("volumes").join(CSI_VOLUME_DIR);
        let volumes = blocking(move || read_volumes(&dir)).await?;
        for (dir, data) in volumes {
            let mut node = self.drivers.node(&data.driver_name)?;
            let target = dir.join(PUBLISH_TARGET);
            node.node_unpublish_volume(deadline(NodeUnpublishVolumeRequest {
                volume_id: data.volume_handle.clone(),
                target_path: target.to_string_lossy().into_owned(),
            }))
            .await
            .map_err(CsiError::Rpc)?;
            self.done.lock().remove(&target);
            // The target is the driver's to remove; what is left must not be
            // a mount, and the directory goes with rmdir only.
            let gone = dir.clone();
            blocking(move || {
                mount::unmount_and_rmdir(&gone.join(PUBLISH_TARGET))?;
                mount::remove_file_if_present(&gone.join(VOL_DATA_FILE))?;
                mount::unmount_and_rmdir(&gone)
            })
            .await?;
            if data.volume_lifecycle_mode != kubelet_core::csi::EPHEMERAL {
                // Its expansion failures go with its publish, so the set
                // holds only volumes published here.
                self.expansion_failed
                    .lock()
                    .remove(&(data.driver_name.clone(), data.volume_handle.clone()));
                let unique = unique_volume_name(&data.driver_name, &data.volume_handle);
                self.unstage_unless_used(&mut node, &data, pod_dir).await?;
                self.in_use.release(&unique, pod_dir);
            }
        }
        Ok(())
    }

    /// Tear down the pod's raw block volumes, found by its links under
    /// `volumeDevices/kubernetes.io~csi` (upstream's UnmapVolume then
    /// UnmapDevice): the device unmapped for the pod, NodeUnpublishVolume,
    /// then, once no pod's bind is left in the volume's global map path,
    /// NodeUnstageVolume and the volume's directories removed.
    async fn tear_down_block(&self, pod_dir: &Path) -> Result<(), CsiError> {
        let uid = pod_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (root, dir) = (self.root_dir.clone(), pod_dir.to_owned());
        let volumes = blocking(move || read_block_volumes(&root, &dir)).await?;
        for (link, spec, data) in volumes {
            let dir = block_volume_dir(&self.root_dir, &spec);
            let (global, me, linked) = (dir.join("dev"), uid.clone(), link.clone());
            let others = blocking(move || {
                block::unmap(&global, &me, &linked)?;
                Ok(std::fs::read_dir(&global).map_or(0, Iterator::count))
            })
            .await?;
            // A link without the volume's data was never published.
            let Some(data) = data else { continue };
            let mut node = self.drivers.node(&data.driver_name)?;
            let target = block_publish_path(&self.root_dir, &spec, &uid);
            node.node_unpublish_volume(deadline(NodeUnpublishVolumeRequest {
                volume_id: data.volume_handle.clone(),
                target_path: target.to_string_lossy().into_owned(),
            }))
            .await
            .map_err(CsiError::Rpc)?;
            self.done.lock().remove(&target);
            if others > 0 {
                continue;
            }
            let staging = block_staging_path(&self.root_dir, &spec);
            let staged = blocking({
                let staging = staging.clone();
                move || Ok(staging.exists())
            })
            .await?;
            if staged
                && capabilities(&mut node)
                    .await?
                    .contains(&(rpc::Type::StageUnstageVolume as i32))
            {
                node.node_unstage_volume(deadline(NodeUnstageVolumeRequest {
                    volume_id: data.volume_handle.clone(),
                    staging_target_path: staging.to_string_lossy().into_owned(),
                }))
                .await
                .map_err(CsiError::Rpc)?;
            }
            self.done.lock().remove(&staging);
            // What the driver left (rmdir only: never through a mount), then
            // the volume's data.
            let publish_dir = target.parent().map(Path::to_owned).unwrap_or_default();
            blocking(move || {
                mount::unmount_and_rmdir(&staging)?;
                mount::unmount_and_rmdir(&publish_dir)?;
                mount::remove_file_if_present(&dir.join("data").join(VOL_DATA_FILE))?;
                mount::unmount_and_rmdir(&dir.join("data"))?;
                mount::unmount_and_rmdir(&dir.join("dev"))?;
                mount::unmount_and_rmdir(&dir)
            })
            .await?;
            self.expansion_failed
                .lock()
                .remove(&(data.driver_name.clone(), data.volume_handle.clone()));
            let unique = unique_volume_name(&data.driver_name, &data.volume_handle);
            self.in_use.release(&unique, pod_dir);
        }
        Ok(())
    }

    /// NodeUnstageVolume for a staged volume no other pod publishes.
    async fn unstage_unless_used(
        &self,
        node: &mut NodeClient<Channel>,
        data: &VolData,
        pod_dir: &Path,
    ) -> Result<(), CsiError> {
        let path = staging_path(&self.root_dir, &data.driver_name, &data.volume_handle);
        let pods = pod_dir.parent().map(Path::to_owned).unwrap_or_default();
        let (me, staged, wanted) = (pod_dir.to_owned(), path.clone(), data.clone());
        let in_use = blocking(move || {
            if !staged
                .parent()
                .is_some_and(|p| p.join(VOL_DATA_FILE).exists())
            {
                return Ok(true);
            }
            let mut used = false;
            for entry in std::fs::read_dir(&pods)? {
                let other = entry?.path();
                if other == me {
                    continue;
                }
                let volumes = read_volumes(&other.join("volumes").join(CSI_VOLUME_DIR))?;
                used |= volumes.iter().any(|(_, d)| {
                    d.driver_name == wanted.driver_name && d.volume_handle == wanted.volume_handle
                });
            }
            Ok::<_, std::io::Error>(used)
        })
        .await?;
        if in_use {
            return Ok(());
        }
        node.node_unstage_volume(deadline(NodeUnstageVolumeRequest {
            volume_id: data.volume_handle.clone(),
            staging_target_path: path.to_string_lossy().into_owned(),
        }))
        .await
        .map_err(CsiError::Rpc)?;
        self.done.lock().remove(&path);
        blocking(move || {
            mount::unmount_and_rmdir(&path)?;
            let Some(parent) = path.parent() else {
                return Ok(());
            };
            mount::remove_file_if_present(&parent.join(VOL_DATA_FILE))?;
            mount::unmount_and_rmdir(parent)
        })
        .await?;
        Ok(())
    }
}

/// The volume capability NodeStage, NodePublish and NodeExpand are
/// given: a raw block volume, or a mount of the volume's fsType and mount options, the pod's
/// fsGroup when the driver applies it (VOLUME_MOUNT_GROUP), and the access
/// mode from the PV's.
fn capability(volume: &CsiVolume, fs_group: Option<i64>, caps: &[i32]) -> VolumeCapability {
    let has = |t: rpc::Type| caps.contains(&(t as i32));
    let access_type = if volume.block {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume {
            fs_type: volume.fs_type.clone(),
            mount_flags: volume.mount_options.clone(),
            volume_mount_group: fs_group
                .filter(|_| has(rpc::Type::VolumeMountGroup))
                .map(|g| g.to_string())
                .unwrap_or_default(),
        })
    };
    VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(AccessMode {
            mode: access_mode(
                volume.access_modes.as_deref().unwrap_or(&[]),
                has(rpc::Type::SingleNodeMultiWriter),
            ),
        }),
    }
}

/// NodeStageVolume's request for `volume` at the staging path `path`.
fn stage_request(
    volume: &CsiVolume,
    path: &Path,
    capability: &VolumeCapability,
    publish_context: &HashMap<String, String>,
    secrets: HashMap<String, String>,
) -> NodeStageVolumeRequest {
    NodeStageVolumeRequest {
        volume_id: volume.handle.clone(),
        publish_context: publish_context.clone(),
        staging_target_path: path.to_string_lossy().into_owned(),
        volume_capability: Some(capability.clone()),
        secrets,
        volume_context: volume.attributes.clone().into_iter().collect(),
    }
}

/// The Node service's capabilities (the RPC types).
async fn capabilities(node: &mut NodeClient<Channel>) -> Result<Vec<i32>, CsiError> {
    let reply = node
        .node_get_capabilities(deadline(NodeGetCapabilitiesRequest {}))
        .await
        .map_err(CsiError::Rpc)?;
    Ok(reply
        .into_inner()
        .capabilities
        .into_iter()
        .filter_map(|c| {
            c.r#type
                .map(|node_service_capability::Type::Rpc(r)| r.r#type)
        })
        .collect())
}

/// Whether a driver's error is its final answer (upstream's
/// IsOperationFinishedError): not a deadline, a cancellation, or a
/// driver busy or away, after which the operation may still be going on.
fn is_final(status: &tonic::Status) -> bool {
    use tonic::Code;
    !matches!(
        status.code(),
        Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Unavailable
            | Code::ResourceExhausted
            | Code::Aborted
    )
}

/// Log a failed clean-up of a volume directory (the driver's error is
/// what the pod is told).
fn forget(cleared: std::io::Result<()>, dir: &Path) {
    if let Err(e) = cleared {
        tracing::warn!(dir = %dir.display(), error = %e, "removing a volume directory the driver refused");
    }
}

/// A volume directory a driver did not set up: its `vol_data.json` and
/// the directory (rmdir only: never through a mount).
fn forget_volume_dir(dir: &Path) -> std::io::Result<()> {
    mount::remove_file_if_present(&dir.join(VOL_DATA_FILE))?;
    mount::unmount_and_rmdir(&dir.join(PUBLISH_TARGET))?;
    mount::unmount_and_rmdir(dir)
}

/// A request with upstream's deadline.
fn deadline<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CSI_TIMEOUT);
    request
}

fn write_vol_data(dir: &Path, data: &VolData) -> std::io::Result<()> {
    let json = serde_json::to_vec(data).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(VOL_DATA_FILE), json)
}

/// The CSI volume directories under `dir` (a pod's
/// `volumes/kubernetes.io~csi`) with their `vol_data.json`. One without it
/// was never published (the file is written before NodePublishVolume) and
/// is left to the volume manager's removal of the pod's directory; one
/// whose file cannot be read is left as it is, and logged.
fn read_volumes(dir: &Path) -> std::io::Result<Vec<(PathBuf, VolData)>> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        r => r?,
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let Ok(json) = std::fs::read(path.join(VOL_DATA_FILE)) else {
            continue;
        };
        match serde_json::from_slice::<VolData>(&json) {
            Ok(data) => out.push((path, data)),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable vol_data.json: volume left as it is");
            }
        }
    }
    Ok(out)
}

/// The pod's raw block CSI volumes: each link under
/// `<pod dir>/volumeDevices/kubernetes.io~csi`, its spec name, and the
/// volume's `vol_data.json` when it has one.
fn read_block_volumes(
    root: &Path,
    pod_dir: &Path,
) -> std::io::Result<Vec<(PathBuf, String, Option<VolData>)>> {
    let links = pod_dir.join(block::VOLUME_DEVICES).join(CSI_VOLUME_DIR);
    {
        let entries = match std::fs::read_dir(&links) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            r => r?,
        };
        let mut out = Vec::new();
        for entry in entries {
            let link = entry?.path();
            let spec = link
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let file = block_volume_dir(root, &spec)
                .join("data")
                .join(VOL_DATA_FILE);
            let data = match std::fs::read(&file) {
                Ok(json) => serde_json::from_slice::<VolData>(&json)
                    .inspect_err(|e| {
                        tracing::warn!(path = %file.display(), error = %e, "unreadable vol_data.json: volume unmapped, not unpublished");
                    })
                    .ok(),
                Err(_) => None,
            };
            out.push((link, spec, data));
        }
        Ok(out)
    }
}

#[cfg(test)]
pub(crate) mod tests;
