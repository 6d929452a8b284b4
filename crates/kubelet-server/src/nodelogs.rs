//! `/logs/`: the node's own log files (upstream's logServer, authorized as
//! `nodes/log`), served as Go's http.FileServer over `/var/log` serves them:
//! a directory as Go's listing, a file as it is. Unlike upstream, nothing
//! outside the directory is ever served: `..` cannot climb out, and a
//! symbolic link is followed only where it stays inside (the
//! `/var/log/containers` links to `/var/log/pods` do); the rest is 403.
//!
//! With enableSystemLogQuery, the node log query (NodeLogQuery, GA):
//! `?query=<service>|<file>` with sinceTime, untilTime, tailLines, boot and
//! pattern, validated with upstream's messages. A service's log comes from
//! journalctl where journald knows it, else from `/var/log/<service>`,
//! `/var/log/<service>.log` or `/var/log/<service>/<service>.log`, as
//! upstream's heuristics look; a file query serves that file.

use std::fmt::Write as _;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use k8s_openapi::jiff::Timestamp;
use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::response::text_response;
use crate::{Body, full};

/// Upstream's nodeLogDir.
pub const NODE_LOG_DIR: &str = "/var/log";
/// Upstream's limits on a query.
const MAX_TAIL_LINES: i64 = 100_000;
const MAX_SERVICE_LENGTH: usize = 256;
const MAX_SERVICES: usize = 4;
/// How long a query may run (upstream's deadline for both of its runs).
const QUERY_DEADLINE: Duration = Duration::from_secs(30);

/// enableSystemLogHandler, enableSystemLogQuery and the directory served.
#[derive(Clone, Debug)]
pub struct Settings {
    pub handler: bool,
    pub query: bool,
    pub dir: PathBuf,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            handler: true,
            query: false,
            dir: PathBuf::from(NODE_LOG_DIR),
        }
    }
}

/// Answer `GET <path>` (`/logs` or under it) with the `query` given and
/// whether the client takes gzip.
pub async fn serve(
    settings: &Settings,
    path: &str,
    query: Option<&str>,
    accepts_gzip: bool,
) -> Response<Body> {
    if !settings.handler {
        return text_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "logs endpoint is disabled.\n",
        );
    }
    // http.StripPrefix("/logs/"): `/logs` itself is not found.
    let Some(rest) = path.strip_prefix("/logs/") else {
        return text_response(StatusCode::NOT_FOUND, "404 page not found\n");
    };
    let url_path = format!("/{}", percent_decode(rest));
    if settings.query {
        match NodeLogQuery::parse(query.unwrap_or("")) {
            Err(errs) => return text_response(StatusCode::BAD_REQUEST, aggregate(&errs) + "\n"),
            Ok(Some(q)) => {
                if url_path != "/" {
                    return text_response(
                        StatusCode::NOT_ACCEPTABLE,
                        "path not allowed in query mode\n",
                    );
                }
                let errs = q.validate(&settings.dir);
                if !errs.is_empty() {
                    return text_response(StatusCode::NOT_ACCEPTABLE, aggregate(&errs) + "\n");
                }
                if !q.services.is_empty() {
                    return q.serve_services(&settings.dir, accepts_gzip).await;
                }
                let file = format!("/{}", q.files[0].trim_start_matches('/'));
                return serve_path(&settings.dir, &file).await;
            }
            Ok(None) => {}
        }
    }
    serve_path(&settings.dir, &url_path).await
}

/// `%XX` escapes undone (as Go's URL.Path is); an invalid escape is kept.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Go's path.Clean of a rooted path: `.` and `..` resolved, never above `/`.
fn clean(url_path: &str) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in Path::new(url_path).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Why a path is not served.
#[derive(Debug)]
enum Refused {
    NotFound,
    Outside,
    Io(io::Error),
}

impl From<io::Error> for Refused {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::NotFound => Refused::NotFound,
            _ => Refused::Io(e),
        }
    }
}

