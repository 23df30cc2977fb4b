//! `delete`: removes providers as `clusterctl delete` does, through the operator. The include
//! flags become the object's `spec.deletionPolicy` (the operator does the removal, so the
//! policy holds however the object goes), then the objects are deleted and followed until they
//! are gone. `--all` deletes every provider, the core provider last.

use std::time::{Duration, Instant};

use anyhow::bail;
use capi_operator_api::{AnyProvider, DeletionPolicy, ProviderType, conditions::DELETING};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject},
};
use serde_json::json;

use crate::{
    cluster::{Cluster, ClusterFlags, describe, provider_resource},
    providers::{ProviderArg, ProviderFlags},
};

/// Flags of `delete`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    providers: ProviderFlags,
    /// Delete every provider (the core provider last).
    #[arg(long)]
    all: bool,
    /// Also remove the providers' CRDs: deletionPolicy Purge, which removes the CRDs and the
    /// namespace once nothing else is left in them.
    #[arg(long)]
    include_crd: bool,
    /// Also remove the providers' namespaces: deletionPolicy Purge, as --include-crd.
    #[arg(long)]
    include_namespace: bool,
    /// How long to wait until the providers are gone (e.g. 300s, 10m).
    #[arg(long, default_value = "10m", value_parser = crate::parse_duration)]
    timeout: Duration,
}

/// The deletion policy clusterctl's include flags ask for: the components only (Block, which
/// also waits while custom resources exist), or everything (Purge).
pub fn policy(include_crd: bool, include_namespace: bool) -> DeletionPolicy {
    if include_crd || include_namespace {
        DeletionPolicy::Purge
    } else {
        DeletionPolicy::Block
    }
}

/// The providers `args` name among `existing`: every one for `--all`. A name matching
/// nothing, or providers in several namespaces without a namespace given, is refused.
pub fn select(
    existing: &[AnyProvider],
    named: &[ProviderArg],
    all: bool,
) -> anyhow::Result<Vec<AnyProvider>> {
    if all {
        if !named.is_empty() {
            bail!("--all deletes every provider: name none with it");
        }
        return Ok(existing.to_vec());
    }
    if named.is_empty() {
        bail!("name the providers to delete (--core, --infrastructure, ...) or give --all");
    }
    crate::providers::installed(existing, named)
}

/// Sets the policy, deletes each provider and waits until all are gone.
async fn delete_all(
    cluster: &Cluster,
    providers: &[AnyProvider],
    policy: DeletionPolicy,
    timeout: Duration,
) -> anyhow::Result<()> {
    for p in providers {
        cluster
            .patch_provider(p, &json!({"spec": {"deletionPolicy": policy}}))
            .await?;
        let api: Api<DynamicObject> = Api::namespaced_with(
            cluster.client.clone(),
            p.namespace(),
            &provider_resource(p.provider_type),
        );
        api.delete(p.name(), &DeleteParams::background()).await?;
        say!("deleting {} (deletionPolicy {policy:?})", describe(p));
    }
    wait_gone(cluster, providers, timeout).await
}

/// Waits until every provider is gone, printing each change of its Deleting condition.
async fn wait_gone(
    cluster: &Cluster,
    providers: &[AnyProvider],
    timeout: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut last: Vec<String> = vec![String::new(); providers.len()];
    loop {
        let mut left = 0;
        for (p, last) in providers.iter().zip(last.iter_mut()) {
            let now = cluster
                .provider(p.provider_type, p.namespace(), p.name())
                .await?;
            let line = match &now {
                None => "gone".to_string(),
                Some(o) => {
                    left += 1;
                    match o.status.as_ref().and_then(|s| s.condition(DELETING)) {
                        Some(c) => format!("{} ({}: {})", c.status, c.reason, c.message),
                        None => "waiting for the operator".to_string(),
                    }
                }
            };
            if *last != line {
                eprintln!(
                    "[{:>4}s] {}: {line}",
                    start.elapsed().as_secs(),
                    describe(p)
                );
                *last = line;
            }
        }
        if left == 0 {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            bail!(
                "timed out after {}s: {left} provider(s) not deleted yet (see their Deleting condition above)",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Runs `delete`.
pub async fn run(args: &Args, cluster_flags: &ClusterFlags) -> anyhow::Result<()> {
    let named = args.providers.parse()?;
    let cluster = Cluster::connect(cluster_flags).await?;
    let existing = cluster.providers().await?;
    let chosen = select(&existing, &named, args.all)?;
    let policy = policy(args.include_crd, args.include_namespace);
    if args.include_crd != args.include_namespace {
        eprintln!(
            "note: the operator removes a provider's CRDs and its namespace together (deletionPolicy Purge), each only once nothing else is in it"
        );
    }
    // As clusterctl: the core provider goes last, once nothing depends on it.
    let (core, others): (Vec<AnyProvider>, Vec<AnyProvider>) = chosen
        .into_iter()
        .partition(|p| p.provider_type == ProviderType::Core);
    for batch in [others, core] {
        if !batch.is_empty() {
            delete_all(&cluster, &batch, policy, args.timeout).await?;
        }
    }
    say!("deleted");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(t: ProviderType, ns: &str, name: &str) -> anyhow::Result<AnyProvider> {
        Ok(AnyProvider::from_value(json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": t.kind(),
            "metadata": {"name": name, "namespace": ns},
            "spec": {},
        }))?)
    }

    #[test]
    fn clusterctls_include_flags_map_to_a_deletion_policy() {
        assert_eq!(policy(false, false), DeletionPolicy::Block);
        assert_eq!(policy(true, false), DeletionPolicy::Purge);
        assert_eq!(policy(false, true), DeletionPolicy::Purge);
        assert_eq!(policy(true, true), DeletionPolicy::Purge);
    }

    #[test]
    fn providers_are_chosen_by_type_and_name() -> anyhow::Result<()> {
        let existing = vec![
            provider(ProviderType::Core, "capi-system", "cluster-api")?,
            provider(ProviderType::Infrastructure, "a", "docker")?,
            provider(ProviderType::Infrastructure, "b", "docker")?,
        ];
        let docker = crate::providers::parse(ProviderType::Infrastructure, "docker")?;
        let docker_b = crate::providers::parse(ProviderType::Infrastructure, "docker:b")?;
        let aws = crate::providers::parse(ProviderType::Infrastructure, "aws")?;
        assert_eq!(select(&existing, &[], true)?.len(), 3);
        let chosen = select(&existing, &[docker_b], false)?;
        assert_eq!(
            chosen.iter().map(describe).collect::<Vec<_>>(),
            ["InfrastructureProvider b/docker"]
        );
        let many = select(&existing, std::slice::from_ref(&docker), false).map(|_| ());
        assert!(
            format!("{many:?}").contains("several namespaces"),
            "{many:?}"
        );
        let missing = select(&existing, &[aws], false).map(|_| ());
        assert!(
            format!("{missing:?}").contains("not installed"),
            "{missing:?}"
        );
        assert!(select(&existing, &[docker], true).is_err());
        assert!(select(&existing, &[], false).is_err());
        Ok(())
    }
}
