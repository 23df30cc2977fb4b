//! A container's environment, resolved as kubelet does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::{Api, Client};

use crate::{
    error::{Error, Result},
    expand::expand,
    fields::{self, Addresses},
};

/// Where the pod reaches the API server (`KUBERNETES_SERVICE_*`).
#[derive(Debug, Clone)]
pub struct ApiEndpoint {
    /// Host, as seen from inside the pod.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Reads Secrets and ConfigMaps of one namespace; a missing object is `None`.
pub struct Objects<'a> {
    client: &'a Client,
    namespace: &'a str,
}

impl<'a> Objects<'a> {
    /// Objects of `namespace`.
    pub fn new(client: &'a Client, namespace: &'a str) -> Objects<'a> {
        Objects { client, namespace }
    }

    /// A Secret's data, or `None` when it does not exist.
    pub async fn secret(&self, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace);
        Ok(api.get_opt(name).await?.map(|s| {
            let mut data: BTreeMap<String, Vec<u8>> = s
                .string_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            data.extend(
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            );
            data
        }))
    }

    /// A ConfigMap's data and binaryData, or `None` when it does not exist.
    pub async fn config_map(&self, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.namespace);
        Ok(api.get_opt(name).await?.map(|c| {
            let mut data: BTreeMap<String, Vec<u8>> = c
                .binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            data.extend(
                c.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes())),
            );
            data
        }))
    }
}

fn missing(kind: &str, name: &str, key: Option<&str>) -> Error {
    Error::Config(match key {
        Some(k) => format!("couldn't find key {k} in {kind} {name}"),
        None => format!("{kind} \"{name}\" not found"),
    })
}

/// One `secretKeyRef`/`configMapKeyRef` lookup, honouring `optional`.
async fn key_ref(
    objects: &Objects<'_>,
    secret: bool,
    name: &str,
    key: &str,
    optional: bool,
) -> Result<Option<String>> {
    let kind = if secret { "secret" } else { "configmap" };
    let data = if secret {
        objects.secret(name).await?
    } else {
        objects.config_map(name).await?
    };
    match data {
        Some(d) => match d.get(key) {
            Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            None if optional => Ok(None),
            None => Err(missing(kind, name, Some(key))),
        },
        None if optional => Ok(None),
        None => Err(missing(kind, name, None)),
    }
}

/// The container's environment in kubelet's order: service variables, `envFrom`, then `env`,
/// each `env` value expanded with the variables defined before it.
pub async fn resolve(
    client: &Client,
    pod: &Pod,
    container: &Container,
    addr: &Addresses,
    api: &ApiEndpoint,
) -> Result<Vec<(String, String)>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let objects = Objects::new(client, ns);
    let mut env: Vec<(String, String)> = vec![
        ("KUBERNETES_SERVICE_HOST".into(), api.host.clone()),
        ("KUBERNETES_SERVICE_PORT".into(), api.port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), api.port.to_string()),
        (
            "KUBERNETES_PORT".into(),
            format!("tcp://{}:{}", api.host, api.port),
        ),
    ];
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        let (data, optional, kind, name) = if let Some(s) = &from.secret_ref {
            (
                objects.secret(&s.name).await?,
                s.optional == Some(true),
                "secret",
                &s.name,
            )
        } else if let Some(c) = &from.config_map_ref {
            (
                objects.config_map(&c.name).await?,
                c.optional == Some(true),
                "configmap",
                &c.name,
            )
        } else {
            continue;
        };
        match data {
            Some(d) => set_all(&mut env, d, prefix),
            None if optional => {}
            None => return Err(missing(kind, name, None)),
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) => Some(expand(v, |n| lookup(&env, n))),
            (None, Some(src)) => value_from(&objects, pod, container, addr, src).await?,
            (None, None) => Some(String::new()),
        };
        if let Some(v) = value {
            set(&mut env, var.name.clone(), v);
        }
    }
    Ok(env)
}

async fn value_from(
    objects: &Objects<'_>,
    pod: &Pod,
    container: &Container,
    addr: &Addresses,
    src: &k8s_openapi::api::core::v1::EnvVarSource,
) -> Result<Option<String>> {
    if let Some(f) = &src.field_ref {
        return fields::field(pod, &f.field_path, addr)
            .map(Some)
            .ok_or_else(|| Error::Config(format!("unsupported fieldPath {}", f.field_path)));
    }
    if let Some(r) = &src.resource_field_ref {
        return Ok(fields::resource(container, r));
    }
    if let Some(s) = &src.secret_key_ref {
        return key_ref(objects, true, &s.name, &s.key, s.optional == Some(true)).await;
    }
    if let Some(c) = &src.config_map_key_ref {
        return key_ref(objects, false, &c.name, &c.key, c.optional == Some(true)).await;
    }
    Ok(None)
}

fn set_all(env: &mut Vec<(String, String)>, data: BTreeMap<String, Vec<u8>>, prefix: &str) {
    for (k, v) in data {
        set(
            env,
            format!("{prefix}{k}"),
            String::from_utf8_lossy(&v).into_owned(),
        );
    }
}

fn set(env: &mut Vec<(String, String)>, name: String, value: String) {
    match env.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name, value)),
    }
}

/// The value of `name` in `env`.
pub fn lookup(env: &[(String, String)], name: &str) -> Option<String> {
    env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// The process's argv: the image's binary stands in for `command[0]`; `$(VAR)` expanded.
pub fn argv(container: &Container, binary: &str, env: &[(String, String)]) -> Vec<String> {
    let x = |s: &String| expand(s, |n| lookup(env, n));
    let mut argv = vec![binary.to_string()];
    if let Some(cmd) = &container.command {
        argv.extend(cmd.iter().skip(1).map(x));
    }
    argv.extend(container.args.iter().flatten().map(x));
    argv
}
