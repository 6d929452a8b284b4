//! Static pod manifests: parsing, API-server defaulting, static-pod identity and validation.
//!
//! A manifest file holds one or more v1 Pods, in YAML or JSON, several YAML documents
//! separated by `---` lines. [`parse_static_pods`] turns such a file into pods ready for the
//! config mux, the way upstream's file source (`pkg/kubelet/config/file.go`, `common.go`)
//! does: decode, default as the API server would, give each pod its static identity
//! (name suffixed with the node name, UID, `kubernetes.io/config.*` annotations, a
//! `NoExecute` toleration, `nodeName`, phase `Pending`), then validate.
//!
//! Everything here is pure: no file system, no clock.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, LifecycleHandler, ObjectFieldSelector, Pod, PodSecurityContext,
    PodSpec, PodStatus, Probe, Toleration, Volume,
};
use md5::{Digest, Md5};
use serde_json::Value;

use crate::quantity;
use crate::types::keys;

/// A manifest file that could not be turned into pods.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: document {doc}: {}{message}", field_prefix(field))]
pub struct ManifestError {
    /// The file, as given to [`parse_static_pods`].
    pub file: String,
    /// 0-based index of the YAML document (`---`-separated) in the file.
    pub doc: usize,
    /// Path of the offending field (`spec.containers[1].image`), or "" for a syntax error.
    pub field: String,
    pub message: String,
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

/// A pod field that failed validation (or decoding).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", field_prefix(field))]
pub struct FieldError {
    /// Path of the field, e.g. `spec.containers[1].image`.
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Parses the static pod file `file` (its path, used in errors and in the pods' identity)
/// with contents `content` into defaulted, validated pods for node `node_name`.
///
/// Empty documents are ignored; the first document that fails fails the whole file (the
/// file source then keeps the file's last good pods).
pub fn parse_static_pods(
    file: &str,
    content: &str,
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let docs = decode_documents(content).map_err(|(doc, message)| ManifestError {
        file: file.to_owned(),
        doc,
        field: String::new(),
        message,
    })?;
    let mut pods = Vec::with_capacity(docs.len());
    for (doc, value) in docs {
        let to_manifest_error = |e: FieldError| ManifestError {
            file: file.to_owned(),
            doc,
            field: e.field,
            message: e.message,
        };
        let mut pod = pod_from_value(&value).map_err(to_manifest_error)?;
        make_static(&mut pod, file, node_name).map_err(to_manifest_error)?;
        pods.push(pod);
    }
    Ok(pods)
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// Splits `content` into YAML documents and decodes each non-empty one, returning
/// `(document index, value)` pairs, or `(document index, message)` for a syntax error.
fn decode_documents(content: &str) -> Result<Vec<(usize, Value)>, (usize, String)> {
    // JSON first when it looks like JSON: serde_json is exact about JSON (tabs, escapes) and
    // gives precise positions. A stream of several objects is several documents.
    if content.trim_start().starts_with('{') {
        let stream = serde_json::Deserializer::from_str(content).into_iter::<Value>();
        let parsed: Result<Vec<Value>, _> = stream.collect();
        match parsed {
            Ok(values) => return Ok(values.into_iter().enumerate().collect()),
            Err(json_err) => {
                // Maybe it is YAML flow syntax rather than JSON; report the JSON error if
                // YAML does not like it either.
                return decode_yaml(content)
                    .map_err(|(doc, _)| (doc, format!("invalid JSON: {json_err}")));
            }
        }
    }
    decode_yaml(content)
}

fn decode_yaml(content: &str) -> Result<Vec<(usize, Value)>, (usize, String)> {
    let parse = |text: &str| {
        let options = serde_saphyr::options! { with_snippet: false };
        serde_saphyr::from_multiple_with_options::<Value>(text, options)
    };
    let mut out = Vec::new();
    for (doc, (first_line, text)) in split_yaml_documents(content).into_iter().enumerate() {
        let values = parse(&text).map_err(|e| {
            // Again after as many blank lines as precede the document, so that the error's
            // position is the file's (only for the failing document: padding every one
            // would cost documents × lines).
            let padded = format!("{}{text}", "\n".repeat(first_line));
            let e = parse(&padded).err().unwrap_or(e);
            (doc, format!("invalid YAML: {}", one_line(&e.to_string())))
        })?;
        out.extend(values.into_iter().map(|v| (doc, v)));
    }
    Ok(out)
}

/// Collapses a (possibly multi-line, snippet-carrying) parser message onto one line.
fn one_line(s: &str) -> String {
    let s = s.trim_start();
    s.strip_prefix("error:")
        .unwrap_or(s)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits a YAML stream at document markers (`---` at the start of a line, alone or followed
/// by blanks and content). A first chunk with nothing but blanks, comments and directives (the
/// usual leading `---`) is not a document. Each document comes with the 0-based line of the
/// file it starts on (its marker's line, which holds what followed the marker).
fn split_yaml_documents(content: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut current_line = 0;
    let mut first = true;
    for (line_no, line) in content.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        let marker = bare
            .strip_prefix("---")
            .filter(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
        match marker {
            Some(rest) => {
                let previous = std::mem::take(&mut current);
                if !first || has_yaml_content(&previous) {
                    docs.push((current_line, previous));
                }
                first = false;
                current_line = line_no;
                current.push_str(rest);
                current.push('\n');
            }
            None => current.push_str(line),
        }
    }
    if !first || has_yaml_content(&current) {
        docs.push((current_line, current));
    }
    docs
}

fn has_yaml_content(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        !(l.is_empty() || l.starts_with('#') || l.starts_with('%'))
    })
}

/// Checks `apiVersion` and `kind`, then decodes the pod, naming the failing field on error.
fn pod_from_value(value: &Value) -> Result<Pod, FieldError> {
    let Some(object) = value.as_object() else {
        return Err(FieldError::new(
            "",
            format!("expected a Pod object, found {}", value_kind(value)),
        ));
    };
    for (field, want) in [("apiVersion", "v1"), ("kind", "Pod")] {
        match object.get(field) {
            Some(Value::String(s)) if s == want => {}
            None | Some(Value::Null) => {
                return Err(FieldError::new(
                    field,
                    format!("required, must be {want:?}"),
                ));
            }
            Some(Value::String(s)) => {
                return Err(FieldError::new(
                    field,
                    format!("unsupported value {s:?}, must be {want:?}"),
                ));
            }
            Some(other) => {
                return Err(FieldError::new(
                    field,
                    format!("expected the string {want:?}, found {}", value_kind(other)),
                ));
            }
        }
    }
    // serde_path_to_error says where (`spec.containers[0].ports[1].containerPort`).
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        FieldError::new(path, e.into_inner().to_string())
    })
}

fn value_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

// ---------------------------------------------------------------------------------------------
// Static pod identity

/// Gives a decoded pod its static-pod identity, applies defaults and validates it.
fn make_static(pod: &mut Pod, file: &str, node_name: &str) -> Result<(), FieldError> {
    let written_name = pod.metadata.name.clone().unwrap_or_default();
    if written_name.is_empty() {
        return Err(FieldError::new("metadata.name", "required"));
    }
    apply_pod_defaults(pod);

    // Upstream's applyDefaults: the UID is the hash of what the manifest
    // asks for, so an edit is a new pod.
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        pod.metadata.uid = Some(content_hash(pod, node_name, file));
    }
    pod.metadata.name = Some(format!("{written_name}-{}", node_name.to_lowercase()));

    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_owned());
    add_or_update_toleration(
        spec,
        Toleration {
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        },
    );
    // A manifest's status means nothing: the kubelet is the source of truth for it.
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    });

    // "The generated UID is the hash of the file": config.hash is the UID
    // (a manifest's own UID included), as upstream sets it.
    let hash = pod.metadata.uid.clone().unwrap_or_default();
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        keys::CONFIG_SOURCE.to_owned(),
        crate::types::SOURCE_FILE.into(),
    );
    annotations.insert(keys::CONFIG_HASH.to_owned(), hash);
    // As upstream, the pod is validated with its config annotations (they count towards
    // the annotations' total size).
    validate_pod(pod)
}

