//! `krew-manifest`: the plugin's krew manifest (krew's `Plugin` kind), written from the build
//! itself so its version, binary name and archive checksums cannot drift from what is shipped.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The plugin's name in the krew index (`kubectl krew install capi-providers`).
pub const PLUGIN_NAME: &str = "capi-providers";
/// The binary krew puts on the PATH (kubectl finds `kubectl-capi_providers` as
/// `kubectl capi-providers`).
pub const BIN: &str = "kubectl-capi_providers";

/// Flags of `krew-manifest`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Download URL of each platform's archive; {version}, {os} and {arch} are replaced (the
    /// version without a leading v).
    #[arg(long, value_name = "TEMPLATE")]
    uri_template: String,
    /// A platform's archive, as OS/ARCH=FILE (e.g. linux/amd64=dist/kubectl-capi_providers-linux-amd64.tar.gz);
    /// its SHA-256 goes into the manifest. Repeat for each platform.
    #[arg(long = "archive", value_name = "OS/ARCH=FILE", required = true, value_parser = parse_archive)]
    archives: Vec<Archive>,
}

/// A platform's archive.
#[derive(Debug, Clone)]
pub struct Archive {
    os: String,
    arch: String,
    file: PathBuf,
}

fn parse_archive(s: &str) -> Result<Archive, String> {
    let (platform, file) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not OS/ARCH=FILE"))?;
    let (os, arch) = platform
        .split_once('/')
        .filter(|(o, a)| !o.is_empty() && !a.is_empty())
        .ok_or_else(|| format!("{platform:?} is not OS/ARCH (e.g. linux/amd64)"))?;
    Ok(Archive {
        os: os.to_string(),
        arch: arch.to_string(),
        file: PathBuf::from(file),
    })
}

/// The SHA-256 of `file`, in lower-case hex as krew checks it.
fn sha256_hex(file: &std::path::Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The manifest for `version`: one platform per archive (os, arch, SHA-256).
pub fn manifest(
    version: &str,
    uri_template: &str,
    platforms: &[(String, String, String)],
) -> Value {
    let bare = version.trim_start_matches('v');
    let platforms: Vec<Value> = platforms
        .iter()
        .map(|(os, arch, sha)| {
            let uri = uri_template
                .replace("{version}", bare)
                .replace("{os}", os)
                .replace("{arch}", arch);
            let bin = if os == "windows" {
                format!("{BIN}.exe")
            } else {
                BIN.to_string()
            };
            json!({
                "selector": {"matchLabels": {"os": os, "arch": arch}},
                "uri": uri,
                "sha256": sha,
                "bin": bin,
            })
        })
        .collect();
    json!({
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": PLUGIN_NAME},
        "spec": {
            "version": format!("v{bare}"),
            "homepage": env!("CARGO_PKG_REPOSITORY"),
            "shortDescription": "Manage Cluster API providers through the capi-provider-operator",
            "description": "Installs, upgrades, verifies and describes Cluster API providers \
                through the capi-provider-operator: init, upgrade plan/apply (across contracts), \
                preload for air-gapped installs, migrate from clusterctl, verify against the \
                provider contracts, describe a release's variables and images.",
            "platforms": platforms,
        },
    })
}

/// Runs `krew-manifest`: prints the manifest of this build as YAML.
pub fn run(args: &Args) -> anyhow::Result<()> {
    if !args.uri_template.contains("{os}") && args.archives.len() > 1 {
        bail!(
            "--uri-template must contain {{os}} (and {{arch}}) to tell the platforms' archives apart"
        );
    }
    let mut platforms = Vec::new();
    for a in &args.archives {
        platforms.push((a.os.clone(), a.arch.clone(), sha256_hex(&a.file)?));
    }
    let m = manifest(env!("CARGO_PKG_VERSION"), &args.uri_template, &platforms);
    crate::output::print(&m, crate::output::Format::Yaml)
}
