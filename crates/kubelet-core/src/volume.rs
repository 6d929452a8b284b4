//! Pod volumes, the pure half: which plugin a volume belongs to and where it
//! lives on disk (upstream's layout), the payloads of the projecting volume
//! types (configMap, secret, downwardAPI, projected) as upstream's
//! `MakePayload`/`CollectData` build them, the atomic writer's path rules,
//! the size of a memory-backed emptyDir, and the checks of a container's
//! volumeMounts. The `kubelet` crate's volume manager does the I/O.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, Volume, VolumeMount,
};

use crate::downward;
use crate::failure::Cause;
use crate::quantity::parse_bytes;

/// The plugin directories under `<pod>/volumes/` (the plugin name with `/`
/// escaped as `~`, upstream's `EscapeQualifiedName`).
pub const EMPTY_DIR: &str = "kubernetes.io~empty-dir";
pub const CONFIG_MAP: &str = "kubernetes.io~configmap";
pub const SECRET: &str = "kubernetes.io~secret";
pub const DOWNWARD_API: &str = "kubernetes.io~downward-api";
pub const PROJECTED: &str = "kubernetes.io~projected";

/// Why a volumeMount's `recursiveReadOnly` cannot be given, in upstream's
/// words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecursiveReadOnlyError {
    #[error("volume {0:?} requested recursive read-only mode, but it is not read-only")]
    NotReadOnly(String),
    #[error(
        "volume {0:?} requested recursive read-only mode, but it is not compatible with propagation {1:?}"
    )]
    WithPropagation(String, String),
    #[error(
        "volume {0:?} requested recursive read-only mode, but it is not supported by the runtime"
    )]
    Unsupported(String),
    #[error("unknown recursive read-only mode {0:?}")]
    Mode(String),
}

/// Upstream's resolveRecursiveReadOnly: whether mount `m` is made
/// recursively read-only. `Enabled` where the pod's runtime handler
/// supports it (`supported`), refused where it does not (containerd 1.6
/// lists no handler); `IfPossible` where it does, else a plain read-only
/// mount.
pub fn recursive_read_only(
    m: &VolumeMount,
    supported: bool,
) -> Result<bool, RecursiveReadOnlyError> {
    let mode = m.recursive_read_only.as_deref();
    if matches!(mode, None | Some("Disabled")) {
        return Ok(false);
    }
    if !m.read_only.unwrap_or(false) {
        return Err(RecursiveReadOnlyError::NotReadOnly(m.name.clone()));
    }
    if let Some(p) = m.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(RecursiveReadOnlyError::WithPropagation(
            m.name.clone(),
            p.to_owned(),
        ));
    }
    match mode {
        Some("IfPossible") => Ok(supported),
        Some("Enabled") if supported => Ok(true),
        Some("Enabled") => Err(RecursiveReadOnlyError::Unsupported(m.name.clone())),
        Some(other) => Err(RecursiveReadOnlyError::Mode(other.to_owned())),
        None => Ok(false),
    }
}

/// A volume's source, as far as rkubelet has a plugin for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    EmptyDir {
        memory: bool,
    },
    HostPath,
    /// A persistentVolumeClaim, or a generic ephemeral volume's claim: the
    /// PV bound to it (see [`crate::claim`]).
    Claim,
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
    /// An inline CSI volume (see [`crate::csi`]).
    Csi,
    /// An `image` volume (KEP-4639): the runtime mounts the image.
    Image,
    /// A type without a plugin here: the API field's name.
    Unsupported(&'static str),
}