/// Open `rel` (a cleaned path under the directory) where it really is:
/// symbolic links resolved, the result inside `dir`, then opened again from
/// `dir` with no link followed, so nothing swapped in meanwhile leads out.
fn open_inside(dir: &Path, rel: &Path) -> Result<(OwnedFd, PathBuf), Refused> {
    let root = std::fs::canonicalize(dir)?;
    let resolved = std::fs::canonicalize(root.join(rel.strip_prefix("/").unwrap_or(rel)))?;
    let inside = resolved
        .strip_prefix(&root)
        .map_err(|_| Refused::Outside)?
        .to_owned();
    let root_fd = rustix::fs::open(
        &root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)?;
    let target = if inside.as_os_str().is_empty() {
        Path::new(".")
    } else {
        inside.as_path()
    };
    let fd = rustix::fs::openat2(
        root_fd.as_fd(),
        target,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        rustix::io::Errno::XDEV | rustix::io::Errno::LOOP => Refused::Outside,
        e => Refused::Io(e.into()),
    })?;
    Ok((fd, inside))
}

/// The name's last component, as Go's path.Base.
fn base(url_path: &str) -> &str {
    let trimmed = url_path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((_, b)) if !b.is_empty() => b,
        _ => "/",
    }
}

/// Go's localRedirect: 301 to a path relative to the request's.
fn redirect(to: &str) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::MOVED_PERMANENTLY;
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// http.FileServer's answer for `url_path` (rooted, decoded) in `dir`.
async fn serve_path(dir: &Path, url_path: &str) -> Response<Body> {
    let cleaned = clean(url_path);
    let (dir, rel) = (dir.to_owned(), cleaned.clone());
    let opened = kubelet_tasks::off_thread(move || {
        let (fd, inside) = open_inside(&dir, &rel)?;
        let st = rustix::fs::fstat(&fd).map_err(io::Error::from)?;
        Ok::<_, Refused>((fd, inside, st))
    })
    .await
    .unwrap_or_else(|e| Err(Refused::Io(io::Error::other(e))));
    let (fd, _, st) = match opened {
        Ok(o) => o,
        Err(Refused::NotFound) => {
            return text_response(StatusCode::NOT_FOUND, "404 page not found\n");
        }
        Err(Refused::Outside) => {
            return text_response(
                StatusCode::FORBIDDEN,
                "403 Forbidden: the path leads outside the node's log directory\n",
            );
        }
        Err(Refused::Io(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
            return text_response(StatusCode::FORBIDDEN, "403 Forbidden\n");
        }
        Err(Refused::Io(_)) => {
            return text_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 Internal Server Error\n",
            );
        }
    };
    let is_dir = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
    let last_modified = Timestamp::from_second(st.st_mtime)
        .map(|t| t.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string())
        .ok();
    if is_dir {
        if !url_path.ends_with('/') {
            return redirect(&format!("{}/", base(url_path)));
        }
        let listing = kubelet_tasks::off_thread(move || dir_list(fd)).await;
        return match listing {
            Ok(Ok(html)) => {
                let mut resp = Response::new(full(html));
                let h = resp.headers_mut();
                h.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                set_last_modified(h, last_modified);
                resp
            }
            _ => text_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Error reading directory\n",
            ),
        };
    }
    if url_path.ends_with('/') {
        return redirect(&format!("../{}", base(url_path)));
    }
    let file = tokio::fs::File::from_std(std::fs::File::from(fd));
    file_response(file, cleaned.as_path(), st.st_size as u64, last_modified).await
}

fn set_last_modified(h: &mut hyper::HeaderMap, at: Option<String>) {
    if let Some(v) = at.and_then(|t| HeaderValue::from_str(&t).ok()) {
        h.insert(header::LAST_MODIFIED, v);
    }
}

