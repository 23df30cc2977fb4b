//! Release versions: parsing "v"-prefixed semantic versions and choosing the latest release the
//! way clusterctl does.

use semver::Version;

/// Parses a release tag such as `v1.12.0` (the "v" is optional, as clusterctl tolerates).
pub fn parse(tag: &str) -> Option<Version> {
    let t = tag.trim();
    Version::parse(t.strip_prefix('v').unwrap_or(t)).ok()
}

/// Candidates for "latest", best first, as clusterctl orders them: releases before
/// pre-releases, then newest first; tags that are not semantic versions are dropped.
/// clusterctl tries the first five in turn and takes the first whose metadata.yaml exists.
pub fn latest_candidates(tags: &[String]) -> Vec<String> {
    let mut parsed: Vec<(Version, &String)> = tags
        .iter()
        .filter_map(|t| parse(t).map(|v| (v, t)))
        .collect();
    parsed.sort_by(|(a, _), (b, _)| {
        a.pre
            .is_empty()
            .cmp(&b.pre.is_empty())
            .then_with(|| a.cmp(b))
            .reverse()
    });
    parsed.dedup_by(|a, b| a.0 == b.0);
    parsed.into_iter().take(5).map(|(_, t)| t.clone()).collect()
}

/// Whether moving from `installed` to `target` lowers the major or minor version (a patch
/// downgrade is allowed, as in cluster-api-operator).
pub fn is_minor_downgrade(installed: &Version, target: &Version) -> bool {
    (target.major, target.minor) < (installed.major, installed.minor)
}

/// The newer releases a source offers beside an installed version (pre-releases left out, as
/// clusterctl's "latest" leaves them out while releases exist).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Newer {
    /// The newest patch of the installed minor.
    pub patch: Option<String>,
    /// The newest release whose contract is the installed one's.
    pub in_contract: Option<String>,
    /// The newest release.
    pub newest: Option<String>,
}

/// What `listed` offers newer than `installed`. `contract_of` gives a release's contract (from
/// a metadata.yaml's release series), `None` where unknown: such a release is never counted as
/// within the contract, though a patch of the installed minor always is.
pub fn newer(
    installed: &str,
    listed: &[String],
    contract: &str,
    contract_of: impl Fn(&Version) -> Option<String>,
) -> Newer {
    let Some(current) = parse(installed) else {
        return Newer::default();
    };
    let mut releases: Vec<(Version, &String)> = listed
        .iter()
        .filter_map(|t| parse(t).map(|v| (v, t)))
        .filter(|(v, _)| v.pre.is_empty() && *v > current)
        .collect();
    releases.sort_by(|a, b| b.0.cmp(&a.0));
    let same_minor = |v: &Version| (v.major, v.minor) == (current.major, current.minor);
    let first = |keep: &dyn Fn(&Version) -> bool| {
        releases
            .iter()
            .find(|(v, _)| keep(v))
            .map(|(_, t)| (*t).clone())
    };
    Newer {
        patch: first(&same_minor),
        in_contract: first(&|v| same_minor(v) || contract_of(v).as_deref() == Some(contract)),
        newest: first(&|_| true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(std::string::ToString::to_string).collect()
    }

    #[test]
    fn releases_come_before_prereleases() {
        let c = latest_candidates(&tags(&[
            "v1.11.0",
            "v1.13.0-rc.1",
            "v1.12.0",
            "not-a-version",
            "v1.12.1",
            "v1.10.3",
            "v1.9.0",
            "v1.8.0",
        ]));
        assert_eq!(
            c,
            tags(&["v1.12.1", "v1.12.0", "v1.11.0", "v1.10.3", "v1.9.0"])
        );
    }

    #[test]
    fn only_prereleases_gives_the_newest_prerelease() {
        let c = latest_candidates(&tags(&["v2.0.0-alpha.1", "v2.0.0-beta.0"]));
        assert_eq!(c[0], "v2.0.0-beta.0");
    }

    #[test]
    fn downgrades() -> Result<(), String> {
        let v = |s: &str| parse(s).ok_or(format!("bad {s}"));
        assert!(is_minor_downgrade(&v("v1.12.0")?, &v("v1.11.9")?));
        assert!(!is_minor_downgrade(&v("v1.12.3")?, &v("v1.12.1")?));
        assert!(!is_minor_downgrade(&v("v1.11.0")?, &v("v1.12.0")?));
        assert!(parse("1.2.3").is_some() && parse("v1.2").is_none());
        Ok(())
    }

    #[test]
    fn newer_releases_by_patch_contract_and_overall() {
        let listed = tags(&[
            "v1.11.9",
            "v1.12.0",
            "v1.12.1",
            "v1.12.3",
            "v1.12.4-rc.0",
            "v1.13.0",
            "v1.13.2",
            "v2.0.0",
            "v2.1.0-beta.1",
            "junk",
        ]);
        // 1.12 and 1.13 are v1beta2, 2.0 is v1beta3.
        let contract = |v: &Version| Some(if v.major == 2 { "v1beta3" } else { "v1beta2" }.into());
        let n = newer("v1.12.1", &listed, "v1beta2", contract);
        assert_eq!(n.patch.as_deref(), Some("v1.12.3"));
        assert_eq!(n.in_contract.as_deref(), Some("v1.13.2"));
        assert_eq!(n.newest.as_deref(), Some("v2.0.0"));
        // At the newest: nothing newer.
        assert_eq!(
            newer("v2.0.0", &listed, "v1beta3", contract),
            Newer::default()
        );
        // Contracts unknown: only the patch counts as within it.
        let n = newer("v1.12.1", &listed, "v1beta2", |_| None);
        assert_eq!(n.in_contract.as_deref(), Some("v1.12.3"));
        // An installed version that is not a semantic version offers nothing to compare.
        assert_eq!(
            newer("main", &listed, "v1beta2", contract),
            Newer::default()
        );
    }
}
