//! Authentication and authorization of kubelet API requests (upstream:
//! pkg/kubelet/server/auth.go, cmd/kubelet/app/auth.go and the apiserver's
//! delegating authenticator/authorizer).
//!
//! Authentication, in upstream's order: a client certificate verified by the
//! TLS layer (user = CN, groups = O), then an `Authorization: Bearer` token
//! checked with a TokenReview (webhook authentication, answers cached for
//! `authentication.webhook.cacheTTL`), then — only when
//! `authentication.anonymous.enabled` — `system:anonymous`. Authenticated
//! users get the `system:authenticated` group as upstream adds it.
//!
//! Authorization: the request maps to `nodes/<subresource>` attributes on the
//! node ([`request_attributes`]); in Webhook mode each is checked with a
//! SubjectAccessReview (decisions cached for cacheAuthorizedTTL /
//! cacheUnauthorizedTTL) and the first allowed one lets the request through.
//! The API calls sit behind [`Reviewer`].

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kubelet_api::client::ApiClient;
use kubelet_core::config::{AuthorizationMode, KubeletConfiguration};
use rustls::pki_types::CertificateDer;
use tokio::time::Instant;

/// The group every authenticated (non-anonymous) user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The anonymous user's name.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The anonymous user's group.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// Most entries a decision cache keeps (upstream's LRU holds 4096 for tokens
/// and 10000 for authorization decisions).
const CACHE_LIMIT: usize = 4096;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with `name` and `groups`, no uid or extra.
    pub fn new(name: impl Into<String>, groups: Vec<String>) -> Self {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups,
            extra: BTreeMap::new(),
        }
    }

    fn anonymous() -> Self {
        UserInfo::new(ANONYMOUS_USER, vec![UNAUTHENTICATED_GROUP.to_owned()])
    }

    /// Adds `system:authenticated` unless already there (upstream's
    /// AuthenticatedGroupAdder).
    fn with_authenticated_group(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.to_owned());
        }
        self
    }
}

/// The user of a client certificate the TLS layer verified: CN and the
/// organizations (upstream's CommonNameUserConversion); `None` when the
/// certificate cannot be parsed or has no CN.
pub fn x509_user(cert: &CertificateDer<'_>) -> Option<UserInfo> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let subject = parsed.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?;
    if name.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some(UserInfo::new(name, groups))
}

/// The token of an `Authorization: Bearer <token>` header (upstream's
/// bearertoken authenticator: scheme case-insensitive, token non-empty).
pub fn bearer_token(header: &str) -> Option<&str> {
    let mut parts = header.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The subprotocol prefix carrying a bearer token on WebSocket requests
/// (browsers cannot set an Authorization header).
const WEBSOCKET_TOKEN_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// A bearer token passed as a WebSocket subprotocol that cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WebSocketTokenError {
    #[error("multiple base64.bearer.authorization tokens specified")]
    Multiple,
    #[error("invalid base64.bearer.authorization token encoding")]
    Encoding,
    #[error("invalid base64.bearer.authorization token")]
    NotUtf8,
    #[error("missing additional subprotocol")]
    NoOtherProtocol,
}

/// The bearer token of a `base64url.bearer.authorization.k8s.io.<token>`
/// entry of the `Sec-WebSocket-Protocol` values (upstream's
/// ProtocolAuthenticator), with the other subprotocols joined by "," (what
/// the header becomes once the token is taken out). `None` without one.
pub fn websocket_token<'a>(
    protocol_headers: impl IntoIterator<Item = &'a str>,
) -> Result<Option<(String, String)>, WebSocketTokenError> {
    use base64::Engine as _;
    let mut token = None;
    let mut others = Vec::new();
    for header in protocol_headers {
        for protocol in header.split(',').map(str::trim) {
            let Some(encoded) = protocol.strip_prefix(WEBSOCKET_TOKEN_PREFIX) else {
                others.push(protocol);
                continue;
            };
            if token.is_some() {
                return Err(WebSocketTokenError::Multiple);
            }
            let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(encoded)
                .map_err(|_| WebSocketTokenError::Encoding)?;
            token = Some(String::from_utf8(decoded).map_err(|_| WebSocketTokenError::NotUtf8)?);
        }
    }
    match token {
        Some(t) if t.is_empty() => Ok(None),
        Some(_) if others.is_empty() => Err(WebSocketTokenError::NoOtherProtocol),
        Some(t) => Ok(Some((t, others.join(",")))),
        None => Ok(None),
    }
}

