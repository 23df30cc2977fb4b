//! The commands clusterctl users script, on a private local control plane with the operator
//! running, from nothing: `init` (the operator from the plugin's built-in manifest, then the
//! sample providers), `upgrade apply` of chosen providers (`--core NAME:VERSION -i
//! NAME:VERSION`, refusals) and `delete` (by name with clusterctl's flags, refusals, `--all` with
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

/// A v0.1.1 of the core and infrastructure samples (contract v1beta1, as v0.1.0).
fn patch_releases(repo: &TempDir) -> std::io::Result<()> {
    for label in ["cluster-api", "infrastructure-sample"] {
        copy_files(
            &repo.0.join(label).join("v0.1.0"),
            &repo.0.join(label).join("v0.1.1"),
        )?;
    }
    Ok(())
}

/// `upgrade apply` of chosen providers: refusals first, then the core and infrastructure
/// providers to v0.1.1 while the bootstrap provider stays at v0.1.0.
fn upgrade_chosen(cluster: &TestCluster, repo: &TempDir) -> TestResult {
    patch_releases(repo)?;
    let r = repo.s();
    let base = ["upgrade", "apply", "--repository", &r];
    let refused = |more: &[&str], why: &str| -> TestResult {
        let run = plugin_env(Some(cluster), &[&base[..], more].concat(), &[])?;
        assert!(!run.ok && run.stderr.contains(why), "{why}:\n{}", run.all());
        Ok(())
    };
    refused(
        &["-i", "docker:v0.1.1"],
        "InfrastructureProvider docker is not installed",
    )?;
    refused(
        &["--core", "cluster-api:v0.2.0"],
        "a contract change moves every provider",
    )?;
    refused(&["--core", "cluster-api:v0.1.9"], "no release v0.1.9")?;
    refused(&["--core", "cluster-api"], "give the version")?;
    plugin_ok(
        Some(cluster),
        &[
            &base[..],
            &[
                "--core",
                "cluster-api:v0.1.1",
                "-i",
                "sample:v0.1.1",
                "--wait",
                "--timeout",
                "120s",
            ],
        ]
        .concat(),
    )?;
    for (kind, ns, name) in [PROVIDERS[0], PROVIDERS[2]] {
        let p = provider(cluster, kind, ns, name).ok_or("gone")?;
        assert!(
            ready_at(&p, "v0.1.1"),
            "{kind} {ns}/{name}: {}",
            p["status"]
        );
    }
    let (kind, ns, name) = PROVIDERS[1];
    let p = provider(cluster, kind, ns, name).ok_or("gone")?;
    assert!(
        ready_at(&p, "v0.1.0"),
        "{kind} {ns}/{name}: {}",
        p["status"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_upgrade_chosen_and_delete_as_clusterctl() -> TestResult {
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

    upgrade_chosen(cluster, &repo).map_err(log)?;

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