impl Kind {
    /// The volume's kind; a volume naming no source is an emptyDir (the
    /// API's default).
    pub fn of(v: &Volume) -> Kind {
        if let Some(e) = &v.empty_dir {
            return Kind::EmptyDir {
                memory: e.medium.as_deref() == Some("Memory"),
            };
        }
        let plain = [
            (v.host_path.is_some(), Kind::HostPath),
            (v.persistent_volume_claim.is_some(), Kind::Claim),
            (v.ephemeral.is_some(), Kind::Claim),
            (v.config_map.is_some(), Kind::ConfigMap),
            (v.secret.is_some(), Kind::Secret),
            (v.downward_api.is_some(), Kind::DownwardApi),
            (v.projected.is_some(), Kind::Projected),
            (v.csi.is_some(), Kind::Csi),
            (v.image.is_some(), Kind::Image),
        ];
        if let Some((_, k)) = plain.into_iter().find(|(set, _)| *set) {
            return k;
        }
        let other = [
            (v.nfs.is_some(), "nfs"),
            (v.iscsi.is_some(), "iscsi"),
            (v.fc.is_some(), "fc"),
            (v.rbd.is_some(), "rbd"),
            (v.cephfs.is_some(), "cephfs"),
            (v.glusterfs.is_some(), "glusterfs"),
            (v.git_repo.is_some(), "gitRepo"),
            (v.flex_volume.is_some(), "flexVolume"),
            (v.aws_elastic_block_store.is_some(), "awsElasticBlockStore"),
            (v.gce_persistent_disk.is_some(), "gcePersistentDisk"),
            (v.azure_disk.is_some(), "azureDisk"),
            (v.azure_file.is_some(), "azureFile"),
            (v.cinder.is_some(), "cinder"),
            (v.vsphere_volume.is_some(), "vsphereVolume"),
            (v.portworx_volume.is_some(), "portworxVolume"),
            (v.photon_persistent_disk.is_some(), "photonPersistentDisk"),
            (v.quobyte.is_some(), "quobyte"),
            (v.scale_io.is_some(), "scaleIO"),
            (v.storageos.is_some(), "storageos"),
            (v.flocker.is_some(), "flocker"),
        ];
        match other.into_iter().find(|(set, _)| *set) {
            Some((_, name)) => Kind::Unsupported(name),
            None => Kind::EmptyDir { memory: false },
        }
    }

    /// The plugin directory of a volume that lives under the pod directory
    /// (None: a hostPath is the host's own path).
    pub fn plugin_dir(self) -> Option<&'static str> {
        match self {
            Kind::EmptyDir { .. } => Some(EMPTY_DIR),
            Kind::ConfigMap => Some(CONFIG_MAP),
            Kind::Secret => Some(SECRET),
            Kind::DownwardApi => Some(DOWNWARD_API),
            Kind::Projected => Some(PROJECTED),
            Kind::HostPath | Kind::Claim | Kind::Csi | Kind::Image | Kind::Unsupported(_) => None,
        }
    }

    /// Whether the volume's directory is a tmpfs: a memory emptyDir, and the
    /// types upstream wraps in one (secret, downwardAPI, projected).
    pub fn on_tmpfs(self) -> bool {
        matches!(
            self,
            Kind::EmptyDir { memory: true } | Kind::Secret | Kind::DownwardApi | Kind::Projected
        )
    }
}

/// `<pods_dir>/<uid>/volumes/<plugin>/<name>`.
pub fn volume_dir(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir.join("volumes").join(plugin).join(name)
}

/// A file of a projecting volume: its bytes and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: i32,
}

/// The files of a projecting volume by their relative path.
pub type Payload = BTreeMap<String, FileProjection>;

/// Upstream's limits on a projected path and on each of its names.
const MAX_PATH_LENGTH: usize = 4096;
const MAX_FILE_NAME_LENGTH: usize = 255;

/// A payload path the atomic writer refuses, in upstream's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("invalid path: must not be empty: {0:?}")]
    Empty(String),
    #[error("invalid path: must be relative path: {0}")]
    Absolute(String),
    #[error("invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters")]
    TooLong,
    #[error("invalid path: must not contain NUL: {0:?}")]
    Nul(String),
    #[error("invalid path: must not contain '..': {0}")]
    DotDot(String),
    #[error(
        "invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
    )]
    NameTooLong,
    #[error("invalid path: must not start with '..': {0}")]
    StartsWithDots(String),
}

