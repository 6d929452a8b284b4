//! A container's mounts (upstream's makeMounts): each volumeMount of the
//! container onto its volume's host path, subPaths prepared safely, with
//! readOnly (forced for the volume types that are always read-only),
//! mountPropagation and recursiveReadOnly as the CRI takes them. A mount
//! that cannot be honoured is a config error naming the field, the
//! container's CreateContainerConfigError.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, VolumeMount};
use kubelet_core::expansion::expand;
use kubelet_core::volume::{check_mounts, check_sub_path, recursive_read_only};
use kubelet_cri::v1 as cri;

use crate::error::ConfigError;
use crate::volumes::{Form, PodVolumes, subpath};

/// A volumeMount the runtime cannot be given, in upstream's words.
#[derive(Debug, thiserror::Error)]
enum MountError {
    #[error("invalid MountPropagation mode: {0:?}")]
    Propagation(String),
    #[error("missing value for {}", .0.join(", "))]
    MissingVariables(Vec<String>),
}

fn propagation(m: &VolumeMount) -> Result<cri::MountPropagation, MountError> {
    match m.mount_propagation.as_deref() {
        None | Some("None") => Ok(cri::MountPropagation::PropagationPrivate),
        Some("HostToContainer") => Ok(cri::MountPropagation::PropagationHostToContainer),
        Some("Bidirectional") => Ok(cri::MountPropagation::PropagationBidirectional),
        Some(other) => Err(MountError::Propagation(other.to_owned())),
    }
}

/// The subPath of mount `m` (subPathExpr expanded from the container's
/// environment, upstream's ExpandContainerVolumeMounts: a reference to a
/// variable unset or empty is an error).
fn sub_path(env: &HashMap<&str, &str>, m: &VolumeMount) -> Result<String, MountError> {
    let expr = m.sub_path_expr.as_deref().unwrap_or("");
    if expr.is_empty() {
        return Ok(m.sub_path.clone().unwrap_or_default());
    }
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let out = expand(expr, |k| match env.get(k).filter(|v| !v.is_empty()) {
        Some(v) => Some((*v).to_owned()),
        None => {
            missing.borrow_mut().insert(k.to_owned());
            Some(String::new())
        }
    });
    let missing = missing.into_inner();
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(MountError::MissingVariables(missing.into_iter().collect()))
    }
}

/// Where the kubelet-managed hosts file is mounted.
pub const ETC_HOSTS: &str = "/etc/hosts";

/// Whether the container mounts a volume of its own at /etc/hosts (then
/// the kubelet's hosts file is neither written nor mounted for it).
pub fn mounts_etc_hosts(c: &Container) -> bool {
    c.volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == ETC_HOSTS)
}

/// What the runtime gives a container's mounts beyond its volumes.
#[derive(Debug, Default)]
pub struct RuntimeMounts {
    /// The pod's runtime handler supports recursive read-only mounts.
    pub recursive_read_only: bool,
    /// The image volumes the container mounts, pulled, by volume name.
    pub images: HashMap<String, cri::ImageSpec>,
}

