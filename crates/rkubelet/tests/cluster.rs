//! Cluster tests: the rkubelet binary joins a real, hardened control plane
//! (`hack/cluster.sh`: etcd, kube-apiserver with Node,RBAC authorization and
//! NodeRestriction, controller-manager, scheduler) and runs its pods on a
//! real containerd. The API is driven with kubectl, the runtime is inspected
//! through the CRI. Run them through `hack/test.sh`, or by hand:
//!
//! ```text
//! RKUBELET_CLUSTER_DIR=DIR RKUBELET_CLUSTER_NODE=NODE RKUBELET_KUBECTL=.../kubectl \
//! RKUBELET_E2E_ENDPOINT=unix://.../containerd.sock \
//!   cargo test -p rkubelet --test cluster -- --ignored --test-threads=1
//! ```
//!
//! where DIR holds a control plane from `hack/cluster.sh up NODE`. Every test
//! runs its own rkubelet (always as NODE, with its own root, log and manifest
//! directories), labels what it creates with `rkubelet-cluster-test`, deletes
//! it from the API and waits until it is gone from the API and the runtime,
//! then stops rkubelet with SIGTERM. A failing test still deletes its objects,
//! kills its rkubelet, removes its sandboxes (the `Kubelet` drop guard) and
//! prints rkubelet's log. Tests run in name order; the one that stops the
//! API server is `zz_` so it runs last.

#![allow(
    clippy::too_many_lines,
    reason = "each test is a scenario against a real cluster, read top to bottom"
)]
use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use kubelet_cri::v1 as cri;
use serde_json::{Value, json};

mod common;
use common::process::{KUBELET_PORT, Rkubelet};
use common::runtime::{CRI_TIMEOUT, Labels, POD_NAME, POD_UID, RESTART_COUNT, cleanup_runtime};
use common::{POLL, consistently, eventually, release_mounts};
#[path = "common/kubectl.rs"]
mod kubectl;
use kubectl::spawn_kubectl;

const IMAGE: &str = "rkubelet.test/busybox:1";
/// Every object a test creates carries this label (pods and sandboxes too).
const TEST_LABEL: &str = "rkubelet-cluster-test";
/// Runs until SIGTERM, which it honours at once.
const SLEEPER: &str = "trap 'exit 0' TERM; sleep 3600 & wait";
/// Node registered and Ready after rkubelet starts (the target).
/// How long the node may take to become Ready before the test gives up (a
/// bound, not a target: the time taken is printed as MEASURED).
const NODE_READY: Duration = Duration::from_secs(60);
/// Node Ready again in the tests that do not measure it.
const READY_AGAIN: Duration = Duration::from_secs(30);
/// Pods scheduled, started and reported, on a loaded 2-core machine.
const START: Duration = Duration::from_secs(60);
/// Deleted pods gone from the API and the runtime. Usually a second or two,
/// but after an API server outage rkubelet's pod watch may take up to a
/// minute to reconnect (its retry backoff grew during the outage).
const CLEANUP: Duration = Duration::from_secs(120);
/// How long the API server stays down in the outage test.
const OUTAGE: Duration = Duration::from_secs(30);

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set: run through hack/test.sh"))
}

/// `SystemTime` as RFC 3339, comparable with API timestamps as strings (on
/// their first 19 characters).
fn rfc3339(t: SystemTime) -> String {
    kubelet_core::timefmt::rfc3339_nanos(t)
}

/// API timestamp `ts` is at or after `since` (an `rfc3339` string).
fn not_before(ts: &str, since: &str) -> bool {
    ts.len() >= 19 && ts[..19] >= since[..19]
}

#[test]
fn timestamps_compare_by_the_second() {
    assert!(not_before(
        "2026-11-18T08:26:40.123456Z",
        "2026-11-18T08:26:40Z"
    ));
    assert!(!not_before("2026-11-18T08:26:39Z", "2026-11-18T08:26:40Z"));
    assert!(rfc3339(SystemTime::now()).len() >= 20);
}

// ---------------------------------------------------------------------------
// the API, through kubectl

/// The control plane of `hack/cluster.sh`, driven through kubectl.
struct Api {
    dir: PathBuf,
    node: String,
    kubectl: PathBuf,
}

impl Api {
    fn from_env() -> Api {
        Api {
            dir: PathBuf::from(env("RKUBELET_CLUSTER_DIR")),
            node: env("RKUBELET_CLUSTER_NODE"),
            kubectl: PathBuf::from(env("RKUBELET_KUBECTL")),
        }
    }

    fn admin_conf(&self) -> PathBuf {
        self.dir.join("admin.conf")
    }

    fn node_conf(&self) -> PathBuf {
        self.dir.join(format!("kubelet-{}.conf", self.node))
    }

    /// Start kubectl with `kubeconfig`, `stdin` written to it and closed.
    fn spawn_as(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Child {
        spawn_kubectl(&self.kubectl, kubeconfig, args, stdin)
    }

    /// kubectl with `kubeconfig`; never fails the test itself.
    fn run_as(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let mut all = vec!["--request-timeout=15s"];
        all.extend_from_slice(args);
        self.spawn_as(kubeconfig, &all, stdin)
            .wait_with_output()
            .expect("running kubectl")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_as(&self.admin_conf(), args, None)
    }

    /// kubectl as admin; fails the test unless it succeeds.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Create `obj` as admin.
    fn create(&self, obj: &Value) {
        let out = self.run_as(
            &self.admin_conf(),
            &["create", "-f", "-"],
            Some(&obj.to_string()),
        );
        assert!(
            out.status.success(),
            "kubectl create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl get ... -o json`; `None` when kubectl fails (e.g. the API
    /// server is down, or the object does not exist).
    fn get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let out = self.run(&a);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Pods with label `app=<app>` (none when the API does not answer).
    fn pods(&self, app: &str) -> Option<Vec<Value>> {
        let list = self.get(&["pods", "-n", "default", "-l", &format!("app={app}")])?;
        list["items"].as_array().cloned()
    }

    fn pod(&self, name: &str) -> Option<Value> {
        self.get(&["pod", "-n", "default", name])
    }

    fn node_obj(&self) -> Option<Value> {
        self.get(&["node", &self.node])
    }

    /// The node's Ready condition, as the API has it.
    fn ready_condition(&self) -> Option<Value> {
        let node = self.node_obj()?;
        node["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
    }

    /// The node's Ready condition is True and was reported at or after `since`.
    fn node_ready_since(&self, since: &str) -> Option<Value> {
        let ready = self.ready_condition()?;
        let fresh = ready["lastHeartbeatTime"]
            .as_str()
            .is_some_and(|t| not_before(t, since));
        (ready["status"] == "True" && fresh).then_some(ready)
    }

    /// The node lease was renewed at or after `since`.
    fn lease_renewed_since(&self, since: &str) -> bool {
        self.get(&["lease", "-n", "kube-node-lease", &self.node])
            .and_then(|l| l["spec"]["renewTime"].as_str().map(str::to_owned))
            .is_some_and(|t| not_before(&t, since))
    }

    /// Delete the test's deployments (their pods go by cascade), its
    /// ConfigMaps, Secrets and Services and its other pods, without waiting.
    fn delete_labelled(&self) {
        let _ = self.run(&[
            "delete",
            "statefulsets,deployments,configmaps,secrets,services,persistentvolumeclaims",
            "-n",
            "default",
            "-l",
            TEST_LABEL,
            "--wait=false",
            "--ignore-not-found",
        ]);
        let _ = self.run(&[
            "delete",
            "persistentvolumes",
            "-l",
            TEST_LABEL,
            "--wait=false",
            "--ignore-not-found",
        ]);
        for p in self.labelled_pods().unwrap_or_default() {
            let owned = p["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|o| !o.is_empty());
            if !owned {
                let _ = self.run(&[
                    "delete",
                    "pod",
                    "-n",
                    "default",
                    name(&p),
                    "--wait=false",
                    "--ignore-not-found",
                ]);
            }
        }
    }

    fn labelled_pods(&self) -> Option<Vec<Value>> {
        let list = self.get(&["pods", "-n", "default", "-l", TEST_LABEL])?;
        list["items"].as_array().cloned()
    }
}

fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or("")
}

fn uid(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or("")
}

/// Running, with a pod IP, every container running, not being deleted.
/// A cgroup file's value, trimmed ("" when it cannot be read).
fn cgroup_value(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Patch the pod's `resize` subresource.
fn resize_pod(api: &Api, name: &str, patch: &Value) {
    api.ok(&[
        "patch",
        "pod",
        name,
        "-n",
        "default",
        "--subresource",
        "resize",
        "-p",
        &patch.to_string(),
    ]);
}

/// Whether the pod reports conditions and none of them is a resize
/// pending or in progress.
fn resize_settled(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        !cs.iter().any(|c| {
            c["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("PodResize"))
        })
    })
}

fn running_with_ip(pod: &Value) -> bool {
    let st = &pod["status"];
    let containers_run = st["containerStatuses"]
        .as_array()
        .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object()));
    pod["metadata"]["deletionTimestamp"].is_null()
        && st["phase"] == "Running"
        && st["podIP"].as_str().is_some_and(|ip| !ip.is_empty())
        && containers_run
}

/// Exactly `n` pods of `app`, all running with an IP.
fn n_running(api: &Api, app: &str, n: usize) -> Option<Vec<Value>> {
    let pods = api.pods(app)?;
    (pods.len() == n && pods.iter().all(running_with_ip)).then_some(pods)
}

/// (containerID, restartCount) of the pod's first container.
fn container_of(pod: &Value) -> (String, i64) {
    let c = &pod["status"]["containerStatuses"][0];
    (
        c["containerID"].as_str().unwrap_or("").to_owned(),
        c["restartCount"].as_i64().unwrap_or(-1),
    )
}

/// name -> (containerID, restartCount) of each pod.
fn containers_by_pod(pods: &[Value]) -> BTreeMap<String, (String, i64)> {
    pods.iter()
        .map(|p| (name(p).to_owned(), container_of(p)))
        .collect()
}

fn pod_spec() -> Value {
    json!({
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "main",
            "image": IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", SLEEPER],
        }],
    })
}

fn deployment(app: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": "default", "labels": {TEST_LABEL: "1"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app, TEST_LABEL: "1"}},
                "spec": pod_spec(),
            },
        },
    })
}

// ---------------------------------------------------------------------------
// rkubelet

/// One rkubelet child process joined to the cluster as the test node, with
/// its own directories. Dropping it without `finish` cleans up after a
/// failed test.
struct Kubelet {
    api: Api,
    rk: Rkubelet,
    finished: bool,
}

/// Labels of the pods `uids`.
fn of(uids: &HashSet<String>) -> impl Fn(&Labels) -> bool + '_ {
    |l| l.get(POD_UID).is_some_and(|u| uids.contains(u))
}

impl Kubelet {
    fn new(tag: &str) -> Kubelet {
        let api = Api::from_env();
        // The kubelet API trusts the cluster CA for client certificates
        // (the API server's), and cuts idle streams after 10 s.
        let rk = Rkubelet::new(
            &format!("rkubelet-cluster-{tag}-"),
            None,
            env("RKUBELET_E2E_ENDPOINT"),
            &format!(
                "streamingConnectionIdleTimeout: 10s\nclusterDomain: cluster.local\n\
                 authentication:\n  x509:\n    clientCAFile: {}\n",
                api.dir.join("pki/ca.crt").display()
            ),
        );
        eprintln!(
            "rkubelet as node {} in {}",
            api.node,
            rk.dir.path().display()
        );
        Kubelet {
            api,
            rk,
            finished: false,
        }
    }

    /// Replace the configuration's eviction settings (the evictionHard
    /// block) with `yaml`, for the next start.
    fn set_eviction(&self, yaml: &str) {
        let path = self.rk.config();
        let text = std::fs::read_to_string(&path).unwrap();
        let start = text.find("evictionHard:").unwrap();
        let end = start + text[start..].find("podLogsDir:").unwrap();
        std::fs::write(&path, format!("{}{yaml}{}", &text[..start], &text[end..])).unwrap();
    }

    /// The API pod's cgroup in the memory hierarchy, by its QoS class.
    fn pod_cgroup(&self, pod: &Value) -> PathBuf {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
        let class = match pod["status"]["qosClass"].as_str() {
            Some("Guaranteed") => String::new(),
            Some(c) => format!("{}/", c.to_lowercase()),
            None => panic!("no qosClass in {pod}"),
        };
        self.rk
            .cgroups
            .dir("memory")
            .join(format!("kubepods/{class}pod{uid}"))
    }

    /// Start (or restart) rkubelet; its output is appended to rkubelet.log.
    /// Returns the start time as an RFC 3339 string, for freshness checks.
    fn start(&mut self) -> String {
        let since = rfc3339(SystemTime::now());
        self.rk.start(&self.api.node, Some(&self.api.node_conf()));
        since
    }

    /// Start rkubelet and wait until the node reports Ready.
    async fn start_ready(&mut self) {
        let since = self.start();
        eventually("node Ready", READY_AGAIN, async || {
            self.api.node_ready_since(&since)
        })
        .await;
    }

    /// Sandboxes of the given pod UIDs (any state).
    async fn sandboxes_of(&self, uids: &HashSet<String>) -> Option<Vec<cri::PodSandbox>> {
        self.rk.sandboxes_where(of(uids)).await
    }

    /// Containers of the given pod UIDs (any state).
    async fn containers_of(&self, uids: &HashSet<String>) -> Option<Vec<cri::Container>> {
        self.rk.containers_where(of(uids)).await
    }

    /// Wait until the runtime holds nothing of the pods `uids`.
    async fn wait_runtime_clean(&self, what: &str, uids: &HashSet<String>) {
        self.rk.wait_runtime_clean(what, CLEANUP, of(uids)).await;
    }

    /// Delete what the test made in the API, wait until its pods are gone
    /// from the API and the runtime, then stop rkubelet with SIGTERM.
    async fn finish(mut self, uids: &HashSet<String>) {
        let mut statics = 0;
        for entry in std::fs::read_dir(self.rk.manifests()).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
            statics += 1;
        }
        if statics > 0 {
            // Static pods go by their manifests; rkubelet deletes their
            // mirror pods. (Deleting a mirror pod through the API while its
            // manifest goes leaves it Terminating: an rkubelet bug.)
            eventually(
                "the mirror pods are gone from the API",
                CLEANUP,
                async || {
                    let pods = self.api.labelled_pods()?;
                    let suffix = format!("-{}", self.api.node);
                    (!pods.iter().any(|p| name(p).ends_with(&suffix))).then_some(())
                },
            )
            .await;
        }
        self.api.delete_labelled();
        eventually(
            "the test's pods are gone from the API",
            CLEANUP,
            async || self.api.labelled_pods()?.is_empty().then_some(()),
        )
        .await;
        self.wait_runtime_clean("the test's pods are gone from the runtime", uids)
            .await;
        self.rk.assert_alive();
        self.rk.terminate().await;
        self.finished = true;
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if self.finished {
            release_mounts(self.rk.dir.path());
            return;
        }
        // Best effort, with rkubelet still running so it can stop the pods.
        if let Ok(entries) = std::fs::read_dir(self.rk.manifests()) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        self.api.delete_labelled();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if self.api.labelled_pods().is_some_and(|p| p.is_empty()) {
                break;
            }
            std::thread::sleep(POLL);
        }
        for p in self.api.labelled_pods().unwrap_or_default() {
            eprintln!(
                "left in the API: pod {} uid {} deletionTimestamp {} phase {}",
                name(&p),
                uid(&p),
                p["metadata"]["deletionTimestamp"],
                p["status"]["phase"]
            );
        }
        self.rk.kill_if_running();
        let _ = self.api.run(&[
            "delete",
            "pods",
            "-n",
            "default",
            "-l",
            TEST_LABEL,
            "--grace-period=0",
            "--force",
            "--wait=false",
            "--ignore-not-found",
        ]);
        self.rk.print_log_tail(&self.api.node);
        // Every sandbox labelled TEST_LABEL, and the containers of their pods.
        cleanup_runtime(self.rk.endpoint.clone(), |sandboxes, containers| {
            let sandboxes: Vec<_> = sandboxes
                .into_iter()
                .filter(|s| s.labels.contains_key(TEST_LABEL))
                .collect();
            let uids: HashSet<String> = sandboxes
                .iter()
                .filter_map(|s| s.labels.get(POD_UID).cloned())
                .collect();
            let containers = containers
                .into_iter()
                .filter(|c| of(&uids)(&c.labels))
                .collect();
            (sandboxes, containers)
        });
        release_mounts(self.rk.dir.path());
    }
}

fn uids_of(pods: &[Value]) -> HashSet<String> {
    pods.iter().map(|p| uid(p).to_owned()).collect()
}

// ---------------------------------------------------------------------------
// the tests

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn a_node_registers_and_becomes_ready() {
    let mut k = Kubelet::new("ready");
    // Fleet fields: the Node as registered, its Lease, its pod capacity.
    k.rk.add_config(
        "providerID: rkubelet-test:///zone-a/node-1\nnodeLeaseDurationSeconds: 20\npodsPerCore: 3\n\
         registerWithTaints: [{key: rkubelet.test/registered, value: \"yes\", effect: PreferNoSchedule}]\n",
    );
    let started = Instant::now();
    let since = k.start();
    let ready = eventually("node Ready", NODE_READY, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    let took = started.elapsed();
    eprintln!(
        "MEASURED: node {} Ready {:.2}s after rkubelet started ({ready})",
        k.api.node,
        took.as_secs_f64()
    );
    let node = k.api.node_obj().unwrap();
    assert!(
        k.api.lease_renewed_since(&since),
        "node lease renewed since start"
    );
    let addresses = node["status"]["addresses"].to_string();
    assert!(
        addresses.contains("InternalIP") || addresses.contains("Hostname"),
        "node has addresses: {addresses}"
    );
    // Allocatable: capacity less the hard eviction threshold (the harness's
    // memory.available 1Mi).
    let bytes = |v: &Value| {
        let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            v.as_str().unwrap_or("").to_owned(),
        );
        kubelet_core::quantity::parse_bytes(&q).unwrap()
    };
    let status = &node["status"];
    assert_eq!(
        bytes(&status["allocatable"]["memory"]),
        bytes(&status["capacity"]["memory"]) - (1 << 20),
        "{status}"
    );
    assert_eq!(status["allocatable"]["cpu"], status["capacity"]["cpu"]);
    assert_eq!(
        node["spec"]["providerID"], "rkubelet-test:///zone-a/node-1",
        "providerID at registration"
    );
    // (PreferNoSchedule: the later tests' pods still land on this node; the
    // node lifecycle controller may add its not-ready taint beside it)
    let taint =
        json!({"key": "rkubelet.test/registered", "value": "yes", "effect": "PreferNoSchedule"});
    assert!(
        node["spec"]["taints"]
            .as_array()
            .is_some_and(|t| t.contains(&taint)),
        "registerWithTaints: {}",
        node["spec"]
    );
    let cores: u64 = status["capacity"]["cpu"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        status["capacity"]["pods"],
        (3 * cores).min(110).to_string(),
        "podsPerCore 3 on {cores} cores"
    );
    let lease = k
        .api
        .get(&["lease", &k.api.node, "-n", "kube-node-lease"])
        .unwrap();
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 20, "{lease}");
    // oomScoreAdj's default: the kernel spares the kubelet, where rkubelet
    // may lower its score (CAP_SYS_RESOURCE); elsewhere it says it could not.
    let score = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", k.rk.pid())).unwrap();
    let log = std::fs::read_to_string(k.rk.log()).unwrap();
    assert!(
        score.trim() == "-999" || log.contains("could not set rkubelet's oom_score_adj to -999"),
        "oom_score_adj {score}"
    );
    k.finish(&HashSet::new()).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn b_deployment_rolls_out_scales_and_is_deleted() {
    let app = "cl-web";
    let mut k = Kubelet::new("deploy");
    k.start_ready().await;
    let mut seen = HashSet::new();

    k.api.create(&deployment(app, 3));
    let pods = eventually("3 pods Running with an IP", START, async || {
        n_running(&k.api, app, 3)
    })
    .await;
    seen.extend(uids_of(&pods));
    for p in &pods {
        let node = p["spec"]["nodeName"].as_str().unwrap_or("");
        assert_eq!(node, k.api.node, "{} bound to the test node", name(p));
        assert!(
            k.pod_cgroup(p).is_dir(),
            "{} runs in its pod cgroup",
            name(p)
        );
    }
    let first_cgroup = k.pod_cgroup(&pods[0]);

    // Events of one pod: the kubelet's Pulled, Created, Started.
    let first = name(&pods[0]).to_owned();
    let reasons = eventually("Pulled, Created, Started events", START, async || {
        let reasons: HashSet<String> = pod_events(&k.api, &first, None)?
            .iter()
            .filter_map(|e| e["reason"].as_str().map(str::to_owned))
            .collect();
        ["Pulled", "Created", "Started"]
            .iter()
            .all(|r| reasons.contains(*r))
            .then_some(reasons)
    })
    .await;
    eprintln!("events of {first}: {reasons:?}");

    k.api
        .ok(&["scale", "deployment", app, "-n", "default", "--replicas=5"]);
    let pods = eventually("5 pods Running with an IP", START, async || {
        n_running(&k.api, app, 5)
    })
    .await;
    seen.extend(uids_of(&pods));

    k.api
        .ok(&["scale", "deployment", app, "-n", "default", "--replicas=3"]);
    let pods = eventually("back to 3 pods Running", CLEANUP, async || {
        n_running(&k.api, app, 3)
    })
    .await;
    let kept = uids_of(&pods);
    let gone: HashSet<String> = seen.difference(&kept).cloned().collect();
    assert_eq!(gone.len(), 2, "2 pods scaled away: {gone:?}");
    k.wait_runtime_clean("the 2 scaled-away pods are gone from the runtime", &gone)
        .await;

    k.api
        .ok(&["delete", "deployment", app, "-n", "default", "--wait=false"]);
    eventually(
        "no pods of the deployment in the API",
        CLEANUP,
        async || k.api.pods(app)?.is_empty().then_some(()),
    )
    .await;
    k.wait_runtime_clean(
        "no sandboxes of the deployment's pods in the runtime",
        &seen,
    )
    .await;
    eventually("the pods' cgroups are gone", CLEANUP, async || {
        (!first_cgroup.exists()).then_some(())
    })
    .await;
    k.finish(&seen).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn c_static_pod_has_a_mirror_pod_that_comes_back() {
    let mut k = Kubelet::new("static");
    let manifest = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-static", "labels": {"app": "cl-static", TEST_LABEL: "1"}},
        "spec": pod_spec(),
    });
    std::fs::write(k.rk.manifests().join("static.json"), manifest.to_string()).unwrap();
    k.start_ready().await;
    let mirror_name = format!("cl-static-{}", k.api.node);

    let mirror = eventually("the mirror pod Running with an IP", START, async || {
        k.api.pod(&mirror_name).filter(running_with_ip)
    })
    .await;
    let annotations = &mirror["metadata"]["annotations"];
    assert!(
        annotations["kubernetes.io/config.mirror"].is_string(),
        "mirror annotation: {annotations}"
    );
    let owner = &mirror["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node", "owner: {owner}");
    assert_eq!(owner["name"], k.api.node.as_str(), "owner: {owner}");
    let first_uid = uid(&mirror).to_owned();
    let mirror_hash = annotations["kubernetes.io/config.mirror"].clone();
    // The static pod's own UID, as the runtime knows it.
    let static_uids: HashSet<String> =
        k.rk.cri
            .list_pod_sandbox(None)
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.labels.get(POD_NAME) == Some(&mirror_name))
            .filter_map(|s| s.labels.get(POD_UID).cloned())
            .collect();
    assert_eq!(static_uids.len(), 1, "one sandbox of the static pod");
    let running_ids = async || -> Vec<String> {
        let cs = k.containers_of(&static_uids).await.unwrap_or_default();
        cs.into_iter()
            .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
            .map(|c| c.id)
            .collect()
    };
    let before = running_ids().await;
    assert_eq!(before.len(), 1, "one running container of the static pod");

    k.api.ok(&[
        "delete",
        "pod",
        &mirror_name,
        "-n",
        "default",
        "--wait=false",
    ]);
    // The new mirror pod (new UID) gets the static pod's status again.
    let again = eventually(
        "a new mirror pod (new UID), Running with an IP",
        START,
        async || {
            k.api
                .pod(&mirror_name)
                .filter(|p| uid(p) != first_uid && p["metadata"]["deletionTimestamp"].is_null())
                .filter(running_with_ip)
        },
    )
    .await;
    assert_eq!(
        again["metadata"]["annotations"]["kubernetes.io/config.mirror"], mirror_hash,
        "the new mirror pod mirrors the same static pod"
    );
    let owner = &again["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node", "owner: {owner}");
    consistently(
        "the static pod's container untouched by the mirror pod's deletion",
        Duration::from_secs(3),
        async || {
            let now = running_ids().await;
            (now == before)
                .then_some(())
                .ok_or_else(|| format!("before {before:?}, now {now:?}"))
        },
    )
    .await;
    k.finish(&static_uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn d_kill9_and_restart_adopts_running_containers() {
    let app = "cl-adopt";
    let mut k = Kubelet::new("adopt");
    k.start_ready().await;
    k.api.create(&deployment(app, 2));
    let pods = eventually("2 pods Running with an IP", START, async || {
        n_running(&k.api, app, 2)
    })
    .await;
    let before = containers_by_pod(&pods);
    let seen = uids_of(&pods);

    k.rk.kill9();
    let since = k.start();
    eventually("node Ready after the restart", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    consistently(
        "the same containers with the same restart counts",
        Duration::from_secs(10),
        async || {
            let Some(pods) = k.api.pods(app) else {
                return Ok(());
            };
            let now = containers_by_pod(&pods);
            if now != before {
                return Err(format!("before {before:?}, now {now:?}"));
            }
            match pods.iter().find(|p| !running_with_ip(p)) {
                Some(p) => Err(format!("{} not running: {}", name(p), p["status"])),
                None => Ok(()),
            }
        },
    )
    .await;
    let containers = k.containers_of(&seen).await.unwrap();
    assert_eq!(
        containers.len(),
        2,
        "one container per pod in the runtime: {containers:?}"
    );
    k.finish(&seen).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn e_admission_refuses_out_of_cpu_and_sees_labels_added_later() {
    let mut k = Kubelet::new("outofcpu");
    k.start_ready().await;
    let mut spec = pod_spec();
    spec["nodeName"] = json!(k.api.node);
    spec["containers"][0]["resources"] = json!({"requests": {"cpu": "64"}});
    k.api.create(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-huge", "namespace": "default",
                     "labels": {"app": "cl-huge", TEST_LABEL: "1"}},
        "spec": spec,
    }));
    let pod = eventually("the pod Failed", START, async || {
        k.api
            .pod("cl-huge")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    let status = &pod["status"];
    assert_eq!(status["reason"], "OutOfcpu", "status: {status}");
    let message = status["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("Pod was rejected: Node didn't have enough resource: cpu"),
        "message: {message}"
    );
    let mut uids: HashSet<String> = [uid(&pod).to_owned()].into();
    let sbs = k.sandboxes_of(&uids).await.unwrap();
    assert!(sbs.is_empty(), "a rejected pod gets no sandbox: {sbs:?}");

    // Admission reads the Node as the API has it now: a label added after
    // registration admits a pod that selects it.
    let node = k.api.node.clone();
    k.api
        .ok(&["label", "node", &node, "rkubelet.test/added=later"]);
    let mut spec = pod_spec();
    spec["nodeName"] = json!(node);
    spec["nodeSelector"] = json!({"rkubelet.test/added": "later"});
    k.api.create(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-selects-label", "namespace": "default",
                     "labels": {"app": "cl-selects-label", TEST_LABEL: "1"}},
        "spec": spec,
    }));
    let pod = eventually(
        "the pod that selects the new label Running",
        START,
        async || {
            k.api.pod("cl-selects-label").filter(|p| {
                assert_ne!(p["status"]["phase"], "Failed", "rejected: {}", p["status"]);
                p["status"]["phase"] == "Running"
            })
        },
    )
    .await;
    uids.insert(uid(&pod).to_owned());
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn f_node_credentials_cannot_patch_another_node() {
    let mut k = Kubelet::new("authz");
    k.start_ready().await;
    let node_conf = k.api.node_conf();
    // Its own node: allowed.
    let own = k.api.run_as(
        &node_conf,
        &["get", "node", &k.api.node, "-o", "name"],
        None,
    );
    assert!(
        own.status.success(),
        "the node reads its own Node: {}",
        String::from_utf8_lossy(&own.stderr)
    );
    // Another node's status: forbidden.
    let patch = r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Hijacked","message":"hijacked"}]}}"#;
    let out = k.api.run_as(
        &node_conf,
        &[
            "patch",
            "node",
            "other-node",
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "patching another node's status must fail"
    );
    assert!(
        stderr.contains("Forbidden") || stderr.contains("forbidden"),
        "Forbidden: {stderr}"
    );
    eprintln!("as expected: {}", stderr.trim());
    k.finish(&HashSet::new()).await;
}

/// A bare pod of the test (label `app=<name>`), bound to the test node.
fn test_pod(api: &Api, name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["nodeName"] = json!(api.node);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"app": name, TEST_LABEL: "1"}},
        "spec": spec,
    })
}

