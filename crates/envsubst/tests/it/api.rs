//! Behaviour of the public API on edge cases not covered by the shared vectors.

use std::collections::HashMap;

use capi_envsubst::{
    Error, MAX_NESTING_DEPTH, Node, Op, ParseErrorKind, Variable, convert_legacy_vars, eval, parse,
    process, variables,
};

type TestResult = Result<(), Error>;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn with(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map = env(pairs);
    move |name| map.get(name).cloned()
}

fn var(name: &str, default: Option<&str>) -> Variable {
    Variable {
        name: name.to_owned(),
        default: default.map(str::to_owned),
    }
}

fn parse_kind(input: &str) -> Option<ParseErrorKind> {
    match parse(input) {
        Err(Error::Parse { kind, .. }) => Some(kind),
        _ => None,
    }
}

#[test]
fn nested_defaults() -> TestResult {
    let input = "${A:=${B:=x}-y}";
    assert_eq!(eval(input, with(&[]))?, "x-y");
    assert_eq!(eval(input, with(&[("B", "b")]))?, "b-y");
    assert_eq!(eval(input, with(&[("A", "a"), ("B", "b")]))?, "a");
    // Set but empty still takes the default (drone's toDefault, unlike bash's `=`).
    assert_eq!(eval(input, with(&[("A", ""), ("B", "")]))?, "x-y");
    // Only the outer variable is listed; its default shows the nested one by name.
    assert_eq!(variables(input)?, [var("A", Some("${B}-y"))]);
    // Nested variables are never required, even without defaults of their own.
    assert_eq!(process("${A:=${B}}", with(&[]))?, "");
    Ok(())
}

#[test]
fn all_default_forms_behave_alike() -> TestResult {
    for op in ["=", ":=", ":-", ":?", ":+"] {
        let input = format!("${{V{op}d}}");
        assert_eq!(eval(&input, with(&[]))?, "d", "{input}");
        assert_eq!(eval(&input, with(&[("V", "")]))?, "d", "{input}");
        assert_eq!(eval(&input, with(&[("V", "v")]))?, "v", "{input}");
    }
    assert_eq!(eval("${V:=}", with(&[]))?, "");
    for unsupported in ["${V-d}", "${V+d}"] {
        assert_eq!(
            parse_kind(unsupported),
            Some(ParseErrorKind::MissingClosingBrace)
        );
    }
    Ok(())
}

#[test]
fn dollar_escapes() -> TestResult {
    let vars = with(&[("X", "x"), ("A", "a$b")]);
    assert_eq!(eval("a$$b", &vars)?, "a$b");
    assert_eq!(eval("$$$", &vars)?, "$$");
    assert_eq!(eval("$${X}", &vars)?, "${X}");
    assert_eq!(eval("$$${X}", &vars)?, "$x");
    assert_eq!(eval("$$$${X}", &vars)?, "$${X}");
    assert_eq!(eval("cost: 5$", &vars)?, "cost: 5$");
    // `$VAR` without braces is text.
    assert_eq!(eval("$X ${X}", &vars)?, "$X x");
    // Defaults do not unescape; replace patterns do.
    assert_eq!(eval("${U:=$$}", &vars)?, "$$");
    assert_eq!(eval("${A/$$/-}", &vars)?, "a-b");
    // Values are inserted verbatim, never re-parsed.
    assert_eq!(eval("${V}", with(&[("V", "${X} $$")]))?, "${X} $$");
    Ok(())
}

#[test]
fn replace_escapes_and_quirks() -> TestResult {
    let vars = with(&[("P", "a/b\\c"), ("S", "abcabc")]);
    assert_eq!(eval("${P//\\//:}", &vars)?, "a:b\\c");
    assert_eq!(eval("${P/\\\\/|}", &vars)?, "a/b|c");
    assert_eq!(eval("${S/b/}", &vars)?, "acabc");
    assert_eq!(eval("${S//b/}", &vars)?, "acac");
    assert_eq!(eval("${S/#ab/X}", &vars)?, "Xcabc");
    assert_eq!(eval("${S/%bc/X}", &vars)?, "abcaX");
    // drone's prefix/suffix replacement needs a replacement argument, otherwise it does nothing.
    assert_eq!(eval("${S/#ab/}", &vars)?, "abcabc");
    // Literal, not glob.
    assert_eq!(eval("${S/*/X}", &vars)?, "abcabc");
    Ok(())
}

