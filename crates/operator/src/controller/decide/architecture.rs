//! The decision layer takes no client and calls no API: each of its source files is read and
//! its non-test code searched for what would talk to the cluster or reach up into the layers
//! above (which import this one).

/// What no decision may name: a client, an API handle or call, the event recorder, the
/// reconcile context (which holds the client), or a module above this one.
const FORBIDDEN: &[&str] = &[
    "kube::Client",
    "Client::",
    "Api<",
    "Api::",
    ".patch(",
    ".patch_status(",
    ".get_opt(",
    "ListParams",
    "PatchParams",
    "Patch::",
    "async fn",
    "Recorder",
    "publish(",
    "Ctx",
    "crate::controller::",
    "super::super::",
    ".await",
];

/// The decision layer's source files, read from the checkout this crate is built from.
fn sources() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller/decide");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.map(|e| e.path()).unwrap_or_default();
        if path.extension().is_some_and(|x| x == "rs") && !path.ends_with("architecture.rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            out.push((path.display().to_string(), text));
        }
    }
    out
}

/// The code of a file before its test module (tests may build fixtures any way they like).
fn non_test(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or(text)
}

/// The forbidden names in `text`'s non-test code, each with its line.
fn violations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in non_test(text).lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for f in FORBIDDEN.iter().filter(|f| code.contains(**f)) {
            found.push(format!("line {}: {f}", n + 1));
        }
    }
    found
}

#[test]
fn the_decision_layer_takes_no_client_and_calls_no_api() {
    let files = sources();
    assert!(
        files.len() >= 7,
        "the decision layer's files were not found: {files:?}"
    );
    let bad: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| {
            violations(text)
                .into_iter()
                .map(move |v| format!("{path} {v}"))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "the decision layer talks to the API: {bad:#?}"
    );
}

#[test]
fn the_check_sees_a_client_call() {
    let io = "use kube::Client;\nfn f(api: Api<Pod>) { api.patch(\"x\"); }\n";
    assert_eq!(violations(io).len(), 3, "{:?}", violations(io));
    let tested = "fn f() {}\n#[cfg(test)]\nmod tests { use kube::Client; }\n";
    assert!(violations(tested).is_empty());
    let commented = "fn f() {} // not Api<Pod>\n";
    assert!(violations(commented).is_empty());
}
