//! Test support: a client for the project's local control plane.
//!
//! Integration tests call [`cluster`] to get the [`TestCluster`]. When `CAPI_TEST_KUBECONFIG`
//! names a kubeconfig (as `make test` does after `make cluster-up`), that cluster is used;
//! otherwise the first call starts a private cluster with `e2e/scripts/cluster-up.sh`, shared by
//! every test of this test binary and stopped automatically when the binary exits. The ordinary
//! `KUBECONFIG` is ignored on purpose, so tests never touch a real cluster by accident.
//!
//! Each test gets its own namespace from [`TestCluster::namespace`]. Tests that need a cluster
//! of their own ([`private_cluster`] and the others) take [`isolated`] first: see the `area`
//! module for how one test binary keeps the isolation its modules had as binaries of their own.

mod area;
pub mod go_examples;
pub mod registry;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{
        OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Config,
    api::{DeleteParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// Errors of the test support.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster could not be started.
    #[error("starting the local control plane failed: {0}")]
    Start(String),
    /// The kubeconfig could not be read.
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Its path.
        path: PathBuf,
        /// Why.
        source: kube::config::KubeconfigError,
    },
    /// A kubectl command failed.
    #[error("{0}")]
    Kubectl(String),
    /// A Kubernetes API call failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// Something the test needs is not there (the message says how to get it): the test
    /// fails rather than passing without its work.
    #[error("{0}")]
    Missing(String),
}

/// A running local control plane.
#[derive(Debug)]
pub struct TestCluster {
    kubeconfig: PathBuf,
}

static CLUSTER: OnceLock<Result<TestCluster, String>> = OnceLock::new();
static NS_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A provider spec fragment for the real Cluster API releases whose managers run on kwok's
/// pods, which serve nothing: the releases' webhooks could never answer there. The patches
/// empty the webhook configurations and turn CRD conversion off, as an admin would on such a
/// cluster. Only for tests about the operator's own behaviour on kwok pods; tests where the
/// providers' behaviour matters run the real managers on the real node ([`real_node_cluster`])
/// with no patches. Unindented (`patches:` at column 0).
pub const NEUTRALIZING_PATCHES: &str = r#"patches:
- target: {group: admissionregistration.k8s.io, kind: ValidatingWebhookConfiguration}
  patch: '[{"op": "remove", "path": "/webhooks"}]'
- target: {group: admissionregistration.k8s.io, kind: MutatingWebhookConfiguration}
  patch: '[{"op": "remove", "path": "/webhooks"}]'
- target: {group: apiextensions.k8s.io, kind: CustomResourceDefinition}
  patch: '{"spec": {"conversion": {"strategy": "None", "webhook": null}}}'
"#;

/// `text` with every line indented by `n` spaces.
pub fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// Root of the workspace (two levels above the crate under test). Read from the
/// `CARGO_MANIFEST_DIR` cargo sets when it runs a test, before the one this crate was built
/// with: build outputs are shared between clones (~/.cache), and cargo may reuse this library
/// from a build in another clone, whose path it would otherwise carry.
pub fn workspace_root() -> PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let root = crate_dir.join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The `shared/` directory beside the project (`CAPI_SHARED_DIR` overrides it), if present.
///
/// A fresh clone has none: only the tests that compare what the project builds with the
/// published files read it. Those tests are `#[ignore]`d with [`NEEDS_PUBLISHED`] as their
/// reason, and the test runners include them when this directory exists; a test that needs
/// Cluster API releases otherwise uses [`releases`].
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CAPI_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared"));
    dir.is_dir().then_some(dir)
}

/// The `#[ignore]` reason of the tests that compare with files published outside the project
/// (`../shared` or `CAPI_SHARED_DIR`): `make test` includes them when that directory exists.
pub const NEEDS_PUBLISHED: &str =
    "compares with the published files of ../shared (CAPI_SHARED_DIR); make test runs it when they are present";

/// The published files of [`shared_dir`], for a test marked with [`NEEDS_PUBLISHED`]: an error
/// (the test fails) when they are absent, since such a test runs only when asked for.
pub fn published() -> Result<PathBuf, Error> {
    shared_dir().ok_or_else(|| {
        Error::Missing(
            "../shared (or CAPI_SHARED_DIR) is absent: this test compares with the published \
             files and runs only where they are"
                .into(),
        )
    })
}

