//! Variable substitution (in progress).
