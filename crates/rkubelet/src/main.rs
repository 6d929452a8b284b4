//! rkubelet: a Kubernetes node agent. This binary only parses flags and the
//! KubeletConfiguration file, sets up logging, and wires the kubelet.

/// jemalloc, not glibc's malloc: a kubelet's memory comes and goes with its
/// pods, and glibc kept what a 100-pod delete freed in its thread arenas
/// where jemalloc gives it back, for no more CPU in the burst; mimalloc held
/// more than either. The comparison (anonymous RSS with the pods and after
/// their delete, VmRSS with probed pods, the burst's CPU, each allocator run
/// through `hack/bench-cluster.sh`) and its figures are in the README's
/// Benchmark section.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod flags;
mod jsonlog;
mod otel;

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use kubelet::certificate::ClientCertificates;
use kubelet::nodestatus::{NodeRegistration, detect_node_ip};
use kubelet::{Kubelet, KubeletOptions};
use kubelet_cri::client::CriClient;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

fn main() -> ExitCode {
    let settings = match flags::Flags::parse().into_settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rkubelet: {e:#}");
            return ExitCode::from(1);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rkubelet: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // The OTLP exporter (if configured) batches on the runtime.
    let exporter = {
        let _guard = rt.enter();
        match init_tracing(
            settings.verbosity,
            &settings.config.logging,
            settings.config.tracing.as_ref(),
        ) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("rkubelet: tracing: {e:#}");
                return ExitCode::from(1);
            }
        }
    };
    // maxOpenFiles, as upstream sets it at start (only logged when refused:
    // then the soft limit goes up to the hard one, as in every Go program).
    // The servers' connection caps are sized from the limit in force.
    let max_open_files = u64::try_from(settings.config.max_open_files).unwrap_or(0);
    match kubelet_server::listener::set_nofile_limit(max_open_files) {
        (limit, None) => tracing::debug!(?limit, "RLIMIT_NOFILE"),
        (limit, Some(e)) => tracing::warn!(
            error = %e, ?limit,
            "Failed to set rlimit on max file handles to maxOpenFiles {max_open_files}"
        ),
    }
    for field in &settings.ignored_fields {
        let why = kubelet_core::config::not_implemented(field).unwrap_or("not implemented");
        tracing::warn!(%field, why, "KubeletConfiguration field is ignored");
    }
    for warning in kubelet_core::config::gates::warnings(&settings.config.feature_gates) {
        tracing::warn!("{warning}");
    }
    let code = match rt.block_on(run(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("rkubelet: {e:#}");
            ExitCode::from(1)
        }
    };
    if let Some(provider) = exporter
        && let Err(e) = provider.shutdown()
    {
        eprintln!("rkubelet: flushing traces: {e}");
    }
    code
}

/// klog's -v levels onto tracing: 0-2 info, 3-4 debug, 5+ trace. RUST_LOG wins.
/// `logging.format` picks the text format (tracing's) or klog's JSON lines
/// ([`jsonlog`]); a split stream sends errors to stderr and the rest to
/// stdout. With a `tracing` section, spans down to debug (lifecycle steps,
/// CRI calls) also go to its OTLP collector; the provider is returned to be
/// shut down at exit.
fn init_tracing(
    verbosity: u8,
    logging: &kubelet_core::config::LoggingConfiguration,
    otlp: Option<&kubelet_core::config::TracingConfiguration>,
) -> anyhow::Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let level = match verbosity {
        0..=2 => "info",
        3..=4 => "debug",
        _ => "trace",
    };
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!("{level},h2=info,tower=info,hyper=info"))
        })
    };
    let json = logging.format == "json";
    let options = if json {
        &logging.options.json
    } else {
        &logging.options.text
    };
    let writer = || {
        if options.split_stream {
            BoxMakeWriter::new(
                std::io::stderr
                    .with_max_level(tracing::Level::ERROR)
                    .or_else(std::io::stdout),
            )
        } else {
            BoxMakeWriter::new(std::io::stderr)
        }
    };
    // Colour only on a terminal: log files stay plain, as upstream's.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let text = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_ansi(colour)
            .with_writer(writer())
            .with_filter(filter())
    });
    let json = json.then(|| jsonlog::JsonLayer::new(writer()).with_filter(filter()));
    let provider = otlp.map(otel::provider).transpose()?;
    let spans = provider
        .as_ref()
        .map(|p| otel::layer(p).with_filter(tracing_subscriber::filter::LevelFilter::DEBUG));
    tracing_subscriber::registry()
        .with(text)
        .with(json)
        .with(spans)
        .init();
    Ok(provider)
}

