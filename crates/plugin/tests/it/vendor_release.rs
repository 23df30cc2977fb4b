//! A vendor-packaged infrastructure release (tests/data/infrastructure-vendor) whose text is
//! YAML only while its `${...}` expressions are read as text: `describe`, `verify` and
//! `preload` read it as published, as clusterctl's `generate provider --describe` does, and
//! `init` still substitutes it for real.

use crate::support;

use capi_release_sources::configmap::from_configmap;
use capi_test_support::cluster;
use serde_json::Value;
use support::*;

const IMAGE: &str = "registry.example/capa-controller:${CAPA_CONTROLLER_IMAGE_TAG}";

/// The directory holding the release, in clusterctl's local-repository layout.
fn repository() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .to_string_lossy()
        .into_owned()
}

fn components() -> std::io::Result<String> {
    std::fs::read_to_string(
        std::path::Path::new(&repository())
            .join("infrastructure-vendor/v1.0.0/infrastructure-components.yaml"),
    )
}

/// The release really is one that substitution with empty values breaks, so the tests below
/// prove something.
#[test]
fn the_release_breaks_when_substituted_with_empty_values() -> TestResult {
    let text = capi_envsubst::eval(&components()?, |_| None)?;
    let err = capi_components::pipeline::parse_objects(&text)
        .err()
        .ok_or("substituted with empty values, the release still parsed")?;
    assert!(err.to_string().contains("mapping values"), "{err}");
    Ok(())
}

#[test]
fn describe_lists_variables_and_images_as_written() -> TestResult {
    let repo = repository();
    let args = [
        "describe",
        "--repository",
        &repo,
        "--infrastructure",
        "vendor:v1.0.0",
    ];
    let text = plugin_ok(None, &args)?.stdout;
    assert!(
        text.contains("InfrastructureProvider vendor v1.0.0 (contract v1beta2)"),
        "{text}"
    );
    assert!(text.contains("namespace: capv-system"), "{text}");
    assert!(text.contains(&format!("    {IMAGE}")), "{text}");
    let json = plugin_ok(None, &[&args[..], &["-o", "json"]].concat())?.stdout;
    let v: Value = serde_json::from_str(&json)?;
    assert_eq!(v[0]["images"], serde_json::json!([IMAGE]));
    let vars: Vec<(String, Value)> = v[0]["variables"]
        .as_array()
        .ok_or("no variables")?
        .iter()
        .map(|x| {
            (
                x["name"].as_str().unwrap_or_default().to_string(),
                x["default"].clone(),
            )
        })
        .collect();
    let want = [
        ("AWS_REGION", Value::Null),
        ("CAPA_CONTROLLER_IMAGE_TAG", Value::Null),
        ("VENDOR_B64ENCODED_CREDENTIALS", Value::Null),
        ("VENDOR_EXTRA_ARG", "--v=2".into()),
        ("VENDOR_METRICS_PORT", "8080".into()),
        ("VENDOR_TEAM_LABEL", "vendor.example/team".into()),
    ];
    let want: Vec<(String, Value)> = want.into_iter().map(|(k, d)| (k.to_string(), d)).collect();
    assert_eq!(vars, want);
    Ok(())
}

#[test]
fn verify_checks_the_release_with_variables_left_in() -> TestResult {
    let repo = repository();
    let r = plugin_ok(
        None,
        &[
            "verify",
            "--repository",
            &repo,
            "--infrastructure",
            "vendor:v1.0.0",
        ],
    )?;
    let out = &r.stdout;
    assert!(out.contains("v1.0.0 follows contract v1beta2"), "{out}");
    assert!(out.contains("0 errors, 0 warnings"), "{out}");
    for check in [
        "crd-name",
        "contract-label",
        "infra-cluster-endpoint",
        "infra-cluster-status",
        "aggregate-to-manager",
    ] {
        assert!(out.contains(&format!("OK      {check}")), "{check}: {out}");
    }
    Ok(())
}

#[test]
fn preload_stores_the_release_byte_for_byte() -> TestResult {
    let repo = repository();
    let out = TempDir::new("capi-plugin-vendor")?;
    let file = out.0.join("releases.yaml");
    let r = plugin_ok(
        None,
        &[
            "preload",
            "--repository",
            &repo,
            "--infrastructure",
            "vendor:v1.0.0",
            "--output-file",
            &file.to_string_lossy(),
            "--images",
        ],
    )?;
    // Required variables stay as written in the images to mirror.
    assert_eq!(r.stdout.trim(), IMAGE, "{}", r.all());
    let docs = capi_yaml::parse_documents(&std::fs::read_to_string(&file)?, &Default::default())?;
    let cm = docs
        .into_iter()
        .find(|d| d["kind"] == "ConfigMap")
        .ok_or("no ConfigMap written")?;
    assert_eq!(cm["metadata"]["namespace"], "capv-system");
    let data = from_configmap(&serde_json::from_value(cm)?);
    assert_eq!(data.data.get("components"), Some(&components()?));
    Ok(())
}

/// `init` reads the release with the values it will store, as the operator will install it:
/// refused while required variables are unset, then the provider goes to the release's
/// namespace with its values in a Secret.
#[tokio::test]
async fn init_substitutes_the_release_for_real() -> TestResult {
    let cluster = cluster()?;
    let repo = sample_repository()?;
    let to = repo.0.join("infrastructure-vendor/v1.0.0");
    std::fs::create_dir_all(&to)?;
    let from = std::path::Path::new(&repository()).join("infrastructure-vendor/v1.0.0");
    for f in ["metadata.yaml", "infrastructure-components.yaml"] {
        std::fs::copy(from.join(f), to.join(f))?;
    }
    let r = repo.s();
    let args = [
        "init",
        "--skip-cert-manager",
        "--repository",
        &r,
        "--core",
        "cluster-api:v0.2.0",
        "--infrastructure",
        "vendor:v1.0.0",
        "--no-default-providers",
    ];
    let refused = plugin_env(Some(cluster), &args, &[])?;
    assert!(!refused.ok, "{}", refused.all());
    for v in [
        "CAPA_CONTROLLER_IMAGE_TAG",
        "AWS_REGION",
        "VENDOR_B64ENCODED_CREDENTIALS",
    ] {
        assert!(refused.stderr.contains(v), "{v}: {}", refused.all());
    }
    let values = [
        ("CAPA_CONTROLLER_IMAGE_TAG", "v2.8.1"),
        ("AWS_REGION", "eu-west-1"),
        ("VENDOR_B64ENCODED_CREDENTIALS", "Y3JlZHM="),
    ];
    plugin_ok_env(Some(cluster), &args, &values)?;
    let secret: Value = serde_json::from_str(&cluster.kubectl_ok(&[
        "get",
        "secret",
        "-n",
        "capv-system",
        "infrastructure-vendor-variables",
        "-o",
        "json",
    ])?)?;
    let mut keys: Vec<&str> = secret["data"]
        .as_object()
        .ok_or("no data")?
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "AWS_REGION",
            "CAPA_CONTROLLER_IMAGE_TAG",
            "VENDOR_B64ENCODED_CREDENTIALS"
        ]
    );
    assert!(provider(cluster, "InfrastructureProvider", "capv-system", "vendor").is_some());
    Ok(())
}
