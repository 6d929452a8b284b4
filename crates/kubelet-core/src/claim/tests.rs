use super::*;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, LocalVolumeSource, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ObjectReference, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
    PersistentVolumeSpec, VolumeNodeAffinity, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn claim(phase: &str, volume: &str, deleting: bool, finalizers: &[&str]) -> PersistentVolumeClaim {
    let mut pvc = PersistentVolumeClaim::default();
    pvc.metadata.name = Some("data".into());
    pvc.metadata.deletion_timestamp =
        deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    pvc.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
    pvc.spec = Some(PersistentVolumeClaimSpec {
        volume_name: Some(volume.into()),
        ..Default::default()
    });
    pvc.status = Some(PersistentVolumeClaimStatus {
        phase: Some(phase.into()),
        ..Default::default()
    });
    pvc
}

#[test]
fn a_claim_names_its_volume_once_bound() {
    let cases: &[(PersistentVolumeClaim, Result<&str, &str>)] = &[
        (claim("Bound", "pv-1", false, &[]), Ok("pv-1")),
        (claim("Pending", "", false, &[]), Err("PVC is not bound")),
        (claim("Lost", "pv-1", false, &[]), Err("PVC is not bound")),
        (
            claim("Bound", "", false, &[]),
            Err("PVC has empty pvc.Spec.VolumeName"),
        ),
        (
            claim("Bound", "pv-1", true, &[]),
            Err("PVC is being deleted"),
        ),
        // Protected: still in use until its pods are gone.
        (
            claim("Bound", "pv-1", true, &[PVC_PROTECTION_FINALIZER]),
            Ok("pv-1"),
        ),
    ];
    for (pvc, want) in cases {
        assert_eq!(bound_volume_name(pvc), want.map_err(String::from));
    }
}

fn volume(uid: Option<&str>, spec: PersistentVolumeSpec) -> PersistentVolume {
    let mut pv = PersistentVolume::default();
    pv.metadata.name = Some("pv-1".into());
    pv.spec = Some(PersistentVolumeSpec {
        claim_ref: uid.map(|u| ObjectReference {
            uid: Some(u.into()),
            ..Default::default()
        }),
        ..spec
    });
    pv
}

fn on_node(node: &str) -> Option<VolumeNodeAffinity> {
    Some(VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "kubernetes.io/hostname".into(),
                    operator: "In".into(),
                    values: Some(vec![node.into()]),
                }]),
                ..Default::default()
            }],
        }),
    })
}

#[test]
fn a_volume_is_checked_against_its_claim_and_node() {
    let labels = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "n1".to_owned())]);
    let host = PersistentVolumeSpec {
        host_path: Some(HostPathVolumeSource {
            path: "/srv/pv".into(),
            type_: Some("DirectoryOrCreate".into()),
        }),
        ..Default::default()
    };
    let local = |node: &str| PersistentVolumeSpec {
        local: Some(LocalVolumeSource {
            path: "/mnt/disks/a".into(),
            ..Default::default()
        }),
        node_affinity: on_node(node),
        volume_mode: Some("Filesystem".into()),
        ..Default::default()
    };
    let got = bound_volume(&volume(Some("u1"), host.clone()), "u1", true, "n1", &labels).unwrap();
    assert_eq!(
        got,
        BoundVolume {
            pv_name: "pv-1".into(),
            source: PvSource::HostPath {
                path: "/srv/pv".into(),
                type_: "DirectoryOrCreate".into()
            },
            read_only: true,
            block: false,
            gid: None,
        }
    );
    let mut annotated = volume(Some("u1"), local("n1"));
    annotated.metadata.annotations =
        Some([(VOLUME_GID_ANNOTATION.to_owned(), "1234".to_owned())].into());
    let got = bound_volume(&annotated, "u1", false, "n1", &labels).unwrap();
    assert_eq!(got.gid, Some(1234));
    assert_eq!(
        got.source,
        PvSource::Local {
            path: "/mnt/disks/a".into()
        }
    );
    let errors = [
        (
            bound_volume(&volume(None, host.clone()), "u1", false, "n1", &labels),
            "found PV object pv-1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim",
        ),
        (
            bound_volume(
                &volume(Some("u2"), host.clone()),
                "u1",
                false,
                "n1",
                &labels,
            ),
            "found PV object pv-1 but its pv.Spec.ClaimRef.UID u2 does not point to claim.UID u1",
        ),
        (
            bound_volume(&volume(Some("u1"), local("n2")), "u1", false, "n1", &labels),
            "PV pv-1's node affinity does not select node n1: its data is on another node",
        ),
    ];
    for (got, want) in errors {
        assert_eq!(got.unwrap_err(), want);
    }
    let csi = PersistentVolumeSpec {
        csi: Some(k8s_openapi::api::core::v1::CSIPersistentVolumeSource {
            driver: "d".into(),
            volume_handle: "h".into(),
            read_only: Some(true),
            ..Default::default()
        }),
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        volume_mode: Some("Block".into()),
        ..Default::default()
    };
    let got = bound_volume(&volume(Some("u1"), csi), "u1", false, "n1", &labels).unwrap();
    let PvSource::Csi(c) = got.source else {
        panic!("not a CSI volume: {:?}", got.source)
    };
    assert!(got.block);
    assert_eq!(
        (c.driver.as_str(), c.handle.as_str(), c.spec_name.as_str()),
        ("d", "h", "pv-1")
    );
    // The source's readOnly makes it read-only whatever the claim says.
    assert!(c.read_only);
    assert_eq!(c.lifecycle_mode(), crate::csi::PERSISTENT);
    let nfs = PersistentVolumeSpec {
        nfs: Some(Default::default()),
        ..Default::default()
    };
    let got = bound_volume(&volume(Some("u1"), nfs), "u1", false, "n1", &labels).unwrap();
    assert_eq!(got.source, PvSource::Unsupported("nfs"));
}

