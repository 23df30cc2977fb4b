//! Kinds that appear after the operator started are owned like the rest. The documented order
//! installs the operator first and cert-manager after it: the Certificates and Issuers a
//! provider then installs must be watched (drift repaired) and removed with the provider.
//! A test binary of its own: it needs a cluster that has never seen cert-manager.

use crate::support;

use std::time::{Duration, Instant};

use capi_test_support::{TestCluster, private_cluster};
use serde_json::Value;
use support::*;

const KIND: (&str, &str, &str) = ("CoreProvider", "cm-later", "cluster-api");
const OWNER: &str = "management.cluster.x-k8s.io/owner-name";

/// The objects of `kind` in the provider's namespace (the release's target), as JSON items.
fn objects(cluster: &TestCluster, kind: &str) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let out = cluster.kubectl_ok(&["get", kind, "-n", KIND.1, "-o", "json"])?;
    let list: Value = serde_json::from_str(&out)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

async fn until(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool, Box<dyn std::error::Error>>,
) -> TestResult {
    let started = Instant::now();
    while !done()? {
        if started.elapsed() > timeout {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Waits until the API server's watch cache of every cert-manager kind is initialised (a list at
/// resourceVersion 0 is served from it). A CRD deleted before that, seconds after its creation on
/// a loaded machine, was seen to stay Terminating for good (kube-apiserver v1.34: the CRD
/// finalizer's "could not list instances: storage is (re)initializing", not retried).
async fn cert_manager_kinds_served(cluster: &TestCluster) -> TestResult {
    let paths = cluster.kubectl_ok(&[
        "get",
        "crd",
        "-l",
        "app=cert-manager",
        "-o",
        r#"jsonpath={range .items[*]}/apis/{.spec.group}/{.spec.versions[0].name}/{.spec.names.plural}{"\n"}{end}"#,
    ])?;
    let paths: Vec<String> = paths
        .lines()
        .map(|p| format!("{p}?resourceVersion=0"))
        .collect();
    assert_eq!(paths.len(), 6, "cert-manager's six CRDs: {paths:?}");
    until(
        "the cert-manager kinds' watch caches",
        Duration::from_secs(60),
        || {
            Ok(paths.iter().all(|p| {
                cluster
                    .kubectl(&["get", "--raw", p])
                    .is_ok_and(|(ok, _, _)| ok)
            }))
        },
    )
    .await
}

#[tokio::test]
async fn cert_manager_installed_after_the_operator_is_owned() -> TestResult {
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
    let operator = start_operator(cluster, &[])?;
    // The operator has discovered its kinds (and found no cert-manager) before it arrives.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.kubectl_ok(&["apply", "--server-side", "-f", &crds.to_string_lossy()])?;
    cert_manager_kinds_served(cluster).await?;
    apply(
        cluster,
        &format!(
            "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  version: v1.12.0\n  fetchConfig:\n    selector:\n      matchLabels: {{provider.cluster.x-k8s.io/name: cluster-api}}\n"
        ),
    )?;
    wait_condition(
        &client,
        KIND,
        "ProviderInstalled",
        "True",
        Some("Installed"),
        Duration::from_secs(120),
    )
    .await?;
    for kind in ["certificates.cert-manager.io", "issuers.cert-manager.io"] {
        let items = objects(cluster, kind)?;
        assert!(!items.is_empty(), "the release installs {kind}");
        for o in &items {
            assert_eq!(
                o["metadata"]["labels"][OWNER], name,
                "{kind} not labelled: {o}"
            );
        }
    }

    // Drift on a Certificate is repaired: only a watch of the kind can notice it.
    cluster.kubectl_ok(&[
        "patch",
        "certificates.cert-manager.io",
        "capi-serving-cert",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"secretName":"drifted"}}"#,
    ])?;
    until("the Certificate's repair", Duration::from_secs(60), || {
        let items = objects(cluster, "certificates.cert-manager.io")?;
        Ok(items.iter().any(|c| {
            c["metadata"]["name"] == "capi-serving-cert"
                && c["spec"]["secretName"] == "capi-webhook-service-cert"
        }))
    })
    .await?;

    cluster.kubectl_ok(&["delete", "coreprovider", name, "-n", ns, "--wait=false"])?;
    until("the provider's removal", Duration::from_secs(120), || {
        let out = cluster.kubectl_ok(&["get", "coreproviders", "-n", ns, "-o", "name"])?;
        Ok(out.trim().is_empty())
    })
    .await?;
    for kind in ["certificates.cert-manager.io", "issuers.cert-manager.io"] {
        let left: Vec<String> = objects(cluster, kind)?
            .iter()
            .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
            .map(|o| o["metadata"]["name"].to_string())
            .collect();
        assert!(
            left.is_empty(),
            "{kind} left after the provider was deleted: {left:?}"
        );
    }

    // cert-manager removed, then back: the kinds' watches stop (rather than failing forever)
    // and start again.
    let said = |what: &'static str| {
        let logs = operator.logs();
        move |kind: &str| {
            logs.lines()
                .filter(|l| l.contains(what) && l.contains(&format!("\"{kind}\"")))
                .count()
        }
    };
    cluster.kubectl_ok(&[
        "delete",
        "-f",
        &crds.to_string_lossy(),
        "--wait=true",
        "--timeout=120s",
    ])?;
    until("the watches' end", Duration::from_secs(60), || {
        let stopped = said("kind no longer served");
        Ok(stopped("Certificate") == 1 && stopped("Issuer") == 1)
    })
    .await?;
    cluster.kubectl_ok(&["apply", "--server-side", "-f", &crds.to_string_lossy()])?;
    until("the watches' restart", Duration::from_secs(60), || {
        let started = said("kind served; watching");
        Ok(started("Certificate") == 2 && started("Issuer") == 2)
    })
    .await?;
    Ok(())
}
