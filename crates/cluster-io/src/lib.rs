//! Talking to a cluster, shared by the operator and the plugin so both write the same way:
//!
//! - [`object_key`]: which object a rendered manifest is ([`ObjKey`], [`key_of`]);
//! - [`discovery`]: the resource and scope serving a kind, cached ([`Resolver`]);
//! - [`server_side_apply`]: server-side apply under a named field manager
//!   ([`ServerSideApply`]; the operator and the plugin each pass their own);
//! - [`apply_error`]: what a failed write means ([`ApplyError`]);
//! - [`established`]: waiting until CustomResourceDefinitions are Established;
//! - [`provider_kind`]: the provider kinds of both API groups ([`ProviderKind`]) and reading
//!   provider objects of either;
//! - [`configmaps`]: the air-gapped release ConfigMaps read through the API
//!   ([`configmaps::KubeConfigMaps`]), skipping the release cache's own entries;
//! - [`release_cache`]: the in-cluster cache of fetched releases ([`ReleaseCache`]);
//! - [`provider_inputs`]: a provider's variables Secret and additional manifests;
//! - [`installed`]: the kinds of objects the operator installs and prunes, and listing a
//!   provider's installed objects.

pub mod apply_error;
pub mod configmaps;
pub mod discovery;
pub mod established;
pub mod installed;
pub mod object_key;
pub mod provider_inputs;
pub mod provider_kind;
pub mod redact;
pub mod release_cache;
pub mod server_side_apply;

pub use apply_error::{ApplyError, CERT_MANAGER_GROUP, RECREATABLE, recreatable};
pub use discovery::{Resolved, Resolver};
pub use established::{crds_needed_by, wait_established};
pub use object_key::{ObjKey, gvk_of, key_of};
pub use provider_kind::ProviderKind;
pub use release_cache::ReleaseCache;
pub use server_side_apply::ServerSideApply;
