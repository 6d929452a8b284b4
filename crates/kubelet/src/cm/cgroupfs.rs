//! The `cgroupfs` driver: cgroups made, set and removed as directories and
//! files of the cgroup file system, cgroup v1 (one hierarchy per
//! controller) or v2 (unified), writing what runc's fs and fs2 managers
//! write (the values come from `kubelet_core::cgroups`). Blocking calls:
//! callers run them off the async workers.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use kubelet_core::cgroups::{
    CgroupLayout, CgroupName, ResourceConfig, V1_REQUIRED, V2_SUPPORTED, v1_writes, v2_writes,
};

/// The host's cgroup file system, as rkubelet writes it.
#[derive(Clone, Debug)]
pub struct Cgroupfs {
    layout: CgroupLayout,
    /// The host's hugepage sizes in bytes.
    hugepage_sizes: Vec<u64>,
}

impl Cgroupfs {
    pub fn new(layout: CgroupLayout, hugepage_sizes: Vec<u64>) -> Cgroupfs {
        Cgroupfs {
            layout,
            hugepage_sizes,
        }
    }

    /// 1 or 2.
    pub fn version(&self) -> u8 {
        self.layout.version()
    }

    pub fn layout(&self) -> &CgroupLayout {
        &self.layout
    }

    pub fn hugepage_sizes(&self) -> &[u64] {
        &self.hugepage_sizes
    }

    /// The v2 controllers upstream enables where the root offers them.
    fn v2_controllers(controllers: &[String]) -> Vec<String> {
        V2_SUPPORTED
            .iter()
            .filter(|c| controllers.iter().any(|x| x == *c))
            .map(|c| c.to_string())
            .collect()
    }

    /// Each hierarchy's directory of `name`.
    fn dirs(&self, name: &CgroupName) -> Vec<PathBuf> {
        match &self.layout {
            CgroupLayout::V1 { mounts } => {
                mounts.values().map(|m| m.join(name.relative())).collect()
            }
            CgroupLayout::V2 { root, .. } => vec![root.join(name.relative())],
        }
    }

    /// Exists: v1, the directory in every hierarchy upstream checks (cpu,
    /// cpuacct, cpuset, memory, pids, and hugetlb where mounted); v2, the
    /// directory with every supported controller enabled.
    pub fn exists(&self, name: &CgroupName) -> bool {
        match &self.layout {
            CgroupLayout::V1 { mounts } => {
                let mut checked = 0;
                for (c, m) in mounts {
                    if V1_REQUIRED.contains(&c.as_str()) || c == "hugetlb" {
                        checked += 1;
                        if !m.join(name.relative()).is_dir() {
                            return false;
                        }
                    }
                }
                checked > 0
            }
            CgroupLayout::V2 { root, controllers } => {
                let dir = root.join(name.relative());
                let Ok(enabled) = std::fs::read_to_string(dir.join("cgroup.controllers")) else {
                    return false;
                };
                let enabled: BTreeSet<&str> = enabled.split_whitespace().collect();
                Self::v2_controllers(controllers)
                    .iter()
                    .all(|c| enabled.contains(c.as_str()))
            }
        }
    }

    /// Create `name` (and its parents) in every hierarchy, then set it to
    /// `cfg`.
    pub fn create(&self, name: &CgroupName, cfg: &ResourceConfig) -> io::Result<()> {
        self.make(name)?;
        self.set(name, cfg)
    }

