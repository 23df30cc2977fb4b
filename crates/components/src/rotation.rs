//! Credential rotation that takes effect: a Deployment reading a Secret or ConfigMap of the
//! same release (rendered from the provider's variables, e.g. cloud credentials) carries a
//! hash of the content it reads in its pod template, so a new value rolls its pods. Kubernetes
//! itself never restarts a pod whose environment came from a changed Secret, and most managers
//! read their credentials once, at start.
//!
//! Only what a Deployment reads counts: a key it takes with `secretKeyRef`/`configMapKeyRef`
//! or a volume's `items`, every key for `envFrom` and whole-object volumes (plain or projected).
//! Objects outside the rendered release (the webhook certificate cert-manager writes, say) are
//! not part of the hash: this is about what the provider's variables decide.
//!
//! A Deployment that runs already without the annotation (installed before this existed, or by
//! another tool and adopted) is not rolled just to add it: the hash is kept in a label of the
//! Deployment (labels of a Deployment move neither its generation nor its pods) and the pod
//! template gets it at the first change after that.

use std::collections::{BTreeMap, BTreeSet};

use capi_operator_api::{
    AnyProvider, CONFIG_HASH_ANNOTATION, CONFIG_HASH_BASELINE_LABEL,
    ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION,
};
use serde_json::{Value, json};

/// The key the config hash is keyed with (an HMAC-SHA-256): the operator's own, kept in a
/// Secret only it and cluster administrators read. Unkeyed, the hash of a Secret's values on
/// every pod would let anyone who may read Deployments (`view`) test guesses of them offline.
#[derive(Clone)]
pub struct HashKey(ring::hmac::Key);

impl HashKey {
    /// Bytes a key should have at least (the hash's own output size).
    pub const MIN_BYTES: usize = 32;

    /// The key of `bytes`.
    pub fn new(bytes: &[u8]) -> HashKey {
        HashKey(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, bytes))
    }

    /// 32 hex digits of the keyed hash of `data` (a label value, at most 63 bytes).
    fn hash(&self, data: &[u8]) -> String {
        let tag = ring::hmac::sign(&self.0, data);
        tag.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKey(..)")
    }
}

/// The kind of an object a Deployment reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    /// A Secret.
    Secret,
    /// A ConfigMap.
    ConfigMap,
}

impl SourceKind {
    /// The kind's name, as in `kind:`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Secret => "Secret",
            SourceKind::ConfigMap => "ConfigMap",
        }
    }
}

/// A rendered Secret or ConfigMap a Deployment reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// Secret or ConfigMap.
    pub kind: SourceKind,
    /// Its namespace (the Deployment's).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// The keys of one object a Deployment reads: all of them, or the ones it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// Every key (`envFrom`, a volume without `items`).
    All,
    /// Only these keys.
    Named(BTreeSet<String>),
}

impl Keys {
    fn add(&mut self, more: Keys) {
        match (self, more) {
            (Keys::All, _) => {}
            (this, Keys::All) => *this = Keys::All,
            (Keys::Named(have), Keys::Named(more)) => have.extend(more),
        }
    }
}

/// What a Deployment's pod template reads from Secrets and ConfigMaps, by (kind, name); the
/// names are of the Deployment's own namespace, the only one a pod can read from.
pub fn consumed(deployment: &Value) -> BTreeMap<(SourceKind, String), Keys> {
    let mut out = BTreeMap::new();
    let Some(spec) = deployment.pointer("/spec/template/spec") else {
        return out;
    };
    let mut add = |kind: SourceKind, name: Option<&str>, keys: Keys| {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            out.entry((kind, name.to_string()))
                .and_modify(|k: &mut Keys| k.add(keys.clone()))
                .or_insert(keys);
        }
    };
    for list in ["containers", "initContainers"] {
        for c in array(spec.get(list)) {
            for e in array(c.get("env")) {
                for (field, kind) in [
                    ("secretKeyRef", SourceKind::Secret),
                    ("configMapKeyRef", SourceKind::ConfigMap),
                ] {
                    if let Some(r) = e.pointer(&format!("/valueFrom/{field}")) {
                        let key = str_of(r, "key").to_string();
                        add(
                            kind,
                            r.get("name").and_then(Value::as_str),
                            Keys::Named([key].into()),
                        );
                    }
                }
            }
            for e in array(c.get("envFrom")) {
                for (field, kind) in [
                    ("secretRef", SourceKind::Secret),
                    ("configMapRef", SourceKind::ConfigMap),
                ] {
                    if let Some(r) = e.get(field) {
                        add(kind, r.get("name").and_then(Value::as_str), Keys::All);
                    }
                }
            }
        }
    }
    for v in array(spec.get("volumes")) {
        if let Some(s) = v.get("secret") {
            add(
                SourceKind::Secret,
                s.get("secretName").and_then(Value::as_str),
                items(s),
            );
        }
        if let Some(c) = v.get("configMap") {
            add(
                SourceKind::ConfigMap,
                c.get("name").and_then(Value::as_str),
                items(c),
            );
        }
        for p in array(v.pointer("/projected/sources")) {
            for (field, kind) in [
                ("secret", SourceKind::Secret),
                ("configMap", SourceKind::ConfigMap),
            ] {
                if let Some(r) = p.get(field) {
                    add(kind, r.get("name").and_then(Value::as_str), items(r));
                }
            }
        }
    }
    out
}

fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

/// A volume source's `items` as named keys; no `items` means every key.
fn items(source: &Value) -> Keys {
    match source.get("items").and_then(Value::as_array) {
        Some(items) if !items.is_empty() => {
            Keys::Named(items.iter().map(|i| str_of(i, "key").to_string()).collect())
        }
        _ => Keys::All,
    }
}

/// The hash a Deployment carries, and the rendered objects it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// The Deployment's namespace.
    pub namespace: String,
    /// The Deployment's name.
    pub name: String,
    /// 32 hex digits of the keyed hash ([`HashKey`]) of the content read.
    pub hash: String,
    /// The rendered objects it reads, sorted.
    pub sources: Vec<Source>,
}

/// The stamp of every Deployment of `objects` that reads a Secret or ConfigMap of `objects`;
/// Deployments reading none have none.
pub fn stamps(objects: &[Value], key: &HashKey) -> Vec<Stamp> {
    let by_identity: BTreeMap<(SourceKind, &str, &str), &Value> = objects
        .iter()
        .filter_map(|o| {
            let kind = match str_of(o, "kind") {
                "Secret" => SourceKind::Secret,
                "ConfigMap" => SourceKind::ConfigMap,
                _ => return None,
            };
            let meta = o.get("metadata")?;
            Some(((kind, str_of(meta, "namespace"), str_of(meta, "name")), o))
        })
        .collect();
    let mut out = Vec::new();
    for d in objects.iter().filter(|o| str_of(o, "kind") == "Deployment") {
        let namespace = d
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut input = Vec::new();
        let mut sources = Vec::new();
        for ((kind, name), keys) in consumed(d) {
            let Some(obj) = by_identity.get(&(kind, namespace, name.as_str())) else {
                continue;
            };
            input.push(json!([kind.as_str(), name, content(obj, &keys)]));
            sources.push(Source {
                kind,
                namespace: namespace.to_string(),
                name,
            });
        }
        if sources.is_empty() {
            continue;
        }
        // The input is built in key order from arrays only, so its text (and the hash) is the
        // same for the same content whatever order the release wrote it in.
        let hash = key.hash(Value::Array(input).to_string().as_bytes());
        out.push(Stamp {
            namespace: namespace.to_string(),
            name: str_of(&d["metadata"], "name").to_string(),
            hash,
            sources,
        });
    }
    out
}

/// The values of `keys` in a Secret or ConfigMap, sorted by key, each with the field holding
/// it (`stringData` wins over `data`, as the apiserver merges them); a named key the object
/// lacks counts as absent.
fn content(obj: &Value, keys: &Keys) -> Value {
    const FIELDS: [&str; 3] = ["stringData", "data", "binaryData"];
    let mut values: BTreeMap<&str, Value> = BTreeMap::new();
    for field in FIELDS.iter().rev() {
        if let Some(map) = obj.get(*field).and_then(Value::as_object) {
            for (k, v) in map {
                values.insert(k, json!([field, v]));
            }
        }
    }
    let pairs: Vec<Value> = match keys {
        Keys::All => values.iter().map(|(k, v)| json!([k, v])).collect(),
        Keys::Named(named) => named
            .iter()
            .map(|k| json!([k, values.get(k.as_str()).cloned().unwrap_or(Value::Null)]))
            .collect(),
    };
    Value::Array(pairs)
}

