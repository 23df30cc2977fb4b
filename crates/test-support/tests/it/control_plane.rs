//! The local control plane is real: Deployments become Available through
//! kube-controller-manager, kube-scheduler and kwok, and /version reports the built release.

use std::time::Duration;

use capi_test_support::{cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, api::PostParams};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[tokio::test]
async fn deployment_becomes_available() -> TestResult {
    let cluster = cluster()?;
    let client = cluster.client().await?;
    let ns = cluster.namespace(&client, "cp-deploy").await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "registry.example/web:1" }] }
            }
        }
    }))?;
    deployments
        .create(&PostParams::default(), &deployment)
        .await?;
    let available = wait_for(Duration::from_secs(60), || async {
        let d = deployments.get("web").await.ok()?;
        let status = d.status?;
        let cond = status
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Available")?;
        (cond.status == "True" && status.ready_replicas == Some(2)).then_some(())
    })
    .await;
    assert!(
        available.is_some(),
        "Deployment did not become Available with 2 ready replicas within 60 s"
    );
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn version_is_the_built_release() -> TestResult {
    let cluster = cluster()?;
    let client = cluster.client().await?;
    let info = client.apiserver_version().await?;
    let versions = std::fs::read_to_string(
        capi_test_support::workspace_root().join("e2e/scripts/versions.env"),
    )?;
    let want = versions
        .lines()
        .find_map(|l| l.strip_prefix("KUBE_VERSION="))
        .ok_or("KUBE_VERSION missing from versions.env")?;
    assert_eq!(info.git_version, want);
    assert_ne!(info.git_version, "v0.0.0");
    assert_eq!(info.major, "1");
    Ok(())
}

#[tokio::test]
async fn readyz_answers_ok() -> TestResult {
    let cluster = cluster()?;
    let client = cluster.client().await?;
    let req = http::Request::get("/readyz").body(Vec::new())?;
    let body = client.request_text(req).await?;
    assert_eq!(body.trim(), "ok");
    Ok(())
}
