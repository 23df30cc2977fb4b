//! Releases built to exhaust the operator's memory, for the release memory budget
//! (`memory_budget` on a local control plane, `node::operator_image` under the kubelet's
//! 256Mi limit): one dense in YAML nodes, one growing through substitution. Each is served from
//! a gzipped ConfigMap; the second's variables come from a Secret.
//!
//! Both are sized to take far more than 256 MiB when rendered without the budget's bounds
//! (figures from `ReleaseCost` in crates/operator/src/controller/budget.rs and from rendering
//! them as an install pass does, the way crates/operator/tests/render_cost.rs measures, debug
//! build, 2026-11-29):
//!
//! - [`node_dense`]: 30,000,225 bytes, 7,500,011 nodes. Charged 4 × (bytes + 2 MiB) + 240 ×
//!   (nodes + 16384) = 1,932,324,308 bytes (1843 MiB), so it is refused under any budget a
//!   256Mi container gets. Rendered within the limits that charge sets (a budget large enough
//!   to admit it), its render alone grew the peak resident memory by 315 MiB.
//! - [`EXPANSION`] with [`expansion_variables`]: 244 bytes charged 11.8 MiB (mostly the 2 MiB
//!   expansion allowance), admitted; substitution is held to 1 MiB per `${...}`, and the outer
//!   replacement (2000 × 18,000 bytes) is refused before it is built. Without those bounds
//!   (envsubst's own 64 MiB cap, the parser's own 4 million nodes) it expands to 36 MB of
//!   4 million one-key flow maps, and the parse alone grew the peak by 953 MiB before stopping
//!   at its node limit. A scalar would not do: envsubst's own cap keeps one to 64 MiB, which
//!   a 256Mi container survives; maps cost hundreds of bytes each.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use super::{TestResult, release_configmap};

/// Items of [`node_dense`]'s list.
pub const DENSE_ITEMS: usize = 7_500_000;

/// A ConfigMap whose data is a block list of [`DENSE_ITEMS`] `- 0`: 4 bytes a node, 30 MB
/// (under the 32 MiB a source may return), a few dozen KB gzipped.
pub fn node_dense() -> String {
    let mut text =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dense}\nlist:\n");
    text.push_str(&"- 0\n".repeat(DENSE_ITEMS));
    text
}

/// A ConfigMap whose list grows through nested replacements: each `a` of `V` becomes `W` (a
/// one-key flow map on a line of its own), then each `a` of `V` becomes that.
pub const EXPANSION: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\nlist:${V//a/${V//a/${W}}}\n";

/// The variables of [`EXPANSION`]: 2000 bytes of `V` make 36 MB, 4 million list items.
pub fn expansion_variables() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("V".to_string(), "a".repeat(2000)),
        ("W".to_string(), "\n- {a: 0}".to_string()),
    ])
}

/// Serves `components` as release `version` of a provider selecting ConfigMaps labelled
/// `provider.cluster.x-k8s.io/name: label` in namespace `ns` (gzipped when large).
pub async fn serve(
    client: &Client,
    ns: &str,
    label: &str,
    version: &str,
    metadata: &str,
    components: &str,
) -> TestResult {
    release_configmap(
        client,
        ns,
        &format!("{label}-{version}"),
        &[("provider.cluster.x-k8s.io/name", label)],
        version,
        metadata,
        components,
    )
    .await
}

/// Creates Secret `name` in `ns` holding [`expansion_variables`], for a provider's
/// `secretName`.
pub async fn variables_secret(client: &Client, ns: &str, name: &str) -> TestResult {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        string_data: Some(expansion_variables()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}
