//! The shared `ProviderSpec` of every provider kind, as the specification defines it, plus the
//! additive fields users of today's tools expect.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Affinity, EnvVar, LocalObjectReference, ResourceRequirements, Toleration},
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::image::ContainerImage;

/// Desired state of a Cluster API provider managed by the operator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.patches) || !has(self.manifestPatches) || size(self.patches) == 0 || size(self.manifestPatches) == 0").message("use either patches or the legacy manifestPatches, not both"))]
pub struct ProviderSpec {
    /// Version of the provider release to install, a semantic version with a "v" prefix
    /// (e.g. v1.12.0). When empty, the operator resolves the latest release the same way
    /// clusterctl does and writes it back here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("self == '' || self.matches('^v(0|[1-9][0-9]*)[.](0|[1-9][0-9]*)[.](0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?([+][0-9A-Za-z.-]+)?$')").message("version must be a semantic version with a \"v\" prefix, e.g. v1.12.0"))]
    pub version: Option<String>,

    /// Settings of the provider's controller manager, turned into the flags its binary really
    /// has (known for the Cluster API core and kubeadm managers; conventional controller-runtime
    /// flags otherwise). A setting without effect on the manager is named by the
    /// ManagerConfigured condition. Explicit fields here win over the same flag given in
    /// deployment.containers[].args.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<ManagerSpec>,

    /// Overrides for the provider's Deployment: replicas, scheduling, containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentSpec>,

    /// Name of a Secret whose key/value pairs are the variables substituted into the provider
    /// components (credentials, for example). Changing its content re-renders the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,

    /// Namespace of the Secret named by secretName; defaults to the provider's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_namespace: Option<String>,

    /// Where to fetch the provider's release (components and metadata.yaml): exactly one of
    /// url, selector or oci. Used when installing and upgrading. When absent, the
    /// operator uses the built-in repository of the provider's kind and name, as clusterctl
    /// does (an InfrastructureProvider named aws fetches kubernetes-sigs/cluster-api-provider-aws).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_config: Option<FetchConfiguration>,

    /// Pauses the provider: every controller Deployment is scaled to zero (the original replica
    /// count is kept in the management.cluster.x-k8s.io/original-controller-replicas annotation)
    /// and the operator changes nothing else until it is unpaused. Required on every provider
    /// before an upgrade that changes the Cluster API contract.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// Legacy merge patches (RFC 7386, YAML or JSON) applied to the rendered components. Each
    /// patch must carry a kind and applies to every object of that kind, narrowed by the
    /// apiVersion, metadata.name and metadata.namespace it also carries. Cannot be combined
    /// with patches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_patches: Vec<String>,

    /// Patches with explicit targets: a JSON patch (RFC 6902, a YAML/JSON list of operations)
    /// or a merge patch (a YAML/JSON object). Cannot be combined with manifestPatches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<TargetedPatch>,

    /// A ConfigMap whose `manifests` key holds extra objects (multi-document YAML) installed
    /// and removed together with the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_manifests: Option<ConfigMapReference>,

    /// Settings for Deployments of the provider other than its main controller, keyed by
    /// Deployment name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub additional_deployments: BTreeMap<String, AdditionalDeployment>,

    /// What deleting this object does with what the provider installed. Block (the default):
    /// wait while custom resources of the provider's CRDs exist (and, for the core provider,
    /// other providers), then remove the components, keeping the CRDs and the namespace.
    /// Orphan: remove nothing; every installed object and the clusterctl inventory entry stay,
    /// and a later provider object of the same kind, namespace and name adopts them without
    /// restarting the managers. Purge: as Block, then, once no custom resource of its CRDs
    /// remains and its namespace holds nothing the provider did not install, also remove its
    /// CRDs and its namespace. Read at every step of a deletion, so it may be changed while one
    /// waits (to Orphan, say, to let a blocked deletion go).
    #[serde(default, skip_serializing_if = "DeletionPolicy::is_block")]
    pub deletion_policy: DeletionPolicy,
}

