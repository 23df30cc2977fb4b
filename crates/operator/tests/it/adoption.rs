//! A user's object with the name of one of the release's objects, on a local control plane:
//! the user created a Deployment named as the sample core's manager in the namespace the core
//! provider then installs into. The operator refuses to take it over
//! (`ObjectNotInstalledByProvider`, naming it), writes nothing of the release and leaves the
//! user's Deployment exactly as it was; once the user deletes it, the provider installs.

use crate::support;

use std::time::Duration;

use capi_test_support::private_cluster;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ServiceAccount};
use kube::Api;
use support::*;

const NS: &str = "adoption-core";
const T: Duration = Duration::from_secs(90);

fn users_deployment() -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sample-core-controller-manager\n  namespace: {NS}\n  labels: {{app: mine}}\nspec:\n  replicas: 0\n  selector: {{matchLabels: {{app: mine}}}}\n  template:\n    metadata: {{labels: {{app: mine}}}}\n    spec:\n      containers: [{{name: mine, image: registry.example/mine:v1}}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_object_with_a_release_objects_name_is_not_taken_over() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    load_core(cluster, &client, NS).await?;
    apply(cluster, &users_deployment())?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), NS);
    let before = deployments.get("sample-core-controller-manager").await?;
    let op = start_operator(cluster, &[])?;
    apply(cluster, &core_provider(NS, "v0.2.0", 1))?;
    let p = wait_condition(
        &client,
        ("CoreProvider", NS, "cluster-api"),
        "ProviderInstalled",
        "False",
        Some("ObjectNotInstalledByProvider"),
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", op.logs()))?;
    let message = condition_message(&p, "ProviderInstalled");
    assert!(
        message.contains("Deployment adoption-core/sample-core-controller-manager")
            && message.contains("cluster.x-k8s.io/provider=cluster-api"),
        "{message}"
    );
    // (Its status moves with the cluster's Deployment controller; its labels, spec and
    // writers are the user's alone.)
    let after = deployments.get("sample-core-controller-manager").await?;
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(after.spec, before.spec);
    let writers: Vec<_> = after
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert!(
        !writers.contains(&"capi-provider-operator"),
        "the operator wrote the user's Deployment: {writers:?}"
    );
    // Nothing of the release was applied: not even its ServiceAccount.
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .get_opt("sample-core-manager")
        .await?;
    assert!(sa.is_none(), "the release was partly applied");

    // Once the user removes it, the provider installs.
    cluster.kubectl_ok(&[
        "delete",
        "deployment",
        "-n",
        NS,
        "sample-core-controller-manager",
    ])?;
    wait_installed(&client, ("CoreProvider", NS, "cluster-api"), "v0.2.0", &op).await?;
    Ok(())
}
