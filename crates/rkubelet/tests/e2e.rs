//! End-to-end tests: the rkubelet binary as a child process against a real
//! containerd (the private one of `hack/containerd.sh`), inspected through
//! the CRI. Run them through `hack/test.sh`, or by hand:
//!
//! ```text
//! RKUBELET_E2E_ENDPOINT=unix://DIR/containerd.sock RKUBELET_E2E_RUNTIME_DIR=DIR \
//!   cargo test -p rkubelet --test e2e -- --ignored --test-threads=1
//! ```
//!
//! Every test runs its own rkubelet with its own manifest, root and log
//! directories and its own node name (so static pod names and UIDs never
//! collide), and leaves nothing behind: it removes its manifests, waits until
//! the runtime holds nothing of its node, then stops rkubelet with SIGTERM.
//! A failing test still kills its rkubelet and removes its sandboxes (the
//! `Node` drop guard), and prints rkubelet's log and what the runtime held.

#![allow(
    clippy::too_many_lines,
    reason = "each test is a scenario against a real runtime, read top to bottom"
)]
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kubelet_cri::client::CriClient;
use kubelet_cri::v1 as cri;

mod common;
use common::process::{KUBELET_PORT, Rkubelet};
use common::runtime::{
    CRI_TIMEOUT, Labels, POD_NAME, POD_UID, cleanup_runtime, cname, label, restart_count,
};
use common::{consistently, eventually, release_mounts};

const IMAGE: &str = "rkubelet.test/busybox:1";
/// Starting a pod (sandbox, network, two containers) on a loaded machine.
const START: Duration = Duration::from_secs(60);
/// Everything of a removed pod gone from the runtime.
const CLEANUP: Duration = Duration::from_secs(60);

const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// Runs until SIGTERM, which it honours within a second (sh as PID 1 has no
/// default SIGTERM action, so the trap is needed).
const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

fn endpoint() -> String {
    std::env::var("RKUBELET_E2E_ENDPOINT").expect(
        "RKUBELET_E2E_ENDPOINT (unix://.../containerd.sock) must be set: run through hack/test.sh",
    )
}

/// A pod manifest; `containers` are (name, shell script) pairs.
fn pod(name: &str, containers: &[(&str, &str)], extra_spec: &str) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\nspec:\n{extra_spec}  containers:\n"
    );
    for (c, script) in containers {
        let script = serde_json::to_string(script).unwrap();
        s.push_str(&format!(
            "  - name: {c}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script}]\n"
        ));
    }
    s
}

fn is_running(c: &cri::Container) -> bool {
    c.state == cri::ContainerState::ContainerRunning as i32
}

fn is_ready(s: &cri::PodSandbox) -> bool {
    s.state == cri::PodSandboxState::SandboxReady as i32
}

fn unique_node(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = (nanos ^ std::process::id().rotate_left(16)) & 0xff_ffff;
    format!("e2e-{tag}-{n:06x}")
}

/// One rkubelet child process with its own directories and node name.
struct Node {
    name: String,
    rk: Rkubelet,
    finished: bool,
}

impl Node {
    fn new(tag: &str) -> Node {
        let name = unique_node(tag);
        let rk = Rkubelet::new(&format!("rkubelet-{name}-"), Some(&name), endpoint(), "");
        eprintln!("node {name} in {}", rk.dir.path().display());
        Node {
            name,
            rk,
            finished: false,
        }
    }

    /// Whether the runtime lists its handlers in Status: containerd 2,
    /// which has what the tests of newer features need (image mounts,
    /// stop signals, the event stream); containerd 1.6 lists none.
    async fn runtime_lists_handlers(&self) -> bool {
        !self.rk.cri.status().await.unwrap().handlers.is_empty()
    }

    /// The static pod's name on this node.
    fn pod_name(&self, name: &str) -> String {
        format!("{name}-{}", self.name)
    }

    fn write(&self, file: &str, body: &str) {
        // Write then rename, as editors and config tools do.
        let tmp = self.rk.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, self.rk.manifests().join(file)).unwrap();
    }

    fn remove(&self, file: &str) {
        std::fs::remove_file(self.rk.manifests().join(file)).unwrap();
    }

    /// Start (or restart) rkubelet; its output is appended to rkubelet.log.
    fn start(&mut self) {
        self.rk.start(&self.name, None);
    }

    fn mine(&self, labels: &Labels) -> bool {
        label(labels, POD_NAME).ends_with(&format!("-{}", self.name))
    }

    /// This node's sandboxes.
    async fn sandboxes(&self) -> Option<Vec<cri::PodSandbox>> {
        self.rk.sandboxes_where(|l| self.mine(l)).await
    }

    /// This node's containers.
    async fn containers(&self) -> Option<Vec<cri::Container>> {
        self.rk.containers_where(|l| self.mine(l)).await
    }

    /// The containers of `pod` (the manifest's name).
    async fn pod_containers(&self, pod: &str) -> Option<Vec<cri::Container>> {
        let full = self.pod_name(pod);
        let cs = self.containers().await?;
        Some(
            cs.into_iter()
                .filter(|c| label(&c.labels, POD_NAME) == full)
                .collect(),
        )
    }

    async fn pod_sandboxes(&self, pod: &str) -> Option<Vec<cri::PodSandbox>> {
        let full = self.pod_name(pod);
        let sbs = self.sandboxes().await?;
        Some(
            sbs.into_iter()
                .filter(|s| label(&s.labels, POD_NAME) == full)
                .collect(),
        )
    }

    /// The one running container `container` of `pod`, if exactly one runs.
    async fn running(&self, pod: &str, container: &str) -> Option<cri::Container> {
        let mut cs: Vec<_> = self
            .pod_containers(pod)
            .await?
            .into_iter()
            .filter(|c| cname(c) == container && is_running(c))
            .collect();
        (cs.len() == 1).then(|| cs.remove(0))
    }

    /// Remove every manifest, wait until the runtime holds nothing of this
    /// node, then stop rkubelet with SIGTERM.
    async fn finish(mut self) {
        for entry in std::fs::read_dir(self.rk.manifests()).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        self.rk
            .wait_runtime_clean("the runtime holds nothing of this node", CLEANUP, |l| {
                self.mine(l)
            })
            .await;
        self.rk.assert_alive();
        self.rk.terminate().await;
        self.finished = true;
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.rk.kill_if_running();
        release_mounts(self.rk.dir.path());
        if self.finished {
            return;
        }
        self.rk.print_log_tail(&self.name);
        let suffix = format!("-{}", self.name);
        cleanup_runtime(self.rk.endpoint.clone(), move |sandboxes, containers| {
            let mine = |l: &Labels| label(l, POD_NAME).ends_with(&suffix);
            (
                sandboxes.into_iter().filter(|s| mine(&s.labels)).collect(),
                containers.into_iter().filter(|c| mine(&c.labels)).collect(),
            )
        });
    }
}