/// The atomic writer's check of a payload path, with upstream's messages:
/// relative, no `..` element, not starting with `..` (the writer's own
/// names), within the length limits.
pub fn validate_path(path: &str) -> Result<(), PathError> {
    let owned = || path.to_owned();
    if path.is_empty() {
        return Err(PathError::Empty(owned()));
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute(owned()));
    }
    if path.len() > MAX_PATH_LENGTH {
        return Err(PathError::TooLong);
    }
    if path.contains('\0') {
        return Err(PathError::Nul(owned()));
    }
    let items: Vec<&str> = path.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(PathError::DotDot(owned()));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return Err(PathError::NameTooLong);
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return Err(PathError::StartsWithDots(owned()));
    }
    Ok(())
}

/// Why a volume's files could not be made from the objects it projects,
/// in upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("configmap references non-existent config key: {0}")]
    ConfigMapKey(String),
    #[error("references non-existent secret key: {0}")]
    SecretKey(String),
    #[error(transparent)]
    Downward(#[from] downward::DownwardError),
    /// Several items failed (upstream's aggregate).
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Several(Vec<PayloadError>),
    #[error("while normalizing trust anchors: {0}")]
    TrustAnchors(#[source] pem::PemError),
}

impl PayloadError {
    /// What would clear it: a key the object lacks comes with an update
    /// of the object (its watch wakes the pod); a field the pod names that
    /// cannot be read, or a bundle that is not PEM, needs a new spec or
    /// object.
    pub fn cause(&self) -> Cause {
        match self {
            PayloadError::ConfigMapKey(_) | PayloadError::SecretKey(_) => Cause::MissingObject,
            PayloadError::Downward(_) | PayloadError::TrustAnchors(_) => Cause::Unsupported,
            PayloadError::Several(errors) => errors
                .iter()
                .map(PayloadError::cause)
                .reduce(Cause::sooner)
                .unwrap_or(Cause::Unsupported),
        }
    }
}

/// One error of several, or their aggregate.
pub fn aggregate<E>(mut errors: Vec<E>, several: impl FnOnce(Vec<E>) -> E) -> Option<E> {
    match errors.len() {
        0 => None,
        1 => errors.pop(),
        _ => Some(several(errors)),
    }
}

/// A path as Go's `filepath.Clean` leaves a relative one: no empty or `.`
/// elements (`..` was refused before).
pub fn clean_path(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// Checks every path of `payload` and cleans it (upstream's
/// validatePayload).
pub fn clean_payload(payload: Payload) -> Result<Payload, PathError> {
    let mut out = Payload::new();
    for (path, file) in payload {
        validate_path(&path)?;
        out.insert(clean_path(&path), file);
    }
    Ok(out)
}

/// What a configMap or secret volume projects of its object.
pub struct KeyedSource<'a> {
    pub items: &'a [KeyToPath],
    pub default_mode: i32,
    pub optional: bool,
}

/// The payload of a configMap (upstream's configmap.MakePayload): every key
/// of `data` and `binaryData` under its own name, or the `items` asked for
/// (a missing key is an error unless the volume is optional).
pub fn config_map_payload(src: &KeyedSource, cm: &ConfigMap) -> Result<Payload, PayloadError> {
    let text = cm.data.iter().flatten().map(|(k, v)| (k, v.as_bytes()));
    let binary = cm.binary_data.iter().flatten().map(|(k, v)| (k, &v.0[..]));
    let all: BTreeMap<&String, &[u8]> = text.chain(binary).collect();
    keyed_payload(src, &all, PayloadError::ConfigMapKey)
}

/// The payload of a secret (upstream's secret.MakePayload).
pub fn secret_payload(src: &KeyedSource, secret: &Secret) -> Result<Payload, PayloadError> {
    let all: BTreeMap<&String, &[u8]> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k, &v.0[..]))
        .collect();
    keyed_payload(src, &all, PayloadError::SecretKey)
}

