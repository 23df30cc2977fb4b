//! Helpers of the tests that run a workload cluster: Cluster API's docker provider (its in-memory
//! backend) installed by the operator beside the three real providers, a Cluster with a
//! KubeadmControlPlane and a MachineDeployment, and probes measuring what clients see while the
//! providers change.

use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use capi_test_support::{TestCluster, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};
use serde_json::Value;

use super::{
    TestResult,
    real::{REAL_PROVIDERS, ready_managers},
    release_configmap,
};

/// Namespace of the docker (in-memory) provider, as its release lays it out.
pub const CAPD_NS: &str = "capd-system";
/// The provider name its release ConfigMaps carry.
pub const CAPD_LABEL: &str = "infrastructure-docker";
/// Namespace of the workload cluster.
pub const WORKLOAD_NS: &str = "workload";
/// Name of the workload cluster.
pub const CLUSTER: &str = "w1";
/// Kubernetes version of the workload cluster (within what the v1.10 to v1.14 managers accept).
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// The docker provider's release of `version` that build-providers.sh rendered beside the images
/// file: (metadata.yaml, infrastructure-components.yaml).
pub fn capd_release(version: &str) -> Result<(String, String), Box<dyn std::error::Error>> {
    let images = capi_test_support::provider_images()
        .ok_or("the providers are not built: run `make providers` (or set CAPI_PROVIDER_IMAGES)")?;
    let dir = images
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
        .join(format!("capd-{version}/release"));
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).map_err(|e| {
            format!(
                "{}: {e} (e2e/scripts/build-providers.sh renders it)",
                dir.join(f).display()
            )
        })
    };
    Ok((
        read("metadata.yaml")?,
        read("infrastructure-components.yaml")?,
    ))
}

/// Loads the docker provider's releases of `versions` (see [`capd_release`]) into ConfigMaps of
/// its namespace.
pub async fn load_capd_releases(
    cluster: &TestCluster,
    client: &Client,
    versions: &[&str],
) -> TestResult {
    cluster.ensure_namespace(CAPD_NS)?;
    for v in versions {
        let (metadata, components) = capd_release(v)?;
        put_capd_release(client, v, &metadata, &components).await?;
    }
    Ok(())
}

/// The docker provider's release ConfigMap of `version`.
async fn put_capd_release(
    client: &Client,
    version: &str,
    metadata: &str,
    components: &str,
) -> TestResult {
    let name = format!("{CAPD_LABEL}-{version}");
    let labels = [("provider.cluster.x-k8s.io/name", CAPD_LABEL)];
    release_configmap(
        client, CAPD_NS, &name, &labels, version, metadata, components,
    )
    .await
}

/// The pod address the docker provider's manager asks for: the in-memory backend publishes its
/// own pod IP as each workload cluster's endpoint and refuses to restart on another address,
/// so its Deployment pins one (Calico's fixed-address annotation, which the real node's IPAM
/// plugin honours) and replaces its pod with the Recreate strategy. The address is the first of
/// the node's range for pinned addresses (`.100`–`.126` of its /25, see
/// `e2e/scripts/cni-pinned-ip.py`).
pub fn capd_pod_ip(cluster: &TestCluster) -> Result<String, Box<dyn std::error::Error>> {
    let cidr = capi_test_support::cluster_setting(cluster, "REAL_NODE_POD_CIDR")
        .ok_or("no REAL_NODE_POD_CIDR in the cluster's ports.env")?;
    let prefix = cidr
        .strip_suffix(".0/25")
        .ok_or("real node pod CIDR is not a /25")?;
    Ok(format!("{prefix}.100"))
}

/// The InfrastructureProvider of the docker provider at `version`, with `extra` spec lines,
/// its manager placed by `on_node` (`real::ON_REAL_NODE`: on the real node). Its
/// patches are what running the in-memory backend needs: the pinned pod address and the
/// Recreate strategy (see [`capd_pod_ip`]), and no docker socket (the in-memory backend never
/// talks to docker; the `test` operations make the patch fail loudly if a release moves it).
pub fn capd_provider_on(on_node: &str, pod_ip: &str, version: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: InfrastructureProvider
metadata:
  name: docker
  namespace: {CAPD_NS}
spec:
  version: {version}
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: {CAPD_LABEL}
{on_node}  patches:
  - target:
      group: apps
      version: v1
      kind: Deployment
      name: capd-controller-manager
    patch: |
      - {{op: add, path: /spec/strategy, value: {{type: Recreate}}}}
      - op: add
        path: /spec/template/metadata/annotations
        value: {{cni.projectcalico.org/ipAddrs: '["{pod_ip}"]'}}
      - {{op: test, path: /spec/template/spec/volumes/1/name, value: dockersock}}
      - {{op: remove, path: /spec/template/spec/volumes/1}}
      - {{op: test, path: /spec/template/spec/containers/0/volumeMounts/1/name, value: dockersock}}
      - {{op: remove, path: /spec/template/spec/containers/0/volumeMounts/1}}
{extra}"#
    )
}

