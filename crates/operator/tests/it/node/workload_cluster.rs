//! End-to-end with a workload cluster that real controllers reconcile: the real Cluster API
//! core, kubeadm bootstrap and kubeadm control-plane managers and the docker provider (its
//! in-memory backend: machines without hardware, a fake workload API server in the provider's
//! pod), all installed by the operator from ConfigMaps on the process node, and a Cluster with
//! a KubeadmControlPlane and a MachineDeployment brought up by those controllers. One cluster
//! goes through, in order:
//!
//! 1. every provider upgraded from v1.11.0 to v1.12.0 with the cluster live: reads of the Cluster
//!    every 100 ms and each provider's ready managers measured; every stored object readable in
//!    every served version (the new managers' conversion webhooks); the cluster scaled after;
//! 2. a contract-changing upgrade (v1.12.0 → [`CONTRACT_VERSION`], see there): refused while
//!    the providers run; paused, every manager process exits and a change made meanwhile is not
//!    acted on; upgraded paused and unpaused with the operator killed at seeded random points;
//!    the change reconciled by the new managers and no object lost;
//! 3. the core provider's deletion blocked by the Cluster, naming it, until the controllers have
//!    deleted the Cluster.
//!
//! `CAPI_KILL_SEED` (default 20261124) picks the kill points, `CAPI_KILL_RUNS` (default 2) the
//! kills per step; both are printed so a failing run can be replayed.

use crate::support;

use std::time::Duration;

use capi_test_support::{OperatorProcess, Rng, TestCluster, env_u64, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client, api::ListParams};
use serde_json::Value;
use support::{real::*, workload::*, *};

const T: Duration = Duration::from_secs(300);

/// Every Cluster API CRD's stored versions are its storage version alone: the new managers'
/// CRD migrator rewrote what the old ones stored.
async fn stored_in_storage_version_only(client: &Client) -> Result<(), String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let list = crds
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    for crd in list.items {
        let group = &crd.spec.group;
        if !group.ends_with("cluster.x-k8s.io") || group.starts_with("management.") {
            continue;
        }
        let storage: Vec<&str> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.storage)
            .map(|v| v.name.as_str())
            .collect();
        let stored: Vec<&str> = crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.as_ref())
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default();
        if stored != storage {
            return Err(format!(
                "{}: stored versions {stored:?}, storage {storage:?}",
                crd.metadata.name.as_deref().unwrap_or("")
            ));
        }
    }
    Ok(())
}

/// The provider objects still present.
async fn providers_left(client: &Client) -> Vec<String> {
    let mut left = Vec::new();
    for (kind, ns, name) in all_providers() {
        if provider(client, kind, ns, name).await.is_some() {
            left.push(format!("{kind} {ns}/{name}"));
        }
    }
    left
}

/// Kills the operator (SIGKILL) `runs` times at random points within 4 s of each other,
/// starting it again after each kill, and prints every delay.
async fn kill_at_random_points(
    cluster: &TestCluster,
    operator: &mut OperatorProcess,
    rng: &mut Rng,
    runs: u64,
    step: &str,
) -> TestResult {
    for i in 0..runs {
        let delay = rng.below(4000);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        operator.kill();
        eprintln!("{step}: operator killed {delay} ms after the previous point (kill {i})");
        *operator = start_operator(cluster, &[])?;
    }
    Ok(())
}

