use super::*;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n";

fn provider(body: &str) -> Result<Vec<CredentialProvider>, ConfigError> {
    decode_config(
        "/etc/kubernetes/credential-providers.yaml",
        &format!("{HEADER}{body}"),
    )
}

const ECR: &str = "providers:\n- name: ecr-credential-provider\n  matchImages: [\"*.dkr.ecr.*.amazonaws.com\", \"registry.test:5000/team\"]\n  defaultCacheDuration: 12h\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  args: [get-credentials]\n  env: [{name: AWS_PROFILE, value: node}]\n";

#[test]
fn a_config_decodes_strictly_from_any_of_its_versions() {
    let providers = provider(ECR).unwrap();
    assert_eq!(providers[0].name, "ecr-credential-provider");
    assert_eq!(
        providers[0].default_cache_duration(),
        Duration::from_secs(12 * 3600)
    );
    assert_eq!(providers[0].env[0].value, "node");
    validate(&providers, true).unwrap();
    let beta = decode_config(
        "b.yaml",
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\n{ECR}"
        ),
    )
    .unwrap();
    assert_eq!(beta, providers);
    for (body, want) in [
        (
            format!("{HEADER}providers:\n- name: a\n  unknownField: 1\n"),
            "strict decoding error: unknown field `unknownField`",
        ),
        (
            "apiVersion: kubelet.config.k8s.io/v1\nkind: WrongKind\n".to_owned(),
            "no kind \"WrongKind\" is registered for version \"kubelet.config.k8s.io/v1\"",
        ),
        (
            "apiVersion: other.k8s.io/v1\nkind: CredentialProviderConfig\n".to_owned(),
            "failed to decode CredentialProviderConfig, unexpected Group: other.k8s.io",
        ),
        (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\nproviders:\n- name: a\n  tokenAttributes: {}\n".to_owned(),
            "strict decoding error: unknown field \"providers[0].tokenAttributes\"",
        ),
        (
            format!("{HEADER}providers:\n- name: a\n  defaultCacheDuration: soon\n"),
            "strict decoding error",
        ),
    ] {
        let err = decode_config("c.yaml", &body).unwrap_err().to_string();
        assert!(err.starts_with("error decoding config \"c.yaml\": "), "{err}");
        assert!(err.contains(want), "{err}");
    }
    let twice = merge_providers(vec![provider(ECR).unwrap(), provider(ECR).unwrap()]);
    assert_eq!(
        twice.unwrap_err().to_string(),
        "duplicate provider name \"ecr-credential-provider\" found in configuration file(s)"
    );
}