/// Every provider of these tests: (kind, namespace, name).
pub fn all_providers() -> Vec<(&'static str, &'static str, &'static str)> {
    let mut v: Vec<_> = REAL_PROVIDERS
        .iter()
        .map(|(k, ns, n, ..)| (*k, *ns, *n))
        .collect();
    v.push(("InfrastructureProvider", CAPD_NS, "docker"));
    v
}

/// Waits until the three real providers are Ready at `version` and the docker provider at
/// `capd_version`, each with one ready manager of its version.
pub async fn wait_all_ready_at(
    client: &Client,
    version: &str,
    capd_version: &str,
) -> Result<(), String> {
    for (kind, ns, name) in all_providers() {
        let version = if ns == CAPD_NS { capd_version } else { version };
        let tag = version;
        let done = wait_for(Duration::from_secs(300), || async {
            let p = super::provider(client, kind, ns, name).await?;
            let ready = super::condition(&p, "Ready")?.get("status")? == "True";
            let at = p.pointer("/status/installedVersion")? == version;
            let managers = ready_managers(client, ns).await;
            let running = managers.len() == 1 && managers[0].1.ends_with(&format!(":{tag}"));
            (ready && at && running).then_some(())
        })
        .await;
        if done.is_none() {
            let p = super::provider(client, kind, ns, name).await;
            return Err(format!(
                "{kind} not Ready at {version} with its real manager; status: {}",
                p.and_then(|p| p.get("status").cloned())
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// The machine template of the in-memory backend: short provisioning delays.
fn dev_machine_template(name: &str) -> String {
    let step = r#"{provisioning: {startupDuration: "1s"}}"#;
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: DevMachineTemplate\nmetadata:\n  name: {name}\n  namespace: {WORKLOAD_NS}\nspec:\n  template:\n    spec:\n      backend:\n        inMemory:\n          vm: {step}\n          node: {step}\n          apiServer: {step}\n          etcd: {step}\n"
    )
}

/// An annotation on the DevCluster: the in-memory backend of v1.10 to v1.12 writes its listener
/// annotation into the object's annotation map without creating it, and panics on a DevCluster
/// that has none (a ClusterClass-made one always has some).
const ANNOTATION_WORKAROUND: &str = "capi-provider-operator.dev/e2e";

/// The workload cluster, written in v1beta1 (the API Cluster API v1.10 serves, contract
/// v1beta1): a Cluster on a DevCluster (in-memory backend), a KubeadmControlPlane of one
/// replica and a MachineDeployment of `workers` replicas. References name `apiVersion`, as
/// v1beta1 does; v1beta2 readers see them converted to `apiGroup`.
pub fn workload_cluster(workers: u32) -> String {
    let v = KUBERNETES_VERSION;
    let cri = "nodeRegistration:\n        criSocket: unix:///var/run/containerd/containerd.sock";
    let infra = "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1";
    [
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {WORKLOAD_NS}\n"),
        format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata:\n  name: {CLUSTER}\n  namespace: {WORKLOAD_NS}\nspec:\n  clusterNetwork:\n    services:\n      cidrBlocks: [10.128.0.0/12]\n    pods:\n      cidrBlocks: [192.168.0.0/16]\n    serviceDomain: cluster.local\n  infrastructureRef:\n    {infra}\n    kind: DevCluster\n    name: {CLUSTER}\n  controlPlaneRef:\n    apiVersion: controlplane.cluster.x-k8s.io/v1beta1\n    kind: KubeadmControlPlane\n    name: {CLUSTER}-control-plane\n"
        ),
        format!(
            "{infra}\nkind: DevCluster\nmetadata:\n  name: {CLUSTER}\n  namespace: {WORKLOAD_NS}\n  annotations:\n    {ANNOTATION_WORKAROUND}: \"true\"\nspec:\n  backend:\n    inMemory: {{}}\n"
        ),
        dev_machine_template(&format!("{CLUSTER}-control-plane")),
        format!(
            "apiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\nmetadata:\n  name: {CLUSTER}-control-plane\n  namespace: {WORKLOAD_NS}\nspec:\n  replicas: 1\n  version: {v}\n  machineTemplate:\n    infrastructureRef:\n      {infra}\n      kind: DevMachineTemplate\n      name: {CLUSTER}-control-plane\n  kubeadmConfigSpec:\n    clusterConfiguration:\n      apiServer:\n        certSANs: [localhost, 127.0.0.1]\n    initConfiguration:\n      {cri}\n    joinConfiguration:\n      {cri}\n"
        ),
        dev_machine_template(&format!("{CLUSTER}-md-0")),
        format!(
            "apiVersion: bootstrap.cluster.x-k8s.io/v1beta1\nkind: KubeadmConfigTemplate\nmetadata:\n  name: {CLUSTER}-md-0\n  namespace: {WORKLOAD_NS}\nspec:\n  template:\n    spec:\n      joinConfiguration:\n        {}\n",
            cri.replace("\n      ", "\n          ")
        ),
        format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata:\n  name: {CLUSTER}-md-0\n  namespace: {WORKLOAD_NS}\nspec:\n  clusterName: {CLUSTER}\n  replicas: {workers}\n  selector:\n    matchLabels: {{}}\n  template:\n    spec:\n      clusterName: {CLUSTER}\n      version: {v}\n      bootstrap:\n        configRef:\n          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1\n          kind: KubeadmConfigTemplate\n          name: {CLUSTER}-md-0\n      infrastructureRef:\n        {infra}\n        kind: DevMachineTemplate\n        name: {CLUSTER}-md-0\n"
        ),
    ]
    .join("---\n")
}

/// An API of `group/version` `plural` in the workload namespace.
pub fn api(client: &Client, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase());
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    Api::namespaced_with(client.clone(), WORKLOAD_NS, &ar)
}

/// The `metav1.Condition` `type_` of a Cluster API object, as JSON.
pub fn object_condition<'a>(o: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    o.data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// Whether condition `type_` of `o` is True.
pub fn is_true(o: &DynamicObject, type_: &str) -> bool {
    object_condition(o, type_).and_then(|c| c.get("status")) == Some(&Value::from("True"))
}

/// What the controllers report about the workload cluster, for failure messages.
pub async fn describe(client: &Client) -> String {
    let mut out = String::new();
    for (g, k) in [
        ("cluster.x-k8s.io", "Cluster"),
        ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
        ("cluster.x-k8s.io", "MachineDeployment"),
        ("cluster.x-k8s.io", "Machine"),
        ("infrastructure.cluster.x-k8s.io", "DevMachine"),
    ] {
        // v1beta2 once contract v1beta2 is installed, v1beta1 before (all v1.10 serves).
        let mut list = api(client, g, "v1beta2", k)
            .list(&ListParams::default())
            .await;
        if list.is_err() {
            list = api(client, g, "v1beta1", k)
                .list(&ListParams::default())
                .await;
        }
        for o in list.map(|l| l.items).unwrap_or_default() {
            let conds: Vec<String> = o
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{}={} ({})",
                        c["type"].as_str().unwrap_or(""),
                        c["status"].as_str().unwrap_or(""),
                        c["reason"].as_str().unwrap_or("")
                    )
                })
                .collect();
            let phase = o.data.pointer("/status/phase").and_then(Value::as_str);
            out.push_str(&format!(
                "{k} {}: phase {phase:?}; {}\n",
                o.metadata.name.as_deref().unwrap_or(""),
                conds.join(", ")
            ));
        }
    }
    out
}

