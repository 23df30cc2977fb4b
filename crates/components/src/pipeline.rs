//! clusterctl's processing of a components file (`NewComponents`): substitution, parsing, target
//! namespace, common labels and ordering. Objects are plain JSON values.

use serde_json::{Map, Value, json};

/// Label every object of a provider carries (value empty), as clusterctl sets it.
pub const CLUSTERCTL_LABEL: &str = "clusterctl.cluster.x-k8s.io";
/// Label naming the provider (its manifest label, e.g. `infrastructure-aws`).
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";

// Kinds clusterctl treats as cluster-scoped; everything else gets the target namespace.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "PodSecurityPolicy",
    "CertificateSigningRequest",
    "ClusterRoleBinding",
    "ClusterRole",
    "VolumeAttachment",
    "StorageClass",
    "CSIDriver",
    "CSINode",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "CustomResourceDefinition",
    "PriorityClass",
    "RuntimeClass",
];

/// Errors of the pipeline; all are problems of the release or its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// Variable substitution failed (missing variables, bad syntax).
    #[error("failed to perform variable substitution: {0}")]
    Substitution(#[from] capi_envsubst::Error),
    /// The components are not valid YAML objects.
    #[error("failed to parse yaml: {0}")]
    Yaml(String),
    /// More than one Namespace object.
    #[error(
        "Invalid manifest. There should be no more than one resource with Kind Namespace in the provider components yaml"
    )]
    MultipleNamespaces,
    /// No namespace could be chosen.
    #[error("target namespace can't be defaulted. Please specify a target namespace")]
    NoTargetNamespace,
    /// A malformed object.
    #[error("invalid object {0}")]
    InvalidObject(String),
}

/// How much rendering a text may build, checked while it is built: the substitution's text
/// (per value and in all) and the parsed nodes. The operator sets them from the memory its
/// render holds, so a release that would build more fails instead of taking the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderLimits {
    /// What substitution may add to the text.
    pub substitution: capi_envsubst::Limits,
    /// Nodes the parsed text may have, in all its documents.
    pub max_nodes: usize,
}

impl Default for RenderLimits {
    /// The substitution's and the YAML parser's own limits.
    fn default() -> RenderLimits {
        RenderLimits {
            substitution: capi_envsubst::Limits::default(),
            max_nodes: capi_yaml::Limits::default().max_nodes,
        }
    }
}

