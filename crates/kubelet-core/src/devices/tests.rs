use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::checkpoint::{Data, PodDevicesEntry};
use super::*;

#[test]
fn extended_resource_names_are_upstreams() {
    for (name, extended) in [
        ("example.com/resource", true),
        ("nvidia.com/gpu", true),
        ("cpu", false),
        ("memory", false),
        ("hugepages-2Mi", false),
        ("kubernetes.io/something", false),
        ("foo.kubernetes.io/bar", false),
        ("requests.example.com/x", false),
        ("example.com/", false),
        ("example.com/-bad", false),
        ("Example.com/x", false),
    ] {
        assert_eq!(is_extended_resource_name(name), extended, "{name}");
    }
}

#[test]
fn a_containers_extended_limits_are_what_it_asks_of_plugins() {
    let c = Container {
        resources: Some(ResourceRequirements {
            limits: Some(BTreeMap::from([
                ("cpu".into(), Quantity("1".into())),
                ("example.com/resource".into(), Quantity("2".into())),
                ("nvidia.com/gpu".into(), Quantity("0".into())),
            ])),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        extended_limits(&c),
        BTreeMap::from([
            ("example.com/resource".into(), 2),
            ("nvidia.com/gpu".into(), 0)
        ])
    );
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn devices_are_taken_in_order_until_enough() {
    let mut taken = BTreeSet::new();
    assert!(!take_from(3, &mut taken, &set(&["b"])));
    assert!(take_from(3, &mut taken, &set(&["b", "c", "a", "d"])));
    assert_eq!(taken, set(&["a", "b", "c"]));
    let mut none = BTreeSet::new();
    assert!(take_from(0, &mut none, &set(&["a"])));
    assert!(none.is_empty());
}

/// Checksums printed by upstream's code (go-spew v1.1.2-0.20180830191138
/// with DeepHashObject's settings, FNV-1a 32) for the same data.
#[test]
fn the_checksum_is_upstreams() {
    let empty = Data::default();
    assert_eq!(empty.checksum(), 1944006890);
    let empties = Data {
        pod_device_entries: Some(Vec::new()),
        registered_devices: Some(BTreeMap::new()),
    };
    assert_eq!(empties.checksum(), 2932075448);
    let full = Data {
        pod_device_entries: Some(vec![
            PodDevicesEntry {
                pod_uid: "uid-1".into(),
                container_name: "c".into(),
                resource_name: "example.com/resource".into(),
                device_ids: Some(BTreeMap::from([
                    (-1, Some(vec!["Dev-1".into(), "Dev-2".into()])),
                    (0, Some(vec!["x".into()])),
                ])),
                alloc_resp: Some(vec![10, 3, b'a', b'b', b'c']),
            },
            PodDevicesEntry {
                pod_uid: "uid-2".into(),
                container_name: "d".into(),
                resource_name: "r".into(),
                device_ids: Some(BTreeMap::new()),
                alloc_resp: None,
            },
        ]),
        registered_devices: Some(BTreeMap::from([
            (
                "example.com/resource".into(),
                Some(vec!["Dev-1".into(), "Dev-2".into()]),
            ),
            ("a/b".into(), Some(Vec::new())),
            ("c/d".into(), None),
        ])),
    };
    assert_eq!(full.checksum(), 2977443453);
    let nils = Data {
        pod_device_entries: Some(vec![PodDevicesEntry {
            pod_uid: "u".into(),
            container_name: "c d".into(),
            resource_name: "r".into(),
            device_ids: None,
            alloc_resp: Some(Vec::new()),
        }]),
        registered_devices: None,
    };
    assert_eq!(nils.checksum(), 3360897180);
    // Through the file and back, nil and empty kept apart.
    for data in [empty, empties, full, nils] {
        let bytes = data.encode().unwrap();
        assert_eq!(Data::decode(&bytes).unwrap(), data);
    }
}

/// The file as upstream's encoding/json writes the data of
/// [`the_checksum_is_upstreams`] (printed by Go).
#[test]
fn a_file_as_upstream_writes_it_is_read_and_a_changed_one_refused() {
    let upstream = br#"{"Data":{"PodDeviceEntries":[{"PodUID":"uid-1","ContainerName":"c","ResourceName":"example.com/resource","DeviceIDs":{"-1":["Dev-1","Dev-2"],"0":["x"]},"AllocResp":"CgNhYmM="},{"PodUID":"uid-2","ContainerName":"d","ResourceName":"r","DeviceIDs":{},"AllocResp":null}],"RegisteredDevices":{"a/b":[],"c/d":null,"example.com/resource":["Dev-1","Dev-2"]}},"Checksum":2977443453}"#;
    let data = Data::decode(upstream).unwrap();
    assert_eq!(data.encode().unwrap(), upstream);
    let entries = data.pod_device_entries.unwrap();
    assert_eq!(entries[0].alloc_resp.as_deref(), Some(&b"\n\x03abc"[..]));
    assert_eq!(
        entries[0].device_ids.as_ref().unwrap()[&-1],
        Some(vec!["Dev-1".to_string(), "Dev-2".to_string()])
    );
    let changed = String::from_utf8_lossy(upstream).replace("Dev-2\"]}", "Dev-3\"]}");
    assert!(matches!(
        Data::decode(changed.as_bytes()),
        Err(crate::checkpoint::CheckpointError::Corrupt { .. })
    ));
    assert!(Data::decode(b"{not json").is_err());
}
