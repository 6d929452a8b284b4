use super::*;
use k8s_openapi::api::storage::v1::{CSIDriverSpec, TokenRequest};

#[test]
fn the_layout_is_upstreams() {
    // sha256("csi-1mock.driverrk-node"), as getAttachmentName computes it.
    let name = attachment_name("1", "mock.driver", "rk-node");
    assert!(name.starts_with("csi-") && name.len() == 4 + 64, "{name}");
    assert_ne!(name, attachment_name("1", "mock.driver", "other"));
    let staged = staging_path(Path::new("/r"), "d", "vol-1");
    let hash = staged.parent().and_then(Path::file_name).unwrap();
    assert_eq!(hash.len(), 64);
    assert_eq!(hex::encode(Sha256::digest("vol-1")), hash.to_str().unwrap());
    assert_eq!(
        staged.parent().and_then(Path::parent),
        Some(Path::new("/r/plugins/kubernetes.io/csi/d"))
    );
    assert_eq!(unique_volume_name("d", "h"), "kubernetes.io/csi/d^h");
}

#[test]
fn vol_data_reads_and_writes_upstreams_keys() {
    let staged = VolData {
        volume_handle: "h".into(),
        driver_name: "d".into(),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_string(&staged).unwrap(),
        r#"{"volumeHandle":"h","driverName":"d"}"#
    );
    // What upstream's kubelet writes for a pod's volume.
    let upstream = r#"{"attachmentID":"csi-x","driverName":"d","nodeName":"n","specVolID":"pv-1","volumeHandle":"h","volumeLifecycleMode":"Persistent"}"#;
    let read: VolData = serde_json::from_str(upstream).unwrap();
    assert_eq!(read.spec_vol_id, "pv-1");
    assert_eq!(read.volume_lifecycle_mode, PERSISTENT);
    assert_eq!(read.attachment_id, "csi-x");
}

