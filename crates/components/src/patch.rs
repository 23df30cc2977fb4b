//! Patches on rendered objects: RFC 7396 JSON merge patches, RFC 6902 JSON patches (with RFC
//! 6901 pointers), Kubernetes label selectors, and the two `ProviderSpec` fields built on them,
//! `patches` and the legacy `manifestPatches`. Objects are plain JSON values; there is no
//! Kubernetes client here.
//!
//! The RFC algorithms are the `json-patch` crate's (and its `jsonptr`'s for pointers). What is
//! ours: reading patch texts with messages that say what is wrong, naming why an operation
//! failed, atomic application, `test`'s equality as RFC 6902 defines it (see [`json_equal`]),
//! label selectors, and the selection of the objects a patch applies to.
//!
//! Where this deliberately differs from the Go cluster-api-operator:
//!
//! - **manifestPatches**: Go compares the patch's `apiVersion` in a way that makes a patch
//!   *without* an apiVersion never match anything, while a patch *with* one is not compared at
//!   all. Here a manifest patch applies to every object of its `kind` (which it must give), and
//!   additionally compares `apiVersion`, `metadata.name` and `metadata.namespace` exactly, each
//!   only when the patch gives it.
//! - **patches targets**: Go cannot tell an empty target field from an absent one, so `""`
//!   means "any". Here every field that is set must match exactly, so `group: ""` selects the
//!   core group and `namespace: ""` selects cluster-scoped objects, as the API documents.
//! - A patch that matches no object is not an error (in both), but is logged here.

use std::{collections::HashSet, fmt, slice};

use capi_operator_api::{PatchSelector, TargetedPatch};
use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchErrorKind, PatchOperation, RemoveOperation,
    ReplaceOperation, TestOperation,
    jsonptr::{self, PointerBuf, index::OutOfBoundsError, resolve::ResolveError},
};
use serde_json::{Map, Value};

// ---------------------------------------------------------------------------------------------
// RFC 7396 merge patch
// ---------------------------------------------------------------------------------------------

/// Applies an RFC 7396 JSON merge patch (the `json-patch` crate's): mappings merge recursively,
/// `null` removes a member, anything else (arrays included) replaces the target. It cannot fail.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

// ---------------------------------------------------------------------------------------------
// RFC 6901 JSON pointer
// ---------------------------------------------------------------------------------------------

/// A JSON pointer that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// A non-empty pointer must start with `/`.
    #[error("JSON pointer {0:?} must be empty or start with \"/\"")]
    NoLeadingSlash(String),
    /// `~` may only be followed by `0` or `1`.
    #[error("JSON pointer {0:?} has a \"~\" not followed by 0 or 1")]
    BadEscape(String),
}

/// A parsed RFC 6901 JSON pointer (a `jsonptr` one, with our errors): `""` is the whole
/// document, `/a/b` member `b` of member `a`; `~1` stands for `/` and `~0` for `~` inside a
/// token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer(PointerBuf);

impl Pointer {
    /// Parses a pointer.
    pub fn parse(text: &str) -> Result<Pointer, PointerError> {
        match jsonptr::Pointer::parse(text) {
            Ok(p) => Ok(Pointer(p.to_buf())),
            Err(jsonptr::ParseError::NoLeadingSlash) => {
                Err(PointerError::NoLeadingSlash(text.to_string()))
            }
            Err(jsonptr::ParseError::InvalidEncoding { .. }) => {
                Err(PointerError::BadEscape(text.to_string()))
            }
        }
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The unescaped reference tokens.
    pub fn tokens(&self) -> Vec<String> {
        self.0.tokens().map(|t| t.decoded().into_owned()).collect()
    }

    /// The value the pointer refers to in `doc`, if any.
    pub fn get<'a>(&self, doc: &'a Value) -> Option<&'a Value> {
        self.0.resolve(doc).ok()
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------------------------
// RFC 6902 JSON patch
// ---------------------------------------------------------------------------------------------

/// Why one JSON patch operation could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpFailure {
    /// The path does not exist.
    #[error("path not found")]
    NotFound,
    /// The `from` path of a move or copy does not exist.
    #[error("\"from\" path not found")]
    FromNotFound,
    /// The parent of the path (everything but its last token) does not exist.
    #[error("the parent of the path does not exist")]
    ParentNotFound,
    /// The parent of the path is a scalar.
    #[error("the parent of the path is neither a mapping nor a list")]
    NotAContainer,
    /// A token used on a list is not an array index.
    #[error("{0:?} is not a list index (digits without leading zeros, or \"-\")")]
    BadIndex(String),
    /// A list index past the end.
    #[error("list index {index} is out of bounds (the list has {len} elements)")]
    OutOfBounds {
        /// The index.
        index: usize,
        /// The list's length.
        len: usize,
    },
    /// `-` names the element after the last one, which only `add` can use.
    #[error("\"-\" names the element after the end of the list, which does not exist")]
    PastTheEnd,
    /// The whole document cannot be removed.
    #[error("the whole document cannot be removed")]
    RemoveRoot,
    /// `move` into one of the moved value's own children.
    #[error("a value cannot be moved into one of its own children")]
    MoveIntoChild,
    /// `test` found a different value. The value found is not quoted: it may come from a Secret.
    #[error("the value at the path differs from the expected one")]
    TestFailed,
}

/// A JSON patch that is malformed or failed to apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPatchError {
    /// The patch is not a list.
    #[error("a JSON patch must be a list of operations")]
    NotAList,
    /// An operation is malformed.
    #[error("operation [{index}] is invalid: {reason}")]
    Malformed {
        /// Index of the operation in the patch (from 0).
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// An operation could not be applied; the document is left unchanged.
    #[error("operation [{index}] ({operation}) failed: {failure}")]
    Failed {
        /// Index of the operation in the patch (from 0).
        index: usize,
        /// The operation and its paths, e.g. `replace /spec/replicas`.
        operation: String,
        /// Why.
        failure: OpFailure,
    },
}

/// Reads one operation into the crate's type. Its serde decoding accepts the same operations,
/// but its messages are serde's (``missing field `path` ``) and do not say which operation.
fn decode_operation(index: usize, v: &Value) -> Result<PatchOperation, JsonPatchError> {
    let malformed = |reason: String| JsonPatchError::Malformed { index, reason };
    let m = v
        .as_object()
        .ok_or_else(|| malformed("an operation must be a mapping".into()))?;
    let pointer = |member: &str| -> Result<PointerBuf, JsonPatchError> {
        let text = m
            .get(member)
            .ok_or_else(|| malformed(format!("it has no {member:?}")))?
            .as_str()
            .ok_or_else(|| malformed(format!("{member:?} must be a string")))?;
        Pointer::parse(text)
            .map(|p| p.0)
            .map_err(|e| malformed(e.to_string()))
    };
    // A present `value: null` is a real value; only a missing member is an error.
    let value = || {
        m.get("value")
            .cloned()
            .ok_or_else(|| malformed("it has no \"value\"".into()))
    };
    let op = m
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("it has no \"op\" string".into()))?;
    Ok(match op {
        "add" => PatchOperation::Add(AddOperation {
            path: pointer("path")?,
            value: value()?,
        }),
        "remove" => PatchOperation::Remove(RemoveOperation {
            path: pointer("path")?,
        }),
        "replace" => PatchOperation::Replace(ReplaceOperation {
            path: pointer("path")?,
            value: value()?,
        }),
        "move" => PatchOperation::Move(MoveOperation {
            from: pointer("from")?,
            path: pointer("path")?,
        }),
        "copy" => PatchOperation::Copy(CopyOperation {
            from: pointer("from")?,
            path: pointer("path")?,
        }),
        "test" => PatchOperation::Test(TestOperation {
            path: pointer("path")?,
            value: value()?,
        }),
        other => {
            return Err(malformed(format!(
                "unknown op {other:?} (expected add, remove, replace, move, copy or test)"
            )));
        }
    })
}