#[test]
fn a_volume_is_expanded_on_the_node_when_the_resizer_says_so() {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let pv = |size: &str| PersistentVolume {
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([(
                "storage".to_string(),
                Quantity(size.into()),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    };
    let pvc = |size: &str, resize: Option<&str>| {
        let mut c = claim("Bound", "pv-1", false, &[]);
        let status = c.status.as_mut().unwrap();
        status.capacity = Some(BTreeMap::from([(
            "storage".to_string(),
            Quantity(size.into()),
        )]));
        status.allocated_resource_statuses =
            resize.map(|r| BTreeMap::from([("storage".to_string(), r.to_string())]));
        c.spec.get_or_insert_default().resources = Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([(
                "storage".to_string(),
                Quantity("2Gi".into()),
            )])),
            ..Default::default()
        });
        c
    };
    let expansion = NodeExpansion {
        new_size: "2Gi".into(),
        new_bytes: 2 << 30,
        request_differs: false,
    };
    let grown = Some(expansion.clone());
    // A user lowering the request after the node failed to reach 2Gi.
    let mut lowered = pvc("1Gi", Some(NODE_RESIZE_PENDING));
    lowered.spec.as_mut().unwrap().resources = Some(VolumeResourceRequirements {
        requests: Some(BTreeMap::from([(
            "storage".to_string(),
            Quantity("1536Mi".into()),
        )])),
        ..Default::default()
    });
    let cases = [
        (
            pvc("1Gi", Some(NODE_RESIZE_PENDING)),
            pv("2Gi"),
            grown.clone(),
        ),
        (
            pvc("1Gi", Some(NODE_RESIZE_IN_PROGRESS)),
            pv("2Gi"),
            grown.clone(),
        ),
        (
            lowered,
            pv("2Gi"),
            Some(NodeExpansion {
                request_differs: true,
                ..expansion
            }),
        ),
        // The controller has not handed it to the node (or expands it all).
        (pvc("1Gi", None), pv("2Gi"), None),
        (
            pvc("1Gi", Some("ControllerResizeInProgress")),
            pv("2Gi"),
            None,
        ),
        (pvc("1Gi", Some("NodeResizeInfeasible")), pv("2Gi"), None),
        // Done already.
        (pvc("2Gi", Some(NODE_RESIZE_PENDING)), pv("2Gi"), None),
        (pvc("2048Mi", Some(NODE_RESIZE_PENDING)), pv("2Gi"), None),
    ];
    for (i, (c, v, want)) in cases.into_iter().enumerate() {
        assert_eq!(node_expansion(&c, &v), want, "case {i}");
    }
}

