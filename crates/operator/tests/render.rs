//! Golden tests of `capi-provider-operator render` on the real Cluster API v1.11.0 and v1.12.0
//! releases in ../shared/testdata (object counts, namespaces, labels, images, args).

use std::process::Command;

use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn render(
    provider_yaml: &str,
    extra: &[&str],
) -> Result<(bool, String, String), Box<dyn std::error::Error>> {
    let Some(shared) = capi_test_support::shared_dir() else {
        return Err("no shared dir".into());
    };
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let file = std::env::temp_dir().join(format!("render-{}-{n}.yaml", std::process::id()));
    std::fs::write(&file, provider_yaml)?;
    let out = Command::new(env!("CARGO_BIN_EXE_capi-provider-operator"))
        .arg("render")
        .arg("-f")
        .arg(&file)
        .arg("--repository")
        .arg(shared.join("testdata/providers"))
        .args(extra)
        .output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn skip() -> bool {
    if capi_test_support::shared_dir().is_none() {
        eprintln!("SKIPPED: ../shared (or CAPI_SHARED_DIR) not found; real releases not rendered");
        return true;
    }
    false
}

#[test]
fn real_releases_render_with_their_defaults() -> TestResult {
    if skip() {
        return Ok(());
    }
    // (kind, name, namespace, label, image name, objects, CRDs) per version.
    let cases = [
        (
            "CoreProvider",
            "cluster-api",
            "capi-system",
            "cluster-api",
            "cluster-api-controller",
            [(25, 12), (26, 13)],
        ),
        (
            "BootstrapProvider",
            "kubeadm",
            "capi-kubeadm-bootstrap-system",
            "bootstrap-kubeadm",
            "kubeadm-bootstrap-controller",
            [(14, 2), (14, 2)],
        ),
        (
            "ControlPlaneProvider",
            "kubeadm",
            "capi-kubeadm-control-plane-system",
            "control-plane-kubeadm",
            "kubeadm-control-plane-controller",
            [(15, 2), (15, 2)],
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
    if skip() {
        return Ok(());
    }
    let provider = "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata: {name: cluster-api, namespace: my-capi}\nspec:\n  version: v1.12.0\n  manager: {syncPeriod: 660, featureGates: {MachinePool: false}}\n  deployment:\n    replicas: 2\n    containers:\n    - name: manager\n      image: mirror.local/capi/cluster-api-controller:v1.12.0-patched\n      args: {namespace: ignored, sync-period: 1m}\n";
    let vars = std::env::temp_dir().join(format!("vars-{}.env", std::process::id()));
    std::fs::write(
        &vars,
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

#[test]
fn list_variables_and_errors() -> TestResult {
    if skip() {
        return Ok(());
    }
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
    let latest = provider.replace("spec: {version: v1.12.0}", "spec: {}");
    let (ok, out, err) = render(&latest, &[])?;
    assert!(ok, "{err}");
    assert!(out.contains("cluster-api-controller:v1.12.0"));
    Ok(())
}
