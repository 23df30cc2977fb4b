//! A fast parser for the block-style YAML that Kubernetes manifests use (controller-gen,
//! kustomize, helm output): block mappings and sequences, plain, quoted and block scalars,
//! small flow collections, comments and document markers, straight into JSON values.
//!
//! It is an accelerator, not a second YAML implementation: whatever it does not fully
//! understand (anchors, aliases, tags, complex keys, tabs in structure, unusual indentation,
//! anything the full parser might refuse) makes it give up with a [`Bail`], and the caller
//! parses the whole input again with serde-saphyr. So it must never accept a text the full
//! parser refuses, nor produce a different value; where it is unsure it gives up. The same
//! limits are enforced, conservatively, so hostile input either bails early or is accepted
//! only when the full parser would accept it too.

use serde_json::{Map, Value};

use crate::Limits;
use crate::scalar::{self, Plain};

/// Why the fast path gave up on an input; the full parser then handles the whole input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the fast YAML parser gave up: {0}")]
pub struct Bail(pub &'static str);

type R<T> = Result<T, Bail>;

fn bail<T>(why: &'static str) -> R<T> {
    Err(Bail(why))
}

// serde-saphyr's fixed budgets that `Limits` does not set; staying well inside them keeps
// the fast path from accepting what the full parser refuses.
const MAX_KEY_BYTES: usize = 1000; // simple-key lookahead of 1024 characters
const MAX_COMMENT_RUN: usize = 24; // 32 buffered comments while resolving an entry
const MAX_FLOW_DEPTH: usize = 200; // flow nesting limit of 255
// The fast parser recurses per nesting level; deeper documents (with a generous
// `Limits::max_depth`) are left to the full parser rather than risking the stack.
const MAX_FAST_DEPTH: usize = 256;
const MAX_TEXT_BYTES: usize = 60 * 1024 * 1024; // 64 MiB of scalar and of comment text

/// Parses every document of `text`, skipping null documents, or gives up.
pub fn parse(text: &str, limits: &Limits) -> Result<Vec<Value>, Bail> {
    if text.len() > MAX_TEXT_BYTES {
        return bail("input too large for the fast path");
    }
    if prescan(text)? {
        // CRLF line breaks mean exactly what LF ones do, outside and inside scalars.
        let lf = text.replace("\r\n", "\n");
        Parser::new(&lf, limits).stream()
    } else {
        Parser::new(text, limits).stream()
    }
}

/// Refuses characters the fast path does not handle (control characters, BOM, NEL and the
/// Unicode line separators, non-characters); returns whether there are CRLF line breaks.
fn prescan(text: &str) -> R<bool> {
    let b = text.as_bytes();
    let mut crlf = false;
    for (n, block) in b.chunks(64).enumerate() {
        // Whole blocks are tested branch-free (vector instructions), and looked at byte by
        // byte only when they hold something other than printable ASCII and line breaks.
        let odd = block.iter().fold(0u8, |acc, &c| {
            acc | (u8::from(c < 0x20) & u8::from(c != b'\n') & u8::from(c != b'\t'))
                | u8::from(c >= 0x7f)
        });
        if odd == 0 {
            continue;
        }
        for i in n * 64..n * 64 + block.len() {
            let c = b[i];
            if (0x20..0x7f).contains(&c) || c == b'\n' || c == b'\t' {
                continue;
            }
            let next = b.get(i + 1).copied().unwrap_or(0);
            let third = b.get(i + 2).copied().unwrap_or(0);
            match c {
                b'\r' if next == b'\n' => crlf = true,
                // U+0080..U+009F, among them NEL.
                0xC2 if (0x80..=0x9F).contains(&next) => return bail("C1 control character"),
                // U+2028, U+2029.
                0xE2 if next == 0x80 && (third == 0xA8 || third == 0xA9) => {
                    return bail("Unicode line separator");
                }
                // U+FEFF (BOM), U+FFFE, U+FFFF.
                0xEF if (next == 0xBB && third == 0xBF) || (next == 0xBF && third >= 0xBE) => {
                    return bail("BOM or non-character");
                }
                0x80.. => {}
                _ => return bail("control character"),
            }
        }
    }
    Ok(crlf)
}

/// A content line of a block scalar.
struct ContentLine {
    /// Empty lines between it and the previous content line (or the header).
    empties_before: usize,
    start: usize,
    end: usize,
}

/// What the next non-blank, non-comment line starts with.
enum Line {
    /// Content indented by this many spaces.
    Content(usize),
    /// `---` at column 0.
    DocStart,
    /// `...` at column 0.
    DocEnd,
    /// End of input.
    Eof,
}

/// Bytes at which a run of plain text in block context needs a closer look.
static PLAIN_STOP: [bool; 256] = {
    let mut t = [false; 256];
    t[b':' as usize] = true;
    t[b' ' as usize] = true;
    t[b'\t' as usize] = true;
    t[b'\n' as usize] = true;
    t
};

fn blankz(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0)
}

