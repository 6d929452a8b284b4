//! Container logs as `kubectl logs` sees them (upstream's
//! pkg/kubelet/kuberuntime/logs, the option decoding and validation of
//! server.go `getContainerLogs`, and kubelet_pods.go
//! `validateContainerLogStatus`), without I/O:
//!
//! - the CRI log format, `<RFC3339Nano> <stdout|stderr> <P|F> <content>`,
//!   one entry per line, where `P` marks a partial line continued by the next
//!   entry of the same stream ([`parse_line`], [`Assembler`]);
//! - the `/containerLogs` query ([`LogOptions::from_query`]);
//! - which container instance's log to serve ([`log_container_id`]);
//! - tailLines over a file read backward in blocks ([`tail_start`]);
//! - sinceSeconds/sinceTime, limitBytes, timestamps and stream selection of
//!   each output line ([`LineWriter`]).

use std::io::{self, Read, Seek, SeekFrom};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::timefmt::rfc3339_nanos;

/// A joined line longer than this is written out in pieces (each with its
/// own timestamp prefix) instead of being buffered whole.
pub const MAX_JOINED_LINE: usize = 1 << 20;

/// Block size of the backward scan of [`tail_start`].
const TAIL_BLOCK: u64 = 64 * 1024;
/// Bytes of a raw line's start enough to read its timestamp, stream and tag.
const LINE_HEAD: u64 = 128;

/// The stream a log entry was written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn index(self) -> usize {
        match self {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        }
    }
}

/// One parsed line of a CRI log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub timestamp: SystemTime,
    pub stream: Stream,
    /// Tag `P`: the line continues in the next entry of the same stream.
    pub partial: bool,
    /// The content, without the line's `\n`.
    pub content: &'a [u8],
}

/// Why a line is not a CRI log entry (upstream logs and skips such lines).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("timestamp is not found")]
    NoTimestamp,
    #[error("unexpected timestamp format {0:?}")]
    BadTimestamp(String),
    #[error("stream type is not found")]
    NoStream,
    #[error("unexpected stream type {0:?}")]
    BadStream(String),
    #[error("log tag is not found")]
    NoTag,
}

/// Parse one line of a CRI log file (with or without its trailing `\n`).
///
/// `2016-10-06T00:17:09.669794202Z stdout P log content 1`
pub fn parse_line(line: &[u8]) -> Result<Entry<'_>, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (ts, rest) = split_space(line).ok_or(ParseError::NoTimestamp)?;
    let timestamp = std::str::from_utf8(ts)
        .ok()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map(system_time)
        .ok_or_else(|| ParseError::BadTimestamp(String::from_utf8_lossy(ts).into_owned()))?;
    let (stream, rest) = split_space(rest).ok_or(ParseError::NoStream)?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => {
            return Err(ParseError::BadStream(
                String::from_utf8_lossy(other).into_owned(),
            ));
        }
    };
    let (tags, content) = split_space(rest).ok_or(ParseError::NoTag)?;
    // Tags are `:`-separated for forward compatibility; the first one is P or F.
    let partial = tags.split(|b| *b == b':').next() == Some(b"P");
    Ok(Entry {
        timestamp,
        stream,
        partial,
        content,
    })
}

/// The instant of a parsed RFC 3339 timestamp.
fn system_time(ts: Timestamp) -> SystemTime {
    let nanos = ts.as_nanosecond();
    let magnitude = Duration::new(
        (nanos.unsigned_abs() / 1_000_000_000) as u64,
        (nanos.unsigned_abs() % 1_000_000_000) as u32,
    );
    if nanos >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

fn split_space(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|b| *b == b' ')?;
    Some((&s[..i], &s[i + 1..]))
}

/// Formats a log timestamp the way upstream prefixes lines with
/// `timestamps=true` (`RFC3339NanoFixed`: always nine fraction digits), in UTC.
pub fn format_timestamp(t: SystemTime) -> String {
    let s = rfc3339_nanos(t);
    let body = s.strip_suffix('Z').unwrap_or(&s);
    let (secs, frac) = body.split_once('.').unwrap_or((body, ""));
    format!("{secs}.{frac:0<9}Z")
}

/// A whole output line: partial entries joined, stamped with the time of its
/// first entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub timestamp: SystemTime,
    pub stream: Stream,
    pub content: Vec<u8>,
    /// False for the pieces of a line that never got its final entry (end of
    /// the log, or longer than [`MAX_JOINED_LINE`]): written without `\n`.
    pub complete: bool,
}

