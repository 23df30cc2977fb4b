//! What the operator would apply for a provider, computed by the plugin from the same inputs
//! the operator reads and through the same pipeline: the release from the source the
//! provider's fetchConfig names (GitHub, GitLab, OCI, a URL or the air-gapped ConfigMaps, chosen
//! by the mapping the operator uses), its variables from the provider Secret in the cluster,
//! its additional manifests, then capi-components' render (substitution, overrides, patches)
//! and the operator's last step before applying (owner labels, pause, apiserver-owned fields)
//! with the clusterctl inventory entry. `render` prints the result; `diff` compares it with the
//! cluster.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context, bail};
use capi_cluster_io::provider_inputs::{self, Manifests, Variables};
use capi_components::{
    desired::{Inputs, desired},
    render::RenderExtras,
    rotation,
};
use capi_operator_api::AnyProvider;
use serde_json::Value;

use crate::{
    cluster::{Cluster, describe},
    release::{SourceFlags, locate_provider},
};

/// Which provider a command is about: a file, or one in the cluster by name.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Target {
    /// The provider object (YAML) to render; its namespace names where it lives.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE",
        conflicts_with = "name"
    )]
    pub file: Option<PathBuf>,
    /// The name of a provider object in the cluster.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// The namespace of NAME, when several providers have that name.
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The version to render instead of spec.version.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// Whether the operator keeps clusterctl's inventory (its own --clusterctl-inventory, on by
    /// default): the provider's inventory entry is rendered too.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub clusterctl_inventory: bool,
    #[command(flatten)]
    pub source: SourceFlags,
    /// The operator's image mirror setting (its own flags), for a render or diff of what it
    /// applies with that setting.
    #[command(flatten)]
    pub mirror: crate::mirror::MirrorFlags,
}

/// A provider object from a file: its first document that is one.
fn read_provider_file(file: &std::path::Path) -> anyhow::Result<AnyProvider> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())
        .with_context(|| format!("parsing {}", file.display()))?;
    let found = docs
        .into_iter()
        .find_map(|d| AnyProvider::from_value(d).ok());
    let Some(p) = found else {
        bail!("{} holds no provider object", file.display());
    };
    if p.namespace().is_empty() {
        bail!("{}: the provider object names no namespace", file.display());
    }
    Ok(p)
}

