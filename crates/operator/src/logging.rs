//! The operator's log filter.

use tracing_subscriber::EnvFilter;

/// Kept at info whatever `RUST_LOG` asks: kube's client logs every unsuccessful apiserver
/// answer at debug with the apiserver's message verbatim, and a refused object's message can
/// quote a value substituted from a provider's variables Secret. The operator logs the same
/// failure itself, redacted ([`capi_cluster_io::redact`]).
const QUIET: &str = "kube_client::client=info";

/// The client's request trace (method and URL, no bodies): [`QUIET`] covers its target too, as
/// targets match by prefix, so it is given back the level `RUST_LOG` asks for it.
const REQUESTS: &str = "kube_client::client::builder";

/// The filter of `directives` (`RUST_LOG`; info when unset or invalid), with [`QUIET`] on top.
pub fn filter(directives: Option<&str>) -> EnvFilter {
    let valid = directives.filter(|d| EnvFilter::try_new(d).is_ok());
    let filter = valid.map_or_else(|| EnvFilter::new("info"), EnvFilter::new);
    let requests = format!(
        "{REQUESTS}={}",
        level_for(valid.unwrap_or("info"), REQUESTS)
    );
    [QUIET, requests.as_str()]
        .iter()
        .filter_map(|d| d.parse().ok())
        .fold(filter, EnvFilter::add_directive)
}

/// The level the plain `target=level` (or bare `level`) directives of `directives` give
/// `target`: the longest target prefix wins, as in the filter itself; `off` when none matches.
fn level_for(directives: &str, target: &str) -> String {
    directives
        .split(',')
        .filter(|d| !d.contains(['[', '{']))
        .filter_map(|d| match d.trim().rsplit_once('=') {
            Some((t, level)) => Some((t.trim(), level.trim())),
            None if !d.trim().is_empty() => Some(("", d.trim())),
            None => None,
        })
        .filter(|(t, _)| t.is_empty() || target == *t || target.starts_with(&format!("{t}::")))
        .max_by_key(|(t, _)| t.len())
        .map_or_else(|| "off".to_string(), |(_, level)| level.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_trace_keeps_the_level_asked_for_it() {
        assert_eq!(level_for("info,kube_client=debug", REQUESTS), "debug");
        assert_eq!(level_for("trace", REQUESTS), "trace");
        assert_eq!(level_for("info", REQUESTS), "info");
        assert_eq!(
            level_for("kube_client::client::builder=warn,debug", REQUESTS),
            "warn"
        );
        assert_eq!(level_for("capi=debug", REQUESTS), "off");
    }
}
