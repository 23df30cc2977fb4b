//! The provider CRDs on a real API server: every example of the specification is accepted, bad
//! objects are refused with clear messages, the managed-by annotation is one-way, and kubectl's
//! category, printer columns and explain work.

use std::time::Duration;

use capi_operator_api::{AnyProvider, ContainerImage, ProviderType};
use capi_test_support::{TestCluster, cluster, workspace_root};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const EXAMPLE_NAMESPACES: [&str; 4] = [
    "capa-system",
    "capi-kubeadm-control-plane-system",
    "capz-system",
    "capv-system",
];

fn setup() -> Result<&'static TestCluster, Box<dyn std::error::Error>> {
    let c = cluster()?;
    c.install_crds()?;
    Ok(c)
}

fn example_files() -> Result<Vec<std::path::PathBuf>, std::io::Error> {
    let mut files: Vec<_> = std::fs::read_dir(workspace_root().join("examples/specification"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    Ok(files)
}

#[test]
fn every_specification_example_is_accepted() -> TestResult {
    let c = setup()?;
    for ns in EXAMPLE_NAMESPACES {
        c.ensure_namespace(ns)?;
    }
    let files = example_files()?;
    assert_eq!(files.len(), 6, "the specification has six YAML examples");
    for f in &files {
        let path = f.to_string_lossy();
        let (ok, out, err) =
            c.kubectl(&["apply", "--server-side", "--dry-run=server", "-f", &path])?;
        assert!(ok, "{path} was refused: {err}");
        assert!(
            out.contains("serverside-applied (server dry run)"),
            "{path}: {out}"
        );
    }
    Ok(())
}

fn example_provider(file: &str, index: usize) -> Result<AnyProvider, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(workspace_root().join("examples/specification").join(file))?;
    let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())?;
    let providers: Vec<AnyProvider> = docs
        .into_iter()
        .filter_map(|d| AnyProvider::from_value(d).ok())
        .collect();
    providers
        .get(index)
        .cloned()
        .ok_or_else(|| format!("{file}: no provider #{index}").into())
}

#[test]
fn examples_mean_what_the_specification_says() -> TestResult {
    let p = example_provider("01-aws-controller-flags.yaml", 0)?;
    assert_eq!(p.provider_type, ProviderType::Infrastructure);
    let spec = p.spec.normalized();
    let manager = spec.manager.clone().ok_or("manager missing")?;
    assert_eq!(
        manager.sync_period,
        Some(IntOrString::String("660s".into()))
    );
    assert_eq!(
        manager.metrics.and_then(|m| m.bind_address).as_deref(),
        Some(":8181")
    );
    let container = &spec
        .deployment
        .clone()
        .ok_or("deployment missing")?
        .containers[0];
    let args = container.args.clone().ok_or("args missing")?;
    assert_eq!(
        args["awscluster-concurrency"],
        IntOrString::String("12".into())
    );
    assert_eq!(
        args["awsmachine-concurrency"],
        IntOrString::String("11".into())
    );

    let p = example_provider("02-aws-image-override.yaml", 0)?;
    let spec = p.spec.normalized();
    let image = spec.deployment.ok_or("deployment missing")?.containers[0]
        .image
        .clone()
        .ok_or("image missing")?;
    let ContainerImage::Meta(meta) = image else {
        return Err("image not normalized to pieces".into());
    };
    assert_eq!(meta.repository.as_deref(), Some("gcr.io/myregistry"));
    assert_eq!(meta.name.as_deref(), Some("capa-controller"));
    assert_eq!(meta.tag.as_deref(), Some("v0.6.0-foo"));

    let p = example_provider("05-vsphere-default-fetch.yaml", 0)?;
    assert!(p.spec.fetch_config.is_none());
    let p = example_provider("06-air-gapped-configmaps.yaml", 0)?;
    let selector = p
        .spec
        .fetch_config
        .and_then(|f| f.selector)
        .ok_or("selector missing")?;
    assert_eq!(
        selector
            .match_labels
            .unwrap_or_default()
            .get("provider-components")
            .map(String::as_str),
        Some("azure")
    );
    Ok(())
}

