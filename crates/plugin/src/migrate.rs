//! `migrate`: adopts providers installed by clusterctl into provider objects of the operator,
//! with no reinstall and no controller restart.
//!
//! clusterctl records each provider in its inventory, a `providers.clusterctl.cluster.x-k8s.io`
//! object named after the provider's label in the provider's namespace (`providerName`,
//! `type`, `version`), and labels every object it installs with `clusterctl.cluster.x-k8s.io`
//! and `cluster.x-k8s.io/provider=<label>`. The operator renders releases with the same
//! pipeline and labels, so a provider object naming the installed version (with the same
//! variables) makes the operator take the installed objects over as they are.
//!
//! Before writing anything, the command renders each release as the operator will and compares
//! the controller Deployments' pod templates with the installed ones: a difference (other
//! variables, other customizations) would restart a controller, so the command stops and says
//! where, unless `--allow-restart`. Then it creates the Secrets and provider objects, waits
//! until the operator reports every provider Ready at its version, checks that no Deployment
//! rolled out, and waits until the operator has taken clusterctl's inventory entries over: the
//! inventory stays, so clusterctl's `upgrade plan`, `describe` and `move` keep working.

mod from_go;

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use capi_components::render;
use capi_operator_api::{AnyProvider, ProviderType};
use kube::api::ListParams;
use serde_json::Value;

use crate::{
    cluster::{Cluster, ClusterFlags, not_found},
    init::{self, CreateFlags},
    progress::{self, Target, Want},
    providers::ProviderArg,
    release::SourceFlags,
    vars::VariableFlags,
};

pub use capi_components::inventory::{
    API_VERSION as INVENTORY_API_VERSION, CLUSTERCTL_LABEL, KIND as INVENTORY_KIND, PROVIDER_LABEL,
};

/// What installed the providers being migrated.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum From {
    /// `clusterctl init`/`upgrade` (its inventory names the providers).
    #[default]
    Clusterctl,
    /// kubernetes-sigs/cluster-api-operator (its `operator.cluster.x-k8s.io/v1alpha2` objects).
    ClusterApiOperator,
}

/// Flags of `migrate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// What manages the providers now.
    #[arg(long, value_enum, default_value_t = From::Clusterctl)]
    from: From,
    /// With --from cluster-api-operator: replace each v1alpha2 object with the same provider in
    /// this operator's API (default: keep the v1alpha2 objects, which the operator serves).
    #[arg(long)]
    convert: bool,
    /// With --from cluster-api-operator: its Deployment, as NAMESPACE/NAME (default: every
    /// Deployment running a cluster-api-operator image).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    operator_deployment: Option<String>,
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    variables: VariableFlags,
    #[command(flatten)]
    create: CreateFlags,
    /// Check and show what would be adopted; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Adopt even when the operator would change a controller Deployment (restarting it).
    #[arg(long)]
    allow_restart: bool,
    /// Do not install the operator's CRDs and policies.
    #[arg(long)]
    skip_operator: bool,
    /// More operator manifests to apply first (YAML files or directories).
    #[arg(long, value_name = "PATH")]
    operator_manifests: Vec<PathBuf>,
    /// How long to wait for the operator to report the providers Ready (e.g. 300s, 10m).
    #[arg(long, default_value = "10m", value_parser = crate::parse_duration)]
    timeout: Duration,
}

/// One clusterctl inventory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryEntry {
    /// Object name (the provider's label, e.g. `bootstrap-kubeadm`).
    pub object: String,
    /// Namespace (the provider's).
    pub namespace: String,
    /// Provider type.
    pub provider_type: ProviderType,
    /// Provider name (e.g. `kubeadm`).
    pub name: String,
    /// Installed version.
    pub version: String,
}

