//! The controllers: one per provider kind, all driving the generic reconciler in
//! [`reconcile`]. Shared caches ([`World`]) watch what the operator installed (to repair drift,
//! prune and report readiness) and the Secrets and ConfigMaps providers read (to re-render when
//! they change); their events are routed to the controller of the provider concerned.

pub mod apply;
pub mod budget;
pub mod decide;
use decide::readiness;
pub mod events;
mod found;
pub mod inputs;
pub mod install;
pub mod inventory;
pub mod labels;
pub mod owned;
pub mod reconcile;
pub mod report;
pub mod served;
pub mod source;
#[cfg(test)]
mod testing;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use capi_operator_api::{
    AddonProvider, AnyProvider, BootstrapProvider, ControlPlaneProvider, CoreProvider,
    IPAMProvider, InfrastructureProvider, ProviderApi, ProviderType, RuntimeExtensionProvider,
    v1alpha2,
};
use futures::{Stream, StreamExt, future::join_all};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, GroupVersionKind, PartialObjectMeta},
    runtime::{
        Controller, WatchStreamExt,
        controller::Config as ControllerConfig,
        events::Reporter,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::mpsc;
use tracing::{info, warn};

use apply::{Applier, ObjKey};
use served::Served;

pub use owned::{OwnedKind, OwnedKinds};

/// Field manager of everything the operator applies.
pub const FIELD_MANAGER: &str = "capi-provider-operator";
pub use capi_operator_api::{
    OWNER_API_LABEL, OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
};

/// Kinds watched for drift repair and pruning (`group`, `version`, `kind`), from the moment
/// the cluster serves them (see [`owned`]). Objects of other kinds in a release are applied but
/// neither pruned nor repaired.
pub const OWNED_KINDS: &[(&str, &str, &str)] = &[
    ("", "v1", "Namespace"),
    ("", "v1", "ServiceAccount"),
    ("", "v1", "Service"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Secret"),
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "DaemonSet"),
    ("apps", "v1", "StatefulSet"),
    ("rbac.authorization.k8s.io", "v1", "Role"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
    ),
    ("cert-manager.io", "v1", "Certificate"),
    ("cert-manager.io", "v1", "Issuer"),
    // clusterctl's inventory entries (see [`inventory`]).
    ("clusterctl.cluster.x-k8s.io", "v1alpha3", "Provider"),
];

/// Settings of the `run` command.
#[derive(Debug, Clone)]
pub struct Options {
    /// GitHub API base URL replacing https://api.github.com (GitHub Enterprise, tests).
    pub github_api_url: Option<String>,
    /// Token for GitHub when the provider Secret has none (`GITHUB_TOKEN`).
    pub github_token: Option<String>,
    /// API hosts besides api.github.com and `github_api_url`'s that `github_token` may be
    /// sent to (GitHub Enterprise servers trusted with it); never one a provider names.
    pub github_token_hosts: Vec<String>,
    /// Delay before re-checking a provider stuck on a configuration problem.
    pub config_retry: Duration,
    /// Periodic re-check of a healthy provider.
    pub resync: Duration,
    /// Concurrent reconciles per kind.
    pub concurrency: u16,
    /// Watch provider objects of this namespace only (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Leader election; every replica reconciles when `None`.
    pub leader_election: Option<crate::leader::LeaseConfig>,
    /// Metrics registry served on `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Readiness served on `/readyz`.
    pub health: Arc<crate::server::Health>,
    /// Keep clusterctl's inventory for the providers the operator installs.
    pub clusterctl_inventory: bool,
    /// The provider APIs served: this operator's, cluster-api-operator's v1alpha2, or both.
    pub apis: Vec<ProviderApi>,
    /// Memory for fetching and rendering releases, shared by every provider.
    pub memory_budget: Arc<budget::Budget>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            github_api_url: None,
            github_token: None,
            github_token_hosts: Vec::new(),
            config_retry: Duration::from_secs(300),
            resync: Duration::from_secs(1800),
            concurrency: 4,
            namespace: None,
            leader_election: None,
            metrics: Arc::default(),
            health: Arc::default(),
            clusterctl_inventory: true,
            apis: ProviderApi::ALL.to_vec(),
            memory_budget: Arc::default(),
        }
    }
}

