//! The phased boot (upstream's Run): local servers, pod sources and the
//! API modules at once; what needs the runtime once it answers healthy;
//! then the sync loop until cancelled.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::node::v1::RuntimeClass;
use kubelet_api::node::watch_node;
use kubelet_api::objects::watch_all;
use kubelet_core::backoff::Backoff;
use kubelet_core::nodestatus::runtime_version;
use kubelet_core::pleg::PodLifecycleEvent;
use kubelet_core::types::{PodUpdate, SOURCE_API, SOURCE_FILE, SOURCE_HTTP};
use kubelet_server::listener::Listener;
use kubelet_server::{NodeView, listener};
use kubelet_tasks::Tasks;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::views::{EvictionView, ShutdownView};
use super::{CONTAINER_GC_PERIOD, Kubelet, KubeletError, RUNTIME_STATUS_PERIOD, Receivers};
use crate::config::file::FileSource;
use crate::config::mux::new_mux;
use crate::config::{SourceSnapshot, SourcesReady};
use crate::imagegc::IMAGE_GC_PERIOD;
use crate::logs::{ContainerLogManager, LogPolicy};
use crate::nodestatus::NodeStatusController;
use crate::runtime_state::RuntimeState;
use crate::server::Health;
use crate::status_sync::StatusSync;
use crate::sync::Syncer;
use crate::{oomwatcher, server};

