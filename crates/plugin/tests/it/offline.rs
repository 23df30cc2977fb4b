//! The commands that need no cluster: `describe`, `verify`, `publish` and `preload
//! --output-file FILE`, from a local repository, from a local GitHub-compatible server, and
//! from the real Cluster API releases build-providers.sh assembles.

use crate::support;

use std::collections::BTreeMap;

use capi_fake_remotes::FakeServer;
use capi_release_sources::{
    SourceError,
    configmap::{ConfigMapData, ConfigMapReader, ConfigMapSource, from_configmap},
    fetch_release,
};
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::Value;
use support::*;

#[test]
fn describe_lists_variables_defaults_and_images() -> TestResult {
    let repo = sample_repository()?;
    let r = plugin_ok(
        None,
        &[
            "describe",
            "--repository",
            &repo.s(),
            "--core",
            "cluster-api",
            "--infrastructure",
            "sample:v0.1.0",
        ],
    )?;
    let out = &r.stdout;
    assert!(
        out.contains("CoreProvider cluster-api v0.2.0 (contract v1beta2)"),
        "{out}"
    );
    assert!(
        out.contains("InfrastructureProvider sample v0.1.0 (contract v1beta1)"),
        "{out}"
    );
    assert!(out.contains("namespace: sample-infra-system"), "{out}");
    assert!(
        out.contains("SAMPLE_GREETING") && out.contains("default \"hello\""),
        "{out}"
    );
    assert!(out.contains("registry.k8s.io/pause:3.10"), "{out}");
    let json = plugin_ok(
        None,
        &[
            "describe",
            "--repository",
            &repo.s(),
            "--bootstrap",
            "sample:v0.1.0",
            "-o",
            "json",
        ],
    )?;
    let v: Value = serde_json::from_str(&json.stdout)?;
    assert_eq!(v[0]["kind"], "BootstrapProvider");
    assert_eq!(v[0]["contract"], "v1beta1");
    assert!(v[0]["variables"].as_array().is_some_and(|a| !a.is_empty()));
    // An unknown version is an error naming it.
    let bad = plugin_env(
        None,
        &[
            "describe",
            "--repository",
            &repo.s(),
            "--core",
            "cluster-api:v9.9.9",
        ],
        &[],
    )?;
    assert!(!bad.ok && bad.stderr.contains("v9.9.9"), "{}", bad.all());
    Ok(())
}

const CONFORMING: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: capf-system}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: fooclusters.infrastructure.foo.example
  labels: {cluster.x-k8s.io/v1beta2: v1beta2}
spec:
  group: infrastructure.foo.example
  scope: Namespaced
  names: {kind: FooCluster, plural: fooclusters, singular: foocluster, listKind: FooClusterList}
  versions:
  - name: v1beta2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              controlPlaneEndpoint:
                type: object
                properties:
                  host: {type: string}
                  port: {type: integer, format: int32}
          status:
            type: object
            properties:
              initialization:
                type: object
                properties:
                  provisioned: {type: boolean}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: fooclustertemplates.infrastructure.foo.example
  labels: {cluster.x-k8s.io/v1beta2: v1beta2}
spec:
  group: infrastructure.foo.example
  scope: Namespaced
  names: {kind: FooClusterTemplate, plural: fooclustertemplates, singular: fooclustertemplate, listKind: FooClusterTemplateList}
  versions:
  - name: v1beta2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              template:
                type: object
                properties:
                  spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: foomachines.infrastructure.foo.example
  labels: {cluster.x-k8s.io/v1beta2: v1beta2}
spec:
  group: infrastructure.foo.example
  scope: Namespaced
  names: {kind: FooMachine, plural: foomachines, singular: foomachine, listKind: FooMachineList}
  versions:
  - name: v1beta2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              providerID: {type: string}
          status:
            type: object
            properties:
              initialization:
                type: object
                properties:
                  provisioned: {type: boolean}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: foomachinetemplates.infrastructure.foo.example
  labels: {cluster.x-k8s.io/v1beta2: v1beta2}
