//! The one place tasks are spawned: each runs inside a tracing span, is
//! tracked so shutdown can wait for it, and gets a child of the kubelet's
//! cancellation token (no polled shutdown flags).

use std::future::Future;
use std::io;

use kubelet_server::streaming::Spawner;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

#[derive(Clone, Debug)]
pub struct Tasks {
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl Tasks {
    pub fn new(cancel: CancellationToken) -> Self {
        Tasks {
            tracker: TaskTracker::new(),
            cancel,
        }
    }

    /// The token every task watches; cancel it to stop them all.
    pub fn token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// A token that stops one task, and all of them at shutdown.
    pub fn child_token(&self) -> CancellationToken {
        self.cancel.child_token()
    }

    /// Spawn `make(token)` in `span`; the token (a fresh child token) is
    /// returned too so the caller can stop just this task.
    pub fn spawn<F, Fut>(&self, span: tracing::Span, make: F) -> CancellationToken
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let token = self.child_token();
        self.spawn_with(span, make(token.clone()));
        token
    }

    /// Spawn `fut` in `span`; it must end when a token from `child_token`
    /// that it holds is cancelled.
    pub fn spawn_with<Fut>(&self, span: tracing::Span, fut: Fut)
    where
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(fut.instrument(span));
    }

    /// [`Tasks::spawn_with`] as the kubelet server's [`Spawner`].
    pub fn spawner(&self) -> Spawner {
        let tasks = self.clone();
        std::sync::Arc::new(move |span, fut| tasks.spawn_with(span, fut))
    }

    /// Cancel every task and wait until all have ended.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// Run blocking file-system work `f` off the async workers (tokio's
/// blocking pool); a panic in it comes back as an error.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}
