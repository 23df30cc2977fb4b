//! The translation of a v1alpha2 spec into this operator's own `ProviderSpec`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::{ContainerImage, ImageMeta};

use super::{
    ContainerSpec, ControllerConfigurationSpec, DeploymentSpec, FetchConfiguration,
    LeaderElectionConfiguration, ManagerSpec, Patch, ProviderSpec,
    flags::{Flags, flag_name, parse_go_duration, whole_seconds},
};

/// A v1alpha2 spec in this operator's API ([`ProviderSpec::to_v1alpha1`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Converted {
    /// The spec in this operator's API.
    pub spec: crate::ProviderSpec,
    /// One human-readable note per setting left out because the other operator silently
    /// ignored it too (each names the field by its path under `spec`), for a condition
    /// message: objects the other operator accepted must keep working unchanged.
    pub ignored: Vec<String>,
}

/// Why a v1alpha2 spec cannot be expressed in this operator's [`crate::ProviderSpec`]. Each
/// variant names the field (as a path under `spec`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// A duration that does not parse (Go syntax: "300ms", "1.5h", "2h45m", ...).
    #[error("{field}: {value:?} is not a duration: {reason}")]
    InvalidDuration {
        /// Path of the field.
        field: String,
        /// The value given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A number outside the range the setting can take.
    #[error("{field}: {value} is out of range ({min} to {max})")]
    OutOfRange {
        /// Path of the field.
        field: String,
        /// The value given.
        value: i64,
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A `--namespace` flag among the args of a container other than `manager`: this operator
    /// sets that flag on the manager container only, from manager.cacheNamespace.
    #[error(
        "{field}: --namespace can only be given for the manager container (as spec.manager.cacheNamespace)"
    )]
    NamespaceFlag {
        /// Path of the args.
        field: String,
    },
    /// spec.version is not a semantic version.
    #[error("spec.version: {version:?} is not a semantic version: {reason}")]
    InvalidVersion {
        /// The value given.
        version: String,
        /// What is wrong.
        reason: String,
    },
    /// A flag key without leading dashes: the other operator passes `key=value` as a
    /// positional argument, which the manager does not read as a flag. A deliberate departure
    /// from "accept what the other operator accepted": such a key never had the effect its
    /// writer meant, and guessing the dashes could change which flag is set.
    #[error(
        "{field}: key {key:?} does not start with \"-\", so it is not a flag; write it as \"--{key}\""
    )]
    NotAFlag {
        /// Path of the map.
        field: String,
        /// The key given.
        key: String,
    },
    /// A flag key that is empty after its dashes or holds `=` or whitespace.
    #[error("{field}: {key:?} is not a usable flag name")]
    InvalidFlagName {
        /// Path of the map.
        field: String,
        /// The key given.
        key: String,
    },
    /// Two settings give the same flag different values.
    #[error("{field}: flag --{flag} is set twice, to {first:?} and to {second:?}")]
    ConflictingFlag {
        /// Path of the setting met second.
        field: String,
        /// The flag, without dashes.
        flag: String,
        /// The value met first.
        first: String,
        /// The value met second.
        second: String,
    },
    /// A name that must not be empty.
    #[error("{field} must not be empty")]
    Empty {
        /// Path of the field.
        field: String,
    },
    /// A release URL other than https://, which the other operator cannot fetch either.
    #[error("{field}: {url:?} is not an https:// URL of a GitHub or GitLab release")]
    UnsupportedUrl {
        /// Path of the field.
        field: String,
        /// The value given.
        url: String,
    },
    /// More than one release source is set.
    #[error("spec.fetchConfig sets more than one of oci, url and selector")]
    ConflictingSources,
}

