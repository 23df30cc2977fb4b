//! The install path of a reconcile, as an ordered list of phases (see [`run`]). Each phase is a
//! function over the reconcile's [`State`] and what earlier phases produced; it either goes on
//! or ends the reconcile with an [`Outcome`]. What else a phase did that the admin should read
//! about it hands on as a [`Note`]; the status and the events are written once, by the reporter
//! (`super::report`), from the outcome and the notes. The decisions inside the phases are the
//! pure functions of the decision layer (`super::decide`).

use std::{collections::BTreeMap, ops::ControlFlow};

use capi_components::{
    before_apply::{Pause, finalize},
    contract as release_contract,
    metadata::Metadata,
    render, rotation,
};
use capi_operator_api::{
    AnyProvider, ORIGINAL_REPLICAS_ANNOTATION, ProviderStatus, ProviderType,
    ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION,
    conditions::{PAUSED, PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED, PROVIDER_UPGRADED, READY},
};
use capi_release::Release;
use capi_release_sources::{SourceError, fetch_release};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Pod, Secret},
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch},
};
use serde_json::{Value, json};
use tracing::{Instrument, debug, debug_span, info, warn};

use super::{
    apply::{ApplyError, ApplyReport, ObjKey, key_of},
    budget::{COST_PER_BYTE, ReleaseCost, Share},
    context::{Ctx, provider_key},
    decide::{
        Note, Outcome, Reasoned,
        conditions::{self, Desired},
        plan, preflight, problem, readiness, reason,
        settle::backoff_delay,
    },
    found,
    report::{list_note, merge_params},
    source::{self, Chosen, Lookup, ReleaseCache},
};
use capi_cluster_io::{
    provider_inputs::{self, Manifests, Variables},
    provider_kind::ProviderKind,
    redact::Redactor,
};

impl Reasoned for ApplyError {
    fn reason(&self) -> &'static str {
        ApplyError::reason(self)
    }
    fn transient(&self) -> bool {
        self.is_transient()
    }
}

/// What every phase reads, and the status and notes the phases fill in.
pub struct State<'a, P> {
    /// The provider's kind-independent view.
    pub p: &'a AnyProvider,
    /// Caches, client, applier, recorder and settings.
    pub ctx: &'a Ctx,
    /// The API of the provider's kind.
    pub api: &'a Api<P>,
    /// The status being built; written by the reporter after the last phase.
    pub status: &'a mut ProviderStatus,
    /// What the phases did besides the conditions, for the reporter to publish.
    pub notes: &'a mut Vec<Note>,
}

/// A phase's result: go on with a value, or end the reconcile.
type Phase<T = ()> = ControlFlow<Outcome, T>;

fn end<T>(outcome: Outcome) -> Phase<T> {
    ControlFlow::Break(outcome)
}

/// The release of one version, with the contract its metadata gives.
struct Fetched {
    version: String,
    release: Release,
    contract: String,
    /// What rendering it may build: what its share of the memory budget was charged for.
    limits: capi_components::pipeline::RenderLimits,
    /// The release's share of the memory budget, held until the install pass ends (the
    /// rendered objects live until they are applied).
    _memory: Share,
}

/// Runs the phases in order and gives the outcome.
pub async fn install<P: ProviderKind>(s: &mut State<'_, P>) -> Outcome {
    match run(s).await {
        ControlFlow::Continue(()) => Outcome::Done,
        ControlFlow::Break(outcome) => outcome,
    }
}

/// The phases, in order.
async fn run<P: ProviderKind>(s: &mut State<'_, P>) -> Phase {
    let core = debug_span!("phase", name = "preflight").in_scope(|| preflight_phase(s))?;
    let (vars, chosen) = configure(s)
        .instrument(debug_span!("phase", name = "configure"))
        .await?;
    let version = resolve_version(s, &chosen)
        .instrument(debug_span!("phase", name = "resolve-version"))
        .await?;
    let fetched = fetch(s, &chosen, version)
        .instrument(debug_span!("phase", name = "fetch"))
        .await?;
    // Both contract rules look at every provider: read the caches once.
    let all = s.ctx.world.all_providers();
    debug_span!("phase", name = "contract")
        .in_scope(|| contract_phase(s, core.as_ref(), &all, &fetched))?;
    let pause = debug_span!("phase", name = "pause-plan")
        .in_scope(|| pause_plan(s, core.as_ref(), &all, &fetched.contract));
    let rendered = render_phase(s, &fetched, &vars, pause.is_some())
        .instrument(debug_span!("phase", name = "render"))
        .await?;
    let rolled = rollout_note(s.ctx, &rendered);
    let applied = apply_phase(s, &rendered.objects, &vars)
        .instrument(debug_span!("phase", name = "apply"))
        .await?;
    s.notes.extend(rolled);
    let changes_version = upgrading(s.status, &fetched.version);
    if let Some(entry) = &rendered.entry {
        record_in_inventory(s, entry, &fetched.version, changes_version)
            .instrument(debug_span!("phase", name = "inventory"))
            .await;
    }
    let desired: Vec<&Value> = rendered.objects.iter().chain(&rendered.entry).collect();
    prune(s, &desired, pause.is_some(), changes_version)
        .instrument(debug_span!("phase", name = "prune"))
        .await?;
    report(s, &fetched, rendered, applied, pause)
        .instrument(debug_span!("phase", name = "report"))
        .await;
    ControlFlow::Continue(())
}

