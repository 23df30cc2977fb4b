//! cert-manager for `init`, as clusterctl handles it: Cluster API's releases need its kinds
//! (Certificate, Issuer) for their webhooks, so `init` installs it when the cluster has none —
//! a pinned default version (clusterctl v1.14's), another with `--cert-manager-version` — and
//! waits until it is ready (its Deployments available and its webhook answering), or leaves it
//! alone with `--skip-cert-manager`. The manifest comes from cert-manager's GitHub release, a
//! local file or directory, or (air-gapped, `--preloaded`) the ConfigMap `preload
//! --cert-manager` writes. The operator itself never installs cert-manager.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use capi_operator_api::{CONFIGMAP_VERSION_LABEL, rollout::availability};
use capi_release::Release;
use capi_release_sources::{
    MAX_FILE_BYTES, ReleaseSource,
    airgap::{NAME_LABEL, dns_name, release_data},
    configmap::{from_configmap, gunzip_limited},
    github::GitHubSource,
    http::HttpConfig,
};
use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::ConfigMap},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{DynamicObject, PostParams},
};
use serde_json::{Value, json};

use crate::{cluster::Cluster, release::SourceFlags};

/// The version installed by default: the one clusterctl v1.14 pins
/// (`CertManagerDefaultVersion` in `cmd/clusterctl/client/config`).
pub const DEFAULT_VERSION: &str = "v1.21.1";
/// cert-manager's namespace (its manifest's, and the preloaded ConfigMap's).
pub const NAMESPACE: &str = "cert-manager";
/// The CRD whose presence means cert-manager is installed.
const CERTIFICATES_CRD: &str = "certificates.cert-manager.io";
/// The release asset holding the manifest.
const FILE: &str = "cert-manager.yaml";

/// Flags of `init` about cert-manager.
#[derive(clap::Args, Debug, Clone)]
pub struct Flags {
    /// Do not install cert-manager, even when the cluster lacks it.
    #[arg(long)]
    pub skip_cert_manager: bool,
    /// The cert-manager version installed when the cluster has none.
    #[arg(long, default_value = DEFAULT_VERSION, value_name = "VERSION")]
    pub cert_manager_version: String,
    /// cert-manager's manifest from a file, or from a directory holding
    /// VERSION/cert-manager.yaml, instead of its GitHub release.
    #[arg(long, value_name = "PATH")]
    pub cert_manager_manifest: Option<PathBuf>,
    /// How long to wait for cert-manager to become ready.
    #[arg(long, default_value = "10m", value_parser = crate::parse_duration)]
    pub cert_manager_timeout: Duration,
    /// The image mirror for the cert-manager installed (the operator applies its own setting
    /// to the providers).
    #[command(flatten)]
    pub mirror: crate::mirror::MirrorFlags,
}

/// A cert-manager manifest and where it came from.
pub struct Manifest {
    /// Its version.
    pub version: String,
    /// Its source, for messages.
    pub from: String,
    /// The YAML text.
    pub text: String,
}

/// Name of the ConfigMap holding the manifest of `version`.
pub fn configmap_name(version: &str) -> String {
    dns_name(&format!("cert-manager-{version}"))
}

/// Reads the manifest of `version`: from `path` (a file, or a directory holding
/// VERSION/cert-manager.yaml), else from the ConfigMap `preload` wrote when `preloaded` names
/// the cluster, else from cert-manager's GitHub release.
pub async fn manifest(
    version: &str,
    path: Option<&PathBuf>,
    sources: &SourceFlags,
    preloaded: Option<&Cluster>,
) -> anyhow::Result<Manifest> {
    let (from, text) = if let Some(p) = path {
        let file = if p.is_dir() {
            p.join(version).join(FILE)
        } else {
            p.clone()
        };
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading cert-manager's manifest {}", file.display()))?;
        (file.display().to_string(), text)
    } else if let Some(cluster) = preloaded {
        let name = configmap_name(version);
        let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), NAMESPACE);
        let cm = api.get_opt(&name).await?.with_context(|| {
            format!("no ConfigMap {NAMESPACE}/{name}: preload it with `preload --cert-manager {version} --apply`")
        })?;
        (
            format!("ConfigMap {NAMESPACE}/{name}"),
            configmap_text(&cm)?,
        )
    } else {
        let api = sources
            .github_api_url
            .clone()
            .unwrap_or_else(|| "https://api.github.com".into());
        let token = std::env::var("GITHUB_TOKEN").ok();
        let gh = GitHubSource::new(
            &api,
            "cert-manager",
            "cert-manager",
            token,
            HttpConfig::default(),
        )?;
        let bytes = gh.fetch_file(version, FILE).await?;
        let text = String::from_utf8(bytes).context("cert-manager's manifest is not UTF-8")?;
        (
            format!("GitHub release cert-manager/cert-manager {version}"),
            text,
        )
    };
    Ok(Manifest {
        version: version.to_string(),
        from,
        text,
    })
}

