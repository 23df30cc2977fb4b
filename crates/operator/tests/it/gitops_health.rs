//! The Argo CD health check shipped in `examples/gitops/argocd/health.lua`, run in a real Lua
//! 5.1 interpreter (the language level of gopher-lua, which Argo CD embeds) against provider
//! objects the operator wrote on a private local control plane, in every state a GitOps tool
//! meets: not yet reconciled, installing, Ready, paused, configuration error, deleting and a
//! spec the operator has not observed yet. `CAPI_LUA` names the interpreter (default
//! `lua5.1`, installed by `make deps`).

use crate::support;

use std::{io::Write, process::Stdio, time::Duration};

use capi_test_support::{TestCluster, private_cluster, workspace_root};
use kube::Client;
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);

/// A Lua string literal holding `s` byte for byte.
fn lua_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\{:03}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `v` as a Lua table constructor, the shape Argo CD hands a script as `obj`.
fn lua_value(v: &Value) -> String {
    match v {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => lua_string(s),
        Value::Array(a) => format!(
            "{{{}}}",
            a.iter().map(lua_value).collect::<Vec<_>>().join(",")
        ),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("[{}]={}", lua_string(k), lua_value(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// Runs the health check on `obj`: (status, message).
fn health(obj: &Value) -> Result<(String, String), Box<dyn std::error::Error>> {
    let script = workspace_root().join("examples/gitops/argocd/health.lua");
    let chunk = format!(
        "obj = {}\nlocal hs = dofile({})\nio.write(hs.status, \"\\n\", hs.message or \"\")\n",
        lua_value(obj),
        lua_string(&script.to_string_lossy())
    );
    let lua = std::env::var("CAPI_LUA").unwrap_or_else(|_| "lua5.1".into());
    let mut child = std::process::Command::new(&lua)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{lua}: {e} (`make deps` installs lua5.1; CAPI_LUA names another)"))?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(chunk.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!("lua failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let text = String::from_utf8(out.stdout)?;
    let (status, message) = text.split_once('\n').ok_or("no status line")?;
    Ok((status.to_string(), message.to_string()))
}

/// Asserts the check's verdict on `obj` and that the message contains `needle`.
fn assert_health(state: &str, obj: &Value, want: &str, needle: &str) -> TestResult {
    let (status, message) = health(obj)?;
    if status != want || !message.contains(needle) {
        return Err(format!(
            "{state}: health {status} ({message:?}), want {want} with {needle:?}; status: {}",
            obj.get("status").unwrap_or(&Value::Null)
        )
        .into());
    }
    Ok(())
}

/// The kstatus verdict on `obj` (`e2e/kstatus`, the rules of Flux's health checks): (status, message).
fn kstatus(obj: &Value) -> Result<(String, String), Box<dyn std::error::Error>> {
    let script = workspace_root().join("e2e/scripts/kstatus.sh");
    let built = std::process::Command::new(&script)
        .stderr(Stdio::inherit())
        .output()?;
    if !built.status.success() {
        return Err(format!("{} failed", script.display()).into());
    }
    let bin = String::from_utf8(built.stdout)?.trim().to_string();
    let mut child = std::process::Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut line = serde_json::to_vec(obj)?;
    line.push(b'\n');
    child.stdin.take().ok_or("no stdin")?.write_all(&line)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!("kstatus failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let text = String::from_utf8(out.stdout)?;
    let (status, message) = text.trim_end().split_once('\t').ok_or("no verdict")?;
    Ok((status.to_string(), message.to_string()))
}

/// Asserts the kstatus verdict on `obj`.
fn assert_kstatus(state: &str, obj: &Value, want: &str) -> TestResult {
    let (status, message) = kstatus(obj)?;
    if status != want {
        return Err(format!(
            "{state}: kstatus {status} ({message:?}), want {want}; status: {}",
            obj.get("status").unwrap_or(&Value::Null)
        )
        .into());
    }
    Ok(())
}

fn manifest(kind: &str, ns: &str, name: &str, label: &str, extra: &str) -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  version: v0.1.0\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {label}\n{extra}"
    )
}

async fn load(
    client: &Client,
    cluster: &TestCluster,
    ns: &str,
    label: &str,
    file: &str,
) -> TestResult {
    cluster.ensure_namespace(ns)?;
    release_configmap_from_dir(
        client,
        ns,
        &samples(),
        label,
        "v0.1.0",
        file,
        &[("provider.cluster.x-k8s.io/name", label)],
    )
    .await
}

async fn get(
    client: &Client,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<Value, Box<dyn std::error::Error>> {
    provider(client, kind, ns, name)
        .await
        .ok_or_else(|| format!("{kind} {ns}/{name} not found").into())
}

#[tokio::test]
async fn argocd_health_check_reads_every_state() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let core = ("CoreProvider", "gh-core", "cluster-api");
    let boot = ("BootstrapProvider", "gh-bootstrap", "sample");
    let infra = ("InfrastructureProvider", "gh-infra", "sample");
    let cp = ("ControlPlaneProvider", "gh-cp", "broken");
    load(
        &client,
        cluster,
        core.1,
        "sample-core",
        "core-components.yaml",
    )
    .await?;
    load(
        &client,
        cluster,
        boot.1,
        "sample-bootstrap",
        "bootstrap-components.yaml",
    )
    .await?;
    load(
        &client,
        cluster,
        infra.1,
        "sample-infrastructure",
        "infrastructure-components.yaml",
    )
    .await?;
    cluster.ensure_namespace(cp.1)?;

    // Declared before any operator runs: nothing has reconciled it yet.
    apply(
        cluster,
        &manifest(core.0, core.1, core.2, "sample-core", ""),
    )?;
    let fresh = get(&client, core.0, core.1, core.2).await?;
    assert_health(
        "not reconciled",
        &fresh,
        "Progressing",
        "Waiting for the operator",
    )?;
    // kstatus cannot tell "not reconciled yet" from "needs no status": the operator writes
    // Reconciling on its first pass, which closes that window (docs/user-guide.md).
    assert_kstatus("not reconciled", &fresh, "Current")?;

    let mut operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };
    let ready = wait_condition(&client, core, "Ready", "True", None, T)
        .await
        .map_err(log)?;
    assert_health("ready", &ready, "Healthy", "DeploymentsAvailable")?;
    assert_kstatus("ready", &ready, "Current")?;

    // Installing: the manager's pods can never be scheduled, so the rollout never completes.
    let unschedulable = "  deployment:\n    nodeSelector:\n      capi-provider-operator.dev/no-such-node: \"true\"\n";
    apply(
        cluster,
        &manifest(boot.0, boot.1, boot.2, "sample-bootstrap", unschedulable),
    )?;
    let installing = wait_condition(
        &client,
        boot,
        "Reconciling",
        "True",
        Some("DeploymentsNotAvailable"),
        T,
    )
    .await
    .map_err(log)?;
    assert_health(
        "installing",
        &installing,
        "Progressing",
        "DeploymentsNotAvailable",
    )?;
    assert_kstatus("installing", &installing, "InProgress")?;

    apply(
        cluster,
        &manifest(
            infra.0,
            infra.1,
            infra.2,
            "sample-infrastructure",
            "  paused: true\n",
        ),
    )?;
    let paused = wait_condition(&client, infra, "Paused", "True", None, T)
        .await
        .map_err(log)?;
    assert_health("paused", &paused, "Suspended", "Paused")?;
    // Ready is False while paused (no manager runs), which kstatus reads as still in progress:
    // a Flux health check on a paused provider waits (docs/user-guide.md says so).
    assert_kstatus("paused", &paused, "InProgress")?;

    let missing_secret = "  secretName: no-such-secret\n";
    apply(
        cluster,
        &manifest(cp.0, cp.1, cp.2, "sample-bootstrap", missing_secret),
    )?;
    let broken = wait_condition(&client, cp, "Stalled", "True", Some("SecretNotFound"), T)
        .await
        .map_err(log)?;
    assert_health(
        "configuration error",
        &broken,
        "Degraded",
        "SecretNotFound: ",
    )?;
    assert_health("configuration error", &broken, "Degraded", "no-such-secret")?;
    assert_kstatus("configuration error", &broken, "Failed")?;

    // A version no release has: `kubectl get` says why in the row, next to READY True.
    summary_column_names_a_missing_version(cluster, &client, core)
        .await
        .map_err(log)?;

    // Deleting the core provider waits for the others.
    cluster.kubectl_ok(&[
        "delete",
        "--wait=false",
        "-n",
        core.1,
        "coreprovider/cluster-api",
    ])?;
    let deleting = wait_condition(
        &client,
        core,
        "Deleting",
        "False",
        Some("DeletionBlocked"),
        T,
    )
    .await
    .map_err(log)?;
    assert_health("deleting", &deleting, "Progressing", "DeletionBlocked: ")?;
    assert_health(
        "deleting",
        &deleting,
        "Progressing",
        "BootstrapProvider gh-bootstrap/sample",
    )?;
    assert_kstatus("deleting", &deleting, "Terminating")?;

    // A spec change the operator has not seen (it is stopped): the old Ready says nothing.
    operator.kill();
    cluster.kubectl_ok(&[
        "patch",
        "-n",
        boot.1,
        "bootstrapprovider/sample",
        "--type=merge",
        "-p",
        r#"{"spec":{"deployment":{"nodeSelector":null}}}"#,
    ])?;
    let stale = get(&client, boot.0, boot.1, boot.2).await?;
    assert!(
        stale
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            > stale
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64),
        "the patch did not bump the generation: {stale}"
    );
    assert_health(
        "unobserved spec",
        &stale,
        "Progressing",
        "observe generation",
    )?;
    assert_kstatus("unobserved spec", &stale, "InProgress")?;

    Ok(())
}

/// Sets the core provider's spec.version to a version no ConfigMap holds: its `kubectl get`
/// row reads READY True (the installed release still runs) and, in the Summary column, the
/// reason and both versions; the Stalled message names the ConfigMap the selector matched.
/// Back at the installed version, the column is empty again.
async fn summary_column_names_a_missing_version(
    cluster: &TestCluster,
    client: &Client,
    core: (&str, &str, &str),
) -> TestResult {
    let target = "coreprovider/cluster-api";
    let set_version = |v: &str| {
        let patch = format!(r#"{{"spec":{{"version":"{v}"}}}}"#);
        cluster.kubectl_ok(&["patch", "-n", core.1, target, "--type=merge", "-p", &patch])
    };
    set_version("v0.1.9")?;
    let stalled = wait_condition(
        client,
        core,
        "Stalled",
        "True",
        Some("ComponentsFetchError"),
        T,
    )
    .await?;
    let message = condition_message(&stalled, "Stalled");
    assert!(
        message.contains("the selector matched ConfigMaps sample-core-v0.1.0 (version v0.1.0)"),
        "{message}"
    );
    let row = cluster.kubectl_ok(&["get", "-n", core.1, target, "--no-headers"])?;
    assert!(
        row.contains("True")
            && row.contains("ComponentsFetchError: wanted v0.1.9, installed v0.1.0"),
        "{row}"
    );
    let all = cluster.kubectl_ok(&["get", "capi-providers", "-A"])?;
    assert!(all.contains("SUMMARY"), "{all}");
    assert!(all.contains("wanted v0.1.9, installed v0.1.0"), "{all}");
    set_version("v0.1.0")?;
    wait_condition(client, core, "Stalled", "False", None, T).await?;
    let summary = get(client, core.0, core.1, core.2).await?;
    assert_eq!(summary.pointer("/status/summary"), None, "{summary}");
    Ok(())
}

#[test]
fn lua_literals_survive_quotes_newlines_and_control_characters() -> TestResult {
    let obj = serde_json::json!({
        "metadata": {"generation": 2, "name": "a\"b\\c\nd\u{1}é"},
        "status": {"observedGeneration": 2, "conditions": [
            {"type": "Stalled", "status": "True", "reason": "R", "message": "line \"1\"\nline 2"}
        ]}
    });
    let (status, message) = health(&obj)?;
    assert_eq!(status, "Degraded");
    assert_eq!(message, "R: line \"1\"\nline 2");
    Ok(())
}

/// The Flux example health-checks exactly the providers the GitOps layout declares, and its
/// paths exist: a renamed provider or a moved directory fails here, not in someone's cluster.
#[test]
fn flux_example_checks_every_declared_provider() -> TestResult {
    let root = workspace_root();
    let gitops = root.join("examples/gitops");
    let id = |o: &Value| -> Option<String> {
        Some(format!(
            "{} {} {}/{}",
            o.get("apiVersion")?.as_str()?,
            o.get("kind")?.as_str()?,
            o.pointer("/metadata/namespace")?.as_str()?,
            o.pointer("/metadata/name")?.as_str()?
        ))
    };
    let mut declared = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(gitops.join("providers"))? {
        let text = std::fs::read_to_string(entry?.path())?;
        for doc in capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())? {
            let api = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            if api.starts_with("management.cluster.x-k8s.io/") {
                declared.insert(id(&doc).ok_or("provider without name or namespace")?);
            }
        }
    }
    let flux = std::fs::read_to_string(gitops.join("flux/kustomizations.yaml"))?;
    let docs = capi_yaml::parse_documents(&flux, &capi_yaml::Limits::default())?;
    let mut checked = std::collections::BTreeSet::new();
    for doc in docs
        .iter()
        .filter(|d| d.get("kind").and_then(Value::as_str) == Some("Kustomization"))
    {
        let path = doc
            .pointer("/spec/path")
            .and_then(Value::as_str)
            .ok_or("no path")?;
        assert!(
            root.join(path).is_dir(),
            "{path} is not a directory of the repository"
        );
        for check in doc
            .pointer("/spec/healthChecks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mut full = check.clone();
            let ns = check.get("namespace").cloned().unwrap_or(Value::Null);
            let name = check.get("name").cloned().unwrap_or(Value::Null);
            full["metadata"] = serde_json::json!({"namespace": ns, "name": name});
            checked.insert(id(&full).ok_or("incomplete health check")?);
        }
    }
    assert!(
        !declared.is_empty(),
        "no providers found in examples/gitops/providers"
    );
    assert_eq!(
        checked, declared,
        "Flux healthChecks and the declared providers differ"
    );
    Ok(())
}

/// The GitOps example syncs in the waves the chart sets with `argocd.syncWaves: true` (CRDs
/// first, then the operator, then the providers and their namespaces), and its providers carry
/// `deletionPolicy: Orphan`, which its README recommends against unmeant prunes: a wave changed
/// on one side only, or a provider added without the policy, fails here.
#[tokio::test]
async fn gitops_example_waves_match_the_chart_and_providers_orphan() -> TestResult {
    let helm = helm_bin("gitops_example_waves_match_the_chart_and_providers_orphan")?;
    let cluster = private_cluster()?;
    let root = workspace_root();
    let values = tempfile(
        "argocd:\n  syncWaves: true\nproviders:\n- kind: CoreProvider\n  name: cluster-api\n  namespace: capi-system\n  createNamespace: true\n  spec:\n    version: v1.12.0\n",
    )?;
    let chart = root.join("manifests/helm/capi-provider-operator");
    let rendered = helm_run(
        &helm,
        &[
            "template",
            "capi-operator",
            &chart.to_string_lossy(),
            "--namespace",
            "capi-operator-system",
            "--include-crds",
            "-f",
            &values,
        ],
    )?;
    let chart_docs = capi_yaml::parse_documents(&rendered, &capi_yaml::Limits::default())?;
    let example =
        cluster.kubectl_ok(&["kustomize", &root.join("examples/gitops").to_string_lossy()])?;
    let example_docs = capi_yaml::parse_documents(&example, &capi_yaml::Limits::default())?;
    let annotation = |d: &Value, key: &str| {
        d.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let kind = |d: &Value| {
        d.get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let is_provider = |d: &Value| {
        d.get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|a| a.starts_with("management.cluster.x-k8s.io/"))
    };
    let find = |pred: &dyn Fn(&Value) -> bool, what: &str| -> Result<Value, String> {
        chart_docs
            .iter()
            .find(|d| pred(d))
            .cloned()
            .ok_or_else(|| format!("the chart rendered no {what}"))
    };
    let chart_crd = find(&|d| kind(d) == "CustomResourceDefinition", "CRD")?;
    let chart_operator = find(&|d| kind(d) == "Deployment", "Deployment")?;
    let chart_provider = find(&is_provider, "provider object")?;
    let chart_namespace = find(
        &|d| kind(d) == "Namespace" && d.pointer("/metadata/name") == Some(&"capi-system".into()),
        "provider namespace",
    )?;
    let wave = "argocd.argoproj.io/sync-wave";
    let options = "argocd.argoproj.io/sync-options";
    assert!(
        annotation(&chart_operator, wave).is_some(),
        "the chart with argocd.syncWaves sets no wave on its Deployment"
    );
    let provider_namespaces: std::collections::BTreeSet<String> = example_docs
        .iter()
        .filter(|d| is_provider(d))
        .filter_map(|d| d.pointer("/metadata/namespace").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    let mut providers = 0;
    for d in &example_docs {
        let name = d
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let like = if kind(d) == "CustomResourceDefinition" {
            &chart_crd
        } else if is_provider(d) {
            providers += 1;
            assert_eq!(
                d.pointer("/spec/deletionPolicy").and_then(Value::as_str),
                Some("Orphan"),
                "{} {name}: the GitOps example's providers carry deletionPolicy: Orphan",
                kind(d)
            );
            &chart_provider
        } else if kind(d) == "Namespace" && provider_namespaces.contains(name) {
            &chart_namespace
        } else {
            &chart_operator
        };
        for key in [wave, options] {
            assert_eq!(
                annotation(d, key),
                annotation(like, key),
                "{} {name}: {key} differs from the chart's for the same kind of object",
                kind(d)
            );
        }
    }
    assert!(
        providers >= 3,
        "only {providers} providers in examples/gitops"
    );
    Ok(())
}
