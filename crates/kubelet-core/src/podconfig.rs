//! The config mux's merge (upstream's `podStorage` in `pkg/kubelet/config/config.go`):
//! every pod source periodically states the full set of pods it wants (SET semantics), and
//! the storage turns each such snapshot into the changes the sync loop must act on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::types::{PodOperation, PodUid, PodUpdate, is_mirror_pod, keys, pod_full_name};

/// Per-source desired pods, merged like upstream's PodConfig (pkg/kubelet/config/config.go).
#[derive(Debug, Default)]
pub struct PodStorage {
    /// source → (uid → pod)
    pods: BTreeMap<&'static str, BTreeMap<PodUid, Arc<Pod>>>,
    /// Sources that have delivered at least one snapshot.
    seen: BTreeSet<&'static str>,
}

impl PodStorage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace the full set of pods from `source` (SET semantics) and return the changes as
    /// PodUpdates (in this order, each only if non-empty: Remove, Add, Update, Reconcile),
    /// source = that source.
    ///
    /// Every accepted pod is annotated `kubernetes.io/config.source: <source>`. `now_rfc3339`
    /// is recorded in `kubernetes.io/config.seen` on pods first seen (Add); an Update keeps the
    /// pod's existing config.seen. Update when spec, labels, annotations (ignoring
    /// config.seen), deletionTimestamp or deletionGracePeriodSeconds changed; Reconcile when
    /// only status changed; nothing when identical (the stored pod is then kept as is).
    ///
    /// Dropped, each with an error entry naming it: a pod without a UID, a pod whose UID
    /// already appeared in this snapshot or belongs to another source, and a pod whose
    /// namespace/name is already used by another UID of any source.
    pub fn set(
        &mut self,
        source: &'static str,
        pods: Vec<Pod>,
        now_rfc3339: &str,
    ) -> (Vec<PodUpdate>, Vec<String>) {
        self.seen.insert(source);
        let old = self.pods.remove(source).unwrap_or_default();

        // What the other sources hold, to keep names and UIDs unique across sources.
        let mut names: HashMap<String, (PodUid, &'static str)> = HashMap::new();
        let mut uids: HashMap<&PodUid, &'static str> = HashMap::new();
        for (&other, their_pods) in &self.pods {
            for (uid, pod) in their_pods {
                if !is_mirror_pod(pod) {
                    names.insert(pod_full_name(pod), (uid.clone(), other));
                }
                uids.insert(uid, other);
            }
        }

        let mut current: BTreeMap<PodUid, Arc<Pod>> = BTreeMap::new();
        let (mut adds, mut updates, mut reconciles) = (Vec::new(), Vec::new(), Vec::new());
        let mut errors = Vec::new();
        for mut pod in pods {
            let uid = PodUid::of(&pod);
            let full_name = pod_full_name(&pod);
            let mut reject = |why: String| {
                errors.push(format!(
                    "source {source:?}: dropping pod {full_name} (uid {uid:?}): {why}"
                ));
            };
            if uid.as_str().is_empty() {
                reject("the pod has no UID".into());
                continue;
            }
            if let Some(other) = uids.get(&uid) {
                reject(format!(
                    "the UID is already used by a pod from source {other:?}"
                ));
                continue;
            }
            if current.contains_key(&uid) {
                reject("the UID appears more than once in this source".into());
                continue;
            }
            // A mirror pod shares its static pod's name by design.
            if !is_mirror_pod(&pod) {
                match names.get(&full_name) {
                    Some((other_uid, other)) if *other_uid != uid => {
                        reject(format!(
                            "namespace/name already used by uid {:?} from source {other:?}",
                            other_uid.as_str()
                        ));
                        continue;
                    }
                    _ => {}
                }
                names.insert(full_name, (uid.clone(), source));
            }

            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(keys::CONFIG_SOURCE.to_owned(), source.to_owned());

            let stored = match old.get(&uid) {
                None => {
                    set_seen(&mut pod, now_rfc3339.to_owned());
                    let pod = Arc::new(pod);
                    adds.push(pod.clone());
                    pod
                }
                Some(existing) if differ_semantically(existing, &pod) => {
                    let seen = existing
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(keys::CONFIG_SEEN))
                        .cloned()
                        .unwrap_or_else(|| now_rfc3339.to_owned());
                    set_seen(&mut pod, seen);
                    let pod = Arc::new(pod);
                    updates.push(pod.clone());
                    pod
                }
                Some(existing) if existing.status != pod.status => {
                    let mut refreshed = Pod::clone(existing);
                    refreshed.status = pod.status;
                    let pod = Arc::new(refreshed);
                    reconciles.push(pod.clone());
                    pod
                }
                Some(existing) => existing.clone(),
            };
            current.insert(uid, stored);
        }

        let removes: Vec<Arc<Pod>> = old
            .into_iter()
            .filter(|(uid, _)| !current.contains_key(uid))
            .map(|(_, pod)| pod)
            .collect();
        self.pods.insert(source, current);

        let out = [
            (PodOperation::Remove, removes),
            (PodOperation::Add, adds),
            (PodOperation::Update, updates),
            (PodOperation::Reconcile, reconciles),
        ]
        .into_iter()
        .filter(|(_, pods)| !pods.is_empty())
        .map(|(op, pods)| PodUpdate { op, source, pods })
        .collect();
        (out, errors)
    }

    /// Sources that have sent at least one set.
    pub fn seen_sources(&self) -> impl Iterator<Item = &'static str> {
        self.seen.iter().copied()
    }
}

