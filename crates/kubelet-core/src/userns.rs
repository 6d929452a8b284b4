//! User namespaces of pods with `hostUsers: false` (upstream's userns
//! manager), the pure part: the range of host IDs the kubelet may give
//! ([`kubelet_range`]), its split into one slot of `idsPerPod` IDs per pod
//! ([`Allocator`]), and the `userns` file each such pod keeps in its
//! directory, in upstream's format, so either kubelet finds the other's
//! allocations after a restart.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::types::PodUid;

/// Upstream's userNsUnitLength: idsPerPod is a multiple of it.
pub const IDS_UNIT: u32 = 65536;
/// The file in a pod's directory that keeps its mapping.
pub const MAPPINGS_FILE: &str = "userns";
/// The user whose subordinate IDs (`getsubids kubelet`) bound the range.
pub const KUBELET_USER: &str = "kubelet";

/// A pod's user namespace as its `userns` file holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserNamespace {
    #[serde(rename = "uidMappings")]
    pub uid_mappings: Vec<IdMapping>,
    #[serde(rename = "gidMappings")]
    pub gid_mappings: Vec<IdMapping>,
}

/// One mapping: `length` IDs from `container_id` in the pod, `host_id` on
/// the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMapping {
    #[serde(rename = "hostId")]
    pub host_id: u32,
    #[serde(rename = "containerId")]
    pub container_id: u32,
    pub length: u32,
}

impl UserNamespace {
    /// The same `length` IDs from `host_id` for users and groups, the
    /// pod's 0 first.
    pub fn of(host_id: u32, length: u32) -> UserNamespace {
        let m = IdMapping {
            host_id,
            container_id: 0,
            length,
        };
        UserNamespace {
            uid_mappings: vec![m],
            gid_mappings: vec![m],
        }
    }

    /// A `userns` file's content, checked as upstream's
    /// parseUserNsFileAndRecord checks it: one mapping, the same for users
    /// and groups, the pod's ID 0 mapped.
    pub fn parse(content: &[u8]) -> Result<UserNamespace, UsernsError> {
        let ns: UserNamespace = serde_json::from_slice(content)
            .map_err(|e| UsernsError::File(format!("invalid user namespace mappings file: {e}")))?;
        let invalid = |m: &str| {
            Err(UsernsError::File(format!(
                "invalid user namespace configuration: {m}"
            )))
        };
        if ns.uid_mappings.len() != 1 {
            return invalid("no more than one mapping allowed.");
        }
        if ns.uid_mappings.len() != ns.gid_mappings.len() {
            return invalid("GID and UID mappings should be identical.");
        }
        if ns.uid_mappings[0] != ns.gid_mappings[0] {
            return invalid("GID and UID mapping should be identical");
        }
        if ns.uid_mappings[0].container_id != 0 {
            return invalid("UID 0 must be mapped");
        }
        Ok(ns)
    }
}

/// Why a user namespace cannot be given, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsernsError {
    #[error("kubelet user namespace length {0} is not a multiple of {IDS_UNIT}")]
    Length(u32),
    #[error("kubelet user assigned ID {0} is not a multiple of {1}")]
    FirstNotMultiple(u32, u32),
    #[error("kubelet user assigned ID {0} must be greater or equal to {1}")]
    FirstTooLow(u32, u32),
    #[error("kubelet user assigned IDs length {0} is not a multiple of {1}")]
    RangeNotMultiple(u32, u32),
    #[error("kubelet user assigned IDs are not enough to support {0} pods")]
    TooFewIds(u32),
    #[error("error parsing line {0:?}: it must contain only one line")]
    SubIdsLines(String),
    #[error("invalid line {0:?}")]
    SubIdsLine(String),
    #[error("mismatched subuids and subgids for user {KUBELET_USER:?}")]
    SubIdsMismatch,
    #[error("could not find an empty slot to allocate a user namespace")]
    Full,
    #[error("{0}")]
    File(String),
    #[error("wrong user namespace length {0}")]
    WrongLength(u32),
    #[error("wrong user namespace offset specified {0}")]
    WrongOffset(u32),
    #[error("different user namespace range already used by pod {0:?}")]
    OtherRange(String),
    #[error("id {0} is out of range")]
    OutOfRange(u32),
    #[error("range picked for pod {0:?} already taken")]
    Taken(String),
}