spec:
  group: infrastructure.foo.example
  scope: Namespaced
  names: {kind: FooMachineTemplate, plural: foomachinetemplates, singular: foomachinetemplate, listKind: FooMachineTemplateList}
  versions:
  - name: v1beta2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              template:
                type: object
                properties:
                  spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: capf-aggregated
  labels: {cluster.x-k8s.io/aggregate-to-manager: "true"}
rules:
- apiGroups: [infrastructure.foo.example]
  resources: [fooclusters]
  verbs: [create, delete, get, list, patch, update, watch]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: capf-controller-manager, namespace: capf-system}
spec:
  selector: {matchLabels: {app: capf}}
  template:
    metadata: {labels: {app: capf}}
    spec:
      containers:
      - {name: manager, image: "registry.example/capf:${CAPF_TAG:=v1.0.0}"}
"#;

#[test]
fn verify_reports_contract_findings() -> TestResult {
    let dir = TempDir::new("capi-plugin-verify")?;
    let components = dir.0.join("infrastructure-components.yaml");
    let metadata = dir.0.join("metadata.yaml");
    std::fs::write(&components, CONFORMING)?;
    std::fs::write(
        &metadata,
        "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 1, minor: 0, contract: v1beta2}\n",
    )?;
    let ok = plugin_ok(
        None,
        &[
            "verify",
            "--components",
            &components.to_string_lossy(),
            "--metadata",
            &metadata.to_string_lossy(),
            "--version",
            "v1.0.0",
        ],
    )?;
    assert!(ok.stdout.contains("0 errors"), "{}", ok.all());
    assert!(
        ok.stdout.contains("OK      infra-cluster-endpoint"),
        "{}",
        ok.all()
    );

    // The same release under the v1beta1 contract lacks status.ready and its CRD label.
    let v1 = plugin_env(
        None,
        &[
            "verify",
            "--components",
            &components.to_string_lossy(),
            "--contract",
            "v1beta1",
            "-q",
        ],
        &[],
    )?;
    assert!(!v1.ok, "{}", v1.all());
    assert!(
        v1.stdout.contains("ERROR   infra-cluster-status"),
        "{}",
        v1.all()
    );
    assert!(
        v1.stdout
            .contains("lacks the label cluster.x-k8s.io/v1beta1"),
        "{}",
        v1.all()
    );

    // A CRD name that CalculateCRDName would not produce.
    std::fs::write(
        &components,
        CONFORMING.replace("name: fooclustertemplates.", "name: fooclustertemplate."),
    )?;
    let bad = plugin_env(
        None,
        &[
            "verify",
            "--components",
            &components.to_string_lossy(),
            "--contract",
            "v1beta2",
            "-q",
        ],
        &[],
    )?;
    assert!(!bad.ok, "{}", bad.all());
    assert!(
        bad.stdout.contains("fooclustertemplate.infrastructure.foo.example should be fooclustertemplates.infrastructure.foo.example"),
        "{}",
        bad.all()
    );

    // The sample infrastructure provider, the first one a newcomer meets, passes every check.
    let repo = sample_repository()?;
    let sample = plugin_env(
        None,
        &[
            "verify",
            "--repository",
            &repo.s(),
            "--infrastructure",
            "sample",
        ],
        &[],
    )?;
    assert!(sample.ok, "{}", sample.all());
    assert!(
        sample
            .stdout
            .contains("OK      infra-cluster: InfraCluster kind SampleCluster"),
        "{}",
        sample.all()
    );
    assert!(
        !sample.stdout.contains("ERROR") && !sample.stdout.contains("WARNING"),
        "{}",
        sample.all()
    );
    Ok(())
}

