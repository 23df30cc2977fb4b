//! Server-side apply under a named field manager. The operator and the plugin apply with their
//! own managers (`capi-provider-operator`, `kubectl-capi_providers`), so the apiserver's
//! managedFields tell their writes apart; both force conflicts, as the operator owns what it
//! renders.

use std::time::Duration;

use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams},
};
use serde_json::Value;

use crate::{
    ApplyError, ObjKey,
    apply_error::{classify, is_immutable_field, recreatable},
    discovery::{Resolved, Resolver, is_unserved, missing_kind},
    object_key::{gvk_from, gvk_of, key_of},
};

/// Field manager of everything the operator applies. The plugin's `diff` dry-runs under it
/// too, so the apiserver merges exactly as it will when the operator applies.
pub const OPERATOR_FIELD_MANAGER: &str = "capi-provider-operator";

/// A stable hash of the content to apply (kept on the object in
/// [`capi_operator_api::APPLIED_HASH_LABEL`], so it must not change between operator processes).
pub fn content_hash(obj: &Value) -> String {
    use sha2::Digest;
    // The compact JSON text streamed into the hash rather than built first: every object of a
    // release is hashed on every pass, and a large CRD is hundreds of kilobytes of text.
    let mut hasher = sha2::Sha256::new();
    if serde_json::to_writer(&mut hasher, obj).is_err() {
        // Writing into a hash cannot fail; should serialization itself, hash the text form.
        hasher = sha2::Sha256::new();
        hasher.update(obj.to_string().as_bytes());
    }
    let digest = hasher.finalize();
    digest[..16]
        .iter()
        .fold(String::with_capacity(32), |mut out, b| {
            use std::fmt::Write;
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// `obj` with the hash of its content in [`capi_operator_api::APPLIED_HASH_LABEL`]: the body the
/// operator applies.
pub fn with_hash(obj: &Value, hash: &str) -> Value {
    let mut body = obj.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(l) = labels.as_object_mut() {
            l.insert(capi_operator_api::APPLIED_HASH_LABEL.into(), hash.into());
        }
    }
    body
}

/// Why a plain apply ([`ServerSideApply::apply`]) failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object has no apiVersion, kind or name.
    #[error("an object lacks apiVersion, kind or metadata.name")]
    Invalid,
    /// Discovery does not know the kind (or could not be asked).
    #[error("the cluster does not serve {kind} of {api_version} (is its CRD installed?)")]
    Unserved {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
        /// What discovery answered.
        #[source]
        source: kube::Error,
    },
    /// The apiserver refused the write or could not be reached.
    #[error("applying {key}")]
    Refused {
        /// The object.
        key: ObjKey,
        /// What the apiserver answered.
        #[source]
        source: kube::Error,
    },
}

/// Server-side apply of arbitrary objects with one field manager, kinds resolved once.
pub struct ServerSideApply {
    client: Client,
    manager: String,
    resolver: Resolver,
}

impl ServerSideApply {
    /// Applies through `client` as the field manager `manager`.
    pub fn new(client: Client, manager: &str) -> ServerSideApply {
        ServerSideApply {
            resolver: Resolver::new(client.clone()),
            client,
            manager: manager.to_string(),
        }
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The parameters of an apply: this field manager, conflicts forced.
    pub fn params(&self) -> PatchParams {
        PatchParams::apply(&self.manager).force()
    }

    /// The resource serving `kind` of `api_version`.
    pub async fn resolve_kind(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Resolved, WriteError> {
        self.resolver
            .resolve(&gvk_from(api_version, kind))
            .await
            .map_err(|source| WriteError::Unserved {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                source,
            })
    }

    /// The resource serving `gvk`; a kind the cluster does not serve is explained by what it
    /// serves instead ([`ApplyError::MissingKind`]).
    pub async fn resolve(&self, gvk: &GroupVersionKind) -> Result<Resolved, ApplyError> {
        match self.resolver.resolve(gvk).await {
            Ok(r) => Ok(r),
            Err(e) if is_unserved(&e) => Err(missing_kind(&self.client, gvk).await),
            Err(e) => Err(ApplyError::Transient(e)),
        }
    }

    /// Applies `obj` as it is.
    pub async fn apply(&self, obj: &Value) -> Result<DynamicObject, WriteError> {
        let key = key_of(obj).map_err(|_| WriteError::Invalid)?;
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let namespace = obj.pointer("/metadata/namespace").and_then(Value::as_str);
        let r = self.resolve_kind(api_version, &key.kind).await?;
        r.api(&self.client, namespace)
            .patch(&key.name, &self.params(), &Patch::Apply(obj))
            .await
            .map_err(|source| WriteError::Refused { key, source })
    }

    /// Applies `body` (the object `key`), failures classified ([`classify`]). When the
    /// apiserver refuses it for an immutable field of a [`recreatable`] kind (a Deployment's
    /// selector), the object is deleted, and applied again once gone.
    pub async fn apply_recreating(
        &self,
        key: &ObjKey,
        body: &Value,
    ) -> Result<DynamicObject, ApplyError> {
        let r = self.resolve(&gvk_of(body)).await?;
        let api = r.api(&self.client, Some(&key.namespace));
        let params = self.params();
        match api.patch(&key.name, &params, &Patch::Apply(body)).await {
            Err(e) if is_immutable_field(&e) && recreatable(key) => {
                // A new version changed an immutable field of an object holding no user data:
                // it is replaced, which is what an upgrade needs.
                tracing::info!(object = %key, "immutable field changed; recreating");
                recreate(&api, key).await?;
                api.patch(&key.name, &params, &Patch::Apply(body))
                    .await
                    .map_err(|e| classify(key, e))
            }
            r => r.map_err(|e| classify(key, e)),
        }
    }

    /// The labels of the object `key` (of `desired`'s kind) as it exists, `None` when it does
    /// not: a metadata-only read.
    pub async fn existing_labels(
        &self,
        key: &ObjKey,
        desired: &Value,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>, ApplyError> {
        let r = self.resolve(&gvk_of(desired)).await?;
        let api = r.api(&self.client, Some(&key.namespace));
        match api.get_metadata_opt(&key.name).await {
            Ok(found) => Ok(found.map(|m| m.metadata.labels.unwrap_or_default())),
            Err(e) => Err(classify(key, e)),
        }
    }

    /// A server-side apply of `body` (the object `key`) in a dry run: the apiserver validates
    /// it and stores nothing.
    pub async fn dry_run(&self, key: &ObjKey, body: &Value) -> Result<(), ApplyError> {
        self.dry_run_object(key, body).await.map(drop)
    }

    /// [`Self::dry_run`], giving the object as the apiserver would store it.
    pub async fn dry_run_object(
        &self,
        key: &ObjKey,
        body: &Value,
    ) -> Result<DynamicObject, ApplyError> {
        let r = self.resolve(&gvk_of(body)).await?;
        let mut params = self.params();
        params.dry_run = true;
        r.api(&self.client, Some(&key.namespace))
            .patch(&key.name, &params, &Patch::Apply(body))
            .await
            .map_err(|e| classify(key, e))
    }
}

impl ServerSideApply {
    /// Replaces the object `key` (of `desired`'s kind) with `body`, as this field manager. The
    /// body's resourceVersion makes it conditional: a change made since fails with a conflict.
    pub async fn replace(
        &self,
        key: &ObjKey,
        desired: &Value,
        body: &DynamicObject,
    ) -> Result<DynamicObject, ApplyError> {
        let r = self.resolve(&gvk_of(desired)).await?;
        let params = kube::api::PostParams {
            dry_run: false,
            field_manager: Some(self.manager.clone()),
        };
        r.api(&self.client, Some(&key.namespace))
            .replace(&key.name, &params, body)
            .await
            .map_err(|e| classify(key, e))
    }
}

/// Deletes `key` (its dependents first) and waits up to a minute until it is gone.
async fn recreate(api: &Api<DynamicObject>, key: &ObjKey) -> Result<(), ApplyError> {
    match api.delete(&key.name, &DeleteParams::foreground()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(ApplyError::Transient(e)),
    }
    for _ in 0..600 {
        if api.get_opt(&key.name).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(ApplyError::Transient(kube::Error::Service(
        format!("{key} was not deleted in time").into(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The hash is on every object the operator applied: a new release of the operator must
    /// compute the same one, or a restart would take every object for changed.
    #[test]
    fn the_content_hash_is_the_sha256_of_the_compact_json_text() {
        use sha2::Digest;
        let objects = [
            json!({}),
            json!({"kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "b"}},
                "data": {"k": "v\n\"quoted\" \\ ünïcode ✓", "n": 1.5, "z": null, "l": [1, true]}}),
        ];
        for obj in objects {
            let text = sha2::Sha256::digest(obj.to_string().as_bytes());
            let hex: String = text[..16].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(content_hash(&obj), hex, "{obj}");
        }
        assert_eq!(content_hash(&json!({})), "44136fa355b3678a1146ad16f7e8649e");
    }
}
