//! Helpers of the tests that run the real Cluster API managers and cert-manager on the real node
//! (`e2e/scripts/build-providers.sh` builds them, `make images` packages them as the images the
//! node pulls; `make integration` points `CAPI_PROVIDER_IMAGES` at the images file of the first).

use std::{path::PathBuf, time::Duration};

use capi_test_support::{TestCluster, wait_for};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Pod},
};
use kube::{Api, Client, api::ListParams};

use super::{TestResult, apply, release_configmap_from_dir};

/// (kind, namespace, name, release label, components file) of the three real providers.
pub const REAL_PROVIDERS: [(&str, &str, &str, &str, &str); 3] = [
    (
        "CoreProvider",
        "capi-system",
        "cluster-api",
        "cluster-api",
        "core-components.yaml",
    ),
    (
        "BootstrapProvider",
        "capi-kubeadm-bootstrap-system",
        "kubeadm",
        "bootstrap-kubeadm",
        "bootstrap-components.yaml",
    ),
    (
        "ControlPlaneProvider",
        "capi-kubeadm-control-plane-system",
        "kubeadm",
        "control-plane-kubeadm",
        "control-plane-components.yaml",
    ),
];

/// The label and taint of the real node (`cluster-up.sh --real-node`): the managers' Deployments
/// select it and tolerate it.
pub const REAL_NODE_LABEL: &str = "capi-provider-operator.dev/real-node";

/// `spec.deployment` placing a provider's manager on the real node (2-space indented, for a
/// provider object's spec).
pub const ON_REAL_NODE: &str = r#"  deployment:
    nodeSelector:
      capi-provider-operator.dev/real-node: "true"
    tolerations:
    - key: capi-provider-operator.dev/real-node
      operator: Exists
      effect: NoSchedule
"#;

/// What the real-provider tests need: the Cluster API releases and cert-manager's manifest, both
/// as `make providers` builds them.
pub struct RealParts {
    /// The assembled releases ([`capi_test_support::releases`]).
    pub releases: PathBuf,
    /// cert-manager's release manifest, rendered for the real node.
    pub cert_manager: PathBuf,
}

/// The real parts for the real node (`cluster-up.sh --real-node`, whose containerd pulls the
/// images of `make images`): the releases and cert-manager's release manifest of
/// `make providers` (scheduled onto the real node, images unchanged). An error naming what to
/// build when one is missing: the test fails.
pub fn real_node_parts() -> Result<RealParts, capi_test_support::Error> {
    Ok(RealParts {
        releases: capi_test_support::releases()?,
        cert_manager: capi_test_support::cert_manager_manifest()?,
    })
}

/// The private cluster of the current area with a real node; an error (the test fails) without
/// root or without the images of `make images`.
pub fn real_node(test: &str) -> Result<&'static TestCluster, capi_test_support::Error> {
    capi_test_support::real_node_cluster(test).unwrap_or_else(|| {
        Err(capi_test_support::Error::Missing(format!(
            "{test}: no real node"
        )))
    })
}

/// The first directory named `name` at most `depth` levels under `dir` (a pod's or container's
/// cgroup under the real node's tree: cgroupfs driver, cgroup v1).
pub fn find_dir(dir: &std::path::Path, name: &str, depth: u32) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let path = e.path();
        if !path.is_dir() {
            continue;
        }
        if e.file_name().to_string_lossy() == name {
            return Some(path);
        }
        if depth > 0
            && let Some(found) = find_dir(&path, name, depth - 1)
        {
            return Some(found);
        }
    }
    None
}

/// The host process ID of a container's main process, from its status's `containerID`
/// (`containerd://ID`): the first process of the container's cgroup (under
/// `crn<hash>/kubepods/…/pod<uid>/ID`).
pub fn container_pid(container_id: &str) -> Option<u32> {
    let id = container_id.strip_prefix("containerd://")?;
    let dir = find_dir(std::path::Path::new("/sys/fs/cgroup/pids"), id, 5)?;
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    procs.lines().next()?.trim().parse().ok()
}

/// Installs cert-manager from its release manifest and waits until its webhook answers (which
/// needs the controller, the CA injector and the webhook all running for real).
pub fn install_cert_manager(
    cluster: &TestCluster,
    _client: &Client,
    parts: &RealParts,
) -> TestResult {
    // The plugin installs it, as a user would (`init` installs cert-manager when the cluster
    // lacks it, from a local manifest here), and waits until its webhook answers.
    let plugin = super::operator_bin().with_file_name("kubectl-capi_providers");
    let install = |what: &str| -> Result<String, Box<dyn std::error::Error>> {
        let out = std::process::Command::new(&plugin)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig())
            .args(["init", "--skip-operator", "--cert-manager-only"])
            .args([
                "--cert-manager-version",
                "v1.11.5",
                "--cert-manager-timeout",
                "240s",
            ])
            .arg("--cert-manager-manifest")
            .arg(&parts.cert_manager)
            .output()
            .map_err(|e| {
                format!(
                    "{}: {e} (cargo build --workspace builds it)",
                    plugin.display()
                )
            })?;
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(format!("plugin init ({what}) failed:\n{text}").into());
        }
        Ok(text)
    };
    // The tests of a binary share the cluster: the first installs, the others find it.
    let first = install("install")?;
    assert!(
        first.contains("cert-manager v1.11.5: ready")
            || first.contains("cert-manager v1.11.5 found"),
        "{first}"
    );
    // Ready means the webhook answers: a dry-run Issuer is admitted at once.
    let probe = "apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata:\n  name: probe\n  namespace: cert-manager\nspec:\n  selfSigned: {}\n";
    let file = super::tempfile(probe)?;
    cluster.kubectl_ok(&["create", "--dry-run=server", "-f", &file])?;
    let again = install("again")?;
    assert!(
        again.contains("cert-manager v1.11.5 found: not installed again"),
        "{again}"
    );
    Ok(())
}

