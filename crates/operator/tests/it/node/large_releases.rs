//! Large releases for the release memory budget under the kubelet's limit (`operator_image`):
//! three infrastructure providers whose v2.0.0 release is many times the size of the v1.12.0
//! core release, distinct objects per provider, served by the local GitHub-compatible server
//! on the real node's host address so the operator's pods fetch them as from GitHub.
//!
//! A release is made of the core release's CRD specs, copied `COPIES` times into custom objects
//! of a provider-own CRD (preserving unknown fields): as deep as the CRDs the budget was measured
//! on (docs/hardening.md), but cheap for the API server, which compiles no schema for them. Its
//! Deployment runs the node's pause image, so the provider can become Ready.

use crate::support;

use std::{path::Path, time::Duration};

use capi_fake_remotes::{FakeServer, ReleaseTree};
use capi_test_support::{TestCluster, wait_for};
use kube::Client;
use serde_json::{Value, json};
use support::{real::*, *};

/// Copies of the core release's CRD specs in each v2.0.0 release: about 17 MB, which three
/// operators' passes at once turn into more than the chart's 256Mi limit without the budget.
const COPIES: usize = 13;

/// The providers (name and namespace), each an InfrastructureProvider of its own repository.
pub(super) const BIG: [(&str, &str); 3] = [
    ("big-a", "big-a-system"),
    ("big-b", "big-b-system"),
    ("big-c", "big-c-system"),
];

const T: Duration = Duration::from_secs(180);

/// The served releases; the server stops and the files go when this is dropped.
pub(super) struct LargeReleases {
    server: FakeServer,
    _tree: ReleaseTree,
    /// The size of each v2.0.0 release in bytes.
    pub(super) bytes: usize,
}

impl LargeReleases {
    /// The GitHub API URL the operator must be given (`CAPI_OPERATOR_GITHUB_API_URL`).
    pub(super) fn api_url(&self) -> &str {
        self.server.url()
    }
}

/// Writes v1.0.0 (small) and v2.0.0 (large) of every provider of [`BIG`] from the core release
/// `core` and serves them on the real node's host address, where its pods reach it.
pub(super) async fn serve(
    cluster: &TestCluster,
    core: &Path,
) -> Result<LargeReleases, Box<dyn std::error::Error>> {
    let host = capi_test_support::cluster_setting(cluster, "REAL_NODE_HOST_IP")
        .ok_or("no REAL_NODE_HOST_IP in the cluster's ports.env")?;
    let specs = crd_specs(&std::fs::read_to_string(core)?)?;
    let tree = ReleaseTree::new()?;
    let metadata = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 2, minor: 0, contract: v1beta2}\n- {major: 1, minor: 0, contract: v1beta2}\n";
    let mut bytes = 0;
    for (name, ns) in BIG {
        for (version, copies) in [("v1.0.0", 0), ("v2.0.0", COPIES)] {
            let text = release(name, ns, &specs, copies)?;
            bytes = text.len();
            tree.add(name, version, "infrastructure-components.yaml", text)?
                .add(name, version, "metadata.yaml", metadata)?;
        }
    }
    let repos: Vec<(String, [&str; 1])> = BIG
        .iter()
        .map(|(name, _)| (format!("acme/{name}"), [*name]))
        .collect();
    let repos: Vec<(&str, &[&str])> = repos
        .iter()
        .map(|(r, l)| (r.as_str(), l.as_slice()))
        .collect();
    let server = FakeServer::start_on(tree.path(), &repos, &format!("{host}:0")).await?;
    Ok(LargeReleases {
        server,
        _tree: tree,
        bytes,
    })
}

/// The `spec` of every CustomResourceDefinition of the release text `core`.
fn crd_specs(core: &str) -> Result<Vec<(String, Value)>, Box<dyn std::error::Error>> {
    let docs = capi_yaml::parse_documents(core, &capi_yaml::Limits::default())?;
    Ok(docs
        .into_iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .filter_map(|mut d| {
            let name = d.pointer("/metadata/name")?.as_str()?.to_string();
            Some((name, d.get_mut("spec")?.take()))
        })
        .collect())
}

