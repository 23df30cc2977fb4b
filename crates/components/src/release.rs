//! A fetched release as the engine renders it. The sources that fetch releases live in the
//! `capi-release-sources` crate.

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
