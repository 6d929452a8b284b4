//! The pod worker state machine (upstream's pod_workers.go states): one enum
//! and one pure step function. A pod moves syncing → terminating →
//! terminated → finished and never back; the worker task in the `kubelet`
//! crate runs the transaction script each step names.

/// Where a pod is in its life on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The pod should run: SyncPod converges it.
    Syncing,
    /// The pod must stop: SyncTerminatingPod kills it with this grace period
    /// (None: the pod's own terminationGracePeriodSeconds).
    Terminating { grace: Option<i64>, why: Why },
    /// Every container has stopped: SyncTerminatedPod cleans up.
    Terminated { why: Why },
    /// Nothing is left to do; housekeeping may forget the worker.
    Finished { why: Why },
}

/// Why a pod stopped: removed by its source (it may come back with the same
/// UID, as a static pod whose manifest is restored), or it reached a terminal
/// phase (it stays Succeeded/Failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    Removed,
    Completed,
}

/// What happened to the pod or its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The desired pod changed, PLEG saw something, or a resync is due.
    Update,
    /// Stop the pod: removed from every source or an orphan (`Removed`),
    /// or ended on the node where its source still has it, as an eviction
    /// (`Completed`: it stays Failed).
    Kill { grace: Option<i64>, why: Why },
    /// SyncPod finished; `terminal` when the pod reached Succeeded/Failed.
    Synced { terminal: bool },
    /// SyncTerminatingPod finished: nothing runs any more.
    TerminatingDone,
    /// SyncTerminatedPod finished: the pod's shell is cleaned up.
    TerminatedDone,
}

/// The transaction script to run next, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    SyncPod,
    SyncTerminatingPod { grace: Option<i64> },
    SyncTerminatedPod,
    Idle,
}

