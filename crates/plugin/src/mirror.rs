//! The image mirror on the plugin's side: the same setting as the operator's (`--image-mirror`,
//! `--image-pull-secrets`, and its ConfigMap as a file), for the cert-manager `init` installs
//! and for `preload --images`, which lists the images a mirror must hold or copies them into it.

use std::path::PathBuf;

use anyhow::{Context, bail};
use capi_components::mirror::{IMAGES_KEY, ImageMirror, PULL_SECRETS_KEY};
use capi_release_sources::oci::{CopyEnds, OciConfig, OciCredentials, OciReference, copy_image};
use serde_json::Value;

/// Flags naming the image mirror.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MirrorFlags {
    /// Registry and path every image is moved to, name, tag and digest kept (clusterctl's
    /// `images: all: repository`; the operator's --image-mirror).
    #[arg(long, value_name = "REPOSITORY")]
    pub image_mirror: Option<String>,
    /// Secrets (comma-separated names) added to the imagePullSecrets of the Deployments
    /// installed (cert-manager's, for init).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub image_pull_secrets: Vec<String>,
    /// The operator's image mirror ConfigMap as a YAML file (keys images and imagePullSecrets),
    /// or a clusterctl configuration file with an images: section; it goes over the two flags
    /// above, as the ConfigMap goes over the operator's flags.
    #[arg(long, value_name = "FILE")]
    pub image_mirror_config: Option<PathBuf>,
}

impl MirrorFlags {
    /// The setting the flags give (empty without any).
    pub fn mirror(&self) -> anyhow::Result<ImageMirror> {
        let base = ImageMirror::all(self.image_mirror.as_deref(), &self.image_pull_secrets)?;
        let Some(path) = &self.image_mirror_config else {
            return Ok(base);
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let docs = capi_yaml::parse_documents(&text, &capi_yaml::Limits::default())
            .with_context(|| format!("parsing {}", path.display()))?;
        let Some(doc) = docs.first() else {
            bail!("{}: empty", path.display());
        };
        let (images, secrets) = if doc.get("kind").and_then(Value::as_str) == Some("ConfigMap") {
            let key = |k: &str| {
                doc.pointer(&format!("/data/{k}"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            (key(IMAGES_KEY), key(PULL_SECRETS_KEY))
        } else {
            // clusterctl's configuration: the images: section as a mapping.
            let images = doc.get(IMAGES_KEY).map(capi_yaml::to_string).transpose()?;
            (images, None)
        };
        let m = ImageMirror::parse(images.as_deref(), secrets.as_deref())
            .with_context(|| path.display().to_string())?;
        Ok(m.over(&base))
    }
}

/// Flags of the copy into a mirror.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CopyFlags {
    /// Copy every image listed to its place in the mirror (manifests, indexes and blobs, by
    /// digest). The mirror's credentials come from $OCI_USERNAME and $OCI_PASSWORD (or
    /// $OCI_ACCESS_TOKEN); images are read anonymously.
    #[arg(long, requires = "images")]
    pub copy: bool,
    /// A registry host (host:port) spoken to over plain HTTP, source or mirror (repeatable).
    #[arg(long, value_name = "HOST")]
    pub plain_http_registry: Vec<String>,
    /// PEM certificate authorities the registries' TLS certificates are checked against, besides
    /// the system's.
    #[arg(long, value_name = "FILE")]
    pub registry_ca_file: Option<PathBuf>,
}

/// An image reference as the OCI client reads it: Docker Hub's short names made whole
/// (`busybox` is `registry-1.docker.io/library/busybox`), plain HTTP where asked for.
pub fn oci_reference(image: &str, plain_http: &[String]) -> anyhow::Result<OciReference> {
    let first = image.split('/').next().unwrap_or_default();
    let has_registry =
        image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let whole = match (has_registry, image.contains('/')) {
        (true, _) => image.to_string(),
        (false, true) => format!("registry-1.docker.io/{image}"),
        (false, false) => format!("registry-1.docker.io/library/{image}"),
    };
    let whole = whole.replacen(
        "docker.io/",
        "registry-1.docker.io/",
        usize::from(whole.starts_with("docker.io/")),
    );
    let host = whole.split('/').next().unwrap_or_default();
    let scheme = if plain_http.iter().any(|h| h == host) {
        "http://"
    } else {
        ""
    };
    Ok(OciReference::parse(&format!("{scheme}{whole}"))?)
}

/// Copies each of `images` to where `mirror` moves it (`component`, image) pairs; prints one
/// line per image with the digest copied.
pub async fn copy_all(
    images: &[(String, String)],
    mirror: &ImageMirror,
    flags: &CopyFlags,
) -> anyhow::Result<()> {
    let mut config = OciConfig::default();
    config.http.max_bytes = 4 << 30;
    if let Some(ca) = &flags.registry_ca_file {
        config.root_certificates_pem =
            vec![std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?];
    }
    let anon = OciCredentials::anonymous();
    let creds = OciCredentials::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
    for (component, image) in images {
        let target = mirror.alter(component, image);
        if target == *image {
            bail!(
                "{image}: the mirror setting does not move it (set --image-mirror or an images entry for {component})"
            );
        }
        let from = oci_reference(image, &flags.plain_http_registry)?;
        let mut to = oci_reference(&target, &flags.plain_http_registry)?;
        // The copy is stored under the tag; the digest is the source's own.
        to.digest = None;
        if to.tag.is_none() {
            to.tag = from.tag.clone();
        }
        let ends = CopyEnds {
            from: &from,
            from_credentials: &anon,
            to: &to,
            to_credentials: &creds,
        };
        let digest = copy_image(&ends, &config)
            .await
            .with_context(|| format!("copying {image} to {target}"))?;
        say!("{image} -> {target} {digest}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_docker_hub_ones() -> anyhow::Result<()> {
        let r = oci_reference("busybox:1", &[])?;
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("registry-1.docker.io", "library/busybox")
        );
        let r = oci_reference("docker.io/bitnami/kubectl:1", &[])?;
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("registry-1.docker.io", "bitnami/kubectl")
        );
        let r = oci_reference("127.0.0.1:5000/capi/ctl:v1", &["127.0.0.1:5000".into()])?;
        assert!(r.plain_http);
        assert_eq!(r.repository, "capi/ctl");
        let r = oci_reference("quay.io/jetstack/cert-manager-webhook:v1.19.1", &[])?;
        assert!(!r.plain_http);
        Ok(())
    }
}
