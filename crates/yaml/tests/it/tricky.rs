//! Hand-written tricky inputs, each parsed by the fast parser and by serde-saphyr: where the
//! fast parser accepts an input its result must be serde-saphyr's, and `parse_documents` must
//! always answer exactly as serde-saphyr does (value or error).

use capi_yaml::internals::{parse_documents_fast, parse_documents_full};
use capi_yaml::{Limits, parse_documents};

/// What the fast parser must do with a case.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Parse it itself (serde-saphyr must accept it too, with the same result).
    Fast,
    /// Leave it to serde-saphyr.
    Fallback,
}
use Expect::{Fallback, Fast};

fn check_with(name: &str, text: &str, expect: Expect, limits: &Limits) {
    let full = parse_documents_full(text, limits);
    let fast = parse_documents_fast(text, limits);
    match (&fast, &full) {
        (Ok(f), Ok(s)) => assert_eq!(f, s, "{name}: the parsers disagree on {text:?}"),
        (Ok(f), Err(e)) => {
            panic!("{name}: fast parser accepted {text:?} as {f:?}, serde-saphyr refused: {e}")
        }
        (Err(_), _) => {}
    }
    match expect {
        Fast => assert!(
            fast.is_ok(),
            "{name}: the fast parser fell back on {text:?}: {:?}",
            fast.err()
        ),
        Fallback => assert!(
            fast.is_err(),
            "{name}: the fast parser should have left {text:?} to serde-saphyr"
        ),
    }
    let public = parse_documents(text, limits).map_err(|e| e.to_string());
    assert_eq!(
        public,
        full.map_err(|e| e.to_string()),
        "{name}: parse_documents differs from serde-saphyr"
    );
}

fn check(name: &str, text: &str, expect: Expect) {
    check_with(name, text, expect, &Limits::default());
}

