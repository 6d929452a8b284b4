//! A pod's own local storage limits (upstream's localStorageEviction, with
//! localStorageCapacityIsolation): an emptyDir over its `sizeLimit`, the
//! pod's ephemeral storage over the sum of its containers'
//! `ephemeral-storage` limits, a container's writable layer and logs over
//! its own limit. Checked in that order; the first exceeded says why the
//! pod goes.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::rank::canonical;
use crate::quantity::{format_binary_si, format_decimal_si, parse_bytes};
use crate::resources::pod_limits;
use crate::stats::{FsStats, PodStats};

/// The kubelet_evictions signal of each kind of local storage eviction.
pub const EMPTY_DIR_SIGNAL: &str = "emptydirfs.limit";
pub const POD_SIGNAL: &str = "ephemeralpodfs.limit";
pub const CONTAINER_SIGNAL: &str = "ephemeralcontainerfs.limit";

const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// A limit exceeded: the signal it counts under and the pod's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exceeded {
    pub signal: &'static str,
    pub message: String,
}

fn used(fs: Option<&FsStats>) -> u64 {
    fs.and_then(|f| f.used_bytes).unwrap_or(0)
}

/// An amount as upstream prints a limit summed from the spec: binary when
/// it divides by 1024, decimal otherwise.
fn amount(v: i64) -> String {
    if v % 1024 == 0 {
        format_binary_si(v)
    } else {
        format_decimal_si(v)
    }
}

