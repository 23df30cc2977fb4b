//! End-to-end: objects written for kubernetes-sigs/cluster-api-operator
//! (`operator.cluster.x-k8s.io/v1alpha2`) reconciled by this operator, unchanged: the real
//! v1.12.0 core and kubeadm bootstrap releases fetched by name from a local GitHub-compatible
//! server, the kubeadm control plane air-gapped from a ConfigMap in that operator's layout.
//! Their status speaks that operator's vocabulary; one world spans both APIs (a duplicate in
//! the other API is refused and never claims the working provider's objects); a spec that
//! cannot be translated stops with a condition; an object still held by cluster-api-operator
//! (its finalizer) is left alone until the handover removes that finalizer.

use crate::support;

use std::time::Duration;

use capi_fake_remotes::FakeServer;
use capi_test_support::{go_examples, private_cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, api::ListParams};
use serde_json::Value;
use support::*;

const GO: &str = "operator.cluster.x-k8s.io";

const PROVIDERS: &str = r#"
apiVersion: v1
kind: Secret
metadata:
  name: capi-variables
  namespace: capi-system
stringData:
  EXP_RUNTIME_SDK: "true"
---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  version: v1.12.0
  configSecret:
    name: capi-variables
  manager:
    syncPeriod: "10m"
    verbosity: 1
    controller:
      cacheSyncTimeout: 120000000000
---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: BootstrapProvider
metadata:
  name: kubeadm
  namespace: capi-kubeadm-bootstrap-system
spec:
  version: v1.12.0
  deployment:
    containers:
    - name: manager
      imageUrl: registry.example.internal/capi/kubeadm-bootstrap-controller:v1.12.0-patched
      args:
        "--bootstrap-token-ttl": "20m"
---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: ControlPlaneProvider
metadata:
  name: kubeadm
  namespace: capi-kubeadm-control-plane-system
spec:
  version: v1.12.0
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: kubeadm
        provider.cluster.x-k8s.io/type: control-plane
"#;

/// The same core provider declared in this operator's API: a duplicate.
const DUPLICATE_CORE: &str = r"
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  version: v1.12.0
";

/// A flag without dashes, which cluster-api-operator would pass as a positional argument.
const UNTRANSLATABLE: &str = r#"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
  name: docker
  namespace: capd-system
spec:
  version: v1.12.0
  manager:
    additionalArgs:
      service-cidr: "10.96.0.0/12"
"#;

/// An object cluster-api-operator still manages (its finalizer is on it).
const HELD: &str = r"
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: IPAMProvider
metadata:
  name: in-cluster
  namespace: capi-ipam-system
  finalizers:
  - provider.cluster.x-k8s.io
spec:
  version: v1.0.0
";

fn container(d: &Deployment) -> Option<k8s_openapi::api::core::v1::Container> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()
        .cloned()
}

/// Deletes every provider object of both APIs, the core providers last (the tests of this file
/// share one cluster, and a cluster has one core provider).
fn remove_all_providers(cluster: &capi_test_support::TestCluster) -> TestResult {
    let mut types = capi_operator_api::ProviderType::ALL.to_vec();
    types.reverse();
    for t in types {
        for group in ["operator.cluster.x-k8s.io", "management.cluster.x-k8s.io"] {
            cluster.kubectl_ok(&[
                "delete",
                &format!("{}.{group}", t.plural()),
                "--all",
                "-A",
                "--timeout=120s",
            ])?;
        }
    }
    Ok(())
}

