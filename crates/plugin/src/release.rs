//! Where a provider's releases come from, for the plugin's own fetches: a URL (GitHub or
//! GitLab), an OCI reference, a local directory in clusterctl's layout, the ConfigMaps of the
//! air-gapped layout in the cluster, or the default repository of a well-known provider. All but
//! the local directory are chosen by the mapping the operator uses too
//! ([`capi_release_sources::fetch_config`]); capi-release-sources does the fetching and
//! capi-components the reading.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context, bail};
use capi_components::pipeline;
use capi_operator_api::{AnyProvider, FetchConfiguration, ProviderType};
use capi_release::Release;
use capi_release_sources::{
    airgap,
    fetch_config::{
        FetchConfigError, ProviderRef, SourceSettings, default_components_file, source_for_provider,
    },
    fetch_release,
    local::LocalSource,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, api::ListParams};
use serde_json::Value;

use crate::providers::ProviderArg;

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

pub use capi_cluster_io::configmaps::KubeConfigMaps;

/// A release source of any kind, ConfigMaps read through the cluster.
pub type AnySource = capi_release_sources::any_source::AnySource<KubeConfigMaps>;

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

/// A variable from the environment. HTTP_CA_BUNDLE may name a PEM file instead of holding one,
/// as a command line would rather say.
fn env(k: &str) -> Option<String> {
    let v = std::env::var(k).ok().filter(|v| !v.is_empty())?;
    if k == capi_release_sources::fetch_config::HTTP_CA_BUNDLE && !v.contains("-----BEGIN") {
        return std::fs::read_to_string(&v).ok().or(Some(v));
    }
    Some(v)
}

/// Whose settings a fetch may use: the caller's environment holds credentials (GITHUB_TOKEN,
/// GITLAB_ACCESS_TOKEN, HTTP_*, OCI_*) meant for the hosts the caller names, not for whatever
/// host a provider object in the cluster names — anyone who may write one provider object
/// would otherwise draw an admin's or a CI job's token to a server of their choosing.
pub enum Credentials<'a> {
    /// The caller named the source (on the command line): its environment's credentials go
    /// there.
    Caller,
    /// A provider object (or its default repository) names the source: only the provider's own
    /// variables (its `spec.secretName` Secret) hold credentials for it. The caller's GITHUB_TOKEN
    /// still goes to api.github.com or the `--github-api-url` host, as the operator's does.
    Provider(&'a BTreeMap<String, String>),
}

impl Credentials<'_> {
    /// The variable `k` a source may read. A CA bundle is trust, not a credential: the caller's
    /// applies everywhere when the provider names none.
    fn lookup(&self, k: &str) -> Option<String> {
        match self {
            Credentials::Caller => env(k),
            Credentials::Provider(vars) => {
                vars.get(k).filter(|v| !v.is_empty()).cloned().or_else(|| {
                    (k == capi_release_sources::fetch_config::HTTP_CA_BUNDLE).then(|| env(k))?
                })
            }
        }
    }
}

/// The caller's own GitHub token, for the API hosts the caller vouches for.
fn caller_github_token() -> Option<String> {
    env(capi_release_sources::fetch_config::GITHUB_TOKEN)
}

/// What a provider object's fetchConfig says, as an [`Origin`].
fn origin_of(fetch: Option<&FetchConfiguration>) -> Origin {
    match fetch {
        Some(f) if f.selector.is_some() => Origin::ConfigMaps,
        Some(FetchConfiguration { oci: Some(r), .. }) => {
            Origin::Oci(r.trim_start_matches("oci://").to_string())
        }
        Some(FetchConfiguration { url: Some(u), .. }) => Origin::Url(u.clone()),
        _ => Origin::Default,
    }
}

