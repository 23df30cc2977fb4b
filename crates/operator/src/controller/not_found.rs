//! What was found where a provider's spec names something missing: the Secrets or ConfigMaps
//! of the namespace (names only), the keys a Secret or ConfigMap has (never values). A message
//! saying only "not found" leaves the user guessing between a typo, a wrong namespace and a
//! wrong key; these notes show which it is. Each is cut to a short list
//! ([`capi_operator_api::note::found_note`]).

use std::collections::BTreeMap;

use capi_operator_api::{AnyProvider, note::found_note};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::{
    Api, Client, Resource,
    api::{ListParams, PartialObjectMeta},
    core::NamespaceResourceScope,
};

/// "Secrets in ns: a, b" (names, newest listing of the namespace), "there is no Secret in ns",
/// or why they could not be listed. Names are listed only for the provider's own namespace:
/// a provider may name any namespace, and whoever may write a provider must not learn through
/// its conditions which Secrets another namespace holds.
pub async fn names_in<K>(client: &Client, p: &AnyProvider, ns: &str) -> String
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned,
    K: std::fmt::Debug,
{
    let kind = K::kind(&());
    if ns != p.namespace() {
        return other_namespace_note(&kind, ns);
    }
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.list_metadata(&ListParams::default()).await {
        Ok(list) => {
            let names: Vec<String> = list
                .items
                .iter()
                .filter_map(|o: &PartialObjectMeta<K>| o.metadata.name.clone())
                .collect();
            names_note(&kind, ns, &names)
        }
        Err(e) => format!("the {kind}s of {ns} could not be listed: {e}"),
    }
}

fn names_note(kind: &str, ns: &str, names: &[String]) -> String {
    found_note(
        &format!("{kind}s in {ns}: "),
        names,
        &format!("there is no {kind} in {ns}"),
    )
}

/// Why no names are listed for a namespace other than the provider's own.
fn other_namespace_note(kind: &str, ns: &str) -> String {
    format!("the {kind}s of {ns} are not listed, as it is not the provider's namespace")
}

/// "it has keys a, b" or "it has no keys", from the keys alone.
pub fn keys_note<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    let keys: Vec<String> = keys.cloned().collect();
    found_note("it has keys ", &keys, "it has no keys")
}

/// The variables there are when some the release needs are missing: the keys of the provider's
/// Secret (`vars` holds its data), or that no Secret is set.
pub fn variables_note(p: &AnyProvider, vars: &BTreeMap<String, String>) -> String {
    let Some(name) = p.spec.secret_name.as_deref().filter(|s| !s.is_empty()) else {
        return "no spec.configSecret is set, so no variable is".into();
    };
    let ns = p.spec.secret_namespace.as_deref().unwrap_or(p.namespace());
    format!(
        "Secret {ns}/{name} (spec.configSecret) is read; {}",
        keys_note(vars.keys())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys_are_listed_and_values_never() {
        let names = vec!["capi-variables".to_string(), "other".to_string()];
        assert_eq!(
            names_note("Secret", "ns", &names),
            "Secrets in ns: capi-variables, other"
        );
        assert_eq!(names_note("Secret", "ns", &[]), "there is no Secret in ns");
        let mut p = AnyProvider::from_value(serde_json::json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1", "kind": "CoreProvider",
            "metadata": {"name": "cluster-api", "namespace": "capi-system"}, "spec": {}}))
        .unwrap();
        let vars = BTreeMap::from([
            ("AWS_REGION".to_string(), "s3cr3t-value".to_string()),
            ("EXP_X".to_string(), "another-value".to_string()),
        ]);
        assert!(variables_note(&p, &vars).contains("no spec.configSecret"));
        p.spec.secret_name = Some("vars".into());
        let note = variables_note(&p, &vars);
        assert_eq!(
            note,
            "Secret capi-system/vars (spec.configSecret) is read; it has keys AWS_REGION, EXP_X"
        );
        assert!(!note.contains("s3cr3t") && !note.contains("another-value"));
        assert_eq!(
            variables_note(&p, &BTreeMap::new()),
            "Secret capi-system/vars (spec.configSecret) is read; it has no keys"
        );
    }
}
