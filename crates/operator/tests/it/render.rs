//! Golden tests of `capi-provider-operator render` on the real Cluster API v1.11.0 and v1.12.0
//! releases the project assembles (`make providers`): object counts, namespaces, labels,
//! images, args, patches, additional manifests.

use std::process::Command;

use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn render(
    provider_yaml: &str,
    extra: &[&str],
) -> Result<(bool, String, String), Box<dyn std::error::Error>> {
    let releases = capi_test_support::releases()?;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let file = temp_file(&format!("render-{n}.yaml"), provider_yaml)?;
    let out = Command::new(env!("CARGO_BIN_EXE_capi-provider-operator"))
        .arg("render")
        .arg("-f")
        .arg(&*file)
        .arg("--repository")
        .arg(releases)
        .args(extra)
        .output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn real_releases_render_with_their_defaults() -> TestResult {
    // (kind, name, namespace, label, image name, objects, CRDs) per version; the objects count
    // clusterctl's inventory entry, which render prints last as the operator applies it. The
    // v1.11.0 core built from its module's config/ has the IPAddress CRD too: 13, where the
    // copy in cluster-api-operator's e2e resources has 12.
    let cases = [
        (
            "CoreProvider",
            "cluster-api",
            "capi-system",
            "cluster-api",
            "cluster-api-controller",
            [(27, 13), (27, 13)],
        ),
        (
            "BootstrapProvider",
            "kubeadm",
            "capi-kubeadm-bootstrap-system",
            "bootstrap-kubeadm",
            "kubeadm-bootstrap-controller",
            [(15, 2), (15, 2)],
        ),
        (
            "ControlPlaneProvider",
            "kubeadm",
            "capi-kubeadm-control-plane-system",
            "control-plane-kubeadm",
            "kubeadm-control-plane-controller",
            [(16, 2), (16, 2)],
        ),
    ];
    for (kind, name, ns, label, image, counts) in cases {
        for (version, (objects, crds)) in ["v1.11.0", "v1.12.0"].into_iter().zip(counts) {
            let provider = format!(
                "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{version: {version}}}\n"
            );
            let (ok, out, err) = render(&provider, &[])?;
            assert!(ok, "{kind} {version}: {err}");
            let objs = capi_yaml::parse_documents(&out, &capi_yaml::Limits::default())?;
            eprintln!("{kind} {version}: {} objects", objs.len());
            assert_eq!(objs.len(), objects, "{kind} {version} object count");
            let kinds: Vec<&str> = objs.iter().filter_map(|o| o["kind"].as_str()).collect();
            assert_eq!(
                kinds
                    .iter()
                    .filter(|k| **k == "CustomResourceDefinition")
                    .count(),
                crds
            );
            assert_eq!(kinds[0], "Namespace");
            assert_eq!(objs[0]["metadata"]["name"], ns);
            for o in &objs {
                assert_eq!(o["metadata"]["labels"]["cluster.x-k8s.io/provider"], label);
                assert_eq!(o["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"], "");
                if let Some(n) = o["metadata"].get("namespace") {
                    assert_eq!(n, ns, "{kind} {version} {}", o["metadata"]["name"]);
                }
            }
            let deployment = objs
                .iter()
                .find(|o| o["kind"] == "Deployment")
                .ok_or("no Deployment")?;
            let c = &deployment["spec"]["template"]["spec"]["containers"][0];
            assert_eq!(
                c["image"],
                format!("registry.k8s.io/cluster-api/{image}:{version}")
            );
            let args: Vec<&str> = c["args"]
                .as_array()
                .ok_or("no args")?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert!(args.contains(&"--leader-elect"), "{args:?}");
            assert!(args.contains(&"--diagnostics-address=:8443"), "{args:?}");
        }
    }
    Ok(())
}

#[test]
fn spec_customizations_and_variables_reach_the_deployment() -> TestResult {
    let provider = "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata: {name: cluster-api, namespace: my-capi}\nspec:\n  version: v1.12.0\n  manager: {syncPeriod: 660, featureGates: {MachinePool: false}}\n  deployment:\n    replicas: 2\n    containers:\n    - name: manager\n      image: mirror.local/capi/cluster-api-controller:v1.12.0-patched\n      args: {namespace: ignored, sync-period: 1m}\n";
    let vars = temp_file(
        "vars.env",
        "CAPI_DIAGNOSTICS_ADDRESS=:9443\nCLUSTER_TOPOLOGY=true\n",
    )?;
    let (ok, out, err) = render(provider, &["--variables", &vars.to_string_lossy()])?;
    assert!(ok, "{err}");
    let objs = capi_yaml::parse_documents(&out, &capi_yaml::Limits::default())?;
    assert_eq!(objs[0]["metadata"]["name"], "my-capi");
    let d = objs
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .ok_or("no Deployment")?;
    assert_eq!(d["metadata"]["namespace"], "my-capi");
    assert_eq!(d["spec"]["replicas"], 2);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["image"],
        "mirror.local/capi/cluster-api-controller:v1.12.0-patched"
    );
    let args: Vec<&str> = c["args"]
        .as_array()
        .ok_or("no args")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--diagnostics-address=:9443"), "{args:?}");
    assert!(args.contains(&"--sync-period=660s"), "{args:?}");
    assert!(
        !args.iter().any(|a| a.starts_with("--namespace")),
        "{args:?}"
    );
    let gates = args
        .iter()
        .find(|a| a.starts_with("--feature-gates="))
        .ok_or("no gates")?;
    assert!(
        gates.contains("ClusterTopology=true") && gates.contains("MachinePool=false"),
        "{gates}"
    );
    // Webhook services follow the provider into its namespace.
    let webhook = objs
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .ok_or("no webhook")?;
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["service"]["namespace"],
        "my-capi"
    );
    Ok(())
}

