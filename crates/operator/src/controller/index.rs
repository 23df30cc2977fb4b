//! The index the reconciles read, fed by the watches: providers translated once per change and
//! kept by (API, kind, namespace, name); installed objects and Deployments kept by the
//! provider their owner labels name. Every query is a look-up: no query translates a provider
//! or walks every cached object, and a routed event updates one entry and compares it with the
//! one it replaces (see [`super::routing`] for what of an object wakes its provider).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use capi_operator_api::{AnyProvider, ProviderApi, ProviderType};
use k8s_openapi::{api::apps::v1::Deployment, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use kube::{
    Resource, ResourceExt,
    api::{ApiResource, DynamicObject, PartialObjectMeta},
    runtime::watcher::Event,
};

use super::{
    apply::{self, Live, ObjKey},
    routing::{self, CoreSeen, Target},
};
use capi_cluster_io::provider_kind::ProviderKind;
pub use capi_operator_api::owner::owned_by;
use capi_operator_api::owner::{Owner, owner_key_at, owner_of_provider};

/// Providers as the index holds them: a shared list that a query hands out without copying
/// (cloning it copies a pointer). It reads as a slice; iterating it by value yields copies.
#[derive(Clone, Debug)]
pub struct Providers(Arc<[AnyProvider]>);

impl Default for Providers {
    fn default() -> Providers {
        Providers(Arc::from(Vec::new()))
    }
}

impl std::ops::Deref for Providers {
    type Target = [AnyProvider];
    fn deref(&self) -> &[AnyProvider] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Providers {
    type Item = &'a AnyProvider;
    type IntoIter = std::slice::Iter<'a, AnyProvider>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Iterates a [`Providers`] by value, copying each provider as it is reached.
pub struct ProvidersIntoIter {
    list: Arc<[AnyProvider]>,
    at: usize,
}

impl Iterator for ProvidersIntoIter {
    type Item = AnyProvider;
    fn next(&mut self) -> Option<AnyProvider> {
        let p = self.list.get(self.at)?.clone();
        self.at += 1;
        Some(p)
    }
}

impl IntoIterator for Providers {
    type Item = AnyProvider;
    type IntoIter = ProvidersIntoIter;
    fn into_iter(self) -> ProvidersIntoIter {
        ProvidersIntoIter {
            list: self.0,
            at: 0,
        }
    }
}

/// What the index has done since it was made, for tests and benchmarks: how many provider
/// objects were translated, and how many entries queries and routed events read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Provider objects translated ([`ProviderKind::view`]): one per watch change of a provider.
    pub translations: u64,
    /// Entries read by queries and by the routing of installed objects' and Deployments'
    /// changes (a query returning three objects reads three).
    pub entries_read: u64,
}

/// One cached object of a table: the provider its labels name, the hash of what of it wakes
/// that provider, and what queries return.
struct Entry<V> {
    owner: Option<Owner>,
    wakes: u64,
    value: V,
}

/// Installed objects of some kinds, by key, by owner and by kind (for relists).
struct Table<V> {
    entries: HashMap<ObjKey, Entry<V>>,
    by_owner: HashMap<Owner, BTreeSet<ObjKey>>,
    by_kind: HashMap<(String, String), HashSet<ObjKey>>,
    /// Per kind being relisted, the keys listed so far: the others are gone at its end.
    relisting: HashMap<(String, String), HashSet<ObjKey>>,
}

impl<V> Default for Table<V> {
    fn default() -> Table<V> {
        Table {
            entries: HashMap::new(),
            by_owner: HashMap::new(),
            by_kind: HashMap::new(),
            relisting: HashMap::new(),
        }
    }
}

fn kind_of(key: &ObjKey) -> (String, String) {
    (key.group.clone(), key.kind.clone())
}

impl<V> Table<V> {
    /// Puts `e` in place of what `key` held; whether what wakes the owner changed.
    fn put(&mut self, key: ObjKey, e: Entry<V>) -> bool {
        if let Some(o) = &e.owner {
            self.by_owner
                .entry(o.clone())
                .or_default()
                .insert(key.clone());
        }
        self.by_kind
            .entry(kind_of(&key))
            .or_default()
            .insert(key.clone());
        let wakes = e.wakes;
        let new_owner = e.owner.clone();
        let old = self.entries.insert(key.clone(), e);
        if let Some(old) = &old
            && old.owner != new_owner
        {
            self.unlink(old.owner.as_ref(), &key);
        }
        old.is_none_or(|o| o.wakes != wakes)
    }

    fn unlink(&mut self, owner: Option<&Owner>, key: &ObjKey) {
        let Some(o) = owner else { return };
        if let Some(keys) = self.by_owner.get_mut(o) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_owner.remove(o);
            }
        }
    }

    fn remove(&mut self, key: &ObjKey) {
        if let Some(old) = self.entries.remove(key) {
            self.unlink(old.owner.as_ref(), key);
        }
        if let Some(keys) = self.by_kind.get_mut(&kind_of(key)) {
            keys.remove(key);
        }
    }

    /// Applies one watch event of the kind `kind`: `entry` makes an object's key and entry,
    /// and the result names the provider to wake (the installer of an object whose change
    /// concerns it, or of a deleted one). A relist's end drops what it did not list, waking
    /// nobody, as the watch's cache does.
    fn apply<K: Resource>(
        &mut self,
        kind: (String, String),
        ev: &Event<K>,
        entry: impl Fn(&K) -> (ObjKey, Entry<V>),
    ) -> Option<Target> {
        let labels = |o: &K| o.meta().labels.as_ref().and_then(routing::owner_of);
        match ev {
            Event::Init => {
                self.relisting.insert(kind, HashSet::new());
                None
            }
            Event::InitApply(o) | Event::Apply(o) => {
                let (key, e) = entry(o);
                if let (Event::InitApply(_), Some(seen)) = (ev, self.relisting.get_mut(&kind)) {
                    seen.insert(key.clone());
                }
                self.put(key, e).then(|| labels(o)).flatten()
            }
            Event::Delete(o) => {
                self.remove(&entry(o).0);
                labels(o)
            }
            Event::InitDone => {
                let seen = self.relisting.remove(&kind).unwrap_or_default();
                self.forget(&kind, |k| !seen.contains(k));
                None
            }
        }
    }

    /// Drops the entries of `kind` that `gone` selects.
    fn forget(&mut self, kind: &(String, String), gone: impl Fn(&ObjKey) -> bool) {
        let keys: Vec<ObjKey> = self
            .by_kind
            .get(kind)
            .into_iter()
            .flatten()
            .filter(|k| gone(k))
            .cloned()
            .collect();
        for k in keys {
            self.remove(&k);
        }
    }

    fn of_owner(&self, owner: &Owner) -> impl Iterator<Item = (&ObjKey, &V)> {
        self.by_owner
            .get(owner)
            .into_iter()
            .flatten()
            .filter_map(|k| Some((k, &self.entries.get(k)?.value)))
    }
}

