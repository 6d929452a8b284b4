//! The eviction manager (upstream's pkg/kubelet/eviction), started with the
//! runtime-dependent modules. Every [`MONITORING_INTERVAL`] it reads the
//! node's stats summary (the one `/stats/summary` serves), lets
//! `kubelet_core::eviction::decide` conclude, and keeps the node's pressure
//! conditions for node status and admission. Pods over their own local
//! storage limits (emptyDir `sizeLimit`, `ephemeral-storage`) are evicted
//! first. When a threshold is to be acted on it records EvictionThresholdMet, reclaims at the node level first (dead
//! containers, the last ones of pods that ran to their end, and unused
//! images, for disk signals), and otherwise evicts one
//! pod, ranked as upstream ranks them, through its pod worker: Failed with
//! reason Evicted once stopped. It then waits for that pod to be cleaned up
//! ([`POD_CLEANUP_TIMEOUT`] at most) before the next pass.
//!
//! With kernelMemcgNotification on a cgroup v1 host, a memory.available
//! threshold is also registered with the kernel ([`memcg`]), whose
//! notification starts a pass at once.
//!
//! Not yet: the containerfs signals (a separate filesystem for writable
//! layers, KubeletSeparateDiskGC).

mod memcg;

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::eviction::decide::{State, memcg_threshold, observe, step, thresholds_met};
use kubelet_core::eviction::local;
use kubelet_core::eviction::rank::{eviction_message, is_critical, rank};
use kubelet_core::eviction::{Pressure, Signal, Threshold};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::stats::{MemoryStats, PodStats, Summary};
use kubelet_core::types::pod_full_name;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::stats::StatsError;
use kubelet_tasks::blocking;
use memcg::MemcgNotifier;

/// How often the manager looks (upstream's housekeeping period, its
/// default evictionMonitoringPeriod).
pub const MONITORING_INTERVAL: Duration = Duration::from_secs(10);
/// How long it waits for an evicted pod to be cleaned up.
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
const POD_CLEANUP_POLL: Duration = Duration::from_secs(1);
/// The grace period of a pod evicted for a hard threshold.
const IMMEDIATE_EVICTION_GRACE_PERIOD: i64 = 1;
/// How often the memcg thresholds follow the node's figures (upstream's
/// notifierRefreshInterval).
const NOTIFIER_REFRESH_INTERVAL: Duration = Duration::from_secs(10);

/// What the manager acts through (the kubelet; a fake in tests).
pub trait EvictionHost: Send + Sync + 'static {
    /// The node's stats summary, with new samples.
    fn summary(&self) -> impl Future<Output = Result<Summary, StatsError>> + Send;
    /// Whether the runtime's images live on a file system of their own;
    /// None when that cannot be told now (asked again next pass).
    fn dedicated_image_fs(&self) -> impl Future<Output = Option<bool>> + Send;
    /// The pods admitted and not yet terminal.
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Remove dead containers and unused images (for disk pressure).
    fn reclaim_disk(&self) -> impl Future<Output = ()> + Send;
    /// Stop `pod` for good as `eviction` says.
    fn evict(&self, pod: &Arc<Pod>, eviction: Eviction);
    /// Whether the evicted `pod` is stopped and cleaned up.
    fn cleaned_up(&self, pod: &Pod) -> bool;
    /// A Warning event about the node.
    fn node_event(&self, reason: &str, message: String);
}

/// An eviction decided: the grace period, the pod's final message, the
/// Evicted event's annotations, and whether the status carries the
/// DisruptionTarget condition (not for local storage limits, as upstream).
#[derive(Clone, Debug, PartialEq)]
pub struct Eviction {
    pub grace: i64,
    pub message: String,
    pub annotations: BTreeMap<String, String>,
    pub disruption: bool,
}