/// Container `c`'s CRI mounts. `pod_dir` is `<root>/pods/<uid>`, where
/// subPath mounts are made; `env` is the container's environment
/// (subPathExpr); `hosts`, the pod's managed hosts file, is mounted at
/// /etc/hosts unless the container mounts something there itself.
pub async fn container_mounts(
    pod: &Pod,
    c: &Container,
    volumes: &PodVolumes,
    pod_dir: &Path,
    env: &[(String, String)],
    hosts: Option<&Path>,
    runtime: &RuntimeMounts,
) -> Result<Vec<cri::Mount>, ConfigError> {
    let env: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let err = |field: String, message: String| ConfigError {
        container: c.name.clone(),
        field,
        message,
    };
    check_mounts(pod, c).map_err(|(field, message)| err(field, message))?;
    let mut out = Vec::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let field = |f: &str| format!("volumeMounts[{i}].{f}");
        let Some(vol) = volumes.get(&m.name) else {
            return Err(err(
                field("name"),
                format!(
                    "cannot find volume {:?} to mount into container {:?}",
                    m.name, c.name
                ),
            ));
        };
        let sub = sub_path(&env, m).map_err(|e| err(field("subPathExpr"), e.to_string()))?;
        if !sub.is_empty() {
            check_sub_path(&sub).map_err(|e| err(field("subPath"), e.to_string()))?;
        }
        if vol.form == Form::Image {
            let Some(image) = runtime.images.get(&m.name) else {
                return Err(err(
                    field("name"),
                    format!("image volume {:?} was not pulled", m.name),
                ));
            };
            // A subPath is the runtime's to mount (upstream's ImageSubPath):
            // it refuses one the image lacks.
            out.push(cri::Mount {
                container_path: m.mount_path.clone(),
                readonly: true,
                image: Some(image.clone()),
                image_sub_path: sub,
                ..Default::default()
            });
            continue;
        }
        let host_path: PathBuf = if sub.is_empty() {
            vol.host_path.clone()
        } else {
            let target = pod_dir
                .join("volume-subpaths")
                .join(&m.name)
                .join(&c.name)
                .join(i.to_string());
            let source = vol.host_path.clone();
            let prepared =
                kubelet_tasks::blocking(move || subpath::prepare(&source, &sub, &target)).await;
            prepared.map_err(|e| {
                err(
                    field("subPath"),
                    format!(
                        "failed to prepare subPath for volumeMount {:?} of container {:?}: {e}",
                        m.name, c.name
                    ),
                )
            })?
        };
        let propagation =
            propagation(m).map_err(|e| err(field("mountPropagation"), e.to_string()))?;
        let rro = recursive_read_only(m, runtime.recursive_read_only).map_err(|e| {
            err(
                field("recursiveReadOnly"),
                format!("failed to resolve recursive read-only mode: {e}"),
            )
        })?;
        out.push(cri::Mount {
            container_path: m.mount_path.clone(),
            host_path: host_path.display().to_string(),
            readonly: m.read_only.unwrap_or(false) || vol.read_only,
            propagation: propagation as i32,
            recursive_read_only: rro,
            ..Default::default()
        });
    }
    if let Some(hosts) = hosts.filter(|_| !mounts_etc_hosts(c)) {
        out.push(cri::Mount {
            container_path: ETC_HOSTS.to_owned(),
            host_path: hosts.display().to_string(),
            selinux_relabel: true,
            ..Default::default()
        });
    }
    Ok(out)
}