/// Substitutes variables in the raw components text, clusterctl's way.
pub fn substitute(
    raw: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, PipelineError> {
    substitute_within(raw, lookup, &RenderLimits::default())
}

/// [`substitute`] within `limits`.
pub fn substitute_within(
    raw: &str,
    lookup: impl Fn(&str) -> Option<String>,
    limits: &RenderLimits,
) -> Result<String, PipelineError> {
    Ok(capi_envsubst::process_with(
        raw,
        lookup,
        &limits.substitution,
    )?)
}

/// The nodes parsing the raw components text will build, its `${...}` expressions counted as
/// the one scalar each becomes when substituted; `None` when it is not YAML that way.
pub fn count_nodes(raw: &str) -> Option<u64> {
    let ranges = capi_envsubst::expression_ranges(raw).ok()?;
    if ranges.is_empty() {
        return capi_yaml::count_nodes(raw);
    }
    // Braces are flow indicators: each expression is replaced by a plain word to be read.
    let mut plain = String::with_capacity(raw.len());
    let mut at = 0;
    for r in ranges {
        plain.push_str(raw.get(at..r.start)?);
        plain.push('x');
        at = r.end;
    }
    plain.push_str(raw.get(at..)?);
    capi_yaml::count_nodes(&plain)
}

/// Parses the substituted text into objects; empty documents are skipped, and every document
/// must be an object with apiVersion and kind.
pub fn parse_objects(text: &str) -> Result<Vec<Value>, PipelineError> {
    parse_objects_within(text, &RenderLimits::default())
}

/// [`parse_objects`] building at most `limits.max_nodes` nodes.
pub fn parse_objects_within(
    text: &str,
    limits: &RenderLimits,
) -> Result<Vec<Value>, PipelineError> {
    let yaml = capi_yaml::Limits {
        max_nodes: limits.max_nodes,
        ..capi_yaml::Limits::default()
    };
    let docs =
        capi_yaml::parse_documents(text, &yaml).map_err(|e| PipelineError::Yaml(e.to_string()))?;
    for (i, d) in docs.iter().enumerate() {
        let ok = d.is_object()
            && d.get("apiVersion").is_some_and(Value::is_string)
            && d.get("kind").is_some_and(Value::is_string);
        if !ok {
            return Err(PipelineError::Yaml(format!(
                "document {} is not a Kubernetes object with apiVersion and kind",
                i + 1
            )));
        }
    }
    Ok(docs)
}

fn kind(o: &Value) -> &str {
    o.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn group(o: &Value) -> &str {
    let av = o.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    av.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// The name of the release's own Namespace object, if it has one.
pub fn inspect_target_namespace(objs: &[Value]) -> Result<Option<String>, PipelineError> {
    let mut names = objs.iter().filter(|o| kind(o) == "Namespace").map(|o| {
        o.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    });
    let first = names.next();
    if names.next().is_some() {
        return Err(PipelineError::MultipleNamespaces);
    }
    Ok(first)
}

fn metadata_mut(o: &mut Value) -> Result<&mut Map<String, Value>, PipelineError> {
    let obj = o
        .as_object_mut()
        .ok_or_else(|| PipelineError::InvalidObject("not a mapping".into()))?;
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    meta.as_object_mut()
        .ok_or_else(|| PipelineError::InvalidObject("metadata is not a mapping".into()))
}

/// Moves every object into `target` as clusterctl's fixTargetNamespace does: Namespace renamed,
/// namespaced objects moved, binding subjects, webhook and CRD conversion services, cert-manager
/// `inject-ca-from` annotations and Certificate dnsNames rewritten.
pub fn fix_target_namespace(objs: &mut Vec<Value>, target: &str) -> Result<(), PipelineError> {
    if !objs.iter().any(|o| kind(o) == "Namespace") {
        objs.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target}}));
    }
    for o in objs.iter_mut() {
        let k = kind(o).to_string();
        let original_ns = o
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        if k == "Namespace" {
            metadata_mut(o)?.insert("name".into(), json!(target));
        } else if !CLUSTER_SCOPED.contains(&k.as_str()) {
            metadata_mut(o)?.insert("namespace".into(), json!(target));
        }
        match k.as_str() {
            "ClusterRoleBinding" | "RoleBinding" => {
                if let Some(subjects) = o.get_mut("subjects").and_then(Value::as_array_mut) {
                    for s in subjects {
                        if s.get("namespace")
                            .and_then(Value::as_str)
                            .is_some_and(|n| !n.is_empty())
                        {
                            s["namespace"] = json!(target);
                        }
                    }
                }
            }
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
                fix_inject_ca_from(o, target)?;
                if let Some(hooks) = o.get_mut("webhooks").and_then(Value::as_array_mut) {
                    for h in hooks {
                        if let Some(svc) = h.pointer_mut("/clientConfig/service")
                            && svc.is_object()
                        {
                            svc["namespace"] = json!(target);
                        }
                    }
                }
            }
            "CustomResourceDefinition" => {
                fix_inject_ca_from(o, target)?;
                for ptr in [
                    "/spec/conversion/webhook/clientConfig/service",
                    "/spec/conversion/webhookClientConfig/service",
                ] {
                    if let Some(svc) = o.pointer_mut(ptr)
                        && svc.is_object()
                    {
                        svc["namespace"] = json!(target);
                    }
                }
            }
            "Certificate" => {
                if let Some(orig) = original_ns
                    && let Some(names) = o
                        .pointer_mut("/spec/dnsNames")
                        .and_then(Value::as_array_mut)
                {
                    let from = format!(".{orig}.");
                    let to = format!(".{target}.");
                    for n in names {
                        if let Some(s) = n.as_str()
                            && s.contains(&from)
                        {
                            *n = json!(s.replacen(&from, &to, 1));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn fix_inject_ca_from(o: &mut Value, target: &str) -> Result<(), PipelineError> {
    const KEY: &str = "cert-manager.io/inject-ca-from";
    if let Some(v) = o
        .pointer_mut("/metadata/annotations")
        .and_then(|a| a.get_mut(KEY))
    {
        let s = v.as_str().unwrap_or("").to_string();
        let parts: Vec<&str> = s.split('/').collect();
        if parts.len() != 2 {
            return Err(PipelineError::InvalidObject(format!(
                "annotation {KEY}: {s:?} is not <namespace>/<name>"
            )));
        }
        *v = json!(format!("{target}/{}", parts[1]));
    }
    Ok(())
}

/// Adds clusterctl's common labels to every object.
pub fn add_common_labels(objs: &mut [Value], manifest_label: &str) -> Result<(), PipelineError> {
    for o in objs {
        let meta = metadata_mut(o)?;
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        labels[CLUSTERCTL_LABEL] = json!("");
        labels[PROVIDER_LABEL] = json!(manifest_label);
    }
    Ok(())
}

/// Orders objects for applying: Namespaces, then CRDs, then cert-manager objects, then the rest,
/// keeping the release's order inside each group (a strict version of clusterctl's sort, which
/// also lets CRDs be applied and established before objects of their kinds).
pub fn sort_for_apply(objs: &mut [Value]) {
    objs.sort_by_key(|o| match (kind(o), group(o)) {
        ("Namespace", _) => 0,
        ("CustomResourceDefinition", _) => 1,
        (_, "cert-manager.io") => 2,
        _ => 3,
    });
}

/// Images of Deployment and DaemonSet containers, then init containers, in object order.
pub fn inspect_images(objs: &[Value]) -> Vec<String> {
    let mut images = Vec::new();
    for o in objs
        .iter()
        .filter(|o| matches!(kind(o), "Deployment" | "DaemonSet"))
    {
        for list in ["containers", "initContainers"] {
            if let Some(cs) = o
                .pointer(&format!("/spec/template/spec/{list}"))
                .and_then(Value::as_array)
            {
                images.extend(
                    cs.iter()
                        .filter_map(|c| c.get("image")?.as_str().map(str::to_string)),
                );
            }
        }
    }
    images
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_fixed_everywhere() -> Result<(), PipelineError> {
        let text = r"
apiVersion: v1
kind: Namespace
metadata: {name: old-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: m, namespace: old-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: b}
subjects: [{kind: ServiceAccount, name: sa, namespace: old-system}, {kind: User, name: u}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: w, annotations: {cert-manager.io/inject-ca-from: old-system/cert}}
webhooks: [{name: x, clientConfig: {service: {name: s, namespace: old-system}}}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.io}
spec: {conversion: {strategy: Webhook, webhook: {clientConfig: {service: {name: s, namespace: old-system}}}}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: cert, namespace: old-system}
spec: {dnsNames: [s.old-system.svc, s.old-system.svc.cluster.local]}
";
        let mut objs = parse_objects(text)?;
        assert_eq!(
            inspect_target_namespace(&objs)?.as_deref(),
            Some("old-system")
        );
        fix_target_namespace(&mut objs, "new-system")?;
        add_common_labels(&mut objs, "infrastructure-x")?;
        sort_for_apply(&mut objs);
        let kinds: Vec<&str> = objs.iter().map(kind).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "CustomResourceDefinition",
                "Certificate",
                "Deployment",
                "ClusterRoleBinding",
                "ValidatingWebhookConfiguration"
            ]
        );
        assert_eq!(objs[0]["metadata"]["name"], "new-system");
        assert_eq!(
            objs[1]["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"],
            "new-system"
        );
        assert_eq!(
            objs[2]["spec"]["dnsNames"][1],
            "s.new-system.svc.cluster.local"
        );
        assert_eq!(objs[3]["metadata"]["namespace"], "new-system");
        assert_eq!(objs[4]["subjects"][0]["namespace"], "new-system");
        assert!(objs[4]["subjects"][1].get("namespace").is_none());
        assert!(objs[4]["metadata"].get("namespace").is_none());
        assert_eq!(
            objs[5]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "new-system/cert"
        );
        assert_eq!(
            objs[5]["webhooks"][0]["clientConfig"]["service"]["namespace"],
            "new-system"
        );
        for o in &objs {
            assert_eq!(o["metadata"]["labels"][CLUSTERCTL_LABEL], "");
            assert_eq!(o["metadata"]["labels"][PROVIDER_LABEL], "infrastructure-x");
        }
        Ok(())
    }

    #[test]
    fn nodes_are_counted_with_expressions_as_scalars_and_the_parse_held_to_its_limit() {
        // In a flow list the braces of `${A}` would be indicators: counted as one word.
        let raw = "kind: X\napiVersion: v1\nargs: [--a=${A}, ${B:=x}]\n";
        assert_eq!(count_nodes(raw), Some(1 + 2 * 3 + 2));
        let limits = RenderLimits {
            max_nodes: 5,
            ..RenderLimits::default()
        };
        assert!(matches!(
            parse_objects_within("kind: X\napiVersion: v1\nitems: [1, 2, 3]\n", &limits),
            Err(PipelineError::Yaml(_))
        ));
        assert!(parse_objects_within("kind: X\napiVersion: v1\n", &limits).is_ok());
    }

    #[test]
    fn bad_input_is_reported() {
        assert!(matches!(
            parse_objects("a: [1"),
            Err(PipelineError::Yaml(_))
        ));
        assert!(matches!(
            parse_objects("just: text\n"),
            Err(PipelineError::Yaml(_))
        ));
        assert!(matches!(
            parse_objects("- 1\n- 2\n"),
            Err(PipelineError::Yaml(_))
        ));
        let two = parse_objects(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n",
        );
        assert!(matches!(
            two.map(|o| inspect_target_namespace(&o)),
            Ok(Err(PipelineError::MultipleNamespaces))
        ));
        let err = substitute("x: ${NEEDED}\ny: ${OTHER}", |_| None);
        assert_eq!(
            err.map_err(|e| e.to_string()),
            Err("failed to perform variable substitution: value for variables [NEEDED, OTHER] is not set. Please set the value using os environment variables or the clusterctl config file".into())
        );
    }

    #[test]
    fn real_v1_12_core_release_renders_with_defaults() -> Result<(), Box<dyn std::error::Error>> {
        let raw = std::fs::read_to_string(
            capi_test_support::releases()?.join("cluster-api/v1.12.0/core-components.yaml"),
        )?;
        let text = substitute(&raw, |_| None)?;
        let mut objs = parse_objects(&text)?;
        let ns = inspect_target_namespace(&objs)?.ok_or("no namespace")?;
        assert_eq!(ns, "capi-system");
        fix_target_namespace(&mut objs, &ns)?;
        add_common_labels(&mut objs, "cluster-api")?;
        sort_for_apply(&mut objs);
        let count = |k: &str| objs.iter().filter(|o| kind(o) == k).count();
        // 26 top-level kinds in the file: 13 CRDs, 2 ClusterRoles, one of each other kind.
        assert_eq!(objs.len(), 26);
        assert_eq!(count("ClusterRole"), 2);
        assert_eq!(kind(&objs[14]), "Certificate");
        assert_eq!(group(&objs[15]), "cert-manager.io");
        assert_eq!(count("Namespace"), 1);
        assert_eq!(count("CustomResourceDefinition"), 13);
        assert_eq!(count("Deployment"), 1);
        assert_eq!(kind(&objs[0]), "Namespace");
        assert_eq!(kind(&objs[1]), "CustomResourceDefinition");
        assert_eq!(
            inspect_images(&objs),
            vec!["registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0".to_string()]
        );
        for o in &objs {
            if let Some(n) = o.pointer("/metadata/namespace") {
                assert_eq!(n, "capi-system");
            }
        }
        Ok(())
    }
}
