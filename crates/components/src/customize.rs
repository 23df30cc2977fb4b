//! The operator's customizations of rendered components from a (normalized) `ProviderSpec`:
//! Deployment fields, container image pieces, args, env, resources and command, and
//! controller-manager fields turned into flags with the specification's precedence.

use std::collections::BTreeMap;

use capi_operator_api::{
    ContainerSpec, DeploymentSpec, ImageMeta, ManagerSpec, normalize::arg_value,
};
use serde_json::{Value, json};

/// Errors customizing components; all are configuration problems.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CustomizeError {
    /// A spec value could not be encoded.
    #[error("cannot apply {what}: {reason}")]
    Invalid {
        /// Which setting.
        what: String,
        /// Why.
        reason: String,
    },
}

/// Container args as an ordered list of flags; a flag keeps the position it first had.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    entries: Vec<(String, Option<String>)>,
    positional: Vec<String>,
}

impl Flags {
    /// Reads `--name=value`, `--name value`-free style args (`--flag` alone is a boolean).
    pub fn parse(args: &[String]) -> Flags {
        let mut f = Flags::default();
        for a in args {
            match a.strip_prefix("--").or_else(|| a.strip_prefix('-')) {
                Some(rest) => match rest.split_once('=') {
                    Some((k, v)) => f.set(k, Some(v.to_string())),
                    None => f.set(rest, None),
                },
                None => f.positional.push(a.clone()),
            }
        }
        f
    }

    /// Sets a flag, keeping its position when it exists.
    pub fn set(&mut self, name: &str, value: Option<String>) {
        match self.entries.iter_mut().find(|(k, _)| k == name) {
            Some(e) => e.1 = value,
            None => self.entries.push((name.to_string(), value)),
        }
    }

    /// The value of a flag (`Some(None)` for a bare boolean flag).
    pub fn get(&self, name: &str) -> Option<&Option<String>> {
        self.entries.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Flag names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Back to container args.
    pub fn to_args(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("--{k}={v}"),
                None => format!("--{k}"),
            })
            .collect();
        out.extend(self.positional.iter().cloned());
        out
    }
}