fn upgrading(status: &ProviderStatus, version: &str) -> bool {
    status.installed_version.as_deref() != Some(version)
}

fn preflight_failed(f: preflight::Failure) -> Outcome {
    Outcome::failed(PREFLIGHT_CHECK_PASSED, f)
}

/// Uniqueness and, for a non-core provider, an installed core provider (which it returns).
fn preflight_phase<P>(s: &State<'_, P>) -> Phase<Option<AnyProvider>> {
    let p = s.p;
    let same_kind = s.ctx.world.providers(p.provider_type);
    let cores = s.ctx.world.providers(ProviderType::Core);
    if let Err(f) = preflight::check_objects(p, &same_kind, &cores) {
        return end(preflight_failed(f));
    }
    if p.provider_type == ProviderType::Core {
        return ControlFlow::Continue(None);
    }
    match preflight::ready_core(&cores) {
        Ok(c) => ControlFlow::Continue(Some(c.clone())),
        Err(f) => end(preflight_failed(f)),
    }
}

/// The provider Secret's variables and the release source they and fetchConfig choose.
async fn configure<P>(s: &State<'_, P>) -> Phase<(BTreeMap<String, String>, Chosen)> {
    let vars = read_variables(s.ctx, s.p).await?;
    match source::choose(&s.ctx.client, &s.ctx.opts, s.p, &vars) {
        Ok(chosen) => ControlFlow::Continue((vars, chosen)),
        Err(message) => end(problem(
            PREFLIGHT_CHECK_PASSED,
            reason::INVALID_FETCH_CONFIG,
            message,
        )),
    }
}

/// spec.version, checked against a downgrade. An empty one is resolved to the latest release
/// and written back, which ends this reconcile: the update brings the next one.
async fn resolve_version<P: ProviderKind>(s: &mut State<'_, P>, chosen: &Chosen) -> Phase<String> {
    if let Some(v) = s.p.spec.version.as_deref().filter(|v| !v.is_empty()) {
        if let Err(f) = preflight::check_downgrade(s.status.installed_version.as_deref(), v) {
            return end(preflight_failed(f));
        }
        return ControlFlow::Continue(v.to_string());
    }
    let resolved = match chosen.url_version.clone() {
        Some(v) => v,
        None => latest_version(s, chosen).await?,
    };
    // A compare-and-swap on the object this reconcile read: a version the user set since then
    // makes it fail instead of being overwritten (and the provider upgraded unasked).
    let patch = json!({
        "metadata": {"resourceVersion": s.p.metadata.resource_version},
        "spec": {"version": resolved},
    });
    match s
        .api
        .patch(s.p.name(), &merge_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            info!(provider = %provider_key(s.p), version = %resolved, "resolved the latest release into spec.version");
            let note = format!("spec.version set to {resolved}, the latest release");
            s.notes.push(Note::normal(reason::VERSION_RESOLVED, note));
            end(Outcome::VersionWritten)
        }
        Err(e) if is_conflict(&e) => version_conflict(s, e).await,
        Err(e) => end(version_not_written(e)),
    }
}

/// After the version write lost a race: a version set meanwhile (by the user) stands, and its
/// update brings the next reconcile; any other change means trying again (with back-off) on a
/// fresh read.
async fn version_conflict<P: ProviderKind>(
    s: &State<'_, P>,
    conflict: kube::Error,
) -> Phase<String> {
    let now = match s.api.get(s.p.name()).await {
        Ok(o) => o.view().0,
        Err(e) => return end(version_not_written(e)),
    };
    match now.spec.version.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => {
            info!(provider = %provider_key(s.p), version = %v, "spec.version was set meanwhile; it is kept, not overwritten");
            end(Outcome::VersionWritten)
        }
        None => end(version_not_written(conflict)),
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(st) if st.code == 409)
}

fn version_not_written(e: kube::Error) -> Outcome {
    Outcome::transient(
        e,
        PREFLIGHT_CHECK_PASSED,
        reason::SOURCE_UNAVAILABLE,
        "writing the resolved version into spec.version failed".into(),
    )
}

/// The latest release's version; the release is cached (and its digest recorded), as the
/// next reconcile fetches it. The fetch and the cache write hold a share of the memory budget
/// like any other fetch.
async fn latest_version<P: ProviderKind>(s: &mut State<'_, P>, chosen: &Chosen) -> Phase<String> {
    let budget = &s.ctx.opts.memory_budget;
    let share = budget
        .acquire(budget.estimate(&provider_key(s.p), ""))
        .await;
    match fetch_release(&chosen.source, None, &chosen.components_file).await {
        Ok(r) => {
            let size = (r.components.len() + r.metadata.len()) as u64;
            let _memory = budget
                .resize(share, size.saturating_mul(COST_PER_BYTE))
                .await;
            if let Some(key) = chosen.cache_key.as_deref() {
                let cache = ReleaseCache::new(s.ctx.client.clone(), s.p.namespace());
                cache_release(s, &cache, &r, key).await;
            }
            ControlFlow::Continue(r.version)
        }
        Err(e) => end(Outcome::failed(PREFLIGHT_CHECK_PASSED, e)),
    }
}

