//! The security context a container runs with, as upstream's
//! `securitycontext` package and kuberuntime's security_context.go and
//! helpers.go decide it: the container's fields over the pod's,
//! capabilities, no_new_privs, the masked and read-only /proc paths per
//! procMount, the seccomp and AppArmor profiles (fields and the deprecated
//! AppArmor annotations), supplementalGroupsPolicy, and runAsNonRoot
//! verified against the user the image runs as. Pure: the runtime manager
//! turns the result into CRI messages.

use std::path::{Component, Path};

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, Pod, PodSecurityContext, SeccompProfile, SecurityContext,
};

use crate::dns::format_pod;

/// The paths upstream masks in every container whose procMount is Default
/// (kept in sync with moby's defaults, as upstream's are).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The paths upstream makes read-only in every container whose procMount
/// is Default.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

fn pod_sc(pod: &Pod) -> Option<&PodSecurityContext> {
    pod.spec.as_ref().and_then(|s| s.security_context.as_ref())
}

/// Upstream's DetermineEffectiveSecurityContext: the pod's seLinuxOptions,
/// runAsUser, runAsGroup and runAsNonRoot, each replaced by the
/// container's when it sets one, and the container's other fields.
pub fn effective(pod: &Pod, c: &Container) -> SecurityContext {
    let mut eff = pod_sc(pod)
        .map(|p| SecurityContext {
            se_linux_options: p.se_linux_options.clone(),
            windows_options: p.windows_options.clone(),
            run_as_user: p.run_as_user,
            run_as_group: p.run_as_group,
            run_as_non_root: p.run_as_non_root,
            ..Default::default()
        })
        .unwrap_or_default();
    let Some(sc) = c.security_context.as_ref() else {
        return eff;
    };
    macro_rules! over {
        ($($f:ident),*) => { $( if sc.$f.is_some() { eff.$f = sc.$f.clone(); } )* };
    }
    over!(
        se_linux_options,
        windows_options,
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount
    );
    eff
}

/// A capability name to drop as the runtime wants it: upper case, without
/// the `CAP_` prefix (containerd adds it; `ALL` stays `ALL`).
pub fn capability_name(name: &str) -> String {
    let upper = name.trim().to_ascii_uppercase();
    match upper.strip_prefix("CAP_") {
        Some(rest) if !rest.is_empty() => rest.to_owned(),
        _ => upper,
    }
}

/// The capabilities to add and to drop (upstream's
/// convertToRuntimeCapabilities); None when the effective context names
/// none. Names to add go as written, as upstream sends them (containerd
/// prefixes `CAP_`, so `CAP_SYS_ADMIN` grants nothing): normalizing them
/// would let `CAP_SYS_ADMIN` or `CAP_ALL` past admission policies written
/// for `SYS_ADMIN` and `ALL`. Names to drop are normalized by
/// [`capability_name`], so `drop: [CAP_NET_RAW]` drops NET_RAW where
/// upstream would silently keep it: dropping more never confines less.
pub fn capabilities(sc: &SecurityContext) -> Option<(Vec<String>, Vec<String>)> {
    let caps = sc.capabilities.as_ref()?;
    let add = caps.add.iter().flatten().cloned().collect();
    let drop = caps
        .drop
        .iter()
        .flatten()
        .map(|n| capability_name(n))
        .collect();
    Some((add, drop))
}

/// Upstream's AddNoNewPrivileges: only an explicit
/// `allowPrivilegeEscalation: false` sets no_new_privs.
pub fn no_new_privs(sc: &SecurityContext) -> bool {
    sc.allow_privilege_escalation == Some(false)
}

/// The masked and the read-only paths for a procMount (upstream's
/// ConvertToRuntimeMaskedPaths / ConvertToRuntimeReadonlyPaths):
/// none for Unmasked; otherwise the defaults, the masked ones followed by
/// the host's `extra_masked` ([`thermal_throttle_paths`] that exist). The
/// runtime clears them for a privileged container.
pub fn proc_paths(proc_mount: Option<&str>, extra_masked: &[String]) -> (Vec<String>, Vec<String>) {
    if proc_mount == Some("Unmasked") {
        return (Vec::new(), Vec::new());
    }
    let masked = DEFAULT_MASKED_PATHS
        .iter()
        .map(|p| (*p).to_owned())
        .chain(extra_masked.iter().cloned())
        .collect();
    let readonly = DEFAULT_READONLY_PATHS
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    (masked, readonly)
}

