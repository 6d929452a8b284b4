//! Go's `strconv` parsers where a setting is parsed as upstream parses it,
//! with the error text upstream prints.

/// Go's `strconv.ParseBool`.
pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {v:?}: invalid syntax")),
    }
}

/// Go's `strconv.Atoi` (a 64-bit int).
pub fn atoi(v: &str) -> Result<i64, String> {
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.Atoi: parsing {v:?}: invalid syntax"));
    }
    v.parse()
        .map_err(|_| format!("strconv.Atoi: parsing {v:?}: value out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_answer_as_gos() {
        for (v, want) in [("1", Ok(true)), ("True", Ok(true)), ("F", Ok(false))] {
            assert_eq!(parse_bool(v), want);
        }
        assert_eq!(
            parse_bool("yes"),
            Err(r#"strconv.ParseBool: parsing "yes": invalid syntax"#.into())
        );
        assert_eq!(atoi("+12"), Ok(12));
        assert_eq!(atoi("-3"), Ok(-3));
        assert_eq!(
            atoi("8x"),
            Err(r#"strconv.Atoi: parsing "8x": invalid syntax"#.into())
        );
        assert_eq!(
            atoi("99999999999999999999"),
            Err(r#"strconv.Atoi: parsing "99999999999999999999": value out of range"#.into())
        );
    }
}
