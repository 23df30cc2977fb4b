//! End-to-end behaviour of the install flow on a private local control plane, with the
//! project's sample providers served from ConfigMaps: latest-version resolution written back,
//! re-rendering on Secret and spec changes, drift repair, pruning, every preflight failure and
//! bad input with its own reason (leaving what is installed untouched), the managed-by
//! annotation, and an operator killed in the middle of an install.
//!
//! One test per behaviour, over one fixture started once per cluster of this area: the CRDs,
//! one operator, the sample core provider (installed with no version) and the infrastructure
//! provider `infra-a/sample` installed at v0.1.0 then upgraded to v0.2.0. The tests take the
//! area one at a time; each first restores the baseline it needs ([`baseline`]), so they pass
//! alone, in any order, or all together.

use std::{
    path::PathBuf,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use capi_test_support::{
    Isolated, OperatorProcess, TestCluster, isolated, private_cluster, wait_for,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::support::*;

const T: Duration = Duration::from_secs(90);

async fn sample_cm(
    client: &Client,
    ns: &str,
    label: &str,
    version: &str,
    file: &str,
    name: &str,
) -> TestResult {
    release_configmap_from_dir(
        client,
        ns,
        &samples(),
        label,
        version,
        file,
        &[("provider.cluster.x-k8s.io/name", name)],
    )
    .await
}

fn infra(ns: &str, name: &str, version: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: InfrastructureProvider
metadata:
  name: {name}
  namespace: {ns}
spec:
  version: "{version}"
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: {name}
{extra}"#
    )
}

async fn deployment(client: &Client, ns: &str, name: &str) -> Option<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()?
}

fn env_value(d: &Deployment, key: &str) -> Option<String> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == key)?
        .value
        .clone()
}