/// Reads an inventory object.
pub fn entry_of(o: &Value) -> anyhow::Result<InventoryEntry> {
    let s = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let object = s("/metadata/name");
    let ty = s("/type");
    let provider_type = ProviderType::from_kind(&ty)
        .with_context(|| format!("inventory entry {object}: unknown type {ty:?}"))?;
    let name = s("/providerName");
    let version = s("/version");
    if name.is_empty() || version.is_empty() {
        bail!("inventory entry {object} lacks providerName or version");
    }
    Ok(InventoryEntry {
        namespace: s("/metadata/namespace"),
        object,
        provider_type,
        name,
        version,
    })
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// The first place where `have` (a live object, with the apiserver's defaults) does not hold
/// what `want` (a rendered object) says: every field of `want` must be in `have` with the same
/// value; arrays must have the same length. Empty values match absent ones.
pub fn first_difference(want: &Value, have: Option<&Value>, path: &str) -> Option<String> {
    let Some(have) = have else {
        return (!is_empty(want)).then(|| format!("{path}: missing in the installed object"));
    };
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .find_map(|(k, v)| first_difference(v, h.get(k), &format!("{path}.{k}"))),
        (Value::Array(w), Value::Array(h)) => {
            if w.len() != h.len() {
                return Some(format!(
                    "{path}: {} entries rendered, {} installed",
                    w.len(),
                    h.len()
                ));
            }
            w.iter()
                .zip(h.iter())
                .enumerate()
                .find_map(|(i, (a, b))| first_difference(a, Some(b), &format!("{path}[{i}]")))
        }
        (Value::Null, _) => None,
        (w, h) if w == h => None,
        // int-or-string fields (ports, quantities) may come back in the other form.
        (Value::String(s), Value::Number(n)) | (Value::Number(n), Value::String(s))
            if *s == n.to_string() =>
        {
            None
        }
        (w, h) => Some(format!("{path}: rendered {w}, installed {h}")),
    }
}

fn str_at<'a>(o: &'a Value, p: &str) -> &'a str {
    o.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// What adopting one provider means.
struct Adoption {
    entry: InventoryEntry,
    planned: init::Planned,
    /// Deployments (namespace, name) of the rendered release with their live generation.
    deployments: Deployments,
    restarts: Vec<String>,
    creates: Vec<String>,
    leftovers: Vec<String>,
}

async fn inventory(cluster: &Cluster) -> anyhow::Result<Option<Vec<Value>>> {
    let Ok(api) = cluster
        .api(INVENTORY_API_VERSION, INVENTORY_KIND, None)
        .await
    else {
        return Ok(None);
    };
    let list = match api.list(&ListParams::default()).await {
        Ok(l) => l,
        Err(e) if not_found(&e) => return Ok(None),
        Err(e) => return Err(e).context("listing clusterctl's inventory"),
    };
    let mut out = Vec::new();
    for o in list.items {
        let mut v = serde_json::to_value(o)?;
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), INVENTORY_API_VERSION.into());
            m.insert("kind".into(), INVENTORY_KIND.into());
        }
        out.push(v);
    }
    Ok(Some(out))
}

/// Deployments (namespace, name) of a rendered release with their live generation.
type Deployments = Vec<(String, String, Option<i64>)>;

/// The rendered objects' (namespace, name) by (apiVersion, kind).
type RenderedKinds = BTreeMap<(String, String), Vec<(String, String)>>;

/// An object as the messages name it: `Kind namespace/name`, or `Kind name` when cluster-scoped.
fn shown(kind: &str, ns: &str, name: &str) -> String {
    format!(
        "{kind} {}{name}",
        if ns.is_empty() {
            String::new()
        } else {
            format!("{ns}/")
        }
    )
}

async fn compare(
    cluster: &Cluster,
    entry: &InventoryEntry,
    rendered: &[Value],
) -> anyhow::Result<(Deployments, Vec<String>, Vec<String>, Vec<String>)> {
    let mut deployments = Vec::new();
    let mut restarts = Vec::new();
    let mut creates = Vec::new();
    let mut kinds: RenderedKinds = BTreeMap::new();
    for o in rendered {
        let (av, kind) = (str_at(o, "/apiVersion"), str_at(o, "/kind"));
        let (ns, name) = (
            str_at(o, "/metadata/namespace"),
            str_at(o, "/metadata/name"),
        );
        kinds
            .entry((av.to_string(), kind.to_string()))
            .or_default()
            .push((ns.to_string(), name.to_string()));
        let live = match live_object(cluster, av, kind, ns, name).await? {
            Ok(live) => live,
            Err(create) => {
                creates.push(create);
                continue;
            }
        };
        if kind == "Deployment" {
            deployments.push((
                ns.to_string(),
                name.to_string(),
                live.pointer("/metadata/generation").and_then(Value::as_i64),
            ));
            if let Some(d) = first_difference(
                o.pointer("/spec/template").unwrap_or(&Value::Null),
                live.pointer("/spec/template"),
                "spec.template",
            ) {
                restarts.push(format!("Deployment {ns}/{name}: {d}"));
            }
        }
    }
    let leftovers = leftovers(cluster, entry, &kinds).await;
    Ok((deployments, restarts, creates, leftovers))
}

