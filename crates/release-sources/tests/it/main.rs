//! The integration tests of `release-sources`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

mod github_source;
mod github_token_hosts;
mod gitlab_source;
mod oci_copy;
mod oci_source;
mod oci_support;