/// The manager's settings (from the KubeletConfiguration).
#[derive(Clone, Debug)]
pub struct Settings {
    pub thresholds: Vec<Threshold>,
    /// evictionPressureTransitionPeriod.
    pub transition_period: Duration,
    /// evictionMaxPodGracePeriod.
    pub max_pod_grace_period: i64,
    /// localStorageCapacityIsolation.
    pub local_storage_capacity_isolation: bool,
    /// With kernelMemcgNotification on a cgroup v1 host: the memory
    /// hierarchy's root, where memory.available's thresholds are registered.
    pub memcg_root: Option<PathBuf>,
    /// The pods' cgroup (kubepods) under `memcg_root`, where
    /// allocatableMemory.available's are.
    pub memcg_pods: Option<PathBuf>,
}

pub struct EvictionManager {
    settings: Settings,
    state: Mutex<State>,
    pressure: RwLock<Vec<Pressure>>,
    /// Whether the image file system is a dedicated one, once known.
    dedicated: Mutex<Option<bool>>,
    /// The node's memory at the last pass (usage, working set, available),
    /// and the pods' cgroup's.
    node_memory: Mutex<MemoryFigures>,
    metrics: KubeletMetrics,
    clock: Clock,
}

/// Whether a signal's node-level reclaim (container and image GC) may help:
/// disk signals on a shared file system, imagefs ones on a dedicated one
/// (buildSignalToNodeReclaimFuncs).
fn has_node_reclaim(signal: Signal, dedicated_image_fs: bool) -> bool {
    match signal {
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree => !dedicated_image_fs,
        Signal::ImageFsAvailable | Signal::ImageFsInodesFree => true,
        _ => false,
    }
}

/// Usage, working set and available bytes of the node and of the pods'
/// cgroup, as the last summary gave them.
#[derive(Clone, Copy, Debug, Default)]
struct MemoryFigures {
    node: Option<(u64, u64, u64)>,
    pods: Option<(u64, u64, u64)>,
}

/// A summary memory figure's usage, working set and available bytes.
fn memory_figures(m: Option<&MemoryStats>) -> Option<(u64, u64, u64)> {
    let m = m?;
    Some((m.usage_bytes?, m.working_set_bytes?, m.available_bytes?))
}

impl EvictionManager {
    pub fn new(settings: Settings, metrics: KubeletMetrics, clock: Clock) -> Self {
        EvictionManager {
            settings,
            state: Mutex::default(),
            pressure: RwLock::default(),
            dedicated: Mutex::default(),
            node_memory: Mutex::default(),
            metrics,
            clock,
        }
    }

    /// The node's pressure conditions now (for node status and admission).
    pub fn pressure(&self) -> Vec<Pressure> {
        self.pressure.read().clone()
    }

    async fn dedicated_image_fs<H: EvictionHost>(&self, host: &H) -> bool {
        let known = *self.dedicated.lock();
        if let Some(d) = known {
            return d;
        }
        let d = host.dedicated_image_fs().await;
        if d.is_some() {
            *self.dedicated.lock() = d;
        }
        d.unwrap_or(false)
    }

    /// One pass (upstream's synchronize): the pods evicted.
    pub async fn synchronize<H: EvictionHost>(&self, host: &H) -> Vec<Arc<Pod>> {
        self.pass(host).await.unwrap_or_default()
    }

