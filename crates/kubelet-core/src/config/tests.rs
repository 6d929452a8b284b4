use std::path::Path;

use super::*;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn parse_body(body: &str) -> Result<(KubeletConfiguration, Vec<String>), ConfigError> {
    parse_kubelet_config_reporting(&format!("{HEADER}{body}"))
}

#[test]
fn tracing_section() {
    let doc = |body: &str| format!("kind: KubeletConfiguration\napiVersion: {API_VERSION}\n{body}");
    let cfg = parse_kubelet_config(&doc("tracing: {}")).unwrap();
    assert_eq!(cfg.tracing, Some(TracingConfiguration::default()));
    let cfg = parse_kubelet_config(&doc(
        "tracing:\n  endpoint: otel:4317\n  samplingRatePerMillion: 1000000",
    ))
    .unwrap();
    let t = cfg.tracing.unwrap();
    assert_eq!(
        (t.endpoint.as_str(), t.sampling_rate_per_million),
        ("otel:4317", 1_000_000)
    );
    assert!(parse_kubelet_config(&doc("")).unwrap().tracing.is_none());
    for (bad, names) in [
        (
            "tracing: {samplingRatePerMillion: 1000001}",
            "tracing.samplingRatePerMillion",
        ),
        ("tracing: {collector: x}", "tracing.collector"),
    ] {
        let err = parse_kubelet_config(&doc(bad))
            .and_then(|cfg| cfg.validate())
            .unwrap_err()
            .to_string();
        assert!(err.contains(names), "{bad}: {err}");
    }
}

