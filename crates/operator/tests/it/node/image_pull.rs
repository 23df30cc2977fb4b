//! Manager images on the real node (`cluster-up.sh --real-node`: containerd pulls through the
//! registry mirror of `make images`): the operator installs cert-manager and the real v1.12.0
//! core provider, whose image override points first to a tag the registry does not have, then
//! to a private repository without its pull secret: both fail the way they fail for users and
//! Ready says `ManagerImageUnavailable`, naming the image and the kubelet's message, with a
//! Warning event. With `spec.deployment.imagePullSecrets` the private image is pulled and the
//! provider becomes Ready: the condition clears once the image can be had.

use crate::support;

use std::time::Duration;

use capi_test_support::{TestCluster, cluster_setting, wait_for};
use support::{real::*, *};

const T: Duration = Duration::from_secs(240);
const CORE: (&str, &str, &str) = ("CoreProvider", "capi-system", "cluster-api");
const RELEASE_IMAGE: &str = "registry.k8s.io/cluster-api/cluster-api-controller";

/// The core provider on the real node with `image` for its manager and `pull_secrets`.
fn core_provider(image: &str, pull_secrets: &str) -> String {
    format!(
        r#"apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata: {{name: cluster-api, namespace: capi-system}}
spec:
  version: v1.12.0
  fetchConfig: {{selector: {{matchLabels: {{provider.cluster.x-k8s.io/name: cluster-api}}}}}}
  deployment:
    nodeSelector: {{capi-provider-operator.dev/real-node: "true"}}
    tolerations: [{{key: capi-provider-operator.dev/real-node, operator: Exists, effect: NoSchedule}}]
    imagePullSecrets: {pull_secrets}
    containers: [{{name: manager, image: "{image}"}}]
"#
    )
}

/// Waits until Ready is False for `ManagerImageUnavailable` naming `image` (a condition left
/// from an earlier image names that one) and says what the kubelet said: `kubelet_says`.
async fn unavailable(
    client: &kube::Client,
    image: &str,
    kubelet_says: &str,
    operator: &capi_test_support::OperatorProcess,
) -> Result<String, Box<dyn std::error::Error>> {
    let last = std::sync::Mutex::new(String::new());
    let found = wait_for(T, || async {
        let p = provider(client, CORE.0, CORE.1, CORE.2).await?;
        let c = condition(&p, "Ready")?;
        let message = condition_message(&p, "Ready");
        if let Ok(mut l) = last.lock() {
            *l = format!("{c}");
        }
        let names = c["reason"] == "ManagerImageUnavailable" && message.contains(image);
        (c["status"] == "False" && names).then_some(message)
    })
    .await;
    let last = last.lock().map(|l| l.clone()).unwrap_or_default();
    let message = found.ok_or_else(|| {
        format!(
            "Ready never named {image} as unavailable; last: {last}\n--- operator log ---\n{}",
            operator.logs()
        )
    })?;
    assert!(
        message.contains(kubelet_says),
        "Ready gives the kubelet's '{kubelet_says}': {message}"
    );
    Ok(message)
}

/// The messages of the operator's Warning events with `reason` about the core provider.
fn events(cluster: &TestCluster, reason: &str) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let list = cluster.get_json(&[
        "events",
        "-n",
        "capi-system",
        "--field-selector",
        &format!("involvedObject.kind=CoreProvider,reason={reason},type=Warning"),
    ])?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str().map(String::from))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_is_reported_until_it_can() -> TestResult {
    let test = "an_image_that_cannot_be_pulled_is_reported_until_it_can";
    let parts = real_node_parts()?;
    let _area = capi_test_support::isolated(module_path!()).await;
    let cluster = real_node(test)?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    install_cert_manager(cluster, &client, &parts)?;
    load_real_releases(cluster, &client, &parts.releases, &["v1.12.0"]).await?;
    let operator = start_operator(cluster, &[])?;

    // A tag the registry does not have: the kubelet's ErrImagePull says "not found".
    let wrong = format!("{RELEASE_IMAGE}:v0.0.0-missing");
    apply(cluster, &core_provider(&wrong, "[]"))?;
    let message = unavailable(&client, &wrong, "not found", &operator).await?;
    let warned = events(cluster, "ManagerImageUnavailable")?;
    assert!(
        warned.iter().any(|m| m.contains(&wrong)),
        "a Warning event ManagerImageUnavailable names {wrong}: {warned:?} (condition: {message})"
    );

    // A private repository: refused without the pull secret...
    let host = cluster_setting(cluster, "REAL_NODE_PRIVATE_HOST").ok_or("no private registry")?;
    let private = format!("{host}/private/cluster-api-controller:v1.12.0");
    apply(cluster, &core_provider(&private, "[]"))?;
    unavailable(&client, &private, "401 Unauthorized", &operator).await?;

    // ...pulled with it, through the provider's spec.deployment.imagePullSecrets: Ready.
    let password = std::fs::read_to_string(cluster.dir().join("registry/private-password"))?;
    let secret = [
        "create",
        "secret",
        "docker-registry",
        "private-pull",
        "-n",
        "capi-system",
        &format!("--docker-server={host}"),
        "--docker-username=pull",
    ];
    let password_arg = format!("--docker-password={}", password.trim());
    cluster.kubectl_ok(&[&secret[..], &[password_arg.as_str()]].concat())?;
    apply(cluster, &core_provider(&private, "[{name: private-pull}]"))?;
    let p = wait_installed(&client, CORE, "v1.12.0", &operator).await?;
    let ready = condition_message(&p, "Ready");
    assert!(
        !ready.contains(password.trim()),
        "no secret in the condition"
    );
    // Ready: the manager pod on the real node runs the private image and passed its probe.
    let node = capi_test_support::REAL_NODE_NAME;
    let running: Vec<String> = pods(&client, "capi-system")
        .await
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter_map(|p| p.status?.container_statuses)
        .flatten()
        .filter(|c| c.ready)
        .map(|c| c.image)
        .collect();
    assert!(
        running.contains(&private),
        "the ready manager on the real node runs {private}: {running:?}"
    );
    Ok(())
}