/// Joins partial (`P`) entries with the entries that complete them, per stream
/// (stdout and stderr partials may interleave).
#[derive(Debug, Default)]
pub struct Assembler {
    pending: [Option<(SystemTime, Vec<u8>)>; 2],
}

impl Assembler {
    /// Feed one entry; returns the line it completes, if any (or a piece of an
    /// overlong line).
    pub fn push(&mut self, entry: &Entry<'_>) -> Option<LogLine> {
        let slot = &mut self.pending[entry.stream.index()];
        let (timestamp, mut content) = slot.take().unwrap_or_else(|| (entry.timestamp, Vec::new()));
        content.extend_from_slice(entry.content);
        if !entry.partial {
            return Some(LogLine {
                timestamp,
                stream: entry.stream,
                content,
                complete: true,
            });
        }
        if content.len() >= MAX_JOINED_LINE {
            return Some(LogLine {
                timestamp,
                stream: entry.stream,
                content,
                complete: false,
            });
        }
        *slot = Some((timestamp, content));
        None
    }

    /// The partial lines still waiting for their end, oldest first (at the
    /// end of the log).
    pub fn flush(&mut self) -> Vec<LogLine> {
        let mut out: Vec<LogLine> = [Stream::Stdout, Stream::Stderr]
            .into_iter()
            .filter_map(|stream| {
                self.pending[stream.index()]
                    .take()
                    .map(|(timestamp, content)| LogLine {
                        timestamp,
                        stream,
                        content,
                        complete: false,
                    })
            })
            .collect();
        out.sort_by_key(|l| l.timestamp);
        out
    }
}

/// Which streams to serve (`stream` query parameter, PodLogsQuerySplitStreams).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StreamFilter {
    #[default]
    All,
    Stdout,
    Stderr,
}

impl StreamFilter {
    fn admits(self, stream: Stream) -> bool {
        match self {
            StreamFilter::All => true,
            StreamFilter::Stdout => stream == Stream::Stdout,
            StreamFilter::Stderr => stream == Stream::Stderr,
        }
    }
}

/// The `/containerLogs` options (v1.PodLogOptions as the kubelet uses them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// tailLines: the last N lines only.
    pub tail_lines: Option<u64>,
    /// limitBytes: stop after this many output bytes.
    pub limit_bytes: Option<u64>,
    /// sinceSeconds (resolved against the request time) or sinceTime.
    pub since: Option<SystemTime>,
    pub follow: bool,
    pub timestamps: bool,
    /// The previous (last terminated) instance of the container.
    pub previous: bool,
    pub stream: StreamFilter,
}

/// A `/containerLogs` query that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// A value that does not parse: 400 Bad Request.
    #[error("unable to decode query parameter {param:?}: invalid value {value:?}")]
    Decode { param: &'static str, value: String },
    /// Values that parse but are not allowed (upstream's
    /// ValidatePodLogOptions field errors): 422 Unprocessable Entity.
    #[error("invalid request: {}", .0.join(", "))]
    Invalid(Vec<String>),
}

/// Raw values of the query parameters the kubelet reads (first occurrence wins, as in Go).
#[derive(Default)]
struct RawOptions<'a> {
    tail_lines: Option<&'a str>,
    tail: Option<&'a str>,
    limit_bytes: Option<&'a str>,
    since_seconds: Option<&'a str>,
    since_time: Option<&'a str>,
    follow: Option<&'a str>,
    timestamps: Option<&'a str>,
    previous: Option<&'a str>,
    stream: Option<&'a str>,
}

