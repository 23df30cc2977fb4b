//! Preflight checks: pure decisions over the provider objects the caches hold, so each rule is
//! unit-tested without a cluster. Each failure has its own condition reason.

use capi_operator_api::{AnyProvider, ProviderType, note::found_note};
use capi_release::{defaults, version};

use super::reason;

/// A failed check: condition reason and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// Condition reason.
    pub reason: &'static str,
    /// Message for the condition and the event.
    pub message: String,
}

fn fail(reason: &'static str, message: String) -> Result<(), Failure> {
    Err(Failure { reason, message })
}

/// The order that decides which of two conflicting objects keeps working: the older one, so a
/// newly created duplicate never disturbs what is installed. Ties break on namespace and name.
fn seniority(p: &AnyProvider) -> (Option<i64>, String, String) {
    (
        p.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
        p.namespace().to_string(),
        p.name().to_string(),
    )
}

/// Whether `a` and `b` are the same provider object. Objects of the two APIs are different
/// objects even with the same kind, namespace and name: the younger one is then a duplicate.
pub fn same(a: &AnyProvider, b: &AnyProvider) -> bool {
    a.api == b.api
        && a.provider_type == b.provider_type
        && a.namespace() == b.namespace()
        && a.name() == b.name()
}

fn senior_among<'a>(
    me: &AnyProvider,
    rivals: impl Iterator<Item = &'a AnyProvider>,
) -> Option<&'a AnyProvider> {
    rivals
        .filter(|o| !same(o, me) && o.metadata.deletion_timestamp.is_none())
        .filter(|o| seniority(o) < seniority(me))
        .min_by_key(|o| seniority(o))
}

/// Checks that need only the provider objects: uniqueness, version format, a known source.
/// `same_kind` holds every provider of the same kind, `cores` every CoreProvider.
pub fn check_objects(
    me: &AnyProvider,
    same_kind: &[AnyProvider],
    cores: &[AnyProvider],
) -> Result<(), Failure> {
    if me.provider_type == ProviderType::Core
        && let Some(first) = senior_among(me, cores.iter())
    {
        return fail(
            reason::MORE_THAN_ONE_CORE,
            format!(
                "CoreProvider {}/{} already exists; a cluster has only one core provider",
                first.namespace(),
                first.name()
            ),
        );
    }
    if let Some(first) = senior_among(me, same_kind.iter().filter(|o| o.name() == me.name())) {
        return fail(
            reason::DUPLICATE_NAME,
            format!(
                "{} {}/{} already exists; provider names are unique per kind across namespaces",
                me.provider_type.kind(),
                first.namespace(),
                first.name()
            ),
        );
    }
    let max = capi_operator_api::crd::max_name_length(me.provider_type);
    if me.name().len() > max {
        return fail(
            reason::NAME_TOO_LONG,
            format!(
                "metadata.name must be at most {max} characters for kind {}: every object it installs carries it after {:?} in the label cluster.x-k8s.io/provider (at most 63); declare it under a shorter name",
                me.provider_type.kind(),
                me.provider_type.label_prefix()
            ),
        );
    }
    if let Some(v) = me.spec.version.as_deref().filter(|v| !v.is_empty())
        && version::parse(v).is_none()
    {
        return fail(
            reason::INCORRECT_VERSION,
            format!("spec.version {v:?} is not a semantic version (e.g. v1.12.0)"),
        );
    }
    if me.spec.fetch_config.is_none()
        && defaults::default_url(me.provider_type, me.name()).is_none()
    {
        let known: Vec<String> = defaults::known_names(me.provider_type)
            .into_iter()
            .map(str::to_string)
            .collect();
        let found = found_note("those of this kind are ", &known, "none is of this kind");
        return fail(
            reason::UNKNOWN_PROVIDER,
            format!(
                "{} {:?} is not one of clusterctl's well-known providers ({found}); set spec.fetchConfig (url, oci or selector)",
                me.provider_type.kind(),
                me.name()
            ),
        );
    }
    Ok(())
}

/// The CoreProvider a non-core provider follows: the senior one, once it has installed a
/// release. As `clusterctl init` does, the others install as soon as the core components are
/// in place (its CRDs exist and its contract is known), without waiting for its manager's
/// pods: nothing a provider's components or manager need at install comes from those pods,
/// and the providers' rollouts then run side by side instead of one after the other. A paused
/// core (the pause → upgrade → unpause sequence of a contract change) has its release
/// installed too, so the others stay upgradable while it is down.
pub fn ready_core(cores: &[AnyProvider]) -> Result<&AnyProvider, Failure> {
    let Some(core) = cores
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .min_by_key(|c| seniority(c))
    else {
        return Err(Failure {
            reason: reason::WAITING_FOR_CORE,
            message: "no CoreProvider exists yet; install the core provider first".into(),
        });
    };
    let installed = core
        .status
        .as_ref()
        .is_some_and(|s| s.installed_version.is_some() && s.contract.is_some());
    if !installed {
        return Err(Failure {
            reason: reason::WAITING_FOR_CORE,
            message: format!(
                "waiting for CoreProvider {}/{} to be installed",
                core.namespace(),
                core.name()
            ),
        });
    }
    Ok(core)
}

