//! kubelet-tasks: the one place the kubelet's tasks are spawned. Each runs
//! inside a tracing span, is tracked so shutdown can wait for it, and gets a
//! child of the kubelet's cancellation token (no polled shutdown flags);
//! blocking work runs on tokio's blocking pool through [`off_thread`] (clippy
//! refuses `spawn_blocking` anywhere else); a request that must not be cut
//! off half-way runs through [`run_to_end`].

#![cfg_attr(test, allow(clippy::too_many_lines, reason = "table-driven tests"))]
use std::future::Future;
use std::io;
use std::pin::Pin;

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

    /// How many of its tasks are running now.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }

    /// Cancel every task and wait until all have ended.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// Run `fut` to its end even if the caller stops awaiting it (its step
/// interrupted, its future dropped), in the caller's span: for a request that
/// must not be cut off half-way, such as one that creates runtime state. Err
/// when it did not run to its end: it panicked, or the runtime is shutting
/// down. `fut` must end by itself (a deadline of its own). It comes boxed:
/// only a pointer passes through the frames between its maker and the task
/// (a CRI call's future is large enough that the copies an unoptimised
/// build makes of it on the way overflow a worker's stack).
pub async fn run_to_end<T: Send + 'static>(
    fut: Pin<Box<dyn Future<Output = T> + Send + 'static>>,
) -> Result<T, tokio::task::JoinError> {
    tokio::spawn(fut.instrument(tracing::Span::current())).await
}

/// Run blocking work `f` off the async workers (tokio's blocking pool), in
/// the caller's span. Err when it did not run to its end: it panicked (the
/// panic does not reach the caller: one pod's bad input never takes a worker
/// down), or the runtime is shutting down.
pub async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let span = tracing::Span::current();
    #[expect(
        clippy::disallowed_methods,
        reason = "the one place blocking work is spawned"
    )]
    let handle = tokio::task::spawn_blocking(move || span.in_scope(f));
    handle.await
}

/// [`off_thread`] for file-system work: its own failure and a panic alike
/// come back as an `io::Error`.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    off_thread(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn run_to_end_finishes_when_its_caller_stops_waiting() {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let call = run_to_end(Box::pin(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            done_tx.send(()).unwrap();
        }));
        // The caller gives up after 1 s; the request still ends.
        assert!(
            tokio::time::timeout(Duration::from_secs(1), call)
                .await
                .is_err()
        );
        done_rx.await.expect("the request ran to its end");
        assert_eq!(run_to_end(Box::pin(async { 7 })).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn shutdown_cancels_every_task_and_waits_for_it() {
        let tasks = Tasks::new(CancellationToken::new());
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3 {
            let done = done_tx.clone();
            tasks.spawn(tracing::info_span!("t", i), move |token| async move {
                token.cancelled().await;
                tokio::time::sleep(Duration::from_millis(10)).await;
                done.send(i).unwrap();
            });
        }
        drop(done_tx);
        tasks.shutdown().await;
        let mut ended = Vec::new();
        while let Ok(i) = done_rx.try_recv() {
            ended.push(i);
        }
        ended.sort();
        assert_eq!(ended, [0, 1, 2]);
    }

    #[tokio::test]
    async fn a_token_stops_its_task_alone() {
        let tasks = Tasks::new(CancellationToken::new());
        let one = tasks.spawn(tracing::Span::none(), |token| async move {
            token.cancelled().await
        });
        let other = tasks.spawn(tracing::Span::none(), |token| async move {
            token.cancelled().await
        });
        one.cancel();
        assert!(!other.is_cancelled());
        tasks.shutdown().await;
        assert!(other.is_cancelled());
    }

    #[tokio::test]
    async fn blocking_work_returns_its_value_and_a_panic_as_an_error() {
        assert_eq!(off_thread(|| 6 * 7).await.unwrap(), 42);
        let panicked = off_thread(|| -> u8 { panic!("bad input") }).await;
        assert!(panicked.unwrap_err().is_panic());
        let err = blocking(|| -> io::Result<u8> { panic!("bad input") })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Other);
        let err = blocking(|| -> io::Result<u8> { Err(io::ErrorKind::NotFound.into()) })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