/// An installed object as the index keeps it.
struct Installed {
    resource: Arc<ApiResource>,
    namespaced: bool,
    meta: ObjectMeta,
}

/// The providers of one kind of one API, by namespace and name.
type OfKind = BTreeMap<(String, String), AnyProvider>;

#[derive(Default)]
struct Inner {
    providers: BTreeMap<(ProviderType, ProviderApi), OfKind>,
    /// Per kind and API being relisted, the providers listed so far.
    relisting: BTreeMap<(ProviderType, ProviderApi), BTreeSet<(String, String)>>,
    of_type: BTreeMap<ProviderType, Providers>,
    all: Providers,
    installed: Table<Installed>,
    deployments: Table<Arc<Deployment>>,
}

impl Inner {
    /// The shared lists of type `t` and of all providers, after a change of type `t`.
    fn rebuild(&mut self, t: ProviderType) {
        let of_t: Vec<AnyProvider> = self
            .providers
            .range((t, ProviderApi::Management)..=(t, ProviderApi::ClusterApiOperator))
            .flat_map(|(_, m)| m.values().cloned())
            .collect();
        self.of_type.insert(t, Providers(Arc::from(of_t)));
        let all: Vec<AnyProvider> = ProviderType::ALL
            .iter()
            .filter_map(|t| self.of_type.get(t))
            .flat_map(|l| l.iter().cloned())
            .collect();
        self.all = Providers(Arc::from(all));
    }
}

/// The index. Shared by the watches that feed it and the context the reconciles read.
#[derive(Default)]
pub struct Index {
    inner: RwLock<Inner>,
    translations: AtomicU64,
    entries_read: AtomicU64,
    /// The Deployments' watch delivered its first complete list.
    deployments_listed: AtomicBool,
    listed: tokio::sync::Notify,
}

