//! Upstream's `$(VAR)` expansion (third_party/forked/golang/expansion), for
//! subPathExpr (and command, args and env values): `$(NAME)` becomes the
//! mapping's value, or stays as written when the mapping has none; `$$` is
//! an escaped `$`; any other `$` is kept.

/// Expand `input` with `mapping`.
pub fn expand(input: &str, mapping: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(') {
            match tail.find(')') {
                Some(j) => {
                    let name = &tail[..j];
                    match mapping(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &tail[j + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = tail;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_as_upstream() {
        let map = |k: &str| match k {
            "POD" => Some("web-1".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let cases = [
            ("logs/$(POD)", "logs/web-1"),
            ("$(POD)-$(POD)", "web-1-web-1"),
            ("$(MISSING)/x", "$(MISSING)/x"),
            ("$$(POD)", "$(POD)"),
            ("a$b", "a$b"),
            ("cost $", "cost $"),
            ("$(POD", "$(POD"),
            ("x$(EMPTY)y", "xy"),
            ("no vars", "no vars"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, map), want, "{input}");
        }
    }
}
