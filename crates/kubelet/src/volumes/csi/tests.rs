//! CSI volumes against a fake driver on a unix socket and a fake API
//! server: the order of the driver's calls, upstream's layout on disk,
//! tear-down from disk after a restart, unstage only when unused, and a
//! driver that hangs.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{AttachedVolume, Node, NodeStatus, Pod, PodSpec};
use kubelet_core::csi::{CsiVolume, attachment_name, staging_path};
use kubelet_plugin_api::csi::node_server::{Node as NodeService, NodeServer};
use kubelet_plugin_api::csi::node_service_capability::{Rpc, Type as CapType, rpc};
use kubelet_plugin_api::csi::*;
use parking_lot::Mutex;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::*;
use crate::clock::Clock;
use crate::testutil::FakeApi;

/// A CSI driver that records its calls and does what the spec asks of a
/// driver on the file system (makes and removes the publish target).
#[derive(Clone, Default)]
pub(crate) struct FakeDriver {
    calls: Arc<Mutex<Vec<String>>>,
    stages: bool,
    expands: bool,
    reports: bool,
    /// NodePublishVolume fails with this code.
    refuses: Option<tonic::Code>,
    /// NodeExpandVolume fails with this code.
    refuses_expansion: Option<tonic::Code>,
    hangs: bool,
    /// The last publish request's volume context.
    context: Arc<Mutex<HashMap<String, String>>>,
}

impl FakeDriver {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }

    async fn record(&self, call: String) -> Result<(), Status> {
        if self.hangs {
            std::future::pending::<()>().await;
        }
        self.calls.lock().push(call);
        Ok(())
    }
}

#[tonic::async_trait]
impl NodeService for FakeDriver {
    async fn node_stage_volume(
        &self,
        r: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let r = r.into_inner();
        assert!(
            Path::new(&r.staging_target_path).is_dir(),
            "the kubelet makes the staging path"
        );
        self.record(format!(
            "stage {} {}",
            r.volume_id,
            r.publish_context.get("device").map_or("", String::as_str)
        ))
        .await?;
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        r: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        self.record(format!("unstage {}", r.into_inner().volume_id))
            .await?;
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        r: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let r = r.into_inner();
        let target = Path::new(&r.target_path);
        assert!(
            target
                .parent()
                .is_some_and(|p| p.join(VOL_DATA_FILE).is_file()),
            "vol_data.json is written before NodePublishVolume"
        );
        if let Some(code) = self.refuses {
            self.record(format!("refused {}", r.volume_id)).await?;
            return Err(Status::new(code, "no such volume"));
        }
        std::fs::create_dir_all(target).map_err(|e| Status::internal(e.to_string()))?;
        *self.context.lock() = r.volume_context.clone();
        let staged = if r.staging_target_path.is_empty() {
            ""
        } else {
            " staged"
        };
        self.record(format!("publish {}{staged}", r.volume_id))
            .await?;
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        r: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let r = r.into_inner();
        let _ = std::fs::remove_dir_all(&r.target_path);
        self.record(format!("unpublish {}", r.volume_id)).await?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        r: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let r = r.into_inner();
        self.record(format!("stats {} {}", r.volume_id, r.volume_path))
            .await?;
        let usage = |unit: volume_usage::Unit, total, used| VolumeUsage {
            available: total - used,
            total,
            used,
            unit: unit as i32,
        };
        Ok(Response::new(NodeGetVolumeStatsResponse {
            usage: vec![
                usage(volume_usage::Unit::Bytes, 1 << 30, 1 << 20),
                usage(volume_usage::Unit::Inodes, 1000, 10),
            ],
        }))
    }

