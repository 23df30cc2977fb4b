//! End-to-end with the real clusterctl (v1.12.0, built from the Go module proxy beside the real
//! managers): the operator keeps clusterctl's inventory, so clusterctl works on an
//! operator-managed management cluster.
//!
//! Two local control planes, each with the operator installing the real Cluster API core,
//! kubeadm bootstrap and kubeadm control-plane releases (air-gapped, from ConfigMaps) and the
//! project's sample infrastructure provider: the source at v1.11.0, the target at v1.12.0.
//! - `clusterctl upgrade plan` lists every provider at the version the operator installed, and
//!   `clusterctl describe cluster` reads a workload Cluster;
//! - `clusterctl move --dry-run` from the source to the target finds the workload Cluster and
//!   the infrastructure provider's Secrets (which it finds only through the inventory);
//! - a real `clusterctl move` checks the target's providers against the source's through both
//!   inventories (and refuses the other way round, where the target would be older);
//! - `clusterctl upgrade apply` on an operator-managed provider does not get past the operator
//!   (it puts back the replicas clusterctl scales down, with a `DriftRepaired` event naming
//!   clusterctl); with the operator stopped it does, and the operator, started again, applies the
//!   declared version again, inventory included, with a `ClusterctlChangeReverted` event;
//! - deleting a provider removes its entry.
//!
//! kwok's pods serve nothing, so the provider objects empty the releases' webhook
//! configurations and turn CRD conversion off (as `upgrade_real.rs` does).

use crate::support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use capi_test_support::{TestCluster, private_cluster, second_private_cluster, wait_for};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(180);
pub(crate) const INFRA_NS: &str = "sample-infra-system";

/// Everything this test needs from outside the repository, all built by `make providers`.
pub(crate) struct Parts {
    /// The assembled Cluster API releases.
    pub(crate) releases: PathBuf,
    /// cert-manager's CRDs alone (the releases use its kinds; no cert-manager runs).
    pub(crate) cert_manager_crds: PathBuf,
    pub(crate) clusterctl: PathBuf,
}

/// The parts, or an error naming what to build (`test` fails).
pub(crate) fn parts(test: &str) -> Result<Parts, Box<dyn std::error::Error>> {
    let clusterctl = capi_test_support::clusterctl("v1.12.0").ok_or_else(|| {
        format!(
            "{test}: clusterctl v1.12.0 is not built: run `make providers` \
             (e2e/scripts/build-providers.sh builds it beside the managers; set \
             CAPI_PROVIDER_IMAGES as make integration does)"
        )
    })?;
    Ok(Parts {
        releases: capi_test_support::releases()?,
        cert_manager_crds: capi_test_support::cert_manager_crds()?,
        clusterctl,
    })
}

fn providers(version: &str) -> String {
    let patches = capi_test_support::indent(capi_test_support::NEUTRALIZING_PATCHES, 2);
    let mut docs: Vec<String> = real::REAL_PROVIDERS
        .iter()
        .map(|(kind, ns, name, label, _)| {
            format!(
                "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  version: {version}\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {label}\n{patches}"
            )
        })
        .collect();
    docs.push(format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: sample-vars\n  namespace: {INFRA_NS}\nstringData:\n  SAMPLE_GREETING: hi\n---\napiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: sample\n  namespace: {INFRA_NS}\nspec:\n  version: v0.2.0\n  secretName: sample-vars\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: sample\n"
    ));
    docs.join("---\n")
}