/// Container `c`'s raw block devices (upstream's makeBlockVolumes): each
/// `volumeDevices` entry given the pod's link to its volume's device, `mrw`
/// or, for a read-only volume, `r`.
pub fn container_devices(
    c: &Container,
    volumes: &PodVolumes,
) -> Result<Vec<cri::Device>, ConfigError> {
    let mut out = Vec::new();
    for (i, d) in c.volume_devices.iter().flatten().enumerate() {
        let err = |field: &str, message: String| ConfigError {
            container: c.name.clone(),
            field: format!("volumeDevices[{i}].{field}"),
            message,
        };
        if !d.device_path.starts_with('/') {
            return Err(err(
                "devicePath",
                format!(
                    "error DevicePath `{}` must be an absolute path",
                    d.device_path
                ),
            ));
        }
        let Some(vol) = volumes.get(&d.name).filter(|v| v.form == Form::Device) else {
            return Err(err(
                "name",
                format!(
                    "cannot find volume {:?} to pass into container {:?}",
                    d.name, c.name
                ),
            ));
        };
        out.push(cri::Device {
            container_path: d.device_path.clone(),
            host_path: vol.host_path.display().to_string(),
            permissions: if vol.read_only { "r" } else { "mrw" }.to_owned(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, Volume, VolumeDevice};
    use kubelet_core::testing::{PodBuilder, container};

    use crate::volumes::MountedVolume;

    fn pod(mounts: Vec<VolumeMount>) -> (Pod, PodVolumes) {
        let pod = PodBuilder::default()
            .container(Container {
                env: Some(vec![EnvVar {
                    name: "POD".into(),
                    value: Some("web-1".into()),
                    ..Default::default()
                }]),
                volume_mounts: Some(mounts),
                ..container("app")
            })
            .volumes(["data", "cfg"].map(|name| Volume {
                name: name.into(),
                ..Default::default()
            }))
            .build();
        let volumes = PodVolumes::from([
            (
                "data".to_owned(),
                MountedVolume {
                    host_path: "/pods/u/volumes/kubernetes.io~empty-dir/data".into(),
                    read_only: false,
                    gid: None,
                    form: Form::Directory,
                },
            ),
            (
                "cfg".to_owned(),
                MountedVolume {
                    host_path: "/pods/u/volumes/kubernetes.io~configmap/cfg".into(),
                    read_only: true,
                    gid: None,
                    form: Form::Directory,
                },
            ),
        ]);
        (pod, volumes)
    }

    fn mount(name: &str, path: &str) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn mounts_carry_paths_modes_and_propagation() {
        let mut ro = mount("data", "/ro");
        ro.read_only = Some(true);
        let mut prop = mount("data", "/prop");
        prop.mount_propagation = Some("HostToContainer".into());
        let (p, v) = pod(vec![
            mount("data", "/d"),
            mount("cfg", "/etc/cfg"),
            ro,
            prop,
        ]);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let got = container_mounts(
            &p,
            c,
            &v,
            Path::new("/pods/u"),
            &[],
            None,
            &RuntimeMounts::default(),
        )
        .await
        .unwrap();
        let summary: Vec<(&str, &str, bool, i32)> = got
            .iter()
            .map(|m| {
                (
                    m.container_path.as_str(),
                    m.host_path.as_str(),
                    m.readonly,
                    m.propagation,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "/d",
                    "/pods/u/volumes/kubernetes.io~empty-dir/data",
                    false,
                    0
                ),
                (
                    "/etc/cfg",
                    "/pods/u/volumes/kubernetes.io~configmap/cfg",
                    true,
                    0
                ),
                (
                    "/ro",
                    "/pods/u/volumes/kubernetes.io~empty-dir/data",
                    true,
                    0
                ),
                (
                    "/prop",
                    "/pods/u/volumes/kubernetes.io~empty-dir/data",
                    false,
                    1
                ),
            ]
        );
    }

    #[tokio::test]
    async fn mounts_that_cannot_be_honoured_are_config_errors() {
        let mut rro = mount("data", "/r");
        rro.read_only = Some(true);
        rro.recursive_read_only = Some("Enabled".into());
        let mut rro_rw = mount("data", "/r");
        rro_rw.recursive_read_only = Some("IfPossible".into());
        let mut expr = mount("data", "/x");
        expr.sub_path_expr = Some("$(NOPE)/logs".into());
        let cases = [
            (
                mount("nope", "/n"),
                "volumeMounts[0].name",
                "cannot find volume \"nope\"",
            ),
            (
                rro,
                "volumeMounts[0].recursiveReadOnly",
                "not supported by the runtime",
            ),
            (
                rro_rw,
                "volumeMounts[0].recursiveReadOnly",
                "it is not read-only",
            ),
            (
                expr,
                "volumeMounts[0].subPathExpr",
                "missing value for NOPE",
            ),
        ];
        for (m, field, message) in cases {
            let (p, v) = pod(vec![m]);
            let c = &p.spec.as_ref().unwrap().containers[0];
            let e = container_mounts(
                &p,
                c,
                &v,
                Path::new("/pods/u"),
                &[],
                None,
                &RuntimeMounts::default(),
            )
            .await
            .unwrap_err();
            assert_eq!(e.field, field);
            assert!(e.message.contains(message), "{}", e.message);
        }
        let m = VolumeMount {
            sub_path_expr: Some("$(POD)".into()),
            ..mount("data", "/x")
        };
        let env = HashMap::from([("POD", "web-1"), ("EMPTY", "")]);
        assert_eq!(sub_path(&env, &m).unwrap(), "web-1");
        let m = VolumeMount {
            sub_path_expr: Some("$(EMPTY)/$(POD)".into()),
            ..mount("data", "/x")
        };
        assert!(
            matches!(sub_path(&env, &m), Err(MountError::MissingVariables(v)) if v == ["EMPTY"])
        );
    }

    #[tokio::test]
    async fn the_hosts_file_is_mounted_unless_the_container_mounts_etc_hosts() {
        let hosts = Path::new("/pods/u/etc-hosts");
        let (p, v) = pod(vec![mount("data", "/d")]);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let got = container_mounts(
            &p,
            c,
            &v,
            Path::new("/pods/u"),
            &[],
            Some(hosts),
            &RuntimeMounts::default(),
        )
        .await
        .unwrap();
        let last = got.last().unwrap();
        assert_eq!(
            (
                last.container_path.as_str(),
                last.host_path.as_str(),
                last.readonly
            ),
            (ETC_HOSTS, "/pods/u/etc-hosts", false)
        );
        let (p, v) = pod(vec![mount("data", ETC_HOSTS)]);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let got = container_mounts(
            &p,
            c,
            &v,
            Path::new("/pods/u"),
            &[],
            Some(hosts),
            &RuntimeMounts::default(),
        )
        .await
        .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].host_path,
            "/pods/u/volumes/kubernetes.io~empty-dir/data"
        );
    }

    #[test]
    fn block_volumes_are_given_as_devices_with_upstreams_permissions() {
        let block = |path: &str, read_only| MountedVolume {
            host_path: path.into(),
            read_only,
            gid: None,
            form: Form::Device,
        };
        let (_, mut volumes) = pod(vec![]);
        volumes.insert(
            "disk".into(),
            block(
                "/pods/u/volumeDevices/kubernetes.io~local-volume/pv1",
                false,
            ),
        );
        volumes.insert(
            "ro".into(),
            block("/pods/u/volumeDevices/kubernetes.io~csi/pv2", true),
        );
        let device = |name: &str, path: &str| VolumeDevice {
            name: name.into(),
            device_path: path.into(),
        };
        let with = |devices: Vec<VolumeDevice>| Container {
            volume_devices: Some(devices),
            ..container("app")
        };
        let got = container_devices(
            &with(vec![device("disk", "/dev/xvda"), device("ro", "/dev/ro")]),
            &volumes,
        )
        .unwrap();
        let summary: Vec<(&str, &str, &str)> = got
            .iter()
            .map(|d| {
                (
                    d.container_path.as_str(),
                    d.host_path.as_str(),
                    d.permissions.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "/dev/xvda",
                    "/pods/u/volumeDevices/kubernetes.io~local-volume/pv1",
                    "mrw"
                ),
                (
                    "/dev/ro",
                    "/pods/u/volumeDevices/kubernetes.io~csi/pv2",
                    "r"
                ),
            ]
        );
        // Refused: a relative path, a volume that is not a block volume, one
        // that is not there.
        for (d, field, message) in [
            (
                device("disk", "dev/xvda"),
                "volumeDevices[0].devicePath",
                "error DevicePath `dev/xvda` must be an absolute path",
            ),
            (
                device("data", "/dev/x"),
                "volumeDevices[0].name",
                "cannot find volume \"data\" to pass into container \"app\"",
            ),
            (
                device("gone", "/dev/x"),
                "volumeDevices[0].name",
                "cannot find volume \"gone\" to pass into container \"app\"",
            ),
        ] {
            let err = container_devices(&with(vec![d]), &volumes).unwrap_err();
            assert_eq!((err.field.as_str(), err.message.as_str()), (field, message));
        }
    }

    #[test]
    fn recursive_read_only_follows_the_handlers_support() {
        let with = |mode: &str| VolumeMount {
            read_only: Some(true),
            recursive_read_only: Some(mode.into()),
            ..mount("data", "/r")
        };
        for (mode, supported, want) in [
            ("Disabled", true, Some(false)),
            ("IfPossible", true, Some(true)),
            ("IfPossible", false, Some(false)),
            ("Enabled", true, Some(true)),
            ("Enabled", false, None),
        ] {
            let got = recursive_read_only(&with(mode), supported).ok();
            assert_eq!(got, want, "{mode} supported={supported}");
        }
    }

    #[tokio::test]
    async fn an_image_volume_is_the_pulled_image_mounted_read_only() {
        let (p, mut v) = pod(vec![mount("data", "/img")]);
        v.insert(
            "data".into(),
            MountedVolume {
                host_path: PathBuf::new(),
                read_only: true,
                gid: None,
                form: Form::Image,
            },
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        let spec = cri::ImageSpec {
            image: "sha256:abc".into(),
            user_specified_image: "busybox:1".into(),
            ..Default::default()
        };
        let runtime = RuntimeMounts {
            recursive_read_only: false,
            images: HashMap::from([("data".to_owned(), spec.clone())]),
        };
        let got = container_mounts(&p, c, &v, Path::new("/pods/u"), &[], None, &runtime)
            .await
            .unwrap();
        assert_eq!(
            (
                got[0].container_path.as_str(),
                got[0].host_path.as_str(),
                got[0].readonly
            ),
            ("/img", "", true)
        );
        assert_eq!(got[0].image, Some(spec));
        // Not pulled: refused, naming the field.
        let none = container_mounts(
            &p,
            c,
            &v,
            Path::new("/pods/u"),
            &[],
            None,
            &RuntimeMounts::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(none.field, "volumeMounts[0].name");
        // A subPath is the runtime's to mount; one that leaves the image is
        // refused here, naming the field.
        for (sub_path, ok) in [("bin", true), ("../etc", false), ("/bin", false)] {
            let mut sub = mount("data", "/img");
            sub.sub_path = Some(sub_path.into());
            let (p, _) = pod(vec![sub]);
            let c = &p.spec.as_ref().unwrap().containers[0];
            let got = container_mounts(&p, c, &v, Path::new("/pods/u"), &[], None, &runtime).await;
            match got {
                Ok(m) if ok => assert_eq!(m[0].image_sub_path, sub_path),
                Err(e) if !ok => assert_eq!(e.field, "volumeMounts[0].subPath", "{sub_path}"),
                other => panic!("{sub_path}: {other:?}"),
            }
        }
    }
}
