//! kstatus conditions (`Reconciling`, `Stalled`), derived from how a reconcile ended and from
//! the other conditions, so that Flux, Argo CD and kstatus-based tools tell progress from a
//! configuration error without knowing this operator's reasons.

use capi_operator_api::{
    ProviderStatus,
    conditions::{PAUSED, READY, RECONCILING, STALLED, reason},
};

use super::conditions::Desired;

/// How a reconcile ended, as far as kstatus cares.
#[derive(Debug, Clone, Copy)]
pub enum Ended<'a> {
    /// The install phases ran to the end; the other conditions tell the rest.
    Installed,
    /// A configuration problem: (reason, message).
    Problem(&'a str, &'a str),
    /// A temporary failure, retried with backoff: (reason, message).
    Retrying(&'a str, &'a str),
    /// Deletion in progress or blocked: (reason, message).
    Deleting(&'a str, &'a str),
}

/// Ready reasons that need a change (of the image, the flags) to move on.
const STALLED_READY: &[&str] = &[
    reason::MANAGER_CRASH_LOOPING,
    reason::MANAGER_IMAGE_UNAVAILABLE,
];

/// The `Reconciling` and `Stalled` conditions for `status` after a reconcile that `ended`.
pub fn conditions(status: &ProviderStatus, ended: Ended<'_>) -> [Desired; 2] {
    let (reconciling, stalled) = match ended {
        Ended::Problem(r, m) => (None, Some((r, m))),
        Ended::Retrying(r, m) | Ended::Deleting(r, m) => (Some((r, m)), None),
        Ended::Installed => installed(status),
    };
    let reconciling = match reconciling {
        Some((r, m)) => Desired::ok(RECONCILING, r, m),
        None if stalled.is_some() => Desired::failed(
            RECONCILING,
            reason::WAITING_FOR_CHANGE,
            "progress waits for a change (see Stalled)",
        ),
        None => Desired::failed(RECONCILING, reason::RECONCILED, "the spec is reached"),
    };
    let stalled = match stalled {
        Some((r, m)) => Desired::ok(STALLED, r, m),
        None => Desired::failed(STALLED, reason::NOT_STALLED, ""),
    };
    [reconciling, stalled]
}

/// The status's summary for `kubectl get` ([`ProviderStatus::summary`]): the reason of a
/// True Stalled (else Reconciling) condition, and `wanted X, installed Y` while spec.version
/// (`wanted`) differs from the installed version; `None` when the spec is reached.
pub fn summary(wanted: Option<&str>, status: &ProviderStatus) -> Option<String> {
    let is_true = |t: &str| status.condition(t).filter(|c| c.status == "True");
    let why = is_true(STALLED)
        .or_else(|| is_true(RECONCILING))
        .map(|c| c.reason.as_str())
        .filter(|r| !r.is_empty());
    let installed = status.installed_version.as_deref();
    let moving = wanted
        .filter(|w| !w.is_empty() && Some(*w) != installed)
        .map(|w| format!("wanted {w}, installed {}", installed.unwrap_or("none")));
    match (why, moving) {
        (Some(r), Some(m)) => Some(format!("{r}: {m}")),
        (Some(r), None) => Some(r.to_string()),
        (None, Some(m)) => Some(m),
        (None, None) => None,
    }
}

type Pair<'a> = Option<(&'a str, &'a str)>;

