//! `publish`: pushes a release directory (metadata.yaml, the components and the other files of
//! one version) as an OCI artifact, in the layout `fetchConfig.oci` reads: one layer per file,
//! named by its title annotation, tagged with the version.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use capi_release_sources::oci::{OciConfig, OciCredentials, OciReference, push_artifact};

/// Flags of `publish`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The release directory: the files of one version (metadata.yaml,
    /// <type>-components.yaml, templates...).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Where to push: oci://REGISTRY/REPOSITORY[:TAG] (oci+http:// for a registry over plain
    /// HTTP); the tag defaults to the directory's name when it is a version (v1.12.0).
    #[arg(long, value_name = "REFERENCE")]
    to: String,
}

/// The reference to push to: `to` with `oci+http://` meaning plain HTTP, and the tag from
/// `dir`'s name when `to` has none.
pub fn reference(to: &str, dir: &Path) -> anyhow::Result<OciReference> {
    let text = match to.strip_prefix("oci+http://") {
        Some(rest) => format!("http://{rest}"),
        None if to.starts_with("oci://") => to.to_string(),
        None => bail!("{to:?}: give oci://REGISTRY/REPOSITORY[:TAG] (oci+http:// for plain HTTP)"),
    };
    let mut r = OciReference::parse(&text)?;
    if r.digest.is_some() {
        bail!("{to}: a digest cannot be pushed to; give a tag");
    }
    if r.tag.is_none() {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if capi_release::version::parse(&name).is_none() || !name.starts_with('v') {
            bail!(
                "{to} has no tag and {} is not named after a version: give REPOSITORY:TAG",
                dir.display()
            );
        }
        r.tag = Some(name);
    }
    Ok(r)
}

/// The files of `dir` (not its subdirectories), by name; metadata.yaml must be one.
pub fn files(dir: &Path) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        if e.file_type()?.is_file() {
            let bytes = std::fs::read(e.path())
                .with_context(|| format!("reading {}", e.path().display()))?;
            out.push((e.file_name().to_string_lossy().into_owned(), bytes));
        }
    }
    out.sort();
    if !out.iter().any(|(n, _)| n == "metadata.yaml") {
        bail!(
            "{} has no metadata.yaml: it is not a release directory",
            dir.display()
        );
    }
    Ok(out)
}

/// Runs `publish`.
pub async fn run(args: &Args) -> anyhow::Result<()> {
    let reference = reference(&args.to, &args.dir)?;
    let files = files(&args.dir)?;
    let credentials =
        OciCredentials::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
    let digest = push_artifact(&reference, &files, &credentials, &OciConfig::default())
        .await
        .with_context(|| format!("pushing to {reference}"))?;
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    say!(
        "published {} ({}) as {reference} {digest}",
        args.dir.display(),
        names.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_comes_from_the_reference_or_the_directory() -> anyhow::Result<()> {
        let dir = Path::new("releases/infrastructure-docker/v1.12.0");
        let r = reference("oci://registry.example/capi/docker", dir)?;
        assert_eq!(r.tag.as_deref(), Some("v1.12.0"));
        let r = reference("oci+http://127.0.0.1:5000/capi/docker:v9.9.9", dir)?;
        assert_eq!(r.tag.as_deref(), Some("v9.9.9"));
        assert!(reference("oci://registry.example/capi/docker", Path::new("out")).is_err());
        assert!(reference("registry.example/capi/docker", dir).is_err());
        Ok(())
    }
}