/// The per-CPU thermal_throttle directories upstream also masks, for the
/// CPUs of `/sys/devices/system/cpu/possible` (`0-3,8`); the caller keeps
/// those that exist.
pub fn thermal_throttle_paths(possible: &str) -> Vec<String> {
    crate::cpuset::parse(possible.trim())
        .unwrap_or_default()
        .into_iter()
        .map(|cpu| format!("/sys/devices/system/cpu/cpu{cpu}/thermal_throttle"))
        .collect()
}

/// A seccomp or AppArmor profile as the runtime is given it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Profile {
    RuntimeDefault,
    Unconfined,
    /// Seccomp: the profile's path on the node; AppArmor: the loaded
    /// profile's name.
    Localhost(String),
}

/// Why a security profile cannot be given to the runtime: names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ProfileError {
    pub field: String,
    pub message: String,
}

/// The seccomp profile of a container (`c`), or of the sandbox (None:
/// upstream gives the sandbox RuntimeDefault so that a pod-level profile
/// cannot starve the pause process). The container's field, else the
/// pod's, else `seccompDefault` (RuntimeDefault) or Unconfined. A
/// Localhost profile is a descending path under `root`
/// (`<root-dir>/seccomp`): an empty one (CVE-2023-2431) or one that
/// climbs out is refused.
pub fn seccomp_profile(
    pod: &Pod,
    c: Option<&Container>,
    root: &Path,
    seccomp_default: bool,
) -> Result<Profile, ProfileError> {
    let Some(c) = c else {
        return Ok(Profile::RuntimeDefault);
    };
    let (field, profile): (&str, Option<&SeccompProfile>) = match c
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
    {
        Some(p) => ("securityContext.seccompProfile", Some(p)),
        None => (
            "spec.securityContext.seccompProfile",
            pod_sc(pod).and_then(|p| p.seccomp_profile.as_ref()),
        ),
    };
    let Some(profile) = profile else {
        return Ok(if seccomp_default {
            Profile::RuntimeDefault
        } else {
            Profile::Unconfined
        });
    };
    match profile.type_.as_str() {
        "RuntimeDefault" => Ok(Profile::RuntimeDefault),
        "Localhost" => {
            let name = profile.localhost_profile.as_deref().unwrap_or("");
            let err = |message: &str| ProfileError {
                field: format!("{field}.localhostProfile"),
                message: message.into(),
            };
            if name.is_empty() {
                return Err(err(
                    "localhostProfile must be set if seccompProfile type is Localhost.",
                ));
            }
            if !is_descending(name) {
                return Err(err("must be a relative path that does not contain '..'"));
            }
            Ok(Profile::Localhost(root.join(name).display().to_string()))
        }
        "Unconfined" => Ok(Profile::Unconfined),
        other => Err(ProfileError {
            field: format!("{field}.type"),
            message: format!("unsupported seccomp profile type {other:?}"),
        }),
    }
}

/// A relative path that names nothing above where it starts (upstream's
/// validateLocalDescendingPath).
fn is_descending(p: &str) -> bool {
    Path::new(p)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The deprecated per-container AppArmor annotation's key prefix.
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The AppArmor profile of `c` as upstream's apparmor.GetProfile finds it:
/// the container's field, else its deprecated annotation
/// (`runtime/default`, `unconfined`, `localhost/<name>`), else the pod's
/// field.
fn apparmor_field(pod: &Pod, c: &Container) -> Option<AppArmorProfile> {
    if let Some(p) = c
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
    {
        return Some(p);
    }
    let annotation = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&format!("{APPARMOR_ANNOTATION_PREFIX}{}", c.name)));
    if let Some(value) = annotation {
        let (type_, localhost_profile) = match value.as_str() {
            "runtime/default" => ("RuntimeDefault", None),
            "unconfined" => ("Unconfined", None),
            v => match v.strip_prefix("localhost/") {
                Some(name) => ("Localhost", Some(name.to_owned())),
                // Upstream ignores values it cannot map.
                None => return pod_sc(pod).and_then(|p| p.app_armor_profile.clone()),
            },
        };
        return Some(AppArmorProfile {
            type_: type_.into(),
            localhost_profile,
        });
    }
    pod_sc(pod).and_then(|p| p.app_armor_profile.clone())
}