/// Go's dirList: the entries sorted by name, a directory's with a `/`.
fn dir_list(fd: OwnedFd) -> io::Result<String> {
    let mut dir = rustix::fs::Dir::read_from(&fd).map_err(io::Error::from)?;
    let mut names: Vec<(String, bool)> = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(io::Error::from)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        names.push((name, entry.file_type() == rustix::fs::FileType::Directory));
    }
    names.sort();
    let mut out = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for (name, is_dir) in names {
        let shown = if is_dir { format!("{name}/") } else { name };
        let _ = writeln!(
            out,
            "<a href=\"{}\">{}</a>",
            url_escape(&shown),
            html_escape(&shown)
        );
    }
    out.push_str("</pre>\n");
    Ok(out)
}

/// A name as a URL path (Go's url.URL{Path}.String(); `./` before a name
/// with a colon in its first segment).
fn url_escape(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    if name.split('/').next().is_some_and(|s| s.contains(':')) {
        out.insert_str(0, "./");
    }
    out
}

/// Go's htmlReplacer.
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// A file's content, streamed, typed as Go's serveContent types it: by
/// extension where it tells (`.gz`), else sniffed (text or bytes).
async fn file_response(
    mut file: tokio::fs::File,
    path: &Path,
    size: u64,
    last_modified: Option<String>,
) -> Response<Body> {
    use tokio::io::AsyncReadExt;
    let mut head = vec![0u8; 512];
    let mut filled = 0;
    while filled < head.len() {
        match file.read(&mut head[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(_) => {
                return text_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "500 Internal Server Error\n",
                );
            }
        }
    }
    head.truncate(filled);
    let content_type = if path.extension().is_some_and(|e| e == "gz") {
        "application/gzip"
    } else if head.starts_with(&[0x1f, 0x8b, 0x08]) {
        "application/x-gzip"
    } else if head
        .iter()
        .any(|&b| b == 0 || (b < 0x20 && !b"\t\n\r\x0c\x1b".contains(&b)))
    {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    };
    let first =
        futures::stream::once(async move { Ok(hyper::body::Frame::data(Bytes::from(head))) });
    let rest =
        tokio_util::io::ReaderStream::new(file).map(|chunk| chunk.map(hyper::body::Frame::data));
    let body = BodyExt::boxed(http_body_util::StreamBody::new(first.chain(rest)));
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    set_last_modified(h, last_modified);
    resp
}

/// One validation error, as upstream's field.Error prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldError(String);

fn invalid(field: &str, value: &str, detail: &str) -> FieldError {
    let mut s = format!("{field}: Invalid value: {value}");
    if !detail.is_empty() {
        let _ = write!(s, ": {detail}");
    }
    FieldError(s)
}

