//! The static pod directory source (upstream's `pkg/kubelet/config/file.go` and
//! `file_linux.go`): watch a directory of manifests and report the pods it describes.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::manifest::{Origin, parse_static_pods};
use kubelet_core::types::SOURCE_FILE;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::SourceSnapshot;
use crate::clock::Clock;
use crate::dirwatch::DirWatcher;

/// Watches a directory of static pod manifests.
#[derive(Clone, Debug)]
pub struct FileSource {
    pub dir: PathBuf,
    pub node_name: String,
    /// Period of the full rescan that backs up inotify (`fileCheckFrequency`).
    pub check_every: Duration,
    pub clock: Clock,
}

impl FileSource {
    /// Watch `dir` with inotify (create, close_write, moved_to/from, delete) and rescan the
    /// whole dir on any event and every `check_every`; send a SourceSnapshot after each rescan
    /// whose pod set differs from the last sent one (and always the first, even if the dir is
    /// missing or empty). Ends when `cancel` fires (or the receiver is gone).
    ///
    /// When the directory cannot be watched (it does not exist yet, or inotify is
    /// unavailable) the periodic rescan carries on alone, and the watch is retried at every
    /// rescan.
    pub async fn run(self, tx: mpsc::Sender<SourceSnapshot>, cancel: CancellationToken) {
        let check_every = self.check_every.max(Duration::from_millis(1));
        let mut ticker = tokio::time::interval_at(Instant::now() + check_every, check_every);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watcher = DirWatcher::new("static pod directory");
        let mut files = ManifestFiles::default();
        let mut last_sent: Option<Vec<Pod>> = None;
        let mut dir_state = DirState::Present;

        tracing::info!(dir = %self.dir.display(), every = ?check_every, "watching static pod directory");
        loop {
            // Watch first, then scan: a change landing in between is seen by the next rescan.
            watcher.ensure_watch(&self.dir);
            let Some((Scan { pods, state, .. }, remembered)) =
                rescan(self.dir.clone(), self.node_name.clone(), files, self.clock).await
            else {
                return; // the runtime is shutting down
            };
            files = remembered;
            match (dir_state, state) {
                (DirState::Present, DirState::Missing) => tracing::warn!(
                    dir = %self.dir.display(),
                    "static pod directory does not exist; checking again every {check_every:?}"
                ),
                (DirState::Missing, DirState::Present) => {
                    tracing::info!(dir = %self.dir.display(), "static pod directory appeared")
                }
                _ => {}
            }
            dir_state = state;

            if last_sent.as_ref() != Some(&pods) {
                tracing::debug!(pods = pods.len(), "static pods changed");
                let snapshot = SourceSnapshot {
                    source: SOURCE_FILE,
                    pods: pods.clone(),
                };
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    sent = tx.send(snapshot) => if sent.is_err() { return },
                }
                last_sent = Some(pods);
            }

            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
                _ = watcher.changed() => {}
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DirState {
    Present,
    Missing,
    /// Exists but cannot be listed: the last good pods are kept.
    Unreadable,
}

/// Upstream's maxConfigLength (`pkg/kubelet/config/common.go`): a manifest file of 10 MiB
/// or more is refused without being read. Real manifests are a few KiB (the API server
/// takes no object over about 1.5 MiB); the limit keeps a stray large file in the directory
/// from costing its size in memory and parse time.
pub const MAX_MANIFEST_BYTES: u64 = 10 << 20;

/// File systems keep coarse timestamps: a file changed within this long of being read may
/// change again with the same size and times. Such a file is read again at the next
/// rescan; one whose last change is older is not read again until its stat changes.
const RACY_WINDOW: Duration = Duration::from_secs(2);

/// What a file's stat says about its content: while it stays the same, so does the content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileKey {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the file last changed long enough before `now` (ns since the epoch) for its
    /// stat to be trusted to show the next change.
    fn settled(&self, now: i64) -> bool {
        let (secs, nanos) = self.ctime;
        let changed = secs.saturating_mul(1_000_000_000).saturating_add(nanos);
        changed < now.saturating_sub(RACY_WINDOW.as_nanos() as i64)
    }
}

/// What the file source remembers of one manifest file between rescans.
#[derive(Clone, Debug, Default)]
struct FileMemory {
    /// The stat of the version last looked at.
    seen: Option<FileKey>,
    /// Whether that version was read (or refused) for good: not to be read again while
    /// its stat stays `seen`.
    settled: bool,
    /// The pods of the file's last good version.
    pods: Option<Vec<Pod>>,
    /// The problem last reported for the file, not reported again for the same version.
    reported: Option<String>,
}

/// What the file source remembers of the directory between rescans, per file.
#[derive(Clone, Debug, Default)]
pub struct ManifestFiles {
    files: BTreeMap<PathBuf, FileMemory>,
}

impl ManifestFiles {
    fn pods(&self) -> Vec<Pod> {
        self.files
            .values()
            .filter_map(|f| f.pods.as_ref())
            .flatten()
            .cloned()
            .collect()
    }
}

/// The result of one rescan.
#[derive(Debug)]
pub struct Scan {
    pods: Vec<Pod>,
    state: DirState,
    /// Bytes read from manifest files (unchanged files are not read).
    pub bytes_read: u64,
    /// Files parsed.
    pub parsed: usize,
    /// Problems reported (each once per version of a file).
    pub reported: usize,
}

/// Runs [`scan`] off the async threads, moving the per-file state in and out.
async fn rescan(
    dir: PathBuf,
    node_name: String,
    mut files: ManifestFiles,
    clock: Clock,
) -> Option<(Scan, ManifestFiles)> {
    let scanned = kubelet_tasks::off_thread(move || {
        let scan = scan(&dir, &node_name, &mut files, clock.now_nanos());
        (scan, files)
    })
    .await;
    match scanned {
        Ok(result) => Some(result),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

/// One rescan (pure-ish, testable; `now` is the wall clock in ns since the epoch): every
/// regular file in dir (skip names starting with '.', skip dirs) is parsed with
/// manifest::parse_static_pods, unless its stat is that of the version already read (and
/// that version is older than [`RACY_WINDOW`]). `files` keeps, per file, the pods from its
/// last good version: a file that now fails to parse, cannot be read, or is
/// [`MAX_MANIFEST_BYTES`] or more (refused unread), is reported (tracing::warn! naming the
/// file and field, once per version) and its last good pods are kept (so a half-written
/// edit does not kill a running pod); a deleted file's pods go away. A missing dir gives an
/// empty set ([`FileSource::run`] warns once when it goes missing). A dir that exists but
/// cannot be listed keeps every file's last good pods.
///
/// Files are read in name order, so the result is deterministic.
pub fn scan_dir(dir: &Path, node_name: &str, files: &mut ManifestFiles, now: i64) -> Scan {
    scan(dir, node_name, files, now)
}

fn scan(dir: &Path, node_name: &str, files: &mut ManifestFiles, now: i64) -> Scan {
    let mut scan = Scan {
        pods: Vec::new(),
        state: DirState::Present,
        bytes_read: 0,
        parsed: 0,
        reported: 0,
    };
    let keep_all = |files: &ManifestFiles, mut scan: Scan, e: &io::Error| {
        tracing::warn!(
            dir = %dir.display(), error = %e,
            "cannot list the static pod directory; keeping the pods last read from it"
        );
        scan.pods = files.pods();
        scan.state = DirState::Unreadable;
        scan
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::debug!(dir = %dir.display(), "static pod directory does not exist");
            files.files.clear();
            scan.state = DirState::Missing;
            return scan;
        }
        Err(e) => return keep_all(files, scan, &e),
    };

    // Files to look at, and files that exist but could not even be stat'ed.
    let mut listed = Vec::new();
    let mut present = BTreeSet::new();
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return keep_all(files, scan, &e),
        };
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        // Follows symlinks: a link to a manifest is a manifest.
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => listed.push((path, FileKey::of(&meta))),
            Ok(_) => {} // directories, sockets, ...
            Err(e) if e.kind() == io::ErrorKind::NotFound => {} // gone, or a dangling link
            Err(e) => {
                let memory = files.files.entry(path.clone()).or_default();
                if report(memory, format!("cannot stat: {e}"), None) {
                    tracing::warn!(file = %path.display(), error = %e, "cannot stat static pod file; keeping its last good pods");
                    scan.reported += 1;
                }
                present.insert(path);
            }
        }
    }
    listed.sort_by(|a, b| a.0.cmp(&b.0));

    for (path, listed_key) in listed {
        let memory = files.files.entry(path.clone()).or_default();
        if memory.settled && memory.seen == Some(listed_key) {
            present.insert(path); // unchanged since it was read
            continue;
        }
        let name = path.to_string_lossy().into_owned();
        let (key, content) = match read_manifest(&path) {
            Ok(read) => read,
            Err(ReadError::Gone) => continue, // removed meanwhile
            Err(ReadError::Io(e)) => {
                // Tried again at the next rescan.
                memory.settled = false;
                if report(memory, format!("cannot read: {e}"), None) {
                    tracing::warn!(file = %name, error = %e, "cannot read static pod file; keeping its last good pods");
                    scan.reported += 1;
                }
                present.insert(path);
                continue;
            }
            Err(ReadError::TooLarge { key, read }) => {
                scan.bytes_read += read;
                let problem = format!("{} bytes, the limit is {MAX_MANIFEST_BYTES}", key.size);
                if report(memory, problem, Some(key)) {
                    tracing::warn!(file = %name, size = key.size, limit = MAX_MANIFEST_BYTES, "static pod file is too large, not read; keeping its last good pods");
                    scan.reported += 1;
                }
                memory.settled = key.settled(now);
                present.insert(path);
                continue;
            }
        };
        scan.bytes_read += content.len() as u64;
        memory.settled = key.settled(now);
        present.insert(path);
        let Ok(text) = String::from_utf8(content) else {
            if report(memory, "not UTF-8".into(), Some(key)) {
                tracing::warn!(file = %name, "static pod file is not UTF-8; keeping its last good pods");
                scan.reported += 1;
            }
            continue;
        };
        scan.parsed += 1;
        match parse_static_pods(Origin::File(&name), &text, node_name) {
            Ok(pods) => {
                memory.seen = Some(key);
                memory.pods = Some(pods);
                memory.reported = None;
            }
            Err(e) => {
                if report(memory, e.to_string(), Some(key)) {
                    tracing::warn!(
                        file = %e.file,
                        document = e.doc,
                        field = %e.field,
                        error = %e.message,
                        kept = memory.pods.as_ref().map_or(0, Vec::len),
                        "invalid static pod manifest; keeping the pods from its last good version"
                    );
                    scan.reported += 1;
                }
            }
        }
    }
    files.files.retain(|path, _| present.contains(path));
    scan.pods = files.pods();
    scan
}