/// What the live Deployment carries: the pod template's annotation and the baseline label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// The pod template's [`CONFIG_HASH_ANNOTATION`].
    pub template: Option<String>,
    /// The Deployment's [`CONFIG_HASH_BASELINE_LABEL`].
    pub baseline: Option<String>,
}

impl Live {
    /// What the Deployment `d` carries now.
    pub fn of(d: &k8s_openapi::api::apps::v1::Deployment) -> Live {
        let template = d.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
        Live {
            template: template
                .and_then(|m| m.annotations.as_ref()?.get(CONFIG_HASH_ANNOTATION).cloned()),
            baseline: d
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(CONFIG_HASH_BASELINE_LABEL).cloned()),
        }
    }
}

/// A Deployment whose pods roll because content it reads changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rolled {
    /// The Deployment's namespace.
    pub namespace: String,
    /// The Deployment's name.
    pub name: String,
    /// The rendered objects it reads (one of them changed).
    pub sources: Vec<Source>,
}

/// Whether `p` wants its Deployments rolled when what they read changes: yes unless its
/// [`ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION`] is `"false"`.
pub fn enabled(p: &AnyProvider) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION))
        .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"))
}

/// Stamps the Deployments of `objects` (rendered, not yet finalized: a paused provider's
/// Secrets still count) given what their live counterparts carry (`live(namespace, name)`,
/// `None` for a Deployment not installed yet), and says which ones roll because content they
/// read changed.
///
/// Turned off (`enabled` false), a Deployment keeps the template annotation it has, so
/// opting out never rolls anything by itself; turned on again, a Deployment without one starts
/// from its baseline as an adopted one does.
pub fn stamp(
    objects: &mut [Value],
    enabled: bool,
    key: &HashKey,
    live: impl Fn(&str, &str) -> Option<Live>,
) -> Vec<Rolled> {
    let stamps: BTreeMap<(String, String), Stamp> = if enabled {
        stamps(objects, key)
            .into_iter()
            .map(|s| ((s.namespace.clone(), s.name.clone()), s))
            .collect()
    } else {
        BTreeMap::new()
    };
    let mut rolled = Vec::new();
    for d in objects
        .iter_mut()
        .filter(|o| str_of(o, "kind") == "Deployment")
    {
        let meta = d.get("metadata").cloned().unwrap_or_default();
        let (ns, name) = (str_of(&meta, "namespace"), str_of(&meta, "name"));
        let now = live(ns, name);
        let Some(s) = stamps.get(&(ns.to_string(), name.to_string())) else {
            if !enabled && let Some(kept) = now.and_then(|l| l.template) {
                set(
                    d,
                    "/spec/template/metadata",
                    "annotations",
                    CONFIG_HASH_ANNOTATION,
                    &kept,
                );
            }
            continue;
        };
        set(
            d,
            "/metadata",
            "labels",
            CONFIG_HASH_BASELINE_LABEL,
            &s.hash,
        );
        let before = match now {
            None => None,
            Some(Live {
                template: Some(t), ..
            }) => Some(t),
            // Running without the annotation: only a change from the baseline rolls it.
            Some(Live {
                template: None,
                baseline,
            }) => match baseline {
                Some(b) if b != s.hash => Some(b),
                _ => continue,
            },
        };
        set(
            d,
            "/spec/template/metadata",
            "annotations",
            CONFIG_HASH_ANNOTATION,
            &s.hash,
        );
        if before.is_some_and(|b| b != s.hash) {
            rolled.push(Rolled {
                namespace: ns.to_string(),
                name: name.to_string(),
                sources: s.sources.clone(),
            });
        }
    }
    rolled
}