impl ProviderSpec {
    /// This spec in this operator's own API: every setting mapped to the one that does the
    /// same thing, or a [`ConversionError`] naming a value that cannot be expressed. Settings
    /// the other operator silently ignored are ignored too and named in
    /// [`Converted::ignored`]. The mapping, field by field, and where it departs from the
    /// other operator's flags on purpose (flags Cluster API managers do not have) are in
    /// docs/migration-from-cluster-api-operator.md, "Field by field".
    pub fn to_v1alpha1(&self) -> Result<Converted, ConversionError> {
        let mut ignored = Vec::new();
        let version = convert_version(&self.version)?;
        let (manager, deployment) = convert_scope(
            self.manager.as_ref(),
            self.deployment.as_ref(),
            "spec.manager",
            "spec.deployment",
            &mut ignored,
        )?;
        let (secret_name, secret_namespace) = match &self.config_secret {
            Some(s) => {
                if s.name.trim().is_empty() {
                    return Err(ConversionError::Empty {
                        field: "spec.configSecret.name".into(),
                    });
                }
                (Some(s.name.clone()), non_empty(&s.namespace))
            }
            None => (None, None),
        };
        let fetch_config = match &self.fetch_config {
            Some(f) => convert_fetch_config(f)?,
            None => None,
        };
        let additional_manifests = match &self.additional_manifests {
            Some(r) => {
                if r.name.trim().is_empty() {
                    return Err(ConversionError::Empty {
                        field: "spec.additionalManifests.name".into(),
                    });
                }
                Some(crate::ConfigMapReference {
                    name: r.name.clone(),
                    namespace: non_empty(&r.namespace),
                })
            }
            None => None,
        };
        let patches = self.patches.iter().map(convert_patch).collect();
        let mut additional_deployments = BTreeMap::new();
        for (name, ad) in &self.additional_deployments {
            let path = format!("spec.additionalDeployments[{name}]");
            let (manager, deployment) = convert_scope(
                ad.manager.as_ref(),
                ad.deployment.as_ref(),
                &format!("{path}.manager"),
                &format!("{path}.deployment"),
                &mut ignored,
            )?;
            additional_deployments.insert(
                name.clone(),
                crate::AdditionalDeployment {
                    manager,
                    deployment,
                },
            );
        }
        let spec = crate::ProviderSpec {
            version,
            manager,
            deployment,
            secret_name,
            secret_namespace,
            fetch_config,
            paused: false,
            manifest_patches: self.manifest_patches.clone(),
            patches,
            additional_manifests,
            additional_deployments,
            deletion_policy: self.deletion_policy,
        };
        Ok(Converted { spec, ignored })
    }
}

// Name of the container the other operator applies the manager settings to.
const MANAGER_CONTAINER: &str = "manager";
// The verbosity the other operator's CRD fills in, and at which it leaves --v alone.
const GO_DEFAULT_VERBOSITY: i64 = 1;

// The manager and deployment settings of one Deployment (the main one or an additional one).
fn convert_scope(
    manager: Option<&ManagerSpec>,
    deployment: Option<&DeploymentSpec>,
    manager_path: &str,
    deployment_path: &str,
    ignored: &mut Vec<String>,
) -> Result<(Option<crate::ManagerSpec>, Option<crate::DeploymentSpec>), ConversionError> {
    let (deployment, container_namespace) = match deployment {
        Some(d) => {
            let (d, ns) = convert_deployment(d, deployment_path)?;
            (Some(d), ns)
        }
        None => (None, None),
    };
    let manager = match manager {
        Some(m) => convert_manager(m, container_namespace, manager_path, ignored)?,
        None => container_namespace.map(|(ns, _)| crate::ManagerSpec {
            cache_namespace: Some(ns),
            ..Default::default()
        }),
    };
    Ok((manager, deployment))
}

// `container_namespace`: a --namespace flag among the manager container's args, with its path.
// Settings without effect in either operator are noted in `ignored`.
fn convert_manager(
    m: &ManagerSpec,
    container_namespace: Option<(String, String)>,
    path: &str,
    ignored: &mut Vec<String>,
) -> Result<Option<crate::ManagerSpec>, ConversionError> {
    let mut out = crate::ManagerSpec::default();
    convert_durations(m, path, &mut out)?;
    let mut flags = Flags::default();
    if let Some(c) = &m.controller {
        convert_controller(c, path, &mut flags, ignored)?;
    }
    out.cache_namespace = convert_namespace(m, container_namespace, path, &mut flags)?;
    convert_endpoints(m, path, &mut out)?;
    out.profiler_address = non_empty(&m.profiler_address);
    out.max_concurrent_reconciles = match m.max_concurrent_reconciles {
        None | Some(0) => None,
        Some(n) => Some(in_range(
            &format!("{path}.maxConcurrentReconciles"),
            n,
            1,
            I32_MAX,
        )?),
    };
    out.verbosity = match m.verbosity {
        None | Some(GO_DEFAULT_VERBOSITY) => None,
        Some(v) => Some(in_range(&format!("{path}.verbosity"), v, 0, I32_MAX)?),
    };
    if !m.feature_gates.is_empty() {
        out.feature_gates = Some(m.feature_gates.clone());
    }
    if !flags.0.is_empty() {
        out.additional_args = Some(flags.0);
    }
    Ok((out != crate::ManagerSpec::default()).then_some(out))
}

