//! Variable substitution compatible with `clusterctl`.
//!
//! clusterctl runs provider components through `drone/envsubst` (v2, commit `179042472c46`) wrapped in its
//! `SimpleProcessor`. This crate reproduces both layers:
//!
//! * the **envsubst layer** — [`parse`], [`Template::eval`] and [`eval`]: `${...}` expressions are expanded,
//!   an unset variable behaves like an empty one;
//! * the **clusterctl layer** — [`convert_legacy_vars`], [`variables`] and [`process`]: legacy `${ VAR }`
//!   spacing is normalised, every top-level variable without a default must be set, then the text is expanded.
//!
//! # Syntax (drone/envsubst, not bash)
//!
//! | form | result |
//! |---|---|
//! | `${v}` | the value (unset ⇒ empty) |
//! | `${#v}` | length of the value in bytes |
//! | `${v^}` `${v^^}` `${v,}` `${v,,}` | upper-case first character / all; lower-case first / all |
//! | `${v:pos}` `${v:pos:len}` | byte substring; a negative `pos` (from a nested `${...}`) counts from the end |
//! | `${v#pat}` `${v##pat}` `${v%pat}` `${v%%pat}` | strip shortest/longest glob prefix/suffix (`*` matches `/` too) |
//! | `${v/pat/rep}` `${v//pat/rep}` `${v/#pat/rep}` `${v/%pat/rep}` | replace first / all / prefix / suffix (literal) |
//! | `${v=def}` `${v:=def}` `${v:-def}` `${v:?def}` `${v:+def}` | the value if non-empty, else the default |
//!
//! Only `${` starts an expression: `$VAR` is left alone. `$$` is an escape for a single `$` anywhere in plain
//! text (`$${x}` → `${x}`, `a$$b` → `a$b`). Defaults may contain text and nested expressions.
//!
//! # Example
//!
//! ```
//! use std::collections::HashMap;
//!
//! let config = HashMap::from([("NAMESPACE", "capi-system"), ("EXP_FLAG", "")]);
//! let lookup = |name: &str| config.get(name).map(|v| v.to_string());
//!
//! let yaml = "namespace: ${ NAMESPACE }\nflag: ${EXP_FLAG:=false}\nport: ${PORT:=9443}\n";
//! let out = capi_envsubst::process(yaml, lookup)?;
//! assert_eq!(out, "namespace: capi-system\nflag: false\nport: 9443\n");
//!
//! let err = capi_envsubst::process("${REQUIRED} ${NAMESPACE}", lookup).unwrap_err();
//! assert!(matches!(err, capi_envsubst::Error::MissingVariables(ref names) if names == &["REQUIRED"]));
//! # Ok::<(), capi_envsubst::Error>(())
//! ```
//!
//! # Differences from the Go code
//!
//! These only concern inputs on which Go misbehaves or which are hostile:
//! * expressions nested deeper than [`MAX_NESTING_DEPTH`] are rejected ([`Error::NestingTooDeep`]);
//! * evaluation stops with [`Error::OutputTooLarge`] / [`Error::PatternTooComplex`] instead of exhausting
//!   memory or CPU (nested replacements can grow the output exponentially);
//! * `${v:pos:len}` with a negative `len` yields `""` where Go panics; byte slices that cut a UTF-8 sequence
//!   have each stray byte replaced by U+FFFD, as Go does when it converts such text to runes;
//! * variable names are checked against tables generated from Go's `unicode` package (Unicode 15.0), but
//!   case conversion uses Rust's (newer) tables, so `^`/`,` differ from Go for characters added after 15.0.

mod clusterctl;
mod error;
mod eval;
mod glob;
mod ident_table;
mod legacy;
mod parse;

pub use clusterctl::{Variable, process, process_with, variables};
pub use error::{Error, ParseErrorKind};
pub use eval::Limits;
pub use legacy::convert_legacy_vars;
pub use parse::{Func, Node, Op, Template, expression_ranges, parse};

/// Deepest nesting of `${...}` inside another expression's arguments that [`parse`] accepts.
///
/// A top-level expression is at depth 1, so `${A:=${B}}` has depth 2. drone/envsubst has no limit; real
/// templates use two or three levels, and the limit keeps recursion bounded on hostile input.
pub const MAX_NESTING_DEPTH: usize = 64;

/// Parses `input` with drone/envsubst syntax and expands it, treating unset variables as empty.
///
/// This is `envsubst.Eval`: no legacy `${ VAR }` conversion and no check for unset variables. `lookup`
/// returns `None` for an unset variable; that and `Some("")` are the same here.
///
/// # Errors
///
/// Any error of [`parse`] or [`Template::eval`].
pub fn eval(input: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, Error> {
    parse(input)?.eval(lookup)
}
