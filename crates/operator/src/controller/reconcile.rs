//! The generic reconciler every provider kind runs: preflight checks, version resolution,
//! fetch (through the in-cluster release cache), render, server-side apply, prune, and status.
//!
//! Two classes of failure, as in Gardener's ConfigValidator: configuration problems (bad
//! version, missing variables, unknown release, contract mismatch, invalid YAML) set a condition
//! and wait for a change, with only a slow periodic retry; transient ones (network, 5xx, API
//! conflicts) are returned as errors and retried with exponential backoff.

use std::{sync::Arc, time::Duration};

use capi_components::render::RenderError;
use capi_operator_api::{
    AnyProvider, FINALIZER, MANAGED_BY_ANNOTATION, ProviderApi, ProviderStatus, ProviderType,
    conditions::{
        DELETING, PAUSED, PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED, READY, RECONCILING,
        SPEC_TRANSLATED, STALLED,
    },
    v1alpha2::ConversionError,
};
use capi_release_sources::SourceError;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, PartialObjectMeta, Patch,
        PatchParams,
    },
    runtime::{
        controller::Action,
        events::{Event, EventType},
    },
};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{
    Ctx, FIELD_MANAGER,
    apply::ApplyError,
    conditions::{self, Desired},
    install, kstatus, provider_key, readiness,
    served::{self, Served},
};

/// The condition and event reasons, kept with the condition types in the API crate.
pub use capi_operator_api::conditions::reason;

/// Ready reasons that a look at the pods may change without any watched object changing.
const UNREADY_RECHECKED: &[&str] = &[
    reason::NOT_AVAILABLE,
    reason::MANAGER_CRASH_LOOPING,
    reason::MANAGER_IMAGE_UNAVAILABLE,
];

/// How soon an installed provider that is not Ready looks at its pods again: pods are not
/// watched (they carry none of the operator's labels), so a crash loop would otherwise be seen
/// only at the next resync. Later looks back off (see [`readiness::Rechecks`]).
const READINESS_RECHECK: Duration = readiness::RECHECK_FIRST;

/// Errors retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// The release source failed temporarily.
    #[error("{0}")]
    Source(#[source] SourceError),
    /// Applying failed temporarily.
    #[error("{0}")]
    Apply(#[source] ApplyError),
    /// A bug: the reconcile panicked. Caught so that one bad provider cannot take the
    /// operator (and every other provider) down; retried with backoff.
    #[error("internal error (panic) while reconciling: {0}")]
    Panic(String),
}

/// A configuration problem: which condition it goes on, its reason and message.
#[derive(Debug)]
pub struct Problem {
    /// The condition that turns False.
    pub condition: &'static str,
    /// Its reason (also the event's reason and the metric label).
    pub reason: &'static str,
    /// Its message.
    pub message: String,
}

/// How a reconcile of an existing provider ends.
pub enum Outcome {
    /// Installed; the status is up to date.
    Done,
    /// spec.version was written; the update brings the next reconcile.
    VersionWritten,
    /// A configuration problem: shown on a condition, retried slowly or on a change.
    Problem(Problem),
    /// A temporary failure, shown on a condition and retried with backoff.
    Transient(Error, Problem),
}

/// A configuration problem on `condition`.
pub fn problem(
    condition: &'static str,
    reason: &'static str,
    message: impl Into<String>,
) -> Outcome {
    Outcome::Problem(Problem {
        condition,
        reason,
        message: message.into(),
    })
}

impl Outcome {
    /// A temporary failure, retried with backoff.
    pub fn transient(
        error: Error,
        condition: &'static str,
        reason: &'static str,
        message: String,
    ) -> Outcome {
        Outcome::Transient(
            error,
            Problem {
                condition,
                reason,
                message,
            },
        )
    }

    /// A release source's failure, on `condition`.
    pub fn from_source(condition: &'static str, e: SourceError) -> Outcome {
        let reason = e.reason();
        if e.is_transient() {
            let message = e.to_string();
            Outcome::transient(Error::Source(e), condition, reason, message)
        } else {
            problem(condition, reason, e.to_string())
        }
    }

    /// A render failure: always a configuration problem of the installation.
    pub fn from_render(e: RenderError) -> Outcome {
        problem(PROVIDER_INSTALLED, e.reason(), e.to_string())
    }

    /// An apply failure of the installation.
    pub fn from_apply(e: ApplyError) -> Outcome {
        let reason = e.reason();
        if e.is_transient() {
            let message = e.to_string();
            Outcome::transient(Error::Apply(e), PROVIDER_INSTALLED, reason, message)
        } else {
            problem(PROVIDER_INSTALLED, reason, e.to_string())
        }
    }
}

/// Reconciles one provider object, recording the reconcile in the metrics.
pub async fn reconcile<P: Served>(obj: Arc<P>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    // A new provider may read Secrets or ConfigMaps in a namespace not watched yet.
    ctx.inputs.sync(&ctx);
    let (p, translated) = obj.view();
    let kind = p.provider_type.kind();
    // Every log line of this reconcile, its phases' included, names the provider.
    let span = tracing::info_span!(
        "reconcile",
        kind,
        namespace = p.namespace(),
        name = p.name()
    );
    let result = match futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
        tracing::Instrument::instrument(reconcile_once(obj, p, translated, ctx.clone()), span),
    ))
    .await
    {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            tracing::error!(kind, panic = %what, "reconcile panicked; retrying with backoff");
            Err(Error::Panic(what))
        }
    };
    ctx.opts
        .metrics
        .reconciled(kind, result.is_ok(), started.elapsed());
    result
}

