//! A container's environment (upstream's makeEnvironmentVariables and
//! `envvars`): envFrom first (later sources over earlier), then env in
//! order (values with `$(VAR)` expanded against what came before and the
//! service variables; valueFrom resolved), then the service variables not
//! already set. Pure: the caller reads the ConfigMaps, Secrets and
//! Services; [`references`] says which.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvFromSource, EnvVar, EnvVarSource, Pod, Secret, Service,
};

use crate::downward::{Allocatable, container_resource_value, field_value, resource_value};
use crate::expansion::expand;
use crate::failure::Cause;

/// What reading a referenced ConfigMap or Secret gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Fetched<T> {
    Found(Arc<T>),
    /// The API has none (its message, as the API server words it:
    /// `configmaps "x" not found`).
    NotFound(String),
    /// It could not be read now (a retry may help).
    Failed(String),
}

/// What a container's environment is made from.
pub struct EnvSources<'a> {
    /// The pod's IPs (the node's for a hostNetwork pod).
    pub pod_ips: &'a [String],
    /// The node's IPs.
    pub host_ips: &'a [String],
    /// The service variables ([`service_env`]).
    pub services: &'a BTreeMap<String, String>,
    /// What a limit not set reads as.
    pub allocatable: Allocatable,
    pub config_maps: &'a HashMap<String, Fetched<ConfigMap>>,
    pub secrets: &'a HashMap<String, Fetched<Secret>>,
    /// The values the container's fileKeyRefs read ([`file_key_refs`]).
    pub env_files: &'a HashMap<FileKey, EnvFileValue>,
}

/// What a fileKeyRef names: a key of an environment file at a path in one
/// of the pod's volumes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub volume: String,
    pub path: String,
    pub key: String,
}

/// A fileKeyRef read: the value (empty when the file does not set the
/// key, which upstream does not tell apart) and the file's path on the
/// host, or why it could not be read.
pub type EnvFileValue = Result<(String, String), EnvError>;

/// The environment files `c`'s env reads.
pub fn file_key_refs(c: &Container) -> Vec<FileKey> {
    c.env
        .iter()
        .flatten()
        .filter_map(|e| e.value_from.as_ref()?.file_key_ref.as_ref())
        .map(|f| FileKey {
            volume: f.volume_name.clone(),
            path: f.path.clone(),
            key: f.key.clone(),
        })
        .collect()
}

/// Why the environment could not be made: upstream's message (the
/// container's CreateContainerConfigError), and whether only a change of
/// the pod or of the objects it names helps.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EnvError {
    pub message: String,
    /// What would clear it: a missing object or key (its watch wakes the
    /// pod), a field that cannot be given, or an object not read yet.
    pub cause: Cause,
}

impl EnvError {
    fn unsupported(message: String) -> Self {
        EnvError {
            message,
            cause: Cause::Unsupported,
        }
    }

    fn missing(message: String) -> Self {
        EnvError {
            message,
            cause: Cause::MissingObject,
        }
    }
}

/// The ConfigMaps and Secrets `c`'s env and envFrom name.
pub fn references(c: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut refs = Default::default();
    add_references(&mut refs, c.env.as_deref(), c.env_from.as_deref());
    refs
}

/// Add the ConfigMaps and Secrets an env and envFrom name to `refs`.
fn add_references(
    (cms, secrets): &mut (BTreeSet<String>, BTreeSet<String>),
    env: Option<&[EnvVar]>,
    env_from: Option<&[EnvFromSource]>,
) {
    for f in env_from.into_iter().flatten() {
        if let Some(r) = &f.config_map_ref {
            cms.insert(r.name.clone());
        }
        if let Some(r) = &f.secret_ref {
            secrets.insert(r.name.clone());
        }
    }
    for src in env
        .into_iter()
        .flatten()
        .filter_map(|e| e.value_from.as_ref())
    {
        if let Some(r) = &src.config_map_key_ref {
            cms.insert(r.name.clone());
        }
        if let Some(r) = &src.secret_key_ref {
            secrets.insert(r.name.clone());
        }
    }
}

