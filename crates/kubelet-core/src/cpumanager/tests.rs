use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::*;
use crate::testing::{PodBuilder, container, resources};

fn set(list: &str) -> BTreeSet<u32> {
    cpuset::parse(list).unwrap()
}

/// 2 sockets × 2 cores × 2 threads, numbered as Linux numbers them (the
/// second thread of each core after all the first ones).
fn smt_topology() -> Topology {
    let online = set("0-7");
    let files: BTreeMap<String, String> = (0..8u32)
        .flat_map(|id| {
            let socket = (id / 2) % 2;
            let core = id % 2;
            [
                (
                    format!("cpu/cpu{id}/topology/physical_package_id"),
                    format!("{socket}\n"),
                ),
                (format!("cpu/cpu{id}/topology/core_id"), format!("{core}\n")),
            ]
        })
        .chain([
            ("node/node0/cpulist".to_owned(), "0-1,4-5\n".to_owned()),
            ("node/node1/cpulist".to_owned(), "2-3,6-7\n".to_owned()),
        ])
        .collect();
    Topology::from_sysfs(&online, &[0, 1], |p| files.get(p).cloned())
}

/// These machines: 2 CPUs, each its own core, one socket and NUMA node.
fn small_topology() -> Topology {
    Topology::from_sysfs(&set("0-1"), &[], |p| {
        p.ends_with("physical_package_id").then(|| "0".to_owned())
    })
}

fn guaranteed(name: &str, cpu: &str) -> Container {
    Container {
        resources: Some(resources(&[], &[("cpu", cpu), ("memory", "64Mi")])),
        ..container(name)
    }
}

#[test]
fn sysfs_gives_sockets_cores_and_numa_nodes() {
    let t = smt_topology();
    assert_eq!(
        t.cpus[&5],
        topology::Cpu {
            socket: 0,
            core: 1,
            numa: 0,
            uncore: 0,
        }
    );
    assert_eq!(
        t.cpus[&6],
        topology::Cpu {
            socket: 1,
            core: 0,
            numa: 1,
            uncore: 1,
        }
    );
    assert_eq!(t.cpus_per_core(), 2);
    assert_eq!(
        t.count_per_numa(&set("0,2,3")),
        BTreeMap::from([(0, 1), (1, 2)])
    );
    assert_eq!(t.siblings_of(&set("1")), set("1,5"));
    let small = small_topology();
    assert_eq!(small.cpus_per_core(), 1);
    assert_eq!(small.all(), set("0-1"));
}

#[test]
fn cpus_are_taken_packed_as_upstreams_take_by_topology() {
    let t = smt_topology();
    let cases = [
        // (available, n, taken)
        ("0-7", 4, Ok("0-1,4-5")), // a whole socket
        ("0-7", 2, Ok("0,4")),     // a whole core
        ("0-7", 6, Ok("0-2,4-6")), // a socket, then a core of the other
        ("0-7", 1, Ok("0")),
        ("1-7", 1, Ok("4")),       // the core already broken
        ("1-3,5-7", 2, Ok("1,5")), // a whole core of the fuller socket
        ("0-3,5-7", 1, Ok("0")),   // the broken core's other half
        (
            "0-1",
            3,
            Err("not enough cpus available to satisfy request: requested=3, available=2"),
        ),
    ];
    for (available, n, want) in cases {
        let got = t
            .take(&set(available), n)
            .map(|s| cpuset::format(&s))
            .map_err(|e| e.to_string());
        assert_eq!(
            got,
            want.map(str::to_owned).map_err(str::to_owned),
            "{available} take {n}"
        );
    }
}