/// Gives the Deployments of `objects` the config hash and baseline their live counterparts
/// carry: what a reader without the operator's [`HashKey`] (the plugin, when it may not read
/// it) shows instead of a hash it cannot compute, predicting no roll.
pub fn keep_live(objects: &mut [Value], live: impl Fn(&str, &str) -> Option<Live>) {
    for d in objects
        .iter_mut()
        .filter(|o| str_of(o, "kind") == "Deployment")
    {
        let meta = d.get("metadata").cloned().unwrap_or_default();
        let Some(now) = live(str_of(&meta, "namespace"), str_of(&meta, "name")) else {
            continue;
        };
        if let Some(t) = &now.template {
            set(
                d,
                "/spec/template/metadata",
                "annotations",
                CONFIG_HASH_ANNOTATION,
                t,
            );
        }
        if let Some(b) = &now.baseline {
            set(d, "/metadata", "labels", CONFIG_HASH_BASELINE_LABEL, b);
        }
    }
}

/// Sets `key` in the map `field` of the object at `pointer` (created when missing) of `obj`.
fn set(obj: &mut Value, pointer: &str, field: &str, key: &str, value: &str) {
    let mut at = obj;
    for part in pointer.split('/').filter(|p| !p.is_empty()) {
        let Some(map) = at.as_object_mut() else {
            return;
        };
        at = map.entry(part).or_insert_with(|| json!({}));
    }
    let Some(map) = at.as_object_mut() else {
        return;
    };
    let inner = map.entry(field).or_insert_with(|| json!({}));
    if !inner.is_object() {
        *inner = json!({});
    }
    if let Some(m) = inner.as_object_mut() {
        m.insert(key.into(), json!(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "capa-system";

    fn key() -> HashKey {
        HashKey::new(&[7; HashKey::MIN_BYTES])
    }

    /// The hash is keyed: the same content gives another hash under another key, so one who
    /// sees the annotation but not the key cannot test a guessed value against it.
    #[test]
    fn the_hash_depends_on_the_key() {
        let objects = vec![
            secret("creds", json!({"token": "c2VjcmV0"})),
            deployment(
                "m",
                json!({"containers": [{"name": "m", "envFrom": [{"secretRef": {"name": "creds"}}]}]}),
            ),
        ];
        let a = stamps(&objects, &key());
        let b = stamps(&objects, &HashKey::new(&[8; HashKey::MIN_BYTES]));
        assert_eq!(a.len(), 1);
        assert_eq!(a, stamps(&objects, &key()));
        assert_ne!(a[0].hash, b[0].hash);
        assert_eq!(a[0].hash.len(), 32);
    }

    fn secret(name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": NS}, "data": data})
    }

    fn config_map(name: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": NS}, "data": data})
    }

    fn deployment(name: &str, pod: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": NS},
               "spec": {"template": {"spec": pod}}})
    }

    fn hash_of(objects: &[Value], name: &str) -> Option<String> {
        stamps(objects, &key())
            .into_iter()
            .find(|s| s.name == name)
            .map(|s| s.hash)
    }

    /// One Deployment per consumption form, each reading key `a` (or everything) of its own
    /// object; `value` is the content of key `a` everywhere, key `b` holds `other`.
    fn release(value: &str, other: &str) -> Vec<Value> {
        let data = json!({"a": value, "b": other});
        let env = |field: &str, obj: &str| {
            json!({"containers": [{"name": "m", "env": [
                {"name": "X", "valueFrom": {field: {"name": obj, "key": "a"}}}]}]})
        };
        vec![
            secret("env-secret", data.clone()),
            config_map("env-cm", data.clone()),
            secret("from-secret", data.clone()),
            config_map("from-cm", data.clone()),
            secret("vol-secret", data.clone()),
            config_map("vol-cm", data.clone()),
            secret("proj-secret", data.clone()),
            config_map("proj-cm", data.clone()),
            deployment("env-secret", env("secretKeyRef", "env-secret")),
            deployment("env-cm", env("configMapKeyRef", "env-cm")),
            deployment(
                "from-secret",
                json!({"initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "from-secret"}}]}]}),
            ),
            deployment(
                "from-cm",
                json!({"containers": [{"name": "m", "envFrom": [{"configMapRef": {"name": "from-cm"}}]}]}),
            ),
            deployment(
                "vol-secret",
                json!({"volumes": [{"name": "v", "secret": {"secretName": "vol-secret", "items": [{"key": "a", "path": "a"}]}}]}),
            ),
            deployment(
                "vol-cm",
                json!({"volumes": [{"name": "v", "configMap": {"name": "vol-cm"}}]}),
            ),
            deployment(
                "proj",
                json!({"volumes": [{"name": "v", "projected": {"sources": [
                {"secret": {"name": "proj-secret", "items": [{"key": "a", "path": "a"}]}},
                {"configMap": {"name": "proj-cm", "items": [{"key": "a", "path": "c"}]}},
                {"serviceAccountToken": {"path": "token"}}]}}]}),
            ),
            // Reads only what the release does not render (cert-manager's certificate).
            deployment(
                "webhook-cert",
                json!({"volumes": [{"name": "cert", "secret": {"secretName": "webhook-cert"}}]}),
            ),
        ]
    }

    const READERS_OF_A: [&str; 6] = [
        "env-secret",
        "env-cm",
        "vol-secret",
        "proj",
        "from-secret",
        "from-cm",
    ];

    #[test]
    fn every_consumption_form_is_stamped_and_a_change_of_what_it_reads_moves_it() {
        let before = release("old", "b");
        let after = release("new", "b");
        // The whole-object readers (envFrom, a volume without items) read `b` too.
        for name in READERS_OF_A.iter().chain(&["vol-cm"]) {
            let (b, a) = (hash_of(&before, name), hash_of(&after, name));
            assert!(b.is_some(), "{name} is stamped");
            assert_ne!(b, a, "{name}: a change of key a moves its hash");
            assert_eq!(b.as_deref().map(str::len), Some(32), "{name}");
        }
        assert_eq!(
            hash_of(&before, "webhook-cert"),
            None,
            "reads nothing rendered"
        );
        let proj = stamps(&before, &key())
            .into_iter()
            .find(|s| s.name == "proj");
        let sources: Vec<String> = proj
            .map(|s| s.sources.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        assert_eq!(
            sources,
            [
                "Secret capa-system/proj-secret",
                "ConfigMap capa-system/proj-cm"
            ]
        );
    }

    #[test]
    fn a_key_nobody_reads_moves_only_the_whole_object_readers() {
        let before = release("v", "old");
        let after = release("v", "new");
        for name in ["env-secret", "env-cm", "vol-secret", "proj"] {
            assert_eq!(
                hash_of(&before, name),
                hash_of(&after, name),
                "{name} reads only key a"
            );
        }
        for name in ["from-secret", "from-cm", "vol-cm"] {
            assert_ne!(
                hash_of(&before, name),
                hash_of(&after, name),
                "{name} reads every key"
            );
        }
        // Another object of the release, read by nobody, moves nothing.
        let mut more = release("v", "old");
        more.push(secret("unrelated", json!({"a": "changed"})));
        assert_eq!(stamps(&more, &key()), stamps(&before, &key()));
    }

    #[test]
    fn the_hash_depends_on_content_not_on_how_the_release_writes_it() {
        let a = vec![
            json!({"kind": "Secret", "metadata": {"name": "s", "namespace": NS}, "data": {"x": "1", "y": "2"}}),
            deployment(
                "d",
                json!({"containers": [{"name": "m", "envFrom": [{"secretRef": {"name": "s"}}],
                "env": [{"name": "Y", "valueFrom": {"secretKeyRef": {"name": "s", "key": "y"}}}]}]}),
            ),
        ];
        // Keys in another order, the Deployment first, fields of the reference reordered.
        let b = vec![
            deployment(
                "d",
                json!({"containers": [{"env": [{"valueFrom": {"secretKeyRef": {"key": "y", "name": "s"}}, "name": "Y"}],
                "envFrom": [{"secretRef": {"name": "s"}}], "name": "m"}]}),
            ),
            json!({"metadata": {"namespace": NS, "name": "s"}, "data": {"y": "2", "x": "1"}, "kind": "Secret"}),
        ];
        assert_eq!(hash_of(&a, "d"), hash_of(&b, "d"));
        assert_eq!(hash_of(&a, "d"), hash_of(&a.clone(), "d"));
        // stringData overrides data, as the apiserver merges them.
        let mut c = a.clone();
        c[0]["stringData"] = json!({"y": "3"});
        assert_ne!(hash_of(&a, "d"), hash_of(&c, "d"));
    }

    fn stamp_with(objects: &mut [Value], enabled: bool, live: Option<Live>) -> Vec<String> {
        stamp(objects, enabled, &key(), |_, _| live.clone())
            .into_iter()
            .map(|r| {
                format!(
                    "{}/{}: {}",
                    r.namespace,
                    r.name,
                    r.sources
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect()
    }

    fn one(value: &str) -> Vec<Value> {
        vec![
            secret("creds", json!({"credentials": value})),
            deployment(
                "m",
                json!({"containers": [{"name": "m", "env": [
                {"name": "AWS", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "credentials"}}}]}]}),
            ),
        ]
    }

    fn template_annotation(objects: &[Value]) -> Option<&str> {
        objects[1]
            .pointer("/spec/template/metadata/annotations")
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
            .and_then(Value::as_str)
    }

    #[test]
    fn only_a_changed_hash_of_a_running_deployment_is_a_roll() {
        let old = hash_of(&one("old"), "m");
        let new = hash_of(&one("new"), "m");
        // A new Deployment gets the annotation and the label; nothing rolls.
        let mut o = one("new");
        assert!(stamp_with(&mut o, true, None).is_empty());
        assert_eq!(template_annotation(&o), new.as_deref());
        assert_eq!(
            o[1]["metadata"]["labels"][CONFIG_HASH_BASELINE_LABEL].as_str(),
            new.as_deref()
        );
        // Running with the old hash: it rolls, and the event names the Secret.
        let mut o = one("new");
        let live = Live {
            template: old.clone(),
            baseline: old.clone(),
        };
        assert_eq!(
            stamp_with(&mut o, true, Some(live)),
            ["capa-system/m: Secret capa-system/creds"]
        );
        // Running with the same hash: stamped alike, no roll.
        let mut o = one("new");
        let live = Live {
            template: new.clone(),
            baseline: new.clone(),
        };
        assert!(stamp_with(&mut o, true, Some(live)).is_empty());
        assert_eq!(template_annotation(&o), new.as_deref());
    }

    #[test]
    fn an_adopted_deployment_rolls_at_the_first_change_not_before() {
        let old = hash_of(&one("old"), "m");
        // Without annotation or baseline: only the baseline label is set.
        let mut o = one("old");
        assert!(stamp_with(&mut o, true, Some(Live::default())).is_empty());
        assert_eq!(template_annotation(&o), None);
        assert_eq!(
            o[1]["metadata"]["labels"][CONFIG_HASH_BASELINE_LABEL].as_str(),
            old.as_deref()
        );
        // The baseline unchanged: still no annotation.
        let mut o = one("old");
        let live = Live {
            template: None,
            baseline: old.clone(),
        };
        assert!(stamp_with(&mut o, true, Some(live.clone())).is_empty());
        assert_eq!(template_annotation(&o), None);
        // Changed from the baseline: stamped, and it rolls.
        let mut o = one("new");
        assert_eq!(stamp_with(&mut o, true, Some(live)).len(), 1);
        assert_eq!(
            template_annotation(&o),
            hash_of(&one("new"), "m").as_deref()
        );
    }

    #[test]
    fn opted_out_keeps_what_runs_and_rolls_nothing() {
        let old = hash_of(&one("old"), "m");
        let mut o = one("new");
        let live = Live {
            template: old.clone(),
            baseline: old.clone(),
        };
        assert!(stamp_with(&mut o, false, Some(live)).is_empty());
        assert_eq!(
            template_annotation(&o),
            old.as_deref(),
            "the running annotation is kept"
        );
        assert!(o[1]["metadata"].get("labels").is_none());
        let mut o = one("new");
        assert!(stamp_with(&mut o, false, None).is_empty());
        assert_eq!(template_annotation(&o), None);
    }

    #[test]
    fn the_opt_out_annotation_is_read_from_the_provider() -> Result<(), Box<dyn std::error::Error>>
    {
        let p = |annotations: Value| {
            AnyProvider::from_value(json!({
                "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
                "kind": "InfrastructureProvider",
                "metadata": {"name": "aws", "namespace": NS, "annotations": annotations},
                "spec": {},
            }))
        };
        assert!(enabled(&p(json!({}))?));
        assert!(enabled(&p(
            json!({ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION: "true"})
        )?));
        assert!(!enabled(&p(
            json!({ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION: "false"})
        )?));
        assert!(!enabled(&p(
            json!({ROLLOUT_ON_CONFIG_CHANGE_ANNOTATION: " False "})
        )?));
        Ok(())
    }
}
