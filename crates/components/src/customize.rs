//! The operator's customizations of rendered components from a (normalized) `ProviderSpec`:
//! Deployment fields, container image pieces, args, env, resources and command, and
//! controller-manager fields turned into flags with the specification's precedence.

use capi_operator_api::{ContainerSpec, DeploymentSpec, ImageMeta, ManagerSpec};
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

pub use crate::manager_args::{ManagerArgs, ManagerFinding, customize_args};

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

/// What was made of the manager settings of one Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerReport {
    /// Name of the Deployment.
    pub deployment: String,
    /// The manager binary, e.g. "cluster-api v1.12.0"; `None` when its flags are not known
    /// to the operator and conventional flags were used.
    pub binary: Option<String>,
    /// Settings without effect.
    pub findings: Vec<ManagerFinding>,
}

/// Applies deployment overrides and manager flags to one Deployment object of release
/// `version`. `manager` flags go to the container named `manager` (or the only container),
/// mapped to the flags of the binary its release image names (see [`crate::managers`]).
/// Returns what became of the manager settings when there were any.
pub fn customize_deployment(
    deployment: &mut Value,
    spec: Option<&DeploymentSpec>,
    manager: Option<&ManagerSpec>,
    version: &str,
) -> Result<Option<ManagerReport>, CustomizeError> {
    if let Some(d) = spec {
        customize_pod(deployment, d)?;
    }
    let name = deployment
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let containers = deployment
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| invalid("deployment", "no containers"))?;
    let single = containers.len() == 1;
    let mut report = None;
    for c in containers.iter_mut() {
        let cname = c
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        // The release's image names the binary; an override only moves it to another registry.
        let release_image = c
            .get("image")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let over: Option<&ContainerSpec> =
            spec.and_then(|d| d.containers.iter().find(|x| x.name == cname));
        if let Some(o) = over {
            customize_container(c, o)?;
        }
        let is_manager = cname == "manager" || single;
        let container_args = over.and_then(|o| o.args.as_ref());
        if container_args.is_none() && !(is_manager && manager.is_some()) {
            continue;
        }
        let release: Vec<String> = c
            .get("args")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let binary = crate::managers::identify(&release_image, version);
        let out = customize_args(
            &release,
            container_args,
            if is_manager { manager } else { None },
            binary.as_ref(),
        );
        set(c, "container", "args", json!(out.args))?;
        follow_ports(c, &out.args);
        if is_manager {
            report = Some(ManagerReport {
                deployment: name.clone(),
                binary: binary
                    .as_ref()
                    .map(crate::managers::ManagerFlagSet::describe),
                findings: out.findings,
            });
        }
    }
    Ok(report)
}

/// Flags that move a listener, and the name Cluster API (and kubebuilder) releases give that
/// listener's container port. Probes and Services refer to ports by these names.
const PORT_FLAGS: &[(&str, &str)] = &[
    ("--health-addr", "healthz"),
    ("--health-probe-bind-address", "healthz"),
    ("--webhook-port", "webhook-server"),
    ("--diagnostics-address", "metrics"),
    ("--metrics-bind-addr", "metrics"),
];

/// Keeps the container's named ports on the ports the flags moved them to: a health address
/// or webhook port changed in spec.manager must move the probes and the webhook Service with
/// it, or the kubelet would restart a healthy manager and webhooks would stop answering.
fn follow_ports(container: &mut Value, args: &[String]) {
    for (flag, port_name) in PORT_FLAGS {
        let value = args
            .iter()
            .rev()
            .find_map(|a| a.strip_prefix(flag).and_then(|rest| rest.strip_prefix('=')));
        let Some(port) = value
            .and_then(|v| v.rsplit(':').next())
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p != 0)
        else {
            continue;
        };
        let ports = container.get_mut("ports").and_then(Value::as_array_mut);
        for p in ports.into_iter().flatten() {
            if p.get("name").and_then(Value::as_str) == Some(port_name) {
                p["containerPort"] = json!(port);
            }
        }
    }
}

fn customize_pod(deployment: &mut Value, d: &DeploymentSpec) -> Result<(), CustomizeError> {
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
    Ok(())
}

fn customize_container(c: &mut Value, o: &ContainerSpec) -> Result<(), CustomizeError> {
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
                customize_deployment(&mut d, Some(&spec), None, "v0.1.0").is_err(),
                "{bad} should be refused"
            );
        }
        // A lone container that is not a mapping, given manager flags.
        let manager: ManagerSpec = serde_json::from_value(json!({"verbosity": 3})).unwrap();
        let mut d =
            json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": [7]}}}});
        assert!(customize_deployment(&mut d, None, Some(&manager), "v0.1.0").is_err());
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(std::string::ToString::to_string).collect()
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
            None,
        )
        .args;
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
    fn named_ports_follow_the_flags_that_move_them() {
        let mut c = json!({"ports": [
            {"name": "webhook-server", "containerPort": 9443},
            {"name": "healthz", "containerPort": 9440},
            {"name": "metrics", "containerPort": 8443},
            {"name": "other", "containerPort": 1234}
        ]});
        follow_ports(
            &mut c,
            &s(&[
                "--health-addr=:9441",
                "--webhook-port=9444",
                "--diagnostics-address=127.0.0.1:8181",
                "--insecure-diagnostics=true",
            ]),
        );
        let ports: Vec<i64> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["containerPort"].as_i64())
            .collect();
        assert_eq!(ports, [9444, 9441, 8181, 1234]);
        // Port 0 (a disabled listener) and unparsable values leave the ports alone.
        follow_ports(&mut c, &s(&["--health-addr=:0", "--webhook-port=x"]));
        assert_eq!(c["ports"][1]["containerPort"], json!(9441));
    }

    #[test]
    fn debug_sets_verbosity_and_profiler() {
        let m = ManagerSpec {
            debug: Some(true),
            ..Default::default()
        };
        assert_eq!(
            customize_args(&s(&["--v=1"]), None, Some(&m), None).args,
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
        customize_deployment(
            &mut d,
            spec.deployment.as_ref(),
            spec.manager.as_ref(),
            "v1",
        )?;
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
