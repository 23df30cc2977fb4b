//! Evaluation of a parsed template (drone's `Template.Execute` and `funcs.go`).

use crate::error::Error;
use crate::glob::{self, Fuel, GlobError};
use crate::parse::{Func, Node, Op, Template};

/// Text that expressions may add on top of the template's own length by default. Real values are at most a
/// few hundred KiB; the cap only stops nested replacements from growing the output exponentially.
const MAX_EXPANSION_BYTES: usize = 64 << 20;

/// Glob steps per evaluation. `#`/`%` try the pattern against every prefix of the value, so cost grows with
/// value length times pattern complexity; a few million steps cover any sensible use.
const MAX_GLOB_STEPS: u64 = 50_000_000;

/// How much text an evaluation may produce, checked while expanding (before each piece is built), so a
/// hostile template fails with a typed error instead of taking the memory first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes the whole evaluation may produce on top of the template's own length: the output plus every
    /// intermediate argument value ([`Error::OutputTooLarge`]).
    pub max_expansion: usize,
    /// Bytes one expression may produce ([`Error::ValueTooLarge`]).
    pub max_value: usize,
}

impl Default for Limits {
    /// 64 MiB plus the template's length again (for intermediate copies); no separate cap per value.
    fn default() -> Limits {
        Limits {
            max_expansion: MAX_EXPANSION_BYTES,
            max_value: usize::MAX,
        }
    }
}

pub(crate) fn eval_template(
    nodes: &[Node],
    source_len: usize,
    lookup: &dyn Fn(&str) -> Option<String>,
    limits: &Limits,
) -> Result<String, Error> {
    let limit = limits
        .max_expansion
        .saturating_add(source_len.saturating_mul(2));
    let mut ctx = Ctx {
        lookup,
        limit,
        remaining: limit,
        max_value: limits.max_value,
        fuel: Fuel(MAX_GLOB_STEPS),
    };
    let mut out = String::with_capacity(source_len.saturating_add(source_len / 16));
    ctx.nodes(nodes, &mut out)?;
    Ok(out)
}

struct Ctx<'l> {
    lookup: &'l dyn Fn(&str) -> Option<String>,
    limit: usize,
    /// Bytes that may still be produced, counting intermediate argument values too.
    remaining: usize,
    /// Bytes one expression may produce.
    max_value: usize,
    fuel: Fuel,
}

