//! The DRA manager (upstream's pkg/kubelet/cm/dra): dynamic resource
//! allocation on the node. DRA drivers register through the plugin
//! watcher (type DRAPlugin) and serve the dra v1 (or v1beta1) gRPC API.
//! Before a pod's sandbox is made, each of its allocated ResourceClaims is
//! read from the API server, checked to be reserved for it (and, made
//! from a template, to be its own), and prepared by its drivers
//! (NodePrepareResources, one call per driver); the devices they prepared
//! give its containers their CDI devices. Once its containers are gone
//! the claims are unprepared (NodeUnprepareResources), when no other pod
//! uses them. What was prepared for which pods is kept in the
//! `dra_manager_state` checkpoint, so that a restarted kubelet unprepares
//! what it prepared before; a loop unprepares the claims of pods no longer
//! active. At start the node's ResourceSlices are deleted, and a driver's
//! 30 seconds after its last plugin went (the driver publishes them again
//! when it registers).
//!
//! A driver is usable while one of its plugins can be reached: each
//! plugin's socket is dialled every few seconds (upstream follows its gRPC
//! connection's state), so a driver killed without removing its sockets
//! loses its slices too. With ResourceHealthStatus, a driver that serves
//! DRAResourceHealth streams its devices' health (NodeWatchResources): each
//! container's `allocatedResourcesStatus` shows its claims' devices with
//! theirs, unknown without a report or once a report's timeout passed, and
//! a change syncs the pods using the device. The health is not
//! checkpointed (upstream's `dra_health_state`): after a restart it is
//! unknown until the driver's next report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, ResourceStatus};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams};
use kubelet_api::objects::get_object;
use kubelet_api::{ApiClient, ApiError};
use kubelet_core::dra::health::{DeviceHealth, Health, HealthCache, claims_status};
use kubelet_core::dra::state::{self, ClaimInfoState, Device};
use kubelet_core::dra::{
    ClaimCache, ClaimInfo, claim_name, container_claim_requests, is_for_pod, is_reserved_for_pod,
    pod_claims,
};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::types::PodUid;
use kubelet_plugin_api::dra::{Claim, NodePrepareResourcesRequest, NodeUnprepareResourcesRequest};
use kubelet_plugin_api::dra_health::{HealthStatus, NodeWatchResourcesResponse};
use kubelet_plugin_api::{
    DRA_HEALTH_SERVICES, DRA_SERVICES, DraClient, status_text, unix_channel, watch_dra_health,
};
use kubelet_tasks::Tasks;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::SourcesReady;

/// Upstream's defaultClientCallTimeout, reconcile period and wiping delay.
const CALL_TIMEOUT: Duration = Duration::from_secs(45);
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
const RECONCILE_PERIOD: Duration = Duration::from_secs(60);
const WIPING_DELAY: Duration = Duration::from_secs(30);
/// The back-off of deleting ResourceSlices (1 s doubling to 5 minutes).
const WIPE_FIRST: Duration = Duration::from_secs(1);
const WIPE_MAX: Duration = Duration::from_secs(300);
/// How often a plugin's socket is dialled to learn whether it is alive.
const CONNECTION_CHECK: Duration = Duration::from_secs(5);

