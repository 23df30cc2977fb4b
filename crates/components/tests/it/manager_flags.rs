//! `spec.manager` fields become flags the manager's binary really has, on the real Cluster API
//! releases build-providers.sh assembles and on small hand-written releases; what cannot take
//! effect is reported.

use capi_components::{
    customize::ManagerReport,
    managers,
    render::{Rendered, render},
};
use capi_operator_api::AnyProvider;
use capi_release::Release;
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;
/// A rendered release and its manager container's args.
type RenderedArgs = (Rendered, Vec<String>);

/// The assembled release of `provider` (its directory name) at `version`; an error (the test
/// fails) when build-providers.sh has not run.
fn real_release(
    provider: &str,
    version: &str,
    file: &str,
) -> Result<Release, Box<dyn std::error::Error>> {
    let dir = capi_test_support::releases()?.join(provider).join(version);
    Ok(Release {
        version: version.into(),
        metadata: std::fs::read_to_string(dir.join("metadata.yaml"))?,
        components: std::fs::read_to_string(dir.join(file))?,
    })
}

fn provider(
    kind: &str,
    name: &str,
    namespace: &str,
    spec: Value,
) -> Result<AnyProvider, Box<dyn std::error::Error>> {
    Ok(AnyProvider::from_value(json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))?)
}

