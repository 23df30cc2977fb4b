//! A mocked API server for the fast test tier: an in-process `tower` service that keeps
//! objects by path, answers discovery for the kinds the scenarios use (and those its stored
//! CRDs define), applies merge, replace and server-side-apply patches with resourceVersion
//! preconditions, deletes as the apiserver does (finalizers first), and records every request
//! so a scenario can assert what the reconciler sent (method, path, query, content type, body).
//! Only what the reconciler calls is served; anything else is answered 404, which a scenario
//! sees as a failure.
//!
//! For the fault-injection tier ([`super::faults`]) it also injects a fault, drawn from a seeded
//! [`Rng`], into each request while faults are on (see [`Fault`]), and watches every request
//! that takes effect for what the operator must never do ([`FakeApi::violations`]): delete a
//! CRD or a Namespace, write after its leadership ended, touch a user's object, or change a
//! provider's `spec.version` once set.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower::ServiceBuilder;

use crate::fence::{Fence, FenceLayer, is_write};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One request the fake received (and, unless a fault dropped it, answered).
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
    /// The operator process that sent it (see [`FakeApi::client_for`]); 0 for [`FakeApi::client`].
    pub process: u64,
}

impl Recorded {
    /// Whether the request was a PATCH of `path` (exactly).
    pub fn is_patch_of(&self, path: &str) -> bool {
        self.method == "PATCH" && self.path == path
    }
}

/// A tiny deterministic PRNG (splitmix64): a seed gives the same sequence on every machine, so
/// a failing run replays exactly.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `per_mille`/1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// What the fake does to one request while faults are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Held for this many scheduler turns: concurrent requests overtake it (a slow request
    /// costs no wall time and keeps the order reproducible).
    Delay(u32),
    /// 409 Conflict (writes).
    Conflict,
    /// 422 Invalid, a validation failure (writes).
    Invalid,
    /// 422 whose message says a field is immutable, as for a changed selector (PATCH, PUT).
    Immutable,
    /// 429 Too Many Requests.
    TooMany,
    /// 500 Internal Server Error.
    Internal,
    /// 503 Service Unavailable.
    Unavailable,
    /// The connection reset before the request reached the apiserver.
    Reset,
    /// The connection reset after the write took effect: the answer is lost.
    ResetAfter,
    /// The lease is lost now: the process's fence is revoked as this request arrives.
    LeaseLost,
    /// The process is killed before this request reaches the apiserver.
    Kill,
    /// The process is killed after this write took effect.
    KillAfter,
}

impl Fault {
    /// Every fault, for reports.
    pub const NAMES: &[&str] = &[
        "delay",
        "409 conflict",
        "422 invalid",
        "422 immutable field",
        "429 too many requests",
        "500 internal error",
        "503 unavailable",
        "connection reset before the request",
        "connection reset after the write",
        "lease lost mid-pass",
        "process killed before a request",
        "process killed after a write",
    ];

    /// Index into [`Fault::NAMES`].
    pub fn index(self) -> usize {
        match self {
            Fault::Delay(_) => 0,
            Fault::Conflict => 1,
            Fault::Invalid => 2,
            Fault::Immutable => 3,
            Fault::TooMany => 4,
            Fault::Internal => 5,
            Fault::Unavailable => 6,
            Fault::Reset => 7,
            Fault::ResetAfter => 8,
            Fault::LeaseLost => 9,
            Fault::Kill => 10,
            Fault::KillAfter => 11,
        }
    }

    /// A fault for a request of `method`, drawn from `rng`.
    fn draw(rng: &mut Rng, method: &str) -> Fault {
        let write = method != "GET";
        loop {
            let f = match rng.below(100) {
                0..=29 => Fault::Delay(1 + rng.below(40) as u32),
                30..=37 => Fault::Conflict,
                38..=42 => Fault::Invalid,
                43..=50 => Fault::Immutable,
                51..=56 => Fault::TooMany,
                57..=63 => Fault::Internal,
                64..=70 => Fault::Unavailable,
                71..=78 => Fault::Reset,
                79..=85 => Fault::ResetAfter,
                86..=91 => Fault::LeaseLost,
                92..=95 => Fault::Kill,
                _ => Fault::KillAfter,
            };
            let writes_only = matches!(
                f,
                Fault::Conflict | Fault::Invalid | Fault::ResetAfter | Fault::KillAfter
            );
            let patch_only = f == Fault::Immutable;
            if (writes_only && !write) || (patch_only && method != "PATCH" && method != "PUT") {
                continue;
            }
            return f;
        }
    }
}