#[test]
fn verify_accepts_the_real_kubeadm_and_core_releases() -> TestResult {
    let repo = capi_test_support::releases()?;
    let r = plugin_ok(
        None,
        &[
            "verify",
            "--repository",
            &repo.to_string_lossy(),
            "--core",
            "cluster-api:v1.12.0",
            "--bootstrap",
            "kubeadm:v1.11.0",
            "--control-plane",
            "kubeadm:v1.12.0",
        ],
    )?;
    assert_eq!(
        r.stdout.matches("0 errors, 0 warnings").count(),
        3,
        "{}",
        r.all()
    );
    Ok(())
}

struct Fixed(Vec<ConfigMapData>);

impl ConfigMapReader for Fixed {
    async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
        Ok(self.0.clone())
    }
}

fn configmaps(yaml: &str) -> Result<Vec<ConfigMap>, Box<dyn std::error::Error>> {
    let docs = capi_yaml::parse_documents(yaml, &capi_yaml::Limits::default())?;
    let mut out = Vec::new();
    for d in docs {
        if d["kind"] == "ConfigMap" {
            out.push(serde_json::from_value(d)?);
        }
    }
    Ok(out)
}

#[tokio::test]
async fn preload_writes_configmaps_that_read_back() -> TestResult {
    let repo = sample_repository()?;
    let out = TempDir::new("capi-plugin-preload")?;
    let file = out.0.join("releases.yaml");
    let r = plugin_ok(
        None,
        &[
            "preload",
            "--repository",
            &repo.s(),
            "--core",
            "cluster-api:v0.1.0,cluster-api:v0.2.0",
            "--infrastructure",
            "sample:my-infra:v0.2.0",
            "--output-file",
            &file.to_string_lossy(),
            "--images",
        ],
    )?;
    assert_eq!(r.stdout.trim(), "registry.k8s.io/pause:3.10", "{}", r.all());
    let text = std::fs::read_to_string(&file)?;
    let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())?;
    let namespaces: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "Namespace")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(namespaces, ["sample-core-system", "my-infra"]);
    let cms = configmaps(&text)?;
    assert_eq!(cms.len(), 3);
    let core: Vec<ConfigMapData> = cms
        .iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some("sample-core-system"))
        .map(from_configmap)
        .collect();
    let labels: &BTreeMap<String, String> = &core[0].labels;
    assert_eq!(
        labels
            .get("provider.cluster.x-k8s.io/name")
            .map(String::as_str),
        Some("cluster-api")
    );
    assert_eq!(
        labels
            .get("provider.cluster.x-k8s.io/type")
            .map(String::as_str),
        Some("core")
    );
    let src = ConfigMapSource::new(Fixed(core));
    let latest = fetch_release(&src, None, "core-components.yaml").await?;
    assert_eq!(latest.version, "v0.2.0");
    assert_eq!(
        latest.components,
        std::fs::read_to_string(samples().join("sample-core/v0.2.0/core-components.yaml"))?
    );
    Ok(())
}

