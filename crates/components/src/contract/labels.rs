//! The contract version labels a provider's CRDs must carry.

use serde_json::Value;

use super::{
    Finding, Severity,
    crd::{crd_name, crds, served_versions},
    finding,
};

pub(super) fn check_contract_labels(
    contract: Option<&str>,
    objects: &[Value],
    out: &mut Vec<Finding>,
) {
    let Some(contract) = contract else {
        out.push(finding(
            Severity::Warning,
            "contract-label",
            "the contract of the release is unknown, so the CRD contract labels were not checked",
        ));
        return;
    };
    let label = format!("cluster.x-k8s.io/{contract}");
    for crd in crds(objects) {
        let name = crd_name(crd);
        let served = served_versions(crd);
        match crd
            .pointer("/metadata/labels")
            .and_then(|l| l.get(&label))
            .and_then(Value::as_str)
        {
            None => out.push(finding(
                Severity::Error,
                "contract-label",
                format!(
                    "{name} lacks the label {label}: Cluster API reads from it which API versions of the CRD follow contract {contract}"
                ),
            )),
            Some(value) => {
                let unknown: Vec<&str> = value
                    .split('_')
                    .filter(|v| !v.is_empty() && !served.contains(v))
                    .collect();
                if value.trim().is_empty() {
                    out.push(finding(
                        Severity::Error,
                        "contract-label",
                        format!("{name}: the label {label} names no API version"),
                    ));
                } else if unknown.is_empty() {
                    out.push(finding(
                        Severity::Ok,
                        "contract-label",
                        format!("{name}: {label}={value}"),
                    ));
                } else {
                    out.push(finding(
                        Severity::Error,
                        "contract-label",
                        format!(
                            "{name}: the label {label}={value} names versions the CRD does not serve: {}",
                            unknown.join(", ")
                        ),
                    ));
                }
            }
        }
    }
}
