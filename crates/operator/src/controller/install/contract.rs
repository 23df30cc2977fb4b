//! The contract and pause-plan phases: the release's contract against the core provider's and
//! the running providers, and whether the provider stays paused (see `capi_decide::plan`).

use std::ops::ControlFlow;

use capi_decide::{
    conditions::{self, Desired},
    plan, preflight, reason,
};
use capi_operator_api::conditions::PREFLIGHT_CHECK_PASSED;
use capi_operator_api::{AnyProvider, ORIGINAL_REPLICAS_ANNOTATION, ProviderType};

use crate::controller::outcome::problem;

use super::fetch::Fetched;
use super::preflight::preflight_failed;
use super::{Phase, State, end};

/// The release's contract against the core provider's, and a contract-changing core upgrade
/// against running providers. Passing both sets PreflightCheckPassed.
pub(super) fn check<P>(
    state: &mut State<'_, P>,
    core: Option<&AnyProvider>,
    all: &[AnyProvider],
    fetched: &Fetched,
) -> Phase {
    if let Some(core) = core
        && let Err(failure) = preflight::check_contract(core, &fetched.contract)
    {
        return end(preflight_failed(failure));
    }
    if state.provider.provider_type == ProviderType::Core {
        let running = plan::running_providers(all);
        if let Some(message) = plan::contract_change_blocker(
            state.status,
            &fetched.version,
            &fetched.contract,
            &running,
        ) {
            return end(problem(
                PREFLIGHT_CHECK_PASSED,
                reason::CONTRACT_CHANGE_NEEDS_PAUSE,
                message,
            ));
        }
    }
    conditions::set(
        &mut state.status.conditions,
        &Desired::ok(PREFLIGHT_CHECK_PASSED, reason::PASSED, ""),
        state.provider.metadata.generation,
    );
    ControlFlow::Continue(())
}

/// Whether the provider is paused: asked for, or kept because unpausing now would run
/// providers of different contracts side by side. `Some` holds the Paused condition.
pub(super) fn pause_plan<P>(
    state: &State<'_, P>,
    core: Option<&AnyProvider>,
    all: &[AnyProvider],
    contract: &str,
) -> Option<Desired> {
    let p = state.provider;
    let was_paused = state.ctx.world.deployments_of(p).iter().any(|d| {
        d.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ORIGINAL_REPLICAS_ANNOTATION))
    });
    let core_contract = if p.provider_type == ProviderType::Core {
        Some(contract.to_string())
    } else {
        core.and_then(|c| c.status.as_ref())
            .and_then(|status| status.contract.clone())
    };
    let disagreeing = plan::disagreeing_contracts(p, all, core_contract.as_deref(), contract);
    plan::pause_condition(
        p.spec.paused,
        was_paused,
        core_contract.as_deref(),
        &disagreeing,
    )
}
