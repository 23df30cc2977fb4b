//! Resolution of plain (unquoted) scalars to JSON values, matching what serde-saphyr's
//! `deserialize_any` produces with the options `parse_documents` uses: YAML 1.1 booleans,
//! integers with `0x`/`0o`/`0b` prefixes and `_` separators, Rust's float syntax, and strings
//! for everything else. Non-finite floats are an error there, so they are reported as `None`
//! (the fast path then leaves the input to the full parser, which reports the error).

use serde_json::Value;

/// What a plain scalar means.
pub(crate) enum Plain {
    /// A null, boolean or number.
    Typed(Value),
    /// The text itself.
    Str,
}

/// Resolves a plain scalar; `None` when the full parser would refuse it.
pub(crate) fn resolve(text: &str) -> Option<Plain> {
    let b = text.as_bytes();
    let Some(&first) = b.first() else {
        return Some(Plain::Typed(Value::Null));
    };
    match first {
        b'~' if b.len() == 1 => Some(Plain::Typed(Value::Null)),
        b'0'..=b'9' | b'+' | b'-' | b'.' => number(text),
        b'n' | b'N' | b'y' | b'Y' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' => {
            if matches!(text, "null" | "Null" | "NULL") {
                Some(Plain::Typed(Value::Null))
            } else if let Some(v) = boolean(text) {
                Some(Plain::Typed(Value::Bool(v)))
            } else {
                Some(Plain::Str)
            }
        }
        _ => Some(Plain::Str),
    }
}

/// Whether a plain mapping key would be compared or refused as a non-string by the full
/// parser (null keys are refused, integer keys are compared by value for duplicates).
pub(crate) fn key_needs_full_parser(text: &str) -> bool {
    match text.as_bytes().first() {
        None => true,
        Some(b'0'..=b'9' | b'+' | b'-') => int(text).is_some(),
        Some(b'~' | b'n' | b'N' | b'<') => matches!(text, "~" | "null" | "Null" | "NULL" | "<<"),
        Some(_) => false,
    }
}

// YAML 1.1 spellings, case-insensitively, as the full parser accepts them without
// `strict_booleans`.
fn boolean(t: &str) -> Option<bool> {
    if t.len() > 5 {
        return None;
    }
    let is = |w: &str| t.eq_ignore_ascii_case(w);
    if is("true") || is("yes") || is("y") || is("on") {
        Some(true)
    } else if is("false") || is("no") || is("n") || is("off") {
        Some(false)
    } else {
        None
    }
}

fn number(t: &str) -> Option<Plain> {
    if let Some(v) = int(t) {
        return Some(Plain::Typed(v));
    }
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    // The YAML spellings of infinity and NaN are refused by the full parser's float policy.
    if matches!(
        unsigned,
        ".nan" | ".NaN" | ".NAN" | ".inf" | ".Inf" | ".INF"
    ) {
        return None;
    }
    // Rust's float syntax is what the full parser applies; only these bytes can form a
    // finite float there (the alphabetic `inf`/`nan` spellings stay strings).
    if !t
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.' | b'e' | b'E'))
    {
        return Some(Plain::Str);
    }
    match t.parse::<f64>() {
        Ok(f) if f.is_finite() => Some(Plain::Typed(Value::from(f))),
        // A digit-led literal that overflows is a non-finite float: refused.
        Ok(_) if unsigned.bytes().next().is_some_and(|c| c.is_ascii_digit()) => None,
        _ => Some(Plain::Str),
    }
}

/// An integer as the full parser reads it, or `None` when the text is not one (or does not
/// fit the 64-bit range it uses, in which case it becomes a float or a string).
fn int(t: &str) -> Option<Value> {
    let neg = t.starts_with('-');
    let rest = if neg {
        &t[1..]
    } else {
        t.strip_prefix('+').unwrap_or(t)
    };
    let (radix, digits) = if let Some(d) = rest.strip_prefix("0x").or(rest.strip_prefix("0X")) {
        (16, d)
    } else if let Some(d) = rest.strip_prefix("0o").or(rest.strip_prefix("0O")) {
        (8, d)
    } else if let Some(d) = rest.strip_prefix("0b").or(rest.strip_prefix("0B")) {
        (2, d)
    } else {
        // Leading zeros are not integers (they are not octal either without the legacy
        // option); such text falls through to the float syntax.
        if rest.len() > 1 && rest.starts_with('0') {
            return None;
        }
        (10, rest)
    };
    let magnitude = digits_value(digits, radix)?;
    if neg {
        let m = i128::try_from(magnitude).ok()?;
        i64::try_from(-m).ok().map(Value::from)
    } else {
        u64::try_from(magnitude).ok().map(Value::from)
    }
}

// Digits with `_` allowed only between digits.
fn digits_value(digits: &str, radix: u32) -> Option<u128> {
    let b = digits.as_bytes();
    let mut value: u128 = 0;
    let mut any = false;
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' {
            let between = i > 0 && b[i - 1] != b'_' && b.get(i + 1).is_some_and(|&n| n != b'_');
            if !between {
                return None;
            }
            continue;
        }
        let d = (c as char).to_digit(radix)?;
        value = value
            .checked_mul(u128::from(radix))?
            .checked_add(u128::from(d))?;
        any = true;
    }
    any.then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(t: &str) -> Option<Value> {
        match resolve(t) {
            Some(Plain::Typed(v)) => Some(v),
            _ => None,
        }
    }

    #[test]
    fn integers_and_floats() {
        assert_eq!(typed("0x1F"), Some(Value::from(31u64)));
        assert_eq!(typed("-0b101"), Some(Value::from(-5i64)));
        assert_eq!(typed("1_000"), Some(Value::from(1000u64)));
        assert_eq!(typed("-9223372036854775808"), Some(Value::from(i64::MIN)));
        assert_eq!(typed("0755"), Some(Value::from(755.0)));
        assert_eq!(
            typed("18446744073709551616"),
            Some(Value::from(1.8446744073709552e19))
        );
        assert!(matches!(resolve("1__0"), Some(Plain::Str)));
        assert!(matches!(resolve("0x"), Some(Plain::Str)));
        assert!(resolve("1e999").is_none());
        assert!(resolve("-.inf").is_none());
        assert!(matches!(resolve(".5e999"), Some(Plain::Str)));
        assert!(matches!(resolve("+inf"), Some(Plain::Str)));
    }
}
