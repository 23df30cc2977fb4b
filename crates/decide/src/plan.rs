//! The decisions the install phases take, as plain functions over what the caches hold: when
//! a contract change needs every provider paused, when unpausing is refused, and what to prune.

use capi_operator_api::{
    AnyProvider, HANDED_OVER_VERSION_ANNOTATION, ProviderStatus, conditions::PAUSED, v1alpha2,
};

use super::{conditions::Desired, reason};

fn named(p: &AnyProvider) -> String {
    format!("{} {}/{}", p.provider_type.kind(), p.namespace(), p.name())
}

/// Every provider that is not paused, as `Kind namespace/name`.
pub fn running_providers(all: &[AnyProvider]) -> Vec<String> {
    all.iter().filter(|q| !q.spec.paused).map(named).collect()
}

/// Why a core provider upgrade to `version` (of `contract`) must wait: it changes the
/// contract of what is installed while some providers still run. `None` lets it go on.
pub fn contract_change_blocker(
    status: &ProviderStatus,
    version: &str,
    contract: &str,
    running: &[String],
) -> Option<String> {
    let old = status.contract.as_deref()?;
    if old == contract || status.installed_version.as_deref() == Some(version) || running.is_empty()
    {
        return None;
    }
    Some(format!(
        "{version} changes the contract from {old} to {contract}; pause every provider first (spec.paused: true); not paused: {}",
        running.join(", ")
    ))
}

/// The providers (this one included, as `this provider`) whose contract differs from the core
/// provider's, as `Kind namespace/name (contract)`.
pub fn disagreeing_contracts(
    p: &AnyProvider,
    all: &[AnyProvider],
    core_contract: Option<&str>,
    contract: &str,
) -> Vec<String> {
    let is_p = |q: &AnyProvider| {
        q.provider_type == p.provider_type && q.namespace() == p.namespace() && q.name() == p.name()
    };
    all.iter()
        .filter(|q| !is_p(q))
        .filter_map(|q| {
            let c = q.status.as_ref()?.contract.as_deref()?;
            (Some(c) != core_contract).then(|| format!("{} ({c})", named(q)))
        })
        .chain((core_contract != Some(contract)).then(|| format!("this provider ({contract})")))
        .collect()
}

/// The Paused condition when the provider stays paused: asked for by `spec.paused`, or kept
/// because it was paused and unpausing now would run providers of different contracts side
/// by side. `None` when it runs.
pub fn pause_condition(
    spec_paused: bool,
    was_paused: bool,
    core_contract: Option<&str>,
    disagreeing: &[String],
) -> Option<Desired> {
    if spec_paused {
        return Some(Desired::ok(
            PAUSED,
            reason::PAUSED,
            "spec.paused is true: every Deployment is scaled to 0",
        ));
    }
    if !was_paused || disagreeing.is_empty() {
        return None;
    }
    Some(Desired::ok(
        PAUSED,
        reason::UNPAUSE_REFUSED,
        format!(
            "unpausing is refused while providers disagree on the contract (core: {}): {}",
            core_contract.unwrap_or("unknown"),
            disagreeing.join(", ")
        ),
    ))
}

