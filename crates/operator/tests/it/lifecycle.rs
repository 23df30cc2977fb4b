//! End-to-end lifecycle on a private local control plane with the project's sample releases
//! (v0.1.x follow contract v1beta1, v0.2.x contract v1beta2): pause and unpause, the contract
//! rule (a contract-changing upgrade refused until every provider is paused, unpause refused
//! while contracts disagree), upgrades keeping custom resources and pruning what the old
//! version alone had, a refused downgrade, and deletion blocked by custom resources and, for
//! the core provider, by other providers.

use crate::support;

use std::time::Duration;

use capi_test_support::{TestCluster, private_cluster, wait_for};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::{Api, Client};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);

struct P {
    kind: &'static str,
    ns: &'static str,
    name: &'static str,
    label: &'static str,
    file: &'static str,
    deployment: &'static str,
}

const CORE: P = P {
    kind: "CoreProvider",
    ns: "lc-core",
    name: "cluster-api",
    label: "sample-core",
    file: "core-components.yaml",
    deployment: "sample-core-controller-manager",
};
const BOOT: P = P {
    kind: "BootstrapProvider",
    ns: "lc-bootstrap",
    name: "sample",
    label: "sample-bootstrap",
    file: "bootstrap-components.yaml",
    deployment: "sample-bootstrap-controller-manager",
};
const INFRA: P = P {
    kind: "InfrastructureProvider",
    ns: "lc-infra",
    name: "sample",
    label: "sample-infrastructure",
    file: "infrastructure-components.yaml",
    deployment: "sample-infra-controller-manager",
};

fn manifest(p: &P, version: &str, paused: bool) -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {}\nmetadata:\n  name: {}\n  namespace: {}\nspec:\n  version: {version}\n  paused: {paused}\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {}\n",
        p.kind, p.name, p.ns, p.label
    )
}

async fn setup(cluster: &TestCluster, client: &Client, p: &P) -> TestResult {
    cluster.ensure_namespace(p.ns)?;
    for v in ["v0.1.0", "v0.2.0"] {
        release_configmap_from_dir(
            client,
            p.ns,
            &samples(),
            p.label,
            v,
            p.file,
            &[("provider.cluster.x-k8s.io/name", p.label)],
        )
        .await?;
    }
    Ok(())
}

async fn replicas(client: &Client, p: &P) -> Option<(i32, Option<String>)> {
    let d = Api::<Deployment>::namespaced(client.clone(), p.ns)
        .get_opt(p.deployment)
        .await
        .ok()??;
    let ann = d.metadata.annotations.as_ref().and_then(|a| {
        a.get("management.cluster.x-k8s.io/original-controller-replicas")
            .cloned()
    });
    Some((d.spec?.replicas?, ann))
}

async fn wait_replicas(client: &Client, p: &P, want: i32, annotated: bool) -> TestResult {
    wait_for(T, || async {
        let (r, a) = replicas(client, p).await?;
        (r == want && a.is_some() == annotated).then_some(())
    })
    .await
    .ok_or_else(|| {
        format!(
            "{} {}: replicas {want} (annotated {annotated}) not reached",
            p.kind, p.ns
        )
        .into()
    })
}

async fn installed(client: &Client, p: &P) -> Option<Value> {
    let o = provider(client, p.kind, p.ns, p.name).await?;
    o.pointer("/status/installedVersion").cloned()
}

