//! Parser for drone/envsubst syntax.
//!
//! drone's scanner is a mode-switching rune scanner; its observable behaviour (including a few quirks that
//! decide which error message a malformed expression gets) is reproduced here by a byte-level recursive
//! descent parser. Recursion only happens for nested `${`, which is bounded by [`MAX_NESTING_DEPTH`].

use crate::MAX_NESTING_DEPTH;
use crate::error::{Error, ParseErrorKind};
use crate::ident_table::IDENT_RANGES;

/// A parsed template: the top-level sequence of text and expressions.
///
/// drone/envsubst represents a sequence as right-nested two-element lists (`[a, [b, c]]`); here it is flat.
/// Adjacent [`Node::Text`] nodes never occur at the top level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub(crate) nodes: Vec<Node>,
    pub(crate) source_len: usize,
}

/// One element of a template or of a function's argument list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// Literal text, with `$$` (and, in replace arguments, `\/` and `\\`) escapes already resolved.
    Text(String),
    /// A `${...}` expression.
    Func(Func),
}

/// A `${...}` expression: a variable, an operation and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    param: String,
    op: Op,
    args: Vec<Node>,
}

impl Func {
    /// Name of the variable whose value the expression operates on.
    pub fn param(&self) -> &str {
        &self.param
    }

    /// The operation.
    pub fn op(&self) -> Op {
        self.op
    }

    /// Arguments in source order. Default functions may alternate text and nested expressions; other
    /// operations have at most two arguments, each a text or a single nested expression.
    pub fn args(&self) -> &[Node] {
        &self.args
    }
}

/// The operation of a [`Func`]; [`Op::as_str`] gives drone's `FuncNode.Name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `${v}`.
    Value,
    /// `${#v}`: length in bytes.
    Length,
    /// `${v^}`: upper-case the first character.
    UpperFirst,
    /// `${v^^}`: upper-case everything.
    UpperAll,
    /// `${v,}`: lower-case the first character.
    LowerFirst,
    /// `${v,,}`: lower-case everything.
    LowerAll,
    /// `${v^,}`: accepted by drone's parser, which has no function for it: yields the value unchanged.
    CaretComma,
    /// `${v,^}`: accepted by drone's parser, which has no function for it: yields the value unchanged.
    CommaCaret,
    /// `${v#pat}`: remove the shortest prefix matching the glob.
    TrimPrefix,
    /// `${v##pat}`: remove the longest prefix matching the glob.
    TrimLongestPrefix,
    /// `${v%pat}`: remove the shortest suffix matching the glob.
    TrimSuffix,
    /// `${v%%pat}`: remove the longest suffix matching the glob.
    TrimLongestSuffix,
    /// `${v:pos}` / `${v:pos:len}`: byte substring.
    Substring,
    /// `${v/pat/rep}`: replace the first literal occurrence.
    ReplaceFirst,
    /// `${v//pat/rep}`: replace every literal occurrence.
    ReplaceAll,
    /// `${v/#pat/rep}`: replace a literal prefix (no-op without a replacement argument, as in drone).
    ReplacePrefix,
    /// `${v/%pat/rep}`: replace a literal suffix (no-op without a replacement argument, as in drone).
    ReplaceSuffix,
    /// `${v=def}`: the value if non-empty, else the default (unlike bash, also when set but empty).
    DefaultEq,
    /// `${v:=def}`: same as [`Op::DefaultEq`].
    DefaultColonEq,
    /// `${v:-def}`: same as [`Op::DefaultEq`].
    DefaultColonDash,
    /// `${v:?def}`: same as [`Op::DefaultEq`] (drone raises no error).
    DefaultColonQuestion,
    /// `${v:+def}`: same as [`Op::DefaultEq`] (drone has no "alternate value").
    DefaultColonPlus,
}

impl Op {
    /// drone/envsubst's name for the operation (`""`, `"#"`, `":="`, `"//"`, ...).
    ///
    /// [`Op::Length`] and [`Op::TrimPrefix`] are both `"#"`; drone tells them apart by the argument count.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Value => "",
            Op::Length | Op::TrimPrefix => "#",
            Op::UpperFirst => "^",
            Op::UpperAll => "^^",
            Op::LowerFirst => ",",
            Op::LowerAll => ",,",
            Op::CaretComma => "^,",
            Op::CommaCaret => ",^",
            Op::TrimLongestPrefix => "##",
            Op::TrimSuffix => "%",
            Op::TrimLongestSuffix => "%%",
            Op::Substring => ":",
            Op::ReplaceFirst => "/",
            Op::ReplaceAll => "//",
            Op::ReplacePrefix => "/#",
            Op::ReplaceSuffix => "/%",
            Op::DefaultEq => "=",
            Op::DefaultColonEq => ":=",
            Op::DefaultColonDash => ":-",
            Op::DefaultColonQuestion => ":?",
            Op::DefaultColonPlus => ":+",
        }
    }

    /// Whether this is one of the default forms (`=`, `:=`, `:-`, `:?`, `:+`).
    pub fn is_default(self) -> bool {
        matches!(
            self,
            Op::DefaultEq
                | Op::DefaultColonEq
                | Op::DefaultColonDash
                | Op::DefaultColonQuestion
                | Op::DefaultColonPlus
        )
    }
}

