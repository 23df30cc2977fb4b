//! Helpers of the plugin's end-to-end tests: running the plugin binary against a test
//! cluster, the operator binary, a local repository of the sample releases, and waiting.

#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use capi_test_support::{OperatorProcess, TestCluster};
use serde_json::Value;

/// Result of a test.
pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The plugin binary under test.
pub fn plugin_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kubectl-capi_providers"))
}

/// What a plugin run printed.
#[derive(Debug)]
pub struct Run {
    /// Exit status was success.
    pub ok: bool,
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Fails unless standard output holds every one of `wants`.
    pub fn expect_out(&self, wants: &[&str]) -> Result<(), String> {
        match wants.iter().find(|w| !self.stdout.contains(**w)) {
            Some(missing) => Err(format!("missing {missing:?}\n{}", self.all())),
            None => Ok(()),
        }
    }

    /// stdout and stderr, for messages.
    pub fn all(&self) -> String {
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Runs the plugin with `args` (and `--kubeconfig` of `cluster` when given), with extra
/// environment variables.
pub fn plugin_env(
    cluster: Option<&TestCluster>,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::io::Result<Run> {
    let mut cmd = Command::new(plugin_bin());
    if let Some(c) = cluster {
        cmd.arg("--kubeconfig").arg(c.kubeconfig());
    }
    cmd.args(args).env_remove("KUBECONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output()?;
    Ok(Run {
        ok: out.status.success(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Runs the plugin and fails unless it succeeds.
pub fn plugin_ok(
    cluster: Option<&TestCluster>,
    args: &[&str],
) -> Result<Run, Box<dyn std::error::Error>> {
    plugin_ok_env(cluster, args, &[])
}

/// Runs the plugin with extra environment variables and fails unless it succeeds.
pub fn plugin_ok_env(
    cluster: Option<&TestCluster>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<Run, Box<dyn std::error::Error>> {
    let r = plugin_env(cluster, args, env)?;
    if !r.ok {
        return Err(format!(
            "kubectl-capi_providers {} failed\n{}",
            args.join(" "),
            r.all()
        )
        .into());
    }
    Ok(r)
}

/// The newest modification time of the sources the operator binary is built from.
fn newest_source() -> Option<std::time::SystemTime> {
    fn walk(dir: &Path, newest: &mut Option<std::time::SystemTime>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, newest);
            } else if p
                .extension()
                .is_some_and(|x| x == "rs" || x == "toml" || x == "yaml")
                && let Ok(m) = e.metadata().and_then(|m| m.modified())
            {
                *newest = (*newest).max(Some(m));
            }
        }
    }
    let root = capi_test_support::workspace_root();
    let mut newest = std::fs::metadata(root.join("Cargo.lock"))
        .and_then(|m| m.modified())
        .ok();
    for c in ["operator", "components", "api", "yaml", "envsubst"] {
        walk(&root.join("crates").join(c), &mut newest);
    }
    newest
}

/// The operator binary, built if needed.
///
/// `CAPI_OPERATOR_BIN` names it explicitly. Otherwise it is the `capi-provider-operator`
/// binary beside the plugin binary under test (same target directory and profile). When it is
/// missing or older than its sources it is built with `cargo build -p capi-provider-operator`
/// (once per test binary); `cargo test --workspace` has built it already. A failed build is an
/// error, never a skip.
pub fn operator_bin() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CAPI_OPERATOR_BIN") {
            return Ok(PathBuf::from(p));
        }
        let profile_dir = plugin_bin()
            .parent()
            .ok_or("the plugin binary has no directory")?;
        let target = profile_dir
            .parent()
            .ok_or("the plugin binary is not in a target directory")?;
        let bin = profile_dir.join("capi-provider-operator");
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        if built.is_some() && built >= newest_source() {
            return Ok(bin);
        }
        eprintln!("building capi-provider-operator for the end-to-end tests");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "capi-provider-operator", "--bin", "capi-provider-operator"])
            .env("CARGO_TARGET_DIR", target)
            .current_dir(capi_test_support::workspace_root());
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.args(["--profile", other]);
            }
        }
        let out = cmd.output().map_err(|e| format!("running cargo build: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build -p capi-provider-operator failed (set CAPI_OPERATOR_BIN to use a built one):\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if !bin.exists() {
            return Err(format!("{} was not built", bin.display()));
        }
        Ok(bin)
    })
    .clone()
}

/// Starts the operator against `cluster`.
pub fn start_operator(
    cluster: &TestCluster,
    args: &[&str],
) -> Result<OperatorProcess, Box<dyn std::error::Error>> {
    let bin = operator_bin()?;
    Ok(OperatorProcess::start(cluster, &bin, args)?)
}

/// The project's sample releases.
pub fn samples() -> PathBuf {
    capi_test_support::workspace_root().join("examples/sample-providers")
}

/// A temporary directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory.
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }

    /// Its path as a string.
    pub fn s(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A local repository (clusterctl's layout) of the sample releases: core `cluster-api`,
/// bootstrap `sample`, infrastructure `sample`, each v0.1.0 (contract v1beta1) and v0.2.0
/// (contract v1beta2).
pub fn sample_repository() -> std::io::Result<TempDir> {
    let dir = TempDir::new("capi-plugin-repo")?;
    for (label, sample) in [
        ("cluster-api", "sample-core"),
        ("bootstrap-sample", "sample-bootstrap"),
        ("infrastructure-sample", "sample-infrastructure"),
    ] {
        for v in ["v0.1.0", "v0.2.0"] {
            copy_files(&samples().join(sample).join(v), &dir.0.join(label).join(v))?;
        }
    }
    Ok(dir)
}

/// Copies the files of `from` (not its subdirectories' content) into `to`, created if needed.
pub fn copy_files(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        std::fs::copy(e.path(), to.join(e.file_name()))?;
    }
    Ok(())
}

/// The provider object `kind` `namespace/name` as JSON.
pub fn provider(cluster: &TestCluster, kind: &str, namespace: &str, name: &str) -> Option<Value> {
    let out = cluster
        .kubectl_ok(&[
            "get",
            &format!("{}s.management.cluster.x-k8s.io", kind.to_lowercase()),
            "-n",
            namespace,
            name,
            "-o",
            "json",
        ])
        .ok()?;
    serde_json::from_str(&out).ok()
}

/// A condition of a provider object.
pub fn condition<'a>(p: &'a Value, type_: &str) -> Option<&'a Value> {
    p.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// Whether the provider is Ready at `version`.
pub fn ready_at(p: &Value, version: &str) -> bool {
    condition(p, "Ready")
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
        && p.pointer("/status/installedVersion")
            .and_then(Value::as_str)
            == Some(version)
}

/// A Kubernetes object as JSON, through kubectl.
pub fn get_json(cluster: &TestCluster, args: &[&str]) -> Result<Value, Box<dyn std::error::Error>> {
    Ok(cluster.get_json(args)?)
}
