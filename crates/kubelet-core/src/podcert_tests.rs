use super::*;
use k8s_openapi::api::certificates::v1::PodCertificateRequestStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

const NS: &str = "ns";

fn key(s: &str) -> PrivateKeyPem {
    PrivateKeyPem(s.into())
}

fn waiting(k: &str, pcr: &str, abandon_at: i64) -> Waiting {
    Waiting {
        key: key(k),
        pcr: pcr.into(),
        abandon_at,
    }
}

fn issued(k: &str, begin_refresh_at: i64, not_after: i64) -> Issued {
    Issued {
        key: key(k),
        chain: CERT_A.into(),
        begin_refresh_at,
        not_after,
        overdue_told: false,
        expired_told: false,
    }
}

const CERT_A: &str = "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n";
const CERT_B: &str = "-----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n";

fn sync(now: i64, pcr: Seen<'_>) -> Input<'_> {
    Input::Sync {
        now,
        pcr,
        jitter: 7,
    }
}

fn event(reason: &'static str, message: &str) -> Action {
    Action::Event {
        reason,
        message: message.into(),
    }
}

#[test]
fn step_table() {
    let issued_seen = Seen::Issued {
        chain: CERT_A,
        begin_refresh_at: 5000,
        not_after: 9000,
    };
    let denied = Seen::Denied {
        reason: "NotAllowed",
        message: "no",
    };
    let failed = Seen::Failed {
        reason: "Broken",
        message: "signer down",
    };
    let cases: Vec<(&str, State, Input<'_>, State, Vec<Action>)> = vec![
        (
            "initial asks for a request",
            State::Initial,
            sync(100, Seen::Absent),
            State::Initial,
            vec![Action::CreateRequest],
        ),
        (
            "wait: pending stays",
            State::Wait(waiting("k1", "req-a", 700)),
            sync(100, Seen::Pending),
            State::Wait(waiting("k1", "req-a", 700)),
            vec![],
        ),
        (
            "wait: absent before abandon is informer lag",
            State::Wait(waiting("k1", "req-a", 700)),
            sync(700, Seen::Absent),
            State::Wait(waiting("k1", "req-a", 700)),
            vec![],
        ),
        (
            "wait: absent after abandon makes a new request",
            State::Wait(waiting("k1", "req-a", 700)),
            sync(701, Seen::Absent),
            State::Initial,
            vec![Action::CreateRequest],
        ),
        (
            "wait: issued is fresh with the key, refresh time jittered",
            State::Wait(waiting("k1", "req-a", 700)),
            sync(100, issued_seen),
            State::Fresh(issued("k1", 5007, 9000)),
            vec![],
        ),
        (
            "wait: denied is permanent and told",
            State::Wait(waiting("k1", "req-a", 700)),
            sync(100, denied),
            State::Denied {
                reason: "NotAllowed".into(),
                message: "no".into(),
            },
            vec![event(
                "Denied",
                r#"PodCertificateRequest ns/req-a was denied, reason="NotAllowed", message="no""#,
            )],
        ),
        (
            "wait: failed is permanent and told",
            State::Wait(waiting("k1", "req-a", 700)),
            sync(100, failed),
            State::Failed {
                reason: "Broken".into(),
                message: "signer down".into(),
            },
            vec![event(
                "Failed",
                r#"PodCertificateRequest ns/req-a failed, reason="Broken", message="signer down""#,
            )],
        ),
        (
            "denied stays denied",
            State::Denied {
                reason: "r".into(),
                message: "m".into(),
            },
            sync(100, Seen::Absent),
            State::Denied {
                reason: "r".into(),
                message: "m".into(),
            },
            vec![],
        ),
        (
            "fresh before its refresh time",
            State::Fresh(issued("k1", 5000, 9000)),
            sync(4999, Seen::Absent),
            State::Fresh(issued("k1", 5000, 9000)),
            vec![],
        ),
        (
            "fresh at its refresh time asks for a request",
            State::Fresh(issued("k1", 5000, 9000)),
            sync(5000, Seen::Absent),
            State::Fresh(issued("k1", 5000, 9000)),
            vec![Action::CreateRequest],
        ),
        (
            "fresh, refresh overdue and expired: told",
            State::Fresh(issued("k1", 5000, 9000)),
            sync(9001, Seen::Absent),
            State::Fresh(Issued {
                overdue_told: true,
                expired_told: true,
                ..issued("k1", 5000, 9000)
            }),
            vec![
                event(
                    "CertificateOverdueForRefresh",
                    "PodCertificate refresh overdue",
                ),
                event("CertificateExpired", "PodCertificate expired"),
                Action::CreateRequest,
            ],
        ),
        (
            "wait refresh: pending serves the current one, overdue told once",
            State::WaitRefresh {
                current: Issued {
                    overdue_told: true,
                    ..issued("k1", 5000, 9000)
                },
                refresh: waiting("k2", "req-b", 9500),
            },
            sync(8000, Seen::Pending),
            State::WaitRefresh {
                current: Issued {
                    overdue_told: true,
                    ..issued("k1", 5000, 9000)
                },
                refresh: waiting("k2", "req-b", 9500),
            },
            vec![],
        ),
        (
            "wait refresh: issued swaps to the refresh key",
            State::WaitRefresh {
                current: issued("k1", 5000, 9000),
                refresh: waiting("k2", "req-b", 9500),
            },
            sync(
                5100,
                Seen::Issued {
                    chain: CERT_B,
                    begin_refresh_at: 12000,
                    not_after: 16000,
                },
            ),
            State::Fresh(Issued {
                chain: CERT_B.into(),
                ..issued("k2", 12007, 16000)
            }),
            vec![],
        ),
        (
            "wait refresh: abandoned goes back to fresh",
            State::WaitRefresh {
                current: issued("k1", 5000, 9000),
                refresh: waiting("k2", "req-b", 5600),
            },
            sync(5601, Seen::Absent),
            State::Fresh(issued("k1", 5000, 9000)),
            vec![],
        ),
        (
            "wait refresh: denied drops the current credential",
            State::WaitRefresh {
                current: issued("k1", 5000, 9000),
                refresh: waiting("k2", "req-b", 5600),
            },
            sync(5100, denied),
            State::Denied {
                reason: "NotAllowed".into(),
                message: "no".into(),
            },
            vec![event(
                "Denied",
                r#"PodCertificateRequest ns/req-b was denied, reason="NotAllowed", message="no""#,
            )],
        ),
    ];
    for (name, state, input, want, want_actions) in cases {
        let (got, actions) = step(state, input, NS);
        assert_eq!(got, want, "{name}");
        assert_eq!(actions, want_actions, "{name}");
    }
}

/// The state after the request of the last CreateRequest was made.
fn created(state: State, name: &str, created_at: i64, jitter: i64, key: PrivateKeyPem) -> State {
    let input = Input::Created {
        name,
        created_at,
        jitter,
        key,
    };
    step(state, input, NS).0
}

#[test]
fn created_waits_with_the_key() {
    assert_eq!(
        created(State::Initial, "req-a", 1000, 30, key("k1")),
        State::Wait(waiting("k1", "req-a", 1000 + ASSUME_DELETED_SECS + 30))
    );
    assert_eq!(
        created(
            State::Fresh(issued("k1", 5000, 9000)),
            "req-b",
            5000,
            0,
            key("k2")
        ),
        State::WaitRefresh {
            current: issued("k1", 5000, 9000),
            refresh: waiting("k2", "req-b", 5000 + ASSUME_DELETED_SECS),
        }
    );
    // a state that moved on meanwhile keeps its own key
    let denied = State::Denied {
        reason: "r".into(),
        message: "m".into(),
    };
    assert_eq!(created(denied.clone(), "req-c", 1, 0, key("k3")), denied);
}

fn pcr(conditions: &[(&str, &str)], with_times: bool) -> PodCertificateRequest {
    let t = |s| Time(Timestamp::from_second(s).unwrap());
    PodCertificateRequest {
        status: Some(PodCertificateRequestStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(ty, reason)| Condition {
                        type_: (*ty).into(),
                        reason: (*reason).into(),
                        message: format!("{ty} message"),
                        status: "True".into(),
                        last_transition_time: t(100),
                        observed_generation: None,
                    })
                    .collect(),
            ),
            certificate_chain: Some(CERT_A.into()),
            begin_refresh_at: with_times.then(|| t(200)),
            not_after: with_times.then(|| t(300)),
            not_before: with_times.then(|| t(100)),
        }),
        ..Default::default()
    }
}