#[test]
fn a_failed_node_expansion_marks_the_claim_as_upstream() {
    use ExpansionFailure::{Failed, InUse, Infeasible};
    // gRPC codes: 9 FailedPrecondition, 3 InvalidArgument, 5 NotFound,
    // 11 OutOfRange, 13 Internal, 4 DeadlineExceeded.
    let cases = [
        (9, false, InUse),
        (9, true, InUse),
        (3, false, Infeasible),
        (5, false, Infeasible),
        (11, false, Infeasible),
        (13, false, Failed),
        (4, false, Failed),
        (13, true, Infeasible),
    ];
    for (code, recovering, want) in cases {
        assert_eq!(ExpansionFailure::of(code, recovering), want, "code {code}");
    }
    let rpc = "rpc error: code = OutOfRange desc = too big";
    assert_eq!(
        Infeasible.error(rpc),
        "Expander.NodeExpand failed to expand the volume rpc error: code = OutOfRange desc = too big"
    );
    assert_eq!(
        Failed.error(rpc),
        "Expander.NodeExpand failed to expand the volume : rpc error: code = OutOfRange desc = too big"
    );

    let now = Time("2023-11-14T22:13:20Z".parse().unwrap());
    let earlier = Time("2020-09-13T12:26:40Z".parse().unwrap());
    let condition = |type_: &str, status: &str, message: &str| PersistentVolumeClaimCondition {
        type_: type_.into(),
        status: status.into(),
        message: Some(message.into()),
        last_transition_time: Some(earlier.clone()),
        ..Default::default()
    };
    assert_eq!(InUse.claim_status(&[], "e", now.clone()), None);
    // Infeasible: the status and a new condition; others kept.
    let patch = Infeasible
        .claim_status(&[condition("Resizing", "True", "r")], "boom", now.clone())
        .unwrap();
    assert_eq!(
        patch["allocatedResourceStatuses"]["storage"],
        "NodeResizeInfeasible"
    );
    let conditions = patch["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 2);
    assert_eq!(conditions[0]["type"], "Resizing");
    assert_eq!(conditions[1]["type"], "NodeResizeError");
    assert_eq!(conditions[1]["status"], "True");
    assert_eq!(conditions[1]["message"], "failed to expand pvc with boom");
    assert_eq!(conditions[1]["lastTransitionTime"], "2023-11-14T22:13:20Z");
    // Failed: no status; a NodeResizeError already True is kept as it was.
    let patch = Failed
        .claim_status(&[condition("NodeResizeError", "True", "old")], "new", now)
        .unwrap();
    assert!(patch.get("allocatedResourceStatuses").is_none());
    assert_eq!(patch["conditions"][0]["message"], "old");
    assert_eq!(
        patch["conditions"][0]["lastTransitionTime"],
        "2020-09-13T12:26:40Z"
    );
}

#[test]
fn local_paths_are_absolute_without_backsteps() {
    let cases = [
        ("/mnt/disks/a", Ok(())),
        ("", Err("LocalVolume path is empty")),
        ("mnt/a", Err("invalid path: mnt/a must be an absolute path")),
        (
            "/mnt/../etc",
            Err("invalid path: /mnt/../etc must not contain '..'"),
        ),
        ("/mnt/..a", Ok(())),
    ];
    for (path, want) in cases {
        assert_eq!(check_local_path(path), want.map_err(String::from), "{path}");
    }
}

#[test]
fn an_ephemeral_claim_must_be_its_pods() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let pod = crate::testing::PodBuilder::new("web")
        .namespace("ns")
        .uid("pod-uid")
        .build();
    assert_eq!(ephemeral_claim_name(&pod, "scratch"), "web-scratch");
    let mut pvc = claim("Bound", "pv-1", false, &[]);
    pvc.metadata.name = Some("web-scratch".into());
    pvc.metadata.namespace = Some("ns".into());
    let owner = |uid: &str, controller: bool| OwnerReference {
        uid: uid.into(),
        controller: Some(controller),
        ..Default::default()
    };
    let not_owner = "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)";
    for (refs, want) in [
        (vec![owner("pod-uid", true)], Ok(())),
        (vec![owner("pod-uid", false)], Err(not_owner)),
        (vec![owner("other", true)], Err(not_owner)),
        (vec![], Err(not_owner)),
    ] {
        pvc.metadata.owner_references = Some(refs);
        assert_eq!(volume_is_for_pod(&pod, &pvc), want.map_err(String::from));
    }
}