fn reason<'a>(p: &'a Value, type_: &str) -> Option<&'a str> {
    condition(p, type_)?.get("reason")?.as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_api_operator_objects_are_reconciled_unchanged() -> TestResult {
    let repo = capi_test_support::releases()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let (cluster, client) = cluster_with_crds().await?;
    let github = FakeServer::start(
        &repo,
        &[(
            "kubernetes-sigs/cluster-api",
            &["cluster-api", "bootstrap-kubeadm", "control-plane-kubeadm"],
        )],
    )
    .await?;
    for ns in [
        "capi-system",
        "capi-kubeadm-bootstrap-system",
        "capi-kubeadm-control-plane-system",
        "capd-system",
        "capi-ipam-system",
    ] {
        cluster.ensure_namespace(ns)?;
    }
    // The air-gapped layout cluster-api-operator documents: labels for version, name and type.
    release_configmap_from_dir(
        &client,
        "capi-kubeadm-control-plane-system",
        &repo,
        "control-plane-kubeadm",
        "v1.12.0",
        "control-plane-components.yaml",
        &[
            ("provider.cluster.x-k8s.io/name", "kubeadm"),
            ("provider.cluster.x-k8s.io/type", "control-plane"),
        ],
    )
    .await?;

    let operator = start_operator(cluster, &["--github-api-url", github.url()])?;
    apply(cluster, PROVIDERS)?;
    let core_key = (
        "CoreProvider.operator.cluster.x-k8s.io",
        "capi-system",
        "cluster-api",
    );
    for key in [
        core_key,
        (
            "BootstrapProvider.operator.cluster.x-k8s.io",
            "capi-kubeadm-bootstrap-system",
            "kubeadm",
        ),
        (
            "ControlPlaneProvider.operator.cluster.x-k8s.io",
            "capi-kubeadm-control-plane-system",
            "kubeadm",
        ),
    ] {
        let p = wait_installed(&client, key, "v1.12.0", &operator).await?;
        // The vocabulary of cluster-api-operator's users.
        assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));
        assert_eq!(
            reason(&p, "Ready"),
            Some("MinimumReplicasAvailable"),
            "{key:?}"
        );
        assert_eq!(reason(&p, "ProviderInstalled"), Some("ProviderInstalled"));
        assert_eq!(
            reason(&p, "PreflightCheckPassed"),
            Some("PreflightChecksPassed")
        );
        let finalizers = p.pointer("/metadata/finalizers").cloned();
        assert!(
            finalizers
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|f| f.contains(&Value::from("management.cluster.x-k8s.io/provider"))),
            "{key:?}: {finalizers:?}"
        );
    }
    let core = provider(&client, core_key.0, core_key.1, core_key.2)
        .await
        .ok_or("core gone")?;
    assert_eq!(reason(&core, "SpecTranslated"), Some("SettingsIgnored"));
    let note = condition_message(&core, "SpecTranslated");
    assert!(note.contains("cacheSyncTimeout"), "{note}");

    // The translated settings reached the managers.
    let deployments = |ns: &str| Api::<Deployment>::namespaced(client.clone(), ns);
    let core_deployment = deployments("capi-system")
        .get("capi-controller-manager")
        .await?;
    let args = container(&core_deployment)
        .and_then(|c| c.args)
        .unwrap_or_default();
    assert!(args.iter().any(|a| a == "--sync-period=600s"), "{args:?}");
    assert!(
        args.iter().any(|a| a.contains("RuntimeSDK=true")),
        "{args:?}"
    );
    let labels = core_deployment.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("management.cluster.x-k8s.io/owner-api")
            .map(String::as_str),
        Some(GO)
    );
    let bootstrap = deployments("capi-kubeadm-bootstrap-system")
        .get("capi-kubeadm-bootstrap-controller-manager")
        .await?;
    let c = container(&bootstrap).ok_or("no container")?;
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example.internal/capi/kubeadm-bootstrap-controller:v1.12.0-patched")
    );
    let args = c.args.unwrap_or_default();
    assert!(
        args.iter().any(|a| a == "--bootstrap-token-ttl=20m"),
        "{args:?}"
    );

    // One world: the same core provider in the other API is refused, and deleting it removes
    // nothing of the working one.
    let generation = core_deployment.metadata.generation;
    apply(cluster, DUPLICATE_CORE)?;
    wait_condition(
        &client,
        ("CoreProvider", "capi-system", "cluster-api"),
        "PreflightCheckPassed",
        "False",
        Some("MoreThanOneCoreProvider"),
        Duration::from_secs(60),
    )
    .await
    .map_err(|e| format!("{e}\noperator log:\n{}", operator.logs()))?;
    cluster.kubectl_ok(&[
        "delete",
        "coreproviders.management.cluster.x-k8s.io",
        "cluster-api",
        "-n",
        "capi-system",
        "--timeout=60s",
    ])?;
    let core = provider(&client, core_key.0, core_key.1, core_key.2)
        .await
        .ok_or("core gone")?;
    assert_eq!(
        condition(&core, "Ready").and_then(|c| c.get("status")),
        Some(&Value::from("True"))
    );
    let after = deployments("capi-system")
        .get("capi-controller-manager")
        .await?;
    assert_eq!(
        after.metadata.generation, generation,
        "the core manager moved"
    );

    // A spec that cannot be translated stops with a condition and installs nothing.
    apply(cluster, UNTRANSLATABLE)?;
    let p = wait_condition(
        &client,
        (
            "InfrastructureProvider.operator.cluster.x-k8s.io",
            "capd-system",
            "docker",
        ),
        "SpecTranslated",
        "False",
        Some("UnsupportedSetting"),
        Duration::from_secs(60),
    )
    .await?;
    let message = condition_message(&p, "SpecTranslated");
    assert!(message.contains("service-cidr"), "{message}");
    assert!(p.pointer("/status/installedVersion").is_none());
    let installed = deployments("capd-system")
        .list(&ListParams::default())
        .await?;
    assert!(installed.items.is_empty(), "installed anyway");

    // Held by cluster-api-operator: no write until its finalizer is gone.
    apply(cluster, HELD)?;
    let ipam = (
        "IPAMProvider.operator.cluster.x-k8s.io",
        "capi-ipam-system",
        "in-cluster",
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = provider(&client, ipam.0, ipam.1, ipam.2)
        .await
        .ok_or("ipam gone")?;
    assert!(held.get("status").is_none(), "status written: {held}");
    assert_eq!(
        held.pointer("/metadata/finalizers"),
        Some(&serde_json::json!(["provider.cluster.x-k8s.io"]))
    );
    cluster.kubectl_ok(&[
        "patch",
        "ipamproviders.operator.cluster.x-k8s.io",
        "in-cluster",
        "-n",
        "capi-ipam-system",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])?;
    let taken = wait_for(Duration::from_secs(60), || {
        let client = client.clone();
        async move {
            let p = provider(&client, ipam.0, ipam.1, ipam.2).await?;
            p.get("status")?;
            Some(p)
        }
    })
    .await
    .ok_or_else(|| {
        format!(
            "not taken over after the finalizer left\n{}",
            operator.logs()
        )
    })?;
    assert!(
        taken
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.contains(&Value::from("management.cluster.x-k8s.io/provider")))
    );

    // Deleting a v1alpha2 provider removes what it installed.
    cluster.kubectl_ok(&[
        "delete",
        "controlplaneproviders.operator.cluster.x-k8s.io",
        "kubeadm",
        "-n",
        "capi-kubeadm-control-plane-system",
        "--timeout=120s",
    ])?;
    let left = deployments("capi-kubeadm-control-plane-system")
        .list(&ListParams::default())
        .await?;
    assert!(
        left.items.is_empty(),
        "{} Deployments left",
        left.items.len()
    );
    remove_all_providers(cluster)?;
    Ok(())
}

