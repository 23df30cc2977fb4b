//! A tenant who may only create ConfigMaps and Deployments in its own namespace, against an
//! installed core provider on a local control plane. Acting as its ServiceAccount
//! (impersonated), it creates 120 ConfigMaps labelled with the core provider's owner labels,
//! each with a 200 KiB annotation, and a never-available Deployment labelled the same way.
//! None of it may count: the provider's conditions stay as they were, a reconcile that applies
//! and prunes leaves every tenant object in place, and the operator's resident memory grows by
//! a few MiB at most (the 24 MiB of annotations are not kept).

use crate::support;

use std::time::Duration;

use capi_test_support::{TestCluster, private_cluster, wait_for};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::{Api, api::ListParams};
use serde_json::Value;
use support::*;

const NS: &str = "tenant-core";
const TENANT: &str = "tenant-a";
const COUNT: usize = 120;
/// How much the operator's resident memory may grow while the tenant's objects arrive.
const GROWTH_BOUND: u64 = 6 * 1024 * 1024;

/// The resident memory of process `pid` (VmRSS), in bytes.
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

const RBAC: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: tenant, namespace: tenant-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tenant, namespace: tenant-a}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, get, list, patch, update]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [create, get, list, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant, namespace: tenant-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant}
subjects:
- {kind: ServiceAccount, name: tenant, namespace: tenant-a}
"#;

fn owner_labels() -> String {
    format!(
        "    management.cluster.x-k8s.io/owner-kind: CoreProvider\n    management.cluster.x-k8s.io/owner-name: cluster-api\n    management.cluster.x-k8s.io/owner-namespace: {NS}\n    cluster.x-k8s.io/provider: cluster-api\n"
    )
}

/// What the tenant creates: the labelled ConfigMaps and a Deployment that never gets a node.
fn bait() -> String {
    let padding = "x".repeat(200 * 1024);
    let mut out = String::new();
    for i in 0..COUNT {
        out.push_str(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bait-{i}\n  namespace: {TENANT}\n  labels:\n{}  annotations:\n    padding: {padding}\ndata: {{k: v}}\n---\n",
            owner_labels()
        ));
    }
    out.push_str(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sample-core-controller-manager\n  namespace: {TENANT}\n  labels:\n{}spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: bait}}}}\n  template:\n    metadata: {{labels: {{app: bait}}}}\n    spec:\n      nodeSelector: {{no-such-node: \"true\"}}\n      containers: [{{name: m, image: registry.invalid/never:v1}}]\n",
        owner_labels()
    ));
    out
}

/// The provider's conditions without their probe times: what the tenant must not change.
async fn conditions(client: &kube::Client) -> Result<Value, Box<dyn std::error::Error>> {
    let p = provider(client, "CoreProvider", NS, "cluster-api")
        .await
        .ok_or("no core provider")?;
    let mut c = p
        .pointer("/status/conditions")
        .cloned()
        .ok_or("no conditions")?;
    for c in c.as_array_mut().into_iter().flatten() {
        if let Some(m) = c.as_object_mut() {
            m.remove("lastProbeTime");
        }
    }
    Ok(c)
}

async fn tenant_objects(client: &kube::Client) -> Result<(usize, usize), kube::Error> {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), TENANT)
        .list(&ListParams::default().labels("management.cluster.x-k8s.io/owner-kind"))
        .await?;
    let deps = Api::<Deployment>::namespaced(client.clone(), TENANT)
        .list(&ListParams::default())
        .await?;
    Ok((cms.items.len(), deps.items.len()))
}

fn as_tenant(cluster: &TestCluster, file: &str) -> TestResult {
    let (ok, _, err) = cluster.kubectl(&[
        "create",
        "-f",
        file,
        "--as",
        "system:serviceaccount:tenant-a:tenant",
    ])?;
    assert!(ok, "the tenant could not create its objects: {err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_labelling_its_own_objects_steers_nothing_and_costs_little_memory() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    load_core(cluster, &client, NS).await?;
    cluster.ensure_namespace(TENANT)?;
    apply(cluster, RBAC)?;
    let mut op = start_operator(cluster, &[])?;
    apply(cluster, &core_provider(NS, "v0.2.0", 1))?;
    wait_installed(&client, ("CoreProvider", NS, "cluster-api"), "v0.2.0", &op).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = op.pid().ok_or("no operator pid")?;
    let before = conditions(&client).await?;
    let rss_before = rss(pid).ok_or("no VmRSS")?;

    as_tenant(cluster, &tempfile(&bait())?)?;
    assert_eq!(tenant_objects(&client).await?, (COUNT, 1));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        conditions(&client).await?,
        before,
        "the tenant's objects changed the provider's conditions\n{}",
        op.logs()
    );
    let rss_after = rss(pid).ok_or("no VmRSS")?;

    // A change that applies and prunes: the tenant's objects are not the provider's to prune.
    apply(cluster, &core_provider(NS, "v0.2.0", 2))?;
    let applied = wait_for(Duration::from_secs(90), || async {
        let d = Api::<Deployment>::namespaced(client.clone(), NS)
            .get("sample-core-controller-manager")
            .await
            .ok()?;
        let args = d.spec?.template.spec?.containers.first()?.args.clone()?;
        args.iter().any(|a| a == "--v=2").then_some(())
    })
    .await;
    applied.ok_or_else(|| format!("the verbosity change was not applied\n{}", op.logs()))?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        tenant_objects(&client).await?,
        (COUNT, 1),
        "tenant objects were pruned"
    );
    let p = provider(&client, "CoreProvider", NS, "cluster-api")
        .await
        .ok_or("no core provider")?;
    assert_eq!(
        condition(&p, "Ready").and_then(|c| c.get("status")),
        Some(&Value::from("True")),
        "{p}"
    );
    assert!(op.running(), "the operator exited\n{}", op.logs());
    let growth = rss_after.saturating_sub(rss_before);
    eprintln!(
        "operator RSS: {} KiB before the tenant's objects, {} KiB after (+{} KiB)",
        rss_before / 1024,
        rss_after / 1024,
        growth / 1024
    );
    assert!(
        growth <= GROWTH_BOUND,
        "the tenant's objects grew the operator by {} KiB",
        growth / 1024
    );
    Ok(())
}
