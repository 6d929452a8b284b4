use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::*;
use crate::testing::{PodBuilder, container, resources};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

/// The files v1.37.2's own state package wrote as its Static policy
/// (NewPolicyStatic, Start, Allocate, RemoveContainer) went through
/// [`upstream_scenario`] on [`machine`]: None's fresh file, then Static's
/// after start, pod-a, pod-b, pod-d and the two removals.
const UPSTREAM: &str = include_str!("upstream_states.jsonl");

/// Two NUMA nodes of 8Gi; node 0 has eight 2Mi hugepages; both list both
/// sizes, as sysfs does.
fn machine() -> Vec<NodeMemory> {
    vec![
        NodeMemory {
            id: 0,
            memory: 8 * GI,
            hugepages: vec![(2048, 8), (1_048_576, 0)],
        },
        NodeMemory {
            id: 1,
            memory: 8 * GI,
            hugepages: vec![(2048, 0), (1_048_576, 0)],
        },
    ]
}

fn policy() -> StaticPolicy {
    let reserved = Reserved::from([
        (0, BTreeMap::from([("memory".to_owned(), 512 * MI)])),
        (1, BTreeMap::from([("memory".to_owned(), 256 * MI)])),
    ]);
    StaticPolicy::new(machine(), reserved).unwrap()
}

/// A Guaranteed container: 1 CPU and `memory` (and 2Mi hugepages).
fn guaranteed(name: &str, memory: &str, huge: Option<&str>) -> Container {
    let mut list = vec![("cpu", "1"), ("memory", memory)];
    if let Some(h) = huge {
        list.push(("hugepages-2Mi", h));
    }
    Container {
        resources: Some(resources(&list, &list)),
        ..container(name)
    }
}

fn pod(uid: &str, init: Vec<Container>, containers: Vec<Container>) -> Pod {
    PodBuilder::new(uid)
        .uid(uid)
        .init_containers(init)
        .containers(containers)
        .build()
}

