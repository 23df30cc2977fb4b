//! End-to-end: the operator-wide image mirror. A provider installed with the setting (flags,
//! and the ConfigMap the operator watches over them) runs its images from the mirror with the
//! pull secrets added; a change of the ConfigMap renders it again with the new images; a
//! malformed one is reported on the provider and leaves what is installed untouched.

use crate::support;

use std::time::Duration;

use capi_test_support::{private_cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use support::*;

const T: Duration = Duration::from_secs(90);
const NS: &str = "mirror-core";
const OPS: &str = "mirror-ops";
const DEPLOYMENT: &str = "sample-core-controller-manager";

fn mirror_configmap(images: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: image-mirror\n  namespace: {OPS}\ndata:\n  imagePullSecrets: '[mirror-pull]'\n  images: |\n    {images}\n"
    )
}

/// Waits until the provider's Deployment runs `image` with `secrets` as its pull secrets.
async fn deployment_becomes(client: &kube::Client, image: &str, secrets: &[&str]) -> bool {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    wait_for(T, || async {
        let d = deployments.get(DEPLOYMENT).await.ok()?;
        let pod = d.spec?.template.spec?;
        let pulled: Vec<String> = pod
            .image_pull_secrets
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.name)
            .collect();
        (pod.containers.first()?.image.as_deref() == Some(image) && pulled == secrets).then_some(())
    })
    .await
    .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_setting_moves_every_image_and_follows_its_configmap() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    load_core(cluster, &client, NS).await?;
    cluster.ensure_namespace(OPS)?;
    apply(
        cluster,
        &mirror_configmap("all: {repository: mirror.example/capi}"),
    )?;
    let op = start_operator(
        cluster,
        &[
            "--image-pull-secrets=flag-pull",
            &format!("--image-mirror-config={OPS}/image-mirror"),
        ],
    )?;
    apply(cluster, &core_provider(NS, "v0.2.0", 2))?;
    let secrets = ["flag-pull", "mirror-pull"];
    assert!(
        deployment_becomes(&client, "mirror.example/capi/pause:3.10", &secrets).await,
        "{}",
        op.logs()
    );

    // The watched ConfigMap changes: every provider is rendered again; a per-component entry
    // goes over the all entry.
    apply(
        cluster,
        &mirror_configmap(
            "all: {repository: mirror.example/capi}\n    cluster-api: {repository: other.example/core}",
        ),
    )?;
    assert!(
        deployment_becomes(&client, "other.example/core/pause:3.10", &secrets).await,
        "{}",
        op.logs()
    );

    // Malformed: reported on the provider, and the installed Deployment keeps its images.
    apply(cluster, &mirror_configmap("all: [not, a, mapping]"))?;
    let key = ("CoreProvider", NS, "cluster-api");
    let p = wait_condition(
        &client,
        key,
        "Stalled",
        "True",
        Some("ImageMirrorInvalid"),
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", op.logs()))?;
    let message = condition_message(&p, "Stalled");
    assert!(
        message.contains(&format!("ConfigMap {OPS}/image-mirror")),
        "{message}"
    );
    assert!(
        deployment_becomes(&client, "other.example/core/pause:3.10", &secrets).await,
        "the Deployment was changed: {}",
        op.logs()
    );
    Ok(())
}
