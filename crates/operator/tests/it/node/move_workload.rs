//! Moving a management cluster whose workload real controllers run: two local control planes,
//! each with a real node of its own (kubelet, containerd, runc, CNI) and the operator.
//!
//! - The source runs the real v1.12.0 core, kubeadm bootstrap and kubeadm control-plane managers
//!   (air-gapped, from ConfigMaps) and the docker provider's in-memory backend, all installed
//!   by the operator, and a workload Cluster that those controllers brought up: a
//!   KubeadmControlPlane and a MachineDeployment, their Machines Running with Nodes. Nothing of
//!   it is written by the test.
//! - The target has cert-manager, the operator and its CRDs, and declares the docker provider
//!   itself: its Deployment pins a pod address of the target's node (see
//!   [`capd_pod_ip`]), which the source's object, naming the source node's address, cannot give
//!   it; until a core provider is there it waits. The move leaves a provider the target already
//!   declares at the same version alone, and waits for it Ready with the others.
//! - `kubectl capi-providers move` declares the three others on the target from the source's
//!   objects and release ConfigMaps, waits until all four are Ready there, runs the real
//!   clusterctl v1.12.0 move, and retires the source's providers (Orphan, managers at 0).
//! - Then every object of the workload (Cluster, DevCluster, control plane, MachineDeployment,
//!   MachineSet, Machines, DevMachines, KubeadmConfigs) is on the target under the same names
//!   and none is left on the source; the Cluster is not paused; and over the following half
//!   minute the target's controllers neither delete, replace nor add a Machine.
//! - Run again, `move` has nothing to do.
//!
//! What a move cannot do for this provider, checked so that the user guide's limit stays true:
//! the in-memory backend serves each workload's API server from inside its own pod and
//! publishes that pod's address as the Cluster's endpoint, and it refuses to serve a workload
//! whose endpoint names another address. The target's docker provider says so for the moved
//! DevCluster ("the host address is changed from <source address> to <target address>"), so
//! the moved workload is not served there. Real infrastructure providers have no such tie.

use crate::{
    move_management_cluster::{provider_objects, run_move},
    support,
};

use std::{collections::BTreeSet, time::Duration};

use capi_test_support::{TestCluster, wait_for};
use kube::{Client, api::ListParams};
use support::{real::*, workload::*, *};

const T: Duration = Duration::from_secs(300);
/// The release of every provider here: clusterctl v1.12.0 moves it (clusterctl must not be older
/// than the source's core provider), and it is the newest docker provider built.
const VERSION: &str = "v1.12.0";

/// (group, kind) of every object of the workload that must move.
const WORKLOAD_KINDS: [(&str, &str); 8] = [
    ("cluster.x-k8s.io", "Cluster"),
    ("infrastructure.cluster.x-k8s.io", "DevCluster"),
    ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
    ("cluster.x-k8s.io", "MachineDeployment"),
    ("cluster.x-k8s.io", "MachineSet"),
    ("cluster.x-k8s.io", "Machine"),
    ("infrastructure.cluster.x-k8s.io", "DevMachine"),
    ("bootstrap.cluster.x-k8s.io", "KubeadmConfig"),
];

/// `Kind/name` of every workload object on the cluster (read at v1beta2).
async fn workload_objects(client: &Client) -> Result<BTreeSet<String>, kube::Error> {
    let mut all = BTreeSet::new();
    for (group, kind) in WORKLOAD_KINDS {
        for o in api(client, group, "v1beta2", kind)
            .list(&ListParams::default())
            .await?
        {
            all.insert(format!("{kind}/{}", o.metadata.name.unwrap_or_default()));
        }
    }
    Ok(all)
}

/// cert-manager, the CRDs and the operator on a cluster with a real node.
async fn management_base(
    cluster: &'static TestCluster,
    parts: &RealParts,
) -> Result<(Client, capi_test_support::OperatorProcess), Box<dyn std::error::Error>> {
    cluster.install_crds()?;
    let client = cluster.client().await?;
    install_cert_manager(cluster, &client, parts)?;
    let operator = start_operator(cluster, &[])?;
    Ok((client, operator))
}

/// The target declares its own docker provider (its node's pinned address). It waits there for
/// a core provider, which the move declares; the move then waits for it Ready with the others.
async fn target_docker_provider(target: &TestCluster, tgt: &Client) -> TestResult {
    load_capd_releases(target, tgt, &[VERSION]).await?;
    let ip = capd_pod_ip(target)?;
    apply(target, &capd_provider_on(ON_REAL_NODE, &ip, VERSION, ""))?;
    Ok(())
}

/// The log of the docker provider's manager (its last `tail` lines, or all of it).
fn capd_log(cluster: &TestCluster, tail: Option<u32>) -> Result<String, capi_test_support::Error> {
    let tail = tail.map(|n| format!("--tail={n}"));
    let mut args = vec!["logs", "-n", CAPD_NS, "deployment/capd-controller-manager"];
    args.extend(tail.as_deref());
    cluster.kubectl_ok(&args)
}

/// The target's in-memory provider refusing the moved workload, which names the source's
/// address: its log line.
fn target_refuses_the_source_address(
    target: &TestCluster,
    from: &str,
    to: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let log = capd_log(target, None)?;
    let refusal = format!("the host address is changed from {from} to {to}");
    let line = log
        .lines()
        .find(|l| l.contains(&refusal) && l.contains(&format!("{WORKLOAD_NS}/{CLUSTER}")))
        .ok_or_else(|| format!("no {refusal:?} in the target's docker provider log"))?;
    Ok(line.to_string())
}

