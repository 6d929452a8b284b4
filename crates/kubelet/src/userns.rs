//! User namespaces (upstream's userns manager): each pod with
//! `hostUsers: false` is given `idsPerPod` host IDs of its own, from the
//! kubelet user's subordinate IDs (`getsubids kubelet`) or else every ID
//! above the first `idsPerPod`, kept in its directory's `userns` file
//! (upstream's format: either kubelet reads the other's) and released when
//! the pod is terminated or its directory goes. The sandbox and its
//! containers are given the mapping; pods sharing the host's user
//! namespace are given NODE mode, as upstream gives it.
//!
//! [`UsernsManager::start`] reads the range and the pods' files at start
//! (upstream stops the kubelet when they are inconsistent); until then,
//! and where the pod's runtime handler does not support user namespaces,
//! such a pod is refused in upstream's words.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::runtime::RuntimeHandler;
use kubelet_core::types::PodUid;
use kubelet_core::userns::{
    Allocator, KUBELET_USER, MAPPINGS_FILE, UserNamespace, UsernsError, kubelet_range,
};
use kubelet_cri::v1 as cri;
use parking_lot::Mutex;

/// Why a pod's user namespace cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum UsernsSetupError {
    /// The pod's runtime handler cannot run it.
    #[error("{0}")]
    Unsupported(String),
    #[error("user namespace manager not started")]
    NotStarted,
    #[error("create user namespace: {0}")]
    Create(#[source] UsernsError),
    #[error("user namespace: {0}")]
    Read(#[source] UsernsError),
    #[error("user namespace file of pod {pod}: {source}")]
    Io {
        pod: String,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone)]
pub struct UsernsManager {
    pods_dir: PathBuf,
    ids_per_pod: u32,
    max_pods: u32,
    allocator: Arc<Mutex<Option<Allocator>>>,
}

impl std::fmt::Debug for UsernsManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsernsManager")
            .field("ids_per_pod", &self.ids_per_pod)
            .finish_non_exhaustive()
    }
}

impl UsernsManager {
    pub fn new(pods_dir: PathBuf, ids_per_pod: u32, max_pods: u32) -> Self {
        UsernsManager {
            pods_dir,
            ids_per_pod,
            max_pods,
            allocator: Arc::default(),
        }
    }

    /// Read the range the kubelet may give and the pods' files (blocking):
    /// upstream's MakeUserNsManager, whose errors stop the kubelet.
    pub fn start(&self) -> Result<(), String> {
        let subids = kubelet_subids().map_err(|e| format!("kubelet mappings: {e}"))?;
        let (first, range) = kubelet_range(
            self.ids_per_pod,
            subids.as_ref().map(|(u, g)| (u.as_str(), g.as_str())),
        )
        .map_err(|e| format!("kubelet mappings: {e}"))?;
        let mut allocator = Allocator::new(self.ids_per_pod, first, range, self.max_pods)
            .map_err(|e| e.to_string())?;
        let entries = match std::fs::read_dir(&self.pods_dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            r => Some(r.map_err(|e| format!("read pods from disk: {e}"))?),
        };
        for entry in entries.into_iter().flatten() {
            let entry = entry.map_err(|e| format!("read pods from disk: {e}"))?;
            let uid = PodUid::from(entry.file_name().to_string_lossy().as_ref());
            let mut record = || -> Result<(), String> {
                let Some(content) = read_file(&entry.path()).map_err(|e| e.to_string())? else {
                    return Ok(());
                };
                let ns = UserNamespace::parse(&content).map_err(|e| e.to_string())?;
                let m = ns.uid_mappings[0];
                allocator
                    .record(&uid, m.host_id, m.length)
                    .map_err(|e| e.to_string())
            };
            record().map_err(|e| {
                format!(
                    "record pod mappings for existing pod {:?}: {e}",
                    uid.as_str()
                )
            })?;
        }
        *self.allocator.lock() = Some(allocator);
        Ok(())
    }

