//! `upgrade plan` and `upgrade apply`.
//!
//! The plan shows, for each provider, its current version and contract, the newest release of
//! that contract and the newest release overall. `apply` edits the providers' spec.version to
//! the newest release of the target contract (by default the core provider's current one).
//! When that changes any provider's contract it runs the sequence the specification asks the
//! CLI to embed: pause every provider, upgrade the core provider then the others while paused,
//! and unpause the providers it paused. Providers it pauses carry an annotation, so an
//! interrupted sequence resumes (and unpauses them) when run again.

use std::time::Duration;

use anyhow::{Context, bail};
use capi_components::{
    metadata::Metadata,
    upgrade::{self, ProviderPlan},
};
use capi_operator_api::{AnyProvider, ProviderType};
use capi_release_sources::ReleaseSource;
use serde_json::json;

use crate::{
    cluster::{Cluster, ClusterFlags, describe},
    output::{self, OutputFlags},
    progress::{self, Target, Want},
    providers::{ProviderArg, ProviderFlags},
    release::{self, SourceFlags},
};

/// Annotation on the providers `upgrade apply` paused for a contract change.
pub const PAUSED_BY_ANNOTATION: &str = "management.cluster.x-k8s.io/paused-by-upgrade";

/// `upgrade` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// For each provider: its current version and contract, the next version within its
    /// contract, and the latest release.
    #[command(after_help = crate::examples::UPGRADE_PLAN)]
    Plan(PlanArgs),
    /// Move every provider to the newest release of a contract (the core provider's current
    /// one by default); a contract change pauses, upgrades and unpauses. With provider flags
    /// (--core NAME:VERSION, -i NAME:VERSION, ...), only those, each to its version within its
    /// contract. With --repository DIR, the target releases of providers reading ConfigMaps
    /// are preloaded from DIR first.
    #[command(after_help = crate::examples::UPGRADE_APPLY)]
    Apply(Box<ApplyArgs>),
}

/// Flags of `upgrade plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    output: OutputFlags,
}

/// Flags of `upgrade apply`.
#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    #[command(flatten)]
    sources: SourceFlags,
    /// The contract to move to (e.g. v1beta2); the core provider's current contract by default.
    #[arg(long, value_name = "CONTRACT")]
    contract: Option<String>,
    // Only these providers, each to the version given (NAME[:NAMESPACE]:VERSION), as
    // clusterctl's `upgrade apply --core ... --infrastructure ...`.
    #[command(flatten)]
    providers: ProviderFlags,
    /// Show what would change, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Wait until upgraded providers are Ready (a contract change always waits).
    #[arg(long)]
    wait: bool,
    /// How long each wait lasts (e.g. 300s, 10m).
    #[arg(long, default_value = "10m", value_parser = crate::parse_duration)]
    timeout: Duration,
}

/// A provider and its plan.
pub struct Planned {
    /// The provider object.
    pub provider: AnyProvider,
    /// Its plan.
    pub plan: ProviderPlan,
}

fn current_version(p: &AnyProvider) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.installed_version.clone())
        .or_else(|| p.spec.version.clone())
        .filter(|v| !v.is_empty())
}

/// A provider that could not be planned (its source unreachable, its releases unreadable)
/// and why.
pub struct Unplanned {
    /// The provider object.
    pub provider: AnyProvider,
    /// Why, with the chain of causes.
    pub why: String,
}

/// The plans of the cluster's providers: every one that could be made, and the others with
/// why, so one unreachable source does not hide the plan of the rest.
pub struct Plans {
    /// Providers with a plan.
    pub planned: Vec<Planned>,
    /// Providers without one.
    pub unplanned: Vec<Unplanned>,
}

