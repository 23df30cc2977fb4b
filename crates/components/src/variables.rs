//! Variables files: `KEY=VALUE` lines standing for a provider Secret's data (blank lines and
//! `#` comments ignored, the key trimmed, the value kept as written after the first `=`), and
//! choosing which variables of a release to store.

use std::collections::BTreeMap;

/// A line of a variables file that is not `KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: expected KEY=VALUE")]
pub struct VariablesError {
    /// 1-based line number.
    pub line: usize,
}

/// Parses a variables file.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, VariablesError> {
    let mut vars = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((k, v)) = trimmed.split_once('=') else {
            return Err(VariablesError { line: i + 1 });
        };
        if k.trim().is_empty() {
            return Err(VariablesError { line: i + 1 });
        }
        vars.insert(k.trim().to_string(), v.to_string());
    }
    Ok(vars)
}

/// The values to store for a release using the variables `used`: every entry of `file` (the
/// user listed them on purpose), and the variables the release uses that `env` has. Nothing
/// else of the environment is taken.
pub fn select(
    used: &[String],
    file: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut out = file.clone();
    for name in used {
        if out.contains_key(name) {
            continue;
        }
        if let Some(v) = env(name) {
            out.insert(name.clone(), v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_environment() {
        let vars = parse("# comment\n\nA=1\n B = two=2\nEMPTY=\n").unwrap_or_default();
        assert_eq!(vars.get("A").map(String::as_str), Some("1"));
        assert_eq!(vars.get("B").map(String::as_str), Some(" two=2"));
        assert_eq!(vars.get("EMPTY").map(String::as_str), Some(""));
        assert_eq!(parse("A=1\nnope\n"), Err(VariablesError { line: 2 }));
        assert_eq!(parse("=x\n"), Err(VariablesError { line: 1 }));
        let env = |k: &str| (k == "TOKEN" || k == "HOME").then(|| format!("env-{k}"));
        let picked = select(&["TOKEN".into(), "A".into(), "OTHER".into()], &vars, env);
        assert_eq!(picked.get("TOKEN").map(String::as_str), Some("env-TOKEN"));
        assert_eq!(picked.get("A").map(String::as_str), Some("1"));
        assert!(!picked.contains_key("HOME") && !picked.contains_key("OTHER"));
    }
}
