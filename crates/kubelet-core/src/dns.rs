//! A pod's resolver and name (upstream's `network/dns` Configurer and
//! GeneratePodHostNameAndDomain): resolv.conf per dnsPolicy with dnsConfig
//! merged and upstream's limits, the hostname and domain a pod is given,
//! and the kubelet-managed /etc/hosts. Pure: the caller reads the node's
//! files and sends the events.

use k8s_openapi::api::core::v1::{HostAlias, Pod, PodDNSConfig};

use crate::manifest::{is_dns1123_label, is_dns1123_subdomain};

/// Upstream's MaxDNSNameservers, MaxDNSSearchPaths, MaxDNSSearchListChars.
pub const MAX_NAMESERVERS: usize = 3;
pub const MAX_SEARCH_PATHS: usize = 32;
pub const MAX_SEARCH_LIST_CHARS: usize = 2048;
/// A search path longer than a DNS subdomain is dropped (glibc aborts on it).
const MAX_SEARCH_PATH_CHARS: usize = 253;

/// A resolver configuration, as in resolv.conf (and the CRI's DNSConfig).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

/// A resolv.conf upstream's parser refuses: `nameserver` lines without an
/// address (upstream's words, one per such line).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", vec!["nameserver list is empty "; *.empty_nameservers].join(", "))]
pub struct ResolvConfError {
    pub empty_nameservers: usize,
}

/// Upstream's parseResolvConf: `nameserver` lines accumulate, the last
/// `search` line wins (a trailing dot dropped, a lone `.` skipped),
/// `options` merge by name; `#` comments skipped. A `nameserver` line
/// without an address is an error.
pub fn parse_resolv_conf(text: &str) -> Result<ResolvConf, ResolvConfError> {
    let mut rc = ResolvConf::default();
    let mut empty_nameservers = 0;
    for line in text.split('\n') {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => match fields.next() {
                Some(ip) => rc.servers.push(ip.to_owned()),
                None => empty_nameservers += 1,
            },
            Some("search") => {
                rc.searches = fields
                    .filter(|s| *s != ".")
                    .map(|s| s.strip_suffix('.').unwrap_or(s).to_owned())
                    .collect();
            }
            Some("options") => append_options(&mut rc.options, fields.map(str::to_owned)),
            _ => {}
        }
    }
    if empty_nameservers == 0 {
        Ok(rc)
    } else {
        Err(ResolvConfError { empty_nameservers })
    }
}

/// Upstream's appendOptions: a later option replaces an earlier one of the
/// same name (in its place, where upstream's order is a map's).
fn append_options(options: &mut Vec<String>, new: impl IntoIterator<Item = String>) {
    let name = |o: &str| o.split(':').next().unwrap_or("").to_owned();
    for o in new {
        match options.iter_mut().find(|x| name(x) == name(&o)) {
            Some(x) => *x = o,
            None => options.push(o),
        }
    }
}

fn omit_duplicates(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// The node's DNS settings (KubeletConfiguration's clusterDNS,
/// clusterDomain, resolvConf).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsSettings {
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// Whether a resolvConf file is configured (`resolvConf: ""` is none:
    /// pods of the Default policy get the node's loopback resolver).
    pub has_resolv_conf: bool,
    /// The node's IPs (the loopback resolver's family).
    pub node_ips: Vec<String>,
}

/// A warning event the DNS configuration asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsEvent {
    /// About the node (else the pod).
    pub node: bool,
    pub reason: &'static str,
    pub message: String,
}