/// Cases the fast parser must handle itself.
const FAST: &[(&str, &str)] = &[
    // Block scalars: chomping, explicit indentation, content that looks like syntax.
    ("literal clip", "a: |\n  line1\n  line2\n\nb: 1\n"),
    ("literal strip", "a: |-\n  x\n\n\nb: 1\n"),
    ("literal keep", "a: |+\n  x\n\n\nb: 1\n"),
    ("literal keep at end of input", "a: |+\n  x\n\n"),
    ("literal without final line break", "a: |\n  x"),
    ("literal keep without final line break", "a: |+\n  x"),
    ("literal explicit indentation", "a: |2\n    x\n  y\n"),
    (
        "literal explicit indentation and strip",
        "a: |-2\n   x\nb: |2-\n   y\n",
    ),
    (
        "literal explicit indentation in a sequence",
        "- |2\n   x\n- |1\n  y\n",
    ),
    (
        "literal explicit indentation in a compact mapping",
        "- a: |2\n     x\n",
    ),
    ("literal leading empty lines", "a: |\n\n\n  x\n"),
    (
        "literal more-indented lines and trailing spaces",
        "a: |\n  x  \n    y\n  z\n",
    ),
    (
        "literal with comment-like lines",
        "a: |\n  # not a comment\n  x # y\n",
    ),
    ("literal ended by a comment", "a: |\n  x\n# c\nb: 1\n"),
    ("literal with a tab in the content", "a: |\n  \tx\n  y\t\n"),
    ("literal header comment", "a: | # c\n  x\n"),
    ("literal with inner blank lines", "a: |\n  x\n\n   \n  y\n"),
    ("empty literal", "a: |\nb: 1\n"),
    ("empty keep literal with blank lines", "a: |+\n\nb: 1\n"),
    ("empty keep literal at the end", "--- |+\n\n\n"),
    ("empty literal at the end", "a: |-\n"),
    ("literal in a sequence", "- |\n  x\n  y\n- z\n"),
    (
        "literal deeper than needed",
        "a:\n  b: |\n        x\n        y\n  c: 1\n",
    ),
    ("folded", "a: >\n  one\n  two\n\n  three\n"),
    ("folded strip", "a: >-\n  x\n  y\n"),
    ("folded keep", "a: >+\n  x\n\n"),
    ("folded leading empty line", "a: >\n\n  x\n  y\n"),
    ("root literal", "--- |\n  foo\n  bar\n"),
    ("root literal at column 0", "--- |\nfoo\nbar\n---\nx: 1\n"),
    (
        "root literal explicit indentation",
        "--- |2-\n   x\n\n  y\n---\n|1\n  z\n",
    ),
    (
        "literal whose first line is a tab",
        "a: |-\n  \t\n  :\tZ,\n",
    ),
    // Quoted scalars.
    (
        "double-quoted escapes",
        "a: \"tab\\there\\nnl \\\"q\\\" \\\\ \\/ \\x41 \\u00e9 \\U0001F600 \\0 \\a \\b \\e \\v \\f \\r \\N \\_ \\L \\P \\ end\"\n",
    ),
    ("double-quoted escaped tab character", "a: \"x\\\ty\"\n"),
    (
        "single-quoted doubled quote",
        "a: 'it''s '''\nb: ''''\nc: ''\n",
    ),
    ("double-quoted multi-line", "a: \"one\n  two\n\n  three\"\n"),
    ("single-quoted multi-line", "a: 'one\n  two   \n  three'\n"),
    ("double-quoted escaped line break", "a: \"one \\\n  two\"\n"),
    (
        "double-quoted trailing spaces before a break",
        "a: \"x   \n  y\"\n",
    ),
    (
        "double-quoted escaped space before a break",
        "a: \"x\\ \n  y\"\n",
    ),
    (
        "double-quoted escaped break and empty lines",
        "a: \"x\\\n\n  y\"\n",
    ),
    (
        "quoted keys with colons",
        "\"a:b\": 1\n'c: d': 2\n\"e\": 3\n",
    ),
    ("quoted key with escapes", "\"a\\tb\": 1\n"),
    ("empty quoted key", "'': 1\n"),
    ("hash inside quotes", "a: \"x # y\"\nb: 'x #y'\n"),
    ("quoted value then comment", "a: \"x\" # c\nb: 'y'   # c\n"),
    (
        "quoted strings that look typed",
        "- 'true'\n- \"1\"\n- '~'\n- ''\n- \"null\"\n- '0x1F'\n",
    ),
    (
        "quoted item starting a compact mapping",
        "- \"a\": 1\n  'b': 2\n",
    ),
    (
        "non-ASCII text",
        "a: héllo wörld ✓\n\"ключ\": 'значение'\nb: |\n  日本語\n",
    ),
    // Plain scalars.
    ("key:value is a plain scalar", "a: key:value\nb: x:\"y\"\n"),
    ("URL", "a: http://x.y/z?q=1#frag\n"),
    ("hash not after a space", "a: x#y\n"),
    (
        "comments after values",
        "a: x # c\nb: 'y' # c\nc: [1] # c\nd: {e: f} # c\n",
    ),
    ("multi-line plain", "a: one\n  two\n\n  three\nb: x\n"),
    ("multi-line plain in a sequence", "- one\n  two\n- x\n"),
    (
        "multi-line plain with indicators",
        "a: x\n  - y\n  [z] {w}\n  'q' \"r\" &s *t !u |v >w\n",
    ),
    ("multi-line plain at the root", "one\ntwo\n\nthree\n"),
    (
        "multi-line plain ended by a comment",
        "a: x\n  y # c\nb: 1\n",
    ),
    ("plain with trailing spaces", "a: x   \nb: y \n"),
    ("plain with inner spaces", "a: x   y\n"),
    (
        "plain starting with dashes or dots",
        "a: -x\nb: --flag=1\nc: ---x\nd: ...y\ne: .z\n",
    ),
    ("plain with brackets and commas", "a: foo[0], bar{1}\n"),
    ("plain with quotes inside", "a: it's \"x\"\n"),
    (
        "long plain value",
        "a: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
    ),
    ("empty values", "a:\nb: \nc:   # c\nd: 1\n"),
    ("empty sequence entries", "- \n-\n- x\n-   # c\n"),
    (
        "keys that look typed stay strings",
        "y: 1\nn: 2\ntrue: 3\non: 4\n1.5: 5\n.inf: 6\n",
    ),
    ("spaces before the colon", "a   : 1\n"),
    ("plain starting with ? or :", "a: ?x\nb: :y\n?c: 1\n:d: 2\n"),
    ("plain items starting with ? or :", "- ?e\n- :f\n"),
    ("flow plain starting with ? or :", "a: [?x, :y, -z]\n"),
    // Scalar resolution.
    (
        "booleans",
        "- true\n- True\n- TRUE\n- tRuE\n- yes\n- Yes\n- NO\n- on\n- Off\n- y\n- N\n- false\n- yess\n- o\n",
    ),
    (
        "nulls",
        "- null\n- Null\n- NULL\n- nULL\n- ~\n- ~~\n-\n- nil\n",
    ),
    (
        "integers",
        "- 0\n- -0\n- +5\n- 42\n- -42\n- 0x1F\n- 0X1f\n- -0x10\n- 0o17\n- 0O17\n- 0b101\n- 1_000\n- 0x_1\n- 0o8\n- 0b2\n- 0xg\n",
    ),
    (
        "integers with leading zeros",
        "- 007\n- -007\n- +007\n- 00\n- 0_7\n- 0e5\n",
    ),
    (
        "integer limits",
        "- 18446744073709551615\n- 18446744073709551616\n- -9223372036854775808\n- -9223372036854775809\n- 0x10000000000000000\n- 99999999999999999999999999999999999999999\n",
    ),
    ("underscores", "- 1__0\n- _1\n- 1_\n- 1_000.5\n- 0x1_F\n"),
    (
        "floats",
        "- 3.14\n- -2.5e3\n- .5\n- 5.\n- 1e5\n- 1E+5\n- +1.5\n- -.5\n- 0.0\n- -0.0\n- 1e-400\n- .5e999\n",
    ),
    (
        "float-like strings",
        "- nan\n- inf\n- +inf\n- -Infinity\n- NaN\n- .\n- +\n- -\n- 1.2.3\n- 1e\n- e5\n- v1\n- 1.0.0-alpha\n- 10m\n- 1Gi\n- 0.5Gi\n",
    ),
    // Collections.
    ("nested sequences", "- - a\n  - b\n- - c\n- - - d\n"),
    ("compact mappings in a sequence", "- a: 1\n  b: 2\n- c: 3\n"),
    ("indentless sequence", "a:\n- x\n- y\nb: 1\n"),
    (
        "indentless sequence of mappings",
        "a:\n- b: 1\n  c: 2\n- d: 3\ne: 4\n",
    ),
    ("sequence in a compact mapping", "- a:\n  - 1\n  b: 2\n"),
    (
        "sequence entry on the next line",
        "-\n  a: 1\n  b: 2\n-\n  - x\n",
    ),
    ("extra spaces after a dash", "-   a: 1\n    b: 2\n"),
    ("indented root", "  a: 1\n  b:\n    c: 2\n"),
    ("nested mappings", "a:\n  b:\n    c: 1\n  d: 2\ne: 3\n"),
    (
        "flow collections",
        "a: []\nb: {}\nc: [a, b]\nd: {a: b, c: d}\ne: [1, 'x', \"y\", [2, {f: g}]]\n",
    ),
    (
        "multi-line flow",
        "a: [a,\n  b, # c\n  c]\nb: {x: 1,\n  y: 2}\n",
    ),
    ("flow trailing comma", "a: [a, b, ]\nb: {a: b, }\n"),
    ("JSON-like flow", "a: {\"x\":1, \"y\": [true,null, 2.5]}\n"),
    ("flow with empty value", "a: {x: , y: 1}\n"),
    ("flow plain scalars with colons", "a: [http://x, a:b]\n"),
    ("flow at the root", "[a, {b: c}]\n"),
    ("flow in a sequence", "- [a]\n- {b: c}\n"),
    // Comments and documents.
    (
        "comments everywhere",
        "# c\na: 1 # c\n# c\nb:\n  # c\n  c: 2\n  # c\n# c\n",
    ),
    ("comment after a key", "a: # c\n  b: 1\n"),
    ("comment after a dash", "- # c\n  a: 1\n"),
    ("only comments", "# only\n# comments\n"),
    ("empty input", ""),
    ("only a document marker", "---\n"),
    ("empty documents", "---\n---\n# c\n---\n"),
    (
        "content on the --- line",
        "--- text\n--- [a, b]\n--- \"q\"\n--- >\n  folded\n--- 'x' # c\n",
    ),
    ("multi-line scalar on the --- line", "--- one\ntwo\n"),
    ("document markers", "---\na: 1\n...\n---\nb: 2\n...\n"),
    ("document end with comment", "a: 1\n... # c\n"),
    ("--- comment", "--- # c\na: 1\n"),
    ("bare then explicit documents", "a: 1\n---\nb: 2\n"),
    ("root scalars", "--- 1\n--- true\n--- x\n"),
    ("YAML 1.2 directive", "%YAML 1.2\n---\na: 1\n"),
    ("YAML 1.1 directive", "%YAML 1.1\n---\na: yes\nb: 0o17\n"),
    // Line endings and whitespace.
    (
        "CRLF",
        "a: 1\r\nb: |\r\n  x\r\n  y\r\nc: \"p\r\n  q\"\r\nd: 'r\r\n\r\n  s'\r\ne: one\r\n  two\r\n",
    ),
    ("CRLF keep chomping", "a: |+\r\n  x\r\n\r\n"),
    ("no final line break", "a: 1"),
    ("whitespace-only lines", "a: 1\n   \n\nb: 2\n  \n"),
];

