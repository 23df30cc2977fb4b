//! End-to-end handover from a running kubernetes-sigs/cluster-api-operator: the real Go operator
//! (v0.28.0, built from the module proxy, installed from its release manifest with its
//! cert-manager certificate, webhooks and converting CRDs) installs the real Cluster API v1.12.0
//! core, kubeadm bootstrap and kubeadm control-plane providers air-gapped, with their managers
//! running for real on the real node. This operator, already running, leaves those objects
//! alone; `kubectl capi-providers migrate --from cluster-api-operator` shows its plan with
//! `--dry-run`, then stops the Go operator and hands every provider over: each is Ready under
//! this operator, and no provider Deployment's generation or ReplicaSets changed.

use crate::support;

use std::{path::PathBuf, time::Duration};

use capi_test_support::{TestCluster, wait_for};
use serde_json::Value;
use support::{real::*, *};

const T: Duration = Duration::from_secs(300);
const GO_VERSION: &str = "v0.28.0";

/// (kind, namespace, name, release label, components file, type word, Deployment)
const PROVIDERS: [(&str, &str, &str, &str, &str, &str, &str); 3] = [
    (
        "CoreProvider",
        "capi-system",
        "cluster-api",
        "cluster-api",
        "core-components.yaml",
        "core",
        "capi-controller-manager",
    ),
    (
        "BootstrapProvider",
        "capi-kubeadm-bootstrap-system",
        "kubeadm",
        "bootstrap-kubeadm",
        "bootstrap-components.yaml",
        "bootstrap",
        "capi-kubeadm-bootstrap-controller-manager",
    ),
    (
        "ControlPlaneProvider",
        "capi-kubeadm-control-plane-system",
        "kubeadm",
        "control-plane-kubeadm",
        "control-plane-components.yaml",
        "control-plane",
        "capi-kubeadm-control-plane-controller-manager",
    ),
];

/// The Go operator's release manifest (`e2e/scripts/build-providers.sh` renders it), or an
/// error naming `make providers` (the test fails) when it is not built.
fn go_release(test: &str) -> Result<PathBuf, String> {
    capi_test_support::provider_images()
        .and_then(|images| {
            Some(images.parent()?.join(format!(
                "cluster-api-operator-{GO_VERSION}/operator-components.yaml"
            )))
        })
        .filter(|path| path.is_file())
        .ok_or_else(|| {
            format!(
                "{test}: cluster-api-operator {GO_VERSION} is not built: run `make providers` \
                 (e2e/scripts/build-providers.sh)"
            )
        })
}

/// A v1alpha2 object as cluster-api-operator's air-gapped documentation writes it, placed on
/// the real node.
fn go_object(kind: &str, ns: &str, name: &str, word: &str) -> String {
    format!(
        r"apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: {kind}
metadata:
  name: {name}
  namespace: {ns}
spec:
  version: v1.12.0
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: {name}
        provider.cluster.x-k8s.io/type: {word}
{ON_REAL_NODE}"
    )
}

/// The plugin's output, or an error with it when it fails.
fn plugin_ok(cluster: &TestCluster, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let (ok, text) = plugin(cluster, args)?;
    if !ok {
        return Err(format!("kubectl capi-providers {args:?} failed:\n{text}").into());
    }
    Ok(text)
}