/// The live object of a rendered one, or (inner `Err`) the note that it will be created.
async fn live_object(
    cluster: &Cluster,
    av: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> anyhow::Result<Result<Value, String>> {
    let Ok(api) = cluster
        .api(av, kind, Some(ns).filter(|n| !n.is_empty()))
        .await
    else {
        return Ok(Err(format!(
            "{kind} {name} (the cluster does not serve {kind} of {av})"
        )));
    };
    match api.get_opt(name).await {
        Ok(Some(l)) => Ok(Ok(serde_json::to_value(l)?)),
        Ok(None) => Ok(Err(shown(kind, ns, name))),
        Err(e) => Err(e).context(format!("reading {kind} {ns}/{name}")),
    }
}

/// Objects clusterctl labelled for this provider that the release no longer renders.
async fn leftovers(
    cluster: &Cluster,
    entry: &InventoryEntry,
    kinds: &RenderedKinds,
) -> Vec<String> {
    let label = entry.provider_type.manifest_label(&entry.name);
    let selector = format!("{CLUSTERCTL_LABEL},{PROVIDER_LABEL}={label}");
    let mut leftovers = Vec::new();
    for ((av, kind), names) in kinds {
        let Ok(api) = cluster.api(av, kind, None).await else {
            continue;
        };
        let Ok(list) = api.list(&ListParams::default().labels(&selector)).await else {
            continue;
        };
        for o in list.items {
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            let name = o.metadata.name.clone().unwrap_or_default();
            if !names
                .iter()
                .any(|(n, m)| *m == name && (n.is_empty() || *n == ns))
            {
                leftovers.push(shown(kind, &ns, &name));
            }
        }
    }
    leftovers
}

/// Waits until the operator labels the inventory entry of `e` as its own (it keeps the entry
/// from then on, at the version it installs).
async fn kept_inventory(
    cluster: &Cluster,
    e: &InventoryEntry,
    timeout: Duration,
) -> anyhow::Result<()> {
    let (ar, _) = cluster
        .resolve(INVENTORY_API_VERSION, INVENTORY_KIND)
        .await?;
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        cluster.client.clone(),
        &e.namespace,
        &ar,
    );
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let live = api
            .get_opt(&e.object)
            .await
            .with_context(|| format!("reading inventory entry {}/{}", e.namespace, e.object))?;
        let owned = live.as_ref().is_some_and(|o| {
            o.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(capi_operator_api::OWNER_KIND_LABEL))
        });
        if owned {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the operator did not take clusterctl's inventory entry {}/{} over within {timeout:?} (is it running with --clusterctl-inventory=false?)",
                e.namespace,
                e.object
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn generation(cluster: &Cluster, ns: &str, name: &str) -> anyhow::Result<Option<i64>> {
    let api = cluster.api("apps/v1", "Deployment", Some(ns)).await?;
    Ok(api.get_opt(name).await?.and_then(|d| d.metadata.generation))
}

/// Runs `migrate`.
pub async fn run(args: &Args, cluster_flags: &ClusterFlags) -> anyhow::Result<()> {
    let cluster = Cluster::connect(cluster_flags).await?;
    if args.from == From::ClusterApiOperator {
        return from_go::run(args, &cluster).await;
    }
    if args.convert || args.operator_deployment.is_some() {
        bail!("--convert and --operator-deployment go with --from cluster-api-operator");
    }
    let Some(entries) = clusterctl_entries(&cluster).await? else {
        return Ok(());
    };
    if !args.skip_operator && !args.dry_run {
        init::install_operator(&cluster, &args.operator_manifests).await?;
    }
    let existing = match cluster.providers().await {
        Ok(p) => p,
        Err(_) if args.dry_run => Vec::new(),
        Err(e) => return Err(e),
    };
    let overlay = args.create.overlay()?;
    let file = args.variables.file()?;
    let mut adoptions = Vec::new();
    for e in entries {
        if let Some(p) = existing
            .iter()
            .find(|p| p.provider_type == e.provider_type && p.name() == e.name)
        {
            say!(
                "{} {} is already managed by the operator ({}/{}); skipped",
                e.provider_type.kind(),
                e.name,
                p.namespace(),
                p.name()
            );
            continue;
        }
        if let Some(a) = plan_adoption(&cluster, args, e, &overlay, &file).await? {
            adoptions.push(a);
        }
    }
    let restarts = show_plan(&adoptions);
    if !restarts.is_empty() && !args.allow_restart {
        bail!(
            "adopting would restart {} controller Deployment(s): give the variables clusterctl installed with (--variables FILE or the environment) and the customizations (--provider-spec FILE), or accept the restart with --allow-restart",
            restarts.len()
        );
    }
    if args.dry_run || adoptions.is_empty() {
        return Ok(());
    }
    adopt(&cluster, args, &adoptions, &overlay).await
}

/// clusterctl's inventory entries, sorted; `None` (said so) when there is nothing to migrate.
async fn clusterctl_entries(cluster: &Cluster) -> anyhow::Result<Option<Vec<InventoryEntry>>> {
    let Some(items) = inventory(cluster).await? else {
        say!(
            "no clusterctl inventory (providers.clusterctl.cluster.x-k8s.io) in the cluster: nothing to migrate"
        );
        return Ok(None);
    };
    let mut entries: Vec<InventoryEntry> =
        items.iter().map(entry_of).collect::<anyhow::Result<_>>()?;
    entries.sort_by_key(|e| (e.provider_type, e.name.clone()));
    if entries.is_empty() {
        say!("clusterctl's inventory is empty: nothing to migrate");
        return Ok(None);
    }
    Ok(Some(entries))
}

/// What adopting the provider of entry `e` means: its release located and rendered as the
/// operator will render it, then compared with what is installed.
async fn plan_adoption(
    cluster: &Cluster,
    args: &Args,
    e: InventoryEntry,
    overlay: &Value,
    file: &BTreeMap<String, String>,
) -> anyhow::Result<Option<Adoption>> {
    let arg = ProviderArg {
        provider_type: e.provider_type,
        name: e.name.clone(),
        namespace: Some(e.namespace.clone()),
        version: Some(e.version.clone()),
        source: None,
    };
    let mut planned =
        init::plan(cluster, &[arg], &args.sources, args.create.preloaded, file).await?;
    let Some(planned) = planned.pop() else {
        return Ok(None);
    };
    let (t, name, ns) = (e.provider_type, e.name.as_str(), e.namespace.as_str());
    let secret = (!planned.vars.is_empty()).then(|| init::secret_name(t, name));
    let obj = init::provider_object(
        t,
        name,
        ns,
        overlay,
        &planned.release.version,
        secret.as_deref(),
        planned.located.fetch_config(t, name).as_ref(),
    )?;
    let provider = AnyProvider::from_value(obj).map_err(|err| anyhow::anyhow!("{err}"))?;
    let vars = planned.vars.clone();
    let rendered = render::render(&provider, &planned.release, |k| vars.get(k).cloned())
        .with_context(|| {
            format!(
                "rendering {} {name} {} as the operator will",
                t.kind(),
                e.version
            )
        })?;
    let (deployments, restarts, creates, leftovers) =
        compare(cluster, &e, &rendered.objects).await?;
    Ok(Some(Adoption {
        entry: e,
        planned,
        deployments,
        restarts,
        creates,
        leftovers,
    }))
}

/// Says what adopting each provider does; returns the Deployments it would restart.
fn show_plan(adoptions: &[Adoption]) -> Vec<String> {
    let mut restarts = Vec::new();
    for a in adoptions {
        let e = &a.entry;
        say!(
            "{} {}/{} {} (clusterctl inventory {}/{}) from {}",
            e.provider_type.kind(),
            e.namespace,
            e.name,
            e.version,
            e.namespace,
            e.object,
            a.planned.located.description
        );
        for c in &a.creates {
            say!("  will be created (not installed now): {c}");
        }
        for l in &a.leftovers {
            say!(
                "  installed by clusterctl but not in the release as rendered; left in place: {l}"
            );
        }
        for r in &a.restarts {
            say!("  would restart: {r}");
        }
        restarts.extend(a.restarts.iter().cloned());
    }
    restarts
}

/// Hands the providers to the operator, waits until it made them Ready, says which
/// Deployments changed, and waits until it keeps clusterctl's inventory entries.
async fn adopt(
    cluster: &Cluster,
    args: &Args,
    adoptions: &[Adoption],
    overlay: &Value,
) -> anyhow::Result<()> {
    for a in adoptions {
        init::write(cluster, &a.planned, overlay, "adopting").await?;
    }
    let targets: Vec<Target> = adoptions
        .iter()
        .map(|a| Target {
            api: capi_operator_api::ProviderApi::Management,
            provider_type: a.entry.provider_type,
            namespace: a.entry.namespace.clone(),
            name: a.entry.name.clone(),
            version: Some(a.entry.version.clone()),
            want: Want::Ready,
        })
        .collect();
    progress::wait(
        cluster,
        &targets,
        args.timeout,
        "the operator to adopt the providers",
    )
    .await?;
    let rolled = rolled_deployments(cluster, adoptions).await?;
    if rolled.is_empty() {
        say!(
            "adopted {} providers; no Deployment was changed",
            adoptions.len()
        );
    } else {
        say!(
            "adopted {} providers; changed: {}",
            adoptions.len(),
            rolled.join(", ")
        );
    }
    for a in adoptions {
        let e = &a.entry;
        kept_inventory(cluster, e, args.timeout).await?;
        say!(
            "kept clusterctl inventory entry {}/{}: the operator maintains it now",
            e.namespace,
            e.object
        );
    }
    Ok(())
}

/// The Deployments whose generation changed since the adoption was planned.
async fn rolled_deployments(
    cluster: &Cluster,
    adoptions: &[Adoption],
) -> anyhow::Result<Vec<String>> {
    let mut rolled = Vec::new();
    for a in adoptions {
        for (ns, name, before) in &a.deployments {
            let after = generation(cluster, ns, name).await?;
            if after != *before {
                rolled.push(format!(
                    "Deployment {ns}/{name} (generation {} -> {})",
                    before.unwrap_or_default(),
                    after.unwrap_or_default()
                ));
            }
        }
    }
    Ok(rolled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_comparison_tolerates_defaults() {
        let want = json!({"spec": {"containers": [{"name": "m", "image": "x:1", "ports": [{"containerPort": 9443}], "resources": {}}]}, "metadata": {"creationTimestamp": null}});
        let have = json!({"spec": {"containers": [{"name": "m", "image": "x:1", "imagePullPolicy": "IfNotPresent", "ports": [{"containerPort": 9443, "protocol": "TCP"}]}], "restartPolicy": "Always"}, "metadata": {}});
        assert_eq!(first_difference(&want, Some(&have), "t"), None);
        let changed = json!({"spec": {"containers": [{"name": "m", "image": "x:2", "ports": [{"containerPort": 9443}]}]}});
        assert_eq!(
            first_difference(&changed, Some(&have), "t"),
            Some("t.spec.containers[0].image: rendered \"x:2\", installed \"x:1\"".into())
        );
        let more = json!({"spec": {"containers": [{"name": "m"}, {"name": "n"}]}});
        assert!(
            first_difference(&more, Some(&have), "t")
                .is_some_and(|d| d.contains("2 entries rendered, 1 installed"))
        );
        assert_eq!(
            first_difference(&json!({"port": "8080"}), Some(&json!({"port": 8080})), "p"),
            None
        );
    }

    #[test]
    fn inventory_entries() -> anyhow::Result<()> {
        let e = entry_of(&json!({
            "apiVersion": INVENTORY_API_VERSION, "kind": "Provider",
            "metadata": {"name": "bootstrap-kubeadm", "namespace": "capi-kubeadm-bootstrap-system"},
            "providerName": "kubeadm", "type": "BootstrapProvider", "version": "v1.11.0"
        }))?;
        assert_eq!(e.provider_type, ProviderType::Bootstrap);
        assert_eq!(
            (e.name.as_str(), e.version.as_str()),
            ("kubeadm", "v1.11.0")
        );
        assert!(entry_of(&json!({"metadata": {"name": "x"}, "type": "Bogus"})).is_err());
        Ok(())
    }
}
