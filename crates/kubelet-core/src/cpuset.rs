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

#[cfg(test)]
mod tests {
    use super::*;

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