#[tokio::test]
async fn preload_compresses_real_releases() -> TestResult {
    let repo = capi_test_support::releases()?;
    let r = plugin_ok(
        None,
        &[
            "preload",
            "--repository",
            &repo.to_string_lossy(),
            "--core",
            "cluster-api:v1.12.0",
        ],
    )?;
    let cms = configmaps(&r.stdout)?;
    assert_eq!(cms.len(), 1);
    let cm = &cms[0];
    assert_eq!(cm.metadata.namespace.as_deref(), Some("capi-system"));
    assert_eq!(
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("provider.cluster.x-k8s.io/compressed"))
            .map(String::as_str),
        Some("true")
    );
    let size: usize = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(_, v)| v.0.len())
        .sum::<usize>()
        + cm.data
            .iter()
            .flatten()
            .map(|(_, v)| v.len())
            .sum::<usize>();
    assert!(
        size < 1024 * 1024,
        "a ConfigMap must stay under 1 MiB, got {size}"
    );
    let src = ConfigMapSource::new(Fixed(vec![from_configmap(cm)]));
    let release = fetch_release(&src, Some("v1.12.0"), "core-components.yaml").await?;
    assert_eq!(
        release.components,
        std::fs::read_to_string(repo.join("cluster-api/v1.12.0/core-components.yaml"))?
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_from_a_github_compatible_server() -> TestResult {
    let repo = sample_repository()?;
    let github = FakeServer::start(
        repo.0.clone(),
        &[
            ("kubernetes-sigs/cluster-api", &["cluster-api"]),
            ("example/sample-infra", &["infrastructure-sample"]),
        ],
    )
    .await?;
    let api = github.url().to_string();
    let r = tokio::task::spawn_blocking(move || {
        plugin_ok(
            None,
            &[
                "describe", "--github-api-url", &api, "--core", "cluster-api",
                "--infrastructure",
                "sample:v0.1.0@https://github.com/example/sample-infra/releases/latest/infrastructure-components.yaml",
            ],
        )
        .map_err(|e| e.to_string())
    })
    .await??;
    assert!(
        r.stdout.contains("CoreProvider cluster-api v0.2.0"),
        "{}",
        r.all()
    );
    assert!(
        r.stdout
            .contains("source:    GitHub repository kubernetes-sigs/cluster-api"),
        "{}",
        r.all()
    );
    assert!(
        r.stdout.contains("InfrastructureProvider sample v0.1.0"),
        "{}",
        r.all()
    );
    assert!(github.count("/repos/example/sample-infra/releases") > 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preload_from_a_gitlab_package() -> TestResult {
    let repo = sample_repository()?;
    let gitlab = FakeServer::start(
        repo.0.clone(),
        &[("group/sample", &["infrastructure-sample"])],
    )
    .await?;
    let url = gitlab.gitlab_file_url(
        "group/sample",
        "infrastructure-sample",
        "v0.1.0",
        "infrastructure-components.yaml",
    );
    let source = format!("sample@{url}");
    let r = tokio::task::spawn_blocking(move || {
        plugin_ok(None, &["preload", "--infrastructure", &source]).map_err(|e| e.to_string())
    })
    .await??;
    let cms = configmaps(&r.stdout)?;
    assert_eq!(cms.len(), 1, "{}", r.all());
    assert_eq!(
        cms[0].metadata.name.as_deref(),
        Some("release-infrastructure-sample-v0.1.0")
    );
    assert!(r.stderr.contains("from GitLab package"), "{}", r.all());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preload_from_an_oci_registry() -> TestResult {
    use capi_release_sources::oci::{OciConfig, OciCredentials, OciReference, push_artifact};
    let reg = capi_test_support::registry::PlainRegistry::start().await?;
    for v in ["v0.1.0", "v0.2.0"] {
        let dir = samples().join("sample-bootstrap").join(v);
        let mut files = Vec::new();
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            files.push((
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path())?,
            ));
        }
        let reference =
            OciReference::parse(&format!("http://{}/capi/bootstrap-sample:{v}", reg.host))?;
        push_artifact(
            &reference,
            &files,
            &OciCredentials::anonymous(),
            &OciConfig::default(),
        )
        .await?;
    }
    let source = format!("sample@oci+http://{}/capi/bootstrap-sample", reg.host);
    let r = tokio::task::spawn_blocking(move || {
        plugin_ok(
            None,
            &[
                "preload",
                "--bootstrap",
                &source,
                "--images",
                "--output-file",
                "/dev/null",
            ],
        )
        .map_err(|e| e.to_string())
    })
    .await??;
    assert_eq!(r.stdout.trim(), "registry.k8s.io/pause:3.10", "{}", r.all());
    assert!(
        r.stderr
            .contains("BootstrapProvider sample v0.2.0 from OCI repository"),
        "the newest tag is the release:\n{}",
        r.all()
    );
    Ok(())
}

/// A kubeconfig whose cluster is `server`.
fn kubeconfig_for(dir: &TempDir, server: &str) -> std::io::Result<String> {
    let path = dir.0.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\"}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )?;
    Ok(path.to_string_lossy().into_owned())
}

/// The plugin's Kubernetes API requests name it and its version in User-Agent.
// Several threads: the plugin runs as a blocking child process while the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_requests_name_the_plugin() -> TestResult {
    let dir = TempDir::new("capi-plugin-agent")?;
    // Answers 404 to everything: only the requests matter.
    let server = FakeServer::start(dir.0.clone(), &[]).await?;
    let kubeconfig = kubeconfig_for(&dir, server.url())?;
    let r = plugin_env(None, &["--kubeconfig", &kubeconfig, "upgrade", "plan"], &[])?;
    assert!(!r.ok, "{}", r.all());
    let requests = server.requests();
    assert!(
        !requests.is_empty(),
        "no request reached the server: {}",
        r.all()
    );
    let want = format!("kubectl-capi_providers/{}", env!("CARGO_PKG_VERSION"));
    for req in requests {
        assert_eq!(req.user_agent.as_deref(), Some(want.as_str()), "{req:?}");
    }
    Ok(())
}

/// `preload` reads a release repository on a private HTTPS server (basic authentication, a
/// private CA given as a file in HTTP_CA_BUNDLE), resolving `latest` from its listing, and
/// stores the release as published.
#[test]
fn preload_from_a_private_https_repository() -> TestResult {
    let work = TempDir::new("capi-https-repo")?;
    let certs = work.0.join("certs");
    let root = capi_test_support::workspace_root();
    let made = std::process::Command::new(root.join("e2e/scripts/make-certs.sh"))
        .arg(&certs)
        .status()?;
    assert!(made.success(), "make-certs.sh failed");
    let www = work.0.join("www/capi/infra");
    for v in ["v0.1.0", "v0.2.0"] {
        let from = samples().join("sample-infrastructure").join(v);
        std::fs::create_dir_all(www.join(v))?;
        for f in ["infrastructure-components.yaml", "metadata.yaml"] {
            std::fs::copy(from.join(f), www.join(v).join(f))?;
        }
    }
    let mut server = std::process::Command::new("python3")
        .arg(root.join("e2e/scripts/https-repo.py"))
        .arg(work.0.join("www"))
        .arg(certs.join("apiserver.crt"))
        .arg(certs.join("apiserver.key"))
        .arg("mirror:s3cret")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut line = String::new();
    let stdout = server.stdout.take().ok_or("no stdout")?;
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
    let source = format!("sample@https://127.0.0.1:{}/capi/infra", line.trim());
    let ca = certs.join("ca.crt").to_string_lossy().into_owned();
    let env = [
        ("HTTP_USERNAME", "mirror"),
        ("HTTP_PASSWORD", "s3cret"),
        ("HTTP_CA_BUNDLE", ca.as_str()),
    ];
    let r = plugin_ok_env(None, &["preload", "--infrastructure", &source], &env);
    let denied = plugin_env(
        None,
        &["preload", "--infrastructure", &source],
        &[("HTTP_CA_BUNDLE", ca.as_str())],
    );
    let _ = server.kill();
    let _ = server.wait();
    let r = r?;
    let cms = configmaps(&r.stdout)?;
    assert_eq!(cms.len(), 1, "{}", r.all());
    let components = cms[0]
        .data
        .as_ref()
        .and_then(|d| d.get("components"))
        .ok_or("no components")?;
    let published = std::fs::read_to_string(www.join("v0.2.0/infrastructure-components.yaml"))?;
    assert_eq!(
        components, &published,
        "not stored as published (or not latest)"
    );
    let denied = denied?;
    assert!(
        !denied.ok && denied.all().contains("denied"),
        "{}",
        denied.all()
    );
    Ok(())
}

/// `preload --images` lists a release's images as named and where the mirror moves them, and
/// `--copy` fills the mirror: two local registries, the image of the sample releases moved
/// into the first, copied into the second per the mirror ConfigMap (an `all` entry and a
/// per-component one), and read back from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preload_images_lists_and_copies_into_a_mirror() -> TestResult {
    use capi_operator_api::ProviderType;
    use capi_release_sources::{
        ReleaseSource,
        oci::{OciConfig, OciCredentials, OciReference, OciSource, push_artifact},
    };
    let (src, dst) = (
        capi_test_support::registry::PlainRegistry::start().await?,
        capi_test_support::registry::PlainRegistry::start().await?,
    );
    let image = format!("{}/capi/pause:3.10", src.host);
    let repo = sample_repository()?;
    for f in [
        "cluster-api/v0.1.0/core-components.yaml",
        "infrastructure-sample/v0.1.0/infrastructure-components.yaml",
    ] {
        let path = repo.0.join(f);
        let text = std::fs::read_to_string(&path)?.replace("registry.k8s.io/pause:3.10", &image);
        std::fs::write(&path, text)?;
    }
    let anon = OciCredentials::anonymous();
    let files = vec![("pause.txt".to_string(), b"a pause image".to_vec())];
    let pushed = push_artifact(
        &OciReference::parse(&format!("http://{image}"))?,
        &files,
        &anon,
        &OciConfig::default(),
    )
    .await?;
    let dir = TempDir::new("capi-plugin-mirror")?;
    let config = dir.0.join("mirror.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: image-mirror}}\ndata:\n  images: |\n    all: {{repository: {d}/mirror}}\n    cluster-api: {{repository: {d}/core}}\n",
            d = dst.host
        ),
    )?;
    let base = [
        "preload",
        "--repository",
        &repo.s(),
        "--core",
        "cluster-api:v0.1.0",
        "--infrastructure",
        "sample:v0.1.0",
        "--output-file",
        "/dev/null",
        "--image-mirror-config",
        &config.to_string_lossy(),
    ]
    .map(String::from);
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra.iter().map(std::string::ToString::to_string));
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            plugin_ok(None, &args).map_err(|e| e.to_string())
        })
    };
    let listed = run(&["--images"]).await??;
    assert_eq!(listed.stdout.trim(), image, "{}", listed.all());
    let mirrored = run(&["--images=mirrored"]).await??;
    assert_eq!(
        mirrored.stdout.lines().collect::<Vec<_>>(),
        [
            format!("{}/core/pause:3.10", dst.host),
            format!("{}/mirror/pause:3.10", dst.host)
        ],
        "{}",
        mirrored.all()
    );
    let plain = [
        "--plain-http-registry",
        &src.host,
        "--plain-http-registry",
        &dst.host,
    ];
    let copied = run(&[&["--images", "--copy"][..], &plain[..]].concat()).await??;
    assert_eq!(copied.stdout.lines().count(), 2, "{}", copied.all());
    for repo in ["core", "mirror"] {
        let r = OciReference::parse(&format!("http://{}/{repo}/pause:3.10", dst.host))?;
        let s = OciSource::for_provider(
            &r,
            ProviderType::Core,
            "pause",
            anon.clone(),
            OciConfig::default(),
        )?;
        assert_eq!(s.fetch_file("3.10", "pause.txt").await?, b"a pause image");
        assert!(
            copied
                .stdout
                .contains(&format!("{repo}/pause:3.10 {pushed}")),
            "{}",
            copied.all()
        );
    }
    Ok(())
}