impl LogOptions {
    /// Decode and validate the (already percent-decoded) query parameters;
    /// `now` resolves sinceSeconds. Unknown parameters are ignored; `tail` is
    /// the legacy spelling of tailLines (`tail=all` means no limit).
    pub fn from_query<'a>(
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
        now: SystemTime,
    ) -> Result<LogOptions, OptionsError> {
        let mut raw = RawOptions::default();
        for (key, value) in params {
            let slot = match key {
                "tailLines" => &mut raw.tail_lines,
                "tail" => &mut raw.tail,
                "limitBytes" => &mut raw.limit_bytes,
                "sinceSeconds" => &mut raw.since_seconds,
                "sinceTime" => &mut raw.since_time,
                "follow" => &mut raw.follow,
                "timestamps" => &mut raw.timestamps,
                "previous" => &mut raw.previous,
                "stream" => &mut raw.stream,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        match raw.tail {
            Some("all") => raw.tail_lines = None,
            Some(t) if !t.is_empty() => raw.tail_lines = Some(t),
            _ => {}
        }
        let tail_lines = raw
            .tail_lines
            .map(|v| parse_int("tailLines", v))
            .transpose()?;
        let limit_bytes = raw
            .limit_bytes
            .map(|v| parse_int("limitBytes", v))
            .transpose()?;
        let since_seconds = raw
            .since_seconds
            .map(|v| parse_int("sinceSeconds", v))
            .transpose()?;
        let since_time = match raw.since_time {
            None | Some("") | Some("null") => None,
            Some(v) => Some(
                v.parse::<Timestamp>()
                    .map(system_time)
                    .map_err(|_| decode_error("sinceTime", v))?,
            ),
        };
        let follow = parse_bool("follow", raw.follow)?;
        let timestamps = parse_bool("timestamps", raw.timestamps)?;
        let previous = parse_bool("previous", raw.previous)?;

        let mut invalid = Vec::new();
        if let Some(t) = tail_lines.filter(|t| *t < 0) {
            invalid.push(format!(
                "tailLines: Invalid value: {t}: must be greater than or equal to 0"
            ));
        }
        if let Some(l) = limit_bytes.filter(|l| *l < 1) {
            invalid.push(format!(
                "limitBytes: Invalid value: {l}: must be greater than 0"
            ));
        }
        match (since_seconds, since_time) {
            (Some(_), Some(_)) => invalid.push(
                "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
            ),
            (Some(s), None) if s < 1 => invalid.push(format!(
                "sinceSeconds: Invalid value: {s}: must be greater than 0"
            )),
            _ => {}
        }
        let stream = match raw.stream {
            None | Some("All") => StreamFilter::All,
            Some("Stdout") => StreamFilter::Stdout,
            Some("Stderr") => StreamFilter::Stderr,
            Some(other) => {
                invalid.push(format!(
                    "stream: Unsupported value: {other:?}: supported values: \"All\", \"Stderr\", \"Stdout\""
                ));
                StreamFilter::All
            }
        };
        if !invalid.is_empty() {
            return Err(OptionsError::Invalid(invalid));
        }
        let since = since_time.or_else(|| {
            since_seconds.map(|s| {
                now.checked_sub(Duration::from_secs(s.unsigned_abs()))
                    .unwrap_or(UNIX_EPOCH)
            })
        });
        Ok(LogOptions {
            tail_lines: tail_lines.map(i64::unsigned_abs),
            limit_bytes: limit_bytes.map(i64::unsigned_abs),
            since,
            follow,
            timestamps,
            previous,
            stream,
        })
    }
}

fn decode_error(param: &'static str, value: &str) -> OptionsError {
    OptionsError::Decode {
        param,
        value: value.to_owned(),
    }
}

fn parse_int(param: &'static str, value: &str) -> Result<i64, OptionsError> {
    value.parse().map_err(|_| decode_error(param, value))
}

/// Go's strconv.ParseBool; an absent parameter is false.
fn parse_bool(param: &'static str, value: Option<&str>) -> Result<bool, OptionsError> {
    value.map_or(Ok(false), |v| {
        crate::strconv::parse_bool(v).map_err(|_| decode_error(param, v))
    })
}

/// Why no container log can be served for a pod's container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// Not in the pod's spec: 404.
    #[error("container {container:?} not found in pod {pod:?}")]
    NotInSpec { pod: String, container: String },
    /// No instance whose log can be read (yet): 400, upstream's messages.
    #[error("{0}")]
    Unavailable(String),
}

