//! A pod's requests and limits as upstream sums them (component-helpers'
//! PodRequests and PodLimits): containers and sidecars (restartable init
//! containers) add up, a larger init container (with the sidecars started
//! before it) wins over the sum, pod-level `resources` replace the sum for
//! the resources they name (cpu, memory, hugepages), and `overhead` is added
//! (to limits only where a limit exists).
//!
//! Amounts are integers keyed by resource name: milli-CPUs for `cpu`, plain
//! units (bytes) for the rest. A quantity that does not parse counts as
//! absent (the API server validated it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::{
    format_binary_si, format_decimal_si, format_milli, parse_bytes, parse_cpu_millis,
};

/// Resource name → amount (milli-CPUs for `cpu`).
pub type Amounts = BTreeMap<String, i64>;

/// The prefix of hugepage resources (`hugepages-2Mi`).
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// A hugepage size's resource name (`hugepages-2Mi` for 2 MiB pages).
pub fn hugepage_resource(page_bytes: u64) -> String {
    let bytes = i64::try_from(page_bytes).unwrap_or(i64::MAX);
    format!("{HUGEPAGES_PREFIX}{}", format_binary_si(bytes))
}

/// Whether `name` is a kind of memory: `memory` or a hugepage size (what
/// the memory manager places and reservedMemory names).
pub fn is_memory_resource(name: &str) -> bool {
    name == "memory" || name.starts_with(HUGEPAGES_PREFIX)
}

fn amount(name: &str, q: &Quantity) -> Option<i64> {
    if name == "cpu" {
        parse_cpu_millis(q).ok()
    } else {
        parse_bytes(q).ok()
    }
}

fn amounts(list: Option<&BTreeMap<String, Quantity>>) -> Amounts {
    list.into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), amount(k, q)?)))
        .collect()
}

/// A list's requests as the API server defaults them: a limit with no
/// request is the request.
fn defaulted_requests(
    requests: Option<&BTreeMap<String, Quantity>>,
    limits: Option<&BTreeMap<String, Quantity>>,
) -> Amounts {
    let mut out = amounts(limits);
    out.extend(amounts(requests));
    out
}

/// A container's requests (defaulted from its limits).
pub fn container_requests(c: &Container) -> Amounts {
    let r = c.resources.as_ref();
    defaulted_requests(
        r.and_then(|r| r.requests.as_ref()),
        r.and_then(|r| r.limits.as_ref()),
    )
}

/// A container's limits.
pub fn container_limits(c: &Container) -> Amounts {
    amounts(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

fn add(into: &mut Amounts, other: &Amounts) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_default();
        *e = e.saturating_add(*v);
    }
}

fn max(into: &mut Amounts, other: &Amounts) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_insert(*v);
        *e = (*e).max(*v);
    }
}

/// aggregateContainerResourcesByFn.
fn aggregate(pod: &Pod, of: fn(&Container) -> Amounts) -> Amounts {
    let Some(spec) = &pod.spec else {
        return Amounts::new();
    };
    let mut sum = Amounts::new();
    for c in &spec.containers {
        add(&mut sum, &of(c));
    }
    let (mut sidecars, mut inits) = (Amounts::new(), Amounts::new());
    for c in spec.init_containers.iter().flatten() {
        let r = of(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sum, &r);
            add(&mut sidecars, &r);
            max(&mut inits, &sidecars);
        } else {
            let mut this = r;
            add(&mut this, &sidecars);
            max(&mut inits, &this);
        }
    }
    max(&mut sum, &inits);
    sum
}

fn supported_at_pod_level(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with(HUGEPAGES_PREFIX)
}

/// Pod-level requests or limits naming a resource they may set.
fn pod_level(pod: &Pod, limits: bool) -> Amounts {
    let r = pod.spec.as_ref().and_then(|s| s.resources.as_ref());
    let list = if limits {
        amounts(r.and_then(|r| r.limits.as_ref()))
    } else {
        defaulted_requests(
            r.and_then(|r| r.requests.as_ref()),
            r.and_then(|r| r.limits.as_ref()),
        )
    };
    list.into_iter()
        .filter(|(k, _)| supported_at_pod_level(k))
        .collect()
}

/// The pod-level limits (`spec.resources.limits`) of the resources
/// supported there.
pub fn pod_level_limits(pod: &Pod) -> Amounts {
    pod_level(pod, true)
}

/// Whether the pod sets pod-level resources (IsPodLevelResourcesSet).
pub fn pod_level_resources_set(pod: &Pod) -> bool {
    !pod_level(pod, false).is_empty() || !pod_level(pod, true).is_empty()
}

/// The pod's `overhead` (set from its RuntimeClass).
pub fn pod_overhead(pod: &Pod) -> Amounts {
    amounts(pod.spec.as_ref().and_then(|s| s.overhead.as_ref()))
}

/// PodRequests without the overhead (ExcludeOverhead).
pub fn pod_requests_without_overhead(pod: &Pod) -> Amounts {
    let mut reqs = aggregate(pod, container_requests);
    reqs.extend(pod_level(pod, false));
    reqs
}

/// PodLimits without the overhead (ExcludeOverhead).
pub fn pod_limits_without_overhead(pod: &Pod) -> Amounts {
    let mut limits = aggregate(pod, container_limits);
    limits.extend(pod_level(pod, true));
    limits
}

/// PodRequests: what the pod asks of the node.
pub fn pod_requests(pod: &Pod) -> Amounts {
    let mut reqs = pod_requests_without_overhead(pod);
    add(&mut reqs, &pod_overhead(pod));
    reqs
}