/// The highest `vX.Y.Z` directory under `dir`: the assembled releases hold every line the
/// project builds, and which is newest changes as lines are added.
fn newest_version(dir: &std::path::Path) -> Result<String, Box<dyn std::error::Error>> {
    let parse = |v: &str| -> Option<Vec<u64>> {
        v.strip_prefix('v')?
            .split('.')
            .map(|n| n.parse().ok())
            .collect()
    };
    let mut versions: Vec<(Vec<u64>, String)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(key) = parse(&name) {
            versions.push((key, name));
        }
    }
    versions
        .into_iter()
        .max()
        .map(|(_, name)| name)
        .ok_or_else(|| format!("no release in {}", dir.display()).into())
}

#[test]
fn list_variables_and_errors() -> TestResult {
    let provider = "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata: {name: cluster-api, namespace: capi-system}\nspec: {version: v1.12.0}\n";
    let (ok, out, _) = render(provider, &["--list-variables"])?;
    assert!(ok);
    assert_eq!(out.lines().count(), 11, "{out}");
    assert!(out.contains("CAPI_DIAGNOSTICS_ADDRESS=:8443"), "{out}");
    // An unknown version fails with a clear message and a non-zero exit.
    let missing = provider.replace("v1.12.0", "v9.9.9");
    let (ok, out, err) = render(&missing, &[])?;
    assert!(!ok && out.is_empty());
    assert!(err.contains("v9.9.9") && err.contains("not found"), "{err}");
    // No version: the latest release in the repository.
    let newest = newest_version(&capi_test_support::releases()?.join("cluster-api"))?;
    let latest = provider.replace("spec: {version: v1.12.0}", "spec: {}");
    let (ok, out, err) = render(&latest, &[])?;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("cluster-api-controller:{newest}")),
        "not {newest}"
    );
    Ok(())
}

/// A file the test writes for `render` to read, removed when dropped: the tests run many times,
/// and nothing of theirs should pile up in the temporary directory.
struct TempFile(std::path::PathBuf);

impl std::ops::Deref for TempFile {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp_file(name: &str, text: &str) -> Result<TempFile, Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::write(&path, text)?;
    Ok(TempFile(path))
}

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> Result<&'a Value, String> {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or_else(|| format!("no {kind} {name}"))
}

fn annotated(objs: &[Value], key: &str) -> Vec<String> {
    objs.iter()
        .filter(|o| o["metadata"]["annotations"].get(key).is_some())
        .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]).replace('"', ""))
        .collect()
}

#[test]
fn patches_with_targets_change_only_their_targets() -> TestResult {
    let provider = r#"apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata: {name: cluster-api, namespace: capi-system}
spec:
  version: v1.12.0
  deployment: {replicas: 2}
  patches:
  - target: {group: apps, version: v1, kind: Deployment, name: capi-controller-manager, namespace: capi-system}
    patch: |
      - op: test
        path: /spec/replicas
        value: 2
      - op: replace
        path: /spec/replicas
        value: 3
      - op: add
        path: /metadata/labels/example.com~1patched
        value: "yes"
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --added-by-patch
      - op: remove
        path: /spec/template/spec/tolerations/0
  - target: {group: "", kind: Service, labelSelector: "cluster.x-k8s.io/provider in (cluster-api), !absent"}
    patch: |
      metadata:
        annotations: {example.com/merged: "true"}
      spec:
        sessionAffinity: ClientIP
"#;
    let (ok, out, err) = render(provider, &[])?;
    assert!(ok, "{err}");
    let objs = capi_yaml::parse_documents(&out, &capi_yaml::Limits::default())?;
    assert_eq!(objs.len(), 27);
    let d = find(&objs, "Deployment", "capi-controller-manager")?;
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["labels"]["example.com/patched"], "yes");
    // The operator's labels are added after the patches.
    assert_eq!(
        d["metadata"]["labels"]["cluster.x-k8s.io/provider"],
        "cluster-api"
    );
    let pod = &d["spec"]["template"]["spec"];
    let args = pod["containers"][0]["args"].as_array().ok_or("no args")?;
    assert_eq!(args.last(), Some(&Value::from("--added-by-patch")));
    let tolerations = pod["tolerations"].as_array().ok_or("no tolerations")?;
    assert_eq!(tolerations.len(), 1);
    assert_eq!(
        tolerations[0]["key"],
        "node-role.kubernetes.io/control-plane"
    );
    let svc = find(&objs, "Service", "capi-webhook-service")?;
    assert_eq!(svc["spec"]["sessionAffinity"], "ClientIP");
    assert_eq!(svc["spec"]["ports"][0]["port"], 443);
    assert_eq!(
        annotated(&objs, "example.com/merged"),
        ["Service capi-webhook-service"]
    );
    Ok(())
}