/// The runtime's ID of the container instance whose log `kubectl logs` reads
/// (upstream's validateContainerLogStatus): with `previous` the last
/// terminated instance, otherwise the running one, else the one that
/// terminated last.
pub fn log_container_id(pod: &Pod, container: &str, previous: bool) -> Result<String, SelectError> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let in_spec = spec.is_some_and(|s| {
        s.containers.iter().any(|c| c.name == container)
            || s.init_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
            || s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
    });
    if !in_spec {
        return Err(SelectError::NotInSpec {
            pod: pod_name.to_owned(),
            container: container.to_owned(),
        });
    }
    let unavailable = |what: &str| {
        SelectError::Unavailable(format!(
            "container {container:?} in pod {pod_name:?} {what}"
        ))
    };
    let status = pod.status.as_ref();
    let found: Option<&ContainerStatus> = status.and_then(|s| {
        [
            s.container_statuses.as_ref(),
            s.init_container_statuses.as_ref(),
            s.ephemeral_container_statuses.as_ref(),
        ]
        .into_iter()
        .flatten()
        .flatten()
        .find(|cs| cs.name == container)
    });
    let Some(cs) = found else {
        return Err(unavailable("is not available"));
    };
    let nonempty = |id: Option<&String>| id.filter(|id| !id.is_empty()).cloned();
    let last_terminated = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let last_id = nonempty(last_terminated.and_then(|t| t.container_id.as_ref()));
    let state = cs.state.as_ref();
    let full_id = if previous {
        last_id.ok_or_else(|| {
            SelectError::Unavailable(format!(
                "previous terminated container {container:?} in pod {pod_name:?} not found"
            ))
        })?
    } else if state.is_some_and(|s| s.running.is_some()) {
        nonempty(cs.container_id.as_ref()).ok_or_else(|| unavailable("is not available"))?
    } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        // The next instance may not have started: fall back to the last one.
        nonempty(t.container_id.as_ref())
            .or(last_id)
            .ok_or_else(|| unavailable("is terminated"))?
    } else if last_terminated.is_some() {
        last_id.ok_or_else(|| unavailable("is terminated"))?
    } else if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
        let reason = w.reason.as_deref().unwrap_or_default();
        return Err(unavailable(&match reason {
            "ErrImagePull" => "is waiting to start: image can't be pulled".to_owned(),
            "ImagePullBackOff" => {
                "is waiting to start: trying and failing to pull image".to_owned()
            }
            _ => format!("is waiting to start: {reason}"),
        }));
    } else {
        return Err(unavailable("is waiting to start - no logs yet"));
    };
    match full_id.split_once("://") {
        Some((_, id)) if !id.is_empty() => Ok(id.to_owned()),
        _ => Err(unavailable(&format!(
            "has an invalid container ID {full_id:?}"
        ))),
    }
}

/// What a line looks like to the tail scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RawKind {
    Full,
    Partial,
    Malformed,
}

fn classify(head: &[u8]) -> RawKind {
    match parse_line(head) {
        Ok(e) if e.partial => RawKind::Partial,
        Ok(_) => RawKind::Full,
        Err(_) => RawKind::Malformed,
    }
}

/// A backward reader over a log file, one block cached.
struct Backward<'r, R> {
    r: &'r mut R,
    block: Vec<u8>,
    block_start: u64,
}

