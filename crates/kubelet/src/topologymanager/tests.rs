//! The topology manager against the real device manager (a fake plugin
//! serving the real gRPC API, its devices on NUMA node 1), the static CPU
//! manager and the Static memory manager, on a made-up machine of two NUMA
//! nodes with two CPUs and 2Gi each.

use std::collections::BTreeSet;

use kubelet_core::cpumanager::Topology;
use kubelet_core::testing::{PodBuilder, container, resources};
use kubelet_plugin_api::deviceplugin as api;
use kubelet_plugin_api::fake::{FakeDevicePlugin, device};
use kubelet_tasks::Tasks;
use tokio_util::sync::CancellationToken;

use kubelet_core::types::PodUid;

use super::*;
use crate::cpumanager::CpuSettings;
use crate::devicemanager::{listen, serve};
use crate::memorymanager::MemorySettings;
use crate::testutil::until;
use kubelet_core::memorymanager::{NodeMemory, Reservation};

const GPU: &str = "example.com/gpu";

/// CPUs 0-1 on NUMA node 0, 2-3 on node 1; each its own core.
fn two_nodes() -> (Topology, NumaInfo) {
    let cpus = Topology::from_sysfs(&(0..4).collect(), &[0, 1], |p| match p {
        "node/node0/cpulist" => Some("0-1\n".into()),
        "node/node1/cpulist" => Some("2-3\n".into()),
        _ => None,
    });
    (cpus, NumaInfo::from_sysfs(&[0, 1], |_| None))
}

/// The Static memory manager on 2Gi per node, 256Mi of node 0 kept for
/// the system.
fn memory_manager(root: &std::path::Path, metrics: &KubeletMetrics) -> MemoryManager {
    let mi = 1 << 20;
    let nodes = (0..2)
        .map(|id| NodeMemory {
            id,
            memory: 2 << 30,
            hugepages: Vec::new(),
        })
        .collect();
    let memory = MemoryManager::new(
        MemorySettings {
            policy: "Static".into(),
            reservations: vec![Reservation {
                numa_node: 0,
                limits: [("memory".to_owned(), (256 * mi, true))].into(),
            }],
            allocatable_reservation: [("memory".to_owned(), 256 * mi)].into(),
        },
        nodes,
        root,
        metrics.clone(),
    );
    memory.start().unwrap();
    memory
}

struct Node {
    _root: tempfile::TempDir,
    topology: TopologyManager,
    cpus: CpuManager,
    devices: DeviceManager,
    memory: MemoryManager,
    metrics: KubeletMetrics,
    cancel: CancellationToken,
}

impl Node {
    /// A node under `policy` and `scope`, CPU 0 reserved, with a plugin
    /// serving two GPUs on NUMA node 1.
    async fn start(policy: &str, scope: &str) -> Node {
        let root = tempfile::tempdir().unwrap();
        let metrics = KubeletMetrics::new("n1");
        let (cpu_topology, numa) = two_nodes();
        let cpus = CpuManager::new(
            CpuSettings {
                policy: "static".into(),
                reserve_millis: 1000,
                ..Default::default()
            },
            cpu_topology,
            root.path(),
            metrics.clone(),
        );
        cpus.start().unwrap();
        let memory = memory_manager(root.path(), &metrics);
        let devices = DeviceManager::new(root.path(), metrics.clone(), Default::default(), None);
        let cancel = CancellationToken::new();
        let listener = listen(devices.dir()).unwrap();
        tokio::spawn(serve(
            listener,
            devices.clone(),
            Tasks::new(cancel.clone()),
            cancel.clone(),
        ));
        let on_node_1 = |id: &str| api::Device {
            topology: Some(api::TopologyInfo {
                nodes: vec![api::NumaNode { id: 1 }],
            }),
            ..device(id, api::HEALTHY)
        };
        let plugin = FakeDevicePlugin::new(GPU, vec![on_node_1("g1"), on_node_1("g2")]);
        plugin.start(devices.dir(), "gpu.sock").await.unwrap();
        until("the GPUs registered", || {
            devices.capacity().allocatable.get(GPU) == Some(&2)
        })
        .await;
        let topology = TopologyManager::new(
            TopologySettings {
                policy: policy.into(),
                scope: scope.into(),
                options: Default::default(),
            },
            numa,
            (devices.clone(), cpus.clone(), memory.clone()),
            metrics.clone(),
        );
        topology.start().unwrap();
        Node {
            _root: root,
            topology,
            cpus,
            devices,
            memory,
            metrics,
            cancel,
        }
    }

