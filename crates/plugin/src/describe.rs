//! `describe`: a release's variables with their defaults, and its images.

use serde_json::json;

use crate::{
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
}

/// Runs `describe`.
pub async fn run(args: &Args) -> anyhow::Result<()> {
    let list = args.providers.parse()?;
    if list.is_empty() {
        anyhow::bail!("name at least one provider (--core, --infrastructure, ...)");
    }
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
            docs.push(json!({
                "kind": arg.provider_type.kind(),
                "name": arg.name,
                "version": r.version,
                "contract": contract,
                "source": located.description,
                "namespace": namespace,
                "variables": vars.iter().map(|(k, d)| json!({"name": k, "default": d, "required": d.is_none()})).collect::<Vec<_>>(),
                "images": images,
            }));
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
    }
    if let Some(format) = args.output.output {
        output::print(&serde_json::Value::Array(docs), format)?;
    }
    Ok(())
}
