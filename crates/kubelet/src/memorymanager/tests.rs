use kubelet_core::testing::{PodBuilder, container, resources};

use kubelet_core::topologymanager::BitMask;

use super::*;

const MI: i64 = 1 << 20;

/// One NUMA node of 2Gi, 128Mi kept for the system.
fn settings(reserved_mi: i64) -> MemorySettings {
    MemorySettings {
        policy: STATIC.into(),
        reservations: vec![Reservation {
            numa_node: 0,
            limits: [("memory".to_owned(), (reserved_mi * MI, true))].into(),
        }],
        allocatable_reservation: [("memory".to_owned(), reserved_mi * MI)].into(),
    }
}

fn node() -> Vec<NodeMemory> {
    vec![NodeMemory {
        id: 0,
        memory: 2 << 30,
        hugepages: Vec::new(),
    }]
}

fn manager(dir: &Path, settings: MemorySettings) -> MemoryManager {
    MemoryManager::new(settings, node(), dir, KubeletMetrics::new("n"))
}

fn guaranteed(name: &str, memory: &str) -> Container {
    let list = [("cpu", "1"), ("memory", memory)];
    Container {
        resources: Some(resources(&list, &list)),
        ..container(name)
    }
}

#[test]
fn an_allocation_survives_a_restart_and_init_memory_returns_once_the_app_starts() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), settings(128));
    m.start().unwrap();
    let pod = PodBuilder::new("p")
        .uid("uid-p")
        .init_container(guaranteed("init", "1Gi"))
        .container(guaranteed("app", "512Mi"))
        .build();
    let spec = pod.spec.as_ref().unwrap();
    let (init, app) = (
        &spec.init_containers.as_ref().unwrap()[0],
        &spec.containers[0],
    );
    for c in [init, app] {
        m.allocate(&pod, c, Hint::default()).unwrap();
    }
    assert_eq!(m.cpuset_mems(&pod, app).as_deref(), Some("0"));
    let held = |m: &MemoryManager| -> Vec<u64> {
        ["init", "app"]
            .iter()
            .map(|n| m.memory("uid-p", n).iter().map(|b| b.size).sum())
            .collect()
    };
    // The app reused 512Mi of the init container's 1Gi.
    assert_eq!(held(&m), [512 << 20, 512 << 20]);
    assert_eq!(m.0.metrics.memory_manager_pinning_requests.get(&[]), 2.0);
    assert_eq!(m.0.metrics.memory_manager_pinning_errors.get(&[]), 0.0);

    // A restart (kill -9): the same blocks, the same hints, valid.
    let again = manager(dir.path(), settings(128));
    again.start().unwrap();
    assert_eq!(held(&again), held(&m));
    let hints = again.hints(&pod, app);
    assert_eq!(
        hints["memory"].as_ref().unwrap()[0].affinity,
        Some(BitMask::of([0]))
    );
    assert_eq!(again.allocatable()[0].size, (2 << 30) - (128 << 20));

    // The app created: the init container is done.
    again.created(&pod, app);
    assert_eq!(held(&again), [0, 512 << 20]);
}

#[test]
fn start_refuses_what_upstream_refuses_in_its_words() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(FILE).display().to_string();
    // None writes its file too; Static cannot start on it.
    manager(dir.path(), MemorySettings::default())
        .start()
        .unwrap();
    let bytes = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
    assert!(
        bytes.starts_with(r#"{"policyName":"None","machineState":{}"#),
        "{bytes}"
    );
    assert_eq!(
        manager(dir.path(), settings(128)).start(),
        Err(format!(
            r#"start memory manager error: could not restore state from checkpoint: [memorymanager] configured policy "Static" differs from state checkpoint policy "None", please drain this node and delete the memory manager checkpoint file {file:?} before restarting Kubelet"#
        ))
    );
    std::fs::remove_file(dir.path().join(FILE)).unwrap();
    // reservedMemory must add up to node allocatable's reservation.
    let mut unmatched = settings(128);
    unmatched.reservations.clear();
    assert_eq!(
        manager(dir.path(), unmatched).start(),
        Err(r#"the total amount "0" of type "memory" is not equal to the value "128Mi" determined by Node Allocatable feature"#.into())
    );
    // The reservation changed under a running pod's memory.
    let m = manager(dir.path(), settings(128));
    m.start().unwrap();
    let pod = PodBuilder::new("p")
        .uid("u")
        .container(guaranteed("app", "1Gi"))
        .build();
    m.allocate(
        &pod,
        &pod.spec.as_ref().unwrap().containers[0],
        Hint::default(),
    )
    .unwrap();
    assert_eq!(
        manager(dir.path(), settings(256)).start(),
        Err("start memory manager error: [memorymanager] the expected machine state is different from the real one".into())
    );
    // A corrupt file.
    std::fs::write(
        dir.path().join(FILE),
        b"{\"policyName\":\"Static\",\"checksum\":1}",
    )
    .unwrap();
    assert_eq!(
        manager(dir.path(), settings(128)).start(),
        Err(format!(
            "start memory manager error: could not restore state from checkpoint: checkpoint is corrupted, please drain this node and delete the memory manager checkpoint file {file:?} before restarting Kubelet"
        ))
    );
}
