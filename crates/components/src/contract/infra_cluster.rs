//! The InfraCluster contract of infrastructure providers: a namespaced InfraCluster CRD with
//! the endpoint and readiness fields, its InfraClusterTemplate, and the ClusterRole that lets
//! the core controller manage it.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    AGGREGATE_TO_MANAGER_LABEL, Finding, SIG_INFRASTRUCTURE_GROUP, Severity,
    crd::{crd_group, crd_kind, crds, has_type, open_at, property, storage_schema, str_at},
    finding,
};

pub(super) fn check_infra_cluster(
    contract: Option<&str>,
    objects: &[Value],
    out: &mut Vec<Finding>,
) {
    let infra: Vec<&Value> = crds(objects)
        .filter(|c| crd_kind(c).ends_with("Cluster") && crd_kind(c).len() > "Cluster".len())
        .collect();
    if infra.is_empty() {
        let kinds: Vec<&str> = crds(objects).map(crd_kind).collect();
        out.push(finding(
            Severity::Error,
            "infra-cluster",
            format!(
                "no InfraCluster CRD (a kind named <Provider>Cluster) among the release's CRDs ({})",
                if kinds.is_empty() {
                    "none".to_string()
                } else {
                    kinds.join(", ")
                }
            ),
        ));
        return;
    }
    for crd in infra {
        let (kind, group) = (crd_kind(crd), crd_group(crd));
        out.push(finding(
            Severity::Ok,
            "infra-cluster",
            format!("InfraCluster kind {kind} in group {group}"),
        ));
        check_namespaced(crd, "infra-cluster-scope", out);
        match storage_schema(crd) {
            None => out.push(finding(
                Severity::Error,
                "infra-cluster-schema",
                format!("{kind}: the CRD has no openAPIV3Schema to check"),
            )),
            Some((version, schema)) => {
                check_endpoint(kind, version, schema, out);
                check_ready(kind, version, schema, contract, out);
            }
        }
        check_template(objects, crd, out);
        check_aggregated_role(objects, crd, out);
    }
}

fn check_namespaced(crd: &Value, check: &'static str, out: &mut Vec<Finding>) {
    let scope = str_at(crd, "/spec/scope");
    if scope == "Namespaced" {
        out.push(finding(
            Severity::Ok,
            check,
            format!("{} is namespaced", crd_kind(crd)),
        ));
    } else {
        out.push(finding(
            Severity::Error,
            check,
            format!(
                "{} must be namespace-scoped, its CRD has scope {scope:?}",
                crd_kind(crd)
            ),
        ));
    }
}

fn check_endpoint(kind: &str, version: &str, schema: &Value, out: &mut Vec<Finding>) {
    const CHECK: &str = "infra-cluster-endpoint";
    let path = ["spec", "controlPlaneEndpoint"];
    match property(schema, &path) {
        Some(ep) => {
            let host = has_type(property(ep, &["host"]), "string");
            let port = has_type(property(ep, &["port"]), "integer");
            if host && port {
                out.push(finding(
                    Severity::Ok,
                    CHECK,
                    format!("{kind} {version}: spec.controlPlaneEndpoint {{host, port}}"),
                ));
            } else {
                out.push(finding(
                    Severity::Error,
                    CHECK,
                    format!(
                        "{kind} {version}: spec.controlPlaneEndpoint must have host (string) and port (integer)"
                    ),
                ));
            }
        }
        None if open_at(schema, &path) => out.push(finding(
            Severity::Warning,
            CHECK,
            format!(
                "{kind} {version}: the schema leaves spec open, so spec.controlPlaneEndpoint cannot be checked"
            ),
        )),
        None => out.push(finding(
            Severity::Error,
            CHECK,
            format!("{kind} {version}: spec.controlPlaneEndpoint is missing"),
        )),
    }
}