#[test]
fn configz_round_trips_through_the_decoder() {
    fn drop_nulls(v: &mut serde_json::Value) {
        if let serde_json::Value::Object(m) = v {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
    }
    let mut cfg = KubeletConfiguration {
        static_pod_path: Some("/etc/kubernetes/manifests".into()),
        sync_frequency: Duration::from_secs(90),
        ..Default::default()
    };
    cfg.authorization.mode = AuthorizationMode::AlwaysAllow;
    let mut json = cfg.to_v1beta1_json();
    assert_eq!(json["syncFrequency"], "1m30s");
    drop_nulls(&mut json);
    let back = parse_kubelet_config(&json.to_string()).unwrap();
    assert_eq!(back, cfg);
}

#[test]
fn defaults_match_upstream() {
    let d = KubeletConfiguration::default();
    assert_eq!(d.static_pod_path, None);
    assert_eq!(d.sync_frequency, Duration::from_secs(60));
    assert_eq!(d.file_check_frequency, Duration::from_secs(20));
    assert_eq!(
        d.container_runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(d.runtime_request_timeout, Duration::from_secs(120));
    assert_eq!(d.pod_logs_dir, PathBuf::from("/var/log/pods"));
    assert_eq!(d.healthz_bind_address, "127.0.0.1");
    assert_eq!(d.healthz_port, 10248);
    assert_eq!(d.read_only_port, 0);
    assert_eq!(d.address, "0.0.0.0");
    assert_eq!(d.max_pods, 110);
    assert_eq!(d.cgroup_driver, CgroupDriver::Cgroupfs);
    assert_eq!(d.kube_api_qps, 50);
    assert_eq!(d.kube_api_burst, 100);
    assert_eq!(d.node_status_update_frequency, Duration::from_secs(10));
    assert_eq!(d.node_status_report_frequency, Duration::from_secs(300));
    assert!(d.register_node);
    d.validate().unwrap();
}

#[test]
fn header_only_gives_defaults() {
    let (cfg, ignored) = parse_body("").unwrap();
    assert_eq!(cfg, KubeletConfiguration::default());
    assert!(ignored.is_empty());
}

#[test]
fn decodes_each_field() {
    type Check = fn(&KubeletConfiguration) -> bool;
    let cases: &[(&str, Check)] = &[
        ("staticPodPath: /etc/kubernetes/manifests", |c| {
            c.static_pod_path.as_deref() == Some("/etc/kubernetes/manifests".as_ref())
        }),
        ("staticPodPath: \"\"", |c| c.static_pod_path.is_none()),
        ("syncFrequency: 30s", |c| {
            c.sync_frequency == Duration::from_secs(30)
        }),
        ("syncFrequency: 0s", |c| {
            c.sync_frequency == Duration::from_secs(60)
        }),
        ("fileCheckFrequency: 1m0s", |c| {
            c.file_check_frequency == Duration::from_secs(60)
        }),
        (
            "containerRuntimeEndpoint: unix:///run/crio/crio.sock",
            |c| c.container_runtime_endpoint == "unix:///run/crio/crio.sock",
        ),
        ("containerRuntimeEndpoint: \"\"", |c| {
            c.container_runtime_endpoint == DEFAULT_CONTAINER_RUNTIME_ENDPOINT
        }),
        ("imageServiceEndpoint: unix:///run/images.sock", |c| {
            c.image_endpoint() == "unix:///run/images.sock"
        }),
        (
            "containerRuntimeEndpoint: unix:///run/crio/crio.sock",
            |c| {
                c.image_service_endpoint.is_empty()
                    && c.image_endpoint() == "unix:///run/crio/crio.sock"
            },
        ),
        ("runtimeRequestTimeout: 15m", |c| {
            c.runtime_request_timeout == Duration::from_secs(900)
        }),
        ("podLogsDir: /data/pod-logs", |c| {
            c.pod_logs_dir == Path::new("/data/pod-logs")
        }),
        ("healthzBindAddress: 0.0.0.0", |c| {
            c.healthz_bind_address == "0.0.0.0"
        }),
        ("healthzPort: 12345", |c| c.healthz_port == 12345),
        ("healthzPort: 0", |c| c.healthz_port == 0),
        ("readOnlyPort: 10255", |c| c.read_only_port == 10255),
        ("address: 127.0.0.1", |c| c.address == "127.0.0.1"),
        ("address: \"::\"", |c| c.address == "::"),
        ("maxPods: 250", |c| c.max_pods == 250),
        ("maxPods: 0", |c| c.max_pods == 110),
        ("cgroupDriver: systemd", |c| {
            c.cgroup_driver == CgroupDriver::Systemd
        }),
        ("cgroupDriver: cgroupfs", |c| {
            c.cgroup_driver == CgroupDriver::Cgroupfs
        }),
        ("kubeAPIQPS: 5", |c| c.kube_api_qps == 5),
        ("kubeAPIBurst: 10", |c| c.kube_api_burst == 10),
        ("eventRecordQPS: 5", |c| c.event_record_qps == 5),
        ("eventBurst: 7", |c| c.event_burst == 7),
        ("kubeAPIBurst: 0", |c| c.kube_api_burst == 100),
        ("nodeStatusUpdateFrequency: 4s", |c| {
            c.node_status_update_frequency == Duration::from_secs(4)
        }),
        ("nodeStatusReportFrequency: 1m", |c| {
            c.node_status_report_frequency == Duration::from_secs(60)
        }),
        ("registerNode: false", |c| !c.register_node),
        ("maxPods: null", |c| c.max_pods == 110),
        ("clusterDNS: [10.96.0.10, 'fd00::a']", |c| {
            c.cluster_dns == ["10.96.0.10", "fd00::a"]
        }),
        ("clusterDNS: ['fd00:0:0::000a']", |c| {
            c.cluster_dns == ["fd00::a"]
        }),
        ("clusterDomain: cluster.local", |c| {
            c.cluster_domain == "cluster.local"
        }),
        ("resolvConf: ''", |c| c.resolv_conf.is_empty()),
        ("resolvConf: /run/resolv.conf", |c| {
            c.resolv_conf == "/run/resolv.conf"
        }),
        ("seccompDefault: true", |c| c.seccomp_default),
        (
            "allowedUnsafeSysctls: ['kernel.msg*', net.core.somaxconn]",
            |c| c.allowed_unsafe_sysctls == ["kernel.msg*", "net.core.somaxconn"],
        ),
    ];
    for (body, check) in cases {
        let (cfg, ignored) = parse_body(body).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert!(check(&cfg), "{body}: {cfg:?}");
        assert!(ignored.is_empty(), "{body}: {ignored:?}");
    }
}

#[test]
fn kubeadm_style_zero_values_take_defaults() {
    let body = "syncFrequency: 0s\nfileCheckFrequency: 0s\nruntimeRequestTimeout: 0s\n\
                nodeStatusUpdateFrequency: 0s\nnodeStatusReportFrequency: 0s\n\
                httpCheckFrequency: 0s\ncgroupDriver: systemd\n";
    let (cfg, ignored) = parse_body(body).unwrap();
    assert_eq!(
        cfg,
        KubeletConfiguration {
            cgroup_driver: CgroupDriver::Systemd,
            ..KubeletConfiguration::default()
        }
    );
    assert!(ignored.is_empty(), "{ignored:?}");
    cfg.validate().unwrap();
}

#[test]
fn the_manifest_url_is_read_with_its_headers_and_period() {
    let body = "staticPodURL: http://192.0.2.1/pods
httpCheckFrequency: 5s
\
                staticPodURLHeader:\n  Authorization: [\"Bearer x\"]\n  X-Node: [a, b]\n";
    let (cfg, _) = parse_body(body).unwrap();
    cfg.validate().unwrap();
    assert_eq!(cfg.static_pod_url, "http://192.0.2.1/pods");
    assert_eq!(cfg.http_check_frequency, Duration::from_secs(5));
    assert_eq!(cfg.static_pod_url_header["X-Node"], ["a", "b"]);
    let (cfg, _) = parse_body("staticPodURL: https://192.0.2.1/pods\n").unwrap();
    cfg.validate().unwrap();
    let (cfg, _) = parse_body("staticPodURL: ftp://192.0.2.1/pods\n").unwrap();
    assert_eq!(
        cfg.validate().unwrap_err().to_string(),
        "invalid configuration: staticPodURL \"ftp://192.0.2.1/pods\": only http:// and https:// URLs are supported by rkubelet"
    );
}

#[test]
fn errors_name_the_field() {
    let cases: &[(&str, &[&str])] = &[
        ("bogusField: 1", &["unknown field \"bogusField\""]),
        ("staticpodpath: /x", &["unknown field \"staticpodpath\""]),
        (
            "syncFrequency: \"10\"",
            &["syncFrequency", "missing unit", "\"10\""],
        ),
        (
            "syncFrequency: 10",
            &["syncFrequency", "duration string", "got 10"],
        ),
        ("syncFrequency: abc", &["syncFrequency", "\"abc\""]),
        (
            "fileCheckFrequency: -1s",
            &["fileCheckFrequency", "negative"],
        ),
        ("runtimeRequestTimeout: 30", &["runtimeRequestTimeout"]),
        (
            "nodeStatusUpdateFrequency: true",
            &["nodeStatusUpdateFrequency", "duration"],
        ),
        ("healthzPort: abc", &["healthzPort", "port", "\"abc\""]),
        ("healthzPort: 70000", &["healthzPort", "70000"]),
        ("readOnlyPort: -1", &["readOnlyPort", "-1"]),
        ("maxPods: 1.5", &["maxPods", "integer"]),
        ("maxPods: \"110\"", &["maxPods", "integer"]),
        ("kubeAPIQPS: [1]", &["kubeAPIQPS", "a list"]),
        ("kubeAPIBurst: {a: 1}", &["kubeAPIBurst", "a mapping"]),
        ("cgroupDriver: upstart", &["cgroupDriver", "upstart"]),
        ("cgroupDriver: 1", &["cgroupDriver", "string"]),
        ("registerNode: 1", &["registerNode", "boolean"]),
        ("address: 1", &["address", "string"]),
        ("staticPodPath: [a]", &["staticPodPath", "string"]),
    ];
    for (body, needles) in cases {
        let err = parse_body(body)
            .and_then(|(cfg, _)| cfg.validate())
            .expect_err(body)
            .to_string();
        for needle in *needles {
            assert!(err.contains(needle), "{body}: {err:?} lacks {needle:?}");
        }
    }
}

#[test]
fn header_is_required() {
    let cases: &[(&str, &str)] = &[
        ("kind: KubeletConfiguration\n", "apiVersion"),
        (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n",
            "kind must be \"KubeletConfiguration\", got \"Pod\"",
        ),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\n", "kind"),
        (
            "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
            "apiVersion must be \"kubelet.config.k8s.io/v1beta1\", got \"kubelet.config.k8s.io/v1\"",
        ),
        (
            "apiVersion: kubeletconfig/v1beta1\nkind: KubeletConfiguration\n",
            "apiVersion",
        ),
        ("", "empty document"),
        ("# only a comment\n", "empty document"),
        ("- a\n- b\n", "mapping"),
        ("just a string", "mapping"),
        ("kind: [unclosed\n", "KubeletConfiguration"),
    ];
    for (content, needle) in cases {
        let err = parse_kubelet_config(content)
            .expect_err(content)
            .to_string();
        assert!(
            err.contains(needle),
            "{content:?}: {err:?} lacks {needle:?}"
        );
    }
}

#[test]
fn ignored_upstream_fields_are_accepted_and_listed() {
    let body = "volumePluginDir: /x\nhairpinMode: none\n\
                enableContentionProfiling: true\nmaxPods: 20\n";
    let (cfg, ignored) = parse_body(body).unwrap();
    assert_eq!(cfg.max_pods, 20);
    assert_eq!(
        ignored,
        vec![
            "enableContentionProfiling",
            "hairpinMode",
            "volumePluginDir"
        ]
    );
    assert_eq!(ignored_fields_present(&format!("{HEADER}{body}")), ignored);
    assert!(ignored_fields_present("not: [a config").is_empty());
}

/// The fields [`KubeletConfiguration`] declares, as `/configz` names them.
fn declared_fields() -> Vec<String> {
    match KubeletConfiguration::default().to_v1beta1_json() {
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k != "kind" && k != "apiVersion")
            .collect(),
        other => panic!("configz is not a mapping: {other}"),
    }
}

#[test]
fn every_upstream_field_is_accepted() {
    let declared = declared_fields();
    for field in &declared {
        assert!(
            UPSTREAM_FIELDS.contains(&field.as_str()),
            "{field} is not an upstream field"
        );
    }
    let defaults = parse_kubelet_config(HEADER).unwrap();
    for field in UPSTREAM_FIELDS {
        let (cfg, ignored) = parse_body(&format!("{field}: null\n")).unwrap();
        assert_eq!(cfg, defaults, "{field}");
        if declared.iter().any(|d| d == field) {
            assert!(ignored.is_empty(), "{field}");
        } else {
            assert_eq!(ignored, vec![field.to_string()]);
        }
    }
    let mut all = UPSTREAM_FIELDS.to_vec();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), UPSTREAM_FIELDS.len(), "duplicate field names");
    assert_eq!(UPSTREAM_FIELDS.len(), 126, "upstream v1.37's fields");
    // Every field not declared says why; none that is declared does.
    let mut undeclared: Vec<&str> = UPSTREAM_FIELDS
        .iter()
        .copied()
        .filter(|f| !declared.iter().any(|d| d == f))
        .collect();
    let mut documented: Vec<&str> = NOT_IMPLEMENTED.iter().map(|(f, _)| *f).collect();
    undeclared.sort_unstable();
    documented.sort_unstable();
    assert_eq!(
        undeclared, documented,
        "NOT_IMPLEMENTED must list exactly the undeclared fields"
    );
    assert!(NOT_IMPLEMENTED.iter().all(|(_, why)| !why.is_empty()));
}

/// UPSTREAM_FIELDS is upstream's v1beta1 KubeletConfiguration: the json
/// names of the Go struct in the module cache (`k8s.io/kubelet` at the
/// version hack/k8s builds; hack/test.sh downloads it first), in its order.
#[test]
fn upstream_fields_are_the_go_structs() {
    let go_mod = include_str!("../../../../hack/k8s/go.mod");
    let version = go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/kubelet => k8s.io/kubelet "))
        .expect("hack/k8s/go.mod replaces k8s.io/kubelet")
        .trim();
    let cache = std::process::Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .expect("go env GOMODCACHE");
    let types = std::path::Path::new(String::from_utf8_lossy(&cache.stdout).trim())
        .join(format!("k8s.io/kubelet@{version}/config/v1beta1/types.go"));
    let source = std::fs::read_to_string(&types).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (cd hack/k8s && go mod download k8s.io/kubelet)",
            types.display()
        )
    });
    let body = source
        .split("\ntype KubeletConfiguration struct {\n")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("type KubeletConfiguration struct");
    let names: Vec<&str> = body
        .split("json:\"")
        .skip(1)
        .filter_map(|tag| tag.split(['"', ',']).next())
        .filter(|name| !name.is_empty())
        .collect();
    assert_eq!(names, UPSTREAM_FIELDS, "{}", types.display());
}