type Lister = Arc<dyn Fn() -> Vec<AnyProvider> + Send + Sync>;

/// The caches controllers read.
pub struct World {
    providers: BTreeMap<ProviderType, Vec<Lister>>,
    /// Watched kinds of installed objects.
    pub owned: OwnedKinds,
    /// The Deployments the operator installed (for readiness).
    pub deployments: Store<Deployment>,
}

fn owner_of(labels: &BTreeMap<String, String>) -> Option<(ProviderType, String, String)> {
    Some((
        ProviderType::from_kind(labels.get(OWNER_KIND_LABEL)?)?,
        labels.get(OWNER_NAMESPACE_LABEL)?.clone(),
        labels.get(OWNER_NAME_LABEL)?.clone(),
    ))
}

/// Whether an object's labels name `p` as its installer.
pub fn owned_by(labels: &BTreeMap<String, String>, p: &AnyProvider) -> bool {
    labels.get(OWNER_API_LABEL).map(String::as_str) == p.api.owner_label()
        && owner_of(labels).is_some_and(|(t, ns, name)| {
            t == p.provider_type && ns == p.namespace() && name == p.name()
        })
}

impl World {
    /// Every provider of type `t` the caches hold.
    pub fn providers(&self, t: ProviderType) -> Vec<AnyProvider> {
        self.providers
            .get(&t)
            .into_iter()
            .flatten()
            .flat_map(|l| l())
            .collect()
    }

    /// Every provider of every type.
    pub fn all_providers(&self) -> Vec<AnyProvider> {
        ProviderType::ALL
            .into_iter()
            .flat_map(|t| self.providers(t))
            .collect()
    }

    /// What the caches hold for an installed object.
    pub fn live(&self, key: &ObjKey) -> Option<apply::Live> {
        let kind = self.owned.find(&key.group, &key.kind)?;
        let mut r = ObjectRef::new_with(&key.name, kind.resource.clone());
        if kind.namespaced {
            r = r.within(&key.namespace);
        }
        let o = kind.store.get(&r)?;
        Some(apply::Live::of(&o.metadata))
    }

    /// The installed objects of `p` the caches hold.
    pub fn installed(&self, p: &AnyProvider) -> Vec<(ObjKey, ApiResource, bool)> {
        let mut out = Vec::new();
        for k in self.owned.all() {
            for o in k.store.state() {
                let labels = o.metadata.labels.clone().unwrap_or_default();
                if !owned_by(&labels, p) {
                    continue;
                }
                out.push((
                    ObjKey {
                        group: k.resource.group.clone(),
                        kind: k.resource.kind.clone(),
                        namespace: o.metadata.namespace.clone().unwrap_or_default(),
                        name: o.metadata.name.clone().unwrap_or_default(),
                    },
                    k.resource.clone(),
                    k.namespaced,
                ));
            }
        }
        // The caches' order is a hash map's: sorted, deletions and prunes go in the same order
        // every time (their events read the same, a seeded fault run replays exactly).
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The Deployments of `p`.
    pub fn deployments_of(&self, p: &AnyProvider) -> Vec<Arc<Deployment>> {
        self.deployments
            .state()
            .into_iter()
            .filter(|d| owned_by(d.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()), p))
            .collect()
    }
}

/// Routes watch events to the controllers of the provider they concern: those of its type in
/// every served API (the one without such an object drops the request).
#[derive(Clone)]
struct Triggers {
    senders: BTreeMap<ProviderType, Vec<mpsc::UnboundedSender<(String, String)>>>,
}

impl Triggers {
    fn send(&self, t: ProviderType, namespace: &str, name: &str) {
        for s in self.senders.get(&t).into_iter().flatten() {
            // A closed channel means the controller is shutting down; nothing to route to.
            let _ = s.send((namespace.to_string(), name.to_string()));
        }
    }
}