/// The release (through the in-cluster cache for remote sources) and its contract, within the
/// memory budget: an estimate is held while fetching, then the release's own cost.
async fn fetch<P: ProviderKind>(
    s: &mut State<'_, P>,
    chosen: &Chosen,
    version: String,
) -> Phase<Fetched> {
    let ctx = s.ctx;
    let budget = &ctx.opts.memory_budget;
    let key = provider_key(s.p);
    let share = budget.acquire(budget.estimate(&key, &version)).await;
    let release = match cached_fetch(s, chosen, &version).await {
        Ok(r) => r,
        Err(e) => return end(Outcome::failed(PROVIDER_INSTALLED, e)),
    };
    let cost = release_cost(&release).await;
    if cost.memory() > budget.total() {
        return end(problem(
            PROVIDER_INSTALLED,
            reason::RENDER_FAILED,
            too_large(&version, &cost, budget.total()),
        ));
    }
    let memory = budget
        .resize(share, budget.learn(&key, &version, &cost))
        .await;
    let contract = Metadata::parse(&release.metadata)
        .map_err(|e| format!("release {version}: {e}"))
        .and_then(|m| {
            m.contract_for(&version)
                .map(str::to_string)
                .map_err(|e| e.to_string())
        });
    match contract {
        Ok(contract) => ControlFlow::Continue(Fetched {
            version,
            release,
            contract,
            limits: cost.limits(),
            _memory: memory,
        }),
        Err(message) => end(problem(
            PREFLIGHT_CHECK_PASSED,
            reason::INVALID_METADATA,
            message,
        )),
    }
}

/// Releases smaller than this are counted on the event loop.
const INLINE_COST_BYTES: usize = 256 * 1024;

/// What rendering `release` costs, counted on a blocking thread (a large release takes long
/// enough to delay the event loop, as its render does).
async fn release_cost(release: &Release) -> ReleaseCost {
    // A small release is counted in well under a millisecond: a blocking thread would cost
    // more than it saves (and an await on another thread is a point where the seeded fault
    // tier's paused clock can jump, making a run replay differently).
    if release.components.len() + release.metadata.len() < INLINE_COST_BYTES {
        return ReleaseCost::of(release);
    }
    let owned = release.clone();
    let counted = tokio::task::spawn_blocking(move || ReleaseCost::of(&owned)).await;
    // Only a panic while counting gets here: the render's node limit then stands alone.
    counted.unwrap_or(ReleaseCost {
        bytes: (release.components.len() + release.metadata.len()) as u64,
        nodes: 0,
    })
}

/// Why a release larger than the whole memory budget is refused rather than rendered: the
/// render would take the operator over its memory limit, and the kill would repeat it on
/// every start, stopping every other provider.
fn too_large(version: &str, cost: &ReleaseCost, budget: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    format!(
        "release {version} is not rendered: rendering it needs about {} MiB ({} bytes, {} YAML nodes), more than the operator's whole release memory budget of {} MiB (raise the operator's memory limit to install it)",
        cost.memory().div_ceil(MIB),
        cost.bytes,
        cost.nodes,
        budget / MIB
    )
}

/// The release from the cache when its entry has the digest the status records, else taken
/// over from cluster-api-operator (for a provider handed over from it, see
/// [`plan::handed_over`]) or fetched; a fetched release is cached and its digest recorded.
async fn cached_fetch<P: ProviderKind>(
    s: &mut State<'_, P>,
    chosen: &Chosen,
    version: &str,
) -> Result<Release, SourceError> {
    let (ctx, p) = (s.ctx, s.p);
    let timed = || async {
        let started = std::time::Instant::now();
        let r = fetch_release(&chosen.source, Some(version), &chosen.components_file).await;
        let metrics = &ctx.opts.metrics;
        metrics.fetched(chosen.source.kind(), r.is_ok(), started.elapsed());
        if let Err(e) = &r {
            metrics.fetch_failed(chosen.source.kind(), crate::metrics::fetch_error_class(e));
        }
        r
    };
    let Some(key) = chosen.cache_key.as_deref() else {
        return timed().await;
    };
    let cache = ReleaseCache::new(ctx.client.clone(), p.namespace());
    let recorded = s.status.release_digests.get(version).cloned();
    let mut lookup = cache.get(p, version, key, recorded.as_deref()).await?;
    if matches!(lookup, Lookup::Unrecorded)
        && let Some(fresh) = recorded_digest(s, version).await
    {
        lookup = cache.get(p, version, key, Some(&fresh)).await?;
    }
    match lookup {
        Lookup::Hit(r) => return Ok(r),
        Lookup::Mismatch(why) => {
            warn!(provider = %provider_key(p), version, %why, "release cache entry not used");
            let note =
                format!("release {version} fetched again; its cache entry was not used: {why}");
            s.notes
                .push(Note::warning(reason::RELEASE_CACHE_MISMATCH, note));
        }
        Lookup::Miss | Lookup::Unrecorded => {}
    }
    if plan::handed_over(p, s.status, version)
        && let Some(r) = cache.take_over_go_release(p, version, key).await?
    {
        info!(provider = %provider_key(p), version, "release taken over from cluster-api-operator's ConfigMap; nothing fetched");
        record_digest(s, &cache, &r).await;
        return Ok(r);
    }
    let uncached_key = format!("{}@{version}", provider_key(p));
    if let Some((fetches, wait)) = uncached_wait(ctx, &uncached_key) {
        return Err(SourceError::Transient {
            what: format!("release {version}"),
            reason: format!(
                "it cannot be kept in the release cache and was fetched {fetches} times; fetched again in {}s at the earliest (back-off)",
                wait.as_secs()
            ),
        });
    }
    let release = timed().await?;
    info!(provider = %provider_key(p), version, "release fetched");
    let cached = cache_release(s, &cache, &release, key).await;
    if let Ok(mut u) = ctx.uncached.lock() {
        if cached {
            u.remove(&uncached_key);
        } else {
            let n = u.get(&uncached_key).map_or(0, |(n, _)| *n);
            u.insert(
                uncached_key,
                (n.saturating_add(1), tokio::time::Instant::now()),
            );
        }
    }
    Ok(release)
}

