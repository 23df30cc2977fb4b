//! `move`: moves a management cluster run by the operator to another one (a pivot). The
//! provider objects and what they read (variables Secret, additional manifests, release
//! ConfigMaps) are declared on the target; once the target's providers are Ready the real
//! `clusterctl move` takes the Clusters with everything they own; then each source provider is
//! retired: `deletionPolicy: Orphan`, its object deleted, its managers scaled to zero.
//!
//! The decisions live in [`plan`] (no client); this module reads both clusters into
//! [`plan::Sides`], prints or runs the plan, and writes. Every step is planned from what the
//! clusters hold, so a rerun after an interruption continues where the last one stopped.

mod plan;

use std::{collections::BTreeMap, path::PathBuf, process::Command, time::Duration};

use anyhow::{Context, bail};
use capi_operator_api::{
    AnyProvider, OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, ProviderType,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Secret},
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::cluster::{Cluster, ClusterFlags, FIELD_MANAGER, describe, provider_resource};
use plan::{Declared, Key, Sides, Step};

/// `kubectl capi-providers move`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Kubeconfig of the target management cluster (the operator and its CRDs installed).
    #[arg(long, value_name = "PATH")]
    pub to_kubeconfig: PathBuf,
    /// Context of the target's kubeconfig (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub to_context: Option<String>,
    /// Move only the Clusters of this namespace (default: every namespace holding one). The
    /// source's providers are retired only when no Cluster is left on the source.
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The clusterctl binary (v1.12 or newer); default: $CLUSTERCTL, then `clusterctl` on PATH.
    #[arg(long, value_name = "PATH")]
    pub clusterctl: Option<PathBuf>,
    /// How long to wait for the target's providers to be Ready, and for each source provider
    /// object to go.
    #[arg(long, default_value = "10m", value_parser = crate::parse_duration)]
    pub timeout: Duration,
    /// Print the plan (after the comparison) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `move`.
pub async fn run(args: &Args, flags: &ClusterFlags) -> anyhow::Result<()> {
    let source = Cluster::connect(flags)
        .await
        .context("the source cluster")?;
    let target = Cluster::connect(&ClusterFlags {
        kubeconfig: Some(args.to_kubeconfig.clone()),
        context: args.to_context.clone(),
    })
    .await
    .context("the target cluster")?;
    let (sides, objects) = read_sides(&source, &target, args.namespace.as_deref()).await?;
    let plan = match plan::plan(&sides) {
        Ok(p) => p,
        Err(conflicts) => {
            for c in &conflicts {
                eprintln!("move: refused: {c}");
            }
            bail!(
                "{} reason(s) to refuse; nothing was changed",
                conflicts.len()
            );
        }
    };
    let clusterctl = clusterctl_path(args);
    if plan.steps.iter().any(|s| matches!(s, Step::Move(_))) {
        let core = objects
            .iter()
            .find(|p| p.provider_type == ProviderType::Core)
            .and_then(|p| p.spec.version.as_deref());
        let version = clusterctl_version(&clusterctl)?;
        plan::clusterctl_fits(&version, core).map_err(anyhow::Error::msg)?;
    }
    if plan.steps.is_empty() && plan.kept.is_none() {
        say!("nothing to move: the source declares no providers and holds no Clusters");
        return Ok(());
    }
    for (i, step) in plan.steps.iter().enumerate() {
        say!("{}. {step}", i + 1);
    }
    if let Some(kept) = &plan.kept {
        say!("kept: {kept}");
    }
    if args.dry_run {
        return Ok(());
    }
    for step in &plan.steps {
        run_step(step, args, &source, &target, &objects, &clusterctl, flags).await?;
    }
    say!("moved");
    Ok(())
}

async fn run_step(
    step: &Step,
    args: &Args,
    source: &Cluster,
    target: &Cluster,
    objects: &[AnyProvider],
    clusterctl: &PathBuf,
    flags: &ClusterFlags,
) -> anyhow::Result<()> {
    let object = |k: &Key| {
        objects
            .iter()
            .find(|p| key_of(p) == *k)
            .with_context(|| format!("{k} is no longer on the source"))
    };
    match step {
        Step::Declare(k) => declare(source, target, object(k)?).await,
        Step::WaitReady(keys) => wait_ready(target, keys, args.timeout).await,
        Step::Move(namespaces) => {
            for ns in namespaces {
                clusterctl_move(clusterctl, args, flags, ns)?;
            }
            Ok(())
        }
        Step::Retire(k) => retire(source, object(k)?, args.timeout).await,
    }
}

