//! Housekeeping (upstream's HandlePodCleanups): finished workers
//! forgotten, pods wanted again restarted, orphans in the runtime and on
//! disk stopped and removed.

use kubelet_core::types::PodUid;

use super::Kubelet;
use crate::config::SourcesReady;
use crate::kuberuntime::PodRef;
use crate::pod_workers::{Desire, PodTarget};

impl Kubelet {
    /// HandlePodCleanups: forget finished workers, restart pods that came
    /// back, drop stale statuses, and stop whatever the runtime runs that no
    /// source wants (after a restart, or a manifest removed while down).
    pub(super) fn housekeeping(&self, sources_ready: &SourcesReady) {
        if !sources_ready.all_ready() {
            return;
        }
        for uid in self
            .workers
            .sync_known_pods(|uid| self.pod_manager.desire(uid))
        {
            if let Some(pod) = self.pod_manager.get(&uid) {
                tracing::info!(%uid, "pod wanted again after termination: starting it afresh");
                // Its last life's terminal status must not hold the new one.
                self.status.forget(&uid);
                self.workers.update_pod(pod);
            }
        }
        let known = self.workers.known();
        // Anything a source knows (even while it is being deleted) or a
        // worker holds is not an orphan.
        let keep =
            |uid: &PodUid| self.pod_manager.desire(uid) != Desire::Gone || known.contains(uid);
        self.status.remove_orphans(keep);
        self.syncer.prober.cleanup(|uid| {
            self.pod_manager.desire(uid) == Desire::Run
                && self.workers.state(uid) == Some(kubelet_core::lifecycle::State::Syncing)
        });
        self.syncer.reasons.lock().retain(|uid, _| keep(uid));
        self.syncer.allocation.retain(keep);
        let devices = self.syncer.runtime.devices();
        if devices.holds_any() {
            devices.free_inactive(&self.active_pods());
        }
        self.retry_deferred_resizes();
        self.syncer.terminations.lock().retain(|uid, _| keep(uid));
        if !self.pleg.has_relisted() {
            return;
        }
        for (uid, rp) in self.pleg.pods().iter() {
            if keep(uid) {
                continue;
            }
            tracing::info!(%uid, pod = %format!("{}/{}", rp.namespace, rp.name), "stopping a pod no source wants");
            let target = PodTarget {
                pod_ref: PodRef {
                    uid: uid.clone(),
                    name: rp.name.clone(),
                    namespace: rp.namespace.clone(),
                },
                pod: None,
            };
            self.workers.kill_pod(target, None);
        }
    }

    /// Pod directories and pod cgroups of pods no source wants, no worker
    /// holds and the runtime does not run (left by a crash, or by a pod
    /// deleted while the kubelet was down) go through a worker of their
    /// own: it tears down their volumes, then removes the cgroup and the
    /// directory, serialised with anything else done for that UID.
    pub(super) fn remove_orphaned_pod_dirs(&self, sources_ready: &SourcesReady, dirs: Vec<PodUid>) {
        if !sources_ready.all_ready() || !self.pleg.has_relisted() {
            return;
        }
        let known = self.workers.known();
        let running = self.pleg.pods();
        for uid in dirs {
            if self.pod_manager.desire(&uid) != Desire::Gone
                || known.contains(&uid)
                || running.contains_key(&uid)
            {
                continue;
            }
            tracing::info!(%uid, "orphaned pod found: removing its directory and cgroup");
            self.workers.kill_pod(
                PodTarget {
                    pod_ref: PodRef {
                        uid,
                        name: String::new(),
                        namespace: String::new(),
                    },
                    pod: None,
                },
                None,
            );
        }
    }
}
