//! Test fixtures shared by the workspace's tests (this crate's unit tests,
//! and, through the `testing` feature its dev-dependents enable, theirs): a
//! builder of `Pod`s, so a test names only the fields it is about.
//!
//! `PodBuilder::new("web").namespace("default").uid("u1").container(container("app")).build()`
//! is a pod named web with one container named app, and nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, Pod, PodSpec, PodStatus, ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A `Pod` built field by field. Only what is set is there: no name unless
/// [`PodBuilder::new`] gave one, no spec unless a spec field was set (then
/// every other spec field is its default).
#[derive(Clone, Debug, Default)]
pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    /// A pod named `name` (metadata.name), nothing else set.
    pub fn new(name: &str) -> PodBuilder {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        PodBuilder { pod }
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.pod.metadata.namespace = Some(namespace.into());
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.into());
        self
    }

    pub fn resource_version(mut self, version: &str) -> Self {
        self.pod.metadata.resource_version = Some(version.into());
        self
    }

    /// Add the label `key: value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// Add the annotation `key: value`.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// Append a container to spec.containers.
    pub fn container(self, container: Container) -> Self {
        self.with_spec(|s| s.containers.push(container))
    }

    /// Append containers to spec.containers (none: the spec is still set).
    pub fn containers(self, containers: impl IntoIterator<Item = Container>) -> Self {
        self.with_spec(|s| s.containers.extend(containers))
    }

    /// Append an init container to spec.initContainers.
    pub fn init_container(self, container: Container) -> Self {
        self.init_containers([container])
    }

    /// Append init containers to spec.initContainers (none: an empty list,
    /// not an absent one).
    pub fn init_containers(self, containers: impl IntoIterator<Item = Container>) -> Self {
        self.with_spec(|s| {
            s.init_containers
                .get_or_insert_with(Vec::new)
                .extend(containers)
        })
    }

    /// Append a volume to spec.volumes.
    pub fn volume(self, volume: Volume) -> Self {
        self.volumes([volume])
    }

    /// Append volumes to spec.volumes (none: an empty list, not an absent
    /// one).
    pub fn volumes(self, volumes: impl IntoIterator<Item = Volume>) -> Self {
        self.with_spec(|s| s.volumes.get_or_insert_with(Vec::new).extend(volumes))
    }

    pub fn restart_policy(self, policy: &str) -> Self {
        self.with_spec(|s| s.restart_policy = Some(policy.into()))
    }

    pub fn node_name(self, node: &str) -> Self {
        self.with_spec(|s| s.node_name = Some(node.into()))
    }

    /// The whole spec, replacing whatever was set of it.
    pub fn spec(mut self, spec: PodSpec) -> Self {
        self.pod.spec = Some(spec);
        self
    }

    /// Any other spec field: `f` edits the spec (a default one if none was
    /// set yet).
    pub fn with_spec(mut self, f: impl FnOnce(&mut PodSpec)) -> Self {
        f(self.pod.spec.get_or_insert_with(PodSpec::default));
        self
    }

    pub fn status(mut self, status: PodStatus) -> Self {
        self.pod.status = Some(status);
        self
    }

    pub fn build(self) -> Pod {
        self.pod
    }

    /// The pod as the kubelet's managers share it.
    pub fn arc(self) -> Arc<Pod> {
        Arc::new(self.pod)
    }
}

/// A container with only its name set.
pub fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        ..Default::default()
    }
}

/// Requests and limits from (resource, quantity) pairs; an empty list
/// leaves that side absent.
pub fn resources(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> ResourceRequirements {
    let list = |pairs: &[(&str, &str)]| {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                .collect()
        })
    };
    ResourceRequirements {
        requests: list(requests),
        limits: list(limits),
        ..Default::default()
    }
}