fn set_seen(pod: &mut Pod, seen: String) {
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(keys::CONFIG_SEEN.to_owned(), seen);
}

/// Upstream's `podsDifferSemantically`: what makes an Update rather than a Reconcile.
fn differ_semantically(existing: &Pod, new: &Pod) -> bool {
    existing.spec != new.spec
        || existing.metadata.labels != new.metadata.labels
        || existing.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || existing.metadata.deletion_grace_period_seconds
            != new.metadata.deletion_grace_period_seconds
        || !annotations_equal(existing, new)
}

/// Annotations compared without the kubelet's own `kubernetes.io/config.seen`; a missing map
/// equals an empty one.
fn annotations_equal(a: &Pod, b: &Pod) -> bool {
    let relevant = |pod: &Pod| -> BTreeMap<String, String> {
        let mut map = pod.metadata.annotations.clone().unwrap_or_default();
        map.remove(keys::CONFIG_SEEN);
        map
    };
    relevant(a) == relevant(b)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::testing::{PodBuilder, container};
    use crate::types::{SOURCE_API, SOURCE_FILE};

    fn pod(name: &str, uid: &str) -> Pod {
        PodBuilder::new(name)
            .namespace("default")
            .uid(uid)
            .container(Container {
                image: Some("img:1".into()),
                ..container("c")
            })
            .build()
    }

    fn with(mut p: Pod, f: impl FnOnce(&mut Pod)) -> Pod {
        f(&mut p);
        p
    }

    fn image(p: Pod, image: &str) -> Pod {
        with(p, |p| {
            p.spec.as_mut().unwrap().containers[0].image = Some(image.into())
        })
    }

    fn annotate(p: Pod, k: &str, v: &str) -> Pod {
        with(p, |p| {
            p.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(k.into(), v.into());
        })
    }

    /// (operation, source, names)
    type Summary = Vec<(PodOperation, &'static str, Vec<String>)>;

    fn summarize(updates: &[PodUpdate]) -> Summary {
        updates
            .iter()
            .map(|u| {
                let names = u
                    .pods
                    .iter()
                    .map(|p| p.metadata.name.clone().unwrap())
                    .collect();
                (u.op, u.source, names)
            })
            .collect()
    }

    fn expect(items: &[(PodOperation, &'static str, &[&str])]) -> Summary {
        items
            .iter()
            .map(|(op, src, names)| (*op, *src, names.iter().map(|n| n.to_string()).collect()))
            .collect()
    }

    use PodOperation::{Add, Reconcile, Remove, Update};

    struct Step {
        source: &'static str,
        pods: Vec<Pod>,
        want: Summary,
        errors: usize,
    }

    fn step(
        source: &'static str,
        pods: Vec<Pod>,
        want: &[(PodOperation, &'static str, &[&str])],
        errors: usize,
    ) -> Step {
        Step {
            source,
            pods,
            want: expect(want),
            errors,
        }
    }

    const F: &str = SOURCE_FILE;
    const A: &str = SOURCE_API;

    #[test]
    fn merge_table() {
        let ts = Time("2024-01-01T00:00:00Z".parse().unwrap());
        let cases: Vec<(&str, Vec<Step>)> = vec![
            (
                "empty first set yields nothing",
                vec![step(F, vec![], &[], 0)],
            ),
            (
                "new pods are added, identical sets are quiet",
                vec![
                    step(
                        F,
                        vec![pod("a", "1"), pod("b", "2")],
                        &[(Add, F, &["a", "b"])],
                        0,
                    ),
                    step(F, vec![pod("a", "1"), pod("b", "2")], &[], 0),
                ],
            ),
            (
                "spec change is an update, status change a reconcile, absence a removal",
                vec![
                    step(
                        F,
                        vec![pod("a", "1"), pod("b", "2"), pod("c", "3")],
                        &[(Add, F, &["a", "b", "c"])],
                        0,
                    ),
                    step(
                        F,
                        vec![
                            image(pod("a", "1"), "img:2"),
                            with(pod("b", "2"), |p| {
                                p.status = Some(PodStatus {
                                    phase: Some("Running".into()),
                                    ..Default::default()
                                })
                            }),
                            pod("d", "4"),
                        ],
                        &[
                            (Remove, F, &["c"]),
                            (Add, F, &["d"]),
                            (Update, F, &["a"]),
                            (Reconcile, F, &["b"]),
                        ],
                        0,
                    ),
                ],
            ),
            (
                "labels, annotations and deletion fields are updates; config.seen is not",
                vec![
                    step(
                        F,
                        vec![
                            pod("a", "1"),
                            pod("b", "2"),
                            pod("c", "3"),
                            pod("d", "4"),
                            pod("e", "5"),
                        ],
                        &[(Add, F, &["a", "b", "c", "d", "e"])],
                        0,
                    ),
                    step(
                        F,
                        vec![
                            with(pod("a", "1"), |p| {
                                p.metadata.labels =
                                    Some([("k".to_string(), "v".to_string())].into())
                            }),
                            annotate(pod("b", "2"), "team", "x"),
                            with(pod("c", "3"), |p| {
                                p.metadata.deletion_timestamp = Some(ts.clone())
                            }),
                            with(pod("d", "4"), |p| {
                                p.metadata.deletion_grace_period_seconds = Some(0)
                            }),
                            annotate(pod("e", "5"), keys::CONFIG_SEEN, "1999-01-01T00:00:00Z"),
                        ],
                        &[(Update, F, &["a", "b", "c", "d"])],
                        0,
                    ),
                ],
            ),
            (
                "an empty set removes everything",
                vec![
                    step(
                        F,
                        vec![pod("a", "1"), pod("b", "2")],
                        &[(Add, F, &["a", "b"])],
                        0,
                    ),
                    step(F, vec![], &[(Remove, F, &["a", "b"])], 0),
                    step(F, vec![], &[], 0),
                ],
            ),
            (
                "sources are independent",
                vec![
                    step(F, vec![pod("a", "1")], &[(Add, F, &["a"])], 0),
                    step(A, vec![pod("b", "2")], &[(Add, A, &["b"])], 0),
                    step(A, vec![], &[(Remove, A, &["b"])], 0),
                ],
            ),
            (
                "a name taken by another UID of another source is dropped",
                vec![
                    step(F, vec![pod("a", "1")], &[(Add, F, &["a"])], 0),
                    step(
                        A,
                        vec![pod("a", "2"), pod("b", "3")],
                        &[(Add, A, &["b"])],
                        1,
                    ),
                    // Once the file pod is gone, the API pod gets its name.
                    step(F, vec![], &[(Remove, F, &["a"])], 0),
                    step(
                        A,
                        vec![pod("a", "2"), pod("b", "3")],
                        &[(Add, A, &["a"])],
                        0,
                    ),
                ],
            ),
            (
                "a name used twice within a source keeps the first",
                vec![step(
                    F,
                    vec![pod("a", "1"), pod("a", "2")],
                    &[(Add, F, &["a"])],
                    1,
                )],
            ),
            (
                "the same name in another namespace is fine",
                vec![step(
                    F,
                    vec![
                        pod("a", "1"),
                        with(pod("a", "2"), |p| {
                            p.metadata.namespace = Some("other".into())
                        }),
                    ],
                    &[(Add, F, &["a", "a"])],
                    0,
                )],
            ),
            (
                "duplicate, foreign and missing UIDs are dropped",
                vec![
                    step(A, vec![pod("x", "9")], &[(Add, A, &["x"])], 0),
                    step(
                        F,
                        vec![pod("a", "1"), pod("b", "1"), pod("c", "9"), pod("d", "")],
                        &[(Add, F, &["a"])],
                        3,
                    ),
                ],
            ),
        ];
        for (what, steps) in cases {
            let mut storage = PodStorage::new();
            for (i, s) in steps.into_iter().enumerate() {
                let (updates, errors) = storage.set(s.source, s.pods, "now");
                assert_eq!(summarize(&updates), s.want, "{what}: step {i}");
                assert_eq!(errors.len(), s.errors, "{what}: step {i}: {errors:?}");
            }
        }
    }

    #[test]
    fn seen_and_source_annotations() {
        let mut storage = PodStorage::new();
        assert_eq!(storage.seen_sources().count(), 0);

        let (updates, _) = storage.set(F, vec![pod("a", "1")], "t1");
        let added = &updates[0].pods[0];
        let ann = added.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[keys::CONFIG_SEEN], "t1");
        assert_eq!(ann[keys::CONFIG_SOURCE], F);

        // An update keeps the first-seen time and carries the new content.
        let (updates, _) = storage.set(F, vec![image(pod("a", "1"), "img:2")], "t2");
        assert_eq!(updates[0].op, Update);
        let updated = &updates[0].pods[0];
        assert_eq!(
            updated.metadata.annotations.as_ref().unwrap()[keys::CONFIG_SEEN],
            "t1"
        );
        assert_eq!(
            updated.spec.as_ref().unwrap().containers[0]
                .image
                .as_deref(),
            Some("img:2")
        );

        // A reconcile carries the new status on the stored pod.
        let running = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let (updates, _) = storage.set(
            F,
            vec![with(image(pod("a", "1"), "img:2"), |p| {
                p.status = running.clone()
            })],
            "t3",
        );
        assert_eq!(updates[0].op, Reconcile);
        assert_eq!(updates[0].pods[0].status, running);
        assert_eq!(
            updates[0].pods[0].metadata.annotations.as_ref().unwrap()[keys::CONFIG_SEEN],
            "t1"
        );

        // A removal hands back the stored pod.
        let (updates, _) = storage.set(F, vec![], "t4");
        assert_eq!(updates[0].op, Remove);
        assert_eq!(updates[0].pods[0].status, running);

        storage.set(A, vec![], "t5");
        let mut seen: Vec<_> = storage.seen_sources().collect();
        seen.sort_unstable();
        assert_eq!(seen, [A, F]);
    }

    #[test]
    fn errors_name_the_pod() {
        let mut storage = PodStorage::new();
        storage.set(A, vec![pod("web", "1")], "t");
        let (updates, errors) = storage.set(
            F,
            vec![with(pod("web", "2"), |p| {
                p.metadata.namespace = Some("default".into())
            })],
            "t",
        );
        assert!(updates.is_empty());
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("default/web"), "{}", errors[0]);
        assert!(errors[0].contains("\"2\""), "{}", errors[0]);
        assert!(errors[0].contains("\"api\""), "{}", errors[0]);
    }

    #[test]
    fn a_mirror_pod_may_share_its_static_pods_name() {
        let mut st = PodStorage::new();
        st.set("file", vec![pod("web-node1", "static")], "t0");
        let mut mirror = pod("web-node1", "mirror");
        mirror
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(keys::CONFIG_MIRROR.into(), "hash".into());
        let (updates, errors) = st.set("api", vec![mirror], "t1");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(updates.len(), 1);
        assert_eq!(updates[0].op, PodOperation::Add);
        // A non-mirror pod with the name is still refused.
        let (_, errors) = st.set("api", vec![pod("web-node1", "other")], "t2");
        assert_eq!(errors.len(), 1);
    }
}