/// [`describe`] from a synchronous error path (a multi-threaded runtime's worker).
pub fn describe_sync(client: &Client) -> String {
    let client = client.clone();
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(async move { describe(&client).await })
    })
}

/// The workload machines that are Running with a Node, read at API `version`: (control plane,
/// workers).
pub async fn running_machines(client: &Client, version: &str) -> (usize, usize) {
    let list = api(client, "cluster.x-k8s.io", version, "Machine")
        .list(&ListParams::default())
        .await;
    let mut cp = 0;
    let mut workers = 0;
    for m in list.map(|l| l.items).unwrap_or_default() {
        let running = m.data.pointer("/status/phase") == Some(&Value::from("Running"))
            && m.data.pointer("/status/nodeRef/name").is_some()
            && m.metadata.deletion_timestamp.is_none();
        if !running {
            continue;
        }
        let labels = m.metadata.labels.unwrap_or_default();
        if labels.contains_key("cluster.x-k8s.io/control-plane") {
            cp += 1;
        } else {
            workers += 1;
        }
    }
    (cp, workers)
}

/// Waits until the real controllers report the workload cluster up: the Cluster's control
/// plane initialized and its infrastructure ready, the control plane and `workers` workers
/// Running with Nodes, and the MachineDeployment's replicas all ready — read at API `version`
/// (the condition types and fields checked are named alike in v1beta1 and v1beta2).
pub async fn wait_cluster_up(
    client: &Client,
    version: &str,
    workers: usize,
    timeout: Duration,
) -> TestResult {
    let clusters = api(client, "cluster.x-k8s.io", version, "Cluster");
    let mds = api(client, "cluster.x-k8s.io", version, "MachineDeployment");
    let up = wait_for(timeout, || async {
        let c = clusters.get_opt(CLUSTER).await.ok()??;
        let initialized =
            is_true(&c, "ControlPlaneInitialized") && is_true(&c, "InfrastructureReady");
        let md = mds.get_opt(&format!("{CLUSTER}-md-0")).await.ok()??;
        let ready = md
            .data
            .pointer("/status/readyReplicas")
            .and_then(Value::as_u64);
        let machines = running_machines(client, version).await;
        (initialized && machines == (1, workers) && ready == Some(workers as u64)).then_some(())
    })
    .await;
    up.ok_or_else(|| format!("the workload cluster did not come up with {workers} workers").into())
}

