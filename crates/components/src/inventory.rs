//! clusterctl's provider inventory: one `providers.clusterctl.cluster.x-k8s.io/v1alpha3`
//! `Provider` object per installed provider, named by the provider's manifest label
//! (`cluster-api`, `bootstrap-kubeadm`, `infrastructure-aws`, ...) in the provider's namespace.
//! `clusterctl upgrade plan`, `describe`, `move` and `delete` find providers only through it, so
//! the operator keeps an entry for every provider it installs, written the way clusterctl
//! writes its own (same name, labels and fields). Pure: building the objects, no client.

use capi_operator_api::{AnyProvider, ProviderType};
use serde_json::{Value, json};

use crate::before_apply::label_owned;

/// API group of the inventory.
pub const GROUP: &str = "clusterctl.cluster.x-k8s.io";
/// The inventory's (only) API version.
pub const VERSION: &str = "v1alpha3";
/// apiVersion of inventory objects.
pub const API_VERSION: &str = "clusterctl.cluster.x-k8s.io/v1alpha3";
/// Kind of inventory objects.
pub const KIND: &str = "Provider";
/// Name of the inventory CRD.
pub const CRD_NAME: &str = "providers.clusterctl.cluster.x-k8s.io";
pub use crate::pipeline::{CLUSTERCTL_LABEL, PROVIDER_LABEL};
/// Label clusterctl puts on its own objects (the inventory CRD and entries).
pub const CORE_LABEL: &str = "clusterctl.cluster.x-k8s.io/core";
/// [`CORE_LABEL`]'s value on inventory objects.
pub const CORE_LABEL_INVENTORY: &str = "inventory";

/// The inventory entry for `p` at `version`, labelled as installed by `p` (so the operator's
/// caches prune it, repair it and delete it with the provider's other objects).
pub fn entry(p: &AnyProvider, version: &str) -> Value {
    let label = p.provider_type.manifest_label(p.name());
    let mut objects = [json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": label,
            "namespace": p.namespace(),
            "labels": {
                CLUSTERCTL_LABEL: "",
                PROVIDER_LABEL: label,
                CORE_LABEL: CORE_LABEL_INVENTORY,
            },
        },
        "providerName": p.name(),
        "type": p.provider_type.kind(),
        "version": version,
    })];
    label_owned(&mut objects, p);
    let [entry] = objects;
    entry
}

/// Whether `o` is an inventory entry.
pub fn is_entry(o: &Value) -> bool {
    o.get("apiVersion").and_then(Value::as_str) == Some(API_VERSION)
        && o.get("kind").and_then(Value::as_str) == Some(KIND)
}

/// The version an inventory object records, if any.
pub fn version_of(o: &Value) -> Option<&str> {
    o.get("version").and_then(Value::as_str)
}

/// The provider type an inventory object records (clusterctl writes the kind, e.g.
/// `CoreProvider`).
pub fn type_of(o: &Value) -> Option<ProviderType> {
    o.get("type")
        .and_then(Value::as_str)
        .and_then(ProviderType::from_kind)
}

/// The inventory CRD, for clusters where clusterctl never ran. Same group, names, version and
/// fields as the one clusterctl installs, so either tool finds the other's entries; labelled as
/// clusterctl labels its own (`clusterctl.cluster.x-k8s.io/core: inventory`, and not with
/// [`CLUSTERCTL_LABEL`], which would make `clusterctl move` treat entries as objects to move).
pub fn crd() -> Value {
    let string = |description: &str| json!({"type": "string", "description": description});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {CORE_LABEL: CORE_LABEL_INVENTORY},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": "ProviderList",
                "plural": "providers",
                "singular": "provider",
                "categories": ["cluster-api"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "additionalPrinterColumns": [
                    {"name": "Type", "type": "string", "jsonPath": ".type"},
                    {"name": "Provider", "type": "string", "jsonPath": ".providerName"},
                    {"name": "Version", "type": "string", "jsonPath": ".version"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "An installed Cluster API provider, as clusterctl records it.",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "providerName": string("The provider's name, e.g. kubeadm."),
                        "type": string("The provider's type, e.g. BootstrapProvider."),
                        "version": string("The installed version."),
                        "watchedNamespace": string("Deprecated: the namespace the controller watches; empty for all."),
                    },
                }},
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL};

    fn provider(kind: &str, name: &str, ns: &str) -> AnyProvider {
        AnyProvider::from_value(json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"version": "v1.12.0"},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn entries_are_named_and_labelled_as_clusterctl_names_them() {
        for (kind, name, label) in [
            ("CoreProvider", "cluster-api", "cluster-api"),
            ("BootstrapProvider", "kubeadm", "bootstrap-kubeadm"),
            ("ControlPlaneProvider", "kubeadm", "control-plane-kubeadm"),
            ("InfrastructureProvider", "aws", "infrastructure-aws"),
            ("IPAMProvider", "in-cluster", "ipam-in-cluster"),
            ("RuntimeExtensionProvider", "test", "runtime-extension-test"),
            ("AddonProvider", "helm", "addon-helm"),
        ] {
            let e = entry(&provider(kind, name, "ns1"), "v1.2.3");
            assert!(is_entry(&e));
            assert_eq!(e["metadata"]["name"], label, "{kind}");
            assert_eq!(e["metadata"]["namespace"], "ns1");
            assert_eq!(e["providerName"], name);
            assert_eq!(e["type"], kind);
            assert_eq!(version_of(&e), Some("v1.2.3"));
            assert_eq!(type_of(&e).map(ProviderType::kind), Some(kind));
            let labels = &e["metadata"]["labels"];
            assert_eq!(labels[CLUSTERCTL_LABEL], "");
            assert_eq!(labels[PROVIDER_LABEL], label);
            assert_eq!(labels[CORE_LABEL], "inventory");
            assert_eq!(labels[OWNER_KIND_LABEL], kind);
            assert_eq!(labels[OWNER_NAME_LABEL], name);
            assert_eq!(labels[OWNER_NAMESPACE_LABEL], "ns1");
        }
    }

    #[test]
    fn the_crd_serves_clusterctls_version_and_is_not_a_move_type() {
        let c = crd();
        assert_eq!(c["metadata"]["name"], CRD_NAME);
        assert_eq!(c["spec"]["group"], GROUP);
        assert_eq!(c["spec"]["versions"][0]["name"], VERSION);
        assert_eq!(c["spec"]["versions"][0]["storage"], true);
        assert!(c["metadata"]["labels"].get(CLUSTERCTL_LABEL).is_none());
        let props = &c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        for f in ["providerName", "type", "version", "watchedNamespace"] {
            assert_eq!(props[f]["type"], "string", "{f}");
        }
        assert!(!is_entry(&c));
    }
}