/// Makes CRD `name` look as cluster-api-operator's chart installs it: conversion through its
/// webhook Service, none of this operator's annotations.
fn as_the_other_operators(cluster: &capi_test_support::TestCluster, name: &str) -> TestResult {
    let webhook = r#"{"spec":{"conversion":{"strategy":"Webhook","webhook":{"conversionReviewVersions":["v1"],"clientConfig":{"service":{"name":"capi-operator-webhook-service","namespace":"capi-operator-system","path":"/convert","port":443}}}}}}"#;
    cluster.kubectl_ok(&["patch", "crd", name, "--type=merge", "-p", webhook])?;
    cluster.kubectl_ok(&[
        "annotate",
        "crd",
        name,
        "--overwrite",
        "management.cluster.x-k8s.io/crd-spec-hash-",
        "management.cluster.x-k8s.io/operator-version-",
    ])?;
    Ok(())
}

/// `run --manage-crds` takes cluster-api-operator's CRDs over: their conversion webhook (a
/// Service that is gone once that operator is) is removed, so the API server stops calling it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_crds_drop_the_other_operators_conversion_webhook() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let name = "coreproviders.operator.cluster.x-k8s.io";
    // As cluster-api-operator's chart installs it: conversion through its webhook Service.
    as_the_other_operators(cluster, name)?;
    let client = cluster.client().await?;
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    let mut operator = start_operator(cluster, &["--manage-crds"])?;
    let taken = wait_for(Duration::from_secs(60), || async {
        let c = crds.get(name).await.ok()?;
        let conversion = c.spec.conversion.clone()?;
        (conversion.strategy == "None" && conversion.webhook.is_none()).then_some(c)
    })
    .await;
    let logs = operator.logs();
    operator.kill();
    taken.ok_or_else(|| format!("the conversion webhook is still configured\n{logs}"))?;
    assert!(
        logs.contains("conversion webhook of the previous owner removed"),
        "{logs}"
    );
    cluster.install_crds()?;
    Ok(())
}

/// `run` with the chart's default flags (`--manage-crds`, both served groups) against
/// cluster-api-operator's CRD still holding objects stored as `v1alpha1`: this operator's
/// schema, which serves `v1alpha2` only, would be refused. The CRD is left exactly as it is
/// (its conversion webhook included), a Warning event on it says why, and the operator runs on
/// instead of crash-looping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_storing_v1alpha1_is_left_as_is_and_the_operator_runs_on() -> TestResult {
    use k8s_openapi::{
        api::events::v1::Event,
        apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    };
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let name = "coreproviders.operator.cluster.x-k8s.io";
    // As cluster-api-operator leaves it: v1alpha1 still served and stored, its webhook, none
    // of this operator's annotations.
    let v1alpha1 = r#"[{"op":"add","path":"/spec/versions/0","value":{"name":"v1alpha1","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}]"#;
    cluster.kubectl_ok(&["patch", "crd", name, "--type=json", "-p", v1alpha1])?;
    as_the_other_operators(cluster, name)?;
    set_stored_versions(cluster, name, r#"["v1alpha1","v1alpha2"]"#)?;
    let client = cluster.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let before = crds.get(name).await?;

    let mut operator = start_operator(
        cluster,
        &[
            "--manage-crds",
            "--clusterctl-inventory=true",
            "--served-groups=management.cluster.x-k8s.io,operator.cluster.x-k8s.io",
        ],
    )?;
    let checked = wait_for(Duration::from_secs(60), || async {
        operator
            .logs()
            .contains("provider CRDs checked")
            .then_some(())
    })
    .await;
    // A crash-looping operator exits right after the check: give it the time to.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let running = operator.running();
    let logs = operator.logs();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let note = wait_for(Duration::from_secs(30), || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("CRDNotTakenOver")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .and_then(|e| e.note)
    })
    .await;
    let after = crds.get(name).await?;
    operator.kill();
    restore_crd(cluster, name)?;

    checked.ok_or_else(|| format!("the CRDs were never checked\n{logs}"))?;
    assert!(running, "the operator exited\n{logs}");
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the CRD was changed: {:?}\n{logs}",
        after.spec.conversion
    );
    let note = note.ok_or_else(|| format!("no CRDNotTakenOver event\n{logs}"))?;
    assert!(
        note.contains("status.storedVersions holds v1alpha1"),
        "{note}"
    );
    assert!(logs.contains("CRD left as it is"), "{logs}");
    Ok(())
}