/// A security setting that cannot be honoured, in upstream's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecurityError {
    #[error("missing localhost apparmor profile name")]
    AppArmorNoName,
    #[error("unknown apparmor profile type: {0:?}")]
    AppArmorType(String),
    #[error("Cannot enforce AppArmor: {0}")]
    AppArmorHost(String),
    #[error("Cannot enforce AppArmor: invalid empty AppArmor profile name (container {0:?})")]
    AppArmorEmptyName(String),
    #[error("unsupported supplementalGroupsPolicy: {0}")]
    SupplementalGroupsPolicy(String),
    #[error("container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})")]
    RunAsRoot { pod: String, container: String },
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {pod:?}, container: {container})"
    )]
    NonNumericUser {
        user: String,
        pod: String,
        container: String,
    },
    #[error(
        "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})"
    )]
    ImageRunsAsRoot { pod: String, container: String },
    #[error(
        "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({max})): must be between 0 and {max}, inclusive (pod: {pod:?}, container: {container})",
        max = i32::MAX
    )]
    InvalidUid {
        uid: i64,
        pod: String,
        container: String,
    },
}

/// The AppArmor profile of `c` and its deprecated string form (upstream's
/// getAppArmorProfile); None: the runtime's choice.
pub fn apparmor_profile(
    pod: &Pod,
    c: &Container,
) -> Result<Option<(Profile, String)>, SecurityError> {
    let Some(p) = apparmor_field(pod, c) else {
        return Ok(None);
    };
    Ok(Some(match p.type_.as_str() {
        "RuntimeDefault" => (Profile::RuntimeDefault, "runtime/default".into()),
        "Unconfined" => (Profile::Unconfined, "unconfined".into()),
        "Localhost" => {
            let name = p.localhost_profile.ok_or(SecurityError::AppArmorNoName)?;
            let deprecated = format!("localhost/{name}");
            (Profile::Localhost(name), deprecated)
        }
        other => return Err(SecurityError::AppArmorType(other.to_owned())),
    }))
}

/// Every container of the pod, init, regular and ephemeral ones (the
/// ephemeral ones as the containers their spec embeds).
fn all_containers(pod: &Pod) -> impl Iterator<Item = Container> + '_ {
    let s = pod.spec.as_ref();
    let init = s
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten();
    let regular = s.map(|s| s.containers.as_slice()).unwrap_or(&[]).iter();
    let ephemeral = s
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .map(|e| Container {
            name: e.name.clone(),
            security_context: e.security_context.clone(),
            ..Default::default()
        });
    init.chain(regular).cloned().chain(ephemeral)
}

/// Upstream's AppArmor admission (lifecycle's appArmorAdmitHandler):
/// a pending pod that asks any container for a profile other than
/// Unconfined needs AppArmor on the host (`host` is why not, if it is not
/// there); a Localhost profile needs a name. The message the pod is
/// rejected with (reason `AppArmor`).
pub fn apparmor_admission(pod: &Pod, host: Result<(), &str>) -> Result<(), SecurityError> {
    // Upstream rechecks only pods not yet running.
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase.is_some_and(|p| p != "Pending") {
        return Ok(());
    }
    // Upstream's isRequired: a pod-level or container-level profile other
    // than Unconfined, or an annotation other than `unconfined`, whatever
    // the containers' own fields then say.
    let confined =
        |p: &Option<AppArmorProfile>| p.as_ref().is_some_and(|p| p.type_ != "Unconfined");
    let required = pod_sc(pod).is_some_and(|p| confined(&p.app_armor_profile))
        || all_containers(pod)
            .any(|c| confined(&c.security_context.and_then(|s| s.app_armor_profile)))
        || pod
            .metadata
            .annotations
            .iter()
            .flatten()
            .any(|(k, v)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && v != "unconfined");
    if !required {
        return Ok(());
    }
    host.map_err(|e| SecurityError::AppArmorHost(e.to_owned()))?;
    for c in all_containers(pod) {
        if let Some(p) = apparmor_field(pod, &c)
            && p.type_ == "Localhost"
            && p.localhost_profile
                .as_deref()
                .is_none_or(|n| n.trim().is_empty())
        {
            return Err(SecurityError::AppArmorEmptyName(c.name));
        }
    }
    Ok(())
}

