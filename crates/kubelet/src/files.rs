//! Small files the kubelet keeps under its root directory.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What a file being written is called until it is renamed over its
/// name.
pub const TMP_SUFFIX: &str = ".tmp";

/// Write `bytes` to `path` through a temporary file renamed over it
/// (mode 0600), as upstream's writeFile: a reader, or a crash, sees the
/// old content or the new, never a part.
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file_mode(path, bytes, 0o600)
}

/// [`write_file`] with the file's `mode`.
pub fn write_file_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let written = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Whether `path` is absolute, inside `root` and free of `..`.
pub fn is_under(path: &Path, root: &Path) -> bool {
    path.is_absolute()
        && path.starts_with(root)
        && !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}
