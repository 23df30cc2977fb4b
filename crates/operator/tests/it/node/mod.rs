//! Tests that run real provider managers (or the agent itself) on the process node: they need root
//! and the agent binary (`make process-node`), and say SKIPPED otherwise. `image_pull` runs them
//! on the real node instead (root and `make images`).

mod credential_rotation;
mod current_releases;
mod handover_from_go_operator;
mod helm_chart;
mod image_pull;
mod operator_image;
mod real_providers;
mod workload_cluster;
