//! Checks of a release's components against the Cluster API provider contracts: CRD names as
//! Cluster API's `contract.CalculateCRDName` computes them (flect's pluralization of the
//! lower-cased kind, then the group), the contract version labels on provider CRDs, and for
//! infrastructure providers the InfraCluster contract: a namespaced InfraCluster CRD with
//! `spec.controlPlaneEndpoint {host, port}` and `status.ready` (v1beta1) or
//! `status.initialization.provisioned` (v1beta2), a matching InfraClusterTemplate CRD with
//! `spec.template.spec`, and a ClusterRole with the `cluster.x-k8s.io/aggregate-to-manager`
//! label granting the core controller full access to the InfraCluster resource.
//!
//! Everything here is pure: objects in, findings out.

mod crd;
mod crd_name;
mod infra_cluster;
mod labels;

pub use crd_name::{calculate_crd_name, pluralize};

use std::fmt;

use capi_operator_api::ProviderType;
use serde_json::Value;

use self::{
    crd_name::check_crd_names, infra_cluster::check_infra_cluster, labels::check_contract_labels,
};

/// Annotation that exempts a CRD from the CRD name check (as in clusterctl).
pub const SKIP_CRD_NAME_CHECK_ANNOTATION: &str =
    "clusterctl.cluster.x-k8s.io/skip-crd-name-preflight-check";
/// Label that aggregates a ClusterRole into the core controller's role.
pub const AGGREGATE_TO_MANAGER_LABEL: &str = "cluster.x-k8s.io/aggregate-to-manager";
/// API group of the Cluster API infrastructure providers sponsored by SIG Cluster Lifecycle,
/// which the core controller's own role covers.
pub const SIG_INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The check passed.
    Ok,
    /// Works today but deviates from the contract (or cannot be checked fully).
    Warning,
    /// Breaks the contract.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Severity::Ok => "OK",
            Severity::Warning => "WARNING",
            Severity::Error => "ERROR",
        })
    }
}

/// One result of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Severity.
    pub severity: Severity,
    /// Short name of the check (e.g. `crd-name`).
    pub check: &'static str,
    /// What was found.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<7} {}: {}", self.severity, self.check, self.message)
    }
}

fn finding(severity: Severity, check: &'static str, message: impl Into<String>) -> Finding {
    Finding {
        severity,
        check,
        message: message.into(),
    }
}

