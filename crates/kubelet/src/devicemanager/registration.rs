//! The device plugin registration service (upstream's
//! devicemanager/plugin/v1beta1 server): a plugin calls `Register` on
//! `<root-dir>/device-plugins/kubelet.sock` with its API version, resource
//! name and socket (a name in that directory); the kubelet checks them,
//! dials the plugin back, asks its options, and keeps its `ListAndWatch`
//! stream open in a task of its own until the stream ends.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kubelet_core::devices::{checkpoint, is_extended_resource_name};
use kubelet_plugin_api::deviceplugin as api;
use kubelet_plugin_api::deviceplugin::device_plugin_client::DevicePluginClient;
use kubelet_plugin_api::deviceplugin::registration_server::{Registration, RegistrationServer};
use kubelet_plugin_api::{status_text, unix_channel};
use kubelet_tasks::Tasks;
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::{DeviceManager, Plugin, SOCKET};

/// Upstream's dial timeout, which bounds GetDevicePluginOptions too.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Make the directory (0750), remove the sockets left in it but keep the
/// checkpoint (upstream's CleanupPluginDirectory: plugins see their socket
/// go, and register again), and listen on the kubelet's socket.
pub fn listen(dir: &Path) -> io::Result<UnixListener> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == checkpoint::FILE {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_socket() => {
                if let Err(e) = std::fs::remove_file(entry.path()) {
                    tracing::error!(path = %entry.path().display(), error = %e, "Failed to remove file");
                }
            }
            _ => {}
        }
    }
    UnixListener::bind(dir.join(SOCKET))
}

struct Registrar {
    manager: DeviceManager,
    tasks: Tasks,
}

/// A plugin's refusal, as a Go error from the handler reaches it (gRPC's
/// Unknown with its text).
fn refuse(resource: &str, message: String) -> Status {
    tracing::error!(resource, error = %message, "Bad registration request from device plugin");
    Status::unknown(message)
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn register(
        &self,
        request: Request<api::RegisterRequest>,
    ) -> Result<Response<api::Empty>, Status> {
        let r = request.into_inner();
        let resource = r.resource_name.as_str();
        tracing::info!(
            resource,
            "Got registration request from device plugin with resource"
        );
        self.manager
            .inner
            .metrics
            .device_plugin_registrations
            .inc(&[resource]);
        if r.version != api::VERSION {
            return Err(refuse(
                resource,
                format!(
                    "requested API version {:?} is not supported by kubelet. Supported version is [{:?}]",
                    r.version,
                    api::VERSION
                ),
            ));
        }
        if !is_extended_resource_name(resource) {
            return Err(refuse(
                resource,
                format!("the ResourceName {resource:?} is invalid"),
            ));
        }
        // A name in the directory, nothing that leads out of it (upstream
        // joins whatever it is given).
        if r.endpoint.is_empty() || r.endpoint.contains('/') || r.endpoint == ".." {
            return Err(refuse(
                resource,
                format!(
                    "the endpoint {:?} is not a socket name in the device plugin directory",
                    r.endpoint
                ),
            ));
        }
        let socket = self.manager.dir().join(&r.endpoint);
        self.manager
            .connect(resource, &socket, &self.tasks)
            .await
            .map_err(|message| refuse(resource, message))?;
        Ok(Response::new(api::Empty {}))
    }
}

impl DeviceManager {
    /// Dial the plugin for `resource` at `socket`, ask its options, and
    /// keep its stream in a task of `tasks` (upstream's connectClient):
    /// what registration does, on the kubelet's socket or through the
    /// plugin watcher.
    pub async fn connect(
        &self,
        resource: &str,
        socket: &Path,
        tasks: &Tasks,
    ) -> Result<(), String> {
        let plugin = dial(socket).await?;
        self.connected(resource, plugin.clone())?;
        tracing::info!(resource, socket = %socket.display(), "Connected to new client");
        let manager = self.clone();
        let name = resource.to_owned();
        tasks.spawn(
            tracing::info_span!("device_plugin", resource = %name),
            move |token| run(manager, name, plugin, token),
        );
        Ok(())
    }
}

/// Dial the plugin at `socket` and ask its options.
async fn dial(socket: &Path) -> Result<Plugin, String> {
    let dialled = tokio::time::timeout(DIAL_TIMEOUT, UnixStream::connect(socket)).await;
    match dialled {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("failed to dial device plugin: {e}")),
        Err(_) => return Err("failed to dial device plugin: context deadline exceeded".into()),
    }
    let mut client = DevicePluginClient::new(unix_channel(socket.to_path_buf(), DIAL_TIMEOUT));
    let options = tokio::time::timeout(
        DIAL_TIMEOUT,
        client.get_device_plugin_options(api::Empty {}),
    )
    .await
    .unwrap_or_else(|_| Err(Status::deadline_exceeded("context deadline exceeded")))
    .map_err(|s| format!("failed to get device plugin options: {}", status_text(&s)))?
    .into_inner();
    Ok(Plugin {
        socket: PathBuf::from(socket),
        client,
        options,
        stop: CancellationToken::new(),
    })
}

/// Keep the plugin's ListAndWatch stream until it ends or the plugin is
/// deregistered (upstream's client.Run), then let the manager know it is
/// gone. A kubelet stopping leaves the plugin as it is.
async fn run(manager: DeviceManager, resource: String, plugin: Plugin, token: CancellationToken) {
    let mut client = plugin.client.clone();
    let opened = tokio::select! {
        _ = token.cancelled() => return,
        () = plugin.stop.cancelled() => Err(Status::cancelled("deregistered")),
        r = client.list_and_watch(api::Empty {}) => r,
    };
    match opened {
        Err(e) => {
            tracing::error!(error = %status_text(&e), "ListAndWatch ended unexpectedly for device plugin");
        }
        Ok(stream) => {
            let mut stream = stream.into_inner();
            loop {
                let next = tokio::select! {
                    _ = token.cancelled() => return,
                    () = plugin.stop.cancelled() => Err(Status::cancelled("deregistered")),
                    m = stream.message() => m,
                };
                match next {
                    Ok(Some(response)) => {
                        tracing::debug!(
                            capacity = response.devices.len(),
                            "State pushed for device plugin"
                        );
                        manager.update_devices(&resource, response.devices);
                    }
                    Ok(None) => {
                        tracing::error!("ListAndWatch ended unexpectedly for device plugin");
                        break;
                    }
                    Err(e) => {
                        tracing::error!(error = %status_text(&e), "ListAndWatch ended unexpectedly for device plugin");
                        break;
                    }
                }
            }
        }
    }
    manager.disconnected(&resource, &plugin.socket);
    tracing::info!(socket = %plugin.socket.display(), "Device plugin disconnected");
}

/// Serve the registration service on `listener` until `token` is
/// cancelled; each plugin's stream runs in a task of `tasks`.
pub async fn serve(
    listener: UnixListener,
    manager: DeviceManager,
    tasks: Tasks,
    token: CancellationToken,
) {
    let registrar = Registrar { manager, tasks };
    let served = tonic::transport::Server::builder()
        .add_service(RegistrationServer::new(registrar))
        .serve_with_incoming_shutdown(
            kubelet_plugin_api::uds::incoming(listener),
            token.cancelled(),
        )
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "Error while serving device plugin registration grpc server");
    }
}
