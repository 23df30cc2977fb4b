//! The versions phase: which newer releases the provider's source offers
//! (`status.availableVersions`), asked every `--version-check-seconds` and after each change of
//! the installed version. A failed check never fails the pass: what the last check found stays,
//! with why this one failed.

use capi_cluster_io::provider_kind::ProviderKind;
use capi_components::metadata::Metadata;
use capi_decide::{Note, reason, versions};
use capi_release::version;
use capi_release_sources::{ReleaseSource, SourceError};
use k8s_openapi::jiff::Timestamp;
use tracing::{debug, warn};

use crate::controller::context::provider_key;
use crate::controller::source::Chosen;

use super::State;
use super::fetch::Fetched;

/// Asks the source for its releases when a check is due, and records what is newer.
pub(super) async fn check<P: ProviderKind>(
    state: &mut State<'_, P>,
    chosen: &Chosen,
    fetched: &Fetched,
) {
    let now = Timestamp::now();
    let last = state.status.available_versions.as_deref();
    let installed = fetched.version.as_str();
    if !versions::due(last, installed, now, state.ctx.opts.version_check) {
        return;
    }
    let available = match newer(chosen, fetched).await {
        Ok(newer) => versions::found(last, installed, newer, now),
        Err(e) => {
            let message = format!("listing the releases of {}: {e}", chosen.description);
            warn!(provider = %provider_key(state.provider), error = %message, "version check failed");
            // An event only when the reason is new, not at every check of a source that is down.
            if last.and_then(|l| l.message.as_deref()) != Some(message.as_str()) {
                state
                    .notes
                    .push(Note::warning(reason::VERSION_CHECK_FAILED, message.clone()));
            }
            versions::failed(last, installed, message, now)
        }
    };
    debug!(provider = %provider_key(state.provider), ?available, "versions checked");
    state.status.available_versions = Some(Box::new(available));
}

/// The releases newer than the installed one. The contract of each comes from the newest
/// release's metadata.yaml (its series list every minor before it); when that is the installed
/// release, nothing more is fetched.
async fn newer(chosen: &Chosen, fetched: &Fetched) -> Result<version::Newer, SourceError> {
    let listed = chosen.source.list_versions().await?;
    let first = version::newer(&fetched.version, &listed, &fetched.contract, |_| None);
    let metadata = match &first.newest {
        Some(newest) => {
            let bytes = chosen.source.fetch_file(newest, "metadata.yaml").await?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
        None => return Ok(first),
    };
    // A newest release without a readable metadata.yaml leaves its contracts unknown: only the
    // installed minor's patches then count as within the contract.
    let Ok(metadata) = Metadata::parse(&metadata) else {
        return Ok(first);
    };
    Ok(version::newer(
        &fetched.version,
        &listed,
        &fetched.contract,
        |v| {
            metadata
                .contract_for(&v.to_string())
                .ok()
                .map(str::to_string)
        },
    ))
}
