//! End-to-end: every example of the specification's "Example API Usage" and "Air gapped
//! environment", applied as written (`examples/specification/`), reaches the state the
//! specification describes. The releases they name (aws v0.6.0, kubeadm v0.3.10, azure and
//! vsphere v0.4.9) do not exist here, so a local GitHub-compatible server serves stand-ins
//! under the repositories they come from: the project's sample core release as
//! kubernetes-sigs/cluster-api, and small generated releases for the others (one Deployment
//! whose container is named `manager`, as the examples expect). The Secrets the examples name
//! but do not define are created first, as an admin would.

use crate::support;

use std::time::Duration;

use capi_fake_remotes::FakeServer;
use capi_test_support::{private_cluster, workspace_root};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(120);

/// A stand-in release: one Deployment named `{name}-controller-manager` with a `manager`
/// container; `${AWS_REGION}`-style variables show the provider Secret's substitution.
fn stand_in(name: &str, version: &str, env: &[(&str, &str)]) -> String {
    let env: String = env
        .iter()
        .map(|(k, v)| format!("            - name: {k}\n              value: \"{v}\"\n"))
        .collect();
    format!(
        r"apiVersion: v1
kind: Namespace
metadata:
  name: {name}-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}-controller-manager
  namespace: {name}-system
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}-controller-manager}}
  template:
    metadata:
      labels: {{app: {name}-controller-manager}}
    spec:
      containers:
        - name: manager
          image: registry.example.invalid/{name}-controller:{version}
          args:
            - --leader-elect
          env:
{env}"
    )
}

fn write_release(
    dir: &std::path::Path,
    label: &str,
    version: &str,
    file: &str,
    components: &str,
    minor: u32,
) -> std::io::Result<()> {
    let d = dir.join(label).join(version);
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join(file), components)?;
    std::fs::write(
        d.join("metadata.yaml"),
        format!(
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {{major: 0, minor: {minor}, contract: v1beta1}}\n"
        ),
    )
}

async fn manager(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Value, Box<dyn std::error::Error>> {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let v = serde_json::to_value(d)?;
    v.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["name"] == "manager"))
        .cloned()
        .ok_or_else(|| format!("{ns}/{name} has no manager container").into())
}