impl Ctx<'_> {
    /// Refuses an expression's value of `bytes` before it is built: beyond one expression's cap or
    /// what is left.
    fn ensure_value(&self, bytes: usize) -> Result<(), Error> {
        if bytes > self.max_value {
            return Err(Error::ValueTooLarge {
                limit: self.max_value,
            });
        }
        self.ensure(bytes)
    }

    /// Refuses text of `bytes` beyond what is left.
    fn ensure(&self, bytes: usize) -> Result<(), Error> {
        if bytes > self.remaining {
            return Err(Error::OutputTooLarge { limit: self.limit });
        }
        Ok(())
    }

    /// Appends an expression's value.
    fn push_value(&mut self, out: &mut String, s: &str) -> Result<(), Error> {
        self.ensure_value(s.len())?;
        self.push(out, s)
    }

    fn push(&mut self, out: &mut String, s: &str) -> Result<(), Error> {
        self.ensure(s.len())?;
        self.remaining -= s.len();
        out.push_str(s);
        Ok(())
    }

    fn nodes(&mut self, nodes: &[Node], out: &mut String) -> Result<(), Error> {
        for node in nodes {
            match node {
                Node::Text(text) => self.push(out, text)?,
                Node::Func(func) => self.func(func, out)?,
            }
        }
        Ok(())
    }

    fn arg_values(&mut self, args: &[Node]) -> Result<Vec<String>, Error> {
        let mut values = Vec::with_capacity(args.len());
        for arg in args {
            let mut value = String::new();
            self.nodes(std::slice::from_ref(arg), &mut value)?;
            values.push(value);
        }
        Ok(values)
    }

    fn func(&mut self, func: &Func, out: &mut String) -> Result<(), Error> {
        let value = (self.lookup)(func.param()).unwrap_or_default();
        let op = func.op();
        if op.is_default() {
            // drone's toDefault: the value unless it is empty (set-but-empty included), else the arguments
            // concatenated. Writing them straight to `out` avoids evaluating an unused default.
            if value.is_empty() && !func.args().is_empty() {
                return self.nodes(func.args(), out);
            }
            return self.push_value(out, &value);
        }
        let args = self.arg_values(func.args())?;
        let arg = |i: usize| args.get(i).map(String::as_str);
        let result = match op {
            Op::Length => value.len().to_string(),
            Op::UpperAll => value.chars().map(go_to_upper).collect(),
            Op::LowerAll => value.chars().map(go_to_lower).collect(),
            Op::UpperFirst => map_first(&value, go_to_upper),
            Op::LowerFirst => map_first(&value, go_to_lower),
            Op::Substring => substring(&value, arg(0), arg(1)),
            Op::TrimPrefix | Op::TrimLongestPrefix => match arg(0) {
                Some(pattern) => self.trim_prefix(&value, pattern, op == Op::TrimLongestPrefix)?,
                None => value,
            },
            Op::TrimSuffix | Op::TrimLongestSuffix => match arg(0) {
                Some(pattern) => self.trim_suffix(&value, pattern, op == Op::TrimLongestSuffix)?,
                None => value,
            },
            Op::ReplaceFirst | Op::ReplaceAll => match arg(0) {
                Some(pattern) => {
                    let max = if op == Op::ReplaceAll { usize::MAX } else { 1 };
                    self.replace(&value, pattern, arg(1).unwrap_or(""), max)?
                }
                None => value,
            },
            Op::ReplacePrefix => match (arg(0), arg(1), args.len()) {
                (Some(pattern), Some(replacement), 2) => match value.strip_prefix(pattern) {
                    Some(rest) => [replacement, rest].concat(),
                    None => value,
                },
                _ => value,
            },
            Op::ReplaceSuffix => match (arg(0), arg(1), args.len()) {
                (Some(pattern), Some(replacement), 2) => match value.strip_suffix(pattern) {
                    Some(rest) => [rest, replacement].concat(),
                    None => value,
                },
                _ => value,
            },
            // `^,`, `,^` and `${v}` have no function in drone, which falls back to toDefault without args.
            _ => value,
        };
        self.push_value(out, &result)
    }

    /// Go's `strings.Replace(s, pattern, replacement, max)`, refusing results beyond the output budget.
    fn replace(
        &self,
        s: &str,
        pattern: &str,
        replacement: &str,
        max: usize,
    ) -> Result<String, Error> {
        // Go inserts the replacement before every rune and at the end when the pattern is empty, as Rust does.
        let count = if pattern.is_empty() {
            s.chars().count().saturating_add(1)
        } else {
            s.matches(pattern).count()
        }
        .min(max);
        let grown = count.saturating_mul(replacement.len());
        let shrunk = count.saturating_mul(pattern.len());
        self.ensure_value(s.len().saturating_sub(shrunk).saturating_add(grown))?;
        Ok(s.replacen(pattern, replacement, count))
    }

    fn glob_trim<'s>(
        &mut self,
        s: &'s [u8],
        pattern: &[u8],
        longest: bool,
    ) -> Result<&'s [u8], Error> {
        // drone tries every non-empty prefix from the longest down. The shortest-match variant keeps going
        // after a hit, so a malformed pattern detected on a shorter prefix still returns `s` unchanged.
        let mut shortest = None;
        for end in (1..=s.len()).rev() {
            match glob::matches(pattern, &s[..end], &mut self.fuel) {
                Ok(true) if longest => return Ok(&s[end..]),
                Ok(true) => shortest = Some(end),
                Ok(false) => {}
                Err(GlobError::BadPattern) => return Ok(s),
                Err(GlobError::OutOfFuel) => {
                    return Err(Error::PatternTooComplex {
                        limit: MAX_GLOB_STEPS,
                    });
                }
            }
        }
        Ok(shortest.map_or(s, |end| &s[end..]))
    }

    fn trim_prefix(&mut self, s: &str, pattern: &str, longest: bool) -> Result<String, Error> {
        let rest = self.glob_trim(s.as_bytes(), pattern.as_bytes(), longest)?;
        Ok(go_lossy(rest))
    }

    /// drone strips suffixes by reversing both value and pattern (rune-wise) and stripping a prefix, so
    /// patterns with classes or escapes behave oddly (`[a-z]` reversed is `]z-a[`); that is kept.
    fn trim_suffix(&mut self, s: &str, pattern: &str, longest: bool) -> Result<String, Error> {
        let reversed: String = s.chars().rev().collect();
        let reversed_pattern: String = pattern.chars().rev().collect();
        let rest = self.glob_trim(reversed.as_bytes(), reversed_pattern.as_bytes(), longest)?;
        Ok(go_lossy(rest).chars().rev().collect())
    }
}

