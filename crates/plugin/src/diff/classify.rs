//! What a difference between a live object and what the operator would make of it means, with
//! no cluster: the noise the apiserver adds left out, Secret values replaced by markers, the
//! unified diff of the fields, and the consequences an admin looks for before an upgrade
//! (Deployments that restart, CRD versions served or stored, webhooks that move).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// Fields the apiserver or other controllers keep, which no apply changes in a way worth
/// showing: bookkeeping of the write itself.
const NOISE_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
];

/// Annotations that are bookkeeping (or, for kubectl's last-applied copy, could hold a Secret's
/// values in clear).
const NOISE_ANNOTATIONS: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
];

/// What stands for a Secret value in the output.
pub const REDACTED: &str = "(redacted)";
/// What stands for a Secret value that changes.
pub const REDACTED_CHANGED: &str = "(redacted, changed)";

/// One object's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// `Kind namespace/name`.
    pub object: String,
    /// The unified diff of the fields, live first (Secret values redacted).
    pub diff: String,
    /// For a Secret: the keys added, removed or changed (never their values).
    pub secret_keys: Vec<String>,
    /// The pod template changes: its Pods are replaced.
    pub restarts: bool,
    /// CRD versions served or stored that change.
    pub crd_versions: Vec<String>,
    /// Webhooks whose service, URL, CA bundle or targets change.
    pub webhooks: Vec<String>,
    /// The apiserver refuses the change in place (an immutable field): the operator deletes
    /// the object and creates it again; its Pods restart.
    pub replaced: bool,
}

impl Changed {
    /// This change, carried out by deleting and creating the object again.
    pub fn replaced(self) -> Changed {
        Changed {
            replaced: true,
            restarts: self.restarts || is_workload(&self.object),
            ..self
        }
    }
}

/// Whether `Kind namespace/name` names a workload whose Pods a replacement restarts.
fn is_workload(object: &str) -> bool {
    ["Deployment ", "DaemonSet ", "StatefulSet "]
        .iter()
        .any(|k| object.starts_with(k))
}

/// `obj` without the fields [`NOISE_METADATA`], [`NOISE_ANNOTATIONS`], the operator's applied
/// hash label (it follows the content) and the status (an apply never writes it).
pub fn normalize(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("status");
    }
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in NOISE_METADATA {
            meta.remove(*f);
        }
        prune_map(meta, "annotations", NOISE_ANNOTATIONS);
        prune_map(meta, "labels", &[capi_operator_api::APPLIED_HASH_LABEL]);
    }
    o
}

/// Removes `keys` from the map `meta[field]`, and the map itself once empty.
fn prune_map(meta: &mut Map<String, Value>, field: &str, keys: &[&str]) {
    if let Some(m) = meta.get_mut(field).and_then(Value::as_object_mut) {
        for k in keys {
            m.remove(*k);
        }
        if m.is_empty() {
            meta.remove(field);
        }
    }
}