/// For every Cluster API CRD (every group under cluster.x-k8s.io but the operator's own), the
/// number of objects at each served version; differing counts or a failed list are errors.
/// Reading at a version other than the stored one goes through the provider's conversion
/// webhook, so this proves the running managers convert every stored object.
pub async fn read_in_every_version(client: &Client) -> Result<usize, String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let list = crds
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut objects = 0;
    for crd in list.items {
        let group = &crd.spec.group;
        if !group.ends_with("cluster.x-k8s.io") || group.starts_with("management.") {
            continue;
        }
        let mut counts = Vec::new();
        for v in crd.spec.versions.iter().filter(|v| v.served) {
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, &v.name, &crd.spec.names.kind),
                &crd.spec.names.plural,
            );
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let n = api
                .list(&ListParams::default())
                .await
                .map_err(|e| {
                    format!(
                        "listing {}.{}/{}: {e}",
                        crd.spec.names.plural, group, v.name
                    )
                })?
                .items
                .len();
            counts.push((v.name.clone(), n));
        }
        if counts.windows(2).any(|w| w[0].1 != w[1].1) {
            return Err(format!("{}.{group}: {counts:?}", crd.spec.names.plural));
        }
        objects += counts.first().map(|c| c.1).unwrap_or(0);
    }
    Ok(objects)
}

/// The longest time an observation failed, measured by a background probe.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Longest run of failed observations, from the first failure to the next success.
    pub longest: Duration,
    /// Failed observations in all.
    pub failures: u32,
    /// Observations in all.
    pub total: u32,
    /// The last failure's text.
    pub last_error: Option<String>,
}

/// A background probe: runs `check` every `every` until stopped, recording failure windows.
pub struct Probe {
    stop: Arc<AtomicBool>,
    window: Arc<Mutex<Window>>,
    task: tokio::task::JoinHandle<()>,
}

impl Probe {
    /// Starts the probe.
    pub fn start<F, Fut>(every: Duration, check: F) -> Probe
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let window = Arc::new(Mutex::new(Window::default()));
        let (s, w) = (stop.clone(), window.clone());
        let task = tokio::spawn(async move {
            let mut failing_since: Option<Instant> = None;
            while !s.load(Ordering::SeqCst) {
                let tick = Instant::now();
                let result = check().await;
                if let Ok(mut w) = w.lock() {
                    w.total += 1;
                    match result {
                        Ok(()) => failing_since = None,
                        Err(e) => {
                            w.failures += 1;
                            w.last_error = Some(e);
                            let since = *failing_since.get_or_insert(tick);
                            w.longest = w.longest.max(since.elapsed());
                        }
                    }
                }
                tokio::time::sleep(every.saturating_sub(tick.elapsed())).await;
            }
        });
        Probe { stop, window, task }
    }

    /// Stops the probe and returns what it saw.
    pub async fn finish(self) -> Window {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.window.lock().map(|w| w.clone()).unwrap_or_default()
    }
}

/// A probe that fails while namespace `ns` has no ready manager pod on the real node.
pub fn manager_probe(client: &Client, ns: &'static str) -> Probe {
    let client = client.clone();
    Probe::start(Duration::from_millis(100), move || {
        let client = client.clone();
        async move {
            if ready_managers(&client, ns).await.is_empty() {
                Err(format!("no ready manager in {ns}"))
            } else {
                Ok(())
            }
        }
    })
}

/// A probe reading the Cluster at `version` every 100 ms (a version other than the stored one
/// goes through the core provider's conversion webhook).
pub fn cluster_reader(client: &Client, version: &'static str) -> Probe {
    let api = api(client, "cluster.x-k8s.io", version, "Cluster");
    Probe::start(Duration::from_millis(100), move || {
        let api = api.clone();
        async move {
            api.get(CLUSTER)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
}
