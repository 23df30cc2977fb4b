//! The specification's air-gapped layout: one ConfigMap per version, selected by label, with keys
//! `components` and `metadata`. The version comes from the label
//! `provider.cluster.x-k8s.io/version`, else from the ConfigMap's name. Components larger than
//! 1 MiB may be gzip-compressed in `binaryData.components` (annotation
//! `provider.cluster.x-k8s.io/compressed: "true"`). The controller implements
//! [`ConfigMapReader`], so this module needs no Kubernetes client.

use std::{collections::BTreeMap, future::Future, io::Read};

use capi_operator_api::{
    CONFIGMAP_COMPRESSED_ANNOTATION, CONFIGMAP_VERSION_LABEL, note::found_note,
};

use super::{MAX_FILE_BYTES, ReleaseSource, SourceError};

/// The parts of a ConfigMap the source reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigMapData {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Text data.
    pub data: BTreeMap<String, String>,
    /// Binary data (already base64-decoded).
    pub binary_data: BTreeMap<String, Vec<u8>>,
}

/// Lists the ConfigMaps a fetchConfig.selector selects (implemented by the controller).
pub trait ConfigMapReader: Send + Sync {
    /// The selected ConfigMaps of the provider's namespace. May be a moment old (a reader can
    /// answer from a cache): the source asks [`ConfigMapReader::list_fresh`] before it
    /// concludes that a version is missing.
    fn list(&self) -> impl Future<Output = Result<Vec<ConfigMapData>, SourceError>> + Send;

    /// The selected ConfigMaps as they are now, for decisions a stale answer would make
    /// wrongly (a version reported missing, the latest version written into spec.version).
    fn list_fresh(&self) -> impl Future<Output = Result<Vec<ConfigMapData>, SourceError>> + Send {
        self.list()
    }
}

/// Releases from selected ConfigMaps.
#[derive(Debug, Clone)]
pub struct ConfigMapSource<R> {
    reader: R,
}

impl<R: ConfigMapReader> ConfigMapSource<R> {
    /// A source over `reader`.
    pub fn new(reader: R) -> Self {
        ConfigMapSource { reader }
    }

    /// The ConfigMaps by the version they hold; `fresh` asks for the current state rather
    /// than a possibly older cached one.
    async fn by_version(
        &self,
        fresh: bool,
    ) -> Result<BTreeMap<String, Vec<ConfigMapData>>, SourceError> {
        let list = if fresh {
            self.reader.list_fresh().await?
        } else {
            self.reader.list().await?
        };
        let mut out: BTreeMap<String, Vec<ConfigMapData>> = BTreeMap::new();
        for cm in list {
            out.entry(version_of(&cm)).or_default().push(cm);
        }
        Ok(out)
    }
}

/// The parts of a Kubernetes ConfigMap the source reads.
pub fn from_configmap(cm: &k8s_openapi::api::core::v1::ConfigMap) -> ConfigMapData {
    ConfigMapData {
        name: cm.metadata.name.clone().unwrap_or_default(),
        labels: cm.metadata.labels.clone().unwrap_or_default(),
        annotations: cm.metadata.annotations.clone().unwrap_or_default(),
        data: cm.data.clone().unwrap_or_default(),
        binary_data: cm
            .binary_data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
    }
}

/// A label selector in the API's query form (`k=v,k2 in (a,b),!k3`), for list calls.
/// Unknown operators select nothing (an impossible pair of requirements).
pub fn selector_query(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or(&[]).join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            _ => format!("{0},!{0}", e.key),
        });
    }
    parts.join(",")
}

/// The version a ConfigMap holds.
pub fn version_of(cm: &ConfigMapData) -> String {
    cm.labels
        .get(CONFIGMAP_VERSION_LABEL)
        .cloned()
        .unwrap_or_else(|| cm.name.clone())
}

