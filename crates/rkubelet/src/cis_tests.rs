//! The CIS Kubernetes Benchmark's kubelet checks (v1.12, section 4.2, as
//! kube-bench's cfg/cis-1.12/node.yaml words them), walked over what
//! rkubelet runs with: its defaults, and the configuration `hack/up.sh`
//! writes with the flags it passes. Each outcome is the one the README's
//! table states; a change to a default or to up.sh that turns a check
//! fails this test until the table says why.

use clap::Parser as _;
use kubelet_core::config::AuthorizationMode;

use super::{Flags, Settings};

/// Settings from `args` as rkubelet's command line gives them.
fn settings(args: &[&str]) -> anyhow::Result<Settings> {
    let flags = Flags::try_parse_from(std::iter::once("rkubelet").chain(args.iter().copied()))?;
    flags.into_settings_with(|| Ok("node-a".to_owned()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
}
use Outcome::{Fail, Pass};

/// A check: its id, and whether the settings (and the command line, for
/// the one only a flag can set) pass it.
struct Check {
    id: &'static str,
    passes: fn(&Settings, &[&str]) -> bool,
}

/// The ciphers kube-bench's 4.2.12 accepts.
const STRONG: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
];

const CHECKS: &[Check] = &[
    // --anonymous-auth false.
    Check {
        id: "4.2.1",
        passes: |s, _| !s.config.authentication.anonymous.enabled,
    },
    // --authorization-mode not AlwaysAllow.
    Check {
        id: "4.2.2",
        passes: |s, _| s.config.authorization.mode != AuthorizationMode::AlwaysAllow,
    },
    // --client-ca-file set.
    Check {
        id: "4.2.3",
        passes: |s, _| s.config.authentication.x509.client_ca_file.is_some(),
    },
    // --read-only-port 0.
    Check {
        id: "4.2.4",
        passes: |s, _| s.config.read_only_port == 0,
    },
    // --streaming-connection-idle-timeout not 0.
    Check {
        id: "4.2.5",
        passes: |s, _| !s.config.streaming_connection_idle_timeout.is_zero(),
    },
    // --make-iptables-util-chains true or unset: rkubelet makes no chains
    // and never sets it.
    Check {
        id: "4.2.6",
        passes: |s, _| {
            !s.ignored_fields
                .iter()
                .any(|f| f == "makeIPTablesUtilChains")
        },
    },
    // --hostname-override not set.
    Check {
        id: "4.2.7",
        passes: |_, args| !args.iter().any(|a| a.starts_with("--hostname-override")),
    },
    // --tls-cert-file and --tls-private-key-file set.
    Check {
        id: "4.2.9",
        passes: |s, _| s.config.tls_cert_file.is_some() && s.config.tls_private_key_file.is_some(),
    },
    // --rotate-certificates not false.
    Check {
        id: "4.2.10",
        passes: |s, _| s.config.rotate_certificates,
    },
    // RotateKubeletServerCertificate true.
    Check {
        id: "4.2.11",
        passes: |s, _| s.config.feature_enabled("RotateKubeletServerCertificate"),
    },
    // Only strong ciphers: rkubelet's TLS 1.2 suites are all ECDHE AEAD.
    Check {
        id: "4.2.12",
        passes: |s, _| {
            let suites: Vec<&str> = if s.config.tls_cipher_suites.is_empty() {
                kubelet_core::config::TLS_CIPHER_SUITES
                    .iter()
                    .copied()
                    .filter(|c| c.starts_with("TLS_ECDHE_"))
                    .collect()
            } else {
                s.config
                    .tls_cipher_suites
                    .iter()
                    .map(String::as_str)
                    .collect()
            };
            suites
                .iter()
                .all(|c| STRONG.contains(c) || c.ends_with("_CHACHA20_POLY1305_SHA256"))
        },
    },
    // A limit on pod PIDs.
    Check {
        id: "4.2.13",
        passes: |s, _| s.config.pod_pids_limit > 0,
    },
    // --seccomp-default true.
    Check {
        id: "4.2.14",
        passes: |s, _| s.config.seccomp_default,
    },
];

/// The README's table: the outcome under rkubelet's defaults and under
/// hack/up.sh's configuration.
const EXPECTED: &[(&str, Outcome, Outcome)] = &[
    ("4.2.1", Pass, Pass),
    ("4.2.2", Pass, Pass),
    ("4.2.3", Fail, Pass),
    ("4.2.4", Pass, Pass),
    ("4.2.5", Pass, Pass),
    ("4.2.6", Pass, Pass),
    ("4.2.7", Pass, Fail),
    ("4.2.9", Fail, Fail),
    ("4.2.10", Fail, Pass),
    ("4.2.11", Pass, Pass),
    ("4.2.12", Pass, Pass),
    ("4.2.13", Fail, Pass),
    ("4.2.14", Fail, Pass),
];

/// hack/up.sh's KubeletConfiguration (its heredoc, the shell's variables
/// given values) and the flags it starts rkubelet with.
fn up_sh() -> (String, Vec<String>) {
    let script = include_str!("../../../hack/up.sh");
    let start = script.find("apiVersion: kubelet.config.k8s.io").unwrap();
    let end = start + script[start..].find("\nCFG\n").unwrap();
    let config = script[start..end]
        .replace("$state", "/tmp/up")
        .replace(
            "$CONTAINER_RUNTIME_ENDPOINT",
            "unix:///run/containerd/containerd.sock",
        )
        .replace("$RKUBELET_CLUSTER_DIR", "/tmp/cluster");
    let line = script
        .lines()
        .skip_while(|l| !l.contains("setsid target/release/rkubelet"))
        .take_while(|l| !l.contains("</dev/null"))
        .collect::<Vec<_>>()
        .join(" ");
    let flags = line
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(str::to_owned)
        .collect();
    (config, flags)
}

#[test]
fn the_cis_kubelet_checks_under_the_defaults_and_up_sh() {
    let dir = tempfile::tempdir().unwrap();
    let (config, up_flags) = up_sh();
    let file = dir.path().join("kubelet-config.yaml");
    std::fs::write(&file, &config).unwrap();
    let file_arg = file.display().to_string();
    // up.sh's flags: the file, and the others given a value each.
    let mut up_args: Vec<String> = vec!["--config".into(), file_arg];
    for f in up_flags.iter().filter(|f| f.as_str() != "--config") {
        up_args.push(f.clone());
        up_args.push(match f.as_str() {
            "--hostname-override" => "rk-node".into(),
            _ => dir.path().join(&f[2..]).display().to_string(),
        });
    }
    assert!(up_flags.iter().any(|f| f == "--kubeconfig"), "{up_flags:?}");
    let profiles: [(&str, Vec<&str>); 2] = [
        ("defaults", Vec::new()),
        ("hack/up.sh", up_args.iter().map(String::as_str).collect()),
    ];
    let mut got = Vec::new();
    for (i, (name, args)) in profiles.iter().enumerate() {
        let settings = settings(args).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        for check in CHECKS {
            let outcome = if (check.passes)(&settings, args) {
                Pass
            } else {
                Fail
            };
            let want = EXPECTED.iter().find(|(id, ..)| *id == check.id).unwrap();
            let want = if i == 0 { want.1 } else { want.2 };
            got.push((check.id, *name, outcome, want));
        }
    }
    let wrong: Vec<_> = got.iter().filter(|(_, _, o, w)| o != w).collect();
    assert!(
        wrong.is_empty(),
        "outcomes differ from the README's table: {wrong:?}"
    );
    assert_eq!(CHECKS.len(), EXPECTED.len());
    // The README's table says the same.
    let readme = include_str!("../../../README.md");
    let word = |o: Outcome| if o == Pass { "pass" } else { "fail" };
    for (id, defaults, up) in EXPECTED {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| {id} ")))
            .unwrap_or_else(|| panic!("README lacks {id}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(
            (cells[2], cells[3]),
            (word(*defaults), word(*up)),
            "README's row: {row}"
        );
    }
}
