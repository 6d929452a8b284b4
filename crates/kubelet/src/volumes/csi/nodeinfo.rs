//! The node's CSI driver information in the API (upstream's
//! nodeinfomanager): the CSINode object, owned by the Node, listing each
//! registered driver (node ID, topology keys, volume limit), and on the
//! Node the `csi.volume.kubernetes.io/nodeid` annotation and the drivers'
//! topology labels. Updates of the CSINode are retried on conflict.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kubelet_api::objects::get_cluster_object;
use kubelet_api::storage::{create_csinode, patch_node_metadata, replace_csinode};
use kubelet_api::{ApiClient, ApiError};
use kubelet_core::csi::{
    MIGRATED_PLUGINS, MIGRATED_PLUGINS_ANNOTATION, NODE_ID_ANNOTATION, install_driver,
    node_id_annotation,
};

/// How often a CSINode update is tried against conflicts.
const ATTEMPTS: usize = 5;

#[derive(Clone)]
pub struct NodeInfo {
    pub api: ApiClient,
    pub node_name: String,
}

impl NodeInfo {
    /// Make the CSINode when there is none, owned by the Node, with the
    /// migrated plugins' annotation (InitializeCSINodeWithAnnotation);
    /// true once the Node exists and owns it (until then, called again).
    pub async fn initialize(&self) -> Result<bool, ApiError> {
        let csinode = self.update(|_| false).await?;
        let owned = csinode
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Node" && o.name == self.node_name);
        Ok(owned)
    }

    /// `driver` registered: its node ID and topology on the Node, its entry
    /// in the CSINode (InstallCSIDriver).
    pub async fn install(
        &self,
        driver: &str,
        node_id: &str,
        max_volumes: i64,
        topology: &BTreeMap<String, String>,
    ) -> Result<(), ApiError> {
        let node: Option<Node> = get_cluster_object(&self.api, "Node", &self.node_name).await?;
        let annotations = node.as_ref().and_then(|n| n.metadata.annotations.as_ref());
        let current = annotations.and_then(|a| a.get(NODE_ID_ANNOTATION));
        let labels = node
            .as_ref()
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let mut metadata = serde_json::Map::new();
        if let Some(ids) = node_id_annotation(current.map(String::as_str), driver, Some(node_id)) {
            metadata.insert(
                "annotations".into(),
                serde_json::json!({ NODE_ID_ANNOTATION: ids }),
            );
        }
        let missing: BTreeMap<&String, &String> = topology
            .iter()
            .filter(|(k, v)| labels.get(*k) != Some(*v))
            .collect();
        if !missing.is_empty() {
            metadata.insert("labels".into(), serde_json::json!(missing));
        }
        if !metadata.is_empty() {
            patch_node_metadata(&self.api, &self.node_name, metadata.into()).await?;
        }
        self.update(|csinode| {
            let drivers = &csinode.spec.drivers;
            match install_driver(drivers, driver, node_id, max_volumes, topology) {
                Some(drivers) => {
                    csinode.spec.drivers = drivers;
                    true
                }
                None => false,
            }
        })
        .await
        .map(drop)
    }

    /// `driver` gone: its CSINode entry and node ID annotation removed
    /// (UninstallCSIDriver; its topology labels stay, as upstream's).
    pub async fn uninstall(&self, driver: &str) -> Result<(), ApiError> {
        self.update(|csinode| {
            let before = csinode.spec.drivers.len();
            csinode.spec.drivers.retain(|d| d.name != driver);
            csinode.spec.drivers.len() != before
        })
        .await?;
        let node: Option<Node> = get_cluster_object(&self.api, "Node", &self.node_name).await?;
        let current = node
            .as_ref()
            .and_then(|n| n.metadata.annotations.as_ref())
            .and_then(|a| a.get(NODE_ID_ANNOTATION));
        match node_id_annotation(current.map(String::as_str), driver, None) {
            None => Ok(()),
            Some(ids) => {
                let value = if ids.is_empty() {
                    serde_json::Value::Null
                } else {
                    ids.into()
                };
                let metadata = serde_json::json!({ "annotations": { NODE_ID_ANNOTATION: value } });
                patch_node_metadata(&self.api, &self.node_name, metadata)
                    .await
                    .map(drop)
            }
        }
    }

    /// Read the CSINode (made when missing), apply `edit` and the migrated
    /// plugins' annotation, and write it back when either changed.
    async fn update(&self, edit: impl Fn(&mut CSINode) -> bool) -> Result<CSINode, ApiError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let owner = self.owner().await?;
            let mut csinode =
                match get_cluster_object::<CSINode>(&self.api, "CSINode", &self.node_name).await? {
                    Some(c) => c,
                    None => match create_csinode(&self.api, &self.new_csinode(owner.clone())).await
                    {
                        Ok(c) => c,
                        Err(e) if e.is_conflict() && attempt < ATTEMPTS => continue,
                        Err(e) => return Err(e),
                    },
                };
            let annotations = csinode.metadata.annotations.get_or_insert_default();
            let annotated = annotations
                .get(MIGRATED_PLUGINS_ANNOTATION)
                .map(String::as_str)
                != Some(MIGRATED_PLUGINS);
            annotations.insert(MIGRATED_PLUGINS_ANNOTATION.into(), MIGRATED_PLUGINS.into());
            // A CSINode made before the Node was registered gets its owner
            // (upstream's ensureNodeOwnsCSINode).
            let owned = match owner {
                Some(owner)
                    if !csinode
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.uid == owner.uid) =>
                {
                    csinode
                        .metadata
                        .owner_references
                        .get_or_insert_default()
                        .push(owner);
                    true
                }
                _ => false,
            };
            let edited = edit(&mut csinode);
            if !annotated && !edited && !owned {
                return Ok(csinode);
            }
            match replace_csinode(&self.api, &csinode).await {
                Ok(c) => return Ok(c),
                Err(e) if e.is_conflict() && attempt < ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The owner reference of this node's Node, once it is registered.
    async fn owner(&self) -> Result<Option<OwnerReference>, ApiError> {
        let node: Option<Node> = get_cluster_object(&self.api, "Node", &self.node_name).await?;
        Ok(node.and_then(|n| n.metadata.uid).map(|uid| OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.node_name.clone(),
            uid,
            ..Default::default()
        }))
    }

    /// A CSINode for this node, owned by its Node when it is registered (so
    /// it goes with it).
    fn new_csinode(&self, owner: Option<OwnerReference>) -> CSINode {
        CSINode {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                owner_references: owner.map(|o| vec![o]),
                annotations: Some(BTreeMap::from([(
                    MIGRATED_PLUGINS_ANNOTATION.to_owned(),
                    MIGRATED_PLUGINS.to_owned(),
                )])),
                ..Default::default()
            },
            spec: CSINodeSpec {
                drivers: Vec::new(),
            },
            status: None,
        }
    }
}
