//! How a reconcile ends and what its phases tell the reporter: the data the reporter turns into
//! the status write, the events and the metrics.

use capi_components::render::RenderError;
use capi_release_sources::SourceError;

use super::{preflight, reason};

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

    /// The message it is reported with: a shown failure's condition message (so the event
    /// repeats the condition's and folds into its series), else the error itself.
    pub fn message(&self) -> String {
        match self {
            Error::Shown { message, .. } => message.clone(),
            e => e.to_string(),
        }
    }
}

/// A configuration problem: which condition it goes on, its reason and message.
#[derive(Debug)]
pub struct Problem {
    /// The condition that turns False.
    pub condition: &'static str,
    /// Its reason (also the event's reason and the metric label).
    pub reason: &'static str,
    /// Its message.
    pub message: String,
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

/// Something a phase did that the admin should read about (an event), besides the conditions:
/// the reporter publishes it with the status write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Normal (true) or Warning (false).
    pub ok: bool,
    /// The event reason.
    pub reason: &'static str,
    /// The event's note.
    pub message: String,
}

impl Note {
    /// A Normal note.
    pub fn normal(reason: &'static str, message: impl Into<String>) -> Note {
        Note {
            ok: true,
            reason,
            message: message.into(),
        }
    }

    /// A Warning note.
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Note {
        Note {
            ok: false,
            reason,
            message: message.into(),
        }
    }
}
