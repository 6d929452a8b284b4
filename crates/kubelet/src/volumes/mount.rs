//! Mounts and the removal of pod directories (blocking; run on the blocking
//! pool). A tmpfs is found again after a restart by its device differing
//! from its parent's, so mounting is idempotent; a directory is removed
//! only after every mount under it is gone (deepest first, read from
//! /proc/self/mountinfo), and `remove_dir_all` never follows a symlink, so
//! removal never reaches outside the directory.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, UnmountFlags};

/// Whether `path` is the root of a mount: its device differs from its
/// parent's. (A bind mount of the same file system is not seen; rkubelet
/// only mounts tmpfs where this is asked.)
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let me = rustix::fs::lstat(path)?;
    let up = rustix::fs::lstat(parent)?;
    Ok(me.st_dev != up.st_dev)
}

/// Mount a tmpfs of `size` bytes (0: the kernel's default) on `dir` unless
/// one is there already.
pub fn ensure_tmpfs(dir: &Path, size: i64) -> io::Result<()> {
    if is_mount_point(dir)? {
        return Ok(());
    }
    let data = (size > 0).then(|| format!("size={size}"));
    let data = data
        .map(CString::new)
        .transpose()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    rustix::mount::mount(
        "tmpfs",
        dir,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        data.as_deref(),
    )?;
    Ok(())
}

/// Bind-mount `source` on the directory `target` (read-only when asked)
/// unless something is mounted there already, as mountinfo says (a bind of
/// the same file system has the same device: `is_mount_point` cannot see
/// it). True when it mounted now.
pub fn ensure_bind(source: &Path, target: &Path, read_only: bool) -> io::Result<bool> {
    let mounted = mounts_under(target)?.iter().any(|m| m == target);
    if !mounted {
        rustix::mount::mount_bind(source, target)?;
    }
    // Read-only asked for: made so now, or again when a remount failed
    // before (a bind mount is read-write until remounted).
    let read_write = || {
        rustix::fs::statvfs(target)
            .map(|s| !s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
    };
    if read_only && read_write()? {
        rustix::mount::mount_remount(target, MountFlags::BIND | MountFlags::RDONLY, "")?;
    }
    Ok(!mounted)
}

/// Unmount `dir` and what is under it, then remove it with rmdir only:
/// what is still in it after the unmount (a mount this namespace does not
/// show) is never deleted. For a volume whose directory is a bind of the
/// host's data (a local PV), as upstream removes them.
pub fn unmount_and_rmdir(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    unmount_all_under(dir)?;
    std::fs::remove_dir(dir).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "removing {} (rmdir only, its data kept): {e}",
                dir.display()
            ),
        )
    })
}

/// The mount points of this mount namespace (field 5 of mountinfo, octal
/// escapes undone).
pub fn parse_mountinfo(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_octal(p)))
        .collect()
}

/// Whether the mount `path` lies on is a shared one (upstream's isShared):
/// of the mounts whose point is `path` or above it, the last listed (the
/// topmost) has a `shared:N` optional field. None when no mount holds it.
pub fn on_shared_mount(mountinfo: &str, path: &Path) -> Option<bool> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = PathBuf::from(unescape_octal(fields.get(4)?));
            let optional = fields.get(6..)?.iter().take_while(|f| **f != "-");
            let shared = optional.clone().any(|f| f.starts_with("shared:"));
            path.starts_with(&point).then_some((point, shared))
        })
        .fold(
            None,
            |best: Option<(PathBuf, bool)>, (point, shared)| match &best {
                Some((b, _)) if b.components().count() > point.components().count() => best,
                _ => Some((point, shared)),
            },
        )
        .map(|(_, shared)| shared)
}

/// Upstream's MakeRShared for the root directory: unless it is on a shared
/// mount already, bind-mount it on itself and make that mount recursively
/// shared, so mounts made under it (pod volumes) propagate to containers
/// that ask for HostToContainer or Bidirectional, also where `/` is a
/// private mount. Safe to repeat. Returns whether it mounted.
pub fn make_rshared(path: &Path) -> io::Result<bool> {
    let path = std::fs::canonicalize(path)?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    if on_shared_mount(&mountinfo, &path) == Some(true) {
        return Ok(false);
    }
    rustix::mount::mount_bind(&path, &path)
        .map_err(|e| io::Error::other(format!("failed to bind-mount {}: {e}", path.display())))?;
    rustix::mount::mount_change(
        &path,
        rustix::mount::MountPropagationFlags::SHARED | rustix::mount::MountPropagationFlags::REC,
    )
    .map_err(|e| io::Error::other(format!("failed to make {} rshared: {e}", path.display())))?;
    Ok(true)
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mounts at or under `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut found: Vec<PathBuf> = parse_mountinfo(&text)
        .into_iter()
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found.dedup();
    Ok(found)
}

/// Unmount everything at or under `dir` (a mount stacked twice is
/// unmounted twice). Safe to repeat.
pub fn unmount_all_under(dir: &Path) -> io::Result<()> {
    // A stacked mount shows once per layer; a few rounds take them all.
    for _ in 0..8 {
        let mounts = mounts_under(dir)?;
        if mounts.is_empty() {
            return Ok(());
        }
        for m in mounts {
            match rustix::mount::unmount(&m, UnmountFlags::NOFOLLOW) {
                Ok(()) => {}
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(io::Error::other(format!("unmount {}: {e}", m.display()))),
            }
        }
    }
    match mounts_under(dir)?.first() {
        None => Ok(()),
        Some(m) => Err(io::Error::other(format!(
            "{} is still mounted",
            m.display()
        ))),
    }
}

/// Remove `dir` and what is in it, mounts first; a missing `dir` is done.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return std::fs::remove_file(dir),
        Ok(_) => {}
    }
    unmount_all_under(dir)?;
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Remove the file (or link) `path`; one missing is done.
pub fn remove_file_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Create `dir` (and its parents) with `mode` on the last component.
pub fn ensure_dir(dir: &Path, mode: u32) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_mount_points_unescaped() {
        let text = "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n\
                    30 22 0:40 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~secret/my\\040secret rw - tmpfs tmpfs rw\n";
        assert_eq!(
            parse_mountinfo(text),
            vec![
                PathBuf::from("/"),
                PathBuf::from("/var/lib/kubelet/pods/u/volumes/kubernetes.io~secret/my secret"),
            ]
        );
    }

    #[test]
    fn shared_mounts_found_by_the_topmost_mount_holding_the_path() {
        let text = "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    40 22 0:40 / /var/lib rw master:3 - ext4 /dev/sdb1 rw\n\
                    41 40 0:41 / /var/lib/kubelet rw shared:7 - ext4 /dev/sdb1 rw\n\
                    42 40 0:41 / /var/lib/kubelet rw - ext4 /dev/sdb1 rw\n";
        let cases = [
            ("/home/x", Some(true)),
            ("/var/lib/docker", Some(false)),
            // Stacked on the same point: the last one listed is on top.
            ("/var/lib/kubelet/pods", Some(false)),
            ("/var/lib/kubeletx", Some(false)),
        ];
        for (path, want) in cases {
            assert_eq!(on_shared_mount(text, Path::new(path)), want, "{path}");
        }
        assert_eq!(on_shared_mount("", Path::new("/x")), None);
    }

    #[test]
    fn removal_stays_inside_and_is_repeatable() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let dir = tmp.path().join("pod");
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/f"), "y").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("a/escape")).unwrap();
        remove_tree(&dir).unwrap();
        assert!(!dir.exists());
        assert!(outside.join("keep").exists(), "a symlink was followed");
        remove_tree(&dir).unwrap();
    }
}
