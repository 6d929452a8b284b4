use std::collections::HashMap;
use std::time::Duration;

use kubelet_core::testing::{PodBuilder, container, resources};

use super::*;

impl CpuManager {
    /// Admission's allocation under the `none` topology manager policy.
    fn allocate_pod(&self, pod: &Pod, active: &[Arc<Pod>]) -> Result<(), AllocError> {
        self.release_stale(active);
        for c in kubelet_core::podspec::init_and_regular_containers(pod) {
            self.allocate(pod, c, None)?;
        }
        Ok(())
    }
}

/// These machines: 2 CPUs, each its own core.
fn two_cpus() -> Topology {
    Topology::from_sysfs(&kubelet_core::cpuset::parse("0-1").unwrap(), &[], |_| None)
}

fn manager(dir: &Path, policy: &str, reserve_millis: i64) -> CpuManager {
    CpuManager::new(
        CpuSettings {
            policy: policy.into(),
            reserve_millis,
            ..Default::default()
        },
        two_cpus(),
        dir,
        KubeletMetrics::new("n"),
    )
}

fn guaranteed(name: &str, uid: &str, cpu: &str) -> Pod {
    PodBuilder::new(name)
        .uid(uid)
        .container(Container {
            resources: Some(resources(&[], &[("cpu", cpu), ("memory", "64Mi")])),
            ..container("app")
        })
        .build()
}

#[test]
fn start_keeps_upstreams_state_file_and_refuses_what_upstream_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(FILE);
    let path = file.display().to_string();
    manager(dir.path(), STATIC, 1000).start().unwrap();
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.starts_with(r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":"#),
        "{written}"
    );
    // Restarted: the same state.
    manager(dir.path(), STATIC, 1000).start().unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
    let err = manager(dir.path(), NONE, 0).start().unwrap_err();
    assert_eq!(
        err,
        format!(
            r#"start cpu manager error: could not restore state from checkpoint: configured policy "none" differs from state checkpoint policy "static", please drain this node and delete the CPU manager checkpoint file {path:?} before restarting Kubelet"#
        )
    );
    let one_cpu = CpuState::new(STATIC, kubelet_core::cpuset::parse("0").unwrap());
    std::fs::write(&file, one_cpu.encode()).unwrap();
    let err = manager(dir.path(), STATIC, 1000).start().unwrap_err();
    assert!(
        err.starts_with(r#"start cpu manager error: current set of available CPUs "0-1" doesn't match with CPUs in state "0""#),
        "{err}"
    );
    std::fs::write(&file, b"{\"policyName\":\"static\",\"checksum\":1}").unwrap();
    let err = manager(dir.path(), STATIC, 1000).start().unwrap_err();
    assert!(
        err.starts_with(
            "start cpu manager error: could not restore state from checkpoint: checkpoint is corrupted, please drain"
        ),
        "{err}"
    );
    let err = manager(dir.path(), STATIC, 0).start().unwrap_err();
    assert_eq!(
        err,
        "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
    );
    // `none` writes its file too, as upstream's.
    let none = tempfile::tempdir().unwrap();
    manager(none.path(), NONE, 0).start().unwrap();
    assert!(
        std::fs::read_to_string(none.path().join(FILE))
            .unwrap()
            .starts_with(r#"{"policyName":"none","defaultCpuSet":"","#)
    );
}

#[test]
fn a_pod_is_refused_when_its_cpus_are_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), STATIC, 1000);
    m.start().unwrap();
    let a = Arc::new(guaranteed("a", "uid-a", "1"));
    m.allocate_pod(&a, std::slice::from_ref(&a)).unwrap();
    assert_eq!(m.exclusive("uid-a", "app"), [1]);
    let metrics = &m.0.metrics;
    assert_eq!(metrics.cpu_manager_pinning_requests.get(&[]), 1.0);
    // CPU 0 is reserved: none left to give.
    assert_eq!(metrics.cpu_manager_shared_pool_size.get(&[]), 0.0);
    assert_eq!(metrics.cpu_manager_exclusive_cpus.get(&[]), 1.0);
    assert_eq!(metrics.cpu_manager_allocation_per_numa.get(&["0"]), 1.0);
    // One CPU shares its own uncore cache (upstream counts it, whatever the
    // options).
    let uncore = ["container", "uncore_cache"];
    assert_eq!(
        metrics.container_aligned_compute_resources.get(&uncore),
        1.0
    );
    let b = Arc::new(guaranteed("b", "uid-b", "1"));
    let err = m.allocate_pod(&b, &[a.clone(), b.clone()]).unwrap_err();
    assert_eq!(
        err.rejection().1,
        "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected"
    );
    // Before the sources are ready, `a`'s CPU is kept even if `a` is not
    // listed; after, it is released.
    assert!(m.allocate_pod(&b, std::slice::from_ref(&b)).is_err());
    let ready = SourcesReady::default();
    ready.mark_ready();
    m.watch_sources(ready);
    m.allocate_pod(&b, std::slice::from_ref(&b)).unwrap();
    assert_eq!(m.exclusive("uid-b", "app"), [1]);
    assert_eq!(m.0.metrics.cpu_manager_pinning_errors.get(&[]), 2.0);
    assert!(m.exclusive("uid-a", "app").is_empty());
    assert_eq!(m.allocatable(), [1]);
}

