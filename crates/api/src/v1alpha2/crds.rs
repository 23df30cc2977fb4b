//! The seven CustomResourceDefinitions as the other operator publishes them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use schemars::JsonSchema;
use serde_json::{Value, json};

use crate::{
    ProviderType,
    crd::{CrdError, CrdParts, describe, provider_crd, schema_of},
};

use super::{GROUP, ProviderSpec, ProviderStatus, VERSION, status::conditions_schema};

// The schema of `T` as in the other operator's CRDs: no field is marked nullable (theirs have
// none, so a null is dropped by the API server as there), and reference names default to "".
fn go_schema_of<T: JsonSchema>() -> Result<Value, serde_json::Error> {
    let mut v = schema_of::<T>(false)?;
    strip_nullable(&mut v);
    default_reference_names(&mut v);
    Ok(v)
}

// The other operator's CRDs give the name of a LocalObjectReference (image pull secrets, and the
// secretKeyRef and configMapKeyRef of environment variables) the default "" instead of
// requiring it, as Kubernetes' own schemas do; k8s-openapi's schemas require it. Follow theirs,
// so that every object their CRDs accept is accepted here.
fn default_reference_names(schema: &mut Value) {
    let Value::Object(m) = schema else {
        return;
    };
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        if let Some(items) = props
            .get_mut("imagePullSecrets")
            .and_then(|p| p.get_mut("items"))
        {
            name_defaults_to_empty(items);
        }
        for key in ["secretKeyRef", "configMapKeyRef"] {
            if let Some(r) = props.get_mut(key) {
                name_defaults_to_empty(r);
            }
        }
        for p in props.values_mut() {
            default_reference_names(p);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(s) = m.get_mut(key) {
            default_reference_names(s);
        }
    }
}

fn name_defaults_to_empty(schema: &mut Value) {
    let Value::Object(m) = schema else {
        return;
    };
    if let Some(Value::Array(required)) = m.get_mut("required") {
        required.retain(|r| r != "name");
        if required.is_empty() {
            m.remove("required");
        }
    }
    if let Some(Value::Object(name)) = m.get_mut("properties").and_then(|p| p.get_mut("name")) {
        name.insert("default".into(), json!(""));
    }
}

// Removes the `nullable` keyword from a schema and all its subschemas (but never a property
// that happens to be called so).
fn strip_nullable(schema: &mut Value) {
    let Value::Object(m) = schema else {
        return;
    };
    m.remove("nullable");
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for p in props.values_mut() {
            strip_nullable(p);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(s) = m.get_mut(key) {
            strip_nullable(s);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = m.get_mut(key) {
            for s in list {
                strip_nullable(s);
            }
        }
    }
}

/// The CRD of one kind of this API: the other operator's resource name (e.g.
/// `coreproviders.operator.cluster.x-k8s.io`) and printer columns, in the `capi-providers`
/// category beside this operator's kinds; its short names (`cacp`, ...) are left to this
/// operator's group, which answers them,
/// one served and stored version `v1alpha2` with a status subresource and no conversion webhook.
pub fn crd(t: ProviderType) -> Result<CustomResourceDefinition, CrdError> {
    let mut spec = go_schema_of::<ProviderSpec>()?;
    describe(
        &mut spec,
        "Desired state of the provider, shared by every provider kind of this API.",
    );
    let mut status = go_schema_of::<ProviderStatus>()?;
    describe(&mut status, "Observed state of the provider.");
    if let Some(Value::Object(props)) = status.get_mut("properties") {
        props.insert("conditions".into(), conditions_schema());
    }
    provider_crd(CrdParts {
        group: GROUP,
        version: VERSION,
        provider_type: t,
        categories: &[crate::CATEGORY],
        short_name: false,
        printer_columns: json!([
            { "name": "InstalledVersion", "type": "string", "jsonPath": ".status.installedVersion" },
            { "name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status" },
            { "name": "Summary", "type": "string", "jsonPath": ".status.summary" },
            { "name": "Deletion", "type": "string", "jsonPath": ".spec.deletionPolicy" },
        ]),
        description: format!(
            "{}: a Cluster API {} provider, in the API of kubernetes-sigs/cluster-api-operator.",
            t.kind(),
            t.word()
        ),
        type_meta_descriptions: [
            "Versioned schema of this representation of the object.",
            "REST resource this object represents.",
        ],
        spec,
        status,
        no_conversion: true,
    })
}

/// The CRDs of all seven kinds of this API, in clusterctl's install order. Separate from
/// [`crate::crd::all_crds`], which stays this operator's own API.
pub fn all_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    ProviderType::ALL.into_iter().map(crd).collect()
}