/// The operator manifest `init` installs (built into the plugin from manifests/) is what
/// `kubectl kustomize manifests/` renders, object for object: the two cannot drift apart.
#[test]
fn the_built_in_operator_manifest_is_the_kustomization() -> TestResult {
    let kubectl = std::env::var_os("CAPI_KUBECTL").unwrap_or_else(|| "kubectl".into());
    let manifests = capi_test_support::workspace_root().join("manifests");
    let out = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(&manifests)
        .output()
        .map_err(|e| {
            format!("running {kubectl:?} kustomize (set CAPI_KUBECTL=$(e2e/scripts/build.sh)/kubectl): {e}")
        })?;
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects = |text: &str| -> Result<BTreeMap<String, Value>, Box<dyn std::error::Error>> {
        let docs = capi_yaml::parse_documents(text, &capi_yaml::Limits::default())?;
        Ok(docs
            .into_iter()
            .filter(serde_json::Value::is_object)
            .map(|d| {
                let key = format!(
                    "{} {}/{}",
                    d["kind"].as_str().unwrap_or_default(),
                    d["metadata"]["namespace"].as_str().unwrap_or_default(),
                    d["metadata"]["name"].as_str().unwrap_or_default()
                );
                (key, same_numbers(d))
            })
            .collect())
    };
    let rendered = objects(&String::from_utf8(out.stdout)?)?;
    let built_in = objects(include_str!(concat!(env!("OUT_DIR"), "/operator.yaml")))?;
    assert_eq!(
        built_in.keys().collect::<Vec<_>>(),
        rendered.keys().collect::<Vec<_>>()
    );
    for (key, want) in &rendered {
        assert_eq!(built_in.get(key), Some(want), "{key} differs");
    }
    assert!(
        rendered.len() > 20,
        "{} objects rendered: {:?}",
        rendered.len(),
        rendered.keys()
    );
    Ok(())
}