/// (case, spec as YAML, expected part of the error message)
const INVALID: &[(&str, &str, &str)] = &[
    (
        "url and selector",
        "fetchConfig: {url: 'https://github.com/o/r/releases', selector: {matchLabels: {a: b}}}",
        "fetchConfig must set exactly one of url, selector or oci",
    ),
    (
        "url and oci",
        "fetchConfig: {url: 'https://github.com/o/r/releases', oci: 'registry.example/p:v1'}",
        "fetchConfig must set exactly one of url, selector or oci",
    ),
    (
        "empty fetchConfig",
        "fetchConfig: {}",
        "fetchConfig must set exactly one of url, selector or oci",
    ),
    (
        "version without v",
        "version: 1.2.3",
        "version must be a semantic version with a \"v\" prefix",
    ),
    (
        "version not semver",
        "version: v1.2",
        "version must be a semantic version with a \"v\" prefix",
    ),
    (
        "version latest",
        "version: latest",
        "version must be a semantic version with a \"v\" prefix",
    ),
    (
        "plain http url",
        "fetchConfig: {url: 'http://github.com/o/r/releases'}",
        "fetchConfig.url must be an https:// URL",
    ),
    (
        "zero concurrency",
        "manager: {maxConcurrentReconciles: 0}",
        "spec.manager.maxConcurrentReconciles: Invalid value: 0: spec.manager.maxConcurrentReconciles in body should be greater than or equal to 1",
    ),
    (
        "debug with verbosity",
        "manager: {debug: true, verbosity: 3}",
        "with debug true no other manager field may be set",
    ),
    (
        "debug with feature gates",
        "manager: {debug: true, featureGates: {ClusterTopology: true}}",
        "with debug true no other manager field may be set",
    ),
    (
        "unknown deletion policy",
        "deletionPolicy: Delete",
        "spec.deletionPolicy: Unsupported value: \"Delete\": supported values: \"Block\", \"Orphan\", \"Purge\"",
    ),
    (
        "negative replicas",
        "deployment: {replicas: -1}",
        "should be greater than or equal to 0",
    ),
    (
        "unknown field",
        "versoin: v1.0.0",
        ".spec.versoin: field not declared in schema",
    ),
    (
        "patches and manifestPatches",
        "{manifestPatches: ['{kind: Deployment}'], patches: [{patch: '{}'}]}",
        "use either patches or the legacy manifestPatches, not both",
    ),
    (
        "container without name",
        "deployment: {containers: [{args: {v: '2'}}]}",
        "spec.deployment.containers[0].name: Required value",
    ),
];

