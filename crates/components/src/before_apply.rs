//! The last step before objects reach the cluster, shared by the operator and its `render`
//! command so that what `render` prints is exactly what the operator applies: owner labels,
//! the zero-replica scaling of a paused provider, and the removal of fields the apiserver owns.

use capi_operator_api::{
    AnyProvider, ORIGINAL_REPLICAS_ANNOTATION, OWNER_API_LABEL, OWNER_KIND_LABEL, OWNER_NAME_LABEL,
    OWNER_NAMESPACE_LABEL,
};
use serde_json::{Value, json};

/// Whether the provider runs, and for a paused one, what is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Deployments run with the replicas the release and the spec say.
    Running,
    /// Every Deployment at zero replicas. Unless the version changes (the pause → upgrade →
    /// unpause sequence of a contract change), a paused provider is otherwise left as it is:
    /// only its Deployments are applied.
    Paused {
        /// The version being applied differs from the installed one.
        version_changes: bool,
    },
}

/// Turns rendered objects into the objects the operator applies for `p`.
pub fn finalize(objects: &mut Vec<Value>, p: &AnyProvider, pause: Pause) {
    label_owned(objects, p);
    objects.iter_mut().for_each(drop_apiserver_owned_fields);
    if let Pause::Paused { version_changes } = pause {
        objects.iter_mut().for_each(scale_to_zero);
        if !version_changes {
            objects.retain(|o| kind_of(o) == Some("Deployment"));
        }
    }
}

fn kind_of(o: &Value) -> Option<&str> {
    o.get("kind").and_then(Value::as_str)
}

/// Labels every object with the provider that installs it, so the caches can find all of a
/// provider's objects for drift repair, pruning and deletion.
pub fn label_owned(objects: &mut [Value], p: &AnyProvider) {
    for o in objects.iter_mut() {
        let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert(OWNER_KIND_LABEL.into(), p.provider_type.kind().into());
            l.insert(OWNER_NAME_LABEL.into(), p.name().into());
            l.insert(OWNER_NAMESPACE_LABEL.into(), p.namespace().into());
            if let Some(api) = p.api.owner_label() {
                l.insert(OWNER_API_LABEL.into(), api.into());
            }
        }
    }
}

/// An aggregated ClusterRole's `rules` belong to the apiserver's aggregation controller:
/// applying the release's empty list would take them over and the two would undo each other
/// forever.
pub fn drop_apiserver_owned_fields(obj: &mut Value) {
    if kind_of(obj) == Some("ClusterRole")
        && obj.get("aggregationRule").is_some()
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("rules");
    }
}

/// Scales a Deployment to 0, recording its replica count in the annotation the specification
/// names; unpausing renders the original count again. Other kinds are left alone.
pub fn scale_to_zero(o: &mut Value) {
    if kind_of(o) != Some("Deployment") {
        return;
    }
    let replicas = o
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("replicas".into(), json!(0));
    }
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = ann.as_object_mut() {
            a.insert(
                ORIGINAL_REPLICAS_ANNOTATION.into(),
                json!(replicas.to_string()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> AnyProvider {
        AnyProvider::from_value(json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": "CoreProvider",
            "metadata": {"name": "cluster-api", "namespace": "capi-system"},
            "spec": {"version": "v1.12.0"},
        }))
        .unwrap()
    }

    fn objects() -> Vec<Value> {
        vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "m", "namespace": "capi-system"},
                   "spec": {"replicas": 3}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "agg"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]},
                   "rules": []}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "plain"}, "rules": [{"verbs": ["get"]}]}),
        ]
    }

    #[test]
    fn every_object_names_its_provider() {
        let mut o = objects();
        finalize(&mut o, &provider(), Pause::Running);
        for obj in &o {
            let labels = &obj["metadata"]["labels"];
            assert_eq!(labels[OWNER_KIND_LABEL], "CoreProvider");
            assert_eq!(labels[OWNER_NAME_LABEL], "cluster-api");
            assert_eq!(labels[OWNER_NAMESPACE_LABEL], "capi-system");
        }
        assert_eq!(o[0]["spec"]["replicas"], 3);
    }

    #[test]
    fn aggregated_cluster_roles_lose_their_rules_and_others_keep_them() {
        let mut o = objects();
        finalize(&mut o, &provider(), Pause::Running);
        assert!(o[1].get("rules").is_none());
        assert_eq!(o[2]["rules"][0]["verbs"][0], "get");
    }

    #[test]
    fn paused_deployments_run_zero_replicas_and_remember_theirs() {
        // (version changes, objects kept)
        for (version_changes, kept) in [(true, 3), (false, 1)] {
            let mut o = objects();
            finalize(&mut o, &provider(), Pause::Paused { version_changes });
            assert_eq!(o.len(), kept, "version_changes={version_changes}");
            assert_eq!(o[0]["spec"]["replicas"], 0);
            assert_eq!(
                o[0]["metadata"]["annotations"][ORIGINAL_REPLICAS_ANNOTATION],
                "3"
            );
        }
    }

    #[test]
    fn a_deployment_without_replicas_remembers_one() {
        let mut d = json!({"kind": "Deployment", "metadata": {}, "spec": {}});
        scale_to_zero(&mut d);
        assert_eq!(
            d["metadata"]["annotations"][ORIGINAL_REPLICAS_ANNOTATION],
            "1"
        );
        let mut cm = json!({"kind": "ConfigMap", "metadata": {}});
        scale_to_zero(&mut cm);
        assert!(cm["metadata"].get("annotations").is_none());
    }
}
