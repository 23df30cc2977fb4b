//! The kinds of installed objects the operator watches ([`super::OWNED_KINDS`]), and their
//! discovery. Kinds served by CRDs (cert-manager's, clusterctl's inventory) may appear after the
//! operator started — the documented order installs the operator, then cert-manager — or vanish
//! when their CRDs are deleted: the set follows the CRD watch, so what a provider installed of
//! such a kind is watched, repaired, pruned and deleted with it like the rest.

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta},
    discovery::Scope,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::{
    index::Index,
    routing::{Task, Triggers, route},
};

/// Kinds watched for drift repair and pruning; shared with the plugin's `diff`.
pub use capi_cluster_io::installed::OWNED_KINDS;

/// The watches of installed objects see only what carries owner labels.
pub fn selector() -> watcher::Config {
    watcher::Config::default()
        .labels(capi_operator_api::OWNER_KIND_LABEL)
        .any_semantic()
}

/// Annotations the operator reads on installed objects although its apply may not have written
/// them: the certificate a cert-manager-issued Secret belongs to, and a paused Deployment's
/// replicas.
const READ_ANNOTATIONS: [&str; 2] = [
    "cert-manager.io/certificate-name",
    capi_operator_api::ORIGINAL_REPLICAS_ANNOTATION,
];

/// What a label key must contain for the operator to keep it though its apply did not write
/// it: its own labels (owner, hashes) and those of cluster-api-operator's objects it takes over.
const READ_LABELS: &str = "cluster.x-k8s.io";

/// Shrinks the cached metadata of an installed object to what the operator reads, before the
/// cache keeps it: anyone who may create a labelled object decides its size, so keeping it whole
/// would let a tenant grow the operator's memory at will. Kept: the labels and annotations the
/// operator's own apply owns (drift repair compares them with what it declared), those of
/// [`READ_LABELS`] and [`READ_ANNOTATIONS`], and the managedFields (drift repair reads who
/// wrote what). An object whose owner claim does not hold (a namespaced object outside the
/// provider's namespace, see [`capi_operator_api::owner::claim_holds`]) keeps its name and
/// namespace only: it is nobody's, whatever it carries.
pub fn slim(meta: &mut ObjectMeta) {
    let claim = meta
        .labels
        .as_ref()
        .and_then(|l| capi_operator_api::owner::owner_key_at(l, meta.namespace.as_deref()));
    if claim.is_none() {
        *meta = ObjectMeta {
            name: meta.name.take(),
            namespace: meta.namespace.take(),
            resource_version: meta.resource_version.take(),
            uid: meta.uid.take(),
            ..ObjectMeta::default()
        };
        return;
    }
    let ours: Vec<Value> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(super::apply::FIELD_MANAGER))
        .filter(|m| m.subresource.as_deref().is_none_or(str::is_empty))
        .filter_map(|m| m.fields_v1.as_ref().map(|f| f.0.clone()))
        .collect();
    let owned = |field: &str, key: &str| {
        let (path, key) = (format!("/f:metadata/f:{field}"), format!("f:{key}"));
        ours.iter().any(|f| {
            f.pointer(&path)
                .and_then(Value::as_object)
                .is_some_and(|m| m.contains_key(&key))
        })
    };
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| k.contains(READ_LABELS) || owned("labels", k));
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations
            .retain(|k, _| READ_ANNOTATIONS.contains(&k.as_str()) || owned("annotations", k));
    }
}

/// [`slim`] for a watched Deployment: one whose claim does not hold keeps no spec or status
/// either (a tenant decides their size too).
pub fn slim_deployment(d: &mut k8s_openapi::api::apps::v1::Deployment) {
    slim(&mut d.metadata);
    if d.metadata.labels.is_none() {
        d.spec = None;
        d.status = None;
    }
}

/// One watched kind of installed objects.
pub struct OwnedKind {
    /// Its resource.
    pub resource: ApiResource,
    /// Whether it is namespaced.
    pub namespaced: bool,
    /// Metadata of the objects the operator installed.
    pub store: Store<PartialObjectMeta<DynamicObject>>,
    /// The watch filling `store`; stopped with the last reference to the kind.
    watch: Option<tokio::task::AbortHandle>,
}

impl Drop for OwnedKind {
    fn drop(&mut self) {
        if let Some(w) = &self.watch {
            w.abort();
        }
    }
}