    async fn node_expand_volume(
        &self,
        r: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        let r = r.into_inner();
        let bytes = r.capacity_range.map_or(0, |c| c.required_bytes);
        assert!(
            Path::new(&r.volume_path).is_dir(),
            "expanded where published"
        );
        let secrets: BTreeMap<_, _> = r.secrets.into_iter().collect();
        self.record(format!("expand {} {bytes} {secrets:?}", r.volume_id))
            .await?;
        if let Some(code) = self.refuses_expansion {
            return Err(Status::new(code, "too big"));
        }
        Ok(Response::new(NodeExpandVolumeResponse {
            capacity_bytes: bytes,
        }))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        self.record("capabilities".into()).await?;
        let capability = |t: rpc::Type| NodeServiceCapability {
            r#type: Some(CapType::Rpc(Rpc { r#type: t as i32 })),
        };
        let capabilities = [
            (self.stages, rpc::Type::StageUnstageVolume),
            (self.expands, rpc::Type::ExpandVolume),
            (self.reports, rpc::Type::GetVolumeStats),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, t)| capability(t))
        .collect();
        Ok(Response::new(NodeGetCapabilitiesResponse { capabilities }))
    }

    async fn node_get_info(
        &self,
        _: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        Ok(Response::new(NodeGetInfoResponse {
            node_id: "fake-node-id".into(),
            max_volumes_per_node: 5,
            accessible_topology: Some(Topology {
                segments: HashMap::from([("topology.fake/zone".into(), "z1".into())]),
            }),
        }))
    }
}

/// Serve `driver` on `socket` until the test ends.
pub(crate) fn serve(driver: FakeDriver, socket: &Path) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(NodeServer::new(driver))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
}

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    api: FakeApi,
    drivers: CsiDrivers,
    node: watch::Sender<Option<Arc<Node>>>,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        Setup {
            _dir: dir,
            root,
            api: FakeApi::default(),
            drivers: CsiDrivers::default(),
            node: watch::Sender::new(None),
        }
    }

    /// A driver named `name` served and registered.
    fn driver(&self, name: &str, driver: FakeDriver) {
        let socket = self.root.join(format!("{name}.sock"));
        serve(driver, &socket);
        self.drivers.insert(name, &socket, (1, 0, 0)).unwrap();
    }

    /// A kubelet process's CSI volumes (a new one: a restart).
    fn volumes(&self) -> CsiVolumes {
        let api = self.api.client();
        CsiVolumes::new(
            self.drivers.clone(),
            api.clone(),
            "n1".into(),
            self.node.subscribe(),
            self.root.clone(),
            TokenManager::new(api, Clock::following_tokio()),
            VolumesInUse::default(),
        )
    }

    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root.join("pods").join(uid)
    }
}