/// Everything a reconcile needs.
pub struct Ctx {
    /// The cluster.
    pub client: Client,
    /// The caches.
    pub world: World,
    /// Applies rendered objects.
    pub applier: Applier,
    /// Publishes events on provider objects.
    pub recorder: events::Events,
    /// Settings.
    pub opts: Options,
    /// Consecutive transient failures per provider, for exponential backoff.
    pub failures: std::sync::Mutex<BTreeMap<String, u32>>,
    /// Readiness rechecks of unready providers and looks at blocked deletions, with back-off.
    pub rechecks: readiness::Rechecks,
    /// Releases the release cache could not keep (`provider@version`): how many times they
    /// were fetched and when last, so fetching them again waits for the back-off.
    pub uncached: std::sync::Mutex<BTreeMap<String, (u32, std::time::Instant)>>,
    /// Whether providers get clusterctl inventory entries (asked for, and the CRD is served).
    pub inventory: bool,
    /// Watches of the Secrets and ConfigMaps providers read.
    pub inputs: inputs::InputWatches,
}

/// The owner reference the operator's own objects (release caches) carry.
pub fn owner_reference(p: &AnyProvider) -> OwnerReference {
    OwnerReference {
        api_version: p.api.api_version(),
        kind: p.provider_type.kind().to_string(),
        name: p.name().to_string(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn lister<P: Served>(store: Store<P>) -> Lister {
    Arc::new(move || store.state().iter().map(|p| p.view().0).collect())
}

fn trigger_stream<P: Served>(
    mut rx: mpsc::UnboundedReceiver<(String, String)>,
) -> impl Stream<Item = ObjectRef<P>> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
        .map(|(ns, name)| ObjectRef::<P>::new(&name).within(&ns))
}

/// A background task: a watch, or a controller.
type Task = std::pin::Pin<Box<dyn futures::Future<Output = ()> + Send>>;

/// A provider a watched object concerns: its type, namespace and name.
type Target = (ProviderType, String, String);

/// Routes the objects of a watch to the controllers of the providers `targets` names.
fn route<K, S>(
    stream: S,
    triggers: Triggers,
    mut targets: impl FnMut(&K) -> Vec<Target> + Send + 'static,
) -> Task
where
    K: Send + 'static,
    S: Stream<Item = Result<K, watcher::Error>> + Send + 'static,
{
    Box::pin(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(o) => {
                    for (t, ns, name) in targets(&o) {
                        triggers.send(t, &ns, &name);
                    }
                }
                Err(e) => warn!(error = %e, "watch failed; retrying"),
            }
        }
    })
}

/// The provider that installed an object, from its owner labels.
fn installer<K: kube::Resource>(o: &K) -> Vec<Target> {
    o.meta()
        .labels
        .as_ref()
        .and_then(owner_of)
        .into_iter()
        .collect()
}

/// Every cached provider `wanted` selects.
fn providers_where(ctx: &Ctx, wanted: impl Fn(&AnyProvider) -> bool) -> Vec<Target> {
    ctx.world
        .all_providers()
        .into_iter()
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

/// Whether a provider's last install stopped because cert-manager is missing.
fn waits_for_cert_manager(p: &AnyProvider) -> bool {
    p.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.reason == capi_operator_api::conditions::reason::CERT_MANAGER_NOT_INSTALLED)
    })
}

/// One provider kind: the cache of its objects, read by every reconcile, and its controller,
/// started once the shared context exists.
struct KindController {
    api: ProviderApi,
    provider_type: ProviderType,
    lister: Lister,
    start: Box<dyn FnOnce(Arc<Ctx>, Start) -> Task + Send>,
}

/// What every controller is started with.
struct Start {
    triggers: mpsc::UnboundedReceiver<(String, String)>,
    config: ControllerConfig,
    stop: tokio::sync::watch::Receiver<bool>,
}

/// The controller of provider kind `P`, driving the generic reconciler.
fn kind_controller<P: Served>(
    client: &Client,
    namespace: Option<&str>,
    cores: &CoreEvents,
) -> KindController {
    let (store, writer) = reflector::store();
    let cores = (P::TYPE == ProviderType::Core).then(|| cores.clone());
    let objects = watcher(
        providers_api::<P>(client, namespace),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .reflect(writer)
    // Core provider changes are passed on from here, after the cache has them: the other
    // providers they wake then read them from that cache.
    .inspect(move |ev| {
        if let Some(tx) = &cores {
            let change = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Some((o, false)),
                Ok(watcher::Event::Delete(o)) => Some((o, true)),
                _ => None,
            };
            if let Some((o, removed)) = change {
                // A closed channel means the operator is stopping.
                let _ = tx.send((o.view().0, removed));
            }
        }
    })
    .applied_objects()
    .predicate_filter(what_wakes_a_provider::<P>, Default::default());
    let controller = Controller::for_stream(objects, store);
    let lister = lister(controller.store());
    let start = move |ctx: Arc<Ctx>, s: Start| -> Task {
        Box::pin(async move {
            controller
                .with_config(s.config)
                .reconcile_on(trigger_stream::<P>(s.triggers))
                .graceful_shutdown_on(stopped(s.stop))
                .run(reconcile::reconcile::<P>, reconcile::error_policy::<P>, ctx)
                .for_each(|r| async move {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "reconcile failed");
                    }
                })
                .await
        })
    };
    KindController {
        api: P::API,
        provider_type: P::TYPE,
        lister,
        start: Box::new(start),
    }
}