/// The names of the Machines.
async fn machine_names(client: &Client) -> Result<Vec<String>, kube::Error> {
    let list = api(client, "cluster.x-k8s.io", "v1beta2", "Machine")
        .list(&ListParams::default())
        .await?;
    let mut v: Vec<String> = list
        .into_iter()
        .map(|m| m.metadata.name.unwrap_or_default())
        .collect();
    v.sort();
    Ok(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workload_real_controllers_run_moves_with_its_machines_to_the_target() -> TestResult {
    let test = "a_workload_real_controllers_run_moves_with_its_machines_to_the_target";
    let parts = real_node_parts()?;
    let clusterctl = capi_test_support::clusterctl(VERSION).ok_or_else(|| {
        format!(
            "{test}: clusterctl {VERSION} is not built: run `make providers` \
             (e2e/scripts/build-providers.sh)"
        )
    })?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let started = std::time::Instant::now();
    let source = real_node(test)?;
    let target =
        capi_test_support::second_real_node_cluster(test).ok_or("no second real node")??;

    let (src, src_operator) = management_base(source, &parts).await?;
    load_real_releases(source, &src, &parts.releases, &[VERSION]).await?;
    load_capd_releases(source, &src, &[VERSION]).await?;
    apply_real(source, VERSION, |_| String::new())?;
    let ip = capd_pod_ip(source)?;
    apply(source, &capd_provider_on(ON_REAL_NODE, &ip, VERSION, ""))?;
    let fail = |e: &dyn std::fmt::Display, op: &capi_test_support::OperatorProcess, c: &Client| {
        format!(
            "{e}\n{}\n--- operator log ---\n{}",
            describe_sync(c),
            op.logs()
        )
    };
    wait_all_ready_at(&src, VERSION, VERSION)
        .await
        .map_err(|e| fail(&e, &src_operator, &src))?;
    apply(source, &workload_cluster(1))?;
    wait_cluster_up(&src, "v1beta2", 1, T)
        .await
        .map_err(|e| fail(&e, &src_operator, &src))?;
    let moving = workload_objects(&src).await?;
    let src_machines = machine_names(&src).await?;
    assert_eq!(src_machines.len(), 2, "{src_machines:?}");

    let (tgt, tgt_operator) = management_base(target, &parts).await?;
    target_docker_provider(target, &tgt).await?;
    let declared = provider_objects(source)?;
    let set_up = started.elapsed();

    let t0 = std::time::Instant::now();
    let (ok, out) = run_move(source, target, &clusterctl, &[])?;
    let took = t0.elapsed();
    assert!(
        ok,
        "{out}\n--- target operator log ---\n{}",
        tgt_operator.logs()
    );
    assert!(
        !out.contains(&format!("declare InfrastructureProvider {CAPD_NS}/docker")),
        "the move declared the docker provider the target already has:\n{out}"
    );
    // The providers: all four Ready on the target; none left on the source, its managers stopped.
    assert_eq!(provider_objects(target)?, declared);
    for (kind, ns, name) in all_providers() {
        wait_condition(&tgt, (kind, ns, name), "Ready", "True", None, T).await?;
    }
    assert!(provider_objects(source)?.is_empty());
    for (ns, deployment) in [
        ("capi-system", "capi-controller-manager"),
        (CAPD_NS, "capd-controller-manager"),
    ] {
        let replicas = source.kubectl_ok(&[
            "get",
            "deployment",
            deployment,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.replicas}",
        ])?;
        assert_eq!(replicas, "0", "{ns}/{deployment} still runs on the source");
    }

    // The workload: every object on the target under its name, none left on the source.
    assert_eq!(workload_objects(&tgt).await?, moving);
    assert!(
        workload_objects(&src).await?.is_empty(),
        "left on the source: {:?}",
        workload_objects(&src).await?
    );
    let cluster = api(&tgt, "cluster.x-k8s.io", "v1beta2", "Cluster")
        .get(CLUSTER)
        .await?;
    assert_ne!(
        cluster.data.pointer("/spec/paused"),
        Some(&serde_json::Value::Bool(true)),
        "the Cluster is still paused on the target"
    );
    let tgt_ip = capd_pod_ip(target)?;
    let refusal = wait_for(T, || async {
        target_refuses_the_source_address(target, &ip, &tgt_ip).ok()
    })
    .await
    .ok_or_else(|| {
        let capd = capd_log(target, Some(60)).unwrap_or_else(|e| e.to_string());
        format!(
            "{}\n--- the target's docker provider (tail) ---\n{capd}",
            describe_sync(&tgt)
        )
    })?;
    // Half a minute of the target's controllers: no Machine deleted, replaced or added.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            machine_names(&tgt).await?,
            src_machines,
            "{}",
            describe(&tgt).await
        );
    }

    let (ok, out) = run_move(source, target, &clusterctl, &[])?;
    assert!(ok && out.contains("nothing to move"), "{out}");
    eprintln!(
        "MEASURED move of a live workload: set-up {:.1} s, move {:.1} s, {} objects; the target's in-memory provider: {refusal}",
        set_up.as_secs_f64(),
        took.as_secs_f64(),
        moving.len()
    );
    Ok(())
}
