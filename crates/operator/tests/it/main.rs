//! The integration tests of `operator`: one binary, one module per area (see the section on
//! tests in docs/development.md for the names and how to select them).

#![allow(
    clippy::too_many_lines,
    reason = "a scenario test reads top to bottom as the story it checks"
)]

mod adoption;
mod available_versions;
mod behaviour;
mod cert_manager_missing;
mod chart_upstream_values;
mod chart_values;
mod cluster_api_operator_api;
mod clusterctl;
mod deletion_policy;
mod foreign_entries;
mod gitops_health;
mod go_operator_releases;
mod hostile;
mod image_mirror;
mod inputs;
mod install_airgapped;
mod lifecycle;
mod lifecycle_kill;
mod memory_budget;
mod monitoring;
mod move_management_cluster;
mod net;
mod node;
mod production;
mod rbac;
mod render;
mod restart;
mod root;
mod safety;
mod safety_discovery;
mod secrets;
mod specification;
mod support;
mod tenant;
mod upgrade_real;