fn pod(uid: &str) -> Pod {
    let mut pod = Pod {
        spec: Some(PodSpec {
            service_account_name: Some("sa".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    pod.metadata.name = Some(format!("pod-{uid}"));
    pod.metadata.namespace = Some("ns".into());
    pod.metadata.uid = Some(uid.into());
    pod
}

/// Claim ns/c1 bound to PV pv-h1, the CSI `volume`.
fn claim_c1(volume: &CsiVolume) -> super::super::claims::Resolved {
    use kubelet_core::claim::{BoundVolume, PvSource};
    super::super::claims::Resolved {
        volume: BoundVolume {
            pv_name: "pv-h1".into(),
            source: PvSource::Csi(Box::new(volume.clone())),
            read_only: false,
            block: false,
            gid: None,
        },
        namespace: "ns".into(),
        name: "c1".into(),
        uid: "claim-uid".into(),
        expansion: None,
    }
}

fn persistent(driver: &str, handle: &str) -> CsiVolume {
    CsiVolume {
        spec_name: format!("pv-{handle}"),
        driver: driver.into(),
        handle: handle.into(),
        fs_type: String::new(),
        attributes: BTreeMap::from([("name".into(), "v".into())]),
        read_only: false,
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        mount_options: Vec::new(),
        stage_secret: None,
        publish_secret: None,
        expand_secret: None,
        block: false,
    }
}

#[tokio::test]
async fn a_staged_volume_is_published_per_pod_and_unstaged_after_the_last() {
    let s = Setup::new();
    let driver = FakeDriver {
        stages: true,
        ..Default::default()
    };
    s.driver("fake.csi", driver.clone());
    // Attach is required (no CSIDriver object): the node reports it
    // attached and its VolumeAttachment gives the device.
    let va = attachment_name("h1", "fake.csi", "n1");
    s.api.put(
        &format!("/apis/storage.k8s.io/v1/volumeattachments/{va}"),
        serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": va},
            "spec": {"attacher": "fake.csi", "nodeName": "n1", "source": {"persistentVolumeName": "pv-h1"}},
            "status": {"attached": true, "attachmentMetadata": {"device": "/dev/fake"}}}),
    );
    let volume = persistent("fake.csi", "h1");
    let volumes = s.volumes();
    let (a, b) = (pod("a"), pod("b"));
    let err = volumes
        .set_up(&a, &s.pod_dir("a"), &volume, None, false)
        .await
        .err()
        .expect("not attached yet");
    assert_eq!(
        err.to_string(),
        r#"Volume not attached according to node status for volume "pv-h1""#
    );
    s.node.send_replace(Some(Arc::new(Node {
        status: Some(NodeStatus {
            volumes_attached: Some(vec![AttachedVolume {
                name: "kubernetes.io/csi/fake.csi^h1".into(),
                device_path: String::new(),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    })));
    let published = volumes
        .set_up(&a, &s.pod_dir("a"), &volume, None, false)
        .await
        .unwrap();
    let target = s.pod_dir("a").join("volumes/kubernetes.io~csi/pv-h1/mount");
    assert_eq!(published.target, target);
    // Again (the next sync): nothing more is asked of the driver.
    volumes
        .set_up(&a, &s.pod_dir("a"), &volume, None, false)
        .await
        .unwrap();
    volumes
        .set_up(&b, &s.pod_dir("b"), &volume, None, false)
        .await
        .unwrap();
    assert_eq!(volumes.in_use.names(), ["kubernetes.io/csi/fake.csi^h1"]);
    assert_eq!(
        driver.calls(),
        [
            "capabilities",
            "stage h1 /dev/fake",
            "publish h1 staged",
            "capabilities",
            "publish h1 staged"
        ]
    );
    // Upstream's layout, readable by either kubelet.
    let data: VolData = serde_json::from_slice(
        &std::fs::read(
            s.pod_dir("a")
                .join("volumes/kubernetes.io~csi/pv-h1/vol_data.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (
            data.spec_vol_id.as_str(),
            data.volume_lifecycle_mode.as_str(),
            data.attachment_id
        ),
        ("pv-h1", "Persistent", va)
    );
    let staged = staging_path(&s.root, "fake.csi", "h1");
    assert!(staged.is_dir() && staged.parent().unwrap().join(VOL_DATA_FILE).is_file());

    // A restart: tear-down reads the disk. Pod b still uses the volume.
    let restarted = s.volumes();
    driver.calls.lock().clear();
    restarted.tear_down_pod(&s.pod_dir("a")).await.unwrap();
    assert_eq!(driver.calls(), ["unpublish h1"]);
    assert!(
        !s.pod_dir("a")
            .join("volumes/kubernetes.io~csi/pv-h1")
            .exists()
    );
    assert!(staged.is_dir(), "still staged for pod b");
    // The restarted kubelet sets pod b's volume up again at its next sync
    // (stage and publish are idempotent, as upstream's reconstruction
    // relies on), and knows it in use.
    restarted
        .set_up(&b, &s.pod_dir("b"), &volume, None, false)
        .await
        .unwrap();
    assert_eq!(restarted.in_use.names(), ["kubernetes.io/csi/fake.csi^h1"]);
    restarted.tear_down_pod(&s.pod_dir("b")).await.unwrap();
    assert_eq!(
        driver.calls(),
        [
            "unpublish h1",
            "capabilities",
            "stage h1 /dev/fake",
            "publish h1 staged",
            "unpublish h1",
            "unstage h1"
        ]
    );
    assert!(restarted.in_use.names().is_empty());
    assert!(
        !staged.parent().unwrap().exists(),
        "the global mount's directory is gone"
    );
    // Again: nothing left to do.
    restarted.tear_down_pod(&s.pod_dir("b")).await.unwrap();
    assert_eq!(driver.calls().len(), 6);
}

#[tokio::test]
async fn an_inline_volume_is_published_with_the_pods_info_when_the_driver_asks() {
    let s = Setup::new();
    let driver = FakeDriver::default();
    s.driver("inline.csi", driver.clone());
    let a = pod("a");
    let v = k8s_openapi::api::core::v1::Volume {
        name: "scratch".into(),
        csi: Some(k8s_openapi::api::core::v1::CSIVolumeSource {
            driver: "inline.csi".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let volume = CsiVolume::inline(&a, &v).unwrap();
    let volumes = s.volumes();
    // No CSIDriver object: Ephemeral volumes are refused, as upstream.
    let err = volumes
        .set_up(&a, &s.pod_dir("a"), &volume, None, false)
        .await
        .err()
        .unwrap();
    assert!(
        err.to_string().ends_with(
            r#"volume mode "Ephemeral" not supported by driver inline.csi (no CSIDriver object)"#
        ),
        "{err}"
    );
    s.api.put(
        "/apis/storage.k8s.io/v1/csidrivers/inline.csi",
        serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "inline.csi"},
            "spec": {"attachRequired": false, "podInfoOnMount": true,
                     "volumeLifecycleModes": ["Ephemeral"]}}),
    );
    volumes
        .set_up(&a, &s.pod_dir("a"), &volume, None, false)
        .await
        .unwrap();
    let context = driver.context.lock().clone();
    assert_eq!(context["csi.storage.k8s.io/pod.name"], "pod-a");
    assert_eq!(context["csi.storage.k8s.io/serviceAccount.name"], "sa");
    assert_eq!(context["csi.storage.k8s.io/ephemeral"], "true");
    assert_eq!(
        driver.calls(),
        [
            "capabilities",
            format!("publish {}", volume.handle).as_str()
        ]
    );
    volumes.tear_down_pod(&s.pod_dir("a")).await.unwrap();
    assert_eq!(
        driver.calls().last().cloned(),
        Some(format!("unpublish {}", volume.handle))
    );
}

/// A driver that never answers holds its own pods' volumes until the
/// deadline, and no other driver's.
#[tokio::test(start_paused = true)]
async fn a_hanging_driver_is_cut_at_the_deadline_and_blocks_no_other() {
    let s = Setup::new();
    s.driver(
        "stuck.csi",
        FakeDriver {
            hangs: true,
            ..Default::default()
        },
    );
    let fine = FakeDriver::default();
    s.driver("fine.csi", fine.clone());
    for name in ["stuck.csi", "fine.csi"] {
        s.api.put(
            &format!("/apis/storage.k8s.io/v1/csidrivers/{name}"),
            serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": name}, "spec": {"attachRequired": false}}),
        );
    }
    let volumes = s.volumes();
    let stuck = {
        let (volumes, dir) = (volumes.clone(), s.pod_dir("a"));
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let r = volumes
                .set_up(&pod("a"), &dir, &persistent("stuck.csi", "h"), None, false)
                .await;
            (r.err().map(|e| e.to_string()), start.elapsed())
        })
    };
    volumes
        .set_up(
            &pod("b"),
            &s.pod_dir("b"),
            &persistent("fine.csi", "h"),
            None,
            false,
        )
        .await
        .unwrap();
    assert_eq!(fine.calls(), ["capabilities", "publish h"]);
    let (err, took) = stuck.await.unwrap();
    let err = err.expect("the stuck driver fails");
    assert!(
        err.contains("DeadlineExceeded") || err.contains("Cancelled"),
        "{err}"
    );
    assert!(
        took >= CSI_TIMEOUT,
        "cut at the deadline, not before: {took:?}"
    );
}

#[tokio::test]
async fn an_unregistered_driver_is_named() {
    let s = Setup::new();
    let err = s
        .volumes()
        .set_up(
            &pod("a"),
            &s.pod_dir("a"),
            &persistent("gone.csi", "h"),
            None,
            false,
        )
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name gone.csi not found in the list of registered CSI drivers"
    );
}

/// A claim the resizer handed to the node: NodeExpandVolume at the publish
/// target, then the claim's capacity, resize status and conditions as
/// upstream's kubelet leaves them, and its events.
#[tokio::test]
async fn a_grown_claim_is_expanded_on_the_node_and_its_status_finished() {
    use crate::events::Recorder;
    use kubelet_core::claim::NodeExpansion;
    let s = Setup::new();
    let driver = FakeDriver {
        expands: true,
        ..Default::default()
    };
    s.driver("grow.csi", driver.clone());
    s.api.put(
        "/apis/storage.k8s.io/v1/csidrivers/grow.csi",
        serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "grow.csi"}, "spec": {"attachRequired": false}}),
    );
    let claim_path = "/api/v1/namespaces/ns/persistentvolumeclaims/c1";
    s.api.put(
        claim_path,
        serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "c1", "namespace": "ns", "uid": "claim-uid"},
            "spec": {"volumeName": "pv-h1"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
                "allocatedResourceStatuses": {"storage": "NodeResizePending"},
                "conditions": [{"type": "FileSystemResizePending", "status": "True"},
                               {"type": "ModifyingVolume", "status": "True"}]}}),
    );
    let volume = persistent("grow.csi", "h1");
    let volumes = s.volumes();
    let a = pod("a");
    volumes
        .set_up(&a, &s.pod_dir("a"), &volume, None, false)
        .await
        .unwrap();
    let resolved = claim_c1(&volume);
    let (events, mut told) = Recorder::with_queue("n1".into(), Clock::following_tokio());
    let grown = NodeExpansion {
        new_size: "2Gi".into(),
        new_bytes: 2 << 30,
        request_differs: false,
    };
    volumes
        .expand(&a, &volume, &resolved, &grown, &events)
        .await;
    assert_eq!(
        driver.calls().last().map(String::as_str),
        Some("expand h1 2147483648 {}")
    );
    let claim = s.api.get(claim_path).unwrap();
    assert_eq!(claim["status"]["capacity"]["storage"], "2Gi");
    assert!(claim["status"]["allocatedResourceStatuses"]["storage"].is_null());
    assert_eq!(
        claim["status"]["conditions"],
        serde_json::json!([{"type": "ModifyingVolume", "status": "True"}])
    );
    // In progress first, then finished.
    let patches = s
        .api
        .log
        .lock()
        .iter()
        .filter(|l| l.starts_with("PATCH") && l.ends_with("/c1/status"))
        .count();
    assert_eq!(patches, 2);
    for about in ["Pod", "PersistentVolumeClaim"] {
        let e = told.recv().await.unwrap();
        assert_eq!(e.involved_object.kind.as_deref(), Some(about));
        assert_eq!(e.reason.as_deref(), Some(FILE_SYSTEM_RESIZE_SUCCESSFUL));
        assert_eq!(
            e.message.as_deref(),
            Some(r#"MountVolume.NodeExpandVolume succeeded for volume "pv-h1" n1"#)
        );
    }
}

