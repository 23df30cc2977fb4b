//! The integration tests of `fake-remotes`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

mod server;
