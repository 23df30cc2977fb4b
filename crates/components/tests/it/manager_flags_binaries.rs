//! The flag table of `capi_components::managers` against the real manager binaries: each one
//! listed in the images file of build-providers.sh (`CAPI_PROVIDER_IMAGES`, else the script's
//! default location; YAML,
//! `images: [{repository: cluster-api-controller, tag: v1.12.0, binary: /abs/path}, ...]`) is
//! run with `--help`: every flag the table lists must be among the ones it prints, and every
//! `*-concurrency` flag it prints must be in the table (other flags the table lacks are printed
//! as a NOTE: `additionalArgs` naming them would be reported as unknown).
//! Without that file the test fails, naming `make providers`.

use std::{collections::BTreeSet, path::PathBuf, process::Command};

use capi_components::managers;
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;
/// (repository, tag, binary) of one listed image.
type Listed = (String, String, PathBuf);

/// Every manager version the table was read for (each must be in the images file): the last
/// line of contract v1beta1 (v1.10) and every v1beta2 line since.
const VERSIONS: &[&str] = &["v1.10.10", "v1.11.0", "v1.12.0", "v1.13.6", "v1.14.2"];
/// The managers of each version.
const MANAGERS: &[&str] = &[
    "cluster-api-controller",
    "kubeadm-bootstrap-controller",
    "kubeadm-control-plane-controller",
];

/// (repository, tag) → binary, from the images file.
fn binaries(file: &str) -> Result<Vec<Listed>, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("reading {file}: {e}"))?;
    let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())?;
    let images = docs
        .first()
        .and_then(|d| d.get("images"))
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{file} has no images list"))?;
    let field = |i: &Value, k: &str| i.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Ok(images
        .iter()
        .map(|i| {
            (
                field(i, "repository"),
                field(i, "tag"),
                PathBuf::from(field(i, "binary")),
            )
        })
        .collect())
}

/// Flag names in pflag's usage text: lines such as `      --sync-period duration   ...` or
/// `  -v, --v Level   ...`. Description lines are indented further and never start a flag.
fn help_flags(usage: &str) -> BTreeSet<String> {
    usage
        .lines()
        .filter_map(|line| {
            let rest = line.trim_start();
            let indent = line.len() - rest.len();
            if indent == 0 || indent > 6 {
                return None;
            }
            let rest = match rest.strip_prefix('-') {
                Some(r) if !r.starts_with('-') => r.split_once(", ")?.1,
                _ => rest,
            };
            let name = rest.strip_prefix("--")?;
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Feature gates the usage of `--feature-gates` lists (`Name=true|false (...)`). GA gates are
/// accepted but not listed, so only this direction is checked: a listed gate the table lacks
/// would be reported as fatal wrongly.
fn help_gates(usage: &str) -> BTreeSet<String> {
    usage
        .lines()
        .filter_map(|l| l.trim().split_once("=true|false"))
        .map(|(name, _)| name.to_string())
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect()
}

fn run_help(binary: &PathBuf) -> Result<String, Box<dyn std::error::Error>> {
    let out = Command::new(binary)
        .arg("--help")
        .output()
        .map_err(|e| format!("running {} --help: {e}", binary.display()))?;
    // pflag prints the usage on stderr; accept stdout too.
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn compare(repository: &str, tag: &str, binary: &PathBuf) -> Result<(), String> {
    let set = managers::identify(repository, tag)
        .ok_or_else(|| format!("{repository}:{tag} is not in the table"))?;
    if set.assumed {
        return Err(format!(
            "{repository}:{tag}: the table only assumes {}",
            set.table_minor
        ));
    }
    let usage = run_help(binary).map_err(|e| e.to_string())?;
    let real = help_flags(&usage);
    if real.len() < 10 {
        return Err(format!(
            "{} --help printed no flag list:\n{usage}",
            binary.display()
        ));
    }
    let table: BTreeSet<String> = set
        .flags
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    let missing: Vec<&String> = table.difference(&real).collect();
    let unlisted: Vec<&String> = real.difference(&table).collect();
    let unlisted_concurrency: Vec<&&String> = unlisted
        .iter()
        .filter(|f| f.ends_with("-concurrency"))
        .collect();
    if !unlisted.is_empty() {
        // Not fatal by the test's contract, but additionalArgs naming them would be reported
        // as unknown flags: worth adding to the table.
        eprintln!("NOTE {repository}:{tag}: flags of the binary the table lacks: {unlisted:?}");
    }
    let gates: Vec<String> = help_gates(&usage)
        .into_iter()
        .filter(|g| !set.gates.contains(g.as_str()))
        .collect();
    if !missing.is_empty() || !unlisted_concurrency.is_empty() || !gates.is_empty() {
        return Err(format!(
            "{repository}:{tag} ({}): the table lists flags the binary lacks: {missing:?}; concurrency flags of the binary the table lacks: {unlisted_concurrency:?}; feature gates of the binary the table lacks: {gates:?}",
            binary.display()
        ));
    }
    Ok(())
}

#[test]
fn the_flag_table_matches_the_real_binaries() -> TestResult {
    let file = capi_test_support::provider_images()
        .ok_or(
            "the provider managers are not built: run `make providers` \
             (e2e/scripts/build-providers.sh), or point CAPI_PROVIDER_IMAGES at its images file",
        )?
        .to_string_lossy()
        .into_owned();
    let listed = binaries(&file)?;
    let mut failures = Vec::new();
    let expected = VERSIONS
        .iter()
        .flat_map(|t| MANAGERS.iter().map(move |r| (*r, *t)));
    for (repository, tag) in expected {
        let Some((_, _, binary)) = listed.iter().find(|(r, t, _)| r == repository && t == tag)
        else {
            failures.push(format!("{file} lists no binary for {repository}:{tag}"));
            continue;
        };
        if let Err(e) = compare(repository, tag, binary) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[test]
fn pflag_usage_lines_are_parsed() {
    let usage = "Usage of /manager:\n      --cluster-concurrency int        Number of clusters to process simultaneously (default 10)\n      --tls-min-version string         The minimum TLS version (the latter only if --insecure-diagnostics is not set to true).\n                                       Possible values are VersionTLS10, --not-a-flag\n  -v, --v Level                        number for the log level verbosity\n      --leader-elect                   Enable leader election\n";
    let got: Vec<String> = help_flags(usage).into_iter().collect();
    assert_eq!(
        got,
        [
            "cluster-concurrency",
            "leader-elect",
            "tls-min-version",
            "v"
        ]
    );
}
