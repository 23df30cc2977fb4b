//! `preload`: fetches releases and writes (or applies) the ConfigMaps of the air-gapped layout
//! that `fetchConfig.selector` reads, one per provider version, gzip-compressed above 1 MiB;
//! `--images` lists the images the releases run, for mirroring.

use std::{io::Write, path::PathBuf};

use anyhow::{Context, bail};
use capi_release_sources::airgap;
use serde_json::{Value, json};

use crate::{
    cluster::{Cluster, ClusterFlags},
    providers::ProviderFlags,
    release::{self, SourceFlags},
    vars::VariableFlags,
};

/// Flags of `preload`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    providers: ProviderFlags,
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    variables: VariableFlags,
    /// Write the ConfigMaps (and their Namespaces) as YAML to FILE ("-" for standard output).
    /// Not `-o`, which is an output format in every command.
    #[arg(long = "output-file", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Apply the ConfigMaps to the cluster (server-side), creating namespaces as needed.
    #[arg(long)]
    apply: bool,
    /// List the images the releases run (one per line), to fill a mirror: `release` (the
    /// default) as the releases name them, `mirrored` where the mirror setting moves them (what
    /// the cluster pulls; a provider's own spec.deployment image override is not known here).
    #[arg(long, value_name = "WHICH", num_args = 0..=1, default_missing_value = "release",
          value_parser = ["release", "mirrored"])]
    images: Option<String>,
    #[command(flatten)]
    mirror: crate::mirror::MirrorFlags,
    #[command(flatten)]
    copy: crate::mirror::CopyFlags,
    /// Also store cert-manager's manifest (this version, clusterctl's default when none is
    /// given) for `init --preloaded`.
    #[arg(long, value_name = "VERSION", num_args = 0..=1, default_missing_value = crate::certmanager::DEFAULT_VERSION)]
    cert_manager: Option<String>,
    /// cert-manager's manifest from a file, or a directory holding VERSION/cert-manager.yaml,
    /// instead of its GitHub release.
    #[arg(long, value_name = "PATH", requires = "cert_manager")]
    cert_manager_manifest: Option<PathBuf>,
}

/// A unique list keeping the first occurrence's order.
pub fn unique<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// Runs `preload`.
pub async fn run(args: &Args, cluster_flags: &ClusterFlags) -> anyhow::Result<()> {
    let list = args.providers.parse()?;
    if list.is_empty() && args.cert_manager.is_none() {
        bail!("name at least one provider (--core, --infrastructure, ...) or --cert-manager");
    }
    let to_stdout = args.output.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let mirror = args.mirror.mirror()?;
    if (args.copy.copy || args.images.as_deref() == Some("mirrored")) && mirror.images.is_empty() {
        bail!(
            "--copy and --images=mirrored need the mirror: --image-mirror or --image-mirror-config"
        );
    }
    if to_stdout && args.images.is_some() {
        bail!(
            "--images prints to standard output: write the ConfigMaps to a file (-o FILE) or --apply them"
        );
    }
    let write_default = args.output.is_none() && !args.apply && args.images.is_none();
    let file = args.variables.file()?;
    let mut docs: Vec<Value> = Vec::new();
    let mut namespaces: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for arg in &list {
        let located = release::locate_arg(arg, &args.sources)?;
        let r = located.fetch(arg.version.as_deref()).await?;
        // Published text only: the ConfigMaps hold the release as is; values and defaults only
        // decide the namespace and the images listed.
        let objects = release::objects_with(&r, &file, true)?;
        let namespace = release::target_namespace(arg, &objects)?;
        let component = arg.provider_type.manifest_label(&arg.name);
        images.extend(
            capi_components::pipeline::inspect_images(&objects)
                .into_iter()
                .map(|i| (component.clone(), i)),
        );
        let v = configmap_value(arg.provider_type, &arg.name, &namespace, &r)?;
        eprintln!(
            "{} {} {} from {} -> ConfigMap {namespace}/{}{}",
            arg.provider_type.kind(),
            arg.name,
            r.version,
            located.description,
            v.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            if v.get("binaryData").is_some() {
                " (compressed)"
            } else {
                ""
            }
        );
        if !namespaces.contains(&namespace) {
            namespaces.push(namespace);
        }
        docs.push(v);
    }
    if let Some(version) = &args.cert_manager {
        let (cm, cert_manager_images) = cert_manager_configmap(args, version).await?;
        docs.push(cm);
        images.extend(cert_manager_images);
        namespaces.push(crate::certmanager::NAMESPACE.to_string());
    }
    if (args.output.is_some() || write_default) && !write(args, &namespaces, &docs)? {
        return Ok(());
    }
    if args.apply {
        apply(cluster_flags, &namespaces, &docs).await?;
    }
    list_or_copy(args, &unique(images), &mirror).await
}