fn kind(o: &Value) -> &str {
    o.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// A Secret's values by key, `data` and `stringData` together (as the apiserver merges them).
fn secret_values(o: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for field in ["data", "stringData"] {
        if let Some(m) = o.get(field).and_then(Value::as_object) {
            out.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    out
}

/// The keys of two Secrets that differ, each with what became of it; never a value.
pub fn secret_key_changes(before: &Value, after: &Value) -> Vec<String> {
    let (b, a) = (secret_values(before), secret_values(after));
    let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    keys.into_iter()
        .filter_map(|k| match (b.get(k), a.get(k)) {
            (None, Some(_)) => Some(format!("{k} (added)")),
            (Some(_), None) => Some(format!("{k} (removed)")),
            (Some(x), Some(y)) if x != y => Some(format!("{k} (changed)")),
            _ => None,
        })
        .collect()
}

/// Both Secrets with every value replaced by [`REDACTED`], or on `after`'s side by
/// [`REDACTED_CHANGED`] where it differs from `before`'s. Other kinds are returned as they are.
pub fn redact_pair(before: &Value, after: &Value) -> (Value, Value) {
    let (mut b, mut a) = (before.clone(), after.clone());
    if kind(after) != "Secret" && kind(before) != "Secret" {
        return (b, a);
    }
    let old = secret_values(before);
    for (side, is_after) in [(&mut b, false), (&mut a, true)] {
        for field in ["data", "stringData"] {
            let Some(m) = side.get_mut(field).and_then(Value::as_object_mut) else {
                continue;
            };
            for (k, v) in m.iter_mut() {
                let changed = is_after && old.get(k).is_some_and(|o| o != v);
                let marker = if changed { REDACTED_CHANGED } else { REDACTED };
                *v = Value::String(marker.into());
            }
        }
    }
    (b, a)
}

/// The unified diff of two objects' YAML, live first.
pub fn unified(before: &Value, after: &Value) -> anyhow::Result<String> {
    let (b, a) = (capi_yaml::to_string(before)?, capi_yaml::to_string(after)?);
    Ok(similar::TextDiff::from_lines(&b, &a)
        .unified_diff()
        .context_radius(3)
        .header("live", "operator")
        .to_string())
}

/// The change from `live` to `after` (the apiserver's answer to a dry-run apply) of the object
/// named `object`; `None` when the two agree once noise is left out.
pub fn classify(object: &str, live: &Value, after: &Value) -> anyhow::Result<Option<Changed>> {
    let (before, after) = (normalize(live), normalize(after));
    if before == after {
        return Ok(None);
    }
    let secret_keys = if kind(&after) == "Secret" {
        secret_key_changes(&before, &after)
    } else {
        Vec::new()
    };
    let (shown_before, shown_after) = redact_pair(&before, &after);
    Ok(Some(Changed {
        object: object.to_string(),
        diff: unified(&shown_before, &shown_after)?,
        secret_keys,
        restarts: restarts(&before, &after),
        crd_versions: crd_versions(&before, &after),
        webhooks: webhook_moves(&before, &after),
        replaced: false,
    }))
}

/// Whether a workload's Pods are replaced: its pod template changes.
pub fn restarts(before: &Value, after: &Value) -> bool {
    matches!(kind(after), "Deployment" | "DaemonSet" | "StatefulSet")
        && before.pointer("/spec/template") != after.pointer("/spec/template")
}

/// A CRD's served versions and its storage version.
fn crd_served_stored(crd: &Value) -> (Vec<String>, Vec<String>) {
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let (mut served, mut stored) = (Vec::new(), Vec::new());
    for v in versions {
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if v.get("served").and_then(Value::as_bool) == Some(true) {
            served.push(name.clone());
        }
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            stored.push(name);
        }
    }
    (served, stored)
}

/// What changes in a CRD's served and stored versions.
pub fn crd_versions(before: &Value, after: &Value) -> Vec<String> {
    if kind(after) != "CustomResourceDefinition" {
        return Vec::new();
    }
    let (served_b, stored_b) = crd_served_stored(before);
    let (served_a, stored_a) = crd_served_stored(after);
    let mut out = Vec::new();
    if served_b != served_a {
        out.push(format!("served {} -> {}", list(&served_b), list(&served_a)));
    }
    if stored_b != stored_a {
        out.push(format!("stored {} -> {}", list(&stored_b), list(&stored_a)));
    }
    out
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".into()
    } else {
        items.join(",")
    }
}

/// Where a webhook sends its requests: the service (`namespace/name:port/path`) or URL.
fn endpoint(client_config: Option<&Value>) -> String {
    let Some(c) = client_config else {
        return "(none)".into();
    };
    if let Some(url) = c.get("url").and_then(Value::as_str) {
        return url.to_string();
    }
    let s = |k: &str| {
        c.pointer(&format!("/service/{k}"))
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .unwrap_or_default()
    };
    let port = c
        .pointer("/service/port")
        .map_or("443".into(), Value::to_string);
    format!("{}/{}:{port}{}", s("namespace"), s("name"), s("path"))
}

/// The moves of one webhook `name` from `b` to `a` (its entries in a webhook configuration).
fn webhook_move(name: &str, b: Option<&Value>, a: Option<&Value>) -> Vec<String> {
    let (Some(b), Some(a)) = (b, a) else {
        let what = if a.is_some() { "added" } else { "removed" };
        return vec![format!("{name}: {what}")];
    };
    let mut out = Vec::new();
    let (eb, ea) = (
        endpoint(b.get("clientConfig")),
        endpoint(a.get("clientConfig")),
    );
    if eb != ea {
        out.push(format!("{name}: service {eb} -> {ea}"));
    }
    if b.pointer("/clientConfig/caBundle") != a.pointer("/clientConfig/caBundle") {
        out.push(format!("{name}: caBundle changes"));
    }
    for field in [
        "rules",
        "namespaceSelector",
        "objectSelector",
        "matchConditions",
    ] {
        if b.get(field) != a.get(field) {
            out.push(format!("{name}: {field} (targets) change"));
        }
    }
    out
}

/// Webhooks that move: in a webhook configuration, per webhook; in a CRD, its conversion
/// webhook.
pub fn webhook_moves(before: &Value, after: &Value) -> Vec<String> {
    match kind(after) {
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            let by_name = |o: &Value| -> BTreeMap<String, Value> {
                o.get("webhooks")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|w| {
                        let n = w.get("name").and_then(Value::as_str).unwrap_or("");
                        (n.to_string(), w.clone())
                    })
                    .collect()
            };
            let (b, a) = (by_name(before), by_name(after));
            let names: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
            names
                .into_iter()
                .flat_map(|n| webhook_move(n, b.get(n), a.get(n)))
                .collect()
        }
        "CustomResourceDefinition" => {
            let hook = |o: &Value| o.pointer("/spec/conversion/webhook").cloned();
            match (hook(before), hook(after)) {
                (None, None) => Vec::new(),
                (b, a) => webhook_move("conversion", b.as_ref(), a.as_ref()),
            }
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(image: &str, replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "m", "namespace": "ns", "resourceVersion": "1", "generation": 1,
                            "labels": {capi_operator_api::APPLIED_HASH_LABEL: "aaa"},
                            "managedFields": [{"manager": "x"}]},
               "spec": {"replicas": replicas,
                        "template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
               "status": {"readyReplicas": 1}})
    }

    /// The same object read back with other bookkeeping is no change.
    #[test]
    fn noise_is_no_change() {
        let live = deployment("img:1", 1);
        let mut after = live.clone();
        after["metadata"]["resourceVersion"] = json!("2");
        after["metadata"]["generation"] = json!(2);
        after["metadata"]["labels"][capi_operator_api::APPLIED_HASH_LABEL] = json!("bbb");
        after["metadata"]["managedFields"] = json!([{"manager": "y"}]);
        after["status"] = json!({});
        assert_eq!(classify("Deployment ns/m", &live, &after).unwrap(), None);
    }

    /// A changed image restarts the Deployment; a changed replica count changes it without.
    #[test]
    fn a_pod_template_change_restarts() {
        let live = deployment("img:1", 1);
        let c = classify("d", &live, &deployment("img:2", 1))
            .unwrap()
            .unwrap();
        assert!(c.restarts);
        assert!(c.diff.contains("-      - image: img:1"), "{}", c.diff);
        assert!(c.diff.contains("+      - image: img:2"), "{}", c.diff);
        assert!(c.diff.starts_with("--- live\n+++ operator\n"), "{}", c.diff);
        let c = classify("Deployment ns/m", &live, &deployment("img:1", 3))
            .unwrap()
            .unwrap();
        assert!(!c.restarts);
        assert!(c.diff.contains("+  replicas: 3"), "{}", c.diff);
        // Replaced (an immutable field): its Pods restart whatever changed.
        let c = c.replaced();
        assert!(c.replaced && c.restarts);
    }

    fn secret(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "creds", "namespace": "ns"}, "data": data})
    }

    /// Keys are named, values never printed: neither the old nor the new one.
    #[test]
    fn secret_values_are_redacted() {
        let live =
            secret(json!({"user": "YWxpY2U=", "password": "b2xkLXNlY3JldA==", "gone": "eA=="}));
        let after =
            secret(json!({"user": "YWxpY2U=", "password": "bmV3LXNlY3JldA==", "new": "eQ=="}));
        let c = classify("Secret ns/creds", &live, &after).unwrap().unwrap();
        assert_eq!(
            c.secret_keys,
            ["gone (removed)", "new (added)", "password (changed)"]
        );
        for value in [
            "YWxpY2U=",
            "b2xkLXNlY3JldA==",
            "bmV3LXNlY3JldA==",
            "eA==",
            "eQ==",
        ] {
            assert!(
                !c.diff.contains(value),
                "value {value} printed:\n{}",
                c.diff
            );
        }
        assert!(
            c.diff.contains(&format!("+  password: {REDACTED_CHANGED}")),
            "{}",
            c.diff
        );
        let (shown, _) = redact_pair(
            &json!({"kind": "Secret", "stringData": {"k": "plain"}}),
            &json!({}),
        );
        assert_eq!(shown["stringData"]["k"], REDACTED);
        // kubectl's last-applied copy holds the values in clear: it is never shown either.
        let mut annotated = live.clone();
        annotated["metadata"]["annotations"] = json!({
            "kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{\"password\":\"b2xkLXNlY3JldA==\"}}"});
        let c = classify("s", &annotated, &after).unwrap().unwrap();
        assert!(!c.diff.contains("b2xkLXNlY3JldA=="), "{}", c.diff);
    }

    fn crd(versions: Value, conversion: Option<Value>) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "things.example.io"},
               "spec": {"versions": versions, "conversion": conversion}})
    }

    #[test]
    fn crd_served_and_stored_versions() {
        let before = crd(
            json!([{"name": "v1beta1", "served": true, "storage": true}]),
            None,
        );
        let after = crd(
            json!([{"name": "v1beta1", "served": true, "storage": false},
                   {"name": "v1beta2", "served": true, "storage": true}]),
            None,
        );
        let c = classify("crd", &before, &after).unwrap().unwrap();
        assert_eq!(
            c.crd_versions,
            [
                "served v1beta1 -> v1beta1,v1beta2",
                "stored v1beta1 -> v1beta2"
            ]
        );
        // A description change moves no version.
        let mut described = before.clone();
        described["spec"]["versions"][0]["schema"] = json!({"description": "x"});
        let c = classify("crd", &before, &described).unwrap().unwrap();
        assert!(c.crd_versions.is_empty());
    }

    fn webhooks(hooks: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "v"},
               "webhooks": hooks})
    }

    fn hook(name: &str, service: &str, ca: &str, resources: &[&str]) -> Value {
        json!({"name": name,
               "clientConfig": {"service": {"namespace": "ns", "name": service, "path": "/validate"},
                                "caBundle": ca},
               "rules": [{"resources": resources}]})
    }

    #[test]
    fn webhooks_that_move() {
        let before = webhooks(json!([
            hook("a.example.io", "old-svc", "Q0E=", &["things"]),
            hook("b.example.io", "svc", "Q0E=", &["things"]),
            hook("gone.example.io", "svc", "Q0E=", &["things"]),
        ]));
        let after = webhooks(json!([
            hook("a.example.io", "new-svc", "Q0E=", &["things"]),
            hook("b.example.io", "svc", "Q0I=", &["things", "others"]),
        ]));
        let c = classify("w", &before, &after).unwrap().unwrap();
        assert_eq!(
            c.webhooks,
            [
                "a.example.io: service ns/old-svc:443/validate -> ns/new-svc:443/validate",
                "b.example.io: caBundle changes",
                "b.example.io: rules (targets) change",
                "gone.example.io: removed",
            ]
        );
        assert!(!c.restarts && c.crd_versions.is_empty());
        // A CRD's conversion webhook moving to another service.
        let conv = |svc: &str| {
            json!({"strategy": "Webhook", "webhook": {"clientConfig":
            {"service": {"namespace": "ns", "name": svc, "path": "/convert"}}}})
        };
        let v = json!([{"name": "v1", "served": true, "storage": true}]);
        let c = classify(
            "crd",
            &crd(v.clone(), Some(conv("a"))),
            &crd(v, Some(conv("b"))),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.webhooks,
            ["conversion: service ns/a:443/convert -> ns/b:443/convert"]
        );
    }
}
