//! Error type shared by both layers.

/// Why substitution failed.
///
/// The `Display` text of parse errors and of [`Error::MissingVariables`] is exactly the text clusterctl prints,
/// so it can be shown to users who know clusterctl's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The text is not valid drone/envsubst syntax.
    #[error("{kind}")]
    Parse {
        /// Which of drone/envsubst's parse errors this is.
        kind: ParseErrorKind,
        /// Byte offset of the `${` that opens the malformed expression, in the text passed by the caller
        /// (before legacy conversion, for [`crate::process`] and [`crate::variables`]).
        offset: usize,
    },

    /// Expressions are nested deeper than [`crate::MAX_NESTING_DEPTH`].
    #[error("substitution nested deeper than {limit} levels")]
    NestingTooDeep {
        /// The nesting limit.
        limit: usize,
        /// Byte offset of the `${` that exceeds the limit (same convention as [`Error::Parse`]).
        offset: usize,
    },

    /// Expansion would produce more text than allowed (nested replacements can grow exponentially).
    #[error("substitution output exceeds {limit} bytes")]
    OutputTooLarge {
        /// The output limit in bytes.
        limit: usize,
    },

    /// One expression would produce more text than allowed ([`crate::Limits::max_value`]).
    #[error("a substituted value exceeds {limit} bytes")]
    ValueTooLarge {
        /// The limit per value in bytes.
        limit: usize,
    },

    /// Glob matching for `#`, `##`, `%` or `%%` needs more steps than allowed.
    #[error("pattern matching in substitution exceeds {limit} steps")]
    PatternTooComplex {
        /// The step limit.
        limit: u64,
    },

    /// Variables without a default are not set (clusterctl layer only). Names are sorted and unique.
    #[error(
        "value for variables [{}] is not set. Please set the value using os environment variables or the clusterctl config file",
        .0.join(", ")
    )]
    MissingVariables(Vec<String>),
}

/// The parse errors of drone/envsubst; `Display` is drone's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// A function is malformed (e.g. `${v:1x}`, `${#}`, `${v,,,}`, an unterminated `${v#x`).
    #[error("bad substitution")]
    BadSubstitution,
    /// A plain `${name` is not followed by `}` (e.g. `${BA$R}`, `${v-def}`, `${X`).
    #[error("missing closing brace")]
    MissingClosingBrace,
    /// No variable name after `${` (e.g. `${}`, `${ X:=y}`, a trailing `${`).
    #[error("unable to parse variable name")]
    VariableName,
    /// A function argument is missing or empty where one is required (e.g. `${v:}`, `${v#}`, `${v:=x`).
    #[error("unable to parse substitution within function")]
    FuncSubstitution,
    /// Kept for parity with drone/envsubst; its parser cannot actually reach this error.
    #[error("unable to parse default function")]
    DefaultFunction,
}