fn key_of(p: &AnyProvider) -> Key {
    Key {
        provider_type: p.provider_type,
        namespace: p.namespace().to_string(),
        name: p.name().to_string(),
    }
}

fn declared(p: &AnyProvider) -> Declared {
    let status = p.status.as_ref();
    let at_version = status
        .and_then(|s| s.installed_version.as_deref())
        .is_some_and(|v| p.spec.version.as_deref().is_none_or(|want| want == v));
    Declared {
        key: key_of(p),
        version: p.spec.version.clone(),
        contract: status.and_then(|s| s.contract.clone()),
        ready: at_version && status.is_some_and(|s| s.is_true("Ready")),
        deleting: p.metadata.deletion_timestamp.is_some(),
    }
}

/// Both clusters as the plan needs them, and the source's provider objects.
async fn read_sides(
    source: &Cluster,
    target: &Cluster,
    namespace: Option<&str>,
) -> anyhow::Result<(Sides, Vec<AnyProvider>)> {
    let objects = source.providers().await.context("the source")?;
    let target_objects = target
        .providers()
        .await
        .context("the target (install the operator there first)")?;
    let clusters = clusters(source).await?;
    let (to_move, left) = clusters
        .into_iter()
        .partition(|c| namespace.is_none_or(|ns| c.split_once('/').is_some_and(|(n, _)| n == ns)));
    let sides = Sides {
        source: objects.iter().map(declared).collect(),
        target: target_objects.iter().map(declared).collect(),
        same_cluster: cluster_id(source).await? == cluster_id(target).await?,
        clusters_to_move: to_move,
        clusters_left: left,
    };
    Ok((sides, objects))
}

/// The uid of the kube-system namespace: one per cluster, whatever address reaches it.
async fn cluster_id(c: &Cluster) -> anyhow::Result<String> {
    let api: Api<Namespace> = Api::all(c.client.clone());
    let ns = api
        .get("kube-system")
        .await
        .context("reading kube-system")?;
    Ok(ns.metadata.uid.unwrap_or_default())
}

/// `namespace/name` of every Cluster on `c` (none when Cluster API's CRDs are not served).
async fn clusters(c: &Cluster) -> anyhow::Result<Vec<String>> {
    let Ok(api) = c.api("cluster.x-k8s.io/v1beta2", "Cluster", None).await else {
        return Ok(Vec::new());
    };
    let list = api
        .list(&ListParams::default())
        .await
        .context("listing Clusters")?;
    let mut out: Vec<String> = list
        .items
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o.metadata.namespace.as_deref().unwrap_or(""),
                o.metadata.name.as_deref().unwrap_or("")
            )
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The provider object as declared: spec, name, namespace, labels and annotations (no status,
/// no server-set metadata, no kubectl last-applied copy).
fn declaration(p: &AnyProvider) -> anyhow::Result<Value> {
    let mut annotations = p.metadata.annotations.clone().unwrap_or_default();
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    Ok(json!({
        "apiVersion": format!("{}/{}", capi_operator_api::GROUP, capi_operator_api::VERSION),
        "kind": p.provider_type.kind(),
        "metadata": {
            "name": p.name(),
            "namespace": p.namespace(),
            "labels": p.metadata.labels.clone().unwrap_or_default(),
            "annotations": annotations,
        },
        "spec": serde_json::to_value(&p.spec).context("the provider's spec")?,
    }))
}

/// Declares `p` on the target after what it reads: its variables Secret, its additional
/// manifests ConfigMap and the release ConfigMaps its `fetchConfig.selector` selects.
async fn declare(source: &Cluster, target: &Cluster, p: &AnyProvider) -> anyhow::Result<()> {
    let ns = p.namespace();
    target.ensure_namespace(ns).await?;
    if let Some(name) = &p.spec.secret_name {
        let sns = p.spec.secret_namespace.as_deref().unwrap_or(ns);
        copy_secret(source, target, sns, name).await?;
    }
    let mut configmaps: Vec<(String, String)> = Vec::new();
    if let Some(m) = &p.spec.additional_manifests {
        configmaps.push((
            m.namespace.clone().unwrap_or_else(|| ns.into()),
            m.name.clone(),
        ));
    }
    if let Some(selector) = p
        .spec
        .fetch_config
        .as_ref()
        .and_then(|f| f.selector.as_ref())
    {
        let labels = selector_string(selector.match_labels.as_ref());
        let api: Api<ConfigMap> = Api::namespaced(source.client.clone(), ns);
        let list = api
            .list(&ListParams::default().labels(&labels))
            .await
            .with_context(|| format!("listing the release ConfigMaps of {}", describe(p)))?;
        configmaps.extend(
            list.items
                .iter()
                .map(|c| (ns.to_string(), c.metadata.name.clone().unwrap_or_default())),
        );
    }
    for (cns, name) in &configmaps {
        copy_configmap(source, target, cns, name).await?;
    }
    target.apply(&declaration(p)?).await?;
    say!(
        "declared {} on the target ({} ConfigMap(s){})",
        describe(p),
        configmaps.len(),
        if p.spec.secret_name.is_some() {
            ", its variables Secret"
        } else {
            ""
        }
    );
    Ok(())
}

fn selector_string(labels: Option<&BTreeMap<String, String>>) -> String {
    labels
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Copies a Secret: its type, labels and data; the values go from one API to the other and are
/// never printed.
async fn copy_secret(
    source: &Cluster,
    target: &Cluster,
    ns: &str,
    name: &str,
) -> anyhow::Result<()> {
    let api: Api<Secret> = Api::namespaced(source.client.clone(), ns);
    let s = api
        .get(name)
        .await
        .with_context(|| format!("reading Secret {ns}/{name} on the source"))?;
    target.ensure_namespace(ns).await?;
    let obj = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "labels": s.metadata.labels.unwrap_or_default()},
        "type": s.type_.unwrap_or_else(|| "Opaque".into()),
        "data": s.data.unwrap_or_default(),
    });
    target
        .apply(&obj)
        .await
        .with_context(|| format!("writing Secret {ns}/{name} on the target"))
}

