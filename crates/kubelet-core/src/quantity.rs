//! A small, exact parser for Kubernetes resource quantities
//! (`resource.Quantity`): `500m`, `1.5`, `128Mi`, `1G`, `1e3`, ...
//!
//! Arithmetic is done on integers (a decimal mantissa and a power of ten or
//! two), never on floats, and results are rounded up the way upstream's
//! `Quantity.MilliValue()` / `Quantity.Value()` round: `0.1m` of CPU is 1
//! milli-CPU, `0.5` bytes is 1 byte.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Why a quantity string could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("quantity {input:?}: {message}")]
pub struct QuantityError {
    pub input: String,
    pub message: String,
}

/// The CPU amount of `q` in milli-CPUs (`"1"` → 1000, `"250m"` → 250), rounded up.
pub fn parse_cpu_millis(q: &Quantity) -> Result<i64, QuantityError> {
    parse_str(&q.0)?.scaled(1000).map_err(|m| err(&q.0, m))
}

/// The CPU amount of `q` in milli-CPUs rounded to the nearest (`1.2m` → 1,
/// `1.5m` → 2), as upstream's parseResourceList rounds reservations.
pub fn parse_cpu_millis_nearest(q: &Quantity) -> Result<i64, QuantityError> {
    let micros = parse_str(&q.0)?
        .scaled(1_000_000)
        .map_err(|m| err(&q.0, m))?;
    Ok(micros.saturating_add(500).div_euclid(1000))
}

/// The amount of `q` as a plain integer (bytes for memory), rounded up.
pub fn parse_bytes(q: &Quantity) -> Result<i64, QuantityError> {
    parse_str(&q.0)?.scaled(1).map_err(|m| err(&q.0, m))
}

fn err(input: &str, message: impl Into<String>) -> QuantityError {
    QuantityError {
        input: input.to_owned(),
        message: message.into(),
    }
}

/// A parsed quantity: `sign * digits / 10^frac_digits * base^exp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    /// All digits of the number, the decimal point removed.
    digits: i128,
    /// How many of `digits` were after the decimal point.
    frac_digits: u32,
    /// 10 for decimal SI and exponents, 2 for binary SI.
    base: i128,
    exp: i32,
}

/// Upper bound on the mantissa; keeps `mantissa * 1000` well inside `i128`.
const LIMIT: i128 = 1 << 100;

impl Parsed {
    /// `self * factor`, rounded up (away from zero), as an i64.
    ///
    /// Exact for every quantity that fits: the value is `num * base^mul / 10^div`, computed as
    /// one multiplication followed by repeated ceiling divisions by ten (nested ceilings of
    /// integer divisions equal the ceiling of the whole division).
    fn scaled(self, factor: i128) -> Result<i64, &'static str> {
        const TOO_BIG: &str = "value is too large";
        if self.digits == 0 {
            return Ok(0);
        }
        let mut num = self.digits.checked_mul(factor).ok_or(TOO_BIG)?;
        let frac = i64::from(self.frac_digits);
        let (mul, div) = if self.base == 10 {
            let e = i64::from(self.exp) - frac;
            if e >= 0 { (e, 0) } else { (0, -e) }
        } else {
            (i64::from(self.exp), frac)
        };
        for _ in 0..mul {
            num = num.checked_mul(self.base).ok_or(TOO_BIG)?;
            if div == 0 && num > i128::from(i64::MAX) {
                return Err(TOO_BIG);
            }
        }
        for _ in 0..div {
            if num <= 1 {
                break;
            }
            num = num / 10 + i128::from(num % 10 != 0);
        }
        let magnitude = i64::try_from(num).map_err(|_| TOO_BIG)?;
        Ok(if self.negative { -magnitude } else { magnitude })
    }
}

fn parse_str(s: &str) -> Result<Parsed, QuantityError> {
    if s.is_empty() {
        return Err(err(s, "empty quantity"));
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut negative = false;
    if bytes[0] == b'+' || bytes[0] == b'-' {
        negative = bytes[0] == b'-';
        i = 1;
    }
    let mut digits: i128 = 0;
    let mut frac_digits = 0u32;
    let mut seen_digit = false;
    let mut seen_point = false;
    while i < bytes.len() {
        match bytes[i] {
            b'0'..=b'9' => {
                seen_digit = true;
                // Leading zeros cost nothing; more significant digits than this are nonsense.
                if digits > LIMIT {
                    return Err(err(s, "too many digits"));
                }
                digits = digits * 10 + i128::from(bytes[i] - b'0');
                if seen_point {
                    frac_digits += 1;
                }
            }
            b'.' if !seen_point => seen_point = true,
            _ => break,
        }
        i += 1;
    }
    if !seen_digit {
        return Err(err(s, "expected a number"));
    }
    let (base, exp) = match &s[i..] {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (2, 10),
        "Mi" => (2, 20),
        "Gi" => (2, 30),
        "Ti" => (2, 40),
        "Pi" => (2, 50),
        "Ei" => (2, 60),
        suffix => {
            let rest = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or_else(|| err(s, format!("unknown suffix {suffix:?}")))?;
            let unsigned = rest
                .strip_prefix('+')
                .or_else(|| rest.strip_prefix('-'))
                .unwrap_or(rest);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(s, format!("bad exponent {suffix:?}")));
            }
            let exp: i32 = rest
                .parse()
                .map_err(|_| err(s, format!("exponent {suffix:?} out of range")))?;
            (10, exp)
        }
    };
    Ok(Parsed {
        negative,
        digits,
        frac_digits,
        base,
        exp,
    })
}

