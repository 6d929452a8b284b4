//! Image references as the docker reference grammar (distribution's
//! `reference` package, which upstream's image manager parses with) reads
//! them: `[domain[:port]/]path[:tag][@digest]`, normalized to `docker.io`
//! and `library/` where no registry is named, with its error messages.

use std::sync::LazyLock;

use regex::Regex;

const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// distribution's ReferenceRegexp, anchored: the name, then tag and digest.
static REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    let alphanumeric = "[a-z0-9]+";
    let separator = "(?:[._]|__|[-]+)";
    let path_component = format!("{alphanumeric}(?:{separator}{alphanumeric})*");
    let domain_component = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
    let host = format!(r"(?:{domain_component}(?:\.{domain_component})*|\[[a-fA-F0-9:]+\])");
    let domain = format!("{host}(?::[0-9]+)?");
    let name = format!("(?:{domain}/)?{path_component}(?:/{path_component})*");
    // Go's \w is ASCII; the regex crate's is Unicode, whose 128 bounded
    // copies would also cost megabytes for the life of the process.
    let tag = r"(?-u:\w)(?-u:[\w.-]){0,127}";
    let digest = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    Regex::new(&format!("^({name})(?::({tag}))?(?:@({digest}))?$")).expect("a valid pattern")
});

static IDENTIFIER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^[a-f0-9]{64}$").expect("a valid pattern"));

/// A parsed, normalized image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `docker.io/library/busybox`: the registry and the repository.
    pub name: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

/// An image reference distribution's parser refuses, in its words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("invalid repository name ({0}), cannot specify 64-byte hexadecimal strings")]
    Identifier(String),
    #[error("invalid reference format: repository name ({0}) must be lowercase")]
    UppercaseRemote(String),
    #[error("repository name must have at least one component")]
    Empty,
    #[error("invalid reference format: repository name must be lowercase")]
    Uppercase,
    #[error("invalid reference format")]
    Format,
    #[error("repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters")]
    TooLong,
}

/// Parse `s` as distribution's ParseNormalizedNamed does, with its errors.
pub fn parse_normalized(s: &str) -> Result<Reference, ReferenceError> {
    if IDENTIFIER.is_match(s) {
        return Err(ReferenceError::Identifier(s.to_owned()));
    }
    let (domain, remainder) = split_domain(s);
    let remote = remainder
        .split_once(':')
        .map_or(remainder.as_str(), |(r, _)| r);
    if remote.to_lowercase() != remote {
        return Err(ReferenceError::UppercaseRemote(remote.to_owned()));
    }
    parse(&format!("{domain}/{remainder}"))
}

/// Parse `s` as written, not normalized (distribution's Parse), with its
/// errors: `name` is `s` without its tag and digest.
pub fn parse(s: &str) -> Result<Reference, ReferenceError> {
    if s.is_empty() {
        return Err(ReferenceError::Empty);
    }
    let Some(m) = REFERENCE.captures(s) else {
        return Err(if REFERENCE.is_match(&s.to_lowercase()) {
            ReferenceError::Uppercase
        } else {
            ReferenceError::Format
        });
    };
    let name = m[1].to_owned();
    if name.len() > NAME_TOTAL_LENGTH_MAX {
        return Err(ReferenceError::TooLong);
    }
    Ok(Reference {
        name,
        tag: m.get(2).map(|t| t.as_str().to_owned()),
        digest: m.get(3).map(|d| d.as_str().to_owned()),
    })
}

/// distribution's splitDockerDomain: the registry, and the rest.
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut remainder) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (first.to_owned(), rest.to_owned())
        }
        _ => (DEFAULT_DOMAIN.to_owned(), name.to_owned()),
    };
    if domain == LEGACY_DEFAULT_DOMAIN {
        domain = DEFAULT_DOMAIN.to_owned();
    }
    if domain == DEFAULT_DOMAIN && !remainder.contains('/') {
        remainder = format!("library/{remainder}");
    }
    (domain, remainder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_fail_as_distributions() {
        let ok = |name: &str, tag: Option<&str>, digest: Option<&str>| {
            Ok(Reference {
                name: name.into(),
                tag: tag.map(Into::into),
                digest: digest.map(Into::into),
            })
        };
        let sha = format!("sha256:{}", "a".repeat(64));
        // The longest tag the grammar takes, and one character more.
        let (longest, too_long) = (
            format!("v{}", "1".repeat(127)),
            format!("v{}", "1".repeat(128)),
        );
        let cases: Vec<(String, Result<Reference, String>)> = vec![
            (
                "busybox".into(),
                ok("docker.io/library/busybox", None, None),
            ),
            (
                "busybox:1.37".into(),
                ok("docker.io/library/busybox", Some("1.37"), None),
            ),
            ("me/app:v1".into(), ok("docker.io/me/app", Some("v1"), None)),
            (
                "index.docker.io/me/app".into(),
                ok("docker.io/me/app", None, None),
            ),
            (
                "registry.test:5000/team/app:2".into(),
                ok("registry.test:5000/team/app", Some("2"), None),
            ),
            (
                format!("localhost/app@{sha}"),
                ok("localhost/app", None, Some(&sha)),
            ),
            (
                "Busybox".into(),
                Err(
                    "invalid reference format: repository name (library/Busybox) must be lowercase"
                        .into(),
                ),
            ),
            ("busy box".into(), Err("invalid reference format".into())),
            ("busybox:".into(), Err("invalid reference format".into())),
            // A tag's word characters are ASCII, as Go's \w.
            ("busybox:vé".into(), Err("invalid reference format".into())),
            (
                format!("busybox:{longest}"),
                ok("docker.io/library/busybox", Some(&longest), None),
            ),
            (
                format!("busybox:{too_long}"),
                Err("invalid reference format".into()),
            ),
            ("-busybox".into(), Err("invalid reference format".into())),
            (
                "a".repeat(64),
                Err(format!(
                    "invalid repository name ({}), cannot specify 64-byte hexadecimal strings",
                    "a".repeat(64)
                )),
            ),
            (
                format!("r.test/{}", "a".repeat(250)),
                Err("repository name must not be more than 255 characters".into()),
            ),
        ];
        for (image, want) in cases {
            assert_eq!(
                parse_normalized(&image).map_err(|e| e.to_string()),
                want,
                "{image}"
            );
        }
    }

    #[test]
    fn references_parse_as_written_without_normalizing() {
        let sha = format!("sha256:{}", "b".repeat(64));
        let cases: Vec<(String, Result<&str, &str>)> = vec![
            ("busybox:1.37".into(), Ok("busybox")),
            (
                "docker.io/testing/test:latest".into(),
                Ok("docker.io/testing/test"),
            ),
            ("r.test:5000/a/b".into(), Ok("r.test:5000/a/b")),
            (format!("r.test/a:v1@{sha}"), Ok("r.test/a")),
            (
                "".into(),
                Err("repository name must have at least one component"),
            ),
            (
                "Busybox".into(),
                Err("invalid reference format: repository name must be lowercase"),
            ),
            ("a b".into(), Err("invalid reference format")),
        ];
        for (image, want) in cases {
            let got = parse(&image).map(|r| r.name).map_err(|e| e.to_string());
            assert_eq!(
                got,
                want.map(str::to_owned).map_err(str::to_owned),
                "{image}"
            );
        }
    }
}
