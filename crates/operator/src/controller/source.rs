//! Choosing a provider's release source from its spec (through the mapping shared with the
//! plugin, [`capi_release_sources::fetch_config`]) and what a provider reads besides its
//! release. The release cache itself (fetched releases kept in the cluster so a restart does not
//! fetch again) is [`capi_cluster_io::release_cache`], re-exported here.

use std::collections::BTreeMap;

use capi_operator_api::AnyProvider;
use capi_release_sources::fetch_config::{
    ProviderRef, ProviderSource, SourceSettings, source_for_provider,
};

use super::labels;

pub use capi_cluster_io::configmaps::{KubeConfigMaps, RELEASE_CACHE_LABEL, kube_to_source};
pub use capi_cluster_io::release_cache::{
    Lookup, RELEASE_SOURCE_ANNOTATION, ReleaseCache, cache_name, data_of, is_go_release,
    release_digest,
};

/// The versions whose digests (and cache entries) are kept: the installed one, the one being
/// installed, and the newest recorded one older than the installed one (the version installed
/// before, as downgrades are refused).
pub fn kept_versions<'a>(
    recorded: &'a BTreeMap<String, String>,
    installed: Option<&'a str>,
    current: &'a str,
) -> Vec<&'a str> {
    let mut keep = vec![current];
    keep.extend(installed.filter(|i| *i != current));
    let semver = |v: &str| semver::Version::parse(v.trim_start_matches('v')).ok();
    let base = installed.and_then(semver);
    let previous = recorded
        .keys()
        .map(String::as_str)
        .filter(|v| !keep.contains(v))
        .filter_map(|v| semver(v).map(|s| (s, v)))
        .filter(|(s, _)| base.as_ref().is_some_and(|b| s < b))
        .max()
        .map(|(_, v)| v);
    keep.extend(previous);
    keep
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
    client: &kube::Client,
    opts: &super::options::Options,
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
            github_api_url: opts.github_api_url.as_deref(),
            github_token: opts.github_token.as_deref(),
            github_token_hosts: &opts.github_token_hosts,
            allow_http_urls: false,
        },
        |namespace, query| Some(KubeConfigMaps::new(client.clone(), namespace, query)),
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

    /// The installed version, the one before it and the one being installed are kept.
    #[test]
    fn kept_versions_are_installed_previous_and_current() {
        let recorded: BTreeMap<String, String> = ["v0.9.0", "v1.0.0", "v1.0.1", "v1.0.2"]
            .iter()
            .map(|v| (v.to_string(), String::new()))
            .collect();
        let mut kept = kept_versions(&recorded, Some("v1.0.1"), "v1.0.2");
        kept.sort_unstable();
        assert_eq!(kept, ["v1.0.0", "v1.0.1", "v1.0.2"]);
        let mut kept = kept_versions(&recorded, Some("v1.0.2"), "v1.0.2");
        kept.sort_unstable();
        assert_eq!(kept, ["v1.0.1", "v1.0.2"]);
        assert_eq!(kept_versions(&recorded, None, "v1.0.0"), ["v1.0.0"]);
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