#[test]
fn trims_use_globs_crossing_slashes() -> TestResult {
    let vars = with(&[("F", "dir/sub/file.tar.gz")]);
    assert_eq!(eval("${F#*/}", &vars)?, "sub/file.tar.gz");
    assert_eq!(eval("${F##*/}", &vars)?, "file.tar.gz");
    assert_eq!(eval("${F%.*}", &vars)?, "dir/sub/file.tar");
    assert_eq!(eval("${F%%.*}", &vars)?, "dir/sub/file");
    assert_eq!(eval("${F#nomatch}", &vars)?, "dir/sub/file.tar.gz");
    // A malformed pattern leaves the value alone.
    assert_eq!(eval("${F#[}", &vars)?, "dir/sub/file.tar.gz");
    Ok(())
}

#[test]
fn casing_length_substring() -> TestResult {
    let vars = with(&[("V", "élan Vital"), ("N", "0123456789")]);
    assert_eq!(eval("${V^}", &vars)?, "Élan Vital");
    assert_eq!(eval("${V^^}", &vars)?, "ÉLAN VITAL");
    assert_eq!(eval("${V,,}", &vars)?, "élan vital");
    assert_eq!(eval("${#V}", &vars)?, "11"); // bytes, not characters
    assert_eq!(eval("${N:2:3}", &vars)?, "234");
    // `:-` is a default, not a negative offset, as in drone.
    assert_eq!(eval("${N:-3}", &vars)?, "0123456789");
    // Go's Atoi rejects the space, and an unparsable offset yields the whole value.
    assert_eq!(eval("${N: -3}", &vars)?, "0123456789");
    // Negative offsets count from the end but can only come from a nested expression.
    assert_eq!(
        eval("${N:${P}}", with(&[("N", "0123456789"), ("P", "-3")]))?,
        "789"
    );
    assert_eq!(eval("${N:${P:=7}}", &vars)?, "789");
    assert_eq!(eval("${N:x}", &vars)?, "0123456789");
    Ok(())
}

#[test]
fn unicode_variable_names() -> TestResult {
    let vars = with(&[("名前", "taro"), ("é_1", "x"), ("٣", "three")]);
    assert_eq!(eval("${名前}/${é_1}/${٣}", &vars)?, "taro/x/three");
    assert_eq!(eval("${ÜBER:=d}", &vars)?, "d");
    assert_eq!(
        variables("${名前} ${Ω:=w}")?,
        // Sorted by bytes, like Go's sort.Strings.
        [var("Ω", Some("w")), var("名前", None)]
    );
    // Not letters or decimal digits in Go's sense.
    assert_eq!(
        parse_kind("${x²}"),
        Some(ParseErrorKind::MissingClosingBrace)
    );
    assert_eq!(parse_kind("${Ⓐ}"), Some(ParseErrorKind::VariableName));
    Ok(())
}

#[test]
fn legacy_spacing_is_a_clusterctl_feature() -> TestResult {
    let vars = with(&[("BAR", "bar")]);
    assert_eq!(
        process("a ${ BAR } ${BAR\t} ${\nBAR}", &vars)?,
        "a bar bar bar"
    );
    // Raw envsubst does not accept it.
    assert_eq!(parse_kind("${ BAR }"), Some(ParseErrorKind::VariableName));
    // Only bare names are rewritten, so this still fails in clusterctl.
    assert_eq!(
        process("${ BAR:=x }", &vars),
        Err(Error::Parse {
            kind: ParseErrorKind::VariableName,
            offset: 0
        })
    );
    assert_eq!(convert_legacy_vars("${ A } ${B}"), "${A} ${B}");
    Ok(())
}

#[test]
fn unterminated_expressions() {
    let cases: &[(&str, ParseErrorKind, usize)] = &[
        ("abc ${", ParseErrorKind::VariableName, 4),
        ("${A", ParseErrorKind::MissingClosingBrace, 0),
        ("x ${A:=y", ParseErrorKind::FuncSubstitution, 2),
        ("${A:=${B}", ParseErrorKind::FuncSubstitution, 0),
        ("${A/x/y", ParseErrorKind::BadSubstitution, 0),
        ("${#A", ParseErrorKind::BadSubstitution, 0),
    ];
    for (input, kind, offset) in cases {
        assert_eq!(
            parse(input),
            Err(Error::Parse {
                kind: *kind,
                offset: *offset
            }),
            "{input:?}"
        );
    }
}

