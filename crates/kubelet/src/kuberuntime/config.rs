//! CRI configs for a pod's sandbox and containers (upstream's
//! kuberuntime_sandbox.go / kuberuntime_container.go): labels and
//! annotations crictl understands, DNS, ports, namespaces, Linux resources,
//! log paths. Pure functions of the pod spec.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, SELinuxOptions, SecurityContext};
use kubelet_core::actions::container_hash;
use kubelet_core::cgroups;
use kubelet_core::dns::ResolvConf;
use kubelet_core::env::expand_command_and_args;
use kubelet_core::qos::qos_class;
use kubelet_core::quantity::{parse_bytes, parse_cpu_millis};
use kubelet_core::resources;
use kubelet_core::security::{self, Profile};
use kubelet_core::swap::{SwapPolicy, SwapSetting};
use kubelet_core::types::keys;
use kubelet_cri::v1 as cri;

use crate::error::ConfigError;

/// Name of the pod's log directory under podLogsDir:
/// `<namespace>_<name>_<uid>`. Refuses components that could escape the
/// directory (only names the API would accept are used).
pub fn pod_log_dir(logs_root: &Path, namespace: &str, name: &str, uid: &str) -> Option<PathBuf> {
    let safe = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    };
    (safe(namespace) && safe(name) && safe(uid))
        .then(|| logs_root.join(format!("{namespace}_{name}_{uid}")))
}

fn spec(pod: &Pod) -> &k8s_openapi::api::core::v1::PodSpec {
    static EMPTY: std::sync::OnceLock<k8s_openapi::api::core::v1::PodSpec> =
        std::sync::OnceLock::new();
    pod.spec
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
}

pub fn host_network(pod: &Pod) -> bool {
    spec(pod).host_network.unwrap_or(false)
}

fn name_ns_uid(pod: &Pod) -> (&str, &str, &str) {
    (
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.uid.as_deref().unwrap_or(""),
    )
}

/// The labels upstream puts on sandboxes: the pod's own plus its identity.
fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let (name, ns, uid) = name_ns_uid(pod);
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(keys::POD_NAME.into(), name.into());
    labels.insert(keys::POD_NAMESPACE.into(), ns.into());
    labels.insert(keys::POD_UID.into(), uid.into());
    labels
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => cri::Protocol::Udp as i32,
        Some("SCTP") => cri::Protocol::Sctp as i32,
        _ => cri::Protocol::Tcp as i32,
    }
}

/// The pod's namespaces, its user namespace `userns` (the userns manager's).
fn namespace_options(pod: &Pod, userns: cri::UserNamespace) -> cri::NamespaceOption {
    let s = spec(pod);
    let mode = |host: Option<bool>, otherwise: cri::NamespaceMode| {
        if host.unwrap_or(false) {
            cri::NamespaceMode::Node as i32
        } else {
            otherwise as i32
        }
    };
    cri::NamespaceOption {
        network: mode(s.host_network, cri::NamespaceMode::Pod),
        pid: mode(
            s.host_pid,
            if s.share_process_namespace.unwrap_or(false) {
                cri::NamespaceMode::Pod
            } else {
                cri::NamespaceMode::Container
            },
        ),
        ipc: mode(s.host_ipc, cri::NamespaceMode::Pod),
        userns_options: Some(userns),
        ..Default::default()
    }
}

/// Whether any container of the pod (init, regular or ephemeral) asks to
/// be privileged: the sandbox must be too, or the runtime refuses them
/// (upstream's HasPrivilegedContainer).
/// The pod's fsGroup, then its supplementalGroups (upstream's
/// determineEffectiveSecurityContext): what the volumes' group ownership
/// is for.
fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let psc = spec(pod).security_context.as_ref();
    psc.and_then(|p| p.fs_group)
        .into_iter()
        .chain(
            psc.and_then(|p| p.supplemental_groups.clone())
                .into_iter()
                .flatten(),
        )
        .collect()
}

/// A container's groups: the pod's, then its volumes' groups it does not
/// have yet (upstream's GetExtraSupplementalGroupsForPod).
fn container_groups(pod: &Pod, volume_groups: &[i64]) -> Vec<i64> {
    let mut groups = supplemental_groups(pod);
    for g in volume_groups {
        if !groups.contains(g) {
            groups.push(*g);
        }
    }
    groups
}

fn has_privileged_container(pod: &Pod) -> bool {
    let s = spec(pod);
    let privileged =
        |sc: Option<&SecurityContext>| sc.and_then(|sc| sc.privileged).unwrap_or(false);
    s.init_containers
        .iter()
        .flatten()
        .chain(&s.containers)
        .any(|c| privileged(c.security_context.as_ref()))
        || s.ephemeral_containers
            .iter()
            .flatten()
            .any(|c| privileged(c.security_context.as_ref()))
}

/// What a sandbox's config is made of beyond its pod.
pub struct SandboxInputs {
    /// Its resolver.
    pub dns: ResolvConf,
    /// Its kernel hostname (empty on the host network).
    pub hostname: String,
    pub cgroup_parent: String,
    /// Its user namespace (the userns manager's).
    pub userns: cri::UserNamespace,
}