/// The Cluster API releases the project assembles itself (`e2e/scripts/build-providers.sh`,
/// run by `make providers`, `make unit` and `make integration`): `<provider>/<version>/` with
/// clusterctl's file names, for cluster-api, bootstrap-kubeadm and control-plane-kubeadm of
/// every version the real node runs (v1.10.10 to v1.14.2, v1.11.0 and v1.12.0 among them).
/// An error (the test fails, naming the command) when the script has not run.
pub fn releases() -> Result<PathBuf, Error> {
    assembled_releases()
        .filter(|dir| dir.join("cluster-api/v1.12.0/core-components.yaml").is_file())
        .ok_or_else(|| {
            Error::Missing(
                "the assembled Cluster API releases are not built: run `make providers` \
                 (e2e/scripts/build-providers.sh), or point CAPI_PROVIDER_IMAGES at its output"
                    .into(),
            )
        })
}

/// The manifest of cert-manager v1.11.5 that `e2e/scripts/build-providers.sh` renders for the
/// real node (the images the project builds); an error when the script has not run.
pub fn cert_manager_manifest() -> Result<PathBuf, Error> {
    provider_images()
        .and_then(|images| Some(images.parent()?.join("cert-manager-v1.11.5/cert-manager.yaml")))
        .filter(|path| path.is_file())
        .ok_or_else(|| {
            Error::Missing(
                "cert-manager's manifest is not built: run `make providers` \
                 (e2e/scripts/build-providers.sh)"
                    .into(),
            )
        })
}

/// Only the CustomResourceDefinitions of [`cert_manager_manifest`], written once beside it
/// (`crds.yaml`): tests where a Cluster API release needs cert-manager's kinds to exist but
/// no cert-manager runs.
pub fn cert_manager_crds() -> Result<PathBuf, Error> {
    let manifest = cert_manager_manifest()?;
    let out = manifest.with_file_name("crds.yaml");
    if out.is_file() {
        return Ok(out);
    }
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| Error::Missing(format!("reading {}: {e}", manifest.display())))?;
    let crds: Vec<&str> = text
        .split("\n---")
        .filter(|doc| {
            doc.lines()
                .any(|l| l.trim_end() == "kind: CustomResourceDefinition")
        })
        .collect();
    if crds.is_empty() {
        return Err(Error::Missing(format!(
            "{} holds no CustomResourceDefinition",
            manifest.display()
        )));
    }
    // Written under a temporary name and renamed: parallel tests may race to write it.
    let tmp = out.with_extension(format!("yaml.{}", std::process::id()));
    let body = crds.join("\n---");
    std::fs::write(&tmp, body.trim_start_matches('\n'))
        .and_then(|()| std::fs::rename(&tmp, &out))
        .map_err(|e| Error::Missing(format!("writing {}: {e}", out.display())))?;
    Ok(out)
}

/// The cluster for this test binary, started on first use.
pub fn cluster() -> Result<&'static TestCluster, Error> {
    CLUSTER
        .get_or_init(start_or_attach)
        .as_ref()
        .map_err(|e| Error::Start(e.clone()))
}

/// A cluster of the current area's own (see [`isolated`]), started on first use even when
/// `CAPI_TEST_KUBECONFIG` names a shared one: tests that run the operator (which watches the
/// whole cluster) must not meet another area's operator. Tests of one area share it.
pub fn private_cluster() -> Result<&'static TestCluster, Error> {
    area::cluster(area::Kind::Private, start_private)
}

/// A second private cluster of the current area, for tests between two management clusters
/// (e.g. `clusterctl move`). Started on first use.
pub fn second_private_cluster() -> Result<&'static TestCluster, Error> {
    area::cluster(area::Kind::Second, start_private)
}

/// The `clusterctl` of Cluster API `version`, built beside the real managers by
/// `e2e/scripts/build-providers.sh`; `None` when it is not built.
pub fn clusterctl(version: &str) -> Option<PathBuf> {
    let path = provider_images()?
        .parent()?
        .join(format!("cluster-api-{version}/clusterctl"));
    path.is_file().then_some(path)
}

/// The images file of the real provider managers built by `e2e/scripts/build-providers.sh`:
/// `CAPI_PROVIDER_IMAGES` (set by `make integration`), else the script's default location when
/// it has been run. `None` when the managers are not built.
pub fn provider_images() -> Option<PathBuf> {
    let path = std::env::var_os("CAPI_PROVIDER_IMAGES")
        .map(PathBuf::from)
        .or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            Some(cache.join("capi-provider-operator/bin/providers/images.yaml"))
        })?;
    path.is_file().then_some(path)
}

