//! Providers named on the command line: `--core`, `--bootstrap`, `--control-plane`,
//! `--infrastructure`, `--ipam`, `--runtime-extension` and `--addon`, each taking
//! `name[:namespace][:version][@source]` (several per flag, comma-separated or repeated).
//!
//! With two parts the second is a version when it looks like one (`v1.12.0`, `latest`), a
//! namespace otherwise. The source is a release URL (GitHub or GitLab), `oci://REFERENCE`
//! (`oci+http://REFERENCE` for a registry over plain HTTP), or a directory in clusterctl's
//! local-repository layout.

use anyhow::{Context, bail};
use capi_operator_api::{AnyProvider, ProviderType};

/// One provider named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderArg {
    /// Its type.
    pub provider_type: ProviderType,
    /// Its name (`cluster-api`, `kubeadm`, `aws`, ...).
    pub name: String,
    /// Namespace of the provider object, if given.
    pub namespace: Option<String>,
    /// Version, if given (`None` is the latest release).
    pub version: Option<String>,
    /// Where its releases come from, if given.
    pub source: Option<String>,
}

impl ProviderArg {
    /// `Kind name` for messages.
    pub fn describe(&self) -> String {
        format!("{} {}", self.provider_type.kind(), self.name)
    }
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn looks_like_version(s: &str) -> bool {
    s == "latest" || (s.starts_with('v') && capi_release::version::parse(s).is_some())
}

/// Parses `name[:namespace][:version][@source]` for type `t`.
pub fn parse(t: ProviderType, text: &str) -> anyhow::Result<ProviderArg> {
    let (spec, source) = match text.split_once('@') {
        Some((s, src)) if !src.is_empty() => (s, Some(src.to_string())),
        Some(_) => {
            bail!("{text:?}: nothing after @ (expected a URL, oci://REFERENCE or a directory)")
        }
        None => (text, None),
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let (name, namespace, version) = match parts.as_slice() {
        [name] => (*name, None, None),
        [name, second] if looks_like_version(second) => (*name, None, Some(*second)),
        [name, ns] => (*name, Some(*ns), None),
        [name, ns, v] => (*name, Some(*ns), Some(*v)),
        _ => bail!("{text:?} is not name[:namespace][:version][@source]"),
    };
    if !dns_label(name) {
        bail!("{text:?}: provider name {name:?} must be a lower-case DNS label");
    }
    if let Some(ns) = namespace
        && !dns_label(ns)
    {
        bail!("{text:?}: namespace {ns:?} must be a lower-case DNS label");
    }
    if let Some(v) = version
        && !looks_like_version(v)
    {
        bail!("{text:?}: version {v:?} must be a semantic version with a v prefix (e.g. v1.12.0)");
    }
    Ok(ProviderArg {
        provider_type: t,
        name: name.to_string(),
        namespace: namespace.map(str::to_string),
        version: version.filter(|v| *v != "latest").map(str::to_string),
        source,
    })
}

/// The installed providers `named` designates, one each: a name matching nothing, or one
/// installed in several namespaces without a namespace given, is refused.
pub fn installed(
    existing: &[AnyProvider],
    named: &[ProviderArg],
) -> anyhow::Result<Vec<AnyProvider>> {
    let mut out = Vec::new();
    for arg in named {
        let found: Vec<&AnyProvider> = existing
            .iter()
            .filter(|p| p.provider_type == arg.provider_type && p.name() == arg.name)
            .filter(|p| {
                arg.namespace
                    .as_deref()
                    .is_none_or(|ns| p.namespace() == ns)
            })
            .collect();
        match found.as_slice() {
            [] => bail!("{} is not installed", arg.describe()),
            [p] => out.push((*p).clone()),
            many => bail!(
                "{} is installed in several namespaces ({}): name one as NAME:NAMESPACE",
                arg.describe(),
                many.iter()
                    .map(|p| p.namespace())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    Ok(out)
}

/// The provider flags shared by the commands that take providers.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ProviderFlags {
    /// Core provider: name[:namespace][:version][@source].
    #[arg(long, value_delimiter = ',', value_name = "PROVIDER")]
    pub core: Vec<String>,
    /// Bootstrap providers: name[:namespace][:version][@source].
    #[arg(long, short = 'b', value_delimiter = ',', value_name = "PROVIDER")]
    pub bootstrap: Vec<String>,
    /// Control-plane providers: name[:namespace][:version][@source].
    #[arg(long, short = 'c', value_delimiter = ',', value_name = "PROVIDER")]
    pub control_plane: Vec<String>,
    /// Infrastructure providers: name[:namespace][:version][@source].
    #[arg(long, short = 'i', value_delimiter = ',', value_name = "PROVIDER")]
    pub infrastructure: Vec<String>,
    /// IPAM providers: name[:namespace][:version][@source].
    #[arg(long, value_delimiter = ',', value_name = "PROVIDER")]
    pub ipam: Vec<String>,
    /// Runtime-extension providers: name[:namespace][:version][@source].
    #[arg(long, value_delimiter = ',', value_name = "PROVIDER")]
    pub runtime_extension: Vec<String>,
    /// Addon providers: name[:namespace][:version][@source].
    #[arg(long, value_delimiter = ',', value_name = "PROVIDER")]
    pub addon: Vec<String>,
}

impl ProviderFlags {
    /// Every provider named, in clusterctl's install order (core first).
    pub fn parse(&self) -> anyhow::Result<Vec<ProviderArg>> {
        let mut out = Vec::new();
        for (t, list) in [
            (ProviderType::Core, &self.core),
            (ProviderType::Bootstrap, &self.bootstrap),
            (ProviderType::ControlPlane, &self.control_plane),
            (ProviderType::Infrastructure, &self.infrastructure),
            (ProviderType::Ipam, &self.ipam),
            (ProviderType::RuntimeExtension, &self.runtime_extension),
            (ProviderType::Addon, &self.addon),
        ] {
            for text in list {
                out.push(parse(t, text).with_context(|| format!("--{}", flag_of(t)))?);
            }
        }
        Ok(out)
    }
}

/// The command-line flag of type `t`.
pub fn flag_of(t: ProviderType) -> &'static str {
    match t {
        ProviderType::Core => "core",
        ProviderType::Bootstrap => "bootstrap",
        ProviderType::ControlPlane => "control-plane",
        ProviderType::Infrastructure => "infrastructure",
        ProviderType::Ipam => "ipam",
        ProviderType::RuntimeExtension => "runtime-extension",
        ProviderType::Addon => "addon",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_and_sources() -> anyhow::Result<()> {
        let t = ProviderType::Infrastructure;
        let p = parse(t, "aws")?;
        assert_eq!(
            (p.name.as_str(), p.namespace, p.version, p.source),
            ("aws", None, None, None)
        );
        let p = parse(t, "aws:v2.0.0")?;
        assert_eq!((p.namespace, p.version.as_deref()), (None, Some("v2.0.0")));
        let p = parse(t, "aws:capa-system")?;
        assert_eq!(
            (p.namespace.as_deref(), p.version),
            (Some("capa-system"), None)
        );
        let p = parse(
            t,
            "aws:capa-system:latest@oci://registry.example/capa@sha256:abc",
        )?;
        assert_eq!(p.version, None);
        assert_eq!(
            p.source.as_deref(),
            Some("oci://registry.example/capa@sha256:abc")
        );
        let p = parse(
            t,
            "aws:capa:v2.1.0@https://github.com/kubernetes-sigs/cluster-api-provider-aws/releases/latest/infrastructure-components.yaml",
        )?;
        assert_eq!(p.version.as_deref(), Some("v2.1.0"));
        assert!(p.source.is_some_and(|s| s.starts_with("https://")));
        for bad in ["", "AWS", "aws:Bad_NS", "aws:ns:1.0.0", "a:b:c:d", "aws@"] {
            assert!(parse(t, bad).is_err(), "{bad:?}");
        }
        Ok(())
    }

    #[test]
    fn flags_keep_the_install_order() -> anyhow::Result<()> {
        let f = ProviderFlags {
            infrastructure: vec!["docker".into()],
            core: vec!["cluster-api:v1.12.0".into()],
            bootstrap: vec!["kubeadm".into(), "talos".into()],
            ..Default::default()
        };
        let kinds: Vec<String> = f.parse()?.iter().map(ProviderArg::describe).collect();
        assert_eq!(
            kinds,
            [
                "CoreProvider cluster-api",
                "BootstrapProvider kubeadm",
                "BootstrapProvider talos",
                "InfrastructureProvider docker"
            ]
        );
        Ok(())
    }
}
