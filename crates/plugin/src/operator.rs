//! The operator itself, for `init`: its release manifest of this plugin's version (built in
//! from `manifests/` by build.rs), of another release (`--operator-version`), or from files or
//! a URL (`--operator-manifests`); applied with namespaces and CRDs first, then followed until
//! its Deployment is available, so providers are created only once something reconciles them.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use capi_operator_api::rollout::availability;
use capi_release_sources::{
    github::GITHUB_ASSET_HOSTS,
    http::{Http, HttpConfig},
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, api::ListParams};
use serde_json::Value;

use crate::cluster::Cluster;

/// The operator's release manifest of this plugin's version: `manifests/kustomization.yaml`'s
/// resources, rendered at build time.
pub const EMBEDDED: &str = include_str!(concat!(env!("OUT_DIR"), "/operator.yaml"));

/// The asset of a release holding the operator's manifest.
pub const RELEASE_FILE: &str = "capi-provider-operator.yaml";

/// Selects the operator's Deployment (manifests/ and the Helm chart both label it so).
pub const SELECTOR: &str = "app.kubernetes.io/name=capi-provider-operator";

/// How `init` installs the operator.
#[derive(clap::Args, Debug, Clone)]
pub struct OperatorFlags {
    /// Install the operator of this release (e.g. v0.1.0): its capi-provider-operator.yaml from
    /// the project's releases, instead of the manifest built into the plugin (its own version).
    #[arg(long, value_name = "VERSION", conflicts_with = "operator_manifests")]
    pub operator_version: Option<String>,
    /// Install the operator from these manifests instead of the built-in one: YAML files,
    /// directories of them, or http(s) URLs (e.g. a release's capi-provider-operator.yaml).
    #[arg(long, value_name = "PATH|URL")]
    pub operator_manifests: Vec<String>,
    /// Do not install the operator (CRDs, policy, Deployment): it is managed elsewhere.
    #[arg(long, conflicts_with_all = ["operator_version", "operator_manifests"])]
    pub skip_operator: bool,
    /// How long init waits for the operator's Deployment to be available.
    #[arg(long, default_value = "5m", value_parser = crate::parse_duration)]
    pub operator_timeout: Duration,
}

/// An operator manifest and where it comes from.
pub struct Manifest {
    /// Its origin, for messages.
    pub from: String,
    /// Its objects.
    pub objects: Vec<Value>,
}

/// The URL of the operator's manifest of release `version`, from the repository this plugin
/// was built from.
pub fn release_url(version: &str) -> String {
    format!(
        "{}/releases/download/{version}/{RELEASE_FILE}",
        env!("CARGO_PKG_REPOSITORY").trim_end_matches('/')
    )
}

fn parse(text: &str, from: &str) -> anyhow::Result<Vec<Value>> {
    Ok(
        capi_yaml::parse_documents(text, &capi_yaml::Limits::default())
            .with_context(|| format!("parsing {from}"))?
            .into_iter()
            .filter(|d| d.get("kind").is_some())
            .collect(),
    )
}

/// The built-in manifest.
pub fn embedded() -> anyhow::Result<Manifest> {
    Ok(Manifest {
        from: format!("the plugin's manifest (v{})", env!("CARGO_PKG_VERSION")),
        objects: parse(EMBEDDED, "the plugin's operator manifest")?,
    })
}

/// Reads a manifest over http(s); GitHub's release downloads redirect to its asset hosts.
async fn download(url: &str) -> anyhow::Result<String> {
    let config = HttpConfig {
        redirect_hosts: GITHUB_ASSET_HOSTS
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
        ..HttpConfig::default()
    };
    let body = Http::new(url, None, config)?
        .get(url, "application/octet-stream")
        .await
        .with_context(|| format!("downloading {url}"))?
        .body;
    String::from_utf8(body).with_context(|| format!("{url} is not UTF-8"))
}

/// The YAML objects of `path`: a file, or the `.yaml`/`.yml` files of a directory in name
/// order.
pub fn read_path(path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut files = Vec::new();
    if path.is_dir() {
        for e in std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut out = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        out.extend(parse(&text, &f.display().to_string())?);
    }
    Ok(out)
}

/// The manifest the flags name.
pub async fn manifest(flags: &OperatorFlags) -> anyhow::Result<Manifest> {
    if let Some(v) = &flags.operator_version {
        let url = release_url(v);
        let text = download(&url).await?;
        return Ok(Manifest {
            objects: parse(&text, &url)?,
            from: url,
        });
    }
    if flags.operator_manifests.is_empty() {
        return embedded();
    }
    let mut objects = Vec::new();
    for m in &flags.operator_manifests {
        if m.starts_with("https://") || m.starts_with("http://") {
            objects.extend(parse(&download(m).await?, m)?);
        } else {
            objects.extend(read_path(Path::new(m))?);
        }
    }
    Ok(Manifest {
        from: flags.operator_manifests.join(", "),
        objects,
    })
}