/// Sets the CRD's `status.storedVersions` to `versions` (a JSON list).
fn set_stored_versions(
    cluster: &capi_test_support::TestCluster,
    name: &str,
    versions: &str,
) -> TestResult {
    let stored = format!(r#"{{"status":{{"storedVersions":{versions}}}}}"#);
    let args = [
        "patch",
        "crd",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
    ];
    cluster.kubectl_ok(&[&args[..], &[stored.as_str()]].concat())?;
    Ok(())
}

/// Puts the CRD changed by the test above back as this operator's.
fn restore_crd(cluster: &capi_test_support::TestCluster, name: &str) -> TestResult {
    set_stored_versions(cluster, name, r#"["v1alpha2"]"#)?;
    let plain = r#"[{"op":"remove","path":"/spec/versions/0"},{"op":"replace","path":"/spec/conversion","value":{"strategy":"None"}}]"#;
    cluster.kubectl_ok(&["patch", "crd", name, "--type=json", "-p", plain])?;
    cluster.install_crds()?;
    Ok(())
}

/// `migrate --from cluster-api-operator --convert` on an installation laid down as
/// cluster-api-operator lays it down (its finalizer, status and release ConfigMap, the
/// components created as clusterctl's library creates them, with the
/// `--max-concurrent-reconciles` flag it renders for `maxConcurrentReconciles`, and its
/// Deployment). The handover is refused first, naming the Deployment that would restart (this
/// operator renders that setting as the managers' `--*-concurrency` flags) and changing
/// nothing; with `--allow-restart` the v1alpha2 object is replaced by the same provider in this
/// operator's API, which takes the installed objects over from that operator's own release
/// ConfigMap (nothing fetched).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_convert_refuses_a_restart_then_replaces_the_objects() -> TestResult {
    let base = capi_test_support::releases()?.join("cluster-api/v1.12.0");
    let _serial = capi_test_support::isolated(module_path!()).await;
    let (cluster, client) = cluster_with_crds().await?;
    let ns = "capi-convert";
    cluster.ensure_namespace(ns)?;
    cluster.ensure_namespace("capi-operator-system")?;

    // cluster-api-operator's Deployment (kwok runs its pod).
    apply(
        cluster,
        r"apiVersion: apps/v1
kind: Deployment
metadata:
  name: capi-operator-controller-manager
  namespace: capi-operator-system
spec:
  replicas: 1
  selector: {matchLabels: {control-plane: controller-manager}}
  template:
    metadata: {labels: {control-plane: controller-manager}}
    spec:
      containers:
      - name: manager
        image: registry.k8s.io/capi-operator/cluster-api-operator:v0.28.0
",
    )?;
    // Its release ConfigMap, named and labelled as it writes them (gzip above 1 MiB).
    let metadata = std::fs::read_to_string(base.join("metadata.yaml"))?;
    let components = std::fs::read_to_string(base.join("core-components.yaml"))?;
    let labels = capi_operator_api::v1alpha2::release_configmap_labels(
        capi_operator_api::ProviderType::Core,
        "cluster-api",
        "v1.12.0",
        false,
    );
    let labels: Vec<(&str, &str)> = labels
        .iter()
        .filter(|(k, _)| k.as_str() != "provider.cluster.x-k8s.io/version")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    release_configmap(
        &client,
        ns,
        "core-cluster-api-v1.12.0",
        &labels,
        "v1.12.0",
        &metadata,
        &components,
    )
    .await?;
    // The components as clusterctl's library creates them (no label of this operator).
    let object = serde_json::json!({
        "apiVersion": "operator.cluster.x-k8s.io/v1alpha2",
        "kind": "CoreProvider",
        "metadata": {"name": "cluster-api", "namespace": ns,
            "finalizers": ["provider.cluster.x-k8s.io"]},
        "spec": {"version": "v1.12.0", "manager": {"maxConcurrentReconciles": 5}},
    });
    // What cluster-api-operator renders for maxConcurrentReconciles.
    let view = capi_operator_api::AnyProvider::from_value(serde_json::json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
        "kind": "CoreProvider",
        "metadata": {"name": "cluster-api", "namespace": ns},
        "spec": {"version": "v1.12.0",
            "manager": {"additionalArgs": {"max-concurrent-reconciles": "5"}}},
    }))?;
    let release = capi_release::Release {
        version: "v1.12.0".into(),
        metadata,
        components,
    };
    let rendered = capi_components::render::render(&view, &release, |_| None)?;
    let file = tempfile(&capi_yaml::to_multi_doc(&rendered.objects)?)?;
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager",
        "cluster-api-operator",
        "-f",
        &file,
    ])?;
    apply(cluster, &serde_json::to_string(&object)?)?;
    // Its status, as it writes it.
    let status = r#"{"status":{"installedVersion":"v1.12.0","contract":"v1beta2","observedGeneration":1,"conditions":[
      {"type":"Ready","status":"True","reason":"MinimumReplicasAvailable","message":"Deployment has minimum availability.","lastTransitionTime":"2026-11-25T10:00:00Z","observedGeneration":1},
      {"type":"PreflightCheckPassed","status":"True","reason":"PreflightChecksPassed","message":"All preflight checks passed","lastTransitionTime":"2026-11-25T10:00:00Z","observedGeneration":1},
      {"type":"ProviderInstalled","status":"True","reason":"ProviderInstalled","message":"Provider installed successfully","lastTransitionTime":"2026-11-25T10:00:00Z","observedGeneration":1}]}}"#;
    cluster.kubectl_ok(&[
        "patch",
        "coreproviders.operator.cluster.x-k8s.io",
        "cluster-api",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ])?;
    cluster.kubectl_ok(&[
        "rollout",
        "status",
        "--timeout=120s",
        "-n",
        ns,
        "deployment/capi-controller-manager",
    ])?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let before = deployments.get("capi-controller-manager").await?;

    let mut operator = start_operator(cluster, &[])?;
    let migrate = |more: &[&str]| {
        let mut args = vec!["migrate", "--from", "cluster-api-operator", "--convert"];
        args.extend_from_slice(&["--skip-operator", "--timeout", "3m"]);
        args.extend_from_slice(more);
        plugin(cluster, &args)
    };
    let go_replicas = || async {
        Api::<Deployment>::namespaced(client.clone(), "capi-operator-system")
            .get("capi-operator-controller-manager")
            .await
            .ok()
            .and_then(|d| d.spec)
            .and_then(|s| s.replicas)
    };

    // Refused: nothing changes.
    let (ok, text) = migrate(&[])?;
    assert!(!ok, "a restarting handover went ahead:\n{text}");
    assert!(
        text.contains("would restart: Deployment capi-convert/capi-controller-manager"),
        "{text}"
    );
    assert!(text.contains("--allow-restart"), "{text}");
    assert_eq!(go_replicas().await, Some(1), "stopped although refused");
    assert!(
        provider(&client, "CoreProvider", ns, "cluster-api")
            .await
            .is_none(),
        "converted although refused"
    );

    let (ok, text) = migrate(&["--allow-restart"])?;
    let logs = operator.logs();
    assert!(ok, "migrate failed:\n{text}\n--- operator log ---\n{logs}");
    assert!(
        text.contains("changed: Deployment capi-convert/capi-controller-manager"),
        "{text}"
    );
    assert!(
        text.contains("from ConfigMaps in capi-convert"),
        "not read from cluster-api-operator's release ConfigMap: {text}"
    );
    let converted = provider(&client, "CoreProvider", ns, "cluster-api")
        .await
        .ok_or("no CoreProvider in this operator's API")?;
    assert_eq!(
        condition(&converted, "Ready").and_then(|c| c.get("status")),
        Some(&Value::from("True"))
    );
    assert!(
        provider(
            &client,
            "CoreProvider.operator.cluster.x-k8s.io",
            ns,
            "cluster-api"
        )
        .await
        .is_none(),
        "the v1alpha2 object is still there"
    );
    // The manager now gets the flags it has.
    let after = deployments.get("capi-controller-manager").await?;
    assert_ne!(after.metadata.generation, before.metadata.generation);
    let args = after
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.args)
        .unwrap_or_default();
    assert!(
        args.iter().any(|a| a == "--cluster-concurrency=5"),
        "{args:?}"
    );
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--max-concurrent-reconciles")),
        "{args:?}"
    );
    assert_eq!(go_replicas().await, Some(0));
    remove_all_providers(cluster)?;
    operator.kill();
    Ok(())
}