/// Records `problem` with the file (at stat `key`, if known); true when it is to be
/// reported: a new version of the file, or a problem other than the one last reported.
fn report(memory: &mut FileMemory, problem: String, key: Option<FileKey>) -> bool {
    let new_version = key.is_some() && memory.seen != key;
    if key.is_some() {
        memory.seen = key;
    }
    let again = memory.reported.as_ref() == Some(&problem);
    memory.reported = Some(problem);
    new_version || !again
}

#[derive(Debug)]
enum ReadError {
    /// Removed since it was listed.
    Gone,
    /// [`MAX_MANIFEST_BYTES`] or more: refused, unread when its stat said so (`read` is 0),
    /// else after reading up to the limit.
    TooLarge {
        key: FileKey,
        read: u64,
    },
    Io(io::Error),
}

/// Reads a manifest file and the stat of what was read: never more than
/// [`MAX_MANIFEST_BYTES`], and nothing at all when its size says it is too large.
fn read_manifest(path: &Path) -> Result<(FileKey, Vec<u8>), ReadError> {
    use std::io::Read;
    let io_error = |e: io::Error| {
        if e.kind() == io::ErrorKind::NotFound {
            ReadError::Gone
        } else {
            ReadError::Io(e)
        }
    };
    let file = std::fs::File::open(path).map_err(io_error)?;
    let key = FileKey::of(&file.metadata().map_err(io_error)?);
    if key.size >= MAX_MANIFEST_BYTES {
        return Err(ReadError::TooLarge { key, read: 0 });
    }
    let mut content = Vec::with_capacity(key.size as usize);
    // A file that grew since its stat is still read no further than the limit.
    file.take(MAX_MANIFEST_BYTES)
        .read_to_end(&mut content)
        .map_err(io_error)?;
    if content.len() as u64 >= MAX_MANIFEST_BYTES {
        let read = content.len() as u64;
        return Err(ReadError::TooLarge {
            key: FileKey { size: read, ..key },
            read,
        });
    }
    Ok((key, content))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use kubelet_core::types::PodUid;
    use tokio::time::timeout;

    use super::*;

    const NODE: &str = "node1";
    const WAIT: Duration = Duration::from_secs(10);

    fn manifest(name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
        )
    }

    /// Writes through a dot-file and a rename, as careful tools do.
    fn write_atomically(dir: &Path, name: &str, content: &str) {
        let tmp = dir.join(format!(".{name}.tmp"));
        fs::write(&tmp, content).unwrap();
        fs::rename(&tmp, dir.join(name)).unwrap();
    }

    fn summary(pods: &[Pod]) -> Vec<(String, String)> {
        pods.iter()
            .map(|p| {
                let image = p.spec.as_ref().unwrap().containers[0]
                    .image
                    .clone()
                    .unwrap();
                (p.metadata.name.clone().unwrap(), image)
            })
            .collect()
    }

    fn expect(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(n, i)| (format!("{n}-{NODE}"), i.to_string()))
            .collect()
    }

    /// A rescan right after the files were written: none of them is settled yet.
    fn rescan_now(dir: &Path, files: &mut ManifestFiles) -> Vec<Pod> {
        scan_dir(dir, NODE, files, Clock::System.now_nanos()).pods
    }

    /// A rescan long after the files were written.
    fn rescan_later(dir: &Path, files: &mut ManifestFiles) -> Scan {
        scan_dir(
            dir,
            NODE,
            files,
            Clock::System.now_nanos() + 3600 * 1_000_000_000,
        )
    }

    #[test]
    fn scan_keeps_last_good_and_forgets_deleted_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut files = ManifestFiles::default();
        assert_eq!(rescan_now(dir, &mut files), []);

        fs::write(dir.join("b.yaml"), manifest("b", "img:1")).unwrap();
        fs::write(dir.join("a.json"), r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"img:1"}]}}"#).unwrap();
        fs::write(dir.join(".hidden.yaml"), manifest("hidden", "img:1")).unwrap();
        fs::create_dir(dir.join("sub.yaml")).unwrap();
        fs::write(dir.join("sub.yaml").join("x.yaml"), manifest("x", "img:1")).unwrap();
        fs::write(dir.join("empty.yaml"), "").unwrap();
        let pods = rescan_now(dir, &mut files);
        assert_eq!(summary(&pods), expect(&[("a", "img:1"), ("b", "img:1")]));

        // Breaking b keeps its last good pods; editing a is seen.
        fs::write(dir.join("b.yaml"), "apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers:\n  - name: c\n    image: ''\n").unwrap();
        fs::write(dir.join("a.json"), manifest("a", "img:2")).unwrap();
        let pods = rescan_now(dir, &mut files);
        assert_eq!(summary(&pods), expect(&[("a", "img:2"), ("b", "img:1")]));
        // Not UTF-8: same.
        fs::write(dir.join("b.yaml"), [0xff, 0xfe, 0x00]).unwrap();
        let pods = rescan_now(dir, &mut files);
        assert_eq!(summary(&pods), expect(&[("a", "img:2"), ("b", "img:1")]));

        // A file that never parsed contributes nothing.
        fs::write(dir.join("c.yaml"), "kind: Pod\n").unwrap();
        assert_eq!(rescan_now(dir, &mut files).len(), 2);

        // Deleting the broken file drops its pods.
        fs::remove_file(dir.join("b.yaml")).unwrap();
        let pods = rescan_now(dir, &mut files);
        assert_eq!(summary(&pods), expect(&[("a", "img:2")]));
        assert_eq!(files.files.len(), 3, "a.json, empty.yaml and c.yaml");

        // A dangling symlink is skipped; a link to a manifest is read.
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling.yaml")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("l.yaml"), manifest("l", "img:1")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("l.yaml"), dir.join("link.yaml")).unwrap();
        let pods = rescan_now(dir, &mut files);
        assert_eq!(summary(&pods), expect(&[("a", "img:2"), ("l", "img:1")]));

        // The directory going away empties everything.
        drop(tmp);
        let gone = outside.path().join("missing");
        assert_eq!(rescan_now(&gone, &mut files), []);
        assert!(files.files.is_empty());
    }

    /// A file is read again only when its stat changes; a broken one is reported once per
    /// version, however often it is rescanned.
    #[test]
    fn unchanged_files_are_not_read_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut files = ManifestFiles::default();
        let good = manifest("a", "img:1");
        let broken = "apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: []}\n";
        fs::write(dir.join("a.yaml"), &good).unwrap();
        fs::write(dir.join("b.yaml"), broken).unwrap();

        let first = rescan_later(dir, &mut files);
        assert_eq!(summary(&first.pods), expect(&[("a", "img:1")]));
        assert_eq!((first.parsed, first.reported), (2, 1));
        assert_eq!(first.bytes_read, (good.len() + broken.len()) as u64);
        for _ in 0..3 {
            let again = rescan_later(dir, &mut files);
            assert_eq!(summary(&again.pods), expect(&[("a", "img:1")]));
            assert_eq!((again.bytes_read, again.parsed, again.reported), (0, 0, 0));
        }

        // A new version of the broken file is read and reported, once.
        let broken2 = format!("{broken}# still broken\n");
        fs::write(dir.join("b.yaml"), &broken2).unwrap();
        let changed = rescan_later(dir, &mut files);
        assert_eq!(
            (changed.bytes_read, changed.parsed, changed.reported),
            (broken2.len() as u64, 1, 1)
        );
        assert_eq!(rescan_later(dir, &mut files).reported, 0);
        // Replaced by a good file through a rename (a new inode): read.
        write_atomically(dir, "b.yaml", &manifest("b", "img:1"));
        let fixed = rescan_later(dir, &mut files);
        assert_eq!(
            summary(&fixed.pods),
            expect(&[("a", "img:1"), ("b", "img:1")])
        );
        assert_eq!((fixed.parsed, fixed.reported), (1, 0));
    }

    /// A file changed just before a rescan may change again without its stat changing: it
    /// is read at every rescan until it settles, but its problem is reported only once.
    #[test]
    fn recently_changed_files_are_read_again_and_reported_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut files = ManifestFiles::default();
        fs::write(dir.join("b.yaml"), "kind: Pod\n").unwrap();
        let now = Clock::System.now_nanos();
        let first = scan_dir(dir, NODE, &mut files, now);
        assert_eq!((first.parsed, first.reported), (1, 1));
        let again = scan_dir(dir, NODE, &mut files, now);
        assert_eq!((again.parsed, again.reported), (1, 0));
        let settled = rescan_later(dir, &mut files);
        assert_eq!((settled.parsed, settled.reported), (1, 0));
        let after = rescan_later(dir, &mut files);
        assert_eq!((after.parsed, after.reported), (0, 0));
    }

    /// A file of MAX_MANIFEST_BYTES or more is refused without being read, once per version;
    /// the pods of its last good version are kept.
    #[test]
    fn huge_files_are_refused_unread() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut files = ManifestFiles::default();
        fs::write(dir.join("a.yaml"), manifest("a", "img:1")).unwrap();
        let pods = rescan_later(dir, &mut files).pods;
        assert_eq!(summary(&pods), expect(&[("a", "img:1")]));

        // Grown to the limit (sparse: nothing is written, and reading it whole would cost
        // 10 MiB); the good version stays.
        let file = fs::OpenOptions::new()
            .write(true)
            .open(dir.join("a.yaml"))
            .unwrap();
        file.set_len(MAX_MANIFEST_BYTES).unwrap();
        let huge = rescan_later(dir, &mut files);
        assert_eq!(summary(&huge.pods), expect(&[("a", "img:1")]));
        assert_eq!((huge.bytes_read, huge.parsed, huge.reported), (0, 0, 1));
        let again = rescan_later(dir, &mut files);
        assert_eq!((again.bytes_read, again.parsed, again.reported), (0, 0, 0));

        // A byte under the limit is read (and here, being mostly NULs, is not a manifest).
        file.set_len(MAX_MANIFEST_BYTES - 1).unwrap();
        let under = rescan_later(dir, &mut files);
        assert_eq!(
            (under.bytes_read, under.parsed),
            (MAX_MANIFEST_BYTES - 1, 1)
        );
        // A new huge file never read contributes nothing.
        fs::File::create(dir.join("c.yaml"))
            .unwrap()
            .set_len(512 << 20)
            .unwrap();
        let big = rescan_later(dir, &mut files);
        assert_eq!((big.bytes_read, big.reported), (0, 1));
        assert_eq!(summary(&big.pods), expect(&[("a", "img:1")]));
    }

    async fn next(rx: &mut mpsc::Receiver<SourceSnapshot>) -> Vec<Pod> {
        let snapshot = timeout(WAIT, rx.recv())
            .await
            .expect("timed out waiting for a snapshot")
            .expect("file source ended");
        assert_eq!(snapshot.source, SOURCE_FILE);
        snapshot.pods
    }

    fn uid_of(pods: &[Pod], name: &str) -> PodUid {
        let full = format!("{name}-{NODE}");
        PodUid::of(
            pods.iter()
                .find(|p| p.metadata.name.as_deref() == Some(&full))
                .unwrap(),
        )
    }

    /// With an hour between rescans, every change below must come through inotify.
    #[tokio::test]
    async fn inotify_drives_snapshots() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let (tx, mut rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let source = FileSource {
            dir: dir.clone(),
            node_name: NODE.into(),
            check_every: Duration::from_secs(3600),
            clock: Clock::System,
        };
        let task = tokio::spawn(source.run(tx, cancel.clone()));

        // The first snapshot comes even for an empty directory.
        assert_eq!(next(&mut rx).await, []);

        // A new file: Add.
        fs::write(dir.join("a.yaml"), manifest("a", "img:1")).unwrap();
        let pods = next(&mut rx).await;
        assert_eq!(summary(&pods), expect(&[("a", "img:1")]));
        let uid_a = uid_of(&pods, "a");

        // Edit in place: a new pod, as upstream's (the UID is the content's hash).
        fs::write(dir.join("a.yaml"), manifest("a", "img:2")).unwrap();
        let pods = next(&mut rx).await;
        assert_eq!(summary(&pods), expect(&[("a", "img:2")]));
        assert_ne!(uid_of(&pods, "a"), uid_a);
        let uid_a = uid_of(&pods, "a");

        // Break a, then add b: b arrives and a's last good pod is still there.
        write_atomically(
            &dir,
            "a.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: []}\n",
        );
        write_atomically(&dir, "b.yaml", &manifest("b", "img:1"));
        let pods = next(&mut rx).await;
        assert_eq!(summary(&pods), expect(&[("a", "img:2"), ("b", "img:1")]));
        assert_eq!(uid_of(&pods, "a"), uid_a);

        // Removing the broken file removes its pod.
        fs::remove_file(dir.join("a.yaml")).unwrap();
        let pods = next(&mut rx).await;
        assert_eq!(summary(&pods), expect(&[("b", "img:1")]));

        // Moving a file out of the directory removes its pod too.
        fs::rename(dir.join("b.yaml"), tmp.path().join(".b.yaml")).unwrap();
        assert_eq!(next(&mut rx).await, []);

        cancel.cancel();
        timeout(WAIT, task).await.expect("source stops").unwrap();
    }

    /// A directory that does not exist yet is picked up by the periodic rescan.
    #[tokio::test]
    async fn missing_directory_is_rescanned() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("manifests");
        let (tx, mut rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let source = FileSource {
            dir: dir.clone(),
            node_name: NODE.into(),
            check_every: Duration::from_millis(50),
            clock: Clock::System,
        };
        let task = tokio::spawn(source.run(tx, cancel.clone()));
        assert_eq!(next(&mut rx).await, []);

        fs::create_dir(&dir).unwrap();
        write_atomically(&dir, "a.yaml", &manifest("a", "img:1"));
        let pods = next(&mut rx).await;
        assert_eq!(summary(&pods), expect(&[("a", "img:1")]));

        // Once it exists the directory is watched as well as rescanned; removing it
        // removes its pods.
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(next(&mut rx).await, []);
        // ... and it is picked up again when it comes back.
        fs::create_dir(&dir).unwrap();
        write_atomically(&dir, "b.yaml", &manifest("b", "img:1"));
        let pods = next(&mut rx).await;
        assert_eq!(summary(&pods), expect(&[("b", "img:1")]));

        cancel.cancel();
        timeout(WAIT, task).await.expect("source stops").unwrap();
    }

    /// The source stops when its receiver goes away.
    #[tokio::test]
    async fn stops_without_a_receiver() {
        let tmp = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let source = FileSource {
            dir: tmp.path().to_path_buf(),
            node_name: NODE.into(),
            check_every: Duration::from_secs(3600),
            clock: Clock::System,
        };
        timeout(WAIT, source.run(tx, CancellationToken::new()))
            .await
            .expect("source stops");
    }
}
