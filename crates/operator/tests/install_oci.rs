//! End-to-end: a provider fetched from a real OCI registry (Debian's `docker-registry`, started
//! here on a free port with plain HTTP): the newest tag is resolved into spec.version, the
//! release installs and becomes Ready, and a tagged reference installs that tag.

mod support;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use capi_components::source::oci::{OciConfig, OciCredentials, OciReference, push_artifact};
use capi_test_support::{private_cluster, serial};
use serde_json::Value;
use support::*;

/// A registry child process, killed on drop.
struct Registry {
    child: Child,
    host: String,
    _dir: PathBuf,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

async fn start_registry() -> Result<Registry, Box<dyn std::error::Error>> {
    let bin = std::env::var_os("CAPI_DOCKER_REGISTRY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/docker-registry"));
    if !bin.exists() {
        return Err(format!(
            "{} is missing: install Debian's docker-registry package (e2e/scripts/deps.sh does)",
            bin.display()
        )
        .into());
    }
    let dir = std::env::temp_dir().join(format!("capi-op-registry-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let host = format!("127.0.0.1:{port}");
    let config = dir.join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n  secret: capi-op-test\n",
            dir.join("data").display()
        ),
    )?;
    let log = std::fs::File::create(dir.join("registry.log"))?;
    let child = Command::new(&bin)
        .arg("serve")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let reg = Registry {
        child,
        host,
        _dir: dir,
    };
    for _ in 0..100 {
        if std::net::TcpStream::connect(&reg.host).is_ok() {
            return Ok(reg);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("the registry on {} did not start", reg.host).into())
}

async fn push(reg: &Registry, repo: &str, dir: &Path, version: &str) -> TestResult {
    let reference = OciReference::parse(&format!("http://{}/{repo}:{version}", reg.host))?;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir.join(version))? {
        let entry = entry?;
        files.push((
            entry.file_name().to_string_lossy().into_owned(),
            std::fs::read(entry.path())?,
        ));
    }
    push_artifact(
        &reference,
        &files,
        &OciCredentials::anonymous(),
        &OciConfig::default(),
    )
    .await?;
    Ok(())
}

/// A CoreProvider fetching from `repo` of the registry, at `version` (or the newest tag).
fn core(reg: &Registry, repo: &str, version: Option<&str>) -> String {
    let version = version
        .map(|v| format!("  version: {v}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: sample-core-system\nspec:\n{version}  fetchConfig:\n    oci: http://{}/{repo}\n",
        reg.host
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_installs_from_an_oci_registry() -> TestResult {
    let _serial = serial().lock().await;
    let reg = start_registry().await?;
    for v in ["v0.1.0", "v0.2.0"] {
        push(&reg, "capi/sample-core", &samples().join("sample-core"), v).await?;
    }
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    cluster.ensure_namespace("sample-core-system")?;
    let client = cluster.client().await?;
    let mut operator = start_operator(cluster, &[])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\noperator log:\n{}", operator.logs()).into()
    };

    // No version: the newest tag is resolved and written back.
    apply(cluster, &core(&reg, "capi/sample-core", None))?;
    let p = wait_condition(
        &client,
        ("CoreProvider", "sample-core-system", "cluster-api"),
        "Ready",
        "True",
        None,
        Duration::from_secs(120),
    )
    .await
    .map_err(log)?;
    assert_eq!(p.pointer("/spec/version"), Some(&Value::from("v0.2.0")));
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.2.0"))
    );
    assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));

    // A repository that does not exist: a clear reason, and v0.2.0 keeps running.
    apply(
        cluster,
        &core(&reg, "capi/no-such-provider", Some("v0.2.0")),
    )?;
    let p = wait_condition(
        &client,
        ("CoreProvider", "sample-core-system", "cluster-api"),
        "ProviderInstalled",
        "False",
        Some("ComponentsFetchError"),
        Duration::from_secs(60),
    )
    .await
    .map_err(log)?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.2.0"))
    );
    operator.kill();
    Ok(())
}
