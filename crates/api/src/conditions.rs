//! Condition types and reasons written on provider objects.

/// Preflight checks passed (uniqueness, version format, fetch config, contract, core ready).
pub const PREFLIGHT_CHECK_PASSED: &str = "PreflightCheckPassed";
/// The components of spec.version are installed with the current configuration.
pub const PROVIDER_INSTALLED: &str = "ProviderInstalled";
/// The last version change was carried out.
pub const PROVIDER_UPGRADED: &str = "ProviderUpgraded";
/// The provider's Deployments are available.
pub const READY: &str = "Ready";
/// The provider is paused.
pub const PAUSED: &str = "Paused";
/// The release follows the Cluster API provider contracts (CRD names, contract labels,
/// InfraCluster shape); False lists what deviates. Informational: installing goes on.
pub const CONTRACT_VERIFIED: &str = "ContractVerified";
/// Deletion progress, or what blocks it.
pub const DELETING: &str = "Deleting";
/// Whether every `spec.manager` setting takes effect on the provider's manager: False names
/// each setting the manager's binary has no flag for, or a flag it would reject at start.
/// Informational: installing goes on and Ready is not blocked.
pub const MANAGER_CONFIGURED: &str = "ManagerConfigured";