/// The source `fetch` names for `provider` (`None`: its default repository), chosen by the
/// mapping the operator uses, with the plugin's settings: credentials as `credentials` allows,
/// `--github-api-url`, and plain-http URLs accepted (local servers). ConfigMaps are read
/// through `client`; without one, a selector is refused.
fn from_fetch_config(
    client: Option<&Client>,
    provider: ProviderRef<'_>,
    fetch: Option<&FetchConfiguration>,
    flags: &SourceFlags,
    credentials: &Credentials<'_>,
) -> anyhow::Result<Located> {
    let github_token = caller_github_token();
    let chosen = source_for_provider(
        provider,
        fetch,
        |k| credentials.lookup(k),
        &SourceSettings {
            github_api_url: flags.github_api_url.as_deref(),
            // Sent only where the caller vouches for it (api.github.com, --github-api-url),
            // and only when the provider's own variables hold no token.
            github_token: github_token.as_deref(),
            github_token_hosts: &[],
            allow_http_urls: true,
        },
        |namespace, query| client.map(|c| KubeConfigMaps::new(c.clone(), namespace, query)),
    );
    let chosen = match chosen {
        Ok(c) => c,
        Err(FetchConfigError::NoDefaultRepository { .. }) => bail!(
            "{} {:?} is not one of clusterctl's well-known providers: give its source (name@URL, name@oci://REFERENCE or name@DIR) or --repository DIR",
            provider.provider_type.kind(),
            provider.name
        ),
        Err(FetchConfigError::Oci { source, .. } | FetchConfigError::Url(source)) => {
            return Err(source.into());
        }
        Err(e @ FetchConfigError::NoConfigMapReader) => return Err(e.into()),
    };
    Ok(Located {
        source: chosen.source,
        components_file: chosen.components_file,
        url_version: chosen.url_version,
        origin: origin_of(fetch),
        description: chosen.description,
    })
}

/// A provider with no namespace of its own (named on the command line).
fn unplaced(t: ProviderType, name: &str) -> ProviderRef<'_> {
    ProviderRef {
        provider_type: t,
        name,
        namespace: "",
    }
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

/// Reads a source string: a release URL (GitHub or GitLab), `oci://REFERENCE`
/// (`oci+http://REFERENCE` for a registry over plain HTTP), or a directory.
pub fn locate_source(
    t: ProviderType,
    name: &str,
    source: &str,
    flags: &SourceFlags,
) -> anyhow::Result<Located> {
    let fetch = if source.starts_with("https://") || source.starts_with("http://") {
        FetchConfiguration {
            url: Some(source.to_string()),
            ..FetchConfiguration::default()
        }
    } else if source.starts_with("oci://") {
        FetchConfiguration {
            oci: Some(source.to_string()),
            ..FetchConfiguration::default()
        }
    } else if let Some(rest) = source.strip_prefix("oci+http://") {
        // A registry spoken to over plain HTTP (a local mirror, tests).
        FetchConfiguration {
            oci: Some(format!("http://{rest}")),
            ..FetchConfiguration::default()
        }
    } else {
        return local_source(t, name, PathBuf::from(source));
    };
    from_fetch_config(
        None,
        unplaced(t, name),
        Some(&fetch),
        flags,
        &Credentials::Caller,
    )
}

/// The source of a provider named on the command line: its own, else `--repository`, else
/// its default repository.
pub fn locate_arg(arg: &ProviderArg, flags: &SourceFlags) -> anyhow::Result<Located> {
    let (t, name) = (arg.provider_type, arg.name.as_str());
    match (&arg.source, &flags.repository) {
        (Some(s), _) => locate_source(t, name, s, flags),
        (None, Some(dir)) => local_source(t, name, dir.clone()),
        (None, None) => from_fetch_config(
            None,
            unplaced(t, name),
            None,
            flags,
            &Credentials::Provider(&BTreeMap::new()),
        ),
    }
}

/// The preloaded ConfigMaps of a provider in `namespace`, picked by `fetch.selector` (no
/// selector: every ConfigMap of the namespace).
pub fn locate_configmaps(
    client: &Client,
    t: ProviderType,
    name: &str,
    namespace: &str,
    fetch: &FetchConfiguration,
) -> anyhow::Result<Located> {
    let selector_only = FetchConfiguration {
        selector: Some(fetch.selector.clone().unwrap_or_default()),
        ..FetchConfiguration::default()
    };
    from_fetch_config(
        Some(client),
        ProviderRef {
            provider_type: t,
            name,
            namespace,
        },
        Some(&selector_only),
        &SourceFlags::default(),
        &Credentials::Provider(&BTreeMap::new()),
    )
}

/// The source a provider object in the cluster reads (its fetchConfig), unless
/// `--repository` overrides it. `variables` are the provider's own (its `spec.secretName` Secret):
/// the only credentials sent to a host its fetchConfig names.
pub fn locate_provider(
    client: &Client,
    p: &AnyProvider,
    flags: &SourceFlags,
    variables: &BTreeMap<String, String>,
) -> anyhow::Result<Located> {
    let (t, name) = (p.provider_type, p.name());
    if let Some(dir) = &flags.repository {
        return local_source(t, name, dir.clone());
    }
    from_fetch_config(
        Some(client),
        ProviderRef {
            provider_type: t,
            name,
            namespace: p.namespace(),
        },
        p.spec.fetch_config.as_ref(),
        flags,
        &Credentials::Provider(variables),
    )
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
