//! Kubernetes label selectors: parsed (with the apiserver's rules for keys and values) and
//! matched against an object's labels.

use std::fmt;

use serde_json::{Map, Value};

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
                Some(Token::Comma) => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
