//! The operator's log filter.

use tracing_subscriber::EnvFilter;

/// Kept at info whatever `RUST_LOG` asks: kube's client logs every unsuccessful apiserver
/// answer at debug with the apiserver's message verbatim, and a refused object's message can
/// quote a value substituted from a provider's variables Secret. The operator logs the same
/// failure itself, redacted ([`capi_cluster_io::redact`]).
const QUIET: &str = "kube_client::client=info";

/// The filter of `directives` (`RUST_LOG`; info when unset or invalid), with [`QUIET`] on top.
pub fn filter(directives: Option<&str>) -> EnvFilter {
    let filter = directives
        .and_then(|d| EnvFilter::try_new(d).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    match QUIET.parse() {
        Ok(quiet) => filter.add_directive(quiet),
        // A constant; the fast-tier test of redacted logs would fail first.
        Err(_) => filter,
    }
}