impl Template {
    /// The top-level nodes in source order. An empty template has no nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
}

/// Parses `input` with drone/envsubst syntax (`parse.Parse`), without clusterctl's legacy conversion.
///
/// # Errors
///
/// [`Error::Parse`] with drone's error kind for malformed expressions, and [`Error::NestingTooDeep`] when
/// expressions nest deeper than [`MAX_NESTING_DEPTH`].
pub fn parse(input: &str) -> Result<Template, Error> {
    let parser = Parser {
        src: input,
        bytes: input.as_bytes(),
    };
    let nodes = parser.top_level(&mut Vec::new())?;
    Ok(Template {
        nodes,
        source_len: input.len(),
    })
}

/// The byte ranges of `input`'s top-level `${...}` expressions, in source order, as [`parse`]
/// finds them (`$${x}` is an escape, not an expression; nested expressions are inside their
/// parent's range).
///
/// Readers that must keep expressions as written (clusterctl's `generate provider --describe`
/// reads a release without substituting it) use the ranges to set them aside and put them back.
///
/// # Errors
///
/// Any error of [`parse`].
pub fn expression_ranges(input: &str) -> Result<Vec<std::ops::Range<usize>>, Error> {
    let parser = Parser {
        src: input,
        bytes: input.as_bytes(),
    };
    let mut ranges = Vec::new();
    parser.top_level(&mut ranges)?;
    Ok(ranges)
}

/// Which characters end a text argument (besides `${` and the end of input).
#[derive(Clone, Copy)]
enum Stop {
    /// First substring argument: `:` and `}`.
    ColonOrClose,
    /// `}` only.
    Close,
    /// Replace pattern: `/` only, so a `}` becomes part of the pattern, as in drone.
    Slash,
}

impl Stop {
    fn stops_at(self, b: u8) -> bool {
        match self {
            Stop::ColonOrClose => b == b':' || b == b'}',
            Stop::Close => b == b'}',
            Stop::Slash => b == b'/',
        }
    }
}

struct Parser<'a> {
    src: &'a str,
    bytes: &'a [u8],
}

type Parsed<T> = Result<(T, usize), Error>;

