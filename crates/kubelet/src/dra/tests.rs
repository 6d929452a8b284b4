//! The DRA manager against a fake API server and the fake DRA driver.

use kubelet_plugin_api::fake::FakeDraDriver;
use serde_json::json;

use super::*;
use crate::testutil::FakeApi;

const DRIVER: &str = "gpu.example.com";

struct Fixture {
    dir: tempfile::TempDir,
    api: FakeApi,
    driver: FakeDraDriver,
    dra: DraManager,
}

fn claim_path(name: &str) -> String {
    format!("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/{name}")
}

/// A claim allocated from the driver, reserved for the pods `reserved`
/// (their UIDs), owned by the pod `owner` when given.
fn claim(name: &str, uid: &str, reserved: &[&str], owner: Option<&str>) -> serde_json::Value {
    let owners: Vec<serde_json::Value> = owner
        .into_iter()
        .map(|o| json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": o, "controller": true}))
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "ownerReferences": owners},
        "spec": {"devices": {"requests": [{"name": "request", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {"devices": {"results": [
                {"driver": DRIVER, "pool": "pool", "device": "device-00", "request": "request"},
            ]}},
            "reservedFor": reserved.iter().map(|u| json!({"resource": "pods", "name": "p", "uid": u})).collect::<Vec<_>>(),
        },
    })
}

/// A pod `uid` whose container `app` uses the claim made from a template
/// (`p-gpu`) and the shared claim `shared`.
fn pod(uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": uid},
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
                {"name": "shared", "resourceClaimName": "shared"},
            ],
            "containers": [
                {"name": "app", "resources": {"claims": [{"name": "gpu"}, {"name": "shared"}]}},
                {"name": "sidecar"},
            ],
        },
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": format!("p-gpu-{uid}")}]},
    }))
    .unwrap()
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::default();
    for uid in ["pod-1", "pod-2"] {
        api.put(
            &claim_path(&format!("p-gpu-{uid}")),
            claim(
                &format!("p-gpu-{uid}"),
                &format!("claim-{uid}"),
                &[uid],
                Some(uid),
            ),
        );
    }
    api.put(
        &claim_path("shared"),
        claim("shared", "claim-shared", &["pod-1", "pod-2"], None),
    );
    let driver = FakeDraDriver::new(DRIVER);
    let socket = dir.path().join("dra.sock");
    driver.serve(&socket).unwrap();
    let dra = manager(&dir, &api);
    dra.start().unwrap();
    dra.register(DRIVER, &socket, &v1(), &tasks()).unwrap();
    Fixture {
        dir,
        api,
        driver,
        dra,
    }
}

/// The versions a driver serving the v1 API lists.
fn v1() -> Vec<String> {
    vec!["v1.DRAPlugin".into()]
}

fn tasks() -> kubelet_tasks::Tasks {
    kubelet_tasks::Tasks::new(CancellationToken::new())
}

fn manager(dir: &tempfile::TempDir, api: &FakeApi) -> DraManager {
    DraManager::new(
        dir.path(),
        Some(api.client()),
        "n1",
        KubeletMetrics::new("n1"),
        None,
    )
}

fn checkpointed(dir: &tempfile::TempDir) -> Vec<ClaimInfoState> {
    state::decode(&std::fs::read(dir.path().join(state::FILE)).unwrap()).unwrap()
}