#[test]
fn json_input() {
    let content = r#"{
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "staticPodPath": "/etc/kubernetes/manifests",
        "syncFrequency": "1m30s",
        "healthzPort": 0,
        "cgroupDriver": "systemd",
        "registerNode": false,
        "enableContentionProfiling": true
    }"#;
    let (cfg, ignored) = parse_kubelet_config_reporting(content).unwrap();
    assert_eq!(
        cfg,
        KubeletConfiguration {
            static_pod_path: Some(PathBuf::from("/etc/kubernetes/manifests")),
            sync_frequency: Duration::from_secs(90),
            healthz_port: 0,
            cgroup_driver: CgroupDriver::Systemd,
            register_node: false,
            ..KubeletConfiguration::default()
        }
    );
    assert_eq!(ignored, vec!["enableContentionProfiling"]);
    let err = parse_kubelet_config(
        r#"{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1","nope":1}"#,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "unknown field \"nope\"");
}

#[test]
fn validation() {
    type Mutate = fn(&mut KubeletConfiguration);
    let cases: &[(Mutate, &str)] = &[
        (|c| c.sync_frequency = Duration::ZERO, "syncFrequency"),
        (
            |c| c.file_check_frequency = Duration::ZERO,
            "fileCheckFrequency",
        ),
        (
            |c| c.runtime_request_timeout = Duration::ZERO,
            "runtimeRequestTimeout",
        ),
        (
            |c| c.node_status_update_frequency = Duration::ZERO,
            "nodeStatusUpdateFrequency",
        ),
        (
            |c| c.node_status_report_frequency = Duration::ZERO,
            "nodeStatusReportFrequency",
        ),
        (|c| c.max_pods = 0, "maxPods"),
        (
            |c| c.container_runtime_endpoint = "tcp://localhost:1234".into(),
            "containerRuntimeEndpoint",
        ),
        (
            |c| c.container_runtime_endpoint = "unix://".into(),
            "containerRuntimeEndpoint",
        ),
        (
            |c| c.container_runtime_endpoint = "/run/containerd/containerd.sock".into(),
            "containerRuntimeEndpoint",
        ),
        (
            |c| c.image_service_endpoint = "tcp://localhost:1234".into(),
            "imageServiceEndpoint (--image-service-endpoint) must be a unix socket",
        ),
        (|c| c.pod_logs_dir = "logs".into(), "podLogsDir"),
        (
            |c| c.container_log_max_size = "10 Mi".into(),
            "container log max size",
        ),
        (|c| c.container_log_max_files = 1, "containerLogMaxFiles"),
        (
            |c| c.container_log_max_workers = 0,
            "containerLogMaxWorkers",
        ),
        (
            |c| c.container_log_monitor_interval = Duration::from_secs(2),
            "containerLogMonitorInterval",
        ),
        (|c| c.address = "not-an-ip".into(), "address"),
        (
            |c| c.allowed_unsafe_sysctls = vec!["vm.swappiness".into()],
            "allowedUnsafeSysctls",
        ),
        (
            |c| c.healthz_bind_address = String::new(),
            "healthzBindAddress",
        ),
        (
            |c| c.image_gc_high_threshold_percent = 101,
            "imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100",
        ),
        (
            |c| c.image_gc_low_threshold_percent = 85,
            "imageGCLowThresholdPercent (--image-gc-low-threshold) 85 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85",
        ),
        (
            |c| c.image_maximum_gc_age = Duration::from_secs(60),
            "imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
        ),
        (
            |c| c.max_parallel_image_pulls = Some(0),
            "maxParallelImagePulls 0 must be a positive number",
        ),
        (
            |c| c.max_parallel_image_pulls = Some(3),
            "maxParallelImagePulls cannot be larger than 1",
        ),
        (
            |c| c.cgroups_per_qos = false,
            "invalid configuration: cgroupsPerQOS (--cgroups-per-qos) must be set to true when \"pods\" contained in enforceNodeAllocatable (--enforce-node-allocatable)",
        ),
        (
            |c| c.enforce_node_allocatable = vec!["pods".into(), "pods".into()],
            "duplicated enforcements \"pods\" in enforceNodeAllocatable",
        ),
        (
            |c| c.enforce_node_allocatable = vec!["none".into(), "pods".into()],
            "may not contain additional enforcements when \"none\" is specified",
        ),
        (
            |c| c.enforce_node_allocatable = vec!["kube-reserved".into()],
            "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when",
        ),
        (
            |c| c.enforce_node_allocatable = vec!["pod".into()],
            "option \"pod\" specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\"",
        ),
        (
            |c| {
                c.system_reserved_cgroup = "/system".into();
                c.enforce_node_allocatable = vec![
                    "system-reserved".into(),
                    "system-reserved-compressible".into(),
                ]
            },
            "both \"system-reserved\" and \"system-reserved-compressible\" cannot be specified together",
        ),
        (
            |c| c.cpu_cfs_quota_period = Duration::from_secs(2),
            "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) 2s must be between 1ms and 1sec, inclusive",
        ),
    ];
    for (mutate, field) in cases {
        let mut cfg = KubeletConfiguration::default();
        mutate(&mut cfg);
        let err = cfg.validate().expect_err(field).to_string();
        assert!(err.contains(field), "{err:?} lacks {field:?}");
    }
    let ok = KubeletConfiguration {
        healthz_port: 0,
        read_only_port: 10255,
        address: "::".into(),
        ..KubeletConfiguration::default()
    };
    ok.validate().unwrap();
    let no_qos = KubeletConfiguration {
        cgroups_per_qos: false,
        enforce_node_allocatable: vec!["none".into()],
        ..KubeletConfiguration::default()
    };
    no_qos.validate().unwrap();
}

