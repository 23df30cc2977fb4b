//! The preflight phase: the provider is the only one of its kind and name, and a non-core
//! provider has an installed core provider (see `capi_decide::preflight`).

use std::ops::ControlFlow;

use capi_decide::preflight;
use capi_operator_api::conditions::PREFLIGHT_CHECK_PASSED;
use capi_operator_api::{AnyProvider, ProviderType};

use crate::controller::outcome::Outcome;

use super::{Phase, State, end};

pub(super) fn preflight_failed(f: preflight::Failure) -> Outcome {
    Outcome::failed(PREFLIGHT_CHECK_PASSED, f)
}

/// Uniqueness and, for a non-core provider, an installed core provider (which it returns).
pub(super) fn check<P>(state: &State<'_, P>) -> Phase<Option<AnyProvider>> {
    let p = state.provider;
    let same_kind = state.ctx.world.providers(p.provider_type);
    let cores = state.ctx.world.providers(ProviderType::Core);
    if let Err(f) = preflight::check_objects(p, &same_kind, &cores) {
        return end(preflight_failed(f));
    }
    if p.provider_type == ProviderType::Core {
        return ControlFlow::Continue(None);
    }
    match preflight::ready_core(&cores) {
        Ok(c) => ControlFlow::Continue(Some(c.clone())),
        Err(f) => end(preflight_failed(f)),
    }
}
