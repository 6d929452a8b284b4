use super::*;

#[test]
fn generate_makes_a_stub_request_signed_by_the_key() {
    use x509_parser::prelude::{FromDer, X509CertificationRequest};
    for (kt, oid) in [
        (KeyType::EcdsaP256, "1.2.840.10045.4.3.2"),
        (KeyType::EcdsaP384, "1.2.840.10045.4.3.3"),
        (KeyType::Ed25519, "1.3.101.112"),
    ] {
        let (pem, der) = generate(kt).unwrap();
        assert!(pem.0.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{kt}");
        let (rest, csr) = X509CertificationRequest::from_der(&der).unwrap();
        assert!(rest.is_empty(), "{kt}");
        let info = &csr.certification_request_info;
        assert_eq!(info.subject.iter().count(), 0, "{kt}: empty subject");
        assert!(info.attributes().is_empty(), "{kt}: no attributes");
        assert_eq!(
            csr.signature_algorithm.algorithm.to_id_string(),
            oid,
            "{kt}"
        );
        csr.verify_signature()
            .unwrap_or_else(|e| panic!("{kt}: {e}"));
        // the key in the PEM is the one the request carries
        let key = rcgen::KeyPair::from_pem(&pem.0).unwrap();
        assert_eq!(
            key.public_key_raw(),
            info.subject_pki.subject_public_key.data.as_ref(),
            "{kt}"
        );
    }
}

#[test]
fn rsa_and_p521_are_refused_by_name() {
    for kt in [KeyType::Rsa3072, KeyType::Rsa4096, KeyType::EcdsaP521] {
        let e = generate(kt).unwrap_err();
        assert!(e.to_string().contains(&kt.to_string()), "{e}");
        assert_eq!(e.cause(), Cause::Unsupported);
    }
}
