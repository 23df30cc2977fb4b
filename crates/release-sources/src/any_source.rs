//! One release source of any kind, dispatching to the concrete sources, so callers that pick a
//! source at run time (the operator from a provider's fetchConfig, the kubectl plugin from the
//! command line, both through [`crate::fetch_config::source_for_provider`]) share one type. The
//! ConfigMap source is generic over its reader, which lives with the caller's Kubernetes client.

use super::{
    ReleaseSource, SourceError,
    configmap::{ConfigMapReader, ConfigMapSource},
    github::GitHubSource,
    gitlab::GitLabSource,
    local::LocalSource,
    oci::OciSource,
    repository::RepositorySource,
};

/// A release source of any kind; `R` reads the ConfigMaps of the air-gapped layout.
pub enum AnySource<R> {
    /// A directory in clusterctl's local-repository layout.
    Local(LocalSource),
    /// GitHub (or GitHub Enterprise) releases.
    GitHub(GitHubSource),
    /// GitLab generic packages.
    GitLab(GitLabSource),
    /// An OCI repository (one artifact per version).
    Oci(Box<OciSource>),
    /// ConfigMaps picked by a fetchConfig.selector.
    ConfigMaps(ConfigMapSource<R>),
    /// Any HTTP(S) server in clusterctl's repository layout.
    Repository(RepositorySource),
}

impl<R> AnySource<R> {
    /// The kind of source, for metrics and messages.
    pub fn kind(&self) -> &'static str {
        match self {
            AnySource::Local(_) => "local",
            AnySource::GitHub(_) => "github",
            AnySource::GitLab(_) => "gitlab",
            AnySource::Oci(_) => "oci",
            AnySource::ConfigMaps(_) => "configmap",
            AnySource::Repository(_) => "http",
        }
    }
}

impl<R: ConfigMapReader> ReleaseSource for AnySource<R> {
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        match self {
            AnySource::Local(s) => s.list_versions().await,
            AnySource::GitHub(s) => s.list_versions().await,
            AnySource::GitLab(s) => s.list_versions().await,
            AnySource::Oci(s) => s.list_versions().await,
            AnySource::ConfigMaps(s) => s.list_versions().await,
            AnySource::Repository(s) => s.list_versions().await,
        }
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        match self {
            AnySource::Local(s) => s.fetch_file(version, file).await,
            AnySource::GitHub(s) => s.fetch_file(version, file).await,
            AnySource::GitLab(s) => s.fetch_file(version, file).await,
            AnySource::Oci(s) => s.fetch_file(version, file).await,
            AnySource::ConfigMaps(s) => s.fetch_file(version, file).await,
            AnySource::Repository(s) => s.fetch_file(version, file).await,
        }
    }

    async fn found_instead(&self, version: &str) -> Option<String> {
        match self {
            AnySource::Local(s) => s.found_instead(version).await,
            AnySource::GitHub(s) => s.found_instead(version).await,
            AnySource::GitLab(s) => s.found_instead(version).await,
            AnySource::Oci(s) => s.found_instead(version).await,
            AnySource::ConfigMaps(s) => s.found_instead(version).await,
            AnySource::Repository(s) => s.found_instead(version).await,
        }
    }
}
