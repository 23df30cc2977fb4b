//! `render` and `diff` against what the real operator installed on a private local control
//! plane: the core sample installed by the operator from ConfigMaps, with additional manifests
//! holding a Secret made from a variable. Diffed against itself nothing differs (exit 0, no
//! output): what the plugin renders is what the operator applied. A new version and a changed
//! variable show their changes (exit 1), a Secret's value never. `render` and `diff` of a
//! provider read from a GitHub-compatible server work the same way.

use crate::support;

use std::time::Duration;

use capi_fake_remotes::FakeServer;
use capi_test_support::{private_cluster, wait_for};
use support::*;

const T: Duration = Duration::from_secs(120);
const NS: &str = "sample-core-system";

/// Additional manifests: a Secret made from the provider's variable SAMPLE_TOKEN, and a
/// Deployment reading it (the operator stamps it with the hash of what it reads: a diff of
/// itself must render the same stamp, a changed token must show its roll).
const EXTRA: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: core-extra, namespace: sample-core-system}
data:
  manifests: |
    apiVersion: v1
    kind: Secret
    metadata: {name: sample-token, namespace: sample-core-system}
    stringData: {token: \"${SAMPLE_TOKEN}\"}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: sample-token-reader, namespace: sample-core-system}
    spec:
      selector: {matchLabels: {app: sample-token-reader}}
      template:
        metadata: {labels: {app: sample-token-reader}}
        spec:
          containers:
          - name: reader
            image: registry.example/reader:v1
            env:
            - name: TOKEN
              valueFrom: {secretKeyRef: {name: sample-token, key: token}}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_against_the_operators_install() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let start = std::time::Instant::now();
    let step = |what: &str| eprintln!("[{:>5.1}s] {what}", start.elapsed().as_secs_f64());
    let cluster = private_cluster()?;
    let repo = sample_repository()?;
    let r = repo.s();
    let files = TempDir::new("capi-plugin-diff")?;
    let vars = files.0.join("vars.env");
    std::fs::write(&vars, "SAMPLE_TOKEN=first-token-value\n")?;
    plugin_ok(
        Some(cluster),
        &[
            "init",
            "--skip-cert-manager",
            "--repository",
            &r,
            "--core",
            "cluster-api:v0.1.0",
            "--variables",
            &vars.to_string_lossy(),
            "--no-default-providers",
        ],
    )?;
    let extra = files.0.join("extra.yaml");
    std::fs::write(&extra, EXTRA)?;
    cluster.kubectl_ok(&["apply", "-f", &extra.to_string_lossy()])?;
    cluster.kubectl_ok(&[
        "patch",
        "coreproviders.management.cluster.x-k8s.io",
        "-n",
        NS,
        "cluster-api",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"additionalManifests":{"name":"core-extra"}}}"#,
    ])?;
    step("init done");
    {
        let operator = start_operator(cluster, &[])?;
        let installed = wait_for(T, || async {
            let ready = provider(cluster, "CoreProvider", NS, "cluster-api")
                .is_some_and(|p| ready_at(&p, "v0.1.0"));
            let secret = cluster.kubectl_ok(&["get", "secret", "-n", NS, "sample-token"]);
            (ready && secret.is_ok()).then_some(())
        })
        .await;
        if installed.is_none() {
            return Err(format!("not installed:\n{}", operator.logs()).into());
        }
    } // The operator stops here: nothing changes the cluster behind the diffs below.
    step("installed by the operator");

    // Against itself: nothing differs, nothing is printed.
    let diff = |args: &[&str]| plugin_env(Some(cluster), args, &[]);
    let same = diff(&["diff", "cluster-api"])?;
    assert_eq!((same.code, same.stdout.as_str()), (0, ""), "{}", same.all());
    // render reads the release from the ConfigMaps, the variables from the Secret; a rendered
    // Secret's values are masked unless --show-secrets.
    let rendered = plugin_ok(Some(cluster), &["render", "cluster-api"])?;
    rendered.expect_out(&["kind: Deployment", "name: sample-token", "(redacted)"])?;
    assert!(
        !rendered.stdout.contains("first-token-value"),
        "render printed a Secret value:\n{}",
        rendered.stdout
    );
    let shown = plugin_ok(Some(cluster), &["render", "cluster-api", "--show-secrets"])?;
    shown.expect_out(&["name: sample-token", "first-token-value"])?;
    step("diff of itself and render");

    // A new version: an object no longer released is pruned, a CRD serves and stores a new
    // version, the inventory entry follows.
    let preload = [
        "preload",
        "--apply",
        "--repository",
        &r,
        "--core",
        "cluster-api:v0.2.0",
    ];
    plugin_ok(Some(cluster), &preload)?;
    let up = diff(&["diff", "cluster-api", "--version", "v0.2.0"])?;
    assert_eq!(up.code, 1, "{}", up.all());
    up.expect_out(&[
        "CoreProvider sample-core-system/cluster-api: v0.1.0 -> v0.2.0",
        "- removed  ConfigMap sample-core-system/sample-core-legacy-settings",
        "CRD versions: CustomResourceDefinition samplewidgets.core.sample.capi-operator.example: served v1beta1 -> v1beta1,v1beta2; stored v1beta1 -> v1beta2",
        "    -version: v0.1.0\n    +version: v0.2.0",
    ])?;

    // Changed variables: the Deployment's environment changes (its Pods restart); the
    // Secret's key is named, neither of its values printed.
    let patch =
        r#"{"stringData":{"SAMPLE_TOKEN":"second-token-value","SAMPLE_GREETING":"bonjour"}}"#;
    let secret = "core-cluster-api-variables";
    cluster.kubectl_ok(&[
        "patch", "secret", "-n", NS, secret, "--type", "merge", "-p", patch,
    ])?;
    let changed = diff(&["diff", "cluster-api"])?;
    assert_eq!(changed.code, 1, "{}", changed.all());
    changed.expect_out(&[
        "~ changed  Secret sample-core-system/sample-token",
        "Secret keys (values not shown): token (changed)",
        "Restart (pod template changes): Deployment sample-core-system/sample-core-controller-manager",
        "+          value: bonjour",
    ])?;
    // The reader rolls too: the hash of the token it reads changes.
    let restarts = changed.stdout.lines().find(|l| l.starts_with("Restart ("));
    if !restarts.is_some_and(|l| l.contains("Deployment sample-core-system/sample-token-reader")) {
        return Err(format!("the token's reader does not restart:\n{}", changed.all()).into());
    }
    let values = ["first-token-value", "second-token-value"];
    let base64 = ["Zmlyc3QtdG9rZW4tdmFsdWU=", "c2Vjb25kLXRva2VuLXZhbHVl"];
    if let Some(v) = values
        .iter()
        .chain(&base64)
        .find(|v| changed.all().contains(**v))
    {
        return Err(format!("{v} printed:\n{}", changed.all()).into());
    }
    step("new version and changed variables");

    // A provider whose release comes from a GitHub-compatible server, not installed yet.
    let github = FakeServer::start(
        repo.0.clone(),
        &[("example/sample-infra", &["infrastructure-sample"])],
    )
    .await?;
    let file = files.0.join("infra.yaml");
    std::fs::write(
        &file,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: InfrastructureProvider
metadata: {name: sample, namespace: sample-infra-system}
spec:
  version: v0.1.0
  fetchConfig:
    url: https://github.com/example/sample-infra/releases/latest/infrastructure-components.yaml
",
    )?;
    let (api, file) = (
        github.url().to_string(),
        file.to_string_lossy().into_owned(),
    );
    let remote = tokio::task::spawn_blocking(move || {
        let run = |cmd: &str| {
            let args = [cmd, "-f", &file, "--github-api-url", &api];
            plugin_env(Some(cluster), &args, &[]).map_err(|e| e.to_string())
        };
        Ok::<_, String>((run("render")?, run("diff")?))
    })
    .await??;
    let (render, diff) = remote;
    assert_eq!(
        (render.code, diff.code),
        (0, 1),
        "{}\n{}",
        render.all(),
        diff.all()
    );
    render.expect_out(&["name: sample-infra-controller-manager"])?;
    diff.expect_out(&[
        "+ added    Deployment sample-infra-system/sample-infra-controller-manager",
    ])?;
    assert!(github.count("/repos/example/sample-infra/releases") > 0);
    step("render and diff from a GitHub-compatible server");
    Ok(())
}