/// Shorter of two grace periods; a kill can only hurry a termination.
fn shorter(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The single transition function of the pod lifecycle.
pub fn step(state: State, event: Event) -> (State, Step) {
    use Event::*;
    use State::*;
    match (state, event) {
        (Syncing, Update) => (Syncing, Step::SyncPod),
        (Syncing, Kill { grace, why }) => (
            Terminating { grace, why },
            Step::SyncTerminatingPod { grace },
        ),
        (Syncing, Synced { terminal: false }) => (Syncing, Step::Idle),
        (Syncing, Synced { terminal: true }) => (
            Terminating {
                grace: None,
                why: Why::Completed,
            },
            Step::SyncTerminatingPod { grace: None },
        ),
        // A retry of termination, or a kill that may shorten the grace period.
        (Terminating { grace, why }, Update) => (
            Terminating { grace, why },
            Step::SyncTerminatingPod { grace },
        ),
        // A kill while terminating can only hurry it; why it stops stays.
        (Terminating { grace, why }, Kill { grace: g, .. }) => {
            let grace = shorter(grace, g);
            (
                Terminating { grace, why },
                Step::SyncTerminatingPod { grace },
            )
        }
        (Terminating { why, .. }, TerminatingDone) => (Terminated { why }, Step::SyncTerminatedPod),
        (Terminated { why }, Update | Kill { .. }) => (Terminated { why }, Step::SyncTerminatedPod),
        (Terminated { why }, TerminatedDone) => (Finished { why }, Step::Idle),
        // A completed pod killed (removed, deleted, or to start a new life
        // after its spec changed): what it left is cleaned up as removed.
        (
            Finished {
                why: Why::Completed,
            },
            Kill {
                why: Why::Removed, ..
            },
        ) => (Terminated { why: Why::Removed }, Step::SyncTerminatedPod),
        // Anything else is stale news (a sync result after a kill arrived, or
        // an update to a finished pod): nothing to do.
        (s, _) => (s, Step::Idle),
    }
}

impl State {
    pub fn is_terminating_or_later(self) -> bool {
        !matches!(self, State::Syncing)
    }
    pub fn is_finished(self) -> bool {
        matches!(self, State::Finished { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::*;
    use State::*;

    #[test]
    fn transitions() {
        let removing = |g| Terminating {
            grace: g,
            why: Why::Removed,
        };
        let cases = [
            (Syncing, Update, Syncing, Step::SyncPod),
            (Syncing, Synced { terminal: false }, Syncing, Step::Idle),
            (
                Syncing,
                Synced { terminal: true },
                Terminating {
                    grace: None,
                    why: Why::Completed,
                },
                Step::SyncTerminatingPod { grace: None },
            ),
            (
                Syncing,
                Kill {
                    grace: Some(5),
                    why: Why::Removed,
                },
                removing(Some(5)),
                Step::SyncTerminatingPod { grace: Some(5) },
            ),
            (
                removing(Some(30)),
                Kill {
                    grace: Some(2),
                    why: Why::Removed,
                },
                removing(Some(2)),
                Step::SyncTerminatingPod { grace: Some(2) },
            ),
            (
                removing(Some(2)),
                Kill {
                    grace: Some(30),
                    why: Why::Removed,
                },
                removing(Some(2)),
                Step::SyncTerminatingPod { grace: Some(2) },
            ),
            (
                removing(None),
                Update,
                removing(None),
                Step::SyncTerminatingPod { grace: None },
            ),
            (
                removing(None),
                Synced { terminal: false },
                removing(None),
                Step::Idle,
            ),
            (
                removing(Some(1)),
                TerminatingDone,
                Terminated { why: Why::Removed },
                Step::SyncTerminatedPod,
            ),
            (
                Terminated { why: Why::Removed },
                Update,
                Terminated { why: Why::Removed },
                Step::SyncTerminatedPod,
            ),
            (
                Terminated {
                    why: Why::Completed,
                },
                TerminatedDone,
                Finished {
                    why: Why::Completed,
                },
                Step::Idle,
            ),
            (
                Finished {
                    why: Why::Completed,
                },
                Update,
                Finished {
                    why: Why::Completed,
                },
                Step::Idle,
            ),
            (
                Finished { why: Why::Removed },
                Kill {
                    grace: None,
                    why: Why::Removed,
                },
                Finished { why: Why::Removed },
                Step::Idle,
            ),
            (
                Finished {
                    why: Why::Completed,
                },
                Kill {
                    grace: None,
                    why: Why::Removed,
                },
                Terminated { why: Why::Removed },
                Step::SyncTerminatedPod,
            ),
            (
                Terminating {
                    grace: None,
                    why: Why::Completed,
                },
                Kill {
                    grace: Some(0),
                    why: Why::Removed,
                },
                Terminating {
                    grace: Some(0),
                    why: Why::Completed,
                },
                Step::SyncTerminatingPod { grace: Some(0) },
            ),
        ];
        // An eviction: the pod stops as a completed one and stays so.
        let evicting = |g| Terminating {
            grace: g,
            why: Why::Completed,
        };
        let evict = |g| Kill {
            grace: g,
            why: Why::Completed,
        };
        let more = [
            (
                Syncing,
                evict(Some(1)),
                evicting(Some(1)),
                Step::SyncTerminatingPod { grace: Some(1) },
            ),
            (
                evicting(Some(1)),
                Kill {
                    grace: None,
                    why: Why::Removed,
                },
                evicting(Some(1)),
                Step::SyncTerminatingPod { grace: Some(1) },
            ),
            (
                removing(None),
                evict(Some(0)),
                removing(Some(0)),
                Step::SyncTerminatingPod { grace: Some(0) },
            ),
            (
                Finished {
                    why: Why::Completed,
                },
                evict(None),
                Finished {
                    why: Why::Completed,
                },
                Step::Idle,
            ),
        ];
        for (from, event, to, action) in cases.into_iter().chain(more) {
            assert_eq!(step(from, event), (to, action), "{from:?} + {event:?}");
        }
    }

    #[test]
    fn never_goes_back_to_syncing() {
        let events = [
            Update,
            Kill {
                grace: None,
                why: Why::Removed,
            },
            Synced { terminal: false },
            Synced { terminal: true },
            TerminatingDone,
            TerminatedDone,
        ];
        let states = [
            Terminating {
                grace: None,
                why: Why::Removed,
            },
            Terminated { why: Why::Removed },
            Finished {
                why: Why::Completed,
            },
        ];
        for s in states {
            for e in events {
                assert!(step(s, e).0.is_terminating_or_later(), "{s:?} + {e:?}");
            }
        }
    }
}
