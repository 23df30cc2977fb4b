//! End-to-end with real providers: the real Cluster API v1.11.0 core, kubeadm bootstrap and
//! kubeadm control-plane managers, installed by the operator on the process node with
//! cert-manager and live webhooks, upgraded to v1.12.0 by changing spec.version (no Cluster API
//! objects stored yet; the upgrade with a workload cluster is another test).

mod support;

use std::time::Duration;

use capi_test_support::{serial, wait_for};
use kube::Client;
use support::{real::*, *};

const T: Duration = Duration::from_secs(300);

/// The real KubeadmControlPlane webhook answers: an even replica count is refused with its
/// message (the request reaches the manager's webhook server through its Service). Right after
/// a rollout the Service's endpoints can still name the old pod for a moment (the endpoint
/// controller follows pod readiness asynchronously), so a failed call is tried again for up to
/// a minute; a wrong answer fails at once.
fn webhook_refuses_even_replicas(cluster: &capi_test_support::TestCluster) -> TestResult {
    let started = std::time::Instant::now();
    loop {
        match webhook_answer(cluster)? {
            Ok(()) => return Ok(()),
            Err(err)
                if err.contains("failed calling webhook")
                    && started.elapsed() < Duration::from_secs(60) =>
            {
                std::thread::sleep(Duration::from_secs(2));
            }
            Err(err) => {
                return Err(format!("the real webhook did not refuse the object: {err}").into());
            }
        }
    }
}

/// One dry-run create of an invalid KubeadmControlPlane: Ok when refused by the real webhook's
/// rule, else the error text.
fn webhook_answer(
    cluster: &capi_test_support::TestCluster,
) -> Result<Result<(), String>, Box<dyn std::error::Error>> {
    let kcp = "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata:\n  name: even\n  namespace: default\nspec:\n  replicas: 2\n  version: v1.34.0\n  machineTemplate:\n    spec:\n      infrastructureRef:\n        apiGroup: infrastructure.cluster.x-k8s.io\n        kind: DockerMachineTemplate\n        name: even\n  kubeadmConfigSpec:\n    format: cloud-config\n";
    let file = tempfile(kcp)?;
    let (ok, _, err) = cluster.kubectl(&["create", "--dry-run=server", "-f", &file])?;
    if ok || !err.contains("cannot be an even number when etcd is stacked") {
        return Ok(Err(err));
    }
    Ok(Ok(()))
}

/// Waits until every provider is Ready at `version` with one ready manager of that version.
async fn wait_ready_at(client: &Client, version: &str) -> Result<(), String> {
    for (kind, ns, name, ..) in REAL_PROVIDERS {
        let done = wait_for(T, || async {
            let p = provider(client, kind, ns, name).await?;
            let ready = condition(&p, "Ready")?.get("status")? == "True";
            let at = p.pointer("/status/installedVersion")? == version;
            let managers = ready_managers(client, ns).await;
            let running = managers.len() == 1 && managers[0].1.ends_with(&format!(":{version}"));
            (ready && at && running).then_some(())
        })
        .await;
        if done.is_none() {
            let p = provider(client, kind, ns, name).await;
            return Err(format!(
                "{kind} not Ready at {version} with its real manager; status: {}",
                p.and_then(|p| p.get("status").cloned())
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            ));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_managers_upgrade_from_v1_11_to_v1_12_with_live_webhooks() -> TestResult {
    let test = "real_managers_upgrade_from_v1_11_to_v1_12_with_live_webhooks";
    let Some(parts) = real_parts(test) else {
        return Ok(());
    };
    let _serial = serial().lock().await;
    let cluster = real_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    install_cert_manager(cluster, &client, &parts).await?;
    load_real_releases(cluster, &client, &parts.releases, &["v1.11.0", "v1.12.0"]).await?;
    let operator = start_operator(cluster, &[])?;
    let log = |e: String| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };

    apply_real(cluster, "v1.11.0", |_| String::new())?;
    wait_ready_at(&client, "v1.11.0").await.map_err(log)?;
    webhook_refuses_even_replicas(cluster)?;

    apply_real(cluster, "v1.12.0", |_| String::new())?;
    wait_ready_at(&client, "v1.12.0").await.map_err(log)?;
    for (kind, ns, name, ..) in REAL_PROVIDERS {
        let p = provider(&client, kind, ns, name)
            .await
            .ok_or("provider gone")?;
        assert_eq!(
            condition(&p, "ProviderUpgraded").and_then(|c| c.get("status")),
            Some(&serde_json::Value::from("True")),
            "{kind} reports the upgrade"
        );
    }
    // The v1.12.0 webhooks answer, and the CRD new in v1.12.0 is served.
    webhook_refuses_even_replicas(cluster)?;
    cluster.kubectl_ok(&["get", "crd", "ipaddresses.ipam.cluster.x-k8s.io"])?;
    Ok(())
}
