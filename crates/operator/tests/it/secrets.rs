//! Secret values never leak: a provider installed with a credential variable (substituted into
//! a Secret of its own, through additionalManifests), then broken on purpose (a missing
//! variable, a malformed manifest using the credential), with the operator logging at the most
//! verbose level. The value must not appear in the operator's log, in events, in the provider's
//! status, in /metrics, or in any ConfigMap (release caches included); it appears only in the
//! provider's own rendered Secret.

use crate::support;

use std::time::Duration;

use capi_test_support::{private_cluster, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::{Api, api::ListParams};
use support::*;

const T: Duration = Duration::from_secs(90);
const NS: &str = "secret-core";
/// A value no other part of the test produces.
const CREDENTIAL: &str = "s3cr3t-Kx9QmZ2vT7wLp4Rj";

fn manifest(extra_vars: &str) -> String {
    format!(
        r"apiVersion: v1
kind: Secret
metadata:
  name: core-credentials
  namespace: {NS}
stringData:
  SAMPLE_TOKEN: {CREDENTIAL}
{extra_vars}---
apiVersion: v1
kind: ConfigMap
metadata:
  name: core-extra
  namespace: {NS}
data:
  manifests: |
    apiVersion: v1
    kind: Secret
    metadata:
      name: sample-core-token
    stringData:
      token: ${{SAMPLE_TOKEN}}
      region: ${{SAMPLE_REGION}}
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: {NS}
spec:
  version: v0.2.0
  secretName: core-credentials
  additionalManifests:
    name: core-extra
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: sample-core
"
    )
}

/// The operator's /metrics text (empty when it does not answer).
fn metrics(port: u16) -> String {
    get(port, "/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default()
}

#[tokio::test]
async fn secret_values_stay_out_of_logs_events_status_metrics_and_caches() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace(NS)?;
    let client = cluster.client().await?;
    load_core(cluster, &client, NS).await?;
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let operator = capi_test_support::OperatorProcess::start_with_env(
        cluster,
        operator_bin(),
        &[
            "--metrics-bind-address",
            &addr,
            "--config-retry-seconds",
            "2",
        ],
        &[("RUST_LOG", "trace")],
    )?;

    // 1. Missing variable: SAMPLE_REGION has no value and no default.
    apply(cluster, &manifest(""))?;
    let p = wait_condition(
        &client,
        ("CoreProvider", NS, "cluster-api"),
        "ProviderInstalled",
        "False",
        Some("AdditionalManifestsError"),
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", operator.logs()))?;
    let text = serde_json::to_string(&p)?;
    assert!(
        text.contains("SAMPLE_REGION"),
        "the missing variable is named: {text}"
    );

    // 2. Installed, the credential substituted into the provider's own Secret.
    apply(cluster, &manifest("  SAMPLE_REGION: eu-west-1\n"))?;
    wait_condition(
        &client,
        ("CoreProvider", NS, "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", operator.logs()))?;
    let s = Api::<Secret>::namespaced(client.clone(), NS)
        .get("sample-core-token")
        .await?;
    let token = s
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    assert_eq!(
        token.as_deref(),
        Some(CREDENTIAL),
        "substituted into the Secret"
    );

    // 3. A change that fails to render after the credential was substituted.
    cluster.kubectl_ok(&[
        "patch",
        "configmap",
        "core-extra",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"data":{"manifests":"apiVersion: v1\nkind: Secret\nmetadata:\n  name: sample-core-token\nstringData:\n  token: ${SAMPLE_TOKEN}\n  broken: [unclosed\n"}}"#,
    ])?;
    wait_condition(
        &client,
        ("CoreProvider", NS, "cluster-api"),
        "ProviderInstalled",
        "False",
        None,
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", operator.logs()))?;
    // Give the trace log, events and metrics a moment to settle.
    let scraped = wait_for(T, || async {
        let m = metrics(port);
        m.contains("capi_operator_reconcile_errors_total")
            .then_some(m)
    })
    .await
    .ok_or("no metrics")?;

    let mut places: Vec<(String, String)> = vec![
        ("operator log (trace)".into(), operator.logs()),
        ("/metrics".into(), scraped),
    ];
    let p = provider_value(&client).await?;
    places.push(("provider object".into(), p));
    for e in Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        places.push((
            format!("event {:?}", e.metadata.name),
            serde_json::to_string(&e)?,
        ));
    }
    for cm in Api::<ConfigMap>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        places.push((
            format!(
                "ConfigMap {:?}/{:?}",
                cm.metadata.namespace, cm.metadata.name
            ),
            serde_json::to_string(&cm)?,
        ));
    }
    assert!(
        places.iter().any(|(w, _)| w.starts_with("event")),
        "events were published"
    );
    assert!(
        places[0].1.contains("TRACE"),
        "the operator logged at trace level"
    );
    for (what, text) in &places {
        assert!(
            !text.contains(CREDENTIAL),
            "the credential leaked into {what}"
        );
    }
    Ok(())
}

async fn provider_value(client: &kube::Client) -> Result<String, Box<dyn std::error::Error>> {
    let p = provider(client, "CoreProvider", NS, "cluster-api")
        .await
        .ok_or("provider gone")?;
    Ok(serde_json::to_string(&p)?)
}
