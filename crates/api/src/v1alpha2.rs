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

use std::{collections::BTreeMap, fmt};

use k8s_openapi::{
    api::core::v1::{Affinity, EnvVar, LocalObjectReference, ResourceRequirements, Toleration},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::{
        apis::meta::v1::{Condition, LabelSelector},
        util::intstr::IntOrString,
    },
};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

pub use crate::ProviderStatus;
use crate::{
    ContainerImage, ImageMeta, ProviderType,
    crd::{CrdError, CrdParts, describe, provider_crd, schema_of},
};

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
pub mod conditions {
    // The four condition types of the other operator are this operator's types of the same
    // names (Ready there is copied from the Deployment's Available condition).
    pub use crate::conditions::{
        PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED, PROVIDER_UPGRADED, READY,
    };

    /// Reasons, by the other operator's names.
    pub mod reason {
        /// PreflightCheckPassed True.
        pub const PREFLIGHT_CHECKS_PASSED: &str = "PreflightChecksPassed";
        /// A second CoreProvider, or a provider of the same type and name elsewhere.
        pub const MORE_THAN_ONE_EXISTS: &str = "MoreThanOneExists";
        /// spec.version does not parse as a semantic version.
        pub const INCORRECT_VERSION_FORMAT: &str = "IncorrectVersionFormat";
        /// The CoreProvider is not named `cluster-api` (the reason string ends in "Reason").
        pub const INCORRECT_CORE_PROVIDER_NAME: &str = "IncorrectCoreProviderNameReason";
        /// A provider unknown to clusterctl has no usable fetchConfig.
        pub const FETCH_CONFIG_VALIDATION_ERROR: &str = "FetchConfigValidationError";
        /// The GITHUB_TOKEN of the config Secret was refused by GitHub.
        pub const INVALID_GITHUB_TOKEN: &str = "InvalidGithubTokenError";
        /// The core provider is not Ready yet.
        pub const WAITING_FOR_CORE_PROVIDER_READY: &str = "WaitingForCoreProviderReady";
        /// A minor or major downgrade was asked for (the reason string ends in "Reason").
        pub const UNSUPPORTED_PROVIDER_DOWNGRADE: &str = "UnsupportedProviderDowngradeReason";
        /// The provider name is not known to clusterctl (on ProviderInstalled).
        pub const UNKNOWN_PROVIDER: &str = "UnknownProvider";
        /// The release's contract is neither v1beta1 nor v1beta2, or metadata.yaml has no
        /// release series for the version (on ProviderInstalled).
        pub const CAPI_VERSION_INCOMPATIBILITY: &str = "CAPIVersionIncompatibility";
        /// Fetching the release failed (on ProviderInstalled).
        pub const COMPONENTS_FETCH_ERROR: &str = "ComponentsFetchError";
        /// Customizing the rendered objects failed (on ProviderInstalled).
        pub const COMPONENTS_CUSTOMIZATION_ERROR: &str = "ComponentsCustomizationError";
        /// A patch failed (on ProviderInstalled).
        pub const COMPONENTS_PATCH_ERROR: &str = "ComponentsPatchError";
        /// An image override failed (on ProviderInstalled).
        pub const COMPONENTS_IMAGE_OVERRIDE_ERROR: &str = "ComponentsImageOverrideError";
        /// clusterctl's upgrade failed (on ProviderUpgraded).
        pub const COMPONENTS_UPGRADE_ERROR: &str = "ComponentsUpgradeError";
        /// Deleting components failed (on ProviderInstalled).
        pub const OLD_COMPONENTS_DELETION_ERROR: &str = "OldComponentsDeletionError";
        /// Creating the objects failed (on ProviderInstalled).
        pub const INSTALL_FAILED: &str = "InstallFailed";
        /// Creating the objects timed out waiting for a Deployment (on ProviderInstalled).
        pub const TIMED_OUT_WAITING_FOR_DEPLOYMENT: &str = "TimedOutWaitingForDeployment";
        /// The cache hash could not be written (on ProviderInstalled).
        pub const FAILED_TO_UPDATE_PROVIDERS_HASH: &str = "FailedToUpdateProvidersHash";
        /// ProviderInstalled True.
        pub const PROVIDER_INSTALLED: &str = "ProviderInstalled";
        /// ProviderUpgraded True.
        pub const PROVIDER_UPGRADED: &str = "ProviderUpgraded";
        /// Ready True: the Deployment controller's reason for an available Deployment, which the
        /// other operator copies.
        pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
        /// Ready False: the Deployment controller's reason for an unavailable Deployment.
        pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
        /// Ready True when the Deployment's condition had no reason.
        pub const DEPLOYMENT_AVAILABLE: &str = "DeploymentAvailable";
        /// Ready False: the Deployment has no Available condition yet.
        pub const NO_DEPLOYMENT_AVAILABLE_CONDITION: &str = "NoDeploymentAvailableConditionReason";
    }