/// The sync period, leader election and graceful shutdown: durations checked as Go parses them.
fn convert_durations(
    m: &ManagerSpec,
    path: &str,
    out: &mut crate::ManagerSpec,
) -> Result<(), ConversionError> {
    if let Some(p) = &m.sync_period {
        let secs = whole_seconds(&format!("{path}.syncPeriod"), p)?;
        if secs > 0 {
            out.sync_period = Some(IntOrString::String(format!("{secs}s")));
        }
    }
    if let Some(le) = &m.leader_election {
        out.leader_election = Some(convert_leader_election(
            le,
            &format!("{path}.leaderElection"),
        )?);
    }
    if let Some(g) = &m.graceful_shutdown {
        parse_go_duration(g).map_err(|reason| ConversionError::InvalidDuration {
            field: format!("{path}.gracefulShutDown"),
            value: g.clone(),
            reason,
        })?;
        out.graceful_shutdown = Some(g.clone());
    }
    Ok(())
}

/// `manager.controller`: per-kind concurrency becomes `--<kind>-concurrency` flags; the settings
/// no manager flag carries are noted in `ignored`.
fn convert_controller(
    c: &ControllerConfigurationSpec,
    path: &str,
    flags: &mut Flags,
    ignored: &mut Vec<String>,
) -> Result<(), ConversionError> {
    if c.cache_sync_timeout.is_some() {
        ignored.push(format!(
            "{path}.controller.cacheSyncTimeout is ignored: no manager flag sets it (the other operator ignored it too); give the provider's own timeout flag in additionalArgs if it has one"
        ));
    }
    if c.recover_panic.is_some() {
        ignored.push(format!(
            "{path}.controller.recoverPanic is ignored: no manager flag sets it (the other operator ignored it too); give the provider's own flag in additionalArgs if it has one"
        ));
    }
    for (group_kind, n) in &c.group_kind_concurrency {
        let field = format!("{path}.controller.groupKindConcurrency[{group_kind}]");
        let kind = group_kind
            .split_once('.')
            .map_or(group_kind.as_str(), |(k, _)| k)
            .to_ascii_lowercase();
        if kind.is_empty() || kind.contains(char::is_whitespace) || kind.contains('=') {
            return Err(ConversionError::InvalidFlagName {
                field,
                key: group_kind.clone(),
            });
        }
        flags.insert(&field, format!("{kind}-concurrency"), n.to_string())?;
    }
    Ok(())
}

/// The namespace flag: manager.cacheNamespace wins over the container's args (the other
/// operator sets it after them); additionalArgs may only repeat the same value (the other
/// operator refuses an additional arg that is already set). The other additional args go to
/// `flags`.
fn convert_namespace(
    m: &ManagerSpec,
    container_namespace: Option<(String, String)>,
    path: &str,
    flags: &mut Flags,
) -> Result<Option<String>, ConversionError> {
    let mut namespace = non_empty(&m.cache_namespace);
    let args_field = format!("{path}.additionalArgs");
    for (key, value) in &m.additional_args {
        let name = flag_name(&args_field, key)?;
        if name != "namespace" {
            flags.insert(&args_field, name, value.clone())?;
            continue;
        }
        let earlier = namespace
            .clone()
            .or_else(|| container_namespace.as_ref().map(|(ns, _)| ns.clone()));
        match earlier {
            Some(first) if first != *value => {
                return Err(ConversionError::ConflictingFlag {
                    field: args_field,
                    flag: "namespace".into(),
                    first,
                    second: value.clone(),
                });
            }
            _ => namespace = Some(value.clone()),
        }
    }
    Ok(namespace.or(container_namespace.map(|(ns, _)| ns)))
}