/// One management cluster: CRDs, releases in ConfigMaps, the operator, the providers Ready.
pub(crate) async fn management_cluster(
    cluster: &TestCluster,
    parts: &Parts,
    version: &str,
) -> Result<(Client, capi_test_support::OperatorProcess), Box<dyn std::error::Error>> {
    cluster.install_crds()?;
    let cm_crds = parts.cert_manager_crds.to_string_lossy().into_owned();
    cluster.kubectl_ok(&["apply", "--server-side", "-f", &cm_crds])?;
    let client = cluster.client().await?;
    real::load_real_releases(cluster, &client, &parts.releases, &["v1.11.0", "v1.12.0"]).await?;
    cluster.ensure_namespace(INFRA_NS)?;
    release_configmap_from_dir(
        &client,
        INFRA_NS,
        &samples(),
        "sample-infrastructure",
        "v0.2.0",
        "infrastructure-components.yaml",
        &[("provider.cluster.x-k8s.io/name", "sample")],
    )
    .await?;
    let operator = start_operator(cluster, &[])?;
    apply(cluster, &providers(version))?;
    let all = real::REAL_PROVIDERS
        .iter()
        .map(|(kind, ns, name, _, _)| (*kind, *ns, *name))
        .chain([("InfrastructureProvider", INFRA_NS, "sample")]);
    for key in all {
        wait_condition(&client, key, "Ready", "True", None, T)
            .await
            .map_err(|e| format!("{e}\n--- operator log ---\n{}", operator.logs()))?;
    }
    Ok((client, operator))
}

fn inventory_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "clusterctl.cluster.x-k8s.io",
        "v1alpha3",
        "Provider",
    ));
    Api::all_with(client.clone(), &ar)
}

