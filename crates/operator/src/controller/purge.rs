//! The API side of `deletionPolicy: Purge`: what a provider's namespace holds, for
//! [`super::decide::deletion::foreign`] to tell the provider's own objects from everyone
//! else's before the namespace is removed.

use capi_operator_api::AnyProvider;
use kube::{
    Api,
    api::{DynamicObject, ListParams, PartialObjectMeta},
    discovery::{Discovery, Scope, verbs},
};
use tracing::debug;

use super::{
    context::Ctx,
    decide::deletion::{self, Found},
    labels,
};

/// The objects in `ns` that removing it would destroy although `p` did not install them (see
/// [`deletion::foreign`]), every namespaced kind the cluster serves looked at (the operator
/// may list every kind). A kind that cannot be listed is named too: what it holds is unknown,
/// so the namespace must not go.
pub async fn foreign_in(ctx: &Ctx, p: &AnyProvider, ns: &str) -> Result<Vec<String>, kube::Error> {
    let discovery = match Discovery::new(ctx.client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(e) => {
            debug!(error = %e, "aggregated discovery unavailable; discovering group by group");
            Discovery::new(ctx.client.clone()).run().await?
        }
    };
    let mut found = Vec::new();
    let mut unlisted = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::namespaced_with(ctx.client.clone(), ns, &ar);
            match api.list_metadata(&ListParams::default()).await {
                Ok(list) => found.extend(
                    list.items
                        .into_iter()
                        .map(|o| (ar.group.clone(), ar.kind.clone(), o.metadata)),
                ),
                Err(e) => unlisted.push(format!("{} (cannot be listed: {e})", ar.kind)),
            }
        }
    }
    let selector = p
        .spec
        .fetch_config
        .as_ref()
        .and_then(|f| f.selector.clone())
        .unwrap_or_default();
    let objects = found
        .iter()
        .map(|(group, kind, meta)| Found { group, kind, meta });
    let mut out = deletion::foreign(p, ns, objects, |l| labels::matches(&selector, l));
    out.extend(unlisted);
    Ok(out)
}