/// What of a provider object, when it changes, calls for a reconcile: everything but its
/// status. The status is the reconciler's own output, and each write of it (several while a
/// provider installs) would otherwise bring another full pass; the cache still sees it.
fn what_wakes_a_provider<P: Served>(p: &P) -> Option<u64> {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash_spec_side(p.meta(), &mut h);
    Some(h.finish())
}

/// Hashes what of an object's metadata moves when anything but its status is written: which
/// object it is, its generation (the spec), deletion, finalizers, labels and annotations.
fn hash_spec_side(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    h: &mut impl std::hash::Hasher,
) {
    use std::hash::Hash;
    (
        &m.uid,
        m.generation,
        m.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
        &m.finalizers,
        &m.labels,
        &m.annotations,
    )
        .hash(h);
}

fn selector() -> watcher::Config {
    watcher::Config::default()
        .labels(OWNER_KIND_LABEL)
        .any_semantic()
}

fn providers_api<P: Served>(client: &Client, namespace: Option<&str>) -> Api<P> {
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Resolves once SIGTERM or SIGINT arrives.
async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    // An error means the sender is gone, which only happens at exit: stop too.
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Core provider changes (the provider, and whether it was removed), as the core kinds'
/// controllers see them.
type CoreEvents = mpsc::UnboundedSender<(AnyProvider, bool)>;

/// The seven provider kinds' controllers of `api`.
fn kind_controllers(
    client: &Client,
    ns: Option<&str>,
    api: ProviderApi,
    cores: &CoreEvents,
) -> Vec<KindController> {
    match api {
        ProviderApi::Management => vec![
            kind_controller::<CoreProvider>(client, ns, cores),
            kind_controller::<BootstrapProvider>(client, ns, cores),
            kind_controller::<ControlPlaneProvider>(client, ns, cores),
            kind_controller::<InfrastructureProvider>(client, ns, cores),
            kind_controller::<IPAMProvider>(client, ns, cores),
            kind_controller::<RuntimeExtensionProvider>(client, ns, cores),
            kind_controller::<AddonProvider>(client, ns, cores),
        ],
        ProviderApi::ClusterApiOperator => vec![
            kind_controller::<v1alpha2::CoreProvider>(client, ns, cores),
            kind_controller::<v1alpha2::BootstrapProvider>(client, ns, cores),
            kind_controller::<v1alpha2::ControlPlaneProvider>(client, ns, cores),
            kind_controller::<v1alpha2::InfrastructureProvider>(client, ns, cores),
            kind_controller::<v1alpha2::IPAMProvider>(client, ns, cores),
            kind_controller::<v1alpha2::RuntimeExtensionProvider>(client, ns, cores),
            kind_controller::<v1alpha2::AddonProvider>(client, ns, cores),
        ],
    }
}

/// The APIs of `wanted` whose CustomResourceDefinitions the cluster serves. An API without
/// them is not watched (a watch would fail forever); installing them needs a restart, or
/// `--manage-crds`, which installs them before this runs.
async fn served_apis(client: &Client, wanted: &[ProviderApi]) -> Vec<ProviderApi> {
    let mut out = Vec::new();
    for &api in wanted {
        let gvk = GroupVersionKind::gvk(api.group(), api.version(), ProviderType::Core.kind());
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(_) => out.push(api),
            Err(e) => warn!(
                api = %api.api_version(),
                error = %e,
                "provider API not served by the cluster (its CRDs are not installed); not watched"
            ),
        }
    }
    out
}

