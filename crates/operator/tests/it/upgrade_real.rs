//! End-to-end: the real Cluster API v1.11.0 core, kubeadm bootstrap and kubeadm control-plane
//! releases (air-gapped, from ConfigMaps) upgraded to v1.12.0 by changing spec.version, with a
//! custom resource of each provider kept across the upgrade.
//!
//! This test is about the operator's upgrade flow (apply, prune, keep CRDs and custom
//! resources) on kwok's pods, which serve nothing: the providers' webhooks could never answer,
//! so the provider objects use spec.patches to empty the webhook configurations and turn CRD
//! conversion off. The same upgrade with the real managers, live webhooks and a workload cluster
//! is `workload_cluster.rs`.

use crate::support;

use std::time::Duration;

use capi_test_support::wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, api::ListParams};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(180);

/// (kind, namespace, name, label, components file)
const PROVIDERS: [(&str, &str, &str, &str, &str); 3] = real::REAL_PROVIDERS;

fn manifest(version: &str) -> String {
    let patches = capi_test_support::indent(capi_test_support::NEUTRALIZING_PATCHES, 2);
    PROVIDERS
        .iter()
        .map(|(kind, ns, name, label, _)| {
            format!(
                "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  version: {version}\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {label}\n{patches}"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

const CUSTOM_RESOURCES: &str = r"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: workload-0
  namespace: default
spec:
  paused: true
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfig
metadata:
  name: workload-0-config
  namespace: default
spec:
  format: cloud-config
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlaneTemplate
metadata:
  name: workload-0-cp
  namespace: default
spec:
  template:
    spec:
      kubeadmConfigSpec:
        format: cloud-config
";

async fn images(client: &kube::Client, ns: &str) -> Vec<String> {
    let Ok(list) = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    else {
        return Vec::new();
    };
    list.into_iter()
        .filter_map(|d| {
            d.spec
                .map(|s| s.template.spec.unwrap_or_default().containers)
        })
        .flatten()
        .filter_map(|c| c.image)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_releases_upgrade_from_v1_11_to_v1_12_keeping_custom_resources() -> TestResult {
    let releases = capi_test_support::releases()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let (cluster, client) = cluster_with_crds().await?;
    for (_, ns, _, label, file) in PROVIDERS {
        cluster.ensure_namespace(ns)?;
        for v in ["v1.11.0", "v1.12.0"] {
            release_configmap_from_dir(
                &client,
                ns,
                &releases,
                label,
                v,
                file,
                &[("provider.cluster.x-k8s.io/name", label)],
            )
            .await?;
        }
    }
    let operator = start_operator(cluster, &[])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };

    apply(cluster, &manifest("v1.11.0"))?;
    for (kind, ns, name, _, _) in PROVIDERS {
        let p = wait_condition(&client, (kind, ns, name), "Ready", "True", None, T)
            .await
            .map_err(log)?;
        assert_eq!(
            p.pointer("/status/installedVersion"),
            Some(&Value::from("v1.11.0"))
        );
        assert!(
            images(&client, ns)
                .await
                .iter()
                .all(|i| i.ends_with(":v1.11.0")),
            "{kind}: v1.11.0 images expected"
        );
    }
    apply(cluster, CUSTOM_RESOURCES)?;

    apply(cluster, &manifest("v1.12.0"))?;
    for (kind, ns, name, _, _) in PROVIDERS {
        let p = wait_for(T, || async {
            let p = provider(&client, kind, ns, name).await?;
            let ready = condition(&p, "Ready")?.get("status")? == "True";
            let upgraded = condition(&p, "ProviderUpgraded")?.get("status")? == "True";
            (ready && upgraded && p.pointer("/status/installedVersion")? == "v1.12.0").then_some(p)
        })
        .await
        .ok_or_else(|| log(format!("{kind} not upgraded to v1.12.0").into()))?;
        assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));
        let imgs = images(&client, ns).await;
        assert!(
            !imgs.is_empty() && imgs.iter().all(|i| i.ends_with(":v1.12.0")),
            "{kind}: v1.12.0 images expected, got {imgs:?}"
        );
    }
    // The CRD only v1.12.0 has is installed; the custom resources survived.
    cluster.kubectl_ok(&["get", "crd", "ipaddresses.ipam.cluster.x-k8s.io"])?;
    for (resource, name) in [
        ("clusters.cluster.x-k8s.io", "workload-0"),
        (
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
            "workload-0-config",
        ),
        (
            "kubeadmcontrolplanetemplates.controlplane.cluster.x-k8s.io",
            "workload-0-cp",
        ),
    ] {
        cluster
            .kubectl_ok(&["get", resource, name, "-n", "default"])
            .map_err(|e| log(format!("{resource}/{name} lost in the upgrade: {e}").into()))?;
    }
    // Deleting the core provider is blocked while the others (and the Cluster) exist.
    cluster.kubectl_ok(&[
        "delete",
        "coreprovider",
        "cluster-api",
        "-n",
        "capi-system",
        "--wait=false",
    ])?;
    let p = wait_condition(
        &client,
        ("CoreProvider", "capi-system", "cluster-api"),
        "Deleting",
        "False",
        Some("DeletionBlocked"),
        Duration::from_secs(60),
    )
    .await
    .map_err(log)?;
    let message = condition(&p, "Deleting")
        .and_then(|c| c.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("BootstrapProvider") || message.contains("Cluster"),
        "the blocking condition should name what blocks it: {message}"
    );
    Ok(())
}