/// What deleting a provider object does with the objects the provider installed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Wait for the custom resources to go, remove the components, keep CRDs and namespace.
    #[default]
    Block,
    /// Leave everything installed running, for a later provider object to adopt.
    Orphan,
    /// As Block, then remove the CRDs and the namespace too.
    Purge,
}

impl DeletionPolicy {
    /// Every policy, the default first.
    pub const ALL: [DeletionPolicy; 3] = [
        DeletionPolicy::Block,
        DeletionPolicy::Orphan,
        DeletionPolicy::Purge,
    ];

    /// Whether this is the default, [`DeletionPolicy::Block`].
    pub fn is_block(&self) -> bool {
        *self == DeletionPolicy::Block
    }

    /// The policy as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletionPolicy::Block => "Block",
            DeletionPolicy::Orphan => "Orphan",
            DeletionPolicy::Purge => "Purge",
        }
    }
}

impl std::fmt::Display for DeletionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Controller-manager settings. The fields of controller-runtime's
/// ControllerManagerConfigurationSpec are inlined, as the specification says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.debug) || !self.debug || !(has(self.syncPeriod) || has(self.leaderElection) || has(self.cacheNamespace) || has(self.gracefulShutDown) || has(self.metrics) || has(self.health) || has(self.webhook) || has(self.profilerAddress) || has(self.maxConcurrentReconciles) || has(self.verbosity) || has(self.featureGates) || has(self.metricsAddress) || has(self.additionalArgs))").message("manager.debug sets verbosity 5 and profilerAddress localhost:6060 itself: with debug true no other manager field may be set"))]
pub struct ManagerSpec {
    /// Minimum frequency at which watched resources are reconciled (--sync-period), as a
    /// duration such as "10m"; a bare integer is read as seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_period: Option<IntOrString>,

    /// Leader election of the provider's manager (--leader-elect and related flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_election: Option<LeaderElectionConfiguration>,

    /// Restricts the manager's cache to one namespace (--namespace). Usually left empty: the
    /// operator's deployment model has every provider watch all namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_namespace: Option<String>,

    /// Time given to runnables to stop before the manager exits, as a duration. No Cluster API
    /// manager has a flag for it: reported as without effect.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "gracefulShutDown"
    )]
    pub graceful_shutdown: Option<String>,

    /// Metrics endpoint of the manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<ControllerMetrics>,

    /// Health probe endpoint of the manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ControllerHealth>,

    /// Webhook server of the manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<ControllerWebhook>,

    /// Shorthand for metrics.bindAddress, as the specification's first example writes it.
    /// metrics.bindAddress wins when both are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_address: Option<String>,

    /// Bind address of the pprof profiler (--profiler-address), e.g. localhost:6060. Empty
    /// disables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiler_address: Option<String>,

    /// Maximum number of concurrent reconciles of each controller: sets every --*-concurrency
    /// flag of the manager (never --max-concurrent-reconciles, which Cluster API managers
    /// reject, unless the binary has it). A concurrency flag given in the container args or
    /// additionalArgs wins over it for its controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrent_reconciles: Option<i32>,

    /// Log verbosity (--v).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub verbosity: Option<i32>,

    /// Debug mode: verbosity 5 and the profiler on localhost:6060. No other manager field may be
    /// set together with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug: Option<bool>,

    /// Feature gates of the provider (--feature-gates), merged with the ones the release and the
    /// container args already set; these win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,

    /// Extra flags for the manager container, by flag name without dashes, passed as given.
    /// They win over deployment.containers[].args but not over the explicit fields above. A
    /// flag the manager's binary is known not to have is reported (the manager would exit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_args: Option<BTreeMap<String, String>>,
}

/// Leader election settings of a provider's manager (component-base LeaderElectionConfiguration).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectionConfiguration {
    /// Enables leader election (--leader-elect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<bool>,
    /// Lease duration (--leader-elect-lease-duration), e.g. "15s".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration: Option<String>,
    /// Renew deadline (--leader-elect-renew-deadline), e.g. "10s".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<String>,
    /// Retry period (--leader-elect-retry-period), e.g. "2s".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<String>,
    /// Kind of lock object; no manager flag (providers use Leases): reported as without effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_lock: Option<String>,
    /// Name of the lock object; no manager flag: reported as without effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// Namespace of the lock object; no manager flag: reported as without effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_namespace: Option<String>,
}

