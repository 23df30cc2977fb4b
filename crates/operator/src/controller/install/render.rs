//! The render phase: the release rendered off the event loop with the provider's settings,
//! the config hash stamped, the objects finalized for applying.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use capi_cluster_io::provider_inputs::{self, Manifests};
use capi_components::desired;
use capi_components::render::{RenderError, RenderExtras};
use capi_components::rotation;
use capi_decide::{
    Note,
    conditions::{self, Desired},
    readiness, reason,
};
use capi_operator_api::conditions::PROVIDER_INSTALLED;
use capi_operator_api::{AnyProvider, ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION};
use capi_release::Release;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use serde_json::Value;
use tracing::debug;

use crate::controller::apply::key_of;
use crate::controller::context::{Ctx, provider_key};
use crate::controller::not_found;
use crate::controller::outcome::{Outcome, problem};
use crate::controller::report::list_note;

use super::fetch::Fetched;
use super::{Phase, State, end};

/// What the render phase hands on: the objects to apply and what the report says of them.
pub(super) struct Render {
    /// Finalized objects, as applied.
    pub(super) objects: Vec<Value>,
    /// Objects the release renders to (a paused provider applies only some of them).
    pub(super) count: usize,
    /// The ContractVerified condition, from the rendered objects.
    pub(super) verified: Desired,
    /// clusterctl's inventory entry (when the operator keeps the inventory).
    pub(super) entry: Option<Value>,
    /// Deployments rolled because content they read changed.
    pub(super) rolled: Vec<rotation::Rolled>,
}

/// Builds the desired state on a blocking thread: a large release takes long enough (a
/// quarter of a second for one 16 times the core release) to delay lease renewal and watch
/// handling on the operator's one event-loop thread.
async fn desired_off_the_event_loop(
    p: &AnyProvider,
    release: &Arc<Release>,
    vars: &BTreeMap<String, String>,
    inputs: desired::Inputs,
) -> Result<desired::Desired, RenderError> {
    // The release is shared, not copied: a large one is megabytes, rendered on every pass.
    let (p, release, vars) = (p.clone(), Arc::clone(release), vars.clone());
    let job = tokio::task::spawn_blocking(move || {
        desired::desired(&p, &release, |k| vars.get(k).cloned(), &inputs)
    });
    match job.await {
        Ok(r) => r,
        // Only a panic inside the render gets here; report it as a failed render.
        Err(e) => Err(RenderError::Stopped(e.to_string())),
    }
}

/// Builds the provider's desired state (capi_components::desired: the render with the
/// provider's settings, the config hash given the running Deployments, the pause, the
/// inventory entry) and checks that the operator can own every object of it.
pub(super) async fn render_objects<P>(
    state: &mut State<'_, P>,
    fetched: &Fetched,
    vars: &BTreeMap<String, String>,
    paused: bool,
) -> Phase<Render> {
    // The mirror first: a malformed setting is reported before anything is read.
    let mirror = image_mirror(state.ctx)?;
    let inputs = desired::Inputs {
        extras: RenderExtras {
            additional_manifests: read_additional_manifests(state.ctx, state.provider).await?,
            mirror,
            limits: fetched.limits,
        },
        contract: Some(fetched.contract.clone()),
        paused,
        installed: state.status.installed_version.clone(),
        hash_key: Some(state.ctx.opts.config_hash_key.clone()),
        running: running_deployments(state.ctx, state.provider),
        inventory: state.ctx.inventory,
    };
    let built =
        match desired_off_the_event_loop(state.provider, &fetched.release, vars, inputs).await {
            Ok(d) => d,
            Err(e) if e.reason() == reason::MISSING_VARIABLES => {
                let message = format!("{e}; {}", not_found::variables_note(state.provider, vars));
                return end(problem(PROVIDER_INSTALLED, e.reason(), message));
            }
            Err(e) => return end(Outcome::failed(PROVIDER_INSTALLED, e)),
        };
    conditions::set(
        &mut state.status.conditions,
        &readiness::manager_configured(&built.managers),
        state.provider.metadata.generation,
    );
    for r in &built.managers {
        for finding in &r.findings {
            debug!(provider = %provider_key(state.provider), deployment = %r.deployment, field = %finding.field, problem = %finding.problem, "manager setting without effect");
        }
    }
    let unowned = capi_cluster_io::installed::unowned_objects(&built.objects);
    if !unowned.is_empty() {
        let message = list_note(
            "the release holds objects of kinds the operator cannot watch, prune or delete, so nothing of it is applied: ",
            &unowned,
            ", ",
            " (the kinds it owns are listed in docs/operator.md)",
        );
        return end(problem(PROVIDER_INSTALLED, reason::UNOWNED_KIND, message));
    }
    ControlFlow::Continue(Render {
        verified: readiness::contract_verified(&built.findings),
        objects: built.objects,
        count: built.rendered,
        entry: built.entry,
        rolled: built.rolled,
    })
}

