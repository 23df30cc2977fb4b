//! The generic reconciler every provider kind runs: preflight checks, version resolution,
//! fetch (through the in-cluster release cache), render, server-side apply, prune, and status.
//!
//! Two classes of failure, as in Gardener's ConfigValidator: configuration problems (bad
//! version, missing variables, unknown release, contract mismatch, invalid YAML) set a condition
//! and wait for a change, with only a slow periodic retry; transient ones (network, 5xx, API
//! conflicts) are returned as errors and retried with exponential backoff.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use capi_components::{
    metadata::Metadata,
    pipeline::PipelineError,
    render::{self, RenderError},
};
use capi_operator_api::{
    AnyProvider, FINALIZER, MANAGED_BY_ANNOTATION, ORIGINAL_REPLICAS_ANNOTATION, Provider,
    ProviderStatus, ProviderType,
    conditions::{
        CONTRACT_VERIFIED, DELETING, PAUSED, PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED,
        PROVIDER_UPGRADED, READY,
    },
};
use capi_release_sources::{SourceError, fetch_release};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Pod, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, ResourceExt,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, PartialObjectMeta, Patch,
        PatchParams,
    },
    runtime::{
        controller::Action,
        events::{Event, EventType},
    },
};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::{
    Ctx, FIELD_MANAGER, OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
    apply::{ApplyError, key_of},
    conditions::{self, Desired},
    preflight::{self, Failure},
    provider_key,
    source::{self, Chosen, ReleaseCache},
};

/// Condition reasons beyond the preflight ones.
pub mod reason {
    /// Preflight checks passed.
    pub const PASSED: &str = "PreflightChecksPassed";
    /// fetchConfig cannot be used.
    pub const INVALID_FETCH_CONFIG: &str = "InvalidFetchConfig";
    /// The release could not be fetched (version or file missing, access refused).
    pub const FETCH_FAILED: &str = "ComponentsFetchError";
    /// The source is temporarily unreachable; retried with backoff.
    pub const SOURCE_UNAVAILABLE: &str = "SourceUnavailable";
    /// metadata.yaml is unusable for the version.
    pub const INVALID_METADATA: &str = "InvalidMetadata";
    /// The referenced Secret does not exist.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    /// The referenced additionalManifests ConfigMap does not exist or is unusable.
    pub const ADDITIONAL_MANIFESTS: &str = "AdditionalManifestsError";
    /// Variables the release needs are missing.
    pub const MISSING_VARIABLES: &str = "MissingVariables";
    /// The release could not be rendered (YAML, patches, customization).
    pub const RENDER_FAILED: &str = "ComponentsRenderError";
    /// spec.patches or spec.manifestPatches is malformed or does not apply.
    pub const INVALID_PATCHES: &str = "InvalidPatches";
    /// The apiserver refused an object, or a kind the release needs is not served.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// Applying is being retried after a temporary failure.
    pub const APPLY_RETRYING: &str = "ApplyRetrying";
    /// Components installed.
    pub const INSTALLED: &str = "Installed";
    /// The release passes the provider contract checks.
    pub const CONTRACT_OK: &str = "ContractChecksPassed";
    /// The release deviates from the provider contracts (see the message).
    pub const CONTRACT_FINDINGS: &str = "ContractFindings";
    /// The release holds objects granting broad powers (an event, not a condition).
    pub const PRIVILEGED_OBJECTS: &str = "PrivilegedObjects";
    /// Deletion waits for other providers or custom resources.
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    /// Components are being removed.
    pub const DELETING: &str = "Deleting";
    /// The installed version changed.
    pub const UPGRADED: &str = "Upgraded";
    /// A contract-changing upgrade of the core provider while some provider runs.
    pub const CONTRACT_CHANGE_NEEDS_PAUSE: &str = "ContractChangeRequiresPause";
    /// The provider is paused.
    pub const PAUSED: &str = "Paused";
    /// The provider is not paused (any more).
    pub const NOT_PAUSED: &str = "NotPaused";
    /// Unpausing is refused while contracts disagree.
    pub const UNPAUSE_REFUSED: &str = "UnpauseRefused";
    /// Every Deployment of the provider is available.
    pub const AVAILABLE: &str = "DeploymentsAvailable";
    /// Some Deployment is not available yet.
    pub const NOT_AVAILABLE: &str = "DeploymentsNotAvailable";
    /// The release has no Deployment to watch.
    pub const NO_DEPLOYMENT: &str = "NoDeployment";
    /// A manager container of the provider keeps exiting (Ready False; the message holds the
    /// pod, container, restart count and the end of its log).
    pub const MANAGER_CRASH_LOOPING: &str = "ManagerCrashLooping";
    /// A manager image cannot be pulled (Ready False).
    pub const MANAGER_IMAGE_UNAVAILABLE: &str = "ManagerImageUnavailable";
    /// Every spec.manager setting reached a flag of the manager (ManagerConfigured True).
    pub const MANAGER_SETTINGS_APPLIED: &str = "ManagerSettingsApplied";
    /// Some spec.manager settings have no effect on the provider's manager.
    pub const MANAGER_SETTINGS_IGNORED: &str = "ManagerSettingsIgnored";
    /// A flag or feature gate given explicitly is unknown to the manager's binary, which
    /// would refuse to start.
    pub const MANAGER_FLAGS_REJECTED: &str = "ManagerFlagsRejected";
}

