//! Kernel OOM kills as the kernel log tells them (upstream's OOM watcher,
//! with cadvisor's oomparser and go-kmsg-parser): a `/dev/kmsg` record
//! parsed, and the lines of one OOM kill gathered, from `invoked
//! oom-killer:` to the line naming the victim, into an [`OomInstance`]. A
//! kill whose memory cgroup is the root one (no limit was hit, the node ran
//! out of memory) is a `SystemOOM` node event. Pure.

use std::sync::LazyLock;

use regex::Regex;

static FIRST_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("invoked oom-killer:").expect("a valid pattern"));
static CONTAINER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        "oom-kill:constraint=(.*),nodemask=(.*),cpuset=(.*),mems_allowed=(.*),oom_memcg=(.*),task_memcg=(.*),task=(.*),pid=(.*),uid=(.*)",
    )
    .expect("a valid pattern")
});
static LEGACY_CONTAINER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new("Task in (.*) killed as a result of limit of (.*)").expect("a valid pattern")
});
static LAST_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"Killed process ([0-9]+) \((.+)\)").expect("a valid pattern"));

/// One `/dev/kmsg` record: `priority,sequence,microseconds since boot,flags[,...];message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KmsgRecord {
    pub sequence: u64,
    /// Microseconds since boot.
    pub timestamp_us: u64,
    pub message: String,
}

/// A kernel log record go-kmsg-parser refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KmsgError {
    #[error("invalid kmsg; must contain a ';': {0:?}")]
    NoSemicolon(String),
    #[error("invalid kmsg: must contain at least 3 ',' separated fields: {0:?}")]
    TooFewFields(String),
    #[error("invalid kmsg field {index} {text:?}: {source}")]
    Field {
        index: usize,
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// Parse a record as go-kmsg-parser does: the message is the text after
/// the first `;` up to the first newline (continuation lines, which start
/// with a space, are dropped).
pub fn parse_kmsg(raw: &str) -> Result<KmsgRecord, KmsgError> {
    let (prefix, rest) = raw
        .split_once(';')
        .ok_or_else(|| KmsgError::NoSemicolon(raw.to_owned()))?;
    let fields: Vec<&str> = prefix.split(',').collect();
    if fields.len() < 3 {
        return Err(KmsgError::TooFewFields(raw.to_owned()));
    }
    let number = |i: usize| {
        fields[i].parse::<u64>().map_err(|source| KmsgError::Field {
            index: i,
            text: fields[i].to_owned(),
            source,
        })
    };
    number(0)?;
    Ok(KmsgRecord {
        sequence: number(1)?,
        timestamp_us: number(2)?,
        message: rest.split('\n').next().unwrap_or("").to_owned(),
    })
}

/// One OOM kill (cadvisor's OomInstance).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OomInstance {
    pub pid: u32,
    pub process_name: String,
    /// The killed task's memory cgroup.
    pub container_name: String,
    /// The memory cgroup whose limit was hit; `/` for a node out of memory.
    pub victim_container_name: String,
    /// `CONSTRAINT_MEMCG`, `CONSTRAINT_NONE`, ... (empty in old kernels' format).
    pub constraint: String,
    /// Microseconds since boot.
    pub timestamp_us: u64,
}

impl OomInstance {
    /// The `SystemOOM` node event's message, for a kill no cgroup's limit
    /// caused (upstream's: only the root cgroup's).
    pub fn system_oom_message(&self) -> Option<String> {
        (self.victim_container_name == "/").then(|| {
            if !self.process_name.is_empty() && self.pid != 0 {
                format!(
                    "System OOM encountered, victim process: {}, pid: {}",
                    self.process_name, self.pid
                )
            } else {
                "System OOM encountered".to_owned()
            }
        })
    }
}

/// The kernel log read so far: outside an OOM report, or inside one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum OomParser {
    #[default]
    Idle,
    Reporting(OomInstance),
}