/// What starting a watch needs.
struct Watching {
    client: Client,
    triggers: Triggers,
    index: Arc<Index>,
}

/// The watched kinds of installed objects; grows and shrinks with the CRDs the cluster serves.
#[derive(Default)]
pub struct OwnedKinds {
    kinds: RwLock<Vec<Arc<OwnedKind>>>,
    /// `None` where nothing is watched (tests against a mocked API server).
    watching: Option<Watching>,
    /// One discovery at a time, so two never start a watch of the same kind.
    discovering: tokio::sync::Mutex<()>,
}

/// Whether a discovery error says the kind is not served (rather than a failed request).
fn not_served(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404) || matches!(e, kube::Error::Discovery(_))
}

/// The group of the CRD named `name` (`<plural>.<group>`) when kinds of it are owned.
pub fn owned_group_of_crd(name: &str) -> Option<&str> {
    let (_, group) = name.split_once('.')?;
    OWNED_KINDS
        .iter()
        .any(|(g, _, _)| !g.is_empty() && *g == group)
        .then_some(group)
}

/// Test-only seam: kinds whose caches the test fills itself (no watches, nothing discovered).
#[cfg(test)]
impl OwnedKinds {
    pub(super) fn fixed(
        kinds: Vec<(ApiResource, bool, Store<PartialObjectMeta<DynamicObject>>)>,
    ) -> OwnedKinds {
        let kinds = kinds
            .into_iter()
            .map(|(resource, namespaced, store)| {
                Arc::new(OwnedKind {
                    resource,
                    namespaced,
                    store,
                    watch: None,
                })
            })
            .collect();
        OwnedKinds {
            kinds: RwLock::new(kinds),
            ..OwnedKinds::default()
        }
    }
}

impl OwnedKinds {
    /// Kinds whose watches feed `index` and route changes through `triggers`; none until
    /// [`Self::discover`].
    pub(super) fn new(client: Client, triggers: Triggers, index: Arc<Index>) -> OwnedKinds {
        OwnedKinds {
            watching: Some(Watching {
                client,
                triggers,
                index,
            }),
            ..OwnedKinds::default()
        }
    }

    /// The kinds watched now.
    pub fn all(&self) -> Vec<Arc<OwnedKind>> {
        self.kinds.read().map(|k| k.clone()).unwrap_or_default()
    }

    /// The watched kind of `group` and `kind`.
    pub fn find(&self, group: &str, kind: &str) -> Option<Arc<OwnedKind>> {
        self.all()
            .into_iter()
            .find(|k| k.resource.group == group && k.resource.kind == kind)
    }

    /// Whether every watched kind's cache holds its first complete list.
    pub fn synced(&self) -> bool {
        self.all()
            .iter()
            .all(|k| k.store.wait_until_ready().now_or_never().is_some())
    }

    /// Starts watching the kinds of [`OWNED_KINDS`] (of `group`, or all) the cluster serves
    /// and that are not watched yet; with a `group`, also stops watching its kinds no longer
    /// served. Whether the set changed.
    pub async fn discover(&self, group: Option<&str>) -> bool {
        let Some(w) = &self.watching else {
            return false;
        };
        let _one = self.discovering.lock().await;
        let mut changed = false;
        for (g, v, k) in OWNED_KINDS
            .iter()
            .filter(|(g, _, _)| group.is_none_or(|x| x == *g))
        {
            let watched = self.find(g, k).is_some();
            if watched && group.is_none() {
                continue;
            }
            match kube::discovery::pinned_kind(&w.client, &GroupVersionKind::gvk(g, v, k)).await {
                Ok((ar, caps)) if !watched => {
                    info!(
                        kind = *k,
                        group = *g,
                        "kind served; watching its installed objects"
                    );
                    let kind = watch(w, ar, caps.scope == Scope::Namespaced);
                    if let Ok(mut kinds) = self.kinds.write() {
                        kinds.push(Arc::new(kind));
                    }
                    changed = true;
                }
                Ok(_) => {}
                Err(e) if watched && not_served(&e) => {
                    info!(kind = *k, group = *g, "kind no longer served; not watched");
                    if let Ok(mut kinds) = self.kinds.write() {
                        kinds.retain(|o| !(o.resource.group == *g && o.resource.kind == *k));
                    }
                    w.index.forget_kind(g, k);
                    changed = true;
                }
                Err(e) if watched => warn!(kind = *k, group = *g, error = %e, "discovery failed"),
                // cert-manager may be absent; its kinds are watched once its CRDs arrive.
                Err(e) if group.is_none() => {
                    info!(kind = *k, group = *g, error = %e, "kind not served; not watched");
                }
                Err(e) => debug!(kind = *k, group = *g, error = %e, "kind not served yet"),
            }
        }
        changed
    }

