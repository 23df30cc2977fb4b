//! The operator as users run it: the image of `make image` (pulled unchanged from the reference
//! the chart names, through the real node's registry mirror), installed with its Helm chart on
//! the real node. First the chart's values are rendered and checked without a cluster
//! (`helm_chart`). The install on a fresh cluster creates the CRDs from the chart and a core
//! provider declared in the values; the kubelet enforces the chart's securityContext (a non-root
//! user, checked on the running process) and its memory limit (checked in the pod's cgroup); a
//! GITHUB_TOKEN from a Secret is in the operator process's environment; the two replicas get
//! their PodDisruptionBudget. From inside the cluster (in-cluster config, its ServiceAccount's
//! RBAC) the operator installs the real v1.12.0 providers after cert-manager; the leader's pod is
//! deleted and the standby takes over and repairs a deleted Deployment; three providers are
//! upgraded at once to large releases (`large_releases`) under the kubelet's 256Mi limit, which
//! the release memory budget keeps the operator within (no OOM kill, no restart, the cgroup's
//! peak under the limit), and deleted again; two providers whose releases would take it far
//! over that limit if rendered (`support::hostile`) end in a render error with no restart and
//! the peak under the limit, the others staying Ready; `helm uninstall` removes
//! the operator and keeps the providers. Then the same image from `kubectl apply -k manifests/`
//! (through an overlay placing it on the real node) runs Ready and the kept providers stay
//! Ready, each pod having sized its release memory budget from the limit itself; last, a
//! server dry run of what every chart value renders.

use crate::support;

use super::{helm_chart, large_releases};

use std::{path::Path, time::Duration};

use capi_operator_api::conditions::reason::RENDER_FAILED;
use capi_test_support::{TestCluster, images_store, wait_for, workspace_root};
use kube::Client;
use serde_json::Value;
use support::{real::*, *};

const T: Duration = Duration::from_secs(300);
const NS: &str = "capi-operator-system";

/// The operator's running pods on the real node with their (uid, first container's ready).
async fn operator_pods(client: &Client) -> Vec<(String, String)> {
    pods(client, NS)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                == Some(capi_test_support::REAL_NODE_NAME)
        })
        .filter(|p| {
            let cs = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref());
            cs.is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.ready))
        })
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect()
}

/// The pod's cgroup directory (cgroupfs driver, cgroup v1 memory hierarchy).
fn pod_cgroup(uid: &str) -> Option<std::path::PathBuf> {
    find_dir(Path::new("/sys/fs/cgroup/memory"), &format!("pod{uid}"), 4)
}

/// The kubelet applied the chart's limits and user to pod `uid`: its container's cgroup has the
/// 256Mi memory limit and its processes run as 65532.
fn enforced(uid: &str) -> TestResult {
    let pod = pod_cgroup(uid).ok_or_else(|| format!("no cgroup of pod {uid}"))?;
    let mut limits = Vec::new();
    let mut uids = Vec::new();
    for e in std::fs::read_dir(&pod)?
        .flatten()
        .filter(|e| e.path().is_dir())
    {
        let limit = std::fs::read_to_string(e.path().join("memory.limit_in_bytes"))?;
        limits.push(limit.trim().parse::<u64>()?);
        for pid in std::fs::read_to_string(e.path().join("cgroup.procs"))?.lines() {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
            uids.push(uid.split_whitespace().nth(2).unwrap_or("").to_string());
        }
    }
    assert!(
        limits.contains(&(256 << 20)),
        "a container of pod {uid} limited to 256Mi: {limits:?}"
    );
    assert!(
        !uids.is_empty() && uids.iter().all(|u| u == "65532" || u == "65535"),
        "the processes of pod {uid} run as 65532 (the sandbox's pause as 65535): {uids:?}"
    );
    Ok(())
}