#[test]
fn manifest_patches_match_kind_and_the_fields_they_give() -> TestResult {
    let provider = r#"apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata: {name: cluster-api, namespace: capi-system}
spec:
  version: v1.12.0
  manifestPatches:
  # No apiVersion: applies to every Deployment (the Go operator would match nothing).
  - |
    kind: Deployment
    spec: {replicas: 4}
  - |
    apiVersion: v1
    kind: ServiceAccount
    metadata:
      name: capi-manager
      annotations: {example.com/sa: "yes"}
  # A name restricts the patch to that ClusterRole, not capi-aggregated-manager-role.
  - |
    kind: ClusterRole
    metadata:
      name: capi-manager-role
      annotations: {example.com/role: "yes"}
  # A different apiVersion matches nothing.
  - |
    apiVersion: apps/v2
    kind: Deployment
    metadata:
      annotations: {example.com/wrong: "yes"}
"#;
    let (ok, out, err) = render(provider, &[])?;
    assert!(ok, "{err}");
    let objs = capi_yaml::parse_documents(&out, &capi_yaml::Limits::default())?;
    assert_eq!(objs.len(), 27);
    let d = find(&objs, "Deployment", "capi-controller-manager")?;
    assert_eq!(d["spec"]["replicas"], 4);
    // The merge kept the rest of the spec.
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        "capi-manager"
    );
    assert_eq!(
        annotated(&objs, "example.com/sa"),
        ["ServiceAccount capi-manager"]
    );
    assert_eq!(
        annotated(&objs, "example.com/role"),
        ["ClusterRole capi-manager-role"]
    );
    assert!(annotated(&objs, "example.com/wrong").is_empty());
    Ok(())
}

#[test]
fn patch_errors_fail_the_render() -> TestResult {
    let base = "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata: {name: cluster-api, namespace: capi-system}\nspec:\n  version: v1.12.0\n";
    let missing = format!(
        "{base}  patches:\n  - target: {{kind: Deployment}}\n    patch: '[{{op: replace, path: /spec/nothing/here, value: 1}}]'\n"
    );
    let (ok, out, err) = render(&missing, &[])?;
    assert!(!ok && out.is_empty());
    assert!(
        err.contains("spec.patches[0] on Deployment capi-system/capi-controller-manager: operation [0] (replace /spec/nothing/here) failed: path not found"),
        "{err}"
    );
    let selector = format!(
        "{base}  patches:\n  - target: {{labelSelector: 'a in b'}}\n    patch: '{{a: 1}}'\n"
    );
    let (ok, _, err) = render(&selector, &[])?;
    assert!(!ok);
    assert!(
        err.contains("spec.patches[0].target.labelSelector: label selector \"a in b\""),
        "{err}"
    );
    let both = format!(
        "{base}  patches: [{{patch: '{{a: 1}}'}}]\n  manifestPatches: ['kind: Deployment']\n"
    );
    let (ok, _, err) = render(&both, &[])?;
    assert!(!ok);
    assert!(
        err.contains("cannot use both spec.patches and spec.manifestPatches"),
        "{err}"
    );
    Ok(())
}

