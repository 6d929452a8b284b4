use super::state::{self, ClaimInfoState, Device, DriverState, StateError};
use super::*;
use serde_json::json;

fn pod(value: serde_json::Value) -> Pod {
    let mut base = json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "pod-1"},
        "spec": {"containers": []},
    });
    json_patch::merge(&mut base, &value);
    serde_json::from_value(base).unwrap()
}

fn claim(value: serde_json::Value) -> ResourceClaim {
    let mut base = json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": "claim-1"},
        "spec": {},
    });
    json_patch::merge(&mut base, &value);
    serde_json::from_value(base).unwrap()
}

fn pod_claim(value: serde_json::Value) -> PodResourceClaim {
    serde_json::from_value(value).unwrap()
}

#[test]
fn claim_names_follow_the_spec_then_the_status() {
    let with_status = pod(json!({"status": {"resourceClaimStatuses": [
        {"name": "gpu", "resourceClaimName": "p-gpu-x7k2"},
        {"name": "none"},
    ]}}));
    type Named = Result<Option<(String, bool)>, String>;
    let cases: Vec<(serde_json::Value, Named)> = vec![
        (
            json!({"name": "gpu", "resourceClaimName": "shared"}),
            Ok(Some(("shared".into(), false))),
        ),
        (
            json!({"name": "gpu", "resourceClaimTemplateName": "t"}),
            Ok(Some(("p-gpu-x7k2".into(), true))),
        ),
        // The template made no claim on purpose.
        (
            json!({"name": "none", "resourceClaimTemplateName": "t"}),
            Ok(None),
        ),
        (
            json!({"name": "later", "resourceClaimTemplateName": "t"}),
            Err(r#"pod "ns/p": ResourceClaim not created yet"#.into()),
        ),
        (
            json!({"name": "odd"}),
            Err(
                r#"pod "ns/p", spec.resourceClaim "odd": none of the supported fields are set"#
                    .into(),
            ),
        ),
    ];
    for (c, want) in cases {
        assert_eq!(claim_name(&with_status, &pod_claim(c.clone())), want, "{c}");
    }
}

#[test]
fn a_template_claim_must_be_the_pods_own_and_reserved_for_it() {
    let p = pod(json!({}));
    let owned = claim(json!({"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-1", "controller": true},
    ]}, "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]}}));
    assert_eq!(is_for_pod(&p, &owned), Ok(()));
    assert!(is_reserved_for_pod(&p, &owned));
    let other = claim(json!({"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "q", "uid": "pod-2", "controller": true},
    ]}, "status": {"reservedFor": [{"resource": "pods", "name": "q", "uid": "pod-2"}]}}));
    assert_eq!(
        is_for_pod(&p, &other),
        Err("ResourceClaim ns/c was not created for Pod ns/p (Pod is not owner)".into())
    );
    assert!(!is_reserved_for_pod(&p, &other));
    let elsewhere = claim(json!({"metadata": {"namespace": "other"}}));
    assert_eq!(
        is_for_pod(&p, &elsewhere),
        Err("ResourceClaim other/c is not in the same namespace as Pod ns/p".into())
    );
}

fn allocated(results: serde_json::Value) -> ResourceClaim {
    claim(json!({"status": {"allocation": {"devices": {"results": results}}}}))
}

#[test]
fn a_claim_info_has_a_state_per_driver_of_its_allocation() {
    assert_eq!(
        ClaimInfo::from_claim(&claim(json!({}))),
        Err("not allocated".into())
    );
    let info = ClaimInfo::from_claim(&allocated(json!([
        {"driver": "b.example.com", "pool": "n", "device": "d0", "request": "r"},
        {"driver": "a.example.com", "pool": "n", "device": "d1", "request": "r"},
        {"driver": "a.example.com", "pool": "n", "device": "d2", "request": "s"},
    ])))
    .unwrap();
    assert_eq!(
        info.state.driver_state.keys().collect::<Vec<_>>(),
        ["a.example.com", "b.example.com"]
    );
    assert_eq!(
        (
            info.state.claim_uid.as_str(),
            info.state.claim_name.as_str(),
            info.state.namespace.as_str()
        ),
        ("claim-1", "c", "ns")
    );
    assert!(info.state.pod_uids.is_empty() && !info.prepared);
    // Skipping node operations is an alpha gate the kubelet does not have.
    assert_eq!(
        ClaimInfo::from_claim(&allocated(json!([
            {"driver": "a", "pool": "n", "device": "d", "request": "r", "skipNodeOperations": ["All"]},
        ]))),
        Err("DRAOptionalNodeOperations feature gate is disabled on kubelet".into())
    );
}

