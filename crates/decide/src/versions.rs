//! The newer releases a provider's source offers: when to ask the source again, and what the
//! status then says (`status.availableVersions`).

use std::time::Duration;

use capi_operator_api::AvailableVersions;
use capi_release::version::Newer;
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};

/// Whether the source is asked in this pass: never when `every` is zero (the check is off),
/// else when it was never asked for the `installed` version, or last asked `every` ago or more.
pub fn due(
    last: Option<&AvailableVersions>,
    installed: &str,
    now: Timestamp,
    every: Duration,
) -> bool {
    if every.is_zero() {
        return false;
    }
    let Some(last) = last.filter(|l| l.installed == installed) else {
        return true;
    };
    let Some(Time(checked)) = &last.checked_time else {
        return true;
    };
    now.duration_since(*checked).unsigned_abs().ge(&every)
}

/// What the status says after a check that found `newer` (the time a newer patch was first
/// seen is kept while it is the same patch).
pub fn found(
    last: Option<&AvailableVersions>,
    installed: &str,
    newer: Newer,
    now: Timestamp,
) -> AvailableVersions {
    let same_patch = last.filter(|l| {
        l.installed == installed && l.newest_patch.is_some() && l.newest_patch == newer.patch
    });
    let patch_since = match same_patch {
        Some(l) => l.patch_since.clone(),
        None => newer.patch.as_ref().map(|_| seconds(now)),
    };
    AvailableVersions {
        installed: installed.to_string(),
        newest_patch: newer.patch,
        newest_in_contract: newer.in_contract,
        newest: newer.newest,
        patch_since,
        checked_time: Some(seconds(now)),
        message: None,
    }
}

/// What the status says after a check that failed with `message`: what the last successful
/// check found for the same installed version stays, with why this one failed.
pub fn failed(
    last: Option<&AvailableVersions>,
    installed: &str,
    message: String,
    now: Timestamp,
) -> AvailableVersions {
    let kept = last.filter(|l| l.installed == installed).cloned();
    AvailableVersions {
        installed: installed.to_string(),
        checked_time: Some(seconds(now)),
        message: Some(message),
        ..kept.unwrap_or_default()
    }
}

/// Whether a newer patch has been offered for `grace` or longer at `now`.
pub fn patch_overdue(available: &AvailableVersions, now: Timestamp, grace: Duration) -> bool {
    match (&available.newest_patch, &available.patch_since) {
        (Some(_), Some(Time(since))) => now.duration_since(*since).unsigned_abs() >= grace,
        _ => false,
    }
}

/// In whole seconds, as the API server stores a `metav1.Time`.
fn seconds(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn newer(patch: Option<&str>) -> Newer {
        Newer {
            patch: patch.map(str::to_string),
            in_contract: Some("v1.13.0".into()),
            newest: Some("v2.0.0".into()),
        }
    }

    #[test]
    fn asked_again_after_the_interval_or_another_install() {
        let hour = Duration::from_secs(3600);
        assert!(due(None, "v1.12.0", at(0), hour));
        assert!(!due(None, "v1.12.0", at(0), Duration::ZERO), "off");
        let last = found(None, "v1.12.0", newer(None), at(0));
        assert!(!due(Some(&last), "v1.12.0", at(3599), hour));
        assert!(due(Some(&last), "v1.12.0", at(3600), hour));
        assert!(due(Some(&last), "v1.12.1", at(10), hour), "upgraded");
    }

    #[test]
    fn a_patch_keeps_the_time_it_was_first_seen() {
        let first = found(None, "v1.12.0", newer(Some("v1.12.1")), at(0));
        assert_eq!(first.patch_since, Some(seconds(at(0))));
        let again = found(Some(&first), "v1.12.0", newer(Some("v1.12.1")), at(500));
        assert_eq!(again.patch_since, Some(seconds(at(0))));
        assert_eq!(again.checked_time, Some(seconds(at(500))));
        let other = found(Some(&again), "v1.12.0", newer(Some("v1.12.2")), at(900));
        assert_eq!(other.patch_since, Some(seconds(at(900))));
        let none = found(Some(&other), "v1.12.0", newer(None), at(999));
        assert_eq!(none.patch_since, None);
        let day = Duration::from_secs(86400);
        assert!(!patch_overdue(&other, at(900 + 86399), day));
        assert!(patch_overdue(&other, at(900 + 86400), day));
        assert!(!patch_overdue(&none, at(900 + 86400 * 9), day));
    }

    #[test]
    fn a_failed_check_keeps_what_the_last_one_found_and_says_why() {
        let last = found(None, "v1.12.0", newer(Some("v1.12.1")), at(0));
        let f = failed(Some(&last), "v1.12.0", "rate limited".into(), at(60));
        assert_eq!(f.newest_patch.as_deref(), Some("v1.12.1"));
        assert_eq!(f.patch_since, last.patch_since);
        assert_eq!(f.message.as_deref(), Some("rate limited"));
        assert_eq!(f.checked_time, Some(seconds(at(60))));
        // Found for another installed version: nothing of it is kept.
        let f = failed(Some(&last), "v1.13.0", "down".into(), at(60));
        assert_eq!(f.newest_patch, None);
        assert_eq!(f.installed, "v1.13.0");
    }
}
