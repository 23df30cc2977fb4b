//! Running in production: leader election between two replicas (a killed leader is replaced
//! within the lease duration, a terminated one hands over at once, and only the leader ever
//! acts), `/livez`, `/readyz` and `/metrics`, and the shipped manifests and examples applying
//! to the local control plane.

use crate::support;

use std::time::{Duration, Instant};

use capi_test_support::{private_cluster, wait_for, workspace_root};
use k8s_openapi::api::{coordination::v1::Lease, events::v1::Event};
use kube::{Api, Client, api::ListParams};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);
const LEASE: &str = "capi-provider-operator-test";
const LEASE_SECONDS: u64 = 4;
/// Namespace of the leader election test's provider (its events must come from leaders only).
const LNS: &str = "prod-leader";

async fn holder(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "default")
        .get_opt(LEASE)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// The replica identities (reportingInstance) of the events published on provider objects.
async fn reporters(client: &Client, ns: &str) -> Vec<(String, String)> {
    let Ok(list) = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    else {
        return Vec::new();
    };
    list.into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("capi-provider-operator"))
        .map(|e| {
            (
                e.reporting_instance.unwrap_or_default(),
                e.reason.unwrap_or_default(),
            )
        })
        .collect()
}

fn elect_args() -> Vec<String> {
    let s = LEASE_SECONDS.to_string();
    [
        "--watch-namespace",
        LNS,
        "--leader-elect",
        "--leader-election-namespace",
        "default",
        "--leader-election-id",
        LEASE,
        "--leader-election-lease-seconds",
        &s,
        "--leader-election-renew-deadline-seconds",
        "3",
        "--leader-election-retry-seconds",
        "1",
    ]
    .iter()
    .map(std::string::ToString::to_string)
    .collect()
}

#[tokio::test]
async fn leader_election_hands_over_and_only_the_leader_acts() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    load_core(cluster, &client, LNS).await?;

    let args = elect_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = start_operator(cluster, &args)?;
    let first = wait_for(T, || async { holder(&client).await })
        .await
        .ok_or_else(|| format!("no leader\n{}", a.logs()))?;
    let mut b = start_operator(cluster, &args)?;
    let (a_id, b_id) = (
        format!("_{}", a.pid().unwrap_or(0)),
        format!("_{}", b.pid().unwrap_or(0)),
    );
    assert!(first.ends_with(&a_id), "the first replica leads: {first}");

    apply(cluster, &core_provider(LNS, "v0.2.0", 1))?;
    wait_condition(
        &client,
        ("CoreProvider", LNS, "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| format!("{e}\n--- a ---\n{}\n--- b ---\n{}", a.logs(), b.logs()))?;
    // Only the leader acted: every event comes from it.
    let seen = reporters(&client, LNS).await;
    assert!(!seen.is_empty(), "the leader published events");
    assert!(
        seen.iter().all(|(who, _)| who.ends_with(&a_id)),
        "events from a replica that does not lead: {seen:?}"
    );

    // Kill the leader: the standby takes over within the lease duration (plus a retry period
    // for it to notice) and reconciles the next change.
    a.kill();
    let killed = Instant::now();
    let new = wait_for(Duration::from_secs(LEASE_SECONDS * 4), || async {
        holder(&client).await.filter(|h| h.ends_with(&b_id))
    })
    .await
    .ok_or_else(|| format!("the standby did not take over\n{}", b.logs()))?;
    let took = killed.elapsed();
    eprintln!(
        "takeover after the leader was killed: {took:?} (lease {LEASE_SECONDS} s), new leader {new}"
    );
    assert!(
        took <= Duration::from_secs(LEASE_SECONDS + 2),
        "takeover took {took:?}, more than the lease duration plus a retry"
    );
    apply(cluster, &core_provider(LNS, "v0.2.0", 3))?;
    let deployments =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), LNS);
    wait_for(T, || async {
        let d = deployments
            .get_opt("sample-core-controller-manager")
            .await
            .ok()??;
        let args = d.spec?.template.spec?.containers.first()?.args.clone()?;
        args.iter().any(|a| a == "--v=3").then_some(())
    })
    .await
    .ok_or_else(|| format!("the new leader did not reconcile\n{}", b.logs()))?;

    // A clean shutdown releases the lease: a fresh replica leads at once.
    let status = b.terminate()?;
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM ends the leader cleanly: {status:?}"
    );
    assert_eq!(holder(&client).await, None, "the lease was released");
    let mut c = start_operator(cluster, &args)?;
    let c_id = format!("_{}", c.pid().unwrap_or(0));
    let started = Instant::now();
    wait_for(Duration::from_secs(LEASE_SECONDS), || async {
        holder(&client).await.filter(|h| h.ends_with(&c_id))
    })
    .await
    .ok_or_else(|| format!("no new leader after a released lease\n{}", c.logs()))?;
    eprintln!("new leader after a clean handover: {:?}", started.elapsed());
    c.kill();
    Ok(())
}

