//! Checks of a release's components against the Cluster API provider contracts: CRD names as
//! Cluster API's `contract.CalculateCRDName` computes them (flect's pluralization of the
//! lower-cased kind, then the group), the contract version labels on provider CRDs, every
//! contract the provider type follows (InfraCluster, externally managed InfraCluster,
//! InfraMachine, InfraMachinePool, BootstrapConfig, ControlPlane, IPAM, and their templates)
//! checked field by field on the CRD version that follows the release's contract version
//! (tables in `rules.rs`), and for infrastructure providers a ClusterRole with the
//! `cluster.x-k8s.io/aggregate-to-manager` label granting the core controller full access to
//! the InfraCluster resource.
//!
//! Everything here is pure: objects in, findings out.

mod crd;
mod crd_name;
mod fields;
mod infra_cluster;
mod labels;
mod rules;

pub use crd_name::{calculate_crd_name, pluralize};

use std::fmt;

use capi_operator_api::ProviderType;
use serde_json::Value;

use self::{
    crd_name::check_crd_names, fields::check_contract_fields,
    infra_cluster::check_infra_cluster_roles, labels::check_contract_labels,
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

/// Whether `f` is an error of the contracts' field tables: a required field or CRD missing, or
/// a field of the wrong shape (as opposed to naming, labels or RBAC).
pub fn breaks_contract_fields(f: &Finding) -> bool {
    f.severity == Severity::Error && rules::is_table_check(f.check)
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
    check_contract_fields(t, contract, objects, &mut out);
    if t == ProviderType::Infrastructure {
        check_infra_cluster_roles(objects, &mut out);
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
mod tests;