/// The manifest text a preloaded ConfigMap holds (gzip-compressed when large).
fn configmap_text(cm: &ConfigMap) -> anyhow::Result<String> {
    let d = from_configmap(cm);
    if let Some(text) = d.data.get("components") {
        return Ok(text.clone());
    }
    let gz = d
        .binary_data
        .get("components")
        .context("the ConfigMap holds no components key")?;
    Ok(String::from_utf8(gunzip_limited(gz, MAX_FILE_BYTES)?)?)
}

/// The ConfigMap `preload --cert-manager` writes for `m`, in the air-gapped layout.
pub fn configmap(m: &Manifest) -> anyhow::Result<Value> {
    let release = Release {
        version: m.version.clone(),
        metadata: String::new(),
        components: m.text.clone(),
    };
    let (mut data, binary, annotations) = release_data(&release)?;
    data.remove("metadata");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(configmap_name(&m.version)),
            namespace: Some(NAMESPACE.into()),
            labels: Some(
                [
                    (NAME_LABEL.to_string(), "cert-manager".to_string()),
                    (CONFIGMAP_VERSION_LABEL.to_string(), m.version.clone()),
                ]
                .into(),
            ),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        data: (!data.is_empty()).then_some(data),
        binary_data: (!binary.is_empty()).then_some(binary),
        ..ConfigMap::default()
    };
    let mut v = serde_json::to_value(cm)?;
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("ConfigMap");
    Ok(v)
}

/// cert-manager's version when it is installed (`Some(None)`: installed, version unknown).
pub async fn installed(cluster: &Cluster) -> anyhow::Result<Option<Option<String>>> {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    if crds.get_opt(CERTIFICATES_CRD).await?.is_none() {
        return Ok(None);
    }
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let version = deployments
        .get_opt("cert-manager")
        .await
        .ok()
        .flatten()
        .and_then(|d| d.metadata.labels?.get("app.kubernetes.io/version").cloned());
    Ok(Some(version))
}

/// What `upgrade plan` says about cert-manager: installed or not, and whether the version
/// `init` would install is newer.
pub fn plan_line(installed: Option<Option<&str>>) -> String {
    let newer = |v: &str| {
        let parse = |s: &str| semver::Version::parse(s.trim_start_matches('v')).ok();
        matches!((parse(v), parse(DEFAULT_VERSION)), (Some(a), Some(b)) if a < b)
    };
    match installed {
        None => format!(
            "cert-manager: not installed (`kubectl capi-providers init` installs {DEFAULT_VERSION})"
        ),
        Some(None) => "cert-manager: installed, version unknown".into(),
        Some(Some(v)) if newer(v) => format!(
            "cert-manager: {v} installed, {DEFAULT_VERSION} available (clusterctl's version): upgrade it with kubectl apply --server-side -f https://github.com/cert-manager/cert-manager/releases/download/{DEFAULT_VERSION}/{FILE}"
        ),
        Some(Some(v)) => format!("cert-manager: {v} installed, up to date"),
    }
}

/// `init`'s step: install cert-manager unless skipped or present (its images moved by `mirror`),
/// then wait until it is ready.
pub async fn ensure(
    cluster: &Cluster,
    flags: &Flags,
    sources: &SourceFlags,
    preloaded: bool,
) -> anyhow::Result<()> {
    let mirror = flags.mirror.mirror()?;
    if flags.skip_cert_manager {
        eprintln!("cert-manager: skipped (--skip-cert-manager)");
        return Ok(());
    }
    if let Some(version) = installed(cluster).await? {
        let v = version.unwrap_or_else(|| "of unknown version".into());
        eprintln!("cert-manager {v} found: not installed again");
        return Ok(());
    }
    let m = manifest(
        &flags.cert_manager_version,
        flags.cert_manager_manifest.as_ref(),
        sources,
        preloaded.then_some(cluster),
    )
    .await?;
    eprintln!("cert-manager {}: installing from {}", m.version, m.from);
    let objects = install(cluster, &m, &mirror).await?;
    wait_ready(cluster, &objects, flags.cert_manager_timeout).await?;
    eprintln!("cert-manager {}: ready", m.version);
    Ok(())
}

