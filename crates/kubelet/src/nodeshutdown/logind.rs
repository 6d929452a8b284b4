//! systemd-logind over the system D-Bus (upstream's nodeshutdown/systemd):
//! its InhibitDelayMaxUSec, a delay inhibitor lock on shutdown, its
//! PrepareForShutdown signal, and the reload of its configuration through
//! systemd. The bus is `DBUS_SYSTEM_BUS_ADDRESS`, else the well-known
//! socket (a test gives its own). zbus, a pure Rust D-Bus with unix fd
//! passing, speaks it.

use std::os::fd::OwnedFd;
use std::time::Duration;

use futures::{Stream, StreamExt};

use super::ShutdownError;

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
trait Login1Manager {
    fn inhibit(&self, what: &str, who: &str, why: &str, mode: &str) -> zbus::Result<zbus::OwnedFd>;

    #[zbus(property(emits_changed_signal = "false"), name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> zbus::Result<u64>;

    #[zbus(signal)]
    fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Systemd1Manager {
    fn kill_unit(&self, name: &str, who: &str, signal: i32) -> zbus::Result<()>;
}

/// A connection to the system bus, speaking to logind.
pub struct Logind {
    conn: zbus::Connection,
    login1: Login1ManagerProxy<'static>,
}

/// A held delay inhibitor: shutdown waits (up to InhibitDelayMaxSec) until
/// it is dropped.
#[derive(Debug)]
pub struct InhibitLock {
    _fd: OwnedFd,
}

impl Logind {
    /// Connect to the system bus, or to the bus at `address`.
    pub async fn connect(address: Option<&str>) -> Result<Logind, ShutdownError> {
        let conn = match address {
            None => zbus::Connection::system().await,
            Some(address) => zbus::connection::Builder::address(address).build().await,
        }
        .map_err(ShutdownError::Bus)?;
        let login1 = Login1ManagerProxy::new(&conn)
            .await
            .map_err(ShutdownError::Bus)?;
        Ok(Logind { conn, login1 })
    }

    /// logind's InhibitDelayMaxUSec: the longest a delay lock holds a
    /// shutdown back.
    pub async fn inhibit_delay(&self) -> Result<Duration, ShutdownError> {
        self.login1
            .inhibit_delay_max_usec()
            .await
            .map(Duration::from_micros)
            .map_err(ShutdownError::ReadDelay)
    }

    /// Ask systemd to send logind SIGHUP: it reads its configuration again.
    pub async fn reload(&self) -> Result<(), ShutdownError> {
        let systemd = Systemd1ManagerProxy::new(&self.conn)
            .await
            .map_err(ShutdownError::Reload)?;
        systemd
            .kill_unit("systemd-logind.service", "all", 1)
            .await
            .map_err(ShutdownError::Reload)
    }

    /// Take a delay lock on shutdown, as upstream's kubelet names it.
    pub async fn inhibit(&self) -> Result<InhibitLock, ShutdownError> {
        let fd = self
            .login1
            .inhibit(
                "shutdown",
                "kubelet",
                "Kubelet needs time to handle node shutdown",
                "delay",
            )
            .await
            .map_err(ShutdownError::Inhibit)?;
        Ok(InhibitLock { _fd: fd.into() })
    }

    /// PrepareForShutdown's argument each time logind sends it: true as a
    /// shutdown begins, false when it was cancelled. Ends with the bus.
    pub async fn shutdown_events(
        &self,
    ) -> Result<impl Stream<Item = bool> + Unpin + use<>, ShutdownError> {
        let signals = self
            .login1
            .receive_prepare_for_shutdown()
            .await
            .map_err(ShutdownError::Monitor)?;
        Ok(signals.filter_map(|signal| async move {
            match signal.args() {
                Ok(args) => Some(args.start),
                Err(e) => {
                    tracing::error!(error = %e, "Failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected");
                    None
                }
            }
        }).boxed())
    }
}
