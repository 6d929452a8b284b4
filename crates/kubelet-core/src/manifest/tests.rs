use serde_json::json;

use super::validate::TOTAL_ANNOTATION_SIZE_LIMIT;
use super::*;

const NODE: &str = "Node-1";
const FILE: &str = "/etc/kubernetes/manifests/web.yaml";

const WEB: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: nginx
    image: nginx:1.25
    ports:
    - containerPort: 80
    resources:
      limits:
        cpu: 500m
        memory: 128Mi
"#;

fn parse_one(content: &str) -> Pod {
    let mut pods = parse_static_pods(Origin::File(FILE), content, NODE).expect("parses");
    assert_eq!(pods.len(), 1);
    pods.remove(0)
}

fn base_value() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [
                {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                               "requests": {"cpu": "500m", "memory": "512Mi"}}},
                {"name": "b", "image": "redis"}
            ]
        }
    })
}

fn parse_value(v: &Value) -> Result<Vec<Pod>, ManifestError> {
    parse_static_pods(Origin::File(FILE), &v.to_string(), NODE)
}

#[test]
fn applies_api_server_and_static_pod_defaults() {
    let pod = parse_one(WEB);
    let md = &pod.metadata;
    assert_eq!(md.name.as_deref(), Some("web-node-1"));
    assert_eq!(md.namespace.as_deref(), Some("default"));
    let uid = md.uid.clone().unwrap();
    assert_eq!(uid.len(), 32);
    let ann = md.annotations.as_ref().unwrap();
    assert_eq!(ann[keys::CONFIG_SOURCE], "file");
    assert_eq!(
        ann[keys::CONFIG_HASH],
        uid,
        "the UID is the hash, as upstream's"
    );
    assert_eq!(md.labels.as_ref().unwrap()["app"], "web");

    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some(NODE));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(spec.security_context, Some(PodSecurityContext::default()));
    assert_eq!(spec.enable_service_links, Some(true));
    assert_eq!(
        spec.tolerations.as_deref(),
        Some(
            &[Toleration {
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                ..Default::default()
            }][..]
        )
    );
    let c = &spec.containers[0];
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(
        c.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
    let port = &c.ports.as_ref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(port.host_port, None);
    // Requests default to limits.
    let res = c.resources.as_ref().unwrap();
    assert_eq!(res.requests, res.limits);
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );

    // Defaulting is idempotent.
    let mut again = pod.clone();
    apply_pod_defaults(&mut again);
    assert_eq!(again, pod);
}

#[test]
fn keeps_explicit_values() {
    let mut v = base_value();
    v["metadata"]["namespace"] = json!("kube-system");
    v["metadata"]["uid"] = json!("my-uid");
    v["metadata"]["annotations"] = json!({"team": "infra"});
    v["spec"]["restartPolicy"] = json!("Never");
    v["spec"]["terminationGracePeriodSeconds"] = json!(5);
    v["spec"]["dnsPolicy"] = json!("Default");
    v["spec"]["enableServiceLinks"] = json!(false);
    v["spec"]["tolerations"] = json!([{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10},
                   {"key": "k", "operator": "Exists"}]);
    v["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
    v["status"] = json!({"phase": "Running"});
    let pod = parse_value(&v).unwrap().remove(0);
    assert_eq!(pod.metadata.namespace.as_deref(), Some("kube-system"));
    assert_eq!(pod.metadata.uid.as_deref(), Some("my-uid"));
    assert_eq!(pod.metadata.annotations.as_ref().unwrap()["team"], "infra");
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.termination_grace_period_seconds, Some(5));
    assert_eq!(spec.dns_policy.as_deref(), Some("Default"));
    assert_eq!(spec.enable_service_links, Some(false));
    // The matching toleration is replaced, the other one kept.
    let tolerations = spec.tolerations.as_ref().unwrap();
    assert_eq!(tolerations.len(), 2);
    assert_eq!(tolerations[0].toleration_seconds, None);
    assert_eq!(tolerations[1].key.as_deref(), Some("k"));
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("Never")
    );
    // Only the phase is kept from status, and it is Pending.
    assert_eq!(
        pod.status,
        Some(PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        })
    );
}