/// The Lease holder in the operator's namespace.
fn leader(cluster: &TestCluster) -> Option<String> {
    let leases = cluster.get_json(&["leases", "-n", NS]).ok()?;
    leases["items"]
        .as_array()?
        .iter()
        .find_map(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
        .filter(|h| !h.is_empty())
}

/// Whether `make image` pushed the operator's image under the chart's default reference.
fn image_built() -> Result<bool, Box<dyn std::error::Error>> {
    let values = workspace_root().join("manifests/helm/capi-provider-operator/values.yaml");
    let values = capi_yaml::from_str::<Value>(&std::fs::read_to_string(values)?)?;
    let repo = values["image"]["repository"].as_str().unwrap_or_default();
    Ok(images_store()
        .join(format!("public/docker/registry/v2/repositories/{repo}"))
        .is_dir())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_image_runs_from_its_chart_and_kustomization() -> TestResult {
    let test = "the_operators_image_runs_from_its_chart_and_kustomization";
    let helm = helm_bin(test)?;
    let parts = real_node_parts()?;
    if !image_built()? {
        return Err(format!("{test}: the operator's image is not built: run `make image`").into());
    }
    // The values need no cluster: checked first, they fail fast.
    helm_chart::check_values(&helm)?;
    let _area = capi_test_support::isolated(module_path!()).await;
    let cluster = real_node(test)?;
    let client = cluster.client().await?;
    install_cert_manager(cluster, &client, &parts)?;
    load_real_releases(cluster, &client, &parts.releases, &["v1.12.0"]).await?;
    let core = parts
        .releases
        .join("cluster-api/v1.12.0/core-components.yaml");
    let large = large_releases::serve(cluster, &core).await?;

    let kubeconfig = cluster.kubeconfig().to_string_lossy().into_owned();
    let helm_in_ns = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", &kubeconfig, "-n", NS];
        all.extend_from_slice(args);
        helm_run(&helm, &all)
    };
    let running = install_chart(cluster, &client, &helm_in_ns, large.api_url()).await?;
    providers_and_failover(cluster, &client, &running, test).await?;
    budget_under_limit(cluster, &client, &large, test).await?;
    drop(large);
    hostile_under_limit(cluster, &client, test).await?;

    helm_in_ns(&["uninstall", "capi-operator", "--wait"])?;
    let gone = wait_for(T, || async {
        pods(&client, NS).await.is_empty().then_some(())
    })
    .await;
    assert!(gone.is_some(), "helm uninstall left operator pods");
    let kept = provider(&client, "CoreProvider", "capi-system", "cluster-api").await;
    assert!(
        kept.is_some_and(|p| p.pointer("/metadata/deletionTimestamp").is_none()),
        "helm uninstall deleted the provider its values declared"
    );

    from_kustomization(cluster, &client).await?;
    helm_chart::apply_dry_run(cluster, &helm)
}

/// Helm with the kubeconfig and namespace of the release.
type Helm<'a> = &'a dyn Fn(&[&str]) -> Result<String, String>;

/// `helm install` on the fresh cluster (the CRDs come from the chart) with the release values of
/// `helm_chart`; returns the two ready operator pods (name, uid) once the kubelet is seen
/// enforcing the chart's limits and user, the Secret's GITHUB_TOKEN is in the operator
/// process's environment and the core provider of the values is Ready, with the release's
/// PodDisruptionBudget over the two replicas.
async fn install_chart(
    cluster: &TestCluster,
    client: &Client,
    helm: Helm<'_>,
    github_api_url: &str,
) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let (fresh, _, _) =
        cluster.kubectl(&["get", "crd", "coreproviders.management.cluster.x-k8s.io"])?;
    assert!(
        !fresh,
        "the cluster is not fresh: the CRDs exist before helm install"
    );
    // A value no other place has, so finding it in the process proves where it came from.
    let token = format!("chart-token-{}", std::process::id());
    let values = helm_chart::release_values(cluster, NS, &token, "v1.12.0")?;
    // Through the values' envFrom Secret: where the large releases of `budget_under_limit` are.
    let env = serde_json::json!({"stringData": {"CAPI_OPERATOR_GITHUB_API_URL": github_api_url}});
    cluster.kubectl_ok(&[
        "patch",
        "secret",
        "-n",
        NS,
        "proxy-env",
        "--type",
        "merge",
        "-p",
        &env.to_string(),
    ])?;
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    helm(&[
        "install",
        "capi-operator",
        &chart.to_string_lossy(),
        "--create-namespace",
        "-f",
        &values,
        "--set-json",
        &large_releases::extra_rules(),
        "--wait",
        "--timeout",
        "240s",
    ])?;
    let running = wait_for(T, || async {
        let p = operator_pods(client).await;
        (p.len() == 2).then_some(p)
    })
    .await
    .ok_or("two ready operator pods on the real node")?;
    for (_, uid) in &running {
        enforced(uid)?;
    }
    let (pod, _, pid) = wait_for(T, || async { manager_process(client, NS).await })
        .await
        .ok_or("no operator process found for a ready pod on the real node")?;
    helm_chart::check_operator_env(&pod, pid, &token)?;

    let p = wait_condition(
        client,
        ("CoreProvider", "capi-system", "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v1.12.0"))
    );
    let (found, min) = release_pdb(cluster, NS, "{.spec.minAvailable}/{.status.expectedPods}")?;
    assert!(
        found && min == "1/2",
        "two replicas: a budget keeping one available ({min})"
    );
    Ok(running)
}

