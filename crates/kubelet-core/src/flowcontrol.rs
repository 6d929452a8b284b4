//! Per-key back-off (upstream's flowcontrol.Backoff, with the 10 s initial
//! and 300 s maximum the kubelet gives it) for CrashLoopBackOff and
//! ImagePullBackOff: a key that failed waits 10 s, 20 s, 40 s … up to 300 s
//! since its last failure; one quiet for twice the maximum (10 min) starts
//! over at 10 s. The crash loop's maximum is crashLoopBackOff's
//! maxContainerRestartPeriod ([`KeyedBackoff::with_max`]). Pure: times are
//! nanoseconds since the epoch, passed in.
//!
//! A container that exited is restarted at once the first time, then only
//! after its back-off since it exited ([`KeyedBackoff::try_restart`]); an
//! image that failed to pull is not pulled again for that pod until its
//! back-off since the failure has passed ([`PullBackoff`]).

use std::collections::HashMap;
use std::time::Duration;

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    backoff: Duration,
    last_update: i64,
}

#[derive(Debug)]
pub struct KeyedBackoff {
    entries: HashMap<String, Entry>,
    initial: Duration,
    max: Duration,
}

impl Default for KeyedBackoff {
    fn default() -> Self {
        KeyedBackoff::with_max(MAX)
    }
}

/// A token bucket without a clock of its own (upstream's passive token
/// bucket rate limiter and its TryAccept): `qps` tokens a second, at most
/// `burst` kept. Times are nanoseconds since the epoch.
#[derive(Clone, Copy, Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: i64,
}

