//! Waiting until CustomResourceDefinitions are Established, and which ones a release's own
//! objects need before they can be applied.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};
use serde_json::Value;

use crate::ApplyError;

/// The CRDs among `crds` that define a kind some object of `used` (group, kind) has: only
/// those must be Established before the rest is applied. The others establish on their own a
/// moment later, as after `kubectl apply`; waiting for them would only delay the install.
pub fn crds_needed_by<'a>(
    crds: impl Iterator<Item = &'a Value>,
    used: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<String> {
    let used: std::collections::BTreeSet<(&str, &str)> = used.collect();
    crds.filter(|c| c.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition"))
        .filter(|c| {
            let group = c.pointer("/spec/group").and_then(Value::as_str);
            let kind = c.pointer("/spec/names/kind").and_then(Value::as_str);
            group.zip(kind).is_some_and(|gk| used.contains(&gk))
        })
        .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// Waits up to `timeout` until the CustomResourceDefinition `name` is Established. The
/// apiserver establishes a new CRD within milliseconds, so it looks again soon at first, then
/// every 100 ms. A CRD that does not exist is an error of the request, not a wait.
pub async fn wait_established(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<(), ApplyError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        let crd = api.get_status(name).await?;
        if is_established(&crd) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApplyError::NotEstablished(name.to_string()));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Waits until every CustomResourceDefinition of `names` is Established, all within `timeout`.
pub async fn wait_all_established(
    client: &Client,
    names: &[String],
    timeout: Duration,
) -> Result<(), ApplyError> {
    let deadline = tokio::time::Instant::now() + timeout;
    for name in names {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        wait_established(client, name, left).await?;
    }
    Ok(())
}

/// Whether the CRD's status says Established.
fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_crds_the_release_uses_are_waited_for() {
        let crd = |name: &str, group: &str, kind: &str| {
            serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name},
                "spec": {"group": group, "names": {"kind": kind}}})
        };
        let crds = [
            crd("clusters.cluster.x-k8s.io", "cluster.x-k8s.io", "Cluster"),
            crd("widgets.example.org", "example.org", "Widget"),
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
        ];
        let used = [
            ("apps", "Deployment"),
            ("example.org", "Widget"),
            ("", "Service"),
        ];
        assert_eq!(
            crds_needed_by(crds.iter(), used.into_iter()),
            vec!["widgets.example.org".to_string()]
        );
        // A kind of the same name in another group needs nothing.
        let other = [("other.io", "Cluster")];
        assert!(crds_needed_by(crds.iter(), other.into_iter()).is_empty());
    }

    #[test]
    fn established_is_read_from_the_condition() {
        let crd = |status: &str| -> CustomResourceDefinition {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "w.example.org"},
                "spec": {"group": "example.org", "scope": "Namespaced", "versions": [],
                    "names": {"kind": "W", "plural": "w"}},
                "status": {"conditions": [{"type": "Established", "status": status}]},
            }))
            .unwrap()
        };
        assert!(is_established(&crd("True")));
        assert!(!is_established(&crd("False")));
        assert!(!is_established(&CustomResourceDefinition::default()));
    }
}
