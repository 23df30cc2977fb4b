//! End-to-end: the real Cluster API v1.12.0 core, kubeadm bootstrap and kubeadm control-plane
//! releases installed by name (the default repository kubernetes-sigs/cluster-api) from a local
//! GitHub-compatible server, with a Secret variable; the releases are cached in the cluster so
//! a restarted operator fetches nothing again.

use crate::support;

use std::time::Duration;

use capi_fake_remotes::FakeServer;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::{Api, api::ListParams};
use serde_json::Value;
use support::*;

const PROVIDERS: &str = r#"
apiVersion: v1
kind: Secret
metadata:
  name: capi-variables
  namespace: capi-system
stringData:
  EXP_RUNTIME_SDK: "true"
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  version: v1.12.0
  secretName: capi-variables
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: BootstrapProvider
metadata:
  name: kubeadm
  namespace: capi-kubeadm-bootstrap-system
spec:
  version: v1.12.0
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: ControlPlaneProvider
metadata:
  name: kubeadm
  namespace: capi-kubeadm-control-plane-system
spec:
  version: v1.12.0
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_releases_install_from_github() -> TestResult {
    let releases = capi_test_support::releases()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let (cluster, client) = cluster_with_crds().await?;
    let github = FakeServer::start(
        &releases,
        &[(
            "kubernetes-sigs/cluster-api",
            &["cluster-api", "bootstrap-kubeadm", "control-plane-kubeadm"],
        )],
    )
    .await?;
    for ns in [
        "capi-system",
        "capi-kubeadm-bootstrap-system",
        "capi-kubeadm-control-plane-system",
    ] {
        cluster.ensure_namespace(ns)?;
    }
    let mut operator = start_operator(cluster, &["--github-api-url", github.url()])?;
    apply(cluster, PROVIDERS)?;
    for (kind, ns, name) in [
        ("CoreProvider", "capi-system", "cluster-api"),
        (
            "BootstrapProvider",
            "capi-kubeadm-bootstrap-system",
            "kubeadm",
        ),
        (
            "ControlPlaneProvider",
            "capi-kubeadm-control-plane-system",
            "kubeadm",
        ),
    ] {
        let p = wait_installed(&client, (kind, ns, name), "v1.12.0", &operator).await?;
        assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));
    }
    let core = Api::<Deployment>::namespaced(client.clone(), "capi-system")
        .get("capi-controller-manager")
        .await?;
    let args = core
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.args)
        .unwrap_or_default();
    assert!(
        args.iter().any(|a| a.contains("RuntimeSDK=true")),
        "{args:?}"
    );

    // The fetched releases are cached in the cluster (the core one gzip-compressed)...
    let cache: Api<ConfigMap> = Api::namespaced(client.clone(), "capi-system");
    let cached = cache
        .list(&ListParams::default().labels("management.cluster.x-k8s.io/release-cache"))
        .await?;
    assert_eq!(cached.items.len(), 1);
    assert!(
        cached.items[0]
            .binary_data
            .as_ref()
            .is_some_and(|b| b.contains_key("components"))
    );
    // ...so a restarted operator fetches nothing.
    let downloads = github.count("/releases/assets/");
    assert!(downloads >= 6, "{downloads} downloads");
    operator.kill();
    let operator = start_operator(cluster, &["--github-api-url", github.url()])?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        github.count("/releases/assets/"),
        downloads,
        "restart fetched again"
    );
    let p = provider(&client, "CoreProvider", "capi-system", "cluster-api")
        .await
        .ok_or("gone")?;
    assert_eq!(
        condition(&p, "Ready").and_then(|c| c.get("status")),
        Some(&Value::from("True"))
    );

    // An unreachable source on a version change leaves the installed version running.
    github.knobs().fail_next(1000);
    apply(
        cluster,
        &PROVIDERS.replace(
            "version: v1.12.0\n  secretName",
            "version: v1.12.1\n  secretName",
        ),
    )?;
    let p = wait_condition(
        &client,
        ("CoreProvider", "capi-system", "cluster-api"),
        "ProviderInstalled",
        "False",
        Some("SourceUnavailable"),
        Duration::from_secs(120),
    )
    .await
    .map_err(|e| format!("{e}\noperator log:\n{}", operator.logs()))?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v1.12.0"))
    );
    Ok(())
}