#[test]
fn additional_manifests_get_the_provider_labels_and_namespace() -> TestResult {
    let provider = "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata: {name: cluster-api, namespace: my-capi}\nspec:\n  version: v1.12.0\n  additionalManifests: {name: extra}\n  manifestPatches:\n  - |\n    kind: ConfigMap\n    metadata: {name: extra-settings}\n    data: {patched: \"yes\"}\n";
    let manifests = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra-settings}\ndata: {level: \"${EXTRA_LEVEL:=info}\"}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: extra-reader}\nrules: []\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: elsewhere}\n";
    let plain = temp_file("extra-plain.yaml", manifests)?;
    let as_configmap = temp_file(
        "extra-configmap.yaml",
        &capi_yaml::to_string(&serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "extra", "namespace": "my-capi"},
            "data": {"manifests": manifests},
        }))?,
    )?;
    let vars = temp_file("extra-vars.env", "EXTRA_LEVEL=debug\n")?;
    for file in [&plain, &as_configmap] {
        let (ok, out, err) = render(
            provider,
            &[
                "--additional-manifests",
                &file.to_string_lossy(),
                "--variables",
                &vars.to_string_lossy(),
            ],
        )?;
        assert!(ok, "{}: {err}", file.display());
        let objs = capi_yaml::parse_documents(&out, &capi_yaml::Limits::default())?;
        assert_eq!(objs.len(), 30, "{}", file.display());
        for o in &objs {
            assert_eq!(
                o["metadata"]["labels"]["cluster.x-k8s.io/provider"],
                "cluster-api"
            );
            assert_eq!(o["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"], "");
        }
        let cm = find(&objs, "ConfigMap", "extra-settings")?;
        assert_eq!(cm["metadata"]["namespace"], "my-capi");
        assert_eq!(cm["data"]["level"], "debug");
        assert_eq!(cm["data"]["patched"], "yes");
        let role = find(&objs, "ClusterRole", "extra-reader")?;
        assert!(role["metadata"].get("namespace").is_none());
        let kept = find(&objs, "ConfigMap", "kept")?;
        assert_eq!(kept["metadata"]["namespace"], "elsewhere");
        // The wrapping ConfigMap itself is not rendered.
        assert!(find(&objs, "ConfigMap", "extra").is_err());
    }
    // Their variables are listed with the release's.
    let (ok, out, err) = render(
        provider,
        &[
            "--list-variables",
            "--additional-manifests",
            &plain.to_string_lossy(),
        ],
    )?;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 12, "{out}");
    assert!(out.contains("EXTRA_LEVEL=info"), "{out}");
    // An object of the release cannot be redefined.
    let dup = temp_file(
        "extra-dup.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: capi-manager}\n",
    )?;
    let (ok, _, err) = render(
        provider,
        &["--additional-manifests", &dup.to_string_lossy()],
    )?;
    assert!(!ok);
    assert!(
        err.contains("spec.additionalManifests: ServiceAccount my-capi/capi-manager is already part of the provider"),
        "{err}"
    );
    Ok(())
}

/// `render` prints what the operator applies: owner labels on every object, a paused
/// provider's Deployments at zero replicas (remembering theirs), and aggregated ClusterRoles
/// without the rules the apiserver's aggregation controller owns.
#[test]
fn render_prints_what_the_operator_applies() -> TestResult {
    let provider = "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata: {name: cluster-api, namespace: capi-system}\nspec: {version: v1.12.0, paused: true}\n";
    let (ok, out, err) = render(provider, &[])?;
    assert!(ok, "{err}");
    let objs = capi_yaml::parse_documents(&out, &capi_yaml::Limits::default())?;
    assert_eq!(
        objs.len(),
        27,
        "a paused first install applies every object, and clusterctl's inventory entry"
    );
    let entry = find(&objs, "Provider", "cluster-api")?;
    assert_eq!(entry["apiVersion"], "clusterctl.cluster.x-k8s.io/v1alpha3");
    assert_eq!(entry["metadata"]["namespace"], "capi-system");
    assert_eq!(
        (&entry["providerName"], &entry["type"], &entry["version"]),
        (
            &Value::from("cluster-api"),
            &Value::from("CoreProvider"),
            &Value::from("v1.12.0")
        )
    );
    for o in &objs {
        let labels = &o["metadata"]["labels"];
        assert_eq!(
            labels["management.cluster.x-k8s.io/owner-kind"],
            "CoreProvider"
        );
        assert_eq!(
            labels["management.cluster.x-k8s.io/owner-name"],
            "cluster-api"
        );
        assert_eq!(
            labels["management.cluster.x-k8s.io/owner-namespace"],
            "capi-system"
        );
    }
    let d = find(&objs, "Deployment", "capi-controller-manager")?;
    assert_eq!(d["spec"]["replicas"], 0);
    assert_eq!(
        d["metadata"]["annotations"]["management.cluster.x-k8s.io/original-controller-replicas"],
        "1"
    );
    let aggregated: Vec<&Value> = objs
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" && o.get("aggregationRule").is_some())
        .collect();
    assert!(
        !aggregated.is_empty(),
        "the v1.12.0 core release aggregates a ClusterRole"
    );
    for r in aggregated {
        assert!(r.get("rules").is_none(), "{}", r["metadata"]["name"]);
    }
    Ok(())
}
