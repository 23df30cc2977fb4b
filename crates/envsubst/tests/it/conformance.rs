//! Shared conformance vectors taken from drone/envsubst and clusterctl (see `shared/reference`).
//!
//! The vectors are published outside the repository, in `<workspace>/../shared/conformance`, or
//! under the directory named by `CAPI_SHARED_DIR`: the tests are ignored unless asked for
//! (`make test` asks where the directory is), and fail when asked for without it.

use std::collections::BTreeMap;

use capi_envsubst::{Error, Node, Template};
use serde::Deserialize;
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Reads `conformance/<file>` of the published files; an error when they are absent.
fn load<T: for<'de> Deserialize<'de>>(file: &str) -> Result<Vec<T>, Box<dyn std::error::Error>> {
    let path = capi_test_support::published()?
        .join("conformance")
        .join(file);
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let cases: Vec<T> = serde_json::from_str(&text)?;
    assert!(!cases.is_empty(), "{} holds no cases", path.display());
    eprintln!("running {} cases from {}", cases.len(), path.display());
    Ok(cases)
}

#[derive(Deserialize)]
struct EvalCase {
    name: String,
    input: String,
    env: BTreeMap<String, String>,
    want: String,
    layer: String,
    error: Option<ExpectedError>,
}

#[derive(Deserialize)]
struct ExpectedError {
    kind: String,
    message: String,
    #[serde(default)]
    missing: Vec<String>,
}

#[test]
#[ignore = "needs the published files of ../shared (CAPI_SHARED_DIR); make test runs it when present"]
fn envsubst_cases() -> TestResult {
    let cases = load::<EvalCase>("envsubst-cases.json")?;
    let mut failures = Vec::new();
    for case in &cases {
        let lookup = |name: &str| case.env.get(name).cloned();
        let result = match case.layer.as_str() {
            "envsubst.Eval" => capi_envsubst::eval(&case.input, lookup),
            "clusterctl SimpleProcessor.Process" => capi_envsubst::process(&case.input, lookup),
            other => return Err(format!("case {:?}: unknown layer {other:?}", case.name).into()),
        };
        if let Some(problem) = check_eval(case, result) {
            failures.push(format!("{}: {problem}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "failed cases:\n{}",
        failures.join("\n")
    );
    Ok(())
}

fn check_eval(case: &EvalCase, result: Result<String, Error>) -> Option<String> {
    match (&case.error, result) {
        (None, Ok(got)) if got == case.want => None,
        (None, Ok(got)) => Some(format!("got {got:?}, want {:?}", case.want)),
        (None, Err(err)) => Some(format!("unexpected error {err}")),
        (Some(want), Ok(got)) => Some(format!("got {got:?}, want error {:?}", want.message)),
        (Some(want), Err(err)) => {
            // On error clusterctl hands back the raw input; the vectors record that as `want`.
            if case.want != case.input {
                return Some("vector expects output despite an error".to_owned());
            }
            if err.to_string() != want.message {
                return Some(format!(
                    "error {:?}, want {:?}",
                    err.to_string(),
                    want.message
                ));
            }
            match (want.kind.as_str(), err) {
                ("missing_variables", Error::MissingVariables(missing))
                    if missing == want.missing =>
                {
                    None
                }
                ("parse_error", Error::Parse { .. }) => None,
                (kind, err) => Some(format!("error {err:?} is not of kind {kind}")),
            }
        }
    }
}

#[derive(Deserialize)]
struct ParseCase {
    input: String,
    want_tree: Option<Value>,
    error: Option<Value>,
}

/// drone's tree shape: a sequence is a right-nested two-element list and an empty text stands for nothing.
fn tree_json(template: &Template) -> Value {
    fn node(n: &Node) -> Value {
        match n {
            Node::Text(text) => json!({"type": "text", "value": text}),
            Node::Func(func) => json!({
                "type": "func",
                "param": func.param(),
                "name": func.op().as_str(),
                "args": func.args().iter().map(node).collect::<Vec<_>>(),
            }),
        }
    }
    fn sequence(nodes: &[Node]) -> Value {
        match nodes {
            [] => json!({"type": "text", "value": ""}),
            [only] => node(only),
            [first, rest @ ..] => json!({"type": "list", "nodes": [node(first), sequence(rest)]}),
        }
    }
    sequence(template.nodes())
}

fn expected_message(error: &Value) -> Option<&str> {
    error
        .as_str()
        .or_else(|| error.get("message").and_then(Value::as_str))
}

#[test]
#[ignore = "needs the published files of ../shared (CAPI_SHARED_DIR); make test runs it when present"]
fn parse_cases() -> TestResult {
    let cases = load::<ParseCase>("envsubst-parse-cases.json")?;
    let mut failures = Vec::new();
    for case in &cases {
        let result = capi_envsubst::parse(&case.input);
        let problem = match (&case.want_tree, &case.error, result) {
            (Some(want), None, Ok(template)) => {
                let got = tree_json(&template);
                (got != *want).then(|| format!("tree {got}, want {want}"))
            }
            (None, Some(error), Err(err)) => {
                let want = expected_message(error);
                (want != Some(err.to_string().as_str()))
                    .then(|| format!("error {err}, want {error}"))
            }
            (_, _, Ok(template)) => Some(format!("unexpected success {}", tree_json(&template))),
            (_, _, Err(err)) => Some(format!("unexpected error {err}")),
        };
        if let Some(problem) = problem {
            failures.push(format!("{:?}: {problem}", case.input));
        }
    }
    assert!(
        failures.is_empty(),
        "failed cases:\n{}",
        failures.join("\n")
    );
    Ok(())
}