impl Plans {
    /// The planned providers, or an error naming every provider that could not be planned
    /// (for `upgrade apply`, which moves all providers together or none).
    fn all_or_error(self) -> anyhow::Result<Vec<Planned>> {
        if self.unplanned.is_empty() {
            return Ok(self.planned);
        }
        let why: Vec<String> = self
            .unplanned
            .iter()
            .map(|u| format!("{}: {}", describe(&u.provider), u.why))
            .collect();
        bail!(
            "{} provider(s) could not be planned, so nothing is changed:\n  {}",
            why.len(),
            why.join("\n  ")
        )
    }
}

/// Plans every provider of the cluster.
pub async fn plan_all(cluster: &Cluster, flags: &SourceFlags) -> anyhow::Result<Plans> {
    let mut plans = Plans {
        planned: Vec::new(),
        unplanned: Vec::new(),
    };
    for p in cluster.providers().await? {
        let Some(current) = current_version(&p) else {
            eprintln!("{}: no version installed yet; skipped", describe(&p));
            continue;
        };
        match plan_one(cluster, &p, &current, flags).await {
            Ok(plan) => plans.planned.push(Planned { provider: p, plan }),
            Err(e) => plans.unplanned.push(Unplanned {
                provider: p,
                why: format!("{e:#}"),
            }),
        }
    }
    Ok(plans)
}

/// The release tags of `p`'s source and the metadata of the newest (which, as in clusterctl,
/// gives every version's contract).
async fn releases_of(
    cluster: &Cluster,
    p: &AnyProvider,
    flags: &SourceFlags,
) -> anyhow::Result<(Vec<String>, Metadata)> {
    // The provider's own credentials; a Secret that cannot be read leaves none, and a source
    // that needs them then says so in its refusal.
    let vars = crate::desired::variables(cluster, p)
        .await
        .unwrap_or_default();
    let located = release::locate_provider(&cluster.client, p, flags, &vars)?;
    let tags = located
        .source
        .list_versions()
        .await
        .with_context(|| format!("listing versions from {}", located.description))?;
    let newest = upgrade::newest_tag(&tags)
        .with_context(|| format!("{} offers no release", located.description))?;
    let meta = located
        .source
        .fetch_file(newest, "metadata.yaml")
        .await
        .with_context(|| format!("metadata.yaml of {newest}"))?;
    let meta = Metadata::parse(&String::from_utf8_lossy(&meta))
        .with_context(|| format!("metadata.yaml of {newest}"))?;
    Ok((tags, meta))
}

async fn plan_one(
    cluster: &Cluster,
    p: &AnyProvider,
    current: &str,
    flags: &SourceFlags,
) -> anyhow::Result<ProviderPlan> {
    let (tags, meta) = releases_of(cluster, p, flags).await?;
    let contract = p.status.as_ref().and_then(|s| s.contract.as_deref());
    Ok(upgrade::plan(current, contract, &tags, &meta)?)
}

fn core_contract(planned: &[Planned]) -> Option<String> {
    planned
        .iter()
        .find(|p| p.provider.provider_type == ProviderType::Core)
        .and_then(|p| p.plan.current_contract.clone())
}

/// The plan as data, for `-o json|yaml`: the table's columns, and every contract's target;
/// a provider that could not be planned has its current version and an `error`.
fn plan_value(plans: &Plans) -> serde_json::Value {
    let unplanned = plans.unplanned.iter().map(|u| {
        json!({
            "name": u.provider.name(),
            "namespace": u.provider.namespace(),
            "type": u.provider.provider_type.kind(),
            "currentVersion": current_version(&u.provider),
            "error": u.why,
        })
    });
    plans
        .planned
        .iter()
        .map(|p| {
            let pl = &p.plan;
            json!({
                "name": p.provider.name(),
                "namespace": p.provider.namespace(),
                "type": p.provider.provider_type.kind(),
                "currentVersion": pl.current,
                "contract": pl.current_contract,
                "nextVersion": pl.next_in_contract(),
                "latest": pl.latest.as_ref().map(|(v, c)| json!({"version": v, "contract": c})),
                "newestByContract": pl.by_contract,
            })
        })
        .chain(unplanned)
        .collect()
}