#[test]
fn node_resources_fields() {
    let (cfg, _) = parse_body(
        "cgroupsPerQOS: false\ncgroupRoot: /rk\npodPidsLimit: 1024\ncpuCFSQuota: false\n\
         cpuCFSQuotaPeriod: 50ms\nenforceNodeAllocatable: []\n\
         systemReserved: {cpu: 500m, memory: 1Gi, pid: 100}\n\
         kubeReserved: {ephemeral-storage: 1G}\nkubeReservedCgroup: /kube\n",
    )
    .unwrap();
    assert!(!cfg.cgroups_per_qos && !cfg.cpu_cfs_quota);
    assert_eq!(
        (cfg.cgroup_root.as_str(), cfg.pod_pids_limit),
        ("/rk", 1024)
    );
    assert_eq!(cfg.cpu_cfs_quota_period, Duration::from_millis(50));
    assert!(cfg.enforce_node_allocatable.is_empty());
    assert_eq!(
        cfg.system_reserved,
        BTreeMap::from([
            ("cpu".to_owned(), 500),
            ("memory".to_owned(), 1 << 30),
            ("pid".to_owned(), 100)
        ])
    );
    assert_eq!(cfg.kube_reserved["ephemeral-storage"], 1_000_000_000);
    cfg.validate().unwrap();
    let json = cfg.to_v1beta1_json();
    assert_eq!(json["systemReserved"]["cpu"], "500m");
    assert_eq!(json["enforceNodeAllocatable"], serde_json::json!([]));
    assert_eq!(json["evictionHard"]["memory.available"], "100Mi");
    let (given, _) = parse_body("evictionHard: {memory.available: 1Gi}\n").unwrap();
    assert_eq!(given.eviction_hard.len(), 1);
    let (merged, _) =
        parse_body("evictionHard: {memory.available: 1Gi}\nmergeDefaultEvictionSettings: true\n")
            .unwrap();
    assert_eq!(merged.eviction_hard.len(), 5);
    assert_eq!(merged.eviction_hard["memory.available"], "1Gi");
    let bad = KubeletConfiguration {
        eviction_hard: BTreeMap::from([("memory.free".into(), "1".into())]),
        ..KubeletConfiguration::default()
    };
    assert_eq!(
        bad.validate().unwrap_err().to_string(),
        "invalid configuration: evictionHard unsupported eviction signal memory.free"
    );
    let (soft, ignored) = parse_body(
        "evictionSoft: {memory.available: 1Gi}\n\
         evictionSoftGracePeriod: {memory.available: 1m30s}\n\
         evictionMinimumReclaim: {memory.available: 0.5Gi, nodefs.available: 5%}\n\
         evictionPressureTransitionPeriod: 30s\nevictionMaxPodGracePeriod: 20\n\
         localStorageCapacityIsolation: false\nkernelMemcgNotification: true\n",
    )
    .unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    soft.validate().unwrap();
    let t = soft.eviction_thresholds().unwrap();
    assert_eq!(
        t.len(),
        7,
        "five defaults, one soft, the allocatable copy of the hard memory one"
    );
    assert_eq!(
        t[6].signal,
        crate::eviction::Signal::AllocatableMemoryAvailable
    );
    let s = t.iter().find(|t| !t.is_hard()).unwrap();
    assert_eq!(s.grace_period, Duration::from_secs(90));
    assert_eq!(
        s.min_reclaim,
        Some(crate::eviction::ThresholdValue::Quantity(
            512 << 20,
            crate::eviction::Written::BinarySI
        ))
    );
    assert_eq!(
        soft.eviction_pressure_transition_period,
        Duration::from_secs(30)
    );
    let json = soft.to_v1beta1_json();
    assert_eq!(json["evictionPressureTransitionPeriod"], "30s");
    assert_eq!(json["evictionMaxPodGracePeriod"], 20);
    assert_eq!(json["localStorageCapacityIsolation"], false);
    assert_eq!(json["kernelMemcgNotification"], true);
    assert_eq!(json["evictionSoftGracePeriod"]["memory.available"], "1m30s");
    for (body, message) in [
        (
            "evictionSoft: {memory.available: 1Gi}\n",
            "grace period must be specified for the soft eviction threshold memory.available",
        ),
        (
            "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: -1s}\n",
            "invalid eviction grace period specified: -1s, must be a positive value",
        ),
        (
            "evictionMinimumReclaim: {nodefs.available: 0%}\n",
            "eviction percentage minimum reclaim nodefs.available must be positive: 0%",
        ),
        (
            "evictionMinimumReclaim: {nodefs.available: -1Gi}\n",
            "negative eviction minimum reclaim specified for nodefs.available",
        ),
    ] {
        let (cfg, _) = parse_body(body).unwrap();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains(message), "{body}: {err}");
    }
    for (body, message) in [
        (
            "kubeReserved: {gpu: 1}\n",
            "cannot reserve \"gpu\" resource",
        ),
        (
            "systemReserved: {memory: -1Gi}\n",
            "resource quantity for \"memory\" cannot be negative: -1Gi",
        ),
        (
            "systemReserved: {cpu: lots}\n",
            "failed to parse quantity \"lots\" for \"cpu\" resource",
        ),
    ] {
        let err = parse_body(body).unwrap_err().to_string();
        assert!(err.contains(message), "{err:?} lacks {message:?}");
    }
}

#[test]
fn image_pulls_are_serialized_unless_parallel_pulls_are_asked_for() {
    let limit = |fields: &str| {
        let doc = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{fields}"
        );
        let c = parse_kubelet_config(&doc).unwrap();
        c.validate().map(|()| c.image_pull_limit()).ok()
    };
    let cases = [
        ("", Some(Some(1))),
        ("maxParallelImagePulls: 1", Some(Some(1))),
        ("maxParallelImagePulls: 4", Some(Some(4))),
        ("serializeImagePulls: false", Some(None)),
        (
            "serializeImagePulls: false\nmaxParallelImagePulls: 2",
            Some(Some(2)),
        ),
        (
            "serializeImagePulls: true\nmaxParallelImagePulls: 1",
            Some(Some(1)),
        ),
        ("serializeImagePulls: true\nmaxParallelImagePulls: 2", None),
        ("maxParallelImagePulls: -1", None),
    ];
    for (fields, want) in cases {
        assert_eq!(limit(fields), want, "{fields}");
    }
}

#[test]
fn server_defaults_match_upstream() {
    let d = KubeletConfiguration::default();
    assert_eq!(d.port, 10250);
    assert_eq!(d.tls_cert_file, None);
    assert_eq!(d.tls_private_key_file, None);
    assert!(d.tls_cipher_suites.is_empty());
    assert_eq!(d.tls_min_version, TlsMinVersion::Tls12);
    assert_eq!(d.authentication.x509.client_ca_file, None);
    assert!(d.authentication.webhook.enabled);
    assert_eq!(d.authentication.webhook.cache_ttl, Duration::from_secs(120));
    assert!(!d.authentication.anonymous.enabled);
    assert_eq!(d.authorization.mode, AuthorizationMode::Webhook);
    assert_eq!(
        d.authorization.webhook.cache_authorized_ttl,
        Duration::from_secs(300)
    );
    assert_eq!(
        d.authorization.webhook.cache_unauthorized_ttl,
        Duration::from_secs(30)
    );
    assert!(d.enable_debugging_handlers);
    assert_eq!(
        d.streaming_connection_idle_timeout,
        Duration::from_secs(4 * 3600)
    );
}

#[test]
fn decodes_server_fields() {
    type Check = fn(&KubeletConfiguration) -> bool;
    let cases: &[(&str, Check)] = &[
        ("port: 10350", |c| c.port == 10350),
        ("port: 0", |c| c.port == 10250),
        (
            "tlsCertFile: /pki/k.crt\ntlsPrivateKeyFile: /pki/k.key",
            |c| {
                c.tls_cert_file.as_deref() == Some(Path::new("/pki/k.crt"))
                    && c.tls_private_key_file.as_deref() == Some(Path::new("/pki/k.key"))
            },
        ),
        ("tlsCertFile: \"\"", |c| c.tls_cert_file.is_none()),
        ("tlsMinVersion: VersionTLS13", |c| {
            c.tls_min_version == TlsMinVersion::Tls13
        }),
        ("tlsMinVersion: VersionTLS12", |c| {
            c.tls_min_version == TlsMinVersion::Tls12
        }),
        ("tlsMinVersion: \"\"", |c| {
            c.tls_min_version == TlsMinVersion::Tls12
        }),
        (
            "tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305]",
            |c| {
                c.tls_cipher_suites
                    == [
                        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
                    ]
            },
        ),
        ("tlsCipherSuites: []", |c| c.tls_cipher_suites.is_empty()),
        (
            "authentication:\n  x509:\n    clientCAFile: /pki/ca.crt",
            |c| {
                c.authentication.x509.client_ca_file.as_deref() == Some(Path::new("/pki/ca.crt"))
                    && c.authentication.webhook.enabled
            },
        ),
        (
            "authentication:\n  webhook:\n    enabled: false\n    cacheTTL: 10s",
            |c| {
                !c.authentication.webhook.enabled
                    && c.authentication.webhook.cache_ttl == Duration::from_secs(10)
            },
        ),
        ("authentication:\n  webhook:\n    cacheTTL: 0s", |c| {
            c.authentication.webhook.cache_ttl == Duration::from_secs(120)
        }),
        ("authentication:\n  anonymous:\n    enabled: true", |c| {
            c.authentication.anonymous.enabled
        }),
        ("authentication: null", |c| {
            c.authentication == KubeletAuthentication::default()
        }),
        ("authorization:\n  mode: AlwaysAllow", |c| {
            c.authorization.mode == AuthorizationMode::AlwaysAllow
        }),
        ("authorization:\n  mode: Webhook", |c| {
            c.authorization.mode == AuthorizationMode::Webhook
        }),
        (
            "authorization:\n  webhook:\n    cacheAuthorizedTTL: 1m\n    cacheUnauthorizedTTL: 5s",
            |c| {
                c.authorization.webhook.cache_authorized_ttl == Duration::from_secs(60)
                    && c.authorization.webhook.cache_unauthorized_ttl == Duration::from_secs(5)
            },
        ),
        (
            "authorization:\n  webhook:\n    cacheAuthorizedTTL: 0s\n    cacheUnauthorizedTTL: 0s",
            |c| c.authorization == KubeletAuthorization::default(),
        ),
        ("enableDebuggingHandlers: false", |c| {
            !c.enable_debugging_handlers
        }),
        ("streamingConnectionIdleTimeout: 30m", |c| {
            c.streaming_connection_idle_timeout == Duration::from_secs(1800)
        }),
        ("streamingConnectionIdleTimeout: 0s", |c| {
            c.streaming_connection_idle_timeout == Duration::from_secs(4 * 3600)
        }),
    ];
    for (body, check) in cases {
        let (cfg, ignored) = parse_body(body).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert!(check(&cfg), "{body}: {cfg:?}");
        assert!(ignored.is_empty(), "{body}: {ignored:?}");
    }
    // kubeadm's file: every server field spelled out.
    let kubeadm = "authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    cacheTTL: 0s\n    enabled: true\n  x509:\n    clientCAFile: /etc/kubernetes/pki/ca.crt\n\
                   authorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: 0s\n    cacheUnauthorizedTTL: 0s\n\
                   streamingConnectionIdleTimeout: 0s\n";
    let (cfg, ignored) = parse_body(kubeadm).unwrap();
    assert!(ignored.is_empty());
    assert_eq!(
        cfg.authentication,
        KubeletAuthentication {
            x509: KubeletX509Authentication {
                client_ca_file: Some(PathBuf::from("/etc/kubernetes/pki/ca.crt")),
            },
            ..KubeletAuthentication::default()
        }
    );
    assert_eq!(cfg.authorization, KubeletAuthorization::default());
    cfg.validate().unwrap();
}