#[test]
fn tricky_inputs_match_serde_saphyr_without_fallback() {
    for (name, text) in FAST {
        check(name, text, Fast);
    }
}

/// Cases the fast parser must leave to serde-saphyr: unsupported features, and errors.
const FALLBACK: &[(&str, &str)] = &[
    ("anchor and alias", "a: &x 1\nb: *x\n"),
    ("anchored mapping", "a: &x\n  b: 1\n"),
    ("core tag", "a: !!str 1\n"),
    ("local tag", "a: !custom x\n"),
    ("non-specific tag", "a: ! 1\n"),
    ("complex key", "? a\n: b\n"),
    ("merge key", "a: &x {b: 1}\nc:\n  <<: *x\n"),
    ("plain merge key without alias", "<<: {a: 1}\n"),
    ("null key", "~: a\n"),
    ("integer key", "1: a\n"),
    ("integer-equal keys", "0xB: a\n11: b\n"),
    ("duplicate keys", "a: 1\na: 2\n"),
    ("duplicate flow keys", "a: {b: 1, b: 2}\n"),
    ("tab indentation", "a:\n\tb: 1\n"),
    ("tab in a plain value", "a: x\ty\n"),
    ("tab after a colon", "a:\tb\n"),
    ("BOM", "\u{feff}a: 1\n"),
    ("NEL", "a: x\u{85}y\n"),
    ("line separator", "a: x\u{2028}y\n"),
    ("control character", "a: x\u{1}y\n"),
    ("lone CR", "a: 1\rb: 2\n"),
    ("positive infinity", "a: .inf\n"),
    ("negative infinity", "a: -.Inf\n"),
    ("NaN", "a: .NaN\n"),
    ("overflowing float", "a: 1e999\n"),
    ("mapping on the --- line", "--- a: b\n"),
    ("sequence on the --- line", "--- - a\n"),
    ("nested mapping on one line", "a: b: c\n"),
    ("sequence after a key on one line", "a: - b\n"),
    ("bad indentation", "a:\n    b: 1\n  c: 2\n"),
    ("key without colon", "a: 1\nb\n"),
    ("key:value where a key is expected", "a: 1\nkey:value\n"),
    ("text after a quoted value", "a: 'x' y\n"),
    ("unterminated double quote", "a: \"x\n"),
    ("unterminated single quote", "a: 'x\n"),
    ("unterminated flow", "a: [x, y\n"),
    ("flow pair in a sequence", "a: [b: c]\n"),
    ("flow key without value", "a: {b, c}\n"),
    ("flow collection as a key", "[a]: b\n"),
    ("unknown escape", "a: \"\\q\"\n"),
    ("surrogate escape", "a: \"\\ud800\"\n"),
    ("bare document after ...", "a: 1\n...\nb: 2\n"),
    ("unknown directive", "%TAG ! tag:x,2024:\n---\na: 1\n"),
    ("directive without document", "%YAML 1.2\n"),
    ("folded more-indented line", "a: >\n  x\n    y\n  z\n"),
    (
        "leading blank line longer than the content",
        "a: |\n    \n  x\n",
    ),
    ("empty keep literal with spaces", "a: |+\n   \nb: 1\n"),
    ("reserved indicator", "a: @x\n"),
    ("multi-line quoted key", "\"a\nb\": 1\n"),
    ("content after the root", "- a\nb: 1\n"),
    ("multi-line plain with a colon", "a: x\n  y: z\n"),
];

