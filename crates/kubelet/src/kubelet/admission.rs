//! Admission (upstream's canAdmitPod and the resize admission): pods and
//! resizes checked against the node, the active pods and the managers'
//! handlers; a refused pod is Failed, never started.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::admission::{NodeInfo, admit, admit_under_pressure};
use kubelet_core::nodestatus::{NodeFacts, node_labels};
use kubelet_core::phase::{PHASE_FAILED, PHASE_SUCCEEDED};
use kubelet_core::qos::qos_class;
use kubelet_core::security::apparmor_admission;
use kubelet_core::types::{PodUid, Rejection};

use super::Kubelet;
use crate::allocation::{Refused, ResizeOutcome};
use crate::events::{Involved, WARNING};

impl Kubelet {
    /// Admission of an API pod, in upstream's order: the eviction manager's
    /// (no pod but critical ones under pressure), its sysctls, its devices'
    /// and CPUs' allocation (the topology manager's), then against this node
    /// and the pods active on it, then AppArmor, then the shutdown manager's
    /// (no pod while the node shuts down).
    pub(super) async fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        admit_under_pressure(pod, &self.eviction.pressure())?;
        self.sysctls.admit(pod)?;
        self.allocate_resources(pod).await?;
        self.admit_to_node(pod)?;
        apparmor_admission(pod, self.apparmor).map_err(|message| Rejection {
            reason: "AppArmor".into(),
            message: message.to_string(),
        })?;
        self.shutdown.admit()
    }

    /// The pod's devices and exclusive CPUs, aligned as the topology
    /// manager's policy wants (upstream's allocate-resources admit
    /// handler); a failure refuses the pod with upstream's reason.
    async fn allocate_resources(&self, pod: &Pod) -> Result<(), Rejection> {
        // The pod being admitted is active too (upstream's pod manager has
        // it by now): what its containers hold so far is kept.
        let mut active = self.active_pods();
        active.push(Arc::new(pod.clone()));
        self.topology.admit(pod, &active).await
    }

    /// A pod whose spec resources may have changed (a resize): admitted
    /// as upstream admits a resize, against this node and the other pods'
    /// allocations; a resize that does not fit waits (PodResizePending).
    pub(super) fn handle_resize(&self, pod: &Pod) -> ResizeOutcome {
        let allocation = &self.syncer.allocation;
        allocation.handle_resize(pod, || {
            // Exclusive CPUs and NUMA-pinned memory are given once, at
            // admission.
            if qos_class(pod) == "Guaranteed" {
                if self.syncer.runtime.cpus().is_static() && allocation.resize_requested(pod, "cpu") {
                    return Err(Refused::Infeasible(
                        "Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\""
                            .into(),
                    ));
                }
                if self.syncer.runtime.memory().is_static()
                    && allocation.resize_requested(pod, "memory")
                {
                    return Err(Refused::Infeasible(
                        "Resize is infeasible for Guaranteed Pods alongside Memory Manager policy \"Static\""
                            .into(),
                    ));
                }
            }
            self.admit_to_node(pod).map_err(Refused::Deferred)
        })
    }

    /// Try the resizes that wait again (upstream's periodic retry): each
    /// one admitted now is synced.
    pub(super) fn retry_deferred_resizes(&self) {
        for uid in self.syncer.allocation.deferred() {
            let Some(pod) = self.pod_manager.get(&uid) else {
                continue;
            };
            if self.handle_resize(&pod) == ResizeOutcome::Allocated {
                tracing::info!(%uid, "deferred resize admitted");
                self.workers.update_pod(pod);
            }
        }
    }

    /// Admission against this node and the other active pods, with the
    /// resources each is allocated.
    fn admit_to_node(&self, pod: &Pod) -> Result<(), Rejection> {
        let Some(reg) = &self.opts.registration else {
            return Ok(());
        };
        let facts = NodeFacts {
            hostname: reg.node_name.clone(),
            architecture: kubelet_core::nodestatus::architecture().into(),
            ..Default::default()
        };
        let registered = NodeInfo {
            name: reg.node_name.clone(),
            labels: node_labels(&facts, &reg.labels),
            taints: reg.taints.clone(),
            allocatable_cpu_millis: self.local_allocatable.get("cpu").copied().unwrap_or(0),
            allocatable_memory_bytes: self.local_allocatable.get("memory").copied().unwrap_or(0),
            max_pods: self.opts.config.pod_capacity(self.opts.node_cpu_cores),
            supplemental_groups_policy: false,
            extended_allocatable: self.syncer.runtime.devices().allocatable(),
        };
        // The Node as the API has it, with what others added since.
        let mut node = match self.node.borrow().as_deref() {
            Some(live) => NodeInfo::from_node(live, &registered),
            None => registered,
        };
        let uid = PodUid::of(pod);
        // A pod just given devices fits them, whatever the Node says yet
        // (upstream's sanitizeNodeAllocatable).
        if let Some(held) = self
            .syncer
            .runtime
            .devices()
            .allocated_counts_if_holding(&uid)
        {
            for (resource, n) in held {
                let allocatable = node.extended_allocatable.entry(resource).or_insert(0);
                *allocatable = (*allocatable).max(n);
            }
        }
        let pods: Vec<Arc<Pod>> = self
            .active_pods()
            .into_iter()
            .filter(|p| PodUid::of(p) != uid)
            .map(|p| self.syncer.allocation.allocated_pod(&p))
            .collect();
        let active: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        admit(pod, &node, &active)
    }

    /// The pods admitted and not done (upstream's GetActivePods): pods only
    /// recorded while the runtime was down have no worker yet. The pods are
    /// copied out first: housekeeping takes the workers' lock before the
    /// pod manager's, so this never holds them the other way round.
    pub(super) fn active_pods(&self) -> Vec<Arc<Pod>> {
        let rejected = self.rejected.lock().clone();
        let mut pods = self.pod_manager.pods();
        pods.retain(|p| {
            let u = PodUid::of(p);
            !rejected.contains(&u)
                && self.workers.state(&u).is_some_and(|s| !s.is_finished())
                && !self.status.get_pod_status(&u).is_some_and(|s| {
                    matches!(s.phase.as_deref(), Some(PHASE_SUCCEEDED | PHASE_FAILED))
                })
        });
        pods
    }

    /// Refuse a pod: Failed with admission's reason, never started.
    pub(super) fn reject(&self, pod: &Pod, r: Rejection) {
        let uid = PodUid::of(pod);
        tracing::warn!(pod = %kubelet_core::types::pod_full_name(pod), reason = %r.reason, message = %r.message, "pod rejected");
        self.rejected.lock().insert(uid);
        self.events.event(
            &Involved::pod(pod, None),
            WARNING,
            &r.reason,
            r.message.clone(),
        );
        let message = r.status_message();
        self.status.set_pod_status(
            pod,
            k8s_openapi::api::core::v1::PodStatus {
                phase: Some(PHASE_FAILED.into()),
                reason: Some(r.reason),
                message: Some(message),
                qos_class: Some(qos_class(pod).into()),
                ..Default::default()
            },
        );
    }
}
