//! Sysctl admission (upstream's pkg/kubelet/sysctl): a pod may set the
//! safe sysctls (those the running kernel namespaces) and those the node's
//! `allowedUnsafeSysctls` names, exactly or by a `prefix*` pattern; any
//! other sysctl, or a namespaced one the pod shares with the host through
//! hostNetwork or hostIPC, rejects the pod with `SysctlForbidden` before it
//! starts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::types::Rejection;

/// Upstream's rejection reason.
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// The kernel namespace a sysctl lives in (component-helpers' sysctl
/// Namespace, whose names the messages use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    Ipc,
    Net,
    Uts,
    User,
}

impl Namespace {
    fn name(self) -> &'static str {
        match self {
            Namespace::Ipc => "IPC",
            Namespace::Net => "Net",
            Namespace::Uts => "UTS",
            Namespace::User => "User",
        }
    }
}

/// The safe sysctls and the kernel (major, minor) from which each is
/// namespaced (upstream's safe_sysctls.go).
const SAFE_SYSCTLS: &[(&str, (u32, u32))] = &[
    ("kernel.shm_rmid_forced", (0, 0)),
    ("net.ipv4.ip_local_port_range", (0, 0)),
    ("net.ipv4.tcp_syncookies", (0, 0)),
    ("net.ipv4.ping_group_range", (0, 0)),
    ("net.ipv4.ip_unprivileged_port_start", (0, 0)),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
    ("net.ipv4.tcp_slow_start_after_idle", (4, 15)),
    ("net.ipv4.tcp_notsent_lowat", (4, 6)),
];

/// The most characters a sysctl name may have (the API's SysctlMaxLength).
const MAX_LENGTH: usize = 253;

/// Upstream's NormalizeName: a name written with `/` separators
/// (`net/ipv4/conf/eno2.100/rp_filter`) becomes the dotted form
/// (`net.ipv4.conf.eno2/100.rp_filter`).
pub fn normalize_name(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_owned(),
    }
}

/// Upstream's GetNamespace: the namespace of a name or `prefix*` pattern,
/// the name or prefix, and whether it is a prefix.
fn namespace_of(pattern: &str) -> (Option<Namespace>, String, bool) {
    let mut name = normalize_name(pattern);
    let prefixed = match name.find('*') {
        Some(i) => {
            name.truncate(i);
            true
        }
        None => false,
    };
    const IPC: &[&str] = &[
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
        "kernel.shm",
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.msg",
    ];
    let under = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.'))
    };
    let ns = if name == "kernel.domainname" {
        Some(Namespace::Uts)
    } else if IPC.contains(&name.as_str()) || under("fs.mqueue") {
        Some(Namespace::Ipc)
    } else if under("net") {
        Some(Namespace::Net)
    } else if under("user") {
        Some(Namespace::User)
    } else {
        None
    };
    (ns, name, prefixed)
}

/// Upstream's IsValidSysctlPattern: dot- or slash-separated segments of
/// `[a-z0-9_-]` starting and ending alphanumerically, the last one
/// optionally ending in `*` (or a lone `*`), at most 253 characters.
fn is_valid_pattern(p: &str) -> bool {
    if p.is_empty() || p.len() > MAX_LENGTH {
        return false;
    }
    let body = p.strip_suffix('*').unwrap_or(p);
    let segment_ok = |seg: &str, last: bool| {
        let b = seg.as_bytes();
        if b.is_empty() {
            return last && p.ends_with('*');
        }
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        alnum(&b[0])
            && (last && p.ends_with('*') || alnum(&b[b.len() - 1]))
            && b.iter().all(|c| alnum(c) || *c == b'-' || *c == b'_')
    };
    let segments: Vec<&str> = body.split(['.', '/']).collect();
    let n = segments.len();
    segments
        .iter()
        .enumerate()
        .all(|(i, s)| segment_ok(s, i + 1 == n))
}

/// The sysctls this node lets pods set.
#[derive(Clone, Debug, Default)]
pub struct Allowlist {
    names: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

/// A sysctl refused, in upstream's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SysctlError {
    #[error(
        "sysctl {0:?} must have at most {MAX_LENGTH} characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
    )]
    Pattern(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    NotNamespaced(String),
    #[error("{0:?} not allowlisted")]
    NotAllowlisted(String),
    #[error("{name:?} not allowed with host {namespace} enabled")]
    HostNamespace {
        name: String,
        namespace: &'static str,
    },
}

