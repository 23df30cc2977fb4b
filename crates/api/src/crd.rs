//! CustomResourceDefinitions of the provider kinds, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::schema::{OptionalEnum, OptionalIntOrString, StructuralSchemaRewriter};
use schemars::{JsonSchema, generate::SchemaSettings, transform::AddNullable};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{CATEGORY, GROUP, ProviderSpec, ProviderStatus, ProviderType, VERSION};

/// Annotation naming the operator version whose types generated a CRD.
pub const VERSION_ANNOTATION: &str = "management.cluster.x-k8s.io/operator-version";
/// Annotation holding the SHA-256 of a CRD's spec, so an unchanged CRD need not be rewritten.
pub const HASH_ANNOTATION: &str = "management.cluster.x-k8s.io/crd-spec-hash";

/// Errors generating a CRD.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The generated document is not a valid CRD object.
    #[error("generated CRD does not deserialize: {0}")]
    Invalid(#[from] serde_json::Error),
}

// The same settings kube's CustomResource derive uses, so the schema is structural. `nullable`:
// optional fields are marked nullable (this operator's own CRDs); without it no field is, as in
// the v1alpha2 CRDs of the other operator.
pub(crate) fn schema_of<T: JsonSchema>(nullable: bool) -> Result<Value, serde_json::Error> {
    let mut settings = SchemaSettings::openapi3().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    if nullable {
        settings = settings.with_transform(AddNullable::default());
    }
    let generator = settings
        .with_transform(StructuralSchemaRewriter)
        .with_transform(OptionalEnum)
        .with_transform(OptionalIntOrString)
        .into_generator();
    let mut v = serde_json::to_value(generator.into_root_schema_for::<T>())?;
    if let Value::Object(m) = &mut v {
        m.remove("title");
    }
    Ok(v)
}

// Sets the description of a generated schema (the type's own doc is about the Rust type).
pub(crate) fn describe(schema: &mut Value, description: &str) {
    if let Value::Object(m) = schema {
        m.insert("description".into(), json!(description));
    }
}

/// What differs between the provider CRDs of the APIs served (this operator's and the v1alpha2
/// API of kubernetes-sigs/cluster-api-operator); [`provider_crd`] assembles the rest.
pub(crate) struct CrdParts<'a> {
    /// API group.
    pub group: &'a str,
    /// The one served and stored version.
    pub version: &'a str,
    /// The kind.
    pub provider_type: ProviderType,
    /// kubectl categories; none leaves the key out.
    pub categories: &'a [&'a str],
    /// Whether the kind's short name (`cacp`, ...) is declared: one group only may, since
    /// kubectl resolves a short name two groups claim to either.
    pub short_name: bool,
    /// additionalPrinterColumns.
    pub printer_columns: Value,
    /// Description of the whole object.
    pub description: String,
    /// Descriptions of the apiVersion and kind fields.
    pub type_meta_descriptions: [&'a str; 2],
    /// Schema of spec.
    pub spec: Value,
    /// Schema of status.
    pub status: Value,
    /// Write `conversion: {strategy: None}` rather than leaving it out: cluster-api-operator's
    /// CRDs name a conversion webhook, which must not survive taking them over (the API server
    /// would call a webhook that is gone).
    pub no_conversion: bool,
}

/// The longest provider name: a label value's limit, as every object the operator installs
/// carries the provider's name in a label.
pub const MAX_NAME_LENGTH: usize = 63;

/// The longest name of a provider of type `t`: the `cluster.x-k8s.io/provider` label value
/// is the type's prefix and the name (`infrastructure-aws`), and must fit in a label value.
pub fn max_name_length(t: ProviderType) -> usize {
    MAX_NAME_LENGTH - t.label_prefix().len()
}

/// Refuses a longer name when the object is created, rather than letting every install fail
/// later on the label. Only on create (`optionalOldSelf`): an object made before the rule
/// existed must still take its finalizer's removal, or it could never be deleted; the
/// operator's preflight check reports it instead.
fn name_length_rule(t: ProviderType) -> Value {
    let max = max_name_length(t);
    json!({
        "rule": format!("oldSelf.hasValue() || self.metadata.name.size() <= {max}"),
        "optionalOldSelf": true,
        "message": format!("metadata.name must be at most {max} characters for kind {}: every object the provider installs carries it, after the prefix {:?}, in the label cluster.x-k8s.io/provider, whose value cannot be longer than {MAX_NAME_LENGTH}", t.kind(), t.label_prefix()),
    })
}

