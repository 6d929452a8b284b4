//! CrashLoopBackOff (upstream's flowcontrol.Backoff as kuberuntime uses it):
//! a container that exited is restarted at once the first time, then only
//! after 10 s, 20 s, 40 s … up to 300 s since it last exited; a container
//! that stayed quiet for twice the maximum (10 min) starts over at 10 s.
//! Pure: times are nanoseconds since the epoch, passed in.

use std::collections::HashMap;
use std::time::Duration;

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    backoff: Duration,
    last_update: i64,
}

#[derive(Debug, Default)]
pub struct CrashLoopBackoff {
    entries: HashMap<String, Entry>,
}

/// The key upstream uses: one backoff per pod and container spec.
pub fn key(pod_uid: &str, container: &str, hash: &str) -> String {
    format!("{pod_uid}_{container}_{hash}")
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl CrashLoopBackoff {
    fn expired(entry: &Entry, at: i64) -> bool {
        at.saturating_sub(entry.last_update) > nanos(MAX * 2)
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
            && !Self::expired(e, exited_at)
        {
            let since = Duration::from_nanos(now.saturating_sub(exited_at).max(0) as u64);
            if since < e.backoff {
                return Err((e.backoff, e.backoff - since));
            }
        }
        let backoff = match self.entries.get(key) {
            Some(e) if !Self::expired(e, exited_at) => (e.backoff * 2).min(MAX),
            _ => INITIAL,
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                backoff,
                last_update: exited_at,
            },
        );
        Ok(())
    }

    /// Drop entries that expired (their containers ran quietly long enough).
    pub fn gc(&mut self, now: i64) {
        self.entries.retain(|_, e| !Self::expired(e, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn doubles_to_max_and_resets_after_quiet() {
        let mut b = CrashLoopBackoff::default();
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
    fn gc_forgets_expired() {
        let mut b = CrashLoopBackoff::default();
        b.try_restart("a", 0, 0).unwrap();
        b.try_restart("b", 500 * S, 500 * S).unwrap();
        b.gc(700 * S);
        assert_eq!(b.entries.len(), 1);
        assert!(b.entries.contains_key("b"));
    }
}
