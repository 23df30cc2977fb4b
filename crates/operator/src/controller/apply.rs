//! Applying rendered objects with server-side apply: resolves each object's resource through a
//! discovery cache, applies CRDs first and waits until they are Established, skips objects that
//! have not changed since the operator last applied them (so an idle cluster sees no writes),
//! and prunes what a provider no longer renders.

use std::{
    collections::{BTreeMap, HashMap},
    hash::{DefaultHasher, Hash, Hasher},
    sync::Mutex,
    time::Duration,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams},
    discovery::Scope,
};
use serde_json::Value;

use super::FIELD_MANAGER;

/// Identifies an object across kinds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// API group ("" for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Why applying failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The cluster does not serve the object's kind (e.g. cert-manager is not installed).
    #[error("the cluster does not serve {kind}.{group}/{version} ({})", missing_kind_hint(.group))]
    MissingKind {
        /// API group of the kind.
        group: String,
        /// API version.
        version: String,
        /// The kind.
        kind: String,
    },
    /// The object is malformed.
    #[error("{0}")]
    Invalid(String),
    /// The apiserver refused the object (validation, admission): a configuration problem.
    #[error("the apiserver refused {key}: {message}")]
    Refused {
        /// The object.
        key: String,
        /// The apiserver's message.
        message: String,
    },
    /// A CRD did not become Established in time.
    #[error("CustomResourceDefinition {0} did not become Established")]
    NotEstablished(String),
    /// Anything else the apiserver answered (network, conflicts, 5xx): retried with backoff.
    #[error("{0}")]
    Transient(#[from] kube::Error),
}

/// The API group of cert-manager's kinds (Certificate, Issuer), which providers' releases use
/// for their webhook certificates.
pub const CERT_MANAGER_GROUP: &str = "cert-manager.io";

fn missing_kind_hint(group: &str) -> &'static str {
    if group == CERT_MANAGER_GROUP {
        "cert-manager is not installed: install it, e.g. with `kubectl capi-providers init`; the provider is retried as soon as its CRDs appear"
    } else {
        "is the CRD that defines it installed?"
    }
}

fn missing_kind(gvk: &GroupVersionKind) -> ApplyError {
    ApplyError::MissingKind {
        group: gvk.group.clone(),
        version: gvk.version.clone(),
        kind: gvk.kind.clone(),
    }
}

impl ApplyError {
    /// The condition reason of this failure.
    pub fn reason(&self) -> &'static str {
        use capi_operator_api::conditions::reason;
        if let ApplyError::MissingKind { group, .. } = self
            && group == CERT_MANAGER_GROUP
        {
            return reason::CERT_MANAGER_NOT_INSTALLED;
        }
        if self.is_transient() {
            reason::APPLY_RETRYING
        } else {
            reason::APPLY_FAILED
        }
    }

    /// Whether the error may go away without any user change.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ApplyError::Transient(_) | ApplyError::NotEstablished(_)
        )
    }
}

fn classify(key: &ObjKey, e: kube::Error) -> ApplyError {
    match &e {
        kube::Error::Api(s) if matches!(s.code, 400 | 403 | 404 | 422) => ApplyError::Refused {
            key: key.to_string(),
            message: s.message.clone(),
        },
        _ => ApplyError::Transient(e),
    }
}

/// Resolved resource of a kind.
#[derive(Debug, Clone)]
struct Resolved {
    resource: ApiResource,
    namespaced: bool,
}

/// Applies and prunes objects; shared by every controller.
pub struct Applier {
    client: Client,
    discovery: Mutex<HashMap<(String, String, String), Resolved>>,
    // What the operator last applied per object: the resourceVersion the apiserver answered and
    // a hash of the applied content. An object whose live resourceVersion and desired content
    // both match needs no request at all.
    applied: Mutex<HashMap<ObjKey, Applied>>,
}

/// The key and content hash of a rendered object.
pub fn key_of(obj: &Value) -> Result<ObjKey, ApplyError> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        return Err(ApplyError::Invalid(
            "an object lacks apiVersion, kind or metadata.name".into(),
        ));
    }
    let group = api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or("")
        .to_string();
    Ok(ObjKey {
        group,
        kind: kind.to_string(),
        namespace: obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        name: name.to_string(),
    })
}

fn content_hash(obj: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    obj.to_string().hash(&mut h);
    h.finish()
}