/// The pod's resolver (upstream's GetPodDNS), from the node's (`host`,
/// parsed from resolvConf), with the events it asks for.
pub fn pod_dns(pod: &Pod, host: &ResolvConf, s: &DnsSettings) -> (ResolvConf, Vec<DnsEvent>) {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let mut events = Vec::new();
    let policy = spec.and_then(|s| s.dns_policy.as_deref());
    // An unknown policy is ClusterFirst, as upstream falls back.
    let cluster = match policy {
        Some("None") => None,
        Some("Default") => Some(false),
        Some("ClusterFirstWithHostNet") => Some(true),
        _ => Some(!host_network),
    };
    let mut rc = match cluster {
        None => ResolvConf::default(),
        Some(true) if !s.cluster_dns.is_empty() => {
            let mut searches = Vec::new();
            if !s.cluster_domain.is_empty() {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                let d = &s.cluster_domain;
                searches = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
            }
            ResolvConf {
                servers: s.cluster_dns.clone(),
                searches: omit_duplicates(searches.into_iter().chain(host.searches.clone())),
                options: vec!["ndots:5".to_owned()],
            }
        }
        Some(cluster) => {
            if cluster {
                let message = "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.";
                events.push(DnsEvent {
                    node: true,
                    reason: "MissingClusterDNS",
                    message: message.to_owned(),
                });
                events.push(DnsEvent {
                    node: false,
                    reason: "MissingClusterDNS",
                    message: format!("pod: {:?}. {message}", format_pod(pod)),
                });
            }
            let mut rc = host.clone();
            if !s.has_resolv_conf {
                rc.servers = s
                    .node_ips
                    .iter()
                    .map(|ip| if ip.contains(':') { "::1" } else { "127.0.0.1" }.to_owned())
                    .collect();
                if rc.servers.is_empty() {
                    rc.servers.push("127.0.0.1".to_owned());
                }
                rc.searches = vec![".".to_owned()];
            }
            rc
        }
    };
    if let Some(extra) = spec.and_then(|s| s.dns_config.as_ref()) {
        merge_dns_config(&mut rc, extra);
    }
    fit_limits(&mut rc, &mut events);
    (rc, events)
}

/// Upstream's format.Pod: `name_namespace(uid)`.
pub fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

/// Upstream's appendDNSConfig: nameservers and searches appended without
/// duplicates, options merged by name (the pod's win).
fn merge_dns_config(rc: &mut ResolvConf, extra: &PodDNSConfig) {
    rc.servers = omit_duplicates(
        rc.servers
            .drain(..)
            .chain(extra.nameservers.iter().flatten().cloned()),
    );
    rc.searches = omit_duplicates(
        rc.searches
            .drain(..)
            .chain(extra.searches.iter().flatten().cloned()),
    );
    append_options(
        &mut rc.options,
        extra.options.iter().flatten().map(|o| {
            let name = o.name.clone().unwrap_or_default();
            match o.value.as_deref().filter(|v| !v.is_empty()) {
                Some(v) => format!("{name}:{v}"),
                None => name,
            }
        }),
    );
}

/// Upstream's formDNSConfigFitsLimits: at most 3 nameservers; at most 32
/// search paths, none longer than 253 characters, the line at most 2048;
/// each trim told in a DNSConfigForming event.
fn fit_limits(rc: &mut ResolvConf, events: &mut Vec<DnsEvent>) {
    if rc.servers.len() > MAX_NAMESERVERS {
        rc.servers.truncate(MAX_NAMESERVERS);
        events.push(DnsEvent {
            node: false,
            reason: "DNSConfigForming",
            message: format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                rc.servers.join(" ")
            ),
        });
    }
    let mut exceeded = rc.searches.len() > MAX_SEARCH_PATHS;
    rc.searches.truncate(MAX_SEARCH_PATHS);
    let before = rc.searches.len();
    rc.searches.retain(|s| s.len() <= MAX_SEARCH_PATH_CHARS);
    exceeded |= rc.searches.len() != before;
    let line_len =
        |s: &[String]| s.iter().map(String::len).sum::<usize>() + s.len().saturating_sub(1);
    if line_len(&rc.searches) > MAX_SEARCH_LIST_CHARS {
        while line_len(&rc.searches) > MAX_SEARCH_LIST_CHARS {
            rc.searches.pop();
        }
        exceeded = true;
    }
    if exceeded {
        events.push(DnsEvent {
            node: false,
            reason: "DNSConfigForming",
            message: format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                rc.searches.join(" ")
            ),
        });
    }
}

/// A hostname the pod's spec cannot give, in upstream's words; only a new
/// spec helps.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    /// hostnameOverride, hostname or subdomain is not a DNS name.
    #[error("pod {field} {value:?} is not a valid DNS {what}: {}", .errors.join(";"))]
    Invalid {
        field: &'static str,
        what: &'static str,
        value: String,
        errors: Vec<String>,
    },
    #[error("hostname for pod {pod:?} was invalid: {hostname:?}")]
    Truncated { pod: String, hostname: String },
    #[error(
        "failed to construct FQDN from pod hostname and cluster domain, FQDN {0} is too long (64 characters is the max, {len} characters requested)",
        len = .0.len()
    )]
    FqdnTooLong(String),
}

