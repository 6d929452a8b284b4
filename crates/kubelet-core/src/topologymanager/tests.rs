use std::collections::BTreeMap;

use super::*;

fn mask(nodes: &[u32]) -> BitMask {
    BitMask::of(nodes.iter().copied())
}

fn hint(nodes: &[u32], preferred: bool) -> Hint {
    Hint {
        affinity: Some(mask(nodes)),
        preferred,
    }
}

fn provider(resources: &[(&str, Option<Vec<Hint>>)]) -> ProviderHints {
    resources
        .iter()
        .map(|(r, h)| (r.to_string(), h.clone()))
        .collect()
}

fn policy(kind: &str, nodes: &[u32]) -> Policy {
    let numa = NumaInfo {
        nodes: nodes.to_vec(),
        distances: BTreeMap::new(),
    };
    Policy::new(kind, &BTreeMap::new(), numa).unwrap().unwrap()
}

#[test]
fn masks_order_and_enumerate_as_upstreams() {
    assert!(mask(&[0]).narrower_than(mask(&[1])));
    assert!(mask(&[1]).narrower_than(mask(&[0, 1])));
    assert!(!mask(&[0, 2]).narrower_than(mask(&[0, 1])));
    assert_eq!(
        BitMask::subsets(&[0, 1, 2]),
        [
            mask(&[0]),
            mask(&[1]),
            mask(&[2]),
            mask(&[0, 1]),
            mask(&[0, 2]),
            mask(&[1, 2]),
            mask(&[0, 1, 2])
        ]
    );
    assert_eq!(mask(&[0, 1]).nodes().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(BitMask::of([64, 1]), mask(&[1]));
    for (nodes, text) in [
        (&[0][..], "01"),
        (&[2], "100"),
        (&[0, 2], "0101"),
        (&[1, 2], "0110"),
    ] {
        assert_eq!(mask(nodes).to_string(), text);
    }
    assert_eq!(hint(&[1], true).to_string(), "{10 true}");
}

#[test]
fn policies_merge_and_admit_as_upstreams() {
    let none = || provider(&[]);
    let cpu = |h: Vec<Hint>| provider(&[("cpu", Some(h))]);
    let gpu = |h: Option<Vec<Hint>>| provider(&[("example.com/gpu", h)]);
    // (case, providers, best-effort, restricted, single-numa-node): each the
    // best hint and whether the pod is admitted.
    type Case = (
        &'static str,
        Vec<ProviderHints>,
        (Hint, bool),
        (Hint, bool),
        (Hint, bool),
    );
    let cases: Vec<Case> = vec![
        (
            "no provider",
            vec![],
            (hint(&[0, 1], true), true),
            (hint(&[0, 1], true), true),
            (Hint::ANYWHERE, true),
        ),
        (
            "providers without preference",
            vec![none(), gpu(None)],
            (hint(&[0, 1], true), true),
            (hint(&[0, 1], true), true),
            (Hint::ANYWHERE, true),
        ),
        (
            "one resource on either node",
            vec![cpu(vec![
                hint(&[0], true),
                hint(&[1], true),
                hint(&[0, 1], false),
            ])],
            (hint(&[0], true), true),
            (hint(&[0], true), true),
            (hint(&[0], true), true),
        ),
        (
            "two resources meet on node 1",
            vec![
                cpu(vec![
                    hint(&[0], true),
                    hint(&[1], true),
                    hint(&[0, 1], false),
                ]),
                gpu(Some(vec![hint(&[1], true), hint(&[0, 1], false)])),
            ],
            (hint(&[1], true), true),
            (hint(&[1], true), true),
            (hint(&[1], true), true),
        ),
        (
            "two resources on different nodes",
            vec![
                cpu(vec![hint(&[0], true), hint(&[0, 1], false)]),
                gpu(Some(vec![hint(&[1], true), hint(&[0, 1], false)])),
            ],
            (hint(&[0], false), true),
            (hint(&[0], false), false),
            (
                Hint {
                    affinity: None,
                    preferred: false,
                },
                false,
            ),
        ),
        (
            "a resource that needs both nodes",
            vec![cpu(vec![hint(&[0, 1], true)])],
            (hint(&[0, 1], true), true),
            (hint(&[0, 1], true), true),
            (
                Hint {
                    affinity: None,
                    preferred: false,
                },
                false,
            ),
        ),
        (
            "a resource that cannot be placed",
            vec![gpu(Some(vec![]))],
            (hint(&[0, 1], false), true),
            (hint(&[0, 1], false), false),
            (
                Hint {
                    affinity: None,
                    preferred: false,
                },
                false,
            ),
        ),
    ];
    for (case, providers, best_effort, restricted, single) in cases {
        for (name, want) in [
            (BEST_EFFORT, best_effort),
            (RESTRICTED, restricted),
            (SINGLE_NUMA_NODE, single),
        ] {
            assert_eq!(
                policy(name, &[0, 1]).merge(&providers),
                want,
                "{case}: {name}"
            );
        }
    }
}

#[test]
fn a_non_preferred_merge_keeps_closest_to_the_narrowest_possible() {
    // Upstream's bestNonPreferredAffinityCount: the GPU could at best sit on
    // two nodes, so of the non-preferred merges the two-node one wins over
    // the wider, then the narrower.
    let providers = vec![
        provider(&[("cpu", Some(vec![hint(&[0], true), hint(&[0, 1, 2], false)]))]),
        provider(&[(
            "example.com/gpu",
            Some(vec![hint(&[1, 2], true), hint(&[0, 1, 2], false)]),
        )]),
    ];
    let (best, admit) = policy(BEST_EFFORT, &[0, 1, 2]).merge(&providers);
    assert_eq!((best, admit), (hint(&[1, 2], false), true));
}

#[test]
fn prefer_closest_numa_nodes_takes_the_nearer_pair() {
    let numa = NumaInfo {
        nodes: vec![0, 1, 2, 3],
        distances: BTreeMap::from([
            (0, vec![10, 20, 11, 20]),
            (1, vec![20, 10, 20, 11]),
            (2, vec![11, 20, 10, 20]),
            (3, vec![20, 11, 20, 10]),
        ]),
    };
    let providers = vec![provider(&[(
        "cpu",
        Some(vec![hint(&[0, 1], true), hint(&[0, 2], true)]),
    )])];
    let options = BTreeMap::from([(PREFER_CLOSEST.to_string(), "true".to_string())]);
    let closest = Policy::new(BEST_EFFORT, &options, numa.clone())
        .unwrap()
        .unwrap();
    assert_eq!(closest.merge(&providers).0, hint(&[0, 2], true));
    let narrowest = Policy::new(BEST_EFFORT, &BTreeMap::new(), numa)
        .unwrap()
        .unwrap();
    assert_eq!(narrowest.merge(&providers).0, hint(&[0, 1], true));
}

#[test]
fn options_and_policies_are_refused_in_upstreams_words() {
    let opts = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
    let one = || NumaInfo::from_sysfs(&[], |_| None);
    let cases = [
        (
            BEST_EFFORT,
            opts("fast", "true"),
            r#"unknown Topology Manager Policy option: "fast""#,
        ),
        (
            RESTRICTED,
            opts(PREFER_CLOSEST, "yes"),
            r#"bad value for option "prefer-closest-numa-nodes": strconv.ParseBool: parsing "yes": invalid syntax"#,
        ),
        (
            RESTRICTED,
            opts(MAX_ALLOWABLE, "x"),
            r#"unable to convert policy option to integer "max-allowable-numa-nodes": strconv.Atoi: parsing "x": invalid syntax"#,
        ),
        (
            RESTRICTED,
            opts(MAX_ALLOWABLE, "4"),
            r#"the minimum value of "max-allowable-numa-nodes" should not be less than 8"#,
        ),
        (
            SINGLE_NUMA_NODE,
            opts(PREFER_CLOSEST, "true"),
            "cannot discover NUMA topology: error getting NUMA distances from cadvisor",
        ),
        ("lazy", BTreeMap::new(), r#"unknown policy: "lazy""#),
    ];
    for (name, options, want) in cases {
        assert_eq!(
            Policy::new(name, &options, one()).unwrap_err(),
            want,
            "{name} {options:?}"
        );
    }
    let nine = NumaInfo {
        nodes: (0..9).collect(),
        distances: BTreeMap::new(),
    };
    assert_eq!(
        Policy::new(RESTRICTED, &BTreeMap::new(), nine.clone()).unwrap_err(),
        "unsupported on machines with more than 8 NUMA Nodes"
    );
    assert!(
        Policy::new(RESTRICTED, &opts(MAX_ALLOWABLE, "16"), nine)
            .unwrap()
            .is_some()
    );
    assert!(
        Policy::new(NONE, &opts("anything", "x"), one())
            .unwrap()
            .is_none()
    );
}

#[test]
fn numa_nodes_and_distances_read_from_sysfs() {
    let read = |p: &str| match p {
        "node/node0/distance" => Some("10 21\n".to_string()),
        "node/node1/distance" => Some("21 10\n".to_string()),
        _ => None,
    };
    let numa = NumaInfo::from_sysfs(&[1, 0], read);
    assert_eq!(numa.nodes, [0, 1]);
    assert!(numa.has_distances());
    assert_eq!(numa.distances[&1], [21, 10]);
    assert_eq!(NumaInfo::from_sysfs(&[], read).nodes, [0]);
    assert!(!NumaInfo::from_sysfs(&[0, 1, 2], read).has_distances());
}

#[test]
fn hints_cover_the_node_sets_with_enough_free() {
    // Two nodes of 4 CPUs; 3 free on node 0, 4 on node 1; 4 asked: only
    // node 1 alone has enough, both together too (not preferred).
    let on = |m: BitMask, per: [usize; 2]| {
        (0..2)
            .filter(|n| m.is_set(*n))
            .map(|n| per[n as usize])
            .sum()
    };
    let hints = hints_over(&[0, 1], 4, |m| on(m, [4, 4]), |m| Some(on(m, [3, 4])));
    assert_eq!(hints, [hint(&[1], true), hint(&[0, 1], false)]);
    // Nothing fits on one node: the two-node hint is the preferred one.
    let hints = hints_over(&[0, 1], 6, |m| on(m, [4, 4]), |m| Some(on(m, [4, 4])));
    assert_eq!(hints, [hint(&[0, 1], true)]);
    // An item the container keeps is on node 0: no set without it.
    let hints = hints_over(&[0, 1], 1, |m| on(m, [4, 4]), |m| m.is_set(0).then_some(1));
    assert_eq!(hints, [hint(&[0], true), hint(&[0, 1], false)]);
}
