//! An unauthenticated connection flood against the kubelet API, in a test
//! binary (a process) of its own: it lowers its own soft RLIMIT_NOFILE so
//! that, without a cap on connections, the flood would use up the file
//! handles the runtime connection, the manifest directory and /healthz need.
//! The kubelet runs against the fake CRI runtime, as in inprocess.rs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubelet::{Kubelet, KubeletOptions};
use kubelet_core::config::KubeletConfiguration;
use kubelet_cri::client::CriClient;
use kubelet_cri::fake::FakeRuntime;
use kubelet_cri::v1 as cri;
use kubelet_server::listener::connection_cap;
use rustix::process::{Resource, getrlimit, setrlimit};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const IMAGE: &str = "rkubelet.test/busybox:1";
const WAIT: Duration = Duration::from_secs(20);
/// The test process's soft file-handle limit: room for the flood's client
/// ends, the kubelet API's capped server ends and the rest, not for a
/// server end per client end.
const NOFILE: u64 = 1536;
const IDLE: usize = 1000;
const HANDSHAKE_THEN_SILENCE: usize = 100;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn lower_nofile_limit() {
    let mut limit = getrlimit(Resource::Nofile);
    assert!(
        limit.maximum.is_none_or(|max| max >= NOFILE),
        "the hard RLIMIT_NOFILE {limit:?} is below {NOFILE}"
    );
    limit.current = Some(NOFILE);
    setrlimit(Resource::Nofile, limit).unwrap();
}

/// GET /healthz on a fresh connection: the status line and the time it took.
async fn healthz(port: u16) -> (String, Duration) {
    let start = Instant::now();
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    let status = answer.lines().next().unwrap_or_default().to_owned();
    (status, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_leaves_healthz_and_pods_working() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    lower_nofile_limit();
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
        .await
        .unwrap();
    fake.add_image(IMAGE);
    let (healthz_port, api_port) = (free_port(), free_port());
    let config = KubeletConfiguration {
        static_pod_path: Some(manifests.clone()),
        pod_logs_dir: dir.path().join("logs"),
        container_runtime_endpoint: fake.endpoint(),
        // The host's own figures feed the eviction manager: thresholds it
        // does not reach on a nearly full disk.
        eviction_hard: [("memory.available", "1Mi"), ("nodefs.available", "1%")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        runtime_request_timeout: Duration::from_secs(5),
        healthz_bind_address: "127.0.0.1".into(),
        healthz_port,
        address: "127.0.0.1".into(),
        port: api_port,
        ..Default::default()
    };
    let root = dir.path().join("root");
    let mut opts = KubeletOptions::from_host(config, root.clone(), "node1".into());
    opts.legacy_logs_dir = dir.path().join("containers");
    // Pod cgroups in plain directories, not the host's.
    let mounts = ["cpu", "memory", "pids"]
        .iter()
        .map(|c| (c.to_string(), dir.path().join("cgroup").join(c)))
        .collect();
    opts.cgroups = kubelet::cm::HostCgroups {
        layout: Some(kubelet_core::cgroups::CgroupLayout::V1 { mounts }),
        hugepage_sizes: Vec::new(),
    };
    let metrics = opts.metrics.clone();
    let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5)).unwrap();
    let cancel = CancellationToken::new();
    let boot = Kubelet::build(opts, cri, None, cancel.clone());
    let kubelet = boot.kubelet.clone();
    let done = tokio::spawn(boot.run());
    let deadline = Instant::now() + WAIT;
    while kubelet.bound.lock().len() < 2 {
        assert!(Instant::now() < deadline, "the servers did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _) = healthz(healthz_port).await;
    assert_eq!(status, "HTTP/1.1 200 OK");

    // Handshake, then silence: trust the kubelet's self-signed certificate.
    let pem = std::fs::read(root.join("pki/kubelet.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&pem).unwrap())
        .unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let mut silent_tls = Vec::new();
    for _ in 0..HANDSHAKE_THEN_SILENCE {
        let tcp = TcpStream::connect(("127.0.0.1", api_port)).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        silent_tls.push(connector.connect(name, tcp).await.unwrap());
    }
    // Idle from the start: beyond the cap they wait in the kernel's backlog.
    let mut idle = Vec::new();
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(("127.0.0.1", api_port)).await.unwrap());
    }
    let cap = connection_cap(Some(NOFILE));
    let open = || metrics.server_open_connections.get(&["kubelet-api"]);
    while open() < cap as f64 {
        assert!(Instant::now() < deadline, "{} open of {cap}", open());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // /healthz answers at once...
    for _ in 0..5 {
        let (status, took) = healthz(healthz_port).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(took < Duration::from_millis(100), "/healthz took {took:?}");
    }
    // ...a new pod starts...
    std::fs::write(
        manifests.join("web.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: {IMAGE}\n"
        ),
    )
    .unwrap();
    let running = || {
        fake.containers().iter().any(|c| {
            c.state == cri::ContainerState::ContainerRunning as i32
                && c.metadata.as_ref().is_some_and(|m| m.name == "c")
        })
    };
    while !running() {
        assert!(Instant::now() < deadline, "the pod did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...and the flood holds no more than the cap, without a failed accept.
    assert_eq!(open(), cap as f64);
    assert_eq!(
        metrics.server_accept_errors.get(&["kubelet-api"]),
        0.0,
        "accepts failed"
    );

    cancel.cancel();
    drop((silent_tls, idle));
    tokio::time::timeout(WAIT, done)
        .await
        .expect("the kubelet stops")
        .unwrap()
        .unwrap();
}
