//! OCI registries: a release is an OCI artifact whose layers are the release files, each named by
//! its `org.opencontainers.image.title` annotation (the layout cluster-api-operator's
//! `fetchConfig.oci` and its kubectl plugin's `publish` use).
//!
//! The source speaks the registry v2 / OCI distribution protocol directly: versions are the
//! repository's tags (`GET /v2/<name>/tags/list`, following `Link` pagination), a version's files
//! come from its manifest (`GET /v2/<name>/manifests/<tag>`; OCI image manifests, Docker v2
//! manifests, and OCI indexes or Docker manifest lists, of which the first manifest is read) and
//! its blobs (`GET /v2/<name>/blobs/<digest>`), each checked against its sha256 digest.
//!
//! Authentication follows what registries announce in `WWW-Authenticate`: anonymous access,
//! Basic (`OCI_USERNAME`/`OCI_PASSWORD`), or the Bearer token flow (the token service is asked
//! with the Basic credentials, or with `OCI_REFRESH_TOKEN` through the OAuth2 refresh grant);
//! `OCI_ACCESS_TOKEN` is sent as a bearer token as it is. Credentials never appear in errors,
//! logs or `Debug` output.
//!
//! [`push_artifact`] publishes a release in the same layout; tests seed registries with it and
//! the kubectl plugin uses it to publish. [`copy_image`] copies container images (manifests,
//! indexes and blobs, by digest) into a mirror for the plugin's `preload --images --copy`.

mod auth;
mod client;
mod copy;
mod pull;
mod push;
mod reference;
mod source;

pub use auth::OciCredentials;
pub use client::OciConfig;
pub use copy::{CopyEnds, copy_image};
pub use push::push_artifact;
pub use reference::OciReference;
pub use source::OciSource;

use super::SourceError;

/// Annotation naming the file a layer holds.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// Media type of every file layer [`push_artifact`] writes. Release files are YAML of several
/// kinds (metadata, components, templates); one generic type keeps publishing independent of
/// file names, and readers never look at it: files are found by their title annotation.
pub const FILE_MEDIA_TYPE: &str = "application/vnd.cluster-api.file";

/// `artifactType` of the manifests [`push_artifact`] writes (OCI 1.1), so registries and tools
/// can tell a provider release from a container image.
pub const ARTIFACT_TYPE: &str = "application/vnd.cluster-api.provider-release.v1";

/// Largest manifest (and tags page) read by default: the size the OCI distribution
/// specification asks registries to accept at least.
pub const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;

/// Secret key holding the registry user name.
pub const OCI_USERNAME: &str = "OCI_USERNAME";
/// Secret key holding the registry password.
pub const OCI_PASSWORD: &str = "OCI_PASSWORD";
/// Secret key holding a bearer token sent to the registry as it is.
pub const OCI_ACCESS_TOKEN: &str = "OCI_ACCESS_TOKEN";
/// Secret key holding an OAuth2 refresh token exchanged at the registry's token service.
pub const OCI_REFRESH_TOKEN: &str = "OCI_REFRESH_TOKEN";

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1";
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
const EMPTY_BLOB: &[u8] = b"{}";
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";
/// Bounds the tags listing of a misbehaving registry that never stops paginating.
const MAX_TAG_PAGES: usize = 100;
/// Token answers are small JSON documents; anything bigger is not one.
const MAX_TOKEN_BYTES: usize = 1024 * 1024;
/// Error bodies are read only to quote the registry's error codes.
const MAX_ERROR_BYTES: usize = 64 * 1024;
const CLIENT_ID: &str = "capi-provider-operator";

fn invalid(msg: impl Into<String>) -> SourceError {
    SourceError::Invalid(msg.into())
}
