use super::*;
use crate::testing::{PodBuilder, container, resources};

const GI: i64 = 1 << 30;

fn policy(limited: bool, controller: SwapController) -> SwapPolicy {
    SwapPolicy {
        limited,
        controller,
        node_memory: 8 * GI,
        node_swap: 4 * GI,
    }
}

fn pod_with(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> (Pod, Container) {
    let mut c = container("app");
    c.resources = Some(resources(requests, limits));
    (PodBuilder::new("p").container(c.clone()).build(), c)
}

#[test]
fn container_swap_as_upstream() {
    use SwapController::{Unavailable, V1, V2};
    use SwapSetting::{MemswEqualsMemory, SwapMax, Untouched};
    let burstable = pod_with(&[("memory", "2Gi")], &[("memory", "4Gi")]);
    let request_only = pod_with(&[("memory", "1Gi")], &[]);
    let guaranteed = pod_with(
        &[("memory", "2Gi"), ("cpu", "1")],
        &[("memory", "2Gi"), ("cpu", "1")],
    );
    let best_effort = pod_with(&[], &[]);
    let cpu_only = pod_with(&[("cpu", "100m")], &[]);
    let mut critical = burstable.clone();
    critical.0.spec.as_mut().unwrap().priority = Some(2_000_000_000);
    type Case<'a> = (&'a str, SwapPolicy, &'a (Pod, Container), i64, SwapSetting);
    let cases: &[Case] = &[
        (
            "no controller",
            policy(true, Unavailable),
            &burstable,
            2 * GI,
            Untouched,
        ),
        (
            "NoSwap, v1",
            policy(false, V1),
            &burstable,
            2 * GI,
            MemswEqualsMemory,
        ),
        (
            "NoSwap, v2",
            policy(false, V2),
            &burstable,
            2 * GI,
            SwapMax(0),
        ),
        (
            "LimitedSwap, v1",
            policy(true, V1),
            &burstable,
            2 * GI,
            MemswEqualsMemory,
        ),
        // 2Gi of 8Gi: a quarter of the 4Gi of swap.
        (
            "LimitedSwap, burstable",
            policy(true, V2),
            &burstable,
            2 * GI,
            SwapMax(GI),
        ),
        (
            "LimitedSwap, request only",
            policy(true, V2),
            &request_only,
            GI,
            SwapMax(GI / 2),
        ),
        (
            "LimitedSwap, guaranteed",
            policy(true, V2),
            &guaranteed,
            2 * GI,
            SwapMax(0),
        ),
        (
            "LimitedSwap, best effort",
            policy(true, V2),
            &best_effort,
            0,
            SwapMax(0),
        ),
        (
            "LimitedSwap, no memory asked",
            policy(true, V2),
            &cpu_only,
            0,
            SwapMax(0),
        ),
        (
            "LimitedSwap, critical",
            policy(true, V2),
            &critical,
            2 * GI,
            SwapMax(0),
        ),
    ];
    for (what, policy, (pod, c), request, want) in cases {
        let (got, why) = policy.for_container(pod, c, *request);
        assert_eq!(got, *want, "{what}");
        assert_eq!(why, None, "{what}");
    }
}

#[test]
fn a_request_over_the_node_memory_gets_no_swap() {
    let (pod, c) = pod_with(&[("memory", "16Gi")], &[("memory", "32Gi")]);
    let (got, why) = policy(true, SwapController::V2).for_container(&pod, &c, 16 * GI);
    assert_eq!(got, SwapSetting::SwapMax(0));
    assert_eq!(
        why.as_deref(),
        Some("container request 17179869184 is larger than total node memory 8589934592")
    );
    assert_eq!(
        swap_for_burstable(1, 0, 10),
        Err("total node memory is 0".to_owned())
    );
}
