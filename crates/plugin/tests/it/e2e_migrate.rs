//! End-to-end: the real Cluster API v1.11.0 core, kubeadm bootstrap and kubeadm control-plane
//! releases installed as clusterctl installs them (rendered objects created as they are, the
//! clusterctl labels, the `providers.clusterctl.cluster.x-k8s.io` inventory), then
//! `preload --apply` of v1.11.0 and v1.12.0 (compressed ConfigMaps), `migrate` (refusing first
//! when a variable would restart a controller), a check that no Deployment rolled out, and
//! `upgrade plan` / `upgrade apply --wait` to v1.12.0 through the operator.
//!
//! The local control plane runs no cert-manager and kwok's pods serve nothing, so the webhooks
//! of the releases could never answer: "clusterctl" installs them with the webhook
//! configurations emptied and CRD conversion off, and the adopted provider objects carry the
//! same edits as spec.patches (through `--provider-spec`), as an admin of such a cluster would.

use crate::support;

use std::time::Duration;

use capi_components::render;
use capi_operator_api::AnyProvider;
use capi_release::Release;
use capi_test_support::{TestCluster, private_cluster, wait_for};
use serde_json::{Value, json};
use support::*;

/// (kind, namespace, name, label, components file, Deployment)
const PROVIDERS: [(&str, &str, &str, &str, &str, &str); 3] = [
    (
        "CoreProvider",
        "capi-system",
        "cluster-api",
        "cluster-api",
        "core-components.yaml",
        "capi-controller-manager",
    ),
    (
        "BootstrapProvider",
        "capi-kubeadm-bootstrap-system",
        "kubeadm",
        "bootstrap-kubeadm",
        "bootstrap-components.yaml",
        "capi-kubeadm-bootstrap-controller-manager",
    ),
    (
        "ControlPlaneProvider",
        "capi-kubeadm-control-plane-system",
        "kubeadm",
        "control-plane-kubeadm",
        "control-plane-components.yaml",
        "capi-kubeadm-control-plane-controller-manager",
    ),
];

/// The migration is about the plugin taking over what clusterctl installed on kwok's pods
/// (which serve nothing), so the releases' webhooks and conversion are neutralized.
const SPEC: &str = capi_test_support::NEUTRALIZING_PATCHES;

const INVENTORY_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: providers.clusterctl.cluster.x-k8s.io
  labels: {clusterctl.cluster.x-k8s.io: "", clusterctl.cluster.x-k8s.io/core: inventory}
spec:
  group: clusterctl.cluster.x-k8s.io
  names: {kind: Provider, listKind: ProviderList, plural: providers, singular: provider}
  scope: Namespaced
  versions:
  - name: v1alpha3
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          providerName: {type: string}
          type: {type: string}
          version: {type: string}
          watchedNamespace: {type: string}
"#;

/// Installs v1.11.0 of the three providers the way clusterctl does.
fn clusterctl_init(cluster: &TestCluster, releases: &std::path::Path, dir: &TempDir) -> TestResult {
    let spec: Value = capi_yaml::from_str(SPEC)?;
    let crd = dir.0.join("inventory-crd.yaml");
    std::fs::write(&crd, INVENTORY_CRD)?;
    cluster.kubectl_ok(&["create", "-f", &crd.to_string_lossy()])?;
    let established = (0..300).any(|_| {
        let ok = cluster
            .kubectl_ok(&[
                "get",
                "crd",
                "providers.clusterctl.cluster.x-k8s.io",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
            ])
            .is_ok_and(|s| s.trim() == "True");
        if !ok {
            std::thread::sleep(Duration::from_millis(200));
        }
        ok
    });
    assert!(established, "the inventory CRD did not become Established");
    for (kind, ns, name, label, file, _) in PROVIDERS {
        let base = releases.join(label).join("v1.11.0");
        let release = Release {
            version: "v1.11.0".into(),
            metadata: std::fs::read_to_string(base.join("metadata.yaml"))?,
            components: std::fs::read_to_string(base.join(file))?,
        };
        // clusterctl's pipeline (the engine's), with the edits this cluster needs.
        let p = AnyProvider::from_value(json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"version": "v1.11.0", "patches": spec["patches"]},
        }))?;
        let rendered = render::render(&p, &release, |_| None)?;
        let mut objects = rendered.objects;
        objects.push(json!({
            "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
            "kind": "Provider",
            "metadata": {"name": label, "namespace": ns, "labels": {
                "clusterctl.cluster.x-k8s.io": "", "cluster.x-k8s.io/provider": label}},
            "providerName": name,
            "type": kind,
            "version": "v1.11.0",
        }));
        let path = dir.0.join(format!("{label}.yaml"));
        std::fs::write(&path, capi_yaml::to_multi_doc(&objects)?)?;
        cluster.kubectl_ok(&["create", "-f", &path.to_string_lossy()])?;
    }
    for (_, ns, _, _, _, deployment) in PROVIDERS {
        cluster.kubectl_ok(&[
            "wait",
            "--for",
            "condition=Available",
            "--timeout",
            "120s",
            "-n",
            ns,
            &format!("deployment/{deployment}"),
        ])?;
    }
    Ok(())
}

