//! The kubelet process's own metrics on `/metrics` (client_golang's process
//! collector, which upstream's kubelet registers): CPU time, memory, file
//! descriptors and start time, read from `/proc/self`.

use std::fs;

use kubelet_core::metrics::{Counter, Gauge};

/// The fields of `/proc/<pid>/stat` the collector reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// User and system CPU time, in clock ticks.
    utime: u64,
    stime: u64,
    /// Start time after boot, in clock ticks.
    starttime: u64,
    /// Virtual memory size in bytes.
    vsize: u64,
    /// Resident set size in pages.
    rss: u64,
}

/// Parse `/proc/<pid>/stat` (the command name may hold spaces and parentheses).
fn parse_stat(stat: &str) -> Option<Stat> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields from the 3rd (state) on; utime is the 14th field of the line.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss: field(24)?,
    })
}

/// Boot time in seconds since the epoch, from `/proc/stat`.
fn parse_btime(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit `name` of `/proc/<pid>/limits` (-1 for unlimited).
fn parse_soft_limit(limits: &str, name: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        Some(-1.0)
    } else {
        soft.parse().ok()
    }
}

fn gauge(out: &mut String, name: &'static str, help: &'static str, value: f64) {
    let g = Gauge::new(name, help, &[]);
    g.set(&[], value);
    g.render(out);
}

/// The `process_*` families of this process, in the text exposition format;
/// a family whose source cannot be read is left out.
pub fn render_process_metrics() -> String {
    let mut out = String::new();
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let stat = fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_stat(&s));
    if let Some(stat) = stat {
        let cpu = Counter::new(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            &[],
        );
        cpu.add(&[], (stat.utime + stat.stime) as f64 / ticks);
        cpu.render(&mut out);
    }
    let limits = fs::read_to_string("/proc/self/limits").unwrap_or_default();
    if let Some(max) = parse_soft_limit(&limits, "Max open files") {
        gauge(
            &mut out,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            max,
        );
    }
    if let Ok(dir) = fs::read_dir("/proc/self/fd") {
        gauge(
            &mut out,
            "process_open_fds",
            "Number of open file descriptors.",
            dir.count() as f64,
        );
    }
    if let Some(stat) = stat {
        let page = rustix::param::page_size() as f64;
        gauge(
            &mut out,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            stat.rss as f64 * page,
        );
        let btime = fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| parse_btime(&s));
        if let Some(btime) = btime {
            gauge(
                &mut out,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                btime as f64 + stat.starttime as f64 / ticks,
            );
        }
        gauge(
            &mut out,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            stat.vsize as f64,
        );
    }
    if let Some(max) = parse_soft_limit(&limits, "Max address space") {
        gauge(
            &mut out,
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            max,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "4242 (rku (be) let) S 1 4242 4242 0 -1 4194560 5000 0 0 0 \
                    150 25 0 0 20 0 12 0 98765 123456789 4321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                utime: 150,
                stime: 25,
                starttime: 98765,
                vsize: 123456789,
                rss: 4321,
            })
        );
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat("no parens"), None);

        assert_eq!(
            parse_btime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_btime("cpu 1\n"), None);

        let limits = "\
Limit                     Soft Limit           Hard Limit           Units
Max address space         unlimited            unlimited            bytes
Max open files            1024                 1048576              files
";
        assert_eq!(parse_soft_limit(limits, "Max open files"), Some(1024.0));
        assert_eq!(parse_soft_limit(limits, "Max address space"), Some(-1.0));
        assert_eq!(parse_soft_limit(limits, "Max processes"), None);
    }

    #[test]
    fn renders_this_process() {
        let text = render_process_metrics();
        for name in [
            "process_cpu_seconds_total",
            "process_max_fds",
            "process_open_fds",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_virtual_memory_bytes",
            "process_virtual_memory_max_bytes",
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} in\n{text}"
            );
        }
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name}"));
            line[name.len() + 1..].parse().unwrap()
        };
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_start_time_seconds") > 1.5e9);
    }
}