/// The authorization attributes of a request: verb from the HTTP method,
/// `nodes/<subresource>` named after the node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// create/get/update/patch/delete, or "" for other methods (as upstream).
    pub verb: &'static str,
    pub subresource: &'static str,
}

/// The API verb of an HTTP method (upstream: HEAD and others map to "").
pub fn api_verb(method: &hyper::Method) -> &'static str {
    match *method {
        hyper::Method::POST => "create",
        hyper::Method::GET => "get",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE => "delete",
        _ => "",
    }
}

/// Whether `path` is `prefix` or below it (upstream's isSubpath).
fn is_subpath(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The attributes to authorize, in order, as upstream's
/// GetRequestAttributes with KubeletFineGrainedAuthz (GA since v1.36, so on
/// in v1.37): /stats → stats, /metrics → metrics, /logs → log, /checkpoint →
/// checkpoint; /pods and /runningpods → pods then proxy, /healthz → healthz
/// then proxy, /configz → configz then proxy; everything else → proxy.
pub fn request_attributes(method: &hyper::Method, path: &str) -> Vec<Attributes> {
    let verb = api_verb(method);
    let subresources: &[&'static str] = match path {
        p if is_subpath(p, "/stats") => &["stats"],
        p if is_subpath(p, "/metrics") => &["metrics"],
        p if is_subpath(p, "/logs") => &["log"],
        p if is_subpath(p, "/checkpoint") => &["checkpoint"],
        p if is_subpath(p, "/pods") || is_subpath(p, "/runningpods") => &["pods", "proxy"],
        p if is_subpath(p, "/healthz") => &["healthz", "proxy"],
        p if is_subpath(p, "/configz") => &["configz", "proxy"],
        _ => &["proxy"],
    };
    subresources
        .iter()
        .map(|&subresource| Attributes { verb, subresource })
        .collect()
}

/// A TokenReview or SubjectAccessReview that could not be made.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(pub String);

/// The API-server calls behind authentication and authorization.
pub trait Reviewer: Send + Sync + 'static {
    /// TokenReview of `token`: the user when authenticated, `None` when not;
    /// an error when the review failed or reported `status.error`.
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, ReviewError>>;

    /// SubjectAccessReview: may `user` do `attrs` on `nodes/<node>`?
    fn review_access<'a>(
        &'a self,
        user: &'a UserInfo,
        node: &'a str,
        attrs: &'a Attributes,
    ) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// The [`Reviewer`] of a standalone kubelet: with no API server there is
/// nobody to review tokens or access, so webhook authentication and
/// authorization fail closed (x509, anonymous and AlwaysAllow still work).
#[derive(Debug)]
pub struct NoApiServer;

impl Reviewer for NoApiServer {
    fn review_token<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, ReviewError>> {
        Box::pin(async { Err(ReviewError(NO_API_SERVER.into())) })
    }

    fn review_access<'a>(
        &'a self,
        _: &'a UserInfo,
        _: &'a str,
        _: &'a Attributes,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async { Err(ReviewError(NO_API_SERVER.into())) })
    }
}

const NO_API_SERVER: &str = "no API server configured (standalone): webhook authentication and authorization are unavailable";

/// The [`Reviewer`] of a running kubelet: reviews created through its API
/// client (so they count against kubeAPIQPS like upstream's).
pub struct KubeReviewer {
    api: ApiClient,
}

impl KubeReviewer {
    pub fn new(api: ApiClient) -> Self {
        KubeReviewer { api }
    }
}

