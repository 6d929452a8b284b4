//! The pod manager: DESIRED state. What pods the sources want on this node,
//! by UID, and the mirror pods the API server holds for static pods (by
//! full name; they are never run). Only the sync loop writes it.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::types::{PodUid, is_mirror_pod, pod_full_name};

use crate::pod_workers::Desire;

#[derive(Default)]
struct Inner {
    pods: HashMap<PodUid, Arc<Pod>>,
    mirrors: HashMap<String, Arc<Pod>>,
}

#[derive(Default, Clone)]
pub struct PodManager {
    inner: Arc<RwLock<Inner>>,
}

impl PodManager {
    /// Record a desired pod, or a mirror pod. Returns false for mirror pods:
    /// they are bookkeeping, not work.
    pub fn add_or_update(&self, pod: Arc<Pod>) -> bool {
        if is_mirror_pod(&pod) {
            self.inner.write().mirrors.insert(pod_full_name(&pod), pod);
            return false;
        }
        self.inner.write().pods.insert(PodUid::of(&pod), pod);
        true
    }

    /// Forget a pod (or mirror pod); returns the desired pod it was.
    pub fn remove(&self, pod: &Pod) -> Option<Arc<Pod>> {
        let mut inner = self.inner.write();
        if is_mirror_pod(pod) {
            let name = pod_full_name(pod);
            if inner
                .mirrors
                .get(&name)
                .is_some_and(|m| m.metadata.uid == pod.metadata.uid)
            {
                inner.mirrors.remove(&name);
            }
            return None;
        }
        inner.pods.remove(&PodUid::of(pod))
    }

    pub fn get(&self, uid: &PodUid) -> Option<Arc<Pod>> {
        self.inner.read().pods.get(uid).cloned()
    }

    /// The mirror pod of a static pod, by the static pod's full name.
    pub fn mirror_of(&self, pod: &Pod) -> Option<Arc<Pod>> {
        self.inner.read().mirrors.get(&pod_full_name(pod)).cloned()
    }

    /// Every mirror pod.
    pub fn mirrors(&self) -> Vec<Arc<Pod>> {
        self.inner.read().mirrors.values().cloned().collect()
    }

    /// Every desired pod, by name for a stable order.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        let mut pods: Vec<_> = self.inner.read().pods.values().cloned().collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pods
    }

    /// The desired pods `keep` selects, in no particular order (for checks on
    /// every sync tick, which need neither all pods nor a sort).
    pub fn pods_where(&self, keep: impl Fn(&Pod) -> bool) -> Vec<Arc<Pod>> {
        self.inner
            .read()
            .pods
            .values()
            .filter(|p| keep(p))
            .cloned()
            .collect()
    }

    /// What the sources want of the pod: run it, stop it for deletion, or
    /// nothing (unknown).
    pub fn desire(&self, uid: &PodUid) -> Desire {
        match self.inner.read().pods.get(uid) {
            None => Desire::Gone,
            Some(p) if p.metadata.deletion_timestamp.is_some() => Desire::Deleting,
            Some(_) => Desire::Run,
        }
    }
}
