use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};

use super::*;

fn addr(type_: &str, address: &str) -> NodeAddress {
    NodeAddress {
        type_: type_.into(),
        address: address.into(),
    }
}

fn leaf(not_before: i64, not_after: i64) -> Leaf {
    Leaf {
        not_before,
        not_after,
        common_name: "system:node:n1".into(),
        organizations: vec!["system:nodes".into()],
        dns_names: vec!["n1".into()],
        ips: vec!["10.0.0.2".parse().unwrap()],
    }
}

#[test]
fn kinds_name_upstreams_signers_prefixes_and_usages() {
    assert_eq!(
        Kind::Client.signer(),
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(Kind::Serving.signer(), "kubernetes.io/kubelet-serving");
    assert_eq!(Kind::Client.prefix(), "kubelet-client");
    assert_eq!(Kind::Serving.prefix(), "kubelet-server");
    assert_eq!(Kind::Client.usages(), ["digital signature", "client auth"]);
    assert_eq!(Kind::Serving.usages(), ["digital signature", "server auth"]);
}

#[test]
fn the_serving_template_takes_the_addresses_as_upstream() {
    let t = serving_template(
        "n1",
        &[
            addr("InternalIP", "10.0.0.2"),
            addr("Hostname", "n1"),
            addr("ExternalIP", "not-an-ip"),
            addr("InternalIP", "10.0.0.2"),
            addr("Hostname", "192.168.1.1"),
            addr("InternalDNS", "n1.internal"),
            addr("ExternalIP", "1.2.3.4"),
            addr("InternalIP", ""),
        ],
    )
    .unwrap();
    assert_eq!(t.common_name, "system:node:n1");
    assert_eq!(t.organizations, vec!["system:nodes"]);
    assert_eq!(t.dns_names, vec!["n1", "n1.internal"]);
    let ips: Vec<String> = t.ips.iter().map(ToString::to_string).collect();
    assert_eq!(ips, vec!["1.2.3.4", "10.0.0.2", "192.168.1.1"]);
    // No IP: no request (a DNS name alone is not enough).
    assert_eq!(serving_template("n1", &[addr("Hostname", "n1")]), None);
    assert_eq!(client_template("n1").dns_names, Vec::<String>::new());
}

#[test]
fn a_leaf_satisfies_a_template_it_covers() {
    let template = serving_template(
        "n1",
        &[addr("InternalIP", "10.0.0.2"), addr("Hostname", "n1")],
    )
    .unwrap();
    let l = leaf(0, 100);
    assert!(satisfies(&l, &template));
    // Extra names on the certificate are fine.
    assert!(satisfies(&l, &client_template("n1")));
    for (what, change) in [
        (
            "another CN",
            (|l: &mut Leaf| l.common_name = "system:node:n2".into()) as fn(&mut Leaf),
        ),
        ("a DNS name missing", |l| l.dns_names.clear()),
        ("an IP missing", |l| l.ips.clear()),
        ("the org missing", |l| l.organizations.clear()),
    ] {
        let mut l = leaf(0, 100);
        change(&mut l);
        assert!(!satisfies(&l, &template), "{what}");
    }
}

#[test]
fn rotation_comes_at_70_to_90_percent_of_the_life() {
    let l = leaf(1_000, 2_000);
    let s = 1_000_000_000;
    assert_eq!(rotation_deadline(&l, 0.0), 1_700 * s);
    assert_eq!(rotation_deadline(&l, 0.5), 1_800 * s);
    assert_eq!(rotation_deadline(&l, 0.999_999_999_9), 1_899_999_999_980);
    // Out-of-range randomness is clamped.
    assert_eq!(rotation_deadline(&l, 7.0), 1_900 * s);
    let template = client_template("n1");
    assert_eq!(next_rotation(5, Some(&l), &template, 0.0), 1_700 * s);
    assert_eq!(next_rotation(5, None, &template, 0.0), 5);
    assert_eq!(
        next_rotation(5, Some(&l), &client_template("n2"), 0.0),
        5,
        "a certificate for another name is replaced at once"
    );
}

#[test]
fn retries_back_off_from_2_s_to_a_32_s_poll() {
    let delays: Vec<u64> = (0..7).map(|a| retry_delay_ms(a, 0.0)).collect();
    assert_eq!(
        delays,
        vec![2_000, 4_000, 8_000, 16_000, 32_000, 32_000, 32_000]
    );
    assert_eq!(retry_delay_ms(0, 1.0), 2_200);
}

/// A P-256 key written by Go (x509.MarshalPKCS8PrivateKey,
/// x509.MarshalECPrivateKey, x509.MarshalPKIXPublicKey) and the bootstrap
/// CSR name upstream's digestedName gives it for node n1.
const GO_PKCS8: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420e69493533963c74b4d737cf010a7c9368b3f7226bda92bee533462c717c7b11fa14403420004508cbe5f54f29672e35539ebe58cc97dd5f16989dcb494eeceefadb70bdcf50ca205a66d64e6585fda31120968981c45487caef79f39dfa7f9c08c3f28bec64e";
const GO_SEC1: &str = "30770201010420e69493533963c74b4d737cf010a7c9368b3f7226bda92bee533462c717c7b11fa00a06082a8648ce3d030107a14403420004508cbe5f54f29672e35539ebe58cc97dd5f16989dcb494eeceefadb70bdcf50ca205a66d64e6585fda31120968981c45487caef79f39dfa7f9c08c3f28bec64e";
const GO_SPKI: &str = "3059301306072a8648ce3d020106082a8648ce3d03010703420004508cbe5f54f29672e35539ebe58cc97dd5f16989dcb494eeceefadb70bdcf50ca205a66d64e6585fda31120968981c45487caef79f39dfa7f9c08c3f28bec64e";
const GO_CSR_NAME: &str = "node-csr-oPeHoZUX1HfvQwezsHzisfkrER4E9d6yi0wn-0TyMas";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn keys_convert_between_pkcs8_and_sec1_as_go_writes_them() {
    let (pkcs8, sec1) = (unhex(GO_PKCS8), unhex(GO_SEC1));
    assert_eq!(sec1_from_pkcs8_p256(&pkcs8).unwrap(), sec1);
    assert_eq!(pkcs8_from_sec1_p256(&sec1).unwrap(), pkcs8);
    assert_eq!(sec1_from_pkcs8_p256(&sec1), None);
    assert_eq!(pkcs8_from_sec1_p256(&pkcs8), None);
    assert_eq!(sec1_from_pkcs8_p256(&pkcs8[..100]), None);
}

#[test]
fn the_bootstrap_csr_name_is_upstreams_digest() {
    let name = digested_csr_name(
        &unhex(GO_SPKI),
        &client_template("n1"),
        &Kind::Client.usages(),
    );
    assert_eq!(name, GO_CSR_NAME);
}

#[test]
fn files_are_named_as_upstreams_store_names_them() {
    assert_eq!(
        pair_file_name("kubelet-client", "2026-12-05-13-47-54"),
        "kubelet-client-2026-12-05-13-47-54.pem"
    );
    assert_eq!(
        current_file_name("kubelet-server"),
        "kubelet-server-current.pem"
    );
    assert_eq!(
        updated_file_name("kubelet-client"),
        "kubelet-client-updated.pem"
    );
}

#[test]
fn the_kubeconfig_points_at_the_current_pair() {
    let yaml = kubeconfig_yaml(
        "https://10.0.0.1:6443",
        &ServerTrust::CaFile("/etc/kubernetes/pki/ca.crt".into()),
        "/var/lib/kubelet/pki/kubelet-client-current.pem",
    );
    assert_eq!(
        yaml,
        r#"apiVersion: v1
clusters:
- cluster:
    certificate-authority: "/etc/kubernetes/pki/ca.crt"
    server: "https://10.0.0.1:6443"
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
kind: Config
preferences: {}
users:
- name: default-auth
  user:
    client-certificate: "/var/lib/kubelet/pki/kubelet-client-current.pem"
    client-key: "/var/lib/kubelet/pki/kubelet-client-current.pem"
"#
    );
    let parsed: serde_json::Value =
        serde_saphyr::from_str(&kubeconfig_yaml("https://h", &ServerTrust::Insecure, "/p"))
            .unwrap();
    assert_eq!(
        parsed["clusters"][0]["cluster"]["insecure-skip-tls-verify"],
        true
    );
    assert_eq!(parsed["users"][0]["user"]["client-key"], "/p");
    let parsed: serde_json::Value = serde_saphyr::from_str(&kubeconfig_yaml(
        "https://h",
        &ServerTrust::CaData("LS0t".into()),
        "/p",
    ))
    .unwrap();
    assert_eq!(
        parsed["clusters"][0]["cluster"]["certificate-authority-data"],
        "LS0t"
    );
}

fn csr(conditions: &[(&str, &str)], cert: Option<&str>) -> CertificateSigningRequest {
    CertificateSigningRequest {
        status: Some(CertificateSigningRequestStatus {
            certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(type_, reason)| CertificateSigningRequestCondition {
                        type_: (*type_).into(),
                        reason: Some((*reason).into()),
                        message: Some("m".into()),
                        status: "True".into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
        }),
        ..Default::default()
    }
}

#[test]
fn a_csr_is_read_as_upstream_waits_on_it() {
    let pem = "-----BEGIN CERTIFICATE-----\n";
    for (what, csr, want) in [
        (
            "no status",
            CertificateSigningRequest::default(),
            CsrOutcome::Pending,
        ),
        (
            "approved, not issued",
            csr(&[("Approved", "AutoApproved")], None),
            CsrOutcome::Pending,
        ),
        (
            "issued, not approved",
            csr(&[], Some(pem)),
            CsrOutcome::Pending,
        ),
        (
            "approved and issued",
            csr(&[("Approved", "AutoApproved")], Some(pem)),
            CsrOutcome::Issued(pem.into()),
        ),
        (
            "denied",
            csr(&[("Denied", "NoWay")], None),
            CsrOutcome::Denied(
                "certificate signing request is denied, reason: NoWay, message: m".into(),
            ),
        ),
        (
            "failed after approval",
            csr(
                &[
                    ("Approved", "AutoApproved"),
                    ("Failed", "SignerValidationFailure"),
                ],
                None,
            ),
            CsrOutcome::Failed(
                "certificate signing request failed, reason: SignerValidationFailure, message: m"
                    .into(),
            ),
        ),
    ] {
        assert_eq!(csr_outcome(&csr), want, "{what}");
    }
}

#[test]
fn a_pair_file_splits_into_chain_and_key() {
    let text = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\
                -----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n\
                -----BEGIN EC PRIVATE KEY-----\nCCCC\n-----END EC PRIVATE KEY-----\n";
    let (chain, key) = split_pair(text);
    assert_eq!(
        chain,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\
         -----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n"
    );
    assert_eq!(
        key,
        "-----BEGIN EC PRIVATE KEY-----\nCCCC\n-----END EC PRIVATE KEY-----\n"
    );
    assert_eq!(split_pair("junk"), (String::new(), String::new()));
}

#[test]
fn keys_are_written_as_ec_private_key_pem_and_read_back() {
    let pkcs8 = unhex(GO_PKCS8);
    let pem = ec_private_key_pem(&pkcs8).unwrap();
    assert!(pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"), "{pem}");
    assert_eq!(pkcs8_from_pem(&pem).unwrap(), pkcs8);
    assert_eq!(ec_private_key_pem(&pkcs8[1..]), None);
    assert_eq!(
        pkcs8_from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
        None
    );
}
