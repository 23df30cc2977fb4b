//! The alerts and the dashboard in manifests/monitoring against the operator that feeds them:
//! every metric an alert or a panel queries is one a running operator exports (scraped after it
//! reconciled a sample provider), every alert has a runbook section and unit tests that make it
//! fire and not fire, and the dashboard is well formed. (grafana/dashboard-linter cannot be
//! built here: its module is not served by the Go module proxy, so the structural rules it
//! would check are checked below.) `make alerts-check` runs the unit tests with promtool.

use crate::support;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::Duration,
};

use capi_test_support::{private_cluster, wait_for, workspace_root};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);

fn monitoring() -> PathBuf {
    workspace_root().join("manifests/monitoring")
}

fn read_yaml(path: &Path) -> Result<Value, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path)?;
    Ok(capi_yaml::from_str(&text)?)
}

fn dashboard() -> Result<Value, Box<dyn std::error::Error>> {
    let path = monitoring().join("capi-provider-operator-dashboard.json");
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

/// Every alerting rule of the rules file.
fn alerts() -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let rules = read_yaml(&monitoring().join("prometheus-rules.yaml"))?;
    let groups = rules["groups"].as_array().ok_or("no groups")?;
    Ok(groups
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r.get("alert").is_some())
        .collect())
}

/// PromQL words that are not metric names, besides [`LABEL_LISTS`] (aggregation operators
/// included: in `sum by (x) (...)` no parenthesis follows the operator).
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
];

/// Clauses whose parenthesised list names labels, not metrics.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Drops what no metric name can be in: string literals, `{...}` label matchers and `[...]`
/// ranges (and Grafana's `$variables`, which only appear there or in strings).
fn strip(expr: &str) -> String {
    let mut out = String::new();
    let (mut quote, mut depth) = (None, 0u32);
    for c in expr.chars() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => depth = depth.saturating_sub(1),
            (None, _) if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The metric names a PromQL expression reads: identifiers that are neither function calls,
/// keywords, numbers nor label names of a `by (...)`-like list.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let text = strip(expr);
    let chars: Vec<char> = text.chars().collect();
    let mut names = BTreeSet::new();
    let (mut i, mut in_label_list, mut next_is_label_list) = (0, false, false);
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let rest = chars[i..].iter().find(|c| !c.is_whitespace());
            let lower = word.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) {
                next_is_label_list = true;
            } else if !in_label_list && rest != Some(&'(') && !KEYWORDS.contains(&lower.as_str()) {
                names.insert(word);
            }
            continue;
        }
        if c.is_ascii_digit() || c == '.' {
            // A number, or a duration such as 5m after `offset`.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        match c {
            '(' if next_is_label_list => (in_label_list, next_is_label_list) = (true, false),
            ')' if in_label_list => in_label_list = false,
            _ if !c.is_whitespace() => next_is_label_list = false,
            _ => {}
        }
        i += 1;
    }
    names
}

/// The metric names of a Grafana variable query: `label_values(metric, label)` or PromQL.
fn variable_metric_names(query: &str) -> BTreeSet<String> {
    match query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
    {
        Some(args) => metric_names(args.split(',').next().unwrap_or_default()),
        None => metric_names(query),
    }
}

#[test]
fn metric_names_are_found_in_promql() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, kind) (rate(a_bucket{job=~"$job", x="by (y)"}[$__rate_interval])))"#
        ),
        ["a_bucket"]
    );
    assert_eq!(
        names(
            "max by (kind) (b == 0) unless on (kind) group_left (reason) c offset 5m > bool 1.5e3"
        ),
        ["b", "c"]
    );
    assert_eq!(
        names("sum without (instance) (rate(d[5m])) / ignoring(le) e or vector(0)"),
        ["d", "e"]
    );
    assert_eq!(names("absent(f)"), ["f"]);
    assert!(names("vector(1)").is_empty());
    assert_eq!(
        variable_metric_names("label_values(capi_operator_leader, job)"),
        BTreeSet::from(["capi_operator_leader".to_string()])
    );
}