/// Hints as the golden program printed them: `resource: mask/preferred`.
fn shown(hints: &ProviderHints) -> String {
    hints
        .iter()
        .map(|(k, v)| {
            let list: Vec<String> = v
                .iter()
                .flatten()
                .map(|h| format!("{}/{}", h.affinity.unwrap(), h.preferred))
                .collect();
            format!("{k}: {}", list.join(" "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The same steps the golden program took, with the hints and errors it
/// printed; the states after each step checked against its files.
#[test]
fn the_static_policy_places_and_writes_as_upstreams() {
    let files: Vec<&str> = UPSTREAM.lines().collect();
    // Each golden file reads back (its checksums verified) and is written
    // again byte for byte.
    for f in &files {
        let policy_name = if f.contains(r#""policyName":"None""#) {
            NONE
        } else {
            STATIC
        };
        let state = MemoryState::restore(f.as_bytes(), policy_name).unwrap();
        assert_eq!(String::from_utf8(state.encode()).unwrap(), *f);
    }
    let golden = |i: usize| MemoryState::restore(files[i].as_bytes(), STATIC).unwrap();
    // Upstream writes a container's blocks in Go's map order: compare them
    // sorted.
    let normal = |mut s: MemoryState| {
        for cs in s.entries.values_mut() {
            for blocks in cs.values_mut() {
                blocks.sort_by(|a, b| a.kind.cmp(&b.kind));
            }
        }
        s
    };
    assert_eq!(MemoryState::new(NONE).encode(), files[0].as_bytes());

    let p = policy();
    let mut state = MemoryState::new(STATIC);
    let mut reusable = Reusable::new();
    p.validate(&mut state).unwrap();
    assert_eq!(state, golden(1));

    let a = pod("pod-a", vec![], vec![guaranteed("c1", "1Gi", None)]);
    let c = &a.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        shown(&p.hints(&state, &reusable, "pod-a", &a, c)),
        "memory: 01/true 10/true 11/false"
    );
    let none = Hint::default();
    assert_eq!(
        p.allocate(&mut state, &mut reusable, ("pod-a", &a, c), none),
        Ok(Pinning::Pinned)
    );
    assert_eq!(state, golden(2));

    let b = pod(
        "pod-b",
        vec![guaranteed("init", "3Gi", None)],
        vec![
            guaranteed("app", "2Gi", Some("4Mi")),
            guaranteed("side", "1Gi", None),
        ],
    );
    assert_eq!(
        shown(&p.pod_hints(&state, &reusable, "pod-b", &b)),
        "hugepages-2Mi: 01/true; memory: 01/true"
    );
    let want = [
        "memory: 01/true 10/true",
        "hugepages-2Mi: 01/true; memory: 01/true",
        "memory: 01/true 10/true",
    ];
    for (c, want) in init_and_regular_containers(&b).zip(want) {
        assert_eq!(
            shown(&p.hints(&state, &reusable, "pod-b", &b, c)),
            want,
            "{}",
            c.name
        );
        assert_eq!(
            p.allocate(&mut state, &mut reusable, ("pod-b", &b, c), none),
            Ok(Pinning::Pinned)
        );
    }
    assert_eq!(normal(state.clone()), normal(golden(3)));

    // Too big for one node, and node 0 is used alone already: no hint, and
    // no default affinity.
    let big = pod("pod-c", vec![], vec![guaranteed("big", "10Gi", None)]);
    let c = &big.spec.as_ref().unwrap().containers[0];
    assert_eq!(shown(&p.hints(&state, &reusable, "pod-c", &big, c)), "");
    assert_eq!(
        p.allocate(&mut state, &mut reusable, ("pod-c", &big, c), none),
        Err("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available".into())
    );

    // The topology manager's hint is followed.
    let d = pod("pod-d", vec![], vec![guaranteed("c1", "7Gi", None)]);
    let c = &d.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        shown(&p.hints(&state, &reusable, "pod-d", &d, c)),
        "memory: 10/true"
    );
    let node1 = Hint {
        affinity: Some(BitMask::of([1])),
        preferred: true,
    };
    assert_eq!(
        p.allocate(&mut state, &mut reusable, ("pod-d", &d, c), node1),
        Ok(Pinning::Pinned)
    );
    assert_eq!(normal(state.clone()), normal(golden(4)));
    // Held already: nothing changes.
    let before = state.clone();
    assert_eq!(
        p.allocate(&mut state, &mut reusable, ("pod-d", &d, c), node1),
        Ok(Pinning::Held)
    );
    assert_eq!(state, before);

    assert!(p.remove(&mut state, "pod-a", "c1"));
    assert!(p.remove(&mut state, "pod-b", "init"));
    assert!(!p.remove(&mut state, "pod-b", "init"));
    assert_eq!(normal(state.clone()), normal(golden(5)));

    // More hugepages than node 0 has.
    let e = pod("pod-e", vec![], vec![guaranteed("c1", "1Gi", Some("32Mi"))]);
    let c = &e.spec.as_ref().unwrap().containers[0];
    assert_eq!(shown(&p.hints(&state, &reusable, "pod-e", &e, c)), "");
    assert!(
        p.allocate(&mut state, &mut reusable, ("pod-e", &e, c), none)
            .is_err()
    );

    // A restored state is valid for this machine; not once a block names a
    // node it does not have, or the reservations change.
    let mut restored = golden(5);
    p.validate(&mut restored).unwrap();
    let mut other = golden(5);
    type Change = fn(&mut MemoryState);
    let cases: [(Change, &str); 3] = [
        (
            |s| {
                s.entries.get_mut("pod-d").unwrap().get_mut("c1").unwrap()[0].numa_affinity =
                    vec![3]
            },
            "[memorymanager] (pod: pod-d, container: c1) the memory assignment uses the NUMA that does not exist",
        ),
        (
            |s| {
                s.machine
                    .get_mut(&1)
                    .unwrap()
                    .memory
                    .get_mut("memory")
                    .unwrap()
                    .system_reserved = 1
            },
            "[memorymanager] the expected machine state is different from the real one",
        ),
        (
            |s| s.machine.clear(),
            "[memorymanager] machine state can not be empty when it has memory assignments",
        ),
    ];
    for (change, want) in cases {
        other.clone_from(&golden(5));
        change(&mut other);
        assert_eq!(p.validate(&mut other), Err(want.to_owned()));
    }
}

#[test]
fn init_memory_is_reused_then_returned_when_the_app_starts() {
    let p = policy();
    let mut state = MemoryState::new(STATIC);
    let mut reusable = Reusable::new();
    p.validate(&mut state).unwrap();
    let b = pod(
        "pod-b",
        vec![guaranteed("init", "3Gi", None)],
        vec![guaranteed("app", "2Gi", None)],
    );
    for c in init_and_regular_containers(&b) {
        p.allocate(&mut state, &mut reusable, ("pod-b", &b, c), Hint::default())
            .unwrap();
    }
    // The app reused 2Gi of the init container's 3Gi: the pod holds 3Gi.
    let node0 = |s: &MemoryState| s.machine[&0].memory["memory"].reserved;
    assert_eq!(node0(&state), 3 * GI);
    assert_eq!(state.blocks("pod-b", "init").unwrap()[0].size, GI);
    assert_eq!(cpuset_mems(&state, "pod-b", "app").as_deref(), Some("0"));
    // Once the app starts, the init container is done.
    let app = &b.spec.as_ref().unwrap().containers[0];
    assert!(p.container_added(&mut state, "pod-b", &b, app));
    assert_eq!(node0(&state), 2 * GI);
    assert!(state.blocks("pod-b", "init").is_none());
    // The pod gone, everything returns.
    assert!(p.release_inactive(&mut state, &|_: &str, _: &str| false));
    assert_eq!(state.machine, p.default_machine_state());
    assert!(state.entries.is_empty());
}

/// A static pod's containers get their memory one at a time, as each is
/// created: another pod's allocation between them forgets the init
/// container's reusable memory. The app then reserves its whole size and
/// the init container keeps its block, so the state still adds up (a
/// restart validates it) and everything returns in the end.
#[test]
fn memory_given_container_by_container_still_adds_up() {
    let p = policy();
    let mut state = MemoryState::new(STATIC);
    let mut reusable = Reusable::new();
    p.validate(&mut state).unwrap();
    let b = pod(
        "pod-b",
        vec![guaranteed("init", "3Gi", None)],
        vec![guaranteed("app", "2Gi", None)],
    );
    let other = pod("other", vec![], vec![guaranteed("c", "1Gi", None)]);
    let (init, app) = {
        let spec = b.spec.as_ref().unwrap();
        (
            &spec.init_containers.as_ref().unwrap()[0],
            &spec.containers[0],
        )
    };
    let none = Hint::default();
    p.allocate(&mut state, &mut reusable, ("pod-b", &b, init), none)
        .unwrap();
    let c = &other.spec.as_ref().unwrap().containers[0];
    p.allocate(&mut state, &mut reusable, ("other", &other, c), none)
        .unwrap();
    p.allocate(&mut state, &mut reusable, ("pod-b", &b, app), none)
        .unwrap();
    assert_eq!(state.blocks("pod-b", "init").unwrap()[0].size, 3 * GI);
    assert_eq!(state.machine[&0].memory["memory"].reserved, 6 * GI);
    let mut restarted = state.clone();
    p.validate(&mut restarted).unwrap();
    assert!(p.container_added(&mut state, "pod-b", &b, app));
    assert_eq!(state.machine[&0].memory["memory"].reserved, 3 * GI);
    assert!(p.release_inactive(&mut state, &|_: &str, _: &str| false));
    assert_eq!(state.machine, p.default_machine_state());
}

#[test]
fn only_guaranteed_containers_asking_memory_are_placed() {
    let p = policy();
    let mut state = MemoryState::new(STATIC);
    p.validate(&mut state).unwrap();
    let burstable = pod(
        "u",
        vec![],
        vec![Container {
            resources: Some(resources(&[("memory", "1Gi")], &[])),
            ..container("c")
        }],
    );
    let c = &burstable.spec.as_ref().unwrap().containers[0];
    let mut reusable = Reusable::new();
    assert!(p.hints(&state, &reusable, "u", &burstable, c).is_empty());
    assert_eq!(
        p.allocate(
            &mut state,
            &mut reusable,
            ("u", &burstable, c),
            Hint::default()
        ),
        Ok(Pinning::NotAsked)
    );
    assert!(state.entries.is_empty());
    assert_eq!(cpuset_mems(&state, "u", "c"), None);
}

#[test]
fn a_restarted_containers_hints_are_its_blocks_nodes() {
    let p = policy();
    let mut state = MemoryState::new(STATIC);
    p.validate(&mut state).unwrap();
    let mut reusable = Reusable::new();
    let a = pod("u", vec![], vec![guaranteed("c", "1Gi", None)]);
    let c = &a.spec.as_ref().unwrap().containers[0];
    let node1 = Hint {
        affinity: Some(BitMask::of([1])),
        preferred: true,
    };
    p.allocate(&mut state, &mut reusable, ("u", &a, c), node1)
        .unwrap();
    assert_eq!(
        shown(&p.hints(&state, &reusable, "u", &a, c)),
        "memory: 10/true"
    );
    assert_eq!(
        shown(&p.pod_hints(&state, &reusable, "u", &a)),
        "memory: 10/true"
    );
    // Asking another amount now: no preference (upstream's).
    let bigger = pod("u", vec![], vec![guaranteed("c", "2Gi", None)]);
    let c = &bigger.spec.as_ref().unwrap().containers[0];
    assert!(p.hints(&state, &reusable, "u", &bigger, c).is_empty());
}

#[test]
fn a_multi_node_block_makes_a_group() {
    let p = policy();
    let mut state = MemoryState::new(STATIC);
    p.validate(&mut state).unwrap();
    let mut reusable = Reusable::new();
    let big = pod("u", vec![], vec![guaranteed("c", "10Gi", None)]);
    let c = &big.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        shown(&p.hints(&state, &reusable, "u", &big, c)),
        "memory: 11/true"
    );
    p.allocate(&mut state, &mut reusable, ("u", &big, c), Hint::default())
        .unwrap();
    assert_eq!(state.machine[&0].cells, [0, 1]);
    assert_eq!(cpuset_mems(&state, "u", "c").as_deref(), Some("0,1"));
    // Another container may use the group, not one of its nodes alone.
    let small = pod("v", vec![], vec![guaranteed("c", "1Gi", None)]);
    let c = &small.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        shown(&p.hints(&state, &reusable, "v", &small, c)),
        "memory: 11/false"
    );
    let node0 = Hint {
        affinity: Some(BitMask::of([0, 1])),
        preferred: false,
    };
    p.allocate(&mut state, &mut reusable, ("v", &small, c), node0)
        .unwrap();
    assert_eq!(state.machine[&1].assignments, 2);
}

#[test]
fn reserved_memory_must_add_up_to_node_allocatables_in_upstreams_words() {
    let on = |node: i32, pairs: &[(&str, &str)]| {
        let r = crate::config::MemoryReservation {
            numa_node: node,
            limits: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        reservations(&[r]).remove(0)
    };
    let alloc = |pairs: &[(&str, i64)]| -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    };
    let m = 1 << 20;
    // The same cases the golden program gave v1.37.2's NewManager.
    let cases = [
        (
            alloc(&[("memory", 100 * m)]),
            vec![],
            Err(
                r#"the total amount "0" of type "memory" is not equal to the value "100Mi" determined by Node Allocatable feature"#,
            ),
        ),
        (
            alloc(&[("memory", 1100 * m)]),
            vec![on(0, &[("memory", "1G")])],
            Err(
                r#"the total amount "1G" of type "memory" is not equal to the value "1100Mi" determined by Node Allocatable feature"#,
            ),
        ),
        (
            alloc(&[("memory", 1100 * m), ("cpu", 1000)]),
            vec![
                on(0, &[("memory", "1000Mi")]),
                on(1, &[("memory", "100Mi")]),
            ],
            Ok(()),
        ),
        (
            alloc(&[("memory", 100 * m)]),
            vec![on(2, &[("memory", "100Mi")])],
            Err(
                "the reserved memory configuration references a NUMA node 2 that does not exist on this machine",
            ),
        ),
        (
            alloc(&[("memory", 100 * m)]),
            vec![on(0, &[("memory", "100Mi"), ("hugepages-2Mi", "4Mi")])],
            Err(
                r#"the total amount "4Mi" of type "hugepages-2Mi" is not equal to the value "0" determined by Node Allocatable feature"#,
            ),
        ),
    ];
    for (allocatable, reservations, want) in cases {
        let got = system_reserved(&machine(), &allocatable, &reservations);
        assert_eq!(got.as_ref().map(|_| ()).map_err(String::as_str), want);
    }
    let reserved = system_reserved(&machine(), &BTreeMap::new(), &[]).unwrap();
    assert_eq!(
        StaticPolicy::new(machine(), reserved).unwrap_err(),
        "[memorymanager] you should specify the system reserved memory"
    );
}

#[test]
fn numa_memory_is_read_from_sysfs() {
    let files: BTreeMap<&str, &str> = BTreeMap::from([
        (
            "node/node0/meminfo",
            "Node 0 MemTotal:       24683784 kB\nNode 0 MemFree: 1 kB\n",
        ),
        ("node/node0/hugepages/hugepages-2048kB/nr_hugepages", "3\n"),
        (
            "node/node0/hugepages/hugepages-1048576kB/nr_hugepages",
            "0\n",
        ),
    ]);
    let list = |dir: &str| -> Vec<String> {
        if dir == "node/node0/hugepages" {
            vec!["hugepages-2048kB".into(), "hugepages-1048576kB".into()]
        } else {
            vec![]
        }
    };
    let nodes = NodeMemory::from_sysfs(&[0], |p| files.get(p).map(|s| s.to_string()), list, 7);
    assert_eq!(
        nodes,
        [NodeMemory {
            id: 0,
            memory: 24_683_784 * 1024,
            hugepages: vec![(2048, 3), (1_048_576, 0)],
        }]
    );
    assert_eq!(hugepage_resource(2 << 20), "hugepages-2Mi");
    assert_eq!(hugepage_resource(1 << 30), "hugepages-1Gi");
    // No NUMA nodes: one, with the machine's memory.
    let flat = NodeMemory::from_sysfs(&[], |_| None, |_| vec![], 7);
    assert_eq!(flat[0].memory, 7);
}

#[test]
fn older_layouts_are_read_and_bad_files_refused() {
    let v1 = |sum: u64| {
        format!(
            r#"{{"policyName":"Static","machineState":{{"0":{{"numberOfAssignments":0,"memoryMap":{{}},"cells":[0]}}}},"checksum":{sum}}}"#
        )
    };
    assert!(MemoryState::restore(v1(0).as_bytes(), STATIC).is_ok());
    let cases = [
        (v1(1), STATIC, "checkpoint is corrupted"),
        (
            UPSTREAM
                .lines()
                .nth(1)
                .unwrap()
                .replace("536870912", "536870913"),
            STATIC,
            "could not load v3 checkpoint: checkpoint is corrupted",
        ),
        (
            UPSTREAM.lines().next().unwrap().to_owned(),
            STATIC,
            r#"[memorymanager] configured policy "Static" differs from state checkpoint policy "None""#,
        ),
    ];
    for (bytes, policy, want) in cases {
        let err = MemoryState::restore(bytes.as_bytes(), policy).unwrap_err();
        assert_eq!(err.to_string(), want, "{bytes}");
    }
}