/// What a provider's change means for the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderChange {
    /// Nothing the other providers read of it.
    Quiet,
    /// A core provider changed (or went) in what the other providers check of it.
    CoreChanged,
}

impl Index {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // A panic while holding the lock leaves maps that are still consistent.
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn counted(&self, n: usize) {
        self.entries_read.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The work done so far.
    pub fn work(&self) -> Work {
        Work {
            translations: self.translations.load(Ordering::Relaxed),
            entries_read: self.entries_read.load(Ordering::Relaxed),
        }
    }

    /// Takes one watch event of provider kind `P`: the changed provider is translated once and
    /// put in place of what its key held. Whether a core provider changed in what the others
    /// read of it ([`CoreSeen`]; a deletion always counts).
    pub fn feed_provider<P: ProviderKind>(&self, ev: &Event<P>) -> ProviderChange {
        let kind = (P::TYPE, P::API);
        let key = |o: &P| (o.meta().namespace.clone().unwrap_or_default(), o.name_any());
        let mut inner = self.write();
        let changed = match ev {
            Event::Init => {
                inner.relisting.insert(kind, BTreeSet::new());
                return ProviderChange::Quiet;
            }
            Event::InitApply(o) | Event::Apply(o) => {
                self.translations.fetch_add(1, Ordering::Relaxed);
                let p = o.view().0;
                if let (Event::InitApply(_), Some(seen)) = (ev, inner.relisting.get_mut(&kind)) {
                    seen.insert(key(o));
                }
                let now = (P::TYPE == ProviderType::Core).then(|| CoreSeen::of(&p));
                let old = inner.providers.entry(kind).or_default().insert(key(o), p);
                old.is_none_or(|old| {
                    (P::TYPE == ProviderType::Core).then(|| CoreSeen::of(&old)) != now
                })
            }
            Event::Delete(o) => {
                inner.providers.entry(kind).or_default().remove(&key(o));
                true
            }
            Event::InitDone => {
                let seen = inner.relisting.remove(&kind).unwrap_or_default();
                inner
                    .providers
                    .entry(kind)
                    .or_default()
                    .retain(|k, _| seen.contains(k));
                false
            }
        };
        if !inner.relisting.contains_key(&kind) {
            inner.rebuild(P::TYPE);
        }
        if changed && P::TYPE == ProviderType::Core && !matches!(ev, Event::InitDone) {
            ProviderChange::CoreChanged
        } else {
            ProviderChange::Quiet
        }
    }

    /// Takes one watch event of installed objects of `resource`; the provider to wake.
    pub fn feed_installed(
        &self,
        resource: &Arc<ApiResource>,
        namespaced: bool,
        ev: &Event<PartialObjectMeta<DynamicObject>>,
    ) -> Option<Target> {
        let generation_kind = apply::GENERATION_KINDS.contains(&resource.kind.as_str());
        let kind = (resource.group.clone(), resource.kind.clone());
        let target = self.write().installed.apply(kind, ev, |o| {
            let key = key_of(&resource.group, &resource.kind, &o.metadata);
            let e = Entry {
                owner: o
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| owner_key_at(l, o.metadata.namespace.as_deref())),
                wakes: routing::what_wakes_for_installed(generation_kind, &o.metadata),
                value: Installed {
                    resource: resource.clone(),
                    namespaced,
                    meta: o.metadata.clone(),
                },
            };
            (key, e)
        });
        self.counted(1);
        target
    }