/// Ready reasons that a look at the pods may change without any watched object changing.
const UNREADY_RECHECKED: &[&str] = &[
    reason::NOT_AVAILABLE,
    reason::MANAGER_CRASH_LOOPING,
    reason::MANAGER_IMAGE_UNAVAILABLE,
];

/// How soon an installed provider that is not Ready looks at its pods again: pods are not
/// watched (they carry none of the operator's labels), so a crash loop would otherwise be seen
/// only at the next resync.
const READINESS_RECHECK: Duration = Duration::from_secs(5);

/// Errors retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// The release source failed temporarily.
    #[error("{0}")]
    Source(SourceError),
    /// Applying failed temporarily.
    #[error("{0}")]
    Apply(ApplyError),
    /// A bug: the reconcile panicked. Caught so that one bad provider cannot take the
    /// operator (and every other provider) down; retried with backoff.
    #[error("internal error (panic) while reconciling: {0}")]
    Panic(String),
}

/// A configuration problem: which condition it goes on, its reason and message.
#[derive(Debug)]
struct Problem {
    condition: &'static str,
    reason: &'static str,
    message: String,
}

enum Step {
    /// Installed; the status is up to date.
    Done,
    /// spec.version was written; the update brings the next reconcile.
    VersionWritten,
    /// A configuration problem.
    Problem(Problem),
    /// A temporary failure, shown on a condition and retried with backoff.
    Transient(Error, Problem),
}

fn problem(condition: &'static str, reason: &'static str, message: impl Into<String>) -> Step {
    Step::Problem(Problem {
        condition,
        reason,
        message: message.into(),
    })
}

fn preflight_failed(f: Failure) -> Step {
    problem(PREFLIGHT_CHECK_PASSED, f.reason, f.message)
}

fn source_failed(condition: &'static str, e: SourceError) -> Step {
    if e.is_transient() {
        let message = e.to_string();
        Step::Transient(
            Error::Source(e),
            Problem {
                condition,
                reason: reason::SOURCE_UNAVAILABLE,
                message,
            },
        )
    } else {
        problem(condition, reason::FETCH_FAILED, e.to_string())
    }
}

/// How soon a provider waiting for the core provider looks again.
const WAIT_FOR_CORE_RECHECK: Duration = Duration::from_secs(5);

