//! Randomised checks of the fast parser: random JSON values written by the crate's own
//! serializer must come back unchanged through the fast parser (and equal serde-saphyr's
//! reading); and randomly mutated YAML texts, valid or not, must never be accepted by the fast
//! parser with a result different from serde-saphyr's (or when serde-saphyr refuses them).

use capi_yaml::internals::{parse_documents_fast, parse_documents_full};
use capi_yaml::{Limits, to_multi_doc, to_string};
use serde_json::{Map, Value};

/// A small deterministic generator (xorshift64*), so failures are reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Pieces of strings that exercise quoting, escaping and scalar resolution.
const PIECES: &[&str] = &[
    "a",
    "b",
    "Z",
    "word",
    "0",
    "1",
    "9",
    "-",
    "- ",
    ":",
    ": ",
    " ",
    "#",
    " #",
    "'",
    "\"",
    "\\",
    "\n",
    "\t",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&",
    "*",
    "!",
    "|",
    ">",
    "?",
    "%",
    "@",
    "`",
    "~",
    "é",
    "✓",
    "日本",
    "yes",
    "No",
    "on",
    "null",
    "true",
    "0x1F",
    "1e5",
    "0o17",
    "007",
    ".inf",
    ".5",
    "---",
    "...",
    "  ",
    "\n\n",
    "\r",
    "\u{7f}",
    "\u{a0}",
    "x:y",
    "http://a/b",
    "${VAR}",
];

