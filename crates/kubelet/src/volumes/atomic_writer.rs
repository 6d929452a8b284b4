//! Upstream's atomic writer (pkg/volume/util/atomic_writer.go), with its
//! layout, so a reader never sees a half-updated volume:
//!
//! ```text
//! <dir>/..2026_12_01_15_04_05.123456789/<files>   the data, one directory per version
//! <dir>/..data -> ..2026_12_01_15_04_05.123456789  swapped by one rename
//! <dir>/<key> -> ..data/<key>                      what users see
//! ```
//!
//! A write that changes nothing leaves everything as it is; paths no longer
//! in the payload lose their top-level symlink; the old version directory
//! goes last. Blocking.

use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::jiff::Timestamp;
use kubelet_core::volume::{Payload, clean_payload};

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";

/// Write `payload` into `dir` (which exists); true if anything changed.
pub fn write(dir: &Path, payload: Payload) -> io::Result<bool> {
    let payload =
        clean_payload(payload).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let data_link = dir.join(DATA_DIR);
    let old = match std::fs::read_link(&data_link) {
        Ok(target) => Some(target),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let old_dir = old.as_ref().map(|o| dir.join(o));
    let (to_remove, changed) = match &old_dir {
        None => (Vec::new(), true),
        Some(old_dir) => (
            paths_to_remove(&payload, old_dir)?,
            payload_differs(&payload, old_dir)?,
        ),
    };
    if !changed && to_remove.is_empty() {
        return Ok(false);
    }
    if changed {
        let ts = new_version_dir(dir)?;
        if let Err(e) = write_payload(&payload, &ts) {
            let _ = std::fs::remove_dir_all(&ts);
            return Err(e);
        }
        let name = ts.file_name().unwrap_or_default();
        let tmp = dir.join(NEW_DATA_DIR);
        let _ = std::fs::remove_file(&tmp);
        symlink(name, &tmp)?;
        if let Err(e) = std::fs::rename(&tmp, &data_link) {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_dir_all(&ts);
            return Err(e);
        }
    }
    create_user_visible(dir, &payload)?;
    for p in &to_remove {
        if !p.contains('/') {
            match std::fs::remove_file(dir.join(p)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    if changed && let Some(old_dir) = old_dir {
        std::fs::remove_dir_all(old_dir)?;
    }
    Ok(true)
}

/// Whether any file of `payload` is missing from, or has other bytes in,
/// `old` (modes are not compared, as upstream does not: fsGroup changes
/// them after the write).
fn payload_differs(payload: &Payload, old: &Path) -> io::Result<bool> {
    for (path, file) in payload {
        let p = old.join(path);
        match std::fs::symlink_metadata(&p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        if std::fs::read(&p)? != file.data {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The relative paths of the old version that the new payload lacks
/// (directories of a nested path count as present).
fn paths_to_remove(payload: &Payload, old: &Path) -> io::Result<Vec<String>> {
    let mut present = Vec::new();
    collect(old, old, &mut present)?;
    let mut wanted = std::collections::HashSet::new();
    for file in payload.keys() {
        let mut p = file.as_str();
        loop {
            wanted.insert(p.to_owned());
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => break,
            }
        }
    }
    Ok(present
        .into_iter()
        .filter(|p| !wanted.contains(p))
        .collect())
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
        if entry.file_type()?.is_dir() {
            collect(root, &path, out)?;
        }
    }
    Ok(())
}

/// A fresh `..<UTC time>.<n>` directory, mode 0755.
fn new_version_dir(dir: &Path) -> io::Result<PathBuf> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = Timestamp::from_second(now.as_secs() as i64)
        .map(|t| t.strftime("%Y_%m_%d_%H_%M_%S").to_string())
        .unwrap_or_default();
    for n in 0..100u32 {
        let p = dir.join(format!("..{stamp}.{}", now.subsec_nanos() + n));
        match std::fs::create_dir(&p) {
            Ok(()) => {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
                return Ok(p);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free version directory name",
    ))
}

fn write_payload(payload: &Payload, dir: &Path) -> io::Result<()> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&full, &file.data)?;
        std::fs::set_permissions(
            &full,
            std::fs::Permissions::from_mode(file.mode as u32 & 0o7777),
        )?;
    }
    Ok(())
}

/// `<dir>/<top> -> ..data/<top>` for each top-level name of the payload.
fn create_user_visible(dir: &Path, payload: &Payload) -> io::Result<()> {
    for path in payload.keys() {
        let top = path.split('/').next().unwrap_or(path);
        let visible = dir.join(top);
        match std::fs::read_link(&visible) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                symlink(Path::new(DATA_DIR).join(top), &visible)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_core::volume::FileProjection;

    fn payload(files: &[(&str, &str, i32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| {
                (
                    (*p).to_owned(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                    },
                )
            })
            .collect()
    }

    fn versions(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.starts_with("..") && n != DATA_DIR
            })
            .count()
    }

    #[test]
    fn writes_upstreams_layout_and_updates_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        assert!(write(dir, payload(&[("a", "1", 0o644), ("sub/b", "2", 0o400)])).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(dir.join("sub/b")).unwrap(), "2");
        assert_eq!(
            std::fs::read_link(dir.join("a")).unwrap(),
            Path::new("..data/a")
        );
        let data = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
        assert!(data.to_string_lossy().starts_with(".."), "{data:?}");
        let mode = std::fs::metadata(dir.join("sub/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o400);

        // The same payload: nothing is written.
        assert!(!write(dir, payload(&[("a", "1", 0o644), ("sub/b", "2", 0o400)])).unwrap());
        assert_eq!(std::fs::read_link(dir.join(DATA_DIR)).unwrap(), data);

        // A change of one key and a key gone: one version, the old link gone.
        assert!(write(dir, payload(&[("a", "3", 0o644)])).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "3");
        assert_eq!(
            std::fs::symlink_metadata(dir.join("sub"))
                .unwrap_err()
                .kind(),
            std::io::ErrorKind::NotFound
        );
        assert_eq!(versions(dir), 1);
    }

    #[test]
    fn bad_paths_are_refused_before_anything_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        for bad in ["../x", "/abs", "..data/x"] {
            let e = write(
                tmp.path(),
                payload(&[("ok", "1", 0o644), (bad, "x", 0o644)]),
            )
            .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_reader_never_sees_a_mix() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        let pair =
            |n: usize| payload(&[("a", &n.to_string(), 0o644), ("b", &n.to_string(), 0o644)]);
        write(&dir, pair(0)).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (dir, stop) = (dir.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Read both through one resolution of ..data, as a
                    // reader that opens the directory does.
                    let Ok(v) = std::fs::read_link(dir.join(DATA_DIR)) else {
                        continue;
                    };
                    let (Ok(a), Ok(b)) = (
                        std::fs::read_to_string(dir.join(&v).join("a")),
                        std::fs::read_to_string(dir.join(&v).join("b")),
                    ) else {
                        continue;
                    };
                    assert_eq!(a, b, "a mixed read");
                    reads += 1;
                }
                reads
            })
        };
        for n in 1..200 {
            write(&dir, pair(n)).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    }
}