/// Each panel of the dashboard, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// The structural rules a dashboard linter would apply: unique panel ids, one Prometheus data
/// source variable that every panel and query uses, a query in every panel, a title and a place
/// on the grid.
fn dashboard_problems(d: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let variables = d["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ds = variables
        .iter()
        .find(|v| v["type"] == "datasource" && v["query"] == "prometheus");
    let Some(ds) = ds.and_then(|v| v["name"].as_str()) else {
        return vec!["no Prometheus data source variable".into()];
    };
    let uses_ds = |v: &Value| v["uid"].as_str() == Some(&format!("${{{ds}}}"));
    let mut ids = BTreeSet::new();
    for p in panels(d) {
        let title = p["title"].as_str().unwrap_or_default();
        match p["id"].as_u64() {
            Some(id) if !ids.insert(id) => problems.push(format!("panel id {id} used twice")),
            None => problems.push(format!("panel {title:?} has no id")),
            _ => {}
        }
        if title.is_empty() {
            problems.push(format!("panel {} has no title", p["id"]));
        }
        if p["gridPos"]["w"].as_u64().is_none() || p["gridPos"]["h"].as_u64().is_none() {
            problems.push(format!("panel {title:?} has no gridPos"));
        }
        if p["type"] == "row" {
            continue;
        }
        if !uses_ds(&p["datasource"]) {
            problems.push(format!("panel {title:?} does not use the ${ds} variable"));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title:?} has no query"));
        }
        for t in &targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            if metric_names(expr).is_empty() {
                problems.push(format!("panel {title:?} queries no metric: {expr:?}"));
            }
            if !uses_ds(&t["datasource"]) {
                problems.push(format!("a query of {title:?} does not use ${ds}"));
            }
        }
    }
    for v in variables.iter().filter(|v| v["type"] == "query") {
        if !uses_ds(&v["datasource"]) {
            problems.push(format!("variable {} does not use ${ds}", v["name"]));
        }
    }
    problems
}

#[test]
fn the_dashboard_is_well_formed() -> TestResult {
    let d = dashboard()?;
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()), "a uid");
    assert!(
        d["title"].as_str().is_some_and(|t| !t.is_empty()),
        "a title"
    );
    let problems = dashboard_problems(&d);
    assert!(problems.is_empty(), "{problems:#?}");
    // The checks can fail: a copy with a duplicate id, a panel without a query and one on
    // another data source is refused on each count.
    let mut bad = d.clone();
    let list = bad["panels"].as_array_mut().ok_or("no panels")?;
    let mut dup = list.last().cloned().ok_or("no panels")?;
    dup["targets"] = Value::Array(Vec::new());
    dup["datasource"]["uid"] = "prometheus".into();
    list.push(dup);
    let problems = dashboard_problems(&bad);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    Ok(())
}

/// GitHub's anchor of a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_runbook_and_unit_tests_both_ways() -> TestResult {
    let runbooks = std::fs::read_to_string(workspace_root().join("docs/runbooks.md"))?;
    let anchors: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .map(anchor)
        .collect();
    let tests = read_yaml(&monitoring().join("prometheus-rules.test.yaml"))?;
    // alert name -> (a case where it fires, a case where it does not)
    let mut cases: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for t in tests["tests"].as_array().into_iter().flatten() {
        for case in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = case["alertname"].as_str().unwrap_or_default().to_string();
            let fires = case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            let seen = cases.entry(name).or_default();
            if fires {
                seen.0 = true;
            } else {
                seen.1 = true;
            }
        }
    }
    let alerts = alerts()?;
    assert!(alerts.len() >= 7, "the alerts: {alerts:#?}");
    for a in &alerts {
        let name = a["alert"].as_str().ok_or("an alert without a name")?;
        let url = a["annotations"]["runbook_url"].as_str().unwrap_or_default();
        let (page, fragment) = url.split_once('#').unwrap_or((url, ""));
        assert!(
            page.ends_with("/docs/runbooks.md"),
            "{name}: runbook_url {url:?}"
        );
        assert_eq!(
            fragment,
            name.to_lowercase(),
            "{name}: the anchor is its name"
        );
        assert!(
            anchors.contains(fragment),
            "{name}: docs/runbooks.md has no section #{fragment}"
        );
        for field in ["summary", "description"] {
            assert!(
                a["annotations"][field]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name}: no {field}"
            );
        }
        assert!(
            ["critical", "warning", "info"]
                .contains(&a["labels"]["severity"].as_str().unwrap_or_default()),
            "{name}: severity"
        );
        assert_eq!(
            cases.get(name),
            Some(&(true, true)),
            "{name}: prometheus-rules.test.yaml needs a case where it fires and one where it does not"
        );
    }
    Ok(())
}