/// RunPodSandbox's config for `pod` (attempt = how many sandboxes came
/// before).
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    logs_root: &Path,
    inputs: SandboxInputs,
    node: NodeResources,
) -> cri::PodSandboxConfig {
    let SandboxInputs {
        dns,
        hostname,
        cgroup_parent,
        userns,
    } = inputs;
    let (name, ns, uid) = name_ns_uid(pod);
    let s = spec(pod);
    let port_mappings = s
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| cri::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let psc = s.security_context.as_ref();
    let (sandbox, overhead) = sandbox_resources(pod, node);
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
            attempt,
        }),
        hostname,
        log_directory: pod_log_dir(logs_root, ns, name, uid)
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        dns_config: Some(cri::DnsConfig {
            servers: dns.servers,
            searches: dns.searches,
            options: dns.options,
        }),
        port_mappings,
        labels: pod_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent,
            resources: Some(sandbox),
            overhead,
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod, userns)),
                run_as_user: psc
                    .and_then(|p| p.run_as_user)
                    .map(|value| cri::Int64Value { value }),
                run_as_group: psc
                    .and_then(|p| p.run_as_group)
                    .map(|value| cri::Int64Value { value }),
                supplemental_groups: supplemental_groups(pod),
                // Validated with the containers' (container_config).
                supplemental_groups_policy: security::supplemental_groups_policy(pod)
                    .unwrap_or_default(),
                privileged: has_privileged_container(pod),
                selinux_options: psc.and_then(|p| p.se_linux_options.as_ref()).map(selinux),
                // Upstream's: the pause process always runs with the
                // runtime's default profile, whatever the pod asks.
                seccomp: Some(cri_profile(Profile::RuntimeDefault)),
                ..Default::default()
            }),
            sysctls: psc
                .and_then(|p| p.sysctls.as_ref())
                .into_iter()
                .flatten()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect(),
        }),
        ..Default::default()
    }
}

/// oom_score_adj by QoS class, as upstream's qos policy computes it.
fn oom_score_adj(pod: &Pod, memory_request: Option<i64>, node_memory: i64) -> i64 {
    match qos_class(pod) {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let req = memory_request.unwrap_or(0).max(0);
            let adj = 1000 - (1000 * req) / node_memory.max(1);
            adj.clamp(3, 999)
        }
    }
}

/// What the node decides for every container's and sandbox's Linux
/// resources.
#[derive(Clone, Copy, Debug)]
pub struct NodeResources {
    /// The node's memory in bytes (oom_score_adj of Burstable pods).
    pub memory: i64,
    /// cpuCFSQuota: the CFS period cpu limits are enforced over, in µs
    /// (cpuCFSQuotaPeriod); None when cpu limits get no quota.
    pub cfs_period: Option<u64>,
    /// memorySwap, and where the host limits swap.
    pub swap: SwapPolicy,
}

/// calculateLinuxResources: shares from the cpu request (the limit when
/// no request is given), a CFS quota from the cpu limit over the period
/// when cpuCFSQuota is on (0 without a limit), the memory limit.
fn calculate_linux_resources(
    cpu_request: Option<i64>,
    cpu_limit: Option<i64>,
    memory_limit: i64,
    node: NodeResources,
) -> cri::LinuxContainerResources {
    let shares = cgroups::milli_cpu_to_shares(cpu_request.or(cpu_limit).unwrap_or(0));
    let (cpu_period, cpu_quota) = match node.cfs_period {
        Some(period) => (
            period as i64,
            cgroups::milli_cpu_to_quota(cpu_limit.unwrap_or(0), period),
        ),
        None => (0, 0),
    };
    cri::LinuxContainerResources {
        cpu_shares: shares as i64,
        cpu_period,
        cpu_quota,
        memory_limit_in_bytes: memory_limit,
        ..Default::default()
    }
}

/// A container's Linux resources from its requests and limits, with its
/// oom_score_adj (at creation, and for an in-place resize).
pub fn linux_resources(
    pod: &Pod,
    c: &Container,
    node: NodeResources,
) -> Result<cri::LinuxContainerResources, ConfigError> {
    let err = |field: String, e: &dyn std::fmt::Display| ConfigError {
        container: c.name.clone(),
        field,
        message: e.to_string(),
    };
    let r = c.resources.as_ref();
    let get = |kind: &str, res: &str| {
        let map = match kind {
            "requests" => r.and_then(|r| r.requests.as_ref()),
            _ => r.and_then(|r| r.limits.as_ref()),
        };
        map.and_then(|m| m.get(res))
    };
    let field = |kind: &str, res: &str| format!("resources.{kind}.{res}");
    let cpu_limit = get("limits", "cpu")
        .map(|q| parse_cpu_millis(q).map_err(|e| err(field("limits", "cpu"), &e)))
        .transpose()?;
    let cpu_request = get("requests", "cpu")
        .map(|q| parse_cpu_millis(q).map_err(|e| err(field("requests", "cpu"), &e)))
        .transpose()?;
    let mem_limit = get("limits", "memory")
        .map(|q| parse_bytes(q).map_err(|e| err(field("limits", "memory"), &e)))
        .transpose()?;
    // A request defaults to the limit, as the API server does.
    let mem_request = match get("requests", "memory") {
        Some(q) => Some(parse_bytes(q).map_err(|e| err(field("requests", "memory"), &e))?),
        None => mem_limit,
    };
    // getCPULimit, getMemoryLimit: a container without a limit of its
    // own, in a pod with pod-level resources, is given the pod's.
    let (cpu_limit, mem_limit) = if resources::pod_level_resources_set(pod) {
        let pod_limits = resources::pod_level_limits(pod);
        let or_pod = |own: Option<i64>, res: &str| {
            own.filter(|v| *v != 0)
                .or_else(|| pod_limits.get(res).copied())
        };
        (or_pod(cpu_limit, "cpu"), or_pod(mem_limit, "memory"))
    } else {
        (cpu_limit, mem_limit)
    };
    let mut resources = cri::LinuxContainerResources {
        oom_score_adj: oom_score_adj(pod, mem_request, node.memory),
        ..calculate_linux_resources(cpu_request, cpu_limit, mem_limit.unwrap_or(0), node)
    };
    let (swap, why) = node.swap.for_container(pod, c, mem_request.unwrap_or(0));
    if let Some(why) = why {
        tracing::error!(error = %why, container = %c.name, "Cannot calculate swap allocation amount; disallowing swap");
    }
    match swap {
        SwapSetting::Untouched => {}
        SwapSetting::MemswEqualsMemory => {
            resources.memory_swap_limit_in_bytes = resources.memory_limit_in_bytes;
        }
        SwapSetting::SwapMax(bytes) => {
            resources
                .unified
                .insert("memory.swap.max".to_owned(), bytes.to_string());
        }
    }
    Ok(resources)
}