/// The first of the pod's local storage limits its usage exceeds.
/// `dedicated_image_fs`: a container's writable layer lives elsewhere and
/// is not counted against its limit.
pub fn exceeded(pod: &Pod, stats: &PodStats, dedicated_image_fs: bool) -> Option<Exceeded> {
    let spec = pod.spec.as_ref()?;
    for v in spec.volumes.iter().flatten() {
        let Some(limit) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) else {
            continue;
        };
        let size = parse_bytes(limit).unwrap_or(0);
        let usage = stats.volume_stats.iter().find(|s| s.name == v.name);
        if let Some(u) = usage
            && size > 0
            && used(Some(&u.fs)) > size as u64
        {
            return Some(Exceeded {
                signal: EMPTY_DIR_SIGNAL,
                message: format!(
                    "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                    v.name,
                    canonical(limit)
                ),
            });
        }
    }
    if let Some(limit) = pod_limits(pod).get(EPHEMERAL_STORAGE) {
        let usage = used(stats.ephemeral_storage.as_ref());
        if usage > u64::try_from(*limit).unwrap_or(0) {
            return Some(Exceeded {
                signal: POD_SIGNAL,
                message: format!(
                    "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                    amount(*limit)
                ),
            });
        }
    }
    let is_sidecar = |c: &&Container| c.restart_policy.as_deref() == Some("Always");
    let limited: Vec<(
        &str,
        &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    )> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten().filter(is_sidecar))
        .filter_map(|c| {
            let q = c
                .resources
                .as_ref()?
                .limits
                .as_ref()?
                .get(EPHEMERAL_STORAGE)?;
            (parse_bytes(q).unwrap_or(0) != 0).then_some((c.name.as_str(), q))
        })
        .collect();
    for cs in &stats.containers {
        let Some((name, limit)) = limited.iter().find(|(n, _)| *n == cs.name) else {
            continue;
        };
        let mut usage = used(cs.logs.as_ref());
        if !dedicated_image_fs {
            usage += used(cs.rootfs.as_ref());
        }
        if usage > u64::try_from(parse_bytes(limit).unwrap_or(0)).unwrap_or(0) {
            return Some(Exceeded {
                signal: CONTAINER_SIGNAL,
                message: format!(
                    "Container {name} exceeded its local ephemeral storage limit {:?}. ",
                    canonical(limit)
                ),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{ContainerStats, VolumeStats};
    use crate::testing::{PodBuilder, container, resources};
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Volume};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::time::UNIX_EPOCH;

    fn fs(used: u64) -> Option<FsStats> {
        Some(FsStats::part_of(UNIX_EPOCH, None, Some(used), None))
    }

    fn limited(name: &str, limit: Option<&str>, sidecar: bool) -> Container {
        Container {
            restart_policy: sidecar.then(|| "Always".into()),
            resources: limit.map(|l| resources(&[], &[(EPHEMERAL_STORAGE, l)])),
            ..container(name)
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>, size_limit: Option<&str>) -> Pod {
        PodBuilder::default()
            .containers(containers)
            .init_containers(init)
            .volume(Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    size_limit: size_limit.map(|s| Quantity(s.into())),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .build()
    }

    fn stats(scratch: u64, containers: &[(&str, u64, u64)]) -> PodStats {
        let cs: Vec<ContainerStats> = containers
            .iter()
            .map(|(n, root, logs)| ContainerStats {
                name: (*n).into(),
                rootfs: fs(*root),
                logs: fs(*logs),
                ..Default::default()
            })
            .collect();
        let total = scratch + containers.iter().map(|(_, r, l)| r + l).sum::<u64>();
        PodStats {
            containers: cs,
            volume_stats: vec![VolumeStats {
                fs: fs(scratch).unwrap(),
                name: "scratch".into(),
                pvc_ref: None,
                local_ephemeral: true,
            }],
            ephemeral_storage: fs(total),
            ..Default::default()
        }
    }

    #[test]
    fn local_storage_limits_as_upstream_checks_them() {
        const MI: u64 = 1 << 20;
        let a = |limit| limited("a", limit, false);
        for (pod, stats, dedicated, want) in [
            // Within every limit.
            (
                pod(vec![a(Some("10Mi"))], vec![], Some("5Mi")),
                stats(4 * MI, &[("a", MI, MI)]),
                false,
                None,
            ),
            (
                pod(vec![a(None)], vec![], Some("5Mi")),
                stats(6 * MI, &[("a", 0, 0)]),
                false,
                Some((
                    EMPTY_DIR_SIGNAL,
                    "Usage of EmptyDir volume \"scratch\" exceeds the limit \"5Mi\". ",
                )),
            ),
            // The pod's total: 4Mi + 3Mi + 3Mi over 10Mi (the emptyDir has no limit).
            (
                pod(vec![a(Some("10Mi"))], vec![], None),
                stats(4 * MI, &[("a", 3 * MI, 3 * MI + 1)]),
                false,
                Some((
                    POD_SIGNAL,
                    "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ",
                )),
            ),
            // A container over its own limit, the pod within the sum.
            (
                pod(
                    vec![a(Some("1Mi")), limited("b", Some("100Mi"), false)],
                    vec![],
                    None,
                ),
                stats(0, &[("a", MI, 1), ("b", 0, 0)]),
                false,
                Some((
                    CONTAINER_SIGNAL,
                    "Container a exceeded its local ephemeral storage limit \"1Mi\". ",
                )),
            ),
            // On a dedicated image file system the layer does not count.
            (
                pod(
                    vec![a(Some("1Mi")), limited("b", Some("100Mi"), false)],
                    vec![],
                    None,
                ),
                stats(0, &[("a", 50 * MI, 1), ("b", 0, 0)]),
                true,
                None,
            ),
            // A sidecar's limit counts; an ordinary init container's does not.
            (
                pod(
                    vec![limited("b", Some("100Mi"), false)],
                    vec![limited("side", Some("1Mi"), true)],
                    None,
                ),
                stats(0, &[("side", 2 * MI, 0)]),
                false,
                Some((
                    CONTAINER_SIGNAL,
                    "Container side exceeded its local ephemeral storage limit \"1Mi\". ",
                )),
            ),
            (
                pod(
                    vec![limited("b", Some("100Mi"), false)],
                    vec![limited("init", Some("1Mi"), false)],
                    None,
                ),
                stats(0, &[("init", 2 * MI, 0)]),
                false,
                None,
            ),
        ] {
            let got = exceeded(&pod, &stats, dedicated);
            let want = want.map(|(signal, message)| Exceeded {
                signal,
                message: message.into(),
            });
            assert_eq!(got, want);
        }
    }
}
