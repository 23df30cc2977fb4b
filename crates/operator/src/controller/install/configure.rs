//! The configure phase: the provider Secret's variables, and the release source they and
//! `spec.fetchConfig` choose.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use capi_cluster_io::provider_inputs::{self, Variables};
use capi_decide::reason;
use capi_operator_api::AnyProvider;
use capi_operator_api::conditions::{PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED};
use k8s_openapi::api::core::v1::Secret;

use crate::controller::context::Ctx;
use crate::controller::outcome::{Outcome, problem};
use crate::controller::source::Chosen;
use crate::controller::{not_found, source};

use super::{Phase, State, end};

/// The provider Secret's variables and the release source they and fetchConfig choose.
pub(super) async fn variables_and_source<P>(
    state: &State<'_, P>,
) -> Phase<(BTreeMap<String, String>, Chosen)> {
    let vars = read_variables(state.ctx, state.provider).await?;
    match source::choose(&state.ctx.client, &state.ctx.opts, state.provider, &vars) {
        Ok(chosen) => ControlFlow::Continue((vars, chosen)),
        Err(message) => end(problem(
            PREFLIGHT_CHECK_PASSED,
            reason::INVALID_FETCH_CONFIG,
            message,
        )),
    }
}

async fn read_variables(ctx: &Ctx, p: &AnyProvider) -> Phase<BTreeMap<String, String>> {
    match provider_inputs::variables(&ctx.client, p).await {
        Ok(Variables::Found(vars)) => ControlFlow::Continue(vars),
        Ok(Variables::Missing { namespace, name }) => {
            let found = not_found::names_in::<Secret>(&ctx.client, p, &namespace).await;
            end(problem(
                PROVIDER_INSTALLED,
                reason::SECRET_NOT_FOUND,
                format!("Secret {namespace}/{name} (spec.configSecret) does not exist; {found}"),
            ))
        }
        Err(e) => {
            let ns = p.spec.secret_namespace.as_deref().unwrap_or(p.namespace());
            let name = p.spec.secret_name.as_deref().unwrap_or_default();
            let message = format!("reading Secret {ns}/{name}: {e}");
            end(Outcome::transient(
                e,
                PROVIDER_INSTALLED,
                reason::SECRET_NOT_FOUND,
                message,
            ))
        }
    }
}
