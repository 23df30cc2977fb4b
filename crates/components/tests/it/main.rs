//! The integration tests of `components`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

#![allow(
    clippy::too_many_lines,
    reason = "a scenario test reads top to bottom as the story it checks"
)]

mod assembled_releases;
mod manager_flags;
mod manager_flags_binaries;
mod real_contracts;
mod sample_contracts;
