//! Variables for a provider's Secret: from a KEY=VALUE file and from the environment (only the
//! variables the release uses). Values are never printed.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::Context;

use capi_release::Release;

use crate::release::variables;

/// The variables flag.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct VariableFlags {
    /// KEY=VALUE lines (blank lines and # comments ignored) for the providers' variables; the
    /// environment is read for the variables a release uses and the file does not set.
    #[arg(long, value_name = "FILE")]
    pub variables: Option<PathBuf>,
}

impl VariableFlags {
    /// The file's variables (empty without a file).
    pub fn file(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let Some(path) = &self.variables else {
            return Ok(BTreeMap::new());
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        capi_components::variables::parse(&text)
            .with_context(|| format!("reading {}", path.display()))
    }
}

/// The values to store for `release` (file entries, then the environment for the variables the
/// release uses) and the required variables still missing.
pub fn for_release(
    release: &Release,
    file: &BTreeMap<String, String>,
) -> anyhow::Result<(BTreeMap<String, String>, Vec<String>)> {
    let vars = variables(release)?;
    let used: Vec<String> = vars.iter().map(|(k, _)| k.clone()).collect();
    let selected = capi_components::variables::select(&used, file, |k| std::env::var(k).ok());
    let missing = vars
        .into_iter()
        .filter(|(k, d)| d.is_none() && !selected.contains_key(k))
        .map(|(k, _)| k)
        .collect();
    Ok((selected, missing))
}