/// applySandboxResources: the sandbox's resources are the pod's requests
/// and limits without its overhead, and its overhead apart (requests equal
/// to limits).
fn sandbox_resources(
    pod: &Pod,
    node: NodeResources,
) -> (
    cri::LinuxContainerResources,
    Option<cri::LinuxContainerResources>,
) {
    let reqs = resources::pod_requests_without_overhead(pod);
    let limits = resources::pod_limits_without_overhead(pod);
    let sandbox = calculate_linux_resources(
        reqs.get("cpu").copied(),
        limits.get("cpu").copied(),
        limits.get("memory").copied().unwrap_or(0),
        node,
    );
    let overhead = resources::pod_overhead(pod);
    let overhead = (!overhead.is_empty()).then(|| {
        let cpu = overhead.get("cpu").copied();
        calculate_linux_resources(cpu, cpu, overhead.get("memory").copied().unwrap_or(0), node)
    });
    (sandbox, overhead)
}

/// What the node decides for every container's security context.
#[derive(Clone, Debug, Default)]
pub struct SecurityDefaults {
    /// `<root-dir>/seccomp`: where Localhost seccomp profiles are.
    pub seccomp_root: PathBuf,
    /// `seccompDefault`: RuntimeDefault for containers that name no profile.
    pub seccomp_default: bool,
    /// Host paths masked besides upstream's defaults (the thermal_throttle
    /// directories that exist).
    pub extra_masked_paths: Vec<String>,
}

fn cri_profile(p: Profile) -> cri::SecurityProfile {
    use cri::security_profile::ProfileType;
    let (kind, localhost_ref) = match p {
        Profile::RuntimeDefault => (ProfileType::RuntimeDefault, String::new()),
        Profile::Unconfined => (ProfileType::Unconfined, String::new()),
        Profile::Localhost(r) => (ProfileType::Localhost, r),
    };
    cri::SecurityProfile {
        profile_type: kind as i32,
        localhost_ref,
    }
}

fn selinux(o: &SELinuxOptions) -> cri::SeLinuxOption {
    cri::SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    }
}

/// The container's security context as upstream's
/// determineEffectiveSecurityContext sends it: the effective context (the
/// container's fields over the pod's), capabilities, no_new_privs, the
/// masked and read-only paths of its procMount, its seccomp and AppArmor
/// profiles, the pod's groups and their policy. A profile or policy that
/// cannot be given is refused, naming the field.
fn container_security(
    pod: &Pod,
    c: &Container,
    target_id: Option<&str>,
    volume_groups: &[i64],
    defaults: &SecurityDefaults,
    userns: cri::UserNamespace,
) -> Result<cri::LinuxContainerSecurityContext, ConfigError> {
    let err = |field: &str, message: String| ConfigError {
        container: c.name.clone(),
        field: field.into(),
        message,
    };
    let eff = security::effective(pod, c);
    let seccomp = security::seccomp_profile(
        pod,
        Some(c),
        &defaults.seccomp_root,
        defaults.seccomp_default,
    )
    .map_err(|e| err(&e.field, e.message))?;
    let apparmor = security::apparmor_profile(pod, c)
        .map_err(|m| err("securityContext.appArmorProfile", m.to_string()))?;
    let policy = security::supplemental_groups_policy(pod).map_err(|m| {
        err(
            "spec.securityContext.supplementalGroupsPolicy",
            m.to_string(),
        )
    })?;
    let (masked_paths, readonly_paths) =
        security::proc_paths(eff.proc_mount.as_deref(), &defaults.extra_masked_paths);
    let (apparmor, apparmor_profile) = match apparmor {
        Some((p, deprecated)) => (Some(cri_profile(p)), deprecated),
        None => (None, String::new()),
    };
    // Upstream sends the deprecated string form too, for runtimes that
    // read only it.
    #[allow(deprecated)]
    Ok(cri::LinuxContainerSecurityContext {
        capabilities: security::capabilities(&eff).map(|(add, drop)| cri::Capability {
            add_capabilities: add,
            drop_capabilities: drop,
            ..Default::default()
        }),
        namespace_options: Some({
            let mut ns = namespace_options(pod, userns);
            if let Some(id) = target_id {
                ns.pid = cri::NamespaceMode::Target as i32;
                ns.target_id = id.into();
            }
            ns
        }),
        privileged: eff.privileged.unwrap_or(false),
        selinux_options: eff.se_linux_options.as_ref().map(selinux),
        run_as_user: eff.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: eff.run_as_group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: eff.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: container_groups(pod, volume_groups),
        supplemental_groups_policy: policy,
        no_new_privs: security::no_new_privs(&eff),
        masked_paths,
        readonly_paths,
        seccomp: Some(cri_profile(seccomp)),
        apparmor,
        apparmor_profile,
        ..Default::default()
    })
}

