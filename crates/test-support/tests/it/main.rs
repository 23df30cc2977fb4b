//! The integration tests of `test-support`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

mod cluster_lifecycle;
mod control_plane;
