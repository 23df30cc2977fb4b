//! What a failed write means: [`ApplyError`], whether it is worth retrying, its condition
//! reason, and which kinds may be re-created when a new release changes an immutable field.

use crate::{ObjKey, redact::Redactor};

/// Why applying failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The cluster does not serve the object's kind (e.g. cert-manager is not installed).
    #[error("the cluster does not serve {kind}.{group}/{version}; {found} ({})", missing_kind_hint(.group))]
    MissingKind {
        /// API group of the kind.
        group: String,
        /// API version.
        version: String,
        /// The kind.
        kind: String,
        /// What the cluster serves instead (see [`crate::discovery::missing_kind`]).
        found: String,
    },
    /// The object is malformed.
    #[error("{0}")]
    Invalid(String),
    /// The apiserver refused the object (validation, admission): a configuration problem.
    #[error("the apiserver refused {key}: {message}")]
    Refused {
        /// The object.
        key: String,
        /// The apiserver's message.
        message: String,
    },
    /// The apiserver refused a change of an installed CustomResourceDefinition (an immutable
    /// field such as spec.scope or spec.names, a stored version removed). The CRD is never
    /// deleted to force the change: that would delete every custom resource of it.
    #[error(
        "the apiserver refused the change of CustomResourceDefinition {name} ({fields}): {message}; nothing was deleted and the installed release keeps running"
    )]
    CrdChangeRefused {
        /// The CRD's name.
        name: String,
        /// The refused fields (e.g. `spec.scope`), as the apiserver names them.
        fields: String,
        /// The apiserver's message.
        message: String,
    },
    /// A CRD did not become Established in time.
    #[error("CustomResourceDefinition {0} did not become Established")]
    NotEstablished(String),
    /// An object of the release exists and was not installed for the provider (see the
    /// operator's `decide::adoption`): it is not taken over.
    #[error("{0}")]
    NotTakenOver(String),
    /// Anything else the apiserver answered (network, conflicts, 5xx): retried with backoff.
    #[error("{0}")]
    Transient(#[from] kube::Error),
}

/// The API group of cert-manager's kinds (Certificate, Issuer), which providers' releases use
/// for their webhook certificates.
pub const CERT_MANAGER_GROUP: &str = "cert-manager.io";

fn missing_kind_hint(group: &str) -> &'static str {
    if group == CERT_MANAGER_GROUP {
        "cert-manager is not installed: install it, e.g. with `kubectl capi-providers init`; the provider is retried as soon as its CRDs appear"
    } else {
        "is the CRD that defines it installed?"
    }
}

impl ApplyError {
    /// The condition reason of this failure.
    pub fn reason(&self) -> &'static str {
        use capi_operator_api::conditions::reason;
        if let ApplyError::MissingKind { group, .. } = self
            && group == CERT_MANAGER_GROUP
        {
            return reason::CERT_MANAGER_NOT_INSTALLED;
        }
        if let ApplyError::CrdChangeRefused { .. } = self {
            return reason::CRD_CHANGE_REFUSED;
        }
        if let ApplyError::NotTakenOver(_) = self {
            return reason::OBJECT_NOT_OURS;
        }
        if self.is_transient() {
            reason::APPLY_RETRYING
        } else {
            reason::APPLY_FAILED
        }
    }

    /// This error with every value `r` hides removed from the apiserver's text, so that a
    /// refused object's message, shown in conditions, events and logs, never quotes a value
    /// substituted from the variables Secret.
    pub fn redacted(self, r: &Redactor) -> ApplyError {
        match self {
            ApplyError::Invalid(m) => ApplyError::Invalid(r.redact(&m)),
            ApplyError::Refused { key, message } => ApplyError::Refused {
                key,
                message: r.redact(&message),
            },
            ApplyError::CrdChangeRefused {
                name,
                fields,
                message,
            } => ApplyError::CrdChangeRefused {
                name,
                fields: r.redact(&fields),
                message: r.redact(&message),
            },
            ApplyError::Transient(kube::Error::Api(mut s)) => {
                s.message = r.redact(&s.message);
                ApplyError::Transient(kube::Error::Api(s))
            }
            other => other,
        }
    }

    /// Whether the error may go away without any change of the provider object: retried with
    /// backoff. A refused take-over counts: its fix (deleting the user's object) happens on an
    /// object no watch of the operator sees.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ApplyError::Transient(_) | ApplyError::NotEstablished(_) | ApplyError::NotTakenOver(_)
        )
    }
}

/// What a failed write of `key` means. The apiserver refusing a CRD (invalid, 400 or 422) is a
/// [`ApplyError::CrdChangeRefused`] naming the fields; an immutable field of a kind that is
/// not [`recreatable`] says it is left alone.
pub fn classify(key: &ObjKey, e: kube::Error) -> ApplyError {
    let kube::Error::Api(s) = &e else {
        return ApplyError::Transient(e);
    };
    if is_crd(key) && matches!(s.code, 400 | 422) {
        return crd_refused(key, s);
    }
    if !matches!(s.code, 400 | 403 | 404 | 422) {
        return ApplyError::Transient(e);
    }
    let mut message = s.message.clone();
    if is_immutable_field(&e) {
        message.push_str(&format!(
            "; a {} is never deleted and re-created by the operator, as it may hold user data: change or delete it by hand",
            key.kind
        ));
    }
    ApplyError::Refused {
        key: key.to_string(),
        message,
    }
}