/// The UID of a static pod whose manifest sets none, as upstream derives
/// it: a hash of the pod the manifest asks for, the node and the file, so
/// an edit of the manifest is a new pod (the old one terminated within its
/// grace period, then the new one started), and the same manifest gives
/// the same UID after a restart (its running pod is adopted). Upstream
/// hashes Go's dump of its internal Pod type (FNV-128a over go-spew's
/// output), which no other program reproduces: here it is MD5 over the
/// canonical JSON of the defaulted pod's namespace, name, spec, labels and
/// (user) annotations, plus the node and the file. So the same manifest has
/// another UID under each kubelet, and swapping one for the other restarts
/// its static pods once. Computed before the `kubernetes.io/config.*`
/// annotations are added.
fn content_hash(pod: &Pod, node_name: &str, file: &str) -> String {
    let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(keys::CONFIG_SOURCE);
    annotations.remove(keys::CONFIG_HASH);
    annotations.remove(keys::CONFIG_SEEN);
    // Struct fields serialize in declaration order and maps are BTreeMaps: canonical.
    let canonical = serde_json::to_vec(&(
        &pod.metadata.namespace,
        &pod.metadata.name,
        &pod.spec,
        &pod.metadata.labels,
        &annotations,
        format!("host:{node_name}"),
        format!("file:{file}"),
    ))
    .expect("a Pod always serializes to JSON");
    hex::encode(Md5::digest(&canonical))
}