    /// The reason the other operator would write for the situation this operator describes
    /// with condition `type_` and reason `reason`; `reason` itself when it has no counterpart
    /// (condition types only this operator writes keep all their reasons).
    pub fn go_reason<'a>(type_: &str, reason: &'a str) -> &'a str {
        use crate::conditions::{self as ours, reason as r};
        match (type_, reason) {
            (ours::PREFLIGHT_CHECK_PASSED, r::MORE_THAN_ONE_CORE | r::DUPLICATE_NAME) => {
                reason::MORE_THAN_ONE_EXISTS
            }
            (ours::PREFLIGHT_CHECK_PASSED, r::DOWNGRADE) => reason::UNSUPPORTED_PROVIDER_DOWNGRADE,
            (ours::PREFLIGHT_CHECK_PASSED, r::INVALID_FETCH_CONFIG) => {
                reason::FETCH_CONFIG_VALIDATION_ERROR
            }
            (ours::PREFLIGHT_CHECK_PASSED | ours::PROVIDER_INSTALLED, r::CONTRACT_MISMATCH) => {
                reason::CAPI_VERSION_INCOMPATIBILITY
            }
            (ours::PROVIDER_INSTALLED, r::INVALID_METADATA) => reason::CAPI_VERSION_INCOMPATIBILITY,
            (ours::PROVIDER_INSTALLED, r::INSTALLED) => reason::PROVIDER_INSTALLED,
            (ours::PROVIDER_INSTALLED, r::RENDER_FAILED) => reason::COMPONENTS_CUSTOMIZATION_ERROR,
            (ours::PROVIDER_INSTALLED, r::INVALID_PATCHES) => reason::COMPONENTS_PATCH_ERROR,
            (ours::PROVIDER_INSTALLED, r::APPLY_FAILED) => reason::INSTALL_FAILED,
            (ours::PROVIDER_UPGRADED, r::UPGRADED) => reason::PROVIDER_UPGRADED,
            (ours::READY, r::AVAILABLE) => reason::MINIMUM_REPLICAS_AVAILABLE,
            (ours::READY, r::NOT_AVAILABLE) => reason::MINIMUM_REPLICAS_UNAVAILABLE,
            (ours::READY, r::NO_DEPLOYMENT) => reason::NO_DEPLOYMENT_AVAILABLE_CONDITION,
            _ => reason,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Spec.

/// Desired state of a provider in the `operator.cluster.x-k8s.io/v1alpha2` API. Every one of the
/// seven kinds has this spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.manifestPatches) && has(self.patches))").message("patches and manifestPatches cannot be used together: set at most one of them"))]
pub struct ProviderSpec {
    /// Release of the provider to install (e.g. v1.10.0). Empty: the newest release of the
    /// source, which the operator then writes here.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,

    /// Settings of the provider's controller manager, turned into its command-line flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<ManagerSpec>,

    /// Changes to the provider's Deployment: replicas, scheduling, containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentSpec>,

    /// Secret whose key/value pairs are the variables substituted into the provider's
    /// components (credentials, for example). Its namespace defaults to the provider's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_secret: Option<SecretReference>,

    /// Where the provider's releases come from: exactly one of url, oci and selector. Absent:
    /// the repository clusterctl knows for the provider's type and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_config: Option<FetchConfiguration>,

    /// ConfigMap whose `manifests` key holds extra objects (YAML) installed together with the
    /// provider. Its namespace defaults to the provider's.
    #[serde(
        default,
        rename = "additionalManifests",
        skip_serializing_if = "Option::is_none"
    )]
    pub additional_manifests: Option<ConfigMapReference>,

    /// Legacy JSON merge patches (RFC 7386) for the rendered objects, as YAML or JSON text,
    /// applied in order. A patch names the kind it applies to and may narrow it with
    /// apiVersion, metadata.name and metadata.namespace. Exclusive with patches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_patches: Vec<String>,

    /// Patches with explicit targets: an RFC 6902 JSON patch (a list of operations) or a JSON
    /// merge patch (an object). Exclusive with manifestPatches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Patch>,

    /// Settings for Deployments of the provider other than its main controller manager, by
    /// Deployment name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_deployments: BTreeMap<String, AdditionalDeployments>,
}

/// Controller-manager settings. The first fields are those of controller-runtime's
/// ControllerManagerConfigurationSpec, inlined.
///
/// Not [`crate::ManagerSpec`]: durations are Go durations only (no bare seconds), verbosity
/// defaults to 1 (which leaves --v alone), `controller` exists only here, empty strings and
/// maps mean unset, and `additionalArgs` keys carry their dashes; this operator's `debug` and
/// `metricsAddress` do not exist.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagerSpec {
    /// How often every watched object is reconciled even without a change, as a duration
    /// (e.g. "10m"); becomes --sync-period in whole seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_period: Option<String>,

    /// Leader election of the manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_election: Option<LeaderElectionConfiguration>,

    /// Limits the manager's cache to one namespace (--namespace). Empty: all namespaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cache_namespace: String,

    /// Time given to the manager's runnables to stop, as a duration. No Cluster API manager
    /// has a flag for it.
    #[serde(
        default,
        rename = "gracefulShutDown",
        skip_serializing_if = "Option::is_none"
    )]
    pub graceful_shutdown: Option<String>,

    /// Settings of all controllers of the manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<ControllerConfigurationSpec>,

    /// Metrics endpoint.
    #[serde(default, skip_serializing_if = "is_default")]
    pub metrics: ControllerMetrics,

    /// Health probe endpoint.
    #[serde(default, skip_serializing_if = "is_default")]
    pub health: ControllerHealth,

    /// Webhook server.
    #[serde(default, skip_serializing_if = "is_default")]
    pub webhook: ControllerWebhook,

    /// Address of the pprof profiler (--profiler-address), e.g. localhost:6060. Empty: off.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub profiler_address: String,

    /// Upper bound of concurrent reconciles per controller of the manager: sets the manager's
    /// --*-concurrency flags. (The other operator passes --max-concurrent-reconciles instead,
    /// which Cluster API managers do not have.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrent_reconciles: Option<i64>,

    /// Log verbosity (--v). The API server fills in 1, which leaves the release's setting as
    /// it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 1))]
    pub verbosity: Option<i64>,

    /// Feature gates of the provider (--feature-gates), merged over the ones the release sets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,

    /// Further flags for the manager container: the key is the flag as written on the command
    /// line (with its dashes, e.g. "--foo"), the value its value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_args: BTreeMap<String, String>,
}

/// Leader election settings (component-base's LeaderElectionConfiguration). When the object is
/// given, every field must be given.
///
/// Not [`crate::LeaderElectionConfiguration`], whose fields are all optional: the other
/// operator's CRD requires all seven, and zero durations mean "the release's value".
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectionConfiguration {
    /// Whether the manager takes a lease before working (--leader-elect).
    pub leader_elect: bool,
    /// How long a lease lasts without renewal, as a duration.
    pub lease_duration: String,
    /// How long the leader keeps trying to renew before it gives up, as a duration.
    pub renew_deadline: String,
    /// Time between attempts to take or renew the lease, as a duration.
    pub retry_period: String,
    /// Kind of object used as the lock.
    pub resource_lock: String,
    /// Name of the lock object.
    pub resource_name: String,
    /// Namespace of the lock object.
    pub resource_namespace: String,
}

/// Settings shared by all controllers of a manager. Only in this API: this operator maps
/// groupKindConcurrency to flags and has no field for the rest, which no manager reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerConfigurationSpec {
    /// Concurrency per reconciled kind, keyed like "Kind" or "Kind.group"; becomes the
    /// manager's --{kind}-concurrency flag, the kind lower-cased (the group is not part of the
    /// flag's name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_kind_concurrency: BTreeMap<String, i64>,
    /// Time allowed for the caches to sync, in nanoseconds. No manager flag exists for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_sync_timeout: Option<i64>,
    /// Whether panics in reconcilers are recovered. No manager flag exists for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recover_panic: Option<bool>,
}

/// Metrics endpoint settings.
///
/// Not [`crate::ControllerMetrics`]: here an empty address and insecureDiagnostics false mean
/// unset (the other operator renders no flag for them), while this operator passes any value
/// given, `--insecure-diagnostics=false` included.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerMetrics {
    /// Address serving Prometheus metrics (--metrics-bind-addr); "0" turns them off. Older
    /// setting, superseded by diagnosticsAddress.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bind_address: String,
    /// Address of the diagnostics endpoint (--diagnostics-address); "0" turns it off.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diagnostics_address: String,
    /// Serve diagnostics over plain HTTP without authentication (--insecure-diagnostics).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_diagnostics: bool,
}