async fn copy_configmap(
    source: &Cluster,
    target: &Cluster,
    ns: &str,
    name: &str,
) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(source.client.clone(), ns);
    let c = api
        .get(name)
        .await
        .with_context(|| format!("reading ConfigMap {ns}/{name} on the source"))?;
    target.ensure_namespace(ns).await?;
    let obj = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": ns,
            "labels": c.metadata.labels.unwrap_or_default(),
            "annotations": c.metadata.annotations.unwrap_or_default(),
        },
        "data": c.data.unwrap_or_default(),
        "binaryData": c.binary_data.unwrap_or_default(),
    });
    target
        .apply(&obj)
        .await
        .with_context(|| format!("writing ConfigMap {ns}/{name} on the target"))
}

/// Waits until every provider of `keys` is Ready at its declared version on the target.
async fn wait_ready(target: &Cluster, keys: &[Key], timeout: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    for k in keys {
        loop {
            let p = target
                .provider(k.provider_type, &k.namespace, &k.name)
                .await?;
            if p.as_ref().is_some_and(|p| declared(p).ready) {
                say!("{k} is Ready on the target");
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let summary = p
                    .and_then(|p| p.status.and_then(|s| s.summary))
                    .unwrap_or_else(|| "no status: is the operator running on the target?".into());
                bail!("{k} is not Ready on the target after {timeout:?}: {summary}");
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    Ok(())
}

fn clusterctl_path(args: &Args) -> PathBuf {
    args.clusterctl
        .clone()
        .or_else(|| std::env::var_os("CLUSTERCTL").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("clusterctl"))
}

fn clusterctl_version(path: &PathBuf) -> anyhow::Result<String> {
    let out = Command::new(path)
        .args(["version", "-o", "short"])
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .output()
        .with_context(|| {
            format!(
                "running {} (give it with --clusterctl or $CLUSTERCTL)",
                path.display()
            )
        })?;
    if !out.status.success() {
        bail!(
            "{} version failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The real `clusterctl move` of namespace `ns`; its output goes to the user as it comes.
fn clusterctl_move(
    path: &PathBuf,
    args: &Args,
    flags: &ClusterFlags,
    ns: &str,
) -> anyhow::Result<()> {
    let mut cmd = Command::new(path);
    cmd.args(["move", "-n", ns, "--to-kubeconfig"])
        .arg(&args.to_kubeconfig)
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true");
    if let Some(c) = &args.to_context {
        cmd.args(["--to-kubeconfig-context", c]);
    }
    // The source is what the plugin was pointed at: the same kubeconfig and context.
    if let Some(kc) = &flags.kubeconfig {
        cmd.arg("--kubeconfig").arg(kc);
    }
    if let Some(c) = &flags.context {
        cmd.args(["--kubeconfig-context", c]);
    }
    let status = cmd
        .status()
        .with_context(|| format!("running {}", path.display()))?;
    if !status.success() {
        bail!(
            "clusterctl move -n {ns} failed ({status}); run move again once the cause is fixed: it continues from here"
        );
    }
    say!("moved the Clusters of namespace {ns}");
    Ok(())
}

/// Retires a source provider: Orphan, so deleting its object removes nothing the operator
/// installed (CRDs, inventory entry, Secrets stay for a move back); then its managers are
/// scaled to zero, so no controller on the source acts on the infrastructure the target now
/// manages.
async fn retire(source: &Cluster, p: &AnyProvider, timeout: Duration) -> anyhow::Result<()> {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        source.client.clone(),
        p.namespace(),
        &provider_resource(p.provider_type),
    );
    if p.spec.deletion_policy != capi_operator_api::DeletionPolicy::Orphan {
        source
            .patch_provider(p, &json!({"spec": {"deletionPolicy": "Orphan"}}))
            .await?;
    }
    match api.delete(p.name(), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if crate::cluster::not_found(&e) => {}
        Err(e) => return Err(e).with_context(|| format!("deleting {}", describe(p))),
    }
    let deadline = tokio::time::Instant::now() + timeout;
    while api.get_opt(p.name()).await?.is_some() {
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{} did not go within {timeout:?}: is the operator running on the source?",
                describe(p)
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let stopped = stop_managers(source, p).await?;
    say!(
        "retired {} on the source (Orphan; {stopped} Deployment(s) scaled to 0)",
        describe(p)
    );
    Ok(())
}

/// Scales the Deployments the operator installed for `p` to zero replicas.
async fn stop_managers(source: &Cluster, p: &AnyProvider) -> anyhow::Result<usize> {
    let selector = format!(
        "{OWNER_KIND_LABEL}={},{OWNER_NAME_LABEL}={},{OWNER_NAMESPACE_LABEL}={}",
        p.provider_type.kind(),
        p.name(),
        p.namespace()
    );
    let api: Api<Deployment> = Api::all(source.client.clone());
    let list = api.list(&ListParams::default().labels(&selector)).await?;
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    for d in &list.items {
        let ns = d.metadata.namespace.as_deref().unwrap_or_default();
        let name = d.metadata.name.as_deref().unwrap_or_default();
        Api::<Deployment>::namespaced(source.client.clone(), ns)
            .patch(
                name,
                &params,
                &Patch::Merge(json!({"spec": {"replicas": 0}})),
            )
            .await
            .with_context(|| format!("scaling Deployment {ns}/{name} to 0"))?;
    }
    Ok(list.items.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy is the declaration alone: spec, name, namespace, labels and annotations; never
    /// the status, server-set metadata or kubectl's last-applied copy (which could hold values).
    #[test]
    fn the_declaration_copied_to_the_target_has_no_status_nor_server_metadata() -> anyhow::Result<()>
    {
        let source = json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": "InfrastructureProvider",
            "metadata": {
                "name": "sample", "namespace": "sample-infra-system",
                "uid": "1234", "resourceVersion": "99", "generation": 3,
                "finalizers": ["management.cluster.x-k8s.io/cleanup"],
                "labels": {"team": "infra"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"secret\":\"value\"}",
                    "note": "kept"
                }
            },
            "spec": {"version": "v0.2.0", "secretName": "sample-vars", "deletionPolicy": "Purge"},
            "status": {"installedVersion": "v0.2.0", "contract": "v1beta2"}
        });
        let p = AnyProvider::from_value(source)?;
        let d = declaration(&p)?;
        assert_eq!(
            d,
            json!({
                "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
                "kind": "InfrastructureProvider",
                "metadata": {
                    "name": "sample", "namespace": "sample-infra-system",
                    "labels": {"team": "infra"},
                    "annotations": {"note": "kept"}
                },
                "spec": {"version": "v0.2.0", "secretName": "sample-vars", "deletionPolicy": "Purge"}
            })
        );
        assert_eq!(selector_string(p.metadata.labels.as_ref()), "team=infra");
        Ok(())
    }
}
