//! The cluster bench's CSI phase: the CSI mock driver of upstream's e2e
//! suite with its registrar (hack/control-plane.sh csi-mock-plugin) in the
//! kubelet's plugins_registry and external-provisioner on the same socket;
//! a CSIDriver without attach and a StorageClass of it. Each pod gets a
//! claim provisioned and bound before its clock starts, so the figure is
//! the kubelet's: the claim and its PV read, NodeStageVolume,
//! NodePublishVolume, then the pod's sandbox and container.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};
use kube::api::{Api, DeleteParams, PostParams};
use tokio::process::{Child, Command};

/// The mock driver's name (its default), and the bench's StorageClass.
pub const DRIVER: &str = "io.kubernetes.storage.mock";
pub const STORAGE_CLASS: &str = "rkubelet-bench-csi";
/// How long the driver may take to register, and a claim to be bound.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The driver and its provisioner, stopped with SIGTERM (the registrar
/// removes its socket) when dropped.
pub struct Mock {
    children: Vec<Child>,
}

impl Mock {
    /// Start them for a kubelet whose plugins_registry is `registry`; the
    /// socket and their logs under `dir`.
    pub fn start(
        plugin: &Path,
        provisioner: &Path,
        kubeconfig: &Path,
        registry: &Path,
        dir: &Path,
    ) -> anyhow::Result<Mock> {
        let address = format!("--csi-address={}", dir.join("csi.sock").display());
        let spawn = |binary: &Path, args: &[String], log: &str| -> anyhow::Result<Child> {
            let log = std::fs::File::create(dir.join(log))?;
            Command::new(binary)
                .args(args)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", binary.display()))
        };
        let children = vec![
            spawn(
                plugin,
                &[
                    format!("--endpoint={}", dir.join("csi.sock").display()),
                    format!("--registration-dir={}", registry.display()),
                    // No --enable-attach: the CSIDriver needs no attach, so
                    // no device in the publish context.
                ],
                "csi-mock-plugin.log",
            )?,
            spawn(
                provisioner,
                &[address, format!("--kubeconfig={}", kubeconfig.display())],
                "csi-provisioner.log",
            )?,
        ];
        Ok(Mock { children })
    }

    /// SIGTERM each, and wait a little for them to go.
    pub async fn stop(mut self) {
        for c in &self.children {
            if let Some(pid) = c.id() {
                let _ = Command::new("kill")
                    .arg("-TERM")
                    .arg(pid.to_string())
                    .status()
                    .await;
            }
        }
        for c in &mut self.children {
            let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
        }
    }
}

/// The CSIDriver (no attach) and the StorageClass, made anew (`create`) or
/// only deleted.
pub async fn objects(client: &kube::Client, label: &str, create: bool) -> anyhow::Result<()> {
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    let classes: Api<StorageClass> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let dp = DeleteParams::default();
    // The claims a run left (each in its namespace).
    let listed = claims
        .list(&kube::api::ListParams::default().labels(&format!("{label}=1")))
        .await?;
    for c in listed {
        let namespace = c.metadata.namespace.clone().unwrap_or_default();
        delete_claim(client, &namespace, &c.metadata.name.unwrap_or_default()).await?;
    }
    for r in [
        drivers.delete(DRIVER, &dp).await.map(drop),
        classes.delete(STORAGE_CLASS, &dp).await.map(drop),
    ] {
        match r {
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            r => r?,
        }
    }
    if !create {
        return Ok(());
    }
    let pp = PostParams::default();
    drivers
        .create(
            &pp,
            &serde_json::from_value(serde_json::json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": DRIVER, "labels": {label: "1"}},
                "spec": {"attachRequired": false, "volumeLifecycleModes": ["Persistent"]},
            }))?,
        )
        .await
        .context("creating the CSIDriver")?;
    classes
        .create(
            &pp,
            &serde_json::from_value(serde_json::json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS, "labels": {label: "1"}},
                "provisioner": DRIVER, "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
            }))?,
        )
        .await
        .context("creating the StorageClass")?;
    Ok(())
}

/// Wait until the node's CSINode lists the driver.
pub async fn registered(client: &kube::Client, node: &str) -> anyhow::Result<()> {
    let csinodes: Api<CSINode> = Api::all(client.clone());
    let start = Instant::now();
    loop {
        let listed = csinodes
            .get_opt(node)
            .await?
            .is_some_and(|c| c.spec.drivers.iter().any(|d| d.name == DRIVER));
        if listed {
            return Ok(());
        }
        if start.elapsed() > READY_TIMEOUT {
            bail!("the CSI mock driver not in CSINode {node} after {READY_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A claim of the bench's StorageClass, bound.
pub async fn bound_claim(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    label: &str,
) -> anyhow::Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": {label: "1"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                 "resources": {"requests": {"storage": "1Mi"}}},
    }))?;
    claims
        .create(&PostParams::default(), &claim)
        .await
        .with_context(|| format!("creating claim {name}"))?;
    let start = Instant::now();
    loop {
        let phase = claims
            .get(name)
            .await?
            .status
            .and_then(|s| s.phase)
            .unwrap_or_default();
        if phase == "Bound" {
            return Ok(());
        }
        if start.elapsed() > READY_TIMEOUT {
            bail!("claim {name} not Bound after {READY_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Delete a claim (its volume goes with it, reclaim Delete).
pub async fn delete_claim(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    match claims.delete(name, &DeleteParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        r => r
            .map(drop)
            .with_context(|| format!("deleting claim {name}")),
    }
}

/// Where a kubelet whose root directory is `root` watches for plugins.
pub fn registry(root: &Path) -> PathBuf {
    root.join("plugins_registry")
}
