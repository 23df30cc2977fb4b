//! A mocked API server for the fast test tier: an in-process `tower` service that keeps
//! objects by path, answers discovery for the kinds the scenarios use, applies merge and
//! server-side-apply patches, and records every request so a scenario can assert what the
//! reconciler sent (method, path, query, content type, body). Only what the reconciler calls is
//! served; anything else is answered 404, which a scenario sees as a failure. Like the
//! apiserver, a merge patch naming a `metadata.resourceVersion` is a compare-and-swap: it is
//! answered 409 Conflict unless the stored object still has that resourceVersion.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{Arc, Mutex},
};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The query string.
    pub query: String,
    /// Content-Type header.
    pub content_type: String,
    /// The body as JSON (Null when empty or not JSON).
    pub body: Value,
}

impl Recorded {
    /// Whether the request was a PATCH of `path` (exactly).
    pub fn is_patch_of(&self, path: &str) -> bool {
        self.method == "PATCH" && self.path == path
    }
}

/// The fake's state, shared with the test.
#[derive(Default)]
pub struct FakeApi {
    objects: Mutex<BTreeMap<String, Value>>,
    requests: Mutex<Vec<Recorded>>,
    rv: Mutex<u64>,
}

/// Discovery answers: group-version path → (plural, kind, namespaced).
const RESOURCES: &[(&str, &str, &str, bool)] = &[
    ("/api/v1", "configmaps", "ConfigMap", true),
    ("/api/v1", "secrets", "Secret", true),
    ("/api/v1", "serviceaccounts", "ServiceAccount", true),
    ("/api/v1", "namespaces", "Namespace", false),
    ("/api/v1", "pods", "Pod", true),
    ("/apis/apps/v1", "deployments", "Deployment", true),
    (
        "/apis/rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
];

impl FakeApi {
    /// A fake holding nothing.
    pub fn new() -> Arc<FakeApi> {
        Arc::new(FakeApi::default())
    }

    /// A client whose every request this fake answers.
    pub fn client(self: &Arc<Self>) -> kube::Client {
        let me = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let me = me.clone();
            async move { Ok::<_, Infallible>(me.handle(req).await) }
        });
        kube::Client::new(service, "default")
    }

    /// Stores `obj` at `path` (as if created earlier), keeping a resourceVersion it names
    /// (later ones are higher) and giving it one otherwise.
    pub fn put(&self, path: &str, mut obj: Value) {
        let given = obj["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok());
        match given {
            Some(v) => {
                let mut rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
                *rv = (*rv).max(v);
            }
            None => obj["metadata"]["resourceVersion"] = json!(self.next_rv()),
        }
        if let Ok(mut o) = self.objects.lock() {
            o.insert(path.to_string(), obj);
        }
    }

    /// The object stored at `path`.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.objects.lock().ok()?.get(path).cloned()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The requests that write (everything but GET).
    pub fn writes(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }

    fn next_rv(&self) -> String {
        let mut rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
        *rv += 1;
        rv.to_string()
    }

    async fn handle(&self, req: Request<Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let rec = Recorded {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or("").to_string(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        if let Ok(mut r) = self.requests.lock() {
            r.push(rec.clone());
        }
        let (status, body) = self.answer(&rec);
        let mut resp = Response::new(Body::from(body.to_string().into_bytes()));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        resp
    }

    fn answer(&self, r: &Recorded) -> (StatusCode, Value) {
        if r.method == "GET"
            && let Some(list) = discovery(&r.path)
        {
            return (StatusCode::OK, list);
        }
        match r.method.as_str() {
            "GET" => match self.get(&r.path) {
                Some(o) => (StatusCode::OK, o),
                None if is_collection(&r.path) => (StatusCode::OK, self.list(r)),
                None => not_found(&r.path),
            },
            "POST" if r.path.ends_with("/configmaps") => self.create(r),
            "POST" => (StatusCode::CREATED, r.body.clone()),
            "PUT" => self.replace(r),
            "PATCH" => self.patch(r),
            "DELETE" => {
                let gone = self.objects.lock().ok().and_then(|mut o| o.remove(&r.path));
                match gone {
                    Some(o) => (StatusCode::OK, o),
                    None => not_found(&r.path),
                }
            }
            _ => not_found(&r.path),
        }
    }

    /// Creates a ConfigMap (the release cache's writes): 409 when the name is taken.
    fn create(&self, r: &Recorded) -> (StatusCode, Value) {
        let name = r.body["metadata"]["name"].as_str().unwrap_or("");
        let path = format!("{}/{name}", r.path);
        if self.get(&path).is_some() {
            return conflict(&path);
        }
        self.put(&path, r.body.clone());
        (StatusCode::CREATED, self.get(&path).unwrap_or(Value::Null))
    }

    /// Replaces an object, refusing a stale resourceVersion as the apiserver does.
    fn replace(&self, r: &Recorded) -> (StatusCode, Value) {
        let Some(old) = self.get(&r.path) else {
            return not_found(&r.path);
        };
        let want = &r.body["metadata"]["resourceVersion"];
        if !want.is_null() && *want != old["metadata"]["resourceVersion"] {
            return conflict(&r.path);
        }
        self.put(&r.path, r.body.clone());
        (StatusCode::OK, self.get(&r.path).unwrap_or(Value::Null))
    }

    fn patch(&self, r: &Recorded) -> (StatusCode, Value) {
        let (path, status_only) = match r.path.strip_suffix("/status") {
            Some(p) => (p.to_string(), true),
            None => (r.path.clone(), false),
        };
        let server_side = r.content_type.starts_with("application/apply-patch");
        let mut obj = match self.get(&path) {
            Some(o) => o,
            None if server_side && !status_only => json!({}),
            None => return not_found(&path),
        };
        let precondition = r.body["metadata"]["resourceVersion"].as_str();
        if !server_side
            && let Some(want) = precondition
            && obj["metadata"]["resourceVersion"].as_str() != Some(want)
        {
            return conflict(&path);
        }
        if status_only {
            obj["status"] = r.body.get("status").cloned().unwrap_or(Value::Null);
        } else {
            json_patch::merge(&mut obj, &r.body);
        }
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        obj["metadata"]["name"] = json!(name);
        obj["metadata"]["resourceVersion"] = json!(self.next_rv());
        if let Ok(mut o) = self.objects.lock() {
            o.insert(path, obj.clone());
        }
        (StatusCode::OK, obj)
    }

    /// The objects directly under a collection path, filtered by `labelSelector` (equality
    /// terms only, which is all the scenarios use).
    fn list(&self, r: &Recorded) -> Value {
        let selector = query_param(&r.query, "labelSelector").unwrap_or_default();
        let prefix = format!("{}/", r.path);
        let items: Vec<Value> = self
            .objects
            .lock()
            .map(|o| {
                o.iter()
                    .filter(|(p, _)| p.starts_with(&prefix) && !p[prefix.len()..].contains('/'))
                    .map(|(_, v)| v.clone())
                    .filter(|v| selects(&selector, v))
                    .collect()
            })
            .unwrap_or_default();
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
    }
}

fn not_found(path: &str) -> (StatusCode, Value) {
    (
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("{path} not found"), "reason": "NotFound", "code": 404}),
    )
}

fn conflict(path: &str) -> (StatusCode, Value) {
    (
        StatusCode::CONFLICT,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("Operation cannot be fulfilled on {path}: the object has been modified or already exists"),
               "reason": "Conflict", "code": 409}),
    )
}

fn discovery(path: &str) -> Option<Value> {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|(gv, ..)| *gv == path)
        .map(|(_, plural, kind, namespaced)| {
            json!({"name": plural, "singularName": "", "namespaced": namespaced, "kind": kind,
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let gv = path
        .trim_start_matches("/apis/")
        .trim_start_matches("/api/");
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// A collection path ends in a plural: `/api/v1/namespaces/ns/configmaps`.
fn is_collection(path: &str) -> bool {
    let last = path.rsplit('/').next().unwrap_or("");
    RESOURCES.iter().any(|(_, plural, ..)| *plural == last)
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn selects(selector: &str, obj: &Value) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (key, want) = match term.split_once("==").or_else(|| term.split_once('=')) {
            Some((k, v)) => (k, Some(v)),
            None => (term, None),
        };
        let have = obj["metadata"]["labels"].get(key).and_then(Value::as_str);
        match want {
            None => have.is_some(),
            Some(v) => have == Some(v),
        }
    })
}
