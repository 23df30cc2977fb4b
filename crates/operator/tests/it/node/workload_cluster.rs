//! End-to-end with a workload cluster that real controllers reconcile: the real Cluster API
//! core, kubeadm bootstrap and kubeadm control-plane managers and the docker provider (its
//! in-memory backend: machines without hardware, a fake workload API server in the provider's
//! pod), all installed by the operator from ConfigMaps on the real node, and a Cluster with
//! a KubeadmControlPlane and a MachineDeployment brought up by those controllers. One cluster
//! goes through, in order:
//!
//! 1. the real contract change, v1.10.10 (contract v1beta1; the workload is written in v1beta1,
//!    all v1.10 serves) → v1.11.0 (v1beta2): refused while the providers run; paused, every
//!    manager process exits and a scale made meanwhile is not acted on; upgraded paused and
//!    unpaused with the operator killed at seeded random points and clients reading the Cluster
//!    every 100 ms at both versions; then the stored v1beta1 objects read back as v1beta2 through
//!    the new conversion webhooks, every CRD's stored versions migrated, the scale reconciled by
//!    the v1beta2 managers and no object lost;
//! 2. a multi-minor upgrade within contract v1beta2 in one step, live: core, kubeadm bootstrap
//!    and kubeadm control plane v1.11.0 → v1.14.2 (and the docker provider to v1.12.0, the
//!    newest whose test module the proxy serves), reads of the Cluster every 100 ms and each
//!    provider's ready managers measured; the cluster scaled after;
//! 3. the core provider's deletion blocked by the Cluster, naming it, until the controllers have
//!    deleted the Cluster.
//!
//! Releases: v1.10.10, v1.11.0 and v1.14.2 as `e2e/scripts/build-providers.sh` assembles them
//! from their modules' `config/`; the docker provider's as that script renders them. `CAPI_KILL_SEED` (default 20261124) picks the kill points,
//! `CAPI_KILL_RUNS` (default 2) the kills per step; both are printed so a failing run can be
//! replayed.

use crate::support;

use std::time::Duration;

use capi_test_support::{OperatorProcess, Rng, TestCluster, env_u64, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client, api::ListParams};
use serde_json::Value;
use support::{real::*, workload::*, *};

const T: Duration = Duration::from_secs(300);
/// The last Cluster API line of contract v1beta1.
const V1BETA1_LINE: &str = "v1.10.10";
/// The first of contract v1beta2.
const V1BETA2_LINE: &str = "v1.11.0";
/// The newest line built: the multi-minor upgrade's target.
const NEWEST: &str = "v1.14.2";
/// The core provider's feature gates: ClusterTopology and RuntimeSDK on, because the core
/// manager's CRD migrator migrates the stored versions of ClusterClass and ExtensionConfig only
/// with them (with the release's defaults those two CRDs keep `[v1beta1, v1beta2]`).
fn core_gates(kind: &str) -> String {
    if kind != "CoreProvider" {
        return String::new();
    }
    "  manager:\n    featureGates:\n      ClusterTopology: true\n      RuntimeSDK: true\n".into()
}

/// The newest docker (in-memory) provider built (the test module of v1.13 and v1.14 needs
/// packages the module proxy does not serve).
const CAPD_NEWEST: &str = "v1.12.0";

/// Every Cluster API CRD's stored versions are its storage version alone: the new managers'
/// CRD migrator rewrote what the old ones stored.
async fn stored_in_storage_version_only(client: &Client) -> Result<(), String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let list = crds
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut wrong = Vec::new();
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
            wrong.push(format!(
                "{}: stored versions {stored:?}, storage {storage:?}",
                crd.metadata.name.as_deref().unwrap_or("")
            ));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
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

