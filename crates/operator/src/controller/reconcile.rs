//! The generic reconciler every provider kind runs: preflight checks, version resolution,
//! fetch (through the in-cluster release cache), render, server-side apply, prune, and status.
//!
//! Two classes of failure, as in Gardener's ConfigValidator: configuration problems (bad
//! version, missing variables, unknown release, contract mismatch, invalid YAML) set a condition
//! and wait for a change, with only a slow periodic retry; transient ones (network, 5xx, API
//! conflicts) are returned as errors and retried with exponential backoff.

use std::{sync::Arc, time::Duration};

use capi_operator_api::{
    AnyProvider, DeletionPolicy, FINALIZER, MANAGED_BY_ANNOTATION, ProviderApi, ProviderStatus,
    ProviderType,
    conditions::{PREFLIGHT_CHECK_PASSED, SPEC_TRANSLATED},
    v1alpha2::ConversionError,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PartialObjectMeta, Patch},
    runtime::controller::Action,
};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{
    context::{Ctx, provider_key},
    install,
    outcome::{Error, Outcome, problem},
    purge,
    report::{self, Subject, merge_params},
};
use capi_cluster_io::{
    ObjKey,
    provider_kind::{self, ProviderKind},
};
use capi_decide::{
    Note,
    conditions::{self, Desired},
    deletion::{self, Step},
    kstatus, preflight, readiness, reason,
    settle::{self as decided, backoff_delay, jitter_sample},
};

