//! The health DRA drivers report of their devices (upstream's
//! healthinfo.go and UpdateAllocatedResourcesStatus), pure: each driver's
//! devices with their last report, unknown once their timeout passes
//! without one, and what a container's `allocatedResourcesStatus` says of
//! the devices of its claims.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, ResourceHealth, ResourceStatus};

use super::{ClaimCache, base_request, claim_name, claims_named};

/// How long a report holds when the driver gives no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most devices kept per driver (a driver reporting more has the
/// others ignored).
const MAX_DEVICES_PER_DRIVER: usize = 16384;
/// The longest health message the API keeps (ResourceHealthMessageMaxLength).
const MESSAGE_MAX: usize = 1024;

/// A device's health (the API's ResourceHealthStatus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Unhealthy,
    Unknown,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Unhealthy => "Unhealthy",
            Health::Unknown => "Unknown",
        }
    }
}

/// One device's report.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceHealth {
    pub pool: String,
    pub device: String,
    pub health: Health,
    pub message: String,
    /// How long the report holds (a zero or negative timeout reported is
    /// the default).
    pub timeout: Duration,
}

impl DeviceHealth {
    /// A report as the driver sent it: its timeout in seconds (the default
    /// when not positive), its message cut to the API's length.
    pub fn reported(
        pool: &str,
        device: &str,
        health: Health,
        timeout_seconds: i64,
        message: &str,
    ) -> DeviceHealth {
        let timeout = u64::try_from(timeout_seconds)
            .ok()
            .filter(|s| *s > 0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        DeviceHealth {
            pool: pool.into(),
            device: device.into(),
            health,
            message: truncate(message),
            timeout,
        }
    }
}

/// A message cut to the API's length, ending `...` when cut.
fn truncate(message: &str) -> String {
    if message.len() <= MESSAGE_MAX {
        return message.into();
    }
    let mut end = MESSAGE_MAX - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// The devices' last reports, per driver, by `pool/device`, with when each
/// came.
#[derive(Clone, Debug, Default)]
pub struct HealthCache {
    drivers: BTreeMap<String, BTreeMap<String, (DeviceHealth, Instant)>>,
}

impl HealthCache {
    /// A driver's report at `now`; the devices whose health, message or
    /// timeout changed (a device no longer reported whose timeout passed
    /// is dropped, and counts as changed to unknown), by (pool, device).
    pub fn update(
        &mut self,
        driver: &str,
        reported: Vec<DeviceHealth>,
        now: Instant,
    ) -> Vec<(String, String)> {
        let devices = self.drivers.entry(driver.to_owned()).or_default();
        let mut changed = Vec::new();
        let mut seen = BTreeSet::new();
        for report in reported {
            let key = format!("{}/{}", report.pool, report.device);
            seen.insert(key.clone());
            let known = devices.get(&key).map(|(d, _)| d);
            if known.is_none() && devices.len() >= MAX_DEVICES_PER_DRIVER {
                continue;
            }
            if known.is_none_or(|k| {
                k.health != report.health
                    || k.message != report.message
                    || k.timeout != report.timeout
            }) {
                changed.push((report.pool.clone(), report.device.clone()));
            }
            devices.insert(key, (report, now));
        }
        devices.retain(|key, (known, at)| {
            let expired = !seen.contains(key) && now.duration_since(*at) > known.timeout;
            if expired && known.health != Health::Unknown {
                changed.push((known.pool.clone(), known.device.clone()));
            }
            !expired
        });
        changed
    }

    /// A driver's reports forgotten (its stream ended).
    pub fn clear(&mut self, driver: &str) {
        self.drivers.remove(driver);
    }

    /// A device's health and message at `now`: unknown without a report,
    /// or once its report's timeout has passed.
    pub fn get(&self, driver: &str, pool: &str, device: &str, now: Instant) -> (Health, String) {
        self.drivers
            .get(driver)
            .and_then(|d| d.get(&format!("{pool}/{device}")))
            .filter(|(d, at)| now.duration_since(*at) <= d.timeout)
            .map_or((Health::Unknown, String::new()), |(d, _)| {
                (d.health, d.message.clone())
            })
    }
}

/// What container `c`'s `allocatedResourcesStatus` says of its claims:
/// per claim it names (`claim:<name>`, or `claim:<name>/<request>`), the
/// health of each prepared device of it (its first CDI device, else
/// `<driver>/<pool>/<device>`, once), the message with
/// ResourceHealthStatusMessage; a claim with no device is left out.
pub fn claims_status(
    pod: &Pod,
    c: &Container,
    claims: &ClaimCache,
    health: &HealthCache,
    now: Instant,
    messages: bool,
) -> Vec<ResourceStatus> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let generated: BTreeMap<&str, &str> = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s.name.as_str(), s.resource_claim_name.as_deref()?)))
        .collect();
    let pod_claims = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
    let mut out: Vec<ResourceStatus> = Vec::new();
    for claim in claims_named(c) {
        let actual = generated
            .get(claim.name.as_str())
            .map(|n| n.to_string())
            .or_else(|| {
                let pc = pod_claims?.iter().find(|pc| pc.name == claim.name)?;
                claim_name(pod, pc).ok().flatten().map(|(n, _)| n)
            });
        let Some(info) = actual.and_then(|n| claims.get(namespace, &n)) else {
            continue;
        };
        let request = claim.request.as_deref().unwrap_or("");
        let name = if request.is_empty() {
            format!("claim:{}", claim.name)
        } else {
            format!("claim:{}/{request}", claim.name)
        };
        let mut seen = BTreeSet::new();
        let mut resources = Vec::new();
        for (driver, state) in &info.state.driver_state {
            for device in &state.devices {
                if !request.is_empty()
                    && !device.request_names.is_empty()
                    && !device
                        .request_names
                        .iter()
                        .any(|r| r == base_request(request))
                {
                    continue;
                }
                let id = device.cdi_device_ids.first().cloned().unwrap_or_else(|| {
                    format!("{driver}/{}/{}", device.pool_name, device.device_name)
                });
                if !seen.insert(id.clone()) {
                    continue;
                }
                let (h, message) = health.get(driver, &device.pool_name, &device.device_name, now);
                resources.push(ResourceHealth {
                    health: Some(h.as_str().into()),
                    message: (messages && !message.is_empty()).then_some(message),
                    resource_id: id,
                });
            }
        }
        if resources.is_empty() {
            continue;
        }
        match out.iter_mut().find(|s| s.name == name) {
            Some(s) => s.resources = Some(resources),
            None => out.push(ResourceStatus {
                name,
                resources: Some(resources),
            }),
        }
    }
    out
}