/// Checks `objects` (the release's rendered or parsed components) of a provider of type `t`
/// following `contract` (`v1beta1`, `v1beta2`; `None` when unknown) against the contracts.
/// Returns every finding, passed checks included, in a stable order.
pub fn verify(t: ProviderType, contract: Option<&str>, objects: &[Value]) -> Vec<Finding> {
    let mut out = Vec::new();
    check_crd_names(objects, &mut out);
    if t != ProviderType::Core {
        check_contract_labels(contract, objects, &mut out);
    }
    if t == ProviderType::Infrastructure {
        check_infra_cluster(contract, objects, &mut out);
    }
    if !objects.iter().any(|o| {
        matches!(
            o.get("kind").and_then(Value::as_str),
            Some("Deployment" | "DaemonSet")
        )
    }) {
        out.push(finding(
            Severity::Warning,
            "controller",
            "the release has no Deployment or DaemonSet: nothing would run its controllers",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(kind: &str, plural: &str, scope: &str, labels: Value, schema: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.infrastructure.foo.example"), "labels": labels},
            "spec": {
                "group": "infrastructure.foo.example",
                "scope": scope,
                "names": {"kind": kind, "plural": plural},
                "versions": [{"name": "v1beta2", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": schema}}]
            }
        })
    }

    fn good_release() -> Vec<Value> {
        let labels = json!({"cluster.x-k8s.io/v1beta2": "v1beta2"});
        let cluster_schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"controlPlaneEndpoint": {"type": "object", "properties": {
                "host": {"type": "string"}, "port": {"type": "integer", "format": "int32"}}}}},
            "status": {"type": "object", "properties": {
                "initialization": {"type": "object", "properties": {"provisioned": {"type": "boolean"}}}}}
        }});
        let template_schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"template": {"type": "object", "properties": {
                "spec": {"type": "object"}}}}}}});
        vec![
            crd(
                "FooCluster",
                "fooclusters",
                "Namespaced",
                labels.clone(),
                cluster_schema,
            ),
            crd(
                "FooClusterTemplate",
                "fooclustertemplates",
                "Namespaced",
                labels,
                template_schema,
            ),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "capi-foo-clusters", "labels": {AGGREGATE_TO_MANAGER_LABEL: "true"}},
                   "rules": [{"apiGroups": ["infrastructure.foo.example"], "resources": ["fooclusters"],
                              "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m"}}),
        ]
    }

    fn worst(findings: &[Finding]) -> Severity {
        findings
            .iter()
            .map(|f| f.severity)
            .max()
            .unwrap_or(Severity::Ok)
    }

    #[test]
    fn a_conforming_infrastructure_release_passes() {
        let f = verify(
            ProviderType::Infrastructure,
            Some("v1beta2"),
            &good_release(),
        );
        assert_eq!(worst(&f), Severity::Ok, "{f:#?}");
        assert!(f.iter().any(|f| f.check == "aggregate-to-manager"));
    }

    #[test]
    fn contract_breaches_are_reported() {
        let mut objs = good_release();
        // Wrong CRD name, cluster-scoped, v1beta1 status only, no label.
        objs[0]["metadata"]["name"] = json!("foocluster.infrastructure.foo.example");
        objs[0]["spec"]["scope"] = json!("Cluster");
        objs[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
            json!({"type": "object", "properties": {"ready": {"type": "boolean"}}});
        objs[0]["metadata"]["labels"] = json!({});
        objs.remove(1);
        objs[1]["rules"][0]["verbs"] = json!(["get", "list"]);
        let f = verify(ProviderType::Infrastructure, Some("v1beta2"), &objs);
        let errors: Vec<&str> = f
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.check)
            .collect();
        assert_eq!(
            errors,
            [
                "crd-name",
                "contract-label",
                "infra-cluster-scope",
                "infra-cluster-template",
                "aggregate-to-manager"
            ],
            "{f:#?}"
        );
        assert!(
            f.iter()
                .any(|f| f.check == "infra-cluster-status" && f.severity == Severity::Warning)
        );
        // Under v1beta1 the same status passes.
        let f = verify(ProviderType::Infrastructure, Some("v1beta1"), &objs);
        assert!(
            f.iter()
                .any(|f| f.check == "infra-cluster-status" && f.severity == Severity::Ok)
        );
    }

    #[test]
    fn no_infra_cluster_and_skipped_names() {
        let mut objs = good_release();
        objs.retain(|o| o["kind"] != "CustomResourceDefinition");
        objs.push(crd(
            "FooMachine",
            "foomachine",
            "Namespaced",
            json!({"cluster.x-k8s.io/v1beta2": "v1beta1_v1beta2"}),
            json!({"type": "object"}),
        ));
        objs[2]["metadata"]["annotations"] = json!({SKIP_CRD_NAME_CHECK_ANNOTATION: ""});
        let f = verify(ProviderType::Infrastructure, Some("v1beta2"), &objs);
        let by = |check: &str| {
            f.iter()
                .filter(|f| f.check == check)
                .map(|f| f.severity)
                .collect::<Vec<_>>()
        };
        assert_eq!(by("infra-cluster"), [Severity::Error]);
        assert_eq!(by("crd-name"), [Severity::Warning]);
        // v1beta1 is not served by the CRD.
        assert_eq!(by("contract-label"), [Severity::Error]);
        // Bootstrap providers have no InfraCluster to check.
        let f = verify(ProviderType::Bootstrap, None, &objs);
        assert!(f.iter().all(|f| !f.check.starts_with("infra-")));
    }

    #[test]
    fn real_core_and_kubeadm_releases_follow_the_crd_name_rule()
    -> Result<(), Box<dyn std::error::Error>> {
        let Some(shared) = capi_test_support::shared_dir() else {
            eprintln!(
                "SKIPPED real_core_and_kubeadm_releases_follow_the_crd_name_rule: ../shared (or CAPI_SHARED_DIR) not found"
            );
            return Ok(());
        };
        for (t, label, file) in [
            (ProviderType::Core, "cluster-api", "core-components.yaml"),
            (
                ProviderType::Bootstrap,
                "bootstrap-kubeadm",
                "bootstrap-components.yaml",
            ),
            (
                ProviderType::ControlPlane,
                "control-plane-kubeadm",
                "control-plane-components.yaml",
            ),
        ] {
            let text = std::fs::read_to_string(
                shared
                    .join("testdata/providers")
                    .join(label)
                    .join("v1.12.0")
                    .join(file),
            )?;
            let objs =
                crate::pipeline::parse_objects(&crate::pipeline::substitute(&text, |_| None)?)?;
            let f = verify(t, Some("v1beta2"), &objs);
            assert_eq!(worst(&f), Severity::Ok, "{label}: {f:#?}");
        }
        Ok(())
    }
}
