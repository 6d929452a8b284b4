//! What a container's probes said before a kubelet restart: from the API
//! pod's status (`containerStatuses[].ready` and `.started`, with the
//! container's id), or, for static pods, from `pods/<uid>/probe-results.json`
//! (the prober writes it at each readiness or startup change of a static
//! pod's container; it goes with the pod's directory).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::PodStatus;
use kubelet_core::types::PodUid;
use serde::{Deserialize, Serialize};

use super::results::raw_container_id;

/// One container's results kept across a restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// The container's runtime id: only that container keeps them.
    pub id: String,
    /// Its readiness probe succeeded.
    pub ready: bool,
    /// Its startup probe succeeded.
    pub started: bool,
}

/// The file a static pod's results are kept in.
const FILE: &str = "probe-results.json";

fn path(pods_dir: &Path, uid: &PodUid) -> Option<PathBuf> {
    let uid = uid.as_str();
    (!uid.is_empty() && !uid.contains(['/', '\0']) && uid != "." && uid != "..")
        .then(|| pods_dir.join(uid).join(FILE))
}

/// What an API pod's status says of its running containers (regular ones
/// and sidecars), by name.
pub fn from_status(status: &PodStatus) -> HashMap<String, Kept> {
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .filter_map(|c| {
            let id = raw_container_id(c.container_id.as_deref()?).to_owned();
            (!id.is_empty()).then(|| {
                (
                    c.name.clone(),
                    Kept {
                        id,
                        ready: c.ready,
                        started: c.started.unwrap_or(false),
                    },
                )
            })
        })
        .collect()
}

/// A static pod's kept results (none when there is no readable file).
pub fn read_kept(pods_dir: &Path, uid: &PodUid) -> HashMap<String, Kept> {
    path(pods_dir, uid)
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Write a static pod's kept results (atomically: a reader never sees half
/// a file), where its pod directory exists.
pub fn write_kept(pods_dir: &Path, uid: &PodUid, kept: &HashMap<String, Kept>) -> io::Result<()> {
    let Some(file) = path(pods_dir, uid) else {
        return Ok(());
    };
    let Some(dir) = file.parent().filter(|d| d.is_dir()) else {
        return Ok(());
    };
    let tmp = dir.join(format!(".{FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(kept).map_err(io::Error::other)?)?;
    std::fs::rename(tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStatus};

    #[test]
    fn from_an_api_status_and_a_file() {
        let status = |name: &str, id: Option<&str>, running: bool, ready: bool| ContainerStatus {
            name: name.into(),
            container_id: id.map(str::to_owned),
            ready,
            started: Some(running),
            state: Some(ContainerState {
                running: running.then(ContainerStateRunning::default),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = PodStatus {
            container_statuses: Some(vec![
                status("web", Some("containerd://abc"), true, true),
                status("done", Some("containerd://def"), false, false),
                status("new", None, false, false),
            ]),
            init_container_statuses: Some(vec![status(
                "sidecar",
                Some("containerd://123"),
                true,
                false,
            )]),
            ..Default::default()
        };
        let kept = from_status(&pod);
        assert_eq!(
            kept,
            HashMap::from([
                (
                    "web".to_owned(),
                    Kept {
                        id: "abc".into(),
                        ready: true,
                        started: true
                    }
                ),
                (
                    "sidecar".to_owned(),
                    Kept {
                        id: "123".into(),
                        ready: false,
                        started: true
                    }
                ),
            ])
        );
        let tmp = tempfile::tempdir().unwrap();
        let uid = PodUid::from("u1");
        // No pod directory: nothing written, nothing read.
        write_kept(tmp.path(), &uid, &kept).unwrap();
        assert!(read_kept(tmp.path(), &uid).is_empty());
        std::fs::create_dir(tmp.path().join("u1")).unwrap();
        write_kept(tmp.path(), &uid, &kept).unwrap();
        assert_eq!(read_kept(tmp.path(), &uid), kept);
        assert!(read_kept(tmp.path(), &PodUid::from("../u1")).is_empty());
    }
}
