//! Which resource serves a kind, and in which scope: discovery answers, cached for the life of
//! the [`Resolver`] (a kind's resource does not move while a process runs), and a kind the
//! cluster does not serve explained by what it serves instead.

use std::{collections::HashMap, sync::Mutex};

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
    discovery::Scope,
};

use crate::ApplyError;

/// The resource serving a kind.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The resource (group, version, plural).
    pub resource: ApiResource,
    /// Whether objects of the kind live in a namespace.
    pub namespaced: bool,
}

impl Resolved {
    /// A dynamic API for the kind's objects in `namespace` (ignored when cluster-scoped;
    /// `None` lists across namespaces).
    pub fn api(&self, client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &self.resource),
            _ => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// Resolves kinds through discovery, once per kind.
pub struct Resolver {
    client: Client,
    cache: Mutex<HashMap<(String, String, String), Resolved>>,
}

impl Resolver {
    /// A resolver asking the apiserver behind `client`.
    pub fn new(client: Client) -> Resolver {
        Resolver {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The resource serving `gvk`; the apiserver's answer as is when discovery fails (see
    /// [`is_unserved`] and [`missing_kind`] to explain a kind it does not serve).
    pub async fn resolve(&self, gvk: &GroupVersionKind) -> Result<Resolved, kube::Error> {
        let k = (gvk.group.clone(), gvk.version.clone(), gvk.kind.clone());
        if let Some(r) = self.cache.lock().ok().and_then(|d| d.get(&k).cloned()) {
            return Ok(r);
        }
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, gvk).await?;
        let r = Resolved {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        if let Ok(mut d) = self.cache.lock() {
            d.insert(k, r.clone());
        }
        Ok(r)
    }
}

/// Whether a discovery failure says the cluster does not serve the kind (rather than that the
/// apiserver could not be asked).
pub fn is_unserved(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404) || matches!(e, kube::Error::Discovery(_))
}

/// The failure for a kind discovery does not know, saying what the cluster serves instead: a
/// release written for another version of an API (v1beta1 against a cluster that moved on) is
/// then plain to see. One more discovery request, on this failure only.
pub async fn missing_kind(client: &Client, gvk: &GroupVersionKind) -> ApplyError {
    let served = kube::discovery::group(client, &gvk.group)
        .await
        .ok()
        .map(|g| {
            let versions: Vec<String> = g.versions().map(str::to_string).collect();
            versions
                .into_iter()
                .map(|v| {
                    let has = g
                        .versioned_resources(&v)
                        .iter()
                        .any(|(r, _)| r.kind == gvk.kind);
                    (v, has)
                })
                .collect::<Vec<_>>()
        });
    ApplyError::MissingKind {
        group: gvk.group.clone(),
        version: gvk.version.clone(),
        kind: gvk.kind.clone(),
        found: served_instead(&gvk.group, &gvk.kind, served.as_deref()),
    }
}

/// What the cluster serves of `group` (its versions, each with whether it has `kind`), in words.
fn served_instead(group: &str, kind: &str, served: Option<&[(String, bool)]>) -> String {
    let shown = if group.is_empty() { "core" } else { group };
    let Some(served) = served.filter(|s| !s.is_empty()) else {
        return format!("it serves no {shown} API group");
    };
    let with: Vec<&str> = served
        .iter()
        .filter(|(_, k)| *k)
        .map(|(v, _)| v.as_str())
        .collect();
    let all: Vec<&str> = served.iter().map(|(v, _)| v.as_str()).collect();
    if with.is_empty() {
        format!("it serves {shown} in {} without {kind}", all.join(", "))
    } else {
        format!("it serves {kind} of {shown} in {}", with.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_kind_says_what_the_cluster_serves_instead() {
        let v = |list: &[(&str, bool)]| -> Vec<(String, bool)> {
            list.iter().map(|(v, k)| (v.to_string(), *k)).collect()
        };
        let group = "bootstrap.cluster.x-k8s.io";
        let older = v(&[("v1beta1", true)]);
        assert_eq!(
            served_instead(group, "KubeadmConfig", Some(&older)),
            "it serves KubeadmConfig of bootstrap.cluster.x-k8s.io in v1beta1"
        );
        let other = v(&[("v1beta2", false), ("v1beta1", false)]);
        assert_eq!(
            served_instead(group, "KubeadmConfig", Some(&other)),
            "it serves bootstrap.cluster.x-k8s.io in v1beta2, v1beta1 without KubeadmConfig"
        );
        assert_eq!(
            served_instead("cert-manager.io", "Issuer", None),
            "it serves no cert-manager.io API group"
        );
        assert_eq!(
            served_instead("", "Pod", Some(&[])),
            "it serves no core API group"
        );
        let e = ApplyError::MissingKind {
            group: group.into(),
            version: "v1beta2".into(),
            kind: "KubeadmConfig".into(),
            found: served_instead(group, "KubeadmConfig", Some(&older)),
        };
        assert!(
            e.to_string().contains("v1beta2; it serves KubeadmConfig"),
            "{e}"
        );
    }
}