/// [`references`] of every container of the pod (init, regular, ephemeral).
pub fn pod_references(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut refs = Default::default();
    let Some(spec) = pod.spec.as_ref() else {
        return refs;
    };
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        add_references(&mut refs, c.env.as_deref(), c.env_from.as_deref());
    }
    for e in spec.ephemeral_containers.iter().flatten() {
        add_references(&mut refs, e.env.as_deref(), e.env_from.as_deref());
    }
    refs
}

/// Upstream's getServiceEnvVarMap over FromServices: the variables of the
/// `kubernetes` Service of `default` (always), and with service links of
/// every Service of the pod's namespace; Services without a cluster IP
/// are skipped.
pub fn service_env<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
    for s in services {
        let Some(spec) = s.spec.as_ref() else {
            continue;
        };
        let ip = spec.cluster_ip.as_deref().unwrap_or("");
        if ip.is_empty() || ip == "None" || spec.ports.as_ref().is_none_or(|p| p.is_empty()) {
            continue;
        }
        let name = s.metadata.name.as_deref().unwrap_or("");
        let ns = s.metadata.namespace.as_deref().unwrap_or("");
        if ns == "default" && name == "kubernetes" {
            chosen.entry(name).or_insert(s);
        } else if ns == namespace && enable_service_links {
            chosen.insert(name, s);
        }
    }
    let mut out = BTreeMap::new();
    for (name, s) in chosen {
        let spec = s.spec.as_ref().expect("filtered above");
        let ip = spec.cluster_ip.as_deref().unwrap_or("");
        let ports = spec.ports.as_deref().unwrap_or_default();
        let prefix = name.replace('-', "_").to_uppercase();
        out.insert(format!("{prefix}_SERVICE_HOST"), ip.to_owned());
        out.insert(format!("{prefix}_SERVICE_PORT"), ports[0].port.to_string());
        for p in ports {
            if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
                let n = n.replace('-', "_").to_uppercase();
                out.insert(format!("{prefix}_SERVICE_PORT_{n}"), p.port.to_string());
            }
        }
        // Docker's link variables.
        let host_port = |port: i32| {
            if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            }
        };
        for (i, p) in ports.iter().enumerate() {
            let proto = p
                .protocol
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            let url = format!("{}://{}", proto.to_lowercase(), host_port(p.port));
            if i == 0 {
                out.insert(format!("{prefix}_PORT"), url.clone());
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.insert(format!("{pp}_PROTO"), proto.to_lowercase());
            out.insert(format!("{pp}_PORT"), p.port.to_string());
            out.insert(format!("{pp}_ADDR"), ip.to_owned());
            out.insert(pp, url);
        }
    }
    out
}

/// An insertion-ordered map: the variables in the order first set.
#[derive(Default)]
struct Ordered {
    vars: Vec<(String, String)>,
    at: HashMap<String, usize>,
}

impl Ordered {
    fn set(&mut self, k: String, v: String) {
        match self.at.get(&k) {
            Some(&i) => self.vars[i].1 = v,
            None => {
                self.at.insert(k.clone(), self.vars.len());
                self.vars.push((k, v));
            }
        }
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.at.get(k).map(|&i| self.vars[i].1.as_str())
    }
}

/// What an object lookup gives to the environment: the object, or skip
/// (absent and optional), or the error.
fn lookup<'a, T>(
    objects: &'a HashMap<String, Fetched<T>>,
    kind: &str,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<Option<&'a T>, EnvError> {
    match objects.get(name) {
        Some(Fetched::Found(o)) => Ok(Some(o)),
        Some(Fetched::NotFound(_)) if optional => Ok(None),
        Some(Fetched::NotFound(m)) => Err(EnvError::missing(m.clone())),
        Some(Fetched::Failed(m)) => Err(EnvError {
            message: m.clone(),
            cause: Cause::Transient,
        }),
        None => Err(EnvError {
            message: format!("couldn't get {kind} {namespace}/{name}, not read"),
            cause: Cause::Transient,
        }),
    }
}