#[test]
fn seen_reads_the_first_terminal_condition() {
    assert_eq!(seen(None), Seen::Absent);
    assert_eq!(seen(Some(&PodCertificateRequest::default())), Seen::Pending);
    assert_eq!(seen(Some(&pcr(&[("Other", "x")], true))), Seen::Pending);
    assert_eq!(
        seen(Some(&pcr(&[("Issued", "Reason")], true))),
        Seen::Issued {
            chain: CERT_A,
            begin_refresh_at: 200,
            not_after: 300
        }
    );
    // issued without its times is not usable yet
    assert_eq!(seen(Some(&pcr(&[("Issued", "R")], false))), Seen::Pending);
    assert_eq!(
        seen(Some(&pcr(
            &[("Denied", "NotAllowed"), ("Issued", "R")],
            true
        ))),
        Seen::Denied {
            reason: "NotAllowed",
            message: "Denied message"
        }
    );
    assert_eq!(
        seen(Some(&pcr(&[("Failed", "Broken")], true))),
        Seen::Failed {
            reason: "Broken",
            message: "Failed message"
        }
    );
}

#[test]
fn clean_chain_keeps_blocks_in_order_as_certificates() {
    let messy = "junk before\r\n-----BEGIN CERTIFICATE-----\r\nAQID\r\n-----END CERTIFICATE-----\r\n\
                 text between\n-----BEGIN SOMETHING ELSE-----\nBAUG\n-----END SOMETHING ELSE-----\ntrailer";
    assert_eq!(clean_chain(messy), format!("{CERT_A}{CERT_B}"));
    assert_eq!(clean_chain("no pem at all"), "");
}

