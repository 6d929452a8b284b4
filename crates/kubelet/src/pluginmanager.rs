//! The plugin manager (upstream's pkg/kubelet/pluginmanager): plugins
//! register by making a socket under `<root-dir>/plugins_registry` that
//! serves the plugin registration API v1. The directory is watched
//! (inotify, and a rescan every second); each new socket is asked who it
//! is (`GetInfo`), handed to the handler of its type, and told the outcome
//! (`NotifyRegistrationStatus`); a socket that goes deregisters its plugin.
//! A registration that fails is tried again with a backoff, as upstream's
//! operation executor does.
//!
//! Handlers: CSI drivers (the volume manager's [`CsiDrivers`], and the
//! node's CSINode), device plugins (the [`DeviceManager`], as a plugin
//! registering on its own socket) and DRA drivers (the [`DraManager`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kubelet_core::csi::highest_supported_version;
use kubelet_core::devices::is_extended_resource_name;
use kubelet_core::plugins::{Action, reconcile};
use kubelet_plugin_api::csi::NodeGetInfoRequest;
use kubelet_plugin_api::deviceplugin;
use kubelet_plugin_api::pluginregistration::registration_client::RegistrationClient;
use kubelet_plugin_api::pluginregistration::{
    CSI_PLUGIN, DEVICE_PLUGIN, DRA_PLUGIN, InfoRequest, RegistrationStatus,
};
use kubelet_plugin_api::status_text;
use kubelet_tasks::Tasks;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::devicemanager::DeviceManager;
use crate::dirwatch::DirWatcher;
use crate::dra::DraManager;
use crate::volumes::csi::nodeinfo::NodeInfo;
use crate::volumes::csi::{CSI_TIMEOUT, CsiDrivers};

/// The directory plugins register in, under the root directory.
pub const PLUGINS_REGISTRY: &str = "plugins_registry";
/// Upstream's loopSleepDuration, dial timeout and GetInfo deadline.
const LOOP: Duration = Duration::from_secs(1);
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// The backoff of a failed registration (upstream's exponential backoff of
/// operations: 500 ms doubling to about 2 minutes).
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(122);

/// A plugin registered from a socket.
#[derive(Clone, Debug)]
struct Registered {
    at: i128,
    kind: String,
    name: String,
    endpoint: PathBuf,
}

pub struct PluginManager {
    pub dir: PathBuf,
    pub csi: CsiDrivers,
    pub node_info: NodeInfo,
    /// Device plugins registering here, and the tasks their streams run in.
    pub devices: DeviceManager,
    /// DRA drivers' kubelet plugins registering here.
    pub dra: DraManager,
    pub tasks: Tasks,
}