/// Container `c`'s environment, in order.
pub fn container_env(
    pod: &Pod,
    c: &Container,
    src: &EnvSources,
) -> Result<Vec<(String, String)>, EnvError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env = Ordered::default();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        if let Some(r) = &from.config_map_ref {
            let optional = r.optional.unwrap_or(false);
            if let Some(cm) = lookup(src.config_maps, "configMap", ns, &r.name, optional)? {
                for (k, v) in cm.data.iter().flatten() {
                    env.set(format!("{prefix}{k}"), v.clone());
                }
            }
        } else if let Some(r) = &from.secret_ref {
            let optional = r.optional.unwrap_or(false);
            if let Some(s) = lookup(src.secrets, "secret", ns, &r.name, optional)? {
                for (k, v) in s.data.iter().flatten() {
                    env.set(
                        format!("{prefix}{k}"),
                        String::from_utf8_lossy(&v.0).into_owned(),
                    );
                }
            }
        }
    }
    for e in c.env.iter().flatten() {
        let literal = e.value.as_deref().unwrap_or("");
        let value = if !literal.is_empty() {
            expand(literal, |k| {
                env.get(k)
                    .or_else(|| src.services.get(k).map(String::as_str))
                    .map(str::to_owned)
            })
        } else if let Some(from) = &e.value_from {
            match value_from(pod, c, from, src, ns)? {
                Some(v) => v,
                None => continue,
            }
        } else {
            String::new()
        };
        env.set(e.name.clone(), value);
    }
    let mut vars = env.vars;
    for (k, v) in src.services {
        if !env.at.contains_key(k) {
            vars.push((k.clone(), v.clone()));
        }
    }
    Ok(vars)
}

/// One valueFrom; None when an optional reference is absent.
fn value_from(
    pod: &Pod,
    c: &Container,
    from: &EnvVarSource,
    src: &EnvSources,
    ns: &str,
) -> Result<Option<String>, EnvError> {
    if let Some(f) = &from.field_ref {
        return pod_field(pod, f.api_version.as_deref(), &f.field_path, src).map(Some);
    }
    if let Some(r) = &from.resource_field_ref {
        let named = r.container_name.as_deref().is_some_and(|n| !n.is_empty());
        let v = if named {
            resource_value(pod, r, &src.allocatable)
        } else {
            container_resource_value(c, r, &src.allocatable)
        };
        return v
            .map(Some)
            .map_err(|e| EnvError::unsupported(e.to_string()));
    }
    if let Some(r) = &from.config_map_key_ref {
        let optional = r.optional.unwrap_or(false);
        let Some(cm) = lookup(src.config_maps, "configMap", ns, &r.name, optional)? else {
            return Ok(None);
        };
        return match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(EnvError::missing(format!(
                "couldn't find key {} in ConfigMap {ns}/{}",
                r.key, r.name
            ))),
        };
    }
    if let Some(r) = &from.secret_key_ref {
        let optional = r.optional.unwrap_or(false);
        let Some(s) = lookup(src.secrets, "secret", ns, &r.name, optional)? else {
            return Ok(None);
        };
        return match s.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Ok(Some(String::from_utf8_lossy(&v.0).into_owned())),
            None if optional => Ok(None),
            None => Err(EnvError::missing(format!(
                "couldn't find key {} in Secret {ns}/{}",
                r.key, r.name
            ))),
        };
    }
    if let Some(f) = &from.file_key_ref {
        let key = FileKey {
            volume: f.volume_name.clone(),
            path: f.path.clone(),
            key: f.key.clone(),
        };
        let (value, path) = match src.env_files.get(&key) {
            Some(Ok(read)) => read,
            Some(Err(e)) => return Err(e.clone()),
            None => {
                return Err(EnvError {
                    message: format!("environment variable file {:?} not read", f.path),
                    cause: Cause::Transient,
                });
            }
        };
        return match (value.is_empty(), f.optional.unwrap_or(false)) {
            (false, _) => Ok(Some(value.clone())),
            (true, true) => Ok(None),
            // The file may still be written: tried again.
            (true, false) => Err(EnvError {
                message: format!(
                    "environment variable key {:?} not found in file {path:?}",
                    f.key
                ),
                cause: Cause::Transient,
            }),
        };
    }
    Ok(Some(String::new()))
}

