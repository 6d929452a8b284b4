//! The config mux task (upstream's `PodConfig` / `podStorage.Merge`): folds the snapshots
//! of every pod source into one stream of `PodUpdate`s for the sync loop.

use std::time::{Duration, UNIX_EPOCH};

use kubelet_core::podconfig::PodStorage;
use kubelet_core::timefmt::rfc3339_nanos;
use kubelet_core::types::PodUpdate;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{SourceSnapshot, SourcesReady};
use crate::clock::Clock;

/// Merges source snapshots; see [`new_mux`].
pub struct Mux {
    storage: PodStorage,
    sources: Vec<&'static str>,
    ready: SourcesReady,
    clock: Clock,
}

/// Merge snapshots from all sources into PodUpdates for the sync loop, recording
/// config.seen; marks `ready` once every name in `sources` has reported (at once when
/// `sources` is empty). Errors from PodStorage::set are logged (warn, naming the pod).
pub fn new_mux(sources: &[&'static str], clock: Clock) -> (Mux, SourcesReady) {
    let ready = SourcesReady::default();
    if sources.is_empty() {
        ready.mark_ready();
    }
    let mux = Mux {
        storage: PodStorage::new(),
        sources: sources.to_vec(),
        ready: ready.clone(),
        clock,
    };
    (mux, ready)
}

impl Mux {
    /// Runs until `cancel` fires, `rx` closes or the sync loop's receiver is gone. The updates
    /// of one snapshot are all sent before readiness is marked, so the sync loop knows every
    /// source's pods by the time housekeeping may act.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<SourceSnapshot>,
        tx: mpsc::Sender<PodUpdate>,
        cancel: CancellationToken,
    ) {
        loop {
            let snapshot = tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                snapshot = rx.recv() => match snapshot {
                    Some(snapshot) => snapshot,
                    None => return,
                },
            };
            let source = snapshot.source;
            if !self.sources.contains(&source) {
                tracing::warn!(source, "snapshot from an unregistered pod source");
            }
            let nanos = u64::try_from(self.clock.now_nanos()).unwrap_or(0);
            let now = rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(nanos));
            let (updates, errors) = self.storage.set(source, snapshot.pods, &now);
            for error in errors {
                tracing::warn!(source, %error, "pod rejected by the config mux");
            }
            for update in updates {
                tracing::debug!(source, op = ?update.op, pods = update.pods.len(), "pod update");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    sent = tx.send(update) => if sent.is_err() { return },
                }
            }
            if !self.ready.all_ready()
                && self
                    .sources
                    .iter()
                    .all(|s| self.storage.seen_sources().any(|seen| seen == *s))
            {
                tracing::info!(sources = ?self.sources, "all pod sources are ready");
                self.ready.mark_ready();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Container, Pod};
    use kubelet_core::testing::{PodBuilder, container};
    use kubelet_core::types::{PodOperation, SOURCE_API, SOURCE_FILE, keys};
    use tokio::time::timeout;

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    fn pod(name: &str, uid: &str) -> Pod {
        PodBuilder::new(name)
            .namespace("default")
            .uid(uid)
            .container(Container {
                image: Some("img".into()),
                ..container("c")
            })
            .build()
    }

    async fn recv(rx: &mut mpsc::Receiver<PodUpdate>) -> PodUpdate {
        timeout(WAIT, rx.recv())
            .await
            .expect("timed out waiting for a pod update")
            .expect("mux closed its channel")
    }

    fn names(u: &PodUpdate) -> Vec<&str> {
        u.pods
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn merges_sources_and_marks_ready() {
        let (mux, ready) = new_mux(&[SOURCE_FILE, SOURCE_API], Clock::System);
        let (snap_tx, snap_rx) = mpsc::channel(4);
        let (upd_tx, mut upd_rx) = mpsc::channel(4);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(mux.run(snap_rx, upd_tx, cancel.clone()));
        assert!(!ready.all_ready());

        let send = |source, pods| {
            let snap_tx = snap_tx.clone();
            async move { snap_tx.send(SourceSnapshot { source, pods }).await.unwrap() }
        };

        send(SOURCE_FILE, vec![pod("a", "1")]).await;
        let u = recv(&mut upd_rx).await;
        assert_eq!(
            (u.op, u.source, names(&u)),
            (PodOperation::Add, SOURCE_FILE, vec!["a"])
        );
        let ann = u.pods[0].metadata.annotations.as_ref().unwrap();
        let seen: k8s_openapi::jiff::Timestamp = ann[keys::CONFIG_SEEN].parse().unwrap();
        assert!(seen.as_second() > 1_600_000_000);
        assert_eq!(ann[keys::CONFIG_SOURCE], SOURCE_FILE);
        assert!(!ready.all_ready(), "the API source has not spoken yet");

        // A conflicting pod is dropped (and logged); the rest goes through.
        send(SOURCE_API, vec![pod("a", "2"), pod("b", "3")]).await;
        let u = recv(&mut upd_rx).await;
        assert_eq!(
            (u.op, u.source, names(&u)),
            (PodOperation::Add, SOURCE_API, vec!["b"])
        );
        timeout(WAIT, ready.wait()).await.expect("sources ready");
        assert!(ready.clone().all_ready());

        // Removal, then nothing for an unchanged set.
        send(SOURCE_FILE, vec![]).await;
        let u = recv(&mut upd_rx).await;
        assert_eq!((u.op, names(&u)), (PodOperation::Remove, vec!["a"]));
        send(SOURCE_FILE, vec![]).await;
        send(SOURCE_API, vec![pod("b", "3"), pod("c", "4")]).await;
        let u = recv(&mut upd_rx).await;
        assert_eq!(
            (u.op, u.source, names(&u)),
            (PodOperation::Add, SOURCE_API, vec!["c"])
        );

        cancel.cancel();
        timeout(WAIT, task).await.expect("mux stops").unwrap();
    }

    #[tokio::test]
    async fn no_sources_is_ready_and_closed_input_ends_the_task() {
        let (mux, ready) = new_mux(&[], Clock::System);
        assert!(ready.all_ready());
        let (snap_tx, snap_rx) = mpsc::channel(1);
        let (upd_tx, _upd_rx) = mpsc::channel(1);
        let task = tokio::spawn(mux.run(snap_rx, upd_tx, CancellationToken::new()));
        drop(snap_tx);
        timeout(WAIT, task).await.expect("mux stops").unwrap();
    }
}
