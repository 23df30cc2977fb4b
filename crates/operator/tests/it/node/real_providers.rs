//! End-to-end with real providers: cert-manager and the real Cluster API v1.12.0 core, kubeadm
//! bootstrap and kubeadm control-plane managers run on the real node (containerd pulls their release images), installed
//! by the operator with no webhook or conversion patches. Ready on a provider object means its
//! real manager passed its own readiness probe; the webhooks and conversion answer for real; a
//! manager that crashes on its arguments is reported as a crash loop, never Ready.

use crate::support;

use std::time::Duration;

use capi_test_support::{TestCluster, wait_for};
use kube::Client;
use serde_json::Value;
use support::{real::*, *};

const T: Duration = Duration::from_secs(300);

/// The area of these tests (their cluster, with cert-manager and the providers installed), which
/// `credential_rotation` shares rather than installing them all again.
pub(super) const AREA: &str = module_path!();

/// The cluster with cert-manager, the v1.12.0 releases and the three providers installed and
/// Ready, and the operator that installed them.
pub(super) async fn installed(
    cluster: &'static TestCluster,
    parts: &RealParts,
) -> Result<
    (
        &'static TestCluster,
        Client,
        capi_test_support::OperatorProcess,
    ),
    Box<dyn std::error::Error>,
> {
    cluster.install_crds()?;
    let client = cluster.client().await?;
    install_cert_manager(cluster, &client, parts)?;
    load_real_releases(cluster, &client, &parts.releases, &["v1.12.0"]).await?;
    let operator = start_operator(cluster, &[])?;
    apply_real(cluster, "v1.12.0", |_| String::new())?;
    for (kind, ns, name, ..) in REAL_PROVIDERS {
        wait_condition(&client, (kind, ns, name), "Ready", "True", None, T)
            .await
            .map_err(|e| format!("{e}\n--- operator log ---\n{}", operator.logs()))?;
    }
    Ok((cluster, client, operator))
}

