//! The version phase: `spec.version`, checked against a downgrade, or the latest release
//! written into it (which ends the pass: the update brings the next one).

use std::ops::ControlFlow;

use capi_cluster_io::provider_kind::ProviderKind;
use capi_decide::{Note, preflight, reason};
use capi_operator_api::conditions::PREFLIGHT_CHECK_PASSED;
use capi_release_sources::fetch_release;
use kube::api::Patch;

use serde_json::json;
use tracing::info;

use crate::controller::budget::COST_PER_BYTE;
use crate::controller::context::provider_key;
use crate::controller::outcome::{Outcome, is_conflict};
use crate::controller::report::merge_params;
use crate::controller::source::{Chosen, ReleaseCache};

use super::fetch::cache_release;
use super::preflight::preflight_failed;
use super::{Phase, State, end};

/// spec.version, checked against a downgrade. An empty one is resolved to the latest release
/// and written back, which ends this reconcile: the update brings the next one.
pub(super) async fn resolve<P: ProviderKind>(
    state: &mut State<'_, P>,
    chosen: &Chosen,
) -> Phase<String> {
    if let Some(v) = state
        .provider
        .spec
        .version
        .as_deref()
        .filter(|v| !v.is_empty())
    {
        if let Err(f) = preflight::check_downgrade(state.status.installed_version.as_deref(), v) {
            return end(preflight_failed(f));
        }
        return ControlFlow::Continue(v.to_string());
    }
    let resolved = match chosen.url_version.clone() {
        Some(v) => v,
        None => latest_version(state, chosen).await?,
    };
    // A compare-and-swap on the object this reconcile read: a version the user set since then
    // makes it fail instead of being overwritten (and the provider upgraded unasked).
    let patch = json!({
        "metadata": {"resourceVersion": state.provider.metadata.resource_version},
        "spec": {"version": resolved},
    });
    match state
        .api
        .patch(
            state.provider.name(),
            &merge_params(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            info!(provider = %provider_key(state.provider), version = %resolved, "resolved the latest release into spec.version");
            let note = format!("spec.version set to {resolved}, the latest release");
            state
                .notes
                .push(Note::normal(reason::VERSION_RESOLVED, note));
            end(Outcome::VersionWritten)
        }
        Err(e) if is_conflict(&e) => version_conflict(state, e).await,
        Err(e) => end(version_not_written(e)),
    }
}

/// After the version write lost a race: a version set meanwhile (by the user) stands, and its
/// update brings the next reconcile; any other change means trying again (with back-off) on a
/// fresh read.
async fn version_conflict<P: ProviderKind>(
    state: &State<'_, P>,
    conflict: kube::Error,
) -> Phase<String> {
    let now = match state.api.get(state.provider.name()).await {
        Ok(o) => o.view().0,
        Err(e) => return end(version_not_written(e)),
    };
    match now.spec.version.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => {
            info!(provider = %provider_key(state.provider), version = %v, "spec.version was set meanwhile; it is kept, not overwritten");
            end(Outcome::VersionWritten)
        }
        None => end(version_not_written(conflict)),
    }
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
async fn latest_version<P: ProviderKind>(
    state: &mut State<'_, P>,
    chosen: &Chosen,
) -> Phase<String> {
    let budget = &state.ctx.opts.memory_budget;
    let share = budget
        .acquire(budget.estimate(&provider_key(state.provider), ""))
        .await;
    match fetch_release(&chosen.source, None, &chosen.components_file).await {
        Ok(r) => {
            let size = (r.components.len() + r.metadata.len()) as u64;
            let _memory = budget
                .resize(share, size.saturating_mul(COST_PER_BYTE))
                .await;
            if let Some(key) = chosen.cache_key.as_deref() {
                let cache = ReleaseCache::new(state.ctx.client.clone(), state.provider.namespace());
                cache_release(state, &cache, &r, key).await;
            }
            ControlFlow::Continue(r.version)
        }
        Err(e) => end(Outcome::failed(PREFLIGHT_CHECK_PASSED, e)),
    }
}
