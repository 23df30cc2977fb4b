//! The project's one YAML module. Everything that reads or writes YAML goes through here, so
//! the parser (serde-saphyr, a maintained YAML 1.2 parser; serde_yaml is deprecated) and its
//! safety limits are chosen in one place.
//!
//! Provider releases are untrusted input: parsing is bounded (alias expansion, nesting depth,
//! node and document counts), so a YAML bomb or a deeply nested document fails with an error
//! instead of exhausting memory or stack.
//!
//! Releases are large (the Cluster API core components are 1.4 MB of CRDs), and serde-saphyr
//! spends ~50 ms on them, so [`parse_documents`] first tries a fast parser (~7x faster) for
//! the block-style subset that generated manifests use. That parser gives up on anything it
//! does not fully understand (anchors, tags, complex keys, odd indentation, a budget getting
//! close) and the whole input is then parsed by serde-saphyr as before, so values and errors
//! are serde-saphyr's either way. It enforces the same [`Limits`] (size, depth, nodes,
//! documents; it has no aliases), stopping short of them so that the full parser decides at
//! the limits. `tests/it/differential.rs`, `tests/it/tricky.rs` and `tests/it/roundtrip.rs` hold the
//! two parsers to the same results.

mod block_parser;
mod count;
mod scalar;

pub use count::count_nodes;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

/// Errors reading or writing YAML.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The text is not valid YAML, or exceeds a safety limit.
    #[error("invalid YAML: {0}")]
    Parse(String),
    /// A value could not be written as YAML.
    #[error("cannot write YAML: {0}")]
    Write(String),
}

/// Safety limits for parsing untrusted YAML.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Maximum input size in bytes.
    pub max_bytes: usize,
    /// Maximum nesting depth.
    pub max_depth: usize,
    /// Maximum number of nodes (scalars, sequences, mappings) in all documents.
    pub max_nodes: usize,
    /// Maximum number of alias references.
    pub max_aliases: usize,
    /// Maximum number of documents.
    pub max_documents: usize,
}

impl Default for Limits {
    /// Generous enough for the largest real provider releases (a few MiB, ~1M nodes), small
    /// enough that hostile input is refused quickly.
    fn default() -> Self {
        Limits {
            max_bytes: 64 * 1024 * 1024,
            max_depth: 96,
            max_nodes: 4_000_000,
            max_aliases: 10_000,
            max_documents: 10_000,
        }
    }
}

fn options(limits: &Limits) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = Some(limits.max_bytes);
    budget.max_depth = limits.max_depth;
    budget.max_nodes = limits.max_nodes;
    budget.max_events = limits.max_nodes.saturating_mul(2);
    budget.max_aliases = limits.max_aliases;
    budget.max_anchors = limits.max_aliases;
    budget.max_documents = limits.max_documents;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // Errors name the line and column but never quote the input: the text parsed is often a
    // release after substitution, holding Secret values, and errors end up in logs, events
    // and conditions.
    options.with_snippet = false;
    options
}

fn check_size(text: &str, limits: &Limits) -> Result<(), Error> {
    if text.len() > limits.max_bytes {
        return Err(Error::Parse(format!(
            "input of {} bytes exceeds the limit of {} bytes",
            text.len(),
            limits.max_bytes
        )));
    }
    Ok(())
}

/// Parses every document of a multi-document YAML text into JSON values, skipping empty
/// (null) documents. The fast parser is tried first, serde-saphyr when it gives up.
pub fn parse_documents(text: &str, limits: &Limits) -> Result<Vec<Value>, Error> {
    check_size(text, limits)?;
    match block_parser::parse(text, limits) {
        Ok(docs) => Ok(docs),
        Err(_) => parse_documents_full(text, limits),
    }
}

fn parse_documents_full(text: &str, limits: &Limits) -> Result<Vec<Value>, Error> {
    check_size(text, limits)?;
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(text, options(limits))
        .map_err(|e| Error::Parse(e.to_string()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Each parser of [`parse_documents`] on its own, for differential tests and benchmarks.
#[doc(hidden)]
pub mod internals {
    use super::{Error, Limits, Value};

    /// Why the fast parser gave up on an input.
    pub use crate::block_parser::Bail;

    /// The fast parser alone: `Err` when it gives up (and `parse_documents` would fall
    /// back to serde-saphyr).
    pub fn parse_documents_fast(text: &str, limits: &Limits) -> Result<Vec<Value>, Bail> {
        if text.len() > limits.max_bytes {
            return Err(Bail("input exceeds max_bytes"));
        }
        crate::block_parser::parse(text, limits)
    }

    /// serde-saphyr alone, as `parse_documents` was before the fast parser.
    pub fn parse_documents_full(text: &str, limits: &Limits) -> Result<Vec<Value>, Error> {
        super::parse_documents_full(text, limits)
    }
}

/// Parses one YAML document into a typed value.
///
/// Always serde-saphyr: typed targets read scalars by the target's type (a plain `123` into
/// a `String` field is "123"), which going through a JSON value would change.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    let limits = Limits::default();
    if text.len() > limits.max_bytes {
        return Err(Error::Parse("input exceeds the size limit".into()));
    }
    serde_saphyr::from_str_with_options(text, options(&limits))
        .map_err(|e| Error::Parse(e.to_string()))
}

/// Writes one value as a YAML document (without a leading `---`).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, Error> {
    serde_saphyr::to_string(value).map_err(|e| Error::Write(e.to_string()))
}

/// Writes values as one multi-document YAML text, documents separated by `---` lines.
pub fn to_multi_doc<T: Serialize>(values: &[T]) -> Result<String, Error> {
    let mut out = String::new();
    for v in values {
        out.push_str("---\n");
        out.push_str(&to_string(v)?);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_skips_empty_ones() -> Result<(), Error> {
        let docs = parse_documents(
            "a: 1\n---\n# only a comment\n---\nb: [x, y2]\n",
            &Limits::default(),
        )?;
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["b"][1], "y2");
        Ok(())
    }

    #[test]
    fn alias_bomb_is_refused() {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(parse_documents(&bomb, &Limits::default()).is_err());
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse_documents(&deep, &Limits::default()).is_err());
    }

    #[test]
    fn round_trip() -> Result<(), Error> {
        let v = serde_json::json!({"kind": "X", "n": 3, "s": "on", "list": ["a", "b"]});
        let text = to_multi_doc(std::slice::from_ref(&v))?;
        let back = parse_documents(&text, &Limits::default())?;
        assert_eq!(back, vec![v]);
        Ok(())
    }
}
