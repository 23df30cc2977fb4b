//! A provider's desired state: the one function the reconcile, the operator's `render` command
//! and the plugin's `render` and `diff` build it with, so what they show is what the operator
//! applies.
//!
//! The steps, in their order: render the release with the provider's settings; check the
//! rendered objects against the provider contracts; stamp the Deployments with the hash of the
//! content they read (before finalizing, which keeps only a paused provider's Deployments);
//! finalize (labels, server-owned fields dropped, the pause); clusterctl's inventory entry.

use std::collections::BTreeMap;

use capi_operator_api::AnyProvider;
use capi_release::Release;
use serde_json::Value;

use crate::{
    before_apply::{Pause, finalize},
    contract::{self, Finding},
    customize::ManagerReport,
    inventory,
    render::{self, RenderError, RenderExtras},
    rotation::{self, HashKey, Live, Rolled},
};

/// What the desired state depends on besides the provider object, its release and variables.
#[derive(Debug, Default)]
pub struct Inputs {
    /// Additional manifests, the image mirror and the render's limits.
    pub extras: RenderExtras,
    /// The release's contract when the caller has read it from the metadata already.
    pub contract: Option<String>,
    /// Whether the provider is kept paused (the operator may keep it paused while the spec
    /// says otherwise, during a contract change).
    pub paused: bool,
    /// The version installed now; `None` before the first install.
    pub installed: Option<String>,
    /// The operator's config hash key; `None` when it cannot be read, and the Deployments then
    /// keep the hash their running counterparts carry (predicting no roll).
    pub hash_key: Option<HashKey>,
    /// The running Deployments of the provider, by namespace and name.
    pub running: BTreeMap<(String, String), Live>,
    /// Whether clusterctl's inventory entry is kept.
    pub inventory: bool,
}

/// A provider's desired state.
#[derive(Debug, Clone)]
pub struct Desired {
    /// The objects to apply, finalized, in apply order (the inventory entry apart).
    pub objects: Vec<Value>,
    /// How many objects the release rendered to (a paused provider applies only some).
    pub rendered: usize,
    /// The version rendered.
    pub version: String,
    /// The release's contract.
    pub contract: String,
    /// The contract checks of the rendered objects, passed ones included.
    pub findings: Vec<Finding>,
    /// What became of the manager settings, per Deployment that had any.
    pub managers: Vec<ManagerReport>,
    /// The Deployments that roll because content they read changed.
    pub rolled: Vec<Rolled>,
    /// clusterctl's inventory entry, applied after the objects, when kept.
    pub entry: Option<Value>,
}

