//! Applying rendered objects with server-side apply: resolves each object's resource through a
//! discovery cache, applies CRDs first (waiting until those the release's own objects use are
//! Established), skips objects that have not changed since the operator last applied them (so
//! an idle cluster sees no writes), and prunes what a provider no longer renders.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
    time::Duration,
};

use capi_cluster_io::{
    ServerSideApply,
    server_side_apply::{content_hash, with_hash},
};
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject},
};
use serde_json::Value;

use capi_operator_api::APPLIED_HASH_LABEL;

use capi_decide::added_entries::{AddedEntry, added_entries, without_entries};
use capi_decide::adoption;

/// Field manager of everything the operator applies.
pub const FIELD_MANAGER: &str = capi_cluster_io::server_side_apply::OPERATOR_FIELD_MANAGER;

pub use capi_cluster_io::{
    ApplyError, CERT_MANAGER_GROUP, ObjKey, RECREATABLE, crds_needed_by, key_of, recreatable,
    wait_established,
};

/// How long a CustomResourceDefinition may take to become Established.
pub const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);

/// Applies and prunes objects; shared by every controller.
pub struct Applier {
    io: ServerSideApply,
    // What the operator last applied per object: the resourceVersion the apiserver answered and
    // a hash of the applied content. An object whose live resourceVersion and desired content
    // both match needs no request at all. After a restart this is empty; the hash label on
    // the object and its managedFields answer the same question (see `Live::ours_last`).
    applied: Mutex<HashMap<ObjKey, Applied>>,
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
    /// The field sets (fieldsV1) of the other managers, status writers aside: what tells an
    /// entry someone else added ([`added_entries`]).
    pub others: Vec<(String, Value)>,
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
            others: other_fields(meta),
        }
    }
}

/// The fieldsV1 of every manager but the operator, status writes left out.
fn other_fields(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<(String, Value)> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() != Some("status"))
        .filter(|m| m.manager.as_deref() != Some(FIELD_MANAGER))
        .filter_map(|m| Some((m.manager.clone()?, m.fields_v1.as_ref()?.0.clone())))
        .collect()
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

/// What one apply pass did.
#[derive(Debug, Default)]
pub struct ApplyReport {
    /// Objects sent to the apiserver.
    pub applied: usize,
    /// Objects skipped as unchanged.
    pub unchanged: usize,
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
            io: ServerSideApply::new(client, FIELD_MANAGER),
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
                // An entry someone added before this process started (perhaps before the
                // operator removed such entries at all) left the operator's fields whole.
                if !added_entries(&l.others, obj).is_empty() {
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

    /// The generation the server gave `key` at this process's last apply of it: a cache
    /// showing an older one has not seen that apply yet.
    pub fn applied_generation(&self, key: &ObjKey) -> Option<i64> {
        self.applied
            .lock()
            .ok()
            .and_then(|a| a.get(key).and_then(|k| k.generation))
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

    /// Applies `objects`: namespaces and CRDs first (waiting until new CRDs are Established),
    /// then everything else, several at a time. `live` gives what the caches know of an object
    /// (None when absent), so unchanged objects cost no request. Each object changed or
    /// deleted outside the operator that it wrote back is added to `repaired` with who changed
    /// it (e.g. `Deployment ns/name (changed by clusterctl)`), also when the pass then fails:
    /// a repair that was made is reported even if another object's write is refused.
    pub async fn apply_all(
        &self,
        objects: &[Value],
        live: impl Fn(&ObjKey) -> Option<Live>,
        repaired: &mut Vec<String>,
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
        self.check_take_over(first.iter().chain(&rest)).await?;
        self.check_crd_changes(&first).await?;
        self.apply_many(first, repaired).await?;
        futures::future::try_join_all(needed.iter().map(|name| self.wait_established(name)))
            .await?;
        self.apply_many(rest, repaired).await?;
        Ok(report)
    }

    /// Refuses, before anything is written, to take over an existing object that was not
    /// installed for the provider ([`adoption::may_take_over`]). The caches answer for what
    /// they hold; an object they lack that this process has not applied either is read once,
    /// metadata only (on a first install, every object of the release).
    async fn check_take_over<'p>(
        &self,
        batch: impl Iterator<Item = &'p Pending<'p>>,
    ) -> Result<(), ApplyError> {
        let refuse = |p: &Pending<'_>| {
            ApplyError::NotTakenOver(adoption::refusal(&p.key.to_string(), p.obj))
        };
        let mut unseen = Vec::new();
        for p in batch {
            match &p.seen {
                Some(l) if !adoption::may_take_over(p.obj, &l.labels) => return Err(refuse(p)),
                Some(_) => {}
                None if self.applied_before(&p.key) => {}
                None => unseen.push(p),
            }
        }
        for group in unseen.chunks(APPLY_CONCURRENCY) {
            let found = futures::future::try_join_all(
                group.iter().map(|p| self.io.existing_labels(&p.key, p.obj)),
            )
            .await?;
            for (p, labels) in group.iter().zip(found) {
                if labels.is_some_and(|l| !adoption::may_take_over(p.obj, &l)) {
                    return Err(refuse(p));
                }
            }
        }
        Ok(())
    }