/// Go's %q of a string.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Go's %#v of a []string.
fn string_slice(list: &[String]) -> String {
    let items: Vec<String> = list.iter().map(|s| quoted(s)).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// utilerrors' aggregate: one error as it is, more in brackets.
fn aggregate(errs: &[FieldError]) -> String {
    match errs {
        [one] => one.0.clone(),
        many => format!(
            "[{}]",
            many.iter()
                .map(|e| e.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Go's time.Time String() of a UTC time.
fn go_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S +0000 UTC").to_string()
}

/// The node log query (upstream's nodeLogQuery).
#[derive(Clone, Debug, Default, PartialEq)]
struct NodeLogQuery {
    services: Vec<String>,
    files: Vec<String>,
    since: Option<Timestamp>,
    until: Option<Timestamp>,
    tail_lines: Option<i64>,
    boot: Option<i64>,
    pattern: String,
}

impl NodeLogQuery {
    fn has_options(&self) -> bool {
        self.since.is_some()
            || self.until.is_some()
            || self.tail_lines.is_some()
            || self.boot.is_some()
            || !self.pattern.is_empty()
    }

    /// newNodeLogQuery: None when the request names nothing to query.
    fn parse(query: &str) -> Result<Option<NodeLogQuery>, Vec<FieldError>> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.is_empty())
        };
        let mut q = NodeLogQuery::default();
        let mut errs = Vec::new();
        let queries: Vec<String> = pairs
            .iter()
            .filter(|(k, _)| k == "query")
            .map(|(_, v)| v.clone())
            .collect();
        for v in &queries {
            if v.contains(['/', '\\']) {
                q.files.push(v.clone());
            } else if !v.trim().is_empty() {
                q.services.push(v.clone());
            }
        }
        if !queries.is_empty() && q.files.is_empty() && q.services.is_empty() {
            errs.push(invalid(
                "query",
                &string_slice(&queries),
                "may not be empty",
            ));
        }
        for (key, slot) in [("sinceTime", &mut q.since), ("untilTime", &mut q.until)] {
            if let Some(v) = get(key) {
                match v.parse::<Timestamp>() {
                    Ok(t) => *slot = Some(t),
                    Err(_) => errs.push(invalid(key, &quoted(v), "invalid time format")),
                }
            }
        }
        for (key, slot) in [("boot", &mut q.boot), ("tailLines", &mut q.tail_lines)] {
            if let Some(v) = get(key) {
                match v.parse::<i64>() {
                    Ok(n) => *slot = Some(n),
                    Err(_) => errs.push(invalid(
                        key,
                        &quoted(v),
                        &format!("strconv.Atoi: parsing {}: invalid syntax", quoted(v)),
                    )),
                }
            }
        }
        if let Some(p) = get("pattern") {
            q.pattern = p.to_owned();
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok((q != NodeLogQuery::default()).then_some(q))
    }

    /// nodeLogQuery.validate.
    fn validate(&self, dir: &Path) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for s in &self.services {
            if s.len() > MAX_SERVICE_LENGTH {
                errs.push(invalid(
                    "query",
                    &quoted(s),
                    &format!("length must be less than {MAX_SERVICE_LENGTH}"),
                ));
            } else if !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:@".contains(&b))
            {
                errs.push(invalid(
                    "query",
                    &quoted(s),
                    "input contains unsupported characters",
                ));
            }
        }
        if self.services.len() > MAX_SERVICES {
            errs.push(FieldError(format!(
                "query: Too many: {}: must have at most {MAX_SERVICES} items",
                self.services.len()
            )));
        }
        match (self.files.len(), self.services.len()) {
            (0, 0) => errs.push(FieldError(
                "query: Required value: cannot be empty with options".into(),
            )),
            (f, s) if f > 0 && s > 0 => errs.push(invalid(
                "query",
                &quoted(&format!(
                    "[{}], [{}]",
                    self.files.join(" "),
                    self.services.join(" ")
                )),
                "cannot specify a file and service",
            )),
            (f, _) if f > 1 => errs.push(invalid(
                "query",
                &string_slice(&self.files),
                "cannot specify more than one file",
            )),
            (1, _) if self.has_options() => errs.push(invalid(
                "query",
                &string_slice(&self.files),
                "cannot specify file with options",
            )),
            (1, _) => {
                let rel = clean(&format!("/{}", self.files[0].trim_start_matches('/')));
                if let Err(e) = open_inside(dir, &rel) {
                    // As Go's os.Root.Stat words it.
                    let why = match e {
                        Refused::NotFound => "no such file or directory".to_owned(),
                        Refused::Outside => "path escapes from parent".to_owned(),
                        Refused::Io(e) => e.to_string(),
                    };
                    let detail = format!("statat {}: {why}", self.files[0]);
                    errs.push(invalid("query", &string_slice(&self.files), &detail));
                }
            }
            _ => {}
        }
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since > until
        {
            errs.push(invalid(
                "untilTime",
                &go_time(until),
                "must be after `sinceTime`",
            ));
        }
        if let Some(boot) = self.boot.filter(|b| *b > 0) {
            errs.push(invalid("boot", &boot.to_string(), "must be less than 1"));
        }
        if let Some(n) = self
            .tail_lines
            .filter(|n| !(0..=MAX_TAIL_LINES).contains(n))
        {
            errs.push(invalid(
                "tailLines",
                &n.to_string(),
                &format!("must be between 0 and {MAX_TAIL_LINES}, inclusive"),
            ));
        }
        if let Err(e) = regex::Regex::new(&self.pattern) {
            errs.push(invalid("pattern", &quoted(&self.pattern), &e.to_string()));
        }
        errs
    }

    /// journalctl's arguments for `services` (upstream's getLoggingCmd).
    fn journalctl_args(&self, services: &[String]) -> Vec<String> {
        let layout = |t: Timestamp| t.strftime("%Y-%-m-%-d %-H:%-M:%-S").to_string();
        let mut args: Vec<String> = ["--utc", "--no-pager", "--output=short-precise"]
            .map(String::from)
            .into();
        if let Some(t) = self.since {
            args.push(format!("--since={}", layout(t)));
        }
        if let Some(t) = self.until {
            args.push(format!("--until={}", layout(t)));
        }
        if let Some(n) = self.tail_lines {
            args.push("--pager-end".into());
            args.push(format!("--lines={n}"));
        }
        args.extend(
            services
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| format!("--unit={s}")),
        );
        if !self.pattern.is_empty() {
            args.push(format!("--grep={}", self.pattern));
        }
        if let Some(b) = self.boot {
            args.push("--boot".into());
            args.push(b.to_string());
        }
        args
    }

    /// The services' logs: journald's for those it knows, the heuristic
    /// files for the others (not with options), within the deadline;
    /// gzip-compressed when asked for.
    async fn serve_services(&self, dir: &Path, gzip: bool) -> Response<Body> {
        let work = async {
            let mut out: Vec<u8> = Vec::new();
            let units = tokio::process::Command::new("journalctl")
                .args(["--field", "_SYSTEMD_UNIT"])
                .output()
                .await
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let (native, files): (Vec<String>, Vec<String>) = self
                .services
                .iter()
                .cloned()
                .partition(|s| units.contains(&format!("{s}.service")));
            if !native.is_empty() {
                match tokio::process::Command::new("journalctl")
                    .args(self.journalctl_args(&native))
                    .output()
                    .await
                {
                    Ok(o) => {
                        out.extend_from_slice(&o.stdout);
                        out.extend_from_slice(&o.stderr);
                    }
                    Err(_) if self.boot.unwrap_or(0) == 0 => {
                        out.extend_from_slice(b"\nerror: journal output not available\n")
                    }
                    Err(_) => {}
                }
            }
            if !files.is_empty() && self.has_options() {
                let _ = write!(
                    Adapter(&mut out),
                    "\noptions present and query resolved to log files for [{}]\ntry without specifying options\n",
                    files.join(" ")
                );
                return out;
            }
            for service in files {
                let dir = dir.to_owned();
                let read = kubelet_tasks::off_thread(move || heuristic_log(&dir, &service))
                    .await
                    .unwrap_or_else(|e| Err(io::Error::other(e).to_string()));
                match read {
                    Ok(bytes) => out.extend_from_slice(&bytes),
                    Err(line) => out.extend_from_slice(line.as_bytes()),
                }
            }
            out
        };
        let out = match tokio::time::timeout(QUERY_DEADLINE, work).await {
            Ok(out) => out,
            Err(_) => b"\ncontext error: context deadline exceeded\n".to_vec(),
        };
        let mut resp;
        if gzip {
            use std::io::Write as _;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let compressed = gz.write_all(&out).and_then(|()| gz.finish());
            resp = Response::new(full(compressed.unwrap_or_default()));
            resp.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        } else {
            resp = Response::new(full(out));
        }
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain;charset=UTF-8"),
        );
        resp
    }
}

