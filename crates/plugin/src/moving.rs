//! `move`: moves a management cluster run by the operator to another one (a pivot). The
//! provider objects and what they read (variables Secret, additional manifests, release
//! ConfigMaps) are declared on the target; once the target's providers are Ready the real
//! `clusterctl move` takes the Clusters with everything they own; then each source provider is
//! retired: `deletionPolicy: Orphan`, its object deleted, its managers scaled to zero.
//!
//! What `clusterctl move` takes is listed at whatever version the source serves (see
//! [`movables`]); a listing that fails stops `move` before any write. Retiring happens only
//! after a fresh listing finds none of it left on the source. What a provider reads is created
//! on the target, never overwritten: a same-named Secret or ConfigMap holding other data there
//! refuses the move before anything is written.
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
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Namespace, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{
        ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
        PostParams,
    },
    discovery,
    error::DiscoveryError,
};
use serde_json::{Value, json};

use crate::cluster::{Cluster, ClusterFlags, FIELD_MANAGER, describe, provider_resource};
use plan::{Declared, Key, Movable, Sides, Step};

/// The API group of Cluster API's Cluster kind.
const CLUSTER_API_GROUP: &str = "cluster.x-k8s.io";

/// `kubectl capi-providers move`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Kubeconfig of the target management cluster (the operator and its CRDs installed).
    #[arg(long, value_name = "PATH", required_unless_present_any = ["to_directory", "from_directory"])]
    pub to_kubeconfig: Option<PathBuf>,
    /// Back up the Clusters and what they own to DIR instead (`clusterctl move
    /// --to-directory`): the providers stay.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["to_kubeconfig", "from_directory", "dry_run"])]
    pub to_directory: Option<PathBuf>,
    /// Restore a backup from DIR into this cluster (`clusterctl move --from-directory`); its
    /// providers must be installed and Ready.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["to_kubeconfig", "dry_run"])]
    pub from_directory: Option<PathBuf>,
    /// Context of the target's kubeconfig (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub to_context: Option<String>,
    /// Move only this namespace (default: every namespace holding a Cluster, ClusterClass,
    /// ClusterResourceSet or object labelled clusterctl.cluster.x-k8s.io/move). The source's
    /// providers are retired only when none of these is left on the source.
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

/// The arguments of the real `clusterctl move` for a backup (`--to-directory`) or a restore
/// (`--from-directory`) of the cluster the plugin is pointed at; `None` for a move between
/// clusters.
pub fn directory_args(args: &Args, flags: &ClusterFlags) -> Option<Vec<std::ffi::OsString>> {
    let (flag, dir) = match (&args.to_directory, &args.from_directory) {
        (Some(d), _) => ("--to-directory", d),
        (None, Some(d)) => ("--from-directory", d),
        (None, None) => return None,
    };
    let mut out: Vec<std::ffi::OsString> = vec!["move".into(), flag.into(), dir.into()];
    if let Some(ns) = &args.namespace {
        out.extend(["-n".into(), ns.into()]);
    }
    if let Some(kc) = &flags.kubeconfig {
        out.extend(["--kubeconfig".into(), kc.into()]);
    }
    if let Some(c) = &flags.context {
        out.extend(["--kubeconfig-context".into(), c.into()]);
    }
    Some(out)
}

/// Runs `clusterctl move` with `argv`; its output goes to the user as it comes.
fn run_clusterctl(path: &PathBuf, argv: &[std::ffi::OsString]) -> anyhow::Result<()> {
    let status = Command::new(path)
        .args(argv)
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .status()
        .with_context(|| {
            format!(
                "running {} (give it with --clusterctl or $CLUSTERCTL)",
                path.display()
            )
        })?;
    if !status.success() {
        bail!("clusterctl move failed ({status})");
    }
    Ok(())
}