/// A namespaced provider CRD with a status subresource, annotated with the operator version and
/// the hash of its spec.
pub(crate) fn provider_crd(p: CrdParts<'_>) -> Result<CustomResourceDefinition, CrdError> {
    let t = p.provider_type;
    let kind = t.kind();
    let mut names = json!({
        "kind": kind,
        "listKind": format!("{kind}List"),
        "plural": t.plural(),
        "singular": kind.to_lowercase(),
    });
    if p.short_name {
        names["shortNames"] = json!([t.short_name()]);
    }
    if !p.categories.is_empty() {
        names["categories"] = json!(p.categories);
    }
    let [api_version_description, kind_description] = p.type_meta_descriptions;
    let doc = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{}.{}", t.plural(), p.group) },
        "spec": {
            "group": p.group,
            "names": names,
            "scope": "Namespaced",
            "versions": [{
                "name": p.version,
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "additionalPrinterColumns": p.printer_columns,
                "schema": { "openAPIV3Schema": {
                    "description": p.description,
                    "type": "object",
                    "x-kubernetes-validations": [name_length_rule(t)],
                    "properties": {
                        "apiVersion": { "type": "string", "description": api_version_description },
                        "kind": { "type": "string", "description": kind_description },
                        "metadata": { "type": "object" },
                        "spec": p.spec,
                        "status": p.status,
                    },
                }},
            }],
        },
    });
    let mut doc = doc;
    if p.no_conversion {
        doc["spec"]["conversion"] = json!({ "strategy": "None" });
    }
    let mut c: CustomResourceDefinition = serde_json::from_value(doc)?;
    let hash = format!("{:x}", Sha256::digest(serde_json::to_vec(&c.spec)?));
    let annotations = c.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(VERSION_ANNOTATION.into(), env!("CARGO_PKG_VERSION").into());
    annotations.insert(HASH_ANNOTATION.into(), hash);
    Ok(c)
}

/// The CRD of one provider kind.
pub fn crd(t: ProviderType) -> Result<CustomResourceDefinition, CrdError> {
    let mut spec = schema_of::<ProviderSpec>(true)?;
    describe(
        &mut spec,
        "Desired state of the provider. Every provider kind shares this spec.",
    );
    if let Value::Object(m) = &mut spec {
        // Optional, as in the specification (`json:"spec,omitempty"`): a provider declared by
        // name alone is installed from its default repository at the latest version.
        m.insert("default".into(), json!({}));
    }
    let mut status = schema_of::<ProviderStatus>(true)?;
    describe(&mut status, "Observed state of the provider.");
    provider_crd(CrdParts {
        group: GROUP,
        version: VERSION,
        provider_type: t,
        categories: &[CATEGORY],
        short_name: true,
        printer_columns: json!([
            { "name": "Version", "type": "string", "jsonPath": ".spec.version", "description": "Desired version" },
            { "name": "Installed", "type": "string", "jsonPath": ".status.installedVersion", "description": "Installed version" },
            { "name": "Patch", "type": "string", "jsonPath": ".status.availableVersions.newestPatch", "description": "The newest patch release of the installed minor version that the source offers, when newer than the installed one" },
            { "name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status", "description": "Whether the provider's controllers are available" },
            { "name": "Summary", "type": "string", "jsonPath": ".status.summary", "description": "Why the provider is not where its spec says (the Stalled or Reconciling reason, the version wanted and the one installed); empty once the spec is reached" },
            { "name": "Paused", "type": "boolean", "jsonPath": ".spec.paused", "description": "Whether the provider is paused" },
            { "name": "Deletion", "type": "string", "jsonPath": ".spec.deletionPolicy", "description": "What deleting the object does with what the provider installed: Block (when empty), Orphan or Purge" },
            { "name": "Contract", "type": "string", "jsonPath": ".status.contract", "priority": 1, "description": "Cluster API contract of the installed release" },
            { "name": "Newest", "type": "string", "jsonPath": ".status.availableVersions.newest", "priority": 1, "description": "The newest release the source offers, when newer than the installed one" },
            { "name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason", "priority": 1, "description": "Reason of the Ready condition" },
            { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
        ]),
        description: format!(
            "{} is a Cluster API {} provider managed by the operator. See https://cluster-api.sigs.k8s.io for the provider model.",
            t.kind(),
            t.word()
        ),
        type_meta_descriptions: [
            "APIVersion defines the versioned schema of this representation of an object.",
            "Kind is a string value representing the REST resource this object represents.",
        ],
        spec,
        status,
        no_conversion: false,
    })
}

/// The CRDs of all seven kinds, in install order.
pub fn all_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    ProviderType::ALL.into_iter().map(crd).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_name_of_every_kind_fills_the_label_exactly() -> Result<(), CrdError> {
        for t in ProviderType::ALL {
            let max = max_name_length(t);
            assert_eq!(
                t.manifest_label(&"p".repeat(max)).len(),
                MAX_NAME_LENGTH,
                "{t:?}"
            );
            let c = crd(t)?;
            let rule = serde_json::to_value(&c.spec.versions[0].schema)?;
            let text = rule.to_string();
            assert!(
                text.contains(&format!(
                    "oldSelf.hasValue() || self.metadata.name.size() <= {max}"
                )),
                "{t:?}: {text}"
            );
        }
        assert_eq!(max_name_length(ProviderType::Infrastructure), 48);
        Ok(())
    }
}
