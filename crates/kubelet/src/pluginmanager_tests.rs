//! The plugin manager against plugins serving the registration API on
//! sockets in a temporary plugins_registry, a fake CSI driver and a fake
//! API server.

use std::sync::Arc;

use kubelet_plugin_api::fake::{FakeDevicePlugin, healthy};
use kubelet_plugin_api::pluginregistration::registration_server::{
    Registration, RegistrationServer,
};
use kubelet_plugin_api::pluginregistration::{
    DEVICE_PLUGIN, DRA_PLUGIN, PluginInfo, RegistrationStatusResponse,
};
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

use super::*;
use crate::testutil::{FakeApi, until};
use crate::volumes::csi::tests::{FakeDriver, serve};

/// A plugin's registration service: what GetInfo answers, and the
/// statuses the kubelet sent.
#[derive(Clone)]
struct Plugin {
    info: PluginInfo,
    told: Arc<Mutex<Vec<RegistrationStatus>>>,
}

#[tonic::async_trait]
impl Registration for Plugin {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        r: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        self.told.lock().push(r.into_inner());
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

/// Serve a registration service at `socket`; the statuses it is told.
fn plugin(
    socket: &Path,
    kind: &str,
    name: &str,
    endpoint: &Path,
    versions: &[&str],
) -> Arc<Mutex<Vec<RegistrationStatus>>> {
    let told = Arc::default();
    let service = Plugin {
        info: PluginInfo {
            r#type: kind.into(),
            name: name.into(),
            endpoint: endpoint.to_string_lossy().into_owned(),
            supported_versions: versions.iter().map(|v| v.to_string()).collect(),
        },
        told: Arc::clone(&told),
    };
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    told
}

#[tokio::test]
async fn a_csi_driver_registers_in_the_csinode_and_goes_with_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join(PLUGINS_REGISTRY);
    std::fs::create_dir_all(&registry).unwrap();
    let api = FakeApi::default();
    api.put(
        "/api/v1/nodes/n1",
        serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "node-uid"}}),
    );
    let csi = CsiDrivers::default();
    let cancel = CancellationToken::new();
    let devices = DeviceManager::new(
        dir.path(),
        kubelet_core::metrics::KubeletMetrics::new("n1"),
        Arc::default(),
        None,
    );
    let manager = PluginManager {
        dir: registry.clone(),
        csi: csi.clone(),
        node_info: NodeInfo {
            api: api.client(),
            node_name: "n1".into(),
        },
        devices: devices.clone(),
        dra: crate::dra::DraManager::new(
            dir.path(),
            None,
            "n1",
            kubelet_core::metrics::KubeletMetrics::new("n1"),
            None,
        ),
        tasks: kubelet_tasks::Tasks::new(cancel.clone()),
    };
    let run = tokio::spawn(manager.run(cancel.clone()));
    // The CSINode is made at start, owned by the Node.
    let csinode_path = "/apis/storage.k8s.io/v1/csinodes/n1";
    until("the CSINode made", || api.get(csinode_path).is_some()).await;
    let csinode = api.get(csinode_path).unwrap();
    assert_eq!(csinode["metadata"]["ownerReferences"][0]["uid"], "node-uid");
    assert_eq!(
        csinode["metadata"]["annotations"]["storage.alpha.kubernetes.io/migrated-plugins"],
        kubelet_core::csi::MIGRATED_PLUGINS
    );

    let endpoint = dir.path().join("csi.sock");
    serve(FakeDriver::default(), &endpoint);
    let socket = registry.join("fake.csi-reg.sock");
    let told = plugin(&socket, CSI_PLUGIN, "fake.csi", &endpoint, &["1.0.0"]);
    until("the driver told it is registered", || {
        !told.lock().is_empty()
    })
    .await;
    let status = told.lock()[0].clone();
    assert!(status.plugin_registered, "{}", status.error);
    assert_eq!(csi.names(), ["fake.csi"]);
    let csinode = api.get(csinode_path).unwrap();
    let driver = &csinode["spec"]["drivers"][0];
    assert_eq!(driver["name"], "fake.csi");
    assert_eq!(driver["nodeID"], "fake-node-id");
    assert_eq!(
        driver["topologyKeys"],
        serde_json::json!(["topology.fake/zone"])
    );
    assert_eq!(driver["allocatable"]["count"], 5);
    let node = api.get("/api/v1/nodes/n1").unwrap();
    assert_eq!(
        node["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"],
        r#"{"fake.csi":"fake-node-id"}"#
    );
    assert_eq!(node["metadata"]["labels"]["topology.fake/zone"], "z1");

    // A device plugin: registered, its devices the node's; a DRA driver
    // offering no DRAPlugin service, a device plugin of another version and a CSI
    // version not spoken: refused, and told why.
    let plugin_dir = dir.path().join("dp");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let gpu = FakeDevicePlugin::new("example.com/gpu", healthy(&["g1", "g2"]));
    gpu.serve(&plugin_dir, "gpu.sock").unwrap();
    let gpu_told = plugin(
        &registry.join("gpu-reg.sock"),
        DEVICE_PLUGIN,
        "example.com/gpu",
        &plugin_dir.join("gpu.sock"),
        &["v1beta1"],
    );
    until("the device plugin registered", || {
        devices.capacity().allocatable.get("example.com/gpu") == Some(&2)
    })
    .await;
    assert!(gpu_told.lock()[0].plugin_registered);
    let newer = plugin(
        &registry.join("newer-reg.sock"),
        DEVICE_PLUGIN,
        "example.com/fpga",
        &plugin_dir.join("fpga.sock"),
        &["v2"],
    );
    let device = plugin(
        &registry.join("dra.sock"),
        DRA_PLUGIN,
        "dra.example.com",
        Path::new(""),
        &["v1"],
    );
    let old = plugin(
        &registry.join("old.sock"),
        CSI_PLUGIN,
        "old.csi",
        &endpoint,
        &["0.3.0"],
    );
    until("all refused", || {
        !device.lock().is_empty() && !old.lock().is_empty() && !newer.lock().is_empty()
    })
    .await;
    let refused = device.lock()[0].clone();
    assert!(!refused.plugin_registered);
    assert_eq!(
        refused.error,
        format!(
            r#"RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC versions of DRA driver plugin dra.example.com at endpoint {}: none of services supported by the plugin (["v1"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])"#,
            registry.join("dra.sock").display()
        )
    );
    assert_eq!(
        newer.lock()[0].error,
        "RegisterPlugin error -- plugin validation failed with err: manager version, v1beta1, is not among plugin supported versions [v2]"
    );
    let refused = old.lock()[0].clone();
    assert!(
        refused
            .error
            .contains(r#"None of the versions specified ["0.3.0"] are supported"#),
        "{}",
        refused.error
    );
    assert_eq!(csi.names(), ["fake.csi"]);

    // The device plugin's registration socket goes: its devices are no
    // longer allocatable.
    std::fs::remove_file(registry.join("gpu-reg.sock")).unwrap();
    until("the device plugin deregistered", || {
        devices.capacity().allocatable.get("example.com/gpu") == Some(&0)
    })
    .await;

    // The socket goes: the driver is deregistered and uninstalled.
    std::fs::remove_file(&socket).unwrap();
    until("the driver deregistered", || csi.names().is_empty()).await;
    until("the CSINode without it", || {
        api.get(csinode_path).unwrap()["spec"]["drivers"] == serde_json::json!([])
    })
    .await;
    let node = api.get("/api/v1/nodes/n1").unwrap();
    assert!(node["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"].is_null());
    cancel.cancel();
    run.await.unwrap();
}