fn parse_metrics(text: &str) -> Result<Vec<(String, f64)>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("no value: {line:?}"))?;
        let v: f64 = value
            .parse()
            .map_err(|e| format!("bad value in {line:?}: {e}"))?;
        let name_ok = series.split('{').next().is_some_and(|n| {
            !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if !name_ok || (series.contains('{') && !series.ends_with('}')) {
            return Err(format!("bad series: {line:?}"));
        }
        out.push((series.to_string(), v));
    }
    Ok(out)
}

#[tokio::test]
async fn health_readiness_and_metrics() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    load_core(cluster, &client, "prod-core").await?;

    // An apiserver that cannot be reached: alive, never ready.
    let port = free_port()?;
    let dead = std::env::temp_dir().join(format!("capi-dead-kubeconfig-{}", std::process::id()));
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\ncontexts:\n- name: x\n  context: {cluster: x, user: x}\ncurrent-context: x\nusers:\n- name: x\n  user: {token: t}\n",
    )?;
    let mut unready = std::process::Command::new(operator_bin())
        .args([
            "run",
            "--health-probe-bind-address",
            &format!("127.0.0.1:{port}"),
        ])
        .env("KUBECONFIG", &dead)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let live = wait_for(Duration::from_secs(10), || async {
        get(port, "/livez").ok()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ready = get(port, "/readyz");
    let _ = unready.kill();
    let _ = unready.wait();
    assert_eq!(live.map(|l| l.0), Some(200), "/livez answers");
    let ready = ready?;
    assert_eq!(ready.0, 503, "/readyz is false before the caches sync");
    assert!(ready.1.contains("caches not synced"), "{}", ready.1);

    // The real cluster: ready once synced; metrics after a reconcile.
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let operator = start_operator(
        cluster,
        &[
            "--metrics-bind-address",
            &addr,
            "--health-probe-bind-address",
            &addr,
        ],
    )?;
    wait_for(T, || async {
        (get(port, "/readyz").ok()?.0 == 200).then_some(())
    })
    .await
    .ok_or_else(|| format!("/readyz never true\n{}", operator.logs()))?;
    apply(cluster, &core_provider("prod-core", "v0.2.0", 2))?;
    wait_condition(
        &client,
        ("CoreProvider", "prod-core", "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", operator.logs()))?;
    let metrics = wait_for(T, || async {
        let (status, body) = get(port, "/metrics").ok()?;
        let parsed = parse_metrics(&body).ok()?;
        let ready = parsed.iter().any(|(s, v)| {
            s.starts_with("capi_operator_provider_ready{")
                && s.contains("name=\"cluster-api\"")
                && s.contains("version=\"v0.2.0\"")
                && *v == 1.0
        });
        (status == 200 && ready).then_some(parsed)
    })
    .await
    .ok_or_else(|| {
        format!(
            "/metrics never showed the provider Ready\n{}",
            operator.logs()
        )
    })?;
    let count = |prefix: &str| -> f64 {
        metrics
            .iter()
            .filter(|(s, _)| s.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    };
    assert!(
        count("capi_operator_reconcile_total{kind=\"CoreProvider\",result=\"success\"}") >= 1.0
    );
    assert!(count("capi_operator_reconcile_duration_seconds_count{kind=\"CoreProvider\"}") >= 1.0);
    let body = get(port, "/metrics")?.1;
    parse_metrics(&body)?;
    assert!(body.contains("# TYPE capi_operator_reconcile_duration_seconds histogram"));
    Ok(())
}

#[tokio::test]
async fn manifests_and_examples_apply() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    let root = workspace_root();
    // The namespace exists for real, so namespaced objects can be dry-run into it.
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "-f",
        &root
            .join("manifests/operator/namespace.yaml")
            .to_string_lossy(),
    ])?;
    cluster.install_crds()?;
    let out = cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-k",
        &root.join("manifests").to_string_lossy(),
    ])?;
    for want in [
        "clusterrole.rbac.authorization.k8s.io/capi-provider-operator serverside-applied (server dry run)",
        "deployment.apps/capi-provider-operator serverside-applied (server dry run)",
        "validatingadmissionpolicy.admissionregistration.k8s.io/capi-provider-managed-by-one-way serverside-applied (server dry run)",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // Every example directory applies, its namespaces created first.
    let mut dirs = vec![
        root.join("examples/specification"),
        root.join("examples/demo"),
    ];
    let stories: Vec<_> = std::fs::read_dir(root.join("examples/user-stories"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(
        stories.len(),
        6,
        "one directory per user story: {stories:?}"
    );
    dirs.extend(stories);
    for dir in dirs {
        let mut files: Vec<_> = std::fs::read_dir(&dir)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file)?;
            for doc in text.split("\n---") {
                let v: Option<Value> = capi_yaml::from_str(doc).ok();
                if let Some(ns) = v
                    .as_ref()
                    .and_then(|v| v.pointer("/metadata/namespace"))
                    .and_then(Value::as_str)
                {
                    cluster.ensure_namespace(ns)?;
                }
            }
            cluster
                .kubectl_ok(&[
                    "apply",
                    "--server-side",
                    "--dry-run=server",
                    "-f",
                    &file.to_string_lossy(),
                ])
                .map_err(|e| format!("{}: {e}", file.display()))?;
        }
    }
    // The GitOps layout builds with kustomize and applies.
    for ns in [
        "capi-system",
        "capi-kubeadm-bootstrap-system",
        "capi-kubeadm-control-plane-system",
    ] {
        cluster.ensure_namespace(ns)?;
    }
    let out = cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-k",
        &root.join("examples/gitops").to_string_lossy(),
    ])?;
    for want in [
        "coreprovider.management.cluster.x-k8s.io/cluster-api serverside-applied (server dry run)",
        "deployment.apps/capi-provider-operator serverside-applied (server dry run)",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    Ok(())
}

