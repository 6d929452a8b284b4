//! The sync work queue (upstream's `util/queue`): when each pod is next due
//! for a periodic sync or a retry. The 1 s sync tick takes what is due.

use std::collections::HashMap;
use std::time::Duration;

use crate::types::PodUid;

/// Pod UID → the instant (any monotonic clock's, as a Duration since its
/// origin) at which the pod is due.
#[derive(Debug, Default)]
pub struct WorkQueue {
    due: HashMap<PodUid, Duration>,
}

impl WorkQueue {
    /// Due at `at`; an earlier due time already queued wins.
    pub fn enqueue(&mut self, uid: PodUid, at: Duration) {
        let e = self.due.entry(uid).or_insert(at);
        if at < *e {
            *e = at;
        }
    }

    /// Remove and return every pod due at or before `now`.
    pub fn take_due(&mut self, now: Duration) -> Vec<PodUid> {
        let mut out: Vec<PodUid> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &out {
            self.due.remove(uid);
        }
        out.sort();
        out
    }

    pub fn forget(&mut self, uid: &PodUid) {
        self.due.remove(uid);
    }

    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_only_due_and_keeps_earliest() {
        let s = Duration::from_secs;
        let mut q = WorkQueue::default();
        q.enqueue("a".into(), s(10));
        q.enqueue("b".into(), s(5));
        q.enqueue("a".into(), s(3));
        q.enqueue("b".into(), s(60));
        assert_eq!(q.take_due(s(2)), Vec::<PodUid>::new());
        assert_eq!(q.take_due(s(4)), vec![PodUid::from("a")]);
        assert_eq!(q.take_due(s(100)), vec![PodUid::from("b")]);
        assert!(q.is_empty());
    }
}
