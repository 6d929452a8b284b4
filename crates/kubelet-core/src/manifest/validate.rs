//! The API server's validation of the pod fields the kubelet relies on.

use super::*;

/// Validates a (defaulted) pod the way the API server would for the fields the kubelet relies
/// on. Returns the first problem, naming the field.
pub fn validate_pod(pod: &Pod) -> Result<(), FieldError> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return Err(FieldError::new("metadata.name", "required"));
    }
    check_dns_subdomain("metadata.name", name)?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    if namespace.is_empty() {
        return Err(FieldError::new("metadata.namespace", "required"));
    }
    check_dns_label("metadata.namespace", namespace)?;
    validate_labels_and_annotations(pod)?;

    let Some(spec) = pod.spec.as_ref() else {
        return Err(FieldError::new("spec", "required"));
    };
    if spec.containers.is_empty() {
        return Err(FieldError::new(
            "spec.containers",
            "required: a pod needs at least one container",
        ));
    }
    if let Some(policy) = spec.restart_policy.as_deref() {
        check_one_of(
            "spec.restartPolicy",
            policy,
            &["Always", "OnFailure", "Never"],
        )?;
    }
    if let Some(grace) = spec.termination_grace_period_seconds
        && grace < 0
    {
        return Err(FieldError::new(
            "spec.terminationGracePeriodSeconds",
            format!("{grace}: must be greater than or equal to 0"),
        ));
    }

    let mut volumes = BTreeSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let at = format!("spec.volumes[{i}].name");
        if v.name.is_empty() {
            return Err(FieldError::new(at, "required"));
        }
        check_dns_label(&at, &v.name)?;
        if !volumes.insert(v.name.as_str()) {
            return Err(FieldError::new(
                at,
                format!("Duplicate value: {:?}", v.name),
            ));
        }
    }

    let mut names = BTreeSet::new();
    let lists = [
        (
            "spec.initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("spec.containers", spec.containers.as_slice()),
    ];
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            let at = format!("{list}[{i}]");
            validate_container(&at, c)?;
            if list == "spec.containers" {
                validate_restart_policy(&at, c)?;
            }
            if !names.insert(c.name.as_str()) {
                return Err(FieldError::new(
                    format!("{at}.name"),
                    format!("duplicate container name {:?}", c.name),
                ));
            }
        }
    }
    Ok(())
}