/// The Helm chart lints, renders (with provider objects from values) and the result applies.
#[tokio::test]
async fn helm_chart_lints_renders_and_applies() -> TestResult {
    let helm = helm_bin("helm_chart_lints_renders_and_applies")?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    let run = |args: &[&str]| helm_run(&helm, args);
    let chart_s = chart.to_string_lossy();
    run(&["lint", "--strict", &chart_s])?;
    let values = tempfile(
        "extraRules:\n- apiGroups: [policy]\n  resources: [poddisruptionbudgets]\n  verbs: [get, list, watch, create, update, patch, delete]\nproviders:\n- kind: CoreProvider\n  name: cluster-api\n  namespace: helm-capi\n  spec:\n    version: v1.12.0\n",
    )?;
    let rendered = run(&[
        "template",
        "capi-operator",
        &chart_s,
        "--namespace",
        "helm-operator",
        "--include-crds",
        "-f",
        &values,
    ])?;
    for want in [
        "kind: CoreProvider",
        "--leader-elect",
        "poddisruptionbudgets",
        "customresourcedefinitions/status",
        "kind: ValidatingAdmissionPolicy",
    ] {
        assert!(rendered.contains(want), "{want:?} not rendered");
    }
    cluster.ensure_namespace("helm-operator")?;
    cluster.ensure_namespace("helm-capi")?;
    let file = tempfile(&rendered)?;
    let out = cluster.kubectl_ok(&["apply", "--server-side", "--dry-run=server", "-f", &file])?;
    assert!(
        out.contains("deployment.apps/capi-operator serverside-applied (server dry run)"),
        "{out}"
    );
    Ok(())
}