fn args(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

async fn reason_of(
    client: &Client,
    kind: &str,
    ns: &str,
    name: &str,
    cond: &str,
    reason: &str,
) -> Result<Value, Box<dyn std::error::Error>> {
    wait_condition(client, (kind, ns, name), cond, "False", Some(reason), T).await
}

/// The namespace of the infrastructure provider most tests change.
const NS: &str = "infra-a";
/// Its manager's Deployment.
const MANAGER: &str = "sample-infra-controller-manager";
/// Its spec fields besides the version, at the baseline.
const BASE_EXTRA: &str = "  secretName: vars\n";
const OPERATOR_ARGS: &[&str] = &["--config-retry-seconds", "3"];

/// What the fixture started and saw, for the cluster whose kubeconfig it names.
struct Fixture {
    kubeconfig: PathBuf,
    operator: OperatorProcess,
    /// Whether v0.1.0 had the ConfigMap v0.2.0 no longer has, before the upgrade.
    legacy_before_upgrade: bool,
}

static FIXTURE: Mutex<Option<Fixture>> = Mutex::new(None);

fn fixture() -> MutexGuard<'static, Option<Fixture>> {
    FIXTURE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One test's hold on the area: its cluster and a client of its own runtime.
struct Env {
    _area: Isolated,
    cluster: &'static TestCluster,
    client: Client,
}

impl Env {
    /// `e` with the operator's log so far.
    fn with_logs(&self, e: impl Into<Box<dyn std::error::Error>>) -> Box<dyn std::error::Error> {
        let logs = fixture()
            .as_ref()
            .map(|f| f.operator.logs())
            .unwrap_or_default();
        format!("{}\n--- operator log ---\n{logs}", e.into()).into()
    }

    fn deployments(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }
}

/// Takes the area and sets the fixture up unless it is up on this cluster.
async fn env() -> Result<Env, Box<dyn std::error::Error>> {
    let area = isolated(module_path!()).await;
    let cluster = private_cluster()?;
    let client = cluster.client().await?;
    let up = fixture()
        .as_ref()
        .is_some_and(|f| f.kubeconfig == cluster.kubeconfig());
    if !up {
        set_up(cluster, &client).await?;
    }
    Ok(Env {
        _area: area,
        cluster,
        client,
    })
}

async fn set_up(cluster: &'static TestCluster, client: &Client) -> TestResult {
    cluster.install_crds()?;
    let operator = start_operator(cluster, OPERATOR_ARGS)?;
    operator.die_with_test()?;
    let logs =
        |e: Box<dyn std::error::Error>, op: &OperatorProcess| -> Box<dyn std::error::Error> {
            format!("{e}\n--- operator log ---\n{}", op.logs()).into()
        };
    install_core(cluster, client)
        .await
        .map_err(|e| logs(e, &operator))?;
    cluster.ensure_namespace(NS)?;
    for v in ["v0.1.0", "v0.2.0"] {
        sample_cm(
            client,
            NS,
            "sample-infrastructure",
            v,
            "infrastructure-components.yaml",
            "sample",
        )
        .await?;
    }
    secret(cluster, "hi")?;
    apply(cluster, &infra(NS, "sample", "v0.1.0", BASE_EXTRA))?;
    settled(client, "v0.1.0")
        .await
        .map_err(|e| logs(e, &operator))?;
    let legacy_before_upgrade = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get_opt("sample-infra-legacy-settings")
        .await?
        .is_some();
    apply(cluster, &infra(NS, "sample", "v0.2.0", BASE_EXTRA))?;
    settled(client, "v0.2.0")
        .await
        .map_err(|e| logs(e, &operator))?;
    *fixture() = Some(Fixture {
        kubeconfig: cluster.kubeconfig().to_path_buf(),
        operator,
        legacy_before_upgrade,
    });
    // The next area stops this cluster: the operator goes first.
    capi_test_support::on_area_end(Box::new(|| drop(fixture().take())));
    Ok(())
}

async fn install_core(cluster: &TestCluster, client: &Client) -> TestResult {
    cluster.ensure_namespace("sample-core-system")?;
    for v in ["v0.1.0", "v0.2.0"] {
        sample_cm(
            client,
            "sample-core-system",
            "sample-core",
            v,
            "core-components.yaml",
            "sample-core",
        )
        .await?;
    }
    // No version: the operator resolves the latest release and writes it into spec.version.
    apply(
        cluster,
        r"apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: sample-core-system
spec:
  fetchConfig:
    selector:
      matchLabels:
        provider.cluster.x-k8s.io/name: sample-core
",
    )?;
    wait_condition(
        client,
        ("CoreProvider", "sample-core-system", "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await?;
    Ok(())
}

/// The Secret of `infra-a/sample`'s variables with SAMPLE_GREETING=`greeting`.
fn secret(cluster: &TestCluster, greeting: &str) -> TestResult {
    apply(
        cluster,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vars\n  namespace: {NS}\nstringData:\n  SAMPLE_GREETING: {greeting}\n"
        ),
    )?;
    Ok(())
}

/// Waits until `infra-a/sample` has seen its latest spec and is Ready with `version`.
async fn settled(client: &Client, version: &str) -> Result<Value, Box<dyn std::error::Error>> {
    wait_for(T, || async {
        let p = provider(client, "InfrastructureProvider", NS, "sample").await?;
        let seen = p.pointer("/status/observedGeneration") == p.pointer("/metadata/generation");
        let ready =
            condition(&p, "Ready").and_then(|c| c.get("status")) == Some(&Value::from("True"));
        let installed = p.pointer("/status/installedVersion") == Some(&Value::from(version));
        (seen && ready && installed).then_some(p)
    })
    .await
    .ok_or_else(|| format!("InfrastructureProvider {NS}/sample not Ready with {version}").into())
}

/// Restores the baseline of `infra-a/sample`: v0.2.0, the Secret `vars` with SAMPLE_GREETING=hi,
/// no manager fields; waits until it is installed.
async fn baseline(env: &Env) -> Result<Value, Box<dyn std::error::Error>> {
    secret(env.cluster, "hi")?;
    apply(env.cluster, &infra(NS, "sample", "v0.2.0", BASE_EXTRA))?;
    settled(&env.client, "v0.2.0")
        .await
        .map_err(|e| env.with_logs(e))
}

/// The resourceVersion of the manager's Deployment once it stopped changing for 3 s (a
/// re-render of the baseline and its rollout settle first).
async fn settled_rv(env: &Env) -> Result<Option<String>, Box<dyn std::error::Error>> {
    let api = env.deployments(NS);
    let mut last = api.get(MANAGER).await?.metadata.resource_version;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = api.get(MANAGER).await?.metadata.resource_version;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
    Err("the manager's Deployment kept changing".into())
}

#[tokio::test]
async fn latest_version_is_resolved_and_written_back() -> TestResult {
    let env = env().await?;
    let p = provider(
        &env.client,
        "CoreProvider",
        "sample-core-system",
        "cluster-api",
    )
    .await
    .ok_or("no core provider")?;
    assert_eq!(p.pointer("/spec/version"), Some(&Value::from("v0.2.0")));
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.2.0"))
    );
    assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));
    Ok(())
}

