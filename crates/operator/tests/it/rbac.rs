//! The operator's own RBAC: running as the shipped ServiceAccount, bound to exactly the shipped
//! ClusterRole and leader-election Role (not cluster-admin), it installs the real releases.
//! A test binary of its own, so its core provider meets no other test's.

use crate::support;

use std::time::Duration;

use capi_test_support::{private_cluster, workspace_root};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(120);

/// The operator running as the shipped ServiceAccount (impersonated), bound to exactly the
/// shipped ClusterRole and leader-election Role, installs the real v1.12.0 core, kubeadm
/// bootstrap and kubeadm control-plane releases: the RBAC is enough, without cluster-admin.
#[tokio::test]
async fn operator_works_with_exactly_the_shipped_rbac() -> TestResult {
    let releases = capi_test_support::releases()?;
    let cm_crds = capi_test_support::cert_manager_crds()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let root = workspace_root();
    for f in [
        "namespace.yaml",
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
        "leader-election-role.yaml",
    ] {
        cluster.kubectl_ok(&[
            "apply",
            "--server-side",
            "-f",
            &root.join("manifests/operator").join(f).to_string_lossy(),
        ])?;
    }
    cluster.kubectl_ok(&["apply", "--server-side", "-f", &cm_crds.to_string_lossy()])?;
    let client = cluster.client().await?;
    let providers = [
        (
            "CoreProvider",
            "rbac-capi",
            "cluster-api",
            "cluster-api",
            "core-components.yaml",
        ),
        (
            "BootstrapProvider",
            "rbac-bootstrap",
            "kubeadm",
            "bootstrap-kubeadm",
            "bootstrap-components.yaml",
        ),
        (
            "ControlPlaneProvider",
            "rbac-control-plane",
            "kubeadm",
            "control-plane-kubeadm",
            "control-plane-components.yaml",
        ),
    ];
    let mut manifest = String::new();
    for (kind, ns, name, label, file) in providers {
        cluster.ensure_namespace(ns)?;
        release_configmap_from_dir(
            &client,
            ns,
            &releases,
            label,
            "v1.12.0",
            file,
            &[("provider.cluster.x-k8s.io/name", label)],
        )
        .await?;
        manifest.push_str(&format!(
            "---\napiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  version: v1.12.0\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {label}\n"
        ));
    }

    // The test's kubeconfig, impersonating the operator's ServiceAccount.
    let mut kc: Value = capi_yaml::from_str(&std::fs::read_to_string(cluster.kubeconfig())?)?;
    for u in kc
        .get_mut("users")
        .and_then(Value::as_array_mut)
        .ok_or("kubeconfig without users")?
    {
        if let Some(user) = u.get_mut("user").and_then(Value::as_object_mut) {
            user.insert(
                "as".into(),
                "system:serviceaccount:capi-operator-system:capi-provider-operator".into(),
            );
            user.insert(
                "as-groups".into(),
                serde_json::json!([
                    "system:serviceaccounts",
                    "system:serviceaccounts:capi-operator-system",
                    "system:authenticated"
                ]),
            );
        }
    }
    let sa_kubeconfig =
        std::env::temp_dir().join(format!("capi-sa-kubeconfig-{}", std::process::id()));
    std::fs::write(&sa_kubeconfig, capi_yaml::to_string(&kc)?)?;
    // The identity really is limited: it may list everything (to find custom resources) but
    // not read a single node.
    let (ok, _, err) = cluster.kubectl(&[
        "--as",
        "system:serviceaccount:capi-operator-system:capi-provider-operator",
        "get",
        "node",
        "kwok-node-0",
    ])?;
    assert!(
        !ok && err.contains("forbidden"),
        "impersonation in effect: {err}"
    );

    let log = std::env::temp_dir().join(format!("capi-sa-operator-{}.log", std::process::id()));
    let mut child = std::process::Command::new(operator_bin())
        .args([
            "run",
            "--leader-elect",
            "--leader-election-namespace",
            "capi-operator-system",
        ])
        .env("KUBECONFIG", &sa_kubeconfig)
        .env("RUST_LOG", "info")
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    apply(cluster, &manifest)?;
    let mut result = Ok(());
    for (kind, ns, name, _, _) in providers {
        if let Err(e) = wait_condition(&client, (kind, ns, name), "Ready", "True", None, T).await {
            result = Err(format!(
                "{e}\n--- operator log ---\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ));
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    result?;
    assert!(
        !logs.contains("forbidden"),
        "the operator was refused something:\n{logs}"
    );
    Ok(())
}
