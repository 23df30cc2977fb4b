//! clusterctl's inventory (`providers.clusterctl.cluster.x-k8s.io`) kept for the providers the
//! operator installs, so `clusterctl upgrade plan`, `describe` and `move` keep working on an
//! operator-managed management cluster.
//!
//! The CRD is created at startup when the cluster has none (one clusterctl installed is left as
//! it is: both define the same schema). Each provider's entry is applied with the provider's
//! other objects and labelled as theirs, so the caches repair it, prune it and delete it with
//! the provider. An entry whose recorded version was changed by someone else — `clusterctl
//! upgrade apply` rewrites it after replacing the components — is restored to the declared
//! version together with every other object, and an event says so.

use capi_components::inventory::{self, CRD_NAME, GROUP, KIND, VERSION};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, PostParams},
};
use serde_json::Value;
use tracing::{info, warn};

/// Makes sure the inventory CRD is served; true when entries can be written. Never fails the
/// operator: without the CRD (no permission, a CRD of another shape) the operator runs without
/// an inventory and says why in its log.
pub async fn ensure_crd(client: &Client) -> bool {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let existing = match api.get_opt(CRD_NAME).await {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "cannot read the clusterctl inventory CRD; providers get no inventory entries");
            return false;
        }
    };
    match existing {
        Some(c) if !serves_v1alpha3(&c) => {
            warn!(
                crd = CRD_NAME,
                "the clusterctl inventory CRD does not serve {VERSION}; providers get no inventory entries"
            );
            false
        }
        Some(_) => established(client).await,
        None => create(&api).await && established(client).await,
    }
}

fn serves_v1alpha3(c: &CustomResourceDefinition) -> bool {
    c.spec
        .versions
        .iter()
        .any(|v| v.name == VERSION && v.served)
}

async fn create(api: &Api<CustomResourceDefinition>) -> bool {
    let crd: CustomResourceDefinition = match serde_json::from_value(inventory::crd()) {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "the clusterctl inventory CRD does not parse");
            return false;
        }
    };
    match api.create(&PostParams::default(), &crd).await {
        Ok(_) => {
            info!(crd = CRD_NAME, "created the clusterctl inventory CRD");
            true
        }
        // Another replica (or clusterctl) created it meanwhile.
        Err(kube::Error::Api(s)) if s.code == 409 => true,
        Err(e) => {
            warn!(error = %e, "cannot create the clusterctl inventory CRD; providers get no inventory entries");
            false
        }
    }
}

async fn established(client: &Client) -> bool {
    match super::apply::wait_established(client, CRD_NAME, super::apply::ESTABLISHED_TIMEOUT).await
    {
        Ok(()) => true,
        Err(e) => {
            warn!(crd = CRD_NAME, error = %e, "the clusterctl inventory CRD is not Established; providers get no inventory entries");
            false
        }
    }
}

/// The version the live inventory entry of `entry` records, if the entry exists.
pub async fn recorded_version(
    client: &Client,
    entry: &Value,
) -> Result<Option<String>, kube::Error> {
    let ns = entry
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = entry
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, VERSION, KIND));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let live = api.get_opt(name).await?;
    Ok(live.and_then(|o| inventory::version_of(&o.data).map(str::to_string)))
}

/// The event text when an entry said `found` instead of the declared `version`: someone
/// changed the provider outside the operator, and the operator put the declared state back.
pub fn reverted_note(entry: &str, found: &str, version: &str) -> String {
    format!(
        "clusterctl's inventory entry {entry} said {found}: the provider was changed outside the operator (e.g. by `clusterctl upgrade apply`); the declared {version} is applied again and recorded. To change the version, edit spec.version"
    )
}