/// (namespace/name, providerName, type, version) of every inventory entry.
async fn inventory(client: &Client) -> Vec<(String, String, String, String)> {
    let Ok(list) = inventory_api(client).list(&ListParams::default()).await else {
        return Vec::new();
    };
    let mut out: Vec<_> = list
        .items
        .iter()
        .map(|o| {
            let s = |f: &str| {
                o.data
                    .get(f)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (
                format!(
                    "{}/{}",
                    o.metadata.namespace.as_deref().unwrap_or(""),
                    o.metadata.name.as_deref().unwrap_or("")
                ),
                s("providerName"),
                s("type"),
                s("version"),
            )
        })
        .collect();
    out.sort();
    out
}

fn expected_inventory(core_version: &str) -> Vec<(String, String, String, String)> {
    let mut want: Vec<_> = [
        (
            "capi-system/cluster-api",
            "cluster-api",
            "CoreProvider",
            core_version,
        ),
        (
            "capi-kubeadm-bootstrap-system/bootstrap-kubeadm",
            "kubeadm",
            "BootstrapProvider",
            core_version,
        ),
        (
            "capi-kubeadm-control-plane-system/control-plane-kubeadm",
            "kubeadm",
            "ControlPlaneProvider",
            core_version,
        ),
        (
            "sample-infra-system/infrastructure-sample",
            "sample",
            "InfrastructureProvider",
            "v0.2.0",
        ),
    ]
    .iter()
    .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
    .collect();
    want.sort();
    want
}

/// A clusterctl configuration naming local repositories in clusterctl's layout
/// (`<base>/<label>/<version>/<file>`) for the four providers. The Cluster API releases are
/// copied with their webhooks emptied and CRD conversion off, the edits the provider objects
/// make with spec.patches: kwok's pods serve no webhook, for clusterctl's installs either.
fn clusterctl_config(dir: &Path, releases: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let repo = dir.join("repository");
    for (_, _, _, label, file) in real::REAL_PROVIDERS {
        for v in ["v1.11.0", "v1.12.0"] {
            let (from, to) = (releases.join(label).join(v), repo.join(label).join(v));
            std::fs::create_dir_all(&to)?;
            std::fs::copy(from.join("metadata.yaml"), to.join("metadata.yaml"))?;
            let text = std::fs::read_to_string(from.join(file))?;
            std::fs::write(to.join(file), neutralized(&text)?)?;
        }
    }
    std::os::unix::fs::symlink(
        samples().join("sample-infrastructure"),
        repo.join("infrastructure-sample"),
    )?;
    let r = repo.to_string_lossy();
    let config = format!(
        "providers:\n\
- {{name: cluster-api, type: CoreProvider, url: \"file://{r}/cluster-api/v1.12.0/core-components.yaml\"}}\n\
- {{name: kubeadm, type: BootstrapProvider, url: \"file://{r}/bootstrap-kubeadm/v1.12.0/bootstrap-components.yaml\"}}\n\
- {{name: kubeadm, type: ControlPlaneProvider, url: \"file://{r}/control-plane-kubeadm/v1.12.0/control-plane-components.yaml\"}}\n\
- {{name: sample, type: InfrastructureProvider, url: \"file://{r}/infrastructure-sample/v0.2.0/infrastructure-components.yaml\"}}\n\
SAMPLE_GREETING: hi\n"
    );
    let path = dir.join("clusterctl.yaml");
    std::fs::write(&path, config)?;
    Ok(path)
}

/// A release with its webhook configurations emptied and CRD conversion off.
fn neutralized(text: &str) -> Result<String, Box<dyn std::error::Error>> {
    let mut docs = capi_yaml::parse_documents(text, &capi_yaml::Limits::default())?;
    for d in &mut docs {
        let kind = d.get("kind").and_then(Value::as_str).unwrap_or_default();
        if kind.ends_with("WebhookConfiguration") {
            if let Some(o) = d.as_object_mut() {
                o.remove("webhooks");
            }
        } else if kind == "CustomResourceDefinition"
            && let Some(spec) = d.get_mut("spec").and_then(Value::as_object_mut)
        {
            spec.insert("conversion".into(), serde_json::json!({"strategy": "None"}));
        }
    }
    Ok(capi_yaml::to_multi_doc(&docs)?)
}

/// Runs clusterctl with its own HOME (no user configuration, no version check).
fn clusterctl(
    parts: &Parts,
    home: &Path,
    args: &[&str],
) -> Result<(bool, String), Box<dyn std::error::Error>> {
    let out = Command::new(&parts.clusterctl)
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("$ clusterctl {}\n{text}", args.join(" "));
    Ok((out.status.success(), text))
}

/// The row of `upgrade plan` output for a provider: its whitespace-separated columns.
fn plan_row<'a>(out: &'a str, namespace: &str, kind: &str) -> Option<Vec<&'a str>> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.len() >= 5 && c[1] == namespace && c[2] == kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_sees_moves_and_cannot_silently_upgrade_operator_providers() -> TestResult {
    let test = "clusterctl_sees_moves_and_cannot_silently_upgrade_operator_providers";
    let parts = parts(test)?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let source = private_cluster()?;
    let target = second_private_cluster()?;
    let (src, src_operator) = management_cluster(source, &parts, "v1.11.0").await?;
    let (tgt, _tgt_operator) = management_cluster(target, &parts, "v1.12.0").await?;
    // The inventory, as clusterctl writes it, on both clusters.
    assert_eq!(inventory(&src).await, expected_inventory("v1.11.0"));
    assert_eq!(inventory(&tgt).await, expected_inventory("v1.12.0"));

    let work = tempdir()?;
    let config = clusterctl_config(&work, &parts.releases)?;
    let config = config.to_string_lossy();
    let src_kc = source.kubeconfig().to_string_lossy().into_owned();
    let tgt_kc = target.kubeconfig().to_string_lossy().into_owned();

    // upgrade plan: every provider, at the installed version, with the next one.
    let plan = |kubeconfig: &str| {
        clusterctl(
            &parts,
            &work,
            &[
                "upgrade",
                "plan",
                "--config",
                &config,
                "--kubeconfig",
                kubeconfig,
            ],
        )
    };
    let (ok, out) = plan(&src_kc)?;
    assert!(ok, "{out}");
    for (ns, kind, current, next) in [
        ("capi-system", "CoreProvider", "v1.11.0", "v1.12.0"),
        (
            "capi-kubeadm-bootstrap-system",
            "BootstrapProvider",
            "v1.11.0",
            "v1.12.0",
        ),
        (
            "capi-kubeadm-control-plane-system",
            "ControlPlaneProvider",
            "v1.11.0",
            "v1.12.0",
        ),
    ] {
        let row = plan_row(&out, ns, kind).ok_or_else(|| format!("no {kind} row in:\n{out}"))?;
        assert_eq!((row[3], row[4]), (current, next), "{kind}: {row:?}");
    }
    let infra = plan_row(&out, INFRA_NS, "InfrastructureProvider")
        .ok_or_else(|| format!("no InfrastructureProvider row in:\n{out}"))?;
    assert_eq!(infra[3], "v0.2.0", "{infra:?}");
    let (ok, out) = plan(&tgt_kc)?;
    assert!(ok, "{out}");
    let core = plan_row(&out, "capi-system", "CoreProvider").ok_or("no core row")?;
    assert_eq!(core[3], "v1.12.0", "{out}");
    assert!(out.contains("up to date"), "{out}");

    // move --dry-run: a workload Cluster in its namespace, and the infrastructure provider's
    // Secret marked for moving, which clusterctl looks for only in the namespaces its
    // inventory names for infrastructure providers.
    apply(
        source,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: workload\n---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: w1\n  namespace: workload\nspec:\n  paused: false\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: sample-credentials\n  namespace: sample-infra-system\n  labels:\n    clusterctl.cluster.x-k8s.io/move: \"\"\nstringData:\n  token: not-a-real-one\n",
    )?;
    let (ok, out) = clusterctl(
        &parts,
        &work,
        &[
            "move",
            "--dry-run",
            "-n",
            "workload",
            "-v",
            "5",
            "--kubeconfig",
            &src_kc,
            "--to-kubeconfig",
            &tgt_kc,
        ],
    )?;
    assert!(ok, "{out}");
    assert!(
        out.contains("\"Clusters\"=1") || out.contains("Clusters=1"),
        "the dry run did not find the workload Cluster:\n{out}"
    );
    assert!(
        out.contains("sample-credentials"),
        "the dry run did not find the infrastructure provider's Secret (found through the inventory):\n{out}"
    );

    // describe reads the workload Cluster as on any management cluster.
    let (ok, out) = clusterctl(
        &parts,
        &work,
        &[
            "describe",
            "cluster",
            "w1",
            "-n",
            "workload",
            "--kubeconfig",
            &src_kc,
        ],
    )?;
    assert!(ok && out.contains("Cluster/w1"), "{out}");

    // A real move between the two: clusterctl first checks every source provider against the
    // target's inventory. From the target (v1.12.0) to the source (v1.11.0) is refused...
    let move_empty = |from: &str, to: &str| {
        clusterctl(
            &parts,
            &work,
            &[
                "move",
                "-n",
                "empty",
                "--kubeconfig",
                from,
                "--to-kubeconfig",
                to,
            ],
        )
    };
    cluster_namespace(target, "empty")?;
    let (ok, out) = move_empty(&tgt_kc, &src_kc)?;
    assert!(!ok, "a move to older providers must be refused:\n{out}");
    assert!(
        out.contains("older than in the source cluster"),
        "the refusal should come from the inventory versions:\n{out}"
    );
    // ...and from the source to the target is accepted; the Secret marked for moving goes.
    cluster_namespace(source, "empty")?;
    let (ok, out) = move_empty(&src_kc, &tgt_kc)?;
    assert!(ok, "{out}");
    target.kubectl_ok(&["get", "secret", "sample-credentials", "-n", INFRA_NS])?;

    // clusterctl upgrade apply on the operator-managed core provider, the operator running:
    // clusterctl first scales the provider's Deployment to zero and waits; the operator puts
    // the declared replicas back at once and names clusterctl in an event; clusterctl gives up
    // and nothing changed.
    let upgrade = [
        "upgrade",
        "apply",
        "--config",
        &config,
        "--kubeconfig",
        &src_kc,
        "--core",
        "capi-system/cluster-api:v1.12.0",
    ];
    let (ok, out) = clusterctl(&parts, &work, &upgrade)?;
    assert!(
        !ok,
        "clusterctl upgrade apply got past the operator:\n{out}"
    );
    let repaired = events(source, "capi-system", "DriftRepaired")?;
    assert!(
        repaired.contains("Deployment capi-system/capi-controller-manager (changed by clusterctl)"),
        "no DriftRepaired event naming clusterctl: {repaired:?}"
    );
    assert_eq!(
        deployment_image(&src, "capi-system", "capi-controller-manager").await,
        Some("registry.k8s.io/cluster-api/cluster-api-controller:v1.11.0".to_string())
    );
    assert_eq!(inventory(&src).await, expected_inventory("v1.11.0"));

    // The same with the operator stopped: clusterctl replaces the components with v1.12.0 and
    // rewrites its inventory entry; the operator, started again, applies the declared v1.11.0
    // again and says so.
    let mut src_operator = src_operator;
    src_operator.kill();
    let (ok, out) = clusterctl(&parts, &work, &upgrade)?;
    assert!(ok, "clusterctl upgrade apply failed:\n{out}");
    assert_eq!(
        deployment_image(&src, "capi-system", "capi-controller-manager").await,
        Some("registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0".to_string()),
        "clusterctl did not upgrade"
    );
    let src_operator = start_operator(source, &[])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- source operator log ---\n{}", src_operator.logs()).into()
    };
    let restored = wait_for(T, || async {
        let inv = inventory(&src).await;
        let entry = inv.iter().find(|e| e.0 == "capi-system/cluster-api")?;
        let image = deployment_image(&src, "capi-system", "capi-controller-manager").await?;
        (entry.3 == "v1.11.0" && image.ends_with(":v1.11.0")).then_some(())
    })
    .await;
    restored.ok_or_else(|| {
        log("the declared v1.11.0 was not restored after clusterctl upgrade apply".into())
    })?;
    let reverted = wait_for(Duration::from_secs(30), || async {
        let e = events(source, "capi-system", "ClusterctlChangeReverted").ok()?;
        (!e.is_empty()).then_some(e)
    })
    .await
    .unwrap_or_default();
    assert!(
        reverted.contains("said v1.12.0") && reverted.contains("declared v1.11.0"),
        "no ClusterctlChangeReverted event: {reverted:?}"
    );
    let p = wait_condition(
        &src,
        ("CoreProvider", "capi-system", "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(log)?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v1.11.0"))
    );
    assert_eq!(inventory(&src).await, expected_inventory("v1.11.0"));

    // Deleting a provider removes its entry.
    source.kubectl_ok(&["delete", "infrastructureprovider", "sample", "-n", INFRA_NS])?;
    let gone = wait_for(T, || async {
        let inv = inventory(&src).await;
        (!inv.iter().any(|e| e.0.ends_with("/infrastructure-sample"))).then_some(())
    })
    .await;
    gone.ok_or_else(|| log("the deleted provider's inventory entry stayed".into()))?;
    Ok(())
}

/// The messages of the events of `reason` in `namespace`.
fn events(
    cluster: &TestCluster,
    namespace: &str,
    reason: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    Ok(cluster.kubectl_ok(&[
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        &format!("reason={reason}"),
        "-o",
        "jsonpath={.items[*].message}",
    ])?)
}

fn cluster_namespace(cluster: &TestCluster, name: &str) -> TestResult {
    cluster.ensure_namespace(name)?;
    Ok(())
}

async fn deployment_image(client: &Client, ns: &str, name: &str) -> Option<String> {
    let d = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    d.spec?.template.spec?.containers.first()?.image.clone()
}

/// A fresh temporary directory.
fn tempdir() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!(
        "capi-clusterctl-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
