//! Release sources: where Cluster API provider releases come from. Every source answers two
//! questions through [`ReleaseSource`]: which versions exist, and what a file of one version
//! holds. The concrete kinds are GitHub releases ([`github`]), GitLab generic packages
//! ([`gitlab`]), OCI artifacts ([`oci`]), clusterctl's local-repository layout ([`local`]) and the
//! air-gapped ConfigMaps ([`configmap`], written by [`airgap`]); [`any_source::AnySource`]
//! dispatches over them, and [`fetch_config::source_for_provider`] is the one mapping from a
//! provider's fetchConfig to its source, shared by the operator and the kubectl plugin.
//!
//! This is the only crate of the workspace with network code for releases; the components
//! engine (`capi-components`) renders what it fetches.

use std::future::Future;

use capi_release::Release;

/// Largest file accepted from any source, after decompression (bytes).
pub const MAX_FILE_BYTES: usize = 32 * 1024 * 1024;

/// Most versions one listing of a source may hold, all pages together. Real providers publish
/// a few hundred releases; a listing beyond this is refused rather than walked, because every
/// later step (choosing "latest", the note of what was found instead) works on the whole list
/// on the operator's event loop, and a release server must not be able to stall it.
pub const MAX_LISTED_VERSIONS: usize = 10_000;

/// Largest answer accepted for one page of a listing (bytes). A GitHub page of 100 releases
/// with long notes and many assets stays well under it; a page beyond it is not a listing.
pub const MAX_LISTING_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// Most bytes read for one listing, all pages together: bounds the memory and parsing a
/// listing costs however a server paginates.
pub const MAX_LISTING_BYTES: usize = 64 * 1024 * 1024;

/// Why a source could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The version, file or repository does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A version the source does not have, with what the source has instead (the versions it
    /// lists, the ConfigMaps a selector matched), so the user sees why it is missing.
    #[error("{what} not found; {found}")]
    NotFoundAmong {
        /// What was looked for.
        what: String,
        /// What the source holds instead, cut to a short note.
        found: String,
    },
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
    /// A listing holding more versions than [`MAX_LISTED_VERSIONS`].
    #[error(
        "{what} holds more than {limit} versions (the operator's bound on one listing); the listing is refused"
    )]
    TooManyVersions {
        /// What was being listed.
        what: String,
        /// The bound exceeded.
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

    /// Whether the thing asked for does not exist (with or without a note of what does).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            SourceError::NotFound(_) | SourceError::NotFoundAmong { .. }
        )
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

    /// What the source holds instead of `version`, for the message saying it is missing:
    /// `None` when the source has the version after all (a file of it is what is missing, and
    /// that error names the file). By default the versions the source lists, newest first.
    fn found_instead(&self, version: &str) -> impl Future<Output = Option<String>> + Send {
        async move {
            match self.list_versions().await {
                Ok(listed) if listed.iter().any(|v| v == version) => None,
                Ok(listed) => Some(versions_note(listed)),
                Err(e) => Some(format!("listing the source's versions failed too: {e}")),
            }
        }
    }
}

/// "the source lists v1.2.0, v1.1.0 … and 40 more" (newest first), or that it lists none.
pub fn versions_note(mut listed: Vec<String>) -> String {
    listed.sort_by(|a, b| {
        let (va, vb) = (
            capi_release::version::parse(a),
            capi_release::version::parse(b),
        );
        vb.cmp(&va).then_with(|| a.cmp(b))
    });
    capi_operator_api::note::found_note(
        "the source lists ",
        &listed,
        "the source lists no versions",
    )
}

pub mod airgap;
pub mod any_source;
pub mod configmap;
pub mod fetch_config;
pub mod github;
pub mod gitlab;
pub mod http;
mod listing;
pub mod local;
pub mod oci;
pub mod repository;
mod retry;
pub mod trust;

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
        Some(v) => match source.fetch_file(v, "metadata.yaml").await {
            Ok(m) => (v.to_string(), m),
            Err(SourceError::NotFound(what)) => {
                return Err(match source.found_instead(v).await {
                    Some(found) => SourceError::NotFoundAmong { what, found },
                    None => SourceError::NotFound(what),
                });
            }
            Err(e) => return Err(e),
        },
        None => latest(source).await?,
    };
    let components = source.fetch_file(&version, components_file).await?;
    Ok(Release {
        metadata: utf8("metadata.yaml", metadata)?,
        components: utf8(components_file, components)?,
        version,
    })
}

/// The newest release (as clusterctl chooses it) that has a metadata.yaml, with that file.
async fn latest<S: ReleaseSource>(source: &S) -> Result<(String, Vec<u8>), SourceError> {
    let tags = source.list_versions().await?;
    for candidate in capi_release::version::latest_candidates(&tags) {
        match source.fetch_file(&candidate, "metadata.yaml").await {
            Ok(m) => return Ok((candidate, m)),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Err(SourceError::NotFoundAmong {
        what: "a release with metadata.yaml".into(),
        found: versions_note(tags),
    })
}
