//! clusterctl's `convertLegacyVars`: `${ VAR }`, `${ VAR}` and `${VAR }` become `${VAR}`.

use std::borrow::Cow;

/// Rewrites legacy spaced references `${ VAR }`, `${ VAR}` and `${VAR }` to `${VAR}`, as clusterctl does before
/// parsing.
///
/// Only bare names made of `[A-Za-z0-9_$]` qualify, with ASCII whitespace (space, `\t`, `\n`, `\r`, form feed)
/// on either side; anything else, such as `${ VAR:=x }`, is left as is (and later fails to parse). Returns
/// the input unchanged, without copying, when there is nothing to rewrite.
pub fn convert_legacy_vars(input: &str) -> Cow<'_, str> {
    convert(input).0
}

/// Where the converted text starts to be shifted relative to the input: from converted offset `.0` onwards,
/// `.1` bytes have been removed in total.
pub(crate) type Shifts = Vec<(usize, usize)>;

pub(crate) fn convert(input: &str) -> (Cow<'_, str>, Shifts) {
    let bytes = input.as_bytes();
    let mut out = String::new();
    let mut shifts = Shifts::new();
    let mut removed = 0;
    // `copied` is where the not-yet-copied input starts; nothing is copied until the first rewrite.
    let mut copied = 0;
    let mut pos = 0;
    // Searching for a single byte uses memchr, much faster than a two-byte substring search on large files.
    while let Some(rel) = input.get(pos..).and_then(|rest| rest.find('$')) {
        let open = pos + rel;
        if bytes.get(open + 1) != Some(&b'{') {
            pos = open + 1;
            continue;
        }
        let Some((name, end)) = legacy_reference(bytes, open + 2) else {
            pos = open + 1;
            continue;
        };
        if out.is_empty() {
            out.reserve(input.len());
        }
        out.push_str(&input[copied..open]);
        out.push_str("${");
        out.push_str(name);
        out.push('}');
        removed += (end - open) - (name.len() + 3);
        shifts.push((out.len(), removed));
        copied = end;
        pos = end;
    }
    if shifts.is_empty() {
        return (Cow::Borrowed(input), shifts);
    }
    out.push_str(&input[copied..]);
    (Cow::Owned(out), shifts)
}

/// Maps an offset in converted text back to the original input.
pub(crate) fn original_offset(shifts: &Shifts, converted: usize) -> usize {
    let idx = shifts.partition_point(|&(at, _)| at <= converted);
    match idx.checked_sub(1).and_then(|i| shifts.get(i)) {
        Some(&(_, removed)) => converted + removed,
        None => converted,
    }
}

/// Matches `\s* NAME \s* }` with at least one whitespace byte, starting right after `${`. Returns the name
/// and the offset after the `}`.
fn legacy_reference(bytes: &[u8], start: usize) -> Option<(&str, usize)> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c');
    let is_name = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'$';
    let rest = bytes.get(start..)?;
    let lead = rest.iter().take_while(|b| is_space(b)).count();
    let name_len = rest[lead..].iter().take_while(|b| is_name(b)).count();
    let trail = rest[lead + name_len..]
        .iter()
        .take_while(|b| is_space(b))
        .count();
    let close = lead + name_len + trail;
    if name_len == 0 || lead + trail == 0 || rest.get(close) != Some(&b'}') {
        return None;
    }
    let name = std::str::from_utf8(&rest[lead..lead + name_len]).ok()?;
    Some((name, start + close + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_only_spaced_bare_names() {
        assert_eq!(
            convert_legacy_vars("foo ${ BAR }, ${BAR }, ${ BAR}"),
            "foo ${BAR}, ${BAR}, ${BAR}"
        );
        assert_eq!(convert_legacy_vars("${\tA\n}"), "${A}");
        assert_eq!(convert_legacy_vars("${ BA$R }"), "${BA$R}");
        assert_eq!(convert_legacy_vars("${ ${ X }"), "${ ${X}");
        for unchanged in [
            "${BAR}",
            "${ }",
            "${ A:=x }",
            "${ A B }",
            "$ {A }",
            "${\u{b}A}",
            "${ é }",
        ] {
            assert!(
                matches!(convert_legacy_vars(unchanged), Cow::Borrowed(_)),
                "{unchanged:?}"
            );
        }
    }

    #[test]
    fn offsets_map_back() {
        let input = "${ A } x ${  B  } ${";
        let (converted, shifts) = convert(input);
        assert_eq!(converted, "${A} x ${B} ${");
        let converted_open = converted.rfind("${").unwrap_or_default();
        let original_open = input.rfind("${").unwrap_or_default();
        assert_eq!(original_offset(&shifts, converted_open), original_open);
        assert_eq!(original_offset(&shifts, 0), 0);
    }
}