/// Contracts a core provider of contract `core` accepts: its own and, as clusterctl allows, the
/// previous one (a v1beta2 core runs v1beta1 providers).
pub fn compatible(core: &str, provider: &str) -> bool {
    core == provider || (core == "v1beta2" && provider == "v1beta1")
}

/// The contract rule for a non-core provider's release.
pub fn check_contract(core: &AnyProvider, release_contract: &str) -> Result<(), Failure> {
    let Some(core_contract) = core.status.as_ref().and_then(|s| s.contract.as_deref()) else {
        return fail(
            reason::WAITING_FOR_CORE,
            "waiting for the CoreProvider to report its contract".into(),
        );
    };
    if !compatible(core_contract, release_contract) {
        return fail(
            reason::CONTRACT_MISMATCH,
            format!(
                "the release follows contract {release_contract}, the core provider {}/{} follows {core_contract}",
                core.namespace(),
                core.name()
            ),
        );
    }
    Ok(())
}

/// Refuses a minor or major downgrade from the installed version (patch downgrades are allowed,
/// as clusterctl allows them).
pub fn check_downgrade(installed: Option<&str>, target: &str) -> Result<(), Failure> {
    let (Some(installed), Some(t)) = (installed.and_then(version::parse), version::parse(target))
    else {
        return Ok(());
    };
    if version::is_minor_downgrade(&installed, &t) {
        return fail(
            reason::DOWNGRADE,
            format!("downgrading from v{installed} to {target} is not supported"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{FetchConfiguration, ProviderSpec, ProviderStatus, conditions::READY};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    fn p(t: ProviderType, ns: &str, name: &str, created: i64) -> AnyProvider {
        AnyProvider {
            api: Default::default(),
            provider_type: t,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                creation_timestamp: Timestamp::from_second(created).ok().map(Time),
                ..Default::default()
            },
            spec: ProviderSpec::default(),
            status: None,
        }
    }

    fn ready(mut p: AnyProvider, contract: &str) -> AnyProvider {
        p.status = Some(ProviderStatus {
            contract: Some(contract.into()),
            installed_version: Some("v1.12.0".into()),
            conditions: vec![Condition {
                type_: READY.into(),
                status: "True".into(),
                reason: "Available".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
            }],
            ..Default::default()
        });
        p
    }

    #[test]
    fn the_older_core_provider_keeps_working() {
        let a = p(ProviderType::Core, "capi-system", "cluster-api", 10);
        let b = p(ProviderType::Core, "other", "cluster-api", 20);
        let cores = vec![a.clone(), b.clone()];
        assert_eq!(check_objects(&a, &cores, &cores), Ok(()));
        let err = check_objects(&b, &cores, &cores).unwrap_err();
        assert_eq!(err.reason, reason::MORE_THAN_ONE_CORE);
        assert!(err.message.contains("capi-system/cluster-api"));
    }

    #[test]
    fn duplicate_names_across_namespaces_are_refused() {
        let a = p(ProviderType::Infrastructure, "a", "aws", 10);
        let b = p(ProviderType::Infrastructure, "b", "aws", 20);
        let c = p(ProviderType::Infrastructure, "b", "azure", 5);
        let all = vec![a.clone(), b.clone(), c.clone()];
        assert_eq!(check_objects(&a, &all, &[]), Ok(()));
        assert_eq!(check_objects(&c, &all, &[]), Ok(()));
        assert_eq!(
            check_objects(&b, &all, &[]).unwrap_err().reason,
            reason::DUPLICATE_NAME
        );
    }

    #[test]
    fn version_must_be_semantic() {
        let mut a = p(ProviderType::Infrastructure, "a", "aws", 10);
        for (v, good) in [
            ("v2.1.4", true),
            ("", true),
            ("2.1.4", true),
            ("latest", false),
            ("v2.x", false),
        ] {
            a.spec.version = Some(v.into());
            let r = check_objects(&a, &[], &[]);
            assert_eq!(r.is_ok(), good, "{v}: {r:?}");
            if !good {
                assert_eq!(r.unwrap_err().reason, reason::INCORRECT_VERSION);
            }
        }
    }

    /// A name that pushes the provider label over 63 characters is refused before any apply,
    /// with the kind's own limit (an object created before the CRD's rule existed).
    #[test]
    fn a_name_too_long_for_the_provider_label_is_refused_with_the_kinds_limit() {
        for (t, max) in [
            (ProviderType::Infrastructure, 48),
            (ProviderType::ControlPlane, 49),
            (ProviderType::Core, 63),
        ] {
            let mut a = p(t, "a", &"n".repeat(max), 10);
            a.spec.fetch_config = Some(Default::default());
            assert_eq!(check_objects(&a, &[], &[]), Ok(()), "{t:?}");
            let mut long = p(t, "a", &"n".repeat(max + 1), 10);
            long.spec.fetch_config = Some(Default::default());
            let f = check_objects(&long, &[], &[]).unwrap_err();
            assert_eq!(f.reason, reason::NAME_TOO_LONG, "{t:?}");
            assert!(
                f.message.contains(&format!("at most {max} characters")),
                "{}",
                f.message
            );
        }
    }

    #[test]
    fn unknown_providers_need_a_fetch_config() {
        let mut a = p(ProviderType::Infrastructure, "a", "my-cloud", 10);
        let f = check_objects(&a, &[], &[]).unwrap_err();
        assert_eq!(f.reason, reason::UNKNOWN_PROVIDER);
        // The message names the well-known providers of the kind, so a misspelt name shows.
        assert!(
            f.message
                .contains("those of this kind are linode-linode, aws, azure, "),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("docker") && !f.message.contains("kubeadm"),
            "{}",
            f.message
        );
        assert!(
            f.message.len() <= capi_operator_api::note::NOTE_LIMIT,
            "{}",
            f.message
        );
        a.spec.fetch_config = Some(FetchConfiguration {
            url: Some("https://github.com/me/my-cloud/releases".into()),
            ..Default::default()
        });
        assert_eq!(check_objects(&a, &[], &[]), Ok(()));
    }

    #[test]
    fn non_core_providers_wait_for_the_core_release_not_its_pods() {
        assert_eq!(
            ready_core(&[]).unwrap_err().reason,
            reason::WAITING_FOR_CORE
        );
        let core = p(ProviderType::Core, "capi-system", "cluster-api", 1);
        assert_eq!(
            ready_core(std::slice::from_ref(&core)).unwrap_err().reason,
            reason::WAITING_FOR_CORE
        );
        // Installed, its Deployments still rolling out: the others go ahead.
        let mut rolling = ready(core.clone(), "v1beta2");
        if let Some(s) = rolling.status.as_mut() {
            s.conditions[0].status = "False".into();
            s.conditions[0].reason = reason::NOT_AVAILABLE.into();
        }
        assert!(ready_core(std::slice::from_ref(&rolling)).is_ok());
        // A status without an installed release (a failed first install) keeps them waiting.
        let mut failed = ready(core.clone(), "v1beta2");
        if let Some(s) = failed.status.as_mut() {
            s.installed_version = None;
        }
        let f = ready_core(std::slice::from_ref(&failed)).unwrap_err();
        assert_eq!(f.reason, reason::WAITING_FOR_CORE);
        assert!(f.message.contains("to be installed"), "{}", f.message);
        let core = ready(core, "v1beta2");
        assert!(ready_core(std::slice::from_ref(&core)).is_ok());
    }

    #[test]
    fn contracts_follow_the_core() {
        let core = ready(p(ProviderType::Core, "c", "cluster-api", 1), "v1beta2");
        assert_eq!(check_contract(&core, "v1beta2"), Ok(()));
        assert_eq!(check_contract(&core, "v1beta1"), Ok(()));
        assert_eq!(
            check_contract(&core, "v1alpha4").unwrap_err().reason,
            reason::CONTRACT_MISMATCH
        );
        let old = ready(p(ProviderType::Core, "c", "cluster-api", 1), "v1beta1");
        assert_eq!(
            check_contract(&old, "v1beta2").unwrap_err().reason,
            reason::CONTRACT_MISMATCH
        );
    }

    #[test]
    fn minor_downgrades_are_refused_patch_ones_allowed() {
        assert_eq!(check_downgrade(Some("v1.12.0"), "v1.12.0"), Ok(()));
        assert_eq!(check_downgrade(Some("v1.12.1"), "v1.12.0"), Ok(()));
        assert_eq!(check_downgrade(Some("v1.11.0"), "v1.12.0"), Ok(()));
        assert_eq!(check_downgrade(None, "v1.0.0"), Ok(()));
        assert_eq!(
            check_downgrade(Some("v1.12.0"), "v1.11.3")
                .unwrap_err()
                .reason,
            reason::DOWNGRADE
        );
        assert_eq!(
            check_downgrade(Some("v2.0.0"), "v1.99.0")
                .unwrap_err()
                .reason,
            reason::DOWNGRADE
        );
    }
}
