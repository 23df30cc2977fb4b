//! Copying an image between registries, to fill a mirror before an air gap: the manifest (or
//! index, with every manifest it lists) is copied byte for byte, so the copy has the same
//! digest, after the blobs each manifest names.

use reqwest::{Method, header::CONTENT_TYPE};
use serde::Deserialize;

use super::{
    MAX_ERROR_BYTES, OCI_INDEX, OCI_MANIFEST, OciConfig, OciCredentials, OciReference, SourceError,
    auth::Access,
    client::{Call, Registry, sha256_digest},
    invalid,
    pull::Descriptor,
    reference::parse_digest,
};

/// A manifest as the registry sent it.
struct RawManifest {
    body: Vec<u8>,
    media_type: String,
    digest: String,
}

#[derive(Deserialize)]
struct Parts {
    #[serde(default, rename = "mediaType")]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

/// Where a copy goes and with what.
pub struct CopyEnds<'a> {
    /// The image copied: a tag or a digest.
    pub from: &'a OciReference,
    /// Credentials for `from` (anonymous for a public registry).
    pub from_credentials: &'a OciCredentials,
    /// The copy's repository and tag (the source's digest is kept, so no digest is needed).
    pub to: &'a OciReference,
    /// Credentials for `to`.
    pub to_credentials: &'a OciCredentials,
}

/// Copies the image `ends.from` names to `ends.to` and returns its digest, the same on both
/// sides. Every platform of a multi-platform index is copied. Blobs the mirror already holds are
/// not uploaded again.
pub async fn copy_image(ends: &CopyEnds<'_>, config: &OciConfig) -> Result<String, SourceError> {
    let src = Registry::new(ends.from, ends.from_credentials.clone(), config.clone())?;
    let dst = Registry::new(ends.to, ends.to_credentials.clone(), config.clone())?;
    let reference = ends
        .from
        .digest
        .clone()
        .or_else(|| ends.from.tag.clone())
        .unwrap_or_else(|| "latest".into());
    let top = src.raw_manifest(&reference).await?;
    let parts = parse_parts(&top, &src)?;
    for child in &parts.manifests {
        parse_digest(&child.digest).map_err(|w| invalid(format!("{}: {w}", src.name())))?;
        let m = src.raw_manifest(&child.digest).await?;
        let inner = parse_parts(&m, &src)?;
        if !inner.manifests.is_empty() {
            return Err(invalid(format!(
                "{}: an index points to another index",
                src.name()
            )));
        }
        copy_blobs(&src, &dst, &inner).await?;
        dst.put_manifest(&m, &m.digest).await?;
    }
    copy_blobs(&src, &dst, &parts).await?;
    let target = match (&ends.to.tag, &ends.to.digest) {
        (Some(t), _) => t.clone(),
        (None, _) => top.digest.clone(),
    };
    dst.put_manifest(&top, &target).await?;
    tracing::info!(from = %ends.from, to = %ends.to, digest = %top.digest, "copied image");
    Ok(top.digest)
}

fn parse_parts(m: &RawManifest, reg: &Registry) -> Result<Parts, SourceError> {
    serde_json::from_slice(&m.body)
        .map_err(|e| invalid(format!("manifest {} of {}: {e}", m.digest, reg.name())))
}

/// The config and layers of a manifest, copied unless the mirror has them. Layers a registry
/// may not redistribute (Windows base layers) are left to be pulled from their own URLs.
async fn copy_blobs(src: &Registry, dst: &Registry, parts: &Parts) -> Result<(), SourceError> {
    let blobs = parts.config.iter().chain(&parts.layers).filter(|d| {
        !d.media_type.contains("nondistributable") && !d.media_type.contains("foreign")
    });
    for d in blobs {
        if dst.has_blob(&d.digest).await? {
            continue;
        }
        let what = format!("blob {} of {}", d.digest, src.name());
        let data = src.blob(d, &what).await?;
        dst.upload_blob(&data).await?;
    }
    Ok(())
}

impl Registry {
    /// The manifest `reference` (tag or digest) names, as sent, checked against its digest.
    async fn raw_manifest(&self, reference: &str) -> Result<RawManifest, SourceError> {
        let (answer, what) = self.manifest_answer(reference).await?;
        let digest = sha256_digest(&answer.body);
        let header = answer
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or_default().trim().to_string());
        let parts: Parts = serde_json::from_slice(&answer.body)
            .map_err(|e| invalid(format!("{what}: not a manifest: {e}")))?;
        let media_type = parts
            .media_type
            .or(header)
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| {
                if parts.manifests.is_empty() {
                    OCI_MANIFEST.into()
                } else {
                    OCI_INDEX.into()
                }
            });
        Ok(RawManifest {
            body: answer.body,
            media_type,
            digest,
        })
    }

    /// Stores `m` under `reference` (a tag or its digest), checking the digest the registry
    /// announces.
    async fn put_manifest(&self, m: &RawManifest, reference: &str) -> Result<(), SourceError> {
        let what = format!("manifest {reference} of {}", self.name());
        let answer = self
            .call(&Call {
                method: Method::PUT,
                url: self.url(&format!("manifests/{reference}"))?,
                accept: None,
                content_type: Some(&m.media_type),
                body: Some(&m.body),
                limit: MAX_ERROR_BYTES,
                access: Access::Push,
                what: &what,
            })
            .await?;
        match answer
            .headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
        {
            Some(announced) if announced != m.digest => Err(invalid(format!(
                "{what}: the registry stored digest {announced}, expected {}",
                m.digest
            ))),
            _ => Ok(()),
        }
    }
}