/// The Cluster API releases `e2e/scripts/build-providers.sh` assembles from each module's own
/// `config/` (`releases/<provider>/<version>/`, beside its images file, the layout of
/// `../shared/testdata/providers`). `None` when the script has not run.
pub fn assembled_releases() -> Option<PathBuf> {
    let dir = provider_images()?.parent()?.join("releases");
    dir.is_dir().then_some(dir)
}

/// Name of the Node `cluster-up.sh --real-node` registers (`e2e/scripts/real-node-up.sh`): a
/// kubelet with containerd and runc, tainted and labelled `capi-provider-operator.dev/real-node`.
pub const REAL_NODE_NAME: &str = "real-node";

/// A private cluster of the current area with a real node (`cluster-up.sh --real-node`), whose
/// containerd pulls the images of `make images` through its registry mirror. `None` (after
/// saying why on stderr) without root or without those images. Started on first use.
pub fn real_node_cluster(test: &str) -> Option<Result<&'static TestCluster, Error>> {
    real_node_of(area::Kind::RealNode, test)
}

/// A second private cluster of the current area with a real node of its own (its own network
/// namespace, pod range and containerd), for tests between two management clusters that both
/// run real managers (moving a management cluster). As [`real_node_cluster`] otherwise.
pub fn second_real_node_cluster(test: &str) -> Option<Result<&'static TestCluster, Error>> {
    real_node_of(area::Kind::SecondRealNode, test)
}

fn real_node_of(kind: area::Kind, test: &str) -> Option<Result<&'static TestCluster, Error>> {
    // The node's namespaces, mounts and iptables need root.
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false);
    // A test that cannot run fails: `make test` runs as root with the images built.
    if !root {
        return Some(Err(Error::Missing(format!(
            "{test}: the real node needs root (make integration runs as root)"
        ))));
    }
    if !images_store().join("public").is_dir() {
        return Some(Err(Error::Missing(format!(
            "{test}: no release images: run `make images`"
        ))));
    }
    Some(area::cluster(kind, || {
        start_cluster(&[std::ffi::OsStr::new("--real-node")])
    }))
}

/// Where `e2e/scripts/images.sh` keeps the registry storage of the release images (`public/`
/// served to the real node's containerd, `private/`).
pub fn images_store() -> PathBuf {
    let cache = std::env::var_os("CAPI_OPERATOR_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(|c| PathBuf::from(c).join("capi-provider-operator"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/capi-provider-operator"))
        })
        .unwrap_or_default();
    cache.join("images")
}

