//! RuntimeClasses (upstream's `pkg/kubelet/runtimeclass` manager): the
//! `runtimeClassName` of a pod resolved to the CRI runtime handler its
//! sandbox is run with, from a watch of every RuntimeClass (node.k8s.io/v1,
//! which the node authorizer lets a kubelet list and watch).

use k8s_openapi::api::node::v1::RuntimeClass;
use kubelet_api::objects::Latest;
use tokio::sync::watch;

/// Where the RuntimeClasses come from: a watch in cluster mode; none for a
/// kubelet without an API server, which refuses pods that name one rather
/// than running them with the default handler (upstream's would).
#[derive(Clone, Debug, Default)]
pub struct RuntimeClasses(Option<watch::Receiver<Latest<Vec<RuntimeClass>>>>);

impl RuntimeClasses {
    pub fn watched(rx: watch::Receiver<Latest<Vec<RuntimeClass>>>) -> Self {
        RuntimeClasses(Some(rx))
    }

    /// The runtime handler of the pod's sandbox (upstream's
    /// LookupRuntimeHandler): empty for no RuntimeClass; Err is the message
    /// of the pod's FailedCreatePodSandBox event.
    pub fn handler(&self, name: Option<&str>) -> Result<String, RuntimeClassError> {
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Ok(String::new());
        };
        match &self.0 {
            None => Err(RuntimeClassError::NoApiServer(name.to_owned())),
            Some(rx) => lookup(&rx.borrow(), name),
        }
    }
}

/// `name`'s handler among the listed classes, with upstream's errors: the
/// lister's NotFound as is, any other failure to look it up wrapped.
fn lookup(classes: &Latest<Vec<RuntimeClass>>, name: &str) -> Result<String, RuntimeClassError> {
    match classes {
        Latest::Present(all) => all
            .iter()
            .find(|rc| rc.metadata.name.as_deref() == Some(name))
            .map(|rc| rc.handler.clone())
            .ok_or_else(|| RuntimeClassError::NotFound(name.to_owned())),
        Latest::Pending | Latest::Absent => Err(RuntimeClassError::NotListed(name.to_owned())),
    }
}

/// Why a pod's RuntimeClass has no handler, in upstream's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeClassError {
    #[error("runtimeclass.node.k8s.io {0:?} not found")]
    NotFound(String),
    #[error("failed to lookup RuntimeClass {0}: RuntimeClasses are not listed yet")]
    NotListed(String),
    #[error("failed to lookup RuntimeClass {0}: no API server to read RuntimeClasses from")]
    NoApiServer(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::sync::Arc;

    fn class(name: &str, handler: &str) -> RuntimeClass {
        RuntimeClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            handler: handler.into(),
            ..Default::default()
        }
    }

    #[test]
    fn handlers_resolve_as_upstream() {
        let listed = Latest::Present(Arc::new(vec![class("kata", "kata-qemu")]));
        let watched = |l: Latest<Vec<RuntimeClass>>| RuntimeClasses::watched(watch::channel(l).1);
        let cases: Vec<(RuntimeClasses, Option<&str>, Result<&str, &str>)> = vec![
            (RuntimeClasses::default(), None, Ok("")),
            (RuntimeClasses::default(), Some(""), Ok("")),
            (watched(listed.clone()), Some("kata"), Ok("kata-qemu")),
            (
                watched(listed.clone()),
                Some("gvisor"),
                Err("runtimeclass.node.k8s.io \"gvisor\" not found"),
            ),
            (
                watched(Latest::Pending),
                Some("kata"),
                Err("failed to lookup RuntimeClass kata: RuntimeClasses are not listed yet"),
            ),
            (
                RuntimeClasses::default(),
                Some("kata"),
                Err(
                    "failed to lookup RuntimeClass kata: no API server to read RuntimeClasses from",
                ),
            ),
        ];
        for (classes, name, want) in cases {
            let got = classes.handler(name);
            assert_eq!(
                got.as_deref().map_err(ToString::to_string),
                want.map_err(str::to_owned),
                "{name:?}"
            );
        }
    }
}