    /// The user namespace of `pod`'s sandbox and containers, run by the
    /// runtime handler `handler` (upstream's
    /// GetOrCreateUserNamespaceMappings): NODE mode unless the pod sets
    /// `hostUsers: false`, which gets its own IDs, read back from its file
    /// or given now and written there (blocking).
    pub fn mappings(
        &self,
        pod: &Pod,
        handler: &str,
        handlers: &[RuntimeHandler],
    ) -> Result<cri::UserNamespace, UsernsSetupError> {
        let node = cri::UserNamespace {
            mode: cri::NamespaceMode::Node as i32,
            ..Default::default()
        };
        if pod.spec.as_ref().and_then(|s| s.host_users) != Some(false) {
            return Ok(node);
        }
        handler_supports_user_namespaces(handler, handlers)?;
        let uid = PodUid::of(pod);
        let dir = self.pods_dir.join(uid.as_str());
        let io = |source| UsernsSetupError::Io {
            pod: uid.to_string(),
            source,
        };
        let mut guard = self.allocator.lock();
        let allocator = guard.as_mut().ok_or(UsernsSetupError::NotStarted)?;
        let ns = match read_file(&dir).map_err(io)? {
            Some(content) => {
                let ns = UserNamespace::parse(&content).map_err(UsernsSetupError::Read)?;
                let m = ns.uid_mappings[0];
                allocator
                    .record(&uid, m.host_id, m.length)
                    .map_err(UsernsSetupError::Read)?;
                ns
            }
            None => {
                let first = allocator.allocate(&uid).map_err(UsernsSetupError::Create)?;
                let ns = UserNamespace::of(first, allocator.length());
                let written = std::fs::create_dir_all(&dir).and_then(|()| {
                    let json = serde_json::to_vec(&ns).map_err(std::io::Error::other)?;
                    crate::files::write_file(&dir.join(MAPPINGS_FILE), &json)
                });
                if let Err(e) = written {
                    allocator.release(&uid);
                    return Err(io(e));
                }
                ns
            }
        };
        let ids = |m: &[kubelet_core::userns::IdMapping]| {
            m.iter()
                .map(|m| cri::IdMapping {
                    host_id: m.host_id,
                    container_id: m.container_id,
                    length: m.length,
                })
                .collect()
        };
        Ok(cri::UserNamespace {
            mode: cri::NamespaceMode::Pod as i32,
            uids: ids(&ns.uid_mappings),
            gids: ids(&ns.gid_mappings),
        })
    }

    /// Release what the pod `uid` holds and remove its file (upstream's
    /// Release, when the pod is terminated).
    pub fn release(&self, uid: &PodUid) {
        let released = self
            .allocator
            .lock()
            .as_mut()
            .is_some_and(|a| a.release(uid));
        if released {
            let file = self.pods_dir.join(uid.as_str()).join(MAPPINGS_FILE);
            if let Err(e) = std::fs::remove_file(&file)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(file = %file.display(), error = %e, "removing a pod's user namespace file");
            }
        }
    }
}

/// Whether `handler` supports user namespaces, as the runtime's Status
/// lists it (upstream's HandlerSupportsUserNamespaces), else upstream's
/// refusal.
fn handler_supports_user_namespaces(
    handler: &str,
    handlers: &[RuntimeHandler],
) -> Result<(), UsernsSetupError> {
    let mut message = if handler.is_empty() {
        "can't set `spec.hostUsers: false`, runtime does not support user namespaces".to_owned()
    } else {
        format!(
            "can't set `spec.hostUsers: false`, RuntimeClass handler {handler:?} does not support user namespaces"
        )
    };
    match handlers.iter().find(|h| h.name == handler) {
        Some(h) if h.user_namespaces => return Ok(()),
        None if !handlers.is_empty() => {
            message = format!("{message}: the handler {handler:?} is not known");
        }
        _ => {}
    }
    Err(UsernsSetupError::Unsupported(message))
}