/// Wait for pod `name` to be Failed, refused by admission with `reason`
/// and `message`; the pod.
async fn rejected(api: &Api, name: &str, reason: &str, message: &str) -> Value {
    let pod = eventually(&format!("{name} refused"), START, async || {
        api.pod(name).filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(pod["status"]["reason"], reason, "{pod}");
    assert_eq!(pod["status"]["message"], message, "{pod}");
    pod
}

/// A container of IMAGE running `script` under sh.
fn sh_container(name: &str, script: &str) -> Value {
    json!({
        "name": name,
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    })
}

/// The status of the named container (regular or init) of a pod.
fn container_status<'a>(pod: &'a Value, container: &str) -> &'a Value {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|k| pod["status"][*k].as_array())
        .flatten()
        .find(|c| c["name"] == container)
        .unwrap_or(&Value::Null)
}

fn condition<'a>(pod: &'a Value, kind: &str) -> &'a str {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
}

impl Kubelet {
    /// The running container `name` of pod `uid` in the runtime.
    async fn running_container(&self, uid: &str, name: &str) -> Option<cri::Container> {
        let uids: HashSet<String> = [uid.to_owned()].into();
        self.containers_of(&uids).await?.into_iter().find(|c| {
            c.state == cri::ContainerState::ContainerRunning as i32
                && c.metadata.as_ref().is_some_and(|m| m.name == name)
        })
    }

    /// When the newest instance of container `name` of pod `uid` finished.
    async fn finished_at(&self, uid: &str, name: &str) -> Option<i64> {
        let uids: HashSet<String> = [uid.to_owned()].into();
        let c = self
            .containers_of(&uids)
            .await?
            .into_iter()
            .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .max_by_key(|c| c.created_at)?;
        Some(self.rk.cri.container_status(&c.id).await.ok()?.finished_at)
    }

    /// Run a command in a running container through the CRI, as a user
    /// changing its files would.
    async fn exec(&self, uid: &str, name: &str, cmd: &[&str]) {
        let c = self
            .running_container(uid, name)
            .await
            .unwrap_or_else(|| panic!("{name} of {uid} is not running"));
        let out = self
            .rk
            .cri
            .exec_sync(
                &c.id,
                cmd.iter().map(|s| s.to_string()).collect(),
                CRI_TIMEOUT,
            )
            .await
            .unwrap();
        assert_eq!(out.exit_code, 0, "{cmd:?} in {name}: {out:?}");
    }
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn g_readiness_and_liveness_probes() {
    let mut k = Kubelet::new("probes");
    k.start_ready().await;
    let mut web = sh_container(
        "web",
        "mkdir -p /www && touch /tmp/alive && exec httpd -f -p 8080 -h /www",
    );
    web["ports"] = json!([{"name": "http", "containerPort": 8080}]);
    web["readinessProbe"] = json!({
        "httpGet": {"path": "/ready", "port": "http"},
        "periodSeconds": 1, "failureThreshold": 1,
    });
    web["livenessProbe"] = json!({
        "exec": {"command": ["cat", "/tmp/alive"]},
        "periodSeconds": 1, "failureThreshold": 2,
    });
    let spec = json!({"terminationGracePeriodSeconds": 2, "containers": [web]});
    k.api.create(&test_pod(&k.api, "cl-probe", spec));
    let pod = eventually("running, not ready: /ready is missing", START, async || {
        k.api.pod("cl-probe").filter(|p| {
            running_with_ip(p)
                && condition(p, "Ready") == "False"
                && container_status(p, "web")["started"] == true
        })
    })
    .await;
    let id = uid(&pod).to_owned();
    let uids: HashSet<String> = [id.clone()].into();

    k.exec(&id, "web", &["touch", "/www/ready"]).await;
    let ready = eventually("Ready once /ready is served", START, async || {
        let p = k.api.pod("cl-probe")?;
        (condition(&p, "Ready") == "True" && container_status(&p, "web")["ready"] == true)
            .then_some(p)
    })
    .await;
    // The reason and message it had while False are gone with it.
    for c in ready["status"]["conditions"].as_array().unwrap() {
        if c["status"] == "True" {
            assert!(
                c.get("reason").is_none() && c.get("message").is_none(),
                "{c}"
            );
        }
    }
    k.exec(&id, "web", &["rm", "/www/ready"]).await;
    eventually("not Ready once /ready is gone", START, async || {
        let p = k.api.pod("cl-probe")?;
        (condition(&p, "Ready") == "False" && condition(&p, "ContainersReady") == "False")
            .then_some(())
    })
    .await;

    k.exec(&id, "web", &["rm", "/tmp/alive"]).await;
    eventually("restarted by its liveness probe", START, async || {
        let p = k.api.pod("cl-probe")?;
        let c = container_status(&p, "web");
        (c["restartCount"] == 1 && c["state"]["running"].is_object()).then_some(())
    })
    .await;
    let reasons = eventually("Unhealthy and Killing events", START, async || {
        let items = pod_events(&k.api, "cl-probe", None)?;
        let unhealthy = items.iter().any(|e| {
            e["reason"] == "Unhealthy"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("Liveness probe failed:"))
        });
        let killing = items.iter().any(|e| {
            e["reason"] == "Killing"
                && e["message"] == "Container web failed liveness probe, will be restarted"
        });
        (unhealthy && killing).then_some(items.len())
    })
    .await;
    eprintln!("{reasons} events of cl-probe");
    k.api
        .ok(&["delete", "pod", "cl-probe", "-n", "default", "--wait=false"]);
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn h_crash_loop_backs_off_with_growing_delays() {
    let mut k = Kubelet::new("crashloop");
    k.start_ready().await;
    let spec = json!({"containers": [sh_container(
        "crash",
        "echo goodbye > /dev/termination-log; exit 3",
    )]});
    k.api.create(&test_pod(&k.api, "cl-crash", spec));
    let waiting = |p: &Value| {
        let w = &container_status(p, "crash")["state"]["waiting"];
        (w["reason"] == "CrashLoopBackOff").then(|| w["message"].as_str().unwrap_or("").to_owned())
    };
    let first = eventually("CrashLoopBackOff", START, async || {
        waiting(&k.api.pod("cl-crash")?)
    })
    .await;
    assert!(
        first.starts_with("back-off 10s restarting failed container=crash pod=cl-crash_default("),
        "{first}"
    );
    let pod = eventually(
        "a longer back-off after the next crash",
        START,
        async || {
            let p = k.api.pod("cl-crash")?;
            waiting(&p)
                .is_some_and(|m| m.starts_with("back-off 20s"))
                .then_some(p)
        },
    )
    .await;
    let c = container_status(&pod, "crash");
    let last = &c["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "{c}");
    assert_eq!(last["reason"], "Error", "{c}");
    assert_eq!(last["message"], "goodbye\n", "termination message: {c}");
    assert!(c["restartCount"].as_i64().unwrap_or(0) >= 2, "{c}");
    assert_eq!(pod["status"]["phase"], "Running");
    // The back-off is told again at every sync, as one Event counting up (upstream's
    // event correlator), not as an Event each time.
    let backoffs = eventually("one BackOff event counted twice", START, async || {
        let list = k.api.get(&[
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.name=cl-crash,reason=BackOff",
        ])?;
        let items = list["items"].as_array()?.clone();
        items
            .iter()
            .any(|e| e["count"].as_i64().unwrap_or(0) >= 2)
            .then_some(items)
    })
    .await;
    assert_eq!(backoffs.len(), 1, "{backoffs:?}");
    let uids: HashSet<String> = [uid(&pod).to_owned()].into();
    k.api
        .ok(&["delete", "pod", "cl-crash", "-n", "default", "--wait=false"]);
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn i_init_sidecar_pre_stop_and_active_deadline() {
    let mut k = Kubelet::new("lifecycle");
    k.start_ready().await;
    let mut side = sh_container("side", SLEEPER);
    side["restartPolicy"] = json!("Always");
    let mut main = sh_container("main", SLEEPER);
    main["lifecycle"] = json!({"preStop": {"exec": {"command":
        ["sh", "-c", "echo prestop-ran > /proc/1/fd/1"]}}});
    let spec = json!({
        "activeDeadlineSeconds": 15,
        "terminationGracePeriodSeconds": 10,
        "initContainers": [sh_container("init", "echo init-done"), side],
        "containers": [main],
    });
    k.api.create(&test_pod(&k.api, "cl-seq", spec));
    let pod = eventually("initialized and running", START, async || {
        k.api.pod("cl-seq").filter(running_with_ip)
    })
    .await;
    assert_eq!(condition(&pod, "Initialized"), "True");
    let init = container_status(&pod, "init");
    assert_eq!(init["state"]["terminated"]["reason"], "Completed", "{init}");
    let side = container_status(&pod, "side");
    assert!(
        side["state"]["running"].is_object() && side["started"] == true,
        "{side}"
    );
    let id = uid(&pod).to_owned();
    let uids: HashSet<String> = [id.clone()].into();

    let pod = eventually("Failed with DeadlineExceeded", START, async || {
        k.api
            .pod("cl-seq")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(
        pod["status"]["reason"], "DeadlineExceeded",
        "{}",
        pod["status"]
    );
    // The status turns Failed first; then main stops, then the sidecar.
    let (main_at, side_at) = eventually("main and the sidecar stopped", START, async || {
        let main = k.finished_at(&id, "main").await.filter(|t| *t > 0)?;
        let side = k.finished_at(&id, "side").await.filter(|t| *t > 0)?;
        Some((main, side))
    })
    .await;
    assert!(
        side_at >= main_at,
        "main stopped at {main_at}, the sidecar at {side_at}: the sidecar stops last"
    );
    // The preStop hook ran while main was still running: its line is in
    // main's log.
    let log =
        k.rk.dir
            .path()
            .join("logs")
            .join(format!("default_cl-seq_{id}"))
            .join("main/0.log");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains(" stdout F prestop-ran"),
        "{}: {text:?}",
        log.display()
    );
    k.api
        .ok(&["delete", "pod", "cl-seq", "-n", "default", "--wait=false"]);
    k.finish(&uids).await;
}

/// `kubectl` with a time limit (streams that should end but might not);
/// None when it did not finish in time.
fn kubectl_within(
    api: &Api,
    limit: Duration,
    args: &[&str],
    stdin: Option<&str>,
) -> Option<Output> {
    let mut child = api.spawn_as(&api.admin_conf(), args, stdin);
    let start = Instant::now();
    while start.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn j_kubectl_logs_exec_attach_port_forward_and_stats() {
    let mut k = Kubelet::new("kubeletapi");
    k.start_ready().await;
    let mut web = sh_container(
        "web",
        "mkdir -p /www && echo hello-from-web > /www/index.html && \
         for i in 1 2 3; do echo line-$i; done; exec httpd -f -p 8080 -h /www",
    );
    web["ports"] = json!([{"containerPort": 8080}]);
    let mut echo = sh_container("echo", "read line; echo got:$line; sleep 2");
    echo["stdin"] = json!(true);
    echo["stdinOnce"] = json!(true);
    let spec = json!({"terminationGracePeriodSeconds": 2, "containers": [web, echo]});
    k.api.create(&test_pod(&k.api, "cl-api", spec));
    let pod = eventually("running", START, async || {
        k.api.pod("cl-api").filter(running_with_ip)
    })
    .await;
    let uids: HashSet<String> = [uid(&pod).to_owned()].into();

    // kubectl logs, --tail, --timestamps.
    let logs = eventually("kubectl logs", START, async || {
        let out = k.api.run(&["logs", "cl-api", "-c", "web", "-n", "default"]);
        let text = stdout(&out);
        (out.status.success() && text.contains("line-3")).then_some(text)
    })
    .await;
    assert_eq!(logs, "line-1\nline-2\nline-3\n");
    let tail = k.api.ok(&["logs", "cl-api", "-c", "web", "--tail=1"]);
    assert_eq!(tail, "line-3\n");
    let stamped = k
        .api
        .ok(&["logs", "cl-api", "-c", "web", "--timestamps", "--tail=1"]);
    let (ts, line) = stamped.trim_end().split_once(' ').unwrap_or_default();
    assert!(
        ts.ends_with('Z') && ts.len() == 30 && line == "line-3",
        "{stamped:?}"
    );

    // kubectl exec: output, stdin, exit codes.
    let out = k.api.ok(&[
        "exec",
        "cl-api",
        "-c",
        "web",
        "--",
        "cat",
        "/www/index.html",
    ]);
    assert_eq!(out, "hello-from-web\n");
    let out = k.api.run_as(
        &k.api.admin_conf(),
        &[
            "exec",
            "-i",
            "cl-api",
            "-c",
            "web",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z; exit 3",
        ],
        Some("shout\n"),
    );
    assert_eq!(stdout(&out), "SHOUT\n");
    assert_eq!(out.status.code(), Some(3), "exit code propagated: {out:?}");

    // kubectl logs -f follows new lines.
    k.exec(
        uid(&pod),
        "web",
        &["sh", "-c", "echo line-4 > /proc/1/fd/1"],
    )
    .await;
    let followed = kubectl_within(
        &k.api,
        Duration::from_secs(5),
        &["logs", "-f", "cl-api", "-c", "web", "--tail=1"],
        None,
    );
    assert!(
        followed.is_none(),
        "logs -f keeps following a running container"
    );

    // kubectl attach: stdin reaches the container, its output comes back;
    // the session ends when the container does.
    let attached = kubectl_within(
        &k.api,
        Duration::from_secs(20),
        &["attach", "-i", "cl-api", "-c", "echo"],
        Some("hi\n"),
    )
    .expect("kubectl attach ends when stdin closes");
    assert!(stdout(&attached).contains("got:hi"), "{attached:?}");
    // The echo container exited and was restarted: --previous shows the run
    // that answered.
    let previous = eventually("kubectl logs --previous", START, async || {
        let out = k.api.run(&["logs", "cl-api", "-c", "echo", "--previous"]);
        let text = stdout(&out);
        (out.status.success() && text.contains("got:hi")).then_some(text)
    })
    .await;
    assert_eq!(previous, "got:hi\n");

    // kubectl port-forward to the busybox httpd.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut pf = Command::new(&k.api.kubectl)
        .arg("--kubeconfig")
        .arg(k.api.admin_conf())
        .args(["port-forward", "pod/cl-api", &format!("{port}:8080")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let page = eventually("a page through port-forward", START, async || {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        body.contains("hello-from-web").then_some(body)
    })
    .await;
    let _ = pf.kill();
    let _ = pf.wait();
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");

    // Metrics and stats through the API server's node proxy.
    let node = k.api.node.clone();
    let metrics = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/metrics"),
    ]);
    for family in [
        "kubelet_running_pods",
        "kubelet_pleg_relist_duration_seconds_bucket",
        "kubelet_runtime_operations_total",
        "kubelet_pod_worker_duration_seconds_count",
        "rest_client_requests_total",
        "process_resident_memory_bytes",
    ] {
        assert!(metrics.contains(family), "/metrics has {family}");
    }
    let summary: Value = eventually("stats of the pod", START, async || {
        let raw = k.api.run(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{node}/proxy/stats/summary"),
        ]);
        let v: Value = serde_json::from_slice(&raw.stdout).ok()?;
        let ours = v["pods"].as_array()?.iter().find(|p| {
            p["podRef"]["name"] == "cl-api"
                && p["containers"].as_array().is_some_and(|c| c.len() == 2)
        })?;
        // Each cgroup's reading is kept up to 15 s (SUMMARY_MAX_AGE, as
        // cAdvisor's housekeeping keeps its own): the pods' cgroup may have
        // been read before this pod grew, so its figure is awaited too.
        let ws = |c: &Value| c["memory"]["workingSetBytes"].as_u64().unwrap_or(0);
        let agree = ws(&v["node"]["systemContainers"][0]) >= ws(ours);
        agree.then_some(v)
    })
    .await;
    assert_eq!(summary["node"]["nodeName"], node.as_str());
    // The pod's figures come from its cgroups: the process count (which the
    // runtime's stats do not give) of its two containers, a working set.
    let pod = summary["pods"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["podRef"]["name"] == "cl-api"))
        .expect("cl-api in the summary");
    assert!(
        pod["process_stats"]["process_count"].as_u64().unwrap_or(0) >= 2,
        "{pod}"
    );
    assert!(
        pod["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0,
        "{pod}"
    );
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0
    );
    // The pods' cgroup as the `pods` system container, with the pod's
    // working set in its own (once both readings are as new: awaited
    // above) and room left under its limit.
    let system = &summary["node"]["systemContainers"][0];
    assert_eq!(system["name"], "pods", "{system}");
    let pods_ws = system["memory"]["workingSetBytes"].as_u64().unwrap_or(0);
    assert!(
        pods_ws >= pod["memory"]["workingSetBytes"].as_u64().unwrap_or(0),
        "{system}"
    );
    assert!(
        system["memory"]["availableBytes"].as_u64().unwrap_or(0) > 0,
        "{system}"
    );
    let resource = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/metrics/resource"),
    ]);
    assert!(
        resource.contains("container_cpu_usage_seconds_total{container=\"web\",namespace=\"default\",pod=\"cl-api\"}"),
        "{resource}"
    );

    // An exec that stays quiet past streamingConnectionIdleTimeout (10 s) is cut.
    let start = Instant::now();
    let idle = kubectl_within(
        &k.api,
        Duration::from_secs(40),
        &["exec", "cl-api", "-c", "web", "--", "sleep", "30"],
        None,
    )
    .expect("kubectl exec returns once the stream is cut");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(28),
        "the idle exec (sleep 30) is cut after the 10 s idle timeout, not before: {took:?} {idle:?}"
    );

    k.api
        .ok(&["delete", "pod", "cl-api", "-n", "default", "--wait=false"]);
    k.finish(&uids).await;
}

impl Kubelet {
    /// curl the kubelet API directly (no API server in between).
    fn curl(&self, cert: Option<&str>, path: &str) -> (u16, String) {
        let pki = self.api.dir.join("pki");
        let mut cmd = Command::new("curl");
        cmd.args(["-sk", "--path-as-is", "-o", "-", "-w", "\n%{http_code}"]);
        if let Some(name) = cert {
            cmd.arg("--cert")
                .arg(pki.join(format!("{name}.crt")))
                .arg("--key")
                .arg(pki.join(format!("{name}.key")));
        }
        let out = cmd
            .arg(format!("https://127.0.0.1:{KUBELET_PORT}{path}"))
            .output()
            .expect("running curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn k_kubelet_api_refuses_strangers_and_path_escapes() {
    let mut k = Kubelet::new("apisec");
    k.start_ready().await;
    let spec = json!({"terminationGracePeriodSeconds": 2,
                      "containers": [sh_container("main", "echo secret-free; sleep 3600")]});
    k.api.create(&test_pod(&k.api, "cl-sec", spec));
    let pod = eventually("running", START, async || {
        k.api.pod("cl-sec").filter(running_with_ip)
    })
    .await;
    let id = uid(&pod).to_owned();
    let uids: HashSet<String> = [id.clone()].into();

    for path in [
        "/pods",
        "/metrics",
        "/stats/summary",
        "/containerLogs/default/cl-sec/main",
        "/exec/default/cl-sec/main?command=id",
        "/healthz",
    ] {
        let (code, _) = k.curl(None, path);
        assert_eq!(code, 401, "no credentials on {path}");
    }
    // A node's certificate authenticates, but RBAC gives nodes no
    // nodes/proxy: 403 with upstream's body.
    let (code, body) = k.curl(Some("node-other"), "/pods");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.starts_with("Forbidden (user=system:node:other"),
        "{body}"
    );
    // The API server's client (system:masters) is allowed.
    let admin = Some("apiserver-kubelet-client");
    let (code, body) = k.curl(admin, "/containerLogs/default/cl-sec/main");
    assert_eq!((code, body.as_str()), (200, "secret-free\n"));
    for escape in [
        "/containerLogs/default/../../../etc/passwd",
        "/containerLogs/default/cl-sec/..%2f..%2f..%2fetc%2fpasswd",
        "/containerLogs/%2e%2e/%2e%2e/passwd",
        "/containerLogs//etc/passwd/main",
    ] {
        let (code, body) = k.curl(admin, escape);
        assert!(!body.contains("root:"), "{escape}: {code} {body}");
        assert!(code >= 400, "{escape}: {code}");
    }
    // A symlink planted in place of the container's log file is not followed.
    let log =
        k.rk.dir
            .path()
            .join("logs")
            .join(format!("default_cl-sec_{id}"))
            .join("main/0.log");
    std::fs::remove_file(&log).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &log).unwrap();
    let (code, body) = k.curl(admin, "/containerLogs/default/cl-sec/main");
    assert!(!body.contains("root:") && code >= 400, "{code} {body}");

    k.api
        .ok(&["delete", "pod", "cl-sec", "-n", "default", "--wait=false"]);
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn l_kubectl_top_through_metrics_server() {
    let mut k = Kubelet::new("top");
    k.start_ready().await;
    // A container that burns a little CPU, so its usage is not zero.
    let spec = json!({"terminationGracePeriodSeconds": 2, "containers": [sh_container(
        "busy",
        "trap 'exit 0' TERM; while true; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 1; done",
    )]});
    k.api.create(&test_pod(&k.api, "cl-top", spec));
    let pod = eventually("running", START, async || {
        k.api.pod("cl-top").filter(running_with_ip)
    })
    .await;
    let uids: HashSet<String> = [uid(&pod).to_owned()].into();
    // metrics-server scrapes /metrics/resource every 10 s and needs two
    // samples for a CPU rate.
    let top = eventually(
        "kubectl top pod answers",
        Duration::from_secs(90),
        async || {
            let out = k
                .api
                .run(&["top", "pod", "cl-top", "-n", "default", "--no-headers"]);
            let text = stdout(&out);
            (out.status.success() && text.starts_with("cl-top")).then_some(text)
        },
    )
    .await;
    let cols: Vec<&str> = top.split_whitespace().collect();
    assert!(
        cols.len() == 3 && cols[1].ends_with('m') && cols[2].ends_with("Mi"),
        "NAME CPU(cores) MEMORY(bytes): {top:?}"
    );
    let node = k.api.node.clone();
    let top_node = eventually(
        "kubectl top node answers",
        Duration::from_secs(60),
        async || {
            let out = k.api.run(&["top", "node", &node, "--no-headers"]);
            out.status.success().then(|| stdout(&out))
        },
    )
    .await;
    assert!(top_node.starts_with(&node), "{top_node:?}");
    k.api
        .ok(&["delete", "pod", "cl-top", "-n", "default", "--wait=false"]);
    k.finish(&uids).await;
}

struct ApiServerGuard {
    dir: PathBuf,
    node: String,
    apiserver_port: String,
    etcd_port: String,
    stopped: bool,
}

impl ApiServerGuard {
    fn pid(&self) -> u32 {
        std::fs::read_to_string(self.dir.join("kube-apiserver.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Alive and not a zombie.
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().chars().next())
            })
            .flatten()
            .is_some_and(|state| state != 'Z')
    }

    fn new(api: &Api) -> ApiServerGuard {
        let mut g = ApiServerGuard {
            dir: api.dir.clone(),
            node: api.node.clone(),
            apiserver_port: String::new(),
            etcd_port: String::new(),
            stopped: false,
        };
        // The ports of the running cluster, from the API server's command
        // line, so `cluster.sh up` restarts it where it was.
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", g.pid())).unwrap();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .cloned()
                .unwrap_or_else(|| panic!("kube-apiserver has no {flag}: {args:?}"))
        };
        g.apiserver_port = value("--secure-port");
        g.etcd_port = value("--etcd-servers")
            .rsplit(':')
            .next()
            .unwrap()
            .to_owned();
        g
    }

    async fn stop(&mut self) {
        let pid = self.pid();
        self.stopped = true;
        // A crash, not a graceful shutdown (which can take a minute).
        let ok = Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(ok.success(), "kill -KILL kube-apiserver");
        eventually(
            "kube-apiserver stopped",
            Duration::from_secs(30),
            async || (!Self::alive(pid)).then_some(()),
        )
        .await;
    }

    /// `hack/cluster.sh up NODE`: starts the API server again.
    fn up(&mut self) -> std::process::ExitStatus {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let status = Command::new(repo.join("hack/cluster.sh"))
            .arg("up")
            .arg(&self.node)
            .current_dir(&repo)
            .env("RKUBELET_CLUSTER_DIR", &self.dir)
            .env("RKUBELET_APISERVER_PORT", &self.apiserver_port)
            .env("RKUBELET_ETCD_PORT", &self.etcd_port)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("running hack/cluster.sh up");
        if status.success() {
            self.stopped = false;
        }
        status
    }
}

impl Drop for ApiServerGuard {
    fn drop(&mut self) {
        if self.stopped {
            eprintln!("restarting kube-apiserver after a failure");
            let status = self.up();
            if !status.success() {
                eprintln!("hack/cluster.sh up failed ({status}): the API server is down");
            }
        }
    }
}