/// A fieldRef's value (upstream's podFieldSelectorRuntimeValue, after
/// ConvertDownwardAPIFieldLabel): only `v1`, only the fields the downward
/// API names.
fn pod_field(
    pod: &Pod,
    api_version: Option<&str>,
    path: &str,
    src: &EnvSources,
) -> Result<String, EnvError> {
    let version = api_version.filter(|v| !v.is_empty()).unwrap_or("v1");
    if version != "v1" {
        return Err(EnvError::unsupported(format!(
            "unsupported pod version: {version}"
        )));
    }
    if let Some((head, _)) = path.split_once('[') {
        if !matches!(head, "metadata.annotations" | "metadata.labels") {
            return Err(EnvError::unsupported(format!(
                "field label does not support subscript: {path}"
            )));
        }
        return field_value(pod, path).map_err(|e| EnvError::unsupported(e.to_string()));
    }
    let spec = pod.spec.as_ref();
    let host_ip = || {
        src.host_ips.first().cloned().ok_or_else(|| EnvError {
            message: "failed to get node addresses: none known".to_owned(),
            cause: Cause::Transient,
        })
    };
    match path {
        "spec.nodeName" | "spec.host" => {
            Ok(spec.and_then(|s| s.node_name.clone()).unwrap_or_default())
        }
        "spec.serviceAccountName" => Ok(spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default()),
        "status.hostIP" => host_ip(),
        "status.hostIPs" => host_ip().map(|_| src.host_ips.join(",")),
        "status.podIP" => Ok(src.pod_ips.first().cloned().unwrap_or_default()),
        "status.podIPs" => Ok(src.pod_ips.join(",")),
        "metadata.annotations"
        | "metadata.labels"
        | "metadata.name"
        | "metadata.namespace"
        | "metadata.uid"
        | "spec.restartPolicy"
        | "spec.schedulerName"
        | "status.phase" => {
            field_value(pod, path).map_err(|e| EnvError::unsupported(e.to_string()))
        }
        _ => Err(EnvError::unsupported(format!(
            "field label not supported: {path}"
        ))),
    }
}