#[test]
fn server_field_errors_name_the_field() {
    let cases: &[(&str, &[&str])] = &[
        ("port: 70000", &["port", "70000"]),
        (
            "clusterDNS: [10.96.0.300]",
            &["clusterDNS", "\"10.96.0.300\" is not an IP address"],
        ),
        (
            "clusterDNS: 10.96.0.10",
            &["clusterDNS", "a list of strings"],
        ),
        (
            "allowedUnsafeSysctls: vm.swappiness",
            &["allowedUnsafeSysctls", "a list of strings"],
        ),
        ("seccompDefault: 3", &["seccompDefault", "boolean"]),
        ("port: \"10250\"", &["port", "integer"]),
        ("tlsCertFile: [a]", &["tlsCertFile", "string"]),
        (
            "tlsMinVersion: VersionTLS10",
            &["tlsMinVersion", "VersionTLS10", "not supported"],
        ),
        (
            "tlsMinVersion: VersionTLS11",
            &["tlsMinVersion", "VersionTLS11"],
        ),
        ("tlsMinVersion: TLS12", &["tlsMinVersion", "\"TLS12\""]),
        (
            "tlsCipherSuites: [TLS_RSA_WITH_AES_128_CBC_SHA]",
            &[
                "tlsCipherSuites",
                "TLS_RSA_WITH_AES_128_CBC_SHA not supported",
            ],
        ),
        (
            "tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, BOGUS]",
            &["tlsCipherSuites", "BOGUS not supported"],
        ),
        (
            "tlsCipherSuites: TLS_AES_128_GCM_SHA256",
            &["tlsCipherSuites", "list"],
        ),
        ("tlsCipherSuites: [1]", &["tlsCipherSuites", "got 1"]),
        ("authentication: true", &["authentication", "mapping"]),
        (
            "authentication:\n  oidc: {}",
            &["unknown field \"authentication.oidc\""],
        ),
        (
            "authentication:\n  webhook:\n    enabled: yes please",
            &["authentication.webhook.enabled", "boolean"],
        ),
        (
            "authentication:\n  webhook:\n    cacheTTL: 5",
            &["authentication.webhook.cacheTTL", "duration"],
        ),
        (
            "authentication:\n  x509:\n    clientCaFile: /x",
            &["unknown field \"authentication.x509.clientCaFile\""],
        ),
        (
            "authentication:\n  anonymous:\n    enabled: 1",
            &["authentication.anonymous.enabled", "boolean"],
        ),
        (
            "authorization:\n  mode: RBAC",
            &["authorization.mode", "\"RBAC\""],
        ),
        (
            "authorization:\n  webhook:\n    cacheAuthorizedTTL: soon",
            &["authorization.webhook.cacheAuthorizedTTL", "\"soon\""],
        ),
        (
            "authorization:\n  webhook:\n    cacheTTL: 1m",
            &["unknown field \"authorization.webhook.cacheTTL\""],
        ),
        (
            "enableDebuggingHandlers: 1",
            &["enableDebuggingHandlers", "boolean"],
        ),
        (
            "streamingConnectionIdleTimeout: 4",
            &["streamingConnectionIdleTimeout", "duration"],
        ),
    ];
    for (body, needles) in cases {
        let err = parse_body(body)
            .and_then(|(cfg, _)| cfg.validate())
            .expect_err(body)
            .to_string();
        for needle in *needles {
            assert!(err.contains(needle), "{body}: {err:?} lacks {needle:?}");
        }
    }
}

#[test]
fn server_validation() {
    type Mutate = fn(&mut KubeletConfiguration);
    let cases: &[(Mutate, &str)] = &[
        (
            |c| c.port = 0,
            "port (--port) 0 must be between 1 and 65535",
        ),
        (
            |c| c.tls_cert_file = Some("/pki/k.crt".into()),
            "tlsCertFile (--tls-cert-file) and tlsPrivateKeyFile",
        ),
        (
            |c| c.tls_private_key_file = Some("/pki/k.key".into()),
            "tlsCertFile (--tls-cert-file) and tlsPrivateKeyFile",
        ),
        (
            |c| c.streaming_connection_idle_timeout = Duration::ZERO,
            "streamingConnectionIdleTimeout",
        ),
    ];
    for (mutate, needle) in cases {
        let mut cfg = KubeletConfiguration::default();
        mutate(&mut cfg);
        let err = cfg.validate().expect_err(needle).to_string();
        assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    }
    KubeletConfiguration {
        tls_cert_file: Some("/pki/k.crt".into()),
        tls_private_key_file: Some("/pki/k.key".into()),
        ..KubeletConfiguration::default()
    }
    .validate()
    .unwrap();
}

#[test]
fn server_enum_strings() {
    assert_eq!(TlsMinVersion::Tls12.as_str(), "VersionTLS12");
    assert_eq!(TlsMinVersion::Tls13.as_str(), "VersionTLS13");
    assert_eq!(AuthorizationMode::Webhook.as_str(), "Webhook");
    assert_eq!(AuthorizationMode::AlwaysAllow.as_str(), "AlwaysAllow");
    for mode in [AuthorizationMode::Webhook, AuthorizationMode::AlwaysAllow] {
        assert_eq!(mode.as_str().parse::<AuthorizationMode>(), Ok(mode));
    }
    for version in [TlsMinVersion::Tls12, TlsMinVersion::Tls13] {
        assert_eq!(version.as_str().parse::<TlsMinVersion>(), Ok(version));
    }
    assert_eq!(
        "RBAC".parse::<AuthorizationMode>(),
        Err(ParseAuthorizationModeError("RBAC".into()))
    );
    assert_eq!(
        "VersionTLS11".parse::<TlsMinVersion>(),
        Err(ParseTlsMinVersionError::Unsupported("VersionTLS11".into()))
    );
}

#[test]
fn cgroup_driver_strings() {
    for d in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
        assert_eq!(d.as_str().parse::<CgroupDriver>(), Ok(d));
        assert_eq!(d.to_string(), d.as_str());
    }
    let err = "Systemd".parse::<CgroupDriver>().unwrap_err();
    assert!(err.to_string().contains("\"Systemd\""), "{err}");
}