    /// Whether the caches hold everything installed of every served owned kind: discovers
    /// kinds the CRD watch has not brought yet, and waits for none. Before a deletion forgets a
    /// provider, so nothing of a kind served since the last CRD event is left behind.
    pub async fn current(&self) -> bool {
        let added = self.discover(None).await;
        !added && self.synced()
    }
}

/// Starts the watch of installed objects of `ar`, feeding the index; each change that concerns
/// the provider that installed the object wakes it. The first list finds what was applied
/// before the watch started. (The watch's own cache tells when that list is complete.)
fn watch(w: &Watching, ar: ApiResource, namespaced: bool) -> OwnedKind {
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(w.client.clone(), &ar);
    let events = watcher(api, selector())
        .default_backoff()
        .modify(|o| slim(&mut o.metadata))
        .reflect(writer);
    let (index, resource) = (w.index.clone(), Arc::new(ar.clone()));
    let task = tokio::spawn(route(events, w.triggers.clone(), move |ev| {
        index
            .feed_installed(&resource, namespaced, ev)
            .into_iter()
            .collect()
    }));
    OwnedKind {
        resource: ar,
        namespaced,
        store,
        watch: Some(task.abort_handle()),
    }
}

/// Re-discoveries after the last CRD event of a group: API discovery serves a new kind a
/// moment after its CRD is Established, when no further CRD event comes (0.25 s doubling: 8 s).
const RECHECKS: u32 = 5;

/// Re-discovers the owned kinds of each group the returned sender names (the CRD watch sends
/// the group of every CRD event of an owned group: created, Established, deleted), and again
/// [`RECHECKS`] times after the group's last event. `holder` holds the owned kinds (the
/// reconcile context); the task ends once it is gone.
pub(super) fn follow_crds<H>(holder: std::sync::Weak<H>) -> (mpsc::UnboundedSender<String>, Task)
where
    H: AsRef<OwnedKinds> + Send + Sync + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let task: Task = Box::pin(async move {
        let mut recheck = std::collections::BTreeSet::new();
        let mut round = 0;
        loop {
            let event = if recheck.is_empty() {
                Ok(rx.recv().await)
            } else {
                tokio::time::timeout(Duration::from_millis(250 << round), rx.recv()).await
            };
            let groups = match event {
                Ok(Some(first)) => {
                    round = 0;
                    let groups = burst(first, &mut rx);
                    recheck.extend(groups.iter().cloned());
                    groups
                }
                Ok(None) => return,
                Err(_) => {
                    round += 1;
                    if round >= RECHECKS {
                        std::mem::take(&mut recheck)
                    } else {
                        recheck.clone()
                    }
                }
            };
            let Some(holder) = holder.upgrade() else {
                return;
            };
            for g in groups {
                (*holder).as_ref().discover(Some(&g)).await;
            }
        }
    });
    (tx, task)
}

