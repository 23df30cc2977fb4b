//! `init`: installs the operator (its release manifest of the plugin's version, another
//! release's, or files given) unless it runs already, waits until it is available, then the
//! providers named: for each, its namespace, a Secret with its variables, its
//! releases as ConfigMaps when they come from a local directory, and the provider object.
//! Every release is fetched first, so a missing variable or an unknown version fails before
//! anything is written. `--wait` follows the providers until they are Ready.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use capi_operator_api::{AnyProvider, ProviderType};
use capi_release::Release;
use k8s_openapi::{
    ByteString, api::core::v1::Secret,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use crate::{
    certmanager,
    cluster::{Cluster, ClusterFlags},
    operator,
    progress::{self, Target, Want},
    providers::{ProviderArg, ProviderFlags},
    release::{self, Located, Origin, SourceFlags},
    vars::{self, VariableFlags},
};

/// The operator's admission policies, installed with its CRDs.
const POLICIES: &str = include_str!("../../../manifests/policies/managed-by-one-way.yaml");

/// Flags shared by the commands that create provider objects.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CreateFlags {
    /// The releases are already in the cluster, in ConfigMaps written by `preload --apply`:
    /// the providers read them through fetchConfig.selector.
    #[arg(long, conflicts_with = "repository")]
    pub preloaded: bool,
    /// A YAML mapping merged into the spec of every provider object created (manager,
    /// deployment, patches, ...).
    #[arg(long, value_name = "FILE")]
    pub provider_spec: Option<PathBuf>,
}

impl CreateFlags {
    /// The spec overlay (an empty mapping without a file).
    pub fn overlay(&self) -> anyhow::Result<Value> {
        let Some(path) = &self.provider_spec else {
            return Ok(json!({}));
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())
            .with_context(|| format!("parsing {}", path.display()))?;
        match docs.as_slice() {
            [v] if v.is_object() => Ok(v.clone()),
            _ => bail!(
                "{}: expected one YAML mapping (a provider spec)",
                path.display()
            ),
        }
    }
}

/// Flags of `init`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    providers: ProviderFlags,
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    variables: VariableFlags,
    #[command(flatten)]
    create: CreateFlags,
    #[command(flatten)]
    operator: operator::OperatorFlags,
    /// Wait until every provider installed is Ready, showing progress.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (e.g. 300s, 10m).
    #[arg(long, default_value = "10m", value_parser = crate::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    cert_manager: certmanager::Flags,
    /// Add none of the providers clusterctl adds on a first run (core cluster-api, bootstrap
    /// and control-plane kubeadm, each unless one of its type is named).
    #[arg(long)]
    no_default_providers: bool,
    /// Install (or find) cert-manager and stop: no provider is created.
    #[arg(long, conflicts_with = "skip_cert_manager")]
    cert_manager_only: bool,
}

/// A provider ready to be written.
pub struct Planned {
    /// The provider as named.
    pub arg: ProviderArg,
    /// Its namespace.
    pub namespace: String,
    /// Its source.
    pub located: Located,
    /// The release fetched.
    pub release: Release,
    /// Its variables (values never printed).
    pub vars: BTreeMap<String, String>,
}

/// Name of the Secret holding a provider's variables.
pub fn secret_name(t: ProviderType, name: &str) -> String {
    format!("{}-{name}-variables", t.word())
}

/// The Secret object holding `vars`.
pub fn secret_value(
    namespace: &str,
    name: &str,
    vars: &BTreeMap<String, String>,
) -> anyhow::Result<Value> {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        data: Some(
            vars.iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
                .collect(),
        ),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    let mut v = serde_json::to_value(&secret)?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("kind".into(), json!("Secret"));
    }
    Ok(v)
}

/// The provider object: the overlay, then version, secret and fetchConfig.
pub fn provider_object(
    t: ProviderType,
    name: &str,
    namespace: &str,
    overlay: &Value,
    version: &str,
    secret: Option<&str>,
    fetch: Option<&capi_operator_api::FetchConfiguration>,
) -> anyhow::Result<Value> {
    let mut spec = overlay.clone();
    let Some(m) = spec.as_object_mut() else {
        bail!("the provider spec overlay is not a mapping");
    };
    m.insert("version".into(), json!(version));
    if let Some(s) = secret {
        m.insert("secretName".into(), json!(s));
    }
    if let Some(f) = fetch {
        m.insert("fetchConfig".into(), serde_json::to_value(f)?);
    }
    let obj = json!({
        "apiVersion": format!("{}/{}", capi_operator_api::GROUP, capi_operator_api::VERSION),
        "kind": t.kind(),
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    });
    // Refuse what the CRD would refuse, before anything is written.
    AnyProvider::from_value(obj.clone())
        .map_err(|e| anyhow::anyhow!("{} {namespace}/{name}: {e}", t.kind()))?;
    Ok(obj)
}

