//! End-to-end: what the operator must never do to a management cluster while applying a release.
//!
//! - An upgrade whose CRD changes a field the apiserver keeps immutable (spec.scope) is refused
//!   and stops (Stalled, a Warning event naming the CRD and the field): the CRD is never deleted
//!   to force the change, so its custom resources survive and the previous release keeps running.
//! - Drift that leaves no managedFields trace (a JSON-patch `remove`), made while no operator
//!   ran or after a restart, is repaired as any other drift: validation cannot be switched off
//!   silently.

use crate::support;

use std::time::{Duration, Instant};

use capi_test_support::{OperatorProcess, TestCluster, wait_for};
use k8s_openapi::{
    api::apps::v1::Deployment,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{Api, Client};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);
const CRD: &str = "samplewidgets.core.sample.capi-operator.example";
const DEPLOYMENT: &str = "sample-core-controller-manager";
const WEBHOOKS: &str = "sample-core-validating-webhook-configuration";
const REFUSED: &str = "CustomResourceDefinitionChangeRefused";

/// metadata.yaml of the sample core releases v0.2 and v0.3 (same contract).
const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n  - major: 0\n    minor: 2\n    contract: v1beta2\n  - major: 0\n    minor: 3\n    contract: v1beta2\n";

fn sample_components() -> Result<String, Box<dyn std::error::Error>> {
    Ok(std::fs::read_to_string(
        samples().join("sample-core/v0.2.0/core-components.yaml"),
    )?)
}

/// A release of the sample core provider, as ConfigMap `sample-core-VERSION` of `ns`.
async fn load_release(client: &Client, ns: &str, version: &str, components: &str) -> TestResult {
    release_configmap(
        client,
        ns,
        &format!("sample-core-{version}"),
        &[("provider.cluster.x-k8s.io/name", "sample-core")],
        version,
        METADATA,
        components,
    )
    .await
}