/// Watches of installed objects: their caches answer drift, pruning and readiness questions,
/// and each change wakes the provider that installed the object.
async fn watch_installed(
    client: &Client,
    triggers: &Triggers,
    tasks: &mut Vec<Task>,
) -> (OwnedKinds, Store<Deployment>) {
    let owned = OwnedKinds::new(client.clone(), triggers.clone());
    owned.discover(None).await;
    let (deployments, writer) = reflector::store();
    let events = watcher(Api::<Deployment>::all(client.clone()), selector())
        .default_backoff()
        .reflect(writer);
    let stream = changes_that_wake(events, what_wakes_for_a_deployment);
    tasks.push(route(stream, triggers.clone(), installer));
    (owned, deployments)
}

/// The objects of a watch whose change concerns the provider that installed them: `wakes`
/// hashes what does, and an update that leaves it equal wakes nobody. A rollout rewrites a
/// Deployment's status a few times per replica and a new CRD's status twice, each seen by two
/// watches (metadata and full); every one of those woke a full pass that found nothing to do.
/// Deletions always wake.
fn changes_that_wake<K, S>(
    events: S,
    wakes: impl Fn(&K) -> u64 + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: kube::Resource + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let mut seen: std::collections::HashMap<(Option<String>, String), u64> = Default::default();
    events.filter_map(move |ev| {
        let key = |o: &K| (o.meta().namespace.clone(), o.name_any());
        let out = match ev {
            Err(e) => Some(Err(e)),
            Ok(watcher::Event::Delete(o)) => {
                seen.remove(&key(&o));
                Some(Ok(o))
            }
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let h = wakes(&o);
                (seen.insert(key(&o), h) != Some(h)).then_some(Ok(o))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
        };
        futures::future::ready(out)
    })
}

/// What of an installed object concerns its provider. For kinds whose spec changes move
/// `metadata.generation` and whose status other controllers write (the ones drift repair
/// reads that way, [`apply::GENERATION_KINDS`]): everything in the metadata but the
/// resourceVersion and the status writers' entries. For the others any change, since their
/// content changes move nothing but the resourceVersion.
fn what_wakes_for_installed(
    generation_kind: bool,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if !generation_kind {
        meta.resource_version.hash(&mut h);
        return h.finish();
    }
    hash_spec_side(meta, &mut h);
    for m in meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() != Some("status"))
    {
        (
            &m.manager,
            &m.operation,
            m.time.as_ref().map(|t| t.0.as_second()),
        )
            .hash(&mut h);
    }
    h.finish()
}

/// What of an installed Deployment concerns its provider: its metadata, as for the other
/// installed objects, and of its status only what readiness reads
/// ([`capi_operator_api::rollout::availability`], whose message names the rollout's progress).
fn what_wakes_for_a_deployment(d: &Deployment) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    what_wakes_for_installed(true, &d.metadata).hash(&mut h);
    capi_operator_api::rollout::availability(d).hash(&mut h);
    h.finish()
}

/// Watches of what providers wait for: cert-manager's CRDs (which also start and stop the
/// watches of owned kinds served by CRDs, see [`owned`]), and any change of the core provider
/// wakes the others. (The Secrets and ConfigMaps they read are watched per namespace
/// by [`inputs::InputWatches`].)
fn watch_inputs(
    ctx: &Arc<Ctx>,
    triggers: &Triggers,
    tasks: &mut Vec<Task>,
    core_events: mpsc::UnboundedReceiver<(AnyProvider, bool)>,
) {
    let wc = watcher::Config::default().any_semantic();
    let client = &ctx.client;
    // cert-manager installed after a provider that needs it: its CRDs appearing retry the
    // providers waiting for it at once, instead of at the next configuration retry.
    let crds = watcher(
        Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone()),
        wc.clone(),
    );
    let c = ctx.clone();
    let (discover, follow) = owned::follow_crds(Arc::downgrade(ctx));
    tasks.push(follow);
    tasks.push(route(
        crds.default_backoff().touched_objects(),
        triggers.clone(),
        move |crd: &PartialObjectMeta<CustomResourceDefinition>| {
            // A CRD's name is `<plural>.<group>`.
            let name = crd.name_any();
            if let Some(group) = owned::owned_group_of_crd(&name) {
                // A closed channel means the operator is stopping.
                let _ = discover.send(group.to_string());
            }
            let of_cert_manager = name
                .strip_suffix(apply::CERT_MANAGER_GROUP)
                .is_some_and(|plural| plural.ends_with('.'));
            if !of_cert_manager {
                return Vec::new();
            }
            providers_where(&c, waits_for_cert_manager)
        },
    ));
    tasks.push(route_core_changes(ctx, triggers, core_events));
}

