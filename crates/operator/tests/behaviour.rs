//! End-to-end behaviour of the install flow on a private local control plane, with the
//! project's sample providers served from ConfigMaps: latest-version resolution written back,
//! re-rendering on Secret and spec changes, drift repair, pruning, every preflight failure and
//! bad input with its own reason (leaving what is installed untouched), the managed-by
//! annotation, and an operator killed in the middle of an install.

mod support;

use std::time::Duration;

use capi_test_support::{TestCluster, private_cluster, serial, wait_for};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use support::*;

const T: Duration = Duration::from_secs(90);

async fn sample_cm(
    client: &Client,
    ns: &str,
    label: &str,
    version: &str,
    file: &str,
    name: &str,
) -> TestResult {
    release_configmap_from_dir(
        client,
        ns,
        &samples(),
        label,
        version,
        file,
        &[("provider.cluster.x-k8s.io/name", name)],
    )
    .await
}

fn infra(ns: &str, name: &str, version: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: InfrastructureProvider
metadata:
  name: {name}
  namespace: {ns}
spec:
  version: "{version}"
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: {name}
{extra}"#
    )
}

async fn deployment(client: &Client, ns: &str, name: &str) -> Option<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()?
}

fn env_value(d: &Deployment, key: &str) -> Option<String> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == key)?
        .value
        .clone()
}

fn args(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

async fn reason_of(
    client: &Client,
    kind: &str,
    ns: &str,
    name: &str,
    cond: &str,
    reason: &str,
) -> Result<Value, Box<dyn std::error::Error>> {
    wait_condition(client, (kind, ns, name), cond, "False", Some(reason), T).await
}

async fn install_core(cluster: &TestCluster, client: &Client) -> TestResult {
    cluster.ensure_namespace("sample-core-system")?;
    for v in ["v0.1.0", "v0.2.0"] {
        sample_cm(
            client,
            "sample-core-system",
            "sample-core",
            v,
            "core-components.yaml",
            "sample-core",
        )
        .await?;
    }
    // No version: the operator resolves the latest release and writes it into spec.version.
    apply(
        cluster,
        r#"apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: sample-core-system
spec:
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: sample-core
"#,
    )?;
    let p = wait_condition(
        client,
        ("CoreProvider", "sample-core-system", "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await?;
    assert_eq!(p.pointer("/spec/version"), Some(&Value::from("v0.2.0")));
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.2.0"))
    );
    assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));
    Ok(())
}