#[test]
fn the_reserved_cpus_come_from_the_reservations_or_the_list() {
    let t = smt_topology();
    let cases = [
        (
            "",
            0,
            Err(
                "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero",
            ),
        ),
        ("", 500, Ok("0")),
        ("", 1500, Ok("0,4")),
        ("3", 1000, Ok("3")),
        (
            "3",
            2000,
            Err(
                "new static policy error: [cpumanager] unable to reserve the required amount of CPUs (size of 3 did not equal 2)",
            ),
        ),
    ];
    for (list, millis, want) in cases {
        let got =
            reserved_cpus(&t, Options::default(), &set(list), millis).map(|s| cpuset::format(&s));
        assert_eq!(
            got,
            want.map(str::to_owned).map_err(str::to_owned),
            "{list:?} {millis}"
        );
    }
}

fn policy(t: Topology, reserved: &str, options: Options) -> (StaticPolicy, CpuState) {
    let p = StaticPolicy {
        topology: t,
        reserved: set(reserved),
        options,
    };
    let mut s = CpuState::new(STATIC, BTreeSet::new());
    p.validate(&mut s).unwrap();
    (p, s)
}

#[test]
fn guaranteed_integer_containers_get_exclusive_cpus_and_the_others_share() {
    let (p, mut s) = policy(small_topology(), "0", Options::default());
    assert_eq!(s.default, set("0-1"));
    let burstable = PodBuilder::new("b")
        .container(Container {
            resources: Some(resources(&[("cpu", "1")], &[])),
            ..container("c")
        })
        .build();
    let fractional = PodBuilder::new("f")
        .container(guaranteed("c", "1500m"))
        .build();
    let whole = PodBuilder::new("g").container(guaranteed("c", "1")).build();
    let c = |pod: &Pod| pod.spec.as_ref().unwrap().containers[0].clone();
    assert_eq!(
        p.allocate(&mut s, "b", &burstable, &c(&burstable), None),
        Ok(None)
    );
    assert_eq!(
        p.allocate(&mut s, "f", &fractional, &c(&fractional), None),
        Ok(None)
    );
    assert_eq!(
        p.allocate(&mut s, "g", &whole, &c(&whole), None),
        Ok(Some(set("1")))
    );
    assert_eq!(s.default, set("0"));
    // Again: the same CPUs, nothing more taken.
    assert_eq!(
        p.allocate(&mut s, "g", &whole, &c(&whole), None),
        Ok(Some(set("1")))
    );
    // The reserved CPU is never given.
    let err = p
        .allocate(&mut s, "g2", &whole, &c(&whole), None)
        .unwrap_err();
    assert_eq!(
        err.rejection(),
        (
            "UnexpectedAdmissionError",
            "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected".to_owned()
        )
    );
    // Once the pod is gone its CPU is shared again.
    assert!(p.release_inactive(&mut s, &|pod, _| pod != "g"));
    assert_eq!(s.default, set("0-1"));
    assert!(s.entries.is_empty());
    assert!(!p.release_inactive(&mut s, &|_, _| false));
}

#[test]
fn init_containers_cpus_are_reused_but_not_a_sidecars() {
    let (p, mut s) = policy(smt_topology(), "0", Options::default());
    let mut sidecar = guaranteed("side", "1");
    sidecar.restart_policy = Some("Always".into());
    let pod = PodBuilder::new("p")
        .init_container(guaranteed("init", "2"))
        .init_container(sidecar)
        .container(guaranteed("app", "2"))
        .build();
    let spec = pod.spec.clone().unwrap();
    let inits = spec.init_containers.unwrap();
    let init = p
        .allocate(&mut s, "p", &pod, &inits[0], None)
        .unwrap()
        .unwrap();
    let side = p
        .allocate(&mut s, "p", &pod, &inits[1], None)
        .unwrap()
        .unwrap();
    let app = p
        .allocate(&mut s, "p", &pod, &spec.containers[0], None)
        .unwrap()
        .unwrap();
    assert_eq!(
        app, init,
        "the app container reuses the init container's CPUs"
    );
    assert!(side.is_disjoint(&app));
    // Released together: each CPU once.
    assert!(p.release_inactive(&mut s, &|_, _| false));
    assert_eq!(s.default, set("0-7"));
}