fn device(name: &str, requests: &[&str], cdi: &[&str]) -> Device {
    Device {
        pool_name: "node-1".into(),
        device_name: name.into(),
        share_id: None,
        request_names: requests.iter().map(|s| s.to_string()).collect(),
        cdi_device_ids: cdi.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn a_containers_cdi_devices_are_those_of_its_requests() {
    let mut info = ClaimInfo::from_claim(&allocated(json!([
        {"driver": "a.example.com", "pool": "n", "device": "d0", "request": "gpu"},
    ])))
    .unwrap();
    info.set_devices(
        "a.example.com",
        vec![
            device("d0", &["gpu"], &["a.example.com/gpu=d0"]),
            device(
                "d1",
                &["nic"],
                &["a.example.com/nic=d1", "a.example.com/nic=d1-vf"],
            ),
            device("d2", &[], &["a.example.com/any=d2"]),
        ],
    );
    let cases: [(&str, &[&str]); 3] = [
        ("gpu", &["a.example.com/gpu=d0", "a.example.com/any=d2"]),
        (
            "nic",
            &[
                "a.example.com/nic=d1",
                "a.example.com/nic=d1-vf",
                "a.example.com/any=d2",
            ],
        ),
        (
            "",
            &[
                "a.example.com/gpu=d0",
                "a.example.com/nic=d1",
                "a.example.com/nic=d1-vf",
                "a.example.com/any=d2",
            ],
        ),
    ];
    for (request, want) in cases {
        assert_eq!(info.cdi_devices(request), want, "{request}");
    }
    assert_eq!(base_request("gpu/small"), "gpu");
}

#[test]
fn a_container_uses_the_claims_it_names_and_its_dra_extended_resources() {
    let p = pod(json!({
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "t"},
                {"name": "shared", "resourceClaimName": "team-gpus"},
                {"name": "unused", "resourceClaimName": "other"},
            ],
            "containers": [{
                "name": "app",
                "resources": {
                    "claims": [{"name": "gpu"}, {"name": "shared", "request": "big"}, {"name": "shared", "request": "small"}],
                    "requests": {"example.com/gpu": "1"},
                    "limits": {"example.com/gpu": "1"},
                },
            }, {"name": "other"}],
        },
        "status": {
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-abc"}],
            "extendedResourceClaimStatus": {
                "resourceClaimName": "p-extended-resources-xyz",
                "requestMappings": [
                    {"containerName": "app", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"},
                    {"containerName": "other", "resourceName": "example.com/gpu", "requestName": "container-1-request-0"},
                ],
            },
        },
    }));
    let spec = p.spec.as_ref().unwrap();
    let got = container_claim_requests(&p, &spec.containers[0]).unwrap();
    let want: BTreeMap<String, Vec<String>> = [
        ("p-gpu-abc", vec![""]),
        ("team-gpus", vec!["big", "small"]),
        ("p-extended-resources-xyz", vec!["container-0-request-0"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(got, want);
    // The other container asks for no extended resource: its mapping is
    // not its own request.
    assert!(
        container_claim_requests(&p, &spec.containers[1])
            .unwrap()
            .is_empty()
    );
    assert!(is_dra_extended_resource(&p, "app", "example.com/gpu"));
    assert!(!is_dra_extended_resource(&p, "app", "example.com/nic"));
    assert_eq!(pod_claims(&p).len(), 4);
    assert_eq!(
        pod_claims(&p)[3].resource_claim_name.as_deref(),
        Some("p-extended-resources-xyz")
    );
}

#[test]
fn the_cache_knows_each_pods_claims_and_what_is_in_use() {
    let mut cache = ClaimCache::default();
    let mut a = ClaimInfo::from_claim(&allocated(json!([
        {"driver": "a.example.com", "pool": "n", "device": "d0", "request": "r"},
    ])))
    .unwrap();
    a.state
        .pod_uids
        .extend(["pod-1".to_string(), "pod-2".to_string()]);
    a.prepared = true;
    let mut b = a.clone();
    b.state.claim_name = "d".into();
    b.state.pod_uids = ["pod-2".to_string()].into();
    b.prepared = false;
    cache.add(a);
    cache.add(b);
    assert!(cache.has_pod("pod-1") && !cache.has_pod("pod-3"));
    assert_eq!(
        cache.claims_of_pod("pod-2"),
        [
            ("ns".to_string(), "c".to_string()),
            ("ns".to_string(), "d".to_string())
        ]
    );
    assert_eq!(
        cache.pods()["pod-2"],
        ("ns".to_string(), vec!["c".to_string(), "d".to_string()])
    );
    let in_use = cache.in_use();
    assert_eq!((in_use["<any>"], in_use["a.example.com"]), (1, 1));
    let restored = ClaimCache::restore(cache.states());
    assert!(restored.get("ns", "c").is_some_and(|c| !c.prepared));
    assert_eq!(restored.in_use()["<any>"], 0);
}

/// The files v1.37.2's state package writes for the same lists (a Go
/// program over its NewCheckpoint and MarshalCheckpoint): no file yet (a
/// nil list), an empty list, and two claims.
const UPSTREAM: [&str; 3] = [
    include_str!("upstream_nil.json"),
    include_str!("upstream_empty.json"),
    include_str!("upstream_claims.json"),
];

fn claims() -> Vec<ClaimInfoState> {
    let mut two = device("dev-1", &[], &[]);
    two.share_id = Some("share-1".into());
    vec![
        ClaimInfoState {
            claim_uid: "uid-a".into(),
            claim_name: "claim-a".into(),
            namespace: "ns".into(),
            pod_uids: ["pod-1".to_string(), "pod-2".to_string()].into(),
            driver_state: [
                (
                    "a.example.com".to_string(),
                    DriverState {
                        devices: vec![device("dev-0", &["gpu"], &["a.example.com/gpu=dev-0"]), two],
                        skip_node_operations: vec![],
                    },
                ),
                ("b.example.com".to_string(), DriverState::default()),
            ]
            .into(),
        },
        ClaimInfoState {
            claim_uid: "uid-b".into(),
            claim_name: "claim-b".into(),
            namespace: "ns".into(),
            ..Default::default()
        },
    ]
}

#[test]
fn the_checkpoint_is_upstreams_byte_for_byte() {
    let lists = [None, Some(vec![]), Some(claims())];
    for (list, want) in lists.into_iter().zip(UPSTREAM) {
        let bytes = state::encode(list.clone()).unwrap();
        assert_eq!(String::from_utf8(bytes).unwrap(), want.trim_end());
        assert_eq!(
            state::decode(want.as_bytes()).unwrap(),
            list.unwrap_or_default()
        );
    }
}

#[test]
fn a_corrupt_checkpoint_is_refused() {
    let tampered = UPSTREAM[2].replace("dev-0", "dev-9");
    assert!(matches!(
        state::decode(tampered.as_bytes()),
        Err(StateError::Corrupt)
    ));
    assert_eq!(StateError::Corrupt.to_string(), "checkpoint is corrupted");
    assert!(matches!(state::decode(b"{"), Err(StateError::Format(_))));
}

mod health_tests {
    use std::time::{Duration, Instant};

    use super::super::health::{DEFAULT_TIMEOUT, DeviceHealth, Health, HealthCache, claims_status};
    use super::*;

    fn report(device: &str, health: Health, timeout: i64, message: &str) -> DeviceHealth {
        DeviceHealth::reported("pool", device, health, timeout, message)
    }

    #[test]
    fn reports_change_hold_for_their_timeout_then_are_unknown() {
        let t0 = Instant::now();
        let mut cache = HealthCache::default();
        let changed = cache.update(
            "d",
            vec![
                report("a", Health::Healthy, 0, ""),
                report("b", Health::Unhealthy, 60, "hot"),
            ],
            t0,
        );
        assert_eq!(changed.len(), 2);
        assert_eq!(
            cache.get("d", "pool", "a", t0),
            (Health::Healthy, String::new())
        );
        assert_eq!(
            cache.get("d", "pool", "b", t0),
            (Health::Unhealthy, "hot".into())
        );
        assert_eq!(cache.get("d", "pool", "c", t0).0, Health::Unknown);
        assert_eq!(cache.get("e", "pool", "a", t0).0, Health::Unknown);
        // The same again: no change. Past a's default timeout without a
        // report of a: unknown, and dropped as a change.
        let t1 = t0 + Duration::from_secs(1);
        assert!(
            cache
                .update(
                    "d",
                    vec![
                        report("a", Health::Healthy, 0, ""),
                        report("b", Health::Unhealthy, 60, "hot")
                    ],
                    t1
                )
                .is_empty()
        );
        let t2 = t1 + DEFAULT_TIMEOUT + Duration::from_secs(1);
        assert_eq!(cache.get("d", "pool", "a", t2).0, Health::Unknown);
        assert_eq!(cache.get("d", "pool", "b", t2).0, Health::Unhealthy);
        assert_eq!(
            cache.update("d", vec![report("b", Health::Healthy, 60, "")], t2),
            [
                ("pool".to_string(), "b".to_string()),
                ("pool".to_string(), "a".to_string())
            ]
        );
        cache.clear("d");
        assert_eq!(cache.get("d", "pool", "b", t2).0, Health::Unknown);
        // A long message is cut to the API's 1024 bytes.
        assert_eq!(
            report("x", Health::Healthy, 0, &"m".repeat(2000))
                .message
                .len(),
            1024
        );
    }

    #[test]
    fn a_containers_claims_show_their_devices_health() {
        let p = pod(json!({
            "spec": {
                "resourceClaims": [
                    {"name": "gpu", "resourceClaimTemplateName": "t"},
                    {"name": "nic", "resourceClaimName": "nics"},
                ],
                "containers": [{"name": "app", "resources": {"claims": [
                    {"name": "gpu"}, {"name": "nic", "request": "fast"},
                ]}}],
            },
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]},
        }));
        let mut cache = ClaimCache::default();
        let mut gpu = ClaimInfo::from_claim(&allocated(json!([
            {"driver": "a.example.com", "pool": "pool", "device": "d0", "request": "r"},
        ])))
        .unwrap();
        gpu.state.claim_name = "p-gpu".into();
        gpu.set_devices(
            "a.example.com",
            vec![device("d0", &["r"], &["a.example.com/gpu=d0"])],
        );
        let mut nics = gpu.clone();
        nics.state.claim_name = "nics".into();
        nics.set_devices(
            "a.example.com",
            vec![device("n0", &["fast"], &[]), device("n1", &["slow"], &[])],
        );
        cache.add(gpu);
        cache.add(nics);
        let t0 = Instant::now();
        let mut health = HealthCache::default();
        health.update(
            "a.example.com",
            vec![DeviceHealth::reported(
                "node-1",
                "d0",
                Health::Unhealthy,
                0,
                "ECC errors",
            )],
            t0,
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        let status = claims_status(&p, c, &cache, &health, t0, true);
        type Resource = (String, Option<String>, Option<String>);
        let got: Vec<(String, Vec<Resource>)> = status
            .into_iter()
            .map(|s| {
                let resources = s
                    .resources
                    .unwrap()
                    .into_iter()
                    .map(|r| (r.resource_id, r.health, r.message))
                    .collect();
                (s.name, resources)
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "claim:gpu".to_string(),
                    vec![(
                        "a.example.com/gpu=d0".to_string(),
                        Some("Unhealthy".to_string()),
                        Some("ECC errors".to_string())
                    )]
                ),
                (
                    "claim:nic/fast".to_string(),
                    vec![(
                        "a.example.com/node-1/n0".to_string(),
                        Some("Unknown".to_string()),
                        None
                    )]
                ),
            ]
        );
        // Without ResourceHealthStatusMessage: no message.
        let quiet = claims_status(&p, c, &cache, &health, t0, false);
        assert_eq!(quiet[0].resources.as_ref().unwrap()[0].message, None);
    }
}
