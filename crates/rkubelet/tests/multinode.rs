//! Multi-node tests: a cluster of `hack/nodes.sh` (two rkubelet nodes, each
//! in a network namespace of its own with its own containerd and
//! kube-proxy, and CoreDNS as the cluster DNS), driven with kubectl. What
//! only several nodes show: pods reaching pods on another node, Services
//! through kube-proxy, names through the cluster DNS. Run them through
//! `hack/test.sh`, or by hand against `hack/up.sh --nodes 2` after importing
//! the e2e images (`RKUBELET_NODE_IMAGES=e2e`):
//!
//! ```text
//! RKUBELET_CLUSTER_DIR=DIR RKUBELET_KUBECTL=.../kubectl RKUBELET_NODES=rk-n1,rk-n2 \
//!   cargo test -p rkubelet --test multinode -- --ignored --test-threads=1
//! ```
//!
//! Each test works in a namespace of its own, deleted when it ends.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};

#[allow(
    dead_code,
    reason = "the multi-node tests use the polling helpers, not the kubelet harness"
)]
mod common;
use common::eventually;
#[path = "common/kubectl.rs"]
mod kubectl;
use kubectl::spawn_kubectl;

const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.66.1";
/// Pods scheduled, started and Ready on a loaded 2-core machine.
const START: Duration = Duration::from_secs(60);
/// Endpoints published and every node's kube-proxy rules in place.
const SETTLE: Duration = Duration::from_secs(60);

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set: run through hack/test.sh"))
}

/// One test's namespace on the cluster; deleted on drop.
struct Cluster {
    kubectl: String,
    admin: PathBuf,
    nodes: Vec<String>,
    ns: String,
}

impl Cluster {
    fn new(test: &str) -> Cluster {
        let nodes: Vec<String> = env("RKUBELET_NODES")
            .split(',')
            .map(str::to_owned)
            .collect();
        assert!(
            nodes.len() >= 2,
            "RKUBELET_NODES names fewer than two nodes: {nodes:?}"
        );
        let c = Cluster {
            kubectl: env("RKUBELET_KUBECTL"),
            admin: PathBuf::from(env("RKUBELET_CLUSTER_DIR")).join("admin.conf"),
            nodes,
            ns: format!("mn-{test}-{}", std::process::id()),
        };
        c.ok(&["create", "namespace", &c.ns]);
        c
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        spawn_kubectl(&self.kubectl, &self.admin, args, stdin)
            .wait_with_output()
            .expect("running kubectl")
    }

    /// kubectl ARGS, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args, None);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn create(&self, obj: &Value) {
        let out = self.run(
            &["create", "-n", &self.ns, "-f", "-"],
            Some(&obj.to_string()),
        );
        assert!(
            out.status.success(),
            "kubectl create {obj}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn get(&self, kind: &str, name: &str) -> Value {
        serde_json::from_str(&self.ok(&["get", kind, name, "-n", &self.ns, "-o", "json"])).unwrap()
    }

