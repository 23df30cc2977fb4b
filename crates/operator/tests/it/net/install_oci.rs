//! End-to-end: a provider fetched from a real OCI registry (Debian's `docker-registry`, started
//! here on a free port with plain HTTP): the newest tag is resolved into spec.version, the
//! release installs and becomes Ready, and a tagged reference installs that tag.

use crate::support;

use std::time::Duration;

use capi_test_support::{private_cluster, registry::PlainRegistry};
use serde_json::Value;
use support::*;

/// A CoreProvider fetching from `repo` of the registry, at `version` (or the newest tag).
fn core(reg: &PlainRegistry, repo: &str, version: Option<&str>) -> String {
    let version = version
        .map(|v| format!("  version: {v}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: sample-core-system\nspec:\n{version}  fetchConfig:\n    oci: http://{}/{repo}\n",
        reg.host
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_installs_from_an_oci_registry() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let reg = PlainRegistry::start().await?;
    for v in ["v0.1.0", "v0.2.0"] {
        push_release(&reg, "capi/sample-core", &samples().join("sample-core"), v).await?;
    }
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace("sample-core-system")?;
    let client = cluster.client().await?;
    let mut operator = start_operator(cluster, &[])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\noperator log:\n{}", operator.logs()).into()
    };

    // No version: the newest tag is resolved and written back.
    apply(cluster, &core(&reg, "capi/sample-core", None))?;
    let p = wait_condition(
        &client,
        ("CoreProvider", "sample-core-system", "cluster-api"),
        "Ready",
        "True",
        None,
        Duration::from_secs(120),
    )
    .await
    .map_err(log)?;
    assert_eq!(p.pointer("/spec/version"), Some(&Value::from("v0.2.0")));
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.2.0"))
    );
    assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));

    // A repository that does not exist: a clear reason, and v0.2.0 keeps running.
    apply(
        cluster,
        &core(&reg, "capi/no-such-provider", Some("v0.2.0")),
    )?;
    let p = wait_condition(
        &client,
        ("CoreProvider", "sample-core-system", "cluster-api"),
        "ProviderInstalled",
        "False",
        Some("ComponentsFetchError"),
        Duration::from_secs(60),
    )
    .await
    .map_err(log)?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.2.0"))
    );
    operator.kill();
    Ok(())
}
