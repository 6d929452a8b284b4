//! Wall-clock formatting without a date library.

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats `t` as RFC 3339 in UTC with nanosecond precision, the way Go's
/// `time.RFC3339Nano` layout does (the format upstream writes into
/// `kubernetes.io/config.seen`): trailing zeros of the fraction are dropped,
/// and the fraction is omitted when it is zero.
///
/// `2024-02-29T13:04:05.1234Z`, `1970-01-01T00:00:00Z`.
pub fn rfc3339_nanos(t: SystemTime) -> String {
    // Whole seconds since the epoch (floored) and the nanoseconds past them.
    let (secs, nanos): (i64, u32) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let secs = -(d.as_secs() as i64);
            match d.subsec_nanos() {
                0 => (secs, 0),
                n => (secs - 1, 1_000_000_000 - n),
            }
        }
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Formats `t` (UTC, whole seconds) in Go's `20060102-150405` layout: the
/// suffix upstream's container log manager gives a rotated log.
pub fn compact_timestamp(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y%m%d-%H%M%S")
        .to_string()
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn compact_timestamps_as_go_formats_them() {
        for (secs, want) in [
            (0, "19700101-000000"),
            (1_709_211_845, "20240229-130405"),
            (1_796_428_799, "20261204-235959"),
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(compact_timestamp(t), want, "{secs}");
        }
    }

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn formats_like_go_rfc3339nano() {
        let cases: &[(SystemTime, &str)] = &[
            (UNIX_EPOCH, "1970-01-01T00:00:00Z"),
            (at(1, 500_000_000), "1970-01-01T00:00:01.5Z"),
            (at(1_709_211_845, 123_400_000), "2024-02-29T13:04:05.1234Z"),
            (at(1_709_211_845, 1), "2024-02-29T13:04:05.000000001Z"),
            (at(951_782_400, 0), "2000-02-29T00:00:00Z"),
            (
                at(4_102_444_799, 999_999_999),
                "2099-12-31T23:59:59.999999999Z",
            ),
            (UNIX_EPOCH - Duration::new(1, 0), "1969-12-31T23:59:59Z"),
            (
                UNIX_EPOCH - Duration::new(0, 250_000_000),
                "1969-12-31T23:59:59.75Z",
            ),
        ];
        for (t, want) in cases {
            assert_eq!(rfc3339_nanos(*t), *want);
        }
    }

    #[test]
    fn agrees_with_jiff() {
        // k8s-openapi's Time wraps jiff::Timestamp; its RFC 3339 output must parse back to
        // the same instant as ours, over a spread of days, seconds and nanoseconds.
        let mut secs: u64 = 0;
        while secs < 10_000_000_000 {
            let nanos = (secs % 1_000_000_007) as u32 % 1_000_000_000;
            let t = at(secs, nanos);
            let ours = rfc3339_nanos(t);
            let parsed: k8s_openapi::jiff::Timestamp = ours.parse().expect(&ours);
            assert_eq!(parsed.as_second(), secs as i64, "{ours}");
            assert_eq!(parsed.subsec_nanosecond(), nanos as i32, "{ours}");
            secs += 86_400 * 37 + 3_601;
        }
    }
}