#[test]
fn invalid_objects_are_rejected_with_clear_messages() -> TestResult {
    let c = setup()?;
    c.ensure_namespace("capi-invalid-objects")?;
    let dir = std::env::temp_dir().join(format!("capi-invalid-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let provider = |name: &str, spec: &str| {
        format!(
            "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: {name}\n  namespace: capi-invalid-objects\nspec:\n  {spec}\n"
        )
    };
    let dry_run = |name: &str, doc: String| -> Result<(bool, String), Box<dyn std::error::Error>> {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, doc)?;
        let (ok, _, err) = c.kubectl(&[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            &file.to_string_lossy(),
        ])?;
        Ok((ok, err))
    };
    for (i, (case, spec, want)) in INVALID.iter().enumerate() {
        let name = format!("bad-{i}");
        let (ok, err) = dry_run(&name, provider(&name, spec))?;
        assert!(!ok, "case {case:?} was accepted");
        assert!(
            err.contains(want),
            "case {case:?}: expected {want:?} in:\n{err}"
        );
    }
    // A name too long for the label every installed object carries (after the kind's prefix,
    // `infrastructure-`: 63 - 15 = 48) is refused at once, in both APIs; 48 characters are fine.
    let long = "p".repeat(49);
    for api in [
        "management.cluster.x-k8s.io/v1alpha1",
        "operator.cluster.x-k8s.io/v1alpha2",
    ] {
        let doc = |name: &str| {
            format!(
                "apiVersion: {api}\nkind: InfrastructureProvider\nmetadata:\n  name: {name}\n  namespace: capi-invalid-objects\nspec: {{}}\n"
            )
        };
        let (ok, err) = dry_run("long-name", doc(&long))?;
        assert!(!ok, "{api}: a 49-character name was accepted");
        assert!(
            err.contains("must be at most 48 characters"),
            "{api}: {err}"
        );
        let (ok, err) = dry_run("longest-name", doc(&long[..48]))?;
        assert!(ok, "{api}: a 48-character name was refused: {err}");
    }
    // The valid forms next to them are accepted.
    let good = "version: v1.2.3-rc.1+build.5\n  manager: {debug: true}\n  fetchConfig: {oci: 'registry.example/p:v1'}";
    let (ok, err) = dry_run("good", provider("good", good))?;
    assert!(ok, "a valid object was refused: {err}");
    // No spec at all (the specification's `json:"spec,omitempty"`): accepted, defaulted to {}.
    let file = dir.join("no-spec.yaml");
    std::fs::write(
        &file,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: capi-invalid-objects\n",
    )?;
    let out = c.kubectl_ok(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-o",
        "jsonpath={.spec}",
        "-f",
        &file.to_string_lossy(),
    ])?;
    assert_eq!(out.trim(), "{}", "a provider without spec");
    Ok(())
}

/// The operator writes a resolved `spec.version` as a merge patch naming the resourceVersion it
/// read (as the mocked apiserver of the fast tier assumes): a version the user set since then
/// must make that write fail with a conflict, never be overwritten.
#[test]
fn a_version_write_naming_a_stale_resource_version_conflicts() -> TestResult {
    let c = setup()?;
    let ns = format!("capi-version-cas-{}", std::process::id());
    c.ensure_namespace(&ns)?;
    let file = std::env::temp_dir().join(format!("{ns}.yaml"));
    std::fs::write(
        &file,
        format!(
            "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: {ns}\n"
        ),
    )?;
    c.kubectl_ok(&["create", "-f", &file.to_string_lossy()])?;
    let get = |path: &str| {
        c.kubectl_ok(&[
            "get",
            "-n",
            &ns,
            "coreprovider/cluster-api",
            "-o",
            &format!("jsonpath={{{path}}}"),
        ])
    };
    let read = get(".metadata.resourceVersion")?;
    // The user sets a version after the operator read the object.
    c.kubectl_ok(&[
        "patch",
        "-n",
        &ns,
        "coreprovider/cluster-api",
        "--type=merge",
        "-p",
        r#"{"spec":{"version":"v0.9.0"}}"#,
    ])?;
    let operator_write = format!(
        r#"{{"metadata":{{"resourceVersion":"{}"}},"spec":{{"version":"v1.0.0"}}}}"#,
        read.trim()
    );
    let (ok, _, err) = c.kubectl(&[
        "patch",
        "-n",
        &ns,
        "coreprovider/cluster-api",
        "--type=merge",
        "-p",
        &operator_write,
    ])?;
    assert!(!ok, "a write on a stale read went through");
    assert!(err.contains("the object has been modified"), "{err}");
    assert_eq!(get(".spec.version")?.trim(), "v0.9.0");
    Ok(())
}