fn gvk_of(obj: &Value) -> GroupVersionKind {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

type BoxedApply<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApplyError>> + Send + 'a>>;

/// How many objects are applied at once.
const APPLY_CONCURRENCY: usize = 8;

/// What the caches know of a live object.
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// resourceVersion.
    pub rv: String,
    /// metadata.generation.
    pub generation: Option<i64>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// What the operator last applied to an object.
#[derive(Debug, Clone)]
struct Applied {
    rv: String,
    generation: Option<i64>,
    hash: u64,
}

// Kinds whose spec changes always move metadata.generation and whose status is written by
// other controllers: for them a new resourceVersion with the same generation is a status write,
// not drift, and needs no apply.
const GENERATION_KINDS: &[&str] = &[
    "CustomResourceDefinition",
    "Deployment",
    "DaemonSet",
    "StatefulSet",
    "Certificate",
    "Issuer",
];

fn unchanged(desired: &Value, key: &ObjKey, live: &Live, known: &Applied, hash: u64) -> bool {
    if known.hash != hash {
        return false;
    }
    if live.rv == known.rv {
        return true;
    }
    let meta_kept = |field: &str, have: &BTreeMap<String, String>| {
        desired
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .is_none_or(|want| {
                want.iter().all(|(k, v)| {
                    v.as_str()
                        .is_some_and(|v| have.get(k).map(String::as_str) == Some(v))
                })
            })
    };
    GENERATION_KINDS.contains(&key.kind.as_str())
        && known.generation.is_some()
        && live.generation == known.generation
        && meta_kept("labels", &live.labels)
        && meta_kept("annotations", &live.annotations)
}

/// What one apply pass did.
#[derive(Debug, Default)]
pub struct ApplyReport {
    /// Objects sent to the apiserver.
    pub applied: usize,
    /// Objects skipped as unchanged.
    pub unchanged: usize,
}

impl Applier {
    /// An applier over `client`.
    pub fn new(client: Client) -> Applier {
        Applier {
            client,
            discovery: Mutex::new(HashMap::new()),
            applied: Mutex::new(HashMap::new()),
        }
    }

    async fn resolve(&self, gvk: &GroupVersionKind) -> Result<Resolved, ApplyError> {
        let k = (gvk.group.clone(), gvk.version.clone(), gvk.kind.clone());
        if let Some(r) = self.discovery.lock().ok().and_then(|d| d.get(&k).cloned()) {
            return Ok(r);
        }
        let (resource, caps) = match kube::discovery::pinned_kind(&self.client, gvk).await {
            Ok(x) => x,
            Err(kube::Error::Api(s)) if s.code == 404 => return Err(missing_kind(gvk)),
            Err(kube::Error::Discovery(_)) => return Err(missing_kind(gvk)),
            Err(e) => return Err(ApplyError::Transient(e)),
        };
        let r = Resolved {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        if let Ok(mut d) = self.discovery.lock() {
            d.insert(k, r.clone());
        }
        Ok(r)
    }

    fn api(&self, r: &Resolved, namespace: &str) -> Api<DynamicObject> {
        if r.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &r.resource)
        } else {
            Api::all_with(self.client.clone(), &r.resource)
        }
    }

    /// Applies `objects`: namespaces and CRDs first (waiting until new CRDs are Established),
    /// then everything else, several at a time. `live` gives what the caches know of an object
    /// (None when absent), so unchanged objects cost no request.
    pub async fn apply_all(
        &self,
        objects: &[Value],
        live: impl Fn(&ObjKey) -> Option<Live>,
    ) -> Result<ApplyReport, ApplyError> {
        let mut report = ApplyReport::default();
        let mut first = Vec::new();
        let mut rest = Vec::new();
        for obj in objects {
            let key = key_of(obj)?;
            let hash = content_hash(obj);
            let known = self.applied.lock().ok().and_then(|a| a.get(&key).cloned());
            let current = live(&key);
            if let (Some(l), Some(k)) = (&current, &known)
                && unchanged(obj, &key, l, k, hash)
            {
                report.unchanged += 1;
                continue;
            }
            if key.kind == "CustomResourceDefinition" || key.kind == "Namespace" {
                first.push((obj, key, hash));
            } else {
                rest.push((obj, key, hash));
            }
        }
        let new_crds: Vec<String> = first
            .iter()
            .filter(|(_, k, _)| k.kind == "CustomResourceDefinition")
            .map(|(_, k, _)| k.name.clone())
            .collect();
        report.applied += self.apply_many(first).await?;
        for name in new_crds {
            self.wait_established(&name).await?;
        }
        report.applied += self.apply_many(rest).await?;
        Ok(report)
    }

    async fn apply_many(&self, batch: Vec<(&Value, ObjKey, u64)>) -> Result<usize, ApplyError> {
        let n = batch.len();
        let mut batch = batch.into_iter();
        loop {
            let mut group: Vec<BoxedApply<'_>> = Vec::new();
            for (obj, key, hash) in batch.by_ref().take(APPLY_CONCURRENCY) {
                group.push(Box::pin(self.apply_one(obj, key, hash)));
            }
            if group.is_empty() {
                return Ok(n);
            }
            for r in futures::future::join_all(group).await {
                r?;
            }
        }
    }

    async fn apply_one(&self, obj: &Value, key: ObjKey, hash: u64) -> Result<(), ApplyError> {
        let r = self.resolve(&gvk_of(obj)).await?;
        let api = self.api(&r, &key.namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let result = match api.patch(&key.name, &params, &Patch::Apply(obj)).await {
            Err(kube::Error::Api(s))
                if s.code == 422 && s.message.contains("field is immutable") =>
            {
                // A new version changed an immutable field (e.g. a Deployment selector): the
                // object is replaced, which is what an upgrade needs.
                tracing::info!(object = %key, "immutable field changed; recreating");
                self.recreate(&api, &key).await?;
                api.patch(&key.name, &params, &Patch::Apply(obj))
                    .await
                    .map_err(|e| classify(&key, e))?
            }
            r => r.map_err(|e| classify(&key, e))?,
        };
        tracing::debug!(object = %key, "applied");
        if let Some(rv) = result.metadata.resource_version
            && let Ok(mut a) = self.applied.lock()
        {
            a.insert(
                key,
                Applied {
                    rv,
                    generation: result.metadata.generation,
                    hash,
                },
            );
        }
        Ok(())
    }

    async fn recreate(&self, api: &Api<DynamicObject>, key: &ObjKey) -> Result<(), ApplyError> {
        let params = DeleteParams::foreground();
        match api.delete(&key.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(ApplyError::Transient(e)),
        }
        for _ in 0..600 {
            if api.get_opt(&key.name).await?.is_none() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ApplyError::Transient(kube::Error::Service(
            format!("{key} was not deleted in time").into(),
        )))
    }

    async fn wait_established(&self, name: &str) -> Result<(), ApplyError> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for _ in 0..300 {
            let crd = api.get_status(name).await?;
            let established = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ApplyError::NotEstablished(name.to_string()))
    }

    /// Deletes the objects in `stale` (kinds resolved through `resources`). Returns how many
    /// deletions were requested.
    pub async fn delete_all(
        &self,
        stale: &[(ObjKey, ApiResource, bool)],
    ) -> Result<usize, ApplyError> {
        let mut n = 0;
        for (key, ar, namespaced) in stale {
            let api: Api<DynamicObject> = if *namespaced {
                Api::namespaced_with(self.client.clone(), &key.namespace, ar)
            } else {
                Api::all_with(self.client.clone(), ar)
            };
            match api.delete(&key.name, &DeleteParams::background()).await {
                Ok(_) => n += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(ApplyError::Transient(e)),
            }
            if let Ok(mut a) = self.applied.lock() {
                a.remove(key);
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_split_group_and_default_namespace() {
        let k = key_of(&json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"ns"}})).unwrap();
        assert_eq!((k.group.as_str(), k.namespace.as_str()), ("apps", "ns"));
        let k =
            key_of(&json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"n"}})).unwrap();
        assert_eq!((k.group.as_str(), k.namespace.as_str()), ("", ""));
        assert!(key_of(&json!({"kind":"Namespace","metadata":{"name":"n"}})).is_err());
        let g = gvk_of(&json!({"apiVersion":"v1","kind":"Namespace"}));
        assert_eq!((g.group.as_str(), g.version.as_str()), ("", "v1"));
    }

    #[test]
    fn content_hash_sees_any_change() {
        let a = json!({"a": 1, "b": [1, 2]});
        let b = json!({"a": 1, "b": [2, 1]});
        assert_ne!(content_hash(&a), content_hash(&b));
        assert_eq!(content_hash(&a), content_hash(&a.clone()));
    }
}