fn images(cluster: &TestCluster, ns: &str, deployment: &str) -> Vec<String> {
    get_json(cluster, &["deployment", "-n", ns, deployment])
        .ok()
        .and_then(|d| {
            d.pointer("/spec/template/spec/containers")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| c["image"].as_str().map(str::to_string))
                        .collect()
                })
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_providers_are_adopted_without_restart_then_upgraded() -> TestResult {
    let releases = capi_test_support::releases()?;
    let cert_manager_crds = capi_test_support::cert_manager_crds()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let start = std::time::Instant::now();
    let step = |what: &str| eprintln!("[{:>5.1}s] {what}", start.elapsed().as_secs_f64());
    let cluster = private_cluster()?;
    let repo = releases.to_string_lossy().into_owned();
    let dir = TempDir::new("capi-plugin-migrate")?;
    let spec = dir.0.join("provider-spec.yaml");
    std::fs::write(&spec, SPEC)?;
    let spec = spec.to_string_lossy().into_owned();
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "-f",
        &cert_manager_crds.to_string_lossy(),
    ])?;
    clusterctl_init(cluster, &releases, &dir)?;
    step("clusterctl-style install done");
    let mut before = Vec::new();
    for (_, ns, _, _, _, deployment) in PROVIDERS {
        before.push(cluster.rollout_state(ns, deployment)?);
    }

    cluster.install_crds()?;
    let operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };
    step("operator started");

    // Air-gapped: both versions of each provider preloaded into ConfigMaps.
    let mut preload = vec!["preload", "--apply", "--repository", &repo];
    let flags = [
        ("--core", "cluster-api"),
        ("--bootstrap", "kubeadm"),
        ("--control-plane", "kubeadm"),
    ];
    let values: Vec<String> = flags
        .iter()
        .map(|(_, n)| format!("{n}:v1.11.0,{n}:v1.12.0"))
        .collect();
    for ((flag, _), v) in flags.iter().zip(values.iter()) {
        preload.push(flag);
        preload.push(v);
    }
    let pre = plugin_ok(Some(cluster), &preload)?;
    assert!(
        pre.stderr
            .contains("release-core-cluster-api-v1.12.0 (compressed)"),
        "the v1.12.0 core release is above 1 MiB\n{}",
        pre.all()
    );
    step("preload --apply done");

    // Installed with a different variable, adoption would restart the core controller.
    let refused = plugin_env(
        Some(cluster),
        &[
            "migrate",
            "--preloaded",
            "--provider-spec",
            &spec,
            "--dry-run",
        ],
        &[("EXP_MACHINE_POOL", "false")],
    )?;
    assert!(!refused.ok, "{}", refused.all());
    assert!(
        refused
            .stdout
            .contains("would restart: Deployment capi-system/capi-controller-manager"),
        "{}",
        refused.all()
    );
    assert!(
        provider(cluster, "CoreProvider", "capi-system", "cluster-api").is_none(),
        "a dry run wrote a provider"
    );

    let migrate = plugin_ok(
        Some(cluster),
        &[
            "migrate",
            "--preloaded",
            "--provider-spec",
            &spec,
            "--timeout",
            "180s",
        ],
    )
    .map_err(log)?;
    step("migrate done");
    eprintln!("{}", migrate.stdout);
    assert!(
        migrate
            .stdout
            .contains("adopted 3 providers; no Deployment was changed"),
        "{}",
        migrate.all()
    );
    assert_eq!(
        migrate
            .stdout
            .matches("kept clusterctl inventory entry")
            .count(),
        3,
        "{}",
        migrate.all()
    );
    // clusterctl's inventory stays, now kept by the operator.
    assert_eq!(
        inventory_versions(cluster)?,
        ["v1.11.0"; 3],
        "{}",
        migrate.all()
    );
    for ((kind, ns, name, _, _, deployment), was) in PROVIDERS.iter().zip(before.iter()) {
        let p = provider(cluster, kind, ns, name).ok_or("provider object missing")?;
        assert!(ready_at(&p, "v1.11.0"), "{kind}: {p}");
        assert_eq!(
            &cluster.rollout_state(ns, deployment)?,
            was,
            "{kind}: the Deployment rolled out"
        );
        let d = get_json(cluster, &["deployment", "-n", ns, deployment])?;
        assert_eq!(
            d.pointer("/metadata/labels/management.cluster.x-k8s.io~1owner-kind"),
            Some(&Value::from(*kind)),
            "{kind}: the operator did not take the Deployment over"
        );
    }

    // Upgrade through the operator, from the preloaded v1.12.0 (same contract).
    let plan = plugin_ok(Some(cluster), &["upgrade", "plan"])?;
    let rows: Vec<&str> = plan
        .stdout
        .lines()
        .filter(|l| l.contains("v1.11.0"))
        .collect();
    assert_eq!(rows.len(), 3, "{}", plan.all());
    assert!(
        rows.iter()
            .all(|r| r.contains("v1beta2") && r.contains("v1.12.0")),
        "{}",
        plan.all()
    );
    let apply = plugin_ok(
        Some(cluster),
        &["upgrade", "apply", "--wait", "--timeout", "180s"],
    )
    .map_err(log)?;
    step("upgrade apply done");
    eprintln!("{}\n{}", plan.stdout, apply.stderr);
    assert!(
        apply
            .stderr
            .contains("the upgraded providers to be Ready: done"),
        "{}",
        apply.all()
    );
    for (kind, ns, name, _, _, deployment) in PROVIDERS {
        let p = provider(cluster, kind, ns, name).ok_or("provider object missing")?;
        assert!(ready_at(&p, "v1.12.0"), "{kind}: {p}");
        let imgs = images(cluster, ns, deployment);
        assert!(
            !imgs.is_empty() && imgs.iter().all(|i| i.ends_with(":v1.12.0")),
            "{kind}: {imgs:?}"
        );
    }
    // The operator moved clusterctl's inventory to the new version.
    assert_eq!(inventory_versions(cluster)?, ["v1.12.0"; 3]);
    // The CRD only v1.12.0 has is installed.
    wait_for(Duration::from_secs(30), || async {
        cluster
            .kubectl_ok(&["get", "crd", "ipaddresses.ipam.cluster.x-k8s.io"])
            .ok()
            .map(|_| ())
    })
    .await
    .ok_or("the v1.12.0 CRD is missing")?;
    Ok(())
}

/// The versions clusterctl's inventory records for the three providers (core, bootstrap,
/// control plane), each entry checked to be labelled as the operator's.
fn inventory_versions(cluster: &TestCluster) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for (kind, ns, _, label, _, _) in PROVIDERS {
        let entry = get_json(
            cluster,
            &["providers.clusterctl.cluster.x-k8s.io", "-n", ns, label],
        )?;
        assert_eq!(
            entry.pointer("/metadata/labels/management.cluster.x-k8s.io~1owner-kind"),
            Some(&Value::from(kind)),
            "{kind}: the inventory entry is not the operator's: {entry}"
        );
        out.push(
            entry
                .get("version")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        );
    }
    Ok(out)
}
