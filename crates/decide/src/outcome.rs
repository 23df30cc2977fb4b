//! What a phase tells the reporter: a configuration [`Problem`] shown on a condition, and the
//! [`Note`]s published as events with the status write.

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
