//! Entries of keyed lists (a container's `env`, a pod's `containers`, a webhook configuration's
//! `webhooks`) that field managers other than the operator added to an object it installed.
//!
//! A forced server-side apply restores every field the operator owns, but an entry someone
//! else added is theirs, and the apply leaves it: a manager quietly given an `HTTPS_PROXY`, a
//! sidecar, or one more webhook intercepting every request would survive every repair. The
//! apiserver's managedFields say who added what; an entry another manager's field set names
//! by its key and that the declared object does not hold is such an addition, and is removed.
//!
//! Only keyed entries (`k:{..}` in fieldsV1) are judged: a map key someone added (an annotation
//! `kubectl rollout restart` sets) or a field inside a declared entry (the CA bundle
//! cert-manager injects into a declared webhook) is not an entry of its own, and stays.
//! Metadata and status are never judged: owner references, finalizers and conditions belong
//! to other controllers.

use std::fmt;

use serde_json::{Map, Value};

/// One step of the path to an added entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A field of a map.
    Field(String),
    /// The entry of a keyed list whose key fields hold these values.
    Key(Map<String, Value>),
}

/// A list entry another field manager added, and who.
#[derive(Debug, Clone, PartialEq)]
pub struct AddedEntry {
    /// The path from the object's top to the entry (the last step is a [`Step::Key`]).
    pub path: Vec<Step>,
    /// The field manager whose field set names the entry.
    pub manager: String,
}

impl fmt::Display for AddedEntry {
    /// `spec.template.spec.containers[name=manager].env[name=HTTPS_PROXY]`: names and key
    /// values only, never the entry's other content (an env var's value may be a secret).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.path.iter().enumerate() {
            match step {
                Step::Field(name) if i == 0 => write!(f, "{name}")?,
                Step::Field(name) => write!(f, ".{name}")?,
                Step::Key(key) => {
                    let fields: Vec<String> = key
                        .iter()
                        .map(|(k, v)| match v {
                            Value::String(s) => format!("{k}={s}"),
                            other => format!("{k}={other}"),
                        })
                        .collect();
                    write!(f, "[{}]", fields.join(","))?;
                }
            }
        }
        Ok(())
    }
}

/// The entries that `managers` (each a field manager's name and fieldsV1, the operator's own
/// and status writers left out by the caller) name and `desired` does not hold.
pub fn added_entries(managers: &[(String, Value)], desired: &Value) -> Vec<AddedEntry> {
    let mut out: Vec<AddedEntry> = Vec::new();
    for (manager, fields) in managers {
        let Some(top) = fields.as_object() else {
            continue;
        };
        for (k, node) in top {
            let Some(name) = k.strip_prefix("f:") else {
                continue;
            };
            if matches!(name, "metadata" | "status" | "apiVersion" | "kind") {
                continue;
            }
            let mut walk = Walk {
                manager,
                path: vec![Step::Field(name.to_string())],
                out: &mut out,
            };
            walk.node(node, desired.get(name));
        }
    }
    out
}

struct Walk<'a> {
    manager: &'a str,
    path: Vec<Step>,
    out: &'a mut Vec<AddedEntry>,
}

impl Walk<'_> {
    /// Walks fieldsV1 `node` beside `want`, the declared value at the same place (None where
    /// nothing is declared there: every keyed entry below is then an addition).
    fn node(&mut self, node: &Value, want: Option<&Value>) {
        let Some(children) = node.as_object() else {
            return;
        };
        for (k, child) in children {
            if let Some(name) = k.strip_prefix("f:") {
                self.path.push(Step::Field(name.to_string()));
                self.node(child, want.and_then(|w| w.get(name)));
                self.path.pop();
            } else if let Some(key) = k.strip_prefix("k:") {
                self.entry(key, child, want);
            }
        }
    }

    fn entry(&mut self, key: &str, child: &Value, want: Option<&Value>) {
        // A key the apiserver wrote is valid JSON; one that is not is no evidence of anything.
        let Ok(key) = serde_json::from_str::<Map<String, Value>>(key) else {
            return;
        };
        let declared = want
            .and_then(Value::as_array)
            .and_then(|items| items.iter().find(|i| matches_key(i, &key)));
        self.path.push(Step::Key(key));
        match declared {
            Some(item) => self.node(child, Some(item)),
            None => {
                if !self.out.iter().any(|e| e.path == self.path) {
                    self.out.push(AddedEntry {
                        path: self.path.clone(),
                        manager: self.manager.to_string(),
                    });
                }
            }
        }
        self.path.pop();
    }
}

/// Whether the declared `item` is the entry of `key`. A key field the declaration leaves out is
/// one the apiserver defaulted (a port's protocol), so it matches; at least one must be declared.
fn matches_key(item: &Value, key: &Map<String, Value>) -> bool {
    let Some(item) = item.as_object() else {
        return false;
    };
    let mut declared = 0;
    for (field, value) in key {
        match item.get(field) {
            Some(v) if same(v, value) => declared += 1,
            Some(_) => return false,
            None => {}
        }
    }
    declared > 0
}

