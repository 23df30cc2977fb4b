//! The integration tests of `components`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

mod assembled_releases;
mod manager_flags;
mod manager_flags_binaries;
mod real_contracts;
mod sample_contracts;
