//! The kubelet API's handlers once a request is authenticated and authorized
//! (upstream: InstallAuthNotRequiredHandlers, InstallAuthRequiredHandlers
//! and InstallDebuggingDisabledHandlers in pkg/kubelet/server/server.go).
//! What the handlers serve (pods, stats, metrics) the kubelet hands them
//! through [`NodeView`]; they only answer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_core::config::KubeletConfiguration;
use kubelet_cri::v1 as cri;
use tokio_util::sync::CancellationToken;

use crate::response::text_response;
use crate::streaming::{self, StreamKind};
use crate::{Body, NodeView, full};
use kubelet_tasks::Tasks;

/// Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

fn typed_response(content_type: &'static str, body: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut resp = Response::new(full(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn json_response(value: &serde_json::Value) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(body) => typed_response("application/json", body),
        Err(e) => text_response(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

fn not_found() -> Response<Body> {
    text_response(StatusCode::NOT_FOUND, "404 page not found\n")
}

/// 405 for a read-only endpoint called with another method (upstream's GETOnlyRestfulFilter).
fn get_only() -> Response<Body> {
    let mut resp = text_response(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    resp
}

/// The server's settings from the KubeletConfiguration.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `enableDebuggingHandlers`.
    pub enable_debugging_handlers: bool,
    /// `streamingConnectionIdleTimeout`.
    pub streaming_idle_timeout: Duration,
    /// `/logs/`: enableSystemLogHandler, enableSystemLogQuery, the directory.
    pub node_logs: crate::nodelogs::Settings,
}

impl Settings {
    pub fn from_config(cfg: &KubeletConfiguration) -> Self {
        Settings {
            enable_debugging_handlers: cfg.enable_debugging_handlers,
            streaming_idle_timeout: cfg.streaming_connection_idle_timeout,
            node_logs: crate::nodelogs::Settings {
                handler: cfg.enable_system_log_handler,
                query: cfg.enable_system_log_query,
                ..Default::default()
            },
        }
    }
}

/// Which handlers a server has (upstream's NewServer with and without
/// auth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The kubelet API: every handler, behind authentication and
    /// authorization.
    Full,
    /// The read-only port (readOnlyPort): upstream's
    /// InstallAuthNotRequiredHandlers only — `/healthz`, `/pods`, `/stats`
    /// and the `/metrics` families.
    ReadOnly,
}

/// The handlers and what they need for the server's lifetime.
pub struct Router {
    view: Arc<dyn NodeView>,
    settings: Settings,
    tasks: Tasks,
    cancel: CancellationToken,
    scope: Scope,
}

/// The checks upstream's /healthz always lists (the sync loop's is
/// "syncloop"; the kubelet reports failing ones through `NodeView::problems`).
const HEALTH_CHECKS: &[&str] = &["ping", "log", "syncloop"];

impl Router {
    pub fn new(
        view: Arc<dyn NodeView>,
        settings: Settings,
        tasks: Tasks,
        cancel: CancellationToken,
    ) -> Self {
        Router {
            view,
            settings,
            tasks,
            cancel,
            scope: Scope::Full,
        }
    }

    /// The same handlers, limited to `scope`.
    pub fn with_scope(self, scope: Scope) -> Self {
        Router { scope, ..self }
    }

    /// Answers an authorized request.
    pub async fn route<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body + Send + 'static,
    {
        let path = req.uri().path().to_owned();
        let query = req.uri().query().map(str::to_owned);
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let view = self.view.as_ref();
        let debugging = self.settings.enable_debugging_handlers;
        let is_get = req.method() == Method::GET;
        let open = matches!(
            segments.as_slice(),
            ["healthz", ..] | ["pods", ..] | ["stats", ..] | ["metrics", ..]
        );
        if self.scope == Scope::ReadOnly && !open {
            return not_found();
        }
        match segments.as_slice() {
            ["healthz", rest @ ..] => healthz(view, rest, query.as_deref()),
            ["pods"] | ["pods", ""] if !is_get => get_only(),
            ["pods"] | ["pods", ""] => json_response(&pod_list(view.pods())),
            ["configz"] if !is_get => get_only(),
            ["configz"] => json_response(&serde_json::json!({ "kubeletconfig": view.configz() })),
            ["metrics"] => typed_response(PROMETHEUS_TEXT, view.metrics_text()),
            ["metrics", "probes"] => typed_response(PROMETHEUS_TEXT, view.probe_metrics_text()),
            ["metrics", "cadvisor"] => {
                typed_response(PROMETHEUS_TEXT, view.cadvisor_metrics_text().await)
            }
            ["metrics", "resource"] => {
                typed_response(PROMETHEUS_TEXT, view.resource_metrics_text().await)
            }
            ["stats", "summary"] | ["stats", "summary", ""] if !is_get => get_only(),
            ["stats", "summary"] | ["stats", "summary", ""] => {
                let only = form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
                    .any(|(k, v)| k == "only_cpu_and_memory" && v == "true");
                match view.summary(only).await {
                    Ok(summary) => json_response(&summary),
                    Err(e) => text_response(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
                }
            }
            [endpoint, ..]
                if !debugging
                    && matches!(
                        *endpoint,
                        "run"
                            | "exec"
                            | "attach"
                            | "portForward"
                            | "containerLogs"
                            | "runningpods"
                            | "logs"
                    ) =>
            {
                text_response(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Debug endpoints are disabled.\n",
                )
            }
            ["logs", ..] if !self.settings.node_logs.handler => text_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "logs endpoint is disabled.\n",
            ),
            ["logs", ..] if !is_get => get_only(),
            ["logs", ..] => {
                let gzip = req
                    .headers()
                    .get(header::ACCEPT_ENCODING)
                    .is_some_and(|v| v == "gzip");
                crate::nodelogs::serve(&self.settings.node_logs, &path, query.as_deref(), gzip)
                    .await
            }
            ["runningpods", ""] | ["runningpods"] if !is_get => get_only(),
            ["runningpods", ""] | ["runningpods"] => match running_pods(view).await {
                Ok(list) => json_response(&list),
                Err(e) => text_response(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
            },
            ["containerLogs", ..] if !is_get => get_only(),
            ["containerLogs", ns, pod, container] if ![ns, pod, container].contains(&&"") => {
                crate::logs::container_logs(
                    view,
                    ns,
                    pod,
                    container,
                    query.as_deref(),
                    &self.tasks,
                    &self.cancel,
                )
                .await
            }
            [endpoint, rest @ ..]
                if matches!(*req.method(), Method::GET | Method::POST)
                    && matches!(*endpoint, "exec" | "attach" | "portForward") =>
            {
                let kind = match *endpoint {
                    "exec" => StreamKind::Exec,
                    "attach" => StreamKind::Attach,
                    _ => StreamKind::PortForward,
                };
                let rest: Vec<&str> = rest.to_vec();
                streaming::handle(
                    view,
                    kind,
                    &rest,
                    req,
                    self.settings.streaming_idle_timeout,
                    &self.tasks,
                    &self.cancel,
                )
                .await
                .unwrap_or_else(not_found)
            }
            _ => not_found(),
        }
    }
}

/// `/healthz` (and `/healthz/<check>`): "ok", or upstream's listing with the
/// failing checks and a 500.
fn healthz(view: &dyn NodeView, rest: &[&str], query: Option<&str>) -> Response<Body> {
    let problems = view.problems();
    let failing: BTreeMap<&str, &str> = problems
        .iter()
        .map(|(name, reason)| (*name, reason.as_str()))
        .collect();
    let mut names: Vec<&str> = HEALTH_CHECKS.to_vec();
    names.extend(failing.keys().filter(|n| !HEALTH_CHECKS.contains(n)));
    match rest {
        [] | [""] => {}
        [check] if names.contains(check) => {
            return match failing.get(check) {
                None => text_response(StatusCode::OK, "ok"),
                Some(reason) => {
                    tracing::info!(check, reason, "healthz check failed");
                    text_response(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal server error: reason withheld\n",
                    )
                }
            };
        }
        _ => return not_found(),
    }
    let verbose =
        form_urlencoded::parse(query.unwrap_or("").as_bytes()).any(|(k, _)| k == "verbose");
    if failing.is_empty() && !verbose {
        return text_response(StatusCode::OK, "ok");
    }
    let mut body = String::new();
    for name in &names {
        match failing.get(name) {
            None => body.push_str(&format!("[+]{name} ok\n")),
            Some(reason) => {
                tracing::info!(check = name, reason, "healthz check failed");
                body.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    if failing.is_empty() {
        body.push_str("healthz check passed\n");
        text_response(StatusCode::OK, body)
    } else {
        body.push_str("healthz check failed\n");
        text_response(StatusCode::INTERNAL_SERVER_ERROR, body)
    }
}

/// A v1 PodList of `pods`, as upstream's encodePods.
fn pod_list(pods: Vec<Pod>) -> serde_json::Value {
    serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": pods,
    })
}

/// Why `/runningpods/` failed.
#[derive(Debug, thiserror::Error)]
#[error("failed to list running pods: {0}")]
pub struct RunningPodsError(#[from] kubelet_cri::client::CriError);

/// `/runningpods/`: the pods the runtime runs (ready sandboxes and running
/// containers grouped by pod UID), each as upstream's Pod.ToAPIPod: name,
/// namespace, uid, and the containers' names and images.
async fn running_pods(view: &dyn NodeView) -> Result<serde_json::Value, RunningPodsError> {
    let cri = view.cri();
    let sandboxes = cri
        .list_pod_sandbox(Some(cri::PodSandboxFilter {
            state: Some(cri::PodSandboxStateValue {
                state: cri::PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        }))
        .await?;
    let containers = cri
        .list_containers(Some(cri::ContainerFilter {
            state: Some(cri::ContainerStateValue {
                state: cri::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }))
        .await?;
    Ok(pod_list(group_running(&sandboxes, &containers)))
}

const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// Groups sandboxes and containers into pods by pod UID (sorted by
/// namespace/name for a stable answer).
fn group_running(sandboxes: &[cri::PodSandbox], containers: &[cri::Container]) -> Vec<Pod> {
    let mut pods: HashMap<String, Pod> = HashMap::new();
    let label = |labels: &HashMap<String, String>, key: &str| labels.get(key).cloned();
    for s in sandboxes {
        let meta = s.metadata.clone().unwrap_or_default();
        let uid = label(&s.labels, POD_UID_LABEL).unwrap_or(meta.uid);
        pods.entry(uid.clone()).or_insert_with(|| Pod {
            metadata: ObjectMeta {
                name: label(&s.labels, POD_NAME_LABEL).or(Some(meta.name)),
                namespace: label(&s.labels, POD_NAMESPACE_LABEL).or(Some(meta.namespace)),
                uid: Some(uid),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            ..Pod::default()
        });
    }
    for c in containers {
        let Some(uid) = label(&c.labels, POD_UID_LABEL) else {
            continue;
        };
        let pod = pods.entry(uid.clone()).or_insert_with(|| Pod {
            metadata: ObjectMeta {
                name: label(&c.labels, POD_NAME_LABEL),
                namespace: label(&c.labels, POD_NAMESPACE_LABEL),
                uid: Some(uid),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            ..Pod::default()
        });
        let name = label(&c.labels, CONTAINER_NAME_LABEL)
            .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default();
        if let Some(spec) = pod.spec.as_mut() {
            spec.containers.push(Container {
                name,
                image: c.image.as_ref().map(|i| i.image.clone()),
                ..Container::default()
            });
        }
    }
    let mut list: Vec<Pod> = pods.into_values().collect();
    list.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn running_pods_group_sandboxes_and_containers() {
        let sandboxes = vec![cri::PodSandbox {
            id: "s1".into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "uid-1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: labels(&[(POD_UID_LABEL, "uid-1")]),
            ..Default::default()
        }];
        let container = |pod_uid: &str, pod: &str, name: &str, image: &str| cri::Container {
            id: format!("{pod}-{name}"),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            labels: labels(&[
                (POD_UID_LABEL, pod_uid),
                (POD_NAME_LABEL, pod),
                (POD_NAMESPACE_LABEL, "kube-system"),
                (CONTAINER_NAME_LABEL, name),
            ]),
            ..Default::default()
        };
        let containers = vec![
            container("uid-1", "web", "nginx", "docker.io/library/nginx:1.27"),
            container("uid-2", "dns", "coredns", "registry.k8s.io/coredns:v1.11"),
            cri::Container {
                id: "unlabelled".into(),
                ..Default::default()
            },
        ];
        let pods = group_running(&sandboxes, &containers);
        type Row = (String, String, String, Vec<(String, String)>);
        let summary: Vec<Row> = pods
            .iter()
            .map(|p| {
                (
                    p.metadata.namespace.clone().unwrap(),
                    p.metadata.name.clone().unwrap(),
                    p.metadata.uid.clone().unwrap(),
                    p.spec
                        .as_ref()
                        .unwrap()
                        .containers
                        .iter()
                        .map(|c| (c.name.clone(), c.image.clone().unwrap()))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "default".to_owned(),
                    "web".to_owned(),
                    "uid-1".to_owned(),
                    vec![(
                        "nginx".to_owned(),
                        "docker.io/library/nginx:1.27".to_owned()
                    )]
                ),
                (
                    "kube-system".to_owned(),
                    "dns".to_owned(),
                    "uid-2".to_owned(),
                    vec![(
                        "coredns".to_owned(),
                        "registry.k8s.io/coredns:v1.11".to_owned()
                    )]
                ),
            ]
        );
        let list = pod_list(pods);
        assert_eq!(list["kind"], "PodList");
        assert_eq!(list["items"][0]["spec"]["containers"][0]["name"], "nginx");
    }

    /// A view whose only live part is the runtime (and the problems).
    struct Problems(
        Vec<(&'static str, String)>,
        Option<kubelet_cri::client::CriClient>,
    );

    #[tokio::test]
    async fn running_pods_come_from_the_runtime() {
        use kubelet_cri::fake::FakeRuntime;
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeRuntime::start(&dir.path().join("cri.sock"))
            .await
            .unwrap();
        fake.add_image("docker.io/library/nginx:1.27");
        let cri =
            kubelet_cri::client::CriClient::connect_lazy(&fake.endpoint(), Duration::from_secs(5))
                .unwrap();
        let sandbox = |name: &str, uid: &str| cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: labels(&[
                (POD_UID_LABEL, uid),
                (POD_NAME_LABEL, name),
                (POD_NAMESPACE_LABEL, "default"),
            ]),
            ..Default::default()
        };
        let container = |pod: &str, uid: &str, name: &str| cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: "docker.io/library/nginx:1.27".into(),
                ..Default::default()
            }),
            labels: labels(&[
                (POD_UID_LABEL, uid),
                (POD_NAME_LABEL, pod),
                (POD_NAMESPACE_LABEL, "default"),
                (CONTAINER_NAME_LABEL, name),
            ]),
            ..Default::default()
        };
        let web = cri
            .run_pod_sandbox(sandbox("web", "uid-1"), String::new())
            .await
            .unwrap();
        let running = cri
            .create_container(
                &web,
                container("web", "uid-1", "nginx"),
                sandbox("web", "uid-1"),
            )
            .await
            .unwrap();
        cri.start_container(&running).await.unwrap();
        // Created but never started: not running.
        cri.create_container(
            &web,
            container("web", "uid-1", "sidecar"),
            sandbox("web", "uid-1"),
        )
        .await
        .unwrap();
        // A stopped pod: not listed.
        let gone = cri
            .run_pod_sandbox(sandbox("gone", "uid-2"), String::new())
            .await
            .unwrap();
        cri.stop_pod_sandbox(&gone).await.unwrap();

        let view = Problems(Vec::new(), Some(cri));
        let list = running_pods(&view).await.unwrap();
        let items = list["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{list}");
        assert_eq!(items[0]["metadata"]["name"], "web");
        assert_eq!(items[0]["metadata"]["uid"], "uid-1");
        let containers = items[0]["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "{list}");
        assert_eq!(containers[0]["name"], "nginx");
        assert_eq!(containers[0]["image"], "docker.io/library/nginx:1.27");
        fake.shutdown().await;
    }

    impl NodeView for Problems {
        fn node_name(&self) -> String {
            "node-a".to_owned()
        }
        fn problems(&self) -> Vec<(&'static str, String)> {
            self.0.clone()
        }
        fn pods(&self) -> Vec<Pod> {
            Vec::new()
        }
        fn cri(&self) -> kubelet_cri::client::CriClient {
            self.1.clone().expect("a runtime")
        }
        fn logs_root(&self) -> std::path::PathBuf {
            unreachable!()
        }
        fn configz(&self) -> serde_json::Value {
            unreachable!()
        }
        fn metrics_text(&self) -> String {
            unreachable!()
        }
        fn probe_metrics_text(&self) -> String {
            unreachable!()
        }
        fn summary(
            &self,
            _only_cpu_and_memory: bool,
        ) -> futures::future::BoxFuture<'_, Result<serde_json::Value, crate::BoxError>> {
            Box::pin(async { Ok(serde_json::json!({})) })
        }
        fn resource_metrics_text(&self) -> futures::future::BoxFuture<'_, String> {
            Box::pin(async { String::new() })
        }
        fn cadvisor_metrics_text(&self) -> futures::future::BoxFuture<'_, String> {
            Box::pin(async { String::new() })
        }
    }

    async fn body_text(resp: Response<Body>) -> (u16, String) {
        use http_body_util::BodyExt;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    /// The read-only port answers upstream's auth-not-required handlers and
    /// nothing else; the full router answers `/logs/` as upstream's.
    #[tokio::test]
    async fn scopes_and_the_logs_endpoint() {
        let view: Arc<dyn NodeView> = Arc::new(Problems(Vec::new(), None));
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("syslog"), "hello\n").unwrap();
        let settings = |handler: bool| Settings {
            enable_debugging_handlers: true,
            streaming_idle_timeout: Duration::from_secs(60),
            node_logs: crate::nodelogs::Settings {
                handler,
                query: false,
                dir: tmp.path().to_owned(),
            },
        };
        let router = |scope: Scope, handler: bool| {
            let tasks = Tasks::new(CancellationToken::new());
            Router::new(
                view.clone(),
                settings(handler),
                tasks,
                CancellationToken::new(),
            )
            .with_scope(scope)
        };
        let get = |r: Router, path: &'static str, method: Method| async move {
            let req = Request::builder()
                .method(method)
                .uri(path)
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            body_text(r.route(req).await).await
        };
        for (path, want) in [
            ("/healthz", 200),
            ("/pods", 200),
            ("/logs/syslog", 404),
            ("/configz", 404),
            ("/containerLogs/ns/p/c", 404),
            ("/exec/ns/p/c", 404),
            ("/runningpods/", 404),
        ] {
            let got = get(router(Scope::ReadOnly, true), path, Method::GET)
                .await
                .0;
            assert_eq!(got, want, "read-only {path}");
        }
        assert_eq!(
            get(router(Scope::Full, true), "/logs/syslog", Method::GET).await,
            (200, "hello\n".to_owned())
        );
        assert_eq!(
            get(router(Scope::Full, true), "/logs/syslog", Method::POST)
                .await
                .0,
            405
        );
        assert_eq!(
            get(router(Scope::Full, false), "/logs/syslog", Method::GET).await,
            (405, "logs endpoint is disabled.\n".to_owned())
        );
    }

    #[tokio::test]
    async fn healthz_answers() {
        let healthy = Problems(Vec::new(), None);
        let failing = Problems(
            vec![
                ("syncloop", "sync loop stuck".to_owned()),
                ("pleg", "relist too slow".to_owned()),
            ],
            None,
        );
        type Case<'a> = (&'a Problems, &'a [&'a str], Option<&'a str>, u16, &'a str);
        let cases: &[Case] = &[
            (&healthy, &[], None, 200, "ok"),
            (&healthy, &[""], None, 200, "ok"),
            (
                &healthy,
                &[],
                Some("verbose"),
                200,
                "[+]ping ok\n[+]log ok\n[+]syncloop ok\nhealthz check passed\n",
            ),
            (&healthy, &["ping"], None, 200, "ok"),
            (&healthy, &["nope"], None, 404, "404 page not found\n"),
            (
                &failing,
                &[],
                None,
                500,
                "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[-]pleg failed: reason withheld\nhealthz check failed\n",
            ),
            (&failing, &["log"], None, 200, "ok"),
            (
                &failing,
                &["syncloop"],
                None,
                500,
                "internal server error: reason withheld\n",
            ),
        ];
        for (view, rest, query, status, body) in cases {
            let got = body_text(healthz(*view, rest, *query)).await;
            assert_eq!(got, (*status, body.to_string()), "{rest:?} {query:?}");
        }
    }
}