#[tokio::test]
async fn secret_variable_is_rendered_into_the_manager() -> TestResult {
    let env = env().await?;
    baseline(&env).await?;
    wait_for(T, || async {
        let d = deployment(&env.client, NS, MANAGER).await?;
        (env_value(&d, "SAMPLE_GREETING").as_deref() == Some("hi")).then_some(())
    })
    .await
    .ok_or_else(|| env.with_logs("SAMPLE_GREETING=hi not rendered"))
}

#[tokio::test]
async fn secret_change_rerenders() -> TestResult {
    let env = env().await?;
    baseline(&env).await?;
    secret(env.cluster, "bye")?;
    wait_for(T, || async {
        let d = deployment(&env.client, NS, MANAGER).await?;
        (env_value(&d, "SAMPLE_GREETING").as_deref() == Some("bye")).then_some(())
    })
    .await
    .ok_or_else(|| env.with_logs("Secret change not rendered"))
}

#[tokio::test]
async fn manager_fields_rerender_into_flags() -> TestResult {
    let env = env().await?;
    baseline(&env).await?;
    let extra = format!("{BASE_EXTRA}  manager:\n    verbosity: 6\n");
    apply(env.cluster, &infra(NS, "sample", "v0.2.0", &extra))?;
    wait_for(T, || async {
        let d = deployment(&env.client, NS, MANAGER).await?;
        args(&d).contains(&"--v=6".to_string()).then_some(())
    })
    .await
    .ok_or_else(|| env.with_logs("manager.verbosity not rendered"))
}

#[tokio::test]
async fn drift_is_repaired_and_reported() -> TestResult {
    let env = env().await?;
    baseline(&env).await?;
    // A deleted object comes back, a hand edit is undone.
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), NS);
    sas.delete("sample-infra-manager", &DeleteParams::default())
        .await?;
    let deployments = env.deployments(NS);
    deployments
        .patch(
            MANAGER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    wait_for(T, || async {
        let sa = sas.get_opt("sample-infra-manager").await.ok()??;
        let d = deployments.get(MANAGER).await.ok()?;
        (d.spec?.replicas == Some(1)).then_some(sa)
    })
    .await
    .ok_or_else(|| env.with_logs("drift not repaired"))?;
    // ...and said, naming what was restored (the hand edit with who made it).
    wait_for(Duration::from_secs(30), || async {
        let e = env
            .cluster
            .kubectl_ok(&[
                "get",
                "events",
                "-n",
                NS,
                "--field-selector",
                "reason=DriftRepaired",
                "-o",
                "jsonpath={.items[*].message}",
            ])
            .ok()?;
        (e.contains("ServiceAccount infra-a/sample-infra-manager (deleted)")
            && e.contains("Deployment infra-a/sample-infra-controller-manager (changed"))
        .then_some(e)
    })
    .await
    .ok_or_else(|| env.with_logs("no DriftRepaired event naming both objects"))?;
    Ok(())
}