/// The digest of `version` in the provider's status as the API server has it now, for a cache
/// entry the status in hand records none for: a reconcile woken by an installed object can run
/// before the provider's own watch brings the status this operator wrote a moment ago (with
/// the digest of the release it just cached or took over), and trusting that stale copy would
/// download again a release the cache holds. The fresh digests join the status being built.
async fn recorded_digest<P: ProviderKind>(s: &mut State<'_, P>, version: &str) -> Option<String> {
    let fresh = s.api.get(s.p.name()).await.ok()?.view().0.status?;
    let digest = fresh.release_digests.get(version).cloned()?;
    for (v, d) in fresh.release_digests {
        s.status.release_digests.entry(v).or_insert(d);
    }
    Some(digest)
}

/// How long fetching a release the cache could not keep must still wait (the reconciler's
/// back-off after as many fetches), with the number of fetches so far; `None` when it may be
/// fetched now.
fn uncached_wait(ctx: &Ctx, key: &str) -> Option<(u32, std::time::Duration)> {
    let (fetches, last) = *ctx.uncached.lock().ok()?.get(key)?;
    let due = backoff_delay(fetches, 0.5);
    due.checked_sub(last.elapsed())
        .filter(|w| !w.is_zero())
        .map(|w| (fetches, w))
}

/// Caches a fetched release and records its digest; a release that cannot be cached is
/// reported (it is fetched again when next needed, within the back-off). Whether it was cached.
async fn cache_release<P: ProviderKind>(
    s: &mut State<'_, P>,
    cache: &ReleaseCache,
    release: &Release,
    key: &str,
) -> bool {
    let put = cache.put(s.p, release, key).await;
    if let Err(e) = &put {
        warn!(provider = %provider_key(s.p), error = %e, "release not cached");
        let note = format!(
            "release {} is not kept in the release cache and will be fetched again when needed: {e}",
            release.version
        );
        s.notes
            .push(Note::warning(reason::RELEASE_NOT_CACHED, note));
    }
    record_digest(s, cache, release).await;
    put.is_ok()
}

/// Records the digest of `release` in the status, keeps only the digests (and cache entries)
/// of the installed, previous and current versions.
async fn record_digest<P>(s: &mut State<'_, P>, cache: &ReleaseCache, release: &Release) {
    let digests = &mut s.status.release_digests;
    digests.insert(release.version.clone(), source::release_digest(release));
    let keep: Vec<String> = source::kept_versions(
        digests,
        s.status.installed_version.as_deref(),
        &release.version,
    )
    .into_iter()
    .map(str::to_string)
    .collect();
    digests.retain(|v, _| keep.contains(v));
    let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
    match cache.prune(s.p, &keep).await {
        Ok(0) => {}
        Ok(n) => {
            debug!(provider = %provider_key(s.p), pruned = n, "old release cache entries deleted")
        }
        Err(e) => {
            warn!(provider = %provider_key(s.p), error = %e, "old release cache entries not pruned")
        }
    }
}

/// The release's contract against the core provider's, and a contract-changing core upgrade
/// against running providers. Passing both sets PreflightCheckPassed.
fn contract_phase<P>(
    s: &mut State<'_, P>,
    core: Option<&AnyProvider>,
    all: &[AnyProvider],
    f: &Fetched,
) -> Phase {
    if let Some(core) = core
        && let Err(f) = preflight::check_contract(core, &f.contract)
    {
        return end(preflight_failed(f));
    }
    if s.p.provider_type == ProviderType::Core {
        let running = plan::running_providers(all);
        if let Some(message) =
            plan::contract_change_blocker(s.status, &f.version, &f.contract, &running)
        {
            return end(problem(
                PREFLIGHT_CHECK_PASSED,
                reason::CONTRACT_CHANGE_NEEDS_PAUSE,
                message,
            ));
        }
    }
    conditions::set(
        &mut s.status.conditions,
        &Desired::ok(PREFLIGHT_CHECK_PASSED, reason::PASSED, ""),
        s.p.metadata.generation,
    );
    ControlFlow::Continue(())
}

