//! The running operator: the clients, the watches feeding the index, the controllers of the
//! provider kinds, and leadership (the controllers run while the lease is held, and stop on a
//! termination signal).

use std::{collections::BTreeMap, sync::Arc};

use anyhow::Context as _;
use capi_operator_api::{
    AddonProvider, BootstrapProvider, ControlPlaneProvider, CoreProvider, IPAMProvider,
    InfrastructureProvider, ProviderApi, ProviderType, RuntimeExtensionProvider, v1alpha2,
};
use futures::{Stream, StreamExt, future::join_all};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{GroupVersionKind, PartialObjectMeta},
    runtime::{
        Controller, WatchStreamExt,
        controller::Config as ControllerConfig,
        events::Reporter,
        reflector::{self, ObjectRef},
        watcher,
    },
};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::{
    apply::{self, Applier, FIELD_MANAGER},
    context::Ctx,
    context::World,
    events,
    index::{Index, ProviderChange},
    inputs, inventory, mirror,
    options::Options,
    owned::{self, OwnedKinds},
    reconcile,
    routing::{self, Task, Triggers, route},
};
use capi_cluster_io::provider_kind::ProviderKind;
use capi_decide::readiness;

/// Runs the seven controllers until a termination signal (or, with leader election, until the
/// lease is lost, which is an error: the process exits and a fresh start campaigns again).
///
/// Every request of the controllers (applies, prunes, status writes, events) goes through a
/// client fenced by the elector (see [`crate::fence`]); the elector uses a client of its own.
pub async fn run(config: kube::Config, opts: Options) -> anyhow::Result<()> {
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
    let (triggers, mut receivers) = channels(&apis);
    let index = Arc::new(Index::default());
    let kinds: Vec<KindController> = apis
        .iter()
        .flat_map(|&api| {
            let ns = opts.namespace.as_deref();
            kind_controllers(&client, ns, api, &index, &triggers)
        })
        .collect();
    let mut tasks: Vec<Task> = Vec::new();
    // Before the installed kinds are discovered, so the entries are watched like the rest.
    // Before leading too, so unfenced: it only creates the CRD when absent, the same in
    // every replica, which cannot undo anything a leader did.
    let inventory = opts.clusterctl_inventory && inventory::ensure_crd(&unfenced).await;
    let owned = watch_installed(&client, &index, &triggers, &mut tasks).await;
    let world = World::new(index, owned);
    let ctx = Arc::new(context(client, world, &opts, inventory, &triggers));
    watch_inputs(&ctx, &triggers, &mut tasks);
    let watchers = tokio::spawn(join_all(tasks));
    wait_for_caches(&ctx).await;
    let Some(lead) = lead(elector, &opts).await else {
        watchers.abort();
        return Ok(());
    };
    // Before any reconcile: a purge guard left by a stopped operator must not refuse users'
    // objects (a purge still under way puts its own up again).
    super::purge::sweep(&ctx).await;
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

/// The channels routing wakes to the controllers: one per served API and provider type.
type Receivers = BTreeMap<(ProviderApi, ProviderType), mpsc::UnboundedReceiver<(String, String)>>;

fn channels(apis: &[ProviderApi]) -> (Triggers, Receivers) {
    let mut triggers = Triggers::default();
    let mut receivers = BTreeMap::new();
    for &api in apis {
        for t in ProviderType::ALL {
            let (tx, rx) = mpsc::unbounded_channel();
            triggers.add(t, tx);
            receivers.insert((api, t), rx);
        }
    }
    (triggers, receivers)
}

/// The context the reconciles share.
fn context(
    client: Client,
    world: World,
    opts: &Options,
    inventory: bool,
    triggers: &Triggers,
) -> Ctx {
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        // The replica's identity, so events tell which replica acted.
        instance: opts
            .leader_election
            .as_ref()
            .map(|l| l.identity.clone())
            .or_else(|| std::env::var("POD_NAME").ok()),
    };
    Ctx {
        recorder: events::Events::new(client.clone(), reporter),
        applier: Applier::new(client.clone()),
        client,
        world,
        opts: opts.clone(),
        failures: std::sync::Mutex::new(BTreeMap::new()),
        rechecks: readiness::Rechecks::default(),
        uncached: std::sync::Mutex::new(BTreeMap::new()),
        inventory,
        inputs: inputs::InputWatches::new(triggers.clone()),
        mirror: Arc::new(
            mirror::MirrorSetting::new(opts.image_mirror.clone(), opts.image_mirror_config.clone())
                .owned_by(opts.image_mirror_owner.clone()),
        ),
        written: Default::default(),
    }
}

/// Reconciling before the caches of installed objects are filled would re-apply everything
/// and report Ready=False for a moment; wait for them first.
async fn wait_for_caches(ctx: &Ctx) {
    ctx.world.deployments_listed().await;
    ctx.mirror.listed().await;
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
                    let limit = crate::leader::DRAIN_ON_TERMINATION;
                    crate::leader::drain(&mut controllers, limit, "terminating").await;
                }
            }
            return Ok(());
        };
        let drains = crate::leader::Drains::default();
        let held =
            crate::leader::lead_while(&mut elector, controllers, termination(), stop, drains).await;
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
            () = e.acquire() => {}
            () = termination() => {
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

/// One provider kind: its controller, started once the shared context exists.
struct KindController {
    api: ProviderApi,
    provider_type: ProviderType,
    start: Box<dyn FnOnce(Arc<Ctx>, Start) -> Task + Send>,
}

/// What every controller is started with.
struct Start {
    triggers: mpsc::UnboundedReceiver<(String, String)>,
    config: ControllerConfig,
    stop: tokio::sync::watch::Receiver<bool>,
}

fn trigger_stream<P: ProviderKind>(
    mut rx: mpsc::UnboundedReceiver<(String, String)>,
) -> impl Stream<Item = ObjectRef<P>> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
        .map(|(ns, name)| ObjectRef::<P>::new(&name).within(&ns))
}