/// A setting of the cluster's `ports.env` (`REAL_NODE_PRIVATE_HOST`, ...), if it has one.
pub fn cluster_setting(cluster: &TestCluster, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(cluster.dir().join("ports.env")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
}

/// A small deterministic generator (PCG-style LCG): reproducible kill points without a crate.
pub struct Rng(pub u64);

impl Rng {
    /// The next number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

/// The environment variable `name` as a number, else `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A lock that runs the tests holding it one at a time (whatever their area).
pub fn serial() -> &'static tokio::sync::Mutex<()> {
    area::lock()
}

pub use area::{Isolated, isolated, on_area_end};

fn start_or_attach() -> Result<TestCluster, String> {
    if let Some(kc) = std::env::var_os("CAPI_TEST_KUBECONFIG") {
        return Ok(TestCluster {
            kubeconfig: PathBuf::from(kc),
        });
    }
    start_private()
}

fn start_private() -> Result<TestCluster, String> {
    start_cluster(&[])
}

fn start_cluster(extra: &[&std::ffi::OsStr]) -> Result<TestCluster, String> {
    let script = workspace_root().join("e2e/scripts/cluster-up.sh");
    let dir = std::env::temp_dir().join(format!(
        "capi-test-cluster-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default()
    ));
    let out = Command::new(&script)
        .arg("--dir")
        .arg(&dir)
        .arg("--watch-pid")
        .arg(std::process::id().to_string())
        .args(extra)
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(TestCluster {
        kubeconfig: PathBuf::from(path),
    })
}

impl TestCluster {
    /// Stops the cluster's kube-apiserver (SIGTERM), keeps it down for `down`, then starts it
    /// again with the same command line, working directory and log, and waits until it is
    /// ready. Only for clusters this process started (the state directory is the kubeconfig's).
    pub fn restart_apiserver_after(&self, down: Duration) -> Result<(), Error> {
        let start = |m: String| Error::Start(m);
        let dir = self
            .kubeconfig
            .parent()
            .ok_or_else(|| start("kubeconfig without a directory".into()))?;
        let pid_file = dir.join("kube-apiserver.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .map_err(|e| start(format!("{}: {e}", pid_file.display())))?
            .trim()
            .to_string();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map_err(|e| start(format!("kube-apiserver {pid}: {e}")))?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
            .map_err(|e| start(format!("kube-apiserver {pid}: {e}")))?;
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let (bin, rest) = args
            .split_first()
            .ok_or_else(|| start("empty kube-apiserver command line".into()))?;
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..200 {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(down);
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(dir.join("logs/kube-apiserver.log"))
            .map_err(|e| start(format!("apiserver log: {e}")))?;
        let err = log
            .try_clone()
            .map_err(|e| start(format!("apiserver log: {e}")))?;
        let child = Command::new(bin)
            .args(rest)
            .current_dir(cwd)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| start(format!("restarting kube-apiserver: {e}")))?;
        std::fs::write(&pid_file, format!("{}\n", child.id()))
            .map_err(|e| start(format!("{}: {e}", pid_file.display())))?;
        for _ in 0..120 {
            if let Ok((true, out, _)) = self.kubectl(&["get", "--raw", "/readyz"])
                && out.trim() == "ok"
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(start("kube-apiserver not ready after a restart".into()))
    }

    /// The cluster's state directory (where `ports.env` and `logs/` are).
    pub fn dir(&self) -> &Path {
        self.kubeconfig.parent().unwrap_or(Path::new("."))
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A new client. Create one per test: a client is bound to the Tokio runtime that made it,
    /// and every `#[tokio::test]` has its own runtime.
    pub async fn client(&self) -> Result<Client, Error> {
        let kc = Kubeconfig::read_from(&self.kubeconfig).map_err(|source| Error::Kubeconfig {
            path: self.kubeconfig.clone(),
            source,
        })?;
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|source| Error::Kubeconfig {
                path: self.kubeconfig.clone(),
                source,
            })?;
        config.read_timeout = Some(Duration::from_secs(60));
        Ok(Client::try_from(config)?)
    }

    /// A fresh namespace `<prefix>-<pid>-<n>` for one test; deleted by [`TestNamespace::cleanup`].
    pub async fn namespace(&self, client: &Client, prefix: &str) -> Result<TestNamespace, Error> {
        let n = NS_COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name, "labels": { "capi-test": "true" } }
        }))
        .map_err(|e| Error::Start(e.to_string()))?;
        api.create(&PostParams::default(), &ns).await?;
        Ok(TestNamespace {
            name,
            client: client.clone(),
        })
    }

    /// Runs kubectl against this cluster and returns (success, stdout, stderr). It uses the
    /// kubectl built with the control plane (linked beside the kubeconfig), else
    /// `CAPI_KUBECTL`, else the one on PATH, with a private discovery cache so new CRDs are
    /// seen at once.
    pub fn kubectl(&self, args: &[&str]) -> std::io::Result<(bool, String, String)> {
        let beside = self.kubeconfig.parent().map(|d| d.join("kubectl"));
        let bin = beside
            .filter(|p| p.exists())
            .or_else(|| std::env::var_os("CAPI_KUBECTL").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("kubectl"));
        // One discovery cache per cluster: clusters of one binary come and go (see `area`),
        // and a later one may listen on a port an earlier one used.
        let cache = std::env::temp_dir().join(format!(
            "capi-kubectl-cache-{}-{}",
            std::process::id(),
            self.dir()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        let out = Command::new(bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args(args)
            .output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Runs kubectl and fails with its stderr unless it succeeds; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> Result<String, Error> {
        let (ok, out, err) = self
            .kubectl(args)
            .map_err(|e| Error::Start(format!("running kubectl: {e}")))?;
        if ok {
            Ok(out)
        } else {
            Err(Error::Kubectl(format!("kubectl {}: {err}", args.join(" "))))
        }
    }

    /// `kubectl get ARGS -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<serde_json::Value, Error> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let text = self.kubectl_ok(&all)?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Kubectl(format!("kubectl {}: not JSON: {e}", all.join(" "))))
    }

    /// (generation, names of its ReplicaSets) of a Deployment: a rollout changes both.
    pub fn rollout_state(&self, ns: &str, deployment: &str) -> Result<(i64, Vec<String>), Error> {
        let d = self.get_json(&["deployment", "-n", ns, deployment])?;
        let rs = self.get_json(&["replicasets", "-n", ns])?;
        let mut names: Vec<String> = rs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                r.pointer("/metadata/name")
                    .and_then(serde_json::Value::as_str)
            })
            .filter(|n| n.starts_with(deployment))
            .map(str::to_string)
            .collect();
        names.sort();
        Ok((
            d["metadata"]["generation"].as_i64().unwrap_or_default(),
            names,
        ))
    }

    /// Installs the operator's CRDs (`manifests/crds`) and waits until they are Established.
    /// Idempotent, so every test may call it.
    pub fn install_crds(&self) -> Result<(), Error> {
        let dir = workspace_root().join("manifests/crds");
        let dir = dir.to_string_lossy();
        self.kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "capi-tests",
            "-f",
            &dir,
        ])?;
        self.kubectl_ok(&[
            "wait",
            "--for",
            "condition=Established",
            "--timeout",
            "60s",
            "-f",
            &dir,
        ])?;
        Ok(())
    }

    /// Creates a namespace with a fixed name unless it exists (for files that name theirs).
    pub fn ensure_namespace(&self, name: &str) -> Result<(), Error> {
        let (ok, _, _) = self
            .kubectl(&["get", "namespace", name])
            .map_err(|e| Error::Start(format!("running kubectl: {e}")))?;
        if !ok {
            let (ok, _, err) = self
                .kubectl(&["create", "namespace", name])
                .map_err(|e| Error::Start(format!("running kubectl: {e}")))?;
            if !ok && !err.contains("AlreadyExists") {
                return Err(Error::Kubectl(err));
            }
        }
        Ok(())
    }
}

