//! What upstream's validation refuses, checked once command-line overrides
//! are applied: each error names the field (and its flag) in upstream's words.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::duration::format_go_duration;

impl KubeletConfiguration {
    /// Checks the values that upstream's validation would reject (and that
    /// rkubelet cannot run with).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let gates = super::gates::resolve(&self.feature_gates)?;
        if self.server_tls_bootstrap && !gates["RotateKubeletServerCertificate"] {
            return Err(ConfigError::Rejected(
                "serverTLSBootstrap true requires feature gate RotateKubeletServerCertificate"
                    .into(),
            ));
        }
        let swap = &self.memory_swap.swap_behavior;
        if !["", crate::swap::NO_SWAP, crate::swap::LIMITED_SWAP].contains(&swap.as_str()) {
            return Err(ConfigError::Rejected(format!(
                "memorySwap.swapBehavior {swap:?} must be one of: \"\", {:?} or {:?}",
                crate::swap::LIMITED_SWAP,
                crate::swap::NO_SWAP
            )));
        }
        if !self.enable_controller_attach_detach {
            return Err(ConfigError::Rejected(
                "enableControllerAttachDetach (--enable-controller-attach-detach) false: rkubelet does not attach volumes itself; the attach/detach controller attaches them"
                    .into(),
            ));
        }
        if self.run_once {
            return Err(ConfigError::Rejected(
                "runOnce (--runOnce) true, Runonce mode has been deprecated and should not be set"
                    .into(),
            ));
        }
        if !self.static_pod_url.is_empty()
            && !self.static_pod_url.starts_with("http://")
            && !self.static_pod_url.starts_with("https://")
        {
            return Err(ConfigError::Rejected(format!(
                "staticPodURL {:?}: only http:// and https:// URLs are supported by rkubelet",
                self.static_pod_url
            )));
        }
        self.validate_resource_managers()?;
        self.validate_shutdown(&gates)?;
        self.validate_logging(&gates)?;
        self.image_pull_verification()?;
        self.validate_images()?;
        self.validate_periods()?;
        self.validate_logs_and_resources()?;
        self.validate_node_allocatable()?;
        self.validate_runtime_and_server()?;
        self.validate_node()?;
        self.validate_user_namespaces()?;
        self.validate_names()
    }
    /// `logging` as component-base validates it, in its words (its errors
    /// aggregated as Go prints them); then what rkubelet cannot do.
    fn validate_logging(
        &self,
        gates: &std::collections::BTreeMap<&'static str, bool>,
    ) -> Result<(), ConfigError> {
        const MAX: u32 = i32::MAX as u32;
        let l = &self.logging;
        let mut errs: Vec<String> = Vec::new();
        match l.format.as_str() {
            "text" => {}
            "json" if !gates["LoggingBetaOptions"] => errs.push(
                "logging.format: Forbidden: Log format json is disabled, see LoggingBetaOptions feature"
                    .into(),
            ),
            "json" => {}
            other => errs.push(format!(
                "logging.format: Invalid value: {other:?}: Unsupported log format"
            )),
        }
        if l.verbosity > MAX {
            errs.push(format!(
                "logging.verbosity: Invalid value: {}: Must be <= {MAX}",
                l.verbosity
            ));
        }
        if !l.vmodule.is_empty() && l.format != "text" {
            errs.push("logging.vmodule: Forbidden: Only supported for text log format".into());
        }
        for (i, item) in l.vmodule.iter().enumerate() {
            if item.file_pattern.is_empty() {
                errs.push(format!(
                    "logging.vmodule[{i}]: Required value: File pattern must not be empty"
                ));
            }
            if item.file_pattern.contains(['=', ',']) {
                errs.push(format!(
                    "logging.vmodule[{i}]: Invalid value: {:?}: File pattern must not contain equal sign or comma",
                    item.file_pattern
                ));
            }
            if item.verbosity > MAX {
                errs.push(format!(
                    "logging.vmodule[{i}]: Invalid value: {}: Must be <= {MAX}",
                    item.verbosity
                ));
            }
        }
        for (name, o) in [("text", &l.options.text), ("json", &l.options.json)] {
            if o.split_stream && !gates["LoggingAlphaOptions"] {
                errs.push(format!(
                    "logging.options.{name}.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled"
                ));
            }
            let size = crate::quantity::parse_bytes(&Quantity(o.info_buffer_size.clone()));
            if let Err(e) = &size {
                errs.push(format!(
                    "logging.options.{name}.infoBufferSize: Invalid value: {:?}: {e}",
                    o.info_buffer_size
                ));
            } else if size.is_ok_and(|b| b != 0) && !gates["LoggingAlphaOptions"] {
                errs.push(format!(
                    "logging.options.{name}.infoBufferSize: Forbidden: Feature LoggingAlphaOptions is disabled"
                ));
            }
        }
        match errs.len() {
            0 => {}
            1 => return Err(ConfigError::Rejected(errs.remove(0))),
            _ => return Err(ConfigError::Rejected(format!("[{}]", errs.join(", ")))),
        }
        // Valid upstream, and what rkubelet does not do.
        if !l.vmodule.is_empty() {
            return Err(ConfigError::Rejected(
                "logging.vmodule: not supported by rkubelet: its log lines come from Rust modules, not Go files (RUST_LOG selects them)".into(),
            ));
        }
        for (name, o) in [("text", &l.options.text), ("json", &l.options.json)] {
            if crate::quantity::parse_bytes(&Quantity(o.info_buffer_size.clone()))
                .is_ok_and(|b| b != 0)
            {
                return Err(ConfigError::Rejected(format!(
                    "logging.options.{name}.infoBufferSize: not supported by rkubelet: every log line is written as it comes"
                )));
            }
        }
        Ok(())
    }

    /// The CPU, memory and topology managers' settings: upstream's
    /// messages for what upstream refuses; what needs a manager rkubelet
    /// does not have yet refused by name, never run as `none`.
    fn validate_resource_managers(&self) -> Result<(), ConfigError> {
        let rejected = |m: String| Err(ConfigError::Rejected(m));
        match self.cpu_manager_policy.as_str() {
            "none" if !self.cpu_manager_policy_options.is_empty() => {
                let options: Vec<String> = self
                    .cpu_manager_policy_options
                    .iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect();
                return rejected(format!(
                    "new none policy error: None policy: received unsupported options=map[{}]",
                    options.join(" ")
                ));
            }
            // Its options and reservations are checked as the CPU manager
            // starts, where upstream checks them.
            "none" | "static" => {}
            other => return rejected(format!("unknown policy: \"{other}\"")),
        }
        match self.memory_manager_policy.as_str() {
            // The reservations are checked against the node's NUMA nodes as
            // the memory manager starts, where upstream checks them.
            "None" | "Static" => {}
            other => return rejected(format!("unknown policy: {other:?}")),
        }
        self.validate_reserved_memory()?;
        const TOPOLOGY: [&str; 4] = ["none", "best-effort", "restricted", "single-numa-node"];
        if !TOPOLOGY.contains(&self.topology_manager_policy.as_str()) {
            return rejected(format!(
                "invalid configuration: topologyManagerPolicy (--topology-manager-policy) {:?} must be one of: [{}]",
                self.topology_manager_policy,
                TOPOLOGY.map(|p| format!("{p:?}")).join(" ")
            ));
        }
        if !["container", "pod"].contains(&self.topology_manager_scope.as_str()) {
            return rejected(format!(
                "invalid configuration: topologyManagerScope (--topology-manager-scope) {:?} must be one of: \"container\", or \"pod\"",
                self.topology_manager_scope
            ));
        }
        // The topology manager's options are checked as it starts, where
        // upstream checks them.
        if !self.reserved_system_cpus.is_empty() {
            if !self.system_reserved_cgroup.is_empty() || !self.kube_reserved_cgroup.is_empty() {
                return rejected(
                    "invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)"
                        .into(),
                );
            }
            if let Err(e) = crate::cpuset::parse(&self.reserved_system_cpus) {
                return rejected(format!(
                    "invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) {}, error: {e}",
                    self.reserved_system_cpus
                ));
            }
        }
        Ok(())
    }

    /// reservedMemory as upstream's validation checks it: memory or
    /// hugepages only, none zero, no node and kind twice.
    fn validate_reserved_memory(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.reserved_memory {
            let node = r.numa_node;
            for (name, q) in &r.limits {
                let err =
                    |m: String| Err(ConfigError::Rejected(format!("invalid configuration: {m}")));
                if !crate::resources::is_memory_resource(name) {
                    return err(format!(
                        "the limit type {name:?} for NUMA node {node} is not supported, only [memory hugepages-<HugePageSize>] is accepted"
                    ));
                }
                let bytes = crate::quantity::parse_bytes(&Quantity(q.clone())).map_err(|e| {
                    ConfigError::Rejected(format!(
                        "reservedMemory: NUMA node {node}: {name}: {}",
                        e.message
                    ))
                })?;
                if bytes == 0 {
                    return err(format!(
                        "reserved memory may not be zero for NUMA node {node} and resource {name:?}"
                    ));
                }
                if !seen.insert((node, name.clone())) {
                    return err(format!(
                        "the reserved memory has a duplicate value for NUMA node {node} and resource {name:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// systemReserved and kubeReserved as node allocatable reads them:
    /// with reservedSystemCPUs, its count is the system's cpu and
    /// kubeReserved keeps none (upstream's override at start).
    pub fn reservations(&self) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
        let (mut system, mut kube) = (self.system_reserved.clone(), self.kube_reserved.clone());
        let cpus = crate::cpuset::parse(&self.reserved_system_cpus).unwrap_or_default();
        if !cpus.is_empty() {
            kube.remove("cpu");
            system.insert("cpu".into(), cpus.len() as i64 * 1000);
        }
        (system, kube)
    }

    /// The shutdown grace periods as upstream validates them, in its words.
    fn validate_shutdown(
        &self,
        gates: &std::collections::BTreeMap<&'static str, bool>,
    ) -> Result<(), ConfigError> {
        let (period, critical) = (
            self.shutdown_grace_period,
            self.shutdown_grace_period_critical_pods,
        );
        let by_priority = &self.shutdown_grace_period_by_pod_priority;
        let shown = format_go_duration;
        let sub_second = |d: Duration| d > Duration::ZERO && d < Duration::from_secs(1);
        let rejected = |m: String| Err(ConfigError::Rejected(m));
        if gates["GracefulNodeShutdown"] {
            if critical > period {
                return rejected(format!(
                    "shutdownGracePeriodCriticalPods {} must be <= shutdownGracePeriod {}",
                    shown(critical),
                    shown(period)
                ));
            }
            if sub_second(period) {
                return rejected(format!(
                    "shutdownGracePeriod {} must be either zero or otherwise >= 1 sec",
                    shown(period)
                ));
            }
            if sub_second(critical) {
                return rejected(format!(
                    "shutdownGracePeriodCriticalPods {} must be either zero or otherwise >= 1 sec",
                    shown(critical)
                ));
            }
        } else if !period.is_zero() || !critical.is_zero() {
            return rejected(
                "specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires \
                 feature gate GracefulNodeShutdown"
                    .into(),
            );
        }
        if !by_priority.is_empty() {
            if !gates["GracefulNodeShutdownBasedOnPodPriority"] {
                return rejected(
                    "Specifying shutdownGracePeriodByPodPriority requires feature gate \
                     GracefulNodeShutdownBasedOnPodPriority"
                        .into(),
                );
            }
            if !period.is_zero() || !critical.is_zero() {
                return rejected(
                    "Cannot specify both shutdownGracePeriodByPodPriority and \
                     shutdownGracePeriod at the same time"
                        .into(),
                );
            }
        }
        Ok(())
    }

    /// enforceNodeAllocatable as upstream validates it, in its words.
    fn validate_node_allocatable(&self) -> Result<(), ConfigError> {
        if !self.system_cgroups.is_empty() && self.cgroup_root.is_empty() {
            return Err(ConfigError::Rejected(
                "systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified".into(),
            ));
        }
        if !self.system_cgroups.is_empty() && self.system_cgroups.trim_matches('/').is_empty() {
            return Err(ConfigError::Rejected(
                "systemCgroups (--system-cgroups): system container cannot be root (\"/\")".into(),
            ));
        }
        let flag = "enforceNodeAllocatable (--enforce-node-allocatable)";
        let list = &self.enforce_node_allocatable;
        let has = |k: &str| list.iter().any(|v| v == k);
        for (a, b) in [
            (
                ENFORCE_SYSTEM_RESERVED,
                ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
            ),
            (ENFORCE_KUBE_RESERVED, ENFORCE_KUBE_RESERVED_COMPRESSIBLE),
        ] {
            if has(a) && has(b) {
                return Err(ConfigError::Rejected(format!(
                    "both {a:?} and {b:?} cannot be specified together in {flag}"
                )));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for val in list {
            if !seen.insert(val.as_str()) {
                return Err(ConfigError::Rejected(format!(
                    "duplicated enforcements {val:?} in {flag}"
                )));
            }
            match val.as_str() {
                ENFORCE_PODS => {}
                ENFORCE_SYSTEM_RESERVED | ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE
                    if self.system_reserved_cgroup.is_empty() =>
                {
                    return Err(ConfigError::Rejected(format!(
                        "systemReservedCgroup (--system-reserved-cgroup) must be specified when \
                         {ENFORCE_SYSTEM_RESERVED:?} or {ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE:?} \
                         included in {flag}"
                    )));
                }
                ENFORCE_KUBE_RESERVED | ENFORCE_KUBE_RESERVED_COMPRESSIBLE
                    if self.kube_reserved_cgroup.is_empty() =>
                {
                    return Err(ConfigError::Rejected(format!(
                        "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \
                         {ENFORCE_KUBE_RESERVED:?} or {ENFORCE_KUBE_RESERVED_COMPRESSIBLE:?} \
                         included in {flag}"
                    )));
                }
                ENFORCE_SYSTEM_RESERVED
                | ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE
                | ENFORCE_KUBE_RESERVED
                | ENFORCE_KUBE_RESERVED_COMPRESSIBLE => {}
                ENFORCE_NONE => {
                    if list.len() > 1 {
                        return Err(ConfigError::Rejected(format!(
                            "{flag} may not contain additional enforcements when {ENFORCE_NONE:?} is specified"
                        )));
                    }
                    continue;
                }
                other => {
                    return Err(ConfigError::Rejected(format!(
                        "option {other:?} specified for {flag}. Valid options are {ENFORCE_PODS:?}, \
                         {ENFORCE_SYSTEM_RESERVED:?}, {ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE:?}, \
                         {ENFORCE_KUBE_RESERVED:?}, {ENFORCE_KUBE_RESERVED_COMPRESSIBLE:?} or {ENFORCE_NONE:?}"
                    )));
                }
            }
            if !self.cgroups_per_qos {
                return Err(ConfigError::Rejected(format!(
                    "cgroupsPerQOS (--cgroups-per-qos) must be set to true when {val:?} contained in {flag}"
                )));
            }
        }
        Ok(())
    }

    /// Image garbage collection and pulls.
    fn validate_images(&self) -> Result<(), ConfigError> {
        let (high, low) = (
            self.image_gc_high_threshold_percent,
            self.image_gc_low_threshold_percent,
        );
        for (field, n) in [
            (
                "imageGCHighThresholdPercent (--image-gc-high-threshold)",
                high,
            ),
            ("imageGCLowThresholdPercent (--image-gc-low-threshold)", low),
        ] {
            if !(0..=100).contains(&n) {
                return Err(invalid(
                    field,
                    format!("{n} must be between 0 and 100, inclusive"),
                ));
            }
        }
        if low >= high {
            return Err(invalid(
                "imageGCLowThresholdPercent (--image-gc-low-threshold)",
                format!(
                    "{low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
                ),
            ));
        }
        let (min_age, max_age) = (self.image_minimum_gc_age, self.image_maximum_gc_age);
        if !max_age.is_zero() && max_age <= min_age {
            return Err(invalid(
                "imageMaximumGCAge",
                format!(
                    "{} must be greater than imageMinimumGCAge {}",
                    format_go_duration(max_age),
                    format_go_duration(min_age)
                ),
            ));
        }
        match self.max_parallel_image_pulls {
            Some(n) if n < 1 => {
                return Err(invalid(
                    "maxParallelImagePulls",
                    format!("{n} must be a positive number"),
                ));
            }
            Some(n) if n > 1 && self.serialize_image_pulls => {
                return Err(invalid(
                    "maxParallelImagePulls",
                    "cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// The loops' periods.
    fn validate_periods(&self) -> Result<(), ConfigError> {
        let positive = [
            ("syncFrequency (--sync-frequency)", self.sync_frequency),
            (
                "fileCheckFrequency (--file-check-frequency)",
                self.file_check_frequency,
            ),
            (
                "runtimeRequestTimeout (--runtime-request-timeout)",
                self.runtime_request_timeout,
            ),
            (
                "nodeStatusUpdateFrequency",
                self.node_status_update_frequency,
            ),
            (
                "nodeStatusReportFrequency",
                self.node_status_report_frequency,
            ),
        ];
        for (field, d) in positive {
            if d.is_zero() {
                return Err(invalid(
                    field,
                    format!("must be greater than 0, got {}", format_go_duration(d)),
                ));
            }
        }
        Ok(())
    }

    /// Container logs, sysctls and eviction.
    fn validate_logs_and_resources(&self) -> Result<(), ConfigError> {
        self.container_log_max_bytes()?;
        if self.enable_system_log_query && !self.enable_system_log_handler {
            return Err(ConfigError::Rejected(
                "invalid configuration: enableSystemLogHandler is required for enableSystemLogQuery"
                    .into(),
            ));
        }
        if self.container_log_max_workers < 1 {
            return Err(invalid(
                "containerLogMaxWorkers",
                "must be greater than or equal to 1",
            ));
        }
        if self.container_log_monitor_interval < Duration::from_secs(3) {
            return Err(invalid(
                "containerLogMonitorInterval",
                "must be a positive time duration greater than or equal to 3s",
            ));
        }
        if self.container_log_max_files <= 1 {
            return Err(invalid("containerLogMaxFiles", "must be greater than 1"));
        }
        if let Err(e) = crate::sysctl::Allowlist::new("", &self.allowed_unsafe_sysctls) {
            return Err(invalid(
                "allowedUnsafeSysctls (--allowed-unsafe-sysctls)",
                e,
            ));
        }
        self.validate_node_allocatable()?;
        crate::eviction::parse_thresholds(&self.eviction_hard)
            .map_err(|m| invalid("evictionHard", m))?;
        self.eviction_thresholds().map_err(|m| {
            invalid(
                "evictionSoft, evictionSoftGracePeriod, evictionMinimumReclaim",
                m,
            )
        })?;
        Ok(())
    }

    /// `userNamespaces`, as upstream's validation_linux.go.
    fn validate_user_namespaces(&self) -> Result<(), ConfigError> {
        let ids = self.user_namespaces.ids_per_pod;
        let unit = i64::from(crate::userns::IDS_UNIT);
        if ids < unit {
            return Err(ConfigError::Rejected(format!(
                "userNamespaces.idsPerPod must not be less than {unit}"
            )));
        }
        if ids % unit != 0 {
            return Err(ConfigError::Rejected(format!(
                "userNamespaces.idsPerPod must be a multiple of {unit}"
            )));
        }
        if ids > i64::from(u32::MAX) {
            return Err(ConfigError::Rejected(format!(
                "userNamespaces.idsPerPod must not be more than {}",
                u32::MAX
            )));
        }
        Ok(())
    }

    /// The node's own fields, in upstream's messages
    /// (pkg/kubelet/apis/config/validation).
    fn validate_node(&self) -> Result<(), ConfigError> {
        if self.node_lease_duration_seconds <= 0 {
            return Err(invalid(
                "nodeLeaseDurationSeconds",
                "must be greater than 0",
            ));
        }
        if self.node_status_max_images < -1 {
            return Err(ConfigError::Rejected(format!(
                "nodeStatusMaxImages (--node-status-max-images) {} must be -1 or greater",
                self.node_status_max_images
            )));
        }
        if self.max_open_files < 0 {
            return Err(ConfigError::Rejected(format!(
                "maxOpenFiles (--max-open-files) {} must not be a negative number",
                self.max_open_files
            )));
        }
        if !(-1000..=1000).contains(&self.oom_score_adj) {
            return Err(ConfigError::Rejected(format!(
                "oomScoreAdj (--oom-score-adj) {} must be between -1000 and 1000, inclusive",
                self.oom_score_adj
            )));
        }
        for t in &self.register_with_taints {
            let bad_key = crate::manifest::is_qualified_name(&t.key);
            let bad_value = t
                .value
                .as_deref()
                .map(crate::manifest::is_valid_label_value)
                .unwrap_or_default();
            let bad_effect = !matches!(
                t.effect.as_str(),
                "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            );
            if !bad_key.is_empty() || !bad_value.is_empty() || bad_effect {
                // Upstream's words, with Go's %v of the taint.
                return Err(ConfigError::InvalidValue {
                    field: "registerWithTaints".to_owned(),
                    message: format!(
                        "invalid taint: {{{} {} {} <nil>}}",
                        t.key,
                        t.value.as_deref().unwrap_or(""),
                        t.effect
                    ),
                });
            }
            if t.time_added.is_some() {
                return Err(ConfigError::Rejected(
                    "taint.TimeAdded is not nil".to_owned(),
                ));
            }
        }
        let restart = self.crash_loop_back_off.max_container_restart_period;
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&restart) {
            return Err(ConfigError::Rejected(format!(
                "CrashLoopBackOff.MaxContainerRestartPeriod (got: {} seconds) must be set between 1s and 300s",
                restart.as_secs_f64()
            )));
        }
        if !matches!(
            self.config_map_and_secret_change_detection_strategy
                .as_str(),
            "Watch" | "Cache" | "Get"
        ) {
            return Err(ConfigError::Rejected(format!(
                "unknown configmap and secret manager mode: {}",
                self.config_map_and_secret_change_detection_strategy
            )));
        }
        if let Err(e) = super::check_curve_preferences(&self.tls_curve_preferences) {
            return Err(invalid("tlsCurvePreferences", e));
        }
        // Fields whose alpha gates are off in v1.37: upstream refuses them.
        if !self.default_pod_sysctls.is_empty() {
            return Err(ConfigError::Rejected(
                "DefaultPodSysctls feature gate is required for Kubelet configuration option defaultPodSysctls"
                    .to_owned(),
            ));
        }
        if self.memory_throttling_factor.is_some_and(|f| f != 0.9) {
            return Err(ConfigError::Rejected(
                "memoryThrottlingFactor must not be set when MemoryQoS feature gate is disabled"
                    .to_owned(),
            ));
        }
        match self.memory_reservation_policy.as_str() {
            "None" => {}
            "TieredReservation" => {
                return Err(ConfigError::Rejected(
                    "memoryReservationPolicy \"TieredReservation\" requires MemoryQoS feature gate to be enabled"
                        .to_owned(),
                ));
            }
            other => {
                return Err(ConfigError::Rejected(format!(
                    "option {other:?} specified for memoryReservationPolicy. Valid options are \"None\" or \"TieredReservation\""
                )));
            }
        }
        if self.registry_burst < 0 {
            return Err(ConfigError::Rejected(format!(
                "registryBurst (--registry-burst) {} must not be a negative number",
                self.registry_burst
            )));
        }
        if self.registry_pull_qps < 0 {
            return Err(ConfigError::Rejected(format!(
                "registryPullQPS (--registry-qps) {} must not be a negative number",
                self.registry_pull_qps
            )));
        }
        if self.pods_per_core < 0 {
            return Err(ConfigError::Rejected(format!(
                "podsPerCore (--pods-per-core) {} must not be a negative number",
                self.pods_per_core
            )));
        }
        Ok(())
    }

    /// The runtime, cgroups and the servers.
    fn validate_runtime_and_server(&self) -> Result<(), ConfigError> {
        let period = self.cpu_cfs_quota_period;
        if period < Duration::from_millis(1) || period > Duration::from_secs(1) {
            return Err(ConfigError::Rejected(format!(
                "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {} must be between 1ms and 1sec, inclusive",
                format_go_duration(period)
            )));
        }
        if self.max_pods == 0 {
            return Err(invalid("maxPods (--max-pods)", "must be greater than 0"));
        }
        for (field, endpoint) in [
            (
                "containerRuntimeEndpoint (--container-runtime-endpoint)",
                self.container_runtime_endpoint.as_str(),
            ),
            // Empty, it is containerRuntimeEndpoint.
            (
                "imageServiceEndpoint (--image-service-endpoint)",
                self.image_endpoint(),
            ),
        ] {
            match endpoint.strip_prefix("unix://") {
                Some(path) if !path.is_empty() => {}
                _ => {
                    return Err(invalid(
                        field,
                        format!(
                            "must be a unix socket such as \"unix:///run/containerd/containerd.sock\", got {endpoint:?}"
                        ),
                    ));
                }
            }
        }
        if !self.pod_logs_dir.is_absolute() {
            return Err(invalid(
                "podLogsDir",
                format!("must be an absolute path, got {:?}", self.pod_logs_dir),
            ));
        }
        if self.address.parse::<std::net::IpAddr>().is_err() {
            return Err(invalid(
                "address (--address)",
                format!("must be an IP address, got {:?}", self.address),
            ));
        }
        if self.port == 0 {
            return Err(invalid(
                "port (--port)",
                "0 must be between 1 and 65535, inclusive",
            ));
        }
        if self.tls_cert_file.is_some() != self.tls_private_key_file.is_some() {
            return Err(invalid(
                "tlsCertFile (--tls-cert-file)",
                "and tlsPrivateKeyFile (--tls-private-key-file) must be set together",
            ));
        }
        if self.streaming_connection_idle_timeout.is_zero() {
            return Err(invalid(
                "streamingConnectionIdleTimeout",
                "must be greater than 0, got 0s",
            ));
        }
        if self.healthz_bind_address.is_empty() {
            return Err(invalid(
                "healthzBindAddress (--healthz-bind-address)",
                "must not be empty",
            ));
        }
        Ok(())
    }

    /// The names lists hold: cipher suites, nameservers, the tracing
    /// sampling rate.
    fn validate_names(&self) -> Result<(), ConfigError> {
        if let Some(name) = self
            .tls_cipher_suites
            .iter()
            .find(|name| !TLS_CIPHER_SUITES.contains(&name.as_str()))
        {
            return Err(invalid(
                "tlsCipherSuites (--tls-cipher-suites)",
                format!(
                    "cipher suite {name} not supported or doesn't exist (supported: {})",
                    TLS_CIPHER_SUITES.join(", ")
                ),
            ));
        }
        if let Some(ip) = self
            .cluster_dns
            .iter()
            .find(|ip| ip.parse::<std::net::IpAddr>().is_err())
        {
            return Err(invalid(
                "clusterDNS (--cluster-dns)",
                format!("{ip:?} is not an IP address"),
            ));
        }
        if let Some(rate) = self
            .tracing
            .as_ref()
            .map(|t| t.sampling_rate_per_million)
            .filter(|rate| *rate > 1_000_000)
        {
            return Err(invalid(
                "tracing.samplingRatePerMillion",
                format!(
                    "{rate}: sampling rate per million must be less than or equal to one million"
                ),
            ));
        }
        Ok(())
    }
}

/// A field (with its flag) whose value upstream's validation refuses.
fn invalid(field: &str, message: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_owned(),
        message: message.to_string(),
    }
}