/// Health probe settings.
///
/// Not [`crate::ControllerHealth`]: here an empty value means unset, while this operator
/// passes (or reports) any value given.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerHealth {
    /// Address serving the health probes (--health-addr); "0" or empty turns them off.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub health_probe_bind_address: String,
    /// Path of the readiness endpoint, without the leading slash (the manager's default is
    /// readyz).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub readiness_endpoint_name: String,
    /// Path of the liveness endpoint, without the leading slash (the manager's default is
    /// healthz).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub liveness_endpoint_name: String,
}

/// Webhook server settings.
///
/// Not [`crate::ControllerWebhook`]: the port is any integer as in the other operator's CRD
/// (this operator's CRD bounds it to 1..65535; conversion checks the range), and empty strings
/// mean unset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerWebhook {
    /// Port of the webhook server (--webhook-port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// Host the webhook server binds to (--webhook-host).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// Directory with the serving certificate, tls.crt and tls.key (--webhook-cert-dir).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cert_dir: String,
}

// An all-default settings object is left out, as the other operator's omitempty does.
fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Changes to a provider Deployment.
///
/// Not [`crate::DeploymentSpec`]: replicas is an int64 there without an upper bound, an empty
/// serviceAccountName means unset, and the containers differ (see [`ContainerSpec`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// Number of pods. Absent: the release's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
    /// Node labels the pods require. Given (even empty), it replaces the release's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations of the pods. Given (even empty), they replace the release's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Scheduling constraints of the pods, replacing the release's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Changes per container, matched by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerSpec>,
    /// Service account of the pods. Empty: the release's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account_name: String,
    /// Secrets for pulling images. Given (even empty), they replace the release's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
}

/// Changes to one container of a provider Deployment.
///
/// Not [`crate::ContainerSpec`]: the image is one reference replacing the whole image
/// (`imageUrl`), args keys are flags with their dashes and values are strings, and an empty env
/// list means unset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
// The CRD keeps the other operator's one-line description; the rest is about the Rust API.
#[schemars(description = "Changes to one container of a provider Deployment.")]
pub struct ContainerSpec {
    /// Name of the container in the release (the controller manager's is usually `manager`).
    pub name: String,
    /// Whole image reference replacing the container's image.
    #[serde(default, rename = "imageUrl", skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    /// Extra flags: the key is the flag as written on the command line (with its dashes,
    /// e.g. "--awscluster-concurrency"), the value its value. The manager settings win over a
    /// flag given here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    /// Environment variables, replacing those of the same name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Compute resources, replacing the release's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Replaces the container's entrypoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

/// Reference to a Secret. This operator's API names the Secret with two top-level fields
/// (secretName, secretNamespace) instead.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    pub name: String,
    /// Namespace of the Secret. Empty: the provider's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// Reference to a ConfigMap.
///
/// Not [`crate::ConfigMapReference`]: an empty namespace here is the provider's namespace (the
/// other operator's webhook fills it in), while there only an absent one is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapReference {
    /// Name of the ConfigMap.
    pub name: String,
    /// Namespace of the ConfigMap. Empty: the provider's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// Source of a provider's releases. Exactly one of the three fields may be present.
///
/// Not [`crate::FetchConfiguration`]: here a present but empty url or oci counts for the
/// "exactly one" rule yet means unset to the other operator, and url is not restricted to
/// https:// by the CRD (conversion refuses other schemes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.oci), has(self.url), has(self.selector)].exists_one(x,x)").message("fetchConfig needs exactly one of oci, url and selector"))]
pub struct FetchConfiguration {
    /// OCI artifact holding metadata.yaml and the components ([http://]registry/repository[:tag];
    /// without a tag, spec.version is the tag). Credentials come from the config Secret
    /// (OCI_USERNAME and OCI_PASSWORD, or OCI_ACCESS_TOKEN / OCI_REFRESH_TOKEN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<String>,
    /// Releases page of a GitHub repository (https://github.com/{owner}/{repository}/releases)
    /// or a GitLab generic package URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Label selector of ConfigMaps in the provider's namespace, one per release, each with
    /// the keys `metadata` and `components`. A ConfigMap's version is its
    /// provider.cluster.x-k8s.io/version label, or else its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// A patch with an optional target. Not [`crate::TargetedPatch`], which requires the patch
/// text; the other operator's CRD does not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "A patch with an optional target.")]
pub struct Patch {
    /// The patch as YAML or JSON text: a list of RFC 6902 operations, or an object merged as
    /// an RFC 7386 merge patch.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub patch: String,
    /// Objects the patch applies to. Absent: every rendered object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PatchSelector>,
}

/// Selects rendered objects. Fields left empty match anything; the others must all match.
///
/// Not [`crate::PatchSelector`]: there an explicit empty group selects the core group, here it
/// matches any group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchSelector {
    /// API group (e.g. apps). The core group cannot be selected on its own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version (e.g. v1).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Object name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Label selector in kubectl's syntax (e.g. "app=manager,tier!=web").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
}

/// Manager and Deployment settings for one additional Deployment of a provider. Not
/// [`crate::AdditionalDeployment`] because its parts are this API's [`ManagerSpec`] and
/// [`DeploymentSpec`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "Manager and Deployment settings for one additional Deployment of a provider."
)]
pub struct AdditionalDeployments {
    /// Controller-manager settings of that Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<ManagerSpec>,
    /// Changes to that Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentSpec>,
}

// ---------------------------------------------------------------------------------------------
// Status.

/// This operator's status in the other operator's vocabulary. The status of both APIs has the
/// same fields and meaning (the v1alpha2 CRD validates conditions as metav1.Condition does,
/// which this fits them to): conditions get the other operator's reason where one corresponds
/// ([`conditions::go_reason`]), an empty reason is replaced by one derived from the type (the
/// other operator does the same), reasons and messages are fitted to metav1.Condition's limits,
/// and only the first condition of each type is kept.
pub fn go_status(status: &ProviderStatus) -> ProviderStatus {
    let mut out: Vec<Condition> = Vec::with_capacity(status.conditions.len());
    for c in &status.conditions {
        if out.iter().any(|o| o.type_ == c.type_) {
            continue;
        }
        let mut c = c.clone();
        let reason = conditions::go_reason(&c.type_, &c.reason);
        let reason = if reason.is_empty() {
            c.type_.as_str()
        } else {
            reason
        };
        c.reason = sanitize_reason(reason);
        truncate_at_char_boundary(&mut c.message, MAX_CONDITION_MESSAGE_BYTES);
        out.push(c);
    }
    ProviderStatus {
        conditions: out,
        ..status.clone()
    }
}

/// Longest condition message metav1.Condition allows, in bytes.
pub const MAX_CONDITION_MESSAGE_BYTES: usize = 32768;
const MAX_CONDITION_REASON_BYTES: usize = 1024;