/// JSON equality that takes `80` and `80.0` as one number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// `live` (an object as the apiserver returned it) without the `added` entries, or None when it
/// holds none of them (removed meanwhile).
pub fn without_entries(live: &Value, added: &[AddedEntry]) -> Option<Value> {
    let mut out = live.clone();
    let mut removed = false;
    for entry in added {
        removed |= remove_at(&mut out, &entry.path);
    }
    removed.then_some(out)
}

fn remove_at(value: &mut Value, path: &[Step]) -> bool {
    match path {
        [] => false,
        [Step::Key(key)] => match value.as_array_mut() {
            Some(items) => {
                let before = items.len();
                items.retain(|i| !exact_key(i, key));
                items.len() != before
            }
            None => false,
        },
        [Step::Field(name), rest @ ..] => value
            .get_mut(name.as_str())
            .is_some_and(|v| remove_at(v, rest)),
        [Step::Key(key), rest @ ..] => value
            .as_array_mut()
            .and_then(|items| items.iter_mut().find(|i| exact_key(i, key)))
            .is_some_and(|v| remove_at(v, rest)),
    }
}

/// Whether the live `item` is the entry of `key`: every key field as the apiserver recorded it.
fn exact_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter()
        .all(|(f, v)| item.get(f).is_some_and(|have| same(have, v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": [{
                "name": "manager",
                "image": "x",
                "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 9443, "name": "webhook"}]
            }]}}}
        })
    }

    fn fields(v: Value) -> Vec<(String, Value)> {
        vec![("intruder".to_string(), v)]
    }

    #[test]
    fn an_env_var_and_a_container_someone_added_are_found_with_their_paths() {
        let theirs = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"manager\"}": {".": {}, "f:env": {
                "k:{\"name\":\"HTTPS_PROXY\"}": {".": {}, "f:name": {}, "f:value": {}}
            }},
            "k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}, "f:name": {}}
        }}}}});
        let found = added_entries(&fields(theirs), &deployment());
        let paths: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            paths,
            [
                "spec.template.spec.containers[name=manager].env[name=HTTPS_PROXY]",
                "spec.template.spec.containers[name=sidecar]",
            ]
        );
        assert!(found.iter().all(|e| e.manager == "intruder"));
    }

    #[test]
    fn declared_entries_fields_inside_them_map_keys_and_metadata_are_not_additions() {
        let theirs = json!({
            "f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"1\"}": {}}},
            "f:status": {"f:conditions": {"k:{\"type\":\"Available\"}": {}}},
            "f:spec": {"f:template": {
                "f:metadata": {"f:annotations": {"f:kubectl.kubernetes.io/restartedAt": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"manager\"}": {
                    "f:image": {},
                    "f:env": {"k:{\"name\":\"A\"}": {"f:value": {}}},
                    // The protocol the apiserver defaulted is part of the recorded key.
                    "f:ports": {"k:{\"containerPort\":9443,\"protocol\":\"TCP\"}": {}}
                }}}
            }}
        });
        assert_eq!(added_entries(&fields(theirs), &deployment()), []);
    }

    #[test]
    fn an_entry_under_a_list_nothing_declares_is_an_addition() {
        let theirs = json!({"f:spec": {"f:template": {"f:spec": {
            "f:imagePullSecrets": {"k:{\"name\":\"theirs\"}": {}}
        }}}});
        let found = added_entries(&fields(theirs), &deployment());
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].to_string(),
            "spec.template.spec.imagePullSecrets[name=theirs]"
        );
    }

    #[test]
    fn an_extra_webhook_is_found_and_removed_and_the_declared_ones_stay() {
        let desired = json!({"webhooks": [{"name": "a.example"}]});
        let theirs = json!({"f:webhooks": {
            "k:{\"name\":\"a.example\"}": {"f:clientConfig": {"f:caBundle": {}}},
            "k:{\"name\":\"z.example\"}": {".": {}, "f:name": {}}
        }});
        let found = added_entries(&fields(theirs), &desired);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].to_string(), "webhooks[name=z.example]");
        let live = json!({"webhooks": [
            {"name": "a.example", "clientConfig": {"caBundle": "Q0E="}},
            {"name": "z.example"}
        ]});
        assert_eq!(
            without_entries(&live, &found),
            Some(
                json!({"webhooks": [{"name": "a.example", "clientConfig": {"caBundle": "Q0E="}}]})
            )
        );
        let gone = json!({"webhooks": [{"name": "a.example"}]});
        assert_eq!(without_entries(&gone, &found), None, "nothing to remove");
    }

    #[test]
    fn a_nested_addition_is_removed_from_its_declared_parent_only() {
        let theirs = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"manager\"}": {"f:env": {"k:{\"name\":\"HTTPS_PROXY\"}": {}}}
        }}}}});
        let found = added_entries(&fields(theirs), &deployment());
        let mut live = deployment();
        if let Some(env) = live["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut() {
            env.push(json!({"name": "HTTPS_PROXY", "value": "http://evil:3128"}));
        }
        let Some(repaired) = without_entries(&live, &found) else {
            panic!("the added env var was not found in the live object");
        };
        assert_eq!(repaired, deployment());
        // What is shown names the entry, never its value.
        assert!(!found[0].to_string().contains("evil"));
    }
}
