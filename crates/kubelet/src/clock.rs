//! Wall-clock time, injected: timestamps written into API objects and
//! compared with CRI timestamps (crash-loop back-off, active deadlines,
//! probe delays, events) are read from a `Clock` each part is given.
//! Intervals and timeouts use tokio's clock. In production the clock is the
//! host's; a test can give the kubelet one that follows tokio's clock, so
//! paused time moves the wall clock as well.

use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;

#[derive(Clone, Copy, Debug, Default)]
pub enum Clock {
    /// The host's wall clock.
    #[default]
    System,
    /// The wall time at `start` plus what tokio's clock has moved since.
    Tokio {
        epoch_nanos: i64,
        start: tokio::time::Instant,
    },
}

fn system_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Clock {
    /// A clock that starts at the host's time now and moves with tokio's
    /// clock (paused in tests, it moves only as tokio's does).
    pub fn following_tokio() -> Clock {
        Clock::Tokio {
            epoch_nanos: system_nanos(),
            start: tokio::time::Instant::now(),
        }
    }

    /// Nanoseconds since the epoch, the unit CRI timestamps use.
    pub fn now_nanos(&self) -> i64 {
        match self {
            Clock::System => system_nanos(),
            Clock::Tokio { epoch_nanos, start } => {
                let moved = i64::try_from(start.elapsed().as_nanos()).unwrap_or(i64::MAX);
                epoch_nanos.saturating_add(moved)
            }
        }
    }

    /// Now as a v1 Time (whole seconds, as the API stores it).
    pub fn now_time(&self) -> Time {
        Time(
            Timestamp::from_second(self.now_nanos() / 1_000_000_000)
                .unwrap_or(Timestamp::UNIX_EPOCH),
        )
    }

    /// Now as a v1 MicroTime (lease renewals).
    pub fn now_micro(&self) -> MicroTime {
        MicroTime(
            Timestamp::from_microsecond(self.now_nanos() / 1_000).unwrap_or(Timestamp::UNIX_EPOCH),
        )
    }
}

/// Randomness for jitter (upstream's `wait.Jitter` and friends): a cheap
/// `Clone` handle whose clones draw from one sequence; not for secrets.
#[derive(Clone, Debug, Default)]
pub struct Jitter(std::sync::Arc<(std::collections::hash_map::RandomState, AtomicU64)>);

impl Jitter {
    /// A number in `[0, 1)`, uniform enough for spreading deadlines.
    pub fn fraction(&self) -> f64 {
        let (state, counter) = &*self.0;
        let n = counter.fetch_add(1, Ordering::Relaxed);
        (state.hash_one(n) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn jitter_fractions_lie_in_0_1_and_spread() {
        let j = Jitter::default();
        let draws: Vec<f64> = (0..1000).map(|_| j.clone().fraction()).collect();
        assert!(draws.iter().all(|f| (0.0..1.0).contains(f)));
        assert!(draws.iter().any(|f| *f < 0.2) && draws.iter().any(|f| *f > 0.8));
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_following_tokio_moves_only_with_it() {
        let clock = Clock::following_tokio();
        let t0 = clock.now_nanos();
        assert!((t0 - Clock::System.now_nanos()).abs() < 1_000_000_000);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(clock.now_nanos() - t0, 3_600_000_000_000);
        assert_eq!(
            clock.now_time().0.as_second() - t0 / 1_000_000_000,
            3600,
            "an hour of paused time is an hour on the wall clock"
        );
    }
}