    /// Create `name` (and its parents) in every hierarchy, setting nothing
    /// but what a new cgroup needs to hold processes (v1 cpuset's CPUs and
    /// memory nodes, v2 the parents' controllers): as runc's Apply makes
    /// one.
    pub fn make(&self, name: &CgroupName) -> io::Result<()> {
        match &self.layout {
            CgroupLayout::V1 { mounts } => {
                for (c, m) in mounts {
                    std::fs::create_dir_all(m.join(name.relative()))?;
                    if c == "cpuset" {
                        inherit_cpuset(m, name)?;
                    }
                }
            }
            CgroupLayout::V2 { root, controllers } => {
                let enable: Vec<String> = Self::v2_controllers(controllers)
                    .iter()
                    .map(|c| format!("+{c}"))
                    .collect();
                let mut dir = root.clone();
                for part in &name.0 {
                    // Each parent hands its controllers down to its children.
                    if !enable.is_empty() {
                        write(&dir.join("cgroup.subtree_control"), &enable.join(" "))?;
                    }
                    dir.push(part);
                    match std::fs::create_dir(&dir) {
                        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Write `cfg` into `name`.
    pub fn set(&self, name: &CgroupName, cfg: &ResourceConfig) -> io::Result<()> {
        match &self.layout {
            CgroupLayout::V1 { mounts } => {
                let with_hugetlb = mounts.contains_key("hugetlb");
                for w in v1_writes(cfg, &self.hugepage_sizes, with_hugetlb) {
                    if let Some(m) = mounts.get(w.controller) {
                        write(&m.join(name.relative()).join(&w.file), &w.value)?;
                    }
                }
            }
            CgroupLayout::V2 { root, .. } => {
                let dir = root.join(name.relative());
                let enabled = std::fs::read_to_string(dir.join("cgroup.controllers"))?;
                let enabled: Vec<String> = enabled.split_whitespace().map(str::to_owned).collect();
                for w in v2_writes(cfg, &self.hugepage_sizes, &enabled) {
                    write(&dir.join(&w.file), &w.value)?;
                }
            }
        }
        Ok(())
    }

    /// The memory `name` uses now, in bytes: v1's memory.usage_in_bytes,
    /// v2's memory.current.
    pub fn memory_usage(&self, name: &CgroupName) -> io::Result<u64> {
        let path = match &self.layout {
            CgroupLayout::V1 { mounts } => mounts
                .get("memory")
                .ok_or_else(|| io::Error::other("no memory hierarchy"))?
                .join(name.relative())
                .join("memory.usage_in_bytes"),
            CgroupLayout::V2 { root, .. } => root.join(name.relative()).join("memory.current"),
        };
        std::fs::read_to_string(&path)?
            .trim()
            .parse()
            .map_err(io::Error::other)
    }

    /// Remove `name` and what is below it, from every hierarchy; what is
    /// already gone is fine.
    pub fn destroy(&self, name: &CgroupName) -> io::Result<()> {
        for dir in self.dirs(name) {
            remove_tree(&dir)?;
        }
        Ok(())
    }

    /// The processes in `name` or below it, in any hierarchy.
    pub fn pids(&self, name: &CgroupName) -> Vec<i32> {
        let mut pids = BTreeSet::new();
        for dir in self.dirs(name) {
            collect_pids(&dir, &mut pids);
        }
        pids.into_iter().collect()
    }

    /// Move process `pid` into `name` (which must exist), in every
    /// hierarchy (runc's Apply).
    pub fn add_process(&self, name: &CgroupName, pid: i32) -> io::Result<()> {
        for dir in self.dirs(name) {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The processes in `name` itself, not below it: v1, as its devices
    /// hierarchy lists them (upstream's GetPids), else its first.
    pub fn own_pids(&self, name: &CgroupName) -> io::Result<Vec<i32>> {
        let dir = match &self.layout {
            CgroupLayout::V1 { mounts } => mounts
                .get("devices")
                .or_else(|| mounts.values().next())
                .map(|m| m.join(name.relative())),
            CgroupLayout::V2 { root, .. } => Some(root.join(name.relative())),
        };
        let Some(dir) = dir else {
            return Ok(Vec::new());
        };
        let procs = std::fs::read_to_string(dir.join("cgroup.procs"))?;
        Ok(procs
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    /// The names of `parent`'s child cgroups, in any hierarchy.
    pub fn children(&self, parent: &CgroupName) -> io::Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        for dir in self.dirs(parent) {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                if entry.file_type()?.is_dir() {
                    out.insert(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
        Ok(out)
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing {value:?} to {}: {e}", path.display()),
        )
    })
}

/// A new v1 cpuset cgroup has no CPUs or memory nodes: each level gets its
/// parent's (what runc's cpuset manager does).
fn inherit_cpuset(mount: &Path, name: &CgroupName) -> io::Result<()> {
    let mut parent = mount.to_path_buf();
    for part in &name.0 {
        let dir = parent.join(part);
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let Ok(own) = std::fs::read_to_string(dir.join(file)) else {
                continue;
            };
            if own.trim().is_empty()
                && let Ok(theirs) = std::fs::read_to_string(parent.join(file))
                && !theirs.trim().is_empty()
            {
                write(&dir.join(file), theirs.trim())?;
            }
        }
        parent = dir;
    }
    Ok(())
}

/// rmdir bottom-up. A cgroup directory goes with its control files in it;
/// a plain directory standing in for one (a test's) is emptied first.
fn remove_tree(dir: &Path) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        } else {
            files.push(entry.path());
        }
    }
    match rmdir(dir) {
        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
            for f in files {
                std::fs::remove_file(f)?;
            }
            std::fs::remove_dir(dir)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
    .map_err(|e| io::Error::new(e.kind(), format!("removing {}: {e}", dir.display())))
}

/// rmdir, again a few times while the kernel still counts processes just
/// killed as in it (EBUSY), as libcontainer's RemovePaths does.
fn rmdir(dir: &Path) -> io::Result<()> {
    let mut delay = std::time::Duration::from_millis(10);
    for _ in 0..4 {
        match std::fs::remove_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {
                std::thread::sleep(delay);
                delay *= 2;
            }
            other => return other,
        }
    }
    std::fs::remove_dir(dir)
}

fn collect_pids(dir: &Path, pids: &mut BTreeSet<i32>) {
    if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&entry.path(), pids);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    fn v1(dir: &Path) -> Cgroupfs {
        let mounts: BTreeMap<String, PathBuf> = ["cpu", "cpuacct", "cpuset", "memory", "pids"]
            .iter()
            .map(|c| (c.to_string(), dir.join(c)))
            .collect();
        for m in mounts.values() {
            std::fs::create_dir_all(m).unwrap();
        }
        std::fs::write(dir.join("cpuset/cpuset.cpus"), "0-1\n").unwrap();
        Cgroupfs::new(CgroupLayout::V1 { mounts }, vec![])
    }

    #[test]
    fn v1_create_set_list_destroy() {
        let tmp = tempfile::tempdir().unwrap();
        let fs = v1(tmp.path());
        let pod = CgroupName::parse_cgroupfs("/kubepods/burstable/podu1");
        assert!(!fs.exists(&pod));
        // What a real cpuset cgroup starts with: an empty file.
        std::fs::create_dir_all(tmp.path().join("cpuset/kubepods")).unwrap();
        std::fs::write(tmp.path().join("cpuset/kubepods/cpuset.cpus"), "\n").unwrap();
        let cfg = ResourceConfig {
            cpu_shares: Some(204),
            cpu_quota: Some(30_000),
            cpu_period: Some(100_000),
            memory: Some(1 << 26),
            pids_limit: Some(100),
            ..Default::default()
        };
        fs.create(&pod, &cfg).unwrap();
        assert!(fs.exists(&pod));
        let at =
            |c: &str, f: &str| read(&tmp.path().join(c).join("kubepods/burstable/podu1").join(f));
        assert_eq!(at("cpu", "cpu.shares"), "204");
        assert_eq!(at("cpu", "cpu.cfs_quota_us"), "30000");
        assert_eq!(at("memory", "memory.limit_in_bytes"), "67108864");
        assert_eq!(at("pids", "pids.max"), "100");
        assert_eq!(read(&tmp.path().join("cpuset/kubepods/cpuset.cpus")), "0-1");
        let burstable = CgroupName::parse_cgroupfs("/kubepods/burstable");
        assert_eq!(
            fs.children(&burstable).unwrap(),
            BTreeSet::from(["podu1".to_owned()])
        );
        // A container cgroup below, with its processes.
        let c = tmp.path().join("memory/kubepods/burstable/podu1/c1");
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(c.join("cgroup.procs"), "12\n34\n").unwrap();
        assert_eq!(fs.pids(&pod), vec![12, 34]);
        fs.destroy(&pod).unwrap();
        assert!(!fs.exists(&pod));
        assert!(fs.children(&burstable).unwrap().is_empty());
        // Again: nothing left to remove is not an error.
        fs.destroy(&pod).unwrap();
    }

    #[test]
    fn v2_hands_controllers_down_and_writes_unified_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        let fs = Cgroupfs::new(
            CgroupLayout::V2 {
                root: root.clone(),
                controllers: ["cpuset", "cpu", "io", "memory", "pids"]
                    .map(String::from)
                    .into(),
            },
            vec![],
        );
        let name = CgroupName::parse_cgroupfs("/kubepods/besteffort");
        // The kernel fills a child's cgroup.controllers; a test does it.
        std::fs::create_dir_all(root.join("kubepods/besteffort")).unwrap();
        std::fs::write(
            root.join("kubepods/besteffort/cgroup.controllers"),
            "cpu memory pids\n",
        )
        .unwrap();
        assert!(!fs.exists(&name), "cpuset is missing");
        let cfg = ResourceConfig {
            cpu_shares: Some(2),
            memory: Some(-1),
            unified: [("memory.low".to_owned(), "0".to_owned())].into(),
            ..Default::default()
        };
        fs.create(&name, &cfg).unwrap();
        assert_eq!(
            read(&root.join("cgroup.subtree_control")),
            "+cpu +cpuset +memory +pids"
        );
        assert_eq!(
            read(&root.join("kubepods/cgroup.subtree_control")),
            "+cpu +cpuset +memory +pids"
        );
        let dir = root.join("kubepods/besteffort");
        assert_eq!(read(&dir.join("cpu.weight")), "1");
        assert_eq!(read(&dir.join("memory.max")), "max");
        assert_eq!(read(&dir.join("memory.low")), "0");
    }
}