/// The pod's hostname and domain (upstream's GeneratePodHostNameAndDomain):
/// hostnameOverride when set (a DNS subdomain, no domain); else `hostname`
/// (a DNS label) or the pod's name, cut to 63 characters; the domain
/// `<subdomain>.<namespace>.svc.<clusterDomain>` when `subdomain` is set.
pub fn hostname_and_domain(
    pod: &Pod,
    cluster_domain: &str,
) -> Result<(String, String), HostnameError> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let spec = pod.spec.as_ref();
    let valid = |field, what, value: &str, errors: Vec<String>| {
        if errors.is_empty() {
            Ok(())
        } else {
            Err(HostnameError::Invalid {
                field,
                what,
                value: value.to_owned(),
                errors,
            })
        }
    };
    if let Some(h) = spec.and_then(|s| s.hostname_override.as_deref()) {
        valid("HostnameOverride", "subdomain", h, is_dns1123_subdomain(h))?;
        return Ok((truncate_hostname(name, h)?, String::new()));
    }
    let mut hostname = name;
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        valid("Hostname", "label", h, is_dns1123_label(h))?;
        hostname = h;
    }
    let hostname = truncate_hostname(name, hostname)?;
    let mut domain = String::new();
    if let Some(sub) = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        valid("Subdomain", "label", sub, is_dns1123_label(sub))?;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        domain = format!("{sub}.{ns}.svc.{cluster_domain}");
    }
    Ok((hostname, domain))
}

/// Upstream's truncatePodHostnameIfNeeded: at most 63 characters, no
/// trailing `-` or `.`.
fn truncate_hostname(pod_name: &str, hostname: &str) -> Result<String, HostnameError> {
    if hostname.len() <= 63 {
        return Ok(hostname.to_owned());
    }
    let cut = hostname[..63].trim_end_matches(['-', '.']);
    if cut.is_empty() {
        return Err(HostnameError::Truncated {
            pod: pod_name.to_owned(),
            hostname: hostname.to_owned(),
        });
    }
    Ok(cut.to_owned())
}