/// `path.Join("/", p)`: rooted, cleaned of empty and `.` parts.
fn rooted(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

impl OomParser {
    /// The next kernel log line: Some is an OOM kill whose report ended
    /// with it (cadvisor's StreamOoms loop).
    pub fn step(self, record: &KmsgRecord) -> (OomParser, Option<OomInstance>) {
        let line = record.message.as_str();
        let mut oom = match self {
            OomParser::Idle if FIRST_LINE.is_match(line) => {
                let oom = OomInstance {
                    container_name: "/".into(),
                    victim_container_name: "/".into(),
                    timestamp_us: record.timestamp_us,
                    ..Default::default()
                };
                return (OomParser::Reporting(oom), None);
            }
            OomParser::Idle => return (OomParser::Idle, None),
            OomParser::Reporting(oom) => oom,
        };
        let finished = if let Some(m) = CONTAINER.captures(line) {
            oom.constraint = m[1].to_owned();
            oom.victim_container_name = m[5].to_owned();
            oom.container_name = m[6].to_owned();
            oom.process_name = m[7].to_owned();
            oom.pid = m[8].parse().unwrap_or(0);
            true
        } else {
            if let Some(m) = LEGACY_CONTAINER.captures(line) {
                oom.container_name = rooted(&m[1]);
                oom.victim_container_name = rooted(&m[2]);
            }
            match LAST_LINE.captures(line) {
                Some(m) => {
                    oom.pid = m[1].parse().unwrap_or(0);
                    oom.process_name = m[2].to_owned();
                    true
                }
                None => false,
            }
        };
        if finished {
            oom.timestamp_us = record.timestamp_us;
            (OomParser::Idle, Some(oom))
        } else {
            (OomParser::Reporting(oom), None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(lines: &[&str]) -> Vec<OomInstance> {
        let mut parser = OomParser::Idle;
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let record = KmsgRecord {
                sequence: i as u64,
                timestamp_us: 1000 + i as u64,
                message: (*line).to_owned(),
            };
            let (next, oom) = parser.step(&record);
            parser = next;
            out.extend(oom);
        }
        out
    }

    #[test]
    fn kmsg_records_parse_as_go_kmsg_parsers() {
        assert_eq!(
            parse_kmsg(
                "6,18230,11913802896,-;rkbr-ci: port 2 entered blocking state\n SUBSYSTEM=net\n"
            ),
            Ok(KmsgRecord {
                sequence: 18230,
                timestamp_us: 11913802896,
                message: "rkbr-ci: port 2 entered blocking state".into(),
            })
        );
        assert_eq!(parse_kmsg("6,1,2,-,caller=T1;a;b").unwrap().message, "a;b");
        assert_eq!(
            parse_kmsg("no separator"),
            Err(KmsgError::NoSemicolon("no separator".into()))
        );
        assert_eq!(
            parse_kmsg("6,1;short"),
            Err(KmsgError::TooFewFields("6,1;short".into()))
        );
        assert!(
            matches!(
                parse_kmsg("x,1,2,-;m"),
                Err(KmsgError::Field { index: 0, ref text, .. }) if text == "x"
            ),
            "{:?}",
            parse_kmsg("x,1,2,-;m")
        );
    }

    /// cadvisor's test cases: a container's memory limit (no event), the
    /// node out of memory (SystemOOM), and the old kernels' format.
    #[test]
    fn oom_reports_gather_into_one_kill() {
        let memcg = feed(&[
            "unrelated line",
            "stress invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0",
            "stress cpuset=/ mems_allowed=0",
            "Memory cgroup out of memory: Killed process 19667 (stress) total-vm:1331272kB",
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=ef6f2fa5,mems_allowed=0,oom_memcg=/kubepods/burstable/pod1/ef6f2fa5,task_memcg=/kubepods/burstable/pod1/ef6f2fa5,task=stress,pid=19667,uid=0",
        ]);
        // The "Killed process" line ends the report before the oom-kill line.
        assert_eq!(memcg.len(), 1, "{memcg:?}");
        assert_eq!(
            (memcg[0].pid, memcg[0].process_name.as_str()),
            (19667, "stress")
        );
        assert_eq!(memcg[0].victim_container_name, "/", "not yet known");
        let memcg = feed(&[
            "stress invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0",
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=ef6f2fa5,mems_allowed=0,oom_memcg=/kubepods/burstable/pod1/ef6f2fa5,task_memcg=/kubepods/burstable/pod1/ef6f2fa5,task=stress,pid=19667,uid=0",
            "Memory cgroup out of memory: Killed process 19667 (stress)",
        ]);
        assert_eq!(
            memcg,
            [OomInstance {
                pid: 19667,
                process_name: "stress".into(),
                container_name: "/kubepods/burstable/pod1/ef6f2fa5".into(),
                victim_container_name: "/kubepods/burstable/pod1/ef6f2fa5".into(),
                constraint: "CONSTRAINT_MEMCG".into(),
                timestamp_us: 1001,
            }]
        );
        assert_eq!(memcg[0].system_oom_message(), None);
        let system = feed(&[
            "badsysprogram invoked oom-killer: gfp_mask=0x280da, order=0, oom_score_adj=0",
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/,task_memcg=/system.slice/bad.service,task=badsysprogram,pid=1532,uid=0",
        ]);
        assert_eq!(
            system[0].system_oom_message().as_deref(),
            Some("System OOM encountered, victim process: badsysprogram, pid: 1532")
        );
        let legacy = feed(&[
            "ruby invoked oom-killer: gfp_mask=0x201da, order=0, oom_score_adj=0",
            "Task in /mem2 killed as a result of limit of /mem3",
            "Memory cgroup out of memory: Kill process 13536 (memorymonster) score 1000 or sacrifice child",
            "Killed process 13536 (memorymonster) total-vm:1460016kB, anon-rss:1414192kB",
        ]);
        assert_eq!(
            (
                legacy[0].container_name.as_str(),
                legacy[0].victim_container_name.as_str()
            ),
            ("/mem2", "/mem3")
        );
        assert_eq!((legacy[0].pid, legacy[0].timestamp_us), (13536, 1003));
        assert_eq!(legacy[0].system_oom_message(), None);
        let unnamed = OomInstance {
            victim_container_name: "/".into(),
            ..Default::default()
        };
        assert_eq!(
            unnamed.system_oom_message().as_deref(),
            Some("System OOM encountered")
        );
    }
}
