//! Accessors over a CustomResourceDefinition as JSON: its kind, group, versions and the
//! properties of a schema.

use serde_json::Value;

pub(super) fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn crds(objects: &[Value]) -> impl Iterator<Item = &Value> {
    objects.iter().filter(|o| {
        o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
            && o.get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(|a| a.starts_with("apiextensions.k8s.io/"))
    })
}

pub(super) fn crd_kind(crd: &Value) -> &str {
    str_at(crd, "/spec/names/kind")
}

pub(super) fn crd_group(crd: &Value) -> &str {
    str_at(crd, "/spec/group")
}

pub(super) fn crd_name(crd: &Value) -> &str {
    str_at(crd, "/metadata/name")
}

pub(super) fn served_versions(crd: &Value) -> Vec<&str> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// The schema of the property at `path` (property names), if declared.
pub(super) fn property<'a>(schema: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut s = schema;
    for p in path {
        s = s.pointer("/properties")?.get(*p)?;
    }
    Some(s)
}

/// Whether an object schema at `path` leaves its content open (so a field cannot be checked).
pub(super) fn open_at(schema: &Value, path: &[&str]) -> bool {
    (0..=path.len()).any(|n| {
        let Some(s) = property(schema, path.get(..n).unwrap_or(&[])) else {
            return false;
        };
        s.get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true)
            && s.get("properties").is_none()
    })
}
