//! Upgrade planning, as `clusterctl upgrade plan` reasons: the versions a provider's source
//! offers, the contract of each (from the metadata.yaml of the newest release, which lists
//! every series), and for each contract the newest release a provider can move to.
//! Pre-releases are never upgrade targets.

use std::collections::BTreeMap;

use semver::Version;

use capi_release::version;

use crate::metadata::Metadata;

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The current version is not a semantic version.
    #[error("the current version {0:?} is not a semantic version")]
    BadVersion(String),
}

/// What a provider can be upgraded to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderPlan {
    /// The version installed now.
    pub current: String,
    /// The contract of the current version, if the metadata knows its series.
    pub current_contract: Option<String>,
    /// For each contract, the newest release (no pre-release) at or above the current version
    /// following it.
    pub by_contract: BTreeMap<String, String>,
    /// The newest release (no pre-release) and its contract, if any.
    pub latest: Option<(String, String)>,
}

impl ProviderPlan {
    /// The newest release of the current contract, when it is newer than the current version.
    pub fn next_in_contract(&self) -> Option<&str> {
        let c = self.current_contract.as_deref()?;
        self.target(c)
    }

    /// The release to move to for `contract`, when it is newer than the current version.
    pub fn target(&self, contract: &str) -> Option<&str> {
        let t = self.by_contract.get(contract)?;
        let newer = match (version::parse(t), version::parse(&self.current)) {
            (Some(t), Some(c)) => t > c,
            _ => false,
        };
        newer.then_some(t.as_str())
    }

    /// Whether some release follows `contract` (the current one counts).
    pub fn offers(&self, contract: &str) -> bool {
        self.by_contract.contains_key(contract)
    }
}

/// The tag among `tags` with the highest version, pre-releases included: the release whose
/// metadata.yaml describes every series.
pub fn newest_tag(tags: &[String]) -> Option<&String> {
    tags.iter()
        .filter_map(|t| version::parse(t).map(|v| (v, t)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t)
}

/// Plans the upgrade of a provider at `current` (contract `current_contract` when its status
/// reports one) among `tags`, with `metadata` read from the newest release.
pub fn plan(
    current: &str,
    current_contract: Option<&str>,
    tags: &[String],
    metadata: &Metadata,
) -> Result<ProviderPlan, PlanError> {
    let cur = version::parse(current).ok_or_else(|| PlanError::BadVersion(current.into()))?;
    let current_contract = current_contract
        .map(str::to_string)
        .or_else(|| metadata.contract_for(current).ok().map(str::to_string));
    let mut releases: Vec<(Version, &String, String)> = tags
        .iter()
        .filter_map(|t| {
            let v = version::parse(t)?;
            if !v.pre.is_empty() {
                return None;
            }
            let c = metadata.series_for(&v)?.contract.clone();
            Some((v, t, c))
        })
        .collect();
    releases.sort_by(|a, b| a.0.cmp(&b.0));
    let mut by_contract = BTreeMap::new();
    for (v, t, c) in &releases {
        if *v >= cur {
            by_contract.insert(c.clone(), (*t).clone());
        }
    }
    // The current version counts for its own contract even when the source no longer has it.
    if let Some(c) = &current_contract {
        by_contract
            .entry(c.clone())
            .or_insert_with(|| current.to_string());
    }
    let latest = releases.last().map(|(_, t, c)| ((*t).clone(), c.clone()));
    Ok(ProviderPlan {
        current: current.to_string(),
        current_contract,
        by_contract,
        latest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(std::string::ToString::to_string).collect()
    }

    const META: &str = "releaseSeries:\n- {major: 1, minor: 10, contract: v1beta1}\n- {major: 1, minor: 11, contract: v1beta2}\n- {major: 1, minor: 12, contract: v1beta2}\n- {major: 1, minor: 13, contract: v1beta2}\n";

    #[test]
    fn next_within_the_contract_and_latest() -> Result<(), Box<dyn std::error::Error>> {
        let m = Metadata::parse(META)?;
        let t = tags(&[
            "v1.10.0",
            "v1.10.3",
            "v1.11.0",
            "v1.12.1",
            "v1.12.0",
            "v1.13.0-rc.0",
            "v1.9.9",
        ]);
        assert_eq!(newest_tag(&t).map(String::as_str), Some("v1.13.0-rc.0"));
        let p = plan("v1.10.0", None, &t, &m)?;
        assert_eq!(p.current_contract.as_deref(), Some("v1beta1"));
        assert_eq!(p.next_in_contract(), Some("v1.10.3"));
        assert_eq!(p.target("v1beta2"), Some("v1.12.1"));
        assert_eq!(
            p.latest,
            Some(("v1.12.1".to_string(), "v1beta2".to_string()))
        );
        // Up to date within its contract.
        let p = plan("v1.12.1", Some("v1beta2"), &t, &m)?;
        assert_eq!(p.next_in_contract(), None);
        assert!(p.offers("v1beta2") && !p.offers("v1beta1"));
        assert!(plan("latest", None, &t, &m).is_err());
        Ok(())
    }

    #[test]
    fn sample_releases_change_contract_between_minors() -> Result<(), Box<dyn std::error::Error>> {
        let m = Metadata::parse(
            "releaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n- {major: 0, minor: 2, contract: v1beta2}\n",
        )?;
        let p = plan("v0.1.0", Some("v1beta1"), &tags(&["v0.1.0", "v0.2.0"]), &m)?;
        assert_eq!(p.next_in_contract(), None);
        assert_eq!(p.target("v1beta2"), Some("v0.2.0"));
        assert_eq!(p.target("v1beta1"), None);
        assert!(p.offers("v1beta1"));
        Ok(())
    }
}