/// The `[NodeConformance]` behaviours of upstream's e2e suite that once
/// failed here: spec.os admission, readiness gates set through the API, the
/// termination message from the log's unfinished last line, and a
/// container-level restartPolicy.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn m_os_admission_readiness_gates_termination_message_container_policy() {
    let mut k = Kubelet::new("conformance");
    k.start_ready().await;
    let mut windows = json!({"containers": [sh_container("c", SLEEPER)]});
    windows["os"] = json!({"name": "windows"});
    k.api.create(&test_pod(&k.api, "cl-windows", windows));
    let mut gated = json!({"containers": [sh_container("c", SLEEPER)]});
    gated["readinessGates"] = json!([{"conditionType": "rkubelet.test/gate"}]);
    k.api.create(&test_pod(&k.api, "cl-gated", gated));
    let mut fallback = sh_container("c", "echo -n DONE; exit 1");
    fallback["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    let spec = json!({"restartPolicy": "Never", "containers": [fallback]});
    k.api.create(&test_pod(&k.api, "cl-fallback", spec));
    let mut once = sh_container("c", "exit 1");
    once["restartPolicy"] = json!("Never");
    k.api
        .create(&test_pod(&k.api, "cl-once", json!({"containers": [once]})));

    let pod = eventually("the windows pod Failed", START, async || {
        k.api
            .pod("cl-windows")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    let status = &pod["status"];
    assert_eq!(status["reason"], "PodOSNotSupported", "{status}");
    assert_eq!(
        status["message"],
        "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"
    );
    eventually(
        "the PodOSNotSupported event, without the status' prefix",
        START,
        async || {
            pod_events(&k.api, "cl-windows", Some("PodOSNotSupported"))?
                .iter()
                .any(|e| {
                    e["message"] == "Failed to admit pod as the OS field doesn't match node OS"
                })
                .then_some(())
        },
    )
    .await;
    let mut uids: HashSet<String> = [uid(&pod).to_owned()].into();

    let pod = eventually("the gated pod runs, not Ready", START, async || {
        k.api.pod("cl-gated").filter(|p| {
            running_with_ip(p)
                && condition(p, "ContainersReady") == "True"
                && condition(p, "Ready") == "False"
        })
    })
    .await;
    uids.insert(uid(&pod).to_owned());
    for (status, ready) in [("True", "True"), ("False", "False")] {
        let patch = format!(
            r#"{{"status":{{"conditions":[{{"type":"rkubelet.test/gate","status":"{status}"}}]}}}}"#
        );
        k.api.ok(&[
            "patch",
            "pod",
            "cl-gated",
            "-n",
            "default",
            "--subresource=status",
            "--type=strategic",
            "-p",
            &patch,
        ]);
        eventually(
            &format!("Ready {ready} with the gate {status}"),
            START,
            async || {
                let p = k.api.pod("cl-gated")?;
                (condition(&p, "Ready") == ready && condition(&p, "rkubelet.test/gate") == status)
                    .then_some(())
            },
        )
        .await;
    }

    let pod = eventually("the fallback pod Failed", START, async || {
        k.api
            .pod("cl-fallback")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    let terminated = &container_status(&pod, "c")["state"]["terminated"];
    assert_eq!(terminated["message"], "DONE", "{terminated}");
    uids.insert(uid(&pod).to_owned());

    let pod = eventually(
        "the restartPolicy Never container's pod Failed",
        START,
        async || {
            k.api
                .pod("cl-once")
                .filter(|p| p["status"]["phase"] == "Failed")
        },
    )
    .await;
    assert_eq!(container_status(&pod, "c")["restartCount"], 0);
    uids.insert(uid(&pod).to_owned());
    for name in ["cl-windows", "cl-gated", "cl-fallback", "cl-once"] {
        k.api
            .ok(&["delete", "pod", name, "-n", "default", "--wait=false"]);
    }
    k.finish(&uids).await;
}

/// `kubectl exec` in `pod` (container c) as admin: its stdout, when it
/// succeeded.
fn exec_out(api: &Api, pod: &str, script: &str) -> Option<String> {
    let out = api.run(&[
        "exec", pod, "-n", "default", "-c", "c", "--", "sh", "-c", script,
    ]);
    out.status.success().then(|| stdout(&out))
}

/// The API server's URL, from the admin kubeconfig.
fn server_url(api: &Api) -> String {
    let conf = std::fs::read_to_string(api.admin_conf()).unwrap();
    conf.lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .map(|s| s.trim().to_owned())
        .expect("a server in admin.conf")
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn n_volumes_configmaps_secrets_tokens_and_safe_sub_paths() {
    let mut k = Kubelet::new("volumes");
    k.start_ready().await;
    let labels = json!({TEST_LABEL: "1"});
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cl-cfg", "namespace": "default", "labels": labels},
        "data": {"greeting": "hello"},
    }));
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cl-sec", "namespace": "default", "labels": labels},
        "stringData": {"password": "s3cret"},
    }));
    let mut c = sh_container("c", SLEEPER);
    c["volumeMounts"] = json!([
        {"name": "cfg", "mountPath": "/etc/cfg"},
        {"name": "sec", "mountPath": "/etc/sec"},
        {"name": "mem", "mountPath": "/mem"},
    ]);
    let spec = json!({
        "terminationGracePeriodSeconds": 2,
        "containers": [c],
        "volumes": [
            {"name": "cfg", "configMap": {"name": "cl-cfg"}},
            {"name": "sec", "secret": {"secretName": "cl-sec", "defaultMode": 0o400}},
            {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
        ],
    });
    k.api.create(&test_pod(&k.api, "cl-vol", spec));
    // Waits for a ConfigMap that does not exist yet.
    let mut w = sh_container("c", SLEEPER);
    w["volumeMounts"] = json!([{"name": "later", "mountPath": "/later"}]);
    let spec = json!({
        "terminationGracePeriodSeconds": 2,
        "containers": [w],
        "volumes": [{"name": "later", "configMap": {"name": "cl-later"}}],
    });
    k.api.create(&test_pod(&k.api, "cl-wait", spec));
    // Plants a symlink out of its emptyDir, then asks for it as a subPath.
    let init = sh_container("plant", "ln -s /etc /work/escape");
    let mut init = init;
    init["volumeMounts"] = json!([{"name": "work", "mountPath": "/work"}]);
    let mut e = sh_container("c", SLEEPER);
    e["volumeMounts"] = json!([{"name": "work", "mountPath": "/host-etc", "subPath": "escape"}]);
    let spec = json!({
        "terminationGracePeriodSeconds": 2,
        "initContainers": [init],
        "containers": [e],
        "volumes": [{"name": "work", "emptyDir": {}}],
    });
    k.api.create(&test_pod(&k.api, "cl-escape", spec));

    let pod = eventually("the volume pod runs", START, async || {
        k.api.pod("cl-vol").filter(running_with_ip)
    })
    .await;
    let mut uids: HashSet<String> = [uid(&pod).to_owned()].into();
    let read = |path: &str| exec_out(&k.api, "cl-vol", &format!("cat {path}"));
    assert_eq!(read("/etc/cfg/greeting").as_deref(), Some("hello"));
    assert_eq!(read("/etc/sec/password").as_deref(), Some("s3cret"));
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(read(&format!("{sa}/namespace")).as_deref(), Some("default"));
    let ca = read(&format!("{sa}/ca.crt")).unwrap_or_default();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    let modes = exec_out(
        &k.api,
        "cl-vol",
        "stat -L -c %a /etc/sec/password /etc/cfg/greeting",
    );
    assert_eq!(modes.as_deref(), Some("400\n644\n"));
    let df = exec_out(&k.api, "cl-vol", "df -k /mem | tail -1").unwrap_or_default();
    assert_eq!(
        df.split_whitespace().nth(1),
        Some("8192"),
        "an 8Mi tmpfs: {df}"
    );
    // Volumes of these types are read-only in the container.
    assert!(exec_out(&k.api, "cl-vol", "touch /etc/cfg/x").is_none());

    // The pod's token is the pod's: the API server takes it as the pod's
    // service account.
    let token = read(&format!("{sa}/token")).unwrap_or_default();
    assert!(!token.is_empty());
    let creds = tempfile::tempdir().unwrap();
    let conf = creds.path().join("sa.conf");
    std::fs::write(creds.path().join("ca.crt"), &ca).unwrap();
    std::fs::write(&conf, format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
         users:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        server_url(&k.api),
        creds.path().join("ca.crt").display(),
    )).unwrap();
    let who = k.api.run_as(&conf, &["auth", "whoami", "-o", "json"], None);
    assert!(
        who.status.success(),
        "{}",
        String::from_utf8_lossy(&who.stderr)
    );
    let who: Value = serde_json::from_slice(&who.stdout).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "system:serviceaccount:default:default"
    );
    assert_eq!(
        who["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"][0],
        "cl-vol"
    );

    // A ConfigMap edit reaches the running pod.
    k.api.ok(&[
        "patch",
        "configmap",
        "cl-cfg",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"bye"}}"#,
    ]);
    eventually("the edit is in the pod", START, async || {
        (read("/etc/cfg/greeting").as_deref() == Some("bye")).then_some(())
    })
    .await;

    // The pod whose ConfigMap is missing waits, told why; then runs.
    eventually("FailedMount for the missing ConfigMap", START, async || {
        pod_events(&k.api, "cl-wait", Some("FailedMount"))?.iter().any(|e| {
            e["message"]
                == r#"MountVolume.SetUp failed for volume "later" : configmaps "cl-later" not found"#
        })
        .then_some(())
    })
    .await;
    let waiting = k.api.pod("cl-wait").unwrap();
    assert_eq!(waiting["status"]["phase"], "Pending");
    assert_eq!(
        container_status(&waiting, "c")["state"]["waiting"]["reason"],
        "ContainerCreating"
    );
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cl-later", "namespace": "default", "labels": labels},
        "data": {"k": "v"},
    }));
    let pod = eventually(
        "the waiting pod runs once its ConfigMap exists",
        START,
        async || k.api.pod("cl-wait").filter(running_with_ip),
    )
    .await;
    uids.insert(uid(&pod).to_owned());

    // The subPath that leads out of its volume is refused.
    let pod = eventually("the escape is refused", START, async || {
        k.api.pod("cl-escape").filter(|p| {
            container_status(p, "c")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
        })
    })
    .await;
    let message = container_status(&pod, "c")["state"]["waiting"]["message"].to_string();
    assert!(message.contains("not within volume path"), "{message}");
    uids.insert(uid(&pod).to_owned());
    for name in ["cl-vol", "cl-wait", "cl-escape"] {
        k.api
            .ok(&["delete", "pod", name, "-n", "default", "--wait=false"]);
    }
    let root = k.rk.root();
    k.finish(&uids).await;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let left: Vec<&str> = mounts
        .lines()
        .filter(|l| l.contains(&*root.to_string_lossy()))
        .collect();
    assert!(left.is_empty(), "mounts left behind: {left:?}");
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn o_env_hosts_file_and_resolver_as_upstream_gives_them() {
    let mut k = Kubelet::new("env");
    k.start_ready().await;
    let labels = json!({TEST_LABEL: "1"});
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cl-env-cm", "namespace": "default", "labels": labels},
        "data": {"mode": "fast", "level": "3"},
    }));
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cl-env-sec", "namespace": "default", "labels": labels},
        "stringData": {"pw": "s3cret"},
    }));
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "cl-env-svc", "namespace": "default", "labels": labels},
        "spec": {"ports": [{"name": "http", "port": 8080}], "selector": {"app": "none"}},
    }));
    let svc_ip = k
        .api
        .get(&["service", "cl-env-svc", "-n", "default"])
        .and_then(|s| s["spec"]["clusterIP"].as_str().map(str::to_owned))
        .expect("the Service has a cluster IP");
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let mut c = sh_container("c", SLEEPER);
    c["resources"] = json!({"limits": {"memory": "64Mi"}});
    c["envFrom"] = json!([{"configMapRef": {"name": "cl-env-cm"}, "prefix": "CM_"}]);
    c["env"] = json!([
        {"name": "NAME", "valueFrom": field("metadata.name")},
        {"name": "NODE", "valueFrom": field("spec.nodeName")},
        {"name": "POD_IP", "valueFrom": field("status.podIP")},
        {"name": "HOST_IP", "valueFrom": field("status.hostIP")},
        {"name": "SA", "valueFrom": field("spec.serviceAccountName")},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cl-env-cm", "key": "mode"}}},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "cl-env-sec", "key": "pw"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "cl-env-none", "key": "k", "optional": true}}},
        {"name": "COMBO", "value": "$(NAME)-$(MODE)-$$(MODE)"},
    ]);
    let spec = json!({
        "terminationGracePeriodSeconds": 2,
        "hostname": "h1",
        "subdomain": "sub",
        "hostAliases": [{"ip": "123.45.67.89", "hostnames": ["foo", "bar"]}],
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": ["192.0.2.53"], "searches": ["a.example"],
                      "options": [{"name": "ndots", "value": "2"}]},
        "containers": [c],
    });
    k.api.create(&test_pod(&k.api, "cl-env", spec));
    // Waits for a ConfigMap that does not exist yet, told why.
    let mut w = sh_container("c", SLEEPER);
    w["env"] = json!([{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cl-env-later", "key": "k"}}}]);
    let spec = json!({"terminationGracePeriodSeconds": 2, "containers": [w]});
    k.api.create(&test_pod(&k.api, "cl-env-wait", spec));

    let pod = eventually("the env pod runs", START, async || {
        k.api.pod("cl-env").filter(running_with_ip)
    })
    .await;
    let mut uids: HashSet<String> = [uid(&pod).to_owned()].into();
    let pod_ip = pod["status"]["podIP"].as_str().unwrap().to_owned();
    let host_ip = pod["status"]["hostIP"].as_str().unwrap().to_owned();
    let env = exec_out(&k.api, "cl-env", "env").unwrap_or_default();
    let env: BTreeMap<&str, &str> = env.lines().filter_map(|l| l.split_once('=')).collect();
    let node = k.api.node.clone();
    let want = [
        ("NAME", "cl-env"),
        ("NODE", node.as_str()),
        ("POD_IP", pod_ip.as_str()),
        ("HOST_IP", host_ip.as_str()),
        ("SA", "default"),
        ("MEM", "64"),
        ("MODE", "fast"),
        ("PW", "s3cret"),
        ("COMBO", "cl-env-fast-$(MODE)"),
        ("CM_mode", "fast"),
        ("CM_level", "3"),
        ("CL_ENV_SVC_SERVICE_HOST", svc_ip.as_str()),
        ("CL_ENV_SVC_SERVICE_PORT", "8080"),
        ("CL_ENV_SVC_SERVICE_PORT_HTTP", "8080"),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ];
    for (k_, v) in want {
        assert_eq!(env.get(k_).copied(), Some(v), "{k_} in {env:?}");
    }
    let link = format!("tcp://{svc_ip}:8080");
    assert_eq!(
        env.get("CL_ENV_SVC_PORT_8080_TCP").copied(),
        Some(link.as_str())
    );
    assert!(env.contains_key("KUBERNETES_SERVICE_HOST"), "{env:?}");
    assert!(
        !env.contains_key("OPT"),
        "an optional absent key is not set"
    );
    let hosts = exec_out(&k.api, "cl-env", "cat /etc/hosts").unwrap_or_default();
    assert_eq!(
        hosts,
        format!(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             {pod_ip}\th1.sub.default.svc.cluster.local\th1\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n"
        )
    );
    let resolv = exec_out(&k.api, "cl-env", "cat /etc/resolv.conf").unwrap_or_default();
    assert_eq!(
        resolv,
        "search a.example\nnameserver 192.0.2.53\noptions ndots:2\n"
    );
    assert_eq!(
        exec_out(&k.api, "cl-env", "hostname").as_deref(),
        Some("h1\n")
    );

    let waiting = eventually("the waiting pod says why", START, async || {
        k.api.pod("cl-env-wait").filter(|p| {
            container_status(p, "c")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
        })
    })
    .await;
    assert_eq!(
        container_status(&waiting, "c")["state"]["waiting"]["message"],
        r#"configmaps "cl-env-later" not found"#
    );
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cl-env-later", "namespace": "default", "labels": labels},
        "data": {"k": "v"},
    }));
    let pod = eventually(
        "the waiting pod runs once its ConfigMap exists",
        START,
        async || k.api.pod("cl-env-wait").filter(running_with_ip),
    )
    .await;
    uids.insert(uid(&pod).to_owned());
    assert_eq!(
        exec_out(&k.api, "cl-env-wait", "echo $K").as_deref(),
        Some("v\n")
    );
    for name in ["cl-env", "cl-env-wait"] {
        k.api
            .ok(&["delete", "pod", name, "-n", "default", "--wait=false"]);
    }
    k.finish(&uids).await;
}