/// What the table shows in the version columns of a provider that could not be planned.
const NOT_PLANNED: &str = "unknown (see below)";

fn print_plan(plans: &Plans) {
    let unplanned = plans.unplanned.iter().map(|u| {
        let p = &u.provider;
        [
            p.name().to_string(),
            p.namespace().to_string(),
            p.provider_type.kind().to_string(),
            current_version(p).unwrap_or_default(),
            p.status
                .as_ref()
                .and_then(|s| s.contract.clone())
                .unwrap_or_else(|| "?".into()),
            NOT_PLANNED.into(),
            NOT_PLANNED.into(),
        ]
    });
    let rows: Vec<[String; 7]> = plans
        .planned
        .iter()
        .map(|p| {
            let pl = &p.plan;
            [
                p.provider.name().to_string(),
                p.provider.namespace().to_string(),
                p.provider.provider_type.kind().to_string(),
                pl.current.clone(),
                pl.current_contract.clone().unwrap_or_else(|| "?".into()),
                pl.next_in_contract()
                    .map(str::to_string)
                    .unwrap_or_else(|| "Already up to date".into()),
                pl.latest
                    .as_ref()
                    .map(|(v, c)| format!("{v} ({c})"))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .chain(unplanned)
        .collect();
    let header = [
        "NAME",
        "NAMESPACE",
        "TYPE",
        "CURRENT VERSION",
        "CONTRACT",
        "NEXT VERSION",
        "LATEST (CONTRACT)",
    ];
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths.iter())
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    say!("{}", line(header.to_vec()));
    for r in &rows {
        say!("{}", line(r.iter().map(String::as_str).collect()));
    }
}

/// The contracts any provider offers a move to, newer than `current`, each with the
/// providers lacking a release of it.
fn other_contracts(planned: &[Planned], current: &str) -> Vec<(String, Vec<String>)> {
    let mut contracts: Vec<String> = planned
        .iter()
        .flat_map(|p| p.plan.by_contract.keys().cloned())
        .filter(|c| c.as_str() != current)
        .collect();
    contracts.sort();
    contracts.dedup();
    contracts
        .into_iter()
        .map(|c| {
            let lacking = planned
                .iter()
                .filter(|p| !p.plan.offers(&c))
                .map(|p| describe(&p.provider))
                .collect();
            (c, lacking)
        })
        .collect()
}

/// Prints the plan of every provider that could be planned; fails at the end, naming each
/// provider that could not be.
async fn plan_cmd(args: &PlanArgs, cluster: &Cluster) -> anyhow::Result<()> {
    let plans = plan_all(cluster, &args.sources).await?;
    if let Some(format) = args.output.output {
        output::print(&plan_value(&plans), format)?;
    } else {
        print_plans(&plans, cluster).await?;
    }
    if plans.unplanned.is_empty() {
        return Ok(());
    }
    bail!(
        "{} of {} providers could not be planned",
        plans.unplanned.len(),
        plans.unplanned.len() + plans.planned.len()
    )
}

async fn print_plans(plans: &Plans, cluster: &Cluster) -> anyhow::Result<()> {
    let planned = &plans.planned;
    if planned.is_empty() && plans.unplanned.is_empty() {
        say!("no providers installed");
        let cert_manager = crate::certmanager::installed(cluster).await?;
        say!(
            "{}",
            crate::certmanager::plan_line(cert_manager.as_ref().map(Option::as_deref))
        );
        return Ok(());
    }
    print_plan(plans);
    if !plans.unplanned.is_empty() {
        say!("");
        say!("Not planned:");
        for u in &plans.unplanned {
            say!("  {}: {}", describe(&u.provider), u.why);
        }
    }
    let cert_manager = crate::certmanager::installed(cluster).await?;
    say!("");
    say!(
        "{}",
        crate::certmanager::plan_line(cert_manager.as_ref().map(Option::as_deref))
    );
    let current = core_contract(planned).unwrap_or_default();
    say!("");
    if planned.iter().any(|p| p.plan.next_in_contract().is_some()) {
        say!("Upgrade within contract {current}: kubectl capi-providers upgrade apply");
    } else {
        let which = if plans.unplanned.is_empty() {
            "Every provider"
        } else {
            "Every planned provider"
        };
        say!("{which} is up to date within contract {current}.");
    }
    for (c, lacking) in other_contracts(planned, &current) {
        if lacking.is_empty() {
            say!(
                "Move to contract {c} (pause, upgrade, unpause): kubectl capi-providers upgrade apply --contract {c}"
            );
        } else {
            say!(
                "Contract {c} is not possible yet: no release of {} follows it",
                lacking.join(", ")
            );
        }
    }
    Ok(())
}

/// A provider's move: from its current version to `to`.
struct Move {
    provider: AnyProvider,
    to: String,
    contract_changes: bool,
}

fn moves(planned: &[Planned], contract: &str) -> anyhow::Result<Vec<Move>> {
    let mut out = Vec::new();
    let mut lacking = Vec::new();
    for p in planned {
        let same = p.plan.current_contract.as_deref() == Some(contract);
        let to = if same {
            p.plan.target(contract).map(str::to_string)
        } else {
            match p.plan.by_contract.get(contract) {
                Some(v) => Some(v.clone()),
                None => {
                    lacking.push(describe(&p.provider));
                    None
                }
            }
        };
        if let Some(to) = to {
            out.push(Move {
                provider: p.provider.clone(),
                to,
                contract_changes: !same,
            });
        }
    }
    if !lacking.is_empty() {
        bail!(
            "no release following contract {contract} for {}: every provider must follow the same contract",
            lacking.join(", ")
        );
    }
    Ok(out)
}

async fn set_version(cluster: &Cluster, m: &Move) -> anyhow::Result<()> {
    cluster
        .patch_provider(&m.provider, &json!({"spec": {"version": m.to}}))
        .await?;
    say!(
        "{}: {} -> {}",
        describe(&m.provider),
        current_version(&m.provider).unwrap_or_default(),
        m.to
    );
    Ok(())
}

/// With `--repository`, writes the target releases of providers that read ConfigMaps
/// (fetchConfig.selector) into their namespace first, labelled for their selector.
async fn preload_targets(
    cluster: &Cluster,
    moves: &[Move],
    flags: &SourceFlags,
) -> anyhow::Result<()> {
    let Some(dir) = &flags.repository else {
        return Ok(());
    };
    for m in moves {
        let p = &m.provider;
        let Some(sel) = p
            .spec
            .fetch_config
            .as_ref()
            .and_then(|f| f.selector.as_ref())
        else {
            continue;
        };
        let located =
            release::locate_source(p.provider_type, p.name(), &dir.to_string_lossy(), flags)?;
        let r = located.fetch(Some(&m.to)).await?;
        let mut cm = crate::preload::configmap_value(p.provider_type, p.name(), p.namespace(), &r)?;
        if let Some(labels) = cm
            .pointer_mut("/metadata/labels")
            .and_then(|l| l.as_object_mut())
        {
            for (k, v) in sel.match_labels.iter().flatten() {
                labels.insert(k.clone(), json!(v));
            }
        }
        cluster.apply(&cm).await?;
        eprintln!(
            "{}: {} preloaded from {}",
            describe(p),
            m.to,
            located.description
        );
    }
    Ok(())
}

fn paused_by_us(p: &AnyProvider) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PAUSED_BY_ANNOTATION))
}

