//! The inventory phase: clusterctl's inventory entry kept at the version just applied.

use capi_cluster_io::provider_kind::ProviderKind;
use capi_decide::{Note, reason};
use serde_json::Value;
use tracing::warn;

use crate::controller::apply::key_of;
use crate::controller::context::provider_key;
use crate::controller::inventory;

use super::State;

/// Keeps the provider's clusterctl inventory entry at the version just applied. Not part of the
/// release: a failure is an event, never a failed install. An entry someone else changed (see
/// [`crate::controller::inventory`]) is said to be restored in an event.
pub(super) async fn record<P: ProviderKind>(
    state: &mut State<'_, P>,
    entry: &Value,
    version: &str,
    changes_version: bool,
) {
    let Ok(key) = key_of(entry) else { return };
    if !state
        .ctx
        .applier
        .needs_apply(entry, state.ctx.world.live(&key).as_ref())
    {
        return;
    }
    let found = inventory::recorded_version(&state.ctx.client, entry)
        .await
        .ok()
        .flatten();
    let applied = state
        .ctx
        .applier
        .apply_all(
            std::slice::from_ref(entry),
            |k| state.ctx.world.live(k),
            // A changed entry is reported below, with the version it was changed to.
            &mut Vec::new(),
        )
        .await;
    if let Err(e) = applied {
        warn!(provider = %provider_key(state.provider), error = %e, "clusterctl inventory entry not written");
        let note = format!("clusterctl's inventory entry {key} was not written: {e}");
        state
            .notes
            .push(Note::warning(reason::INVENTORY_NOT_WRITTEN, note));
        return;
    }
    if let Some(found) = found.filter(|f| f != version && !changes_version) {
        let entry = format!("{}/{}", key.namespace, key.name);
        warn!(provider = %provider_key(state.provider), %found, %version, "clusterctl changed the provider; declared state restored");
        let note = inventory::reverted_note(&entry, &found, version);
        state
            .notes
            .push(Note::warning(reason::CLUSTERCTL_CHANGE_REVERTED, note));
    }
}