/// A KubeadmControlPlane (v1beta2) with `replicas` and `version`.
fn kcp(name: &str, replicas: u32, version: &str) -> String {
    format!(
        "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  replicas: {replicas}\n  version: \"{version}\"\n  machineTemplate:\n    spec:\n      infrastructureRef:\n        apiGroup: infrastructure.cluster.x-k8s.io\n        kind: DockerMachineTemplate\n        name: {name}\n  kubeadmConfigSpec:\n    format: cloud-config\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_managers_become_ready_and_their_webhooks_answer() -> TestResult {
    let test = "real_managers_become_ready_and_their_webhooks_answer";
    let parts = real_node_parts()?;
    let _serial = capi_test_support::isolated(AREA).await;
    let (cluster, client, operator) = installed(real_node(test)?, &parts).await?;
    let log = |e: String| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };

    // Ready means the real manager is ready: its pod runs on the real node and passed the
    // manager's own readiness probe.
    for (kind, ns, ..) in REAL_PROVIDERS {
        let managers = ready_managers(&client, ns).await;
        assert_eq!(
            managers.len(),
            1,
            "{kind}: one ready manager expected: {managers:?}"
        );
        assert!(
            managers[0].1.ends_with(":v1.12.0"),
            "{kind}: a v1.12.0 manager expected: {managers:?}"
        );
    }

    // cert-manager issued the serving certificates and injected the CA bundle.
    let ca = cluster.kubectl_ok(&[
        "get",
        "crd",
        "clusters.cluster.x-k8s.io",
        "-o",
        "jsonpath={.spec.conversion.webhook.clientConfig.caBundle}",
    ])?;
    assert!(
        ca.len() > 100,
        "the CRD's conversion CA bundle is injected: {ca:?}"
    );
    let ca = cluster.kubectl_ok(&[
        "get",
        "validatingwebhookconfiguration",
        "capi-kubeadm-control-plane-validating-webhook-configuration",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.caBundle}",
    ])?;
    assert!(ca.len() > 100, "the webhook CA bundle is injected: {ca:?}");

    // The real validating webhook refuses an invalid object with its own message.
    let file = tempfile(&kcp("even", 2, "v1.34.0"))?;
    let (ok, _, err) = cluster.kubectl(&["create", "-f", &file])?;
    assert!(
        !ok,
        "an even replica count with stacked etcd must be refused"
    );
    assert!(
        err.contains("cannot be an even number when etcd is stacked"),
        "the real webhook's message expected: {err}"
    );
    // The real defaulting webhook fills a valid one in.
    apply(cluster, &kcp("odd", 1, "1.34.0")).map_err(|e| log(e.to_string()))?;
    let got = cluster.kubectl_ok(&[
        "get",
        "kubeadmcontrolplane",
        "odd",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.version} {.spec.rollout.strategy.type}",
    ])?;
    assert_eq!(
        got.trim(),
        "v1.34.0 RollingUpdate",
        "defaulted by the real webhook"
    );

    // Conversion: a Cluster written as v1beta1 is stored as v1beta2 by the real conversion
    // webhook and read back in both versions.
    apply(
        cluster,
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata:\n  name: converted\n  namespace: default\nspec:\n  paused: true\n  clusterNetwork:\n    pods:\n      cidrBlocks: [192.168.0.0/16]\n  controlPlaneRef:\n    apiVersion: controlplane.cluster.x-k8s.io/v1beta1\n    kind: KubeadmControlPlane\n    name: odd\n    namespace: default\n",
    )
    .map_err(|e| log(e.to_string()))?;
    for (version, path) in [
        (
            "v1beta2",
            "{.spec.paused} {.spec.clusterNetwork.pods.cidrBlocks[0]}",
        ),
        (
            "v1beta1",
            "{.spec.paused} {.spec.clusterNetwork.pods.cidrBlocks[0]}",
        ),
    ] {
        let got = cluster.kubectl_ok(&[
            "get",
            &format!("clusters.{version}.cluster.x-k8s.io"),
            "converted",
            "-n",
            "default",
            "-o",
            &format!("jsonpath={path}"),
        ])?;
        assert_eq!(got.trim(), "true 192.168.0.0/16", "read as {version}");
    }
    // v1beta2 references by API group, v1beta1 by apiVersion: the shape really changed.
    let group = cluster.kubectl_ok(&[
        "get",
        "clusters.v1beta2.cluster.x-k8s.io",
        "converted",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.controlPlaneRef.apiGroup}",
    ])?;
    assert_eq!(group.trim(), "controlplane.cluster.x-k8s.io");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_manager_is_never_ready() -> TestResult {
    let test = "a_crash_looping_manager_is_never_ready";
    let parts = real_node_parts()?;
    let _serial = capi_test_support::isolated(AREA).await;
    let (cluster, client, operator) = installed(real_node(test)?, &parts).await?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };
    let bootstrap = (
        "BootstrapProvider",
        "capi-kubeadm-bootstrap-system",
        "kubeadm",
    );

    // A flag the real manager does not know: it exits at start, again and again.
    apply_real(cluster, "v1.12.0", |kind| {
        if kind == "BootstrapProvider" {
            "  manager:\n    additionalArgs:\n      no-such-flag: \"1\"\n".into()
        } else {
            String::new()
        }
    })?;
    let p = wait_condition(
        &client,
        bootstrap,
        "Ready",
        "False",
        Some("ManagerCrashLooping"),
        T,
    )
    .await
    .map_err(log)?;
    let message = condition(&p, "Ready")
        .and_then(|c| c.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("no-such-flag"),
        "the crash loop's message names the manager's own complaint: {message}"
    );
    // It stays not Ready while it crashes (the old manager keeps running, but the rollout
    // never completes).
    let stayed = wait_for(Duration::from_secs(20), || async {
        let p = provider(&client, bootstrap.0, bootstrap.1, bootstrap.2).await?;
        (condition(&p, "Ready")?.get("status")? == "True").then_some(())
    })
    .await;
    assert!(
        stayed.is_none(),
        "a crash-looping manager must never be Ready"
    );

    // Fixed: Ready again, with the real manager's readiness.
    apply_real(cluster, "v1.12.0", |_| String::new())?;
    wait_condition(&client, bootstrap, "Ready", "True", None, T)
        .await
        .map_err(log)?;
    assert_eq!(ready_managers(&client, bootstrap.1).await.len(), 1);
    Ok(())
}

