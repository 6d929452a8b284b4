//! The container log manager (upstream's pkg/kubelet/logs): every
//! containerLogMonitorInterval, the log of each running container that has
//! reached containerLogMaxSize is rotated, at most containerLogMaxWorkers
//! at a time: its older rotated copies pruned and compressed as
//! `kubelet_core::logrotation` decides, the log renamed to
//! `<log>.<timestamp>` and reopened by the runtime (CRI
//! `ReopenContainerLog`). A reopen that fails renames the log back, so the
//! next round tries again; it is logged and is a Warning event on the
//! container. A log the runtime lost (renamed away, not reopened after a
//! crash) is reopened. Only files under podLogsDir are touched. Readers of
//! the log (`kubectl logs -f`, the `/var/log/containers` links, log agents)
//! follow the path, which the reopen makes again.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use kubelet_core::logrotation::{self, COMPRESS_SUFFIX, TMP_SUFFIX};
use kubelet_core::timefmt::compact_timestamp;
use kubelet_core::types::keys;
use kubelet_cri::client::{CriClient, CriError};
use kubelet_cri::v1 as cri;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::events::{Involved, Recorder, WARNING};
use crate::files::is_under;
use kubelet_tasks::blocking;

/// The reason of the event a failed rotation is.
pub const ROTATION_FAILED: &str = "ContainerLogRotationFailed";

/// containerLogMaxSize, containerLogMaxFiles, containerLogMaxWorkers and
/// containerLogMonitorInterval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPolicy {
    pub max_size: u64,
    pub max_files: usize,
    pub workers: usize,
    pub interval: Duration,
}

/// Why one container's log was not rotated.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("failed to get container status: {0}")]
    Status(#[source] CriError),
    #[error("{what} {path:?}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to reopen container log {id:?}: {source}")]
    Reopen {
        id: String,
        #[source]
        source: CriError,
    },
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RotateError + 'a {
    move |source| RotateError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

#[derive(Clone)]
pub struct ContainerLogManager {
    cri: CriClient,
    policy: LogPolicy,
    /// podLogsDir: no file outside it is renamed, compressed or removed.
    logs_root: PathBuf,
    events: Recorder,
    clock: Clock,
}

impl ContainerLogManager {
    pub fn new(
        cri: CriClient,
        policy: LogPolicy,
        logs_root: PathBuf,
        events: Recorder,
        clock: Clock,
    ) -> Self {
        ContainerLogManager {
            cri,
            policy,
            logs_root,
            events,
            clock,
        }
    }

    /// Rotate every interval until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.policy.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.rotate_logs().await {
                tracing::warn!(error = %e, "Failed to rotate container logs");
            }
        }
    }

    /// One round: every running container's log looked at, rotated when
    /// due. Returns how many were rotated.
    pub async fn rotate_logs(&self) -> Result<usize, CriError> {
        let running = self
            .cri
            .list_containers(Some(cri::ContainerFilter {
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }))
            .await?;
        let rotated = futures::stream::iter(running)
            .map(|c| async move {
                match self.rotate_container(&c.id).await {
                    Ok(rotated) => rotated,
                    Err(e) => {
                        tracing::error!(container = %c.id, error = %e, "Failed to rotate log for container");
                        self.report(&c, &e);
                        false
                    }
                }
            })
            .buffer_unordered(self.policy.workers.max(1))
            .filter(|rotated| std::future::ready(*rotated))
            .count()
            .await;
        Ok(rotated)
    }

    fn report(&self, c: &cri::Container, e: &RotateError) {
        let label = |k: &str| c.labels.get(k).map(String::as_str).unwrap_or("");
        let about = Involved::pod_ref(
            label(keys::POD_NAMESPACE),
            label(keys::POD_NAME),
            label(keys::POD_UID),
            Some(label(keys::CONTAINER_NAME)),
        );
        self.events.event(
            &about,
            WARNING,
            ROTATION_FAILED,
            format!(
                "Failed to rotate the container's log (tried again in {}s): {e}",
                self.policy.interval.as_secs()
            ),
        );
    }

    /// Rotate one container's log if it is due (upstream's processContainer).
    async fn rotate_container(&self, id: &str) -> Result<bool, RotateError> {
        let status = self
            .cri
            .container_status(id)
            .await
            .map_err(RotateError::Status)?;
        let log = PathBuf::from(&status.log_path);
        if !is_under(&log, &self.logs_root) {
            return Ok(false);
        }
        let size = match tokio::fs::metadata(&log).await {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Renamed away and never reopened (a crash between the two).
                self.reopen(id).await?;
                tokio::fs::metadata(&log)
                    .await
                    .map_err(io_error("failed to stat container log after reopen", &log))?
                    .len()
            }
            Err(e) => return Err(io_error("failed to stat container log", &log)(e)),
        };
        if !logrotation::due(size, self.policy.max_size) {
            return Ok(false);
        }
        self.rotate(id, &log).await?;
        Ok(true)
    }

    /// Prune and compress the older copies, then rotate the log itself.
    async fn rotate(&self, id: &str, log: &Path) -> Result<(), RotateError> {
        let (path, max_files) = (log.to_owned(), self.policy.max_files);
        blocking(move || prepare(&path, max_files))
            .await
            .map_err(io_error(
                "failed to prune and compress the rotated logs of",
                log,
            ))?;
        let stamp = compact_timestamp(
            std::time::UNIX_EPOCH
                + Duration::from_nanos(u64::try_from(self.clock.now_nanos()).unwrap_or(0)),
        );
        let rotated = PathBuf::from(logrotation::rotated_name(&log.to_string_lossy(), &stamp));
        tokio::fs::rename(log, &rotated)
            .await
            .map_err(io_error("failed to rotate log", log))?;
        if let Err(e) = self.reopen(id).await {
            // Back where it was, to be rotated in the next round.
            if let Err(back) = tokio::fs::rename(&rotated, log).await {
                tracing::error!(rotated = %rotated.display(), log = %log.display(), error = %back, "Failed to rename rotated log");
            }
            return Err(e);
        }
        tracing::debug!(container = %id, log = %log.display(), rotated = %rotated.display(), "rotated container log");
        Ok(())
    }

    async fn reopen(&self, id: &str) -> Result<(), RotateError> {
        self.cri
            .reopen_container_log(id)
            .await
            .map_err(|source| RotateError::Reopen {
                id: id.to_owned(),
                source,
            })
    }
}

