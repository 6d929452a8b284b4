//! The pod's view of itself and its cluster under each kubelet (the oracle
//! of rkubelet's env, /etc/hosts and resolv.conf): one pod that uses every
//! kind of env reference, hostAliases, a hostname and subdomain and a
//! dnsConfig prints `env | sort`, /etc/hosts, /etc/resolv.conf and its
//! hostname; the bench reads its log under each kubelet, puts `<pod-ip>`
//! for the pod's IP (the one thing that differs by right), and prints what
//! differs.

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kubelet_core::crilog::{Assembler, Stream, parse_line};
use serde_json::json;

/// The objects the pod reads (created once, before the first kubelet).
pub const CONFIG_MAP: &str = "rkb-view-cm";
pub const SECRET: &str = "rkb-view-sec";
pub const SERVICE: &str = "rkb-view-svc";

pub fn config_map(label: &str) -> anyhow::Result<ConfigMap> {
    serde_json::from_value(json!({
        "metadata": {"name": CONFIG_MAP, "labels": {label: "1"}},
        "data": {"mode": "fast", "level": "3"},
    }))
    .context("building the view's ConfigMap")
}

pub fn secret(label: &str) -> anyhow::Result<Secret> {
    serde_json::from_value(json!({
        "metadata": {"name": SECRET, "labels": {label: "1"}},
        "stringData": {"pw": "s3cret"},
    }))
    .context("building the view's Secret")
}

pub fn service(label: &str) -> anyhow::Result<Service> {
    serde_json::from_value(json!({
        "metadata": {"name": SERVICE, "labels": {label: "1"}},
        "spec": {"ports": [{"name": "http", "port": 8080}, {"name": "dns", "port": 53, "protocol": "UDP"}],
                 "selector": {"app": "none"}},
    }))
    .context("building the view's Service")
}

/// What the pod prints, section by section.
const SCRIPT: &str = "env | sort; echo '--- /etc/hosts'; cat /etc/hosts; \
    echo '--- /etc/resolv.conf'; cat /etc/resolv.conf; echo '--- hostname'; hostname";

/// The view pod: `meta` and `node` as the bench's other pods have them.
pub fn pod(meta: serde_json::Value, node: &str, image: &str) -> anyhow::Result<Pod> {
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let key = |kind: &str, name: &str, key: &str, optional: bool| json!({kind: {"name": name, "key": key, "optional": optional}});
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "hostname": "h1",
            "subdomain": "sub",
            "hostAliases": [{"ip": "123.45.67.89", "hostnames": ["foo", "bar"]}],
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["192.0.2.53"], "searches": ["a.example"],
                          "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]},
            "initContainers": [{
                "name": "init", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["true"],
            }],
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "$(SCRIPT)"],
                "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "100m"}},
                "envFrom": [
                    {"configMapRef": {"name": CONFIG_MAP}, "prefix": "CM_"},
                    {"secretRef": {"name": SECRET}},
                    {"configMapRef": {"name": "rkb-view-none", "optional": true}},
                ],
                "env": [
                    {"name": "SCRIPT", "value": SCRIPT},
                    {"name": "NAME", "valueFrom": field("metadata.name")},
                    {"name": "NS", "valueFrom": field("metadata.namespace")},
                    {"name": "LABEL", "valueFrom": field("metadata.labels['rkubelet-bench/group']")},
                    {"name": "NODE", "valueFrom": field("spec.nodeName")},
                    {"name": "SA", "valueFrom": field("spec.serviceAccountName")},
                    {"name": "POD_IP", "valueFrom": field("status.podIP")},
                    {"name": "POD_IPS", "valueFrom": field("status.podIPs")},
                    {"name": "HOST_IP", "valueFrom": field("status.hostIP")},
                    {"name": "HOST_IPS", "valueFrom": field("status.hostIPs")},
                    {"name": "MEM_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "CPU_REQUEST", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                    {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                    {"name": "MODE", "valueFrom": key("configMapKeyRef", CONFIG_MAP, "mode", false)},
                    {"name": "PW", "valueFrom": key("secretKeyRef", SECRET, "pw", false)},
                    {"name": "OPT_KEY", "valueFrom": key("configMapKeyRef", CONFIG_MAP, "none", true)},
                    {"name": "OPT_CM", "valueFrom": key("configMapKeyRef", "rkb-view-none", "k", true)},
                    {"name": "COMBO", "value": "$(NAME)-$(MODE)-$(CM_level)-$$(MODE)-$(MISSING)"},
                    {"name": "SVC", "value": "$(RKB_VIEW_SVC_SERVICE_HOST):$(RKB_VIEW_SVC_SERVICE_PORT_HTTP)"},
                    {"name": "EMPTY", "value": ""},
                ],
            }],
        },
    }))
    .context("building the view pod")
}