impl Parser<'_> {
    fn byte(&self, pos: usize) -> Option<u8> {
        self.bytes.get(pos).copied()
    }

    fn is_open(&self, pos: usize) -> bool {
        self.byte(pos) == Some(b'$') && self.byte(pos + 1) == Some(b'{')
    }

    /// The top-level nodes; the range of every expression is pushed onto `ranges`.
    fn top_level(&self, ranges: &mut Vec<std::ops::Range<usize>>) -> Result<Vec<Node>, Error> {
        let mut nodes = Vec::new();
        let mut text = String::new();
        // `seg` is where the not-yet-copied plain text starts; copying whole slices keeps this fast.
        let mut seg = 0;
        let mut pos = 0;
        while let Some(rel) = self.src.get(pos..).and_then(|rest| rest.find('$')) {
            let at = pos + rel;
            match self.byte(at + 1) {
                Some(b'{') => {
                    text.push_str(&self.src[seg..at]);
                    if !text.is_empty() {
                        nodes.push(Node::Text(std::mem::take(&mut text)));
                    }
                    let (func, end) = self.func(at, 1)?;
                    nodes.push(Node::Func(func));
                    ranges.push(at..end);
                    pos = end;
                    seg = end;
                }
                Some(b'$') => {
                    // Keep the first `$`, drop the second; the second can then never start a `${`.
                    text.push_str(&self.src[seg..=at]);
                    pos = at + 2;
                    seg = pos;
                }
                _ => pos = at + 1,
            }
        }
        text.push_str(&self.src[seg..]);
        if !text.is_empty() {
            nodes.push(Node::Text(text));
        }
        Ok(nodes)
    }

    /// Parses the expression whose `${` is at `open`.
    fn func(&self, open: usize, depth: usize) -> Parsed<Func> {
        if depth > MAX_NESTING_DEPTH {
            return Err(Error::NestingTooDeep {
                limit: MAX_NESTING_DEPTH,
                offset: open,
            });
        }
        let err = |kind| Error::Parse { kind, offset: open };
        let start = open + 2;
        if self.byte(start) == Some(b'#') {
            return self.length(start + 1).map_err(err);
        }
        let name_end = self.ident_end(start);
        if name_end == start {
            return Err(err(ParseErrorKind::VariableName));
        }
        let param = self.src[start..name_end].to_owned();
        let pos = name_end;
        let func = |op, args, end| Ok((Func { param, op, args }, end));
        match self.byte(pos) {
            Some(b':') => match self.src.get(pos + 1..).and_then(|rest| rest.chars().next()) {
                Some(c @ ('=' | '-' | '?' | '+')) => {
                    let (args, end) = self.default_args(pos + 2, open, depth)?;
                    func(default_op(c), args, end)
                }
                // drone peeks past the colon and steps back by the width of the peeked rune: zero at the end
                // of input, several bytes for a multi-byte rune. Either way it then misses the colon.
                None => Err(err(ParseErrorKind::BadSubstitution)),
                Some(c) if c.len_utf8() > 1 => Err(err(ParseErrorKind::BadSubstitution)),
                Some(_) => {
                    let (args, end) = self.substring_args(pos + 1, open, depth)?;
                    func(Op::Substring, args, end)
                }
            },
            Some(b'=') => {
                let (args, end) = self.default_args(pos + 1, open, depth)?;
                func(Op::DefaultEq, args, end)
            }
            Some(b',' | b'^') => {
                let mut end = pos + 1;
                if matches!(self.byte(end), Some(b',' | b'^')) {
                    end += 1;
                }
                let op = match &self.bytes[pos..end] {
                    b"," => Op::LowerFirst,
                    b",," => Op::LowerAll,
                    b"^" => Op::UpperFirst,
                    b"^^" => Op::UpperAll,
                    b"^," => Op::CaretComma,
                    _ => Op::CommaCaret,
                };
                let end = self.close(end).map_err(err)?;
                func(op, Vec::new(), end)
            }
            Some(b'/') => {
                let (op, args, end) = self.replace(pos, open, depth)?;
                func(op, args, end)
            }
            Some(c @ (b'#' | b'%')) => {
                let doubled = self.byte(pos + 1) == Some(c);
                let op = match (c, doubled) {
                    (b'#', false) => Op::TrimPrefix,
                    (b'#', true) => Op::TrimLongestPrefix,
                    (_, false) => Op::TrimSuffix,
                    (_, true) => Op::TrimLongestSuffix,
                };
                let arg_start = pos + 1 + usize::from(doubled);
                let (arg, after) = self.param(arg_start, Stop::Close, false, open, depth)?;
                let end = self.close(after).map_err(err)?;
                func(op, vec![arg], end)
            }
            Some(b'}') => func(Op::Value, Vec::new(), pos + 1),
            _ => Err(err(ParseErrorKind::MissingClosingBrace)),
        }
    }

    /// `${#name}` after the `#`.
    fn length(&self, pos: usize) -> Result<(Func, usize), ParseErrorKind> {
        let name_end = self.ident_end(pos);
        if name_end == pos {
            return Err(ParseErrorKind::BadSubstitution);
        }
        let end = self.close(name_end)?;
        let func = Func {
            param: self.src[pos..name_end].to_owned(),
            op: Op::Length,
            args: Vec::new(),
        };
        Ok((func, end))
    }

    /// Arguments of `${v:pos}` / `${v:pos:len}`, starting after the first colon; returns the end after `}`.
    fn substring_args(&self, pos: usize, open: usize, depth: usize) -> Parsed<Vec<Node>> {
        let bad = Error::Parse {
            kind: ParseErrorKind::BadSubstitution,
            offset: open,
        };
        let (first, after) = self.param(pos, Stop::ColonOrClose, false, open, depth)?;
        match self.byte(after) {
            Some(b'}') => Ok((vec![first], after + 1)),
            Some(b':') => {
                // drone's delimiter token is a run of colons, so `${v:1::2}` is `${v:1:2}`.
                let mut next = after;
                while self.byte(next) == Some(b':') {
                    next += 1;
                }
                let (second, after) = self.param(next, Stop::Close, false, open, depth)?;
                let end = self.close(after).map_err(|_| bad)?;
                Ok((vec![first, second], end))
            }
            _ => Err(bad),
        }
    }

    /// `${v/pat/rep}` and friends, starting at the first `/`.
    fn replace(
        &self,
        pos: usize,
        open: usize,
        depth: usize,
    ) -> Result<(Op, Vec<Node>, usize), Error> {
        let bad = Error::Parse {
            kind: ParseErrorKind::BadSubstitution,
            offset: open,
        };
        let (op, arg_start) = match self.byte(pos + 1) {
            Some(b'/') => (Op::ReplaceAll, pos + 2),
            Some(b'#') => (Op::ReplacePrefix, pos + 2),
            Some(b'%') => (Op::ReplaceSuffix, pos + 2),
            _ => (Op::ReplaceFirst, pos + 1),
        };
        let (pattern, after) = self.param(arg_start, Stop::Slash, true, open, depth)?;
        if self.byte(after) != Some(b'/') {
            return Err(bad);
        }
        // Like the substring delimiter, the separator is a run: `${v/a//b}` replaces "a" with "b".
        let mut next = after;
        while self.byte(next) == Some(b'/') {
            next += 1;
        }
        if self.byte(next) == Some(b'}') {
            return Ok((op, vec![pattern], next + 1));
        }
        let (replacement, after) = self.param(next, Stop::Close, true, open, depth)?;
        let end = self.close(after).map_err(|_| bad)?;
        Ok((op, vec![pattern, replacement], end))
    }

    /// Arguments of a default function, starting after the operator; returns the end after `}`.
    fn default_args(&self, pos: usize, open: usize, depth: usize) -> Parsed<Vec<Node>> {
        let mut args = Vec::new();
        let mut pos = pos;
        loop {
            if self.byte(pos) == Some(b'}') {
                return Ok((args, pos + 1));
            }
            let (arg, next) = self.param(pos, Stop::Close, false, open, depth)?;
            args.push(arg);
            pos = next;
        }
    }

    /// One function argument: a nested expression or a text run (never empty).
    ///
    /// `escapes` enables `$$`, `\/` and `\\` (replace arguments only). An escaped character is taken
    /// literally, so `\/` does not end a pattern.
    fn param(
        &self,
        pos: usize,
        stop: Stop,
        escapes: bool,
        open: usize,
        depth: usize,
    ) -> Parsed<Node> {
        if self.is_open(pos) {
            let (func, end) = self.func(pos, depth + 1)?;
            return Ok((Node::Func(func), end));
        }
        let mut text = String::new();
        let mut seg = pos;
        let mut i = pos;
        while let Some(b) = self.byte(i) {
            if self.is_open(i) {
                break;
            }
            let next = self.byte(i + 1);
            let escaped = escapes
                && match b {
                    b'$' => next == Some(b'$'),
                    b'\\' => matches!(next, Some(b'/' | b'\\')),
                    _ => false,
                };
            if escaped {
                // Drop the escaping byte and keep the escaped one, whatever it is.
                text.push_str(&self.src[seg..i]);
                seg = i + 1;
                i += 2;
                continue;
            }
            // Stop bytes are ASCII, so stepping over UTF-8 continuation bytes one at a time is safe.
            if stop.stops_at(b) {
                break;
            }
            i += 1;
        }
        if i == pos {
            return Err(Error::Parse {
                kind: ParseErrorKind::FuncSubstitution,
                offset: open,
            });
        }
        text.push_str(&self.src[seg..i]);
        Ok((Node::Text(text), i))
    }

    /// Expects `}` at `pos` and returns the position after it.
    fn close(&self, pos: usize) -> Result<usize, ParseErrorKind> {
        if self.byte(pos) == Some(b'}') {
            Ok(pos + 1)
        } else {
            Err(ParseErrorKind::BadSubstitution)
        }
    }

    /// End of the identifier starting at `pos` (== `pos` if there is none).
    fn ident_end(&self, pos: usize) -> usize {
        let Some(rest) = self.src.get(pos..) else {
            return pos;
        };
        let len: usize = rest
            .chars()
            .take_while(|&c| is_ident_char(c))
            .map(char::len_utf8)
            .sum();
        pos + len
    }
}

