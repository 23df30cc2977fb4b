//! The seven provider kinds. They share one [`ProviderSpec`] and one [`ProviderStatus`]; a macro
//! gives each its own Rust type so that every kind gets its own typed API and controller.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::{GROUP, ProviderSpec, ProviderStatus, VERSION};

/// The provider types clusterctl knows, in clusterctl's install order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ProviderType {
    /// Cluster API core (CoreProvider).
    Core,
    /// Bootstrap provider (BootstrapProvider).
    Bootstrap,
    /// Control-plane provider (ControlPlaneProvider).
    ControlPlane,
    /// Infrastructure provider (InfrastructureProvider).
    Infrastructure,
    /// IP address management provider (IPAMProvider).
    Ipam,
    /// Runtime extension provider (RuntimeExtensionProvider).
    RuntimeExtension,
    /// Addon provider (AddonProvider).
    Addon,
}

impl ProviderType {
    /// Every type, in clusterctl's install order.
    pub const ALL: [ProviderType; 7] = [
        ProviderType::Core,
        ProviderType::Bootstrap,
        ProviderType::ControlPlane,
        ProviderType::Infrastructure,
        ProviderType::Ipam,
        ProviderType::RuntimeExtension,
        ProviderType::Addon,
    ];

    /// Kind of the operator's object for this type (also clusterctl's provider type string).
    pub fn kind(self) -> &'static str {
        match self {
            ProviderType::Core => "CoreProvider",
            ProviderType::Bootstrap => "BootstrapProvider",
            ProviderType::ControlPlane => "ControlPlaneProvider",
            ProviderType::Infrastructure => "InfrastructureProvider",
            ProviderType::Ipam => "IPAMProvider",
            ProviderType::RuntimeExtension => "RuntimeExtensionProvider",
            ProviderType::Addon => "AddonProvider",
        }
    }

    /// The type whose kind is `kind`.
    pub fn from_kind(kind: &str) -> Option<ProviderType> {
        Self::ALL.into_iter().find(|t| t.kind() == kind)
    }

    /// Plural resource name.
    pub fn plural(self) -> &'static str {
        match self {
            ProviderType::Core => "coreproviders",
            ProviderType::Bootstrap => "bootstrapproviders",
            ProviderType::ControlPlane => "controlplaneproviders",
            ProviderType::Infrastructure => "infrastructureproviders",
            ProviderType::Ipam => "ipamproviders",
            ProviderType::RuntimeExtension => "runtimeextensionproviders",
            ProviderType::Addon => "addonproviders",
        }
    }

    /// kubectl short name (the same ones cluster-api-operator uses).
    pub fn short_name(self) -> &'static str {
        match self {
            ProviderType::Core => "cacp",
            ProviderType::Bootstrap => "cabp",
            ProviderType::ControlPlane => "cacpp",
            ProviderType::Infrastructure => "caip",
            ProviderType::Ipam => "caipamp",
            ProviderType::RuntimeExtension => "carep",
            ProviderType::Addon => "caap",
        }
    }

    /// Prefix of clusterctl's manifest label (`cluster.x-k8s.io/provider` value); empty for core.
    pub fn label_prefix(self) -> &'static str {
        match self {
            ProviderType::Core => "",
            ProviderType::Bootstrap => "bootstrap-",
            ProviderType::ControlPlane => "control-plane-",
            ProviderType::Infrastructure => "infrastructure-",
            ProviderType::Ipam => "ipam-",
            ProviderType::RuntimeExtension => "runtime-extension-",
            ProviderType::Addon => "addon-",
        }
    }

    /// clusterctl's manifest label for a provider of this type and name, e.g.
    /// `infrastructure-aws`; the core provider's label is its name (`cluster-api`).
    pub fn manifest_label(self, name: &str) -> String {
        format!("{}{}", self.label_prefix(), name)
    }

    /// Default components file name of a release of this type.
    pub fn components_file(self) -> &'static str {
        match self {
            ProviderType::Core => "core-components.yaml",
            ProviderType::Bootstrap => "bootstrap-components.yaml",
            ProviderType::ControlPlane => "control-plane-components.yaml",
            ProviderType::Infrastructure => "infrastructure-components.yaml",
            ProviderType::Ipam => "ipam-components.yaml",
            ProviderType::RuntimeExtension => "runtime-extension-components.yaml",
            ProviderType::Addon => "addon-components.yaml",
        }
    }

    /// Short lower-case word for the type, used in object names (`core`, `control-plane`, ...).
    pub fn word(self) -> &'static str {
        match self {
            ProviderType::Core => "core",
            ProviderType::Bootstrap => "bootstrap",
            ProviderType::ControlPlane => "control-plane",
            ProviderType::Infrastructure => "infrastructure",
            ProviderType::Ipam => "ipam",
            ProviderType::RuntimeExtension => "runtime-extension",
            ProviderType::Addon => "addon",
        }
    }
}