/// Runs `move`.
pub async fn run(args: &Args, flags: &ClusterFlags) -> anyhow::Result<()> {
    if let Some(argv) = directory_args(args, flags) {
        run_clusterctl(&clusterctl_path(args), &argv)?;
        match (&args.to_directory, &args.from_directory) {
            (Some(d), _) => say!("backed up to {}", d.display()),
            (_, Some(d)) => say!("restored from {}", d.display()),
            _ => {}
        }
        return Ok(());
    }
    let Some(to_kubeconfig) = args.to_kubeconfig.clone() else {
        bail!("give --to-kubeconfig, --to-directory or --from-directory");
    };
    let source = Cluster::connect(flags)
        .await
        .context("the source cluster")?;
    let target = Cluster::connect(&ClusterFlags {
        kubeconfig: Some(to_kubeconfig),
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
    let prepared = prepare(&plan, &source, &target, &objects).await?;
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
        say!(
            "nothing to move: the source declares no providers and holds nothing clusterctl moves"
        );
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
    execute(&plan, args, flags, (&source, &target), &objects, &prepared).await?;
    say!("moved");
    Ok(())
}

/// What each provider to declare reads, compared with the target before anything is written
/// (also for `--dry-run`): a differing Secret or ConfigMap, or a selector selecting every
/// ConfigMap, refuses the whole move.
async fn prepare(
    plan: &plan::Plan,
    source: &Cluster,
    target: &Cluster,
    objects: &[AnyProvider],
) -> anyhow::Result<BTreeMap<Key, Inputs>> {
    let mut prepared = BTreeMap::new();
    let mut refusals = Vec::new();
    for step in &plan.steps {
        if let Step::Declare(k) = step {
            match inputs(source, target, provider_of(objects, k)?).await? {
                Ok(i) => {
                    prepared.insert(k.clone(), i);
                }
                Err(r) => refusals.extend(r),
            }
        }
    }
    if !refusals.is_empty() {
        for r in &refusals {
            eprintln!("move: refused: {r}");
        }
        bail!(
            "{} reason(s) to refuse; nothing was changed",
            refusals.len()
        );
    }
    Ok(prepared)
}

/// Runs the steps in order. Before the first retirement the source is listed again, whatever
/// clusterctl reported: every provider stays while anything it should have moved is there.
async fn execute(
    plan: &plan::Plan,
    args: &Args,
    flags: &ClusterFlags,
    (source, target): (&Cluster, &Cluster),
    objects: &[AnyProvider],
    prepared: &BTreeMap<Key, Inputs>,
) -> anyhow::Result<()> {
    let clusterctl = clusterctl_path(args);
    let mut relisted = false;
    for step in &plan.steps {
        if matches!(step, Step::Retire(_)) && !relisted {
            let still = movables(source)
                .await
                .context("listing the source again before retiring its providers")?;
            if let Err(why) = plan::retire_allowed(&still) {
                bail!("not retiring: {why}");
            }
            relisted = true;
        }
        match step {
            Step::Declare(k) => {
                let i = prepared
                    .get(k)
                    .with_context(|| format!("{k}: its inputs were not read"))?;
                declare(target, provider_of(objects, k)?, i).await?;
            }
            Step::WaitReady(keys) => wait_ready(target, keys, args.timeout).await?,
            Step::Move(namespaces) => {
                for ns in namespaces {
                    clusterctl_move(&clusterctl, args, flags, ns)?;
                }
            }
            Step::Retire(k) => retire(source, provider_of(objects, k)?, args.timeout).await?,
        }
    }
    Ok(())
}

/// The source's provider object of `k`.
fn provider_of<'a>(objects: &'a [AnyProvider], k: &Key) -> anyhow::Result<&'a AnyProvider> {
    objects
        .iter()
        .find(|p| key_of(p) == *k)
        .with_context(|| format!("{k} is no longer on the source"))
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
    let (to_move, left) = plan::split(movables(source).await?, namespace);
    let sides = Sides {
        source: objects.iter().map(declared).collect(),
        target: target_objects.iter().map(declared).collect(),
        same_cluster: cluster_id(source).await? == cluster_id(target).await?,
        to_move,
        left,
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

/// The group of ClusterResourceSet.
const ADDONS_GROUP: &str = "addons.cluster.x-k8s.io";
/// The label clusterctl moves an object for, whatever its kind.
const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";
/// The label of every object a provider's release installs (CRDs included), as clusterctl and
/// the operator set it.
const CLUSTERCTL_LABEL: &str = "clusterctl.cluster.x-k8s.io";

/// Everything on `c` that `clusterctl move` takes and that needs the providers while it is
/// there, sorted:
/// - Clusters and ClusterClasses (`cluster.x-k8s.io`) and ClusterResourceSets
///   (`addons.cluster.x-k8s.io`), listed at whichever version the source serves the kind
///   (discovery: its preferred version, else any version serving it), so a Cluster API
///   release serving only v1beta1 counts too;
/// - objects labelled `clusterctl.cluster.x-k8s.io/move`: Secrets, ConfigMaps, and the
///   namespaced custom resources of every CRD labelled `clusterctl.cluster.x-k8s.io` (the
///   providers' CRDs, the kinds clusterctl itself walks), at the CRD's storage version.
///
/// A group that is not served at all has none; any other failure (discovery, a list) is an
/// error, so `move` never plans, nor retires, from a listing it could not complete.
async fn movables(c: &Cluster) -> anyhow::Result<Vec<Movable>> {
    let mut out = Vec::new();
    for (group, kinds) in [
        (CLUSTER_API_GROUP, &["Cluster", "ClusterClass"][..]),
        (ADDONS_GROUP, &["ClusterResourceSet"][..]),
    ] {
        let Some(served) = served_group(c, group).await? else {
            continue;
        };
        for kind in kinds {
            if let Some(resource) = served_kind(&served, kind) {
                out.extend(list_movable(c, &resource, None).await?);
            }
        }
    }
    for resource in [
        ApiResource::erase::<Secret>(&()),
        ApiResource::erase::<ConfigMap>(&()),
    ] {
        out.extend(list_movable(c, &resource, Some(MOVE_LABEL)).await?);
    }
    let crds = Api::<CustomResourceDefinition>::all(c.client.clone())
        .list(&ListParams::default().labels(CLUSTERCTL_LABEL))
        .await
        .context("listing the providers' CRDs")?;
    for crd in &crds.items {
        if let Some(resource) = labelled_kind(crd) {
            out.extend(list_movable(c, &resource, Some(MOVE_LABEL)).await?);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Every object of `resource` on `c` (those carrying `label` when given), as [`Movable`]s.
async fn list_movable(
    c: &Cluster,
    resource: &ApiResource,
    label: Option<&str>,
) -> anyhow::Result<Vec<Movable>> {
    let api: Api<DynamicObject> = Api::all_with(c.client.clone(), resource);
    let params = label.map_or_else(ListParams::default, |l| ListParams::default().labels(l));
    let list = api
        .list_metadata(&params)
        .await
        .with_context(|| format!("listing {} ({})", resource.plural, resource.api_version))?;
    Ok(list
        .items
        .into_iter()
        .map(|o| Movable {
            kind: resource.kind.clone(),
            namespace: o.metadata.namespace.unwrap_or_default(),
            name: o.metadata.name.unwrap_or_default(),
        })
        .collect())
}

/// The namespaced kind a provider CRD defines, at its storage version (read without
/// conversion), or `None` for a cluster-scoped CRD or one serving nothing.
fn labelled_kind(crd: &CustomResourceDefinition) -> Option<ApiResource> {
    let spec = &crd.spec;
    if spec.scope != "Namespaced" {
        return None;
    }
    let version = spec
        .versions
        .iter()
        .find(|v| v.served && v.storage)
        .or_else(|| spec.versions.iter().find(|v| v.served))?;
    Some(ApiResource {
        group: spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", spec.group, version.name),
        kind: spec.names.kind.clone(),
        plural: spec.names.plural.clone(),
    })
}

/// The discovery of `group` on `c`; `None` only when the source does not serve the group.
async fn served_group(c: &Cluster, group: &str) -> anyhow::Result<Option<discovery::ApiGroup>> {
    match discovery::group(&c.client, group).await {
        Ok(g) => Ok(Some(g)),
        Err(e) if not_served(&e) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("discovering the {group} API on the source")),
    }
}

/// Whether a discovery error means the group is not served at all (so it holds nothing), as
/// opposed to a discovery that failed (an error: nothing is planned from it).
fn not_served(e: &kube::Error) -> bool {
    matches!(
        e,
        kube::Error::Discovery(
            DiscoveryError::MissingApiGroup(_) | DiscoveryError::EmptyApiGroup(_)
        )
    )
}

/// The served resource of `kind` in `group`: at the preferred version when that version holds
/// the kind, else at the most stable version that does; `None` when no version serves it.
fn served_kind(group: &discovery::ApiGroup, kind: &str) -> Option<ApiResource> {
    if let Some((resource, _)) = group.recommended_kind(kind) {
        return Some(resource);
    }
    group
        .versions()
        .flat_map(|v| group.versioned_resources(v))
        .map(|(resource, _)| resource)
        .find(|r| r.kind == kind)
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

/// What a provider reads that the target lacks, ready to be created there before the provider
/// is declared: its variables Secret, its additional manifests ConfigMap, the release
/// ConfigMaps its `fetchConfig.selector` selects.
#[derive(Default)]
struct Inputs {
    /// The Secret to create on the target (absent there).
    secret: Option<Secret>,
    /// The ConfigMaps to create on the target (absent there).
    configmaps: Vec<ConfigMap>,
    /// How many ConfigMaps the provider reads (created or already identical on the target).
    configmaps_read: usize,
    /// Whether the provider reads a variables Secret.
    reads_secret: bool,
}

/// What the target holds of one Secret or ConfigMap a provider reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnTarget {
    /// Absent: it is created.
    Absent,
    /// The same data (and type): left as it is.
    Same,
    /// Other data (or type): `move` refuses, as overwriting it would change what the target's
    /// own providers read.
    Differs,
}

/// How `target` compares with the Secret copied from the source: data and type (absent type
/// is Opaque, absent data is empty); labels and annotations are not compared.
fn secret_on_target(source: &Secret, target: Option<&Secret>) -> OnTarget {
    let Some(t) = target else {
        return OnTarget::Absent;
    };
    let type_of = |s: &Secret| s.type_.clone().unwrap_or_else(|| "Opaque".into());
    let same = type_of(source) == type_of(t)
        && source.data.clone().unwrap_or_default() == t.data.clone().unwrap_or_default();
    if same {
        OnTarget::Same
    } else {
        OnTarget::Differs
    }
}

/// How `target` compares with the ConfigMap copied from the source: `data` and `binaryData`.
fn configmap_on_target(source: &ConfigMap, target: Option<&ConfigMap>) -> OnTarget {
    let Some(t) = target else {
        return OnTarget::Absent;
    };
    let same = source.data.clone().unwrap_or_default() == t.data.clone().unwrap_or_default()
        && source.binary_data.clone().unwrap_or_default()
            == t.binary_data.clone().unwrap_or_default();
    if same {
        OnTarget::Same
    } else {
        OnTarget::Differs
    }
}

/// The label query of the release ConfigMaps `p` reads (`None`: no `fetchConfig.selector`):
/// the operator's own reading of the selector, matchLabels and matchExpressions alike. A
/// selector with neither selects every ConfigMap of the namespace; `move` refuses it rather
/// than copy ConfigMaps no release needs (give the selector the release's labels).
fn release_selector(p: &AnyProvider) -> Result<Option<String>, String> {
    let Some(selector) = p
        .spec
        .fetch_config
        .as_ref()
        .and_then(|f| f.selector.as_ref())
    else {
        return Ok(None);
    };
    let query = capi_release_sources::configmap::selector_query(selector);
    if query.is_empty() {
        return Err(format!(
            "{}: fetchConfig.selector is empty and so selects every ConfigMap of namespace {}; move copies only the release ConfigMaps a selector names (give it matchLabels or matchExpressions)",
            describe(p),
            p.namespace()
        ));
    }
    Ok(Some(query))
}

/// Reads what `p` reads on the source and compares it with the target, writing nothing: the
/// inputs to create, or every reason to refuse (a selector selecting everything, a same-named
/// Secret or ConfigMap holding other data on the target; names only, never values).
async fn inputs(
    source: &Cluster,
    target: &Cluster,
    p: &AnyProvider,
) -> anyhow::Result<Result<Inputs, Vec<String>>> {
    let ns = p.namespace();
    let mut inputs = Inputs::default();
    let mut refusals = Vec::new();
    if let Some(name) = &p.spec.secret_name {
        let sns = p.spec.secret_namespace.as_deref().unwrap_or(ns);
        inputs.reads_secret = true;
        match secret_input(source, target, sns, name).await? {
            Ok(copy) => inputs.secret = copy,
            Err(why) => refusals.push(format!("{}: {why}", describe(p))),
        }
    }
    let mut names: Vec<(String, String)> = Vec::new();
    if let Some(m) = &p.spec.additional_manifests {
        names.push((
            m.namespace.clone().unwrap_or_else(|| ns.into()),
            m.name.clone(),
        ));
    }
    match release_selector(p) {
        Ok(None) => {}
        Ok(Some(query)) => {
            let list = Api::<ConfigMap>::namespaced(source.client.clone(), ns)
                .list_metadata(&ListParams::default().labels(&query))
                .await
                .with_context(|| format!("listing the release ConfigMaps of {}", describe(p)))?;
            names.extend(
                list.items
                    .into_iter()
                    .map(|c| (ns.to_string(), c.metadata.name.unwrap_or_default())),
            );
        }
        Err(refusal) => refusals.push(refusal),
    }
    for (cns, name) in names {
        inputs.configmaps_read += 1;
        match configmap_input(source, target, &cns, &name).await? {
            Ok(copy) => inputs.configmaps.extend(copy),
            Err(why) => refusals.push(format!("{}: {why}", describe(p))),
        }
    }
    Ok(if refusals.is_empty() {
        Ok(inputs)
    } else {
        Err(refusals)
    })
}

/// The copy of Secret `ns/name` to create on the target (`None`: the target holds the same),
/// or why not (the target's differs).
async fn secret_input(
    source: &Cluster,
    target: &Cluster,
    ns: &str,
    name: &str,
) -> anyhow::Result<Result<Option<Secret>, String>> {
    let from = Api::<Secret>::namespaced(source.client.clone(), ns)
        .get(name)
        .await
        .with_context(|| format!("reading Secret {ns}/{name} on the source"))?;
    let there = Api::<Secret>::namespaced(target.client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| format!("reading Secret {ns}/{name} on the target"))?;
    Ok(match secret_on_target(&from, there.as_ref()) {
        OnTarget::Absent => Ok(Some(Secret {
            metadata: copied_meta(ns, name, from.metadata.labels, None),
            type_: from.type_,
            data: from.data,
            ..Secret::default()
        })),
        OnTarget::Same => Ok(None),
        OnTarget::Differs => Err(format!(
            "Secret {ns}/{name} already exists on the target with other data or type; move does not overwrite it (make the two equal, or remove the target's)"
        )),
    })
}

/// The copy of ConfigMap `ns/name` to create on the target (`None`: the target holds the
/// same), or why not (the target's differs).
async fn configmap_input(
    source: &Cluster,
    target: &Cluster,
    ns: &str,
    name: &str,
) -> anyhow::Result<Result<Option<ConfigMap>, String>> {
    let from = Api::<ConfigMap>::namespaced(source.client.clone(), ns)
        .get(name)
        .await
        .with_context(|| format!("reading ConfigMap {ns}/{name} on the source"))?;
    let there = Api::<ConfigMap>::namespaced(target.client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| format!("reading ConfigMap {ns}/{name} on the target"))?;
    Ok(match configmap_on_target(&from, there.as_ref()) {
        OnTarget::Absent => Ok(Some(ConfigMap {
            metadata: copied_meta(ns, name, from.metadata.labels, from.metadata.annotations),
            data: from.data,
            binary_data: from.binary_data,
            ..ConfigMap::default()
        })),
        OnTarget::Same => Ok(None),
        OnTarget::Differs => Err(format!(
            "ConfigMap {ns}/{name} already exists on the target with other data; move does not overwrite it (make the two equal, or remove the target's)"
        )),
    })
}

/// The metadata of a copy: name, namespace, labels and annotations (no server-set fields).
fn copied_meta(
    ns: &str,
    name: &str,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        labels,
        annotations,
        ..ObjectMeta::default()
    }
}

/// Declares `p` on the target after creating what it reads there (`inputs`, prepared and
/// compared before any write). Creating, never applying: an object that appeared on the
/// target since the comparison is not overwritten (the create fails and `move` stops).
async fn declare(target: &Cluster, p: &AnyProvider, inputs: &Inputs) -> anyhow::Result<()> {
    target.ensure_namespace(p.namespace()).await?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    if let Some(s) = &inputs.secret {
        let (ns, name) = meta_name(&s.metadata);
        target.ensure_namespace(ns).await?;
        Api::<Secret>::namespaced(target.client.clone(), ns)
            .create(&params, s)
            .await
            .with_context(|| format!("creating Secret {ns}/{name} on the target"))?;
    }
    for c in &inputs.configmaps {
        let (ns, name) = meta_name(&c.metadata);
        target.ensure_namespace(ns).await?;
        Api::<ConfigMap>::namespaced(target.client.clone(), ns)
            .create(&params, c)
            .await
            .with_context(|| format!("creating ConfigMap {ns}/{name} on the target"))?;
    }
    target.apply(&declaration(p)?).await?;
    say!(
        "declared {} on the target ({} ConfigMap(s){})",
        describe(p),
        inputs.configmaps_read,
        if inputs.reads_secret {
            ", its variables Secret"
        } else {
            ""
        }
    );
    Ok(())
}

fn meta_name(m: &ObjectMeta) -> (&str, &str) {
    (
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
    )
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
        .args(args.to_kubeconfig.iter())
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
    say!("clusterctl moved namespace {ns}");
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
    // Only the provider's own namespace: owner labels elsewhere are anyone's to write and
    // claim nothing (capi_operator_api::owner::claim_holds).
    let api: Api<Deployment> = Api::namespaced(source.client.clone(), p.namespace());
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
        Ok(())
    }

    /// Only a group the source does not serve means "nothing of it"; a discovery that failed
    /// (an aggregated API down, a timeout, a refusal) is an error, never "no Clusters".
    #[test]
    fn only_an_unserved_group_counts_as_empty_a_failed_discovery_is_an_error() {
        let missing =
            kube::Error::Discovery(DiscoveryError::MissingApiGroup(CLUSTER_API_GROUP.into()));
        assert!(not_served(&missing));
        let unavailable = kube::Error::Api(Box::new(
            kube::core::Status::failure(
                "the server is currently unable to handle the request",
                "ServiceUnavailable",
            )
            .with_code(503),
        ));
        assert!(!not_served(&unavailable));
        let no_kind = kube::Error::Discovery(DiscoveryError::MissingKind("Cluster".into()));
        assert!(!not_served(&no_kind));
    }

    fn with_selector(selector: Value) -> anyhow::Result<AnyProvider> {
        Ok(AnyProvider::from_value(json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": "InfrastructureProvider",
            "metadata": {"name": "sample", "namespace": "sample-infra-system"},
            "spec": {"version": "v0.2.0", "fetchConfig": {"selector": selector}}
        }))?)
    }

    /// The release ConfigMaps copied are those the operator reads: matchExpressions count as
    /// much as matchLabels (a selector of expressions alone once listed the whole namespace).
    #[test]
    fn the_release_selector_is_read_in_full_and_an_empty_one_is_refused() -> anyhow::Result<()> {
        let p = with_selector(json!({
            "matchLabels": {"provider.cluster.x-k8s.io/name": "sample"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "stage", "operator": "NotIn", "values": ["dev"]},
                {"key": "release", "operator": "Exists"},
                {"key": "draft", "operator": "DoesNotExist"}
            ]
        }))?;
        assert_eq!(
            release_selector(&p),
            Ok(Some(
                "provider.cluster.x-k8s.io/name=sample,tier in (a,b),stage notin (dev),release,!draft"
                    .into()
            ))
        );
        let only_expressions = with_selector(json!({
            "matchExpressions": [{"key": "provider.cluster.x-k8s.io/name", "operator": "In", "values": ["sample"]}]
        }))?;
        assert_eq!(
            release_selector(&only_expressions),
            Ok(Some("provider.cluster.x-k8s.io/name in (sample)".into()))
        );
        let empty = with_selector(json!({}))?;
        let refused = release_selector(&empty);
        assert!(
            refused.as_ref().is_err_and(
                |e| e.contains("selects every ConfigMap of namespace sample-infra-system")
            ),
            "{refused:?}"
        );
        Ok(())
    }

    fn secret(type_: Option<&str>, value: &[u8]) -> Secret {
        Secret {
            type_: type_.map(Into::into),
            data: Some(BTreeMap::from([(
                "TOKEN".to_string(),
                k8s_openapi::ByteString(value.to_vec()),
            )])),
            ..Secret::default()
        }
    }

    /// A Secret or ConfigMap of the same name on the target is left alone when it holds the
    /// same data (and type), and refused when it differs: never overwritten.
    #[test]
    fn a_same_named_input_on_the_target_is_kept_when_equal_and_refused_when_different() {
        let source = secret(None, b"one");
        assert_eq!(secret_on_target(&source, None), OnTarget::Absent);
        assert_eq!(
            secret_on_target(&source, Some(&secret(Some("Opaque"), b"one"))),
            OnTarget::Same
        );
        assert_eq!(
            secret_on_target(&source, Some(&secret(None, b"two"))),
            OnTarget::Differs
        );
        assert_eq!(
            secret_on_target(&source, Some(&secret(Some("kubernetes.io/tls"), b"one"))),
            OnTarget::Differs
        );
        let cm = |v: &str| ConfigMap {
            data: Some(BTreeMap::from([("components".to_string(), v.to_string())])),
            ..ConfigMap::default()
        };
        assert_eq!(configmap_on_target(&cm("a"), None), OnTarget::Absent);
        assert_eq!(
            configmap_on_target(&cm("a"), Some(&cm("a"))),
            OnTarget::Same
        );
        assert_eq!(
            configmap_on_target(&cm("a"), Some(&cm("b"))),
            OnTarget::Differs
        );
        assert_eq!(
            configmap_on_target(&cm("a"), Some(&ConfigMap::default())),
            OnTarget::Differs
        );
    }

    fn crd(
        scope: &str,
        versions: &[(&str, bool, bool)],
    ) -> anyhow::Result<CustomResourceDefinition> {
        let versions: Vec<Value> = versions
            .iter()
            .map(|(name, served, storage)| json!({"name": name, "served": served, "storage": storage}))
            .collect();
        Ok(serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "samplemachines.infrastructure.cluster.x-k8s.io"},
            "spec": {
                "group": "infrastructure.cluster.x-k8s.io",
                "scope": scope,
                "names": {"kind": "SampleMachine", "plural": "samplemachines"},
                "versions": versions
            }
        }))?)
    }

    /// Labelled custom resources are read at the CRD's storage version (no conversion), and
    /// only for namespaced kinds (`clusterctl move` works namespace by namespace).
    #[test]
    fn labelled_custom_resources_are_listed_at_the_storage_version_of_namespaced_crds()
    -> anyhow::Result<()> {
        let r = labelled_kind(&crd(
            "Namespaced",
            &[("v1beta1", true, false), ("v1beta2", true, true)],
        )?);
        assert_eq!(
            r.map(|r| (r.api_version, r.kind, r.plural)),
            Some((
                "infrastructure.cluster.x-k8s.io/v1beta2".to_string(),
                "SampleMachine".to_string(),
                "samplemachines".to_string()
            ))
        );
        assert!(labelled_kind(&crd("Cluster", &[("v1", true, true)])?).is_none());
        assert!(labelled_kind(&crd("Namespaced", &[("v1", false, true)])?).is_none());
        Ok(())
    }
}
