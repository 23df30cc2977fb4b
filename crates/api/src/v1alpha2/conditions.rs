// The four condition types of the other operator are this operator's types of the same
// names (Ready there is copied from the Deployment's Available condition).
pub use crate::conditions::{PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED, PROVIDER_UPGRADED, READY};

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
