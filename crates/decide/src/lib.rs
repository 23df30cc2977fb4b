//! The decision layer: what a reconcile decides, as plain functions and types with no client.
//! It holds what a phase hands to the reporter (a configuration [`Problem`], the [`Note`]s),
//! and the pure decisions: the preflight rules, the install plan, readiness, kstatus,
//! conditions (and which of their changes are news), deletion, adoption, and when to look
//! again. Everything that talks to the API (the operator's install phases, the reconciler, the
//! reporter, and the reconcile error that carries an API failure) sits above it and imports it.
//! The compiler holds the layer: this crate has no Kubernetes client, runtime or network
//! dependency, and `make clippy` checks it built alone, where kube has no `client` feature.

// A function is read at once: longer than clippy.toml's threshold (80 lines) fails the build
// (as it did when this layer was a module of the operator).

pub mod added_entries;
pub mod adoption;
pub mod conditions;
pub mod deletion;
pub mod kstatus;
mod outcome;
pub mod plan;
pub mod preflight;
pub mod readiness;
pub mod settle;
pub mod versions;

pub use outcome::{Note, Problem};

/// The condition and event reasons, kept with the condition types in the API crate.
pub use capi_operator_api::conditions::reason;