/// The moves of `upgrade apply --core NAME:VERSION ...`: each provider named must be installed,
/// its version a release of its source, newer than the installed one and of the same contract
/// (a contract change moves every provider together: `--contract`).
async fn chosen_moves(
    cluster: &Cluster,
    named: &[ProviderArg],
    flags: &SourceFlags,
) -> anyhow::Result<Vec<Move>> {
    let existing = cluster.providers().await?;
    let mut out = Vec::new();
    for (arg, p) in named
        .iter()
        .zip(crate::providers::installed(&existing, named)?)
    {
        let Some(to) = arg.version.clone() else {
            bail!(
                "{}: give the version to upgrade to (NAME:VERSION)",
                arg.describe()
            );
        };
        let current = current_version(&p).unwrap_or_default();
        let (tags, meta) = releases_of(cluster, &p, flags).await?;
        if !tags.contains(&to) {
            bail!("{}: no release {to} in its source", describe(&p));
        }
        let newer = match (
            capi_release::version::parse(&to),
            capi_release::version::parse(&current),
        ) {
            (Some(t), Some(c)) => t > c,
            _ => true,
        };
        if !newer {
            bail!("{}: {to} is not newer than {current}", describe(&p));
        }
        let target = meta.contract_for(&to)?.to_string();
        let installed = p.status.as_ref().and_then(|s| s.contract.clone());
        if installed.as_deref().is_some_and(|c| c != target) {
            bail!(
                "{}: {to} follows contract {target}, not {}: a contract change moves every provider together (upgrade apply --contract {target})",
                describe(&p),
                installed.unwrap_or_default()
            );
        }
        out.push(Move {
            provider: p,
            to,
            contract_changes: false,
        });
    }
    Ok(out)
}