#[tokio::test]
async fn upgrade_prunes_objects_the_new_version_lacks() -> TestResult {
    let env = env().await?;
    let before = fixture().as_ref().is_some_and(|f| f.legacy_before_upgrade);
    assert!(
        before,
        "v0.1.0 installed no sample-infra-legacy-settings ConfigMap"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    let p = wait_for(T, || async {
        let p = provider(&env.client, "InfrastructureProvider", NS, "sample").await?;
        let gone = cms
            .get_opt("sample-infra-legacy-settings")
            .await
            .ok()?
            .is_none();
        (p.pointer("/status/installedVersion") == Some(&Value::from("v0.2.0")) && gone).then_some(p)
    })
    .await
    .ok_or_else(|| env.with_logs("upgrade did not prune"))?;
    assert_eq!(p.pointer("/status/contract"), Some(&Value::from("v1beta2")));
    Ok(())
}

/// Applies `extra` at `version` to the installed `infra-a/sample`: refused with `reason`,
/// what is installed stays as it is.
async fn refused_keeping_installed(
    env: &Env,
    version: &str,
    extra: &str,
    reason: &str,
) -> TestResult {
    baseline(env).await?;
    let installed_rv = settled_rv(env).await?;
    apply(env.cluster, &infra(NS, "sample", version, extra))?;
    let p = reason_of(
        &env.client,
        "InfrastructureProvider",
        NS,
        "sample",
        "ProviderInstalled",
        reason,
    )
    .await
    .map_err(|e| env.with_logs(e))?;
    assert_eq!(
        p.pointer("/status/installedVersion"),
        Some(&Value::from("v0.2.0"))
    );
    let rv = env
        .deployments(NS)
        .get(MANAGER)
        .await?
        .metadata
        .resource_version;
    assert_eq!(
        rv, installed_rv,
        "a failed change touched the installed Deployment"
    );
    Ok(())
}

#[tokio::test]
async fn unavailable_version_keeps_what_is_installed() -> TestResult {
    let env = env().await?;
    refused_keeping_installed(&env, "v0.9.0", BASE_EXTRA, "ComponentsFetchError").await
}

#[tokio::test]
async fn missing_secret_keeps_what_is_installed() -> TestResult {
    let env = env().await?;
    refused_keeping_installed(
        &env,
        "v0.2.0",
        "  secretName: missing-secret\n",
        "SecretNotFound",
    )
    .await
}

#[tokio::test]
async fn invalid_version_is_refused_by_admission() -> TestResult {
    let env = env().await?;
    let file = tempfile(&infra(NS, "sample", "latest-and-greatest", ""))?;
    let (ok, _, err) = env.cluster.kubectl(&["apply", "-f", &file])?;
    assert!(!ok && err.contains("version"), "{err}");
    Ok(())
}

#[tokio::test]
async fn second_core_provider_is_refused() -> TestResult {
    let env = env().await?;
    env.cluster.ensure_namespace("core-b")?;
    apply(
        env.cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: core-b\nspec:\n  version: v0.2.0\n",
    )?;
    reason_of(
        &env.client,
        "CoreProvider",
        "core-b",
        "cluster-api",
        "PreflightCheckPassed",
        "MoreThanOneCoreProvider",
    )
    .await
    .map_err(|e| env.with_logs(e))?;
    Ok(())
}

#[tokio::test]
async fn duplicate_provider_name_is_refused() -> TestResult {
    let env = env().await?;
    // The same kind and name as infra-a/sample (older, so that one keeps its place).
    env.cluster.ensure_namespace("infra-b")?;
    apply(env.cluster, &infra("infra-b", "sample", "v0.2.0", ""))?;
    reason_of(
        &env.client,
        "InfrastructureProvider",
        "infra-b",
        "sample",
        "PreflightCheckPassed",
        "DuplicateProviderName",
    )
    .await
    .map_err(|e| env.with_logs(e))?;
    Ok(())
}

#[tokio::test]
async fn unknown_provider_without_fetch_config_is_refused() -> TestResult {
    let env = env().await?;
    env.cluster.ensure_namespace("infra-b")?;
    apply(
        env.cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: my-cloud\n  namespace: infra-b\nspec:\n  version: v1.0.0\n",
    )?;
    reason_of(
        &env.client,
        "InfrastructureProvider",
        "infra-b",
        "my-cloud",
        "PreflightCheckPassed",
        "UnknownProvider",
    )
    .await
    .map_err(|e| env.with_logs(e))?;
    Ok(())
}

/// A release wrong in itself, as a provider `name` of `infra-c` would get it.
struct Broken {
    name: &'static str,
    metadata: fn(&str) -> String,
    components: fn(&str) -> String,
    condition: &'static str,
    reason: &'static str,
}

const NEEDS_VAR: Broken = Broken {
    name: "needs-var",
    metadata: str::to_string,
    components: |c| c.replace("${SAMPLE_GREETING:=hello}", "${SAMPLE_TOKEN}"),
    condition: "ProviderInstalled",
    reason: "MissingVariables",
};

const OLD_CONTRACT: Broken = Broken {
    name: "old-contract",
    metadata: |m| m.replace("contract: v1beta2", "contract: v1alpha4"),
    components: str::to_string,
    condition: "PreflightCheckPassed",
    reason: "ContractMismatch",
};

/// Installs the broken release `b` and checks it is refused with its reason and a message,
/// installing nothing. Returns that message.
async fn refused_release(env: &Env, b: &Broken) -> Result<String, Box<dyn std::error::Error>> {
    env.cluster.ensure_namespace("infra-c")?;
    let dir = samples().join("sample-infrastructure/v0.2.0");
    let meta = std::fs::read_to_string(dir.join("metadata.yaml"))?;
    let good = std::fs::read_to_string(dir.join("infrastructure-components.yaml"))?;
    let cm = format!("{}-v0.2.0", b.name);
    let have = Api::<ConfigMap>::namespaced(env.client.clone(), "infra-c")
        .get_opt(&cm)
        .await?;
    if have.is_none() {
        let labels = [("provider.cluster.x-k8s.io/name", b.name)];
        release_configmap(
            &env.client,
            "infra-c",
            &cm,
            &labels,
            "v0.2.0",
            &(b.metadata)(&meta),
            &(b.components)(&good),
        )
        .await?;
    }
    apply(env.cluster, &infra("infra-c", b.name, "v0.2.0", ""))?;
    let p = reason_of(
        &env.client,
        "InfrastructureProvider",
        "infra-c",
        b.name,
        b.condition,
        b.reason,
    )
    .await
    .map_err(|e| env.with_logs(e))?;
    assert!(
        p.pointer("/status/installedVersion").is_none(),
        "{}: {p}",
        b.name
    );
    let msg = condition_message(&p, b.condition);
    assert!(!msg.is_empty(), "{}: condition without a message", b.name);
    Ok(msg)
}

#[tokio::test]
async fn release_needing_an_unset_variable_is_refused() -> TestResult {
    let env = env().await?;
    let msg = refused_release(&env, &NEEDS_VAR).await?;
    assert!(msg.contains("SAMPLE_TOKEN"), "{msg}");
    Ok(())
}

#[tokio::test]
async fn release_with_bad_yaml_is_refused() -> TestResult {
    let env = env().await?;
    let b = Broken {
        name: "bad-yaml",
        metadata: str::to_string,
        components: |c| format!("{c}\n---\nkind: [unclosed\n"),
        condition: "ProviderInstalled",
        reason: "ComponentsRenderError",
    };
    refused_release(&env, &b).await.map(drop)
}

#[tokio::test]
async fn release_with_an_old_contract_is_refused() -> TestResult {
    let env = env().await?;
    refused_release(&env, &OLD_CONTRACT).await.map(drop)
}

#[tokio::test]
async fn release_of_an_unknown_series_is_refused() -> TestResult {
    let env = env().await?;
    let b = Broken {
        name: "no-series",
        metadata: |m| m.replace("minor: 2", "minor: 7"),
        components: str::to_string,
        condition: "PreflightCheckPassed",
        reason: "InvalidMetadata",
    };
    refused_release(&env, &b).await.map(drop)
}

#[tokio::test]
async fn refusals_are_warning_events_reported_by_the_operator() -> TestResult {
    let env = env().await?;
    refused_release(&env, &NEEDS_VAR).await?;
    refused_release(&env, &OLD_CONTRACT).await?;
    let events = env
        .cluster
        .kubectl_ok(&["get", "events", "-n", "infra-c", "-o", "json"])?;
    assert!(
        events.contains("MissingVariables") && events.contains("ContractMismatch"),
        "no warning events: {events}"
    );
    // Events name the operator as their reporting controller (events.k8s.io/v1).
    let text =
        env.cluster
            .kubectl_ok(&["get", "events.events.k8s.io", "-n", "infra-c", "-o", "json"])?;
    let events: Value = serde_json::from_str(&text)?;
    let reported: Vec<&Value> = events["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|e| e["reason"] == "MissingVariables")
                .collect()
        })
        .unwrap_or_default();
    assert!(!reported.is_empty(), "no MissingVariables event: {events}");
    for e in reported {
        assert_eq!(e["reportingController"], "capi-provider-operator", "{e}");
        assert!(
            e["reportingInstance"]
                .as_str()
                .is_some_and(|i| !i.is_empty()),
            "{e}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn provider_managed_by_someone_else_is_left_alone() -> TestResult {
    let env = env().await?;
    env.cluster.ensure_namespace("external")?;
    apply(
        env.cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: sample\n  namespace: external\n  annotations:\n    cluster.x-k8s.io/managed-by: someone-else\nspec:\n  version: v0.2.0\n",
    )?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let p = provider(&env.client, "InfrastructureProvider", "external", "sample")
        .await
        .ok_or("gone")?;
    assert!(p.get("status").is_none(), "{p}");
    assert!(p.pointer("/metadata/finalizers").is_none(), "{p}");
    Ok(())
}

#[tokio::test]
async fn operator_killed_mid_install_converges_without_duplicates() -> TestResult {
    let env = env().await?;
    env.cluster.ensure_namespace("infra-k")?;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "infra-k");
    if cms.get_opt("sample-bootstrap-v0.2.0").await?.is_none() {
        sample_cm(
            &env.client,
            "infra-k",
            "sample-bootstrap",
            "v0.2.0",
            "bootstrap-components.yaml",
            "sample",
        )
        .await?;
    }
    apply(
        env.cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: BootstrapProvider\nmetadata:\n  name: sample\n  namespace: infra-k\nspec:\n  version: v0.2.0\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: sample\n",
    )?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    restart_operator(env.cluster)?;
    wait_condition(
        &env.client,
        ("BootstrapProvider", "infra-k", "sample"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| env.with_logs(e))?;
    let all = Api::<Deployment>::all(env.client.clone())
        .list(&ListParams::default().labels("management.cluster.x-k8s.io/owner-kind"))
        .await?;
    let mut names: Vec<String> = all
        .items
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d.metadata.namespace.clone().unwrap_or_default(),
                d.metadata.name.clone().unwrap_or_default()
            )
        })
        .collect();
    names.sort();
    // The fixture installed the core and infra-a/sample; no other test installs anything.
    assert_eq!(
        names,
        vec![
            "infra-a/sample-infra-controller-manager",
            "infra-k/sample-bootstrap-controller-manager",
            "sample-core-system/sample-core-controller-manager",
        ],
        "unexpected Deployments"
    );
    Ok(())
}

/// Kills the fixture's operator at once (SIGKILL, as a crash) and starts a new one.
fn restart_operator(cluster: &TestCluster) -> TestResult {
    let mut f = fixture();
    let f = f.as_mut().ok_or("no fixture")?;
    f.operator.kill();
    let operator = start_operator(cluster, OPERATOR_ARGS)?;
    operator.die_with_test()?;
    f.operator = operator;
    Ok(())
}
