//! The one mapping from a provider's `fetchConfig` to its release source, shared by the operator
//! (a provider object's spec) and the kubectl plugin (a provider object, or a source named on
//! the command line turned into the fetchConfig it stands for).
//!
//! The order is the specification's: `selector` (the air-gapped ConfigMaps in the provider's
//! namespace), else `oci`, else `url` (a GitLab generic package, else a GitHub release), else
//! the default repository of one of clusterctl's well-known providers. What differs between the
//! callers is given, not decided here: where variables come from (the provider Secret, or the
//! plugin's environment), the GitHub API and token configured for the whole operator, whether
//! plain-http URLs are accepted, and how the ConfigMaps are read.

use capi_operator_api::{FetchConfiguration, ProviderType};

use crate::{
    SourceError,
    any_source::AnySource,
    configmap::{ConfigMapReader, ConfigMapSource, selector_query},
    github::{GitHubSource, GitHubUrl},
    gitlab::{GitLabSource, GitLabUrl},
    http::{Credentials, HttpConfig, redact_url},
    oci::{OciConfig, OciCredentials, OciReference, OciSource},
    repository::{RepositorySource, RepositoryUrl},
};

/// Variable holding a GitHub token (the provider Secret's, or the plugin's environment).
pub const GITHUB_TOKEN: &str = "GITHUB_TOKEN";
/// Variable holding a GitLab access token (the provider Secret's, or the plugin's environment).
pub const GITLAB_ACCESS_TOKEN: &str = "GITLAB_ACCESS_TOKEN";
/// Variables holding basic credentials of an HTTP(S) release repository.
pub const HTTP_USERNAME: &str = "HTTP_USERNAME";
/// See [`HTTP_USERNAME`].
pub const HTTP_PASSWORD: &str = "HTTP_PASSWORD";
/// Variable holding a bearer token of an HTTP(S) release repository (used without a username).
pub const HTTP_TOKEN: &str = "HTTP_TOKEN";
/// Variable holding PEM certificates an HTTP(S) release repository's certificate chains to
/// (a private CA), trusted besides the public roots.
pub const HTTP_CA_BUNDLE: &str = "HTTP_CA_BUNDLE";

/// The components file a provider's release uses when its source does not name one: the
/// well-known provider's own, else the provider type's (`infrastructure-components.yaml`, ...).
pub fn default_components_file(t: ProviderType, name: &str) -> String {
    capi_release::defaults::components_file(t, name).to_string()
}

/// The provider whose source is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderRef<'a> {
    /// Its type.
    pub provider_type: ProviderType,
    /// Its name (`aws`, `cluster-api`, ...).
    pub name: &'a str,
    /// The namespace the air-gapped layout's ConfigMaps are read in (the provider's own).
    pub namespace: &'a str,
}

/// Settings of the caller, the same for every provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceSettings<'a> {
    /// GitHub API base URL used instead of the one a release URL's host implies (GitHub
    /// Enterprise, or a local GitHub-compatible server).
    pub github_api_url: Option<&'a str>,
    /// GitHub token used when the variables hold none (or an empty one). It is the caller's
    /// own, shared by every provider, so it is sent only to an API host the caller vouches for:
    /// api.github.com, the host of [`SourceSettings::github_api_url`], or one of
    /// [`SourceSettings::github_token_hosts`]; never to a host a provider's URL names.
    pub github_token: Option<&'a str>,
    /// Further API hosts (`host` or `host:port`, lower case) the caller's GitHub token may be
    /// sent to: GitHub Enterprise servers the operator's administrator trusts with it.
    pub github_token_hosts: &'a [String],
    /// Whether a plain `http://` release URL is accepted (the plugin's, for local servers);
    /// otherwise GitLab package URLs must use https.
    pub allow_http_urls: bool,
}

