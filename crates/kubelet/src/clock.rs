//! Wall-clock time, the one place it is read: timestamps written into API
//! objects and compared with CRI timestamps. Intervals and timeouts use
//! tokio's clock instead, so tests can pause it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;

/// Nanoseconds since the epoch, the unit CRI timestamps use.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Now as a v1 Time (whole seconds, as the API stores it).
pub fn now_time() -> Time {
    Time(Timestamp::from_second(now_nanos() / 1_000_000_000).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Now as a v1 MicroTime (lease renewals).
pub fn now_micro() -> MicroTime {
    MicroTime(Timestamp::from_microsecond(now_nanos() / 1_000).unwrap_or(Timestamp::UNIX_EPOCH))
}