// metav1.Condition's reason must match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$.
fn sanitize_reason(reason: &str) -> String {
    let kept: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        .collect();
    let trimmed = kept
        .trim_start_matches(|c: char| !c.is_ascii_alphabetic())
        .trim_end_matches([',', ':']);
    let mut out = trimmed.to_string();
    out.truncate(MAX_CONDITION_REASON_BYTES);
    let out = out.trim_end_matches([',', ':']).to_string();
    if out.is_empty() {
        "Unspecified".to_string()
    } else {
        out
    }
}

fn truncate_at_char_boundary(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
}

// The CRD schema of metav1.Condition lists, as the other operator's CRDs have it (this
// operator's CRD takes k8s-openapi's, without these limits), plus list-map semantics keyed by
// type so that server-side apply merges conditions one by one.
fn conditions_schema() -> Value {
    json!({
        "description": "Conditions (metav1.Condition): Ready, PreflightCheckPassed, ProviderInstalled,\nProviderUpgraded, and the further ones this operator writes.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "description": "One aspect of the provider's state.",
            "type": "object",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {
                    "description": "When the status last changed.",
                    "type": "string",
                    "format": "date-time"
                },
                "message": {
                    "description": "Human-readable details; may be empty.",
                    "type": "string",
                    "maxLength": MAX_CONDITION_MESSAGE_BYTES
                },
                "observedGeneration": {
                    "description": "The metadata.generation the condition was computed for.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0
                },
                "reason": {
                    "description": "Machine-readable reason of the last change, in CamelCase.",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_CONDITION_REASON_BYTES,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
                },
                "status": {
                    "description": "True, False or Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"]
                },
                "type": {
                    "description": "Type of the condition, in CamelCase or as domain/CamelCase.",
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
                }
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Kinds.

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

// ---------------------------------------------------------------------------------------------
// Conversion to this operator's API.

/// A v1alpha2 spec in this operator's API ([`ProviderSpec::to_v1alpha1`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Converted {
    /// The spec in this operator's API.
    pub spec: crate::ProviderSpec,
    /// One human-readable note per setting left out because the other operator silently
    /// ignored it too (each names the field by its path under `spec`), for a condition
    /// message: objects the other operator accepted must keep working unchanged.
    pub ignored: Vec<String>,
}

/// Why a v1alpha2 spec cannot be expressed in this operator's [`crate::ProviderSpec`]. Each
/// variant names the field (as a path under `spec`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// A duration that does not parse (Go syntax: "300ms", "1.5h", "2h45m", ...).
    #[error("{field}: {value:?} is not a duration: {reason}")]
    InvalidDuration {
        /// Path of the field.
        field: String,
        /// The value given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A number outside the range the setting can take.
    #[error("{field}: {value} is out of range ({min} to {max})")]
    OutOfRange {
        /// Path of the field.
        field: String,
        /// The value given.
        value: i64,
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A `--namespace` flag among the args of a container other than `manager`: this operator
    /// sets that flag on the manager container only, from manager.cacheNamespace.
    #[error(
        "{field}: --namespace can only be given for the manager container (as spec.manager.cacheNamespace)"
    )]
    NamespaceFlag {
        /// Path of the args.
        field: String,
    },
    /// spec.version is not a semantic version.
    #[error("spec.version: {version:?} is not a semantic version: {reason}")]
    InvalidVersion {
        /// The value given.
        version: String,
        /// What is wrong.
        reason: String,
    },
    /// A flag key without leading dashes: the other operator passes `key=value` as a
    /// positional argument, which the manager does not read as a flag. A deliberate departure
    /// from "accept what the other operator accepted": such a key never had the effect its
    /// writer meant, and guessing the dashes could change which flag is set.
    #[error(
        "{field}: key {key:?} does not start with \"-\", so it is not a flag; write it as \"--{key}\""
    )]
    NotAFlag {
        /// Path of the map.
        field: String,
        /// The key given.
        key: String,
    },
    /// A flag key that is empty after its dashes or holds `=` or whitespace.
    #[error("{field}: {key:?} is not a usable flag name")]
    InvalidFlagName {
        /// Path of the map.
        field: String,
        /// The key given.
        key: String,
    },
    /// Two settings give the same flag different values.
    #[error("{field}: flag --{flag} is set twice, to {first:?} and to {second:?}")]
    ConflictingFlag {
        /// Path of the setting met second.
        field: String,
        /// The flag, without dashes.
        flag: String,
        /// The value met first.
        first: String,
        /// The value met second.
        second: String,
    },
    /// A name that must not be empty.
    #[error("{field} must not be empty")]
    Empty {
        /// Path of the field.
        field: String,
    },
    /// A release URL other than https://, which the other operator cannot fetch either.
    #[error("{field}: {url:?} is not an https:// URL of a GitHub or GitLab release")]
    UnsupportedUrl {
        /// Path of the field.
        field: String,
        /// The value given.
        url: String,
    },
    /// More than one release source is set.
    #[error("spec.fetchConfig sets more than one of oci, url and selector")]
    ConflictingSources,
}

