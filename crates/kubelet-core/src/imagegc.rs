//! Image garbage collection (upstream's realImageGCManager): the images
//! the runtime holds, when each was first seen and last used, and which to
//! remove — those unused longer than `imageMaximumGCAge`, then, when the
//! image file system is `imageGCHighThresholdPercent` full or more, unused
//! ones least recently used first until it is back to
//! `imageGCLowThresholdPercent`. Never an image a container (running or
//! not) uses, one the runtime pins (the sandbox image), or one seen for
//! less than `imageMinimumGCAge`. Pure: times are nanoseconds since the
//! epoch, passed in.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The thresholds and ages of the KubeletConfiguration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub high_threshold_percent: u8,
    pub low_threshold_percent: u8,
    pub min_age: Duration,
    /// Zero: images are not removed for their age.
    pub max_age: Duration,
}

/// An image the runtime lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    pub size: u64,
    pub pinned: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    first_detected: i64,
    last_used: i64,
    size: u64,
    pinned: bool,
}

/// Why an image is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Unused for longer than imageMaximumGCAge.
    Age,
    /// The image file system is over its high threshold.
    Space,
}

/// What one collection does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Image IDs to remove, in order, each with why.
    pub remove: Vec<(String, Reason)>,
    /// Bytes the space part had to free (0 under the high threshold).
    pub to_free: u64,
    /// Bytes the removals for space free.
    pub freed: u64,
    /// How full the image file system is, in percent, and its size (0:
    /// not known), for the events.
    pub used_percent: u64,
    pub capacity: u64,
}

impl Plan {
    /// Upstream's FreeDiskSpaceFailed message when the space part falls
    /// short.
    pub fn shortfall(&self) -> Option<String> {
        (self.freed < self.to_free).then(|| {
            format!(
                "Insufficient free disk space on the node's image filesystem ({}% of {} used). Failed to free sufficient space by deleting unused images (freed {} bytes). Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
                self.used_percent,
                format_size(self.capacity),
                self.freed
            )
        })
    }
}

/// Upstream's formatSize: bytes in binary units, one decimal.
fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, f64); 4] = [
        ("TiB", 1024f64 * 1024.0 * 1024.0 * 1024.0),
        ("GiB", 1024f64 * 1024.0 * 1024.0),
        ("MiB", 1024f64 * 1024.0),
        ("KiB", 1024f64),
    ];
    let size = bytes as f64;
    UNITS.iter().find(|(_, unit)| size >= *unit).map_or_else(
        || format!("{bytes} B"),
        |(name, unit)| format!("{:.1} {name}", size / unit),
    )
}

#[derive(Debug, Default)]
pub struct ImageGc {
    records: HashMap<String, Record>,
    /// The first detection: no image goes for its age before
    /// imageMaximumGCAge has passed since.
    began: Option<i64>,
}