#[test]
fn fleet_fields_decode_default_and_validate_as_upstream() {
    let d = KubeletConfiguration::default();
    assert!(d.enable_server);
    assert_eq!(d.oom_score_adj, -999);
    assert_eq!(d.node_lease_duration_seconds, 40);
    assert_eq!(d.node_status_max_images, 50);
    assert_eq!(d.max_open_files, 1_000_000);
    assert_eq!(d.pods_per_core, 0);
    assert_eq!(d.provider_id, "");
    assert_eq!(d.volume_stats_agg_period, Duration::from_secs(60));
    let (c, _) = parse_body("volumeStatsAggPeriod: 10s\n").unwrap();
    assert_eq!(c.volume_stats_agg_period, Duration::from_secs(10));
    // Upstream's pointers keep an explicit zero; its plain ints default it.
    let (c, ignored) = parse_body(
        "enableServer: false\noomScoreAdj: 0\nnodeLeaseDurationSeconds: 0\n\
         nodeStatusMaxImages: 0\nmaxOpenFiles: 0\npodsPerCore: 4\nproviderID: aws:///eu/i-1\n",
    )
    .unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    assert!(!c.enable_server);
    assert_eq!(c.oom_score_adj, 0);
    assert_eq!(c.node_lease_duration_seconds, 40);
    assert_eq!(c.node_status_max_images, 0);
    assert_eq!(c.node_status_max_images(), Some(0));
    assert_eq!(c.max_open_files, 1_000_000);
    assert_eq!(c.provider_id, "aws:///eu/i-1");
    c.validate().unwrap();
    let all = KubeletConfiguration {
        node_status_max_images: -1,
        ..KubeletConfiguration::default()
    };
    assert_eq!(all.node_status_max_images(), None);
    all.validate().unwrap();

    type Mutate = fn(&mut KubeletConfiguration);
    let cases: &[(Mutate, &str)] = &[
        (
            |c| c.node_lease_duration_seconds = -1,
            "invalid configuration: nodeLeaseDurationSeconds must be greater than 0",
        ),
        (
            |c| c.node_status_max_images = -2,
            "invalid configuration: nodeStatusMaxImages (--node-status-max-images) -2 must be -1 or greater",
        ),
        (
            |c| c.max_open_files = -1,
            "invalid configuration: maxOpenFiles (--max-open-files) -1 must not be a negative number",
        ),
        (
            |c| c.oom_score_adj = 1001,
            "invalid configuration: oomScoreAdj (--oom-score-adj) 1001 must be between -1000 and 1000, inclusive",
        ),
        (
            |c| c.pods_per_core = -1,
            "invalid configuration: podsPerCore (--pods-per-core) -1 must not be a negative number",
        ),
    ];
    for (mutate, want) in cases {
        let mut c = KubeletConfiguration::default();
        mutate(&mut c);
        assert_eq!(c.validate().unwrap_err().to_string(), *want);
    }
}

#[test]
fn pod_capacity_is_max_pods_or_pods_per_core() {
    let cases = [
        // (podsPerCore, maxPods, cores, capacity)
        (0, 110, 2, 110),
        (10, 110, 2, 20),
        (100, 110, 2, 110),
        (10, 110, 0, 0),
    ];
    for (per_core, max_pods, cores, want) in cases {
        let c = KubeletConfiguration {
            pods_per_core: per_core,
            max_pods,
            ..KubeletConfiguration::default()
        };
        assert_eq!(
            c.pod_capacity(cores),
            want,
            "{per_core} per core, {max_pods}, {cores} cores"
        );
    }
}

#[test]
fn register_with_taints_decodes_and_validates_as_upstream() {
    let (c, ignored) = parse_body(
        "registerWithTaints:\n- key: node-role.kubernetes.io/control-plane\n  effect: NoSchedule\n\
         - {key: gpu, value: \"yes\", effect: NoExecute}\n",
    )
    .unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    let got: Vec<(&str, Option<&str>, &str)> = c
        .register_with_taints
        .iter()
        .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
            ("gpu", Some("yes"), "NoExecute"),
        ]
    );
    c.validate().unwrap();
    let configz = c.to_v1beta1_json();
    assert_eq!(
        configz["registerWithTaints"][1],
        serde_json::json!({"key": "gpu", "value": "yes", "effect": "NoExecute"})
    );
    let wrong = parse_body("registerWithTaints: gpu\n")
        .unwrap_err()
        .to_string();
    assert!(
        wrong.starts_with("registerWithTaints: expected a list of taints"),
        "{wrong}"
    );
    for (body, want) in [
        (
            "registerWithTaints: [{key: \"bad key\", effect: NoSchedule}]\n",
            "registerWithTaints: invalid taint: {bad key  NoSchedule <nil>}",
        ),
        (
            "registerWithTaints: [{key: k, effect: Sometimes}]\n",
            "registerWithTaints: invalid taint: {k  Sometimes <nil>}",
        ),
        (
            "registerWithTaints: [{key: k, effect: NoSchedule, timeAdded: \"2026-01-01T00:00:00Z\"}]\n",
            "invalid configuration: taint.TimeAdded is not nil",
        ),
    ] {
        let (c, _) = parse_body(body).unwrap();
        assert_eq!(c.validate().unwrap_err().to_string(), want, "{body}");
    }
}

#[test]
fn shutdown_grace_periods_decode_and_validate_as_upstream() {
    let (c, ignored) = parse_body(
        "shutdownGracePeriodByPodPriority:\n- {priority: 100000, shutdownGracePeriodSeconds: 10}\n- priority: 0\n  shutdownGracePeriodSeconds: 30\n",
    )
    .unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    c.validate().unwrap();
    assert_eq!(
        c.to_v1beta1_json()["shutdownGracePeriodByPodPriority"][0],
        serde_json::json!({"priority": 100000, "shutdownGracePeriodSeconds": 10})
    );
    let (c, _) =
        parse_body("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n").unwrap();
    c.validate().unwrap();
    assert_eq!(c.to_v1beta1_json()["shutdownGracePeriod"], "30s");
    let wrong = parse_body("shutdownGracePeriodByPodPriority: [{priority: 1, seconds: 3}]\n")
        .unwrap_err()
        .to_string();
    assert!(
        wrong.starts_with("shutdownGracePeriodByPodPriority: expected a list of {priority, shutdownGracePeriodSeconds}"),
        "{wrong}"
    );
    for (body, want) in [
        (
            "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n",
            "invalid configuration: shutdownGracePeriodCriticalPods 20s must be <= shutdownGracePeriod 10s",
        ),
        (
            "shutdownGracePeriod: 500ms\n",
            "invalid configuration: shutdownGracePeriod 500ms must be either zero or otherwise >= 1 sec",
        ),
        (
            "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 500ms\n",
            "invalid configuration: shutdownGracePeriodCriticalPods 500ms must be either zero or otherwise >= 1 sec",
        ),
        (
            "featureGates: {GracefulNodeShutdown: false, GracefulNodeShutdownBasedOnPodPriority: false, WindowsGracefulNodeShutdown: false}\nshutdownGracePeriod: 10s\n",
            "invalid configuration: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown",
        ),
        (
            "featureGates: {GracefulNodeShutdownBasedOnPodPriority: false}\nshutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: 3}]\n",
            "invalid configuration: Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority",
        ),
        (
            "shutdownGracePeriod: 10s\nshutdownGracePeriodByPodPriority: [{priority: 1, shutdownGracePeriodSeconds: 3}]\n",
            "invalid configuration: Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time",
        ),
    ] {
        let (c, _) = parse_body(body).unwrap();
        assert_eq!(c.validate().unwrap_err().to_string(), want, "{body}");
    }
}