#[test]
fn unsupported_and_invalid_inputs_fall_back() {
    for (name, text) in FALLBACK {
        check(name, text, Fallback);
    }
}

#[test]
fn long_keys_fall_back_and_long_values_do_not() {
    let long = "k".repeat(1500);
    check("long plain key", &format!("{long}: 1\n"), Fallback);
    check("long quoted key", &format!("'{long}': 1\n"), Fallback);
    let value = "word ".repeat(2000);
    check("long plain value", &format!("a: {value}\n"), Fast);
    check("long quoted value", &format!("a: \"{value}\"\n"), Fast);
    check("long flow value", &format!("a: [{value}]\n"), Fast);
    let lines = "  word word word\n".repeat(300);
    check("long multi-line plain", &format!("a: x\n{lines}"), Fast);
}

#[test]
fn many_comments_before_a_nested_value_fall_back() {
    // serde-saphyr buffers at most 32 comments while it looks for the value.
    let comments = "# c\n".repeat(40);
    check("40 comments", &format!("a:\n{comments}  b: 1\n"), Fallback);
    let few = "# c\n".repeat(10);
    check("10 comments", &format!("a:\n{few}  b: 1\n"), Fast);
}

fn nested_block_mappings(depth: usize) -> String {
    let mut s = String::new();
    for i in 0..depth {
        s.push_str(&" ".repeat(i));
        s.push_str("k:\n");
    }
    s.push_str(&" ".repeat(depth));
    s.push_str("leaf: 1\n");
    s
}