#[tokio::test]
async fn install_flow_behaviours() -> TestResult {
    let _serial = serial().lock().await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let mut operator = start_operator(cluster, &["--config-retry-seconds", "3"])?;
    let with_logs = |e: Box<dyn std::error::Error>,
                     op: &capi_test_support::OperatorProcess|
     -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", op.logs()).into()
    };

    install_core(cluster, &client)
        .await
        .map_err(|e| with_logs(e, &operator))?;

    // An infrastructure provider with a Secret variable.
    let ns = "infra-a";
    cluster.ensure_namespace(ns)?;
    for v in ["v0.1.0", "v0.2.0"] {
        sample_cm(
            &client,
            ns,
            "sample-infrastructure",
            v,
            "infrastructure-components.yaml",
            "sample",
        )
        .await?;
    }
    apply(
        cluster,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vars\n  namespace: infra-a\nstringData:\n  SAMPLE_GREETING: hi\n",
    )?;
    apply(
        cluster,
        &infra(ns, "sample", "v0.1.0", "  secretName: vars\n"),
    )?;
    wait_condition(
        &client,
        ("InfrastructureProvider", ns, "sample"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| with_logs(e, &operator))?;
    let d = deployment(&client, ns, "sample-infra-controller-manager")
        .await
        .ok_or("no deployment")?;
    assert_eq!(env_value(&d, "SAMPLE_GREETING").as_deref(), Some("hi"));

    // A change of the referenced Secret re-renders.
    apply(
        cluster,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vars\n  namespace: infra-a\nstringData:\n  SAMPLE_GREETING: bye\n",
    )?;
    wait_for(T, || async {
        let d = deployment(&client, ns, "sample-infra-controller-manager").await?;
        (env_value(&d, "SAMPLE_GREETING").as_deref() == Some("bye")).then_some(())
    })
    .await
    .ok_or_else(|| with_logs("Secret change not rendered".into(), &operator))?;

    // A change of the manager fields re-renders into flags.
    apply(
        cluster,
        &infra(
            ns,
            "sample",
            "v0.1.0",
            "  secretName: vars\n  manager:\n    verbosity: 6\n",
        ),
    )?;
    wait_for(T, || async {
        let d = deployment(&client, ns, "sample-infra-controller-manager").await?;
        args(&d).contains(&"--v=6".to_string()).then_some(())
    })
    .await
    .ok_or_else(|| with_logs("manager.verbosity not rendered".into(), &operator))?;

    // Drift repair: a deleted object comes back, a hand edit is undone.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.delete("sample-infra-manager", &DeleteParams::default())
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments
        .patch(
            "sample-infra-controller-manager",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    wait_for(T, || async {
        let sa = sas.get_opt("sample-infra-manager").await.ok()??;
        let d = deployments
            .get("sample-infra-controller-manager")
            .await
            .ok()?;
        (d.spec?.replicas == Some(1)).then_some(sa)
    })
    .await
    .ok_or_else(|| with_logs("drift not repaired".into(), &operator))?;
    // ...and said, naming what was restored (the hand edit with who made it).
    let said = wait_for(Duration::from_secs(30), || async {
        let e = cluster
            .kubectl_ok(&[
                "get",
                "events",
                "-n",
                ns,
                "--field-selector",
                "reason=DriftRepaired",
                "-o",
                "jsonpath={.items[*].message}",
            ])
            .ok()?;
        (e.contains("ServiceAccount infra-a/sample-infra-manager (deleted)")
            && e.contains("Deployment infra-a/sample-infra-controller-manager (changed"))
        .then_some(e)
    })
    .await;
    said.ok_or_else(|| {
        with_logs(
            "no DriftRepaired event naming both objects".into(),
            &operator,
        )
    })?;

    // Objects the new version no longer has are pruned.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    assert!(cms.get_opt("sample-infra-legacy-settings").await?.is_some());
    apply(
        cluster,
        &infra(
            ns,
            "sample",
            "v0.2.0",
            "  secretName: vars\n  manager:\n    verbosity: 6\n",
        ),
    )?;
    let p = wait_for(T, || async {
        let p = provider(&client, "InfrastructureProvider", ns, "sample").await?;
        (p.pointer("/status/installedVersion") == Some(&Value::from("v0.2.0"))
            && cms
                .get_opt("sample-infra-legacy-settings")
                .await
                .ok()?
                .is_none())
        .then_some(p)
    })
    .await
    .ok_or_else(|| with_logs("upgrade did not prune".into(), &operator))?;
    assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));
    let installed_rv = deployments
        .get("sample-infra-controller-manager")
        .await?
        .metadata
        .resource_version;

    // Bad input: each with its own reason; what is installed stays as it is.
    apply(
        cluster,
        &infra(
            ns,
            "sample",
            "v0.9.0",
            "  secretName: vars\n  manager:\n    verbosity: 6\n",
        ),
    )?;
    let p = reason_of(
        &client,
        "InfrastructureProvider",
        ns,
        "sample",
        "ProviderInstalled",
        "ComponentsFetchError",
    )
    .await
    .map_err(|e| with_logs(e, &operator))?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.2.0"))
    );
    assert_eq!(
        deployments
            .get("sample-infra-controller-manager")
            .await?
            .metadata
            .resource_version,
        installed_rv,
        "a failed change touched the installed Deployment"
    );
    apply(
        cluster,
        &infra(ns, "sample", "v0.2.0", "  secretName: missing-secret\n"),
    )?;
    reason_of(
        &client,
        "InfrastructureProvider",
        ns,
        "sample",
        "ProviderInstalled",
        "SecretNotFound",
    )
    .await?;
    assert_eq!(
        deployments
            .get("sample-infra-controller-manager")
            .await?
            .metadata
            .resource_version,
        installed_rv
    );

    // An invalid version never gets past admission.
    let (ok, _, err) = cluster.kubectl(&[
        "apply",
        "-f",
        &tempfile(&infra(ns, "sample", "latest-and-greatest", ""))?,
    ])?;
    assert!(!ok && err.contains("version"), "{err}");

    // A second core provider.
    cluster.ensure_namespace("core-b")?;
    apply(
        cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: core-b\nspec:\n  version: v0.2.0\n",
    )?;
    reason_of(
        &client,
        "CoreProvider",
        "core-b",
        "cluster-api",
        "PreflightCheckPassed",
        "MoreThanOneCoreProvider",
    )
    .await?;
    // The same kind and name in another namespace.
    cluster.ensure_namespace("infra-b")?;
    apply(cluster, &infra("infra-b", "sample", "v0.2.0", ""))?;
    reason_of(
        &client,
        "InfrastructureProvider",
        "infra-b",
        "sample",
        "PreflightCheckPassed",
        "DuplicateProviderName",
    )
    .await?;
    // A provider clusterctl does not know, without a fetchConfig.
    apply(
        cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: my-cloud\n  namespace: infra-b\nspec:\n  version: v1.0.0\n",
    )?;
    reason_of(
        &client,
        "InfrastructureProvider",
        "infra-b",
        "my-cloud",
        "PreflightCheckPassed",
        "UnknownProvider",
    )
    .await?;

    // Releases that are wrong in themselves.
    cluster.ensure_namespace("infra-c")?;
    let meta =
        std::fs::read_to_string(samples().join("sample-infrastructure/v0.2.0/metadata.yaml"))?;
    let good = std::fs::read_to_string(
        samples().join("sample-infrastructure/v0.2.0/infrastructure-components.yaml"),
    )?;
    let cases = [
        (
            "needs-var",
            meta.clone(),
            good.replace("${SAMPLE_GREETING:=hello}", "${SAMPLE_TOKEN}"),
            "ProviderInstalled",
            "MissingVariables",
        ),
        (
            "bad-yaml",
            meta.clone(),
            format!("{good}\n---\nkind: [unclosed\n"),
            "ProviderInstalled",
            "ComponentsRenderError",
        ),
        (
            "old-contract",
            meta.replace("contract: v1beta2", "contract: v1alpha4"),
            good.clone(),
            "PreflightCheckPassed",
            "ContractMismatch",
        ),
        (
            "no-series",
            meta.replace("minor: 2", "minor: 7"),
            good.clone(),
            "PreflightCheckPassed",
            "InvalidMetadata",
        ),
    ];
    for (name, m, c, cond, reason) in cases {
        release_configmap(
            &client,
            "infra-c",
            &format!("{name}-v0.2.0"),
            &[("provider.cluster.x-k8s.io/name", name)],
            "v0.2.0",
            &m,
            &c,
        )
        .await?;
        apply(cluster, &infra("infra-c", name, "v0.2.0", ""))?;
        let p = reason_of(
            &client,
            "InfrastructureProvider",
            "infra-c",
            name,
            cond,
            reason,
        )
        .await
        .map_err(|e| with_logs(e, &operator))?;
        assert!(
            p.pointer("/status/installedVersion").is_none(),
            "{name}: {p}"
        );
        let msg = condition(&p, cond)
            .and_then(|c| c.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        assert!(!msg.is_empty(), "{name}: condition without a message");
        if name == "needs-var" {
            assert!(msg.contains("SAMPLE_TOKEN"), "{msg}");
        }
    }
    let events = cluster.kubectl_ok(&["get", "events", "-n", "infra-c", "-o", "json"])?;
    assert!(
        events.contains("MissingVariables") && events.contains("ContractMismatch"),
        "no warning events: {events}"
    );
    // Events name the operator as their reporting controller (events.k8s.io/v1).
    let events: Value = serde_json::from_str(&cluster.kubectl_ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "infra-c",
        "-o",
        "json",
    ])?)?;
    let reported: Vec<&Value> = events["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|e| e["reason"] == "MissingVariables")
                .collect()
        })
        .unwrap_or_default();
    assert!(!reported.is_empty(), "no MissingVariables event: {events}");
    for e in reported {
        assert_eq!(e["reportingController"], "capi-provider-operator", "{e}");
        assert!(
            e["reportingInstance"]
                .as_str()
                .is_some_and(|i| !i.is_empty()),
            "{e}"
        );
    }

    // A provider managed by something else is left alone, status included.
    cluster.ensure_namespace("external")?;
    apply(
        cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: sample\n  namespace: external\n  annotations:\n    cluster.x-k8s.io/managed-by: someone-else\nspec:\n  version: v0.2.0\n",
    )?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let p = provider(&client, "InfrastructureProvider", "external", "sample")
        .await
        .ok_or("gone")?;
    assert!(p.get("status").is_none(), "{p}");
    assert!(p.pointer("/metadata/finalizers").is_none(), "{p}");

    // Killed in the middle of an install, restarted: converges, nothing duplicated.
    cluster.ensure_namespace("infra-k")?;
    sample_cm(
        &client,
        "infra-k",
        "sample-bootstrap",
        "v0.2.0",
        "bootstrap-components.yaml",
        "sample",
    )
    .await?;
    apply(
        cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: BootstrapProvider\nmetadata:\n  name: sample\n  namespace: infra-k\nspec:\n  version: v0.2.0\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: sample\n",
    )?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    operator.kill();
    let operator = start_operator(cluster, &["--config-retry-seconds", "3"])?;
    wait_condition(
        &client,
        ("BootstrapProvider", "infra-k", "sample"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| with_logs(e, &operator))?;
    let all = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default().labels("management.cluster.x-k8s.io/owner-kind"))
        .await?;
    let mut names: Vec<String> = all
        .items
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d.metadata.namespace.clone().unwrap_or_default(),
                d.metadata.name.clone().unwrap_or_default()
            )
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "infra-a/sample-infra-controller-manager",
            "infra-k/sample-bootstrap-controller-manager",
            "sample-core-system/sample-core-controller-manager",
        ],
        "unexpected Deployments"
    );
    Ok(())
}
