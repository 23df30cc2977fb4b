//! A release's metadata.yaml (`clusterctl.cluster.x-k8s.io/v1alpha3`, kind `Metadata` or none):
//! which Cluster API contract each release series abides by.

use semver::Version;
use serde::Deserialize;

/// Errors reading metadata.yaml or looking a version up in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// Not valid YAML, or not the Metadata shape.
    #[error("invalid metadata.yaml: {0}")]
    Invalid(String),
    /// The version's major.minor has no release series.
    #[error("version {version} does not match any release series in metadata.yaml; {found}")]
    NoSeries {
        /// The version looked up.
        version: String,
        /// The series metadata.yaml has (a short note).
        found: String,
    },
}

/// One release series: every `major.minor.*` release abides by `contract`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReleaseSeries {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Cluster API contract, e.g. `v1beta2`.
    pub contract: String,
}

/// The parsed metadata.yaml.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// apiVersion, when present.
    #[serde(default)]
    pub api_version: Option<String>,
    /// kind, when present.
    #[serde(default)]
    pub kind: Option<String>,
    /// The release series.
    #[serde(default)]
    pub release_series: Vec<ReleaseSeries>,
}

const API_VERSION: &str = "clusterctl.cluster.x-k8s.io/v1alpha3";

impl Metadata {
    /// Parses metadata.yaml text. apiVersion must be clusterctl's when present, kind `Metadata`
    /// when present, and there must be at least one release series.
    pub fn parse(text: &str) -> Result<Metadata, MetadataError> {
        let docs = capi_yaml::parse_documents(text, &capi_yaml::Limits::default())
            .map_err(|e| MetadataError::Invalid(e.to_string()))?;
        if docs.is_empty() {
            return Err(MetadataError::Invalid(
                "it is empty (no release series)".into(),
            ));
        }
        let [doc] = docs.as_slice() else {
            return Err(MetadataError::Invalid(format!(
                "expected one YAML document, found {}",
                docs.len()
            )));
        };
        let m: Metadata = serde_json::from_value(doc.clone())
            .map_err(|e| MetadataError::Invalid(e.to_string()))?;
        if let Some(a) = &m.api_version
            && a != API_VERSION
        {
            return Err(MetadataError::Invalid(format!(
                "apiVersion {a:?} is not {API_VERSION}"
            )));
        }
        if let Some(k) = &m.kind
            && k != "Metadata"
        {
            return Err(MetadataError::Invalid(format!(
                "kind {k:?} is not Metadata"
            )));
        }
        if m.release_series.is_empty() {
            return Err(MetadataError::Invalid("no releaseSeries".into()));
        }
        Ok(m)
    }

    /// The release series of `version` (by major.minor).
    pub fn series_for(&self, version: &Version) -> Option<&ReleaseSeries> {
        self.release_series
            .iter()
            .find(|s| s.major == version.major && s.minor == version.minor)
    }

    /// The contract `version` abides by.
    pub fn contract_for(&self, version: &str) -> Result<&str, MetadataError> {
        capi_release::version::parse(version)
            .and_then(|v| self.series_for(&v))
            .map(|s| s.contract.as_str())
            .ok_or_else(|| MetadataError::NoSeries {
                version: version.to_string(),
                found: self.series_note(),
            })
    }

    /// "it has series 1.0 (v1beta1), 1.1 (v1beta1)": what a version without a series could
    /// have matched.
    fn series_note(&self) -> String {
        let series: Vec<String> = self
            .release_series
            .iter()
            .map(|s| format!("{}.{} ({})", s.major, s.minor, s.contract))
            .collect();
        capi_operator_api::note::found_note("it has series ", &series, "it has no series")
    }

    /// The newest (major, minor) series abiding by `contract`.
    pub fn newest_series_for_contract(&self, contract: &str) -> Option<&ReleaseSeries> {
        self.release_series
            .iter()
            .filter(|s| s.contract == contract)
            .max_by_key(|s| (s.major, s.minor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 2, minor: 0, contract: v1beta2}\n- {major: 1, minor: 1, contract: v1beta1}\n- {major: 1, minor: 0, contract: v1beta1}\n";

    #[test]
    fn contracts_by_series() -> Result<(), MetadataError> {
        let m = Metadata::parse(SAMPLE)?;
        assert_eq!(m.contract_for("v2.0.3")?, "v1beta2");
        assert_eq!(m.contract_for("v1.1.0")?, "v1beta1");
        assert_eq!(
            m.contract_for("v3.0.0"),
            Err(MetadataError::NoSeries {
                version: "v3.0.0".into(),
                found: "it has series 2.0 (v1beta2), 1.1 (v1beta1), 1.0 (v1beta1)".into()
            })
        );
        // The message shows which series there are.
        let message = m.contract_for("v3.0.0").err().map(|e| e.to_string());
        assert_eq!(
            message.as_deref(),
            Some(
                "version v3.0.0 does not match any release series in metadata.yaml; it has series 2.0 (v1beta2), 1.1 (v1beta1), 1.0 (v1beta1)"
            )
        );
        assert_eq!(
            m.newest_series_for_contract("v1beta1")
                .map(|s| (s.major, s.minor)),
            Some((1, 1))
        );
        Ok(())
    }

    #[test]
    fn kind_may_be_absent_but_not_wrong() {
        assert!(
            Metadata::parse("releaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n").is_ok()
        );
        assert!(matches!(
            Metadata::parse("kind: Other\nreleaseSeries:\n- {major: 0, minor: 1, contract: x}\n"),
            Err(MetadataError::Invalid(_))
        ));
        assert!(matches!(
            Metadata::parse("releaseSeries: []\n"),
            Err(MetadataError::Invalid(_))
        ));
        assert!(matches!(
            Metadata::parse("{{{"),
            Err(MetadataError::Invalid(_))
        ));
        assert!(matches!(
            Metadata::parse(""),
            Err(MetadataError::Invalid(_))
        ));
    }

    #[test]
    fn real_releases_map_1_11_and_1_12_to_v1beta2() -> Result<(), Box<dyn std::error::Error>> {
        let releases = capi_test_support::releases()?;
        for label in ["cluster-api", "bootstrap-kubeadm", "control-plane-kubeadm"] {
            for v in ["v1.11.0", "v1.12.0"] {
                let path = releases.join(label).join(v).join("metadata.yaml");
                let m = Metadata::parse(&std::fs::read_to_string(&path)?)?;
                assert_eq!(m.contract_for(v)?, "v1beta2", "{}", path.display());
                assert_eq!(m.contract_for("v1.10.0")?, "v1beta1");
            }
        }
        Ok(())
    }
}
