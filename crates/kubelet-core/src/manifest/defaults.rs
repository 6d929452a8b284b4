//! The API server's v1 defaulting of a pod, as a static pod gets it.

use super::*;

/// Applies the defaults the API server's v1 defaulting (`pkg/apis/core/v1/defaults.go`) would
/// apply to a pod: namespace, pod spec fields, containers, ports, probes, handlers,
/// volumes and downward API field selectors. Idempotent.
pub fn apply_pod_defaults(pod: &mut Pod) {
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    set_if_none(&mut spec.dns_policy, "ClusterFirst");
    set_if_none(&mut spec.restart_policy, "Always");
    set_if_none(&mut spec.scheduler_name, "default-scheduler");
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.enable_service_links.get_or_insert(true);

    let host_network = spec.host_network.unwrap_or(false);
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        default_container(container, host_network);
    }
    for volume in spec.volumes.iter_mut().flatten() {
        default_volume(volume);
    }
}

pub(super) fn set_if_none(field: &mut Option<String>, value: &str) {
    if field.as_deref().unwrap_or("").is_empty() {
        *field = Some(value.to_owned());
    }
}

pub(super) fn default_container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.as_deref().unwrap_or("").is_empty() {
        let policy = if image_tag_is_latest(c.image.as_deref().unwrap_or("")) {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.image_pull_policy = Some(policy.into());
    }
    set_if_none(&mut c.termination_message_path, "/dev/termination-log");
    set_if_none(&mut c.termination_message_policy, "File");
    for port in c.ports.iter_mut().flatten() {
        set_if_none(&mut port.protocol, "TCP");
        // Upstream's defaultHostNetworkPorts: with the host's network, the container port
        // is the host port.
        if host_network && port.host_port.unwrap_or(0) == 0 {
            port.host_port = Some(port.container_port);
        }
    }
    // Upstream's SetDefaults_Pod: a limit without a request requests the limit.
    if let Some(resources) = c.resources.as_mut()
        && let Some(limits) = resources.limits.as_ref()
        && !limits.is_empty()
    {
        let requests = resources.requests.get_or_insert_with(BTreeMap::new);
        for (name, limit) in limits {
            requests
                .entry(name.clone())
                .or_insert_with(|| limit.clone());
        }
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lifecycle) = c.lifecycle.as_mut() {
        for handler in [&mut lifecycle.post_start, &mut lifecycle.pre_stop]
            .into_iter()
            .flatten()
        {
            default_handler(handler);
        }
    }
    for env in c.env.iter_mut().flatten() {
        if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            default_field_selector(field_ref);
        }
    }
}

/// Whether an image reference means the tag `latest`: an explicit `:latest`, or neither tag
/// nor digest (upstream's `parsers.ParseImageName` then assumes `latest`).
pub(super) fn image_tag_is_latest(image: &str) -> bool {
    let (name, has_digest) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    // A ':' before the last '/' belongs to a registry host:port, not a tag.
    let last_component = &name[name.rfind('/').map_or(0, |i| i + 1)..];
    match last_component.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => !has_digest,
    }
}

pub(super) fn default_probe(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    if let Some(http) = p.http_get.as_mut() {
        default_http_get(http);
    }
}

pub(super) fn default_handler(h: &mut LifecycleHandler) {
    if let Some(http) = h.http_get.as_mut() {
        default_http_get(http);
    }
}

pub(super) fn default_http_get(h: &mut HTTPGetAction) {
    set_if_none(&mut h.path, "/");
    set_if_none(&mut h.scheme, "HTTP");
}

pub(super) fn default_field_selector(f: &mut ObjectFieldSelector) {
    set_if_none(&mut f.api_version, "v1");
}

/// File mode the API server gives projected files when none is set (0644).
pub(super) const DEFAULT_FILE_MODE: i32 = 0o644;

pub(super) fn default_volume(v: &mut Volume) {
    let no_source = Volume {
        name: v.name.clone(),
        ..Default::default()
    };
    if *v == no_source {
        v.empty_dir = Some(Default::default());
    }
    if let Some(host_path) = v.host_path.as_mut() {
        host_path.type_.get_or_insert_with(String::new);
    }
    if let Some(secret) = v.secret.as_mut() {
        secret.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(config_map) = v.config_map.as_mut() {
        config_map.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(downward) = v.downward_api.as_mut() {
        downward.default_mode.get_or_insert(DEFAULT_FILE_MODE);
        for item in downward.items.iter_mut().flatten() {
            if let Some(field_ref) = item.field_ref.as_mut() {
                default_field_selector(field_ref);
            }
        }
    }
    if let Some(projected) = v.projected.as_mut() {
        projected.default_mode.get_or_insert(DEFAULT_FILE_MODE);
        for source in projected.sources.iter_mut().flatten() {
            if let Some(token) = source.service_account_token.as_mut() {
                token.expiration_seconds.get_or_insert(3600);
            }
            if let Some(downward) = source.downward_api.as_mut() {
                for item in downward.items.iter_mut().flatten() {
                    if let Some(field_ref) = item.field_ref.as_mut() {
                        default_field_selector(field_ref);
                    }
                }
            }
        }
    }
}