/// Wakes the other providers when a core provider changes in what they check of it. A core
/// provider changes many times while it installs (finalizer, each status write); the others
/// only care when its readiness, pause, contract, version or deletion changes.
fn route_core_changes(
    ctx: &Arc<Ctx>,
    triggers: &Triggers,
    mut events: mpsc::UnboundedReceiver<(AnyProvider, bool)>,
) -> Task {
    let c = ctx.clone();
    let mut seen: BTreeMap<(ProviderApi, String, String), CoreSeen> = BTreeMap::new();
    let stream = futures::stream::poll_fn(move |cx| events.poll_recv(cx)).map(Ok);
    route(
        stream,
        triggers.clone(),
        move |(core, removed): &(AnyProvider, bool)| {
            let key = (
                core.api,
                core.namespace().to_string(),
                core.name().to_string(),
            );
            let changed = if *removed {
                seen.remove(&key);
                true
            } else {
                let now = CoreSeen::of(core);
                seen.insert(key, now.clone()) != Some(now)
            };
            if !changed {
                return Vec::new();
            }
            providers_where(&c, |p| p.provider_type != ProviderType::Core)
        },
    )
}

/// What the other providers' reconciles read of a core provider (readiness, pause, contract,
/// version, deletion; see `preflight::ready_core` and the contract checks): a change of the
/// core provider that leaves this equal concerns none of them.
#[derive(Clone, PartialEq)]
struct CoreSeen {
    generation: Option<i64>,
    deleting: bool,
    installed_version: Option<String>,
    contract: Option<String>,
    conditions: Vec<(String, String, String)>,
}

impl CoreSeen {
    fn of(core: &AnyProvider) -> CoreSeen {
        let status = core.status.clone().unwrap_or_default();
        CoreSeen {
            generation: core.metadata.generation,
            deleting: core.metadata.deletion_timestamp.is_some(),
            installed_version: status.installed_version,
            contract: status.contract,
            conditions: status
                .conditions
                .into_iter()
                .map(|c| (c.type_, c.status, c.reason))
                .collect(),
        }
    }
}