/// Metrics endpoint settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerMetrics {
    /// TCP address for Prometheus metrics over plain HTTP; "0" disables them.
    /// --metrics-bind-addr, or --diagnostics-address with --insecure-diagnostics=true for
    /// managers that serve metrics on their diagnostics endpoint (Cluster API since v1.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_address: Option<String>,
    /// Address of the secure diagnostics endpoint (--diagnostics-address) of newer providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics_address: Option<String>,
    /// Serve diagnostics over plain HTTP without authentication (--insecure-diagnostics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_diagnostics: Option<bool>,
}

/// Health probe settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerHealth {
    /// TCP address of the health probes (--health-addr).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_probe_bind_address: Option<String>,
    /// Readiness endpoint name; no manager flag: reported as without effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_endpoint_name: Option<String>,
    /// Liveness endpoint name; no manager flag: reported as without effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_endpoint_name: Option<String>,
}

/// Webhook server settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerWebhook {
    /// Port of the webhook server (--webhook-port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Host the webhook server binds to (--webhook-host). Cluster API managers have no such
    /// flag: reported as without effect for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Directory holding tls.crt and tls.key (--webhook-cert-dir).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_dir: Option<String>,
}

/// Overrides for a provider Deployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// Number of pods; the release's own value when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Labels a node must carry for the pods to be scheduled on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations of the pods. An empty list clears the release's tolerations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Scheduling constraints of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Per-container overrides, matched by container name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerSpec>,
    /// Service account the pods run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Secrets used to pull the images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
}

/// Overrides for one container of a provider Deployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// Name of the container in the release (usually `manager`).
    pub name: String,
    /// Image of the container: either one string ("registry.example/capa-controller:v1") or
    /// the pieces {repository, name, tag}; pieces not given keep the release's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ContainerImage>,
    /// Extra controller flags by name without dashes (e.g. awscluster-concurrency: 12).
    /// Manager fields win over the same flag here; the key `namespace` is ignored because every
    /// provider watches all namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<BTreeMap<String, IntOrString>>,
    /// Environment variables, merged by name into the container's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// Compute resources; the release's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Replaces the container's entrypoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

/// Where the operator fetches a provider's release from. Exactly one source may be set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.url), has(self.selector), has(self.oci)].exists_one(x, x)").message("fetchConfig must set exactly one of url, selector or oci"))]
pub struct FetchConfiguration {
    /// Release URL of a GitHub repository (https://github.com/{owner}/{repo}/releases) or a
    /// GitLab generic package (https://gitlab.example/api/v4/projects/{project}/packages/generic/{package}/{version}).
    /// The release is spec.version, or the latest one when spec.version is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('https://')").message("fetchConfig.url must be an https:// URL"))]
    pub url: Option<String>,

    /// Label selector of ConfigMaps in the provider's namespace, one per version, with keys
    /// `components` and `metadata` (air-gapped installs). The version is read from the label
    /// provider.cluster.x-k8s.io/version or else from the ConfigMap's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// OCI artifact reference (registry/repository[:tag]) holding metadata.yaml and the
    /// components file; credentials come from the provider Secret (OCI_USERNAME, OCI_PASSWORD
    /// or OCI_ACCESS_TOKEN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub oci: Option<String>,
}

/// A patch with an explicit target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetedPatch {
    /// The patch: a YAML or JSON list of RFC 6902 operations, or a merge patch object.
    pub patch: String,
    /// Objects the patch applies to; all rendered objects when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PatchSelector>,
}

/// Selects rendered objects for a patch; every field set must match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchSelector {
    /// API group ("" for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// API version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Label selector in kubectl syntax (e.g. "app=manager,tier!=web").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// Reference to a ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapReference {
    /// Name of the ConfigMap.
    pub name: String,
    /// Namespace of the ConfigMap; the provider's namespace when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Settings for an additional Deployment of a provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalDeployment {
    /// Controller-manager settings of that Deployment's manager container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<ManagerSpec>,
    /// Overrides for that Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentSpec>,
}