    async fn pass<H: EvictionHost>(&self, host: &H) -> Option<Vec<Arc<Pod>>> {
        let isolation = self.settings.local_storage_capacity_isolation;
        if self.settings.thresholds.is_empty() && !isolation {
            return None;
        }
        let dedicated = self.dedicated_image_fs(host).await;
        let active = host.active_pods();
        let summary = match host.summary().await {
            Ok(s) => s,
            Err(error) => {
                tracing::error!(%error, "Eviction manager: failed to get summary stats");
                return None;
            }
        };
        let observations = observe(&summary);
        // A figure this summary lacks keeps its last value.
        {
            let mut kept = self.node_memory.lock();
            if let Some(node) = memory_figures(summary.node.memory.as_ref()) {
                kept.node = Some(node);
            }
            if let Some(pods) = memory_figures(summary.node.pods_memory()) {
                kept.pods = Some(pods);
            }
        }
        let pass = {
            let mut state = self.state.lock();
            let (next, pass) = step(
                &state,
                &self.settings.thresholds,
                observations.clone(),
                self.clock.now_nanos(),
                self.settings.transition_period,
            );
            *state = next;
            pass
        };
        *self.pressure.write() = pass.pressure.clone();
        let stats: HashMap<String, PodStats> = summary
            .pods
            .into_iter()
            .map(|p| (p.pod_ref.uid.clone(), p))
            .collect();
        if isolation {
            let evicted = self.local_storage_eviction(host, &active, &stats, dedicated);
            if !evicted.is_empty() {
                return Some(evicted);
            }
        }
        let (threshold, resource) = pass.reclaim()?;
        let observed = observations.get(&threshold.signal);
        tracing::info!(
            resource = resource.as_str(),
            signal = threshold.signal.as_str(),
            available = observed.map(|o| o.available),
            capacity = observed.map(|o| o.capacity),
            "Eviction manager: attempting to reclaim"
        );
        host.node_event(
            "EvictionThresholdMet",
            format!("Attempting to reclaim {}", resource.as_str()),
        );
        if has_node_reclaim(threshold.signal, dedicated) && self.reclaimed_on_node(host).await {
            tracing::info!(
                resource = resource.as_str(),
                "Eviction manager: able to reduce resource pressure without evicting pods."
            );
            return None;
        }
        tracing::info!(
            resource = resource.as_str(),
            "Eviction manager: must evict pod(s) to reclaim"
        );
        if active.is_empty() {
            tracing::error!(
                "Eviction manager: eviction thresholds have been met, but no pods are active to evict"
            );
            return None;
        }
        let mut pods = active;
        rank(&mut pods, threshold.signal, &stats, dedicated);
        tracing::info!(pods = ?pods.iter().map(|p| pod_full_name(p)).collect::<Vec<_>>(), "Eviction manager: pods ranked for eviction");
        for pod in pods {
            if is_critical(&pod) {
                tracing::error!(pod = %pod_full_name(&pod), "Eviction manager: cannot evict a critical pod");
                continue;
            }
            let grace = self.grace_period(&threshold, &pod);
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let (message, annotations) =
                eviction_message(resource, &pod, stats.get(&uid), &pass.act_on, &observations);
            tracing::info!(pod = %pod_full_name(&pod), grace, %message, "Eviction manager: evicting pod");
            host.evict(
                &pod,
                Eviction {
                    grace,
                    message,
                    annotations,
                    disruption: true,
                },
            );
            self.metrics.evictions.inc(&[threshold.signal.as_str()]);
            return Some(vec![pod]);
        }
        tracing::info!("Eviction manager: unable to evict any pods from the node");
        None
    }

    /// localStorageEviction: every active pod over one of its own local
    /// storage limits (critical ones excepted), with a 1 s grace.
    fn local_storage_eviction<H: EvictionHost>(
        &self,
        host: &H,
        active: &[Arc<Pod>],
        stats: &HashMap<String, PodStats>,
        dedicated: bool,
    ) -> Vec<Arc<Pod>> {
        let mut evicted = Vec::new();
        for pod in active {
            let uid = pod.metadata.uid.as_deref().unwrap_or("");
            let Some(exceeded) = stats
                .get(uid)
                .and_then(|s| local::exceeded(pod, s, dedicated))
            else {
                continue;
            };
            if is_critical(pod) {
                tracing::error!(pod = %pod_full_name(pod), "Eviction manager: cannot evict a critical pod");
                continue;
            }
            tracing::info!(pod = %pod_full_name(pod), message = %exceeded.message, "Eviction manager: evicting pod over its local storage limit");
            host.evict(
                pod,
                Eviction {
                    grace: IMMEDIATE_EVICTION_GRACE_PERIOD,
                    message: exceeded.message,
                    annotations: BTreeMap::new(),
                    disruption: false,
                },
            );
            self.metrics.evictions.inc(&[exceeded.signal]);
            evicted.push(pod.clone());
        }
        evicted
    }

