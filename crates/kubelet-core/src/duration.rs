//! Go-style durations (`time.Duration` / `metav1.Duration`), the form every
//! duration in a KubeletConfiguration file and on the kubelet's command line
//! takes: "20s", "1m0s", "1.5h", "100ms", "1h2m3.5s".
//!
//! Unlike Go, negative durations are rejected: no kubelet setting accepts one.

use std::time::Duration;

/// The largest duration Go can represent (`math.MaxInt64` nanoseconds).
const MAX_NANOS: u128 = i64::MAX as u128;

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SECOND: u128 = 1_000_000_000;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;

/// A string that is not a valid non-negative Go duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct DurationError {
    /// The rejected input, verbatim.
    pub input: String,
    /// Why it was rejected.
    pub reason: String,
}

impl DurationError {
    fn new(input: &str, reason: impl Into<String>) -> Self {
        DurationError {
            input: input.to_owned(),
            reason: reason.into(),
        }
    }
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        // U+00B5 (micro sign) and U+03BC (Greek small letter mu), as Go accepts both.
        "us" | "\u{b5}s" | "\u{3bc}s" => NANOS_PER_MICRO,
        "ms" => NANOS_PER_MILLI,
        "s" => NANOS_PER_SECOND,
        "m" => NANOS_PER_MINUTE,
        "h" => NANOS_PER_HOUR,
        _ => return None,
    })
}

/// Parses a Go duration string such as "300ms", "1.5h" or "2h45m".
///
/// Accepts what Go's `time.ParseDuration` accepts (a sequence of decimal
/// numbers, each with an optional fraction and a unit out of "ns", "us"/"µs",
/// "ms", "s", "m", "h"; a bare "0"; an optional leading "+"), except negative
/// durations. Fractions below a nanosecond are truncated.
pub fn parse_go_duration(s: &str) -> Result<Duration, DurationError> {
    let input = s;
    let mut rest = s;
    if rest.starts_with('-') {
        return Err(DurationError::new(
            input,
            "negative durations are not allowed",
        ));
    }
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::new(input, "empty duration"));
    }

    let overflow = || DurationError::new(input, "duration out of range");
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // Integer part.
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after_int) = rest.split_at(int_len);
        let mut value: u128 = 0;
        for b in int_digits.bytes() {
            value = value * 10 + u128::from(b - b'0');
            if value > MAX_NANOS {
                return Err(overflow());
            }
        }
        rest = after_int;

        // Optional fraction; digits beyond nanosecond-of-an-hour precision are dropped.
        let mut fraction: u128 = 0;
        let mut scale: u128 = 1;
        let mut frac_len = 0;
        if let Some(after_dot) = rest.strip_prefix('.') {
            frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            let (frac_digits, after_frac) = after_dot.split_at(frac_len);
            for b in frac_digits.bytes() {
                if scale < 1_000_000_000_000_000_000 {
                    fraction = fraction * 10 + u128::from(b - b'0');
                    scale *= 10;
                }
            }
            rest = after_frac;
        }
        if int_len == 0 && frac_len == 0 {
            return Err(DurationError::new(input, "expected a number"));
        }

        // Unit: everything up to the next number.
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, after_unit) = rest.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::new(
                input,
                "missing unit (one of ns, us, ms, s, m, h)",
            ));
        }
        let Some(per_unit) = unit_nanos(unit) else {
            return Err(DurationError::new(
                input,
                format!("unknown unit {unit:?} (expected one of ns, us, ms, s, m, h)"),
            ));
        };
        rest = after_unit;

        let nanos = value
            .checked_mul(per_unit)
            .ok_or_else(overflow)?
            .checked_add(fraction * per_unit / scale)
            .ok_or_else(overflow)?;
        total = total.checked_add(nanos).ok_or_else(overflow)?;
        if total > MAX_NANOS {
            return Err(overflow());
        }
    }
    // total <= i64::MAX, so it fits in u64.
    Ok(Duration::from_nanos(total as u64))
}

/// Writes `v`'s last `prec` decimal digits as a fraction (".5", ".25"),
/// without trailing zeros and without the dot when they are all zero, and
/// returns the remaining integer part.
fn push_fraction(out: &mut String, v: u128, prec: u32) -> u128 {
    let divisor = 10u128.pow(prec);
    let frac = v % divisor;
    if frac != 0 {
        let digits = format!("{frac:0width$}", width = prec as usize);
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    v / divisor
}

/// Formats a duration the way Go's `time.Duration.String()` does: "0s",
/// "100ms", "1.5µs", "20s", "1m0s", "2h0m0s", "1h2m3.5s".
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < NANOS_PER_SECOND {
        // Below a second Go switches to the largest unit that keeps an integer part.
        let (prec, unit) = if nanos < NANOS_PER_MICRO {
            (0, "ns")
        } else if nanos < NANOS_PER_MILLI {
            (3, "\u{b5}s")
        } else {
            (6, "ms")
        };
        let mut frac = String::new();
        let int = push_fraction(&mut frac, nanos, prec);
        return format!("{int}{frac}{unit}");
    }

    let mut secs_frac = String::new();
    let total_secs = push_fraction(&mut secs_frac, nanos, 9);
    let secs = total_secs % 60;
    let total_mins = total_secs / 60;
    let mut out = String::new();
    if total_mins > 0 {
        let mins = total_mins % 60;
        let hours = total_mins / 60;
        if hours > 0 {
            out.push_str(&format!("{hours}h"));
        }
        out.push_str(&format!("{mins}m"));
    }
    out.push_str(&format!("{secs}{secs_frac}s"));
    out
}

