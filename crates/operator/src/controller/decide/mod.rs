//! The decision layer: what a reconcile decides, as plain functions and types with no client.
//! It holds how a reconcile ends ([`Outcome`], [`Problem`], the reconcile [`Error`] and its
//! reason), the notes a phase hands to the reporter ([`Note`]), and the pure decisions: the
//! preflight rules, the install plan, readiness, kstatus, conditions (and which of their changes
//! are news), and when to look again. Everything that talks to the API (the phases in
//! `install`, the reconciler, the reporter) sits above it and imports it; nothing here imports
//! them back. The `architecture` test below keeps it so.

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

pub use outcome::{Error, Note, Outcome, Problem, Reasoned, problem};

/// The condition and event reasons, kept with the condition types in the API crate.
pub use capi_operator_api::conditions::reason;

#[cfg(test)]
mod architecture;
