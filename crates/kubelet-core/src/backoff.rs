//! Exponential backoff as the kubelet uses it: the sync loop's 100 ms → 5 s
//! while the runtime is unhealthy, workers' retries after a failed step, the
//! runtime-up probe at boot.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
    current: Option<Duration>,
}

impl Backoff {
    pub const fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            current: None,
        }
    }

    /// The delay to wait now: base first, then doubling up to max.
    pub fn next_delay(&mut self) -> Duration {
        let d = match self.current {
            None => self.base,
            Some(d) => (d * 2).min(self.max),
        };
        self.current = Some(d);
        d
    }

    /// Success: the next failure starts from base again.
    pub fn reset(&mut self) {
        self.current = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_max_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let got: Vec<u128> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }
}
