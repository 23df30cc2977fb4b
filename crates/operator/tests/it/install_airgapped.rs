//! End-to-end: the real Cluster API v1.12.0 core, kubeadm bootstrap and kubeadm control-plane
//! releases installed air-gapped from ConfigMaps (fetchConfig.selector) by the operator running
//! against a private local control plane, with the spec's manager flags, an image override and
//! a Secret variable; then a restart that must not write anything.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
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
  CLUSTER_TOPOLOGY: "true"
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  version: v1.12.0
  secretName: capi-variables
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: cluster-api
  manager:
    syncPeriod: 7m
    additionalArgs:
      --cluster-concurrency: "7"
    featureGates:
      MachinePool: false
  deployment:
    containers:
      - name: manager
        image: registry.example.internal/capi/cluster-api-controller:v1.12.0-patched
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: BootstrapProvider
metadata:
  name: kubeadm
  namespace: capi-kubeadm-bootstrap-system
spec:
  version: v1.12.0
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: kubeadm
  manager:
    verbosity: 4
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: ControlPlaneProvider
metadata:
  name: kubeadm
  namespace: capi-kubeadm-control-plane-system
spec:
  version: v1.12.0
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: kubeadm
  deployment:
    replicas: 2
"#;

fn args_of(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

fn image_of(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn real_releases_install_from_configmaps() -> TestResult {
    let repo = capi_test_support::releases()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let (cluster, client) = cluster_with_crds().await?;
    for (ns, label, file, name) in [
        (
            "capi-system",
            "cluster-api",
            "core-components.yaml",
            "cluster-api",
        ),
        (
            "capi-kubeadm-bootstrap-system",
            "bootstrap-kubeadm",
            "bootstrap-components.yaml",
            "kubeadm",
        ),
        (
            "capi-kubeadm-control-plane-system",
            "control-plane-kubeadm",
            "control-plane-components.yaml",
            "kubeadm",
        ),
    ] {
        cluster.ensure_namespace(ns)?;
        release_configmap_from_dir(
            &client,
            ns,
            &repo,
            label,
            "v1.12.0",
            file,
            &[("provider.cluster.x-k8s.io/name", name)],
        )
        .await?;
    }

    let mut operator = start_operator(cluster, &[])?;
    apply(cluster, PROVIDERS)?;
    let started = std::time::Instant::now();
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
        // The real releases pass the provider contract checks.
        for c in [
            "PreflightCheckPassed",
            "ProviderInstalled",
            "ContractVerified",
        ] {
            assert_eq!(
                condition(&p, c).and_then(|c| c.get("status")),
                Some(&Value::from("True")),
                "{kind} {c}"
            );
        }
        assert_eq!(
            p.pointer("/status/observedGeneration"),
            p.pointer("/metadata/generation")
        );
    }
    eprintln!("three real providers Ready in {:?}", started.elapsed());
    // kubectl wait works on the Ready condition, as the specification's users expect.
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "--timeout=10s",
        "-n",
        "capi-system",
        "coreprovider/cluster-api",
    ])?;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "capi-system");
    let core = deployments.get("capi-controller-manager").await?;
    let args = args_of(&core);
    assert_eq!(
        image_of(&core),
        "registry.example.internal/capi/cluster-api-controller:v1.12.0-patched"
    );
    assert!(
        args.iter().any(|a| a.starts_with("--feature-gates=")
            && a.contains("MachinePool=false")
            && a.contains("ClusterTopology=true")),
        "{args:?}"
    );
    assert!(args.contains(&"--sync-period=7m".to_string()), "{args:?}");
    assert!(
        args.contains(&"--cluster-concurrency=7".to_string()),
        "{args:?}"
    );
    let bootstrap = Api::<Deployment>::namespaced(client.clone(), "capi-kubeadm-bootstrap-system")
        .get("capi-kubeadm-bootstrap-controller-manager")
        .await?;
    assert!(
        args_of(&bootstrap).contains(&"--v=4".to_string()),
        "{:?}",
        args_of(&bootstrap)
    );
    let cp = Api::<Deployment>::namespaced(client.clone(), "capi-kubeadm-control-plane-system")
        .get("capi-kubeadm-control-plane-controller-manager")
        .await?;
    assert_eq!(cp.spec.as_ref().and_then(|s| s.replicas), Some(2));

    // Every installed object carries the clusterctl labels and the operator's owner labels.
    let all = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default().labels("management.cluster.x-k8s.io/owner-kind"))
        .await?;
    assert_eq!(
        all.items.len(),
        3,
        "one Deployment per provider, no duplicates"
    );
    for d in &all.items {
        let labels = d.metadata.labels.clone().unwrap_or_default();
        assert!(
            labels.contains_key("cluster.x-k8s.io/provider"),
            "{labels:?}"
        );
        assert!(
            labels.contains_key("clusterctl.cluster.x-k8s.io"),
            "{labels:?}"
        );
    }

    // A restarted operator finds everything in place: it converges without changing anything.
    let before = core.metadata.resource_version.clone();
    operator.kill();
    let operator = start_operator(cluster, &[])?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = deployments.get("capi-controller-manager").await?;
    assert_eq!(
        after.metadata.resource_version, before,
        "restart changed the Deployment"
    );
    let p = provider(&client, "CoreProvider", "capi-system", "cluster-api")
        .await
        .ok_or("core gone")?;
    assert_eq!(
        condition(&p, "Ready").and_then(|c| c.get("status")),
        Some(&Value::from("True"))
    );
    assert!(!operator.logs().contains("panicked"), "{}", operator.logs());
    Ok(())
}