/// The security context as upstream sends it: inside the container,
/// /proc/self/status shows the capabilities asked for, seccomp filtering
/// and no_new_privs; the user, the read-only root and upstream's masked
/// paths hold (this kernel has no /proc/kcore); an unsafe sysctl is refused at admission.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn p_security_context_capabilities_seccomp_and_sysctls() {
    let mut k = Kubelet::new("security");
    k.start_ready().await;
    let mut restricted = sh_container("c", SLEEPER);
    restricted["securityContext"] = json!({
        "runAsUser": 1000,
        "runAsNonRoot": true,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    let spec = json!({"terminationGracePeriodSeconds": 2, "containers": [restricted]});
    k.api.create(&test_pod(&k.api, "cl-sec-restricted", spec));
    let mut caps = sh_container("c", SLEEPER);
    caps["securityContext"] = json!({
        "capabilities": {"drop": ["CAP_ALL"], "add": ["NET_ADMIN", "chown"]},
    });
    let spec = json!({"terminationGracePeriodSeconds": 2, "containers": [caps]});
    k.api.create(&test_pod(&k.api, "cl-sec-caps", spec));
    let mut sysctl = json!({"containers": [sh_container("c", SLEEPER)]});
    sysctl["securityContext"] = json!({"sysctls": [{"name": "kernel.msgmax", "value": "8192"}]});
    k.api.create(&test_pod(&k.api, "cl-sec-sysctl", sysctl));

    let mut uids = HashSet::new();
    for name in ["cl-sec-restricted", "cl-sec-caps"] {
        let pod = eventually("the security pods run", START, async || {
            k.api.pod(name).filter(running_with_ip)
        })
        .await;
        uids.insert(uid(&pod).to_owned());
    }
    let status = |pod: &str| {
        let out = exec_out(&k.api, pod, "cat /proc/self/status").unwrap_or_default();
        out.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect::<BTreeMap<String, String>>()
    };
    let s = status("cl-sec-restricted");
    assert_eq!(
        s.get("CapEff").map(String::as_str),
        Some("0000000000000000"),
        "{s:?}"
    );
    assert_eq!(s.get("Seccomp").map(String::as_str), Some("2"), "{s:?}");
    assert_eq!(s.get("NoNewPrivs").map(String::as_str), Some("1"), "{s:?}");
    assert_eq!(
        exec_out(&k.api, "cl-sec-restricted", "id -u").as_deref(),
        Some("1000\n")
    );
    assert_eq!(
        exec_out(
            &k.api,
            "cl-sec-restricted",
            "touch /written 2>/dev/null && echo writable || echo read-only"
        )
        .as_deref(),
        Some("read-only\n")
    );
    assert_eq!(
        exec_out(
            &k.api,
            "cl-sec-restricted",
            "wc -c < /proc/interrupts; ls /sys/firmware | wc -l"
        )
        .as_deref(),
        Some("0\n0\n"),
        "upstream's masked paths (/proc/interrupts is not among containerd's own)"
    );
    let s = status("cl-sec-caps");
    // CAP_CHOWN (bit 0) and CAP_NET_ADMIN (bit 12), nothing else.
    assert_eq!(
        s.get("CapEff").map(String::as_str),
        Some("0000000000001001"),
        "{s:?}"
    );
    assert_eq!(
        s.get("Seccomp").map(String::as_str),
        Some("0"),
        "no profile asked: unconfined"
    );

    let pod = eventually("the unsafe sysctl pod is rejected", START, async || {
        k.api
            .pod("cl-sec-sysctl")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(
        pod["status"]["reason"], "SysctlForbidden",
        "{}",
        pod["status"]
    );
    assert_eq!(
        pod["status"]["message"],
        r#"Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted"#
    );
    for name in ["cl-sec-restricted", "cl-sec-caps", "cl-sec-sysctl"] {
        k.api
            .ok(&["delete", "pod", name, "-n", "default", "--wait=false"]);
    }
    k.finish(&uids).await;
}

/// The events about pod `pod` in namespace default, of `reason` when given.
fn pod_events(api: &Api, pod: &str, reason: Option<&str>) -> Option<Vec<Value>> {
    let mut sel = format!("involvedObject.name={pod}");
    if let Some(reason) = reason {
        sel.push_str(&format!(",reason={reason}"));
    }
    let mut list = api.get(&["events", "-n", "default", "--field-selector", &sel])?;
    match list["items"].take() {
        Value::Array(items) => Some(items),
        _ => None,
    }
}

/// The first event of `reason` about pod `pod`, its message.
fn pod_event(api: &Api, pod: &str, reason: &str) -> Option<String> {
    let events = pod_events(api, pod, Some(reason))?;
    events.first()?["message"].as_str().map(str::to_owned)
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn q_runtime_classes_and_kubectl_debug() {
    let mut k = Kubelet::new("debug");
    k.start_ready().await;
    // hack/containerd.sh configures the handler `test-handler` (runc); the
    // other class names a handler the runtime does not have.
    for (class, handler) in [
        ("rk-test-handler", "test-handler"),
        ("rk-unconfigured", "rk-no-such-handler"),
    ] {
        let _ = k
            .api
            .run(&["delete", "runtimeclass", class, "--ignore-not-found"]);
        k.api.create(&json!({
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": class, "labels": {TEST_LABEL: "true"}},
            "handler": handler,
        }));
    }
    let spec = |class: &str| {
        json!({
            "runtimeClassName": class,
            "terminationGracePeriodSeconds": 2,
            "containers": [sh_container("c", SLEEPER)],
        })
    };
    k.api
        .create(&test_pod(&k.api, "cl-rc", spec("rk-test-handler")));
    k.api
        .create(&test_pod(&k.api, "cl-rc-bad", spec("rk-unconfigured")));
    let pod = eventually("the test-handler pod runs", START, async || {
        k.api.pod("cl-rc").filter(running_with_ip)
    })
    .await;
    let uids: HashSet<String> = [uid(&pod).to_owned()].into();
    let message = eventually(
        "FailedCreatePodSandBox for the unconfigured handler",
        START,
        async || pod_event(&k.api, "cl-rc-bad", "FailedCreatePodSandBox"),
    )
    .await;
    assert!(
        message.starts_with("Failed to create pod sandbox: ")
            && message.contains("rk-no-such-handler"),
        "{message}"
    );
    assert_eq!(
        k.api.pod("cl-rc-bad").unwrap()["status"]["phase"],
        "Pending"
    );

    // kubectl debug: an ephemeral container in the running pod, in the
    // target's process namespace, given the commands on its stdin (the
    // runtime ends a non-TTY attach when stdin closes, so what it says is
    // read from its log); it ends with `exit` and is never restarted.
    kubectl_within(
        &k.api,
        START,
        &[
            "debug",
            "-i",
            "cl-rc",
            "-n",
            "default",
            "--image",
            IMAGE,
            "--target",
            "c",
            "--container",
            "dbg",
            "--",
            "sh",
        ],
        Some("ps -o args | grep -c '^sleep 3600'; echo marco-$((20 + 22)); exit\n"),
    )
    .expect("kubectl debug ends when its stdin closes");
    let pod = eventually("the debugger has terminated", START, async || {
        k.api.pod("cl-rc").filter(|p| {
            p["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"].is_object()
        })
    })
    .await;
    let said = k.api.ok(&["logs", "cl-rc", "-n", "default", "-c", "dbg"]);
    assert_eq!(
        said, "1\nmarco-42\n",
        "the target's sleep is seen from the debugger"
    );
    let dbg = &pod["status"]["ephemeralContainerStatuses"][0];
    assert_eq!(dbg["name"], "dbg");
    assert_eq!(dbg["restartCount"], 0, "{dbg}");
    assert_eq!(condition(&pod, "Ready"), "True", "the pod is unaffected");
    // A second one, left running: exec reaches it by name.
    k.api.ok(&[
        "debug",
        "cl-rc",
        "-n",
        "default",
        "--image",
        IMAGE,
        "--container",
        "dbg2",
        "--",
        "sh",
        "-c",
        SLEEPER,
    ]);
    let said = eventually("exec in the second debugger", START, async || {
        let out = k.api.run(&[
            "exec", "cl-rc", "-n", "default", "-c", "dbg2", "--", "echo", "polo",
        ]);
        out.status.success().then(|| stdout(&out))
    })
    .await;
    assert_eq!(said, "polo\n");
    let pod = k.api.pod("cl-rc").unwrap();
    let first = &pod["status"]["ephemeralContainerStatuses"][0];
    assert!(
        first["state"]["terminated"].is_object() && first["restartCount"] == 0,
        "the first debugger stays terminated: {first}"
    );
    for name in ["cl-rc", "cl-rc-bad"] {
        k.api
            .ok(&["delete", "pod", name, "-n", "default", "--wait=false"]);
    }
    k.api.ok(&[
        "delete",
        "runtimeclass",
        "rk-test-handler",
        "rk-unconfigured",
    ]);
    k.finish(&uids).await;
}

/// A pull error that is the registry refusing a pull without credentials,
/// in the runtime's words: containerd 1.6 quotes the registry's 401,
/// containerd 2 says no credentials were given.
fn refused_pull(message: &str) -> bool {
    message.contains("401 Unauthorized")
        || message.contains("authorization failed: no basic auth credentials")
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn r_private_images_pull_only_with_their_pull_secret() {
    // hack/registry.sh's loopback registry, which wants its user for every
    // repository; containerd reaches it over plain HTTP.
    let registry = env("RKUBELET_TEST_REGISTRY");
    let image = format!("{registry}/private/busybox:1");
    let mut k = Kubelet::new("pull");
    k.start_ready().await;
    let _ = k.api.run(&[
        "delete",
        "secret",
        "cl-regcred",
        "-n",
        "default",
        "--ignore-not-found",
    ]);
    k.api.ok(&[
        "create",
        "secret",
        "docker-registry",
        "cl-regcred",
        "-n",
        "default",
        "--docker-server",
        &registry,
        "--docker-username",
        "rkubelet-puller",
        "--docker-password",
        "registry.sh-pw",
    ]);
    k.api.ok(&[
        "label",
        "secret",
        "cl-regcred",
        "-n",
        "default",
        &format!("{TEST_LABEL}=1"),
    ]);
    let spec = |secrets: &[&str]| {
        let refs: Vec<Value> = secrets.iter().map(|s| json!({"name": s})).collect();
        json!({
            "terminationGracePeriodSeconds": 2,
            "imagePullSecrets": refs,
            "containers": [{
                "name": "c",
                "image": image,
                "imagePullPolicy": "Always",
                "command": ["sh", "-c", SLEEPER],
            }],
        })
    };
    k.api
        .create(&test_pod(&k.api, "cl-pull-ok", spec(&["cl-regcred"])));
    k.api.create(&test_pod(&k.api, "cl-pull-none", spec(&[])));
    k.api
        .create(&test_pod(&k.api, "cl-pull-missing", spec(&["cl-nope"])));

    let pod = eventually("the pod with the pull secret runs", START, async || {
        k.api.pod("cl-pull-ok").filter(running_with_ip)
    })
    .await;
    let uids: HashSet<String> = [uid(&pod).to_owned()].into();
    let pulled = eventually("Pulled", START, async || {
        pod_event(&k.api, "cl-pull-ok", "Pulled")
    })
    .await;
    assert!(
        pulled.starts_with(&format!("Successfully pulled image {image:?} in "))
            && pulled.contains(" including waiting). Image size: "),
        "{pulled}"
    );
    // Without credentials the registry refuses: ErrImagePull, then
    // ImagePullBackOff carrying that error.
    let waiting = eventually("ImagePullBackOff without the secret", START, async || {
        let pod = k.api.pod("cl-pull-none")?;
        let w = &container_status(&pod, "c")["state"]["waiting"];
        (w["reason"] == "ImagePullBackOff").then(|| w["message"].as_str().unwrap_or("").to_owned())
    })
    .await;
    assert!(
        waiting.starts_with(&format!(
            "Back-off pulling image {image:?}: ErrImagePull: rpc error: "
        )) && refused_pull(&waiting),
        "{waiting}"
    );
    let missing = eventually("FailedToRetrieveImagePullSecret", START, async || {
        pod_event(&k.api, "cl-pull-missing", "FailedToRetrieveImagePullSecret")
    })
    .await;
    assert_eq!(
        missing,
        "Unable to retrieve some image pull secrets (cl-nope); attempting to pull the image may not succeed."
    );
    // imagePullPolicy Always pulls again though the image is present now.
    let before = pod_event(&k.api, "cl-pull-ok", "Pulling");
    assert!(before.is_some());
    k.api
        .create(&test_pod(&k.api, "cl-pull-again", spec(&["cl-regcred"])));
    let again = eventually("the second pod runs", START, async || {
        k.api.pod("cl-pull-again").filter(running_with_ip)
    })
    .await;
    assert!(
        pod_event(&k.api, "cl-pull-again", "Pulling").is_some(),
        "pulled again under Always"
    );
    let mut uids = uids;
    uids.insert(uid(&again).to_owned());
    // The image is on the node now, pulled with cl-regcred: under
    // IfNotPresent a pod with that secret uses it as it is, and a pod
    // without must pull it itself, which the registry refuses
    // (KubeletEnsureSecretPulledImages, NeverVerifyPreloadedImages).
    let cached = |secrets: &[&str]| {
        let mut spec = spec(secrets);
        spec["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
        spec
    };
    k.api
        .create(&test_pod(&k.api, "cl-cached-ok", cached(&["cl-regcred"])));
    k.api
        .create(&test_pod(&k.api, "cl-cached-none", cached(&[])));
    let ok = eventually(
        "the pod with the secret uses the image",
        START,
        async || k.api.pod("cl-cached-ok").filter(running_with_ip),
    )
    .await;
    uids.insert(uid(&ok).to_owned());
    assert_eq!(
        pod_event(&k.api, "cl-cached-ok", "Pulled").as_deref(),
        Some(format!("Container image {image:?} already present on machine and can be accessed by the pod").as_str())
    );
    assert!(pod_event(&k.api, "cl-cached-ok", "Pulling").is_none());
    let waiting = eventually(
        "ErrImagePull without the secret, the image present",
        START,
        async || {
            let pod = k.api.pod("cl-cached-none")?;
            let w = &container_status(&pod, "c")["state"]["waiting"];
            let reason = w["reason"].as_str()?;
            ["ErrImagePull", "ImagePullBackOff"]
                .contains(&reason)
                .then(|| w["message"].as_str().unwrap_or("").to_owned())
        },
    )
    .await;
    assert!(refused_pull(&waiting), "{waiting}");
    // The record, as upstream lays it out.
    let records: Vec<String> = std::fs::read_dir(k.rk.root().join("image_manager/pulled"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter(|r| r.contains("/private/busybox"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(
        records[0].starts_with(
            r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","#
        ) && records[0].contains(r#""name":"cl-regcred","credentialHash":""#),
        "{}",
        records[0]
    );
    for name in [
        "cl-pull-ok",
        "cl-pull-none",
        "cl-pull-missing",
        "cl-pull-again",
        "cl-cached-ok",
        "cl-cached-none",
    ] {
        k.api
            .ok(&["delete", "pod", name, "-n", "default", "--wait=false"]);
    }
    k.finish(&uids).await;
}

/// The eviction manager on a real node. With memory.available's threshold
/// set 400 MiB under what the node has, a BestEffort pod that writes 800
/// MiB into a memory emptyDir is evicted (Failed, reason Evicted, upstream's
/// message, the DisruptionTarget condition, an annotated Evicted event)
/// while a Guaranteed pod keeps running; the node reports MemoryPressure
/// and refuses a BestEffort pod meanwhile, and reports it no more once the
/// transition period has passed. With kernelMemcgNotification the kernel's
/// notification of the threshold crossed starts the manager's pass.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn s_memory_pressure_evicts_the_pod_over_its_request() {
    const MI: u64 = 1 << 20;
    let mut k = Kubelet::new("evict");
    k.start_ready().await;
    let node = k.api.node.clone();
    // What the kubelet sees the node has.
    let available = eventually("the node's available memory", START, async || {
        let raw = k.api.run(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{node}/proxy/stats/summary"),
        ]);
        let v: Value = serde_json::from_slice(&raw.stdout).ok()?;
        v["node"]["memory"]["availableBytes"].as_u64()
    })
    .await;
    k.rk.terminate().await;
    let threshold = available / MI - 400;
    k.set_eviction(&format!(
        "evictionHard:\n  memory.available: {threshold}Mi\n\
         evictionPressureTransitionPeriod: 30s\nkernelMemcgNotification: true\n"
    ));
    k.start_ready().await;

    let mut guaranteed = pod_spec();
    guaranteed["nodeName"] = json!(node);
    guaranteed["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "100m", "memory": "64Mi"},
    });
    let mut hog = pod_spec();
    hog["nodeName"] = json!(node);
    hog["containers"][0]["name"] = json!("hog");
    hog["containers"][0]["command"] = json!([
        "sh",
        "-c",
        format!("dd if=/dev/zero of=/fill/f bs=1M count=800 && {SLEEPER}")
    ]);
    hog["containers"][0]["volumeMounts"] = json!([{"name": "fill", "mountPath": "/fill"}]);
    hog["volumes"] = json!([{"name": "fill", "emptyDir": {"medium": "Memory"}}]);
    let mut uids = HashSet::new();
    for (name, spec) in [("cl-guaranteed", &guaranteed), ("cl-hog", &hog)] {
        k.api.create(&json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"app": name, TEST_LABEL: "1"}},
            "spec": spec,
        }));
        let pod = eventually(&format!("{name} Running"), START, async || {
            k.api
                .pod(name)
                .filter(|p| p["status"]["phase"] == "Running" || p["status"]["phase"] == "Failed")
        })
        .await;
        uids.insert(uid(&pod).to_owned());
    }
    let hog = eventually("the hog evicted", START, async || {
        k.api
            .pod("cl-hog")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    // A BestEffort pod is refused while the pressure lasts.
    let mut late = pod_spec();
    late["nodeName"] = json!(node);
    k.api.create(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-late", "namespace": "default",
                     "labels": {"app": "cl-late", TEST_LABEL: "1"}},
        "spec": late,
    }));
    let status = &hog["status"];
    assert_eq!(status["reason"], "Evicted", "{status}");
    let message = status["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(&format!(
            "The node was low on resource: memory. Threshold quantity: {threshold}Mi, available: "
        )) && message.contains("Container hog was using ")
            && message.ends_with(", request is 0, has larger consumption of memory. "),
        "{message}"
    );
    // Its containers (writable layers, logs) are removed, as upstream's.
    let hog_uid: HashSet<String> = [uid(&hog).to_owned()].into();
    eventually("the hog's containers removed", START, async || {
        k.containers_of(&hog_uid).await?.is_empty().then_some(())
    })
    .await;
    let disruption = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionTarget"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(disruption["status"], "True", "{status}");
    assert_eq!(disruption["reason"], "TerminationByKubelet", "{status}");
    let late = eventually("the late BestEffort pod refused", START, async || {
        k.api
            .pod("cl-late")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    uids.insert(uid(&late).to_owned());
    assert_eq!(late["status"]["reason"], "Evicted", "{}", late["status"]);
    assert_eq!(
        late["status"]["message"],
        "Pod was rejected: The node had condition: [MemoryPressure]. "
    );
    let event = eventually("the Evicted event", START, async || {
        let list = k.api.get(&[
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.name=cl-hog,reason=Evicted",
        ])?;
        list["items"].as_array()?.first().cloned()
    })
    .await;
    let annotations = &event["metadata"]["annotations"];
    assert_eq!(annotations["offending_containers"], "hog", "{event}");
    assert_eq!(annotations["starved_resource"], "memory", "{event}");
    let pressure = |want: &'static str| {
        let k = &k;
        async move {
            let node = k.api.node_obj()?;
            let c = node["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "MemoryPressure")?
                .clone();
            (c["status"] == want).then_some(c)
        }
    };
    let log = std::fs::read_to_string(k.rk.log()).unwrap();
    assert!(
        log.contains("hard memory eviction threshold crossed"),
        "the kernel's memcg notification woke the eviction manager"
    );
    let c = eventually("MemoryPressure reported", START, async || {
        pressure("True").await
    })
    .await;
    assert_eq!(c["reason"], "KubeletHasInsufficientMemory", "{c}");
    // The Guaranteed pod stays, never restarted.
    let g = k.api.pod("cl-guaranteed").unwrap();
    assert_eq!(g["status"]["phase"], "Running", "{}", g["status"]);
    assert_eq!(container_status(&g, "main")["restartCount"], 0);
    eventually(
        "MemoryPressure over after the transition period",
        Duration::from_secs(120),
        async || pressure("False").await,
    )
    .await;
    for name in ["cl-guaranteed", "cl-hog", "cl-late"] {
        k.api
            .ok(&["delete", "pod", name, "-n", "default", "--wait=false"]);
    }
    k.finish(&uids).await;
}

/// A pod's own local storage limit on a real node: an emptyDir written
/// past its `sizeLimit` gets its pod evicted (Failed, reason Evicted,
/// upstream's message, no DisruptionTarget), with no node pressure. Volume
/// usage is measured at most once a minute, as upstream's, hence the wait.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn t_an_empty_dir_over_its_size_limit_gets_its_pod_evicted() {
    let mut k = Kubelet::new("sizelimit");
    k.start_ready().await;
    let mut spec = pod_spec();
    spec["nodeName"] = json!(k.api.node);
    spec["containers"][0]["command"] = json!([
        "sh",
        "-c",
        format!("dd if=/dev/zero of=/scratch/f bs=1M count=8 && {SLEEPER}")
    ]);
    spec["containers"][0]["volumeMounts"] = json!([{"name": "scratch", "mountPath": "/scratch"}]);
    spec["volumes"] = json!([{"name": "scratch", "emptyDir": {"sizeLimit": "4Mi"}}]);
    k.api.create(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-sizelimit", "namespace": "default",
                     "labels": {"app": "cl-sizelimit", TEST_LABEL: "1"}},
        "spec": spec,
    }));
    let pod = eventually(
        "evicted for its emptyDir",
        Duration::from_secs(120),
        async || {
            k.api
                .pod("cl-sizelimit")
                .filter(|p| p["status"]["phase"] == "Failed")
        },
    )
    .await;
    let status = &pod["status"];
    assert_eq!(status["reason"], "Evicted", "{status}");
    assert_eq!(
        status["message"],
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"4Mi\". "
    );
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    assert!(
        !conditions.iter().any(|c| c["type"] == "DisruptionTarget"),
        "{status}"
    );
    let node = k.api.node_obj().unwrap();
    let pressure: Vec<&Value> = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["type"].as_str().is_some_and(|t| t.ends_with("Pressure")) && c["status"] != "False"
        })
        .collect();
    assert!(pressure.is_empty(), "{pressure:?}");
    let uids: HashSet<String> = [uid(&pod).to_owned()].into();
    k.api.ok(&[
        "delete",
        "pod",
        "cl-sizelimit",
        "-n",
        "default",
        "--wait=false",
    ]);
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn u_a_resize_reaches_the_running_container_and_its_cgroup() {
    let mut k = Kubelet::new("resize");
    k.start_ready().await;
    let mut spec = pod_spec();
    spec["nodeName"] = json!(k.api.node);
    spec["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"cpu": "200m", "memory": "64Mi"},
    });
    k.api.create(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-resize", "namespace": "default",
                     "labels": {"app": "cl-resize", TEST_LABEL: "1"}},
        "spec": spec,
    }));
    let pod = eventually("cl-resize Running", START, async || {
        k.api.pod("cl-resize").filter(running_with_ip)
    })
    .await;
    let pod_uid = uid(&pod).to_owned();
    let (cid, _) = container_of(&pod);
    let cid = cid.trim_start_matches("containerd://").to_owned();
    let cgroup = |file: &str| {
        let dir =
            k.rk.cgroups
                .dir("cpu")
                .join(format!("kubepods/burstable/pod{pod_uid}/{cid}"));
        cgroup_value(&dir.join(file))
    };
    assert_eq!(cgroup("cpu.cfs_quota_us"), "20000");

    let resize = |cpu_request: &str, cpu_limit: &str| {
        let patch = json!({"spec": {"containers": [{"name": "main", "resources": {
            "requests": {"cpu": cpu_request}, "limits": {"cpu": cpu_limit}}}]}});
        resize_pod(&k.api, "cl-resize", &patch);
    };
    // The cpu limit doubles: the running container's quota follows, no restart.
    resize("100m", "400m");
    let pod = eventually("the resize applied and reported", START, async || {
        let p = k.api.pod("cl-resize")?;
        let c = &p["status"]["containerStatuses"][0];
        (c["resources"]["limits"]["cpu"] == "400m" && resize_settled(&p)).then_some(p)
    })
    .await;
    let c = &pod["status"]["containerStatuses"][0];
    assert_eq!(c["restartCount"], 0, "{c}");
    assert_eq!(c["allocatedResources"]["cpu"], "100m", "{c}");
    assert_eq!(
        container_of(&pod).0.trim_start_matches("containerd://"),
        cid
    );
    assert_eq!(cgroup("cpu.cfs_quota_us"), "40000");
    let events = k.api.ok(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        "involvedObject.name=cl-resize",
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    assert!(events.contains("ResizeStarted"), "{events}");
    assert!(events.contains("ResizeCompleted"), "{events}");

    // More cpu than is left beside another pod: the resize waits,
    // Deferred, and the container keeps what it runs with.
    let mut other = pod_spec();
    other["nodeName"] = json!(k.api.node);
    other["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
    k.api.create(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-resize-other", "namespace": "default",
                     "labels": {"app": "cl-resize-other", TEST_LABEL: "1"}},
        "spec": other,
    }));
    let other = eventually("cl-resize-other Running", START, async || {
        k.api.pod("cl-resize-other").filter(running_with_ip)
    })
    .await;
    resize("1500m", "1500m");
    let (pod, pending) = eventually("the resize deferred", START, async || {
        let p = k.api.pod("cl-resize")?;
        let pending = p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodResizePending")?
            .clone();
        Some((p, pending))
    })
    .await;
    assert_eq!(pending["reason"], "Deferred", "{pending}");
    assert_eq!(
        pending["message"],
        "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000",
    );
    let c = &pod["status"]["containerStatuses"][0];
    assert_eq!(c["resources"]["limits"]["cpu"], "400m", "{c}");
    assert_eq!(cgroup("cpu.cfs_quota_us"), "40000");

    // The other pod goes: the waiting resize is admitted and applied.
    k.api.ok(&[
        "delete",
        "pod",
        "cl-resize-other",
        "-n",
        "default",
        "--wait=false",
    ]);
    eventually("the deferred resize applied", START, async || {
        let p = k.api.pod("cl-resize")?;
        let c = &p["status"]["containerStatuses"][0];
        let conditions = p["status"]["conditions"].as_array()?.clone();
        (c["resources"]["limits"]["cpu"] == "1500m"
            && !conditions.iter().any(|c| c["type"] == "PodResizePending"))
        .then_some(())
    })
    .await;
    assert_eq!(cgroup("cpu.cfs_quota_us"), "150000");

    // A shrink: the pod cgroup's quota narrows after the container's (the
    // kernel refuses a pod quota below a container's).
    let pod_cgroup = |file: &str| {
        let dir =
            k.rk.cgroups
                .dir("cpu")
                .join(format!("kubepods/burstable/pod{pod_uid}"));
        cgroup_value(&dir.join(file))
    };
    assert_eq!(pod_cgroup("cpu.cfs_quota_us"), "150000");
    resize("100m", "200m");
    eventually("the shrink applied", START, async || {
        let p = k.api.pod("cl-resize")?;
        let c = &p["status"]["containerStatuses"][0];
        (c["resources"]["limits"]["cpu"] == "200m" && resize_settled(&p)).then_some(())
    })
    .await;
    assert_eq!(cgroup("cpu.cfs_quota_us"), "20000");
    assert_eq!(pod_cgroup("cpu.cfs_quota_us"), "20000");

    // A memory limit below what the container uses: the resize stops with
    // PodResizeInProgress (Error) and the container keeps its limit.
    let memory_limit = || {
        let dir =
            k.rk.cgroups
                .dir("memory")
                .join(format!("kubepods/burstable/pod{pod_uid}/{cid}"));
        cgroup_value(&dir.join("memory.limit_in_bytes"))
    };
    assert_eq!(memory_limit(), (64 << 20).to_string());
    let resize_memory = |memory: &str| {
        let patch = json!({"spec": {"containers": [{"name": "main", "resources": {
            "requests": {"memory": memory}, "limits": {"memory": memory}}}]}});
        resize_pod(&k.api, "cl-resize", &patch);
    };
    resize_memory("10Ki");
    let in_progress = eventually("the resize stopped below usage", START, async || {
        let p = k.api.pod("cl-resize")?;
        p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodResizeInProgress" && c["reason"] == "Error")
            .cloned()
    })
    .await;
    let message = in_progress["message"].as_str().unwrap_or_default();
    // The pod cgroup's limit (its only container's) is below its usage too.
    assert!(
        message.starts_with("cannot decrease memory limits: [attempting to set pod memory limit (10240) below current usage (")
            && message.contains(
                "attempting to set container \"main\" memory limit (10240) below current usage ("
            ),
        "{in_progress}"
    );
    assert_eq!(memory_limit(), (64 << 20).to_string());
    resize_memory("64Mi");
    eventually("the resize back applied", START, async || {
        let p = k.api.pod("cl-resize")?;
        resize_settled(&p).then_some(())
    })
    .await;

    // Pod-level resources: a container without limits is given the pod's,
    // and a resize of them reaches the pod cgroup and that container.
    let mut plr = pod_spec();
    plr["nodeName"] = json!(k.api.node);
    plr["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"cpu": "200m", "memory": "64Mi"},
    });
    k.api.create(&json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-resize-plr", "namespace": "default",
                     "labels": {"app": "cl-resize-plr", TEST_LABEL: "1"}},
        "spec": plr,
    }));
    let plr = eventually("cl-resize-plr Running", START, async || {
        k.api.pod("cl-resize-plr").filter(running_with_ip)
    })
    .await;
    assert_eq!(plr["status"]["allocatedResources"]["cpu"], "100m", "{plr}");
    assert_eq!(plr["status"]["resources"]["limits"]["cpu"], "200m", "{plr}");
    assert_eq!(
        plr["status"]["observedGeneration"], plr["metadata"]["generation"],
        "{plr}"
    );
    let plr_uid = uid(&plr).to_owned();
    let (plr_cid, _) = container_of(&plr);
    let plr_cid = plr_cid.trim_start_matches("containerd://").to_owned();
    let plr_cgroup = |sub: &str| {
        let dir =
            k.rk.cgroups
                .dir("cpu")
                .join(format!("kubepods/burstable/pod{plr_uid}{sub}"));
        cgroup_value(&dir.join("cpu.cfs_quota_us"))
    };
    let in_container = format!("/{plr_cid}");
    assert_eq!(plr_cgroup(""), "20000");
    assert_eq!(plr_cgroup(&in_container), "20000", "the pod's limit");
    let patch = json!({"spec": {"resources": {
        "requests": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"cpu": "400m", "memory": "64Mi"}}}});
    resize_pod(&k.api, "cl-resize-plr", &patch);
    let plr = eventually("the pod-level resize applied", START, async || {
        let p = k.api.pod("cl-resize-plr")?;
        (p["status"]["resources"]["limits"]["cpu"] == "400m"
            && p["status"]["observedGeneration"] == p["metadata"]["generation"]
            && resize_settled(&p))
        .then_some(p)
    })
    .await;
    assert_eq!(plr_cgroup(""), "40000");
    assert_eq!(plr_cgroup(&in_container), "40000", "the pod's new limit");
    assert_eq!(plr["status"]["containerStatuses"][0]["restartCount"], 0);
    k.api.ok(&[
        "delete",
        "pod",
        "cl-resize-plr",
        "-n",
        "default",
        "--wait=false",
    ]);

    let uids: HashSet<String> = [pod_uid, uid(&other).to_owned(), plr_uid].into();
    k.api.ok(&[
        "delete",
        "pod",
        "cl-resize",
        "-n",
        "default",
        "--wait=false",
    ]);
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn v_a_deferred_resize_waits_across_a_restart() {
    let mut k = Kubelet::new("resize-restart");
    k.start_ready().await;
    let create = |name: &str, resources: Value| {
        let mut spec = pod_spec();
        spec["nodeName"] = json!(k.api.node);
        spec["containers"][0]["resources"] = resources;
        k.api.create(&json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"app": name, TEST_LABEL: "1"}},
            "spec": spec,
        }));
    };
    create(
        "cl-deferred",
        json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}),
    );
    create("cl-deferred-other", json!({"requests": {"cpu": "1500m"}}));
    let mut uids = HashSet::new();
    for name in ["cl-deferred", "cl-deferred-other"] {
        let p = eventually("both Running", START, async || {
            k.api.pod(name).filter(running_with_ip)
        })
        .await;
        uids.insert(uid(&p).to_owned());
    }
    let pod = k.api.pod("cl-deferred").unwrap();
    let deferred_uid = uid(&pod).to_owned();
    let shares_file =
        k.rk.cgroups
            .dir("cpu")
            .join(format!("kubepods/burstable/pod{}", uid(&pod)))
            .join("cpu.shares");
    let shares = || cgroup_value(&shares_file);
    assert_eq!(shares(), "102");
    let patch = json!({"spec": {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}});
    resize_pod(&k.api, "cl-deferred", &patch);
    // The ResizeDeferred events of the pod (repeats counted).
    fn deferred_events(api: &Api, uid: &str) -> u32 {
        let selector = format!("involvedObject.uid={uid},reason=ResizeDeferred");
        let counts = api.ok(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &selector,
            "-o",
            "jsonpath={range .items[*]}{.count}{\"\\n\"}{end}",
        ]);
        counts
            .lines()
            .filter_map(|l| l.trim().parse::<u32>().ok())
            .sum()
    }
    eventually("the resize deferred", START, async || {
        (deferred_events(&k.api, &deferred_uid) >= 1).then_some(())
    })
    .await;

    // Killed and started again, rkubelet keeps the pod's allocation (its
    // checkpoint): the resize is admitted again, deferred again, and the
    // pod cgroup keeps its shares.
    k.rk.kill9();
    k.start_ready().await;
    eventually("the resize deferred again", START, async || {
        (deferred_events(&k.api, &deferred_uid) >= 2).then_some(())
    })
    .await;
    assert_eq!(shares(), "102");
    let pod = k.api.pod("cl-deferred").unwrap();
    let c = &pod["status"]["containerStatuses"][0];
    assert_eq!(c["allocatedResources"]["cpu"], "100m", "{c}");

    k.api.ok(&[
        "delete",
        "pod",
        "cl-deferred-other",
        "-n",
        "default",
        "--wait=false",
    ]);
    eventually("the resize applied", START, async || {
        (shares() == "1024").then_some(())
    })
    .await;
    k.api.ok(&[
        "delete",
        "pod",
        "cl-deferred",
        "-n",
        "default",
        "--wait=false",
    ]);
    k.finish(&uids).await;
}