/// The real KubeadmControlPlane webhook answers: an even replica count is refused with its
/// message (the request reaches the manager's webhook server through its Service). Right after
/// a rollout the Service's endpoints can still name the old pod for a moment (the endpoint
/// controller follows pod readiness asynchronously), so a failed call is tried again for up to
/// a minute; a wrong answer fails at once.
pub fn webhook_refuses_even_replicas(cluster: &TestCluster) -> TestResult {
    let started = std::time::Instant::now();
    loop {
        match webhook_answer(cluster)? {
            Ok(()) => return Ok(()),
            Err(err)
                if err.contains("failed calling webhook")
                    && started.elapsed() < Duration::from_secs(60) =>
            {
                std::thread::sleep(Duration::from_secs(2));
            }
            Err(err) => {
                return Err(format!("the real webhook did not refuse the object: {err}").into());
            }
        }
    }
}

/// One dry-run create of an invalid KubeadmControlPlane: Ok when refused by the real webhook's
/// rule, else the error text.
fn webhook_answer(cluster: &TestCluster) -> Result<Result<(), String>, Box<dyn std::error::Error>> {
    let kcp = "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata:\n  name: even\n  namespace: default\nspec:\n  replicas: 2\n  version: v1.34.0\n  machineTemplate:\n    spec:\n      infrastructureRef:\n        apiGroup: infrastructure.cluster.x-k8s.io\n        kind: DockerMachineTemplate\n        name: even\n  kubeadmConfigSpec:\n    format: cloud-config\n";
    let file = super::tempfile(kcp)?;
    let (ok, _, err) = cluster.kubectl(&["create", "--dry-run=server", "-f", &file])?;
    if ok || !err.contains("cannot be an even number when etcd is stacked") {
        return Ok(Err(err));
    }
    Ok(Ok(()))
}

/// Waits until Deployment `namespace/name` is Available with every replica updated.
pub async fn wait_available(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> TestResult {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let ok = wait_for(timeout, || async {
        let d = api.get_opt(name).await.ok()??;
        let s = d.status?;
        let want = d.spec?.replicas.unwrap_or(1);
        let available = s
            .conditions?
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True");
        (available
            && s.updated_replicas.unwrap_or(0) == want
            && s.available_replicas.unwrap_or(0) == want)
            .then_some(())
    })
    .await;
    ok.ok_or_else(|| format!("Deployment {namespace}/{name} not available").into())
}

/// Loads the real releases (`releases`: [`RealParts::releases`]) of `versions` into
/// ConfigMaps of the providers' namespaces.
pub async fn load_real_releases(
    cluster: &TestCluster,
    client: &Client,
    releases: &std::path::Path,
    versions: &[&str],
) -> TestResult {
    for (_, ns, _, label, file) in REAL_PROVIDERS {
        cluster.ensure_namespace(ns)?;
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for v in versions {
            if configmaps.get_opt(&format!("{label}-{v}")).await?.is_some() {
                continue;
            }
            release_configmap_from_dir(
                client,
                ns,
                releases,
                label,
                v,
                file,
                &[("provider.cluster.x-k8s.io/name", label)],
            )
            .await?;
        }
    }
    Ok(())
}

/// The three provider objects at `version` with `on_node` (e.g. [`ON_REAL_NODE`]) placing the
/// managers and `extra(kind)` appended to each spec (2-space indented lines).
pub fn real_manifest_on(on_node: &str, version: &str, extra: impl Fn(&str) -> String) -> String {
    REAL_PROVIDERS
        .iter()
        .map(|(kind, ns, name, label, _)| {
            format!(
                "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  version: {version}\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {label}\n{on_node}{}",
                extra(kind)
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Applies the three providers at `version` on the real node (see [`real_manifest_on`]).
pub fn apply_real(
    cluster: &TestCluster,
    version: &str,
    extra: impl Fn(&str) -> String,
) -> TestResult {
    apply(cluster, &real_manifest_on(ON_REAL_NODE, version, extra))?;
    Ok(())
}

/// The pods of namespace `ns`.
pub async fn pods(client: &Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Whether pod `p` runs on the real node (kwok's pods run nothing).
fn on_manager_node(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(capi_test_support::REAL_NODE_NAME)
}

/// The running, ready manager pods of `ns` on the real node, with their images.
pub async fn ready_managers(client: &Client, ns: &str) -> Vec<(String, String)> {
    pods(client, ns)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(on_manager_node)
        .filter_map(|p| {
            let st = p.status?;
            let cs = st.container_statuses?;
            let all_ready = !cs.is_empty() && cs.iter().all(|c| c.ready);
            all_ready.then(|| {
                (
                    p.metadata.name.unwrap_or_default(),
                    cs.first().map(|c| c.image.clone()).unwrap_or_default(),
                )
            })
        })
        .collect()
}

/// The ready manager pod of `ns` on the real node: (name, pod IP, host process ID of its
/// manager).
pub async fn manager_process(client: &Client, ns: &str) -> Option<(String, String, u32)> {
    pods(client, ns).await.into_iter().find_map(|p| {
        if p.metadata.deletion_timestamp.is_some() || !on_manager_node(&p) {
            return None;
        }
        let st = p.status?;
        let c = st.container_statuses?.into_iter().find(|c| c.ready)?;
        let pid = container_pid(&c.container_id?)?;
        Some((p.metadata.name?, st.pod_ip?, pid))
    })
}

/// The command line of process `pid`, one argument per element.
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A plain HTTP/1.0 GET of `http://{ip}:{port}{path}`: (status, body).
pub fn http_get(ip: &str, port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = format!("{ip}:{port}")
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}