/// Go's `toSubstr`: byte offsets, negative `pos` counts from the end, unparsable numbers return `s`.
fn substring(s: &str, pos: Option<&str>, len: Option<&str>) -> String {
    let Some(pos) = pos else {
        return s.to_owned();
    };
    let Ok(pos) = pos.parse::<i64>() else {
        return s.to_owned();
    };
    let bytes = s.as_bytes();
    let total = i128::try_from(bytes.len()).unwrap_or(i128::MAX);
    let mut pos = i128::from(pos);
    if pos < 0 {
        pos = (total + pos).max(0);
    }
    let slice = |from: i128, to: i128| match (usize::try_from(from), usize::try_from(to)) {
        (Ok(from), Ok(to)) => bytes.get(from..to).map(go_lossy).unwrap_or_default(),
        _ => String::new(),
    };
    let Some(len) = len else {
        return if pos < total {
            slice(pos, total)
        } else {
            String::new()
        };
    };
    let Ok(len) = len.parse::<i64>() else {
        return s.to_owned();
    };
    let end = pos + i128::from(len);
    if end >= total {
        if pos < total {
            slice(pos, total)
        } else {
            String::new()
        }
    } else if end < pos {
        // A negative length makes Go panic (slice bounds out of range); produce nothing instead.
        String::new()
    } else {
        slice(pos, end)
    }
}

fn map_first(s: &str, map: fn(char) -> char) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => {
            let mut out = String::with_capacity(s.len() + 4);
            out.push(map(first));
            out.push_str(chars.as_str());
            out
        }
        None => String::new(),
    }
}

/// Go's `unicode.ToUpper`: the simple (one-to-one) mapping. Rust only exposes full mappings, which agree except
/// where the full mapping has several characters (`ß` → `SS`); there Go keeps the character, apart from the
/// Greek letters with ypogegrammeni whose simple mapping is the matching prosgegrammeni capital.
fn go_to_upper(c: char) -> char {
    let mut upper = c.to_uppercase();
    match (upper.next(), upper.next()) {
        (Some(u), None) => u,
        _ => {
            let cp = u32::from(c);
            let simple = match cp {
                0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => cp + 8,
                0x1FB3 => 0x1FBC,
                0x1FC3 => 0x1FCC,
                0x1FF3 => 0x1FFC,
                _ => cp,
            };
            char::from_u32(simple).unwrap_or(c)
        }
    }
}

/// Go's `unicode.ToLower` (simple mapping, no final-sigma rule). Only `İ` has a multi-character full mapping.
fn go_to_lower(c: char) -> char {
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(l), None) => l,
        _ if c == '\u{130}' => 'i',
        _ => c,
    }
}