#[test]
fn error_offsets_refer_to_the_callers_text() {
    // The legacy rewrite shortens `${ A }`; the reported offset still points into the original input.
    let input = "${ A } ${  B  } ${C";
    let want = input.rfind("${").unwrap_or_default();
    assert_eq!(
        process(input, |_| Some(String::new())),
        Err(Error::Parse {
            kind: ParseErrorKind::MissingClosingBrace,
            offset: want
        })
    );
}

#[test]
fn variable_listing_order_and_defaults() -> TestResult {
    let input = "${Z} ${A:=1} ${M:-} ${A} ${Q:=\"\"} ${B:=${C^^}x${D}} ${#L} ${S:5} ${R/a/b} ${U,,} ${T:=a${E}}";
    assert_eq!(
        variables(input)?,
        [
            var("A", Some("1")),
            var("B", Some("${C}x${D}")),
            var("L", None),
            var("M", None),
            var("Q", Some("\"\"")),
            var("R", Some("ab")),
            var("S", Some("5")),
            var("T", Some("a${E}")),
            var("U", None),
            var("Z", None),
        ]
    );
    // The first occurrence decides: here `A` is required although a later use has a default.
    let listed = variables("${A} ${A:=1}")?;
    assert_eq!(listed, [var("A", None)]);
    assert!(listed.iter().all(Variable::is_required));
    assert_eq!(variables("no variables, $HOME and $$ only")?, []);
    Ok(())
}

#[test]
fn missing_variables_are_all_named() {
    let err = process(
        "${B} ${A} ${C:=x} ${D} ${B} ${E:=${F}}",
        with(&[("D", "d")]),
    );
    assert_eq!(
        err,
        Err(Error::MissingVariables(vec!["A".into(), "B".into()]))
    );
    let message = err.map_err(|e| e.to_string()).err().unwrap_or_default();
    assert_eq!(
        message,
        "value for variables [A, B] is not set. Please set the value using os environment variables or the clusterctl config file"
    );
}

#[test]
fn set_but_empty_is_not_missing() -> TestResult {
    let vars = with(&[("X", ""), ("Y", "")]);
    assert_eq!(process("[${X}] [${Y:=d}] [${Y=e}]", &vars)?, "[] [d] [e]");
    Ok(())
}

#[test]
fn raw_eval_treats_unset_as_empty() -> TestResult {
    assert_eq!(
        eval("[${NOPE}] [${NOPE^^}] [${#NOPE}]", with(&[]))?,
        "[] [] [0]"
    );
    let template = parse("${A}-${B}")?;
    assert_eq!(template.eval(with(&[("A", "1")]))?, "1-");
    assert_eq!(template.eval(with(&[("B", "2")]))?, "-2");
    Ok(())
}

#[test]
fn tree_is_inspectable() -> TestResult {
    let template = parse("a ${X:=p${Y}q} b")?;
    let [Node::Text(a), Node::Func(func), Node::Text(b)] = template.nodes() else {
        panic!("unexpected shape {:?}", template.nodes());
    };
    assert_eq!((a.as_str(), b.as_str()), ("a ", " b"));
    assert_eq!(func.param(), "X");
    assert_eq!(func.op(), Op::DefaultColonEq);
    assert_eq!(func.op().as_str(), ":=");
    assert!(func.op().is_default());
    assert_eq!(func.args().len(), 3);
    assert!(parse("")?.nodes().is_empty());
    Ok(())
}

#[test]
fn nesting_is_limited() -> TestResult {
    let nested = |depth: usize| format!("{}x{}", "${A:=".repeat(depth), "}".repeat(depth));
    assert_eq!(eval(&nested(MAX_NESTING_DEPTH), with(&[]))?, "x");
    assert!(matches!(
        parse(&nested(MAX_NESTING_DEPTH + 1)),
        Err(Error::NestingTooDeep {
            limit: MAX_NESTING_DEPTH,
            ..
        })
    ));
    // Far beyond the limit: rejected without exhausting the stack.
    assert!(matches!(
        parse(&"${A:=".repeat(1_000_000)),
        Err(Error::NestingTooDeep { .. })
    ));
    Ok(())
}

