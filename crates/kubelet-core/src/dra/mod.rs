//! Dynamic resource allocation, the kubelet's side (upstream's
//! pkg/kubelet/cm/dra), its pure part: which ResourceClaims a pod uses and
//! whether it may use them (resourceclaim.Name, IsForPod,
//! IsReservedForPod), what the kubelet keeps of each claim it prepared (its
//! ClaimInfo: the pods using it, per driver the devices and their CDI
//! device IDs), the CDI devices a container gets from its claims, and the
//! `dra_manager_state` checkpoint ([`state`]). The manager that calls the
//! drivers is the kubelet crate's `dra`.

pub mod health;
pub mod state;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::ResourceClaim;

use crate::claim::is_controlled_by;
use crate::devices::is_extended_resource_name;
use crate::resources::container_requests;
use state::{ClaimInfoState, Device, DriverState};

/// The prefix of the extended resource names a DeviceClass gets implicitly
/// (resourceapi.ResourceDeviceClassPrefix).
const DEVICE_CLASS_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The name of the ResourceClaim a pod claim refers to (upstream's
/// resourceclaim.Name): Ok(None) when its template made no claim on
/// purpose; the bool says whether the claim must be checked to be the
/// pod's own ([`is_for_pod`]). A template's claim not made yet is an error.
pub fn claim_name(pod: &Pod, claim: &PodResourceClaim) -> Result<Option<(String, bool)>, String> {
    if let Some(name) = &claim.resource_claim_name {
        return Ok(Some((name.clone(), false)));
    }
    if claim.resource_claim_template_name.is_some() {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref());
        if let Some(status) = statuses
            .into_iter()
            .flatten()
            .find(|s| s.name == claim.name)
        {
            return Ok(status.resource_claim_name.clone().map(|n| (n, true)));
        }
        return Err(format!(
            "pod {:?}: ResourceClaim not created yet",
            pod_ref(pod)
        ));
    }
    Err(format!(
        "pod {:?}, spec.resourceClaim {:?}: none of the supported fields are set",
        pod_ref(pod),
        claim.name
    ))
}

/// The pod's claims: its spec's, and the claim the scheduler made for its
/// DRA-backed extended resources (status.extendedResourceClaimStatus).
pub fn pod_claims(pod: &Pod) -> Vec<PodResourceClaim> {
    let mut claims = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.clone())
        .unwrap_or_default();
    if let Some(extended) = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
    {
        claims.push(PodResourceClaim {
            resource_claim_name: Some(extended.resource_claim_name.clone()),
            ..Default::default()
        });
    }
    claims
}

fn claim_ref(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    )
}

/// That a claim made from a template is the pod's own (upstream's
/// resourceclaim.IsForPod).
pub fn is_for_pod(pod: &Pod, claim: &ResourceClaim) -> Result<(), String> {
    if claim.metadata.namespace != pod.metadata.namespace {
        return Err(format!(
            "ResourceClaim {} is not in the same namespace as Pod {}",
            claim_ref(claim),
            pod_ref(pod)
        ));
    }
    if !is_controlled_by(&claim.metadata, pod) {
        return Err(format!(
            "ResourceClaim {} was not created for Pod {} (Pod is not owner)",
            claim_ref(claim),
            pod_ref(pod)
        ));
    }
    Ok(())
}

/// Whether the scheduler reserved the claim for the pod.
pub fn is_reserved_for_pod(pod: &Pod, claim: &ResourceClaim) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .any(|r| r.uid == uid)
}

/// A claim the kubelet knows: its checkpointed state, and whether its
/// drivers prepared it (since this start) or are unpreparing it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimInfo {
    pub state: ClaimInfoState,
    pub prepared: bool,
    pub unpreparing: bool,
}

