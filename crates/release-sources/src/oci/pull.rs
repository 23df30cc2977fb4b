//! Reading from a registry: the tags of a repository, a tag's manifest (descending into an
//! index) and the blobs it lists, each checked against its digest.

use std::collections::BTreeMap;

use reqwest::{Method, header::CONTENT_TYPE};
use serde::{Deserialize, Serialize};

use super::{
    DOCKER_LIST, DOCKER_MANIFEST, DOCKER_SCHEMA1, MANIFEST_ACCEPT, MAX_TAG_PAGES, OCI_INDEX,
    OCI_MANIFEST, SourceError, TITLE_ANNOTATION,
    auth::Access,
    client::{Answer, Call, Registry, origin, sha256_digest},
    invalid,
    reference::parse_digest,
};
use crate::{MAX_LISTING_PAGE_BYTES, http::next_link, listing::Listing};

impl Registry {
    pub(super) async fn list_tags(&self) -> Result<Vec<String>, SourceError> {
        #[derive(Deserialize)]
        struct Tags {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let what = format!("tags of {}", self.name());
        let mut url = self.url("tags/list")?;
        let mut out = Listing::new(what.clone());
        for _ in 0..MAX_TAG_PAGES {
            let mut answer = self
                .call(&Call {
                    method: Method::GET,
                    url: url.clone(),
                    accept: Some("application/json"),
                    content_type: None,
                    body: None,
                    limit: self.config.max_manifest_bytes.min(MAX_LISTING_PAGE_BYTES),
                    access: Access::Pull,
                    what: &what,
                })
                .await?;
            let page: Tags = out
                .parse_page(std::mem::take(&mut answer.body))
                .await?
                .map_err(|e| invalid(format!("{what}: unexpected answer: {e}")))?;
            let tags = page.tags.unwrap_or_default();
            out.expect_entries(tags.len())?;
            for t in tags {
                out.push(t);
            }
            // Registries send relative links; pagination never leaves the registry.
            match next_link(&answer.headers).and_then(|n| answer.url.join(&n).ok()) {
                Some(next) if origin(&next) == origin(&self.base) => url = next,
                Some(_) => {
                    tracing::warn!(registry = %self.reference.registry, "tags pagination pointed to another host; ignored");
                    break;
                }
                None => break,
            }
        }
        Ok(out.into_versions())
    }

    /// The manifest `reference` (tag or digest) names, descending into an index.
    pub(super) async fn manifest(&self, reference: &str) -> Result<Manifest, SourceError> {
        let mut reference = reference.to_string();
        // An index points to manifests, never (usefully) to another index.
        for _ in 0..2 {
            let (answer, what) = self.manifest_answer(&reference).await?;
            let json: ManifestJson = serde_json::from_slice(&answer.body)
                .map_err(|e| invalid(format!("{what}: not a manifest: {e}")))?;
            let header_type = answer
                .headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.split(';').next().unwrap_or_default().trim().to_string());
            let media_type = json.media_type.clone().or(header_type).unwrap_or_default();
            if json.schema_version != Some(2) || media_type.starts_with(DOCKER_SCHEMA1) {
                return Err(invalid(format!(
                    "{what}: only schema version 2 manifests (OCI or Docker) are supported"
                )));
            }
            let is_index = media_type == OCI_INDEX
                || media_type == DOCKER_LIST
                || (media_type.is_empty() && json.manifests.is_some());
            let is_manifest = media_type == OCI_MANIFEST
                || media_type == DOCKER_MANIFEST
                || (media_type.is_empty() && json.layers.is_some());
            if is_index {
                let first = json
                    .manifests
                    .unwrap_or_default()
                    .into_iter()
                    .next()
                    .ok_or_else(|| invalid(format!("{what}: the index lists no manifest")))?;
                parse_digest(&first.digest).map_err(|w| invalid(format!("{what}: {w}")))?;
                reference = first.digest;
                continue;
            }
            if !is_manifest {
                return Err(invalid(format!(
                    "{what}: media type {media_type:?} is not an OCI or Docker image manifest or index"
                )));
            }
            return Ok(Manifest {
                layers: json.layers.unwrap_or_default(),
            });
        }
        Err(invalid(format!(
            "{reference} of {}: an index points to another index",
            self.name()
        )))
    }

    /// The answer to a GET of the manifest `reference` (tag or digest), its content checked
    /// against the digest asked for and the one the registry announces; and what it is, for
    /// messages.
    pub(super) async fn manifest_answer(
        &self,
        reference: &str,
    ) -> Result<(Answer, String), SourceError> {
        let what = if reference.starts_with("sha256:") {
            format!("manifest {reference} of {}", self.name())
        } else {
            format!("tag {reference} of {}", self.name())
        };
        let answer = self
            .call(&Call {
                method: Method::GET,
                url: self.url(&format!("manifests/{reference}"))?,
                accept: Some(MANIFEST_ACCEPT),
                content_type: None,
                body: None,
                limit: self.config.max_manifest_bytes,
                access: Access::Pull,
                what: &what,
            })
            .await?;
        let digest = sha256_digest(&answer.body);
        if reference.starts_with("sha256:") && reference != digest {
            return Err(invalid(format!(
                "{what}: the registry returned content with digest {digest}"
            )));
        }
        if let Some(announced) = answer
            .headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .filter(|d| d.starts_with("sha256:"))
            && announced != digest
        {
            return Err(invalid(format!(
                "{what}: content digest {digest} differs from the announced {announced}"
            )));
        }
        Ok((answer, what))
    }

    pub(super) async fn blob(
        &self,
        layer: &Descriptor,
        what: &str,
    ) -> Result<Vec<u8>, SourceError> {
        parse_digest(&layer.digest).map_err(|w| invalid(format!("{what}: {w}")))?;
        let limit = self.config.http.max_bytes;
        if layer.size > limit as u64 {
            return Err(SourceError::TooLarge {
                what: what.to_string(),
                limit,
            });
        }
        let answer = self
            .call(&Call {
                method: Method::GET,
                url: self.url(&format!("blobs/{}", layer.digest))?,
                accept: Some("*/*"),
                content_type: None,
                body: None,
                limit,
                access: Access::Pull,
                what,
            })
            .await?;
        let digest = sha256_digest(&answer.body);
        if digest != layer.digest {
            return Err(invalid(format!(
                "{what}: the content does not match its digest {} (got {digest})",
                layer.digest
            )));
        }
        Ok(answer.body)
    }
}

/// The parts of a manifest or index the source reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestJson {
    #[serde(default)]
    schema_version: Option<u32>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
}

/// An OCI content descriptor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Descriptor {
    pub(super) media_type: String,
    pub(super) digest: String,
    pub(super) size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) annotations: BTreeMap<String, String>,
}

impl Descriptor {
    pub(super) fn title(&self) -> Option<&str> {
        self.annotations.get(TITLE_ANNOTATION).map(String::as_str)
    }
}

#[derive(Debug)]
pub(super) struct Manifest {
    pub(super) layers: Vec<Descriptor>,
}