/// `v` with whole floats as integers: the generated CRDs write `minimum: 1.0` where kustomize
/// prints `1`, the same number.
fn same_numbers(v: Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(same_numbers).collect()),
        Value::Object(m) => {
            Value::Object(m.into_iter().map(|(k, v)| (k, same_numbers(v))).collect())
        }
        other => other,
    }
}

/// `publish` pushes release directories in the layout `fetchConfig.oci` reads: the OCI source
/// the operator and `preload` use finds both versions (the tag from the directory's name, or
/// given) and reads the release back; a directory without metadata.yaml is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_pushes_a_release_that_fetch_config_oci_reads() -> TestResult {
    let reg = capi_test_support::registry::PlainRegistry::start().await?;
    let repo = format!("oci+http://{}/capi/bootstrap-sample", reg.host);
    let v1 = samples().join("sample-bootstrap").join("v0.1.0");
    let v2 = samples().join("sample-bootstrap").join("v0.2.0");
    let empty = TempDir::new("capi-plugin-publish")?;
    let (repo2, v1s, v2s, empty_s) = (repo.clone(), v1, v2, empty.s());
    let (first, second, refused) = tokio::task::spawn_blocking(move || {
        let first = plugin_env(
            None,
            &["publish", &v1s.to_string_lossy(), "--to", &repo2],
            &[],
        );
        let tagged = format!("{repo2}:v0.2.0");
        let second = plugin_env(
            None,
            &["publish", &v2s.to_string_lossy(), "--to", &tagged],
            &[],
        );
        let refused = plugin_env(None, &["publish", &empty_s, "--to", &tagged], &[]);
        (first, second, refused)
    })
    .await?;
    let (first, second, refused) = (first?, second?, refused?);
    assert!(
        first.ok && first.stdout.contains(":v0.1.0 sha256:"),
        "{}",
        first.all()
    );
    assert!(second.ok, "{}", second.all());
    assert!(
        !refused.ok && refused.stderr.contains("has no metadata.yaml"),
        "{}",
        refused.all()
    );
    let source = format!("sample@{repo}");
    let out = TempDir::new("capi-plugin-publish-out")?;
    let file = out.0.join("releases.yaml");
    let file_s = file.to_string_lossy().into_owned();
    let r = tokio::task::spawn_blocking(move || {
        plugin_env(
            None,
            &["preload", "--bootstrap", &source, "--output-file", &file_s],
            &[],
        )
    })
    .await??;
    assert!(
        r.ok && r
            .stderr
            .contains("BootstrapProvider sample v0.2.0 from OCI repository"),
        "the newest tag is the release:\n{}",
        r.all()
    );
    let written = std::fs::read_to_string(&file)?;
    // The release read back: the ConfigMap of v0.2.0 holds its components.
    assert!(
        written.contains("release-bootstrap-sample-v0.2.0"),
        "{written}"
    );
    assert!(
        written.contains("sample-bootstrap-controller-manager"),
        "{written}"
    );
    Ok(())
}