/// The provider's running Deployments in the index, by namespace and name.
fn running_deployments(ctx: &Ctx, p: &AnyProvider) -> BTreeMap<(String, String), rotation::Live> {
    ctx.world
        .deployments_of(p)
        .iter()
        .map(|d| {
            (
                (d.namespace().unwrap_or_default(), d.name_any()),
                rotation::Live::of(d),
            )
        })
        .collect()
}

/// The event of the Deployments that roll because content they read changed, naming the
/// objects that changed (never their content). Asked before applying: the applier then
/// remembers the new objects as applied, and a Deployment it applied already (the index not
/// showing it yet) is not announced twice.
pub(super) fn rollout_note(ctx: &Ctx, r: &Render) -> Option<Note> {
    let pending = |kind: &str, ns: &str, name: &str| {
        r.objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["namespace"] == ns
                    && o["metadata"]["name"] == name
            })
            .and_then(|o| Some((o, key_of(o).ok()?)))
            .is_some_and(|(o, key)| ctx.applier.needs_apply(o, ctx.world.live(&key).as_ref()))
    };
    let items: Vec<String> = r
        .rolled
        .iter()
        .filter(|d| pending("Deployment", &d.namespace, &d.name))
        .map(|d| {
            let changed: Vec<String> = d
                .sources
                .iter()
                .filter(|src| pending(src.kind.as_str(), &src.namespace, &src.name))
                .map(ToString::to_string)
                .collect();
            let changed = if changed.is_empty() {
                d.sources.iter().map(ToString::to_string).collect()
            } else {
                changed
            };
            format!(
                "Deployment {}/{} ({} changed)",
                d.namespace,
                d.name,
                changed.join(", ")
            )
        })
        .collect();
    (!items.is_empty()).then(|| {
        let note = list_note(
            "rolled so that the managers read the new content: ",
            &items,
            "; ",
            &format!(" (opt out: annotation {ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION}: \"false\")"),
        );
        Note::normal(reason::CONFIG_CHANGE_ROLLED, note)
    })
}

/// The operator-wide image mirror; a malformed setting stops the install before anything is
/// applied, so what is installed keeps running with the images it has.
fn image_mirror(ctx: &Ctx) -> Phase<capi_components::mirror::ImageMirror> {
    match ctx.mirror.current() {
        Some(Ok(m)) => ControlFlow::Continue(m),
        Some(Err(message)) => end(problem(
            PROVIDER_INSTALLED,
            reason::IMAGE_MIRROR_INVALID,
            format!("{message}; fix it, and every provider is rendered again"),
        )),
        // The controllers start once the ConfigMap is listed; this is only a safeguard.
        None => end(problem(
            PROVIDER_INSTALLED,
            reason::IMAGE_MIRROR_INVALID,
            "the image mirror ConfigMap has not been read yet",
        )),
    }
}

async fn read_additional_manifests(ctx: &Ctx, p: &AnyProvider) -> Phase<Option<String>> {
    let missing = |message: String| {
        end(problem(
            PROVIDER_INSTALLED,
            reason::ADDITIONAL_MANIFESTS,
            message,
        ))
    };
    match provider_inputs::additional_manifests(&ctx.client, p).await {
        Ok(Manifests::NotNamed) => ControlFlow::Continue(None),
        Ok(Manifests::Found(text)) => ControlFlow::Continue(Some(text)),
        Ok(Manifests::NoKey {
            namespace,
            name,
            keys,
        }) => missing(format!(
            "ConfigMap {namespace}/{name} has no key \"manifests\"; {}",
            not_found::keys_note(keys.iter())
        )),
        Ok(Manifests::Missing { namespace, name }) => missing(format!(
            "ConfigMap {namespace}/{name} (spec.additionalManifests) does not exist; {}",
            not_found::names_in::<ConfigMap>(&ctx.client, p, &namespace).await
        )),
        Err(e) => {
            let r = p.spec.additional_manifests.as_ref();
            let ns = r
                .and_then(|r| r.namespace.as_deref())
                .unwrap_or(p.namespace());
            let name = r.map(|r| r.name.as_str()).unwrap_or_default();
            let message = format!("reading ConfigMap {ns}/{name}: {e}");
            end(Outcome::transient(
                e,
                PROVIDER_INSTALLED,
                reason::ADDITIONAL_MANIFESTS,
                message,
            ))
        }
    }
}