/// Reconciles one provider object, recording the reconcile in the metrics.
pub async fn reconcile<P: Provider>(obj: Arc<P>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let kind = AnyProvider::from(obj.as_ref()).provider_type.kind();
    let result = match futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
        reconcile_once(obj, ctx.clone()),
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

async fn reconcile_once<P: Provider>(obj: Arc<P>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let p = AnyProvider::from(obj.as_ref());
    if p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MANAGED_BY_ANNOTATION))
    {
        debug!(provider = %provider_key(&p), "managed by something else; left alone");
        return Ok(Action::await_change());
    }
    let api: Api<P> = Api::namespaced(ctx.client.clone(), p.namespace());
    if p.metadata.deletion_timestamp.is_some() {
        return delete(obj.as_ref(), &p, &api, &ctx).await;
    }
    if !p
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
    {
        let mut finalizers = p.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(FINALIZER.to_string());
        // The resourceVersion makes this a compare-and-swap: a concurrent finalizer change
        // gives a conflict and a retry rather than a lost entry.
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": p.metadata.resource_version,
        }});
        api.patch(p.name(), &merge_params(), &Patch::Merge(&patch))
            .await?;
        return Ok(Action::await_change());
    }

    let old = p.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let generation = p.metadata.generation;
    let step = install(obj.as_ref(), &p, &ctx, &api, &mut status).await;
    let (action, err) = match step {
        Step::Done => {
            if let Ok(mut f) = ctx.failures.lock() {
                f.remove(&provider_key(&p));
            }
            // A refused unpause depends on other providers' upgrades; look again soon.
            let refused = status
                .condition(PAUSED)
                .is_some_and(|c| c.reason == reason::UNPAUSE_REFUSED);
            let unready = status.condition(READY).is_some_and(|c| {
                c.status != "True" && UNREADY_RECHECKED.contains(&c.reason.as_str())
            });
            let after = if unready {
                READINESS_RECHECK.min(ctx.opts.resync)
            } else if refused {
                ctx.opts.config_retry
            } else {
                ctx.opts.resync
            };
            (Action::requeue(after), None)
        }
        Step::VersionWritten => return Ok(Action::await_change()),
        Step::Problem(pb) => {
            warn!(provider = %provider_key(&p), reason = pb.reason, message = %pb.message, "configuration problem");
            ctx.opts.metrics.failed(p.provider_type.kind(), pb.reason);
            conditions::set(
                &mut status.conditions,
                &Desired::failed(pb.condition, pb.reason, pb.message),
                generation,
            );
            if pb.condition == PREFLIGHT_CHECK_PASSED {
                mark_not_installed_unless_installed(&mut status, generation);
            }
            // Waiting for the core provider is not a configuration problem. A change of the
            // core provider wakes this one at once, but that event can arrive before the cache
            // this check reads has seen it; a short re-check closes that gap.
            let after = if pb.reason == super::preflight::reason::WAITING_FOR_CORE {
                ctx.opts.config_retry.min(WAIT_FOR_CORE_RECHECK)
            } else {
                ctx.opts.config_retry
            };
            (Action::requeue(after), None)
        }
        Step::Transient(e, pb) => {
            warn!(provider = %provider_key(&p), error = %e, "temporary failure; retrying with backoff");
            ctx.opts.metrics.failed(p.provider_type.kind(), pb.reason);
            conditions::set(
                &mut status.conditions,
                &Desired::failed(pb.condition, pb.reason, pb.message),
                generation,
            );
            (Action::await_change(), Some(e))
        }
    };
    status.observed_generation = generation;
    ctx.opts.metrics.provider(
        p.provider_type.kind(),
        p.namespace(),
        p.name(),
        crate::metrics::ProviderState {
            version: status.installed_version.clone().unwrap_or_default(),
            ready: status.condition(READY).is_some_and(|c| c.status == "True"),
            paused: p.spec.paused,
        },
    );
    publish_transitions(obj.as_ref(), &ctx, &old, &status).await;
    if status != old {
        write_status(&api, &p, &status).await?;
    }
    match err {
        Some(e) => Err(e),
        None => Ok(action),
    }
}