#[test]
fn the_chart_and_the_examples_ship_these_very_files() -> TestResult {
    let root = workspace_root();
    for name in [
        "prometheus-rules.yaml",
        "capi-provider-operator-dashboard.json",
    ] {
        let source = std::fs::canonicalize(monitoring().join(name))?;
        for copy in [
            "manifests/helm/capi-provider-operator/files",
            "examples/monitoring",
        ] {
            let path = root.join(copy).join(name);
            assert_eq!(
                std::fs::canonicalize(&path)?,
                source,
                "{} must be a link to manifests/monitoring/{name}",
                path.display()
            );
        }
    }
    Ok(())
}

/// The metric families a /metrics page declares, with their types.
fn families(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.trim().to_string()))
        .collect()
}

/// Whether `name` is a series the declared `families` export (a histogram's `_bucket`, `_sum`
/// and `_count` included).
fn exported(families: &BTreeMap<String, String>, name: &str) -> bool {
    families.contains_key(name)
        || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|base| families.get(base).is_some_and(|t| t == "histogram"))
        })
}

/// Where a query is, and the metric names it reads.
type Query = (String, BTreeSet<String>);

/// Every query of the alerts and the dashboard.
fn queries() -> Result<Vec<Query>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for a in alerts()? {
        let expr = a["expr"].as_str().unwrap_or_default();
        out.push((format!("alert {}", a["alert"]), metric_names(expr)));
    }
    let d = dashboard()?;
    for p in panels(&d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_default();
            out.push((format!("panel {}", p["title"]), metric_names(expr)));
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = v["query"]["query"].as_str() {
            out.push((format!("variable {}", v["name"]), variable_metric_names(q)));
        }
    }
    Ok(out)
}

#[tokio::test]
async fn every_alert_and_panel_queries_metrics_the_operator_exports() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    let ns = "monitoring-core";
    load_core(cluster, &client, ns).await?;
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let operator = start_operator(cluster, &["--metrics-bind-address", &addr])?;
    // A reconcile of the sample provider to Ready: the histograms have observations then.
    apply(cluster, &core_provider(ns, "v0.2.0", 1))?;
    wait_condition(
        &client,
        ("CoreProvider", ns, "cluster-api"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(|e| format!("{e}\n{}", operator.logs()))?;
    let text = wait_for(T, || async {
        let (status, body) = get(port, "/metrics").ok()?;
        (status == 200 && body.contains("name=\"cluster-api\"")).then_some(body)
    })
    .await
    .ok_or_else(|| format!("/metrics never showed the provider\n{}", operator.logs()))?;
    let families = families(&text);
    let queries = queries()?;
    let mut missing = Vec::new();
    for (place, names) in &queries {
        assert!(!names.is_empty(), "{place} queries no metric");
        for name in names.iter().filter(|n| !exported(&families, n)) {
            missing.push(format!("{place}: {name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "queried but not exported by the operator:\n{}\n--- /metrics ---\n{text}",
        missing.join("\n")
    );
    // After a reconcile the families the alerts rest on have series, not only declarations.
    for series in [
        "capi_operator_provider_ready{",
        "capi_operator_provider_stalled{",
        "capi_operator_reconcile_total{",
        "capi_operator_reconcile_duration_seconds_bucket{",
        "capi_operator_leader 1",
        "capi_operator_event_loop_stall_seconds_bucket{",
    ] {
        assert!(text.contains(series), "no {series} in\n{text}");
    }
    // The check can fail: a name the operator does not export is caught.
    assert!(!exported(&families, "capi_operator_reconcile_total_bucket"));
    assert!(!exported(&families, "capi_operator_provider_up"));
    Ok(())
}
