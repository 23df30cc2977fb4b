//! End-to-end on a private local control plane: `preload --cert-manager` fetches cert-manager's
//! manifest from its GitHub release (a local GitHub-compatible server) at clusterctl's pinned
//! version and stores it in a ConfigMap; `init --preloaded` installs it from there when the
//! cluster lacks cert-manager and waits until its Deployments are available; a second `init`
//! finds it; `upgrade plan` reports it. The manifest here is a small stand-in of the real one
//! (a CRD, a namespace, a Deployment kwok runs); the real cert-manager v1.11.5, with its
//! webhook, is installed by `init` in the operator's real-provider tests on the real node.

use crate::support;

use capi_fake_remotes::FakeServer;
use capi_test_support::private_cluster;
use support::*;

const MANIFEST: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: cert-manager
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.cert-manager.io
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cert-manager
  namespace: cert-manager
  labels: {app.kubernetes.io/name: cert-manager, app.kubernetes.io/version: v1.21.1}
spec:
  replicas: 1
  selector: {matchLabels: {app: cert-manager}}
  template:
    metadata: {labels: {app: cert-manager}}
    spec:
      containers:
      - {name: controller, image: "quay.io/jetstack/cert-manager-controller:v1.21.1"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_installs_cert_manager_from_a_preloaded_release() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let repo = TempDir::new("capi-cert-manager-release")?;
    let release = repo.0.join("cert-manager/v1.21.1");
    std::fs::create_dir_all(&release)?;
    std::fs::write(release.join("cert-manager.yaml"), MANIFEST)?;
    let github = FakeServer::start(
        repo.0.clone(),
        &[("cert-manager/cert-manager", &["cert-manager"])],
    )
    .await?;
    let api = github.url().to_string();
    let cluster2 = cluster;
    let run = move |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            plugin_ok(Some(cluster2), &args).map_err(|e| e.to_string())
        })
    };
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();

    let before = run(words("upgrade plan")).await??;
    assert!(
        before.stdout.contains("cert-manager: not installed"),
        "{}",
        before.all()
    );

    let mut preload = words("preload --cert-manager --apply --github-api-url");
    preload.push(api.clone());
    let pre = run(preload).await??;
    assert!(
        pre.stderr.contains("cert-manager v1.21.1 from GitHub release cert-manager/cert-manager v1.21.1 -> ConfigMap cert-manager/cert-manager-v1.21.1"),
        "{}",
        pre.all()
    );
    assert!(
        github.count("/repos/cert-manager/cert-manager/releases") > 0,
        "GitHub was not asked"
    );
    let fetched = github.requests().len();

    let init = run(words(
        "init --skip-operator --cert-manager-only --preloaded --cert-manager-timeout 120s",
    ))
    .await??;
    assert!(
        init.stderr.contains(
            "cert-manager v1.21.1: installing from ConfigMap cert-manager/cert-manager-v1.21.1"
        ),
        "{}",
        init.all()
    );
    assert!(
        init.stderr.contains("cert-manager v1.21.1: ready"),
        "{}",
        init.all()
    );
    assert_eq!(
        github.requests().len(),
        fetched,
        "init --preloaded went to GitHub"
    );
    cluster.kubectl_ok(&["get", "crd", "certificates.cert-manager.io"])?;

    let again = run(words(
        "init --skip-operator --cert-manager-only --preloaded",
    ))
    .await??;
    assert!(
        again
            .stderr
            .contains("cert-manager v1.21.1 found: not installed again"),
        "{}",
        again.all()
    );
    let plan = run(words("upgrade plan")).await??;
    assert!(
        plan.stdout
            .contains("cert-manager: v1.21.1 installed, up to date"),
        "{}",
        plan.all()
    );

    let bad = plugin_env(
        Some(cluster),
        &[
            "init",
            "--skip-operator",
            "--cert-manager-only",
            "--skip-cert-manager",
        ],
        &[],
    )?;
    assert!(
        !bad.ok && bad.all().contains("cannot be used with"),
        "{}",
        bad.all()
    );
    Ok(())
}
