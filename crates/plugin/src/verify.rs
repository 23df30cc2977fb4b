//! `verify`: checks a release's components against the provider contracts and prints the
//! findings. Fails (exit code 1) when any check fails.

use std::path::PathBuf;

use anyhow::{Context, bail};
use capi_components::{
    contract::{self, Finding, Severity},
    metadata::Metadata,
};
use capi_operator_api::ProviderType;

use crate::{
    providers::ProviderFlags,
    release::{self, Release, SourceFlags},
};

/// Flags of `verify`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    providers: ProviderFlags,
    #[command(flatten)]
    sources: SourceFlags,
    /// Verify this components file instead of a provider's release.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["core", "bootstrap", "control_plane", "infrastructure", "ipam", "runtime_extension", "addon"])]
    components: Option<PathBuf>,
    /// metadata.yaml of the components file (gives the contract).
    #[arg(long, value_name = "FILE", requires = "components")]
    metadata: Option<PathBuf>,
    /// Provider type of the components file: core, bootstrap, control-plane, infrastructure,
    /// ipam, runtime-extension or addon.
    #[arg(
        long = "type",
        value_name = "TYPE",
        default_value = "infrastructure",
        requires = "components"
    )]
    provider_type: String,
    /// Version of the components file (with --metadata, gives the contract).
    #[arg(long, value_name = "VERSION", requires = "components")]
    version: Option<String>,
    /// The contract to check against (v1beta1 or v1beta2), instead of the one metadata.yaml
    /// gives for the version.
    #[arg(long, value_name = "CONTRACT")]
    contract: Option<String>,
    /// Print only failed and questionable checks.
    #[arg(long, short = 'q')]
    quiet: bool,
}

/// The outcome: how many errors were found.
pub struct Outcome {
    /// Errors found.
    pub errors: usize,
}

fn type_of(word: &str) -> anyhow::Result<ProviderType> {
    ProviderType::ALL
        .into_iter()
        .find(|t| t.word() == word || t.kind().eq_ignore_ascii_case(word))
        .with_context(|| format!("unknown provider type {word:?}"))
}

fn contract_of(
    metadata: Option<&str>,
    version: &str,
    fixed: Option<&str>,
) -> (Option<String>, Option<Finding>) {
    if let Some(c) = fixed {
        return (Some(c.to_string()), None);
    }
    let Some(text) = metadata else {
        return (None, None);
    };
    match Metadata::parse(text) {
        Err(e) => (
            None,
            Some(Finding {
                severity: Severity::Error,
                check: "metadata",
                message: e.to_string(),
            }),
        ),
        Ok(m) => match m.contract_for(version) {
            Ok(c) => {
                let known = matches!(c, "v1beta1" | "v1beta2");
                (
                    Some(c.to_string()),
                    Some(Finding {
                        severity: if known {
                            Severity::Ok
                        } else {
                            Severity::Warning
                        },
                        check: "metadata",
                        message: if known {
                            format!("{version} follows contract {c}")
                        } else {
                            format!("{version} follows contract {c}, which this tool does not know")
                        },
                    }),
                )
            }
            Err(e) => (
                None,
                Some(Finding {
                    severity: Severity::Error,
                    check: "metadata",
                    message: e.to_string(),
                }),
            ),
        },
    }
}

fn report(title: &str, findings: &[Finding], quiet: bool) -> usize {
    say!("{title}");
    let mut errors = 0;
    let mut warnings = 0;
    let mut passed = 0;
    for f in findings {
        match f.severity {
            Severity::Error => errors += 1,
            Severity::Warning => warnings += 1,
            Severity::Ok => passed += 1,
        }
        if !(quiet && f.severity == Severity::Ok) {
            say!("  {f}");
        }
    }
    say!("  {errors} errors, {warnings} warnings, {passed} passed");
    errors
}

fn check(t: ProviderType, release: &Release, fixed: Option<&str>) -> anyhow::Result<Vec<Finding>> {
    let (contract, meta) = contract_of(Some(&release.metadata), &release.version, fixed);
    let objects = release::objects_as_published(release)?;
    let mut findings: Vec<Finding> = meta.into_iter().collect();
    findings.extend(contract::verify(t, contract.as_deref(), &objects));
    Ok(findings)
}

/// Runs `verify`.
pub async fn run(args: &Args) -> anyhow::Result<Outcome> {
    let mut errors = 0;
    if let Some(path) = &args.components {
        let t = type_of(&args.provider_type)?;
        let components =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let metadata = match &args.metadata {
            Some(m) => Some(
                std::fs::read_to_string(m).with_context(|| format!("reading {}", m.display()))?,
            ),
            None => None,
        };
        let version = args.version.clone().unwrap_or_default();
        let (contract, meta) = contract_of(metadata.as_deref(), &version, args.contract.as_deref());
        let release = Release {
            version,
            metadata: metadata.unwrap_or_default(),
            components,
        };
        let objects = release::objects_as_published(&release)?;
        let mut findings: Vec<Finding> = meta.into_iter().collect();
        findings.extend(contract::verify(t, contract.as_deref(), &objects));
        errors += report(
            &format!(
                "{} {} ({})",
                t.kind(),
                path.display(),
                contract.as_deref().unwrap_or("contract unknown")
            ),
            &findings,
            args.quiet,
        );
        return Ok(Outcome { errors });
    }
    let list = args.providers.parse()?;
    if list.is_empty() {
        bail!("name at least one provider (--infrastructure NAME, ...) or give --components FILE");
    }
    for arg in &list {
        let located = release::locate_arg(arg, &args.sources)?;
        let r = located.fetch(arg.version.as_deref()).await?;
        let findings = check(arg.provider_type, &r, args.contract.as_deref())?;
        errors += report(
            &format!(
                "{} {} {} from {}",
                arg.provider_type.kind(),
                arg.name,
                r.version,
                located.description
            ),
            &findings,
            args.quiet,
        );
    }
    Ok(Outcome { errors })
}