/// The rotated copies of `log` (`<log>.*`).
fn rotated_copies(log: &Path) -> io::Result<Vec<String>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            out.push(entry.path().to_string_lossy().into_owned());
        }
    }
    Ok(out)
}

/// Before a rotation: the plan's removals, then its compressions.
fn prepare(log: &Path, max_files: usize) -> io::Result<()> {
    let plan = logrotation::plan(&rotated_copies(log)?, max_files);
    for path in &plan.remove {
        remove_if_present(Path::new(path))?;
    }
    for path in &plan.compress {
        compress(Path::new(path))?;
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// `<copy>` to `<copy>.gz` through `<copy>.gz.tmp`, the plain copy removed
/// once the compressed one is in place. gzip at zlib's default level, as
/// upstream's compress/gzip writes it, through zlib-rs: it compresses a CRI
/// log faster than flate2's default backend (miniz_oxide) for the same
/// output (the figures: the log flood in the README's Benchmark section).
fn compress(copy: &Path) -> io::Result<()> {
    let plain = copy.to_string_lossy();
    let tmp = PathBuf::from(format!("{plain}{COMPRESS_SUFFIX}{TMP_SUFFIX}"));
    let done = PathBuf::from(format!("{plain}{COMPRESS_SUFFIX}"));
    let mut input = std::fs::File::open(copy)?;
    let output = std::fs::File::create(&tmp)?;
    let mut gz = flate2::write::GzEncoder::new(output, flate2::Compression::default());
    io::copy(&mut input, &mut gz)?;
    gz.finish()?.sync_all()?;
    std::fs::rename(&tmp, &done)?;
    std::fs::remove_file(copy)
}

/// Remove a container's log and every rotated copy of it (upstream's
/// Clean, when the container is removed).
pub fn remove_log_files(log: &Path) -> io::Result<()> {
    remove_if_present(log)?;
    match rotated_copies(log) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(copies) => copies
            .iter()
            .try_for_each(|c| remove_if_present(Path::new(c))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files in `dir`, sorted, with their sizes.
    fn files(dir: &Path) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, e.metadata().unwrap().len())
            })
            .collect();
        out.sort();
        out
    }

    /// Against the fake runtime: a log past its size is rotated, older
    /// copies compressed and pruned to the count; a reopen the runtime
    /// refuses puts the log back and is an event; a log the runtime lost
    /// is reopened.
    #[tokio::test(start_paused = true)]
    async fn rotates_due_logs_and_puts_them_back_when_the_reopen_fails() {
        use kubelet_cri::fake::FakeRuntime;
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::following_tokio();
        let fake = FakeRuntime::start_with_clock(
            &dir.path().join("cri.sock"),
            std::sync::Arc::new(move || clock.now_nanos()),
        )
        .await
        .unwrap();
        fake.add_image("img:1");
        let cri = CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5)).unwrap();
        let logs = dir.path().join("logs");
        let pod_logs = logs.join("default_p_u1");
        std::fs::create_dir_all(pod_logs.join("c")).unwrap();
        let labels: std::collections::HashMap<String, String> = [
            (keys::POD_NAME, "p"),
            (keys::POD_NAMESPACE, "default"),
            (keys::POD_UID, "u1"),
            (keys::CONTAINER_NAME, "c"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        let sandbox = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: pod_logs.display().to_string(),
            ..Default::default()
        };
        let sb = cri
            .run_pod_sandbox(sandbox.clone(), String::new())
            .await
            .unwrap();
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: "img:1".into(),
                ..Default::default()
            }),
            labels,
            log_path: "c/0.log".into(),
            ..Default::default()
        };
        let id = cri.create_container(&sb, config, sandbox).await.unwrap();
        cri.start_container(&id).await.unwrap();
        let log = pod_logs.join("c/0.log");
        assert!(log.exists(), "the runtime opened the log");
        let (events, mut rx) = Recorder::with_queue("n".into(), clock);
        let manager = ContainerLogManager::new(
            cri.clone(),
            LogPolicy {
                max_size: 1000,
                max_files: 3,
                workers: 2,
                interval: Duration::from_secs(3),
            },
            logs,
            events,
            clock,
        );
        let write = |n: usize| std::fs::write(&log, "x".repeat(n)).unwrap();
        write(999);
        assert_eq!(manager.rotate_logs().await.unwrap(), 0, "not due yet");
        for round in 1..=3 {
            write(1000 + round);
            assert_eq!(manager.rotate_logs().await.unwrap(), 1, "round {round}");
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        let found = files(&pod_logs.join("c"));
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names.len(),
            3,
            "at most containerLogMaxFiles files: {found:?}"
        );
        assert_eq!(found[0], ("0.log".to_owned(), 0), "reopened empty");
        assert!(
            names[1].ends_with(".gz"),
            "the older copy compressed: {names:?}"
        );
        assert_eq!(found[2].1, 1003, "the newest copy stays plain: {found:?}");

        // The runtime refuses the reopen: the log is put back (the older
        // copies were pruned and compressed before, as upstream's are).
        write(2000);
        fake.inject_error("ReopenContainerLog", tonic::Code::Internal, 1);
        assert_eq!(manager.rotate_logs().await.unwrap(), 0);
        assert_eq!(std::fs::metadata(&log).unwrap().len(), 2000);
        let found = files(&pod_logs.join("c"));
        assert_eq!(found.len(), 2, "{found:?}");
        let event = rx.try_recv().expect("a Warning event");
        assert_eq!(event.reason.as_deref(), Some(ROTATION_FAILED));
        assert_eq!(
            event.involved_object.field_path.as_deref(),
            Some("spec.containers{c}")
        );
        // Tried again in the next round.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(manager.rotate_logs().await.unwrap(), 1);

        // Lost (renamed away, never reopened): reopened.
        std::fs::remove_file(&log).unwrap();
        assert_eq!(manager.rotate_logs().await.unwrap(), 0);
        assert!(log.exists());
    }

    #[test]
    fn compress_leaves_only_a_gzip_that_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("0.log.20261201-000000");
        let text = "2026-12-01T00:00:00.000000000Z stdout F hello\n".repeat(1000);
        std::fs::write(&copy, &text).unwrap();
        compress(&copy).unwrap();
        assert!(!copy.exists());
        let gz = std::fs::File::open(tmp.path().join("0.log.20261201-000000.gz")).unwrap();
        let mut back = String::new();
        io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut back).unwrap();
        assert_eq!(back, text);
    }

    #[test]
    fn prepare_prunes_and_compresses_and_removal_takes_every_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("0.log");
        let names = [
            "0.log",
            "0.log.20261201-000001.gz",
            "0.log.20261201-000002.gz",
            "0.log.20261201-000003.gz",
            "0.log.20261201-000004",
            "0.log.20261201-000004.gz.tmp",
            "1.log",
        ];
        for n in names {
            std::fs::write(tmp.path().join(n), n).unwrap();
        }
        prepare(&log, 5).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "0.log",
                "0.log.20261201-000002.gz",
                "0.log.20261201-000003.gz",
                "0.log.20261201-000004.gz",
                "1.log"
            ]
        );
        remove_log_files(&log).unwrap();
        remove_log_files(&log).unwrap();
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "only 1.log, another container's, stays");
    }
}
