//! CPU lists in the Linux list format (`0-3,8`), as upstream's
//! k8s.io/utils/cpuset parses them: `reservedSystemCPUs`, and the CPUs of
//! `/sys/devices/system/cpu/possible`.

use std::collections::BTreeSet;

/// The most CPUs one range may name: a bound against a list that would
/// take the memory of the node (upstream has none).
const MAX_RANGE: u32 = 1 << 16;

/// The CPUs `list` names (empty: none), or upstream's error.
pub fn parse(list: &str) -> Result<BTreeSet<u32>, String> {
    let mut cpus = BTreeSet::new();
    if list.is_empty() {
        return Ok(cpus);
    }
    let number = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| format!("strconv.Atoi: parsing {s:?}: invalid syntax"))
    };
    for range in list.split(',') {
        match range.split_once('-') {
            None => {
                cpus.insert(number(range)?);
            }
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo > hi {
                    return Err(format!("invalid range {range:?} ({lo} > {hi})"));
                }
                if hi - lo >= MAX_RANGE {
                    return Err(format!(
                        "invalid range {range:?} (more than {MAX_RANGE} CPUs)"
                    ));
                }
                cpus.extend(lo..=hi);
            }
        }
    }
    Ok(cpus)
}

/// `cpus` in the Linux list format, as upstream's CPUSet.String() writes
/// it: ascending, runs of two or more as ranges (`0-2,5`); empty for none.
pub fn format(cpus: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for &c in cpus {
        run = match run {
            Some((lo, hi)) if hi + 1 == c => Some((lo, c)),
            Some(done) => {
                out.push(range_text(done));
                Some((c, c))
            }
            None => Some((c, c)),
        };
    }
    if let Some(done) = run {
        out.push(range_text(done));
    }
    out.join(",")
}

fn range_text((lo, hi): (u32, u32)) -> String {
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}-{hi}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_format_as_upstreams() {
        for (cpus, want) in [
            (vec![], ""),
            (vec![3], "3"),
            (vec![0, 1], "0-1"),
            (vec![0, 1, 2, 5, 7, 8], "0-2,5,7-8"),
        ] {
            let set = cpus.into_iter().collect();
            assert_eq!(format(&set), want);
            assert_eq!(parse(want).unwrap(), set);
        }
    }

    #[test]
    fn lists_parse_as_upstreams() {
        for (list, want) in [
            ("", Ok(vec![])),
            ("0", Ok(vec![0])),
            ("0-3,8", Ok(vec![0, 1, 2, 3, 8])),
            ("1-1,1", Ok(vec![1])),
            ("3-1", Err("invalid range \"3-1\" (3 > 1)".to_owned())),
            (
                "a",
                Err("strconv.Atoi: parsing \"a\": invalid syntax".to_owned()),
            ),
            (
                "0,",
                Err("strconv.Atoi: parsing \"\": invalid syntax".to_owned()),
            ),
            (
                "0-100000",
                Err("invalid range \"0-100000\" (more than 65536 CPUs)".to_owned()),
            ),
        ] {
            assert_eq!(
                parse(list).map(|s| s.into_iter().collect::<Vec<_>>()),
                want,
                "{list:?}"
            );
        }
    }
}
