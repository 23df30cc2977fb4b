//! What wakes a provider, and how a wake reaches its controller. A watched object's change
//! concerns a provider only when it moves what that provider's reconcile reads: the index
//! ([`super::index`]) keeps, per object, a hash of that (the functions here) and compares the
//! entry a change brings with the one it replaces; only a difference (or a deletion) is routed.

use std::collections::BTreeMap;

use capi_operator_api::{AnyProvider, ProviderType};
use futures::{Stream, StreamExt};
use k8s_openapi::{api::apps::v1::Deployment, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tracing::warn;

use capi_cluster_io::provider_kind::ProviderKind;

/// A provider a watched object concerns: its type, namespace and name.
pub type Target = (ProviderType, String, String);

/// A background task: a watch, or a controller.
pub type Task = std::pin::Pin<Box<dyn futures::Future<Output = ()> + Send>>;

pub use capi_operator_api::owner::owner_of;

/// Routes watch events to the controllers of the provider they concern: those of its type in
/// every served API (the one without such an object drops the request).
#[derive(Clone, Default)]
pub struct Triggers {
    senders: BTreeMap<ProviderType, Vec<mpsc::UnboundedSender<(String, String)>>>,
}

impl Triggers {
    /// Adds the channel of the controller of type `t` of one API.
    pub fn add(&mut self, t: ProviderType, tx: mpsc::UnboundedSender<(String, String)>) {
        self.senders.entry(t).or_default().push(tx);
    }

    /// Wakes the provider `target` names.
    pub fn send(&self, (t, namespace, name): &Target) {
        for s in self.senders.get(t).into_iter().flatten() {
            // A closed channel means the controller is shutting down; nothing to route to.
            let _ = s.send((namespace.clone(), name.clone()));
        }
    }
}

/// Routes the objects of a watch to the controllers of the providers `targets` names.
pub fn route<K, S>(
    stream: S,
    triggers: Triggers,
    mut targets: impl FnMut(&K) -> Vec<Target> + Send + 'static,
) -> Task
where
    K: Send + 'static,
    S: Stream<Item = Result<K, watcher::Error>> + Send + 'static,
{
    Box::pin(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(o) => {
                    for t in targets(&o) {
                        triggers.send(&t);
                    }
                }
                Err(e) => warn!(error = %e, "watch failed; retrying"),
            }
        }
    })
}

/// What of a provider object, when it changes, calls for a reconcile: everything but its
/// status. The status is the reconciler's own output, and each write of it (several while a
/// provider installs) would otherwise bring another full pass; the cache still sees it.
pub fn what_wakes_a_provider<P: ProviderKind>(p: &P) -> Option<u64> {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash_spec_side(kube::Resource::meta(p), &mut h);
    Some(h.finish())
}

/// Hashes what of an object's metadata moves when anything but its status is written: which
/// object it is, its generation (the spec), deletion, finalizers, labels and annotations.
fn hash_spec_side(m: &ObjectMeta, h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    (
        &m.uid,
        m.generation,
        m.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
        &m.finalizers,
        &m.labels,
        &m.annotations,
    )
        .hash(h);
}

/// What of an installed object concerns its provider. For kinds whose spec changes move
/// `metadata.generation` and whose status other controllers write (the ones drift repair
/// reads that way, [`super::apply::GENERATION_KINDS`]): everything in the metadata but the
/// resourceVersion and the status writers' entries. For the others any change, since their
/// content changes move nothing but the resourceVersion. A rollout rewrites a Deployment's
/// status a few times per replica and a new CRD's status twice; none of those concern it.
pub fn what_wakes_for_installed(generation_kind: bool, meta: &ObjectMeta) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if !generation_kind {
        meta.resource_version.hash(&mut h);
        return h.finish();
    }
    hash_spec_side(meta, &mut h);
    for m in meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() != Some("status"))
    {
        (
            &m.manager,
            &m.operation,
            m.time.as_ref().map(|t| t.0.as_second()),
        )
            .hash(&mut h);
    }
    h.finish()
}

/// What of an installed Deployment concerns its provider: its metadata, as for the other
/// installed objects, and of its status only what readiness reads
/// ([`capi_operator_api::rollout::availability`], whose message names the rollout's progress).
pub fn what_wakes_for_a_deployment(d: &Deployment) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    what_wakes_for_installed(true, &d.metadata).hash(&mut h);
    capi_operator_api::rollout::availability(d).hash(&mut h);
    h.finish()
}

/// Whether a provider's last install stopped because cert-manager is missing.
pub fn waits_for_cert_manager(p: &AnyProvider) -> bool {
    p.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.reason == capi_operator_api::conditions::reason::CERT_MANAGER_NOT_INSTALLED)
    })
}

/// What the other providers' reconciles read of a core provider (readiness, pause, contract,
/// version, deletion; see `preflight::ready_core` and the contract checks): a change of the
/// core provider that leaves this equal concerns none of them.
#[derive(Clone, PartialEq)]
pub struct CoreSeen {
    generation: Option<i64>,
    deleting: bool,
    installed_version: Option<String>,
    contract: Option<String>,
    conditions: Vec<(String, String, String)>,
}

impl CoreSeen {
    /// What the others read of `core`.
    pub fn of(core: &AnyProvider) -> CoreSeen {
        let status = core.status.clone().unwrap_or_default();
        CoreSeen {
            generation: core.metadata.generation,
            deleting: core.metadata.deletion_timestamp.is_some(),
            installed_version: status.installed_version,
            contract: status.contract,
            conditions: status
                .conditions
                .into_iter()
                .map(|c| (c.type_, c.status, c.reason))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_writes_wake_nobody_for_generation_kinds_only() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let meta = |rv: &str, generation: i64, label: &str| ObjectMeta {
            resource_version: Some(rv.into()),
            generation: Some(generation),
            labels: Some([("l".to_string(), label.to_string())].into()),
            ..Default::default()
        };
        // A CRD's status write moves only its resourceVersion.
        assert_eq!(
            what_wakes_for_installed(true, &meta("1", 1, "a")),
            what_wakes_for_installed(true, &meta("2", 1, "a"))
        );
        assert_ne!(
            what_wakes_for_installed(true, &meta("2", 1, "a")),
            what_wakes_for_installed(true, &meta("3", 1, "b")),
            "a label edit is drift"
        );
        assert_ne!(
            what_wakes_for_installed(true, &meta("3", 1, "a")),
            what_wakes_for_installed(true, &meta("4", 2, "a")),
            "a spec edit is drift"
        );
        // A ConfigMap's or a ClusterRole's content change moves only its resourceVersion.
        assert_ne!(
            what_wakes_for_installed(false, &meta("1", 0, "a")),
            what_wakes_for_installed(false, &meta("2", 0, "a"))
        );
    }
}