    fn applied_before(&self, key: &ObjKey) -> bool {
        self.applied.lock().is_ok_and(|a| a.contains_key(key))
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
            .filter(|p| capi_cluster_io::apply_error::is_crd(&p.key))
            .filter(|p| p.seen.is_some() && !p.known_same)
            .collect();
        for group in changes.chunks(APPLY_CONCURRENCY) {
            futures::future::try_join_all(group.iter().map(|p| self.dry_run(p))).await?;
        }
        Ok(())
    }

    /// A server-side apply of `p` in a dry run: the apiserver validates it and stores nothing.
    async fn dry_run(&self, p: &Pending<'_>) -> Result<(), ApplyError> {
        self.io.dry_run(&p.key, &with_hash(p.obj, &p.hash)).await
    }

    /// Applies a batch, several at a time; adds the repairs to `repaired` (see
    /// [`Pending::repaired`]). A group's writes all finish before its first error is returned,
    /// so the repairs of the others in it are not lost with the pass.
    async fn apply_many(
        &self,
        batch: Vec<Pending<'_>>,
        repaired: &mut Vec<String>,
    ) -> Result<(), ApplyError> {
        let mut batch = batch.into_iter();
        loop {
            let mut group: Vec<BoxedApply<'_>> = Vec::new();
            for p in batch.by_ref().take(APPLY_CONCURRENCY) {
                group.push(Box::pin(self.apply_one(p)));
            }
            if group.is_empty() {
                return Ok(());
            }
            let mut failed = None;
            for r in futures::future::join_all(group).await {
                match r {
                    Ok(note) => repaired.extend(note),
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }

    async fn apply_one(&self, p: Pending<'_>) -> Result<Option<String>, ApplyError> {
        let hash = p.hash.clone();
        let key = p.key.clone();
        let result = self
            .io
            .apply_recreating(&key, &with_hash(p.obj, &hash))
            .await?;
        tracing::debug!(object = %key, "applied");
        let mut repaired = p.repaired(result.metadata.resource_version.as_deref());
        let result = match self.remove_added(&key, p.obj, result).await? {
            Removed::Nothing(result) => result,
            Removed::Entries(result, removed) => {
                repaired = Some(removed_note(&key, &removed));
                result
            }
        };
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

    /// Removes the list entries other field managers added to `live` (the object as the apply
    /// answered it) that `desired` does not hold. A replace at the answered resourceVersion:
    /// should the object change meanwhile, the conflict fails this pass and the next one
    /// looks again.
    async fn remove_added(
        &self,
        key: &ObjKey,
        desired: &Value,
        live: DynamicObject,
    ) -> Result<Removed, ApplyError> {
        let others = other_fields(&live.metadata);
        let added = added_entries(&others, desired);
        if added.is_empty() {
            return Ok(Removed::Nothing(live));
        }
        let mut body = serde_json::to_value(&live).map_err(|e| invalid(key, e))?;
        let Some(mut body) = without_entries(&body.take(), &added) else {
            return Ok(Removed::Nothing(live));
        };
        // Left out, the apiserver keeps the recorded managers and drops the removed fields.
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        let body: DynamicObject = serde_json::from_value(body).map_err(|e| invalid(key, e))?;
        let replaced = self.io.replace(key, desired, &body).await?;
        tracing::info!(object = %key, entries = ?added.iter().map(ToString::to_string).collect::<Vec<_>>(), "removed list entries added outside the operator");
        Ok(Removed::Entries(replaced, added))
    }

    async fn wait_established(&self, name: &str) -> Result<(), ApplyError> {
        wait_established(self.io.client(), name, ESTABLISHED_TIMEOUT).await
    }

    /// Deletes the objects in `stale` (kinds resolved through `resources`). Returns how many
    /// deletions were requested.
    pub async fn delete_all(
        &self,
        stale: &[(ObjKey, ApiResource, bool)],
    ) -> Result<usize, ApplyError> {
        let mut n = 0;
        for (key, ar, namespaced) in stale {
            let client = self.io.client().clone();
            let api: Api<DynamicObject> = if *namespaced {
                Api::namespaced_with(client, &key.namespace, ar)
            } else {
                Api::all_with(client, ar)
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

/// What [`Applier::remove_added`] did.
enum Removed {
    /// Nothing was added: the object as applied.
    Nothing(DynamicObject),
    /// The object after the entries were removed, and the entries.
    Entries(DynamicObject, Vec<AddedEntry>),
}

/// The repair text of removed entries: the object, the field paths and who added them (names
/// and keys only, never a value).
fn removed_note(key: &ObjKey, removed: &[AddedEntry]) -> String {
    let mut by: Vec<&str> = removed.iter().map(|e| e.manager.as_str()).collect();
    by.sort_unstable();
    by.dedup();
    let paths: Vec<String> = removed.iter().map(ToString::to_string).collect();
    format!(
        "{key} (entries added by {}: {} removed)",
        by.join(", "),
        paths.join(", ")
    )
}

fn invalid(key: &ObjKey, e: serde_json::Error) -> ApplyError {
    ApplyError::Transient(kube::Error::Service(
        format!("{key} as answered by the apiserver: {e}").into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

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
            writers: writers
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
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

    #[tokio::test]
    async fn a_repair_made_in_a_pass_that_then_fails_is_reported() {
        let fake = crate::controller::testing::fake_api::FakeApi::new();
        let applier = Applier::new(fake.client());
        let cm = |name: &str, v: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "ns",
                    "labels": {"cluster.x-k8s.io/provider": "p"}},
                "data": {"k": v}})
        };
        let mut repaired = Vec::new();
        applier
            .apply_all(&[cm("a", "1"), cm("b", "1")], |_| None, &mut repaired)
            .await
            .unwrap();
        assert!(repaired.is_empty(), "{repaired:?}");
        // `a` was changed by someone; `b` gets a new content the apiserver refuses.
        fake.refuse("/api/v1/namespaces/ns/configmaps/b", "b is refused");
        let stored = fake.get("/api/v1/namespaces/ns/configmaps/a").unwrap();
        let labels: BTreeMap<String, String> =
            serde_json::from_value(stored["metadata"]["labels"].clone()).unwrap();
        let changed = |k: &ObjKey| {
            (k.name == "a").then(|| Live {
                rv: "changed".into(),
                labels: labels.clone(),
                writers: vec!["kubectl-edit".into()],
                ..Live::default()
            })
        };
        let failed = applier
            .apply_all(&[cm("b", "2"), cm("a", "1")], changed, &mut repaired)
            .await;
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(repaired, ["ConfigMap ns/a (changed by kubectl-edit)"]);
    }
}
