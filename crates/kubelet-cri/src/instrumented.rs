//! `kubelet_runtime_operations_*` for every CRI call (upstream's
//! instrumentedRuntimeService / instrumentedImageManagerService in
//! pkg/kubelet/kuberuntime/instrumented_services.go): a
//! [`CallObserver`] for [`crate::client::CriClient::with_observer`]
//! that records into [`KubeletMetrics`] under upstream's `operation_type`s.

use std::borrow::Cow;
use std::time::Duration;

use crate::client::{CallObserver, CriError};
use kubelet_core::metrics::KubeletMetrics;

/// Records each CRI call: `kubelet_runtime_operations_total`,
/// `kubelet_runtime_operations_duration_seconds`,
/// `kubelet_runtime_operations_errors_total`, and for RunPodSandbox
/// `kubelet_run_podsandbox_duration_seconds` / `_errors_total`.
#[derive(Clone, Debug)]
pub struct CriMetrics(pub KubeletMetrics);

/// The runtime handler rkubelet runs sandboxes with (the default one).
const DEFAULT_RUNTIME_HANDLER: &str = "";

impl CallObserver for CriMetrics {
    fn observe(&self, op: &'static str, elapsed: Duration, error: Option<&CriError>) {
        let m = &self.0;
        let operation = operation_type(op);
        let labels = [operation.as_ref()];
        m.runtime_operations.inc(&labels);
        m.runtime_operations_duration
            .observe_duration(&labels, elapsed);
        if error.is_some() {
            m.runtime_operations_errors.inc(&labels);
        }
        if op == "RunPodSandbox" {
            let handler = [DEFAULT_RUNTIME_HANDLER];
            m.run_podsandbox_duration
                .observe_duration(&handler, elapsed);
            if error.is_some() {
                m.run_podsandbox_errors.inc(&handler);
            }
        }
    }
}

/// Upstream's `operation_type` of a CRI RPC; RPCs upstream does not name
/// get their name in snake case.
pub fn operation_type(rpc: &'static str) -> Cow<'static, str> {
    Cow::Borrowed(match rpc {
        "Version" => "version",
        "Status" => "status",
        "RunPodSandbox" => "run_podsandbox",
        "StopPodSandbox" => "stop_podsandbox",
        "RemovePodSandbox" => "remove_podsandbox",
        "PodSandboxStatus" => "podsandbox_status",
        "ListPodSandbox" => "list_podsandbox",
        "CreateContainer" => "create_container",
        "StartContainer" => "start_container",
        "StopContainer" => "stop_container",
        "RemoveContainer" => "remove_container",
        "ListContainers" => "list_containers",
        "ContainerStatus" => "container_status",
        "UpdateContainerResources" => "update_container",
        "ReopenContainerLog" => "reopen_container_log",
        "ExecSync" => "exec_sync",
        "Exec" => "exec",
        "Attach" => "attach",
        "PortForward" => "port_forward",
        "ContainerStats" => "container_stats",
        "ListContainerStats" => "list_container_stats",
        "PodSandboxStats" => "podsandbox_stats",
        "ListPodSandboxStats" => "list_podsandbox_stats",
        "UpdateRuntimeConfig" => "update_runtime_config",
        "CheckpointContainer" => "checkpoint_container",
        "GetContainerEvents" => "get_container_events",
        "ListMetricDescriptors" => "list_metric_descriptors",
        "ListPodSandboxMetrics" => "list_podsandbox_metrics",
        "RuntimeConfig" => "runtime_config",
        "ListImages" => "list_images",
        "ImageStatus" => "image_status",
        "PullImage" => "pull_image",
        "RemoveImage" => "remove_image",
        "ImageFsInfo" => "image_fs_info",
        other => return Cow::Owned(snake_case(other)),
    })
}

fn snake_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::client::CriClient;
    use crate::fake::FakeRuntime;

    use super::*;

    #[test]
    fn upstream_operation_types() {
        let cases = [
            ("ListPodSandbox", "list_podsandbox"),
            ("RunPodSandbox", "run_podsandbox"),
            ("ExecSync", "exec_sync"),
            ("UpdateContainerResources", "update_container"),
            ("ImageFsInfo", "image_fs_info"),
            ("SomeNewCall", "some_new_call"),
        ];
        for (rpc, want) in cases {
            assert_eq!(operation_type(rpc), want, "{rpc}");
        }
    }

    #[tokio::test]
    async fn records_every_call() {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        let metrics = KubeletMetrics::new("node");
        let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5))
            .unwrap()
            .with_observer(Arc::new(CriMetrics(metrics.clone())));
        cri.list_pod_sandbox(None).await.unwrap();
        cri.clone().list_pod_sandbox(None).await.unwrap();
        fake.inject_error("ContainerStatus", tonic::Code::NotFound, 1);
        let err = cri.container_status("nope").await.unwrap_err();
        assert_eq!(
            (err.op, err.code),
            ("ContainerStatus", tonic::Code::NotFound)
        );
        fake.inject_error("RunPodSandbox", tonic::Code::Unavailable, 1);
        let err = cri
            .run_pod_sandbox(Default::default(), String::new())
            .await
            .unwrap_err();
        assert_eq!(
            (err.op, err.code),
            ("RunPodSandbox", tonic::Code::Unavailable)
        );

        let ops = &metrics.runtime_operations;
        let errors = &metrics.runtime_operations_errors;
        assert_eq!(ops.get(&["list_podsandbox"]), 2.0);
        assert_eq!(errors.get(&["list_podsandbox"]), 0.0);
        assert_eq!(ops.get(&["container_status"]), 1.0);
        assert_eq!(errors.get(&["container_status"]), 1.0);
        assert_eq!(
            metrics
                .runtime_operations_duration
                .count(&["list_podsandbox"]),
            2
        );
        assert_eq!(metrics.run_podsandbox_duration.count(&[""]), 1);
        assert_eq!(metrics.run_podsandbox_errors.get(&[""]), 1.0);
        let text = metrics.render();
        assert!(
            text.contains(
                "kubelet_runtime_operations_total{operation_type=\"list_podsandbox\"} 2\n"
            ),
            "{text}"
        );
    }
}
