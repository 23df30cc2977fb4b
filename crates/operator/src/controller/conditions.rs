//! `metav1.Condition` bookkeeping for provider status: transition times move only when a
//! condition's status changes, so rewriting the same state is a no-op the reconciler can detect.

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
                c.last_transition_time = Time(Timestamp::now());
            }
            c.status = status.to_string();
            c.reason = want.reason.clone();
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
                last_transition_time: Time(Timestamp::now()),
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(set(
            &mut conds,
            &Desired::ok("Ready", "Available", ""),
            Some(2)
        ));
        assert_ne!(conds[0].last_transition_time, first);
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
