//! fsGroup on a volume (upstream's SetVolumeOwnership): every file and
//! directory gets the group, group read (and write, unless the volume is
//! read-only) and directories the setgid bit and group search, symlinks
//! their group only; with fsGroupChangePolicy OnRootMismatch nothing is done
//! when the volume's root already has them. Symlinks are never followed.
//! Blocking.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const RW: u32 = 0o660;
const RO: u32 = 0o440;
const EXEC: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// Whether the root `dir` already has what fsGroup gives (upstream's
/// requiresPermissionChange, negated).
fn root_matches(dir: &Path, gid: u32, read_only: bool) -> bool {
    let Ok(m) = std::fs::metadata(dir) else {
        return false;
    };
    let want = if read_only { RO } else { RW } | EXEC;
    m.is_dir() && m.gid() == gid && m.mode() & want == want && m.mode() & SETGID != 0
}

/// Apply fsGroup `gid` to the volume at `dir`.
pub fn apply(dir: &Path, gid: i64, read_only: bool, on_root_mismatch: bool) -> io::Result<()> {
    let gid = u32::try_from(gid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("fsGroup {gid}")))?;
    if on_root_mismatch && root_matches(dir, gid, read_only) {
        return Ok(());
    }
    walk(dir, gid, read_only)
}

fn walk(path: &Path, gid: u32, read_only: bool) -> io::Result<()> {
    let m = std::fs::symlink_metadata(path)?;
    std::os::unix::fs::lchown(path, None, Some(gid))?;
    if m.file_type().is_symlink() {
        return Ok(());
    }
    let mut mask = if read_only { RO } else { RW };
    if m.is_dir() {
        mask |= SETGID | EXEC;
    }
    // chown clears setuid/setgid on files: the mode is set after it.
    std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode((m.mode() & 0o7777) | mask),
    )?;
    if m.is_dir() {
        for entry in std::fs::read_dir(path)? {
            walk(&entry?.path(), gid, read_only)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_group_reaches_every_file_but_not_through_symlinks() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: chown needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "x").unwrap();
        let vol = tmp.path().join("vol");
        std::fs::create_dir_all(vol.join("sub")).unwrap();
        std::fs::write(vol.join("sub/f"), "y").unwrap();
        std::fs::set_permissions(vol.join("sub/f"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("link")).unwrap();
        apply(&vol, 1234, false, false).unwrap();
        let meta = |p: &Path| std::fs::symlink_metadata(p).unwrap();
        assert_eq!(meta(&vol.join("sub/f")).gid(), 1234);
        assert_eq!(meta(&vol.join("sub/f")).mode() & 0o7777, 0o660);
        assert_eq!(meta(&vol.join("sub")).mode() & 0o2070, 0o2070);
        assert_eq!(meta(&vol.join("link")).gid(), 1234);
        assert_ne!(meta(&outside).gid(), 1234, "a symlink was followed");
        assert!(root_matches(&vol, 1234, false));
        // OnRootMismatch: a matching root is left as it is.
        std::fs::set_permissions(vol.join("sub/f"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        apply(&vol, 1234, false, true).unwrap();
        assert_eq!(meta(&vol.join("sub/f")).mode() & 0o7777, 0o600);
        apply(&vol, 1234, false, false).unwrap();
        assert_eq!(meta(&vol.join("sub/f")).mode() & 0o7777, 0o660);
    }
}
