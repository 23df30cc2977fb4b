//! The release cache: fetched releases kept in ConfigMaps of the provider's namespace, so a
//! restart does not fetch again, each entry checked against the digest the provider's status
//! records before it is used. Also takes over the release ConfigMaps cluster-api-operator
//! left for a handed-over provider.

use std::collections::BTreeMap;

use capi_operator_api::{AnyProvider, CONFIGMAP_VERSION_LABEL, v1alpha2};
use capi_release::Release;
use capi_release_sources::{
    ReleaseSource, SourceError,
    configmap::{ConfigMapData, ConfigMapReader, ConfigMapSource},
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use crate::{
    configmaps::{RELEASE_CACHE_LABEL, is_release_cache, kube_to_source},
    provider_kind::owner_reference,
};

/// Annotation on a release cache entry naming the source it was fetched from.
pub const RELEASE_SOURCE_ANNOTATION: &str = "management.cluster.x-k8s.io/release-source";

/// The parts of a ConfigMap the engine reads.
pub use capi_release_sources::configmap::from_configmap as data_of;

/// One cached ConfigMap, read through the air-gapped source so both share one decoder.
struct Single(ConfigMapData);

impl ConfigMapReader for Single {
    async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
        Ok(vec![self.0.clone()])
    }
}

/// The release a cache ConfigMap holds at `version`; `None` when it is damaged (the release is
/// then fetched again and the entry rewritten).
async fn decode(cm: &ConfigMap, version: &str) -> Result<Option<Release>, SourceError> {
    let mut data = data_of(cm);
    data.labels
        .insert(CONFIGMAP_VERSION_LABEL.into(), version.to_string());
    let source = ConfigMapSource::new(Single(data));
    let metadata = source.fetch_file(version, "metadata.yaml").await?;
    let components = source.fetch_file(version, "components").await?;
    match (String::from_utf8(metadata), String::from_utf8(components)) {
        (Ok(metadata), Ok(components)) => Ok(Some(Release {
            version: version.to_string(),
            metadata,
            components,
        })),
        _ => Ok(None),
    }
}