/// Runs the seven controllers until a termination signal (or, with leader election, until the
/// lease is lost, which is an error: the process exits and a fresh start campaigns again).
///
/// Every request of the controllers (applies, prunes, status writes, events) goes through a
/// client fenced by the elector (see [`crate::fence`]); the elector uses a client of its own.
pub async fn run(config: kube::Config, opts: Options) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let unfenced = Client::try_from(config.clone()).context("creating the Kubernetes client")?;
    let elector = opts
        .leader_election
        .clone()
        .map(|cfg| crate::leader::Elector::new(unfenced.clone(), cfg));
    let fence = elector
        .as_ref()
        .map_or_else(crate::fence::Fence::unfenced, crate::leader::Elector::fence);
    let client = kube::client::ClientBuilder::try_from(config)
        .context("creating the Kubernetes client")?
        .with_layer(&crate::fence::FenceLayer::new(fence))
        .build();
    let apis = served_apis(&client, &opts.apis).await;
    let mut senders: BTreeMap<ProviderType, Vec<_>> = BTreeMap::new();
    let mut receivers = BTreeMap::new();
    for &api in &apis {
        for t in ProviderType::ALL {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.entry(t).or_default().push(tx);
            receivers.insert((api, t), rx);
        }
    }
    let triggers = Triggers { senders };
    let (core_tx, core_rx) = mpsc::unbounded_channel();
    let kinds: Vec<KindController> = apis
        .iter()
        .flat_map(|&api| kind_controllers(&client, opts.namespace.as_deref(), api, &core_tx))
        .collect();
    drop(core_tx);
    let mut providers: BTreeMap<ProviderType, Vec<Lister>> = BTreeMap::new();
    for k in &kinds {
        providers
            .entry(k.provider_type)
            .or_default()
            .push(k.lister.clone());
    }
    let mut tasks: Vec<Task> = Vec::new();
    // Before the installed kinds are discovered, so the entries are watched like the rest.
    // Before leading too, so unfenced: it only creates the CRD when absent, the same in
    // every replica, which cannot undo anything a leader did.
    let inventory = opts.clusterctl_inventory && inventory::ensure_crd(&unfenced).await;
    let (owned, deployments) = watch_installed(&client, &triggers, &mut tasks).await;
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        // The replica's identity, so events tell which replica acted.
        instance: opts
            .leader_election
            .as_ref()
            .map(|l| l.identity.clone())
            .or_else(|| std::env::var("POD_NAME").ok()),
    };
    let ctx = Arc::new(Ctx {
        recorder: events::Events::new(client.clone(), reporter),
        applier: Applier::new(client.clone()),
        client: client.clone(),
        world: World {
            providers,
            owned,
            deployments,
        },
        opts: opts.clone(),
        failures: std::sync::Mutex::new(BTreeMap::new()),
        rechecks: readiness::Rechecks::default(),
        uncached: std::sync::Mutex::new(BTreeMap::new()),
        inventory,
        inputs: inputs::InputWatches::new(triggers.clone()),
    });
    watch_inputs(&ctx, &triggers, &mut tasks, core_rx);
    let watchers = tokio::spawn(join_all(tasks));
    wait_for_caches(&ctx).await;
    let Some(lead) = lead(elector, &opts).await else {
        watchers.abort();
        return Ok(());
    };
    let config = ControllerConfig::default().concurrency(opts.concurrency);
    let mut controllers = Vec::new();
    for k in kinds {
        let rx = receivers
            .remove(&(k.api, k.provider_type))
            .ok_or_else(|| anyhow::anyhow!("no trigger channel"))?;
        let start = Start {
            triggers: rx,
            config: config.clone(),
            stop: lead.stop.clone(),
        };
        controllers.push((k.start)(ctx.clone(), start));
    }
    info!("controllers starting");
    let led = lead
        .supervise(async {
            join_all(controllers).await;
        })
        .await;
    watchers.abort();
    info!("controllers stopped");
    led
}

/// Reconciling before the caches of installed objects are filled would re-apply everything
/// and report Ready=False for a moment; wait for them first.
async fn wait_for_caches(ctx: &Ctx) {
    let _ = ctx.world.deployments.wait_until_ready().await;
    for k in ctx.world.owned.all() {
        let _ = k.store.wait_until_ready().await;
    }
    ctx.opts
        .health
        .caches_synced
        .store(true, std::sync::atomic::Ordering::SeqCst);
    info!("caches synced");
}

