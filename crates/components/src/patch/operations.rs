//! RFC 6902 JSON patches: operations decoded with messages that say what is wrong, applied
//! atomically, each failure named; `test` compares as RFC 6902 defines equality.

use std::slice;

use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchErrorKind, PatchOperation, RemoveOperation,
    ReplaceOperation, TestOperation,
    jsonptr::{self, PointerBuf, index::OutOfBoundsError, resolve::ResolveError},
};
use serde_json::Value;

use super::pointer::Pointer;

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
        (
            _,
            PatchOperation::Add(AddOperation { path, .. })
            | PatchOperation::Move(MoveOperation { path, .. })
            | PatchOperation::Copy(CopyOperation { path, .. }),
        ) => insertion_failure(doc, path),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops(v: Value) -> JsonPatch {
        JsonPatch::from_value(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    /// (name, document, patch, expected result or None for an error).
    #[allow(clippy::too_many_lines, reason = "a table of cases, one per entry")]
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
    #[allow(clippy::too_many_lines, reason = "a table of cases, one per entry")]
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
}