impl Reviewer for KubeReviewer {
    fn review_token<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, ReviewError>> {
        Box::pin(async move {
            let reviews: Api<TokenReview> = Api::all(self.api.client().clone());
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: token.to_owned(),
                    audiences: None,
                },
                ..TokenReview::default()
            };
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| ReviewError(format!("create TokenReview: {e}")))?;
            let status = answer.status.unwrap_or_default();
            if status.authenticated != Some(true) {
                return match status.error.filter(|e| !e.is_empty()) {
                    Some(e) => Err(ReviewError(e)),
                    None => Ok(None),
                };
            }
            let user = status.user.unwrap_or_default();
            Ok(Some(UserInfo {
                name: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }))
        })
    }

    fn review_access<'a>(
        &'a self,
        user: &'a UserInfo,
        node: &'a str,
        attrs: &'a Attributes,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            let reviews: Api<SubjectAccessReview> = Api::all(self.api.client().clone());
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                    groups: Some(user.groups.clone()),
                    extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(attrs.verb.to_owned()),
                        version: Some("v1".to_owned()),
                        resource: Some("nodes".to_owned()),
                        subresource: Some(attrs.subresource.to_owned()),
                        name: Some(node.to_owned()),
                        ..ResourceAttributes::default()
                    }),
                    non_resource_attributes: None,
                },
                ..SubjectAccessReview::default()
            };
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| ReviewError(format!("create SubjectAccessReview: {e}")))?;
            Ok(answer.status.is_some_and(|s| s.allowed))
        })
    }
}

/// What the caller's request carries for authentication.
#[derive(Debug, Default)]
pub struct Credentials<'a> {
    /// The user of a client certificate the TLS layer verified.
    pub client_cert_user: Option<UserInfo>,
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    /// A bearer token from a WebSocket subprotocol ([`websocket_token`]).
    pub websocket_token: Option<String>,
}

/// Why a request is turned away.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// 401: no acceptable credentials.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403 with upstream's body.
    #[error("Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)=[{}])\n", subresources.join(" "))]
    Forbidden {
        user: String,
        verb: &'static str,
        subresources: Vec<&'static str>,
    },
    /// 500: a SubjectAccessReview failed.
    #[error(
        "Authorization error (user={user}, verb={verb}, resource=nodes, subresource={subresource})"
    )]
    AuthorizationError {
        user: String,
        verb: &'static str,
        subresource: &'static str,
    },
}

