//! The spec of the seven kinds, with exactly the published field set and JSON names of the
//! other operator's API.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Affinity, EnvVar, LocalObjectReference, ResourceRequirements, Toleration},
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

    /// This operator's addition (the other operator has no such field): what deleting this
    /// object does with what the provider installed. Block (the default) removes the components
    /// and keeps the CRDs and the namespace, once no custom resource of the CRDs remains;
    /// Orphan removes nothing, for a later object of the same kind, namespace and name to adopt;
    /// Purge also removes the CRDs and the namespace. See the same field of
    /// management.cluster.x-k8s.io/v1alpha1.
    #[serde(default, skip_serializing_if = "crate::DeletionPolicy::is_block")]
    pub deletion_policy: crate::DeletionPolicy,
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