/// The pids in a cgroup (its cgroup.procs).
fn cgroup_pids(dir: &Path) -> Vec<String> {
    cgroup_value(&dir.join("cgroup.procs"))
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_a_recreated_sandbox_is_reported_with_its_new_ip_and_a_restart() {
    let mut k = Kubelet::new("sandbox");
    k.start_ready().await;
    let name = "cl-sandbox";
    k.api.create(&test_pod(
        &k.api,
        name,
        json!({"terminationGracePeriodSeconds": 5, "containers": [sh_container("c", SLEEPER)]}),
    ));
    let pod = eventually("Running with an IP", START, async || {
        k.api.pod(name).filter(running_with_ip)
    })
    .await;
    let (pod_uid, old_ip) = (uid(&pod).to_owned(), pod["status"]["podIP"].clone());
    let uids: HashSet<String> = [pod_uid.clone()].into();
    let sandbox = k
        .sandboxes_of(&uids)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .expect("a ready sandbox");
    // Its pause process dies, as under an OOM kill or a node-level kill.
    let pids = cgroup_pids(&k.pod_cgroup(&pod).join(&sandbox.id));
    assert!(!pids.is_empty(), "the sandbox's pause process");
    let status = Command::new("kill").arg("-9").args(&pids).status().unwrap();
    assert!(status.success());
    let killed = Instant::now();
    let after = eventually(
        "the API has the new sandbox's IP (one) and restartCount 1",
        Duration::from_secs(5),
        async || {
            k.api.pod(name).filter(|p| {
                let ips = p["status"]["podIPs"].as_array().map_or(0, Vec::len);
                running_with_ip(p)
                    && p["status"]["podIP"] != old_ip
                    && ips == 1
                    && container_status(p, "c")["restartCount"] == 1
            })
        },
    )
    .await;
    eprintln!(
        "MEASURED: sandbox killed -> new IP {} and restartCount 1 in the API in {:.2}s",
        after["status"]["podIP"],
        killed.elapsed().as_secs_f64()
    );
    k.finish(&uids).await;
}

/// A static pod's manifest whose container takes 4 s to stop after SIGTERM
/// (its grace period is 30 s); `version` goes into its script.
fn slow_static(version: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cl-grace", "labels": {"app": "cl-grace", TEST_LABEL: "1"}},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "containers": [sh_container(
                "c",
                &format!("echo {version}; trap 'sleep 4; exit 0' TERM; sleep 3600 & wait"),
            )],
        },
    })
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_b_a_static_pod_stops_within_its_grace_while_its_mirror_shows_it() {
    let mut k = Kubelet::new("grace");
    let file = k.rk.manifests().join("grace.json");
    std::fs::write(&file, slow_static("v1").to_string()).unwrap();
    k.start_ready().await;
    let mirror_name = format!("cl-grace-{}", k.api.node);
    let hash = |p: &Value| p["metadata"]["annotations"]["kubernetes.io/config.mirror"].clone();
    let first = eventually("the mirror pod Running", START, async || {
        k.api.pod(&mirror_name).filter(running_with_ip)
    })
    .await;
    let mut uids: HashSet<String> = [hash(&first).as_str().unwrap().to_owned()].into();

    // Edited: a new pod (as upstream's). The old one gets its grace period
    // while its mirror pod still shows it Running.
    std::fs::write(&file, slow_static("v2").to_string()).unwrap();
    let edited = Instant::now();
    let unchanged = |p: &Value| {
        uid(p) == uid(&first)
            && p["metadata"]["deletionTimestamp"].is_null()
            && p["status"]["phase"] == "Running"
    };
    consistently(
        "the old mirror pod stays Running while its container stops",
        Duration::from_secs(3),
        async || match k.api.pod(&mirror_name) {
            Some(p) if unchanged(&p) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let second = eventually(
        "the edited manifest's mirror pod Running",
        START,
        async || {
            k.api
                .pod(&mirror_name)
                .filter(|p| hash(p) != hash(&first))
                .filter(running_with_ip)
        },
    )
    .await;
    assert!(
        edited.elapsed() >= Duration::from_secs(4),
        "the old container had its 4 s to stop: {:?}",
        edited.elapsed()
    );
    uids.insert(hash(&second).as_str().unwrap().to_owned());

    // Deleted: the mirror pod shows it Running while it stops, then goes.
    std::fs::remove_file(&file).unwrap();
    let removed = Instant::now();
    consistently(
        "the mirror pod stays Running while its container stops",
        Duration::from_secs(3),
        async || match k.api.pod(&mirror_name) {
            Some(p) if uid(&p) == uid(&second) && p["status"]["phase"] == "Running" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    eventually("the mirror pod is gone", START, async || {
        k.api.pod(&mirror_name).is_none().then_some(())
    })
    .await;
    assert!(removed.elapsed() >= Duration::from_secs(4));
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_c_host_to_container_propagation_and_an_env_file() {
    let mut k = Kubelet::new("propagate");
    k.start_ready().await;
    let name = "cl-propagate";
    let mut main = sh_container("c", &format!("echo \"greeting: $GREETING\"; {SLEEPER}"));
    main["env"] = json!([{"name": "GREETING", "valueFrom": {"fileKeyRef": {
        "volumeName": "vars", "path": "env.sh", "key": "GREETING"}}}]);
    main["volumeMounts"] =
        json!([{"name": "shared", "mountPath": "/mnt", "mountPropagation": "HostToContainer"}]);
    let mut init = sh_container(
        "init",
        "printf \"GREETING='hello from a file'\\n\" > /vars/env.sh",
    );
    init["volumeMounts"] = json!([{"name": "vars", "mountPath": "/vars"}]);
    k.api.create(&test_pod(
        &k.api,
        name,
        json!({
            "terminationGracePeriodSeconds": 5,
            "initContainers": [init],
            "containers": [main],
            "volumes": [{"name": "vars", "emptyDir": {}}, {"name": "shared", "emptyDir": {}}],
        }),
    ));
    let pod = eventually(
        "Running (the HostToContainer mount is taken)",
        START,
        async || k.api.pod(name).filter(running_with_ip),
    )
    .await;
    let logs = k.api.ok(&["logs", name, "-n", "default", "-c", "c"]);
    assert!(logs.contains("greeting: hello from a file"), "{logs}");
    // A mount made on the host inside the volume reaches the container.
    let volume = k.rk.dir.path().join(format!(
        "root/pods/{}/volumes/kubernetes.io~empty-dir/shared",
        uid(&pod)
    ));
    let inner = volume.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&inner)
        .status()
        .unwrap();
    assert!(mounted.success());
    std::fs::write(inner.join("seen"), "propagated\n").unwrap();
    let seen = eventually(
        "the host's mount seen in the container",
        START,
        async || exec_out(&k.api, name, "cat /mnt/inner/seen").filter(|o| o.contains("propagated")),
    )
    .await;
    assert_eq!(seen.trim(), "propagated");
    let _ = Command::new("umount").arg(&inner).status();
    k.finish(&[uid(&pod).to_owned()].into()).await;
}

/// The files of one container's log directory, with their sizes.
fn log_files(dir: &Path) -> Vec<(String, u64)> {
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

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_d_logs_rotate_keep_their_link_and_kubectl_logs_follows() {
    let mut k = Kubelet::new("logs");
    k.rk.add_config(
        "containerLogMaxSize: 512Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    );
    k.start_ready().await;
    let name = "cl-chatty";
    // About 2 MB/s of numbered lines.
    let script = "i=0; pad=$(printf '%0100d' 0); while :; do i=$((i+1)); echo \"line $i $pad\"; \
                  case $i in *000) usleep 50000;; esac; done";
    k.api.create(&test_pod(
        &k.api,
        name,
        json!({"terminationGracePeriodSeconds": 2, "containers": [sh_container("c", script)]}),
    ));
    let pod = eventually("Running", START, async || {
        k.api.pod(name).filter(running_with_ip)
    })
    .await;
    let pod_uid = uid(&pod).to_owned();
    let id = container_status(&pod, "c")["containerID"]
        .as_str()
        .and_then(|id| id.split_once("://"))
        .map(|(_, id)| id.to_owned())
        .expect("a container ID");
    let dir = k.rk.logs().join(format!("default_{name}_{pod_uid}/c"));
    // The link log agents tail.
    let link = PathBuf::from(format!("/var/log/containers/{name}_default_c-{id}.log"));
    assert_eq!(std::fs::read_link(&link).unwrap(), dir.join("0.log"));
    // kubectl logs -f from before the rotations.
    let mut follow = k.api.spawn_as(
        &k.api.admin_conf(),
        &["logs", "-f", name, "-n", "default", "-c", "c"],
        None,
    );
    let out = follow.stdout.take().unwrap();
    let followed = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut last = 0u64;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(n) = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()) {
                last = n;
            }
        }
        last
    });
    let rotated = eventually(
        "two rotations: a compressed copy and a plain one",
        START,
        async || {
            let files = log_files(&dir);
            (files.iter().any(|(n, _)| n.ends_with(".gz")) && files.len() >= 3).then_some(files)
        },
    )
    .await;
    eprintln!("MEASURED: log files after rotations: {rotated:?}");
    // Bounded: containerLogMaxFiles files at most, the written one within
    // what one interval at ~2 MB/s adds.
    consistently(
        "at most 3 log files, each bounded",
        Duration::from_secs(7),
        async || {
            let files = log_files(&dir);
            let total: u64 = files.iter().map(|(_, s)| s).sum();
            if files.len() <= 3 && total < 24 << 20 {
                Ok(())
            } else {
                Err(format!("{files:?}"))
            }
        },
    )
    .await;
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        dir.join("0.log"),
        "the link survives"
    );
    let tail = k
        .api
        .ok(&["logs", name, "-n", "default", "-c", "c", "--tail=2"]);
    let newest: u64 = tail
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .expect("kubectl logs reads the current file");
    let _ = follow.kill();
    let _ = follow.wait();
    let last = followed.join().unwrap();
    assert!(
        last + 200_000 > newest && last > 0,
        "the follower followed across the rotations: its last line {last}, the newest {newest}"
    );
    k.api
        .ok(&["delete", "pod", name, "-n", "default", "--wait=false"]);
    let uids: HashSet<String> = [pod_uid].into();
    k.wait_runtime_clean("the pod is gone", &uids).await;
    assert_eq!(
        std::fs::symlink_metadata(&link).unwrap_err().kind(),
        std::io::ErrorKind::NotFound,
        "the link went with the container"
    );
    k.finish(&uids).await;
}

/// A program the test runs beside rkubelet, killed when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The result vector of a Prometheus instant query (None when it fails).
fn prometheus_query(port: u16, query: &str) -> Option<Vec<Value>> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5", "-G"])
        .arg(format!("http://127.0.0.1:{port}/api/v1/query"))
        .arg("--data-urlencode")
        .arg(format!("query={query}"))
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["data"]["result"].as_array().cloned()
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_e_cadvisor_metrics_feed_prometheus_and_the_kube_prometheus_rules() {
    let mut k = Kubelet::new("cadvisor");
    k.start_ready().await;
    let app = "cl-prom";
    let spec = json!({"terminationGracePeriodSeconds": 5, "containers": [
        sh_container("busy", "trap 'exit 0' TERM; while :; do :; done & wait")]});
    for i in 0..2 {
        k.api
            .create(&test_pod(&k.api, &format!("{app}-{i}"), spec.clone()));
    }
    let pods = eventually("both pods Running", START, async || {
        let pods: Vec<Value> = (0..2)
            .filter_map(|i| k.api.pod(&format!("{app}-{i}")))
            .collect();
        (pods.len() == 2 && pods.iter().all(running_with_ip)).then_some(pods)
    })
    .await;
    // The families, through the API server's node proxy.
    let raw = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics/cadvisor", k.api.node),
    ]);
    for family in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_memory_rss",
        "container_memory_cache",
        "container_spec_memory_limit_bytes",
        "container_start_time_seconds",
        "container_network_receive_bytes_total",
        "machine_cpu_cores",
        "machine_memory_bytes",
    ] {
        assert!(raw.contains(&format!("# TYPE {family} ")), "no {family}");
    }
    let series = format!(
        "container=\"busy\",cpu=\"total\",id=\"{}",
        k.rk.cgroups.name
    );
    assert!(
        raw.contains(&series),
        "the busy container's CPU series under its cgroup: {series}"
    );
    // Prometheus scrapes rkubelet over TLS with a client certificate, and
    // kube-state-metrics; the kube-prometheus rules join them.
    let work = k.rk.dir.path().join("prometheus");
    std::fs::create_dir_all(&work).unwrap();
    let ksm_port = 14580;
    let ksm = Daemon(
        Command::new(env("RKUBELET_KUBE_STATE_METRICS"))
            .arg(format!("--kubeconfig={}", k.api.admin_conf().display()))
            .args([
                "--host=127.0.0.1",
                &format!("--port={ksm_port}"),
                "--telemetry-host=127.0.0.1",
            ])
            .args(["--telemetry-port=14581", "--resources=pods"])
            .stdout(Stdio::null())
            .stderr(File::create(work.join("ksm.log")).unwrap())
            .spawn()
            .expect("starting kube-state-metrics"),
    );
    let pki = k.api.dir.join("pki");
    let rules = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/prometheus/rules.yaml"),
    )
    .unwrap();
    std::fs::write(work.join("rules.yaml"), rules).unwrap();
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
         rule_files: [{rules}]\n\
         scrape_configs:\n\
         - job_name: kubelet\n  scheme: https\n  metrics_path: /metrics/cadvisor\n\
         \x20 tls_config: {{cert_file: {cert}, key_file: {key}, insecure_skip_verify: true}}\n\
         \x20 static_configs: [{{targets: ['127.0.0.1:{KUBELET_PORT}']}}]\n\
         \x20 relabel_configs: [{{source_labels: [__metrics_path__], target_label: metrics_path}}]\n\
         - job_name: kube-state-metrics\n  static_configs: [{{targets: ['127.0.0.1:{ksm_port}']}}]\n",
        rules = work.join("rules.yaml").display(),
        cert = pki.join("admin.crt").display(),
        key = pki.join("admin.key").display(),
    );
    std::fs::write(work.join("prometheus.yml"), config).unwrap();
    let prom_port = 14590;
    let prometheus = Daemon(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                work.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                work.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(File::create(work.join("prometheus.log")).unwrap())
            .spawn()
            .expect("starting prometheus"),
    );
    for rule in [
        "node_namespace_pod_container:container_memory_working_set_bytes",
        "node_namespace_pod_container:container_cpu_usage_seconds_total:sum_irate",
    ] {
        let got = eventually(
            &format!("{rule} has each pod's series"),
            START,
            async || {
                let result = prometheus_query(
                    prom_port,
                    &format!("{rule}{{namespace=\"default\",container=\"busy\"}}"),
                )?;
                let with_node = |p: &Value| {
                    result.iter().any(|r| {
                        r["metric"]["pod"] == p["metadata"]["name"]
                            && r["metric"]["node"] == k.api.node.as_str()
                    })
                };
                pods.iter().all(with_node).then_some(result)
            },
        )
        .await;
        eprintln!("MEASURED: {rule}: {} series", got.len());
    }
    let busy = prometheus_query(
        prom_port,
        "node_namespace_pod_container:container_cpu_usage_seconds_total:sum_irate{container=\"busy\"}",
    )
    .unwrap();
    let cores: f64 = busy
        .iter()
        .filter_map(|r| r["value"][1].as_str()?.parse::<f64>().ok())
        .sum();
    assert!(cores > 0.1, "the busy loops use CPU: {cores} cores");
    drop((prometheus, ksm));
    let uids = uids_of(&pods);
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_f_node_logs_through_the_api_and_the_read_only_port() {
    let mut k = Kubelet::new("nodelogs");
    let read_only = KUBELET_PORT + 5;
    k.rk.add_config(&format!(
        "readOnlyPort: {read_only}\nenableSystemLogQuery: true\n"
    ));
    k.start_ready().await;
    // A log file of this test's in /var/log.
    let file = format!("rkubelet-cluster-test-{}.log", std::process::id());
    let path = Path::new("/var/log").join(&file);
    std::fs::write(&path, "a node log line\n").unwrap();
    let proxy = format!("/api/v1/nodes/{}/proxy/logs/", k.api.node);
    let listing = k.api.ok(&["get", "--raw", &proxy]);
    assert!(
        listing.contains(&format!("<a href=\"{file}\">{file}</a>")),
        "{listing}"
    );
    assert_eq!(
        k.api.ok(&["get", "--raw", &format!("{proxy}{file}")]),
        "a node log line\n"
    );
    // The node log query: a file, and a service's log by upstream's heuristics.
    assert_eq!(
        k.api
            .ok(&["get", "--raw", &format!("{proxy}?query=/{file}")]),
        "a node log line\n"
    );
    let service = file.trim_end_matches(".log");
    assert_eq!(
        k.api
            .ok(&["get", "--raw", &format!("{proxy}?query={service}")]),
        "a node log line\n"
    );
    // Never outside /var/log.
    let (code, body) = k.curl(Some("admin"), "/logs/../../etc/passwd");
    assert!(code == 404 && !body.contains("root:"), "{code} {body}");
    std::fs::remove_file(&path).unwrap();
    // The read-only port serves upstream's read endpoints, nothing else.
    let get = |p: &str| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://127.0.0.1:{read_only}{p}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (p, want) in [
        ("/pods", "200"),
        ("/healthz", "200"),
        ("/stats/summary", "200"),
        ("/metrics", "200"),
        ("/metrics/cadvisor", "200"),
        ("/metrics/resource", "200"),
        ("/configz", "404"),
        ("/logs/", "404"),
        ("/containerLogs/default/x/y", "404"),
    ] {
        assert_eq!(get(p), want, "read-only port {p}");
    }
    k.finish(&HashSet::new()).await;
}

/// The e2e signer's part, played here: a CA of the test's, and a leaf for
/// the public key of a PodCertificateRequest's stub CSR, valid one hour from
/// `not_before` (Unix seconds): (leaf PEM, CA PEM).
fn sign_stub_request(csr_der: &[u8], not_before: i64) -> (String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "rkubelet test signer");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let mut leaf = rcgen::CertificateSigningRequestParams::from_der(&csr_der.to_vec().into())
        .expect("the stub CSR parses and its signature verifies");
    let at = |s: i64| time::OffsetDateTime::from_unix_timestamp(s).unwrap();
    leaf.params.not_before = at(not_before);
    leaf.params.not_after = at(not_before + 3600);
    leaf.params.subject_alt_names = vec![rcgen::SanType::URI(
        "spiffe://cluster.local/ns/default/sa/default"
            .try_into()
            .unwrap(),
    )];
    let cert = leaf.signed_by(&issuer).unwrap();
    (cert.pem(), ca_cert.pem())
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_g_a_pod_certificate_is_issued_for_the_pods_own_key() {
    let mut k = Kubelet::new("podcert");
    k.start_ready().await;
    let mut c = sh_container("c", SLEEPER);
    c["volumeMounts"] = json!([{"name": "tls", "mountPath": "/run/tls"}]);
    let spec = json!({
        "terminationGracePeriodSeconds": 2,
        "containers": [c],
        "volumes": [{"name": "tls", "projected": {"sources": [{"podCertificate": {
            "signerName": "rkubelet.test/signer",
            "keyType": "ECDSAP256",
            "maxExpirationSeconds": 3600,
            "credentialBundlePath": "bundle.pem",
            "keyPath": "key.pem",
            "certificateChainPath": "chain.pem",
            "userAnnotations": {"rkubelet.test/why": "test"},
        }}]}}],
    });
    k.api.create(&test_pod(&k.api, "cl-podcert", spec));
    // The request rkubelet makes, through NodeRestriction: for this pod,
    // its service account and this node, UIDs included.
    let pod = eventually("the pod", START, async || k.api.pod("cl-podcert")).await;
    let pod_uid = uid(&pod).to_owned();
    let pcr = eventually("the pod's PodCertificateRequest", START, async || {
        let all = k.api.get(&["podcertificaterequests", "-n", "default"])?;
        all["items"]
            .as_array()?
            .iter()
            .find(|r| r["spec"]["podUID"] == pod_uid.as_str())
            .cloned()
    })
    .await;
    let node_uid = k.api.node_obj().unwrap()["metadata"]["uid"].clone();
    let sa = k
        .api
        .get(&["serviceaccount", "default", "-n", "default"])
        .unwrap();
    let spec = &pcr["spec"];
    assert_eq!(spec["nodeName"], k.api.node.as_str(), "{pcr}");
    assert_eq!(spec["nodeUID"], node_uid, "{pcr}");
    assert_eq!(spec["podName"], "cl-podcert", "{pcr}");
    assert_eq!(spec["serviceAccountName"], "default", "{pcr}");
    assert_eq!(spec["serviceAccountUID"], sa["metadata"]["uid"], "{pcr}");
    assert_eq!(spec["signerName"], "rkubelet.test/signer", "{pcr}");
    assert_eq!(spec["maxExpirationSeconds"], 3600, "{pcr}");
    assert_eq!(
        spec["unverifiedUserAnnotations"]["rkubelet.test/why"],
        "test"
    );
    assert_eq!(
        pcr["metadata"]["ownerReferences"][0]["uid"],
        pod_uid.as_str()
    );
    // Not issued yet: the pod waits in ContainerCreating.
    assert!(
        k.api
            .pod("cl-podcert")
            .is_some_and(|p| !running_with_ip(&p)),
        "the pod must not start without its certificate"
    );

    // Issue it, as a signer does: the status subresource, times the API
    // server checks (lifetime within maxExpirationSeconds, refresh inside it).
    use base64::Engine as _;
    let csr = base64::engine::general_purpose::STANDARD
        .decode(spec["stubPKCS10Request"].as_str().unwrap())
        .unwrap();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let not_before = now - 120;
    let (leaf, ca) = sign_stub_request(&csr, not_before);
    let at = |s: i64| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s as u64));
    let status = json!({"status": {
        "conditions": [{"type": "Issued", "status": "True", "reason": "Reason",
                        "message": "Issued", "lastTransitionTime": at(now)}],
        "certificateChain": format!("{leaf}{ca}"),
        "notBefore": at(not_before),
        "beginRefreshAt": at(not_before + 1800),
        "notAfter": at(not_before + 3600),
    }});
    k.api.ok(&[
        "patch",
        "podcertificaterequest",
        name(&pcr),
        "-n",
        "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
    eventually("the pod runs with its certificate", START, async || {
        k.api.pod("cl-podcert").filter(running_with_ip)
    })
    .await;
    let read = |path: &str| exec_out(&k.api, "cl-podcert", &format!("cat {path}")).unwrap();
    let key = read("/run/tls/key.pem");
    let chain = read("/run/tls/chain.pem");
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----\n"), "PKCS#8");
    // The chain as issued, leaf first; the bundle is the key then the chain.
    assert_eq!(chain, format!("{leaf}{ca}").replace("\r\n", "\n"));
    assert_eq!(read("/run/tls/bundle.pem"), format!("{key}{chain}"));
    // The key is the one the request was made with.
    let key_pair = rcgen::KeyPair::from_pem(&key).unwrap();
    let csr = rcgen::CertificateSigningRequestParams::from_der(&csr.into()).unwrap();
    use rcgen::PublicKeyData as _;
    assert_eq!(key_pair.der_bytes(), csr.public_key.der_bytes());
    k.finish(&HashSet::from([pod_uid])).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_h_the_get_strategy_reads_configmaps_and_secrets_at_each_sync() {
    let mut k = Kubelet::new("getcm");
    // No watches: each sync GETs the objects (syncFrequency 3s).
    k.rk.add_config("configMapAndSecretChangeDetectionStrategy: Get\nsyncFrequency: 3s\n");
    k.start_ready().await;
    let labels = json!({TEST_LABEL: "1"});
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cl-get-cfg", "namespace": "default", "labels": labels},
        "data": {"greeting": "hello"},
    }));
    let mut c = sh_container("c", SLEEPER);
    c["volumeMounts"] = json!([{"name": "cfg", "mountPath": "/etc/cfg"}]);
    c["env"] = json!([{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cl-get-cfg", "key": "greeting"}}}]);
    let spec = json!({
        "terminationGracePeriodSeconds": 2,
        "containers": [c],
        "volumes": [{"name": "cfg", "configMap": {"name": "cl-get-cfg"}}],
    });
    k.api.create(&test_pod(&k.api, "cl-get", spec));
    let pod = eventually("the pod runs", START, async || {
        k.api.pod("cl-get").filter(running_with_ip)
    })
    .await;
    let read = || {
        exec_out(
            &k.api,
            "cl-get",
            "cat /etc/cfg/greeting; echo; echo $GREETING",
        )
    };
    assert_eq!(read().as_deref(), Some("hello\nhello\n"));
    k.api.ok(&[
        "patch",
        "configmap",
        "cl-get-cfg",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"bye"}}"#,
    ]);
    eventually(
        "the edit is in the volume at a later sync",
        START,
        async || read().filter(|o| o.starts_with("bye\n")).map(|_| ()),
    )
    .await;
    k.finish(&HashSet::from([uid(&pod).to_owned()])).await;
}

/// A PersistentVolume of `source` (JSON), for the claim `claim` only.
fn persistent_volume(name: &str, claim: &str, source: Value) -> Value {
    let mut pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {TEST_LABEL: "1"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": "default", "name": claim},
        },
    });
    for (k, v) in source.as_object().unwrap() {
        pv["spec"][k] = v.clone();
    }
    pv
}

/// A claim for the volume `volume` (which may not exist).
fn claim(name: &str, volume: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default", "labels": {TEST_LABEL: "1"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
            "volumeName": volume,
        },
    })
}

fn on_node(node: &str) -> Value {
    json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    ]}]}})
}

/// A pod mounting the claims `(volume, claim, read-only)` at `/<volume>`.
fn claims_pod(api: &Api, name: &str, script: &str, claims: &[(&str, &str, bool)]) -> Value {
    let mut c = sh_container("c", script);
    c["volumeMounts"] = claims
        .iter()
        .map(|(v, _, _)| json!({"name": v, "mountPath": format!("/{v}")}))
        .collect();
    let volumes: Vec<Value> = claims
        .iter()
        .map(|(v, c, ro)| json!({"name": v, "persistentVolumeClaim": {"claimName": c, "readOnly": ro}}))
        .collect();
    test_pod(
        api,
        name,
        json!({
            "terminationGracePeriodSeconds": 2,
            "securityContext": {"fsGroup": 2345},
            "containers": [c],
            "volumes": volumes,
        }),
    )
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_m_claims_mount_their_bound_volumes_and_keep_their_data() {
    let mut k = Kubelet::new("claims");
    k.start_ready().await;
    let host_dir = k.rk.dir.path().join("pv-host");
    let local_dir = k.rk.dir.path().join("pv-local");
    std::fs::create_dir(&local_dir).unwrap();
    let node = k.api.node.clone();
    let path = |d: &Path| d.display().to_string();
    k.api.create(&persistent_volume(
        "cl-pv-host",
        "cl-claim-host",
        json!({"hostPath": {"path": path(&host_dir), "type": "DirectoryOrCreate"}}),
    ));
    k.api.create(&persistent_volume(
        "cl-pv-local",
        "cl-claim-local",
        json!({"local": {"path": path(&local_dir)}, "nodeAffinity": on_node(&node)}),
    ));
    k.api.create(&persistent_volume(
        "cl-pv-away",
        "cl-claim-away",
        json!({"local": {"path": path(&local_dir)}, "nodeAffinity": on_node("elsewhere")}),
    ));
    for (c, v) in [
        ("cl-claim-host", "cl-pv-host"),
        ("cl-claim-local", "cl-pv-local"),
        ("cl-claim-away", "cl-pv-away"),
        ("cl-claim-none", "cl-pv-none"),
    ] {
        k.api.create(&claim(c, v));
    }
    k.api.create(&claims_pod(
        &k.api,
        "cl-claims",
        &format!("echo one > /host/data; echo two > /local/data; {SLEEPER}"),
        &[
            ("host", "cl-claim-host", false),
            ("local", "cl-claim-local", false),
        ],
    ));
    k.api.create(&claims_pod(
        &k.api,
        "cl-unbound",
        SLEEPER,
        &[("none", "cl-claim-none", false)],
    ));
    k.api.create(&claims_pod(
        &k.api,
        "cl-away",
        SLEEPER,
        &[("away", "cl-claim-away", false)],
    ));

    let pod = eventually("the pod with two claims runs", START, async || {
        k.api.pod("cl-claims").filter(running_with_ip)
    })
    .await;
    let pod_uid = uid(&pod).to_owned();
    let mut uids: HashSet<String> = [pod_uid.clone()].into();
    // Written through the claims into the volumes' own directories.
    eventually("the files are written", START, async || {
        let one = std::fs::read_to_string(host_dir.join("data")).ok()?;
        let two = std::fs::read_to_string(local_dir.join("data")).ok()?;
        (one == "one\n" && two == "two\n").then_some(())
    })
    .await;
    // The local PV is bind-mounted where upstream's kubelet mounts it, with
    // the pod's fsGroup.
    let mount = k.rk.root().join(format!(
        "pods/{pod_uid}/volumes/kubernetes.io~local-volume/cl-pv-local"
    ));
    assert!(
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&format!(" {} ", mount.display())),
        "{} is a mount point",
        mount.display()
    );
    assert_eq!(
        exec_out(&k.api, "cl-claims", "stat -c %g /local").as_deref(),
        Some("2345\n")
    );
    // rkubelet killed and started again finds the mount where it left it:
    // mounted once, the pod running on.
    k.rk.kill9();
    let since = k.start();
    eventually("node Ready after the restart", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    let mounted = |m: &Path| {
        let needle = format!(" {} ", m.display());
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&needle))
            .count()
    };
    consistently(
        "the local volume stays mounted once",
        Duration::from_secs(5),
        async || match mounted(&mount) {
            1 => Ok(()),
            n => Err(format!("{} mounted {n} times", mount.display())),
        },
    )
    .await;
    assert!(running_with_ip(&k.api.pod("cl-claims").unwrap()));
    // Waiting, told why, in upstream's words; the other pods go on.
    let unbound = eventually("the unbound claim's pod is told why", START, async || {
        pod_event(&k.api, "cl-unbound", "FailedMount")
    })
    .await;
    assert!(
        unbound.contains("error processing PVC default/cl-claim-none: PVC is not bound"),
        "{unbound}"
    );
    let away = eventually("the other node's volume is refused", START, async || {
        pod_event(&k.api, "cl-away", "FailedMount")
    })
    .await;
    assert!(
        away.contains("PV cl-pv-away's node affinity does not select node"),
        "{away}"
    );
    for p in ["cl-unbound", "cl-away"] {
        let pod = k.api.pod(p).unwrap();
        assert_eq!(pod["status"]["phase"], "Pending", "{p}");
        uids.insert(uid(&pod).to_owned());
    }

    // Deleted, the pod's mount goes and the data stays; a read-only claim
    // reads it in the next pod and cannot write.
    k.api.ok(&[
        "delete",
        "pod",
        "cl-claims",
        "-n",
        "default",
        "--wait=false",
    ]);
    eventually("the pod and its mount are gone", CLEANUP, async || {
        let gone = k.api.pod("cl-claims").is_none() && !mount.exists();
        gone.then_some(())
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(local_dir.join("data")).unwrap(),
        "two\n"
    );
    k.api.create(&claims_pod(
        &k.api,
        "cl-again",
        SLEEPER,
        &[("local", "cl-claim-local", true)],
    ));
    let again = eventually("the next pod runs", START, async || {
        k.api.pod("cl-again").filter(running_with_ip)
    })
    .await;
    uids.insert(uid(&again).to_owned());
    assert_eq!(
        exec_out(&k.api, "cl-again", "cat /local/data").as_deref(),
        Some("two\n")
    );
    assert!(exec_out(&k.api, "cl-again", "touch /local/x").is_none());
    k.finish(&uids).await;
}

/// A loop device on a file under `dir`, detached when dropped.
struct LoopDevice(String);