/// The source chosen for a provider and how to read it.
pub struct ProviderSource<R> {
    /// The source.
    pub source: AnySource<R>,
    /// The components file to fetch.
    pub components_file: String,
    /// The version the source itself names (a URL's tag, a tagged OCI reference), used when
    /// the provider names none.
    pub url_version: Option<String>,
    /// Identifies the remote source (no credentials) for the operator's release cache: a cached
    /// release is used only while the provider still fetches from the same place. `None` for
    /// the ConfigMaps in the cluster, which are not cached.
    pub cache_key: Option<String>,
    /// Where the releases come from, for messages (`GitHub repository owner/repo`, ...).
    pub description: String,
}

/// Why a fetchConfig names no usable source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchConfigError {
    /// No fetchConfig, and the provider is not one of clusterctl's well-known providers.
    #[error("{} {name:?} has no default repository; set spec.fetchConfig", .provider_type.kind())]
    NoDefaultRepository {
        /// The provider's type.
        provider_type: ProviderType,
        /// The provider's name.
        name: String,
    },
    /// `fetchConfig.oci` is not a usable OCI reference.
    #[error("fetchConfig.oci {reference:?}: {source}")]
    Oci {
        /// The reference as written.
        reference: String,
        /// Why it cannot be used.
        source: SourceError,
    },
    /// The release URL (`fetchConfig.url`, or the default repository's) cannot be used.
    #[error(transparent)]
    Url(SourceError),
    /// `fetchConfig.selector` names ConfigMaps and the caller has no cluster to read them from.
    #[error("fetchConfig.selector names ConfigMaps in the cluster, which cannot be read here")]
    NoConfigMapReader,
}

impl FetchConfigError {
    /// The source error underneath, for callers that report it in their own words.
    pub fn source_error(&self) -> Option<&SourceError> {
        match self {
            FetchConfigError::NoDefaultRepository { .. } | FetchConfigError::NoConfigMapReader => {
                None
            }
            FetchConfigError::Oci { source, .. } | FetchConfigError::Url(source) => Some(source),
        }
    }
}

/// Maps `provider`'s fetchConfig (`None`: the default repository) to its release source.
/// `variables` looks up the provider's variables (tokens: [`GITHUB_TOKEN`],
/// [`GITLAB_ACCESS_TOKEN`]; registry credentials: `OCI_*`); `configmaps` makes the reader of the
/// air-gapped layout from the namespace and the selector's label query, `None` where the caller
/// reads no cluster.
pub fn source_for_provider<R: ConfigMapReader>(
    provider: ProviderRef<'_>,
    fetch: Option<&FetchConfiguration>,
    variables: impl Fn(&str) -> Option<String>,
    settings: &SourceSettings<'_>,
    configmaps: impl FnOnce(&str, String) -> Option<R>,
) -> Result<ProviderSource<R>, FetchConfigError> {
    let ProviderRef {
        provider_type: t,
        name,
        namespace,
    } = provider;
    if let Some(selector) = fetch.and_then(|f| f.selector.as_ref()) {
        let query = selector_query(selector);
        let description = format!("ConfigMaps in {namespace} selected by {query}");
        let reader = configmaps(namespace, query).ok_or(FetchConfigError::NoConfigMapReader)?;
        return Ok(ProviderSource {
            description,
            source: AnySource::ConfigMaps(ConfigMapSource::new(reader)),
            components_file: default_components_file(t, name),
            url_version: None,
            cache_key: None,
        });
    }
    if let Some(oci) = fetch.and_then(|f| f.oci.as_deref()) {
        return oci_source(t, name, oci, &variables).map_err(|source| FetchConfigError::Oci {
            reference: oci.to_string(),
            source,
        });
    }
    let url = match fetch.and_then(|f| f.url.clone()) {
        Some(u) => u,
        None => {
            let d = capi_release::defaults::default_repository(t, name).ok_or_else(|| {
                FetchConfigError::NoDefaultRepository {
                    provider_type: t,
                    name: name.to_string(),
                }
            })?;
            format!(
                "https://github.com/{}/releases/latest/{}",
                d.repository, d.components_file
            )
        }
    };
    url_source(t, name, &url, &variables, settings).map_err(FetchConfigError::Url)
}

