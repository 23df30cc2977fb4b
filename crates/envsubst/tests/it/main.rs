//! The integration tests of `envsubst`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

mod api;
mod conformance;
