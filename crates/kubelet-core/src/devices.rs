//! Device plugins' pure parts (upstream's cm/devicemanager): which resource
//! names a plugin may serve, what a container asks of them, which devices
//! an allocation takes, and the `kubelet_internal_checkpoint` file
//! ([`checkpoint`]).

pub mod checkpoint;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Container;

use crate::manifest::is_qualified_name;
use crate::resources::container_limits;

/// The prefix of native resource names that carry a domain
/// (upstream's ResourceDefaultNamespacePrefix).
const NATIVE_PREFIX: &str = "kubernetes.io/";
/// The prefix of quota names (upstream's DefaultResourceRequestsPrefix).
const REQUESTS_PREFIX: &str = "requests.";

/// Upstream's IsExtendedResourceName: a domain-qualified name outside
/// `kubernetes.io/`, valid as a quota name (`requests.<name>`).
pub fn is_extended_resource_name(name: &str) -> bool {
    let native = !name.contains('/') || name.contains(NATIVE_PREFIX);
    !native
        && !name.starts_with(REQUESTS_PREFIX)
        && is_qualified_name(&format!("{REQUESTS_PREFIX}{name}")).is_empty()
}

/// The extended resources a container's limits ask for, with how many
/// devices (upstream counts limits: extended resources cannot be
/// overcommitted, so requests equal them).
pub fn extended_limits(c: &Container) -> BTreeMap<String, usize> {
    container_limits(c)
        .into_iter()
        .filter(|(name, _)| is_extended_resource_name(name))
        .filter_map(|(name, n)| Some((name, usize::try_from(n).ok()?)))
        .collect()
}

/// Upstream's allocateRemainingFrom: add devices of `from` not yet in
/// `taken` (in ID order: upstream's sets have none, a stable one makes
/// allocations repeatable) until `taken` holds `needed`. Whether it does.
pub fn take_from(needed: usize, taken: &mut BTreeSet<String>, from: &BTreeSet<String>) -> bool {
    for id in from {
        if taken.len() >= needed {
            break;
        }
        taken.insert(id.clone());
    }
    taken.len() >= needed
}