/// A small release of provider `label` at `version` in clusterctl's local-repository layout
/// under `dir`: metadata naming the release series with contract v1beta1, and components
/// holding a namespace, a Secret of `variables` (as real releases carry credentials) and the
/// controller Deployment `deployment` running `image`.
fn synthetic_release(
    dir: &std::path::Path,
    (label, version, file): (&str, &str, &str),
    (namespace, deployment, image): (&str, &str, &str),
    variables: &[&str],
) -> TestResult {
    let base = dir.join(label).join(version);
    std::fs::create_dir_all(&base)?;
    let mut parts = version.trim_start_matches('v').split('.');
    let (major, minor) = (
        parts.next().unwrap_or("0").to_string(),
        parts.next().unwrap_or("0").to_string(),
    );
    std::fs::write(
        base.join("metadata.yaml"),
        format!(
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: {major}\n  minor: {minor}\n  contract: v1beta1\n"
        ),
    )?;
    let data: String = variables
        .iter()
        .map(|v| format!("  {}: ${{{v}}}\n", v.to_lowercase()))
        .collect();
    let components = format!(
        r"apiVersion: v1
kind: Namespace
metadata:
  name: {namespace}
---
apiVersion: v1
kind: Secret
metadata:
  name: {deployment}-credentials
  namespace: {namespace}
type: Opaque
stringData:
  provider: {label}
{data}---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {deployment}
  namespace: {namespace}
spec:
  replicas: 1
  selector:
    matchLabels:
      control-plane: {deployment}
  template:
    metadata:
      labels:
        control-plane: {deployment}
    spec:
      containers:
      - name: manager
        image: {image}:{version}
        args:
        - --leader-elect
        - --metrics-bind-addr=localhost:8080
"
    );
    std::fs::write(base.join(file), components)?;
    Ok(())
}