async fn reconcile_once<P: Served>(
    obj: Arc<P>,
    p: AnyProvider,
    translated: Result<Vec<String>, ConversionError>,
    ctx: Arc<Ctx>,
) -> Result<Action, Error> {
    if p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MANAGED_BY_ANNOTATION))
    {
        debug!(provider = %provider_key(&p), "managed by something else; left alone");
        return Ok(Action::await_change());
    }
    if served::held_by_cluster_api_operator(&p) {
        debug!(provider = %provider_key(&p), "cluster-api-operator's finalizer is on it; left alone until the handover");
        return Ok(Action::await_change());
    }
    let api: Api<P> = Api::namespaced(ctx.client.clone(), p.namespace());
    if p.metadata.deletion_timestamp.is_some() {
        return delete(obj.as_ref(), &p, &api, &ctx).await;
    }
    if !has_finalizer(&p) {
        add_finalizer(&api, &p).await?;
        return Ok(Action::await_change());
    }
    install_and_report(obj.as_ref(), &p, translated, &ctx, &api).await
}

fn has_finalizer(p: &AnyProvider) -> bool {
    p.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

async fn add_finalizer<P: Served>(api: &Api<P>, p: &AnyProvider) -> Result<(), kube::Error> {
    let mut finalizers = p.metadata.finalizers.clone().unwrap_or_default();
    finalizers.push(FINALIZER.to_string());
    write_finalizers(api, p, finalizers).await
}

/// Writes `finalizers`; the resourceVersion makes it a compare-and-swap, so a concurrent
/// finalizer change gives a conflict and a retry rather than a lost entry.
async fn write_finalizers<P: Served>(
    api: &Api<P>,
    p: &AnyProvider,
    finalizers: Vec<String>,
) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": p.metadata.resource_version,
    }});
    api.patch(p.name(), &merge_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Runs the install phases, then writes the status once from their outcome.
async fn install_and_report<P: Served>(
    obj: &P,
    p: &AnyProvider,
    translated: Result<Vec<String>, ConversionError>,
    ctx: &Ctx,
    api: &Api<P>,
) -> Result<Action, Error> {
    let key = provider_key(p);
    if ctx
        .rechecks
        .due(&key, readiness::seen(&p.metadata), ctx.opts.resync)
    {
        return recheck(obj, p, ctx, api, &key).await;
    }
    let old = p.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let outcome = match translated {
        Err(e) => problem(SPEC_TRANSLATED, reason::UNSUPPORTED_SETTING, e.to_string()),
        Ok(ignored) => {
            if p.api == ProviderApi::ClusterApiOperator {
                conditions::set(
                    &mut status.conditions,
                    &translation(&ignored),
                    p.metadata.generation,
                );
            }
            install::install(&mut install::State {
                obj,
                p,
                ctx,
                api,
                status: &mut status,
            })
            .await
        }
    };
    if let Outcome::VersionWritten = outcome {
        // The resolved release was cached: its digest is what lets the next reconcile use it.
        if status.release_digests != old.release_digests {
            let mut digests_only = old.clone();
            digests_only.release_digests = status.release_digests;
            write_status(api, p, &served::shown(p.api, &digests_only)).await?;
        }
        return Ok(Action::await_change());
    }
    let ended = match &outcome {
        Outcome::Problem(pb) => Some((false, pb.reason, pb.message.clone())),
        Outcome::Transient(_, pb) => Some((true, pb.reason, pb.message.clone())),
        Outcome::Done | Outcome::VersionWritten => None,
    };
    let (action, err) = settle(outcome, &mut status, p, ctx);
    let ended = match &ended {
        None => kstatus::Ended::Installed,
        Some((false, r, m)) => kstatus::Ended::Problem(r, m),
        Some((true, r, m)) => kstatus::Ended::Retrying(r, m),
    };
    report_status(obj, p, ctx, api, (old, status), ended).await?;
    match err {
        Some(e) => Err(e),
        None => Ok(action),
    }
}

/// A readiness-only look at an installed provider that was not Ready (see
/// [`readiness::Rechecks`]): its Deployments from the cache and, for one not available, its
/// Pods. The next look backs off while nothing changes; Ready, or a state rechecks do not
/// follow, ends them (the latter with a full pass at once).
async fn recheck<P: Served>(
    obj: &P,
    p: &AnyProvider,
    ctx: &Ctx,
    api: &Api<P>,
    key: &str,
) -> Result<Action, Error> {
    let old = p.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let ready = install::readiness(ctx, p).await;
    conditions::set(&mut status.conditions, &ready, p.metadata.generation);
    let after = if ready.ok {
        ctx.rechecks.disarm(key);
        healthy_requeue(&status, &ctx.opts)
    } else if unready_rechecked(&status) {
        ctx.rechecks.again(key).min(ctx.opts.resync)
    } else {
        ctx.rechecks.disarm(key);
        Duration::ZERO
    };
    debug!(provider = %key, ready = ready.ok, reason = %ready.reason, ?after, "readiness rechecked");
    report_status(obj, p, ctx, api, (old, status), kstatus::Ended::Installed).await?;
    Ok(Action::requeue(after))
}

/// Completes the status of a pass that `ended` so (kstatus, observed generation, metrics),
/// publishes its newsworthy changes and writes it when it differs from the `old` one.
async fn report_status<P: Served>(
    obj: &P,
    p: &AnyProvider,
    ctx: &Ctx,
    api: &Api<P>,
    (old, mut status): (ProviderStatus, ProviderStatus),
    ended: kstatus::Ended<'_>,
) -> Result<(), kube::Error> {
    set_kstatus(&mut status, ended, p);
    status.observed_generation = p.metadata.generation;
    ctx.opts.metrics.provider(
        p.provider_type.kind(),
        p.namespace(),
        p.name(),
        crate::metrics::ProviderState {
            version: status.installed_version.clone().unwrap_or_default(),
            ready: status.condition(READY).is_some_and(|c| c.status == "True"),
            paused: p.spec.paused,
            reason: status
                .condition(READY)
                .map(|c| c.reason.clone())
                .unwrap_or_default(),
            stalled: status
                .condition(STALLED)
                .filter(|c| c.status == "True")
                .map(|c| c.reason.clone()),
        },
    );
    let status = served::shown(p.api, &status);
    publish_transitions(obj, ctx, &old, &status).await;
    if status != old {
        write_status(api, p, &status).await?;
    }
    Ok(())
}

/// SpecTranslated True for a v1alpha2 object whose spec translated, naming what was left out.
fn translation(ignored: &[String]) -> Desired {
    if ignored.is_empty() {
        return Desired::ok(
            SPEC_TRANSLATED,
            reason::TRANSLATED,
            "every setting has its counterpart in this operator",
        );
    }
    Desired::ok(
        SPEC_TRANSLATED,
        reason::SETTINGS_IGNORED,
        format!(
            "left out, as cluster-api-operator ignored them too: {}",
            ignored.join("; ")
        ),
    )
}

/// Sets the kstatus conditions from how the reconcile ended.
/// Sets the kstatus conditions from how the reconcile ended, and the summary `kubectl get`
/// shows from them.
fn set_kstatus(status: &mut ProviderStatus, ended: kstatus::Ended<'_>, p: &AnyProvider) {
    for d in kstatus::conditions(status, ended) {
        conditions::set(&mut status.conditions, &d, p.metadata.generation);
    }
    status.summary = kstatus::summary(p.spec.version.as_deref(), status);
}

/// Puts an outcome on the status and chooses when to look again (a transient failure is
/// returned, for the back-off of [`error_policy`]).
fn settle(
    outcome: Outcome,
    status: &mut ProviderStatus,
    p: &AnyProvider,
    ctx: &Ctx,
) -> (Action, Option<Error>) {
    let generation = p.metadata.generation;
    let pb = match outcome {
        Outcome::Done | Outcome::VersionWritten => {
            let key = provider_key(p);
            if let Ok(mut f) = ctx.failures.lock() {
                f.remove(&key);
            }
            ctx.rechecks.unblocked(&key);
            let mut after = healthy_requeue(status, &ctx.opts);
            if unready_rechecked(status) {
                // The requeue brings a readiness-only recheck (unless a change comes first).
                after = after.min(ctx.rechecks.arm(&key, readiness::seen(&p.metadata)));
            }
            return (Action::requeue(after), None);
        }
        Outcome::Problem(pb) => {
            warn!(provider = %provider_key(p), reason = pb.reason, message = %pb.message, "configuration problem");
            pb
        }
        Outcome::Transient(e, pb) => {
            warn!(provider = %provider_key(p), error = %e, "temporary failure; retrying with backoff");
            ctx.opts.metrics.failed(p.provider_type.kind(), pb.reason);
            let failed = Desired::failed(pb.condition, pb.reason, pb.message);
            conditions::set(&mut status.conditions, &failed, generation);
            return (Action::await_change(), Some(e));
        }
    };
    ctx.opts.metrics.failed(p.provider_type.kind(), pb.reason);
    if pb.condition == PREFLIGHT_CHECK_PASSED {
        mark_not_installed_unless_installed(status, generation);
    }
    // Waiting for the core provider is not a configuration problem. A change of the core
    // provider wakes this one at once, but that event can arrive before the cache this check
    // reads has seen it; a short re-check closes that gap, backing off while the wait lasts.
    let after = if pb.reason == reason::WAITING_FOR_CORE {
        ctx.opts
            .config_retry
            .min(ctx.rechecks.blocked(&provider_key(p)))
    } else {
        ctx.rechecks.unblocked(&provider_key(p));
        ctx.opts.config_retry
    };
    let failed = Desired::failed(pb.condition, pb.reason, pb.message);
    conditions::set(&mut status.conditions, &failed, generation);
    (Action::requeue(after), None)
}

/// When an installed provider is looked at again: soon while its pods may change its
/// readiness, at the configuration retry while an unpause is refused (it depends on other
/// providers' upgrades), at the resync otherwise.
fn healthy_requeue(status: &ProviderStatus, opts: &super::Options) -> Duration {
    let refused = status
        .condition(PAUSED)
        .is_some_and(|c| c.reason == reason::UNPAUSE_REFUSED);
    if unready_rechecked(status) {
        READINESS_RECHECK.min(opts.resync)
    } else if refused {
        opts.config_retry
    } else {
        opts.resync
    }
}

/// Whether the provider is not Ready for a reason a look at its pods may change.
fn unready_rechecked(status: &ProviderStatus) -> bool {
    status
        .condition(READY)
        .is_some_and(|c| c.status != "True" && UNREADY_RECHECKED.contains(&c.reason.as_str()))
}

// Before the first install a failed preflight also means "not installed"; once installed, the
// install condition keeps describing what runs.
fn mark_not_installed_unless_installed(status: &mut ProviderStatus, generation: Option<i64>) {
    if status.installed_version.is_none() && status.condition(PROVIDER_INSTALLED).is_none() {
        conditions::set(
            &mut status.conditions,
            &Desired::failed(
                PROVIDER_INSTALLED,
                reason::PREFLIGHT_CHECK_FAILED,
                "waiting for the preflight checks to pass",
            ),
            generation,
        );
    }
}

/// First delay of the transient-failure back-off.
const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest delay of the transient-failure back-off, jitter included.
const BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Relative spread of the jitter around the doubled delay (±10%).
const BACKOFF_JITTER: f64 = 0.1;

/// Delay before retrying after the `failures`-th consecutive transient failure: 1 s doubling
/// per failure, jittered by ±10% so that providers failing together do not retry in lockstep,
/// and never longer than 5 minutes (at the cap the delay is 270–300 s). `jitter` is a uniform
/// sample from `[0, 1]` (0 gives −10%, 1 gives +10%); keeping it a parameter makes the delay
/// a pure function that tests can pin.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    // 2^9 s already exceeds the cap, so larger exponents need not (and must not, for
    // overflow) be computed.
    let exponent = failures.saturating_sub(1).min(9);
    let doubled = BACKOFF_BASE
        .saturating_mul(1u32 << exponent)
        .min(BACKOFF_CAP);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let factor = 1.0 - BACKOFF_JITTER + 2.0 * BACKOFF_JITTER * jitter;
    doubled.mul_f64(factor).min(BACKOFF_CAP)
}