/// The groups of a burst of CRD events (a cert-manager install brings dozens): one discovery
/// per group.
fn burst(
    first: String,
    rx: &mut mpsc::UnboundedReceiver<String>,
) -> std::collections::BTreeSet<String> {
    let mut groups = std::collections::BTreeSet::from([first]);
    while let Ok(g) = rx.try_recv() {
        groups.insert(g);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn only_crds_of_owned_groups_are_followed() {
        assert_eq!(
            owned_group_of_crd("certificates.cert-manager.io"),
            Some("cert-manager.io")
        );
        assert_eq!(
            owned_group_of_crd("providers.clusterctl.cluster.x-k8s.io"),
            Some("clusterctl.cluster.x-k8s.io")
        );
        assert_eq!(owned_group_of_crd("clusters.cluster.x-k8s.io"), None);
        assert_eq!(owned_group_of_crd("certificates"), None);
    }

    fn meta(v: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(v).unwrap_or_default()
    }

    fn claiming(namespace: &str, big: &str) -> ObjectMeta {
        meta(serde_json::json!({
            "name": "bait", "namespace": namespace,
            "labels": {capi_operator_api::OWNER_KIND_LABEL: "CoreProvider",
                       capi_operator_api::OWNER_NAME_LABEL: "cluster-api",
                       capi_operator_api::OWNER_NAMESPACE_LABEL: "capi-system",
                       "padding": big},
            "annotations": {"padding": big},
            "managedFields": [{"manager": "kubectl", "operation": "Update",
                               "fieldsType": "FieldsV1", "time": "2026-01-01T00:00:00Z",
                               "fieldsV1": {"f:data": {"f:key": {}}}}]
        }))
    }

    /// A tenant's object in its own namespace with forged owner labels and 100 KiB of padding:
    /// the cache keeps its name and namespace only, and it claims nothing.
    #[test]
    fn a_claim_from_outside_the_providers_namespace_is_cached_as_nobodys() {
        let big = "x".repeat(100 * 1024);
        let mut m = claiming("tenant", &big);
        slim(&mut m);
        let size = serde_json::to_vec(&m)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        assert!(size < 256, "slimmed metadata still holds {size} bytes");
        assert_eq!(m.labels, None);
        assert_eq!(
            (m.name.as_deref(), m.namespace.as_deref()),
            (Some("bait"), Some("tenant"))
        );
    }

    /// In the provider's namespace the claim holds: the owner labels and who wrote what stay,
    /// labels and annotations no one but others wrote go.
    #[test]
    fn a_claim_in_the_providers_namespace_keeps_what_the_operator_reads() {
        let big = "x".repeat(100 * 1024);
        let mut m = claiming("capi-system", &big);
        slim(&mut m);
        let labels = m.labels.clone().unwrap_or_default();
        assert!(capi_operator_api::owner::owner_of(&labels).is_some());
        assert!(!labels.contains_key("padding"));
        assert!(m.annotations.unwrap_or_default().is_empty());
        let managers: Vec<_> = m
            .managed_fields
            .iter()
            .flatten()
            .map(|f| (f.manager.clone(), f.fields_v1.is_some()))
            .collect();
        assert_eq!(managers, [(Some("kubectl".to_string()), true)]);
    }

    /// What the operator applied keeps what drift repair, pruning and wakes read: the same
    /// [`super::super::apply::Live`] as unslimmed, the issuing certificate of a Secret.
    #[test]
    fn slimming_keeps_what_drift_repair_reads() {
        let ours = super::super::apply::FIELD_MANAGER;
        let mut m = meta(serde_json::json!({
            "name": "w", "namespace": "capi-system", "resourceVersion": "7", "generation": 2,
            "labels": {capi_operator_api::APPLIED_HASH_LABEL: "h", "app": "w", "extra": "e",
                       capi_operator_api::OWNER_KIND_LABEL: "CoreProvider",
                       capi_operator_api::OWNER_NAME_LABEL: "cluster-api",
                       capi_operator_api::OWNER_NAMESPACE_LABEL: "capi-system"},
            "annotations": {"declared": "d", "cert-manager.io/certificate-name": "c",
                            "someone-elses": "s"},
            "managedFields": [
                {"manager": ours, "operation": "Apply", "fieldsType": "FieldsV1",
                 "time": "2026-01-01T00:00:01Z",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}},
                                             "f:annotations": {"f:declared": {}}}}},
                {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                 "time": "2026-01-01T00:00:00Z",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:extra": {}}}}}]
        }));
        let before = super::super::apply::Live::of(&m);
        slim(&mut m);
        let after = super::super::apply::Live::of(&m);
        assert_eq!(
            (
                &after.rv,
                after.generation,
                &after.writers,
                after.ours_last,
                &after.ours_fields
            ),
            (
                &before.rv,
                before.generation,
                &before.writers,
                before.ours_last,
                &before.ours_fields
            )
        );
        let keys = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            keys(&after.labels),
            [
                "app",
                capi_operator_api::APPLIED_HASH_LABEL,
                capi_operator_api::OWNER_KIND_LABEL,
                capi_operator_api::OWNER_NAME_LABEL,
                capi_operator_api::OWNER_NAMESPACE_LABEL
            ]
        );
        // What other managers wrote stays: it tells the entries they added (issue 45 item 7).
        assert_eq!(after.others, before.others);
        assert_eq!(
            keys(&after.annotations),
            ["cert-manager.io/certificate-name", "declared"]
        );
    }
}
