//! Feature gates (`featureGates`, `--feature-gates`) as the upstream
//! kubelet of v1.37.2 takes them: every gate of its registry is known, with
//! its default, lock, stage and dependencies (`feature_gates.tsv`, made by
//! `hack/feature-gates.sh` from the k8s.io/kubernetes module), and a map is
//! checked with upstream's rules and messages: an unknown gate, a locked
//! gate set against its lock, a PreAlpha gate, or a gate enabled without
//! the gates it depends on stops start-up; `AllAlpha`/`AllBeta` turn on
//! every gate of their stage not named. On top, rkubelet's rule: a gate the
//! kubelet's own code reads may leave its default only where rkubelet
//! honours both values ([`HONOURED`]); otherwise it is refused, naming the
//! gate, rather than silently run as the default. Gates only other
//! components read change nothing here, as in the upstream kubelet.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use super::ConfigError;

/// A gate's stage, as upstream names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    PreAlpha,
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

impl Stage {
    /// The `stage` label of `kubernetes_feature_enabled` (upstream's
    /// PreRelease string: empty for GA).
    pub fn label(self) -> &'static str {
        match self {
            Stage::PreAlpha => "PRE-ALPHA",
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
            Stage::Ga => "",
            Stage::Deprecated => "DEPRECATED",
        }
    }
}

/// One gate of upstream's registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    pub default: bool,
    /// Locked to its default: setting the other value is an error.
    pub locked: bool,
    pub stage: Stage,
    /// Read by the kubelet's own code (cmd/kubelet, pkg/kubelet,
    /// pkg/volume).
    pub kubelet: bool,
    /// Gates it needs enabled.
    pub needs: Vec<&'static str>,
}

/// Kubelet gates rkubelet honours either way.
pub const HONOURED: &[&str] = &[
    "ContainerStopSignals",
    "EventedPLEG",
    "GracefulNodeShutdown",
    "GracefulNodeShutdownBasedOnPodPriority",
    "PodAndContainerStatsFromCRI",
    "ReloadKubeletClientCAFile",
    "ReloadKubeletServerCertificateFile",
    "ResourceHealthStatus",
    // DRA's device health messages, shown or not.
    "ResourceHealthStatusMessage",
    "RotateKubeletServerCertificate",
    // No topology manager option of v1.37.2 is alpha or beta: either value
    // changes nothing, in upstream's kubelet as in rkubelet.
    "TopologyManagerPolicyAlphaOptions",
    "TopologyManagerPolicyBetaOptions",
    // Windows nodes' only: either value is a Linux kubelet's behaviour.
    "WindowsGracefulNodeShutdown",
];

static TABLE: &str = include_str!("feature_gates.tsv");

static GATES: LazyLock<Vec<Gate>> = LazyLock::new(|| {
    TABLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let f: Vec<&'static str> = line.split('\t').collect();
            let stage = match f[3] {
                "PRE-ALPHA" => Stage::PreAlpha,
                "ALPHA" => Stage::Alpha,
                "BETA" => Stage::Beta,
                "DEPRECATED" => Stage::Deprecated,
                _ => Stage::Ga,
            };
            Gate {
                name: f[0],
                default: f[1] == "true",
                locked: f[2] == "true",
                stage,
                kubelet: f[4] == "true",
                needs: f
                    .get(5)
                    .map(|d| d.split(',').filter(|s| !s.is_empty()).collect())
                    .unwrap_or_default(),
            }
        })
        .collect()
});

/// Every gate upstream's kubelet knows, by name.
pub fn all() -> &'static [Gate] {
    &GATES
}

/// The gate `name`.
pub fn gate(name: &str) -> Option<&'static Gate> {
    GATES
        .binary_search_by(|g| g.name.cmp(name))
        .ok()
        .map(|i| &GATES[i])
}

/// Each gate's value under `set` (upstream's SetFromMap over the
/// defaults, `AllAlpha`/`AllBeta` expanded), once `set` passes upstream's
/// checks and rkubelet's; the error names the first gate refused.
pub fn resolve(set: &BTreeMap<String, bool>) -> Result<BTreeMap<&'static str, bool>, ConfigError> {
    let refuse = |m: String| Err(ConfigError::Rejected(format!("featureGates: {m}")));
    let mut enabled: BTreeMap<&'static str, bool> =
        GATES.iter().map(|g| (g.name, g.default)).collect();
    for (name, &value) in set {
        let Some(g) = gate(name) else {
            return refuse(format!("unrecognized feature gate: {name}"));
        };
        if g.locked && g.default != value {
            return refuse(format!(
                "cannot set feature gate {name} to {value}, feature is locked to {}",
                g.default
            ));
        }
        if g.stage == Stage::PreAlpha {
            return refuse(format!(
                "cannot set feature gate {name} to {value}, feature is PreAlpha at emulated version 1.37"
            ));
        }
        enabled.insert(g.name, value);
    }
    for (special, stage) in [("AllAlpha", Stage::Alpha), ("AllBeta", Stage::Beta)] {
        if set.get(special) == Some(&true) {
            for g in GATES.iter().filter(|g| g.stage == stage && !g.locked) {
                if !set.contains_key(g.name) {
                    enabled.insert(g.name, true);
                }
            }
        }
    }
    for g in GATES.iter().filter(|g| enabled[g.name]) {
        let off: Vec<&str> = g
            .needs
            .iter()
            .copied()
            .filter(|d| !enabled.get(d).copied().unwrap_or(false))
            .collect();
        if !off.is_empty() {
            return refuse(format!(
                "{} is enabled, but depends on features that are disabled: [{}]",
                g.name,
                off.join(" ")
            ));
        }
    }
    for g in GATES.iter() {
        let value = enabled[g.name];
        if g.kubelet && value != g.default && !HONOURED.contains(&g.name) {
            return refuse(format!(
                "feature gate {}={value} is not supported by rkubelet, which runs as upstream's default {}={}",
                g.name, g.name, g.default
            ));
        }
    }
    Ok(enabled)
}