/// The metrics, health and webhook endpoints, each kept only when one of its fields is set.
fn convert_endpoints(
    m: &ManagerSpec,
    path: &str,
    out: &mut crate::ManagerSpec,
) -> Result<(), ConversionError> {
    let metrics = crate::ControllerMetrics {
        bind_address: non_empty(&m.metrics.bind_address),
        diagnostics_address: non_empty(&m.metrics.diagnostics_address),
        insecure_diagnostics: m.metrics.insecure_diagnostics.then_some(true),
    };
    if metrics != crate::ControllerMetrics::default() {
        out.metrics = Some(metrics);
    }
    let health = crate::ControllerHealth {
        health_probe_bind_address: non_empty(&m.health.health_probe_bind_address),
        readiness_endpoint_name: non_empty(&m.health.readiness_endpoint_name),
        liveness_endpoint_name: non_empty(&m.health.liveness_endpoint_name),
    };
    if health != crate::ControllerHealth::default() {
        out.health = Some(health);
    }
    let webhook = crate::ControllerWebhook {
        port: match m.webhook.port {
            Some(p) => Some(in_range(&format!("{path}.webhook.port"), p, 1, 65535)?),
            None => None,
        },
        host: non_empty(&m.webhook.host),
        cert_dir: non_empty(&m.webhook.cert_dir),
    };
    if webhook != crate::ControllerWebhook::default() {
        out.webhook = Some(webhook);
    }
    Ok(())
}

const I32_MAX: i64 = i32::MAX as i64;

// The deployment settings, and a --namespace flag of the manager container (with its path).
fn convert_deployment(
    d: &DeploymentSpec,
    path: &str,
) -> Result<(crate::DeploymentSpec, Option<(String, String)>), ConversionError> {
    let replicas = match d.replicas {
        Some(r) => Some(in_range(&format!("{path}.replicas"), r, 0, I32_MAX)?),
        None => None,
    };
    let mut namespace = None;
    let mut containers = Vec::with_capacity(d.containers.len());
    for (i, c) in d.containers.iter().enumerate() {
        let (c, ns) = convert_container(c, &format!("{path}.containers[{i}]"))?;
        if ns.is_some() {
            namespace = ns;
        }
        containers.push(c);
    }
    Ok((
        crate::DeploymentSpec {
            replicas,
            node_selector: d.node_selector.clone(),
            tolerations: d.tolerations.clone(),
            affinity: d.affinity.clone(),
            containers,
            service_account_name: non_empty(&d.service_account_name),
            image_pull_secrets: d.image_pull_secrets.clone(),
        },
        namespace,
    ))
}

fn convert_container(
    c: &ContainerSpec,
    path: &str,
) -> Result<(crate::ContainerSpec, Option<(String, String)>), ConversionError> {
    if c.name.trim().is_empty() {
        return Err(ConversionError::Empty {
            field: format!("{path}.name"),
        });
    }
    let image = match &c.image_url {
        Some(url) if url.trim().is_empty() => {
            return Err(ConversionError::Empty {
                field: format!("{path}.imageUrl"),
            });
        }
        Some(url) => Some(ContainerImage::Meta(whole_image(url.trim()))),
        None => None,
    };
    let field = format!("{path}.args");
    let mut flags = Flags::default();
    let mut namespace = None;
    for (key, value) in &c.args {
        let name = flag_name(&field, key)?;
        if name == "namespace" {
            if c.name != MANAGER_CONTAINER {
                return Err(ConversionError::NamespaceFlag { field });
            }
            if let Some((first, _)) = namespace.as_ref().filter(|(ns, _)| ns != value) {
                return Err(ConversionError::ConflictingFlag {
                    field,
                    flag: name,
                    first: String::clone(first),
                    second: value.clone(),
                });
            }
            namespace = Some((value.clone(), field.clone()));
            continue;
        }
        flags.insert(&field, name, value.clone())?;
    }
    let container = crate::ContainerSpec {
        name: c.name.clone(),
        image,
        args: (!flags.0.is_empty()).then(|| {
            flags
                .0
                .into_iter()
                .map(|(k, v)| (k, IntOrString::String(v)))
                .collect()
        }),
        env: (!c.env.is_empty()).then(|| c.env.clone()),
        resources: c.resources.clone(),
        command: c.command.clone(),
    };
    Ok((container, namespace))
}