/// Decompresses gzip data, refusing more than `limit` bytes of output (gzip bombs).
pub fn gunzip_limited(data: &[u8], limit: usize) -> Result<Vec<u8>, SourceError> {
    let mut out = Vec::new();
    let mut reader = flate2::read::GzDecoder::new(data).take(limit as u64 + 1);
    reader.read_to_end(&mut out).map_err(|e| {
        SourceError::Invalid(format!("compressed components are not valid gzip: {e}"))
    })?;
    if out.len() > limit {
        return Err(SourceError::TooLarge {
            what: "decompressed components".into(),
            limit,
        });
    }
    Ok(out)
}

impl<R: ConfigMapReader> ReleaseSource for ConfigMapSource<R> {
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        Ok(self.by_version(true).await?.into_keys().collect())
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        let mut all = self.by_version(false).await?;
        if !all.contains_key(version) {
            // A ConfigMap created a moment ago may not be in a cached answer yet.
            all = self.by_version(true).await?;
        }
        // Two ConfigMaps claiming the version asked for are refused; a duplicate of another
        // version does not concern this fetch.
        let cm = match all.get(version).map(Vec::as_slice) {
            None | Some([]) => {
                return Err(SourceError::NotFound(format!(
                    "a ConfigMap for version {version}"
                )));
            }
            Some([cm]) => cm,
            Some(many) => {
                let names: Vec<&str> = many.iter().map(|c| c.name.as_str()).collect();
                return Err(SourceError::Invalid(format!(
                    "ConfigMaps {} all hold version {version}; keep one",
                    names.join(", ")
                )));
            }
        };
        let key = if file == "metadata.yaml" {
            "metadata"
        } else {
            "components"
        };
        let compressed = cm
            .annotations
            .get(CONFIGMAP_COMPRESSED_ANNOTATION)
            .is_some_and(|v| v == "true");
        let bytes = match (cm.binary_data.get(key), cm.data.get(key)) {
            (Some(b), _) if compressed => gunzip_limited(b, MAX_FILE_BYTES)?,
            (Some(b), _) => b.clone(),
            (None, Some(t)) => t.as_bytes().to_vec(),
            (None, None) => {
                let keys: Vec<String> = cm
                    .data
                    .keys()
                    .chain(cm.binary_data.keys())
                    .cloned()
                    .collect();
                return Err(SourceError::NotFoundAmong {
                    what: format!("key {key:?} in ConfigMap {}", cm.name),
                    found: found_note("it has keys ", &keys, "it has no keys"),
                });
            }
        };
        if bytes.len() > MAX_FILE_BYTES {
            return Err(SourceError::TooLarge {
                what: format!("{key} of ConfigMap {}", cm.name),
                limit: MAX_FILE_BYTES,
            });
        }
        Ok(bytes)
    }

    /// The ConfigMaps the selector matched, each with the version it holds, so a ConfigMap
    /// named or labelled other than the user meant shows up as what it is.
    async fn found_instead(&self, version: &str) -> Option<String> {
        let list = match self.reader.list_fresh().await {
            Ok(list) => list,
            Err(e) => return Some(format!("listing the ConfigMaps failed too: {e}")),
        };
        if list.iter().any(|cm| version_of(cm) == version) {
            return None;
        }
        let shown: Vec<String> = list.iter().map(described).collect();
        let found = found_note(
            "the selector matched ConfigMaps ",
            &shown,
            "the selector matched no ConfigMap in the provider's namespace",
        );
        Some(format!(
            "{found} (a ConfigMap holds the version of its label {CONFIGMAP_VERSION_LABEL}, else of its name)"
        ))
    }
}

