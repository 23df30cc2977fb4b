//! Release sources: where Cluster API provider releases come from. Every source answers two
//! questions through [`ReleaseSource`]: which versions exist, and what a file of one version
//! holds. The concrete kinds are GitHub releases ([`github`]), GitLab generic packages
//! ([`gitlab`]), OCI artifacts ([`oci`]), clusterctl's local-repository layout ([`local`]) and the
//! air-gapped ConfigMaps ([`configmap`], written by [`airgap`]); [`any::AnySource`] dispatches
//! over them, and [`fetch_config::source_for_provider`] is the one mapping from a provider's
//! fetchConfig to its source, shared by the operator and the kubectl plugin.
//!
//! This is the only crate of the workspace with network code for releases; the components
//! engine (`capi-components`) renders what it fetches.

use std::future::Future;

/// Largest file accepted from any source, after decompression (bytes).
pub const MAX_FILE_BYTES: usize = 32 * 1024 * 1024;

/// Why a source could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The version, file or repository does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The remote refused because of rate limiting.
    #[error("rate limit reached at {0}; wait, or give the operator a token (GITHUB_TOKEN)")]
    RateLimited(String),
    /// The remote refused the credentials (or lack of them).
    #[error("access to {0} denied: check the token or credentials")]
    Unauthorized(String),
    /// A network problem, timeout or server error that may go away by itself.
    #[error("temporary failure fetching {what}: {reason}")]
    Transient {
        /// What was being fetched.
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// A file larger than the limit.
    #[error("{what} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// What was being fetched.
        what: String,
        /// The limit.
        limit: usize,
    },
    /// The source configuration or the answer is malformed.
    #[error("{0}")]
    Invalid(String),
}

impl SourceError {
    /// The condition reason of this failure: the source is unavailable for a while, or the
    /// release cannot be fetched as configured.
    pub fn reason(&self) -> &'static str {
        use capi_operator_api::conditions::reason;
        if self.is_transient() {
            reason::SOURCE_UNAVAILABLE
        } else {
            reason::FETCH_FAILED
        }
    }

    /// Whether retrying later may succeed without any change by the user.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SourceError::Transient { .. } | SourceError::RateLimited(_)
        )
    }
}

/// A place provider releases come from.
pub trait ReleaseSource: Send + Sync {
    /// Every version the source offers (tags as published, e.g. `v1.12.0`), in no order.
    fn list_versions(&self) -> impl Future<Output = Result<Vec<String>, SourceError>> + Send;
    /// The content of `file` (e.g. `metadata.yaml`, `core-components.yaml`) of `version`.
    fn fetch_file(
        &self,
        version: &str,
        file: &str,
    ) -> impl Future<Output = Result<Vec<u8>, SourceError>> + Send;
}

pub mod airgap;
pub mod any;
pub mod configmap;
pub mod fetch_config;
pub mod github;
pub mod gitlab;
pub mod http;
pub mod local;
pub mod oci;
pub mod repository;

/// A fetched release: its version, metadata.yaml and components text (the engine's type).
pub use capi_components::release::Release;

fn utf8(what: &str, bytes: Vec<u8>) -> Result<String, SourceError> {
    String::from_utf8(bytes).map_err(|_| SourceError::Invalid(format!("{what} is not UTF-8 text")))
}

/// Fetches `version` (or the latest release, chosen as clusterctl chooses it, when `None`).
pub async fn fetch_release<S: ReleaseSource>(
    source: &S,
    version: Option<&str>,
    components_file: &str,
) -> Result<Release, SourceError> {
    let (version, metadata) = match version.filter(|v| !v.is_empty()) {
        Some(v) => (v.to_string(), source.fetch_file(v, "metadata.yaml").await?),
        None => {
            let tags = source.list_versions().await?;
            let mut found = None;
            for candidate in capi_components::version::latest_candidates(&tags) {
                match source.fetch_file(&candidate, "metadata.yaml").await {
                    Ok(m) => {
                        found = Some((candidate, m));
                        break;
                    }
                    Err(SourceError::NotFound(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
            found.ok_or_else(|| SourceError::NotFound("a release with metadata.yaml".into()))?
        }
    };
    let components = source.fetch_file(&version, components_file).await?;
    Ok(Release {
        metadata: utf8("metadata.yaml", metadata)?,
        components: utf8(components_file, components)?,
        version,
    })
}