/// `--images`: the images (component, image) listed as the releases name them or as the mirror
/// moves them, or copied into the mirror.
async fn list_or_copy(
    args: &Args,
    images: &[(String, String)],
    mirror: &capi_components::mirror::ImageMirror,
) -> anyhow::Result<()> {
    if args.copy.copy {
        return crate::mirror::copy_all(images, mirror, &args.copy).await;
    }
    if let Some(which) = &args.images {
        let listed = images.iter().map(|(component, i)| match which.as_str() {
            "mirrored" => mirror.alter(component, i),
            _ => i.clone(),
        });
        for i in unique(listed) {
            say!("{i}");
        }
    }
    Ok(())
}

/// The ConfigMap of the cert-manager release `version`, and its images (component, image).
async fn cert_manager_configmap(
    args: &Args,
    version: &str,
) -> anyhow::Result<(Value, Vec<(String, String)>)> {
    let m = crate::certmanager::manifest(
        version,
        args.cert_manager_manifest.as_ref(),
        &args.sources,
        None,
    )
    .await?;
    let v = crate::certmanager::configmap(&m)?;
    let objects = capi_yaml::parse_documents(&m.text, &capi_yaml::Limits::default())?;
    let images = capi_components::pipeline::inspect_images(&objects)
        .into_iter()
        .map(|i| (capi_components::mirror::CERT_MANAGER.to_string(), i))
        .collect();
    eprintln!(
        "cert-manager {version} from {} -> ConfigMap {}/{}",
        m.from,
        crate::certmanager::NAMESPACE,
        crate::certmanager::configmap_name(version)
    );
    Ok((v, images))
}

/// Writes the namespaces and ConfigMaps to `--output` (standard output for `-` or by default);
/// returns false when standard output was closed (`| head`), which ends the command quietly.
fn write(args: &Args, namespaces: &[String], docs: &[Value]) -> anyhow::Result<bool> {
    let mut all: Vec<Value> = namespaces
        .iter()
        .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
        .collect();
    all.extend(docs.iter().cloned());
    let text = capi_yaml::to_multi_doc(&all)?;
    match &args.output {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
        }
        _ => match std::io::stdout().write_all(text.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(false),
            r => r?,
        },
    }
    Ok(true)
}

/// Applies the namespaces and ConfigMaps to the cluster.
async fn apply(
    cluster_flags: &ClusterFlags,
    namespaces: &[String],
    docs: &[Value],
) -> anyhow::Result<()> {
    let cluster = Cluster::connect(cluster_flags).await?;
    for ns in namespaces {
        cluster.ensure_namespace(ns).await?;
    }
    for d in docs {
        cluster.apply(d).await?;
    }
    eprintln!("applied {} ConfigMaps", docs.len());
    Ok(())
}

/// The ConfigMap documents of `release` for the provider, for callers that apply them.
pub fn configmap_value(
    t: capi_operator_api::ProviderType,
    name: &str,
    namespace: &str,
    r: &capi_release::Release,
) -> anyhow::Result<Value> {
    let cm = airgap::release_configmap(t, name, namespace, r)?;
    let mut v = serde_json::to_value(&cm)?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("kind".into(), json!("ConfigMap"));
    }
    Ok(v)
}
