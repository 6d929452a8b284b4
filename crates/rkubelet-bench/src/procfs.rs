//! What /proc says about the rkubelet process: memory high-water mark and
//! CPU time.

use anyhow::{Context, bail};

/// Resident set size figures from /proc/PID/status, in KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// VmRSS: resident now.
    pub rss_kib: u64,
    /// VmHWM: the peak resident set size so far.
    pub hwm_kib: u64,
}

pub fn memory(pid: u32) -> anyhow::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .with_context(|| format!("{path} has no {name}"))?;
        let kib = line.trim().trim_end_matches("kB").trim();
        kib.parse()
            .with_context(|| format!("{path}: bad {name} value {kib:?}"))
    };
    Ok(Memory {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
    })
}

/// utime + stime of the process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name is in parentheses and may contain blanks: fields
    // start after the last ')'. There, field 3 (state) is index 0, so
    // utime (field 14) is index 11 and stime (field 15) index 12.
    let Some((_, rest)) = text.rsplit_once(')') else {
        bail!("{path}: unexpected format");
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .with_context(|| format!("{path}: too few fields"))?
            .parse()
            .with_context(|| format!("{path}: bad field {}", i + 3))
    };
    Ok(get(11)? + get(12)?)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 if that fails, the value
/// on every Linux platform in practice).
pub fn clock_ticks_per_sec() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The node's available memory as the kubelets' eviction managers compute
/// memory.available on cgroup v1: MemTotal less the root memory cgroup's
/// working set (usage less inactive file pages).
pub fn node_available_memory() -> anyhow::Result<u64> {
    use kubelet_core::stats;
    let read =
        |path: &str| std::fs::read_to_string(path).with_context(|| format!("reading {path}"));
    let meminfo = stats::parse_meminfo(&read("/proc/meminfo")?)?;
    let usage = read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?;
    let usage: u64 = usage
        .trim()
        .parse()
        .with_context(|| format!("memory.usage_in_bytes: {usage:?}"))?;
    let stat = read("/sys/fs/cgroup/memory/memory.stat")?;
    let root = stats::MemoryReading::from_cgroup_v1(
        usage,
        &stats::parse_flat_keyed("memory.stat", &stat)?,
    )?;
    Ok(stats::node_available_memory(
        &meminfo,
        root.working_set_bytes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        let m = memory(me).unwrap();
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib);
        cpu_ticks(me).unwrap();
        assert!(clock_ticks_per_sec() > 0);
    }
}