fn flow_indicator(c: u8) -> bool {
    matches!(c, b',' | b'[' | b']' | b'{' | b'}')
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    // Invariant between nodes: at the start of a line.
    pos: usize,
    limits: &'a Limits,
    // The full parser's node and event budgets, with a margin.
    max_nodes: usize,
    max_events: usize,
    depth: usize,
    flow_depth: usize,
    nodes: usize,
    events: usize,
    documents: usize,
    comment_run: usize,
    // Reused for the lines of each block scalar.
    lines: Vec<ContentLine>,
    // The last indentation counted: (position, spaces).
    last_spaces: std::cell::Cell<(usize, usize)>,
}

impl<'a> Parser<'a> {
    fn new(s: &'a str, limits: &'a Limits) -> Self {
        Parser {
            s,
            b: s.as_bytes(),
            pos: 0,
            limits,
            max_nodes: limits.max_nodes.saturating_sub(16),
            max_events: limits.max_nodes.saturating_mul(2).saturating_sub(16),
            depth: 0,
            flow_depth: 0,
            nodes: 0,
            events: 2,
            documents: 0,
            comment_run: 0,
            lines: Vec::new(),
            last_spaces: std::cell::Cell::new((usize::MAX, 0)),
        }
    }

    /// The byte at `i`, 0 past the end (NUL is refused by the prescan, so 0 means EOF).
    #[inline]
    fn at(&self, i: usize) -> u8 {
        self.b.get(i).copied().unwrap_or(0)
    }

    #[inline]
    fn cur(&self) -> u8 {
        self.at(self.pos)
    }

    /// The index of the line break ending the line that contains `from` (or the length).
    fn line_end(&self, from: usize) -> usize {
        // Most bytes are in long lines of block scalars: a vectorised search pays.
        self.b
            .get(from..)
            .and_then(|rest| memchr::memchr(b'\n', rest))
            .map_or(self.b.len(), |p| from + p)
    }

    /// The number of spaces starting at `i`. Indentation is half of a typical manifest's
    /// bytes, and most lines' is counted twice (to end the previous node, then to start the
    /// next), so it is skipped eight bytes at a time and the last count is remembered.
    #[inline]
    fn spaces(&self, i: usize) -> usize {
        if self.at(i) != b' ' {
            return 0;
        }
        let (at, n) = self.last_spaces.get();
        if at == i {
            return n;
        }
        let rest = self.b.get(i..).unwrap_or_default();
        let mut n = 0;
        while let Some(word) = rest.get(n..n + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()) {
            if u64::from_ne_bytes(word) != u64::from_ne_bytes(*b"        ") {
                break;
            }
            n += 8;
        }
        while rest.get(n) == Some(&b' ') {
            n += 1;
        }
        self.last_spaces.set((i, n));
        n
    }

    /// The first byte from `i` on that may end plain text in block context (`:`, space,
    /// tab, line break), or the end of the input.
    #[inline]
    fn plain_run(&self, i: usize) -> usize {
        let rest = self.b.get(i..).unwrap_or_default();
        rest.iter()
            .position(|&c| PLAIN_STOP[usize::from(c)])
            .map_or(self.b.len(), |p| i + p)
    }

    fn is_doc_marker(&self, line_start: usize) -> Option<Line> {
        let m = self.b.get(line_start..line_start + 3)?;
        if !blankz(self.at(line_start + 3)) {
            return None;
        }
        match m {
            b"---" => Some(Line::DocStart),
            b"..." => Some(Line::DocEnd),
            _ => None,
        }
    }

    fn count_node(&mut self) -> R<()> {
        self.nodes += 1;
        self.events += 1;
        self.comment_run = 0;
        if self.nodes > self.max_nodes || self.events > self.max_events {
            return bail("node budget");
        }
        Ok(())
    }

    fn count_comment(&mut self) -> R<()> {
        self.events += 1;
        self.comment_run += 1;
        if self.comment_run > MAX_COMMENT_RUN {
            return bail("long run of comments");
        }
        Ok(())
    }