fn kind(o: &Value) -> &str {
    o.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn meta(o: &Value, field: &str) -> String {
    o.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Applies `objects`: namespaces and CRDs first (waiting until the CRDs are established), then
/// the rest. An admission policy the cluster cannot take (before Kubernetes 1.30) is a warning.
pub async fn apply_ordered(cluster: &Cluster, objects: &[Value]) -> anyhow::Result<()> {
    let first = |o: &Value| matches!(kind(o), "Namespace" | "CustomResourceDefinition");
    let mut crds = Vec::new();
    for o in objects.iter().filter(|o| first(o)) {
        cluster.apply(o).await?;
        if kind(o) == "CustomResourceDefinition" {
            crds.push(meta(o, "name"));
        }
    }
    cluster
        .wait_established(&crds, Duration::from_secs(60))
        .await?;
    for o in objects.iter().filter(|o| !first(o)) {
        match cluster.apply(o).await {
            Err(e) if kind(o).starts_with("ValidatingAdmissionPolicy") => {
                eprintln!("warning: admission policy not installed: {e:#}");
            }
            r => r?,
        }
    }
    Ok(())
}

/// The operator's Deployments already in the cluster, as `namespace/name`.
pub async fn running(cluster: &Cluster) -> anyhow::Result<Vec<String>> {
    let api: Api<Deployment> = Api::all(cluster.client.clone());
    let list = api.list(&ListParams::default().labels(SELECTOR)).await?;
    Ok(list
        .items
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d.metadata.namespace.as_deref().unwrap_or_default(),
                d.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect())
}

/// Installs the operator as the flags say, unless it is already there and no release was
/// asked for, then waits until its Deployments are available.
pub async fn ensure(cluster: &Cluster, flags: &OperatorFlags) -> anyhow::Result<()> {
    let explicit = flags.operator_version.is_some() || !flags.operator_manifests.is_empty();
    if !explicit {
        let found = running(cluster).await?;
        if !found.is_empty() {
            eprintln!(
                "operator already installed (Deployment {}): left as it is",
                found.join(", ")
            );
            return Ok(());
        }
    }
    let m = manifest(flags).await?;
    apply_ordered(cluster, &m.objects).await?;
    eprintln!(
        "operator installed from {} ({} objects)",
        m.from,
        m.objects.len()
    );
    let deployments: Vec<(String, String)> = m
        .objects
        .iter()
        .filter(|o| kind(o) == "Deployment")
        .map(|o| (meta(o, "namespace"), meta(o, "name")))
        .collect();
    wait_available(cluster, &deployments, flags.operator_timeout).await
}

/// Waits until every Deployment is available, printing each change of state.
pub async fn wait_available(
    cluster: &Cluster,
    deployments: &[(String, String)],
    timeout: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    for (ns, name) in deployments {
        let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns);
        let mut last = String::new();
        loop {
            let state = match api.get_opt(name).await? {
                None => Err("not found".to_string()),
                Some(d) => availability(&d),
            };
            let line = match &state {
                Ok(()) => "available".to_string(),
                Err(why) => why.clone(),
            };
            if line != last {
                eprintln!(
                    "[{:>4}s] operator Deployment {ns}/{name}: {line}",
                    start.elapsed().as_secs()
                );
                last = line;
            }
            if state.is_ok() {
                break;
            }
            if start.elapsed() >= timeout {
                bail!(
                    "the operator's Deployment {ns}/{name} is not available after {}s: {last} (see `kubectl -n {ns} describe deployment {name}`; --operator-timeout waits longer)",
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_manifest_is_the_operator_of_this_version() -> anyhow::Result<()> {
        let m = embedded()?;
        let of = |k: &str| m.objects.iter().filter(|o| kind(o) == k).count();
        assert_eq!(of("CustomResourceDefinition"), 14);
        assert_eq!(of("ValidatingAdmissionPolicy"), 1);
        assert_eq!(of("Deployment"), 1);
        let images: Vec<&str> = m
            .objects
            .iter()
            .filter(|o| kind(o) == "Deployment")
            .filter_map(|d| d.pointer("/spec/template/spec/containers/0/image"))
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            images,
            [format!(
                "ghcr.io/capi-provider-operator/capi-provider-operator:v{}",
                env!("CARGO_PKG_VERSION")
            )]
        );
        Ok(())
    }

    #[test]
    fn the_release_manifest_is_an_asset_of_the_repository() {
        assert_eq!(
            release_url("v0.2.0"),
            format!(
                "{}/releases/download/v0.2.0/capi-provider-operator.yaml",
                env!("CARGO_PKG_REPOSITORY")
            )
        );
    }
}
