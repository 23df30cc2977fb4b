//! The operator killed (SIGKILL) at random points of upgrades and deletions, then started
//! again: every run must converge to the declared end state, with nothing orphaned or
//! duplicated and the provider's custom resources and CRDs kept.
//!
//! Runs are seeded and reproducible: `CAPI_KILL_SEED` (default 20261123) picks the kill points,
//! `CAPI_KILL_RUNS` (default 10) the number of runs per flow. The seed and each kill delay are
//! printed, so a failing run can be replayed.

use crate::support;

use std::{collections::BTreeSet, time::Duration};

use capi_test_support::{OperatorProcess, Rng, TestCluster, env_u64, private_cluster, wait_for};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client, api::ListParams};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);
const CORE_NS: &str = "kill-core";
const INFRA_NS: &str = "kill-infra";
const CORE_LABEL: &str = "sample-core";
const INFRA_LABEL: &str = "sample-infrastructure";

fn provider_yaml(kind: &str, ns: &str, name: &str, label: &str, version: &str) -> String {
    provider_yaml_with(kind, ns, name, label, version, "")
}

/// A provider object with `extra` lines (indented for spec) added to its spec.
fn provider_yaml_with(
    kind: &str,
    ns: &str,
    name: &str,
    label: &str,
    version: &str,
    extra: &str,
) -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  version: {version}\n{extra}  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {label}\n"
    )
}

fn core_yaml(version: &str, extra: &str) -> String {
    provider_yaml_with(
        "CoreProvider",
        CORE_NS,
        "cluster-api",
        CORE_LABEL,
        version,
        extra,
    )
}

/// The core controller Deployment: (replicas, manager args, original-replicas annotation).
async fn core_deployment(client: &Client) -> Option<(i32, Vec<String>, Option<String>)> {
    let d = Api::<Deployment>::namespaced(client.clone(), CORE_NS)
        .get_opt("sample-core-controller-manager")
        .await
        .ok()??;
    let ann = d.metadata.annotations.as_ref().and_then(|a| {
        a.get("management.cluster.x-k8s.io/original-controller-replicas")
            .cloned()
    });
    let spec = d.spec?;
    let args = spec
        .template
        .spec?
        .containers
        .first()?
        .args
        .clone()
        .unwrap_or_default();
    Some((spec.replicas?, args, ann))
}

/// The ConfigMap only release `version` of the generated core series installs.
fn marker(version: &str) -> String {
    format!("kill-marker-{}", version.replace('.', "-"))
}

/// Loads sample-core v0.2.`patch` into a ConfigMap: v0.2.0's components plus a marker
/// ConfigMap of its own, so each upgrade has an object to add and one to prune.
async fn core_release(client: &Client, patch: u32) -> TestResult {
    let base = samples().join(CORE_LABEL).join("v0.2.0");
    let metadata = std::fs::read_to_string(base.join("metadata.yaml"))?;
    let components = std::fs::read_to_string(base.join("core-components.yaml"))?;
    let version = format!("v0.2.{patch}");
    let components = format!(
        "{components}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {}\n  namespace: sample-core-system\ndata:\n  version: {version}\n",
        marker(&version)
    );
    release_configmap(
        client,
        CORE_NS,
        &format!("{CORE_LABEL}-{version}"),
        &[("provider.cluster.x-k8s.io/name", CORE_LABEL)],
        &version,
        &metadata,
        &components,
    )
    .await
}

fn owner_selector(kind: &str, ns: &str, name: &str) -> ListParams {
    ListParams::default().labels(&format!(
        "management.cluster.x-k8s.io/owner-kind={kind},management.cluster.x-k8s.io/owner-namespace={ns},management.cluster.x-k8s.io/owner-name={name}"
    ))
}

/// Names of every object of the kinds the sample releases hold that carry the owner labels of
/// the provider `kind ns/name`, as "Kind/name".
async fn owned(client: &Client, kind: &str, ns: &str, name: &str) -> kube::Result<Vec<String>> {
    let lp = owner_selector(kind, ns, name);
    let mut out = Vec::new();
    macro_rules! collect {
        ($t:ty, $k:literal) => {
            for o in Api::<$t>::all(client.clone()).list(&lp).await? {
                out.push(format!(
                    "{}/{}",
                    $k,
                    o.metadata.name.clone().unwrap_or_default()
                ));
            }
        };
    }
    collect!(Deployment, "Deployment");
    collect!(ConfigMap, "ConfigMap");
    collect!(ServiceAccount, "ServiceAccount");
    collect!(ClusterRole, "ClusterRole");
    collect!(ClusterRoleBinding, "ClusterRoleBinding");
    out.sort();
    Ok(out)
}

