//! Container log rotation's decisions (upstream's container_log_manager):
//! when a log is rotated, what its rotated copy is called, and which of
//! the copies are removed or compressed first. The manager
//! (`kubelet::logs`) does the I/O: rename, CRI `ReopenContainerLog`,
//! gzip, remove.
//!
//! A container's log `<dir>/<restart>.log` is rotated once it reaches
//! containerLogMaxSize: renamed to `<log>.<YYYYmmdd-HHMMSS>` (UTC) and
//! reopened by the runtime. Before that, of its rotated copies
//! (`<log>.*`), leftovers of an interrupted rotation go (a `.tmp` of a
//! compression, a copy whose `.gz` exists), the oldest go until at most
//! containerLogMaxFiles − 2 remain (the log being written and the copy
//! about to be made are the other two), and those left are compressed,
//! so only the newest rotated copy is ever plain text (a log agent may
//! still be reading it).

/// Suffix of a compressed rotated log.
pub const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of a compression in progress.
pub const TMP_SUFFIX: &str = ".tmp";

/// What to do with a log's rotated copies before rotating it again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Removed first: leftovers, then the oldest copies past the count.
    pub remove: Vec<String>,
    /// Compressed to `<copy>.gz` (written as `.gz.tmp`, then renamed), the
    /// plain copy removed after.
    pub compress: Vec<String>,
}

/// Upstream's isInUse: a compression's temporary file is not, a
/// compressed copy is, a plain copy is unless its compressed one exists.
fn in_use(copy: &str, all: &[String]) -> bool {
    if copy.ends_with(TMP_SUFFIX) {
        return false;
    }
    if copy.ends_with(COMPRESS_SUFFIX) {
        return true;
    }
    !all.iter().any(|other| {
        other
            .strip_suffix(COMPRESS_SUFFIX)
            .is_some_and(|plain| plain == copy)
    })
}

/// The plan for one log's rotated copies (`copies`: every path matching
/// `<log>.*`, in any order) when at most `max_files` files may remain,
/// the log itself and the copy about to be made included.
pub fn plan(copies: &[String], max_files: usize) -> Plan {
    let (mut kept, mut remove): (Vec<String>, Vec<String>) =
        copies.iter().cloned().partition(|c| in_use(c, copies));
    // The names sort oldest first (the timestamp is fixed width).
    kept.sort();
    let excess = kept.len().saturating_sub(max_files.saturating_sub(2));
    remove.extend(kept.drain(..excess));
    let compress = kept
        .into_iter()
        .filter(|c| !c.ends_with(COMPRESS_SUFFIX))
        .collect();
    Plan { remove, compress }
}

/// The name of the copy a rotation at `stamp` (a `compact_timestamp`)
/// makes of `log`.
pub fn rotated_name(log: &str, stamp: &str) -> String {
    format!("{log}.{stamp}")
}

/// Whether a log of `size` bytes is due for rotation at `max_size`.
pub fn due(size: u64, max_size: u64) -> bool {
    size >= max_size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_as_upstream() {
        let l = "/var/log/pods/ns_p_u/c/0.log";
        let at = |t: &str| format!("{l}.{t}");
        /// (what, the rotated copies, containerLogMaxFiles, removed, compressed)
        type Case = (&'static str, Vec<String>, usize, Vec<String>, Vec<String>);
        let cases: &[Case] = &[
            ("nothing rotated yet", vec![], 5, vec![], vec![]),
            (
                "the newest plain copy is compressed at the next rotation",
                vec![at("20261201-000000")],
                5,
                vec![],
                vec![at("20261201-000000")],
            ),
            (
                "past the count: the oldest go, what stays is compressed",
                vec![
                    at("20261201-000003.gz"),
                    at("20261201-000001.gz"),
                    at("20261201-000004"),
                    at("20261201-000002.gz"),
                ],
                5,
                vec![at("20261201-000001.gz")],
                vec![at("20261201-000004")],
            ),
            (
                "two files at most: no rotated copy stays",
                vec![at("20261201-000001.gz"), at("20261201-000002")],
                2,
                vec![at("20261201-000001.gz"), at("20261201-000002")],
                vec![],
            ),
            (
                "an interrupted compression: its .tmp and the copy compressed go",
                vec![
                    at("20261201-000001"),
                    at("20261201-000001.gz"),
                    at("20261201-000002"),
                    at("20261201-000002.gz.tmp"),
                ],
                5,
                vec![at("20261201-000001"), at("20261201-000002.gz.tmp")],
                vec![at("20261201-000002")],
            ),
        ];
        for (what, copies, max, remove, compress) in cases {
            let p = plan(copies, *max);
            assert_eq!(&p.remove, remove, "{what}: remove");
            assert_eq!(&p.compress, compress, "{what}: compress");
        }
        assert_eq!(
            rotated_name("a.log", "20261201-000001"),
            "a.log.20261201-000001"
        );
        assert!(due(10, 10) && !due(9, 10));
    }
}
