//! Pod sources and the config mux (upstream's `pkg/kubelet/config`).
//!
//! Each source (the static pod directory, later the API server) sends [`SourceSnapshot`]s,
//! the full set of pods it wants each time. The mux merges them with
//! [`kubelet_core::podconfig::PodStorage`] into `PodUpdate`s for the sync loop and flips
//! [`SourcesReady`] once every registered source has spoken.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

pub mod file;
pub mod http;
pub mod mux;

pub use kubelet_core::types::SourceSnapshot;

/// Set once every registered source has delivered at least one snapshot (upstream's
/// SourcesReady): housekeeping must never kill pods before that. Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct SourcesReady {
    inner: Arc<ReadyInner>,
}

#[derive(Debug, Default)]
struct ReadyInner {
    ready: AtomicBool,
    notify: Notify,
}

impl SourcesReady {
    /// Whether every registered source has delivered at least one snapshot.
    pub fn all_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Acquire)
    }

    /// Waits until [`Self::all_ready`] is true.
    pub async fn wait(&self) {
        loop {
            let notified = self.inner.notify.notified();
            if self.all_ready() {
                return;
            }
            notified.await;
        }
    }

    /// Marks all sources ready (done by the mux; never unset).
    pub(crate) fn mark_ready(&self) {
        self.inner.ready.store(true, Ordering::Release);
        self.inner.notify.notify_waiters();
    }
}