/// Every field of spec.manager on the real v1.12.0 core manager.
const ALL_MANAGER_FIELDS: &str = r#"  manager:
    syncPeriod: 7m
    leaderElection:
      leaderElect: true
      leaseDuration: 20s
      renewDeadline: 15s
      retryPeriod: 3s
      resourceName: capi-custom-lock
      resourceNamespace: capi-system
      resourceLock: leases
    cacheNamespace: default
    gracefulShutDown: 30s
    metrics:
      bindAddress: ":8181"
    health:
      healthProbeBindAddress: ":9441"
      readinessEndpointName: readyz
      livenessEndpointName: healthz
    webhook:
      port: 9444
      certDir: /tmp/k8s-webhook-server/serving-certs
    profilerAddress: ":6060"
    maxConcurrentReconciles: 5
    verbosity: 4
    featureGates:
      MachinePool: false
    additionalArgs:
      kube-api-qps: "40"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_manager_field_has_its_real_effect_or_is_reported() -> TestResult {
    let test = "every_manager_field_has_its_real_effect_or_is_reported";
    let parts = real_node_parts()?;
    let _serial = capi_test_support::isolated(AREA).await;
    let (cluster, client, operator) = installed(real_node(test)?, &parts).await?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };
    let core = ("CoreProvider", "capi-system", "cluster-api");
    apply_real(cluster, "v1.12.0", |kind| {
        if kind == "CoreProvider" {
            ALL_MANAGER_FIELDS.to_string()
        } else {
            String::new()
        }
    })?;
    // Ready again only once the new manager — health probes now on :9441 — is ready.
    let p = wait_for(T, || async {
        let p = provider(&client, core.0, core.1, core.2).await?;
        let ready = condition(&p, "Ready")?.get("status")? == "True";
        let (_, _, pid) = manager_process(&client, core.1).await?;
        (ready && cmdline(pid).iter().any(|a| a == "--health-addr=:9441")).then_some(p)
    })
    .await
    .ok_or_else(|| log("the reconfigured core manager never became Ready".into()))?;

    // Fields the binary has no flag for are reported, by name.
    let configured = condition(&p, "ManagerConfigured").ok_or("no ManagerConfigured")?;
    assert_eq!(
        configured.get("reason"),
        Some(&Value::from("ManagerSettingsIgnored"))
    );
    let message = configured
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    for field in [
        "gracefulShutDown",
        "leaderElection.resourceName",
        "leaderElection.resourceNamespace",
        "leaderElection.resourceLock",
        "health.readinessEndpointName",
        "health.livenessEndpointName",
    ] {
        assert!(
            message.contains(field),
            "{field} reported as without effect: {message}"
        );
    }

    // The others reached the running manager's command line...
    let (pod, ip, pid) = manager_process(&client, core.1)
        .await
        .ok_or("no ready core manager")?;
    let args = cmdline(pid);
    for want in [
        "--sync-period=7m",
        "--leader-elect=true",
        "--leader-elect-lease-duration=20s",
        "--leader-elect-renew-deadline=15s",
        "--leader-elect-retry-period=3s",
        "--namespace=default",
        "--diagnostics-address=:8181",
        "--insecure-diagnostics=true",
        "--health-addr=:9441",
        "--webhook-port=9444",
        "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
        "--profiler-address=:6060",
        "--v=4",
        "--kube-api-qps=40",
        "--cluster-concurrency=5",
        "--machine-concurrency=5",
        "--machinedeployment-concurrency=5",
        "--machineset-concurrency=5",
    ] {
        assert!(
            args.iter().any(|a| a == want),
            "{want} missing from {args:?}"
        );
    }
    let gates = args
        .iter()
        .find(|a| a.starts_with("--feature-gates="))
        .ok_or("no feature gates")?;
    assert!(gates.contains("MachinePool=false"), "{gates}");

    // ...and have their effect on its endpoints: plain-HTTP metrics on :8181, health on :9441,
    // the profiler on :6060, the webhook server on :9444 (reached through its Service).
    let (status, body) = http_get(&ip, 8181, "/metrics")?;
    assert_eq!(status, 200, "metrics over plain HTTP on :8181");
    assert!(
        body.contains("# TYPE controller_runtime_"),
        "controller-runtime metrics served: {}",
        body.chars().take(400).collect::<String>()
    );
    assert_eq!(http_get(&ip, 9441, "/readyz")?.0, 200, "readiness on :9441");
    assert_eq!(
        http_get(&ip, 6060, "/debug/pprof/")?.0,
        200,
        "profiler on :6060"
    );
    let refused = tempfile(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: no-refs\n  namespace: default\nspec:\n  paused: true\n",
    )?;
    let (ok, _, err) = cluster.kubectl(&["create", "--dry-run=server", "-f", &refused])?;
    assert!(
        !ok && err.contains(
            "one of spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set"
        ),
        "the core webhook answers on its moved port: {err}"
    );
    // Leader election with the given timings, held by this manager (its identity starts with
    // its hostname, the pod's name); the old manager hands the lease over once it stops.
    let lease = wait_for(T, || async {
        let got = cluster
            .kubectl_ok(&[
                "get",
                "lease",
                "-n",
                "capi-system",
                "-o",
                "jsonpath={range .items[*]}{.spec.holderIdentity} {.spec.leaseDurationSeconds}{\"\\n\"}{end}",
            ])
            .ok()?;
        got.lines()
            .any(|l| l.starts_with(&pod) && l.ends_with(" 20"))
            .then_some(got)
    })
    .await;
    assert!(lease.is_some(), "a 20 s lease held by {pod}");
    Ok(())
}