/// Upstream asks the kernel to spare the kubelet (oomScoreAdj, -999 by
/// default). Without CAP_SYS_RESOURCE a lower score is refused: warn once
/// and carry on.
fn protect_from_oom_killer(score: i32) {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", score.to_string()) {
        tracing::warn!(error = %e, "could not set rkubelet's oom_score_adj to {score}; continuing");
    }
}

/// The kubelet's options from the settings and this host: its facts, the
/// certificate directory, systemd's settings, the credential provider
/// plugins (registered now: a bad config stops start-up, as upstream's).
fn kubelet_options(settings: &flags::Settings) -> anyhow::Result<KubeletOptions> {
    let mut opts = KubeletOptions::from_host(
        settings.config.clone(),
        settings.root_dir.clone(),
        settings.node_name.clone(),
    );
    opts.cert_dir = settings.cert_dir.clone();
    opts.systemd = systemd_from_env()?;
    if let Some((config, bin_dir)) = &settings.credential_provider {
        let providers = kubelet::credentialprovider::CredentialProviders::register(
            config,
            bin_dir,
            &opts.config,
            opts.metrics.clone(),
        )
        .context("Failed to register CRI auth plugins")?;
        opts.credential_providers = Some(std::sync::Arc::new(providers));
    }
    Ok(opts)
}

/// systemd's NOTIFY_SOCKET and watchdog (WATCHDOG_USEC, WATCHDOG_PID), as
/// upstream reads them; a watchdog setting that cannot be used stops
/// start-up, as upstream's.
fn systemd_from_env() -> anyhow::Result<kubelet::systemd::Systemd> {
    use kubelet_core::systemd::{NotifySocket, watchdog_timeout};
    let var = |name| std::env::var(name).ok();
    let notify = NotifySocket::parse(var("NOTIFY_SOCKET").as_deref());
    let watchdog = watchdog_timeout(
        var("WATCHDOG_USEC").as_deref(),
        var("WATCHDOG_PID").as_deref(),
        std::process::id(),
    )?;
    Ok(kubelet::systemd::Systemd { notify, watchdog })
}

/// How the node registers: upstream's --node-ip, --node-labels,
/// --register-node and --register-with-taints over the config file.
fn registration(settings: &flags::Settings, cpu_cores: i64) -> NodeRegistration {
    let cfg = &settings.config;
    let node_ips = if settings.node_ips.is_empty() {
        vec![detect_node_ip()]
    } else {
        settings.node_ips.clone()
    };
    NodeRegistration {
        node_name: settings.node_name.clone(),
        node_ips,
        labels: settings.node_labels.clone(),
        taints: cfg.register_with_taints.clone(),
        register: cfg.register_node,
        update_every: cfg.node_status_update_frequency,
        report_every: cfg.node_status_report_frequency,
        max_pods: cfg.pod_capacity(cpu_cores),
        kubelet_port: i32::from(cfg.port),
        provider_id: (!cfg.provider_id.is_empty()).then(|| cfg.provider_id.clone()),
        lease_duration_seconds: cfg.node_lease_duration_seconds,
        max_images: cfg.node_status_max_images(),
    }
}