fn oci_source<R>(
    t: ProviderType,
    name: &str,
    oci: &str,
    variables: &impl Fn(&str) -> Option<String>,
) -> Result<ProviderSource<R>, SourceError> {
    let reference = OciReference::parse(oci)?;
    let credentials = OciCredentials::from_lookup(variables);
    let source = OciSource::for_provider(&reference, t, name, credentials, OciConfig::default())?;
    Ok(ProviderSource {
        source: AnySource::Oci(Box::new(source)),
        components_file: default_components_file(t, name),
        // A tagged reference names the release; otherwise the provider's version (or the
        // newest tag).
        url_version: reference.tag.clone(),
        cache_key: Some(format!("oci {}", reference.name())),
        description: format!("OCI repository {}", reference.name()),
    })
}

/// A GitLab package URL, else a GitHub release URL; a GitHub repository URL without a file
/// (`.../releases`) reads the provider's default components file.
fn url_source<R>(
    t: ProviderType,
    name: &str,
    url: &str,
    variables: &impl Fn(&str) -> Option<String>,
    settings: &SourceSettings<'_>,
) -> Result<ProviderSource<R>, SourceError> {
    // A private CA serves GitHub Enterprise and self-hosted GitLab as well as plain mirrors.
    let http = HttpConfig {
        allow_http: settings.allow_http_urls && url.starts_with("http://"),
        ca_bundle: variables(HTTP_CA_BUNDLE).filter(|v| !v.is_empty()),
        ..HttpConfig::default()
    };
    if GitLabUrl::looks_like(url) {
        let u = GitLabUrl::parse(url)?;
        let token = variables(GITLAB_ACCESS_TOKEN);
        return Ok(ProviderSource {
            components_file: u.file.clone(),
            url_version: Some(u.version.clone()),
            // Keys are written into the cluster: never with a URL's credentials.
            cache_key: Some(format!(
                "gitlab {}/{}/{}/{}",
                key_url(&u.base),
                u.project,
                u.package,
                u.file
            )),
            description: format!("GitLab package {}/{}", u.base, u.package),
            source: AnySource::GitLab(GitLabSource::new(&u, token, http)?),
        });
    }
    // github.com only serves releases the GitHub way: a malformed URL there gets GitHub's error.
    let on_github = reqwest::Url::parse(url).is_ok_and(|u| u.host_str() == Some("github.com"));
    if !on_github && !GitHubUrl::looks_like(url) {
        return repository_source(t, name, url, variables, http);
    }
    let u = GitHubUrl::parse_with_default_file(url, &default_components_file(t, name))?;
    let api = settings
        .github_api_url
        .map_or_else(|| u.default_api(), str::to_string);
    // The provider's own token wins over the caller's. It goes to the API its own URL names
    // (or the one the caller put in place of every GitHub API); the caller's token only to a
    // host the caller vouches for, so a provider cannot draw it to a server of its choosing.
    let token = variables(GITHUB_TOKEN)
        .filter(|t| !t.is_empty())
        .or_else(|| {
            settings
                .github_token
                .filter(|_| global_token_allowed(&api, settings))
                .map(str::to_string)
        });
    let source = GitHubSource::new(&api, &u.owner, &u.repo, token, http)?;
    Ok(ProviderSource {
        cache_key: Some(format!(
            "github {} {}/{} {}",
            key_url(&api),
            u.owner,
            u.repo,
            u.file
        )),
        description: format!("GitHub repository {}", source.repository()),
        source: AnySource::GitHub(source),
        components_file: u.file,
        url_version: u.version,
    })
}