/// Upstream's warnings for gates set by name: GA and deprecated ones will
/// go away.
pub fn warnings(set: &BTreeMap<String, bool>) -> Vec<String> {
    set.iter()
        .filter_map(|(name, value)| {
            let stage = gate(name)?.stage;
            let what = match stage {
                Stage::Ga => "GA",
                Stage::Deprecated => "deprecated",
                _ => return None,
            };
            Some(format!(
                "setting {what} feature gate {name}={value}. It will be removed in a future release."
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn the_table_is_upstreams_registry() {
        assert!(all().len() > 200, "{}", all().len());
        assert!(all().windows(2).all(|w| w[0].name < w[1].name), "sorted");
        let g = gate("RotateKubeletServerCertificate").unwrap();
        assert!(g.default && !g.locked && g.kubelet && g.stage == Stage::Beta);
        assert!(gate("AllAlpha").is_some() && gate("NoSuchGate").is_none());
        for name in HONOURED {
            assert!(gate(name).is_some_and(|g| g.kubelet), "{name}");
        }
    }

    #[test]
    fn maps_are_checked_with_upstreams_rules_then_rkubelets() {
        let locked = all().iter().find(|g| g.locked).unwrap();
        let control_plane_only = all()
            .iter()
            .find(|g| !g.kubelet && !g.locked && g.stage == Stage::Beta && g.needs.is_empty())
            .unwrap();
        let kubelet_alpha = all()
            .iter()
            .find(|g| {
                g.kubelet
                    && !g.locked
                    && g.stage == Stage::Alpha
                    && !g.default
                    && g.needs.is_empty()
            })
            .unwrap();
        for (what, map, want) in [
            (
                "unknown",
                set(&[("NoSuchGate", true)]),
                Err(
                    "invalid configuration: featureGates: unrecognized feature gate: NoSuchGate"
                        .to_owned(),
                ),
            ),
            (
                "locked",
                set(&[(locked.name, !locked.default)]),
                Err(format!(
                    "invalid configuration: featureGates: cannot set feature gate {} to {}, feature is locked to {}",
                    locked.name, !locked.default, locked.default
                )),
            ),
            (
                "a locked gate at its value",
                set(&[(locked.name, locked.default)]),
                Ok(()),
            ),
            (
                "a gate only other components read",
                set(&[(control_plane_only.name, !control_plane_only.default)]),
                Ok(()),
            ),
            (
                "a kubelet gate rkubelet does not honour",
                set(&[(kubelet_alpha.name, true)]),
                Err(format!(
                    "invalid configuration: featureGates: feature gate {0}=true is not supported by rkubelet, which runs as upstream's default {0}=false",
                    kubelet_alpha.name
                )),
            ),
            (
                "an honoured gate off",
                set(&[("ReloadKubeletServerCertificateFile", false)]),
                Ok(()),
            ),
            (
                "the topology manager's option gates, which change nothing",
                set(&[
                    ("TopologyManagerPolicyAlphaOptions", true),
                    ("TopologyManagerPolicyBetaOptions", false),
                ]),
                Ok(()),
            ),
        ] {
            let got = resolve(&map).map(|_| ()).map_err(|e| e.to_string());
            assert_eq!(got, want, "{what}");
        }
        // AllAlpha turns on every alpha gate: among them some that depend
        // on gates it leaves off (upstream refuses that too) and the
        // kubelet's, which rkubelet does not have.
        let err = resolve(&set(&[("AllAlpha", true)]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid configuration: featureGates: "),
            "{err}"
        );
        let alpha_deps: Vec<(String, bool)> = all()
            .iter()
            .filter(|g| g.stage == Stage::Alpha)
            .flat_map(|g| g.needs.iter().map(|d| ((*d).to_owned(), true)))
            .collect();
        let mut all_alpha = set(&[("AllAlpha", true)]);
        all_alpha.extend(alpha_deps);
        let e = resolve(&all_alpha).unwrap_err().to_string();
        assert!(
            e.contains("is not supported by rkubelet")
                || e.contains("locked")
                || e.contains("PreAlpha"),
            "{e}"
        );
        let on = resolve(&set(&[("ReloadKubeletClientCAFile", false)])).unwrap();
        assert!(!on["ReloadKubeletClientCAFile"]);
        assert!(on["RotateKubeletServerCertificate"]);
    }

    #[test]
    fn dependencies_are_checked() {
        // StorageVersionAPI (alpha, the API server's) needs
        // APIServerIdentity.
        assert_eq!(
            gate("StorageVersionAPI").unwrap().needs,
            ["APIServerIdentity"]
        );
        let err = resolve(&set(&[
            ("StorageVersionAPI", true),
            ("APIServerIdentity", false),
        ]))
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "invalid configuration: featureGates: StorageVersionAPI is enabled, but depends on features that are disabled: [APIServerIdentity]"
        );
        resolve(&set(&[("StorageVersionAPI", true)])).unwrap();
    }

    #[test]
    fn ga_and_deprecated_gates_set_by_name_are_warned_about() {
        let ga = all().iter().find(|g| g.stage == Stage::Ga).unwrap();
        let w = warnings(&set(&[
            (ga.name, ga.default),
            ("RotateKubeletServerCertificate", true),
        ]));
        assert_eq!(
            w,
            vec![format!(
                "setting GA feature gate {}={}. It will be removed in a future release.",
                ga.name, ga.default
            )]
        );
    }
}
