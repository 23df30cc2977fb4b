//! RFC 6901 JSON pointers, parsed with messages that say what is wrong.

use std::fmt;

use json_patch::jsonptr::{self, PointerBuf};
use serde_json::Value;

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
pub struct Pointer(pub(super) PointerBuf);

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