/// A pod directory's `userns` file, if it has one.
fn read_file(pod_dir: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(pod_dir.join(MAPPINGS_FILE)) {
        Ok(c) if c.is_empty() => Ok(None),
        Ok(c) => Ok(Some(c)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `getsubids kubelet` and `getsubids -g kubelet` when the kubelet user
/// exists (in /etc/passwd) and the tool is installed, as upstream asks:
/// the user without the tool, or the tool without the user, is the
/// default range.
fn kubelet_subids() -> Result<Option<(String, String)>, String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let exists = passwd
        .lines()
        .any(|l| l.split(':').next() == Some(KUBELET_USER));
    if !exists {
        return Ok(None);
    }
    let run = |args: &[&str]| -> Result<Option<String>, String> {
        match std::process::Command::new("getsubids").args(args).output() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.to_string()),
            Ok(out) if out.status.success() => {
                Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
            }
            Ok(out) => Err(format!(
                "error retrieving additional ids for user {KUBELET_USER:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    };
    let Some(uids) = run(&[KUBELET_USER])? else {
        return Ok(None);
    };
    let gids = run(&["-g", KUBELET_USER])?.unwrap_or_default();
    Ok(Some((uids, gids)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_core::testing::PodBuilder;

    fn handler(name: &str, userns: bool) -> RuntimeHandler {
        RuntimeHandler {
            name: name.into(),
            recursive_read_only_mounts: false,
            user_namespaces: userns,
        }
    }

    fn pod(uid: &str, host_users: Option<bool>) -> Pod {
        let mut p = PodBuilder::default().uid(uid).build();
        p.spec.get_or_insert_with(Default::default).host_users = host_users;
        p
    }

    #[test]
    fn a_pod_without_host_users_gets_ids_of_its_own_kept_in_its_file() {
        let tmp = tempfile::tempdir().unwrap();
        let m = UsernsManager::new(tmp.path().to_owned(), 65536, 110);
        let handlers = [handler("", true), handler("kata", false)];
        let p = pod("u1", Some(false));
        assert!(matches!(
            m.mappings(&p, "", &handlers),
            Err(UsernsSetupError::NotStarted)
        ));
        m.start().unwrap();
        // Host users: the node's namespace, no file.
        for host_users in [None, Some(true)] {
            let ns = m.mappings(&pod("u0", host_users), "", &handlers).unwrap();
            assert_eq!(ns.mode, cri::NamespaceMode::Node as i32);
        }
        assert!(!tmp.path().join("u0").exists());
        let ns = m.mappings(&p, "", &handlers).unwrap();
        assert_eq!(ns.mode, cri::NamespaceMode::Pod as i32);
        let (uid, gid) = (&ns.uids[0], &ns.gids[0]);
        assert_eq!((uid.container_id, uid.length), (0, 65536));
        assert_eq!((uid.host_id, uid.length), (gid.host_id, gid.length));
        assert!(uid.host_id >= 65536 && uid.host_id.is_multiple_of(65536));
        let file = UserNamespace::parse(&std::fs::read(tmp.path().join("u1/userns")).unwrap());
        assert_eq!(file.unwrap().uid_mappings[0].host_id, uid.host_id);
        // The same again; and after a restart, read back from the file.
        assert_eq!(m.mappings(&p, "", &handlers).unwrap(), ns);
        let again = UsernsManager::new(tmp.path().to_owned(), 65536, 110);
        again.start().unwrap();
        assert_eq!(again.mappings(&p, "", &handlers).unwrap(), ns);
        let other = again
            .mappings(&pod("u2", Some(false)), "", &handlers)
            .unwrap();
        assert_ne!(other.uids[0].host_id, uid.host_id);
        // Released: the file goes.
        again.release(&PodUid::from("u1"));
        assert!(!tmp.path().join("u1/userns").exists());
        // Refused where the handler cannot, in upstream's words.
        for (h, list, want) in [
            (
                "kata",
                &handlers[..],
                "can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces",
            ),
            (
                "",
                &[][..],
                "can't set `spec.hostUsers: false`, runtime does not support user namespaces",
            ),
            (
                "gvisor",
                &handlers[..],
                "can't set `spec.hostUsers: false`, RuntimeClass handler \"gvisor\" does not support user namespaces: the handler \"gvisor\" is not known",
            ),
        ] {
            let err = again.mappings(&p, h, list).unwrap_err();
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn an_inconsistent_file_stops_the_start() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("u1")).unwrap();
        std::fs::write(
            tmp.path().join("u1/userns"),
            br#"{"uidMappings":[],"gidMappings":[]}"#,
        )
        .unwrap();
        let err = UsernsManager::new(tmp.path().to_owned(), 65536, 110)
            .start()
            .unwrap_err();
        assert_eq!(
            err,
            "record pod mappings for existing pod \"u1\": invalid user namespace configuration: no more than one mapping allowed."
        );
    }
}