/// A driver's refusal of NodeExpandVolume marks the claim as upstream's
/// NodeExpander does: OutOfRange makes it NodeResizeInfeasible with a
/// NodeResizeError condition and a FileSystemResizeFailed event;
/// FailedPrecondition (in use) leaves it alone. The PV's nodeExpandSecretRef
/// is sent.
#[tokio::test]
async fn a_refused_node_expansion_marks_the_claim_as_upstream() {
    use crate::events::Recorder;
    use kubelet_core::claim::NodeExpansion;
    let mut volume = persistent("grow.csi", "h1");
    volume.expand_secret = Some(("ns".into(), "expand".into()));
    let grown = NodeExpansion {
        new_size: "2Gi".into(),
        new_bytes: 2 << 30,
        request_differs: false,
    };
    for (code, status, conditions) in [
        (
            tonic::Code::OutOfRange,
            serde_json::json!({"storage": "NodeResizeInfeasible"}),
            vec!["FileSystemResizePending", "NodeResizeError"],
        ),
        (
            tonic::Code::FailedPrecondition,
            serde_json::json!({"storage": "NodeResizeInProgress"}),
            vec!["FileSystemResizePending"],
        ),
    ] {
        let s = Setup::new();
        s.api.put(
            "/apis/storage.k8s.io/v1/csidrivers/grow.csi",
            serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": "grow.csi"}, "spec": {"attachRequired": false}}),
        );
        let claim_path = "/api/v1/namespaces/ns/persistentvolumeclaims/c1";
        let claim = serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "c1", "namespace": "ns", "uid": "claim-uid"},
            "spec": {"volumeName": "pv-h1"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
                "allocatedResourceStatuses": {"storage": "NodeResizePending"},
                "conditions": [{"type": "FileSystemResizePending", "status": "True"}]}});
        s.api.put(claim_path, claim);
        s.api.put(
            "/api/v1/namespaces/ns/secrets/expand",
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "expand", "namespace": "ns"}, "data": {"key": "dmFs"}}),
        );
        let driver = FakeDriver {
            expands: true,
            refuses_expansion: Some(code),
            ..Default::default()
        };
        s.driver("grow.csi", driver.clone());
        let volumes = s.volumes();
        let a = pod("a");
        volumes
            .set_up(&a, &s.pod_dir("a"), &volume, None, false)
            .await
            .unwrap();
        let resolved = claim_c1(&volume);
        let (events, mut told) = Recorder::with_queue("n1".into(), Clock::following_tokio());
        volumes
            .expand(&a, &volume, &resolved, &grown, &events)
            .await;
        assert_eq!(
            driver.calls().last().map(String::as_str),
            Some(r#"expand h1 2147483648 {"key": "val"}"#),
            "{code:?}"
        );
        let now = s.api.get(claim_path).unwrap();
        assert_eq!(
            now["status"]["allocatedResourceStatuses"], status,
            "{code:?}"
        );
        let types: Vec<_> = now["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(types, conditions, "{code:?}");
        if code == tonic::Code::OutOfRange {
            assert_eq!(
                now["status"]["conditions"][1]["message"],
                "failed to expand pvc with Expander.NodeExpand failed to expand the volume rpc error: code = OutOfRange desc = too big"
            );
            let e = told.recv().await.unwrap();
            assert_eq!(e.reason.as_deref(), Some(FILE_SYSTEM_RESIZE_FAILED));
            assert_eq!(
                e.message.as_deref(),
                Some(
                    r#"MountVolume.NodeExpandVolume failed for volume "pv-h1" : Expander.NodeExpand failed to expand the volume rpc error: code = OutOfRange desc = too big"#
                )
            );
        } else {
            assert!(told.try_recv().is_err(), "no event while in use");
        }
    }
}