    /// Takes one watch event of the installed Deployments; the provider to wake.
    pub fn feed_deployment(&self, ev: &Event<Deployment>) -> Option<Target> {
        let kind = ("apps".to_string(), "Deployment".to_string());
        let target = self.write().deployments.apply(kind, ev, |d| {
            let e = Entry {
                owner: d
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| owner_key_at(l, d.metadata.namespace.as_deref())),
                wakes: routing::what_wakes_for_a_deployment(d),
                value: Arc::new(d.clone()),
            };
            (key_of("apps", "Deployment", &d.metadata), e)
        });
        if matches!(ev, Event::InitDone) {
            self.deployments_listed.store(true, Ordering::SeqCst);
            self.listed.notify_waiters();
        }
        self.counted(1);
        target
    }

    /// Resolves once the Deployments' watch delivered its first complete list.
    pub async fn deployments_listed(&self) {
        let listed = self.listed.notified();
        if self.deployments_listed.load(Ordering::SeqCst) {
            return;
        }
        listed.await;
    }

    /// Forgets the installed objects of a kind no longer watched.
    pub fn forget_kind(&self, group: &str, kind: &str) {
        let kind = (group.to_string(), kind.to_string());
        let mut inner = self.write();
        inner.installed.relisting.remove(&kind);
        inner.installed.forget(&kind, |_| true);
    }

    /// The provider of `api` and type `t` at `namespace`/`name`.
    pub fn provider(
        &self,
        api: ProviderApi,
        t: ProviderType,
        namespace: &str,
        name: &str,
    ) -> Option<AnyProvider> {
        self.counted(1);
        let key = (namespace.to_string(), name.to_string());
        self.read().providers.get(&(t, api))?.get(&key).cloned()
    }

    /// Every provider of type `t`, of both APIs.
    pub fn providers(&self, t: ProviderType) -> Providers {
        self.counted(1);
        self.read().of_type.get(&t).cloned().unwrap_or_default()
    }

    /// Every provider of every type.
    pub fn all_providers(&self) -> Providers {
        self.counted(1);
        self.read().all.clone()
    }

    /// The providers `wanted` selects, as routing targets.
    pub fn targets_where(&self, wanted: impl Fn(&AnyProvider) -> bool) -> Vec<Target> {
        self.all_providers()
            .iter()
            .filter(|p| wanted(p))
            .map(|p| {
                (
                    p.provider_type,
                    p.namespace().to_string(),
                    p.name().to_string(),
                )
            })
            .collect()
    }

    /// What the index holds of an installed object.
    pub fn live(&self, key: &ObjKey) -> Option<Live> {
        self.counted(1);
        let inner = self.read();
        Some(Live::of(&inner.installed.entries.get(key)?.value.meta))
    }

    /// The installed objects of `p`, in key order (deletions and prunes go in the same order
    /// every time: their events read the same, a seeded fault run replays exactly).
    pub fn installed(&self, p: &AnyProvider) -> Vec<(ObjKey, ApiResource, bool)> {
        let inner = self.read();
        let out: Vec<_> = inner
            .installed
            .of_owner(&owner_of_provider(p))
            .map(|(k, o)| (k.clone(), (*o.resource).clone(), o.namespaced))
            .collect();
        self.counted(out.len().max(1));
        out
    }

    /// The Deployments of `p`.
    pub fn deployments_of(&self, p: &AnyProvider) -> Vec<Arc<Deployment>> {
        let inner = self.read();
        let out: Vec<_> = inner
            .deployments
            .of_owner(&owner_of_provider(p))
            .map(|(_, d)| d.clone())
            .collect();
        self.counted(out.len().max(1));
        out
    }

    /// Puts `providers` in place of every provider the index holds, as relists of every kind
    /// would (tests, which hold providers already read).
    pub fn replace_providers(&self, providers: Vec<AnyProvider>) {
        let mut inner = self.write();
        inner.providers.clear();
        for p in providers {
            let key = (p.namespace().to_string(), p.name().to_string());
            inner
                .providers
                .entry((p.provider_type, p.api))
                .or_default()
                .insert(key, p);
        }
        for t in ProviderType::ALL {
            inner.rebuild(t);
        }
    }
}