impl ProviderSpec {
    /// This spec in this operator's own API: every setting mapped to the one that does the
    /// same thing, or a [`ConversionError`] naming a value that cannot be expressed. Settings
    /// the other operator silently ignored are ignored too and named in
    /// [`Converted::ignored`].
    ///
    /// Top level:
    /// * `version`: trimmed, "v" added when missing (the other operator accepts "1.2.3" but
    ///   every Cluster API release tag has the "v"); must be a semantic version. Empty: none.
    /// * `configSecret.{name,namespace}` → `secretName`/`secretNamespace` (an empty namespace
    ///   is the provider's namespace in both APIs; the other operator's defaulting webhook
    ///   writes it in, this operator leaves it empty).
    /// * `additionalManifests` → `additionalManifests`.
    /// * `fetchConfig.{url,oci,selector}` → the same fields; empty strings count as absent, and
    ///   a fetchConfig with nothing usable is none (the other operator then uses clusterctl's
    ///   repository for the provider's name, as this one does). A url must be https://.
    /// * `manifestPatches` → `manifestPatches` verbatim. Matching follows the documented rules,
    ///   which differ from the other operator's code: that code requires apiVersion to match
    ///   only when the patch omits it (so a patch without apiVersion never applied there), and
    ///   it never compares metadata.namespace. Here a patch without apiVersion applies to every
    ///   object of its kind and a namespace narrows the match.
    /// * `patches` → `patches`; empty selector fields become absent (an empty group matches any
    ///   group there, while an explicit "" means the core group here).
    /// * `additionalDeployments` → `additionalDeployments`, entry by entry, with the manager
    ///   and deployment rules below.
    /// * `paused` is false: the v1alpha2 API has no such field.
    ///
    /// Manager (flags as the other operator renders them, except where its flags are wrong for
    /// Cluster API managers):
    /// * `maxConcurrentReconciles` → `maxConcurrentReconciles`. The other operator passes
    ///   `--max-concurrent-reconciles`, a flag Cluster API managers do not have (they exit at
    ///   start); here it sets every `--*-concurrency` flag of the manager, which is what the
    ///   setting means.
    /// * `controller.groupKindConcurrency` → `additionalArgs` `{kind}-concurrency`, with the
    ///   kind lower-cased and any `.group` suffix dropped (the other operator keeps the suffix,
    ///   giving flags like `--cluster.cluster.x-k8s.io-concurrency` that no manager has).
    /// * `leaderElection` → `leaderElection`. Durations in whole seconds as the other operator
    ///   renders them (zero: left as the release has it). resourceName, resourceNamespace and
    ///   resourceLock are kept; the other operator turns name and namespace into
    ///   `--leader-election-id`, which Cluster API managers do not have.
    /// * `syncPeriod` → `syncPeriod` in whole seconds ("10m" → "600s"); zero: none.
    /// * `verbosity` 1 (what the API server fills in) or absent → none, as the other operator
    ///   leaves `--v` alone at 1; other values → `verbosity`.
    /// * `metrics`, `health`, `webhook`, `cacheNamespace`, `gracefulShutDown`,
    ///   `profilerAddress`, `featureGates` → the fields of the same names.
    /// * `additionalArgs` → `additionalArgs`, keys without their leading dashes. A `--namespace`
    ///   flag (here, or in the args of the container named `manager`) becomes `cacheNamespace`,
    ///   since this operator ignores a namespace key among free-form flags.
    /// * `controller.cacheSyncTimeout` and `controller.recoverPanic` have no flag and no field
    ///   here, and the other operator ignored them as well: left out, with a note in
    ///   [`Converted::ignored`].
    ///
    /// Deployment: every field maps to the field of the same name. A container's `imageUrl`
    /// becomes an image whose repository, name and tag are all given (":latest" when the
    /// reference has neither tag nor digest, docker.io/library for a bare name), so that the
    /// whole image is replaced as with the other operator. Container `args` keys lose their
    /// leading dashes; a key without one is an error, because the other operator passes it as
    /// a positional argument, which is no flag.
    pub fn to_v1alpha1(&self) -> Result<Converted, ConversionError> {
        let mut ignored = Vec::new();
        let version = convert_version(&self.version)?;
        let (manager, deployment) = convert_scope(
            self.manager.as_ref(),
            self.deployment.as_ref(),
            "spec.manager",
            "spec.deployment",
            &mut ignored,
        )?;
        let (secret_name, secret_namespace) = match &self.config_secret {
            Some(s) => {
                if s.name.trim().is_empty() {
                    return Err(ConversionError::Empty {
                        field: "spec.configSecret.name".into(),
                    });
                }
                (Some(s.name.clone()), non_empty(&s.namespace))
            }
            None => (None, None),
        };
        let fetch_config = match &self.fetch_config {
            Some(f) => convert_fetch_config(f)?,
            None => None,
        };
        let additional_manifests = match &self.additional_manifests {
            Some(r) => {
                if r.name.trim().is_empty() {
                    return Err(ConversionError::Empty {
                        field: "spec.additionalManifests.name".into(),
                    });
                }
                Some(crate::ConfigMapReference {
                    name: r.name.clone(),
                    namespace: non_empty(&r.namespace),
                })
            }
            None => None,
        };
        let patches = self.patches.iter().map(convert_patch).collect();
        let mut additional_deployments = BTreeMap::new();
        for (name, ad) in &self.additional_deployments {
            let path = format!("spec.additionalDeployments[{name}]");
            let (manager, deployment) = convert_scope(
                ad.manager.as_ref(),
                ad.deployment.as_ref(),
                &format!("{path}.manager"),
                &format!("{path}.deployment"),
                &mut ignored,
            )?;
            additional_deployments.insert(
                name.clone(),
                crate::AdditionalDeployment {
                    manager,
                    deployment,
                },
            );
        }
        let spec = crate::ProviderSpec {
            version,
            manager,
            deployment,
            secret_name,
            secret_namespace,
            fetch_config,
            paused: false,
            manifest_patches: self.manifest_patches.clone(),
            patches,
            additional_manifests,
            additional_deployments,
        };
        Ok(Converted { spec, ignored })
    }
}

// Name of the container the other operator applies the manager settings to.
const MANAGER_CONTAINER: &str = "manager";
// The verbosity the other operator's CRD fills in, and at which it leaves --v alone.
const GO_DEFAULT_VERBOSITY: i64 = 1;

// The manager and deployment settings of one Deployment (the main one or an additional one).
fn convert_scope(
    manager: Option<&ManagerSpec>,
    deployment: Option<&DeploymentSpec>,
    manager_path: &str,
    deployment_path: &str,
    ignored: &mut Vec<String>,
) -> Result<(Option<crate::ManagerSpec>, Option<crate::DeploymentSpec>), ConversionError> {
    let (deployment, container_namespace) = match deployment {
        Some(d) => {
            let (d, ns) = convert_deployment(d, deployment_path)?;
            (Some(d), ns)
        }
        None => (None, None),
    };
    let manager = match manager {
        Some(m) => convert_manager(m, container_namespace, manager_path, ignored)?,
        None => container_namespace.map(|(ns, _)| crate::ManagerSpec {
            cache_namespace: Some(ns),
            ..Default::default()
        }),
    };
    Ok((manager, deployment))
}