#[test]
fn validation_in_upstreams_words() {
    let base = provider(ECR).unwrap().remove(0);
    let with = |f: &dyn Fn(&mut CredentialProvider)| {
        let mut p = base.clone();
        f(&mut p);
        validate(&[p], true).unwrap_err().to_string()
    };
    let prefix = "failed to validate credential provider config: ";
    let token = |f: &dyn Fn(&mut TokenAttributes)| {
        with(&|p| {
            let mut t = TokenAttributes {
                service_account_token_audience: "registry.test".into(),
                cache_type: Some("ServiceAccount".into()),
                require_service_account: Some(true),
                required_service_account_annotation_keys: Vec::new(),
                optional_service_account_annotation_keys: Vec::new(),
            };
            f(&mut t);
            p.token_attributes = Some(t);
        })
    };
    let cases: Vec<(String, &str)> = vec![
        (
            validate(&[], true).unwrap_err().to_string(),
            "providers: Required value: at least 1 item in plugins is required",
        ),
        (
            with(&|p| p.name = "foo/../bar".into()),
            "providers.name: Invalid value: \"foo/../bar\": provider name cannot contain '/'",
        ),
        (
            with(&|p| p.name = "foo bar".into()),
            "providers.name: Invalid value: \"foo bar\": provider name cannot contain spaces",
        ),
        (
            with(&|p| p.name = "..".into()),
            "providers.name: Invalid value: \"..\": provider name cannot be '..'",
        ),
        (
            with(&|p| p.api_version.clear()),
            "providers.apiVersion: Required value",
        ),
        (
            with(&|p| p.api_version = "credentialprovider.kubelet.k8s.io/v1alpha0".into()),
            "providers.apiVersion: Unsupported value: \"credentialprovider.kubelet.k8s.io/v1alpha0\": supported values: \"credentialprovider.kubelet.k8s.io/v1\", \"credentialprovider.kubelet.k8s.io/v1alpha1\", \"credentialprovider.kubelet.k8s.io/v1beta1\"",
        ),
        (
            with(&|p| p.match_images.clear()),
            "providers.matchImages: Required value: at least 1 item in matchImages is required",
        ),
        (
            with(&|p| p.match_images = vec!["%invalid%".into()]),
            "providers.matchImages: Invalid value: \"%invalid%\": match image is invalid: parse \"https://%invalid%\": invalid URL escape \"%in\"",
        ),
        (
            with(&|p| p.default_cache_duration = None),
            "providers.defaultCacheDuration: Required value",
        ),
        (
            with(&|p| p.default_cache_duration = Some("-1m".into())),
            "providers.defaultCacheDuration: Invalid value: \"-1m0s\": must be greater than or equal to 0",
        ),
        (
            token(&|t| t.service_account_token_audience.clear()),
            "providers.tokenAttributes.serviceAccountTokenAudience: Required value",
        ),
        (
            token(&|t| t.require_service_account = None),
            "providers.tokenAttributes.requireServiceAccount: Required value",
        ),
        (
            token(&|t| {
                t.require_service_account = Some(false);
                t.required_service_account_annotation_keys = vec!["a.test/k".into()];
            }),
            "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
        ),
        (
            token(&|t| {
                t.optional_service_account_annotation_keys = vec!["cantendwithadash-".into()]
            }),
            "providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: \"cantendwithadash-\": name part must consist of alphanumeric characters",
        ),
        (
            token(&|t| {
                t.required_service_account_annotation_keys = vec!["a.test/k".into()];
                t.optional_service_account_annotation_keys = vec!["a.test/k".into()];
            }),
            "providers.tokenAttributes: Invalid value: [\"a.test/k\"]: annotation keys cannot be both required and optional",
        ),
        (
            token(&|t| t.cache_type = None),
            "providers.tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token",
        ),
        (
            token(&|t| t.cache_type = Some("invalid-cache-type".into())),
            "providers.tokenAttributes.cacheType: Unsupported value: \"invalid-cache-type\": supported values: \"ServiceAccount\", \"Token\"",
        ),
    ];
    for (got, want) in cases {
        assert!(got.starts_with(prefix), "{got}");
        assert!(
            got[prefix.len()..].starts_with(want),
            "{got}\n  want {want}"
        );
    }
    // Two at once: aggregated as Go prints them.
    let two = with(&|p| {
        p.api_version.clear();
        p.match_images.clear();
    });
    assert_eq!(
        two,
        format!(
            "{prefix}[providers.apiVersion: Required value, providers.matchImages: Required value: at least 1 item in matchImages is required]"
        )
    );
    // The gate off: tokenAttributes refused.
    let mut p = base.clone();
    p.token_attributes = Some(TokenAttributes {
        service_account_token_audience: "a".into(),
        cache_type: Some("Token".into()),
        require_service_account: Some(true),
        required_service_account_annotation_keys: Vec::new(),
        optional_service_account_annotation_keys: Vec::new(),
    });
    validate(std::slice::from_ref(&p), true).unwrap();
    assert!(
        validate(&[p], false)
            .unwrap_err()
            .to_string()
            .contains("tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled")
    );
}

#[test]
fn which_images_a_provider_is_asked_for() {
    let p = provider(ECR).unwrap().remove(0);
    for (image, want) in [
        ("123.dkr.ecr.us-east-1.amazonaws.com/app", true),
        ("123.dkr.ecr.amazonaws.com/app", false),
        ("registry.test:5000/team/app", true),
        ("registry.test:5000/other/app", false),
        ("registry.test/team/app", false),
        ("docker.io/library/busybox", false),
    ] {
        assert_eq!(p.matches(image), want, "{image}");
    }
}