/// Leadership (or, without leader election, the process's lifetime): `stop` turns true when
/// the controllers are to stop.
struct Lead {
    stop: tokio::sync::watch::Receiver<bool>,
    stop_tx: tokio::sync::watch::Sender<bool>,
    elector: Option<crate::leader::Elector>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl Lead {
    /// Runs the controllers until a termination signal (they drain while the lease is still
    /// renewed, then it is released) or the loss of the lease (an error, returned at once:
    /// writes are already refused, and the process exits).
    async fn supervise(self, controllers: impl futures::Future<Output = ()>) -> anyhow::Result<()> {
        self.metrics.leading(true);
        let metrics = self.metrics.clone();
        let result = self.run(controllers).await;
        metrics.leading(false);
        result
    }

    async fn run(self, controllers: impl futures::Future<Output = ()>) -> anyhow::Result<()> {
        let stop = || {
            // No receiver left means every controller already stopped.
            let _ = self.stop_tx.send(true);
        };
        let Some(mut elector) = self.elector else {
            tokio::pin!(controllers);
            tokio::select! {
                () = &mut controllers => {}
                () = termination() => {
                    stop();
                    controllers.await;
                }
            }
            return Ok(());
        };
        let drain = crate::leader::DRAIN_AFTER_LOSS;
        let held =
            crate::leader::lead_while(&mut elector, controllers, termination(), stop, drain).await;
        if held == crate::leader::Held::Lost {
            anyhow::bail!("leadership lost: exiting so that a fresh start campaigns again");
        }
        Ok(())
    }
}

/// Becomes the leader (when leader election is on). `None` when terminated while waiting to
/// lead.
async fn lead(mut elector: Option<crate::leader::Elector>, opts: &Options) -> Option<Lead> {
    opts.health
        .election_running
        .store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(e) = elector.as_mut() {
        tokio::select! {
            _ = e.acquire() => {}
            _ = termination() => {
                info!("terminated while waiting to lead");
                return None;
            }
        }
    }
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    Some(Lead {
        stop,
        stop_tx,
        elector,
        metrics: opts.metrics.clone(),
    })
}

/// Key of a provider for bookkeeping maps.
pub fn provider_key(p: &AnyProvider) -> String {
    format!("{}/{}/{}", p.provider_type.kind(), p.namespace(), p.name())
}

#[cfg(test)]
mod wake_tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, status: serde_json::Value) -> Deployment {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "generation": generation,
                         "resourceVersion": format!("{}", rv_of(&status))},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": status,
        });
        serde_json::from_value(d).unwrap_or_default()
    }

    // Each status gets its own resourceVersion, as every write does.
    fn rv_of(status: &serde_json::Value) -> usize {
        status.to_string().len()
    }

    fn rolling(updated: i64) -> serde_json::Value {
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": updated,
               "availableReplicas": 0, "conditions": [{"type": "Available", "status": "False",
               "message": "Deployment does not have minimum availability."}]})
    }

    fn available(ready: i64) -> serde_json::Value {
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": ready,
               "availableReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]})
    }

    #[tokio::test]
    async fn only_changes_a_provider_reads_wake_it() {
        use watcher::Event::{Apply, Delete, InitApply, InitDone};
        let events = vec![
            Ok(InitApply(deployment(1, rolling(0)))),
            Ok(InitDone),
            // The same availability, another status write: nobody is woken.
            Ok(Apply(deployment(1, rolling(1)))),
            // Available: readiness changes.
            Ok(Apply(deployment(1, available(1)))),
            // A status field readiness does not read.
            Ok(Apply(deployment(1, available(2)))),
            // A spec change (drift, or an upgrade).
            Ok(Apply(deployment(2, available(2)))),
            // A relist that finds it unchanged.
            Ok(InitApply(deployment(2, available(2)))),
            Ok(Delete(deployment(2, available(2)))),
        ];
        let woken: Vec<Deployment> =
            changes_that_wake(futures::stream::iter(events), what_wakes_for_a_deployment)
                .filter_map(|r| futures::future::ready(r.ok()))
                .collect()
                .await;
        let seen: Vec<(Option<i64>, Option<i32>)> = woken
            .iter()
            .map(|d| {
                (
                    d.metadata.generation,
                    d.status.as_ref().and_then(|s| s.available_replicas),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (Some(1), Some(0)),
                (Some(1), Some(1)),
                (Some(2), Some(1)),
                (Some(2), Some(1)),
            ],
            "the first sight, Available, the spec change and the deletion"
        );
    }

    #[test]
    fn status_writes_wake_nobody_for_generation_kinds_only() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let meta = |rv: &str, generation: i64, label: &str| ObjectMeta {
            resource_version: Some(rv.into()),
            generation: Some(generation),
            labels: Some([("l".to_string(), label.to_string())].into()),
            ..Default::default()
        };
        // A CRD's status write moves only its resourceVersion.
        assert_eq!(
            what_wakes_for_installed(true, &meta("1", 1, "a")),
            what_wakes_for_installed(true, &meta("2", 1, "a"))
        );
        assert_ne!(
            what_wakes_for_installed(true, &meta("2", 1, "a")),
            what_wakes_for_installed(true, &meta("3", 1, "b")),
            "a label edit is drift"
        );
        assert_ne!(
            what_wakes_for_installed(true, &meta("3", 1, "a")),
            what_wakes_for_installed(true, &meta("4", 2, "a")),
            "a spec edit is drift"
        );
        // A ConfigMap's or a ClusterRole's content change moves only its resourceVersion.
        assert_ne!(
            what_wakes_for_installed(false, &meta("1", 0, "a")),
            what_wakes_for_installed(false, &meta("2", 0, "a"))
        );
    }
}