impl ImageGc {
    /// Take in the runtime's images at `now` (upstream's detectImages): new
    /// ones are first detected now, those `in_use` (image IDs containers
    /// have) are used now, those gone are forgotten.
    pub fn detect(&mut self, images: &[Listed], in_use: &HashSet<String>, now: i64) {
        self.began.get_or_insert(now);
        let listed: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| listed.contains(id.as_str()));
        for image in images {
            let r = self.records.entry(image.id.clone()).or_insert(Record {
                first_detected: now,
                last_used: 0,
                size: image.size,
                pinned: image.pinned,
            });
            r.size = image.size;
            r.pinned = image.pinned;
            if in_use.contains(&image.id) {
                r.last_used = now;
            }
        }
    }

    /// What to remove at `now` (just after [`ImageGc::detect`]), the image
    /// file system having `capacity` bytes of which `available` are free.
    pub fn plan(&self, policy: &Policy, capacity: u64, available: u64, now: i64) -> Plan {
        let age = |since: i64| Duration::from_nanos(now.saturating_sub(since).max(0) as u64);
        // Unused ones, least recently used first (then the oldest seen).
        let mut unused: Vec<(&String, &Record)> = self
            .records
            .iter()
            .filter(|(_, r)| !r.pinned && r.last_used < now)
            .collect();
        unused.sort_by_key(|(id, r)| (r.last_used, r.first_detected, (*id).clone()));
        let mut plan = Plan::default();
        let mut removed = HashSet::new();
        let began = self.began.unwrap_or(now);
        if !policy.max_age.is_zero() && age(began) > policy.max_age {
            // An image never seen in use counts as unused for ever.
            for (id, r) in &unused {
                if age(r.last_used) > policy.max_age {
                    plan.remove.push(((*id).clone(), Reason::Age));
                    removed.insert((*id).clone());
                }
            }
        }
        if capacity == 0 || policy.high_threshold_percent >= 100 {
            return plan;
        }
        let used_percent = 100 - available.saturating_mul(100) / capacity;
        if used_percent < u64::from(policy.high_threshold_percent) {
            return plan;
        }
        plan.used_percent = used_percent;
        plan.capacity = capacity;
        plan.to_free = (capacity * (100 - u64::from(policy.low_threshold_percent)) / 100)
            .saturating_sub(available);
        for (id, r) in unused {
            if plan.freed >= plan.to_free {
                break;
            }
            if removed.contains(id) || age(r.first_detected) < policy.min_age {
                continue;
            }
            plan.remove.push((id.clone(), Reason::Space));
            plan.freed += r.size;
        }
        plan
    }

    /// DeleteUnusedImages (the eviction manager's reclaim under disk
    /// pressure): every unused image seen for at least imageMinimumGCAge,
    /// whatever the thresholds say.
    pub fn plan_all_unused(&self, policy: &Policy, now: i64) -> Plan {
        let age = |since: i64| Duration::from_nanos(now.saturating_sub(since).max(0) as u64);
        let mut plan = Plan::default();
        for (id, r) in &self.records {
            if !r.pinned && r.last_used < now && age(r.first_detected) >= policy.min_age {
                plan.remove.push((id.clone(), Reason::Space));
                plan.freed += r.size;
            }
        }
        plan
    }

    /// `id` was removed.
    pub fn removed(&mut self, id: &str) {
        self.records.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;
    const MIB: u64 = 1 << 20;

    fn policy() -> Policy {
        Policy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        }
    }

    fn listed(id: &str, mib: u64, pinned: bool) -> Listed {
        Listed {
            id: id.into(),
            size: mib * MIB,
            pinned,
        }
    }

    #[test]
    fn space_is_freed_least_recently_used_first_never_in_use_pinned_or_young() {
        let mut gc = ImageGc::default();
        let images = [
            listed("old", 30, false),
            listed("older", 60, false),
            listed("used", 30, false),
            listed("pause", 30, true),
        ];
        let in_use = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
        gc.detect(&images, &in_use(&["old", "older", "used"]), 1000 * S);
        gc.detect(&images, &in_use(&["old", "used"]), 1100 * S);
        gc.detect(&images, &in_use(&["used"]), 1200 * S);
        let young = listed("young", 30, false);
        let all = [images.as_slice(), &[young]].concat();
        gc.detect(&all, &in_use(&["used"]), 1300 * S);
        let capacity = 1000 * MIB;
        // 90 % full: free down to 80 %, 100 MiB.
        let plan = gc.plan(&policy(), capacity, 100 * MIB, 1300 * S);
        let ids: Vec<&str> = plan.remove.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["older", "old"], "{plan:?}");
        assert_eq!((plan.to_free, plan.freed), (100 * MIB, 90 * MIB));
        assert_eq!(
            plan.shortfall().as_deref(),
            Some(
                "Insufficient free disk space on the node's image filesystem (90% of 1000.0 MiB used). Failed to free sufficient space by deleting unused images (freed 94371840 bytes). Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
            )
        );
        // Under the high threshold: nothing.
        assert_eq!(
            gc.plan(&policy(), capacity, 200 * MIB, 1300 * S),
            Plan::default()
        );
        // 85 % full: 50 MiB to free, which the first gives; it stops there.
        let plan = gc.plan(&policy(), capacity, 150 * MIB, 1300 * S);
        assert_eq!(plan.remove, [("older".to_owned(), Reason::Space)]);
        assert_eq!(plan.shortfall(), None);
        // A threshold of 100 % disables it.
        let off = Policy {
            high_threshold_percent: 100,
            ..policy()
        };
        assert!(gc.plan(&off, capacity, 0, 1300 * S).remove.is_empty());
        // Gone from the runtime: forgotten.
        gc.detect(&[listed("used", 30, false)], &in_use(&["used"]), 1400 * S);
        assert_eq!(gc.records.len(), 1);
    }

    #[test]
    fn sizes_format_as_upstreams() {
        for (bytes, want) in [
            (512, "512 B"),
            (1536, "1.5 KiB"),
            (64 * MIB, "64.0 MiB"),
            (250 * 1024 * MIB, "250.0 GiB"),
            (3 * 1024 * 1024 * MIB, "3.0 TiB"),
        ] {
            assert_eq!(format_size(bytes), want);
        }
    }

    #[test]
    fn images_unused_past_the_maximum_age_go_whatever_the_space() {
        let mut gc = ImageGc::default();
        let images = [listed("a", 1, false), listed("b", 1, false)];
        let a: HashSet<String> = ["a".to_owned()].into();
        gc.detect(&images, &a, 1000 * S);
        gc.detect(&images, &HashSet::new(), 1010 * S);
        let aged = Policy {
            max_age: Duration::from_secs(60),
            ..policy()
        };
        assert!(
            gc.plan(&aged, 100, 90, 1050 * S).remove.is_empty(),
            "not before the maximum age has passed since the kubelet began"
        );
        let plan = gc.plan(&aged, 100, 90, 1061 * S);
        let mut ids: Vec<&str> = plan.remove.iter().map(|(id, _)| id.as_str()).collect();
        ids.sort();
        assert_eq!(ids, ["a", "b"]);
        assert!(plan.remove.iter().all(|(_, r)| *r == Reason::Age));
    }
}
