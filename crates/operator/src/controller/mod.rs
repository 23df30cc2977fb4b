//! The controllers: one per provider kind, all driving the generic reconciler in
//! [`reconcile`]. The watches feed an index ([`world`]) of the providers, of what the operator
//! installed (to repair drift, prune and report readiness) and of the Secrets and ConfigMaps
//! providers read (to re-render when they change); the changes that concern a provider
//! ([`wake`]) are routed to its controller. [`runtime`] starts all of it and holds leadership.

pub mod apply;
pub mod budget;
pub mod context;
pub mod decide;
use decide::readiness;
pub mod events;
mod found;
pub mod inputs;
pub mod install;
pub mod inventory;
pub mod labels;
pub mod options;
pub mod owned;
pub mod reconcile;
pub mod report;
pub mod runtime;
pub mod served;
pub mod source;
#[cfg(test)]
mod testing;
pub mod wake;
pub mod world;

pub use context::{Ctx, owner_reference, provider_key};
pub use options::Options;
pub use owned::{OwnedKind, OwnedKinds};
pub use runtime::run;
pub use world::{World, owned_by};

/// Field manager of everything the operator applies.
pub const FIELD_MANAGER: &str = "capi-provider-operator";
pub use capi_operator_api::{
    OWNER_API_LABEL, OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
};

/// Kinds watched for drift repair and pruning (`group`, `version`, `kind`), from the moment
/// the cluster serves them (see [`owned`]). Objects of other kinds in a release are applied but
/// neither pruned nor repaired.
pub const OWNED_KINDS: &[(&str, &str, &str)] = &[
    ("", "v1", "Namespace"),
    ("", "v1", "ServiceAccount"),
    ("", "v1", "Service"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Secret"),
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "DaemonSet"),
    ("apps", "v1", "StatefulSet"),
    ("rbac.authorization.k8s.io", "v1", "Role"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
    ),
    ("cert-manager.io", "v1", "Certificate"),
    ("cert-manager.io", "v1", "Issuer"),
    // clusterctl's inventory entries (see [`inventory`]).
    ("clusterctl.cluster.x-k8s.io", "v1alpha3", "Provider"),
];
