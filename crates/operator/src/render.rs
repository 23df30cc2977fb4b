//! The `render` command: a provider object in, the objects the operator would apply out.

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context, bail};
use capi_components::source::{fetch_release, local::LocalSource};
use capi_operator_api::AnyProvider;

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
    let mut vars = BTreeMap::new();
    let Some(file) = file else { return Ok(vars) };
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            bail!("{}:{}: expected KEY=VALUE", file.display(), i + 1);
        };
        vars.insert(k.trim().to_string(), v.to_string());
    }
    Ok(vars)
}

/// Runs the command.
pub fn run(
    file: &Path,
    repository: Option<&Path>,
    variables: Option<&Path>,
    list_variables: bool,
) -> anyhow::Result<()> {
    let provider = read_provider(file)?;
    let Some(repo) = repository else {
        bail!("render needs --repository DIR (remote sources are fetched by the operator)");
    };
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
    if list_variables {
        let vars = capi_envsubst::variables(&release.components)?;
        for v in vars {
            match v.default {
                Some(d) => println!("{}={d}", v.name),
                None => println!("{} (required)", v.name),
            }
        }
        return Ok(());
    }
    let vars = read_variables(variables)?;
    let rendered = capi_components::render::render(&provider, &release, |k| vars.get(k).cloned())?;
    print!("{}", capi_yaml::to_multi_doc(&rendered.objects)?);
    Ok(())
}