/// supplementalGroupsPolicy as the runtime numbers it (Merge 0, Strict 1).
pub fn supplemental_groups_policy(pod: &Pod) -> Result<i32, SecurityError> {
    match pod_sc(pod).and_then(|p| p.supplemental_groups_policy.as_deref()) {
        None | Some("Merge") => Ok(0),
        Some("Strict") => Ok(1),
        Some(other) => Err(SecurityError::SupplementalGroupsPolicy(other.to_owned())),
    }
}

/// Whether `c` runs with runAsNonRoot (its own setting, else the pod's).
pub fn wants_non_root(pod: &Pod, c: &Container) -> bool {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    c.security_context
        .as_ref()
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|p| p.run_as_non_root))
        .unwrap_or(false)
}

/// Upstream's verifyRunAsNonRoot. With runAsNonRoot (the container's, else
/// the pod's), an explicit runAsUser 0 is refused; without a runAsUser,
/// the image's user must be numeric and not 0 (`image_uid` and
/// `image_user` as the runtime's ImageStatus gives them; neither means
/// root).
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    image_uid: Option<i64>,
    image_user: &str,
) -> Result<(), SecurityError> {
    let eff = effective(pod, c);
    if eff.run_as_non_root != Some(true) {
        return Ok(());
    }
    let pod = format_pod(pod);
    let container = c.name.clone();
    if let Some(uid) = eff.run_as_user {
        if uid == 0 {
            return Err(SecurityError::RunAsRoot { pod, container });
        }
        return Ok(());
    }
    let uid = match (image_uid, image_user) {
        (None, user) if !user.is_empty() => {
            return Err(SecurityError::NonNumericUser {
                user: user.to_owned(),
                pod,
                container,
            });
        }
        (None, _) => 0,
        (Some(uid), _) => uid,
    };
    if uid == 0 {
        return Err(SecurityError::ImageRunsAsRoot { pod, container });
    }
    if !(0..=i64::from(i32::MAX)).contains(&uid) {
        return Err(SecurityError::InvalidUid {
            uid,
            pod,
            container,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{PodBuilder, container};

    fn pod(pod_sc: Option<PodSecurityContext>, sc: Option<SecurityContext>) -> (Pod, Container) {
        let c = Container {
            security_context: sc,
            ..container("c")
        };
        let p = PodBuilder::new("p")
            .namespace("ns")
            .uid("u")
            .with_spec(|s| s.security_context = pod_sc)
            .container(c.clone())
            .build();
        (p, c)
    }

    fn sc(non_root: Option<bool>, user: Option<i64>) -> Option<SecurityContext> {
        Some(SecurityContext {
            run_as_non_root: non_root,
            run_as_user: user,
            ..Default::default()
        })
    }

    #[test]
    fn the_containers_fields_override_the_pods() {
        let psc = PodSecurityContext {
            run_as_user: Some(1),
            run_as_group: Some(2),
            run_as_non_root: Some(true),
            // Not a container field: never in the effective context.
            fs_group: Some(9),
            ..Default::default()
        };
        let (p, c) = pod(Some(psc.clone()), None);
        let eff = effective(&p, &c);
        assert_eq!(
            (eff.run_as_user, eff.run_as_group, eff.run_as_non_root),
            (Some(1), Some(2), Some(true))
        );
        let (p, c) = pod(
            Some(psc),
            Some(SecurityContext {
                run_as_user: Some(5),
                read_only_root_filesystem: Some(true),
                proc_mount: Some("Default".into()),
                ..Default::default()
            }),
        );
        let eff = effective(&p, &c);
        assert_eq!(
            (
                eff.run_as_user,
                eff.run_as_group,
                eff.read_only_root_filesystem
            ),
            (Some(5), Some(2), Some(true))
        );
        assert_eq!(eff.proc_mount.as_deref(), Some("Default"));
        let (p, c) = pod(None, None);
        assert_eq!(effective(&p, &c), SecurityContext::default());
    }

    #[test]
    fn capability_names_to_drop_are_normalized_those_to_add_are_not() {
        for (name, want) in [
            ("NET_ADMIN", "NET_ADMIN"),
            ("CAP_NET_ADMIN", "NET_ADMIN"),
            ("cap_sys_time", "SYS_TIME"),
            ("net_raw", "NET_RAW"),
            ("ALL", "ALL"),
            ("all", "ALL"),
            ("CAP_", "CAP_"),
        ] {
            assert_eq!(capability_name(name), want, "{name}");
        }
        let sc = SecurityContext {
            capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
                add: Some(vec!["CAP_ALL".into(), "chown".into()]),
                drop: Some(vec!["all".into(), "CAP_NET_RAW".into()]),
            }),
            ..Default::default()
        };
        assert_eq!(
            capabilities(&sc),
            Some((
                vec!["CAP_ALL".into(), "chown".into()],
                vec!["ALL".into(), "NET_RAW".into()]
            ))
        );
        assert_eq!(capabilities(&SecurityContext::default()), None);
    }

    #[test]
    fn no_new_privs_and_proc_paths_follow_upstream() {
        let with = |allow| SecurityContext {
            allow_privilege_escalation: allow,
            ..Default::default()
        };
        assert!(no_new_privs(&with(Some(false))));
        assert!(!no_new_privs(&with(Some(true))));
        assert!(!no_new_privs(&with(None)));
        let extra = vec!["/sys/devices/system/cpu/cpu0/thermal_throttle".to_owned()];
        for (mount, masked) in [
            (None, true),
            (Some("Default"), true),
            (Some("Unmasked"), false),
        ] {
            let (m, r) = proc_paths(mount, &extra);
            assert_eq!(m.iter().any(|p| p == "/proc/kcore"), masked, "{mount:?}");
            assert_eq!(m.last() == extra.last(), masked, "{mount:?}");
            assert_eq!(r.iter().any(|p| p == "/proc/sys"), masked, "{mount:?}");
        }
        assert_eq!(
            thermal_throttle_paths("0-1,4\n"),
            [
                "/sys/devices/system/cpu/cpu0/thermal_throttle",
                "/sys/devices/system/cpu/cpu1/thermal_throttle",
                "/sys/devices/system/cpu/cpu4/thermal_throttle"
            ]
        );
        assert!(thermal_throttle_paths("").is_empty());
    }

    fn seccomp(type_: &str, localhost: Option<&str>) -> Option<SeccompProfile> {
        Some(SeccompProfile {
            type_: type_.into(),
            localhost_profile: localhost.map(Into::into),
        })
    }

    #[test]
    fn seccomp_profiles_resolve_as_upstream() {
        let root = Path::new("/var/lib/kubelet/seccomp");
        let pod_level = |p| {
            Some(PodSecurityContext {
                seccomp_profile: p,
                ..Default::default()
            })
        };
        let container_level = |p| {
            Some(SecurityContext {
                seccomp_profile: p,
                ..Default::default()
            })
        };
        type Case<'a> = (
            Option<PodSecurityContext>,
            Option<SecurityContext>,
            bool,
            Result<Profile, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (None, None, false, Ok(Profile::Unconfined)),
            (None, None, true, Ok(Profile::RuntimeDefault)),
            (
                pod_level(seccomp("RuntimeDefault", None)),
                None,
                false,
                Ok(Profile::RuntimeDefault),
            ),
            (
                pod_level(seccomp("RuntimeDefault", None)),
                container_level(seccomp("Unconfined", None)),
                true,
                Ok(Profile::Unconfined),
            ),
            (
                None,
                container_level(seccomp("Localhost", Some("profiles/audit.json"))),
                false,
                Ok(Profile::Localhost(
                    "/var/lib/kubelet/seccomp/profiles/audit.json".into(),
                )),
            ),
            // CVE-2023-2431: an empty Localhost profile is not the root.
            (
                None,
                container_level(seccomp("Localhost", Some(""))),
                false,
                Err(
                    "securityContext.seccompProfile.localhostProfile: localhostProfile must be set if seccompProfile type is Localhost.",
                ),
            ),
            (
                pod_level(seccomp("Localhost", None)),
                None,
                false,
                Err(
                    "spec.securityContext.seccompProfile.localhostProfile: localhostProfile must be set",
                ),
            ),
            (
                None,
                container_level(seccomp("Localhost", Some("../../etc/x.json"))),
                false,
                Err("must be a relative path that does not contain '..'"),
            ),
            (
                None,
                container_level(seccomp("Localhost", Some("/etc/x.json"))),
                false,
                Err("must be a relative path"),
            ),
            (
                None,
                container_level(seccomp("Sideways", None)),
                false,
                Err(
                    "securityContext.seccompProfile.type: unsupported seccomp profile type \"Sideways\"",
                ),
            ),
        ];
        for (i, (psc, csc, default, want)) in cases.into_iter().enumerate() {
            let (p, c) = pod(psc, csc);
            let got = seccomp_profile(&p, Some(&c), root, default);
            match want {
                Ok(w) => assert_eq!(got, Ok(w), "case {i}"),
                Err(m) => assert!(
                    got.as_ref().is_err_and(|e| e.to_string().contains(m)),
                    "case {i}: {got:?}"
                ),
            }
        }
        // The sandbox is always RuntimeDefault.
        let (p, _) = pod(pod_level(seccomp("Unconfined", None)), None);
        assert_eq!(
            seccomp_profile(&p, None, root, false),
            Ok(Profile::RuntimeDefault)
        );
    }

    fn apparmor(type_: &str, name: Option<&str>) -> Option<AppArmorProfile> {
        Some(AppArmorProfile {
            type_: type_.into(),
            localhost_profile: name.map(Into::into),
        })
    }

    #[test]
    fn apparmor_profiles_resolve_from_fields_and_annotations() {
        let annotated = |p: &mut Pod, v: &str| {
            p.metadata.annotations =
                Some([(format!("{APPARMOR_ANNOTATION_PREFIX}c"), v.to_owned())].into());
        };
        let pod_level = Some(PodSecurityContext {
            app_armor_profile: apparmor("RuntimeDefault", None),
            ..Default::default()
        });
        let (p, c) = pod(None, None);
        assert_eq!(apparmor_profile(&p, &c), Ok(None));
        let (p, c) = pod(pod_level.clone(), None);
        assert_eq!(
            apparmor_profile(&p, &c),
            Ok(Some((Profile::RuntimeDefault, "runtime/default".into())))
        );
        let (mut p, c) = pod(pod_level.clone(), None);
        annotated(&mut p, "localhost/k8s-deny");
        assert_eq!(
            apparmor_profile(&p, &c),
            Ok(Some((
                Profile::Localhost("k8s-deny".into()),
                "localhost/k8s-deny".into()
            )))
        );
        let (mut p, c) = pod(
            pod_level,
            Some(SecurityContext {
                app_armor_profile: apparmor("Unconfined", None),
                ..Default::default()
            }),
        );
        annotated(&mut p, "runtime/default");
        assert_eq!(
            apparmor_profile(&p, &c),
            Ok(Some((Profile::Unconfined, "unconfined".into())))
        );
        let (p, c) = pod(
            None,
            Some(SecurityContext {
                app_armor_profile: apparmor("Localhost", None),
                ..Default::default()
            }),
        );
        assert_eq!(apparmor_profile(&p, &c), Err(SecurityError::AppArmorNoName));
    }

    #[test]
    fn apparmor_admission_needs_the_host_only_when_a_profile_is_asked() {
        let no_host = Err("AppArmor is not enabled on the host");
        let (p, _) = pod(None, None);
        assert_eq!(apparmor_admission(&p, no_host), Ok(()));
        let (mut p, _) = pod(None, None);
        p.metadata.annotations = Some(
            [(
                format!("{APPARMOR_ANNOTATION_PREFIX}c"),
                "unconfined".to_owned(),
            )]
            .into(),
        );
        assert_eq!(apparmor_admission(&p, no_host), Ok(()));
        let (p, _) = pod(
            None,
            Some(SecurityContext {
                app_armor_profile: apparmor("RuntimeDefault", None),
                ..Default::default()
            }),
        );
        assert_eq!(
            apparmor_admission(&p, no_host),
            Err(SecurityError::AppArmorHost(
                "AppArmor is not enabled on the host".into()
            ))
        );
        assert_eq!(apparmor_admission(&p, Ok(())), Ok(()));
        // A running pod is not rechecked.
        let mut running = p.clone();
        running.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert_eq!(apparmor_admission(&running, no_host), Ok(()));
        // A pod-level profile requires AppArmor even where every container
        // overrides it, as upstream's isRequired.
        let (p, _) = pod(
            Some(PodSecurityContext {
                app_armor_profile: apparmor("RuntimeDefault", None),
                ..Default::default()
            }),
            Some(SecurityContext {
                app_armor_profile: apparmor("Unconfined", None),
                ..Default::default()
            }),
        );
        assert_eq!(
            apparmor_admission(&p, no_host),
            Err(SecurityError::AppArmorHost(
                "AppArmor is not enabled on the host".into()
            ))
        );
        let (p, _) = pod(
            None,
            Some(SecurityContext {
                app_armor_profile: apparmor("Localhost", Some(" ")),
                ..Default::default()
            }),
        );
        assert!(apparmor_admission(&p, Ok(())).is_err_and(|e| {
            e.to_string()
                .contains("invalid empty AppArmor profile name")
        }));
    }

    #[test]
    fn supplemental_groups_policy_is_numbered_as_the_cri() {
        for (policy, want) in [
            (None, Ok(0)),
            (Some("Merge"), Ok(0)),
            (Some("Strict"), Ok(1)),
            (
                Some("Loose"),
                Err(SecurityError::SupplementalGroupsPolicy("Loose".to_owned())),
            ),
        ] {
            let (p, _) = pod(
                Some(PodSecurityContext {
                    supplemental_groups_policy: policy.map(Into::into),
                    ..Default::default()
                }),
                None,
            );
            assert_eq!(supplemental_groups_policy(&p), want, "{policy:?}");
        }
    }

    #[test]
    fn run_as_non_root_is_verified_as_upstream() {
        let pod_level = Some(PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        });
        type Case<'a> = (
            Option<PodSecurityContext>,
            Option<SecurityContext>,
            Option<i64>,
            &'a str,
            Option<&'a str>,
        );
        let cases: Vec<Case> = vec![
            (None, None, Some(0), "", None),
            (None, sc(Some(false), None), Some(0), "", None),
            (None, sc(Some(true), Some(1000)), Some(0), "", None),
            (
                None,
                sc(Some(true), Some(0)),
                Some(1000),
                "",
                Some(
                    "container's runAsUser breaks non-root policy (pod: \"p_ns(u)\", container: c)",
                ),
            ),
            (
                None,
                sc(Some(true), None),
                Some(0),
                "",
                Some(
                    "container has runAsNonRoot and image will run as root (pod: \"p_ns(u)\", container: c)",
                ),
            ),
            // No user in the image is root.
            (
                None,
                sc(Some(true), None),
                None,
                "",
                Some("image will run as root"),
            ),
            (
                None,
                sc(Some(true), None),
                None,
                "nobody",
                Some("image has non-numeric user (nobody), cannot verify user is non-root"),
            ),
            (None, sc(Some(true), None), Some(1234), "", None),
            (
                None,
                sc(Some(true), None),
                Some(1 << 40),
                "",
                Some("invalid user id (1099511627776)"),
            ),
            // The pod's setting, and the container's over it.
            (
                pod_level.clone(),
                None,
                Some(0),
                "",
                Some("image will run as root"),
            ),
            (pod_level.clone(), sc(Some(false), None), Some(0), "", None),
            (pod_level, sc(None, Some(5)), Some(0), "", None),
        ];
        for (i, (psc, csc, uid, user, want)) in cases.into_iter().enumerate() {
            let (p, c) = pod(psc, csc);
            let got = verify_run_as_non_root(&p, &c, uid, user);
            match want {
                None => assert_eq!(got, Ok(()), "case {i}"),
                Some(m) => assert!(
                    got.as_ref().is_err_and(|e| e.to_string().contains(m)),
                    "case {i}: {got:?}"
                ),
            }
        }
    }
}