#[tokio::test]
async fn a_pods_claims_are_prepared_once_and_unprepared_by_their_last_user() {
    let f = fixture().await;
    let (one, two) = (pod("pod-1"), pod("pod-2"));
    let spec = one.spec.as_ref().unwrap();
    f.dra.prepare(&one).await.unwrap();
    // One call for the driver, with both claims.
    assert_eq!(
        *f.driver.prepared.lock(),
        [vec!["p-gpu-pod-1".to_string(), "shared".to_string()]]
    );
    // The container that names them gets their CDI devices; the other none.
    assert_eq!(
        f.dra.cdi_devices(&one, &spec.containers[0]).unwrap(),
        [
            f.driver.cdi_device("claim-pod-1"),
            f.driver.cdi_device("claim-shared")
        ]
    );
    assert!(
        f.dra
            .cdi_devices(&one, &spec.containers[1])
            .unwrap()
            .is_empty()
    );
    let claims = f.dra.container_claims(&one, &spec.containers[0]);
    assert_eq!(claims.len(), 2);
    assert_eq!(
        claims[0].driver_state[DRIVER].devices[0].device_name,
        "device-00"
    );
    // Again (a new sandbox): nothing to prepare. The second pod prepares
    // only its own claim.
    f.dra.prepare(&one).await.unwrap();
    f.dra.prepare(&two).await.unwrap();
    assert_eq!(f.driver.prepared.lock().len(), 2);
    assert_eq!(f.driver.prepared.lock()[1], ["p-gpu-pod-2"]);
    let shared = checkpointed(&f.dir)
        .into_iter()
        .find(|c| c.claim_name == "shared")
        .unwrap();
    assert_eq!(
        shared.pod_uids,
        ["pod-1".to_string(), "pod-2".to_string()].into()
    );
    assert_eq!(
        shared.driver_state[DRIVER].devices[0].cdi_device_ids,
        [f.driver.cdi_device("claim-shared")]
    );

    // The first pod stops: its own claim is unprepared, the shared one
    // still has a user.
    f.dra.unprepare("pod-1").await.unwrap();
    assert_eq!(
        *f.driver.unprepared.lock(),
        [vec!["p-gpu-pod-1".to_string()]]
    );
    assert!(!f.dra.might_need_unprepare("pod-1"));
    assert!(f.dra.might_need_unprepare("pod-2"));
    // Its second unprepare does nothing.
    f.dra.unprepare("pod-1").await.unwrap();
    assert_eq!(f.driver.unprepared.lock().len(), 1);
    // The second, gone while the kubelet was down (no pod object), by the
    // checkpoint alone.
    f.dra.unprepare("pod-2").await.unwrap();
    assert_eq!(
        f.driver.unprepared.lock()[1],
        ["p-gpu-pod-2".to_string(), "shared".to_string()]
    );
    assert!(checkpointed(&f.dir).is_empty());
    let metrics = f.dra.0.metrics.render();
    assert!(
        metrics.contains(r#"dra_operations_duration_seconds_count{is_error="false",operation_name="PrepareResources"} 3"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"dra_resource_claims_in_use{driver_name="<any>"} 0"#));
    assert!(metrics.contains(r#"dra_grpc_operations_duration_seconds_count{driver_name="gpu.example.com",grpc_status_code="OK",method_name="/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"} 2"#));
}

#[tokio::test]
async fn a_restarted_kubelet_knows_what_it_prepared() {
    let f = fixture().await;
    let one = pod("pod-1");
    f.dra.prepare(&one).await.unwrap();
    // A new manager on the same directory (the kubelet restarted).
    let again = manager(&f.dir, &f.api);
    again.start().unwrap();
    assert!(again.might_need_unprepare("pod-1"));
    // Its containers' CDI devices are known without a driver.
    let spec = one.spec.as_ref().unwrap();
    assert_eq!(
        again.cdi_devices(&one, &spec.containers[0]).unwrap().len(),
        2
    );
    // A pod no longer active is unprepared by the reconcile loop, once the
    // driver is back.
    let socket = f.dir.path().join("dra.sock");
    // The first service the plugin lists that the kubelet speaks.
    let versions = ["v1beta1.DRAPlugin".to_string(), "v1.DRAPlugin".to_string()];
    assert_eq!(
        again.validate(DRIVER, &socket, &versions),
        Ok("v1beta1.DRAPlugin")
    );
    again.register(DRIVER, &socket, &v1(), &tasks()).unwrap();
    again.reconcile(&[]).await;
    assert_eq!(
        *f.driver.unprepared.lock(),
        [vec!["p-gpu-pod-1".to_string(), "shared".to_string()]]
    );
    assert!(!again.might_need_unprepare("pod-1"));
}

#[tokio::test]
async fn claims_the_pod_may_not_use_are_refused_with_upstreams_words() {
    let f = fixture().await;
    type Setup = Box<dyn Fn(&FakeApi, &mut Pod)>;
    let cases: Vec<(&str, Setup, String)> = vec![
        (
            "not reserved",
            Box::new(|api, _| {
                api.put(
                    &claim_path("shared"),
                    claim("shared", "claim-shared", &["pod-2"], None),
                )
            }),
            "pod p (pod-1) is not allowed to use ResourceClaim shared (claim-shared)".into(),
        ),
        (
            "someone else's",
            Box::new(|api, _| {
                api.put(
                    &claim_path("p-gpu-pod-1"),
                    claim("p-gpu-pod-1", "claim-pod-1", &["pod-1"], Some("pod-9")),
                )
            }),
            "ResourceClaim ns/p-gpu-pod-1 was not created for Pod ns/p (Pod is not owner)".into(),
        ),
        (
            "missing",
            Box::new(|api, _| {
                api.objects.lock().remove(&claim_path("shared"));
            }),
            r#"fetch ResourceClaim shared: resourceclaims.resource.k8s.io "shared" not found"#
                .into(),
        ),
        (
            "not made yet",
            Box::new(|_, p| p.status = None),
            r#"pod "ns/p": ResourceClaim not created yet"#.into(),
        ),
        (
            "not allocated",
            Box::new(|api, _| {
                let mut c = claim("shared", "claim-shared", &["pod-1"], None);
                c["status"]["allocation"] = serde_json::Value::Null;
                api.put(&claim_path("shared"), c)
            }),
            "ResourceClaim shared: not allocated".into(),
        ),
    ];
    for (what, setup, want) in cases {
        let api = FakeApi::default();
        api.objects.lock().clone_from(&f.api.objects.lock());
        let mut p = pod("pod-1");
        setup(&api, &mut p);
        let dra = manager(&f.dir, &api);
        dra.start().unwrap();
        dra.register(DRIVER, &f.dir.path().join("dra.sock"), &v1(), &tasks())
            .unwrap();
        assert_eq!(
            dra.prepare(&p).await.unwrap_err().to_string(),
            want,
            "{what}"
        );
        assert!(!dra.might_need_unprepare("pod-1"), "{what}");
    }
    // No driver was called for any of them.
    assert!(f.driver.prepared.lock().is_empty());

    // A driver not registered; a driver that fails the claim.
    let unknown = manager(&f.dir, &f.api);
    unknown.start().unwrap();
    assert_eq!(
        unknown
            .prepare(&pod("pod-1"))
            .await
            .unwrap_err()
            .to_string(),
        "DRA driver gpu.example.com is not registered"
    );
    *f.driver.fail.lock() = Some("no such device".into());
    assert_eq!(
        f.dra.prepare(&pod("pod-1")).await.unwrap_err().to_string(),
        "NodePrepareResources failed for ResourceClaim p-gpu-pod-1: no such device"
    );
    // The pod is counted a user: it is unprepared when it goes.
    assert!(f.dra.might_need_unprepare("pod-1"));
    *f.driver.fail.lock() = None;
    f.dra.prepare(&pod("pod-1")).await.unwrap();
    assert_eq!(f.driver.prepared.lock().len(), 2);
}

#[tokio::test]
async fn plugins_offering_no_service_the_kubelet_speaks_are_refused() {
    let f = fixture().await;
    let at = f.dir.path().join("other.sock");
    assert_eq!(
        f.dra.validate("d", &at, &[]).unwrap_err(),
        format!(
            "invalid supported gRPC versions of DRA driver plugin d at endpoint {}: empty list of supported gRPC services (aka supported versions)",
            at.display()
        )
    );
    let versions = [
        "v2.DRAPlugin".to_string(),
        "v1.DRAResourceHealth".to_string(),
    ];
    assert_eq!(
        f.dra.validate("d", &at, &versions).unwrap_err(),
        format!(
            r#"invalid supported gRPC versions of DRA driver plugin d at endpoint {}: none of services supported by the plugin (["v2.DRAPlugin" "v1.DRAResourceHealth"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])"#,
            at.display()
        )
    );
    // The same endpoint twice.
    let socket = f.dir.path().join("dra.sock");
    assert_eq!(
        f.dra
            .register(DRIVER, &socket, &v1(), &tasks())
            .unwrap_err(),
        format!(
            "endpoint {} already registered for DRA driver plugin {DRIVER}",
            socket.display()
        )
    );
}

#[tokio::test]
async fn a_corrupt_checkpoint_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::default();
    let bytes = state::encode(Some(vec![ClaimInfoState {
        claim_name: "c".into(),
        ..Default::default()
    }]))
    .unwrap();
    let tampered = String::from_utf8(bytes)
        .unwrap()
        .replace("\\\"c\\\"", "\\\"d\\\"");
    std::fs::write(dir.path().join(state::FILE), tampered).unwrap();
    assert_eq!(
        manager(&dir, &api).start().unwrap_err(),
        "create ResourceClaim cache: GetOrCreate() on checkpoint state: failed to get checkpoint dra_manager_state: checkpoint is corrupted"
    );
    // No file: one is made, with upstream's empty list.
    let fresh = tempfile::tempdir().unwrap();
    manager(&fresh, &api).start().unwrap();
    assert_eq!(
        std::fs::read(fresh.path().join(state::FILE)).unwrap(),
        state::encode(None).unwrap()
    );
}

#[tokio::test(start_paused = true)]
async fn an_unusable_drivers_slices_are_deleted_after_its_delay_unless_it_returns() {
    let f = fixture().await;
    let tasks = tasks();
    let socket = f.dir.path().join("dra.sock");
    let deletes = || {
        f.api
            .log
            .lock()
            .iter()
            .filter(|l| l.starts_with("DELETE /apis/resource.k8s.io/v1/resourceslices"))
            .count()
    };
    // Gone, and back within the delay: nothing deleted.
    f.dra.deregister(DRIVER, &socket, &tasks);
    tokio::time::sleep(WIPING_DELAY / 2).await;
    f.dra.register(DRIVER, &socket, &v1(), &tasks).unwrap();
    tokio::time::sleep(WIPING_DELAY).await;
    assert_eq!(deletes(), 0);
    // Killed, its socket left behind: it no longer answers its dial, and
    // its slices go after the delay.
    f.driver.gone.cancel();
    std::fs::remove_file(&socket).unwrap();
    tokio::time::sleep(CONNECTION_CHECK + WIPING_DELAY + Duration::from_secs(1)).await;
    crate::testutil::until("the slices deleted", || deletes() == 1).await;
}

#[tokio::test]
async fn a_drivers_health_reports_reach_its_claims_containers() {
    use kubelet_plugin_api::dra_health::{DeviceHealth, DeviceIdentifier, HealthStatus};
    let f = fixture().await;
    let (tx, mut changed) = tokio::sync::mpsc::unbounded_channel();
    let dra = DraManager::new(
        f.dir.path(),
        Some(f.api.client()),
        "n1",
        KubeletMetrics::new("n1"),
        Some(HealthReports {
            changed: tx,
            messages: true,
        }),
    );
    dra.start().unwrap();
    let socket = f.dir.path().join("dra.sock");
    let versions = [
        "v1.DRAPlugin".to_string(),
        "v1.DRAResourceHealth".to_string(),
    ];
    dra.register(DRIVER, &socket, &versions, &tasks()).unwrap();
    let one = pod("pod-1");
    dra.prepare(&one).await.unwrap();
    let app = &one.spec.as_ref().unwrap().containers[0];
    let health_of = |claim: &str| -> Option<(String, Option<String>)> {
        let status = dra.allocated_resources_status(&one, app);
        let s = status.iter().find(|s| s.name == claim)?;
        let r = &s.resources.as_ref()?[0];
        Some((r.health.clone()?, r.message.clone()))
    };
    // No report yet: unknown, named by its CDI device.
    assert_eq!(health_of("claim:gpu"), Some(("Unknown".into(), None)));
    assert_eq!(
        dra.allocated_resources_status(&one, app)[0]
            .resources
            .as_ref()
            .unwrap()[0]
            .resource_id,
        f.driver.cdi_device("claim-pod-1")
    );
    // The driver reports its device unhealthy: the pod is synced, and its
    // claims show it.
    f.driver.health.send_replace(vec![DeviceHealth {
        device: Some(DeviceIdentifier {
            pool_name: "pool".into(),
            device_name: "device-00".into(),
        }),
        health: HealthStatus::Unhealthy.into(),
        last_updated_time: 0,
        health_check_timeout_seconds: 60,
        message: "ECC errors".into(),
    }]);
    let synced = tokio::time::timeout(Duration::from_secs(10), changed.recv())
        .await
        .unwrap();
    assert_eq!(synced.unwrap().as_str(), "pod-1");
    for claim in ["claim:gpu", "claim:shared"] {
        assert_eq!(
            health_of(claim),
            Some(("Unhealthy".into(), Some("ECC errors".into()))),
            "{claim}"
        );
    }
    // The driver gone: its reports forgotten.
    f.driver.gone.cancel();
    crate::testutil::until("the health unknown again", || {
        health_of("claim:gpu").is_some_and(|(h, _)| h == "Unknown")
    })
    .await;
}
