//! The volume manager (upstream's volumemanager, driven per pod): SyncPod
//! asks it to set up a pod's volumes before any container is created, and
//! SyncTerminatedPod to tear them down before the pod is let go.
//!
//! - **Desired state** is the pod's spec, given on every sync; **actual
//!   state** is the file system itself, read again on every step (a tmpfs is
//!   found by its device, a projected volume by its `..data` link), so every
//!   step is idempotent and a kubelet killed at any point finds its work
//!   where it left it: nothing is mounted twice, nothing left behind.
//! - Set-up re-projects configMap, secret, downwardAPI and projected volumes
//!   on every sync (upstream's remount of atomically updated volumes), so
//!   their files follow the objects and the pod.
//! - The layout is upstream's: `<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`,
//!   the emptyDir ready marker under `<root>/pods/<uid>/plugins/`.
//! - A volume that cannot be set up is a `FailedMount` Warning with
//!   upstream's words (`MountVolume.SetUp failed for volume "x" : ...`); the
//!   pod waits in ContainerCreating and is retried.
//!
//! Blocking file-system work runs on the blocking pool.

pub mod atomic_writer;
pub mod block;
pub mod claims;
pub mod csi;
pub mod mount;
pub mod objects;
pub mod ownership;
pub mod podcert;
pub mod subpath;
pub mod token;
pub mod trust;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ClusterTrustBundleProjection, ConfigMap, Pod, PodCertificateProjection, Secret, Volume,
};
use kubelet_core::claim::{
    ClaimVolume, LOCAL_VOLUME, Measure, PvSource, check_local_path, ephemeral_claim_name,
};
use kubelet_core::failure::Cause;
use kubelet_core::manifest::is_dns1123_label;
use kubelet_core::podcert::payload as podcert_payload;
use kubelet_core::podspec::{init_containers, regular_containers};
use kubelet_core::quantity::parse_bytes;
use kubelet_core::types::PodUid;
use kubelet_core::volume::{
    self as vol, EMPTY_DIR, KeyedSource, Kind, Payload, PayloadError, aggregate,
    config_map_payload, downward_payload, memory_volume_size, secret_payload, volume_dir,
};
use parking_lot::Mutex;

use crate::events::{Involved, Recorder, WARNING};
use crate::nodestatus::NodeAllocatable;
use kubelet_tasks::blocking;
use objects::{GetError, ObjectStore};
use token::{TokenManager, TokenSpec};

/// Upstream's FailedMount event reason.
pub const FAILED_MOUNT: &str = "FailedMount";

/// Where a volume is on the host, for a container's mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedVolume {
    pub host_path: PathBuf,
    /// The plugin mounts it read-only whatever the mount asks (configMap,
    /// secret, downwardAPI, projected).
    pub read_only: bool,
    /// A group the pod's containers are given for it (a PV's
    /// `pv.beta.kubernetes.io/gid`).
    pub gid: Option<i64>,
    /// What the containers are given.
    pub form: Form,
}

/// What a set-up volume is to the containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A directory (or file) at `host_path`, mounted.
    Directory,
    /// A raw block volume (`volumeMode: Block`): `host_path` is the pod's
    /// link to the device, given to containers as their `volumeDevices`
    /// ask.
    Device,
    /// An `image` volume: nothing on the node's file system; the runtime
    /// mounts the image, pulled when the container starts.
    Image,
}

/// A pod's volumes, set up, by volume name.
pub type PodVolumes = HashMap<String, MountedVolume>;

/// Volumes that could not be set up; each was told in an event.
#[derive(Debug)]
pub struct VolumeError {
    /// (volume, why), in the pod's order; the volume is empty for a
    /// failure of the pod's own directory.
    pub failed: Vec<(String, SetUpError)>,
}

impl VolumeError {
    /// What would clear them all: the soonest of their causes.
    pub fn cause(&self) -> Cause {
        self.failed
            .iter()
            .map(|(_, e)| e.cause())
            .reduce(Cause::sooner)
            .unwrap_or(Cause::Transient)
    }
}

impl std::fmt::Display for VolumeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.failed.iter().map(|(n, _)| n.as_str()).collect();
        let why: Vec<String> = self
            .failed
            .iter()
            .map(|(n, m)| format!("{n:?}: {m}"))
            .collect();
        write!(
            f,
            "unmounted volumes=[{}]: {}",
            names.join(" "),
            why.join("; ")
        )
    }
}

impl std::error::Error for VolumeError {}

