//! The provider kinds of both API groups: the seven kinds of this operator's API
//! (`operator.cluster.x-k8s.io/v1alpha1` as [`ProviderApi::Management`]) and the seven of
//! cluster-api-operator's `operator.cluster.x-k8s.io/v1alpha2`. What differs between the two
//! is here: how an object is read (a v1alpha2 spec is translated), how its status is shown (in
//! the vocabulary of the API's users), and which finalizers it carries. The operator drives
//! every kind through [`ProviderKind`]; the plugin reads objects of either as dynamic objects
//! ([`read_provider`]).

use std::fmt;

use capi_operator_api::{
    AnyProvider, ProviderApi, ProviderStatus, ProviderType,
    v1alpha2::{self, ConversionError},
};
use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::OwnerReference,
    serde::{Serialize, de::DeserializeOwned},
};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// A provider kind of either API.
pub trait ProviderKind:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + fmt::Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The provider type of this kind.
    const TYPE: ProviderType;
    /// The API of this kind.
    const API: ProviderApi;

    /// The object as the reconciler reads it, with the outcome of translating its spec: the
    /// settings left out (v1alpha2 only), or why the spec cannot be acted on.
    fn view(&self) -> (AnyProvider, Result<Vec<String>, ConversionError>);
}

/// Implements [`ProviderKind`] for the seven kinds `$ty`, in both APIs: in a module's
/// `$module` (whose `Provider` trait gives the type), each read with `$view`.
macro_rules! provider_kinds {
    ($($ty:ident),*) => {
        provider_kinds!(@in ProviderApi::Management, management,
            |p| (AnyProvider::from(p), Ok(Vec::new())), $($ty),*);
        provider_kinds!(@in ProviderApi::ClusterApiOperator, v1alpha2, v1alpha2::view, $($ty),*);
    };
    (@in $api:path, $module:ident, $view:expr, $($ty:ident),*) => {$(
        impl ProviderKind for $module::$ty {
            const TYPE: ProviderType = <Self as $module::Provider>::TYPE;
            const API: ProviderApi = $api;

            fn view(&self) -> (AnyProvider, Result<Vec<String>, ConversionError>) {
                $view(self)
            }
        }
    )*};
}

use capi_operator_api as management;

provider_kinds!(
    CoreProvider,
    BootstrapProvider,
    ControlPlaneProvider,
    InfrastructureProvider,
    IPAMProvider,
    RuntimeExtensionProvider,
    AddonProvider
);

/// The status as the provider's API shows it: unchanged for this operator's API; for v1alpha2,
/// in cluster-api-operator's vocabulary ([`v1alpha2::go_status`]), which the tooling of its
/// users waits on. Applying it twice changes nothing, so a status read back compares equal.
pub fn shown(api: ProviderApi, status: &ProviderStatus) -> ProviderStatus {
    match api {
        ProviderApi::Management => status.clone(),
        ProviderApi::ClusterApiOperator => v1alpha2::go_status(status),
    }
}

/// Whether cluster-api-operator still manages a v1alpha2 object: it carries that operator's
/// finalizer. Such objects are left alone until `kubectl capi-providers migrate` has stopped
/// that operator and removed its finalizer, so that two operators never act on one object.
pub fn held_by_cluster_api_operator(p: &AnyProvider) -> bool {
    p.api == ProviderApi::ClusterApiOperator
        && p.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == v1alpha2::FINALIZER)
}

/// The resource of provider type `t` in `api`.
pub fn provider_resource(api: ProviderApi, t: ProviderType) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(api.group(), api.version(), t.kind()),
        t.plural(),
    )
}

/// The owner reference naming the provider object `p` as the controller of what it owns.
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

/// Why a provider object read as a dynamic object is not a provider.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The object does not serialize.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The object is not a provider of its kind.
    #[error("reading a {what} object: {message}")]
    NotAProvider {
        /// The kind, with `v1alpha2` before it for cluster-api-operator's API.
        what: String,
        /// What is wrong.
        message: String,
    },
}