#[test]
fn managed_by_annotation_is_one_way() -> TestResult {
    let c = setup()?;
    let policy = workspace_root().join("manifests/policies/managed-by-one-way.yaml");
    c.kubectl_ok(&["apply", "--server-side", "-f", &policy.to_string_lossy()])?;
    let ns = format!("capi-managed-by-{}", std::process::id());
    c.ensure_namespace(&ns)?;
    let obj = format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: BootstrapProvider\nmetadata:\n  name: kubeadm\n  namespace: {ns}\nspec:\n  version: v1.12.0\n"
    );
    let file = std::env::temp_dir().join(format!("{ns}.yaml"));
    std::fs::write(&file, obj)?;
    c.kubectl_ok(&["apply", "--server-side", "-f", &file.to_string_lossy()])?;

    // Handing the provider to an external manager is allowed.
    c.kubectl_ok(&[
        "annotate",
        "-n",
        &ns,
        "bootstrapprovider/kubeadm",
        "cluster.x-k8s.io/managed-by=gitops-tool",
    ])?;
    // Other changes to an externally managed provider are allowed too.
    c.kubectl_ok(&[
        "label",
        "-n",
        &ns,
        "bootstrapprovider/kubeadm",
        "team=platform",
    ])?;

    // Taking it back is refused. The policy becomes active a moment after it is created.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let err = loop {
        let (ok, _, err) = c.kubectl(&[
            "annotate",
            "-n",
            &ns,
            "bootstrapprovider/kubeadm",
            "cluster.x-k8s.io/managed-by-",
        ])?;
        if !ok {
            break err;
        }
        // The removal went through before the policy was active: put the annotation back.
        c.kubectl_ok(&[
            "annotate",
            "-n",
            &ns,
            "bootstrapprovider/kubeadm",
            "cluster.x-k8s.io/managed-by=gitops-tool",
        ])?;
        assert!(
            std::time::Instant::now() < deadline,
            "the policy never refused the removal"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        err.contains("cannot be turned back into one managed by the operator"),
        "{err}"
    );
    let still = c.kubectl_ok(&[
        "get",
        "-n",
        &ns,
        "bootstrapprovider/kubeadm",
        "-o",
        "jsonpath={.metadata.annotations}",
    ])?;
    assert!(still.contains("gitops-tool"), "{still}");
    c.kubectl_ok(&["delete", "namespace", &ns, "--wait=false"])?;
    Ok(())
}

#[test]
fn kubectl_lists_every_kind_and_explains_fields() -> TestResult {
    let c = setup()?;
    let ns = format!("capi-kinds-{}", std::process::id());
    c.ensure_namespace(&ns)?;
    let mut docs = String::new();
    for t in ProviderType::ALL {
        docs.push_str(&format!(
            "---\napiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {}\nmetadata:\n  name: sample-{}\n  namespace: {ns}\nspec:\n  version: v1.12.0\n",
            t.kind(),
            t.word()
        ));
    }
    let file = std::env::temp_dir().join(format!("{ns}.yaml"));
    std::fs::write(&file, docs)?;
    c.kubectl_ok(&["apply", "--server-side", "-f", &file.to_string_lossy()])?;

    let listed = c.kubectl_ok(&["get", "capi-providers", "-A"])?;
    for t in ProviderType::ALL {
        let row = format!(
            "{}.management.cluster.x-k8s.io/sample-{}",
            t.kind().to_lowercase(),
            t.word()
        );
        assert!(listed.contains(&row), "{row} missing from:\n{listed}");
    }
    let header = c.kubectl_ok(&["get", "coreproviders", "-n", &ns])?;
    let first = header.lines().next().unwrap_or_default();
    for col in [
        "NAME",
        "VERSION",
        "INSTALLED",
        "READY",
        "PAUSED",
        "DELETION",
        "AGE",
    ] {
        assert!(first.contains(col), "column {col} missing: {first}");
    }
    let short = c.kubectl_ok(&["get", "cacp", "-n", &ns, "-o", "name"])?;
    assert!(
        short.contains("coreprovider.management.cluster.x-k8s.io/sample-core"),
        "{short}"
    );

    let explain = c.kubectl_ok(&["explain", "coreprovider.spec.fetchConfig"])?;
    for text in [
        "exactly one",
        "selector",
        "url",
        "oci",
        "air-gapped",
        "GitLab",
    ] {
        assert!(
            explain.contains(text),
            "{text:?} missing from explain:\n{explain}"
        );
    }
    let explain = c.kubectl_ok(&["explain", "infrastructureprovider.spec.manager.syncPeriod"])?;
    assert!(
        explain.contains("bare integer is read as seconds"),
        "{explain}"
    );
    c.kubectl_ok(&["delete", "namespace", &ns, "--wait=false"])?;
    Ok(())
}
