//! Label selectors evaluated in memory (fetchConfig.selector against cached ConfigMaps).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` satisfy `selector`, with Kubernetes semantics (an empty selector selects
/// everything; unknown operators select nothing).
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &selector.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or(&[]);
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(
                values
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect(),
            ),
        }
    }

    #[test]
    fn selector_semantics() {
        let l = labels(&[("provider", "aws"), ("tier", "infra")]);
        let mut s = LabelSelector::default();
        assert!(matches(&s, &l));
        s.match_labels = Some(labels(&[("provider", "aws")]));
        assert!(matches(&s, &l));
        assert!(!matches(&s, &labels(&[("provider", "azure")])));
        s.match_expressions = Some(vec![req("tier", "In", &["infra", "x"])]);
        assert!(matches(&s, &l));
        s.match_expressions = Some(vec![req("tier", "NotIn", &["infra"])]);
        assert!(!matches(&s, &l));
        s.match_expressions = Some(vec![req("gone", "DoesNotExist", &[])]);
        assert!(matches(&s, &l));
        s.match_expressions = Some(vec![req("gone", "Exists", &[])]);
        assert!(!matches(&s, &l));
        s.match_expressions = Some(vec![req("tier", "Bogus", &[])]);
        assert!(!matches(&s, &l));
        assert_eq!(
            capi_release_sources::configmap::selector_query(&s),
            "provider=aws,tier,!tier"
        );
    }
}
