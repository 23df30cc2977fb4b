//! Moving a management cluster with `kubectl capi-providers move` and the real clusterctl
//! (v1.12.0, built beside the real managers), between two local control planes each with the
//! operator running:
//!
//! - the source runs the real Cluster API core, kubeadm bootstrap and control-plane releases
//!   (air-gapped, from ConfigMaps) and the sample infrastructure provider with a variables
//!   Secret, and holds a workload Cluster with a Machine; the target has the operator and its
//!   CRDs only;
//! - a target declaring the core provider at another version is refused (exit 1, both versions
//!   named) and nothing changes on either side; `--dry-run` prints the plan and changes nothing;
//! - the move declares the four providers on the target with their Secret and release
//!   ConfigMaps (copied, never printed), waits for them Ready, runs clusterctl move (the Cluster
//!   and the Machine leave the source for the target, unpaused there), then retires the
//!   source's providers: their objects go with `deletionPolicy: Orphan`, their managers are
//!   scaled to 0, CRDs and Deployments stay; the target's providers stay Ready;
//! - run again, it has nothing left to do.
//!
//! kwok's pods serve nothing (the provider objects empty the webhooks and turn conversion off,
//! as `clusterctl.rs` does), so the Cluster and Machine statuses clusterctl requires before a
//! move (infrastructure provisioned, control plane initialized, a node) are written by the
//! test; reconciliation of a moved workload by real managers is not shown here (see the user
//! guide's "Moving a management cluster" for why the in-memory backend cannot show it).

mod v1beta1_source;

use crate::{clusterctl::*, support};

use std::time::{Duration, Instant};

use capi_test_support::{TestCluster, private_cluster, second_private_cluster, wait_for};
use k8s_openapi::{
    ByteString,
    api::{apps::v1::Deployment, core::v1::Secret},
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};
use support::*;

const WORKLOAD: &str = "workload";

fn capi(client: &Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
    Api::namespaced_with(client.clone(), WORKLOAD, &ApiResource::from_gvk(&gvk))
}

/// A provisioned workload Cluster with one Machine (owned by it), as clusterctl requires them
/// before moving.
fn workload(source: &TestCluster) -> TestResult {
    apply(
        source,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {WORKLOAD}\n---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: w1\n  namespace: {WORKLOAD}\nspec:\n  paused: false\n  clusterNetwork:\n    serviceDomain: cluster.local\n"
        ),
    )?;
    let uid = source.kubectl_ok(&[
        "get",
        "cluster",
        "w1",
        "-n",
        WORKLOAD,
        "-o",
        "jsonpath={.metadata.uid}",
    ])?;
    apply(
        source,
        &format!(
            "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata:\n  name: m1\n  namespace: {WORKLOAD}\n  labels: {{cluster.x-k8s.io/cluster-name: w1}}\n  ownerReferences:\n  - {{apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, name: w1, uid: {uid}}}\nspec:\n  clusterName: w1\n  bootstrap: {{dataSecretName: m1-bootstrap}}\n  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: SampleMachine, name: m1}}\n"
        ),
    )?;
    let now = "2026-01-01T00:00:00Z";
    let cluster_status = format!(
        r#"{{"status":{{"initialization":{{"infrastructureProvisioned":true,"controlPlaneInitialized":true}},"conditions":[{{"type":"ControlPlaneInitialized","status":"True","reason":"Initialized","message":"","lastTransitionTime":"{now}"}}]}}}}"#
    );
    source.kubectl_ok(&[
        "patch",
        "cluster",
        "w1",
        "-n",
        WORKLOAD,
        "--subresource=status",
        "--type=merge",
        "-p",
        &cluster_status,
    ])?;
    source.kubectl_ok(&[
        "patch",
        "machine",
        "m1",
        "-n",
        WORKLOAD,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"nodeRef":{"name":"node-1"}}}"#,
    ])?;
    Ok(())
}

/// `Kind namespace/name` of every provider object of the operator's API on the cluster.
pub(crate) fn provider_objects(
    cluster: &TestCluster,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let kinds = "coreproviders,bootstrapproviders,controlplaneproviders,infrastructureproviders";
    let out = cluster.kubectl_ok(&[
        "get",
        kinds,
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.kind} {.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}",
    ])?;
    let mut v: Vec<String> = out.lines().map(str::to_string).collect();
    v.sort();
    Ok(v)
}

async fn secret_data(client: &Client) -> Option<std::collections::BTreeMap<String, ByteString>> {
    Api::<Secret>::namespaced(client.clone(), INFRA_NS)
        .get_opt("sample-vars")
        .await
        .ok()??
        .data
}

async fn replicas(client: &Client, ns: &str, name: &str) -> Option<i32> {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    d.spec?.replicas
}

/// `move` from `source` to `target` with `extra` arguments, running `clusterctl`: (exit 0,
/// output).
pub(crate) fn run_move(
    source: &TestCluster,
    target: &TestCluster,
    clusterctl: &std::path::Path,
    extra: &[&str],
) -> Result<(bool, String), Box<dyn std::error::Error>> {
    let to = target.kubeconfig().to_string_lossy().into_owned();
    let cc = clusterctl.to_string_lossy().into_owned();
    let mut args = vec![
        "move",
        "--to-kubeconfig",
        &to,
        "--clusterctl",
        &cc,
        "--timeout",
        "4m",
    ];
    args.extend_from_slice(extra);
    let (ok, out) = plugin(source, &args)?;
    eprintln!("$ kubectl capi-providers {}\n{out}", args.join(" "));
    Ok((ok, out))
}