/// Builds `p`'s desired state from `release`, with variables from `lookup`.
pub fn desired(
    p: &AnyProvider,
    release: &Release,
    lookup: impl Fn(&str) -> Option<String>,
    inputs: &Inputs,
) -> Result<Desired, RenderError> {
    let rendered = render::render_in(
        p,
        release,
        inputs.contract.as_deref(),
        lookup,
        &inputs.extras,
    )?;
    let findings = contract::verify(
        p.provider_type,
        Some(rendered.contract.as_str()),
        &rendered.objects,
    );
    let count = rendered.objects.len();
    let mut objects = rendered.objects;
    let running = |ns: &str, name: &str| {
        inputs
            .running
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    };
    // Paused, the running hash is kept as for an opt-out: nothing else changes while paused,
    // and at unpause a Deployment whose content changed meanwhile rolls, with its event.
    let rolled = match &inputs.hash_key {
        Some(key) => rotation::stamp(
            &mut objects,
            rotation::enabled(p) && !inputs.paused,
            key,
            running,
        ),
        None => {
            rotation::keep_live(&mut objects, running);
            Vec::new()
        }
    };
    let pause = if inputs.paused {
        Pause::Paused {
            version_changes: inputs.installed.as_deref() != Some(release.version.as_str()),
        }
    } else {
        Pause::Running
    };
    finalize(&mut objects, p, pause);
    let entry = inputs
        .inventory
        .then(|| inventory::entry(p, &release.version));
    Ok(Desired {
        objects,
        rendered: count,
        version: release.version.clone(),
        contract: rendered.contract,
        findings,
        managers: rendered.managers,
        rolled,
        entry,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const COMPONENTS: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: sample-creds, namespace: sample-system}
stringData: {token: t}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: sample-controller-manager, namespace: sample-system}
spec:
  replicas: 1
  template:
    spec:
      containers:
      - {name: manager, image: "registry.example/sample:v0.1.0", envFrom: [{secretRef: {name: sample-creds}}]}
"#;

    fn release(metadata: &str) -> Release {
        Release {
            version: "v0.1.0".into(),
            metadata: metadata.into(),
            components: COMPONENTS.into(),
        }
    }

    const METADATA: &str = "releaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n";

    fn provider(paused: bool) -> Result<AnyProvider, Box<dyn std::error::Error>> {
        Ok(AnyProvider::from_value(json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": "InfrastructureProvider",
            "metadata": {"name": "sample", "namespace": "my-ns"},
            "spec": {"version": "v0.1.0", "paused": paused},
        }))?)
    }

    fn kinds(d: &Desired) -> Vec<&str> {
        d.objects
            .iter()
            .filter_map(|o| o["kind"].as_str())
            .collect()
    }

    fn deployment(d: &Desired) -> Result<&Value, &'static str> {
        d.objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .ok_or("no Deployment")
    }

    #[test]
    fn running_provider_is_finalized_with_its_entry_and_contract() -> TestResult {
        let inputs = Inputs {
            inventory: true,
            ..Default::default()
        };
        let d = desired(&provider(false)?, &release(METADATA), |_| None, &inputs)?;
        assert_eq!(kinds(&d), ["Namespace", "Secret", "Deployment"]);
        assert_eq!(d.rendered, 3);
        assert_eq!(d.contract, "v1beta1");
        assert!(!d.findings.is_empty());
        let deployment = deployment(&d)?;
        assert_eq!(deployment["spec"]["replicas"], 1);
        assert_eq!(
            deployment["metadata"]["labels"]["management.cluster.x-k8s.io/owner-name"],
            "sample"
        );
        let entry = d.entry.ok_or("no inventory entry")?;
        assert!(inventory::is_entry(&entry));
        Ok(())
    }

    #[test]
    fn paused_at_the_installed_version_applies_only_its_deployments_at_zero() -> TestResult {
        let inputs = Inputs {
            paused: true,
            installed: Some("v0.1.0".into()),
            ..Default::default()
        };
        let d = desired(&provider(true)?, &release(METADATA), |_| None, &inputs)?;
        assert_eq!(kinds(&d), ["Deployment"]);
        assert_eq!(d.rendered, 3);
        assert_eq!(deployment(&d)?["spec"]["replicas"], 0);
        assert!(d.entry.is_none());
        // Paused on the way to another version: everything, still at zero.
        let upgrading = Inputs {
            installed: Some("v0.0.9".into()),
            ..inputs
        };
        let d = desired(&provider(true)?, &release(METADATA), |_| None, &upgrading)?;
        assert_eq!(kinds(&d), ["Namespace", "Secret", "Deployment"]);
        assert_eq!(deployment(&d)?["spec"]["replicas"], 0);
        Ok(())
    }

    #[test]
    fn a_known_contract_is_not_read_from_the_metadata_again() -> TestResult {
        let broken = release("{{{ not metadata");
        assert!(desired(&provider(false)?, &broken, |_| None, &Inputs::default()).is_err());
        let inputs = Inputs {
            contract: Some("v1beta2".into()),
            ..Default::default()
        };
        let d = desired(&provider(false)?, &broken, |_| None, &inputs)?;
        assert_eq!(d.contract, "v1beta2");
        Ok(())
    }

    #[test]
    fn the_hash_is_stamped_with_the_key_and_kept_from_the_running_one_without() -> TestResult {
        const HASH: &str = capi_operator_api::CONFIG_HASH_ANNOTATION;
        let key = HashKey::new(b"test key");
        let with_key = Inputs {
            hash_key: Some(key),
            ..Default::default()
        };
        let d = desired(&provider(false)?, &release(METADATA), |_| None, &with_key)?;
        let stamped = &deployment(&d)?["spec"]["template"]["metadata"]["annotations"][HASH];
        assert!(stamped.is_string(), "no config hash: {stamped}");
        let running = Live {
            template: Some("from-the-cluster".into()),
            baseline: None,
        };
        let without_key = Inputs {
            running: BTreeMap::from([(
                ("my-ns".to_string(), "sample-controller-manager".to_string()),
                running,
            )]),
            ..Default::default()
        };
        let d = desired(
            &provider(false)?,
            &release(METADATA),
            |_| None,
            &without_key,
        )?;
        assert_eq!(
            deployment(&d)?["spec"]["template"]["metadata"]["annotations"][HASH],
            "from-the-cluster"
        );
        Ok(())
    }
}