/// An operation and its paths for messages, e.g. `move from /a to /b`; never its value.
fn describe_operation(op: &PatchOperation) -> String {
    match op {
        PatchOperation::Add(o) => format!("add {}", o.path),
        PatchOperation::Remove(o) => format!("remove {}", o.path),
        PatchOperation::Replace(o) => format!("replace {}", o.path),
        PatchOperation::Move(o) => format!("move from {} to {}", o.from, o.path),
        PatchOperation::Copy(o) => format!("copy from {} to {}", o.from, o.path),
        PatchOperation::Test(o) => format!("test {}", o.path),
    }
}

/// Applies one operation. On failure `doc` may be half changed (the crate's `move` removes
/// before it adds), so the caller works on a copy.
fn apply_operation(doc: &mut Value, op: &PatchOperation) -> Result<(), OpFailure> {
    if let PatchOperation::Test(t) = op {
        // The crate compares with `==`, under which `1` and `1.0` differ; RFC 6902 section 4.6
        // says numbers are equal when their values are.
        let found = t
            .path
            .resolve(doc)
            .map_err(|e| resolve_failure(&t.path, &e))?;
        return if json_equal(found, &t.value) {
            Ok(())
        } else {
            Err(OpFailure::TestFailed)
        };
    }
    json_patch::patch_unsafe(doc, slice::from_ref(op)).map_err(|e| diagnose(doc, op, &e.kind))
}

/// Why `op` failed, which the crate says only as "path is invalid" or "\"from\" path is
/// invalid". `doc` is as the failing step saw it: a failing operation changes nothing, except
/// a `move` whose add fails after its remove, and that add saw the document as it is now.
fn diagnose(doc: &Value, op: &PatchOperation, kind: &PatchErrorKind) -> OpFailure {
    let from_failure = |f: OpFailure| match f {
        OpFailure::NotFound => OpFailure::FromNotFound,
        other => other,
    };
    match (kind, op) {
        (PatchErrorKind::CannotMoveInsideItself, _) => OpFailure::MoveIntoChild,
        (PatchErrorKind::TestFailed, _) => OpFailure::TestFailed,
        (PatchErrorKind::InvalidFromPointer, PatchOperation::Move(o)) => {
            from_failure(removal_failure(doc, &o.from))
        }
        (PatchErrorKind::InvalidFromPointer, PatchOperation::Copy(o)) => {
            from_failure(lookup_failure(doc, &o.from))
        }
        (_, PatchOperation::Add(AddOperation { path, .. }))
        | (_, PatchOperation::Move(MoveOperation { path, .. }))
        | (_, PatchOperation::Copy(CopyOperation { path, .. })) => insertion_failure(doc, path),
        (_, PatchOperation::Remove(o)) => removal_failure(doc, &o.path),
        (_, op) => lookup_failure(doc, op.path()),
    }
}

/// Why an existing value cannot be reached (the crate and `jsonptr` resolve alike, so `NotFound`
/// for a path that resolves is only a fallback).
fn lookup_failure(doc: &Value, path: &jsonptr::Pointer) -> OpFailure {
    path.resolve(doc)
        .map_or_else(|e| resolve_failure(path, &e), |_| OpFailure::NotFound)
}

/// Why a value cannot be removed.
fn removal_failure(doc: &Value, path: &jsonptr::Pointer) -> OpFailure {
    if path.is_root() {
        OpFailure::RemoveRoot
    } else {
        lookup_failure(doc, path)
    }
}

/// Why a value cannot be added at `path`: its parent must exist and, when it is a list, the last
/// token must be an index up to the length, or `-`.
fn insertion_failure(doc: &Value, path: &jsonptr::Pointer) -> OpFailure {
    let Some((parent, last)) = path.split_back() else {
        return OpFailure::NotFound;
    };
    match parent.resolve(doc) {
        Err(e) => match resolve_failure(parent, &e) {
            OpFailure::NotFound => OpFailure::ParentNotFound,
            other => other,
        },
        Ok(Value::Array(a)) => match last.to_index() {
            Err(_) => OpFailure::BadIndex(last.decoded().into_owned()),
            Ok(i) => match i.for_len_incl(a.len()) {
                Err(OutOfBoundsError { index, length }) => {
                    OpFailure::OutOfBounds { index, len: length }
                }
                Ok(_) => OpFailure::NotFound,
            },
        },
        Ok(Value::Object(_)) => OpFailure::NotFound,
        Ok(_) => OpFailure::NotAContainer,
    }
}

fn resolve_failure(path: &jsonptr::Pointer, e: &ResolveError) -> OpFailure {
    let token = || {
        path.get(e.position())
            .map(|t| t.decoded().into_owned())
            .unwrap_or_default()
    };
    match e {
        ResolveError::NotFound { .. } | ResolveError::Unreachable { .. } => OpFailure::NotFound,
        ResolveError::FailedToParseIndex { .. } => OpFailure::BadIndex(token()),
        ResolveError::OutOfBounds { .. } if token() == "-" => OpFailure::PastTheEnd,
        ResolveError::OutOfBounds { source, .. } => OpFailure::OutOfBounds {
            index: source.index,
            len: source.length,
        },
    }
}

/// Equality as RFC 6902's `test` defines it: numbers compare by value (`1` equals `1.0`),
/// mappings regardless of member order. (The `json-patch` crate's `test` uses `==`, under which
/// `1` and `1.0` differ.)
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                matches!((x.as_f64(), y.as_f64()), (Some(x), Some(y)) if x == y)
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// A decoded RFC 6902 JSON patch.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPatch {
    operations: Vec<PatchOperation>,
}

impl JsonPatch {
    /// Decodes a patch from its JSON form (a list of operation mappings).
    pub fn from_value(v: &Value) -> Result<JsonPatch, JsonPatchError> {
        let list = v.as_array().ok_or(JsonPatchError::NotAList)?;
        let operations = list
            .iter()
            .enumerate()
            .map(|(i, op)| decode_operation(i, op))
            .collect::<Result<_, _>>()?;
        Ok(JsonPatch { operations })
    }

    /// The operations, in order (the `json-patch` crate's type).
    pub fn operations(&self) -> &[PatchOperation] {
        &self.operations
    }

    /// Applies every operation in order. Atomic: when one fails, `doc` is left as it was.
    pub fn apply(&self, doc: &mut Value) -> Result<(), JsonPatchError> {
        // Working on a copy is what makes the patch atomic: the crate's own rollback
        // (`json_patch::patch`) cannot restore the value of a `move` whose add failed after its
        // remove. Rendered objects are small.
        let mut work = doc.clone();
        for (index, op) in self.operations.iter().enumerate() {
            apply_operation(&mut work, op).map_err(|failure| JsonPatchError::Failed {
                index,
                operation: describe_operation(op),
                failure,
            })?;
        }
        *doc = work;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------------------------

/// A label selector that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label selector {selector:?}: {reason}")]
pub struct SelectorError {
    /// The selector as written.
    pub selector: String,
    /// What is wrong.
    pub reason: String,
}

/// Operator of one label selector requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorOp {
    /// `key=value` or `key==value`: the label exists with that value.
    Equals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (a,b)`: the label exists with one of the values.
    In,
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn,
    /// `key`: the label exists.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>n`: the label is an integer greater than n.
    GreaterThan,
    /// `key<n`: the label is an integer less than n.
    LessThan,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: SelectorOp,
    /// Values (none for Exists and DoesNotExist, one for the comparisons).
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let value = labels
            .and_then(|l| l.get(&self.key))
            .and_then(Value::as_str);
        let listed = || value.is_some_and(|v| self.values.iter().any(|x| x == v));
        let compare = |f: fn(i64, i64) -> bool| {
            let bound = self.values.first().and_then(|b| b.parse::<i64>().ok());
            match (value.and_then(|v| v.parse::<i64>().ok()), bound) {
                (Some(v), Some(b)) => f(v, b),
                _ => false,
            }
        };
        match self.op {
            SelectorOp::Equals | SelectorOp::In => listed(),
            SelectorOp::NotEquals | SelectorOp::NotIn => !listed(),
            SelectorOp::Exists => value.is_some(),
            SelectorOp::DoesNotExist => value.is_none(),
            SelectorOp::GreaterThan => compare(|v, b| v > b),
            SelectorOp::LessThan => compare(|v, b| v < b),
        }
    }
}

