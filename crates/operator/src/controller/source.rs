//! Choosing a provider's release source from its spec (through the mapping shared with the
//! plugin, [`capi_release_sources::fetch_config`]), reading ConfigMaps for the air-gapped layout,
//! and caching fetched releases in the cluster so a restart does not fetch again.

use std::collections::BTreeMap;

use capi_operator_api::{AnyProvider, CONFIGMAP_VERSION_LABEL, v1alpha2};
use capi_release_sources::{
    ReleaseSource, SourceError,
    configmap::{ConfigMapData, ConfigMapReader, ConfigMapSource},
    fetch_config::{ProviderRef, ProviderSource, SourceSettings, source_for_provider},
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use super::labels;

pub use capi_kube_configmaps::{KubeConfigMaps, RELEASE_CACHE_LABEL, kube_to_source};

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
pub struct ReleaseCache {
    api: Api<ConfigMap>,
}

/// A fetched release, from the cache or the source.
pub type Release = capi_release_sources::Release;

impl ReleaseCache {
    /// The cache in `namespace`.
    pub fn new(client: Client, namespace: &str) -> ReleaseCache {
        ReleaseCache {
            api: Api::namespaced(client, namespace),
        }
    }

    /// The cached release of `p` at `version` fetched from the source `key`, if any.
    pub async fn get(
        &self,
        p: &AnyProvider,
        version: &str,
        key: &str,
    ) -> Result<Option<Release>, SourceError> {
        let name = cache_name(p, version);
        let cm = match self.api.get_opt(&name).await {
            Ok(Some(cm)) => cm,
            Ok(None) => return Ok(None),
            Err(e) => return Err(kube_to_source("the release cache", e)),
        };
        let cached_key = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RELEASE_SOURCE_ANNOTATION));
        if cached_key.map(String::as_str) != Some(key) {
            // fetchConfig now points elsewhere: the same version from another source may differ.
            return Ok(None);
        }
        decode(&cm, version).await
    }

    /// The release cluster-api-operator downloaded for `p` at `version` (its ConfigMap
    /// `{type}-{name}-{version}` carrying its labels, compressed or not), taken into this cache
    /// under the source `key`: a handed-over installation fetches nothing, and the entry no
    /// longer depends on the other operator's objects (its owner reference pointed at them).
    /// `None` when there is no such ConfigMap or it is not a release of that provider.
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
        if !is_go_release(&cm, p, version) {
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
    /// it goes with it), replacing an entry from another source.
    pub async fn put(
        &self,
        p: &AnyProvider,
        release: &Release,
        key: &str,
    ) -> Result<(), SourceError> {
        let name = cache_name(p, &release.version);
        let mut labels = BTreeMap::new();
        labels.insert(RELEASE_CACHE_LABEL.to_string(), "true".to_string());
        labels.insert(CONFIGMAP_VERSION_LABEL.to_string(), release.version.clone());
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
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(labels),
                annotations: Some(annotations),
                owner_references: Some(vec![super::owner_reference(p)]),
                ..ObjectMeta::default()
            },
            data: Some(data),
            binary_data: (!binary.is_empty()).then_some(binary),
            ..ConfigMap::default()
        };
        match self.api.create(&PostParams::default(), &cm).await {
            Ok(_) => Ok(()),
            // An entry from another source (or a damaged one): replaced unconditionally.
            Err(kube::Error::Api(s)) if s.code == 409 => self
                .api
                .replace(
                    cm.metadata.name.as_deref().unwrap_or_default(),
                    &PostParams::default(),
                    &cm,
                )
                .await
                .map(|_| ())
                .map_err(|e| kube_to_source("the release cache", e)),
            Err(e) => Err(kube_to_source("the release cache", e)),
        }
    }
}

/// Whether a ConfigMap with `labels` in `namespace` is one `p` reads (its selector or its
/// additionalManifests).
pub fn reads_configmap(
    p: &AnyProvider,
    namespace: &str,
    name: &str,
    cm_labels: &BTreeMap<String, String>,
) -> bool {
    if let Some(sel) = p
        .spec
        .fetch_config
        .as_ref()
        .and_then(|f| f.selector.as_ref())
        && p.namespace() == namespace
        && !cm_labels.contains_key(RELEASE_CACHE_LABEL)
        && labels::matches(sel, cm_labels)
    {
        return true;
    }
    p.spec.additional_manifests.as_ref().is_some_and(|r| {
        r.name == name && r.namespace.as_deref().unwrap_or(p.namespace()) == namespace
    })
}

/// What a provider reads besides its release: Secrets or ConfigMaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Input {
    /// The provider Secret (variables, credentials).
    Secret,
    /// Air-gapped release ConfigMaps and additionalManifests.
    ConfigMap,
}

/// The namespaces whose Secrets or ConfigMaps `p` reads: every object [`reads_secret`] or
/// [`reads_configmap`] accepts lies in one of them, so watching only these loses no change.
pub fn input_namespaces(p: &AnyProvider) -> Vec<(Input, String)> {
    let mut out = Vec::new();
    if p.spec.secret_name.is_some() {
        let ns = p.spec.secret_namespace.as_deref().unwrap_or(p.namespace());
        out.push((Input::Secret, ns.to_string()));
    }
    if p.spec
        .fetch_config
        .as_ref()
        .is_some_and(|f| f.selector.is_some())
    {
        out.push((Input::ConfigMap, p.namespace().to_string()));
    }
    if let Some(r) = &p.spec.additional_manifests {
        let ns = r.namespace.as_deref().unwrap_or(p.namespace());
        out.push((Input::ConfigMap, ns.to_string()));
    }
    out
}