    fn enter(&mut self) -> R<()> {
        self.count_node()?;
        // The end event of the collection.
        self.events += 1;
        self.depth += 1;
        if self.depth + 2 > self.limits.max_depth.min(MAX_FAST_DEPTH) {
            return bail("nesting depth");
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn null(&mut self) -> R<Value> {
        self.count_node()?;
        Ok(Value::Null)
    }

    fn string(&mut self, s: String) -> R<Value> {
        self.count_node()?;
        Ok(Value::String(s))
    }

    fn plain_value(&mut self, text: &str) -> R<Value> {
        self.count_node()?;
        match scalar::resolve(text) {
            Some(Plain::Typed(v)) => Ok(v),
            Some(Plain::Str) => Ok(Value::String(text.to_owned())),
            None => bail("non-finite float"),
        }
    }

    fn skip_spaces(&mut self) -> R<()> {
        self.pos += self.spaces(self.pos);
        if self.cur() == b'\t' {
            return bail("tab");
        }
        Ok(())
    }

    /// Skips a comment starting at `self.pos` (a `#` after whitespace) to the line end.
    fn skip_comment(&mut self) -> R<()> {
        let prev = if self.pos == 0 {
            b'\n'
        } else {
            self.b[self.pos - 1]
        };
        if prev != b' ' && prev != b'\n' {
            return bail("'#' not after whitespace");
        }
        self.count_comment()?;
        self.pos = self.line_end(self.pos);
        Ok(())
    }

    /// The rest of the line must be blank or a comment; moves to the next line.
    fn finish_line(&mut self) -> R<()> {
        self.skip_spaces()?;
        if self.cur() == b'#' {
            self.skip_comment()?;
        }
        match self.cur() {
            b'\n' => {
                self.pos += 1;
                Ok(())
            }
            0 => Ok(()),
            _ => bail("unexpected text after a node"),
        }
    }

    /// Skips blank and comment lines from a line start and classifies the next line; `pos`
    /// is left at that line's start.
    fn peek_line(&mut self) -> R<Line> {
        loop {
            let start = self.pos;
            let i = start + self.spaces(start);
            match self.at(i) {
                b'\n' => self.pos = i + 1,
                0 => {
                    self.pos = i;
                    return Ok(Line::Eof);
                }
                b'#' => {
                    self.pos = i;
                    self.skip_comment()?;
                    if self.cur() == b'\n' {
                        self.pos += 1;
                    }
                }
                b'\t' => return bail("tab in indentation"),
                _ => {
                    if i == start
                        && let Some(marker) = self.is_doc_marker(start)
                    {
                        return Ok(marker);
                    }
                    return Ok(Line::Content(i - start));
                }
            }
        }
    }

    fn stream(mut self) -> R<Vec<Value>> {
        let mut docs = Vec::new();
        let mut first = true;
        let mut directive = false;
        loop {
            let root = match self.peek_line()? {
                Line::Eof => break,
                Line::Content(0) if self.cur() == b'%' => {
                    if !first || directive {
                        return bail("directive");
                    }
                    self.yaml_directive()?;
                    directive = true;
                    continue;
                }
                Line::DocStart => {
                    self.pos += 3;
                    self.explicit_document()?
                }
                Line::DocEnd => {
                    if directive {
                        return bail("directive without document");
                    }
                    self.pos += 3;
                    self.finish_line()?;
                    first = false;
                    continue;
                }
                Line::Content(_) => {
                    // A bare document only at the start; elsewhere it would follow `...`,
                    // which is rare enough to leave to the full parser.
                    if !first || directive {
                        return bail("bare document");
                    }
                    self.block_value(-1, false)?
                }
            };
            first = false;
            directive = false;
            self.documents += 1;
            self.events += 2;
            if self.documents + 2 > self.limits.max_documents {
                return bail("document budget");
            }
            if !matches!(self.peek_line()?, Line::Eof | Line::DocStart | Line::DocEnd) {
                return bail("content after the document's root node");
            }
            if !root.is_null() {
                docs.push(root);
            }
        }
        if directive {
            return bail("directive without document");
        }
        Ok(docs)
    }

    fn yaml_directive(&mut self) -> R<()> {
        let rest = &self.b[self.pos..];
        if !(rest.starts_with(b"%YAML 1.2") || rest.starts_with(b"%YAML 1.1"))
            || !blankz(self.at(self.pos + 9))
        {
            return bail("directive other than %YAML 1.1/1.2");
        }
        self.pos += 9;
        self.finish_line()
    }

    /// The root of a document after its `---`.
    fn explicit_document(&mut self) -> R<Value> {
        self.skip_spaces()?;
        match self.cur() {
            b'\n' | 0 | b'#' => {
                self.finish_line()?;
                self.block_value(-1, false)
            }
            // Content on the `---` line: a scalar or flow node; a block collection cannot
            // start there.
            _ => self.node(-1, false),
        }
    }

    /// A node starting on a later line, inside a collection indented `parent` (-1 at the
    /// root); `in_map`: the node is a mapping value, where a sequence may sit at the
    /// mapping's own indentation. Missing means null.
    fn block_value(&mut self, parent: isize, in_map: bool) -> R<Value> {
        match self.peek_line()? {
            Line::Content(n) if n as isize > parent => {
                self.pos += n;
                self.node_at(n, parent, true)
            }
            Line::Content(n) if in_map && n as isize == parent && self.seq_entry(self.pos + n) => {
                self.pos += n;
                self.block_seq(n)
            }
            _ => self.null(),
        }
    }

    fn seq_entry(&self, i: usize) -> bool {
        self.at(i) == b'-' && blankz(self.at(i + 1))
    }

    /// A node on the current line (not at its start), e.g. after `key: `.
    fn node(&mut self, parent: isize, block_ok: bool) -> R<Value> {
        // The column only matters for block collections, which cannot start mid-line here.
        self.node_at(usize::MAX, parent, block_ok)
    }

    /// A node at `self.pos`, which is column `col`, inside a collection indented `parent`.
    /// `block_ok`: a block collection may start here (at a line start or after `- `).
    fn node_at(&mut self, col: usize, parent: isize, block_ok: bool) -> R<Value> {
        let c = self.cur();
        let next = self.at(self.pos + 1);
        match c {
            b'-' if blankz(next) => {
                if !block_ok {
                    return bail("block sequence not allowed here");
                }
                self.block_seq(col)
            }
            b'?' | b':' if blankz(next) => bail("complex or empty key"),
            b'&' | b'*' | b'!' => bail("anchor, alias or tag"),
            b'%' | b'@' | b'`' | b',' | b']' | b'}' | b'#' | b'\t' => {
                bail("reserved or unsupported indicator")
            }
            b'|' | b'>' => {
                let s = self.block_scalar(parent)?;
                self.string(s)
            }
            b'[' | b'{' => {
                let v = self.flow_node(parent)?;
                self.skip_spaces()?;
                if self.cur() == b':' {
                    return bail("flow collection as a key");
                }
                self.finish_line()?;
                Ok(v)
            }
            b'"' | b'\'' => {
                let start = self.pos;
                let s = self.quoted(parent, false)?;
                self.skip_spaces()?;
                if self.cur() == b':' {
                    if !block_ok || col == usize::MAX {
                        return bail("mapping not allowed here");
                    }
                    self.pos = start;
                    return self.block_map(col);
                }
                self.finish_line()?;
                self.string(s)
            }
            _ => {
                if block_ok && col != usize::MAX && self.line_has_key() {
                    return self.block_map(col);
                }
                self.plain_block(parent)
            }
        }
    }

    /// Whether the plain text starting at `pos` is a mapping key (`text: ` on this line).
    fn line_has_key(&self) -> bool {
        let mut i = self.pos;
        loop {
            i = self.plain_run(i);
            match self.at(i) {
                b'\n' | 0 => return false,
                b':' if blankz(self.at(i + 1)) => return true,
                b' ' if self.at(i + 1) == b'#' => return false,
                _ => i += 1,
            }
        }
    }

    fn block_map(&mut self, col: usize) -> R<Value> {
        self.enter()?;
        let mut map = Map::new();
        loop {
            let key = self.map_key()?;
            self.skip_spaces()?;
            let value = match self.cur() {
                b'\n' | 0 | b'#' => {
                    self.finish_line()?;
                    self.block_value(col as isize, true)?
                }
                _ => self.node(col as isize, false)?,
            };
            if map.insert(key, value).is_some() {
                return bail("duplicate key");
            }
            match self.peek_line()? {
                Line::Content(n) if n == col => self.pos += n,
                Line::Content(n) if n > col => return bail("unexpected indentation in mapping"),
                _ => break,
            }
        }
        self.leave();
        Ok(Value::Object(map))
    }

    /// A key and its `:` in a block mapping.
    fn map_key(&mut self) -> R<String> {
        let start = self.pos;
        let key = match self.cur() {
            b'"' | b'\'' => {
                let k = self.quoted(-1, true)?;
                self.skip_spaces()?;
                k
            }
            c if is_plain_start(c, self.at(self.pos + 1)) => {
                let mut i = self.pos;
                loop {
                    i = self.plain_run(i);
                    match self.at(i) {
                        b':' if blankz(self.at(i + 1)) => break,
                        b'\n' | 0 | b'\t' => return bail("not a mapping key"),
                        b' ' if self.at(i + 1) == b'#' => return bail("not a mapping key"),
                        _ => i += 1,
                    }
                }
                let mut text = &self.s[self.pos..i];
                if text.ends_with(' ') {
                    text = text.trim_end_matches(' ');
                }
                if scalar::key_needs_full_parser(text) {
                    return bail("null, integer or merge key");
                }
                self.pos = i;
                text.to_owned()
            }
            _ => return bail("unsupported mapping key"),
        };
        if self.pos - start > MAX_KEY_BYTES {
            return bail("long key");
        }
        if key == "<<" {
            return bail("merge key");
        }
        if self.cur() != b':' || !blankz(self.at(self.pos + 1)) {
            return bail("expected ': ' after a key");
        }
        self.pos += 1;
        self.count_node()?;
        Ok(key)
    }

    fn block_seq(&mut self, col: usize) -> R<Value> {
        self.enter()?;
        let mut seq = Vec::new();
        loop {
            // At the `-` of an entry.
            let dash = self.pos;
            self.pos += 1;
            self.skip_spaces()?;
            let item = match self.cur() {
                b'\n' | 0 | b'#' => {
                    self.finish_line()?;
                    self.block_value(col as isize, false)?
                }
                _ => {
                    let item_col = col + (self.pos - dash);
                    self.node_at(item_col, col as isize, true)?
                }
            };
            seq.push(item);
            match self.peek_line()? {
                Line::Content(n) if n == col && self.seq_entry(self.pos + n) => self.pos += n,
                Line::Content(n) if n > col => return bail("unexpected indentation in sequence"),
                _ => break,
            }
        }
        self.leave();
        Ok(Value::Array(seq))
    }

    /// A plain scalar in block context, possibly continued on more-indented lines.
    fn plain_block(&mut self, parent: isize) -> R<Value> {
        let c = self.cur();
        if !is_plain_start(c, self.at(self.pos + 1)) {
            return bail("unsupported plain scalar start");
        }
        let (end, text_end, comment) = self.plain_line(self.pos)?;
        let first = self.pos;
        let mut folded: Option<String> = None;
        let mut line_end = end;
        let mut ended = comment;
        while !ended && self.at(line_end) == b'\n' {
            // Look past blank lines for a continuation line.
            let mut j = line_end + 1;
            let mut blanks = 0;
            let indent = loop {
                let k = j + self.spaces(j);
                match self.at(k) {
                    b'\n' => {
                        blanks += 1;
                        j = k + 1;
                    }
                    b'\t' => return bail("tab in plain scalar continuation"),
                    _ => break k - j,
                }
            };
            let c = self.at(j + indent);
            if c == 0
                || c == b'#'
                || indent as isize <= parent
                || (indent == 0 && self.is_doc_marker(j).is_some())
            {
                break;
            }
            let (e, te, cm) = self.plain_line(j + indent)?;
            let buf = folded.get_or_insert_with(|| self.s[first..text_end].to_owned());
            if blanks == 0 {
                buf.push(' ');
            } else {
                buf.extend(std::iter::repeat_n('\n', blanks));
            }
            buf.push_str(&self.s[j + indent..te]);
            line_end = e;
            ended = cm;
        }
        self.pos = line_end;
        if ended {
            self.skip_comment()?;
        }
        if self.cur() == b'\n' {
            self.pos += 1;
        }
        match folded {
            Some(text) => {
                self.count_node()?;
                match scalar::resolve(&text) {
                    Some(Plain::Typed(v)) => Ok(v),
                    Some(Plain::Str) => Ok(Value::String(text)),
                    None => bail("non-finite float"),
                }
            }
            None => {
                let text = &self.s[first..text_end];
                self.plain_value(text)
            }
        }
    }

    /// Scans one line of a block plain scalar from `from`: returns where the scan stopped
    /// (the line break, EOF, or the space before a comment), where the text ends (trailing
    /// spaces excluded), and whether a comment follows.
    fn plain_line(&self, from: usize) -> R<(usize, usize, bool)> {
        let mut i = from;
        let mut text_end = from;
        loop {
            let stop = self.plain_run(i);
            if stop > i {
                text_end = stop;
            }
            i = stop;
            match self.at(i) {
                b'\n' | 0 => return Ok((i, text_end, false)),
                b' ' => {
                    i += 1;
                    if self.at(i) == b'#' {
                        return Ok((i, text_end, true));
                    }
                }
                b':' if blankz(self.at(i + 1)) => return bail("': ' in a plain scalar"),
                b':' => {
                    i += 1;
                    text_end = i;
                }
                _ => return bail("tab in plain scalar"),
            }
        }
    }

    /// A quoted scalar at `pos`; `key`: must fit on one line. Continuation lines must be
    /// indented more than `parent`.
    fn quoted(&mut self, parent: isize, key: bool) -> R<String> {
        let double = self.cur() == b'"';
        let q = self.cur();
        let start = self.pos + 1;
        // Common case: no escapes and no line break.
        let mut i = start;
        loop {
            let c = self.at(i);
            if c == q {
                if double || self.at(i + 1) != b'\'' {
                    self.pos = i + 1;
                    return Ok(self.s[start..i].to_owned());
                }
                break;
            }
            if c == b'\n' || c == 0 || (double && c == b'\\') {
                break;
            }
            i += 1;
        }
        let mut out = String::with_capacity(i - start + 16);
        // Length of `out` without raw trailing whitespace, which a line break removes.
        let mut kept = 0;
        let mut i = start;
        let mut seg = start;
        loop {
            let c = self.at(i);
            match c {
                0 => return bail("unterminated quoted scalar"),
                _ if c == q => {
                    if !double && self.at(i + 1) == b'\'' {
                        out.push_str(&self.s[seg..i]);
                        out.push('\'');
                        kept = out.len();
                        i += 2;
                        seg = i;
                        continue;
                    }
                    out.push_str(&self.s[seg..i]);
                    self.pos = i + 1;
                    return Ok(out);
                }
                b' ' | b'\t' => i += 1,
                b'\n' => {
                    if key {
                        return bail("multi-line quoted key");
                    }
                    out.push_str(&self.s[seg..i]);
                    out.truncate(kept);
                    let (next, breaks) = self.quoted_fold(i, parent)?;
                    if breaks == 0 {
                        out.push(' ');
                    } else {
                        out.extend(std::iter::repeat_n('\n', breaks));
                    }
                    kept = out.len();
                    i = next;
                    seg = i;
                }
                b'\\' if double => {
                    if key && self.at(i + 1) == b'\n' {
                        return bail("multi-line quoted key");
                    }
                    out.push_str(&self.s[seg..i]);
                    i = self.escape(i + 1, &mut out, parent)?;
                    kept = out.len();
                    seg = i;
                }
                _ => {
                    i += 1;
                    // Everything up to here is kept (raw whitespace before it included).
                    kept = out.len() + (i - seg);
                }
            }
        }
    }

    /// Past a line break inside a quoted scalar at `nl`: skips empty lines and the next
    /// line's indentation; returns where content resumes and how many empty lines there were.
    fn quoted_fold(&self, nl: usize, parent: isize) -> R<(usize, usize)> {
        let mut j = nl + 1;
        let mut empties = 0;
        loop {
            let k = j + self.spaces(j);
            match self.at(k) {
                b'\n' => {
                    empties += 1;
                    j = k + 1;
                }
                b'\t' => return bail("tab in quoted scalar continuation"),
                0 => return bail("unterminated quoted scalar"),
                _ => {
                    let indent = k - j;
                    if indent as isize <= parent || (indent == 0 && self.is_doc_marker(j).is_some())
                    {
                        return bail("quoted scalar continuation not indented");
                    }
                    return Ok((k, empties));
                }
            }
        }
    }

    /// An escape sequence after the `\` at `i - 1`; returns where the text resumes.
    fn escape(&self, i: usize, out: &mut String, parent: isize) -> R<usize> {
        let c = self.at(i);
        let simple = match c {
            b'0' => '\0',
            b'a' => '\x07',
            b'b' => '\x08',
            b't' | b'\t' => '\t',
            b'n' => '\n',
            b'v' => '\x0B',
            b'f' => '\x0C',
            b'r' => '\r',
            b'e' => '\x1B',
            b' ' => ' ',
            b'"' => '"',
            b'/' => '/',
            b'\\' => '\\',
            b'N' => '\u{85}',
            b'_' => '\u{A0}',
            b'L' => '\u{2028}',
            b'P' => '\u{2029}',
            b'x' | b'u' | b'U' => {
                let len = match c {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                let hex = self.s.get(i + 1..i + 1 + len).ok_or(Bail("short escape"))?;
                if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                    return bail("bad hex escape");
                }
                let code = u32::from_str_radix(hex, 16).map_err(|_| Bail("bad hex escape"))?;
                let ch = char::from_u32(code).ok_or(Bail("escape is not a character"))?;
                out.push(ch);
                return Ok(i + 1 + len);
            }
            b'\n' => {
                // An escaped line break joins the lines without a space.
                let (next, breaks) = self.quoted_fold(i, parent)?;
                out.extend(std::iter::repeat_n('\n', breaks));
                return Ok(next);
            }
            _ => return bail("unknown escape"),
        };
        out.push(simple);
        Ok(i + 1)
    }

    /// A literal (`|`) or folded (`>`) block scalar at `pos`, in a collection indented
    /// `parent`.
    fn block_scalar(&mut self, parent: isize) -> R<String> {
        let literal = self.cur() == b'|';
        self.pos += 1;
        let (keep, explicit) = self.block_scalar_header()?;
        let (indent, leading_blank_max) = self.block_scalar_indent(parent, explicit)?;
        let Some(indent) = indent else {
            // No content lines: empty, but for the blank lines kept by `+`.
            if leading_blank_max > 0 {
                return bail("block scalar of blank lines with spaces");
            }
            return Ok(self.empty_block_scalar(keep == Some(true)));
        };
        if leading_blank_max > indent {
            return bail("leading blank line longer than the indentation");
        }
        // First the content lines, so that the text is allocated once at its size.
        let mut lines = std::mem::take(&mut self.lines);
        lines.clear();
        let empties = self.block_scalar_lines(indent, literal, &mut lines)?;
        if lines.is_empty() {
            self.lines = lines;
            return bail("block scalar without content");
        }
        let trailing = match keep {
            Some(false) => 0,
            None => 1,
            Some(true) => empties + 1,
        };
        let out = self.join_block_lines(&lines, literal, trailing);
        self.lines = lines;
        Ok(out)
    }

    /// The header after `|` or `>`: chomping (Some(true) keep, Some(false) strip, None clip)
    /// and the explicit indentation indicator; the rest of its line is consumed.
    fn block_scalar_header(&mut self) -> R<(Option<bool>, Option<usize>)> {
        let mut keep: Option<bool> = None;
        let mut explicit: Option<usize> = None;
        for _ in 0..2 {
            match self.cur() {
                b'+' if keep.is_none() => keep = Some(true),
                b'-' if keep.is_none() => keep = Some(false),
                c @ b'1'..=b'9' if explicit.is_none() => explicit = Some(usize::from(c - b'0')),
                _ => break,
            }
            self.pos += 1;
        }
        if !blankz(self.cur()) {
            return bail("bad block scalar header");
        }
        self.finish_line()?;
        Ok((keep, explicit))
    }

    /// The content's indentation (explicit, or that of the first non-empty line; None when
    /// there is no content line) and the longest blank line before it.
    fn block_scalar_indent(
        &self,
        parent: isize,
        explicit: Option<usize>,
    ) -> R<(Option<usize>, usize)> {
        let mut leading_blank_max = 0;
        let indent = match explicit {
            // At the root the indicator is the indentation itself.
            Some(m) => Some(usize::try_from(parent).map_or(m, |p| p + m)),
            None => {
                let mut j = self.pos;
                loop {
                    let k = j + self.spaces(j);
                    match self.at(k) {
                        b'\n' => {
                            leading_blank_max = leading_blank_max.max(k - j);
                            j = k + 1;
                        }
                        0 if k > j => {
                            return bail("spaces at the end of the input in a block scalar");
                        }
                        0 => break None,
                        _ => {
                            if k == j && self.is_doc_marker(j).is_some() {
                                break None;
                            }
                            break Some(k - j);
                        }
                    }
                }
            }
            // Lines not indented past the parent are not the scalar's.
            .filter(|&n| n as isize > parent),
        };
        Ok((indent, leading_blank_max))
    }

    /// The content lines at `indent` into `lines`; returns the count of empty lines after the
    /// last one.
    fn block_scalar_lines(
        &mut self,
        indent: usize,
        literal: bool,
        lines: &mut Vec<ContentLine>,
    ) -> R<usize> {
        let mut empties = 0;
        loop {
            let ls = self.pos;
            if ls >= self.b.len() {
                break;
            }
            let spaces = self.spaces(ls).min(indent);
            let k = ls + spaces;
            let c = self.at(k);
            if spaces < indent {
                if c == b'\n' {
                    empties += 1;
                    self.pos = k + 1;
                    continue;
                }
                if c == 0 {
                    if k > ls {
                        return bail("spaces at the end of the input in a block scalar");
                    }
                    break;
                }
                if c == b'\t' {
                    return bail("tab in block scalar indentation");
                }
                // A less-indented line ends the scalar.
                break;
            }
            if indent == 0 && self.is_doc_marker(ls).is_some() {
                break;
            }
            if c == 0 {
                if k > ls {
                    return bail("spaces at the end of the input in a block scalar");
                }
                break;
            }
            let end = self.line_end(k);
            let text = &self.b[k..end];
            match text.first() {
                None => {
                    empties += 1;
                    self.pos = (end + 1).min(self.b.len());
                    continue;
                }
                // Spaces beyond the indentation are content in a literal scalar.
                Some(b' ') if !literal && text.iter().all(|&c| c == b' ') => {
                    return bail("whitespace-only line longer than the indentation");
                }
                Some(b' ' | b'\t') if !literal => {
                    return bail("more-indented line in a folded scalar");
                }
                // serde-saphyr refuses some of these (a tab at column 0 right after the
                // header), not all: all are left to it.
                Some(b'\t') if indent == 0 => return bail("tab at column 0 in a block scalar"),
                _ => {}
            }
            lines.push(ContentLine {
                empties_before: empties,
                start: k,
                end,
            });
            empties = 0;
            self.pos = (end + 1).min(self.b.len());
        }
        Ok(empties)
    }

    /// The scalar's text from its content lines, folded unless `literal`, with `trailing`
    /// line breaks.
    fn join_block_lines(&self, lines: &[ContentLine], literal: bool, trailing: usize) -> String {
        let size = lines
            .iter()
            .map(|l| l.end - l.start + l.empties_before + 1)
            .sum::<usize>()
            + trailing;
        let mut out = String::with_capacity(size);
        for (i, l) in lines.iter().enumerate() {
            if i == 0 {
                out.extend(std::iter::repeat_n('\n', l.empties_before));
            } else if literal {
                out.extend(std::iter::repeat_n('\n', l.empties_before + 1));
            } else if l.empties_before == 0 {
                out.push(' ');
            } else {
                out.extend(std::iter::repeat_n('\n', l.empties_before));
            }
            out.push_str(&self.s[l.start..l.end]);
        }
        out.extend(std::iter::repeat_n('\n', trailing));
        out
    }

    /// A block scalar without content lines at `pos`: its blank lines are consumed, and
    /// are its value when kept.
    fn empty_block_scalar(&mut self, keep: bool) -> String {
        let mut breaks = 0;
        loop {
            let k = self.pos + self.spaces(self.pos);
            if self.at(k) != b'\n' {
                break;
            }
            breaks += 1;
            self.pos = k + 1;
        }
        if keep {
            "\n".repeat(breaks)
        } else {
            String::new()
        }
    }

    /// Skips whitespace, line breaks and comments inside a flow collection; continuation
    /// lines must be indented more than `parent`.
    fn flow_ws(&mut self, parent: isize) -> R<()> {
        loop {
            match self.cur() {
                b' ' => self.pos += 1,
                b'\t' => return bail("tab in flow collection"),
                b'#' => self.skip_comment()?,
                b'\n' => {
                    self.pos += 1;
                    let ls = self.pos;
                    let k = ls + self.spaces(ls);
                    match self.at(k) {
                        b'\n' | b'#' => {}
                        0 => return bail("unterminated flow collection"),
                        _ => {
                            let indent = k - ls;
                            if indent as isize <= parent
                                || (indent == 0 && self.is_doc_marker(ls).is_some())
                            {
                                return bail("flow continuation not indented");
                            }
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn flow_node(&mut self, parent: isize) -> R<Value> {
        self.flow_depth += 1;
        if self.flow_depth > MAX_FLOW_DEPTH {
            return bail("flow nesting");
        }
        self.enter()?;
        let v = if self.cur() == b'[' {
            self.flow_seq(parent)?
        } else {
            self.flow_map(parent)?
        };
        self.leave();
        self.flow_depth -= 1;
        Ok(v)
    }

    fn flow_seq(&mut self, parent: isize) -> R<Value> {
        self.pos += 1;
        let mut seq = Vec::new();
        loop {
            self.flow_ws(parent)?;
            if self.cur() == b']' {
                self.pos += 1;
                break;
            }
            seq.push(self.flow_value(parent)?);
            self.flow_ws(parent)?;
            match self.cur() {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    break;
                }
                _ => return bail("unsupported flow sequence entry"),
            }
        }
        Ok(Value::Array(seq))
    }

    fn flow_map(&mut self, parent: isize) -> R<Value> {
        self.pos += 1;
        let mut map = Map::new();
        loop {
            self.flow_ws(parent)?;
            if self.cur() == b'}' {
                self.pos += 1;
                break;
            }
            let key = match self.cur() {
                b'"' | b'\'' => self.quoted(-1, true)?,
                c if is_flow_plain_start(c, self.at(self.pos + 1)) => {
                    let (end, text_end) = self.flow_plain_end()?;
                    let text = &self.s[self.pos..text_end];
                    if scalar::key_needs_full_parser(text) || text.len() > MAX_KEY_BYTES {
                        return bail("null, integer, merge or long key");
                    }
                    let key = text.to_owned();
                    self.pos = end;
                    // A plain key's `:` must be followed by a space.
                    if self.cur() == b':' && !matches!(self.at(self.pos + 1), b' ' | b'\n') {
                        return bail("unusual flow mapping key");
                    }
                    key
                }
                _ => return bail("unsupported flow mapping key"),
            };
            self.count_node()?;
            // The `:` must be on the key's line (an implicit key is one line).
            self.skip_spaces()?;
            if self.cur() != b':' {
                return bail("flow mapping key without value");
            }
            self.pos += 1;
            self.flow_ws(parent)?;
            let value = match self.cur() {
                b',' | b'}' => self.null()?,
                _ => self.flow_value(parent)?,
            };
            if map.insert(key, value).is_some() {
                return bail("duplicate key");
            }
            self.flow_ws(parent)?;
            match self.cur() {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    break;
                }
                _ => return bail("unsupported flow mapping entry"),
            }
        }
        Ok(Value::Object(map))
    }

    fn flow_value(&mut self, parent: isize) -> R<Value> {
        let c = self.cur();
        match c {
            b'[' | b'{' => self.flow_node(parent),
            b'"' | b'\'' => {
                let s = self.quoted(parent, false)?;
                self.string(s)
            }
            _ if is_flow_plain_start(c, self.at(self.pos + 1)) => {
                let (end, text_end) = self.flow_plain_end()?;
                let text = &self.s[self.pos..text_end];
                let v = self.plain_value(text)?;
                self.pos = end;
                Ok(v)
            }
            _ => bail("unsupported flow node"),
        }
    }

    /// The end of a one-line plain scalar in flow context at `pos`, and of its text.
    fn flow_plain_end(&self) -> R<(usize, usize)> {
        let mut i = self.pos;
        let mut text_end = i;
        loop {
            let c = self.at(i);
            match c {
                b'\n' | 0 => return Ok((i, text_end)),
                b' ' => {
                    if self.at(i + 1) == b'#' {
                        return Ok((i, text_end));
                    }
                    i += 1;
                }
                b'\t' => return bail("tab in flow scalar"),
                b':' if blankz(self.at(i + 1)) || flow_indicator(self.at(i + 1)) => {
                    return Ok((i, text_end));
                }
                _ if flow_indicator(c) => return Ok((i, text_end)),
                _ => {
                    i += 1;
                    text_end = i;
                }
            }
        }
    }
}

/// Whether a plain scalar may start with `c` followed by `next`: not an indicator, except
/// `-`, `?` and `:` before a non-blank (`-1`, `--flag`, `?x`, `:x`).
fn is_plain_start(c: u8, next: u8) -> bool {
    match c {
        b'-' | b'?' | b':' => !blankz(next),
        b',' | b'[' | b']' | b'{' | b'}' | b'#' | b'&' | b'*' | b'!' | b'|' | b'>' | b'\''
        | b'"' | b'%' | b'@' | b'`' | b' ' | b'\t' | b'\n' | 0 => false,
        _ => true,
    }
}

/// [`is_plain_start`] in flow context, where `-`, `?` and `:` before a flow indicator are not
/// plain either.
fn is_flow_plain_start(c: u8, next: u8) -> bool {
    is_plain_start(c, next) && !(matches!(c, b'-' | b'?' | b':') && flow_indicator(next))
}