/// Upstream's `AddOrUpdateTolerationInPod`: replace a toleration matching on key, operator,
/// value and effect, else append.
fn add_or_update_toleration(spec: &mut PodSpec, toleration: Toleration) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let same = |t: &Toleration| {
        t.key.as_deref().unwrap_or("") == toleration.key.as_deref().unwrap_or("")
            && t.operator.as_deref().unwrap_or("Equal")
                == toleration.operator.as_deref().unwrap_or("Equal")
            && t.value.as_deref().unwrap_or("") == toleration.value.as_deref().unwrap_or("")
            && t.effect.as_deref().unwrap_or("") == toleration.effect.as_deref().unwrap_or("")
    };
    match tolerations.iter_mut().find(|t| same(t)) {
        Some(existing) => *existing = toleration,
        None => tolerations.push(toleration),
    }
}

// ---------------------------------------------------------------------------------------------
// Defaulting

/// Applies the defaults the API server's v1 defaulting (`pkg/apis/core/v1/defaults.go`) would
/// apply to a pod: namespace, pod spec fields, containers, ports, probes, handlers,
/// volumes and downward API field selectors. Idempotent.
pub fn apply_pod_defaults(pod: &mut Pod) {
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    set_if_none(&mut spec.dns_policy, "ClusterFirst");
    set_if_none(&mut spec.restart_policy, "Always");
    set_if_none(&mut spec.scheduler_name, "default-scheduler");
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.enable_service_links.get_or_insert(true);

    let host_network = spec.host_network.unwrap_or(false);
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        default_container(container, host_network);
    }
    for volume in spec.volumes.iter_mut().flatten() {
        default_volume(volume);
    }
}

fn set_if_none(field: &mut Option<String>, value: &str) {
    if field.as_deref().unwrap_or("").is_empty() {
        *field = Some(value.to_owned());
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.as_deref().unwrap_or("").is_empty() {
        let policy = if image_tag_is_latest(c.image.as_deref().unwrap_or("")) {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.image_pull_policy = Some(policy.into());
    }
    set_if_none(&mut c.termination_message_path, "/dev/termination-log");
    set_if_none(&mut c.termination_message_policy, "File");
    for port in c.ports.iter_mut().flatten() {
        set_if_none(&mut port.protocol, "TCP");
        // Upstream's defaultHostNetworkPorts: with the host's network, the container port
        // is the host port.
        if host_network && port.host_port.unwrap_or(0) == 0 {
            port.host_port = Some(port.container_port);
        }
    }
    // Upstream's SetDefaults_Pod: a limit without a request requests the limit.
    if let Some(resources) = c.resources.as_mut()
        && let Some(limits) = resources.limits.as_ref()
        && !limits.is_empty()
    {
        let requests = resources.requests.get_or_insert_with(BTreeMap::new);
        for (name, limit) in limits {
            requests
                .entry(name.clone())
                .or_insert_with(|| limit.clone());
        }
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lifecycle) = c.lifecycle.as_mut() {
        for handler in [&mut lifecycle.post_start, &mut lifecycle.pre_stop]
            .into_iter()
            .flatten()
        {
            default_handler(handler);
        }
    }
    for env in c.env.iter_mut().flatten() {
        if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            default_field_selector(field_ref);
        }
    }
}

/// Whether an image reference means the tag `latest`: an explicit `:latest`, or neither tag
/// nor digest (upstream's `parsers.ParseImageName` then assumes `latest`).
fn image_tag_is_latest(image: &str) -> bool {
    let (name, has_digest) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    // A ':' before the last '/' belongs to a registry host:port, not a tag.
    let last_component = &name[name.rfind('/').map_or(0, |i| i + 1)..];
    match last_component.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => !has_digest,
    }
}