/// Whether `p` reads the Secret `namespace/name` for its variables.
pub fn reads_secret(p: &AnyProvider, namespace: &str, name: &str) -> bool {
    p.spec.secret_name.as_deref() == Some(name)
        && p.spec.secret_namespace.as_deref().unwrap_or(p.namespace()) == namespace
}

/// The source chosen for a provider and how to read it (its cache key identifies the remote
/// source for the release cache; `None` for the ConfigMaps in the cluster, which are not cached).
pub type Chosen = ProviderSource<KubeConfigMaps>;

/// Chooses the source of `p` from its fetchConfig (or the default repository of a well-known
/// provider). `vars` are the provider Secret's data (tokens, registry credentials); the
/// operator's own GitHub API URL and token apply when the provider names none.
pub fn choose(
    ctx: &super::Ctx,
    p: &AnyProvider,
    vars: &BTreeMap<String, String>,
) -> Result<Chosen, String> {
    source_for_provider(
        ProviderRef {
            provider_type: p.provider_type,
            name: p.name(),
            namespace: p.namespace(),
        },
        p.spec.fetch_config.as_ref(),
        |k| vars.get(k).cloned(),
        &SourceSettings {
            github_api_url: ctx.opts.github_api_url.as_deref(),
            github_token: ctx.opts.github_token.as_deref(),
            github_token_hosts: &ctx.opts.github_token_hosts,
            allow_http_urls: false,
        },
        |namespace, query| Some(KubeConfigMaps::new(ctx.client.clone(), namespace, query)),
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{ConfigMapReference, ProviderSpec, ProviderType};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta as Meta;

    fn provider(t: ProviderType, ns: &str, name: &str) -> AnyProvider {
        AnyProvider {
            api: Default::default(),
            provider_type: t,
            metadata: Meta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: ProviderSpec::default(),
            status: None,
        }
    }

    #[test]
    fn cache_names_are_dns_safe() {
        let p = provider(ProviderType::ControlPlane, "ns", "kubeadm");
        assert_eq!(cache_name(&p, "v1.12.0"), "control-plane-kubeadm-v1.12.0");
        assert_eq!(
            cache_name(&p, "v1.12.0+Build"),
            "control-plane-kubeadm-v1.12.0-build"
        );
    }

    #[test]
    fn secret_and_configmap_references() {
        let mut p = provider(ProviderType::Infrastructure, "capa", "aws");
        p.spec.secret_name = Some("creds".into());
        assert!(reads_secret(&p, "capa", "creds"));
        assert!(!reads_secret(&p, "other", "creds"));
        p.spec.secret_namespace = Some("other".into());
        assert!(reads_secret(&p, "other", "creds"));
        p.spec.additional_manifests = Some(ConfigMapReference {
            name: "extra".into(),
            namespace: None,
        });
        assert!(reads_configmap(&p, "capa", "extra", &BTreeMap::new()));
        assert!(!reads_configmap(&p, "capa", "nope", &BTreeMap::new()));
    }

    #[test]
    fn releases_of_cluster_api_operator_are_recognized_by_their_labels() {
        let p = provider(ProviderType::RuntimeExtension, "ns", "hooks");
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
        let other = provider(ProviderType::RuntimeExtension, "ns", "other");
        assert!(!is_go_release(&cm(labels.clone()), &other, "v1.0.0"));
        let mut unmarked = labels;
        unmarked.remove(v1alpha2::OPERATOR_MANAGED_LABEL);
        assert!(!is_go_release(&cm(unmarked), &p, "v1.0.0"));
    }

    /// Every Secret and ConfigMap a provider reads lies in a namespace [`input_namespaces`]
    /// names: the narrowed watches see every change that matters.
    #[test]
    fn input_namespaces_cover_every_read() {
        let selector = capi_operator_api::FetchConfiguration {
            selector: Some(Default::default()),
            ..Default::default()
        };
        let mut cases = Vec::new();
        for secret_ns in [None, Some("creds-ns")] {
            for manifests_ns in [None, Some("extra-ns")] {
                for with_selector in [false, true] {
                    let mut p = provider(ProviderType::Infrastructure, "capa", "aws");
                    p.spec.secret_name = Some("creds".into());
                    p.spec.secret_namespace = secret_ns.map(Into::into);
                    p.spec.additional_manifests = Some(ConfigMapReference {
                        name: "extra".into(),
                        namespace: manifests_ns.map(Into::into),
                    });
                    p.spec.fetch_config = with_selector.then(|| selector.clone());
                    cases.push(p);
                }
            }
        }
        let everywhere = ["capa", "creds-ns", "extra-ns", "elsewhere"];
        for p in &cases {
            let watched = input_namespaces(p);
            for ns in everywhere {
                if reads_secret(p, ns, "creds") {
                    assert!(watched.contains(&(Input::Secret, ns.into())), "{ns}: {p:?}");
                }
                for name in ["extra", "release"] {
                    if reads_configmap(p, ns, name, &BTreeMap::new()) {
                        assert!(
                            watched.contains(&(Input::ConfigMap, ns.into())),
                            "{ns}: {p:?}"
                        );
                    }
                }
            }
            assert!(!watched.iter().any(|(_, ns)| ns == "elsewhere"));
        }
        // A provider that reads nothing besides its release is watched nowhere.
        assert!(input_namespaces(&provider(ProviderType::Core, "capi", "cluster-api")).is_empty());
    }
}