/// Merges `patch` (JSON) into the spec of provider `kind` `ns/name`.
fn patch_spec(cluster: &TestCluster, kind: &str, ns: &str, name: &str, patch: &str) -> TestResult {
    cluster.kubectl_ok(&[
        "patch",
        "-n",
        ns,
        &format!("{}/{name}", kind.to_lowercase()),
        "--type=merge",
        "-p",
        &format!(r#"{{"spec":{patch}}}"#),
    ])?;
    Ok(())
}

/// Sets `spec.version` and `spec.paused` of every provider.
fn set_all(cluster: &TestCluster, version: &str, paused: bool) -> TestResult {
    for (kind, ns, name) in all_providers() {
        let patch = format!(r#"{{"version":"{version}","paused":{paused}}}"#);
        patch_spec(cluster, kind, ns, name, &patch)?;
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

/// The MachineDeployment's generation, observed generation and status replicas, read at API
/// `version`.
async fn md_status(client: &Client, version: &str) -> Option<(i64, i64, i64)> {
    let md = api(client, "cluster.x-k8s.io", version, "MachineDeployment")
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

/// Names of the workload namespace's Cluster API objects of the kinds that must survive, listed
/// at API `version`.
async fn workload_objects(client: &Client, version: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (g, k) in [
        ("cluster.x-k8s.io", "Cluster"),
        ("cluster.x-k8s.io", "MachineDeployment"),
        ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
        ("infrastructure.cluster.x-k8s.io", "DevCluster"),
        ("infrastructure.cluster.x-k8s.io", "DevMachineTemplate"),
        ("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate"),
    ] {
        let list = api(client, g, version, k)
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

/// cert-manager, the releases, the operator, the four providers at [`V1BETA1_LINE`] and the
/// workload cluster up with one worker, written in v1beta1.
async fn set_up(parts: &RealParts) -> Result<Setup, Box<dyn std::error::Error>> {
    let cluster = real_node("workload")?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    install_cert_manager(cluster, &client, parts)?;
    let versions = [V1BETA1_LINE, V1BETA2_LINE, NEWEST];
    load_real_releases(cluster, &client, &parts.releases, &versions).await?;
    load_capd_releases(cluster, &client, &[V1BETA1_LINE, V1BETA2_LINE, CAPD_NEWEST]).await?;
    let operator = start_operator(cluster, &[])?;
    let ip = capd_pod_ip(cluster)?;
    let s = Setup {
        cluster,
        client,
        operator,
        ip,
    };
    apply_real(cluster, V1BETA1_LINE, core_gates)?;
    apply(
        cluster,
        &capd_provider_on(ON_REAL_NODE, &s.ip, V1BETA1_LINE, ""),
    )?;
    wait_all_ready_at(&s.client, V1BETA1_LINE, V1BETA1_LINE)
        .await
        .map_err(|e| s.fail(e))?;
    apply(cluster, &workload_cluster(1))?;
    wait_cluster_up(&s.client, "v1beta1", 1, T)
        .await
        .map_err(|e| s.fail(e))?;
    Ok(s)
}

/// Readers of the Cluster at both API versions, started together.
fn readers(client: &Client) -> [(&'static str, Probe); 2] {
    [
        ("v1beta2", cluster_reader(client, "v1beta2")),
        ("v1beta1", cluster_reader(client, "v1beta1")),
    ]
}

/// Stops the readers and prints what they saw as `MEASURED` lines under `title`; returns the
/// windows by version.
async fn report_readers(
    title: &str,
    readers: [(&'static str, Probe); 2],
) -> Vec<(&'static str, Window)> {
    let mut report = String::new();
    let mut out = Vec::new();
    for (version, probe) in readers {
        let w = probe.finish().await;
        report.push_str(&format!(
            "MEASURED {title}: Cluster read at {version} every 100 ms: longest error window {} ms ({} of {} reads failed; last error: {})\n",
            w.longest.as_millis(),
            w.failures,
            w.total,
            w.last_error.as_deref().unwrap_or("none")
        ));
        out.push((version, w));
    }
    eprint!("{report}");
    out
}

/// Waits (up to 2 minutes) until every CRD's stored versions are its storage version alone.
async fn wait_migrated(client: &Client) -> Result<(), String> {
    let migrated = wait_for(Duration::from_secs(120), || async {
        stored_in_storage_version_only(client).await.ok()
    })
    .await;
    match migrated {
        Some(()) => Ok(()),
        None => stored_in_storage_version_only(client).await,
    }
}

/// After a contract-v1beta2 install, the workload settled: every stored object readable in
/// every served version (the managers' conversion webhooks), every CRD's stored versions
/// migrated to its storage version, and the real KubeadmControlPlane webhook answering.
async fn converted_and_migrated(s: &Setup) -> TestResult {
    let objects = read_in_every_version(&s.client).await?;
    assert!(objects >= 10, "only {objects} Cluster API objects found");
    wait_migrated(&s.client).await?;
    webhook_refuses_even_replicas(s.cluster)
}

/// Part 2: core, bootstrap and control plane from v1.11.0 to [`NEWEST`] in one step (and the
/// docker provider to [`CAPD_NEWEST`]) with the cluster live, measured; then a scale to 3.
async fn multi_minor_upgrade(s: &Setup) -> TestResult {
    let readers = readers(&s.client);
    let managers: Vec<_> = all_providers()
        .into_iter()
        .map(|(kind, ns, _)| (kind, manager_probe(&s.client, ns)))
        .collect();
    let started = std::time::Instant::now();
    for (kind, ns, name) in all_providers() {
        let version = if ns == CAPD_NS { CAPD_NEWEST } else { NEWEST };
        patch_spec(
            s.cluster,
            kind,
            ns,
            name,
            &format!(r#"{{"version":"{version}"}}"#),
        )?;
    }
    wait_all_ready_at(&s.client, NEWEST, CAPD_NEWEST)
        .await
        .map_err(|e| s.fail(e))?;
    let upgrade = started.elapsed();
    wait_cluster_up(&s.client, "v1beta2", 2, T)
        .await
        .map_err(|e| s.fail(format!("after the upgrade: {e}")))?;
    let title = format!("workload upgrade {V1BETA2_LINE} -> {NEWEST} (docker {CAPD_NEWEST})");
    eprintln!(
        "MEASURED {title}: all Ready in {:.1} s",
        upgrade.as_secs_f64()
    );
    let windows = report_readers(&title, readers).await;
    for (kind, probe) in managers {
        let w = probe.finish().await;
        eprintln!(
            "MEASURED {title}: {kind}: longest window without a ready manager {} ms",
            w.longest.as_millis()
        );
    }
    // The stored version is served by the API server alone: never an error.
    assert_eq!(windows[0].1.failures, 0, "{:?}", windows[0]);
    converted_and_migrated(s).await?;
    scale_workers(s.cluster, 3)?;
    wait_cluster_up(&s.client, "v1beta2", 3, T)
        .await
        .map_err(|e| s.fail(format!("after scaling to 3: {e}")))?;
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

/// The core upgrade to [`V1BETA2_LINE`] is refused while the providers run, naming them, and
/// the v1.10 core manager keeps running.
async fn contract_change_refused(s: &Setup) -> TestResult {
    let version = format!(r#"{{"version":"{V1BETA2_LINE}"}}"#);
    patch_spec(
        s.cluster,
        "CoreProvider",
        "capi-system",
        "cluster-api",
        &version,
    )?;
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
        core.len() == 1 && core[0].1.ends_with(&format!(":{V1BETA1_LINE}")),
        "{core:?}"
    );
    Ok(())
}

/// Every provider paused at [`V1BETA1_LINE`]: each manager process exits, and a scale to 2
/// made meanwhile is not acted on.
async fn pause_before_contract_change(s: &Setup) -> TestResult {
    let mut pids = Vec::new();
    for (_, ns, _) in all_providers() {
        let (_, _, pid) = manager_process(&s.client, ns)
            .await
            .ok_or(format!("no running manager in {ns}"))?;
        pids.push((ns, pid));
    }
    set_all(s.cluster, V1BETA1_LINE, true)?;
    wait_all_paused_at(&s.client, V1BETA1_LINE)
        .await
        .map_err(|e| s.fail(e))?;
    for (ns, pid) in &pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the {ns} manager (pid {pid}) still runs while paused"
        );
    }
    let before = md_status(&s.client, "v1beta1")
        .await
        .ok_or("no MachineDeployment")?;
    scale_workers(s.cluster, 2)?;
    // The manager processes are gone (checked above); a few seconds show nothing else acts.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = md_status(&s.client, "v1beta1")
        .await
        .ok_or("no MachineDeployment")?;
    assert_eq!(
        (during.1, during.2),
        (before.1, before.2),
        "the paused controllers acted on the change (generation, observed, replicas): {before:?} -> {during:?}"
    );
    assert_eq!(running_machines(&s.client, "v1beta1").await, (1, 1));
    Ok(())
}

/// Part 1: the real contract change v1.10.10 → v1.11.0: refused while running, paused
/// (processes gone, changes not acted on), upgraded and unpaused through operator kills with
/// the Cluster read every 100 ms; the v1beta1 objects read back as v1beta2, stored versions
/// migrated, the pending scale reconciled by the v1beta2 managers, nothing lost.
async fn contract_change(s: &mut Setup, rng: &mut Rng, runs: u64) -> TestResult {
    let objects = workload_objects(&s.client, "v1beta1").await?;
    contract_change_refused(s).await?;
    pause_before_contract_change(s).await?;
    let readers = readers(&s.client);
    let started = std::time::Instant::now();
    set_all(s.cluster, V1BETA2_LINE, true)?;
    kill_at_random_points(s.cluster, &mut s.operator, rng, runs, "upgrade").await?;
    wait_all_paused_at(&s.client, V1BETA2_LINE)
        .await
        .map_err(|e| s.fail(e))?;
    set_all(s.cluster, V1BETA2_LINE, false)?;
    kill_at_random_points(s.cluster, &mut s.operator, rng, runs, "unpause").await?;
    wait_all_ready_at(&s.client, V1BETA2_LINE, V1BETA2_LINE)
        .await
        .map_err(|e| s.fail(e))?;
    let upgrade = started.elapsed();
    let title = format!("contract change {V1BETA1_LINE} (v1beta1) -> {V1BETA2_LINE} (v1beta2)");
    eprintln!(
        "MEASURED {title}: paused upgrade to all Ready, {runs} operator kills per step: {:.1} s",
        upgrade.as_secs_f64()
    );
    let windows = report_readers(&title, readers).await;
    // A v1beta1 client never notices: the objects stored in v1beta1 are served as stored until
    // the new core manager migrates them, and its conversion webhook answers by then.
    assert_eq!(windows[1].1.failures, 0, "{:?}", windows[1]);
    for (kind, ns, name) in all_providers() {
        let p = provider(&s.client, kind, ns, name)
            .await
            .ok_or(format!("no {kind}"))?;
        assert_eq!(
            p.pointer("/status/contract"),
            Some(&Value::from("v1beta2")),
            "{kind}"
        );
    }
    // The migration and the scale are the new managers' work, done side by side: wait on both
    // (the reads in every version come after, once no Machine is being created).
    let (up, migrated) = tokio::join!(
        wait_cluster_up(&s.client, "v1beta2", 2, T),
        wait_migrated(&s.client)
    );
    up.map_err(|e| s.fail(format!("after unpausing: {e}")))?;
    migrated?;
    assert_eq!(
        workload_objects(&s.client, "v1beta2").await?,
        objects,
        "objects lost"
    );
    converted_and_migrated(s).await
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
    let parts = real_node_parts()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let seed = env_u64("CAPI_KILL_SEED", 20_261_124);
    let runs = env_u64("CAPI_KILL_RUNS", 2);
    eprintln!("{test}: CAPI_KILL_SEED={seed} CAPI_KILL_RUNS={runs}");
    let mut rng = Rng(seed);
    let started = std::time::Instant::now();
    let lap = |part: &str| {
        eprintln!(
            "{test}: {part} done at {:.0} s",
            started.elapsed().as_secs_f64()
        );
    };
    let mut s = set_up(&parts).await?;
    lap("set-up");
    contract_change(&mut s, &mut rng, runs).await?;
    lap("contract change");
    multi_minor_upgrade(&s).await?;
    lap("multi-minor upgrade");
    blocked_deletion(&s).await?;
    lap("blocked deletion");
    Ok(())
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