/// A namespace owned by one test.
pub struct TestNamespace {
    /// Its name.
    pub name: String,
    client: Client,
}

impl TestNamespace {
    /// Deletes the namespace (in the background; the apiserver finishes it).
    pub async fn cleanup(self) -> Result<(), Error> {
        let api: Api<Namespace> = Api::all(self.client);
        match api.delete(&self.name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Polls `check` every 200 ms until it returns `Some`, or gives up after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The operator running as a child process against a test cluster; killed when dropped.
pub struct OperatorProcess {
    child: Option<std::process::Child>,
    log: PathBuf,
}

impl OperatorProcess {
    /// Starts `bin run ARGS` with the cluster's kubeconfig; its output goes to a log file.
    pub fn start(
        cluster: &TestCluster,
        bin: &Path,
        args: &[&str],
    ) -> std::io::Result<OperatorProcess> {
        OperatorProcess::start_with_env(cluster, bin, args, &[])
    }

    /// Like [`OperatorProcess::start`], with extra environment variables (which win over the
    /// defaults, e.g. `RUST_LOG`).
    pub fn start_with_env(
        cluster: &TestCluster,
        bin: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> std::io::Result<OperatorProcess> {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let log =
            std::env::temp_dir().join(format!("capi-operator-{}-{n}.log", std::process::id()));
        let file = std::fs::File::create(&log)?;
        let err = file.try_clone()?;
        let child = Command::new(bin)
            .arg("run")
            .args(args)
            .env("KUBECONFIG", cluster.kubeconfig())
            .env(
                "RUST_LOG",
                std::env::var("CAPI_OPERATOR_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdout(file)
            .stderr(err)
            .spawn()?;
        Ok(OperatorProcess {
            child: Some(child),
            log,
        })
    }

    /// Kills the process once this test process exits, for an operator kept in a static (a
    /// fixture of several tests), which is never dropped: a watcher shell polls both.
    pub fn die_with_test(&self) -> std::io::Result<()> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        let script = format!(
            "while kill -0 {test} 2>/dev/null && kill -0 {pid} 2>/dev/null; do sleep 1; done; kill -9 {pid} 2>/dev/null",
            test = std::process::id()
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        Ok(())
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// Asks the process to stop (SIGTERM), as a Pod deletion would, and waits for it to exit.
    /// A process still running after the kubelet's 30 s grace period is killed, as the kubelet
    /// would, and that is an error naming its log: the test fails instead of hanging.
    pub fn terminate(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        let Some(mut c) = self.child.take() else {
            return Ok(None);
        };
        Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Some(status) = c.try_wait()? {
                return Ok(Some(status));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        Err(std::io::Error::other(format!(
            "still running 30 s after SIGTERM (killed); its log: {}",
            self.log.display()
        )))
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Everything the process logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Path of the log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
