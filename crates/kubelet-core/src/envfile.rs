//! Environment files (`env[].valueFrom.fileKeyRef`, the EnvFiles feature):
//! upstream's strict parser (pkg/kubelet/util/env ParseEnv), a subset of
//! POSIX shell syntax in which every value is in single quotes:
//!
//! - `VAR='value'`: the quoted text as it is (no escapes, no expansion),
//!   newlines within the quotes kept;
//! - leading blanks of a line ignored, blank and `#` lines skipped, a `#`
//!   comment after the closing quote allowed;
//! - a blank before `=` is an error; a blank after it gives the empty value
//!   (`VAR= 'x'` is empty, as in a shell).
//!
//! Lines are read as Go's bufio.Scanner reads them: a line longer than
//! 64 KiB is an error.

use std::io::BufRead;

/// Go's bufio.MaxScanTokenSize: the longest line the parser reads.
pub const MAX_LINE: usize = 64 * 1024;

/// Why an environment file could not be read; the messages are upstream's.
#[derive(Debug, thiserror::Error)]
pub enum EnvFileError {
    #[error("invalid environment variable format at line {0}: missing '='")]
    MissingEquals(usize),
    #[error("invalid environment variable format at line {0}: empty variable name")]
    EmptyName(usize),
    #[error(
        "invalid environment variable format at line {0}: whitespace before '=' is not allowed"
    )]
    BlankBeforeEquals(usize),
    #[error(
        "invalid environment variable format at line {0}: value must be enclosed in single quotes"
    )]
    Unquoted(usize),
    #[error(
        "invalid environment variable format at line {0}: unexpected content after closing quote"
    )]
    AfterQuote(usize),
    #[error("invalid environment variable format starting at line {0}: unclosed single quote")]
    Unclosed(usize),
    #[error("error reading environment variable file: bufio.Scanner: token too long")]
    TooLong,
    #[error("error reading environment variable file: {0}")]
    Read(#[from] std::io::Error),
}

/// Lines as bufio.Scanner's ScanLines gives them: without the newline (and
/// a carriage return before it), at most [`MAX_LINE`] long.
struct Lines<R> {
    input: R,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    fn next(&mut self) -> Result<Option<String>, EnvFileError> {
        self.buf.clear();
        let input: &mut R = &mut self.input;
        let read =
            std::io::Read::take(input, MAX_LINE as u64 + 1).read_until(b'\n', &mut self.buf)?;
        if read == 0 {
            return Ok(None);
        }
        let ended = self.buf.last() == Some(&b'\n');
        if ended {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        }
        if !ended && read > MAX_LINE {
            return Err(EnvFileError::TooLong);
        }
        Ok(Some(String::from_utf8_lossy(&self.buf).into_owned()))
    }
}

/// The value of `key` in the file `input` reads; empty when the file does
/// not set it (upstream makes no difference between the two).
pub fn parse_env(input: impl BufRead, key: &str) -> Result<String, EnvFileError> {
    let mut lines = Lines {
        input,
        buf: Vec::new(),
    };
    let mut number = 0;
    while let Some(raw) = lines.next()? {
        number += 1;
        let line = raw.trim_start_matches([' ', '\t']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name_part, value_part) = line
            .split_once('=')
            .ok_or(EnvFileError::MissingEquals(number))?;
        let name = name_part.trim_end_matches([' ', '\t']);
        if name.is_empty() {
            return Err(EnvFileError::EmptyName(number));
        }
        if name != name_part {
            return Err(EnvFileError::BlankBeforeEquals(number));
        }
        let value = value_part.trim_start_matches([' ', '\t']);
        if value != value_part {
            // `KEY= 'x'`: KEY is empty, as in a shell.
            if name == key {
                return Ok(String::new());
            }
            continue;
        }
        let Some(mut rest) = value.strip_prefix('\'').map(str::to_owned) else {
            return Err(EnvFileError::Unquoted(number));
        };
        let start = number;
        let mut text = String::new();
        loop {
            if let Some(close) = rest.find('\'') {
                text.push_str(&rest[..close]);
                let after = rest[close + 1..].trim_start_matches([' ', '\t']);
                if !after.is_empty() && !after.starts_with('#') {
                    return Err(EnvFileError::AfterQuote(number));
                }
                if name == key {
                    return Ok(text);
                }
                break;
            }
            text.push_str(&rest);
            text.push('\n');
            rest = lines.next()?.ok_or(EnvFileError::Unclosed(start))?;
            number += 1;
        }
    }
    Ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, key: &str) -> Result<String, String> {
        parse_env(text.as_bytes(), key).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_as_upstream() {
        let cases: &[(&str, &str, Result<&str, &str>)] = &[
            ("A='1'\nB='2'\n", "B", Ok("2")),
            ("  A='x y # z'  # comment\n", "A", Ok("x y # z")),
            ("# c\n\n\t\nA='1'", "A", Ok("1")),
            ("A='line 1\nline 2'\nB='b'", "A", Ok("line 1\nline 2")),
            ("A='line 1\nline 2'\nB='b'", "B", Ok("b")),
            ("A=''\n", "A", Ok("")),
            ("A= 'x'\n", "A", Ok("")),
            ("A= 'x'\nB='y'\n", "B", Ok("y")),
            ("A='1'\n", "Z", Ok("")),
            ("A='$(B) \\n \"q\"'", "A", Ok("$(B) \\n \"q\"")),
            ("A='1'\r\n", "A", Ok("1")),
            (
                "A\n",
                "A",
                Err("invalid environment variable format at line 1: missing '='"),
            ),
            (
                "='1'\n",
                "A",
                Err("invalid environment variable format at line 1: empty variable name"),
            ),
            (
                "A ='1'\n",
                "A",
                Err(
                    "invalid environment variable format at line 1: whitespace before '=' is not allowed",
                ),
            ),
            ("B='1'\nA=1\n", "B", Ok("1")),
            (
                "A=1\n",
                "A",
                Err(
                    "invalid environment variable format at line 1: value must be enclosed in single quotes",
                ),
            ),
            (
                "A='1' x\n",
                "A",
                Err(
                    "invalid environment variable format at line 1: unexpected content after closing quote",
                ),
            ),
            (
                "\nA='1\n2\n",
                "A",
                Err(
                    "invalid environment variable format starting at line 2: unclosed single quote",
                ),
            ),
        ];
        for (text, key, want) in cases {
            assert_eq!(
                parse(text, key),
                want.map(str::to_owned).map_err(str::to_owned),
                "{text:?} {key}"
            );
        }
    }

    #[test]
    fn a_line_past_64_kib_is_refused() {
        let fits = format!("A='{}'\n", "x".repeat(MAX_LINE - 5));
        assert_eq!(parse(&fits, "A").unwrap().len(), MAX_LINE - 5);
        let long = format!("A='{}'\n", "x".repeat(MAX_LINE));
        assert_eq!(
            parse(&long, "A").unwrap_err(),
            "error reading environment variable file: bufio.Scanner: token too long"
        );
    }
}
