//! A provider whose release needs cert-manager, installed on a cluster without it: the
//! provider says so with its own reason (not the generic apply failure) and an event, and is
//! installed as soon as cert-manager's CRDs appear — woken by the watch, not by the retry timer.
//! A test binary of its own: it needs a cluster that has never seen cert-manager.

use crate::support;

use std::time::{Duration, Instant};

use capi_test_support::private_cluster;
use serde_json::Value;
use support::*;

const KIND: (&str, &str, &str) = ("CoreProvider", "cm-missing", "cluster-api");

#[tokio::test]
async fn a_missing_cert_manager_is_named_and_its_arrival_retries_at_once() -> TestResult {
    let releases = capi_test_support::releases()?;
    let crds = capi_test_support::cert_manager_crds()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let (_, ns, name) = KIND;
    cluster.ensure_namespace(ns)?;
    let label = [("provider.cluster.x-k8s.io/name", "cluster-api")];
    release_configmap_from_dir(
        &client,
        ns,
        &releases,
        "cluster-api",
        "v1.12.0",
        "core-components.yaml",
        &label,
    )
    .await?;
    // Only a watch can bring the retry within the test's time: the timer says ten minutes.
    let _operator = start_operator(cluster, &["--config-retry-seconds", "600"])?;
    apply(
        cluster,
        &format!(
            "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  version: v1.12.0\n  fetchConfig:\n    selector:\n      matchLabels: {{provider.cluster.x-k8s.io/name: cluster-api}}\n"
        ),
    )?;
    let p = wait_condition(
        &client,
        KIND,
        "ProviderInstalled",
        "False",
        Some("CertManagerNotInstalled"),
        Duration::from_secs(90),
    )
    .await?;
    let message = condition(&p, "ProviderInstalled")
        .and_then(|c| c.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(
        message.contains("it serves no cert-manager.io API group")
            && message.contains("cert-manager is not installed"),
        "{message}"
    );
    let events = cluster.kubectl_ok(&["get", "events", "-n", ns, "-o", "json"])?;
    let events: Value = serde_json::from_str(&events)?;
    assert!(
        events["items"].as_array().is_some_and(|items| items
            .iter()
            .any(|e| e["reason"] == "CertManagerNotInstalled" && e["type"] == "Warning")),
        "no CertManagerNotInstalled warning event: {events}"
    );

    let arrived = Instant::now();
    cluster.kubectl_ok(&["apply", "--server-side", "-f", &crds.to_string_lossy()])?;
    wait_condition(
        &client,
        KIND,
        "ProviderInstalled",
        "True",
        Some("Installed"),
        Duration::from_secs(90),
    )
    .await?;
    eprintln!(
        "installed {:?} after cert-manager's CRDs arrived",
        arrived.elapsed()
    );
    Ok(())
}
