//! The fetch phase: the release through the in-cluster cache (or taken over, or fetched), its
//! contract, all within the memory budget.

use std::ops::ControlFlow;
use std::sync::Arc;

use capi_cluster_io::provider_kind::ProviderKind;
use capi_components::metadata::Metadata;
use capi_decide::settle::backoff_delay;
use capi_decide::{Note, plan, reason};
use capi_operator_api::conditions::{PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED};
use capi_release::Release;
use capi_release_sources::{SourceError, fetch_release};
use tracing::{debug, info, warn};

use crate::controller::budget::{ReleaseCost, Share};
use crate::controller::context::{Ctx, provider_key};
use crate::controller::outcome::{Outcome, problem};
use crate::controller::source::{self, Chosen, Lookup, ReleaseCache};

use super::{Phase, State, end};

/// The release of one version, with the contract its metadata gives.
pub(super) struct Fetched {
    pub(super) version: String,
    /// Shared with the blocking tasks that count and render it, rather than copied to each.
    pub(super) release: Arc<Release>,
    pub(super) contract: String,
    /// What rendering it may build: what its share of the memory budget was charged for.
    pub(super) limits: capi_components::pipeline::RenderLimits,
    /// The release's share of the memory budget, held until the install pass ends (the
    /// rendered objects live until they are applied).
    pub(super) _memory: Share,
}

/// The release (through the in-cluster cache for remote sources) and its contract, within the
/// memory budget: an estimate is held while fetching, then the release's own cost.
pub(super) async fn release<P: ProviderKind>(
    state: &mut State<'_, P>,
    chosen: &Chosen,
    version: String,
) -> Phase<Fetched> {
    let ctx = state.ctx;
    let budget = &ctx.opts.memory_budget;
    let key = provider_key(state.provider);
    let share = budget.acquire(budget.estimate(&key, &version)).await;
    let release = match cached_fetch(state, chosen, &version).await {
        Ok(r) => Arc::new(r),
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
async fn release_cost(release: &Arc<Release>) -> ReleaseCost {
    // A small release is counted in well under a millisecond: a blocking thread would cost
    // more than it saves (and an await on another thread is a point where the seeded fault
    // tier's paused clock can jump, making a run replay differently).
    if release.components.len() + release.metadata.len() < INLINE_COST_BYTES {
        return ReleaseCost::of(release);
    }
    let owned = Arc::clone(release);
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
    state: &mut State<'_, P>,
    chosen: &Chosen,
    version: &str,
) -> Result<Release, SourceError> {
    let (ctx, p) = (state.ctx, state.provider);
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
    let recorded = state.status.release_digests.get(version).cloned();
    let mut lookup = cache.get(p, version, key, recorded.as_deref()).await?;
    if matches!(lookup, Lookup::Unrecorded)
        && let Some(fresh) = recorded_digest(state, version).await
    {
        lookup = cache.get(p, version, key, Some(&fresh)).await?;
    }
    match lookup {
        Lookup::Hit(r) => return Ok(r),
        Lookup::Mismatch(why) => {
            warn!(provider = %provider_key(p), version, %why, "release cache entry not used");
            let note =
                format!("release {version} fetched again; its cache entry was not used: {why}");
            state
                .notes
                .push(Note::warning(reason::RELEASE_CACHE_MISMATCH, note));
        }
        Lookup::Miss | Lookup::Unrecorded => {}
    }
    if plan::handed_over(p, state.status, version)
        && let Some(r) = cache.take_over_go_release(p, version, key).await?
    {
        info!(provider = %provider_key(p), version, "release taken over from cluster-api-operator's ConfigMap; nothing fetched");
        record_digest(state, &cache, &r).await;
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
    let cached = cache_release(state, &cache, &release, key).await;
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
async fn recorded_digest<P: ProviderKind>(
    state: &mut State<'_, P>,
    version: &str,
) -> Option<String> {
    let fresh = state
        .api
        .get(state.provider.name())
        .await
        .ok()?
        .view()
        .0
        .status?;
    let digest = fresh.release_digests.get(version).cloned()?;
    for (v, d) in fresh.release_digests {
        state.status.release_digests.entry(v).or_insert(d);
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
pub(super) async fn cache_release<P: ProviderKind>(
    state: &mut State<'_, P>,
    cache: &ReleaseCache,
    release: &Release,
    key: &str,
) -> bool {
    let put = cache.put(state.provider, release, key).await;
    if let Err(e) = &put {
        warn!(provider = %provider_key(state.provider), error = %e, "release not cached");
        let note = format!(
            "release {} is not kept in the release cache and will be fetched again when needed: {e}",
            release.version
        );
        state
            .notes
            .push(Note::warning(reason::RELEASE_NOT_CACHED, note));
    }
    record_digest(state, cache, release).await;
    put.is_ok()
}

/// Records the digest of `release` in the status, keeps only the digests (and cache entries)
/// of the installed, previous and current versions.
async fn record_digest<P>(state: &mut State<'_, P>, cache: &ReleaseCache, release: &Release) {
    let digests = &mut state.status.release_digests;
    digests.insert(release.version.clone(), source::release_digest(release));
    let keep: Vec<String> = source::kept_versions(
        digests,
        state.status.installed_version.as_deref(),
        &release.version,
    )
    .into_iter()
    .map(str::to_string)
    .collect();
    digests.retain(|v, _| keep.contains(v));
    let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
    match cache.prune(state.provider, &keep).await {
        Ok(0) => {}
        Ok(n) => {
            debug!(provider = %provider_key(state.provider), pruned = n, "old release cache entries deleted");
        }
        Err(e) => {
            warn!(provider = %provider_key(state.provider), error = %e, "old release cache entries not pruned");
        }
    }
}