async fn run(mut settings: flags::Settings) -> anyhow::Result<()> {
    protect_from_oom_killer(settings.config.oom_score_adj);
    // The root directory resolved (rkubelet's own safeguard): the
    // volume manager finds its mounts by path in mountinfo, which lists
    // resolved paths, so a symlinked or relative --root-dir must not hide
    // a bind mount from its unmount.
    std::fs::create_dir_all(&settings.root_dir)
        .with_context(|| format!("creating {}", settings.root_dir.display()))?;
    settings.root_dir = std::fs::canonicalize(&settings.root_dir)
        .with_context(|| format!("resolving {}", settings.root_dir.display()))?;
    let cfg = &settings.config;
    if let Some(layout) = kubelet::cm::HostCgroups::detect().layout {
        cfg.validate_for_cgroups(layout.version())?;
    }
    kubelet::cm::check_swap(cfg.fail_swap_on, &cfg.memory_swap.swap_behavior)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("setting up the node (swap)")?;
    kubelet::cm::setup_kernel_tunables(cfg.protect_kernel_defaults)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("setting up the node (kernel tunables)")?;
    for dir in [&settings.root_dir, &cfg.pod_logs_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // As upstream's setupDataDirs: volumes mounted under the root directory
    // reach containers that ask for HostToContainer or Bidirectional
    // propagation, also on a host whose `/` is a private mount.
    if kubelet::volumes::mount::make_rshared(&settings.root_dir).with_context(|| {
        format!(
            "error configuring root directory {}",
            settings.root_dir.display()
        )
    })? {
        tracing::info!(root_dir = %settings.root_dir.display(), "bind-mounted the root directory with shared mount propagation");
    }
    let cri = CriClient::connect_lazy_split(
        &cfg.container_runtime_endpoint,
        cfg.image_endpoint(),
        cfg.runtime_request_timeout,
    )
    .context("containerRuntimeEndpoint")?;
    tracing::info!(
        node = %settings.node_name,
        endpoint = %cfg.container_runtime_endpoint,
        image_endpoint = %cfg.image_endpoint(),
        static_pod_path = ?cfg.static_pod_path,
        "starting rkubelet"
    );
    let mut opts = kubelet_options(&settings)?;
    let cancel = CancellationToken::new();
    let cfg = &opts.config;
    let (api, certificates) = match &settings.kubeconfig {
        Some(kubeconfig) => {
            let client = ClientCertificates {
                kubeconfig: kubeconfig.clone(),
                bootstrap_kubeconfig: settings.bootstrap_kubeconfig.clone(),
                cert_dir: settings.cert_dir.clone(),
                rotate: cfg.rotate_certificates,
                node_name: settings.node_name.clone(),
                qps: cfg.kube_api_qps,
                burst: cfg.kube_api_burst,
            };
            let setup = client
                .setup(opts.clock, opts.metrics.clone(), &cancel)
                .await
                .context("--kubeconfig")?;
            (Some(setup.api), setup.manager)
        }
        None => (None, None),
    };
    opts.registration = api
        .as_ref()
        .map(|_| registration(&settings, opts.node_cpu_cores));
    let boot = Kubelet::build(opts, cri, api, cancel.clone());
    let kubelet = boot.kubelet.clone();
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let run = boot.run();
    tokio::pin!(run);
    // The client certificate's manager runs beside the kubelet; it ends the
    // kubelet when the node has had no valid certificate for 5 minutes.
    let rotation = async {
        match certificates {
            Some(manager) => {
                manager
                    .run(cancel.clone())
                    .instrument(tracing::info_span!("client_certificate"))
                    .await
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(rotation);
    tokio::select! {
        r = &mut run => return r.map_err(Into::into),
        r = &mut rotation => {
            if let Err(e) = r {
                tracing::error!(error = %e, "stopping");
                cancel.cancel();
                run.await?;
                return Err(e.into());
            }
        }
        _ = term.recv() => {
            tracing::info!("SIGTERM: shutting down");
            if settings.shutdown_on_sigterm {
                // The node's shutdown first (--shutdown-on-sigterm), the
                // kubelet running on meanwhile; a second SIGTERM or a
                // SIGINT cuts it short.
                tokio::select! {
                    () = kubelet.shut_down_node() => {}
                    r = &mut run => return r.map_err(Into::into),
                    r = &mut rotation => if let Err(e) = r {
                        tracing::error!(error = %e, "stopping");
                        cancel.cancel();
                        run.await?;
                        return Err(e.into());
                    },
                    _ = term.recv() => tracing::warn!("SIGTERM again: the node's shutdown is cut short"),
                    _ = int.recv() => tracing::warn!("SIGINT: the node's shutdown is cut short"),
                }
            }
        }
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    cancel.cancel();
    run.await.map_err(Into::into)
}
