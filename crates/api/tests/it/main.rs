//! The integration tests of `api`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

mod crd_validation;
mod v1alpha2;