impl LoopDevice {
    fn new(dir: &Path, bytes: u64) -> LoopDevice {
        let file = dir.join("disk.img");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {}", stdout(&out));
        LoopDevice(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// The loop devices whose backing file is `path`.
fn loops_backed_by(path: &Path) -> usize {
    std::fs::read_dir("/sys/block")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("loop/backing_file")).ok())
        .filter(|b| Path::new(b.trim()) == path)
        .count()
}

/// The volume `volume` of the test pod `pod` in the node's
/// `/stats/summary`, read through the API server's node proxy.
fn summary_volume(api: &Api, pod: &str, volume: &str) -> Option<Value> {
    let raw = api.run(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/stats/summary", api.node),
    ]);
    let v: Value = serde_json::from_slice(&raw.stdout).ok()?;
    let pod = v["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == pod)?;
    pod["volume"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == volume)
        .cloned()
}

/// A pod given the claim `claim` as the device `/dev/xvda`.
fn block_pod(api: &Api, name: &str, claim: &str, read_only: bool, script: &str) -> Value {
    let mut c = sh_container("c", script);
    c["volumeDevices"] = json!([{"name": "disk", "devicePath": "/dev/xvda"}]);
    test_pod(
        api,
        name,
        json!({
            "terminationGracePeriodSeconds": 2,
            "containers": [c],
            "volumes": [{"name": "disk", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}],
        }),
    )
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_m_b_a_raw_block_local_volume_is_a_device_in_the_container() {
    let mut k = Kubelet::new("block");
    k.start_ready().await;
    let disk = LoopDevice::new(k.rk.dir.path(), 8 << 20);
    let node = k.api.node.clone();
    let mut pv = persistent_volume(
        "bl-pv",
        "bl-claim",
        json!({"local": {"path": disk.0}, "nodeAffinity": on_node(&node)}),
    );
    pv["spec"]["volumeMode"] = json!("Block");
    k.api.create(&pv);
    let mut c = claim("bl-claim", "bl-pv");
    c["spec"]["volumeMode"] = json!("Block");
    k.api.create(&c);
    k.api.create(&block_pod(
        &k.api,
        "bl-writer",
        "bl-claim",
        false,
        &format!("echo written-raw > /tmp/m; dd if=/tmp/m of=/dev/xvda bs=512 count=1 conv=sync; {SLEEPER}"),
    ));
    // The same claim asked as a file system: refused in upstream's words.
    let mut mounted = claims_pod(
        &k.api,
        "bl-mounted",
        SLEEPER,
        &[("disk", "bl-claim", false)],
    );
    mounted["spec"]["securityContext"] = json!({});
    k.api.create(&mounted);

    let pod = eventually("the pod with a raw block volume runs", START, async || {
        k.api.pod("bl-writer").filter(running_with_ip)
    })
    .await;
    let pod_uid = uid(&pod).to_owned();
    let mut uids: HashSet<String> = [pod_uid.clone()].into();
    // What the container wrote to its device is on the host's device.
    eventually(
        "the device holds what the container wrote",
        START,
        async || {
            let mut head = vec![0; 12];
            use std::io::Read;
            std::fs::File::open(&disk.0)
                .ok()?
                .read_exact(&mut head)
                .ok()?;
            (head == b"written-raw\n").then_some(())
        },
    )
    .await;
    // Upstream's layout: the pod's link to the device, the device bound in
    // the plugin's global map path for the pod, a loop device holding it.
    let link = k.rk.root().join(format!(
        "pods/{pod_uid}/volumeDevices/kubernetes.io~local-volume/bl-pv"
    ));
    assert_eq!(std::fs::read_link(&link).unwrap(), Path::new(&disk.0));
    let bound = k.rk.root().join(format!(
        "plugins/kubernetes.io~local-volume/volumeDevices/bl-pv/{pod_uid}"
    ));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata(&bound)
            .unwrap()
            .file_type()
            .is_block_device()
    );
    assert_eq!(loops_backed_by(&bound), 1);
    let refused = eventually("the volumeMounts pod is told why", START, async || {
        pod_event(&k.api, "bl-mounted", "FailedMount")
    })
    .await;
    assert!(
        refused.contains("volume disk has volumeMode Block, but is specified in volumeMounts"),
        "{refused}"
    );
    uids.insert(uid(&k.api.pod("bl-mounted").unwrap()).to_owned());
    // Its capacity in the summary (a block volume's only figure).
    let capacity = eventually("the volume's capacity in the summary", START, async || {
        summary_volume(&k.api, "bl-writer", "disk")?["capacityBytes"].as_u64()
    })
    .await;
    assert_eq!(capacity, 8 << 20);
    // kill -9 and a restart: mapped again in place, one loop device still.
    k.rk.kill9();
    let since = k.start();
    eventually("node Ready after the restart", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    consistently(
        "one loop device holds the volume",
        Duration::from_secs(5),
        async || match loops_backed_by(&bound) {
            1 => Ok(()),
            n => Err(format!("{n} loop devices on {}", bound.display())),
        },
    )
    .await;
    assert!(running_with_ip(&k.api.pod("bl-writer").unwrap()));
    // Deleted: link, bind and loop device go; the data stays. A read-only
    // claim gives the next pod a device it reads and cannot write.
    k.api.ok(&[
        "delete",
        "pod",
        "bl-writer",
        "-n",
        "default",
        "--wait=false",
    ]);
    eventually("the pod and its mapping are gone", CLEANUP, async || {
        let gone = k.api.pod("bl-writer").is_none()
            && std::fs::symlink_metadata(&link).is_err()
            && std::fs::symlink_metadata(&bound).is_err()
            && loops_backed_by(&bound) == 0;
        gone.then_some(())
    })
    .await;
    k.api
        .create(&block_pod(&k.api, "bl-reader", "bl-claim", true, SLEEPER));
    let reader = eventually("the read-only pod runs", START, async || {
        k.api.pod("bl-reader").filter(running_with_ip)
    })
    .await;
    uids.insert(uid(&reader).to_owned());
    assert_eq!(
        exec_out(&k.api, "bl-reader", "head -c 12 /dev/xvda").as_deref(),
        Some("written-raw\n")
    );
    assert!(exec_out(&k.api, "bl-reader", "echo x | dd of=/dev/xvda conv=notrunc").is_none());
    k.finish(&uids).await;
}

/// The PersistentVolumes bound to claims labelled for the tests.
fn test_volumes(api: &Api) -> Option<Vec<String>> {
    let pvs = api.get(&["persistentvolumes"])?;
    let claims = api.get(&["persistentvolumeclaims", "-n", "default", "-l", TEST_LABEL])?;
    let ours: HashSet<&str> = claims["items"].as_array()?.iter().map(name).collect();
    Some(
        pvs["items"]
            .as_array()?
            .iter()
            .filter(|pv| ours.contains(pv["spec"]["claimRef"]["name"].as_str().unwrap_or("")))
            .map(|pv| name(pv).to_owned())
            .collect(),
    )
}

/// hack/up.sh's default StorageClass (rancher's local-path-provisioner,
/// started by hack/test.sh with `hack/cluster.sh local-path`): a
/// StatefulSet's claim is provisioned for this node, and the data its pod
/// writes outlives the pod and a kill -9 of rkubelet.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_n_a_stateful_set_keeps_its_data_on_a_local_path_volume() {
    let mut k = Kubelet::new("statefulset");
    assert!(
        k.api.get(&["storageclass", "local-path"]).is_some(),
        "no StorageClass local-path: start the provisioner with hack/cluster.sh local-path"
    );
    k.start_ready().await;
    let script =
        format!("[ -f /data/first ] || cat /proc/sys/kernel/random/uuid > /data/first; {SLEEPER}");
    let mut c = sh_container("c", &script);
    c["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    k.api.create(&json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "cl-sts", "namespace": "default", "labels": {TEST_LABEL: "1"}},
        "spec": {
            "serviceName": "cl-sts",
            "replicas": 1,
            "selector": {"matchLabels": {"app": "cl-sts"}},
            "template": {
                "metadata": {"labels": {"app": "cl-sts", TEST_LABEL: "1"}},
                // Scheduled (not given a nodeName): the scheduler's volume
                // binding names the node the claim is provisioned on.
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": k.api.node},
                    "terminationGracePeriodSeconds": 2,
                    "containers": [c],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data", "labels": {TEST_LABEL: "1"}},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "local-path",
                    "resources": {"requests": {"storage": "16Mi"}},
                },
            }],
        },
    }));
    let first = eventually("the StatefulSet's pod runs", START, async || {
        k.api.pod("cl-sts-0").filter(running_with_ip)
    })
    .await;
    let mut uids: HashSet<String> = [uid(&first).to_owned()].into();
    let read = |api: &Api| exec_out(api, "cl-sts-0", "cat /data/first");
    let written = eventually("the pod writes its data", START, async || {
        read(&k.api).filter(|s| s.len() > 30)
    })
    .await;
    // Its pod deleted, the StatefulSet makes another, which finds the data.
    k.api
        .ok(&["delete", "pod", "cl-sts-0", "-n", "default", "--wait=false"]);
    let second = eventually("the StatefulSet's new pod runs", START, async || {
        k.api
            .pod("cl-sts-0")
            .filter(|p| uid(p) != uid(&first) && running_with_ip(p))
    })
    .await;
    uids.insert(uid(&second).to_owned());
    assert_eq!(read(&k.api).as_deref(), Some(written.as_str()));
    // rkubelet killed and started again: the pod runs on, with its data.
    k.rk.kill9();
    let since = k.start();
    eventually("node Ready after the restart", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    let after = k.api.pod("cl-sts-0").unwrap();
    assert_eq!(uid(&after), uid(&second), "the same pod");
    assert!(running_with_ip(&after), "{}", after["status"]);
    assert_eq!(read(&k.api).as_deref(), Some(written.as_str()));
    // Deleted with its claim, the volume is deleted by the provisioner's
    // helper pod, which rkubelet runs.
    let volumes = test_volumes(&k.api).unwrap_or_default();
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    k.api.delete_labelled();
    eventually("the provisioned volume is deleted", CLEANUP, async || {
        let pvs = k.api.get(&["persistentvolumes"])?;
        let left = pvs["items"]
            .as_array()?
            .iter()
            .any(|pv| name(pv) == volumes[0]);
        (!left).then_some(())
    })
    .await;
    k.finish(&uids).await;
}

/// Generic ephemeral volumes: the controller's claim `<pod>-<volume>`,
/// provisioned by local-path for this node, used while the pod lives and
/// collected with it; a claim of that name the pod does not own refused.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_o_a_generic_ephemeral_volume_lives_and_goes_with_its_pod() {
    let mut k = Kubelet::new("ephemeral");
    assert!(
        k.api.get(&["storageclass", "local-path"]).is_some(),
        "no StorageClass local-path: start the provisioner with hack/cluster.sh local-path"
    );
    k.start_ready().await;
    let eph_pod = |name: &str| {
        let mut c = sh_container("c", &format!("echo hi > /scratch/f; {SLEEPER}"));
        c["volumeMounts"] = json!([{"name": "scratch", "mountPath": "/scratch"}]);
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {TEST_LABEL: "1"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": k.api.node},
                "terminationGracePeriodSeconds": 2,
                "containers": [c],
                "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {TEST_LABEL: "1"}},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": "local-path",
                        "resources": {"requests": {"storage": "8Mi"}},
                    },
                }}}],
            },
        })
    };
    // A claim of the ephemeral name made by hand, not by the controller.
    k.api.create(&persistent_volume(
        "cl-pv-squat",
        "cl-squat-scratch",
        json!({"hostPath": {"path": k.rk.dir.path().join("squat").display().to_string(),
                            "type": "DirectoryOrCreate"}}),
    ));
    k.api.create(&claim("cl-squat-scratch", "cl-pv-squat"));
    // Given its node (the scheduler would hold it back for the same reason).
    let mut squatter = eph_pod("cl-squat");
    squatter["spec"]["nodeName"] = json!(k.api.node);
    k.api.create(&squatter);
    k.api.create(&eph_pod("cl-eph"));
    let pod = eventually("the pod with an ephemeral volume runs", START, async || {
        k.api.pod("cl-eph").filter(running_with_ip)
    })
    .await;
    let mut uids: HashSet<String> = [uid(&pod).to_owned()].into();
    assert_eq!(
        exec_out(&k.api, "cl-eph", "cat /scratch/f").as_deref(),
        Some("hi\n")
    );
    let pvc = k
        .api
        .get(&["persistentvolumeclaim", "cl-eph-scratch", "-n", "default"])
        .unwrap();
    assert_eq!(
        pvc["metadata"]["ownerReferences"][0]["uid"],
        pod["metadata"]["uid"]
    );
    let squat = eventually("the squatted claim is refused", START, async || {
        pod_event(&k.api, "cl-squat", "FailedMount")
    })
    .await;
    assert!(
        squat.contains(
            "PVC default/cl-squat-scratch was not created for pod default/cl-squat (pod is not owner)"
        ),
        "{squat}"
    );
    uids.insert(uid(&k.api.pod("cl-squat").unwrap()).to_owned());
    // The pod deleted, its claim goes with it, and its volume.
    let volume = pvc["spec"]["volumeName"].as_str().unwrap().to_owned();
    k.api
        .ok(&["delete", "pod", "cl-eph", "-n", "default", "--wait=false"]);
    eventually("the claim and its volume are gone", CLEANUP, async || {
        let claim = k.api.get(&["persistentvolumeclaims", "-n", "default"])?;
        let pvs = k.api.get(&["persistentvolumes"])?;
        let left = claim["items"]
            .as_array()?
            .iter()
            .any(|c| name(c) == "cl-eph-scratch")
            || pvs["items"].as_array()?.iter().any(|v| name(v) == volume);
        (!left).then_some(())
    })
    .await;
    k.finish(&uids).await;
}

/// The CSI mock driver of upstream's e2e suite with its registrar
/// (hack/control-plane.sh csi-mock-plugin; node expansion required),
/// external-provisioner, external-attacher and external-resizer, all on one
/// socket; stopped when dropped.
struct CsiMock {
    children: Vec<Child>,
}

/// The mock driver's name (its default).
const CSI_MOCK: &str = "io.kubernetes.storage.mock";

impl CsiMock {
    /// Start them for the rkubelet whose plugins_registry is `registry`;
    /// logs and the socket under `dir`.
    fn start(api: &Api, registry: &Path, dir: &Path) -> CsiMock {
        let socket = dir.join("csi-mock.sock");
        let address = format!("--csi-address={}", socket.display());
        let endpoint = format!("--endpoint={}", socket.display());
        let kubeconfig = format!("--kubeconfig={}", api.dir.join("admin.conf").display());
        let spawn = |binary: &str, args: &[&str]| {
            let log = File::create(dir.join(format!("{binary}.log"))).unwrap();
            Command::new(env(&format!(
                "RKUBELET_{}",
                binary.to_uppercase().replace('-', "_")
            )))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {binary}: {e}"))
        };
        let plugin = spawn(
            "csi-mock-plugin",
            &[
                &endpoint,
                &format!("--registration-dir={}", registry.display()),
                "--enable-attach",
                "--node-expand-required",
                &format!("--statedir={}", dir.join("csi-mock-state").display()),
            ],
        );
        let provisioner = spawn("csi-provisioner", &[&address, &kubeconfig, "--v=5"]);
        let attacher = spawn("csi-attacher", &[&address, &kubeconfig, "--v=5"]);
        let resizer = spawn("csi-resizer", &[&address, &kubeconfig, "--v=5"]);
        CsiMock {
            children: vec![plugin, provisioner, attacher, resizer],
        }
    }
}

impl Drop for CsiMock {
    /// SIGTERM, as a pod's containers get it: the registrar removes its
    /// socket, which deregisters the driver (a SIGKILL would leave it).
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
        }
        for c in &mut self.children {
            let start = Instant::now();
            while c.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The CSINode's entry of `driver`.
fn csinode_driver(api: &Api, driver: &str) -> Option<Value> {
    let csinode = api.get(&["csinode", &api.node])?;
    csinode["spec"]["drivers"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == driver)
        .cloned()
}

/// A CSI driver through upstream's plugin registration, attach and
/// provisioning: the mock driver registers (CSINode, node ID annotation),
/// a claim of its StorageClass is provisioned, attached by the
/// attach/detach controller and external-attacher, staged and published in
/// upstream's layout and reported in use; the claim grown, the resizer
/// hands it to the node, which expands it and finishes the claim's status;
/// it survives a kill -9 of rkubelet; the pod deleted, it is unpublished,
/// unstaged and detached; the driver's socket gone, it is deregistered.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_p_a_csi_volume_is_attached_staged_published_and_torn_down() {
    let mut k = Kubelet::new("csi");
    // A pod's volumes are looked at again every 3 s (a claim to expand),
    // and measured every second.
    k.rk.add_config("syncFrequency: 3s\nvolumeStatsAggPeriod: 1s\n");
    k.start_ready().await;
    let registry = k.rk.root().join("plugins_registry");
    let mock = CsiMock::start(&k.api, &registry, k.rk.dir.path());
    let entry = eventually("the driver is in the CSINode", START, async || {
        csinode_driver(&k.api, CSI_MOCK)
    })
    .await;
    assert_eq!(entry["nodeID"], CSI_MOCK, "the mock's node ID is its name");
    let node = k.api.node_obj().unwrap();
    assert_eq!(
        node["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"],
        format!(r#"{{"{CSI_MOCK}":"{CSI_MOCK}"}}"#)
    );
    let csinode = k.api.get(&["csinode", &k.api.node]).unwrap();
    assert_eq!(csinode["metadata"]["ownerReferences"][0]["kind"], "Node");
    // What a failed run may have left (cluster-scoped: not in finish's
    // sweep).
    let delete_cluster_objects = |api: &Api| {
        let _ = api.run(&[
            "delete",
            "csidriver,storageclass",
            "-l",
            TEST_LABEL,
            "--ignore-not-found",
        ]);
    };
    delete_cluster_objects(&k.api);
    k.api.create(&json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": CSI_MOCK, "labels": {TEST_LABEL: "1"}},
        "spec": {"attachRequired": true, "podInfoOnMount": true,
                 "volumeLifecycleModes": ["Persistent"]},
    }));
    k.api.create(&json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "cl-csi-mock", "labels": {TEST_LABEL: "1"}},
        "provisioner": CSI_MOCK, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": true,
    }));
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "cl-csi-claim", "namespace": "default", "labels": {TEST_LABEL: "1"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "cl-csi-mock",
                 "resources": {"requests": {"storage": "1Mi"}}},
    }));
    let pv = eventually("the claim is provisioned and bound", START, async || {
        let pvc = k.api.get(&["pvc", "cl-csi-claim", "-n", "default"])?;
        (pvc["status"]["phase"] == "Bound")
            .then(|| pvc["spec"]["volumeName"].as_str().map(str::to_owned))
            .flatten()
    })
    .await;
    let handle = k.api.get(&["pv", &pv]).unwrap()["spec"]["csi"]["volumeHandle"]
        .as_str()
        .unwrap()
        .to_owned();
    let pod = claims_pod(
        &k.api,
        "cl-csi",
        &format!("echo csi > /data/f; {SLEEPER}"),
        &[("data", "cl-csi-claim", false)],
    );
    k.api.create(&pod);
    let pod = eventually("the pod with a CSI volume runs", START, async || {
        k.api.pod("cl-csi").filter(running_with_ip)
    })
    .await;
    let mut uids: HashSet<String> = [uid(&pod).to_owned()].into();
    assert_eq!(
        exec_out(&k.api, "cl-csi", "cat /data/f").as_deref(),
        Some("csi\n")
    );
    // Upstream's layout: the publish target with vol_data.json beside it,
    // the global mount under plugins/kubernetes.io/csi.
    let volume_dir =
        k.rk.root()
            .join(format!("pods/{}/volumes/kubernetes.io~csi/{pv}", uid(&pod)));
    let data: Value =
        serde_json::from_slice(&std::fs::read(volume_dir.join("vol_data.json")).unwrap()).unwrap();
    assert_eq!(data["volumeHandle"], handle.as_str());
    assert_eq!(data["driverName"], CSI_MOCK);
    assert_eq!(data["volumeLifecycleMode"], "Persistent");
    assert!(volume_dir.join("mount/f").is_file());
    let driver_dir = k.rk.root().join("plugins/kubernetes.io/csi").join(CSI_MOCK);
    let staged: Vec<PathBuf> = std::fs::read_dir(&driver_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(staged.len(), 1, "{staged:?}");
    assert!(staged[0].join("globalmount").is_dir());
    let unique = format!("kubernetes.io/csi/{CSI_MOCK}^{handle}");
    eventually("the volume reported in use", START, async || {
        let node = k.api.node_obj()?;
        node["status"]["volumesInUse"]
            .as_array()?
            .iter()
            .any(|v| v == unique.as_str())
            .then_some(())
    })
    .await;
    // The claim grown: the resizer expands the volume and hands the claim
    // to the node, which expands the file system and finishes the claim.
    k.api.ok(&[
        "patch",
        "pvc",
        "cl-csi-claim",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"2Mi"}}}}"#,
    ]);
    let claim = eventually("the claim expanded on the node", START, async || {
        let pvc = k.api.get(&["pvc", "cl-csi-claim", "-n", "default"])?;
        let done = pvc["status"]["capacity"]["storage"] == "2Mi"
            && pvc["status"]["allocatedResourceStatuses"]["storage"].is_null();
        done.then_some(pvc)
    })
    .await;
    let conditions = claim["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .all(|c| c["type"] != "FileSystemResizePending"),
        "{conditions:?}"
    );
    // This pod's event (a run before may have left one for its namesake).
    let expected = format!(
        "MountVolume.NodeExpandVolume succeeded for volume {pv:?} {}",
        k.api.node
    );
    let pod_uid = uid(&pod).to_owned();
    eventually(
        "the pod's FileSystemResizeSuccessful event",
        START,
        async || {
            pod_events(&k.api, "cl-csi", Some("FileSystemResizeSuccessful"))?
                .iter()
                .any(|e| {
                    e["involvedObject"]["uid"] == pod_uid.as_str()
                        && e["message"] == expected.as_str()
                })
                .then_some(())
        },
    )
    .await;
    // Its stats from the driver's NodeGetVolumeStats (the mock gives the
    // volume's capacity), with its claim, in the summary and in /metrics.
    let node = k.api.node.clone();
    let volume = eventually("the volume's stats at its new size", START, async || {
        let volume = summary_volume(&k.api, "cl-csi", "data")?;
        (volume["capacityBytes"] == 2 << 20).then_some(volume)
    })
    .await;
    assert_eq!(
        volume["pvcRef"],
        json!({"name": "cl-csi-claim", "namespace": "default"})
    );
    let metrics = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/metrics"),
    ]);
    assert!(
        metrics.contains(
            r#"kubelet_volume_stats_capacity_bytes{namespace="default",persistentvolumeclaim="cl-csi-claim"} 2.097152e+06"#
        ),
        "{metrics}"
    );
    // kill -9 and a restart: the pod runs on with its volume.
    k.rk.kill9();
    let since = k.start();
    eventually("node Ready after the restart", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    assert_eq!(
        exec_out(&k.api, "cl-csi", "cat /data/f").as_deref(),
        Some("csi\n")
    );
    // The pod deleted: unpublished, unstaged, no longer in use, detached.
    k.api
        .ok(&["delete", "pod", "cl-csi", "-n", "default", "--wait=false"]);
    eventually("the volume unpublished and unstaged", CLEANUP, async || {
        let left = volume_dir.exists()
            || std::fs::read_dir(&driver_dir).is_ok_and(|mut d| d.next().is_some());
        (!left).then_some(())
    })
    .await;
    eventually(
        "the volume no longer in use, and detached",
        CLEANUP,
        async || {
            let node = k.api.node_obj()?;
            let in_use = node["status"]["volumesInUse"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v == unique.as_str()));
            let attached = node["status"]["volumesAttached"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v["name"] == unique.as_str()));
            (!in_use && !attached).then_some(())
        },
    )
    .await;
    let log = std::fs::read_to_string(k.rk.dir.path().join("csi-mock-plugin.log")).unwrap();
    // Each call is a line "gRPCCall: {json}", as upstream's specs read it:
    // the Node calls, each with its error ("" when it succeeded).
    let node_calls: Vec<(String, String)> = log
        .lines()
        .filter_map(|l| l.split_once("gRPCCall: "))
        .filter_map(|(_, json)| serde_json::from_str::<serde_json::Value>(json).ok())
        .filter_map(|call| {
            let method = call["Method"].as_str()?.strip_prefix("/csi.v1.Node/")?;
            Some((method.to_owned(), call["Error"].as_str()?.to_owned()))
        })
        .collect();
    assert!(
        node_calls.contains(&("NodeExpandVolume".into(), String::new())),
        "{node_calls:?}"
    );
    let calls: Vec<&str> = node_calls
        .iter()
        .map(|(method, _)| method.as_str())
        .filter(|c| {
            [
                "NodeStageVolume",
                "NodePublishVolume",
                "NodeUnpublishVolume",
                "NodeUnstageVolume",
            ]
            .contains(c)
        })
        .collect();
    assert_eq!(
        calls.first().copied(),
        Some("NodeStageVolume"),
        "staged before published: {calls:?}"
    );
    assert_eq!(
        &calls[calls.len() - 2..],
        ["NodeUnpublishVolume", "NodeUnstageVolume"],
        "{calls:?}"
    );
    // A raw block claim: staged and published as a block volume (the
    // driver makes a device at the publish path), mapped for the pod in
    // upstream's layout, a device in the container; all of it gone with
    // the pod.
    k.api.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "cl-csi-block", "namespace": "default", "labels": {TEST_LABEL: "1"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "cl-csi-mock",
                 "volumeMode": "Block", "resources": {"requests": {"storage": "1Mi"}}},
    }));
    let block_pv = eventually(
        "the block claim is provisioned and bound",
        START,
        async || {
            let pvc = k.api.get(&["pvc", "cl-csi-block", "-n", "default"])?;
            (pvc["status"]["phase"] == "Bound")
                .then(|| pvc["spec"]["volumeName"].as_str().map(str::to_owned))
                .flatten()
        },
    )
    .await;
    k.api.create(&block_pod(
        &k.api,
        "cl-csi-raw",
        "cl-csi-block",
        false,
        &format!(
            "echo raw-csi > /tmp/m; dd if=/tmp/m of=/dev/xvda bs=512 count=1 conv=sync; {SLEEPER}"
        ),
    ));
    let raw = eventually("the pod with a CSI block volume runs", START, async || {
        k.api.pod("cl-csi-raw").filter(running_with_ip)
    })
    .await;
    let raw_uid = uid(&raw).to_owned();
    uids.insert(raw_uid.clone());
    eventually(
        "the container reads back what it wrote",
        START,
        async || {
            (exec_out(&k.api, "cl-csi-raw", "head -c 8 /dev/xvda")? == "raw-csi\n").then_some(())
        },
    )
    .await;
    let devices = k.rk.root().join("plugins/kubernetes.io/csi/volumeDevices");
    let publish = devices.join(format!("publish/{block_pv}/{raw_uid}"));
    let link = k.rk.root().join(format!(
        "pods/{raw_uid}/volumeDevices/kubernetes.io~csi/{block_pv}"
    ));
    assert_eq!(std::fs::read_link(&link).unwrap(), publish);
    use std::os::unix::fs::FileTypeExt;
    let bound = devices.join(format!("{block_pv}/dev/{raw_uid}"));
    assert!(
        std::fs::metadata(&bound)
            .unwrap()
            .file_type()
            .is_block_device()
    );
    let data: Value = serde_json::from_slice(
        &std::fs::read(devices.join(format!("{block_pv}/data/vol_data.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(data["specVolID"], block_pv.as_str());
    assert_eq!(data["driverName"], CSI_MOCK);
    assert!(devices.join(format!("staging/{block_pv}")).is_dir());
    k.api.ok(&[
        "delete",
        "pod",
        "cl-csi-raw",
        "-n",
        "default",
        "--wait=false",
    ]);
    eventually(
        "the block volume unmapped, unpublished and unstaged",
        CLEANUP,
        async || {
            let left = std::fs::symlink_metadata(&link).is_ok()
                || devices.join(&block_pv).exists()
                || devices.join(format!("staging/{block_pv}")).exists()
                || devices.join(format!("publish/{block_pv}")).exists();
            (!left).then_some(())
        },
    )
    .await;
    let log = std::fs::read_to_string(k.rk.dir.path().join("csi-mock-plugin.log")).unwrap();
    let block_calls: Vec<String> = log
        .lines()
        .filter_map(|l| l.split_once("gRPCCall: "))
        .filter_map(|(_, json)| serde_json::from_str::<serde_json::Value>(json).ok())
        .filter(|call| {
            call.to_string()
                .contains(&format!("volumeDevices/staging/{block_pv}"))
                || call.to_string().contains(&publish.display().to_string())
        })
        .filter_map(|call| {
            Some(format!(
                "{} {}",
                call["Method"].as_str()?.strip_prefix("/csi.v1.Node/")?,
                call["Error"].as_str()?
            ))
        })
        .collect();
    assert_eq!(
        block_calls,
        [
            "NodeStageVolume ",
            "NodePublishVolume ",
            "NodeUnpublishVolume ",
            "NodeUnstageVolume ",
        ],
        "{log}"
    );
    // The claim deleted, the provisioner deletes its volume.
    k.api.ok(&[
        "delete",
        "pvc",
        "cl-csi-claim",
        "-n",
        "default",
        "--wait=false",
    ]);
    eventually("the provisioned volume is deleted", CLEANUP, async || {
        k.api.get(&["pv", &pv]).is_none().then_some(())
    })
    .await;
    // The driver gone, it is deregistered.
    drop(mock);
    eventually("the driver leaves the CSINode", CLEANUP, async || {
        csinode_driver(&k.api, CSI_MOCK).is_none().then_some(())
    })
    .await;
    k.api.delete_labelled();
    delete_cluster_objects(&k.api);
    k.finish(&uids).await;
}

/// CSRs of `signer` by `user` created at or after `since`.
fn node_csrs(api: &Api, signer: &str, user: impl Fn(&str) -> bool, since: &str) -> Vec<Value> {
    let list = api.get(&["csr"]).unwrap_or_default();
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            c["spec"]["signerName"] == signer
                && c["spec"]["username"].as_str().is_some_and(&user)
                && c["metadata"]["creationTimestamp"]
                    .as_str()
                    .is_some_and(|t| not_before(t, since))
        })
        .collect()
}

/// The CSR was approved by the controller manager's csrapproving and
/// signed.
fn auto_approved_and_issued(csr: &Value) -> bool {
    let approved = csr["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Approved" && c["reason"] == "AutoApproved")
    });
    approved
        && csr["status"]["certificate"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
}

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// Whether a TLS handshake with the kubelet API verifies against `ca`.
fn kubelet_api_verifies(ca: &Path) -> bool {
    Command::new("openssl")
        .args(["s_client", "-brief", "-verify_return_error", "-connect"])
        .arg(format!("127.0.0.1:{KUBELET_PORT}"))
        .arg("-CAfile")
        .arg(ca)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The pair file `<cert-dir>/kubelet-client-current.pem` points at.
fn current_client_pair(cert_dir: &Path) -> PathBuf {
    let current = cert_dir.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("kubelet-client-current.pem is a symlink");
    assert!(target.is_absolute(), "{target:?}");
    target
}

/// PodAndContainerStatsFromCRI: a pod's stats are its sandbox's from the
/// runtime (ListPodSandboxStats), its network and process count with them,
/// and `/metrics/cadvisor` is the runtime's ListPodSandboxMetrics under its
/// descriptors, beside the machine's families. On containerd 1.6, which
/// has neither call, the cgroups are read and only the machine is left.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_q_pod_and_container_stats_come_from_the_runtime_with_its_gate() {
    let mut k = Kubelet::new("cristats");
    k.rk.add_config("featureGates:\n  PodAndContainerStatsFromCRI: true\n");
    k.start_ready().await;
    let name = "cl-cristats";
    let spec = json!({"containers": [
        sh_container("busy", "trap 'exit 0' TERM; while :; do :; done & wait")]});
    k.api.create(&test_pod(&k.api, name, spec));
    let pod = eventually("Running", START, async || {
        k.api.pod(name).filter(running_with_ip)
    })
    .await;
    let containerd2 = !k
        .rk
        .cri
        .version()
        .await
        .unwrap()
        .runtime_version
        .starts_with("1.");
    let stats = eventually(
        "the pod's CPU and its container in the summary",
        START,
        async || {
            let raw = k.api.run(&[
                "get",
                "--raw",
                &format!("/api/v1/nodes/{}/proxy/stats/summary", k.api.node),
            ]);
            let v: Value = serde_json::from_slice(&raw.stdout).ok()?;
            let p = v["pods"]
                .as_array()?
                .iter()
                .find(|p| p["podRef"]["name"] == name)?;
            (p["cpu"]["usageCoreNanoSeconds"].as_u64()? > 0 && p["containers"][0]["name"] == "busy")
                .then(|| p.clone())
        },
    )
    .await;
    if containerd2 {
        assert_eq!(stats["network"]["name"], "eth0", "{stats}");
        assert!(stats["network"]["rxBytes"].as_u64().is_some(), "{stats}");
        // The shell and its busy loop.
        assert!(
            stats["process_stats"]["process_count"].as_u64() >= Some(2),
            "{stats}"
        );
    }
    let busy = k.running_container(uid(&pod), "busy").await.unwrap();
    let raw = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics/cadvisor", k.api.node),
    ]);
    assert!(raw.contains("# TYPE machine_cpu_cores gauge\n"), "{raw}");
    let cpu = raw.lines().find(|l| {
        l.starts_with("container_cpu_usage_seconds_total{")
            && l.contains(&format!("id=\"{}\"", busy.id))
            && l.contains(&format!("pod=\"{name}\""))
    });
    if containerd2 {
        assert!(
            raw.contains("# HELP container_cpu_usage_seconds_total Cumulative CPU time consumed in seconds.\n"),
            "containerd's own help: {raw}"
        );
        assert!(cpu.is_some(), "the busy container's CPU, by its id: {raw}");
    } else {
        assert!(cpu.is_none(), "{raw}");
    }
    // Not the cgroup walk's families.
    assert!(!raw.contains("container_scrape_error"), "{raw}");
    let uids = uids_of(&[pod]);
    k.finish(&uids).await;
}