#[test]
fn full_pcpus_only_refuses_half_cores_as_upstream() {
    let options = Options {
        full_pcpus_only: true,
        ..Options::default()
    };
    let (p, mut s) = policy(smt_topology(), "0", options);
    let one = PodBuilder::new("o").container(guaranteed("c", "1")).build();
    let c = one.spec.as_ref().unwrap().containers[0].clone();
    assert_eq!(
        p.allocate(&mut s, "o", &one, &c, None)
            .unwrap_err()
            .rejection(),
        (
            "SMTAlignmentError",
            "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2".to_owned()
        )
    );
    let eight = PodBuilder::new("e").container(guaranteed("c", "8")).build();
    let c = eight.spec.as_ref().unwrap().containers[0].clone();
    assert_eq!(
        p.allocate(&mut s, "e", &eight, &c, None)
            .unwrap_err()
            .to_string(),
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 6, requested CPUs = 8, CPUs per core = 2"
    );
    let two = PodBuilder::new("t").container(guaranteed("c", "2")).build();
    let c = two.spec.as_ref().unwrap().containers[0].clone();
    // Not the reserved CPU's sibling: a whole free core.
    assert_eq!(
        p.allocate(&mut s, "t", &two, &c, None),
        Ok(Some(set("1,5")))
    );
}

#[test]
fn strict_reservation_keeps_the_reserved_cpus_out_of_the_pool() {
    let options = Options {
        strict_cpu_reservation: true,
        ..Options::default()
    };
    let (_, s) = policy(small_topology(), "0", options);
    assert_eq!(s.default, set("1"));
}

