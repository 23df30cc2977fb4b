//! The air-gapped release source's ConfigMaps, read through the Kubernetes API: the one
//! [`ConfigMapReader`] the operator and the plugin share, so both skip the operator's release
//! cache and report API errors the same way. The release sources (capi-release-sources) decode
//! them; the [`release_cache`](crate::release_cache) builds on the label and error mapping here.

use capi_release_sources::{
    SourceError,
    configmap::{ConfigMapData, ConfigMapReader, from_configmap},
};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, api::ListParams};
use tokio::sync::OnceCell;

/// Label on the ConfigMaps the operator caches fetched releases in. They carry the version
/// label too, so a broad selector could pick them; they never stand for a user's release.
pub const RELEASE_CACHE_LABEL: &str = "management.cluster.x-k8s.io/release-cache";

/// Reads the ConfigMaps a label selector picks in one namespace. One reader serves one
/// reconcile: its first answer is kept, so reading a release's metadata and components costs
/// one list, and both come from the same state.
#[derive(Clone)]
pub struct KubeConfigMaps {
    api: Api<ConfigMap>,
    selector: String,
    listed: Arc<OnceCell<Vec<ConfigMapData>>>,
}

impl KubeConfigMaps {
    /// The ConfigMaps of `namespace` matching `selector` (the API's label query form).
    pub fn new(client: Client, namespace: &str, selector: String) -> KubeConfigMaps {
        KubeConfigMaps {
            api: Api::namespaced(client, namespace),
            selector,
            listed: Arc::default(),
        }
    }

    async fn list_with(&self, params: ListParams) -> Result<Vec<ConfigMapData>, SourceError> {
        let list = self
            .api
            .list(&params.labels(&self.selector))
            .await
            .map_err(|e| kube_to_source("the selected ConfigMaps", e))?;
        Ok(list
            .items
            .iter()
            .filter(|cm| !is_release_cache(cm))
            .map(from_configmap)
            .collect())
    }
}

/// A Kubernetes API error as a source error: refused access and missing objects are the
/// user's to fix, anything else is retried.
pub fn kube_to_source(what: &str, e: kube::Error) -> SourceError {
    match e {
        kube::Error::Api(s) if s.code == 403 => SourceError::Unauthorized(what.to_string()),
        kube::Error::Api(s) if s.code == 404 => SourceError::NotFound(what.to_string()),
        e => SourceError::Transient {
            what: what.to_string(),
            reason: e.to_string(),
        },
    }
}

/// Whether a ConfigMap is one of the operator's release cache entries.
pub fn is_release_cache(cm: &ConfigMap) -> bool {
    cm.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(RELEASE_CACHE_LABEL))
}

impl ConfigMapReader for KubeConfigMaps {
    /// Served by the apiserver's watch cache without waiting for it to be confirmed fresh (a
    /// consistent list waits up to ~100 ms for that while writes are in flight, on every
    /// reconcile). A ConfigMap changed a moment ago may show its previous state: its own watch
    /// event starts another reconcile, which reads it as changed, and a version missing here
    /// is looked for again with [`ConfigMapReader::list_fresh`].
    async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
        self.listed
            .get_or_try_init(|| self.list_with(ListParams::default().match_any()))
            .await
            .cloned()
    }

    async fn list_fresh(&self) -> Result<Vec<ConfigMapData>, SourceError> {
        self.list_with(ListParams::default()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn api_error(code: u16) -> kube::Error {
        let mut status = kube::core::Status::failure("m", "r");
        status.code = code;
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn api_errors_map_to_source_errors() {
        assert!(
            matches!(kube_to_source("x", api_error(403)), SourceError::Unauthorized(w) if w == "x")
        );
        assert!(
            matches!(kube_to_source("x", api_error(404)), SourceError::NotFound(w) if w == "x")
        );
        assert!(
            matches!(kube_to_source("x", api_error(500)), SourceError::Transient { what, .. } if what == "x")
        );
    }

    #[test]
    fn release_cache_entries_are_recognised_by_their_label() {
        let mut cm = ConfigMap::default();
        assert!(!is_release_cache(&cm));
        cm.metadata.labels = Some(BTreeMap::from([(
            "provider.cluster.x-k8s.io/version".to_string(),
            "v1.0.0".to_string(),
        )]));
        assert!(!is_release_cache(&cm));
        cm.metadata
            .labels
            .get_or_insert_default()
            .insert(RELEASE_CACHE_LABEL.to_string(), "true".to_string());
        assert!(is_release_cache(&cm));
    }
}