/// Why a pod's claims could not be prepared or unprepared, in upstream's
/// words; each is tried again with the pod's back-off.
#[derive(Debug, thiserror::Error)]
pub enum DraError {
    /// The pod's claims as its spec and status give them, or a claim that
    /// is not its own or not reserved for it.
    #[error("{0}")]
    Claim(String),
    #[error("fetch ResourceClaim {name}: {source}")]
    Fetch {
        name: String,
        #[source]
        source: ApiError,
    },
    #[error("fetch ResourceClaim {0}: resourceclaims.resource.k8s.io {0:?} not found")]
    NotFound(String),
    /// A standalone kubelet has no API server to read claims from.
    #[error("fetch ResourceClaim {0}: the kubelet runs without an API server")]
    NoApi(String),
    #[error("DRA driver {0} is not registered")]
    NotRegistered(String),
    /// A driver's gRPC call failed.
    #[error("{call}: {}", status_text(.status))]
    Call {
        call: &'static str,
        status: tonic::Status,
    },
    /// A driver answered, but not for every claim it was given.
    #[error("{0}")]
    Driver(String),
    #[error("checkpoint ResourceClaim state: {0}")]
    Checkpoint(#[source] std::io::Error),
}

/// A driver's plugin: where it serves, a client in the version chosen,
/// whether it answered its last dial, and the task that dials it.
#[derive(Clone, Debug)]
struct Plugin {
    endpoint: PathBuf,
    client: DraClient,
    connected: bool,
    monitor: CancellationToken,
}

struct Inner {
    file: PathBuf,
    api: Option<ApiClient>,
    node_name: String,
    cache: Mutex<ClaimCache>,
    /// Each driver's plugins, the one registered last answering.
    plugins: Mutex<BTreeMap<String, Vec<Plugin>>>,
    /// The deletions of an unusable driver's ResourceSlices waiting for
    /// their delay (each with its number), cancelled if it is usable again.
    wipes: Mutex<BTreeMap<String, (u64, CancellationToken)>>,
    next_wipe: std::sync::atomic::AtomicU64,
    sources: std::sync::OnceLock<SourcesReady>,
    metrics: KubeletMetrics,
    /// ResourceHealthStatus: the devices' health, and where to send the
    /// pods whose devices' health changed.
    health: Option<HealthReports>,
    reports: Mutex<HealthCache>,
}

/// Where device health goes (ResourceHealthStatus).
pub struct HealthReports {
    /// The pods to sync when their devices' health changed.
    pub changed: mpsc::UnboundedSender<PodUid>,
    /// ResourceHealthStatusMessage: a report's message is shown.
    pub messages: bool,
}

/// The DRA manager; clones share it.
#[derive(Clone)]
pub struct DraManager(Arc<Inner>);

impl std::fmt::Debug for DraManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraManager")
            .field("file", &self.0.file)
            .finish_non_exhaustive()
    }
}

/// A claim read and checked, with the plugins of its drivers.
struct Checked {
    info: ClaimInfo,
    plugins: BTreeMap<String, Plugin>,
}

/// The claims to prepare, per driver, with its plugin.
type Batches = BTreeMap<String, (Plugin, Vec<Claim>)>;

/// A driver's answer for the claims `asked`, by claim UID, checked in
/// upstream's words: no result for a claim not asked, no claim's error
/// (the first in the order asked: upstream walks a map, in any order), no
/// claim left out.
fn check_answer<R>(
    call: &str,
    asked: &[Claim],
    answer: &std::collections::HashMap<String, R>,
    error: impl Fn(&R) -> &String,
) -> Result<(), DraError> {
    if let Some(unknown) = answer.keys().find(|u| !asked.iter().any(|c| &c.uid == *u)) {
        return Err(DraError::Driver(format!(
            "{call} returned result for unknown claim UID {unknown}"
        )));
    }
    for claim in asked {
        if let Some(e) = answer.get(&claim.uid).map(&error).filter(|e| !e.is_empty()) {
            return Err(DraError::Driver(format!(
                "{call} failed for ResourceClaim {}: {e}",
                claim.name
            )));
        }
    }
    let unfinished = asked.len().saturating_sub(answer.len());
    if unfinished != 0 {
        return Err(DraError::Driver(format!(
            "{call} skipped {unfinished} ResourceClaims"
        )));
    }
    Ok(())
}

/// A request to a driver, with upstream's call timeout.
fn with_timeout<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CALL_TIMEOUT);
    request
}

/// A device a driver prepared, as the checkpoint keeps it.
fn device_state(d: &kubelet_plugin_api::dra::Device) -> Device {
    Device {
        pool_name: d.pool_name.clone(),
        device_name: d.device_name.clone(),
        share_id: d.share_id.clone(),
        request_names: d.request_names.clone(),
        cdi_device_ids: d.cdi_device_ids.clone(),
    }
}