/// `url` as a cache key holds it: unchanged (keys of existing entries stay valid) unless it
/// carries user info or a query, which are redacted since keys are written into the cluster.
fn key_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) if u.username().is_empty() && u.password().is_none() && u.query().is_none() => {
            url.to_string()
        }
        _ => redact_url(url),
    }
}

/// Host (with its port when not the scheme's default) of a URL, lower case.
fn host_of(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    let host = u.host_str()?.to_ascii_lowercase();
    Some(match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host,
    })
}

/// Whether the caller's own GitHub token may be sent to the API at `api`: api.github.com, the
/// caller's configured API, or a host the caller names.
fn global_token_allowed(api: &str, settings: &SourceSettings<'_>) -> bool {
    let Some(host) = host_of(api) else {
        return false;
    };
    host_of(crate::github::GITHUB_API).as_deref() == Some(host.as_str())
        || settings.github_api_url.and_then(host_of).as_deref() == Some(host.as_str())
        || settings
            .github_token_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(&host))
}

/// Any other URL: an HTTP(S) server in clusterctl's repository layout, with credentials and
/// a CA bundle from the provider's variables.
fn repository_source<R>(
    t: ProviderType,
    name: &str,
    url: &str,
    variables: &impl Fn(&str) -> Option<String>,
    http: HttpConfig,
) -> Result<ProviderSource<R>, SourceError> {
    let u = RepositoryUrl::parse(url, &default_components_file(t, name))?;
    let set = |k: &str| variables(k).filter(|v| !v.is_empty());
    let credentials = match (set(HTTP_USERNAME), set(HTTP_TOKEN)) {
        (Some(user), _) => Credentials::Basic {
            user,
            password: set(HTTP_PASSWORD).unwrap_or_default(),
        },
        (None, Some(token)) => Credentials::Bearer(token),
        (None, None) => Credentials::None,
    };
    let source = RepositorySource::new(&u.base, credentials, http)?;
    Ok(ProviderSource {
        cache_key: Some(format!("http {} {}", key_url(&u.base), u.file)),
        description: format!("release repository {}", redact_url(&u.base)),
        source: AnySource::Repository(source),
        components_file: u.file,
        url_version: u.version,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;
    use crate::configmap::ConfigMapData;

    /// The reader the tests' ConfigMap sources get: it holds nothing.
    struct Empty;

    impl ConfigMapReader for Empty {
        async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
            Ok(Vec::new())
        }
    }

    const AWS: ProviderRef<'static> = ProviderRef {
        provider_type: ProviderType::Infrastructure,
        name: "aws",
        namespace: "ns",
    };

    fn choose(
        p: ProviderRef<'_>,
        fetch: Option<&FetchConfiguration>,
        vars: &[(&str, &str)],
        settings: &SourceSettings<'_>,
    ) -> Result<ProviderSource<Empty>, FetchConfigError> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        source_for_provider(
            p,
            fetch,
            |k| vars.get(k).cloned(),
            settings,
            |_, _| Some(Empty),
        )
    }

    /// `fetch` for aws, with no variables and the default settings.
    fn choose_plain(fetch: &FetchConfiguration) -> Result<ProviderSource<Empty>, FetchConfigError> {
        choose(AWS, Some(fetch), &[], &SourceSettings::default())
    }

    /// What a chosen source says: kind, components file, version, cache key, description.
    fn summary<R>(c: &ProviderSource<R>) -> (&'static str, &str, Option<&str>, Option<&str>, &str) {
        (
            c.source.kind(),
            &c.components_file,
            c.url_version.as_deref(),
            c.cache_key.as_deref(),
            &c.description,
        )
    }

    fn url(u: &str) -> FetchConfiguration {
        FetchConfiguration {
            url: Some(u.into()),
            ..FetchConfiguration::default()
        }
    }

    fn oci(r: &str) -> FetchConfiguration {
        FetchConfiguration {
            oci: Some(r.into()),
            ..FetchConfiguration::default()
        }
    }

    #[test]
    fn the_selector_wins_and_reads_the_providers_namespace() {
        let fetch = FetchConfiguration {
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("a".into(), "b".into())])),
                match_expressions: None,
            }),
            ..oci("registry.example/x")
        };
        let mut made = None;
        let c = source_for_provider(
            AWS,
            Some(&fetch),
            |_| None,
            &SourceSettings::default(),
            |ns, q| {
                made = Some((ns.to_string(), q));
                Some(Empty)
            },
        )
        .unwrap();
        assert_eq!(made, Some(("ns".to_string(), "a=b".to_string())));
        let components = "infrastructure-components.yaml";
        let description = "ConfigMaps in ns selected by a=b";
        assert_eq!(
            summary(&c),
            ("configmap", components, None, None, description)
        );

        // A caller that reads no cluster says so.
        let e = source_for_provider::<Empty>(
            AWS,
            Some(&fetch),
            |_| None,
            &SourceSettings::default(),
            |_, _| None,
        )
        .err()
        .unwrap();
        assert_eq!(e, FetchConfigError::NoConfigMapReader);
        assert_eq!(e.source_error(), None);
    }

    #[test]
    fn oci_references_and_their_errors() {
        let c = choose(
            AWS,
            Some(&oci("registry.example/capi/aws:v1.2.3")),
            &[("OCI_USERNAME", "u"), ("OCI_PASSWORD", "p")],
            &SourceSettings::default(),
        )
        .unwrap();
        let (components, key) = (
            "infrastructure-components.yaml",
            "oci registry.example/capi/aws",
        );
        assert_eq!(
            summary(&c),
            (
                "oci",
                components,
                Some("v1.2.3"),
                Some(key),
                "OCI repository registry.example/capi/aws"
            )
        );

        let e = choose_plain(&oci("not a reference")).err().unwrap();
        let prefix = "fetchConfig.oci \"not a reference\": ";
        assert!(e.to_string().starts_with(prefix), "{e}");
        assert!(matches!(e.source_error(), Some(SourceError::Invalid(_))));
    }

    #[test]
    fn github_urls_with_and_without_a_file() {
        let c = choose_plain(&url(
            "https://github.com/acme/widget/releases/v1.0.0/widget.yaml",
        ))
        .unwrap();
        let key = "github https://api.github.com acme/widget widget.yaml";
        let description = "GitHub repository acme/widget";
        assert_eq!(
            summary(&c),
            (
                "github",
                "widget.yaml",
                Some("v1.0.0"),
                Some(key),
                description
            )
        );

        // A repository URL reads the default file; an API override shows in the cache key.
        let settings = SourceSettings {
            github_api_url: Some("https://ghe.example/api/v3"),
            ..SourceSettings::default()
        };
        let releases = url("https://github.com/acme/widget/releases");
        let c = choose(AWS, Some(&releases), &[], &settings).unwrap();
        let components = "infrastructure-components.yaml";
        let key = format!("github https://ghe.example/api/v3 acme/widget {components}");
        assert_eq!(
            summary(&c),
            ("github", components, None, Some(key.as_str()), description)
        );

        // Anything that is not a GitHub or GitLab release URL is a release repository.
        let c = choose_plain(&url("https://example.com/not/a/release")).unwrap();
        assert_eq!(
            summary(&c),
            (
                "http",
                "infrastructure-components.yaml",
                None,
                Some("http https://example.com/not/a/release infrastructure-components.yaml"),
                "release repository https://example.com/not/a/release"
            )
        );
        let e = choose_plain(&url("https://example.com/core-components.yaml"))
            .err()
            .unwrap();
        let FetchConfigError::Url(SourceError::Invalid(m)) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(e.to_string(), *m);
    }

    /// Cache keys are written into the cluster (the cache entries' annotation): a URL's user
    /// info and token-like query values never reach them.
    #[test]
    fn cache_keys_keep_no_credentials() {
        let urls = [
            "https://me:pa55word@example.com/repo/releases-tree",
            "https://me:pa55word@gitlab.example/api/v4/projects/g%2Fp/packages/generic/capa/v2.0.0/components.yaml",
        ];
        for u in urls {
            let c = choose_plain(&url(u)).unwrap();
            let key = c.cache_key.unwrap();
            assert!(!key.contains("pa55word"), "{u}: {key}");
        }
        let settings = SourceSettings {
            github_api_url: Some("https://me:pa55word@ghe.example/api/v3"),
            ..SourceSettings::default()
        };
        let gh = url("https://github.com/acme/widget/releases");
        let key = choose(AWS, Some(&gh), &[], &settings)
            .unwrap()
            .cache_key
            .unwrap();
        assert!(!key.contains("pa55word"), "{key}");
    }

    /// The operator-wide token goes to api.github.com, the configured API and the named
    /// hosts; a provider's own token to the API its URL names.
    #[test]
    fn the_operator_token_only_goes_where_the_operator_says() {
        let hosts = vec!["ghe.trusted:8443".to_string()];
        let settings = SourceSettings {
            github_token: Some("operator-token"),
            github_token_hosts: &hosts,
            ..SourceSettings::default()
        };
        let allowed = |api: &str, s: &SourceSettings<'_>| global_token_allowed(api, s);
        assert!(allowed("https://api.github.com", &settings));
        assert!(allowed("https://GHE.trusted:8443/api/v3", &settings));
        assert!(!allowed("https://ghe.trusted/api/v3", &settings));
        assert!(!allowed("https://evil.example/api/v3", &settings));
        assert!(!allowed("not a url", &settings));
        let configured = SourceSettings {
            github_api_url: Some("https://ghe.corp/api/v3"),
            ..settings
        };
        assert!(allowed("https://ghe.corp/api/v3", &configured));
    }

    #[test]
    fn gitlab_urls_and_plain_http() {
        let u = "https://gitlab.example/api/v4/projects/g%2Fp/packages/generic/capa/v2.0.0/components.yaml";
        let c = choose_plain(&url(u)).unwrap();
        let key = "gitlab https://gitlab.example/g%2Fp/capa/components.yaml";
        let description = "GitLab package https://gitlab.example/capa";
        assert_eq!(
            summary(&c),
            (
                "gitlab",
                "components.yaml",
                Some("v2.0.0"),
                Some(key),
                description
            )
        );

        let plain = url(&u.replacen("https://", "http://", 1));
        let refused = choose_plain(&plain).err().unwrap();
        assert!(refused.to_string().contains("must use https"), "{refused}");
        let allowed = SourceSettings {
            allow_http_urls: true,
            ..SourceSettings::default()
        };
        assert!(choose(AWS, Some(&plain), &[], &allowed).is_ok());
    }

    #[test]
    fn the_default_repository_of_well_known_providers() {
        let core = ProviderRef {
            provider_type: ProviderType::Core,
            name: "cluster-api",
            namespace: "capi-system",
        };
        let settings = SourceSettings {
            github_token: Some("operator-token"),
            ..SourceSettings::default()
        };
        let components = "core-components.yaml";
        let key = format!("github https://api.github.com kubernetes-sigs/cluster-api {components}");
        let description = "GitHub repository kubernetes-sigs/cluster-api";
        for fetch in [None, Some(FetchConfiguration::default())] {
            let c = choose(core, fetch.as_ref(), &[("GITHUB_TOKEN", "")], &settings).unwrap();
            assert_eq!(
                summary(&c),
                ("github", components, None, Some(key.as_str()), description)
            );
        }
        let homegrown = ProviderRef {
            name: "homegrown",
            ..AWS
        };
        let e = choose(homegrown, None, &[], &SourceSettings::default())
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "InfrastructureProvider \"homegrown\" has no default repository; set spec.fetchConfig"
        );
        assert_eq!(e.source_error(), None);
    }
}
