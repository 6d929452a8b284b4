//! Container garbage collection's choice (upstream's kuberuntime_gc.go with
//! MaxPerPodContainer 1): of each container of each pod, keep the newest
//! instances (the running one and the last that exited, which status shows
//! as lastState) and evict older exited ones. Pure: the runtime manager
//! lists and removes.

use std::collections::BTreeMap;

use crate::runtime::ContainerState;

/// One container as the runtime lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcCandidate {
    pub id: String,
    pub pod_uid: String,
    pub name: String,
    pub state: ContainerState,
    pub created_at: i64,
}

/// The IDs to remove: per (pod, container name), every exited instance
/// beyond the `keep_dead` newest exited ones. Running, created and unknown
/// containers are never chosen.
pub fn evictable(containers: &[GcCandidate], keep_dead: usize) -> Vec<String> {
    let mut dead: BTreeMap<(&str, &str), Vec<&GcCandidate>> = BTreeMap::new();
    for c in containers
        .iter()
        .filter(|c| c.state == ContainerState::Exited)
    {
        dead.entry((&c.pod_uid, &c.name)).or_default().push(c);
    }
    let mut out = Vec::new();
    for (_, mut list) in dead {
        list.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        out.extend(list.into_iter().skip(keep_dead).map(|c| c.id.clone()));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContainerState::*;

    fn c(id: &str, pod: &str, name: &str, state: ContainerState, at: i64) -> GcCandidate {
        GcCandidate {
            id: id.into(),
            pod_uid: pod.into(),
            name: name.into(),
            state,
            created_at: at,
        }
    }

    #[test]
    fn keeps_the_newest_dead_instance_per_container() {
        let list = [
            c("a3", "p", "a", Running, 3),
            c("a2", "p", "a", Exited, 2),
            c("a1", "p", "a", Exited, 1),
            c("a0", "p", "a", Exited, 0),
            c("b1", "p", "b", Exited, 1),
            c("q1", "q", "a", Exited, 5),
            c("q0", "q", "a", Created, 4),
        ];
        assert_eq!(evictable(&list, 1), ["a0", "a1"]);
        assert_eq!(evictable(&list, 0), ["a0", "a1", "a2", "b1", "q1"]);
        assert!(evictable(&list, 5).is_empty());
    }
}