/// Applies the manifest: namespaces and CRDs first (waiting until the CRDs are established),
/// then everything else. Returns the objects applied.
async fn install(
    cluster: &Cluster,
    m: &Manifest,
    mirror: &capi_components::mirror::ImageMirror,
) -> anyhow::Result<Vec<Value>> {
    let mut objects: Vec<Value> =
        capi_yaml::parse_documents(&m.text, &capi_yaml::Limits::default())
            .with_context(|| format!("parsing cert-manager's manifest from {}", m.from))?
            .into_iter()
            .filter(|o| o.get("kind").is_some())
            .collect();
    // clusterctl names cert-manager's images' component "cert-manager" in its images: map.
    mirror.rewrite_images(&mut objects, capi_components::mirror::CERT_MANAGER);
    mirror.add_pull_secrets_to(&mut objects);
    if !mirror.is_empty() {
        for i in capi_components::pipeline::inspect_images(&objects) {
            eprintln!("cert-manager: image {i}");
        }
    }
    let kind = |o: &Value| {
        o.get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let first = |o: &Value| matches!(kind(o).as_str(), "Namespace" | "CustomResourceDefinition");
    let mut crds = Vec::new();
    for o in objects.iter().filter(|o| first(o)) {
        cluster.apply(o).await?;
        if kind(o) == "CustomResourceDefinition"
            && let Some(n) = o.pointer("/metadata/name").and_then(Value::as_str)
        {
            crds.push(n.to_string());
        }
    }
    cluster
        .wait_established(&crds, Duration::from_secs(60))
        .await?;
    for o in objects.iter().filter(|o| !first(o)) {
        cluster.apply(o).await?;
    }
    Ok(objects)
}

/// Waits until every Deployment of the manifest is available and, when it registers webhooks,
/// until its webhook answers (a server-side dry run of an Issuer), as clusterctl does.
async fn wait_ready(cluster: &Cluster, objects: &[Value], timeout: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let of_kind = |k: &'static str| {
        objects
            .iter()
            .filter(move |o| o.get("kind").and_then(Value::as_str) == Some(k))
    };
    for d in of_kind("Deployment") {
        let ns = d
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(NAMESPACE);
        let name = d
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns);
        loop {
            if api
                .get_opt(name)
                .await?
                .is_some_and(|d| availability(&d).is_ok())
            {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "cert-manager's Deployment {ns}/{name} did not become available within {timeout:?}"
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    if of_kind("ValidatingWebhookConfiguration").next().is_none() {
        return Ok(());
    }
    let issuers = cluster
        .api("cert-manager.io/v1", "Issuer", Some(NAMESPACE))
        .await?;
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
        "metadata": {"name": "capi-providers-probe", "namespace": NAMESPACE},
        "spec": {"selfSigned": {}},
    }))?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    loop {
        match issuers.create(&dry_run, &probe).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                bail!("cert-manager's webhook did not answer within {timeout:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_lines() {
        assert!(plan_line(None).contains("not installed"));
        assert!(plan_line(Some(Some("v1.11.5"))).contains("v1.11.5 installed, v1.21.1 available"));
        assert!(plan_line(Some(Some("v1.21.1"))).contains("up to date"));
        assert!(plan_line(Some(Some("v2.0.0"))).contains("up to date"));
        assert!(plan_line(Some(None)).contains("version unknown"));
    }

    #[test]
    fn configmap_layout_round_trips_and_compresses_large_manifests() -> anyhow::Result<()> {
        for size in [10, 2 * 1024 * 1024] {
            let m = Manifest {
                version: "v1.21.1".into(),
                from: "test".into(),
                text: format!("# {}\n", "x".repeat(size)),
            };
            let v = configmap(&m)?;
            assert_eq!(
                v.pointer("/metadata/name"),
                Some(&json!("cert-manager-v1.21.1"))
            );
            assert_eq!(v.get("binaryData").is_some(), size > 1024 * 1024);
            let cm: ConfigMap = serde_json::from_value(v)?;
            assert_eq!(configmap_text(&cm)?, m.text);
        }
        Ok(())
    }
}
