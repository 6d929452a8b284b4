//! Disk usage as the summary reports it: file systems (statvfs), the
//! containers' log directories and the pods' volumes, walked without
//! following a link or leaving their file system.

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use kubelet_core::stats::{FsStats, FsUsage, PodReference};

use super::StatsError;

/// Size and free space of the file system holding `path`.
pub(super) fn statvfs(path: &Path) -> Result<FsUsage, StatsError> {
    let st = rustix::fs::statvfs(path).map_err(|errno| StatsError::Statvfs {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    let block = st.f_frsize;
    Ok(FsUsage {
        capacity_bytes: st.f_blocks.saturating_mul(block),
        available_bytes: st.f_bavail.saturating_mul(block),
        used_bytes: st.f_blocks.saturating_sub(st.f_bfree).saturating_mul(block),
        inodes: st.f_files,
        inodes_free: st.f_ffree,
    })
}

/// The size in bytes of the block device at `path` (upstream's
/// MetricsBlock: a raw block volume's capacity).
pub(super) fn device_size(path: &Path) -> io::Result<u64> {
    use std::io::Seek;
    std::fs::File::open(path)?.seek(io::SeekFrom::End(0))
}

/// Disk usage of a container's log directory,
/// `<logs root>/<namespace>_<name>_<uid>/<container>/` (upstream's
/// getPodContainerLogStats): bytes allocated and inodes, the directory
/// included. None when a name could leave the logs root or the directory
/// cannot be read.
pub(super) async fn container_log_stats(
    logs_root: &Path,
    pod: &PodReference,
    container: &str,
    root: &FsStats,
    root_fs: Option<FsUsage>,
) -> Option<FsStats> {
    let safe = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains('/');
    if ![
        pod.namespace.as_str(),
        pod.name.as_str(),
        pod.uid.as_str(),
        container,
    ]
    .into_iter()
    .all(safe)
    {
        return None;
    }
    let dir = logs_root
        .join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid))
        .join(container);
    match dir_usage(&dir) {
        Ok((bytes, inodes)) => Some(FsStats::part_of(
            root.time,
            root_fs.as_ref(),
            Some(bytes),
            Some(inodes),
        )),
        Err(err) => {
            tracing::debug!(dir = %dir.display(), %err, "Unable to fetch container log stats");
            None
        }
    }
}

/// How deep a volume walk goes: a pod nesting directories without end
/// cannot exhaust the stack or the descriptors of the thread (or of the
/// kubelet) walking it; what lies deeper is not counted.
pub(super) const MAX_WALK_DEPTH: usize = 128;

/// Allocated bytes and inode count of a directory tree, as upstream's du
/// of a volume. The walk goes through directory descriptors (`openat`
/// with O_NOFOLLOW and O_DIRECTORY, `fstatat` without following), so a
/// symlink a container puts in place of a directory, even mid-walk, never
/// leads it out; other file systems (mounts inside it) are not entered; an
/// entry gone meanwhile is not counted. One descriptor is open per level,
/// and no more than [`MAX_WALK_DEPTH`] levels are entered.
pub(super) fn tree_usage(dir: &Path) -> io::Result<(u64, u64)> {
    use rustix::fs::{Mode, OFlags, open};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let top = std::fs::symlink_metadata(dir)?;
    let mut usage = (top.blocks() * 512, 1);
    if top.is_dir() {
        let fd = open(dir, flags, Mode::empty())?;
        walk(&fd, top.dev(), MAX_WALK_DEPTH, &mut usage);
    }
    Ok(usage)
}

/// Add what directory `dir` holds to `usage`, on device `dev` only,
/// entering at most `depth` more levels.
fn walk(dir: &rustix::fd::OwnedFd, dev: u64, depth: usize, usage: &mut (u64, u64)) {
    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, openat, statat};
    let Ok(entries) = Dir::read_from(dir) else {
        return;
    };
    let mut subdirs = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let Ok(st) = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        if st.st_dev != dev {
            continue;
        }
        usage.0 += u64::try_from(st.st_blocks).unwrap_or(0) * 512;
        usage.1 += 1;
        if depth > 1 && FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            subdirs.push(name.to_owned());
        }
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for name in subdirs {
        if let Ok(fd) = openat(dir, name.as_c_str(), flags, Mode::empty()) {
            walk(&fd, dev, depth - 1, usage);
        }
    }
}

/// Allocated bytes and inode count of a directory and the entries in it
/// (log directories hold files only; symlinks are not followed).
fn dir_usage(dir: &Path) -> io::Result<(u64, u64)> {
    // Plain std::fs: a log directory's metadata is a few local syscalls,
    // cheaper inline than hopping through tokio's blocking pool per entry.
    let meta = std::fs::symlink_metadata(dir)?;
    let mut bytes = meta.blocks() * 512;
    let mut inodes = 1;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        bytes += meta.blocks() * 512;
        inodes += 1;
    }
    Ok((bytes, inodes))
}
