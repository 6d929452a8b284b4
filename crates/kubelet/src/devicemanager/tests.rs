//! The device manager against fake device plugins serving the v1beta1 API
//! on sockets in a temporary device plugin directory, registering through
//! the kubelet's registration socket as a real plugin does.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::testing::{PodBuilder, container, resources};
use kubelet_plugin_api::fake::{FakeDevicePlugin, device, healthy, register};
use kubelet_tasks::Tasks;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::*;
use crate::testutil::until;

impl DeviceManager {
    /// Admission's allocation under the `none` topology manager policy:
    /// each container in turn, without affinity.
    async fn allocate_pod(&self, pod: &Pod, active: &[Arc<Pod>]) -> Result<(), DeviceError> {
        for c in init_and_regular_containers(pod) {
            self.allocate(pod, c, active, None).await?;
        }
        Ok(())
    }
}

const RESOURCE: &str = "example.com/resource";

/// A device manager serving its registration socket under a temporary
/// root directory.
struct Node {
    root: tempfile::TempDir,
    manager: DeviceManager,
    cancel: CancellationToken,
    capacity_changed: Arc<Notify>,
}

impl Node {
    fn start() -> Node {
        let root = tempfile::tempdir().unwrap();
        Node::start_in(root)
    }

    fn start_in(root: tempfile::TempDir) -> Node {
        let (tx, _rx) = mpsc::unbounded_channel();
        let capacity_changed = Arc::new(Notify::new());
        let manager = DeviceManager::new(
            root.path(),
            KubeletMetrics::new("n1"),
            capacity_changed.clone(),
            Some(tx),
        );
        let listener = listen(manager.dir()).unwrap();
        let cancel = CancellationToken::new();
        let tasks = Tasks::new(cancel.clone());
        tokio::spawn(serve(listener, manager.clone(), tasks, cancel.clone()));
        Node {
            root,
            manager,
            cancel,
            capacity_changed,
        }
    }

    /// The kubelet stops and starts again on the same root directory.
    fn restart(self) -> Node {
        self.cancel.cancel();
        Node::start_in(self.root)
    }

    fn dir(&self) -> PathBuf {
        self.manager.dir().to_path_buf()
    }

    async fn register(&self, version: &str, resource: &str, endpoint: &str) -> Result<(), Status> {
        register(&self.dir(), version, resource, endpoint).await
    }

    /// `plugin` serving at `name`, registered.
    async fn plugin(&self, name: &str, plugin: &FakeDevicePlugin) {
        plugin.start(&self.dir(), name).await.unwrap();
    }

    async fn capacity_is(&self, capacity: i64, allocatable: i64) {
        until(
            &format!("capacity {capacity}, allocatable {allocatable}"),
            || {
                let c = self.manager.capacity();
                c.capacity.get(RESOURCE) == Some(&capacity)
                    && c.allocatable.get(RESOURCE) == Some(&allocatable)
            },
        )
        .await;
    }
}

fn pod_asking(name: &str, uid: &str, n: &str) -> Pod {
    PodBuilder::new(name)
        .namespace("default")
        .uid(uid)
        .container({
            let mut c = container("app");
            c.resources = Some(resources(&[], &[(RESOURCE, n)]));
            c
        })
        .build()
}

fn app(pod: &Pod) -> &Container {
    &pod.spec.as_ref().unwrap().containers[0]
}

#[tokio::test]
async fn registration_refuses_bad_requests_in_upstreams_words() {
    let node = Node::start();
    let e = node
        .register("v1alpha", RESOURCE, "p.sock")
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);
    assert_eq!(
        e.message(),
        r#"requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]"#
    );
    let e = node
        .register(api::VERSION, "gpu", "p.sock")
        .await
        .unwrap_err();
    assert_eq!(e.message(), r#"the ResourceName "gpu" is invalid"#);
    let e = node
        .register(api::VERSION, RESOURCE, "../../escape.sock")
        .await
        .unwrap_err();
    assert!(e.message().contains("not a socket name"), "{}", e.message());
    let e = node
        .register(api::VERSION, RESOURCE, "absent.sock")
        .await
        .unwrap_err();
    assert!(
        e.message().starts_with("failed to dial device plugin:"),
        "{}",
        e.message()
    );
    // Registering twice from one socket.
    let plugin = FakeDevicePlugin::new(RESOURCE, healthy(&["a"]));
    node.plugin("p.sock", &plugin).await;
    let e = node
        .register(api::VERSION, RESOURCE, "p.sock")
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        format!(
            "device plugin already connected: {}",
            node.dir().join("p.sock").display()
        )
    );
    node.capacity_is(1, 1).await;
    plugin.gone.cancel();
}

