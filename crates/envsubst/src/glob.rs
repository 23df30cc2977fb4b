//! The glob matcher used by `#`, `##`, `%` and `%%`.
//!
//! drone/envsubst ships a modified copy of Go's `path.Match`: `*` and `?` also match `/`, and a trailing `*`
//! matches the rest of the name. Its algorithm is reproduced exactly (it matches each star-separated chunk at
//! the leftmost possible position and reports malformed patterns lazily, only when the bad part is reached),
//! because those details decide results for odd patterns. Names are bytes because drone slices values at
//! arbitrary byte offsets before matching.

/// Why a match could not be decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GlobError {
    /// Malformed pattern (Go's `ErrBadPattern`).
    BadPattern,
    /// The caller's step budget ran out.
    OutOfFuel,
}

/// Step budget shared by all matches of one evaluation.
pub(crate) struct Fuel(pub(crate) u64);

impl Fuel {
    fn burn(&mut self, steps: usize) -> Result<(), GlobError> {
        let steps = u64::try_from(steps).unwrap_or(u64::MAX);
        self.0 = self.0.checked_sub(steps).ok_or(GlobError::OutOfFuel)?;
        Ok(())
    }
}

/// Reports whether `name` matches `pattern` as a whole.
pub(crate) fn matches(pattern: &[u8], name: &[u8], fuel: &mut Fuel) -> Result<bool, GlobError> {
    let mut pattern = pattern;
    let mut name = name;
    'chunks: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        fuel.burn(chunk.len() + 1)?;
        pattern = rest;
        if star && chunk.is_empty() {
            return Ok(true);
        }
        // A non-final chunk is taken at the first position where it matches; the final one must also
        // consume the whole name, otherwise a later position reachable through the star is tried.
        if let Some(tail) = match_chunk(chunk, name, fuel)?
            && (tail.is_empty() || !pattern.is_empty())
        {
            name = tail;
            continue;
        }
        if star {
            for skip in 1..=name.len() {
                if let Some(tail) = match_chunk(chunk, &name[skip..], fuel)? {
                    if pattern.is_empty() && !tail.is_empty() {
                        continue;
                    }
                    name = tail;
                    continue 'chunks;
                }
            }
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off leading stars and the following star-free chunk (a `*` inside `[...]` does not end it).
fn scan_chunk(pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let mut pattern = pattern;
    let mut star = false;
    while let Some((b'*', rest)) = pattern.split_first() {
        pattern = rest;
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            b'\\' if i + 1 < pattern.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &pattern[..i], &pattern[i..])
}

/// Matches `chunk` (literals, `?` and classes) against the start of `s`; returns the rest of `s`.
fn match_chunk<'a>(
    chunk: &[u8],
    s: &'a [u8],
    fuel: &mut Fuel,
) -> Result<Option<&'a [u8]>, GlobError> {
    let mut chunk = chunk;
    let mut s = s;
    fuel.burn(1)?;
    while let Some(&c) = chunk.first() {
        fuel.burn(1)?;
        let Some(&first) = s.first() else {
            return Ok(None);
        };
        match c {
            b'[' => {
                let (r, width) = decode_rune(s);
                s = &s[width..];
                chunk = &chunk[1..];
                let negated = chunk.first() == Some(&b'^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0usize;
                loop {
                    fuel.burn(1)?;
                    if ranges > 0
                        && let Some((b']', rest)) = chunk.split_first()
                    {
                        chunk = rest;
                        break;
                    }
                    let (lo, rest) = class_char(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if let Some((b'-', rest)) = chunk.split_first() {
                        let (h, rest) = class_char(rest)?;
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    return Ok(None);
                }
            }
            b'?' => {
                let (_, width) = decode_rune(s);
                s = &s[width..];
                chunk = &chunk[1..];
            }
            _ => {
                let literal = if c == b'\\' {
                    chunk = &chunk[1..];
                    *chunk.first().ok_or(GlobError::BadPattern)?
                } else {
                    c
                };
                if literal != first {
                    return Ok(None);
                }
                s = &s[1..];
                chunk = &chunk[1..];
            }
        }
    }
    Ok(Some(s))
}

/// A possibly escaped character of a class; the class must continue after it.
fn class_char(chunk: &[u8]) -> Result<(char, &[u8]), GlobError> {
    let chunk = match chunk.split_first() {
        None | Some((b'-' | b']', _)) => return Err(GlobError::BadPattern),
        Some((b'\\', [])) => return Err(GlobError::BadPattern),
        Some((b'\\', rest)) => rest,
        Some(_) => chunk,
    };
    let (r, width) = decode_rune(chunk);
    if r == char::REPLACEMENT_CHARACTER && width == 1 {
        return Err(GlobError::BadPattern);
    }
    let rest = &chunk[width..];
    if rest.is_empty() {
        return Err(GlobError::BadPattern);
    }
    Ok((r, rest))
}

/// Go's `utf8.DecodeRune`: an invalid or truncated sequence decodes as U+FFFD of width 1.
pub(crate) fn decode_rune(s: &[u8]) -> (char, usize) {
    let valid = s.utf8_chunks().next().map(|chunk| chunk.valid());
    match valid.and_then(|v| v.chars().next()) {
        Some(c) => (c, c.len_utf8()),
        None => (char::REPLACEMENT_CHARACTER, usize::from(!s.is_empty())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, name: &str) -> Result<bool, GlobError> {
        matches(pattern.as_bytes(), name.as_bytes(), &mut Fuel(1_000_000))
    }

    #[test]
    fn star_and_question_cross_slashes() {
        assert_eq!(m("*/", "path/to/"), Ok(true));
        assert_eq!(m("*", "a/b/c"), Ok(true));
        assert_eq!(m("a?c", "a/c"), Ok(true));
        assert_eq!(m("*.txt", "dir/file.txt"), Ok(true));
        assert_eq!(m("*.txt", "dir/file.txt.bak"), Ok(false));
    }

    #[test]
    fn classes_and_escapes() {
        assert_eq!(m("[a-c]x", "bx"), Ok(true));
        assert_eq!(m("[^a-c]x", "bx"), Ok(false));
        assert_eq!(m("[^a-c]x", "dx"), Ok(true));
        assert_eq!(m("\\*", "*"), Ok(true));
        assert_eq!(m("[é]", "é"), Ok(true));
        assert_eq!(m("?", "é"), Ok(true));
        assert_eq!(m("a*b*c", "a--b--c"), Ok(true));
        assert_eq!(m("a*b*c", "a--b--"), Ok(false));
    }

    #[test]
    fn bad_patterns_are_reported_lazily() {
        assert_eq!(m("[", "a"), Err(GlobError::BadPattern));
        assert_eq!(m("a\\", "ab"), Err(GlobError::BadPattern));
        // A dangling escape is only noticed while there is name left to compare.
        assert_eq!(m("a\\", "a"), Ok(false));
        // The malformed class is never reached because the literal already fails.
        assert_eq!(m("x[", "a"), Ok(false));
        assert_eq!(m("[]a]", "a"), Err(GlobError::BadPattern));
    }

    #[test]
    fn fuel_runs_out() {
        let name = "a".repeat(2000);
        let result = matches(b"*a*a*a*b", name.as_bytes(), &mut Fuel(100));
        assert_eq!(result, Err(GlobError::OutOfFuel));
    }

    #[test]
    fn decode_rune_follows_go() {
        assert_eq!(decode_rune("é".as_bytes()), ('é', 2));
        assert_eq!(decode_rune(&[0xC3]), (char::REPLACEMENT_CHARACTER, 1));
        assert_eq!(decode_rune(&[0xA9, b'a']), (char::REPLACEMENT_CHARACTER, 1));
        assert_eq!(decode_rune(b""), (char::REPLACEMENT_CHARACTER, 0));
    }
}
