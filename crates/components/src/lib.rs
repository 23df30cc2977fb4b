//! The components engine: renders Cluster API provider releases exactly as clusterctl does
//! (variable substitution, image overrides, target namespace, labels, ordering), then applies
//! the operator's customizations from a `ProviderSpec`; versions, contracts and metadata.yaml.
//! It has no Kubernetes client and no network code: releases are fetched by the
//! `capi-release-sources` crate.

pub mod before_apply;
pub mod contract;
pub mod customize;
pub mod desired;
pub mod inventory;
pub mod manager_args;
pub mod managers;
pub mod metadata;
pub mod mirror;
pub mod patch;
pub mod pipeline;
pub mod privileged;
pub mod render;
pub mod rotation;
pub mod unresolved;
pub mod upgrade;
pub mod variables;