/// Whether the provider is paused: asked for, or kept because unpausing now would run
/// providers of different contracts side by side. `Some` holds the Paused condition.
fn pause_plan<P>(
    s: &State<'_, P>,
    core: Option<&AnyProvider>,
    all: &[AnyProvider],
    contract: &str,
) -> Option<Desired> {
    let p = s.p;
    let was_paused = s.ctx.world.deployments_of(p).iter().any(|d| {
        d.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ORIGINAL_REPLICAS_ANNOTATION))
    });
    let core_contract = if p.provider_type == ProviderType::Core {
        Some(contract.to_string())
    } else {
        core.and_then(|c| c.status.as_ref())
            .and_then(|s| s.contract.clone())
    };
    let disagreeing = plan::disagreeing_contracts(p, all, core_contract.as_deref(), contract);
    plan::pause_condition(
        p.spec.paused,
        was_paused,
        core_contract.as_deref(),
        &disagreeing,
    )
}

/// What the render phase hands on: the objects to apply and what the report says of them.
struct Render {
    /// Finalized objects, as applied.
    objects: Vec<Value>,
    /// Objects the release renders to (a paused provider applies only some of them).
    count: usize,
    /// The ContractVerified condition, from the rendered objects.
    verified: Desired,
    /// clusterctl's inventory entry (when the operator keeps the inventory).
    entry: Option<Value>,
    /// Deployments rolled because content they read changed.
    rolled: Vec<rotation::Rolled>,
}

/// Renders on a blocking thread: a large release takes long enough (a quarter of a second for
/// one 16 times the core release) to delay lease renewal and watch handling on the operator's
/// one event-loop thread.
async fn render_off_the_event_loop(
    p: &AnyProvider,
    release: &Release,
    vars: &BTreeMap<String, String>,
    extras: render::RenderExtras,
) -> Result<render::Rendered, render::RenderError> {
    let (p, release, vars) = (p.clone(), release.clone(), vars.clone());
    let job = tokio::task::spawn_blocking(move || {
        render::render_with(&p, &release, |k| vars.get(k).cloned(), &extras)
    });
    match job.await {
        Ok(r) => r,
        // Only a panic inside the render gets here; report it as a failed render.
        Err(e) => Err(render::RenderError::Stopped(e.to_string())),
    }
}

/// Renders the release with the provider's settings and finalizes the objects to apply.
async fn render_phase<P>(
    s: &mut State<'_, P>,
    f: &Fetched,
    vars: &BTreeMap<String, String>,
    paused: bool,
) -> Phase<Render> {
    let mirror = image_mirror(s.ctx)?;
    let additional = read_additional_manifests(s.ctx, s.p).await?;
    let extras = render::RenderExtras {
        additional_manifests: additional,
        mirror,
        limits: f.limits,
    };
    let rendered = match render_off_the_event_loop(s.p, &f.release, vars, extras).await {
        Ok(r) => r,
        Err(e) if e.reason() == reason::MISSING_VARIABLES => {
            let message = format!("{e}; {}", found::variables_note(s.p, vars));
            return end(problem(PROVIDER_INSTALLED, e.reason(), message));
        }
        Err(e) => return end(Outcome::failed(PROVIDER_INSTALLED, e)),
    };
    conditions::set(
        &mut s.status.conditions,
        &readiness::manager_configured(&rendered.managers),
        s.p.metadata.generation,
    );
    for r in &rendered.managers {
        for finding in &r.findings {
            debug!(provider = %provider_key(s.p), deployment = %r.deployment, field = %finding.field, problem = %finding.problem, "manager setting without effect");
        }
    }
    let verified = contract_verified(s.p, &f.contract, &rendered.objects);
    let count = rendered.objects.len();
    let pause = if paused {
        Pause::Paused {
            version_changes: upgrading(s.status, &f.version),
        }
    } else {
        Pause::Running
    };
    let mut objects = rendered.objects;
    // Before finalizing, which keeps only the Deployments of a paused provider. Paused, the
    // running hash is kept as for an opt-out: nothing else changes while paused, and at
    // unpause a Deployment whose content changed meanwhile rolls, with its event.
    let rolled = stamp_config_hash(s.ctx, s.p, &mut objects, rotation::enabled(s.p) && !paused);
    finalize(&mut objects, s.p, pause);
    let unowned = capi_cluster_io::installed::unowned_objects(&objects);
    if !unowned.is_empty() {
        let message = list_note(
            "the release holds objects of kinds the operator cannot watch, prune or delete, so nothing of it is applied: ",
            &unowned,
            ", ",
            " (the kinds it owns are listed in docs/operator.md)",
        );
        return end(problem(PROVIDER_INSTALLED, reason::UNOWNED_KIND, message));
    }
    let entry = s
        .ctx
        .inventory
        .then(|| capi_components::inventory::entry(s.p, &f.version));
    ControlFlow::Continue(Render {
        objects,
        count,
        verified,
        entry,
        rolled,
    })
}