fn parse_gates(s: &str) -> BTreeMap<String, String> {
    s.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn gates_string(g: &BTreeMap<String, String>) -> String {
    g.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Applies container args, additional args and manager fields to a container's args, in
/// increasing precedence: the release, `containers[].args` (the `namespace` key ignored),
/// `manager.additionalArgs`, then the explicit manager fields. Feature gates are merged key by
/// key in the same order. `maxConcurrentReconciles` sets every `*-concurrency` flag the
/// container has, except the ones given explicitly in `containers[].args`.
pub fn customize_args(
    release_args: &[String],
    container_args: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    >,
    manager: Option<&ManagerSpec>,
) -> Vec<String> {
    let mut flags = Flags::parse(release_args);
    let mut gates = flags
        .get("feature-gates")
        .and_then(|v| v.as_deref())
        .map(parse_gates)
        .unwrap_or_default();
    let mut explicit: Vec<String> = Vec::new();
    if let Some(args) = container_args {
        for (k, v) in args {
            let k = k.trim_start_matches('-');
            if k == "namespace" {
                continue;
            }
            let v = arg_value(v);
            if k == "feature-gates" {
                gates.extend(parse_gates(&v));
            } else {
                flags.set(k, Some(v));
                explicit.push(k.to_string());
            }
        }
    }
    if let Some(m) = manager {
        for (k, v) in m.additional_args.iter().flatten() {
            let k = k.trim_start_matches('-');
            if k != "namespace" {
                flags.set(k, Some(v.clone()));
            }
        }
        if m.debug == Some(true) {
            flags.set("v", Some("5".into()));
            flags.set("profiler-address", Some("localhost:6060".into()));
        }
        if let Some(p) = &m.sync_period {
            flags.set("sync-period", Some(arg_value(p)));
        }
        if let Some(le) = &m.leader_election {
            if let Some(b) = le.leader_elect {
                flags.set("leader-elect", Some(b.to_string()));
            }
            for (flag, v) in [
                ("leader-elect-lease-duration", &le.lease_duration),
                ("leader-elect-renew-deadline", &le.renew_deadline),
                ("leader-elect-retry-period", &le.retry_period),
            ] {
                if let Some(v) = v {
                    flags.set(flag, Some(v.clone()));
                }
            }
        }
        if let Some(ns) = m.cache_namespace.as_ref().filter(|s| !s.is_empty()) {
            flags.set("namespace", Some(ns.clone()));
        }
        if let Some(metrics) = &m.metrics {
            if let Some(a) = &metrics.bind_address {
                flags.set("metrics-bind-addr", Some(a.clone()));
            }
            if let Some(a) = &metrics.diagnostics_address {
                flags.set("diagnostics-address", Some(a.clone()));
            }
            if let Some(b) = metrics.insecure_diagnostics {
                flags.set("insecure-diagnostics", Some(b.to_string()));
            }
        }
        if let Some(a) = m
            .health
            .as_ref()
            .and_then(|h| h.health_probe_bind_address.clone())
        {
            flags.set("health-addr", Some(a));
        }
        if let Some(w) = &m.webhook {
            if let Some(p) = w.port {
                flags.set("webhook-port", Some(p.to_string()));
            }
            if let Some(h) = &w.host {
                flags.set("webhook-host", Some(h.clone()));
            }
            if let Some(d) = &w.cert_dir {
                flags.set("webhook-cert-dir", Some(d.clone()));
            }
        }
        if let Some(p) = &m.profiler_address {
            flags.set("profiler-address", Some(p.clone()));
        }
        if let Some(v) = m.verbosity {
            flags.set("v", Some(v.to_string()));
        }
        if let Some(n) = m.max_concurrent_reconciles {
            let targets: Vec<String> = flags
                .names()
                .filter(|k| k.ends_with("-concurrency") && !explicit.iter().any(|e| e == k))
                .map(str::to_string)
                .collect();
            for k in targets {
                flags.set(&k, Some(n.to_string()));
            }
        }
        for (k, v) in m.feature_gates.iter().flatten() {
            gates.insert(k.clone(), v.to_string());
        }
    }
    if !gates.is_empty() {
        flags.set("feature-gates", Some(gates_string(&gates)));
    }
    flags.to_args()
}

/// Replaces the pieces of `image` given in `meta`.
pub fn alter_image(image: &str, meta: &ImageMeta) -> String {
    let cur = capi_operator_api::image::split_reference(image);
    let repo = meta.repository.clone().or(cur.repository);
    let name = meta.name.clone().or(cur.name).unwrap_or_default();
    let tag = meta.tag.clone().or(cur.tag);
    let mut out = match repo {
        Some(r) if !r.is_empty() => format!("{}/{name}", r.trim_end_matches('/')),
        _ => name,
    };
    if let Some(t) = tag {
        if t.starts_with('@') {
            out.push_str(&t);
        } else {
            out.push(':');
            out.push_str(&t);
        }
    }
    out
}

fn merge_env(
    container: &mut Value,
    env: &[k8s_openapi::api::core::v1::EnvVar],
) -> Result<(), CustomizeError> {
    let list = container
        .as_object_mut()
        .map(|c| c.entry("env").or_insert_with(|| json!([])))
        .ok_or_else(|| invalid("env", "container is not a mapping"))?;
    if !list.is_array() {
        *list = json!([]);
    }
    let arr = list
        .as_array_mut()
        .ok_or_else(|| invalid("env", "not a list"))?;
    for e in env {
        let v = serde_json::to_value(e).map_err(|x| invalid("env", &x.to_string()))?;
        match arr
            .iter_mut()
            .find(|x| x.get("name").and_then(Value::as_str) == Some(e.name.as_str()))
        {
            Some(slot) => *slot = v,
            None => arr.push(v),
        }
    }
    Ok(())
}

fn invalid(what: &str, reason: &str) -> CustomizeError {
    CustomizeError::Invalid {
        what: what.to_string(),
        reason: reason.to_string(),
    }
}

/// Sets `key` of the object `target`, refusing a target that is not an object (a malformed
/// release) instead of panicking as `Value`'s index assignment would.
fn set(target: &mut Value, what: &str, key: &str, value: Value) -> Result<(), CustomizeError> {
    if target.is_null() {
        *target = json!({});
    }
    target
        .as_object_mut()
        .ok_or_else(|| invalid(what, "is not a mapping"))?
        .insert(key.to_string(), value);
    Ok(())
}

fn to_value<T: serde::Serialize>(what: &str, v: &T) -> Result<Value, CustomizeError> {
    serde_json::to_value(v).map_err(|e| invalid(what, &e.to_string()))
}

/// Applies deployment overrides and manager flags to one Deployment object. `manager` flags go
/// to the container named `manager` (or the only container).
pub fn customize_deployment(
    deployment: &mut Value,
    spec: Option<&DeploymentSpec>,
    manager: Option<&ManagerSpec>,
) -> Result<(), CustomizeError> {
    if let Some(d) = spec {
        if let Some(r) = d.replicas {
            let dspec = deployment
                .get_mut("spec")
                .ok_or_else(|| invalid("deployment", "no spec"))?;
            set(dspec, "deployment spec", "replicas", json!(r))?;
        }
        let pod = deployment
            .pointer_mut("/spec/template/spec")
            .ok_or_else(|| invalid("deployment", "no spec.template.spec"))?;
        if let Some(ns) = &d.node_selector {
            set(
                pod,
                "pod spec",
                "nodeSelector",
                to_value("nodeSelector", ns)?,
            )?;
        }
        if let Some(t) = &d.tolerations {
            set(pod, "pod spec", "tolerations", to_value("tolerations", t)?)?;
        }
        if let Some(a) = &d.affinity {
            set(pod, "pod spec", "affinity", to_value("affinity", a)?)?;
        }
        if let Some(sa) = &d.service_account_name {
            set(pod, "pod spec", "serviceAccountName", json!(sa))?;
        }
        if let Some(s) = &d.image_pull_secrets {
            set(
                pod,
                "pod spec",
                "imagePullSecrets",
                to_value("imagePullSecrets", s)?,
            )?;
        }
    }
    let containers = deployment
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| invalid("deployment", "no containers"))?;
    let single = containers.len() == 1;
    for c in containers.iter_mut() {
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let over: Option<&ContainerSpec> =
            spec.and_then(|d| d.containers.iter().find(|x| x.name == name));
        if let Some(o) = over {
            if let Some(img) = &o.image {
                let meta = img.to_meta();
                let cur = c
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                set(c, "container", "image", json!(alter_image(&cur, &meta)))?;
            }
            if let Some(env) = &o.env {
                merge_env(c, env)?;
            }
            if let Some(r) = &o.resources {
                set(c, "container", "resources", to_value("resources", r)?)?;
            }
            if let Some(cmd) = &o.command {
                set(c, "container", "command", json!(cmd))?;
            }
        }
        let is_manager = name == "manager" || single;
        if over.and_then(|o| o.args.as_ref()).is_some() || (is_manager && manager.is_some()) {
            let release: Vec<String> = c
                .get("args")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let args = customize_args(
                &release,
                over.and_then(|o| o.args.as_ref()),
                if is_manager { manager } else { None },
            );
            set(c, "container", "args", json!(args))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::ProviderSpec;

    /// Found by the `pipeline` fuzz target: a Deployment whose spec (or pod spec, or a
    /// container) is not a mapping made the index assignments panic.
    #[test]
    fn malformed_deployments_are_errors_not_panics() {
        let spec: DeploymentSpec = serde_json::from_value(json!({
            "replicas": 2,
            "nodeSelector": {"a": "b"},
            "containers": [{"name": "manager", "image": "example.com/x:v1", "command": ["x"]}]
        }))
        .unwrap();
        for bad in [
            json!({"kind": "Deployment", "spec": "r [[[ m[ S[emory["}),
            json!({"kind": "Deployment", "spec": {"template": {"spec": 5}}}),
        ] {
            let mut d = bad.clone();
            assert!(
                customize_deployment(&mut d, Some(&spec), None).is_err(),
                "{bad} should be refused"
            );
        }
        // A lone container that is not a mapping, given manager flags.
        let manager: ManagerSpec = serde_json::from_value(json!({"verbosity": 3})).unwrap();
        let mut d =
            json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": [7]}}}});
        assert!(customize_deployment(&mut d, None, Some(&manager)).is_err());
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn manager_fields_win_over_container_args() -> Result<(), serde_json::Error> {
        let spec: ProviderSpec = serde_json::from_value(json!({
            "manager": {"syncPeriod": 660, "metricsAddress": ":8181", "featureGates": {"MachinePool": false, "New": true}, "maxConcurrentReconciles": 4},
            "deployment": {"containers": [{"name": "manager", "args": {
                "sync-period": "1m", "namespace": "ignored", "awscluster-concurrency": 12,
                "feature-gates": "ClusterTopology=true,MachinePool=true"}}]}
        }))?;
        let spec = spec.normalized();
        let c = &spec
            .deployment
            .as_ref()
            .map(|d| d.containers[0].clone())
            .unwrap_or_default();
        let args = customize_args(
            &s(&[
                "--leader-elect",
                "--feature-gates=MachinePool=true,Old=true",
                "--awsmachine-concurrency=2",
            ]),
            c.args.as_ref(),
            spec.manager.as_ref(),
        );
        assert_eq!(
            args,
            s(&[
                "--leader-elect",
                "--feature-gates=ClusterTopology=true,MachinePool=false,New=true,Old=true",
                "--awsmachine-concurrency=4",
                "--awscluster-concurrency=12",
                "--sync-period=660s",
                "--metrics-bind-addr=:8181",
            ])
        );
        Ok(())
    }

    #[test]
    fn debug_sets_verbosity_and_profiler() {
        let m = ManagerSpec {
            debug: Some(true),
            ..Default::default()
        };
        assert_eq!(
            customize_args(&s(&["--v=1"]), None, Some(&m)),
            s(&["--v=5", "--profiler-address=localhost:6060"])
        );
    }

    #[test]
    fn images_are_altered_by_pieces() {
        let m = |r: Option<&str>, n: Option<&str>, t: Option<&str>| ImageMeta {
            repository: r.map(String::from),
            name: n.map(String::from),
            tag: t.map(String::from),
        };
        let img = "registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0";
        assert_eq!(
            alter_image(img, &m(Some("mirror.local:5000/capi/"), None, None)),
            "mirror.local:5000/capi/cluster-api-controller:v1.12.0"
        );
        assert_eq!(
            alter_image(img, &m(None, None, Some("v1.12.1"))),
            "registry.k8s.io/cluster-api/cluster-api-controller:v1.12.1"
        );
        assert_eq!(
            alter_image(
                img,
                &m(
                    Some("gcr.io/myregistry"),
                    Some("capa-controller"),
                    Some("v0.6.0-foo")
                )
            ),
            "gcr.io/myregistry/capa-controller:v0.6.0-foo"
        );
    }

    #[test]
    fn deployment_overrides() -> Result<(), Box<dyn std::error::Error>> {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "manager", "image": "r.io/a/ctl:v1", "args": ["--leader-elect"], "env": [{"name": "A", "value": "1"}]},
                {"name": "sidecar", "image": "r.io/side:v1"}]}}}});
        let spec: ProviderSpec = serde_json::from_value(json!({
            "manager": {"verbosity": 3},
            "deployment": {"replicas": 2, "nodeSelector": {"role": "mgmt"}, "tolerations": [],
              "containers": [{"name": "manager", "image": "mirror/ctl:v2", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "x"}],
                 "resources": {"limits": {"cpu": "100m", "memory": "30Mi"}}, "command": ["/manager"]}]}
        }))?;
        let spec = spec.normalized();
        customize_deployment(&mut d, spec.deployment.as_ref(), spec.manager.as_ref())?;
        assert_eq!(d["spec"]["replicas"], 2);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["nodeSelector"]["role"], "mgmt");
        assert_eq!(pod["tolerations"], json!([]));
        let c = &pod["containers"][0];
        assert_eq!(c["image"], "mirror/ctl:v2");
        assert_eq!(
            c["env"],
            json!([{"name": "A", "value": "2"}, {"name": "B", "value": "x"}])
        );
        assert_eq!(c["resources"]["limits"]["memory"], "30Mi");
        assert_eq!(c["command"], json!(["/manager"]));
        assert_eq!(c["args"], json!(["--leader-elect", "--v=3"]));
        assert_eq!(
            pod["containers"][1],
            json!({"name": "sidecar", "image": "r.io/side:v1"})
        );
        Ok(())
    }
}
