//! The integration tests of `release-sources`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

#![allow(
    clippy::too_many_lines,
    reason = "a scenario test reads top to bottom as the story it checks"
)]

mod github_source;
mod github_token_hosts;
mod gitlab_source;
mod oci_copy;
mod oci_source;
mod oci_support;