/// Reconciles one provider object, recording the reconcile in the metrics.
pub async fn reconcile<P: ProviderKind>(obj: Arc<P>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    // A new provider may read Secrets or ConfigMaps in a namespace not watched yet.
    ctx.inputs.sync(&ctx.client, ctx.world.index());
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
                .map(std::string::ToString::to_string)
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

async fn reconcile_once<P: ProviderKind>(
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
    if provider_kind::held_by_cluster_api_operator(&p) {
        debug!(provider = %provider_key(&p), "cluster-api-operator's finalizer is on it; left alone until the handover");
        return Ok(Action::await_change());
    }
    let api: Api<P> = Api::namespaced(ctx.client.clone(), p.namespace());
    let s = Subject {
        obj: obj.as_ref(),
        p: &p,
        api: &api,
    };
    if p.metadata.deletion_timestamp.is_some() {
        return delete(&s, &ctx).await;
    }
    if !has_finalizer(&p) {
        add_finalizer(&api, &p).await?;
        return Ok(Action::await_change());
    }
    install_and_report(&s, translated, &ctx).await
}

fn has_finalizer(p: &AnyProvider) -> bool {
    p.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

async fn add_finalizer<P: ProviderKind>(api: &Api<P>, p: &AnyProvider) -> Result<(), kube::Error> {
    let mut finalizers = p.metadata.finalizers.clone().unwrap_or_default();
    finalizers.push(FINALIZER.to_string());
    write_finalizers(api, p, finalizers).await
}

/// Writes `finalizers`; the resourceVersion makes it a compare-and-swap, so a concurrent
/// finalizer change gives a conflict and a retry rather than a lost entry.
async fn write_finalizers<P: ProviderKind>(
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
async fn install_and_report<P: ProviderKind>(
    s: &Subject<'_, P>,
    translated: Result<Vec<String>, ConversionError>,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let p = s.p;
    let key = provider_key(p);
    if ctx
        .rechecks
        .due(&key, readiness::seen(&p.metadata), ctx.opts.resync)
    {
        return recheck(s, ctx, &key).await;
    }
    let old = p.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let mut notes = Vec::new();
    let outcome = match translated {
        Err(e) => problem(SPEC_TRANSLATED, reason::UNSUPPORTED_SETTING, e.to_string()),
        Ok(ignored) => {
            if p.api == ProviderApi::ClusterApiOperator {
                let translation = decided::translation(&ignored);
                conditions::set(&mut status.conditions, &translation, p.metadata.generation);
            }
            install::install(&mut install::State {
                provider: p,
                ctx,
                api: s.api,
                status: &mut status,
                notes: &mut notes,
            })
            .await
        }
    };
    if let Outcome::VersionWritten = outcome {
        report::digests(s, ctx, &old, status, notes).await?;
        return Ok(Action::await_change());
    }
    let ended = match &outcome {
        Outcome::Problem(pb) => Some((false, pb.reason, pb.message.clone())),
        Outcome::Transient(_, pb) => Some((true, pb.reason, pb.message.clone())),
        Outcome::Done | Outcome::VersionWritten => None,
    };
    let (action, err) = settle(outcome, &mut status, p, ctx);
    // With the status write: whoever reads Ready reads a process that gave back the heap its
    // install passes freed (the debounced trim comes 250 ms after the last pass, often later).
    if status.is_true(capi_operator_api::conditions::READY)
        && !old.is_true(capi_operator_api::conditions::READY)
    {
        crate::memory::ready();
    }
    let ended = match &ended {
        None => kstatus::Ended::Installed,
        Some((false, r, m)) => kstatus::Ended::Problem(r, m),
        Some((true, r, m)) => kstatus::Ended::Retrying(r, m),
    };
    report::status(s, ctx, (old, status), ended, notes).await?;
    match err {
        Some(e) => Err(e),
        None => Ok(action),
    }
}

/// A readiness-only look at an installed provider that was not Ready (see
/// [`readiness::Rechecks`]): its Deployments from the cache and, for one not available, its
/// Pods. The next look backs off while nothing changes; Ready, or a state rechecks do not
/// follow, ends them (the latter with a full pass at once).
async fn recheck<P: ProviderKind>(
    s: &Subject<'_, P>,
    ctx: &Ctx,
    key: &str,
) -> Result<Action, Error> {
    let p = s.p;
    let old = p.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let ready = install::readiness::ready_condition(ctx, p).await;
    conditions::set(&mut status.conditions, &ready, p.metadata.generation);
    let after = if ready.ok {
        ctx.rechecks.disarm(key);
        decided::healthy_requeue(&status, ctx.opts.resync, ctx.opts.config_retry)
    } else if decided::unready_rechecked(&status) {
        ctx.rechecks.again(key).min(ctx.opts.resync)
    } else {
        ctx.rechecks.disarm(key);
        Duration::ZERO
    };
    debug!(provider = %key, ready = ready.ok, reason = %ready.reason, ?after, "readiness rechecked");
    let ended = kstatus::Ended::Installed;
    report::status(s, ctx, (old, status), ended, Vec::new()).await?;
    Ok(Action::requeue(after))
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
            let mut after =
                decided::healthy_requeue(status, ctx.opts.resync, ctx.opts.config_retry);
            if decided::unready_rechecked(status) {
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
            // Counted in the metrics by error_policy, which every returned error reaches.
            warn!(provider = %provider_key(p), error = %e, "temporary failure; retrying with backoff");
            let failed = Desired::failed(pb.condition, pb.reason, pb.message);
            conditions::set(&mut status.conditions, &failed, generation);
            return (Action::await_change(), Some(e));
        }
    };
    ctx.opts.metrics.failed(p.provider_type.kind(), pb.reason);
    if pb.condition == PREFLIGHT_CHECK_PASSED {
        decided::mark_not_installed_unless_installed(status, generation);
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

/// Backoff for transient failures (see [`backoff_delay`]); the failure is reported by its
/// reason (see [`report::failure`]).
pub fn error_policy<P: ProviderKind>(obj: Arc<P>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let key = provider_key(&obj.view().0);
    report::failure(obj, ctx.clone(), err);
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
        .any(|q| !preflight::same(q, p) && q.metadata.deletion_timestamp.is_none());
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

/// Deletion, one step per pass as [`deletion::next`] decides from the provider's
/// deletionPolicy and what is left: wait while something blocks it, remove the installed
/// components, under Purge the CRDs and the namespace, then release the finalizer (at once
/// under Orphan).
async fn delete<P: ProviderKind>(s: &Subject<'_, P>, ctx: &Ctx) -> Result<Action, Error> {
    let p = s.p;
    if !has_finalizer(p) {
        return Ok(Action::await_change());
    }
    let policy = p.spec.deletion_policy;
    let blockers = if deletion::looks_for_blockers(policy) {
        deletion_blockers(ctx, p).await?
    } else {
        Vec::new()
    };
    let installed = ctx.world.installed(p);
    let of_kind = |kind: &str| -> Vec<_> {
        installed
            .iter()
            .filter(|(k, _, _)| k.kind == kind)
            .cloned()
            .collect()
    };
    let (crds, namespaces) = (of_kind("CustomResourceDefinition"), of_kind("Namespace"));
    let components: Vec<_> = installed
        .iter()
        .filter(|(k, _, _)| k.kind != "CustomResourceDefinition" && k.kind != "Namespace")
        .cloned()
        .collect();
    let crd_names: Vec<String> = crds.iter().map(|(k, _, _)| k.name.clone()).collect();
    let mut facts = deletion::Facts {
        policy,
        blockers: &blockers,
        components: components.len(),
        crds: &crd_names,
        namespace: namespaces.first().map(|(k, _, _)| k.name.as_str()),
        foreign: None,
        shared: &[],
    };
    let look = match deletion::must_look(&facts) {
        Some(ns) => Some(purge::look_into(ctx, p, ns).await?),
        None => None,
    };
    if let Some(look) = &look {
        facts.foreign = Some(&look.foreign);
        facts.shared = &look.shared;
    }
    let step = deletion::next(p, &facts);
    if policy == DeletionPolicy::Purge && !matches!(step, Step::Purge { .. }) {
        // A guard a stopped pass left behind (see purge::guard) must not refuse users' objects.
        purge::unguard(ctx, p).await?;
    }
    match step {
        Step::Orphan(note) => {
            report::notes(s.obj, ctx, vec![note]).await;
            finish(s, ctx).await
        }
        Step::Wait(waiting) => {
            report::deletion(s, ctx, waiting).await?;
            // Workload clusters and the namespace's objects are not watched: look again, less
            // often while they stay.
            Ok(Action::requeue(ctx.rechecks.blocked(&provider_key(p))))
        }
        Step::Remove(deleting) => {
            report::deletion(s, ctx, deleting).await?;
            remove(ctx, &components).await?;
            // The caches report the deletions; the watch events bring the next pass.
            Ok(Action::requeue(Duration::from_secs(5)))
        }
        Step::Purge { note, .. } => purge(s, ctx, &crds, &namespaces, note).await,
        Step::Release => {
            // A kind served since the last CRD event (cert-manager installed a moment ago) may
            // hold objects of this provider the caches have not listed yet.
            if !ctx.world.owned.current().await {
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
            finish(s, ctx).await
        }
    }
}

/// Purge's last step: the CRDs (guarded, see [`purge_crds`]) before the namespace, so that a
/// pass stopped in between finds the namespace alone and goes on; then the finalizer.
async fn purge<P: ProviderKind>(
    s: &Subject<'_, P>,
    ctx: &Ctx,
    crds: &[(ObjKey, ApiResource, bool)],
    namespaces: &[(ObjKey, ApiResource, bool)],
    note: Note,
) -> Result<Action, Error> {
    let p = s.p;
    if !ctx.world.owned.current().await {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    if !crds.is_empty() {
        // New custom resources refused, the last look, the CRDs; the guard goes whatever
        // happened (a crash leaves it to the next pass or the next start).
        let removed = match purge::guard(ctx, p, crds).await {
            Ok(true) => purge_crds(s, ctx, crds).await,
            Ok(false) => Ok(Some(Action::requeue(Duration::from_secs(2)))),
            Err(e) => Err(e.into()),
        };
        purge::unguard(ctx, p).await?;
        if let Some(wait) = removed? {
            return Ok(wait);
        }
    }
    remove(ctx, namespaces).await?;
    info!(provider = %provider_key(p), "{}", note.message);
    report::notes(s.obj, ctx, vec![note]).await;
    finish(s, ctx).await
}

/// The last look for custom resources, new ones refused by the guard, then the CRDs: `Some`
/// (the wait) when the look found some, reported as [`deletion::rechecked`] says.
async fn purge_crds<P: ProviderKind>(
    s: &Subject<'_, P>,
    ctx: &Ctx,
    crds: &[(ObjKey, ApiResource, bool)],
) -> Result<Option<Action>, Error> {
    let p = s.p;
    let left = deletion_blockers(ctx, p).await?;
    if let Some(blocked) = deletion::rechecked(&left) {
        warn!(provider = %provider_key(p), "{}", blocked.message);
        report::deletion(s, ctx, blocked).await?;
        return Ok(Some(Action::requeue(
            ctx.rechecks.blocked(&provider_key(p)),
        )));
    }
    remove(ctx, crds).await?;
    Ok(None)
}

async fn remove(ctx: &Ctx, objects: &[(ObjKey, ApiResource, bool)]) -> Result<(), Error> {
    ctx.applier
        .delete_all(objects)
        .await
        .map_err(Error::reasoned)?;
    Ok(())
}

/// Releases the finalizer and forgets the provider.
async fn finish<P: ProviderKind>(s: &Subject<'_, P>, ctx: &Ctx) -> Result<Action, Error> {
    let p = s.p;
    release_finalizer(s.api, p).await?;
    ctx.rechecks.disarm(&provider_key(p));
    ctx.rechecks.unblocked(&provider_key(p));
    ctx.written.forget(&provider_key(p));
    ctx.recorder.forget(&s.obj.object_ref(&()));
    info!(provider = %provider_key(p), policy = %p.spec.deletion_policy, "finalizer released");
    ctx.opts
        .metrics
        .forget(p.provider_type.kind(), p.namespace(), p.name());
    Ok(Action::await_change())
}

/// Removes the operator's finalizer and only it.
async fn release_finalizer<P: ProviderKind>(
    api: &Api<P>,
    p: &AnyProvider,
) -> Result<(), kube::Error> {
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