/// The range of host IDs (first, length) the kubelet gives pods: the
/// kubelet user's subordinate IDs (`getsubids` output, users and groups
/// the same) when that user exists and the tool is there, else all IDs
/// from `ids_per_pod` up (upstream's getKubeletMappings).
pub fn kubelet_range(
    ids_per_pod: u32,
    subids: Option<(&str, &str)>,
) -> Result<(u32, u32), UsernsError> {
    let Some((uids, gids)) = subids else {
        let len = ((1u64 << 32) - u64::from(ids_per_pod)) as u32;
        return Ok((ids_per_pod, len));
    };
    if uids != gids {
        return Err(UsernsError::SubIdsMismatch);
    }
    let trimmed = uids.trim_matches('\n');
    if trimmed.split('\n').count() != 1 {
        return Err(UsernsError::SubIdsLines(uids.to_owned()));
    }
    let parts: Vec<&str> = trimmed.split_whitespace().collect();
    let number = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| UsernsError::SubIdsLine(uids.to_owned()))
    };
    match parts[..] {
        [_, _, first, len] => Ok((number(first)?, number(len)?)),
        _ => Err(UsernsError::SubIdsLine(uids.to_owned())),
    }
}

/// Which slots of the kubelet's range pods hold (upstream's bitmap and
/// usedBy map). Slot `i` is the host IDs from `(offset + i) * length`.
#[derive(Debug, Clone)]
pub struct Allocator {
    length: u32,
    offset: u32,
    used: Vec<bool>,
    by_pod: HashMap<PodUid, u32>,
}

impl Allocator {
    /// Slots of `length` IDs over the range (`first`, `range`), checked as
    /// upstream's MakeUserNsManager checks it (enough for `max_pods`).
    pub fn new(length: u32, first: u32, range: u32, max_pods: u32) -> Result<Self, UsernsError> {
        if length == 0 || !length.is_multiple_of(IDS_UNIT) {
            return Err(UsernsError::Length(length));
        }
        if !first.is_multiple_of(length) {
            return Err(UsernsError::FirstNotMultiple(first, length));
        }
        if first < length {
            return Err(UsernsError::FirstTooLow(first, length));
        }
        if !range.is_multiple_of(length) {
            return Err(UsernsError::RangeNotMultiple(range, length));
        }
        if range / length < max_pods {
            return Err(UsernsError::TooFewIds(max_pods));
        }
        Ok(Allocator {
            length,
            offset: first / length,
            used: vec![false; (range / length) as usize],
            by_pod: HashMap::new(),
        })
    }

    /// The first host ID `pod` holds, if it holds one.
    pub fn of(&self, pod: &PodUid) -> Option<u32> {
        self.by_pod.get(pod).copied()
    }

