//! The downward API's values (upstream's `fieldpath` and the resource
//! helpers of `api/v1/resource`): what a downwardAPI volume file (and, with
//! the container's own name as default, an env var's fieldRef or
//! resourceFieldRef) reads of the pod.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::{parse_bytes, parse_cpu_millis};

/// The node's allocatable resources: what a limit that is not set reads as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocatable {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
}

/// Why a downward API value could not be read: a field or resource the
/// pod names that cannot be given (upstream's messages); only a new spec
/// helps.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DownwardError {
    #[error("fieldPath {0:?} does not support subscript")]
    Subscript(String),
    #[error("unsupported fieldPath: {0}")]
    FieldPath(String),
    #[error("container {0} not found")]
    ContainerNotFound(String),
    #[error("unsupported container resource : {0}")]
    Resource(String),
    #[error(transparent)]
    Quantity(#[from] crate::quantity::QuantityError),
}

/// The value of a pod field (upstream's ExtractFieldPathAsString):
/// `metadata.name`, `.namespace`, `.uid`, `.labels`, `.annotations` (as
/// `key="value"` lines, sorted) and one label or annotation by subscript.
pub fn field_value(pod: &Pod, field_path: &str) -> Result<String, DownwardError> {
    let meta = &pod.metadata;
    if let Some((path, key)) = split_subscript(field_path) {
        return match path {
            "metadata.annotations" => Ok(meta
                .annotations
                .as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default()),
            "metadata.labels" => Ok(meta
                .labels
                .as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default()),
            _ => Err(DownwardError::Subscript(field_path.to_owned())),
        };
    }
    let or_empty = |s: &Option<String>| s.clone().unwrap_or_default();
    match field_path {
        "metadata.annotations" => Ok(format_map(meta.annotations.iter().flatten())),
        "metadata.labels" => Ok(format_map(meta.labels.iter().flatten())),
        "metadata.name" => Ok(or_empty(&meta.name)),
        "metadata.namespace" => Ok(or_empty(&meta.namespace)),
        "metadata.uid" => Ok(or_empty(&meta.uid)),
        _ => Err(DownwardError::FieldPath(field_path.to_owned())),
    }
}

/// `metadata.labels['key']` → (`metadata.labels`, `key`).
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_suffix("']")?;
    let (head, key) = rest.split_once("['")?;
    Some((head, key))
}

/// Upstream's FormatMap: `key="value"` lines sorted by key, values quoted
/// as Go's strconv.Quote quotes them.
fn format_map<'a>(m: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    let mut pairs: Vec<(&String, &String)> = m.collect();
    pairs.sort();
    let lines: Vec<String> = pairs
        .into_iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect();
    lines.join("\n")
}

/// Go's strconv.Quote: printable characters as they are, `"` and `\`
/// escaped, control characters as Go's escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

/// The value of a container resource (upstream's
/// ExtractResourceValueByContainerNameAndNodeAllocatable): a limit not set
/// reads as the node's allocatable; the value is divided by `divisor`
/// (default 1) and rounded up.
pub fn resource_value(
    pod: &Pod,
    sel: &ResourceFieldSelector,
    allocatable: &Allocatable,
) -> Result<String, DownwardError> {
    let name = sel.container_name.as_deref().unwrap_or("");
    let c = find_container(pod, name)
        .ok_or_else(|| DownwardError::ContainerNotFound(name.to_owned()))?;
    container_resource_value(c, sel, allocatable)
}