/// Installs the operator's CRDs and policies, then `extra` manifests (for `migrate`, which
/// hands providers over to an operator it does not install itself).
pub async fn install_operator(cluster: &Cluster, extra: &[PathBuf]) -> anyhow::Result<()> {
    let mut objects = Vec::new();
    for crd in capi_operator_api::crd::all_crds()? {
        objects.push(serde_json::to_value(&crd)?);
    }
    objects.extend(capi_yaml::parse_documents(
        POLICIES,
        &capi_yaml::Limits::default(),
    )?);
    for path in extra {
        objects.extend(operator::read_path(path)?);
    }
    capi_components::pipeline::sort_for_apply(&mut objects);
    operator::apply_ordered(cluster, &objects).await?;
    eprintln!(
        "operator CRDs and policies installed ({} objects)",
        objects.len()
    );
    Ok(())
}

/// Fetches and checks every provider: source, release, namespace, variables.
pub async fn plan(
    cluster: &Cluster,
    list: &[ProviderArg],
    sources: &SourceFlags,
    preloaded: bool,
    file: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<Planned>> {
    let mut out = Vec::new();
    let mut missing_all = Vec::new();
    for arg in list {
        let (located, namespace) = if preloaded {
            let ns = match &arg.namespace {
                Some(ns) => ns.clone(),
                None => release::find_preloaded_namespace(&cluster.client, arg.provider_type, &arg.name)
                    .await?
                    .with_context(|| {
                        format!("no preloaded releases of {} found (run `kubectl capi-providers preload --apply` first)", arg.describe())
                    })?,
            };
            let fetch = capi_operator_api::FetchConfiguration {
                selector: Some(capi_release_sources::airgap::selector(
                    arg.provider_type,
                    &arg.name,
                )),
                ..Default::default()
            };
            (
                release::locate_configmaps(
                    &cluster.client,
                    arg.provider_type,
                    &arg.name,
                    &ns,
                    &fetch,
                )?,
                Some(ns),
            )
        } else {
            (release::locate_arg(arg, sources)?, None)
        };
        let r = located.fetch(arg.version.as_deref()).await?;
        let (vars, missing) = vars::for_release(&r, file)?;
        if !missing.is_empty() {
            missing_all.push(format!(
                "{} {}: {}",
                arg.describe(),
                r.version,
                missing.join(", ")
            ));
            // Reported below, before anything is written; the namespace does not matter.
            continue;
        }
        let namespace = match namespace {
            Some(ns) => ns,
            // Substituted for real, as the operator will install it.
            None => release::target_namespace(arg, &release::objects_substituted(&r, &vars)?)?,
        };
        out.push(Planned {
            arg: arg.clone(),
            namespace,
            located,
            release: r,
            vars,
        });
    }
    if !missing_all.is_empty() {
        bail!(
            "required variables are not set (set them in the environment or in --variables FILE):\n  {}",
            missing_all.join("\n  ")
        );
    }
    Ok(out)
}

/// Writes one planned provider: namespace, release ConfigMap (local sources), Secret, object.
/// `verb` starts the line printed (e.g. "created", "adopting").
pub async fn write(
    cluster: &Cluster,
    p: &Planned,
    overlay: &Value,
    verb: &str,
) -> anyhow::Result<()> {
    let (t, name, ns) = (
        p.arg.provider_type,
        p.arg.name.as_str(),
        p.namespace.as_str(),
    );
    cluster.ensure_namespace(ns).await?;
    if matches!(p.located.origin, Origin::Local(_)) {
        cluster
            .apply(&crate::preload::configmap_value(t, name, ns, &p.release)?)
            .await?;
    }
    let secret = (!p.vars.is_empty()).then(|| secret_name(t, name));
    if let Some(s) = &secret {
        cluster.apply(&secret_value(ns, s, &p.vars)?).await?;
    }
    let obj = provider_object(
        t,
        name,
        ns,
        overlay,
        &p.release.version,
        secret.as_deref(),
        p.located.fetch_config(t, name).as_ref(),
    )?;
    cluster.apply(&obj).await?;
    say!(
        "{verb} {} {ns}/{name} {} from {}{}",
        t.kind(),
        p.release.version,
        p.located.description,
        secret
            .map(|s| format!(", {} variables in Secret {ns}/{s}", p.vars.len()))
            .unwrap_or_default()
    );
    Ok(())
}

/// The providers clusterctl adds on a first run (no core provider installed) when none of
/// their type is named: core `cluster-api`, bootstrap `kubeadm`, control-plane `kubeadm`.
pub fn with_defaults(
    mut list: Vec<ProviderArg>,
    first_run: bool,
) -> anyhow::Result<Vec<ProviderArg>> {
    if !first_run {
        return Ok(list);
    }
    for (t, name) in [
        (ProviderType::Core, "cluster-api"),
        (ProviderType::Bootstrap, "kubeadm"),
        (ProviderType::ControlPlane, "kubeadm"),
    ] {
        if !list.iter().any(|a| a.provider_type == t) {
            list.push(crate::providers::parse(t, name)?);
        }
    }
    // Stable: the order given within a type is kept.
    list.sort_by_key(|a| ProviderType::ALL.iter().position(|t| *t == a.provider_type));
    Ok(list)
}

/// The providers in the cluster; none when the operator's CRDs are not installed yet.
async fn existing(cluster: &Cluster) -> anyhow::Result<Vec<AnyProvider>> {
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(cluster.client.clone());
    let core = crate::cluster::provider_resource(ProviderType::Core);
    if crds
        .get_opt(&format!("{}.{}", core.plural, core.group))
        .await?
        .is_none()
    {
        return Ok(Vec::new());
    }
    cluster.providers().await
}

/// The providers to create: those named (with clusterctl's first-run defaults) that are not
/// installed already.
async fn to_create(args: &Args, cluster: &Cluster) -> anyhow::Result<Vec<ProviderArg>> {
    let existing = existing(cluster).await?;
    let first_run = !args.no_default_providers
        && !existing
            .iter()
            .any(|p| p.provider_type == ProviderType::Core);
    let mut todo = Vec::new();
    for arg in with_defaults(args.providers.parse()?, first_run)? {
        match existing
            .iter()
            .find(|p| p.provider_type == arg.provider_type && p.name() == arg.name)
        {
            Some(p) => say!(
                "{} is already installed ({} {}); use `kubectl capi-providers upgrade` to change its version",
                crate::cluster::describe(p),
                p.status
                    .as_ref()
                    .and_then(|s| s.installed_version.as_deref())
                    .unwrap_or("version"),
                p.spec.version.as_deref().unwrap_or("unknown"),
            ),
            None => todo.push(arg),
        }
    }
    Ok(todo)
}

/// Runs `init`.
pub async fn run(args: &Args, cluster_flags: &ClusterFlags) -> anyhow::Result<()> {
    let overlay = args.create.overlay()?;
    let file = args.variables.file()?;
    let cluster = Cluster::connect(cluster_flags).await?;
    let preloaded = args.create.preloaded;
    if args.cert_manager_only {
        if !args.operator.skip_operator {
            operator::ensure(&cluster, &args.operator).await?;
        }
        return certmanager::ensure(&cluster, &args.cert_manager, &args.sources, preloaded).await;
    }
    let todo = to_create(args, &cluster).await?;
    let planned = plan(&cluster, &todo, &args.sources, preloaded, &file).await?;
    // After every release is fetched (a bad one fails before anything is installed), before
    // the provider objects it reconciles.
    if !args.operator.skip_operator {
        operator::ensure(&cluster, &args.operator).await?;
    }
    // Before the providers whose webhooks need its certificates.
    certmanager::ensure(&cluster, &args.cert_manager, &args.sources, preloaded).await?;
    for p in &planned {
        write(&cluster, p, &overlay, "created").await?;
    }
    if args.wait && !planned.is_empty() {
        let targets: Vec<Target> = planned
            .iter()
            .map(|p| Target {
                api: capi_operator_api::ProviderApi::Management,
                provider_type: p.arg.provider_type,
                namespace: p.namespace.clone(),
                name: p.arg.name.clone(),
                version: Some(p.release.version.clone()),
                want: Want::Ready,
            })
            .collect();
        progress::wait(
            &cluster,
            &targets,
            args.timeout,
            "the providers to be Ready",
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[ProviderArg]) -> Vec<String> {
        list.iter().map(ProviderArg::describe).collect()
    }

    #[test]
    fn a_first_run_adds_clusterctls_defaults_for_the_types_not_named() -> anyhow::Result<()> {
        let infra = crate::providers::parse(ProviderType::Infrastructure, "docker")?;
        assert_eq!(
            names(&with_defaults(vec![infra.clone()], true)?),
            [
                "CoreProvider cluster-api",
                "BootstrapProvider kubeadm",
                "ControlPlaneProvider kubeadm",
                "InfrastructureProvider docker"
            ]
        );
        let talos = crate::providers::parse(ProviderType::Bootstrap, "talos")?;
        assert_eq!(
            names(&with_defaults(vec![talos, infra.clone()], true)?),
            [
                "CoreProvider cluster-api",
                "BootstrapProvider talos",
                "ControlPlaneProvider kubeadm",
                "InfrastructureProvider docker"
            ]
        );
        Ok(())
    }

    #[test]
    fn a_later_run_adds_nothing() -> anyhow::Result<()> {
        let infra = crate::providers::parse(ProviderType::Infrastructure, "aws")?;
        assert_eq!(
            names(&with_defaults(vec![infra], false)?),
            ["InfrastructureProvider aws"]
        );
        Ok(())
    }
}
