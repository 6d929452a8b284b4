//! The rkubelet binary as a test's child process, as both tiers run it: a
//! directory of its own (manifests, root, logs, config.yaml and the
//! rkubelet.log its output is appended to), a cgroupRoot of its own, start,
//! SIGTERM or kill -9, the runtime's view of its pods, and the end of its
//! log for a failed test. What a tier does around it (an API server, its
//! pods, its drop guard's order) stays in the tier.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kubelet_cri::client::CriClient;
use kubelet_cri::v1 as cri;

use super::runtime::{CRI_TIMEOUT, Labels};
use super::{CgroupRoot, eventually};

/// The kubelet API's port: not 10250, so a developer's kubelet (hack/up.sh)
/// or a conformance run on the same machine is left alone.
pub const KUBELET_PORT: u16 = 10350;
/// rkubelet's exit after SIGTERM.
const EXIT: Duration = Duration::from_secs(15);
/// Lines of rkubelet's log a failed test prints.
const LOG_TAIL: usize = 150;

/// One rkubelet child process (when started) and its directory. Dropping it
/// kills rkubelet if it still runs; the tiers' drop guards do that first,
/// in their own order.
pub struct Rkubelet {
    pub dir: tempfile::TempDir,
    /// The CRI endpoint it runs its pods on.
    pub endpoint: String,
    /// A client of that runtime, for the test's checks.
    pub cri: CriClient,
    child: Option<Child>,
    /// Its cgroupRoot (dropped after the fields above: rkubelet is gone).
    pub cgroups: CgroupRoot,
}

impl Rkubelet {
    /// A new directory `<prefix>XXXXXX` under the temporary directory, with
    /// manifests/, root/ and logs/; a cgroupRoot named `cgroup_root` (None:
    /// the directory's name); and config.yaml, the configuration both tiers
    /// start from followed by `extra_config` (top-level fields).
    pub fn new(
        prefix: &str,
        cgroup_root: Option<&str>,
        endpoint: String,
        extra_config: &str,
    ) -> Rkubelet {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        for d in ["manifests", "root", "logs"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let cgroups = match cgroup_root {
            Some(name) => CgroupRoot::new(name),
            None => CgroupRoot::new(&dir.path().file_name().unwrap().to_string_lossy()),
        };
        let cri = CriClient::connect_lazy(&endpoint, CRI_TIMEOUT).unwrap();
        let rk = Rkubelet {
            dir,
            endpoint,
            cri,
            child: None,
            cgroups,
        };
        // No image GC: the test images are imported, not pullable. No disk
        // eviction thresholds (0 % turns one off, as upstream): a CI machine's
        // disk can be all but full (a run saw under 1 % free), and the
        // reclaim would remove the exited containers the tests look at.
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             failCgroupV1: false\nimageGCHighThresholdPercent: 100\ncgroupRoot: {}\n\
             evictionHard:\n  memory.available: 1Mi\n  nodefs.available: 0%\n  imagefs.available: 0%\n  nodefs.inodesFree: 0%\n\
             podLogsDir: {}\nport: {KUBELET_PORT}\nhealthzPort: 0\nfileCheckFrequency: 2s\n{extra_config}",
            rk.cgroups.name,
            rk.logs().display()
        );
        std::fs::write(rk.config(), config).unwrap();
        rk
    }

    pub fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    /// Its root directory (--root-dir).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Its podLogsDir.
    pub fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    /// Its output, of every start.
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("rkubelet.log")
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    /// Add KubeletConfiguration lines (top-level fields), for the next start.
    pub fn add_config(&self, yaml: &str) {
        let mut text = std::fs::read_to_string(self.config()).unwrap();
        text.push_str(yaml);
        std::fs::write(self.config(), text).unwrap();
    }

    /// Start (or restart) rkubelet as node `node`, joined to the API server
    /// of `kubeconfig` if any; its output is appended to rkubelet.log.
    pub fn start(&mut self, node: &str, kubeconfig: Option<&Path>) {
        self.start_with(node, kubeconfig, &[]);
    }

