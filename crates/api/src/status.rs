//! The shared `ProviderStatus`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// Observed state of a provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    /// Cluster API contract the installed release abides by (from its metadata.yaml), e.g. v1beta2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// Conditions: PreflightCheckPassed, ProviderInstalled, ProviderUpgraded, Paused, Ready,
    /// Deleting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The metadata.generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Version of the release currently installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_version: Option<String>,
    /// SHA-256 (hex) of the releases the operator keeps in its release cache, by version (the
    /// installed one, the one before it, and the one being installed). Anyone allowed to write
    /// ConfigMaps in the namespace could rewrite a cache entry; the status is written only
    /// by the operator, so a cached release is used only while its content has this digest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub release_digests: BTreeMap<String, String>,
    /// Why the provider is not where its spec says, in a few words for `kubectl get` (its
    /// Summary column): the Stalled or Reconciling reason, and the version wanted and the one
    /// installed when they differ, e.g. `ComponentsFetchError: wanted v9.9.9, installed
    /// v1.12.0`. Absent once the spec is reached; the conditions hold the full messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Newer releases the provider's source offers, as the operator's last check found them
    /// (every `--version-check-seconds`, and after each change of the installed version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_versions: Option<Box<AvailableVersions>>,
}

/// Newer releases than the installed one that the provider's source offers (releases only, no
/// pre-releases). Each field is absent when the source offers nothing newer of its kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AvailableVersions {
    /// The installed version the source's releases were compared with.
    #[serde(default)]
    pub installed: String,
    /// The newest patch release of the installed minor version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_patch: Option<String>,
    /// The newest release of the installed Cluster API contract (by the newest release's
    /// metadata.yaml).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_in_contract: Option<String>,
    /// The newest release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest: Option<String>,
    /// Since when the operator has seen `newestPatch` offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_since: Option<Time>,
    /// When the source was last asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_time: Option<Time>,
    /// Why the last check failed (the versions above are from the check before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ProviderStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of the given type is present with status "True".
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }
}

// Conditions form a list keyed by type so server-side apply merges them entry by entry.
fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Vec<Condition>>::json_schema(generator);
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}