    /// Give `pod` a free slot (the scan starts at a place its UID picks, as
    /// upstream's starts at a random one); its first host ID.
    pub fn allocate(&mut self, pod: &PodUid) -> Result<u32, UsernsError> {
        if let Some(first) = self.of(pod) {
            return Ok(first);
        }
        let n = self.used.len();
        let start = pod.as_str().bytes().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        }) % n.max(1);
        let slot = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| !self.used[i])
            .ok_or(UsernsError::Full)?;
        self.used[slot] = true;
        let first = (self.offset + slot as u32) * self.length;
        self.by_pod.insert(pod.clone(), first);
        Ok(first)
    }

    /// Record that `pod` holds `length` IDs from `first` (read back from its
    /// file), checked as upstream's record.
    pub fn record(&mut self, pod: &PodUid, first: u32, length: u32) -> Result<(), UsernsError> {
        if length != self.length {
            return Err(UsernsError::WrongLength(length));
        }
        if !first.is_multiple_of(self.length) {
            return Err(UsernsError::WrongOffset(first));
        }
        match self.by_pod.get(pod) {
            Some(&held) if held == first => return Ok(()),
            Some(_) => return Err(UsernsError::OtherRange(pod.to_string())),
            None => {}
        }
        let slot = (first / self.length)
            .checked_sub(self.offset)
            .map(|s| s as usize)
            .filter(|&s| s < self.used.len())
            .ok_or(UsernsError::OutOfRange(first))?;
        if self.used[slot] {
            return Err(UsernsError::Taken(pod.to_string()));
        }
        self.used[slot] = true;
        self.by_pod.insert(pod.clone(), first);
        Ok(())
    }

    /// Free what `pod` holds; true when it held something.
    pub fn release(&mut self, pod: &PodUid) -> bool {
        let Some(first) = self.by_pod.remove(pod) else {
            return false;
        };
        if let Some(slot) = (first / self.length).checked_sub(self.offset) {
            self.used[slot as usize] = false;
        }
        true
    }

    /// The pods holding a slot.
    pub fn pods(&self) -> Vec<PodUid> {
        self.by_pod.keys().cloned().collect()
    }

    pub fn length(&self) -> u32 {
        self.length
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_the_kubelet_users_subordinate_ids_or_all_above_one_pods() {
        assert_eq!(kubelet_range(65536, None), Ok((65536, u32::MAX - 65535)));
        let line = "0: kubelet 65536 2147483648\n";
        assert_eq!(
            kubelet_range(65536, Some((line, line))),
            Ok((65536, 2147483648))
        );
        assert_eq!(
            kubelet_range(65536, Some((line, "0: kubelet 1 2\n"))),
            Err(UsernsError::SubIdsMismatch)
        );
        let two = "0: kubelet 1 2\n1: kubelet 3 4\n";
        assert!(matches!(
            kubelet_range(65536, Some((two, two))),
            Err(UsernsError::SubIdsLines(_))
        ));
        let bad = "0: kubelet x 2\n";
        assert_eq!(
            kubelet_range(65536, Some((bad, bad)))
                .unwrap_err()
                .to_string(),
            "invalid line \"0: kubelet x 2\\n\""
        );
    }

    #[test]
    fn the_range_is_checked_as_upstream() {
        for (length, first, range, max_pods, want) in [
            (
                1000,
                65536,
                65536 * 200,
                110,
                "kubelet user namespace length 1000 is not a multiple of 65536",
            ),
            (
                65536,
                1000,
                65536 * 200,
                110,
                "kubelet user assigned ID 1000 is not a multiple of 65536",
            ),
            (
                131072,
                65536 * 3,
                131072 * 200,
                110,
                "kubelet user assigned ID 196608 is not a multiple of 131072",
            ),
            (
                65536,
                0,
                65536 * 200,
                110,
                "kubelet user assigned ID 0 must be greater or equal to 65536",
            ),
            (
                65536,
                65536,
                65537 * 200,
                110,
                "kubelet user assigned IDs length 13107400 is not a multiple of 65536",
            ),
            (
                65536,
                65536,
                65536 * 100,
                110,
                "kubelet user assigned IDs are not enough to support 110 pods",
            ),
        ] {
            let err = Allocator::new(length, first, range, max_pods).unwrap_err();
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn pods_get_distinct_slots_kept_until_released() {
        let mut a = Allocator::new(65536, 65536, 65536 * 2, 2).unwrap();
        let (p1, p2, p3) = (PodUid::from("p1"), PodUid::from("p2"), PodUid::from("p3"));
        let f1 = a.allocate(&p1).unwrap();
        assert_eq!(a.allocate(&p1), Ok(f1), "a pod keeps its slot");
        let f2 = a.allocate(&p2).unwrap();
        assert_ne!(f1, f2);
        for f in [f1, f2] {
            assert!(f == 65536 || f == 131072, "{f}");
        }
        assert_eq!(a.allocate(&p3), Err(UsernsError::Full));
        assert!(a.release(&p1));
        assert!(!a.release(&p1));
        assert_eq!(a.allocate(&p3), Ok(f1));
    }

    #[test]
    fn recorded_slots_are_checked_as_upstream() {
        let mut a = Allocator::new(65536, 65536, 65536 * 4, 2).unwrap();
        let (p1, p2) = (PodUid::from("p1"), PodUid::from("p2"));
        a.record(&p1, 131072, 65536).unwrap();
        a.record(&p1, 131072, 65536).unwrap();
        for (pod, first, length, want) in [
            (&p1, 196608, 65536, UsernsError::OtherRange("p1".into())),
            (&p2, 131072, 65536, UsernsError::Taken("p2".into())),
            (&p2, 131072, 1, UsernsError::WrongLength(1)),
            (&p2, 65537, 65536, UsernsError::WrongOffset(65537)),
            (&p2, 65536 * 5, 65536, UsernsError::OutOfRange(65536 * 5)),
            (&p2, 0, 65536, UsernsError::OutOfRange(0)),
        ] {
            assert_eq!(a.record(pod, first, length), Err(want));
        }
        assert_ne!(a.allocate(&p2).unwrap(), 131072);
    }

    #[test]
    fn the_file_is_upstreams_and_checked() {
        let ns = UserNamespace::of(131072, 65536);
        let json = serde_json::to_string(&ns).unwrap();
        assert_eq!(
            json,
            r#"{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}"#
        );
        assert_eq!(UserNamespace::parse(json.as_bytes()), Ok(ns));
        for (content, want) in [
            (
                r#"{"uidMappings":[],"gidMappings":[]}"#,
                "no more than one mapping allowed.",
            ),
            (
                r#"{"uidMappings":[{"hostId":1,"containerId":0,"length":1}],"gidMappings":[{"hostId":2,"containerId":0,"length":1}]}"#,
                "GID and UID mapping should be identical",
            ),
            (
                r#"{"uidMappings":[{"hostId":1,"containerId":5,"length":1}],"gidMappings":[{"hostId":1,"containerId":5,"length":1}]}"#,
                "UID 0 must be mapped",
            ),
        ] {
            let err = UserNamespace::parse(content.as_bytes()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("invalid user namespace configuration: {want}")
            );
        }
        assert!(
            UserNamespace::parse(b"{")
                .unwrap_err()
                .to_string()
                .starts_with("invalid user namespace mappings file: ")
        );
    }
}
