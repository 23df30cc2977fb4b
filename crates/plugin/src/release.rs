//! Where a provider's releases come from, for the plugin's own fetches: a URL (GitHub or
//! GitLab), an OCI reference, a local directory in clusterctl's layout, the ConfigMaps of the
//! air-gapped layout in the cluster, or the default repository of a well-known provider. The
//! engine (capi-components) does the fetching and the reading.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context, bail};
use capi_components::{
    airgap, defaults, pipeline,
    source::{
        configmap::{ConfigMapSource, selector_query},
        fetch_release,
        github::{GitHubSource, GitHubUrl},
        gitlab::{GitLabSource, GitLabUrl},
        http::HttpConfig,
        local::LocalSource,
        oci::{OciConfig, OciCredentials, OciReference, OciSource},
    },
};
use capi_operator_api::{AnyProvider, FetchConfiguration, ProviderType};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, api::ListParams};
use serde_json::Value;

use crate::providers::ProviderArg;

pub use capi_components::source::Release;

/// Flags choosing where releases come from when a provider names no source.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SourceFlags {
    /// Read releases from this directory, in clusterctl's local-repository layout
    /// (DIR/<label>/<version>/<file>, label as in cluster.x-k8s.io/provider).
    #[arg(long, value_name = "DIR")]
    pub repository: Option<PathBuf>,
    /// GitHub API base URL for GitHub sources (GitHub Enterprise, or a local
    /// GitHub-compatible server). GITHUB_TOKEN is sent when set.
    #[arg(long, env = "CAPI_PROVIDERS_GITHUB_API_URL", value_name = "URL")]
    pub github_api_url: Option<String>,
}

pub use capi_kube_configmaps::KubeConfigMaps;

/// A release source of any kind, ConfigMaps read through the cluster.
pub type AnySource = capi_components::source::any::AnySource<KubeConfigMaps>;

/// What a provider object's fetchConfig should say for a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A local directory: the operator cannot read it, so the releases are preloaded into
    /// ConfigMaps and selected.
    Local(PathBuf),
    /// Already in ConfigMaps in the cluster.
    ConfigMaps,
    /// A GitHub or GitLab release URL (fetchConfig.url).
    Url(String),
    /// An OCI reference (fetchConfig.oci).
    Oci(String),
    /// The provider's default repository (no fetchConfig).
    Default,
}

/// A located source.
pub struct Located {
    /// The source.
    pub source: AnySource,
    /// The components file of its releases.
    pub components_file: String,
    /// The version the source itself names (a URL's tag), if any.
    pub url_version: Option<String>,
    /// Where it is, for fetchConfig.
    pub origin: Origin,
    /// Human description.
    pub description: String,
}

impl Located {
    /// Fetches `version`, the source's own version, or the latest release.
    pub async fn fetch(&self, version: Option<&str>) -> anyhow::Result<Release> {
        let v = version.or(self.url_version.as_deref());
        fetch_release(&self.source, v, &self.components_file)
            .await
            .with_context(|| {
                format!(
                    "fetching {} from {}",
                    v.unwrap_or("the latest release"),
                    self.description
                )
            })
    }

    /// The fetchConfig a provider object using this source needs (`None` for the default
    /// repository).
    pub fn fetch_config(&self, t: ProviderType, name: &str) -> Option<FetchConfiguration> {
        match &self.origin {
            Origin::Default => None,
            Origin::Url(u) => Some(FetchConfiguration {
                url: Some(u.clone()),
                ..FetchConfiguration::default()
            }),
            Origin::Oci(r) => Some(FetchConfiguration {
                oci: Some(r.clone()),
                ..FetchConfiguration::default()
            }),
            Origin::Local(_) | Origin::ConfigMaps => Some(FetchConfiguration {
                selector: Some(airgap::selector(t, name)),
                ..FetchConfiguration::default()
            }),
        }
    }
}

