//! The seven kinds of the v1alpha2 API, and how the operator views one as a provider of its
//! own API.

use std::fmt;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::ProviderType;

use super::{API_VERSION, ConversionError, GROUP, ProviderSpec, ProviderStatus, VERSION};

/// Behaviour shared by the seven kinds of this API: [`crate::Provider`] over this API's spec
/// (a separate trait, since the operator's generic reconciler relies on that one's spec type).
pub trait Provider:
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
    /// A new object of this kind.
    fn new(name: &str, namespace: &str, spec: ProviderSpec) -> Self;
    /// The desired state.
    fn spec(&self) -> &ProviderSpec;
    /// The desired state, mutable.
    fn spec_mut(&mut self) -> &mut ProviderSpec;
    /// The observed state, if any.
    fn status(&self) -> Option<&ProviderStatus>;
    /// The observed state, mutable (created empty when absent).
    fn status_mut(&mut self) -> &mut ProviderStatus;
}

crate::kinds::provider_kinds! {
    api_version: "operator.cluster.x-k8s.io/v1alpha2",
    group: GROUP,
    version: VERSION,
    spec: ProviderSpec,
    status: ProviderStatus,
    trait: Provider,
    kinds: [
        /// The Cluster API core provider in the v1alpha2 API (one per cluster, named cluster-api).
        CoreProvider => Core,
        /// A bootstrap provider in the v1alpha2 API, e.g. kubeadm.
        BootstrapProvider => Bootstrap,
        /// A control-plane provider in the v1alpha2 API, e.g. kubeadm.
        ControlPlaneProvider => ControlPlane,
        /// An infrastructure provider in the v1alpha2 API, e.g. aws.
        InfrastructureProvider => Infrastructure,
        /// An IP address management provider in the v1alpha2 API.
        IPAMProvider => Ipam,
        /// A runtime extension provider in the v1alpha2 API.
        RuntimeExtensionProvider => RuntimeExtension,
        /// An addon provider in the v1alpha2 API, e.g. helm.
        AddonProvider => Addon,
    ],
}

/// How the operator reconciles a v1alpha2 object: as a provider of this operator's API, with
/// the outcome of the spec's translation ([`ProviderSpec::to_v1alpha1`]). When the spec cannot
/// be translated the view's spec is empty and must not be acted on; the error is for a
/// condition.
pub fn view<P: Provider>(p: &P) -> (crate::AnyProvider, Result<Vec<String>, ConversionError>) {
    let (spec, translated) = match p.spec().to_v1alpha1() {
        Ok(c) => (c.spec, Ok(c.ignored)),
        Err(e) => (crate::ProviderSpec::default(), Err(e)),
    };
    let provider = crate::AnyProvider {
        api: crate::ProviderApi::ClusterApiOperator,
        provider_type: P::TYPE,
        metadata: p.meta().clone(),
        spec,
        status: p.status().cloned(),
    };
    (provider, translated)
}

/// [`view`] of a v1alpha2 object of any kind, read from its JSON value (as a dynamic API
/// returns it).
pub fn view_value(
    value: Value,
) -> Result<(crate::AnyProvider, Result<Vec<String>, ConversionError>), crate::kinds::NotAProvider>
{
    let given = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if given != API_VERSION {
        return Err(crate::kinds::NotAProvider::ApiVersion(given.to_string()));
    }
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    let t = ProviderType::from_kind(kind)
        .ok_or_else(|| crate::kinds::NotAProvider::Kind(kind.to_string()))?;
    Ok(match t {
        ProviderType::Core => view(&serde_json::from_value::<CoreProvider>(value)?),
        ProviderType::Bootstrap => view(&serde_json::from_value::<BootstrapProvider>(value)?),
        ProviderType::ControlPlane => view(&serde_json::from_value::<ControlPlaneProvider>(value)?),
        ProviderType::Infrastructure => {
            view(&serde_json::from_value::<InfrastructureProvider>(value)?)
        }
        ProviderType::Ipam => view(&serde_json::from_value::<IPAMProvider>(value)?),
        ProviderType::RuntimeExtension => {
            view(&serde_json::from_value::<RuntimeExtensionProvider>(value)?)
        }
        ProviderType::Addon => view(&serde_json::from_value::<AddonProvider>(value)?),
    })
}