fn restart(
    cluster: &TestCluster,
    op: &mut OperatorProcess,
) -> Result<OperatorProcess, Box<dyn std::error::Error>> {
    op.kill();
    Ok(start_operator(cluster, &["--config-retry-seconds", "2"])?)
}

#[tokio::test]
async fn killed_during_upgrade_and_delete_always_converges() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let seed = env_u64("CAPI_KILL_SEED", 20_261_123);
    let runs = env_u64("CAPI_KILL_RUNS", 10);
    let mut rng = Rng(seed);
    eprintln!("kill runs: seed {seed}, {runs} runs per flow");

    cluster.ensure_namespace(CORE_NS)?;
    cluster.ensure_namespace(INFRA_NS)?;
    // One more release than upgrade runs, for the apiserver restart at the end.
    for patch in 0..=runs + 1 {
        core_release(&client, u32::try_from(patch)?).await?;
    }
    release_configmap_from_dir(
        &client,
        INFRA_NS,
        &samples(),
        INFRA_LABEL,
        "v0.2.0",
        "infrastructure-components.yaml",
        &[("provider.cluster.x-k8s.io/name", INFRA_LABEL)],
    )
    .await?;

    let mut operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    apply(
        cluster,
        &provider_yaml("CoreProvider", CORE_NS, "cluster-api", CORE_LABEL, "v0.2.0"),
    )?;
    wait_condition(
        &client,
        ("CoreProvider", CORE_NS, "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", operator.logs()))?;
    // A custom resource of the core provider's CRD must outlive every upgrade.
    apply(
        cluster,
        "apiVersion: core.sample.capi-operator.example/v1beta2\nkind: SampleWidget\nmetadata:\n  name: widget-0\n  namespace: default\nspec: {}\n",
    )?;

    // Upgrades: v0.2.0 → v0.2.1 → … each killed at a random point.
    for patch in 1..=runs {
        let version = format!("v0.2.{patch}");
        let delay = rng.below(1500);
        apply(
            cluster,
            &provider_yaml("CoreProvider", CORE_NS, "cluster-api", CORE_LABEL, &version),
        )?;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        operator = restart(cluster, &mut operator)?;
        let converged = wait_for(T, || async {
            let p = provider(&client, "CoreProvider", CORE_NS, "cluster-api").await?;
            let ready = condition(&p, "Ready")?.get("status")? == "True";
            (ready && p.pointer("/status/installedVersion")? == &Value::from(version.clone()))
                .then_some(())
        })
        .await;
        let context = || format!("upgrade to {version}, killed after {delay} ms (seed {seed})");
        if converged.is_none() {
            return Err(format!("{}: did not converge\n{}", context(), operator.logs()).into());
        }
        let got = owned(&client, "CoreProvider", CORE_NS, "cluster-api").await?;
        let want: Vec<String> = vec![
            "ClusterRole/sample-core-manager-role".into(),
            "ClusterRoleBinding/sample-core-manager-rolebinding".into(),
            format!("ConfigMap/{}", marker(&version)),
            "Deployment/sample-core-controller-manager".into(),
            "ServiceAccount/sample-core-manager".into(),
        ];
        assert_eq!(got, want, "{}", context());
        let widget = cluster.kubectl(&["get", "samplewidgets", "widget-0", "-n", "default"])?;
        assert!(widget.0, "{}: the custom resource is gone", context());
    }

    let version = format!("v0.2.{runs}");
    // Reconfigure: a manager flag changed, killed at a random point.
    for run in 1..=runs {
        let delay = rng.below(1500);
        let context = || format!("reconfigure run {run}, killed after {delay} ms (seed {seed})");
        apply(
            cluster,
            &core_yaml(&version, &format!("  manager:\n    verbosity: {run}\n")),
        )?;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        operator = restart(cluster, &mut operator)?;
        let want = format!("--v={run}");
        wait_for(T, || async {
            let (_, args, _) = core_deployment(&client).await?;
            args.contains(&want).then_some(())
        })
        .await
        .ok_or_else(|| format!("{}: flag not applied\n{}", context(), operator.logs()))?;
        let owned_now = owned(&client, "CoreProvider", CORE_NS, "cluster-api").await?;
        assert_eq!(
            owned_now
                .iter()
                .filter(|o| o.starts_with("Deployment/"))
                .count(),
            1,
            "{}: {owned_now:?}",
            context()
        );
    }
    // Pause and unpause, killed at random points: replicas and the annotation always agree.
    for run in 0..runs {
        let paused = run % 2 == 0;
        let delay = rng.below(1500);
        let context = || format!("pause={paused} run {run}, killed after {delay} ms (seed {seed})");
        apply(
            cluster,
            &core_yaml(
                &version,
                &format!("  paused: {paused}\n  manager:\n    verbosity: {runs}\n"),
            ),
        )?;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        operator = restart(cluster, &mut operator)?;
        wait_for(T, || async {
            let (replicas, _, ann) = core_deployment(&client).await?;
            let ok = if paused {
                replicas == 0 && ann.as_deref() == Some("1")
            } else {
                replicas == 1 && ann.is_none()
            };
            ok.then_some(())
        })
        .await
        .ok_or_else(|| format!("{}: replicas not converged\n{}", context(), operator.logs()))?;
    }
    // Leave it unpaused.
    apply(
        cluster,
        &core_yaml(&version, &format!("  manager:\n    verbosity: {runs}\n")),
    )?;

    // Deletions of an infrastructure provider, each killed at a random point.
    for run in 0..runs {
        let delay = rng.below(1200);
        let context = || format!("delete run {run}, killed after {delay} ms (seed {seed})");
        apply(
            cluster,
            &provider_yaml(
                "InfrastructureProvider",
                INFRA_NS,
                "sample",
                INFRA_LABEL,
                "v0.2.0",
            ),
        )?;
        // Killed during the install too.
        let install_delay = rng.below(1200);
        tokio::time::sleep(Duration::from_millis(install_delay)).await;
        operator = restart(cluster, &mut operator)?;
        wait_condition(
            &client,
            ("InfrastructureProvider", INFRA_NS, "sample"),
            "Ready",
            "True",
            None,
            T,
        )
        .await
        .map_err(|e| {
            format!(
                "{}: install killed after {install_delay} ms: {e}\n{}",
                context(),
                operator.logs()
            )
        })?;
        let installed = owned(&client, "InfrastructureProvider", INFRA_NS, "sample").await?;
        assert_eq!(
            installed
                .iter()
                .filter(|o| o.starts_with("Deployment/"))
                .count(),
            1,
            "{}: {installed:?}",
            context()
        );
        cluster.kubectl_ok(&[
            "delete",
            "infrastructureprovider",
            "sample",
            "-n",
            INFRA_NS,
            "--wait=false",
        ])?;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        operator = restart(cluster, &mut operator)?;
        let gone = wait_for(T, || async {
            provider(&client, "InfrastructureProvider", INFRA_NS, "sample")
                .await
                .is_none()
                .then_some(())
        })
        .await;
        if gone.is_none() {
            return Err(format!(
                "{}: the provider object was not deleted\n{}",
                context(),
                operator.logs()
            )
            .into());
        }
        let left = owned(&client, "InfrastructureProvider", INFRA_NS, "sample").await?;
        assert!(left.is_empty(), "{}: left behind {left:?}", context());
        let crds: BTreeSet<String> = Api::<CustomResourceDefinition>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        assert!(
            crds.contains("samplemachines.infrastructure.sample.capi-operator.example"),
            "{}: the CRD was deleted",
            context()
        );
        assert!(
            Api::<Namespace>::all(client.clone())
                .get_opt(INFRA_NS)
                .await?
                .is_some(),
            "{}: the namespace was deleted",
            context()
        );
    }

    // The core provider was never disturbed by the deletions.
    let p = provider(&client, "CoreProvider", CORE_NS, "cluster-api")
        .await
        .ok_or("core provider gone")?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from(format!("v0.2.{runs}")))
    );

    // The apiserver stopped in the middle of an upgrade and restarted after a while: the
    // operator survives and converges.
    let down = env_u64("CAPI_APISERVER_DOWN_SECONDS", 30);
    let last = format!("v0.2.{}", runs + 1);
    apply(
        cluster,
        &core_yaml(&last, &format!("  manager:\n    verbosity: {runs}\n")),
    )?;
    tokio::time::sleep(Duration::from_millis(rng.below(500))).await;
    cluster.restart_apiserver_after(Duration::from_secs(down))?;
    assert!(
        operator.running(),
        "the operator exited while the apiserver was down\n{}",
        operator.logs()
    );
    wait_for(T, || async {
        let p = provider(&client, "CoreProvider", CORE_NS, "cluster-api").await?;
        let ready = condition(&p, "Ready")?.get("status")? == "True";
        (ready && p.pointer("/status/installedVersion")? == &Value::from(last.clone()))
            .then_some(())
    })
    .await
    .ok_or_else(|| {
        format!(
            "no convergence after the apiserver was down {down} s\n{}",
            operator.logs()
        )
    })?;
    assert!(operator.running(), "the operator survived");
    operator.kill();
    Ok(())
}
