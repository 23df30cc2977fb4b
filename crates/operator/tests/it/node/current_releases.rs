//! The Cluster API line users run today, v1.14, from its release as Cluster API publishes it
//! (assembled from the module's own `config/` by `e2e/scripts/build-providers.sh`): the operator installs its core, kubeadm bootstrap and kubeadm control-plane
//! providers onto the real node and each becomes Ready with its real v1.14 manager running
//! — the managers start on the command line the operator renders for that release.

use crate::support;

use std::time::Duration;

use support::{real::*, *};

const VERSION: &str = "v1.14.2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v1_14_release_assembled_from_its_module_installs_and_becomes_ready() -> TestResult {
    let test = "the_v1_14_release_assembled_from_its_module_installs_and_becomes_ready";
    let parts = real_node_parts()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = real_node(test)?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    install_cert_manager(cluster, &client, &parts)?;
    load_real_releases(cluster, &client, &parts.releases, &[VERSION]).await?;
    let operator = start_operator(cluster, &[])?;
    apply_real(cluster, VERSION, |_| String::new())?;
    for (kind, ns, name, ..) in REAL_PROVIDERS {
        wait_condition(
            &client,
            (kind, ns, name),
            "Ready",
            "True",
            None,
            Duration::from_secs(300),
        )
        .await
        .map_err(|e| format!("{e}\n--- operator log ---\n{}", operator.logs()))?;
        let managers = ready_managers(&client, ns).await;
        assert!(
            managers.len() == 1 && managers[0].1.ends_with(&format!(":{VERSION}")),
            "{kind}: one ready {VERSION} manager expected: {managers:?}"
        );
    }
    Ok(())
}
