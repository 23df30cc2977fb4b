//! Provider API of the operator: seven provider kinds in `management.cluster.x-k8s.io/v1alpha1`
//! sharing one [`ProviderSpec`] and one [`ProviderStatus`], their CRDs, and the normalization of
//! the shorthand forms the specification's examples use.

pub mod conditions;
pub mod crd;
pub mod image;
pub mod kinds;
pub mod normalize;
pub mod note;
pub mod owner;
pub mod rollout;
pub mod spec;
pub mod status;
pub mod v1alpha2;

pub use image::{ContainerImage, ImageMeta};
pub use kinds::{
    AddonProvider, AnyProvider, BootstrapProvider, ControlPlaneProvider, CoreProvider,
    IPAMProvider, InfrastructureProvider, Provider, ProviderApi, ProviderType,
    RuntimeExtensionProvider,
};
pub use spec::*;
pub use status::{AvailableVersions, ProviderStatus};

/// API group of the provider kinds.
pub const GROUP: &str = "management.cluster.x-k8s.io";
/// API version of the provider kinds.
pub const VERSION: &str = "v1alpha1";
/// kubectl category listing every provider kind (`kubectl get capi-providers -A`).
pub const CATEGORY: &str = "capi-providers";

/// Name of the Secret, in the operator's own namespace, holding the key of the config hash
/// ([`CONFIG_HASH_ANNOTATION`]); the operator creates it at its first start.
pub const CONFIG_HASH_KEY_SECRET: &str = "capi-provider-operator-config-hash-key";
/// Label of that Secret (value `"true"`), by which the plugin finds it.
pub const CONFIG_HASH_KEY_LABEL: &str = "management.cluster.x-k8s.io/config-hash-key";
/// The Secret's data key holding the key bytes.
pub const CONFIG_HASH_KEY_DATA: &str = "key";

/// Annotation marking a provider as managed by something else; the operator leaves it alone.
pub const MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/managed-by";
/// Annotation on a paused provider's Deployments keeping their replica count.
pub const ORIGINAL_REPLICAS_ANNOTATION: &str =
    "management.cluster.x-k8s.io/original-controller-replicas";
/// Label on every object the operator applies: a hash of the content it applied, so a
/// restarted operator knows an object it last wrote is already as declared (no write needed).
/// A label, not an annotation: a Deployment's generation moves with its annotations (they are
/// copied to its ReplicaSets), and adopting installed providers must not move it.
pub const APPLIED_HASH_LABEL: &str = "management.cluster.x-k8s.io/applied-hash";
/// Pod-template annotation on a provider's Deployments: a hash of the content of the rendered
/// Secrets and ConfigMaps the Deployment reads, so that a change (a rotated credential) rolls
/// its pods. Never the content itself.
pub const CONFIG_HASH_ANNOTATION: &str = "management.cluster.x-k8s.io/config-hash";
/// Label on a provider's Deployments holding the same hash as [`CONFIG_HASH_ANNOTATION`]: the
/// baseline of a Deployment that runs without the annotation (installed before it existed, or
/// adopted), which gets it, and rolls, only when the content changes from that baseline.
pub const CONFIG_HASH_BASELINE_LABEL: &str = "management.cluster.x-k8s.io/config-hash";
/// Annotation on a provider object: `"false"` turns off rolling its Deployments when the
/// rendered Secrets and ConfigMaps they read change (on by default).
pub const ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION: &str =
    "management.cluster.x-k8s.io/rollout-on-config-change";
/// Annotation `migrate --from cluster-api-operator --convert` sets on the provider object it
/// writes in this operator's API: the version cluster-api-operator had installed. Only a
/// provider handed over this way (or a v1alpha2 object that operator installed) may take that
/// operator's release ConfigMap over instead of fetching; one declared fresh never does.
pub const HANDED_OVER_VERSION_ANNOTATION: &str = "management.cluster.x-k8s.io/handed-over-version";
/// Label naming the kind of the provider that installed an object.
pub const OWNER_KIND_LABEL: &str = "management.cluster.x-k8s.io/owner-kind";
/// Label naming the provider that installed an object.
pub const OWNER_NAME_LABEL: &str = "management.cluster.x-k8s.io/owner-name";
/// Label naming the namespace of the provider that installed an object.
pub const OWNER_NAMESPACE_LABEL: &str = "management.cluster.x-k8s.io/owner-namespace";
/// Label naming the API group of the provider that installed an object, on objects installed
/// for a provider of the `operator.cluster.x-k8s.io` group only (absent: this operator's own
/// group), so that a refused duplicate in the other group never claims the objects of the
/// provider that works.
pub const OWNER_API_LABEL: &str = "management.cluster.x-k8s.io/owner-api";
/// Finalizer the operator puts on provider objects.
pub const FINALIZER: &str = "management.cluster.x-k8s.io/provider";
/// Label on ConfigMaps naming the version they hold.
pub const CONFIGMAP_VERSION_LABEL: &str = "provider.cluster.x-k8s.io/version";
/// Annotation on ConfigMaps whose components are gzip-compressed in binaryData.
pub const CONFIGMAP_COMPRESSED_ANNOTATION: &str = "provider.cluster.x-k8s.io/compressed";