fn key_of(group: &str, kind: &str, m: &ObjectMeta) -> ObjKey {
    ObjKey {
        group: group.to_string(),
        kind: kind.to_string(),
        namespace: m.namespace.clone().unwrap_or_default(),
        name: m.name.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{
        CoreProvider, InfrastructureProvider, OWNER_KIND_LABEL, OWNER_NAME_LABEL,
        OWNER_NAMESPACE_LABEL,
    };
    use serde_json::{Value, json};

    fn labels_of(kind: &str, ns: &str, name: &str) -> Value {
        json!({OWNER_KIND_LABEL: kind, OWNER_NAMESPACE_LABEL: ns, OWNER_NAME_LABEL: name})
    }

    fn provider<P: ProviderKind>(kind: &str, name: &str, status: Value) -> P {
        let v = json!({"apiVersion": "management.cluster.x-k8s.io/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": format!("{name}-system"), "generation": 1},
            "spec": {}, "status": status});
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{kind} {name}: {e}"))
    }

    fn installed(kind: &str, name: &str, owner: &str, rv: u32) -> PartialObjectMeta<DynamicObject> {
        let ns = format!("{owner}-system");
        let v = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name,
            "namespace": ns, "resourceVersion": rv.to_string(),
            "labels": labels_of("InfrastructureProvider", &ns, owner)}});
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{kind} {name}: {e}"))
    }

    fn deployment(owner: &str, generation: i64, status: Value) -> Deployment {
        let ns = format!("{owner}-system");
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "m", "namespace": ns, "uid": "u1", "generation": generation,
                         "resourceVersion": status.to_string().len().to_string(),
                         "labels": labels_of("InfrastructureProvider", &ns, owner)},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": status});
        serde_json::from_value(d).unwrap_or_else(|e| panic!("deployment: {e}"))
    }

    fn rolling(updated: i64) -> Value {
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": updated,
               "availableReplicas": 0, "conditions": [{"type": "Available", "status": "False",
               "message": "Deployment does not have minimum availability."}]})
    }

    fn available(ready: i64) -> Value {
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": ready,
               "availableReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]})
    }

    fn service_accounts() -> Arc<ApiResource> {
        Arc::new(ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "",
            "v1",
            "ServiceAccount",
        )))
    }

    /// An index of a core provider and `n` infrastructure providers, each with two installed
    /// ServiceAccounts and one Deployment.
    fn index_of(n: usize) -> Index {
        let index = Index::default();
        let core: CoreProvider = provider("CoreProvider", "cluster-api", json!({}));
        index.feed_provider(&Event::Apply(core));
        let sa = service_accounts();
        for i in 0..n {
            let name = format!("infra-{i}");
            let p: InfrastructureProvider = provider("InfrastructureProvider", &name, json!({}));
            index.feed_provider(&Event::Apply(p));
            for o in ["a", "b"] {
                index.feed_installed(
                    &sa,
                    true,
                    &Event::Apply(installed("ServiceAccount", o, &name, 1)),
                );
            }
            index.feed_deployment(&Event::Apply(deployment(&name, 1, rolling(0))));
        }
        index
    }

    /// What one reconcile asks the index, and the work it took.
    fn reconcile_queries(index: &Index, p: &AnyProvider) -> Work {
        let before = index.work();
        let same_kind = index.providers(p.provider_type);
        let cores = index.providers(ProviderType::Core);
        let all = index.all_providers();
        let objects = index.installed(p);
        for (k, _, _) in &objects {
            assert!(index.live(k).is_some(), "{k} is installed but not live");
        }
        let deployments = index.deployments_of(p);
        assert!(!same_kind.is_empty() && cores.len() == 1 && all.len() > same_kind.len());
        assert_eq!((objects.len(), deployments.len()), (2, 1), "{objects:?}");
        let after = index.work();
        Work {
            translations: after.translations - before.translations,
            entries_read: after.entries_read - before.entries_read,
        }
    }

    #[test]
    fn providers_are_translated_once_per_change_and_queries_translate_nothing() {
        let index = index_of(300);
        assert_eq!(
            index.work().translations,
            301,
            "one translation per provider change"
        );
        let p = index
            .provider(
                ProviderApi::Management,
                ProviderType::Infrastructure,
                "infra-0-system",
                "infra-0",
            )
            .unwrap_or_else(|| panic!("infra-0 not indexed"));
        let one = reconcile_queries(&index_of(1), &p);
        let many = reconcile_queries(&index, &p);
        assert_eq!(many.translations, 0, "a query translated a provider");
        assert_eq!(
            one, many,
            "queries read more entries with more providers: a scan"
        );
        // A status write of one provider: translated once, the others not again.
        let before = index.work().translations;
        let p: InfrastructureProvider = provider(
            "InfrastructureProvider",
            "infra-7",
            json!({"contract": "v1beta1"}),
        );
        assert_eq!(index.feed_provider(&Event::Apply(p)), ProviderChange::Quiet);
        assert_eq!(index.work().translations, before + 1);
        let seen = index.providers(ProviderType::Infrastructure);
        let infra7 = seen.iter().find(|q| q.name() == "infra-7");
        assert_eq!(
            infra7
                .and_then(|q| q.status.clone())
                .and_then(|s| s.contract)
                .as_deref(),
            Some("v1beta1")
        );
    }

    #[test]
    fn a_routed_event_reads_one_entry_whatever_the_number_of_providers() {
        for n in [1, 300] {
            let index = index_of(n);
            let before = index.work();
            let woken =
                index.feed_deployment(&Event::Apply(deployment("infra-0", 1, available(1))));
            let after = index.work();
            let target = (
                ProviderType::Infrastructure,
                "infra-0-system".to_string(),
                "infra-0".to_string(),
            );
            assert_eq!(woken, Some(target));
            assert_eq!(after.translations, before.translations, "{n} providers");
            assert_eq!(after.entries_read - before.entries_read, 1, "{n} providers");
        }
    }

    #[test]
    fn only_changes_a_provider_reads_wake_it() {
        let index = Index::default();
        let events = vec![
            Event::Init,
            Event::InitApply(deployment("x", 1, rolling(0))),
            Event::InitDone,
            // The same availability, another status write: nobody is woken.
            Event::Apply(deployment("x", 1, rolling(1))),
            // Available: readiness changes.
            Event::Apply(deployment("x", 1, available(1))),
            // A status field readiness does not read.
            Event::Apply(deployment("x", 1, available(2))),
            // A spec change (drift, or an upgrade).
            Event::Apply(deployment("x", 2, available(2))),
            // A relist that finds it unchanged.
            Event::Init,
            Event::InitApply(deployment("x", 2, available(2))),
            Event::InitDone,
            Event::Delete(deployment("x", 2, available(2))),
        ];
        let seen: Vec<(Option<i64>, Option<i32>)> = events
            .iter()
            .filter(|ev| index.feed_deployment(ev).is_some())
            .filter_map(|ev| match ev {
                Event::Apply(d) | Event::InitApply(d) | Event::Delete(d) => Some(d),
                _ => None,
            })
            .map(|d| {
                let available = d.status.as_ref().and_then(|s| s.available_replicas);
                (d.metadata.generation, available)
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (Some(1), Some(0)),
                (Some(1), Some(1)),
                (Some(2), Some(1)),
                (Some(2), Some(1))
            ],
            "the first sight, Available, the spec change and the deletion"
        );
        assert!(
            index.deployments_of(&provider_of("x")).is_empty(),
            "deleted"
        );
    }

    fn provider_of(name: &str) -> AnyProvider {
        provider::<InfrastructureProvider>("InfrastructureProvider", name, json!({}))
            .view()
            .0
    }

    #[test]
    fn a_relist_drops_what_it_no_longer_lists_and_wakes_nobody_for_it() {
        let index = Index::default();
        let sa = service_accounts();
        for o in ["a", "b"] {
            index.feed_installed(
                &sa,
                true,
                &Event::Apply(installed("ServiceAccount", o, "x", 1)),
            );
        }
        let relist = [
            Event::Init,
            Event::InitApply(installed("ServiceAccount", "a", "x", 1)),
            Event::InitDone,
        ];
        let woken: Vec<_> = relist
            .iter()
            .filter_map(|ev| index.feed_installed(&sa, true, ev))
            .collect();
        assert!(woken.is_empty(), "{woken:?}");
        let names: Vec<String> = index
            .installed(&provider_of("x"))
            .into_iter()
            .map(|(k, _, _)| k.name)
            .collect();
        assert_eq!(names, ["a"]);
        index.forget_kind("", "ServiceAccount");
        assert!(
            index.installed(&provider_of("x")).is_empty(),
            "a kind no longer watched"
        );
    }

    #[test]
    fn a_core_change_concerns_the_others_only_in_what_they_read_of_it() {
        let index = Index::default();
        let core =
            |status: Value| -> CoreProvider { provider("CoreProvider", "cluster-api", status) };
        let ready = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Available",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let ready_again = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Available",
            "message": "other words", "lastTransitionTime": "2026-01-02T00:00:00Z"}]});
        assert_eq!(
            index.feed_provider(&Event::Apply(core(json!({})))),
            ProviderChange::CoreChanged
        );
        assert_eq!(
            index.feed_provider(&Event::Apply(core(ready))),
            ProviderChange::CoreChanged
        );
        assert_eq!(
            index.feed_provider(&Event::Apply(core(ready_again))),
            ProviderChange::Quiet
        );
        let infra: InfrastructureProvider = provider("InfrastructureProvider", "x", json!({}));
        assert_eq!(
            index.feed_provider(&Event::Apply(infra)),
            ProviderChange::Quiet
        );
        assert_eq!(
            index.feed_provider(&Event::Delete(core(json!({})))),
            ProviderChange::CoreChanged
        );
        assert!(index.providers(ProviderType::Core).is_empty());
        assert_eq!(index.all_providers().len(), 1);
    }
}