impl fmt::Display for ProviderType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// Behaviour shared by the seven provider kinds, so one generic reconciler serves them all.
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

/// Defines the provider kinds of one API: for each kind a resource type of `group`/`version`
/// with the given spec and status types, implementing `trait` (a trait shaped like
/// [`Provider`] over those types), plus the `api_version()` function serde fills in a missing
/// apiVersion with. Serves this operator's kinds below and the v1alpha2 kinds of
/// [`crate::v1alpha2`]; `api_version` is a literal so it can be quoted in the field's doc.
macro_rules! provider_kinds {
    (
        api_version: $api_version:literal,
        group: $group:expr,
        version: $version:expr,
        spec: $spec:ty,
        status: $status:ty,
        trait: $provider:path,
        kinds: [$($(#[$doc:meta])* $ty:ident => $variant:ident),* $(,)?] $(,)?
    ) => {
        fn api_version() -> String {
            $api_version.to_string()
        }

        $(
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $ty {
            #[doc = concat!("Always `", $api_version, "`.")]
            #[serde(default = "api_version")]
            pub api_version: String,
            /// The kind name.
            #[serde(default)]
            pub kind: String,
            /// Standard object metadata.
            #[serde(default)]
            pub metadata: ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// Desired state.
            #[serde(default)]
            pub spec: $spec,
            /// Observed state.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<$status>,
        }

        impl ::kube::Resource for $ty {
            type DynamicType = ();
            type Scope = ::k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                $crate::ProviderType::$variant.kind().into()
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                $crate::ProviderType::$variant.plural().into()
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }

        impl $provider for $ty {
            const TYPE: $crate::ProviderType = $crate::ProviderType::$variant;

            fn new(name: &str, namespace: &str, spec: $spec) -> Self {
                $ty {
                    api_version: api_version(),
                    kind: $crate::ProviderType::$variant.kind().to_string(),
                    metadata: ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(namespace.to_string()),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                }
            }
            fn spec(&self) -> &$spec {
                &self.spec
            }
            fn spec_mut(&mut self) -> &mut $spec {
                &mut self.spec
            }
            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn status_mut(&mut self) -> &mut $status {
                self.status.get_or_insert_with(Default::default)
            }
        }
        )*
    };
}
pub(crate) use provider_kinds;

provider_kinds! {
    api_version: "management.cluster.x-k8s.io/v1alpha1",
    group: GROUP,
    version: VERSION,
    spec: ProviderSpec,
    status: ProviderStatus,
    trait: Provider,
    kinds: [
        /// The Cluster API core provider (only one per cluster).
        CoreProvider => Core,
        /// A bootstrap provider, e.g. kubeadm.
        BootstrapProvider => Bootstrap,
        /// A control-plane provider, e.g. kubeadm.
        ControlPlaneProvider => ControlPlane,
        /// An infrastructure provider, e.g. aws or vsphere.
        InfrastructureProvider => Infrastructure,
        /// An IP address management provider, e.g. in-cluster.
        IPAMProvider => Ipam,
        /// A runtime extension provider.
        RuntimeExtensionProvider => RuntimeExtension,
        /// An addon provider, e.g. helm.
        AddonProvider => Addon,
    ],
}

/// The API a provider object was declared in. Both are served and reconciled the same way;
/// objects of the second are read through [`crate::v1alpha2::ProviderSpec::to_v1alpha1`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProviderApi {
    /// This operator's API, `management.cluster.x-k8s.io/v1alpha1`.
    #[default]
    Management,
    /// kubernetes-sigs/cluster-api-operator's API, `operator.cluster.x-k8s.io/v1alpha2`.
    ClusterApiOperator,
}

impl ProviderApi {
    /// Both APIs.
    pub const ALL: [ProviderApi; 2] = [ProviderApi::Management, ProviderApi::ClusterApiOperator];

    /// API group.
    pub fn group(self) -> &'static str {
        match self {
            ProviderApi::Management => GROUP,
            ProviderApi::ClusterApiOperator => crate::v1alpha2::GROUP,
        }
    }

    /// API version (without the group).
    pub fn version(self) -> &'static str {
        match self {
            ProviderApi::Management => VERSION,
            ProviderApi::ClusterApiOperator => crate::v1alpha2::VERSION,
        }
    }

    /// `apiVersion` of its objects.
    pub fn api_version(self) -> String {
        format!("{}/{}", self.group(), self.version())
    }

    /// The API whose group is `group`.
    pub fn from_group(group: &str) -> Option<ProviderApi> {
        Self::ALL.into_iter().find(|a| a.group() == group)
    }

    /// The value of [`crate::OWNER_API_LABEL`] on objects installed for a provider of this API
    /// (`None`: the label is absent, as on every object installed before the label existed).
    pub fn owner_label(self) -> Option<&'static str> {
        match self {
            ProviderApi::Management => None,
            ProviderApi::ClusterApiOperator => Some(crate::v1alpha2::GROUP),
        }
    }
}

