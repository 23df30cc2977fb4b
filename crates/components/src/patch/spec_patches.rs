//! The `ProviderSpec` fields `patches` (targeted patches) and `manifestPatches` (legacy merge
//! patches by kind): parsed, matched to the objects they select, and applied in order.

use std::collections::HashSet;

use capi_operator_api::{PatchSelector, TargetedPatch};
use serde_json::Value;

use super::{
    merge::merge_patch,
    operations::{JsonPatch, JsonPatchError},
    selector::{LabelSelector, SelectorError},
};

/// Splits an apiVersion into group and version; the core group is `""` (`v1` → `("", "v1")`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

fn str_at<'a>(o: &'a Value, pointer: &str) -> Option<&'a str> {
    o.pointer(pointer).and_then(Value::as_str)
}

/// A compiled `PatchSelector`: every field that is set must match exactly (see the module
/// documentation on empty strings); an object without a namespace has namespace `""`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<LabelSelector>,
}

impl Target {
    /// Compiles a selector, parsing its label selector.
    pub fn new(sel: &PatchSelector) -> Result<Target, SelectorError> {
        Ok(Target {
            group: sel.group.clone(),
            version: sel.version.clone(),
            kind: sel.kind.clone(),
            name: sel.name.clone(),
            namespace: sel.namespace.clone(),
            labels: sel
                .label_selector
                .as_deref()
                .map(LabelSelector::parse)
                .transpose()?,
        })
    }

    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &Value) -> bool {
        let (group, version) = split_api_version(str_at(obj, "/apiVersion").unwrap_or(""));
        let field = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        field(&self.group, group)
            && field(&self.version, version)
            && field(&self.kind, str_at(obj, "/kind").unwrap_or(""))
            && field(&self.name, str_at(obj, "/metadata/name").unwrap_or(""))
            && field(
                &self.namespace,
                str_at(obj, "/metadata/namespace").unwrap_or(""),
            )
            && self.labels.as_ref().is_none_or(|l| {
                l.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
            })
    }
}

/// A patch text that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchParseError {
    /// Not YAML (or JSON).
    #[error("not valid YAML: {0}")]
    Yaml(String),
    /// Nothing in it.
    #[error("the patch is empty")]
    Empty,
    /// A `patches` entry that is neither a list nor a mapping.
    #[error(
        "a patch must be a list of JSON patch operations (RFC 6902) or a mapping (merge patch, RFC 7396)"
    )]
    NotListOrMapping,
    /// A `manifestPatches` entry that is not a mapping.
    #[error("a manifest patch must be a mapping (merge patch, RFC 7396)")]
    NotAMapping,
    /// A `manifestPatches` entry without `kind`.
    #[error("a manifest patch must give the kind of the objects it patches")]
    NoKind,
    /// A selecting field that is not a string.
    #[error("{0} must be a string")]
    NotAString(&'static str),
    /// A malformed JSON patch.
    #[error("{0}")]
    JsonPatch(JsonPatchError),
}

fn parse_yaml(text: &str) -> Result<Value, PatchParseError> {
    let v: Value = capi_yaml::from_str(text).map_err(|e| PatchParseError::Yaml(e.to_string()))?;
    if v.is_null() {
        return Err(PatchParseError::Empty);
    }
    Ok(v)
}

/// The patch of one `patches` entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// A YAML/JSON list: RFC 6902 operations.
    Json(JsonPatch),
    /// A YAML/JSON mapping: an RFC 7396 merge patch.
    Merge(Value),
}

impl Patch {
    /// Reads a patch text (YAML, so JSON too): a list is a JSON patch, a mapping a merge patch.
    pub fn parse(text: &str) -> Result<Patch, PatchParseError> {
        match parse_yaml(text)? {
            v @ Value::Array(_) => JsonPatch::from_value(&v)
                .map(Patch::Json)
                .map_err(PatchParseError::JsonPatch),
            v @ Value::Object(_) => Ok(Patch::Merge(v)),
            _ => Err(PatchParseError::NotListOrMapping),
        }
    }

    /// Applies the patch to one object; atomic.
    pub fn apply(&self, obj: &mut Value) -> Result<(), JsonPatchError> {
        match self {
            Patch::Json(p) => p.apply(obj),
            Patch::Merge(m) => {
                merge_patch(obj, m);
                Ok(())
            }
        }
    }
}