/// Text from bytes that drone may have cut mid-character: each stray byte becomes U+FFFD, which is what Go
/// produces when such a string is converted to runes, and the closest a Rust `String` can get to Go's raw bytes.
fn go_lossy(bytes: &[u8]) -> String {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
    out
}

// Evaluation lives here, not beside the parser: the parser knows nothing of evaluation, and this
// module reads the parser's tree, so the two modules depend one way only.
impl Template {
    /// Expands the template; `lookup` returns `None` for unset variables, which expand like empty ones.
    ///
    /// `lookup` is called once per evaluated expression. Default arguments are evaluated only when the
    /// default is used (drone evaluates them eagerly; the result is the same for a side-effect-free lookup).
    ///
    /// # Errors
    ///
    /// [`Error::OutputTooLarge`] when the text produced (output plus intermediate argument values) would exceed
    /// 64 MiB plus twice the template length, and [`Error::PatternTooComplex`] when glob matching for
    /// `#`/`%` operations exceeds its step budget. Neither happens for realistic templates.
    pub fn eval(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<String, Error> {
        self.eval_with(lookup, &Limits::default())
    }

    /// [`Template::eval`] within `limits` (on top of the template's length, twice, as there).
    ///
    /// # Errors
    ///
    /// Those of [`Template::eval`], with [`Error::OutputTooLarge`] at `limits.max_expansion` and
    /// [`Error::ValueTooLarge`] when one expression would produce more than `limits.max_value`.
    pub fn eval_with(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
        limits: &Limits,
    ) -> Result<String, Error> {
        eval_template(&self.nodes, self.source_len, &lookup, limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_edges() {
        let s = "0123456789";
        assert_eq!(substring(s, Some("3"), None), "3456789");
        assert_eq!(substring(s, Some("-3"), None), "789");
        assert_eq!(substring(s, Some("-30"), None), s);
        assert_eq!(substring(s, Some("10"), None), "");
        assert_eq!(substring(s, Some("3"), Some("2")), "34");
        assert_eq!(substring(s, Some("3"), Some("200")), "3456789");
        assert_eq!(substring(s, Some("30"), Some("2")), "");
        assert_eq!(substring(s, Some("3"), Some("-2")), "");
        assert_eq!(substring(s, Some("x"), Some("2")), s);
        assert_eq!(substring(s, Some("3"), Some("y")), s);
        assert_eq!(substring(s, Some("+3"), Some("+1")), "3");
        assert_eq!(
            substring(s, Some("9223372036854775807"), Some("9223372036854775807")),
            ""
        );
        // Byte offsets can split a character; each stray byte becomes U+FFFD.
        assert_eq!(substring("é", Some("1"), None), "\u{FFFD}");
        assert_eq!(substring("€x", Some("0"), Some("2")), "\u{FFFD}\u{FFFD}");
    }

    #[test]
    fn case_mapping_is_simple_like_go() {
        assert_eq!(go_to_upper('ß'), 'ß');
        assert_eq!(go_to_upper('ﬁ'), 'ﬁ');
        assert_eq!(go_to_upper('\u{1F80}'), '\u{1F88}');
        assert_eq!(go_to_upper('\u{1FB3}'), '\u{1FBC}');
        assert_eq!(go_to_upper('a'), 'A');
        assert_eq!(go_to_upper('é'), 'É');
        assert_eq!(go_to_lower('\u{130}'), 'i');
        assert_eq!(go_to_lower('Σ'), 'σ');
    }

    #[test]
    fn lossy_replaces_each_stray_byte() {
        assert_eq!(go_lossy(&[0xE2, 0x82, b'a']), "\u{FFFD}\u{FFFD}a");
        assert_eq!(go_lossy(b"ok"), "ok");
    }
}
