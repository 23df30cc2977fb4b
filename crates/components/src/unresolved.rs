//! Reading a release without substituting it, as clusterctl's `generate provider --describe`
//! does: the objects keep their `${...}` expressions as written.
//!
//! The raw text cannot simply be parsed as YAML: an expression may sit where YAML gives its
//! characters a meaning (`{region: ${AWS_REGION}}` in a flow mapping, `${X:=y}` after a key).
//! Each expression is therefore set aside behind a plain marker word, the text is parsed, and
//! the markers in every string and key are replaced by the expressions again.

use std::ops::Range;

use serde_json::{Map, Value};

use crate::pipeline::{PipelineError, parse_objects};

/// Digits of a marker's index: fixed, so one marker is never the start of another.
const INDEX_DIGITS: usize = 8;

/// Parses `raw` into objects, keeping every `${...}` expression as written unless `expand`
/// gives its replacement (`expand` receives the expression's text, `${NAME...}`).
///
/// Legacy `${ VAR }` spacing is normalised first, as for substitution.
///
/// # Errors
///
/// A malformed expression ([`PipelineError::Substitution`]) or text that is not YAML objects
/// even with the expressions set aside ([`PipelineError::Yaml`]).
pub fn parse_objects_unresolved(
    raw: &str,
    expand: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Value>, PipelineError> {
    let text = capi_envsubst::convert_legacy_vars(raw);
    let ranges = capi_envsubst::expression_ranges(&text).map_err(PipelineError::Substitution)?;
    let marker = marker_absent_from(&text);
    let (masked, kept) = mask(&text, &ranges, &marker, expand);
    let mut objects = parse_objects(&masked)?;
    if !kept.is_empty() {
        for o in &mut objects {
            unmask_value(o, &marker, &kept);
        }
    }
    Ok(objects)
}

/// A word (letters only, so YAML reads it as a plain string anywhere) that `text` does not
/// contain, so every occurrence after parsing is one of ours.
fn marker_absent_from(text: &str) -> String {
    let mut marker = String::from("capivarq");
    while text.contains(&marker) {
        marker.push('q');
    }
    marker
}

/// `text` with each expression replaced by its expansion or by `marker` and its index in the
/// returned list of kept expressions.
fn mask(
    text: &str,
    ranges: &[Range<usize>],
    marker: &str,
    expand: impl Fn(&str) -> Option<String>,
) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut kept = Vec::new();
    let mut copied = 0;
    for r in ranges {
        out.push_str(&text[copied..r.start]);
        let expr = &text[r.clone()];
        match expand(expr) {
            Some(value) => out.push_str(&value),
            None => {
                out.push_str(&format!(
                    "{marker}{:0width$}",
                    kept.len(),
                    width = INDEX_DIGITS
                ));
                kept.push(expr.to_string());
            }
        }
        copied = r.end;
    }
    out.push_str(&text[copied..]);
    (out, kept)
}

fn unmask_value(v: &mut Value, marker: &str, kept: &[String]) {
    match v {
        Value::String(s) => {
            if s.contains(marker) {
                *s = unmask(s, marker, kept);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| unmask_value(i, marker, kept)),
        Value::Object(map) => {
            // Keys may hold expressions too (`${X}: value`, label keys): rebuild the map when so.
            if map.keys().any(|k| k.contains(marker)) {
                let old = std::mem::take(map);
                *map = old
                    .into_iter()
                    .map(|(k, v)| (unmask(&k, marker, kept), v))
                    .collect::<Map<String, Value>>();
            }
            map.values_mut().for_each(|i| unmask_value(i, marker, kept));
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `s` with every marker replaced by the expression it stands for.
fn unmask(s: &str, marker: &str, kept: &[String]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(marker) {
        out.push_str(&rest[..at]);
        let after = &rest[at + marker.len()..];
        let index = after
            .get(..INDEX_DIGITS)
            .and_then(|d| d.parse::<usize>().ok())
            .and_then(|i| kept.get(i));
        match index {
            Some(expr) => {
                out.push_str(expr);
                rest = &after[INDEX_DIGITS..];
            }
            // Not one of ours after all (cannot happen: the marker is absent from the text).
            None => {
                out.push_str(marker);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RELEASE: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: m
  namespace: ${NS:=capa-system}
  labels:
    example.com/${LABEL_KEY}: "yes"
    plain: a:${AFTER_COLON}
spec:
  replicas: ${REPLICAS}
  template:
    metadata: {annotations: {region: ${AWS_REGION}}}
    spec:
      containers:
      - image: registry.example/capa-controller:${CAPA_CONTROLLER_IMAGE_TAG}
        args:
        - ${ ALONE }
        - "--x=$${NOT_A_VARIABLE}"
"#;

    #[test]
    fn expressions_stay_as_written_in_every_position() -> Result<(), PipelineError> {
        let objs = parse_objects_unresolved(RELEASE, |_| None)?;
        let d = &objs[0];
        assert_eq!(d["metadata"]["namespace"], "${NS:=capa-system}");
        assert_eq!(d["metadata"]["labels"]["example.com/${LABEL_KEY}"], "yes");
        assert_eq!(d["metadata"]["labels"]["plain"], "a:${AFTER_COLON}");
        assert_eq!(d["spec"]["replicas"], "${REPLICAS}");
        let pod = &d["spec"]["template"];
        assert_eq!(pod["metadata"]["annotations"]["region"], "${AWS_REGION}");
        let c = &pod["spec"]["containers"][0];
        assert_eq!(
            c["image"],
            "registry.example/capa-controller:${CAPA_CONTROLLER_IMAGE_TAG}"
        );
        // Legacy spacing is normalised; an escaped `$${` is not an expression.
        assert_eq!(c["args"][0], "${ALONE}");
        assert_eq!(c["args"][1], "--x=$${NOT_A_VARIABLE}");
        Ok(())
    }

    #[test]
    fn expand_replaces_the_expressions_it_knows() -> Result<(), PipelineError> {
        let objs = parse_objects_unresolved(RELEASE, |e| {
            e.starts_with("${CAPA_CONTROLLER_IMAGE_TAG}")
                .then(|| "v2.0.0".to_string())
        })?;
        let c = &objs[0]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.example/capa-controller:v2.0.0");
        assert_eq!(objs[0]["spec"]["replicas"], "${REPLICAS}");
        Ok(())
    }

    #[test]
    fn the_marker_is_never_text_of_the_release() {
        assert_eq!(marker_absent_from("capivarq capivarqq"), "capivarqqq");
    }

    #[test]
    fn malformed_expressions_are_substitution_errors() {
        assert!(matches!(
            parse_objects_unresolved("a: ${X:=", |_| None),
            Err(PipelineError::Substitution(_))
        ));
    }
}