/// A Kubernetes label selector in kubectl's syntax: requirements separated by commas, all of
/// which must hold: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`.
/// The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    In,
    NotIn,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Ident(s) => write!(f, "{s:?}"),
            Token::Not => f.write_str("\"!\""),
            Token::Eq => f.write_str("\"=\""),
            Token::DoubleEq => f.write_str("\"==\""),
            Token::NotEq => f.write_str("\"!=\""),
            Token::In => f.write_str("\"in\""),
            Token::NotIn => f.write_str("\"notin\""),
            Token::Gt => f.write_str("\">\""),
            Token::Lt => f.write_str("\"<\""),
            Token::Comma => f.write_str("\",\""),
            Token::Open => f.write_str("\"(\""),
            Token::Close => f.write_str("\")\""),
        }
    }
}

fn describe(t: Option<&Token>) -> String {
    t.map_or_else(|| "the end".to_string(), Token::to_string)
}

fn lex(s: &str) -> Vec<Token> {
    const SPECIAL: &[char] = &['!', '=', ',', '(', ')', '<', '>'];
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if SPECIAL.contains(&c) {
            chars.next();
            // Only `!` and `=` combine with a following `=` (`!=`, `==`).
            let doubled = matches!(c, '!' | '=') && chars.next_if_eq(&'=').is_some();
            out.push(match (c, doubled) {
                ('!', true) => Token::NotEq,
                ('!', false) => Token::Not,
                ('=', true) => Token::DoubleEq,
                ('=', false) => Token::Eq,
                (',', _) => Token::Comma,
                ('(', _) => Token::Open,
                (')', _) => Token::Close,
                ('>', _) => Token::Gt,
                _ => Token::Lt,
            });
            continue;
        }
        let mut word = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && !SPECIAL.contains(c)) {
            word.push(c);
        }
        out.push(match word.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Ident(word),
        });
    }
    out
}

fn valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn valid_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !valid_dns_subdomain(p)
    {
        return Err(format!(
            "label key {key:?}: the prefix must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"
        ));
    }
    if !valid_name(name) {
        return Err(format!(
            "label key {key:?}: the name must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || valid_name(value) {
        Ok(())
    } else {
        Err(format!(
            "label value {value:?}: must be empty or 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
}

struct SelectorParser {
    tokens: Vec<Token>,
    pos: usize,
}

impl SelectorParser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let negated = self.peek() == Some(&Token::Not);
        if negated {
            self.pos += 1;
        }
        let key = match self.next() {
            Some(Token::Ident(k)) => k,
            other => {
                return Err(format!(
                    "expected a label key, found {}",
                    describe(other.as_ref())
                ));
            }
        };
        check_key(&key)?;
        if negated {
            return Ok(Requirement {
                key,
                op: SelectorOp::DoesNotExist,
                values: Vec::new(),
            });
        }
        let op = match self.peek() {
            None | Some(Token::Comma) => {
                return Ok(Requirement {
                    key,
                    op: SelectorOp::Exists,
                    values: Vec::new(),
                });
            }
            Some(Token::Eq | Token::DoubleEq) => SelectorOp::Equals,
            Some(Token::NotEq) => SelectorOp::NotEquals,
            Some(Token::In) => SelectorOp::In,
            Some(Token::NotIn) => SelectorOp::NotIn,
            Some(Token::Gt) => SelectorOp::GreaterThan,
            Some(Token::Lt) => SelectorOp::LessThan,
            Some(other) => {
                return Err(format!(
                    "expected an operator (=, ==, !=, in, notin, >, <) or \",\" after {key:?}, found {other}"
                ));
            }
        };
        self.pos += 1;
        let values = match op {
            SelectorOp::In | SelectorOp::NotIn => self.value_set(&key)?,
            SelectorOp::GreaterThan | SelectorOp::LessThan => match self.next() {
                Some(Token::Ident(v)) if v.parse::<i64>().is_ok() => vec![v],
                other => {
                    return Err(format!(
                        "{key:?}: \">\" and \"<\" need an integer, found {}",
                        describe(other.as_ref())
                    ));
                }
            },
            _ => match self.peek() {
                // `key=` selects the empty value, as kubectl allows.
                None | Some(Token::Comma) => vec![String::new()],
                Some(Token::Ident(_)) => match self.next() {
                    Some(Token::Ident(v)) => vec![v],
                    _ => Vec::new(),
                },
                Some(other) => {
                    return Err(format!("expected a value for {key:?}, found {other}"));
                }
            },
        };
        // Comparison bounds are integers (checked above), not label values.
        if !matches!(op, SelectorOp::GreaterThan | SelectorOp::LessThan) {
            for v in &values {
                check_value(v)?;
            }
        }
        Ok(Requirement { key, op, values })
    }

    fn value_set(&mut self, key: &str) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            other => {
                return Err(format!(
                    "expected \"(\" after in/notin for {key:?}, found {}",
                    describe(other.as_ref())
                ));
            }
        }
        let mut values = Vec::new();
        loop {
            // An empty slot (`(a,,b)`, `(a,)`) is the empty value, as kubectl reads it.
            let value = match self.peek() {
                Some(Token::Ident(_)) => match self.next() {
                    Some(Token::Ident(v)) => v,
                    _ => String::new(),
                },
                Some(Token::Comma | Token::Close) => String::new(),
                other => {
                    return Err(format!(
                        "expected a value or \")\" in the set of {key:?}, found {}",
                        describe(other)
                    ));
                }
            };
            values.push(value);
            match self.next() {
                Some(Token::Comma) => continue,
                Some(Token::Close) => break,
                other => {
                    return Err(format!(
                        "expected \",\" or \")\" in the set of {key:?}, found {}",
                        describe(other.as_ref())
                    ));
                }
            }
        }
        if values.len() == 1 && values[0].is_empty() {
            return Err(format!("the set of values of {key:?} is empty"));
        }
        Ok(values)
    }
}

impl LabelSelector {
    /// Parses a selector; the errors say which part is wrong.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let err = |reason: String| SelectorError {
            selector: text.to_string(),
            reason,
        };
        let mut p = SelectorParser {
            tokens: lex(text),
            pos: 0,
        };
        let mut requirements = Vec::new();
        if p.tokens.is_empty() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(p.requirement().map_err(err)?);
            match p.next() {
                None => break,
                Some(Token::Comma) => {}
                Some(other) => {
                    return Err(err(format!(
                        "expected \",\" or the end after a requirement, found {other}"
                    )));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// The requirements, in the order written.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether a label set (a `metadata.labels` mapping, or none) satisfies every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

// ---------------------------------------------------------------------------------------------
// Targets
// ---------------------------------------------------------------------------------------------

/// Splits an apiVersion into group and version; the core group is `""` (`v1` → `("", "v1")`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

fn str_at<'a>(o: &'a Value, pointer: &str) -> Option<&'a str> {
    o.pointer(pointer).and_then(Value::as_str)
}

/// A compiled `PatchSelector`: every field that is set must match exactly (see the module
/// documentation on empty strings); an object without a namespace has namespace `""`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<LabelSelector>,
}