/// From inside the cluster: the other real providers, after cert-manager (the core one comes
/// from the chart's values). Then the leader's pod goes: the standby takes the Lease and
/// repairs what changes meanwhile.
async fn providers_and_failover(
    cluster: &TestCluster,
    client: &Client,
    running: &[(String, String)],
    test: &str,
) -> TestResult {
    let manifest = real_manifest_on(ON_REAL_NODE, "v1.12.0", |_| String::new());
    let others: Vec<&str> = manifest
        .split("---\n")
        .filter(|d| !d.contains("\nkind: CoreProvider\n"))
        .collect();
    apply(cluster, &others.join("---\n"))?;
    for (kind, ns, name, ..) in REAL_PROVIDERS {
        wait_condition(client, (kind, ns, name), "Ready", "True", None, T).await?;
    }

    let first = leader(cluster).ok_or("no Lease holder")?;
    let pod = running
        .iter()
        .map(|(n, _)| n.clone())
        .find(|n| first.contains(n.as_str()))
        .ok_or_else(|| format!("the Lease holder {first} is none of {running:?}"))?;
    cluster.kubectl_ok(&["delete", "pod", "-n", NS, &pod])?;
    cluster.kubectl_ok(&[
        "delete",
        "deployment",
        "-n",
        "capi-system",
        "capi-controller-manager",
    ])?;
    let next = wait_for(T, || async {
        leader(cluster).filter(|l| !l.contains(&pod))
    })
    .await
    .ok_or("the standby never took the Lease")?;
    wait_available(client, "capi-system", "capi-controller-manager", T).await?;
    eprintln!("{test}: {first} -> {next}; the core Deployment repaired");
    Ok(())
}

/// The release memory budget under the kubelet's limit: three providers upgraded at once to
/// releases each far larger than the real ones (`large_releases`), which the operator without
/// its budget cannot hold together within the chart's 256Mi. Every one reaches Ready at the new
/// version, no operator container was OOM-killed or restarted, and the peak usage of each
/// operator container's memory cgroup stayed under its limit. The providers are deleted after.
async fn budget_under_limit(
    cluster: &TestCluster,
    client: &Client,
    large: &large_releases::LargeReleases,
    test: &str,
) -> TestResult {
    let t0 = std::time::Instant::now();
    // The pods are checked first: a kill explains an upgrade that never ends.
    let upgrade = large_releases::upgrade(cluster, client).await;
    if upgrade.is_err() {
        for pod in pods(client, NS).await {
            let name = pod.metadata.name.unwrap_or_default();
            let (_, log, _) = cluster.kubectl(&["logs", "-n", NS, &name, "--tail=15"])?;
            eprintln!("{name}: {log}");
        }
    }
    let peaks = unharmed(client, "the large releases").await?;
    let upgrade = upgrade?;
    eprintln!(
        "{test}: three {:.1} MB releases upgraded at once in {:.1}s under 256Mi; peaks {peaks:?}",
        large.bytes as f64 / 1e6,
        upgrade.as_secs_f64(),
    );
    large_releases::remove(cluster, client).await?;
    eprintln!(
        "{test}: the large releases' step took {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Every container of every operator pod is unharmed by `what`: never restarted nor killed, and
/// the peak usage of each pod's limited cgroup under its limit. Returns the peaks, for the log.
async fn unharmed(client: &Client, what: &str) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    if let Some(restart) = restarted(client).await {
        return Err(format!("the operator restarted under {what}: {restart}").into());
    }
    let mut peaks = Vec::new();
    for pod in pods(client, NS).await {
        let name = pod.metadata.name.unwrap_or_default();
        let uid = pod.metadata.uid.unwrap_or_default();
        let (peak, limit) = peak_usage(&uid)?;
        if peak >= limit {
            return Err(format!(
                "{name}: the operator's memory reached its limit under {what} ({peak} of {limit} bytes)"
            )
            .into());
        }
        peaks.push(format!("{name} {:.1} MiB", peak as f64 / 1048576.0));
    }
    Ok(peaks)
}

/// The first container of an operator pod that restarted or was killed: its pod, name, restart
/// count and how it last ended.
async fn restarted(client: &Client) -> Option<String> {
    pods(client, NS).await.into_iter().find_map(|pod| {
        let name = pod.metadata.name.unwrap_or_default();
        let statuses = pod.status?.container_statuses?;
        statuses.into_iter().find_map(|c| {
            let killed = c.last_state.and_then(|s| s.terminated);
            (c.restart_count != 0 || killed.is_some()).then(|| {
                format!(
                    "{name}/{}: {} restarts, last end {:?}",
                    c.name,
                    c.restart_count,
                    killed.map(|t| (t.reason, t.exit_code))
                )
            })
        })
    })
}

/// The hostile providers (name, whether it reads the expansion's variables, what its render
/// error says), each an InfrastructureProvider in namespace `<name>-system`.
const HOSTILE: [(&str, bool, &str); 2] = [
    (
        "dense",
        false,
        "more than the operator's whole release memory budget",
    ),
    ("expansion", true, "a substituted value exceeds"),
];

const HOSTILE_METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 1, minor: 0, contract: v1beta2}\n";

