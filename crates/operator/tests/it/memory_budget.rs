//! The release memory budget against hostile releases, on a local control plane: the operator
//! runs with the budget a 256 MiB container gets (`--release-memory-mib 192`), and a small
//! gzipped release in a ConfigMap that parses to millions of nodes, then one whose
//! substitution grows a few hundred bytes to tens of megabytes (`support::hostile`, shared
//! with the same check under the kubelet's limit in `node::operator_image`), each end in a
//! render error condition, while the operator process keeps running (the same process: no
//! restart) and its peak resident memory stays under the 256 MiB it would be killed at.

use crate::support;

use std::time::Duration;

use capi_operator_api::conditions::reason::RENDER_FAILED;
use capi_test_support::{OperatorProcess, private_cluster, wait_for};
use support::*;

const T: Duration = Duration::from_secs(90);
const NS: &str = "budget-core";
const LABEL: &str = "budget-core";
const LIMIT: u64 = 256 * 1024 * 1024;
const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 0, minor: 2, contract: v1beta1}\n- {major: 0, minor: 3, contract: v1beta1}\n";

fn core(version: &str) -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: {NS}\nspec:\n  version: {version}\n  secretName: vars\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {LABEL}\n"
    )
}

/// The peak resident memory of process `pid` (VmHWM), in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[tokio::test]
async fn hostile_releases_end_in_a_render_error_within_the_memory_limit() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    cluster.ensure_namespace(NS)?;
    // Sized to take far more than 256 MiB rendered without the budget (support/hostile.rs).
    hostile::serve(
        &client,
        NS,
        LABEL,
        "v0.2.0",
        METADATA,
        &hostile::node_dense(),
    )
    .await?;
    hostile::serve(&client, NS, LABEL, "v0.3.0", METADATA, hostile::EXPANSION).await?;
    hostile::variables_secret(&client, NS, "vars").await?;

    let mut operator = start_operator(
        cluster,
        &["--release-memory-mib", "192", "--config-retry-seconds", "2"],
    )?;
    let pid = operator.pid().ok_or("no operator pid")?;
    let log =
        |e: Box<dyn std::error::Error>, operator: &OperatorProcess| -> Box<dyn std::error::Error> {
            format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
        };
    let key = ("CoreProvider", NS, "cluster-api");
    let mut previous = String::new();
    for (version, says) in [
        (
            "v0.2.0",
            "more than the operator's whole release memory budget",
        ),
        ("v0.3.0", "exceeds"),
    ] {
        apply(cluster, &core(version))?;
        // A render error other than the previous version's.
        let seen = previous.clone();
        let message = wait_for(T, || async {
            let p = provider(&client, key.0, key.1, key.2).await?;
            let c = condition(&p, "ProviderInstalled")?;
            let message = condition_message(&p, "ProviderInstalled");
            let ours =
                c.get("reason")? == RENDER_FAILED && c.get("status")? == "False" && message != seen;
            ours.then_some(message)
        })
        .await
        .ok_or_else(|| log(format!("{version}: no render error").into(), &operator))?;
        eprintln!("{version}: {message}");
        assert!(operator.running(), "the operator exited at {version}");
        assert_eq!(operator.pid(), Some(pid), "the operator restarted");
        let peak = peak_rss(pid).ok_or("no VmHWM")?;
        eprintln!("{version}: operator peak RSS {} MiB", peak / (1024 * 1024));
        assert!(
            peak < LIMIT,
            "{version}: peak RSS {} MiB, a 256 MiB container would have been killed",
            peak / (1024 * 1024)
        );
        assert!(message.contains(says), "{version}: {message}");
        previous = message;
    }
    operator.kill();
    Ok(())
}
