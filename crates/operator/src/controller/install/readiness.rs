//! The report phase: the installed, upgraded, contract-verified, paused and Ready conditions,
//! Ready read from the provider's Deployments (and, when one is not available, its Pods).

use capi_cluster_io::provider_kind::ProviderKind;
use capi_decide::{
    Note,
    conditions::{self, Desired},
    readiness, reason,
};
use capi_operator_api::AnyProvider;
use capi_operator_api::conditions::{PAUSED, PROVIDER_INSTALLED, PROVIDER_UPGRADED, READY};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tracing::debug;

use crate::controller::apply::{ApplyReport, ObjKey};
use crate::controller::context::Ctx;

use super::fetch::Fetched;
use super::render::Render;
use super::{State, upgrading};

/// Installed, upgraded, contract-verified, paused and ready conditions.
pub(super) async fn report<P: ProviderKind>(
    state: &mut State<'_, P>,
    fetched: &Fetched,
    rendered: Render,
    applied: ApplyReport,
    paused: Option<Desired>,
) {
    let generation = state.provider.metadata.generation;
    let version = fetched.version.as_str();
    let changed_version = upgrading(state.status, version);
    // A first install is announced by ProviderInstalled turning True; a version change after
    // it leaves that condition True, so it gets an event of its own.
    let first_install = state.status.installed_version.is_none();
    if let Some(old) = state.status.installed_version.clone()
        && changed_version
    {
        let upgraded = Desired::ok(
            PROVIDER_UPGRADED,
            reason::UPGRADED,
            format!("upgraded from {old} to {version}"),
        );
        conditions::set(&mut state.status.conditions, &upgraded, generation);
    }
    state.status.installed_version = Some(version.to_string());
    state.status.contract = Some(fetched.contract.clone());
    let installed = Desired::ok(
        PROVIDER_INSTALLED,
        reason::INSTALLED,
        format!("{version} installed ({} objects)", rendered.count),
    );
    conditions::set(&mut state.status.conditions, &installed, generation);
    conditions::set(&mut state.status.conditions, &rendered.verified, generation);
    if changed_version && !first_install && applied.applied > 0 {
        let note = format!("{version} applied");
        state
            .notes
            .push(Note::normal(reason::VERSION_INSTALLED, note));
    }
    let ready = match &paused {
        Some(d) => {
            conditions::set(&mut state.status.conditions, d, generation);
            Desired::failed(READY, reason::PAUSED, "the provider is paused")
        }
        None => {
            if state.status.condition(PAUSED).is_some() {
                let unpaused = Desired::failed(
                    PAUSED,
                    reason::NOT_PAUSED,
                    "Deployments run with their original replicas",
                );
                conditions::set(&mut state.status.conditions, &unpaused, generation);
            }
            ready_condition(state.ctx, state.provider).await
        }
    };
    conditions::set(&mut state.status.conditions, &ready, generation);
}

/// Ready from the provider's Deployments: every one Available and rolled out. For one that is
/// not, its Pods tell a crash loop or an unpullable image from a rollout in progress.
pub(in crate::controller) async fn ready_condition(ctx: &Ctx, p: &AnyProvider) -> Desired {
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
        if let Err(why) = applied_seen(ctx, d).and_then(|()| readiness::availability(d)) {
            let pods = pods_of(ctx, d).await;
            return readiness::not_ready(d, &why, &pods);
        }
        names.push(d.metadata.name.as_deref().unwrap_or(""));
    }
    names.sort_unstable();
    Desired::ok(
        READY,
        reason::AVAILABLE,
        format!("available: {}", names.join(", ")),
    )
}

/// Whether the cached Deployment `d` shows this process's last apply of it. A pass that just
/// changed it reads the cache before the watch brings the new generation: the old, Available
/// copy would report Ready for a rollout that has not started.
fn applied_seen(ctx: &Ctx, d: &Deployment) -> Result<(), String> {
    let key = ObjKey {
        group: "apps".into(),
        kind: "Deployment".into(),
        namespace: d.namespace().unwrap_or_default(),
        name: d.name_any(),
    };
    match ctx.applier.applied_generation(&key) {
        Some(g) if g > d.metadata.generation.unwrap_or(0) => {
            Err("rollout in progress: the spec just applied is not observed yet".into())
        }
        _ => Ok(()),
    }
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
        // From the apiserver's watch cache without waiting for it to be confirmed fresh: this
        // only explains a readiness already observed, and a consistent list can wait ~100 ms.
        .list(&ListParams::default().labels_from(&selector).match_any())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            debug!(deployment = %d.name_any(), error = %e, "pods not listed");
            Vec::new()
        }
    }
}