/// Sets `spec.version` and `spec.paused` of every provider.
fn set_all(cluster: &TestCluster, version: &str, paused: bool) -> TestResult {
    for (kind, ns, name) in all_providers() {
        let patch = format!(r#"{{"spec":{{"version":"{version}","paused":{paused}}}}}"#);
        cluster.kubectl_ok(&[
            "patch",
            "-n",
            ns,
            &format!("{}/{name}", kind.to_lowercase()),
            "--type=merge",
            "-p",
            &patch,
        ])?;
    }
    Ok(())
}

/// Waits until every provider is installed at `version`, paused, with no manager pod left.
async fn wait_all_paused_at(client: &Client, version: &str) -> Result<(), String> {
    for (kind, ns, name) in all_providers() {
        let done = wait_for(T, || async {
            let p = provider(client, kind, ns, name).await?;
            let paused = condition(&p, "Paused")?.get("status")? == "True";
            let at = p.pointer("/status/installedVersion")? == version;
            let gone = pods(client, ns).await.is_empty();
            (paused && at && gone).then_some(())
        })
        .await;
        if done.is_none() {
            let p = provider(client, kind, ns, name).await;
            return Err(format!(
                "{kind} not paused at {version} with its manager stopped; status: {}",
                p.and_then(|p| p.get("status").cloned())
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// The MachineDeployment's observed generation and status replicas.
async fn md_status(client: &Client) -> Option<(i64, i64, i64)> {
    let md = api(client, "cluster.x-k8s.io", "v1beta2", "MachineDeployment")
        .get_opt(&format!("{CLUSTER}-md-0"))
        .await
        .ok()??;
    let generation = md.metadata.generation?;
    let observed = md
        .data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let replicas = md
        .data
        .pointer("/status/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Some((generation, observed, replicas))
}

/// Names of the workload namespace's Cluster API objects of the kinds that must survive.
async fn workload_objects(client: &Client) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (g, k) in [
        ("cluster.x-k8s.io", "Cluster"),
        ("cluster.x-k8s.io", "MachineDeployment"),
        ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
        ("infrastructure.cluster.x-k8s.io", "DevCluster"),
        ("infrastructure.cluster.x-k8s.io", "DevMachineTemplate"),
        ("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate"),
    ] {
        let list = api(client, g, "v1beta2", k)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        for o in list.items {
            out.push(format!("{k}/{}", o.metadata.name.unwrap_or_default()));
        }
    }
    out.sort();
    Ok(out)
}

/// The running setup: the cluster, a client, the operator and the docker provider's address.
struct Setup {
    cluster: &'static TestCluster,
    client: Client,
    operator: OperatorProcess,
    ip: String,
}

impl Setup {
    /// The error `e` with the operator log's tail.
    fn fail(&self, e: impl std::fmt::Display) -> Box<dyn std::error::Error> {
        format!(
            "{e}\n{}\n--- operator log (tail) ---\n{}",
            describe_sync(&self.client),
            tail(&self.operator.logs(), 60)
        )
        .into()
    }
}

/// cert-manager, the releases, the operator, the four providers at v1.11.0 (the real webhook
/// answering) and the workload cluster up with one worker.
async fn set_up(parts: &RealParts) -> Result<Setup, Box<dyn std::error::Error>> {
    let cluster = real_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    install_cert_manager(cluster, &client, parts).await?;
    load_releases(cluster, &client, &parts.releases, &["v1.11.0", "v1.12.0"]).await?;
    load_contract_release(cluster, &client, &parts.releases).await?;
    let operator = start_operator(cluster, &[])?;
    let ip = capd_pod_ip(cluster)?;
    let s = Setup {
        cluster,
        client,
        operator,
        ip,
    };
    apply_real(cluster, "v1.11.0", |_| String::new())?;
    apply(cluster, &capd_provider(&s.ip, "v1.11.0", ""))?;
    wait_all_ready_at(&s.client, "v1.11.0", "v1.11.0")
        .await
        .map_err(|e| s.fail(e))?;
    webhook_refuses_even_replicas(cluster)?;
    apply(cluster, &workload_cluster(1))?;
    wait_cluster_up(&s.client, 1, T)
        .await
        .map_err(|e| s.fail(e))?;
    Ok(s)
}

/// Part 1: the live upgrade to v1.12.0, measured; conversion, migration and a scale to 2.
async fn live_upgrade(s: &Setup) -> TestResult {
    let readers = [
        ("v1beta2", cluster_reader(&s.client, "v1beta2")),
        ("v1beta1", cluster_reader(&s.client, "v1beta1")),
    ];
    let managers: Vec<_> = all_providers()
        .into_iter()
        .map(|(kind, ns, _)| (kind, manager_probe(&s.client, ns)))
        .collect();
    let started = std::time::Instant::now();
    apply_real(s.cluster, "v1.12.0", |_| String::new())?;
    apply(s.cluster, &capd_provider(&s.ip, "v1.12.0", ""))?;
    wait_all_ready_at(&s.client, "v1.12.0", "v1.12.0")
        .await
        .map_err(|e| s.fail(e))?;
    let upgrade = started.elapsed();
    wait_cluster_up(&s.client, 1, T)
        .await
        .map_err(|e| s.fail(format!("after the upgrade: {e}")))?;
    let mut report = format!(
        "MEASURED workload upgrade v1.11.0 -> v1.12.0: all Ready in {:.1} s\n",
        upgrade.as_secs_f64()
    );
    for (version, probe) in readers {
        let w = probe.finish().await;
        report.push_str(&format!(
            "MEASURED Cluster read at {version} every 100 ms: longest error window {} ms ({} of {} reads failed; last error: {})\n",
            w.longest.as_millis(),
            w.failures,
            w.total,
            w.last_error.as_deref().unwrap_or("none")
        ));
        // The stored version is served by the API server alone: never an error.
        if version == "v1beta2" {
            assert_eq!(w.failures, 0, "{report}");
        }
    }
    for (kind, probe) in managers {
        let w = probe.finish().await;
        report.push_str(&format!(
            "MEASURED {kind}: longest window without a ready manager {} ms\n",
            w.longest.as_millis()
        ));
    }
    eprint!("{report}");
    webhook_refuses_even_replicas(s.cluster)?;
    let objects = read_in_every_version(&s.client).await?;
    assert!(objects >= 10, "only {objects} Cluster API objects found");
    let migrated = wait_for(Duration::from_secs(120), || async {
        stored_in_storage_version_only(&s.client).await.ok()
    })
    .await;
    if migrated.is_none() {
        stored_in_storage_version_only(&s.client).await?;
    }
    scale_workers(s.cluster, 2)?;
    wait_cluster_up(&s.client, 2, T)
        .await
        .map_err(|e| s.fail(format!("after scaling to 2: {e}")))?;
    Ok(())
}

/// Scales the MachineDeployment.
fn scale_workers(cluster: &TestCluster, replicas: u32) -> TestResult {
    cluster.kubectl_ok(&[
        "scale",
        "-n",
        WORKLOAD_NS,
        "machinedeployment",
        &format!("{CLUSTER}-md-0"),
        &format!("--replicas={replicas}"),
    ])?;
    Ok(())
}

/// Part 2: the contract-changing upgrade: refused while running, paused (processes gone,
/// changes not acted on), upgraded and unpaused through operator kills, the change reconciled.
async fn contract_change(s: &mut Setup, rng: &mut Rng, runs: u64) -> TestResult {
    let objects = workload_objects(&s.client).await?;
    s.cluster.kubectl_ok(&[
        "patch",
        "-n",
        "capi-system",
        "coreprovider/cluster-api",
        "--type=merge",
        "-p",
        &format!(r#"{{"spec":{{"version":"{CONTRACT_VERSION}"}}}}"#),
    ])?;
    let refused = wait_condition(
        &s.client,
        ("CoreProvider", "capi-system", "cluster-api"),
        "PreflightCheckPassed",
        "False",
        Some("ContractChangeRequiresPause"),
        T,
    )
    .await?;
    let msg = condition_message(&refused, "PreflightCheckPassed");
    assert!(
        msg.contains("docker"),
        "the refusal names the running providers: {msg}"
    );
    let core = ready_managers(&s.client, "capi-system").await;
    assert!(
        core.len() == 1 && core[0].1.ends_with(":v1.12.0"),
        "{core:?}"
    );

    let mut pids = Vec::new();
    for (_, ns, _) in all_providers() {
        let (_, _, pid) = manager_process(&s.client, ns)
            .await
            .ok_or(format!("no running manager in {ns}"))?;
        pids.push((ns, pid));
    }
    set_all(s.cluster, "v1.12.0", true)?;
    wait_all_paused_at(&s.client, "v1.12.0")
        .await
        .map_err(|e| s.fail(e))?;
    for (ns, pid) in &pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the {ns} manager (pid {pid}) still runs while paused"
        );
    }
    let before = md_status(&s.client).await.ok_or("no MachineDeployment")?;
    scale_workers(s.cluster, 3)?;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let during = md_status(&s.client).await.ok_or("no MachineDeployment")?;
    assert_eq!(
        (during.1, during.2),
        (before.1, before.2),
        "the paused controllers acted on the change (generation, observed, replicas): {before:?} -> {during:?}"
    );
    assert_eq!(running_machines(&s.client).await, (1, 2));

    set_all(s.cluster, CONTRACT_VERSION, true)?;
    kill_at_random_points(s.cluster, &mut s.operator, rng, runs, "upgrade").await?;
    wait_all_paused_at(&s.client, CONTRACT_VERSION)
        .await
        .map_err(|e| s.fail(e))?;
    set_all(s.cluster, CONTRACT_VERSION, false)?;
    kill_at_random_points(s.cluster, &mut s.operator, rng, runs, "unpause").await?;
    wait_all_ready_at(&s.client, CONTRACT_VERSION, "v1.12.0")
        .await
        .map_err(|e| s.fail(e))?;
    let core = provider(&s.client, "CoreProvider", "capi-system", "cluster-api")
        .await
        .ok_or("no core provider")?;
    assert_eq!(
        core.pointer("/status/contract"),
        Some(&Value::from(NEXT_CONTRACT))
    );
    wait_cluster_up(&s.client, 3, T)
        .await
        .map_err(|e| s.fail(format!("after unpausing: {e}")))?;
    assert_eq!(workload_objects(&s.client).await?, objects, "objects lost");
    Ok(())
}

/// Part 3: deleting the core provider waits for the Cluster, naming it, with its manager
/// running; once the controllers have deleted the Cluster, every provider goes.
async fn blocked_deletion(s: &Setup) -> TestResult {
    s.cluster.kubectl_ok(&[
        "delete",
        "--wait=false",
        "-n",
        "capi-system",
        "coreprovider/cluster-api",
    ])?;
    let p = wait_condition(
        &s.client,
        ("CoreProvider", "capi-system", "cluster-api"),
        "Deleting",
        "False",
        Some("DeletionBlocked"),
        T,
    )
    .await?;
    let msg = condition_message(&p, "Deleting");
    assert!(
        msg.contains(&format!("Cluster {WORKLOAD_NS}/{CLUSTER}")),
        "{msg}"
    );
    assert_eq!(ready_managers(&s.client, "capi-system").await.len(), 1);
    s.cluster.kubectl_ok(&[
        "delete",
        "--wait=false",
        "-n",
        WORKLOAD_NS,
        "cluster",
        CLUSTER,
    ])?;
    let clusters = api(&s.client, "cluster.x-k8s.io", "v1beta2", "Cluster");
    let machines = api(&s.client, "cluster.x-k8s.io", "v1beta2", "Machine");
    let gone = wait_for(T, || async {
        let c = clusters.get_opt(CLUSTER).await.ok()?;
        let m = machines.list(&ListParams::default()).await.ok()?;
        (c.is_none() && m.items.is_empty()).then_some(())
    })
    .await;
    if gone.is_none() {
        return Err(s.fail("the controllers did not delete the Cluster"));
    }
    // The templates the Cluster referenced are the user's to delete, then the other providers.
    s.cluster
        .kubectl_ok(&["delete", "namespace", WORKLOAD_NS, "--timeout=120s"])?;
    for (kind, ns, name) in all_providers().into_iter().skip(1) {
        let obj = format!("{}/{name}", kind.to_lowercase());
        s.cluster
            .kubectl_ok(&["delete", "--wait=false", "-n", ns, &obj])?;
    }
    let done = wait_for(T, || async {
        providers_left(&s.client).await.is_empty().then_some(())
    })
    .await;
    if done.is_none() {
        let left = providers_left(&s.client).await;
        return Err(s.fail(format!(
            "providers left after the Cluster was deleted: {left:?}"
        )));
    }
    let core = s.cluster.kubectl(&[
        "get",
        "deployment",
        "-n",
        "capi-system",
        "capi-controller-manager",
    ])?;
    assert!(!core.0, "the core manager's Deployment is still there");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workload_cluster_through_upgrades_contract_change_and_blocked_deletion() -> TestResult {
    let test = "workload_cluster_through_upgrades_contract_change_and_blocked_deletion";
    let Some(parts) = real_parts(test) else {
        return Ok(());
    };
    let _serial = capi_test_support::isolated(module_path!()).await;
    let seed = env_u64("CAPI_KILL_SEED", 20_261_124);
    let runs = env_u64("CAPI_KILL_RUNS", 2);
    eprintln!("{test}: CAPI_KILL_SEED={seed} CAPI_KILL_RUNS={runs}");
    let mut rng = Rng(seed);
    let mut s = set_up(&parts).await?;
    live_upgrade(&s).await?;
    contract_change(&mut s, &mut rng, runs).await?;
    blocked_deletion(&s).await
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