/// The sandbox's kernel hostname (upstream's GetNodenameForKernel): the
/// FQDN when setHostnameAsFQDN and a domain, at most 64 characters.
pub fn kernel_hostname(
    hostname: &str,
    domain: &str,
    as_fqdn: bool,
) -> Result<String, HostnameError> {
    if domain.is_empty() || !as_fqdn {
        return Ok(hostname.to_owned());
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > 64 {
        return Err(HostnameError::FqdnTooLong(fqdn));
    }
    Ok(fqdn)
}

const MANAGED_HOSTS_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const MANAGED_HOSTS_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// The managed /etc/hosts of a pod on the pod network (upstream's
/// managedHostsFileContent): localhost lines, each pod IP with the
/// hostname (FQDN first when there is a domain), then the hostAliases.
pub fn managed_hosts(
    ips: &[String],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from(MANAGED_HOSTS_HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out.push_str(&host_alias_lines(aliases));
    out
}

/// The /etc/hosts of a hostNetwork pod (upstream's nodeHostsFileContent):
/// the node's own, then the hostAliases.
pub fn node_hosts(node_hosts: &str, aliases: &[HostAlias]) -> String {
    format!(
        "{MANAGED_HOSTS_HEADER_HOST_NETWORK}{node_hosts}{}",
        host_alias_lines(aliases)
    )
}

fn host_alias_lines(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        let names = a.hostnames.clone().unwrap_or_default().join("\t");
        out.push_str(&format!("{}\t{names}\n", a.ip));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;
    use k8s_openapi::api::core::v1::{PodDNSConfigOption, PodSpec};

    fn pod(spec: PodSpec) -> Pod {
        PodBuilder::new("web")
            .namespace("shop")
            .uid("u1")
            .spec(spec)
            .build()
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn resolv_conf_parses_as_upstream() {
        let cases: &[(&str, Result<ResolvConf, &str>)] = &[
            (
                "# c\nnameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch a.b. c\nsearch x y. .\noptions ndots:2 timeout:1\noptions ndots:3\n",
                Ok(ResolvConf {
                    servers: strs(&["1.1.1.1", "8.8.8.8"]),
                    searches: strs(&["x", "y"]),
                    options: strs(&["ndots:3", "timeout:1"]),
                }),
            ),
            ("domain a.b\n", Ok(ResolvConf::default())),
            ("nameserver\n", Err("nameserver list is empty ")),
        ];
        for (text, want) in cases {
            assert_eq!(
                &parse_resolv_conf(text).map_err(|e| e.to_string()),
                &want.clone().map_err(str::to_owned),
                "{text}"
            );
        }
    }

    #[test]
    fn each_dns_policy_composes_as_upstream() {
        let host = ResolvConf {
            servers: strs(&["10.0.0.2"]),
            searches: strs(&["corp.example", "cluster.local"]),
            options: strs(&["timeout:2"]),
        };
        let cluster = DnsSettings {
            cluster_dns: strs(&["10.96.0.10"]),
            cluster_domain: "cluster.local".into(),
            has_resolv_conf: true,
            node_ips: strs(&["192.168.1.5"]),
        };
        let no_cluster_dns = DnsSettings {
            cluster_dns: vec![],
            ..cluster.clone()
        };
        let no_resolv = DnsSettings {
            has_resolv_conf: false,
            ..no_cluster_dns.clone()
        };
        let cluster_first = ResolvConf {
            servers: strs(&["10.96.0.10"]),
            searches: strs(&[
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
            ]),
            options: strs(&["ndots:5"]),
        };
        let spec = |policy: Option<&str>, host_network: bool| PodSpec {
            dns_policy: policy.map(str::to_owned),
            host_network: Some(host_network),
            ..Default::default()
        };
        let cases: Vec<(PodSpec, &DnsSettings, ResolvConf, Vec<&str>)> = vec![
            (spec(None, false), &cluster, cluster_first.clone(), vec![]),
            (
                spec(Some("ClusterFirst"), false),
                &cluster,
                cluster_first.clone(),
                vec![],
            ),
            // ClusterFirst on the host network is Default.
            (
                spec(Some("ClusterFirst"), true),
                &cluster,
                host.clone(),
                vec![],
            ),
            (
                spec(Some("ClusterFirstWithHostNet"), true),
                &cluster,
                cluster_first.clone(),
                vec![],
            ),
            (spec(Some("Default"), false), &cluster, host.clone(), vec![]),
            (
                spec(Some("None"), false),
                &cluster,
                ResolvConf::default(),
                vec![],
            ),
            (
                spec(Some("ClusterFirst"), false),
                &no_cluster_dns,
                host.clone(),
                vec!["MissingClusterDNS", "MissingClusterDNS"],
            ),
            (
                spec(Some("Default"), false),
                &no_resolv,
                ResolvConf {
                    servers: strs(&["127.0.0.1"]),
                    searches: strs(&["."]),
                    options: strs(&["timeout:2"]),
                },
                vec![],
            ),
        ];
        for (i, (spec, settings, want, events)) in cases.into_iter().enumerate() {
            let (got, ev) = pod_dns(&pod(spec), &host, settings);
            assert_eq!(got, want, "case {i}");
            assert_eq!(
                ev.iter().map(|e| e.reason).collect::<Vec<_>>(),
                events,
                "case {i}"
            );
        }
    }

    #[test]
    fn missing_cluster_dns_is_told_to_node_and_pod() {
        let (_, ev) = pod_dns(
            &pod(PodSpec::default()),
            &ResolvConf::default(),
            &DnsSettings::default(),
        );
        assert!(ev[0].node && !ev[1].node);
        assert_eq!(
            ev[1].message,
            "pod: \"web_shop(u1)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy."
        );
    }

    #[test]
    fn dns_config_merges_and_limits_trim_with_an_event() {
        let spec = PodSpec {
            dns_policy: Some("None".into()),
            dns_config: Some(PodDNSConfig {
                nameservers: Some(strs(&[
                    "1.1.1.1", "1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4",
                ])),
                searches: Some(
                    (0..40)
                        .map(|i| format!("s{i}.example"))
                        .chain([format!("{}.x", "a".repeat(260))])
                        .collect(),
                ),
                options: Some(vec![
                    PodDNSConfigOption {
                        name: Some("ndots".into()),
                        value: Some("2".into()),
                    },
                    PodDNSConfigOption {
                        name: Some("edns0".into()),
                        value: None,
                    },
                    PodDNSConfigOption {
                        name: Some("ndots".into()),
                        value: Some("3".into()),
                    },
                ]),
            }),
            ..Default::default()
        };
        let (rc, ev) = pod_dns(&pod(spec), &ResolvConf::default(), &DnsSettings::default());
        assert_eq!(rc.servers, strs(&["1.1.1.1", "2.2.2.2", "3.3.3.3"]));
        assert_eq!(rc.searches.len(), 32);
        assert_eq!(rc.options, strs(&["ndots:3", "edns0"]));
        let reasons: Vec<&str> = ev.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["DNSConfigForming", "DNSConfigForming"]);
        assert!(
            ev[0].message.ends_with("line is: 1.1.1.1 2.2.2.2 3.3.3.3"),
            "{}",
            ev[0].message
        );
        // A line over 2048 characters loses its last paths.
        let long = PodSpec {
            dns_policy: Some("None".into()),
            dns_config: Some(PodDNSConfig {
                searches: Some((0..10).map(|i| format!("{i}{}", "b".repeat(250))).collect()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (rc, ev) = pod_dns(&pod(long), &ResolvConf::default(), &DnsSettings::default());
        assert_eq!(rc.searches.len(), 8);
        assert_eq!(ev.len(), 1);
    }

    #[test]
    fn hostname_and_domain_as_upstream() {
        let s = |hostname: Option<&str>, sub: Option<&str>, over: Option<&str>| PodSpec {
            hostname: hostname.map(str::to_owned),
            subdomain: sub.map(str::to_owned),
            hostname_override: over.map(str::to_owned),
            ..Default::default()
        };
        let long = "a".repeat(62) + "-b";
        type Want<'a> = Result<(&'a str, &'a str), &'a str>;
        let cases: Vec<(PodSpec, Want)> = vec![
            (s(None, None, None), Ok(("web", ""))),
            (s(Some("h1"), None, None), Ok(("h1", ""))),
            (
                s(Some("h1"), Some("t"), None),
                Ok(("h1", "t.shop.svc.cluster.local")),
            ),
            (
                s(None, Some("t"), None),
                Ok(("web", "t.shop.svc.cluster.local")),
            ),
            (
                s(Some("h1"), Some("t"), Some("override.example.host")),
                Ok(("override.example.host", "")),
            ),
            (
                s(Some(&long), None, None),
                Err("must be no more than 63 characters"),
            ),
            (
                s(Some("H1"), None, None),
                Err("pod Hostname \"H1\" is not a valid DNS label"),
            ),
            (
                s(None, Some("a.b"), None),
                Err("pod Subdomain \"a.b\" is not a valid DNS label"),
            ),
            (
                s(None, None, Some("Not-RFC1123")),
                Err("pod HostnameOverride \"Not-RFC1123\" is not a valid DNS subdomain"),
            ),
        ];
        for (i, (spec, want)) in cases.into_iter().enumerate() {
            let got = hostname_and_domain(&pod(spec), "cluster.local");
            match want {
                Ok((h, d)) => assert_eq!(got, Ok((h.to_owned(), d.to_owned())), "case {i}"),
                Err(m) => assert!(
                    got.as_ref().is_err_and(|e| e.to_string().contains(m)),
                    "case {i}: {got:?}"
                ),
            }
        }
        // A pod name over 63 characters is cut, with no trailing '-'.
        let mut p = pod(PodSpec::default());
        p.metadata.name = Some(long.clone());
        assert_eq!(hostname_and_domain(&p, "c").unwrap().0, "a".repeat(62));
    }

    #[test]
    fn kernel_hostname_is_the_fqdn_when_asked_and_it_fits() {
        assert_eq!(kernel_hostname("h", "t.ns.svc.c", false).unwrap(), "h");
        assert_eq!(kernel_hostname("h", "", true).unwrap(), "h");
        assert_eq!(
            kernel_hostname("h", "t.ns.svc.c", true).unwrap(),
            "h.t.ns.svc.c"
        );
        let e = kernel_hostname(&"h".repeat(40), &"d".repeat(30), true).unwrap_err();
        assert!(
            e.to_string()
                .contains("is too long (64 characters is the max, 71 characters requested)"),
            "{e}"
        );
    }

    #[test]
    fn hosts_files_as_upstream() {
        let aliases = vec![HostAlias {
            ip: "123.45.67.89".into(),
            hostnames: Some(strs(&["foo", "bar"])),
        }];
        assert_eq!(
            managed_hosts(
                &strs(&["10.1.0.7"]),
                "web",
                "t.shop.svc.cluster.local",
                &aliases
            ),
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n10.1.0.7\tweb.t.shop.svc.cluster.local\tweb\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n"
        );
        assert!(
            managed_hosts(&strs(&["10.1.0.7"]), "web", "", &[])
                .ends_with("ip6-allrouters\n10.1.0.7\tweb\n")
        );
        assert_eq!(
            node_hosts("127.0.0.1 localhost\n", &aliases),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n"
        );
    }
}
