//! Helpers the crate's tests share.

use std::time::Duration;

use tokio::time::Instant;

/// Wait (on real time) until `cond` holds, failing the test naming `what`
/// after 10 s.
pub async fn until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
