//! `/var/log/containers`: one symbolic link per container,
//! `<pod>_<namespace>_<container>-<containerID>.log` → the container's log
//! file under podLogsDir, as upstream's kubelet keeps them
//! (kuberuntime_container.go's legacyLogSymlink) for the log agents that
//! tail that directory (Fluent Bit, Vector, Promtail, Filebeat, the
//! Datadog and OpenTelemetry collectors). A link is made when its container
//! starts, points at the path the runtime reopens after a rotation (so it
//! survives one), and goes when the container is removed; container garbage
//! collection removes links left dangling by containers that are gone
//! (after a crash), as upstream's does.

use std::io;
use std::path::{Path, PathBuf};

use kubelet_core::types::keys;

/// Where upstream's kubelet keeps the links.
pub const LEGACY_CONTAINER_LOGS_DIR: &str = "/var/log/containers";
const SUFFIX: &str = ".log";
/// ext4's longest file name.
const MAX_FILE_NAME: usize = 255;

/// A name part that cannot leave the directory or split the name oddly:
/// what pod, namespace and container names and runtime ids are made of.
fn safe(part: &str) -> bool {
    !part.is_empty()
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && part != "."
        && part != ".."
}

/// The link of one container (upstream's logSymlink, truncated to a file
/// name's limit as upstream truncates it); None for a name part that is
/// not a plain name.
pub fn link_path(
    dir: &Path,
    pod: &str,
    namespace: &str,
    container: &str,
    container_id: &str,
) -> Option<PathBuf> {
    if ![pod, namespace, container, container_id]
        .iter()
        .all(|p| safe(p))
    {
        return None;
    }
    let mut name = format!("{pod}_{namespace}_{container}-{container_id}");
    name.truncate(MAX_FILE_NAME - SUFFIX.len());
    Some(dir.join(name + SUFFIX))
}

/// The container id a link's name ends with (upstream's
/// getContainerIDFromLegacyLogSymlink): at least 6 characters.
pub fn container_id_of(link: &Path) -> Option<&str> {
    let name = link.file_name()?.to_str()?.strip_suffix(SUFFIX)?;
    let (_, id) = name.rsplit_once('-')?;
    (id.len() >= 6).then_some(id)
}

/// The link of a container the runtime lists, from its labels.
pub fn link_of_labels(
    dir: &Path,
    labels: &std::collections::HashMap<String, String>,
    container_id: &str,
) -> Option<PathBuf> {
    let label = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
    link_path(
        dir,
        label(keys::POD_NAME),
        label(keys::POD_NAMESPACE),
        label(keys::CONTAINER_NAME),
        container_id,
    )
}

/// Make `link` point at `log` (replacing a link of the same name). As
/// upstream, only when the log exists: a link to nothing is what garbage
/// collection removes.
pub fn create(link: &Path, log: &Path) -> io::Result<()> {
    if !log.exists() {
        return Ok(());
    }
    if let Some(dir) = link.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::os::unix::fs::symlink(log, link) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(link)?;
            std::os::unix::fs::symlink(log, link)
        }
        r => r,
    }
}

/// Remove a link; gone already is done.
pub fn remove(link: &Path) -> io::Result<()> {
    match std::fs::remove_file(link) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// The links in `dir` whose target is gone, with the container id each
/// names (None when the name carries none).
pub fn dangling(dir: &Path) -> io::Result<Vec<(PathBuf, Option<String>)>> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        r => r?,
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link || !path.to_string_lossy().ends_with(SUFFIX) || path.exists() {
            continue;
        }
        let id = container_id_of(&path).map(str::to_owned);
        out.push((path, id));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_as_upstream() {
        let dir = Path::new(LEGACY_CONTAINER_LOGS_DIR);
        let id = "4f2a9d7c1e3b".repeat(5);
        let link = link_path(dir, "web-0", "default", "nginx", &id).unwrap();
        assert_eq!(
            link,
            PathBuf::from(format!("/var/log/containers/web-0_default_nginx-{id}.log"))
        );
        assert_eq!(container_id_of(&link), Some(id.as_str()));
        // Too long for a file name: cut, the suffix kept.
        let long = link_path(dir, &"p".repeat(253), "ns", "c", &id).unwrap();
        let name = long.file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), 255);
        assert!(name.ends_with(".log"));
        for (pod, ns, c, id) in [
            ("../x", "default", "c", "abcdef"),
            ("p", "a/b", "c", "abcdef"),
            ("p", "ns", "", "abcdef"),
            ("p", "ns", "c", ".."),
        ] {
            assert_eq!(link_path(dir, pod, ns, c, id), None, "{pod} {ns} {c} {id}");
        }
        assert_eq!(container_id_of(Path::new("/x/p_ns_c-abc.log")), None);
        assert_eq!(container_id_of(Path::new("/x/p_ns_c-abcdef.txt")), None);
    }

    #[test]
    fn links_made_replaced_found_dangling_and_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let links = tmp.path().join("containers");
        let log = tmp.path().join("0.log");
        let link = link_path(&links, "p", "ns", "c", "abcdef0123").unwrap();
        // No log yet: no link.
        create(&link, &log).unwrap();
        assert_eq!(
            std::fs::symlink_metadata(&link).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        std::fs::write(&log, "x").unwrap();
        create(&link, &log).unwrap();
        create(&link, &log).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), log);
        assert!(dangling(&links).unwrap().is_empty());
        std::fs::remove_file(&log).unwrap();
        assert_eq!(
            dangling(&links).unwrap(),
            vec![(link.clone(), Some("abcdef0123".to_owned()))]
        );
        remove(&link).unwrap();
        remove(&link).unwrap();
        assert!(dangling(&links).unwrap().is_empty());
        assert!(dangling(&tmp.path().join("none")).unwrap().is_empty());
    }
}
