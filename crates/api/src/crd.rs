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

// The same settings kube's CustomResource derive uses, so the schema is structural.
fn schema_of<T: JsonSchema>() -> Result<Value, serde_json::Error> {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(AddNullable::default())
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

/// The CRD of one provider kind.
pub fn crd(t: ProviderType) -> Result<CustomResourceDefinition, CrdError> {
    let mut spec = schema_of::<ProviderSpec>()?;
    if let Value::Object(m) = &mut spec {
        m.insert(
            "description".into(),
            json!("Desired state of the provider. Every provider kind shares this spec."),
        );
        // Optional, as in the specification (`json:"spec,omitempty"`): a provider declared by
        // name alone is installed from its default repository at the latest version.
        m.insert("default".into(), json!({}));
    }
    let mut status = schema_of::<ProviderStatus>()?;
    if let Value::Object(m) = &mut status {
        m.insert(
            "description".into(),
            json!("Observed state of the provider."),
        );
    }
    let kind = t.kind();
    let doc = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{}.{GROUP}", t.plural()) },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": t.plural(),
                "singular": kind.to_lowercase(),
                "shortNames": [t.short_name()],
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "additionalPrinterColumns": [
                    { "name": "Version", "type": "string", "jsonPath": ".spec.version", "description": "Desired version" },
                    { "name": "Installed", "type": "string", "jsonPath": ".status.installedVersion", "description": "Installed version" },
                    { "name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status", "description": "Whether the provider's controllers are available" },
                    { "name": "Paused", "type": "boolean", "jsonPath": ".spec.paused", "description": "Whether the provider is paused" },
                    { "name": "Contract", "type": "string", "jsonPath": ".status.contract", "priority": 1, "description": "Cluster API contract of the installed release" },
                    { "name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason", "priority": 1, "description": "Reason of the Ready condition" },
                    { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
                ],
                "schema": { "openAPIV3Schema": {
                    "description": format!("{kind} is a Cluster API {} provider managed by the operator. See https://cluster-api.sigs.k8s.io for the provider model.", t.word()),
                    "type": "object",
                    "properties": {
                        "apiVersion": { "type": "string", "description": "APIVersion defines the versioned schema of this representation of an object." },
                        "kind": { "type": "string", "description": "Kind is a string value representing the REST resource this object represents." },
                        "metadata": { "type": "object" },
                        "spec": spec,
                        "status": status,
                    },
                }},
            }],
        },
    });
    let mut c: CustomResourceDefinition = serde_json::from_value(doc)?;
    let hash = format!("{:x}", Sha256::digest(serde_json::to_vec(&c.spec)?));
    let annotations = c.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(VERSION_ANNOTATION.into(), env!("CARGO_PKG_VERSION").into());
    annotations.insert(HASH_ANNOTATION.into(), hash);
    Ok(c)
}

/// The CRDs of all seven kinds, in install order.
pub fn all_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    ProviderType::ALL.into_iter().map(crd).collect()
}
