//! The image garbage collector (upstream's image GC manager, started with
//! the container GC once the runtime is up): every [`IMAGE_GC_PERIOD`] it
//! reads the runtime's images, the images its containers use and the
//! image file system's size and free space, and removes what
//! `kubelet_core::imagegc` decides. The sandbox image the runtime is
//! configured with counts as pinned (containerd 1.6 does not pin it).
//! After a collection for space, the pull records of images gone are
//! pruned (upstream's post-GC hook).

use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::imagegc::{ImageGc, Listed, Policy};
use kubelet_cri::client::{CriClient, CriError};
use kubelet_cri::v1 as cri;

use crate::clock::Clock;
use crate::events::{Involved, Recorder, WARNING};
use crate::pullmanager::PullManager;
use kubelet_tasks::blocking;

/// Upstream's ImageGCPeriod.
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);

/// What a collection frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Goal {
    /// What the policy's ages and thresholds ask for.
    Policy,
    /// Every unused image past imageMinimumGCAge.
    AllUnused,
}

pub struct ImageGcManager {
    cri: CriClient,
    policy: Policy,
    pulls: Arc<PullManager>,
    gc: Mutex<ImageGc>,
    events: Recorder,
    clock: Clock,
}

impl ImageGcManager {
    pub fn new(
        cri: CriClient,
        policy: Policy,
        pulls: Arc<PullManager>,
        events: Recorder,
        clock: Clock,
    ) -> Self {
        ImageGcManager {
            cri,
            policy,
            pulls,
            gc: Mutex::default(),
            events,
            clock,
        }
    }

    /// One collection; Ok is how many images were removed.
    pub async fn collect(&self) -> Result<usize, CriError> {
        self.collect_for(Goal::Policy).await
    }

    /// Remove every unused image old enough (upstream's DeleteUnusedImages,
    /// the eviction manager's reclaim under disk pressure); Ok is how many.
    pub async fn delete_unused(&self) -> Result<usize, CriError> {
        self.collect_for(Goal::AllUnused).await
    }

