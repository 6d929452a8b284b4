//! kubectl for the tiers that drive a real cluster with it (`cluster.rs`,
//! `multinode.rs`; included by path, as the e2e tier has no API server).

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Start `kubectl` with `kubeconfig` and `args`, `stdin` written to it and
/// closed; its stdout and stderr piped.
pub fn spawn_kubectl(
    kubectl: impl AsRef<std::ffi::OsStr>,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Child {
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning kubectl");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child
}