/// What a container's config is made from besides its spec.
pub struct ContainerInputs<'a> {
    pub restart_count: i32,
    /// The running container whose process namespace an ephemeral
    /// container joins (its targetContainerName).
    pub target_id: Option<&'a str>,
    /// The image as the runtime resolved it.
    pub image_ref: &'a str,
    /// The host file of the termination message.
    pub termination_log: Option<&'a Path>,
    /// Its volumes' mounts, /etc/hosts included.
    pub mounts: Vec<cri::Mount>,
    /// Its raw block volumes (`volumeDevices`).
    pub devices: Vec<cri::Device>,
    /// Its pod's user namespace.
    pub userns: cri::UserNamespace,
    /// Its environment, resolved ([`crate::podenv::PodEnv`]).
    pub env: Vec<(String, String)>,
    /// The groups its pod's volumes ask for (PVs' gid annotation).
    pub volume_groups: Vec<i64>,
    /// The ContainerStopSignals gate: its `lifecycle.stopSignal` is given.
    pub stop_signals: bool,
    /// What its device plugins give it (upstream's device run options):
    /// their devices, mounts and environment come before its own, their
    /// annotations under the kubelet's, and their CDI devices.
    pub plugin: crate::devicemanager::RunOptions,
    /// The CPUs it runs on, when the CPU manager says (upstream's
    /// PreCreateContainer: its exclusive CPUs, or the shared pool).
    pub cpuset: Option<String>,
    /// The NUMA nodes its memory is on, when the memory manager says
    /// (upstream's PreCreateContainer: the nodes of its memory blocks).
    pub cpuset_mems: Option<String>,
}

/// The CRI's name of a stop signal the API names (upstream's
/// signalNameToRuntimeEnum): `SIGUSR1` is `SIGNAL_SIGUSR1`, `SIGRTMIN+1`
/// `SIGNAL_SIGRTMINPLUS1`, `SIGRTMAX-1` `SIGNAL_SIGRTMAXMINUS1`.
pub fn cri_signal(name: &str) -> Option<cri::Signal> {
    let cri_name = format!("SIGNAL_{}", name.replace('+', "PLUS").replace('-', "MINUS"));
    cri::Signal::from_str_name(&cri_name).filter(|s| *s != cri::Signal::RuntimeDefault)
}

/// The API's name of a CRI stop signal; None for the runtime's default.
pub fn api_signal(signal: cri::Signal) -> Option<String> {
    let name = signal.as_str_name().strip_prefix("SIGNAL_")?;
    (signal != cri::Signal::RuntimeDefault).then(|| name.replace("PLUS", "+").replace("MINUS", "-"))
}

/// The signal `c` asks to be stopped with, with the ContainerStopSignals
/// gate (without it, upstream ignores the field, as the API server drops
/// it); the runtime's default when it names none.
fn stop_signal(c: &Container, gate: bool) -> Result<cri::Signal, ConfigError> {
    let Some(name) = c
        .lifecycle
        .as_ref()
        .and_then(|l| l.stop_signal.as_deref())
        .filter(|_| gate)
    else {
        return Ok(cri::Signal::RuntimeDefault);
    };
    cri_signal(name).ok_or_else(|| ConfigError {
        container: c.name.clone(),
        field: "lifecycle.stopSignal".into(),
        message: format!("Unsupported value: {name:?}"),
    })
}

/// The container's annotations: its device plugins', then the kubelet's
/// (which win): its hash, restart count, termination message settings,
/// the pod's grace period and the container's ports.
fn container_annotations(
    pod: &Pod,
    c: &Container,
    restart_count: i32,
    plugin_annotations: impl IntoIterator<Item = (String, String)>,
) -> HashMap<String, String> {
    let mut annotations: HashMap<String, String> = plugin_annotations.into_iter().collect();
    annotations.extend([
        (keys::CONTAINER_HASH.to_owned(), container_hash(c)),
        (
            keys::CONTAINER_RESTART_COUNT.to_owned(),
            restart_count.to_string(),
        ),
        (
            keys::CONTAINER_TERMINATION_MESSAGE_PATH.to_owned(),
            c.termination_message_path.clone().unwrap_or_default(),
        ),
        (
            keys::CONTAINER_TERMINATION_MESSAGE_POLICY.to_owned(),
            c.termination_message_policy.clone().unwrap_or_default(),
        ),
    ]);
    if let Some(grace) = spec(pod).termination_grace_period_seconds {
        annotations.insert(keys::POD_TERMINATION_GRACE_PERIOD.into(), grace.to_string());
    }
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        annotations.insert(
            keys::CONTAINER_PORTS.into(),
            serde_json::to_string(ports).unwrap_or_default(),
        );
    }
    annotations
}