#[test]
fn payload_puts_the_key_first_in_the_bundle() {
    let src = PodCertificateProjection {
        credential_bundle_path: Some("bundle.pem".into()),
        key_path: Some("key.pem".into()),
        certificate_chain_path: Some("chain.pem".into()),
        ..Default::default()
    };
    let got = payload(&src, &issued("KEY\n", 0, 0), 0o600);
    let text = |p: &str| String::from_utf8(got[p].data.clone()).unwrap();
    assert_eq!(text("bundle.pem"), format!("KEY\n{CERT_A}"));
    assert_eq!(text("key.pem"), "KEY\n");
    assert_eq!(text("chain.pem"), CERT_A);
    assert!(got.values().all(|f| f.mode == 0o600));
    let only_bundle = PodCertificateProjection {
        credential_bundle_path: Some("b".into()),
        ..Default::default()
    };
    assert_eq!(
        payload(&only_bundle, &issued("K", 0, 0), 0o644)
            .keys()
            .collect::<Vec<_>>(),
        ["b"]
    );
}

#[test]
fn request_object_is_upstreams() {
    let src = PodCertificateProjection {
        signer_name: "example.com/signer".into(),
        key_type: "ECDSAP256".into(),
        user_annotations: Some(BTreeMap::from([("a".into(), "b".into())])),
        ..Default::default()
    };
    let who = Requester {
        namespace: "ns",
        pod_name: "p",
        pod_uid: "uid-1",
        service_account: "default",
        service_account_uid: "sa-uid",
        node_name: "n1",
        node_uid: "node-uid",
    };
    let json = serde_json::to_value(request_object(&who, &src, vec![1, 2, 3])).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "PodCertificateRequest",
            "metadata": {
                "namespace": "ns",
                "generateName": "req-",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-1"}]
            },
            "spec": {
                "signerName": "example.com/signer",
                "podName": "p",
                "podUID": "uid-1",
                "serviceAccountName": "default",
                "serviceAccountUID": "sa-uid",
                "nodeName": "n1",
                "nodeUID": "node-uid",
                "stubPKCS10Request": "AQID",
                "unverifiedUserAnnotations": {"a": "b"}
            }
        })
    );
}

#[test]
fn key_types_parse_as_the_api_spells_them() {
    for s in [
        "RSA3072",
        "RSA4096",
        "ECDSAP256",
        "ECDSAP384",
        "ECDSAP521",
        "ED25519",
    ] {
        assert_eq!(s.parse::<KeyType>().unwrap().to_string(), s);
    }
    assert_eq!(
        "ecdsap256".parse::<KeyType>().unwrap_err(),
        r#"unknown key type "ecdsap256""#
    );
}

#[test]
fn metrics_states_and_counts() {
    let fresh = State::Fresh(issued("k", 100, 1000));
    assert_eq!(fresh.metrics_state(50), "fresh");
    assert_eq!(
        fresh.metrics_state(100 + REFRESH_OVERDUE_SECS + 1),
        "overdue_for_refresh"
    );
    assert_eq!(fresh.metrics_state(1001), "expired");
    assert_eq!(State::Initial.metrics_state(0), "not_yet_issued");
    let counts = count_states(
        [("s1", &fresh), ("s1", &fresh), ("s2", &State::Initial)],
        50,
    );
    assert_eq!(counts[&("s1".to_string(), "fresh")], 2);
    assert_eq!(counts[&("s2".to_string(), "not_yet_issued")], 1);
}