fn keyed_payload(
    src: &KeyedSource,
    all: &BTreeMap<&String, &[u8]>,
    missing: impl Fn(String) -> PayloadError,
) -> Result<Payload, PayloadError> {
    let file = |data: &[u8], mode: Option<i32>| FileProjection {
        data: data.to_vec(),
        mode: mode.unwrap_or(src.default_mode),
    };
    if src.items.is_empty() {
        return Ok(all
            .iter()
            .map(|(k, v)| ((*k).clone(), file(v, None)))
            .collect());
    }
    let mut out = Payload::new();
    for item in src.items {
        match all.get(&item.key) {
            Some(data) => {
                out.insert(item.path.clone(), file(data, item.mode));
            }
            None if src.optional => {}
            None => return Err(missing(item.key.clone())),
        }
    }
    Ok(out)
}

/// The payload of a downwardAPI volume (upstream's downwardapi.CollectData):
/// each item's field or resource value. Errors are joined as upstream's
/// aggregate prints them.
pub fn downward_payload(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    allocatable: &downward::Allocatable,
    default_mode: i32,
) -> Result<Payload, PayloadError> {
    let mut out = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            downward::field_value(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            downward::resource_value(pod, r, allocatable)
        } else {
            Ok(String::new())
        };
        match value {
            Ok(v) => {
                out.insert(
                    clean_path(&item.path),
                    FileProjection {
                        data: v.into_bytes(),
                        mode: item.mode.unwrap_or(default_mode),
                    },
                );
            }
            Err(e) => errors.push(PayloadError::from(e)),
        }
    }
    match aggregate(errors, PayloadError::Several) {
        None => Ok(out),
        Some(e) => Err(e),
    }
}

/// A clusterTrustBundle projection's file (upstream's
/// normalizeTrustAnchors): the certificates of `bundles` (PEM), each once,
/// re-encoded as Go's pem package writes them, in an order that is stable
/// for one `order` (the kubelet's, made at start) and differs between
/// restarts, as upstream shuffles, so no client comes to depend on it.
pub fn normalize_trust_anchors(
    bundles: &[&str],
    order: &impl std::hash::BuildHasher,
) -> Result<Vec<u8>, PayloadError> {
    let mut ders: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for b in bundles {
        let pems = pem::parse_many(b).map_err(PayloadError::TrustAnchors)?;
        for p in pems {
            let der = p.into_contents();
            ders.entry(order.hash_one(&der)).or_insert(der);
        }
    }
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    let mut out = String::new();
    for der in ders.into_values() {
        out.push_str(&pem::encode_config(
            &pem::Pem::new("CERTIFICATE", der),
            config,
        ));
    }
    Ok(out.into_bytes())
}

/// The pod's memory limit as its cgroup gets it: the sum over its
/// containers (or the largest init container, if more) when every one of
/// them declares a limit; None otherwise.
pub fn pod_memory_limit(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let limit = |c: &Container| -> Option<i64> {
        let q = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
        parse_bytes(q).ok().filter(|b| *b > 0)
    };
    let mut sum = 0i64;
    for c in &spec.containers {
        sum = sum.saturating_add(limit(c)?);
    }
    for c in spec.init_containers.iter().flatten() {
        sum = sum.max(limit(c)?);
    }
    Some(sum)
}

/// The size of a memory-backed emptyDir (upstream's
/// calculateEmptyDirMemorySize): node allocatable memory, else the pod's
/// memory limit when smaller, else the volume's sizeLimit when smaller still
/// (zero or negative values are ignored).
pub fn memory_volume_size(pod: &Pod, size_limit: Option<i64>, node_allocatable: i64) -> i64 {
    let mut size = node_allocatable;
    if let Some(l) = pod_memory_limit(pod).filter(|l| *l > 0 && *l <= size) {
        size = l;
    }
    if let Some(l) = size_limit.filter(|l| *l > 0 && *l <= size) {
        size = l;
    }
    size
}