    /// An agnhost pod bound to `node`, running `args`, labelled `app: name`.
    fn agnhost(&self, name: &str, node: &str, args: &[&str]) {
        self.create(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": AGNHOST, "args": args}],
            },
        }));
    }

    /// A Service for the pods labelled `app: selector`, port 80 to 8080.
    fn service(&self, name: &str, selector: &str, kind: &str) -> Value {
        self.create(&json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"type": kind, "selector": {"app": selector},
                     "ports": [{"port": 80, "targetPort": 8080}]},
        }));
        self.get("service", name)
    }

    async fn ready(&self, pod: &str) -> Value {
        eventually(&format!("pod {pod} Ready"), START, async || {
            let p = self.get("pod", pod);
            let ready = p["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then_some(p)
        })
        .await
    }

    /// `cmd` in `pod`: its stdout when it succeeds.
    fn exec(&self, pod: &str, cmd: &[&str]) -> Option<String> {
        let mut args = vec!["exec", pod, "-n", &self.ns, "--"];
        args.extend_from_slice(cmd);
        let out = self.run(&args, None);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `curl url` from `pod` answers `want`, within SETTLE.
    async fn fetches(&self, pod: &str, url: &str, want: &str) {
        eventually(
            &format!("{url} from {pod} answers {want:?}"),
            SETTLE,
            async || {
                let body = self.exec(pod, &["curl", "-fsS", "--max-time", "3", url])?;
                (body.trim() == want).then_some(())
            },
        )
        .await;
    }

    /// An agnhost `netexec` server on node 2 and a client on node 1, both
    /// Ready; the server pod.
    async fn server_on_node2_client_on_node1(&self) -> Value {
        self.agnhost("server", &self.nodes[1], &["netexec", "--http-port=8080"]);
        self.agnhost("client", &self.nodes[0], &["pause"]);
        let server = self.ready("server").await;
        self.ready("client").await;
        server
    }

    fn internal_ip(&self, node: &str) -> String {
        let n: Value =
            serde_json::from_str(&self.ok(&["get", "node", node, "-o", "json"])).unwrap();
        n["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == "InternalIP")
            .and_then(|a| a["address"].as_str())
            .unwrap_or_else(|| panic!("node {node} reports no InternalIP: {n}"))
            .to_owned()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.run(&["delete", "namespace", &self.ns, "--wait=false"], None);
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no {pointer} in {v}"))
}

#[tokio::test]
#[ignore = "needs a multi-node cluster: run through hack/test.sh"]
async fn a_pods_reach_pods_on_another_node_and_a_node_port_on_either() {
    let c = Cluster::new("net");
    let (n1, n2) = (c.nodes[0].clone(), c.nodes[1].clone());
    let server = c.server_on_node2_client_on_node1().await;
    assert_eq!(str_at(&server, "/spec/nodeName"), n2);

    // Pod to pod, across nodes, by the server's own address (no NAT).
    let ip = str_at(&server, "/status/podIP");
    c.fetches("client", &format!("http://{ip}:8080/hostname"), "server")
        .await;
    let seen = c.exec(
        "client",
        &[
            "curl",
            "-fsS",
            "--max-time",
            "3",
            &format!("http://{ip}:8080/clientip"),
        ],
    );
    let client_ip = str_at(&c.get("pod", "client"), "/status/podIP").to_owned();
    assert!(
        seen.as_deref()
            .is_some_and(|s| s.starts_with(&format!("{client_ip}:"))),
        "the server on {n2} saw the client as {seen:?}, not by its pod IP {client_ip}"
    );

    // A NodePort on node 1's address, from a pod on node 2, reaches the
    // server back on node 2 (node 1's kube-proxy forwards it).
    let svc = c.service("web", "server", "NodePort");
    let port = svc["spec"]["ports"][0]["nodePort"]
        .as_i64()
        .unwrap_or_else(|| panic!("no nodePort in {svc}"));
    let n1_ip = c.internal_ip(&n1);
    c.fetches(
        "server",
        &format!("http://{n1_ip}:{port}/hostname"),
        "server",
    )
    .await;
}

#[tokio::test]
#[ignore = "needs a multi-node cluster: run through hack/test.sh"]
async fn b_a_pod_on_node1_resolves_kubernetes_and_gets_a_service_backed_on_node2() {
    let c = Cluster::new("dns");
    c.server_on_node2_client_on_node1().await;
    let svc = c.service("web", "server", "ClusterIP");

    // BIND's nslookup, which walks the search list kubelet's resolv.conf
    // gives the pod (busybox's sends the bare name).
    let answer = eventually("nslookup kubernetes.default", SETTLE, async || {
        c.exec("client", &["nslookup", "kubernetes.default"])
            .filter(|out| out.contains("Address: 10.0.0.1"))
    })
    .await;
    assert!(
        answer.contains("kubernetes.default.svc.cluster.local"),
        "{answer}"
    );
    c.fetches("client", "http://web/hostname", "server").await;
    let cluster_ip = str_at(&svc, "/spec/clusterIP");
    c.fetches("client", &format!("http://{cluster_ip}/hostname"), "server")
        .await;
}