// `container_namespace`: a --namespace flag among the manager container's args, with its path.
// Settings without effect in either operator are noted in `ignored`.
fn convert_manager(
    m: &ManagerSpec,
    container_namespace: Option<(String, String)>,
    path: &str,
    ignored: &mut Vec<String>,
) -> Result<Option<crate::ManagerSpec>, ConversionError> {
    let mut out = crate::ManagerSpec::default();
    if let Some(p) = &m.sync_period {
        let secs = whole_seconds(&format!("{path}.syncPeriod"), p)?;
        if secs > 0 {
            out.sync_period = Some(IntOrString::String(format!("{secs}s")));
        }
    }
    if let Some(le) = &m.leader_election {
        out.leader_election = Some(convert_leader_election(
            le,
            &format!("{path}.leaderElection"),
        )?);
    }
    if let Some(g) = &m.graceful_shutdown {
        parse_go_duration(g).map_err(|reason| ConversionError::InvalidDuration {
            field: format!("{path}.gracefulShutDown"),
            value: g.clone(),
            reason,
        })?;
        out.graceful_shutdown = Some(g.clone());
    }
    let mut flags = Flags::default();
    if let Some(c) = &m.controller {
        if c.cache_sync_timeout.is_some() {
            ignored.push(format!(
                "{path}.controller.cacheSyncTimeout is ignored: no manager flag sets it (the other operator ignored it too); give the provider's own timeout flag in additionalArgs if it has one"
            ));
        }
        if c.recover_panic.is_some() {
            ignored.push(format!(
                "{path}.controller.recoverPanic is ignored: no manager flag sets it (the other operator ignored it too); give the provider's own flag in additionalArgs if it has one"
            ));
        }
        for (group_kind, n) in &c.group_kind_concurrency {
            let field = format!("{path}.controller.groupKindConcurrency[{group_kind}]");
            let kind = group_kind
                .split_once('.')
                .map_or(group_kind.as_str(), |(k, _)| k)
                .to_ascii_lowercase();
            if kind.is_empty() || kind.contains(char::is_whitespace) || kind.contains('=') {
                return Err(ConversionError::InvalidFlagName {
                    field,
                    key: group_kind.clone(),
                });
            }
            flags.insert(&field, format!("{kind}-concurrency"), n.to_string())?;
        }
    }
    // The namespace flag: manager.cacheNamespace wins over the container's args (the other
    // operator sets it after them); additionalArgs may only repeat the same value (the other
    // operator refuses an additional arg that is already set).
    let mut namespace = non_empty(&m.cache_namespace);
    let args_field = format!("{path}.additionalArgs");
    for (key, value) in &m.additional_args {
        let name = flag_name(&args_field, key)?;
        if name != "namespace" {
            flags.insert(&args_field, name, value.clone())?;
            continue;
        }
        let earlier = namespace
            .clone()
            .or_else(|| container_namespace.as_ref().map(|(ns, _)| ns.clone()));
        match earlier {
            Some(first) if first != *value => {
                return Err(ConversionError::ConflictingFlag {
                    field: args_field,
                    flag: "namespace".into(),
                    first,
                    second: value.clone(),
                });
            }
            _ => namespace = Some(value.clone()),
        }
    }
    out.cache_namespace = namespace.or(container_namespace.map(|(ns, _)| ns));
    let metrics = crate::ControllerMetrics {
        bind_address: non_empty(&m.metrics.bind_address),
        diagnostics_address: non_empty(&m.metrics.diagnostics_address),
        insecure_diagnostics: m.metrics.insecure_diagnostics.then_some(true),
    };
    if metrics != crate::ControllerMetrics::default() {
        out.metrics = Some(metrics);
    }
    let health = crate::ControllerHealth {
        health_probe_bind_address: non_empty(&m.health.health_probe_bind_address),
        readiness_endpoint_name: non_empty(&m.health.readiness_endpoint_name),
        liveness_endpoint_name: non_empty(&m.health.liveness_endpoint_name),
    };
    if health != crate::ControllerHealth::default() {
        out.health = Some(health);
    }
    let webhook = crate::ControllerWebhook {
        port: match m.webhook.port {
            Some(p) => Some(in_range(&format!("{path}.webhook.port"), p, 1, 65535)?),
            None => None,
        },
        host: non_empty(&m.webhook.host),
        cert_dir: non_empty(&m.webhook.cert_dir),
    };
    if webhook != crate::ControllerWebhook::default() {
        out.webhook = Some(webhook);
    }
    out.profiler_address = non_empty(&m.profiler_address);
    out.max_concurrent_reconciles = match m.max_concurrent_reconciles {
        None | Some(0) => None,
        Some(n) => Some(in_range(
            &format!("{path}.maxConcurrentReconciles"),
            n,
            1,
            I32_MAX,
        )?),
    };
    out.verbosity = match m.verbosity {
        None | Some(GO_DEFAULT_VERBOSITY) => None,
        Some(v) => Some(in_range(&format!("{path}.verbosity"), v, 0, I32_MAX)?),
    };
    if !m.feature_gates.is_empty() {
        out.feature_gates = Some(m.feature_gates.clone());
    }
    if !flags.0.is_empty() {
        out.additional_args = Some(flags.0);
    }
    Ok((out != crate::ManagerSpec::default()).then_some(out))
}

const I32_MAX: i64 = i32::MAX as i64;

// The deployment settings, and a --namespace flag of the manager container (with its path).
fn convert_deployment(
    d: &DeploymentSpec,
    path: &str,
) -> Result<(crate::DeploymentSpec, Option<(String, String)>), ConversionError> {
    let replicas = match d.replicas {
        Some(r) => Some(in_range(&format!("{path}.replicas"), r, 0, I32_MAX)?),
        None => None,
    };
    let mut namespace = None;
    let mut containers = Vec::with_capacity(d.containers.len());
    for (i, c) in d.containers.iter().enumerate() {
        let (c, ns) = convert_container(c, &format!("{path}.containers[{i}]"))?;
        if ns.is_some() {
            namespace = ns;
        }
        containers.push(c);
    }
    Ok((
        crate::DeploymentSpec {
            replicas,
            node_selector: d.node_selector.clone(),
            tolerations: d.tolerations.clone(),
            affinity: d.affinity.clone(),
            containers,
            service_account_name: non_empty(&d.service_account_name),
            image_pull_secrets: d.image_pull_secrets.clone(),
        },
        namespace,
    ))
}

fn convert_container(
    c: &ContainerSpec,
    path: &str,
) -> Result<(crate::ContainerSpec, Option<(String, String)>), ConversionError> {
    if c.name.trim().is_empty() {
        return Err(ConversionError::Empty {
            field: format!("{path}.name"),
        });
    }
    let image = match &c.image_url {
        Some(url) if url.trim().is_empty() => {
            return Err(ConversionError::Empty {
                field: format!("{path}.imageUrl"),
            });
        }
        Some(url) => Some(ContainerImage::Meta(whole_image(url.trim()))),
        None => None,
    };
    let field = format!("{path}.args");
    let mut flags = Flags::default();
    let mut namespace = None;
    for (key, value) in &c.args {
        let name = flag_name(&field, key)?;
        if name == "namespace" {
            if c.name != MANAGER_CONTAINER {
                return Err(ConversionError::NamespaceFlag { field });
            }
            if let Some((first, _)) = namespace.as_ref().filter(|(ns, _)| ns != value) {
                return Err(ConversionError::ConflictingFlag {
                    field,
                    flag: name,
                    first: String::clone(first),
                    second: value.clone(),
                });
            }
            namespace = Some((value.clone(), field.clone()));
            continue;
        }
        flags.insert(&field, name, value.clone())?;
    }
    let container = crate::ContainerSpec {
        name: c.name.clone(),
        image,
        args: (!flags.0.is_empty()).then(|| {
            flags
                .0
                .into_iter()
                .map(|(k, v)| (k, IntOrString::String(v)))
                .collect()
        }),
        env: (!c.env.is_empty()).then(|| c.env.clone()),
        resources: c.resources.clone(),
        command: c.command.clone(),
    };
    Ok((container, namespace))
}