/// Stamps the provider's Deployments with the hash of the rendered content they read (see
/// [`rotation`]), given what the running ones carry; `enabled` false keeps what runs.
fn stamp_config_hash(
    ctx: &Ctx,
    p: &AnyProvider,
    objects: &mut [Value],
    enabled: bool,
) -> Vec<rotation::Rolled> {
    let running: BTreeMap<(String, String), rotation::Live> = ctx
        .world
        .deployments_of(p)
        .iter()
        .map(|d| {
            (
                (d.namespace().unwrap_or_default(), d.name_any()),
                rotation::Live::of(d),
            )
        })
        .collect();
    rotation::stamp(objects, enabled, &ctx.opts.config_hash_key, |ns, name| {
        running.get(&(ns.to_string(), name.to_string())).cloned()
    })
}

/// The event of the Deployments that roll because content they read changed, naming the
/// objects that changed (never their content). Asked before applying: the applier then
/// remembers the new objects as applied, and a Deployment it applied already (the index not
/// showing it yet) is not announced twice.
fn rollout_note(ctx: &Ctx, r: &Render) -> Option<Note> {
    let pending = |kind: &str, ns: &str, name: &str| {
        r.objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["namespace"] == ns
                    && o["metadata"]["name"] == name
            })
            .and_then(|o| Some((o, key_of(o).ok()?)))
            .is_some_and(|(o, key)| ctx.applier.needs_apply(o, ctx.world.live(&key).as_ref()))
    };
    let items: Vec<String> = r
        .rolled
        .iter()
        .filter(|d| pending("Deployment", &d.namespace, &d.name))
        .map(|d| {
            let changed: Vec<String> = d
                .sources
                .iter()
                .filter(|src| pending(src.kind.as_str(), &src.namespace, &src.name))
                .map(ToString::to_string)
                .collect();
            let changed = if changed.is_empty() {
                d.sources.iter().map(ToString::to_string).collect()
            } else {
                changed
            };
            format!(
                "Deployment {}/{} ({} changed)",
                d.namespace,
                d.name,
                changed.join(", ")
            )
        })
        .collect();
    (!items.is_empty()).then(|| {
        let note = list_note(
            "rolled so that the managers read the new content: ",
            &items,
            "; ",
            &format!(" (opt out: annotation {ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION}: \"false\")"),
        );
        Note::normal(reason::CONFIG_CHANGE_ROLLED, note)
    })
}

/// Server-side applies the objects; shows, in an event, a release granting broad powers.
async fn apply_phase<P: ProviderKind>(
    s: &mut State<'_, P>,
    objects: &[Value],
    vars: &BTreeMap<String, String>,
) -> Phase<ApplyReport> {
    let report = match s
        .ctx
        .applier
        .apply_all(objects, |k| s.ctx.world.live(k))
        .await
    {
        Ok(r) => r,
        // Redacted before it becomes a condition, an event or a log line.
        Err(e) => {
            let e = e.redacted(&Redactor::new(vars));
            return end(Outcome::failed(PROVIDER_INSTALLED, e));
        }
    };
    if !report.repaired.is_empty() {
        warn!(provider = %provider_key(s.p), objects = ?report.repaired, "restored objects changed outside the operator");
        let note = repaired_note(&report.repaired);
        s.notes.push(Note::warning(reason::DRIFT_REPAIRED, note));
    }
    if report.applied > 0 {
        info!(provider = %provider_key(s.p), applied = report.applied, unchanged = report.unchanged, "applied");
        // Applied as the release says, but shown: an admin should see a release that grants
        // cluster-admin or intercepts everything. Only when something was written, so an idle
        // cluster sees no event.
        let privileged = capi_components::privileged::privileged_objects(objects);
        if !privileged.is_empty() {
            warn!(provider = %provider_key(s.p), objects = ?privileged, "the release holds privileged objects");
            let note = list_note(
                "the release holds privileged objects (applied as released): ",
                &privileged,
                "; ",
                "",
            );
            s.notes
                .push(Note::warning(reason::PRIVILEGED_OBJECTS, note));
        }
    }
    ControlFlow::Continue(report)
}

/// The event text of a drift repair: what was restored and who had changed it.
fn repaired_note(repaired: &[String]) -> String {
    list_note(
        "restored as declared, after changes made outside the operator: ",
        repaired,
        ", ",
        "; change the provider object instead (spec.version, spec.deployment, spec.manager)",
    )
}

/// Deletes what this provider installed before but no longer renders.
async fn prune<P: ProviderKind>(
    s: &mut State<'_, P>,
    objects: &[&Value],
    paused: bool,
    upgrading: bool,
) -> Phase {
    let desired = objects.iter().filter_map(|o| key_of(o).ok()).collect();
    let stale = plan::stale(
        s.ctx.world.installed(s.p),
        &desired,
        |k| k.kind.as_str(),
        paused,
        upgrading,
    );
    if stale.is_empty() {
        return ControlFlow::Continue(());
    }
    match s.ctx.applier.delete_all(&stale).await {
        Ok(0) => ControlFlow::Continue(()),
        Ok(_) => {
            let names: Vec<String> = stale.iter().map(|(k, _, _)| k.to_string()).collect();
            let note = list_note("removed objects no longer rendered: ", &names, ", ", "");
            s.notes.push(Note::normal(reason::PRUNED, note));
            ControlFlow::Continue(())
        }
        Err(e) => end(Outcome::failed(PROVIDER_INSTALLED, e)),
    }
}

