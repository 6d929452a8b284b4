//! Containers' swap (upstream's NodeSwap, GA): `memorySwap.swapBehavior`
//! NoSwap (the default) or LimitedSwap, turned into each container's CRI
//! resources where the host has a swap controller, as upstream's
//! configureContainerSwapResources.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::eviction::rank::is_critical;
use crate::qos::qos_class;

/// `memorySwap.swapBehavior`'s values.
pub const NO_SWAP: &str = "NoSwap";
pub const LIMITED_SWAP: &str = "LimitedSwap";

/// Where the host's swap controller is, if it has one (upstream's
/// checkSwapControllerAvailability).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapController {
    /// None: containers' swap is left to the runtime.
    Unavailable,
    /// cgroup v1's `memory.memsw.limit_in_bytes`.
    V1,
    /// cgroup v2's `memory.swap.max`.
    V2,
}

/// What the node decides about containers' swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwapPolicy {
    /// swapBehavior is LimitedSwap.
    pub limited: bool,
    pub controller: SwapController,
    /// The node's memory and swap, in bytes.
    pub node_memory: i64,
    pub node_swap: i64,
}

/// What a container's CRI resources get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapSetting {
    /// Nothing: no swap controller.
    Untouched,
    /// v1: memory and swap together limited to the memory limit (no swap
    /// past it).
    MemswEqualsMemory,
    /// v2: `memory.swap.max` in bytes.
    SwapMax(i64),
}

impl SwapPolicy {
    /// `container`'s swap in `pod`, whose memory request is `request`
    /// bytes: LimitedSwap gives a Burstable, non-critical pod's container
    /// that asks for memory (a request below its limit) its request's share
    /// of the node's swap (v2 only); everything else gets none. With the
    /// share that could not be worked out, why (upstream logs it).
    pub fn for_container(
        &self,
        pod: &Pod,
        container: &Container,
        request: i64,
    ) -> (SwapSetting, Option<String>) {
        let none = match self.controller {
            SwapController::Unavailable => return (SwapSetting::Untouched, None),
            SwapController::V1 => SwapSetting::MemswEqualsMemory,
            SwapController::V2 => SwapSetting::SwapMax(0),
        };
        if !self.limited || self.controller != SwapController::V2 || is_critical(pod) {
            return (none, None);
        }
        let memory = |kind: &str| {
            container
                .resources
                .as_ref()
                .and_then(|r| match kind {
                    "requests" => r.requests.as_ref(),
                    _ => r.limits.as_ref(),
                })
                .and_then(|m| m.get("memory"))
                .map(|q| crate::quantity::parse_bytes(q).unwrap_or(0))
                .unwrap_or(0)
        };
        let (req, limit) = (memory("requests"), memory("limits"));
        if qos_class(pod) != "Burstable" || (req == 0 && limit == 0) || req == limit {
            return (none, None);
        }
        match swap_for_burstable(request, self.node_memory, self.node_swap) {
            Ok(bytes) => (SwapSetting::SwapMax(bytes), None),
            Err(e) => (none, Some(e)),
        }
    }
}

/// calcSwapForBurstablePods: the request's share of the node's memory, of
/// its swap.
pub fn swap_for_burstable(request: i64, node_memory: i64, node_swap: i64) -> Result<i64, String> {
    if node_memory <= 0 {
        return Err("total node memory is 0".into());
    }
    if request > node_memory {
        return Err(format!(
            "container request {request} is larger than total node memory {node_memory}"
        ));
    }
    Ok((request as f64 / node_memory as f64 * node_swap as f64) as i64)
}

#[cfg(test)]
mod tests;