    /// [`Rkubelet::start`] with more flags.
    pub fn start_with(&mut self, node: &str, kubeconfig: Option<&Path>, flags: &[&OsStr]) {
        self.start_with_env(node, kubeconfig, flags, &[]);
    }

    /// [`Rkubelet::start_with`], with more environment variables.
    pub fn start_with_env(
        &mut self,
        node: &str,
        kubeconfig: Option<&Path>,
        flags: &[&OsStr],
        env: &[(&str, &str)],
    ) {
        assert!(self.child.is_none(), "rkubelet already runs");
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log())
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkubelet"));
        cmd.arg("--config").arg(self.config());
        if let Some(kubeconfig) = kubeconfig {
            cmd.arg("--kubeconfig").arg(kubeconfig);
        }
        let child = cmd
            .arg("--hostname-override")
            .arg(node)
            .arg("--container-runtime-endpoint")
            .arg(&self.endpoint)
            .arg("--pod-manifest-path")
            .arg(self.manifests())
            .arg("--root-dir")
            .arg(self.root())
            .arg("--cert-dir")
            .arg(self.root().join("pki"))
            .args(flags)
            .envs(env.iter().copied())
            // The log goes to a file: no terminal colours in it.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawning rkubelet");
        self.child = Some(child);
    }

    /// The running rkubelet's process ID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("rkubelet was started").id()
    }

    /// How rkubelet exited, if it has (it is then no longer running).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut().expect("rkubelet was started");
        let status = child.try_wait().unwrap();
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// Fails the test if rkubelet has exited.
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.exit_status() {
            panic!("rkubelet exited unexpectedly: {status}");
        }
    }

    /// `kill -9` rkubelet.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("rkubelet was started");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM rkubelet and wait for a clean exit.
    pub async fn terminate(&mut self) {
        let mut child = self.child.take().expect("rkubelet was started");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM rkubelet failed");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > EXIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("rkubelet did not exit within {EXIT:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!(
            "rkubelet exited {status} {:.2}s after SIGTERM",
            start.elapsed().as_secs_f64()
        );
        assert!(status.success(), "rkubelet exited with {status} on SIGTERM");
    }

    /// For a drop guard: kill rkubelet if it runs, ignoring failures.
    pub fn kill_if_running(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// For a failed test: the last lines of rkubelet's log, as node `node`.
    pub fn print_log_tail(&self, node: &str) {
        if let Ok(log) = std::fs::read_to_string(self.log()) {
            let lines: Vec<_> = log.lines().collect();
            let from = lines.len().saturating_sub(LOG_TAIL);
            eprintln!(
                "---- rkubelet log of {node} (last {} lines) ----",
                lines.len() - from
            );
            for l in &lines[from..] {
                eprintln!("{l}");
            }
            eprintln!("---- end of rkubelet log ----");
        }
    }

    /// The runtime's sandboxes (any state) whose labels are `ours`; None
    /// when the runtime did not answer.
    pub async fn sandboxes_where(
        &self,
        ours: impl Fn(&Labels) -> bool,
    ) -> Option<Vec<cri::PodSandbox>> {
        let all = self.cri.list_pod_sandbox(None).await.ok()?;
        Some(all.into_iter().filter(|s| ours(&s.labels)).collect())
    }

    /// The runtime's containers (any state) whose labels are `ours`; None
    /// when the runtime did not answer.
    pub async fn containers_where(
        &self,
        ours: impl Fn(&Labels) -> bool,
    ) -> Option<Vec<cri::Container>> {
        let all = self.cri.list_containers(None).await.ok()?;
        Some(all.into_iter().filter(|c| ours(&c.labels)).collect())
    }

    /// Wait (at most `deadline`) until the runtime holds no sandbox and no
    /// container whose labels are `ours`.
    pub async fn wait_runtime_clean(
        &self,
        what: &str,
        deadline: Duration,
        ours: impl Fn(&Labels) -> bool,
    ) {
        eventually(what, deadline, async || {
            let s = self.sandboxes_where(&ours).await?;
            let c = self.containers_where(&ours).await?;
            (s.is_empty() && c.is_empty()).then_some(())
        })
        .await;
    }
}

impl Drop for Rkubelet {
    fn drop(&mut self) {
        self.kill_if_running();
    }
}