impl Target {
    /// Compiles a selector, parsing its label selector.
    pub fn new(sel: &PatchSelector) -> Result<Target, SelectorError> {
        Ok(Target {
            group: sel.group.clone(),
            version: sel.version.clone(),
            kind: sel.kind.clone(),
            name: sel.name.clone(),
            namespace: sel.namespace.clone(),
            labels: sel
                .label_selector
                .as_deref()
                .map(LabelSelector::parse)
                .transpose()?,
        })
    }

    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &Value) -> bool {
        let (group, version) = split_api_version(str_at(obj, "/apiVersion").unwrap_or(""));
        let field = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        field(&self.group, group)
            && field(&self.version, version)
            && field(&self.kind, str_at(obj, "/kind").unwrap_or(""))
            && field(&self.name, str_at(obj, "/metadata/name").unwrap_or(""))
            && field(
                &self.namespace,
                str_at(obj, "/metadata/namespace").unwrap_or(""),
            )
            && self.labels.as_ref().is_none_or(|l| {
                l.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
            })
    }
}

// ---------------------------------------------------------------------------------------------
// spec.patches and spec.manifestPatches
// ---------------------------------------------------------------------------------------------

/// A patch text that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchParseError {
    /// Not YAML (or JSON).
    #[error("not valid YAML: {0}")]
    Yaml(String),
    /// Nothing in it.
    #[error("the patch is empty")]
    Empty,
    /// A `patches` entry that is neither a list nor a mapping.
    #[error(
        "a patch must be a list of JSON patch operations (RFC 6902) or a mapping (merge patch, RFC 7396)"
    )]
    NotListOrMapping,
    /// A `manifestPatches` entry that is not a mapping.
    #[error("a manifest patch must be a mapping (merge patch, RFC 7396)")]
    NotAMapping,
    /// A `manifestPatches` entry without `kind`.
    #[error("a manifest patch must give the kind of the objects it patches")]
    NoKind,
    /// A selecting field that is not a string.
    #[error("{0} must be a string")]
    NotAString(&'static str),
    /// A malformed JSON patch.
    #[error("{0}")]
    JsonPatch(JsonPatchError),
}

fn parse_yaml(text: &str) -> Result<Value, PatchParseError> {
    let v: Value = capi_yaml::from_str(text).map_err(|e| PatchParseError::Yaml(e.to_string()))?;
    if v.is_null() {
        return Err(PatchParseError::Empty);
    }
    Ok(v)
}

/// The patch of one `patches` entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// A YAML/JSON list: RFC 6902 operations.
    Json(JsonPatch),
    /// A YAML/JSON mapping: an RFC 7396 merge patch.
    Merge(Value),
}

impl Patch {
    /// Reads a patch text (YAML, so JSON too): a list is a JSON patch, a mapping a merge patch.
    pub fn parse(text: &str) -> Result<Patch, PatchParseError> {
        match parse_yaml(text)? {
            v @ Value::Array(_) => JsonPatch::from_value(&v)
                .map(Patch::Json)
                .map_err(PatchParseError::JsonPatch),
            v @ Value::Object(_) => Ok(Patch::Merge(v)),
            _ => Err(PatchParseError::NotListOrMapping),
        }
    }

    /// Applies the patch to one object; atomic.
    pub fn apply(&self, obj: &mut Value) -> Result<(), JsonPatchError> {
        match self {
            Patch::Json(p) => p.apply(obj),
            Patch::Merge(m) => {
                merge_patch(obj, m);
                Ok(())
            }
        }
    }
}

/// One legacy `manifestPatches` entry: a merge patch applied to every object of its `kind`
/// whose `apiVersion`, `metadata.name` and `metadata.namespace` equal the patch's, each compared
/// only when the patch gives it. This fixes the Go operator, where a patch without apiVersion
/// never matches and a given apiVersion is not compared.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestPatch {
    patch: Value,
    kind: String,
    api_version: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

impl ManifestPatch {
    /// Reads a manifest patch (YAML or JSON mapping with at least `kind`).
    pub fn parse(text: &str) -> Result<ManifestPatch, PatchParseError> {
        let patch = parse_yaml(text)?;
        if !patch.is_object() {
            return Err(PatchParseError::NotAMapping);
        }
        let field = |pointer: &str, what: &'static str| match patch.pointer(pointer) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(PatchParseError::NotAString(what)),
        };
        let kind = field("/kind", "kind")?.ok_or(PatchParseError::NoKind)?;
        Ok(ManifestPatch {
            api_version: field("/apiVersion", "apiVersion")?,
            name: field("/metadata/name", "metadata.name")?,
            namespace: field("/metadata/namespace", "metadata.namespace")?,
            kind,
            patch,
        })
    }

    /// Whether the patch applies to `obj`.
    pub fn matches(&self, obj: &Value) -> bool {
        let field = |want: &Option<String>, pointer: &str| {
            want.as_deref()
                .is_none_or(|w| str_at(obj, pointer).unwrap_or("") == w)
        };
        str_at(obj, "/kind") == Some(self.kind.as_str())
            && field(&self.api_version, "/apiVersion")
            && field(&self.name, "/metadata/name")
            && field(&self.namespace, "/metadata/namespace")
    }

    /// Merges the patch into `obj`.
    pub fn apply(&self, obj: &mut Value) {
        merge_patch(obj, &self.patch);
    }
}

/// A patch of `spec.patches`, or a `spec.manifestPatches` entry, that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// Both fields are set (the CRD refuses this too; kept for objects that bypassed it).
    #[error("cannot use both spec.patches and spec.manifestPatches; choose one")]
    BothSet,
    /// A `patches` entry cannot be read.
    #[error("spec.patches[{index}].patch: {error}")]
    InvalidPatch {
        /// Index of the entry (from 0).
        index: usize,
        /// What is wrong.
        error: PatchParseError,
    },
    /// A `patches` entry's label selector cannot be parsed.
    #[error("spec.patches[{index}].target.labelSelector: {error}")]
    InvalidSelector {
        /// Index of the entry (from 0).
        index: usize,
        /// What is wrong.
        error: SelectorError,
    },
    /// A `patches` entry failed on an object.
    #[error("spec.patches[{index}] on {object}: {error}")]
    Failed {
        /// Index of the entry (from 0).
        index: usize,
        /// The object, as `Kind namespace/name`.
        object: String,
        /// What failed.
        error: JsonPatchError,
    },
    /// A `manifestPatches` entry cannot be read.
    #[error("spec.manifestPatches[{index}]: {error}")]
    InvalidManifestPatch {
        /// Index of the entry (from 0).
        index: usize,
        /// What is wrong.
        error: PatchParseError,
    },
}

/// `Kind namespace/name` (or `Kind name` when cluster-scoped), for messages.
pub fn describe_object(obj: &Value) -> String {
    let kind = str_at(obj, "/kind").unwrap_or("?");
    let name = str_at(obj, "/metadata/name").unwrap_or("?");
    match str_at(obj, "/metadata/namespace").filter(|n| !n.is_empty()) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The patches of a provider spec, read and validated once, ready to apply to rendered objects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecPatches {
    targeted: Vec<(Option<Target>, Patch)>,
    manifest: Vec<ManifestPatch>,
}

impl SpecPatches {
    /// Reads `spec.patches` and `spec.manifestPatches`; at most one of them may be non-empty.
    pub fn parse(
        patches: &[TargetedPatch],
        manifest_patches: &[String],
    ) -> Result<SpecPatches, PatchError> {
        if !patches.is_empty() && !manifest_patches.is_empty() {
            return Err(PatchError::BothSet);
        }
        let targeted = patches
            .iter()
            .enumerate()
            .map(|(index, p)| {
                let target = p
                    .target
                    .as_ref()
                    .map(Target::new)
                    .transpose()
                    .map_err(|error| PatchError::InvalidSelector { index, error })?;
                let patch = Patch::parse(&p.patch)
                    .map_err(|error| PatchError::InvalidPatch { index, error })?;
                Ok((target, patch))
            })
            .collect::<Result<_, _>>()?;
        let manifest = manifest_patches
            .iter()
            .enumerate()
            .map(|(index, text)| {
                ManifestPatch::parse(text)
                    .map_err(|error| PatchError::InvalidManifestPatch { index, error })
            })
            .collect::<Result<_, _>>()?;
        Ok(SpecPatches { targeted, manifest })
    }

    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.targeted.is_empty() && self.manifest.is_empty()
    }

    /// Applies every patch in order, each to every object it selects. A failing JSON patch
    /// leaves that object unchanged and stops with an error.
    pub fn apply(&self, objects: &mut [Value]) -> Result<(), PatchError> {
        for (index, mp) in self.manifest.iter().enumerate() {
            let mut hits = 0usize;
            for o in objects.iter_mut().filter(|o| mp.matches(o)) {
                mp.apply(o);
                hits += 1;
            }
            log_hits("spec.manifestPatches", index, hits);
        }
        for (index, (target, patch)) in self.targeted.iter().enumerate() {
            let mut hits = 0usize;
            for o in objects
                .iter_mut()
                .filter(|o| target.as_ref().is_none_or(|t| t.matches(o)))
            {
                patch.apply(o).map_err(|error| PatchError::Failed {
                    index,
                    object: describe_object(o),
                    error,
                })?;
                hits += 1;
            }
            log_hits("spec.patches", index, hits);
        }
        Ok(())
    }
}