/// NodeGetVolumeStats's BYTES and INODES as a volume's stats; a driver
/// without GET_VOLUME_STATS gives none.
#[tokio::test]
async fn a_drivers_volume_stats_are_its_bytes_and_inodes() {
    let s = Setup::new();
    let reports = FakeDriver {
        reports: true,
        ..Default::default()
    };
    s.driver("stats.csi", reports.clone());
    s.driver("quiet.csi", FakeDriver::default());
    let volumes = s.volumes();
    let at = std::time::SystemTime::UNIX_EPOCH;
    let fs = volumes
        .volume_stats("stats.csi", "h1", Path::new("/t/m"), at)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (fs.capacity_bytes, fs.used_bytes, fs.available_bytes),
        (Some(1 << 30), Some(1 << 20), Some((1 << 30) - (1 << 20)))
    );
    assert_eq!(
        (fs.inodes, fs.inodes_used, fs.inodes_free),
        (Some(1000), Some(10), Some(990))
    );
    assert_eq!(
        reports.calls().last().map(String::as_str),
        Some("stats h1 /t/m")
    );
    let none = volumes
        .volume_stats("quiet.csi", "h1", Path::new("/t/m"), at)
        .await
        .unwrap();
    assert_eq!(none, None);
}

/// A driver's final refusal leaves nothing for a tear-down to ask it about
/// (upstream's removeMountDir); a deadline or an unavailable driver leaves
/// `vol_data.json`, since the publish may still go on.
#[tokio::test]
async fn a_refused_publish_leaves_no_volume_behind_and_a_timeout_does() {
    for (code, kept) in [
        (tonic::Code::NotFound, false),
        (tonic::Code::Unavailable, true),
    ] {
        let s = Setup::new();
        let driver = FakeDriver {
            refuses: Some(code),
            ..Default::default()
        };
        s.driver("no.csi", driver.clone());
        s.api.put(
            "/apis/storage.k8s.io/v1/csidrivers/no.csi",
            serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": "no.csi"}, "spec": {"attachRequired": false}}),
        );
        let volumes = s.volumes();
        let err = volumes
            .set_up(
                &pod("a"),
                &s.pod_dir("a"),
                &persistent("no.csi", "h"),
                None,
                false,
            )
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("no such volume"), "{err}");
        let dir = s.pod_dir("a").join("volumes/kubernetes.io~csi/pv-h");
        assert_eq!(dir.join(VOL_DATA_FILE).exists(), kept, "{code:?}");
        volumes.tear_down_pod(&s.pod_dir("a")).await.unwrap();
        let unpublished = driver.calls().iter().any(|c| c.starts_with("unpublish"));
        assert_eq!(unpublished, kept, "{code:?}: {:?}", driver.calls());
    }
}

