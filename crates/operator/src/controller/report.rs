//! The one writer of what a reconcile found: the status (through the status subresource, each
//! condition with the generation it describes), the events (a condition change when it is
//! news, see [`conditions::newsworthy`], and the notes the phases handed on) and the provider
//! metrics. The phases decide; this writes.

use std::sync::Arc;

use capi_operator_api::{
    AnyProvider, ProviderStatus,
    conditions::{READY, RECONCILING, STALLED},
};
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType},
};
use serde_json::json;
use tracing::debug;

use super::{
    apply::FIELD_MANAGER,
    context::{Ctx, Known, provider_key},
    outcome::Error,
};
use capi_cluster_io::provider_kind::{self, ProviderKind};
use capi_decide::{
    Note,
    conditions::{self, Desired},
    kstatus,
};

pub use capi_operator_api::note::{NOTE_LIMIT, clip_note, list_note};

/// The provider a report is about: its object (events name it), its kind-independent view and
/// the API of its kind (the status is written through it).
pub struct Subject<'a, P> {
    /// The provider object as the controller received it.
    pub obj: &'a P,
    /// Its kind-independent view.
    pub p: &'a AnyProvider,
    /// The API of the provider's kind.
    pub api: &'a Api<P>,
}

/// Completes the status of a pass that `ended` so (kstatus, observed generation, metrics),
/// publishes the phases' `notes` and the status's newsworthy changes, and writes the status
/// when it differs from the `old` one.
pub async fn status<P: ProviderKind>(
    s: &Subject<'_, P>,
    ctx: &Ctx,
    (old, mut status): (ProviderStatus, ProviderStatus),
    ended: kstatus::Ended<'_>,
    notes: Vec<Note>,
) -> Result<(), kube::Error> {
    let p = s.p;
    set_kstatus(&mut status, ended, p);
    status.observed_generation = p.metadata.generation;
    record_metrics(ctx, p, &status);
    publish_notes(s.obj, ctx, notes).await;
    publish_and_write(s, ctx, &old, &status).await
}

/// Reports a reconcile that failed with `err`: the reconcile-errors metric under its reason,
/// and its Warning note (see [`Error::note`]). A failure a phase showed on a condition has that
/// condition's reason and message, so its event repeats the condition's (a series, see
/// [`super::events`]). The event is published in the background, as the error policy does not
/// wait.
pub fn failure<P: ProviderKind>(obj: Arc<P>, ctx: Arc<Ctx>, err: &Error) {
    ctx.opts.metrics.failed(P::TYPE.kind(), err.reason());
    if let Some(note) = err.note() {
        tokio::spawn(async move { publish_notes(obj.as_ref(), &ctx, vec![note]).await });
    }
}

/// Writes the Deleting condition (and kstatus) when it changed.
pub async fn deletion<P: ProviderKind>(
    s: &Subject<'_, P>,
    ctx: &Ctx,
    deleting: Desired,
) -> Result<(), kube::Error> {
    let p = s.p;
    let old = p.status.clone().unwrap_or_default();
    let mut status = old.clone();
    conditions::set(&mut status.conditions, &deleting, p.metadata.generation);
    let ended = kstatus::Ended::Deleting(&deleting.reason, &deleting.message);
    set_kstatus(&mut status, ended, p);
    publish_and_write(s, ctx, &old, &status).await
}

/// Publishes the newsworthy changes from `old` to `status` (as the provider's API version
/// shows it) and writes the status when it differs (`old` as [`super::context::Written`]
/// knows it).
async fn publish_and_write<P: ProviderKind>(
    s: &Subject<'_, P>,
    ctx: &Ctx,
    old: &ProviderStatus,
    status: &ProviderStatus,
) -> Result<(), kube::Error> {
    let status = provider_kind::shown(s.p.api, status);
    // From what the server holds, not from a cached copy older than this process's last write:
    // a lagging cache would have its transitions published and its status written twice.
    let known = ctx.written.known(&provider_key(s.p), old);
    let held = match &known {
        Known::Wrote(wrote) => wrote,
        Known::Cached | Known::Unknown => old,
    };
    publish_transitions(s.obj, ctx, held, &status).await;
    if matches!(known, Known::Unknown) || &status != held {
        write_status(s, ctx, old, &status).await?;
    }
    Ok(())
}

/// Writes only the release digests of `old` changed to `digests` (after spec.version was
/// written: the digest is what lets the next reconcile use the cached release), and publishes
/// the phases' notes.
pub async fn digests<P: ProviderKind>(
    s: &Subject<'_, P>,
    ctx: &Ctx,
    old: &ProviderStatus,
    status: ProviderStatus,
    notes: Vec<Note>,
) -> Result<(), kube::Error> {
    publish_notes(s.obj, ctx, notes).await;
    if status.release_digests != old.release_digests {
        let mut digests_only = old.clone();
        digests_only.release_digests = status.release_digests;
        write_status(s, ctx, old, &provider_kind::shown(s.p.api, &digests_only)).await?;
    }
    Ok(())
}

/// The provider's gauges: its version, readiness, pause and stall.
fn record_metrics(ctx: &Ctx, p: &AnyProvider, status: &ProviderStatus) {
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
            newer_patch: status.available_versions.as_deref().and_then(|a| {
                let since = a.patch_since.as_ref()?.0.as_second();
                Some((a.newest_patch.clone()?, since))
            }),
        },
    );
}

/// Sets the kstatus conditions from how the reconcile ended, and the summary `kubectl get`
/// shows from them.
fn set_kstatus(status: &mut ProviderStatus, ended: kstatus::Ended<'_>, p: &AnyProvider) {
    for d in kstatus::conditions(status, ended) {
        conditions::set(&mut status.conditions, &d, p.metadata.generation);
    }
    status.summary = kstatus::summary(p.spec.version.as_deref(), status);
}

/// Merge-patch parameters under the operator's field manager.
pub fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Writes `status` over `replaced` (the cached copy) and records the outcome (see
/// [`super::context::Written`]).
async fn write_status<P: ProviderKind>(
    s: &Subject<'_, P>,
    ctx: &Ctx,
    replaced: &ProviderStatus,
    status: &ProviderStatus,
) -> Result<(), kube::Error> {
    let p = s.p;
    let body = json!({
        "apiVersion": p.api.api_version(),
        "kind": p.provider_type.kind(),
        "status": status,
    });
    let written = s
        .api
        .patch_status(
            p.name(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await;
    ctx.written
        .record(&provider_key(p), replaced, status, written.is_ok());
    written.map(|_| ())
}

/// Publishes an event on the provider object (failures are only logged). A note longer than
/// events.k8s.io accepts is cut (see [`clip_note`]) rather than losing the event.
pub async fn publish<P: ProviderKind>(obj: &P, ctx: &Ctx, ok: bool, reason: &str, note: String) {
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

/// Publishes `notes` (events on the provider object) outside a status write: what a deletion
/// did as the object goes.
pub async fn notes<P: ProviderKind>(obj: &P, ctx: &Ctx, notes: Vec<Note>) {
    publish_notes(obj, ctx, notes).await;
}

/// The phases' notes, in the order they were taken.
async fn publish_notes<P: ProviderKind>(obj: &P, ctx: &Ctx, notes: Vec<Note>) {
    for n in notes {
        publish(obj, ctx, n.ok, n.reason, n.message).await;
    }
}

// One event per newsworthy condition change (see [`conditions::newsworthy`]): repeated
// reconciles of an unchanged state publish nothing, so an idle cluster sees no event writes.
async fn publish_transitions<P: ProviderKind>(
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