fn default_op(c: char) -> Op {
    match c {
        '=' => Op::DefaultColonEq,
        '-' => Op::DefaultColonDash,
        '?' => Op::DefaultColonQuestion,
        _ => Op::DefaultColonPlus,
    }
}

/// Go's `unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_'`.
fn is_ident_char(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric() || c == '_';
    }
    let cp = u32::from(c);
    IDENT_RANGES
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(input: &str) -> Option<ParseErrorKind> {
        match parse(input) {
            Err(Error::Parse { kind, .. }) => Some(kind),
            _ => None,
        }
    }

    #[test]
    fn expression_ranges_cover_whole_top_level_expressions() -> Result<(), Error> {
        let input = "a: ${A}\nb: x:${B:=${C}}y\nc: $${D} ${E/x/y}";
        let found: Vec<&str> = expression_ranges(input)?
            .into_iter()
            .map(|r| &input[r])
            .collect();
        assert_eq!(found, ["${A}", "${B:=${C}}", "${E/x/y}"]);
        assert!(expression_ranges("${v:=").is_err());
        Ok(())
    }

    #[test]
    fn error_kinds_match_drone() {
        use ParseErrorKind::*;
        let cases: &[(&str, ParseErrorKind)] = &[
            ("${", VariableName),
            ("${}", VariableName),
            ("${ X}", VariableName),
            ("${-x}", VariableName),
            ("${X", MissingClosingBrace),
            ("${BA$R}", MissingClosingBrace),
            ("${v-def}", MissingClosingBrace),
            ("${v+def}", MissingClosingBrace),
            ("${X.Y}", MissingClosingBrace),
            ("${X }", MissingClosingBrace),
            ("${#}", BadSubstitution),
            ("${#v", BadSubstitution),
            ("${#v:1}", BadSubstitution),
            ("${##v}", BadSubstitution),
            ("${v,,,}", BadSubstitution),
            ("${v^", BadSubstitution),
            ("${v:", BadSubstitution),
            ("${v:é}", BadSubstitution),
            ("${v:1x${y}}", BadSubstitution),
            ("${v:1${y}}", BadSubstitution),
            ("${v:1:2", BadSubstitution),
            ("${v:}", FuncSubstitution),
            ("${v::1}", FuncSubstitution),
            ("${v:1:}", FuncSubstitution),
            ("${v#}", FuncSubstitution),
            ("${v#x", BadSubstitution),
            ("${v#a${b}}", BadSubstitution),
            ("${v/x}", BadSubstitution),
            ("${v//x}", BadSubstitution),
            ("${v///x}", FuncSubstitution),
            ("${v/a/b", BadSubstitution),
            ("${v/a/", FuncSubstitution),
            ("${v:=", FuncSubstitution),
            ("${v:=abc", FuncSubstitution),
            ("${v=${x}", FuncSubstitution),
            ("${v=${x", MissingClosingBrace),
        ];
        for (input, want) in cases {
            assert_eq!(kind(input), Some(*want), "input {input:?}");
        }
    }

    fn only_func(input: &str) -> Result<Func, Error> {
        match parse(input)?.nodes() {
            [Node::Func(f)] => Ok(f.clone()),
            other => panic!("{input:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn drone_quirks_are_kept() -> Result<(), Error> {
        // A `}` does not end a replace pattern; only `/` does.
        let f = only_func("${v/a}b/c}")?;
        assert_eq!(f.op(), Op::ReplaceFirst);
        assert_eq!(
            f.args(),
            &[Node::Text("a}b".into()), Node::Text("c".into())]
        );

        // Delimiter runs.
        let f = only_func("${v:1::2}")?;
        assert_eq!(f.args(), &[Node::Text("1".into()), Node::Text("2".into())]);

        // Odd casing names parse.
        let t = parse("${v^,}${v,^}")?;
        let ops: Vec<Op> = t
            .nodes()
            .iter()
            .filter_map(|n| match n {
                Node::Func(f) => Some(f.op()),
                Node::Text(_) => None,
            })
            .collect();
        assert_eq!(ops, [Op::CaretComma, Op::CommaCaret]);
        Ok(())
    }

    #[test]
    fn error_offset_points_at_innermost_expression() {
        match parse("abc ${A:=${B") {
            Err(Error::Parse { kind, offset }) => {
                assert_eq!(kind, ParseErrorKind::MissingClosingBrace);
                assert_eq!(offset, 9);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn unicode_identifiers_follow_go() {
        assert!(is_ident_char('é'));
        assert!(is_ident_char('Ж'));
        assert!(is_ident_char('名'));
        assert!(is_ident_char('٣')); // Arabic-Indic digit three: Nd
        assert!(!is_ident_char('²')); // No, not Nd
        assert!(!is_ident_char('Ⅻ')); // Nl
        assert!(!is_ident_char('Ⓐ')); // So, though Alphabetic
        assert!(!is_ident_char('\u{0301}')); // combining mark
        assert!(!is_ident_char('-'));
        assert!(!is_ident_char('$'));
    }
}