/// Keeps the provider's clusterctl inventory entry at the version just applied. Not part of the
/// release: a failure is an event, never a failed install. An entry someone else changed (see
/// [`super::inventory`]) is said to be restored in an event.
async fn record_in_inventory<P: ProviderKind>(
    s: &mut State<'_, P>,
    entry: &Value,
    version: &str,
    changes_version: bool,
) {
    let Ok(key) = key_of(entry) else { return };
    if !s
        .ctx
        .applier
        .needs_apply(entry, s.ctx.world.live(&key).as_ref())
    {
        return;
    }
    let found = super::inventory::recorded_version(&s.ctx.client, entry)
        .await
        .ok()
        .flatten();
    let applied = s
        .ctx
        .applier
        .apply_all(std::slice::from_ref(entry), |k| s.ctx.world.live(k))
        .await;
    if let Err(e) = applied {
        warn!(provider = %provider_key(s.p), error = %e, "clusterctl inventory entry not written");
        let note = format!("clusterctl's inventory entry {key} was not written: {e}");
        s.notes
            .push(Note::warning(reason::INVENTORY_NOT_WRITTEN, note));
        return;
    }
    if let Some(found) = found.filter(|f| f != version && !changes_version) {
        let entry = format!("{}/{}", key.namespace, key.name);
        warn!(provider = %provider_key(s.p), %found, %version, "clusterctl changed the provider; declared state restored");
        let note = super::inventory::reverted_note(&entry, &found, version);
        s.notes
            .push(Note::warning(reason::CLUSTERCTL_CHANGE_REVERTED, note));
    }
}

/// Installed, upgraded, contract-verified, paused and ready conditions.
async fn report<P: ProviderKind>(
    s: &mut State<'_, P>,
    f: &Fetched,
    rendered: Render,
    applied: ApplyReport,
    paused: Option<Desired>,
) {
    let generation = s.p.metadata.generation;
    let version = f.version.as_str();
    let changed_version = upgrading(s.status, version);
    // A first install is announced by ProviderInstalled turning True; a version change after
    // it leaves that condition True, so it gets an event of its own.
    let first_install = s.status.installed_version.is_none();
    if let Some(old) = s.status.installed_version.clone()
        && changed_version
    {
        let upgraded = Desired::ok(
            PROVIDER_UPGRADED,
            reason::UPGRADED,
            format!("upgraded from {old} to {version}"),
        );
        conditions::set(&mut s.status.conditions, &upgraded, generation);
    }
    s.status.installed_version = Some(version.to_string());
    s.status.contract = Some(f.contract.clone());
    let installed = Desired::ok(
        PROVIDER_INSTALLED,
        reason::INSTALLED,
        format!("{version} installed ({} objects)", rendered.count),
    );
    conditions::set(&mut s.status.conditions, &installed, generation);
    conditions::set(&mut s.status.conditions, &rendered.verified, generation);
    if changed_version && !first_install && applied.applied > 0 {
        let note = format!("{version} applied");
        s.notes.push(Note::normal(reason::VERSION_INSTALLED, note));
    }
    let ready = match &paused {
        Some(d) => {
            conditions::set(&mut s.status.conditions, d, generation);
            Desired::failed(READY, reason::PAUSED, "the provider is paused")
        }
        None => {
            if s.status.condition(PAUSED).is_some() {
                let unpaused = Desired::failed(
                    PAUSED,
                    reason::NOT_PAUSED,
                    "Deployments run with their original replicas",
                );
                conditions::set(&mut s.status.conditions, &unpaused, generation);
            }
            readiness(s.ctx, s.p).await
        }
    };
    conditions::set(&mut s.status.conditions, &ready, generation);
}

/// The same checks as `kubectl capi-providers verify`, on what was rendered.
fn contract_verified(p: &AnyProvider, contract: &str, objects: &[Value]) -> Desired {
    readiness::contract_verified(&release_contract::verify(
        p.provider_type,
        Some(contract),
        objects,
    ))
}

async fn read_variables(ctx: &Ctx, p: &AnyProvider) -> Phase<BTreeMap<String, String>> {
    match provider_inputs::variables(&ctx.client, p).await {
        Ok(Variables::Found(vars)) => ControlFlow::Continue(vars),
        Ok(Variables::Missing { namespace, name }) => {
            let found = found::names_in::<Secret>(&ctx.client, p, &namespace).await;
            end(problem(
                PROVIDER_INSTALLED,
                reason::SECRET_NOT_FOUND,
                format!("Secret {namespace}/{name} (spec.configSecret) does not exist; {found}"),
            ))
        }
        Err(e) => {
            let ns = p.spec.secret_namespace.as_deref().unwrap_or(p.namespace());
            let name = p.spec.secret_name.as_deref().unwrap_or_default();
            let message = format!("reading Secret {ns}/{name}: {e}");
            end(Outcome::transient(
                e,
                PROVIDER_INSTALLED,
                reason::SECRET_NOT_FOUND,
                message,
            ))
        }
    }
}

