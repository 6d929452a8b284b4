//! What would clear a failure, said by every error that reaches a pod's
//! status or events, so that the pod worker's one retry policy reads it
//! from the error instead of guessing from its text (as kube-runtime's
//! watcher errors say whether a retry helps).

/// What would clear a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// An object the pod names (a ConfigMap, a Secret, one of their keys,
    /// a ClusterTrustBundle) is missing: the object's watch wakes the pod
    /// when it comes.
    MissingObject,
    /// The pod asks for what cannot be given (a volume type rkubelet does
    /// not support, an invalid path or field): only a new spec helps.
    Unsupported,
    /// Something outside may clear soon (the API server, the file system,
    /// an object not read yet): back off and try again.
    Transient,
}

impl Cause {
    /// Of two failures, the cause that rules the retry: a transient one
    /// (retried soonest) over a missing object over an unsupported spec.
    #[must_use]
    pub fn sooner(self, other: Cause) -> Cause {
        use Cause::{MissingObject, Transient, Unsupported};
        match (self, other) {
            (Transient, _) | (_, Transient) => Transient,
            (MissingObject, _) | (_, MissingObject) => MissingObject,
            (Unsupported, Unsupported) => Unsupported,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cause::{self, MissingObject, Transient, Unsupported};

    #[test]
    fn the_soonest_cause_rules() {
        let cases: [(Cause, Cause, Cause); 6] = [
            (Transient, Unsupported, Transient),
            (Unsupported, Transient, Transient),
            (MissingObject, Unsupported, MissingObject),
            (Unsupported, MissingObject, MissingObject),
            (MissingObject, Transient, Transient),
            (Unsupported, Unsupported, Unsupported),
        ];
        for (a, b, want) in cases {
            assert_eq!(a.sooner(b), want, "{a:?} {b:?}");
        }
    }
}