/// [`resource_value`] for a known container.
pub fn container_resource_value(
    c: &Container,
    sel: &ResourceFieldSelector,
    allocatable: &Allocatable,
) -> Result<String, DownwardError> {
    let unsupported = || DownwardError::Resource(sel.resource.clone());
    let (kind, resource) = sel.resource.split_once('.').ok_or_else(unsupported)?;
    let list = c.resources.as_ref().and_then(|r| match kind {
        "limits" => r.limits.as_ref(),
        "requests" => r.requests.as_ref(),
        _ => None,
    });
    let set = list.and_then(|l| l.get(resource)).filter(|q| !is_zero(q));
    let divisor = sel.divisor.as_ref().filter(|d| !is_zero(d));
    let ceil_div = |v: i64, d: i64| -> String {
        if d <= 0 {
            return v.to_string();
        }
        (v.div_euclid(d) + i64::from(v.rem_euclid(d) != 0)).to_string()
    };
    match (kind, resource) {
        ("limits" | "requests", "cpu") => {
            let v = match set {
                Some(q) => parse_cpu_millis(q)?,
                None if kind == "limits" => allocatable.cpu_millis,
                None => 0,
            };
            let d = divisor.map_or(Ok(1000), parse_cpu_millis)?;
            Ok(ceil_div(v, d))
        }
        ("limits" | "requests", "memory" | "ephemeral-storage") => {
            let v = match set {
                Some(q) => parse_bytes(q)?,
                None if kind == "limits" && resource == "memory" => allocatable.memory_bytes,
                None if kind == "limits" => allocatable.ephemeral_storage_bytes,
                None => 0,
            };
            let d = divisor.map_or(Ok(1), parse_bytes)?;
            Ok(ceil_div(v, d))
        }
        ("limits" | "requests", r) if r.starts_with("hugepages-") => {
            let v = set.map_or(Ok(0), parse_bytes)?;
            let d = divisor.map_or(Ok(1), parse_bytes)?;
            Ok(ceil_div(v, d))
        }
        _ => Err(unsupported()),
    }
}

fn is_zero(q: &Quantity) -> bool {
    parse_bytes(q).is_ok_and(|v| v == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{PodBuilder, container, resources};

    fn pod() -> Pod {
        PodBuilder::new("web")
            .namespace("ns")
            .uid("u-1")
            .label("b", "2")
            .label("a", "say \"hi\"\n")
            .container(Container {
                resources: Some(resources(
                    &[("cpu", "250m"), ("memory", "32Mi")],
                    &[("memory", "64Mi")],
                )),
                ..container("app")
            })
            .build()
    }

    #[test]
    fn fields_read_as_upstream_reads_them() {
        let cases = [
            ("metadata.name", Ok("web")),
            ("metadata.namespace", Ok("ns")),
            ("metadata.uid", Ok("u-1")),
            ("metadata.labels", Ok("a=\"say \\\"hi\\\"\\n\"\nb=\"2\"")),
            ("metadata.labels['b']", Ok("2")),
            ("metadata.labels['none']", Ok("")),
            ("metadata.annotations", Ok("")),
            ("spec.nodeName", Err("unsupported fieldPath: spec.nodeName")),
            (
                "metadata.name['x']",
                Err("fieldPath \"metadata.name['x']\" does not support subscript"),
            ),
        ];
        for (path, want) in cases {
            assert_eq!(
                field_value(&pod(), path).map_err(|e| e.to_string()),
                want.map(String::from).map_err(String::from),
                "{path}"
            );
        }
    }

    #[test]
    fn resources_read_with_divisors_and_allocatable() {
        let alloc = Allocatable {
            cpu_millis: 2000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
        };
        let sel = |r: &str, d: Option<&str>| ResourceFieldSelector {
            container_name: Some("app".into()),
            resource: r.into(),
            divisor: d.map(|d| Quantity(d.into())),
        };
        let cases = [
            (sel("limits.memory", None), Ok("67108864")),
            (sel("limits.memory", Some("1Mi")), Ok("64")),
            (sel("requests.memory", Some("1Mi")), Ok("32")),
            // 250m in whole CPUs rounds up to 1; in millicores it is 250.
            (sel("requests.cpu", None), Ok("1")),
            (sel("requests.cpu", Some("1m")), Ok("250")),
            // Limits not set read as the node's allocatable.
            (sel("limits.cpu", None), Ok("2")),
            (sel("limits.ephemeral-storage", Some("1Gi")), Ok("100")),
            (sel("requests.ephemeral-storage", None), Ok("0")),
            (
                sel("limits.gpu", None),
                Err("unsupported container resource : limits.gpu"),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(
                resource_value(&pod(), &s, &alloc).map_err(|e| e.to_string()),
                want.map(String::from).map_err(String::from),
                "{} {:?}",
                s.resource,
                s.divisor
            );
        }
        let mut missing = sel("limits.cpu", None);
        missing.container_name = Some("nope".into());
        assert_eq!(
            resource_value(&pod(), &missing, &alloc),
            Err(DownwardError::ContainerNotFound("nope".into()))
        );
    }
}