/// Every default values.schema.json states is the one values.yaml holds, and the reverse.
fn check_schema_defaults(schema: &Value, values: &Value, path: &str) -> Result<(), String> {
    let props = schema.get("properties").and_then(Value::as_object);
    let Some(props) = props else { return Ok(()) };
    let keys = values
        .as_object()
        .map(|o| o.keys().cloned().collect::<Vec<_>>());
    for key in keys.unwrap_or_default() {
        if !props.contains_key(&key) {
            return Err(format!(
                "values.yaml has {path}{key}, which the schema does not describe"
            ));
        }
    }
    for (key, p) in props {
        let here = values
            .get(key)
            .ok_or(format!("values.yaml lacks {path}{key}"))?;
        if let Some(default) = p.get("default")
            && default != here
        {
            return Err(format!(
                "{path}{key}: schema default {default}, values.yaml {here}"
            ));
        }
        check_schema_defaults(p, here, &format!("{path}{key}."))?;
    }
    Ok(())
}

/// The chart's PrometheusRule and dashboard ConfigMap: off by default; when on, they hold
/// manifests/monitoring's files unchanged (but for the runbook links' base), with the labels the
/// values give.
fn check_monitoring_templates(
    helm: &dyn Fn(&[&str]) -> Result<String, String>,
    chart: &str,
) -> TestResult {
    let limits = capi_yaml::Limits::default();
    let defaults = helm(&["template", "x", chart])?;
    assert!(!defaults.contains("kind: PrometheusRule"), "off by default");
    assert!(!defaults.contains("grafana_dashboard"), "off by default");
    let monitoring = workspace_root().join("manifests/monitoring");
    let base = "https://github.com/capi-provider-operator/capi-provider-operator/blob/main/docs/runbooks.md";
    let mirror = "https://docs.example/capi/runbooks.html";
    let rules = std::fs::read_to_string(monitoring.join("prometheus-rules.yaml"))?;
    assert!(rules.contains(base), "the rules link to {base}");
    let want: Value = capi_yaml::from_str(&rules.replace(base, mirror))?;
    let rendered = helm(&[
        "template",
        "x",
        chart,
        "-n",
        "ops",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.labels.release=prometheus",
        "--set",
        &format!("prometheusRule.runbookBaseURL={mirror}"),
        "--show-only",
        "templates/prometheusrule.yaml",
    ])?;
    let rule = capi_yaml::parse_documents(&rendered, &limits)?;
    let rule = rule.first().ok_or("no PrometheusRule")?;
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "ops");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        rule["spec"]["groups"], want["groups"],
        "the rules file, as is"
    );

    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(
        monitoring.join("capi-provider-operator-dashboard.json"),
    )?)?;
    for (extra, label) in [
        (None, ("grafana_dashboard", "1")),
        (
            Some("dashboard.labels.dashboards=capi"),
            ("dashboards", "capi"),
        ),
    ] {
        let mut args = vec![
            "template",
            "x",
            chart,
            "--set",
            "dashboard.enabled=true",
            "--set",
            "dashboard.namespace=grafana",
            "--show-only",
            "templates/dashboard.yaml",
        ];
        args.extend(extra.iter().flat_map(|e| ["--set", *e]));
        let cm = capi_yaml::parse_documents(&helm(&args)?, &limits)?;
        let cm = cm.first().ok_or("no ConfigMap")?;
        assert_eq!(cm["kind"], "ConfigMap");
        assert_eq!(cm["metadata"]["namespace"], "grafana");
        assert_eq!(cm["metadata"]["labels"][label.0], label.1, "{cm:#}");
        let json = cm["data"]["capi-provider-operator.json"]
            .as_str()
            .ok_or("no JSON")?;
        assert_eq!(
            serde_json::from_str::<Value>(json)?,
            dashboard,
            "the dashboard, as is"
        );
    }
    Ok(())
}

