//! PLEG's pure half (upstream's `pleg/generic.go` generateEvents): compare two
//! relists and name what changed. Sandboxes count as containers, as upstream.

use crate::runtime::{ContainerState, RuntimePods, SandboxState};
use crate::types::PodUid;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    ContainerChanged,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    pub uid: PodUid,
    pub kind: EventType,
    pub container_id: String,
}

/// What PLEG tracks of one container or sandbox between relists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Running,
    Exited,
    Unknown,
    Absent,
}

impl From<ContainerState> for Seen {
    fn from(s: ContainerState) -> Self {
        match s {
            ContainerState::Running => Seen::Running,
            ContainerState::Exited => Seen::Exited,
            ContainerState::Created | ContainerState::Unknown => Seen::Unknown,
        }
    }
}

impl From<SandboxState> for Seen {
    fn from(s: SandboxState) -> Self {
        match s {
            SandboxState::Ready => Seen::Running,
            SandboxState::NotReady => Seen::Exited,
        }
    }
}

fn events_for(old: Seen, new: Seen) -> &'static [EventType] {
    use EventType::*;
    if old == new {
        return &[];
    }
    match new {
        Seen::Running => &[ContainerStarted],
        Seen::Exited => &[ContainerDied],
        Seen::Unknown => &[ContainerChanged],
        Seen::Absent => match old {
            Seen::Exited => &[ContainerRemoved],
            _ => &[ContainerDied, ContainerRemoved],
        },
    }
}

/// Every (uid, id) → state in one relist, sandboxes and containers alike.
fn flatten(pods: &RuntimePods) -> std::collections::BTreeMap<(&PodUid, &str), Seen> {
    let mut out = std::collections::BTreeMap::new();
    for (uid, pod) in pods {
        for (id, s) in &pod.sandboxes {
            out.insert((uid, id.as_str()), Seen::from(*s));
        }
        for (id, (_, s)) in &pod.containers {
            out.insert((uid, id.as_str()), Seen::from(*s));
        }
    }
    out
}

/// The events that turn relist `old` into relist `new`, ordered by pod UID.
pub fn diff(old: &RuntimePods, new: &RuntimePods) -> Vec<PodLifecycleEvent> {
    let before = flatten(old);
    let after = flatten(new);
    let mut keys: Vec<_> = before.keys().chain(after.keys()).copied().collect();
    keys.sort();
    keys.dedup();
    let mut events = Vec::new();
    for key in keys {
        let o = before.get(&key).copied().unwrap_or(Seen::Absent);
        let n = after.get(&key).copied().unwrap_or(Seen::Absent);
        for kind in events_for(o, n) {
            events.push(PodLifecycleEvent {
                uid: key.0.clone(),
                kind: *kind,
                container_id: key.1.to_owned(),
            });
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RuntimePod;
    use EventType::*;

    fn relist(entries: &[(&str, &str, Option<ContainerState>)]) -> RuntimePods {
        let mut pods = RuntimePods::new();
        for (uid, id, state) in entries {
            let pod = pods
                .entry(PodUid::from(*uid))
                .or_insert_with(|| RuntimePod {
                    uid: PodUid::from(*uid),
                    ..Default::default()
                });
            match state {
                Some(s) => {
                    pod.containers.insert((*id).into(), ("c".into(), *s));
                }
                None => {
                    pod.sandboxes.insert((*id).into(), SandboxState::Ready);
                }
            }
        }
        pods
    }

    fn ev(uid: &str, kind: EventType, id: &str) -> PodLifecycleEvent {
        PodLifecycleEvent {
            uid: uid.into(),
            kind,
            container_id: id.into(),
        }
    }

    #[test]
    fn table() {
        use ContainerState::*;
        let cases: Vec<(&str, RuntimePods, RuntimePods, Vec<PodLifecycleEvent>)> = vec![
            (
                "nothing changed",
                relist(&[("p", "c1", Some(Running))]),
                relist(&[("p", "c1", Some(Running))]),
                vec![],
            ),
            (
                "new running container",
                relist(&[]),
                relist(&[("p", "c1", Some(Running))]),
                vec![ev("p", ContainerStarted, "c1")],
            ),
            (
                "sandbox appears",
                relist(&[]),
                relist(&[("p", "s1", None)]),
                vec![ev("p", ContainerStarted, "s1")],
            ),
            (
                "container exits",
                relist(&[("p", "c1", Some(Running))]),
                relist(&[("p", "c1", Some(Exited))]),
                vec![ev("p", ContainerDied, "c1")],
            ),
            (
                "created is a change",
                relist(&[]),
                relist(&[("p", "c1", Some(Created))]),
                vec![ev("p", ContainerChanged, "c1")],
            ),
            (
                "exited container removed",
                relist(&[("p", "c1", Some(Exited))]),
                relist(&[]),
                vec![ev("p", ContainerRemoved, "c1")],
            ),
            (
                "running container vanishes",
                relist(&[("p", "c1", Some(Running))]),
                relist(&[]),
                vec![
                    ev("p", ContainerDied, "c1"),
                    ev("p", ContainerRemoved, "c1"),
                ],
            ),
            (
                "two pods",
                relist(&[("a", "c1", Some(Running))]),
                relist(&[("a", "c1", Some(Exited)), ("b", "c2", Some(Running))]),
                vec![
                    ev("a", ContainerDied, "c1"),
                    ev("b", ContainerStarted, "c2"),
                ],
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(diff(&old, &new), want, "{name}");
        }
    }
}