/// A provider object of `api` read as a dynamic object (lists leave out apiVersion and kind),
/// as JSON with its apiVersion and kind.
pub fn object_value(
    api: ProviderApi,
    t: ProviderType,
    o: DynamicObject,
) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(o)?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), json!(api.api_version()));
        m.insert("kind".into(), json!(t.kind()));
    }
    Ok(v)
}

/// A provider object's JSON as the operator reads it (a v1alpha2 spec translated; one that
/// cannot be translated reads as empty).
pub fn provider_of_value(
    api: ProviderApi,
    t: ProviderType,
    v: Value,
) -> Result<AnyProvider, ReadError> {
    match api {
        ProviderApi::Management => {
            AnyProvider::from_value(v).map_err(|e| ReadError::NotAProvider {
                what: t.kind().to_string(),
                message: e.to_string(),
            })
        }
        ProviderApi::ClusterApiOperator => {
            v1alpha2::view_value(v)
                .map(|(p, _)| p)
                .map_err(|e| ReadError::NotAProvider {
                    what: format!("v1alpha2 {}", t.kind()),
                    message: e.to_string(),
                })
        }
    }
}

/// A provider object of `api` read as a dynamic object, as the operator reads it.
pub fn read_provider(
    api: ProviderApi,
    t: ProviderType,
    o: DynamicObject,
) -> Result<AnyProvider, ReadError> {
    provider_of_value(api, t, object_value(api, t, o)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::conditions::{READY, reason};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn status_with_ready(reason: &str) -> ProviderStatus {
        ProviderStatus {
            conditions: vec![Condition {
                type_: READY.into(),
                status: "True".into(),
                reason: reason.into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: Some(1),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn v1alpha2_status_is_shown_in_its_users_vocabulary_and_idempotently() {
        let ours = status_with_ready(reason::AVAILABLE);
        assert_eq!(shown(ProviderApi::Management, &ours), ours);
        let theirs = shown(ProviderApi::ClusterApiOperator, &ours);
        assert_eq!(
            theirs.conditions[0].reason,
            v1alpha2::conditions::reason::MINIMUM_REPLICAS_AVAILABLE
        );
        // A status read back from a v1alpha2 object is already shown: no write follows.
        assert_eq!(shown(ProviderApi::ClusterApiOperator, &theirs), theirs);
    }

    #[test]
    fn only_v1alpha2_objects_with_the_other_finalizer_are_held() {
        let mut p = v1alpha2::view(&<v1alpha2::CoreProvider as v1alpha2::Provider>::new(
            "cluster-api",
            "capi-system",
            Default::default(),
        ))
        .0;
        assert!(!held_by_cluster_api_operator(&p));
        p.metadata.finalizers = Some(vec![v1alpha2::FINALIZER.into()]);
        assert!(held_by_cluster_api_operator(&p));
        p.api = ProviderApi::Management;
        assert!(!held_by_cluster_api_operator(&p));
    }

    #[test]
    fn objects_of_either_api_read_as_their_kind() {
        assert_eq!(
            <v1alpha2::IPAMProvider as ProviderKind>::API,
            ProviderApi::ClusterApiOperator
        );
        assert_eq!(
            <capi_operator_api::IPAMProvider as ProviderKind>::TYPE,
            ProviderType::Ipam
        );
        for api in ProviderApi::ALL {
            let o: DynamicObject = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "kubeadm", "namespace": "ns"}, "spec": {}}))
            .unwrap();
            let p = read_provider(api, ProviderType::Bootstrap, o).unwrap();
            assert_eq!((p.api, p.provider_type), (api, ProviderType::Bootstrap));
            assert_eq!((p.namespace(), p.name()), ("ns", "kubeadm"));
            let r = provider_resource(api, ProviderType::Bootstrap);
            assert_eq!(
                (r.group.as_str(), r.plural.as_str()),
                (api.group(), "bootstrapproviders")
            );
            assert_eq!(owner_reference(&p).api_version, api.api_version());
        }
        let e = provider_of_value(
            ProviderApi::ClusterApiOperator,
            ProviderType::Core,
            serde_json::json!({"apiVersion": "v1", "kind": "CoreProvider"}),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("reading a v1alpha2 CoreProvider object: "),
            "{e}"
        );
    }
}
