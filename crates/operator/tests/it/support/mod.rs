//! Shared helpers of the operator's end-to-end tests: a private local control plane, the
//! operator as a child process, ConfigMap releases and waiting on provider conditions.

#![allow(dead_code)]

pub mod hostile;
pub mod real;
pub mod workload;

use std::{collections::BTreeMap, io::Write, path::Path, time::Duration};

use capi_test_support::{OperatorProcess, TestCluster, wait_for};
use k8s_openapi::{ByteString, api::core::v1::ConfigMap};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PostParams},
};
use serde_json::Value;

/// Result of a test.
pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Path of the operator binary under test.
pub fn operator_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_capi-provider-operator"))
}

/// Starts the operator against `cluster`.
pub fn start_operator(cluster: &TestCluster, args: &[&str]) -> std::io::Result<OperatorProcess> {
    OperatorProcess::start(cluster, operator_bin(), args)
}

/// The directory of the project's sample provider releases.
pub fn samples() -> std::path::PathBuf {
    capi_test_support::workspace_root().join("examples/sample-providers")
}

/// Applies YAML text with kubectl (server-side, as a GitOps tool would).
///
/// Two refusals are only a moment of a cluster still starting, and a GitOps tool retries them,
/// as this does for up to 90 s (on those errors only; a loaded machine rebuilds discovery late):
/// - a kind whose CRD has just become Established can still be missing from the API server's
///   discovery documents (they are rebuilt asynchronously);
/// - a provider is Ready when its managers are, and cert-manager's CA injector may not have put
///   the CA into its CRDs' conversion webhooks yet (`x509: certificate signed by unknown
///   authority` on an object of an older API version).
pub fn apply(cluster: &TestCluster, yaml: &str) -> Result<String, Box<dyn std::error::Error>> {
    let file = tempfile(yaml)?;
    let args = [
        "apply",
        "--server-side",
        "--field-manager",
        "e2e-user",
        "-f",
        &file,
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let applied = loop {
        match cluster.kubectl_ok(&args) {
            Err(e)
                if [
                    "ensure CRDs are installed first",
                    "x509: certificate signed by unknown authority",
                ]
                .iter()
                .any(|starting| e.to_string().contains(starting))
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            other => break other,
        }
    };
    // Kept when the apply failed: the error names the file, to be read.
    if applied.is_ok() {
        let _ = std::fs::remove_file(&file);
    }
    Ok(applied?)
}

/// This test binary's private cluster with the provider CRDs and cert-manager's CRDs (those of
/// the cert-manager `make providers` builds, as Cluster API releases use its kinds), and a
/// client of it. Fails, naming `make providers`, when cert-manager is not built.
pub async fn cluster_with_crds()
-> Result<(&'static TestCluster, Client), Box<dyn std::error::Error>> {
    let cm_crds = capi_test_support::cert_manager_crds()?;
    let cluster = capi_test_support::private_cluster()?;
    cluster.install_crds()?;
    cluster.kubectl_ok(&["apply", "--server-side", "-f", &cm_crds.to_string_lossy()])?;
    let client = cluster.client().await?;
    Ok((cluster, client))
}

/// Pushes the release `DIR/<version>/` (clusterctl's layout) to `repo` of a plain-HTTP registry
/// as an OCI artifact tagged `version`.
pub async fn push_release(
    reg: &capi_test_support::registry::PlainRegistry,
    repo: &str,
    dir: &Path,
    version: &str,
) -> TestResult {
    use capi_release_sources::oci::{OciConfig, OciCredentials, OciReference, push_artifact};
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

/// Runs the kubectl plugin (`kubectl capi-providers`) against `cluster`: whether it succeeded,
/// and its standard output and error.
pub fn plugin(
    cluster: &TestCluster,
    args: &[&str],
) -> Result<(bool, String), Box<dyn std::error::Error>> {
    let bin = operator_bin().with_file_name("kubectl-capi_providers");
    let out = std::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(args)
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

/// Writes `text` into a fresh temporary file and returns its path.
pub fn tempfile(text: &str) -> Result<String, Box<dyn std::error::Error>> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let path = std::env::temp_dir().join(format!("capi-e2e-{}-{n}.yaml", std::process::id()));
    std::fs::write(&path, text)?;
    Ok(path.to_string_lossy().into_owned())
}

/// Creates a ConfigMap in the air-gapped layout holding one release (gzip above 1 MiB).
pub async fn release_configmap(
    client: &Client,
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
    version: &str,
    metadata: &str,
    components: &str,
) -> TestResult {
    let mut l: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.insert("provider.cluster.x-k8s.io/version".into(), version.into());
    let mut data = BTreeMap::new();
    data.insert("metadata".to_string(), metadata.to_string());
    let mut binary = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    if metadata.len() + components.len() > 1024 * 1024 {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(components.as_bytes())?;
        binary.insert("components".to_string(), ByteString(gz.finish()?));
        annotations.insert(
            "provider.cluster.x-k8s.io/compressed".to_string(),
            "true".to_string(),
        );
    } else {
        data.insert("components".to_string(), components.to_string());
    }
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(l),
            annotations: Some(annotations),
            ..Default::default()
        },
        data: Some(data),
        binary_data: (!binary.is_empty()).then_some(binary),
        ..Default::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &cm).await?;
    Ok(())
}

/// Creates the ConfigMap of a release read from `DIR/<label>/<version>/`.
pub async fn release_configmap_from_dir(
    client: &Client,
    namespace: &str,
    dir: &Path,
    label: &str,
    version: &str,
    components_file: &str,
    labels: &[(&str, &str)],
) -> TestResult {
    let base = dir.join(label).join(version);
    let metadata = std::fs::read_to_string(base.join("metadata.yaml"))?;
    let components = std::fs::read_to_string(base.join(components_file))?;
    release_configmap(
        client,
        namespace,
        &format!("{label}-{version}"),
        labels,
        version,
        &metadata,
        &components,
    )
    .await
}

