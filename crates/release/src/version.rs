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
}