/// After a restart, the attachable volumes published on disk are in use
/// before any pod syncs: a persistent volume of a driver that attaches (no
/// CSIDriver: upstream's default) or of one whose CSIDriver cannot be read,
/// not an inline volume nor one of a driver that needs no attach.
#[tokio::test]
async fn published_attachable_volumes_are_in_use_at_start() {
    let s = Setup::new();
    s.api.put(
        "/apis/storage.k8s.io/v1/csidrivers/plain.csi",
        serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "plain.csi"}, "spec": {"attachRequired": false}}),
    );
    let publish = |uid: &str, name: &str, driver: &str, handle: &str, mode: &str| {
        let dir = s.pod_dir(uid).join("volumes/kubernetes.io~csi").join(name);
        std::fs::create_dir_all(dir.join("mount")).unwrap();
        let data = VolData {
            spec_vol_id: name.into(),
            volume_handle: handle.into(),
            driver_name: driver.into(),
            volume_lifecycle_mode: mode.into(),
            ..Default::default()
        };
        std::fs::write(dir.join(VOL_DATA_FILE), serde_json::to_vec(&data).unwrap()).unwrap();
    };
    publish("a", "pv-1", "disk.csi", "h1", "Persistent");
    publish("b", "pv-1", "disk.csi", "h1", "Persistent");
    publish("b", "pv-2", "plain.csi", "h2", "Persistent");
    publish("c", "scratch", "disk.csi", "csi-x", "Ephemeral");
    let volumes = s.volumes();
    volumes.reconstruct_in_use().await;
    assert_eq!(volumes.in_use.names(), ["kubernetes.io/csi/disk.csi^h1"]);
    // Still in use while pod b has it; gone with the last pod.
    s.driver("disk.csi", FakeDriver::default());
    s.driver("plain.csi", FakeDriver::default());
    volumes.tear_down_pod(&s.pod_dir("a")).await.unwrap();
    assert_eq!(volumes.in_use.names(), ["kubernetes.io/csi/disk.csi^h1"]);
    volumes.tear_down_pod(&s.pod_dir("b")).await.unwrap();
    assert!(volumes.in_use.names().is_empty());
}
