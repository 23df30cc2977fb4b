//! Whose credentials go where: a provider object in the cluster names a release host over TLS
//! (a private CA, a local GitHub-compatible server behind it that records every request's
//! `Authorization` header). Every plugin command that fetches that provider's releases — `render
//! NAME`, `diff NAME`, `upgrade plan`, `upgrade apply --dry-run` — runs with canary credentials
//! in its environment (GITHUB_TOKEN, GITLAB_ACCESS_TOKEN, HTTP_*, OCI_*): the server is asked
//! and no request carries a canary. The provider's own token, from its `spec.secretName`, does
//! reach its host (the check can fail), and a host the caller names on the command line gets the
//! caller's token.

use crate::support;

use capi_fake_remotes::{FakeServer, ReleaseTree, tls::TlsFront};
use capi_test_support::{TestCluster, private_cluster};
use support::*;

const NS: &str = "creds-canary";
const CANARY: &str = "canary-from-the-callers-environment";
const OWN: &str = "the-providers-own-token";

/// The caller's credentials: each one a canary.
fn canaries(ca: &str) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = [
        "GITHUB_TOKEN",
        "GITLAB_ACCESS_TOKEN",
        "HTTP_USERNAME",
        "HTTP_PASSWORD",
        "HTTP_TOKEN",
        "OCI_USERNAME",
        "OCI_PASSWORD",
        "OCI_ACCESS_TOKEN",
    ]
    .iter()
    .map(|k| (*k, format!("{CANARY}-{k}")))
    .collect();
    // Trust, not a credential: the private CA of the provider's host.
    env.push(("HTTP_CA_BUNDLE", ca.to_string()));
    env
}

/// A release tree with two versions of the provider `widget`.
fn releases() -> Result<ReleaseTree, Box<dyn std::error::Error>> {
    let tree = ReleaseTree::new()?;
    let meta = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 0\n  minor: 1\n  contract: v1beta1\n- major: 0\n  minor: 2\n  contract: v1beta1\n";
    for v in ["v0.1.0", "v0.2.0"] {
        tree.add("w", v, "metadata.yaml", meta)?;
        tree.add(
            "w",
            v,
            "infrastructure-components.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: widget-system\n",
        )?;
    }
    Ok(tree)
}

/// The provider object: its release URL on the TLS host; `secret` names its variables Secret.
fn provider(port: u16, secret: bool) -> String {
    let config = if secret {
        "  secretName: widget-variables\n".to_string()
    } else {
        String::new()
    };
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: widget\n  namespace: {NS}\nspec:\n  version: v0.1.0\n{config}  fetchConfig:\n    url: https://127.0.0.1:{port}/acme/widget/releases/latest/infrastructure-components.yaml\n"
    )
}

/// Applies `yaml` with kubectl.
fn apply(cluster: &TestCluster, yaml: &str) -> TestResult {
    let dir = TempDir::new("capi-plugin-creds")?;
    let file = dir.0.join("object.yaml");
    std::fs::write(&file, yaml)?;
    cluster.kubectl_ok(&["apply", "-f", &file.to_string_lossy()])?;
    Ok(())
}

/// Runs the plugin off the async runtime (the fake server answers on it meanwhile).
async fn plugin(
    cluster: Option<&'static TestCluster>,
    args: &[&str],
    env: &[(String, String)],
) -> Result<Run, Box<dyn std::error::Error>> {
    let args: Vec<String> = args.iter().map(std::string::ToString::to_string).collect();
    let env = env.to_vec();
    Ok(tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        plugin_env(cluster, &args, &env)
    })
    .await??)
}

/// The Authorization headers the server received, besides none.
fn authorizations(fake: &FakeServer) -> Vec<String> {
    fake.requests()
        .into_iter()
        .filter_map(|r| r.authorization)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_credentials_never_reach_a_host_a_provider_names() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace(NS)?;
    let tree = releases()?;
    let fake = FakeServer::start(tree.path(), &[("acme/widget", &["w"])]).await?;
    let front = TlsFront::start(fake.url().trim_start_matches("http://")).await?;
    let env: Vec<(String, String)> = canaries(&front.ca_file().to_string_lossy())
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();

    apply(cluster, &provider(front.port(), false))?;
    // The installed version, as the operator would have written it: upgrade plans read it.
    cluster.kubectl_ok(&[
        "patch",
        "infrastructureprovider",
        "-n",
        NS,
        "widget",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"installedVersion":"v0.1.0","contract":"v1beta1"}}"#,
    ])?;
    let commands: [&[&str]; 4] = [
        &["render", "widget", "-n", NS],
        &["diff", "widget", "-n", NS],
        &["upgrade", "plan"],
        &["upgrade", "apply", "--dry-run"],
    ];
    for args in commands {
        let before = fake.requests().len();
        let run = plugin(Some(cluster), args, &env).await?;
        let asked = fake.requests().len() - before;
        assert!(
            asked > 0,
            "{args:?} never asked the provider's host:\n{}",
            run.all()
        );
        let leaked: Vec<String> = authorizations(&fake)
            .into_iter()
            .filter(|a| a.contains(CANARY))
            .collect();
        assert!(
            leaked.is_empty(),
            "{args:?} sent the caller's credentials to the provider's host: {leaked:?}"
        );
        assert!(!run.all().contains(CANARY), "{args:?} printed a credential");
    }

    // The provider's own token, from its Secret, does go to its host.
    apply(
        cluster,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: widget-variables\n  namespace: {NS}\nstringData:\n  GITHUB_TOKEN: {OWN}\n"
        ),
    )?;
    apply(cluster, &provider(front.port(), true))?;
    let run = plugin(Some(cluster), &["render", "widget", "-n", NS], &env).await?;
    assert!(run.ok, "{}", run.all());
    let seen = authorizations(&fake);
    assert!(
        seen.iter().any(|a| a.contains(OWN)),
        "the provider's own token never reached its host: {seen:?}"
    );
    assert!(!seen.iter().any(|a| a.contains(CANARY)), "{seen:?}");

    // A host the caller names on the command line gets the caller's token.
    let url = format!(
        "widget@https://127.0.0.1:{}/acme/widget/releases/v0.1.0/infrastructure-components.yaml",
        front.port()
    );
    let run = plugin(None, &["describe", "--infrastructure", &url], &env).await?;
    assert!(run.ok, "{}", run.all());
    let seen = authorizations(&fake);
    assert!(
        seen.iter()
            .any(|a| a.contains(&format!("{CANARY}-GITHUB_TOKEN"))),
        "the caller's token did not reach the host the caller named: {seen:?}"
    );
    Ok(())
}