/// The components file of a provider's releases when the source does not name one.
pub fn default_components_file(t: ProviderType, name: &str) -> String {
    defaults::components_file(t, name).to_string()
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// A GitHub or GitLab release URL; a GitHub repository URL without a file (`.../releases`)
/// reads `default_file`.
fn url_source(
    url: &str,
    default_file: &str,
    flags: &SourceFlags,
    origin: Origin,
) -> anyhow::Result<Located> {
    let http = HttpConfig {
        allow_http: url.starts_with("http://"),
        ..HttpConfig::default()
    };
    if GitLabUrl::looks_like(url) {
        let u = GitLabUrl::parse(url)?;
        return Ok(Located {
            components_file: u.file.clone(),
            url_version: Some(u.version.clone()),
            description: format!("GitLab package {}/{}", u.base, u.package),
            source: AnySource::GitLab(GitLabSource::new(&u, env("GITLAB_ACCESS_TOKEN"), http)?),
            origin,
        });
    }
    let u = GitHubUrl::parse_with_default_file(url, default_file)?;
    let source = GitHubSource::from_url(
        &u,
        flags.github_api_url.as_deref(),
        env("GITHUB_TOKEN"),
        http,
    )?;
    Ok(Located {
        description: format!("GitHub repository {}", source.repository()),
        source: AnySource::GitHub(source),
        components_file: u.file,
        url_version: u.version,
        origin,
    })
}

fn oci_source(t: ProviderType, name: &str, reference: &str) -> anyhow::Result<Located> {
    let r = OciReference::parse(reference)?;
    let credentials = OciCredentials::from_lookup(env);
    let source = OciSource::for_provider(&r, t, name, credentials, OciConfig::default())?;
    Ok(Located {
        description: format!("OCI repository {}", r.name()),
        source: AnySource::Oci(Box::new(source)),
        components_file: default_components_file(t, name),
        url_version: r.tag.clone(),
        origin: Origin::Oci(reference.trim_start_matches("oci://").to_string()),
    })
}

fn local_source(t: ProviderType, name: &str, dir: PathBuf) -> anyhow::Result<Located> {
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let label = t.manifest_label(name);
    Ok(Located {
        description: format!("{}/{label}", dir.display()),
        source: AnySource::Local(LocalSource::new(&dir, &label)),
        components_file: default_components_file(t, name),
        url_version: None,
        origin: Origin::Local(dir),
    })
}

fn default_source(t: ProviderType, name: &str, flags: &SourceFlags) -> anyhow::Result<Located> {
    let Some(d) = defaults::default_repository(t, name) else {
        bail!(
            "{} {name:?} is not one of clusterctl's well-known providers: give its source (name@URL, name@oci://REFERENCE or name@DIR) or --repository DIR",
            t.kind()
        );
    };
    let url = format!(
        "https://github.com/{}/releases/latest/{}",
        d.repository, d.components_file
    );
    url_source(&url, d.components_file, flags, Origin::Default)
}

/// Reads a source string: a release URL (GitHub or GitLab), `oci://REFERENCE`
/// (`oci+http://REFERENCE` for a registry over plain HTTP), or a directory.
pub fn locate_source(
    t: ProviderType,
    name: &str,
    source: &str,
    flags: &SourceFlags,
) -> anyhow::Result<Located> {
    if source.starts_with("https://") || source.starts_with("http://") {
        return url_source(
            source,
            &default_components_file(t, name),
            flags,
            Origin::Url(source.to_string()),
        );
    }
    if source.starts_with("oci://") {
        return oci_source(t, name, source);
    }
    if let Some(rest) = source.strip_prefix("oci+http://") {
        // A registry spoken to over plain HTTP (a local mirror, tests).
        return oci_source(t, name, &format!("http://{rest}"));
    }
    local_source(t, name, PathBuf::from(source))
}

/// The source of a provider named on the command line: its own, else `--repository`, else
/// its default repository.
pub fn locate_arg(arg: &ProviderArg, flags: &SourceFlags) -> anyhow::Result<Located> {
    let (t, name) = (arg.provider_type, arg.name.as_str());
    match (&arg.source, &flags.repository) {
        (Some(s), _) => locate_source(t, name, s, flags),
        (None, Some(dir)) => local_source(t, name, dir.clone()),
        (None, None) => default_source(t, name, flags),
    }
}

/// The preloaded ConfigMaps of a provider in `namespace`.
pub fn locate_configmaps(
    client: &Client,
    t: ProviderType,
    name: &str,
    namespace: &str,
    fetch: &FetchConfiguration,
) -> Located {
    let query = fetch
        .selector
        .as_ref()
        .map(selector_query)
        .unwrap_or_default();
    Located {
        description: format!("ConfigMaps in {namespace} selected by {query}"),
        source: AnySource::ConfigMaps(ConfigMapSource::new(KubeConfigMaps::new(
            client.clone(),
            namespace,
            query,
        ))),
        components_file: default_components_file(t, name),
        url_version: None,
        origin: Origin::ConfigMaps,
    }
}

/// The source a provider object in the cluster reads (its fetchConfig), unless
/// `--repository` overrides it.
pub fn locate_provider(
    client: &Client,
    p: &AnyProvider,
    flags: &SourceFlags,
) -> anyhow::Result<Located> {
    let (t, name) = (p.provider_type, p.name());
    if let Some(dir) = &flags.repository {
        return local_source(t, name, dir.clone());
    }
    let Some(fetch) = &p.spec.fetch_config else {
        return default_source(t, name, flags);
    };
    if fetch.selector.is_some() {
        return Ok(locate_configmaps(client, t, name, p.namespace(), fetch));
    }
    if let Some(oci) = &fetch.oci {
        return oci_source(t, name, oci);
    }
    if let Some(url) = &fetch.url {
        return url_source(
            url,
            &default_components_file(t, name),
            flags,
            Origin::Url(url.clone()),
        );
    }
    default_source(t, name, flags)
}

/// The namespace holding the preloaded releases of a provider, looked up across the cluster.
pub async fn find_preloaded_namespace(
    client: &Client,
    t: ProviderType,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let query: Vec<String> = airgap::labels(t, name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let api: Api<ConfigMap> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default().labels(&query.join(",")))
        .await
        .context("looking for preloaded release ConfigMaps")?;
    let mut namespaces: Vec<String> = list
        .items
        .iter()
        .filter_map(|cm| cm.metadata.namespace.clone())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    match namespaces.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        many => bail!(
            "preloaded releases of {} {name} are in several namespaces ({}); name the namespace (name:namespace)",
            t.kind(),
            many.join(", ")
        ),
    }
}