#[tokio::test]
async fn devices_become_capacity_and_health_allocatable_until_the_plugin_goes() {
    let node = Node::start();
    let plugin = FakeDevicePlugin::new(RESOURCE, healthy(&["a", "b"]));
    let notified = node.capacity_changed.clone();
    let woken = tokio::spawn(async move { notified.notified().await });
    node.plugin("p.sock", &plugin).await;
    woken.await.unwrap();
    node.capacity_is(2, 2).await;
    plugin
        .devices
        .send_replace(vec![device("a", api::HEALTHY), device("b", api::UNHEALTHY)]);
    node.capacity_is(2, 1).await;
    // Ten thousand devices are ten thousand.
    let many: Vec<String> = (0..10_000).map(|i| format!("d{i}")).collect();
    plugin
        .devices
        .send_replace(many.iter().map(|id| device(id, api::HEALTHY)).collect());
    node.capacity_is(10_000, 10_000).await;
    // The plugin stops: its devices are unhealthy, the resource stays for
    // the grace period.
    plugin.gone.cancel();
    node.capacity_is(10_000, 0).await;
    assert!(node.manager.capacity().removed.is_empty());
}

#[tokio::test]
async fn a_pod_gets_its_devices_and_keeps_them_across_a_restart() {
    let node = Node::start();
    let mut plugin = FakeDevicePlugin::new(RESOURCE, healthy(&["a", "b", "c"]));
    plugin.options.pre_start_required = true;
    plugin.options.get_preferred_allocation_available = true;
    plugin.preferred = vec!["c".into(), "a".into()];
    node.plugin("p.sock", &plugin).await;
    node.capacity_is(3, 3).await;
    let pod = pod_asking("gpu", "uid-1", "2");
    assert!(node.manager.wants_devices(&pod));
    node.manager
        .allocate_pod(&pod, &[Arc::new(pod.clone())])
        .await
        .unwrap();
    // The plugin's preference is taken.
    assert_eq!(*plugin.allocations.lock(), vec![vec!["a", "c"]]);
    let opts = node.manager.run_options(&pod, app(&pod)).await.unwrap();
    assert_eq!(*plugin.pre_starts.lock(), vec![vec!["a", "c"]]);
    assert_eq!(opts.envs, vec![("DEVICES".into(), "a,c".into())]);
    assert_eq!(
        opts.mounts
            .iter()
            .map(|m| (m.container_path.as_str(), m.host_path.as_str(), m.readonly))
            .collect::<Vec<_>>(),
        [
            ("/dev/fake/a", "/tmp/a", true),
            ("/dev/fake/c", "/tmp/c", true)
        ]
    );
    assert_eq!(
        opts.annotations,
        vec![("fake/allocated".into(), "yes".into())]
    );
    assert_eq!(
        opts.cdi_devices,
        [format!("{RESOURCE}=CDI-a"), format!("{RESOURCE}=CDI-c")]
    );
    let listed: Vec<String> = node
        .manager
        .container_devices(&PodUid::from("uid-1"), "app")
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(listed, ["a", "c"]);
    // Another pod for two more: one is left.
    let other = pod_asking("other", "uid-2", "2");
    let e = node
        .manager
        .allocate_pod(&other, &[Arc::new(pod.clone()), Arc::new(other.clone())])
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "requested number of devices unavailable for example.com/resource. Requested: 2, Available: 1"
    );
    // The checkpoint is upstream's file.
    let data = Data::decode(&std::fs::read(node.dir().join(checkpoint::FILE)).unwrap()).unwrap();
    let entries = data.pod_device_entries.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (
            entries[0].pod_uid.as_str(),
            entries[0].container_name.as_str()
        ),
        ("uid-1", "app")
    );
    // The kubelet restarts (the plugin is not back): the pod keeps its
    // devices, admitted again without its plugin, started with the same.
    plugin.gone.cancel();
    let again = node.restart();
    again
        .manager
        .allocate_pod(&pod, &[Arc::new(pod.clone())])
        .await
        .unwrap();
    let restored = again.manager.run_options(&pod, app(&pod)).await.unwrap();
    assert_eq!(restored, opts);
    // Its resource is known, without devices, until its plugin is back.
    let c = again.manager.capacity();
    assert_eq!(c.capacity.get(RESOURCE), Some(&0));
}