#[tokio::test]
async fn the_shared_pool_follows_the_exclusive_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let fake = kubelet_cri::fake::FakeRuntime::start(&dir.path().join("cri.sock"))
        .await
        .unwrap();
    fake.add_image("busybox");
    let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5)).unwrap();
    let m = manager(dir.path(), STATIC, 1000);
    m.start().unwrap();
    let ready = SourcesReady::default();
    ready.mark_ready();
    m.watch_sources(ready);
    let shared = Arc::new(
        PodBuilder::new("shared")
            .uid("uid-s")
            .container(container("app"))
            .build(),
    );
    let sandbox = kubelet_cri::fake::sandbox_config("shared", "uid-s");
    let sandbox_id = cri
        .run_pod_sandbox(sandbox.clone(), String::new())
        .await
        .unwrap();
    let cpuset = m
        .cpuset_for(&shared, &shared.spec.as_ref().unwrap().containers[0])
        .unwrap();
    assert_eq!(cpuset.as_deref(), Some("0-1"));
    let config = cri::ContainerConfig {
        labels: HashMap::from([
            (POD_UID.to_owned(), "uid-s".to_owned()),
            (CONTAINER_NAME.to_owned(), "app".to_owned()),
        ]),
        ..kubelet_cri::fake::container_config("app", "busybox")
    };
    let id = cri
        .create_container(&sandbox_id, config, sandbox)
        .await
        .unwrap();
    m.created(&id, cpuset.as_deref());
    cri.start_container(&id).await.unwrap();
    let applied = |fake: &kubelet_cri::fake::FakeRuntime| {
        fake.container_config(&id)
            .and_then(|c| c.linux?.resources)
            .map(|r| r.cpuset_cpus)
    };
    // Nothing to change yet: no call.
    m.reconcile(&cri, std::slice::from_ref(&shared)).await;
    assert_eq!(fake.calls("UpdateContainerResources"), 0);
    let pinned = Arc::new(guaranteed("pinned", "uid-p", "1"));
    let active = [shared.clone(), pinned.clone()];
    m.allocate_pod(&pinned, &active).unwrap();
    m.reconcile(&cri, &active).await;
    assert_eq!(applied(&fake).as_deref(), Some("0"));
    // The pinned pod gone: its CPU is shared again, once it has been
    // missing at two reconciles in a row (not a pod between admission
    // and its worker).
    m.reconcile(&cri, std::slice::from_ref(&shared)).await;
    assert_eq!(applied(&fake).as_deref(), Some("0"));
    m.reconcile(&cri, std::slice::from_ref(&shared)).await;
    assert_eq!(applied(&fake).as_deref(), Some("0-1"));
    assert_eq!(fake.calls("UpdateContainerResources"), 2);
}

#[test]
fn full_pcpus_only_counts_whole_cores_given_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(
        CpuSettings {
            policy: STATIC.into(),
            options: [("full-pcpus-only".to_owned(), "true".to_owned())].into(),
            reserve_millis: 1000,
            ..Default::default()
        },
        two_cpus(),
        dir.path(),
        KubeletMetrics::new("n"),
    );
    m.start().unwrap();
    let (aligned, failed) = (
        &m.0.metrics.container_aligned_compute_resources,
        &m.0.metrics.container_aligned_compute_resources_failures,
    );
    let labels = [ALIGN_SCOPE, ALIGN_PHYSICAL_CPU];
    assert!(m.0.metrics.render().contains(
        "kubelet_container_aligned_compute_resources_failure_count{boundary=\"physical_cpu\",scope=\"container\"} 0"
    ));
    let a = Arc::new(guaranteed("a", "uid-a", "1"));
    m.allocate_pod(&a, std::slice::from_ref(&a)).unwrap();
    let b = Arc::new(guaranteed("b", "uid-b", "1"));
    assert!(m.allocate_pod(&b, &[a, b.clone()]).is_err());
    assert_eq!((aligned.get(&labels), failed.get(&labels)), (1.0, 1.0));
}
