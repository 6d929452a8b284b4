//! A kubelet as a child process: rkubelet's directories and config file for
//! the static-pod bench, any kubelet's log, and orderly stop (SIGTERM,
//! SIGKILL after a grace period).

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// What rkubelet and the upstream kubelet log once their sync loop runs.
const READY_LINES: [&str; 2] = ["starting the sync loop", "Starting kubelet main sync loop"];
/// How long to wait for one of [`READY_LINES`].
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// SIGTERM to SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub struct Kubelet {
    child: Child,
    pid: u32,
    /// What the messages call it ("rkubelet", "upstream kubelet").
    name: &'static str,
    pub manifest_dir: PathBuf,
    pub log_path: PathBuf,
    /// Where this process's part of the log starts (a restarted kubelet
    /// appends to its predecessor's).
    log_start: usize,
}

impl Kubelet {
    /// Start rkubelet with its own manifest, root and log directories under `work`.
    pub fn spawn(
        binary: &Path,
        endpoint: &str,
        node: &str,
        work: &Path,
    ) -> anyhow::Result<Kubelet> {
        let manifest_dir = work.join("manifests");
        let root_dir = work.join("root");
        let logs_dir = work.join("pod-logs");
        for d in [&manifest_dir, &root_dir, &logs_dir] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let config = work.join("kubelet-config.yaml");
        std::fs::write(
            &config,
            format!(
                "kind: KubeletConfiguration\n\
                 apiVersion: kubelet.config.k8s.io/v1beta1\n\
                 failCgroupV1: false\n\
                 imageGCHighThresholdPercent: 100\n\
                 evictionHard:\n  memory.available: 1Mi\n  nodefs.available: 1%\n  \
                   imagefs.available: 1%\n  nodefs.inodesFree: 1%\n\
                 podLogsDir: {}\n\
                 healthzPort: 0\n\
                 readOnlyPort: 0\n",
                logs_dir.display()
            ),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        let args: Vec<OsString> = vec![
            "--config".into(),
            config.into(),
            "--container-runtime-endpoint".into(),
            endpoint.into(),
            "--pod-manifest-path".into(),
            manifest_dir.clone().into(),
            "--root-dir".into(),
            root_dir.clone().into(),
            "--cert-dir".into(),
            root_dir.join("pki").into(),
            "--hostname-override".into(),
            node.into(),
        ];
        Kubelet::start(
            "rkubelet",
            binary,
            &args,
            work.join("rkubelet.log"),
            manifest_dir,
        )
    }

    /// Start `binary` with `args`, stdout and stderr appended to `log_path`.
    /// `manifest_dir` is only used by the static-pod bench.
    pub fn start(
        name: &'static str,
        binary: &Path,
        args: &[OsString],
        log_path: PathBuf,
        manifest_dir: PathBuf,
    ) -> anyhow::Result<Kubelet> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let log_start = usize::try_from(log.metadata()?.len())?;
        let log2 = log.try_clone().context("duplicating the log file handle")?;
        let child = Command::new(binary)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let pid = child
            .id()
            .with_context(|| format!("{name} exited at once"))?;
        Ok(Kubelet {
            child,
            pid,
            name,
            manifest_dir,
            log_path,
            log_start,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Fails if rkubelet has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait().context("waiting for the kubelet")? {
            bail!(
                "{} exited unexpectedly ({status}); last log lines:\n{}",
                self.name,
                self.log_tail(20)
            );
        }
        Ok(())
    }

    /// Wait until rkubelet's log says the sync loop runs. Returns false
    /// (rkubelet still alive) if it did not say so in time.
    pub async fn wait_ready(&mut self) -> anyhow::Result<bool> {
        let start = Instant::now();
        while start.elapsed() < READY_TIMEOUT {
            self.check_alive()?;
            let log = std::fs::read(&self.log_path).unwrap_or_default();
            let own = String::from_utf8_lossy(log.get(self.log_start..).unwrap_or_default());
            if READY_LINES.iter().any(|line| own.contains(line)) {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(false)
    }

    /// SIGTERM, then SIGKILL after [`STOP_GRACE`]. Returns how it ended.
    pub async fn stop(&mut self) -> anyhow::Result<String> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(format!("had already exited ({status})"));
        }
        // No unsafe code here (workspace lint): let kill(1) send the signal.
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .context("running kill -TERM")?;
        if !sent.success() {
            bail!("kill -TERM {} failed ({sent})", self.pid);
        }
        let start = Instant::now();
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(status) => {
                let status = status.context("waiting for the kubelet")?;
                Ok(format!(
                    "exited {:.2} s after SIGTERM ({status})",
                    start.elapsed().as_secs_f64()
                ))
            }
            Err(_) => {
                self.child.kill().await.context("killing the kubelet")?;
                Ok(format!(
                    "did not exit within {STOP_GRACE:?} of SIGTERM: killed with SIGKILL"
                ))
            }
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| strip_ansi(&String::from_utf8_lossy(&b)))
            .unwrap_or_default()
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Warning and error lines of the log: (warnings, errors, distinct
    /// messages without their timestamps, at most `keep`). Reads rkubelet's
    /// format and klog's (`W1129 11:07:42.0 PID file.go:12] msg`).
    pub fn log_problems(&self, keep: usize) -> (usize, usize, Vec<String>) {
        let text = self.log_text();
        let (mut warns, mut errors) = (0, 0);
        let mut distinct: Vec<String> = Vec::new();
        for line in text.lines() {
            if let Some((severity, msg)) = klog_line(line) {
                match severity {
                    'W' => warns += 1,
                    'E' | 'F' => errors += 1,
                    _ => continue,
                }
                let msg = msg.to_owned();
                if distinct.len() < keep && !distinct.contains(&msg) {
                    distinct.push(msg);
                }
                continue;
            }
            let mut words = line.split_whitespace();
            let _timestamp = words.next();
            let level = words.next().unwrap_or("");
            match level {
                "WARN" => warns += 1,
                "ERROR" => errors += 1,
                _ if line.starts_with("rkubelet:") || line.contains("panicked") => errors += 1,
                _ => continue,
            }
            let msg = line
                .split_once(char::is_whitespace)
                .map_or(line, |(_, rest)| rest)
                .trim()
                .to_owned();
            if distinct.len() < keep && !distinct.contains(&msg) {
                distinct.push(msg);
            }
        }
        (warns, errors, distinct)
    }
}

/// A klog line's severity and message (after `file.go:NN] `).
fn klog_line(line: &str) -> Option<(char, &str)> {
    let mut chars = line.chars();
    let severity = chars.next().filter(|c| "IWEF".contains(*c))?;
    let digits = line.get(1..5)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) || line.as_bytes().get(5) != Some(&b' ') {
        return None;
    }
    let msg = line.split_once("] ").map_or(line, |(_, m)| m);
    Some((severity, msg.trim()))
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ params final-byte (0x40..=0x7e)
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{klog_line, strip_ansi};

    #[test]
    fn reads_klog() {
        assert_eq!(
            klog_line("E1129 11:07:42.008014   15531 server.go:1332] \"Failed\" err=\"x\""),
            Some(('E', "\"Failed\" err=\"x\""))
        );
        assert_eq!(klog_line("2026-11-29T11:07:42Z  WARN x"), None);
    }

    #[test]
    fn strips_colors() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m x"),
            "2026  WARN x"
        );
    }
}