#[tokio::test]
async fn devices_of_pods_gone_are_taken_again_and_a_failed_allocate_takes_none() {
    let node = Node::start();
    let plugin = FakeDevicePlugin::new(RESOURCE, healthy(&["a"]));
    node.plugin("p.sock", &plugin).await;
    node.capacity_is(1, 1).await;
    let first = pod_asking("first", "uid-1", "1");
    node.manager
        .allocate_pod(&first, &[Arc::new(first.clone())])
        .await
        .unwrap();
    // The plugin fails mid-Allocate: nothing is recorded.
    *plugin.fail.lock() = Some(Status::unavailable("plugin is going away"));
    let second = pod_asking("second", "uid-2", "1");
    let e = node
        .manager
        .allocate_pod(&second, &[Arc::new(second.clone())])
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "rpc error: code = Unavailable desc = plugin is going away"
    );
    assert!(
        node.manager
            .container_devices(&PodUid::from("uid-2"), "app")
            .is_empty()
    );
    // The first pod is no longer active: its device goes to the second.
    *plugin.fail.lock() = None;
    node.manager
        .allocate_pod(&second, &[Arc::new(second.clone())])
        .await
        .unwrap();
    assert!(
        node.manager
            .container_devices(&PodUid::from("uid-1"), "app")
            .is_empty()
    );
    assert_eq!(
        node.manager
            .container_devices(&PodUid::from("uid-2"), "app")
            .len(),
        1
    );
    plugin.gone.cancel();
}

#[tokio::test]
async fn an_init_containers_devices_are_reused_by_the_containers_after_it() {
    let node = Node::start();
    let plugin = FakeDevicePlugin::new(RESOURCE, healthy(&["a"]));
    node.plugin("p.sock", &plugin).await;
    node.capacity_is(1, 1).await;
    let with_limit = |name: &str| {
        let mut c = container(name);
        c.resources = Some(resources(&[], &[(RESOURCE, "1")]));
        c
    };
    let pod = PodBuilder::new("p")
        .uid("uid-1")
        .init_container(with_limit("setup"))
        .container(with_limit("app"))
        .build();
    node.manager
        .allocate_pod(&pod, &[Arc::new(pod.clone())])
        .await
        .unwrap();
    assert_eq!(*plugin.allocations.lock(), vec![vec!["a"], vec!["a"]]);
    plugin.gone.cancel();
}

#[tokio::test]
async fn a_corrupt_checkpoint_is_logged_and_the_manager_starts_empty() {
    let root = tempfile::tempdir().unwrap();
    checkpoint_with_an_allocation(root.path());
    let dir = root.path().join(DIR);
    let file = dir.join(checkpoint::FILE);
    // The data changed, its checksum not.
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("\"d1\"", "\"d2\"");
    std::fs::write(&file, text).unwrap();
    // A plugin's socket left from before.
    drop(std::os::unix::net::UnixListener::bind(dir.join("old.sock")).unwrap());
    let node = Node::start_in(root);
    assert_eq!(node.manager.capacity(), ExtendedResources::default());
    assert!(
        node.manager
            .container_devices(&PodUid::from("u1"), "c")
            .is_empty()
    );
    // Sockets left are removed, the checkpoint kept.
    assert!(!node.dir().join("old.sock").exists());
    assert!(node.dir().join(SOCKET).exists());
    assert!(node.dir().join(checkpoint::FILE).exists());
}

