//! Finds the objects of a rendered release that grant broad cluster powers, so the operator can
//! show them to admins in an event. They are applied as the release says (providers do need
//! wide RBAC); the point is that nobody is surprised.

use serde_json::Value;

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn has_star(rule: &Value, field: &str) -> bool {
    rule.get(field)
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("*")))
}

/// Describes each privileged object: a (Cluster)RoleBinding to `cluster-admin`, a
/// (Cluster)Role whose rule allows every verb on every resource (`*`/`*`), and any webhook
/// configuration intercepting every resource of every group.
pub fn privileged_objects(objects: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for o in objects {
        let kind = s(o, "/kind");
        let name = s(o, "/metadata/name");
        match kind {
            "ClusterRoleBinding" | "RoleBinding" if s(o, "/roleRef/name") == "cluster-admin" => {
                out.push(format!("{kind} {name} binds cluster-admin"));
            }
            "ClusterRole" | "Role" => {
                let wide = o
                    .get("rules")
                    .and_then(Value::as_array)
                    .is_some_and(|rules| {
                        rules
                            .iter()
                            .any(|r| has_star(r, "verbs") && has_star(r, "resources"))
                    });
                if wide {
                    out.push(format!("{kind} {name} allows every verb on every resource"));
                }
            }
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => {
                let all = o
                    .get("webhooks")
                    .and_then(Value::as_array)
                    .is_some_and(|hooks| {
                        hooks.iter().any(|h| {
                            h.get("rules")
                                .and_then(Value::as_array)
                                .is_some_and(|rules| {
                                    rules.iter().any(|r| {
                                        has_star(r, "apiGroups") && has_star(r, "resources")
                                    })
                                })
                        })
                    });
                if all {
                    out.push(format!("{kind} {name} intercepts every resource"));
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flags_only_broad_grants() {
        let objs = vec![
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "evil"}, "roleRef": {"name": "cluster-admin"}}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "fine"}, "roleRef": {"name": "manager-role"}}),
            json!({"kind": "ClusterRole", "metadata": {"name": "star"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
            json!({"kind": "ClusterRole", "metadata": {"name": "narrow"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]}),
            json!({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "all"}, "webhooks": [{"rules": [{"apiGroups": ["*"], "resources": ["*"]}]}]}),
        ];
        assert_eq!(
            privileged_objects(&objs),
            vec![
                "ClusterRoleBinding evil binds cluster-admin",
                "ClusterRole star allows every verb on every resource",
                "ValidatingWebhookConfiguration all intercepts every resource",
            ]
        );
    }
}
