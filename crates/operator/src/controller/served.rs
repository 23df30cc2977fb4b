//! The provider kinds the controllers serve: the seven kinds of this operator's API and the
//! seven of cluster-api-operator's `operator.cluster.x-k8s.io/v1alpha2`, all driven by the one
//! generic reconciler. What differs between the two APIs is here: how an object is read (a
//! v1alpha2 spec is translated), how its status is written (in the vocabulary of the API's
//! users), and which finalizers it carries.

use std::fmt;

use capi_operator_api::{
    AnyProvider, ProviderApi, ProviderStatus, ProviderType,
    v1alpha2::{self, ConversionError},
};
use k8s_openapi::serde::{Serialize, de::DeserializeOwned};

/// A provider kind of either API.
pub trait Served:
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

macro_rules! served_management {
    ($($ty:ident),*) => {$(
        impl Served for capi_operator_api::$ty {
            const TYPE: ProviderType = <Self as capi_operator_api::Provider>::TYPE;
            const API: ProviderApi = ProviderApi::Management;

            fn view(&self) -> (AnyProvider, Result<Vec<String>, ConversionError>) {
                (AnyProvider::from(self), Ok(Vec::new()))
            }
        }
    )*};
}

macro_rules! served_v1alpha2 {
    ($($ty:ident),*) => {$(
        impl Served for v1alpha2::$ty {
            const TYPE: ProviderType = <Self as v1alpha2::Provider>::TYPE;
            const API: ProviderApi = ProviderApi::ClusterApiOperator;

            fn view(&self) -> (AnyProvider, Result<Vec<String>, ConversionError>) {
                v1alpha2::view(self)
            }
        }
    )*};
}

served_management!(
    CoreProvider,
    BootstrapProvider,
    ControlPlaneProvider,
    InfrastructureProvider,
    IPAMProvider,
    RuntimeExtensionProvider,
    AddonProvider
);
served_v1alpha2!(
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
}