    async fn collect_for(&self, goal: Goal) -> Result<usize, CriError> {
        let began = self.clock.now_time();
        let sandbox_image = self.cri.sandbox_image().await?;
        let images: Vec<Listed> = self
            .cri
            .list_images()
            .await?
            .into_iter()
            .map(|i| Listed {
                pinned: i.pinned
                    || sandbox_image
                        .as_ref()
                        .is_some_and(|s| i.repo_tags.contains(s)),
                id: i.id,
                size: i.size,
            })
            .collect();
        let containers = self.cri.list_containers(None).await?;
        // A running container's image volumes are in use too (upstream's
        // handleImageVolumes: the images its status's mounts name).
        let mut volume_images = Vec::new();
        for c in containers
            .iter()
            .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
        {
            if let Ok(status) = self.cri.container_status(&c.id).await {
                volume_images.extend(
                    status
                        .mounts
                        .into_iter()
                        .filter_map(|m| m.image.map(|i| i.image)),
                );
            }
        }
        let in_use: HashSet<String> = containers
            .into_iter()
            .flat_map(|c| [c.image_ref, c.image_id])
            .chain(volume_images)
            .filter(|id| !id.is_empty())
            .collect();
        // Removing every unused image needs no figures of the file system.
        let mountpoint = match goal {
            Goal::Policy => self.cri.image_fs_mountpoint().await?,
            Goal::AllUnused => None,
        };
        let (capacity, available) = match mountpoint {
            Some(m) => kubelet_tasks::blocking(move || Ok(rustix::fs::statvfs(Path::new(&m))?))
                .await
                .map(|s| (s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize))
                .unwrap_or((0, 0)),
            None => (0, 0),
        };
        let now = self.clock.now_nanos();
        let plan = {
            let mut gc = self.gc.lock();
            gc.detect(&images, &in_use, now);
            match goal {
                Goal::Policy => gc.plan(&self.policy, capacity, available.min(capacity), now),
                Goal::AllUnused => gc.plan_all_unused(&self.policy, now),
            }
        };
        let mut remaining: HashSet<String> = images.iter().map(|i| i.id.clone()).collect();
        for (id, reason) in &plan.remove {
            tracing::info!(image = %id, ?reason, "removing image");
            match self.cri.remove_image(id).await {
                Ok(()) => {
                    self.gc.lock().removed(id);
                    remaining.remove(id);
                }
                Err(e) => tracing::warn!(image = %id, error = %e, "removing image"),
            }
        }
        let removed = images.len() - remaining.len();
        if plan.to_free > 0 || goal == Goal::AllUnused {
            let pulls = self.pulls.clone();
            let _ = blocking(move || {
                pulls.prune(&remaining, &began);
                Ok(())
            })
            .await;
        }
        if goal == Goal::AllUnused {
            return Ok(removed);
        }
        let node = self.events.node_name().to_owned();
        let node_event = |reason, message| {
            self.events.event(
                &Involved::node(&node, Some(node.clone())),
                WARNING,
                reason,
                message,
            );
        };
        if capacity == 0 && self.policy.high_threshold_percent < 100 {
            node_event(
                "InvalidDiskCapacity",
                "invalid capacity 0 on image filesystem".to_owned(),
            );
        }
        if let Some(message) = plan.shortfall() {
            node_event("FreeDiskSpaceFailed", message);
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_cri::fake::FakeRuntime;
    use kubelet_cri::v1 as cri;

    /// On paused time, against the fake runtime: an image no container
    /// uses goes once imageMaximumGCAge has passed; the one a container
    /// uses stays.
    #[tokio::test(start_paused = true)]
    async fn unused_images_go_after_the_maximum_age_and_used_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        fake.add_image("used:1");
        fake.add_image("unused:1");
        let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5)).unwrap();
        let sandbox = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let sb = cri
            .run_pod_sandbox(sandbox.clone(), String::new())
            .await
            .unwrap();
        let cfg = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "a".into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: "used:1".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        cri.create_container(&sb, cfg, sandbox).await.unwrap();
        let policy = Policy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::from_secs(180),
        };
        let gc = ImageGcManager::new(
            cri.clone(),
            policy,
            Arc::new(PullManager::open(
                dir.path(),
                Default::default(),
                kubelet_core::metrics::KubeletMetrics::new("n"),
                Clock::System,
            )),
            Recorder::log_only("n".into()),
            Clock::following_tokio(),
        );
        let names = || async {
            let mut n: Vec<String> = cri
                .list_images()
                .await
                .unwrap()
                .into_iter()
                .flat_map(|i| i.repo_tags)
                .collect();
            n.sort();
            n
        };
        assert_eq!(gc.collect().await.unwrap(), 0, "nothing is old yet");
        tokio::time::advance(Duration::from_secs(170)).await;
        assert_eq!(gc.collect().await.unwrap(), 0, "not before the maximum age");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(gc.collect().await.unwrap(), 1);
        let left = names().await;
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(
            left[0].ends_with("used:1") && !left[0].ends_with("unused:1"),
            "{left:?}"
        );
        // Under disk pressure every unused image past the minimum age goes,
        // whatever the thresholds (DeleteUnusedImages); a new one stays.
        fake.add_image("old:1");
        assert_eq!(gc.delete_unused().await.unwrap(), 0, "seen just now");
        fake.add_image("new:1");
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(
            gc.delete_unused().await.unwrap(),
            0,
            "before imageMinimumGCAge"
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(gc.delete_unused().await.unwrap(), 1);
        let left = names().await;
        assert!(left.iter().any(|n| n.ends_with("new:1")), "{left:?}");
        assert!(!left.iter().any(|n| n.ends_with("old:1")), "{left:?}");
        assert!(
            left.iter().any(|n| n.ends_with("/used:1") || n == "used:1"),
            "{left:?}"
        );
    }
}