/// An amount of bytes as upstream's Quantity prints a BinarySI value:
/// with the largest of Ki, Mi, Gi, Ti, Pi, Ei that divides it.
pub fn format_binary_si(n: i64) -> String {
    format_with_suffixes(n, 1024, ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
}

/// `n` with the largest of the suffixes (each `base` times the one
/// before) that divides it.
fn format_with_suffixes(n: i64, base: i64, suffixes: [&str; 6]) -> String {
    if n == 0 {
        return "0".to_owned();
    }
    let (mut v, mut unit) = (n, None);
    for s in suffixes {
        if v % base != 0 {
            break;
        }
        v /= base;
        unit = Some(s);
    }
    format!("{v}{}", unit.unwrap_or(""))
}

/// A count as upstream's Quantity prints a DecimalSI value: with the
/// largest of k, M, G, T, P, E that divides it.
pub fn format_decimal_si(n: i64) -> String {
    format_with_suffixes(n, 1000, ["k", "M", "G", "T", "P", "E"])
}

/// Milli-CPUs as upstream prints a DecimalSI cpu amount: `2`, `1500m`.
pub fn format_milli(m: i64) -> String {
    if m % 1000 == 0 {
        (m / 1000).to_string()
    } else {
        format!("{m}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_owned())
    }

    #[test]
    fn cpu_millis() {
        let cases: &[(&str, i64)] = &[
            ("1", 1000),
            ("0", 0),
            ("250m", 250),
            ("0.5", 500),
            (".5", 500),
            ("1.", 1000),
            ("1.5", 1500),
            ("+2", 2000),
            ("-1", -1000),
            ("0.1m", 1),
            ("100u", 1),
            ("1k", 1_000_000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1e-3", 1),
            ("15e-1", 1500),
            ("2e+1", 20_000),
            ("1Ki", 1_024_000),
            ("0.0001", 1),
        ];
        for (input, want) in cases {
            assert_eq!(parse_cpu_millis(&q(input)), Ok(*want), "{input}");
        }
    }

    #[test]
    fn bytes() {
        let cases: &[(&str, i64)] = &[
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("129M", 129_000_000),
            ("123Mi", 123 * 1024 * 1024),
            ("1.5Gi", 1536 * 1024 * 1024),
            ("1Ki", 1024),
            ("1k", 1000),
            ("1Ti", 1 << 40),
            ("1Pi", 1 << 50),
            ("1Ei", 1 << 60),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("1G", 1_000_000_000),
            ("500m", 1),
            ("1m", 1),
            ("0.5", 1),
            ("1n", 1),
            ("0e5", 0),
            ("1e-200", 1),
        ];
        for (input, want) in cases {
            assert_eq!(parse_bytes(&q(input)), Ok(*want), "{input}");
        }
    }

    #[test]
    fn rejects() {
        const TOO_LARGE: &str = "value is too large";
        for (input, message) in [
            ("", "empty quantity"),
            ("abc", "expected a number"),
            ("1K", "unknown suffix \"K\""),
            ("1kb", "unknown suffix \"kb\""),
            ("1 Mi", "unknown suffix \" Mi\""),
            ("1..5", "unknown suffix \".5\""),
            (".", "expected a number"),
            ("-", "expected a number"),
            ("1e", "bad exponent \"e\""),
            ("1e+", "bad exponent \"e+\""),
            ("1ee3", "bad exponent \"ee3\""),
            ("1Mi3", "unknown suffix \"Mi3\""),
            ("Mi", "expected a number"),
            ("1e1000", TOO_LARGE),
            ("1e99999999999", "exponent \"e99999999999\" out of range"),
            // "10E" and "16Ei" do not fit in an i64 of bytes; "9.3E" neither.
            ("10E", TOO_LARGE),
            ("16Ei", TOO_LARGE),
            ("9.3E", TOO_LARGE),
        ] {
            assert_eq!(
                parse_bytes(&q(input)),
                Err(err(input, message)),
                "{input:?} should fail"
            );
        }
        let e = parse_cpu_millis(&q("2x")).unwrap_err();
        assert_eq!(e.input, "2x");
        assert!(e.to_string().contains("unknown suffix"), "{e}");
        // Overflow once scaled to millis.
        let e = parse_cpu_millis(&q("10P")).unwrap_err();
        assert_eq!(e.to_string(), "quantity \"10P\": value is too large");
        assert_eq!(parse_bytes(&q("8E")), Ok(8_000_000_000_000_000_000));
    }

    #[test]
    fn canonical_forms() {
        for (n, text) in [
            (0, "0"),
            (512, "512"),
            (1024, "1Ki"),
            (3 << 20, "3Mi"),
            ((4 << 30) - (100 << 20), "3996Mi"),
            (96_636_764_161, "96636764161"),
            (-2048, "-2Ki"),
        ] {
            assert_eq!(format_binary_si(n), text, "{n}");
        }
        for (n, text) in [
            (0, "0"),
            (999, "999"),
            (3000, "3k"),
            (5_000_000, "5M"),
            (5_001_000, "5001k"),
        ] {
            assert_eq!(format_decimal_si(n), text, "{n}");
        }
        assert_eq!(format_milli(2000), "2");
        assert_eq!(format_milli(1500), "1500m");
    }

    #[test]
    fn reservations_round_to_the_nearest_milli() {
        for (text, milli) in [("1.2m", 1), ("1.5m", 2), ("250m", 250), ("1", 1000)] {
            assert_eq!(
                parse_cpu_millis_nearest(&Quantity(text.into())).unwrap(),
                milli,
                "{text}"
            );
        }
    }
}