/// Whether `cm` is a release cluster-api-operator downloaded for `p` at `version`: its labels
/// name the provider's type, name and version and mark it as that operator's.
pub fn is_go_release(cm: &ConfigMap, p: &AnyProvider, version: &str) -> bool {
    let want = v1alpha2::release_configmap_labels(p.provider_type, p.name(), version, false);
    let have = cm.metadata.labels.clone().unwrap_or_default();
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

/// Name of the cache ConfigMap of a provider's version (DNS-1123: lower case, `+` replaced).
pub fn cache_name(p: &AnyProvider, version: &str) -> String {
    capi_release_sources::airgap::dns_name(&format!(
        "{}-{}-{}",
        p.provider_type.word(),
        p.name(),
        version
    ))
}

/// The release cache of one namespace.
///
/// Anyone allowed to write ConfigMaps in the namespace can write a ConfigMap of an entry's name
/// and labels, and the release in it would be applied with the operator's rights. So an entry
/// is used only while its content has the SHA-256 the provider's status records
/// ([`ProviderStatus::release_digests`], written only by the operator through the status
/// subresource); an entry that differs is reported and fetched again, never applied. Releases a
/// user supplies on purpose (`fetchConfig.selector`) are not cache entries and stay trusted.
///
/// [`ProviderStatus::release_digests`]: capi_operator_api::ProviderStatus::release_digests
pub struct ReleaseCache {
    api: Api<ConfigMap>,
}

/// What the cache holds for one version.
#[derive(Debug)]
pub enum Lookup {
    /// An entry whose content has the digest the status records.
    Hit(Release),
    /// An entry of the operator's (its name, label and source) whose content is not the
    /// release the operator cached: rewritten by someone else, or damaged. Says how.
    Mismatch(String),
    /// An entry of the operator's for this source, but no digest was given to check it
    /// against: written just before a restart, not by the operator, or recorded in a status
    /// newer than the caller's copy. Not usable as it is.
    Unrecorded,
    /// Nothing usable: no entry, or one from another source.
    Miss,
}

/// SHA-256 (hex) of a release's content: its metadata and components, length-prefixed so
/// that moving bytes from one to the other changes it.
pub fn release_digest(r: &Release) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update((r.metadata.len() as u64).to_be_bytes());
    h.update(r.metadata.as_bytes());
    h.update(r.components.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A label value naming `version`: label values allow no `+` (semver build metadata), which
/// would make the entry impossible to write.
fn version_label(version: &str) -> String {
    let mut v: String = version
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    v.truncate(63);
    v.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

impl ReleaseCache {
    /// The cache in `namespace`.
    pub fn new(client: Client, namespace: &str) -> ReleaseCache {
        ReleaseCache {
            api: Api::namespaced(client, namespace),
        }
    }

    /// The cached release of `p` at `version` fetched from the source `key`, checked against
    /// `recorded`, the digest the provider's status holds for that version.
    pub async fn get(
        &self,
        p: &AnyProvider,
        version: &str,
        key: &str,
        recorded: Option<&str>,
    ) -> Result<Lookup, SourceError> {
        let name = cache_name(p, version);
        let cm = match self.api.get_opt(&name).await {
            Ok(Some(cm)) => cm,
            Ok(None) => return Ok(Lookup::Miss),
            Err(e) => return Err(kube_to_source("the release cache", e)),
        };
        let cached_key = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RELEASE_SOURCE_ANNOTATION));
        // Not an entry (a user's ConfigMap), or fetchConfig now points elsewhere: the same
        // version from another source may differ.
        if !is_release_cache(&cm) || cached_key.map(String::as_str) != Some(key) {
            return Ok(Lookup::Miss);
        }
        let Some(recorded) = recorded else {
            return Ok(Lookup::Unrecorded);
        };
        let release = match decode(&cm, version).await {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(Lookup::Mismatch(format!("{name} is not UTF-8 text"))),
            Err(e) => return Ok(Lookup::Mismatch(format!("{name} cannot be read: {e}"))),
        };
        let digest = release_digest(&release);
        if digest != recorded {
            return Ok(Lookup::Mismatch(format!(
                "the content of ConfigMap {name} has SHA-256 {digest}, the status records {recorded}"
            )));
        }
        Ok(Lookup::Hit(release))
    }

    /// The release cluster-api-operator downloaded for `p` at `version` (its ConfigMap
    /// `{type}-{name}-{version}` carrying its labels, compressed or not), taken into this cache
    /// under the source `key`: a handed-over installation fetches nothing, and the entry no
    /// longer depends on the other operator's objects (its owner reference pointed at them).
    ///
    /// Its content cannot be checked, so it is trusted only where a handover is what it
    /// looks like; the caller takes over only for a provider handed over from that operator
    /// (one it installed, or one `migrate --convert` wrote) that this operator has recorded no
    /// release digest for yet, and here the ConfigMap must be older than the provider object
    /// (creation times are the apiserver's): a ConfigMap planted after the provider existed is
    /// ignored and the release fetched. Anyone who could write ConfigMaps in the namespace
    /// before could have rewritten it for cluster-api-operator as well, which applied it too.
    /// `None` when there is no such ConfigMap or it is not taken over.
    pub async fn take_over_go_release(
        &self,
        p: &AnyProvider,
        version: &str,
        key: &str,
    ) -> Result<Option<Release>, SourceError> {
        let name = v1alpha2::release_configmap_name(p.provider_type, p.name(), version);
        let cm = match self.api.get_opt(&name).await {
            Ok(Some(cm)) => cm,
            Ok(None) => return Ok(None),
            Err(e) => {
                return Err(kube_to_source(
                    "cluster-api-operator's release ConfigMap",
                    e,
                ));
            }
        };
        let older = match (
            &cm.metadata.creation_timestamp,
            &p.metadata.creation_timestamp,
        ) {
            (Some(c), Some(o)) => c.0 <= o.0,
            _ => false,
        };
        if !is_go_release(&cm, p, version) || !older {
            return Ok(None);
        }
        let Some(release) = decode(&cm, version).await? else {
            return Ok(None);
        };
        if let Err(e) = self.put(p, &release, key).await {
            // The release is read; keeping it is only for later reconciles.
            tracing::warn!(error = %e, "release taken over but not cached");
        }
        Ok(Some(release))
    }

    /// Stores `release` of `p` fetched from the source `key` (owned by the provider object, so
    /// it goes with it), replacing an entry of this cache (or the release cluster-api-operator
    /// left under that name); any other ConfigMap of that name is left alone and the release
    /// is not cached.
    pub async fn put(
        &self,
        p: &AnyProvider,
        release: &Release,
        key: &str,
    ) -> Result<(), SourceError> {
        let name = cache_name(p, &release.version);
        let mut labels = BTreeMap::new();
        labels.insert(RELEASE_CACHE_LABEL.to_string(), "true".to_string());
        labels.insert(
            CONFIGMAP_VERSION_LABEL.to_string(),
            version_label(&release.version),
        );
        // Compressing a large release takes long enough to stall the operator's one event-loop
        // thread (lease renewal, watches): it runs on a blocking thread.
        let owned = release.clone();
        let (data, binary, mut annotations) =
            tokio::task::spawn_blocking(move || capi_release_sources::airgap::release_data(&owned))
                .await
                .map_err(|e| {
                    SourceError::Invalid(format!("compressing the release for the cache: {e}"))
                })??;
        annotations.insert(RELEASE_SOURCE_ANNOTATION.to_string(), key.to_string());
        let mut cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                annotations: Some(annotations),
                owner_references: Some(vec![owner_reference(p)]),
                ..ObjectMeta::default()
            },
            data: Some(data),
            binary_data: (!binary.is_empty()).then_some(binary),
            ..ConfigMap::default()
        };
        let cache = |e| kube_to_source("the release cache", e);
        match self.api.create(&PostParams::default(), &cm).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(cache(e)),
        }
        let existing = self.api.get(&name).await.map_err(cache)?;
        if !is_release_cache(&existing) && !is_go_release(&existing, p, &release.version) {
            return Err(SourceError::Invalid(format!(
                "ConfigMap {name} exists and is not a release cache entry; it is left alone"
            )));
        }
        // Replaced only as read: a ConfigMap swapped in meanwhile is not overwritten.
        cm.metadata.resource_version = existing.metadata.resource_version;
        self.api
            .replace(&name, &PostParams::default(), &cm)
            .await
            .map(|_| ())
            .map_err(cache)
    }

    /// Deletes `p`'s cache entries (its label and `p` as owner) of versions not in `keep`.
    /// Returns how many went.
    pub async fn prune(&self, p: &AnyProvider, keep: &[&str]) -> Result<usize, SourceError> {
        let cache = |e| kube_to_source("the release cache", e);
        let entries = self
            .api
            .list(&kube::api::ListParams::default().labels(RELEASE_CACHE_LABEL))
            .await
            .map_err(cache)?;
        let kept: Vec<String> = keep.iter().map(|v| cache_name(p, v)).collect();
        let uid = p.metadata.uid.as_deref().unwrap_or_default();
        let mut pruned = 0;
        for cm in entries.items {
            let name = cm.metadata.name.clone().unwrap_or_default();
            let owned = cm
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| !uid.is_empty() && o.uid == uid);
            if !owned || kept.contains(&name) {
                continue;
            }
            match self.api.delete(&name, &Default::default()).await {
                Ok(_) => pruned += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(cache(e)),
            }
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{ControlPlaneProvider, Provider, RuntimeExtensionProvider};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta as Meta;

    fn provider<P: Provider>(ns: &str, name: &str) -> AnyProvider {
        AnyProvider::from(&P::new(name, ns, Default::default()))
    }

    #[test]
    fn cache_names_are_dns_safe() {
        let p = provider::<ControlPlaneProvider>("ns", "kubeadm");
        assert_eq!(cache_name(&p, "v1.12.0"), "control-plane-kubeadm-v1.12.0");
        assert_eq!(
            cache_name(&p, "v1.12.0+Build"),
            "control-plane-kubeadm-v1.12.0-build"
        );
    }

    /// Build metadata (`+`) is no label value: a version carrying it is still cached.
    #[test]
    fn version_labels_are_valid_label_values() {
        assert_eq!(version_label("v1.0.0"), "v1.0.0");
        assert_eq!(version_label("v1.0.0+build.7"), "v1.0.0_build.7");
        let long = version_label(&format!("v1.0.0-{}", "a".repeat(80)));
        assert!(long.len() <= 63, "{long}");
    }

    #[test]
    fn releases_of_cluster_api_operator_are_recognized_by_their_labels() {
        let p = provider::<RuntimeExtensionProvider>("ns", "hooks");
        let labels = v1alpha2::release_configmap_labels(p.provider_type, "hooks", "v1.0.0", false);
        let cm = |labels: BTreeMap<String, String>| ConfigMap {
            metadata: Meta {
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(is_go_release(&cm(labels.clone()), &p, "v1.0.0"));
        // Its type word for runtime extensions has no dash, unlike this operator's.
        assert_eq!(
            labels
                .get(v1alpha2::CONFIGMAP_TYPE_LABEL)
                .map(String::as_str),
            Some("runtimeextension")
        );
        assert!(!is_go_release(&cm(labels.clone()), &p, "v1.0.1"));
        let other = provider::<RuntimeExtensionProvider>("ns", "other");
        assert!(!is_go_release(&cm(labels.clone()), &other, "v1.0.0"));
        let mut unmarked = labels;
        unmarked.remove(v1alpha2::OPERATOR_MANAGED_LABEL);
        assert!(!is_go_release(&cm(unmarked), &p, "v1.0.0"));
    }
}