impl DraManager {
    pub fn new(
        root_dir: &Path,
        api: Option<ApiClient>,
        node_name: &str,
        metrics: KubeletMetrics,
        health: Option<HealthReports>,
    ) -> DraManager {
        DraManager(Arc::new(Inner {
            file: root_dir.join(state::FILE),
            api,
            node_name: node_name.into(),
            cache: Mutex::default(),
            plugins: Mutex::default(),
            wipes: Mutex::default(),
            next_wipe: std::sync::atomic::AtomicU64::new(0),
            sources: std::sync::OnceLock::new(),
            metrics,
            health,
            reports: Mutex::default(),
        }))
    }

    /// Start (upstream's NewManager): the checkpoint restored, or made
    /// when there is none. One that cannot be read stops the kubelet, as
    /// upstream's does: the claims it prepared would be unknown.
    pub fn start(&self) -> Result<(), String> {
        let fail = |e: String| {
            format!(
                "create ResourceClaim cache: GetOrCreate() on checkpoint state: failed to get checkpoint {}: {e}",
                state::FILE
            )
        };
        let states = match std::fs::read(&self.0.file) {
            Ok(bytes) => state::decode(&bytes).map_err(|e| fail(e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let bytes = state::encode(None).map_err(|e| fail(e.to_string()))?;
                crate::files::write_file(&self.0.file, &bytes).map_err(|e| {
                    format!(
                        "create ResourceClaim cache: GetOrCreate() on checkpoint state: failed to store checkpoint {}: {e}",
                        state::FILE
                    )
                })?;
                Vec::new()
            }
            Err(e) => return Err(fail(e.to_string())),
        };
        if !states.is_empty() {
            tracing::info!(
                claims = states.len(),
                "DRA manager: claims restored from the checkpoint"
            );
        }
        *self.0.cache.lock() = ClaimCache::restore(states);
        Ok(())
    }

    /// The pod sources' readiness: claims of inactive pods are unprepared
    /// once every source has given its pods.
    pub fn watch_sources(&self, ready: SourcesReady) {
        let _ = self.0.sources.set(ready);
    }

    fn persist(&self, cache: &ClaimCache) -> Result<(), DraError> {
        let bytes = state::encode(Some(cache.states()))
            .map_err(|e| DraError::Checkpoint(std::io::Error::other(e)))?;
        crate::files::write_file(&self.0.file, &bytes).map_err(DraError::Checkpoint)?;
        self.0.metrics.dra_resource_claims_in_use.set_all(
            cache
                .in_use()
                .iter()
                .map(|(d, n)| (vec![d.as_str()], *n as f64)),
        );
        Ok(())
    }

    /// A driver's plugin checked (upstream's ValidatePlugin): the first
    /// DRAPlugin service it lists that the kubelet speaks is the one used.
    pub fn validate<'a>(
        &self,
        driver: &str,
        endpoint: &Path,
        versions: &'a [String],
    ) -> Result<&'a str, String> {
        let invalid = |e: String| {
            format!(
                "invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {}: {e}",
                endpoint.display()
            )
        };
        if versions.is_empty() {
            return Err(invalid(
                "empty list of supported gRPC services (aka supported versions)".into(),
            ));
        }
        let Some(service) = versions.iter().find(|v| DRA_SERVICES.contains(&v.as_str())) else {
            return Err(invalid(format!(
                "none of services supported by the plugin ({}) are supported by the kubelet ({})",
                go_quoted(versions.iter().map(String::as_str)),
                go_quoted(DRA_SERVICES.iter().copied())
            )));
        };
        Ok(service)
    }

    /// A driver's plugin registering (upstream's RegisterPlugin), spoken to
    /// in the service [`Self::validate`] chooses of its `versions`; its
    /// socket is dialled from now on, and its health stream watched when it
    /// serves one.
    pub fn register(
        &self,
        driver: &str,
        endpoint: &Path,
        versions: &[String],
        tasks: &Tasks,
    ) -> Result<(), String> {
        let service = self.validate(driver, endpoint, versions)?;
        let health = self
            .0
            .health
            .as_ref()
            .and_then(|_| {
                DRA_HEALTH_SERVICES
                    .iter()
                    .find(|s| versions.iter().any(|v| v == *s))
            })
            .copied();
        let channel = unix_channel(endpoint.to_owned(), DIAL_TIMEOUT);
        let client = DraClient::new(channel, service)
            .ok_or_else(|| format!("internal error: unsupported chosen service: {service:?}"))?;
        let count = {
            let mut plugins = self.0.plugins.lock();
            let list = plugins.entry(driver.to_owned()).or_default();
            if list.iter().any(|p| p.endpoint == endpoint) {
                return Err(format!(
                    "endpoint {} already registered for DRA driver plugin {driver}",
                    endpoint.display()
                ));
            }
            let (me, d, e, t) = (
                self.clone(),
                driver.to_owned(),
                endpoint.to_owned(),
                tasks.clone(),
            );
            let monitor = tasks.spawn(
                tracing::info_span!("dra_plugin_connection", driver, endpoint = %endpoint.display()),
                move |token| async move {
                    let health = async {
                        if let Some(service) = health {
                            me.watch_health(&d, &e, service, &token).await;
                        }
                    };
                    tokio::join!(me.watch_connection(&d, &e, &t, token.clone()), health);
                },
            );
            list.push(Plugin {
                endpoint: endpoint.to_owned(),
                client,
                connected: true,
                monitor,
            });
            list.len()
        };
        tracing::info!(driver, endpoint = %endpoint.display(), service, plugins = count, "Registered DRA plugin");
        self.sync(driver, tasks);
        Ok(())
    }

    /// A driver's plugin gone (its socket removed).
    pub fn deregister(&self, driver: &str, endpoint: &Path, tasks: &Tasks) {
        {
            let mut plugins = self.0.plugins.lock();
            let Some(list) = plugins.get_mut(driver) else {
                return;
            };
            list.retain(|p| {
                let gone = p.endpoint == endpoint;
                if gone {
                    p.monitor.cancel();
                }
                !gone
            });
            if list.is_empty() {
                plugins.remove(driver);
            }
        }
        tracing::info!(driver, endpoint = %endpoint.display(), "Unregistered DRA plugin");
        self.sync(driver, tasks);
    }

    /// Dial the plugin's socket every few seconds; a change of whether it
    /// answers is a change of its driver's usability.
    async fn watch_connection(
        &self,
        driver: &str,
        endpoint: &Path,
        tasks: &Tasks,
        token: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(CONNECTION_CHECK) => {}
            }
            let connected = matches!(
                tokio::time::timeout(DIAL_TIMEOUT, tokio::net::UnixStream::connect(endpoint)).await,
                Ok(Ok(_))
            );
            let changed = {
                let mut plugins = self.0.plugins.lock();
                let plugin = plugins
                    .get_mut(driver)
                    .and_then(|l| l.iter_mut().find(|p| p.endpoint == endpoint));
                match plugin {
                    Some(p) if p.connected != connected => {
                        p.connected = connected;
                        true
                    }
                    _ => false,
                }
            };
            if changed {
                tracing::info!(driver, endpoint = %endpoint.display(), connected, "DRA plugin connection changed");
                self.sync(driver, tasks);
            }
        }
    }

    /// The driver's device health stream, connected again 5 s after it
    /// ends (its reports forgotten then), until `token` ends or the driver
    /// says it has none (Unimplemented).
    async fn watch_health(
        &self,
        driver: &str,
        endpoint: &Path,
        service: &str,
        token: &CancellationToken,
    ) {
        loop {
            let channel = unix_channel(endpoint.to_owned(), DIAL_TIMEOUT);
            let opened = tokio::select! {
                () = token.cancelled() => return,
                opened = watch_dra_health(channel, service) => opened,
            };
            let ended = match opened {
                Ok(mut stream) => loop {
                    let next = tokio::select! {
                        () = token.cancelled() => break None,
                        next = stream.message() => next,
                    };
                    match next {
                        Ok(Some(report)) => self.health_report(driver, report),
                        Ok(None) => break Some(tonic::Code::Ok),
                        Err(e) => break Some(e.code()),
                    }
                },
                Err(e) => Some(e.code()),
            };
            self.0.reports.lock().clear(driver);
            match ended {
                None => return,
                Some(tonic::Code::Unimplemented) => {
                    tracing::info!(
                        driver,
                        "DRA driver does not support WatchResources health stream, stopping"
                    );
                    return;
                }
                Some(code) => tracing::debug!(driver, ?code, "WatchResources health stream ended"),
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(CONNECTION_CHECK) => {}
            }
        }
    }

    /// A driver's health report: the pods using a device whose health
    /// changed are synced.
    fn health_report(&self, driver: &str, report: NodeWatchResourcesResponse) {
        let Some(settings) = &self.0.health else {
            return;
        };
        let devices = report
            .devices
            .iter()
            .map(|d| {
                let id = d.device.clone().unwrap_or_default();
                let health = match HealthStatus::try_from(d.health) {
                    Ok(HealthStatus::Healthy) => Health::Healthy,
                    Ok(HealthStatus::Unhealthy) => Health::Unhealthy,
                    _ => Health::Unknown,
                };
                DeviceHealth::reported(
                    &id.pool_name,
                    &id.device_name,
                    health,
                    d.health_check_timeout_seconds,
                    &d.message,
                )
            })
            .collect();
        let now = tokio::time::Instant::now().into_std();
        let changed = self.0.reports.lock().update(driver, devices, now);
        if changed.is_empty() {
            return;
        }
        let pods = self.0.cache.lock().pods_using(driver, &changed);
        for uid in pods {
            let _ = settings.changed.send(PodUid::from(uid.as_str()));
        }
    }

    /// Whether containers' claims show their devices' health
    /// (ResourceHealthStatus).
    pub fn reports_health(&self) -> bool {
        self.0.health.is_some()
    }

    /// What container `c`'s allocatedResourcesStatus says of its claims.
    pub fn allocated_resources_status(&self, pod: &Pod, c: &Container) -> Vec<ResourceStatus> {
        let Some(settings) = &self.0.health else {
            return Vec::new();
        };
        let now = tokio::time::Instant::now().into_std();
        let claims = self.0.cache.lock();
        claims_status(
            pod,
            c,
            &claims,
            &self.0.reports.lock(),
            now,
            settings.messages,
        )
    }

    /// Upstream's sync: a driver none of whose plugins is connected loses
    /// its ResourceSlices after the wiping delay, unless it is usable
    /// again before.
    fn sync(&self, driver: &str, tasks: &Tasks) {
        let usable = self
            .0
            .plugins
            .lock()
            .get(driver)
            .is_some_and(|l| l.iter().any(|p| p.connected));
        let mut wipes = self.0.wipes.lock();
        if usable {
            if let Some((_, pending)) = wipes.remove(driver) {
                pending.cancel();
            }
            return;
        }
        if self.0.api.is_none() || wipes.contains_key(driver) {
            return;
        }
        let number = self
            .0
            .next_wipe
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (me, gone) = (self.clone(), driver.to_owned());
        let token = tasks.spawn(
            tracing::info_span!("dra_driver_cleanup", driver),
            move |token| async move {
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(WIPING_DELAY) => me.wipe_slices(Some(&gone), &token).await,
                }
                let mut wipes = me.0.wipes.lock();
                if wipes.get(&gone).is_some_and(|(n, _)| *n == number) {
                    wipes.remove(&gone);
                }
            },
        );
        wipes.insert(driver.to_owned(), (number, token));
    }

    fn plugin(&self, driver: &str) -> Result<Plugin, DraError> {
        if driver.is_empty() {
            return Err(DraError::Claim("DRA driver name is empty".into()));
        }
        self.0
            .plugins
            .lock()
            .get(driver)
            .and_then(|l| l.last().cloned())
            .ok_or_else(|| DraError::NotRegistered(driver.into()))
    }

    /// Delete this node's ResourceSlices, of `driver` or of all drivers,
    /// trying again with a back-off until it is done or `token` ends.
    pub async fn wipe_slices(&self, driver: Option<&str>, token: &CancellationToken) {
        let Some(api) = &self.0.api else {
            return;
        };
        let mut selector = format!("spec.nodeName={}", self.0.node_name);
        if let Some(driver) = driver {
            selector.push_str(&format!(",spec.driver={driver}"));
        }
        let slices: Api<ResourceSlice> = Api::all(api.client().clone());
        let mut delay = WIPE_FIRST;
        loop {
            match slices
                .delete_collection(
                    &DeleteParams::default(),
                    &ListParams::default().fields(&selector),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(selector, "Deleted ResourceSlices");
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                Err(e) => {
                    tracing::debug!(selector, error = %e, "Deleting ResourceSlices failed, retrying")
                }
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(WIPE_MAX);
        }
    }

    /// Prepare the pod's claims (upstream's PrepareResources), before its
    /// sandbox is made.
    pub async fn prepare(&self, pod: &Pod) -> Result<(), DraError> {
        let start = Instant::now();
        let result = self.prepare_claims(pod).await;
        self.observe("PrepareResources", start, result.is_err());
        result
    }

    fn observe(&self, operation: &str, start: Instant, failed: bool) {
        self.0.metrics.dra_operations_duration.observe_duration(
            &[operation, if failed { "true" } else { "false" }],
            start.elapsed(),
        );
    }

    async fn fetch(&self, pod: &Pod, name: &str) -> Result<ResourceClaim, DraError> {
        let api = self
            .0
            .api
            .as_ref()
            .ok_or_else(|| DraError::NoApi(name.into()))?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        get_object::<ResourceClaim>(api, "ResourceClaim", namespace, name)
            .await
            .map_err(|source| DraError::Fetch {
                name: name.into(),
                source,
            })?
            .ok_or_else(|| DraError::NotFound(name.into()))
    }

    /// Each of the pod's claims read and checked, and its drivers' plugins
    /// found, before any is prepared.
    async fn checked_claims(&self, pod: &Pod) -> Result<Vec<Checked>, DraError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let mut out = Vec::new();
        for pc in &pod_claims(pod) {
            let Some((name, must_check_owner)) = claim_name(pod, pc).map_err(DraError::Claim)?
            else {
                continue;
            };
            let claim = self.fetch(pod, &name).await?;
            if must_check_owner {
                is_for_pod(pod, &claim).map_err(DraError::Claim)?;
            }
            if !is_reserved_for_pod(pod, &claim) {
                return Err(DraError::Claim(format!(
                    "pod {} ({uid}) is not allowed to use ResourceClaim {name} ({})",
                    pod.metadata.name.as_deref().unwrap_or(""),
                    claim.metadata.uid.as_deref().unwrap_or("")
                )));
            }
            let info = ClaimInfo::from_claim(&claim)
                .map_err(|e| DraError::Claim(format!("ResourceClaim {name}: {e}")))?;
            let mut plugins = BTreeMap::new();
            for driver in info.state.driver_state.keys() {
                plugins.insert(driver.clone(), self.plugin(driver)?);
            }
            out.push(Checked { info, plugins });
        }
        Ok(out)
    }

    /// The pod counted as a user of each claim (checkpointed before any
    /// driver is called, so that a crash leaves it to unprepare); the
    /// claims not yet prepared, batched per driver.
    fn reserve(
        &self,
        uid: &str,
        checked: &[Checked],
    ) -> Result<(Batches, Vec<(String, String)>), DraError> {
        let mut batches = Batches::new();
        let mut to_prepare = Vec::new();
        let mut cache = self.0.cache.lock();
        for Checked {
            info: fresh,
            plugins,
        } in checked
        {
            let (namespace, name) = (&fresh.state.namespace, &fresh.state.claim_name);
            let info = match cache.get_mut(namespace, name) {
                Some(known) if known.state.claim_uid != fresh.state.claim_uid => {
                    return Err(DraError::Claim(format!(
                        "old ResourceClaim with same name {name} and different UID {} still exists (previous pod force-deleted?!)",
                        known.state.claim_uid
                    )));
                }
                Some(known) if known.unpreparing => {
                    return Err(DraError::Claim(format!(
                        "ResourceClaim {name} is being unprepared"
                    )));
                }
                Some(known) => known,
                None => {
                    cache.add(fresh.clone());
                    cache.get_mut(namespace, name).expect("just added")
                }
            };
            info.state.pod_uids.insert(uid.to_owned());
            if info.prepared {
                continue;
            }
            to_prepare.push((namespace.clone(), name.clone()));
            let request = Claim {
                namespace: namespace.clone(),
                uid: fresh.state.claim_uid.clone(),
                name: name.clone(),
            };
            for (driver, plugin) in plugins {
                batches
                    .entry(driver.clone())
                    .or_insert_with(|| (plugin.clone(), Vec::new()))
                    .1
                    .push(request.clone());
            }
        }
        self.persist(&cache)?;
        Ok((batches, to_prepare))
    }

    async fn prepare_claims(&self, pod: &Pod) -> Result<(), DraError> {
        let checked = self.checked_claims(pod).await?;
        if checked.is_empty() {
            return Ok(());
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (batches, to_prepare) = self.reserve(&uid, &checked)?;
        for (driver, (plugin, claims)) in batches {
            let mut client = plugin.client.clone();
            let request = with_timeout(NodePrepareResourcesRequest {
                claims: claims.clone(),
            });
            let answer = self
                .call(
                    &driver,
                    &plugin,
                    "NodePrepareResources",
                    client.node_prepare_resources(request),
                )
                .await?;
            check_answer("NodePrepareResources", &claims, &answer.claims, |r| {
                &r.error
            })?;
            let mut cache = self.0.cache.lock();
            for asked in &claims {
                let Some(result) = answer.claims.get(&asked.uid) else {
                    continue;
                };
                let info = cache.get_mut(&asked.namespace, &asked.name).ok_or_else(|| {
                    DraError::Driver(format!(
                        "internal error: unable to get claim info for ResourceClaim {} in namespace {}",
                        asked.name, asked.namespace
                    ))
                })?;
                info.set_devices(&driver, result.devices.iter().map(device_state).collect());
            }
        }
        let mut cache = self.0.cache.lock();
        for (namespace, name) in &to_prepare {
            if let Some(info) = cache.get_mut(namespace, name) {
                info.prepared = true;
            }
        }
        self.persist(&cache)
    }

    /// A call to `driver`'s plugin, timed (dra_grpc_operations_duration_seconds).
    async fn call<R>(
        &self,
        driver: &str,
        plugin: &Plugin,
        call: &'static str,
        answer: impl std::future::Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    ) -> Result<R, DraError> {
        let start = Instant::now();
        let answer = answer.await;
        let code = answer
            .as_ref()
            .err()
            .map_or(tonic::Code::Ok, tonic::Status::code);
        let method = plugin.client.path(call);
        self.0
            .metrics
            .dra_grpc_operations_duration
            .observe_duration(&[driver, &method, &go_code(code)], start.elapsed());
        answer
            .map(tonic::Response::into_inner)
            .map_err(|status| DraError::Call { call, status })
    }

    /// Unprepare the claims of a pod whose containers are gone (upstream's
    /// UnprepareResources): those the checkpoint counts it a user of. A pod
    /// is counted before any driver is called, so these are all it may
    /// have had prepared; a pod without claims costs no checkpoint write.
    pub async fn unprepare(&self, uid: &str) -> Result<(), DraError> {
        let start = Instant::now();
        let known = self.0.cache.lock().claims_of_pod(uid);
        let result = match known.first() {
            Some((namespace, _)) => {
                let namespace = namespace.clone();
                let names = known.into_iter().map(|(_, n)| n).collect();
                self.unprepare_claims(uid, &namespace, names).await
            }
            None => Ok(()),
        };
        self.observe("UnprepareResources", start, result.is_err());
        result
    }

    async fn unprepare_claims(
        &self,
        uid: &str,
        namespace: &str,
        names: Vec<String>,
    ) -> Result<(), DraError> {
        let mut batches: BTreeMap<String, Vec<Claim>> = BTreeMap::new();
        let mut last_users: Vec<String> = Vec::new();
        {
            let mut cache = self.0.cache.lock();
            for name in &names {
                let Some(info) = cache.get_mut(namespace, name) else {
                    continue;
                };
                if !info.state.pod_uids.contains(uid) {
                    continue;
                }
                if info.state.pod_uids.len() > 1 {
                    info.state.pod_uids.remove(uid);
                    continue;
                }
                info.unpreparing = true;
                last_users.push(name.clone());
                let claim = Claim {
                    namespace: namespace.into(),
                    uid: info.state.claim_uid.clone(),
                    name: name.clone(),
                };
                for driver in info.state.driver_state.keys() {
                    batches
                        .entry(driver.clone())
                        .or_default()
                        .push(claim.clone());
                }
            }
            self.persist(&cache)?;
        }
        for (driver, claims) in batches {
            let plugin = self.plugin(&driver)?;
            let mut client = plugin.client.clone();
            let request = with_timeout(NodeUnprepareResourcesRequest {
                claims: claims.clone(),
            });
            let answer = self
                .call(
                    &driver,
                    &plugin,
                    "NodeUnprepareResources",
                    client.node_unprepare_resources(request),
                )
                .await?;
            check_answer("NodeUnprepareResources", &claims, &answer.claims, |r| {
                &r.error
            })?;
        }
        let mut cache = self.0.cache.lock();
        for name in &last_users {
            cache.delete(namespace, name);
        }
        self.persist(&cache)
    }

    /// Whether a claim still counts the pod as a user: it is not done
    /// until they are unprepared (upstream's PodMightNeedToUnprepareResources).
    pub fn might_need_unprepare(&self, uid: &str) -> bool {
        self.0.cache.lock().has_pod(uid)
    }

    /// The CDI devices the container gets from its claims (upstream's
    /// GetResources).
    pub fn cdi_devices(&self, pod: &Pod, c: &Container) -> Result<Vec<String>, String> {
        let requests = container_claim_requests(pod, c)?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let cache = self.0.cache.lock();
        let mut out = Vec::new();
        for (name, requests) in requests {
            let info = cache.get(namespace, &name).ok_or_else(|| {
                format!(
                    "internal error: unable to get claim info for ResourceClaim {name} in namespace {namespace}"
                )
            })?;
            for request in requests {
                out.extend(info.cdi_devices(&request));
            }
        }
        Ok(out)
    }

    /// The claims the container uses, as prepared (the PodResources API's
    /// dynamic resources; upstream's GetContainerClaimInfos).
    pub fn container_claims(&self, pod: &Pod, c: &Container) -> Vec<ClaimInfoState> {
        let Ok(requests) = container_claim_requests(pod, c) else {
            return Vec::new();
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let cache = self.0.cache.lock();
        requests
            .keys()
            .filter_map(|name| cache.get(namespace, name))
            .map(|info| info.state.clone())
            .collect()
    }

    /// The manager's loop: the node's ResourceSlices deleted at start,
    /// then every minute the claims of pods no longer active unprepared
    /// (upstream's reconcileLoop).
    pub async fn run(self, active: impl Fn() -> Vec<Arc<Pod>>, token: CancellationToken) {
        self.wipe_slices(None, &token).await;
        let mut tick = tokio::time::interval(RECONCILE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = tick.tick() => {}
            }
            if self.0.sources.get().is_some_and(SourcesReady::all_ready) {
                self.reconcile(&active()).await;
            }
        }
    }

    /// Unprepare the claims of every pod that is not active.
    pub async fn reconcile(&self, active: &[Arc<Pod>]) {
        let active: std::collections::HashSet<&str> = active
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        let inactive: Vec<(String, (String, Vec<String>))> = self
            .0
            .cache
            .lock()
            .pods()
            .into_iter()
            .filter(|(uid, _)| !active.contains(uid.as_str()))
            .collect();
        for (uid, (namespace, names)) in inactive {
            if let Err(e) = self.unprepare_claims(&uid, &namespace, names).await {
                tracing::info!(pod_uid = %uid, error = %e, "Unpreparing pod resources in reconcile loop failed, will retry");
            }
        }
    }
}

/// Strings as Go's %q prints a []string: `["a" "b"]`.
fn go_quoted<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = items.map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// A gRPC code as grpc-go names it (`OK`, `DeadlineExceeded`).
fn go_code(code: tonic::Code) -> String {
    match code {
        tonic::Code::Ok => "OK".into(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests;