/// The chart as users meet it: values checked by its schema (refused before anything is
/// applied), a real `helm install` and `helm upgrade` on the local control plane with the
/// standard labels, the image tag from appVersion and the pod settings, and an uninstall that
/// leaves the CRDs.
#[tokio::test]
async fn helm_install_upgrade_and_values_schema() -> TestResult {
    let helm = helm_bin("helm_install_upgrade_and_values_schema")?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    let chart_s = chart.to_string_lossy().into_owned();
    let kubeconfig = cluster.kubeconfig().to_string_lossy().into_owned();
    let helm = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", &kubeconfig];
        all.extend_from_slice(args);
        helm_run(&helm, &all)
    };

    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart.join("values.schema.json"))?)?;
    let values = capi_yaml::parse_documents(
        &helm(&["show", "values", &chart_s])?,
        &capi_yaml::Limits::default(),
    )?;
    check_schema_defaults(&schema, values.first().ok_or("no values")?, "")?;
    for bad in [
        "replicas=-1",
        "replica=2",
        "image.pullPolicy=Sometimes",
        "logFormat=xml",
        "serviceMonitor.interval=often",
        "podDisruptionBudget.minAvailable=most",
        "infrastructure=Docker",
        "infrastructure.docker.version=1.12",
        "networkPolicy.apiServer.cidrs[0]=apiserver",
        "argocd.operatorWave=-1",
        "env[0].value=no-name",
        "prometheusRule.enabled=maybe",
        "prometheusRule.runbookBaseURL=runbooks.md",
        "dashboard.enabled=maybe",
    ] {
        let e = helm(&["template", "x", &chart_s, "--set", bad])
            .err()
            .ok_or(format!("--set {bad} was accepted"))?;
        assert!(
            e.contains("don't meet the specifications of the schema"),
            "{bad}: {e}"
        );
    }
    let monitor = helm(&[
        "template",
        "x",
        &chart_s,
        "--set",
        "serviceMonitor.enabled=true",
        "--show-only",
        "templates/servicemonitor.yaml",
    ])?;
    assert!(
        monitor.contains("kind: ServiceMonitor")
            && monitor.contains("port: metrics")
            && monitor.contains("honorLabels: true"),
        "{monitor}"
    );
    check_monitoring_templates(&helm, &chart_s)?;

    // The policy may already exist cluster-wide (another test's apply); this release owns none.
    let ns = "helm-release";
    helm(&[
        "install",
        "capi-operator",
        &chart_s,
        "-n",
        ns,
        "--create-namespace",
        "--wait",
        "--timeout",
        "120s",
        "--set",
        "admissionPolicy=false",
        "--set",
        "replicas=1",
        "--set",
        "nodeSelector.kubernetes\\.io/os=linux",
        "--set",
        "priorityClassName=system-cluster-critical",
    ])?;
    let get = |jsonpath: &str| {
        cluster.kubectl_ok(&[
            "get",
            "deployment",
            "capi-operator",
            "-n",
            ns,
            "-o",
            &format!("jsonpath={jsonpath}"),
        ])
    };
    assert_eq!(
        get("{.metadata.labels.helm\\.sh/chart}")?,
        "capi-provider-operator-0.1.0"
    );
    assert_eq!(
        get("{.metadata.labels.app\\.kubernetes\\.io/managed-by}")?,
        "Helm"
    );
    assert_eq!(
        get("{.spec.template.spec.containers[0].image}")?,
        "ghcr.io/capi-provider-operator/capi-provider-operator:v0.1.0",
        "the tag defaults to the chart's appVersion"
    );
    assert!(get("{.spec.template.spec.containers[0].args}")?.contains("--manage-crds"));
    assert_eq!(
        get("{.spec.template.spec.nodeSelector.kubernetes\\.io/os}")?,
        "linux"
    );
    assert_eq!(
        get("{.spec.template.spec.priorityClassName}")?,
        "system-cluster-critical"
    );
    // One replica: no PodDisruptionBudget, which would block node drains.
    let (found, _) = release_pdb(cluster, ns, "{.spec}")?;
    assert!(!found, "a PodDisruptionBudget over one replica");
    let notes = helm(&["get", "notes", "capi-operator", "-n", ns])?;
    assert!(
        notes.contains("rollout status deployment/capi-operator"),
        "{notes}"
    );

    helm(&[
        "upgrade",
        "capi-operator",
        &chart_s,
        "-n",
        ns,
        "--reuse-values",
        "--wait",
        "--timeout",
        "120s",
        "--set",
        "replicas=2",
        "--set",
        "podAnnotations.example\\.com/team=platform",
        "--set",
        "imagePullSecrets[0].name=registry-credentials",
    ])?;
    assert_eq!(get("{.spec.replicas}")?, "2");
    let (found, min_available) = release_pdb(cluster, ns, "{.spec.minAvailable}")?;
    assert!(
        found && min_available == "1",
        "two replicas: a PodDisruptionBudget keeping one available ({min_available:?})"
    );
    assert_eq!(
        get("{.spec.template.metadata.annotations.example\\.com/team}")?,
        "platform"
    );
    assert_eq!(
        get("{.spec.template.spec.imagePullSecrets[0].name}")?,
        "registry-credentials"
    );
    assert_eq!(
        get("{.spec.template.spec.nodeSelector.kubernetes\\.io/os}")?,
        "linux",
        "--reuse-values lost a value"
    );
    // A wrong value is refused before anything changes.
    let e = helm(&[
        "upgrade",
        "capi-operator",
        &chart_s,
        "-n",
        ns,
        "--reuse-values",
        "--set",
        "replicas=-3",
    ])
    .err()
    .ok_or("replicas=-3 was accepted")?;
    assert!(e.contains("minimum"), "{e}");
    assert_eq!(get("{.spec.replicas}")?, "2");
    let status = helm(&["status", "capi-operator", "-n", ns, "-o", "json"])?;
    let status: Value = serde_json::from_str(&status)?;
    assert_eq!(
        status.pointer("/version").and_then(Value::as_i64),
        Some(2),
        "{status}"
    );

    helm(&["uninstall", "capi-operator", "-n", ns, "--wait"])?;
    let crds = cluster.kubectl_ok(&["get", "crd", "-o", "name"])?;
    assert_eq!(
        crds.matches(".management.cluster.x-k8s.io").count(),
        7,
        "uninstall removed CRDs: {crds}"
    );
    Ok(())
}