/// Why one volume (or the pod's directory) could not be set up, in
/// upstream's words where it has them.
#[derive(Debug, thiserror::Error)]
pub enum SetUpError {
    #[error("pod UID {0:?} is not a path component")]
    PodUid(String),
    #[error("creating the pod directory: {0}")]
    PodDir(#[source] io::Error),
    #[error("invalid volume name: {0}")]
    InvalidName(String),
    #[error("volume name is not unique")]
    NotUnique,
    #[error("no volume plugin matched: {0} volumes are not supported by rkubelet")]
    UnsupportedType(String),
    #[error("no volume plugin matched")]
    NoPlugin,
    #[error(transparent)]
    PodCertificate(#[from] podcert::PodCertError),
    #[error("ClusterTrustBundle projection requires either name or signerName to be set")]
    TrustBundleSelector,
    /// cluster mode only: a configMap, secret, token or trust bundle.
    #[error("{what}: a pod without an API server cannot reference one")]
    NoApiServer { what: String },
    #[error(transparent)]
    Object(#[from] GetError),
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error(transparent)]
    Token(#[from] token::TokenError),
    #[error(transparent)]
    Trust(#[from] trust::TrustError),
    #[error(transparent)]
    HostPath(#[from] HostPathError),
    #[error(transparent)]
    Claim(#[from] claims::ClaimError),
    #[error(transparent)]
    Csi(#[from] csi::CsiError),
    /// A claim's PV whose volumeMode is not what the containers use it as
    /// (upstream's words).
    #[error("volume {volume} has volumeMode {mode}, but is specified in {field}")]
    ModeMismatch {
        volume: String,
        mode: &'static str,
        field: &'static str,
    },
    #[error("invalid local PV {pv}: {message}")]
    LocalPath { pv: String, message: String },
    /// The node's file system.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// Several projected sources failed (upstream's aggregate).
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Several(Vec<SetUpError>),
}

impl SetUpError {
    /// What would clear it.
    pub fn cause(&self) -> Cause {
        match self {
            SetUpError::InvalidName(_)
            | SetUpError::PodUid(_)
            | SetUpError::NotUnique
            | SetUpError::UnsupportedType(_)
            | SetUpError::NoPlugin
            | SetUpError::TrustBundleSelector
            | SetUpError::NoApiServer { .. }
            | SetUpError::ModeMismatch { .. }
            | SetUpError::LocalPath { .. } => Cause::Unsupported,
            SetUpError::Claim(e) => e.cause(),
            SetUpError::Csi(e) => e.cause(),
            SetUpError::Object(e) => e.cause(),
            SetUpError::Payload(e) => e.cause(),
            SetUpError::Trust(e) => e.cause(),
            SetUpError::PodCertificate(e) => e.cause(),
            SetUpError::HostPath(e) => e.cause(),
            SetUpError::Token(_) | SetUpError::Io(_) | SetUpError::PodDir(_) => Cause::Transient,
            SetUpError::Several(errors) => errors
                .iter()
                .map(SetUpError::cause)
                .reduce(Cause::sooner)
                .unwrap_or(Cause::Transient),
        }
    }
}

/// A hostPath whose type does not match, in upstream's words (a path
/// missing may be made later by someone else: retried).
#[derive(Debug, thiserror::Error)]
pub enum HostPathError {
    #[error("hostPath type check failed: {path} is not a {expected}, it's a {found}")]
    Mismatch {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error(
        "hostPath type check failed, {path} is not a {expected}, unable to determine its type: {source}"
    )]
    Unknown {
        path: String,
        expected: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{0} is an invalid volume type")]
    InvalidType(String),
    #[error("creating hostPath {path}: {source}")]
    Create {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl HostPathError {
    /// What would clear it: an invalid type needs a new spec; a missing or
    /// mistyped path may be made on the host.
    pub fn cause(&self) -> Cause {
        match self {
            HostPathError::InvalidType(_) => Cause::Unsupported,
            _ => Cause::Transient,
        }
    }
}

/// What cluster mode adds: the objects volumes project, and tokens.
#[derive(Clone)]
pub struct ApiObjects {
    pub config_maps: ObjectStore<ConfigMap>,
    pub secrets: ObjectStore<Secret>,
    pub tokens: TokenManager,
    pub trust: trust::TrustBundles,
    pub pod_certificates: podcert::PodCertificates,
    pub claims: claims::Claims,
    pub csi: csi::CsiVolumes,
}

/// `<pods_dir>/<uid>`, when the UID is a safe path component.
pub fn pod_dir(pods_dir: &Path, uid: &PodUid) -> Option<PathBuf> {
    let ok = !uid.as_str().is_empty()
        && uid
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then(|| pods_dir.join(uid.as_str()))
}

#[derive(Clone)]
pub struct VolumeManager {
    pods_dir: PathBuf,
    /// What a limit not set reads as.
    allocatable: NodeAllocatable,
    api: Option<ApiObjects>,
    events: Recorder,
    /// The claim volumes each pod has set up, for its volume stats.
    claim_volumes: Arc<Mutex<HashMap<PodUid, Vec<ClaimVolume>>>>,
}

impl VolumeManager {
    pub fn new(
        pods_dir: PathBuf,
        allocatable: NodeAllocatable,
        api: Option<ApiObjects>,
        events: Recorder,
    ) -> Self {
        VolumeManager {
            pods_dir,
            allocatable,
            api,
            events,
            claim_volumes: Arc::default(),
        }
    }

    /// CSI volumes (cluster mode).
    pub fn csi_volumes(&self) -> Option<&csi::CsiVolumes> {
        self.api.as_ref().map(|a| &a.csi)
    }

    /// The claim volumes the pod `uid` has set up.
    pub fn claim_volumes(&self, uid: &PodUid) -> Vec<ClaimVolume> {
        self.claim_volumes
            .lock()
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    /// Note the claim volume `name` of `pod`, set up for `claim`, measured
    /// by `measure` (replacing what was noted for that volume).
    fn note_claim(&self, pod: &Pod, name: &str, claim: &claims::Resolved, measure: Measure) {
        let mut map = self.claim_volumes.lock();
        let noted = map.entry(PodUid::of(pod)).or_default();
        noted.retain(|c| c.name != name);
        noted.push(ClaimVolume {
            name: name.to_owned(),
            namespace: claim.namespace.clone(),
            claim: claim.name.clone(),
            measure,
        });
    }

    /// The attachable volumes pods use, for node status.
    pub fn volumes_in_use(&self) -> csi::VolumesInUse {
        self.api
            .as_ref()
            .map(|a| a.csi.in_use.clone())
            .unwrap_or_default()
    }

    /// `<root-dir>/pods/<uid>`, when the UID is a safe path component.
    pub fn pod_dir(&self, uid: &PodUid) -> Option<PathBuf> {
        pod_dir(&self.pods_dir, uid)
    }

    /// Set up every volume of `pod` (idempotent): the pod directories, then
    /// each volume; a volume that fails is told in a FailedMount event and
    /// the others are still set up.
    pub async fn mount_pod(&self, pod: &Pod) -> Result<PodVolumes, VolumeError> {
        let uid = PodUid::of(pod);
        let Some(pod_dir) = self.pod_dir(&uid) else {
            return Err(VolumeError {
                failed: vec![(String::new(), SetUpError::PodUid(uid.to_string()))],
            });
        };
        let volumes: Vec<Volume> = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        self.register(pod, &volumes);
        let dirs = pod_dir.clone();
        let made = blocking(move || {
            for d in [dirs.clone(), dirs.join("volumes"), dirs.join("plugins")] {
                mount::ensure_dir(&d, 0o750)?;
            }
            Ok(())
        })
        .await;
        if let Err(e) = made {
            return Err(self.fail(pod, vec![(String::new(), SetUpError::PodDir(e))]));
        }
        let mut out = PodVolumes::new();
        let mut failed = Vec::new();
        let mut seen = HashSet::new();
        for v in &volumes {
            // The name is a path component: a DNS label, once (what the API
            // server checks; said again here, since it names directories).
            let bad = is_dns1123_label(&v.name);
            if !bad.is_empty() {
                failed.push((v.name.clone(), SetUpError::InvalidName(bad.join("; "))));
                continue;
            }
            if !seen.insert(v.name.as_str()) {
                failed.push((v.name.clone(), SetUpError::NotUnique));
                continue;
            }
            match self.set_up(pod, &pod_dir, v).await {
                Ok(m) => {
                    out.insert(v.name.clone(), m);
                }
                Err(e) => failed.push((v.name.clone(), e)),
            }
        }
        if failed.is_empty() {
            Ok(out)
        } else {
            Err(self.fail(pod, failed))
        }
    }

    fn fail(&self, pod: &Pod, failed: Vec<(String, SetUpError)>) -> VolumeError {
        for (name, why) in &failed {
            self.events.event(
                &Involved::pod(pod, None),
                WARNING,
                FAILED_MOUNT,
                format!("MountVolume.SetUp failed for volume {name:?} : {why}"),
            );
        }
        VolumeError { failed }
    }

    /// Register the ConfigMaps and Secrets the pod references: its volumes'
    /// and its containers' env (read when they start, by
    /// `podenv::PodEnv`), as upstream's managers register both.
    fn register(&self, pod: &Pod, volumes: &[Volume]) {
        let Some(api) = &self.api else { return };
        let (env_cms, env_secrets) = kubelet_core::env::pod_references(pod);
        let (mut cms, mut secrets): (HashSet<String>, HashSet<String>) = (
            env_cms.into_iter().collect(),
            env_secrets.into_iter().collect(),
        );
        for v in volumes {
            if let Some(c) = &v.config_map {
                cms.insert(c.name.clone());
            }
            if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
                secrets.insert(s);
            }
            for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
                if let Some(c) = &src.config_map {
                    cms.insert(c.name.clone());
                }
                if let Some(s) = &src.secret {
                    secrets.insert(s.name.clone());
                }
            }
        }
        // And the pull secrets, which the image step reads.
        let pull = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref());
        secrets.extend(
            pull.into_iter()
                .flatten()
                .filter(|r| !r.name.is_empty())
                .map(|r| r.name.clone()),
        );
        let uid = PodUid::of(pod);
        let ns = namespace(pod);
        api.config_maps.register(&uid, ns, &cms);
        api.secrets.register(&uid, ns, &secrets);
    }

    async fn set_up(
        &self,
        pod: &Pod,
        pod_dir: &Path,
        v: &Volume,
    ) -> Result<MountedVolume, SetUpError> {
        let kind = Kind::of(v);
        let Some(plugin) = kind.plugin_dir() else {
            return match kind {
                Kind::HostPath => self.host_path(v).await,
                Kind::Claim => self.claim(pod, pod_dir, v).await,
                // Nothing on the node: the runtime mounts the image, pulled
                // when a container that mounts it starts (upstream's image
                // plugin sets nothing up either).
                Kind::Image => Ok(MountedVolume {
                    host_path: PathBuf::new(),
                    read_only: true,
                    gid: None,
                    form: Form::Image,
                }),
                Kind::Csi => match kubelet_core::csi::CsiVolume::inline(pod, v) {
                    Some(volume) => self.csi(pod, pod_dir, &volume, None).await,
                    None => Err(SetUpError::NoPlugin),
                },
                Kind::Unsupported(t) => Err(SetUpError::UnsupportedType(t.to_string())),
                _ => Err(SetUpError::NoPlugin),
            };
        };
        let dir = volume_dir(pod_dir, plugin, &v.name);
        // The payload first: nothing is made for a volume whose data is
        // missing.
        let payload = match kind {
            Kind::EmptyDir { .. } => None,
            _ => Some(self.payload(pod, v).await?),
        };
        let tmpfs_size = kind.on_tmpfs().then(|| {
            let limit = v
                .empty_dir
                .as_ref()
                .and_then(|e| e.size_limit.as_ref())
                .and_then(|q| parse_bytes(q).ok());
            memory_volume_size(pod, limit, self.allocatable.get().memory_bytes)
        });
        let ready = matches!(kind, Kind::EmptyDir { .. })
            .then(|| pod_dir.join("plugins").join(EMPTY_DIR).join(&v.name));
        // emptyDir.mode (with its sticky bit), else upstream's 0777.
        let asked = v.empty_dir.as_ref().and_then(|e| e.mode);
        let mode = asked.map_or(0o777, |m| m as u32 & 0o1777);
        let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let fs_group = psc.and_then(|s| s.fs_group);
        let on_root_mismatch =
            psc.and_then(|s| s.fs_group_change_policy.as_deref()) == Some("OnRootMismatch");
        let read_only = !matches!(kind, Kind::EmptyDir { .. });
        let path = dir.clone();
        blocking(move || {
            // An emptyDir set up before (its ready marker) is left as it is.
            if let Some(ready) = &ready
                && ready.join("ready").exists()
                && (tmpfs_size.is_none() || mount::is_mount_point(&path)?)
            {
                return Ok(());
            }
            mount::ensure_dir(&path, mode)?;
            if let Some(size) = tmpfs_size {
                mount::ensure_tmpfs(&path, size)?;
                // A tmpfs root keeps the kernel's 1777, as upstream leaves
                // it (the e2e suite checks for the sticky bit), unless a
                // mode was asked for.
                if asked.is_some() {
                    mount::ensure_dir(&path, mode)?;
                }
            }
            // fsGroup when the volume is new or its files changed.
            let changed = match payload {
                Some(payload) => atomic_writer::write(&path, payload)?,
                None => true,
            };
            if let Some(gid) = fs_group.filter(|_| changed) {
                ownership::apply(&path, gid, read_only, on_root_mismatch)?;
            }
            if let Some(ready) = ready {
                std::fs::create_dir_all(&ready)?;
                std::fs::write(ready.join("ready"), b"")?;
            }
            Ok(())
        })
        .await?;
        Ok(MountedVolume {
            host_path: dir,
            read_only,
            gid: None,
            form: Form::Directory,
        })
    }

    /// A hostPath: the host's path, checked (or made) as its type says.
    async fn host_path(&self, v: &Volume) -> Result<MountedVolume, SetUpError> {
        let hp = v.host_path.clone().unwrap_or_default();
        let path = PathBuf::from(&hp.path);
        let kind = hp.type_.unwrap_or_default();
        let checked = path.clone();
        blocking(move || Ok(check_host_path(&checked, &kind))).await??;
        Ok(MountedVolume {
            host_path: path,
            read_only: false,
            gid: None,
            form: Form::Directory,
        })
    }

    /// A persistentVolumeClaim or generic ephemeral volume: its bound PV's
    /// hostPath used as it is, or
    /// its local path bind-mounted at
    /// `volumes/kubernetes.io~local-volume/<pv>` (upstream's layout), the
    /// pod's fsGroup applied when first mounted read-write.
    async fn claim(
        &self,
        pod: &Pod,
        pod_dir: &Path,
        v: &Volume,
    ) -> Result<MountedVolume, SetUpError> {
        let (claim, read_only, ephemeral) = match &v.persistent_volume_claim {
            Some(source) => (
                source.claim_name.clone(),
                source.read_only.unwrap_or(false),
                false,
            ),
            None => (ephemeral_claim_name(pod, &v.name), false, true),
        };
        let Some(api) = &self.api else {
            return Err(SetUpError::NoApiServer {
                what: format!("persistentVolumeClaim {claim:?}"),
            });
        };
        let resolved = api
            .claims
            .resolve(pod, &claim, read_only, ephemeral)
            .await?;
        let bound = resolved.volume.clone();
        let containers = init_containers(pod);
        let containers = || containers.iter().chain(regular_containers(pod));
        let mismatch = |mode, field| SetUpError::ModeMismatch {
            volume: v.name.clone(),
            mode,
            field,
        };
        if bound.block
            && containers().any(|c| c.volume_mounts.iter().flatten().any(|m| m.name == v.name))
        {
            return Err(mismatch("Block", "volumeMounts"));
        }
        if !bound.block
            && containers().any(|c| c.volume_devices.iter().flatten().any(|d| d.name == v.name))
        {
            return Err(mismatch("Filesystem", "volumeDevices"));
        }
        if bound.block {
            return self.block_claim(pod, pod_dir, v, &resolved).await;
        }
        match bound.source {
            PvSource::HostPath { path, type_ } => {
                let checked = PathBuf::from(&path);
                blocking(move || Ok(check_host_path(&checked, &type_))).await??;
                Ok(MountedVolume {
                    host_path: PathBuf::from(path),
                    read_only: bound.read_only,
                    gid: bound.gid,
                    form: Form::Directory,
                })
            }
            PvSource::Local { path } => {
                check_local_path(&path).map_err(|message| SetUpError::LocalPath {
                    pv: bound.pv_name.clone(),
                    message,
                })?;
                let dir = volume_dir(pod_dir, LOCAL_VOLUME, &bound.pv_name);
                let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
                let fs_group = psc.and_then(|s| s.fs_group);
                let on_root_mismatch =
                    psc.and_then(|s| s.fs_group_change_policy.as_deref()) == Some("OnRootMismatch");
                let (target, read_only) = (dir.clone(), bound.read_only);
                let (pods_dir, pv) = (self.pods_dir.clone(), bound.pv_name.clone());
                blocking(move || {
                    std::fs::create_dir_all(&target)?;
                    let mounted = mount::ensure_bind(Path::new(&path), &target, read_only)?;
                    // fsGroup once, by the first pod that mounts it (upstream's
                    // local plugin): another pod's files are not changed under it.
                    let Some(gid) = fs_group.filter(|_| mounted && !read_only) else {
                        return Ok(());
                    };
                    let others = mount::mounts_under(&pods_dir)?.into_iter().any(|m| {
                        m != target
                            && m.parent().and_then(Path::file_name)
                                == Some(std::ffi::OsStr::new(LOCAL_VOLUME))
                            && m.file_name() == Some(std::ffi::OsStr::new(&pv))
                    });
                    if !others {
                        ownership::apply(&target, gid, false, on_root_mismatch)?;
                    }
                    Ok(())
                })
                .await?;
                self.note_claim(pod, &v.name, &resolved, Measure::Statfs(dir.clone()));
                Ok(MountedVolume {
                    host_path: dir,
                    read_only: bound.read_only,
                    gid: bound.gid,
                    form: Form::Directory,
                })
            }
            PvSource::Csi(volume) => {
                let mounted = self.csi(pod, pod_dir, &volume, bound.gid).await?;
                let measure = Measure::Csi {
                    driver: volume.driver.clone(),
                    handle: volume.handle.clone(),
                    target: mounted.host_path.clone(),
                };
                self.note_claim(pod, &v.name, &resolved, measure);
                if let Some(expansion) = &resolved.expansion {
                    api.csi
                        .expand(pod, &volume, &resolved, expansion, &self.events)
                        .await;
                }
                Ok(mounted)
            }
            PvSource::Unsupported(kind) => Err(SetUpError::UnsupportedType(format!(
                "{kind} (PersistentVolume {})",
                bound.pv_name
            ))),
        }
    }

    /// A claim whose PV is a raw block volume: a local PV's device mapped
    /// for the pod (upstream's local plugin: `volumeDevices` under the
    /// plugin's directory and the pod's, [`block::map`]), or a CSI
    /// volume's, staged and published by its driver first.
    async fn block_claim(
        &self,
        pod: &Pod,
        pod_dir: &Path,
        v: &Volume,
        resolved: &claims::Resolved,
    ) -> Result<MountedVolume, SetUpError> {
        let bound = &resolved.volume;
        match &bound.source {
            PvSource::Local { path } => {
                check_local_path(path).map_err(|message| SetUpError::LocalPath {
                    pv: bound.pv_name.clone(),
                    message,
                })?;
                let global = self
                    .plugins_dir()
                    .join(LOCAL_VOLUME)
                    .join(block::VOLUME_DEVICES)
                    .join(&bound.pv_name);
                let link = block::pod_link(pod_dir, LOCAL_VOLUME, &bound.pv_name);
                let uid = PodUid::of(pod).to_string();
                let (device, bound_at, linked) =
                    (PathBuf::from(path), global.join(&uid), link.clone());
                blocking(move || block::map(&device, &global, &uid, &linked))
                    .await
                    .map_err(|e| match e.kind() {
                        io::ErrorKind::InvalidInput | io::ErrorKind::NotFound => {
                            SetUpError::LocalPath {
                                pv: bound.pv_name.clone(),
                                message: e.to_string(),
                            }
                        }
                        _ => SetUpError::Io(e),
                    })?;
                self.note_claim(pod, &v.name, resolved, Measure::Device(bound_at));
                Ok(MountedVolume {
                    host_path: link,
                    read_only: bound.read_only,
                    gid: bound.gid,
                    form: Form::Device,
                })
            }
            PvSource::Csi(volume) => {
                let mounted = self.csi(pod, pod_dir, volume, bound.gid).await?;
                let uid = PodUid::of(pod).to_string();
                let measure = Measure::Csi {
                    driver: volume.driver.clone(),
                    handle: volume.handle.clone(),
                    target: kubelet_core::csi::block_volume_dir(self.root_dir(), &volume.spec_name)
                        .join("dev")
                        .join(uid),
                };
                self.note_claim(pod, &v.name, resolved, measure);
                Ok(mounted)
            }
            PvSource::HostPath { .. } => Err(SetUpError::UnsupportedType(format!(
                "volumeMode Block of hostPath (PersistentVolume {})",
                bound.pv_name
            ))),
            PvSource::Unsupported(kind) => Err(SetUpError::UnsupportedType(format!(
                "{kind} (PersistentVolume {})",
                bound.pv_name
            ))),
        }
    }

    /// The kubelet's root directory (the parent of its pods directory).
    fn root_dir(&self) -> &Path {
        self.pods_dir.parent().unwrap_or(Path::new("/"))
    }

    /// `<root-dir>/plugins`, where volume plugins keep what is not a pod's.
    fn plugins_dir(&self) -> PathBuf {
        self.root_dir().join("plugins")
    }

    /// A CSI volume (inline, or a PV's), staged and published by its driver.
    async fn csi(
        &self,
        pod: &Pod,
        pod_dir: &Path,
        volume: &kubelet_core::csi::CsiVolume,
        gid: Option<i64>,
    ) -> Result<MountedVolume, SetUpError> {
        let Some(api) = &self.api else {
            return Err(SetUpError::NoApiServer {
                what: format!("csi driver {:?}", volume.driver),
            });
        };
        let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let fs_group = psc.and_then(|s| s.fs_group);
        let on_root_mismatch =
            psc.and_then(|s| s.fs_group_change_policy.as_deref()) == Some("OnRootMismatch");
        let published = api
            .csi
            .set_up(pod, pod_dir, volume, fs_group, on_root_mismatch)
            .await?;
        Ok(MountedVolume {
            host_path: published.target,
            read_only: published.read_only,
            gid,
            form: if volume.block {
                Form::Device
            } else {
                Form::Directory
            },
        })
    }

    /// The files of a configMap, secret, downwardAPI or projected volume.
    async fn payload(&self, pod: &Pod, v: &Volume) -> Result<Payload, SetUpError> {
        if let Some(c) = &v.config_map {
            let items = c.items.as_deref().unwrap_or(&[]);
            let src = KeyedSource {
                items,
                default_mode: c.default_mode.unwrap_or(0o644),
                optional: c.optional.unwrap_or(false),
            };
            let cm = self.config_map(pod, &c.name, src.optional).await?;
            return Ok(config_map_payload(&src, &cm)?);
        }
        if let Some(s) = &v.secret {
            let items = s.items.as_deref().unwrap_or(&[]);
            let src = KeyedSource {
                items,
                default_mode: s.default_mode.unwrap_or(0o644),
                optional: s.optional.unwrap_or(false),
            };
            let name = s.secret_name.clone().unwrap_or_default();
            let secret = self.secret(pod, &name, src.optional).await?;
            return Ok(secret_payload(&src, &secret)?);
        }
        if let Some(d) = &v.downward_api {
            let items = d.items.as_deref().unwrap_or(&[]);
            return Ok(downward_payload(
                items,
                pod,
                &self.allocatable.get(),
                d.default_mode.unwrap_or(0o644),
            )?);
        }
        let Some(p) = &v.projected else {
            return Ok(Payload::new());
        };
        let mode = p.default_mode.unwrap_or(0o644);
        let mut out = BTreeMap::new();
        let mut errors = Vec::new();
        for (index, src) in p.sources.iter().flatten().enumerate() {
            let part = if let Some(c) = &src.config_map {
                let items = c.items.as_deref().unwrap_or(&[]);
                let keyed = KeyedSource {
                    items,
                    default_mode: mode,
                    optional: c.optional.unwrap_or(false),
                };
                self.config_map(pod, &c.name, keyed.optional)
                    .await
                    .and_then(|cm| Ok(config_map_payload(&keyed, &cm)?))
            } else if let Some(s) = &src.secret {
                let items = s.items.as_deref().unwrap_or(&[]);
                let keyed = KeyedSource {
                    items,
                    default_mode: mode,
                    optional: s.optional.unwrap_or(false),
                };
                self.secret(pod, &s.name, keyed.optional)
                    .await
                    .and_then(|secret| Ok(secret_payload(&keyed, &secret)?))
            } else if let Some(d) = &src.downward_api {
                let items = d.items.as_deref().unwrap_or(&[]);
                downward_payload(items, pod, &self.allocatable.get(), mode)
                    .map_err(SetUpError::from)
            } else if let Some(t) = &src.service_account_token {
                self.token(
                    pod,
                    t.audience.clone(),
                    t.expiration_seconds.unwrap_or(3600),
                )
                .await
                .map(|token| file(&t.path, token.into_bytes(), owner_only(pod, mode)))
            } else if let Some(b) = &src.cluster_trust_bundle {
                self.trust_anchors(pod, b)
                    .await
                    .map(|pem| file(&b.path, pem, owner_only(pod, mode)))
            } else if let Some(c) = &src.pod_certificate {
                self.pod_certificate(pod, &v.name, index, c)
                    .await
                    .map(|issued| podcert_payload(c, &issued, owner_only(pod, mode)))
            } else {
                Ok(Payload::new())
            };
            match part {
                Ok(files) => out.extend(files),
                Err(e) => errors.push(e),
            }
        }
        match aggregate(errors, SetUpError::Several) {
            None => Ok(out),
            Some(e) => Err(e),
        }
    }

    /// A clusterTrustBundle projection's certificates, by name or by signer.
    async fn trust_anchors(
        &self,
        pod: &Pod,
        b: &ClusterTrustBundleProjection,
    ) -> Result<Vec<u8>, SetUpError> {
        let Some(api) = &self.api else {
            return Err(SetUpError::NoApiServer {
                what: "clusterTrustBundle".into(),
            });
        };
        let optional = b.optional.unwrap_or(false);
        let uid = PodUid::of(pod);
        match (&b.name, &b.signer_name) {
            (Some(name), _) => Ok(api
                .trust
                .anchors(&uid, trust::By::Name(name), optional)
                .await?),
            (None, Some(signer)) => {
                let by = trust::By::Signer(signer, b.label_selector.as_ref());
                Ok(api.trust.anchors(&uid, by, optional).await?)
            }
            (None, None) => Err(SetUpError::TrustBundleSelector),
        }
    }

    /// A podCertificate projection's credential.
    async fn pod_certificate(
        &self,
        pod: &Pod,
        volume: &str,
        index: usize,
        c: &PodCertificateProjection,
    ) -> Result<kubelet_core::podcert::Issued, SetUpError> {
        let Some(api) = &self.api else {
            return Err(SetUpError::NoApiServer {
                what: "podCertificate".into(),
            });
        };
        Ok(api
            .pod_certificates
            .bundle(pod, volume, index, c, &self.events)
            .await?)
    }

    async fn config_map(
        &self,
        pod: &Pod,
        name: &str,
        optional: bool,
    ) -> Result<ConfigMap, SetUpError> {
        let Some(api) = &self.api else {
            return absent_or(optional, "configmap", name);
        };
        match api.config_maps.get(namespace(pod), name).await {
            Ok(cm) => Ok((*cm).clone()),
            Err(GetError::NotFound { .. }) if optional => Ok(ConfigMap::default()),
            Err(e) => Err(e.into()),
        }
    }

    async fn secret(&self, pod: &Pod, name: &str, optional: bool) -> Result<Secret, SetUpError> {
        let Some(api) = &self.api else {
            return absent_or(optional, "secret", name);
        };
        match api.secrets.get(namespace(pod), name).await {
            Ok(s) => Ok((*s).clone()),
            Err(GetError::NotFound { .. }) if optional => Ok(Secret::default()),
            Err(e) => Err(e.into()),
        }
    }

    async fn token(
        &self,
        pod: &Pod,
        audience: Option<String>,
        expiration_seconds: i64,
    ) -> Result<String, SetUpError> {
        let Some(api) = &self.api else {
            return Err(SetUpError::NoApiServer {
                what: "serviceAccountToken".into(),
            });
        };
        let spec = pod.spec.as_ref();
        let account = spec
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        Ok(api
            .tokens
            .get(&TokenSpec {
                namespace: namespace(pod).to_owned(),
                service_account: account,
                audience: audience.filter(|a| !a.is_empty()),
                expiration_seconds,
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                pod_uid: PodUid::of(pod),
            })
            .await?)
    }

    /// Tear down every volume of the pod `uid` (idempotent): mounts under
    /// its directory first, then the volume directories; its objects and
    /// tokens are released.
    pub async fn unmount_pod(&self, uid: &PodUid) -> io::Result<()> {
        self.claim_volumes.lock().remove(uid);
        if let Some(api) = &self.api {
            api.config_maps.unregister(uid);
            api.secrets.unregister(uid);
            api.tokens.forget_pod(uid);
            api.pod_certificates.forget_pod(uid);
        }
        let Some(pod_dir) = self.pod_dir(uid) else {
            return Ok(());
        };
        // CSI volumes first, through their drivers: a driver not registered
        // (yet) keeps the pod's directory until it is.
        if let Some(api) = &self.api {
            api.csi
                .tear_down_pod(&pod_dir)
                .await
                .map_err(io::Error::other)?;
        }
        let local_devices = self
            .plugins_dir()
            .join(LOCAL_VOLUME)
            .join(block::VOLUME_DEVICES);
        blocking(move || {
            // Local raw block volumes: each unmapped (its link, bind and
            // loop device), as upstream's UnmapBlockVolume.
            let links = pod_dir.join(block::VOLUME_DEVICES).join(LOCAL_VOLUME);
            if let Ok(entries) = std::fs::read_dir(&links) {
                let uid = pod_dir.file_name().unwrap_or_default().to_string_lossy();
                for e in entries {
                    let link = e?.path();
                    let global = local_devices.join(link.file_name().unwrap_or_default());
                    block::unmap(&global, &uid, &link)?;
                }
            }
            // Local PVs, each unmounted then removed with rmdir only:
            // a bind of the host's data is never deleted through.
            let local = pod_dir.join("volumes").join(LOCAL_VOLUME);
            if let Ok(entries) = std::fs::read_dir(&local) {
                for e in entries {
                    mount::unmount_and_rmdir(&e?.path())?;
                }
            }
            for sub in [
                "volume-subpaths",
                "volumes",
                block::VOLUME_DEVICES,
                "plugins",
            ] {
                mount::remove_tree(&pod_dir.join(sub))?;
            }
            Ok(())
        })
        .await
    }

    /// Remove the pod directory of `uid` (its volumes first).
    pub async fn remove_pod_dir(&self, uid: &PodUid) -> io::Result<()> {
        self.unmount_pod(uid).await?;
        let Some(pod_dir) = self.pod_dir(uid) else {
            return Ok(());
        };
        blocking(move || mount::remove_tree(&pod_dir)).await
    }

    /// The pod directories on disk (their UIDs), for housekeeping.
    pub async fn pod_dirs(&self) -> io::Result<Vec<PodUid>> {
        let dir = self.pods_dir.clone();
        blocking(move || {
            let entries = match std::fs::read_dir(&dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                r => r?,
            };
            let mut out = Vec::new();
            for e in entries {
                let e = e?;
                if e.file_type()?.is_dir()
                    && let Some(name) = e.file_name().to_str()
                {
                    out.push(PodUid::from(name));
                }
            }
            Ok(out)
        })
        .await
    }
}

/// One projected file.
fn file(path: &str, data: Vec<u8>, mode: i32) -> Payload {
    Payload::from([(path.to_owned(), vol::FileProjection { data, mode })])
}

/// A token's or trust bundle's mode: only the owner reads it once the
/// volume's group is set (upstream's projected plugin).
fn owner_only(pod: &Pod, mode: i32) -> i32 {
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    if fs_group.is_some() { 0o600 } else { mode }
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// Without an API server, an object can only be absent.
fn absent_or<K: Default>(optional: bool, kind: &str, name: &str) -> Result<K, SetUpError> {
    if optional {
        Ok(K::default())
    } else {
        Err(SetUpError::NoApiServer {
            what: format!("{kind} {name:?}"),
        })
    }
}

/// Upstream's hostPath type check (checkTypeInternal), with its messages;
/// DirectoryOrCreate and FileOrCreate make what is missing.
pub fn check_host_path(path: &Path, kind: &str) -> Result<(), HostPathError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let stat = || std::fs::metadata(path);
    let exists = stat().is_ok();
    let type_name = |m: &std::fs::Metadata| {
        let t = m.file_type();
        if t.is_dir() {
            "Directory"
        } else if t.is_file() {
            "File"
        } else if t.is_socket() {
            "Socket"
        } else if t.is_char_device() {
            "CharDevice"
        } else if t.is_block_device() {
            "BlockDevice"
        } else {
            "unknown"
        }
    };
    let shown = || path.display().to_string();
    let matched = |expected: &'static str, want: &str| -> Result<(), HostPathError> {
        match stat() {
            Ok(m) if type_name(&m) == want => Ok(()),
            Ok(m) => Err(HostPathError::Mismatch {
                path: shown(),
                expected,
                found: type_name(&m),
            }),
            Err(source) => Err(HostPathError::Unknown {
                path: shown(),
                expected,
                source,
            }),
        }
    };
    let create = |source| HostPathError::Create {
        path: shown(),
        source,
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" if !exists => {
            std::fs::create_dir_all(path).map_err(create)?;
            std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .map_err(create)
        }
        "DirectoryOrCreate" | "Directory" => matched("directory", "Directory"),
        "FileOrCreate" if !exists => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(path)
            .map(drop)
            .map_err(create),
        "FileOrCreate" | "File" => matched("file", "File"),
        "Socket" => matched("socket file", "Socket"),
        "CharDevice" => matched("character device", "CharDevice"),
        "BlockDevice" => matched("block device", "BlockDevice"),
        other => Err(HostPathError::InvalidType(other.to_owned())),
    }
}

#[cfg(test)]
mod tests;
