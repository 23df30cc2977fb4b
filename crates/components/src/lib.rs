//! The components engine: fetches Cluster API provider releases from every kind of source and
//! renders them exactly as clusterctl does (variable substitution, image overrides, target
//! namespace, labels, ordering), then applies the operator's customizations from a
//! `ProviderSpec`. It has no Kubernetes client: reading ConfigMaps goes through a trait the
//! controller implements.

pub mod airgap;
pub mod contract;
pub mod customize;
pub mod defaults;
pub mod finalize;
pub mod manager_args;
pub mod managers;
pub mod metadata;
pub mod patch;
pub mod pipeline;
pub mod privileged;
pub mod render;
pub mod source;
pub mod unresolved;
pub mod upgrade;
pub mod variables;
pub mod version;
