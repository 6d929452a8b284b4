//! Helpers shared by the end-to-end and cluster tests: await a condition
//! by polling (the real runtime and API server have no change feed the
//! tests can subscribe to), never a fixed sleep; a cgroup root of each test
//! kubelet's own; the mounts a test kubelet leaves, released; the rkubelet
//! child process (`process`) and what the runtime holds of its pods
//! (`runtime`).

pub mod process;
pub mod runtime;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kubelet_core::cgroups::CgroupLayout;

/// A cgroupRoot of one test kubelet's own, made in every hierarchy of the
/// host (upstream requires it to exist), so that kubelets sharing the host
/// never take each other's pod cgroups for orphans. Removed when dropped.
pub struct CgroupRoot {
    /// `/name`, as cgroupRoot.
    pub name: String,
    dirs: Vec<(String, PathBuf)>,
}

impl CgroupRoot {
    pub fn new(name: &str) -> CgroupRoot {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let controllers =
            std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
        let dirs: Vec<(String, PathBuf)> =
            match CgroupLayout::from_mountinfo(&mountinfo, &controllers) {
                Some(CgroupLayout::V1 { mounts }) => {
                    mounts.into_iter().map(|(c, m)| (c, m.join(name))).collect()
                }
                Some(CgroupLayout::V2 { root, .. }) => vec![(String::new(), root.join(name))],
                None => Vec::new(),
            };
        for (_, d) in &dirs {
            std::fs::create_dir_all(d).unwrap();
        }
        CgroupRoot {
            name: format!("/{name}"),
            dirs,
        }
    }

    /// The root's directory in `controller`'s hierarchy (v2: the one).
    pub fn dir(&self, controller: &str) -> &Path {
        self.dirs
            .iter()
            .find(|(c, _)| c == controller || c.is_empty())
            .map(|(_, d)| d.as_path())
            .expect("the hierarchy is mounted")
    }
}

fn rmdir_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        for (_, d) in &self.dirs {
            rmdir_tree(d);
        }
    }
}

/// Unmount what a stopped rkubelet leaves under `dir`: its root
/// directory's shared bind mount (upstream's MakeRShared, never undone, as
/// upstream's kubelet leaves it) and any pod volume. Best effort.
pub fn release_mounts(dir: &Path) {
    if let Err(e) = kubelet::volumes::mount::unmount_all_under(dir) {
        eprintln!("releasing the mounts under {}: {e}", dir.display());
    }
}

pub const POLL: Duration = Duration::from_millis(200);

/// Await `check` returning `Some`, polling every 200 ms; fails the test
/// after `deadline`.
pub async fn eventually<T>(
    what: &str,
    deadline: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            eprintln!("[{:>6.2}s] {what}", start.elapsed().as_secs_f64());
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Assert that `check` holds at every poll for `window` (for things that
/// must not happen, e.g. a duplicate container).
pub async fn consistently(
    what: &str,
    window: Duration,
    mut check: impl AsyncFnMut() -> Result<(), String>,
) {
    let start = Instant::now();
    while start.elapsed() < window {
        if let Err(e) = check().await {
            panic!(
                "after {:.2}s: not {what}: {e}",
                start.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
