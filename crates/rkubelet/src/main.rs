//! rkubelet: a Kubernetes node agent. This binary only parses flags and the
//! KubeletConfiguration file, sets up logging, and wires the kubelet.

mod flags;

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use kubelet::{Kubelet, KubeletOptions};
use kubelet_cri::client::CriClient;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let settings = match flags::Flags::parse().into_settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rkubelet: {e:#}");
            return ExitCode::from(1);
        }
    };
    init_tracing(settings.verbosity);
    for field in &settings.ignored_fields {
        tracing::warn!(%field, "KubeletConfiguration field is not implemented yet and is ignored");
    }
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
    match rt.block_on(run(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("rkubelet: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// klog's -v levels onto tracing: 0-2 info, 3-4 debug, 5+ trace. RUST_LOG wins.
fn init_tracing(verbosity: u8) {
    let level = match verbosity {
        0..=2 => "info",
        3..=4 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{level},h2=info,tower=info,hyper=info"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

/// Upstream asks the kernel to spare the kubelet (-999). Without
/// CAP_SYS_RESOURCE that is refused: warn once and carry on.
fn protect_from_oom_killer() {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "-999") {
        tracing::warn!(error = %e, "could not lower rkubelet's oom_score_adj to -999; continuing");
    }
}

async fn run(settings: flags::Settings) -> anyhow::Result<()> {
    protect_from_oom_killer();
    let cfg = &settings.config;
    for dir in [&settings.root_dir, &cfg.pod_logs_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let cri = CriClient::connect_lazy(&cfg.container_runtime_endpoint, cfg.runtime_request_timeout)
        .context("containerRuntimeEndpoint")?;
    tracing::info!(
        node = %settings.node_name,
        endpoint = %cfg.container_runtime_endpoint,
        static_pod_path = ?cfg.static_pod_path,
        "starting rkubelet"
    );
    let cancel = CancellationToken::new();
    let opts = KubeletOptions::from_host(settings.config, settings.root_dir, settings.node_name);
    let kubelet = Kubelet::new(opts, cri, cancel.clone());
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let run = kubelet.run();
    tokio::pin!(run);
    tokio::select! {
        r = &mut run => return r.map_err(Into::into),
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    cancel.cancel();
    run.await.map_err(Into::into)
}