    /// A hard threshold's pod gets 1 s; a soft one's at most
    /// evictionMaxPodGracePeriod (and no more than its own), and never
    /// under 1 s (upstream's pod worker raises a kill's grace to 1 s).
    fn grace_period(&self, threshold: &Threshold, pod: &Pod) -> i64 {
        if threshold.is_hard() {
            return IMMEDIATE_EVICTION_GRACE_PERIOD;
        }
        let max = self.settings.max_pod_grace_period;
        let grace = match pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
        {
            Some(own) => max.min(own),
            None => max,
        };
        grace.max(IMMEDIATE_EVICTION_GRACE_PERIOD)
    }

    /// reclaimNodeLevelResources: collect, then read the figures again;
    /// true when no threshold is met any more, minimum reclaim included.
    async fn reclaimed_on_node<H: EvictionHost>(&self, host: &H) -> bool {
        host.reclaim_disk().await;
        match host.summary().await {
            Ok(s) => thresholds_met(&self.settings.thresholds, &observe(&s), true).is_empty(),
            Err(error) => {
                tracing::error!(%error, "Eviction manager: failed to get summary stats after resource reclaim");
                false
            }
        }
    }

    /// The memcg notifiers of memory.available's thresholds at the node's
    /// last figures, and of allocatableMemory.available's at the pods'
    /// cgroup's (UpdateThreshold), or none where they cannot be made.
    async fn memcg_notifiers(&self) -> Vec<(String, MemcgNotifier)> {
        let figures = *self.node_memory.lock();
        let wanted: Vec<(String, PathBuf, i64)> = self
            .settings
            .thresholds
            .iter()
            .filter_map(|t| {
                let (cgroup, (usage, working_set, available), allocatable) = match t.signal {
                    Signal::MemoryAvailable => {
                        (self.settings.memcg_root.clone()?, figures.node?, "")
                    }
                    Signal::AllocatableMemoryAvailable => (
                        self.settings.memcg_pods.clone()?,
                        figures.pods?,
                        "allocatable ",
                    ),
                    _ => return None,
                };
                let hard = if t.is_hard() { "hard " } else { "" };
                let at = memcg_threshold(t, usage, working_set, available);
                Some((
                    format!("{hard}{allocatable}memory eviction threshold"),
                    cgroup,
                    at,
                ))
            })
            .collect();
        if wanted.is_empty() {
            return Vec::new();
        }
        let made = blocking(move || {
            Ok(wanted
                .into_iter()
                .filter_map(|(what, cgroup, at)| match MemcgNotifier::register(&cgroup, at) {
                    Ok(n) => {
                        tracing::debug!(notifier = %what, capacity = at, "Eviction manager: setting notifier to capacity");
                        Some((what, n))
                    }
                    Err(error) => {
                        tracing::info!(notifier = %what, %error, "Eviction manager: failed to update notifier");
                        None
                    }
                })
                .collect::<Vec<_>>())
        })
        .await;
        made.unwrap_or_default()
    }