impl Allowlist {
    /// The safe sysctls the kernel `release` (`6.1.0-18-amd64`) namespaces,
    /// plus `unsafe_allowed` (`allowedUnsafeSysctls`). A pattern that is not
    /// valid or not known to be namespaced is refused with upstream's
    /// message.
    pub fn new(release: &str, unsafe_allowed: &[String]) -> Result<Allowlist, SysctlError> {
        let kernel = kernel_version(release);
        let mut list = Allowlist::default();
        let safe = SAFE_SYSCTLS
            .iter()
            .filter(|(_, since)| *since == (0, 0) || kernel.is_some_and(|k| k >= *since))
            .map(|(name, _)| (*name).to_owned());
        for pattern in safe.chain(unsafe_allowed.iter().cloned()) {
            if !is_valid_pattern(&pattern) {
                return Err(SysctlError::Pattern(pattern));
            }
            let (ns, name, prefixed) = namespace_of(&pattern);
            let Some(ns) = ns else {
                return Err(SysctlError::NotNamespaced(name));
            };
            if prefixed {
                list.prefixes.insert(name, ns);
            } else {
                list.names.insert(name, ns);
            }
        }
        Ok(list)
    }

    /// Upstream's validateSysctl.
    fn validate(
        &self,
        sysctl: &str,
        host_net: bool,
        host_ipc: bool,
        host_users: bool,
    ) -> Result<(), SysctlError> {
        let name = normalize_name(sysctl);
        let ns = self.names.get(&name).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| name.starts_with(p.as_str()))
                .map(|(_, ns)| *ns)
        });
        let Some(ns) = ns else {
            return Err(SysctlError::NotAllowlisted(name));
        };
        let shared = match ns {
            Namespace::Ipc => host_ipc,
            Namespace::Net => host_net,
            Namespace::User => host_users,
            Namespace::Uts => false,
        };
        if shared {
            return Err(SysctlError::HostNamespace {
                name,
                namespace: ns.name(),
            });
        }
        Ok(())
    }

    /// Admission of `pod`'s sysctls.
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_deref())
            .unwrap_or(&[]);
        for s in sysctls {
            self.validate(
                &s.name,
                spec.host_network.unwrap_or(false),
                spec.host_ipc.unwrap_or(false),
                // hostUsers defaults to true.
                spec.host_users.unwrap_or(true),
            )
            .map_err(|e| Rejection {
                reason: FORBIDDEN_REASON.into(),
                message: format!("forbidden sysctl: {e}"),
            })?;
        }
        Ok(())
    }
}

/// (major, minor) of a kernel release string; None when it does not parse
/// (then, as upstream, only the safe sysctls namespaced on every kernel are
/// allowed).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The kernel tunables the kubelet needs (upstream's setupKernelTunables),
/// by their path under /proc/sys, with the value each must have.
pub const KERNEL_TUNABLES: [(&str, i64); 6] = [
    ("vm/overcommit_memory", 1),
    ("vm/panic_on_oom", 0),
    ("kernel/panic", 10),
    ("kernel/panic_on_oops", 1),
    ("kernel/keys/root_maxkeys", 1_000_000),
    ("kernel/keys/root_maxbytes", 25_000_000),
];

/// What to do with a kernel tunable found at `actual`: nothing, set it
/// (upstream's default, KernelTunableModify), or refuse to start
/// (protectKernelDefaults, KernelTunableError, in upstream's words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tunable {
    Fine,
    Modify,
    Refuse(String),
}

