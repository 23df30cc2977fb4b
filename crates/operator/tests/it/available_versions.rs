//! End-to-end: the newer releases a provider's source offers are in its status
//! (`availableVersions`), in `kubectl get`'s Patch column and in a metric, and follow an
//! upgrade.

use crate::support;

use std::time::Duration;

use capi_test_support::wait_for;
use serde_json::Value;
use support::*;

const NS: &str = "available-versions";
/// The sample core's series 0.2 and 0.3 are v1beta2, 1.0 is v1beta3.
const SERIES: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n  - major: 0\n    minor: 2\n    contract: v1beta2\n  - major: 0\n    minor: 3\n    contract: v1beta2\n  - major: 1\n    minor: 0\n    contract: v1beta3\n";

/// The provider's status.availableVersions once it is for `installed`.
async fn available(cluster: &capi_test_support::TestCluster, installed: &str) -> Option<Value> {
    wait_for(Duration::from_secs(60), || async {
        let p = cluster
            .get_json(&["coreprovider", "-n", NS, "cluster-api"])
            .ok()?;
        let a = p.pointer("/status/availableVersions")?.clone();
        (a["installed"] == installed).then_some(a)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_releases_are_shown_and_follow_an_upgrade() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    // A cluster of its own: only one core provider may exist per cluster.
    let cluster = capi_test_support::second_private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace(NS)?;
    let client = cluster.client().await?;
    let components =
        std::fs::read_to_string(samples().join("sample-core/v0.2.0/core-components.yaml"))?;
    for version in ["v0.2.0", "v0.2.1", "v0.3.0", "v0.3.1-rc.0", "v1.0.0"] {
        release_configmap(
            &client,
            NS,
            &format!("sample-core-{version}"),
            &[("provider.cluster.x-k8s.io/name", "sample-core")],
            version,
            SERIES,
            &components,
        )
        .await?;
    }
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let op = start_operator(cluster, &["--metrics-bind-address", &addr])?;
    apply(cluster, &core_provider(NS, "v0.2.0", 2))?;
    wait_installed(&client, ("CoreProvider", NS, "cluster-api"), "v0.2.0", &op).await?;

    let a = available(cluster, "v0.2.0")
        .await
        .ok_or_else(|| format!("no availableVersions for v0.2.0\n{}", op.logs()))?;
    assert_eq!(a["newestPatch"], "v0.2.1", "{a}");
    assert_eq!(a["newestInContract"], "v0.3.0", "{a}");
    assert_eq!(a["newest"], "v1.0.0", "{a}");
    assert!(
        a["patchSince"].is_string() && a["checkedTime"].is_string(),
        "{a}"
    );
    assert!(a.get("message").is_none(), "{a}");
    let table = cluster.kubectl_ok(&["get", "coreproviders", "-n", NS])?;
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains("PATCH"), "{table}");
    assert!(
        table.lines().nth(1).is_some_and(|l| l.contains("v0.2.1")),
        "{table}"
    );
    let series = wait_for(Duration::from_secs(30), || async {
        let (_, body) = get(port, "/metrics").ok()?;
        body.lines()
            .find(|l| l.starts_with("capi_operator_provider_newer_patch_since_timestamp_seconds{"))
            .map(str::to_string)
    })
    .await
    .ok_or("no newer-patch series in /metrics")?;
    assert!(
        series.contains(&format!("namespace=\"{NS}\"")) && series.contains("version=\"v0.2.1\""),
        "{series}"
    );

    // After the patch upgrade: checked again for the new version, no newer patch, and the
    // metric's series is gone.
    apply(cluster, &core_provider(NS, "v0.2.1", 2))?;
    let a = available(cluster, "v0.2.1")
        .await
        .ok_or_else(|| format!("no availableVersions for v0.2.1\n{}", op.logs()))?;
    assert!(a.get("newestPatch").is_none(), "{a}");
    assert!(a.get("patchSince").is_none(), "{a}");
    assert_eq!(a["newestInContract"], "v0.3.0", "{a}");
    assert_eq!(a["newest"], "v1.0.0", "{a}");
    let gone = wait_for(Duration::from_secs(30), || async {
        let (_, body) = get(port, "/metrics").ok()?;
        (!body.contains("capi_operator_provider_newer_patch_since_timestamp_seconds{"))
            .then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the newer-patch series stayed after the upgrade"
    );
    Ok(())
}
