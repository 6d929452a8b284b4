//! For tests: Debian's dbus-daemon on a private bus, and on it a
//! stand-in for systemd-logind's `org.freedesktop.login1.Manager` (with
//! systemd's `KillUnit`, which makes it read its logind.conf drop-in
//! again) that the test drives. A real logind cannot run here: it needs
//! systemd as PID 1.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use zbus::object_server::SignalEmitter;

/// A dbus-daemon of its own, stopped when dropped.
pub struct PrivateBus {
    child: Child,
    /// Its address (`unix:path=...`), for DBUS_SYSTEM_BUS_ADDRESS.
    pub address: String,
}

impl PrivateBus {
    /// Start dbus-daemon with its configuration and socket in `dir`;
    /// returns once it listens.
    pub fn start(dir: &Path) -> std::io::Result<PrivateBus> {
        let socket = dir.join("system_bus_socket");
        let config = dir.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )?;
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile", "--print-address"])
            .stdout(Stdio::piped())
            .spawn()?;
        // The address is printed once the bus listens. It names this
        // daemon's GUID: the socket's path alone (as a system bus address
        // is) also reaches a daemon started again there.
        let mut printed = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout).read_line(&mut printed)?;
        if printed.trim().is_empty() {
            let _ = child.kill();
            return Err(std::io::Error::other("dbus-daemon printed no address"));
        }
        Ok(PrivateBus {
            child,
            address: format!("unix:path={}", socket.display()),
        })
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An inhibitor lock taken: what it asked, and our end of its pipe.
#[derive(Debug)]
pub struct Inhibitor {
    pub what: String,
    pub who: String,
    pub why: String,
    pub mode: String,
    reader: Option<std::io::PipeReader>,
}

#[derive(Debug, Default)]
struct State {
    delay_usec: u64,
    inhibitors: Vec<Inhibitor>,
    /// The drop-in KillUnit makes logind read (None: a reload changes
    /// nothing, as a logind whose systemd ignores it).
    conf_file: Option<PathBuf>,
    reloads: u32,
}

struct Login1(Arc<Mutex<State>>);

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Login1 {
    fn inhibit(
        &self,
        what: &str,
        who: &str,
        why: &str,
        mode: &str,
    ) -> zbus::fdo::Result<zbus::OwnedFd> {
        let (reader, writer) =
            std::io::pipe().map_err(|e| zbus::fdo::Error::IOError(e.to_string()))?;
        self.0.lock().inhibitors.push(Inhibitor {
            what: what.into(),
            who: who.into(),
            why: why.into(),
            mode: mode.into(),
            reader: Some(reader),
        });
        Ok(std::os::fd::OwnedFd::from(writer).into())
    }

    #[zbus(property(emits_changed_signal = "false"), name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> u64 {
        self.0.lock().delay_usec
    }

    #[zbus(signal)]
    async fn prepare_for_shutdown(emitter: &SignalEmitter<'_>, start: bool) -> zbus::Result<()>;
}

struct Systemd1(Arc<Mutex<State>>);

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Systemd1 {
    /// SIGHUP to systemd-logind.service: it reads InhibitDelayMaxSec from
    /// the drop-in.
    fn kill_unit(&self, name: &str, who: &str, signal: i32) -> zbus::fdo::Result<()> {
        let mut state = self.0.lock();
        if (name, who, signal) != ("systemd-logind.service", "all", 1) {
            return Err(zbus::fdo::Error::InvalidArgs(format!(
                "unexpected KillUnit({name}, {who}, {signal})"
            )));
        }
        state.reloads += 1;
        let Some(file) = &state.conf_file else {
            return Ok(());
        };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if let Some(secs) = text
            .lines()
            .find_map(|l| l.strip_prefix("InhibitDelayMaxSec="))
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            state.delay_usec = secs * 1_000_000;
        }
        Ok(())
    }
}

/// logind (and systemd's manager) served on a bus.
pub struct FakeLogind {
    conn: zbus::Connection,
    state: Arc<Mutex<State>>,
}

impl FakeLogind {
    /// Serve on the bus at `address`, with InhibitDelayMaxUSec `delay`;
    /// with `conf_file`, a reload reads the delay from it.
    pub async fn serve(
        address: &str,
        delay: Duration,
        conf_file: Option<PathBuf>,
    ) -> zbus::Result<FakeLogind> {
        let state = Arc::new(Mutex::new(State {
            delay_usec: u64::try_from(delay.as_micros()).unwrap_or(u64::MAX),
            conf_file,
            ..State::default()
        }));
        let conn = zbus::connection::Builder::address(address)
            .name("org.freedesktop.login1")
            .name("org.freedesktop.systemd1")
            .serve_at("/org/freedesktop/login1", Login1(state.clone()))
            .serve_at("/org/freedesktop/systemd1", Systemd1(state.clone()))
            .build()
            .await?;
        Ok(FakeLogind { conn, state })
    }

    /// Send PrepareForShutdown(`start`).
    pub async fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()> {
        let emitter = SignalEmitter::new(&self.conn, "/org/freedesktop/login1")?;
        Login1::prepare_for_shutdown(&emitter, start).await
    }

    /// The inhibitors taken so far: (what, who, why, mode).
    pub fn inhibitors(&self) -> Vec<(String, String, String, String)> {
        self.state
            .lock()
            .inhibitors
            .iter()
            .map(|i| (i.what.clone(), i.who.clone(), i.why.clone(), i.mode.clone()))
            .collect()
    }

    /// How many inhibitor locks have been taken.
    pub fn locks_taken(&self) -> usize {
        self.state.lock().inhibitors.len()
    }

    /// Wait until the `index`th inhibitor lock is released (its holder
    /// closed its end).
    pub async fn released(&self, index: usize) -> std::io::Result<()> {
        let reader = self.state.lock().inhibitors[index].reader.take();
        let Some(mut reader) = reader else {
            return Ok(());
        };
        kubelet_tasks::blocking(move || {
            let mut buf = [0u8; 1];
            // Nothing is ever written: EOF is the last writer gone.
            while reader.read(&mut buf)? != 0 {}
            Ok(())
        })
        .await
    }

    /// InhibitDelayMaxUSec now, and how many reloads were asked.
    pub fn delay(&self) -> (Duration, u32) {
        let state = self.state.lock();
        (Duration::from_micros(state.delay_usec), state.reloads)
    }
}