fn go_key(kind: &str) -> String {
    format!("{kind}.operator.cluster.x-k8s.io")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_cluster_api_operator_is_handed_over_without_a_restart() -> TestResult {
    let test = "a_running_cluster_api_operator_is_handed_over_without_a_restart";
    let parts = real_node_parts()?;
    let go = go_release(test)?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let start = std::time::Instant::now();
    let step = |what: &str| eprintln!("[{:>5.1}s] {what}", start.elapsed().as_secs_f64());
    let cluster = real_node(test)?;
    let client = cluster.client().await?;
    // This operator's own API; the v1alpha2 CRDs are cluster-api-operator's, from its release.
    let crds = capi_test_support::workspace_root().join("manifests/crds");
    for t in capi_operator_api::ProviderType::ALL {
        let file = crds.join(format!("{}.management.cluster.x-k8s.io.yaml", t.plural()));
        cluster.kubectl_ok(&["apply", "--server-side", "-f", &file.to_string_lossy()])?;
    }
    install_cert_manager(cluster, &client, &parts)?;
    step("cert-manager running");

    // cluster-api-operator as its release installs it, its pod on the real node.
    cluster.kubectl_ok(&["apply", "--server-side", "-f", &go.to_string_lossy()])?;
    let placement = r#"{"spec":{"template":{"spec":{"nodeSelector":{"capi-provider-operator.dev/real-node":"true"},"tolerations":[{"key":"capi-provider-operator.dev/real-node","operator":"Exists","effect":"NoSchedule"}]}}}}"#;
    let go_ns = "capi-operator-system";
    let go_deployment = "capi-operator-controller-manager";
    cluster.kubectl_ok(&[
        "patch",
        "deployment",
        "-n",
        go_ns,
        go_deployment,
        "--type=merge",
        "-p",
        placement,
    ])?;
    cluster.kubectl_ok(&[
        "rollout",
        "status",
        "--timeout=300s",
        "-n",
        go_ns,
        &format!("deployment/{go_deployment}"),
    ])?;
    // Its webhooks must answer for real: its pod runs on the real node.
    wait_for(T, || async {
        (ready_managers(&client, go_ns).await.len() == 1).then_some(())
    })
    .await
    .ok_or("cluster-api-operator's pod did not become ready on the real node")?;
    step("cluster-api-operator running");

    // Its air-gapped layout: one ConfigMap per release, labelled with version, name and type.
    for (_, ns, name, label, file, word, _) in PROVIDERS {
        cluster.ensure_namespace(ns)?;
        release_configmap_from_dir(
            &client,
            ns,
            &parts.releases,
            label,
            "v1.12.0",
            file,
            &[
                ("provider.cluster.x-k8s.io/name", name),
                ("provider.cluster.x-k8s.io/type", word),
            ],
        )
        .await?;
    }
    let objects: Vec<String> = PROVIDERS
        .iter()
        .map(|(kind, ns, name, _, _, word, _)| go_object(kind, ns, name, word))
        .collect();
    apply(cluster, &objects.join("---\n"))?;
    for (kind, ns, name, ..) in PROVIDERS {
        let p =
            wait_condition(&client, (&go_key(kind), ns, name), "Ready", "True", None, T).await?;
        assert_eq!(
            p.pointer("/status/installedVersion"),
            Some(&Value::from("v1.12.0"))
        );
    }
    step("cluster-api-operator installed the three providers");
    let mut before = Vec::new();
    for (_, ns, _, _, _, _, deployment) in PROVIDERS {
        assert_eq!(
            ready_managers(&client, ns).await.len(),
            1,
            "{ns}: no ready manager"
        );
        before.push(cluster.rollout_state(ns, deployment)?);
    }

    // This operator runs beside it and leaves the objects it holds alone.
    let mut operator = start_operator(cluster, &[])?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for (kind, ns, name, ..) in PROVIDERS {
        let p = provider(&client, &go_key(kind), ns, name)
            .await
            .ok_or("provider gone")?;
        assert_eq!(
            p.pointer("/metadata/finalizers"),
            Some(&serde_json::json!(["provider.cluster.x-k8s.io"])),
            "{kind} touched while cluster-api-operator holds it"
        );
        assert!(
            condition(&p, "SpecTranslated").is_none(),
            "{kind}: status written"
        );
    }

    // The plan changes nothing.
    let plan = plugin_ok(
        cluster,
        &["migrate", "--from", "cluster-api-operator", "--dry-run"],
    )?;
    eprintln!("--- migrate --dry-run ---\n{plan}");
    assert_eq!(plan.matches("would be taken over").count(), 3, "{plan}");
    assert!(!plan.contains("would restart"), "{plan}");
    assert!(
        plan.contains(&format!("{go_ns}/{go_deployment} (1 replicas)")),
        "{plan}"
    );
    let go_replicas = |c: &TestCluster| -> Result<i64, Box<dyn std::error::Error>> {
        Ok(
            c.get_json(&["deployment", "-n", go_ns, go_deployment])?["spec"]["replicas"]
                .as_i64()
                .unwrap_or(-1),
        )
    };
    assert_eq!(
        go_replicas(cluster)?,
        1,
        "the dry run stopped the Go operator"
    );

    // The handover.
    let out = plugin_ok(
        cluster,
        &[
            "migrate",
            "--from",
            "cluster-api-operator",
            "--timeout",
            "5m",
        ],
    )
    .map_err(|e| format!("{e}\n--- operator log ---\n{}", operator.logs()))?;
    step("handed over");
    eprintln!("--- migrate ---\n{out}");
    assert!(out.contains("no Deployment was changed"), "{out}");
    assert_eq!(go_replicas(cluster)?, 0);
    let go_pods = wait_for(Duration::from_secs(30), || async {
        cluster
            .get_json(&["pods", "-n", go_ns])
            .ok()?
            .get("items")?
            .as_array()?
            .is_empty()
            .then_some(())
    })
    .await;
    assert!(go_pods.is_some(), "cluster-api-operator's pods still run");
    let crd = cluster.get_json(&["crd", "coreproviders.operator.cluster.x-k8s.io"])?;
    assert_eq!(
        crd["spec"]["conversion"],
        serde_json::json!({"strategy": "None"})
    );
    assert_eq!(
        crd.pointer("/metadata/annotations/helm.sh~1resource-policy"),
        Some(&Value::from("keep"))
    );
    for kind in [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ] {
        let list = cluster.get_json(&[kind])?;
        let left: Vec<&str> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
            .filter(|n| n.starts_with("capi-operator"))
            .collect();
        assert!(
            left.is_empty(),
            "{kind} of cluster-api-operator left: {left:?}"
        );
    }
    for (i, (kind, ns, name, _, _, _, deployment)) in PROVIDERS.into_iter().enumerate() {
        let p = provider(&client, &go_key(kind), ns, name)
            .await
            .ok_or("provider gone")?;
        assert_eq!(
            p.pointer("/metadata/finalizers"),
            Some(&serde_json::json!(["management.cluster.x-k8s.io/provider"])),
            "{kind}"
        );
        assert_eq!(
            condition(&p, "SpecTranslated").and_then(|c| c.get("status")),
            Some(&Value::from("True")),
            "{kind}"
        );
        assert_eq!(
            condition(&p, "Ready").and_then(|c| c.get("reason")),
            Some(&Value::from("MinimumReplicasAvailable")),
            "{kind}"
        );
        assert_eq!(
            cluster.rollout_state(ns, deployment)?,
            before[i],
            "{ns}/{deployment} rolled out"
        );
        let managers = ready_managers(&client, ns).await;
        assert_eq!(managers.len(), 1, "{ns}: {managers:?}");
    }
    // Later changes go through this operator: a new setting rolls the manager out.
    cluster.kubectl_ok(&[
        "patch",
        &go_key("BootstrapProvider"),
        "kubeadm",
        "-n",
        "capi-kubeadm-bootstrap-system",
        "--type=merge",
        "-p",
        r#"{"spec":{"manager":{"verbosity":3}}}"#,
    ])?;
    let rolled = wait_for(T, || async {
        let d = cluster
            .get_json(&[
                "deployment",
                "-n",
                "capi-kubeadm-bootstrap-system",
                "capi-kubeadm-bootstrap-controller-manager",
            ])
            .ok()?;
        let args = d
            .pointer("/spec/template/spec/containers/0/args")?
            .as_array()?
            .clone();
        args.iter().any(|a| a == "--v=3").then_some(())
    })
    .await;
    let logs = operator.logs();
    operator.kill();
    assert!(
        rolled.is_some(),
        "the new verbosity was not applied\n{logs}"
    );
    step("done");
    Ok(())
}