impl PluginManager {
    pub async fn run(self, cancel: CancellationToken) {
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            tracing::error!(dir = %self.dir.display(), error = %e, "cannot make the plugin registration directory");
        }
        // The CSINode, owned by the Node: tried again at each pass until the
        // Node is registered and owns it.
        let mut initialized = false;
        let mut watcher = DirWatcher::new(PLUGINS_REGISTRY);
        let mut actual: BTreeMap<PathBuf, Registered> = BTreeMap::new();
        // Failed sockets: (their timestamp, when to try again, the backoff).
        let mut failed: HashMap<PathBuf, (i128, Instant, Duration)> = HashMap::new();
        loop {
            if !initialized {
                match self.node_info.initialize().await {
                    Ok(owned) => initialized = owned,
                    Err(e) => {
                        tracing::warn!(error = %e, "initializing the CSINode failed; tried again")
                    }
                }
            }
            watcher.ensure_watch(&self.dir);
            let desired = scan(&self.dir);
            let registered: BTreeMap<PathBuf, i128> =
                actual.iter().map(|(p, r)| (p.clone(), r.at)).collect();
            for action in reconcile(&desired, &registered) {
                match action {
                    Action::Deregister(path) => {
                        if let Some(plugin) = actual.remove(&path) {
                            self.deregister(&plugin).await;
                        }
                    }
                    Action::Register(path) => {
                        let at = desired.get(&path).copied().unwrap_or_default();
                        let now = Instant::now();
                        let backoff = match failed.get(&path) {
                            Some((t, retry, _)) if *t == at && now < *retry => continue,
                            Some((t, _, backoff)) if *t == at => *backoff,
                            _ => RETRY_FIRST,
                        };
                        match self.register(&path, at).await {
                            Ok(plugin) => {
                                failed.remove(&path);
                                actual.insert(path, plugin);
                            }
                            Err(e) => {
                                tracing::warn!(socket = %path.display(), error = %e, "plugin registration failed");
                                failed.insert(
                                    path,
                                    (at, now + backoff, (backoff * 2).min(RETRY_MAX)),
                                );
                            }
                        }
                    }
                }
            }
            failed.retain(|path, _| desired.contains_key(path));
            tokio::select! {
                () = cancel.cancelled() => return,
                () = watcher.changed() => {}
                () = tokio::time::sleep(LOOP) => {}
            }
        }
    }

    /// Register the plugin at `socket` (upstream's GenerateRegisterPluginFunc).
    async fn register(&self, socket: &Path, at: i128) -> Result<Registered, String> {
        let channel = kubelet_plugin_api::unix_channel(socket.to_owned(), DIAL_TIMEOUT);
        let mut client = RegistrationClient::new(channel);
        let shown = socket.display();
        let mut request = tonic::Request::new(InfoRequest {});
        request.set_timeout(GET_INFO_TIMEOUT);
        let info = client
            .get_info(request)
            .await
            .map_err(|e| {
                format!(
                    "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {shown}, err: {}",
                    status_text(&e)
                )
            })?
            .into_inner();
        let endpoint = if info.endpoint.is_empty() {
            socket.to_owned()
        } else {
            PathBuf::from(&info.endpoint)
        };
        let outcome = if info.r#type == CSI_PLUGIN {
            self.register_csi(&info.name, &endpoint, &info.supported_versions)
                .await
        } else if info.r#type == DEVICE_PLUGIN {
            self.register_device_plugin(&info.name, &endpoint, &info.supported_versions)
                .await
        } else if info.r#type == DRA_PLUGIN {
            self.register_dra_driver(&info.name, &endpoint, &info.supported_versions)
        } else {
            Err(format!(
                "RegisterPlugin error -- no handler registered for plugin type: {} at socket {shown}",
                info.r#type
            ))
        };
        let notice = RegistrationStatus {
            plugin_registered: outcome.is_ok(),
            error: outcome.clone().err().unwrap_or_default(),
        };
        let mut request = tonic::Request::new(notice);
        request.set_timeout(DIAL_TIMEOUT);
        let plugin = Registered {
            at,
            kind: info.r#type,
            name: info.name,
            endpoint,
        };
        if let Err(e) = client.notify_registration_status(request).await {
            if outcome.is_ok() {
                self.deregister(&plugin).await;
            }
            return Err(format!(
                "RegisterPlugin error -- failed to send registration status at socket {shown}, err: {}",
                status_text(&e)
            ));
        }
        outcome?;
        tracing::info!(kind = %plugin.kind, name = %plugin.name, endpoint = %plugin.endpoint.display(), "plugin registered");
        Ok(plugin)
    }

    /// A CSI driver: its versions checked, stored, asked for its node
    /// information, and installed in the CSINode (RegisterPlugin).
    async fn register_csi(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), String> {
        let invalid = |e: String| {
            format!(
                "RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver {name} at endpoint {}: {e}",
                endpoint.display()
            )
        };
        let version =
            highest_supported_version("ValidatePlugin", name, versions).map_err(invalid)?;
        let failed =
            |e: String| format!("RegisterPlugin error -- plugin registration failed with err: {e}");
        self.csi.insert(name, endpoint, version).map_err(failed)?;
        let installed = async {
            let mut node = self.csi.node(name).map_err(|e| e.to_string())?;
            let mut request = tonic::Request::new(NodeGetInfoRequest {});
            request.set_timeout(CSI_TIMEOUT);
            let info = node
                .node_get_info(request)
                .await
                .map_err(|e| status_text(&e))?
                .into_inner();
            if info.node_id.is_empty() {
                return Err(
                    "error adding CSI driver node info: driverNodeID must not be empty".to_owned(),
                );
            }
            let topology = info
                .accessible_topology
                .map(|t| t.segments.into_iter().collect())
                .unwrap_or_default();
            self.node_info
                .install(name, &info.node_id, info.max_volumes_per_node, &topology)
                .await
                .map_err(|e| {
                    format!("error updating CSINode object with CSI driver node info: {e}")
                })
        }
        .await;
        if let Err(e) = installed {
            self.csi.remove(name, endpoint);
            return Err(failed(e));
        }
        Ok(())
    }

    /// A device plugin: its versions and name checked (upstream's
    /// ValidatePlugin), then connected as one registering on the kubelet's
    /// socket is.
    async fn register_device_plugin(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), String> {
        let invalid =
            |e: String| format!("RegisterPlugin error -- plugin validation failed with err: {e}");
        if !versions.iter().any(|v| v == deviceplugin::VERSION) {
            return Err(invalid(format!(
                "manager version, {}, is not among plugin supported versions [{}]",
                deviceplugin::VERSION,
                versions.join(" ")
            )));
        }
        if !is_extended_resource_name(name) {
            return Err(invalid(format!(
                "invalid name of device plugin socket: the ResourceName {name:?} is invalid"
            )));
        }
        self.devices
            .connect(name, endpoint, &self.tasks)
            .await
            .map_err(|e| {
                format!("RegisterPlugin error -- plugin registration failed with err: {e}")
            })
    }

    /// A DRA driver's kubelet plugin: its services checked, then handed to
    /// the DRA manager.
    fn register_dra_driver(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), String> {
        self.dra.validate(name, endpoint, versions).map_err(|e| {
            format!("RegisterPlugin error -- plugin validation failed with err: {e}")
        })?;
        self.dra
            .register(name, endpoint, versions, &self.tasks)
            .map_err(|e| {
                format!("RegisterPlugin error -- plugin registration failed with err: {e}")
            })
    }

    async fn deregister(&self, plugin: &Registered) {
        if plugin.kind == DRA_PLUGIN {
            self.dra
                .deregister(&plugin.name, &plugin.endpoint, &self.tasks);
            return;
        }
        if plugin.kind == DEVICE_PLUGIN {
            self.devices.deregister(&plugin.name, &plugin.endpoint);
            tracing::info!(name = %plugin.name, "device plugin deregistered");
            return;
        }
        if plugin.kind != CSI_PLUGIN {
            return;
        }
        self.csi.remove(&plugin.name, &plugin.endpoint);
        if let Err(e) = self.node_info.uninstall(&plugin.name).await {
            tracing::warn!(name = %plugin.name, error = %e, "removing a CSI driver from the CSINode failed");
        }
        tracing::info!(name = %plugin.name, "CSI driver deregistered");
    }
}

/// The sockets under `dir` and its subdirectories, each with its
/// modification time (nanoseconds); names starting with `.` are skipped.
fn scan(dir: &Path) -> BTreeMap<PathBuf, i128> {
    use std::os::unix::fs::FileTypeExt;
    let mut out = BTreeMap::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                dirs.push(entry.path());
            } else if meta.file_type().is_socket() {
                let at = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos() as i128);
                out.insert(entry.path(), at);
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "pluginmanager_tests.rs"]
mod tests;