impl Kubelet {
    /// [`super::Boot::run`].
    pub(super) async fn run(self: Arc<Self>, receivers: Receivers) -> Result<(), KubeletError> {
        let cancel = self.tasks.token().clone();
        // Phase 1: what needs no runtime: local servers, pod sources, mux.
        if let Err(e) = self.start_servers().await {
            self.tasks.shutdown().await;
            return Err(e);
        }
        if let Err(e) = self.check_reservation() {
            self.tasks.shutdown().await;
            return Err(KubeletError::ContainerManager(e));
        }
        if let Err(e) = self.syncer.cm.start(Vec::new()).await {
            self.tasks.shutdown().await;
            return Err(KubeletError::ContainerManager(e));
        }
        // The topology manager first, as upstream makes it before the
        // CPU and memory managers.
        let topology = self.topology.clone();
        let cpus = self.syncer.runtime.cpus().clone();
        let memory = self.syncer.runtime.memory().clone();
        let dra = self.syncer.runtime.dra().clone();
        let started = kubelet_tasks::off_thread(move || {
            topology
                .start()
                .and_then(|()| cpus.start())
                .and_then(|()| memory.start())
                .and_then(|()| dra.start())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        if let Err(e) = started {
            self.tasks.shutdown().await;
            return Err(KubeletError::ContainerManager(crate::cm::CmError::Config(
                e,
            )));
        }
        let userns = self.syncer.runtime.userns().clone();
        let started = kubelet_tasks::off_thread(move || userns.start())
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        if let Err(e) = started {
            self.tasks.shutdown().await;
            return Err(KubeletError::UserNamespaces(e));
        }
        let system = self.system_containers.clone();
        self.tasks
            .spawn(tracing::info_span!("system_containers"), move |token| {
                system.run(token)
            });
        if self.syncer.cm.enabled() {
            let syncer = self.syncer.clone();
            self.tasks
                .spawn(tracing::info_span!("qos_cgroups"), move |token| {
                    update_qos_every(syncer, token)
                });
        }
        let (updates_tx, updates_rx) = mpsc::channel::<PodUpdate>(64);
        let sources_ready = self.start_sources(updates_tx);
        self.syncer
            .runtime
            .cpus()
            .watch_sources(sources_ready.clone());
        self.syncer
            .runtime
            .memory()
            .watch_sources(sources_ready.clone());
        self.syncer
            .runtime
            .dra()
            .watch_sources(sources_ready.clone());
        self.start_api_modules(receivers.events);
        self.notify_systemd();
        let events = self.events.clone();
        self.tasks
            .spawn(tracing::info_span!("oom_watcher"), move |token| {
                oomwatcher::watch(events, token)
            });
        // Phase 2: runtime-dependent modules start once the runtime answers.
        let (pleg_tx, pleg_rx) = mpsc::channel(64);
        let me = self.clone();
        self.tasks
            .spawn(tracing::info_span!("runtime_up"), move |token| {
                me.runtime_up(pleg_tx, token)
            });

        self.sync_loop(updates_rx, pleg_rx, receivers.probes, sources_ready, cancel)
            .await;
        tracing::info!("stopping: pods keep running");
        self.tasks.shutdown().await;
        Ok(())
    }

    /// Tell systemd the kubelet runs (upstream's READY=1 once its servers
    /// are up), and keep its watchdog fed if it asked for one.
    fn notify_systemd(self: &Arc<Self>) {
        let systemd = self.opts.systemd.clone();
        match systemd.notify(kubelet_core::systemd::READY) {
            Ok(sent) => tracing::debug!(sent, "systemd READY=1"),
            Err(e) => tracing::warn!(error = %e, "notifying systemd of READY=1"),
        }
        if systemd.watchdog.is_some() {
            let health: Arc<dyn Health> = self.clone();
            self.tasks
                .spawn(tracing::info_span!("systemd_watchdog"), move |token| {
                    systemd.run_watchdog(health, token)
                });
        }
    }

    async fn start_servers(self: &Arc<Self>) -> Result<(), KubeletError> {
        let cfg = &self.opts.config;
        let (socket, listener) =
            crate::podresources::listen(&self.opts.root_dir).map_err(|e| KubeletError::Listen {
                what: "podresources",
                addr: self
                    .opts
                    .root_dir
                    .join(crate::podresources::DIR)
                    .display()
                    .to_string(),
                source: e,
            })?;
        tracing::info!(endpoint = %socket.display(), "Starting to serve the podresources API");
        let server = crate::podresources::PodResourcesServer::new(
            self.clone(),
            crate::podresources::Managers {
                devices: self.syncer.runtime.devices().clone(),
                cpus: self.syncer.runtime.cpus().clone(),
                memory: self.syncer.runtime.memory().clone(),
                dra: self.syncer.runtime.dra().clone(),
            },
            self.opts.metrics.clone(),
        );
        self.tasks.spawn(
            tracing::info_span!("server", what = "podresources"),
            move |token| crate::podresources::serve(listener, server, token),
        );
        let devices = self.syncer.runtime.devices().clone();
        let listener =
            crate::devicemanager::listen(devices.dir()).map_err(|e| KubeletError::Listen {
                what: "device-plugins",
                addr: devices
                    .dir()
                    .join(crate::devicemanager::SOCKET)
                    .display()
                    .to_string(),
                source: e,
            })?;
        let tasks = self.tasks.clone();
        self.tasks.spawn(
            tracing::info_span!("server", what = "device-plugins"),
            move |token| crate::devicemanager::serve(listener, devices, tasks, token),
        );
        if cfg.healthz_port != 0 {
            let addr = format!("{}:{}", cfg.healthz_bind_address, cfg.healthz_port);
            let listener = self.listen("healthz", addr).await?;
            let health: Arc<dyn Health> = self.clone();
            let tasks = self.tasks.clone();
            self.tasks.spawn(
                tracing::info_span!("server", what = "healthz"),
                move |token| server::serve(listener, health, tasks, token),
            );
        }
        if cfg.read_only_port != 0 {
            let addr = format!("{}:{}", cfg.address, cfg.read_only_port);
            let listener = self.listen("readonly", addr).await?;
            let tasks = self.tasks.clone();
            let token = self.tasks.child_token();
            let router = Arc::new(
                self.router(tasks.clone(), token.clone())
                    .with_scope(kubelet_server::routes::Scope::ReadOnly),
            );
            self.tasks.spawn_with(
                tracing::info_span!("server", what = "readonly"),
                kubelet_server::server::serve_read_only(listener, router, tasks, token),
            );
        }
        if cfg.port != 0 && cfg.enable_server {
            self.start_kubelet_api().await?;
        }
        Ok(())
    }

    /// The kubelet API's handlers over this kubelet.
    fn router(
        self: &Arc<Self>,
        tasks: Tasks,
        token: CancellationToken,
    ) -> kubelet_server::routes::Router {
        let view: Arc<dyn NodeView> = self.clone();
        kubelet_server::routes::Router::new(
            view,
            kubelet_server::routes::Settings::from_config(&self.opts.config),
            tasks,
            token,
        )
    }

    /// Bind `addr` for the server `what`, and record where it listens. Every
    /// server listens through this: the cap on connections (for the file-handle
    /// limit now in force), the timeouts and limits are those of
    /// [`kubelet_server::listener`].
    pub(super) async fn listen(
        &self,
        what: &'static str,
        addr: String,
    ) -> Result<Listener, KubeletError> {
        let cap = listener::default_connection_cap();
        let listener = Listener::bind(&addr, what, cap, self.opts.metrics.clone())
            .await
            .map_err(|source| KubeletError::Listen { what, addr, source })?;
        if let Ok(local) = listener.local_addr() {
            self.bound.lock().insert(what, local);
            tracing::info!(%local, what, max_connections = cap, "listening");
        }
        Ok(listener)
    }

    /// The kubelet API on address:port (HTTPS, authenticated and authorized).
    async fn start_kubelet_api(self: &Arc<Self>) -> Result<(), KubeletError> {
        use kubelet_server::{auth, server, tls};
        let cfg = &self.opts.config;
        let addr = format!("{}:{}", cfg.address, cfg.port);
        let identity = tls::SelfSignedIdentity {
            node_name: self.opts.node_name.clone(),
            node_ips: self
                .opts
                .registration
                .as_ref()
                .map(|r| r.node_ips.iter().filter_map(|ip| ip.parse().ok()).collect())
                .unwrap_or_default(),
        };
        let serving = Arc::new(tls::ServingCertificate::default());
        if let Some(cert) = tls::initial_certificate(cfg, &self.opts.cert_dir, &identity)
            .map_err(KubeletError::Tls)?
        {
            serving.set(cert).map_err(KubeletError::Tls)?;
        }
        let client_ca = tls::ClientCa::from_config(cfg).map_err(KubeletError::Tls)?;
        let tls = tls::server_config(cfg, serving.clone(), client_ca.clone())
            .map_err(KubeletError::Tls)?;
        self.keep_serving_certificate(serving)?;
        if let (Some(ca), Some(path), true) = (
            client_ca,
            cfg.authentication.x509.client_ca_file.clone(),
            cfg.feature_enabled("ReloadKubeletClientCAFile"),
        ) {
            self.tasks
                .spawn(tracing::info_span!("client_ca_file"), move |token| {
                    crate::certificate::serving::reload_client_ca(path, ca, token)
                });
        }
        let reviewer: Arc<dyn auth::Reviewer> = match &self.api {
            Some(api) => Arc::new(auth::KubeReviewer::new(api.clone())),
            None => Arc::new(auth::NoApiServer),
        };
        let auth = Arc::new(auth::Auth::new(&self.opts.node_name, cfg, reviewer));
        let listener = self.listen("kubelet-api", addr).await?;
        let tasks = self.tasks.clone();
        let token = self.tasks.child_token();
        let router = Arc::new(self.router(tasks.clone(), token.clone()));
        self.tasks.spawn_with(
            tracing::info_span!("kubelet_api"),
            server::serve(listener, tls, router, auth, tasks, token),
        );
        Ok(())
    }

    /// Keep the kubelet API's certificate current: from CSRs with
    /// serverTLSBootstrap, else from tlsCertFile/tlsPrivateKeyFile when they
    /// change.
    fn keep_serving_certificate(
        self: &Arc<Self>,
        serving: Arc<kubelet_server::tls::ServingCertificate>,
    ) -> Result<(), KubeletError> {
        use crate::certificate::serving::{reload_files, serving_manager};
        let cfg = &self.opts.config;
        let files = cfg
            .tls_cert_file
            .clone()
            .zip(cfg.tls_private_key_file.clone());
        if cfg.server_tls_bootstrap {
            let Some(api) = &self.api else {
                tracing::warn!(
                    "serverTLSBootstrap needs an API server: the kubelet API has no certificate"
                );
                return Ok(());
            };
            let node_ips = self
                .opts
                .registration
                .as_ref()
                .map(|r| r.node_ips.clone())
                .unwrap_or_default();
            let manager = serving_manager(
                api.clone(),
                &self.opts.node_name,
                &node_ips,
                &self.opts.cert_dir,
                files,
                serving,
                self.opts.clock,
                self.opts.metrics.clone(),
            )
            .map_err(KubeletError::ServingCertificate)?;
            self.tasks.spawn(
                tracing::info_span!("serving_certificate"),
                move |token| async move {
                    let _ = manager.run(token).await;
                },
            );
        } else if let Some((cert, key)) = files
            && cfg.feature_enabled("ReloadKubeletServerCertificateFile")
        {
            self.tasks.spawn(
                tracing::info_span!("serving_certificate_files"),
                move |token| reload_files(cert, key, serving, token),
            );
        }
        Ok(())
    }

    fn start_sources(self: &Arc<Self>, updates_tx: mpsc::Sender<PodUpdate>) -> SourcesReady {
        let cfg = &self.opts.config;
        let mut sources: Vec<&'static str> = Vec::new();
        if cfg.static_pod_path.is_some() {
            sources.push(SOURCE_FILE);
        }
        if !cfg.static_pod_url.is_empty() {
            sources.push(SOURCE_HTTP);
        }
        if self.api.is_some() {
            sources.push(SOURCE_API);
        }
        let (mux, ready) = new_mux(&sources, self.opts.clock);
        let (snap_tx, snap_rx) = mpsc::channel::<SourceSnapshot>(16);
        if let Some(api) = &self.api {
            let (api, node, tx) = (api.clone(), self.opts.node_name.clone(), snap_tx.clone());
            self.tasks
                .spawn(tracing::info_span!("source", kind = "api"), move |token| {
                    kubelet_api::pods::watch_node_pods(api, node, tx, token)
                });
        }
        if !cfg.static_pod_url.is_empty() {
            let source = crate::config::http::HttpSource {
                url: cfg.static_pod_url.clone(),
                header: cfg.static_pod_url_header.clone(),
                node_name: self.opts.node_name.clone(),
                check_every: cfg.http_check_frequency,
                roots: crate::config::http::system_roots(),
            };
            let tx = snap_tx.clone();
            self.tasks
                .spawn(tracing::info_span!("source", kind = "http"), move |token| {
                    source.run(tx, token)
                });
        }
        if let Some(dir) = &cfg.static_pod_path {
            let source = FileSource {
                dir: dir.clone(),
                node_name: self.opts.node_name.clone(),
                check_every: cfg.file_check_frequency,
                clock: self.opts.clock,
            };
            self.tasks
                .spawn(tracing::info_span!("source", kind = "file"), move |token| {
                    source.run(snap_tx, token)
                });
        }
        self.tasks
            .spawn(tracing::info_span!("config_mux"), move |token| {
                mux.run(snap_rx, updates_tx, token)
            });
        ready
    }

    /// With an API server: node registration, status and lease, and the
    /// status manager's API sync. None of them needs the runtime to start.
    fn start_api_modules(
        self: &Arc<Self>,
        events: Option<mpsc::Receiver<k8s_openapi::api::core::v1::Event>>,
    ) {
        let (Some(api), Some(reg)) = (&self.api, &self.opts.registration) else {
            return;
        };
        let in_use = self.syncer.volumes.volumes_in_use();
        let controller = NodeStatusController {
            api: api.clone(),
            cri: self.syncer.runtime.cri().clone(),
            runtime_state: self.runtime_state.clone(),
            runtime_version: self.runtime_version.clone(),
            root_dir: self.opts.root_dir.clone(),
            node_memory: self.opts.node_memory,
            node_swap: self.opts.node_swap,
            hugepages: self.opts.hugepages.clone(),
            node_cpu_cores: self.opts.node_cpu_cores,
            reserved: self.reserved.clone(),
            eviction_hard: self.eviction_hard.clone(),
            reg: reg.clone(),
            clock: self.opts.clock,
            node_uid: self.node_uid.clone(),
            events: self.events.clone(),
            eviction: self.eviction.clone(),
            shutdown: self.shutdown.clone(),
            status_now: self.node_status_now.clone(),
            volumes_in_use: Arc::new(move || in_use.names()),
            devices: self.syncer.runtime.devices().clone(),
        };
        self.tasks
            .spawn(tracing::info_span!("node_status"), move |token| {
                controller.run(token)
            });
        let (api_node, name, tx) = (api.clone(), reg.node_name.clone(), self.node.clone());
        self.tasks
            .spawn(tracing::info_span!("node_watch"), move |token| {
                watch_node(api_node, name, tx, token)
            });
        let (api_services, tx) = (api.clone(), self.services.clone());
        self.tasks.spawn(
            tracing::info_span!("service_watch"),
            move |token| async move {
                watch_all::<Service>(&api_services, "Services", None, tx, token).await
            },
        );
        let (api_classes, tx) = (api.clone(), self.runtime_classes.clone());
        self.tasks.spawn(
            tracing::info_span!("runtime_class_watch"),
            move |token| async move {
                watch_all::<RuntimeClass>(&api_classes, "RuntimeClasses", None, tx, token).await
            },
        );
        let status_sync = StatusSync {
            api: api.clone(),
            pod_manager: self.pod_manager.clone(),
            status: self.status.clone(),
            node_name: self.opts.node_name.clone(),
            node_uid: self.node_uid.clone(),
            metrics: self.opts.metrics.clone(),
            events: self.events.clone(),
            statics: self.clone(),
        };
        self.tasks
            .spawn(tracing::info_span!("status_sync"), move |token| {
                status_sync.run(token)
            });
        if let Some(rx) = events {
            let cfg = &self.opts.config;
            let api = api.with_limits(cfg.event_record_qps, cfg.event_burst);
            let clock = self.opts.clock;
            self.tasks
                .spawn(tracing::info_span!("events"), move |token| {
                    crate::events::run_event_writer(api, rx, clock, token)
                });
        }
    }

    /// Read the runtime's Version and Status until it answers healthy, then
    /// start what depends on it (PLEG); keep reading Status afterwards.
    async fn runtime_up(
        self: Arc<Self>,
        pleg_tx: mpsc::Sender<Vec<PodLifecycleEvent>>,
        cancel: CancellationToken,
    ) {
        let cri = self.syncer.runtime.cri().clone();
        let mut backoff = Backoff::new(Duration::from_millis(200), RUNTIME_STATUS_PERIOD);
        let mut pleg_tx = Some(pleg_tx);
        loop {
            let checked = async {
                if pleg_tx.is_some() {
                    let v = cri.version().await?;
                    tracing::info!(runtime = %v.runtime_name, version = %v.runtime_version, "container runtime answers");
                    *self.runtime_version.write() =
                        format!("{}://{}", v.runtime_name, runtime_version(&v.runtime_version));
                    *self.syncer.runtime_name.write() = v.runtime_name;
                }
                cri.status().await
            }
            .await;
            let delay = match checked {
                Ok(s) => {
                    let problems = s.problems.join("; ");
                    let runtime_err = (!s.runtime_ready)
                        .then(|| format!("container runtime not ready: {problems}"));
                    let network_err = (!s.network_ready)
                        .then(|| format!("container runtime network not ready: {problems}"));
                    let m = &self.opts.metrics;
                    m.runtime_ready
                        .set(&[], f64::from(u8::from(runtime_err.is_none())));
                    m.network_ready
                        .set(&[], f64::from(u8::from(network_err.is_none())));
                    self.runtime_state
                        .set_status(runtime_err.clone(), network_err);
                    self.runtime_state.set_handlers(s.handlers, s.features);
                    if runtime_err.is_none() {
                        if let Some(tx) = pleg_tx.take() {
                            self.initialize_runtime_dependent_modules(tx);
                        }
                        backoff.reset();
                        RUNTIME_STATUS_PERIOD
                    } else {
                        backoff.next_delay()
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "container runtime check failed");
                    self.opts.metrics.runtime_ready.set(&[], 0.0);
                    self.runtime_state.set_unreachable(e.to_string());
                    backoff.next_delay()
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// PLEG's periodic relist, its health check, and with the EventedPLEG
    /// gate the reader of the runtime's event stream.
    fn start_pleg(&self, pleg_tx: mpsc::Sender<Vec<PodLifecycleEvent>>) {
        tracing::info!("runtime is healthy: starting PLEG");
        let pleg = self.pleg.clone();
        let started = self.started;
        self.runtime_state
            .add_health_check("pleg", Arc::new(move || pleg.healthy(started)));
        let pleg = self.pleg.clone();
        self.tasks.spawn(tracing::info_span!("pleg"), move |token| {
            pleg.run(pleg_tx, token)
        });
        if self.opts.config.feature_enabled("EventedPLEG") {
            let evented = crate::pleg::EventedPleg {
                cri: self.syncer.runtime.cri().clone(),
                pleg: self.pleg.clone(),
                metrics: self.opts.metrics.clone(),
                clock: self.opts.clock,
            };
            self.tasks
                .spawn(tracing::info_span!("evented_pleg"), move |token| {
                    evented.run(token)
                });
        }
    }

    /// The DRA manager's loop: the node's ResourceSlices deleted at start,
    /// claims of inactive pods unprepared.
    fn start_dra(self: &Arc<Self>) {
        let (dra, me) = (self.syncer.runtime.dra().clone(), self.clone());
        self.tasks
            .spawn(tracing::info_span!("dra_manager"), move |token| {
                dra.run(move || me.active_pods(), token)
            });
    }

    fn initialize_runtime_dependent_modules(
        self: &Arc<Self>,
        pleg_tx: mpsc::Sender<Vec<PodLifecycleEvent>>,
    ) {
        self.start_pleg(pleg_tx);
        // The plugin manager (in cluster mode: CSI drivers need the API).
        if let Some(api) = &self.api {
            let manager = crate::pluginmanager::PluginManager {
                dir: self
                    .opts
                    .root_dir
                    .join(crate::pluginmanager::PLUGINS_REGISTRY),
                csi: self.csi_drivers.clone(),
                node_info: crate::volumes::csi::nodeinfo::NodeInfo {
                    api: api.clone(),
                    node_name: self.opts.node_name.clone(),
                },
                devices: self.syncer.runtime.devices().clone(),
                dra: self.syncer.runtime.dra().clone(),
                tasks: self.tasks.clone(),
            };
            let csi = self.syncer.volumes.csi_volumes().cloned();
            self.tasks.spawn(
                tracing::info_span!("plugin_manager"),
                move |token| async move {
                    if let Some(csi) = csi {
                        csi.reconstruct_in_use().await;
                    }
                    manager.run(token).await
                },
            );
        }
        self.start_dra();
        let cpus = self.syncer.runtime.cpus().clone();
        if cpus.is_static() {
            let (cri, me) = (self.syncer.runtime.cri().clone(), self.clone());
            let period = self.opts.config.cpu_manager_reconcile_period;
            self.tasks
                .spawn(tracing::info_span!("cpu_manager"), move |token| {
                    cpus.run(cri, move || me.active_pods(), period, token)
                });
        }
        let allocation = self.syncer.allocation.clone();
        self.tasks.spawn(
            tracing::info_span!("allocation_checkpoints"),
            move |token| allocation.write_checkpoints(token),
        );
        let (runtime, state) = (self.syncer.runtime.clone(), self.runtime_state.clone());
        self.tasks
            .spawn(tracing::info_span!("container_gc"), move |token| {
                collect_every(
                    "dead containers",
                    CONTAINER_GC_PERIOD,
                    state,
                    token,
                    move || {
                        let runtime = runtime.clone();
                        async move { runtime.garbage_collect(&HashSet::new()).await }
                    },
                )
            });
        if self.image_gc_periodic {
            let gc = self.image_gc.clone();
            let state = self.runtime_state.clone();
            self.tasks
                .spawn(tracing::info_span!("image_gc"), move |token| {
                    collect_every("images", IMAGE_GC_PERIOD, state, token, move || {
                        let gc = gc.clone();
                        async move { gc.collect().await }
                    })
                });
        }
        let cfg = &self.opts.config;
        // The configuration's validation refuses a size that does not parse
        // first; a negative one turns rotation off, as upstream's.
        if let Ok(Some(max_size)) = cfg.container_log_max_bytes() {
            let logs = ContainerLogManager::new(
                self.syncer.runtime.cri().clone(),
                LogPolicy {
                    max_size,
                    max_files: usize::try_from(cfg.container_log_max_files).unwrap_or(5),
                    workers: usize::try_from(cfg.container_log_max_workers).unwrap_or(1),
                    interval: cfg.container_log_monitor_interval,
                },
                cfg.pod_logs_dir.clone(),
                self.events.clone(),
                self.opts.clock,
            );
            self.tasks
                .spawn(tracing::info_span!("container_log_manager"), move |token| {
                    logs.run(token)
                });
        }
        let (eviction, host) = (self.eviction.clone(), EvictionView(self.clone()));
        self.tasks
            .spawn(tracing::info_span!("eviction_manager"), move |token| {
                eviction.run(host, token)
            });
        let (cri, configured) = (
            self.syncer.runtime.cri().clone(),
            self.opts.config.pod_cidr.clone(),
        );
        let node = self.api.is_some().then(|| self.node.subscribe());
        self.tasks
            .spawn(tracing::info_span!("pod_cidr"), move |token| {
                keep_pod_cidr(cri, configured, node, token)
            });
        if self.shutdown.enabled() {
            let (shutdown, host) = (self.shutdown.clone(), ShutdownView(self.clone()));
            self.tasks
                .spawn(tracing::info_span!("node_shutdown"), move |token| {
                    shutdown.run(Arc::new(host), token)
                });
        }
        let runtime = self.syncer.runtime.clone();
        self.tasks.spawn(
            tracing::info_span!("image_pull_records"),
            move |token| async move {
                tokio::select! {
                    _ = token.cancelled() => {}
                    () = runtime.adopt_left_pulls() => {}
                }
            },
        );
    }
}

/// Run `collect` every `period` while the runtime is healthy (upstream's
/// first run also waits a period): the container and image collectors;
/// `what` names what they remove.
async fn collect_every<F, Fut, E>(
    what: &'static str,
    period: Duration,
    state: RuntimeState,
    cancel: CancellationToken,
    mut collect: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize, E>>,
    E: std::fmt::Display,
{
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !state.runtime_errors().is_empty() {
            continue;
        }
        match collect().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "garbage collected {what}"),
            Err(e) => tracing::warn!(error = %e, "garbage collection of {what}"),
        }
    }
}

/// How often a pod CIDR the runtime refused is given again.
const POD_CIDR_RETRY: Duration = Duration::from_secs(10);

/// Upstream's updatePodCIDR: the runtime is given the pod CIDR of the
/// configuration (podCIDR), then, in cluster mode, the Node's
/// `spec.podCIDRs` (comma-separated) whenever they are set and differ from
/// what it has; a refusal is logged and tried again.
async fn keep_pod_cidr(
    cri: kubelet_cri::client::CriClient,
    configured: String,
    mut node: Option<tokio::sync::watch::Receiver<Option<Arc<k8s_openapi::api::core::v1::Node>>>>,
    cancel: CancellationToken,
) {
    let mut applied = String::new();
    let mut wanted = configured;
    loop {
        if let Some(rx) = &node {
            let from_node = rx
                .borrow()
                .as_ref()
                .and_then(|n| n.spec.as_ref())
                .and_then(|s| s.pod_cidrs.clone())
                .filter(|c| !c.is_empty())
                .map(|c| c.join(","));
            if let Some(cidrs) = from_node {
                wanted = cidrs;
            }
        }
        let mut failed = false;
        if wanted != applied {
            match cri.update_pod_cidr(&wanted).await {
                Ok(()) => {
                    tracing::info!(original = %applied, new = %wanted, "Updating Pod CIDR");
                    applied = wanted.clone();
                }
                Err(e) => {
                    tracing::error!(error = %e, "Pod CIDR update failed");
                    failed = true;
                }
            }
        }
        let changed = async {
            match &mut node {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        let retry = async {
            if failed {
                tokio::time::sleep(POD_CIDR_RETRY).await;
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            () = changed => {}
            () = retry => {}
        }
    }
}

/// Upstream's periodicQOSCgroupUpdateInterval.
const QOS_UPDATE_PERIOD: Duration = Duration::from_secs(60);

/// Keep the QoS cgroups' values in step with the active pods, every
/// QOS_UPDATE_PERIOD (besides each new pod's own update).
async fn update_qos_every(syncer: Syncer, cancel: CancellationToken) {
    let mut tick = tokio::time::interval_at(Instant::now() + QOS_UPDATE_PERIOD, QOS_UPDATE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = syncer.cm.update_qos(syncer.active_pods()).await {
            tracing::info!(error = %e, "Failed to reserve QoS requests");
        }
    }
}