fn args(c: &Value) -> Vec<String> {
    c["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn specification_examples_work_as_written() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let examples = workspace_root().join("examples/specification");
    let file = |n: &str| examples.join(n).to_string_lossy().into_owned();

    // The releases, under the repositories the examples name (or imply by provider name).
    let releases = std::env::temp_dir().join(format!("capi-spec-releases-{}", std::process::id()));
    let core = std::fs::read_to_string(samples().join("sample-core/v0.1.0/core-components.yaml"))?;
    write_release(
        &releases,
        "cluster-api",
        "v0.3.10",
        "core-components.yaml",
        &core,
        3,
    )?;
    write_release(
        &releases,
        "control-plane-kubeadm",
        "v0.3.10",
        "control-plane-components.yaml",
        &stand_in("capi-kubeadm-control-plane", "v0.3.10", &[]),
        3,
    )?;
    write_release(
        &releases,
        "infrastructure-aws",
        "v0.6.0",
        "infrastructure-components.yaml",
        &stand_in("capa", "v0.6.0", &[("AWS_REGION", "${AWS_REGION}")]),
        6,
    )?;
    write_release(
        &releases,
        "infrastructure-myazure",
        "v0.4.9",
        "infrastructure-components.yaml",
        &stand_in("capz", "v0.4.9", &[]),
        4,
    )?;
    write_release(
        &releases,
        "infrastructure-vsphere",
        "v0.4.9",
        "infrastructure-components.yaml",
        &stand_in("capv", "v0.4.9", &[]),
        4,
    )?;
    let github = FakeServer::start(
        &releases,
        &[
            (
                "kubernetes-sigs/cluster-api",
                &["cluster-api", "control-plane-kubeadm"],
            ),
            (
                "kubernetes-sigs/cluster-api-provider-aws",
                &["infrastructure-aws"],
            ),
            ("myorg/awesome-azure-provider", &["infrastructure-myazure"]),
            (
                "kubernetes-sigs/cluster-api-provider-vsphere",
                &["infrastructure-vsphere"],
            ),
        ],
    )
    .await?;
    let operator = start_operator(cluster, &["--github-api-url", github.url()])?;
    // Waits for a condition; the operator's log comes with a timeout.
    let wait = |kind: &'static str,
                ns: &'static str,
                name: &'static str,
                ty: &'static str,
                status: &'static str,
                reason: Option<&'static str>| {
        let client = client.clone();
        let logs = operator.log_path().to_path_buf();
        async move {
            wait_condition(&client, (kind, ns, name), ty, status, reason, T)
                .await
                .map_err(|e| {
                    format!(
                        "{e}\n{}",
                        std::fs::read_to_string(&logs).unwrap_or_default()
                    )
                })
        }
    };
    let ready = |kind, ns, name| wait(kind, ns, name, "Ready", "True", None);
    let apply_example = |n: &str| cluster.kubectl_ok(&["apply", "--server-side", "-f", &file(n)]);

    // What the examples take for granted: the namespaces, the Secrets they name but do not
    // define, and a core provider (non-core providers wait for it).
    for ns in [
        "capi-system",
        "capa-system",
        "capi-kubeadm-control-plane-system",
        "capz-system",
        "capv-system",
    ] {
        cluster.ensure_namespace(ns)?;
    }
    apply(
        cluster,
        r"
apiVersion: v1
kind: Secret
metadata: {name: capi-variables, namespace: capi-kubeadm-control-plane-system}
---
apiVersion: v1
kind: Secret
metadata: {name: azure-variables, namespace: capz-system}
---
apiVersion: v1
kind: Secret
metadata: {name: vsphere-variables, namespace: capv-system}
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata: {name: cluster-api, namespace: capi-system}
spec: {version: v0.3.10}
",
    )?;
    ready("CoreProvider", "capi-system", "cluster-api").await?;

    // 1: controller flags from manager fields and container args; the Secret substituted;
    // fetchConfig.url names only the repository's releases.
    apply_example("01-aws-controller-flags.yaml")?;
    let aws = ready("InfrastructureProvider", "capa-system", "aws").await?;
    // The AWS manager's flags are not in the operator's table: conventional flags, and the
    // condition says so.
    let configured = condition(&aws, "ManagerConfigured").ok_or("no ManagerConfigured")?;
    assert_eq!(
        configured["reason"], "ManagerSettingsApplied",
        "{configured}"
    );
    assert!(
        configured["message"]
            .as_str()
            .is_some_and(|m| m.contains("conventional controller-runtime flags")),
        "{configured}"
    );
    let m = manager(&client, "capa-system", "capa-controller-manager").await?;
    let a = args(&m);
    for want in [
        "--metrics-bind-addr=:8181",
        "--sync-period=660s",
        "--awscluster-concurrency=12",
        "--awsmachine-concurrency=11",
    ] {
        assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
    }
    assert_eq!(m.pointer("/env/0/value"), Some(&Value::from("us-east-1")));

    // 2: the same provider with an image override instead.
    apply_example("02-aws-image-override.yaml")?;
    let image = capi_test_support::wait_for(T, || async {
        let m = manager(&client, "capa-system", "capa-controller-manager")
            .await
            .ok()?;
        let image = m["image"].as_str()?.to_string();
        (image == "gcr.io/myregistry/capa-controller:v0.6.0-foo").then_some(image)
    })
    .await;
    assert!(
        image.is_some(),
        "the image override never reached the Deployment\n{}",
        operator.logs()
    );

    // 3: the control-plane provider's manager resources.
    apply_example("03-kubeadm-resource-limits.yaml")?;
    ready(
        "ControlPlaneProvider",
        "capi-kubeadm-control-plane-system",
        "kubeadm",
    )
    .await?;
    let m = manager(
        &client,
        "capi-kubeadm-control-plane-system",
        "capi-kubeadm-control-plane-controller-manager",
    )
    .await?;
    assert_eq!(
        m["resources"],
        serde_json::json!({"limits": {"cpu": "100m", "memory": "30Mi"}, "requests": {"cpu": "100m", "memory": "20Mi"}})
    );

    // 4: a provider from a repository of its own.
    apply_example("04-azure-custom-repository.yaml")?;
    let p = ready("InfrastructureProvider", "capz-system", "myazure").await?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.4.9"))
    );
    manager(&client, "capz-system", "capz-controller-manager").await?;

    // 5: the default repository, chosen by the provider's name.
    apply_example("05-vsphere-default-fetch.yaml")?;
    ready("InfrastructureProvider", "capv-system", "vsphere").await?;
    manager(&client, "capv-system", "capv-controller-manager").await?;

    // 6: the air-gapped ConfigMaps, whose components and metadata the specification leaves as
    // placeholders: read from the selected ConfigMaps, refused with a clear reason, nothing
    // else disturbed.
    apply_example("06-air-gapped-configmaps.yaml")?;
    let p = wait(
        "InfrastructureProvider",
        "capz-system",
        "azure",
        "PreflightCheckPassed",
        "False",
        Some("InvalidMetadata"),
    )
    .await?;
    let message = condition(&p, "PreflightCheckPassed")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        message,
        "release v0.4.9: invalid metadata.yaml: it is empty (no release series)"
    );
    ready("InfrastructureProvider", "capz-system", "myazure").await?;

    let _ = std::fs::remove_dir_all(&releases);
    Ok(())
}
