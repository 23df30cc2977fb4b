//! Container image overrides: the specification's `ImageMeta` pieces, or one image string as its
//! second example writes it.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// Image pieces; a piece left empty keeps the release's value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageMeta {
    /// Registry and path the image is pulled from (e.g. registry.example/capi), without the
    /// image name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Image name (the last path segment, e.g. cluster-api-controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Image tag (e.g. v1.12.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// A container image override, written either as one string or as [`ImageMeta`] pieces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ContainerImage {
    /// A whole image reference, e.g. `gcr.io/myregistry/capa-controller:v0.6.0-foo`.
    Reference(String),
    /// Pieces of the reference.
    Meta(ImageMeta),
}

impl ContainerImage {
    /// The override as pieces: a whole reference is split into repository, name and tag
    /// (a digest stays attached to the tag piece as `tag@sha256:...` or alone as `@sha256:...`).
    pub fn to_meta(&self) -> ImageMeta {
        match self {
            ContainerImage::Meta(m) => m.clone(),
            ContainerImage::Reference(r) => split_reference(r),
        }
    }
}

/// Splits `repo/path/name:tag@digest` into its pieces.
pub fn split_reference(reference: &str) -> ImageMeta {
    let reference = reference.trim();
    let (without_digest, digest) = match reference.split_once('@') {
        Some((a, d)) => (a, Some(d)),
        None => (reference, None),
    };
    // A colon after the last slash is a tag separator; one before it belongs to a registry port.
    let last_slash = without_digest.rfind('/');
    let tag_colon = without_digest
        .rfind(':')
        .filter(|c| last_slash.is_none_or(|s| *c > s));
    let (path, tag) = match tag_colon {
        Some(c) => (&without_digest[..c], Some(&without_digest[c + 1..])),
        None => (without_digest, None),
    };
    let (repository, name) = match path.rfind('/') {
        Some(s) => (Some(path[..s].to_string()), path[s + 1..].to_string()),
        None => (None, path.to_string()),
    };
    let tag = match (tag, digest) {
        (Some(t), Some(d)) => Some(format!("{t}@{d}")),
        (Some(t), None) => Some(t.to_string()),
        (None, Some(d)) => Some(format!("@{d}")),
        (None, None) => None,
    };
    ImageMeta {
        repository,
        name: (!name.is_empty()).then_some(name),
        tag,
    }
}

impl JsonSchema for ContainerImage {
    fn schema_name() -> Cow<'static, str> {
        "ContainerImage".into()
    }

    // A structural schema cannot say "string or object", so the field keeps any value and the
    // description documents both forms; the operator reports a malformed one as a condition.
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Image of the container: either one string (\"registry.example/capa-controller:v1\") or an object with the pieces repository (registry and path), name (image name) and tag; pieces not given keep the release's value.",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(r: Option<&str>, n: Option<&str>, t: Option<&str>) -> ImageMeta {
        ImageMeta {
            repository: r.map(str::to_string),
            name: n.map(str::to_string),
            tag: t.map(str::to_string),
        }
    }

    #[test]
    fn splits_references() {
        assert_eq!(
            split_reference("gcr.io/myregistry/capa-controller:v0.6.0-foo"),
            meta(
                Some("gcr.io/myregistry"),
                Some("capa-controller"),
                Some("v0.6.0-foo")
            )
        );
        assert_eq!(
            split_reference("localhost:5000/capi:v1"),
            meta(Some("localhost:5000"), Some("capi"), Some("v1"))
        );
        assert_eq!(
            split_reference("localhost:5000/capi"),
            meta(Some("localhost:5000"), Some("capi"), None)
        );
        assert_eq!(
            split_reference("busybox"),
            meta(None, Some("busybox"), None)
        );
        assert_eq!(
            split_reference("r.io/a/b@sha256:abc"),
            meta(Some("r.io/a"), Some("b"), Some("@sha256:abc"))
        );
        assert_eq!(
            split_reference("r.io/b:1@sha256:abc"),
            meta(Some("r.io"), Some("b"), Some("1@sha256:abc"))
        );
    }

    #[test]
    fn both_forms_deserialize() -> Result<(), serde_json::Error> {
        let s: ContainerImage = serde_json::from_str("\"r.io/x:1\"")?;
        assert_eq!(s.to_meta(), meta(Some("r.io"), Some("x"), Some("1")));
        let m: ContainerImage = serde_json::from_str(r#"{"tag":"v2"}"#)?;
        assert_eq!(m.to_meta(), meta(None, None, Some("v2")));
        Ok(())
    }
}