/// `#[serde(with = "kubelet_core::duration::serde_go_duration")]` for a
/// [`Duration`] stored as a Go duration string ("1m0s").
pub mod serde_go_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_go_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(deserializer)?;
        super::parse_go_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_valid_durations() {
        let cases: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("+0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("20s", Duration::from_secs(20)),
            ("1m0s", Duration::from_secs(60)),
            ("2m", Duration::from_secs(120)),
            ("100ms", ms(100)),
            ("1.5h", Duration::from_secs(5400)),
            ("1h2m3.5s", ms(3_723_500)),
            ("10us", Duration::from_micros(10)),
            ("10\u{b5}s", Duration::from_micros(10)),
            ("10\u{3bc}s", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            (".5s", ms(500)),
            ("1.s", Duration::from_secs(1)),
            ("+5s", Duration::from_secs(5)),
            ("1.000000001s", Duration::from_nanos(1_000_000_001)),
            ("1.0000000019s", Duration::from_nanos(1_000_000_001)),
            ("2h45m", Duration::from_secs(2 * 3600 + 45 * 60)),
            ("1s1s", Duration::from_secs(2)),
            (
                "9223372036854775807ns",
                Duration::from_nanos(i64::MAX as u64),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_go_duration(input).as_ref(),
                Ok(want),
                "input {input:?}"
            );
        }
    }

    #[test]
    fn rejects_invalid_durations() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("-1s", "negative"),
            ("-0", "negative"),
            ("10", "missing unit"),
            ("1h10", "missing unit"),
            ("s", "expected a number"),
            (".s", "expected a number"),
            ("abc", "expected a number"),
            ("1x", "unknown unit"),
            ("1 s", "unknown unit"),
            ("1sec", "unknown unit"),
            ("9223372036854775808ns", "out of range"),
            ("3000000h", "out of range"),
            ("99999999999999999999999999999999999999999s", "out of range"),
        ];
        for (input, reason) in cases {
            let err = parse_go_duration(input).expect_err(input);
            let msg = err.to_string();
            assert!(msg.contains(reason), "input {input:?}: {msg}");
            assert!(
                msg.contains(&format!("{input:?}")),
                "input {input:?}: {msg}"
            );
            assert_eq!(err.input, *input);
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(999), "999ns"),
            (Duration::from_micros(1), "1\u{b5}s"),
            (Duration::from_nanos(1_500), "1.5\u{b5}s"),
            (ms(100), "100ms"),
            (Duration::from_micros(1_250), "1.25ms"),
            (Duration::from_secs(1), "1s"),
            (ms(1_500), "1.5s"),
            (Duration::from_secs(20), "20s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(7_200), "2h0m0s"),
            (ms(3_723_500), "1h2m3.5s"),
            (Duration::from_nanos(3_600_000_000_001), "1h0m0.000000001s"),
            (Duration::from_secs(100 * 3600), "100h0m0s"),
        ];
        for (d, want) in cases {
            assert_eq!(format_go_duration(*d), *want, "duration {d:?}");
        }
    }

    #[test]
    fn format_then_parse_round_trips() {
        for nanos in [
            0u64,
            1,
            999,
            1_000,
            1_500,
            123_456_789,
            60_000_000_000,
            3_723_500_000_000,
        ] {
            let d = Duration::from_nanos(nanos);
            assert_eq!(
                parse_go_duration(&format_go_duration(d)),
                Ok(d),
                "{nanos}ns"
            );
        }
    }

    #[test]
    fn serde_helpers() {
        #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
        struct Holder {
            #[serde(with = "serde_go_duration")]
            d: Duration,
        }
        let h: Holder = serde_json::from_str(r#"{"d":"1m30s"}"#).unwrap();
        assert_eq!(h.d, Duration::from_secs(90));
        assert_eq!(serde_json::to_string(&h).unwrap(), r#"{"d":"1m30s"}"#);
        let err = serde_json::from_str::<Holder>(r#"{"d":"90"}"#).unwrap_err();
        assert!(err.to_string().contains("missing unit"), "{err}");
    }
}