/// `write!` into a byte vector.
struct Adapter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Adapter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// upstream's heuristicsCopyFileLogs: `<service>`, `<service>.log`, then
/// `<service>/<service>.log` in the directory; the first that is a file.
fn heuristic_log(dir: &Path, service: &str) -> Result<Vec<u8>, String> {
    let mut last = None;
    for name in [
        service.to_owned(),
        format!("{service}.log"),
        format!("{service}/{service}.log"),
    ] {
        match open_inside(dir, &clean(&format!("/{name}"))) {
            Ok((fd, _)) => {
                let mut file = std::fs::File::from(fd);
                if file.metadata().is_ok_and(|m| m.is_dir()) {
                    last = Some(Refused::NotFound);
                    continue;
                }
                let mut bytes = Vec::new();
                return io::Read::read_to_end(&mut file, &mut bytes)
                    .map(|_| bytes)
                    .map_err(|e| format!("\nerror getting log for {service}: {e}\n"));
            }
            Err(Refused::NotFound) => last = Some(Refused::NotFound),
            Err(e) => {
                last = Some(e);
                break;
            }
        }
    }
    Err(match last {
        Some(Refused::NotFound) | None => format!("\nlog not found for {service}\n"),
        Some(Refused::Outside) => {
            format!("\nerror getting log for {service}: path escapes from parent\n")
        }
        Some(Refused::Io(e)) => format!("\nerror getting log for {service}: {e}\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(
        s: &Settings,
        path: &str,
        query: Option<&str>,
    ) -> (StatusCode, String, Option<String>) {
        let resp = serve(s, path, query, false).await;
        let status = resp.status();
        let location = resp
            .headers()
            .get(header::LOCATION)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            String::from_utf8_lossy(&body).into_owned(),
            location,
        )
    }

    /// A log directory with a file, a sub-directory, a link inside and a
    /// link that leads out, beside a secret.
    fn tree() -> (tempfile::TempDir, Settings) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        std::fs::create_dir_all(dir.join("pods/ns_p_u/c")).unwrap();
        std::fs::create_dir_all(dir.join("containers")).unwrap();
        std::fs::create_dir_all(dir.join("svc")).unwrap();
        std::fs::write(dir.join("syslog"), "line 1\nline 2\n").unwrap();
        std::fs::write(dir.join("pods/ns_p_u/c/0.log"), "from the pod\n").unwrap();
        std::fs::write(dir.join("svc/svc.log"), "svc says hi\n").unwrap();
        std::fs::write(dir.join("a<b>.log"), "odd name\n").unwrap();
        std::fs::write(tmp.path().join("secret"), "not yours\n").unwrap();
        std::os::unix::fs::symlink(
            dir.join("pods/ns_p_u/c/0.log"),
            dir.join("containers/p_ns_c-abcdef.log"),
        )
        .unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), dir.join("escape.log")).unwrap();
        std::os::unix::fs::symlink("/", dir.join("root")).unwrap();
        let settings = Settings {
            handler: true,
            query: false,
            dir,
        };
        (tmp, settings)
    }

    #[tokio::test]
    async fn serves_the_directory_as_go_file_server_and_never_outside() {
        let (_tmp, s) = tree();
        let (code, body, _) = get(&s, "/logs/", None).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            body,
            "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n\
             <a href=\"a%3Cb%3E.log\">a&lt;b&gt;.log</a>\n\
             <a href=\"containers/\">containers/</a>\n\
             <a href=\"escape.log\">escape.log</a>\n\
             <a href=\"pods/\">pods/</a>\n\
             <a href=\"root\">root</a>\n\
             <a href=\"svc/\">svc/</a>\n\
             <a href=\"syslog\">syslog</a>\n</pre>\n"
        );
        assert_eq!(get(&s, "/logs/syslog", None).await.1, "line 1\nline 2\n");
        // A link that stays inside is followed.
        assert_eq!(
            get(&s, "/logs/containers/p_ns_c-abcdef.log", None).await.1,
            "from the pod\n"
        );
        // Redirects as Go's file server makes them.
        assert_eq!(
            get(&s, "/logs/pods", None).await,
            (
                StatusCode::MOVED_PERMANENTLY,
                String::new(),
                Some("pods/".into())
            )
        );
        assert_eq!(
            get(&s, "/logs/syslog/", None).await,
            (
                StatusCode::MOVED_PERMANENTLY,
                String::new(),
                Some("../syslog".into())
            )
        );
        for (path, code) in [
            ("/logs/escape.log", StatusCode::FORBIDDEN),
            ("/logs/root/etc/passwd", StatusCode::FORBIDDEN),
            ("/logs/../secret", StatusCode::NOT_FOUND),
            ("/logs/%2e%2e/secret", StatusCode::NOT_FOUND),
            ("/logs/nope", StatusCode::NOT_FOUND),
            ("/logs", StatusCode::NOT_FOUND),
        ] {
            let (got, body, _) = get(&s, path, None).await;
            assert_eq!(got, code, "{path}");
            assert!(
                !body.contains("not yours") && !body.contains("root:"),
                "{path}: {body}"
            );
        }
        let off = Settings {
            handler: false,
            ..s.clone()
        };
        assert_eq!(
            get(&off, "/logs/", None).await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
    }

    #[tokio::test]
    async fn node_log_query_as_upstream() {
        let (_tmp, s) = tree();
        // Off: the query is no more than a file server's query string.
        assert_eq!(
            get(&s, "/logs/", Some("query=syslog")).await.0,
            StatusCode::OK
        );
        let s = Settings { query: true, ..s };
        let cases: &[(&str, &str, StatusCode, &str)] = &[
            (
                "/logs/",
                "query=/syslog",
                StatusCode::OK,
                "line 1\nline 2\n",
            ),
            // A service with no journal: its file, by upstream's heuristics.
            ("/logs/", "query=svc", StatusCode::OK, "svc says hi\n"),
            (
                "/logs/",
                "query=nosuch",
                StatusCode::OK,
                "\nlog not found for nosuch\n",
            ),
            (
                "/logs/",
                "query=svc&tailLines=5",
                StatusCode::OK,
                "\noptions present and query resolved to log files for [svc]\ntry without specifying options\n",
            ),
            (
                "/logs/",
                "query=%20%20",
                StatusCode::BAD_REQUEST,
                "query: Invalid value: []string{\"  \"}: may not be empty\n",
            ),
            (
                "/logs/",
                "query=svc&sinceTime=yesterday",
                StatusCode::BAD_REQUEST,
                "sinceTime: Invalid value: \"yesterday\": invalid time format\n",
            ),
            (
                "/logs/syslog",
                "query=svc",
                StatusCode::NOT_ACCEPTABLE,
                "path not allowed in query mode\n",
            ),
            (
                "/logs/",
                "query=svc&tailLines=200000",
                StatusCode::NOT_ACCEPTABLE,
                "tailLines: Invalid value: 200000: must be between 0 and 100000, inclusive\n",
            ),
            (
                "/logs/",
                "query=/syslog&query=svc",
                StatusCode::NOT_ACCEPTABLE,
                "query: Invalid value: \"[/syslog], [svc]\": cannot specify a file and service\n",
            ),
            (
                "/logs/",
                "query=/escape.log",
                StatusCode::NOT_ACCEPTABLE,
                "query: Invalid value: []string{\"/escape.log\"}: statat /escape.log: path escapes from parent\n",
            ),
            (
                "/logs/",
                "query=a%20b",
                StatusCode::NOT_ACCEPTABLE,
                "query: Invalid value: \"a b\": input contains unsupported characters\n",
            ),
            (
                "/logs/",
                "query=svc&boot=1&tailLines=-1",
                StatusCode::NOT_ACCEPTABLE,
                "[boot: Invalid value: 1: must be less than 1, tailLines: Invalid value: -1: must be between 0 and 100000, inclusive]\n",
            ),
        ];
        for (path, query, code, want) in cases {
            let (got, body, _) = get(&s, path, Some(query)).await;
            assert_eq!((got, body.as_str()), (*code, *want), "{path}?{query}");
        }
    }

    #[test]
    fn journalctl_arguments_as_upstream() {
        let q = NodeLogQuery {
            services: vec!["kubelet".into()],
            since: "2026-12-01T08:03:04Z".parse().ok(),
            tail_lines: Some(10),
            boot: Some(-1),
            pattern: "err".into(),
            ..Default::default()
        };
        assert_eq!(
            q.journalctl_args(&q.services),
            [
                "--utc",
                "--no-pager",
                "--output=short-precise",
                "--since=2026-12-1 8:3:4",
                "--pager-end",
                "--lines=10",
                "--unit=kubelet",
                "--grep=err",
                "--boot",
                "-1"
            ]
        );
    }
}