/// The fault plan: on while a run's faulty steps last.
#[derive(Debug)]
struct Plan {
    rng: Rng,
    /// Faults per thousand requests.
    rate: u64,
    on: bool,
}

/// The fake's state, shared with the test.
#[derive(Default)]
pub struct FakeApi {
    objects: Mutex<BTreeMap<String, Value>>,
    requests: Mutex<Vec<Recorded>>,
    rv: Mutex<u64>,
    plan: Mutex<Option<Plan>>,
    /// Faults injected so far, by [`Fault::index`].
    injected: Mutex<Vec<u64>>,
    /// The fence of each operator process, to revoke on [`Fault::LeaseLost`].
    fences: Mutex<BTreeMap<u64, Fence>>,
    /// Processes whose lease was lost.
    revoked: Mutex<BTreeSet<u64>>,
    /// Paths of the user's objects: the operator must never write them.
    user_paths: Mutex<BTreeSet<String>>,
    violations: Mutex<Vec<String>>,
    /// Bumped when a process is killed (the test drops its reconcile).
    kills: Option<tokio::sync::watch::Sender<u64>>,
    /// How many requests arrived (every request, the faulted ones included).
    arrived: Mutex<u64>,
    /// Paths whose writes are refused with 422 Invalid and this message, as a validation
    /// failure quoting a field's value.
    refusals: Mutex<BTreeMap<String, String>>,
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
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
    ),
    ("/apis/events.k8s.io/v1", "events", "Event", true),
    (
        "/apis/rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
];

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/";
const PROVIDERS: &str = "/apis/management.cluster.x-k8s.io/";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string().into_bytes()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// How the fake answers one request.
enum Answer {
    Http(StatusCode, Value),
    /// The connection failed (reset, or the process died while waiting).
    Failed(&'static str),
}

impl FakeApi {
    /// A fake holding nothing.
    pub fn new() -> Arc<FakeApi> {
        Arc::new(FakeApi {
            kills: Some(tokio::sync::watch::Sender::new(0)),
            injected: Mutex::new(vec![0; Fault::NAMES.len()]),
            ..FakeApi::default()
        })
    }

    /// A client whose every request this fake answers (no fence, no faults).
    pub fn client(self: &Arc<Self>) -> kube::Client {
        self.client_for(0, Fence::unfenced())
    }