#[tokio::test]
async fn pause_contract_upgrade_and_delete() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };

    for p in [&CORE, &BOOT, &INFRA] {
        setup(cluster, &client, p).await?;
    }
    apply(cluster, &manifest(&CORE, "v0.1.0", false))?;
    wait_condition(
        &client,
        (CORE.kind, CORE.ns, CORE.name),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(log)?;
    for p in [&BOOT, &INFRA] {
        apply(cluster, &manifest(p, "v0.1.0", false))?;
        wait_condition(&client, (p.kind, p.ns, p.name), "Ready", "True", None, T)
            .await
            .map_err(log)?;
    }
    // A custom resource of the infrastructure provider: a workload cluster's machine, say.
    apply(
        cluster,
        "apiVersion: infrastructure.sample.capi-operator.example/v1beta1\nkind: SampleMachine\nmetadata:\n  name: machine-0\n  namespace: default\nspec:\n  size: small\n",
    )?;

    // Pause then unpause restores the replica count.
    apply(cluster, &manifest(&INFRA, "v0.1.0", true))?;
    wait_replicas(&client, &INFRA, 0, true).await.map_err(log)?;
    let p = wait_condition(
        &client,
        (INFRA.kind, INFRA.ns, INFRA.name),
        "Paused",
        "True",
        Some("Paused"),
        T,
    )
    .await?;
    assert_eq!(
        replicas(&client, &INFRA).await.and_then(|r| r.1).as_deref(),
        Some("1"),
        "{p}"
    );
    apply(cluster, &manifest(&INFRA, "v0.1.0", false))?;
    wait_replicas(&client, &INFRA, 1, false)
        .await
        .map_err(log)?;
    wait_condition(
        &client,
        (INFRA.kind, INFRA.ns, INFRA.name),
        "Paused",
        "False",
        None,
        T,
    )
    .await?;

    // A contract-changing core upgrade is refused while any provider runs.
    apply(cluster, &manifest(&CORE, "v0.2.0", false))?;
    wait_condition(
        &client,
        (CORE.kind, CORE.ns, CORE.name),
        "PreflightCheckPassed",
        "False",
        Some("ContractChangeRequiresPause"),
        T,
    )
    .await
    .map_err(log)?;
    assert_eq!(installed(&client, &CORE).await, Some(Value::from("v0.1.0")));
    assert_eq!(replicas(&client, &CORE).await.map(|r| r.0), Some(1));

    // Everything paused: the core upgrade goes through, its controller stays down.
    for p in [&BOOT, &INFRA] {
        apply(cluster, &manifest(p, "v0.1.0", true))?;
        wait_replicas(&client, p, 0, true).await.map_err(log)?;
    }
    apply(cluster, &manifest(&CORE, "v0.2.0", true))?;
    let core = wait_for(T, || async {
        let o = provider(&client, CORE.kind, CORE.ns, CORE.name).await?;
        (o.pointer("/status/installedVersion") == Some(&Value::from("v0.2.0"))).then_some(o)
    })
    .await
    .ok_or_else(|| log("core upgrade under pause did not happen".into()))?;
    assert_eq!(
        core.pointer("/status/contract"),
        Some(&Value::from("v1beta2"))
    );
    assert_eq!(
        condition(&core, "ProviderUpgraded").and_then(|c| c.get("status")),
        Some(&Value::from("True"))
    );
    wait_replicas(&client, &CORE, 0, true).await.map_err(log)?;
    // The object only v0.1.0 had is gone; the CRD and the custom resource stay.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), CORE.ns);
    wait_for(T, || async {
        cms.get_opt("sample-core-legacy-settings")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .ok_or_else(|| log("legacy object not pruned".into()))?;

    // Unpausing the core is refused while the others follow the old contract.
    apply(cluster, &manifest(&CORE, "v0.2.0", false))?;
    wait_condition(
        &client,
        (CORE.kind, CORE.ns, CORE.name),
        "Paused",
        "True",
        Some("UnpauseRefused"),
        T,
    )
    .await
    .map_err(log)?;
    assert_eq!(replicas(&client, &CORE).await.map(|r| r.0), Some(0));

    // Upgrade the others while paused, then everything unpauses.
    for p in [&BOOT, &INFRA] {
        apply(cluster, &manifest(p, "v0.2.0", true))?;
        wait_for(T, || async {
            (installed(&client, p).await? == "v0.2.0").then_some(())
        })
        .await
        .ok_or_else(|| log(format!("{} not upgraded", p.kind).into()))?;
    }
    for p in [&BOOT, &INFRA] {
        apply(cluster, &manifest(p, "v0.2.0", false))?;
    }
    for p in [&CORE, &BOOT, &INFRA] {
        wait_replicas(&client, p, 1, false).await.map_err(log)?;
        wait_condition(&client, (p.kind, p.ns, p.name), "Ready", "True", None, T)
            .await
            .map_err(log)?;
    }
    cluster.kubectl_ok(&[
        "get",
        "samplemachines.infrastructure.sample.capi-operator.example",
        "-n",
        "default",
        "machine-0",
    ])?;

    // A minor downgrade is refused and changes nothing.
    apply(cluster, &manifest(&INFRA, "v0.1.0", false))?;
    wait_condition(
        &client,
        (INFRA.kind, INFRA.ns, INFRA.name),
        "PreflightCheckPassed",
        "False",
        Some("UnsupportedProviderDowngrade"),
        T,
    )
    .await
    .map_err(log)?;
    assert_eq!(
        installed(&client, &INFRA).await,
        Some(Value::from("v0.2.0"))
    );
    apply(cluster, &manifest(&INFRA, "v0.2.0", false))?;

    // Deletion is blocked while a custom resource exists, and the core's while others exist.
    cluster.kubectl_ok(&[
        "delete",
        "--wait=false",
        "-n",
        INFRA.ns,
        "infrastructureprovider/sample",
    ])?;
    let p = wait_condition(
        &client,
        (INFRA.kind, INFRA.ns, INFRA.name),
        "Deleting",
        "False",
        Some("DeletionBlocked"),
        T,
    )
    .await
    .map_err(log)?;
    let msg = condition_message(&p, "Deleting");
    assert!(msg.contains("SampleMachine default/machine-0"), "{msg}");
    cluster.kubectl_ok(&[
        "delete",
        "--wait=false",
        "-n",
        CORE.ns,
        "coreprovider/cluster-api",
    ])?;
    let p = wait_condition(
        &client,
        (CORE.kind, CORE.ns, CORE.name),
        "Deleting",
        "False",
        Some("DeletionBlocked"),
        T,
    )
    .await
    .map_err(log)?;
    let msg = condition_message(&p, "Deleting");
    assert!(
        msg.contains("BootstrapProvider lc-bootstrap/sample"),
        "{msg}"
    );
    assert_eq!(
        replicas(&client, &INFRA).await.map(|r| r.0),
        Some(1),
        "a blocked deletion removed components"
    );

    cluster.kubectl_ok(&[
        "delete",
        "-n",
        "default",
        "samplemachines.infrastructure.sample.capi-operator.example/machine-0",
    ])?;
    cluster.kubectl_ok(&[
        "delete",
        "--wait=false",
        "-n",
        BOOT.ns,
        "bootstrapprovider/sample",
    ])?;
    for p in [&INFRA, &BOOT, &CORE] {
        wait_for(T, || async {
            provider(&client, p.kind, p.ns, p.name)
                .await
                .is_none()
                .then_some(())
        })
        .await
        .ok_or_else(|| log(format!("{} not deleted", p.kind).into()))?;
        assert!(
            replicas(&client, p).await.is_none(),
            "{} Deployment left behind",
            p.kind
        );
    }
    // CRDs and namespaces are kept.
    cluster.kubectl_ok(&[
        "get",
        "crd",
        "samplemachines.infrastructure.sample.capi-operator.example",
    ])?;
    cluster.kubectl_ok(&["get", "namespace", INFRA.ns])?;
    Ok(())
}
