//! A directory watched with inotify, for what the kubelet reads from files
//! (static pod manifests, the serving certificate): a change resolves
//! [`DirWatcher::changed`] at once, a burst of writes is folded into one.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use inotify::{EventMask, EventOwned, EventStream, Inotify, WatchDescriptor, WatchMask};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// After a bare create (a file likely still being written): how long the
/// directory must stay quiet before it is rescanned, and the longest wait.
const DEBOUNCE_QUIET: Duration = Duration::from_millis(50);
const DEBOUNCE_MAX: Duration = Duration::from_secs(1);

/// A directory watched with inotify: at most one watch, on the directory
/// itself, re-added when it goes.
pub struct DirWatcher {
    /// What is watched, for the log.
    what: &'static str,
    /// None when inotify is unavailable (or broke): periodic rescans only.
    stream: Option<EventStream<[u8; 4096]>>,
    watch: Option<WatchDescriptor>,
    /// The last error adding the watch, to log each distinct failure once.
    last_error: Option<io::ErrorKind>,
}

impl DirWatcher {
    pub fn new(what: &'static str) -> Self {
        let stream = Inotify::init().and_then(|inotify| inotify.into_event_stream([0u8; 4096]));
        let stream = match stream {
            Ok(stream) => Some(stream),
            Err(e) => {
                tracing::warn!(error = %e, what, "inotify unavailable: rescanned periodically only");
                None
            }
        };
        DirWatcher {
            what,
            stream,
            watch: None,
            last_error: None,
        }
    }

    /// Watch `dir` unless it is watched already (a missing one is tried
    /// again at the next call).
    pub fn ensure_watch(&mut self, dir: &Path) {
        let Some(stream) = self.stream.as_ref() else {
            return;
        };
        if self.watch.is_some() {
            return;
        }
        let mask = WatchMask::CREATE
            | WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::DELETE
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR;
        match stream.watches().add(dir, mask) {
            Ok(wd) => {
                tracing::debug!(dir = %dir.display(), what = self.what, "watching with inotify");
                self.watch = Some(wd);
                self.last_error = None;
            }
            Err(e) => {
                if self.last_error != Some(e.kind()) && e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), what = self.what, error = %e, "cannot watch the directory; relying on periodic rescans");
                }
                self.last_error = Some(e.kind());
            }
        }
    }

    /// Resolves when the directory changed; never resolves without inotify.
    /// A finished write, a rename or a removal resolves at once (no added
    /// latency for the common case); a bare create, usually a file still
    /// being written, waits for the burst to go quiet (at most
    /// DEBOUNCE_MAX) so a half-written manifest is not reported. Events
    /// already queued are folded into the same rescan.
    pub async fn changed(&mut self) {
        let Some(stream) = self.stream.as_mut() else {
            return std::future::pending().await;
        };
        let first = stream.next().await;
        let only_created = matches!(&first, Some(Ok(e)) if e.mask.contains(EventMask::CREATE));
        if !self.note(first) {
            return;
        }
        if only_created {
            let deadline = Instant::now() + DEBOUNCE_MAX;
            loop {
                let Some(stream) = self.stream.as_mut() else {
                    return;
                };
                let quiet_until = (Instant::now() + DEBOUNCE_QUIET).min(deadline);
                match tokio::time::timeout_at(quiet_until, stream.next()).await {
                    Ok(event) => {
                        let settled =
                            matches!(&event, Some(Ok(e)) if !e.mask.contains(EventMask::CREATE));
                        if !self.note(event) || settled {
                            break;
                        }
                    }
                    Err(_quiet) => break,
                }
                if Instant::now() >= deadline {
                    break;
                }
            }
        }
        // Whatever else is already queued belongs to this rescan too.
        while let Some(stream) = self.stream.as_mut()
            && let Some(event) = stream.next().now_or_never()
            && self.note(event)
        {}
    }

    /// Records one stream item; false when the stream is gone.
    fn note(&mut self, item: Option<io::Result<EventOwned>>) -> bool {
        match item {
            Some(Ok(event)) => {
                let ours = self.watch.as_ref() == Some(&event.wd);
                if ours && event.mask.contains(EventMask::MOVE_SELF) {
                    // The watch would follow the directory to its new name: drop it, and
                    // watch whatever is at the configured path from the next rescan on.
                    if let (Some(stream), Some(wd)) = (self.stream.as_ref(), self.watch.take()) {
                        let _ = stream.watches().remove(wd);
                    }
                }
                if ours
                    && event
                        .mask
                        .intersects(EventMask::IGNORED | EventMask::DELETE_SELF)
                {
                    self.watch = None;
                }
                tracing::trace!(what = self.what, mask = ?event.mask, name = ?event.name, "directory event");
                true
            }
            Some(Err(e)) => {
                tracing::warn!(what = self.what, error = %e, "reading inotify events failed: rescanned periodically only");
                self.stream = None;
                self.watch = None;
                false
            }
            None => {
                self.stream = None;
                self.watch = None;
                false
            }
        }
    }
}

/// Call `changed` whenever the content of one of `files` changes: at once
/// on an inotify event in their directories, at the latest every `period`
/// (a file replaced where no event reaches, or inotify unavailable); until
/// `cancel` fires.
pub async fn on_files_change(
    files: Vec<PathBuf>,
    what: &'static str,
    period: Duration,
    cancel: CancellationToken,
    mut changed: impl FnMut(),
) {
    let read = || {
        files
            .iter()
            .map(|f| std::fs::read(f).ok())
            .collect::<Vec<_>>()
    };
    let mut seen = read();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in files.iter().filter_map(|f| f.parent()) {
        if !dirs.iter().any(|d| d == dir) {
            dirs.push(dir.to_owned());
        }
    }
    let mut watchers: Vec<(PathBuf, DirWatcher)> = dirs
        .into_iter()
        .map(|d| (d, DirWatcher::new(what)))
        .collect();
    loop {
        for (dir, w) in &mut watchers {
            w.ensure_watch(dir);
        }
        let any_changed = async {
            if watchers.is_empty() {
                std::future::pending::<()>().await;
            }
            futures::future::select_all(watchers.iter_mut().map(|(_, w)| Box::pin(w.changed())))
                .await;
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
            _ = any_changed => {}
        }
        let now = read();
        if now != seen {
            seen = now;
            changed();
        }
    }
}