fn log_hits(field: &str, index: usize, hits: usize) {
    if hits == 0 {
        // Not an error (the Go operator accepts it too), but almost always a selector mistake.
        tracing::warn!("{field}[{index}] matched no object");
    } else {
        tracing::debug!("{field}[{index}] patched {hits} object(s)");
    }
}

/// Identity of an object for duplicate detection: group, kind, namespace, name.
pub fn object_identity(obj: &Value) -> (String, String, String, String) {
    let (group, _) = split_api_version(str_at(obj, "/apiVersion").unwrap_or(""));
    (
        group.to_string(),
        str_at(obj, "/kind").unwrap_or("").to_string(),
        str_at(obj, "/metadata/namespace").unwrap_or("").to_string(),
        str_at(obj, "/metadata/name").unwrap_or("").to_string(),
    )
}

/// Identities of `objects`, for checking that added objects do not collide with them.
pub fn identities(objects: &[Value]) -> HashSet<(String, String, String, String)> {
    objects.iter().map(object_identity).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops(v: Value) -> JsonPatch {
        JsonPatch::from_value(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    /// (name, document, patch, expected result or None for an error).
    fn rfc6902_cases() -> Vec<(&'static str, Value, Value, Option<Value>)> {
        vec![
            (
                "add an object member",
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz", "value": "qux"}]),
                Some(json!({"foo": "bar", "baz": "qux"})),
            ),
            (
                "add replaces an existing member",
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/foo", "value": 1}]),
                Some(json!({"foo": 1})),
            ),
            (
                "add into an array",
                json!({"foo": ["bar", "baz"]}),
                json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
                Some(json!({"foo": ["bar", "qux", "baz"]})),
            ),
            (
                "add at the array's length appends",
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
                Some(json!({"foo": ["bar", "qux"]})),
            ),
            (
                "add with - appends",
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]),
                Some(json!({"foo": ["bar", ["abc", "def"]]})),
            ),
            (
                "add a nested member",
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}]),
                Some(json!({"foo": "bar", "child": {"grandchild": {}}})),
            ),
            (
                "add null is a value",
                json!({}),
                json!([{"op": "add", "path": "/n", "value": null}]),
                Some(json!({"n": null})),
            ),
            (
                "add replaces the whole document",
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "", "value": [1]}]),
                Some(json!([1])),
            ),
            (
                "add past the end of an array fails",
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/2", "value": "x"}]),
                None,
            ),
            (
                "add with a missing parent fails",
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz/bat", "value": "qux"}]),
                None,
            ),
            (
                "add under a scalar fails",
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/foo/x", "value": 1}]),
                None,
            ),
            (
                "leading zeros are not an index",
                json!({"foo": ["a", "b"]}),
                json!([{"op": "add", "path": "/foo/01", "value": "x"}]),
                None,
            ),
            (
                "a word is not an index",
                json!({"foo": ["a"]}),
                json!([{"op": "add", "path": "/foo/bar", "value": "x"}]),
                None,
            ),
            (
                "remove an object member",
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "remove", "path": "/baz"}]),
                Some(json!({"foo": "bar"})),
            ),
            (
                "remove an array element",
                json!({"foo": ["bar", "qux", "baz"]}),
                json!([{"op": "remove", "path": "/foo/1"}]),
                Some(json!({"foo": ["bar", "baz"]})),
            ),
            (
                "remove a missing member fails",
                json!({"foo": "bar"}),
                json!([{"op": "remove", "path": "/baz"}]),
                None,
            ),
            (
                "remove with - fails",
                json!({"foo": ["bar"]}),
                json!([{"op": "remove", "path": "/foo/-"}]),
                None,
            ),
            (
                "remove the whole document fails",
                json!({"foo": "bar"}),
                json!([{"op": "remove", "path": ""}]),
                None,
            ),
            (
                "replace a value",
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "replace", "path": "/baz", "value": "boo"}]),
                Some(json!({"baz": "boo", "foo": "bar"})),
            ),
            (
                "replace an array element",
                json!({"foo": [1, 2]}),
                json!([{"op": "replace", "path": "/foo/0", "value": 9}]),
                Some(json!({"foo": [9, 2]})),
            ),
            (
                "replace the whole document",
                json!({"foo": "bar"}),
                json!([{"op": "replace", "path": "", "value": {"baz": 1}}]),
                Some(json!({"baz": 1})),
            ),
            (
                "replace a missing path fails",
                json!({"foo": "bar"}),
                json!([{"op": "replace", "path": "/baz", "value": 1}]),
                None,
            ),
            (
                "replace out of bounds fails",
                json!({"foo": [1]}),
                json!([{"op": "replace", "path": "/foo/1", "value": 1}]),
                None,
            ),
            (
                "move a member",
                json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
                json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]),
                Some(json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}})),
            ),
            (
                "move an array element",
                json!({"foo": ["all", "grass", "cows", "eat"]}),
                json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
                Some(json!({"foo": ["all", "cows", "eat", "grass"]})),
            ),
            (
                "move onto itself is a no-op",
                json!({"foo": 1}),
                json!([{"op": "move", "from": "/foo", "path": "/foo"}]),
                Some(json!({"foo": 1})),
            ),
            (
                "move into its own child fails",
                json!({"foo": {"bar": 1}}),
                json!([{"op": "move", "from": "/foo", "path": "/foo/bar/x"}]),
                None,
            ),
            (
                // The crate removes the value before it fails to add it; the copy we work on keeps
                // the document whole.
                "move to a missing parent fails and keeps the value",
                json!({"foo": 1}),
                json!([{"op": "move", "from": "/foo", "path": "/nope/bar"}]),
                None,
            ),
            (
                "move from a missing path fails",
                json!({"foo": 1}),
                json!([{"op": "move", "from": "/nope", "path": "/bar"}]),
                None,
            ),
            (
                "copy a value",
                json!({"foo": {"a": [1]}}),
                json!([{"op": "copy", "from": "/foo/a", "path": "/bar"}]),
                Some(json!({"foo": {"a": [1]}, "bar": [1]})),
            ),
            (
                "copy appends with -",
                json!({"foo": [1, 2]}),
                json!([{"op": "copy", "from": "/foo/0", "path": "/foo/-"}]),
                Some(json!({"foo": [1, 2, 1]})),
            ),
            (
                "copy from a missing path fails",
                json!({"foo": 1}),
                json!([{"op": "copy", "from": "/nope", "path": "/bar"}]),
                None,
            ),
            (
                "test succeeds",
                json!({"baz": "qux", "foo": ["a", 2, "c"]}),
                json!([
                    {"op": "test", "path": "/baz", "value": "qux"},
                    {"op": "test", "path": "/foo/1", "value": 2}
                ]),
                Some(json!({"baz": "qux", "foo": ["a", 2, "c"]})),
            ),
            (
                "test compares numbers by value and mappings unordered",
                json!({"n": 1, "m": {"a": 1, "b": 2}}),
                json!([
                    {"op": "test", "path": "/n", "value": 1.0},
                    {"op": "test", "path": "/m", "value": {"b": 2, "a": 1}}
                ]),
                Some(json!({"n": 1, "m": {"a": 1, "b": 2}})),
            ),
            (
                "test fails on a different value",
                json!({"baz": "qux"}),
                json!([{"op": "test", "path": "/baz", "value": "bar"}]),
                None,
            ),
            (
                "test fails on a different type",
                json!({"baz": "1"}),
                json!([{"op": "test", "path": "/baz", "value": 1}]),
                None,
            ),
            (
                "test of a missing path fails",
                json!({}),
                json!([{"op": "test", "path": "/baz", "value": null}]),
                None,
            ),
            (
                "~1 and ~0 escapes",
                json!({"/": 9, "~1": 10, "a/b": {"m~n": 8}}),
                json!([
                    {"op": "test", "path": "/~01", "value": 10},
                    {"op": "test", "path": "/~1", "value": 9},
                    {"op": "replace", "path": "/a~1b/m~0n", "value": 1}
                ]),
                Some(json!({"/": 9, "~1": 10, "a/b": {"m~n": 1}})),
            ),
            (
                "the empty key",
                json!({"": 0}),
                json!([{"op": "replace", "path": "/", "value": 1}]),
                Some(json!({"": 1})),
            ),
            (
                "annotation keys with slashes",
                json!({"metadata": {"annotations": {}}}),
                json!([{"op": "add", "path": "/metadata/annotations/example.com~1x", "value": "y"}]),
                Some(json!({"metadata": {"annotations": {"example.com/x": "y"}}})),
            ),
            (
                "a failing operation rolls back the earlier ones",
                json!({"foo": "bar", "list": [1]}),
                json!([
                    {"op": "add", "path": "/baz", "value": 1},
                    {"op": "remove", "path": "/list/0"},
                    {"op": "test", "path": "/foo", "value": "other"}
                ]),
                None,
            ),
        ]
    }

    #[test]
    fn rfc6902_operations() {
        for (name, doc, patch, expected) in rfc6902_cases() {
            let p = ops(patch);
            let mut got = doc.clone();
            let result = p.apply(&mut got);
            match expected {
                Some(want) => {
                    assert_eq!(result, Ok(()), "{name}");
                    assert_eq!(got, want, "{name}");
                }
                None => {
                    assert!(result.is_err(), "{name}: expected an error, got {got}");
                    assert_eq!(got, doc, "{name}: the document must be unchanged");
                }
            }
        }
    }

    #[test]
    fn rfc6902_error_messages_name_the_operation() {
        let p = ops(json!([
            {"op": "test", "path": "/a", "value": 1},
            {"op": "replace", "path": "/spec/replicas", "value": 3}
        ]));
        let mut doc = json!({"a": 1, "spec": {}});
        assert_eq!(
            p.apply(&mut doc).map_err(|e| e.to_string()),
            Err("operation [1] (replace /spec/replicas) failed: path not found".into())
        );
        let p = ops(json!([{"op": "test", "path": "/secret", "value": "guess"}]));
        let err = p
            .apply(&mut json!({"secret": "hunter2"}))
            .map_err(|e| e.to_string());
        assert_eq!(
            err,
            Err(
                "operation [0] (test /secret) failed: the value at the path differs from the expected one"
                    .into()
            )
        );
        let p = ops(json!([{"op": "add", "path": "/l/5", "value": 1}]));
        assert_eq!(
            p.apply(&mut json!({"l": [1]})).map_err(|e| e.to_string()),
            Err("operation [0] (add /l/5) failed: list index 5 is out of bounds (the list has 1 elements)".into())
        );
        let p = ops(json!([{"op": "move", "from": "/x", "path": "/y"}]));
        assert_eq!(
            p.apply(&mut json!({})).map_err(|e| e.to_string()),
            Err("operation [0] (move from /x to /y) failed: \"from\" path not found".into())
        );
    }

    #[test]
    fn rfc6902_failures_say_why() {
        let doc = json!({"s": "x", "l": [1, 2], "m": {"a": 1}});
        // (operation, why it fails on doc)
        let cases = [
            (json!({"op": "remove", "path": "/m/b"}), OpFailure::NotFound),
            (
                json!({"op": "replace", "path": "/s/x", "value": 1}),
                OpFailure::NotFound,
            ),
            (
                json!({"op": "add", "path": "/n/a", "value": 1}),
                OpFailure::ParentNotFound,
            ),
            (
                json!({"op": "add", "path": "/s/a/b", "value": 1}),
                OpFailure::ParentNotFound,
            ),
            (
                json!({"op": "add", "path": "/s/a", "value": 1}),
                OpFailure::NotAContainer,
            ),
            (
                json!({"op": "add", "path": "/l/01", "value": 1}),
                OpFailure::BadIndex("01".into()),
            ),
            (
                json!({"op": "add", "path": "/l/+1", "value": 1}),
                OpFailure::BadIndex("+1".into()),
            ),
            (
                json!({"op": "add", "path": "/l/3", "value": 1}),
                OpFailure::OutOfBounds { index: 3, len: 2 },
            ),
            (
                json!({"op": "replace", "path": "/l/2", "value": 1}),
                OpFailure::OutOfBounds { index: 2, len: 2 },
            ),
            (
                json!({"op": "remove", "path": "/l/-"}),
                OpFailure::PastTheEnd,
            ),
            (
                json!({"op": "test", "path": "/l/-", "value": 1}),
                OpFailure::PastTheEnd,
            ),
            (
                json!({"op": "remove", "path": "/l/x"}),
                OpFailure::BadIndex("x".into()),
            ),
            (json!({"op": "remove", "path": ""}), OpFailure::RemoveRoot),
            (
                json!({"op": "move", "from": "", "path": ""}),
                OpFailure::RemoveRoot,
            ),
            (
                json!({"op": "move", "from": "/m", "path": "/m/a/b"}),
                OpFailure::MoveIntoChild,
            ),
            (
                json!({"op": "copy", "from": "/l/5", "path": "/c"}),
                OpFailure::OutOfBounds { index: 5, len: 2 },
            ),
            (
                json!({"op": "copy", "from": "/m/b", "path": "/c"}),
                OpFailure::FromNotFound,
            ),
            // The add of a move sees the list without the moved element.
            (
                json!({"op": "move", "from": "/l/0", "path": "/l/2"}),
                OpFailure::OutOfBounds { index: 2, len: 1 },
            ),
            (
                json!({"op": "test", "path": "/s", "value": "y"}),
                OpFailure::TestFailed,
            ),
        ];
        for (op, want) in cases {
            let mut got = doc.clone();
            let result = ops(json!([op])).apply(&mut got);
            assert!(
                matches!(&result, Err(JsonPatchError::Failed { failure, .. }) if *failure == want),
                "{op}: {result:?}"
            );
            assert_eq!(got, doc, "{op}");
        }
    }

    #[test]
    fn malformed_json_patches_are_refused() {
        let cases = [
            (
                json!({"op": "add"}),
                "a JSON patch must be a list of operations",
            ),
            (
                json!(["add"]),
                "operation [0] is invalid: an operation must be a mapping",
            ),
            (
                json!([{"path": "/a"}]),
                "operation [0] is invalid: it has no \"op\" string",
            ),
            (
                json!([{"op": "add", "path": "/a", "value": 1}, {"op": "frobnicate", "path": "/a"}]),
                "operation [1] is invalid: unknown op \"frobnicate\" (expected add, remove, replace, move, copy or test)",
            ),
            (
                json!([{"op": "add", "path": "/a"}]),
                "operation [0] is invalid: it has no \"value\"",
            ),
            (
                json!([{"op": "remove"}]),
                "operation [0] is invalid: it has no \"path\"",
            ),
            (
                json!([{"op": "copy", "path": "/a"}]),
                "operation [0] is invalid: it has no \"from\"",
            ),
            (
                json!([{"op": "remove", "path": 1}]),
                "operation [0] is invalid: \"path\" must be a string",
            ),
            (
                json!([{"op": "remove", "path": "a"}]),
                "operation [0] is invalid: JSON pointer \"a\" must be empty or start with \"/\"",
            ),
            (
                json!([{"op": "remove", "path": "/a~2"}]),
                "operation [0] is invalid: JSON pointer \"/a~2\" has a \"~\" not followed by 0 or 1",
            ),
        ];
        for (patch, want) in cases {
            assert_eq!(
                JsonPatch::from_value(&patch).map_err(|e| e.to_string()),
                Err(want.to_string()),
                "{patch}"
            );
        }
    }

    #[test]
    fn pointers() -> Result<(), PointerError> {
        let doc = json!({"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4,
            "i\\j": 5, "k\"l": 6, " ": 7, "m~n": 8});
        // RFC 6901 section 5.
        let cases = [
            ("", doc.clone()),
            ("/foo", json!(["bar", "baz"])),
            ("/foo/0", json!("bar")),
            ("/", json!(0)),
            ("/a~1b", json!(1)),
            ("/c%d", json!(2)),
            ("/e^f", json!(3)),
            ("/g|h", json!(4)),
            ("/i\\j", json!(5)),
            ("/k\"l", json!(6)),
            ("/ ", json!(7)),
            ("/m~0n", json!(8)),
        ];
        for (p, want) in cases {
            assert_eq!(Pointer::parse(p)?.get(&doc), Some(&want), "{p}");
        }
        assert_eq!(Pointer::parse("/foo/2")?.get(&doc), None);
        assert_eq!(Pointer::parse("/foo/-")?.get(&doc), None);
        assert_eq!(Pointer::parse("/~01")?.tokens(), ["~1".to_string()]);
        assert!(Pointer::parse("foo").is_err());
        assert!(Pointer::parse("/~").is_err());
        Ok(())
    }

    #[test]
    fn rfc7396_merge_patches() {
        // RFC 7396 appendix A, written out as (target, patch, result).
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (target, patch, want) in cases {
            let mut got = target.clone();
            merge_patch(&mut got, &patch);
            assert_eq!(got, want, "{target} + {patch}");
        }
    }

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn label_selectors_parse_and_match() {
        let set = labels(json!({"app": "manager", "tier": "backend", "n": "5", "empty": ""}));
        // (selector, matches the set above)
        let cases = [
            ("", true),
            ("app=manager", true),
            ("app==manager", true),
            ("app = manager", true),
            ("app=web", false),
            ("app!=web", true),
            ("absent!=web", true),
            ("app!=manager", false),
            ("app in (web, manager)", true),
            ("app in (web)", false),
            ("absent in (web)", false),
            ("app notin (web,db)", true),
            ("app notin (manager)", false),
            ("absent notin (x)", true),
            ("app", true),
            ("absent", false),
            ("!absent", true),
            ("!app", false),
            ("app=manager,tier=backend", true),
            ("app=manager,tier=frontend", false),
            ("app=manager, !absent, tier in (backend)", true),
            ("empty=", true),
            ("empty=,app", true),
            ("app=", false),
            ("n>3", true),
            ("n<3", false),
            ("n>-1", true),
            ("app>1", false),
            ("example.com/role=x", false),
            ("a in (b,,c)", false),
        ];
        for (text, want) in cases {
            let sel = LabelSelector::parse(text);
            assert!(sel.is_ok(), "{text}: {sel:?}");
            let sel = sel.unwrap_or_default();
            assert_eq!(sel.matches(Some(&set)), want, "{text}");
        }
        assert!(LabelSelector::parse("absent!=x").is_ok_and(|s| s.matches(None)));
        assert!(LabelSelector::parse("a").is_ok_and(|s| !s.matches(None)));
        let parsed = LabelSelector::parse("a in (x, y),!b").map(|s| s.requirements().to_vec());
        assert_eq!(
            parsed,
            Ok(vec![
                Requirement {
                    key: "a".into(),
                    op: SelectorOp::In,
                    values: vec!["x".into(), "y".into()]
                },
                Requirement {
                    key: "b".into(),
                    op: SelectorOp::DoesNotExist,
                    values: vec![]
                },
            ])
        );
    }

    #[test]
    fn label_selector_errors_are_clear() {
        let cases = [
            (
                "a in x",
                "expected \"(\" after in/notin for \"a\", found \"x\"",
            ),
            (
                "a in (x",
                "expected \",\" or \")\" in the set of \"a\", found the end",
            ),
            ("a in ()", "the set of values of \"a\" is empty"),
            (
                "a notin",
                "expected \"(\" after in/notin for \"a\", found the end",
            ),
            ("a,", "expected a label key, found the end"),
            (",a", "expected a label key, found \",\""),
            ("!", "expected a label key, found the end"),
            (
                "a=b=c",
                "expected \",\" or the end after a requirement, found \"=\"",
            ),
            (
                "a b",
                "expected an operator (=, ==, !=, in, notin, >, <) or \",\" after \"a\", found \"b\"",
            ),
            ("a>b", "\"a\": \">\" and \"<\" need an integer, found \"b\""),
            ("a=(", "expected a value for \"a\", found \"(\""),
            (
                "-a=b",
                "label key \"-a\": the name must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            ),
            (
                "Example.com/a=b",
                "label key \"Example.com/a\": the prefix must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
            ),
            (
                "a=b c",
                "expected \",\" or the end after a requirement, found \"c\"",
            ),
            (
                "a=x_",
                "label value \"x_\": must be empty or 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            ),
        ];
        for (text, reason) in cases {
            assert_eq!(
                LabelSelector::parse(text),
                Err(SelectorError {
                    selector: text.to_string(),
                    reason: reason.to_string()
                }),
                "{text}"
            );
        }
        assert_eq!(
            LabelSelector::parse("a in x").map_err(|e| e.to_string()),
            Err(
                "label selector \"a in x\": expected \"(\" after in/notin for \"a\", found \"x\""
                    .into()
            )
        );
    }

    fn objects() -> Vec<Value> {
        vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "capi-controller-manager", "namespace": "capi-system",
                    "labels": {"control-plane": "controller-manager"}}}),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "capi-webhook-service", "namespace": "capi-system"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "capi-manager-role"}}),
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": {"name": "capi-serving-cert", "namespace": "capi-system"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capi-system"}}),
        ]
    }

    #[test]
    fn targets_select_objects() {
        let sel = |v: Value| -> PatchSelector { serde_json::from_value(v).unwrap_or_default() };
        // (selector, indices of objects() selected)
        let cases: Vec<(PatchSelector, Vec<usize>)> = vec![
            (sel(json!({})), vec![0, 1, 2, 3, 4]),
            (sel(json!({"kind": "Deployment"})), vec![0]),
            (sel(json!({"group": "apps"})), vec![0]),
            (sel(json!({"group": ""})), vec![1, 4]),
            (sel(json!({"version": "v1"})), vec![0, 1, 2, 3, 4]),
            (
                sel(json!({"group": "", "version": "v1", "kind": "Service"})),
                vec![1],
            ),
            (sel(json!({"group": "apps", "version": "v2"})), vec![]),
            (sel(json!({"namespace": "capi-system"})), vec![0, 1, 3]),
            (sel(json!({"namespace": ""})), vec![2, 4]),
            (sel(json!({"name": "capi-manager-role"})), vec![2]),
            (
                sel(json!({"name": "capi-system", "kind": "Namespace"})),
                vec![4],
            ),
            (sel(json!({"kind": "deployment"})), vec![]),
            (
                sel(json!({"labelSelector": "control-plane=controller-manager"})),
                vec![0],
            ),
            (
                sel(json!({"labelSelector": "!control-plane"})),
                vec![1, 2, 3, 4],
            ),
            (sel(json!({"labelSelector": ""})), vec![0, 1, 2, 3, 4]),
            (
                sel(
                    json!({"group": "cert-manager.io", "kind": "Certificate", "name": "capi-serving-cert", "namespace": "capi-system"}),
                ),
                vec![3],
            ),
        ];
        let objs = objects();
        for (s, want) in cases {
            let t = Target::new(&s);
            assert!(t.is_ok(), "{s:?}");
            let t = t.unwrap_or_default();
            let got: Vec<usize> = (0..objs.len()).filter(|&i| t.matches(&objs[i])).collect();
            assert_eq!(got, want, "{s:?}");
        }
        assert_eq!(split_api_version("v1"), ("", "v1"));
        assert_eq!(
            split_api_version("rbac.authorization.k8s.io/v1"),
            ("rbac.authorization.k8s.io", "v1")
        );
    }

    #[test]
    fn manifest_patches_match_by_kind_and_given_fields() {
        // (patch, indices of objects() patched)
        let cases = [
            ("kind: Deployment\nspec: {replicas: 2}", vec![0]),
            (
                "apiVersion: apps/v1\nkind: Deployment\nspec: {replicas: 2}",
                vec![0],
            ),
            (
                "apiVersion: apps/v2\nkind: Deployment\nspec: {replicas: 2}",
                vec![],
            ),
            (
                "kind: Service\nmetadata: {name: capi-webhook-service}",
                vec![1],
            ),
            ("kind: Service\nmetadata: {name: other}", vec![]),
            ("kind: Service\nmetadata: {namespace: capi-system}", vec![1]),
            ("kind: Service\nmetadata: {namespace: elsewhere}", vec![]),
            ("kind: ClusterRole\nrules: []", vec![2]),
            (
                "{\"kind\": \"Namespace\", \"metadata\": {\"labels\": {\"a\": \"b\"}}}",
                vec![4],
            ),
            ("kind: Secret\ndata: {}", vec![]),
        ];
        for (text, want) in cases {
            let mp = ManifestPatch::parse(text);
            assert!(mp.is_ok(), "{text}: {mp:?}");
            let Ok(mp) = mp else { continue };
            let objs = objects();
            let got: Vec<usize> = (0..objs.len()).filter(|&i| mp.matches(&objs[i])).collect();
            assert_eq!(got, want, "{text}");
        }
        let errors = [
            ("spec: {replicas: 2}", PatchParseError::NoKind),
            ("- kind: Deployment", PatchParseError::NotAMapping),
            ("kind: [Deployment]", PatchParseError::NotAString("kind")),
            (
                "kind: Service\nmetadata: {name: 3}",
                PatchParseError::NotAString("metadata.name"),
            ),
            ("", PatchParseError::Empty),
        ];
        for (text, want) in errors {
            assert_eq!(ManifestPatch::parse(text), Err(want), "{text}");
        }
    }

    #[test]
    fn spec_patches_apply_in_order_to_their_targets() -> Result<(), PatchError> {
        let patches = vec![
            TargetedPatch {
                patch: "- {op: add, path: /spec, value: {replicas: 3}}\n- {op: add, path: /metadata/labels/example.com~1patched, value: \"yes\"}\n".into(),
                target: Some(PatchSelector {
                    group: Some("apps".into()),
                    kind: Some("Deployment".into()),
                    ..PatchSelector::default()
                }),
            },
            TargetedPatch {
                patch: "metadata:\n  annotations: {note: merged}\n".into(),
                target: Some(PatchSelector {
                    label_selector: Some("example.com/patched=yes".into()),
                    ..PatchSelector::default()
                }),
            },
            TargetedPatch {
                patch: "{\"metadata\": {\"annotations\": {\"all\": \"1\"}}}".into(),
                target: None,
            },
        ];
        let sp = SpecPatches::parse(&patches, &[])?;
        let mut objs = objects();
        sp.apply(&mut objs)?;
        assert_eq!(objs[0]["spec"]["replicas"], 3);
        // The second patch selects by the label the first one added.
        assert_eq!(objs[0]["metadata"]["annotations"]["note"], "merged");
        assert!(objs[1]["metadata"].get("labels").is_none());
        for o in &objs {
            assert_eq!(o["metadata"]["annotations"]["all"], "1");
        }
        let objs_before = objects();
        let failing = vec![TargetedPatch {
            patch: "[{op: replace, path: /spec/replicas, value: 1}]".into(),
            target: Some(PatchSelector {
                kind: Some("Service".into()),
                ..PatchSelector::default()
            }),
        }];
        let mut objs = objects();
        let err = SpecPatches::parse(&failing, &[])?.apply(&mut objs);
        assert_eq!(
            err.map_err(|e| e.to_string()),
            Err("spec.patches[0] on Service capi-system/capi-webhook-service: operation [0] (replace /spec/replicas) failed: path not found".into())
        );
        assert_eq!(objs, objs_before);
        Ok(())
    }

    #[test]
    fn spec_patch_errors() {
        let tp = |patch: &str, selector: Option<&str>| TargetedPatch {
            patch: patch.into(),
            target: selector.map(|s| PatchSelector {
                label_selector: Some(s.into()),
                ..PatchSelector::default()
            }),
        };
        let msg = |p: &[TargetedPatch], m: &[String]| {
            SpecPatches::parse(p, m)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            msg(&[tp("{a: 1}", None)], &["kind: X".into()]),
            Err("cannot use both spec.patches and spec.manifestPatches; choose one".into())
        );
        assert_eq!(
            msg(&[tp("{a: 1}", None), tp("just text", None)], &[]),
            Err("spec.patches[1].patch: a patch must be a list of JSON patch operations (RFC 6902) or a mapping (merge patch, RFC 7396)".into())
        );
        assert_eq!(
            msg(&[tp("[{op: remove}]", None)], &[]),
            Err("spec.patches[0].patch: operation [0] is invalid: it has no \"path\"".into())
        );
        assert_eq!(
            msg(&[tp("{a: 1}", Some("a in"))], &[]),
            Err("spec.patches[0].target.labelSelector: label selector \"a in\": expected \"(\" after in/notin for \"a\", found the end".into())
        );
        assert!(
            msg(&[tp("a: [1", None)], &[])
                .is_err_and(|e| e.starts_with("spec.patches[0].patch: not valid YAML"))
        );
        assert_eq!(
            msg(&[], &["kind: X".into(), "spec: {}".into()]),
            Err("spec.manifestPatches[1]: a manifest patch must give the kind of the objects it patches".into())
        );
        assert_eq!(msg(&[], &[]), Ok(()));
    }

    #[test]
    fn manifest_patches_apply_to_every_match() -> Result<(), PatchError> {
        let mut objs = objects();
        objs.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "second", "namespace": "capi-system"}, "spec": {"replicas": 1}}));
        let sp = SpecPatches::parse(
            &[],
            &[
                "kind: Deployment\nspec: {replicas: 5}".into(),
                "kind: Deployment\nmetadata: {name: second, labels: {only: second}}".into(),
            ],
        )?;
        sp.apply(&mut objs)?;
        assert_eq!(objs[0]["spec"]["replicas"], 5);
        assert_eq!(objs[5]["spec"]["replicas"], 5);
        assert!(objs[0]["metadata"]["labels"].get("only").is_none());
        assert_eq!(objs[5]["metadata"]["labels"]["only"], "second");
        Ok(())
    }

    #[test]
    fn identities_ignore_versions() {
        let a = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "c", "namespace": "n"}});
        let b = json!({"apiVersion": "cert-manager.io/v1alpha2", "kind": "Certificate", "metadata": {"name": "c", "namespace": "n"}});
        assert!(identities(&[a]).contains(&object_identity(&b)));
    }
}