/// One legacy `manifestPatches` entry: a merge patch applied to every object of its `kind`
/// whose `apiVersion`, `metadata.name` and `metadata.namespace` equal the patch's, each compared
/// only when the patch gives it. This fixes the Go operator, where a patch without apiVersion
/// never matches and a given apiVersion is not compared.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestPatch {
    patch: Value,
    kind: String,
    api_version: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

impl ManifestPatch {
    /// Reads a manifest patch (YAML or JSON mapping with at least `kind`).
    pub fn parse(text: &str) -> Result<ManifestPatch, PatchParseError> {
        let patch = parse_yaml(text)?;
        if !patch.is_object() {
            return Err(PatchParseError::NotAMapping);
        }
        let field = |pointer: &str, what: &'static str| match patch.pointer(pointer) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(PatchParseError::NotAString(what)),
        };
        let kind = field("/kind", "kind")?.ok_or(PatchParseError::NoKind)?;
        Ok(ManifestPatch {
            api_version: field("/apiVersion", "apiVersion")?,
            name: field("/metadata/name", "metadata.name")?,
            namespace: field("/metadata/namespace", "metadata.namespace")?,
            kind,
            patch,
        })
    }

    /// Whether the patch applies to `obj`.
    pub fn matches(&self, obj: &Value) -> bool {
        let field = |want: &Option<String>, pointer: &str| {
            want.as_deref()
                .is_none_or(|w| str_at(obj, pointer).unwrap_or("") == w)
        };
        str_at(obj, "/kind") == Some(self.kind.as_str())
            && field(&self.api_version, "/apiVersion")
            && field(&self.name, "/metadata/name")
            && field(&self.namespace, "/metadata/namespace")
    }

    /// Merges the patch into `obj`.
    pub fn apply(&self, obj: &mut Value) {
        merge_patch(obj, &self.patch);
    }
}

/// A patch of `spec.patches`, or a `spec.manifestPatches` entry, that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// Both fields are set (the CRD refuses this too; kept for objects that bypassed it).
    #[error("cannot use both spec.patches and spec.manifestPatches; choose one")]
    BothSet,
    /// A `patches` entry cannot be read.
    #[error("spec.patches[{index}].patch: {error}")]
    InvalidPatch {
        /// Index of the entry (from 0).
        index: usize,
        /// What is wrong.
        error: PatchParseError,
    },
    /// A `patches` entry's label selector cannot be parsed.
    #[error("spec.patches[{index}].target.labelSelector: {error}")]
    InvalidSelector {
        /// Index of the entry (from 0).
        index: usize,
        /// What is wrong.
        error: SelectorError,
    },
    /// A `patches` entry failed on an object.
    #[error("spec.patches[{index}] on {object}: {error}")]
    Failed {
        /// Index of the entry (from 0).
        index: usize,
        /// The object, as `Kind namespace/name`.
        object: String,
        /// What failed.
        error: JsonPatchError,
    },
    /// A `manifestPatches` entry cannot be read.
    #[error("spec.manifestPatches[{index}]: {error}")]
    InvalidManifestPatch {
        /// Index of the entry (from 0).
        index: usize,
        /// What is wrong.
        error: PatchParseError,
    },
}