/// "name (version v1)" or, without the version label, "name (no version label)".
fn described(cm: &ConfigMapData) -> String {
    match cm.labels.get(CONFIGMAP_VERSION_LABEL) {
        Some(v) => format!("{} (version {v})", cm.name),
        None => format!("{} (no version label)", cm.name),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::fetch_release;

    struct Fixed(Vec<ConfigMapData>);
    impl ConfigMapReader for Fixed {
        async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
            Ok(self.0.clone())
        }
    }

    const META: &str = "releaseSeries:\n- {major: 0, minor: 4, contract: v1beta1}\n";

    fn cm(name: &str, label: Option<&str>, components: &str) -> ConfigMapData {
        let mut c = ConfigMapData {
            name: name.into(),
            ..Default::default()
        };
        if let Some(l) = label {
            c.labels.insert(CONFIGMAP_VERSION_LABEL.into(), l.into());
        }
        c.data.insert("metadata".into(), META.into());
        c.data.insert("components".into(), components.into());
        c
    }

    fn gzip(data: &[u8]) -> Result<Vec<u8>, std::io::Error> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data)?;
        e.finish()
    }

    /// A reader whose cached answer lags: it lacks the newest ConfigMap.
    struct Lagging(Vec<ConfigMapData>);
    impl ConfigMapReader for Lagging {
        async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
            Ok(self.0[..self.0.len() - 1].to_vec())
        }
        async fn list_fresh(&self) -> Result<Vec<ConfigMapData>, SourceError> {
            Ok(self.0.clone())
        }
    }

    #[tokio::test]
    async fn a_stale_answer_never_hides_a_version_or_the_latest()
    -> Result<(), Box<dyn std::error::Error>> {
        let src = ConfigMapSource::new(Lagging(vec![
            cm("v0.4.8", None, "old"),
            cm("v0.4.9", None, "new"),
        ]));
        // Found in the cached answer: no fresh read needed.
        assert_eq!(src.fetch_file("v0.4.8", "components").await?, b"old");
        // Missing from it: looked for again.
        assert_eq!(src.fetch_file("v0.4.9", "components").await?, b"new");
        // The latest version (written into spec.version) comes from a fresh read.
        let r = fetch_release(&src, None, "infrastructure-components.yaml").await?;
        assert_eq!(r.version, "v0.4.9");
        // Absent from both: not found.
        assert!(matches!(
            src.fetch_file("v0.5.0", "components").await,
            Err(SourceError::NotFound(_))
        ));
        Ok(())
    }

    #[tokio::test]
    async fn versions_from_label_or_name_and_latest() -> Result<(), Box<dyn std::error::Error>> {
        let src = ConfigMapSource::new(Fixed(vec![
            cm("v0.4.8", None, "old"),
            cm("azure-latest", Some("v0.4.9"), "new"),
        ]));
        let mut v = src.list_versions().await?;
        v.sort();
        assert_eq!(v, ["v0.4.8", "v0.4.9"]);
        let r = fetch_release(&src, None, "infrastructure-components.yaml").await?;
        assert_eq!(
            (r.version.as_str(), r.components.as_str()),
            ("v0.4.9", "new")
        );
        let r = fetch_release(&src, Some("v0.4.8"), "infrastructure-components.yaml").await?;
        assert_eq!(r.components, "old");
        assert!(matches!(
            fetch_release(&src, Some("v9.0.0"), "x.yaml").await,
            Err(SourceError::NotFoundAmong { .. })
        ));
        Ok(())
    }

    #[tokio::test]
    async fn compressed_components_and_bombs() -> Result<(), Box<dyn std::error::Error>> {
        let mut c = cm("v0.4.9", None, "");
        c.data.remove("components");
        c.binary_data
            .insert("components".into(), gzip(b"kind: X\n")?);
        c.annotations
            .insert(CONFIGMAP_COMPRESSED_ANNOTATION.into(), "true".into());
        let src = ConfigMapSource::new(Fixed(vec![c]));
        assert_eq!(src.fetch_file("v0.4.9", "c.yaml").await?, b"kind: X\n");
        let bomb = gzip(&vec![0u8; 4 * 1024 * 1024])?;
        assert!(matches!(
            gunzip_limited(&bomb, 1024 * 1024),
            Err(SourceError::TooLarge { .. })
        ));
        assert!(matches!(
            gunzip_limited(b"not gzip", 10),
            Err(SourceError::Invalid(_))
        ));
        Ok(())
    }

    #[test]
    fn selector_queries() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            LabelSelector, LabelSelectorRequirement,
        };
        let req = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(
                values
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect(),
            ),
        };
        let s = LabelSelector {
            match_labels: Some(BTreeMap::from([("a".to_string(), "1".to_string())])),
            match_expressions: Some(vec![
                req("b", "In", &["x", "y"]),
                req("c", "DoesNotExist", &[]),
                req("d", "Bogus", &[]),
            ]),
        };
        assert_eq!(selector_query(&s), "a=1,b in (x,y),!c,d,!d");
        assert_eq!(selector_query(&LabelSelector::default()), "");
    }

    #[tokio::test]
    async fn two_configmaps_claiming_one_version_are_refused() {
        let src = ConfigMapSource::new(Fixed(vec![
            cm("a", Some("v1.0.0"), ""),
            cm("b", Some("v1.0.0"), ""),
        ]));
        let err = src.fetch_file("v1.0.0", "metadata.yaml").await;
        assert!(
            matches!(&err, Err(SourceError::Invalid(m)) if m.contains("ConfigMaps a, b all hold version v1.0.0")),
            "{err:?}"
        );
        // Listing still works, and other versions are not affected.
        assert_eq!(
            src.list_versions().await.ok(),
            Some(vec!["v1.0.0".to_string()])
        );
        let src = ConfigMapSource::new(Fixed(vec![
            cm("a", Some("v1.0.0"), ""),
            cm("b", Some("v1.0.0"), ""),
            cm("c", Some("v1.1.0"), ""),
        ]));
        assert!(src.fetch_file("v1.1.0", "metadata.yaml").await.is_ok());
    }

    #[tokio::test]
    async fn a_missing_version_names_the_configmaps_the_selector_matched() {
        let src = ConfigMapSource::new(Fixed(vec![
            cm("gizmo-v0.5.0", None, ""),
            cm("gizmo-old", Some("v0.4.0"), ""),
        ]));
        let err = fetch_release(&src, Some("v0.5.0"), "c.yaml").await;
        let Err(e @ SourceError::NotFoundAmong { .. }) = err else {
            panic!("{err:?}");
        };
        let m = e.to_string();
        assert!(
            m.starts_with("a ConfigMap for version v0.5.0 not found; "),
            "{m}"
        );
        assert!(m.contains("gizmo-v0.5.0 (no version label)"), "{m}");
        assert!(m.contains("gizmo-old (version v0.4.0)"), "{m}");
        assert!(m.contains(CONFIGMAP_VERSION_LABEL), "{m}");
        // Nothing matched: said so.
        let empty = ConfigMapSource::new(Fixed(vec![]));
        let m = fetch_release(&empty, Some("v0.5.0"), "c.yaml")
            .await
            .err()
            .map(|e| e.to_string());
        assert!(
            m.as_deref()
                .is_some_and(|m| m.contains("matched no ConfigMap")),
            "{m:?}"
        );
        // Hundreds of ConfigMaps: the message stays short, the rest counted.
        let many: Vec<ConfigMapData> = (0..500)
            .map(|i| cm(&format!("other-{i:03}"), None, ""))
            .collect();
        let m = fetch_release(&ConfigMapSource::new(Fixed(many)), Some("v0.5.0"), "c.yaml")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            m.len() <= capi_operator_api::note::NOTE_LIMIT,
            "{} bytes",
            m.len()
        );
        assert!(m.contains("other-000") && m.contains("more"), "{m}");
    }

    #[tokio::test]
    async fn a_missing_key_names_the_keys_present_never_their_values() {
        let mut c = cm("v1.0.0", None, "");
        c.data.remove("components");
        c.data
            .insert("component".into(), "SECRET-LOOKING-VALUE".into());
        let src = ConfigMapSource::new(Fixed(vec![c]));
        let m = src
            .fetch_file("v1.0.0", "c.yaml")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            m.contains("key \"components\" in ConfigMap v1.0.0 not found"),
            "{m}"
        );
        assert!(m.contains("it has keys component, metadata"), "{m}");
        assert!(!m.contains("SECRET-LOOKING-VALUE"), "{m}");
    }
}
