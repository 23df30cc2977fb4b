//! The owner labels that name the provider which installed an object, read in one place so
//! that the operator's index, its wakes and its deletion policy agree on what a provider owns.

use std::collections::BTreeMap;

use crate::{
    AnyProvider, OWNER_API_LABEL, OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
    ProviderType,
};

/// The provider an object's owner labels name (type, namespace, name).
pub fn owner_of(labels: &BTreeMap<String, String>) -> Option<(ProviderType, String, String)> {
    Some((
        ProviderType::from_kind(labels.get(OWNER_KIND_LABEL)?)?,
        labels.get(OWNER_NAMESPACE_LABEL)?.clone(),
        labels.get(OWNER_NAME_LABEL)?.clone(),
    ))
}

/// The provider an installed object names as its installer: the API label, type, namespace
/// and name of its owner labels.
pub type Owner = (Option<String>, ProviderType, String, String);

/// The [`Owner`] an object's labels name, if they name one.
pub fn owner_key(labels: &BTreeMap<String, String>) -> Option<Owner> {
    let (t, ns, name) = owner_of(labels)?;
    Some((labels.get(OWNER_API_LABEL).cloned(), t, ns, name))
}

/// Whether an object in `namespace` (`None`: cluster-scoped) may claim `owner`. The operator
/// puts every namespaced object of a provider in the provider object's own namespace, so a
/// namespaced object elsewhere claiming it was labelled by someone else: anyone who may create
/// a ConfigMap in their own namespace can write the labels, and such a claim must neither steer
/// the provider's state nor get the object pruned. Cluster-scoped objects take cluster-wide
/// rights to create, and keep their claim.
pub fn claim_holds(owner: &Owner, namespace: Option<&str>) -> bool {
    namespace.is_none_or(|ns| ns == owner.2)
}

/// The [`Owner`] an object in `namespace` names, when its claim holds ([`claim_holds`]).
pub fn owner_key_at(labels: &BTreeMap<String, String>, namespace: Option<&str>) -> Option<Owner> {
    owner_key(labels).filter(|o| claim_holds(o, namespace))
}

/// The [`Owner`] labels of objects `p` installs carry.
pub fn owner_of_provider(p: &AnyProvider) -> Owner {
    (
        p.api.owner_label().map(str::to_string),
        p.provider_type,
        p.namespace().to_string(),
        p.name().to_string(),
    )
}

/// Whether an object's labels name `p` as its installer.
pub fn owned_by(labels: &BTreeMap<String, String>, p: &AnyProvider) -> bool {
    owner_key(labels).is_some_and(|o| o == owner_of_provider(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ProviderApi, ProviderSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn provider(api: ProviderApi) -> AnyProvider {
        AnyProvider {
            api,
            provider_type: ProviderType::Core,
            metadata: ObjectMeta {
                name: Some("cluster-api".into()),
                namespace: Some("capi-system".into()),
                ..Default::default()
            },
            spec: ProviderSpec::default(),
            status: None,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A namespaced object claims a provider only from the provider's own namespace, where the
    /// operator installs; a cluster-scoped one keeps its claim.
    #[test]
    fn a_namespaced_claim_holds_only_in_the_providers_namespace() {
        let l = labels(&[
            (OWNER_KIND_LABEL, "CoreProvider"),
            (OWNER_NAMESPACE_LABEL, "capi-system"),
            (OWNER_NAME_LABEL, "cluster-api"),
        ]);
        let core = Some((
            None,
            ProviderType::Core,
            "capi-system".into(),
            "cluster-api".into(),
        ));
        assert_eq!(owner_key_at(&l, Some("capi-system")), core);
        assert_eq!(owner_key_at(&l, None), core);
        assert_eq!(owner_key_at(&l, Some("tenant-a")), None);
    }

    #[test]
    fn the_owner_labels_and_the_api_label_name_one_provider() {
        let ours = provider(ProviderApi::Management);
        let go = provider(ProviderApi::ClusterApiOperator);
        let base = [
            (OWNER_KIND_LABEL, "CoreProvider"),
            (OWNER_NAMESPACE_LABEL, "capi-system"),
            (OWNER_NAME_LABEL, "cluster-api"),
        ];
        let plain = labels(&base);
        assert!(owned_by(&plain, &ours));
        assert!(
            !owned_by(&plain, &go),
            "a v1alpha2 provider never claims ours"
        );
        let mut of_go = plain.clone();
        of_go.insert(OWNER_API_LABEL.into(), crate::v1alpha2::GROUP.into());
        assert!(owned_by(&of_go, &go));
        assert!(!owned_by(&of_go, &ours));
        let elsewhere = labels(&[base[0], (OWNER_NAMESPACE_LABEL, "other"), base[2]]);
        assert!(!owned_by(&elsewhere, &ours));
        assert_eq!(owner_of(&labels(&base[..2])), None, "a name is required");
    }
}
