//! The kinds of objects the operator installs, watches for drift and prunes, and which of a
//! provider's installed objects an install removes. The operator watches these kinds; the
//! plugin's `diff` lists them to say what the operator would remove.

use std::collections::BTreeSet;

use capi_operator_api::{AnyProvider, OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL};
use kube::{
    Api, Client,
    api::{DynamicObject, GroupVersionKind, ListParams},
};
use serde_json::Value;

/// Kinds watched for drift repair and pruning (`group`, `version`, `kind`), from the moment
/// the cluster serves them. A release holding an object of another kind is refused before
/// anything of it is applied ([`unowned_objects`]): applied, such an object could be neither
/// repaired, nor pruned when a later version drops it, nor deleted with the provider.
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
    ("cert-manager.io", "v1", "ClusterIssuer"),
    // What provider releases ship beside their managers.
    ("policy", "v1", "PodDisruptionBudget"),
    ("networking.k8s.io", "v1", "NetworkPolicy"),
    ("scheduling.k8s.io", "v1", "PriorityClass"),
    ("batch", "v1", "Job"),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("monitoring.coreos.com", "v1", "ServiceMonitor"),
    ("monitoring.coreos.com", "v1", "PodMonitor"),
    // clusterctl's inventory entries.
    ("clusterctl.cluster.x-k8s.io", "v1alpha3", "Provider"),
];

/// The objects of `objects` whose kind is not among [`OWNED_KINDS`], as `Kind namespace/name`
/// (or `Kind name`): what a release may not hold. The group, not the version, decides: a
/// release may ship an older served version of an owned kind. Custom resources of a CRD the
/// same release ships (a provider's default configuration object) are the provider's own kind:
/// they are allowed, and go with their CRD.
pub fn unowned_objects(objects: &[Value]) -> Vec<String> {
    let own_kinds: Vec<(&str, &str)> = objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition"))
        .filter_map(|crd| {
            Some((
                crd.pointer("/spec/group")?.as_str()?,
                crd.pointer("/spec/names/kind")?.as_str()?,
            ))
        })
        .collect();
    objects
        .iter()
        .filter(|o| {
            let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
            let api_version = o.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            !OWNED_KINDS
                .iter()
                .any(|(g, _, k)| *g == group && *k == kind)
                && !own_kinds.contains(&(group, kind))
        })
        .map(|o| {
            let kind = o.get("kind").and_then(Value::as_str).unwrap_or("?");
            let name = o
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            match o.pointer("/metadata/namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
                _ => format!("{kind} {name}"),
            }
        })
        .collect()
}

/// What this provider installed before but no longer renders. CRDs and namespaces are never
/// pruned (deleting a CRD deletes every custom resource of it), and a paused provider whose
/// version does not change is left as it is.
/// `kind` gives an object key's kind.
pub fn stale<K: Ord, R>(
    installed: Vec<(K, R, bool)>,
    desired: &BTreeSet<K>,
    kind: impl Fn(&K) -> &str,
    paused: bool,
    upgrading: bool,
) -> Vec<(K, R, bool)> {
    if paused && !upgrading {
        return Vec::new();
    }
    installed
        .into_iter()
        .filter(|(k, _, _)| !desired.contains(k))
        .filter(|(k, _, _)| !matches!(kind(k), "CustomResourceDefinition" | "Namespace"))
        .collect()
}

/// Whether an object's labels name `p` as its installer (the API label included, so a
/// provider of the other API group with the same name never claims them).
/// A namespaced object outside the provider's namespace never counts
/// ([`capi_operator_api::owner::claim_holds`]): whoever labelled it there, it is not pruned,
/// compared or deleted with the provider.
pub fn labelled_for(obj: &Value, p: &AnyProvider) -> bool {
    let label = |k: &str| obj.pointer("/metadata/labels").and_then(|l| l.get(k));
    let namespace = obj.pointer("/metadata/namespace").and_then(Value::as_str);
    label(capi_operator_api::OWNER_API_LABEL).and_then(Value::as_str) == p.api.owner_label()
        && namespace.is_none_or(|ns| ns == p.namespace())
}

/// Every object of [`OWNED_KINDS`] the cluster serves that carries `p`'s owner labels, as JSON
/// with apiVersion and kind.
pub async fn installed_objects(
    client: &Client,
    p: &AnyProvider,
) -> Result<Vec<Value>, kube::Error> {
    let selector = format!(
        "{OWNER_KIND_LABEL}={},{OWNER_NAMESPACE_LABEL}={},{OWNER_NAME_LABEL}={}",
        p.provider_type.kind(),
        p.namespace(),
        p.name()
    );
    let mut out = Vec::new();
    for (g, v, k) in OWNED_KINDS {
        let gvk = GroupVersionKind::gvk(g, v, k);
        let (resource, _) = match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(found) => found,
            Err(e) if crate::discovery::is_unserved(&e) => continue,
            Err(e) => return Err(e),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        for o in api.list(&ListParams::default().labels(&selector)).await? {
            let mut v = serde_json::to_value(o).map_err(kube::Error::SerdeError)?;
            if let Some(m) = v.as_object_mut() {
                m.insert("apiVersion".into(), resource.api_version.clone().into());
                m.insert("kind".into(), resource.kind.clone().into());
            }
            if labelled_for(&v, p) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kind_outside_the_owned_ones_is_named_and_owned_ones_pass() {
        let objects = [
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m", "namespace": "ns"}}),
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p", "namespace": "ns"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}),
            json!({"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": {"name": "ca"}}),
            json!({"apiVersion": "apps.example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}}),
            json!({"apiVersion": "own.example.com/v1", "kind": "Setting", "metadata": {"name": "s", "namespace": "ns"}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "settings.own.example.com"},
                   "spec": {"group": "own.example.com", "names": {"kind": "Setting"}}}),
        ];
        assert_eq!(unowned_objects(&objects), ["Widget ns/w", "Pod bare"]);
    }
}
