//! The settings of the `run` command.

use std::{sync::Arc, time::Duration};

use capi_operator_api::ProviderApi;

use super::budget;

/// Settings of the `run` command.
#[derive(Debug, Clone)]
pub struct Options {
    /// GitHub API base URL replacing https://api.github.com (GitHub Enterprise, tests).
    pub github_api_url: Option<String>,
    /// Token for GitHub when the provider Secret has none (`GITHUB_TOKEN`).
    pub github_token: Option<String>,
    /// API hosts besides api.github.com and `github_api_url`'s that `github_token` may be
    /// sent to (GitHub Enterprise servers trusted with it); never one a provider names.
    pub github_token_hosts: Vec<String>,
    /// Delay before re-checking a provider stuck on a configuration problem.
    pub config_retry: Duration,
    /// Periodic re-check of a healthy provider.
    pub resync: Duration,
    /// How often the provider's source is asked which newer releases it offers (zero: never).
    pub version_check: Duration,
    /// Concurrent reconciles per kind.
    pub concurrency: u16,
    /// Watch provider objects of this namespace only (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Leader election; every replica reconciles when `None`.
    pub leader_election: Option<crate::leader::LeaseConfig>,
    /// Metrics registry served on `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Readiness served on `/readyz`.
    pub health: Arc<crate::server::Health>,
    /// Keep clusterctl's inventory for the providers the operator installs.
    pub clusterctl_inventory: bool,
    /// The provider APIs served: this operator's, cluster-api-operator's v1alpha2, or both.
    pub apis: Vec<ProviderApi>,
    /// Memory for fetching and rendering releases, shared by every provider.
    pub memory_budget: Arc<budget::Budget>,
    /// The image mirror given by flags; the watched ConfigMap's setting goes over it.
    pub image_mirror: capi_components::mirror::ImageMirror,
    /// The ConfigMap (namespace, name) holding the image mirror setting, watched.
    pub image_mirror_config: Option<(String, String)>,
    /// The release whose labels that ConfigMap must carry to be used (the chart's).
    pub image_mirror_owner: Option<String>,
    /// The key of the config hash on the managers' pods: `run` reads the operator's own
    /// (`crate::hash_key`); the default, a fixed key, is for tests.
    pub config_hash_key: capi_components::rotation::HashKey,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            github_api_url: None,
            github_token: None,
            github_token_hosts: Vec::new(),
            config_retry: Duration::from_secs(300),
            resync: Duration::from_secs(1800),
            // Off where Options are built for tests; `run` turns it on (`--version-check-seconds`).
            version_check: Duration::ZERO,
            concurrency: 4,
            namespace: None,
            leader_election: None,
            metrics: Arc::default(),
            health: Arc::default(),
            clusterctl_inventory: true,
            apis: ProviderApi::ALL.to_vec(),
            memory_budget: Arc::default(),
            image_mirror: capi_components::mirror::ImageMirror::default(),
            image_mirror_config: None,
            image_mirror_owner: None,
            config_hash_key: capi_components::rotation::HashKey::new(
                &[0; capi_components::rotation::HashKey::MIN_BYTES],
            ),
        }
    }
}
