//! The provider API of kubernetes-sigs/cluster-api-operator, `operator.cluster.x-k8s.io/v1alpha2`,
//! so that objects written for that operator keep working with this one.
//!
//! What is here:
//!
//! * Rust types for the seven kinds with exactly the published field set and JSON names of that
//!   API ([`ProviderSpec`], [`CoreProvider`], ...). Fields that the other operator treats as
//!   "empty means unset" are plain strings, maps and lists here too; fields it keeps as pointers
//!   (so that an explicit empty value means something) are `Option`s. Where a part has the same
//!   shape and meaning as in this operator's API, that type is used ([`ProviderStatus`]); the
//!   types kept here say in their documentation how they differ.
//! * [`ProviderSpec::to_v1alpha1`]: the translation into this operator's own
//!   [`crate::ProviderSpec`], with every setting mapped to what it does there. Settings that
//!   cannot be expressed are a [`ConversionError`]; settings the other operator silently ignored
//!   are ignored here too, but named in [`Converted::ignored`], never dropped unnoticed.
//! * [`go_status`]: this operator's status written in the other operator's vocabulary
//!   (condition reasons included), so `kubectl wait --for=condition=Ready`, Argo CD health
//!   scripts and dashboards written for it keep working.
//! * [`all_crds`]: the seven CustomResourceDefinitions, with the other operator's resource names,
//!   short names and printer columns, and its validations as CEL rules (no webhook is needed).
//! * Names, labels and keys of the objects the other operator leaves in a cluster (release
//!   ConfigMaps, cache Secrets), for adopting them.

mod convert;
mod crds;
mod flags;
mod kinds;
mod spec;
mod status;

pub use convert::{ConversionError, Converted};
pub use crds::{all_crds, crd};
pub use flags::parse_go_duration;
pub use kinds::{
    AddonProvider, BootstrapProvider, ControlPlaneProvider, CoreProvider, IPAMProvider,
    InfrastructureProvider, Provider, RuntimeExtensionProvider, view, view_value,
};
pub use spec::{
    AdditionalDeployments, ConfigMapReference, ContainerSpec, ControllerConfigurationSpec,
    ControllerHealth, ControllerMetrics, ControllerWebhook, DeploymentSpec, FetchConfiguration,
    LeaderElectionConfiguration, ManagerSpec, Patch, PatchSelector, ProviderSpec, SecretReference,
};
pub use status::{MAX_CONDITION_MESSAGE_BYTES, go_status};

use std::collections::BTreeMap;

pub use crate::ProviderStatus;
use crate::ProviderType;

/// API group of the kinds of kubernetes-sigs/cluster-api-operator.
pub const GROUP: &str = "operator.cluster.x-k8s.io";
/// API version of those kinds served here.
pub const VERSION: &str = "v1alpha2";
/// `apiVersion` of objects of those kinds.
pub const API_VERSION: &str = "operator.cluster.x-k8s.io/v1alpha2";

/// Finalizer the other operator puts on every provider object.
pub const FINALIZER: &str = "provider.cluster.x-k8s.io";
/// Annotation the other operator writes on a provider object and on its cache Secret: a SHA-256
/// over the spec, the referenced Secret and ConfigMaps, the cached objects and its clusterctl
/// configuration. Equal values on both mean "already applied".
pub const APPLIED_SPEC_HASH_ANNOTATION: &str = "operator.cluster.x-k8s.io/applied-spec-hash";
/// Label of release ConfigMaps naming the provider version they hold (the same key this
/// operator reads, [`crate::CONFIGMAP_VERSION_LABEL`]).
pub const CONFIGMAP_VERSION_LABEL: &str = crate::CONFIGMAP_VERSION_LABEL;
/// Label of release ConfigMaps written by the other operator: the provider type word
/// ([`go_type_word`]).
pub const CONFIGMAP_TYPE_LABEL: &str = "provider.cluster.x-k8s.io/type";
/// Label of release ConfigMaps written by the other operator: the provider object's name.
pub const CONFIGMAP_NAME_LABEL: &str = "provider.cluster.x-k8s.io/name";
/// Label (value `oci`) on release ConfigMaps fetched from an OCI artifact; the annotation of
/// the same key holds the artifact reference.
pub const CONFIGMAP_SOURCE_KEY: &str = "provider.cluster.x-k8s.io/source";
/// Label (value `true`) on release ConfigMaps the other operator downloaded itself.
pub const OPERATOR_MANAGED_LABEL: &str = "managed-by.operator.cluster.x-k8s.io";
/// Annotation (value `true`) saying the components are gzip-compressed in `binaryData` (the
/// same key this operator reads, [`crate::CONFIGMAP_COMPRESSED_ANNOTATION`]).
pub const COMPRESSED_ANNOTATION: &str = crate::CONFIGMAP_COMPRESSED_ANNOTATION;
/// Key of a release ConfigMap holding metadata.yaml (always in `data`).
pub const METADATA_KEY: &str = "metadata";
/// Key of a release ConfigMap holding the components YAML (`data`, or gzip in `binaryData`).
pub const COMPONENTS_KEY: &str = "components";
/// Key of the additionalManifests ConfigMap holding the extra objects.
pub const ADDITIONAL_MANIFESTS_KEY: &str = "manifests";
/// Key of a cache Secret holding the rendered objects (a JSON list, gzip-compressed when the
/// Secret carries [`COMPRESSED_ANNOTATION`]).
pub const CACHE_KEY: &str = "cache";
/// Size above which the other operator gzip-compresses components (1 MiB).
pub const COMPRESSION_THRESHOLD_BYTES: usize = 1024 * 1024;

/// The word the other operator uses for a provider type in object names and the
/// [`CONFIGMAP_TYPE_LABEL`]: clusterctl's word ([`ProviderType::word`]) except
/// `runtimeextension`, which has no dash there.
pub fn go_type_word(t: ProviderType) -> &'static str {
    match t {
        ProviderType::RuntimeExtension => "runtimeextension",
        other => other.word(),
    }
}

/// Name of the ConfigMap in which the other operator (and its `kubectl operator preload`
/// plugin) keeps a downloaded release: `{type}-{name}-{version}`, in the provider's namespace.
pub fn release_configmap_name(t: ProviderType, name: &str, version: &str) -> String {
    format!("{}-{name}-{version}", go_type_word(t))
}

/// Name of the Secret in which the other operator caches the rendered objects of a release:
/// `{type}-{name}-{version}-cache`, in the provider's namespace.
pub fn cache_secret_name(t: ProviderType, name: &str, version: &str) -> String {
    format!("{}-{name}-{version}-cache", go_type_word(t))
}

/// Labels the other operator puts on a release ConfigMap it downloaded (and selects such
/// ConfigMaps by when the provider has no `fetchConfig.selector`).
pub fn release_configmap_labels(
    t: ProviderType,
    name: &str,
    version: &str,
    from_oci: bool,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (CONFIGMAP_VERSION_LABEL.to_string(), version.to_string()),
        (
            CONFIGMAP_TYPE_LABEL.to_string(),
            go_type_word(t).to_string(),
        ),
        (CONFIGMAP_NAME_LABEL.to_string(), name.to_string()),
        (OPERATOR_MANAGED_LABEL.to_string(), "true".to_string()),
    ]);
    if from_oci {
        labels.insert(CONFIGMAP_SOURCE_KEY.to_string(), "oci".to_string());
    }
    labels
}

/// Condition types and reasons the other operator writes (since its v0.24.0 release they are
/// `metav1.Condition`s; before, Cluster API v1beta1 conditions with a severity and an empty
/// reason on True conditions).
pub mod conditions;