#[test]
fn image_pull_policy_defaults() {
    let cases = [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.25", "IfNotPresent"),
        ("docker.io/library/nginx", "Always"),
        ("localhost:5000/nginx", "Always"),
        ("localhost:5000/nginx:1.2", "IfNotPresent"),
        ("localhost:5000/nginx:latest", "Always"),
        ("nginx@sha256:0123456789abcdef", "IfNotPresent"),
        ("nginx:latest@sha256:0123456789abcdef", "Always"),
        ("nginx:1@sha256:0123456789abcdef", "IfNotPresent"),
    ];
    for (image, want) in cases {
        let mut v = base_value();
        v["spec"]["containers"][1]["image"] = json!(image);
        v["spec"]["initContainers"][0]["image"] = json!(image);
        let pod = parse_value(&v).unwrap().remove(0);
        let spec = pod.spec.unwrap();
        for c in [&spec.containers[1], &spec.init_containers.unwrap()[0]] {
            assert_eq!(c.image_pull_policy.as_deref(), Some(want), "{image}");
        }
    }
}

#[test]
fn host_network_ports_and_nested_defaults() {
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata: {name: net}
spec:
  hostNetwork: true
  volumes:
  - name: scratch
  - name: certs
    hostPath: {path: /etc/ssl}
  - name: cfg
    configMap: {name: cfg}
  - name: info
    downwardAPI:
      items:
      - path: labels
        fieldRef: {fieldPath: metadata.labels}
  initContainers:
  - name: init
    image: busybox
    ports: [{containerPort: 9000}]
  containers:
  - name: app
    image: app:v1
    ports:
    - containerPort: 8080
    - containerPort: 8443
      hostPort: 443
      protocol: UDP
    env:
    - name: NODE
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    livenessProbe:
      httpGet: {port: 8080}
    lifecycle:
      preStop:
        httpGet: {port: 8080, path: /quit}
"#;
    let pod = parse_one(yaml);
    let spec = pod.spec.unwrap();
    let ports = spec.containers[0].ports.as_ref().unwrap();
    assert_eq!(ports[0].host_port, Some(8080));
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
    assert_eq!(ports[1].host_port, Some(443));
    assert_eq!(ports[1].protocol.as_deref(), Some("UDP"));
    let init_ports = spec.init_containers.as_ref().unwrap()[0].ports.as_ref();
    assert_eq!(init_ports.unwrap()[0].host_port, Some(9000));

    let c = &spec.containers[0];
    let probe = c.liveness_probe.as_ref().unwrap();
    assert_eq!(
        (
            probe.timeout_seconds,
            probe.period_seconds,
            probe.success_threshold,
            probe.failure_threshold
        ),
        (Some(1), Some(10), Some(1), Some(3))
    );
    let http = probe.http_get.as_ref().unwrap();
    assert_eq!(http.path.as_deref(), Some("/"));
    assert_eq!(http.scheme.as_deref(), Some("HTTP"));
    let pre_stop = c.lifecycle.as_ref().unwrap().pre_stop.as_ref().unwrap();
    let http = pre_stop.http_get.as_ref().unwrap();
    assert_eq!(http.path.as_deref(), Some("/quit"));
    assert_eq!(http.scheme.as_deref(), Some("HTTP"));
    let env = &c.env.as_ref().unwrap()[0];
    let field_ref = env.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
    assert_eq!(field_ref.api_version.as_deref(), Some("v1"));

    let volumes = spec.volumes.unwrap();
    assert!(volumes[0].empty_dir.is_some());
    assert_eq!(
        volumes[1].host_path.as_ref().unwrap().type_.as_deref(),
        Some("")
    );
    assert!(volumes[1].empty_dir.is_none());
    assert_eq!(
        volumes[2].config_map.as_ref().unwrap().default_mode,
        Some(0o644)
    );
    let downward = volumes[3].downward_api.as_ref().unwrap();
    assert_eq!(downward.default_mode, Some(0o644));
    let item_ref = downward.items.as_ref().unwrap()[0].field_ref.as_ref();
    assert_eq!(item_ref.unwrap().api_version.as_deref(), Some("v1"));
}

