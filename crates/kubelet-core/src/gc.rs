//! Container garbage collection's choice (upstream's kuberuntime_gc.go with
//! MaxPerPodContainer 1): of each container of each pod, keep the newest
//! instances (the running one and the last that exited, which status shows
//! as lastState) and evict older exited ones; under disk pressure, the
//! containers and sandboxes of pods that ran to their end go too
//! (DeleteAllUnusedContainers). Pure: the runtime manager lists and removes.

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
/// containers are never chosen, except in the pods `unused` names (pods that
/// ran to their end, under disk pressure: upstream's evictNonDeletedPods),
/// whose every container that is not running goes.
pub fn evictable(
    containers: &[GcCandidate],
    keep_dead: usize,
    unused: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut dead: BTreeMap<(&str, &str), Vec<&GcCandidate>> = BTreeMap::new();
    let mut out = Vec::new();
    for c in containers {
        if unused(&c.pod_uid) {
            if c.state != ContainerState::Running {
                out.push(c.id.clone());
            }
        } else if c.state == ContainerState::Exited {
            dead.entry((&c.pod_uid, &c.name)).or_default().push(c);
        }
    }
    for (_, mut list) in dead {
        list.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        out.extend(list.into_iter().skip(keep_dead).map(|c| c.id.clone()));
    }
    out.sort();
    out
}

/// One pod sandbox as the runtime lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxCandidate {
    pub id: String,
    pub pod_uid: String,
    pub ready: bool,
}

/// The sandboxes to remove of the pods `unused` names: those not ready that
/// hold none of `containers` (what is left once their containers went;
/// upstream's evictSandboxes for a pod whose runtime may be removed).
pub fn evictable_sandboxes(
    sandboxes: &[SandboxCandidate],
    containers: &[&str],
    unused: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut out: Vec<String> = sandboxes
        .iter()
        .filter(|s| !s.ready && unused(&s.pod_uid) && !containers.contains(&s.id.as_str()))
        .map(|s| s.id.clone())
        .collect();
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
        let none = |_: &str| false;
        assert_eq!(evictable(&list, 1, none), ["a0", "a1"]);
        assert_eq!(evictable(&list, 0, none), ["a0", "a1", "a2", "b1", "q1"]);
        assert!(evictable(&list, 5, none).is_empty());
        // Pod q ran to its end: all of it goes, the created container too;
        // pod p's running container never does.
        assert_eq!(
            evictable(&list, 1, |pod: &str| pod == "q"),
            ["a0", "a1", "q0", "q1"]
        );
        assert_eq!(
            evictable(&list, 1, |_: &str| true),
            ["a0", "a1", "a2", "b1", "q0", "q1"]
        );
    }

    #[test]
    fn sandboxes_of_unused_pods_go_once_empty_and_not_ready() {
        let s = |id: &str, pod: &str, ready: bool| SandboxCandidate {
            id: id.into(),
            pod_uid: pod.into(),
            ready,
        };
        let sandboxes = [
            s("p-old", "p", false),
            s("p-held", "p", false),
            s("p-ready", "p", true),
            s("q-old", "q", false),
        ];
        // (unused pods, containers' sandboxes, removed)
        let cases: [(&[&str], &[&str], &[&str]); 4] = [
            (&[], &[], &[]),
            (&["p"], &["p-held"], &["p-old"]),
            (&["p", "q"], &[], &["p-held", "p-old", "q-old"]),
            (&["q"], &["q-old"], &[]),
        ];
        for (unused, held, want) in cases {
            assert_eq!(
                evictable_sandboxes(&sandboxes, held, |pod: &str| unused.contains(&pod)),
                want,
                "unused {unused:?}, held {held:?}"
            );
        }
    }
}