/// `run --manage-crds` brings an older CRD to the operator's schema, writes nothing when it is
/// current, and leaves a CRD written by a newer operator alone.
#[tokio::test]
async fn operator_upgrades_its_crds_and_never_downgrades() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let name = "coreproviders.management.cluster.x-k8s.io";
    let (_, hash) = capi_provider_operator::crds::desired(
        capi_operator_api::ProviderApi::Management,
        capi_operator_api::ProviderType::Core,
    )?;
    let age = |version: &str| -> TestResult {
        cluster.kubectl_ok(&[
            "annotate",
            "crd",
            name,
            "--overwrite",
            &format!("management.cluster.x-k8s.io/operator-version={version}"),
            "management.cluster.x-k8s.io/crd-spec-hash=older-schema",
        ])?;
        cluster.kubectl_ok(&[
            "patch",
            "crd",
            name,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/versions/0/additionalPrinterColumns"}]"#,
        ])?;
        Ok(())
    };
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let columns = |c: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| {
        c.spec.versions.first().and_then(|v| v.additional_printer_columns.as_ref()).map_or(0, Vec::len)
    };

    age("0.0.1")?;
    let mut operator = start_operator(cluster, &["--manage-crds"])?;
    let upgraded = wait_for(T, || async {
        let c = crds.get(name).await.ok()?;
        let a = c.metadata.annotations.clone().unwrap_or_default();
        (a.get("management.cluster.x-k8s.io/crd-spec-hash") == Some(&hash) && columns(&c) > 0)
            .then_some(c)
    })
    .await
    .ok_or_else(|| format!("the older CRD was not upgraded\n{}", operator.logs()))?;
    let version = upgraded.metadata.resource_version.clone();
    operator.kill();

    // Current: a restart writes nothing.
    let mut operator = start_operator(cluster, &["--manage-crds"])?;
    wait_for(T, || async {
        operator
            .logs()
            .contains("provider CRDs checked")
            .then_some(())
    })
    .await
    .ok_or_else(|| format!("the operator did not check its CRDs\n{}", operator.logs()))?;
    assert!(operator.logs().contains("applied=0"), "{}", operator.logs());
    assert_eq!(
        crds.get(name).await?.metadata.resource_version,
        version,
        "an up-to-date CRD was written"
    );
    operator.kill();

    // Written by a newer operator: left alone (no downgrade on rollback).
    age("99.0.0")?;
    let mut operator = start_operator(cluster, &["--manage-crds"])?;
    wait_for(T, || async {
        operator
            .logs()
            .contains("written by a newer operator")
            .then_some(())
    })
    .await
    .ok_or_else(|| format!("no warning about the newer CRD\n{}", operator.logs()))?;
    assert_eq!(
        columns(&crds.get(name).await?),
        0,
        "a newer CRD was downgraded"
    );
    operator.kill();
    cluster.install_crds()?;
    Ok(())
}