/// Every validation rule, each naming its field.
#[test]
fn validation_errors_name_the_field() {
    type Mutation = fn(&mut Value);
    let cases: &[(&str, Mutation, &str, &str)] = &[
        (
            "missing name",
            |v| v["metadata"].as_object_mut().unwrap().clear(),
            "metadata.name",
            "required",
        ),
        (
            "bad name",
            |v| v["metadata"]["name"] = json!("Web_1"),
            "metadata.name",
            "subdomain",
        ),
        (
            "name too long once suffixed",
            |v| v["metadata"]["name"] = json!("a".repeat(250)),
            "metadata.name",
            "253",
        ),
        (
            "bad namespace",
            |v| v["metadata"]["namespace"] = json!("kube.system"),
            "metadata.namespace",
            "must not contain dots",
        ),
        (
            "bad label key",
            |v| v["metadata"]["labels"] = json!({"app/x/y": "web"}),
            "metadata.labels",
            "Invalid value: \"app/x/y\": a valid label key",
        ),
        (
            "bad label value",
            |v| v["metadata"]["labels"] = json!({"app": "-web"}),
            "metadata.labels",
            "Invalid value: \"-web\": a valid label must be an empty string",
        ),
        (
            "bad annotation key",
            |v| v["metadata"]["annotations"] = json!({"a b": "c"}),
            "metadata.annotations",
            "Invalid value: \"a b\": name part must consist of",
        ),
        (
            "annotations too big",
            |v| {
                v["metadata"]["annotations"] =
                    json!({"a": "x".repeat(128 << 10), "b": "y".repeat(128 << 10)})
            },
            "metadata.annotations",
            "Too long: may not be more than 262144 bytes",
        ),
        (
            "no containers",
            |v| v["spec"]["containers"] = json!([]),
            "spec.containers",
            "at least one container",
        ),
        (
            "a volume name that is a path",
            |v| v["spec"]["volumes"] = json!([{"name": "../../etc", "emptyDir": {}}]),
            "spec.volumes[0].name",
            "label",
        ),
        (
            "duplicate volume name",
            |v| {
                v["spec"]["volumes"] =
                    json!([{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}])
            },
            "spec.volumes[1].name",
            "Duplicate value: \"a\"",
        ),
        (
            "bad container name",
            |v| v["spec"]["containers"][1]["name"] = json!("Redis"),
            "spec.containers[1].name",
            "label",
        ),
        (
            "long container name",
            |v| v["spec"]["containers"][1]["name"] = json!("r".repeat(64)),
            "spec.containers[1].name",
            "63",
        ),
        (
            "empty container name",
            |v| v["spec"]["containers"][1]["name"] = json!(""),
            "spec.containers[1].name",
            "required",
        ),
        (
            "duplicate container name",
            |v| v["spec"]["containers"][1]["name"] = json!("a"),
            "spec.containers[1].name",
            "duplicate",
        ),
        (
            "container name used by an init container",
            |v| v["spec"]["containers"][1]["name"] = json!("init"),
            "spec.containers[1].name",
            "duplicate",
        ),
        (
            "bad init container name",
            |v| v["spec"]["initContainers"][0]["name"] = json!("-init"),
            "spec.initContainers[0].name",
            "label",
        ),
        (
            "missing image",
            |v| v["spec"]["containers"][1]["image"] = json!(""),
            "spec.containers[1].image",
            "required",
        ),
        (
            "restart policy",
            |v| v["spec"]["restartPolicy"] = json!("Sometimes"),
            "spec.restartPolicy",
            "unsupported value",
        ),
        (
            "pull policy",
            |v| v["spec"]["containers"][0]["imagePullPolicy"] = json!("Maybe"),
            "spec.containers[0].imagePullPolicy",
            "unsupported value",
        ),
        (
            "container restart policy",
            |v| v["spec"]["containers"][1]["restartPolicy"] = json!("Sometimes"),
            "spec.containers[1].restartPolicy",
            "unsupported value",
        ),
        (
            "restart rules without a container restart policy",
            |v| {
                v["spec"]["containers"][0]["restartPolicyRules"] =
                    json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}])
            },
            "spec.containers[0].restartPolicy",
            "must specify restartPolicy when restart rules are used",
        ),
        (
            "restart rule action",
            |v| {
                v["spec"]["containers"][0]["restartPolicy"] = json!("Never");
                v["spec"]["containers"][0]["restartPolicyRules"] = json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}])
            },
            "spec.containers[0].restartPolicyRules[0].action",
            "unsupported value",
        ),
        (
            "restart rule without exit codes",
            |v| {
                v["spec"]["containers"][0]["restartPolicy"] = json!("Never");
                v["spec"]["containers"][0]["restartPolicyRules"] = json!([{"action": "Restart"}])
            },
            "spec.containers[0].restartPolicyRules[0].exitCodes",
            "required",
        ),
        (
            "restart rule operator",
            |v| {
                v["spec"]["containers"][0]["restartPolicy"] = json!("Never");
                v["spec"]["containers"][0]["restartPolicyRules"] =
                    json!([{"action": "Restart", "exitCodes": {"operator": "Gt", "values": [1]}}])
            },
            "spec.containers[0].restartPolicyRules[0].exitCodes.operator",
            "unsupported value",
        ),
        (
            "container port zero",
            |v| v["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(0),
            "spec.containers[0].ports[0].containerPort",
            "between 1 and 65535",
        ),
        (
            "container port too big",
            |v| v["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(65536),
            "spec.containers[0].ports[0].containerPort",
            "between 1 and 65535",
        ),
        (
            "host port",
            |v| v["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(-1),
            "spec.containers[0].ports[0].hostPort",
            "between 0 and 65535",
        ),
        (
            "protocol",
            |v| v["spec"]["containers"][0]["ports"][0]["protocol"] = json!("ICMP"),
            "spec.containers[0].ports[0].protocol",
            "unsupported value",
        ),
        (
            "grace period",
            |v| v["spec"]["terminationGracePeriodSeconds"] = json!(-1),
            "spec.terminationGracePeriodSeconds",
            "greater than or equal to 0",
        ),
        (
            "cpu limit",
            |v| v["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("lots"),
            "spec.containers[0].resources.limits[cpu]",
            "quantity",
        ),
        (
            "memory request",
            |v| v["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("1x"),
            "spec.containers[0].resources.requests[memory]",
            "unknown suffix",
        ),
        (
            "negative memory",
            |v| v["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("-1"),
            "spec.containers[0].resources.requests[memory]",
            "greater than or equal to 0",
        ),
        (
            "cpu request above limit",
            |v| v["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("1001m"),
            "spec.containers[0].resources.requests[cpu]",
            "less than or equal to cpu limit",
        ),
        (
            "memory request above limit",
            |v| v["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("2Gi"),
            "spec.containers[0].resources.requests[memory]",
            "less than or equal to memory limit",
        ),
        (
            "init container resources",
            |v| v["spec"]["initContainers"][0]["resources"] = json!({"limits": {"cpu": "1.5.1"}}),
            "spec.initContainers[0].resources.limits[cpu]",
            "quantity",
        ),
        // Decoding errors name the field too.
        (
            "wrong apiVersion",
            |v| v["apiVersion"] = json!("apps/v1"),
            "apiVersion",
            "must be \"v1\"",
        ),
        (
            "missing kind",
            |v| {
                v.as_object_mut().unwrap().remove("kind");
            },
            "kind",
            "required",
        ),
        (
            "wrong kind",
            |v| v["kind"] = json!("Deployment"),
            "kind",
            "must be \"Pod\"",
        ),
        (
            "port of the wrong type",
            |v| v["spec"]["containers"][0]["ports"][0]["containerPort"] = json!("http"),
            "spec.containers[0].ports[0].containerPort",
            "invalid type",
        ),
        (
            "port out of i32",
            |v| v["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(1u64 << 40),
            "spec.containers[0].ports[0].containerPort",
            "invalid value",
        ),
        (
            "containers not a list",
            |v| v["spec"]["containers"] = json!({"name": "x"}),
            "spec.containers",
            "invalid type",
        ),
        (
            "container without a name",
            |v| {
                v["spec"]["containers"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("name");
            },
            "spec.containers[1].name",
            "required",
        ),
        (
            "labels of the wrong type",
            |v| v["metadata"]["labels"] = json!({"a": ["b"]}),
            "metadata.labels.a",
            "invalid type",
        ),
        (
            "bad timestamp",
            |v| v["metadata"]["creationTimestamp"] = json!("yesterday"),
            "metadata.creationTimestamp",
            "",
        ),
    ];
    // The base document is fine.
    assert_eq!(parse_value(&base_value()).unwrap().len(), 1);
    for (what, mutate, field, message) in cases {
        let mut v = base_value();
        mutate(&mut v);
        let err = parse_value(&v).expect_err(what);
        assert_eq!(err.field, *field, "{what}: {err}");
        assert!(err.message.contains(message), "{what}: {err}");
        assert_eq!((err.file.as_str(), err.doc), (FILE, 0), "{what}");
        assert_eq!(
            err.to_string(),
            format!("{FILE}: document 0: {field}: {}", err.message)
        );
    }
}

#[test]
fn validate_pod_directly() {
    let mut pod = Pod::default();
    assert_eq!(validate_pod(&pod).unwrap_err().field, "metadata.name");
    pod.metadata.name = Some("p".into());
    assert_eq!(validate_pod(&pod).unwrap_err().field, "metadata.namespace");
    pod.metadata.namespace = Some("default".into());
    assert_eq!(validate_pod(&pod).unwrap_err().field, "spec");
    apply_pod_defaults(&mut pod);
    assert_eq!(validate_pod(&pod).unwrap_err().field, "spec.containers");
}

/// The UID is the hash of what the manifest asks for, on this node,
/// from this file (upstream's): the same after a restart, new after an
/// edit; a UID the manifest gives is kept.
#[test]
fn uid_is_the_hash_of_the_content_node_and_file() {
    let uid_of = |content: &str, file: &str, node: &str| {
        parse_static_pods(Origin::File(file), content, node).unwrap()[0]
            .metadata
            .uid
            .clone()
            .unwrap()
    };
    let base = uid_of(WEB, FILE, NODE);
    assert_eq!(
        uid_of(WEB, FILE, NODE),
        base,
        "deterministic: adopted after a restart"
    );
    // Same content written differently: same pod.
    let reformatted = WEB.replace("cpu: 500m", "cpu: \"500m\"") + "\n# trailing comment\n";
    assert_eq!(uid_of(&reformatted, FILE, NODE), base);
    let others = [
        uid_of(WEB, FILE, "node-2"),
        uid_of(WEB, "/etc/kubernetes/manifests/other.yaml", NODE),
        uid_of(&WEB.replace("name: web", "name: api"), FILE, NODE),
        uid_of(
            &WEB.replace("  name: web", "  name: web\n  namespace: kube-system"),
            FILE,
            NODE,
        ),
        uid_of(&WEB.replace("nginx:1.25", "nginx:1.26"), FILE, NODE),
        uid_of(&WEB.replace("app: web", "app: web2"), FILE, NODE),
        uid_of(
            &WEB.replace("  labels:", "  annotations: {a: b}\n  labels:"),
            FILE,
            NODE,
        ),
        uid_of(
            &WEB.replace("containerPort: 80", "containerPort: 81"),
            FILE,
            NODE,
        ),
        uid_of(&WEB.replace("cpu: 500m", "cpu: 600m"), FILE, NODE),
    ];
    for other in &others {
        assert_ne!(*other, base);
    }
    let distinct: BTreeSet<_> = others.iter().collect();
    assert_eq!(distinct.len(), others.len());
    let own = WEB.replace("  name: web", "  name: web\n  uid: my-uid");
    assert_eq!(uid_of(&own, FILE, NODE), "my-uid");
    assert_eq!(
        uid_of(&own.replace("nginx:1.25", "nginx:1.26"), FILE, NODE),
        "my-uid"
    );
}

#[test]
fn multiple_documents() {
    let content = format!(
        "---\n# leading comment\n{WEB}\n---\n---\n# only a comment\n---\n{}\n---\n",
        WEB.replace("name: web", "name: api")
    );
    let pods = parse_static_pods(Origin::File(FILE), &content, NODE).unwrap();
    let names: Vec<_> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["web-node-1", "api-node-1"]);

    // Errors give the document's index, empty documents counting.
    let content = format!("{WEB}---\n---\n{}", WEB.replace("nginx:1.25", "\"\""));
    let err = parse_static_pods(Origin::File(FILE), &content, NODE).unwrap_err();
    assert_eq!(
        (err.doc, err.field.as_str()),
        (2, "spec.containers[0].image")
    );

    // A YAML syntax error names the document and has no field.
    let content = format!("{WEB}---\nkind: Pod\nmetadata: [unclosed\n");
    let err = parse_static_pods(Origin::File(FILE), &content, NODE).unwrap_err();
    assert_eq!((err.doc, err.field.as_str()), (1, ""), "{err}");
    assert!(err.message.starts_with("invalid YAML"), "{err}");
    assert!(!err.message.contains('\n'), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("{FILE}: document 1: invalid YAML"))
    );

    // Empty files and files of comments hold no pods.
    for empty in ["", "\n", "---\n", "# nothing\n---\n---\n", "null\n"] {
        assert_eq!(
            parse_static_pods(Origin::File(FILE), empty, NODE).unwrap(),
            [],
            "{empty:?}"
        );
    }
    // A document that is not a mapping.
    let err = parse_static_pods(Origin::File(FILE), "- a\n- b\n", NODE).unwrap_err();
    assert_eq!((err.doc, err.field.as_str()), (0, ""));
    assert!(err.message.contains("a list"), "{err}");
}

#[test]
fn json_input() {
    let v = base_value();
    let pretty = serde_json::to_string_pretty(&v)
        .unwrap()
        .replace("  ", "\t");
    let from_json = parse_static_pods(Origin::File(FILE), &pretty, NODE).unwrap();
    let yaml: String = serde_json::to_string(&v).unwrap();
    assert_eq!(
        from_json,
        parse_static_pods(Origin::File(FILE), &yaml, NODE).unwrap()
    );
    assert_eq!(from_json[0].metadata.name.as_deref(), Some("web-node-1"));

    // A stream of JSON objects is several documents.
    let mut second = base_value();
    second["metadata"]["name"] = json!("second");
    second["spec"]["containers"][0]["ports"][0]["containerPort"] = json!("x");
    let stream = format!("{v}\n{second}\n");
    let err = parse_static_pods(Origin::File(FILE), &stream, NODE).unwrap_err();
    assert_eq!(
        (err.doc, err.field.as_str()),
        (1, "spec.containers[0].ports[0].containerPort")
    );

    // Broken JSON reports the JSON error.
    let err = parse_static_pods(
        Origin::File(FILE),
        "{\"apiVersion\": \"v1\",\n\t\"kind\": \"Pod\"",
        NODE,
    )
    .unwrap_err();
    assert_eq!(err.field, "");
    assert!(err.message.starts_with("invalid JSON"), "{err}");
}

#[test]
fn yaml_quantities_may_be_numbers() {
    let yaml = WEB
        .replace("cpu: 500m", "cpu: 0.5")
        .replace("memory: 128Mi", "memory: 134217728");
    let pod = parse_one(&yaml);
    let limits = pod.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(quantity::parse_cpu_millis(&limits["cpu"]), Ok(500));
    assert_eq!(quantity::parse_bytes(&limits["memory"]), Ok(128 << 20));
}

/// Upstream's messages, word for word (apimachinery's validation tests and messages).
#[test]
fn name_and_label_syntax() {
    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const KEY_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    let long63 = "a".repeat(63);
    let long64 = "a".repeat(64);
    let long254 = "a".repeat(254);
    type Check = fn(&str) -> Vec<String>;
    let cases: &[(Check, &str, &[&str])] = &[
        (is_dns1123_label, "a", &[]),
        (is_dns1123_label, "my-name-1", &[]),
        (is_dns1123_label, &long63, &[]),
        (
            is_dns1123_label,
            &long64,
            &["must be no more than 63 characters"],
        ),
        (is_dns1123_label, "", &[LABEL_MSG]),
        (is_dns1123_label, "A", &[LABEL_MSG]),
        (is_dns1123_label, "-a", &[LABEL_MSG]),
        (is_dns1123_label, "a.b", &["must not contain dots"]),
        (is_dns1123_subdomain, "a.b-c.d", &[]),
        (is_dns1123_subdomain, "a..b", &[SUBDOMAIN_MSG]),
        (is_dns1123_subdomain, "a_b", &[SUBDOMAIN_MSG]),
        (is_dns1123_subdomain, "a.", &[SUBDOMAIN_MSG]),
        (
            is_dns1123_subdomain,
            &long254,
            &["must be no more than 253 characters"],
        ),
        (is_qualified_name, "app", &[]),
        (is_qualified_name, "My_App.v1", &[]),
        (is_qualified_name, "example.com/MyName", &[]),
        (is_qualified_name, &long63, &[]),
        (
            is_qualified_name,
            &long64,
            &["name part must be no more than 63 bytes"],
        ),
        (
            is_qualified_name,
            "",
            &["name part must be non-empty", KEY_NAME_MSG],
        ),
        (is_qualified_name, "-app", &[KEY_NAME_MSG]),
        (
            is_qualified_name,
            "/app",
            &["prefix part must be non-empty"],
        ),
        (
            is_qualified_name,
            "Example.com/app",
            &[
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        ),
        (
            is_qualified_name,
            "example.com/",
            &["name part must be non-empty", KEY_NAME_MSG],
        ),
        (
            is_qualified_name,
            "a/b/c",
            &[
                "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            ],
        ),
        (is_valid_label_value, "", &[]),
        (is_valid_label_value, "v1.2_x-Y", &[]),
        (is_valid_label_value, &long63, &[]),
        (
            is_valid_label_value,
            &long64,
            &["must be no more than 63 bytes"],
        ),
        (is_valid_label_value, "a b", &[VALUE_MSG]),
        (is_valid_label_value, "a-", &[VALUE_MSG]),
    ];
    for (check, value, want) in cases {
        assert_eq!(check(value), *want, "{value:?}");
    }
}

/// The annotations' total size counts keys and values, the config annotations included.
#[test]
fn annotation_size_limit() {
    let with_value_of = |len: usize| {
        let mut v = base_value();
        v["metadata"]["annotations"] = json!({"a": "x".repeat(len)});
        parse_value(&v)
    };
    // What the config annotations (source and hash) take.
    let pod = with_value_of(0).unwrap().remove(0);
    let config: usize = pod
        .metadata
        .annotations
        .unwrap()
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let room = TOTAL_ANNOTATION_SIZE_LIMIT - config;
    assert!(with_value_of(room).is_ok());
    let err = with_value_of(room + 1).unwrap_err();
    assert_eq!(err.field, "metadata.annotations");
    assert_eq!(err.message, "Too long: may not be more than 262144 bytes");
    // A 20 MB annotation is refused without echoing it.
    let err = with_value_of(20 << 20).unwrap_err();
    assert!(err.to_string().len() < 200, "{err}");
}

#[test]
fn split_keeps_line_numbers() {
    let docs = split_yaml_documents("a: 1\n---\nb: 2\n--- c: 3\n");
    let want = [(0, "a: 1\n"), (1, "\nb: 2\n"), (3, " c: 3\n")];
    assert_eq!(docs, want.map(|(l, d)| (l, d.to_owned())));
    let docs = split_yaml_documents("---\na: 1\n");
    assert_eq!(docs, [(0, "\na: 1\n".to_owned())]);
    // "---x" is not a marker.
    let docs = split_yaml_documents("a: |\n  ---x\n");
    assert_eq!(docs.len(), 1);
    // Documents are not padded to their lines: many of them cost the file's size, not
    // documents × lines.
    let many = "---\n# nothing\n".repeat(20_000);
    let docs = split_yaml_documents(&many);
    assert_eq!(docs.len(), 20_000);
    assert!(docs.iter().map(|(_, d)| d.len()).sum::<usize>() <= many.len());
    assert_eq!(
        parse_static_pods(Origin::File(FILE), &many, NODE).unwrap(),
        []
    );
    // An error still gives the line in the file.
    let err =
        parse_static_pods(Origin::File(FILE), &format!("{many}---\nkind: [\n"), NODE).unwrap_err();
    assert_eq!(err.doc, 20_000);
    assert!(err.message.contains("line 40002"), "{err}");
}

#[test]
fn a_pod_list_from_the_manifest_url_is_static_pods_of_source_http() {
    let list = r#"{"apiVersion": "v1", "kind": "PodList", "items": [
        {"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    ]}"#;
    let url = "http://192.0.2.1/pods";
    let pods = parse_static_pods(Origin::Url(url), list, NODE).unwrap();
    assert_eq!(pods.len(), 2);
    for (pod, name) in pods.iter().zip(["a", "b"]) {
        assert_eq!(
            pod.metadata.name.as_deref(),
            Some(format!("{name}-{}", NODE.to_lowercase()).as_str())
        );
        let ann = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[keys::CONFIG_SOURCE], "http");
        assert!(crate::types::is_static_pod(pod));
    }
    // The same pod from a file and from the URL: two identities.
    let single = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}"#;
    let from_url = &parse_static_pods(Origin::Url(url), single, NODE).unwrap()[0];
    let from_file = &parse_static_pods(Origin::File(FILE), single, NODE).unwrap()[0];
    assert_eq!(from_url.metadata.uid, pods[0].metadata.uid);
    assert_ne!(from_url.metadata.uid, from_file.metadata.uid);
    // An item without a name fails the list.
    let err = parse_static_pods(
        Origin::Url(url),
        r#"{"apiVersion": "v1", "kind": "PodList", "items": [{"spec": {}}]}"#,
        NODE,
    )
    .unwrap_err();
    assert!(err.to_string().contains("metadata.name"), "{err}");
}