/// Hostile releases under the kubelet's limit: two providers whose releases
/// (`support::hostile`) would take the operator far over the chart's 256Mi if rendered, one
/// dense in YAML nodes (refused: it costs more than the whole budget), one growing through
/// substitution (stopped while it expands). Each ends in a render error, without a restart of
/// any operator container (checked while waiting, once both errors are seen and again after a
/// few retries' time), the cgroups' peaks under the limit; the real providers stay Ready. The
/// providers are deleted after.
async fn hostile_under_limit(cluster: &TestCluster, client: &Client, test: &str) -> TestResult {
    let t0 = std::time::Instant::now();
    let dense = hostile::node_dense();
    for (name, vars, _) in HOSTILE {
        let ns = format!("{name}-system");
        cluster.ensure_namespace(&ns)?;
        let components = if vars { hostile::EXPANSION } else { &dense };
        hostile::serve(client, &ns, name, "v1.0.0", HOSTILE_METADATA, components).await?;
        if vars {
            hostile::variables_secret(client, &ns, "vars").await?;
        }
    }
    drop(dense);
    apply(cluster, &hostile_providers())?;
    for (name, _, says) in HOSTILE {
        let p = render_error(client, name).await?;
        let message = condition_message(&p, "ProviderInstalled");
        assert!(message.contains(says), "{name}: {message}");
        // A first install that failed has no Ready condition yet; it must not say True.
        let ready = condition(&p, "Ready").and_then(|c| c.get("status"));
        assert_ne!(ready, Some(&Value::from("True")), "{name} is Ready");
        eprintln!("{test}: {name}: {message}");
    }
    let first = unharmed(client, "the hostile releases").await?;
    // Render errors are retried: a retry must not harm either.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let peaks = unharmed(client, "the hostile releases' retries").await?;
    for (kind, ns, name, ..) in REAL_PROVIDERS {
        wait_condition(client, (kind, ns, name), "Ready", "True", None, T).await?;
    }
    eprintln!(
        "{test}: hostile releases refused under 256Mi in {:.1}s, no restart; peaks {first:?}, then {peaks:?}",
        t0.elapsed().as_secs_f64()
    );
    for (name, ..) in HOSTILE {
        let ns = format!("{name}-system");
        cluster.kubectl_ok(&["delete", "-n", &ns, "infrastructureprovider", name])?;
    }
    Ok(())
}

