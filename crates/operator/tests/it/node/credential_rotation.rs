//! Credential rotation that takes effect, end to end on the real core manager: a Secret of the
//! provider rendered from AWS-style credentials in its variables Secret reaches the manager's
//! environment; rotating the credentials replaces the manager pod, whose process then holds the
//! new value, and the provider's event names the Deployment and the Secret, never the value. A
//! variable no Deployment reads and another Secret of the namespace roll nothing. Runs in the
//! cluster of `real_providers` (cert-manager and the providers installed once).

use crate::support;

use std::time::{Duration, Instant};

use capi_test_support::wait_for;
use k8s_openapi::{
    ByteString,
    api::{apps::v1::Deployment, core::v1::Secret},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;
use support::{real::*, *};

use super::real_providers::{AREA, installed};

const T: Duration = Duration::from_secs(300);
const NS: &str = "capi-system";
const DEPLOYMENT: &str = "capi-controller-manager";
const CORE: (&str, &str, &str) = ("CoreProvider", NS, "cluster-api");

/// The extra objects: the credentials Secret as infrastructure providers render it, and a
/// ConfigMap from a variable no Deployment reads.
const MANIFESTS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: capi-rotation-credentials}\ntype: Opaque\ndata:\n  credentials: ${AWS_B64ENCODED_CREDENTIALS}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: capi-rotation-unread}\ndata:\n  note: \"${UNREAD}\"\n";

/// The core provider's spec reading them: the manager gets the credentials in its environment.
const CORE_SPEC: &str = "    containers:\n    - name: manager\n      env:\n      - name: AWS_CREDENTIALS\n        valueFrom:\n          secretKeyRef: {name: capi-rotation-credentials, key: credentials}\n  secretName: rotation-variables\n  additionalManifests:\n    name: rotation-manifests\n";

fn credentials(key_id: &str) -> String {
    format!("[default]\naws_access_key_id = {key_id}\naws_secret_access_key = secret-of-{key_id}\n")
}

/// Server-side applies Secret `name` of [`NS`] with `data` (field manager e2e-user).
async fn put_secret(client: &Client, name: &str, data: serde_json::Value) -> TestResult {
    let body = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data});
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch(
            name,
            &PatchParams::apply("e2e-user").force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(())
}

async fn variables(client: &Client, key_id: &str, unread: &str) -> TestResult {
    // As clusterctl's AWS users set it: base64 of the credentials file.
    let b64 = serde_json::to_value(ByteString(credentials(key_id).into_bytes()))?;
    put_secret(
        client,
        "rotation-variables",
        json!({"AWS_B64ENCODED_CREDENTIALS": b64, "UNREAD": unread}),
    )
    .await
}

/// The environment of the ready manager process, once `ready(env)` holds: (pod name, env).
async fn manager_env(
    client: &Client,
    ready: impl Fn(&str) -> bool,
) -> Result<(String, String), Box<dyn std::error::Error>> {
    let found = wait_for(T, || async {
        let (pod, _, pid) = manager_process(client, NS).await?;
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let env = String::from_utf8_lossy(&env).replace('\0', "\n");
        ready(&env).then_some((pod, env))
    })
    .await;
    found.ok_or_else(|| "the manager never ran with the expected environment".into())
}

async fn generation(client: &Client) -> Result<i64, Box<dyn std::error::Error>> {
    let d = Api::<Deployment>::namespaced(client.clone(), NS)
        .get(DEPLOYMENT)
        .await?;
    Ok(d.metadata.generation.unwrap_or_default())
}

