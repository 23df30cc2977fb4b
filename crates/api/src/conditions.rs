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
/// The release follows the Cluster API provider contracts (CRD names, contract labels, and the
/// fields of every contract its provider type follows, in the contract version its metadata
/// declares); False lists what deviates. Informational: installing goes on.
pub const CONTRACT_VERIFIED: &str = "ContractVerified";
/// Deletion progress, or what blocks it.
pub const DELETING: &str = "Deleting";
/// Whether every `spec.manager` setting takes effect on the provider's manager: False names
/// each setting the manager's binary has no flag for, or a flag it would reject at start.
/// Informational: installing goes on and Ready is not blocked.
pub const MANAGER_CONFIGURED: &str = "ManagerConfigured";
/// Objects of the `operator.cluster.x-k8s.io/v1alpha2` API only: whether their spec translates
/// into this operator's settings. False (with the field and why) stops the reconcile until the
/// spec changes; True names any setting left out because cluster-api-operator ignored it too.
pub const SPEC_TRANSLATED: &str = "SpecTranslated";

/// kstatus: True while the operator works toward the spec (installing, upgrading, waiting for
/// the Deployments, retrying a temporary failure, deleting); False once the spec is reached or
/// progress needs a change. What Flux and `kubectl wait`-style tools read.
pub const RECONCILING: &str = "Reconciling";
/// kstatus: True when a configuration problem (or a manager that keeps crashing) stops
/// progress until something changes; its reason and message are the problem's.
pub const STALLED: &str = "Stalled";

/// Every reason a condition or an event of the operator carries: one vocabulary for the
/// conditions, the events and the metric labels.
pub mod reason {
    // Preflight.

    /// A second CoreProvider exists in the cluster.
    pub const MORE_THAN_ONE_CORE: &str = "MoreThanOneCoreProvider";
    /// A provider of the same kind and name exists in another namespace.
    pub const DUPLICATE_NAME: &str = "DuplicateProviderName";
    /// spec.version is not a semantic version.
    pub const INCORRECT_VERSION: &str = "IncorrectVersionFormat";
    /// The name, after the kind's prefix, does not fit the `cluster.x-k8s.io/provider` label.
    pub const NAME_TOO_LONG: &str = "ProviderNameTooLong";
    /// The provider is not in the default list and has no fetchConfig.
    pub const UNKNOWN_PROVIDER: &str = "UnknownProvider";
    /// The core provider is missing or has not installed its release yet (the name is
    /// cluster-api-operator's).
    pub const WAITING_FOR_CORE: &str = "WaitingForCoreProviderReady";
    /// The release's contract differs from the core provider's.
    pub const CONTRACT_MISMATCH: &str = "ContractMismatch";
    /// A minor or major downgrade was asked for.
    pub const DOWNGRADE: &str = "UnsupportedProviderDowngrade";

    // Install, readiness, pause and deletion.