/// `<RFC3339Nano> <stdout|stderr> <F|P> <text>`, the CRI log format.
fn parse_cri_line(line: &str) -> Option<(&str, &str, &str)> {
    let mut parts = line.splitn(4, ' ');
    let (ts, stream, tag, text) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let b = ts.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    let rest = ts.get(19..)?;
    let rest = match rest.strip_prefix('.') {
        Some(frac) => {
            let n = frac.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 || n > 9 {
                return None;
            }
            &frac[n..]
        }
        None => rest,
    };
    let zone = rest == "Z"
        || (rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && rest.as_bytes()[3] == b':');
    (shape && zone && (stream == "stdout" || stream == "stderr") && (tag == "F" || tag == "P"))
        .then_some((stream, tag, text))
}

#[test]
fn cri_log_line_shape() {
    assert_eq!(
        parse_cri_line("2026-01-02T03:04:05.123456789Z stdout F hello world"),
        Some(("stdout", "F", "hello world"))
    );
    assert!(parse_cri_line("2026-01-02T03:04:05+01:00 stderr P x").is_some());
    assert!(parse_cri_line("2026-01-02 03:04:05Z stdout F x").is_none());
    assert!(parse_cri_line("hello").is_none());
}

/// The size of each file in a directory.
fn file_sizes(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    Some((
                        e.file_name().to_string_lossy().into_owned(),
                        e.metadata().ok()?.len(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A container writing about 10 MB/s of log keeps at most
/// containerLogMaxFiles files, the older copies compressed; the written
/// one is bounded by what one monitor interval adds.
#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn a_10_mb_per_second_log_stays_bounded() {
    let mut node = Node::new("flood");
    node.rk.add_config(
        "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    );
    let flood =
        "pad=$(printf '%0100d' 0); while :; do yes $pad | head -n 10000; usleep 100000; done";
    node.write(
        "p.yaml",
        &pod("p", &[("a", flood)], "  terminationGracePeriodSeconds: 1\n"),
    );
    node.start();
    let c = eventually("a runs", START, async || node.running("p", "a").await).await;
    let log = PathBuf::from(node.rk.cri.container_status(&c.id).await.unwrap().log_path);
    let dir = log.parent().unwrap().to_owned();
    eventually("rotated twice: a compressed copy", START, async || {
        file_sizes(&dir)
            .iter()
            .any(|(n, _)| n.ends_with(".gz"))
            .then_some(())
    })
    .await;
    // ~14 MB/s on disk (the CRI format's prefixes): the written file and
    // the newest copy each hold about one interval's worth at most.
    let bound: u64 = 3 * (1 << 20) + 2 * 3 * 20_000_000;
    let mut largest = 0;
    consistently(
        "at most 3 files within the bound",
        Duration::from_secs(15),
        async || {
            let files = file_sizes(&dir);
            let total: u64 = files.iter().map(|(_, s)| s).sum();
            largest = largest.max(total);
            let compressed = files.iter().filter(|(n, _)| n.ends_with(".gz")).count();
            if files.len() <= 3 && total <= bound && compressed <= 1 {
                Ok(())
            } else {
                Err(format!("{files:?}"))
            }
        },
    )
    .await;
    eprintln!("MEASURED: the flooding container's log files peaked at {largest} bytes in all");
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn multi_container_pod_runs_with_ip_and_cri_logs() {
    let mut node = Node::new("multi");
    node.write(
        "web.yaml",
        &pod(
            "web",
            &[
                ("a", &format!("echo hello from a; {SLEEPER}")),
                ("b", &format!("echo hello from b; {SLEEPER}")),
            ],
            "",
        ),
    );
    node.start();
    let (a, b) = eventually("a and b run", START, async || {
        Some((
            node.running("web", "a").await?,
            node.running("web", "b").await?,
        ))
    })
    .await;
    let sbs = node.pod_sandboxes("web").await.unwrap();
    assert_eq!(sbs.len(), 1, "one sandbox: {sbs:?}");
    let sb = &sbs[0];
    assert!(is_ready(sb), "sandbox ready: {sb:?}");
    assert_eq!(a.pod_sandbox_id, sb.id);
    assert_eq!(b.pod_sandbox_id, sb.id);
    assert_eq!(label(&sb.labels, POD_NAMESPACE), "default");
    assert_eq!(label(&sb.labels, "app"), "web");
    let uid = label(&sb.labels, POD_UID).to_owned();
    assert!(!uid.is_empty(), "sandbox has a pod uid label");
    for c in [&a, &b] {
        assert_eq!(label(&c.labels, POD_UID), uid);
        assert_eq!(label(&c.labels, POD_NAME), node.pod_name("web"));
        assert_eq!(label(&c.labels, CONTAINER_NAME), cname(c));
        assert_eq!(restart_count(c), "0");
    }
    let status = node.rk.cri.pod_sandbox_status(&sb.id).await.unwrap();
    let ip = status.network.map(|n| n.ip).unwrap_or_default();
    assert!(
        ip.parse::<std::net::Ipv4Addr>().is_ok(),
        "pod IP {ip:?} is an IPv4 address"
    );
    eprintln!("pod IP {ip}");

    let log = node
        .rk
        .logs()
        .join(format!("default_{}_{uid}", node.pod_name("web")))
        .join("a")
        .join("0.log");
    let line = eventually("a's log file has its line", START, async || {
        let body = std::fs::read_to_string(&log).ok()?;
        body.lines()
            .find(|l| l.ends_with(" hello from a"))
            .map(str::to_owned)
    })
    .await;
    assert_eq!(
        parse_cri_line(&line),
        Some(("stdout", "F", "hello from a")),
        "CRI log line: {line:?}"
    );
    let status = node.rk.cri.container_status(&a.id).await.unwrap();
    assert_eq!(Path::new(&status.log_path), log, "ContainerStatus log path");
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn a_manifest_edit_stops_the_old_pod_within_its_grace_then_starts_the_new() {
    let mut node = Node::new("edit");
    // The old pod takes 2 s to stop after its SIGTERM.
    let slow = "trap 'sleep 2; exit 0' TERM; sleep 3600 & wait";
    node.write("p.yaml", &pod("p", &[("a", slow)], ""));
    node.start();
    let old = eventually("a runs", START, async || node.running("p", "a").await).await;
    let old_uid = label(&old.labels, POD_UID).to_owned();
    node.write(
        "p.yaml",
        &pod("p", &[("a", &format!("echo v2; {SLEEPER}"))], ""),
    );
    // As upstream's: a new pod (a new UID), started once the old one stopped.
    let new = eventually("the new pod runs", START, async || {
        let containers = node.pod_containers("p").await?;
        let old_runs = containers
            .iter()
            .any(|c| label(&c.labels, POD_UID) == old_uid && is_running(c));
        let sandboxes = node.pod_sandboxes("p").await?;
        let new_sandbox = sandboxes
            .iter()
            .any(|s| label(&s.labels, POD_UID) != old_uid);
        assert!(
            !(old_runs && new_sandbox),
            "the new pod's sandbox came while the old pod still ran"
        );
        node.running("p", "a")
            .await
            .filter(|c| label(&c.labels, POD_UID) != old_uid)
    })
    .await;
    assert_eq!(restart_count(&new), "0", "a new pod, not a restart");
    let sbs = node.pod_sandboxes("p").await.unwrap();
    assert_eq!(sbs.len(), 1, "the old sandbox is gone: {sbs:?}");
    assert!(is_ready(&sbs[0]) && sbs[0].id == new.pod_sandbox_id);
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn privileged_container_runs_in_a_privileged_sandbox() {
    let mut node = Node::new("priv");
    // The last container of the manifest asks to be privileged.
    let manifest =
        pod("priv", &[("a", SLEEPER)], "") + "    securityContext:\n      privileged: true\n";
    node.write("priv.yaml", &manifest);
    node.start();
    let a = eventually("the privileged container runs", START, async || {
        node.running("priv", "a").await
    })
    .await;
    let sbs = node.pod_sandboxes("priv").await.unwrap();
    assert_eq!(sbs.len(), 1, "one sandbox: {sbs:?}");
    assert_eq!(a.pod_sandbox_id, sbs[0].id);
    node.finish().await;
}

/// How many mounts /proc/sys has in the container (a read-only path of
/// the default procMount: one).
const PROC_MASKED: &str = "grep -c ' /proc/sys ' /proc/self/mountinfo";

/// `hostUsers: false`. Where the runtime's default handler supports user
/// namespaces (containerd 2): the pod's root is a host ID of its own above
/// the first 65536, kept in the pod's `userns` file (upstream's format)
/// until the pod goes. Where it lists no handler (containerd 1.6): refused
/// at the sandbox, in upstream's words.
#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn a_pod_without_host_users_runs_in_a_user_namespace_of_its_own() {
    let mut node = Node::new("userns");
    node.write(
        "userns.yaml",
        &(pod(
            "userns",
            &[
                (
                    "a",
                    &format!("cat /proc/self/uid_map; {PROC_MASKED}; {SLEEPER}"),
                ),
                ("b", &format!("{PROC_MASKED}; {SLEEPER}")),
            ],
            "  hostUsers: false\n",
        ) + "    securityContext:\n      procMount: Unmasked\n"),
    );
    node.start();
    let status = node.rk.cri.status().await.unwrap();
    let supported = status
        .handlers
        .iter()
        .any(|h| h.name.is_empty() && h.user_namespaces);
    eprintln!("runtime handlers: {:?}", status.handlers);
    if !supported {
        let want = "can't set `spec.hostUsers: false`, runtime does not support user namespaces";
        eventually("the pod is refused at its sandbox", START, async || {
            let log = std::fs::read_to_string(node.rk.log()).ok()?;
            log.contains(want).then_some(())
        })
        .await;
        assert!(node.pod_sandboxes("userns").await.unwrap().is_empty());
        node.finish().await;
        return;
    }
    let a = eventually("the container runs", START, async || {
        node.running("userns", "a").await
    })
    .await;
    let uid = label(&a.labels, POD_UID).to_owned();
    let log = node
        .rk
        .logs()
        .join(format!("default_{}_{uid}", node.pod_name("userns")))
        .join("a")
        .join("0.log");
    let lines = |container: &str, n: usize| {
        let log = log
            .parent()
            .unwrap()
            .with_file_name(container)
            .join("0.log");
        async move {
            let body = std::fs::read_to_string(&log).ok()?;
            let lines: Vec<String> = body
                .lines()
                .filter_map(|l| Some(parse_cri_line(l)?.2.to_owned()))
                .collect();
            (lines.len() >= n).then_some(lines)
        }
    };
    let a_lines = eventually("a's uid_map and /proc are logged", START, async || {
        lines("a", 2).await
    })
    .await;
    let map: Vec<String> = a_lines[0].split_whitespace().map(str::to_owned).collect();
    // /proc/sys read-only by default; with procMount Unmasked (which needs
    // a user namespace) not.
    assert_eq!(a_lines[1], "1", "{a_lines:?}");
    let b_lines = eventually("b's /proc is logged", START, async || lines("b", 1).await).await;
    assert_eq!(b_lines[0], "0", "{b_lines:?}");
    let host: u32 = map[1].parse().unwrap();
    assert_eq!(
        (map[0].as_str(), map[2].as_str()),
        ("0", "65536"),
        "{map:?}"
    );
    assert!(host >= 65536 && host.is_multiple_of(65536), "{map:?}");
    let file = node.rk.root().join("pods").join(&uid).join("userns");
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let mapping = serde_json::json!([{"hostId": host, "containerId": 0, "length": 65536}]);
    assert_eq!(kept["uidMappings"], mapping);
    assert_eq!(kept["gidMappings"], mapping);
    node.remove("userns.yaml");
    eventually("the pod's IDs are released with it", CLEANUP, async || {
        (!file.exists()).then_some(())
    })
    .await;
    node.finish().await;
}

/// An `image` volume: the image (here the test image itself, present)
/// mounted read-only where the container asks, and its `bin` directory
/// through a subPath, on a runtime that mounts
/// images (containerd 2, which lists its handlers; containerd 1.6 lists
/// none and has no image mounts, as the upstream kubelet finds too).
#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn an_image_volume_is_the_image_mounted_read_only() {
    let mut node = Node::new("imgvol");
    if !node.runtime_lists_handlers().await {
        eprintln!("the runtime lists no handlers (containerd 1.6): it cannot mount images");
        return;
    }
    let script = format!(
        "ls /img/bin/busybox && (touch /img/x 2>/dev/null && echo writable || echo read-only) && ls /imgbin/busybox; {SLEEPER}"
    );
    let manifest = pod("imgvol", &[("a", &script)], "")
        + "    volumeMounts:\n    - name: img\n      mountPath: /img\n"
        + "    - name: img\n      mountPath: /imgbin\n      subPath: bin\n"
        + &format!(
            "  volumes:\n  - name: img\n    image:\n      reference: {IMAGE}\n      pullPolicy: IfNotPresent\n"
        );
    node.write("imgvol.yaml", &manifest);
    node.start();
    let a = eventually("the container runs", START, async || {
        node.running("imgvol", "a").await
    })
    .await;
    let uid = label(&a.labels, POD_UID).to_owned();
    let log = node
        .rk
        .logs()
        .join(format!("default_{}_{uid}", node.pod_name("imgvol")))
        .join("a")
        .join("0.log");
    let lines = eventually("the container's findings are logged", START, async || {
        let body = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<String> = body
            .lines()
            .filter_map(|l| Some(parse_cri_line(l)?.2.to_owned()))
            .collect();
        (lines.len() >= 3).then_some(lines)
    })
    .await;
    assert_eq!(lines, ["/img/bin/busybox", "read-only", "/imgbin/busybox"]);
    let status = node.rk.cri.container_status(&a.id).await.unwrap();
    let mount = status
        .mounts
        .iter()
        .find(|m| m.container_path == "/img")
        .expect("the image mount");
    assert!(
        mount.image.as_ref().is_some_and(|i| !i.image.is_empty()),
        "{mount:?}"
    );
    let sub = status
        .mounts
        .iter()
        .find(|m| m.container_path == "/imgbin")
        .expect("the image subPath mount");
    assert_eq!(sub.image_sub_path, "bin", "{sub:?}");
    node.finish().await;
}

/// With the EventedPLEG gate: on a runtime with a container event stream
/// (containerd 2), a container's death is read from the stream and its pod
/// relisted at once (the log names the container); on containerd 1.6,
/// which has none, the stream is given up after five tries with upstream's
/// log line. Either way the pod ends (restartPolicy Never: its sandbox is
/// stopped); the time from the container's end to that is printed. On
/// containerd 2 no drift follows: the stream reported every end.
#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn with_evented_pleg_a_container_death_is_read_from_the_event_stream() {
    let mut node = Node::new("evented");
    let streams = node.runtime_lists_handlers().await;
    node.rk
        .add_config("featureGates:\n  EventedPLEG: true\nlogging:\n  verbosity: 4\n");
    node.write(
        "job.yaml",
        &pod(
            "job",
            &[("a", "sleep 3; exit 3")],
            "  restartPolicy: Never\n",
        ),
    );
    node.start();
    let a = eventually("a runs", START, async || node.running("job", "a").await).await;
    let sandbox = a.pod_sandbox_id.clone();
    let stopped = eventually("the pod's sandbox is stopped", START, async || {
        let sbs = node.pod_sandboxes("job").await?;
        sbs.iter()
            .any(|s| s.id == sandbox && !is_ready(s))
            .then(SystemTime::now)
    })
    .await;
    let status = node.rk.cri.container_status(&a.id).await.unwrap();
    assert_eq!(status.exit_code, 3);
    let finished = UNIX_EPOCH + Duration::from_nanos(u64::try_from(status.finished_at).unwrap());
    eprintln!(
        "container end to sandbox stopped: {:?} (polled every 200 ms)",
        stopped.duration_since(finished).unwrap_or_default()
    );
    let log = std::fs::read_to_string(node.rk.log()).unwrap();
    if streams {
        assert!(
            log.lines().any(|l| l
                .contains("Evented PLEG: requested pod relist after container termination")
                && l.contains(&a.id)),
            "the stream reported a's end"
        );
        // The stream reports every end, the sandbox's too: the relists
        // that follow find nothing it missed.
        consistently("free of drift", Duration::from_secs(3), async || {
            let log = std::fs::read_to_string(node.rk.log()).map_err(|e| e.to_string())?;
            match log.lines().find(|l| l.contains("never reported")) {
                Some(l) => Err(l.to_owned()),
                None => Ok(()),
            }
        })
        .await;
    } else {
        assert!(
            log.contains(
                "Evented PLEG: disabling container-termination fast path after exhausting event stream retries"
            ),
            "containerd 1.6 has no event stream"
        );
    }
    node.finish().await;
}

/// With the ContainerStopSignals gate, a container's `lifecycle.stopSignal`
/// is the signal it is stopped with: past its pod's active deadline, the
/// container traps SIGUSR1 (exit 10), not SIGTERM (exit 15), and the
/// runtime's status names the signal. Containerd 1.6 predates the field
/// and stops it with SIGTERM, as it would under the upstream kubelet.
#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn a_container_is_stopped_with_its_stop_signal() {
    let mut node = Node::new("stopsig");
    let signals = node.runtime_lists_handlers().await;
    node.rk
        .add_config("featureGates:\n  ContainerStopSignals: true\n");
    let script = "trap 'exit 10' USR1; trap 'exit 15' TERM; sleep 1000 & wait";
    node.write(
        "stopsig.yaml",
        &(pod(
            "stopsig",
            &[("a", script)],
            "  restartPolicy: Never\n  activeDeadlineSeconds: 3\n",
        ) + "    lifecycle:\n      stopSignal: SIGUSR1\n"),
    );
    node.start();
    let a = eventually("a runs", START, async || node.running("stopsig", "a").await).await;
    let status = eventually("a is stopped past the deadline", START, async || {
        let st = node.rk.cri.container_status(&a.id).await.ok()?;
        (st.state == cri::ContainerState::ContainerExited as i32).then_some(st)
    })
    .await;
    if signals {
        assert_eq!(status.exit_code, 10, "stopped with SIGUSR1: {status:?}");
        assert_eq!(status.stop_signal, cri::Signal::Sigusr1 as i32);
    } else {
        assert_eq!(
            status.exit_code, 15,
            "containerd 1.6 sends SIGTERM: {status:?}"
        );
    }
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn manifest_removal_kills_within_grace_and_removes_everything() {
    const GRACE: u64 = 3;
    let mut node = Node::new("rm");
    node.write(
        "p.yaml",
        &pod(
            "p",
            &[("stubborn", "trap '' TERM; while true; do sleep 1; done")],
            &format!("  terminationGracePeriodSeconds: {GRACE}\n"),
        ),
    );
    node.start();
    let c = eventually("stubborn runs", START, async || {
        node.running("p", "stubborn").await
    })
    .await;
    let uid = label(&c.labels, POD_UID).to_owned();
    let log_dir = node
        .rk
        .logs()
        .join(format!("default_{}_{uid}", node.pod_name("p")));
    assert!(log_dir.is_dir(), "{} exists", log_dir.display());

    let removed = Instant::now();
    node.remove("p.yaml");
    eventually("stubborn no longer runs", CLEANUP, async || {
        let cs = node.pod_containers("p").await?;
        (!cs.iter().any(is_running)).then_some(())
    })
    .await;
    let took = removed.elapsed();
    eprintln!(
        "stubborn stopped {:.2}s after the manifest was removed (grace {GRACE}s)",
        took.as_secs_f64()
    );
    assert!(
        took >= Duration::from_millis(GRACE * 1000 - 500),
        "the grace period was honoured: stopped after {took:?}"
    );
    assert!(
        took < Duration::from_secs(GRACE + 3),
        "killed within the grace period plus slack: stopped after {took:?}"
    );
    eventually(
        "the pod's containers, sandbox and log directory are gone",
        CLEANUP,
        async || {
            let cs = node.pod_containers("p").await?;
            let sbs = node.pod_sandboxes("p").await?;
            (cs.is_empty() && sbs.is_empty() && !log_dir.exists()).then_some(())
        },
    )
    .await;
    eprintln!(
        "everything removed {:.2}s after the manifest was removed",
        removed.elapsed().as_secs_f64()
    );
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn bad_manifests_beside_a_good_one() {
    let mut node = Node::new("bad");
    node.write(
        "invalid.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_Name\nspec:\n  containers: []\n",
    );
    node.write("garbage.yaml", "this: [is not\n  yaml: {\n");
    node.write("good.yaml", &pod("good", &[("a", SLEEPER)], ""));
    node.start();
    eventually("good's container runs", START, async || {
        node.running("good", "a").await
    })
    .await;
    let sbs = node.sandboxes().await.unwrap();
    assert_eq!(sbs.len(), 1, "only the good pod has a sandbox: {sbs:?}");
    assert!(is_ready(&sbs[0]));
    node.rk.assert_alive();
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn oom_score_file_limit_and_no_api_server_as_configured() {
    let mut node = Node::new("proc");
    node.rk
        .add_config("oomScoreAdj: 500\nmaxOpenFiles: 4096\nenableServer: false\n");
    node.write("p.yaml", &pod("p", &[("a", SLEEPER)], ""));
    node.start();
    eventually("the pod's container runs", START, async || {
        node.running("p", "a").await
    })
    .await;
    let proc = PathBuf::from(format!("/proc/{}", node.rk.pid()));
    let score = std::fs::read_to_string(proc.join("oom_score_adj")).unwrap();
    // (a score above 0 needs no privilege: this one is set everywhere)
    assert_eq!(score.trim(), "500", "oomScoreAdj");
    let limits = std::fs::read_to_string(proc.join("limits")).unwrap();
    let files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        files.split_whitespace().collect::<Vec<_>>()[3..5],
        ["4096", "4096"],
        "maxOpenFiles, soft and hard: {files}"
    );
    // enableServer: false: nothing listens on the kubelet API's port.
    let refused = std::net::TcpStream::connect(("127.0.0.1", KUBELET_PORT));
    assert!(refused.is_err(), "the kubelet API must not listen");
    node.rk.assert_alive();
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn systemd_hears_ready_then_watchdog_keep_alives() {
    use std::os::unix::net::UnixDatagram;
    let mut node = Node::new("systemd");
    let socket = node.rk.dir.path().join("notify");
    let systemd = UnixDatagram::bind(&socket).unwrap();
    systemd
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let notify = socket.display().to_string();
    // A timeout of 1 s is refused, as upstream refuses it.
    node.rk.start_with_env(
        &node.name,
        None,
        &[],
        &[("NOTIFY_SOCKET", &notify), ("WATCHDOG_USEC", "1000000")],
    );
    let status = eventually("rkubelet refuses the watchdog", START, async || {
        node.rk.exit_status()
    })
    .await;
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read_to_string(node.rk.log()).unwrap();
    assert!(
        log.contains("create health checker: configure watchdog timeout too small: 1s"),
        "{log}"
    );
    // 3 s: a keep-alive every 1.5 s while healthy; klog's JSON lines.
    node.rk.start_with_env(
        &node.name,
        None,
        &[OsStr::new("--logging-format=json")],
        &[("NOTIFY_SOCKET", &notify), ("WATCHDOG_USEC", "3000000")],
    );
    let mut buf = [0u8; 64];
    let mut heard = Vec::new();
    while heard.len() < 3 {
        let n = systemd.recv(&mut buf).expect("a notification within 30 s");
        heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(heard, ["READY=1", "WATCHDOG=1", "WATCHDOG=1"]);
    let log = std::fs::read_to_string(node.rk.log()).unwrap();
    let started = log
        .lines()
        .find(|l| l.contains("\"msg\":\"starting rkubelet\""))
        .unwrap_or_else(|| panic!("no JSON line: {log}"));
    let line: serde_json::Value = serde_json::from_str(started).unwrap();
    assert_eq!(line["v"], 0, "{line}");
    assert!(
        line["ts"].as_f64().is_some() && line["caller"].is_string(),
        "{line}"
    );
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn kernel_tunables_are_set_unless_protected() {
    const MAXKEYS: &str = "/proc/sys/kernel/keys/root_maxkeys";
    let mut node = Node::new("sysctl");
    // One tunable off the kubelet's value: protectKernelDefaults refuses
    // to start, in upstream's words...
    std::fs::write(MAXKEYS, "999999").unwrap();
    node.rk.add_config("protectKernelDefaults: true\n");
    node.start();
    let status = eventually("rkubelet refuses to start", START, async || {
        node.rk.exit_status()
    })
    .await;
    assert!(!status.success());
    let log = std::fs::read_to_string(node.rk.log()).unwrap();
    assert!(
        log.contains(
            "invalid kernel flag: kernel/keys/root_maxkeys, expected value: 1000000, actual value: 999999"
        ),
        "{log}"
    );
    assert_eq!(std::fs::read_to_string(MAXKEYS).unwrap().trim(), "999999");
    // ...and by default rkubelet sets it, as upstream does.
    let text = std::fs::read_to_string(node.rk.config()).unwrap();
    std::fs::write(
        node.rk.config(),
        text.replace(
            "protectKernelDefaults: true",
            "protectKernelDefaults: false",
        ),
    )
    .unwrap();
    node.start();
    eventually("the tunable is set", START, async || {
        let v = std::fs::read_to_string(MAXKEYS).ok()?;
        (v.trim() == "1000000").then_some(())
    })
    .await;
    node.rk.assert_alive();
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn kill_9_and_restart_adopts_pods_and_cleans_up_removed_ones() {
    let mut node = Node::new("crash");
    node.write(
        "keep.yaml",
        &pod("keep", &[("a", SLEEPER), ("b", SLEEPER)], ""),
    );
    node.write("gone.yaml", &pod("gone", &[("g", SLEEPER)], ""));
    node.start();
    eventually("keep's a and b and gone's g run", START, async || {
        node.running("keep", "a").await?;
        node.running("keep", "b").await?;
        node.running("gone", "g").await
    })
    .await;
    let mut keep_containers: Vec<_> = node
        .pod_containers("keep")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    keep_containers.sort();
    let keep_sandbox = node.pod_sandboxes("keep").await.unwrap();
    assert_eq!(keep_sandbox.len(), 1);
    let keep_uid = label(&keep_sandbox[0].labels, POD_UID).to_owned();
    let gone_sandbox = node.pod_sandboxes("gone").await.unwrap();
    let gone_uid = label(&gone_sandbox[0].labels, POD_UID).to_owned();
    let keep_sandbox = keep_sandbox[0].id.clone();
    let besteffort = node.rk.cgroups.dir("memory").join("kubepods/besteffort");
    let pod_cgroup = |uid: &str| besteffort.join(format!("pod{uid}"));
    assert!(pod_cgroup(&gone_uid).is_dir(), "gone has its cgroup");

    node.rk.kill9();
    node.remove("gone.yaml");
    node.start();
    eventually(
        "gone's pod is removed after the restart",
        CLEANUP,
        async || {
            let cs = node.pod_containers("gone").await?;
            let sbs = node.pod_sandboxes("gone").await?;
            (cs.is_empty() && sbs.is_empty() && !pod_cgroup(&gone_uid).exists()).then_some(())
        },
    )
    .await;
    assert!(pod_cgroup(&keep_uid).is_dir(), "keep's cgroup is kept");
    consistently(
        "keeping keep's sandbox and containers",
        Duration::from_secs(5),
        async || {
            let sbs = node.sandboxes().await.ok_or("ListPodSandbox failed")?;
            let ids: Vec<_> = sbs.iter().map(|s| s.id.as_str()).collect();
            if ids != [keep_sandbox.as_str()] || !is_ready(&sbs[0]) {
                return Err(format!("sandboxes {sbs:?}"));
            }
            let cs = node.containers().await.ok_or("ListContainers failed")?;
            let mut ids: Vec<_> = cs.iter().map(|c| c.id.clone()).collect();
            ids.sort();
            if ids != keep_containers {
                return Err(format!("containers {ids:?}, before {keep_containers:?}"));
            }
            if let Some(c) = cs
                .iter()
                .find(|c| !is_running(c) || restart_count(c) != "0")
            {
                return Err(format!("container {c:?}"));
            }
            Ok(())
        },
    )
    .await;
    node.rk.assert_alive();
    node.finish().await;
}

/// The cgroup `pid` is in, as upstream's getContainer reads it.
fn cgroup_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let unified = kubelet::cm::HostCgroups::detect()
        .layout
        .is_some_and(|l| l.version() == 2);
    kubelet_core::cgroups::process_cgroup(&text, unified).unwrap()
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn kubelet_cgroups_holds_rkubelet() {
    let mut node = Node::new("kubeletcg");
    let cgroup = format!("{}/kubelet", node.rk.cgroups.name);
    node.rk.add_config(&format!("kubeletCgroups: {cgroup}\n"));
    node.write("p.yaml", &pod("p", &[("a", SLEEPER)], ""));
    node.start();
    eventually("the pod's container runs", START, async || {
        node.running("p", "a").await
    })
    .await;
    // Made and moved into at start, in every hierarchy (v1: cpu, memory
    // and name=systemd agree, or the read above fails).
    assert_eq!(cgroup_of(node.rk.pid()), cgroup);
    let procs = cgroup_procs(&node.rk.cgroups.dir("memory").join("kubelet"));
    assert_eq!(procs, [node.rk.pid().to_string()], "only rkubelet is in it");
    node.finish().await;
}

/// systemCgroups, on a root of the test's own (the real one holds every
/// process of this machine): what is left in it but PID 1 and kernel
/// threads is moved, the system container made first.
#[test]
#[ignore = "needs the host's cgroups: run through hack/test.sh"]
fn system_cgroups_take_the_roots_processes() {
    use kubelet::cm::{Cgroupfs, HostCgroups, SystemContainers};
    use kubelet_core::cgroups::CgroupName;
    let cgroups = common::CgroupRoot::new(&format!("rk-e2e-system-{}", std::process::id()));
    let host = HostCgroups::detect();
    let fs = Cgroupfs::new(host.layout.clone().unwrap(), Vec::new());
    let root = CgroupName::parse_cgroupfs(&format!("{}/root", cgroups.name));
    fs.make(&root).unwrap();
    let mut sleeper = Command::new("sleep").arg("600").spawn().unwrap();
    fs.add_process(&root, sleeper.id() as i32).unwrap();
    assert_eq!(fs.own_pids(&root).unwrap(), [sleeper.id() as i32]);
    let system = format!("{}/system", cgroups.name);
    let config = kubelet_core::config::KubeletConfiguration {
        system_cgroups: system.clone(),
        cgroup_root: "/".into(),
        ..Default::default()
    };
    let containers = SystemContainers::with_root(&config, &host, root.clone());
    let errors = containers.ensure_now();
    let moved = cgroup_of(sleeper.id());
    let left = fs.own_pids(&root).unwrap();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    // (This test's own cgroup may be unreadable as the kubelet's, when its
    // cpu and memory hierarchies differ: that is reported, not a failure.)
    assert!(
        errors
            .iter()
            .all(|e| e.starts_with("Failed to find cgroups of kubelet")),
        "{errors:?}"
    );
    assert_eq!(moved, system);
    assert_eq!(left, Vec::<i32>::new());
    // Made with no limits of its own (a systemd slice keeps its values):
    // no hugetlb limit of 0 on what is moved into it.
    let hugetlb = match &host.layout {
        Some(kubelet_core::cgroups::CgroupLayout::V1 { mounts }) => mounts.get("hugetlb"),
        _ => None,
    };
    let hugetlb = hugetlb.map(|m| m.join(format!("{}/system", &cgroups.name[1..])));
    for e in hugetlb
        .iter()
        .flat_map(std::fs::read_dir)
        .flatten()
        .flatten()
    {
        let file = e.file_name().to_string_lossy().into_owned();
        if file.starts_with("hugetlb.") && file.ends_with(".limit_in_bytes") {
            let v = std::fs::read_to_string(e.path()).unwrap();
            assert_ne!(v.trim(), "0", "{file}");
        }
    }
    let named = containers.stats_cgroups();
    assert!(
        named.contains(&("misc", CgroupName::parse_cgroupfs(&system))),
        "{named:?}"
    );
}

/// Every process in `dir` and the cgroups below it.
fn cgroup_procs(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(cgroup_procs(&e.path()));
        }
    }
    out
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn a_pod_runs_in_its_own_cgroup_which_goes_with_it() {
    let mut node = Node::new("cgroups");
    let script = serde_json::to_string(SLEEPER).unwrap();
    node.write(
        "g.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: g\nspec:\n  \
             terminationGracePeriodSeconds: 5\n  containers:\n  - name: c\n    image: {IMAGE}\n    \
             imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script}]\n    \
             resources: {{limits: {{cpu: 250m, memory: 48Mi}}}}\n"
        ),
    );
    node.start();
    let container = eventually("g runs", START, async || node.running("g", "c").await).await;
    let sandbox = node.pod_sandboxes("g").await.unwrap();
    let uid = label(&sandbox[0].labels, POD_UID).to_owned();
    // Guaranteed: right under kubepods, with upstream's values.
    let pod_dir = |c: &str| node.rk.cgroups.dir(c).join(format!("kubepods/pod{uid}"));
    let read = |c: &str, f: &str| {
        std::fs::read_to_string(pod_dir(c).join(f))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    assert_eq!(read("cpu", "cpu.shares"), "256");
    assert_eq!(read("cpu", "cpu.cfs_quota_us"), "25000");
    assert_eq!(read("memory", "memory.limit_in_bytes"), "50331648");
    // The sandbox's and the container's processes are in it.
    let procs = cgroup_procs(&pod_dir("memory"));
    assert!(procs.len() >= 2, "processes in the pod cgroup: {procs:?}");
    // memorySwap's default, NoSwap, where the host accounts swap (v1's
    // memsw): memory and swap together are held to the memory limit.
    let memsw = pod_dir("memory")
        .join(&container.id)
        .join("memory.memsw.limit_in_bytes");
    if node
        .rk
        .cgroups
        .dir("memory")
        .join("memory.memsw.limit_in_bytes")
        .exists()
    {
        let limit = std::fs::read_to_string(&memsw).unwrap_or_default();
        assert_eq!(limit.trim(), "50331648", "{}", memsw.display());
    }
    node.remove("g.yaml");
    eventually("the pod cgroup is gone", CLEANUP, async || {
        ["cpu", "memory", "pids"]
            .iter()
            .all(|c| !pod_dir(c).exists())
            .then_some(())
    })
    .await;
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn crash_loop_back_off_stops_at_max_container_restart_period() {
    // With the default (10 s, then 20 s...) a container that exits at once
    // starts 3 times in 20 s; with a 2 s maximum, many more.
    let mut node = Node::new("crashmax");
    node.rk
        .add_config("crashLoopBackOff:\n  maxContainerRestartPeriod: 2s\n");
    node.write("c.yaml", &pod("c", &[("crash", "exit 1")], ""));
    node.start();
    let started = Instant::now();
    let attempts = eventually(
        "the 6th start of the crashing container",
        START,
        async || {
            let cs = node.pod_containers("c").await?;
            let most = cs
                .iter()
                .filter_map(|c| c.metadata.as_ref().map(|m| m.attempt))
                .max()?;
            (most >= 5).then_some(most)
        },
    )
    .await;
    eprintln!(
        "MEASURED: {} restarts in {:.1}s with maxContainerRestartPeriod 2s",
        attempts,
        started.elapsed().as_secs_f64()
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    node.finish().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn exit_codes_and_restart_policies() {
    let mut node = Node::new("exit");
    node.write(
        "never.yaml",
        &pod("never", &[("fail", "exit 3")], "  restartPolicy: Never\n"),
    );
    node.write(
        "always.yaml",
        &pod("always", &[("crash", "echo crashing; sleep 1; exit 1")], ""),
    );
    node.start();

    let fail = eventually("never's container exited", START, async || {
        let cs = node.pod_containers("never").await?;
        cs.into_iter()
            .find(|c| c.state == cri::ContainerState::ContainerExited as i32)
    })
    .await;
    let status = node.rk.cri.container_status(&fail.id).await.unwrap();
    assert_eq!(status.exit_code, 3, "exit code of `exit 3`: {status:?}");
    eventually("never's sandbox is stopped", START, async || {
        let sbs = node.pod_sandboxes("never").await?;
        (sbs.len() == 1 && !is_ready(&sbs[0])).then_some(())
    })
    .await;

    eventually(
        "always's container restarted (restartCount 1)",
        START,
        async || {
            let cs = node.pod_containers("always").await?;
            cs.iter().any(|c| restart_count(c) == "1").then_some(())
        },
    )
    .await;
    eventually(
        "always's container restarted again (restartCount 2)",
        START,
        async || {
            let cs = node.pod_containers("always").await?;
            cs.iter().any(|c| restart_count(c) == "2").then_some(())
        },
    )
    .await;
    let always_sbs = node.pod_sandboxes("always").await.unwrap();
    assert_eq!(
        always_sbs.len(),
        1,
        "always keeps one sandbox: {always_sbs:?}"
    );

    // By now never's pod has been looked at many times: still one container.
    let cs = node.pod_containers("never").await.unwrap();
    assert_eq!(cs.len(), 1, "never's container not restarted: {cs:?}");
    assert_eq!(cs[0].id, fail.id);
    assert_eq!(restart_count(&cs[0]), "0");
    node.finish().await;
}

/// A container over its memory limit is killed by the kernel: the runtime
/// reports OOMKilled (exit code 137), and the OOM watcher reads the kill
/// from the kernel log, with the container's memory cgroup.
#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn a_container_over_its_memory_limit_is_oom_killed_and_seen() {
    let mut node = Node::new("oom");
    let mut manifest = pod(
        "oom",
        &[("hog", "x=0123456789; while true; do x=$x$x; done")],
        "  restartPolicy: Never\n",
    );
    manifest.push_str("    resources:\n      limits:\n        memory: 24Mi\n");
    node.write("oom.yaml", &manifest);
    node.start();
    let hog = eventually("the hog exited", START, async || {
        let cs = node.pod_containers("oom").await?;
        cs.into_iter()
            .find(|c| c.state == cri::ContainerState::ContainerExited as i32)
    })
    .await;
    let status = node.rk.cri.container_status(&hog.id).await.unwrap();
    assert_eq!(
        (status.reason.as_str(), status.exit_code),
        ("OOMKilled", 137),
        "{status:?}"
    );
    let log = node.rk.log();
    eventually("the OOM watcher logged the kill", START, async || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines()
            .any(|l| l.contains("OOM kill") && l.contains(&hog.id))
            .then_some(())
    })
    .await;
    node.finish().await;
}

/// containerd is down from `stop` until `start` (or drop, so that a failing
/// test does not leave the runtime down for the cleanup and the next run).
struct Containerd {
    dir: PathBuf,
    down: bool,
}

impl Containerd {
    fn pid(&self) -> u32 {
        let s = std::fs::read_to_string(self.dir.join("containerd.pid")).unwrap();
        s.trim().parse().unwrap()
    }

    async fn stop(&mut self) {
        let pid = self.pid();
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM containerd ({pid})");
        self.down = true;
        eventually("containerd exited", Duration::from_secs(30), async || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
            let gone = stat.is_none_or(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z'))
            });
            gone.then_some(())
        })
        .await;
    }

    fn start(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/containerd.sh");
        let mut cmd = Command::new(script);
        cmd.arg("start").arg(&self.dir).stdin(Stdio::null());
        // `start` rewrites the CNI config from these: keep this DIR's values.
        if let Some((bridge, subnet)) = self.network() {
            cmd.env("RKUBELET_CNI_BRIDGE", bridge)
                .env("RKUBELET_POD_SUBNET", subnet);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "hack/containerd.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.down = false;
    }

    /// Bridge and subnet of this containerd's CNI config.
    fn network(&self) -> Option<(String, String)> {
        let conf = std::fs::read_to_string(self.dir.join("cni/10-rkubelet.conflist")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&conf).ok()?;
        let bridge = v["plugins"][0]["bridge"].as_str()?.to_owned();
        let subnet = v["plugins"][0]["ipam"]["ranges"][0][0]["subnet"]
            .as_str()?
            .to_owned();
        Some((bridge, subnet))
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.down {
            self.start();
        }
    }
}

/// Keep this one last (libtest runs tests in name order, hence `zz_`): it
/// stops the shared containerd for 20 s.
#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn zz_containerd_outage_is_survived() {
    let runtime_dir = std::env::var("RKUBELET_E2E_RUNTIME_DIR")
        .expect("RKUBELET_E2E_RUNTIME_DIR (the hack/containerd.sh DIR) must be set");
    let mut node = Node::new("outage");
    node.write("old.yaml", &pod("old", &[("a", SLEEPER)], ""));
    node.start();
    let old = eventually("old's container runs", START, async || {
        node.running("old", "a").await
    })
    .await;

    // Declared after `node`, so dropped first: containerd is back before
    // the node's cleanup needs it.
    let mut containerd = Containerd {
        dir: PathBuf::from(runtime_dir),
        down: false,
    };
    containerd.stop().await;
    node.write("new.yaml", &pod("new", &[("b", SLEEPER)], ""));
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(20) {
        node.rk.assert_alive();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    containerd.start();
    eprintln!("containerd back");
    node.rk.assert_alive();

    eventually(
        "the pod written during the outage runs",
        Duration::from_secs(90),
        async || node.running("new", "b").await,
    )
    .await;
    let now = node
        .running("old", "a")
        .await
        .expect("old's container runs");
    assert_eq!(now.id, old.id, "old's container survived the outage");
    assert_eq!(restart_count(&now), "0");
    let sbs = node.pod_sandboxes("old").await.unwrap();
    assert_eq!(sbs.len(), 1, "old keeps one sandbox: {sbs:?}");
    assert_eq!(sbs[0].id, old.pod_sandbox_id);
    node.rk.assert_alive();
    node.finish().await;
    drop(containerd);
}

/// Image GC against a real containerd whose image file system is small
/// (root/ a 64 MiB tmpfs, from hack/test.sh): filled past
/// imageGCHighThresholdPercent, the collector keeps the image a running
/// container uses and the sandbox image, says it fell short with
/// upstream's FreeDiskSpaceFailed event, and removes the image once no
/// container uses it. The collector is run directly: its five-minute
/// period (upstream's) is tested on paused time in the kubelet crate.
#[tokio::test]
#[ignore = "needs a real containerd: run through hack/test.sh"]
async fn image_gc_frees_a_full_image_file_system() {
    use std::sync::Arc;

    use kubelet::clock::Clock;
    use kubelet::events::Recorder;
    use kubelet::imagegc::ImageGcManager;
    use kubelet::pullmanager::PullManager;
    use kubelet_core::imagegc::Policy;
    use kubelet_core::metrics::KubeletMetrics;

    let dir = PathBuf::from(std::env::var("RKUBELET_E2E_SMALL_FS_DIR").expect(
        "RKUBELET_E2E_SMALL_FS_DIR (a hack/containerd.sh DIR with RKUBELET_IMAGE_FS_SIZE) must be set: run through hack/test.sh",
    ));
    let image_fs = dir.join("root");
    let cri = CriClient::connect_lazy(
        &format!("unix://{}", dir.join("containerd.sock").display()),
        CRI_TIMEOUT,
    )
    .unwrap();
    let tags = || async {
        let mut t: Vec<String> = cri
            .list_images()
            .await
            .unwrap()
            .into_iter()
            .flat_map(|i| i.repo_tags)
            .collect();
        t.sort();
        t
    };
    let before = tags().await;
    assert!(before.iter().any(|t| t.ends_with(IMAGE)), "{before:?}");

    // A container from the test image, in a host-network sandbox (no CNI).
    let uid = unique_node("gc");
    let sandbox = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "gc".into(),
            uid: uid.clone(),
            namespace: "e2e".into(),
            attempt: 0,
        }),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sb = cri
        .run_pod_sandbox(sandbox.clone(), String::new())
        .await
        .unwrap();
    let config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "c".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["sh".into(), "-c".into(), SLEEPER.into()],
        ..Default::default()
    };
    let id = cri
        .create_container(&sb, config, sandbox.clone())
        .await
        .unwrap();
    cri.start_container(&id).await.unwrap();

    // Fill the file system to 92 %: over the high threshold of 85.
    let filler = image_fs.join("filler");
    let st = rustix::fs::statvfs(&image_fs).unwrap();
    let (capacity, free) = (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize);
    let fill = (free as i64 - (capacity as i64 * 8 / 100)).max(0) as usize;
    std::fs::write(&filler, vec![1u8; fill]).unwrap();

    let (events, mut rx) = Recorder::with_queue("n".into(), Clock::System);
    let records = tempfile::tempdir().unwrap();
    let gc = ImageGcManager::new(
        cri.clone(),
        Policy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::ZERO,
            max_age: Duration::ZERO,
        },
        Arc::new(PullManager::open(
            records.path(),
            Default::default(),
            KubeletMetrics::new("n"),
            Clock::System,
        )),
        events,
        Clock::System,
    );
    assert_eq!(gc.collect().await.unwrap(), 0, "the image in use stays");
    assert_eq!(tags().await, before);
    let event = rx.try_recv().expect("a FreeDiskSpaceFailed event");
    assert_eq!(event.reason.as_deref(), Some("FreeDiskSpaceFailed"));
    let message = event.message.unwrap_or_default();
    assert!(
        message.starts_with("Insufficient free disk space on the node's image filesystem (9")
            && message.contains("% of 64.0 MiB used). Failed to free sufficient space by deleting unused images (freed 0 bytes)."),
        "{message}"
    );

    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod_sandbox(&sb).await.unwrap();
    cri.remove_pod_sandbox(&sb).await.unwrap();
    assert_eq!(gc.collect().await.unwrap(), 1, "unused now");
    let after = tags().await;
    assert!(!after.iter().any(|t| t.ends_with(IMAGE)), "{after:?}");
    assert!(
        after.iter().any(|t| t.contains("pause")),
        "the sandbox image stays: {after:?}"
    );
    std::fs::remove_file(&filler).unwrap();
}