// Before the first install a failed preflight also means "not installed"; once installed, the
// install condition keeps describing what runs.
fn mark_not_installed_unless_installed(status: &mut ProviderStatus, generation: Option<i64>) {
    if status.installed_version.is_none() && status.condition(PROVIDER_INSTALLED).is_none() {
        conditions::set(
            &mut status.conditions,
            &Desired::failed(
                PROVIDER_INSTALLED,
                "PreflightCheckFailed",
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
pub fn error_policy<P: Provider>(obj: Arc<P>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let key = provider_key(&AnyProvider::from(obj.as_ref()));
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

fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

async fn write_status<P: Provider>(
    api: &Api<P>,
    p: &AnyProvider,
    status: &ProviderStatus,
) -> Result<(), kube::Error> {
    let body = json!({
        "apiVersion": format!("{}/{}", capi_operator_api::GROUP, capi_operator_api::VERSION),
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

async fn publish<P: Provider>(obj: &P, ctx: &Ctx, ok: bool, reason: &str, note: String) {
    let ev = Event {
        type_: if ok {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: reason.to_string(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
        debug!(error = %e, "event not published");
    }
}

// One event per condition transition: repeated reconciles of an unchanged state publish nothing,
// so an idle cluster sees no event writes.
async fn publish_transitions<P: Provider>(
    obj: &P,
    ctx: &Ctx,
    old: &ProviderStatus,
    new: &ProviderStatus,
) {
    for c in &new.conditions {
        let before = old.condition(&c.type_);
        if before.is_some_and(|b| b.status == c.status && b.reason == c.reason) {
            continue;
        }
        let note = if c.message.is_empty() {
            format!("{} is {}", c.type_, c.status)
        } else {
            c.message.clone()
        };
        publish(obj, ctx, c.status == "True", &c.reason, note).await;
    }
}

async fn read_variables(ctx: &Ctx, p: &AnyProvider) -> Result<BTreeMap<String, String>, Step> {
    let Some(name) = p.spec.secret_name.as_deref().filter(|s| !s.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let ns = p.spec.secret_namespace.as_deref().unwrap_or(p.namespace());
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret = match api.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(problem(
                PROVIDER_INSTALLED,
                reason::SECRET_NOT_FOUND,
                format!("Secret {ns}/{name} (spec.configSecret) does not exist"),
            ));
        }
        Err(e) => {
            let message = format!("reading Secret {ns}/{name}: {e}");
            return Err(Step::Transient(
                Error::Kube(e),
                Problem {
                    condition: PROVIDER_INSTALLED,
                    reason: reason::SECRET_NOT_FOUND,
                    message,
                },
            ));
        }
    };
    let mut vars = BTreeMap::new();
    for (k, v) in secret.data.unwrap_or_default() {
        // Values are never logged; a non-UTF-8 value cannot be substituted into YAML anyway.
        if let Ok(s) = String::from_utf8(v.0) {
            vars.insert(k, s);
        }
    }
    for (k, v) in secret.string_data.unwrap_or_default() {
        vars.insert(k, v);
    }
    Ok(vars)
}

async fn read_additional_manifests(ctx: &Ctx, p: &AnyProvider) -> Result<Option<String>, Step> {
    let Some(r) = p.spec.additional_manifests.as_ref() else {
        return Ok(None);
    };
    let ns = r.namespace.as_deref().unwrap_or(p.namespace());
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(&r.name).await {
        Ok(Some(cm)) => match cm.data.and_then(|mut d| d.remove("manifests")) {
            Some(text) => Ok(Some(text)),
            None => Err(problem(
                PROVIDER_INSTALLED,
                reason::ADDITIONAL_MANIFESTS,
                format!("ConfigMap {ns}/{} has no key \"manifests\"", r.name),
            )),
        },
        Ok(None) => Err(problem(
            PROVIDER_INSTALLED,
            reason::ADDITIONAL_MANIFESTS,
            format!(
                "ConfigMap {ns}/{} (spec.additionalManifests) does not exist",
                r.name
            ),
        )),
        Err(e) => {
            let message = format!("reading ConfigMap {ns}/{}: {e}", r.name);
            Err(Step::Transient(
                Error::Kube(e),
                Problem {
                    condition: PROVIDER_INSTALLED,
                    reason: reason::ADDITIONAL_MANIFESTS,
                    message,
                },
            ))
        }
    }
}

fn render_problem(e: RenderError) -> Step {
    let text = e.to_string();
    let reason = match &e {
        RenderError::Pipeline(PipelineError::Substitution(m))
            if m.contains("value for variables") || m.contains("missing variable") =>
        {
            reason::MISSING_VARIABLES
        }
        RenderError::Metadata(_) => reason::INVALID_METADATA,
        RenderError::Patch(_) => reason::INVALID_PATCHES,
        RenderError::AdditionalManifests(_) => reason::ADDITIONAL_MANIFESTS,
        _ => reason::RENDER_FAILED,
    };
    problem(PROVIDER_INSTALLED, reason, text)
}

fn apply_failed(e: ApplyError) -> Step {
    if e.is_transient() {
        let message = e.to_string();
        Step::Transient(
            Error::Apply(e),
            Problem {
                condition: PROVIDER_INSTALLED,
                reason: reason::APPLY_RETRYING,
                message,
            },
        )
    } else {
        problem(PROVIDER_INSTALLED, reason::APPLY_FAILED, e.to_string())
    }
}

/// Labels every rendered object with the provider that installs it, so the caches can find
/// all of a provider's objects for drift repair, pruning and deletion.
pub fn label_owned(objects: &mut [Value], p: &AnyProvider) {
    for o in objects.iter_mut() {
        let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(l) = labels.as_object_mut() {
            l.insert(OWNER_KIND_LABEL.into(), p.provider_type.kind().into());
            l.insert(OWNER_NAME_LABEL.into(), p.name().into());
            l.insert(OWNER_NAMESPACE_LABEL.into(), p.namespace().into());
        }
    }
}

async fn fetch(
    ctx: &Ctx,
    p: &AnyProvider,
    chosen: &Chosen,
    version: &str,
) -> Result<source::Release, SourceError> {
    let timed = || async {
        let started = std::time::Instant::now();
        let r = fetch_release(&chosen.source, Some(version), &chosen.components_file).await;
        ctx.opts
            .metrics
            .fetched(chosen.source.kind(), r.is_ok(), started.elapsed());
        r
    };
    let Some(key) = chosen.cache_key.as_deref() else {
        return timed().await;
    };
    let cache = ReleaseCache::new(ctx.client.clone(), p.namespace());
    if let Some(r) = cache.get(p, version, key).await? {
        return Ok(r);
    }
    let release = timed().await?;
    info!(provider = %provider_key(p), version, "release fetched");
    if let Err(e) = cache.put(p, &release, key).await {
        // The cache only saves a future fetch; failing to write it is not fatal.
        warn!(provider = %provider_key(p), error = %e, "release not cached");
    }
    Ok(release)
}

async fn install<P: Provider>(
    obj: &P,
    p: &AnyProvider,
    ctx: &Ctx,
    api: &Api<P>,
    status: &mut ProviderStatus,
) -> Step {
    let generation = p.metadata.generation;
    let same_kind = ctx.world.providers(p.provider_type);
    let cores = ctx.world.providers(ProviderType::Core);
    if let Err(f) = preflight::check_objects(p, &same_kind, &cores) {
        return preflight_failed(f);
    }
    let core = if p.provider_type == ProviderType::Core {
        None
    } else {
        match preflight::ready_core(&cores) {
            Ok(c) => Some(c.clone()),
            Err(f) => return preflight_failed(f),
        }
    };
    let vars = match read_variables(ctx, p).await {
        Ok(v) => v,
        Err(step) => return step,
    };
    let chosen = match source::choose(ctx, p, &vars) {
        Ok(c) => c,
        Err(message) => {
            return problem(
                PREFLIGHT_CHECK_PASSED,
                reason::INVALID_FETCH_CONFIG,
                message,
            );
        }
    };

    let version = match p.spec.version.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => v.to_string(),
        None => {
            let resolved = match chosen.url_version.clone() {
                Some(v) => v,
                None => match fetch_release(&chosen.source, None, &chosen.components_file).await {
                    Ok(r) => {
                        if let Some(key) = chosen.cache_key.as_deref()
                            && let Err(e) = ReleaseCache::new(ctx.client.clone(), p.namespace())
                                .put(p, &r, key)
                                .await
                        {
                            warn!(error = %e, "release not cached");
                        }
                        r.version
                    }
                    Err(e) => return source_failed(PREFLIGHT_CHECK_PASSED, e),
                },
            };
            let patch = json!({"spec": {"version": resolved}});
            return match api
                .patch(p.name(), &merge_params(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    info!(provider = %provider_key(p), version = %resolved, "resolved the latest release into spec.version");
                    publish(
                        obj,
                        ctx,
                        true,
                        "VersionResolved",
                        format!("spec.version set to {resolved}, the latest release"),
                    )
                    .await;
                    Step::VersionWritten
                }
                Err(e) => Step::Transient(
                    Error::Kube(e),
                    Problem {
                        condition: PREFLIGHT_CHECK_PASSED,
                        reason: reason::SOURCE_UNAVAILABLE,
                        message: "writing the resolved version into spec.version failed".into(),
                    },
                ),
            };
        }
    };
    if let Err(f) = preflight::check_downgrade(status.installed_version.as_deref(), &version) {
        return preflight_failed(f);
    }

    let release = match fetch(ctx, p, &chosen, &version).await {
        Ok(r) => r,
        Err(e) => return source_failed(PROVIDER_INSTALLED, e),
    };
    let contract = match Metadata::parse(&release.metadata)
        .map_err(|e| format!("release {version}: {e}"))
        .and_then(|m| {
            m.contract_for(&version)
                .map(str::to_string)
                .map_err(|e| e.to_string())
        }) {
        Ok(c) => c,
        Err(message) => return problem(PREFLIGHT_CHECK_PASSED, reason::INVALID_METADATA, message),
    };
    if let Some(core) = &core
        && let Err(f) = preflight::check_contract(core, &contract)
    {
        return preflight_failed(f);
    }
    let all = ctx.world.all_providers();
    if p.provider_type == ProviderType::Core
        && let Some(old) = status.contract.as_deref()
        && old != contract
        && status.installed_version.as_deref() != Some(version.as_str())
    {
        let running: Vec<String> = all
            .iter()
            .filter(|q| !q.spec.paused)
            .map(|q| format!("{} {}/{}", q.provider_type.kind(), q.namespace(), q.name()))
            .collect();
        if !running.is_empty() {
            return problem(
                PREFLIGHT_CHECK_PASSED,
                reason::CONTRACT_CHANGE_NEEDS_PAUSE,
                format!(
                    "{version} changes the contract from {old} to {contract}; pause every provider first (spec.paused: true); not paused: {}",
                    running.join(", ")
                ),
            );
        }
    }
    conditions::set(
        &mut status.conditions,
        &Desired::ok(PREFLIGHT_CHECK_PASSED, reason::PASSED, ""),
        generation,
    );

    // Pause: requested, or kept because unpausing now would run providers of different
    // contracts side by side.
    let was_paused = ctx.world.deployments_of(p).iter().any(|d| {
        d.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ORIGINAL_REPLICAS_ANNOTATION))
    });
    let core_contract = if p.provider_type == ProviderType::Core {
        Some(contract.clone())
    } else {
        core.as_ref()
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.contract.clone())
    };
    let disagreeing: Vec<String> = all
        .iter()
        .filter(|q| {
            !(q.provider_type == p.provider_type
                && q.namespace() == p.namespace()
                && q.name() == p.name())
        })
        .filter_map(|q| {
            let c = q.status.as_ref()?.contract.as_deref()?;
            (Some(c) != core_contract.as_deref()).then(|| {
                format!(
                    "{} {}/{} ({c})",
                    q.provider_type.kind(),
                    q.namespace(),
                    q.name()
                )
            })
        })
        .chain(
            (core_contract.as_deref() != Some(contract.as_str()))
                .then(|| format!("this provider ({contract})")),
        )
        .collect();
    let paused = if p.spec.paused {
        Some(Desired::ok(
            PAUSED,
            reason::PAUSED,
            "spec.paused is true: every Deployment is scaled to 0",
        ))
    } else if was_paused && !disagreeing.is_empty() {
        Some(Desired::ok(
            PAUSED,
            reason::UNPAUSE_REFUSED,
            format!(
                "unpausing is refused while providers disagree on the contract (core: {}): {}",
                core_contract.as_deref().unwrap_or("unknown"),
                disagreeing.join(", ")
            ),
        ))
    } else {
        None
    };

    let additional = match read_additional_manifests(ctx, p).await {
        Ok(a) => a,
        Err(step) => return step,
    };
    let extras = render::RenderExtras {
        additional_manifests: additional,
    };
    let rendered = match render::render_with(p, &release, |k| vars.get(k).cloned(), &extras) {
        Ok(r) => r,
        Err(e) => return render_problem(e),
    };
    conditions::set(
        &mut status.conditions,
        &super::readiness::manager_configured(&rendered.managers),
        generation,
    );
    for r in &rendered.managers {
        for f in &r.findings {
            debug!(provider = %provider_key(p), deployment = %r.deployment, field = %f.field, problem = %f.problem, "manager setting without effect");
        }
    }
    let mut objects = rendered.objects;
    let rendered_count = objects.len();
    // The same checks as `kubectl capi-providers verify`, on what is about to be installed.
    let findings: Vec<String> =
        capi_components::contract::verify(p.provider_type, Some(&contract), &objects)
            .into_iter()
            .filter(|f| f.severity != capi_components::contract::Severity::Ok)
            .map(|f| format!("{}: {}", f.check, f.message))
            .collect();
    label_owned(&mut objects, p);
    objects.iter_mut().for_each(super::apply::prepare);
    let upgrading = status.installed_version.as_deref() != Some(version.as_str());
    if paused.is_some() {
        objects.iter_mut().for_each(scale_to_zero);
        // A paused provider is otherwise left as it is, unless its version changes (the
        // pause → upgrade → unpause sequence of a contract change).
        if !upgrading {
            objects.retain(|o| o.get("kind").and_then(Value::as_str) == Some("Deployment"));
        }
    }

    let report = match ctx.applier.apply_all(&objects, |k| ctx.world.live(k)).await {
        Ok(r) => r,
        Err(e) => return apply_failed(e),
    };
    if report.applied > 0 {
        info!(provider = %provider_key(p), applied = report.applied, unchanged = report.unchanged, "applied");
        // Applied as the release says, but shown: an admin should see a release that grants
        // cluster-admin or intercepts everything. Only when something was written, so an idle
        // cluster sees no event.
        let privileged = capi_components::privileged::privileged_objects(&objects);
        if !privileged.is_empty() {
            warn!(provider = %provider_key(p), objects = ?privileged, "the release holds privileged objects");
            publish(
                obj,
                ctx,
                false,
                reason::PRIVILEGED_OBJECTS,
                format!(
                    "the release holds privileged objects (applied as released): {}",
                    privileged.join("; ")
                ),
            )
            .await;
        }
    }

    // Prune what this provider installed before but no longer renders. CRDs and namespaces stay:
    // deleting a CRD deletes every custom resource of it.
    let desired: BTreeSet<_> = objects.iter().filter_map(|o| key_of(o).ok()).collect();
    let stale: Vec<_> = ctx
        .world
        .installed(p)
        .into_iter()
        .filter(|_| paused.is_none() || upgrading)
        .filter(|(k, _, _)| !desired.contains(k))
        .filter(|(k, _, _)| k.kind != "CustomResourceDefinition" && k.kind != "Namespace")
        .collect();
    if !stale.is_empty() {
        match ctx.applier.delete_all(&stale).await {
            Ok(n) if n > 0 => {
                let names: Vec<String> = stale.iter().map(|(k, _, _)| k.to_string()).collect();
                publish(
                    obj,
                    ctx,
                    true,
                    "Pruned",
                    format!("removed objects no longer rendered: {}", names.join(", ")),
                )
                .await;
            }
            Ok(_) => {}
            Err(e) => return apply_failed(e),
        }
    }

    let changed_version = upgrading;
    if let Some(old) = status.installed_version.clone()
        && changed_version
    {
        conditions::set(
            &mut status.conditions,
            &Desired::ok(
                PROVIDER_UPGRADED,
                reason::UPGRADED,
                format!("upgraded from {old} to {version}"),
            ),
            generation,
        );
    }
    status.installed_version = Some(version.clone());
    status.contract = Some(contract);
    conditions::set(
        &mut status.conditions,
        &Desired::ok(
            PROVIDER_INSTALLED,
            reason::INSTALLED,
            format!("{version} installed ({rendered_count} objects)"),
        ),
        generation,
    );
    let verified = if findings.is_empty() {
        Desired::ok(
            CONTRACT_VERIFIED,
            reason::CONTRACT_OK,
            "the release follows the provider contracts",
        )
    } else {
        Desired::failed(
            CONTRACT_VERIFIED,
            reason::CONTRACT_FINDINGS,
            findings.join("; "),
        )
    };
    conditions::set(&mut status.conditions, &verified, generation);
    if changed_version && report.applied > 0 {
        publish(
            obj,
            ctx,
            true,
            "VersionInstalled",
            format!("{version} applied"),
        )
        .await;
    }
    match &paused {
        Some(d) => {
            conditions::set(&mut status.conditions, d, generation);
            conditions::set(
                &mut status.conditions,
                &Desired::failed(READY, reason::PAUSED, "the provider is paused"),
                generation,
            );
        }
        None => {
            if status.condition(PAUSED).is_some() {
                conditions::set(
                    &mut status.conditions,
                    &Desired::failed(
                        PAUSED,
                        reason::NOT_PAUSED,
                        "Deployments run with their original replicas",
                    ),
                    generation,
                );
            }
            let ready = readiness(ctx, p).await;
            conditions::set(&mut status.conditions, &ready, generation);
        }
    }
    Step::Done
}

/// Scales a rendered Deployment to 0, recording its replica count in the annotation the
/// specification names; unpausing renders the original count again.
pub fn scale_to_zero(o: &mut Value) {
    if o.get("kind").and_then(Value::as_str) != Some("Deployment") {
        return;
    }
    let replicas = o
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("replicas".into(), json!(0));
    }
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = ann.as_object_mut() {
            a.insert(
                ORIGINAL_REPLICAS_ANNOTATION.into(),
                json!(replicas.to_string()),
            );
        }
    }
}

/// Ready from the provider's Deployments: every one Available and rolled out. For one that is
/// not, its Pods tell a crash loop or an unpullable image from a rollout in progress.
async fn readiness(ctx: &Ctx, p: &AnyProvider) -> Desired {
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
        if let Err(why) = super::readiness::availability(d) {
            let pods = pods_of(ctx, d).await;
            return super::readiness::not_ready(d, &why, &pods);
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
        .list(&ListParams::default().labels_from(&selector))
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            debug!(deployment = %d.name_any(), error = %e, "pods not listed");
            Vec::new()
        }
    }
}

/// What keeps a provider from being deleted: for the core provider, any other provider; for
/// every provider, custom resources of its CRDs (workload clusters using it).
async fn deletion_blockers(ctx: &Ctx, p: &AnyProvider) -> Result<Vec<String>, kube::Error> {
    let mut out = Vec::new();
    if p.provider_type == ProviderType::Core {
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

async fn delete<P: Provider>(
    obj: &P,
    p: &AnyProvider,
    api: &Api<P>,
    ctx: &Ctx,
) -> Result<Action, Error> {
    if !p
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let old = p.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let generation = p.metadata.generation;
    let blockers = deletion_blockers(ctx, p).await?;
    if !blockers.is_empty() {
        conditions::set(
            &mut status.conditions,
            &Desired::failed(
                DELETING,
                reason::DELETION_BLOCKED,
                format!(
                    "deletion waits until these are gone: {}",
                    blockers.join(", ")
                ),
            ),
            generation,
        );
        publish_transitions(obj, ctx, &old, &status).await;
        if status != old {
            write_status(api, p, &status).await?;
        }
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let left: Vec<_> = ctx
        .world
        .installed(p)
        .into_iter()
        .filter(|(k, _, _)| k.kind != "CustomResourceDefinition" && k.kind != "Namespace")
        .collect();
    if !left.is_empty() {
        conditions::set(
            &mut status.conditions,
            &Desired::ok(
                DELETING,
                reason::DELETING,
                format!(
                    "removing {} installed objects (CRDs and the namespace are kept)",
                    left.len()
                ),
            ),
            generation,
        );
        publish_transitions(obj, ctx, &old, &status).await;
        if status != old {
            write_status(api, p, &status).await?;
        }
        ctx.applier.delete_all(&left).await.map_err(Error::Apply)?;
        // The caches report the deletions; the watch events bring the next pass.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let finalizers: Vec<String> = p
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| f.as_str() != FINALIZER)
        .cloned()
        .collect();
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": p.metadata.resource_version,
    }});
    api.patch(p.name(), &merge_params(), &Patch::Merge(&patch))
        .await?;
    info!(provider = %provider_key(p), "components removed; finalizer released");
    ctx.opts
        .metrics
        .forget(p.provider_type.kind(), p.namespace(), p.name());
    Ok(Action::await_change())
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
    fn jitter_samples_are_in_the_unit_interval() {
        for _ in 0..1000 {
            let j = jitter_sample();
            assert!((0.0..=1.0).contains(&j), "{j}");
        }
    }
}