/// `Kind namespace/name` (or `Kind name` when cluster-scoped), for messages.
pub fn describe_object(obj: &Value) -> String {
    let kind = str_at(obj, "/kind").unwrap_or("?");
    let name = str_at(obj, "/metadata/name").unwrap_or("?");
    match str_at(obj, "/metadata/namespace").filter(|n| !n.is_empty()) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The patches of a provider spec, read and validated once, ready to apply to rendered objects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecPatches {
    targeted: Vec<(Option<Target>, Patch)>,
    manifest: Vec<ManifestPatch>,
}

impl SpecPatches {
    /// Reads `spec.patches` and `spec.manifestPatches`; at most one of them may be non-empty.
    pub fn parse(
        patches: &[TargetedPatch],
        manifest_patches: &[String],
    ) -> Result<SpecPatches, PatchError> {
        if !patches.is_empty() && !manifest_patches.is_empty() {
            return Err(PatchError::BothSet);
        }
        let targeted = patches
            .iter()
            .enumerate()
            .map(|(index, p)| {
                let target = p
                    .target
                    .as_ref()
                    .map(Target::new)
                    .transpose()
                    .map_err(|error| PatchError::InvalidSelector { index, error })?;
                let patch = Patch::parse(&p.patch)
                    .map_err(|error| PatchError::InvalidPatch { index, error })?;
                Ok((target, patch))
            })
            .collect::<Result<_, _>>()?;
        let manifest = manifest_patches
            .iter()
            .enumerate()
            .map(|(index, text)| {
                ManifestPatch::parse(text)
                    .map_err(|error| PatchError::InvalidManifestPatch { index, error })
            })
            .collect::<Result<_, _>>()?;
        Ok(SpecPatches { targeted, manifest })
    }

    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.targeted.is_empty() && self.manifest.is_empty()
    }

    /// Applies every patch in order, each to every object it selects. A failing JSON patch
    /// leaves that object unchanged and stops with an error.
    pub fn apply(&self, objects: &mut [Value]) -> Result<(), PatchError> {
        for (index, mp) in self.manifest.iter().enumerate() {
            let mut hits = 0usize;
            for o in objects.iter_mut().filter(|o| mp.matches(o)) {
                mp.apply(o);
                hits += 1;
            }
            log_hits("spec.manifestPatches", index, hits);
        }
        for (index, (target, patch)) in self.targeted.iter().enumerate() {
            let mut hits = 0usize;
            for o in objects
                .iter_mut()
                .filter(|o| target.as_ref().is_none_or(|t| t.matches(o)))
            {
                patch.apply(o).map_err(|error| PatchError::Failed {
                    index,
                    object: describe_object(o),
                    error,
                })?;
                hits += 1;
            }
            log_hits("spec.patches", index, hits);
        }
        Ok(())
    }
}

fn log_hits(field: &str, index: usize, hits: usize) {
    if hits == 0 {
        // Not an error (the Go operator accepts it too), but almost always a selector mistake.
        tracing::warn!("{field}[{index}] matched no object");
    } else {
        tracing::debug!("{field}[{index}] patched {hits} object(s)");
    }
}

/// Identity of an object for duplicate detection: group, kind, namespace, name.
pub fn object_identity(obj: &Value) -> (String, String, String, String) {
    let (group, _) = split_api_version(str_at(obj, "/apiVersion").unwrap_or(""));
    (
        group.to_string(),
        str_at(obj, "/kind").unwrap_or("").to_string(),
        str_at(obj, "/metadata/namespace").unwrap_or("").to_string(),
        str_at(obj, "/metadata/name").unwrap_or("").to_string(),
    )
}