/// A regular container's own restartPolicy and restartPolicyRules
/// (upstream's validateContainerRestartPolicy with ContainerRestartRules,
/// RestartAllContainers off).
pub(super) fn validate_restart_policy(at: &str, c: &Container) -> Result<(), FieldError> {
    let rules = c.restart_policy_rules.as_deref().unwrap_or(&[]);
    let policy_at = format!("{at}.restartPolicy");
    match c.restart_policy.as_deref() {
        Some(policy) => check_one_of(&policy_at, policy, &["Always", "Never", "OnFailure"])?,
        None if rules.is_empty() => return Ok(()),
        None => {
            return Err(FieldError::new(
                policy_at,
                "required: must specify restartPolicy when restart rules are used",
            ));
        }
    }
    let too_many = |at: String, n: usize, max: usize| {
        FieldError::new(at, format!("{n}: must have at most {max} items"))
    };
    if rules.len() > 20 {
        return Err(too_many(
            format!("{at}.restartPolicyRules"),
            rules.len(),
            20,
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let rule_at = format!("{at}.restartPolicyRules[{i}]");
        check_one_of(&format!("{rule_at}.action"), &rule.action, &["Restart"])?;
        let Some(on) = &rule.exit_codes else {
            return Err(FieldError::new(
                format!("{rule_at}.exitCodes"),
                "required: must be specified",
            ));
        };
        check_one_of(
            &format!("{rule_at}.exitCodes.operator"),
            &on.operator,
            &["In", "NotIn"],
        )?;
        let values = on.values.as_ref().map_or(0, Vec::len);
        if values > 255 {
            return Err(too_many(format!("{rule_at}.exitCodes.values"), values, 255));
        }
    }
    Ok(())
}

pub(super) fn validate_container(at: &str, c: &Container) -> Result<(), FieldError> {
    if c.name.is_empty() {
        return Err(FieldError::new(format!("{at}.name"), "required"));
    }
    check_dns_label(&format!("{at}.name"), &c.name)?;
    if c.image.as_deref().unwrap_or("").trim().is_empty() {
        return Err(FieldError::new(format!("{at}.image"), "required"));
    }
    if let Some(policy) = c.image_pull_policy.as_deref() {
        check_one_of(
            &format!("{at}.imagePullPolicy"),
            policy,
            &["Always", "IfNotPresent", "Never"],
        )?;
    }
    for (j, port) in c.ports.iter().flatten().enumerate() {
        let pat = format!("{at}.ports[{j}]");
        if !(1..=65535).contains(&port.container_port) {
            return Err(FieldError::new(
                format!("{pat}.containerPort"),
                format!("{}: must be between 1 and 65535", port.container_port),
            ));
        }
        if let Some(host_port) = port.host_port
            && !(0..=65535).contains(&host_port)
        {
            return Err(FieldError::new(
                format!("{pat}.hostPort"),
                format!("{host_port}: must be between 0 and 65535"),
            ));
        }
        if let Some(protocol) = port.protocol.as_deref() {
            check_one_of(
                &format!("{pat}.protocol"),
                protocol,
                &["TCP", "UDP", "SCTP"],
            )?;
        }
    }
    if let Some(resources) = c.resources.as_ref() {
        let at = format!("{at}.resources");
        type Parser = fn(
            &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        ) -> Result<i64, quantity::QuantityError>;
        let parsers: [(&str, Parser); 2] = [
            ("cpu", quantity::parse_cpu_millis),
            ("memory", quantity::parse_bytes),
        ];
        for (resource, parse) in parsers {
            let mut amounts = [None, None];
            for (k, (kind, list)) in [
                ("limits", &resources.limits),
                ("requests", &resources.requests),
            ]
            .into_iter()
            .enumerate()
            {
                let Some(q) = list.as_ref().and_then(|l| l.get(resource)) else {
                    continue;
                };
                let field = format!("{at}.{kind}[{resource}]");
                let amount = parse(q).map_err(|e| FieldError::new(&field, e.to_string()))?;
                if amount < 0 {
                    return Err(FieldError::new(
                        &field,
                        format!("{:?}: must be greater than or equal to 0", q.0),
                    ));
                }
                amounts[k] = Some((amount, q));
            }
            if let [Some((limit, limit_q)), Some((request, request_q))] = amounts
                && request > limit
            {
                return Err(FieldError::new(
                    format!("{at}.requests[{resource}]"),
                    format!(
                        "{:?}: must be less than or equal to {resource} limit of {:?}",
                        request_q.0, limit_q.0
                    ),
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn check_one_of(field: &str, value: &str, allowed: &[&str]) -> Result<(), FieldError> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("unsupported value {value:?}: supported values: {allowed:?}"),
        ))
    }
}

/// Upstream's `TotalAnnotationSizeLimitB`: the most bytes a pod's annotation keys and values
/// may add up to.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 << 10;

/// Upstream's ValidateObjectMeta for what a static pod's metadata can carry: label keys and
/// values (ValidateLabels) and annotation keys and their total size (ValidateAnnotations).
pub(super) fn validate_labels_and_annotations(pod: &Pod) -> Result<(), FieldError> {
    const LABELS: &str = "metadata.labels";
    const ANNOTATIONS: &str = "metadata.annotations";
    for (key, value) in pod.metadata.labels.iter().flatten() {
        check(LABELS, key, is_qualified_name(key))?;
        check(LABELS, value, is_valid_label_value(value))?;
    }
    let annotations = pod.metadata.annotations.iter().flatten();
    let mut total = 0usize;
    for (key, value) in annotations {
        check(ANNOTATIONS, key, is_qualified_name(&key.to_lowercase()))?;
        total = total.saturating_add(key.len()).saturating_add(value.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        return Err(FieldError::new(
            ANNOTATIONS,
            format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }
    Ok(())
}

/// Upstream's `field.Invalid`: the value and what is wrong with it (each of upstream's
/// messages for it, comma-separated).
pub(super) fn check(field: &str, value: &str, problems: Vec<String>) -> Result<(), FieldError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("Invalid value: {value:?}: {}", problems.join(", ")),
        ))
    }
}

/// RFC 1123 label: at most 63 characters, lowercase alphanumerics and '-', alphanumeric ends.
pub(super) fn check_dns_label(field: &str, value: &str) -> Result<(), FieldError> {
    check(field, value, is_dns1123_label(value))
}

/// RFC 1123 subdomain: at most 253 characters, '.'-separated labels.
pub(super) fn check_dns_subdomain(field: &str, value: &str) -> Result<(), FieldError> {
    check(field, value, is_dns1123_subdomain(value))
}
