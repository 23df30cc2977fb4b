//! Whether an object that already exists may be taken over by the apply of a provider: a
//! forced server-side apply would otherwise make any same-named object the provider's (a
//! user's Deployment, another tool's ClusterRole), then re-create it on an immutable change
//! and delete it at the next prune or at the provider's deletion.

use std::collections::BTreeMap;

use capi_operator_api::OWNER_KIND_LABEL;
use serde_json::Value;

/// clusterctl's label naming the provider an object belongs to (`infrastructure-aws`), which
/// clusterctl and cluster-api-operator put on every component they install.
pub use capi_components::pipeline::PROVIDER_LABEL;

/// Whether the existing object with `live` labels may be applied as `desired`: this operator
/// installed it (it carries owner labels: for this provider, or for another one whose release
/// ships the same object, which the operator shares as it always has), or it carries the
/// provider's [`PROVIDER_LABEL`] (clusterctl or cluster-api-operator installed it as this
/// provider's component: the hand-over). A Namespace may always be: admins create a
/// provider's namespace before declaring it, and the operator never deletes one it did not
/// create. Owner labels are trusted here because no one but the operator and cluster
/// administrators writes where a release's objects live (a namespaced one is always in the
/// provider's namespace, see `capi_operator_api::owner::claim_holds`).
pub fn may_take_over(desired: &Value, live: &BTreeMap<String, String>) -> bool {
    if desired.get("kind").and_then(Value::as_str) == Some("Namespace") {
        return true;
    }
    let want = |k: &str| {
        desired
            .pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
    };
    let ours = live.contains_key(OWNER_KIND_LABEL);
    let component = want(PROVIDER_LABEL)
        .is_some_and(|p| live.get(PROVIDER_LABEL).map(String::as_str) == Some(p));
    ours || component
}

/// The message of a refused take-over of `object` (as `Kind namespace/name`).
pub fn refusal(object: &str, desired: &Value) -> String {
    let label = desired
        .pointer("/metadata/labels")
        .and_then(|l| l.get(PROVIDER_LABEL))
        .and_then(Value::as_str)
        .unwrap_or("");
    format!(
        "{object} already exists and was not installed for this provider (it carries neither this operator's owner labels nor {PROVIDER_LABEL}={label}); the operator does not take over an object it did not install: delete or rename it, or label it {PROVIDER_LABEL}={label} to hand it over"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{OWNER_API_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL};
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn desired(kind: &str) -> Value {
        json!({"kind": kind, "metadata": {"name": "m", "labels": {
            OWNER_KIND_LABEL: "InfrastructureProvider",
            OWNER_NAMESPACE_LABEL: "capd-system",
            OWNER_NAME_LABEL: "docker",
            PROVIDER_LABEL: "infrastructure-docker"}}})
    }

    /// A same-named object of a user, or clusterctl's component of another provider, is
    /// refused; one this operator installed, a component of this provider clusterctl or
    /// cluster-api-operator installed, and a Namespace are taken.
    #[test]
    fn only_objects_this_operator_or_clusterctl_installed_are_taken_over() {
        let d = desired("Deployment");
        let ours = labels(&[
            (OWNER_KIND_LABEL, "InfrastructureProvider"),
            (OWNER_NAMESPACE_LABEL, "capd-system"),
            (OWNER_NAME_LABEL, "docker"),
        ]);
        assert!(may_take_over(&d, &ours));
        assert!(may_take_over(
            &d,
            &labels(&[(PROVIDER_LABEL, "infrastructure-docker")])
        ));
        assert!(!may_take_over(&d, &labels(&[("app", "mine")])));
        assert!(!may_take_over(
            &d,
            &labels(&[(PROVIDER_LABEL, "infrastructure-aws")])
        ));
        let other = labels(&[
            (OWNER_KIND_LABEL, "InfrastructureProvider"),
            (OWNER_NAMESPACE_LABEL, "capd-system"),
            (OWNER_NAME_LABEL, "aws"),
        ]);
        // Installed by this operator for another provider whose release ships it too (the
        // sample core's CRD, in a second provider of another kind): shared, as before.
        assert!(may_take_over(&d, &other));
        let mut of_go = ours.clone();
        of_go.insert(OWNER_API_LABEL.into(), "operator.cluster.x-k8s.io".into());
        assert!(
            may_take_over(&d, &of_go),
            "the other API's provider of that name"
        );
        assert!(may_take_over(&desired("Namespace"), &labels(&[])));
        let m = refusal("Deployment capd-system/m", &d);
        assert!(
            m.contains("cluster.x-k8s.io/provider=infrastructure-docker"),
            "{m}"
        );
    }
}
