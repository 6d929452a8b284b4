//! Helpers the crate's tests share.

use std::time::Duration;

use tokio::time::Instant;

/// Wait (on real time) until `cond` holds, failing the test naming `what`
/// after 10 s.
pub async fn until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An in-memory API server for tests: objects by URL path, GET (one or
/// 404), POST (create in the collection, 409 when it exists), PUT
/// (replace), PATCH (JSON merge patch) and DELETE, a `/status` subresource
/// being its object; every request logged as `METHOD path`.
#[derive(Clone, Default)]
pub struct FakeApi {
    pub objects:
        std::sync::Arc<parking_lot::Mutex<std::collections::BTreeMap<String, serde_json::Value>>>,
    pub log: std::sync::Arc<parking_lot::Mutex<Vec<String>>>,
}

impl FakeApi {
    /// Store `object` at `path`.
    pub fn put(&self, path: &str, object: serde_json::Value) {
        self.objects.lock().insert(path.to_owned(), object);
    }

    pub fn get(&self, path: &str) -> Option<serde_json::Value> {
        self.objects.lock().get(path).cloned()
    }

    /// A client of this server (served until the client is dropped).
    pub fn client(&self) -> kubelet_api::ApiClient {
        use http::{Method, Response, StatusCode};
        use http_body_util::BodyExt;
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<http::Request<Body>, Response<Body>>();
        let api = self.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let method = req.method().clone();
                let full = req.uri().path().to_owned();
                api.log.lock().push(format!("{method} {full}"));
                let path = full.strip_suffix("/status").unwrap_or(&full).to_owned();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let status = |code: StatusCode, reason: &str| {
                    (
                        code,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": reason, "code": code.as_u16(), "message": format!("{path} {reason}")}),
                    )
                };
                let mut objects = api.objects.lock();
                let (code, reply) = match method {
                    Method::GET => match objects.get(&path) {
                        Some(o) => (StatusCode::OK, o.clone()),
                        None => status(StatusCode::NOT_FOUND, "NotFound"),
                    },
                    Method::POST => {
                        let name = body["metadata"]["name"].as_str().unwrap_or_default();
                        let at = format!("{path}/{name}");
                        match objects.entry(at) {
                            std::collections::btree_map::Entry::Occupied(_) => {
                                status(StatusCode::CONFLICT, "AlreadyExists")
                            }
                            std::collections::btree_map::Entry::Vacant(e) => {
                                e.insert(body.clone());
                                (StatusCode::CREATED, body)
                            }
                        }
                    }
                    Method::PUT if objects.contains_key(&path) => {
                        objects.insert(path.clone(), body.clone());
                        (StatusCode::OK, body)
                    }
                    Method::PATCH if objects.contains_key(&path) => {
                        let o = objects.get_mut(&path).unwrap();
                        json_patch::merge(o, &body);
                        (StatusCode::OK, o.clone())
                    }
                    Method::DELETE => match objects.remove(&path) {
                        Some(o) => (StatusCode::OK, o),
                        None => status(StatusCode::NOT_FOUND, "NotFound"),
                    },
                    _ => status(StatusCode::NOT_FOUND, "NotFound"),
                };
                let mut resp = Response::new(Body::from(serde_json::to_vec(&reply).unwrap()));
                *resp.status_mut() = code;
                send.send_response(resp);
            }
        });
        kubelet_api::ApiClient::new(kube::Client::new(service, "default"), 0, 1)
    }
}
