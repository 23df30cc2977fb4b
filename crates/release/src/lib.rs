//! What a provider release is, shared by the sources that fetch releases
//! (`capi-release-sources`) and the engine that renders them (`capi-components`) without
//! either depending on the other:
//!
//! - [`Release`]: a fetched release's version, metadata.yaml and components text;
//! - [`version`]: release tags as clusterctl parses and orders them;
//! - [`defaults`]: clusterctl's well-known providers and the repositories they fetch from.

pub mod defaults;
pub mod version;

/// A fetched release: its version, metadata.yaml and components text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The version (tag) fetched.
    pub version: String,
    /// metadata.yaml text.
    pub metadata: String,
    /// Components text, before substitution.
    pub components: String,
}
