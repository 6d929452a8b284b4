//! The pod manager: DESIRED state. What pods the sources want on this node,
//! by UID. Only the sync loop writes it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::types::PodUid;

#[derive(Default, Clone)]
pub struct PodManager {
    pods: Arc<RwLock<HashMap<PodUid, Arc<Pod>>>>,
}

impl PodManager {
    pub fn add_or_update(&self, pod: Arc<Pod>) {
        let uid = PodUid::of(&pod);
        self.pods
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid, pod);
    }

    pub fn remove(&self, uid: &PodUid) -> Option<Arc<Pod>> {
        self.pods
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid)
    }

    pub fn get(&self, uid: &PodUid) -> Option<Arc<Pod>> {
        self.pods
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .cloned()
    }

    /// Every desired pod, oldest first (by name for a stable order).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        let mut pods: Vec<_> = self
            .pods
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pods
    }

    pub fn contains(&self, uid: &PodUid) -> bool {
        self.pods
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(uid)
    }
}
