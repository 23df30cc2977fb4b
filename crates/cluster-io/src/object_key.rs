//! Which object a rendered manifest is: its [`ObjKey`] and its group, version and kind.

use kube::api::GroupVersionKind;
use serde_json::Value;

use crate::ApplyError;

/// Identifies an object across kinds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// API group ("" for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// The key of a rendered object; an object without apiVersion, kind or name is invalid.
pub fn key_of(obj: &Value) -> Result<ObjKey, ApplyError> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        return Err(ApplyError::Invalid(
            "an object lacks apiVersion, kind or metadata.name".into(),
        ));
    }
    let group = api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or("")
        .to_string();
    Ok(ObjKey {
        group,
        kind: kind.to_string(),
        namespace: obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        name: name.to_string(),
    })
}

/// The group, version and kind of a rendered object (empty parts when it has none).
pub fn gvk_of(obj: &Value) -> GroupVersionKind {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    gvk_from(api_version, kind)
}

/// The group, version and kind of `kind` of `api_version` (`v1` is the core group).
pub fn gvk_from(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_split_group_and_default_namespace() {
        let k = key_of(&json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"ns"}})).unwrap();
        assert_eq!((k.group.as_str(), k.namespace.as_str()), ("apps", "ns"));
        assert_eq!(k.to_string(), "Deployment ns/d");
        let k =
            key_of(&json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"n"}})).unwrap();
        assert_eq!((k.group.as_str(), k.namespace.as_str()), ("", ""));
        assert_eq!(k.to_string(), "Namespace n");
        assert!(key_of(&json!({"kind":"Namespace","metadata":{"name":"n"}})).is_err());
        let g = gvk_of(&json!({"apiVersion":"v1","kind":"Namespace"}));
        assert_eq!((g.group.as_str(), g.version.as_str()), ("", "v1"));
        let g = gvk_from("apps/v1", "Deployment");
        assert_eq!((g.group.as_str(), g.version.as_str()), ("apps", "v1"));
    }
}
