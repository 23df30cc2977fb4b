//! Tests that run real provider managers (or the agent itself) on the process node: they need root
//! and the agent binary (`make process-node`), and say SKIPPED otherwise.

mod credential_rotation;
mod current_releases;
mod handover_from_go_operator;
mod helm_chart;
mod real_providers;
mod workload_cluster;
