//! End-to-end: a restarted operator writes nothing when everything is as declared, and repairs
//! (and says so) what was changed while it was down.
//!
//! Every object the operator applies carries the hash of the content it applied (a label); with the
//! object's managedFields (the operator wrote it last), a new process knows without memory that
//! the object needs no request. Requests are counted from the operator's own HTTP client trace.

use crate::support;

use std::time::Duration;

use capi_test_support::{TestCluster, private_cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(90);
const NS: &str = "restart-core";
const DEPLOYMENT: &str = "sample-core-controller-manager";

/// Write requests in an operator log (kube's client trace: `http.method=PATCH ... requesting`).
fn writes(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("requesting"))
        .filter(|l| {
            ["PATCH", "POST", "PUT", "DELETE"]
                .iter()
                .any(|m| l.contains(&format!("http.method={m}")))
        })
        .collect()
}

/// Starts the operator with its requests traced and /metrics on a free port; waits until it has
/// reconciled the core provider once.
async fn traced_operator(
    cluster: &TestCluster,
) -> Result<capi_test_support::OperatorProcess, Box<dyn std::error::Error>> {
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let op = capi_test_support::OperatorProcess::start_with_env(
        cluster,
        operator_bin(),
        &["--metrics-bind-address", &addr],
        &[("RUST_LOG", "info,kube_client=debug")],
    )?;
    let passed = wait_for(T, || async {
        let (_, body) = get(port, "/metrics").ok()?;
        body.lines()
            .any(|l| l.starts_with("capi_operator_reconcile_total{kind=\"CoreProvider\""))
            .then_some(())
    })
    .await;
    passed.ok_or_else(|| format!("no reconcile after restart\n{}", op.logs()))?;
    // What a pass writes lands right after it; give it time to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok(op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_writes_nothing_and_repairs_what_changed_meanwhile() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    load_core(cluster, &client, NS).await?;
    let mut first = start_operator(cluster, &[])?;
    apply(cluster, &core_provider(NS, "v0.2.0", 2))?;
    wait_condition(
        &client,
        ("CoreProvider", NS, "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", first.logs()))?;
    first.terminate()?;

    // Nothing changed: the new process sends no write at all.
    let mut second = traced_operator(cluster).await?;
    let log = second.logs();
    let w = writes(&log);
    assert!(w.is_empty(), "a restart wrote:\n{}", w.join("\n"));
    second.terminate()?;

    // Changed while the operator was down: repaired at start, said, and nothing else written.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments
        .patch(
            DEPLOYMENT,
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": DEPLOYMENT, "namespace": NS},
                "spec": {"replicas": 3},
            })),
        )
        .await?;
    let third = traced_operator(cluster).await?;
    let restored = wait_for(T, || async {
        let d = deployments.get(DEPLOYMENT).await.ok()?;
        (d.spec?.replicas == Some(1)).then_some(())
    })
    .await;
    restored.ok_or_else(|| format!("not repaired after restart\n{}", third.logs()))?;
    let events = cluster.kubectl_ok(&[
        "get",
        "events",
        "-n",
        NS,
        "--field-selector",
        "reason=DriftRepaired",
        "-o",
        "jsonpath={.items[*].message}",
    ])?;
    assert!(
        events.contains(&format!(
            "Deployment {NS}/{DEPLOYMENT} (changed by someone-else)"
        )),
        "{events:?}"
    );
    let log = third.logs();
    let w = writes(&log);
    let objects: Vec<&&str> = w
        .iter()
        .filter(|l| !l.contains("/events") && !l.contains("/status"))
        .collect();
    assert_eq!(
        objects.len(),
        1,
        "only the Deployment is written:\n{}",
        w.join("\n")
    );
    assert!(objects[0].contains(DEPLOYMENT), "{}", objects[0]);
    Ok(())
}
