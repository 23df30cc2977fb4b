//! The controllers: one per provider kind, all driving the generic reconciler in
//! [`reconcile`]. The watches feed an index ([`index`]) of the providers, of what the operator
//! installed (to repair drift, prune and report readiness) and of the Secrets and ConfigMaps
//! providers read (to re-render when they change); the changes that concern a provider
//! ([`routing`]) are routed to its controller. [`runtime`] starts all of it and holds leadership.

pub mod apply;
pub mod budget;
pub mod context;
pub mod events;
pub mod index;
pub mod inputs;
pub mod install;
pub mod inventory;
pub mod labels;
pub mod mirror;
mod not_found;
pub mod options;
pub mod outcome;
pub mod owned;
pub mod purge;
pub mod reconcile;
pub mod report;
pub mod routing;
pub mod runtime;
pub mod source;
#[cfg(test)]
mod testing;

pub use apply::FIELD_MANAGER;
pub use context::World;
pub use context::{Ctx, owner_reference, provider_key};
pub use index::owned_by;
pub use options::Options;
pub use owned::{OWNED_KINDS, OwnedKind, OwnedKinds};
pub use runtime::run;

pub use capi_operator_api::{
    OWNER_API_LABEL, OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
};