#[test]
fn exponential_replacement_is_refused() {
    // Each level multiplies the output by ten; 13 levels would be 10 TB.
    let mut input = "${A}".to_owned();
    for _ in 0..12 {
        input = format!("${{A//a/{input}}}");
    }
    let result = eval(&input, with(&[("A", "aaaaaaaaaa")]));
    assert!(
        matches!(result, Err(Error::OutputTooLarge { .. })),
        "{result:?}"
    );
}

#[test]
fn costly_globs_are_refused() {
    let value = "a".repeat(20_000);
    let result = eval("${V##*a*a*a*b}", with(&[("V", &value)]));
    assert!(
        matches!(result, Err(Error::PatternTooComplex { .. })),
        "{result:?}"
    );
}

#[test]
fn large_inputs_round_trip() -> TestResult {
    // About 2 MB of YAML-like text, with stray `$` and a handful of expressions.
    let mut input = String::new();
    let mut expected = String::new();
    let mut i = 0;
    while input.len() < 2 * 1024 * 1024 {
        let line = format!("  field{i}: \"plain value with a $ sign and {{braces}}\"\n");
        input.push_str(&line);
        expected.push_str(&line);
        if i % 5000 == 0 {
            input.push_str(&format!("  var{i}: ${{VAR_{i}:=default}} ${{ NS }}\n"));
            expected.push_str("  var");
            expected.push_str(&format!("{i}: default system\n"));
        }
        i += 1;
    }
    let output = process(&input, with(&[("NS", "system")]))?;
    assert_eq!(output.len(), expected.len());
    assert!(output == expected);

    let plain = "x".repeat(2 * 1024 * 1024);
    assert!(eval(&plain, with(&[]))? == plain);
    assert!(matches!(
        convert_legacy_vars(&plain),
        std::borrow::Cow::Borrowed(_)
    ));

    // Many expressions at the top level are a flat list, not recursion.
    let many = "${A}".repeat(200_000);
    assert_eq!(eval(&many, with(&[("A", "a")]))?.len(), 200_000);
    Ok(())
}

#[test]
fn real_provider_components() -> Result<(), Box<dyn std::error::Error>> {
    let path = capi_test_support::releases()?.join("cluster-api/v1.12.0/core-components.yaml");
    let input = std::fs::read_to_string(&path)?;
    let listed = variables(&input)?;
    assert_eq!(listed.len(), 11);
    assert!(listed.iter().all(|v| !v.is_required()));
    assert!(listed.contains(&var("CAPI_DIAGNOSTICS_ADDRESS", Some(":8443"))));
    let output = process(&input, with(&[("EXP_MACHINE_POOL", "false")]))?;
    assert!(!output.contains("${"));
    assert!(output.contains("--diagnostics-address=:8443"));
    assert!(output.contains("MachinePool=false"));
    Ok(())
}

#[test]
fn expansion_stops_at_the_limits_given() {
    // Each level multiplies the value's length: 300 bytes of V give 300^3 = 27 MB.
    let v = "a".repeat(300);
    let vars = [("V", v.as_str())];
    let lookup = with(&vars);
    let template = "x: ${V//a/${V//a/${V}}}\n";
    let limits = capi_envsubst::Limits {
        max_expansion: 1 << 20,
        max_value: usize::MAX,
    };
    assert_eq!(
        capi_envsubst::process_with(template, &lookup, &limits),
        Err(Error::OutputTooLarge {
            limit: (1 << 20) + 2 * template.len()
        })
    );
    let per_value = capi_envsubst::Limits {
        max_expansion: usize::MAX / 4,
        max_value: 64 << 10,
    };
    assert_eq!(
        capi_envsubst::process_with(template, &lookup, &per_value),
        Err(Error::ValueTooLarge { limit: 64 << 10 })
    );
}

#[test]
fn the_limit_per_value_leaves_the_template_text_alone() -> TestResult {
    // The template's own text is not a value: a large release with small values passes.
    let text = format!("{}: ${{V}}\n", "k".repeat(100_000));
    let limits = capi_envsubst::Limits {
        max_expansion: 1024,
        max_value: 16,
    };
    let out = capi_envsubst::process_with(&text, with(&[("V", "short")]), &limits)?;
    assert!(out.ends_with(": short\n"));
    let long = "v".repeat(17);
    assert_eq!(
        capi_envsubst::process_with(&text, with(&[("V", &long)]), &limits),
        Err(Error::ValueTooLarge { limit: 16 })
    );
    Ok(())
}