    /// Preflight checks passed.
    pub const PASSED: &str = "PreflightChecksPassed";
    /// fetchConfig cannot be used.
    pub const INVALID_FETCH_CONFIG: &str = "InvalidFetchConfig";
    /// The release could not be fetched (version or file missing, access refused).
    pub const FETCH_FAILED: &str = "ComponentsFetchError";
    /// The source is temporarily unreachable; retried with backoff.
    pub const SOURCE_UNAVAILABLE: &str = "SourceUnavailable";
    /// A release cache entry's content is not the release the operator cached (its SHA-256
    /// differs from the one in the status): not used, fetched again (an event).
    pub const RELEASE_CACHE_MISMATCH: &str = "ReleaseCacheMismatch";
    /// The release could not be kept in the release cache, so it is fetched again (within
    /// the retry back-off) when needed (an event).
    pub const RELEASE_NOT_CACHED: &str = "ReleaseNotCached";
    /// metadata.yaml is unusable for the version.
    pub const INVALID_METADATA: &str = "InvalidMetadata";
    /// The referenced Secret does not exist.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    /// The referenced additionalManifests ConfigMap does not exist or is unusable.
    pub const ADDITIONAL_MANIFESTS: &str = "AdditionalManifestsError";
    /// The operator-wide image mirror setting is malformed: nothing is installed or changed
    /// until it is fixed.
    pub const IMAGE_MIRROR_INVALID: &str = "ImageMirrorInvalid";
    /// Variables the release needs are missing.
    pub const MISSING_VARIABLES: &str = "MissingVariables";
    /// The release could not be rendered (YAML, patches, customization).
    pub const RENDER_FAILED: &str = "ComponentsRenderError";
    /// spec.patches or spec.manifestPatches is malformed or does not apply.
    pub const INVALID_PATCHES: &str = "InvalidPatches";
    /// The apiserver refused an object, or a kind the release needs is not served.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// The release holds an object of a kind the operator does not own (watch for drift,
    /// prune, delete with the provider): nothing of it is applied.
    pub const UNOWNED_KIND: &str = "UnownedKind";
    /// An object of the release exists and was installed by someone else (a user, another
    /// provider): the operator does not take it over.
    pub const OBJECT_NOT_OURS: &str = "ObjectNotInstalledByProvider";
    /// The release needs cert-manager's kinds (Certificate, Issuer) and the cluster does not
    /// serve them; retried as soon as cert-manager's CRDs appear.
    pub const CERT_MANAGER_NOT_INSTALLED: &str = "CertManagerNotInstalled";
    /// The apiserver refused a change of an installed CustomResourceDefinition (an immutable
    /// field such as spec.scope, a removed stored version): the upgrade stops, the CRD and its
    /// custom resources are kept and the previous release keeps running (Stalled).
    pub const CRD_CHANGE_REFUSED: &str = "CustomResourceDefinitionChangeRefused";
    /// Applying is being retried after a temporary failure.
    pub const APPLY_RETRYING: &str = "ApplyRetrying";
    /// Components installed.
    pub const INSTALLED: &str = "Installed";
    /// The release passes the provider contract checks.
    pub const CONTRACT_OK: &str = "ContractChecksPassed";
    /// The release deviates from the provider contracts (see the message).
    pub const CONTRACT_FINDINGS: &str = "ContractFindings";
    /// A CRD of the release lacks a field (or a CRD) its contract requires in the contract
    /// version the release declares: Cluster API would not work with it (the message names the
    /// contract, its version, the kind and the field).
    pub const CONTRACT_FIELDS_MISSING: &str = "ContractFieldsMissing";
    /// The release holds objects granting broad powers (an event, not a condition).
    pub const PRIVILEGED_OBJECTS: &str = "PrivilegedObjects";
    /// Deletion waits for other providers or custom resources.
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    /// deletionPolicy Purge waits: the provider's namespace holds objects the provider did not
    /// install, or inputs of it that another provider reads too, or the last look before the
    /// CRDs go found new custom resources (the message names them); its CRDs and namespace are
    /// removed once they are gone.
    pub const PURGE_BLOCKED: &str = "PurgeBlocked";
    /// deletionPolicy Orphan: the provider object went and everything it installed was left
    /// running, for a later provider object of the same kind, namespace and name (an event).
    pub const ORPHANED: &str = "Orphaned";
    /// deletionPolicy Purge: the provider's CRDs and namespace were removed with it (an event).
    pub const PURGED: &str = "Purged";
    /// The spec is reached (Reconciling False).
    pub const RECONCILED: &str = "Reconciled";
    /// Nothing stops progress (Stalled False).
    pub const NOT_STALLED: &str = "NotStalled";
    /// Progress waits for a change of the configuration (Reconciling False while Stalled).
    pub const WAITING_FOR_CHANGE: &str = "WaitingForChange";
    /// Components are being removed.
    pub const DELETING: &str = "Deleting";
    /// The installed version changed.
    pub const UPGRADED: &str = "Upgraded";
    /// A contract-changing upgrade of the core provider while some provider runs.
    pub const CONTRACT_CHANGE_NEEDS_PAUSE: &str = "ContractChangeRequiresPause";
    /// The provider is paused.
    pub const PAUSED: &str = "Paused";
    /// The provider is not paused (any more).
    pub const NOT_PAUSED: &str = "NotPaused";
    /// Unpausing is refused while contracts disagree.
    pub const UNPAUSE_REFUSED: &str = "UnpauseRefused";
    /// Every Deployment of the provider is available.
    pub const AVAILABLE: &str = "DeploymentsAvailable";
    /// Some Deployment is not available yet.
    pub const NOT_AVAILABLE: &str = "DeploymentsNotAvailable";
    /// The release has no Deployment to watch.
    pub const NO_DEPLOYMENT: &str = "NoDeployment";
    /// A manager container of the provider keeps exiting (Ready False; the message holds the
    /// pod, container, restart count and the end of its log).
    pub const MANAGER_CRASH_LOOPING: &str = "ManagerCrashLooping";
    /// A manager image cannot be pulled (Ready False).
    pub const MANAGER_IMAGE_UNAVAILABLE: &str = "ManagerImageUnavailable";
    /// Every spec.manager setting reached a flag of the manager (ManagerConfigured True).
    pub const MANAGER_SETTINGS_APPLIED: &str = "ManagerSettingsApplied";
    /// Some spec.manager settings have no effect on the provider's manager.
    pub const MANAGER_SETTINGS_IGNORED: &str = "ManagerSettingsIgnored";
    /// A flag or feature gate given explicitly is unknown to the manager's binary, which
    /// would refuse to start.
    pub const MANAGER_FLAGS_REJECTED: &str = "ManagerFlagsRejected";
    /// Before the first install: the preflight checks have not passed yet.
    pub const PREFLIGHT_CHECK_FAILED: &str = "PreflightCheckFailed";
    /// spec.version was empty and the latest release was written into it (an event).
    pub const VERSION_RESOLVED: &str = "VersionResolved";
    /// Asking the provider's source which releases it offers failed (an event; the status's
    /// availableVersions keeps what the last check found, with this message).
    pub const VERSION_CHECK_FAILED: &str = "VersionCheckFailed";
    /// A version's objects were applied (an event).
    pub const VERSION_INSTALLED: &str = "VersionInstalled";
    /// Objects no longer rendered were removed (an event).
    pub const PRUNED: &str = "Pruned";
    /// Objects changed or deleted outside the operator were written back as declared (an
    /// event naming them and who changed them).
    pub const DRIFT_REPAIRED: &str = "DriftRepaired";
    /// Deployments of the provider were rolled because a rendered Secret or ConfigMap they
    /// read changed, e.g. rotated credentials in the variables Secret (an event naming the
    /// Deployments and the objects, never their content).
    pub const CONFIG_CHANGE_ROLLED: &str = "ConfigChangeRolled";
    /// clusterctl's inventory entry of the provider could not be written (an event).
    pub const INVENTORY_NOT_WRITTEN: &str = "ClusterctlInventoryNotWritten";
    /// The provider was changed outside the operator (clusterctl's inventory named another
    /// version) and the declared state was applied again (an event).
    pub const CLUSTERCTL_CHANGE_REVERTED: &str = "ClusterctlChangeReverted";
    /// A reconcile failed on an API request outside any phase's condition (writing the status
    /// or a finalizer, listing what blocks a deletion); retried with backoff (an event and the
    /// reconcile-errors metric).
    pub const API_REQUEST_FAILED: &str = "APIRequestFailed";
    /// A reconcile panicked (a bug); retried with backoff (an event and the reconcile-errors
    /// metric).
    pub const RECONCILE_PANICKED: &str = "ReconcilePanicked";

    // Objects of the v1alpha2 API.

    /// Every setting of the v1alpha2 spec has its counterpart here (SpecTranslated True).
    pub const TRANSLATED: &str = "Translated";
    /// Some v1alpha2 settings are left out, as cluster-api-operator left them out (SpecTranslated
    /// True, the message names them).
    pub const SETTINGS_IGNORED: &str = "SettingsIgnored";
    /// A v1alpha2 setting has no counterpart or an unusable value (SpecTranslated False).
    pub const UNSUPPORTED_SETTING: &str = "UnsupportedSetting";
}
