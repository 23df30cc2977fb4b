//! `spec.deletionPolicy` on a private local control plane with the sample core release, one
//! install reused for every step: Orphan leaves everything (Deployment, CRD, namespace,
//! clusterctl inventory entry) and a new provider object adopts it without touching the
//! Deployment's pod template; Purge waits while a custom resource exists and while the
//! namespace holds a user's object, then removes the CRD and the namespace. Block, the
//! default, is `lifecycle::pause_contract_upgrade_and_delete`.

use crate::support;

use std::time::Duration;

use capi_test_support::{private_cluster, wait_for};
use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::Namespace},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);
const NS: &str = "dp-core";
// The components go to the provider object's namespace, as clusterctl's target namespace.
const TARGET: &str = NS;
const DEPLOYMENT: &str = "sample-core-controller-manager";
const CRD: &str = "samplewidgets.core.sample.capi-operator.example";
const CORE: (&str, &str, &str) = ("CoreProvider", NS, "cluster-api");

fn manifest(policy: &str) -> String {
    format!(
        "{}  deletionPolicy: {policy}\n",
        core_provider(NS, "v0.2.0", 2)
    )
}

/// The Deployment's uid, generation and pod template.
async fn deployment(client: &Client) -> Option<(String, i64, Value)> {
    let d = Api::<Deployment>::namespaced(client.clone(), TARGET)
        .get_opt(DEPLOYMENT)
        .await
        .ok()??;
    let template = serde_json::to_value(&d.spec.as_ref()?.template).ok()?;
    Some((d.metadata.uid?, d.metadata.generation?, template))
}

async fn inventory_entries(client: &Client) -> Result<usize, kube::Error> {
    let gvk = GroupVersionKind::gvk("clusterctl.cluster.x-k8s.io", "v1alpha3", "Provider");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), TARGET, &ApiResource::from_gvk(&gvk));
    Ok(api.list(&Default::default()).await?.items.len())
}

async fn gone(client: &Client) -> Option<()> {
    provider(client, CORE.0, CORE.1, CORE.2)
        .await
        .is_none()
        .then_some(())
}

#[tokio::test]
async fn orphan_is_adopted_unchanged_and_purge_waits_then_removes_crds_and_namespace() -> TestResult
{
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };
    load_core(cluster, &client, NS).await?;

    // Orphan: deleting the object leaves everything it installed.
    apply(cluster, &manifest("Orphan"))?;
    wait_condition(&client, CORE, "Ready", "True", None, T)
        .await
        .map_err(log)?;
    let listed = cluster.kubectl_ok(&["get", "coreprovider", "-n", NS])?;
    assert!(
        listed.contains("DELETION") && listed.contains("Orphan"),
        "{listed}"
    );
    let before = deployment(&client).await.ok_or("no Deployment")?;
    assert_eq!(inventory_entries(&client).await?, 1);
    cluster.kubectl_ok(&[
        "delete",
        "coreprovider/cluster-api",
        "-n",
        NS,
        "--timeout=60s",
    ])?;
    wait_for(T, || gone(&client))
        .await
        .ok_or_else(|| log("the Orphan provider object was not released".into()))?;
    assert_eq!(deployment(&client).await.as_ref(), Some(&before));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds.get_opt(CRD).await?.is_some(), "Orphan removed the CRD");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(namespaces.get_opt(TARGET).await?.is_some());
    assert_eq!(
        inventory_entries(&client).await?,
        1,
        "inventory entry removed"
    );
    let events = cluster.kubectl_ok(&[
        "get",
        "events",
        "-n",
        NS,
        "--field-selector",
        "reason=Orphaned",
        "-o",
        "name",
    ])?;
    assert!(!events.trim().is_empty(), "no Orphaned event");

    // A new object of the same kind, namespace and name adopts it: the Deployment is not
    // written again (same generation, same pod template: no restart of the manager).
    apply(cluster, &manifest("Purge"))?;
    wait_condition(&client, CORE, "Ready", "True", None, T)
        .await
        .map_err(log)?;
    assert_eq!(deployment(&client).await.as_ref(), Some(&before));

    // Purge waits while a custom resource exists, removing nothing.
    apply(
        cluster,
        "apiVersion: core.sample.capi-operator.example/v1beta2\nkind: SampleWidget\nmetadata:\n  name: widget-0\n  namespace: default\nspec: {}\n",
    )?;
    cluster.kubectl_ok(&["create", "configmap", "user-notes", "-n", TARGET])?;
    cluster.kubectl_ok(&[
        "delete",
        "coreprovider/cluster-api",
        "-n",
        NS,
        "--wait=false",
    ])?;
    let p = wait_condition(
        &client,
        CORE,
        "Deleting",
        "False",
        Some("DeletionBlocked"),
        T,
    )
    .await
    .map_err(log)?;
    let msg = condition_message(&p, "Deleting");
    assert!(msg.contains("SampleWidget default/widget-0"), "{msg}");
    assert!(
        deployment(&client).await.is_some(),
        "a blocked Purge removed components"
    );

    // Then while the namespace holds an object the provider did not install.
    cluster.kubectl_ok(&["delete", "samplewidget/widget-0", "-n", "default"])?;
    let p = wait_condition(&client, CORE, "Deleting", "False", Some("PurgeBlocked"), T)
        .await
        .map_err(log)?;
    let msg = condition_message(&p, "Deleting");
    assert!(
        msg.contains(&format!("ConfigMap {TARGET}/user-notes")),
        "{msg}"
    );
    assert!(
        crds.get_opt(CRD).await?.is_some(),
        "CRD removed while Purge waits"
    );
    assert!(
        deployment(&client).await.is_none(),
        "components not removed"
    );

    // Once it is gone, the CRD and the namespace go with the provider.
    cluster.kubectl_ok(&["delete", "configmap/user-notes", "-n", TARGET])?;
    wait_for(T, || gone(&client))
        .await
        .ok_or_else(|| log("the Purge provider object was not released".into()))?;
    wait_for(T, || async {
        crds.get_opt(CRD).await.ok()?.is_none().then_some(())
    })
    .await
    .ok_or("the CRD was not removed")?;
    let ns = namespaces.get_opt(TARGET).await?;
    assert!(
        ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "the namespace was not removed"
    );
    Ok(())
}
