//! How a reconcile ends: the reconcile [`Error`] (an API failure among them) and the [`Outcome`]
//! the reporter turns into the status write, the events and the metrics. What it carries, the
//! [`Problem`] and the [`Note`]s, is decided in `capi_decide`.

use capi_components::render::RenderError;
use capi_decide::{Note, Problem, preflight, reason};
use capi_release_sources::SourceError;

/// A failure with a condition reason: the errors the phases meet (release source, render,
/// apply, preflight) say which reason they show and whether retrying may fix them.
pub trait Reasoned: std::error::Error + Send + Sync + 'static {
    /// The condition (and event, and metric) reason.
    fn reason(&self) -> &'static str;
    /// Whether retrying (with backoff) may fix it; otherwise it is a configuration problem.
    fn transient(&self) -> bool {
        false
    }
}

impl Reasoned for SourceError {
    fn reason(&self) -> &'static str {
        SourceError::reason(self)
    }
    fn transient(&self) -> bool {
        self.is_transient()
    }
}

impl Reasoned for RenderError {
    fn reason(&self) -> &'static str {
        RenderError::reason(self)
    }
}

impl Reasoned for preflight::Failure {
    fn reason(&self) -> &'static str {
        self.reason
    }
}

/// Errors retried with backoff, each with the reason `error_policy` reports it under.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// A temporary failure a phase showed on a condition: that condition's reason and
    /// message, and what failed.
    #[error("{cause}")]
    Shown {
        /// The condition's reason.
        reason: &'static str,
        /// The condition's message.
        message: String,
        /// What failed.
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A bug: the reconcile panicked. Caught so that one bad provider cannot take the
    /// operator (and every other provider) down; retried with backoff.
    #[error("internal error (panic) while reconciling: {0}")]
    Panic(String),
}

impl Error {
    /// A temporary failure of a phase, shown with its own reason and message.
    pub fn reasoned(e: impl Reasoned) -> Error {
        Error::Shown {
            reason: e.reason(),
            message: e.to_string(),
            cause: Box::new(e),
        }
    }

    /// The reason it is reported under (event and metric).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => reason::API_REQUEST_FAILED,
            Error::Shown { reason, .. } => reason,
            Error::Panic(_) => reason::RECONCILE_PANICKED,
        }
    }

    /// Whether an API write lost a race (HTTP 409): the object changed since it was read.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(e) if is_conflict(e))
    }

    /// The message it is reported with: a shown failure's condition message (so the event
    /// repeats the condition's and folds into its series), else the error itself.
    pub fn message(&self) -> String {
        match self {
            Error::Shown { message, .. } => message.clone(),
            e => e.to_string(),
        }
    }

    /// The Warning it is announced with, under its reason. A write conflict has none: it means
    /// the object changed meanwhile, and the retry on a fresh read is routine, not news.
    pub fn note(&self) -> Option<Note> {
        (!self.is_conflict()).then(|| Note::warning(self.reason(), self.message()))
    }
}

/// How a reconcile of an existing provider ends.
pub enum Outcome {
    /// Installed; the status is up to date.
    Done,
    /// spec.version was written; the update brings the next reconcile.
    VersionWritten,
    /// A configuration problem: shown on a condition, retried slowly or on a change.
    Problem(Problem),
    /// A temporary failure, shown on a condition and retried with backoff.
    Transient(Error, Problem),
}

/// Whether an API call lost a race (HTTP 409): the object changed since it was read.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(st) if st.code == 409)
}

/// A configuration problem on `condition`.
pub fn problem(
    condition: &'static str,
    reason: &'static str,
    message: impl Into<String>,
) -> Outcome {
    Outcome::Problem(Problem {
        condition,
        reason,
        message: message.into(),
    })
}

impl Outcome {
    /// A temporary failure, retried with backoff: shown on `condition` with `reason` and
    /// `message`, and reported so by `error_policy`.
    pub fn transient(
        cause: impl std::error::Error + Send + Sync + 'static,
        condition: &'static str,
        reason: &'static str,
        message: String,
    ) -> Outcome {
        let error = Error::Shown {
            reason,
            message: message.clone(),
            cause: Box::new(cause),
        };
        Outcome::Transient(
            error,
            Problem {
                condition,
                reason,
                message,
            },
        )
    }

    /// A phase's failure on `condition`: retried with backoff when it is transient, else a
    /// configuration problem.
    pub fn failed(condition: &'static str, e: impl Reasoned) -> Outcome {
        let (reason, message) = (e.reason(), e.to_string());
        if e.transient() {
            Outcome::transient(e, condition, reason, message)
        } else {
            problem(condition, reason, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use capi_operator_api::conditions::{PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED};

    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("the object has been modified", "Conflict")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_phase_failure_is_retried_only_when_transient() {
        let down = SourceError::Transient {
            what: "release v1.0.0".into(),
            reason: "503".into(),
        };
        match Outcome::failed(PROVIDER_INSTALLED, down) {
            Outcome::Transient(e, pb) => {
                assert_eq!((pb.condition, pb.reason), (PROVIDER_INSTALLED, e.reason()));
                assert_eq!(pb.reason, reason::SOURCE_UNAVAILABLE);
                assert_eq!(e.message(), pb.message);
            }
            _ => panic!("a source that is down is retried with backoff"),
        }
        let missing = SourceError::NotFound("release v9.9.9".into());
        assert!(matches!(
            Outcome::failed(PROVIDER_INSTALLED, missing),
            Outcome::Problem(Problem {
                reason: reason::FETCH_FAILED,
                ..
            })
        ));
    }

    #[test]
    fn a_reconcile_error_is_reported_under_its_reason() {
        // Shown on a condition: the condition's reason and message, whatever failed.
        let shown = Outcome::transient(
            api_error(500),
            PREFLIGHT_CHECK_PASSED,
            reason::SOURCE_UNAVAILABLE,
            "writing the resolved version failed".into(),
        );
        let Outcome::Transient(e, _) = shown else {
            panic!("not transient")
        };
        assert_eq!(e.reason(), reason::SOURCE_UNAVAILABLE);
        assert_eq!(e.message(), "writing the resolved version failed");
        assert!(e.to_string().contains("modified"), "{e}");
        // Outside any condition: the API's or the panic's own reason.
        assert_eq!(
            e.note(),
            Some(Note::warning(
                reason::SOURCE_UNAVAILABLE,
                "writing the resolved version failed"
            ))
        );
        let api = Error::Kube(api_error(500));
        assert_eq!(api.reason(), reason::API_REQUEST_FAILED);
        assert_eq!(
            api.note().map(|n| (n.ok, n.reason)),
            Some((false, reason::API_REQUEST_FAILED))
        );
        // A lost write race is counted, not announced.
        let conflict = Error::Kube(api_error(409));
        assert_eq!(conflict.reason(), reason::API_REQUEST_FAILED);
        assert_eq!(conflict.note(), None);
        let panic = Error::Panic("index out of bounds".into());
        assert_eq!(panic.reason(), reason::RECONCILE_PANICKED);
        assert!(panic.message().contains("index out of bounds"));
    }
}
