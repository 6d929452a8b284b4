//! Safe subPath mounts (the class of CVE-2017-1002101 and CVE-2021-25741):
//! the path is resolved, checked to be inside its volume, then opened again
//! component by component from the volume's root with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so no symlink swapped
//! in meanwhile can lead out; what was opened is bind-mounted (through
//! `/proc/self/fd`) at `<pod>/volume-subpaths/<volume>/<container>/<index>`,
//! and that is what the container gets. Missing directories of the subPath
//! are made the same way. Blocking.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use super::mount;

fn open_beneath(root: &OwnedFd, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let fd = rustix::fs::openat2(
        root.as_fd(),
        rel,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    Ok(fd)
}

/// Make the directories of `sub` inside `root` that are missing, never
/// through a symlink (upstream's SafeMakeDir), with the mode of the root.
fn make_dirs(root: &OwnedFd, sub: &Path, mode: Mode) -> io::Result<()> {
    let mut done = PathBuf::new();
    for c in sub.components() {
        let Component::Normal(name) = c else {
            continue;
        };
        let parent = if done.as_os_str().is_empty() {
            rustix::fs::openat(
                root,
                ".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?
        } else {
            open_beneath(root, &done, OFlags::PATH | OFlags::DIRECTORY)?
        };
        let made = match rustix::fs::mkdirat(&parent, name, mode) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => return Err(e.into()),
        };
        done.push(name);
        if made {
            // mkdirat's mode went through the umask: the root's, exactly.
            let dir = open_beneath(root, &done, OFlags::RDONLY | OFlags::DIRECTORY)?;
            rustix::fs::fchmod(&dir, mode)?;
        }
    }
    Ok(())
}

/// Open the regular file at `rel` inside the volume at `volume` for
/// reading, as if the volume were the root (upstream's SecureJoin): `..`
/// and symlinks are resolved inside it and never lead out.
pub fn open_in_volume(volume: &Path, rel: &str) -> io::Result<std::fs::File> {
    let root = rustix::fs::open(
        volume,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let fd = rustix::fs::openat2(
        root.as_fd(),
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{rel:?} is not a regular file"),
        ));
    }
    Ok(std::fs::File::from(fd))
}

/// Prepare the subPath `sub` of the volume at `volume` for a container at
/// `target`; returns the path to give the runtime. Idempotent: a target
/// already mounted is reused.
pub fn prepare(volume: &Path, sub: &str, target: &Path) -> io::Result<PathBuf> {
    if target.exists() && mount::mounts_under(target)?.iter().any(|m| m == target) {
        return Ok(target.to_owned());
    }
    let root_path = std::fs::canonicalize(volume)?;
    let root = rustix::fs::open(
        &root_path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    let sub_path = Path::new(sub);
    if !root_path.join(sub_path).exists() {
        let st = rustix::fs::fstat(&root)?;
        make_dirs(&root, sub_path, Mode::from_raw_mode(st.st_mode & 0o7777))?;
    }
    // Symlinks inside the volume (a configMap's keys) are followed once, and
    // the result must stay inside it.
    let resolved = std::fs::canonicalize(root_path.join(sub_path))?;
    let rel = resolved.strip_prefix(&root_path).map_err(|_| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "subpath {:?} not within volume path {:?}",
                resolved.display().to_string(),
                root_path.display().to_string()
            ),
        )
    })?;
    let opened = if rel.as_os_str().is_empty() {
        rustix::fs::openat(&root, ".", OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?
    } else {
        open_beneath(&root, rel, OFlags::PATH)?
    };
    let is_dir =
        FileType::from_raw_mode(rustix::fs::fstat(&opened)?.st_mode) == FileType::Directory;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if is_dir {
        match std::fs::create_dir(target) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    } else {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(target)?;
    }
    let source = format!("/proc/self/fd/{}", opened.as_raw_fd());
    rustix::mount::mount_bind(source.as_str(), target)?;
    Ok(target.to_owned())
}
