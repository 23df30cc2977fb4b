//! The commands clusterctl users script, on a private local control plane with the operator
//! running, from nothing: `init` (the operator from the plugin's built-in manifest, then the
//! sample providers) and `delete` (by name with clusterctl's flags, refusals, `--all` with
//! `--include-crd --include-namespace`, waiting until the providers are gone).

use crate::support;

use std::time::Duration;

use capi_test_support::{TestCluster, private_cluster, wait_for};
use support::*;

const T: Duration = Duration::from_secs(120);

const PROVIDERS: [(&str, &str, &str); 3] = [
    ("CoreProvider", "sample-core-system", "cluster-api"),
    ("BootstrapProvider", "sample-bootstrap-system", "sample"),
    ("InfrastructureProvider", "sample-infra-system", "sample"),
];

async fn all_ready(cluster: &TestCluster) -> Result<(), String> {
    for (kind, ns, name) in PROVIDERS {
        wait_for(T, || async move {
            provider(cluster, kind, ns, name)
                .filter(|p| ready_at(p, "v0.1.0"))
                .map(|_| ())
        })
        .await
        .ok_or_else(|| format!("{kind} {ns}/{name} not Ready at v0.1.0"))?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_from_nothing_then_delete_as_clusterctl() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    let repo = sample_repository()?;
    let r = repo.s();
    plugin_ok(
        Some(cluster),
        &[
            "init",
            "--skip-cert-manager",
            "--repository",
            &r,
            "--core",
            "cluster-api:v0.1.0",
            "-b",
            "sample:v0.1.0",
            "-i",
            "sample:v0.1.0",
            "--no-default-providers",
            "--operator-timeout",
            "120s",
        ],
    )?;
    let operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };
    all_ready(cluster).await.map_err(|e| log(e.into()))?;

    // Refusals change nothing.
    let unknown = plugin_env(Some(cluster), &["delete", "--bootstrap", "kubeadm"], &[])?;
    assert!(!unknown.ok, "{}", unknown.all());
    assert!(
        unknown
            .stderr
            .contains("BootstrapProvider kubeadm is not installed"),
        "{}",
        unknown.all()
    );
    let both = plugin_env(Some(cluster), &["delete", "--all", "-i", "sample"], &[])?;
    assert!(!both.ok, "{}", both.all());

    // By name: the components go, the CRDs and the namespace stay (deletionPolicy Block).
    let one = plugin_ok(
        Some(cluster),
        &["delete", "--infrastructure", "sample", "--timeout", "120s"],
    )
    .map_err(log)?;
    assert!(
        one.stdout.contains(
            "deleting InfrastructureProvider sample-infra-system/sample (deletionPolicy Block)"
        ),
        "{}",
        one.all()
    );
    assert!(
        provider(
            cluster,
            "InfrastructureProvider",
            "sample-infra-system",
            "sample"
        )
        .is_none()
    );
    cluster.kubectl_ok(&["get", "namespace", "sample-infra-system"])?;

    // Everything, the core provider last, with its CRDs (deletionPolicy Purge).
    let all = plugin_ok(
        Some(cluster),
        &[
            "delete",
            "--all",
            "--include-crd",
            "--include-namespace",
            "--timeout",
            "120s",
        ],
    )
    .map_err(log)?;
    let text = &all.stdout;
    let bootstrap = text
        .find("deleting BootstrapProvider sample-bootstrap-system/sample (deletionPolicy Purge)");
    let core =
        text.find("deleting CoreProvider sample-core-system/cluster-api (deletionPolicy Purge)");
    assert!(
        matches!((bootstrap, core), (Some(b), Some(c)) if b < c),
        "the core provider is not deleted last:\n{}",
        all.all()
    );
    for (kind, ns, name) in PROVIDERS {
        assert!(
            provider(cluster, kind, ns, name).is_none(),
            "{kind} {ns}/{name} is left"
        );
    }
    let (crd_left, _, _) = cluster.kubectl(&[
        "get",
        "crd",
        "samplewidgets.core.sample.capi-operator.example",
    ])?;
    assert!(
        !crd_left,
        "the core provider's CRD was not purged\n{}",
        all.all()
    );
    Ok(())
}
