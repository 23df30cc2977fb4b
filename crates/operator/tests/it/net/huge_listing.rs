//! A release server listing 100,000 releases, on a local control plane: the operator (leader
//! elected, /metrics on) resolves the latest version of a provider whose source is a local
//! GitHub-compatible server answering one page of 100,000 releases. The provider gets a clear
//! condition naming the bound, the event loop never stalls past 100 ms on the listing
//! (`capi_operator_event_loop_stall_max_seconds`, read before and after), and the operator
//! keeps its lease and its process.

use crate::support;

use std::time::Duration;

use capi_fake_remotes::FakeServer;
use capi_test_support::{OperatorProcess, private_cluster, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use support::*;

const T: Duration = Duration::from_secs(120);
const NS: &str = "listing-core";
const REPO: &str = "acme/widget";
const LEASE: &str = "listing-operator";
const TAGS: usize = 100_000;
/// The longest the listing may hold the event loop: the bound.
const STALL_BOUND: f64 = 0.1;

fn core() -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: widget\n  namespace: {NS}\nspec:\n  fetchConfig:\n    url: https://github.com/{REPO}/releases/latest/core-components.yaml\n"
    )
}

fn stall_max(port: u16) -> Option<f64> {
    let (_, body) = get(port, "/metrics").ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix("capi_operator_event_loop_stall_max_seconds "))
        .and_then(|v| v.trim().parse().ok())
}

async fn lease(client: &kube::Client) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), "default")
        .get_opt(LEASE)
        .await
        .ok()?
}

fn holder(l: &Option<Lease>) -> Option<String> {
    l.as_ref()?.spec.as_ref()?.holder_identity.clone()
}

fn renewed(l: &Option<Lease>) -> Option<String> {
    let t = l.as_ref()?.spec.as_ref()?.renew_time.as_ref()?;
    Some(format!("{:?}", t.0))
}

fn start(
    cluster: &capi_test_support::TestCluster,
    github: &FakeServer,
    port: u16,
) -> std::io::Result<OperatorProcess> {
    let addr = format!("127.0.0.1:{port}");
    start_operator(
        cluster,
        &[
            "--github-api-url",
            github.url(),
            "--metrics-bind-address",
            &addr,
            "--leader-elect",
            "--leader-election-namespace",
            "default",
            "--leader-election-id",
            LEASE,
            "--leader-election-lease-seconds",
            "4",
            "--leader-election-renew-deadline-seconds",
            "3",
            "--leader-election-retry-seconds",
            "1",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_100000_releases_is_refused_without_stalling_the_operator() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace(NS)?;
    let client = cluster.client().await?;
    let dir = std::env::temp_dir().join(format!("capi-huge-listing-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let github = FakeServer::start(dir.clone(), &[(REPO, &["cluster-api"])]).await?;
    for i in 0..TAGS {
        github
            .knobs()
            .set_release(REPO, &format!("v0.{i}.0"), false, false);
    }
    github.knobs().page_size(TAGS);
    let port = free_port()?;
    let mut op = start(cluster, &github, port)?;
    // Leading and idle: the stalls of starting up are behind.
    let before = wait_for(T, || async {
        let l = lease(&client).await;
        holder(&l).filter(|h| !h.is_empty())?;
        stall_max(port)
    })
    .await
    .ok_or_else(|| format!("the operator never led\n{}", op.logs()))?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = stall_max(port).unwrap_or(before);
    let leader = holder(&lease(&client).await);

    apply(cluster, &core())?;
    let p = wait_condition(
        &client,
        ("CoreProvider", NS, "widget"),
        "PreflightCheckPassed",
        "False",
        Some("ComponentsFetchError"),
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", op.logs()))?;
    let message = condition_message(&p, "PreflightCheckPassed");
    assert!(
        message.contains("larger than") || message.contains("more than"),
        "the condition must name the bound: {message}"
    );
    assert!(
        github.count("/releases?") >= 1,
        "the listing was never asked"
    );
    // A few more lease renewals, then: same leader, renewed, same process, no long stall.
    let renew_before = renewed(&lease(&client).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let l = lease(&client).await;
    assert_eq!(holder(&l), leader, "the lease changed hands");
    assert_ne!(renewed(&l), renew_before, "the lease was not renewed");
    assert!(op.running(), "the operator exited\n{}", op.logs());
    let after = stall_max(port).ok_or("no stall metric")?;
    eprintln!("condition: {message}\nlongest stall: {before:.3} s before, {after:.3} s after");
    assert!(
        after <= before.max(STALL_BOUND),
        "the listing stalled the event loop {after:.3} s (before it: {before:.3} s)"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
