//! What a provider reads from the cluster besides its release: the variables of its Secret
//! (`spec.configSecret`) and the manifests of its `spec.additionalManifests` ConfigMap. The
//! operator's install and the plugin's `render` and `diff` read them here, so both render from
//! the same inputs. Values are never logged.

use std::collections::BTreeMap;

use capi_operator_api::AnyProvider;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

/// The provider Secret's variables, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Variables {
    /// The variables (none when the provider names no Secret).
    Found(BTreeMap<String, String>),
    /// The Secret named does not exist.
    Missing {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

/// The additional manifests, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Manifests {
    /// The provider names none.
    NotNamed,
    /// The text of the ConfigMap's `manifests` key.
    Found(String),
    /// The ConfigMap named does not exist.
    Missing {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The ConfigMap has no `manifests` key; these keys instead.
    NoKey {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The keys it has (data and binaryData).
        keys: Vec<String>,
    },
}

/// A Secret's data as variables: `data` then `stringData`; a non-UTF-8 value, which cannot be
/// substituted into YAML anyway, is left out.
pub fn secret_variables(secret: Secret) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for (k, v) in secret.data.unwrap_or_default() {
        if let Ok(s) = String::from_utf8(v.0) {
            vars.insert(k, s);
        }
    }
    for (k, v) in secret.string_data.unwrap_or_default() {
        vars.insert(k, v);
    }
    vars
}

/// Reads the variables of `p`'s Secret.
pub async fn variables(client: &Client, p: &AnyProvider) -> Result<Variables, kube::Error> {
    let Some(name) = p.spec.secret_name.as_deref().filter(|s| !s.is_empty()) else {
        return Ok(Variables::Found(BTreeMap::new()));
    };
    let namespace = p.spec.secret_namespace.as_deref().unwrap_or(p.namespace());
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(match api.get_opt(name).await? {
        Some(s) => Variables::Found(secret_variables(s)),
        None => Variables::Missing {
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
    })
}

/// Reads `p`'s additional manifests.
pub async fn additional_manifests(
    client: &Client,
    p: &AnyProvider,
) -> Result<Manifests, kube::Error> {
    let Some(r) = p.spec.additional_manifests.as_ref() else {
        return Ok(Manifests::NotNamed);
    };
    let namespace = r.namespace.as_deref().unwrap_or(p.namespace()).to_string();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let name = r.name.clone();
    let Some(mut cm) = api.get_opt(&name).await? else {
        return Ok(Manifests::Missing { namespace, name });
    };
    if let Some(text) = cm.data.as_mut().and_then(|d| d.remove("manifests")) {
        return Ok(Manifests::Found(text));
    }
    let data = cm.data.iter().flat_map(|d| d.keys());
    let binary = cm.binary_data.iter().flat_map(|d| d.keys());
    Ok(Manifests::NoKey {
        namespace,
        name,
        keys: data.chain(binary).cloned().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    /// stringData wins over data (as the apiserver merges them); binary values are left out.
    #[test]
    fn secret_data_becomes_variables() {
        let secret = Secret {
            data: Some(
                [
                    ("A".to_string(), ByteString(b"from-data".to_vec())),
                    ("B".to_string(), ByteString(vec![0xff, 0xfe])),
                    ("C".to_string(), ByteString(b"c".to_vec())),
                ]
                .into(),
            ),
            string_data: Some([("A".to_string(), "from-string-data".to_string())].into()),
            ..Secret::default()
        };
        let vars = secret_variables(secret);
        assert_eq!(vars.get("A").map(String::as_str), Some("from-string-data"));
        assert_eq!(vars.get("C").map(String::as_str), Some("c"));
        assert!(!vars.contains_key("B"));
    }
}
