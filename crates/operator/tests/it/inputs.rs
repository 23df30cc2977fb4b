//! End-to-end: the Secrets and ConfigMaps providers read are watched only in the namespaces
//! they read from. A change there re-renders the provider; the watch follows the provider when
//! its spec names another namespace; nothing outside is watched, so the churn of unrelated
//! workload-cluster Secrets never reaches the operator.

use crate::support;

use std::time::Duration;

use capi_test_support::{private_cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use support::*;

const T: Duration = Duration::from_secs(90);
const NS: &str = "inputs-core";
const DEPLOYMENT: &str = "sample-core-controller-manager";

fn provider(secret_namespace: &str) -> String {
    format!(
        "{}  secretName: vars\n  secretNamespace: {secret_namespace}\n",
        core_provider(NS, "v0.2.0", 2)
    )
}

fn secret(namespace: &str, greeting: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vars\n  namespace: {namespace}\nstringData:\n  SAMPLE_GREETING: {greeting}\n"
    )
}

async fn greeting_becomes(client: &kube::Client, want: &str) -> bool {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    wait_for(T, || async {
        let d = deployments.get(DEPLOYMENT).await.ok()?;
        let env = d.spec?.template.spec?.containers.first()?.env.clone()?;
        env.iter()
            .any(|e| e.name == "SAMPLE_GREETING" && e.value.as_deref() == Some(want))
            .then_some(())
    })
    .await
    .is_some()
}

/// The collection paths the operator watched (`watch=true` requests in its client trace),
/// except the watches of what it installed, which the apiserver filters by the owner label.
fn watched(log: &str, resource: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("requesting") && l.contains("watch=true"))
        .filter(|l| !l.contains("owner-kind"))
        .filter_map(|l| {
            let start = l.find("/api/v1/")?;
            let path = l[start..].split(['?', ' ']).next()?;
            path.ends_with(&format!("/{resource}"))
                .then(|| path.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_inputs_are_watched_where_they_are_read() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    load_core(cluster, &client, NS).await?;
    for ns in ["inputs-vars", "inputs-vars-2", "inputs-unrelated"] {
        cluster.ensure_namespace(ns)?;
    }
    apply(cluster, &secret("inputs-vars", "first"))?;
    apply(cluster, &secret("inputs-vars-2", "second"))?;
    apply(cluster, &secret("inputs-unrelated", "never"))?;
    let op = capi_test_support::OperatorProcess::start_with_env(
        cluster,
        operator_bin(),
        &[],
        &[("RUST_LOG", "info,kube_client=debug")],
    )?;
    apply(cluster, &provider("inputs-vars"))?;
    assert!(greeting_becomes(&client, "first").await, "{}", op.logs());

    // A change of the Secret it reads, in another namespace, re-renders the provider.
    apply(cluster, &secret("inputs-vars", "changed"))?;
    assert!(greeting_becomes(&client, "changed").await, "{}", op.logs());

    // The provider now reads another namespace: the watch follows it.
    apply(cluster, &provider("inputs-vars-2"))?;
    assert!(greeting_becomes(&client, "second").await, "{}", op.logs());
    apply(cluster, &secret("inputs-vars-2", "changed-again"))?;
    assert!(
        greeting_becomes(&client, "changed-again").await,
        "{}",
        op.logs()
    );

    let log = op.logs();
    let secrets = watched(&log, "secrets");
    assert!(
        secrets.contains(&"/api/v1/namespaces/inputs-vars/secrets".to_string())
            && secrets.contains(&"/api/v1/namespaces/inputs-vars-2/secrets".to_string()),
        "{secrets:?}"
    );
    assert!(
        secrets.iter().all(|p| p.starts_with("/api/v1/namespaces/")),
        "a cluster-wide Secret watch: {secrets:?}"
    );
    assert!(
        !secrets.iter().any(|p| p.contains("inputs-unrelated")),
        "{secrets:?}"
    );
    let configmaps = watched(&log, "configmaps");
    assert!(
        configmaps
            .iter()
            .all(|p| p.starts_with("/api/v1/namespaces/")),
        "a cluster-wide ConfigMap watch: {configmaps:?}"
    );
    assert!(
        configmaps.contains(&format!("/api/v1/namespaces/{NS}/configmaps")),
        "the release ConfigMaps' namespace: {configmaps:?}"
    );
    Ok(())
}