    /// Pass after pass until `cancel`: after an eviction, wait for the pod
    /// to be cleaned up, else for the monitoring interval or a memcg
    /// notification, whichever comes first.
    pub async fn run<H: EvictionHost>(self: Arc<Self>, host: H, cancel: CancellationToken) {
        tracing::info!("Eviction manager: starting control loop");
        let mut notifiers = Vec::new();
        let mut refreshed: Option<tokio::time::Instant> = None;
        loop {
            let evicted = tokio::select! {
                _ = cancel.cancelled() => return,
                e = self.synchronize(&host) => e,
            };
            if self.settings.memcg_root.is_some()
                && refreshed.is_none_or(|at| at.elapsed() >= NOTIFIER_REFRESH_INTERVAL)
            {
                notifiers = self.memcg_notifiers().await;
                refreshed = Some(tokio::time::Instant::now());
            }
            let wait = async {
                if evicted.is_empty() && notifiers.is_empty() {
                    tokio::time::sleep(MONITORING_INTERVAL).await;
                } else if evicted.is_empty() {
                    if let Some(what) = memcg::wait_any(&notifiers, MONITORING_INTERVAL).await {
                        tracing::info!("eviction manager: {what} crossed");
                    }
                } else {
                    wait_for_cleanup(&host, &evicted).await;
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                () = wait => {}
            }
        }
    }
}

/// waitForPodsCleanup: poll every second, for 30 s at most.
async fn wait_for_cleanup<H: EvictionHost>(host: &H, pods: &[Arc<Pod>]) {
    let deadline = tokio::time::Instant::now() + POD_CLEANUP_TIMEOUT;
    let names = || pods.iter().map(|p| pod_full_name(p)).collect::<Vec<_>>();
    loop {
        if pods.iter().all(|p| host.cleaned_up(p)) {
            tracing::info!(pods = ?names(), "Eviction manager: pods successfully cleaned up");
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(pods = ?names(), "Eviction manager: timed out waiting for pods to be cleaned up");
            return;
        }
        tokio::time::sleep(POD_CLEANUP_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_core::stats::{
        ContainerStats, FsStats, MemoryStats, NodeStats, PodReference, VolumeStats,
    };
    use kubelet_core::testing::{PodBuilder, container};
    use std::time::{SystemTime, UNIX_EPOCH};

    const MI: u64 = 1 << 20;

    /// An eviction the fake host was asked for: the pod's name, the grace
    /// period, the message and the event's annotations.
    type Evicted = (String, Eviction);

    /// A host whose node has `available` memory (of 1000Mi) and
    /// `disk_free` bytes of its root file system (of 1000), read at the
    /// clock's time.
    struct FakeHost {
        clock: Clock,
        available: Mutex<u64>,
        /// The pods' cgroup's available memory, when it reports one.
        pods_available: Mutex<Option<u64>>,
        disk_free: Mutex<u64>,
        /// What a disk reclaim frees.
        reclaim_frees: u64,
        pods: Vec<(Arc<Pod>, u64)>,
        evicted: Mutex<Vec<Evicted>>,
        reclaims: Mutex<usize>,
        events: Mutex<Vec<String>>,
        /// Each pod's "scratch" volume holds this many bytes.
        scratch: Mutex<u64>,
    }

    fn pod(name: &str, priority: Option<i32>, static_pod: bool) -> Arc<Pod> {
        let mut p = PodBuilder::new(name)
            .namespace("default")
            .uid(&format!("uid-{name}"))
            .with_spec(|s| {
                s.priority = priority;
                s.termination_grace_period_seconds = Some(60);
            })
            .container(container("c"));
        if static_pod {
            p = p.annotation("kubernetes.io/config.source", "file");
        }
        p.arc()
    }

    impl FakeHost {
        fn new(clock: Clock, pods: Vec<(Arc<Pod>, u64)>) -> Self {
            FakeHost {
                clock,
                available: Mutex::new(900 * MI),
                pods_available: Mutex::default(),
                disk_free: Mutex::new(900),
                reclaim_frees: 0,
                pods,
                evicted: Mutex::default(),
                reclaims: Mutex::default(),
                events: Mutex::default(),
                scratch: Mutex::default(),
            }
        }

        fn now(&self) -> SystemTime {
            UNIX_EPOCH + Duration::from_nanos(self.clock.now_nanos() as u64)
        }

        fn evicted(&self) -> Vec<String> {
            self.evicted.lock().iter().map(|e| e.0.clone()).collect()
        }
    }

    impl EvictionHost for FakeHost {
        async fn summary(&self) -> Result<Summary, StatsError> {
            let time = self.now();
            let available = *self.available.lock();
            let mem = |ws: u64, available: Option<u64>| MemoryStats {
                time,
                available_bytes: available,
                usage_bytes: None,
                working_set_bytes: Some(ws),
                rss_bytes: None,
                page_faults: None,
                major_page_faults: None,
            };
            Ok(Summary {
                node: NodeStats {
                    memory: Some(mem(1000 * MI - available, Some(available))),
                    system_containers: self
                        .pods_available
                        .lock()
                        .map(|a| ContainerStats {
                            name: kubelet_core::stats::SYSTEM_CONTAINER_PODS.into(),
                            memory: Some(mem(800 * MI - a, Some(a))),
                            ..Default::default()
                        })
                        .into_iter()
                        .collect(),
                    fs: Some(FsStats {
                        time,
                        available_bytes: Some(*self.disk_free.lock()),
                        capacity_bytes: Some(1000),
                        used_bytes: None,
                        inodes_free: None,
                        inodes: None,
                        inodes_used: None,
                    }),
                    ..Default::default()
                },
                pods: self
                    .pods
                    .iter()
                    .map(|(p, ws)| PodStats {
                        pod_ref: PodReference {
                            name: p.metadata.name.clone().unwrap(),
                            namespace: "default".into(),
                            uid: p.metadata.uid.clone().unwrap(),
                        },
                        containers: vec![ContainerStats {
                            name: "c".into(),
                            memory: Some(mem(*ws, None)),
                            ..Default::default()
                        }],
                        memory: Some(mem(*ws, None)),
                        volume_stats: vec![VolumeStats {
                            fs: FsStats::part_of(time, None, Some(*self.scratch.lock()), None),
                            name: "scratch".into(),
                            pvc_ref: None,
                            local_ephemeral: true,
                        }],
                        ..Default::default()
                    })
                    .collect(),
            })
        }
        async fn dedicated_image_fs(&self) -> Option<bool> {
            Some(false)
        }
        fn active_pods(&self) -> Vec<Arc<Pod>> {
            let gone = self.evicted();
            self.pods
                .iter()
                .map(|(p, _)| p.clone())
                .filter(|p| !gone.contains(p.metadata.name.as_ref().unwrap()))
                .collect()
        }
        async fn reclaim_disk(&self) {
            *self.reclaims.lock() += 1;
            *self.disk_free.lock() += self.reclaim_frees;
        }
        fn evict(&self, pod: &Arc<Pod>, eviction: Eviction) {
            self.evicted
                .lock()
                .push((pod.metadata.name.clone().unwrap(), eviction));
        }
        fn cleaned_up(&self, _: &Pod) -> bool {
            true
        }
        fn node_event(&self, reason: &str, message: String) {
            self.events.lock().push(format!("{reason}: {message}"));
        }
    }

    fn manager(
        max_grace: i64,
        clock: Clock,
        hard: &[(&str, &str)],
        soft: &[(&str, &str, &str)],
    ) -> EvictionManager {
        manager_enforcing(max_grace, clock, hard, soft, &[])
    }

    /// [`manager`] with these enforceNodeAllocatable keys.
    fn manager_enforcing(
        max_grace: i64,
        clock: Clock,
        hard: &[(&str, &str)],
        soft: &[(&str, &str, &str)],
        enforce: &[String],
    ) -> EvictionManager {
        let map = |pairs: Vec<(String, String)>| pairs.into_iter().collect::<BTreeMap<_, _>>();
        let hard = map(hard
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect());
        let soft_map = map(soft
            .iter()
            .map(|(k, v, _)| (k.to_string(), v.to_string()))
            .collect());
        let grace = map(soft
            .iter()
            .map(|(k, _, g)| (k.to_string(), g.to_string()))
            .collect());
        let none = BTreeMap::new();
        let thresholds =
            kubelet_core::eviction::parse_threshold_config(kubelet_core::eviction::Statements {
                hard: &hard,
                soft: &soft_map,
                soft_grace_period: &grace,
                minimum_reclaim: &none,
                enforce_pods: enforce.iter().any(|k| k == "pods"),
            })
            .unwrap();
        EvictionManager::new(
            Settings {
                thresholds,
                transition_period: Duration::from_secs(300),
                max_pod_grace_period: max_grace,
                local_storage_capacity_isolation: true,
                memcg_root: None,
                memcg_pods: None,
            },
            KubeletMetrics::new("node"),
            clock,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn memory_pressure_evicts_the_first_ranked_pod_and_never_a_critical_one() {
        let clock = Clock::following_tokio();
        let host = FakeHost::new(
            clock,
            vec![
                (pod("critical-hog", None, true), 800 * MI),
                (pod("small", None, false), 10 * MI),
                (pod("hog", None, false), 500 * MI),
                (pod("important-hog", Some(100), false), 600 * MI),
            ],
        );
        let m = manager(30, clock, &[("memory.available", "100Mi")], &[]);
        assert!(m.synchronize(&host).await.is_empty());
        assert!(m.pressure().is_empty());
        *host.available.lock() = 50 * MI;
        tokio::time::advance(Duration::from_secs(10)).await;
        let evicted = m.synchronize(&host).await.pop().expect("a pod evicted");
        assert_eq!(evicted.metadata.name.as_deref(), Some("hog"));
        assert_eq!(m.pressure(), vec![Pressure::Memory]);
        let (
            name,
            Eviction {
                grace,
                message,
                annotations,
                disruption,
            },
        ) = host.evicted.lock()[0].clone();
        assert_eq!((name.as_str(), grace, disruption), ("hog", 1, true));
        assert_eq!(
            message,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container c was using 500Mi, request is 0, has larger consumption of memory. "
        );
        assert_eq!(annotations["starved_resource"], "memory");
        assert_eq!(
            host.events.lock().as_slice(),
            ["EvictionThresholdMet: Attempting to reclaim memory"]
        );
        assert!(
            m.metrics
                .render()
                .contains("kubelet_evictions{eviction_signal=\"memory.available\"} 1"),
        );
        // Next pass, same pressure: the next one (the static pod is critical).
        tokio::time::advance(Duration::from_secs(10)).await;
        let evicted = m
            .synchronize(&host)
            .await
            .pop()
            .expect("a second pod evicted");
        assert_eq!(evicted.metadata.name.as_deref(), Some("small"));
        tokio::time::advance(Duration::from_secs(10)).await;
        let evicted = m
            .synchronize(&host)
            .await
            .pop()
            .expect("a third pod evicted");
        assert_eq!(evicted.metadata.name.as_deref(), Some("important-hog"));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            m.synchronize(&host).await.is_empty(),
            "the critical pod stays"
        );
        // Recovered: the condition outlasts it by the transition period.
        *host.available.lock() = 900 * MI;
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(m.synchronize(&host).await.is_empty());
        assert_eq!(m.pressure(), vec![Pressure::Memory]);
        tokio::time::advance(Duration::from_secs(300)).await;
        m.synchronize(&host).await;
        assert!(m.pressure().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_pods_cgroup_short_of_memory_evicts_with_allocatable_memory_available() {
        let clock = Clock::following_tokio();
        let host = FakeHost::new(
            clock,
            vec![
                (pod("small", None, false), 10 * MI),
                (pod("hog", None, false), 500 * MI),
            ],
        );
        let m = manager_enforcing(
            30,
            clock,
            &[("memory.available", "100Mi")],
            &[],
            &["pods".to_owned()],
        );
        *host.pods_available.lock() = Some(300 * MI);
        assert!(m.synchronize(&host).await.is_empty());
        // The node has memory to spare (900Mi); the pods' cgroup does not.
        *host.pods_available.lock() = Some(50 * MI);
        tokio::time::advance(Duration::from_secs(10)).await;
        let evicted = m.synchronize(&host).await.pop().expect("a pod evicted");
        assert_eq!(evicted.metadata.name.as_deref(), Some("hog"));
        assert_eq!(m.pressure(), vec![Pressure::Memory]);
        let message = host.evicted.lock()[0].1.message.clone();
        assert!(
            message.starts_with(
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
            ),
            "{message}"
        );
        // Without `pods` enforced there is no such threshold.
        let host = FakeHost::new(clock, vec![(pod("hog", None, false), 500 * MI)]);
        *host.pods_available.lock() = Some(50 * MI);
        let m = manager(30, clock, &[("memory.available", "100Mi")], &[]);
        assert!(m.synchronize(&host).await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn disk_pressure_reclaims_on_the_node_before_evicting() {
        let clock = Clock::following_tokio();
        let mut host = FakeHost::new(clock, vec![(pod("p", None, false), MI)]);
        host.reclaim_frees = 100;
        *host.disk_free.lock() = 50;
        let m = manager(30, clock, &[("nodefs.available", "10%")], &[]);
        assert!(m.synchronize(&host).await.is_empty(), "reclaim was enough");
        assert_eq!(*host.reclaims.lock(), 1);
        assert_eq!(m.pressure(), vec![Pressure::Disk]);
        // Reclaim not enough: a pod goes.
        host.reclaim_frees = 0;
        *host.disk_free.lock() = 50;
        tokio::time::advance(Duration::from_secs(10)).await;
        let evicted = m.synchronize(&host).await.pop().expect("a pod evicted");
        assert_eq!(evicted.metadata.name.as_deref(), Some("p"));
        assert_eq!(*host.reclaims.lock(), 2);
        assert!(host.evicted.lock()[0].1.message.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 100, available: 50. "
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_soft_threshold_evicts_after_its_grace_period_with_the_capped_grace() {
        let clock = Clock::following_tokio();
        let host = FakeHost::new(clock, vec![(pod("p", None, false), 500 * MI)]);
        *host.available.lock() = 150 * MI;
        let m = manager(30, clock, &[], &[("memory.available", "200Mi", "30s")]);
        for _ in 0..3 {
            assert!(m.synchronize(&host).await.is_empty());
            assert_eq!(m.pressure(), vec![Pressure::Memory]);
            tokio::time::advance(Duration::from_secs(10)).await;
        }
        assert!(!m.synchronize(&host).await.is_empty(), "30 s later");
        // min(evictionMaxPodGracePeriod 30, the pod's 60).
        assert_eq!(host.evicted.lock()[0].1.grace, 30);
        // evictionMaxPodGracePeriod 0 (the default): 1 s, as upstream's pod
        // worker makes it.
        let host = FakeHost::new(clock, vec![(pod("p", None, false), 500 * MI)]);
        *host.available.lock() = 150 * MI;
        let m = manager(0, clock, &[], &[("memory.available", "200Mi", "10s")]);
        assert!(m.synchronize(&host).await.is_empty());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(m.synchronize(&host).await.len(), 1);
        assert_eq!(host.evicted.lock()[0].1.grace, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_over_its_empty_dir_size_limit_is_evicted_without_pressure() {
        use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Volume};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let clock = Clock::following_tokio();
        let mut limited = (*pod("limited", None, false)).clone();
        limited.spec.as_mut().unwrap().volumes = Some(vec![Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("1Mi".into())),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        let host = FakeHost::new(
            clock,
            vec![(Arc::new(limited), MI), (pod("free", None, false), MI)],
        );
        let m = manager(30, clock, &[("memory.available", "100Mi")], &[]);
        *host.scratch.lock() = 1 << 20;
        assert!(m.synchronize(&host).await.is_empty(), "at its limit");
        *host.scratch.lock() = (1 << 20) + 1;
        let evicted = m.synchronize(&host).await;
        assert_eq!(evicted.len(), 1);
        let (name, e) = host.evicted.lock()[0].clone();
        assert_eq!(name, "limited");
        assert_eq!(
            e,
            Eviction {
                grace: 1,
                message: "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ".into(),
                annotations: BTreeMap::new(),
                disruption: false,
            }
        );
        assert!(m.pressure().is_empty(), "no node pressure");
        assert!(
            m.metrics
                .render()
                .contains("kubelet_evictions{eviction_signal=\"emptydirfs.limit\"} 1")
        );
    }
}