#[test]
fn logging_decodes_and_validates_as_component_base() {
    let d = KubeletConfiguration::default();
    let configz = d.to_v1beta1_json();
    assert_eq!(
        configz["logging"],
        serde_json::json!({
            "format": "text", "flushFrequency": "5s", "verbosity": 0, "vmodule": [],
            "options": {"text": {"splitStream": false, "infoBufferSize": "0"},
                        "json": {"splitStream": false, "infoBufferSize": "0"}}
        })
    );
    let (c, ignored) =
        parse_body("logging:\n  format: json\n  verbosity: 4\n  flushFrequency: 1000000000\n")
            .unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    c.validate().unwrap();
    assert_eq!(c.logging.format, "json");
    assert_eq!(c.logging.verbosity, 4);
    assert_eq!(c.logging.flush_frequency.duration, Duration::from_secs(1));
    assert_eq!(
        c.to_v1beta1_json()["logging"]["flushFrequency"],
        1_000_000_000
    );
    let split = "featureGates: {LoggingAlphaOptions: true}\nlogging: {format: json, options: {json: {splitStream: true}}}\n";
    let (c, _) = parse_body(split).unwrap();
    c.validate().unwrap();
    assert!(c.logging.options.json.split_stream);
    for (body, want) in [
        (
            "logging: {format: yaml}\n",
            "invalid configuration: logging.format: Invalid value: \"yaml\": Unsupported log format",
        ),
        (
            "featureGates: {LoggingBetaOptions: false}\nlogging: {format: json}\n",
            "invalid configuration: logging.format: Forbidden: Log format json is disabled, see LoggingBetaOptions feature",
        ),
        (
            "logging: {verbosity: 4294967295}\n",
            "invalid configuration: logging.verbosity: Invalid value: 4294967295: Must be <= 2147483647",
        ),
        (
            "logging: {format: json, vmodule: [{filePattern: 'a=b', verbosity: 2}]}\n",
            "invalid configuration: [logging.vmodule: Forbidden: Only supported for text log format, logging.vmodule[0]: Invalid value: \"a=b\": File pattern must not contain equal sign or comma]",
        ),
        (
            "logging: {options: {text: {splitStream: true}}}\n",
            "invalid configuration: logging.options.text.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled",
        ),
        (
            "logging: {vmodule: [{filePattern: prober, verbosity: 4}]}\n",
            "invalid configuration: logging.vmodule: not supported by rkubelet: its log lines come from Rust modules, not Go files (RUST_LOG selects them)",
        ),
        (
            "featureGates: {LoggingAlphaOptions: true}\nlogging: {options: {json: {infoBufferSize: 1Mi}}}\n",
            "invalid configuration: logging.options.json.infoBufferSize: not supported by rkubelet: every log line is written as it comes",
        ),
    ] {
        let (c, _) = parse_body(body).unwrap();
        assert_eq!(c.validate().unwrap_err().to_string(), want, "{body}");
    }
}

#[test]
fn crash_loop_back_off_maximum_as_upstream() {
    let d = KubeletConfiguration::default();
    assert_eq!(
        d.crash_loop_back_off.max_container_restart_period,
        Duration::from_secs(300)
    );
    let (c, ignored) = parse_body("crashLoopBackOff:\n  maxContainerRestartPeriod: 30s\n").unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    assert_eq!(
        c.crash_loop_back_off.max_container_restart_period,
        Duration::from_secs(30)
    );
    c.validate().unwrap();
    assert_eq!(
        c.to_v1beta1_json()["crashLoopBackOff"]["maxContainerRestartPeriod"],
        "30s"
    );
    for (period, want) in [("0s", "0"), ("500ms", "0.5"), ("301s", "301")] {
        let (c, _) = parse_body(&format!(
            "crashLoopBackOff:\n  maxContainerRestartPeriod: {period}\n"
        ))
        .unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            format!(
                "invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod (got: {want} seconds) must be set between 1s and 300s"
            )
        );
    }
}

#[test]
fn registry_pull_budget_as_upstream() {
    let d = KubeletConfiguration::default();
    assert_eq!((d.registry_pull_qps, d.registry_burst), (5, 10));
    // registryPullQPS is a pointer upstream: an explicit 0 is "no limit".
    let (c, _) = parse_body("registryPullQPS: 0\nregistryBurst: 0\n").unwrap();
    assert_eq!((c.registry_pull_qps, c.registry_burst), (0, 10));
    c.validate().unwrap();
    for (body, want) in [
        (
            "registryPullQPS: -1\n",
            "invalid configuration: registryPullQPS (--registry-qps) -1 must not be a negative number",
        ),
        (
            "registryBurst: -1\n",
            "invalid configuration: registryBurst (--registry-burst) -1 must not be a negative number",
        ),
    ] {
        let (c, _) = parse_body(body).unwrap();
        assert_eq!(c.validate().unwrap_err().to_string(), want);
    }
}

#[test]
fn dropins_merge_over_the_file_as_upstream() {
    let main = format!(
        "{HEADER}maxPods: 50\nsyncFrequency: 30s\nhairpinMode: none\n\
         evictionHard: {{memory.available: 200Mi}}\nclusterDNS: [10.0.0.9]\n"
    );
    let dropins = [
        (
            "10-pods.conf".to_owned(),
            format!("{HEADER}maxPods: 60\nclusterDNS: [10.0.0.10, 10.0.0.11]\n"),
        ),
        (
            "20-more.conf".to_owned(),
            // JSON too; a list replaces the list, a mapping merges, null
            // resets to the default.
            r#"{"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "clusterDNS": ["10.0.0.12"], "evictionHard": {"nodefs.available": "5%"},
                "syncFrequency": null}"#
                .to_owned(),
        ),
    ];
    let (c, ignored) = parse_kubelet_config_layers(Some(&main), &dropins).unwrap();
    assert_eq!(c.max_pods, 60);
    assert_eq!(c.cluster_dns, ["10.0.0.12"]);
    assert_eq!(
        c.eviction_hard,
        BTreeMap::from([
            ("memory.available".to_owned(), "200Mi".to_owned()),
            ("nodefs.available".to_owned(), "5%".to_owned()),
        ])
    );
    assert_eq!(
        c.sync_frequency,
        Duration::from_secs(60),
        "null: the default"
    );
    assert_eq!(
        ignored,
        ["hairpinMode"],
        "the file's ignored fields survive"
    );
    // No file: the drop-ins over the defaults.
    let (c, _) = parse_kubelet_config_layers(None, &dropins[..1]).unwrap();
    assert_eq!(c.max_pods, 60);
    // A drop-in must be a KubeletConfiguration, and say so; the message
    // names it.
    let bad = [("a/99.conf".to_owned(), "maxPods: 1\n".to_owned())];
    let e = parse_kubelet_config_layers(Some(&main), &bad).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "failed to load kubelet dropin file, path: a/99.conf, error: kind must be"
        ),
        "{e}"
    );
    let unknown = [("u.conf".to_owned(), format!("{HEADER}maxPodz: 1\n"))];
    let e = parse_kubelet_config_layers(Some(&main), &unknown).unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to merge kubelet configs: unknown field \"maxPodz\""
    );
}

#[test]
fn tls_curve_preferences_as_upstream_checks_them() {
    let (c, ignored) = parse_body("tlsCurvePreferences: [29, 23]\n").unwrap();
    assert!(ignored.is_empty());
    assert_eq!(c.tls_curve_preferences, [29, 23]);
    c.validate().unwrap();
    for (list, want) in [
        (
            "[0]",
            "curve preference 0 is out of range (must be 1-65535)",
        ),
        ("[23, 23]", "duplicate curve preference 23"),
        (
            "[25]",
            "curve preference 25 (CurveP521) is not supported by rkubelet's TLS stack (rustls with ring: 23, 24 and 29)",
        ),
        ("[7]", "curve preference 7 is not supported"),
    ] {
        let (c, _) = parse_body(&format!("tlsCurvePreferences: {list}\n")).unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            format!("invalid configuration: tlsCurvePreferences {want}")
        );
    }
}

#[test]
fn fields_of_alpha_gates_off_by_default_are_refused_as_upstream() {
    let ok = "memoryThrottlingFactor: 0.9\nmemoryReservationPolicy: None\ndefaultPodSysctls: {}\n";
    let (c, ignored) = parse_body(ok).unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    c.validate().unwrap();
    for (body, want) in [
        (
            "defaultPodSysctls: {net.ipv4.ip_forward: \"1\"}\n",
            "invalid configuration: DefaultPodSysctls feature gate is required for Kubelet configuration option defaultPodSysctls",
        ),
        (
            "memoryThrottlingFactor: 0.8\n",
            "invalid configuration: memoryThrottlingFactor must not be set when MemoryQoS feature gate is disabled",
        ),
        (
            "memoryReservationPolicy: TieredReservation\n",
            "invalid configuration: memoryReservationPolicy \"TieredReservation\" requires MemoryQoS feature gate to be enabled",
        ),
        (
            "memoryReservationPolicy: Some\n",
            "invalid configuration: option \"Some\" specified for memoryReservationPolicy. Valid options are \"None\" or \"TieredReservation\"",
        ),
    ] {
        let (c, _) = parse_body(body).unwrap();
        assert_eq!(c.validate().unwrap_err().to_string(), want, "{body}");
    }
}