/// The refusal and the dry run: nothing changes on either side.
async fn refused_then_planned(
    source: &TestCluster,
    target: &TestCluster,
    parts: &Parts,
    tgt: &Client,
) -> TestResult {
    let before = provider_objects(source)?;
    apply(
        target,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: capi-system\n---\napiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: capi-system\nspec:\n  version: v1.11.0\n",
    )?;
    let (ok, out) = run_move(source, target, &parts.clusterctl, &[])?;
    assert!(
        !ok,
        "a move to a core provider at another version must be refused:\n{out}"
    );
    assert!(
        out.contains("CoreProvider capi-system/cluster-api: version v1.12.0 on the source, v1.11.0 on the target"),
        "{out}"
    );
    assert!(out.contains("nothing was changed"), "{out}");
    assert_eq!(
        provider_objects(target)?,
        ["CoreProvider capi-system/cluster-api"]
    );
    assert_eq!(
        secret_data(tgt).await,
        None,
        "the refused move copied the variables Secret"
    );
    assert_eq!(provider_objects(source)?, before);
    source.kubectl_ok(&["get", "cluster", "w1", "-n", WORKLOAD])?;
    target.kubectl_ok(&[
        "delete",
        "coreprovider",
        "cluster-api",
        "-n",
        "capi-system",
        "--timeout=60s",
    ])?;

    let (ok, out) = run_move(source, target, &parts.clusterctl, &["--dry-run"])?;
    assert!(ok, "{out}");
    for step in [
        "1. declare CoreProvider capi-system/cluster-api on the target",
        "wait until 4 provider(s) are Ready on the target",
        "clusterctl move the Cluster API objects of namespace(s) workload",
        "retire CoreProvider capi-system/cluster-api on the source",
    ] {
        assert!(out.contains(step), "no {step:?} in the plan:\n{out}");
    }
    assert!(
        provider_objects(target)?.is_empty(),
        "the dry run declared providers"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_declares_on_the_target_moves_the_clusters_and_retires_the_source() -> TestResult {
    let test = "move_declares_on_the_target_moves_the_clusters_and_retires_the_source";
    let parts = parts(test)?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let started = Instant::now();
    let source = private_cluster()?;
    let target = second_private_cluster()?;
    let (src, _src_operator) = management_cluster(source, &parts, "v1.12.0").await?;
    target.install_crds()?;
    let cm_crds = parts.cert_manager_crds.to_string_lossy().into_owned();
    target.kubectl_ok(&["apply", "--server-side", "-f", &cm_crds])?;
    let tgt = target.client().await?;
    let _tgt_operator = start_operator(target, &[])?;
    workload(source)?;
    let set_up = started.elapsed();

    refused_then_planned(source, target, &parts, &tgt).await?;
    let declared = provider_objects(source)?;
    assert_eq!(declared.len(), 4, "{declared:?}");

    let moving = Instant::now();
    let (ok, out) = run_move(source, target, &parts.clusterctl, &[])?;
    assert!(ok, "{out}");
    let took = moving.elapsed();
    assert!(
        !out.contains("SAMPLE_GREETING") && !out.contains("aGk="),
        "a Secret value was printed:\n{out}"
    );
    // The target: the same providers, Ready, with the same variables; the workload there.
    assert_eq!(provider_objects(target)?, declared);
    for (kind, ns, name, _, _) in real::REAL_PROVIDERS {
        wait_condition(
            &tgt,
            (kind, ns, name),
            "Ready",
            "True",
            None,
            Duration::from_secs(10),
        )
        .await?;
    }
    let data = secret_data(&tgt)
        .await
        .ok_or("no variables Secret on the target")?;
    assert_eq!(
        Some(data),
        secret_data(&src).await,
        "the variables Secret differs"
    );
    let (cluster, machine) = (
        capi(&tgt, "Cluster").get("w1").await?,
        capi(&tgt, "Machine").get("m1").await?,
    );
    assert_ne!(
        cluster.data.pointer("/spec/paused"),
        Some(&serde_json::Value::Bool(true)),
        "still paused on the target"
    );
    assert_eq!(
        machine
            .data
            .pointer("/spec/clusterName")
            .and_then(serde_json::Value::as_str),
        Some("w1")
    );
    // The source: no workload, no provider objects; what they installed kept but stopped.
    assert!(
        capi(&src, "Cluster")
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
    );
    assert!(
        capi(&src, "Machine")
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
    );
    assert!(
        provider_objects(source)?.is_empty(),
        "{:?}",
        provider_objects(source)?
    );
    assert_eq!(
        replicas(&src, "capi-system", "capi-controller-manager").await,
        Some(0)
    );
    source.kubectl_ok(&["get", "crd", "clusters.cluster.x-k8s.io"])?;
    // Nothing the target needs went with the source: its managers keep their replicas.
    assert_eq!(
        replicas(&tgt, "capi-system", "capi-controller-manager").await,
        Some(1)
    );
    let still = wait_for(Duration::from_secs(5), || async {
        provider(&tgt, "CoreProvider", "capi-system", "cluster-api").await
    })
    .await;
    assert!(still.is_some_and(
        |p| condition(&p, "Ready").and_then(|c| c.get("status")) == Some(&"True".into())
    ));

    let (ok, out) = run_move(source, target, &parts.clusterctl, &[])?;
    assert!(ok && out.contains("nothing to move"), "{out}");
    eprintln!(
        "MEASURED move: set-up {:.1} s, move {:.1} s, all {:.1} s",
        set_up.as_secs_f64(),
        took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