#[test]
fn access_modes_map_as_upstreams() {
    let m = |modes: &[&str], multi: bool| {
        access_mode(
            &modes.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            multi,
        )
    };
    let cases = [
        (m(&[], false), 1),
        (m(&["ReadWriteOnce"], false), 1),
        (m(&["ReadWriteOnce"], true), 7),
        (m(&["ReadWriteOncePod"], false), 1),
        (m(&["ReadWriteOncePod"], true), 6),
        (m(&["ReadOnlyMany", "ReadWriteOnce"], false), 3),
        (m(&["ReadWriteMany"], true), 5),
    ];
    for (i, (got, want)) in cases.into_iter().enumerate() {
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn a_missing_csidriver_means_upstreams_defaults() {
    let none = DriverPolicy::of(None);
    assert!(none.attach_required && !none.pod_info_on_mount);
    assert_eq!(none.fs_group_policy, "ReadWriteOnceWithFSType");
    assert_eq!(none.supports(PERSISTENT, "d"), Ok(()));
    assert_eq!(
        none.supports(EPHEMERAL, "d").unwrap_err(),
        r#"volume mode "Ephemeral" not supported by driver d (no CSIDriver object)"#
    );
    let driver = CSIDriver {
        spec: CSIDriverSpec {
            attach_required: Some(false),
            pod_info_on_mount: Some(true),
            fs_group_policy: Some("File".into()),
            volume_lifecycle_modes: Some(vec![EPHEMERAL.into()]),
            token_requests: Some(vec![TokenRequest {
                audience: "vault".into(),
                expiration_seconds: Some(600),
            }]),
            ..Default::default()
        },
        ..Default::default()
    };
    let p = DriverPolicy::of(Some(&driver));
    assert!(!p.attach_required && p.pod_info_on_mount);
    assert_eq!(p.token_requests, vec![("vault".to_string(), Some(600))]);
    assert_eq!(p.supports(EPHEMERAL, "d"), Ok(()));
    assert_eq!(
        p.supports(PERSISTENT, "d").unwrap_err(),
        r#"volume mode "Persistent" not supported by driver d (only supports ["Ephemeral"])"#
    );
    // An object without modes serves Persistent volumes.
    assert_eq!(
        DriverPolicy::of(Some(&CSIDriver::default())).supports(PERSISTENT, "d"),
        Ok(())
    );
}

#[test]
fn fs_group_is_applied_where_upstream_applies_it() {
    let policy = |p: &str| DriverPolicy {
        fs_group_policy: p.into(),
        ..DriverPolicy::of(None)
    };
    let rwo = ["ReadWriteOnce".to_string()];
    let rwx = ["ReadWriteMany".to_string()];
    // (policy, fsType, read-only, the PV's access modes, applied)
    type Case<'a> = (&'a str, &'a str, bool, Option<&'a [String]>, bool);
    let cases: &[Case] = &[
        ("ReadWriteOnceWithFSType", "ext4", false, Some(&rwo), true),
        ("ReadWriteOnceWithFSType", "", false, Some(&rwo), false),
        ("ReadWriteOnceWithFSType", "ext4", false, Some(&rwx), false),
        ("ReadWriteOnceWithFSType", "ext4", false, None, true),
        ("ReadWriteOnceWithFSType", "ext4", true, Some(&rwo), false),
        ("File", "", false, Some(&rwx), true),
        ("File", "", true, Some(&rwx), false),
        ("None", "ext4", false, Some(&rwo), false),
    ];
    for (i, (p, fs, ro, modes, want)) in cases.iter().enumerate() {
        assert_eq!(
            policy(p).kubelet_applies_fs_group(fs, *ro, *modes),
            *want,
            "case {i}"
        );
    }
}

#[test]
fn only_csi_1_is_spoken() {
    let v = |vs: &[&str]| {
        highest_supported_version(
            "RegisterPlugin",
            "d",
            &vs.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(v(&["1.0.0"]), Ok((1, 0, 0)));
    assert_eq!(v(&["0.3.0", "v1.2.0", "1.10"]), Ok((1, 10, 0)));
    assert!(
        v(&[])
            .unwrap_err()
            .contains("Plugin returned an empty list for supported versions")
    );
    let err = v(&["0.3.0", "2.0.0"]).unwrap_err();
    assert!(
        err.contains(r#"None of the versions specified ["0.3.0", "2.0.0"] are supported"#),
        "{err}"
    );
}

#[test]
fn a_driver_is_installed_in_the_csinode_once() {
    let topology = BTreeMap::from([("zone".to_string(), "a".to_string())]);
    let drivers = install_driver(&[], "d", "n1", 10, &topology).unwrap();
    assert_eq!(drivers.len(), 1);
    assert_eq!(
        drivers[0].topology_keys.as_deref(),
        Some(&["zone".to_string()][..])
    );
    assert_eq!(
        drivers[0].allocatable.as_ref().and_then(|a| a.count),
        Some(10)
    );
    assert_eq!(install_driver(&drivers, "d", "n1", 10, &topology), None);
    let moved = install_driver(&drivers, "d", "n2", 0, &BTreeMap::new()).unwrap();
    assert_eq!((moved.len(), moved[0].node_id.as_str()), (1, "n2"));
    assert!(moved[0].allocatable.is_none());
    let two = install_driver(&moved, "e", "n", 0, &BTreeMap::new()).unwrap();
    assert_eq!(
        two.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["d", "e"]
    );
}

#[test]
fn the_node_id_annotation_is_a_json_map() {
    assert_eq!(
        node_id_annotation(None, "d", Some("n")).as_deref(),
        Some(r#"{"d":"n"}"#)
    );
    let both = node_id_annotation(Some(r#"{"d":"n"}"#), "e", Some("m")).unwrap();
    assert_eq!(both, r#"{"d":"n","e":"m"}"#);
    assert_eq!(node_id_annotation(Some(&both), "e", Some("m")), None);
    assert_eq!(
        node_id_annotation(Some(&both), "e", None).as_deref(),
        Some(r#"{"d":"n"}"#)
    );
    assert_eq!(
        node_id_annotation(Some(r#"{"d":"n"}"#), "d", None).as_deref(),
        Some("")
    );
    assert_eq!(node_id_annotation(None, "d", None), None);
}