/// The Secrets cluster-api-operator's published examples name (their published values are
/// placeholders), with real values.
const EXAMPLE_SECRETS: &str = r#"apiVersion: v1
kind: Secret
metadata: {name: credentials-secret, namespace: capa-system}
stringData: {AWS_B64ENCODED_CREDENTIALS: cXVpY2stc3RhcnQ=}
---
apiVersion: v1
kind: Secret
metadata: {name: aws-variables, namespace: capa-system}
stringData: {AWS_B64ENCODED_CREDENTIALS: ZXhhbXBsZXM=}
---
apiVersion: v1
kind: Secret
metadata: {name: capi-variables, namespace: capi-kubeadm-control-plane-system}
stringData: {EXP_CLUSTER_RESOURCE_SET: "true"}
---
apiVersion: v1
kind: Secret
metadata: {name: azure-variables, namespace: capz-system}
stringData: {AZURE_CLIENT_SECRET: not-a-secret}
---
apiVersion: v1
kind: Secret
metadata: {name: vsphere-variables, namespace: capv-system}
stringData: {VSPHERE_PASSWORD: not-a-password}
"#;

/// cluster-api-operator's published examples, applied unchanged, reach Ready with what they
/// ask for in the Deployments (releases from a local GitHub-compatible server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_api_operator_documented_examples_reach_ready() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let dir = std::env::temp_dir().join(format!("capi-go-examples-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let core = "core-components.yaml";
    let infra = "infrastructure-components.yaml";
    synthetic_release(
        &dir,
        ("cluster-api", "v1.4.3", core),
        (
            "capi-system",
            "capi-controller-manager",
            "registry.k8s.io/cluster-api/cluster-api-controller",
        ),
        &[],
    )?;
    synthetic_release(
        &dir,
        (
            "control-plane-kubeadm",
            "v1.4.3",
            "control-plane-components.yaml",
        ),
        (
            "capi-kubeadm-control-plane-system",
            "capi-kubeadm-control-plane-controller-manager",
            "registry.k8s.io/cluster-api/kubeadm-control-plane-controller",
        ),
        &[],
    )?;
    synthetic_release(
        &dir,
        ("infrastructure-aws", "v2.1.4", infra),
        (
            "capa-system",
            "capa-controller-manager",
            "registry.k8s.io/cluster-api-aws/cluster-api-aws-controller",
        ),
        &["AWS_B64ENCODED_CREDENTIALS"],
    )?;
    synthetic_release(
        &dir,
        ("infrastructure-myazure", "v1.9.3", infra),
        (
            "capz-system",
            "capz-controller-manager",
            "registry.k8s.io/cluster-api-azure/cluster-api-azure-controller",
        ),
        &["AZURE_CLIENT_SECRET"],
    )?;
    synthetic_release(
        &dir,
        ("infrastructure-vsphere", "v1.6.1", infra),
        (
            "capv-system",
            "capv-controller-manager",
            "registry.k8s.io/cluster-api-vsphere/cluster-api-vsphere-controller",
        ),
        &["VSPHERE_PASSWORD"],
    )?;
    let github = FakeServer::start(
        &dir,
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
    for ns in [
        "capi-system",
        "capa-system",
        "capi-kubeadm-control-plane-system",
        "capz-system",
        "capv-system",
    ] {
        cluster.ensure_namespace(ns)?;
    }
    apply(cluster, EXAMPLE_SECRETS)?;
    let operator = start_operator(cluster, &["--github-api-url", github.url()])?;
    let go = |kind: &str| format!("{kind}.operator.cluster.x-k8s.io");
    let ready = |kind: String, ns: &'static str, name: &'static str, version: &'static str| {
        let client = client.clone();
        let operator = &operator;
        async move { wait_installed(&client, (&kind, ns, name), version, operator).await }
    };
    let deployment = |ns: &str, name: &str| {
        let api = Api::<Deployment>::namespaced(client.clone(), ns);
        let name = name.to_string();
        async move { api.get(&name).await }
    };
    let secret = |ns: &str, name: &str| {
        let api = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns);
        let name = name.to_string();
        async move { api.get(&name).await }
    };
    let secret_value = |s: &k8s_openapi::api::core::v1::Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };

    // The quick start: the latest core provider, and aws with the credentials Secret.
    apply(cluster, go_examples::QUICKSTART_CORE)?;
    apply(cluster, go_examples::QUICKSTART_AWS)?;
    let p = ready(go("CoreProvider"), "capi-system", "cluster-api", "v1.4.3").await?;
    assert_eq!(p.pointer("/spec/version"), Some(&Value::from("v1.4.3")));
    // "Installing the CoreProvider" names that version: the same object, nothing to do.
    apply(cluster, go_examples::INSTALLING_CORE)?;
    ready(go("CoreProvider"), "capi-system", "cluster-api", "v1.4.3").await?;
    ready(go("InfrastructureProvider"), "capa-system", "aws", "v2.1.4").await?;
    let credentials = secret("capa-system", "capa-controller-manager-credentials").await?;
    assert_eq!(
        secret_value(&credentials, "aws_b64encoded_credentials").as_deref(),
        Some("cXVpY2stc3RhcnQ=")
    );

    // 1: controller flags, from the named release URL, with the other Secret.
    apply(cluster, go_examples::AWS_FLAGS)?;
    let flags = wait_for(Duration::from_secs(120), || async {
        let d = deployment("capa-system", "capa-controller-manager")
            .await
            .ok()?;
        let args = container(&d)?.args?;
        args.iter()
            .any(|a| a == "--awscluster-concurrency=12")
            .then_some(args)
    })
    .await
    .ok_or_else(|| {
        format!(
            "the flags did not reach the Deployment\n{}",
            operator.logs()
        )
    })?;
    for want in [
        "--awsmachine-concurrency=11",
        "--sync-period=500s",
        "--metrics-bind-addr=:8181",
    ] {
        assert!(flags.iter().any(|a| a == want), "{want} missing: {flags:?}");
    }
    let credentials = secret("capa-system", "capa-controller-manager-credentials").await?;
    assert_eq!(
        secret_value(&credentials, "aws_b64encoded_credentials").as_deref(),
        Some("ZXhhbXBsZXM=")
    );

    // 2: the image override.
    apply(cluster, go_examples::AWS_IMAGE)?;
    wait_for(Duration::from_secs(120), || async {
        let d = deployment("capa-system", "capa-controller-manager")
            .await
            .ok()?;
        (container(&d)?.image.as_deref() == Some("gcr.io/myregistry/capa-controller:v2.1.4-foo"))
            .then_some(())
    })
    .await
    .ok_or_else(|| format!("the image was not overridden\n{}", operator.logs()))?;
    ready(go("InfrastructureProvider"), "capa-system", "aws", "v2.1.4").await?;

    // 3: resource limits of the control-plane provider's manager.
    apply(cluster, go_examples::KUBEADM_RESOURCES)?;
    ready(
        go("ControlPlaneProvider"),
        "capi-kubeadm-control-plane-system",
        "kubeadm",
        "v1.4.3",
    )
    .await?;
    let d = deployment(
        "capi-kubeadm-control-plane-system",
        "capi-kubeadm-control-plane-controller-manager",
    )
    .await?;
    let resources = container(&d)
        .and_then(|c| c.resources)
        .ok_or("no resources")?;
    let limits = resources.limits.unwrap_or_default();
    assert_eq!(limits.get("memory").map(|q| q.0.as_str()), Some("30Mi"));
    assert_eq!(
        resources
            .requests
            .unwrap_or_default()
            .get("memory")
            .map(|q| q.0.as_str()),
        Some("20Mi")
    );

    // 4: a provider from another repository; 5: a provider by its well-known name.
    apply(cluster, go_examples::CUSTOM_AZURE_URL)?;
    apply(cluster, go_examples::VSPHERE_DEFAULT)?;
    ready(
        go("InfrastructureProvider"),
        "capz-system",
        "myazure",
        "v1.9.3",
    )
    .await?;
    ready(
        go("InfrastructureProvider"),
        "capv-system",
        "vsphere",
        "v1.6.1",
    )
    .await?;
    assert!(github.count("/repos/myorg/awesome-azure-provider/") > 0);
    assert!(github.count("/repos/kubernetes-sigs/cluster-api-provider-vsphere/") > 0);
    let _ = std::fs::remove_dir_all(&dir);
    remove_all_providers(cluster)?;
    Ok(())
}