/// The provider object `kind` `namespace/name` as JSON. `kind` is a kind of this operator's
/// API, or `Kind.operator.cluster.x-k8s.io` for cluster-api-operator's v1alpha2.
pub async fn provider(client: &Client, kind: &str, namespace: &str, name: &str) -> Option<Value> {
    let (kind, group, version) = match kind.split_once('.') {
        Some((kind, group)) => (kind, group, "v1alpha2"),
        None => (kind, "management.cluster.x-k8s.io", "v1alpha1"),
    };
    let plural = format!("{}s", kind.to_lowercase());
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let o = api.get_opt(name).await.ok()??;
    serde_json::to_value(o).ok()
}

/// The condition `type_` of a provider object.
pub fn condition<'a>(p: &'a Value, type_: &str) -> Option<&'a Value> {
    p.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// The message of a provider's condition `type_` ("" when absent).
pub fn condition_message(p: &Value, type_: &str) -> String {
    condition(p, type_)
        .and_then(|c| c.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// Waits until the provider's condition `type_` has `status` and (if given) `reason`.
pub async fn wait_condition(
    client: &Client,
    (kind, namespace, name): (&str, &str, &str),
    type_: &str,
    status: &str,
    reason: Option<&str>,
    timeout: Duration,
) -> Result<Value, Box<dyn std::error::Error>> {
    let last = std::sync::Arc::new(std::sync::Mutex::new(None::<Value>));
    let got = wait_for(timeout, || {
        let client = client.clone();
        let last = last.clone();
        async move {
            let p = provider(&client, kind, namespace, name).await?;
            if let Ok(mut l) = last.lock() {
                *l = Some(p.clone());
            }
            let c = condition(&p, type_)?;
            let ok = c.get("status").and_then(Value::as_str) == Some(status)
                && reason.is_none_or(|r| c.get("reason").and_then(Value::as_str) == Some(r));
            ok.then_some(p)
        }
    })
    .await;
    got.ok_or_else(|| {
        format!(
            "{kind} {namespace}/{name}: condition {type_}={status} ({reason:?}) not reached; last seen status: {}",
            last.lock().ok().and_then(|l| l.clone()).and_then(|p| p.get("status").cloned())
                .map(|s| s.to_string())
                .unwrap_or_else(|| "none".into())
        )
        .into()
    })
}

/// Waits until the provider `kind namespace/name` is Ready with `version` installed (four
/// minutes: real releases on a busy machine); the error carries the operator's log.
pub async fn wait_installed(
    client: &Client,
    key: (&str, &str, &str),
    version: &str,
    operator: &OperatorProcess,
) -> Result<Value, Box<dyn std::error::Error>> {
    let p = wait_condition(client, key, "Ready", "True", None, Duration::from_secs(240))
        .await
        .map_err(|e| format!("{e}\noperator log:\n{}", operator.logs()))?;
    let installed = p
        .pointer("/status/installedVersion")
        .and_then(Value::as_str);
    if installed != Some(version) {
        return Err(format!("{key:?}: installed {installed:?}, not {version}").into());
    }
    Ok(p)
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A GET on 127.0.0.1:`port` with a bare HTTP/1.0 request: (status, body).
pub fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    real::http_get("127.0.0.1", port, path)
}

/// The sample core provider in `ns`, read from the ConfigMaps `load_core` writes.
pub fn core_provider(ns: &str, version: &str, verbosity: u32) -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: {ns}\nspec:\n  version: {version}\n  manager:\n    verbosity: {verbosity}\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: sample-core\n"
    )
}

/// Loads the sample core release v0.2.0 into ConfigMaps of `ns` (once).
pub async fn load_core(cluster: &TestCluster, client: &Client, ns: &str) -> TestResult {
    cluster.ensure_namespace(ns)?;
    let have = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get_opt("sample-core-v0.2.0")
        .await?;
    if have.is_none() {
        release_configmap_from_dir(
            client,
            ns,
            &samples(),
            "sample-core",
            "v0.2.0",
            "core-components.yaml",
            &[("provider.cluster.x-k8s.io/name", "sample-core")],
        )
        .await?;
    }
    Ok(())
}

/// The helm binary `make integration` built (`CAPI_HELM`); an error saying how to get it when
/// unset, so that `test` fails rather than passing without its work.
pub fn helm_bin(test: &str) -> Result<std::ffi::OsString, String> {
    std::env::var_os("CAPI_HELM")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            format!(
                "{test}: CAPI_HELM is not set: run through make integration or set \
                 CAPI_HELM=$(e2e/scripts/helm.sh)"
            )
        })
}

/// Runs helm with `args`: Ok(stdout) on success, Err(stdout + stderr) otherwise.
pub fn helm_run(helm: &std::ffi::OsStr, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(helm)
        .args(args)
        .output()
        .map_err(|e| format!("helm: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("helm {args:?}: {text}"))
    }
}

/// `jsonpath` of the PodDisruptionBudget of the chart's release `capi-operator` in `ns`:
/// whether it exists, and the value.
pub fn release_pdb(
    cluster: &TestCluster,
    ns: &str,
    jsonpath: &str,
) -> std::io::Result<(bool, String)> {
    let (found, out, _) = cluster.kubectl(&[
        "get",
        "pdb",
        "capi-operator",
        "-n",
        ns,
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])?;
    Ok((found, out))
}