fn providers_api<P: ProviderKind>(client: &Client, namespace: Option<&str>) -> Api<P> {
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The controller of provider kind `P`, driving the generic reconciler. Its watch feeds the
/// index; a core provider's change in what the others read of it wakes them.
fn kind_controller<P: ProviderKind>(
    client: &Client,
    namespace: Option<&str>,
    index: &Arc<Index>,
    triggers: &Triggers,
) -> KindController {
    let (store, writer) = reflector::store();
    let (index, triggers) = (index.clone(), triggers.clone());
    let objects = watcher(
        providers_api::<P>(client, namespace),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .reflect(writer)
    .inspect(move |ev| {
        let Ok(ev) = ev else { return };
        if index.feed_provider(ev) == ProviderChange::CoreChanged {
            for t in index.targets_where(|p| p.provider_type != ProviderType::Core) {
                triggers.send(&t);
            }
        }
    })
    .applied_objects()
    .predicate_filter(routing::what_wakes_a_provider::<P>, Default::default());
    let controller = Controller::for_stream(objects, store);
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
                .await;
        })
    };
    KindController {
        api: P::API,
        provider_type: P::TYPE,
        start: Box::new(start),
    }
}

/// The seven provider kinds' controllers of `api`.
fn kind_controllers(
    client: &Client,
    ns: Option<&str>,
    api: ProviderApi,
    index: &Arc<Index>,
    tr: &Triggers,
) -> Vec<KindController> {
    match api {
        ProviderApi::Management => vec![
            kind_controller::<CoreProvider>(client, ns, index, tr),
            kind_controller::<BootstrapProvider>(client, ns, index, tr),
            kind_controller::<ControlPlaneProvider>(client, ns, index, tr),
            kind_controller::<InfrastructureProvider>(client, ns, index, tr),
            kind_controller::<IPAMProvider>(client, ns, index, tr),
            kind_controller::<RuntimeExtensionProvider>(client, ns, index, tr),
            kind_controller::<AddonProvider>(client, ns, index, tr),
        ],
        ProviderApi::ClusterApiOperator => vec![
            kind_controller::<v1alpha2::CoreProvider>(client, ns, index, tr),
            kind_controller::<v1alpha2::BootstrapProvider>(client, ns, index, tr),
            kind_controller::<v1alpha2::ControlPlaneProvider>(client, ns, index, tr),
            kind_controller::<v1alpha2::InfrastructureProvider>(client, ns, index, tr),
            kind_controller::<v1alpha2::IPAMProvider>(client, ns, index, tr),
            kind_controller::<v1alpha2::RuntimeExtensionProvider>(client, ns, index, tr),
            kind_controller::<v1alpha2::AddonProvider>(client, ns, index, tr),
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

/// Watches of installed objects: they feed the index, which answers drift, pruning and
/// readiness questions, and each change that concerns the provider that installed the object
/// wakes it.
async fn watch_installed(
    client: &Client,
    index: &Arc<Index>,
    triggers: &Triggers,
    tasks: &mut Vec<Task>,
) -> OwnedKinds {
    let owned = OwnedKinds::new(client.clone(), triggers.clone(), index.clone());
    owned.discover(None).await;
    let events = watcher(Api::<Deployment>::all(client.clone()), owned::selector())
        .default_backoff()
        .modify(owned::slim_deployment);
    let index = index.clone();
    tasks.push(route(events, triggers.clone(), move |ev| {
        index.feed_deployment(ev).into_iter().collect()
    }));
    owned
}

/// Watches of what providers wait for: cert-manager's CRDs (which also start and stop the
/// watches of owned kinds served by CRDs, see [`owned`]). (The Secrets and ConfigMaps they
/// read are watched per namespace by [`inputs::InputWatches`]; a core provider's changes
/// wake the others from its controller's watch.)
fn watch_inputs(ctx: &Arc<Ctx>, triggers: &Triggers, tasks: &mut Vec<Task>) {
    let wc = watcher::Config::default().any_semantic();
    if let Some((namespace, name)) = ctx.mirror.config() {
        // One named object: a field selector keeps the other ConfigMaps of the namespace out.
        let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace);
        let events = watcher(api, wc.clone().fields(&format!("metadata.name={name}")));
        let wake = mirror::wake_all_on_change(ctx.mirror.clone(), ctx.world.index().clone());
        tasks.push(route(events.default_backoff(), triggers.clone(), wake));
    }
    // cert-manager installed after a provider that needs it: its CRDs appearing retry the
    // providers waiting for it at once, instead of at the next configuration retry.
    let crds = watcher(
        Api::<PartialObjectMeta<CustomResourceDefinition>>::all(ctx.client.clone()),
        wc,
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
            c.world.targets_where(routing::waits_for_cert_manager)
        },
    ));
}