/// Every kind through v1alpha2 objects: the core provider from an OCI registry (plain HTTP,
/// Debian's `docker-registry`) and upgraded there, the six others from GitHub release URLs, an
/// addon provider with additional manifests; then each is deleted, its components with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_installs_upgrades_and_deletes_through_v1alpha2() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let dir = std::env::temp_dir().join(format!("capi-go-kinds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let core_image = "registry.k8s.io/cluster-api/cluster-api-controller";
    for v in ["v1.4.3", "v1.5.0"] {
        synthetic_release(
            &dir,
            ("cluster-api", v, "core-components.yaml"),
            ("capi-system", "capi-controller-manager", core_image),
            &[],
        )?;
    }
    let reg = capi_test_support::registry::PlainRegistry::start().await?;
    for v in ["v1.4.3", "v1.5.0"] {
        push_release(&reg, "capi/cluster-api", &dir.join("cluster-api"), v).await?;
    }
    // (kind, type word, namespace, components file)
    let others = [
        (
            "BootstrapProvider",
            "bootstrap",
            "sample-bootstrap-system",
            "bootstrap-components.yaml",
        ),
        (
            "ControlPlaneProvider",
            "control-plane",
            "sample-cp-system",
            "control-plane-components.yaml",
        ),
        (
            "InfrastructureProvider",
            "infrastructure",
            "sample-infra-system",
            "infrastructure-components.yaml",
        ),
        (
            "IPAMProvider",
            "ipam",
            "sample-ipam-system",
            "ipam-components.yaml",
        ),
        (
            "RuntimeExtensionProvider",
            "runtime-extension",
            "sample-rx-system",
            "runtime-extension-components.yaml",
        ),
        (
            "AddonProvider",
            "addon",
            "sample-addon-system",
            "addon-components.yaml",
        ),
    ];
    let mut repos = Vec::new();
    for (_, word, ns, file) in others {
        let label = format!("{word}-sample");
        synthetic_release(
            &dir,
            (&label, "v0.3.0", file),
            (
                ns,
                &format!("{word}-controller-manager"),
                &format!("example.com/{word}-controller"),
            ),
            &[],
        )?;
        repos.push((format!("example/{word}"), [label]));
    }
    let repo_refs: Vec<(&str, &[String])> = repos
        .iter()
        .map(|(r, l)| (r.as_str(), l.as_slice()))
        .collect();
    let repo_strs: Vec<(&str, Vec<&str>)> = repo_refs
        .iter()
        .map(|(r, l)| (*r, l.iter().map(String::as_str).collect()))
        .collect();
    let mapping: Vec<(&str, &[&str])> = repo_strs.iter().map(|(r, l)| (*r, l.as_slice())).collect();
    let github = FakeServer::start(&dir, &mapping).await?;

    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    cluster.ensure_namespace("capi-system")?;
    for (_, _, ns, _) in others {
        cluster.ensure_namespace(ns)?;
    }
    let operator = start_operator(cluster, &["--github-api-url", github.url()])?;
    let go = |kind: &str| format!("{kind}.operator.cluster.x-k8s.io");
    let core = |version: &str| {
        format!(
            "apiVersion: operator.cluster.x-k8s.io/v1alpha2\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: capi-system\nspec:\n  version: {version}\n  fetchConfig:\n    oci: http://{}/capi/cluster-api\n",
            reg.host
        )
    };
    apply(cluster, &core("v1.4.3"))?;
    wait_installed(
        &client,
        (&go("CoreProvider"), "capi-system", "cluster-api"),
        "v1.4.3",
        &operator,
    )
    .await?;

    // The addon provider's additional manifests.
    apply(
        cluster,
        r"apiVersion: v1
kind: ConfigMap
metadata:
  name: addon-extras
  namespace: sample-addon-system
data:
  manifests: |
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: addon-extra-settings
      namespace: sample-addon-system
    data:
      mode: strict
",
    )?;
    let mut objects = Vec::new();
    for (kind, word, ns, _) in others {
        let extra = if kind == "AddonProvider" {
            "  additionalManifests:\n    name: addon-extras\n"
        } else {
            ""
        };
        objects.push(format!(
            "apiVersion: operator.cluster.x-k8s.io/v1alpha2\nkind: {kind}\nmetadata:\n  name: sample\n  namespace: {ns}\nspec:\n  version: v0.3.0\n  fetchConfig:\n    url: https://github.com/example/{word}/releases\n{extra}"
        ));
    }
    apply(cluster, &objects.join("---\n"))?;
    for (kind, _, ns, _) in others {
        wait_installed(&client, (&go(kind), ns, "sample"), "v0.3.0", &operator).await?;
    }
    let extra = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        client.clone(),
        "sample-addon-system",
    )
    .get("addon-extra-settings")
    .await?;
    assert_eq!(
        extra
            .data
            .unwrap_or_default()
            .get("mode")
            .map(String::as_str),
        Some("strict")
    );

    // The core provider's upgrade.
    apply(cluster, &core("v1.5.0"))?;
    let core_key = go("CoreProvider");
    let p = wait_for(Duration::from_secs(120), || async {
        let p = provider(&client, &core_key, "capi-system", "cluster-api").await?;
        let upgraded = p.pointer("/status/installedVersion") == Some(&Value::from("v1.5.0"))
            && condition(&p, "Ready").and_then(|c| c.get("status")) == Some(&Value::from("True"));
        upgraded.then_some(p)
    })
    .await
    .ok_or_else(|| format!("the core provider was not upgraded\n{}", operator.logs()))?;
    assert_eq!(
        condition(&p, "ProviderUpgraded").and_then(|c| c.get("reason")),
        Some(&Value::from("ProviderUpgraded"))
    );
    let d = Api::<Deployment>::namespaced(client.clone(), "capi-system")
        .get("capi-controller-manager")
        .await?;
    assert_eq!(
        container(&d).and_then(|c| c.image),
        Some(format!("{core_image}:v1.5.0"))
    );

    // Deletion, kind by kind, the core provider last.
    for (kind, word, ns, _) in others {
        cluster.kubectl_ok(&[
            "delete",
            &format!("{}s.operator.cluster.x-k8s.io", kind.to_lowercase()),
            "sample",
            "-n",
            ns,
            "--timeout=120s",
        ])?;
        let left = Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt(&format!("{word}-controller-manager"))
            .await?;
        assert!(left.is_none(), "{kind}: its Deployment is left");
    }
    cluster.kubectl_ok(&[
        "delete",
        "coreproviders.operator.cluster.x-k8s.io",
        "cluster-api",
        "-n",
        "capi-system",
        "--timeout=120s",
    ])?;
    let left = Api::<Deployment>::namespaced(client.clone(), "capi-system")
        .get_opt("capi-controller-manager")
        .await?;
    assert!(left.is_none(), "the core provider's Deployment is left");
    let _ = std::fs::remove_dir_all(&dir);
    remove_all_providers(cluster)?;
    Ok(())
}
