//! Writing releases in the specification's air-gapped layout: one ConfigMap per version in the
//! provider's namespace, keys `metadata` and `components`, the version in the label
//! `provider.cluster.x-k8s.io/version`, components gzip-compressed into `binaryData` (annotation
//! `provider.cluster.x-k8s.io/compressed: "true"`) when the release is larger than 1 MiB. The
//! labels name the provider, so `fetchConfig.selector` can pick its ConfigMaps. This is the
//! inverse of [`crate::configmap`].

use std::{collections::BTreeMap, io::Write};

use capi_operator_api::{CONFIGMAP_COMPRESSED_ANNOTATION, CONFIGMAP_VERSION_LABEL, ProviderType};
use k8s_openapi::{
    ByteString,
    api::core::v1::ConfigMap,
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};

use capi_release::Release;

use crate::SourceError;

/// Label naming the provider a release ConfigMap belongs to.
pub const NAME_LABEL: &str = "provider.cluster.x-k8s.io/name";
/// Label naming the provider type (`core`, `infrastructure`, ...) of a release ConfigMap.
pub const TYPE_LABEL: &str = "provider.cluster.x-k8s.io/type";
/// Releases larger than this (metadata + components, bytes) are stored compressed.
pub const COMPRESS_ABOVE: usize = 1024 * 1024;

/// The labels that identify the releases of the provider of type `t` named `name`.
pub fn labels(t: ProviderType, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), name.to_string()),
        (TYPE_LABEL.to_string(), t.word().to_string()),
    ])
}

/// The `fetchConfig.selector` that picks the ConfigMaps [`release_configmap`] writes.
pub fn selector(t: ProviderType, name: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(t, name)),
        match_expressions: None,
    }
}

/// Name of the ConfigMap holding `version` of the provider (`release-<type>-<name>-<version>`,
/// made DNS-safe). It never equals the operator's release cache entry of the same version.
pub fn configmap_name(t: ProviderType, name: &str, version: &str) -> String {
    dns_name(&format!("release-{}-{name}-{version}", t.word()))
}

/// `raw` as a DNS-1123 subdomain, the form object names take: lower case, other characters
/// (`+`, `_`, ...) replaced by `-`, at most 253 characters, no trailing `-` or `.`.
pub fn dns_name(raw: &str) -> String {
    let mut out: String = raw
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    out.truncate(253);
    out.trim_end_matches(['-', '.']).to_string()
}

fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && v.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && v.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

/// The air-gapped layout of one release: `data` (metadata, and components up to 1 MiB),
/// `binaryData` (gzip-compressed components above 1 MiB) and the annotations that say so.
/// Both the ConfigMaps `preload` writes and the operator's release cache use it.
#[allow(clippy::type_complexity)]
pub fn release_data(
    release: &Release,
) -> Result<
    (
        BTreeMap<String, String>,
        BTreeMap<String, ByteString>,
        BTreeMap<String, String>,
    ),
    SourceError,
> {
    let mut data = BTreeMap::from([("metadata".to_string(), release.metadata.clone())]);
    let mut binary = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    if release.metadata.len() + release.components.len() > COMPRESS_ABOVE {
        let compress = |e: std::io::Error| {
            SourceError::Invalid(format!("compressing release {}: {e}", release.version))
        };
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(release.components.as_bytes())
            .map_err(compress)?;
        binary.insert(
            "components".to_string(),
            ByteString(gz.finish().map_err(compress)?),
        );
        annotations.insert(
            CONFIGMAP_COMPRESSED_ANNOTATION.to_string(),
            "true".to_string(),
        );
    } else {
        data.insert("components".to_string(), release.components.clone());
    }
    Ok((data, binary, annotations))
}

/// The ConfigMap holding `release` of the provider of type `t` named `name` in `namespace`.
pub fn release_configmap(
    t: ProviderType,
    name: &str,
    namespace: &str,
    release: &Release,
) -> Result<ConfigMap, SourceError> {
    if !valid_label_value(&release.version) {
        return Err(SourceError::Invalid(format!(
            "version {:?} cannot be a label value",
            release.version
        )));
    }
    let mut l = labels(t, name);
    l.insert(CONFIGMAP_VERSION_LABEL.to_string(), release.version.clone());
    let (data, binary, annotations) = release_data(release)?;
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(t, name, &release.version)),
            namespace: Some(namespace.to_string()),
            labels: Some(l),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        data: Some(data),
        binary_data: (!binary.is_empty()).then_some(binary),
        ..ConfigMap::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        ReleaseSource,
        configmap::{ConfigMapData, ConfigMapReader, ConfigMapSource, from_configmap},
        fetch_release,
    };

    struct Fixed(Vec<ConfigMapData>);
    impl ConfigMapReader for Fixed {
        async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
            Ok(self.0.clone())
        }
    }

    #[tokio::test]
    async fn written_releases_read_back() -> Result<(), Box<dyn std::error::Error>> {
        let meta = "releaseSeries:\n- {major: 1, minor: 0, contract: v1beta2}\n";
        let small = Release {
            version: "v1.0.0".into(),
            metadata: meta.into(),
            components: "kind: A\n".into(),
        };
        let big = Release {
            version: "v1.0.1".into(),
            metadata: meta.into(),
            components: format!("# {}\nkind: B\n", "x".repeat(2 * COMPRESS_ABOVE)),
        };
        let t = ProviderType::Infrastructure;
        let a = release_configmap(t, "aws", "capa", &small)?;
        let b = release_configmap(t, "aws", "capa", &big)?;
        assert_eq!(
            a.metadata.name.as_deref(),
            Some("release-infrastructure-aws-v1.0.0")
        );
        assert!(a.binary_data.is_none());
        let bin = b.binary_data.as_ref().and_then(|d| d.get("components"));
        assert!(bin.is_some_and(|c| c.0.len() < COMPRESS_ABOVE / 10));
        let src = ConfigMapSource::new(Fixed(vec![from_configmap(&a), from_configmap(&b)]));
        let mut v = src.list_versions().await?;
        v.sort();
        assert_eq!(v, ["v1.0.0", "v1.0.1"]);
        let r = fetch_release(&src, None, "infrastructure-components.yaml").await?;
        assert_eq!(r, big);
        assert_eq!(
            selector(t, "aws")
                .match_labels
                .and_then(|l| l.get(TYPE_LABEL).cloned()),
            Some("infrastructure".to_string())
        );
        assert!(
            release_configmap(
                t,
                "aws",
                "capa",
                &Release {
                    version: "v1.0.0+build/x".into(),
                    ..small
                }
            )
            .is_err()
        );
        Ok(())
    }
}
