//! The Helm chart's values, as `helm template` renders them (no cluster): the image mirror
//! ConfigMap is watched only when the mirror is configured, and only the release's own is used;
//! more than one replica is refused without leader election.

use crate::support;

use capi_test_support::workspace_root;
use serde_json::Value;
use support::*;

/// `helm template x <chart> ARGS`: helm's output or its refusal; the outer error (the test
/// fails) when `CAPI_HELM` is not set.
fn template(test: &str, args: &[&str]) -> Result<Result<String, String>, String> {
    let helm = helm_bin(test)?;
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    let chart = chart.to_string_lossy().into_owned();
    let mut all = vec!["template", "x", &chart, "-n", "ops"];
    all.extend_from_slice(args);
    Ok(helm_run(&helm, &all))
}

/// The rendered object of `kind` named `name`.
fn object(rendered: &str, kind: &str, name: &str) -> Result<Option<Value>, String> {
    let docs = capi_yaml::parse_documents(rendered, &capi_yaml::Limits::default())
        .map_err(|e| e.to_string())?;
    Ok(docs
        .into_iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name))
}

/// The operator container's arguments.
fn operator_args(rendered: &str) -> Result<Vec<String>, String> {
    container_args(&object(rendered, "Deployment", "x")?.ok_or("no Deployment x")?)
}

/// The first container's arguments of Deployment `d`.
fn container_args(d: &Value) -> Result<Vec<String>, String> {
    let args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .ok_or("no args")?;
    Ok(args
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect())
}

#[test]
fn the_mirror_configmap_is_watched_only_when_configured_and_must_be_the_releases() -> TestResult {
    let test = "the_mirror_configmap_is_watched_only_when_configured_and_must_be_the_releases";
    let defaults = template(test, &[])??;
    let args = operator_args(&defaults)?;
    assert!(
        !args.iter().any(|a| a.starts_with("--image-mirror-config")),
        "the defaults watch a ConfigMap nothing writes, a slot anyone may claim: {args:?}"
    );

    let on = template(
        test,
        &["--set", "imageMirror.images.all.repository=m.example"],
    )??;
    let args = operator_args(&on)?;
    for want in [
        "--image-mirror-config=x-image-mirror",
        "--image-mirror-config-owner=x",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
    }
    // The ConfigMap the chart writes carries what the operator asks of it.
    let cm = object(&on, "ConfigMap", "x-image-mirror")?.ok_or("no ConfigMap")?;
    let labels = &cm["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/instance"], "x", "{cm:#}");
    assert_eq!(
        labels["app.kubernetes.io/name"], "capi-provider-operator",
        "{cm:#}"
    );

    // A ConfigMap of the user's own: watched, under the same rule.
    let own = template(test, &["--set", "imageMirror.configMap=mine"])??;
    let args = operator_args(&own)?;
    for want in [
        "--image-mirror-config=mine",
        "--image-mirror-config-owner=x",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
    }
    assert!(
        object(&own, "ConfigMap", "mine")?.is_none(),
        "yours, not the chart's"
    );
    Ok(())
}

#[test]
fn more_than_one_replica_needs_leader_election() -> TestResult {
    let test = "more_than_one_replica_needs_leader_election";
    for set in [
        &["leaderElection=false"][..],
        &["leaderElection=false", "replicas=3"],
    ] {
        let args: Vec<&str> = set.iter().flat_map(|s| ["--set", *s]).collect();
        let e = template(test, &args)?
            .err()
            .ok_or(format!("{set:?} was accepted"))?;
        assert!(
            e.contains("don't meet the specifications of the schema")
                && e.contains("at '/leaderElection': value must be true"),
            "{set:?}: {e}"
        );
    }
    for fine in [
        &["leaderElection=false", "replicas=1"][..],
        &["leaderElection=false", "replicas=0"],
        &["replicas=3"],
    ] {
        let args: Vec<&str> = fine.iter().flat_map(|s| ["--set", *s]).collect();
        template(test, &args)??;
    }
    Ok(())
}

/// The image mirror example (`examples/image-mirror`, the ConfigMap the user guide shows) is the
/// one both installs read: the kustomize overlay's operator watches it in its own namespace
/// under its release label, and the chart's release `capi-provider-operator` does the same with
/// `imageMirror.configMap` set to its name. A renamed ConfigMap, namespace or release fails here.
#[test]
fn the_image_mirror_example_is_read_by_both_installs() -> TestResult {
    let test = "the_image_mirror_example_is_read_by_both_installs";
    let kubectl = std::env::var_os("CAPI_KUBECTL")
        .filter(|k| !k.is_empty())
        .ok_or(format!(
            "{test}: CAPI_KUBECTL is not set: run through make integration or set \
             CAPI_KUBECTL=$(e2e/scripts/build.sh)/kubectl"
        ))?;
    let dir = workspace_root().join("examples/image-mirror");
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = String::from_utf8(out.stdout)?;
    let docs = capi_yaml::parse_documents(&built, &capi_yaml::Limits::default())?;
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .ok_or(format!("no {kind}"))
    };
    let cm = of("ConfigMap")?;
    let deployment = of("Deployment")?;
    let name = cm["metadata"]["name"]
        .as_str()
        .ok_or("ConfigMap without name")?;
    let release = cm["metadata"]["labels"]["app.kubernetes.io/instance"]
        .as_str()
        .ok_or("ConfigMap without the release label")?;
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/name"], "capi-provider-operator",
        "{cm:#}"
    );
    let namespace = &deployment["metadata"]["namespace"];
    assert_eq!(
        &cm["metadata"]["namespace"], namespace,
        "not the operator's namespace"
    );
    let want = [
        format!("--image-mirror-config={name}"),
        format!("--image-mirror-config-owner={release}"),
    ];
    let args = container_args(deployment)?;
    for w in &want {
        assert!(args.contains(w), "kustomize: {w} missing: {args:?}");
    }

    let helm = helm_bin(test)?;
    let chart = workspace_root().join("manifests/helm/capi-provider-operator");
    let namespace = namespace.as_str().ok_or("Deployment without namespace")?;
    let rendered = helm_run(
        &helm,
        &[
            "template",
            release,
            &chart.to_string_lossy(),
            "-n",
            namespace,
            "--set",
            &format!("imageMirror.configMap={name}"),
        ],
    )?;
    let d = object(&rendered, "Deployment", release)?.ok_or("the chart rendered no Deployment")?;
    let args = container_args(&d)?;
    for w in &want {
        assert!(args.contains(w), "chart: {w} missing: {args:?}");
    }
    Ok(())
}