#[test]
fn a_state_that_does_not_fit_is_refused_in_upstreams_words() {
    let p = StaticPolicy {
        topology: small_topology(),
        reserved: set("0"),
        options: Options::default(),
    };
    let state = |default: &str, entries: &[(&str, &str, &str)]| {
        let mut s = CpuState::new(STATIC, set(default));
        for (pod, c, cpus) in entries {
            s.entries
                .entry((*pod).into())
                .or_default()
                .insert((*c).into(), set(cpus));
        }
        s
    };
    let cases = [
        (state("0-1", &[]), Ok(())),
        (state("0", &[("p", "c", "1")]), Ok(())),
        (
            state("", &[("p", "c", "1")]),
            Err("default cpuset cannot be empty"),
        ),
        (
            state("1", &[("p", "c", "0")]),
            Err(r#"not all reserved cpus: "0" are present in defaultCpuSet: "1""#),
        ),
        (
            state("0-1", &[("p", "c", "1")]),
            Err(r#"pod: p, container: c cpuset: "1" overlaps with default cpuset "0-1""#),
        ),
        (
            state("0", &[]),
            Err(r#"current set of available CPUs "0-1" doesn't match with CPUs in state "0""#),
        ),
    ];
    for (mut s, want) in cases {
        assert_eq!(p.validate(&mut s), want.map_err(str::to_owned));
    }
}

#[test]
fn options_parse_with_upstreams_messages() {
    let opts = |pairs: &[(&str, &str)]| {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        Options::parse(&m)
    };
    assert_eq!(
        opts(&[
            ("full-pcpus-only", "true"),
            ("strict-cpu-reservation", "True"),
            ("distribute-cpus-across-numa", "1")
        ]),
        Ok(Options {
            full_pcpus_only: true,
            strict_cpu_reservation: true,
            distribute_cpus_across_numa: true,
            prefer_align_by_uncore_cache: false,
        })
    );
    assert_eq!(
        opts(&[("full-pcpus-only", "yes")]),
        Err(r#"bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes": invalid syntax"#.into())
    );
    assert_eq!(
        opts(&[("fast", "true")]),
        Err(r#"unknown CPU Manager Policy option: "fast""#.into())
    );
    assert_eq!(
        opts(&[
            ("prefer-align-cpus-by-uncorecache", "true"),
            ("distribute-cpus-across-numa", "true")
        ]),
        Err("static policy options prefer-align-cpus-by-uncorecache and distribute-cpus-across-numa can not be used at the same time".into())
    );
    assert_eq!(
        opts(&[("align-by-socket", "true")]),
        Err(r#"CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" provided"#.into())
    );
}

#[test]
fn hints_and_aligned_allocation_follow_the_numa_nodes() {
    use crate::topologymanager::{BitMask, Hint, ProviderHints};
    // NUMA node 0: CPUs 0,1,4,5; node 1: 2,3,6,7; CPU 0 reserved.
    let (p, mut s) = policy(smt_topology(), "0", Options::default());
    let hint = |nodes: &[u32], preferred| Hint {
        affinity: Some(BitMask::of(nodes.iter().copied())),
        preferred,
    };
    let cpu = |hints: Vec<Hint>| ProviderHints::from([("cpu".to_owned(), Some(hints))]);
    let pod = |uid: &str, n: &str| PodBuilder::new(uid).container(guaranteed("c", n)).build();
    let first = |pod: &Pod| pod.spec.as_ref().unwrap().containers[0].clone();
    // Three CPUs fit on node 0 (three free there) or node 1.
    let three = pod("three", "3");
    assert_eq!(
        p.hints(&s, "three", &three, &first(&three)),
        cpu(vec![
            hint(&[0], true),
            hint(&[1], true),
            hint(&[0, 1], false)
        ])
    );
    // Given node 1, its CPUs are taken, not the packed pick from node 0.
    let cpus = p
        .allocate(
            &mut s,
            "three",
            &three,
            &first(&three),
            Some(BitMask::of([1])),
        )
        .unwrap()
        .unwrap();
    assert_eq!(p.topology.within(&cpus, BitMask::of([1])), cpus);
    // Now five CPUs fit on no single node: only both together, preferred
    // since no single node has five CPUs at all.
    let five = pod("five", "4");
    assert_eq!(
        p.hints(&s, "five", &five, &first(&five)),
        cpu(vec![hint(&[0, 1], false)]),
        "four fit on one node of the machine, but on none now"
    );
    // A container that holds CPUs gets the hints of those; another count
    // now cannot be placed.
    assert_eq!(
        p.hints(&s, "three", &three, &first(&three)),
        cpu(vec![hint(&[1], true), hint(&[0, 1], false)])
    );
    let four = pod("three", "4");
    assert_eq!(p.hints(&s, "three", &four, &first(&four)), cpu(vec![]));
    // A BestEffort or fractional container has no preference.
    let shared = PodBuilder::new("s").container(container("c")).build();
    assert!(p.hints(&s, "s", &shared, &first(&shared)).is_empty());
    // An affinity with too few CPUs is filled from elsewhere.
    let two = pod("two", "2");
    let cpus = p
        .allocate(&mut s, "two", &two, &first(&two), Some(BitMask::of([1])))
        .unwrap()
        .unwrap();
    assert_eq!(cpus.len(), 2);
    assert_eq!(p.topology.within(&cpus, BitMask::of([1])).len(), 1);
}

#[test]
fn a_pods_cpus_count_as_upstreams_pod_guaranteed_cpus() {
    let mut sidecar = guaranteed("side", "1");
    sidecar.restart_policy = Some("Always".into());
    let pod = PodBuilder::new("p")
        .init_container(guaranteed("init", "4"))
        .init_container(sidecar)
        .init_container(guaranteed("init2", "2"))
        .container(guaranteed("a", "1"))
        .container(guaranteed("b", "1"))
        .build();
    // max(init 4, sidecar 1 + init2 2, sidecar 1 + apps 2) = 4.
    assert_eq!(pod_guaranteed_cpus(&pod), 4);
    let (p, s) = policy(smt_topology(), "0", Options::default());
    // Four fit on node 1 only (CPU 0, on node 0, is reserved).
    let hints: Vec<_> = p.pod_hints(&s, "p", &pod)["cpu"]
        .iter()
        .flatten()
        .map(|h| (h.affinity.map(|m| m.0), h.preferred))
        .collect();
    assert_eq!(hints, [(Some(0b10), true), (Some(0b11), false)]);
}

/// Four made-up machines, each core as (socket, NUMA node, its CPUs).
fn machine(name: &str) -> Topology {
    // Cores as (socket, NUMA node, uncore cache, threads).
    let with_caches = |cores: Vec<(u32, u32, u32, Vec<u32>)>| Topology {
        cpus: cores
            .into_iter()
            .enumerate()
            .flat_map(|(i, (socket, numa, uncore, threads))| {
                threads.into_iter().map(move |id| {
                    let core = i as u32;
                    let cpu = topology::Cpu {
                        socket,
                        core,
                        numa,
                        uncore,
                    };
                    (id, cpu)
                })
            })
            .collect(),
    };
    // Without split caches: each socket's is its uncore cache.
    let build = |cores: Vec<(u32, u32, Vec<u32>)>| {
        with_caches(
            cores
                .into_iter()
                .map(|(socket, numa, threads)| (socket, numa, socket, threads))
                .collect(),
        )
    };
    match name {
        // 1 socket, 1 NUMA node, 8 cores with SMT (c, c+8), an uncore
        // cache per 2 cores.
        "F" => with_caches((0..8).map(|c| (0, 0, c / 2, vec![c, c + 8])).collect()),
        // 2 sockets of 4 cores, a NUMA node each, no SMT, an uncore cache
        // per 2 cores.
        "G" => with_caches((0..8).map(|c| (c / 4, c / 4, c / 2, vec![c])).collect()),
        // 1 socket, 2 NUMA nodes of 4 cores with SMT (c, c+8), an uncore
        // cache per 2 cores.
        "H" => with_caches((0..8).map(|c| (0, c / 4, c / 2, vec![c, c + 8])).collect()),
        // 2 sockets, 2 NUMA nodes in each, 2 cores per node, SMT (c, c+8).
        "A" => build((0..8).map(|c| (c / 4, c / 2, vec![c, c + 8])).collect()),
        // 2 sockets of 2 cores, a NUMA node each, SMT (c, c+4).
        "B" => build((0..4).map(|c| (c / 2, c / 2, vec![c, c + 4])).collect()),
        // 1 socket, 2 NUMA nodes of 2 cores, SMT (c, c+4).
        "C" => build((0..4).map(|c| (0, c / 2, vec![c, c + 4])).collect()),
        // 2 sockets of 2 cores, one NUMA node, no SMT.
        "D" => build((0..4).map(|c| (c / 2, 0, vec![c])).collect()),
        // 2 sockets, 2 NUMA nodes in each of 4 cores, no SMT.
        _ => build((0..16).map(|c| (c / 8, c / 4, vec![c])).collect()),
    }
}

/// Replay `cases` (a machine, the CPUs each Guaranteed pod of a sequence
/// asks, the CPUs it gets or "err") under `options`, with `reserve` CPUs
/// reserved on each machine.
fn replay(options: &[(&str, &str)], reserve: &[(&str, i64)], cases: &[(&str, &[usize], &[&str])]) {
    let options: BTreeMap<String, String> = options
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    let options = Options::parse(&options).unwrap();
    for (name, requests, want) in cases {
        let topology = machine(name);
        let millis = reserve.iter().find(|(n, _)| n == name).unwrap().1;
        let reserved = reserved_cpus(&topology, options, &BTreeSet::new(), millis).unwrap();
        let p = StaticPolicy {
            topology,
            reserved,
            options,
        };
        let mut s = CpuState::new(STATIC, BTreeSet::new());
        p.validate(&mut s).unwrap();
        let got: Vec<String> = requests
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let pod = PodBuilder::new(&format!("p{i}"))
                    .container(guaranteed("c", &n.to_string()))
                    .build();
                let c = pod.spec.as_ref().unwrap().containers[0].clone();
                match p.allocate(&mut s, &format!("p{i}"), &pod, &c, None) {
                    Ok(Some(cpus)) => cpuset::format(&cpus),
                    Ok(None) => "none".into(),
                    Err(_) => "err".into(),
                }
            })
            .collect();
        assert_eq!(got, *want, "{name} {requests:?}");
    }
}

/// takeByTopology as v1.37.2's static policy answers: the CPUs each
/// Guaranteed pod of a sequence gets, printed by upstream's own
/// NewStaticPolicy and Allocate (a throwaway Go program over the
/// k8s.io/kubernetes module) on the same machines and reservations.
#[test]
fn allocations_match_upstreams_on_sub_numa_smt_and_flat_topologies() {
    replay(
        &[],
        &[("A", 1000), ("B", 1000), ("C", 2000), ("D", 1000)],
        &[
            (
                "A",
                &[1, 2, 4, 3, 1],
                &["8", "1,9", "2-3,10-11", "4-5,12", "13"],
            ),
            (
                "B",
                &[1, 2, 4, 3, 1],
                &["4", "1,5", "2-3,6-7", "err", "err"],
            ),
            ("C", &[1, 2, 4, 3, 1], &["1", "2,6", "err", "3,5,7", "err"]),
            ("D", &[1, 2, 4, 3, 1], &["1", "2-3", "err", "err", "err"]),
            ("A", &[4, 1, 1, 2], &["2-3,10-11", "8", "1", "4,12"]),
            ("B", &[4, 1, 1, 2], &["2-3,6-7", "4", "1", "err"]),
            ("C", &[4, 1, 1, 2], &["2-3,6-7", "1", "5", "err"]),
            ("D", &[4, 1, 1, 2], &["err", "1", "2", "err"]),
            ("A", &[8, 1, 3], &["4-7,12-15", "8", "1-2,9"]),
            ("B", &[8, 1, 3], &["err", "4", "1-2,5"]),
            ("C", &[8, 1, 3], &["err", "1", "2,5-6"]),
            ("D", &[8, 1, 3], &["err", "1", "err"]),
            (
                "A",
                &[2, 2, 2, 2, 2],
                &["1,9", "2,10", "3,11", "4,12", "5,13"],
            ),
            ("B", &[2, 2, 2, 2, 2], &["1,5", "2,6", "3,7", "err", "err"]),
            ("C", &[2, 2, 2, 2, 2], &["1,5", "2,6", "3,7", "err", "err"]),
            ("D", &[2, 2, 2, 2, 2], &["2-3", "err", "err", "err", "err"]),
            ("A", &[3, 5, 1], &["1,8-9", "2-4,10-11", "12"]),
            ("B", &[3, 5, 1], &["1,4-5", "err", "2"]),
            ("C", &[3, 5, 1], &["1-2,5", "err", "6"]),
            ("D", &[3, 5, 1], &["1-3", "err", "err"]),
        ],
    );
}

/// distribute-cpus-across-numa (with full-pcpus-only on A and C) as
/// v1.37.2's static policy answers, printed the same way.
#[test]
fn distributed_allocations_match_upstreams() {
    replay(
        &[("distribute-cpus-across-numa", "true")],
        &[("B", 1000), ("E", 1000)],
        &[
            (
                "B",
                &[1, 2, 4, 3, 1],
                &["2", "1,5", "3-4,6-7", "err", "err"],
            ),
            ("E", &[1, 2, 4, 3, 1], &["4", "8-9", "12-15", "1-3", "5"]),
            ("B", &[4, 1, 1, 2], &["2-3,6-7", "4", "1", "err"]),
            ("E", &[4, 1, 1, 2], &["4-7", "8", "12", "1-2"]),
            ("B", &[8, 1, 3], &["err", "2", "1,4-5"]),
            ("E", &[8, 1, 3], &["4-11", "12", "1-3"]),
            ("B", &[2, 2, 2, 2, 2], &["2,6", "1,5", "3,7", "err", "err"]),
            (
                "E",
                &[2, 2, 2, 2, 2],
                &["4-5", "8-9", "12-13", "1-2", "6-7"],
            ),
            ("B", &[3, 5, 1], &["2-3,6", "err", "4"]),
            ("E", &[3, 5, 1], &["4-6", "8-10,12-13", "1"]),
            ("B", &[6, 4, 2], &["1-6", "err", "err"]),
            ("E", &[6, 4, 2], &["4-6,8-10", "12-15", "1-2"]),
        ],
    );
    replay(
        &[
            ("distribute-cpus-across-numa", "true"),
            ("full-pcpus-only", "true"),
        ],
        &[("A", 2000), ("C", 2000)],
        &[
            (
                "A",
                &[1, 2, 4, 3, 1],
                &["err", "2,10", "4-5,12-13", "err", "err"],
            ),
            (
                "C",
                &[1, 2, 4, 3, 1],
                &["err", "2,6", "1,3,5,7", "err", "err"],
            ),
            ("A", &[4, 1, 1, 2], &["2-3,10-11", "err", "err", "4,12"]),
            ("C", &[4, 1, 1, 2], &["2-3,6-7", "err", "err", "1,5"]),
            ("A", &[8, 1, 3], &["2-5,10-13", "err", "err"]),
            ("C", &[8, 1, 3], &["err", "err", "err"]),
            (
                "A",
                &[2, 2, 2, 2, 2],
                &["2,10", "4,12", "6,14", "1,9", "3,11"],
            ),
            ("C", &[2, 2, 2, 2, 2], &["2,6", "1,5", "3,7", "err", "err"]),
            ("A", &[3, 5, 1], &["err", "err", "err"]),
            ("C", &[3, 5, 1], &["err", "err", "err"]),
            ("A", &[6, 4, 2], &["2-4,10-12", "6-7,14-15", "1,9"]),
            ("C", &[6, 4, 2], &["1-3,5-7", "err", "err"]),
        ],
    );
}

/// prefer-align-cpus-by-uncorecache as v1.37.2's static policy answers
/// (the same Go program, its machines' CPUInfo with UncoreCacheID).
#[test]
fn uncore_cache_allocations_match_upstreams() {
    let uncore = ("prefer-align-cpus-by-uncorecache", "true");
    replay(
        &[uncore],
        &[("F", 1000), ("G", 1000), ("H", 2000)],
        &[
            (
                "F",
                &[1, 2, 4, 3, 1],
                &["8", "1,9", "2-3,10-11", "4-5,12", "13"],
            ),
            ("G", &[1, 2, 4, 3, 1], &["1", "2-3", "4-7", "err", "err"]),
            (
                "H",
                &[1, 2, 4, 3, 1],
                &["1", "2,10", "4-5,12-13", "6-7,14", "15"],
            ),
            ("F", &[4, 1, 1, 2], &["2-3,10-11", "8", "1", "4,12"]),
            ("G", &[4, 1, 1, 2], &["4-7", "1", "2", "err"]),
            ("H", &[4, 1, 1, 2], &["2-3,10-11", "1", "9", "4,12"]),
            ("F", &[8, 1, 3], &["2-5,10-13", "8", "6-7,14"]),
            ("G", &[8, 1, 3], &["err", "1", "2-4"]),
            ("H", &[8, 1, 3], &["4-7,12-15", "1", "2-3,10"]),
            (
                "F",
                &[2, 2, 2, 2, 2],
                &["2,10", "3,11", "4,12", "5,13", "6,14"],
            ),
            ("G", &[2, 2, 2, 2, 2], &["2-3", "4-5", "6-7", "err", "err"]),
            (
                "H",
                &[2, 2, 2, 2, 2],
                &["1,9", "2,10", "3,11", "4,12", "5,13"],
            ),
            ("F", &[3, 5, 1], &["1,8-9", "2-4,10-11", "12"]),
            ("G", &[3, 5, 1], &["1-3", "err", "4"]),
            ("H", &[3, 5, 1], &["2-3,10", "4-5,11-13", "1"]),
            ("F", &[6, 4, 2], &["2-4,10-12", "6-7,14-15", "5,13"]),
            ("G", &[6, 4, 2], &["2-7", "err", "err"]),
            ("H", &[6, 4, 2], &["1-3,9-11", "4-5,12-13", "6,14"]),
        ],
    );
    replay(
        &[uncore, ("full-pcpus-only", "true")],
        &[("F", 1000), ("H", 2000)],
        &[
            (
                "F",
                &[1, 2, 4, 3, 1],
                &["err", "2,10", "4-5,12-13", "err", "err"],
            ),
            (
                "H",
                &[1, 2, 4, 3, 1],
                &["err", "1,9", "2-3,10-11", "err", "err"],
            ),
            ("F", &[4, 1, 1, 2], &["2-3,10-11", "err", "err", "4,12"]),
            ("H", &[4, 1, 1, 2], &["2-3,10-11", "err", "err", "1,9"]),
            ("F", &[8, 1, 3], &["2-5,10-13", "err", "err"]),
            ("H", &[8, 1, 3], &["4-7,12-15", "err", "err"]),
            (
                "F",
                &[2, 2, 2, 2, 2],
                &["2,10", "3,11", "4,12", "5,13", "6,14"],
            ),
            (
                "H",
                &[2, 2, 2, 2, 2],
                &["1,9", "2,10", "3,11", "4,12", "5,13"],
            ),
            ("F", &[3, 5, 1], &["err", "err", "err"]),
            ("H", &[3, 5, 1], &["err", "err", "err"]),
            ("F", &[6, 4, 2], &["2-4,10-12", "6-7,14-15", "5,13"]),
            ("H", &[6, 4, 2], &["1-3,9-11", "4-5,12-13", "6,14"]),
        ],
    );
    // Without the option the same machine packs by cores only.
    replay(
        &[],
        &[("F", 1000)],
        &[("F", &[4, 1, 1, 2], &["1-2,9-10", "8", "3", "4,12"])],
    );
}

#[test]
fn sysfs_gives_uncore_caches_and_alignment() {
    // 4 CPUs on one node; an L3 per 2 CPUs, or one for the whole node.
    let read = |shared: [&'static str; 2]| {
        move |p: &str| -> Option<String> {
            let cpu: u32 = p.strip_prefix("cpu/cpu")?.split('/').next()?.parse().ok()?;
            let half = (cpu / 2) as usize;
            match p.rsplit_once('/')? {
                (d, "level") if d.ends_with("index0") => Some("1\n".into()),
                (d, "level") if d.ends_with("index3") => Some("3\n".into()),
                (d, "level") if d.ends_with("index1") || d.ends_with("index2") => {
                    Some("2\n".into())
                }
                (d, "shared_cpu_list") if d.ends_with("index3") => Some(shared[half].into()),
                (d, "id") if d.ends_with("index3") => Some(format!("{}\n", half + 4)),
                (_, "physical_package_id") => Some("0\n".into()),
                _ => None,
            }
        }
    };
    let split = Topology::from_sysfs(&set("0-3"), &[], read(["0-1\n", "2-3\n"]));
    let caches: Vec<u32> = split.cpus.values().map(|c| c.uncore).collect();
    assert_eq!(caches, [4, 4, 5, 5]);
    assert!(split.aligned_at_uncore(&set("0-1")));
    assert!(!split.aligned_at_uncore(&set("1-2")));
    assert!(split.aligned_at_uncore(&set("3")));
    let whole = Topology::from_sysfs(&set("0-3"), &[], read(["0-3\n", "0-3\n"]));
    assert!(whole.cpus.values().all(|c| c.uncore == 0), "the socket's");
}
