//! systemd's service protocol (upstream's go-systemd SdNotify and its
//! watchdog health checker): `READY=1` once the kubelet runs, and, when
//! systemd asks for a watchdog, `WATCHDOG=1` every half of its timeout
//! while the kubelet's health checks (those of `/healthz`) pass, so a hung
//! kubelet is restarted. A datagram on a unix socket: no library needed.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::systemd::{NotifySocket, WATCHDOG};
use tokio_util::sync::CancellationToken;

use crate::server::Health;

/// Retries of a keep-alive that could not be sent: 1 s, then 2 s
/// (upstream's backoff, 2 steps).
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_STEPS: u32 = 2;

/// Where this process's notifications go (`NOTIFY_SOCKET`), and the
/// watchdog timeout systemd asked of it.
#[derive(Clone, Debug, Default)]
pub struct Systemd {
    pub notify: Option<NotifySocket>,
    pub watchdog: Option<Duration>,
}

impl Systemd {
    /// Send `state` (`READY=1`, ...). Ok(false) when there is nowhere to
    /// send it (NOTIFY_SOCKET unset).
    pub fn notify(&self, state: &str) -> io::Result<bool> {
        let Some(socket) = &self.notify else {
            return Ok(false);
        };
        let addr = match socket {
            NotifySocket::Path(p) => SocketAddr::from_pathname(p)?,
            NotifySocket::Abstract(name) => SocketAddr::from_abstract_name(name)?,
        };
        let sock = UnixDatagram::unbound()?;
        sock.set_nonblocking(true)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
        Ok(true)
    }

    /// Keep systemd's watchdog fed while `health` has no problem, until
    /// cancelled. Nothing when no watchdog was asked for.
    pub async fn run_watchdog(self, health: Arc<dyn Health>, cancel: CancellationToken) {
        let Some(timeout) = self.watchdog else {
            tracing::info!("Systemd watchdog is not enabled");
            return;
        };
        let interval = timeout / 2;
        tracing::info!(?interval, "Starting systemd watchdog with interval");
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let problems = health.problems();
            if let Some((name, why)) = problems.first() {
                tracing::error!(
                    error = %format!("checker {name} failed: {why}"),
                    "Do not notify watchdog this iteration as the kubelet is reportedly not healthy"
                );
                continue;
            }
            self.keep_alive(&cancel).await;
        }
    }

    /// One keep-alive, tried again after 1 s and 2 s when it cannot be
    /// sent.
    async fn keep_alive(&self, cancel: &CancellationToken) {
        let mut wait = RETRY_FIRST;
        for step in 0..=RETRY_STEPS {
            match self.notify(WATCHDOG) {
                Ok(true) => return,
                Ok(false) => {
                    tracing::error!(
                        "Failed to notify watchdog: failed to notify systemd watchdog, notification not supported - (i.e. NOTIFY_SOCKET is unset)"
                    );
                    return;
                }
                Err(e) if step == RETRY_STEPS => {
                    tracing::error!(error = %e, "Failed to notify watchdog");
                }
                Err(e) => {
                    tracing::debug!(error = %e, "Failed to notify systemd watchdog, retrying")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            wait *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    struct Flaky(AtomicBool);

    impl Health for Flaky {
        fn problems(&self) -> Vec<(&'static str, String)> {
            if self.0.load(Ordering::Relaxed) {
                vec![("syncloop", "stuck".into())]
            } else {
                Vec::new()
            }
        }
    }

    fn received(sock: &UnixDatagram) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok(n) = sock.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }

    #[test]
    fn notifications_reach_a_path_or_an_abstract_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let systemd = Systemd {
            notify: Some(NotifySocket::Path(path)),
            watchdog: None,
        };
        assert!(systemd.notify("READY=1").unwrap());
        assert_eq!(received(&listener), ["READY=1"]);

        let name = format!("rkubelet-test-{}", std::process::id());
        let abstract_listener =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        abstract_listener.set_nonblocking(true).unwrap();
        let systemd = Systemd {
            notify: NotifySocket::parse(Some(&format!("@{name}"))),
            watchdog: None,
        };
        assert!(systemd.notify("WATCHDOG=1").unwrap());
        assert_eq!(received(&abstract_listener), ["WATCHDOG=1"]);

        assert!(!Systemd::default().notify("READY=1").unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_is_fed_every_half_timeout_only_while_healthy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let systemd = Systemd {
            notify: Some(NotifySocket::Path(path)),
            watchdog: Some(Duration::from_secs(10)),
        };
        let health = Arc::new(Flaky(AtomicBool::new(false)));
        let cancel = CancellationToken::new();
        let task = tokio::spawn(systemd.run_watchdog(health.clone(), cancel.clone()));
        // At once, then every 5 s.
        tokio::time::sleep(Duration::from_millis(10_100)).await;
        assert_eq!(received(&listener), ["WATCHDOG=1"; 3]);
        health.0.store(true, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(received(&listener).is_empty(), "not while unhealthy");
        health.0.store(false, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(received(&listener), ["WATCHDOG=1"]);
        cancel.cancel();
        task.await.unwrap();
    }
}
