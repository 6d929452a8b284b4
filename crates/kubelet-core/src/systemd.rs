//! systemd's service protocol as upstream's kubelet speaks it (through
//! go-systemd): where `NOTIFY_SOCKET` points, and whether `WATCHDOG_USEC`
//! (with `WATCHDOG_PID`) asks this process for keep-alives, and how often.
//! The sending is `kubelet::systemd`.

use std::path::PathBuf;
use std::time::Duration;

/// The notification sent once the kubelet runs.
pub const READY: &str = "READY=1";
/// The keep-alive.
pub const WATCHDOG: &str = "WATCHDOG=1";

/// The shortest watchdog timeout upstream accepts (minimalNotifyInterval).
const MINIMAL_TIMEOUT: Duration = Duration::from_secs(1);

/// Where notifications go: a socket path, or (`@name`) an abstract socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifySocket {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

impl NotifySocket {
    /// `NOTIFY_SOCKET`'s value (none when unset or empty).
    pub fn parse(value: Option<&str>) -> Option<NotifySocket> {
        match value? {
            "" => None,
            v => Some(match v.strip_prefix('@') {
                Some(name) => NotifySocket::Abstract(name.as_bytes().to_vec()),
                None => NotifySocket::Path(PathBuf::from(v)),
            }),
        }
    }
}

/// Why the watchdog settings cannot be used (start-up stops, as upstream's
/// "create health checker").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchdogError {
    #[error("create health checker: configure watchdog: error converting WATCHDOG_USEC: {0}")]
    Usec(String),
    #[error(
        "create health checker: configure watchdog: error WATCHDOG_USEC must be a positive number"
    )]
    NotPositive,
    #[error("create health checker: configure watchdog: error converting WATCHDOG_PID: {0}")]
    Pid(String),
    #[error("create health checker: configure watchdog timeout too small: {0}")]
    TooSmall(String),
}

/// go-systemd's SdWatchdogEnabled then upstream's checks: the watchdog
/// timeout asked of process `own_pid`, none when no watchdog is asked of
/// it (unset, or `WATCHDOG_PID` names another process).
pub fn watchdog_timeout(
    usec: Option<&str>,
    pid: Option<&str>,
    own_pid: u32,
) -> Result<Option<Duration>, WatchdogError> {
    let Some(usec) = usec else {
        return Ok(None);
    };
    let usec: i64 = usec
        .parse()
        .map_err(|e: std::num::ParseIntError| WatchdogError::Usec(e.to_string()))?;
    let usec = u64::try_from(usec)
        .ok()
        .filter(|u| *u > 0)
        .ok_or(WatchdogError::NotPositive)?;
    let timeout = Duration::from_micros(usec);
    if let Some(pid) = pid {
        let pid: u32 = pid
            .parse()
            .map_err(|e: std::num::ParseIntError| WatchdogError::Pid(e.to_string()))?;
        if pid != own_pid {
            return Ok(None);
        }
    }
    if timeout <= MINIMAL_TIMEOUT {
        return Err(WatchdogError::TooSmall(
            crate::duration::format_go_duration(timeout),
        ));
    }
    Ok(Some(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_socket_paths_and_abstract_names() {
        assert_eq!(NotifySocket::parse(None), None);
        assert_eq!(NotifySocket::parse(Some("")), None);
        assert_eq!(
            NotifySocket::parse(Some("/run/systemd/notify")),
            Some(NotifySocket::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            NotifySocket::parse(Some("@/org/systemd/notify")),
            Some(NotifySocket::Abstract(b"/org/systemd/notify".to_vec()))
        );
    }

    #[test]
    fn the_watchdog_timeout_as_go_systemd_and_upstream_read_it() {
        type Case<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            Result<Option<Duration>, &'a str>,
        );
        let cases: &[Case] = &[
            (None, None, Ok(None)),
            (Some("30000000"), None, Ok(Some(Duration::from_secs(30)))),
            (
                Some("30000000"),
                Some("42"),
                Ok(Some(Duration::from_secs(30))),
            ),
            // Meant for another process.
            (Some("30000000"), Some("43"), Ok(None)),
            (
                Some("soon"),
                None,
                Err(
                    "create health checker: configure watchdog: error converting WATCHDOG_USEC: invalid digit found in string",
                ),
            ),
            (
                Some("0"),
                None,
                Err(
                    "create health checker: configure watchdog: error WATCHDOG_USEC must be a positive number",
                ),
            ),
            (
                Some("-5"),
                None,
                Err(
                    "create health checker: configure watchdog: error WATCHDOG_USEC must be a positive number",
                ),
            ),
            (
                Some("30000000"),
                Some("x"),
                Err(
                    "create health checker: configure watchdog: error converting WATCHDOG_PID: invalid digit found in string",
                ),
            ),
            (
                Some("1000000"),
                None,
                Err("create health checker: configure watchdog timeout too small: 1s"),
            ),
        ];
        for (usec, pid, want) in cases {
            let got = watchdog_timeout(*usec, *pid, 42).map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_owned), "{usec:?} {pid:?}");
        }
    }
}