// An image reference as pieces that leave nothing of the release's image in place.
fn whole_image(reference: &str) -> ImageMeta {
    let mut meta = crate::image::split_reference(reference);
    if meta.repository.is_none() {
        meta.repository = Some("docker.io/library".into());
    }
    if meta.tag.is_none() {
        meta.tag = Some("latest".into());
    }
    meta
}

fn convert_leader_election(
    le: &LeaderElectionConfiguration,
    path: &str,
) -> Result<crate::LeaderElectionConfiguration, ConversionError> {
    let seconds = |name: &str, value: &str| -> Result<Option<String>, ConversionError> {
        let secs = whole_seconds(&format!("{path}.{name}"), value)?;
        Ok((secs > 0).then(|| format!("{secs}s")))
    };
    Ok(crate::LeaderElectionConfiguration {
        leader_elect: Some(le.leader_elect),
        lease_duration: seconds("leaseDuration", &le.lease_duration)?,
        renew_deadline: seconds("renewDeadline", &le.renew_deadline)?,
        retry_period: seconds("retryPeriod", &le.retry_period)?,
        resource_lock: non_empty(&le.resource_lock),
        resource_name: non_empty(&le.resource_name),
        resource_namespace: non_empty(&le.resource_namespace),
    })
}

fn convert_fetch_config(
    f: &FetchConfiguration,
) -> Result<Option<crate::FetchConfiguration>, ConversionError> {
    let url = f.url.as_deref().filter(|s| !s.is_empty());
    let oci = f.oci.as_deref().filter(|s| !s.is_empty());
    let set = [url.is_some(), oci.is_some(), f.selector.is_some()]
        .into_iter()
        .filter(|x| *x)
        .count();
    match set {
        0 => Ok(None),
        1 => Ok(Some(crate::FetchConfiguration {
            url: url.map(https_url).transpose()?,
            selector: f.selector.clone(),
            oci: oci.map(str::to_string),
        })),
        _ => Err(ConversionError::ConflictingSources),
    }
}

// The scheme of a URL is case-insensitive; this operator's API wants it lower-case.
fn https_url(url: &str) -> Result<String, ConversionError> {
    match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") && !rest.is_empty() => {
            Ok(format!("https://{rest}"))
        }
        _ => Err(ConversionError::UnsupportedUrl {
            field: "spec.fetchConfig.url".into(),
            url: url.to_string(),
        }),
    }
}

fn convert_patch(p: &Patch) -> crate::TargetedPatch {
    crate::TargetedPatch {
        patch: p.patch.clone(),
        target: p.target.as_ref().map(|t| crate::PatchSelector {
            group: non_empty(&t.group),
            version: non_empty(&t.version),
            kind: non_empty(&t.kind),
            name: non_empty(&t.name),
            namespace: non_empty(&t.namespace),
            label_selector: non_empty(&t.label_selector),
        }),
    }
}