#[test]
fn the_exec_protocol_as_upstream_speaks_it() {
    let annotations = BTreeMap::from([("domain.io/annotation1".to_owned(), "value1".to_owned())]);
    assert_eq!(
        request_json(
            API_V1,
            "test.registry.io/foobar",
            "service-account-token",
            &annotations
        ),
        "{\"kind\":\"CredentialProviderRequest\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":\"test.registry.io/foobar\",\"serviceAccountToken\":\"service-account-token\",\"serviceAccountAnnotations\":{\"domain.io/annotation1\":\"value1\"}}\n"
    );
    assert_eq!(
        request_json(API_V1, "r.test/a", "", &BTreeMap::new()),
        "{\"kind\":\"CredentialProviderRequest\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":\"r.test/a\"}\n"
    );
    let ok = br#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"5m","auth":{"r.test":{"username":"u","password":"p"}}}"#;
    let r = decode_response(API_V1, ok).unwrap();
    assert_eq!(r.cache_key_type, CacheKeyType::Registry);
    assert_eq!(r.cache_duration, Some(Duration::from_secs(300)));
    assert_eq!(r.auth["r.test"].username, "u");
    let bad: &[(&[u8], &str)] = &[
        (b"not json", "error reading GVK from response"),
        (
            br#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","cacheKeyType":"Image"}"#,
            "apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1",
        ),
        (
            br#"{"kind":"Other","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image"}"#,
            "error decoding credential provider plugin response from stdout",
        ),
        (
            br#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image","auth":{"r.test":{"username":"u","password":"secret","extra":1}}}"#,
            "error decoding credential provider plugin response from stdout",
        ),
        (
            br#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Forever"}"#,
            "credential provider plugin did not return a valid cacheKeyType: Forever",
        ),
    ];
    for (stdout, want) in bad {
        let got = decode_response(API_V1, stdout).unwrap_err().to_string();
        assert!(got.starts_with(want), "{got}");
        assert!(!got.contains("secret"), "an answer is never shown: {got}");
    }
    // A token handed back as a password: only for the Token cache type.
    let echo = Response {
        cache_key_type: CacheKeyType::Image,
        cache_duration: None,
        auth: BTreeMap::from([(
            "r.test".to_owned(),
            AuthConfig {
                username: "u".into(),
                password: "tok".into(),
            },
        )]),
    };
    assert!(check_token_echo(&echo, "tok", Some(CacheType::Token)).is_ok());
    assert_eq!(
        check_token_echo(&echo, "tok", Some(CacheType::ServiceAccount)),
        Err(ResponseError::TokenEchoed)
    );
    assert!(check_token_echo(&echo, "other", Some(CacheType::ServiceAccount)).is_ok());
}

#[test]
fn answers_are_cached_by_their_key_type_for_their_duration() {
    let image = "registry.test:5000/team/app";
    assert_eq!(
        lookup_keys(image),
        [image, "registry.test:5000", "<global>"]
    );
    for (kind, want) in [
        (CacheKeyType::Image, image),
        (CacheKeyType::Registry, "registry.test:5000"),
        (CacheKeyType::Global, "<global>"),
    ] {
        assert_eq!(cache_key(kind, image), want);
    }
    let answer = |d: Option<u64>| Response {
        cache_key_type: CacheKeyType::Image,
        cache_duration: d.map(Duration::from_secs),
        auth: BTreeMap::new(),
    };
    let default = Duration::from_secs(60);
    assert_eq!(
        cache_ttl(&answer(Some(5)), default),
        Some(Duration::from_secs(5))
    );
    assert_eq!(cache_ttl(&answer(None), default), Some(default));
    assert_eq!(cache_ttl(&answer(Some(0)), default), None);
    assert_eq!(cache_ttl(&answer(None), Duration::ZERO), None);
    let annotations = BTreeMap::from([("a.test/role".to_owned(), "puller".to_owned())]);
    let sa = Some(("ns", "builder", "uid-1"));
    assert_eq!(service_account_key(None, &annotations, Some("t")), "");
    let by_account = service_account_key(sa, &annotations, None);
    assert_ne!(by_account, service_account_key(sa, &BTreeMap::new(), None));
    assert_ne!(
        by_account,
        service_account_key(Some(("ns", "builder", "uid-2")), &annotations, None)
    );
    let by_token = service_account_key(sa, &annotations, Some("t1"));
    assert_ne!(by_token, service_account_key(sa, &annotations, Some("t2")));
    assert!(!by_token.contains("t1"), "the token itself is not kept");
    assert_eq!(
        config_hash(&[b"a", b"bc"]),
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(b"\0\0\0\0\0\0\0\x01a\0\0\0\0\0\0\0\x02bc"))
        )
    );
}