/// Whether `key` is a CustomResourceDefinition.
pub fn is_crd(key: &ObjKey) -> bool {
    key.group == "apiextensions.k8s.io" && key.kind == "CustomResourceDefinition"
}

fn crd_refused(key: &ObjKey, s: &kube::core::Status) -> ApplyError {
    let fields: Vec<&str> = s
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| c.field.as_str())
        .filter(|f| !f.is_empty())
        .collect();
    ApplyError::CrdChangeRefused {
        name: key.name.clone(),
        fields: if fields.is_empty() {
            "field not named by the apiserver".into()
        } else {
            fields.join(", ")
        },
        message: s.message.clone(),
    }
}

/// Kinds (group, kind) whose objects the operator deletes and creates again when a new release
/// changes a field the apiserver keeps immutable (a Deployment's selector, a binding's
/// roleRef, a Service's clusterIP): they hold no user data, everything in them comes from
/// the release, and re-creating them is what the upgrade needs. Any other kind (above all a
/// CustomResourceDefinition, whose deletion deletes every custom resource of it; a Namespace;
/// a PersistentVolumeClaim; a Secret or ConfigMap that may hold user data) is never deleted:
/// the apply fails and says so.
pub const RECREATABLE: &[(&str, &str)] = &[
    ("apps", "Deployment"),
    ("apps", "DaemonSet"),
    ("batch", "Job"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("policy", "PodDisruptionBudget"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
];

/// Whether an immutable-field change of `key` may be carried out by re-creating it.
pub fn recreatable(key: &ObjKey) -> bool {
    RECREATABLE
        .iter()
        .any(|(g, k)| *g == key.group && *k == key.kind)
}

/// Whether the apiserver refused a write because it changes an immutable field.
pub fn is_immutable_field(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422 && s.message.contains("field is immutable"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(group: &str, kind: &str) -> ObjKey {
        ObjKey {
            group: group.into(),
            kind: kind.into(),
            namespace: String::new(),
            name: "x".into(),
        }
    }

    #[test]
    fn only_kinds_without_user_data_are_recreated_for_an_immutable_field() {
        for (g, k) in [
            ("apps", "Deployment"),
            ("apps", "DaemonSet"),
            ("batch", "Job"),
            ("", "Service"),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
            ),
        ] {
            assert!(recreatable(&key(g, k)), "{g}/{k}");
        }
        for (g, k) in [
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("", "Namespace"),
            ("", "PersistentVolumeClaim"),
            ("", "Secret"),
            ("", "ConfigMap"),
            ("apps", "StatefulSet"),
            ("cluster.x-k8s.io", "Cluster"),
            // A kind of the same name in another group is not the allowed one.
            ("example.org", "Deployment"),
        ] {
            assert!(!recreatable(&key(g, k)), "{g}/{k}");
        }
    }

    fn invalid(message: &str, field: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": 422, "reason": "Invalid", "message": message,
            "details": {"causes": [{"reason": "FieldValueInvalid", "field": field,
                "message": "Invalid value: \"Cluster\": field is immutable"}]},
        }))
        .unwrap();
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn a_refused_crd_change_names_the_crd_and_field_and_waits_for_a_change() {
        let crd = ObjKey {
            name: "widgets.example.org".into(),
            ..key("apiextensions.k8s.io", "CustomResourceDefinition")
        };
        let msg = "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.org\" is invalid: spec.scope: Invalid value: \"Cluster\": field is immutable";
        let e = classify(&crd, invalid(msg, "spec.scope"));
        assert!(
            matches!(&e, ApplyError::CrdChangeRefused { name, fields, .. }
                if name == "widgets.example.org" && fields == "spec.scope"),
            "{e:?}"
        );
        assert_eq!(
            e.reason(),
            capi_operator_api::conditions::reason::CRD_CHANGE_REFUSED
        );
        assert!(!e.is_transient());
        let text = e.to_string();
        assert!(text.contains("widgets.example.org") && text.contains("spec.scope"));
        assert!(text.contains("nothing was deleted"), "{text}");
        // An immutable field of a kind that may hold user data: refused, and said why.
        let secret = key("", "Secret");
        let e = classify(&secret, invalid("data: field is immutable", "data"));
        assert!(matches!(&e, ApplyError::Refused { .. }), "{e:?}");
        assert!(e.to_string().contains("never deleted"), "{e}");
    }

    #[test]
    fn a_refused_object_message_never_quotes_a_substituted_value() {
        let vars = std::collections::BTreeMap::from([(
            "AWS_SECRET".to_string(),
            "s3cr3t-value".to_string(),
        )]);
        let r = Redactor::new(&vars);
        let msg =
            "Deployment.apps \"m\" is invalid: metadata.labels: Invalid value: \"s3cr3t-value\"";
        for e in [
            classify(&key("apps", "Deployment"), invalid(msg, "metadata.labels")),
            classify(
                &key("apiextensions.k8s.io", "CustomResourceDefinition"),
                invalid(msg, "spec"),
            ),
        ] {
            let text = e.redacted(&r).to_string();
            assert!(!text.contains("s3cr3t"), "{text}");
            assert!(text.contains("metadata.labels: Invalid value"), "{text}");
        }
    }
}