/// The release of provider `name` in namespace `ns`: its Namespace, its CRD, its Deployment and
/// `copies` copies of every spec of `specs` as objects of that CRD.
fn release(
    name: &str,
    ns: &str,
    specs: &[(String, Value)],
    copies: usize,
) -> Result<String, Box<dyn std::error::Error>> {
    let group = format!("{name}.example.com");
    let labels = json!({"app": name});
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("fillers.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"kind": "Filler", "plural": "fillers", "singular": "filler", "listKind": "FillerList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("{name}-controller-manager"), "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "manager", "image": "registry.k8s.io/pause:3.10",
                        "imagePullPolicy": "IfNotPresent",
                        "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}, "limits": {"memory": "16Mi"}}}]}}}}),
    ];
    for k in 0..copies {
        for (crd, spec) in specs {
            objects.push(
                json!({"apiVersion": format!("{group}/v1"), "kind": "Filler",
                "metadata": {"name": format!("c{k}-{crd}"), "namespace": ns}, "spec": spec}),
            );
        }
    }
    Ok(capi_yaml::to_multi_doc(&objects)?)
}

/// The chart value granting the operator the providers' own API groups (`extraRules`, as a user
/// does for a provider shipping custom resources).
pub(super) fn extra_rules() -> String {
    let groups: Vec<String> = BIG
        .iter()
        .map(|(n, _)| format!("{n}.example.com"))
        .collect();
    let rules = json!([{"apiGroups": groups, "resources": ["fillers"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]);
    format!("extraRules={rules}")
}

/// The providers of [`BIG`] at `version`, their Deployments on the real node.
fn providers(version: &str) -> String {
    BIG.iter()
        .map(|(name, ns)| {
            format!(
                "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  version: {version}\n  fetchConfig:\n    url: https://github.com/acme/{name}/releases\n{ON_REAL_NODE}"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Installs the providers at v1.0.0, then upgrades all three at once to their large v2.0.0
/// releases; returns once every one is Ready at v2.0.0, and how long the upgrade took.
pub(super) async fn upgrade(
    cluster: &TestCluster,
    client: &Client,
) -> Result<Duration, Box<dyn std::error::Error>> {
    for (_, ns) in BIG {
        cluster.ensure_namespace(ns)?;
    }
    apply(cluster, &providers("v1.0.0"))?;
    all_ready(client, "v1.0.0").await?;
    let t0 = std::time::Instant::now();
    apply(cluster, &providers("v2.0.0"))?;
    all_ready(client, "v2.0.0").await?;
    Ok(t0.elapsed())
}

/// Waits until every provider is Ready at `version`.
async fn all_ready(client: &Client, version: &str) -> TestResult {
    for (name, ns) in BIG {
        let done = wait_for(T, || async {
            let p = provider(client, "InfrastructureProvider", ns, name).await?;
            let ready = p
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (ready && p.pointer("/status/installedVersion") == Some(&Value::from(version)))
                .then_some(())
        })
        .await;
        if done.is_none() {
            let p = provider(client, "InfrastructureProvider", ns, name).await;
            return Err(format!("{name} never Ready at {version}: {p:?}").into());
        }
    }
    Ok(())
}

/// Deletes the providers and their custom resources (which block a provider's deletion) and
/// waits until the providers are gone, so the operators of the later steps do not reconcile them.
/// The custom resources are deleted again while a provider stays: a pass of the operator that
/// began before the provider's deletion may have applied some anew.
pub(super) async fn remove(cluster: &TestCluster, client: &Client) -> TestResult {
    for (name, ns) in BIG {
        cluster.kubectl_ok(&[
            "delete",
            "-n",
            ns,
            "infrastructureprovider",
            name,
            "--wait=false",
        ])?;
    }
    for (name, ns) in BIG {
        let fillers = format!("fillers.{name}.example.com");
        let gone = wait_for(T, || async {
            if provider(client, "InfrastructureProvider", ns, name)
                .await
                .is_none()
            {
                return Some(());
            }
            let _ = cluster.kubectl(&["delete", "-n", ns, &fillers, "--all", "--wait=false"]);
            None
        })
        .await;
        assert!(gone.is_some(), "{name} was never deleted");
    }
    Ok(())
}
