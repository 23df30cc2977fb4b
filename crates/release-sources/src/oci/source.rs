//! The release source over an OCI repository: tags are versions, layers are files.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
};

use capi_operator_api::{ProviderType, note::found_note};

use super::{
    OciConfig, OciCredentials, OciReference, SourceError, client::Registry, invalid,
    pull::Manifest, reference::validate_tag,
};
use crate::ReleaseSource;

/// Releases of one provider from an OCI repository: tags are versions, each tag an artifact
/// whose layers are the release files.
///
/// Manifests are cached per tag (or digest) for the lifetime of the source, so a release's
/// files come from one consistent manifest even if the tag moves meanwhile.
pub struct OciSource {
    registry: Registry,
    provider: Option<(Vec<&'static str>, String)>,
    manifests: Mutex<HashMap<String, Arc<Manifest>>>,
}

impl fmt::Debug for OciSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OciSource")
            .field("registry", &self.registry)
            .field("provider", &self.provider)
            .finish()
    }
}

impl OciSource {
    /// Releases from the repository `reference` names, looking files up by the names asked for
    /// (and the generic `metadata.yaml` / `components.yaml`).
    pub fn new(
        reference: &OciReference,
        credentials: OciCredentials,
        config: OciConfig,
    ) -> Result<OciSource, SourceError> {
        Ok(OciSource {
            registry: Registry::new(reference, credentials, config)?,
            provider: None,
            manifests: Mutex::new(HashMap::new()),
        })
    }

    /// Releases of the provider of type `provider_type` named `name`: files are looked up with
    /// cluster-api-operator's priorities (see [`OciSource::file_candidates`]).
    pub fn for_provider(
        reference: &OciReference,
        provider_type: ProviderType,
        name: &str,
        credentials: OciCredentials,
        config: OciConfig,
    ) -> Result<OciSource, SourceError> {
        let mut words = vec![provider_type.word()];
        // cluster-api-operator spells this type without the dash in file names.
        if provider_type == ProviderType::RuntimeExtension {
            words.push("runtimeextension");
        }
        Ok(OciSource {
            provider: Some((words, name.to_string())),
            ..OciSource::new(reference, credentials, config)?
        })
    }

    /// The reference the source reads.
    pub fn reference(&self) -> &OciReference {
        &self.registry.reference
    }

    /// The layer titles tried, best first, when `file` of `version` is asked for.
    ///
    /// `metadata.yaml`: `<type>-<name>-<version>-metadata.yaml`, then `metadata.yaml`.
    /// A components file (`components.yaml` or `*-components.yaml`):
    /// `<type>-<name>-<version>-components.yaml`, the file asked for, `<type>-components.yaml`,
    /// then `components.yaml`. Any other file: its own name only. The typed names need
    /// [`OciSource::for_provider`].
    pub fn file_candidates(&self, version: &str, file: &str) -> Vec<String> {
        let words: &[&str] = self
            .provider
            .as_ref()
            .map(|(w, _)| w.as_slice())
            .unwrap_or_default();
        let name = self.provider.as_ref().map(|(_, n)| n.as_str());
        let mut out: Vec<String> = Vec::new();
        if file == "metadata.yaml" {
            if let Some(name) = name {
                out.extend(
                    words
                        .iter()
                        .map(|w| format!("{w}-{name}-{version}-metadata.yaml")),
                );
            }
            out.push("metadata.yaml".into());
        } else if file == "components.yaml" || file.ends_with("-components.yaml") {
            if let Some(name) = name {
                out.extend(
                    words
                        .iter()
                        .map(|w| format!("{w}-{name}-{version}-components.yaml")),
                );
            }
            out.push(file.to_string());
            out.extend(words.iter().map(|w| format!("{w}-components.yaml")));
            out.push("components.yaml".into());
        } else {
            out.push(file.to_string());
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|c| seen.insert(c.clone()));
        out
    }

