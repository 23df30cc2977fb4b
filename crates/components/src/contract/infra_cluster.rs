//! The RBAC part of the InfraCluster contract: the ClusterRole that lets the core controller
//! manage a provider's InfraCluster (its fields are checked by the contract tables).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    AGGREGATE_TO_MANAGER_LABEL, Finding, SIG_INFRASTRUCTURE_GROUP, Severity,
    crd::{crd_group, crd_kind, crds, str_at},
    fields::is_named,
    finding,
};

/// For each InfraCluster CRD, the ClusterRole that lets the core controller manage it.
pub(super) fn check_infra_cluster_roles(objects: &[Value], out: &mut Vec<Finding>) {
    for crd in crds(objects).filter(|c| is_named(crd_kind(c), "Cluster")) {
        check_aggregated_role(objects, crd, out);
    }
}

const FULL_VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The verbs the ClusterRoles labelled for aggregation to the core manager grant on
/// `plural.group` (`*` included), and the names of the roles that grant any.
fn aggregated_grants<'a>(
    objects: &'a [Value],
    group: &str,
    plural: &str,
) -> (BTreeSet<&'a str>, Vec<&'a str>) {
    let roles = objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ClusterRole"))
        .filter(|o| {
            o.pointer("/metadata/labels")
                .and_then(|l| l.get(AGGREGATE_TO_MANAGER_LABEL))
                .and_then(Value::as_str)
                == Some("true")
        });
    let mut verbs: BTreeSet<&str> = BTreeSet::new();
    let mut granting = Vec::new();
    for role in roles {
        for rule in role
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let groups = strings(rule.get("apiGroups"));
            let resources = strings(rule.get("resources"));
            if (groups.contains(&group) || groups.contains(&"*"))
                && (resources.contains(&plural) || resources.contains(&"*"))
            {
                verbs.extend(strings(rule.get("verbs")));
                granting.push(str_at(role, "/metadata/name"));
            }
        }
    }
    granting.dedup();
    (verbs, granting)
}

fn check_aggregated_role(objects: &[Value], infra: &Value, out: &mut Vec<Finding>) {
    const CHECK: &str = "aggregate-to-manager";
    let (kind, group) = (crd_kind(infra), crd_group(infra));
    let plural = str_at(infra, "/spec/names/plural");
    let (verbs, granting) = aggregated_grants(objects, group, plural);
    let missing: Vec<&str> = if verbs.contains("*") {
        Vec::new()
    } else {
        FULL_VERBS
            .iter()
            .copied()
            .filter(|v| !verbs.contains(v))
            .collect()
    };
    // The core controller's own role grants the SIG's group in full: the contract asks the
    // aggregated role of providers of other groups only.
    if group == SIG_INFRASTRUCTURE_GROUP && granting.is_empty() {
        out.push(finding(
            Severity::Ok,
            CHECK,
            format!("{plural}.{group}: the core controller's own role covers the group {group}"),
        ));
        return;
    }
    let lacking = if group == SIG_INFRASTRUCTURE_GROUP {
        Severity::Warning
    } else {
        Severity::Error
    };
    if granting.is_empty() {
        out.push(finding(
            lacking,
            CHECK,
            format!(
                "no ClusterRole labelled {AGGREGATE_TO_MANAGER_LABEL}: \"true\" grants access to {plural}.{group}; the core controller must read and write {kind} objects"
            ),
        ));
    } else if !missing.is_empty() {
        out.push(finding(
            lacking,
            CHECK,
            format!(
                "ClusterRole {} grants {plural}.{group} but not the verbs {}",
                granting.join(", "),
                missing.join(", ")
            ),
        ));
    } else {
        out.push(finding(
            Severity::Ok,
            CHECK,
            format!(
                "ClusterRole {} grants full access to {plural}.{group}",
                granting.join(", ")
            ),
        ));
    }
}