#[test]
fn fail_cgroup_v1_and_single_process_oom_kill_on_cgroup_v1_as_upstream() {
    // Upstream's default refuses a cgroup v1 host.
    assert_eq!(
        KubeletConfiguration::default()
            .validate_for_cgroups(1)
            .unwrap_err()
            .to_string(),
        "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release"
    );
    let (c, ignored) = parse_body("failCgroupV1: false\nsingleProcessOOMKill: true\n").unwrap();
    assert!(ignored.is_empty());
    c.validate_for_cgroups(1).unwrap();
    KubeletConfiguration::default()
        .validate_for_cgroups(2)
        .unwrap();
    let (c, _) = parse_body("failCgroupV1: false\nsingleProcessOOMKill: false\n").unwrap();
    assert_eq!(
        c.validate_for_cgroups(1).unwrap_err().to_string(),
        "invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1"
    );
    assert!(
        c.validate_for_cgroups(2)
            .unwrap_err()
            .to_string()
            .contains("not implemented by rkubelet yet")
    );
}

#[test]
fn feature_gates_are_read_checked_and_looked_up() {
    let body = "featureGates:\n  ReloadKubeletClientCAFile: false\n  RotateKubeletServerCertificate: true\n";
    let (cfg, _) = parse_body(body).unwrap();
    cfg.validate().unwrap();
    assert!(!cfg.feature_enabled("ReloadKubeletClientCAFile"));
    assert!(
        cfg.feature_enabled("ReloadKubeletServerCertificateFile"),
        "upstream's default"
    );
    assert!(!cfg.feature_enabled("NoSuchGate"));
    let err =
        parse_body("featureGates:\n  RotateKubeletServerCertificate: yes please\n").unwrap_err();
    assert!(
        err.to_string()
            .contains("featureGates.RotateKubeletServerCertificate"),
        "{err}"
    );
    let (cfg, _) = parse_body("featureGates:\n  Foo: true\n").unwrap();
    assert_eq!(
        cfg.validate().unwrap_err().to_string(),
        "invalid configuration: featureGates: unrecognized feature gate: Foo"
    );
    let (cfg, _) = parse_body(
        "serverTLSBootstrap: true\nfeatureGates:\n  RotateKubeletServerCertificate: false\n",
    )
    .unwrap();
    assert_eq!(
        cfg.validate().unwrap_err().to_string(),
        "invalid configuration: serverTLSBootstrap true requires feature gate RotateKubeletServerCertificate"
    );
    let (cfg, _) = parse_body("runOnce: true\n").unwrap();
    assert_eq!(
        cfg.validate().unwrap_err().to_string(),
        "invalid configuration: runOnce (--runOnce) true, Runonce mode has been deprecated and should not be set"
    );
    let (cfg, _) = parse_body("runOnce: false\n").unwrap();
    cfg.validate().unwrap();
    let (cfg, _) = parse_body("enableControllerAttachDetach: false\n").unwrap();
    assert_eq!(
        cfg.validate().unwrap_err().to_string(),
        "invalid configuration: enableControllerAttachDetach (--enable-controller-attach-detach) false: rkubelet does not attach volumes itself; the attach/detach controller attaches them"
    );
    let (cfg, _) = parse_body("enableControllerAttachDetach: true\n").unwrap();
    cfg.validate().unwrap();
    let (cfg, _) = parse_body("memorySwap:\n  swapBehavior: Unlimited\n").unwrap();
    assert_eq!(
        cfg.validate().unwrap_err().to_string(),
        "invalid configuration: memorySwap.swapBehavior \"Unlimited\" must be one of: \"\", \"LimitedSwap\" or \"NoSwap\""
    );
    let (cfg, _) =
        parse_body("failCgroupV1: false\nmemorySwap:\n  swapBehavior: LimitedSwap\n").unwrap();
    cfg.validate().unwrap();
    cfg.validate_for_cgroups(2).unwrap();
    assert_eq!(
        cfg.validate_for_cgroups(1).unwrap_err().to_string(),
        "invalid configuration: swap feature is enabled and LimitedSwap but it is only supported with cgroupv2"
    );
}

/// A reservedMemory of one item, for NUMA node 0.
fn reservation(limits: &[(&str, &str)]) -> Vec<MemoryReservation> {
    vec![MemoryReservation {
        numa_node: 0,
        limits: limits
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }]
}

/// The resource managers' settings: the policies rkubelet has honoured
/// (and read from the file), what needs a manager rkubelet lacks refused
/// by name, what upstream refuses refused in its words.
#[test]
fn resource_managers_are_honoured_or_refused() {
    let (cfg, ignored) = parse_body(
        "cpuManagerPolicy: none\ncpuManagerReconcilePeriod: 5s\nmemoryManagerPolicy: Static\n\
         topologyManagerPolicy: none\ntopologyManagerScope: pod\nreservedSystemCPUs: \"0\"\n\
         systemReserved: {cpu: 250m, memory: 1Gi}\nkubeReserved: {cpu: 500m}\n\
         reservedMemory: [{numaNode: 0, limits: {memory: 1124Mi}}]\n",
    )
    .unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
    cfg.validate().unwrap();
    assert_eq!(cfg.cpu_manager_reconcile_period, Duration::from_secs(5));
    assert_eq!(cfg.topology_manager_scope, "pod");
    assert_eq!(cfg.reserved_memory[0].limits["memory"], "1124Mi");
    assert_eq!(cfg.to_v1beta1_json()["reservedMemory"][0]["numaNode"], 0);
    // The aligning policies, and options (checked as the manager starts).
    for policy in ["best-effort", "restricted", "single-numa-node"] {
        let mut c = cfg.clone();
        c.topology_manager_policy = policy.into();
        c.topology_manager_policy_options =
            [("max-allowable-numa-nodes".into(), "8".into())].into();
        c.validate().unwrap();
    }
    // reservedSystemCPUs' count replaces both cpu reservations.
    let (system, kube) = cfg.reservations();
    assert_eq!(system["cpu"], 1000);
    assert_eq!(system["memory"], 1 << 30);
    assert!(!kube.contains_key("cpu"));
    type Mutate = fn(&mut KubeletConfiguration);
    let cases: &[(Mutate, &str)] = &[
        (
            |c| c.cpu_manager_policy = "dynamic".into(),
            r#"unknown policy: "dynamic""#,
        ),
        (
            |c| {
                c.cpu_manager_policy_options =
                    [("full-pcpus-only".to_owned(), "true".to_owned())].into()
            },
            "new none policy error: None policy: received unsupported options=map[full-pcpus-only:true]",
        ),
        (
            |c| c.reserved_memory = reservation(&[("cpu", "1")]),
            r#"invalid configuration: the limit type "cpu" for NUMA node 0 is not supported, only [memory hugepages-<HugePageSize>] is accepted"#,
        ),
        (
            |c| c.reserved_memory = reservation(&[("memory", "1Gi"), ("hugepages-2Mi", "0")]),
            r#"invalid configuration: reserved memory may not be zero for NUMA node 0 and resource "hugepages-2Mi""#,
        ),
        (
            |c| {
                c.reserved_memory = [
                    reservation(&[("memory", "1Gi")]),
                    reservation(&[("memory", "1Gi")]),
                ]
                .concat()
            },
            r#"invalid configuration: the reserved memory has a duplicate value for NUMA node 0 and resource "memory""#,
        ),
        (
            |c| c.memory_manager_policy = "static".into(),
            r#"unknown policy: "static""#,
        ),
        (
            |c| c.topology_manager_policy = "numa".into(),
            r#"invalid configuration: topologyManagerPolicy (--topology-manager-policy) "numa" must be one of: ["none" "best-effort" "restricted" "single-numa-node"]"#,
        ),
        (
            |c| c.topology_manager_scope = "node".into(),
            r#"invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be one of: "container", or "pod""#,
        ),
        (
            |c| c.reserved_system_cpus = "1-0".into(),
            r#"invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) 1-0, error: invalid range "1-0" (1 > 0)"#,
        ),
        (
            |c| {
                c.reserved_system_cpus = "0".into();
                c.system_reserved_cgroup = "/system".into();
            },
            "invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)",
        ),
    ];
    for (mutate, want) in cases {
        let mut c = KubeletConfiguration::default();
        mutate(&mut c);
        match c.validate() {
            Err(ConfigError::Rejected(m)) => assert_eq!(m, *want),
            other => panic!("{want}: {other:?}"),
        }
    }
}