    async fn cached_manifest(&self, reference: &str) -> Result<Arc<Manifest>, SourceError> {
        if let Some(m) = self
            .manifests
            .lock()
            .ok()
            .and_then(|m| m.get(reference).cloned())
        {
            return Ok(m);
        }
        let manifest = Arc::new(self.registry.manifest(reference).await?);
        if let Ok(mut m) = self.manifests.lock() {
            m.insert(reference.to_string(), manifest.clone());
        }
        Ok(manifest)
    }
}

impl ReleaseSource for OciSource {
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        Ok(self
            .registry
            .list_tags()
            .await?
            .into_iter()
            .filter(|t| capi_release::version::parse(t).is_some())
            .collect())
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        let manifest_ref = match &self.reference().digest {
            Some(d) => d.clone(),
            None => {
                validate_tag(version).map_err(|w| {
                    invalid(format!(
                        "version {version:?} cannot be an OCI tag of {}: {w}",
                        self.registry.name()
                    ))
                })?;
                version.to_string()
            }
        };
        let manifest = self.cached_manifest(&manifest_ref).await?;
        let candidates = self.file_candidates(version, file);
        let layer = candidates
            .iter()
            .find_map(|c| {
                manifest
                    .layers
                    .iter()
                    .find(|l| l.title() == Some(c.as_str()))
            })
            .ok_or_else(|| {
                let titles: Vec<String> = manifest
                    .layers
                    .iter()
                    .filter_map(|l| l.title().map(str::to_string))
                    .collect();
                SourceError::NotFoundAmong {
                    what: format!(
                        "{file} (looked for {}) in artifact {}:{manifest_ref}",
                        candidates.join(", "),
                        self.registry.name()
                    ),
                    found: found_note(
                        "the artifact holds ",
                        &titles,
                        "the artifact holds no titled layer",
                    ),
                }
            })?;
        let what = format!(
            "{} of artifact {}:{manifest_ref}",
            layer.title().unwrap_or(file),
            self.registry.name()
        );
        self.registry.blob(layer, &what).await
    }
}

#[cfg(test)]
// Tests fail loudly on unexpected values; unwrap says exactly that.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn file_priorities() {
        let r = OciReference::parse("r/i").unwrap();
        let typed = OciSource::for_provider(
            &r,
            ProviderType::Infrastructure,
            "docker",
            OciCredentials::anonymous(),
            OciConfig::default(),
        )
        .unwrap();
        assert_eq!(
            typed.file_candidates("v1.0.0", "metadata.yaml"),
            [
                "infrastructure-docker-v1.0.0-metadata.yaml",
                "metadata.yaml"
            ]
        );
        assert_eq!(
            typed.file_candidates("v1.0.0", "infrastructure-components.yaml"),
            [
                "infrastructure-docker-v1.0.0-components.yaml",
                "infrastructure-components.yaml",
                "components.yaml"
            ]
        );
        assert_eq!(
            typed.file_candidates("v1.0.0", "custom-components.yaml"),
            [
                "infrastructure-docker-v1.0.0-components.yaml",
                "custom-components.yaml",
                "infrastructure-components.yaml",
                "components.yaml"
            ]
        );
        assert_eq!(
            typed.file_candidates("v1.0.0", "cluster-template.yaml"),
            ["cluster-template.yaml"]
        );
        let rx = OciSource::for_provider(
            &r,
            ProviderType::RuntimeExtension,
            "x",
            OciCredentials::anonymous(),
            OciConfig::default(),
        )
        .unwrap();
        assert_eq!(
            rx.file_candidates("v1", "metadata.yaml"),
            [
                "runtime-extension-x-v1-metadata.yaml",
                "runtimeextension-x-v1-metadata.yaml",
                "metadata.yaml"
            ]
        );
        let plain = OciSource::new(&r, OciCredentials::anonymous(), OciConfig::default()).unwrap();
        assert_eq!(
            plain.file_candidates("v1", "core-components.yaml"),
            ["core-components.yaml", "components.yaml"]
        );
    }
}