impl ClaimInfo {
    /// The claim as allocated: a driver state for each driver of its
    /// devices, no pod yet (upstream's newClaimInfoFromClaim).
    pub fn from_claim(claim: &ResourceClaim) -> Result<ClaimInfo, String> {
        let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
            return Err("not allocated".into());
        };
        let results = allocation
            .devices
            .as_ref()
            .and_then(|d| d.results.as_deref())
            .unwrap_or_default();
        let mut driver_state = BTreeMap::new();
        for result in results {
            // Skipping node operations is the alpha DRAOptionalNodeOperations,
            // which rkubelet, as the upstream kubelet by default, does not have.
            if result
                .skip_node_operations
                .as_ref()
                .is_some_and(|s| !s.is_empty())
            {
                return Err("DRAOptionalNodeOperations feature gate is disabled on kubelet".into());
            }
            driver_state.insert(result.driver.clone(), DriverState::default());
        }
        Ok(ClaimInfo {
            state: ClaimInfoState {
                claim_uid: claim.metadata.uid.clone().unwrap_or_default(),
                claim_name: claim.metadata.name.clone().unwrap_or_default(),
                namespace: claim.metadata.namespace.clone().unwrap_or_default(),
                pod_uids: BTreeSet::new(),
                driver_state,
            },
            prepared: false,
            unpreparing: false,
        })
    }

    /// A claim read back from the checkpoint: prepared again at the next
    /// sync of a pod that uses it (drivers' preparation is idempotent).
    pub fn restored(state: ClaimInfoState) -> ClaimInfo {
        ClaimInfo {
            state,
            prepared: false,
            unpreparing: false,
        }
    }

    /// The devices `driver` prepared, replacing what it said before.
    pub fn set_devices(&mut self, driver: &str, devices: Vec<Device>) {
        self.state
            .driver_state
            .entry(driver.to_owned())
            .or_default()
            .devices = devices;
    }

    /// The CDI devices of the claim's devices for `request` (all of them
    /// for no request; a device that names no request serves all).
    pub fn cdi_devices(&self, request: &str) -> Vec<String> {
        self.state
            .driver_state
            .values()
            .flat_map(|d| &d.devices)
            .filter(|d| {
                request.is_empty()
                    || d.request_names.is_empty()
                    || d.request_names.iter().any(|r| r == request)
            })
            .flat_map(|d| d.cdi_device_ids.iter().cloned())
            .collect()
    }
}

/// The claims (and requests) container `c` names (`resources.claims`).
pub fn claims_named(
    c: &Container,
) -> impl Iterator<Item = &k8s_openapi::api::core::v1::ResourceClaim> {
    c.resources
        .as_ref()
        .and_then(|r| r.claims.as_ref())
        .into_iter()
        .flatten()
}

/// Upstream's BaseRequestRef: the request of a `request/subrequest`.
pub fn base_request(request: &str) -> &str {
    request.split('/').next().unwrap_or(request)
}

/// The claims a container uses, by the claim's name, with the requests it
/// asked of each ("" for all of the claim): its `resources.claims`, and its
/// DRA-backed extended resources through the pod's extended resource
/// claim (upstream's GetResources).
pub fn container_claim_requests(
    pod: &Pod,
    c: &Container,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut wanted: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for claim in claims_named(c) {
        wanted
            .entry(&claim.name)
            .or_default()
            .push(claim.request.clone().unwrap_or_default());
    }
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for claim in pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
    {
        let Some(requests) = wanted.get(claim.name.as_str()) else {
            continue;
        };
        if let Some((name, _)) = claim_name(pod, claim)? {
            out.entry(name)
                .or_default()
                .extend(requests.iter().cloned());
        }
    }
    if let Some(extended) = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
    {
        let requested: BTreeSet<String> = container_requests(c)
            .into_iter()
            .filter(|(name, value)| *value != 0 && is_dra_extended_resource_name(name))
            .map(|(name, _)| name)
            .collect();
        for mapping in &extended.request_mappings {
            if mapping.container_name == c.name && requested.contains(&mapping.resource_name) {
                out.entry(extended.resource_claim_name.clone())
                    .or_default()
                    .push(mapping.request_name.clone());
            }
        }
    }
    Ok(out)
}

