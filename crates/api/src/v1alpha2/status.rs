//! This operator's status in the other operator's vocabulary, and the CRD schema of its
//! condition lists.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{Value, json};

use super::{ProviderStatus, conditions};

/// This operator's status in the other operator's vocabulary. The status of both APIs has the
/// same fields and meaning (the v1alpha2 CRD validates conditions as metav1.Condition does,
/// which this fits them to): conditions get the other operator's reason where one corresponds
/// ([`conditions::go_reason`]), an empty reason is replaced by one derived from the type (the
/// other operator does the same), reasons and messages are fitted to metav1.Condition's limits,
/// and only the first condition of each type is kept.
pub fn go_status(status: &ProviderStatus) -> ProviderStatus {
    let mut out: Vec<Condition> = Vec::with_capacity(status.conditions.len());
    for c in &status.conditions {
        if out.iter().any(|o| o.type_ == c.type_) {
            continue;
        }
        let mut c = c.clone();
        let reason = conditions::go_reason(&c.type_, &c.reason);
        let reason = if reason.is_empty() {
            c.type_.as_str()
        } else {
            reason
        };
        c.reason = sanitize_reason(reason);
        truncate_at_char_boundary(&mut c.message, MAX_CONDITION_MESSAGE_BYTES);
        out.push(c);
    }
    ProviderStatus {
        conditions: out,
        ..status.clone()
    }
}

/// Longest condition message metav1.Condition allows, in bytes.
pub const MAX_CONDITION_MESSAGE_BYTES: usize = 32768;
const MAX_CONDITION_REASON_BYTES: usize = 1024;

// metav1.Condition's reason must match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$.
fn sanitize_reason(reason: &str) -> String {
    let kept: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        .collect();
    let trimmed = kept
        .trim_start_matches(|c: char| !c.is_ascii_alphabetic())
        .trim_end_matches([',', ':']);
    let mut out = trimmed.to_string();
    out.truncate(MAX_CONDITION_REASON_BYTES);
    let out = out.trim_end_matches([',', ':']).to_string();
    if out.is_empty() {
        "Unspecified".to_string()
    } else {
        out
    }
}

fn truncate_at_char_boundary(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
}

// The CRD schema of metav1.Condition lists, as the other operator's CRDs have it (this
// operator's CRD takes k8s-openapi's, without these limits), plus list-map semantics keyed by
// type so that server-side apply merges conditions one by one.
pub(super) fn conditions_schema() -> Value {
    json!({
        "description": "Conditions (metav1.Condition): Ready, PreflightCheckPassed, ProviderInstalled,\nProviderUpgraded, and the further ones this operator writes.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "description": "One aspect of the provider's state.",
            "type": "object",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {
                    "description": "When the status last changed.",
                    "type": "string",
                    "format": "date-time"
                },
                "message": {
                    "description": "Human-readable details; may be empty.",
                    "type": "string",
                    "maxLength": MAX_CONDITION_MESSAGE_BYTES
                },
                "observedGeneration": {
                    "description": "The metadata.generation the condition was computed for.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0
                },
                "reason": {
                    "description": "Machine-readable reason of the last change, in CamelCase.",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_CONDITION_REASON_BYTES,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
                },
                "status": {
                    "description": "True, False or Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"]
                },
                "type": {
                    "description": "Type of the condition, in CamelCase or as domain/CamelCase.",
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_fit_metav1_condition() {
        assert_eq!(sanitize_reason("ProviderInstalled"), "ProviderInstalled");
        assert_eq!(
            sanitize_reason("failed to load additional manifests"),
            "failedtoloadadditionalmanifests"
        );
        assert_eq!(sanitize_reason("9lives:"), "lives");
        assert_eq!(sanitize_reason("example.com/Thing"), "examplecomThing");
        assert_eq!(sanitize_reason(""), "Unspecified");
        assert_eq!(sanitize_reason(&"A".repeat(2000)).len(), 1024);
        let mut s = "é".repeat(20000);
        truncate_at_char_boundary(&mut s, MAX_CONDITION_MESSAGE_BYTES);
        assert!(s.len() <= MAX_CONDITION_MESSAGE_BYTES && s.len() > 32760);
    }
}