/// Identities of `objects`, for checking that added objects do not collide with them.
pub fn identities(objects: &[Value]) -> HashSet<(String, String, String, String)> {
    objects.iter().map(object_identity).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects() -> Vec<Value> {
        vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "capi-controller-manager", "namespace": "capi-system",
                    "labels": {"control-plane": "controller-manager"}}}),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "capi-webhook-service", "namespace": "capi-system"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "capi-manager-role"}}),
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": {"name": "capi-serving-cert", "namespace": "capi-system"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capi-system"}}),
        ]
    }

    #[test]
    fn targets_select_objects() {
        let sel = |v: Value| -> PatchSelector { serde_json::from_value(v).unwrap_or_default() };
        // (selector, indices of objects() selected)
        let cases: Vec<(PatchSelector, Vec<usize>)> = vec![
            (sel(json!({})), vec![0, 1, 2, 3, 4]),
            (sel(json!({"kind": "Deployment"})), vec![0]),
            (sel(json!({"group": "apps"})), vec![0]),
            (sel(json!({"group": ""})), vec![1, 4]),
            (sel(json!({"version": "v1"})), vec![0, 1, 2, 3, 4]),
            (
                sel(json!({"group": "", "version": "v1", "kind": "Service"})),
                vec![1],
            ),
            (sel(json!({"group": "apps", "version": "v2"})), vec![]),
            (sel(json!({"namespace": "capi-system"})), vec![0, 1, 3]),
            (sel(json!({"namespace": ""})), vec![2, 4]),
            (sel(json!({"name": "capi-manager-role"})), vec![2]),
            (
                sel(json!({"name": "capi-system", "kind": "Namespace"})),
                vec![4],
            ),
            (sel(json!({"kind": "deployment"})), vec![]),
            (
                sel(json!({"labelSelector": "control-plane=controller-manager"})),
                vec![0],
            ),
            (
                sel(json!({"labelSelector": "!control-plane"})),
                vec![1, 2, 3, 4],
            ),
            (sel(json!({"labelSelector": ""})), vec![0, 1, 2, 3, 4]),
            (
                sel(
                    json!({"group": "cert-manager.io", "kind": "Certificate", "name": "capi-serving-cert", "namespace": "capi-system"}),
                ),
                vec![3],
            ),
        ];
        let objs = objects();
        for (s, want) in cases {
            let t = Target::new(&s);
            assert!(t.is_ok(), "{s:?}");
            let t = t.unwrap_or_default();
            let got: Vec<usize> = (0..objs.len()).filter(|&i| t.matches(&objs[i])).collect();
            assert_eq!(got, want, "{s:?}");
        }
        assert_eq!(split_api_version("v1"), ("", "v1"));
        assert_eq!(
            split_api_version("rbac.authorization.k8s.io/v1"),
            ("rbac.authorization.k8s.io", "v1")
        );
    }

    #[test]
    fn manifest_patches_match_by_kind_and_given_fields() {
        // (patch, indices of objects() patched)
        let cases = [
            ("kind: Deployment\nspec: {replicas: 2}", vec![0]),
            (
                "apiVersion: apps/v1\nkind: Deployment\nspec: {replicas: 2}",
                vec![0],
            ),
            (
                "apiVersion: apps/v2\nkind: Deployment\nspec: {replicas: 2}",
                vec![],
            ),
            (
                "kind: Service\nmetadata: {name: capi-webhook-service}",
                vec![1],
            ),
            ("kind: Service\nmetadata: {name: other}", vec![]),
            ("kind: Service\nmetadata: {namespace: capi-system}", vec![1]),
            ("kind: Service\nmetadata: {namespace: elsewhere}", vec![]),
            ("kind: ClusterRole\nrules: []", vec![2]),
            (
                "{\"kind\": \"Namespace\", \"metadata\": {\"labels\": {\"a\": \"b\"}}}",
                vec![4],
            ),
            ("kind: Secret\ndata: {}", vec![]),
        ];
        for (text, want) in cases {
            let mp = ManifestPatch::parse(text);
            assert!(mp.is_ok(), "{text}: {mp:?}");
            let Ok(mp) = mp else { continue };
            let objs = objects();
            let got: Vec<usize> = (0..objs.len()).filter(|&i| mp.matches(&objs[i])).collect();
            assert_eq!(got, want, "{text}");
        }
        let errors = [
            ("spec: {replicas: 2}", PatchParseError::NoKind),
            ("- kind: Deployment", PatchParseError::NotAMapping),
            ("kind: [Deployment]", PatchParseError::NotAString("kind")),
            (
                "kind: Service\nmetadata: {name: 3}",
                PatchParseError::NotAString("metadata.name"),
            ),
            ("", PatchParseError::Empty),
        ];
        for (text, want) in errors {
            assert_eq!(ManifestPatch::parse(text), Err(want), "{text}");
        }
    }

    #[test]
    fn spec_patches_apply_in_order_to_their_targets() -> Result<(), PatchError> {
        let patches = vec![
            TargetedPatch {
                patch: "- {op: add, path: /spec, value: {replicas: 3}}\n- {op: add, path: /metadata/labels/example.com~1patched, value: \"yes\"}\n".into(),
                target: Some(PatchSelector {
                    group: Some("apps".into()),
                    kind: Some("Deployment".into()),
                    ..PatchSelector::default()
                }),
            },
            TargetedPatch {
                patch: "metadata:\n  annotations: {note: merged}\n".into(),
                target: Some(PatchSelector {
                    label_selector: Some("example.com/patched=yes".into()),
                    ..PatchSelector::default()
                }),
            },
            TargetedPatch {
                patch: "{\"metadata\": {\"annotations\": {\"all\": \"1\"}}}".into(),
                target: None,
            },
        ];
        let sp = SpecPatches::parse(&patches, &[])?;
        let mut objs = objects();
        sp.apply(&mut objs)?;
        assert_eq!(objs[0]["spec"]["replicas"], 3);
        // The second patch selects by the label the first one added.
        assert_eq!(objs[0]["metadata"]["annotations"]["note"], "merged");
        assert!(objs[1]["metadata"].get("labels").is_none());
        for o in &objs {
            assert_eq!(o["metadata"]["annotations"]["all"], "1");
        }
        let objs_before = objects();
        let failing = vec![TargetedPatch {
            patch: "[{op: replace, path: /spec/replicas, value: 1}]".into(),
            target: Some(PatchSelector {
                kind: Some("Service".into()),
                ..PatchSelector::default()
            }),
        }];
        let mut objs = objects();
        let err = SpecPatches::parse(&failing, &[])?.apply(&mut objs);
        assert_eq!(
            err.map_err(|e| e.to_string()),
            Err("spec.patches[0] on Service capi-system/capi-webhook-service: operation [0] (replace /spec/replicas) failed: path not found".into())
        );
        assert_eq!(objs, objs_before);
        Ok(())
    }

    #[test]
    fn spec_patch_errors() {
        let tp = |patch: &str, selector: Option<&str>| TargetedPatch {
            patch: patch.into(),
            target: selector.map(|s| PatchSelector {
                label_selector: Some(s.into()),
                ..PatchSelector::default()
            }),
        };
        let msg = |p: &[TargetedPatch], m: &[String]| {
            SpecPatches::parse(p, m)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            msg(&[tp("{a: 1}", None)], &["kind: X".into()]),
            Err("cannot use both spec.patches and spec.manifestPatches; choose one".into())
        );
        assert_eq!(
            msg(&[tp("{a: 1}", None), tp("just text", None)], &[]),
            Err("spec.patches[1].patch: a patch must be a list of JSON patch operations (RFC 6902) or a mapping (merge patch, RFC 7396)".into())
        );
        assert_eq!(
            msg(&[tp("[{op: remove}]", None)], &[]),
            Err("spec.patches[0].patch: operation [0] is invalid: it has no \"path\"".into())
        );
        assert_eq!(
            msg(&[tp("{a: 1}", Some("a in"))], &[]),
            Err("spec.patches[0].target.labelSelector: label selector \"a in\": expected \"(\" after in/notin for \"a\", found the end".into())
        );
        assert!(
            msg(&[tp("a: [1", None)], &[])
                .is_err_and(|e| e.starts_with("spec.patches[0].patch: not valid YAML"))
        );
        assert_eq!(
            msg(&[], &["kind: X".into(), "spec: {}".into()]),
            Err("spec.manifestPatches[1]: a manifest patch must give the kind of the objects it patches".into())
        );
        assert_eq!(msg(&[], &[]), Ok(()));
    }

    #[test]
    fn manifest_patches_apply_to_every_match() -> Result<(), PatchError> {
        let mut objs = objects();
        objs.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "second", "namespace": "capi-system"}, "spec": {"replicas": 1}}));
        let sp = SpecPatches::parse(
            &[],
            &[
                "kind: Deployment\nspec: {replicas: 5}".into(),
                "kind: Deployment\nmetadata: {name: second, labels: {only: second}}".into(),
            ],
        )?;
        sp.apply(&mut objs)?;
        assert_eq!(objs[0]["spec"]["replicas"], 5);
        assert_eq!(objs[5]["spec"]["replicas"], 5);
        assert!(objs[0]["metadata"]["labels"].get("only").is_none());
        assert_eq!(objs[5]["metadata"]["labels"]["only"], "second");
        Ok(())
    }

    #[test]
    fn identities_ignore_versions() {
        let a = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "c", "namespace": "n"}});
        let b = json!({"apiVersion": "cert-manager.io/v1alpha2", "kind": "Certificate", "metadata": {"name": "c", "namespace": "n"}});
        assert!(identities(&[a]).contains(&object_identity(&b)));
    }
}
