//! Hiding the values substituted from a provider's variables Secret in text the apiserver
//! wrote: a refused object's message quotes the invalid value (a label, a quantity), and that
//! value may be a credential. Conditions, events and logs are readable by far more people
//! than the Secret.

use std::collections::BTreeMap;

/// What stands in place of a hidden value.
pub const REDACTED: &str = "[redacted]";

/// The shortest value hidden wherever it appears. A shorter one ("1", "us", "true") would
/// match inside ordinary words and destroy every message, and is guessed in a few tries
/// anyway; one under a key that names a secret is hidden whatever its length.
pub const MIN_REDACTED_LEN: usize = 4;

/// Parts of a variable's name that say its value is secret.
const SECRET_KEY_PARTS: &[&str] = &[
    "PASSWORD",
    "PASSWD",
    "SECRET",
    "TOKEN",
    "CREDENTIAL",
    "KEY",
    "B64",
    "AUTH",
    "CERT",
];

/// The values to hide, longest first so that a value containing another is hidden whole.
#[derive(Clone, Default)]
pub struct Redactor {
    values: Vec<String>,
}

// Never print the values, even in a debug dump.
impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} values)", self.values.len())
    }
}

impl Redactor {
    /// The redactor of a provider's variables (name to value).
    pub fn new(vars: &BTreeMap<String, String>) -> Self {
        let mut values: Vec<String> = vars
            .iter()
            .filter(|(k, v)| v.len() >= MIN_REDACTED_LEN || (!v.is_empty() && secret_key(k)))
            .map(|(_, v)| v.clone())
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Redactor { values }
    }

    /// `text` with every hidden value replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        self.values
            .iter()
            .fold(text.to_string(), |t, v| t.replace(v.as_str(), REDACTED))
    }
}

fn secret_key(key: &str) -> bool {
    let key = key.to_ascii_uppercase();
    SECRET_KEY_PARTS.iter().any(|p| key.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn long_values_and_secret_keyed_values_are_hidden_short_plain_ones_kept() {
        let r = Redactor::new(&vars(&[
            ("AWS_SECRET", "s3cr3t-value"),
            ("API_TOKEN", "Zq"),
            ("REPLICAS", "1"),
            ("REGION", "eu"),
            ("EMPTY_KEY", ""),
        ]));
        let text = "metadata.labels: Invalid value: \"s3cr3t-value\": Zq must be 1 in eu";
        assert_eq!(
            r.redact(text),
            "metadata.labels: Invalid value: \"[redacted]\": [redacted] must be 1 in eu"
        );
        assert!(!format!("{r:?}").contains("s3cr3t"));
    }

    #[test]
    fn a_value_containing_another_is_hidden_whole() {
        let r = Redactor::new(&vars(&[("A", "abcd"), ("B", "abcdefgh")]));
        assert_eq!(r.redact("x abcdefgh y abcd"), "x [redacted] y [redacted]");
    }
}