impl TokenBucket {
    /// A bucket holding its whole burst at `now`.
    pub fn full(qps: f64, burst: f64, now: i64) -> Self {
        TokenBucket {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Take a token at `now` if there is one.
    pub fn try_take(&mut self, now: i64) -> bool {
        let elapsed = now.saturating_sub(self.last).max(0) as f64 / 1e9;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = self.last.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The crash-loop key upstream uses: one backoff per pod and container spec.
pub fn key(pod_uid: &str, container: &str, hash: &str) -> String {
    format!("{pod_uid}_{container}_{hash}")
}

/// An entry quiet for twice the maximum starts over.
fn expired(max: Duration, entry: &Entry, at: i64) -> bool {
    at.saturating_sub(entry.last_update) > nanos(max * 2)
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl KeyedBackoff {
    /// Back-offs up to `max`, starting at 10 s or `max` if less (upstream's
    /// newCrashLoopBackOff).
    pub fn with_max(max: Duration) -> Self {
        KeyedBackoff {
            entries: HashMap::new(),
            initial: INITIAL.min(max),
            max,
        }
    }

    /// A failure of `key` at `now` (upstream's Next): its back-off starts at
    /// the initial one, or doubles up to the maximum.
    pub fn next(&mut self, key: &str, now: i64) {
        let backoff = match self.entries.get(key) {
            Some(e) if !expired(self.max, e, now) => (e.backoff * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                backoff,
                last_update: now,
            },
        );
    }

    /// What is left at `now` of `key`'s back-off since its last failure
    /// (upstream's IsInBackOffSinceUpdate); None when it may go.
    pub fn left_since_update(&self, key: &str, now: i64) -> Option<Duration> {
        let e = self
            .entries
            .get(key)
            .filter(|e| !expired(self.max, e, now))?;
        let since = Duration::from_nanos(now.saturating_sub(e.last_update).max(0) as u64);
        e.backoff.checked_sub(since).filter(|left| !left.is_zero())
    }

    /// Whether a container that exited at `exited_at` may be restarted
    /// `now`. Ok records the restart (the next wait doubles); Err is the
    /// current back-off and how long remains of it.
    pub fn try_restart(
        &mut self,
        key: &str,
        exited_at: i64,
        now: i64,
    ) -> Result<(), (Duration, Duration)> {
        if let Some(e) = self.entries.get(key)
            && !expired(self.max, e, exited_at)
        {
            let since = Duration::from_nanos(now.saturating_sub(exited_at).max(0) as u64);
            if since < e.backoff {
                return Err((e.backoff, e.backoff - since));
            }
        }
        self.next(key, exited_at);
        Ok(())
    }

    /// Drop entries that expired (their containers ran quietly long enough).
    pub fn gc(&mut self, now: i64) {
        let max = self.max;
        self.entries.retain(|_, e| !expired(max, e, now));
    }
}

/// ImagePullBackOff (upstream's image manager): per pod and image, the
/// back-off since the last failed pull and that pull's error, which the
/// back-off's message carries.
#[derive(Debug, Default)]
pub struct PullBackoff {
    backoff: KeyedBackoff,
    errors: HashMap<String, String>,
}

impl PullBackoff {
    fn key(pod_uid: &str, image: &str) -> String {
        format!("{pod_uid}_{image}")
    }

    /// Err while `image` is in back-off for the pod at `now`: what is left
    /// of it, and upstream's waiting message
    /// (`Back-off pulling image "x": ErrImagePull: <the pull's error>`).
    pub fn check(
        &mut self,
        pod_uid: &str,
        image: &str,
        now: i64,
    ) -> Result<(), (Duration, String)> {
        self.backoff.gc(now);
        self.errors
            .retain(|k, _| self.backoff.entries.contains_key(k));
        let key = Self::key(pod_uid, image);
        let Some(left) = self.backoff.left_since_update(&key, now) else {
            // A pull starts: the last one's error is not kept (upstream
            // drops it too, so the map cannot grow without bound).
            self.errors.remove(&key);
            return Ok(());
        };
        let mut message = format!("Back-off pulling image {image:?}");
        if let Some(previous) = self.errors.get(&key) {
            message = format!("{message}: {previous}");
        }
        Err((left, message))
    }

    /// A pull of `image` for the pod failed at `now` with `reason` (its
    /// waiting reason) and `message`.
    pub fn failed(&mut self, pod_uid: &str, image: &str, now: i64, reason: &str, message: &str) {
        let key = Self::key(pod_uid, image);
        self.backoff.next(&key, now);
        self.errors.insert(key, format!("{reason}: {message}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn token_bucket_takes_its_burst_then_refills_at_its_rate() {
        let mut b = TokenBucket::full(5.0, 2.0, 0);
        assert!(b.try_take(0) && b.try_take(0));
        assert!(!b.try_take(0), "burst spent");
        assert!(!b.try_take(S / 10), "0.5 token after 100 ms");
        assert!(b.try_take(S / 5), "a token after 200 ms at 5/s");
        assert!(
            b.try_take(10 * S) && b.try_take(10 * S) && !b.try_take(10 * S),
            "never over the burst"
        );
    }

    #[test]
    fn a_short_maximum_bounds_the_initial_back_off_too() {
        // maxContainerRestartPeriod 5 s: 5, 5, ...; quiet for 10 s starts over.
        let mut b = KeyedBackoff::with_max(Duration::from_secs(5));
        let k = key("uid", "c", "h");
        assert_eq!(b.try_restart(&k, 0, 0), Ok(()));
        for t in [S, 7 * S, 13 * S] {
            assert_eq!(
                b.try_restart(&k, t, t).unwrap_err().0,
                Duration::from_secs(5)
            );
            assert_eq!(b.try_restart(&k, t, t + 5 * S), Ok(()));
        }
        let mut b = KeyedBackoff::with_max(Duration::from_secs(30));
        assert_eq!(b.try_restart(&k, 0, 0), Ok(()));
        assert_eq!(b.try_restart(&k, S, S).unwrap_err().0, INITIAL);
    }

    #[test]
    fn doubles_to_max_and_resets_after_quiet() {
        let mut b = KeyedBackoff::default();
        let k = key("uid", "c", "h");
        // First exit: restart at once, then a 10 s back-off is recorded.
        assert_eq!(b.try_restart(&k, 100 * S, 100 * S), Ok(()));
        // Second exit right after: wait 10 s.
        assert_eq!(
            b.try_restart(&k, 101 * S, 101 * S),
            Err((Duration::from_secs(10), Duration::from_secs(10)))
        );
        assert_eq!(
            b.try_restart(&k, 101 * S, 105 * S),
            Err((Duration::from_secs(10), Duration::from_secs(6)))
        );
        assert_eq!(b.try_restart(&k, 101 * S, 111 * S), Ok(()));
        // Third exit: 20 s, then 40, 80, 160, 300, 300.
        let mut t = 112 * S;
        for want in [20, 40, 80, 160, 300, 300] {
            let got = b.try_restart(&k, t, t).unwrap_err().0;
            assert_eq!(got, Duration::from_secs(want));
            assert_eq!(b.try_restart(&k, t, t + want as i64 * S), Ok(()));
            t += want as i64 * S + S;
        }
        // Quiet for more than 10 minutes: back to the start.
        let later = t + 601 * S;
        assert_eq!(b.try_restart(&k, later, later), Ok(()));
        assert_eq!(
            b.try_restart(&k, later + S, later + S).unwrap_err().0,
            INITIAL
        );
    }

    #[test]
    fn pulls_back_off_per_pod_and_image_with_the_last_error() {
        let mut b = PullBackoff::default();
        assert_eq!(b.check("u1", "img:1", 0), Ok(()), "never failed");
        b.failed("u1", "img:1", 100 * S, "ErrImagePull", "not found");
        let message = "Back-off pulling image \"img:1\": ErrImagePull: not found".to_owned();
        assert_eq!(
            b.check("u1", "img:1", 104 * S),
            Err((Duration::from_secs(6), message.clone()))
        );
        assert_eq!(b.check("u2", "img:1", 104 * S), Ok(()), "another pod");
        assert_eq!(b.check("u1", "img:2", 104 * S), Ok(()), "another image");
        assert_eq!(b.check("u1", "img:1", 110 * S), Ok(()), "10 s passed");
        // Each failure doubles the wait, up to 300 s.
        let mut t = 110 * S;
        for want in [20, 40, 80, 160, 300, 300] {
            b.failed("u1", "img:1", t, "ErrImagePull", "not found");
            let (left, _) = b.check("u1", "img:1", t).unwrap_err();
            assert_eq!(left, Duration::from_secs(want as u64));
            t += want * S;
            assert_eq!(b.check("u1", "img:1", t), Ok(()));
        }
        // Quiet for ten minutes: it starts over, and the old error is gone.
        t += 601 * S;
        assert_eq!(b.check("u1", "img:1", t), Ok(()));
        assert!(b.errors.is_empty());
        b.failed("u1", "img:1", t, "ErrImagePull", "again");
        assert_eq!(b.check("u1", "img:1", t).unwrap_err().0, INITIAL);
    }

    #[test]
    fn gc_forgets_expired() {
        let mut b = KeyedBackoff::default();
        b.try_restart("a", 0, 0).unwrap();
        b.try_restart("b", 500 * S, 500 * S).unwrap();
        b.gc(700 * S);
        assert_eq!(b.entries.len(), 1);
        assert!(b.entries.contains_key("b"));
    }
}