fn check_ready(
    kind: &str,
    version: &str,
    schema: &Value,
    contract: Option<&str>,
    out: &mut Vec<Finding>,
) {
    const CHECK: &str = "infra-cluster-status";
    let ready = has_type(property(schema, &["status", "ready"]), "boolean");
    let provisioned = has_type(
        property(schema, &["status", "initialization", "provisioned"]),
        "boolean",
    );
    let open = open_at(schema, &["status", "initialization", "provisioned"])
        || open_at(schema, &["status", "ready"]);
    let (severity, message) = match (contract, ready, provisioned) {
        (Some("v1beta1"), true, _) => (Severity::Ok, "status.ready (boolean)".to_string()),
        (Some("v1beta1"), false, _) => (
            Severity::Error,
            "status.ready (boolean) is missing; the v1beta1 contract reads it".to_string(),
        ),
        (Some("v1beta2"), _, true) => (
            Severity::Ok,
            "status.initialization.provisioned (boolean)".to_string(),
        ),
        (Some("v1beta2"), true, false) => (
            Severity::Warning,
            "only status.ready: the v1beta2 contract reads status.initialization.provisioned (status.ready is the v1beta1 field, read only for compatibility)".to_string(),
        ),
        (Some("v1beta2"), false, false) => (
            Severity::Error,
            "status.initialization.provisioned (boolean) is missing; the v1beta2 contract reads it".to_string(),
        ),
        (_, true, _) | (_, _, true) => (
            Severity::Ok,
            "status.ready or status.initialization.provisioned (boolean)".to_string(),
        ),
        _ => (
            Severity::Error,
            "neither status.ready (v1beta1) nor status.initialization.provisioned (v1beta2) is declared".to_string(),
        ),
    };
    if severity == Severity::Error && open {
        out.push(finding(
            Severity::Warning,
            CHECK,
            format!("{kind} {version}: the schema leaves status open, so the readiness field cannot be checked"),
        ));
    } else {
        out.push(finding(
            severity,
            CHECK,
            format!("{kind} {version}: {message}"),
        ));
    }
}

fn check_template(objects: &[Value], infra: &Value, out: &mut Vec<Finding>) {
    const CHECK: &str = "infra-cluster-template";
    let (kind, group) = (crd_kind(infra), crd_group(infra));
    let want_kind = format!("{kind}Template");
    let Some(t) = crds(objects).find(|c| crd_kind(c) == want_kind && crd_group(c) == group) else {
        out.push(finding(
            Severity::Error,
            CHECK,
            format!(
                "no {want_kind} CRD in group {group} (ClusterClass needs the template of {kind})"
            ),
        ));
        return;
    };
    check_namespaced(t, CHECK, out);
    match storage_schema(t) {
        Some((version, schema)) => {
            let path = ["spec", "template", "spec"];
            if property(schema, &path).is_some() {
                out.push(finding(
                    Severity::Ok,
                    CHECK,
                    format!("{want_kind} {version}: spec.template.spec"),
                ));
            } else if open_at(schema, &path) {
                out.push(finding(
                    Severity::Warning,
                    CHECK,
                    format!(
                        "{want_kind} {version}: the schema leaves spec open, so spec.template.spec cannot be checked"
                    ),
                ));
            } else {
                out.push(finding(
                    Severity::Error,
                    CHECK,
                    format!("{want_kind} {version}: spec.template.spec is missing"),
                ));
            }
        }
        None => out.push(finding(
            Severity::Error,
            CHECK,
            format!("{want_kind}: the CRD has no openAPIV3Schema to check"),
        )),
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

fn check_aggregated_role(objects: &[Value], infra: &Value, out: &mut Vec<Finding>) {
    const CHECK: &str = "aggregate-to-manager";
    let (kind, group) = (crd_kind(infra), crd_group(infra));
    let plural = str_at(infra, "/spec/names/plural");
    let roles: Vec<&Value> = objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ClusterRole"))
        .filter(|o| {
            o.pointer("/metadata/labels")
                .and_then(|l| l.get(AGGREGATE_TO_MANAGER_LABEL))
                .and_then(Value::as_str)
                == Some("true")
        })
        .collect();
    let mut verbs: BTreeSet<&str> = BTreeSet::new();
    let mut granting = Vec::new();
    for role in &roles {
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
    let missing: Vec<&str> = if verbs.contains("*") {
        Vec::new()
    } else {
        FULL_VERBS
            .iter()
            .copied()
            .filter(|v| !verbs.contains(v))
            .collect()
    };
    granting.dedup();
    let sponsored = group == SIG_INFRASTRUCTURE_GROUP;
    let lacking = if sponsored {
        Severity::Warning
    } else {
        Severity::Error
    };
    if granting.is_empty() {
        out.push(finding(
            lacking,
            CHECK,
            format!(
                "no ClusterRole labelled {AGGREGATE_TO_MANAGER_LABEL}: \"true\" grants access to {plural}.{group}; the core controller must read and write {kind} objects{}",
                if sponsored { " (its own role covers this group, but the label is the documented way)" } else { "" }
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