/// The providers of [`HOSTILE`], each selecting its ConfigMap release.
fn hostile_providers() -> String {
    HOSTILE
        .iter()
        .map(|(name, vars, _)| {
            let secret = if *vars { "  secretName: vars\n" } else { "" };
            format!(
                "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: {name}\n  namespace: {name}-system\nspec:\n  version: v1.0.0\n{secret}  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {name}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Waits until provider `name` reports its render error; an operator container's restart ends
/// the wait at once, as the failure it is (restarts only: a killed container's cgroup, where
/// the peak is read, is gone until the kubelet has restarted it).
async fn render_error(client: &Client, name: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let ns = format!("{name}-system");
    let seen = wait_for(T, || async {
        if let Some(restart) = restarted(client).await {
            return Some(Err(format!(
                "the operator restarted under the hostile releases: {restart}"
            )));
        }
        let p = provider(client, "InfrastructureProvider", &ns, name).await?;
        let c = condition(&p, "ProviderInstalled")?;
        let failed = c.get("status")? == "False" && c.get("reason")? == RENDER_FAILED;
        failed.then_some(Ok(p))
    })
    .await;
    match seen {
        Some(Ok(p)) => Ok(p),
        Some(Err(e)) => Err(e.into()),
        None => {
            let p = provider(client, "InfrastructureProvider", &ns, name).await;
            Err(format!("{name}: no render error; last seen {p:?}").into())
        }
    }
}

/// The peak usage (`memory.max_usage_in_bytes`) and the limit of pod `uid`'s limited container
/// cgroup.
fn peak_usage(uid: &str) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    let pod = pod_cgroup(uid).ok_or_else(|| format!("no cgroup of pod {uid}"))?;
    for e in std::fs::read_dir(&pod)?
        .flatten()
        .filter(|e| e.path().is_dir())
    {
        let read = |f: &str| -> Result<u64, Box<dyn std::error::Error>> {
            Ok(std::fs::read_to_string(e.path().join(f))?
                .trim()
                .parse::<u64>()?)
        };
        let limit = read("memory.limit_in_bytes")?;
        if limit == 256 << 20 {
            return Ok((read("memory.max_usage_in_bytes")?, limit));
        }
    }
    Err(format!("no container of pod {uid} limited to 256Mi").into())
}

/// The same image from manifests/ with kustomize, through an overlay for the real node: two
/// ready pods, and the providers the chart's release left behind stay Ready under it.
async fn from_kustomization(cluster: &TestCluster, client: &Client) -> TestResult {
    let overlay = cluster.dir().join("kustomize-overlay");
    std::fs::create_dir_all(&overlay)?;
    // kustomize takes a base by a relative path only.
    let up = "../".repeat(overlay.components().count().saturating_sub(1));
    let manifests = format!(
        "{up}{}",
        workspace_root()
            .join("manifests")
            .display()
            .to_string()
            .trim_start_matches('/')
    );
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources: [{manifests}]\npatches:\n- target: {{kind: Deployment, name: capi-provider-operator}}\n  patch: '[{{\"op\": \"add\", \"path\": \"/spec/template/spec/nodeSelector\", \"value\": {{\"{REAL_NODE_LABEL}\": \"true\"}}}}, {{\"op\": \"add\", \"path\": \"/spec/template/spec/tolerations\", \"value\": [{{\"key\": \"{REAL_NODE_LABEL}\", \"operator\": \"Exists\", \"effect\": \"NoSchedule\"}}]}}]'\n"
        ),
    )?;
    let overlay = overlay.to_string_lossy();
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        &overlay,
    ])?;
    wait_available(client, NS, "capi-provider-operator", T).await?;
    let running = operator_pods(client).await;
    assert_eq!(
        running.len(),
        2,
        "kubectl apply -k: two ready pods: {running:?}"
    );
    for (kind, ns, name, ..) in REAL_PROVIDERS {
        wait_condition(client, (kind, ns, name), "Ready", "True", None, T).await?;
    }
    // manifests/ sets no budget: each pod sizes it from the kubelet's 256Mi limit (three
    // quarters), read from the container's own cgroup.
    for (pod, _) in &running {
        let log = cluster.kubectl_ok(&["logs", "-n", NS, pod])?;
        let line = log
            .lines()
            .find(|l| l.contains("release memory budget"))
            .ok_or_else(|| format!("{pod}: no release memory budget in its log:\n{log}"))?;
        assert!(
            line.contains("\"mib\":192") || line.contains("mib=192"),
            "{pod}: the budget from the 256Mi limit is 192 MiB: {line}"
        );
    }
    Ok(())
}
