//! The integration tests of `yaml`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

mod differential;
mod roundtrip;
mod tricky;