fn default_probe(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    if let Some(http) = p.http_get.as_mut() {
        default_http_get(http);
    }
}

fn default_handler(h: &mut LifecycleHandler) {
    if let Some(http) = h.http_get.as_mut() {
        default_http_get(http);
    }
}

fn default_http_get(h: &mut HTTPGetAction) {
    set_if_none(&mut h.path, "/");
    set_if_none(&mut h.scheme, "HTTP");
}

fn default_field_selector(f: &mut ObjectFieldSelector) {
    set_if_none(&mut f.api_version, "v1");
}

/// File mode the API server gives projected files when none is set (0644).
const DEFAULT_FILE_MODE: i32 = 0o644;

fn default_volume(v: &mut Volume) {
    let no_source = Volume {
        name: v.name.clone(),
        ..Default::default()
    };
    if *v == no_source {
        v.empty_dir = Some(Default::default());
    }
    if let Some(host_path) = v.host_path.as_mut() {
        host_path.type_.get_or_insert_with(String::new);
    }
    if let Some(secret) = v.secret.as_mut() {
        secret.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(config_map) = v.config_map.as_mut() {
        config_map.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(downward) = v.downward_api.as_mut() {
        downward.default_mode.get_or_insert(DEFAULT_FILE_MODE);
        for item in downward.items.iter_mut().flatten() {
            if let Some(field_ref) = item.field_ref.as_mut() {
                default_field_selector(field_ref);
            }
        }
    }
    if let Some(projected) = v.projected.as_mut() {
        projected.default_mode.get_or_insert(DEFAULT_FILE_MODE);
        for source in projected.sources.iter_mut().flatten() {
            if let Some(token) = source.service_account_token.as_mut() {
                token.expiration_seconds.get_or_insert(3600);
            }
            if let Some(downward) = source.downward_api.as_mut() {
                for item in downward.items.iter_mut().flatten() {
                    if let Some(field_ref) = item.field_ref.as_mut() {
                        default_field_selector(field_ref);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

/// Validates a (defaulted) pod the way the API server would for the fields the kubelet relies
/// on. Returns the first problem, naming the field.
pub fn validate_pod(pod: &Pod) -> Result<(), FieldError> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return Err(FieldError::new("metadata.name", "required"));
    }
    check_dns_subdomain("metadata.name", name)?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    if namespace.is_empty() {
        return Err(FieldError::new("metadata.namespace", "required"));
    }
    check_dns_label("metadata.namespace", namespace)?;
    validate_labels_and_annotations(pod)?;

    let Some(spec) = pod.spec.as_ref() else {
        return Err(FieldError::new("spec", "required"));
    };
    if spec.containers.is_empty() {
        return Err(FieldError::new(
            "spec.containers",
            "required: a pod needs at least one container",
        ));
    }
    if let Some(policy) = spec.restart_policy.as_deref() {
        check_one_of(
            "spec.restartPolicy",
            policy,
            &["Always", "OnFailure", "Never"],
        )?;
    }
    if let Some(grace) = spec.termination_grace_period_seconds
        && grace < 0
    {
        return Err(FieldError::new(
            "spec.terminationGracePeriodSeconds",
            format!("{grace}: must be greater than or equal to 0"),
        ));
    }

    let mut volumes = BTreeSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let at = format!("spec.volumes[{i}].name");
        if v.name.is_empty() {
            return Err(FieldError::new(at, "required"));
        }
        check_dns_label(&at, &v.name)?;
        if !volumes.insert(v.name.as_str()) {
            return Err(FieldError::new(
                at,
                format!("Duplicate value: {:?}", v.name),
            ));
        }
    }

    let mut names = BTreeSet::new();
    let lists = [
        (
            "spec.initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("spec.containers", spec.containers.as_slice()),
    ];
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            let at = format!("{list}[{i}]");
            validate_container(&at, c)?;
            if list == "spec.containers" {
                validate_restart_policy(&at, c)?;
            }
            if !names.insert(c.name.as_str()) {
                return Err(FieldError::new(
                    format!("{at}.name"),
                    format!("duplicate container name {:?}", c.name),
                ));
            }
        }
    }
    Ok(())
}

/// A regular container's own restartPolicy and restartPolicyRules
/// (upstream's validateContainerRestartPolicy with ContainerRestartRules,
/// RestartAllContainers off).
fn validate_restart_policy(at: &str, c: &Container) -> Result<(), FieldError> {
    let rules = c.restart_policy_rules.as_deref().unwrap_or(&[]);
    let policy_at = format!("{at}.restartPolicy");
    match c.restart_policy.as_deref() {
        Some(policy) => check_one_of(&policy_at, policy, &["Always", "Never", "OnFailure"])?,
        None if rules.is_empty() => return Ok(()),
        None => {
            return Err(FieldError::new(
                policy_at,
                "required: must specify restartPolicy when restart rules are used",
            ));
        }
    }
    let too_many = |at: String, n: usize, max: usize| {
        FieldError::new(at, format!("{n}: must have at most {max} items"))
    };
    if rules.len() > 20 {
        return Err(too_many(
            format!("{at}.restartPolicyRules"),
            rules.len(),
            20,
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let rule_at = format!("{at}.restartPolicyRules[{i}]");
        check_one_of(&format!("{rule_at}.action"), &rule.action, &["Restart"])?;
        let Some(on) = &rule.exit_codes else {
            return Err(FieldError::new(
                format!("{rule_at}.exitCodes"),
                "required: must be specified",
            ));
        };
        check_one_of(
            &format!("{rule_at}.exitCodes.operator"),
            &on.operator,
            &["In", "NotIn"],
        )?;
        let values = on.values.as_ref().map_or(0, Vec::len);
        if values > 255 {
            return Err(too_many(format!("{rule_at}.exitCodes.values"), values, 255));
        }
    }
    Ok(())
}

fn validate_container(at: &str, c: &Container) -> Result<(), FieldError> {
    if c.name.is_empty() {
        return Err(FieldError::new(format!("{at}.name"), "required"));
    }
    check_dns_label(&format!("{at}.name"), &c.name)?;
    if c.image.as_deref().unwrap_or("").trim().is_empty() {
        return Err(FieldError::new(format!("{at}.image"), "required"));
    }
    if let Some(policy) = c.image_pull_policy.as_deref() {
        check_one_of(
            &format!("{at}.imagePullPolicy"),
            policy,
            &["Always", "IfNotPresent", "Never"],
        )?;
    }
    for (j, port) in c.ports.iter().flatten().enumerate() {
        let pat = format!("{at}.ports[{j}]");
        if !(1..=65535).contains(&port.container_port) {
            return Err(FieldError::new(
                format!("{pat}.containerPort"),
                format!("{}: must be between 1 and 65535", port.container_port),
            ));
        }
        if let Some(host_port) = port.host_port
            && !(0..=65535).contains(&host_port)
        {
            return Err(FieldError::new(
                format!("{pat}.hostPort"),
                format!("{host_port}: must be between 0 and 65535"),
            ));
        }
        if let Some(protocol) = port.protocol.as_deref() {
            check_one_of(
                &format!("{pat}.protocol"),
                protocol,
                &["TCP", "UDP", "SCTP"],
            )?;
        }
    }
    if let Some(resources) = c.resources.as_ref() {
        let at = format!("{at}.resources");
        type Parser = fn(
            &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        ) -> Result<i64, quantity::QuantityError>;
        let parsers: [(&str, Parser); 2] = [
            ("cpu", quantity::parse_cpu_millis),
            ("memory", quantity::parse_bytes),
        ];
        for (resource, parse) in parsers {
            let mut amounts = [None, None];
            for (k, (kind, list)) in [
                ("limits", &resources.limits),
                ("requests", &resources.requests),
            ]
            .into_iter()
            .enumerate()
            {
                let Some(q) = list.as_ref().and_then(|l| l.get(resource)) else {
                    continue;
                };
                let field = format!("{at}.{kind}[{resource}]");
                let amount = parse(q).map_err(|e| FieldError::new(&field, e.to_string()))?;
                if amount < 0 {
                    return Err(FieldError::new(
                        &field,
                        format!("{:?}: must be greater than or equal to 0", q.0),
                    ));
                }
                amounts[k] = Some((amount, q));
            }
            if let [Some((limit, limit_q)), Some((request, request_q))] = amounts
                && request > limit
            {
                return Err(FieldError::new(
                    format!("{at}.requests[{resource}]"),
                    format!(
                        "{:?}: must be less than or equal to {resource} limit of {:?}",
                        request_q.0, limit_q.0
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_one_of(field: &str, value: &str, allowed: &[&str]) -> Result<(), FieldError> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("unsupported value {value:?}: supported values: {allowed:?}"),
        ))
    }
}

/// Upstream's `TotalAnnotationSizeLimitB`: the most bytes a pod's annotation keys and values
/// may add up to.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 << 10;

/// Upstream's ValidateObjectMeta for what a static pod's metadata can carry: label keys and
/// values (ValidateLabels) and annotation keys and their total size (ValidateAnnotations).
fn validate_labels_and_annotations(pod: &Pod) -> Result<(), FieldError> {
    const LABELS: &str = "metadata.labels";
    const ANNOTATIONS: &str = "metadata.annotations";
    for (key, value) in pod.metadata.labels.iter().flatten() {
        check(LABELS, key, is_qualified_name(key))?;
        check(LABELS, value, is_valid_label_value(value))?;
    }
    let annotations = pod.metadata.annotations.iter().flatten();
    let mut total = 0usize;
    for (key, value) in annotations {
        check(ANNOTATIONS, key, is_qualified_name(&key.to_lowercase()))?;
        total = total.saturating_add(key.len()).saturating_add(value.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        return Err(FieldError::new(
            ANNOTATIONS,
            format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }
    Ok(())
}

/// Upstream's `field.Invalid`: the value and what is wrong with it (each of upstream's
/// messages for it, comma-separated).
fn check(field: &str, value: &str, problems: Vec<String>) -> Result<(), FieldError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("Invalid value: {value:?}: {}", problems.join(", ")),
        ))
    }
}

/// RFC 1123 label: at most 63 characters, lowercase alphanumerics and '-', alphanumeric ends.
fn check_dns_label(field: &str, value: &str) -> Result<(), FieldError> {
    check(field, value, is_dns1123_label(value))
}

/// RFC 1123 subdomain: at most 253 characters, '.'-separated labels.
fn check_dns_subdomain(field: &str, value: &str) -> Result<(), FieldError> {
    check(field, value, is_dns1123_subdomain(value))
}

// Upstream's name and label syntax (`k8s.io/apimachinery/pkg/util/validation` and
// `pkg/api/validate/content`), with upstream's messages: each returns what is wrong, nothing
// when the value is fine.

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Upstream's `RegexError`.
fn regex_error(message: &str, regex: &str, examples: &[&str]) -> String {
    let examples: String = examples
        .iter()
        .map(|e| format!("'{e}', "))
        .collect::<Vec<_>>()
        .join(" or ");
    format!("{message} (e.g. {examples}regex used for validation is '{regex}')")
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_label_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_label_key_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter()
            .all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
}

fn is_subdomain_shaped(s: &str) -> bool {
    s.split('.').all(is_label_shaped)
}

/// Upstream's `IsDNS1123Label`.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is_label_shaped(value) {
        if is_subdomain_shaped(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Upstream's `IsDNS1123Subdomain`; `max_len_unit` is "characters" in `util/validation`
/// (object names) and "bytes" in `validate/content` (label key prefixes).
fn dns1123_subdomain_errors(value: &str, max_len_unit: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(format!("must be no more than 253 {max_len_unit}"));
    }
    if !is_subdomain_shaped(value) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Upstream's `IsDNS1123Subdomain` (object names).
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    dns1123_subdomain_errors(value, "characters")
}

/// Upstream's `IsQualifiedName` (label and annotation keys): a name of at most 63 bytes,
/// optionally after a DNS subdomain prefix and a '/'.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix, "bytes")
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    LABEL_KEY_MSG,
                    LABEL_KEY_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 bytes".to_owned());
    }
    if !is_label_key_shaped(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Upstream's `IsValidLabelValue`: empty, or at most 63 bytes shaped like a label key's name.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 bytes".to_owned());
    }
    if !value.is_empty() && !is_label_key_shaped(value) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
        let mut pods = parse_static_pods(FILE, content, NODE).expect("parses");
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
        parse_static_pods(FILE, &v.to_string(), NODE)
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
                    v["spec"]["containers"][0]["restartPolicyRules"] = json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}])
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
                    v["spec"]["containers"][0]["restartPolicyRules"] =
                        json!([{"action": "Restart"}])
                },
                "spec.containers[0].restartPolicyRules[0].exitCodes",
                "required",
            ),
            (
                "restart rule operator",
                |v| {
                    v["spec"]["containers"][0]["restartPolicy"] = json!("Never");
                    v["spec"]["containers"][0]["restartPolicyRules"] = json!([{"action": "Restart", "exitCodes": {"operator": "Gt", "values": [1]}}])
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
                |v| {
                    v["spec"]["initContainers"][0]["resources"] =
                        json!({"limits": {"cpu": "1.5.1"}})
                },
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
            parse_static_pods(file, content, node).unwrap()[0]
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
        let pods = parse_static_pods(FILE, &content, NODE).unwrap();
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["web-node-1", "api-node-1"]);

        // Errors give the document's index, empty documents counting.
        let content = format!("{WEB}---\n---\n{}", WEB.replace("nginx:1.25", "\"\""));
        let err = parse_static_pods(FILE, &content, NODE).unwrap_err();
        assert_eq!(
            (err.doc, err.field.as_str()),
            (2, "spec.containers[0].image")
        );

        // A YAML syntax error names the document and has no field.
        let content = format!("{WEB}---\nkind: Pod\nmetadata: [unclosed\n");
        let err = parse_static_pods(FILE, &content, NODE).unwrap_err();
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
                parse_static_pods(FILE, empty, NODE).unwrap(),
                [],
                "{empty:?}"
            );
        }
        // A document that is not a mapping.
        let err = parse_static_pods(FILE, "- a\n- b\n", NODE).unwrap_err();
        assert_eq!((err.doc, err.field.as_str()), (0, ""));
        assert!(err.message.contains("a list"), "{err}");
    }

    #[test]
    fn json_input() {
        let v = base_value();
        let pretty = serde_json::to_string_pretty(&v)
            .unwrap()
            .replace("  ", "\t");
        let from_json = parse_static_pods(FILE, &pretty, NODE).unwrap();
        let yaml: String = serde_json::to_string(&v).unwrap();
        assert_eq!(from_json, parse_static_pods(FILE, &yaml, NODE).unwrap());
        assert_eq!(from_json[0].metadata.name.as_deref(), Some("web-node-1"));

        // A stream of JSON objects is several documents.
        let mut second = base_value();
        second["metadata"]["name"] = json!("second");
        second["spec"]["containers"][0]["ports"][0]["containerPort"] = json!("x");
        let stream = format!("{v}\n{second}\n");
        let err = parse_static_pods(FILE, &stream, NODE).unwrap_err();
        assert_eq!(
            (err.doc, err.field.as_str()),
            (1, "spec.containers[0].ports[0].containerPort")
        );

        // Broken JSON reports the JSON error.
        let err = parse_static_pods(FILE, "{\"apiVersion\": \"v1\",\n\t\"kind\": \"Pod\"", NODE)
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
        assert_eq!(parse_static_pods(FILE, &many, NODE).unwrap(), []);
        // An error still gives the line in the file.
        let err = parse_static_pods(FILE, &format!("{many}---\nkind: [\n"), NODE).unwrap_err();
        assert_eq!(err.doc, 20_000);
        assert!(err.message.contains("line 40002"), "{err}");
    }
}