/// Warning events of reason `reason` in `ns`: their messages.
fn warnings(
    cluster: &TestCluster,
    ns: &str,
    reason: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    Ok(cluster.kubectl_ok(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("reason={reason},type=Warning"),
        "-o",
        "jsonpath={.items[*].message}",
    ])?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_scope_change_stops_the_upgrade_and_deletes_nothing() -> TestResult {
    const NS: &str = "safety-crd";
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = capi_test_support::private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace(NS)?;
    let client = cluster.client().await?;
    let v2 = sample_components()?;
    let v3 = v2.replace("scope: Namespaced", "scope: Cluster");
    assert_ne!(v2, v3, "the sample CRD is namespaced");
    load_release(&client, NS, "v0.2.0", &v2).await?;
    load_release(&client, NS, "v0.3.0", &v3).await?;
    let op = start_operator(cluster, &[])?;
    apply(cluster, &core_provider(NS, "v0.2.0", 2))?;
    wait_installed(&client, ("CoreProvider", NS, "cluster-api"), "v0.2.0", &op).await?;

    // A user's custom resource of the provider's CRD.
    apply(
        cluster,
        &format!(
            "apiVersion: core.sample.capi-operator.example/v1beta2\nkind: SampleWidget\nmetadata:\n  name: users-widget\n  namespace: {NS}\nspec:\n  size: 3\n"
        ),
    )?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let uid = crds.get(CRD).await?.metadata.uid;
    // The operator installs the release into the provider's namespace.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let generation = deployments.get(DEPLOYMENT).await?.metadata.generation;

    // The upgrade to a release whose CRD is cluster-scoped.
    apply(cluster, &core_provider(NS, "v0.3.0", 2))?;
    let p = wait_condition(
        &client,
        ("CoreProvider", NS, "cluster-api"),
        "Stalled",
        "True",
        Some(REFUSED),
        T,
    )
    .await
    .map_err(|e| format!("{e}\noperator log:\n{}", op.logs()))?;
    let stalled = condition_message(&p, "Stalled");
    assert!(
        stalled.contains(CRD) && stalled.contains("spec.scope"),
        "{stalled}"
    );
    assert_eq!(
        p.pointer("/status/installedVersion")
            .and_then(Value::as_str),
        Some("v0.2.0"),
        "the installed version stays the previous one"
    );

    // Give a (wrong) deletion and re-creation time to happen before looking.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let crd = crds.get(CRD).await?;
    assert_eq!(crd.metadata.uid, uid, "the CRD was deleted and re-created");
    assert_eq!(crd.spec.scope, "Namespaced");
    let widget = cluster.kubectl_ok(&[
        "get",
        "samplewidgets",
        "-n",
        NS,
        "users-widget",
        "-o",
        "name",
    ])?;
    assert!(widget.contains("users-widget"), "{widget}");
    let events = warnings(cluster, NS, REFUSED)?;
    assert!(
        events.contains(CRD) && events.contains("spec.scope"),
        "no Warning event naming the CRD and the field: {events:?}"
    );
    // The previous release keeps running, untouched.
    let d = deployments.get(DEPLOYMENT).await?;
    assert_eq!(
        d.metadata.generation, generation,
        "the Deployment was changed"
    );
    let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
    assert!(
        available >= 1,
        "the previous release's Deployment is not available"
    );
    Ok(())
}

/// The sample core release with a ValidatingWebhookConfiguration of two webhooks.
fn with_webhooks(components: &str) -> String {
    let webhook = |name: &str| {
        format!(
            "  - name: {name}.core.sample.capi-operator.example\n    admissionReviewVersions: [\"v1\"]\n    sideEffects: None\n    failurePolicy: Ignore\n    clientConfig:\n      service:\n        name: sample-core-webhook-service\n        namespace: default\n        path: /{name}\n    rules:\n      - apiGroups: [\"core.sample.capi-operator.example\"]\n        apiVersions: [\"v1beta2\"]\n        operations: [\"CREATE\", \"UPDATE\"]\n        resources: [\"samplewidgets\"]\n"
        )
    };
    format!(
        "{components}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {WEBHOOKS}\nwebhooks:\n{}{}",
        webhook("validate-widget"),
        webhook("validate-widget-size")
    )
}

/// The webhooks' names in the live configuration.
fn webhook_names(cluster: &TestCluster) -> Vec<String> {
    cluster
        .get_json(&["validatingwebhookconfiguration", WEBHOOKS])
        .ok()
        .and_then(|w| {
            w["webhooks"].as_array().map(|a| {
                a.iter()
                    .filter_map(|h| h["name"].as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// Starts the operator with /metrics on a free port and waits until it has reconciled the core
/// provider once.
async fn started_operator(
    cluster: &TestCluster,
) -> Result<OperatorProcess, Box<dyn std::error::Error>> {
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let op = start_operator(cluster, &["--metrics-bind-address", &addr])?;
    let passed = wait_for(T, || async {
        let (_, body) = get(port, "/metrics").ok()?;
        body.lines()
            .any(|l| l.starts_with("capi_operator_reconcile_total{kind=\"CoreProvider\""))
            .then_some(())
    })
    .await;
    passed.ok_or_else(|| format!("no reconcile after restart\n{}", op.logs()))?;
    Ok(op)
}

/// Removes the first webhook with a JSON patch, which leaves no managedFields entry.
fn remove_first_webhook(cluster: &TestCluster) -> Result<Instant, Box<dyn std::error::Error>> {
    let patched = cluster.kubectl_ok(&[
        "patch",
        "validatingwebhookconfiguration",
        WEBHOOKS,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/webhooks/0"}]"#,
    ])?;
    assert!(patched.contains("patched"), "{patched}");
    Ok(Instant::now())
}

/// How many DriftRepaired warnings name the webhook configuration in `ns`: a repeated event is
/// one Event object with a count (or a series count), so occurrences are added up.
fn webhook_repairs(cluster: &TestCluster, ns: &str) -> usize {
    let out = cluster
        .kubectl_ok(&[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "reason=DriftRepaired,type=Warning",
            "-o",
            "jsonpath={range .items[*]}{.count} {.series.count} {.message}{\"\\n\"}{end}",
        ])
        .unwrap_or_default();
    out.lines()
        .filter(|l| l.contains(&format!("ValidatingWebhookConfiguration {WEBHOOKS}")))
        .map(|l| {
            l.split_whitespace()
                .take(2)
                .filter_map(|n| n.parse::<usize>().ok())
                .max()
                .unwrap_or(1)
        })
        .sum()
}

/// Waits until the webhooks are `declared` again and one more DriftRepaired warning than
/// `before` names the configuration.
async fn restored_with_event(
    cluster: &TestCluster,
    ns: &str,
    declared: &[String],
    op: &OperatorProcess,
    (removed, before): (Instant, usize),
) -> TestResult {
    let back = wait_for(Duration::from_secs(15), || async {
        (webhook_names(cluster) == declared).then_some(())
    })
    .await;
    back.ok_or_else(|| {
        format!(
            "the removed webhook is still missing {:?} later: {:?}\noperator log:\n{}",
            removed.elapsed(),
            webhook_names(cluster),
            op.logs()
        )
    })?;
    println!("webhook restored {:?} after its removal", removed.elapsed());
    // (The repair can be quicker than a look at the configuration: the event shows the webhook
    // was gone.)
    let events = wait_for(Duration::from_secs(10), || async {
        (webhook_repairs(cluster, ns) > before).then_some(())
    })
    .await;
    assert!(
        events.is_some(),
        "no new DriftRepaired event naming the webhook configuration: {:?}",
        warnings(cluster, ns, "DriftRepaired")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_removed_after_a_restart_is_restored() -> TestResult {
    const NS: &str = "safety-webhook";
    let _serial = capi_test_support::isolated(module_path!()).await;
    // A cluster of its own: only one core provider may exist per cluster.
    let cluster = capi_test_support::second_private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace(NS)?;
    let client = cluster.client().await?;
    load_release(&client, NS, "v0.2.0", &with_webhooks(&sample_components()?)).await?;
    let mut first = start_operator(cluster, &[])?;
    apply(cluster, &core_provider(NS, "v0.2.0", 2))?;
    wait_installed(
        &client,
        ("CoreProvider", NS, "cluster-api"),
        "v0.2.0",
        &first,
    )
    .await?;
    let declared = webhook_names(cluster);
    assert_eq!(declared.len(), 2, "{declared:?}");
    first.terminate()?;

    // Removed while no operator runs: the configuration still carries the operator's hash
    // label, only the operator's managedFields entry lost the webhook.
    let removed = (remove_first_webhook(cluster)?, 0);
    assert_eq!(webhook_names(cluster).len(), 1);
    let op = started_operator(cluster).await?;
    restored_with_event(cluster, NS, &declared, &op, removed).await?;

    // Removed while the restarted operator runs (it trusted the configuration at start).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = webhook_repairs(cluster, NS);
    let removed = (remove_first_webhook(cluster)?, before);
    restored_with_event(cluster, NS, &declared, &op, removed).await
}
