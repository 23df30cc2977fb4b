//! Publishing a release as an OCI artifact: blobs uploaded unless present, then the manifest.

use std::collections::BTreeMap;

use reqwest::{Method, header::LOCATION};
use serde::Serialize;

use super::{
    ARTIFACT_TYPE, EMPTY_BLOB, EMPTY_MEDIA_TYPE, FILE_MEDIA_TYPE, MAX_ERROR_BYTES, OCI_MANIFEST,
    OciConfig, OciCredentials, OciReference, SourceError, TITLE_ANNOTATION,
    auth::Access,
    client::{Call, Registry, origin, sha256_digest},
    invalid,
    pull::Descriptor,
};

impl Registry {
    /// Uploads `data` unless the registry already has it; returns its descriptor fields.
    pub(super) async fn upload_blob(&self, data: &[u8]) -> Result<String, SourceError> {
        let digest = sha256_digest(data);
        if self.has_blob(&digest).await? {
            return Ok(digest);
        }
        let what = format!("blob {digest} of {}", self.name());
        // The upload session is single-use, so a retry starts a new one.
        self.retrying(&what, || self.upload_once(data, &digest, &what))
            .await?;
        Ok(digest)
    }

    /// Whether the registry holds the blob `digest`.
    pub(super) async fn has_blob(&self, digest: &str) -> Result<bool, SourceError> {
        let what = format!("blob {digest} of {}", self.name());
        let found = self
            .call(&Call {
                method: Method::HEAD,
                url: self.url(&format!("blobs/{digest}"))?,
                accept: None,
                content_type: None,
                body: None,
                limit: 0,
                access: Access::Push,
                what: &what,
            })
            .await;
        match found {
            Ok(_) => Ok(true),
            Err(SourceError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn upload_once(&self, data: &[u8], digest: &str, what: &str) -> Result<(), SourceError> {
        let started = self
            .call_once(&Call {
                method: Method::POST,
                url: self.url("blobs/uploads/")?,
                accept: None,
                content_type: None,
                body: None,
                limit: MAX_ERROR_BYTES,
                access: Access::Push,
                what,
            })
            .await?;
        let location = started
            .headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| invalid(format!("{what}: the registry gave no upload location")))?;
        let mut url = started
            .url
            .join(location)
            .map_err(|_| invalid(format!("{what}: invalid upload location")))?;
        if origin(&url) != origin(&self.base) {
            return Err(invalid(format!(
                "{what}: the upload location leaves the registry ({})",
                url.host_str().unwrap_or("?")
            )));
        }
        url.query_pairs_mut().append_pair("digest", digest);
        self.call_once(&Call {
            method: Method::PUT,
            url,
            accept: None,
            content_type: Some("application/octet-stream"),
            body: Some(data),
            limit: MAX_ERROR_BYTES,
            access: Access::Push,
            what,
        })
        .await?;
        Ok(())
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestOut<'a> {
    schema_version: u32,
    media_type: &'a str,
    artifact_type: &'a str,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

/// Publishes `files` (title, content) as an OCI 1.1 artifact at `reference`'s tag and returns
/// the manifest digest.
///
/// Each file is one layer of media type [`FILE_MEDIA_TYPE`] with its title annotation; the
/// config is the OCI empty descriptor (`application/vnd.oci.empty.v1+json`, content `{}`), and
/// `artifactType` is [`ARTIFACT_TYPE`]. Blobs go up with a monolithic upload (`POST` then `PUT
/// ?digest=`), skipped when the registry already holds them.
pub async fn push_artifact(
    reference: &OciReference,
    files: &[(String, Vec<u8>)],
    credentials: &OciCredentials,
    config: &OciConfig,
) -> Result<String, SourceError> {
    let tag = reference.tag.as_deref().ok_or_else(|| {
        invalid(format!(
            "{reference}: publishing needs a tag (REPOSITORY:TAG)"
        ))
    })?;
    if reference.digest.is_some() {
        return Err(invalid(format!(
            "{reference}: publishing needs a tag, not a digest"
        )));
    }
    if files.is_empty() {
        return Err(invalid("an artifact needs at least one file"));
    }
    let mut titles = std::collections::HashSet::new();
    for (title, _) in files {
        if title.is_empty() || title.contains('/') || !titles.insert(title.as_str()) {
            return Err(invalid(format!(
                "file name {title:?} is empty, holds a '/' or is given twice"
            )));
        }
    }
    let registry = Registry::new(reference, credentials.clone(), config.clone())?;
    let config_digest = registry.upload_blob(EMPTY_BLOB).await?;
    let mut layers = Vec::with_capacity(files.len());
    for (title, data) in files {
        let digest = registry.upload_blob(data).await?;
        layers.push(Descriptor {
            media_type: FILE_MEDIA_TYPE.into(),
            digest,
            size: data.len() as u64,
            annotations: BTreeMap::from([(TITLE_ANNOTATION.to_string(), title.clone())]),
        });
    }
    let manifest = ManifestOut {
        schema_version: 2,
        media_type: OCI_MANIFEST,
        artifact_type: ARTIFACT_TYPE,
        config: Descriptor {
            media_type: EMPTY_MEDIA_TYPE.into(),
            digest: config_digest,
            size: EMPTY_BLOB.len() as u64,
            annotations: BTreeMap::new(),
        },
        layers,
    };
    let body = serde_json::to_vec(&manifest)
        .map_err(|e| invalid(format!("serializing the manifest: {e}")))?;
    let digest = sha256_digest(&body);
    let what = format!("manifest {tag} of {}", registry.name());
    let answer = registry
        .call(&Call {
            method: Method::PUT,
            url: registry.url(&format!("manifests/{tag}"))?,
            accept: None,
            content_type: Some(OCI_MANIFEST),
            body: Some(&body),
            limit: MAX_ERROR_BYTES,
            access: Access::Push,
            what: &what,
        })
        .await?;
    if let Some(announced) = answer
        .headers
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        && announced != digest
    {
        return Err(invalid(format!(
            "{what}: the registry stored digest {announced}, expected {digest}"
        )));
    }
    tracing::info!(reference = %reference, %digest, files = files.len(), "published OCI artifact");
    Ok(digest)
}

#[cfg(test)]
// Tests fail loudly on unexpected values; unwrap says exactly that.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn empty_blob_digest_is_the_well_known_one() {
        assert_eq!(
            sha256_digest(EMPTY_BLOB),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