/// The operator-wide image mirror; a malformed setting stops the install before anything is
/// applied, so what is installed keeps running with the images it has.
fn image_mirror(ctx: &Ctx) -> Phase<capi_components::mirror::ImageMirror> {
    match ctx.mirror.current() {
        Some(Ok(m)) => ControlFlow::Continue(m),
        Some(Err(message)) => end(problem(
            PROVIDER_INSTALLED,
            reason::IMAGE_MIRROR_INVALID,
            format!("{message}; fix it, and every provider is rendered again"),
        )),
        // The controllers start once the ConfigMap is listed; this is only a safeguard.
        None => end(problem(
            PROVIDER_INSTALLED,
            reason::IMAGE_MIRROR_INVALID,
            "the image mirror ConfigMap has not been read yet",
        )),
    }
}

async fn read_additional_manifests(ctx: &Ctx, p: &AnyProvider) -> Phase<Option<String>> {
    let missing = |message: String| {
        end(problem(
            PROVIDER_INSTALLED,
            reason::ADDITIONAL_MANIFESTS,
            message,
        ))
    };
    match provider_inputs::additional_manifests(&ctx.client, p).await {
        Ok(Manifests::NotNamed) => ControlFlow::Continue(None),
        Ok(Manifests::Found(text)) => ControlFlow::Continue(Some(text)),
        Ok(Manifests::NoKey {
            namespace,
            name,
            keys,
        }) => missing(format!(
            "ConfigMap {namespace}/{name} has no key \"manifests\"; {}",
            found::keys_note(keys.iter())
        )),
        Ok(Manifests::Missing { namespace, name }) => missing(format!(
            "ConfigMap {namespace}/{name} (spec.additionalManifests) does not exist; {}",
            found::names_in::<ConfigMap>(&ctx.client, p, &namespace).await
        )),
        Err(e) => {
            let r = p.spec.additional_manifests.as_ref();
            let ns = r
                .and_then(|r| r.namespace.as_deref())
                .unwrap_or(p.namespace());
            let name = r.map(|r| r.name.as_str()).unwrap_or_default();
            let message = format!("reading ConfigMap {ns}/{name}: {e}");
            end(Outcome::transient(
                e,
                PROVIDER_INSTALLED,
                reason::ADDITIONAL_MANIFESTS,
                message,
            ))
        }
    }
}

/// Ready from the provider's Deployments: every one Available and rolled out. For one that is
/// not, its Pods tell a crash loop or an unpullable image from a rollout in progress.
pub(super) async fn readiness(ctx: &Ctx, p: &AnyProvider) -> Desired {
    let deployments = ctx.world.deployments_of(p);
    if deployments.is_empty() {
        return Desired::failed(
            READY,
            reason::NO_DEPLOYMENT,
            "no Deployment of the provider exists (yet)",
        );
    }
    let mut names: Vec<&str> = Vec::new();
    for d in &deployments {
        if let Err(why) = applied_seen(ctx, d).and_then(|()| readiness::availability(d)) {
            let pods = pods_of(ctx, d).await;
            return readiness::not_ready(d, &why, &pods);
        }
        names.push(d.metadata.name.as_deref().unwrap_or(""));
    }
    names.sort();
    Desired::ok(
        READY,
        reason::AVAILABLE,
        format!("available: {}", names.join(", ")),
    )
}

/// Whether the cached Deployment `d` shows this process's last apply of it. A pass that just
/// changed it reads the cache before the watch brings the new generation: the old, Available
/// copy would report Ready for a rollout that has not started.
fn applied_seen(ctx: &Ctx, d: &Deployment) -> Result<(), String> {
    let key = ObjKey {
        group: "apps".into(),
        kind: "Deployment".into(),
        namespace: d.namespace().unwrap_or_default(),
        name: d.name_any(),
    };
    match ctx.applier.applied_generation(&key) {
        Some(g) if g > d.metadata.generation.unwrap_or(0) => {
            Err("rollout in progress: the spec just applied is not observed yet".into())
        }
        _ => Ok(()),
    }
}

/// The Pods of Deployment `d` by its selector; none when they cannot be read (Ready then says
/// only that the Deployment is not available, which is still true).
async fn pods_of(ctx: &Ctx, d: &Deployment) -> Vec<Pod> {
    let Some(selector) = d.spec.as_ref().map(|s| s.selector.clone()) else {
        return Vec::new();
    };
    let selector = match kube::core::Selector::try_from(selector) {
        Ok(s) if !s.selects_all() => s,
        _ => return Vec::new(),
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &d.namespace().unwrap_or_default());
    match api
        // From the apiserver's watch cache without waiting for it to be confirmed fresh: this
        // only explains a readiness already observed, and a consistent list can wait ~100 ms.
        .list(&ListParams::default().labels_from(&selector).match_any())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            debug!(deployment = %d.name_any(), error = %e, "pods not listed");
            Vec::new()
        }
    }
}