/// The provider `name` in the cluster (in `namespace` when given).
async fn find_by_name(
    cluster: &Cluster,
    name: &str,
    namespace: Option<&str>,
) -> anyhow::Result<AnyProvider> {
    let mut found: Vec<AnyProvider> = cluster
        .providers()
        .await?
        .into_iter()
        .filter(|p| p.name() == name && namespace.is_none_or(|n| p.namespace() == n))
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => bail!("no provider object named {name:?} in the cluster"),
        _ => bail!(
            "several providers are named {name:?} ({}); give --namespace",
            found.iter().map(describe).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The provider a [`Target`] names, with `--version` applied, and the same object in the
/// cluster (with its status) if there is one.
pub async fn provider(
    cluster: &Cluster,
    t: &Target,
) -> anyhow::Result<(AnyProvider, Option<AnyProvider>)> {
    let mut p = match (&t.file, &t.name) {
        (Some(f), _) => read_provider_file(f)?,
        (None, Some(n)) => find_by_name(cluster, n, t.namespace.as_deref()).await?,
        (None, None) => bail!("name a provider: -f FILE or NAME"),
    };
    let live = cluster
        .provider_of(p.api, p.provider_type, p.namespace(), p.name())
        .await?;
    if let Some(v) = &t.version {
        p.spec.version = Some(v.clone());
    }
    Ok((p, live))
}

/// The objects the operator would apply for a provider, in apply order, the inventory entry
/// last (when kept); and the version rendered.
pub struct Desired {
    /// The objects.
    pub objects: Vec<Value>,
    /// The release version.
    pub version: String,
}

/// The provider Secret's variables, read as the operator reads them.
pub async fn variables(
    cluster: &Cluster,
    p: &AnyProvider,
) -> anyhow::Result<BTreeMap<String, String>> {
    match provider_inputs::variables(&cluster.client, p)
        .await
        .context("reading the provider's variables Secret")?
    {
        Variables::Found(v) => Ok(v),
        Variables::Missing { namespace, name } => {
            bail!("Secret {namespace}/{name} (spec.configSecret) does not exist")
        }
    }
}

/// The additional manifests, read as the operator reads them.
async fn additional(cluster: &Cluster, p: &AnyProvider) -> anyhow::Result<Option<String>> {
    match provider_inputs::additional_manifests(&cluster.client, p)
        .await
        .context("reading spec.additionalManifests")?
    {
        Manifests::NotNamed => Ok(None),
        Manifests::Found(text) => Ok(Some(text)),
        Manifests::Missing { namespace, name } => {
            bail!("ConfigMap {namespace}/{name} (spec.additionalManifests) does not exist")
        }
        Manifests::NoKey {
            namespace, name, ..
        } => bail!("ConfigMap {namespace}/{name} has no key \"manifests\""),
    }
}

/// Renders `p` as the operator would, `installed` being the version installed now (a paused
/// provider applies only its Deployments unless the version changes).
pub async fn render(
    cluster: &Cluster,
    p: &AnyProvider,
    installed: Option<&str>,
    target: &Target,
) -> anyhow::Result<Desired> {
    let vars = variables(cluster, p).await?;
    let located = locate_provider(&cluster.client, p, &target.source, &vars)?;
    let version = p.spec.version.as_deref().filter(|v| !v.is_empty());
    let release = located.fetch(version).await?;
    // The Deployments carry the hash of what they read, given what the running ones carry, so
    // a diff shows a roll only where one happens.
    let key = config_hash_key(cluster).await;
    let inputs = Inputs {
        extras: RenderExtras {
            additional_manifests: additional(cluster, p).await?,
            mirror: target.mirror.mirror()?,
            limits: Default::default(),
        },
        contract: None,
        paused: p.spec.paused,
        installed: installed.map(str::to_string),
        hash_key: key,
        running: live_deployments(cluster, p).await?,
        inventory: target.clusterctl_inventory,
    };
    let built = desired(p, &release, |k| vars.get(k).cloned(), &inputs)
        .with_context(|| format!("rendering {} {}", describe(p), release.version))?;
    for r in &built.managers {
        for f in &r.findings {
            eprintln!("warning: {} {}", f.field, f.problem);
        }
    }
    let mut objects = built.objects;
    objects.extend(built.entry);
    Ok(Desired {
        objects,
        version: built.version,
    })
}

/// The operator's config hash key: the one Secret named and labelled as it
/// ([`capi_operator_api::CONFIG_HASH_KEY_SECRET`]) in any namespace. Without it (not readable,
/// or more than one such Secret: a copy in another namespace could be anyone's), the hash
/// cannot be computed and the Deployments keep the one they carry, which predicts no roll.
async fn config_hash_key(cluster: &Cluster) -> Option<rotation::HashKey> {
    use capi_operator_api::{CONFIG_HASH_KEY_LABEL, CONFIG_HASH_KEY_SECRET};
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::all(cluster.client.clone());
    let params = kube::api::ListParams::default()
        .labels(&format!("{CONFIG_HASH_KEY_LABEL}=true"))
        .fields(&format!("metadata.name={CONFIG_HASH_KEY_SECRET}"));
    let found = match api.list(&params).await {
        Ok(list) => list.items,
        Err(e) => {
            eprintln!(
                "note: the operator's config hash key is not readable ({e}); config changes that would roll managers are not shown"
            );
            return None;
        }
    };
    let [secret] = &found[..] else {
        if found.len() > 1 {
            eprintln!(
                "note: {} Secrets claim to be the operator's config hash key; config changes that would roll managers are not shown",
                found.len()
            );
        }
        return None;
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(capi_operator_api::CONFIG_HASH_KEY_DATA))
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    (bytes.len() >= rotation::HashKey::MIN_BYTES).then(|| rotation::HashKey::new(bytes))
}

/// The provider's running Deployments, found as the operator finds them: by the labels naming
/// it as their installer.
async fn live_deployments(
    cluster: &Cluster,
    p: &AnyProvider,
) -> anyhow::Result<BTreeMap<(String, String), rotation::Live>> {
    use capi_operator_api::{
        OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, owner::owned_by,
    };
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::ResourceExt;
    let api: kube::Api<Deployment> = kube::Api::all(cluster.client.clone());
    let selector = format!(
        "{OWNER_KIND_LABEL}={},{OWNER_NAME_LABEL}={},{OWNER_NAMESPACE_LABEL}={}",
        p.provider_type.kind(),
        p.name(),
        p.namespace()
    );
    let list = api
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .context("listing the provider's Deployments")?;
    Ok(list
        .items
        .iter()
        .filter(|d| owned_by(d.labels(), p))
        .map(|d| {
            (
                (d.namespace().unwrap_or_default(), d.name_any()),
                rotation::Live::of(d),
            )
        })
        .collect())
}

/// Options of `render`.
#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    #[command(flatten)]
    target: Target,
    /// Print the values of rendered Secrets (by default each is replaced by "(redacted)", as
    /// `diff` does: the output goes to terminals, CI logs and pull requests).
    #[arg(long)]
    show_secrets: bool,
}

/// Runs `render`: prints the objects the operator would apply.
pub async fn run_render(args: &RenderArgs, cluster: &Cluster) -> anyhow::Result<()> {
    let (p, live) = provider(cluster, &args.target).await?;
    let installed = installed_version(live.as_ref());
    let mut desired = render(cluster, &p, installed, &args.target).await?;
    if !args.show_secrets {
        let masked = mask_secrets(&mut desired.objects);
        if masked > 0 {
            eprintln!(
                "render: {masked} Secret value(s) shown as {}; --show-secrets prints them",
                crate::diff::REDACTED
            );
        }
    }
    print!("{}", capi_yaml::to_multi_doc(&desired.objects)?);
    Ok(())
}

/// Replaces every value of the Secrets among `objects` (`data` and `stringData`) by
/// [`crate::diff::REDACTED`]; how many were replaced.
fn mask_secrets(objects: &mut [Value]) -> usize {
    let mut masked = 0;
    for o in objects
        .iter_mut()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Secret"))
    {
        for field in ["data", "stringData"] {
            for v in o
                .get_mut(field)
                .and_then(Value::as_object_mut)
                .into_iter()
                .flat_map(|m| m.values_mut())
            {
                *v = Value::String(crate::diff::REDACTED.into());
                masked += 1;
            }
        }
    }
    masked
}

/// The version the operator installed for the provider object `live`.
pub fn installed_version(live: Option<&AnyProvider>) -> Option<&str> {
    live.and_then(|l| l.status.as_ref())
        .and_then(|s| s.installed_version.as_deref())
}

#[cfg(test)]
mod mask_tests {
    use super::*;
    use serde_json::json;

    /// Both fields of a rendered Secret are masked, every other object is printed as rendered.
    #[test]
    fn render_masks_every_value_of_rendered_secrets_only() {
        let mut objects = vec![
            json!({"kind": "Secret", "data": {"a": "c2VjcmV0"}, "stringData": {"b": "plain"}}),
            json!({"kind": "ConfigMap", "data": {"c": "kept"}}),
        ];
        assert_eq!(mask_secrets(&mut objects), 2);
        assert_eq!(
            objects,
            vec![
                json!({"kind": "Secret", "data": {"a": "(redacted)"}, "stringData": {"b": "(redacted)"}}),
                json!({"kind": "ConfigMap", "data": {"c": "kept"}}),
            ]
        );
    }
}
