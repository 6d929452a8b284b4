//! Raw block volumes (`volumeMode: Block`), mapped as upstream's
//! MapBlockVolume maps them (blocking; run on the blocking pool):
//!
//! - the device is bind-mounted on the file `<global map path>/<pod uid>`
//!   (a local PV's `<root>/plugins/kubernetes.io~local-volume/volumeDevices/<pv>`,
//!   a CSI volume's `<root>/plugins/kubernetes.io/csi/volumeDevices/<pv>/dev`);
//! - the pod's link `<root>/pods/<uid>/volumeDevices/<plugin>/<name>` points
//!   at the device, and is what the container runtime is given;
//! - a loop device on the bind keeps the device open (upstream's file
//!   descriptor lock: a device removed and another attached under its name
//!   is not given to the pod), made and found by its backing file, as
//!   upstream's `losetup` calls and sysfs reads.
//!
//! Each step finds what is done already, so mapping and unmapping are
//! idempotent and either kubelet can unmap what the other mapped.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::mount;

/// The directory of a pod's (and a plugin's) device links and maps.
pub const VOLUME_DEVICES: &str = "volumeDevices";

/// `<pod dir>/volumeDevices/<plugin>/<name>`: the link a container's
/// `volumeDevices` entry is given (upstream's GetPodDeviceMapPath).
pub fn pod_link(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir.join(VOLUME_DEVICES).join(plugin).join(name)
}

/// Map `device` for the pod `uid`: bound at `<global>/<uid>`, linked from
/// `link`, held open by a loop device. Safe to repeat.
pub fn map(device: &Path, global: &Path, uid: &str, link: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(device).map_err(|e| named(device, e))?;
    if !meta.file_type().is_block_device() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a block device", device.display()),
        ));
    }
    mount::ensure_dir(global, 0o750)?;
    let bound = global.join(uid);
    bind_device(device, &bound)?;
    relink(device, link)?;
    if loop_device_of(&bound)?.is_none() {
        losetup(&["-f", &bound.to_string_lossy()])?;
    }
    Ok(())
}

/// Make `link` point at `device`, its directory made first. Made again
/// every time: a link left from before a reboot may point at another
/// device now.
pub fn relink(device: &Path, link: &Path) -> io::Result<()> {
    if let Some(dir) = link.parent() {
        mount::ensure_dir(dir, 0o750)?;
    }
    mount::remove_file_if_present(link)?;
    std::os::unix::fs::symlink(device, link)
}

/// Unmap what [`map`] did for the pod `uid`: the loop device detached, the
/// link removed, the bind unmounted and its file removed, then `global`
/// itself once no pod's bind is left in it. Safe to repeat.
pub fn unmap(global: &Path, uid: &str, link: &Path) -> io::Result<()> {
    let bound = global.join(uid);
    if let Some(device) = loop_device_of(&bound)? {
        losetup(&["-d", &device.to_string_lossy()])?;
    }
    mount::remove_file_if_present(link)?;
    mount::unmount_all_under(&bound)?;
    mount::remove_file_if_present(&bound)?;
    match std::fs::remove_dir(global) {
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            Ok(())
        }
        r => r,
    }
}

/// Bind-mount the device on the file `bound` (made empty first) unless a
/// device is there already.
fn bind_device(device: &Path, bound: &Path) -> io::Result<()> {
    match std::fs::metadata(bound) {
        Ok(m) if m.file_type().is_block_device() => return Ok(()),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(bound)?;
        }
        Err(e) => return Err(e),
    }
    rustix::mount::mount_bind(device, bound).map_err(|e| {
        io::Error::other(format!(
            "failed to bind mount devicePath: {} to linkPath {}: {e}",
            device.display(),
            bound.display()
        ))
    })
}

/// The loop device whose backing file is `path` (sysfs'
/// `/sys/block/loop*/loop/backing_file`), if any.
fn loop_device_of(path: &Path) -> io::Result<Option<PathBuf>> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let entries = match std::fs::read_dir("/sys/block") {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        r => r?,
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("loop") {
            continue;
        }
        let Ok(backing) = std::fs::read_to_string(entry.path().join("loop/backing_file")) else {
            continue;
        };
        let backing = backing.trim().trim_end_matches("(deleted)").trim();
        if Path::new(backing) == path || Path::new(backing) == real {
            return Ok(Some(Path::new("/dev").join(name)));
        }
    }
    Ok(None)
}

fn losetup(args: &[&str]) -> io::Result<()> {
    let out = Command::new("losetup")
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("losetup {}: {e}", args.join(" "))))?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "losetup {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_not_a_block_device_is_refused_and_nothing_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("disk.img");
        std::fs::write(&file, b"").unwrap();
        let global = tmp.path().join("global");
        let link = pod_link(&tmp.path().join("pod"), "kubernetes.io~local-volume", "pv");
        let err = map(&file, &global, "uid", &link).unwrap_err();
        assert!(err.to_string().ends_with("is not a block device"), "{err}");
        assert!(!global.exists() && !link.exists());
        // Unmapping what was never mapped is done at once.
        unmap(&global, "uid", &link).unwrap();
    }
}