impl<R: Read + Seek> Backward<'_, R> {
    fn load(&mut self, start: u64, len: u64) -> io::Result<()> {
        self.r.seek(SeekFrom::Start(start))?;
        self.block.clear();
        self.r.by_ref().take(len).read_to_end(&mut self.block)?;
        self.block_start = start;
        Ok(())
    }

    /// The position of the last `\n` before `before`.
    fn rfind_newline(&mut self, before: u64) -> io::Result<Option<u64>> {
        let mut end = before;
        while end > 0 {
            let cached_end = self.block_start + self.block.len() as u64;
            if !(self.block_start < end && end <= cached_end) {
                let start = end.saturating_sub(TAIL_BLOCK);
                self.load(start, end - start)?;
                if self.block.len() as u64 != end - start {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            let rel = (end - self.block_start) as usize;
            if let Some(i) = self.block[..rel].iter().rposition(|b| *b == b'\n') {
                return Ok(Some(self.block_start + i as u64));
            }
            end = self.block_start;
        }
        Ok(None)
    }

    /// The first bytes of the line `[start, end)`.
    fn head(&mut self, start: u64, end: u64) -> io::Result<Vec<u8>> {
        let end = end.min(start + LINE_HEAD);
        let cached_end = self.block_start + self.block.len() as u64;
        if self.block_start <= start && end <= cached_end {
            let (s, e) = (start - self.block_start, end - self.block_start);
            return Ok(self.block[s as usize..e as usize].to_vec());
        }
        self.r.seek(SeekFrom::Start(start))?;
        let mut head = Vec::new();
        self.r.by_ref().take(end - start).read_to_end(&mut head)?;
        Ok(head)
    }
}

/// The offset where the last `n` whole lines of a CRI log start (joined
/// partials count as one line; malformed lines do not count), found by
/// reading the file backward in blocks. `n == 0` gives the end of the file.
pub fn tail_start<R: Read + Seek>(r: &mut R, n: u64) -> io::Result<u64> {
    let len = r.seek(SeekFrom::End(0))?;
    if n == 0 || len == 0 {
        return Ok(len);
    }
    let mut back = Backward {
        r,
        block: Vec::new(),
        block_start: 0,
    };
    // A line ends after a complete (F) entry, or at the end of the file
    // after partial entries. The n-th line from the end starts right after
    // the (n+1)-th such end.
    let mut ends = 0;
    let mut seen_entry = false;
    let mut end = len;
    let last_is_newline = back.head(len - 1, len)?.first() == Some(&b'\n');
    let mut search_before = if last_is_newline { len - 1 } else { len };
    loop {
        let start = back.rfind_newline(search_before)?.map_or(0, |i| i + 1);
        match classify(&back.head(start, end)?) {
            RawKind::Full => {
                ends += 1;
                seen_entry = true;
            }
            RawKind::Partial => {
                if !seen_entry {
                    ends += 1;
                }
                seen_entry = true;
            }
            RawKind::Malformed => {}
        }
        if ends > n {
            return Ok(end);
        }
        if start == 0 {
            return Ok(0);
        }
        end = start;
        search_before = start - 1;
    }
}

/// Renders lines as `kubectl logs` shows them: stream selection, sinceTime,
/// the optional timestamp prefix, and limitBytes (upstream's logWriter).
#[derive(Debug)]
pub struct LineWriter {
    since: Option<SystemTime>,
    timestamps: bool,
    stream: StreamFilter,
    remaining: Option<u64>,
}

impl LineWriter {
    pub fn new(opts: &LogOptions) -> Self {
        LineWriter {
            since: opts.since,
            timestamps: opts.timestamps,
            stream: opts.stream,
            remaining: opts.limit_bytes,
        }
    }

    /// Append `line` to `out` if selected, cut at limitBytes.
    pub fn write(&mut self, line: &LogLine, out: &mut Vec<u8>) {
        if self.done()
            || !self.stream.admits(line.stream)
            || self.since.is_some_and(|since| line.timestamp < since)
        {
            return;
        }
        let start = out.len();
        if self.timestamps {
            out.extend_from_slice(format_timestamp(line.timestamp).as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&line.content);
        if line.complete {
            out.push(b'\n');
        }
        if let Some(remaining) = self.remaining.as_mut() {
            let written = (out.len() - start) as u64;
            if written > *remaining {
                out.truncate(start + *remaining as usize);
            }
            *remaining = remaining.saturating_sub(written);
        }
    }

    /// limitBytes reached: nothing more will be written.
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        PodStatus,
    };

    use super::*;
    use crate::testing::{PodBuilder, container};

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn parses_cri_lines() {
        type Parsed<'a> = Result<(SystemTime, Stream, bool, &'a str), ParseError>;
        let cases: &[(&str, Parsed<'_>)] = &[
            (
                "2016-10-06T00:17:09.669794202Z stdout P log content 1\n",
                Ok((
                    at(1_475_713_029, 669_794_202),
                    Stream::Stdout,
                    true,
                    "log content 1",
                )),
            ),
            (
                "2016-10-06T00:17:09.669794203Z stderr F log content 2",
                Ok((
                    at(1_475_713_029, 669_794_203),
                    Stream::Stderr,
                    false,
                    "log content 2",
                )),
            ),
            (
                "2016-10-06T02:17:09+02:00 stdout F:x  two spaces\n",
                Ok((at(1_475_713_029, 0), Stream::Stdout, false, " two spaces")),
            ),
            (
                "2016-10-06T00:17:09Z stdout F \n",
                Ok((at(1_475_713_029, 0), Stream::Stdout, false, "")),
            ),
            ("no-spaces-at-all\n", Err(ParseError::NoTimestamp)),
            (
                "yesterday stdout F x",
                Err(ParseError::BadTimestamp("yesterday".into())),
            ),
            ("2016-10-06T00:17:09Z stdout", Err(ParseError::NoStream)),
            (
                "2016-10-06T00:17:09Z stdin F x",
                Err(ParseError::BadStream("stdin".into())),
            ),
            ("2016-10-06T00:17:09Z stdout F", Err(ParseError::NoTag)),
            ("", Err(ParseError::NoTimestamp)),
        ];
        for (line, want) in cases {
            let got = parse_line(line.as_bytes()).map(|e| {
                (
                    e.timestamp,
                    e.stream,
                    e.partial,
                    std::str::from_utf8(e.content).unwrap(),
                )
            });
            assert_eq!(&got, want, "{line:?}");
        }
        // Arbitrary bytes never panic: they are no timestamp.
        for (bytes, want) in [
            (
                &b"\xff\xfe stdout F x"[..],
                ParseError::BadTimestamp("\u{fffd}\u{fffd}".into()),
            ),
            (b" ", ParseError::BadTimestamp(String::new())),
            (b"  ", ParseError::BadTimestamp(String::new())),
            (b"\n\n", ParseError::NoTimestamp),
            (b"2016 \xff F", ParseError::BadTimestamp("2016".into())),
        ] {
            assert_eq!(parse_line(bytes), Err(want), "{bytes:?}");
        }
    }

    #[test]
    fn fixed_timestamps() {
        assert_eq!(
            format_timestamp(at(1_475_713_029, 669_794_202)),
            "2016-10-06T00:17:09.669794202Z"
        );
        assert_eq!(
            format_timestamp(at(1_475_713_029, 500_000_000)),
            "2016-10-06T00:17:09.500000000Z"
        );
        assert_eq!(
            format_timestamp(at(1_475_713_029, 0)),
            "2016-10-06T00:17:09.000000000Z"
        );
    }

    fn assemble(log: &str) -> Vec<LogLine> {
        let mut asm = Assembler::default();
        let mut out: Vec<LogLine> = log
            .lines()
            .filter_map(|l| parse_line(l.as_bytes()).ok())
            .filter_map(|e| asm.push(&e))
            .collect();
        out.extend(asm.flush());
        out
    }

    #[test]
    fn joins_partials_per_stream() {
        let log = "\
2016-10-06T00:00:01Z stdout P hel
2016-10-06T00:00:02Z stderr F oops
2016-10-06T00:00:03Z stdout P lo 
garbage line
2016-10-06T00:00:04Z stdout F world
2016-10-06T00:00:05Z stderr P tail";
        let got: Vec<(u64, Stream, String, bool)> = assemble(log)
            .into_iter()
            .map(|l| {
                (
                    l.timestamp.duration_since(UNIX_EPOCH).unwrap().as_secs() - 1_475_712_000,
                    l.stream,
                    String::from_utf8(l.content).unwrap(),
                    l.complete,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (2, Stream::Stderr, "oops".into(), true),
                (1, Stream::Stdout, "hello world".into(), true),
                (5, Stream::Stderr, "tail".into(), false),
            ]
        );
    }

    #[test]
    fn overlong_partials_are_cut() {
        let piece = "x".repeat(MAX_JOINED_LINE / 2);
        let mut asm = Assembler::default();
        let line = format!("2016-10-06T00:00:01Z stdout P {piece}");
        let entry = parse_line(line.as_bytes()).unwrap();
        assert_eq!(asm.push(&entry), None);
        let cut = asm.push(&entry).expect("cut at the limit");
        assert!(!cut.complete);
        assert_eq!(cut.content.len(), MAX_JOINED_LINE);
        assert!(asm.flush().is_empty());
    }

    fn query(q: &[(&'static str, &'static str)]) -> Result<LogOptions, OptionsError> {
        LogOptions::from_query(q.iter().copied(), at(1_000_000, 0))
    }

    #[test]
    fn decodes_query() {
        let ok = |opts: LogOptions| Ok::<_, OptionsError>(opts);
        type Query<'a> = &'a [(&'a str, &'a str)];
        let cases: Vec<(Query<'_>, Result<LogOptions, OptionsError>)> = vec![
            (&[], ok(LogOptions::default())),
            (
                &[("follow", "true"), ("timestamps", "1"), ("previous", "F"), ("x", "y")],
                ok(LogOptions {
                    follow: true,
                    timestamps: true,
                    ..Default::default()
                }),
            ),
            (
                &[("tailLines", "10"), ("tailLines", "99"), ("limitBytes", "5")],
                ok(LogOptions {
                    tail_lines: Some(10),
                    limit_bytes: Some(5),
                    ..Default::default()
                }),
            ),
            (&[("tail", "3"), ("tailLines", "10")], ok(LogOptions { tail_lines: Some(3), ..Default::default() })),
            (&[("tail", "all"), ("tailLines", "10")], ok(LogOptions::default())),
            (
                &[("sinceSeconds", "60")],
                ok(LogOptions { since: Some(at(1_000_000 - 60, 0)), ..Default::default() }),
            ),
            (
                &[("sinceTime", "1970-01-12T13:46:40.5Z")],
                ok(LogOptions { since: Some(at(1_000_000, 500_000_000)), ..Default::default() }),
            ),
            (&[("stream", "Stderr")], ok(LogOptions { stream: StreamFilter::Stderr, ..Default::default() })),
            (
                &[("tailLines", "ten")],
                Err(OptionsError::Decode { param: "tailLines", value: "ten".into() }),
            ),
            (
                &[("follow", "yes")],
                Err(OptionsError::Decode { param: "follow", value: "yes".into() }),
            ),
            (
                &[("previous", "")],
                Err(OptionsError::Decode { param: "previous", value: "".into() }),
            ),
            (
                &[("sinceTime", "yesterday")],
                Err(OptionsError::Decode { param: "sinceTime", value: "yesterday".into() }),
            ),
            (
                &[("tailLines", "-1"), ("limitBytes", "0")],
                Err(OptionsError::Invalid(vec![
                    "tailLines: Invalid value: -1: must be greater than or equal to 0".into(),
                    "limitBytes: Invalid value: 0: must be greater than 0".into(),
                ])),
            ),
            (
                &[("sinceSeconds", "10"), ("sinceTime", "2020-01-01T00:00:00Z")],
                Err(OptionsError::Invalid(vec![
                    "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
                ])),
            ),
            (
                &[("sinceSeconds", "0")],
                Err(OptionsError::Invalid(vec![
                    "sinceSeconds: Invalid value: 0: must be greater than 0".into(),
                ])),
            ),
            (
                &[("stream", "stdout")],
                Err(OptionsError::Invalid(vec![
                    "stream: Unsupported value: \"stdout\": supported values: \"All\", \"Stderr\", \"Stdout\"".into(),
                ])),
            ),
        ];
        for (q, want) in cases {
            assert_eq!(query(q), want, "{q:?}");
        }
        let err = query(&[("limitBytes", "x")]).unwrap_err().to_string();
        assert!(err.contains("limitBytes"), "{err}");
    }

    fn pod_with(status: ContainerStatus) -> Pod {
        PodBuilder::new("web")
            .container(container("app"))
            .init_container(container("init"))
            .status(PodStatus {
                container_statuses: Some(vec![status]),
                ..Default::default()
            })
            .build()
    }

    fn terminated(id: &str) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: Some(id.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn picks_the_container_instance() {
        let running = ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        };
        let waiting = |reason: &str| ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let status =
            |state: Option<ContainerState>, last: Option<ContainerState>| ContainerStatus {
                name: "app".into(),
                container_id: Some("containerd://cur".into()),
                state,
                last_state: last,
                ..Default::default()
            };
        let unavailable = |m: &str| Err(SelectError::Unavailable(m.into()));
        let cases = [
            (
                status(Some(running.clone()), None),
                "app",
                false,
                Ok("cur".to_owned()),
            ),
            (
                status(Some(running.clone()), Some(terminated("containerd://old"))),
                "app",
                true,
                Ok("old".to_owned()),
            ),
            (
                status(Some(running.clone()), None),
                "app",
                true,
                unavailable("previous terminated container \"app\" in pod \"web\" not found"),
            ),
            (
                status(Some(terminated("containerd://t")), None),
                "app",
                false,
                Ok("t".to_owned()),
            ),
            (
                status(Some(terminated("")), Some(terminated("containerd://old"))),
                "app",
                false,
                Ok("old".to_owned()),
            ),
            (
                status(Some(terminated("")), None),
                "app",
                false,
                unavailable("container \"app\" in pod \"web\" is terminated"),
            ),
            (
                status(
                    Some(waiting("CrashLoopBackOff")),
                    Some(terminated("containerd://old")),
                ),
                "app",
                false,
                Ok("old".to_owned()),
            ),
            (
                status(Some(waiting("ErrImagePull")), None),
                "app",
                false,
                unavailable(
                    "container \"app\" in pod \"web\" is waiting to start: image can't be pulled",
                ),
            ),
            (
                status(Some(waiting("ContainerCreating")), None),
                "app",
                false,
                unavailable(
                    "container \"app\" in pod \"web\" is waiting to start: ContainerCreating",
                ),
            ),
            (
                status(None, None),
                "app",
                false,
                unavailable("container \"app\" in pod \"web\" is waiting to start - no logs yet"),
            ),
            (
                status(Some(running.clone()), None),
                "init",
                false,
                unavailable("container \"init\" in pod \"web\" is not available"),
            ),
            (
                status(Some(running.clone()), None),
                "../../etc",
                false,
                Err(SelectError::NotInSpec {
                    pod: "web".into(),
                    container: "../../etc".into(),
                }),
            ),
            (
                status(Some(terminated("no-scheme")), None),
                "app",
                false,
                unavailable(
                    "container \"app\" in pod \"web\" has an invalid container ID \"no-scheme\"",
                ),
            ),
        ];
        for (i, (st, container, previous, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                log_container_id(&pod_with(st), container, previous),
                want,
                "case {i}"
            );
        }
    }

    fn tail_of(log: &str, n: u64) -> String {
        let start = tail_start(&mut Cursor::new(log.as_bytes()), n).unwrap();
        log[start as usize..].to_owned()
    }

    #[test]
    fn tail_counts_whole_lines() {
        let log = "\
2016-10-06T00:00:01Z stdout F a
2016-10-06T00:00:02Z stdout P b1
2016-10-06T00:00:03Z stderr F c
2016-10-06T00:00:04Z stdout F b2
not a log line
2016-10-06T00:00:05Z stdout F d
";
        let cases = [
            (0, ""),
            // Malformed lines are kept (and skipped when read).
            (1, "not a log line\n2016-10-06T00:00:05Z stdout F d\n"),
            (
                2,
                "2016-10-06T00:00:04Z stdout F b2\nnot a log line\n2016-10-06T00:00:05Z stdout F d\n",
            ),
            // The first line (32 bytes) is the only one left out.
            (3, &log[32..]),
            (4, log),
            (5, log),
            (100, log),
        ];
        for (n, want) in cases {
            assert_eq!(tail_of(log, n), want, "tail {n}");
        }
        // A trailing partial line (no F yet) and an unterminated last line count as lines.
        let open = "2016-10-06T00:00:01Z stdout F a\n2016-10-06T00:00:02Z stdout P b";
        assert_eq!(tail_of(open, 1), "2016-10-06T00:00:02Z stdout P b");
        assert_eq!(tail_of(open, 2), open);
        assert_eq!(tail_of("", 3), "");
        assert_eq!(tail_of("\n\n", 3), "\n\n");
    }

    #[test]
    fn tail_crosses_blocks() {
        // Lines longer than a block and many lines: the backward scan agrees
        // with a forward count.
        let long = "y".repeat(TAIL_BLOCK as usize + 17);
        let mut log = String::new();
        for i in 0..2000 {
            let content = if i % 97 == 0 { long.as_str() } else { "short" };
            log.push_str(&format!("2016-10-06T00:00:01Z stdout F {i} {content}\n"));
        }
        for n in [1u64, 2, 50, 1999, 2000, 2001] {
            let got = tail_of(&log, n);
            let want: Vec<&str> = log.lines().collect();
            let want = want[want.len().saturating_sub(n as usize)..].join("\n") + "\n";
            assert_eq!(got.len(), want.len(), "tail {n}");
            assert_eq!(got, want, "tail {n}");
        }
    }

    fn line(secs: u64, stream: Stream, content: &str, complete: bool) -> LogLine {
        LogLine {
            timestamp: at(secs, 0),
            stream,
            content: content.as_bytes().to_vec(),
            complete,
        }
    }

    #[test]
    fn writer_selects_and_limits() {
        let lines = [
            line(10, Stream::Stdout, "one", true),
            line(20, Stream::Stderr, "two", true),
            line(30, Stream::Stdout, "three", true),
            line(40, Stream::Stdout, "four", false),
        ];
        let render = |opts: LogOptions| {
            let mut w = LineWriter::new(&opts);
            let mut out = Vec::new();
            for l in &lines {
                w.write(l, &mut out);
            }
            (String::from_utf8(out).unwrap(), w.done())
        };
        let cases = [
            (LogOptions::default(), "one\ntwo\nthree\nfour", false),
            (
                LogOptions {
                    since: Some(at(20, 0)),
                    ..Default::default()
                },
                "two\nthree\nfour",
                false,
            ),
            (
                LogOptions {
                    stream: StreamFilter::Stdout,
                    ..Default::default()
                },
                "one\nthree\nfour",
                false,
            ),
            (
                LogOptions {
                    limit_bytes: Some(6),
                    ..Default::default()
                },
                "one\ntw",
                true,
            ),
            (
                LogOptions {
                    limit_bytes: Some(8),
                    ..Default::default()
                },
                "one\ntwo\n",
                true,
            ),
            (
                LogOptions {
                    timestamps: true,
                    stream: StreamFilter::Stderr,
                    ..Default::default()
                },
                "1970-01-01T00:00:20.000000000Z two\n",
                false,
            ),
        ];
        for (opts, want, done) in cases {
            assert_eq!(render(opts.clone()), (want.to_owned(), done), "{opts:?}");
        }
    }
}
