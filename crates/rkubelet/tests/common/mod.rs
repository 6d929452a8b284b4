//! Waiting helpers shared by the end-to-end and cluster tests: await a
//! condition by polling (the real runtime and API server have no change
//! feed the tests can subscribe to), never a fixed sleep.

use std::time::{Duration, Instant};

pub const POLL: Duration = Duration::from_millis(200);

/// Await `check` returning `Some`, polling every 200 ms; fails the test
/// after `deadline`.
pub async fn eventually<T>(
    what: &str,
    deadline: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            eprintln!("[{:>6.2}s] {what}", start.elapsed().as_secs_f64());
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Assert that `check` holds at every poll for `window` (for things that
/// must not happen, e.g. a duplicate container).
pub async fn consistently(
    what: &str,
    window: Duration,
    mut check: impl AsyncFnMut() -> Result<(), String>,
) {
    let start = Instant::now();
    while start.elapsed() < window {
        if let Err(e) = check().await {
            panic!(
                "after {:.2}s: not {what}: {e}",
                start.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