fn rolled_events(
    cluster: &capi_test_support::TestCluster,
) -> Result<String, Box<dyn std::error::Error>> {
    Ok(cluster.kubectl_ok(&[
        "get",
        "events",
        "-n",
        NS,
        "--field-selector",
        "reason=ConfigChangeRolled",
        "-o",
        "jsonpath={.items[*].message}",
    ])?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_credentials_reach_a_new_manager_and_unrelated_changes_roll_nothing() -> TestResult
{
    let test = "rotated_credentials_reach_a_new_manager_and_unrelated_changes_roll_nothing";
    let parts = real_node_parts()?;
    let _serial = capi_test_support::isolated(AREA).await;
    let (cluster, client, operator) = installed(real_node(test)?, &parts).await?;
    let started = Instant::now();
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };
    variables(&client, "AKIAOLD", "one").await?;
    apply(
        cluster,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: rotation-manifests, namespace: {NS}}}\ndata:\n  manifests: {}\n",
            serde_json::to_string(MANIFESTS)?
        ),
    )?;
    apply_real(cluster, "v1.12.0", |kind| {
        if kind == "CoreProvider" {
            CORE_SPEC.into()
        } else {
            String::new()
        }
    })?;
    let (first_pod, _) = manager_env(&client, |env| env.contains("aws_access_key_id = AKIAOLD"))
        .await
        .map_err(log)?;
    wait_available(&client, NS, DEPLOYMENT, T).await?;
    let before = generation(&client).await?;

    // Unrelated: another Secret of the namespace, and a variable only an unread ConfigMap uses.
    // The ConfigMap's new value says the operator has applied that change.
    put_secret(&client, "unrelated", json!({"token": "changed"})).await?;
    variables(&client, "AKIAOLD", "two").await?;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), NS);
    wait_for(T, || async {
        let cm = configmaps.get_opt("capi-rotation-unread").await.ok()??;
        (cm.data?.get("note")? == "two").then_some(())
    })
    .await
    .ok_or("the unread ConfigMap never got the new variable")
    .map_err(|e| log(e.into()))?;
    assert_eq!(
        generation(&client).await?,
        before,
        "an unrelated change rolled the manager"
    );

    // Rotated: the manager pod is replaced and its process holds the new credentials.
    variables(&client, "AKIANEW", "two").await?;
    let (second_pod, _) = manager_env(&client, |env| env.contains("aws_access_key_id = AKIANEW"))
        .await
        .map_err(log)?;
    assert_ne!(first_pod, second_pod, "a new pod reads the new credentials");
    // One template change in all: the unrelated changes before it rolled nothing.
    assert_eq!(generation(&client).await?, before + 1);
    let d = Api::<Deployment>::namespaced(client.clone(), NS)
        .get(DEPLOYMENT)
        .await?;
    let hash = d
        .spec
        .and_then(|s| {
            s.template
                .metadata?
                .annotations?
                .get("management.cluster.x-k8s.io/config-hash")
                .cloned()
        })
        .ok_or("the pod template carries no config hash")?;
    let events = wait_for(Duration::from_secs(60), || async {
        rolled_events(cluster).ok().filter(|e| !e.is_empty())
    })
    .await
    .ok_or_else(|| log("no ConfigChangeRolled event".into()))?;
    assert!(
        events.contains("Deployment capi-system/capi-controller-manager (Secret capi-system/capi-rotation-credentials changed)"),
        "{events}"
    );
    assert_eq!(
        events.matches("Deployment ").count(),
        1,
        "one roll announced: {events}"
    );
    for secret in ["AKIANEW", "AKIAOLD", "secret-of", hash.as_str()] {
        assert!(
            !events.contains(secret),
            "the event shows {secret}: {events}"
        );
    }

    // Back to the plain providers for the other tests of the area.
    apply_real(cluster, "v1.12.0", |_| String::new())?;
    manager_env(&client, |env| !env.contains("AWS_CREDENTIALS="))
        .await
        .map_err(log)?;
    wait_available(&client, NS, DEPLOYMENT, T).await?;
    wait_condition(&client, CORE, "Ready", "True", None, T)
        .await
        .map_err(log)?;
    eprintln!(
        "{test}: {:.0} s after the shared install",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