impl Denied {
    /// The HTTP status of the answer.
    pub fn status(&self) -> hyper::StatusCode {
        match self {
            Denied::Unauthorized => hyper::StatusCode::UNAUTHORIZED,
            Denied::Forbidden { .. } => hyper::StatusCode::FORBIDDEN,
            Denied::AuthorizationError { .. } => hyper::StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// A cache of answers, each valid until its deadline.
struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: std::hash::Hash + Eq, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock();
        entries
            .get(key)
            .filter(|(deadline, _)| Instant::now() < *deadline)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: K, value: V, ttl: Duration) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= CACHE_LIMIT {
            entries.retain(|_, (deadline, _)| now < *deadline);
            if entries.len() >= CACHE_LIMIT {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }
}

/// The kubelet API's authenticator and authorizer, built from the
/// KubeletConfiguration (`authentication`, `authorization`).
pub struct Auth {
    node_name: String,
    webhook_authn: bool,
    token_ttl: Duration,
    anonymous: bool,
    mode: AuthorizationMode,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    reviewer: Arc<dyn Reviewer>,
    /// token → reviewed user (`None`: not authenticated). Tokens are kept in
    /// memory only, as long as their answer is cached.
    tokens: TtlCache<String, Option<UserInfo>>,
    decisions: TtlCache<(UserInfo, Attributes), bool>,
}

impl Auth {
    pub fn new(node_name: &str, cfg: &KubeletConfiguration, reviewer: Arc<dyn Reviewer>) -> Self {
        Auth {
            node_name: node_name.to_owned(),
            webhook_authn: cfg.authentication.webhook.enabled,
            token_ttl: cfg.authentication.webhook.cache_ttl,
            anonymous: cfg.authentication.anonymous.enabled,
            mode: cfg.authorization.mode,
            allowed_ttl: cfg.authorization.webhook.cache_authorized_ttl,
            denied_ttl: cfg.authorization.webhook.cache_unauthorized_ttl,
            reviewer,
            tokens: TtlCache::new(),
            decisions: TtlCache::new(),
        }
    }

    /// Who is calling; [`Denied::Unauthorized`] when nobody acceptable.
    pub async fn authenticate(&self, creds: Credentials<'_>) -> Result<UserInfo, Denied> {
        if let Some(user) = creds.client_cert_user {
            return Ok(user.with_authenticated_group());
        }
        if self.webhook_authn {
            if let Some(token) = creds.authorization.and_then(bearer_token)
                && let Some(user) = self.review_token(token).await?
            {
                return Ok(user.with_authenticated_group());
            }
            if let Some(token) = creds.websocket_token.as_deref() {
                // Upstream's protocol authenticator reports a rejected token
                // as an error: no anonymous fallback.
                return match self.review_token(token).await? {
                    Some(user) => Ok(user.with_authenticated_group()),
                    None => Err(Denied::Unauthorized),
                };
            }
        }
        if self.anonymous {
            return Ok(UserInfo::anonymous());
        }
        Err(Denied::Unauthorized)
    }

    /// The TokenReview answer for `token`, cached for the webhook's cacheTTL
    /// (rejections too). A failed review is a 401: upstream fails on an
    /// authenticator error rather than falling back to anonymous.
    async fn review_token(&self, token: &str) -> Result<Option<UserInfo>, Denied> {
        if let Some(cached) = self.tokens.get(&token.to_owned()) {
            return Ok(cached);
        }
        match self.reviewer.review_token(token).await {
            Ok(user) => {
                self.tokens
                    .put(token.to_owned(), user.clone(), self.token_ttl);
                Ok(user)
            }
            Err(e) => {
                tracing::warn!(error = %e, "Unable to authenticate the request due to an error");
                Err(Denied::Unauthorized)
            }
        }
    }

    /// Whether `user` may make the request `method path`.
    pub async fn authorize(
        &self,
        user: &UserInfo,
        method: &hyper::Method,
        path: &str,
    ) -> Result<(), Denied> {
        let attrs = request_attributes(method, path);
        if self.mode == AuthorizationMode::AlwaysAllow {
            return Ok(());
        }
        for a in &attrs {
            let key = (user.clone(), a.clone());
            let allowed = match self.decisions.get(&key) {
                Some(cached) => cached,
                None => {
                    let allowed = self
                        .reviewer
                        .review_access(user, &self.node_name, a)
                        .await
                        .map_err(|e| {
                            tracing::error!(error = %e, user = %user.name, verb = a.verb, subresource = a.subresource, "Authorization error");
                            Denied::AuthorizationError {
                                user: user.name.clone(),
                                verb: a.verb,
                                subresource: a.subresource,
                            }
                        })?;
                    let ttl = if allowed {
                        self.allowed_ttl
                    } else {
                        self.denied_ttl
                    };
                    self.decisions.put(key, allowed, ttl);
                    allowed
                }
            };
            if allowed {
                return Ok(());
            }
        }
        let verb = attrs.first().map_or("", |a| a.verb);
        tracing::debug!(user = %user.name, verb, "Forbidden");
        Err(Denied::Forbidden {
            user: user.name.clone(),
            verb,
            subresources: attrs.iter().map(|a| a.subresource).collect(),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A reviewer answering from tables and counting its calls.
    #[derive(Default)]
    pub(crate) struct FakeReviewer {
        /// token → user.
        pub tokens: HashMap<String, UserInfo>,
        /// (user, subresource) pairs allowed.
        pub allowed: Vec<(String, &'static str)>,
        /// Every review fails.
        pub failing: bool,
        pub token_calls: AtomicUsize,
        pub access_calls: AtomicUsize,
    }

    impl Reviewer for FakeReviewer {
        fn review_token<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<UserInfo>, ReviewError>> {
            self.token_calls.fetch_add(1, Ordering::SeqCst);
            let answer = if self.failing {
                Err(ReviewError("API server unreachable".to_owned()))
            } else {
                Ok(self.tokens.get(token).cloned())
            };
            Box::pin(async move { answer })
        }

        fn review_access<'a>(
            &'a self,
            user: &'a UserInfo,
            node: &'a str,
            attrs: &'a Attributes,
        ) -> BoxFuture<'a, Result<bool, ReviewError>> {
            self.access_calls.fetch_add(1, Ordering::SeqCst);
            assert_eq!(node, "node-a");
            let answer = if self.failing {
                Err(ReviewError("API server unreachable".to_owned()))
            } else {
                Ok(self
                    .allowed
                    .iter()
                    .any(|(u, s)| *u == user.name && *s == attrs.subresource))
            };
            Box::pin(async move { answer })
        }
    }

    fn auth_with(
        reviewer: Arc<FakeReviewer>,
        edit: impl FnOnce(&mut KubeletConfiguration),
    ) -> Auth {
        let mut cfg = KubeletConfiguration::default();
        edit(&mut cfg);
        Auth::new("node-a", &cfg, reviewer)
    }

    #[test]
    fn attributes_follow_upstream_table() {
        use hyper::Method;
        let cases: &[(Method, &str, &str, &[&str])] = &[
            (Method::GET, "/stats/summary", "get", &["stats"]),
            (Method::GET, "/stats", "get", &["stats"]),
            (Method::GET, "/statsfoo", "get", &["proxy"]),
            (Method::GET, "/metrics", "get", &["metrics"]),
            (Method::GET, "/metrics/cadvisor", "get", &["metrics"]),
            (Method::GET, "/metrics/resource", "get", &["metrics"]),
            (Method::GET, "/logs/syslog", "get", &["log"]),
            (
                Method::POST,
                "/checkpoint/ns/p/c",
                "create",
                &["checkpoint"],
            ),
            (Method::GET, "/pods", "get", &["pods", "proxy"]),
            (Method::GET, "/pods/", "get", &["pods", "proxy"]),
            (Method::GET, "/runningpods/", "get", &["pods", "proxy"]),
            (Method::GET, "/healthz", "get", &["healthz", "proxy"]),
            (Method::GET, "/healthz/ping", "get", &["healthz", "proxy"]),
            (Method::GET, "/configz", "get", &["configz", "proxy"]),
            (Method::POST, "/exec/ns/p/c", "create", &["proxy"]),
            (Method::GET, "/exec/ns/p/c", "get", &["proxy"]),
            (Method::POST, "/attach/ns/p/c", "create", &["proxy"]),
            (Method::POST, "/portForward/ns/p", "create", &["proxy"]),
            (Method::GET, "/containerLogs/ns/p/c", "get", &["proxy"]),
            (Method::PUT, "/anything", "update", &["proxy"]),
            (Method::PATCH, "/anything", "patch", &["proxy"]),
            (Method::DELETE, "/anything", "delete", &["proxy"]),
            (Method::HEAD, "/healthz", "", &["healthz", "proxy"]),
            (Method::OPTIONS, "/", "", &["proxy"]),
        ];
        for (method, path, verb, subresources) in cases {
            let attrs = request_attributes(method, path);
            let got: Vec<&str> = attrs.iter().map(|a| a.subresource).collect();
            assert_eq!(&got, subresources, "{method} {path}");
            assert!(
                attrs.iter().all(|a| a.verb == *verb),
                "{method} {path}: {attrs:?}"
            );
        }
    }

    #[test]
    fn bearer_tokens() {
        let cases = [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER abc extra", Some("abc")),
            ("Bearer ", None),
            ("Bearer", None),
            ("Basic abc", None),
            ("", None),
        ];
        for (header, want) in cases {
            assert_eq!(bearer_token(header), want, "{header:?}");
        }
    }

    #[test]
    fn websocket_tokens() {
        use base64::Engine as _;
        let enc = |t: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(t);
        let with = |t: &str| format!("{WEBSOCKET_TOKEN_PREFIX}{}", enc(t));
        let ok = |headers: &[&str]| websocket_token(headers.iter().copied());
        assert_eq!(ok(&["v5.channel.k8s.io"]), Ok(None));
        assert_eq!(ok(&[]), Ok(None));
        assert_eq!(
            ok(&[&format!("{}, v5.channel.k8s.io", with("tok"))]),
            Ok(Some(("tok".to_owned(), "v5.channel.k8s.io".to_owned())))
        );
        assert_eq!(
            ok(&["v5.channel.k8s.io", &with("tok"), "v4.channel.k8s.io"]),
            Ok(Some((
                "tok".to_owned(),
                "v5.channel.k8s.io,v4.channel.k8s.io".to_owned()
            )))
        );
        assert_eq!(
            ok(&[&with("tok")]),
            Err(WebSocketTokenError::NoOtherProtocol)
        );
        assert_eq!(
            ok(&[&format!("{},{},x", with("a"), with("b"))]),
            Err(WebSocketTokenError::Multiple)
        );
        assert_eq!(
            ok(&[&format!("{WEBSOCKET_TOKEN_PREFIX}***,x")]),
            Err(WebSocketTokenError::Encoding)
        );
        let not_utf8 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([0xff, 0xfe]);
        assert_eq!(
            ok(&[&format!("{WEBSOCKET_TOKEN_PREFIX}{not_utf8},x")]),
            Err(WebSocketTokenError::NotUtf8)
        );
    }

    #[tokio::test]
    async fn websocket_token_is_reviewed_without_anonymous_fallback() {
        let reviewer = Arc::new(FakeReviewer {
            tokens: HashMap::from([("good".to_owned(), UserInfo::new("bob", vec![]))]),
            ..FakeReviewer::default()
        });
        let auth = auth_with(reviewer, |c| c.authentication.anonymous.enabled = true);
        let creds = |t: &str| Credentials {
            client_cert_user: None,
            authorization: None,
            websocket_token: Some(t.to_owned()),
        };
        assert_eq!(auth.authenticate(creds("good")).await.unwrap().name, "bob");
        assert_eq!(
            auth.authenticate(creds("bad")).await,
            Err(Denied::Unauthorized)
        );
    }

    #[tokio::test]
    async fn client_certificate_user_is_authenticated() {
        let auth = auth_with(Arc::new(FakeReviewer::default()), |_| {});
        let user = auth
            .authenticate(Credentials {
                client_cert_user: Some(UserInfo::new("alice", vec!["dev".to_owned()])),
                authorization: Some("Bearer ignored"),
                websocket_token: None,
            })
            .await
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["dev", AUTHENTICATED_GROUP]);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_reviewed_once_within_ttl() {
        let reviewer = Arc::new(FakeReviewer {
            tokens: HashMap::from([(
                "good".to_owned(),
                UserInfo::new("system:serviceaccount:kube-system:metrics", vec![]),
            )]),
            ..FakeReviewer::default()
        });
        let auth = auth_with(reviewer.clone(), |_| {});
        let creds = || Credentials {
            client_cert_user: None,
            websocket_token: None,
            authorization: Some("Bearer good"),
        };
        let user = auth.authenticate(creds()).await.unwrap();
        assert_eq!(user.name, "system:serviceaccount:kube-system:metrics");
        assert_eq!(user.groups, [AUTHENTICATED_GROUP]);
        auth.authenticate(creds()).await.unwrap();
        assert_eq!(reviewer.token_calls.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_secs(121)).await;
        auth.authenticate(creds()).await.unwrap();
        assert_eq!(reviewer.token_calls.load(Ordering::SeqCst), 2);
        // A rejected token is cached too, and without anonymous it is a 401.
        let bad = Credentials {
            client_cert_user: None,
            websocket_token: None,
            authorization: Some("Bearer bad"),
        };
        assert_eq!(auth.authenticate(bad).await, Err(Denied::Unauthorized));
        let bad = Credentials {
            client_cert_user: None,
            websocket_token: None,
            authorization: Some("Bearer bad"),
        };
        assert_eq!(auth.authenticate(bad).await, Err(Denied::Unauthorized));
        assert_eq!(reviewer.token_calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn anonymous_only_when_enabled() {
        let reviewer = Arc::new(FakeReviewer::default());
        let off = auth_with(reviewer.clone(), |_| {});
        assert_eq!(
            off.authenticate(Credentials::default()).await,
            Err(Denied::Unauthorized)
        );
        let on = auth_with(reviewer.clone(), |c| {
            c.authentication.anonymous.enabled = true
        });
        let user = on.authenticate(Credentials::default()).await.unwrap();
        assert_eq!(user.name, ANONYMOUS_USER);
        assert_eq!(user.groups, [UNAUTHENTICATED_GROUP]);
        // An unknown token falls back to anonymous, a failing review does not.
        let unknown = Credentials {
            client_cert_user: None,
            websocket_token: None,
            authorization: Some("Bearer unknown"),
        };
        assert_eq!(on.authenticate(unknown).await.unwrap().name, ANONYMOUS_USER);
        let failing = auth_with(
            Arc::new(FakeReviewer {
                failing: true,
                ..FakeReviewer::default()
            }),
            |c| c.authentication.anonymous.enabled = true,
        );
        let creds = Credentials {
            client_cert_user: None,
            websocket_token: None,
            authorization: Some("Bearer x"),
        };
        assert_eq!(failing.authenticate(creds).await, Err(Denied::Unauthorized));
        // Webhook authentication off: tokens are not looked at.
        let no_webhook = auth_with(reviewer.clone(), |c| {
            c.authentication.webhook.enabled = false
        });
        let creds = Credentials {
            client_cert_user: None,
            websocket_token: None,
            authorization: Some("Bearer good"),
        };
        assert_eq!(
            no_webhook.authenticate(creds).await,
            Err(Denied::Unauthorized)
        );
        assert_eq!(reviewer.token_calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn decisions_are_cached_with_their_ttls() {
        use hyper::Method;
        let reviewer = Arc::new(FakeReviewer {
            allowed: vec![("alice".to_owned(), "pods"), ("bob".to_owned(), "proxy")],
            ..FakeReviewer::default()
        });
        let auth = auth_with(reviewer.clone(), |_| {});
        let alice = UserInfo::new("alice", vec![]);
        let bob = UserInfo::new("bob", vec![]);
        let carol = UserInfo::new("carol", vec![]);
        let calls = || reviewer.access_calls.load(Ordering::SeqCst);

        auth.authorize(&alice, &Method::GET, "/pods").await.unwrap();
        assert_eq!(calls(), 1, "nodes/pods allowed: proxy not asked");
        auth.authorize(&bob, &Method::GET, "/pods").await.unwrap();
        assert_eq!(calls(), 3, "nodes/pods denied, then nodes/proxy allowed");
        let err = auth
            .authorize(&carol, &Method::GET, "/pods")
            .await
            .unwrap_err();
        assert_eq!(err.status(), hyper::StatusCode::FORBIDDEN);
        const CAROL_DENIED: &str =
            "Forbidden (user=carol, verb=get, resource=nodes, subresource(s)=[pods proxy])\n";
        assert_eq!(err.to_string(), CAROL_DENIED);
        assert_eq!(calls(), 5);
        let err = auth
            .authorize(&alice, &Method::POST, "/exec/ns/p/c")
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[proxy])\n"
        );
        assert_eq!(calls(), 6);

        // Within 30s everything is cached.
        auth.authorize(&alice, &Method::GET, "/pods").await.unwrap();
        auth.authorize(&bob, &Method::GET, "/pods").await.unwrap();
        let err = auth
            .authorize(&carol, &Method::GET, "/pods")
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), CAROL_DENIED);
        assert_eq!(calls(), 6);
        // After 30s the denials are asked again, the allowances are not.
        tokio::time::advance(Duration::from_secs(31)).await;
        let err = auth
            .authorize(&carol, &Method::GET, "/pods")
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), CAROL_DENIED);
        assert_eq!(calls(), 8);
        auth.authorize(&alice, &Method::GET, "/pods").await.unwrap();
        assert_eq!(calls(), 8);
        auth.authorize(&bob, &Method::GET, "/pods").await.unwrap();
        assert_eq!(calls(), 9, "bob's pods denial expired; proxy still cached");
        // After 5m the allowances too.
        tokio::time::advance(Duration::from_secs(300)).await;
        auth.authorize(&alice, &Method::GET, "/pods").await.unwrap();
        assert_eq!(calls(), 10);
    }

    #[tokio::test]
    async fn always_allow_and_review_errors() {
        use hyper::Method;
        let failing = Arc::new(FakeReviewer {
            failing: true,
            ..FakeReviewer::default()
        });
        let auth = auth_with(failing.clone(), |_| {});
        let user = UserInfo::new("alice", vec![]);
        let err = auth
            .authorize(&user, &Method::GET, "/stats/summary")
            .await
            .unwrap_err();
        assert_eq!(err.status(), hyper::StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            err.to_string(),
            "Authorization error (user=alice, verb=get, resource=nodes, subresource=stats)"
        );
        let allow_all = auth_with(failing.clone(), |c| {
            c.authorization.mode = AuthorizationMode::AlwaysAllow
        });
        allow_all
            .authorize(&user, &Method::POST, "/exec/ns/p/c")
            .await
            .unwrap();
        assert_eq!(failing.access_calls.load(Ordering::SeqCst), 1);
    }
}