#[test]
fn responses_merge_as_upstreams_first_value_wins() {
    let one = api::ContainerAllocateResponse {
        envs: HashMap::from([("A".into(), "1".into())]),
        mounts: vec![api::Mount {
            container_path: "/m".into(),
            host_path: "/h1".into(),
            read_only: false,
        }],
        devices: vec![api::DeviceSpec {
            container_path: "/dev/x".into(),
            host_path: "/dev/x1".into(),
            permissions: "rw".into(),
        }],
        annotations: HashMap::from([("k".into(), "1".into())]),
        cdi_devices: vec![api::CdiDevice {
            name: "v/c=x".into(),
        }],
    };
    let two = api::ContainerAllocateResponse {
        envs: HashMap::from([("A".into(), "2".into()), ("B".into(), "2".into())]),
        mounts: vec![api::Mount {
            container_path: "/m".into(),
            host_path: "/h2".into(),
            read_only: true,
        }],
        devices: vec![api::DeviceSpec {
            container_path: "/dev/x".into(),
            host_path: "/dev/x2".into(),
            permissions: "r".into(),
        }],
        annotations: HashMap::from([("k".into(), "2".into())]),
        cdi_devices: vec![api::CdiDevice {
            name: "v/c=x".into(),
        }],
    };
    let merged = merge_responses([&one, &two].into_iter());
    assert_eq!(
        merged.envs,
        vec![("A".into(), "1".into()), ("B".into(), "2".into())]
    );
    assert_eq!(merged.mounts.len(), 1);
    assert_eq!(merged.mounts[0].host_path, "/h1");
    assert_eq!(merged.devices.len(), 1);
    assert_eq!(merged.devices[0].host_path, "/dev/x1");
    assert_eq!(merged.annotations, vec![("k".into(), "1".into())]);
    assert_eq!(merged.cdi_devices, ["v/c=x"]);
}

/// A checkpoint of upstream's format with resource `r` (healthy device
/// d1 registered) and pod u1's container c holding d1.
fn checkpoint_with_an_allocation(root: &Path) {
    let dir = root.join(DIR);
    std::fs::create_dir_all(&dir).unwrap();
    let data = Data {
        pod_device_entries: Some(vec![PodDevicesEntry {
            pod_uid: "u1".into(),
            container_name: "c".into(),
            resource_name: "example.com/r".into(),
            device_ids: Some([(NO_TOPOLOGY, Some(vec!["d1".into()]))].into()),
            alloc_resp: Some(Vec::new()),
        }]),
        registered_devices: Some([("example.com/r".into(), Some(vec!["d1".into()]))].into()),
    };
    std::fs::write(dir.join(checkpoint::FILE), data.encode().unwrap()).unwrap();
}

/// A resource read from the checkpoint whose plugin never comes back is
/// gone after upstream's 5 minutes: removed from capacity, reported so.
#[tokio::test(start_paused = true)]
async fn a_resource_without_its_plugin_goes_after_the_grace_period() {
    let root = tempfile::tempdir().unwrap();
    checkpoint_with_an_allocation(root.path());
    let manager = DeviceManager::new(root.path(), KubeletMetrics::new("n1"), Arc::default(), None);
    assert!(!manager.fresh());
    let c = manager.capacity();
    assert_eq!(c.capacity.get("example.com/r"), Some(&0));
    assert!(c.removed.is_empty());
    tokio::time::advance(GRACE - Duration::from_secs(1)).await;
    assert!(manager.capacity().removed.is_empty());
    tokio::time::advance(Duration::from_secs(2)).await;
    let c = manager.capacity();
    assert_eq!(c.removed, ["example.com/r"]);
    assert!(c.capacity.is_empty());
    // Once: the next status has nothing to remove.
    assert!(manager.capacity().removed.is_empty());
}

/// A held device turning unhealthy syncs its pod (ResourceHealthStatus),
/// whose container's status then says so.
#[tokio::test]
async fn a_held_devices_health_change_syncs_its_pod() {
    let root = tempfile::tempdir().unwrap();
    checkpoint_with_an_allocation(root.path());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let manager = DeviceManager::new(
        root.path(),
        KubeletMetrics::new("n1"),
        Arc::default(),
        Some(tx),
    );
    assert!(manager.reports_health());
    manager.update_devices("example.com/r", vec![device("d1", api::HEALTHY)]);
    assert_eq!(rx.recv().await, Some(PodUid::from("u1")));
    let uid = PodUid::from("u1");
    assert_eq!(
        manager.allocated_resources_status(&uid, "c")[0]
            .resources
            .as_ref()
            .unwrap()[0]
            .health
            .as_deref(),
        Some("Healthy")
    );
    manager.update_devices("example.com/r", vec![device("d1", api::UNHEALTHY)]);
    assert_eq!(rx.recv().await, Some(PodUid::from("u1")));
    let status = manager.allocated_resources_status(&uid, "c");
    assert_eq!(status[0].name, "example.com/r");
    let health = &status[0].resources.as_ref().unwrap()[0];
    assert_eq!(
        (health.resource_id.as_str(), health.health.as_deref()),
        ("d1", Some("Unhealthy"))
    );
    // No change, no sync.
    manager.update_devices("example.com/r", vec![device("d1", api::UNHEALTHY)]);
    assert!(rx.try_recv().is_err());
}
