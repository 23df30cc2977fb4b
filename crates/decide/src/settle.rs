//! How an ended reconcile lands on the status, and when the provider is looked at again.

use std::time::Duration;

use capi_operator_api::{
    ProviderStatus,
    conditions::{PAUSED, PROVIDER_INSTALLED, READY, SPEC_TRANSLATED},
};

use super::{
    conditions::{self, Desired},
    readiness, reason,
};

/// Ready reasons that a look at the pods may change without any watched object changing.
const UNREADY_RECHECKED: &[&str] = &[
    reason::NOT_AVAILABLE,
    reason::MANAGER_CRASH_LOOPING,
    reason::MANAGER_IMAGE_UNAVAILABLE,
];

/// How soon an installed provider that is not Ready looks at its pods again: pods are not
/// watched (they carry none of the operator's labels), so a crash loop would otherwise be seen
/// only at the next resync. Later looks back off (see [`readiness::Rechecks`]).
pub const READINESS_RECHECK: Duration = readiness::RECHECK_FIRST;

/// When an installed provider is looked at again: soon while its pods may change its
/// readiness, at the configuration retry while an unpause is refused (it depends on other
/// providers' upgrades), at the resync otherwise.
pub fn healthy_requeue(
    status: &ProviderStatus,
    resync: Duration,
    config_retry: Duration,
) -> Duration {
    let refused = status
        .condition(PAUSED)
        .is_some_and(|c| c.reason == reason::UNPAUSE_REFUSED);
    if unready_rechecked(status) {
        READINESS_RECHECK.min(resync)
    } else if refused {
        config_retry
    } else {
        resync
    }
}

/// Whether the provider is not Ready for a reason a look at its pods may change.
pub fn unready_rechecked(status: &ProviderStatus) -> bool {
    status
        .condition(READY)
        .is_some_and(|c| c.status != "True" && UNREADY_RECHECKED.contains(&c.reason.as_str()))
}

/// Before the first install a failed preflight also means "not installed"; once installed, the
/// install condition keeps describing what runs.
pub fn mark_not_installed_unless_installed(status: &mut ProviderStatus, generation: Option<i64>) {
    if status.installed_version.is_none() && status.condition(PROVIDER_INSTALLED).is_none() {
        conditions::set(
            &mut status.conditions,
            &Desired::failed(
                PROVIDER_INSTALLED,
                reason::PREFLIGHT_CHECK_FAILED,
                "waiting for the preflight checks to pass",
            ),
            generation,
        );
    }
}

/// SpecTranslated True for a v1alpha2 object whose spec translated, naming what was left out.
pub fn translation(ignored: &[String]) -> Desired {
    if ignored.is_empty() {
        return Desired::ok(
            SPEC_TRANSLATED,
            reason::TRANSLATED,
            "every setting has its counterpart in this operator",
        );
    }
    Desired::ok(
        SPEC_TRANSLATED,
        reason::SETTINGS_IGNORED,
        format!(
            "left out, as cluster-api-operator ignored them too: {}",
            ignored.join("; ")
        ),
    )
}

/// First delay of the transient-failure back-off.
const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest delay of the transient-failure back-off, jitter included.
const BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Relative spread of the jitter around the doubled delay (±10%).
const BACKOFF_JITTER: f64 = 0.1;

/// Delay before retrying after the `failures`-th consecutive transient failure: 1 s doubling
/// per failure, jittered by ±10% so that providers failing together do not retry in lockstep,
/// and never longer than 5 minutes (at the cap the delay is 270–300 s). `jitter` is a uniform
/// sample from `[0, 1]` (0 gives −10%, 1 gives +10%); keeping it a parameter makes the delay
/// a pure function that tests can pin.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    // 2^9 s already exceeds the cap, so larger exponents need not (and must not, for
    // overflow) be computed.
    let exponent = failures.saturating_sub(1).min(9);
    let doubled = BACKOFF_BASE
        .saturating_mul(1u32 << exponent)
        .min(BACKOFF_CAP);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let factor = 1.0 - BACKOFF_JITTER + 2.0 * BACKOFF_JITTER * jitter;
    doubled.mul_f64(factor).min(BACKOFF_CAP)
}

/// A uniform sample from `[0, 1)` for the back-off jitter (not cryptographic: it only spreads
/// retries).
pub fn jitter_sample() -> f64 {
    fastrand::f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_and_caps_at_five_minutes_with_jitter() {
        // (failures, un-jittered delay in seconds)
        let table: &[(u32, f64)] = &[
            (0, 1.0),
            (1, 1.0),
            (2, 2.0),
            (3, 4.0),
            (9, 256.0),
            (10, 300.0),
            (20, 300.0),
            (u32::MAX, 300.0),
        ];
        for &(failures, base) in table {
            let low = backoff_delay(failures, 0.0).as_secs_f64();
            let mid = backoff_delay(failures, 0.5).as_secs_f64();
            let high = backoff_delay(failures, 1.0).as_secs_f64();
            assert!((mid - base).abs() < 1e-6, "{failures}: {mid} != {base}");
            assert!(
                (low - base * 0.9).abs() < 1e-6,
                "{failures}: lowest {low} is not {base} - 10%"
            );
            let expected_high = (base * 1.1).min(300.0);
            assert!(
                (high - expected_high).abs() < 1e-6,
                "{failures}: highest {high} is not {expected_high}"
            );
            assert!(
                high <= 300.0,
                "{failures}: {high} s exceeds the 5 minute cap"
            );
        }
        // The cap is reached, not merely approached.
        assert_eq!(backoff_delay(10, 1.0), Duration::from_secs(300));
        // Out-of-range jitter samples are clamped, never widen the spread.
        assert_eq!(backoff_delay(10, 7.0), Duration::from_secs(300));
        assert_eq!(backoff_delay(1, -3.0), backoff_delay(1, 0.0));
        assert_eq!(backoff_delay(2, f64::NAN), Duration::from_secs(2));
    }

    #[test]
    fn installed_providers_are_looked_at_again_by_what_can_change() {
        let (config_retry, resync) = (Duration::from_secs(60), Duration::from_secs(1800));
        let cond = |type_: &'static str, status: &str, reason: &str| {
            if status == "True" {
                Desired::ok(type_, reason, "")
            } else {
                Desired::failed(type_, reason, "")
            }
        };
        // (conditions, expected delay)
        let cases = [
            (vec![cond(READY, "True", reason::AVAILABLE)], resync),
            (
                vec![cond(READY, "False", reason::MANAGER_CRASH_LOOPING)],
                READINESS_RECHECK,
            ),
            (
                vec![cond(READY, "False", reason::NOT_AVAILABLE)],
                READINESS_RECHECK,
            ),
            (vec![cond(READY, "False", reason::PAUSED)], resync),
            (
                vec![
                    cond(READY, "False", reason::PAUSED),
                    cond(PAUSED, "True", reason::UNPAUSE_REFUSED),
                ],
                config_retry,
            ),
        ];
        for (desired, want) in cases {
            let mut status = ProviderStatus::default();
            for d in &desired {
                conditions::set(&mut status.conditions, d, None);
            }
            assert_eq!(
                healthy_requeue(&status, resync, config_retry),
                want,
                "{:?}",
                status.conditions
            );
        }
    }

    #[test]
    fn jitter_samples_are_in_the_unit_interval() {
        for _ in 0..1000 {
            let j = jitter_sample();
            assert!((0.0..=1.0).contains(&j), "{j}");
        }
    }
}
