//! `verify`: checks a release's components against the provider contracts and prints the
//! findings. Fails (exit code 1) when any check fails.

use std::path::PathBuf;

use anyhow::{Context, bail};
use capi_components::{
    contract::{self, Finding, Severity},
    metadata::Metadata,
};
use capi_operator_api::ProviderType;
use capi_release::Release;

use crate::{
    output::{self, OutputFlags},
    providers::ProviderFlags,
    release::{self, SourceFlags},
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
    #[command(flatten)]
    output: OutputFlags,
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

/// What was verified and what was found.
struct Checked {
    /// The heading of the text report.
    title: String,
    /// What was verified, for `-o json|yaml`.
    subject: serde_json::Value,
    findings: Vec<Finding>,
}

fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Ok => "ok",
        Severity::Warning => "warning",
        Severity::Error => "error",
    }
}

fn count(findings: &[Finding], s: Severity) -> usize {
    findings.iter().filter(|f| f.severity == s).count()
}

/// Prints every result (text, or one document for `-o`) and returns the number of errors.
fn print_all(checked: Vec<Checked>, args: &Args) -> anyhow::Result<usize> {
    let errors = checked
        .iter()
        .map(|c| count(&c.findings, Severity::Error))
        .sum();
    let Some(format) = args.output.output else {
        for c in &checked {
            report(&c.title, &c.findings, args.quiet);
        }
        return Ok(errors);
    };
    let docs: Vec<serde_json::Value> = checked
        .into_iter()
        .map(|c| {
            let mut doc = c.subject;
            doc["errors"] = count(&c.findings, Severity::Error).into();
            doc["warnings"] = count(&c.findings, Severity::Warning).into();
            doc["findings"] = c
                .findings
                .iter()
                .filter(|f| !(args.quiet && f.severity == Severity::Ok))
                .map(|f| serde_json::json!({"severity": severity_word(f.severity), "check": f.check, "message": f.message}))
                .collect();
            doc
        })
        .collect();
    output::print(&serde_json::Value::Array(docs), format)?;
    Ok(errors)
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

/// The contract checked against and the findings of `release`.
fn check(
    t: ProviderType,
    release: &Release,
    fixed: Option<&str>,
) -> anyhow::Result<(Option<String>, Vec<Finding>)> {
    let (contract, meta) = contract_of(Some(&release.metadata), &release.version, fixed);
    let objects = release::objects_as_published(release)?;
    let mut findings: Vec<Finding> = meta.into_iter().collect();
    findings.extend(contract::verify(t, contract.as_deref(), &objects));
    Ok((contract, findings))
}

/// Runs `verify`.
pub async fn run(args: &Args) -> anyhow::Result<Outcome> {
    let checked = match &args.components {
        Some(path) => vec![check_file(args, path)?],
        None => check_providers(args).await?,
    };
    Ok(Outcome {
        errors: print_all(checked, args)?,
    })
}

fn check_file(args: &Args, path: &std::path::Path) -> anyhow::Result<Checked> {
    let t = type_of(&args.provider_type)?;
    let components =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let metadata = match &args.metadata {
        Some(m) => {
            Some(std::fs::read_to_string(m).with_context(|| format!("reading {}", m.display()))?)
        }
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
    Ok(Checked {
        title: format!(
            "{} {} ({})",
            t.kind(),
            path.display(),
            contract.as_deref().unwrap_or("contract unknown")
        ),
        subject: serde_json::json!({
            "kind": t.kind(),
            "components": path.display().to_string(),
            "version": release.version,
            "contract": contract,
        }),
        findings,
    })
}

async fn check_providers(args: &Args) -> anyhow::Result<Vec<Checked>> {
    let list = args.providers.parse()?;
    if list.is_empty() {
        bail!("name at least one provider (--infrastructure NAME, ...) or give --components FILE");
    }
    let mut out = Vec::new();
    for arg in &list {
        let located = release::locate_arg(arg, &args.sources)?;
        let r = located.fetch(arg.version.as_deref()).await?;
        let (contract, findings) = check(arg.provider_type, &r, args.contract.as_deref())?;
        out.push(Checked {
            title: format!(
                "{} {} {} from {}",
                arg.provider_type.kind(),
                arg.name,
                r.version,
                located.description
            ),
            subject: serde_json::json!({
                "kind": arg.provider_type.kind(),
                "name": arg.name,
                "version": r.version,
                "source": located.description,
                "contract": contract,
            }),
            findings,
        });
    }
    Ok(out)
}