pub fn kernel_tunable(flag: &str, expected: i64, actual: i64, protect: bool) -> Tunable {
    if actual == expected {
        Tunable::Fine
    } else if protect {
        Tunable::Refuse(format!(
            "invalid kernel flag: {flag}, expected value: {expected}, actual value: {actual}"
        ))
    } else {
        Tunable::Modify
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;
    use k8s_openapi::api::core::v1::{PodSecurityContext, Sysctl};

    fn pod(sysctls: &[&str], host_net: bool, host_ipc: bool) -> Pod {
        let sysctls = sysctls.iter().map(|n| Sysctl {
            name: (*n).into(),
            value: "1".into(),
        });
        PodBuilder::default()
            .with_spec(|s| {
                s.host_network = Some(host_net);
                s.host_ipc = Some(host_ipc);
                s.security_context = Some(PodSecurityContext {
                    sysctls: Some(sysctls.collect()),
                    ..Default::default()
                });
            })
            .build()
    }

    #[test]
    fn names_are_normalized_as_upstream() {
        for (input, want) in [
            ("net.ipv4.tcp_syncookies", "net.ipv4.tcp_syncookies"),
            ("net/ipv4/tcp_syncookies", "net.ipv4.tcp_syncookies"),
            (
                "net/ipv4/conf/eno2.100/rp_filter",
                "net.ipv4.conf.eno2/100.rp_filter",
            ),
            (
                "net.ipv4.conf.eno2/100.rp_filter",
                "net.ipv4.conf.eno2/100.rp_filter",
            ),
            ("", ""),
        ] {
            assert_eq!(normalize_name(input), want, "{input}");
        }
    }

    #[test]
    fn patterns_are_validated() {
        for (p, ok) in [
            ("kernel.msgmax", true),
            ("net.*", true),
            ("net.ipv4.tcp_*", true),
            ("net/ipv4/tcp_rmem", true),
            ("*", true),
            ("Net.ipv4", false),
            ("net..ipv4", false),
            ("net.ipv4.", false),
            ("net.*.x", false),
            ("", false),
        ] {
            assert_eq!(is_valid_pattern(p), ok, "{p}");
        }
        assert!(!is_valid_pattern(&"a".repeat(254)));
    }

    #[test]
    fn the_allowlist_admits_as_upstream() {
        let unsafe_allowed = vec![
            "kernel.msg*".to_owned(),
            "net.core.somaxconn".to_owned(),
            "user.max_user_namespaces".to_owned(),
            "kernel.domainname".to_owned(),
        ];
        let list = Allowlist::new("6.1.0-18-amd64", &unsafe_allowed).unwrap();
        let old = Allowlist::new("4.4.0", &[]).unwrap();
        let unknown = Allowlist::new("", &[]).unwrap();
        type Case<'a> = (&'a Allowlist, &'a [&'a str], bool, bool, Option<&'a str>);
        let cases: &[Case] = &[
            (&list, &[], false, false, None),
            (&list, &["kernel.shm_rmid_forced"], false, false, None),
            (&list, &["net/ipv4/tcp_syncookies"], false, false, None),
            (&list, &["net.ipv4.tcp_keepalive_time"], false, false, None),
            (
                &list,
                &["kernel.msgmax", "kernel.msgmnb"],
                false,
                false,
                None,
            ),
            (&list, &["net.core.somaxconn"], false, false, None),
            (
                &list,
                &["kernel.shm_rmid_forced", "kernel.shmmax"],
                false,
                false,
                Some("forbidden sysctl: \"kernel.shmmax\" not allowlisted"),
            ),
            (
                &list,
                &["net.ipv4.tcp_syncookies"],
                true,
                false,
                Some(
                    "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host Net enabled",
                ),
            ),
            (
                &list,
                &["kernel.msgmax"],
                false,
                true,
                Some("forbidden sysctl: \"kernel.msgmax\" not allowed with host IPC enabled"),
            ),
            // Namespaced only from 4.5 on.
            (
                &old,
                &["net.ipv4.tcp_keepalive_time"],
                false,
                false,
                Some("forbidden sysctl: \"net.ipv4.tcp_keepalive_time\" not allowlisted"),
            ),
            (
                &old,
                &["net.ipv4.ip_local_reserved_ports"],
                false,
                false,
                None,
            ),
            // An unknown kernel: only what every kernel namespaces.
            (&unknown, &["net.ipv4.tcp_syncookies"], false, false, None),
            (
                &unknown,
                &["net.ipv4.ip_local_reserved_ports"],
                false,
                false,
                Some("forbidden sysctl: \"net.ipv4.ip_local_reserved_ports\" not allowlisted"),
            ),
            (&list, &["kernel.domainname"], true, true, None),
            // The pod shares the host's user namespace (hostUsers unset).
            (
                &list,
                &["user.max_user_namespaces"],
                false,
                false,
                Some(
                    "forbidden sysctl: \"user.max_user_namespaces\" not allowed with host User enabled",
                ),
            ),
        ];
        for (i, (list, sysctls, net, ipc, want)) in cases.iter().enumerate() {
            let got = list.admit(&pod(sysctls, *net, *ipc));
            match want {
                None => assert_eq!(got, Ok(()), "case {i}"),
                Some(m) => {
                    let r = got.expect_err(&format!("case {i}"));
                    assert_eq!(r.reason, FORBIDDEN_REASON, "case {i}");
                    assert_eq!(r.message, *m, "case {i}");
                }
            }
        }
    }

    #[test]
    fn unknown_or_invalid_patterns_are_refused() {
        let e = Allowlist::new("6.1", &["vm.swappiness".into()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the sysctls \"vm.swappiness\" are not known to be namespaced"
        );
        let e = Allowlist::new("6.1", &["Net.x".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("sysctl \"Net.x\" must have at most 253 characters"),
            "{e}"
        );
    }

    #[test]
    fn kernel_tunables_are_set_unless_protected() {
        assert_eq!(kernel_tunable("kernel/panic", 10, 10, true), Tunable::Fine);
        assert_eq!(
            kernel_tunable("kernel/panic", 10, 0, false),
            Tunable::Modify
        );
        assert_eq!(
            kernel_tunable("kernel/panic", 10, 0, true),
            Tunable::Refuse(
                "invalid kernel flag: kernel/panic, expected value: 10, actual value: 0".into()
            )
        );
    }
}