/// The stdout of a CRI log file (as containerd writes it under podLogsDir
/// for either kubelet: the API server's log proxy would need the kubelet's
/// port reachable at the Node's address, which the bench's upstream kubelet
/// does not listen on).
pub fn read_cri_log(path: &std::path::Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = Assembler::default();
    let mut out = String::new();
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let Ok(entry) = parse_line(line) else {
            continue;
        };
        if entry.stream != Stream::Stdout {
            continue;
        }
        if let Some(l) = lines.push(&entry) {
            out.push_str(&String::from_utf8_lossy(&l.content));
            out.push('\n');
        }
    }
    Ok(out)
}

/// The pod's log with its IP put as `<pod-ip>`, and the words of
/// resolv.conf's `options` line sorted: upstream merges dnsConfig's options
/// through a Go map, so their order changes from one run to the next.
pub fn normalize(log: &str, pod_ip: &str) -> String {
    let log = if pod_ip.is_empty() {
        log.to_owned()
    } else {
        log.replace(pod_ip, "<pod-ip>")
    };
    let mut out = String::with_capacity(log.len());
    for line in log.lines() {
        match line.strip_prefix("options ") {
            Some(rest) => {
                let mut words: Vec<&str> = rest.split_whitespace().collect();
                words.sort_unstable();
                out.push_str("options ");
                out.push_str(&words.join(" "));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The lines of `a` not in `b` (`-`) and of `b` not in `a` (`+`), in order.
pub fn differences(a: &str, b: &str) -> Vec<String> {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let only_a = la
        .iter()
        .filter(|l| !lb.contains(l))
        .map(|l| format!("- {l}"));
    let only_b = lb
        .iter()
        .filter(|l| !la.contains(l))
        .map(|l| format!("+ {l}"));
    only_a.chain(only_b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_ip_is_normalized_and_differences_are_listed() {
        let up = normalize(
            "POD_IP=10.0.0.5\nA=1\n10.0.0.5\th1\noptions ndots:2 edns0\n",
            "10.0.0.5",
        );
        assert_eq!(
            up,
            "POD_IP=<pod-ip>\nA=1\n<pod-ip>\th1\noptions edns0 ndots:2\n"
        );
        let rk = "POD_IP=<pod-ip>\nA=2\n<pod-ip>\th1\noptions edns0 ndots:2\n";
        assert_eq!(differences(&up, rk), ["- A=1", "+ A=2"]);
        assert!(differences(rk, rk).is_empty());
    }

    #[test]
    fn cri_logs_are_read_as_their_stdout() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("0.log");
        std::fs::write(
            &f,
            "2026-12-01T00:00:00.1Z stdout P A=\n2026-12-01T00:00:00.2Z stderr F oops\n2026-12-01T00:00:00.3Z stdout F 1\n2026-12-01T00:00:00.4Z stdout F B=2\n",
        )
        .unwrap();
        assert_eq!(read_cri_log(&f).unwrap(), "A=1\nB=2\n");
    }

    #[test]
    fn the_pod_parses() {
        let p = pod(json!({"name": "x"}), "n", "img").unwrap();
        let c = &p.spec.unwrap().containers[0];
        assert_eq!(c.env.as_ref().unwrap().len(), 20);
    }
}