/// A container's volumeMounts that cannot be honoured, with the field and
/// upstream's words where it has them: an undeclared volume, a mount path
/// used twice, a subPath that is absolute or climbs with `..`, subPath and
/// subPathExpr together, Bidirectional propagation without privilege.
pub fn check_mounts(pod: &Pod, c: &Container) -> Result<(), (String, String)> {
    let declared: HashSet<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| v.name.as_str())
        .collect();
    let privileged = c
        .security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false);
    let mut paths = HashSet::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let field = |f: &str| format!("volumeMounts[{i}].{f}");
        if !declared.contains(m.name.as_str()) {
            return Err((
                field("name"),
                format!(
                    "cannot find volume {:?} to mount into container {:?}",
                    m.name, c.name
                ),
            ));
        }
        if m.mount_path.is_empty() || m.mount_path.contains('\0') {
            return Err((field("mountPath"), "must be a non-empty path".into()));
        }
        if !paths.insert(clean_path(&m.mount_path)) {
            return Err((
                field("mountPath"),
                format!("{:?}: must be unique", m.mount_path),
            ));
        }
        let sub = m.sub_path.as_deref().unwrap_or("");
        let expr = m.sub_path_expr.as_deref().unwrap_or("");
        if !sub.is_empty() && !expr.is_empty() {
            return Err((
                field("subPathExpr"),
                "subPathExpr and subPath are mutually exclusive".into(),
            ));
        }
        if !sub.is_empty() {
            check_sub_path(sub).map_err(|e| (field("subPath"), e.to_string()))?;
        }
        if m.mount_propagation.as_deref() == Some("Bidirectional") && !privileged {
            return Err((
                field("mountPropagation"),
                "Bidirectional mount propagation is available only to privileged containers".into(),
            ));
        }
    }
    Ok(())
}

/// A subPath that would leave its volume, in upstream's makeMounts words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubPathError {
    #[error("error SubPath `{0}` must not be an absolute path")]
    Absolute(String),
    #[error("unable to provision SubPath `{0}`: must not contain NUL")]
    Nul(String),
    #[error("unable to provision SubPath `{0}`: must not contain '..'")]
    DotDot(String),
}