/// Upstream's IsDRAExtendedResourceName: an extended resource, or a
/// DeviceClass's implicit one.
fn is_dra_extended_resource_name(name: &str) -> bool {
    is_extended_resource_name(name) || name.starts_with(DEVICE_CLASS_PREFIX)
}

/// Whether the container's `resource` is one DRA gives it (the pod's
/// extended resource claim maps it): the device manager leaves it alone.
pub fn is_dra_extended_resource(pod: &Pod, container: &str, resource: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .is_some_and(|e| {
            e.request_mappings
                .iter()
                .any(|m| m.container_name == container && m.resource_name == resource)
        })
}

/// The claims the kubelet knows, by `namespace/name` (upstream's
/// claimInfoCache without its lock: the manager holds this in one).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimCache {
    claims: BTreeMap<String, ClaimInfo>,
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl ClaimCache {
    /// The cache the checkpoint held: none prepared yet.
    pub fn restore(states: Vec<ClaimInfoState>) -> ClaimCache {
        ClaimCache {
            claims: states
                .into_iter()
                .map(|s| (key(&s.namespace, &s.claim_name), ClaimInfo::restored(s)))
                .collect(),
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&ClaimInfo> {
        self.claims.get(&key(namespace, name))
    }

    pub fn get_mut(&mut self, namespace: &str, name: &str) -> Option<&mut ClaimInfo> {
        self.claims.get_mut(&key(namespace, name))
    }

    pub fn add(&mut self, info: ClaimInfo) {
        self.claims
            .insert(key(&info.state.namespace, &info.state.claim_name), info);
    }

    pub fn delete(&mut self, namespace: &str, name: &str) {
        self.claims.remove(&key(namespace, name));
    }

    /// Whether a claim still counts the pod `uid` as a user: its resources
    /// may still need unpreparing.
    pub fn has_pod(&self, uid: &str) -> bool {
        self.claims.values().any(|c| c.state.pod_uids.contains(uid))
    }

    /// The claims the pod `uid` uses, with their namespace.
    pub fn claims_of_pod(&self, uid: &str) -> Vec<(String, String)> {
        self.claims
            .values()
            .filter(|c| c.state.pod_uids.contains(uid))
            .map(|c| (c.state.namespace.clone(), c.state.claim_name.clone()))
            .collect()
    }

    /// The pods some claim counts as users, each with its claims'
    /// namespace and names.
    pub fn pods(&self) -> BTreeMap<String, (String, Vec<String>)> {
        let mut out: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        for c in self.claims.values() {
            for uid in &c.state.pod_uids {
                let entry = out
                    .entry(uid.clone())
                    .or_insert_with(|| (c.state.namespace.clone(), Vec::new()));
                entry.1.push(c.state.claim_name.clone());
            }
        }
        out
    }

    /// The pods using one of `devices` (pool, device) of `driver`.
    pub fn pods_using(&self, driver: &str, devices: &[(String, String)]) -> BTreeSet<String> {
        self.claims
            .values()
            .filter(|c| {
                c.state.driver_state.get(driver).is_some_and(|s| {
                    s.devices.iter().any(|d| {
                        devices
                            .iter()
                            .any(|(pool, name)| *pool == d.pool_name && *name == d.device_name)
                    })
                })
            })
            .flat_map(|c| c.state.pod_uids.iter().cloned())
            .collect()
    }

    /// What the checkpoint holds.
    pub fn states(&self) -> Vec<ClaimInfoState> {
        self.claims.values().map(|c| c.state.clone()).collect()
    }

    /// The prepared claims per driver, and in all under `<any>` (the
    /// `kubelet_dra_resource_claims_in_use` gauge).
    pub fn in_use(&self) -> BTreeMap<String, u64> {
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut total = 0;
        for c in self.claims.values().filter(|c| c.prepared) {
            total += 1;
            for driver in c.state.driver_state.keys() {
                *counts.entry(driver.clone()).or_default() += 1;
            }
        }
        counts.insert("<any>".into(), total);
        counts
    }
}

#[cfg(test)]
mod tests;