/// Sets the versions, core first, and with `--wait` waits until the providers are Ready.
async fn apply_within_contract(
    args: &ApplyArgs,
    cluster: &Cluster,
    moves: &[Move],
) -> anyhow::Result<()> {
    let (core, others): (Vec<&Move>, Vec<&Move>) = moves
        .iter()
        .partition(|m| m.provider.provider_type == ProviderType::Core);
    for m in core.iter().chain(others.iter()) {
        set_version(cluster, m).await?;
    }
    if args.wait {
        let targets: Vec<Target> = moves
            .iter()
            .map(|m| Target::of(&m.provider, Some(&m.to), Want::Ready))
            .collect();
        progress::wait(
            cluster,
            &targets,
            args.timeout,
            "the upgraded providers to be Ready",
        )
        .await?;
    }
    Ok(())
}

/// `upgrade apply` of the providers named, each to its version.
async fn apply_chosen(
    args: &ApplyArgs,
    cluster: &Cluster,
    named: &[ProviderArg],
) -> anyhow::Result<()> {
    if args.contract.is_some() {
        bail!("--contract moves every provider: name no provider with it");
    }
    let moves = chosen_moves(cluster, named, &args.sources).await?;
    for m in &moves {
        say!(
            "{}: {} -> {}",
            describe(&m.provider),
            current_version(&m.provider).unwrap_or_default(),
            m.to
        );
    }
    if args.dry_run {
        return Ok(());
    }
    preload_targets(cluster, &moves, &args.sources).await?;
    apply_within_contract(args, cluster, &moves).await
}

async fn apply_cmd(args: &ApplyArgs, cluster: &Cluster) -> anyhow::Result<()> {
    let named = args.providers.parse()?;
    if !named.is_empty() {
        return apply_chosen(args, cluster, &named).await;
    }
    let planned = plan_all(cluster, &args.sources).await?.all_or_error()?;
    let contract = match (&args.contract, core_contract(&planned)) {
        (Some(c), _) => c.clone(),
        (None, Some(c)) => c,
        (None, None) => bail!("no core provider reports a contract: give --contract"),
    };
    let moves = moves(&planned, &contract)?;
    let changes = moves.iter().any(|m| m.contract_changes);
    let resuming: Vec<&AnyProvider> = planned
        .iter()
        .map(|p| &p.provider)
        .filter(|p| paused_by_us(p))
        .collect();
    if moves.is_empty() && resuming.is_empty() {
        say!("every provider is up to date for contract {contract}");
        return Ok(());
    }
    show_moves(&moves, &contract);
    if args.dry_run {
        if changes {
            say!(
                "the contract changes to {contract}: every provider would be paused, upgraded (core first) and unpaused"
            );
        }
        return Ok(());
    }
    preload_targets(cluster, &moves, &args.sources).await?;
    if !changes && resuming.is_empty() {
        return apply_within_contract(args, cluster, &moves).await;
    }
    let (core, others): (Vec<&Move>, Vec<&Move>) = moves
        .iter()
        .partition(|m| m.provider.provider_type == ProviderType::Core);
    // The contract changes: pause → upgrade → unpause.
    let all: Vec<&AnyProvider> = planned.iter().map(|p| &p.provider).collect();
    eprintln!("contract change to {contract}: pausing every provider");
    pause_all(cluster, &all, args.timeout).await?;
    upgrade_core_first(cluster, &core, &others, args.timeout).await?;
    unpause(cluster, args.timeout).await?;
    say!("every provider follows contract {contract}");
    Ok(())
}