/// Upstream's ExpandContainerCommandAndArgs: `$(VAR)` in command and args
/// from the container's final environment.
pub fn expand_command_and_args(
    c: &Container,
    env: &[(String, String)],
) -> (Vec<String>, Vec<String>) {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let exp = |items: &Option<Vec<String>>| -> Vec<String> {
        items
            .iter()
            .flatten()
            .map(|s| expand(s, |k| map.get(k).map(|v| (*v).to_owned())))
            .collect()
    };
    (exp(&c.command), exp(&c.args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, ObjectFieldSelector, ResourceFieldSelector,
        ResourceRequirements, SecretEnvSource, SecretKeySelector, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(c: Container) -> Pod {
        PodBuilder::new("web")
            .namespace("shop")
            .uid("u-1")
            .label("app", "web")
            .node_name("node-1")
            .with_spec(|s| s.service_account_name = Some("sa".into()))
            .container(c)
            .build()
    }

    fn lit(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn from(name: &str, src: EnvVarSource) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(src),
        }
    }

    fn field(path: &str) -> EnvVarSource {
        EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: path.into(),
            }),
            ..Default::default()
        }
    }

    fn cm(data: &[(&str, &str)]) -> Fetched<ConfigMap> {
        Fetched::Found(Arc::new(ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    struct World {
        services: BTreeMap<String, String>,
        cms: HashMap<String, Fetched<ConfigMap>>,
        secrets: HashMap<String, Fetched<Secret>>,
        files: HashMap<FileKey, EnvFileValue>,
    }

    fn file_key(key: &str) -> FileKey {
        FileKey {
            volume: "vars".into(),
            path: "env.sh".into(),
            key: key.into(),
        }
    }

    impl World {
        fn new() -> Self {
            let secret = Secret {
                data: Some(BTreeMap::from([(
                    "pw".into(),
                    ByteString(b"s3cret".to_vec()),
                )])),
                ..Default::default()
            };
            World {
                services: BTreeMap::from([("KUBERNETES_SERVICE_HOST".into(), "10.96.0.1".into())]),
                cms: HashMap::from([
                    ("conf".into(), cm(&[("mode", "fast"), ("level", "3")])),
                    (
                        "gone".into(),
                        Fetched::NotFound("configmaps \"gone\" not found".into()),
                    ),
                    (
                        "later".into(),
                        Fetched::Failed("failed to sync configmap cache".into()),
                    ),
                ]),
                secrets: HashMap::from([("creds".into(), Fetched::Found(Arc::new(secret)))]),
                files: HashMap::from([
                    (file_key("MODE"), Ok(("fast".into(), "/p/env.sh".into()))),
                    (file_key("NONE"), Ok((String::new(), "/p/env.sh".into()))),
                    (
                        file_key("BAD"),
                        Err(EnvError {
                            message: "couldn't parse env file".into(),
                            cause: Cause::Transient,
                        }),
                    ),
                ]),
            }
        }
        fn env(&self, c: Container) -> Result<Vec<(String, String)>, EnvError> {
            let src = EnvSources {
                pod_ips: &["10.1.0.7".into()],
                host_ips: &["192.168.1.5".into()],
                services: &self.services,
                allocatable: Allocatable {
                    cpu_millis: 2000,
                    memory_bytes: 4 << 30,
                    ephemeral_storage_bytes: 0,
                },
                config_maps: &self.cms,
                secrets: &self.secrets,
                env_files: &self.files,
            };
            container_env(&pod(c.clone()), &c, &src)
        }
    }

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_kind_of_value_resolves_as_upstream() {
        let cpu = EnvVarSource {
            resource_field_ref: Some(ResourceFieldSelector {
                resource: "limits.cpu".into(),
                divisor: Some(Quantity("250m".into())),
                container_name: None,
            }),
            ..Default::default()
        };
        let mem = EnvVarSource {
            resource_field_ref: Some(ResourceFieldSelector {
                resource: "limits.memory".into(),
                divisor: Some(Quantity("1Mi".into())),
                container_name: Some("c".into()),
            }),
            ..Default::default()
        };
        let key = |name: &str, key: &str, optional: bool| EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: name.into(),
                key: key.into(),
                optional: Some(optional),
            }),
            ..Default::default()
        };
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([("memory".into(), Quantity("64Mi".into()))])),
                ..Default::default()
            }),
            env: Some(vec![
                from("NAME", field("metadata.name")),
                from("NS", field("metadata.namespace")),
                from("UID", field("metadata.uid")),
                from("APP", field("metadata.labels['app']")),
                from("NODE", field("spec.nodeName")),
                from("SA", field("spec.serviceAccountName")),
                from("HOST_IP", field("status.hostIP")),
                from("HOST_IPS", field("status.hostIPs")),
                from("POD_IP", field("status.podIP")),
                from("POD_IPS", field("status.podIPs")),
                from("CPU", cpu),
                from("MEM", mem),
                from("MODE", key("conf", "mode", false)),
                from("OPT_KEY", key("conf", "nope", true)),
                from("OPT_CM", key("gone", "x", true)),
                from(
                    "PW",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "creds".into(),
                            key: "pw".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
            ]),
            ..Default::default()
        };
        assert_eq!(
            World::new().env(c).unwrap(),
            vars(&[
                ("NAME", "web"),
                ("NS", "shop"),
                ("UID", "u-1"),
                ("APP", "web"),
                ("NODE", "node-1"),
                ("SA", "sa"),
                ("HOST_IP", "192.168.1.5"),
                ("HOST_IPS", "192.168.1.5"),
                ("POD_IP", "10.1.0.7"),
                ("POD_IPS", "10.1.0.7"),
                // An unset cpu limit is the node's 2 cores, in quarters.
                ("CPU", "8"),
                ("MEM", "64"),
                ("MODE", "fast"),
                ("PW", "s3cret"),
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ])
        );
    }

    #[test]
    fn file_key_refs_as_upstream() {
        let from_file = |name: &str, key: &str, optional: Option<bool>| EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                file_key_ref: Some(k8s_openapi::api::core::v1::FileKeySelector {
                    volume_name: "vars".into(),
                    path: "env.sh".into(),
                    key: key.into(),
                    optional,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let w = World::new();
        let c = |env: Vec<EnvVar>| Container {
            name: "c".into(),
            env: Some(env),
            ..Default::default()
        };
        let got = w
            .env(c(vec![
                from_file("M", "MODE", None),
                from_file("N", "NONE", Some(true)),
            ]))
            .unwrap();
        assert_eq!(got[0], ("M".to_string(), "fast".to_string()));
        assert!(
            !got.iter().any(|(k, _)| k == "N"),
            "optional and absent: skipped"
        );
        assert_eq!(
            file_key_refs(&c(vec![from_file("M", "MODE", None)])),
            [file_key("MODE")]
        );
        let err = |env| w.env(c(env)).unwrap_err();
        let e = err(vec![from_file("N", "NONE", None)]);
        assert_eq!(
            e.message,
            "environment variable key \"NONE\" not found in file \"/p/env.sh\""
        );
        assert_eq!(e.cause, Cause::Transient, "the file may still be written");
        assert_eq!(
            err(vec![from_file("B", "BAD", None)]).message,
            "couldn't parse env file"
        );
        assert_eq!(
            err(vec![from_file("U", "UNREAD", None)]).cause,
            Cause::Transient
        );
    }

    #[test]
    fn env_from_then_env_with_expansion() {
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "conf".into(),
                        optional: None,
                    }),
                    prefix: Some("P_".into()),
                    secret_ref: None,
                },
                EnvFromSource {
                    secret_ref: Some(SecretEnvSource {
                        name: "creds".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "gone".into(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                },
            ]),
            env: Some(vec![
                lit("P_mode", "slow"),
                lit("A", "x-$(P_mode)"),
                lit("B", "$(A)/$(KUBERNETES_SERVICE_HOST)/$(LATER)/$$(A)"),
                lit("LATER", "z"),
                lit("EMPTY", ""),
            ]),
            command: Some(vec!["echo".into(), "$(B)".into()]),
            args: Some(vec!["$(LATER)".into(), "$(NONE)".into(), "$$(A)".into()]),
            ..Default::default()
        };
        let env = World::new().env(c.clone()).unwrap();
        assert_eq!(
            env,
            vars(&[
                // Secret and ConfigMap maps are sorted by key, as the API keeps them.
                ("P_level", "3"),
                ("P_mode", "slow"),
                ("pw", "s3cret"),
                ("A", "x-slow"),
                ("B", "x-slow/10.96.0.1/$(LATER)/$(A)"),
                ("LATER", "z"),
                ("EMPTY", ""),
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ])
        );
        let (command, args) = expand_command_and_args(&c, &env);
        assert_eq!(command, ["echo", "x-slow/10.96.0.1/$(LATER)/$(A)"]);
        assert_eq!(args, ["z", "$(NONE)", "$(A)"]);
    }

    #[test]
    fn expansion_is_one_pass_in_order_so_cycles_stay_literal() {
        let c = Container {
            name: "c".into(),
            env: Some(vec![
                lit("A", "$(B)"),
                lit("B", "$(A)"),
                lit("C", "$(C)x"),
                lit("D", "$(A)$(B)"),
            ]),
            ..Default::default()
        };
        let env = World::new().env(c).unwrap();
        assert_eq!(
            &env[..4],
            vars(&[
                ("A", "$(B)"),
                ("B", "$(B)"),
                ("C", "$(C)x"),
                ("D", "$(B)$(B)")
            ])
        );
    }

    #[test]
    fn bad_references_say_what_upstream_says() {
        let w = World::new();
        let one = |src: EnvVarSource| Container {
            name: "c".into(),
            env: Some(vec![from("V", src)]),
            ..Default::default()
        };
        let key = |name: &str, key: &str| EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: name.into(),
                key: key.into(),
                optional: None,
            }),
            ..Default::default()
        };
        let versioned = EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v2".into()),
                field_path: "metadata.name".into(),
            }),
            ..Default::default()
        };
        let other = EnvVarSource {
            resource_field_ref: Some(ResourceFieldSelector {
                resource: "limits.cpu".into(),
                container_name: Some("nope".into()),
                divisor: None,
            }),
            ..Default::default()
        };
        let cases: Vec<(EnvVarSource, &str, Cause)> = vec![
            (
                key("gone", "x"),
                "configmaps \"gone\" not found",
                Cause::MissingObject,
            ),
            (
                key("conf", "x"),
                "couldn't find key x in ConfigMap shop/conf",
                Cause::MissingObject,
            ),
            (
                key("later", "x"),
                "failed to sync configmap cache",
                Cause::Transient,
            ),
            (
                field("spec.nodeNme"),
                "field label not supported: spec.nodeNme",
                Cause::Unsupported,
            ),
            (
                field("spec.nodeName['x']"),
                "field label does not support subscript: spec.nodeName['x']",
                Cause::Unsupported,
            ),
            (
                field("status.phase"),
                "unsupported fieldPath: status.phase",
                Cause::Unsupported,
            ),
            (versioned, "unsupported pod version: v2", Cause::Unsupported),
            (other, "container nope not found", Cause::Unsupported),
        ];
        for (src, message, cause) in cases {
            assert_eq!(
                w.env(one(src)),
                Err(EnvError {
                    message: message.into(),
                    cause
                })
            );
        }
    }

    #[test]
    fn service_variables_as_upstream() {
        let svc = |ns: &str, name: &str, ip: &str, ports: Vec<ServicePort>| Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(ports),
                ..Default::default()
            }),
            ..Default::default()
        };
        let port = |name: Option<&str>, port: i32, proto: Option<&str>| ServicePort {
            name: name.map(str::to_owned),
            port,
            protocol: proto.map(str::to_owned),
            ..Default::default()
        };
        let all = [
            svc(
                "default",
                "kubernetes",
                "10.96.0.1",
                vec![port(Some("https"), 443, Some("TCP"))],
            ),
            svc(
                "shop",
                "my-db",
                "10.96.0.9",
                vec![
                    port(None, 5432, None),
                    port(Some("metrics-x"), 9187, Some("UDP")),
                ],
            ),
            svc("shop", "headless", "None", vec![port(None, 80, None)]),
            svc("other", "far", "10.96.0.8", vec![port(None, 80, None)]),
        ];
        let linked = service_env(&all, "shop", true);
        let want = [
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("MY_DB_PORT", "tcp://10.96.0.9:5432"),
            ("MY_DB_PORT_5432_TCP", "tcp://10.96.0.9:5432"),
            ("MY_DB_PORT_5432_TCP_ADDR", "10.96.0.9"),
            ("MY_DB_PORT_5432_TCP_PORT", "5432"),
            ("MY_DB_PORT_5432_TCP_PROTO", "tcp"),
            ("MY_DB_PORT_9187_UDP", "udp://10.96.0.9:9187"),
            ("MY_DB_PORT_9187_UDP_ADDR", "10.96.0.9"),
            ("MY_DB_PORT_9187_UDP_PORT", "9187"),
            ("MY_DB_PORT_9187_UDP_PROTO", "udp"),
            ("MY_DB_SERVICE_HOST", "10.96.0.9"),
            ("MY_DB_SERVICE_PORT", "5432"),
            ("MY_DB_SERVICE_PORT_METRICS_X", "9187"),
        ];
        assert_eq!(
            linked,
            want.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        );
        // Without service links only the kubernetes Service's.
        let unlinked = service_env(&all, "shop", false);
        assert!(unlinked.keys().all(|k| k.starts_with("KUBERNETES_")));
        assert_eq!(unlinked.len(), 8);
    }

    #[test]
    fn references_cover_env_and_env_from_of_every_container() {
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: "s1".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            env: Some(vec![from(
                "V",
                EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "c1".into(),
                        key: "k".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        let (cms, secrets) = pod_references(&pod(c));
        assert_eq!(cms.into_iter().collect::<Vec<_>>(), ["c1"]);
        assert_eq!(secrets.into_iter().collect::<Vec<_>>(), ["s1"]);
    }
}