/// A subPath (or an expanded subPathExpr) must stay inside its volume:
/// relative, without a `..` element, without NUL.
pub fn check_sub_path(sub: &str) -> Result<(), SubPathError> {
    if sub.starts_with('/') {
        return Err(SubPathError::Absolute(sub.to_owned()));
    }
    if sub.contains('\0') {
        return Err(SubPathError::Nul(sub.to_owned()));
    }
    if sub.split('/').any(|p| p == "..") {
        return Err(SubPathError::DotDot(sub.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{PodBuilder, container, resources};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapVolumeSource, EmptyDirVolumeSource, HostPathVolumeSource,
        PersistentVolumeClaimVolumeSource, SecurityContext, VolumeMount,
    };

    #[test]
    fn each_volume_has_its_kind_and_place() {
        let v = |f: fn(&mut Volume)| {
            let mut v = Volume {
                name: "v".into(),
                ..Default::default()
            };
            f(&mut v);
            v
        };
        let cases = [
            (v(|_| {}), Kind::EmptyDir { memory: false }, Some(EMPTY_DIR)),
            (
                v(|v| {
                    v.empty_dir = Some(EmptyDirVolumeSource {
                        medium: Some("Memory".into()),
                        ..Default::default()
                    })
                }),
                Kind::EmptyDir { memory: true },
                Some(EMPTY_DIR),
            ),
            (
                v(|v| v.host_path = Some(HostPathVolumeSource::default())),
                Kind::HostPath,
                None,
            ),
            (
                v(|v| v.config_map = Some(ConfigMapVolumeSource::default())),
                Kind::ConfigMap,
                Some(CONFIG_MAP),
            ),
            (
                v(|v| {
                    v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource::default())
                }),
                Kind::Claim,
                None,
            ),
        ];
        for (vol, kind, dir) in cases {
            assert_eq!(Kind::of(&vol), kind);
            assert_eq!(kind.plugin_dir(), dir, "{kind:?}");
        }
        assert!(Kind::Secret.on_tmpfs() && Kind::Projected.on_tmpfs());
        assert!(!Kind::ConfigMap.on_tmpfs() && !Kind::EmptyDir { memory: false }.on_tmpfs());
    }

    #[test]
    fn trust_anchors_are_deduplicated_and_written_as_go_writes_them() {
        let a = pem::encode(&pem::Pem::new("CERTIFICATE", vec![1u8; 100]));
        let b = pem::encode_config(
            &pem::Pem::new("CERTIFICATE", vec![2u8; 10]),
            pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
        );
        let order = std::collections::hash_map::RandomState::new();
        let both = format!("{a}{b}");
        let out = normalize_trust_anchors(&[&both, &a], &order).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert_eq!(
            text.matches("-----BEGIN CERTIFICATE-----\n").count(),
            2,
            "{text}"
        );
        assert!(!text.contains('\r') && text.ends_with("-----END CERTIFICATE-----\n"));
        // 64 columns of base64, as Go's encoder.
        assert!(text.lines().all(|l| l.len() <= 64), "{text}");
        // Stable for one order.
        assert_eq!(normalize_trust_anchors(&[&a, &both], &order).unwrap(), out);
        // What is not PEM is skipped, as Go's pem.Decode skips it.
        assert!(
            normalize_trust_anchors(&["-----BEGIN CERTIFICATE-----\n!!"], &order)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn payload_paths_never_escape() {
        let cases = [
            ("a", Ok(())),
            ("a/b/c", Ok(())),
            ("..a", Err("must not start with '..'")),
            ("a/..b", Ok(())),
            ("", Err("must not be empty")),
            ("/etc/passwd", Err("must be relative path")),
            ("a/../../x", Err("must not contain '..'")),
            ("..", Err("must not contain '..'")),
            ("a\0b", Err("NUL")),
        ];
        for (path, want) in cases {
            match (validate_path(path), want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{path:?}: {e}"),
                (got, want) => panic!("{path:?}: {got:?}, want {want:?}"),
            }
        }
        assert_eq!(clean_path("./a//b/"), "a/b");
    }

    fn cm() -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([
                ("a".into(), "1".into()),
                ("b".into(), "2".into()),
            ])),
            binary_data: Some(BTreeMap::from([("bin".into(), ByteString(vec![0, 1]))])),
            ..Default::default()
        }
    }

    #[test]
    fn config_map_payloads() {
        let item = |key: &str, path: &str, mode: Option<i32>| KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
            ..Default::default()
        };
        let all = config_map_payload(
            &KeyedSource {
                items: &[],
                default_mode: 0o644,
                optional: false,
            },
            &cm(),
        )
        .unwrap();
        assert_eq!(
            all.keys().cloned().collect::<Vec<_>>(),
            ["a", "b", "bin"].map(String::from)
        );
        assert_eq!(all["bin"].data, vec![0, 1]);
        assert_eq!(all["a"].mode, 0o644);

        let items = [item("a", "x/y", Some(0o400)), item("b", "b", None)];
        let some = config_map_payload(
            &KeyedSource {
                items: &items,
                default_mode: 0o644,
                optional: false,
            },
            &cm(),
        )
        .unwrap();
        assert_eq!(some["x/y"].mode, 0o400);
        assert_eq!(some["b"].mode, 0o644);
        assert_eq!(some.len(), 2);

        let missing = [item("nope", "n", None)];
        let src = |optional| KeyedSource {
            items: &missing,
            default_mode: 0o644,
            optional,
        };
        assert_eq!(
            config_map_payload(&src(false), &cm())
                .unwrap_err()
                .to_string(),
            "configmap references non-existent config key: nope"
        );
        assert!(config_map_payload(&src(true), &cm()).unwrap().is_empty());
        assert_eq!(
            secret_payload(&src(false), &Secret::default())
                .unwrap_err()
                .to_string(),
            "references non-existent secret key: nope"
        );
    }

    fn with_limits(limits: &[Option<&str>], init: &[Option<&str>]) -> Pod {
        let c = |l: &Option<&str>| Container {
            resources: l.map(|l| resources(&[], &[("memory", l)])),
            ..container("c")
        };
        PodBuilder::default()
            .containers(limits.iter().map(c))
            .init_containers(init.iter().map(c))
            .build()
    }

    #[test]
    fn memory_volumes_are_sized_as_upstream_sizes_them() {
        let node = 8 << 30;
        let cases = [
            // No pod limit: node allocatable, or the smaller sizeLimit.
            (with_limits(&[None], &[]), None, node),
            (with_limits(&[None], &[]), Some(1 << 20), 1 << 20),
            // Every container limited: their sum.
            (
                with_limits(&[Some("64Mi"), Some("64Mi")], &[]),
                None,
                128 << 20,
            ),
            // One container unlimited: the pod is unlimited.
            (with_limits(&[Some("64Mi"), None], &[]), None, node),
            // A larger init container wins.
            (
                with_limits(&[Some("64Mi")], &[Some("256Mi")]),
                None,
                256 << 20,
            ),
            // A sizeLimit above the pod's limit is ignored, zero too.
            (with_limits(&[Some("64Mi")], &[]), Some(1 << 30), 64 << 20),
            (with_limits(&[Some("64Mi")], &[]), Some(0), 64 << 20),
        ];
        for (i, (pod, limit, want)) in cases.into_iter().enumerate() {
            assert_eq!(memory_volume_size(&pod, limit, node), want, "case {i}");
        }
    }

    #[test]
    fn mounts_that_cannot_be_honoured_are_named() {
        let pod = |mounts: Vec<VolumeMount>, privileged: bool| {
            PodBuilder::default()
                .volume(Volume {
                    name: "data".into(),
                    ..Default::default()
                })
                .container(Container {
                    volume_mounts: Some(mounts),
                    security_context: Some(SecurityContext {
                        privileged: Some(privileged),
                        ..Default::default()
                    }),
                    ..container("app")
                })
                .build()
        };
        let m = |name: &str, path: &str, sub: Option<&str>, prop: Option<&str>| VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            sub_path: sub.map(Into::into),
            mount_propagation: prop.map(Into::into),
            ..Default::default()
        };
        let cases = [
            (vec![m("data", "/d", None, None)], false, None),
            (vec![m("data", "/d", Some("a/b"), None)], false, None),
            (
                vec![m("nope", "/d", None, None)],
                false,
                Some(("volumeMounts[0].name", "cannot find volume \"nope\"")),
            ),
            (
                vec![m("data", "/d", None, None), m("data", "/d/", None, None)],
                false,
                Some(("volumeMounts[1].mountPath", "must be unique")),
            ),
            (
                vec![m("data", "/d", Some("../../etc"), None)],
                false,
                Some(("volumeMounts[0].subPath", "must not contain '..'")),
            ),
            (
                vec![m("data", "/d", Some("/etc"), None)],
                false,
                Some(("volumeMounts[0].subPath", "must not be an absolute path")),
            ),
            (
                vec![m("data", "/d", None, Some("Bidirectional"))],
                false,
                Some(("volumeMounts[0].mountPropagation", "only to privileged")),
            ),
            (
                vec![m("data", "/d", None, Some("Bidirectional"))],
                true,
                None,
            ),
        ];
        for (i, (mounts, privileged, want)) in cases.into_iter().enumerate() {
            let p = pod(mounts, privileged);
            let got = check_mounts(&p, &p.spec.as_ref().unwrap().containers[0]);
            match (got, want) {
                (Ok(()), None) => {}
                (Err((field, msg)), Some((f, m))) => {
                    assert_eq!(field, f, "case {i}");
                    assert!(msg.contains(m), "case {i}: {msg}");
                }
                (got, want) => panic!("case {i}: {got:?}, want {want:?}"),
            }
        }
    }
}