/// Whether `version` of `p` was handed over from cluster-api-operator, so that operator's
/// release ConfigMap of it may be taken over instead of fetching. Anyone who can write
/// ConfigMaps in the namespace can plant one with that operator's name and labels; only a
/// provider that operator really installed makes it more than a plant: a v1alpha2 object
/// whose status (written by that operator through the status subresource) has `version`
/// installed, or an object `migrate --convert` wrote with the annotation naming `version`. A
/// provider declared fresh (a first install, a re-declaration after an orphaning delete, a
/// GitOps re-create, a move target) has neither, and fetches.
pub fn handed_over(p: &AnyProvider, status: &ProviderStatus, version: &str) -> bool {
    if !status.release_digests.is_empty() {
        // This operator recorded a release of it: what it took over or fetched is known.
        return false;
    }
    if p.api.group() == v1alpha2::GROUP {
        return status.installed_version.as_deref() == Some(version);
    }
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HANDED_OVER_VERSION_ANNOTATION))
        .is_some_and(|v| v == version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{ProviderApi, ProviderSpec, ProviderType};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn provider(t: ProviderType, name: &str, paused: bool, contract: Option<&str>) -> AnyProvider {
        AnyProvider {
            api: Default::default(),
            provider_type: t,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(format!("{name}-system")),
                ..Default::default()
            },
            spec: ProviderSpec {
                paused,
                ..Default::default()
            },
            status: contract.map(|c| ProviderStatus {
                contract: Some(c.into()),
                ..Default::default()
            }),
        }
    }

    fn installed(contract: &str, version: &str) -> ProviderStatus {
        ProviderStatus {
            contract: Some(contract.into()),
            installed_version: Some(version.into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_provider_cluster_api_operator_installed_is_handed_over() {
        let fresh = provider(ProviderType::Core, "cluster-api", false, None);
        let none = ProviderStatus::default();
        assert!(!handed_over(&fresh, &none, "v1.0.0"), "declared fresh");

        let mut converted = fresh.clone();
        converted.metadata.annotations = Some(
            [(
                HANDED_OVER_VERSION_ANNOTATION.to_string(),
                "v1.0.0".to_string(),
            )]
            .into(),
        );
        assert!(handed_over(&converted, &none, "v1.0.0"));
        assert!(
            !handed_over(&converted, &none, "v1.1.0"),
            "another version than the one handed over"
        );
        let mut recorded = none.clone();
        recorded
            .release_digests
            .insert("v0.9.0".into(), "0".repeat(64));
        assert!(
            !handed_over(&converted, &recorded, "v1.0.0"),
            "already recorded"
        );

        let mut go = fresh.clone();
        go.api = ProviderApi::ClusterApiOperator;
        assert!(
            !handed_over(&go, &none, "v1.0.0"),
            "v1alpha2, never installed"
        );
        let go_installed = installed("v1beta1", "v1.0.0");
        assert!(handed_over(&go, &go_installed, "v1.0.0"));
        assert!(
            !handed_over(&go, &go_installed, "v1.1.0"),
            "an upgrade fetches"
        );
        assert!(
            !handed_over(&fresh, &go_installed, "v1.0.0"),
            "this operator's API needs migrate's annotation"
        );
    }

    #[test]
    fn only_a_contract_change_with_running_providers_waits() {
        let running = ["InfrastructureProvider docker-system/docker".to_string()];
        // (installed status, new version, new contract, running, blocks)
        let cases = [
            (
                installed("v1beta1", "v1.9.0"),
                "v1.10.0",
                "v1beta2",
                &running[..],
                true,
            ),
            (
                installed("v1beta1", "v1.9.0"),
                "v1.10.0",
                "v1beta2",
                &[][..],
                false,
            ),
            (
                installed("v1beta1", "v1.9.0"),
                "v1.9.1",
                "v1beta1",
                &running[..],
                false,
            ),
            // Already at that version: the contract on record is stale, nothing changes.
            (
                installed("v1beta1", "v1.10.0"),
                "v1.10.0",
                "v1beta2",
                &running[..],
                false,
            ),
            (
                ProviderStatus::default(),
                "v1.10.0",
                "v1beta2",
                &running[..],
                false,
            ),
        ];
        for (status, version, contract, running, blocks) in cases {
            let got = contract_change_blocker(&status, version, contract, running);
            assert_eq!(got.is_some(), blocks, "{status:?} → {version} ({contract})");
            if let Some(m) = got {
                assert!(m.contains("docker-system/docker"), "{m}");
                assert!(m.contains("from v1beta1 to v1beta2"), "{m}");
            }
        }
    }

    #[test]
    fn running_providers_are_the_unpaused_ones() {
        let all = [
            provider(ProviderType::Core, "cluster-api", true, None),
            provider(ProviderType::Bootstrap, "kubeadm", false, None),
        ];
        assert_eq!(
            running_providers(&all),
            ["BootstrapProvider kubeadm-system/kubeadm"]
        );
    }

    #[test]
    fn disagreement_lists_others_and_this_provider_against_the_core_contract() {
        let me = provider(
            ProviderType::Infrastructure,
            "docker",
            false,
            Some("v1beta1"),
        );
        let all = [
            provider(ProviderType::Core, "cluster-api", false, Some("v1beta2")),
            provider(ProviderType::Bootstrap, "kubeadm", false, Some("v1beta1")),
            provider(ProviderType::ControlPlane, "kubeadm", false, None),
            me.clone(),
        ];
        // (core contract, this provider's contract, expected)
        let cases: [(Option<&str>, &str, Vec<&str>); 3] = [
            (
                Some("v1beta2"),
                "v1beta1",
                vec![
                    "BootstrapProvider kubeadm-system/kubeadm (v1beta1)",
                    "this provider (v1beta1)",
                ],
            ),
            (
                Some("v1beta2"),
                "v1beta2",
                vec!["BootstrapProvider kubeadm-system/kubeadm (v1beta1)"],
            ),
            (
                Some("v1beta1"),
                "v1beta1",
                vec!["CoreProvider cluster-api-system/cluster-api (v1beta2)"],
            ),
        ];
        for (core, contract, want) in cases {
            assert_eq!(disagreeing_contracts(&me, &all, core, contract), want);
        }
    }

    #[test]
    fn pause_is_kept_only_while_contracts_disagree() {
        let disagree = ["this provider (v1beta1)".to_string()];
        // (spec.paused, was paused, disagreeing, expected reason)
        let cases = [
            (true, false, &[][..], Some(reason::PAUSED)),
            (true, true, &disagree[..], Some(reason::PAUSED)),
            (false, true, &disagree[..], Some(reason::UNPAUSE_REFUSED)),
            (false, true, &[][..], None),
            // Never paused: disagreement alone does not pause a running provider.
            (false, false, &disagree[..], None),
        ];
        for (spec, was, disagreeing, want) in cases {
            let got = pause_condition(spec, was, Some("v1beta2"), disagreeing);
            assert_eq!(got.as_ref().map(|d| d.reason.as_str()), want);
            if let Some(d) = got {
                assert!(d.ok, "Paused is True whenever the provider stays paused");
            }
        }
    }
}
