//! What a reconcile is handed: the cluster, the index, the applier and the bookkeeping shared
//! by the controllers, and the names a provider goes by in that bookkeeping.

use std::collections::BTreeMap;

use capi_operator_api::AnyProvider;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;

use super::{Options, apply::Applier, events, inputs, readiness, world::World};

/// Everything a reconcile needs.
pub struct Ctx {
    /// The cluster.
    pub client: Client,
    /// The caches.
    pub world: World,
    /// Applies rendered objects.
    pub applier: Applier,
    /// Publishes events on provider objects.
    pub recorder: events::Events,
    /// Settings.
    pub opts: Options,
    /// Consecutive transient failures per provider, for exponential backoff.
    pub failures: std::sync::Mutex<BTreeMap<String, u32>>,
    /// Readiness rechecks of unready providers and looks at blocked deletions, with back-off.
    pub rechecks: readiness::Rechecks,
    /// Releases the release cache could not keep (`provider@version`): how many times they
    /// were fetched and when last, so fetching them again waits for the back-off.
    pub uncached: std::sync::Mutex<BTreeMap<String, (u32, std::time::Instant)>>,
    /// Whether providers get clusterctl inventory entries (asked for, and the CRD is served).
    pub inventory: bool,
    /// Watches of the Secrets and ConfigMaps providers read.
    pub inputs: inputs::InputWatches,
}

/// The owner reference the operator's own objects (release caches) carry.
pub fn owner_reference(p: &AnyProvider) -> OwnerReference {
    OwnerReference {
        api_version: p.api.api_version(),
        kind: p.provider_type.kind().to_string(),
        name: p.name().to_string(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// Key of a provider for bookkeeping maps.
pub fn provider_key(p: &AnyProvider) -> String {
    format!("{}/{}/{}", p.provider_type.kind(), p.namespace(), p.name())
}
