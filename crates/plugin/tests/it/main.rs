//! The integration tests of `plugin`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

#![allow(
    clippy::too_many_lines,
    reason = "a scenario test reads top to bottom as the story it checks"
)]

mod cli;
mod credentials;
mod e2e_cert_manager;
mod e2e_diff;
mod e2e_lifecycle;
mod e2e_migrate;
mod e2e_sample;
mod offline;
mod support;
mod vendor_release;
