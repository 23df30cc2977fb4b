//! The integration tests of `api`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

#![allow(
    clippy::too_many_lines,
    reason = "a scenario test reads top to bottom as the story it checks"
)]

mod crd_validation;
mod v1alpha2;
