//! The provider kinds the controllers serve, of both API groups: defined in
//! [`capi_cluster_io::provider_kind`] (shared with the plugin) and named here as the
//! controllers know them.

pub use capi_cluster_io::provider_kind::{
    ProviderKind as Served, held_by_cluster_api_operator, shown,
};