// An image reference as pieces that leave nothing of the release's image in place.
fn whole_image(reference: &str) -> ImageMeta {
    let mut meta = crate::image::split_reference(reference);
    if meta.repository.is_none() {
        meta.repository = Some("docker.io/library".into());
    }
    if meta.tag.is_none() {
        meta.tag = Some("latest".into());
    }
    meta
}

fn convert_leader_election(
    le: &LeaderElectionConfiguration,
    path: &str,
) -> Result<crate::LeaderElectionConfiguration, ConversionError> {
    let seconds = |name: &str, value: &str| -> Result<Option<String>, ConversionError> {
        let secs = whole_seconds(&format!("{path}.{name}"), value)?;
        Ok((secs > 0).then(|| format!("{secs}s")))
    };
    Ok(crate::LeaderElectionConfiguration {
        leader_elect: Some(le.leader_elect),
        lease_duration: seconds("leaseDuration", &le.lease_duration)?,
        renew_deadline: seconds("renewDeadline", &le.renew_deadline)?,
        retry_period: seconds("retryPeriod", &le.retry_period)?,
        resource_lock: non_empty(&le.resource_lock),
        resource_name: non_empty(&le.resource_name),
        resource_namespace: non_empty(&le.resource_namespace),
    })
}

fn convert_fetch_config(
    f: &FetchConfiguration,
) -> Result<Option<crate::FetchConfiguration>, ConversionError> {
    let url = f.url.as_deref().filter(|s| !s.is_empty());
    let oci = f.oci.as_deref().filter(|s| !s.is_empty());
    let set = [url.is_some(), oci.is_some(), f.selector.is_some()]
        .into_iter()
        .filter(|x| *x)
        .count();
    match set {
        0 => Ok(None),
        1 => Ok(Some(crate::FetchConfiguration {
            url: url.map(https_url).transpose()?,
            selector: f.selector.clone(),
            oci: oci.map(str::to_string),
        })),
        _ => Err(ConversionError::ConflictingSources),
    }
}

// The scheme of a URL is case-insensitive; this operator's API wants it lower-case.
fn https_url(url: &str) -> Result<String, ConversionError> {
    match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") && !rest.is_empty() => {
            Ok(format!("https://{rest}"))
        }
        _ => Err(ConversionError::UnsupportedUrl {
            field: "spec.fetchConfig.url".into(),
            url: url.to_string(),
        }),
    }
}

fn convert_patch(p: &Patch) -> crate::TargetedPatch {
    crate::TargetedPatch {
        patch: p.patch.clone(),
        target: p.target.as_ref().map(|t| crate::PatchSelector {
            group: non_empty(&t.group),
            version: non_empty(&t.version),
            kind: non_empty(&t.kind),
            name: non_empty(&t.name),
            namespace: non_empty(&t.namespace),
            label_selector: non_empty(&t.label_selector),
        }),
    }
}

fn convert_version(version: &str) -> Result<Option<String>, ConversionError> {
    let v = version.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let bare = v.strip_prefix('v').unwrap_or(v);
    semver::Version::parse(bare).map_err(|e| ConversionError::InvalidVersion {
        version: version.to_string(),
        reason: e.to_string(),
    })?;
    Ok(Some(format!("v{bare}")))
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn in_range(field: &str, value: i64, min: i64, max: i64) -> Result<i32, ConversionError> {
    let out_of_range = || ConversionError::OutOfRange {
        field: field.to_string(),
        value,
        min,
        max,
    };
    if value < min || value > max {
        return Err(out_of_range());
    }
    i32::try_from(value).map_err(|_| out_of_range())
}
