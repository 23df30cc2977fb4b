//! The seven provider kinds. They share one [`ProviderSpec`] and one [`ProviderStatus`]; a macro
//! gives each its own Rust type so that every kind gets its own typed API and controller.

use std::{borrow::Cow, fmt};

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

macro_rules! provider_kind {
    ($(#[$doc:meta])* $ty:ident, $variant:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $ty {
            /// Always `management.cluster.x-k8s.io/v1alpha1`.
            #[serde(default = "api_version")]
            pub api_version: String,
            /// The kind name.
            #[serde(default)]
            pub kind: String,
            /// Standard object metadata.
            #[serde(default)]
            pub metadata: ObjectMeta,
            /// Desired state.
            #[serde(default)]
            pub spec: ProviderSpec,
            /// Observed state.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<ProviderStatus>,
        }

        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                ProviderType::$variant.kind().into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                VERSION.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                ProviderType::$variant.plural().into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl Provider for $ty {
            const TYPE: ProviderType = ProviderType::$variant;

            fn new(name: &str, namespace: &str, spec: ProviderSpec) -> Self {
                $ty {
                    api_version: api_version(),
                    kind: ProviderType::$variant.kind().to_string(),
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(namespace.to_string()),
                        ..ObjectMeta::default()
                    },
                    spec,
                    status: None,
                }
            }
            fn spec(&self) -> &ProviderSpec {
                &self.spec
            }
            fn spec_mut(&mut self) -> &mut ProviderSpec {
                &mut self.spec
            }
            fn status(&self) -> Option<&ProviderStatus> {
                self.status.as_ref()
            }
            fn status_mut(&mut self) -> &mut ProviderStatus {
                self.status.get_or_insert_with(ProviderStatus::default)
            }
        }
    };
}

fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

provider_kind!(
    /// The Cluster API core provider (only one per cluster).
    CoreProvider, Core
);
provider_kind!(
    /// A bootstrap provider, e.g. kubeadm.
    BootstrapProvider, Bootstrap
);
provider_kind!(
    /// A control-plane provider, e.g. kubeadm.
    ControlPlaneProvider, ControlPlane
);
provider_kind!(
    /// An infrastructure provider, e.g. aws or vsphere.
    InfrastructureProvider, Infrastructure
);
provider_kind!(
    /// An IP address management provider, e.g. in-cluster.
    IPAMProvider, Ipam
);
provider_kind!(
    /// A runtime extension provider.
    RuntimeExtensionProvider, RuntimeExtension
);
provider_kind!(
    /// An addon provider, e.g. helm.
    AddonProvider, Addon
);

/// A provider object of any kind, as read from a file or a dynamic API.
#[derive(Clone, Debug, PartialEq)]
pub struct AnyProvider {
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
        let api_version = value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if api_version != api_version_str() {
            return Err(NotAProvider::ApiVersion(api_version.to_string()));
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

fn api_version_str() -> &'static str {
    "management.cluster.x-k8s.io/v1alpha1"
}

impl<P: Provider> From<&P> for AnyProvider {
    fn from(p: &P) -> AnyProvider {
        AnyProvider {
            provider_type: P::TYPE,
            metadata: p.meta().clone(),
            spec: p.spec().clone(),
            status: p.status().cloned(),
        }
    }
}