    async fn admit(&self, pod: &Pod, active: &[&Pod]) -> Result<(), Rejection> {
        let active: Vec<Arc<Pod>> = active.iter().map(|p| Arc::new((*p).clone())).collect();
        self.topology.admit(pod, &active).await
    }

    fn cpus_of(&self, pod: &Pod, name: &str) -> BTreeSet<i64> {
        self.cpus
            .exclusive(PodUid::of(pod).as_str(), name)
            .into_iter()
            .collect()
    }

    /// The `cpuset.mems` of `pod`'s first container.
    fn mems_of(&self, pod: &Pod) -> Option<String> {
        let c = &pod.spec.as_ref().unwrap().containers[0];
        self.memory.cpuset_mems(pod, c)
    }

    fn devices_of(&self, pod: &Pod, name: &str) -> Vec<String> {
        self.devices
            .container_devices(&PodUid::of(pod), name)
            .into_iter()
            .map(|d| d.id)
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A Guaranteed container asking `cpu` CPUs and `gpus` GPUs.
fn asking(name: &str, cpu: &str, gpus: &str) -> Container {
    asking_memory(name, cpu, gpus, "64Mi")
}

/// ... and `memory`.
fn asking_memory(name: &str, cpu: &str, gpus: &str, memory: &str) -> Container {
    let mut limits = vec![("cpu", cpu), ("memory", memory)];
    if gpus != "0" {
        limits.push((GPU, gpus));
    }
    Container {
        resources: Some(resources(&[], &limits)),
        ..container(name)
    }
}

fn pod(uid: &str, containers: Vec<Container>) -> Pod {
    containers
        .into_iter()
        .fold(PodBuilder::new(uid).uid(uid), PodBuilder::container)
        .build()
}

#[tokio::test]
async fn single_numa_node_puts_a_containers_cpus_beside_its_device_or_refuses_it() {
    let node = Node::start("single-numa-node", "container").await;
    // Packed, the CPU would be 1 (node 0, beside the reserved CPU); aligned
    // with the GPU it is on node 1.
    let first = pod("first", vec![asking("app", "1", "1")]);
    node.admit(&first, &[&first]).await.unwrap();
    let cpus = node.cpus_of(&first, "app");
    assert!(cpus == [2].into() || cpus == [3].into(), "{cpus:?}");
    assert_eq!(node.devices_of(&first, "app").len(), 1);
    // Its memory too.
    assert_eq!(node.mems_of(&first).as_deref(), Some("1"));
    // Two CPUs and a GPU: node 1 has one CPU left, node 0 has no GPU.
    let second = pod("second", vec![asking("app", "2", "1")]);
    let refused = node.admit(&second, &[&first, &second]).await.unwrap_err();
    assert_eq!(
        (refused.reason.as_str(), refused.message.as_str()),
        (
            "TopologyAffinityError",
            "Resources cannot be allocated with Topology locality"
        )
    );
    assert!(node.cpus_of(&second, "app").is_empty(), "nothing allocated");
    assert!(node.devices_of(&second, "app").is_empty());
    // A container without devices or exclusive CPUs has no preference.
    let plain = pod("plain", vec![container("app")]);
    node.admit(&plain, &[&first, &plain]).await.unwrap();
    let m = &node.metrics;
    let labels = ["container", "numa_node"];
    assert_eq!(m.container_aligned_compute_resources.get(&labels), 2.0);
    assert_eq!(
        m.container_aligned_compute_resources_failures.get(&labels),
        1.0
    );
    assert_eq!(m.topology_manager_admission_requests.get(&[]), 3.0);
    assert_eq!(m.topology_manager_admission_errors.get(&[]), 1.0);
}

#[tokio::test]
async fn best_effort_admits_what_cannot_be_aligned_and_restricted_refuses_it() {
    for (policy, admitted) in [("best-effort", true), ("restricted", false)] {
        let node = Node::start(policy, "container").await;
        let first = pod("first", vec![asking("app", "1", "1")]);
        node.admit(&first, &[&first]).await.unwrap();
        let second = pod("second", vec![asking("app", "2", "1")]);
        let result = node.admit(&second, &[&first, &second]).await;
        assert_eq!(result.is_ok(), admitted, "{policy}: {result:?}");
        if admitted {
            // Its GPU is the other one on node 1, its CPUs as many as fit.
            assert_eq!(node.cpus_of(&second, "app").len(), 2);
            assert_eq!(node.devices_of(&second, "app").len(), 1);
        }
    }
}

#[tokio::test]
async fn the_pod_scope_puts_every_container_on_one_node() {
    // The pod scope places the pod's CPUs together: three fit on no node
    // (refused); two over two containers go to node 1 together, where
    // container by container the first would have taken CPU 1 (packed
    // beside the reserved CPU, on node 0).
    let node = Node::start("single-numa-node", "pod").await;
    let split = pod("split", vec![asking("a", "1", "0"), asking("b", "2", "0")]);
    assert!(node.admit(&split, &[&split]).await.is_err());
    let together = pod(
        "together",
        vec![asking("a", "1", "0"), asking("b", "1", "0")],
    );
    node.admit(&together, &[&together]).await.unwrap();
    let both: BTreeSet<i64> = node
        .cpus_of(&together, "a")
        .union(&node.cpus_of(&together, "b"))
        .copied()
        .collect();
    assert_eq!(both, [2, 3].into(), "both on node 1, the one with two free");
    let labels = ["pod", "numa_node"];
    assert_eq!(
        node.metrics
            .container_aligned_compute_resources
            .get(&labels),
        1.0
    );
    assert_eq!(
        node.metrics
            .container_aligned_compute_resources_failures
            .get(&labels),
        1.0
    );
}

#[tokio::test]
async fn memory_no_single_node_has_is_refused_or_spread_as_the_policy_says() {
    // 3Gi fits on both nodes together only: single-numa-node refuses it,
    // best-effort puts it beside the GPU and extends it over both nodes.
    for (policy, admitted) in [("single-numa-node", false), ("best-effort", true)] {
        let node = Node::start(policy, "container").await;
        let big = pod("big", vec![asking_memory("app", "1", "1", "3Gi")]);
        let result = node.admit(&big, &[&big]).await;
        match result {
            Ok(()) => {
                assert!(admitted, "{policy}");
                assert_eq!(node.mems_of(&big).as_deref(), Some("0,1"));
            }
            Err(r) => {
                assert!(!admitted, "{policy}: {r:?}");
                assert_eq!(r.reason, "TopologyAffinityError");
                assert_eq!(node.mems_of(&big), None);
            }
        }
    }
    // More than the node has: no hint, and no memory to give at all, under
    // any policy (upstream's untyped allocation error).
    let node = Node::start("none", "container").await;
    let huge = pod("huge", vec![asking_memory("app", "1", "0", "5Gi")]);
    let refused = node.admit(&huge, &[&huge]).await.unwrap_err();
    assert_eq!(
        (refused.reason.as_str(), refused.message.as_str()),
        (
            "UnexpectedAdmissionError",
            "Allocate failed due to [memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available, which is unexpected"
        )
    );
    let m = &node.metrics;
    assert_eq!(m.memory_manager_pinning_requests.get(&[]), 1.0);
    assert_eq!(m.memory_manager_pinning_errors.get(&[]), 1.0);
    // Once it is gone (the sources ready), the CPU it was given returns: a
    // pod that needs every free CPU and 1Gi is admitted.
    let ready = crate::config::SourcesReady::default();
    ready.mark_ready();
    node.cpus.watch_sources(ready.clone());
    node.memory.watch_sources(ready);
    let after = pod("after", vec![asking_memory("app", "3", "0", "1Gi")]);
    node.admit(&after, &[&after]).await.unwrap();
    assert_eq!(node.mems_of(&after).as_deref(), Some("0"));
}

#[test]
fn start_refuses_bad_options_in_upstreams_words() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = KubeletMetrics::new("n1");
    let (cpu_topology, numa) = two_nodes();
    let cpus = CpuManager::new(
        CpuSettings::default(),
        cpu_topology,
        dir.path(),
        metrics.clone(),
    );
    let devices = DeviceManager::new(dir.path(), metrics.clone(), Default::default(), None);
    let memory = MemoryManager::new(Default::default(), Vec::new(), dir.path(), metrics.clone());
    let manager = |policy: &str, options: &[(&str, &str)]| {
        TopologyManager::new(
            TopologySettings {
                policy: policy.into(),
                scope: "container".into(),
                options: options
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
            numa.clone(),
            (devices.clone(), cpus.clone(), memory.clone()),
            metrics.clone(),
        )
    };
    assert_eq!(
        manager("restricted", &[("max-allowable-numa-nodes", "2")]).start(),
        Err(r#"the minimum value of "max-allowable-numa-nodes" should not be less than 8"#.into())
    );
    assert_eq!(
        manager("best-effort", &[("prefer-closest-numa-nodes", "true")]).start(),
        Err("cannot discover NUMA topology: error getting NUMA distances from cadvisor".into())
    );
    // Under none the options have no effect, as upstream's.
    assert_eq!(manager("none", &[("bogus", "1")]).start(), Ok(()));
    assert_eq!(
        metrics
            .container_aligned_compute_resources
            .get(&["container", "numa_node"]),
        0.0
    );
}
