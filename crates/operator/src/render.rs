//! The `render` command: a provider object in, the objects the operator would apply out.

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context, bail};
use capi_components::{
    desired::{Inputs, desired},
    render::RenderExtras,
};
use capi_operator_api::AnyProvider;
use capi_release_sources::{fetch_release, local::LocalSource};
use serde_json::Value;

fn read_provider(file: &Path) -> anyhow::Result<AnyProvider> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())
        .with_context(|| format!("parsing {}", file.display()))?;
    let mut last_err = None;
    for d in docs {
        match AnyProvider::from_value(d) {
            Ok(p) => return Ok(p),
            Err(e) => last_err = Some(e),
        }
    }
    match last_err {
        Some(e) => bail!("{} holds no provider object: {e}", file.display()),
        None => bail!("{} is empty", file.display()),
    }
}

fn read_variables(file: Option<&Path>) -> anyhow::Result<BTreeMap<String, String>> {
    let Some(file) = file else {
        return Ok(BTreeMap::new());
    };
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    capi_components::variables::parse(&text).map_err(|e| anyhow::anyhow!("{}:{e}", file.display()))
}

/// Reads `--additional-manifests`: the text of a ConfigMap's `manifests` key when the file is
/// exactly one ConfigMap holding that key, the whole file otherwise.
fn read_additional_manifests(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    let Some(file) = file else { return Ok(None) };
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())
        .with_context(|| format!("parsing {}", file.display()))?;
    if let [doc] = docs.as_slice()
        && doc.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && doc.get("kind").and_then(Value::as_str) == Some("ConfigMap")
        && let Some(manifests) = doc.pointer("/data/manifests")
    {
        let manifests = manifests.as_str().with_context(|| {
            format!(
                "{}: the ConfigMap's data.manifests is not a string",
                file.display()
            )
        })?;
        return Ok(Some(manifests.to_string()));
    }
    Ok(Some(text))
}

/// Options of the command, as given on the command line.
pub struct Args<'a> {
    /// The provider object.
    pub file: &'a Path,
    /// Local repository of releases.
    pub repository: Option<&'a Path>,
    /// KEY=VALUE file standing for the provider Secret.
    pub variables: Option<&'a Path>,
    /// List variables instead of rendering.
    pub list_variables: bool,
    /// Additional manifests (a ConfigMap or plain manifests).
    pub additional_manifests: Option<&'a Path>,
}

/// Runs the command.
pub fn run(args: &Args<'_>) -> anyhow::Result<()> {
    let provider = read_provider(args.file)?;
    let Some(repo) = args.repository else {
        bail!("render needs --repository DIR (remote sources are fetched by the operator)");
    };
    let additional = read_additional_manifests(args.additional_manifests)?;
    let label = provider.provider_type.manifest_label(provider.name());
    let source = LocalSource::new(repo, &label);
    let components_file = provider.provider_type.components_file();
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let release = runtime
        .block_on(fetch_release(
            &source,
            provider.spec.version.as_deref(),
            components_file,
        ))
        .with_context(|| format!("fetching {label} from {}", repo.display()))?;
    if args.list_variables {
        let mut vars = capi_envsubst::variables(&release.components)?;
        // Additional manifests are substituted with the same variables, so they count too.
        if let Some(text) = &additional {
            let more =
                capi_envsubst::variables(text).context("reading the additional manifests")?;
            for v in more {
                if !vars.iter().any(|known| known.name == v.name) {
                    vars.push(v);
                }
            }
        }
        for v in vars {
            match v.default {
                Some(d) => println!("{}={d}", v.name),
                None => println!("{} (required)", v.name),
            }
        }
        return Ok(());
    }
    let vars = read_variables(args.variables)?;
    // Nothing is installed from render's point of view: a paused provider is shown as its
    // first install, every Deployment at zero replicas, and the inventory entry is kept, as
    // the operator does by default.
    let inputs = Inputs {
        extras: RenderExtras {
            additional_manifests: additional,
            ..Default::default()
        },
        paused: provider.spec.paused,
        inventory: true,
        ..Default::default()
    };
    let desired = desired(&provider, &release, |k| vars.get(k).cloned(), &inputs)?;
    // The same findings the operator puts on the ManagerConfigured condition; on stderr so the
    // objects on stdout stay exactly what the operator applies.
    for r in &desired.managers {
        for f in &r.findings {
            eprintln!("warning: {} {}", f.field, f.problem);
        }
    }
    let mut objects = desired.objects;
    objects.extend(desired.entry);
    print!("{}", capi_yaml::to_multi_doc(&objects)?);
    Ok(())
}
