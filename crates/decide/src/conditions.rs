//! `metav1.Condition` bookkeeping for provider status: transition times move only when a
//! condition's status changes, so rewriting the same state is a no-op the reconciler can detect.

use capi_operator_api::{
    conditions::{DELETING, PAUSED, PROVIDER_INSTALLED, PROVIDER_UPGRADED, READY, reason},
    v1alpha2::conditions::reason as go_reason,
};
use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

/// A condition the reconciler wants on the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Condition type.
    pub type_: &'static str,
    /// True or False.
    pub ok: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Desired {
    /// A True condition.
    pub fn ok(type_: &'static str, reason: &str, message: impl Into<String>) -> Desired {
        Desired {
            type_,
            ok: true,
            reason: reason.to_string(),
            message: message.into(),
        }
    }

    /// A False condition.
    pub fn failed(type_: &'static str, reason: &str, message: impl Into<String>) -> Desired {
        Desired {
            type_,
            ok: false,
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

// The apiserver rejects condition messages over 32 KiB; long render errors are cut, not lost
// from logs.
const MAX_MESSAGE: usize = 4096;

fn clip(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// Now, in whole seconds: what the API server stores of a `metav1.Time`. A condition made in
/// memory then equals the one read back, so a pass can tell its own last write from a change.
fn now() -> Time {
    let t = Timestamp::now();
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

/// Sets `want` in `conditions`. Returns whether the condition's status or reason changed (the
/// cases worth an event).
pub fn set(conditions: &mut Vec<Condition>, want: &Desired, generation: Option<i64>) -> bool {
    let status = if want.ok { "True" } else { "False" };
    let message = clip(&want.message);
    match conditions.iter_mut().find(|c| c.type_ == want.type_) {
        Some(c) => {
            let transition = c.status != status;
            let changed = transition || c.reason != want.reason;
            if transition {
                c.last_transition_time = now();
            }
            c.status = status.to_string();
            c.reason.clone_from(&want.reason);
            c.message = message;
            c.observed_generation = generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: want.type_.to_string(),
                status: status.to_string(),
                reason: want.reason.clone(),
                message,
                observed_generation: generation,
                last_transition_time: now(),
            });
            true
        }
    }
}

/// Reasons of states every install or rollout passes through on its way to Ready: waiting for
/// the core provider, the preflight placeholder, Deployments still rolling out (ours and
/// cluster-api-operator's name for it).
const PROGRESS: &[&str] = &[
    reason::WAITING_FOR_CORE,
    reason::PREFLIGHT_CHECK_FAILED,
    reason::NOT_AVAILABLE,
    go_reason::MINIMUM_REPLICAS_UNAVAILABLE,
];

/// Conditions whose turning True is news on its own: the release installed or upgraded, the
/// provider Ready, paused, or being deleted.
const MILESTONES: &[&str] = &[
    PROVIDER_INSTALLED,
    PROVIDER_UPGRADED,
    READY,
    PAUSED,
    DELETING,
];

/// Whether a condition's change from `before` to `now` is worth an event. Events are news for
/// the admin: problems, recoveries from problems and milestones. A state every install passes
/// through (waiting for the core provider, Deployments rolling out) is not, unless it follows
/// a True (a Ready provider losing its Deployments is news); nor is a check passing at its
/// first look (preflight, contract, manager settings), which the conditions show anyway. Each
/// event is a write to the apiserver, so a quiet install also installs faster.
pub fn newsworthy(before: Option<&Condition>, now: &Condition) -> bool {
    if before.is_some_and(|b| b.status == now.status && b.reason == now.reason) {
        return false;
    }
    let progress = |c: &Condition| PROGRESS.contains(&c.reason.as_str());
    let was_true = before.is_some_and(|b| b.status == "True");
    if now.status != "True" {
        return !progress(now) || was_true;
    }
    let recovered = before.is_some_and(|b| b.status != "True" && !progress(b));
    recovered || MILESTONES.contains(&now.type_.as_str())
}

/// Whether an event about `c` is a Warning: a False condition, except Paused turning False
/// (unpaused), and Paused held because unpausing is refused.
pub fn warning(c: &Condition) -> bool {
    if c.type_ == PAUSED {
        return c.reason == reason::UNPAUSE_REFUSED;
    }
    c.status != "True"
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::conditions::{
        CONTRACT_VERIFIED, MANAGER_CONFIGURED, PREFLIGHT_CHECK_PASSED,
    };

    fn cond(type_: &'static str, ok: bool, reason: &str) -> Condition {
        let mut v = Vec::new();
        let d = if ok {
            Desired::ok(type_, reason, "")
        } else {
            Desired::failed(type_, reason, "")
        };
        set(&mut v, &d, None);
        v.remove(0)
    }

    /// A condition in a news table: type, True or not, reason.
    type C = (&'static str, bool, &'static str);

    /// Checks each (before, now, worth an event) of `cases` against [`newsworthy`].
    fn check_news(cases: &[(Option<C>, C, bool)]) {
        for &(before, (t, ok, r), want) in cases {
            let before = before.map(|(t, ok, r)| cond(t, ok, r));
            let now = cond(t, ok, r);
            assert_eq!(
                newsworthy(before.as_ref(), &now),
                want,
                "{before:?} -> {now:?}"
            );
        }
    }

    #[test]
    fn a_plain_install_announces_only_its_milestones() {
        use reason as r;
        check_news(&[
            (
                None,
                (PREFLIGHT_CHECK_PASSED, false, r::WAITING_FOR_CORE),
                false,
            ),
            (
                None,
                (PROVIDER_INSTALLED, false, r::PREFLIGHT_CHECK_FAILED),
                false,
            ),
            (
                Some((PREFLIGHT_CHECK_PASSED, false, r::WAITING_FOR_CORE)),
                (PREFLIGHT_CHECK_PASSED, true, r::PASSED),
                false,
            ),
            (None, (PREFLIGHT_CHECK_PASSED, true, r::PASSED), false),
            (
                None,
                (MANAGER_CONFIGURED, true, r::MANAGER_SETTINGS_APPLIED),
                false,
            ),
            (None, (CONTRACT_VERIFIED, true, r::CONTRACT_OK), false),
            (
                Some((PROVIDER_INSTALLED, false, r::PREFLIGHT_CHECK_FAILED)),
                (PROVIDER_INSTALLED, true, r::INSTALLED),
                true,
            ),
            (None, (READY, false, r::NOT_AVAILABLE), false),
            (
                Some((READY, false, r::NOT_AVAILABLE)),
                (READY, true, r::AVAILABLE),
                true,
            ),
        ]);
    }

    #[test]
    fn problems_and_their_end_are_news() {
        use reason as r;
        check_news(&[
            (None, (CONTRACT_VERIFIED, false, r::CONTRACT_FINDINGS), true),
            (
                None,
                (CONTRACT_VERIFIED, false, r::CONTRACT_FIELDS_MISSING),
                true,
            ),
            (
                None,
                (PROVIDER_INSTALLED, false, r::MISSING_VARIABLES),
                true,
            ),
            (
                Some((PREFLIGHT_CHECK_PASSED, false, r::CONTRACT_MISMATCH)),
                (PREFLIGHT_CHECK_PASSED, true, r::PASSED),
                true,
            ),
            (
                Some((MANAGER_CONFIGURED, false, r::MANAGER_SETTINGS_IGNORED)),
                (MANAGER_CONFIGURED, true, r::MANAGER_SETTINGS_APPLIED),
                true,
            ),
            (
                Some((READY, false, r::NOT_AVAILABLE)),
                (READY, false, r::MANAGER_CRASH_LOOPING),
                true,
            ),
            (
                Some((READY, false, r::NOT_AVAILABLE)),
                (READY, false, r::MANAGER_IMAGE_UNAVAILABLE),
                true,
            ),
            (
                Some((READY, false, r::MANAGER_IMAGE_UNAVAILABLE)),
                (READY, true, r::AVAILABLE),
                true,
            ),
        ]);
    }

    #[test]
    fn a_ready_provider_losing_its_deployments_is_news() {
        use reason as r;
        let ready = Some((READY, true, r::AVAILABLE));
        check_news(&[
            (ready, (READY, false, r::NOT_AVAILABLE), true),
            (
                ready,
                (READY, false, go_reason::MINIMUM_REPLICAS_UNAVAILABLE),
                true,
            ),
        ]);
    }

    #[test]
    fn an_unchanged_condition_is_not_news() {
        use reason as r;
        check_news(&[
            (
                Some((READY, true, r::AVAILABLE)),
                (READY, true, r::AVAILABLE),
                false,
            ),
            (
                Some((PROVIDER_INSTALLED, false, r::MISSING_VARIABLES)),
                (PROVIDER_INSTALLED, false, r::MISSING_VARIABLES),
                false,
            ),
        ]);
    }

    #[test]
    fn pause_and_deletion_are_news() {
        use reason as r;
        check_news(&[
            (None, (PAUSED, true, r::PAUSED), true),
            (
                Some((PAUSED, true, r::PAUSED)),
                (PAUSED, false, r::NOT_PAUSED),
                true,
            ),
            (None, (DELETING, true, r::DELETING), true),
            (None, (DELETING, false, r::DELETION_BLOCKED), true),
        ]);
    }

    #[test]
    fn warnings_are_problems_and_unpausing_is_not_one() {
        use reason as r;
        assert!(warning(&cond(READY, false, r::MANAGER_CRASH_LOOPING)));
        assert!(warning(&cond(READY, false, r::MANAGER_IMAGE_UNAVAILABLE)));
        assert!(!warning(&cond(READY, true, r::AVAILABLE)));
        assert!(!warning(&cond(PAUSED, false, r::NOT_PAUSED)));
        assert!(!warning(&cond(PAUSED, true, r::PAUSED)));
        assert!(warning(&cond(PAUSED, true, r::UNPAUSE_REFUSED)));
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut conds = Vec::new();
        assert!(set(
            &mut conds,
            &Desired::failed("Ready", "Waiting", "a"),
            Some(1)
        ));
        let first = conds[0].last_transition_time.clone();
        assert!(!set(
            &mut conds,
            &Desired::failed("Ready", "Waiting", "b"),
            Some(2)
        ));
        assert_eq!(conds[0].last_transition_time, first);
        assert_eq!(conds[0].message, "b");
        assert_eq!(conds[0].observed_generation, Some(2));
        assert!(set(
            &mut conds,
            &Desired::failed("Ready", "Other", "b"),
            Some(2)
        ));
        assert_eq!(conds[0].last_transition_time, first);
        // Whole seconds, as the API server stores them: read back, it equals what was written.
        assert_eq!(first.0.subsec_nanosecond(), 0);
        let long_ago = Time(Timestamp::UNIX_EPOCH);
        conds[0].last_transition_time = long_ago.clone();
        assert!(set(
            &mut conds,
            &Desired::ok("Ready", "Available", ""),
            Some(2)
        ));
        assert_ne!(conds[0].last_transition_time, long_ago);
        assert_eq!(conds.len(), 1);
    }

    #[test]
    fn long_messages_are_clipped_on_a_char_boundary() {
        let mut conds = Vec::new();
        let long = "é".repeat(5000);
        set(&mut conds, &Desired::failed("Ready", "X", long), None);
        assert!(conds[0].message.len() <= MAX_MESSAGE + 3);
        assert!(conds[0].message.ends_with('…'));
    }
}