fn convert_version(version: &str) -> Result<Option<String>, ConversionError> {
    let v = version.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let bare = v.strip_prefix('v').unwrap_or(v);
    semver::Version::parse(bare).map_err(|e| ConversionError::InvalidVersion {
        version: version.to_string(),
        reason: e.to_string(),
    })?;
    Ok(Some(format!("v{bare}")))
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn in_range(field: &str, value: i64, min: i64, max: i64) -> Result<i32, ConversionError> {
    let out_of_range = || ConversionError::OutOfRange {
        field: field.to_string(),
        value,
        min,
        max,
    };
    if value < min || value > max {
        return Err(out_of_range());
    }
    i32::try_from(value).map_err(|_| out_of_range())
}

// A free-form flag key as the other operator writes it ("--name" or "-name") → "name".
fn flag_name(field: &str, key: &str) -> Result<String, ConversionError> {
    let Some(stripped) = key.strip_prefix('-') else {
        return Err(ConversionError::NotAFlag {
            field: field.to_string(),
            key: key.to_string(),
        });
    };
    let name = stripped.trim_start_matches('-');
    if name.is_empty() || name.contains('=') || name.contains(char::is_whitespace) {
        return Err(ConversionError::InvalidFlagName {
            field: field.to_string(),
            key: key.to_string(),
        });
    }
    Ok(name.to_string())
}

// Flags by name without dashes. Setting one twice to different values is an error.
#[derive(Default)]
struct Flags(BTreeMap<String, String>);

impl Flags {
    fn insert(&mut self, field: &str, name: String, value: String) -> Result<(), ConversionError> {
        match self.0.get(&name) {
            Some(first) if *first != value => Err(ConversionError::ConflictingFlag {
                field: field.to_string(),
                flag: name,
                first: first.clone(),
                second: value,
            }),
            Some(_) => Ok(()),
            None => {
                self.0.insert(name, value);
                Ok(())
            }
        }
    }
}

// A Go duration rounded to whole seconds, as the other operator renders durations into flags.
fn whole_seconds(field: &str, value: &str) -> Result<i64, ConversionError> {
    let nanos = parse_go_duration(value).map_err(|reason| ConversionError::InvalidDuration {
        field: field.to_string(),
        value: value.to_string(),
        reason,
    })?;
    // Rounds half away from zero, as Go's Duration.Round does; |nanos| < 2^63 fits.
    Ok((nanos / 1e9).round() as i64)
}

/// Parses a duration in Go's `time.ParseDuration` syntax (as `metav1.Duration` fields are
/// written: "90s", "1m30s", "1.5h", "300ms", "-2s", "0"), returning nanoseconds.
pub fn parse_go_duration(text: &str) -> Result<f64, String> {
    let mut s = text;
    let negative = match s.as_bytes().first() {
        Some(&b'-') => {
            s = &s[1..];
            true
        }
        Some(&b'+') => {
            s = &s[1..];
            false
        }
        _ => false,
    };
    if s == "0" {
        return Ok(0.0);
    }
    if s.is_empty() {
        return Err("empty".into());
    }
    let mut total = 0.0_f64;
    while !s.is_empty() {
        let int_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let int_part = &s[..int_end];
        s = &s[int_end..];
        let mut frac_part = "";
        if let Some(rest) = s.strip_prefix('.') {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            frac_part = &rest[..end];
            s = &rest[end..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err("expected a number".into());
        }
        let unit_end = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        let unit = &s[..unit_end];
        s = &s[unit_end..];
        let scale = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err("a unit (ns, us, ms, s, m, h) is missing".into()),
            other => return Err(format!("unknown unit {other:?}")),
        };
        let number: f64 = format!(
            "{}.{}",
            if int_part.is_empty() { "0" } else { int_part },
            if frac_part.is_empty() { "0" } else { frac_part }
        )
        .parse()
        .map_err(|e| format!("{e}"))?;
        total += number * scale;
    }
    // Go's durations are int64 nanoseconds.
    if total >= 9.223_372_036_854_776e18 {
        return Err("longer than Go's longest duration (about 292 years)".into());
    }
    Ok(if negative { -total } else { total })
}

// ---------------------------------------------------------------------------------------------
// CRDs.

// The schema of `T` as in the other operator's CRDs: no field is marked nullable (theirs have
// none, so a null is dropped by the API server as there), and reference names default to "".
fn go_schema_of<T: JsonSchema>() -> Result<Value, serde_json::Error> {
    let mut v = schema_of::<T>(false)?;
    strip_nullable(&mut v);
    default_reference_names(&mut v);
    Ok(v)
}

// The other operator's CRDs give the name of a LocalObjectReference (image pull secrets, and the
// secretKeyRef and configMapKeyRef of environment variables) the default "" instead of
// requiring it, as Kubernetes' own schemas do; k8s-openapi's schemas require it. Follow theirs,
// so that every object their CRDs accept is accepted here.
fn default_reference_names(schema: &mut Value) {
    let Value::Object(m) = schema else {
        return;
    };
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        if let Some(items) = props
            .get_mut("imagePullSecrets")
            .and_then(|p| p.get_mut("items"))
        {
            name_defaults_to_empty(items);
        }
        for key in ["secretKeyRef", "configMapKeyRef"] {
            if let Some(r) = props.get_mut(key) {
                name_defaults_to_empty(r);
            }
        }
        for p in props.values_mut() {
            default_reference_names(p);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(s) = m.get_mut(key) {
            default_reference_names(s);
        }
    }
}

fn name_defaults_to_empty(schema: &mut Value) {
    let Value::Object(m) = schema else {
        return;
    };
    if let Some(Value::Array(required)) = m.get_mut("required") {
        required.retain(|r| r != "name");
        if required.is_empty() {
            m.remove("required");
        }
    }
    if let Some(Value::Object(name)) = m.get_mut("properties").and_then(|p| p.get_mut("name")) {
        name.insert("default".into(), json!(""));
    }
}

// Removes the `nullable` keyword from a schema and all its subschemas (but never a property
// that happens to be called so).
fn strip_nullable(schema: &mut Value) {
    let Value::Object(m) = schema else {
        return;
    };
    m.remove("nullable");
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for p in props.values_mut() {
            strip_nullable(p);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(s) = m.get_mut(key) {
            strip_nullable(s);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = m.get_mut(key) {
            for s in list {
                strip_nullable(s);
            }
        }
    }
}

/// The CRD of one kind of this API: the other operator's resource name (e.g.
/// `coreproviders.operator.cluster.x-k8s.io`), short name and printer columns, no categories,
/// one served and stored version `v1alpha2` with a status subresource and no conversion webhook.
pub fn crd(t: ProviderType) -> Result<CustomResourceDefinition, CrdError> {
    let mut spec = go_schema_of::<ProviderSpec>()?;
    describe(
        &mut spec,
        "Desired state of the provider, shared by every provider kind of this API.",
    );
    let mut status = go_schema_of::<ProviderStatus>()?;
    describe(&mut status, "Observed state of the provider.");
    if let Some(Value::Object(props)) = status.get_mut("properties") {
        props.insert("conditions".into(), conditions_schema());
    }
    provider_crd(CrdParts {
        group: GROUP,
        version: VERSION,
        provider_type: t,
        categories: &[],
        printer_columns: json!([
            { "name": "InstalledVersion", "type": "string", "jsonPath": ".status.installedVersion" },
            { "name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status" },
            { "name": "Summary", "type": "string", "jsonPath": ".status.summary" },
        ]),
        description: format!(
            "{}: a Cluster API {} provider, in the API of kubernetes-sigs/cluster-api-operator.",
            t.kind(),
            t.word()
        ),
        type_meta_descriptions: [
            "Versioned schema of this representation of the object.",
            "REST resource this object represents.",
        ],
        spec,
        status,
        no_conversion: true,
    })
}

/// The CRDs of all seven kinds of this API, in clusterctl's install order. Separate from
/// [`crate::crd::all_crds`], which stays this operator's own API.
pub fn all_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    ProviderType::ALL.into_iter().map(crd).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let secs = |s: &str| parse_go_duration(s).map(|n| n / 1e9);
        assert_eq!(secs("500s"), Ok(500.0));
        assert_eq!(secs("10m"), Ok(600.0));
        assert_eq!(secs("1h30m"), Ok(5400.0));
        assert_eq!(secs("1.5h"), Ok(5400.0));
        assert_eq!(secs("0"), Ok(0.0));
        assert_eq!(secs("-2s"), Ok(-2.0));
        assert_eq!(secs("300ms"), Ok(0.3));
        assert_eq!(secs(".5s"), Ok(0.5));
        assert_eq!(secs("2\u{b5}s").map(|s| (s * 1e6).round()), Ok(2.0));
        for bad in ["", "10", "s", "5x", "1.s.", "-", "1h-2m", "99999999999h"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(whole_seconds("f", "1500ms"), Ok(2));
        assert_eq!(whole_seconds("f", "1499ms"), Ok(1));
        assert_eq!(whole_seconds("f", "400ms"), Ok(0));
    }

    #[test]
    fn reasons_fit_metav1_condition() {
        assert_eq!(sanitize_reason("ProviderInstalled"), "ProviderInstalled");
        assert_eq!(
            sanitize_reason("failed to load additional manifests"),
            "failedtoloadadditionalmanifests"
        );
        assert_eq!(sanitize_reason("9lives:"), "lives");
        assert_eq!(sanitize_reason("example.com/Thing"), "examplecomThing");
        assert_eq!(sanitize_reason(""), "Unspecified");
        assert_eq!(sanitize_reason(&"A".repeat(2000)).len(), 1024);
        let mut s = "é".repeat(20000);
        truncate_at_char_boundary(&mut s, MAX_CONDITION_MESSAGE_BYTES);
        assert!(s.len() <= MAX_CONDITION_MESSAGE_BYTES && s.len() > 32760);
    }

    #[test]
    fn flag_keys() {
        assert_eq!(flag_name("f", "--a-b"), Ok("a-b".to_string()));
        assert_eq!(flag_name("f", "-v"), Ok("v".to_string()));
        assert!(matches!(
            flag_name("f", "exampleArg"),
            Err(ConversionError::NotAFlag { .. })
        ));
        for bad in ["--", "-", "--a=b", "--a b"] {
            assert!(
                matches!(
                    flag_name("f", bad),
                    Err(ConversionError::InvalidFlagName { .. })
                ),
                "{bad}"
            );
        }
    }
}