/// The resource of upstream's sample device plugin, and its devices.
const SAMPLE_RESOURCE: &str = "example.com/resource";

/// Upstream's sample device plugin for the node whose device plugin
/// directory is `dir`, with its CDI devices (CDI_ENABLED). It registers on
/// the fixed /var/lib/kubelet/device-plugins/kubelet.sock and writes its
/// CDI spec to the fixed /var/run/cdi: it runs in a mount namespace of its
/// own where those are `dir` and `cdi`, the CDI spec directory of the
/// test's containerd (over tmpfs mounts on /var/lib and /run, so the
/// host's are untouched). Its Allocate makes /tmp/<device> on the host and
/// mounts it at the same path, and names the CDI device `CDI-<device>`.
fn sample_device_plugin(dir: &Path, cdi: &Path, log: &Path) -> SamplePlugin {
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs tmpfs /var/lib && mkdir -p /var/lib/kubelet/device-plugins \
             && mount --bind \"$0\" /var/lib/kubelet/device-plugins \
             && mount -t tmpfs tmpfs /run && mkdir -p /run/cdi && mount --bind \"$1\" /run/cdi \
             && exec \"$2\"",
        )
        .arg(dir)
        .arg(cdi)
        .arg(env("RKUBELET_SAMPLE_DEVICE_PLUGIN"))
        .env("PLUGIN_SOCK_DIR", "/var/lib/kubelet/device-plugins")
        .env("CDI_ENABLED", "1")
        .stdout(File::create(log).unwrap())
        .stderr(Stdio::from(
            File::create(log.with_extension("err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    SamplePlugin {
        daemon: Daemon(child),
        cdi: cdi.to_owned(),
    }
}

/// The sample device plugin, killed when dropped, pass or fail, with what
/// it leaves on the host: the files its Allocate made for its devices and
/// its CDI spec.
struct SamplePlugin {
    daemon: Daemon,
    cdi: PathBuf,
}

impl Drop for SamplePlugin {
    fn drop(&mut self) {
        let _ = self.daemon.0.kill();
        let _ = self.daemon.0.wait();
        for leftover in [
            PathBuf::from("/tmp/Dev-1"),
            PathBuf::from("/tmp/Dev-2"),
            self.cdi.join("example.com.json"),
        ] {
            let _ = std::fs::remove_file(leftover);
        }
    }
}

/// The node's capacity and allocatable of `resource`.
fn node_extended(api: &Api, resource: &str) -> Option<(String, String)> {
    let node = api.node_obj()?;
    let status = &node["status"];
    Some((
        status["capacity"][resource].as_str()?.to_owned(),
        status["allocatable"][resource].as_str()?.to_owned(),
    ))
}

/// The devices PodResources' List gives the container `container` of pod
/// `name`, by resource.
/// What PodResources' List says of container `container` of pod `name`.
async fn listed(
    root: &Path,
    name: &str,
    container: &str,
) -> Option<kubelet_plugin_api::podresources::ContainerResources> {
    use kubelet_plugin_api::podresources::ListPodResourcesRequest;
    use kubelet_plugin_api::podresources::pod_resources_lister_client::PodResourcesListerClient;
    let channel = kubelet_plugin_api::unix_channel(
        root.join("pod-resources/kubelet.sock"),
        Duration::from_secs(5),
    );
    let listed = PodResourcesListerClient::new(channel)
        .list(ListPodResourcesRequest {})
        .await
        .ok()?
        .into_inner();
    let pod = listed.pod_resources.into_iter().find(|p| p.name == name)?;
    pod.containers.into_iter().find(|c| c.name == container)
}

/// The devices PodResources lists for a container: (resource, IDs).
async fn listed_devices(
    root: &Path,
    name: &str,
    container: &str,
) -> Option<Vec<(String, Vec<String>)>> {
    let c = listed(root, name, container).await?;
    Some(
        c.devices
            .into_iter()
            .map(|d| (d.resource_name, d.device_ids))
            .collect(),
    )
}

/// The CPUs a pod's container may run on, as its first process sees them
/// (`Cpus_allowed_list`, which its cgroup's cpuset sets).
fn allowed_cpus(api: &Api, pod: &str, container: &str) -> Option<String> {
    let out = api.run(&["exec", pod, "-c", container, "--", "cat", "/proc/1/status"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_owned())
}

/// The `cpuset.mems` the runtime says a pod's container runs with (its
/// CRI status' resources: empty is the runtime's default, the parent's
/// nodes).
async fn runtime_mems(k: &Kubelet, pod: &str) -> Option<String> {
    let (id, _) = container_of(&k.api.pod(pod)?);
    let id = id.strip_prefix("containerd://")?;
    let status = k.rk.cri.container_status(id).await.ok()?;
    Some(status.resources?.linux?.cpuset_mems)
}

/// The static CPU manager on a real runtime: a Guaranteed pod's container
/// with one whole CPU runs on a CPU of its own (not the reserved CPU 0);
/// a BestEffort container already running shrinks to the others within a
/// reconcile period (UpdateContainerResources) and grows back once the pod
/// is deleted; PodResources lists the CPU; the state file is upstream's.
/// Under the `single-numa-node` topology manager policy: the pinned
/// container is admitted aligned (its NUMA node has the CPU), a pod asking
/// for every CPU (one is reserved) is refused with upstream's
/// TopologyAffinityError, and the metrics count both. Under the Static
/// memory manager (reservedMemory adding up to kubeReserved and the hard
/// eviction threshold): the pinned container's memory is on its NUMA node,
/// the runtime runs it with that `cpuset.mems` (the shared one with the
/// runtime's default, empty), PodResources lists it and the state file is
/// upstream's, across the kill -9; a resize of its memory is Infeasible.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_s_the_static_cpu_manager_gives_a_guaranteed_container_its_own_cpu() {
    let mut k = Kubelet::new("cpus");
    k.rk.add_config(
        "cpuManagerPolicy: static\ncpuManagerReconcilePeriod: 1s\n\
         kubeReserved:\n  cpu: 500m\n  memory: 255Mi\n\
         topologyManagerPolicy: single-numa-node\nmemoryManagerPolicy: Static\n\
         reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 256Mi\n",
    );
    k.start_ready().await;
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = online.trim();
    let shared = "cl-shared";
    k.api.create(&test_pod(
        &k.api,
        shared,
        json!({"terminationGracePeriodSeconds": 1, "containers": [sh_container("c", "sleep 3600")]}),
    ));
    eventually("the shared container on every CPU", START, async || {
        k.api.pod(shared).filter(running_with_ip)?;
        (allowed_cpus(&k.api, shared, "c")? == online).then_some(())
    })
    .await;
    let pinned = "cl-pinned";
    let mut c = sh_container("c", "sleep 3600");
    c["resources"] = json!({"limits": {"cpu": "1", "memory": "64Mi"}});
    k.api.create(&test_pod(
        &k.api,
        pinned,
        json!({"terminationGracePeriodSeconds": 1, "containers": [c]}),
    ));
    let own = eventually("the pinned container on one CPU", START, async || {
        k.api.pod(pinned).filter(running_with_ip)?;
        let cpus = allowed_cpus(&k.api, pinned, "c")?;
        cpus.parse::<u32>().ok()
    })
    .await;
    assert_ne!(own, 0, "the reserved CPU is never given");
    let pool: Vec<u32> = kubelet_core::cpuset::parse(online)
        .unwrap()
        .into_iter()
        .filter(|c| *c != own)
        .collect();
    let pool = kubelet_core::cpuset::format(&pool.into_iter().collect());
    eventually(
        "the shared container off the pinned CPU",
        START,
        async || (allowed_cpus(&k.api, shared, "c")? == pool).then_some(()),
    )
    .await;
    // Every CPU asked: one is reserved, so no NUMA node can give them.
    let greedy = "cl-greedy";
    let mut c = sh_container("c", "sleep 3600");
    let all = kubelet_core::cpuset::parse(online).unwrap().len();
    c["resources"] = json!({"limits": {"cpu": all.to_string(), "memory": "64Mi"}});
    k.api
        .create(&test_pod(&k.api, greedy, json!({"containers": [c]})));
    let refused = eventually("the greedy pod refused", START, async || {
        k.api
            .pod(greedy)
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(
        refused["status"]["reason"], "TopologyAffinityError",
        "{refused}"
    );
    assert_eq!(
        refused["status"]["message"],
        "Pod was rejected: Resources cannot be allocated with Topology locality",
        "{refused}"
    );
    let metrics = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics", k.api.node),
    ]);
    let value = |name: &str, labels: &[&str]| {
        metrics
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .find(|l| labels.iter().all(|label| l.contains(label)))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    let numa = [r#"scope="container""#, r#"boundary="numa_node""#];
    // Every container admitted counts (upstream's): the shared one's too.
    assert!(
        value("kubelet_container_aligned_compute_resources_count", &numa) >= Some(2.0),
        "the shared and the pinned containers aligned"
    );
    assert_eq!(
        value(
            "kubelet_container_aligned_compute_resources_failure_count",
            &numa
        ),
        Some(1.0),
        "the greedy one not"
    );
    assert_eq!(
        value("kubelet_topology_manager_admission_errors_total", &[]),
        Some(1.0)
    );
    assert!(
        value("kubelet_topology_manager_admission_requests_total", &[]) >= Some(3.0),
        "shared, pinned and greedy admitted or refused"
    );
    let root = k.rk.root();
    let cpu_ids = listed(&root, pinned, "c").await.map(|c| c.cpu_ids);
    assert_eq!(cpu_ids, Some(vec![i64::from(own)]));
    let state = std::fs::read_to_string(root.join("cpu_manager_state")).unwrap();
    assert!(
        state.contains(&format!(r#""defaultCpuSet":"{pool}""#))
            && state.contains(&format!(r#"{{"c":"{own}"}}"#)),
        "{state}"
    );
    // Its memory, on NUMA node 0 (this machine's only one).
    let pinned_uid = uid(&k.api.pod(pinned).unwrap()).to_owned();
    let memory_state = std::fs::read_to_string(root.join("memory_manager_state")).unwrap();
    let block = r#"{"c":[{"numaAffinity":[0],"type":"memory","size":67108864}]}"#;
    assert!(
        memory_state
            .starts_with(r#"{"policyName":"Static","machineState":{"0":{"numberOfAssignments":1,"#)
            && memory_state.contains(&format!(r#""{pinned_uid}":{block}"#)),
        "{memory_state}"
    );
    assert_eq!(runtime_mems(&k, pinned).await.as_deref(), Some("0"));
    assert_eq!(runtime_mems(&k, shared).await.as_deref(), Some(""));
    let memory = listed(&root, pinned, "c").await.map(|c| c.memory);
    let memory: Vec<(String, u64, Vec<i64>)> = memory
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let nodes = m.topology.map(|t| t.nodes.iter().map(|n| n.id).collect());
            (m.memory_type, m.size, nodes.unwrap_or_default())
        })
        .collect();
    assert_eq!(memory, [("memory".to_owned(), 64 << 20, vec![0])]);
    assert_eq!(
        value("kubelet_memory_manager_pinning_requests_total", &[]),
        Some(1.0),
        "the pinned container's memory; the shared one is not Guaranteed, the greedy one refused before"
    );
    // kill -9 and a new start: the state is restored, the pinned container
    // keeps its CPU and the shared one stays off it.
    let before = container_of(&k.api.pod(pinned).unwrap());
    k.rk.kill9();
    let since = k.start();
    eventually("node Ready after the restart", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    assert_eq!(container_of(&k.api.pod(pinned).unwrap()), before);
    let cpu_ids = eventually("the CPU listed again", START, async || {
        listed(&root, pinned, "c").await.map(|c| c.cpu_ids)
    })
    .await;
    assert_eq!(cpu_ids, [i64::from(own)]);
    assert_eq!(allowed_cpus(&k.api, pinned, "c"), Some(own.to_string()));
    assert_eq!(allowed_cpus(&k.api, shared, "c"), Some(pool.clone()));
    let restored = std::fs::read_to_string(root.join("memory_manager_state")).unwrap();
    assert!(
        restored.contains(&format!(r#""{pinned_uid}":{block}"#)),
        "{restored}"
    );
    // Its pinned memory cannot be resized in place (upstream's Infeasible,
    // the alpha InPlacePodVerticalScalingExclusiveMemory gate off).
    let more = json!({"cpu": "1", "memory": "128Mi"});
    resize_pod(
        &k.api,
        pinned,
        &json!({"spec": {"containers": [{"name": "c", "resources": {"requests": more, "limits": more}}]}}),
    );
    let pending = eventually("the memory resize infeasible", START, async || {
        k.api.pod(pinned)?["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodResizePending")
            .cloned()
    })
    .await;
    assert_eq!(pending["reason"], "Infeasible", "{pending}");
    assert_eq!(
        pending["message"],
        r#"Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static""#
    );
    let uids: HashSet<String> = [shared, pinned, greedy]
        .iter()
        .filter_map(|n| Some(uid(&k.api.pod(n)?).to_owned()))
        .collect();
    k.api.ok(&["delete", "pod", pinned, "--wait=true"]);
    eventually(
        "the shared container back on every CPU",
        START,
        async || (allowed_cpus(&k.api, shared, "c")? == online).then_some(()),
    )
    .await;
    k.finish(&uids).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_r_a_device_plugins_devices_are_allocated_listed_and_kept_across_kill9() {
    let mut k = Kubelet::new("devices");
    k.start_ready().await;
    let dir = k.rk.root().join("device-plugins");
    // The test's containerd's CDI spec directory, beside its socket.
    let endpoint = env("RKUBELET_E2E_ENDPOINT");
    let cdi = Path::new(endpoint.trim_start_matches("unix://"))
        .parent()
        .unwrap()
        .join("cdi");
    let plugin = sample_device_plugin(
        &dir,
        &cdi,
        &k.rk.dir.path().join("sample-device-plugin.log"),
    );

    eventually(
        "the plugin's two devices in capacity and allocatable",
        START,
        async || {
            (node_extended(&k.api, SAMPLE_RESOURCE)? == ("2".into(), "2".into())).then_some(())
        },
    )
    .await;
    let name = "cl-device";
    let mut c = sh_container("c", "ls /tmp; sleep 3600 & wait");
    c["resources"] = json!({"limits": {SAMPLE_RESOURCE: "1"}});
    k.api
        .create(&test_pod(&k.api, name, json!({"containers": [c]})));
    let pod = eventually("Running", START, async || {
        k.api.pod(name).filter(running_with_ip)
    })
    .await;
    // The device the plugin gave: its file, mounted from the host.
    let listed = eventually("listed by PodResources", START, async || {
        listed_devices(&k.rk.root(), name, "c")
            .await
            .filter(|d| !d.is_empty())
    })
    .await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].0, SAMPLE_RESOURCE);
    let device = listed[0].1[0].clone();
    assert!(device == "Dev-1" || device == "Dev-2", "{device}");
    let files = exec_out(&k.api, name, "ls /tmp").unwrap_or_default();
    assert!(
        files.lines().any(|l| l == device),
        "/tmp holds {files:?}, not {device}"
    );
    // Its CDI device, as containerd applied the plugin's spec.
    let cdi_env = exec_out(&k.api, name, "echo $CDI_DEVICE").unwrap_or_default();
    assert_eq!(
        cdi_env.trim(),
        format!("CDI-{device}"),
        "the CDI device's env"
    );
    // Its health in the status (ResourceHealthStatus).
    let health = &container_status(&pod, "c")["allocatedResourcesStatus"];
    assert_eq!(health[0]["name"], SAMPLE_RESOURCE, "{health}");
    assert_eq!(
        health[0]["resources"][0]["resourceID"],
        device.as_str(),
        "{health}"
    );
    assert_eq!(health[0]["resources"][0]["health"], "Healthy", "{health}");
    // The checkpoint is upstream's.
    let checkpoint = std::fs::read_to_string(dir.join("kubelet_internal_checkpoint")).unwrap();
    assert!(
        checkpoint.contains(&format!("\"{device}\"")),
        "{checkpoint}"
    );
    let before = container_of(&pod);

    // kill -9 and a new start: the plugin registers again, the pod keeps
    // its container and its device.
    k.rk.kill9();
    let since = k.start();
    eventually("node Ready after the restart", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    eventually("the plugin registered again", START, async || {
        (node_extended(&k.api, SAMPLE_RESOURCE)? == ("2".into(), "2".into())).then_some(())
    })
    .await;
    let again = eventually("the same device listed", START, async || {
        listed_devices(&k.rk.root(), name, "c")
            .await
            .filter(|d| !d.is_empty())
    })
    .await;
    assert_eq!(again, listed);
    let pod = k.api.pod(name).unwrap();
    assert_eq!(container_of(&pod), before, "{}", pod["status"]);
    assert!(running_with_ip(&pod), "{}", pod["status"]);

    // A second pod takes the other device; a third finds none.
    let other = "cl-device-2";
    let mut c2 = sh_container("c", "ls /tmp; sleep 3600 & wait");
    c2["resources"] = json!({"limits": {SAMPLE_RESOURCE: "1"}});
    k.api.create(&test_pod(
        &k.api,
        other,
        json!({"containers": [c2.clone()]}),
    ));
    eventually("the second pod Running", START, async || {
        k.api.pod(other).filter(running_with_ip)
    })
    .await;
    let second = listed_devices(&k.rk.root(), other, "c").await.unwrap();
    assert_ne!(second[0].1, listed[0].1, "two pods, two devices");
    let third = "cl-device-3";
    k.api
        .create(&test_pod(&k.api, third, json!({"containers": [c2]})));
    // Upstream allocates before it compares requests with allocatable:
    // the allocation's failure is what the pod shows.
    let refused = rejected(
        &k.api,
        third,
        "UnexpectedAdmissionError",
        "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0, which is unexpected",
    )
    .await;

    // The plugin goes: its devices are unhealthy, the resource stays.
    drop(plugin);
    eventually(
        "no device allocatable once the plugin is gone",
        START,
        async || {
            (node_extended(&k.api, SAMPLE_RESOURCE)? == ("2".into(), "0".into())).then_some(())
        },
    )
    .await;
    let uids = uids_of(&[pod, k.api.pod(other).unwrap(), refused]);
    k.finish(&uids).await;
}

/// Upstream's DRA test driver's name here, its DeviceClass and the
/// request of the test's claims.
const DRA_DRIVER: &str = "test-driver.cdi.k8s.io";
const DRA_CLASS: &str = "rkubelet-dra-test";
const DRA_REQUEST: &str = "my-request";

/// Upstream's DRA test driver as the kubelet plugin of the node whose root
/// is `root`, with the node's own credentials: it registers in the
/// node's plugins_registry, publishes a ResourceSlice of four devices in a
/// pool named after the node, and writes a CDI spec per prepared claim
/// into `cdi` (the test containerd's CDI directory) whose container edits
/// set `claim_<claim>_<request>=true` and each opaque parameter as
/// `user_<key>=<value>`.
fn dra_test_driver(api: &Api, root: &Path, cdi: &Path, log: &Path) -> Daemon {
    let data = root.join("plugins");
    std::fs::create_dir_all(data.join(DRA_DRIVER)).unwrap();
    let child = Command::new(env("RKUBELET_DRA_TEST_DRIVER"))
        .env_remove("KUBECONFIG")
        .arg("-v=5")
        .arg("--kubeconfig")
        .arg(api.node_conf())
        .args([
            "--drivername",
            DRA_DRIVER,
            "kubelet-plugin",
            "--node-name",
            &api.node,
        ])
        .arg("--plugin-registration-path")
        .arg(root.join("plugins_registry"))
        .arg("--datadir")
        .arg(&data)
        .arg("--cdi-dir")
        .arg(cdi)
        .stdout(File::create(log).unwrap())
        .stderr(Stdio::from(
            File::create(log.with_extension("err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    Daemon(child)
}

/// The ResourceSlices of the test driver for this node.
fn dra_slices(api: &Api) -> Option<Vec<Value>> {
    let list = api.get(&["resourceslices"])?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .filter(|s| {
                s["spec"]["nodeName"] == api.node.as_str() && s["spec"]["driver"] == DRA_DRIVER
            })
            .cloned()
            .collect(),
    )
}

/// Dynamic resource allocation with upstream's DRA test driver and the
/// control plane's scheduling: the driver registers through the plugin
/// watcher and publishes its devices; a pod whose claim comes from a
/// ResourceClaimTemplate is scheduled, its claim allocated and prepared
/// (NodePrepareResources), and its container started with the driver's
/// CDI device (the environment the driver's CDI spec sets), which its
/// status lists in allocatedResourcesStatus (Unknown: this driver reports
/// no health); PodResources
/// lists the claim's device and the checkpoint holds it, across a kill -9
/// of rkubelet (whose start deletes the node's slices; the driver
/// publishes its own again). The pod deleted: the claim is unprepared (the
/// driver removes its CDI spec) and leaves the checkpoint, before the pod
/// leaves the API. The driver killed: its ResourceSlice is deleted by the
/// kubelet after upstream's 30 s.
#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_t_a_dra_claim_is_prepared_for_its_pod_and_unprepared_after_it() {
    let mut k = Kubelet::new("dra");
    k.start_ready().await;
    let root = k.rk.root();
    let endpoint = env("RKUBELET_E2E_ENDPOINT");
    let cdi = Path::new(endpoint.trim_start_matches("unix://"))
        .parent()
        .unwrap()
        .join("cdi");
    let driver = dra_test_driver(
        &k.api,
        &root,
        &cdi,
        &k.rk.dir.path().join("dra-test-driver.log"),
    );
    let slices = eventually("the driver's ResourceSlice published", START, async || {
        dra_slices(&k.api).filter(|s| !s.is_empty())
    })
    .await;
    assert_eq!(slices[0]["spec"]["pool"]["name"], k.api.node.as_str());

    let _ = k.api.run_as(
        &k.api.admin_conf(),
        &["delete", "deviceclass", DRA_CLASS, "--ignore-not-found"],
        None,
    );
    k.api.create(&json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": DRA_CLASS, "labels": {TEST_LABEL: "1"}},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRA_DRIVER}\"")}}]},
    }));
    let template = "cl-dra-template";
    let _ = k.api.run_as(
        &k.api.admin_conf(),
        &[
            "delete",
            "resourceclaimtemplate",
            "-n",
            "default",
            template,
            "--ignore-not-found",
        ],
        None,
    );
    k.api.create(&json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": template, "namespace": "default", "labels": {TEST_LABEL: "1"}},
        "spec": {"spec": {"devices": {
            "requests": [{"name": DRA_REQUEST, "exactly": {"deviceClassName": DRA_CLASS}}],
            "config": [{"opaque": {"driver": DRA_DRIVER, "parameters": {"a": "b"}}}],
        }}},
    }));
    // Scheduled (the scheduler allocates the claim), not bound by name.
    let name = "cl-dra";
    let mut c = sh_container("c", SLEEPER);
    c["resources"] = json!({"claims": [{"name": "gpu"}]});
    let mut pod = test_pod(
        &k.api,
        name,
        json!({
            "containers": [c],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "nodeSelector": {"kubernetes.io/hostname": k.api.node},
        }),
    );
    pod["spec"].as_object_mut().unwrap().remove("nodeName");
    k.api.create(&pod);
    let pod = eventually("Running", START, async || {
        k.api.pod(name).filter(running_with_ip)
    })
    .await;
    let claim = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        .as_str()
        .unwrap()
        .to_owned();
    // The driver's CDI device reached the container: its environment.
    let env_out = exec_out(&k.api, name, "env").unwrap_or_default();
    let claim_var = format!(
        "claim_{}_{}=true",
        claim.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        DRA_REQUEST.replace('-', "_")
    );
    for want in ["user_a=b", claim_var.as_str()] {
        assert!(
            env_out.lines().any(|l| l == want),
            "{want} not in {env_out}"
        );
    }
    // PodResources lists the claim's device.
    let listed = eventually("the claim listed by PodResources", START, async || {
        listed(&root, name, "c")
            .await
            .filter(|c| !c.dynamic_resources.is_empty())
    })
    .await;
    let dynamic = &listed.dynamic_resources[0];
    assert_eq!(
        (
            dynamic.claim_name.as_str(),
            dynamic.claim_namespace.as_str()
        ),
        (claim.as_str(), "default")
    );
    let device = &dynamic.claim_resources[0];
    assert_eq!(
        (device.driver_name.as_str(), device.pool_name.as_str()),
        (DRA_DRIVER, k.api.node.as_str())
    );
    let claim_obj = k
        .api
        .get(&["resourceclaim", "-n", "default", &claim])
        .unwrap();
    let claim_uid = uid(&claim_obj).to_owned();
    assert_eq!(
        claim_obj["status"]["allocation"]["devices"]["results"][0]["device"],
        device.device_name.as_str()
    );
    assert_eq!(
        device.cdi_devices[0].name,
        format!("{DRA_DRIVER}/test=claim-{claim_uid}-{DRA_REQUEST}")
    );
    // Its device in the container's status (ResourceHealthStatus): the
    // test driver reports no health, so it is Unknown.
    let health = eventually(
        "the claim's device in allocatedResourcesStatus",
        START,
        async || {
            let pod = k.api.pod(name)?;
            let health = container_status(&pod, "c")["allocatedResourcesStatus"].clone();
            health.is_array().then_some(health)
        },
    )
    .await;
    assert_eq!(health[0]["name"], "claim:gpu", "{health}");
    assert_eq!(
        health[0]["resources"][0]["resourceID"],
        device.cdi_devices[0].name.as_str(),
        "{health}"
    );
    assert_eq!(health[0]["resources"][0]["health"], "Unknown", "{health}");
    let state = root.join("dra_manager_state");
    let checkpoint = std::fs::read_to_string(&state).unwrap();
    assert!(checkpoint.contains(&claim_uid), "{checkpoint}");
    let spec_file = cdi.join(format!("{DRA_DRIVER}-{claim_uid}-{DRA_REQUEST}.json"));
    assert!(spec_file.exists(), "{}", spec_file.display());
    let before = container_of(&pod);

    // kill -9 and a new start: the same container, the claim still known.
    k.rk.kill9();
    let since = k.start();
    eventually("node Ready after the restart", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    let pod = k.api.pod(name).unwrap();
    assert_eq!(container_of(&pod), before, "{}", pod["status"]);
    assert!(
        std::fs::read_to_string(&state)
            .unwrap()
            .contains(&claim_uid)
    );
    // The kubelet deleted the node's slices at its start; the driver,
    // registered again, publishes its slice again.
    eventually(
        "the driver's ResourceSlice published again",
        START,
        async || {
            dra_slices(&k.api).filter(|s| {
                !s.is_empty() && s[0]["metadata"]["uid"] != slices[0]["metadata"]["uid"]
            })
        },
    )
    .await;

    // Deleted: unprepared (the driver removes the CDI spec), out of the
    // checkpoint, the pod gone from the API once that is done.
    k.api
        .ok(&["delete", "pod", "-n", "default", name, "--wait=false"]);
    eventually(
        "the claim unprepared and the pod gone",
        CLEANUP,
        async || {
            (k.api.pod(name).is_none()
                && !spec_file.exists()
                && !std::fs::read_to_string(&state).ok()?.contains(&claim_uid))
            .then_some(())
        },
    )
    .await;

    // The driver is killed (SIGKILL: its sockets stay, but no longer
    // answer): the kubelet deletes its ResourceSlice after the wiping
    // delay.
    drop(driver);
    eventually("the driver's ResourceSlice deleted", START, async || {
        dra_slices(&k.api).filter(|s| s.is_empty())
    })
    .await;
    let log = std::fs::read_to_string(k.rk.log()).unwrap_or_default();
    assert!(
        log.lines().any(|l| l.contains("Deleted ResourceSlices")
            && l.contains(&format!("spec.driver={DRA_DRIVER}"))),
        "the kubelet deleted the gone driver's slices"
    );
    let _ = k.api.run_as(
        &k.api.admin_conf(),
        &["delete", "deviceclass", DRA_CLASS],
        None,
    );
    let _ = k.api.run_as(
        &k.api.admin_conf(),
        &["delete", "resourceclaimtemplate", "-n", "default", template],
        None,
    );
    k.finish(&uids_of(&[pod])).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_i_a_node_joins_with_a_bootstrap_token_and_rotates_its_client_certificate() {
    use std::os::unix::fs::PermissionsExt as _;
    let mut k = Kubelet::new("bootstrap");
    k.rk.add_config("rotateCertificates: true\n");
    // A bootstrap token, its Secret and bindings as kubeadm makes them.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/cluster.sh");
    let out = Command::new(&script)
        .arg("bootstrap-token")
        .arg(&k.api.node)
        .env("RKUBELET_CLUSTER_DIR", &k.api.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bootstrap = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let kubeconfig = k.rk.dir.path().join("kubelet.conf");
    let cert_dir = k.rk.root().join("pki");
    let flags = [OsStr::new("--bootstrap-kubeconfig"), bootstrap.as_os_str()];

    // No kubeconfig yet: it is written at once, and the certificate comes
    // from a CSR made with the token, approved and signed by the
    // controller manager.
    let since = rfc3339(SystemTime::now());
    k.rk.start_with(&k.api.node, Some(&kubeconfig), &flags);
    let csr = eventually(
        "the bootstrap CSR is approved and issued",
        START,
        async || {
            node_csrs(
                &k.api,
                CLIENT_SIGNER,
                |u| u.starts_with("system:bootstrap:"),
                &since,
            )
            .into_iter()
            .find(auto_approved_and_issued)
        },
    )
    .await;
    assert_eq!(
        csr["spec"]["usages"],
        json!(["digital signature", "client auth"])
    );
    assert!(
        csr["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("csr-"),
        "{csr}"
    );
    eventually(
        "node Ready with the issued certificate",
        NODE_READY,
        async || k.api.node_ready_since(&since),
    )
    .await;
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let pem = cert_dir.join("kubelet-client-current.pem");
    assert!(
        text.contains(&format!("client-certificate: \"{}\"", pem.display()))
            && text.contains(&format!("client-key: \"{}\"", pem.display())),
        "{text}"
    );
    assert_eq!(
        std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let first = current_client_pair(&cert_dir);
    let name = first.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with("kubelet-client-20") && name.ends_with(".pem"),
        "{name}"
    );
    assert_eq!(
        std::fs::metadata(&first).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let pair = std::fs::read_to_string(&first).unwrap();
    assert!(pair.starts_with("-----BEGIN CERTIFICATE-----"), "{pair}");
    assert!(pair.contains("-----BEGIN EC PRIVATE KEY-----"), "{pair}");
    let metrics = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics", k.api.node),
    ]);
    let ttl = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_certificate_manager_client_ttl_seconds "))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("kubelet_certificate_manager_client_ttl_seconds");
    assert!(ttl > 3600.0 && ttl.is_finite(), "ttl {ttl}");

    // Near the end of its life (a pair the cluster CA signed 10 minutes
    // ago for 12), the certificate is rotated at once after a restart: a
    // CSR made with the node's own certificate, approved as a renewal.
    k.rk.terminate().await;
    let ca_cert = std::fs::read_to_string(k.api.dir.join("pki/ca.crt")).unwrap();
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(k.api.dir.join("pki/ca.key")).unwrap())
            .unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert, ca_key).unwrap();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("system:node:{}", k.api.node),
    );
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(10);
    params.not_after = now + time::Duration::minutes(2);
    let old = params.signed_by(&key, &issuer).unwrap();
    let aging = cert_dir.join("kubelet-client-aging.pem");
    std::fs::write(&aging, format!("{}{}", old.pem(), key.serialize_pem())).unwrap();
    std::fs::remove_file(cert_dir.join("kubelet-client-current.pem")).unwrap();
    std::os::unix::fs::symlink(&aging, cert_dir.join("kubelet-client-current.pem")).unwrap();
    let since = rfc3339(SystemTime::now());
    k.rk.start_with(&k.api.node, Some(&kubeconfig), &flags);
    let user = format!("system:node:{}", k.api.node);
    eventually(
        "the renewal CSR is approved and issued",
        START,
        async || {
            node_csrs(&k.api, CLIENT_SIGNER, |u| u == user, &since)
                .into_iter()
                .find(auto_approved_and_issued)
        },
    )
    .await;
    let rotated = eventually("the current pair is the renewed one", START, async || {
        let now = current_client_pair(&cert_dir);
        (now != aging).then_some(now)
    })
    .await;
    // (A new pair file; named by the second, as upstream's, so within the
    // same second it takes the first one's name.)
    let renewed = std::fs::read_to_string(&rotated).unwrap();
    assert!(
        renewed.contains("-----BEGIN EC PRIVATE KEY-----"),
        "{renewed}"
    );
    assert_ne!(renewed, pair, "a new certificate and key");
    eventually("node Ready after the rotation", NODE_READY, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    // The serving certificate from a CSR (serverTLSBootstrap): none is
    // served until the operator approves it (nothing in the cluster
    // approves kubelet-serving CSRs), then the one the cluster CA signed.
    k.rk.terminate().await;
    k.rk.add_config("serverTLSBootstrap: true\n");
    let ca = k.api.dir.join("pki/ca.crt");
    let since = rfc3339(SystemTime::now());
    k.rk.start_with(&k.api.node, Some(&kubeconfig), &flags);
    let serving = eventually("a serving CSR", START, async || {
        node_csrs(
            &k.api,
            "kubernetes.io/kubelet-serving",
            |u| u == user,
            &since,
        )
        .into_iter()
        .next()
    })
    .await;
    assert_eq!(
        serving["spec"]["usages"],
        json!(["digital signature", "server auth"])
    );
    assert!(
        !kubelet_api_verifies(&ca),
        "nothing is served before the approval"
    );
    k.api.ok(&[
        "certificate",
        "approve",
        serving["metadata"]["name"].as_str().unwrap(),
    ]);
    eventually(
        "the kubelet API serves the issued certificate",
        START,
        async || kubelet_api_verifies(&ca).then_some(()),
    )
    .await;
    assert!(cert_dir.join("kubelet-server-current.pem").exists());

    // The kubelet works on with the new certificates: a pod runs.
    k.api.create(&test_pod(
        &k.api,
        "cl-rotated",
        json!({
            "terminationGracePeriodSeconds": 2,
            "containers": [sh_container("c", SLEEPER)],
        }),
    ));
    let pod = eventually("a pod runs after the rotation", START, async || {
        k.api.pod("cl-rotated").filter(running_with_ip)
    })
    .await;
    k.finish(&HashSet::from([uid(&pod).to_owned()])).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_j_config_dir_drop_ins_show_in_configz_and_the_node() {
    let mut k = Kubelet::new("configdir");
    // Two drop-ins in lexical order over the file (fileCheckFrequency: 2s):
    // the later wins, maps merge key by key.
    let dir = k.rk.dir.path().join("kubelet.conf.d");
    std::fs::create_dir_all(&dir).unwrap();
    let header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    std::fs::write(
        dir.join("10-pods.conf"),
        format!("{header}maxPods: 42\nfileCheckFrequency: 3s\nfeatureGates:\n  ReloadKubeletClientCAFile: false\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("20-more.conf"),
        format!(
            "{header}maxPods: 43\nfeatureGates:\n  ReloadKubeletServerCertificateFile: false\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("ignored.yaml"), format!("{header}maxPods: 1\n")).unwrap();
    let since = rfc3339(SystemTime::now());
    k.rk.start_with(
        &k.api.node,
        Some(&k.api.node_conf()),
        &[OsStr::new("--config-dir"), dir.as_os_str()],
    );
    let node = eventually("node Ready", NODE_READY, async || {
        k.api.node_ready_since(&since)?;
        k.api.node_obj()
    })
    .await;
    assert_eq!(
        node["status"]["capacity"]["pods"], "43",
        "{}",
        node["status"]
    );
    let raw = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/configz", k.api.node),
    ]);
    let configz: Value = serde_json::from_str(&raw).unwrap();
    let cfg = &configz["kubeletconfig"];
    assert_eq!(cfg["maxPods"], 43, "{cfg}");
    assert_eq!(cfg["fileCheckFrequency"], "3s", "{cfg}");
    assert_eq!(
        cfg["featureGates"],
        json!({"ReloadKubeletClientCAFile": false, "ReloadKubeletServerCertificateFile": false}),
        "{cfg}"
    );
    let metrics = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics", k.api.node),
    ]);
    assert!(
        metrics.contains(
            "kubernetes_feature_enabled{name=\"ReloadKubeletClientCAFile\",stage=\"BETA\"} 0"
        ),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("ReloadKubeletClientCAFile"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    k.finish(&HashSet::new()).await;
}

/// A pod whose exec readiness probe passes while `/tmp/ready` exists.
fn probed_pod(api: &Api, name: &str) -> Value {
    let mut c = sh_container("c", &format!("touch /tmp/ready; {SLEEPER}"));
    c["readinessProbe"] =
        json!({"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 10});
    test_pod(
        api,
        name,
        json!({"terminationGracePeriodSeconds": 5, "containers": [c]}),
    )
}

/// A pod stopped by the node's shutdown, as upstream reports it.
fn assert_stopped_by_shutdown(pod: &Value) {
    let status = &pod["status"];
    assert_eq!(status["phase"], "Failed", "{status}");
    assert_eq!(status["reason"], "Terminated", "{status}");
    assert_eq!(
        status["message"], "Pod was terminated in response to imminent node shutdown.",
        "{status}"
    );
    let disruption = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionTarget"))
        .unwrap_or_else(|| panic!("no DisruptionTarget: {status}"));
    assert_eq!(disruption["status"], "True");
    assert_eq!(disruption["reason"], "TerminationByKubelet");
}

/// When the pod's (only) container finished, in seconds since the epoch.
fn finished_at(pod: &Value) -> i64 {
    let at = pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap_or_else(|| panic!("not terminated: {}", pod["status"]));
    at.parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second()
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_k_a_node_shutdown_stops_pods_by_priority_within_their_grace() {
    use kubelet::nodeshutdown::fake::{FakeLogind, PrivateBus};
    // logind's stand-in on a private bus, allowing a minute: nothing to
    // override in /etc.
    let bus_dir = tempfile::tempdir().unwrap();
    let bus = PrivateBus::start(bus_dir.path()).unwrap();
    let logind = FakeLogind::serve(&bus.address, Duration::from_secs(60), None)
        .await
        .unwrap();
    let classes = [("rk-shutdown-low", 1000), ("rk-shutdown-high", 1_000_000)];
    let mut k = Kubelet::new("shutdown");
    for (class, value) in classes {
        let _ = k
            .api
            .run(&["delete", "priorityclass", class, "--ignore-not-found"]);
        k.api.create(&json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": class},
            "value": value,
        }));
    }
    // Pods below 1000000 get 6 s, the others 4 s.
    k.rk.add_config(
        "shutdownGracePeriodByPodPriority:\n\
         - {priority: 0, shutdownGracePeriodSeconds: 6}\n\
         - {priority: 1000000, shutdownGracePeriodSeconds: 4}\n",
    );
    let since = rfc3339(SystemTime::now());
    k.rk.start_with_env(
        &k.api.node,
        Some(&k.api.node_conf()),
        &[OsStr::new("--shutdown-on-sigterm")],
        &[("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)],
    );
    eventually("node Ready", NODE_READY, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    eventually("rkubelet's inhibitor lock", START, async || {
        (logind.locks_taken() == 1).then_some(())
    })
    .await;
    assert_eq!(logind.inhibitors()[0].3, "delay");
    // Each pod's sleep, as PID 1, ignores SIGTERM: it takes its whole grace.
    let sleeper = |name: &str, class: &str| {
        let spec = json!({
            "priorityClassName": class,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"]}],
        });
        test_pod(&k.api, name, spec)
    };
    for (name, class) in [
        ("sd-low", "rk-shutdown-low"),
        ("sd-high", "rk-shutdown-high"),
    ] {
        k.api.create(&sleeper(name, class));
    }
    let mut uids = HashSet::new();
    for name in ["sd-low", "sd-high"] {
        let pod = eventually(&format!("{name} Running"), START, async || {
            k.api
                .pod(name)
                .filter(|p| p["status"]["phase"] == "Running")
        })
        .await;
        uids.insert(uid(&pod).to_owned());
    }

    let began = Instant::now();
    logind.prepare_for_shutdown(true).await.unwrap();
    let ready = eventually("the node NotReady", START, async || {
        k.api.ready_condition().filter(|c| c["status"] == "False")
    })
    .await;
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("node is shutting down")),
        "{ready}"
    );
    // The lock goes once both groups are done: 6 s, then 4 s.
    tokio::time::timeout(Duration::from_secs(60), logind.released(0))
        .await
        .expect("the lock released")
        .unwrap();
    let took = began.elapsed();
    eprintln!("MEASURED: the shutdown took {:.1}s", took.as_secs_f64());
    assert!(
        (Duration::from_millis(9500)..Duration::from_secs(40)).contains(&took),
        "6 s then 4 s of grace: {took:?}"
    );
    let low = eventually("sd-low stopped", START, async || {
        k.api
            .pod("sd-low")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    let high = eventually("sd-high stopped", START, async || {
        k.api
            .pod("sd-high")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_stopped_by_shutdown(&low);
    assert_stopped_by_shutdown(&high);
    // The critical group only began once the other's 6 s were over.
    assert!(
        finished_at(&high) - finished_at(&low) >= 3,
        "low finished {}, high {}",
        finished_at(&low),
        finished_at(&high)
    );
    // No pod while the node shuts down.
    k.api.create(&test_pod(&k.api, "sd-late", pod_spec()));
    let late = eventually("sd-late refused", START, async || {
        k.api
            .pod("sd-late")
            .filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(
        late["status"]["reason"], "NodeShutdown",
        "{}",
        late["status"]
    );
    uids.insert(uid(&late).to_owned());
    let events = k.api.ok(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        &format!(
            "involvedObject.kind=Node,involvedObject.name={},reason=NodeShutdown",
            k.api.node
        ),
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("Shutdown manager detected shutdown event"),
        "{events}"
    );
    let metrics = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics", k.api.node),
    ]);
    let end = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_graceful_shutdown_end_time_seconds "))
        .unwrap_or_else(|| panic!("no end time in the metrics"));
    assert!(end.parse::<f64>().unwrap() > 0.0, "{end}");

    // Cancelled: Ready again, under a new lock, and pods admitted.
    let since = rfc3339(SystemTime::now());
    logind.prepare_for_shutdown(false).await.unwrap();
    eventually("node Ready again", READY_AGAIN, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    assert_eq!(logind.locks_taken(), 2);
    k.api.create(&sleeper("sd-after", "rk-shutdown-low"));
    let after = eventually("sd-after Running", START, async || {
        k.api
            .pod("sd-after")
            .filter(|p| p["status"]["phase"] == "Running")
    })
    .await;
    uids.insert(uid(&after).to_owned());

    // --shutdown-on-sigterm: SIGTERM is a shutdown too, reported before
    // rkubelet exits.
    k.rk.terminate().await;
    let after = k.api.pod("sd-after").unwrap();
    assert_stopped_by_shutdown(&after);

    // Started again (without the bus) to clean up.
    k.start_ready().await;
    k.finish(&uids).await;
    let api = Api::from_env();
    for (class, _) in classes {
        api.ok(&["delete", "priorityclass", class]);
    }
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn w_l_a_private_image_pulls_through_a_credential_plugin_with_the_pods_token() {
    let registry = env("RKUBELET_TEST_REGISTRY");
    let image = format!("{registry}/private/busybox:1");
    let audience = "registry.rkubelet.test";
    let mut k = Kubelet::new("credplugin");
    // The plugin answers only with a service account token and the grant
    // annotation, as a registry's token exchange would.
    let bin = k.rk.dir.path().join("plugins");
    std::fs::create_dir(&bin).unwrap();
    let plugin = bin.join("registry-login");
    std::fs::write(
        &plugin,
        "#!/bin/sh\nread -r request\ncase \"$request\" in\n\
         \x20 *'\"serviceAccountToken\":\"ey'*'\"rkubelet.test/registry-access\":\"granted\"'*) ;;\n\
         \x20 *) echo 'no token or no grant' >&2; exit 1 ;;\nesac\n\
         printf '{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Registry\",\"auth\":{\"%s\":{\"username\":\"rkubelet-puller\",\"password\":\"registry.sh-pw\"}}}' \"$REGISTRY\"\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = k.rk.dir.path().join("credential-providers.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
             - name: registry-login\n  matchImages: [\"{registry}\"]\n  defaultCacheDuration: 1m\n\
             \x20 apiVersion: credentialprovider.kubelet.k8s.io/v1\n  env: [{{name: REGISTRY, value: \"{registry}\"}}]\n\
             \x20 tokenAttributes:\n    serviceAccountTokenAudience: {audience}\n    requireServiceAccount: true\n\
             \x20   cacheType: ServiceAccount\n    requiredServiceAccountAnnotationKeys: [rkubelet.test/registry-access]\n"
        ),
    )
    .unwrap();
    // The service account the plugin vouches for; nodes may ask tokens
    // for the plugin's audience (NodeRestriction's audience check).
    let objects = [
        ("serviceaccount", "cl-puller", true),
        (
            "clusterrolebinding",
            "rkubelet-test-registry-audience",
            false,
        ),
        ("clusterrole", "rkubelet-test-registry-audience", false),
    ];
    for (kind, name, namespaced) in objects {
        let mut args = vec!["delete", kind, name, "--ignore-not-found"];
        if namespaced {
            args.extend(["-n", "default"]);
        }
        let _ = k.api.run(&args);
    }
    k.api.create(&json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "cl-puller", "namespace": "default",
                     "annotations": {"rkubelet.test/registry-access": "granted"}},
    }));
    k.api.create(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "rkubelet-test-registry-audience"},
        "rules": [{"apiGroups": [""], "resources": [audience],
                   "verbs": ["request-serviceaccounts-token-audience"]}],
    }));
    k.api.create(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "rkubelet-test-registry-audience"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "rkubelet-test-registry-audience"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "system:nodes"}],
    }));
    let since = rfc3339(SystemTime::now());
    k.rk.start_with(
        &k.api.node,
        Some(&k.api.node_conf()),
        &[
            OsStr::new("--image-credential-provider-config"),
            config.as_os_str(),
            OsStr::new("--image-credential-provider-bin-dir"),
            bin.as_os_str(),
        ],
    );
    eventually("node Ready", NODE_READY, async || {
        k.api.node_ready_since(&since)
    })
    .await;
    let spec = |account: &str| {
        json!({
            "serviceAccountName": account,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "c", "image": image, "imagePullPolicy": "Always",
                            "command": ["sh", "-c", SLEEPER]}],
        })
    };
    k.api
        .create(&test_pod(&k.api, "cl-plugin-sa", spec("cl-puller")));
    k.api
        .create(&test_pod(&k.api, "cl-plugin-default", spec("default")));
    let pod = eventually("the pod of the vouched account runs", START, async || {
        k.api.pod("cl-plugin-sa").filter(running_with_ip)
    })
    .await;
    let mut uids: HashSet<String> = [uid(&pod).to_owned()].into();
    // The default account lacks the grant: the plugin is not asked, and
    // the registry refuses the pull.
    let other = eventually(
        "ImagePullBackOff for the default account",
        START,
        async || {
            let pod = k.api.pod("cl-plugin-default")?;
            let w = &container_status(&pod, "c")["state"]["waiting"];
            (w["reason"] == "ImagePullBackOff").then_some(pod)
        },
    )
    .await;
    uids.insert(uid(&other).to_owned());
    let metrics = k.api.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics", k.api.node),
    ]);
    assert!(
        metrics.contains(
            "kubelet_credential_provider_plugin_duration_count{plugin_name=\"registry-login\"}"
        ),
        "the plugin ran"
    );
    assert!(metrics.contains("kubelet_credential_provider_config_info{hash=\"sha256:"));
    k.finish(&uids).await;
    let api = Api::from_env();
    for (kind, name, namespaced) in objects {
        let mut args = vec!["delete", kind, name];
        if namespaced {
            args.extend(["-n", "default"]);
        }
        api.ok(&args);
    }
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn x_restarts_of_rkubelet_keep_ready_pods_ready() {
    let mut k = Kubelet::new("ready");
    k.start_ready().await;
    let (steady, failing) = ("cl-ready", "cl-unready");
    k.api.create(&probed_pod(&k.api, steady));
    k.api.create(&probed_pod(&k.api, failing));
    let pods = eventually("both pods Ready", START, async || {
        let pods: Vec<Value> = [steady, failing]
            .iter()
            .filter_map(|n| k.api.pod(n))
            .collect();
        (pods.len() == 2 && pods.iter().all(|p| condition(p, "Ready") == "True")).then_some(pods)
    })
    .await;
    // A watch of the steady pod's Ready condition and its container's readiness.
    let mut watch = k.api.spawn_as(
        &k.api.admin_conf(),
        &[
            "get", "pod", steady, "-n", "default", "-w", "--output-watch-events", "-o",
            r#"jsonpath={.object.status.conditions[?(@.type=="Ready")].status} {.object.status.containerStatuses[0].ready}{"\n"}"#,
        ],
        None,
    );
    let out = watch.stdout.take().unwrap();
    let seen = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let restarts = 20;
    let started = Instant::now();
    for _ in 0..restarts {
        k.rk.terminate().await;
        let log = std::fs::metadata(k.rk.log()).map_or(0, |m| m.len());
        k.start_ready().await;
        // Until this rkubelet synced the pod (its first status follows at once).
        eventually("the pod synced after the restart", START, async || {
            let text = std::fs::read(k.rk.log()).ok()?;
            let new = String::from_utf8_lossy(text.get(log as usize..)?).into_owned();
            new.lines()
                .any(|l| l.contains("pod update") && l.contains(&format!("pod=default/{steady} ")))
                .then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "MEASURED: {restarts} restarts of rkubelet in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    // One more period for what the last restart might flip.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let _ = watch.kill();
    let _ = watch.wait();
    let lines = seen.join().unwrap();
    assert!(!lines.is_empty(), "the watch saw the pod");
    assert!(
        lines.iter().all(|l| l.trim() == "True true"),
        "Ready changed during the restarts: {lines:?}"
    );
    // The other pod's probe fails while rkubelet is down: unready within
    // a probe period of the restart.
    k.rk.terminate().await;
    k.exec(uid(&pods[1]), "c", &["rm", "/tmp/ready"]).await;
    k.start();
    let restarted = Instant::now();
    eventually("the failing pod unready", START, async || {
        k.api
            .pod(failing)
            .filter(|p| condition(p, "Ready") == "False")
    })
    .await;
    let took = restarted.elapsed();
    eprintln!(
        "MEASURED: unready {:.1}s after the restart",
        took.as_secs_f64()
    );
    assert!(
        took < Duration::from_secs(12),
        "within a period (10 s): {took:?}"
    );
    k.finish(&uids_of(&pods)).await;
}

#[tokio::test]
#[ignore = "needs a real control plane: run through hack/test.sh"]
async fn zz_container_exit_during_apiserver_outage_is_reported_after() {
    let app = "cl-outage";
    let mut k = Kubelet::new("outage");
    k.start_ready().await;
    k.api.create(&deployment(app, 2));
    let pods = eventually("2 pods Running with an IP", START, async || {
        n_running(&k.api, app, 2)
    })
    .await;
    let before = containers_by_pod(&pods);
    let seen = uids_of(&pods);
    let victim = name(&pods[0]).to_owned();
    let victim_uid = uid(&pods[0]).to_owned();
    let (victim_cid, _) = before[&victim].clone();
    let cid = victim_cid
        .strip_prefix("containerd://")
        .unwrap_or_else(|| panic!("containerID {victim_cid}"))
        .to_owned();

    let mut apiserver = ApiServerGuard::new(&k.api);
    let outage = Instant::now();
    apiserver.stop().await;

    let socket = k.rk.endpoint.trim_start_matches("unix://").to_owned();
    let out = Command::new("ctr")
        .args([
            "-a", &socket, "-n", "k8s.io", "task", "kill", "-s", "KILL", &cid,
        ])
        .output()
        .expect("running ctr");
    assert!(
        out.status.success(),
        "ctr task kill: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // rkubelet restarts it without the API server.
    let victim_uids: HashSet<String> = [victim_uid.clone()].into();
    eventually(
        "the killed container restarted (restartCount 1) while the API server is down",
        OUTAGE,
        async || {
            let cs = k.containers_of(&victim_uids).await?;
            cs.iter()
                .any(|c| {
                    c.state == cri::ContainerState::ContainerRunning as i32
                        && c.annotations.get(RESTART_COUNT).map(String::as_str) == Some("1")
                })
                .then_some(())
        },
    )
    .await;
    if let Some(rest) = OUTAGE.checked_sub(outage.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    k.rk.assert_alive();
    let back = rfc3339(SystemTime::now());
    let status = apiserver.up();
    assert!(status.success(), "hack/cluster.sh up failed: {status}");
    eprintln!(
        "kube-apiserver was down {:.1}s",
        outage.elapsed().as_secs_f64()
    );

    let pod = eventually(
        "restartCount 1 and lastState exit 137 reported",
        START,
        async || {
            let p = k.api.pod(&victim)?;
            let c = &p["status"]["containerStatuses"][0];
            (c["restartCount"] == 1
                && c["lastState"]["terminated"]["exitCode"] == 137
                && running_with_ip(&p))
            .then_some(p)
        },
    )
    .await;
    let (new_cid, _) = container_of(&pod);
    assert_ne!(new_cid, victim_cid, "the victim runs a new container");
    let pods = k.api.pods(app).unwrap();
    let after = containers_by_pod(&pods);
    for (pod, c) in &before {
        if *pod != victim {
            assert_eq!(after.get(pod), Some(c), "{pod} kept its container");
        }
    }
    eventually("node Ready, lease renewed", READY_AGAIN, async || {
        let node = k.api.node_obj()?;
        let ready = node["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        (ready && k.api.lease_renewed_since(&back)).then_some(())
    })
    .await;
    k.finish(&seen).await;
}
