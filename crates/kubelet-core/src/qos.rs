//! A pod's QoS class (upstream's GetPodQOS), from its requests and limits:
//! what its cgroup, its eviction rank and its admission depend on.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::podspec::{init_containers, regular_containers};
use crate::quantity::{parse_bytes, parse_cpu_millis};
use crate::resources;

/// The QoS class upstream derives from requests and limits (GetPodQOS):
/// the one the API server recorded, else computed from the pod-level
/// resources when set, else from every container's.
pub fn qos_class(pod: &Pod) -> &'static str {
    match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => return "Guaranteed",
        Some("Burstable") => return "Burstable",
        Some("BestEffort") => return "BestEffort",
        _ => {}
    }
    if resources::pod_level_resources_set(pod)
        && let Some(r) = pod.spec.as_ref().and_then(|s| s.resources.as_ref())
    {
        return requirements_qos(r);
    }
    let mut pod_qos = None;
    for c in init_containers(pod).iter().chain(regular_containers(pod)) {
        let qos = c.resources.as_ref().map_or("BestEffort", requirements_qos);
        match pod_qos {
            _ if qos == "Burstable" => return qos,
            None => pod_qos = Some(qos),
            Some(p) if p != qos => return "Burstable",
            Some(_) => {}
        }
    }
    pod_qos.unwrap_or("BestEffort")
}

/// requirementsQOS: cpu and memory both requested at their (nonzero)
/// limit → Guaranteed; neither → BestEffort; else Burstable. A limit with
/// no request is the request, as the API server defaults it.
fn requirements_qos(r: &ResourceRequirements) -> &'static str {
    let requests = r.requests.as_ref();
    let limits = r.limits.as_ref();
    if requests.is_none_or(BTreeMap::is_empty) && limits.is_none_or(BTreeMap::is_empty) {
        return "BestEffort";
    }
    let amount = |res: &str, m: Option<&BTreeMap<String, Quantity>>| {
        let q = m?.get(res)?;
        if res == "cpu" {
            parse_cpu_millis(q).ok()
        } else {
            parse_bytes(q).ok()
        }
    };
    let mut qos = None;
    for res in ["cpu", "memory"] {
        let lim = amount(res, limits).unwrap_or(0);
        let req = amount(res, requests).unwrap_or(lim);
        let this = if req != lim {
            return "Burstable";
        } else if req == 0 {
            "BestEffort"
        } else {
            "Guaranteed"
        };
        match qos {
            None => qos = Some(this),
            Some(q) if q != this => return "Burstable",
            Some(_) => {}
        }
    }
    qos.unwrap_or("BestEffort")
}