/// A provider object of any kind, as read from a file or a dynamic API.
#[derive(Clone, Debug, PartialEq)]
pub struct AnyProvider {
    /// The API it was declared in.
    pub api: ProviderApi,
    /// Its type (from its kind).
    pub provider_type: ProviderType,
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its spec.
    pub spec: ProviderSpec,
    /// Its status.
    pub status: Option<ProviderStatus>,
}

/// Why a value is not a provider object.
#[derive(Debug, thiserror::Error)]
pub enum NotAProvider {
    /// apiVersion is not management.cluster.x-k8s.io/v1alpha1.
    #[error("apiVersion {0:?} is not {GROUP}/{VERSION}")]
    ApiVersion(String),
    /// kind is not one of the seven provider kinds.
    #[error(
        "kind {0:?} is not a provider kind (CoreProvider, BootstrapProvider, ControlPlaneProvider, InfrastructureProvider, IPAMProvider, RuntimeExtensionProvider, AddonProvider)"
    )]
    Kind(String),
    /// The object does not match the schema.
    #[error("invalid provider object: {0}")]
    Invalid(#[from] serde_json::Error),
}

impl AnyProvider {
    /// Reads a provider object of any kind from its JSON value.
    pub fn from_value(value: serde_json::Value) -> Result<AnyProvider, NotAProvider> {
        let given = value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if given != api_version() {
            return Err(NotAProvider::ApiVersion(given.to_string()));
        }
        let kind = value.get("kind").and_then(|v| v.as_str()).unwrap_or("");
        let provider_type =
            ProviderType::from_kind(kind).ok_or_else(|| NotAProvider::Kind(kind.to_string()))?;
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: ProviderSpec,
            #[serde(default)]
            status: Option<ProviderStatus>,
        }
        let raw: Raw = serde_json::from_value(value)?;
        Ok(AnyProvider {
            api: ProviderApi::Management,
            provider_type,
            metadata: raw.metadata,
            spec: raw.spec,
            status: raw.status,
        })
    }

    /// Name of the object ("" when absent).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// Namespace of the object ("" when absent).
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("")
    }
}

impl<P: Provider> From<&P> for AnyProvider {
    fn from(p: &P) -> AnyProvider {
        AnyProvider {
            api: ProviderApi::Management,
            provider_type: P::TYPE,
            metadata: p.meta().clone(),
            spec: p.spec().clone(),
            status: p.status().cloned(),
        }
    }
}
