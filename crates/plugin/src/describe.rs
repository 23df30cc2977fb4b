//! `describe`: a release's variables with their defaults, and its images; with `--cluster`,
//! also the provider object of that kind and name in the cluster and its deletion policy.

use capi_operator_api::AnyProvider;
use serde_json::{Value, json};

use crate::{
    cluster::{Cluster, ClusterFlags},
    output::{self, OutputFlags},
    providers::ProviderFlags,
    release::{self, SourceFlags},
    vars::VariableFlags,
};

/// Flags of `describe`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    providers: ProviderFlags,
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    variables: VariableFlags,
    #[command(flatten)]
    output: OutputFlags,
    /// Also show the provider object of that kind and name in the cluster: its installed
    /// version, its Ready condition and its deletion policy (what deleting it does).
    #[arg(long)]
    cluster: bool,
}

/// The provider object of `kind` and `name` among `live`, as describe shows it: installed
/// version, Ready, and the deletion policy with what it means.
fn live(live: &[AnyProvider], arg: &crate::providers::ProviderArg) -> Value {
    let Some(p) = live
        .iter()
        .find(|p| p.provider_type == arg.provider_type && p.name() == arg.name)
    else {
        return json!({ "object": null });
    };
    let status = p.status.clone().unwrap_or_default();
    let policy = p.spec.deletion_policy;
    json!({
        "object": format!("{}/{}", p.namespace(), p.name()),
        "installedVersion": status.installed_version,
        "ready": status.condition("Ready").map(|c| c.status.clone()),
        "deletionPolicy": policy.as_str(),
        "onDeletion": on_deletion(policy),
    })
}

/// What deleting a provider object does under `policy`, in a line.
fn on_deletion(policy: capi_operator_api::DeletionPolicy) -> &'static str {
    match policy {
        capi_operator_api::DeletionPolicy::Block => {
            "waits for its custom resources to go, removes the components, keeps CRDs and namespace"
        }
        capi_operator_api::DeletionPolicy::Orphan => {
            "leaves everything installed running, for a new object of the same name to adopt"
        }
        capi_operator_api::DeletionPolicy::Purge => {
            "waits for its custom resources to go, removes the components, then its CRDs and namespace"
        }
    }
}

/// Runs `describe`.
pub async fn run(args: &Args, cluster_flags: &ClusterFlags) -> anyhow::Result<()> {
    let list = args.providers.parse()?;
    if list.is_empty() {
        anyhow::bail!("name at least one provider (--core, --infrastructure, ...)");
    }
    let in_cluster = if args.cluster {
        Some(Cluster::connect(cluster_flags).await?.providers().await?)
    } else {
        None
    };
    let file = args.variables.file()?;
    let mut docs = Vec::new();
    for arg in &list {
        let located = release::locate_arg(arg, &args.sources)?;
        let r = located.fetch(arg.version.as_deref()).await?;
        let contract = capi_components::metadata::Metadata::parse(&r.metadata)
            .ok()
            .and_then(|m| m.contract_for(&r.version).ok().map(str::to_string));
        let vars = release::variables(&r)?;
        // As clusterctl describes a release: expressions as written, except the values given.
        let objects = release::objects_with(&r, &file, false)?;
        let namespace = release::target_namespace(arg, &objects)?;
        let mut images = capi_components::pipeline::inspect_images(&objects);
        images.dedup();
        if args.output.output.is_some() {
            let mut doc = json!({
                "kind": arg.provider_type.kind(),
                "name": arg.name,
                "version": r.version,
                "contract": contract,
                "source": located.description,
                "namespace": namespace,
                "variables": vars.iter().map(|(k, d)| json!({"name": k, "default": d, "required": d.is_none()})).collect::<Vec<_>>(),
                "images": images,
            });
            if let Some(l) = &in_cluster {
                doc["cluster"] = live(l, arg);
            }
            docs.push(doc);
            continue;
        }
        say!(
            "{} {} {} (contract {})",
            arg.provider_type.kind(),
            arg.name,
            r.version,
            contract.as_deref().unwrap_or("unknown")
        );
        say!("  source:    {}", located.description);
        say!("  namespace: {namespace}");
        say!("  variables:");
        if vars.is_empty() {
            say!("    (none)");
        }
        let width = vars.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, d) in &vars {
            match d {
                Some(d) => say!("    {k:<width$}  default {d:?}"),
                None => say!("    {k:<width$}  (required)"),
            }
        }
        say!("  images:");
        for i in &images {
            say!("    {i}");
        }
        if let Some(l) = &in_cluster {
            say_live(&live(l, arg));
        }
    }
    if let Some(format) = args.output.output {
        output::print(&serde_json::Value::Array(docs), format)?;
    }
    Ok(())
}

fn say_live(v: &Value) {
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
    if v.get("object").is_none_or(Value::is_null) {
        say!("  in the cluster: no provider object of this kind and name");
        return;
    }
    say!("  in the cluster: {}", text("object"));
    say!("    installed:       {}", text("installedVersion"));
    say!("    ready:           {}", text("ready"));
    say!(
        "    deletion policy: {} (deleting it {})",
        text("deletionPolicy"),
        text("onDeletion")
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{DeletionPolicy, ProviderSpec, ProviderType};

    #[test]
    fn live_object_shows_its_deletion_policy() -> anyhow::Result<()> {
        let arg = crate::providers::ProviderArg {
            provider_type: ProviderType::Infrastructure,
            name: "docker".into(),
            namespace: None,
            version: None,
            source: None,
        };
        let mut p = AnyProvider {
            api: Default::default(),
            provider_type: ProviderType::Infrastructure,
            metadata: Default::default(),
            spec: ProviderSpec::default(),
            status: None,
        };
        p.metadata.name = Some("docker".into());
        p.metadata.namespace = Some("capd-system".into());
        assert_eq!(live(&[], &arg)["object"], Value::Null);
        let v = live(std::slice::from_ref(&p), &arg);
        assert_eq!(v["object"], "capd-system/docker");
        assert_eq!(v["deletionPolicy"], "Block");
        p.spec.deletion_policy = DeletionPolicy::Orphan;
        let v = live(std::slice::from_ref(&p), &arg);
        assert_eq!(v["deletionPolicy"], "Orphan");
        assert!(v["onDeletion"].as_str().unwrap_or("").contains("adopt"));
        // Another kind of the same name is not it.
        p.provider_type = ProviderType::Bootstrap;
        assert_eq!(live(&[p], &arg)["object"], Value::Null);
        Ok(())
    }
}