/// A uniform sample from `[0, 1]` for the back-off jitter. Not cryptographic: the std hasher's
/// per-instance random keys are enough to spread retries, without another dependency.
fn jitter_sample() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    // The top 53 bits fit an f64 mantissa exactly.
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Backoff for transient failures: see [`backoff_delay`].
pub fn error_policy<P: Served>(obj: Arc<P>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let key = provider_key(&obj.view().0);
    let n = ctx
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    let delay = backoff_delay(n, jitter_sample());
    debug!(provider = %key, error = %err, attempt = n, ?delay, "requeue after failure");
    Action::requeue(delay)
}

/// Merge-patch parameters under the operator's field manager.
pub fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

async fn write_status<P: Served>(
    api: &Api<P>,
    p: &AnyProvider,
    status: &ProviderStatus,
) -> Result<(), kube::Error> {
    let body = json!({
        "apiVersion": p.api.api_version(),
        "kind": p.provider_type.kind(),
        "status": status,
    });
    api.patch_status(
        p.name(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

pub use capi_operator_api::note::{NOTE_LIMIT, clip_note, list_note};

/// Publishes an event on the provider object (failures are only logged). A note longer than
/// events.k8s.io accepts is cut (see [`clip_note`]) rather than losing the event.
pub async fn publish<P: Served>(obj: &P, ctx: &Ctx, ok: bool, reason: &str, note: String) {
    let ev = Event {
        type_: if ok {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: reason.to_string(),
        note: Some(clip_note(note)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
        debug!(error = %e, "event not published");
    }
}

// One event per newsworthy condition change (see [`conditions::newsworthy`]): repeated
// reconciles of an unchanged state publish nothing, so an idle cluster sees no event writes.
async fn publish_transitions<P: Served>(
    obj: &P,
    ctx: &Ctx,
    old: &ProviderStatus,
    new: &ProviderStatus,
) {
    // Reconciling and Stalled restate the other conditions for kstatus; their transitions would
    // only repeat an event already published.
    for c in new
        .conditions
        .iter()
        .filter(|c| c.type_ != RECONCILING && c.type_ != STALLED)
    {
        if !conditions::newsworthy(old.condition(&c.type_), c) {
            continue;
        }
        let note = if c.message.is_empty() {
            format!("{} is {}", c.type_, c.status)
        } else {
            c.message.clone()
        };
        publish(obj, ctx, !conditions::warning(c), &c.reason, note).await;
    }
}

/// What keeps a provider from being deleted: for the only core provider, any other provider;
/// for every provider, custom resources of its CRDs (workload clusters using it).
async fn deletion_blockers(ctx: &Ctx, p: &AnyProvider) -> Result<Vec<String>, kube::Error> {
    let mut out = Vec::new();
    // With another core provider left (this one was a refused duplicate, or is replaced), the
    // other providers follow that one.
    let another_core = ctx
        .world
        .providers(ProviderType::Core)
        .iter()
        .any(|q| !super::preflight::same(q, p) && q.metadata.deletion_timestamp.is_none());
    if p.provider_type == ProviderType::Core && !another_core {
        for q in ctx.world.all_providers() {
            if q.provider_type != ProviderType::Core {
                out.push(format!(
                    "{} {}/{}",
                    q.provider_type.kind(),
                    q.namespace(),
                    q.name()
                ));
            }
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    for (k, _, _) in ctx.world.installed(p) {
        if k.kind != "CustomResourceDefinition" {
            continue;
        }
        let Some(crd) = crds.get_opt(&k.name).await? else {
            continue;
        };
        let Some(v) = crd.spec.versions.iter().find(|v| v.served) else {
            continue;
        };
        let gvk = GroupVersionKind::gvk(&crd.spec.group, &v.name, &crd.spec.names.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(ctx.client.clone(), &ar);
        let list = api.list_metadata(&ListParams::default().limit(1)).await?;
        if let Some(o) = list.items.first() {
            let more = if list
                .metadata
                .continue_
                .as_deref()
                .is_some_and(|c| !c.is_empty())
            {
                " and more"
            } else {
                ""
            };
            out.push(format!(
                "{} {}/{}{more}",
                crd.spec.names.kind,
                o.metadata.namespace.as_deref().unwrap_or(""),
                o.metadata.name.as_deref().unwrap_or("")
            ));
        }
    }
    Ok(out)
}

/// Deletion: wait while something blocks it, remove the installed components, then release
/// the finalizer.
async fn delete<P: Served>(
    obj: &P,
    p: &AnyProvider,
    api: &Api<P>,
    ctx: &Ctx,
) -> Result<Action, Error> {
    if !has_finalizer(p) {
        return Ok(Action::await_change());
    }
    let blockers = deletion_blockers(ctx, p).await?;
    if !blockers.is_empty() {
        let message = format!(
            "deletion waits until these are gone: {}",
            blockers.join(", ")
        );
        let blocked = Desired::failed(DELETING, reason::DELETION_BLOCKED, message);
        report_deletion(obj, p, api, ctx, blocked).await?;
        // Workload clusters are not watched: look again, less often while they stay.
        return Ok(Action::requeue(ctx.rechecks.blocked(&provider_key(p))));
    }
    let left: Vec<_> = ctx
        .world
        .installed(p)
        .into_iter()
        .filter(|(k, _, _)| k.kind != "CustomResourceDefinition" && k.kind != "Namespace")
        .collect();
    if !left.is_empty() {
        let message = format!(
            "removing {} installed objects (CRDs and the namespace are kept)",
            left.len()
        );
        let deleting = Desired::ok(DELETING, reason::DELETING, message);
        report_deletion(obj, p, api, ctx, deleting).await?;
        ctx.applier.delete_all(&left).await.map_err(Error::Apply)?;
        // The caches report the deletions; the watch events bring the next pass.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    // A kind served since the last CRD event (cert-manager installed a moment ago) may hold
    // objects of this provider the caches have not listed yet.
    if !ctx.world.owned.current().await {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    release_finalizer(api, p).await?;
    ctx.rechecks.disarm(&provider_key(p));
    ctx.rechecks.unblocked(&provider_key(p));
    info!(provider = %provider_key(p), "components removed; finalizer released");
    ctx.opts
        .metrics
        .forget(p.provider_type.kind(), p.namespace(), p.name());
    Ok(Action::await_change())
}

/// Writes the Deleting condition (and kstatus) when it changed.
async fn report_deletion<P: Served>(
    obj: &P,
    p: &AnyProvider,
    api: &Api<P>,
    ctx: &Ctx,
    deleting: Desired,
) -> Result<(), kube::Error> {
    let old = p.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let generation = p.metadata.generation;
    conditions::set(&mut status.conditions, &deleting, generation);
    let ended = kstatus::Ended::Deleting(&deleting.reason, &deleting.message);
    set_kstatus(&mut status, ended, p);
    let status = served::shown(p.api, &status);
    publish_transitions(obj, ctx, &old, &status).await;
    if status != old {
        write_status(api, p, &status).await?;
    }
    Ok(())
}

/// Removes the operator's finalizer and only it.
async fn release_finalizer<P: Served>(api: &Api<P>, p: &AnyProvider) -> Result<(), kube::Error> {
    let finalizers: Vec<String> = p
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| f.as_str() != FINALIZER)
        .cloned()
        .collect();
    write_finalizers(api, p, finalizers).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_and_caps_at_five_minutes_with_jitter() {
        // (failures, un-jittered delay in seconds)
        let table: &[(u32, f64)] = &[
            (0, 1.0),
            (1, 1.0),
            (2, 2.0),
            (3, 4.0),
            (9, 256.0),
            (10, 300.0),
            (20, 300.0),
            (u32::MAX, 300.0),
        ];
        for &(failures, base) in table {
            let low = backoff_delay(failures, 0.0).as_secs_f64();
            let mid = backoff_delay(failures, 0.5).as_secs_f64();
            let high = backoff_delay(failures, 1.0).as_secs_f64();
            assert!((mid - base).abs() < 1e-6, "{failures}: {mid} != {base}");
            assert!(
                (low - base * 0.9).abs() < 1e-6,
                "{failures}: lowest {low} is not {base} - 10%"
            );
            let expected_high = (base * 1.1).min(300.0);
            assert!(
                (high - expected_high).abs() < 1e-6,
                "{failures}: highest {high} is not {expected_high}"
            );
            assert!(
                high <= 300.0,
                "{failures}: {high} s exceeds the 5 minute cap"
            );
        }
        // The cap is reached, not merely approached.
        assert_eq!(backoff_delay(10, 1.0), Duration::from_secs(300));
        // Out-of-range jitter samples are clamped, never widen the spread.
        assert_eq!(backoff_delay(10, 7.0), Duration::from_secs(300));
        assert_eq!(backoff_delay(1, -3.0), backoff_delay(1, 0.0));
        assert_eq!(backoff_delay(2, f64::NAN), Duration::from_secs(2));
    }

    #[test]
    fn installed_providers_are_looked_at_again_by_what_can_change() {
        use capi_operator_api::conditions::{PAUSED, READY};
        let opts = super::super::Options {
            config_retry: Duration::from_secs(60),
            resync: Duration::from_secs(1800),
            ..Default::default()
        };
        let cond = |type_: &'static str, status: &str, reason: &str| {
            if status == "True" {
                Desired::ok(type_, reason, "")
            } else {
                Desired::failed(type_, reason, "")
            }
        };
        // (conditions, expected delay)
        let cases = [
            (vec![cond(READY, "True", reason::AVAILABLE)], opts.resync),
            (
                vec![cond(READY, "False", reason::MANAGER_CRASH_LOOPING)],
                READINESS_RECHECK,
            ),
            (
                vec![cond(READY, "False", reason::NOT_AVAILABLE)],
                READINESS_RECHECK,
            ),
            (vec![cond(READY, "False", reason::PAUSED)], opts.resync),
            (
                vec![
                    cond(READY, "False", reason::PAUSED),
                    cond(PAUSED, "True", reason::UNPAUSE_REFUSED),
                ],
                opts.config_retry,
            ),
        ];
        for (desired, want) in cases {
            let mut status = ProviderStatus::default();
            for d in &desired {
                conditions::set(&mut status.conditions, d, None);
            }
            assert_eq!(
                healthy_requeue(&status, &opts),
                want,
                "{:?}",
                status.conditions
            );
        }
    }

    #[test]
    fn jitter_samples_are_in_the_unit_interval() {
        for _ in 0..1000 {
            let j = jitter_sample();
            assert!((0.0..=1.0).contains(&j), "{j}");
        }
    }
}