fn random_string(rng: &mut Rng) -> String {
    let n = rng.below(8);
    (0..n).map(|_| *rng.pick(PIECES)).collect()
}

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    let kinds = if depth >= 4 { 6 } else { 8 };
    match rng.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => match rng.below(4) {
            0 => Value::from(rng.next()),
            1 => Value::from(-((rng.next() >> 1) as i64)),
            _ => Value::from(rng.below(2000) as i64 - 1000),
        },
        3 => {
            let f = match rng.below(3) {
                0 => f64::from_bits(rng.next()),
                1 => (rng.below(100_000) as f64 - 50_000.0) / 64.0,
                _ => (rng.next() as f64) * 1e-300,
            };
            if f.is_finite() {
                Value::from(f)
            } else {
                Value::from(0.5)
            }
        }
        4 | 5 => Value::String(random_string(rng)),
        6 => Value::Array(
            (0..rng.below(5))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = Map::new();
            for _ in 0..rng.below(5) {
                m.insert(random_string(rng), random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
    }
}

#[test]
fn serialized_random_values_round_trip_through_the_fast_parser() -> Result<(), capi_yaml::Error> {
    let limits = Limits::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut fallbacks = Vec::new();
    let cases = 3000;
    for case in 0..cases {
        let docs: Vec<Value> = (0..=rng.below(3))
            .map(|_| random_value(&mut rng, 0))
            .collect();
        let text = if docs.len() == 1 && rng.below(2) == 0 {
            to_string(&docs[0])?
        } else {
            to_multi_doc(&docs)?
        };
        let expected: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
        let full = parse_documents_full(&text, &limits)
            .unwrap_or_else(|e| panic!("case {case}: serde-saphyr refused {text:?}: {e}"));
        match parse_documents_fast(&text, &limits) {
            Ok(fast) => {
                assert_eq!(fast, full, "case {case}: the parsers disagree on {text:?}");
                assert_eq!(fast, expected, "case {case}: no round trip for {text:?}");
            }
            Err(bail) => fallbacks.push(format!("case {case}: {bail} on {text:?}")),
        }
    }
    assert!(
        fallbacks.is_empty(),
        "{} of {cases} serialized values fell back, e.g.:\n{}",
        fallbacks.len(),
        fallbacks
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}

/// Seeds for mutation: manifest-like texts covering the fast parser's constructs.
const SEEDS: &[&str] = &[
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x # c\n  labels: {a: b}\ndata:\n  k: |\n    line 1\n\n    line 2\n  j: >-\n    folded\n    text\n",
    "---\n- a\n- - b\n  - c: 1\n    d: [1, 2, 'x']\n-\n  e: \"q\\n\\u00e9\"\n...\n",
    "spec:\n  containers:\n  - name: m\n    args:\n    - --flag=${X:=1}\n    - '--b'\n    image: r/i:v1\n    ports:\n    - containerPort: 9443\n      protocol: TCP\n",
    "a: one\n  two\n\n  three\nb: 'x\n  y'\nc: \"p\\\n  q\"\nd:\n  - {x: 1, y: [a, {z: ~}]}\n",
    "# c\n%YAML 1.2\n---\nkey: value\nother: |+\n  kept\n\n--- text\n--- |2\n   x\n",
    "properties:\n  type:\n    description: |-\n      The type.\n      More: text.\n    type: string\n    enum:\n    - A\n    - B\n  x-kubernetes-int-or-string: true\n",
];

const MUTATION_BYTES: &[u8] = b" \n:-#'\"[]{},|>&*!?%\t\\0123456789abcxyz.~+_";

fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut b = text.as_bytes().to_vec();
    for _ in 0..=rng.below(3) {
        let at = rng.below(b.len() + 1);
        match rng.below(5) {
            4 => {
                // Change a line's indentation.
                let line = b[..at]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |p| p + 1);
                if rng.below(2) == 0 {
                    b.insert(line, b' ');
                } else if b.get(line) == Some(&b' ') {
                    b.remove(line);
                }
            }
            0 if at < b.len() => {
                b.remove(at);
            }
            1 if at < b.len() => b[at] = *rng.pick(MUTATION_BYTES),
            2 => {
                // Duplicate a piece, which keeps the text plausible.
                let end = (at + rng.below(12)).min(b.len());
                let piece = b[at..end].to_vec();
                let to = rng.below(b.len() + 1);
                b.splice(to..to, piece);
            }
            _ => b.insert(at, *rng.pick(MUTATION_BYTES)),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// `CAPI_YAML_FUZZ_SCALE` (default 1) multiplies the number of mutations, and changes
/// the random sequence, for longer hunts.
fn fuzz_scale() -> u64 {
    std::env::var("CAPI_YAML_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

#[test]
fn mutated_texts_are_never_accepted_differently() -> Result<(), capi_yaml::Error> {
    let limits = Limits::default();
    let scale = fuzz_scale();
    let mut rng = Rng(0x1234_5678_9abc_def1 ^ scale.wrapping_mul(0x9e37_79b9));
    let mut seeds: Vec<String> = SEEDS.iter().map(std::string::ToString::to_string).collect();
    seeds.extend(SEEDS.iter().map(|s| s.replace('\n', "\r\n")));
    // And serializer output, which quotes and escapes in ways hand-written seeds do not.
    for _ in 0..500 {
        let docs: Vec<Value> = (0..=rng.below(2))
            .map(|_| random_value(&mut rng, 0))
            .collect();
        seeds.push(to_multi_doc(&docs)?);
    }
    let mut accepted = 0;
    let mut total = 0;
    for (i, seed) in seeds.iter().enumerate() {
        let rounds = scale as usize * if i < 2 * SEEDS.len() { 3000 } else { 20 };
        for _ in 0..rounds {
            let text = mutate(&mut rng, seed);
            total += 1;
            let Ok(fast) = parse_documents_fast(&text, &limits) else {
                continue;
            };
            accepted += 1;
            match parse_documents_full(&text, &limits) {
                Ok(full) => assert_eq!(fast, full, "the parsers disagree on {text:?}"),
                Err(e) => {
                    panic!("fast parser accepted {text:?} as {fast:?}, serde-saphyr refused: {e}")
                }
            }
        }
    }
    // The mutations must exercise the fast path, not only its refusals.
    assert!(
        accepted * 4 > total,
        "only {accepted} of {total} mutated texts were parsed by the fast parser"
    );
    Ok(())
}
