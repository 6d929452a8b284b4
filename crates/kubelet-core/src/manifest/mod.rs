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

mod defaults;
mod names;
#[cfg(test)]
mod tests;
mod validate;

pub use defaults::apply_pod_defaults;
pub use names::{is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_label_value};
pub use validate::validate_pod;

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

/// Where static pods come from, as their identity and `kubernetes.io/config.source` record it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin<'a> {
    /// A manifest file (its path).
    File(&'a str),
    /// The manifest URL (`staticPodURL`).
    Url(&'a str),
}

impl Origin<'_> {
    fn name(&self) -> &str {
        match self {
            Origin::File(s) | Origin::Url(s) => s,
        }
    }
}

/// Parses the static pods of `origin` (a file's path or the manifest URL, used in errors and
/// in the pods' identity) with contents `content` into defaulted, validated pods for node
/// `node_name`. Each document is a Pod, or a PodList whose items are (as upstream's sources
/// take them).
///
/// Empty documents are ignored; the first document that fails fails the whole file (the
/// file source then keeps the file's last good pods).
pub fn parse_static_pods(
    origin: Origin<'_>,
    content: &str,
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let file = origin.name();
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
        let items = match value.get("kind").and_then(Value::as_str) {
            Some("PodList") if value.get("apiVersion").and_then(Value::as_str) == Some("v1") => {
                value
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|mut item| {
                        // Items of a list carry no type of their own.
                        if let Some(o) = item.as_object_mut() {
                            o.entry("apiVersion").or_insert_with(|| "v1".into());
                            o.entry("kind").or_insert_with(|| "Pod".into());
                        }
                        item
                    })
                    .collect()
            }
            _ => vec![value],
        };
        for item in items {
            let mut pod = pod_from_value(&item).map_err(to_manifest_error)?;
            make_static(&mut pod, origin, node_name).map_err(to_manifest_error)?;
            pods.push(pod);
        }
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
fn make_static(pod: &mut Pod, origin: Origin<'_>, node_name: &str) -> Result<(), FieldError> {
    let written_name = pod.metadata.name.clone().unwrap_or_default();
    if written_name.is_empty() {
        return Err(FieldError::new("metadata.name", "required"));
    }
    apply_pod_defaults(pod);

    // Upstream's applyDefaults: the UID is the hash of what the manifest
    // asks for, so an edit is a new pod.
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        pod.metadata.uid = Some(content_hash(pod, node_name, origin));
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
    let source = match origin {
        Origin::File(_) => crate::types::SOURCE_FILE,
        Origin::Url(_) => crate::types::SOURCE_HTTP,
    };
    annotations.insert(keys::CONFIG_SOURCE.to_owned(), source.into());
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
fn content_hash(pod: &Pod, node_name: &str, origin: Origin<'_>) -> String {
    let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(keys::CONFIG_SOURCE);
    annotations.remove(keys::CONFIG_HASH);
    annotations.remove(keys::CONFIG_SEEN);
    // Struct fields serialize in declaration order and maps are BTreeMaps: canonical.
    // As upstream: the node and the file for a file, the URL alone for the URL.
    let (place, file) = match origin {
        Origin::File(file) => (format!("host:{node_name}"), format!("file:{file}")),
        Origin::Url(url) => (format!("url:{url}"), String::new()),
    };
    let canonical = serde_json::to_vec(&(
        &pod.metadata.namespace,
        &pod.metadata.name,
        &pod.spec,
        &pod.metadata.labels,
        &annotations,
        place,
        file,
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
