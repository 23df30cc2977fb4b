//! The operator as a library: the controllers and the generic reconciler, leader election,
//! metrics, the health server and the helper commands. The binary (`main.rs`) parses flags
//! and calls in here; tests drive the reconciler directly against a mocked API server.

pub mod apidocs;
pub mod argocd;
pub mod controller;
pub mod crds;
pub mod fence;
pub mod leader;
pub mod metrics;
pub mod render;
pub mod server;