/// CreateContainer's config for `c`: its environment, command and args
/// with `$(VAR)` expanded from it, the mounts of its volumes and of its
/// termination message file.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    inputs: ContainerInputs<'_>,
    security: &SecurityDefaults,
    node: NodeResources,
) -> Result<cri::ContainerConfig, ConfigError> {
    let ContainerInputs {
        restart_count,
        target_id,
        image_ref,
        termination_log,
        mounts,
        devices,
        userns,
        env,
        volume_groups,
        stop_signals,
        plugin,
        cpuset,
        cpuset_mems,
    } = inputs;
    let stop_signal = stop_signal(c, stop_signals)?;
    let (name, ns, uid) = name_ns_uid(pod);
    let env: Vec<(String, String)> = plugin.envs.into_iter().chain(env).collect();
    let mounts: Vec<cri::Mount> = plugin.mounts.into_iter().chain(mounts).collect();
    let devices: Vec<cri::Device> = plugin.devices.into_iter().chain(devices).collect();
    let (command, args) = expand_command_and_args(c, &env);
    let envs = env
        .into_iter()
        .map(|(key, value)| cri::KeyValue {
            key,
            value: value.into_bytes(),
        })
        .collect();
    let labels = HashMap::from([
        (keys::POD_NAME.to_owned(), name.to_owned()),
        (keys::POD_NAMESPACE.to_owned(), ns.to_owned()),
        (keys::POD_UID.to_owned(), uid.to_owned()),
        (keys::CONTAINER_NAME.to_owned(), c.name.clone()),
    ]);
    let annotations = container_annotations(pod, c, restart_count, plugin.annotations);
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: restart_count.max(0) as u32,
        }),
        image: Some(cri::ImageSpec {
            image: image_ref.into(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs,
        labels,
        annotations,
        log_path: format!("{}/{}.log", c.name, restart_count),
        devices,
        cdi_devices: plugin
            .cdi_devices
            .into_iter()
            .map(|name| cri::CdiDevice { name })
            .collect(),
        mounts: {
            let mut mounts = mounts;
            mounts.extend(termination_log.map(|host| {
                cri::Mount {
                    container_path: c
                        .termination_message_path
                        .clone()
                        .filter(|p| !p.is_empty())
                        .unwrap_or_else(|| "/dev/termination-log".into()),
                    host_path: host.display().to_string(),
                    ..Default::default()
                }
            }));
            // In a user namespace of its own every mount is idmapped with
            // the pod's mappings, so the node's root owns its files as the
            // pod's root does (upstream's applyPlatformSpecificContainerConfig).
            if userns.mode == cri::NamespaceMode::Pod as i32 {
                for m in &mut mounts {
                    m.uid_mappings.clone_from(&userns.uids);
                    m.gid_mappings.clone_from(&userns.gids);
                }
            }
            mounts
        },
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(cri::LinuxContainerResources {
                cpuset_cpus: cpuset.unwrap_or_default(),
                cpuset_mems: cpuset_mems.unwrap_or_default(),
                ..linux_resources(pod, c, node)?
            }),
            security_context: Some(container_security(
                pod,
                c,
                target_id,
                &volume_groups,
                security,
                userns,
            )?),
        }),
        stop_signal: stop_signal as i32,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: NodeResources = NodeResources {
        memory: 1 << 30,
        cfs_period: Some(100_000),
        swap: SwapPolicy {
            limited: false,
            controller: kubelet_core::swap::SwapController::Unavailable,
            node_memory: 1 << 30,
            node_swap: 0,
        },
    };

    /// The sandbox config of `p` with no resolver, hostname or cgroup parent.
    fn bare_sandbox(p: &Pod) -> cri::PodSandboxConfig {
        sandbox_config(
            p,
            0,
            Path::new("/l"),
            SandboxInputs {
                dns: ResolvConf::default(),
                hostname: String::new(),
                cgroup_parent: String::new(),
                userns: cri::UserNamespace::default(),
            },
            NODE,
        )
    }
    use k8s_openapi::api::core::v1::{
        ContainerPort, EnvVar, PodSecurityContext, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kubelet_core::testing::{self, PodBuilder, resources};

    fn pod() -> Pod {
        PodBuilder::new("web-node1")
            .namespace("default")
            .uid("u1")
            .label("app", "web")
            .with_spec(|s| s.termination_grace_period_seconds = Some(30))
            .container(Container {
                image: Some("busybox:1".into()),
                command: Some(vec!["sh".into()]),
                env: Some(vec![EnvVar {
                    name: "A".into(),
                    value: Some("1".into()),
                    ..Default::default()
                }]),
                ports: Some(vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(8080),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                resources: Some(resources(&[], &[("cpu", "500m"), ("memory", "64Mi")])),
                ..testing::container("c")
            })
            .build()
    }

    #[test]
    fn a_container_without_limits_gets_the_pod_level_ones() {
        let list = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            )
        };
        let mut p = pod();
        let spec = p.spec.as_mut().unwrap();
        spec.resources = Some(ResourceRequirements {
            limits: list(&[("cpu", "200m"), ("memory", "128Mi")]),
            ..Default::default()
        });
        let mut own = spec.containers[0].clone();
        own.resources = Some(ResourceRequirements {
            limits: list(&[("memory", "64Mi")]),
            ..Default::default()
        });
        let mut none = own.clone();
        none.resources = None;
        let cases = [
            ("no limits: the pod's", &none, 20_000, 128 << 20),
            ("its own memory limit wins", &own, 20_000, 64 << 20),
        ];
        for (name, c, quota, memory) in cases {
            let r = linux_resources(&p, c, NODE).unwrap();
            assert_eq!(
                (r.cpu_quota, r.memory_limit_in_bytes),
                (quota, memory),
                "{name}"
            );
        }
        // Without pod-level resources a container without limits has none.
        let r = linux_resources(&pod(), &none, NODE).unwrap();
        assert_eq!((r.cpu_quota, r.memory_limit_in_bytes), (0, 0));
    }

    #[test]
    fn sandbox() {
        let host = ResolvConf {
            servers: vec!["1.1.1.1".into()],
            searches: vec!["a.b".into(), "c".into()],
            options: vec!["ndots:2".into()],
        };
        let cfg = sandbox_config(
            &pod(),
            2,
            Path::new("/var/log/pods"),
            SandboxInputs {
                dns: host,
                hostname: "web-node1".into(),
                cgroup_parent: "/kubepods/besteffort/podu1".into(),
                userns: cri::UserNamespace::default(),
            },
            NODE,
        );
        let md = cfg.metadata.as_ref().unwrap();
        assert_eq!(
            (md.name.as_str(), md.uid.as_str(), md.attempt),
            ("web-node1", "u1", 2)
        );
        assert_eq!(cfg.log_directory, "/var/log/pods/default_web-node1_u1");
        assert_eq!(cfg.hostname, "web-node1");
        assert_eq!(
            cfg.labels.get(keys::POD_UID).map(String::as_str),
            Some("u1")
        );
        assert_eq!(cfg.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(cfg.port_mappings.len(), 1);
        assert_eq!(cfg.port_mappings[0].host_port, 8080);
        let dns = cfg.dns_config.unwrap();
        assert_eq!(dns.servers, ["1.1.1.1"]);
        assert_eq!(dns.searches, ["a.b", "c"]);
        let linux = cfg.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/podu1");
        let ns = linux.security_context.unwrap().namespace_options.unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
    }

    #[test]
    fn fs_group_comes_first_in_the_supplemental_groups() {
        let mut p = pod();
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            fs_group: Some(5),
            supplemental_groups: Some(vec![7, 8]),
            ..Default::default()
        });
        let c = &p.spec.as_ref().unwrap().containers[0];
        let cfg = container_config(
            &p,
            c,
            inputs(Vec::new()),
            &SecurityDefaults::default(),
            NODE,
        )
        .unwrap();
        let sc = cfg.linux.unwrap().security_context.unwrap();
        assert_eq!(sc.supplemental_groups, [5, 7, 8]);
        let sb = bare_sandbox(&p);
        let sc = sb.linux.unwrap().security_context.unwrap();
        assert_eq!(sc.supplemental_groups, [5, 7, 8]);
    }

    #[test]
    fn the_security_context_reaches_the_runtime() {
        use cri::security_profile::ProfileType;
        use k8s_openapi::api::core::v1::{Capabilities, SeccompProfile};
        let mut p = pod();
        let spec = p.spec.as_mut().unwrap();
        spec.security_context = Some(PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        });
        spec.containers[0].security_context = Some(SecurityContext {
            run_as_user: Some(2000),
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_BIND_SERVICE".into()]),
                drop: Some(vec!["CAP_ALL".into()]),
            }),
            allow_privilege_escalation: Some(false),
            ..Default::default()
        });
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let defaults = SecurityDefaults {
            seccomp_root: "/var/lib/kubelet/seccomp".into(),
            seccomp_default: false,
            extra_masked_paths: vec!["/sys/devices/system/cpu/cpu0/thermal_throttle".into()],
        };
        let cfg = container_config(&p, &c, inputs(Vec::new()), &defaults, NODE).unwrap();
        let sc = cfg.linux.unwrap().security_context.unwrap();
        let caps = sc.capabilities.unwrap();
        assert_eq!(caps.add_capabilities, ["NET_BIND_SERVICE"]);
        assert_eq!(caps.drop_capabilities, ["ALL"]);
        assert_eq!(sc.run_as_user.map(|u| u.value), Some(2000));
        assert_eq!(sc.run_as_group.map(|g| g.value), Some(3000));
        assert!(sc.no_new_privs);
        assert_eq!(
            sc.seccomp.map(|s| s.profile_type),
            Some(ProfileType::RuntimeDefault as i32)
        );
        assert!(sc.masked_paths.iter().any(|m| m == "/proc/kcore"));
        assert_eq!(
            sc.masked_paths.last().map(String::as_str),
            Some("/sys/devices/system/cpu/cpu0/thermal_throttle")
        );
        assert!(sc.readonly_paths.iter().any(|m| m == "/proc/sys"));
        assert!(sc.apparmor.is_none());

        // An empty Localhost profile is refused, naming the field.
        let mut c = c;
        c.security_context.as_mut().unwrap().seccomp_profile = Some(SeccompProfile {
            type_: "Localhost".into(),
            localhost_profile: Some(String::new()),
        });
        let e = container_config(&p, &c, inputs(Vec::new()), &defaults, NODE).unwrap_err();
        assert_eq!(e.field, "securityContext.seccompProfile.localhostProfile");

        // The sandbox runs RuntimeDefault whatever the pod asks.
        let sb = bare_sandbox(&p);
        let sc = sb.linux.unwrap().security_context.unwrap();
        assert_eq!(
            sc.seccomp.map(|s| s.profile_type),
            Some(ProfileType::RuntimeDefault as i32)
        );
    }

    #[test]
    fn sandbox_is_privileged_when_a_container_is() {
        use k8s_openapi::api::core::v1::EphemeralContainer;
        let privileged = || {
            Some(SecurityContext {
                privileged: Some(true),
                ..Default::default()
            })
        };
        let init = |p: &mut Pod| {
            let s = p.spec.as_mut().unwrap();
            let mut c = s.containers[0].clone();
            c.name = "init".into();
            c.security_context = privileged();
            s.init_containers = Some(vec![c]);
        };
        let regular = |p: &mut Pod| {
            p.spec.as_mut().unwrap().containers[0].security_context = privileged();
        };
        let ephemeral = |p: &mut Pod| {
            p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![EphemeralContainer {
                name: "debug".into(),
                security_context: privileged(),
                ..Default::default()
            }]);
        };
        let unprivileged = |p: &mut Pod| {
            p.spec.as_mut().unwrap().containers[0].security_context = Some(SecurityContext {
                privileged: Some(false),
                ..Default::default()
            });
        };
        type Edit<'a> = &'a dyn Fn(&mut Pod);
        let cases: [(&str, Edit, bool); 5] = [
            ("no security context", &|_| {}, false),
            ("privileged: false", &unprivileged, false),
            ("an init container", &init, true),
            ("a regular container", &regular, true),
            ("an ephemeral container", &ephemeral, true),
        ];
        for (what, edit, want) in cases {
            let mut p = pod();
            edit(&mut p);
            let cfg = bare_sandbox(&p);
            let sc = cfg.linux.unwrap().security_context.unwrap();
            assert_eq!(sc.privileged, want, "{what}");
        }
    }

    #[test]
    fn host_network_sandbox() {
        let mut p = pod();
        p.spec.as_mut().unwrap().host_network = Some(true);
        let cfg = bare_sandbox(&p);
        let ns = cfg
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
        assert_eq!(cfg.hostname, "");
    }

    #[test]
    fn container() {
        let p = pod();
        let c = &p.spec.as_ref().unwrap().containers[0];
        let cfg = container_config(
            &p,
            c,
            ContainerInputs {
                restart_count: 3,
                target_id: None,
                image_ref: "sha256:abc",
                termination_log: Some(Path::new("/pods/u/containers/a/1")),
                mounts: Vec::new(),
                devices: Vec::new(),
                userns: cri::UserNamespace::default(),
                env: vec![("A".into(), "1".into())],
                volume_groups: Vec::new(),
                stop_signals: false,
                plugin: Default::default(),
                cpuset: None,
                cpuset_mems: None,
            },
            &SecurityDefaults::default(),
            NODE,
        )
        .unwrap();
        assert_eq!(cfg.log_path, "c/3.log");
        assert_eq!(
            (
                cfg.mounts[0].container_path.as_str(),
                cfg.mounts[0].host_path.as_str()
            ),
            ("/dev/termination-log", "/pods/u/containers/a/1"),
            "the termination message file is mounted at the default path"
        );
        assert_eq!(cfg.metadata.as_ref().unwrap().attempt, 3);
        assert_eq!(
            cfg.annotations
                .get(keys::CONTAINER_RESTART_COUNT)
                .map(String::as_str),
            Some("3")
        );
        assert_eq!(
            cfg.annotations.get(keys::CONTAINER_HASH),
            Some(&container_hash(c))
        );
        assert_eq!(
            cfg.labels.get(keys::CONTAINER_NAME).map(String::as_str),
            Some("c")
        );
        assert_eq!(cfg.image.as_ref().unwrap().image, "sha256:abc");
        let r = cfg.linux.unwrap().resources.unwrap();
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (512, 50_000, 100_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        assert_eq!(r.oom_score_adj, -997, "limits only: Guaranteed");
        assert_eq!(cfg.envs[0].key, "A");
        // cpuCFSQuota: false: no quota, no period.
        let no_quota = NodeResources {
            cfs_period: None,
            ..NODE
        };
        let inputs = ContainerInputs {
            restart_count: 0,
            target_id: None,
            image_ref: "sha256:abc",
            termination_log: None,
            mounts: Vec::new(),
            devices: Vec::new(),
            userns: cri::UserNamespace::default(),
            env: Vec::new(),
            volume_groups: Vec::new(),
            stop_signals: false,
            plugin: Default::default(),
            cpuset: None,
            cpuset_mems: None,
        };
        let cfg = container_config(&p, c, inputs, &SecurityDefaults::default(), no_quota).unwrap();
        let r = cfg.linux.unwrap().resources.unwrap();
        assert_eq!((r.cpu_shares, r.cpu_quota, r.cpu_period), (512, 0, 0));
        // The sandbox: the pod's sums, and its overhead apart.
        let mut p = p.clone();
        p.spec.as_mut().unwrap().overhead =
            Some([("cpu".to_owned(), Quantity("100m".into()))].into());
        let sb = bare_sandbox(&p);
        let linux = sb.linux.unwrap();
        let r = linux.resources.unwrap();
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (512, 50_000, 64 << 20)
        );
        let o = linux.overhead.unwrap();
        assert_eq!(
            (o.cpu_shares, o.cpu_quota, o.memory_limit_in_bytes),
            (102, 10_000, 0)
        );
    }

    /// memorySwap: none past the memory limit (v1: memsw equal to it; v2:
    /// memory.swap.max 0), or LimitedSwap's share on v2; nothing without a
    /// swap controller (NODE's).
    #[test]
    fn containers_swap_follows_memory_swap() {
        use kubelet_core::swap::SwapController;
        let mut c = kubelet_core::testing::container("c");
        c.resources = Some(kubelet_core::testing::resources(
            &[("memory", "256Mi")],
            &[("memory", "512Mi")],
        ));
        let p = kubelet_core::testing::PodBuilder::new("p")
            .container(c.clone())
            .build();
        let with = |limited: bool, controller: SwapController| NodeResources {
            swap: SwapPolicy {
                limited,
                controller,
                node_memory: 1 << 30,
                node_swap: 1 << 30,
            },
            ..NODE
        };
        let r = linux_resources(&p, &c, NODE).unwrap();
        assert_eq!((r.memory_swap_limit_in_bytes, r.unified.len()), (0, 0));
        let r = linux_resources(&p, &c, with(false, SwapController::V1)).unwrap();
        assert_eq!(r.memory_swap_limit_in_bytes, 512 << 20);
        let r = linux_resources(&p, &c, with(false, SwapController::V2)).unwrap();
        assert_eq!(
            r.unified.get("memory.swap.max").map(String::as_str),
            Some("0")
        );
        // 256Mi of the node's 1Gi: a quarter of its 1Gi of swap.
        let r = linux_resources(&p, &c, with(true, SwapController::V2)).unwrap();
        assert_eq!(
            r.unified.get("memory.swap.max").map(String::as_str),
            Some("268435456")
        );
        assert_eq!(r.memory_swap_limit_in_bytes, 0);
    }

    #[test]
    fn command_and_args_expand_from_the_environment() {
        let mut p = pod();
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.command = Some(vec!["echo".into(), "$(A)-$(B)".into()]);
        c.args = Some(vec!["$$(A)".into()]);
        let c = c.clone();
        let cfg = container_config(
            &p,
            &c,
            inputs(vec![("A".into(), "1".into())]),
            &SecurityDefaults::default(),
            NODE,
        )
        .unwrap();
        assert_eq!(cfg.command, ["echo", "1-$(B)"]);
        assert_eq!(cfg.args, ["$(A)"]);
        assert_eq!(cfg.envs.len(), 1);
    }

    fn inputs(env: Vec<(String, String)>) -> ContainerInputs<'static> {
        ContainerInputs {
            restart_count: 0,
            target_id: None,
            image_ref: "x",
            termination_log: None,
            mounts: Vec::new(),
            devices: Vec::new(),
            userns: cri::UserNamespace::default(),
            env,
            volume_groups: Vec::new(),
            stop_signals: false,
            plugin: Default::default(),
            cpuset: None,
            cpuset_mems: None,
        }
    }

    /// In a user namespace of the pod's own, every mount (the termination
    /// log's too) carries the pod's ID mappings, for an idmapped mount; on
    /// the node's, none does.
    #[test]
    fn mounts_are_idmapped_in_the_pods_user_namespace() {
        let p = pod();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let mapping = vec![cri::IdMapping {
            host_id: 65536,
            container_id: 0,
            length: 65536,
        }];
        let mounts = |mode: cri::NamespaceMode| {
            let mut inputs = inputs(Vec::new());
            inputs.mounts = vec![cri::Mount {
                container_path: "/vol".into(),
                host_path: "/var/lib/kubelet/pods/u/volumes/v".into(),
                ..Default::default()
            }];
            inputs.termination_log = Some(Path::new("/var/lib/kubelet/pods/u/containers/c/1"));
            inputs.userns = cri::UserNamespace {
                mode: mode as i32,
                uids: mapping.clone(),
                gids: mapping.clone(),
            };
            container_config(&p, &c, inputs, &SecurityDefaults::default(), NODE)
                .unwrap()
                .mounts
        };
        let pod_ns = mounts(cri::NamespaceMode::Pod);
        assert_eq!(pod_ns.len(), 2);
        for m in &pod_ns {
            assert_eq!(
                (&m.uid_mappings, &m.gid_mappings),
                (&mapping, &mapping),
                "{m:?}"
            );
        }
        for m in mounts(cri::NamespaceMode::Node) {
            assert!(
                m.uid_mappings.is_empty() && m.gid_mappings.is_empty(),
                "{m:?}"
            );
        }
    }

    /// lifecycle.stopSignal reaches the runtime with the
    /// ContainerStopSignals gate, under the CRI's names, and is ignored
    /// without it (as upstream); a name the CRI lacks is refused, naming
    /// the field.
    #[test]
    fn a_stop_signal_is_given_with_its_gate() {
        for (name, cri_name) in [
            ("SIGUSR1", "SIGNAL_SIGUSR1"),
            ("SIGKILL", "SIGNAL_SIGKILL"),
            ("SIGRTMIN+1", "SIGNAL_SIGRTMINPLUS1"),
            ("SIGRTMAX-14", "SIGNAL_SIGRTMAXMINUS14"),
            ("SIGRTMAX", "SIGNAL_SIGRTMAX"),
        ] {
            let signal = cri_signal(name).unwrap();
            assert_eq!(signal.as_str_name(), cri_name);
            assert_eq!(api_signal(signal).as_deref(), Some(name));
        }
        assert_eq!(cri_signal("RUNTIME_DEFAULT"), None);
        assert_eq!(cri_signal("SIGFOO"), None);
        assert_eq!(api_signal(cri::Signal::RuntimeDefault), None);

        let mut p = pod();
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
            stop_signal: Some("SIGUSR1".into()),
            ..Default::default()
        });
        let c = c.clone();
        let config = |gate: bool| {
            let mut inputs = inputs(Vec::new());
            inputs.stop_signals = gate;
            container_config(&p, &c, inputs, &SecurityDefaults::default(), NODE)
        };
        assert_eq!(
            config(true).unwrap().stop_signal,
            cri::Signal::Sigusr1 as i32
        );
        assert_eq!(
            config(false).unwrap().stop_signal,
            cri::Signal::RuntimeDefault as i32
        );
        let mut bad = c.clone();
        bad.lifecycle.as_mut().unwrap().stop_signal = Some("SIGFOO".into());
        let mut inputs = inputs(Vec::new());
        inputs.stop_signals = true;
        let e = container_config(&p, &bad, inputs, &SecurityDefaults::default(), NODE).unwrap_err();
        assert_eq!(e.field, "lifecycle.stopSignal");
        assert_eq!(e.message, r#"Unsupported value: "SIGFOO""#);
    }

    /// A PV's gid annotation: its group joins the pod's, once.
    #[test]
    fn volume_groups_follow_the_pods() {
        let mut p = pod();
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            fs_group: Some(5),
            supplemental_groups: Some(vec![7]),
            ..Default::default()
        });
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let inputs = ContainerInputs {
            volume_groups: vec![7, 1234],
            ..inputs(Vec::new())
        };
        let cfg = container_config(&p, &c, inputs, &SecurityDefaults::default(), NODE).unwrap();
        let groups = cfg
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .supplemental_groups;
        assert_eq!(groups, [5, 7, 1234]);
    }

    #[test]
    fn an_ephemeral_container_joins_its_targets_process_namespace() {
        let p = pod();
        let c = &p.spec.as_ref().unwrap().containers[0];
        let pid_ns = |target_id| {
            let inputs = ContainerInputs {
                target_id,
                ..inputs(Vec::new())
            };
            let cfg = container_config(&p, c, inputs, &SecurityDefaults::default(), NODE).unwrap();
            let ns = cfg
                .linux
                .unwrap()
                .security_context
                .unwrap()
                .namespace_options
                .unwrap();
            (ns.pid, ns.target_id)
        };
        assert_eq!(
            pid_ns(Some("c1")),
            (cri::NamespaceMode::Target as i32, "c1".to_owned())
        );
        assert_eq!(
            pid_ns(None),
            (cri::NamespaceMode::Container as i32, String::new())
        );
    }

    #[test]
    fn log_dirs_never_escape() {
        let root = Path::new("/var/log/pods");
        assert!(pod_log_dir(root, "default", "web", "u1").is_some());
        for (ns, name, uid) in [
            ("..", "a", "b"),
            ("a", "../x", "b"),
            ("a", "b", "c/d"),
            ("", "a", "b"),
        ] {
            assert_eq!(pod_log_dir(root, ns, name, uid), None, "{ns} {name} {uid}");
        }
    }
}