#[test]
fn depth_limit_holds_on_the_fast_path() {
    let limits = Limits::default();
    check("shallow nesting", &nested_block_mappings(40), Fast);
    // Over the limit: the fast parser stops and serde-saphyr reports the error.
    let deep = nested_block_mappings(limits.max_depth + 10);
    check("deep block nesting", &deep, Fallback);
    assert!(parse_documents(&deep, &limits).is_err());
    let flow = format!("a: {}1{}\n", "[".repeat(10_000), "]".repeat(10_000));
    check("deep flow nesting", &flow, Fallback);
    assert!(parse_documents(&flow, &limits).is_err());
    let seqs = format!("{}x\n", "- ".repeat(500));
    check("deep compact sequences", &seqs, Fallback);
    // A tighter limit is honoured too.
    let tight = Limits {
        max_depth: 8,
        ..Limits::default()
    };
    check_with(
        "tight depth limit",
        &nested_block_mappings(20),
        Fallback,
        &tight,
    );
    assert!(parse_documents(&nested_block_mappings(20), &tight).is_err());
    check_with(
        "within a tight limit",
        &nested_block_mappings(3),
        Fast,
        &tight,
    );
}

#[test]
fn node_document_and_size_limits_hold_on_the_fast_path() {
    let few_nodes = Limits {
        max_nodes: 50,
        ..Limits::default()
    };
    let many = "- x\n".repeat(100);
    check_with("node limit", &many, Fallback, &few_nodes);
    assert!(parse_documents(&many, &few_nodes).is_err());
    check_with("within the node limit", "- x\n- y\n", Fast, &few_nodes);

    let few_docs = Limits {
        max_documents: 5,
        ..Limits::default()
    };
    let docs = "---\na: 1\n".repeat(20);
    check_with("document limit", &docs, Fallback, &few_docs);
    assert!(parse_documents(&docs, &few_docs).is_err());

    let small = Limits {
        max_bytes: 10,
        ..Limits::default()
    };
    assert!(parse_documents("a: 1\nb: 2\nc: 3\n", &small).is_err());
    assert!(parse_documents_fast("a: 1\nb: 2\nc: 3\n", &small).is_err());
}