/// Args of the `manager` container of the only (or named) Deployment.
pub(crate) fn manager_args(r: &Rendered) -> Vec<String> {
    r.objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .flat_map(|o| {
            o["spec"]["template"]["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|c| c["name"] == "manager")
        .flat_map(|c| c["args"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

fn only_report(r: &Rendered) -> Result<&ManagerReport, String> {
    match r.managers.as_slice() {
        [one] => Ok(one),
        other => Err(format!("expected one manager report, got {other:?}")),
    }
}

fn core(spec: Value) -> Result<RenderedArgs, Box<dyn std::error::Error>> {
    let release = real_release("cluster-api", "v1.12.0", "core-components.yaml")?;
    let p = provider("CoreProvider", "cluster-api", "capi-system", spec)?;
    let r = render(&p, &release, |_| None)?;
    let args = manager_args(&r);
    Ok((r, args))
}

/// Every flag in `args` is one the v1.12.0 core manager accepts.
fn assert_accepted(args: &[String]) -> Result<(), String> {
    let set =
        managers::identify("cluster-api-controller", "v1.12.0").ok_or("core not in the table")?;
    for a in args {
        let name = a.trim_start_matches('-').split('=').next().unwrap_or("");
        if !set.accepts(name) {
            return Err(format!("{a} is not a flag of the v1.12.0 core manager"));
        }
    }
    Ok(())
}

#[test]
fn max_concurrent_reconciles_sets_every_core_concurrency_flag() -> TestResult {
    let (r, args) = core(json!({"version": "v1.12.0", "manager": {"maxConcurrentReconciles": 5}}))?;
    let want = [
        "cluster",
        "clusterclass",
        "clusterresourceset",
        "clustertopology",
        "clustercache",
        "extensionconfig",
        "machine",
        "machinedeployment",
        "machinehealthcheck",
        "machinepool",
        "machineset",
    ];
    for c in want {
        let flag = format!("--{c}-concurrency=5");
        assert!(args.contains(&flag), "{flag} missing from {args:?}");
    }
    assert_eq!(
        args.iter().filter(|a| a.contains("-concurrency=")).count(),
        want.len()
    );
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--max-concurrent-reconciles"))
    );
    assert_accepted(&args)?;
    let report = only_report(&r)?;
    assert_eq!(report.deployment, "capi-controller-manager");
    assert_eq!(report.binary.as_deref(), Some("cluster-api v1.12.0"));
    assert_eq!(report.findings, vec![]);
    Ok(())
}

#[test]
fn concurrency_flags_given_explicitly_win() -> TestResult {
    let (r, args) = core(json!({
        "version": "v1.12.0",
        "manager": {"maxConcurrentReconciles": 5, "additionalArgs": {"machine-concurrency": "7"}},
        "deployment": {"containers": [{"name": "manager", "args": {"cluster-concurrency": "12"}}]}
    }))?;
    for want in [
        "--cluster-concurrency=12",
        "--machine-concurrency=7",
        "--machineset-concurrency=5",
    ] {
        assert!(
            args.iter().any(|a| a == want),
            "{want} missing from {args:?}"
        );
    }
    assert_eq!(only_report(&r)?.findings, vec![]);
    Ok(())
}

#[test]
fn metrics_address_becomes_the_plain_http_diagnostics_endpoint() -> TestResult {
    let (r, args) = core(json!({"version": "v1.12.0", "manager": {"metricsAddress": ":8181"}}))?;
    assert!(
        args.contains(&"--diagnostics-address=:8181".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--insecure-diagnostics=true".to_string()),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--metrics-bind-addr")),
        "{args:?}"
    );
    // Replaced in place: the release's own values are gone.
    assert_eq!(
        args.iter()
            .filter(|a| a.starts_with("--diagnostics-address="))
            .count(),
        1
    );
    assert_accepted(&args)?;
    assert_eq!(only_report(&r)?.findings, vec![]);
    Ok(())
}

#[test]
fn every_mappable_field_reaches_a_real_flag() -> TestResult {
    let (r, args) = core(json!({"version": "v1.12.0", "manager": {
        "syncPeriod": "5m",
        "leaderElection": {"leaderElect": true, "leaseDuration": "20s", "renewDeadline": "15s", "retryPeriod": "3s"},
        "cacheNamespace": "team-a",
        "metrics": {"diagnosticsAddress": ":9000", "insecureDiagnostics": false},
        "health": {"healthProbeBindAddress": ":9441"},
        "webhook": {"port": 9444, "certDir": "/certs"},
        "profilerAddress": "localhost:6061",
        "verbosity": 3,
        "featureGates": {"ClusterTopology": true},
    }}))?;
    for want in [
        "--sync-period=5m",
        "--leader-elect=true",
        "--leader-elect-lease-duration=20s",
        "--leader-elect-renew-deadline=15s",
        "--leader-elect-retry-period=3s",
        "--namespace=team-a",
        "--diagnostics-address=:9000",
        "--insecure-diagnostics=false",
        "--health-addr=:9441",
        "--webhook-port=9444",
        "--webhook-cert-dir=/certs",
        "--profiler-address=localhost:6061",
        "--v=3",
    ] {
        assert!(
            args.iter().any(|a| a == want),
            "{want} missing from {args:?}"
        );
    }
    assert!(
        args.iter()
            .any(|a| a.starts_with("--feature-gates=") && a.contains("ClusterTopology=true"))
    );
    assert_accepted(&args)?;
    assert_eq!(only_report(&r)?.findings, vec![]);
    Ok(())
}

#[test]
fn fields_without_a_flag_are_reported_not_rendered() -> TestResult {
    let (r, args) = core(json!({"version": "v1.12.0", "manager": {
        "gracefulShutDown": "30s",
        "webhook": {"host": "0.0.0.0"},
        "health": {"readinessEndpointName": "ready", "livenessEndpointName": "alive"},
        "leaderElection": {"resourceName": "x", "resourceNamespace": "y", "resourceLock": "leases"},
        "metrics": {"bindAddress": ":8080", "diagnosticsAddress": ":8443"},
    }}))?;
    assert_accepted(&args)?;
    let report = only_report(&r)?;
    let lines: Vec<String> = report
        .findings
        .iter()
        .map(|f| format!("{} {}", f.field, f.problem))
        .collect();
    let no_flag = |field: &str| {
        format!("spec.manager.{field} has no flag in cluster-api v1.12.0 (no effect)")
    };
    assert_eq!(
        lines,
        vec![
            no_flag("leaderElection.resourceLock"),
            no_flag("leaderElection.resourceName"),
            no_flag("leaderElection.resourceNamespace"),
            no_flag("gracefulShutDown"),
            "spec.manager.metrics.bindAddress has no effect: cluster-api v1.12.0 serves metrics on its diagnostics endpoint, which metrics.diagnosticsAddress and metrics.insecureDiagnostics configure".to_string(),
            no_flag("health.readinessEndpointName"),
            no_flag("health.livenessEndpointName"),
            no_flag("webhook.host"),
        ]
    );
    assert!(report.findings.iter().all(|f| !f.fatal));
    Ok(())
}

#[test]
fn unknown_free_form_flags_are_passed_and_reported_as_fatal() -> TestResult {
    let (r, args) = core(json!({"version": "v1.12.0", "manager": {
        "additionalArgs": {"max-concurrent-reconciles": "3", "kube-api-qps": "50"},
        "featureGates": {"NoSuchGate": true, "MachinePool": false},
    }}))?;
    assert!(args.contains(&"--max-concurrent-reconciles=3".to_string()));
    assert!(args.contains(&"--kube-api-qps=50".to_string()));
    let fatal: Vec<String> = only_report(&r)?
        .findings
        .iter()
        .filter(|f| f.fatal)
        .map(|f| format!("{} {}", f.field, f.problem))
        .collect();
    assert_eq!(
        fatal,
        vec![
            "spec.manager.additionalArgs.max-concurrent-reconciles is not a flag of cluster-api v1.12.0: the manager would exit at start (unknown flag --max-concurrent-reconciles)".to_string(),
            "spec.manager.featureGates names feature gate NoSuchGate, unknown to cluster-api v1.12.0: the manager would exit at start (unrecognized feature gate)".to_string(),
        ]
    );
    Ok(())
}

#[test]
fn kubeadm_managers_of_v1_11_get_their_own_concurrency_flags() -> TestResult {
    for (kind, name, dir, file, flags) in [
        (
            "BootstrapProvider",
            "kubeadm",
            "bootstrap-kubeadm",
            "bootstrap-components.yaml",
            &["clustercache", "kubeadmconfig"][..],
        ),
        (
            "ControlPlaneProvider",
            "kubeadm",
            "control-plane-kubeadm",
            "control-plane-components.yaml",
            &["clustercache", "kubeadmcontrolplane"][..],
        ),
    ] {
        let release = real_release(dir, "v1.11.0", file)?;
        let p = provider(
            kind,
            name,
            "capi-kubeadm-system",
            json!({"version": "v1.11.0", "manager": {"maxConcurrentReconciles": 2}}),
        )?;
        let r = render(&p, &release, |_| None)?;
        let args = manager_args(&r);
        let got: Vec<&String> = args
            .iter()
            .filter(|a| a.contains("-concurrency="))
            .collect();
        let want: Vec<String> = flags
            .iter()
            .map(|f| format!("--{f}-concurrency=2"))
            .collect();
        assert_eq!(got.len(), want.len(), "{args:?}");
        for w in &want {
            assert!(args.contains(w), "{w} missing from {args:?}");
        }
        assert_eq!(only_report(&r)?.findings, vec![]);
    }
    Ok(())
}

const UNKNOWN: &str = r"
apiVersion: v1
kind: Namespace
metadata: {name: sample-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: sample-controller-manager, namespace: sample-system}
spec:
  template:
    spec:
      containers:
      - name: manager
        image: registry.example/sample-controller:v0.1.0
        args: [--leader-elect, ARGS]
";

fn unknown(args: &str, manager: Value) -> Result<Rendered, Box<dyn std::error::Error>> {
    let release = Release {
        version: "v0.1.0".into(),
        metadata: "releaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n".into(),
        components: UNKNOWN.replace("ARGS", args),
    };
    let p = provider(
        "InfrastructureProvider",
        "sample",
        "sample-system",
        json!({"version": "v0.1.0", "manager": manager}),
    )?;
    Ok(render(&p, &release, |_| None)?)
}

#[test]
fn unknown_managers_keep_the_conventional_flags() -> TestResult {
    let r = unknown(
        "--samplecluster-concurrency=2",
        json!({"metricsAddress": ":8181", "webhook": {"host": "0.0.0.0"}, "maxConcurrentReconciles": 4}),
    )?;
    let args = manager_args(&r);
    for want in [
        "--samplecluster-concurrency=4",
        "--metrics-bind-addr=:8181",
        "--webhook-host=0.0.0.0",
    ] {
        assert!(
            args.iter().any(|a| a == want),
            "{want} missing from {args:?}"
        );
    }
    let report = only_report(&r)?;
    assert_eq!(report.binary, None);
    assert_eq!(report.findings, vec![]);
    Ok(())
}

#[test]
fn unknown_managers_follow_the_release_hints() -> TestResult {
    let r = unknown(
        "--diagnostics-address=:8443",
        json!({"metricsAddress": ":8181", "maxConcurrentReconciles": 4, "gracefulShutDown": "1m"}),
    )?;
    let args = manager_args(&r);
    assert!(
        args.contains(&"--diagnostics-address=:8181".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--insecure-diagnostics=true".to_string()),
        "{args:?}"
    );
    assert!(!args.iter().any(|a| a.contains("concurren")), "{args:?}");
    let fields: Vec<&str> = only_report(&r)?
        .findings
        .iter()
        .map(|f| f.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.manager.gracefulShutDown",
            "spec.manager.maxConcurrentReconciles"
        ]
    );
    Ok(())
}
