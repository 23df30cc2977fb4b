//! Patches on rendered objects: RFC 7396 JSON merge patches, RFC 6902 JSON patches (with RFC
//! 6901 pointers), Kubernetes label selectors, and the two `ProviderSpec` fields built on them,
//! `patches` and the legacy `manifestPatches`. Objects are plain JSON values; there is no
//! Kubernetes client here.
//!
//! The RFC algorithms are the `json-patch` crate's (and its `jsonptr`'s for pointers). What is
//! ours: reading patch texts with messages that say what is wrong, naming why an operation
//! failed, atomic application, `test`'s equality as RFC 6902 defines it (see [`json_equal`]),
//! label selectors, and the selection of the objects a patch applies to.
//!
//! Where this deliberately differs from the Go cluster-api-operator:
//!
//! - **manifestPatches**: Go compares the patch's `apiVersion` in a way that makes a patch
//!   *without* an apiVersion never match anything, while a patch *with* one is not compared at
//!   all. Here a manifest patch applies to every object of its `kind` (which it must give), and
//!   additionally compares `apiVersion`, `metadata.name` and `metadata.namespace` exactly, each
//!   only when the patch gives it.
//! - **patches targets**: Go cannot tell an empty target field from an absent one, so `""`
//!   means "any". Here every field that is set must match exactly, so `group: ""` selects the
//!   core group and `namespace: ""` selects cluster-scoped objects, as the API documents.
//! - A patch that matches no object is not an error (in both), but is logged here.

mod merge;
mod operations;
mod pointer;
mod selector;
mod spec_patches;

pub use merge::merge_patch;
pub use operations::{JsonPatch, JsonPatchError, OpFailure, json_equal};
pub use pointer::{Pointer, PointerError};
pub use selector::{LabelSelector, Requirement, SelectorError, SelectorOp};
pub use spec_patches::{
    ManifestPatch, Patch, PatchError, PatchParseError, SpecPatches, Target, describe_object,
    identities, object_identity, split_api_version,
};
