//! The install path of a reconcile, as an ordered list of phases (see [`run`]), one file per
//! phase: preflight, configure (variables and release source), version, fetch, contract (and
//! the pause plan), render, apply (and prune), inventory, readiness (the report). Each phase is
//! a function over the reconcile's [`State`] and what earlier phases produced; it either goes
//! on or ends the reconcile with an [`Outcome`]. What else a phase did that the admin should
//! read about it hands on as a [`Note`]; the status and the events are written once, by the
//! reporter (`crate::controller::report`), from the outcome and the notes. The decisions
//! inside the phases are the pure functions of the decision layer (`capi_decide`).

mod apply;
mod configure;
mod contract;
mod fetch;
mod inventory;
mod preflight;
pub(super) mod readiness;
mod render;
mod version;
mod versions;

use std::ops::ControlFlow;

use capi_cluster_io::provider_kind::ProviderKind;
use capi_decide::Note;
use capi_operator_api::{AnyProvider, ProviderStatus};
use kube::Api;
use serde_json::Value;
use tracing::{Instrument, debug_span};

use crate::controller::context::Ctx;
use crate::controller::outcome::Outcome;

/// What every phase reads, and the status and notes the phases fill in.
pub struct State<'a, P> {
    /// The provider's kind-independent view.
    pub provider: &'a AnyProvider,
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

/// Runs the phases in order and gives the outcome.
pub async fn install<P: ProviderKind>(state: &mut State<'_, P>) -> Outcome {
    match run(state).await {
        ControlFlow::Continue(()) => Outcome::Done,
        ControlFlow::Break(outcome) => outcome,
    }
}

/// The phases, in order.
async fn run<P: ProviderKind>(state: &mut State<'_, P>) -> Phase {
    let core = debug_span!("phase", name = "preflight").in_scope(|| preflight::check(state))?;
    let (vars, chosen) = configure::variables_and_source(state)
        .instrument(debug_span!("phase", name = "configure"))
        .await?;
    let version = version::resolve(state, &chosen)
        .instrument(debug_span!("phase", name = "resolve-version"))
        .await?;
    let fetched = fetch::release(state, &chosen, version)
        .instrument(debug_span!("phase", name = "fetch"))
        .await?;
    // Both contract rules look at every provider: read the caches once.
    let all = state.ctx.world.all_providers();
    debug_span!("phase", name = "contract")
        .in_scope(|| contract::check(state, core.as_ref(), &all, &fetched))?;
    let pause = debug_span!("phase", name = "pause-plan")
        .in_scope(|| contract::pause_plan(state, core.as_ref(), &all, &fetched.contract));
    let rendered = render::render_objects(state, &fetched, &vars, pause.is_some())
        .instrument(debug_span!("phase", name = "render"))
        .await?;
    let rolled = render::rollout_note(state.ctx, &rendered);
    let applied = apply::apply_objects(state, &rendered.objects, &vars)
        .instrument(debug_span!("phase", name = "apply"))
        .await?;
    state.notes.extend(rolled);
    let changes_version = upgrading(state.status, &fetched.version);
    if let Some(entry) = &rendered.entry {
        inventory::record(state, entry, &fetched.version, changes_version)
            .instrument(debug_span!("phase", name = "inventory"))
            .await;
    }
    let desired: Vec<&Value> = rendered.objects.iter().chain(&rendered.entry).collect();
    apply::prune(state, &desired, pause.is_some(), changes_version)
        .instrument(debug_span!("phase", name = "prune"))
        .await?;
    readiness::report(state, &fetched, rendered, applied, pause)
        .instrument(debug_span!("phase", name = "report"))
        .await;
    versions::check(state, &chosen, &fetched)
        .instrument(debug_span!("phase", name = "versions"))
        .await;
    ControlFlow::Continue(())
}

fn upgrading(status: &ProviderStatus, version: &str) -> bool {
    status.installed_version.as_deref() != Some(version)
}