/// PodLimits: the most the pod may use (overhead added to a limit set).
pub fn pod_limits(pod: &Pod) -> Amounts {
    let mut limits = pod_limits_without_overhead(pod);
    for (k, v) in pod_overhead(pod) {
        if let Some(l) = limits.get_mut(&k).filter(|l| **l != 0) {
            *l = l.saturating_add(v);
        }
    }
    limits
}

/// Amounts as API quantities, written as upstream's Quantity prints them:
/// milli-CPUs for `cpu`, BinarySI for bytes (memory, ephemeral-storage,
/// hugepages), DecimalSI for counts.
pub fn to_quantities(list: &Amounts) -> BTreeMap<String, Quantity> {
    list.iter()
        .map(|(k, &v)| {
            let text = match k.as_str() {
                "cpu" => format_milli(v),
                "memory" | "ephemeral-storage" => format_binary_si(v),
                _ if k.starts_with(HUGEPAGES_PREFIX) => format_binary_si(v),
                _ => format_decimal_si(v),
            };
            (k.clone(), Quantity(text))
        })
        .collect()
}

/// The pod-level requests (defaulted from its limits) or limits as the
/// spec writes them, of the resources supported there.
fn pod_level_written(pod: &Pod, limits: bool) -> BTreeMap<String, Quantity> {
    let r = pod.spec.as_ref().and_then(|s| s.resources.as_ref());
    let mut out: BTreeMap<String, Quantity> = r.and_then(|r| r.limits.clone()).unwrap_or_default();
    if !limits {
        out.extend(r.and_then(|r| r.requests.clone()).unwrap_or_default());
    }
    out.retain(|k, _| supported_at_pod_level(k));
    out
}

/// PodRequests (`limits`: PodLimits) as API quantities: what the pod-level
/// resources name as the spec writes them (when there is no overhead to
/// add: upstream's sums keep a quantity as written, `10m` of memory
/// included), the rest as [`to_quantities`] writes it.
pub fn pod_quantities(pod: &Pod, limits: bool) -> BTreeMap<String, Quantity> {
    let mut out = if limits {
        to_quantities(&pod_limits(pod))
    } else {
        to_quantities(&pod_requests(pod))
    };
    if pod_overhead(pod).is_empty() {
        out.extend(pod_level_written(pod, limits));
    }
    out
}

/// Hugepage amounts by page size in bytes (`hugepages-2Mi` → 2097152).
pub fn hugepages(list: &Amounts) -> BTreeMap<u64, i64> {
    let mut out = BTreeMap::new();
    for (k, v) in list {
        let Some(size) = k.strip_prefix(HUGEPAGES_PREFIX) else {
            continue;
        };
        if let Ok(size) = parse_bytes(&Quantity(size.to_owned()))
            && let Ok(size) = u64::try_from(size)
            && size > 0
        {
            *out.entry(size).or_default() += v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;

    fn c(name: &str, requests: serde_json::Value, limits: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"name": name, "resources": {"requests": requests, "limits": limits}})
    }

    #[test]
    fn requests_and_limits_as_upstream_sums_them() {
        use serde_json::json;
        let none = json!({});
        type Expected = &'static [(&'static str, i64)];
        let cases: Vec<(&str, serde_json::Value, Expected, Expected)> = vec![
            (
                "two containers add up; a limit alone is the request",
                json!({"containers": [
                    c("a", json!({"cpu": "100m"}), json!({"cpu": "200m", "memory": "64Mi"})),
                    c("b", json!({"cpu": "50m", "memory": "1Mi"}), none.clone()),
                ]}),
                &[("cpu", 150), ("memory", 65 << 20)],
                &[("cpu", 200), ("memory", 64 << 20)],
            ),
            (
                "a larger init container wins",
                json!({"containers": [c("a", json!({"cpu": "100m"}), none.clone())],
                       "initContainers": [c("i", json!({"cpu": "1"}), json!({"cpu": "2"}))]}),
                &[("cpu", 1000)],
                &[("cpu", 2000)],
            ),
            (
                "a sidecar adds to the containers and to later init containers",
                json!({"containers": [c("a", json!({"cpu": "100m"}), none.clone())],
                "initContainers": [
                    {"name": "s", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "300m"}}},
                    c("i", json!({"cpu": "500m"}), none.clone()),
                ]}),
                &[("cpu", 800)],
                &[],
            ),
            (
                "pod-level resources replace the sum; overhead adds to requests and to set limits",
                json!({"containers": [c("a", json!({"cpu": "100m"}), json!({"cpu": "100m"}))],
                       "resources": {"requests": {"cpu": "1", "storage": "1"}, "limits": {"cpu": "2"}},
                       "overhead": {"cpu": "10m", "memory": "5Mi"}}),
                &[("cpu", 1010), ("memory", 5 << 20)],
                &[("cpu", 2010)],
            ),
        ];
        for (what, spec, reqs, limits) in cases {
            let p = PodBuilder::new("p")
                .spec(serde_json::from_value(spec).unwrap())
                .build();
            let expect = |l: &[(&str, i64)]| -> Amounts {
                l.iter().map(|(k, v)| (k.to_string(), *v)).collect()
            };
            assert_eq!(pod_requests(&p), expect(reqs), "requests: {what}");
            assert_eq!(pod_limits(&p), expect(limits), "limits: {what}");
        }
    }

    #[test]
    fn hugepages_by_page_size() {
        let list: Amounts = [
            ("hugepages-2Mi".to_owned(), 4 << 20),
            ("hugepages-1Gi".to_owned(), 1 << 30),
            ("hugepages-bad".to_owned(), 1),
            ("memory".to_owned(), 7),
        ]
        .into();
        assert_eq!(
            hugepages(&list),
            BTreeMap::from([(2 << 20, 4 << 20), (1 << 30, 1 << 30)])
        );
    }
}