/// A release's variables: (name, default) with `None` for required ones, in the release's order.
pub fn variables(release: &Release) -> anyhow::Result<Vec<(String, Option<String>)>> {
    Ok(capi_envsubst::variables(&release.components)
        .with_context(|| format!("reading the variables of {}", release.version))?
        .into_iter()
        .map(|v| (v.name, v.default))
        .collect())
}

/// The release's objects as published, read the way clusterctl's `generate provider
/// --describe` reads them: every `${...}` expression stays as written, so a release whose text
/// only becomes valid YAML once substituted (`image: repo:${TAG}`) is still read. For reading
/// CRDs, labels and images, never for installing.
pub fn objects_as_published(release: &Release) -> anyhow::Result<Vec<Value>> {
    objects_with(release, &BTreeMap::new(), false)
}

/// The release's objects with the values `vars` gives expanded, and, when `defaults`, the
/// expressions of variables `vars` does not set expanded to their defaults; the others stay as
/// written. For reading namespaces and images, never for installing.
pub fn objects_with(
    release: &Release,
    vars: &BTreeMap<String, String>,
    defaults: bool,
) -> anyhow::Result<Vec<Value>> {
    let expand = |expr: &str| {
        let v = capi_envsubst::variables(expr).ok()?.into_iter().next()?;
        let known = vars.contains_key(&v.name) || (defaults && v.default.is_some());
        known
            .then(|| capi_envsubst::eval(expr, |k| vars.get(k).cloned()).ok())
            .flatten()
    };
    capi_components::unresolved::parse_objects_unresolved(&release.components, expand)
        .with_context(|| format!("reading the components of {}", release.version))
}

/// The release's objects substituted for real, as the operator installs them, with `vars` (the
/// required variables must all be set).
pub fn objects_substituted(
    release: &Release,
    vars: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<Value>> {
    let text = pipeline::substitute(&release.components, |k| vars.get(k).cloned())?;
    Ok(pipeline::parse_objects(&text)?)
}

/// The namespace a provider goes to: the one named, else the release's own Namespace, else
/// `<type>-<name>-system`.
pub fn target_namespace(arg: &ProviderArg, objects: &[Value]) -> anyhow::Result<String> {
    if let Some(ns) = &arg.namespace {
        return Ok(ns.clone());
    }
    Ok(pipeline::inspect_target_namespace(objects)?
        .unwrap_or_else(|| format!("{}-{}-system", arg.provider_type.word(), arg.name)))
}