fn installed(status: &ProviderStatus) -> (Pair<'_>, Pair<'_>) {
    let is_true = |t: &str| status.condition(t).is_some_and(|c| c.status == "True");
    if is_true(READY) || is_true(PAUSED) {
        return (None, None);
    }
    match status.condition(READY) {
        Some(c) if STALLED_READY.contains(&c.reason.as_str()) => {
            (None, Some((c.reason.as_str(), c.message.as_str())))
        }
        Some(c) => (Some((c.reason.as_str(), c.message.as_str())), None),
        None => (
            Some((reason::NOT_AVAILABLE, "waiting for the Deployments")),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::conditions;
    use super::*;

    fn status(conds: &[Desired]) -> ProviderStatus {
        let mut s = ProviderStatus::default();
        for d in conds {
            conditions::set(&mut s.conditions, d, Some(1));
        }
        s
    }

    #[test]
    fn the_summary_says_why_the_spec_is_not_reached() {
        let stalled = Desired::ok(
            STALLED,
            reason::FETCH_FAILED,
            "a ConfigMap for version v9.9.9 not found; …",
        );
        let mut s = status(&[stalled]);
        s.installed_version = Some("v0.1.0".into());
        assert_eq!(
            super::summary(Some("v9.9.9"), &s).as_deref(),
            Some("ComponentsFetchError: wanted v9.9.9, installed v0.1.0")
        );
        // Working toward it: the Reconciling reason; nothing installed yet.
        let mut s = status(&[
            Desired::ok(RECONCILING, reason::SOURCE_UNAVAILABLE, "retrying"),
            Desired::failed(STALLED, reason::NOT_STALLED, ""),
        ]);
        assert_eq!(
            super::summary(Some("v1.0.0"), &s).as_deref(),
            Some("SourceUnavailable: wanted v1.0.0, installed none")
        );
        // Stalled at the wanted version (a crash loop): the reason alone.
        s.installed_version = Some("v1.0.0".into());
        let s2 = status(&[Desired::ok(STALLED, reason::MANAGER_CRASH_LOOPING, "x")]);
        let s2 = ProviderStatus {
            installed_version: Some("v1.0.0".into()),
            ..s2
        };
        assert_eq!(
            super::summary(Some("v1.0.0"), &s2).as_deref(),
            Some("ManagerCrashLooping")
        );
        // Reached: nothing to say.
        let done = status(&[
            Desired::failed(RECONCILING, reason::RECONCILED, "the spec is reached"),
            Desired::failed(STALLED, reason::NOT_STALLED, ""),
        ]);
        let done = ProviderStatus {
            installed_version: Some("v1.0.0".into()),
            ..done
        };
        assert_eq!(super::summary(Some("v1.0.0"), &done), None);
        // An empty spec.version (resolved to the latest) is not a difference.
        assert_eq!(super::summary(Some(""), &done), None);
        assert_eq!(super::summary(None, &done), None);
    }

    /// (Reconciling, its reason, Stalled, its reason).
    type Summary<'a> = (bool, &'a str, bool, &'a str);

    fn summary(d: &[Desired; 2]) -> Summary<'_> {
        (d[0].ok, d[0].reason.as_str(), d[1].ok, d[1].reason.as_str())
    }

    #[test]
    fn progress_and_stalls_follow_the_outcome_and_readiness() {
        let ready = Desired::ok(READY, reason::AVAILABLE, "available: m");
        let starting = Desired::failed(READY, reason::NOT_AVAILABLE, "0/1 available");
        let crashing = Desired::failed(READY, reason::MANAGER_CRASH_LOOPING, "exit 2");
        let paused = Desired::ok(PAUSED, reason::PAUSED, "");
        let not_ready_paused = Desired::failed(READY, reason::PAUSED, "");
        let r = reason::RECONCILED;
        let ns = reason::NOT_STALLED;
        let cases: Vec<(ProviderStatus, Ended, Summary)> = vec![
            (
                status(std::slice::from_ref(&ready)),
                Ended::Installed,
                (false, r, false, ns),
            ),
            (
                status(&[starting]),
                Ended::Installed,
                (true, reason::NOT_AVAILABLE, false, ns),
            ),
            (
                status(&[crashing]),
                Ended::Installed,
                (
                    false,
                    reason::WAITING_FOR_CHANGE,
                    true,
                    reason::MANAGER_CRASH_LOOPING,
                ),
            ),
            (
                status(&[paused, not_ready_paused]),
                Ended::Installed,
                (false, r, false, ns),
            ),
            (
                status(&[]),
                Ended::Installed,
                (true, reason::NOT_AVAILABLE, false, ns),
            ),
            (
                status(std::slice::from_ref(&ready)),
                Ended::Problem(reason::MISSING_VARIABLES, "FOO"),
                (
                    false,
                    reason::WAITING_FOR_CHANGE,
                    true,
                    reason::MISSING_VARIABLES,
                ),
            ),
            (
                status(std::slice::from_ref(&ready)),
                Ended::Retrying(reason::SOURCE_UNAVAILABLE, "503"),
                (true, reason::SOURCE_UNAVAILABLE, false, ns),
            ),
            (
                status(&[ready]),
                Ended::Deleting(reason::DELETION_BLOCKED, "Cluster a/b"),
                (true, reason::DELETION_BLOCKED, false, ns),
            ),
        ];
        for (s, ended, want) in cases {
            let got = super::conditions(&s, ended);
            assert_eq!(summary(&got), want, "{ended:?} with {:?}", s.conditions);
        }
    }

    #[test]
    fn a_stall_carries_the_problem_message() {
        let got = super::conditions(
            &status(&[]),
            Ended::Problem(reason::SECRET_NOT_FOUND, "Secret a/b does not exist"),
        );
        assert_eq!(got[1].message, "Secret a/b does not exist");
    }
}
