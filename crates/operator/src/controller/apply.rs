//! Applying rendered objects with server-side apply: resolves each object's resource through a
//! discovery cache, applies CRDs first (waiting until those the release's own objects use are
//! Established), skips objects that have not changed since the operator last applied them (so
//! an idle cluster sees no writes), and prunes what a provider no longer renders.

use std::{
    collections::{BTreeMap, HashMap},
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
use capi_operator_api::APPLIED_HASH_LABEL;

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
    #[error("the cluster does not serve {kind}.{group}/{version}; {found} ({})", missing_kind_hint(.group))]
    MissingKind {
        /// API group of the kind.
        group: String,
        /// API version.
        version: String,
        /// The kind.
        kind: String,
        /// What the cluster serves instead (see [`served_instead`]).
        found: String,
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
    /// The apiserver refused a change of an installed CustomResourceDefinition (an immutable
    /// field such as spec.scope or spec.names, a stored version removed). The CRD is never
    /// deleted to force the change: that would delete every custom resource of it.
    #[error(
        "the apiserver refused the change of CustomResourceDefinition {name} ({fields}): {message}; nothing was deleted and the installed release keeps running"
    )]
    CrdChangeRefused {
        /// The CRD's name.
        name: String,
        /// The refused fields (e.g. `spec.scope`), as the apiserver names them.
        fields: String,
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

/// The failure for a kind discovery does not know, saying what the cluster serves instead: a
/// release written for another version of an API (v1beta1 against a cluster that moved on) is
/// then plain to see. One more discovery request, on this failure only.
async fn missing_kind(client: &Client, gvk: &GroupVersionKind) -> ApplyError {
    let served = kube::discovery::group(client, &gvk.group)
        .await
        .ok()
        .map(|g| {
            let versions: Vec<String> = g.versions().map(str::to_string).collect();
            versions
                .into_iter()
                .map(|v| {
                    let has = g
                        .versioned_resources(&v)
                        .iter()
                        .any(|(r, _)| r.kind == gvk.kind);
                    (v, has)
                })
                .collect::<Vec<_>>()
        });
    ApplyError::MissingKind {
        group: gvk.group.clone(),
        version: gvk.version.clone(),
        kind: gvk.kind.clone(),
        found: served_instead(&gvk.group, &gvk.kind, served.as_deref()),
    }
}

/// What the cluster serves of `group` (its versions, each with whether it has `kind`), in words.
fn served_instead(group: &str, kind: &str, served: Option<&[(String, bool)]>) -> String {
    let shown = if group.is_empty() { "core" } else { group };
    let Some(served) = served.filter(|s| !s.is_empty()) else {
        return format!("it serves no {shown} API group");
    };
    let with: Vec<&str> = served
        .iter()
        .filter(|(_, k)| *k)
        .map(|(v, _)| v.as_str())
        .collect();
    let all: Vec<&str> = served.iter().map(|(v, _)| v.as_str()).collect();
    if with.is_empty() {
        format!("it serves {shown} in {} without {kind}", all.join(", "))
    } else {
        format!("it serves {kind} of {shown} in {}", with.join(", "))
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
        if let ApplyError::CrdChangeRefused { .. } = self {
            return reason::CRD_CHANGE_REFUSED;
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

/// What a failed write of `key` means. The apiserver refusing a CRD (invalid, 400 or 422) is a
/// [`ApplyError::CrdChangeRefused`] naming the fields; an immutable field of a kind that is
/// not [`recreatable`] says it is left alone.
fn classify(key: &ObjKey, e: kube::Error) -> ApplyError {
    let kube::Error::Api(s) = &e else {
        return ApplyError::Transient(e);
    };
    if is_crd(key) && matches!(s.code, 400 | 422) {
        return crd_refused(key, s);
    }
    if !matches!(s.code, 400 | 403 | 404 | 422) {
        return ApplyError::Transient(e);
    }
    let mut message = s.message.clone();
    if is_immutable_field(&e) {
        message.push_str(&format!(
            "; a {} is never deleted and re-created by the operator, as it may hold user data: change or delete it by hand",
            key.kind
        ));
    }
    ApplyError::Refused {
        key: key.to_string(),
        message,
    }
}

fn is_crd(key: &ObjKey) -> bool {
    key.group == "apiextensions.k8s.io" && key.kind == "CustomResourceDefinition"
}

fn crd_refused(key: &ObjKey, s: &kube::core::Status) -> ApplyError {
    let fields: Vec<&str> = s
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| c.field.as_str())
        .filter(|f| !f.is_empty())
        .collect();
    ApplyError::CrdChangeRefused {
        name: key.name.clone(),
        fields: if fields.is_empty() {
            "field not named by the apiserver".into()
        } else {
            fields.join(", ")
        },
        message: s.message.clone(),
    }
}

/// Kinds (group, kind) whose objects the operator deletes and creates again when a new release
/// changes a field the apiserver keeps immutable (a Deployment's selector, a binding's
/// roleRef, a Service's clusterIP): they hold no user data, everything in them comes from
/// the release, and re-creating them is what the upgrade needs. Any other kind (above all a
/// CustomResourceDefinition, whose deletion deletes every custom resource of it; a Namespace;
/// a PersistentVolumeClaim; a Secret or ConfigMap that may hold user data) is never deleted:
/// the apply fails and says so.
pub const RECREATABLE: &[(&str, &str)] = &[
    ("apps", "Deployment"),
    ("apps", "DaemonSet"),
    ("batch", "Job"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("policy", "PodDisruptionBudget"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
];

/// Whether an immutable-field change of `key` may be carried out by re-creating it.
pub fn recreatable(key: &ObjKey) -> bool {
    RECREATABLE
        .iter()
        .any(|(g, k)| *g == key.group && *k == key.kind)
}

fn is_immutable_field(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422 && s.message.contains("field is immutable"))
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
    // both match needs no request at all. After a restart this is empty; the hash label on
    // the object and its managedFields answer the same question (see `Live::ours_last`).
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

/// A stable hash of the content to apply (kept on the object in [`APPLIED_HASH_LABEL`],
/// so it must not change between operator processes).
fn content_hash(obj: &Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(obj.to_string().as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// `obj` with the hash of its content in [`APPLIED_HASH_LABEL`].
fn with_hash(obj: &Value, hash: &str) -> Value {
    let mut body = obj.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(l) = labels.as_object_mut() {
            l.insert(APPLIED_HASH_LABEL.into(), hash.into());
        }
    }
    body
}

fn gvk_of(obj: &Value) -> GroupVersionKind {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

type BoxedApply<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Option<String>, ApplyError>> + Send + 'a>,
>;

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
    /// Field managers other than the operator that wrote the object (not its status), most
    /// recent first: who to name when the operator has to restore it.
    pub writers: Vec<String>,
    /// The operator wrote the object last (by its managedFields times, status aside): with the
    /// hash label, what a restarted operator knows without memory.
    pub ours_last: bool,
    /// The fields the operator's apply owns (its managedFields entry's fieldsV1). A field
    /// someone removed leaves this set even when the removal left no entry of its own (a JSON
    /// patch `remove`): what a restarted operator checks the declared object against.
    pub ours_fields: Option<Value>,
}

/// The manager the apiserver records, at the operator's first apply, for the fields an object
/// already had (one created before by other means): by definition not a later writer.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

impl Live {
    /// What the caches know of `meta`.
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Live {
        let mut entries: Vec<_> = meta
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.subresource.as_deref() != Some("status"))
            .filter_map(|m| Some((m.time.clone(), m.manager.clone()?)))
            .filter(|(_, who)| who != FIELD_MANAGER && who != BEFORE_FIRST_APPLY)
            .collect();
        entries.sort_by(|a, b| b.0.cmp(&a.0));
        let ours = meta
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
            .filter_map(|m| m.time.clone())
            .max();
        // Same second counts as after: managedFields times have a second's resolution.
        let ours_last = ours.is_some_and(|t| {
            entries
                .first()
                .is_none_or(|(other, _)| other.as_ref().is_some_and(|o| *o < t))
        });
        let mut writers: Vec<String> = Vec::new();
        for (_, who) in entries {
            if !writers.contains(&who) {
                writers.push(who);
            }
        }
        Live {
            rv: meta.resource_version.clone().unwrap_or_default(),
            generation: meta.generation,
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            writers,
            ours_last,
            ours_fields: own_fields(meta),
        }
    }
}

/// The fieldsV1 of the operator's own apply entry (not a status one), if there is one.
fn own_fields(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<Value> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
        .filter(|m| m.operation.as_deref() == Some("Apply"))
        .filter(|m| m.subresource.as_deref().is_none_or(str::is_empty))
        .find_map(|m| m.fields_v1.as_ref().map(|f| f.0.clone()))
}

/// Whether the operator's `fields` (fieldsV1) still hold every field of `applied`, the object
/// as it was applied (with its hash label). A field missing there was removed by someone else.
/// Conservative, since a wrong "missing" would mean a write at every restart: only labels and
/// annotations of the top metadata are checked (the apiserver records neither name nor
/// namespace), status, null values and empty maps or lists are skipped, an atomic node (`{}`)
/// is not descended, a list must keep as many items as declared, and only the items found by
/// their key are looked into.
fn fields_cover(applied: &Value, fields: &Value) -> bool {
    let Some(obj) = applied.as_object() else {
        return true;
    };
    obj.iter().all(|(k, v)| match k.as_str() {
        "apiVersion" | "kind" | "status" => true,
        "metadata" => ["labels", "annotations"].iter().all(|m| {
            v.get(*m)
                .is_none_or(|want| field_kept(want, fields.pointer("/f:metadata"), m))
        }),
        _ => field_kept(v, Some(fields), k),
    })
}

/// Whether field `key` of a map whose fieldsV1 node is `parent` still holds `want`.
fn field_kept(want: &Value, parent: Option<&Value>, key: &str) -> bool {
    let empty = match want {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    if empty {
        return true;
    }
    parent
        .and_then(|p| p.get(format!("f:{key}")))
        .is_some_and(|node| node_kept(want, node))
}

/// Whether fieldsV1 `node` still holds the value `want`.
fn node_kept(want: &Value, node: &Value) -> bool {
    let Some(children) = node.as_object() else {
        return true;
    };
    // A leaf: a scalar, or a map or list the apiserver treats as one value (atomic).
    if children.keys().all(|k| k == ".") {
        return true;
    }
    match want {
        Value::Object(m) => m.iter().all(|(k, v)| field_kept(v, Some(node), k)),
        Value::Array(items) => {
            let kept = children
                .keys()
                .filter(|k| ["k:", "v:", "i:"].iter().any(|p| k.starts_with(p)))
                .count();
            // Identical items are one entry of a set.
            let mut declared: Vec<&Value> = Vec::new();
            for i in items {
                if !declared.contains(&i) {
                    declared.push(i);
                }
            }
            kept >= declared.len() && declared.iter().all(|i| item_kept(i, children))
        }
        _ => true,
    }
}

/// Whether the item `want` of a list keyed by its fields (`k:{"name":"a"}` entries) still has
/// its fields in its entry. An item whose entry is not found by its declared values (a key
/// field the apiserver defaulted, e.g. a port's protocol) is only counted, not looked into.
fn item_kept(want: &Value, entries: &serde_json::Map<String, Value>) -> bool {
    let Some(item) = want.as_object() else {
        return true;
    };
    let of_item = |k: &String| {
        k.strip_prefix("k:")
            .and_then(|key| serde_json::from_str::<serde_json::Map<String, Value>>(key).ok())
            .is_some_and(|key| key.iter().all(|(f, v)| item.get(f) == Some(v)))
    };
    entries
        .iter()
        .find(|(k, _)| of_item(k))
        .is_none_or(|(_, node)| node_kept(want, node))
}

/// What the operator last applied to an object.
#[derive(Debug, Clone)]
struct Applied {
    rv: String,
    generation: Option<i64>,
    hash: String,
}

/// Kinds whose spec changes always move metadata.generation and whose status is written by
/// other controllers: for them a new resourceVersion with the same generation is a status
/// write, not drift, and needs no apply (nor a reconcile).
pub const GENERATION_KINDS: &[&str] = &[
    "CustomResourceDefinition",
    "Deployment",
    "DaemonSet",
    "StatefulSet",
    "Certificate",
    "Issuer",
];

/// Without memory of an apply (after a restart): the live object carries this content's hash
/// and nobody wrote it after the operator did.
fn unchanged_since_restart(live: &Live, hash: &str) -> bool {
    live.ours_last && live.labels.get(APPLIED_HASH_LABEL).map(String::as_str) == Some(hash)
}

fn unchanged(desired: &Value, key: &ObjKey, live: &Live, known: &Applied, hash: &str) -> bool {
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

/// The CRDs among `crds` that define a kind some object of `used` (group, kind) has: only
/// those must be Established before the rest is applied. The others establish on their own a
/// moment later, as after `kubectl apply`; waiting for them would only delay the install.
pub fn crds_needed_by<'a>(
    crds: impl Iterator<Item = &'a Value>,
    used: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<String> {
    let used: std::collections::BTreeSet<(&str, &str)> = used.collect();
    crds.filter(|c| c.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition"))
        .filter(|c| {
            let group = c.pointer("/spec/group").and_then(Value::as_str);
            let kind = c.pointer("/spec/names/kind").and_then(Value::as_str);
            group.zip(kind).is_some_and(|gk| used.contains(&gk))
        })
        .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// Waits (up to about 30 s) until the CustomResourceDefinition `name` is Established. The
/// apiserver establishes a new CRD within milliseconds, so it looks again soon at first.
pub async fn wait_established(client: &Client, name: &str) -> Result<(), ApplyError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut pause = Duration::from_millis(5);
    for _ in 0..310 {
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
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
    Err(ApplyError::NotEstablished(name.to_string()))
}

/// What one apply pass did.
#[derive(Debug, Default)]
pub struct ApplyReport {
    /// Objects sent to the apiserver.
    pub applied: usize,
    /// Objects skipped as unchanged.
    pub unchanged: usize,
    /// Objects changed or deleted outside the operator that it had to write back, each with
    /// who changed it (e.g. `Deployment ns/name (changed by clusterctl)`).
    pub repaired: Vec<String>,
}

/// An object to write, with what is needed to tell afterwards whether it was drift.
struct Pending<'a> {
    obj: &'a Value,
    key: ObjKey,
    hash: String,
    /// The operator applied this very content before: a write now means someone else changed
    /// (or deleted) the object, if the write changes it.
    seen: Option<Live>,
    known_same: bool,
}

impl Pending<'_> {
    /// The description of a repair, when `rv` (after the write) shows the write changed the
    /// object the operator had applied with this content before.
    fn repaired(&self, rv: Option<&str>) -> Option<String> {
        if !self.known_same {
            return None;
        }
        match &self.seen {
            None => Some(format!("{} (deleted)", self.key)),
            Some(l) if rv != Some(l.rv.as_str()) => Some(match l.writers.first() {
                Some(who) => format!("{} (changed by {who})", self.key),
                None => format!("{} (changed)", self.key),
            }),
            Some(_) => None,
        }
    }
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

    /// Whether `obj` needs a request: the operator never applied this content, or the live
    /// object changed since it did.
    pub fn needs_apply(&self, obj: &Value, live: Option<&Live>) -> bool {
        key_of(obj).map_or(true, |key| {
            self.differs(obj, &key, &content_hash(obj), live)
        })
    }

    fn differs(&self, obj: &Value, key: &ObjKey, hash: &str, live: Option<&Live>) -> bool {
        let known = self.applied.lock().ok().and_then(|a| a.get(key).cloned());
        match (live, known) {
            (Some(l), Some(k)) => !unchanged(obj, key, l, &k, hash),
            (Some(l), None) => {
                if !unchanged_since_restart(l, hash) {
                    return true;
                }
                // A field removed while no operator ran (a JSON patch `remove`) left no
                // managedFields entry of its own, only a hole in the operator's.
                if l.ours_fields
                    .as_ref()
                    .is_some_and(|f| !fields_cover(&with_hash(obj, hash), f))
                {
                    return true;
                }
                // Trusted on its hash label (a restart): from now on the object is compared
                // with what is live now, as if just applied, so a later change that leaves no
                // managedFields entry (a JSON-patch `remove`) is still seen as drift.
                self.remember(key, l, hash);
                false
            }
            (None, _) => true,
        }
    }

    /// Records `live` as what the operator applied to `key` with content `hash` (in memory only).
    fn remember(&self, key: &ObjKey, live: &Live, hash: &str) {
        if let Ok(mut a) = self.applied.lock() {
            a.insert(
                key.clone(),
                Applied {
                    rv: live.rv.clone(),
                    generation: live.generation,
                    hash: hash.to_string(),
                },
            );
        }
    }

    async fn resolve(&self, gvk: &GroupVersionKind) -> Result<Resolved, ApplyError> {
        let k = (gvk.group.clone(), gvk.version.clone(), gvk.kind.clone());
        if let Some(r) = self.discovery.lock().ok().and_then(|d| d.get(&k).cloned()) {
            return Ok(r);
        }
        let (resource, caps) = match kube::discovery::pinned_kind(&self.client, gvk).await {
            Ok(x) => x,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(missing_kind(&self.client, gvk).await);
            }
            Err(kube::Error::Discovery(_)) => return Err(missing_kind(&self.client, gvk).await),
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
        for (i, obj) in objects.iter().enumerate() {
            // Hashing a large release's objects adds up: let timers and watches run between.
            if i % 16 == 15 {
                tokio::task::yield_now().await;
            }
            let key = key_of(obj)?;
            let hash = content_hash(obj);
            let seen = live(&key);
            if !self.differs(obj, &key, &hash, seen.as_ref()) {
                report.unchanged += 1;
                continue;
            }
            // Applied with this content before: by this process, or (after a restart) as the
            // object's hash label says.
            let known_same = self
                .applied
                .lock()
                .ok()
                .and_then(|a| a.get(&key).map(|k| k.hash == hash))
                .unwrap_or_else(|| {
                    seen.as_ref()
                        .is_some_and(|l| l.labels.get(APPLIED_HASH_LABEL) == Some(&hash))
                });
            let pending = Pending {
                obj,
                key,
                hash,
                seen,
                known_same,
            };
            if pending.key.kind == "CustomResourceDefinition" || pending.key.kind == "Namespace" {
                first.push(pending);
            } else {
                rest.push(pending);
            }
        }
        let needed = crds_needed_by(
            first.iter().map(|p| p.obj),
            rest.iter()
                .map(|p| (p.key.group.as_str(), p.key.kind.as_str())),
        );
        report.applied += first.len() + rest.len();
        self.check_crd_changes(&first).await?;
        report.repaired.extend(self.apply_many(first).await?);
        futures::future::try_join_all(needed.iter().map(|name| self.wait_established(name)))
            .await?;
        report.repaired.extend(self.apply_many(rest).await?);
        Ok(report)
    }

    /// Asks the apiserver, in a dry run that writes nothing, whether it accepts each new content
    /// of an installed CRD among `batch`. One it refuses (spec.scope changed, say) stops the pass
    /// before anything of the release is written or pruned: the installed release keeps
    /// running as it was, and the CRD is never deleted to force the change.
    async fn check_crd_changes(&self, batch: &[Pending<'_>]) -> Result<(), ApplyError> {
        // Content applied before (a drift repair) was accepted then; a new CRD has nothing
        // that could be immutable.
        let changes: Vec<&Pending<'_>> = batch
            .iter()
            .filter(|p| is_crd(&p.key) && p.seen.is_some() && !p.known_same)
            .collect();
        for group in changes.chunks(APPLY_CONCURRENCY) {
            futures::future::try_join_all(group.iter().map(|p| self.dry_run(p))).await?;
        }
        Ok(())
    }

    /// A server-side apply of `p` in a dry run: the apiserver validates it and stores nothing.
    async fn dry_run(&self, p: &Pending<'_>) -> Result<(), ApplyError> {
        let body = with_hash(p.obj, &p.hash);
        let r = self.resolve(&gvk_of(&body)).await?;
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        params.dry_run = true;
        self.api(&r, &p.key.namespace)
            .patch(&p.key.name, &params, &Patch::Apply(&body))
            .await
            .map(drop)
            .map_err(|e| classify(&p.key, e))
    }

    /// Applies a batch, several at a time; gives the repairs (see [`Pending::repaired`]).
    async fn apply_many(&self, batch: Vec<Pending<'_>>) -> Result<Vec<String>, ApplyError> {
        let mut repaired = Vec::new();
        let mut batch = batch.into_iter();
        loop {
            let mut group: Vec<BoxedApply<'_>> = Vec::new();
            for p in batch.by_ref().take(APPLY_CONCURRENCY) {
                group.push(Box::pin(self.apply_one(p)));
            }
            if group.is_empty() {
                return Ok(repaired);
            }
            for r in futures::future::join_all(group).await {
                repaired.extend(r?);
            }
        }
    }

    async fn apply_one(&self, p: Pending<'_>) -> Result<Option<String>, ApplyError> {
        let hash = p.hash.clone();
        let body = with_hash(p.obj, &hash);
        let obj = &body;
        let key = p.key.clone();
        let r = self.resolve(&gvk_of(obj)).await?;
        let api = self.api(&r, &key.namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let result = match api.patch(&key.name, &params, &Patch::Apply(obj)).await {
            Err(e) if is_immutable_field(&e) && recreatable(&key) => {
                // A new version changed an immutable field (e.g. a Deployment selector) of an
                // object holding no user data: it is replaced, which is what an upgrade needs.
                tracing::info!(object = %key, "immutable field changed; recreating");
                self.recreate(&api, &key).await?;
                api.patch(&key.name, &params, &Patch::Apply(obj))
                    .await
                    .map_err(|e| classify(&key, e))?
            }
            r => r.map_err(|e| classify(&key, e))?,
        };
        tracing::debug!(object = %key, "applied");
        let repaired = p.repaired(result.metadata.resource_version.as_deref());
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
        Ok(repaired)
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
        wait_established(&self.client, name).await
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

    #[test]
    fn a_missing_kind_says_what_the_cluster_serves_instead() {
        let v = |list: &[(&str, bool)]| -> Vec<(String, bool)> {
            list.iter().map(|(v, k)| (v.to_string(), *k)).collect()
        };
        let group = "bootstrap.cluster.x-k8s.io";
        let older = v(&[("v1beta1", true)]);
        assert_eq!(
            served_instead(group, "KubeadmConfig", Some(&older)),
            "it serves KubeadmConfig of bootstrap.cluster.x-k8s.io in v1beta1"
        );
        let other = v(&[("v1beta2", false), ("v1beta1", false)]);
        assert_eq!(
            served_instead(group, "KubeadmConfig", Some(&other)),
            "it serves bootstrap.cluster.x-k8s.io in v1beta2, v1beta1 without KubeadmConfig"
        );
        assert_eq!(
            served_instead("cert-manager.io", "Issuer", None),
            "it serves no cert-manager.io API group"
        );
        assert_eq!(
            served_instead("", "Pod", Some(&[])),
            "it serves no core API group"
        );
        let e = ApplyError::MissingKind {
            group: group.into(),
            version: "v1beta2".into(),
            kind: "KubeadmConfig".into(),
            found: served_instead(group, "KubeadmConfig", Some(&older)),
        };
        assert!(
            e.to_string().contains("v1beta2; it serves KubeadmConfig"),
            "{e}"
        );
    }

    #[test]
    fn only_crds_the_release_uses_are_waited_for() {
        let crd = |name: &str, group: &str, kind: &str| {
            serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name},
                "spec": {"group": group, "names": {"kind": kind}}})
        };
        let crds = [
            crd("clusters.cluster.x-k8s.io", "cluster.x-k8s.io", "Cluster"),
            crd("widgets.example.org", "example.org", "Widget"),
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
        ];
        let used = [
            ("apps", "Deployment"),
            ("example.org", "Widget"),
            ("", "Service"),
        ];
        assert_eq!(
            crds_needed_by(crds.iter(), used.into_iter()),
            vec!["widgets.example.org".to_string()]
        );
        // A kind of the same name in another group needs nothing.
        let other = [("other.io", "Cluster")];
        assert!(crds_needed_by(crds.iter(), other.into_iter()).is_empty());
    }
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

    fn managed(manager: &str, time: &str, subresource: Option<&str>) -> serde_json::Value {
        json!({"manager": manager, "operation": "Update", "time": time, "subresource": subresource})
    }

    #[test]
    fn writers_are_other_managers_newest_first_without_status_writers() {
        let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
            serde_json::from_value(json!({
                "resourceVersion": "7",
                "managedFields": [
                    managed(FIELD_MANAGER, "2026-01-01T00:00:05Z", None),
                    managed("kubectl-edit", "2026-01-01T00:00:01Z", None),
                    managed("clusterctl", "2026-01-01T00:00:03Z", None),
                    managed("kube-controller-manager", "2026-01-01T00:00:09Z", Some("status")),
                    managed("clusterctl", "2026-01-01T00:00:02Z", Some("scale")),
                ],
            }))
            .unwrap();
        let live = Live::of(&meta);
        assert_eq!(live.rv, "7");
        assert_eq!(live.writers, ["clusterctl", "kubectl-edit"]);
    }

    #[test]
    fn a_repair_is_a_write_that_changed_what_the_operator_had_applied() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"}});
        let live = |rv: &str, writers: &[&str]| Live {
            rv: rv.into(),
            writers: writers.iter().map(|w| w.to_string()).collect(),
            ..Live::default()
        };
        let pending = |seen: Option<Live>, known_same: bool| Pending {
            obj: &obj,
            key: key_of(&obj).unwrap(),
            hash: "h".into(),
            seen,
            known_same,
        };
        // Changed by someone, and the write changed it back.
        assert_eq!(
            pending(Some(live("5", &["clusterctl"])), true)
                .repaired(Some("6"))
                .as_deref(),
            Some("Deployment ns/d (changed by clusterctl)")
        );
        // Deleted by someone.
        assert_eq!(
            pending(None, true).repaired(Some("9")).as_deref(),
            Some("Deployment ns/d (deleted)")
        );
        // Another writer touched fields the operator does not set: the write changed nothing.
        assert_eq!(
            pending(Some(live("5", &["cainjector"])), true).repaired(Some("5")),
            None
        );
        // New content (an upgrade, a changed spec): not drift.
        assert_eq!(
            pending(Some(live("5", &["clusterctl"])), false).repaired(Some("6")),
            None
        );
        assert_eq!(pending(None, false).repaired(Some("1")), None);
    }

    #[test]
    fn a_restarted_operator_trusts_its_hash_only_while_it_wrote_last() {
        let meta = |entries: Vec<serde_json::Value>, hash: Option<&str>| {
            let m: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
                serde_json::from_value(json!({
                    "resourceVersion": "3",
                    "labels": hash.map(|h| json!({APPLIED_HASH_LABEL: h})),
                    "managedFields": entries,
                }))
                .unwrap();
            Live::of(&m)
        };
        let ours = managed(FIELD_MANAGER, "2026-01-01T00:00:05Z", None);
        // Written by the operator, status written since: nothing to do.
        let l = meta(
            vec![
                ours.clone(),
                managed(
                    "kube-controller-manager",
                    "2026-01-01T00:00:09Z",
                    Some("status"),
                ),
            ],
            Some("abc"),
        );
        assert!(l.ours_last);
        assert!(unchanged_since_restart(&l, "abc"));
        // Other content declared now (an upgrade while the operator was down): apply.
        assert!(!unchanged_since_restart(&l, "def"));
        // Someone wrote it after the operator (or in the same second): apply.
        for t in ["2026-01-01T00:00:07Z", "2026-01-01T00:00:05Z"] {
            let l = meta(
                vec![ours.clone(), managed("kubectl-edit", t, None)],
                Some("abc"),
            );
            assert!(!l.ours_last, "{t}");
            assert!(!unchanged_since_restart(&l, "abc"));
        }
        // Fields an object had before the operator's first apply (a namespace created by hand)
        // are recorded in the same second, and are not a later write.
        let l = meta(
            vec![
                ours.clone(),
                managed("before-first-apply", "2026-01-01T00:00:05Z", None),
            ],
            Some("abc"),
        );
        assert!(unchanged_since_restart(&l, "abc"));
        // Never written by the operator (clusterctl's objects being adopted): apply.
        let l = meta(
            vec![managed("clusterctl", "2026-01-01T00:00:01Z", None)],
            Some("abc"),
        );
        assert!(!unchanged_since_restart(&l, "abc"));
        // The hash is stable across processes and sees any change.
        let a = json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        assert_eq!(content_hash(&a), content_hash(&a.clone()));
        assert_eq!(content_hash(&a).len(), 32);
        assert_ne!(
            content_hash(&a),
            content_hash(&json!({"kind": "ConfigMap", "data": {"k": "w"}}))
        );
        assert_eq!(
            with_hash(&a, "abc")["metadata"]["labels"][APPLIED_HASH_LABEL],
            "abc"
        );
    }

    fn key(group: &str, kind: &str) -> ObjKey {
        ObjKey {
            group: group.into(),
            kind: kind.into(),
            namespace: String::new(),
            name: "x".into(),
        }
    }

    #[test]
    fn only_kinds_without_user_data_are_recreated_for_an_immutable_field() {
        for (g, k) in [
            ("apps", "Deployment"),
            ("apps", "DaemonSet"),
            ("batch", "Job"),
            ("", "Service"),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
            ),
        ] {
            assert!(recreatable(&key(g, k)), "{g}/{k}");
        }
        for (g, k) in [
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("", "Namespace"),
            ("", "PersistentVolumeClaim"),
            ("", "Secret"),
            ("", "ConfigMap"),
            ("apps", "StatefulSet"),
            ("cluster.x-k8s.io", "Cluster"),
            // A kind of the same name in another group is not the allowed one.
            ("example.org", "Deployment"),
        ] {
            assert!(!recreatable(&key(g, k)), "{g}/{k}");
        }
    }

    fn invalid(message: &str, field: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": 422, "reason": "Invalid", "message": message,
            "details": {"causes": [{"reason": "FieldValueInvalid", "field": field,
                "message": "Invalid value: \"Cluster\": field is immutable"}]},
        }))
        .unwrap();
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn a_refused_crd_change_names_the_crd_and_field_and_waits_for_a_change() {
        let crd = ObjKey {
            name: "widgets.example.org".into(),
            ..key("apiextensions.k8s.io", "CustomResourceDefinition")
        };
        let msg = "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.org\" is invalid: spec.scope: Invalid value: \"Cluster\": field is immutable";
        let e = classify(&crd, invalid(msg, "spec.scope"));
        assert!(
            matches!(&e, ApplyError::CrdChangeRefused { name, fields, .. }
                if name == "widgets.example.org" && fields == "spec.scope"),
            "{e:?}"
        );
        assert_eq!(
            e.reason(),
            capi_operator_api::conditions::reason::CRD_CHANGE_REFUSED
        );
        assert!(!e.is_transient());
        let text = e.to_string();
        assert!(text.contains("widgets.example.org") && text.contains("spec.scope"));
        assert!(text.contains("nothing was deleted"), "{text}");
        // An immutable field of a kind that may hold user data: refused, and said why.
        let secret = key("", "Secret");
        let e = classify(&secret, invalid("data: field is immutable", "data"));
        assert!(matches!(&e, ApplyError::Refused { .. }), "{e:?}");
        assert!(e.to_string().contains("never deleted"), "{e}");
    }

    #[tokio::test]
    async fn after_a_restart_a_change_without_a_managed_fields_trace_is_drift() {
        let fake = crate::controller::testing::fake_api::FakeApi::new();
        let applier = Applier::new(fake.client());
        let webhook = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "w"},
            "webhooks": [{"name": "a"}, {"name": "b"}]});
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns"}, "spec": {"replicas": 1}});
        // What a restarted operator sees: its hash label, its managedFields entry the newest.
        let live = |obj: &Value, rv: &str, generation: Option<i64>| Live {
            rv: rv.into(),
            generation,
            labels: [(APPLIED_HASH_LABEL.to_string(), content_hash(obj))].into(),
            ours_last: true,
            ..Live::default()
        };
        // At start: trusted, no request (a restart writes nothing).
        assert!(!applier.needs_apply(&webhook, Some(&live(&webhook, "10", None))));
        assert!(!applier.needs_apply(&deployment, Some(&live(&deployment, "20", Some(3)))));
        // Unchanged since: still nothing to do.
        assert!(!applier.needs_apply(&webhook, Some(&live(&webhook, "10", None))));
        // A JSON-patch remove: a new resourceVersion, no managedFields entry of the editor.
        assert!(applier.needs_apply(&webhook, Some(&live(&webhook, "11", None))));
        // For a generation kind a spec change moves the generation; a status write does not.
        assert!(applier.needs_apply(&deployment, Some(&live(&deployment, "21", Some(4)))));
        assert!(!applier.needs_apply(&deployment, Some(&live(&deployment, "22", Some(3)))));
        // Nothing was sent to the apiserver by these checks.
        assert!(fake.requests().is_empty());
    }

    /// A webhook configuration as the operator applies it, and the fieldsV1 a v1.34 apiserver
    /// records for that apply.
    fn applied_webhooks() -> (Value, Value) {
        let hook = |name: &str, policy: Option<&str>| {
            let mut h = json!({"name": name, "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {"service": {"name": "s", "namespace": "default", "path": "/a"}},
                "rules": [{"apiGroups": ["x"], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["w"]}]});
            if let Some(p) = policy {
                h["failurePolicy"] = p.into();
            }
            h
        };
        let applied = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "w", "labels": {"a": "b", "h": "x"}, "annotations": {},
                "creationTimestamp": null},
            "webhooks": [hook("a.example.org", Some("Ignore")), hook("b.example.org", None)]});
        let fields = json!({"f:metadata": {"f:annotations": {}, "f:labels": {"f:a": {}, "f:h": {}}},
            "f:webhooks": {
                "k:{\"name\":\"a.example.org\"}": {".": {}, "f:admissionReviewVersions": {},
                    "f:clientConfig": {"f:service": {"f:name": {}, "f:namespace": {}, "f:path": {}}},
                    "f:failurePolicy": {}, "f:name": {}, "f:rules": {}, "f:sideEffects": {}},
                "k:{\"name\":\"b.example.org\"}": {".": {}, "f:admissionReviewVersions": {},
                    "f:clientConfig": {"f:service": {"f:name": {}, "f:namespace": {}, "f:path": {}}},
                    "f:name": {}, "f:rules": {}, "f:sideEffects": {}}}});
        (applied, fields)
    }

    /// A Deployment as applied, and the fieldsV1 a v1.34 apiserver records for that apply.
    fn applied_deployment() -> (Value, Value) {
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "default", "labels": {"app": "d"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}, "creationTimestamp": null},
                    "spec": {"containers": [{"name": "m", "image": "x:1", "args": ["--a", "--b"],
                        "command": [], "env": [{"name": "A", "value": "1"}, {"name": "B", "value": ""}],
                        "ports": [{"containerPort": 9443, "name": "w", "protocol": "TCP"}],
                        "resources": {}, "securityContext": {"allowPrivilegeEscalation": false}}],
                    "volumes": [{"name": "c", "secret": {"secretName": "c"}},
                        {"name": "e", "emptyDir": {}}],
                    "nodeSelector": {}, "tolerations": [], "hostNetwork": false}}},
            "status": {"replicas": 1}});
        let fields = json!({"f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:selector": {},
                "f:template": {"f:metadata": {"f:creationTimestamp": {}, "f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"m\"}": {".": {}, "f:args": {},
                        "f:command": {},
                        "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}},
                            "k:{\"name\":\"B\"}": {".": {}, "f:name": {}, "f:value": {}}},
                        "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":9443,\"protocol\":\"TCP\"}":
                            {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                        "f:resources": {}, "f:securityContext": {"f:allowPrivilegeEscalation": {}}}},
                    "f:hostNetwork": {}, "f:nodeSelector": {}, "f:tolerations": {},
                    "f:volumes": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {},
                            "f:secret": {"f:secretName": {}}},
                        "k:{\"name\":\"e\"}": {".": {}, "f:emptyDir": {}, "f:name": {}}}}}}});
        (applied, fields)
    }

    fn without(fields: &Value, pointer: &str) -> Value {
        let mut f = fields.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        f.pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap()
            .remove(&key.replace("~1", "/"))
            .unwrap();
        f
    }

    #[test]
    fn the_operators_fields_as_recorded_cover_what_it_applied() {
        for (applied, fields) in [applied_webhooks(), applied_deployment()] {
            assert!(fields_cover(&applied, &fields), "{applied}");
        }
    }

    #[test]
    fn a_field_removed_by_someone_else_is_missing_from_the_operators_fields() {
        let (webhooks, wf) = applied_webhooks();
        // What the apiserver leaves after `kubectl patch --type=json` removing /webhooks/0,
        // a label, a field of a webhook.
        for gone in [
            "/f:webhooks/k:{\"name\":\"a.example.org\"}",
            "/f:metadata/f:labels/f:a",
            "/f:webhooks/k:{\"name\":\"a.example.org\"}/f:failurePolicy",
            "/f:webhooks/k:{\"name\":\"b.example.org\"}/f:clientConfig/f:service/f:path",
        ] {
            assert!(!fields_cover(&webhooks, &without(&wf, gone)), "{gone}");
        }
        let (deployment, df) = applied_deployment();
        let c = "/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"m\"}";
        for gone in [
            format!("{c}/f:env/k:{{\"name\":\"B\"}}"),
            format!("{c}/f:securityContext"),
            format!("{c}/f:image"),
            "/f:spec/f:replicas".to_string(),
            "/f:spec/f:template/f:spec/f:volumes/k:{\"name\":\"e\"}".to_string(),
        ] {
            assert!(!fields_cover(&deployment, &without(&df, &gone)), "{gone}");
        }
    }

    #[test]
    fn what_the_apiserver_does_not_record_is_not_required() {
        let (deployment, df) = applied_deployment();
        // Status, nulls, empty maps and lists, the name and namespace: not in fieldsV1 needed.
        for gone in [
            "/f:spec/f:template/f:metadata/f:creationTimestamp",
            "/f:spec/f:template/f:spec/f:nodeSelector",
            "/f:spec/f:template/f:spec/f:tolerations",
            "/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"m\"}/f:command",
        ] {
            assert!(fields_cover(&deployment, &without(&df, gone)), "{gone}");
        }
        // An atomic list or map (a leaf) is not looked into; nor is an item not found by its key
        // (the port's key holds the protocol the apiserver defaulted).
        let (webhooks, wf) = applied_webhooks();
        assert!(fields_cover(
            &json!({"spec": {"selector": {"matchLabels": {"app": "d"}}, "args": ["--c"]}}),
            &json!({"f:spec": {"f:selector": {}, "f:args": {}}})
        ));
        let mut more = webhooks.clone();
        more["webhooks"][0]["rules"] = json!([{"apiGroups": ["y"]}, {"apiGroups": ["z"]}]);
        assert!(fields_cover(&more, &wf));
        let mut port = deployment.clone();
        port["spec"]["template"]["spec"]["containers"][0]["ports"] =
            json!([{"containerPort": 9443}]);
        assert!(fields_cover(&port, &df));
        // Identical items of a set are one entry.
        assert!(fields_cover(
            &json!({"metadata": {"finalizers": ["f", "f"]}, "spec": {"s": ["v", "v"]}}),
            &json!({"f:spec": {"f:s": {"v:\"v\"": {}}}})
        ));
        assert!(!fields_cover(
            &json!({"spec": {"s": ["v", "w"]}}),
            &json!({"f:spec": {"f:s": {"v:\"v\"": {}}}})
        ));
    }

    #[tokio::test]
    async fn after_a_restart_a_field_removed_meanwhile_is_drift() {
        let fake = crate::controller::testing::fake_api::FakeApi::new();
        let applier = Applier::new(fake.client());
        let (webhooks, fields) = applied_webhooks();
        let mut declared = webhooks.clone();
        declared["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(APPLIED_HASH_LABEL);
        let hash = content_hash(&declared);
        let hash_field = format!("f:{APPLIED_HASH_LABEL}");
        let mut recorded = fields.clone();
        recorded["f:metadata"]["f:labels"][&hash_field] = json!({});
        let live = |fields: Value| Live {
            rv: "10".into(),
            labels: [(APPLIED_HASH_LABEL.to_string(), hash.clone())].into(),
            ours_last: true,
            ours_fields: Some(fields),
            ..Live::default()
        };
        let first_gone = without(&recorded, "/f:webhooks/k:{\"name\":\"a.example.org\"}");
        assert!(applier.needs_apply(&declared, Some(&live(first_gone))));
        // Without the hash label in the operator's fields: someone removed it, drift too.
        let mut label_gone = recorded.clone();
        label_gone["f:metadata"]["f:labels"]
            .as_object_mut()
            .unwrap()
            .remove(&hash_field);
        assert!(applier.needs_apply(&declared, Some(&live(label_gone))));
        assert!(!applier.needs_apply(&declared, Some(&live(recorded))));
        assert!(fake.requests().is_empty());
    }
}