/// Says what each move does.
fn show_moves(moves: &[Move], contract: &str) {
    for m in moves {
        say!(
            "{}: {} -> {}{}",
            describe(&m.provider),
            current_version(&m.provider).unwrap_or_default(),
            m.to,
            if m.contract_changes {
                format!(" (contract {contract})")
            } else {
                String::new()
            }
        );
    }
}

/// Pauses every provider not paused yet (marked as paused by this command) and waits until
/// all are.
async fn pause_all(
    cluster: &Cluster,
    all: &[&AnyProvider],
    timeout: Duration,
) -> anyhow::Result<()> {
    for p in all {
        if !p.spec.paused {
            cluster
                .patch_provider(
                    p,
                    &json!({"metadata": {"annotations": {PAUSED_BY_ANNOTATION: "true"}}, "spec": {"paused": true}}),
                )
                .await?;
        }
    }
    let paused: Vec<Target> = all
        .iter()
        .map(|p| Target::of(p, None, Want::Paused))
        .collect();
    progress::wait(cluster, &paused, timeout, "every provider to be paused").await
}

/// Upgrades the core provider, waits until it is installed, then does the same for the others.
async fn upgrade_core_first(
    cluster: &Cluster,
    core: &[&Move],
    others: &[&Move],
    timeout: Duration,
) -> anyhow::Result<()> {
    for (group, what) in [(core, "the core provider"), (others, "the other providers")] {
        if group.is_empty() {
            continue;
        }
        for m in group {
            set_version(cluster, m).await?;
        }
        let targets: Vec<Target> = group
            .iter()
            .map(|m| Target::of(&m.provider, Some(&m.to), Want::Installed))
            .collect();
        progress::wait(
            cluster,
            &targets,
            timeout,
            &format!("{what} to be upgraded"),
        )
        .await?;
    }
    Ok(())
}

/// Unpauses what this command paused (now or in an interrupted earlier run) and waits until
/// those providers are Ready.
async fn unpause(cluster: &Cluster, timeout: Duration) -> anyhow::Result<()> {
    let mut unpaused = Vec::new();
    for p in cluster.providers().await? {
        if paused_by_us(&p) {
            cluster
                .patch_provider(
                    &p,
                    &json!({"metadata": {"annotations": {PAUSED_BY_ANNOTATION: null}}, "spec": {"paused": false}}),
                )
                .await?;
            unpaused.push(Target::of(&p, None, Want::Ready));
        }
    }
    eprintln!("unpausing {} providers", unpaused.len());
    progress::wait(cluster, &unpaused, timeout, "the providers to be Ready").await
}

/// Runs `upgrade`.
pub async fn run(cmd: &Command, flags: &ClusterFlags) -> anyhow::Result<()> {
    let cluster = Cluster::connect(flags).await?;
    match cmd {
        Command::Plan(a) => plan_cmd(a, &cluster).await,
        Command::Apply(a) => apply_cmd(a, &cluster).await,
    }
}