    /// The client of operator process `process`: its writes pass `fence` before they reach
    /// the fake, as the operator's do ([`FenceLayer`]).
    pub fn client_for(self: &Arc<Self>, process: u64, fence: Fence) -> kube::Client {
        lock(&self.fences).insert(process, fence.clone());
        let me = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let me = me.clone();
            // Taken when the request leaves the process (the fence is passed), not when it is
            // first polled: a write in flight when the lease is lost left in time.
            if is_write(req.method()) && me.revoked(process) {
                me.violation(format!(
                    "process {process} sent a write after its leadership ended: {} {}",
                    req.method(),
                    req.uri().path()
                ));
            }
            async move { me.handle(process, req).await }
        });
        let service = ServiceBuilder::new()
            .layer(FenceLayer::new(fence))
            .service(service);
        kube::Client::new(service, "default")
    }

    /// Injects faults drawn from `seed` into `rate` requests per thousand while turned on.
    pub fn plan_faults(&self, seed: u64, rate: u64) {
        *lock(&self.plan) = Some(Plan {
            rng: Rng::new(seed),
            rate,
            on: false,
        });
    }

    /// Turns fault injection on or off (the plan's sequence goes on where it stopped).
    pub fn faults_on(&self, on: bool) {
        if let Some(p) = lock(&self.plan).as_mut() {
            p.on = on;
        }
    }

    /// Faults injected so far, by [`Fault::index`].
    pub fn injected(&self) -> Vec<u64> {
        lock(&self.injected).clone()
    }

    /// A digest of every request that took effect, in order (FNV-1a over process, method and
    /// path; events left out, as their names and every body's timestamps come from the wall
    /// clock): two runs of one seed give the same digest.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for r in lock(&self.requests).iter() {
            if r.path.starts_with("/apis/events.k8s.io/") {
                continue;
            }
            let line = format!("{} {} {}\n", r.process, r.method, r.path);
            for b in line.bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    }

    /// Requests that arrived so far.
    pub fn arrived(&self) -> u64 {
        *lock(&self.arrived)
    }

    /// Refuses every write of `path` with 422 Invalid and `message`.
    pub fn refuse(&self, path: &str, message: &str) {
        lock(&self.refusals).insert(path.to_string(), message.to_string());
    }

    /// A receiver that changes when a process is killed.
    pub fn kills(&self) -> tokio::sync::watch::Receiver<u64> {
        match &self.kills {
            Some(k) => k.subscribe(),
            None => tokio::sync::watch::Sender::new(0).subscribe(),
        }
    }

    /// Whether process `process` lost its lease.
    pub fn revoked(&self, process: u64) -> bool {
        lock(&self.revoked).contains(&process)
    }

    /// Marks the object at `path` as the user's: the operator must never write it.
    pub fn user_object(&self, path: &str, obj: Value) {
        self.put(path, obj);
        lock(&self.user_paths).insert(path.to_string());
    }

    /// What the operator did that it must never do, in the order seen.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.violations).clone()
    }

    /// Records a violation found by the test itself.
    pub fn violation(&self, what: String) {
        lock(&self.violations).push(what);
    }

    /// Stores `obj` at `path` (as if created earlier), keeping a resourceVersion it names
    /// (later ones are higher) and giving it one otherwise.
    pub fn put(&self, path: &str, mut obj: Value) {
        let given = obj["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok());
        match given {
            Some(v) => {
                let mut rv = lock(&self.rv);
                *rv = (*rv).max(v);
            }
            None if obj["metadata"]["resourceVersion"].is_null() => {
                obj["metadata"]["resourceVersion"] = json!(self.next_rv());
            }
            None => {}
        }
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{path}"));
        }
        lock(&self.objects).insert(path.to_string(), obj);
    }

    /// Stores `obj` at `path` with a new resourceVersion, as a change made by someone else.
    pub fn update(&self, path: &str, mut obj: Value) {
        obj["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.put(path, obj);
    }

    /// Removes the object at `path`, as the apiserver does once nothing holds it.
    pub fn remove(&self, path: &str) {
        lock(&self.objects).remove(path);
    }

    /// The object stored at `path`.
    pub fn get(&self, path: &str) -> Option<Value> {
        lock(&self.objects).get(path).cloned()
    }

    /// Every stored object with its path.
    pub fn objects(&self) -> Vec<(String, Value)> {
        lock(&self.objects)
            .iter()
            .map(|(p, o)| (p.clone(), o.clone()))
            .collect()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.requests).clone()
    }

    /// The requests that write (everything but GET).
    pub fn writes(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }

    fn next_rv(&self) -> String {
        let mut rv = lock(&self.rv);
        *rv += 1;
        rv.to_string()
    }

    async fn handle(&self, process: u64, req: Request<Body>) -> Result<Response<Body>, BoxError> {
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
            process,
        };
        if rec.method != "GET"
            && let Some(message) = lock(&self.refusals).get(&rec.path).cloned()
        {
            return Ok(json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": message, "reason": "Invalid", "code": 422}),
            ));
        }
        let drawn = self.draw_fault(&rec.method);
        // Every arrival with its drawn fault (FAULT_TRACE prints only the recorded ones): where
        // two runs of one seed first differ.
        if std::env::var_os("FAULT_ARRIVALS").is_some() {
            eprintln!(
                "ARRIVAL {} {} {}?{} {:?}",
                rec.process, rec.method, rec.path, rec.query, drawn
            );
        }
        let answer = match drawn {
            None => self.in_flight(&rec).await,
            Some(f) => self.with_fault(f, &rec).await,
        };
        match answer {
            Answer::Http(status, body) => Ok(json_response(status, &body)),
            Answer::Failed(why) => Err(why.into()),
        }
    }

    fn draw_fault(&self, method: &str) -> Option<Fault> {
        *lock(&self.arrived) += 1;
        let mut plan = lock(&self.plan);
        let plan = plan.as_mut().filter(|p| p.on)?;
        if !plan.rng.chance(plan.rate) {
            return None;
        }
        let f = Fault::draw(&mut plan.rng, method);
        lock(&self.injected)[f.index()] += 1;
        Some(f)
    }

    async fn with_fault(&self, f: Fault, rec: &Recorded) -> Answer {
        let status = |code: u16, reason: &str, message: &str| {
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            Answer::Http(
                code,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": message, "reason": reason, "code": code.as_u16()}),
            )
        };
        match f {
            Fault::Delay(turns) => {
                for _ in 0..turns {
                    tokio::task::yield_now().await;
                }
                self.in_flight(rec).await
            }
            Fault::Conflict => status(
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
            ),
            Fault::Invalid => status(422, "Invalid", "spec: Invalid value: injected"),
            Fault::Immutable => status(
                422,
                "Invalid",
                "spec.selector: Invalid value: injected: field is immutable",
            ),
            Fault::TooMany => status(429, "TooManyRequests", "too many requests"),
            Fault::Internal => status(500, "InternalError", "injected internal error"),
            Fault::Unavailable => status(503, "ServiceUnavailable", "injected: unavailable"),
            Fault::Reset => Answer::Failed("connection reset by peer (injected)"),
            Fault::ResetAfter => {
                self.in_flight(rec).await;
                Answer::Failed("connection reset by peer after the write (injected)")
            }
            Fault::LeaseLost => {
                if let Some(fence) = lock(&self.fences).get(&rec.process) {
                    fence.revoke();
                    lock(&self.revoked).insert(rec.process);
                }
                self.take_effect(rec)
            }
            Fault::Kill | Fault::KillAfter => {
                if f == Fault::KillAfter {
                    self.in_flight(rec).await;
                }
                if let Some(k) = &self.kills {
                    k.send_modify(|n| *n += 1);
                }
                // The process is gone: nobody will ever read the answer.
                std::future::pending::<Answer>().await
            }
        }
    }

    /// A request that left its process: a write still in flight when the process's lease was
    /// lost never lands (the fence drops it; a real apiserver may still receive it, which the
    /// renew deadline, not this tier, covers). Keeps replays exact: the fence's `select!`
    /// never has both a landed write and the lease's end to choose from.
    async fn in_flight(&self, rec: &Recorded) -> Answer {
        if rec.method != "GET" && self.revoked(rec.process) {
            // The fence drops the call as soon as it sees the lease end: a few turns.
            for _ in 0..64 {
                tokio::task::yield_now().await;
            }
            self.violation(format!(
                "process {} kept a write in flight after its leadership ended: {} {}",
                rec.process, rec.method, rec.path
            ));
        }
        self.take_effect(rec)
    }

    /// Records the request and applies it to the stored objects.
    fn take_effect(&self, rec: &Recorded) -> Answer {
        lock(&self.requests).push(rec.clone());
        if is_write(&rec.method.parse().unwrap_or(http::Method::GET)) {
            self.check_write(rec);
        }
        let (status, body) = self.answer(rec);
        Answer::Http(status, body)
    }

    /// The invariants a write that takes effect must keep.
    fn check_write(&self, r: &Recorded) {
        let mut v = Vec::new();
        if r.method == "DELETE" && (r.path.starts_with(CRDS) || is_namespace(&r.path)) {
            v.push(format!("deleted {}", r.path));
        }
        let target = r.path.strip_suffix("/status").unwrap_or(&r.path);
        if lock(&self.user_paths).contains(target) {
            v.push(format!(
                "touched the user's object: {} {}",
                r.method, r.path
            ));
        }
        lock(&self.violations).extend(v);
    }

    fn answer(&self, r: &Recorded) -> (StatusCode, Value) {
        if r.method == "GET"
            && let Some(list) = self.discovery(&r.path)
        {
            return (StatusCode::OK, list);
        }
        match r.method.as_str() {
            "GET" => {
                let path = r.path.strip_suffix("/status").unwrap_or(&r.path);
                match self.get(path) {
                    Some(o) => (StatusCode::OK, o),
                    None if self.is_collection(&r.path) => (StatusCode::OK, self.list(r)),
                    None => not_found(&r.path),
                }
            }
            "POST" if r.path.ends_with("/configmaps") => self.create(r),
            "POST" => (StatusCode::CREATED, r.body.clone()),
            "PATCH" | "PUT" => self.write(r),
            "DELETE" => self.delete(r),
            _ => not_found(&r.path),
        }
    }

    /// Creates a ConfigMap (the release cache's writes): 409 AlreadyExists when the name is
    /// taken.
    fn create(&self, r: &Recorded) -> (StatusCode, Value) {
        let name = r.body["metadata"]["name"].as_str().unwrap_or("");
        let path = format!("{}/{name}", r.path);
        if self.get(&path).is_some() {
            return (
                StatusCode::CONFLICT,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": format!("{path} already exists"), "reason": "AlreadyExists",
                       "code": 409}),
            );
        }
        let mut obj = r.body.clone();
        obj["metadata"]["resourceVersion"] = Value::Null;
        self.put(&path, obj);
        (StatusCode::CREATED, self.get(&path).unwrap_or(Value::Null))
    }

    fn delete(&self, r: &Recorded) -> (StatusCode, Value) {
        let mut objects = lock(&self.objects);
        let Some(mut obj) = objects.get(&r.path).cloned() else {
            return not_found(&r.path);
        };
        if let Some(want) = r.body.pointer("/preconditions/resourceVersion")
            && want != &obj["metadata"]["resourceVersion"]
        {
            return conflict(&r.path);
        }
        let finalizers = obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if !finalizers {
            objects.remove(&r.path);
            if r.path.starts_with(CRDS)
                && let Some(group) = obj.pointer("/spec/group").and_then(Value::as_str)
            {
                // Deleting a CRD deletes every custom resource of it.
                let prefix = format!("/apis/{group}/");
                objects.retain(|p, _| !p.starts_with(&prefix));
            }
            return (StatusCode::OK, obj);
        }
        if obj["metadata"]["deletionTimestamp"].is_null() {
            obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            obj["metadata"]["resourceVersion"] = json!(self.next_rv());
            objects.insert(r.path.clone(), obj.clone());
        }
        (StatusCode::OK, obj)
    }

    /// PATCH (merge or server-side apply) and PUT, of an object or its status.
    fn write(&self, r: &Recorded) -> (StatusCode, Value) {
        let (path, status_only) = match r.path.strip_suffix("/status") {
            Some(p) => (p.to_string(), true),
            None => (r.path.clone(), false),
        };
        let server_side = r.content_type.starts_with("application/apply-patch");
        let creates = server_side || r.method == "PUT";
        let old = self.get(&path);
        let mut obj = match old.clone() {
            Some(o) => o,
            None if creates && !status_only => json!({}),
            None => return not_found(&path),
        };
        if let Some(want) = r.body.pointer("/metadata/resourceVersion")
            && old.is_some()
            && want != &obj["metadata"]["resourceVersion"]
        {
            return conflict(&path);
        }
        if status_only {
            if server_side || r.method == "PUT" {
                obj["status"] = r.body.get("status").cloned().unwrap_or(Value::Null);
            } else if let Some(s) = r.body.get("status") {
                json_patch::merge(&mut obj["status"], s);
            }
        } else if server_side || r.method == "PUT" {
            obj = replaced(&obj, &r.body, server_side);
        } else {
            json_patch::merge(&mut obj, &r.body);
        }
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        obj["metadata"]["name"] = json!(name);
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{path}-{}", self.next_rv()));
        }
        self.bump_generation(old.as_ref(), &mut obj);
        if path.starts_with(CRDS) {
            // The apiserver establishes a CRD within milliseconds.
            obj["status"]["conditions"] = json!([{"type": "Established", "status": "True"}]);
        }
        self.check_version(&path, old.as_ref(), &obj);
        obj["metadata"]["resourceVersion"] = json!(self.next_rv());
        let mut objects = lock(&self.objects);
        let deleting = !obj["metadata"]["deletionTimestamp"].is_null();
        let finalizers = obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if deleting && !finalizers {
            objects.remove(&path);
        } else {
            objects.insert(path, obj.clone());
        }
        (StatusCode::OK, obj)
    }

    /// metadata.generation: 1 at creation, one more at each spec change.
    fn bump_generation(&self, old: Option<&Value>, obj: &mut Value) {
        let generation = old
            .and_then(|o| o["metadata"]["generation"].as_i64())
            .unwrap_or(0);
        let changed = old.is_none_or(|o| o.get("spec") != obj.get("spec"));
        obj["metadata"]["generation"] = json!(if changed { generation + 1 } else { generation });
    }

    /// A provider's spec.version, once set, is the user's: the operator never changes it.
    fn check_version(&self, path: &str, old: Option<&Value>, new: &Value) {
        if !path.starts_with(PROVIDERS) {
            return;
        }
        let version = |o: &Value| {
            o.pointer("/spec/version")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let before = old.and_then(version).filter(|v| !v.is_empty());
        if let Some(before) = before
            && version(new).as_deref() != Some(before.as_str())
        {
            self.violation(format!(
                "the operator changed spec.version of {path} from {before} to {:?}",
                version(new)
            ));
        }
    }

    /// Group-version discovery: the built-in kinds and those the stored CRDs define.
    fn discovery(&self, path: &str) -> Option<Value> {
        let mut resources: Vec<Value> = RESOURCES
            .iter()
            .filter(|(gv, ..)| *gv == path)
            .map(|(_, plural, kind, namespaced)| resource(plural, kind, *namespaced))
            .collect();
        for (plural, kind, namespaced) in self.crd_resources(path) {
            resources.push(resource(&plural, &kind, namespaced));
        }
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

    /// (plural, kind, namespaced) of the served versions the stored CRDs define under the
    /// group-version path `gv_path` (`/apis/<group>/<version>`).
    fn crd_resources(&self, gv_path: &str) -> Vec<(String, String, bool)> {
        let Some((group, version)) = gv_path
            .strip_prefix("/apis/")
            .and_then(|gv| gv.split_once('/'))
        else {
            return Vec::new();
        };
        lock(&self.objects)
            .iter()
            .filter(|(p, _)| p.starts_with(CRDS))
            .map(|(_, c)| c)
            .filter(|c| c.pointer("/spec/group").and_then(Value::as_str) == Some(group))
            .filter(|c| {
                c.pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .is_some_and(|vs| {
                        vs.iter()
                            .any(|v| v["name"] == version && v["served"] == true)
                    })
            })
            .map(|c| {
                (
                    c.pointer("/spec/names/plural")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    c.pointer("/spec/names/kind")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    c.pointer("/spec/scope").and_then(Value::as_str) == Some("Namespaced"),
                )
            })
            .collect()
    }

    /// A collection path ends in a plural: `/api/v1/namespaces/ns/configmaps`, or
    /// `/apis/<group>/<version>/<plural>` of a stored CRD.
    fn is_collection(&self, path: &str) -> bool {
        let (parent, last) = path.rsplit_once('/').unwrap_or(("", path));
        if RESOURCES.iter().any(|(_, plural, ..)| *plural == last) {
            return true;
        }
        let gv = match parent.split_once("/namespaces/") {
            Some((gv, _)) => gv,
            None => parent,
        };
        self.crd_resources(gv)
            .iter()
            .any(|(plural, ..)| plural == last)
    }

    /// The objects of a collection (of one namespace, or of all when the path has none),
    /// filtered by `labelSelector` (equality and existence terms only, which is all the
    /// reconciler uses).
    fn list(&self, r: &Recorded) -> Value {
        let selector = query_param(&r.query, "labelSelector").unwrap_or_default();
        let items: Vec<Value> = lock(&self.objects)
            .iter()
            .filter(|(p, _)| in_collection(&r.path, p))
            .map(|(_, v)| v.clone())
            .filter(|v| selects(&selector, v))
            .collect();
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
    }
}

/// What a server-side apply (or a PUT) leaves: the body, with what the apiserver keeps of the
/// live object (identity, finalizers, deletion, status), and for an apply the operator's
/// managedFields entry.
fn replaced(old: &Value, body: &Value, server_side: bool) -> Value {
    let mut obj = body.clone();
    for k in [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "finalizers",
    ] {
        if !old["metadata"][k].is_null() && obj["metadata"][k].is_null() {
            obj["metadata"][k] = old["metadata"][k].clone();
        }
    }
    if let Some(s) = old.get("status") {
        obj["status"] = s.clone();
    }
    if server_side {
        obj["metadata"]["managedFields"] = json!([{
            "manager": crate::controller::FIELD_MANAGER, "operation": "Apply", "apiVersion": body["apiVersion"],
            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
    }
    obj
}

fn resource(plural: &str, kind: &str, namespaced: bool) -> Value {
    json!({"name": plural, "singularName": "", "namespaced": namespaced, "kind": kind,
           "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
}

/// `/api/v1/namespaces/<name>`: a Namespace, not an object in one.
fn is_namespace(path: &str) -> bool {
    path.strip_prefix("/api/v1/namespaces/")
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

/// Whether the object at `path` is in the collection `collection`: directly under it, or,
/// for a collection of all namespaces, under the same plural of some namespace.
fn in_collection(collection: &str, path: &str) -> bool {
    let Some(name) = path
        .strip_prefix(collection)
        .and_then(|r| r.strip_prefix('/'))
    else {
        let Some((gv, plural)) = collection.rsplit_once('/') else {
            return false;
        };
        if gv.contains("/namespaces/") {
            return false;
        }
        let Some(rest) = path.strip_prefix(&format!("{gv}/namespaces/")) else {
            return false;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        return parts.len() == 3 && parts[1] == plural;
    };
    !name.is_empty() && !name.contains('/')
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
               "message": format!("Operation cannot be fulfilled on {path}: the object has been modified; please apply your changes to the latest version and try again"),
               "reason": "Conflict", "code": 409}),
    )
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
